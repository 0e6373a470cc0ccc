//! Opening a lab for the commands that go through it (`run`, `worker`, `jobs`, `data`): the
//! lab directory, its queue database, the recorder, the flow and the configuration, from the
//! global `--lab` and the shared `--database-url` / `--config` flags.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use glassbox_lab::{Flow, LabConfig, Queue, Recorder};
use glassbox_ledger::Lab;

use crate::GlobalOpts;

/// Flags of the commands that use the lab's queue.
#[derive(Debug, Clone, clap::Args)]
pub struct LabArgs {
    /// The queue database: `sqlite://PATH` or `postgres://USER@HOST:PORT/DB`.
    /// Default: `sqlite://<lab>/queue.db`.
    #[arg(long, env = "GLASSBOX_DATABASE_URL")]
    pub database_url: Option<String>,
    /// The lab configuration (TOML: limits, queue order, worker timing).
    /// Default: `<lab>/lab.toml` when it exists, else built-in defaults.
    #[arg(long, env = "GLASSBOX_CONFIG")]
    pub config: Option<PathBuf>,
}

/// An open lab.
pub struct LabContext {
    /// The directory.
    pub lab: Lab,
    /// The queue.
    pub queue: Queue,
    /// The ledger writer.
    pub recorder: Arc<Recorder>,
    /// The flow.
    pub flow: Flow,
    /// The configuration.
    pub config: LabConfig,
}

/// Opens the lab at `--lab`; with `create`, makes one first if there is none (and says so).
pub async fn open(global: &GlobalOpts, args: &LabArgs, create: bool) -> anyhow::Result<LabContext> {
    let lab = match Lab::open(&global.lab) {
        Ok(lab) => lab,
        Err(glassbox_ledger::Error::NoLab { .. }) if create => {
            let origin = crate::cli::ledger::default_origin()?;
            let (lab, _) = Lab::init(&global.lab, &origin)?;
            eprintln!(
                "created lab {} (origin {origin}); `glassbox verify` audits it",
                lab.root().display()
            );
            lab
        }
        Err(e) => return Err(e.into()),
    };
    let config_path = args
        .config
        .clone()
        .or_else(|| Some(lab.root().join("lab.toml")).filter(|p| p.is_file()));
    let config = match config_path {
        Some(p) => LabConfig::load(&p)?,
        None => LabConfig::default(),
    };
    let url = args
        .database_url
        .clone()
        .unwrap_or_else(|| format!("sqlite://{}", lab.root().join("queue.db").display()));
    let queue = Queue::connect(&url).await.with_context(|| {
        format!(
            "cannot open the queue database {}",
            glassbox_ledger::index::redact(&url)
        )
    })?;
    let recorder = Arc::new(Recorder::local(lab.clone()));
    let flow = Flow::new(queue.clone(), recorder.clone(), config.clone());
    Ok(LabContext {
        lab,
        queue,
        recorder,
        flow,
        config,
    })
}

/// A multi-threaded runtime: workers train on a blocking section of an async task.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}
