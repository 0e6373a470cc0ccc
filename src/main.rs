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
    /// A C2SP witness for other labs' logs: `witness init|vkey|serve|forks`.
    #[command(subcommand)]
    Witness(cli::witness::WitnessCommand),
    /// Mirror the ledger into a git repository.
    Publish(cli::publish::PublishArgs),
    /// A runner worker: lease jobs from the lab's queue, train them, record the results.
    Worker(cli::worker::WorkerArgs),
    /// The job queue: list jobs (`--json`), or `jobs cancel ID`.
    Jobs(cli::jobs::JobsArgs),
    /// The GitHub bot's deliveries: `bot deliveries [--failed] [--json]`, `bot redeliver ID`.
    #[command(subcommand)]
    Bot(cli::bot::BotCommand),
    /// Run a scaling ladder: the rungs, the fit, the forecast registered before the target runs.
    Ladder(cli::ladder::LadderArgs),
    /// Re-run a recorded run from the ledger and compare it bitwise (a `reproduction` entry).
    Reproduce(cli::reproduce::ReproduceArgs),
    /// A run's snapshot's negative log-likelihood of a text: total, per token, bits per byte.
    Score(cli::model::ScoreArgs),
    /// What a run's snapshot writes after a prompt (cached decoding; greedy at temperature 0).
    Sample(cli::model::SampleArgs),
    /// A run's snapshot as a Hugging Face `transformers` directory, recorded in the ledger.
    Export(cli::model::ExportArgs),
    /// A run's snapshot (or every snapshot) scored on an evaluation suite, with the suite's
    /// contamination by the training data: an `evaluation` entry each.
    Eval(cli::eval::EvalArgs),
    /// The leaderboards rebuilt from the log alone: only reproduced runs are ranked.
    Board(cli::board::BoardArgs),
    /// Datasets: `data import --domain NAME FILE`, `data generate --domain NAME --seed N --bytes N`.
    #[command(subcommand)]
    Data(cli::data::DataCommand),
    /// The whole path on a fresh lab, with no network: an experiment issue is proposed,
    /// validated, approved, trained, recorded and audited; then the dashboard stays up.
    Quickstart(cli::quickstart::QuickstartArgs),
    /// Serve the lab: dashboard, JSON API, live metrics, the log's static read API, the GitHub
    /// webhook and bot, and an in-process worker.
    Serve(cli::serve::ServeArgs),
}

/// `glassbox ... | head`: once the reader is gone, the program ends quietly, as Unix tools do
/// (status 141, SIGPIPE), instead of panicking on its next `println!`. The Rust runtime ignores
/// SIGPIPE, so it is put back to the default for the commands that print and end. The
/// long-running ones (`serve`, `worker`, `quickstart`) keep ignoring it (a peer that hangs up
/// must never kill a server); a print of theirs to a closed stdout ends the process through the
/// panic hook below, with the same status and no message.
fn quiet_on_closed_output(command: &Command) {
    if !matches!(
        command,
        Command::Serve(_)
            | Command::Worker(_)
            | Command::Quickstart(_)
            | Command::Witness(cli::witness::WitnessCommand::Serve(_))
    ) {
        // SAFETY: called first thing in `main`, before any other thread exists; restoring the
        // default disposition of one signal has no other effect on this process.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to std") && message.contains("Broken pipe") {
            std::process::exit(141);
        }
        default_hook(info);
    }));
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    quiet_on_closed_output(&cli.command);
    let result = match cli.command {
        Command::Spec(cmd) => cli::spec::run(cmd, &cli.global),
        Command::Run(args) => cli::run::run(args, &cli.global),
        Command::Init(args) => cli::ledger::run_init(args, &cli.global),
        Command::Ledger(cmd) => cli::ledger::run(cmd, &cli.global),
        Command::Verify(args) => cli::verify::run(args, &cli.global),
        Command::Witness(cmd) => cli::witness::run(cmd),
        Command::Publish(args) => cli::publish::run(args, &cli.global),
        Command::Worker(args) => cli::worker::run(args, &cli.global),
        Command::Jobs(args) => cli::jobs::run(args, &cli.global),
        Command::Bot(cmd) => cli::bot::run(cmd, &cli.global),
        Command::Data(cmd) => cli::data::run(cmd, &cli.global),
        Command::Ladder(args) => cli::ladder::run(args, &cli.global),
        Command::Reproduce(args) => cli::reproduce::run(args, &cli.global),
        Command::Score(args) => cli::model::score(args, &cli.global),
        Command::Sample(args) => cli::model::sample(args, &cli.global),
        Command::Export(args) => cli::model::export(args, &cli.global),
        Command::Eval(args) => cli::eval::run(args, &cli.global),
        Command::Board(args) => cli::board::run(args, &cli.global),
        Command::Serve(args) => cli::serve::run(args, &cli.global),
        Command::Quickstart(args) => cli::quickstart::run(args, &cli.global),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {}", exit::message(&err));
            exit::code(exit::of_error(&err))
        }
    }
}
