//! `glassbox worker`: a runner worker that leases jobs from the lab's queue (SQLite on one
//! machine, PostgreSQL shared by many) and trains them, until Ctrl-C / SIGTERM (or, with
//! `--exit-when-idle`, until the queue is empty). One line per job start and end.

use std::process::ExitCode;

use glassbox_lab::Worker;
use glassbox_lab::worker::JobEnd;

use crate::GlobalOpts;
use crate::cli::args::{self, ComputeArgs, LabArgs};
use crate::cli::run::BackendArg;
use crate::exit;

/// `glassbox worker` flags.
#[derive(Debug, clap::Args)]
pub struct WorkerArgs {
    #[command(flatten)]
    pub lab: LabArgs,
    /// Compute backend.
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: BackendArg,
    #[command(flatten)]
    pub compute: ComputeArgs,
    /// This worker's id in the queue. Default: `<hostname>-<pid>`.
    #[arg(long)]
    pub id: Option<String>,
    /// This worker's host name, as recorded and as jobs that avoid a host see it.
    /// Default: the machine's host name.
    #[arg(long)]
    pub host: Option<String>,
    /// Exit once the queue has no job to lease.
    #[arg(long)]
    pub exit_when_idle: bool,
}

pub fn run(args: WorkerArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    args::runtime()?.block_on(async {
        let ctx = args::open(global, &args.lab, false).await?;
        let host = args
            .host
            .clone()
            .unwrap_or_else(glassbox_lab::worker::host_name);
        let id = args
            .id
            .clone()
            .unwrap_or_else(|| format!("{host}-{}", std::process::id()));
        let mut opts = ctx.worker_options(&id, crate::GIT_REVISION);
        opts.host = host;
        opts.backend = args.backend.into();
        args.compute.apply(&mut opts);
        let worker = Worker::new(ctx.queue.clone(), ctx.recorder.clone(), opts)
            .with_switches(ctx.flow.switches());
        eprintln!(
            "worker {id}: lab {}, queue {}",
            ctx.lab.root().display(),
            ctx.queue.engine_name()
        );
        let (tx, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            shutdown_signal().await;
            eprintln!("worker: stopping after the current job");
            let _ = tx.send(true);
        });
        worker
            .serve(rx, args.exit_when_idle, |end| match end {
                JobEnd::Recorded(f) => {
                    let entry = match &f.unpublished {
                        None => format!("result entry {}", f.result_entry),
                        Some(why) => format!(
                            "result sequenced as entry {}, not yet in the log: {why}",
                            f.result_entry
                        ),
                    };
                    println!(
                        "job {}: {} {} after {} steps ({entry}){}",
                        f.job,
                        f.run,
                        f.ending.status,
                        f.ending.steps,
                        f.ending
                            .reason
                            .as_deref()
                            .map(|r| format!(": {r}"))
                            .unwrap_or_default()
                    )
                }
                JobEnd::LeaseLost(job) => {
                    println!("job {job}: lease lost; another worker continues it")
                }
            })
            .await?;
        Ok(exit::code(exit::OK))
    })
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
