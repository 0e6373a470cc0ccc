//! `glassbox reproduce RUN`: re-run a recorded run from the ledger and compare bitwise (CPU);
//! the outcome is a `reproduction` entry, which also says whether this is the same binary as
//! the run's (or a different binary of the same commit, ...). Exit 0 when reproduced, 1 when it
//! differs or the ledger's blobs are corrupt.

use std::process::ExitCode;

use glassbox_schemas::RunId;

use crate::GlobalOpts;
use crate::cli::args::{self, LabArgs};
use crate::exit;

/// `glassbox reproduce` flags.
#[derive(Debug, clap::Args)]
pub struct ReproduceArgs {
    /// The run, e.g. run-000001 (see `glassbox jobs` or `glassbox ledger log --kind result`).
    pub run: String,
    #[command(flatten)]
    pub lab: LabArgs,
    /// CPU threads (results are bitwise the same for any value). Default: all cores.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: ReproduceArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    args::runtime()?.block_on(async {
        let ctx = args::open(global, &args.lab, false).await?;
        let threads = args
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let quiet = args.json;
        let build = glassbox_lab::worker::build_identity(crate::GIT_REVISION);
        let r = glassbox_lab::reproduce::reproduce(
            ctx.recorder.clone(),
            RunId(args.run.clone()),
            threads,
            build,
            |revision, backend| {
                if quiet {
                    return;
                }
                if revision != crate::GIT_REVISION {
                    eprintln!(
                        "note: {} was made by code revision {revision}; this binary is {}: a difference may come from the code",
                        args.run,
                        crate::GIT_REVISION
                    );
                }
                eprintln!("re-running {} (originally on {backend}) on the CPU", args.run);
            },
        )
        .await;
        let r = r?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&r)?);
        } else {
            println!("program: {}", r.binary.describe());
            match &r.detail {
                None => println!(
                    "reproduced: {} bitwise ({} steps, {} metric values and the final parameters); reproduction entry {}",
                    r.run, r.steps, r.values_compared, r.entry
                ),
                Some(d) => println!("{}: {d}; reproduction entry {}", r.run, r.entry),
            }
        }
        Ok(exit::code(if r.detail.is_none() {
            exit::OK
        } else {
            exit::CHECK_FAILED
        }))
    })
}
