//! `glassbox`: the command-line front of the open lab. Thin glue: it parses flags (clap), calls
//! the library crates, prints for people (or `--json` for scripts) and maps errors to exit codes
//! ([`exit`]). It holds no domain logic of its own; each subcommand lives in `cli/<name>.rs`.

mod cli;
mod exit;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Source revision this binary was built from (`<git hash>[-dirty]`), set by `build.rs`.
pub const GIT_REVISION: &str = env!("GLASSBOX_GIT_REVISION");

const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("GLASSBOX_GIT_REVISION"),
    ")"
);

/// glassbox: propose, train, record and audit Mixture-of-Experts experiments in public.
///
/// Every config, metric, artifact and result is content-hashed (BLAKE3) into a tamper-evident
/// ledger that anyone can verify and re-run. Start with `glassbox spec check examples/tiny.toml`.
#[derive(Debug, Parser)]
#[command(name = "glassbox", version = VERSION, propagate_version = true)]
struct Cli {
    #[command(flatten)]
    global: GlobalOpts,
    #[command(subcommand)]
    command: Command,
}

/// Options every subcommand accepts.
#[derive(Debug, Clone, clap::Args)]
pub struct GlobalOpts {
    /// The lab directory (blobs, log, index database, signing key).
    #[arg(
        long,
        global = true,
        env = "GLASSBOX_LAB",
        default_value = "./glassbox-lab"
    )]
    pub lab: PathBuf,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate experiment specs and print their hash and cost; print the JSON Schema.
    #[command(subcommand)]
    Spec(cli::spec::SpecCommand),
    /// Train a spec with the MoE runner; the exit code says the outcome.
    Run(cli::run::RunArgs),
    /// Create a lab: blob store, log, index database, signing key.
    Init(cli::ledger::InitArgs),
    /// The ledger: put/get blobs, list and show entries, checkpoint, verifier key, proofs.
    #[command(subcommand)]
    Ledger(cli::ledger::LedgerCommand),
    /// Audit a ledger (lab directory or URL): exit 1 naming the first bad item.
    Verify(cli::verify::VerifyArgs),
    /// Mirror the ledger into a git repository.
    Publish(cli::publish::PublishArgs),
    /// Serve the dashboard, JSON API, live metrics and the log's static read API.
    Serve(cli::serve::ServeArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Spec(cmd) => cli::spec::run(cmd, &cli.global),
        Command::Run(args) => cli::run::run(args, &cli.global),
        Command::Init(args) => cli::ledger::run_init(args, &cli.global),
        Command::Ledger(cmd) => cli::ledger::run(cmd, &cli.global),
        Command::Verify(args) => cli::verify::run(args, &cli.global),
        Command::Publish(args) => cli::publish::run(args, &cli.global),
        Command::Serve(args) => cli::serve::run(args, &cli.global),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            // `{:#}` prints the whole context chain on one line; never a backtrace.
            eprintln!("error: {err:#}");
            exit::code(exit::OPERATIONAL)
        }
    }
}
