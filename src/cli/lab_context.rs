//! Opening a lab for the commands that go through it (`run`, `worker`, `jobs`, `data`): the
//! lab directory, its queue database, the recorder, the flow and the configuration, from the
//! global `--lab` and the shared `--database-url` / `--config` flags.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use glassbox_lab::queue::Clock;
use glassbox_lab::{Flow, LabConfig, Queue, Recorder};
use glassbox_ledger::{BlobStore, Lab};

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
    /// Where blobs live: a directory, `file:///path` or `s3://bucket/prefix` (endpoint and keys
    /// from `AWS_*` variables). Default: the config's `storage.blobs`, else `<lab>/blobs`.
    #[arg(long, env = "GLASSBOX_BLOBS")]
    pub blobs: Option<String>,
}

impl LabArgs {
    /// No flags: the defaults (`<lab>/queue.db`, `<lab>/lab.toml`, `<lab>/blobs`).
    pub fn defaults() -> Self {
        Self {
            database_url: None,
            config: None,
            blobs: None,
        }
    }
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
/// The configuration is `--config`, else `<lab>/lab.toml`, else the defaults.
pub async fn open(global: &GlobalOpts, args: &LabArgs, create: bool) -> anyhow::Result<LabContext> {
    open_with(global, args, create, None).await
}

/// [`open`] with a configuration the caller already read (`serve --config`).
pub async fn open_with(
    global: &GlobalOpts,
    args: &LabArgs,
    create: bool,
    config: Option<LabConfig>,
) -> anyhow::Result<LabContext> {
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
    let config = match (config, config_path) {
        (Some(c), _) => c,
        (None, Some(p)) => LabConfig::load(&p)?,
        (None, None) => LabConfig::default(),
    };
    let url = args
        .database_url
        .clone()
        .unwrap_or_else(|| format!("sqlite://{}", lab.root().join("queue.db").display()));
    let queue = Queue::connect_with(&url, Clock::System, config.queue.durability)
        .await
        .with_context(|| {
            format!(
                "cannot open the queue database {}",
                glassbox_ledger::index::redact(&url)
            )
        })?;
    let blobs = blob_store(
        &lab,
        args.blobs.as_deref().or(config.storage.blobs.as_deref()),
    )?;
    let recorder = Arc::new(Recorder::new(lab.clone(), blobs));
    let flow = Flow::new(queue.clone(), recorder.clone(), config.clone());
    Ok(LabContext {
        lab,
        queue,
        recorder,
        flow,
        config,
    })
}

/// The blob store at `location`, or the lab directory's `blobs/`.
pub fn blob_store(lab: &Lab, location: Option<&str>) -> anyhow::Result<Arc<dyn BlobStore>> {
    Ok(match location {
        Some(loc) => Arc::from(
            glassbox_ledger::open_store(loc)
                .with_context(|| format!("cannot open the blob store {loc}"))?,
        ),
        None => Arc::new(lab.blobs()),
    })
}

/// The blob store of a lab opened without the queue (`ledger ...`, `publish`): `location` (a
/// `--blobs` flag), else `GLASSBOX_BLOBS`, else the lab's own `lab.toml` `[storage] blobs`, else
/// its `blobs/` directory.
pub fn lab_blob_store(lab: &Lab, location: Option<&str>) -> anyhow::Result<Arc<dyn BlobStore>> {
    let from_env = std::env::var("GLASSBOX_BLOBS")
        .ok()
        .filter(|v| !v.is_empty());
    match location.map(String::from).or(from_env) {
        Some(loc) => blob_store(lab, Some(&loc)),
        None => blob_store(lab, configured_blobs(lab.root())?.as_deref()),
    }
}

/// The blob store a lab directory's own `lab.toml` names (`[storage] blobs`), if any. A
/// server's config (with `[web]`, `[github]`) counts as a lab config here.
pub fn configured_blobs(root: &std::path::Path) -> anyhow::Result<Option<String>> {
    let path = root.join("lab.toml");
    if !path.is_file() {
        return Ok(None);
    }
    Ok(LabConfig::load(&path)?.storage.blobs)
}

/// A multi-threaded runtime: workers train on a blocking section of an async task.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}
