//! `glassbox jobs`: the queue as a table (or `--json`), and `glassbox jobs cancel ID`.

use std::process::ExitCode;

use glassbox_lab::{CancelOutcome, JobId};

use crate::GlobalOpts;
use crate::cli::args::{self, LabArgs};
use crate::exit;

/// `glassbox jobs` flags.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct JobsArgs {
    #[command(subcommand)]
    pub command: Option<JobsCommand>,
    #[command(flatten)]
    pub lab: LabArgs,
    /// Print JSON (one array of job objects) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// At most this many jobs, newest first.
    #[arg(long, default_value_t = 50)]
    pub limit: u32,
}

/// `glassbox jobs` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum JobsCommand {
    /// Cancel a job: at once if it waits, at its next step if it runs.
    Cancel {
        /// The job id (see `glassbox jobs`).
        id: i64,
        #[command(flatten)]
        lab: LabArgs,
    },
}

pub fn run(args: JobsArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    args::runtime()?.block_on(async {
        match args.command {
            Some(JobsCommand::Cancel { id, lab }) => {
                let ctx = args::open(global, &lab, false).await?;
                let who = args::local_user();
                match ctx.flow.cancel_job(JobId(id), &who).await {
                    Ok(CancelOutcome::Cancelled) => println!("job {id}: cancelled"),
                    Ok(CancelOutcome::Requested) => {
                        println!("job {id}: cancel requested; its worker stops it at the next step")
                    }
                    Ok(CancelOutcome::AlreadyOver(s)) => {
                        eprintln!("job {id} already ended: {s}");
                        return Ok(exit::code(exit::CHECK_FAILED));
                    }
                    Err(glassbox_lab::LabError::Queue(glassbox_lab::QueueError::NotFound(_))) => {
                        eprintln!("error: no job {id} in the queue (see `glassbox jobs`)");
                        return Ok(exit::code(exit::CHECK_FAILED));
                    }
                    Err(e) => return Err(e.into()),
                }
                Ok(exit::code(exit::OK))
            }
            None => {
                let ctx = args::open(global, &args.lab, false).await?;
                let jobs = ctx.queue.list(None, args.limit).await?;
                if args.json {
                    println!("{}", serde_json::to_string_pretty(&jobs)?);
                    return Ok(exit::code(exit::OK));
                }
                if jobs.is_empty() {
                    println!("no jobs");
                }
                for j in &jobs {
                    println!(
                        "{:>5}  {:<15} {:<28} {:<12} attempt {}/{}  {}{}",
                        j.id.0,
                        j.state.as_str(),
                        j.experiment.0,
                        j.author,
                        j.attempts,
                        j.max_attempts,
                        j.run_id.as_ref().map_or("-", |r| r.0.as_str()),
                        j.reason
                            .as_deref()
                            .map(|r| format!("  ({r})"))
                            .unwrap_or_default()
                    );
                }
                Ok(exit::code(exit::OK))
            }
        }
    })
}
