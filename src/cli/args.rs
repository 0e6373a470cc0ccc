//! The flags several commands share, defined once: the lab's (`--database-url`, `--config`,
//! `--blobs`, mapped onto [`glassbox_lab::LabOptions`]; the lab's layout and resolution rules
//! are [`glassbox_lab::handle`]'s) and a trainer's (`--threads`, `--peak-gflops`, mapped onto
//! [`WorkerOptions`]); who the local user is; and the async runtime the lab commands run on.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use glassbox_lab::{LabConfig, LabHandle, LabOptions, WorkerOptions};
use glassbox_ledger::{BlobStore, LabDir};
use glassbox_runner::train::Peak;

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

/// Flags of the commands that train on this machine.
#[derive(Debug, Clone, clap::Args)]
pub struct ComputeArgs {
    /// CPU threads for training (results are bitwise the same for any value). Default: all
    /// cores.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Peak FLOP/s (in GFLOP/s) to state MFU against, instead of measuring this machine's
    /// f32 GEMM peak at start-up.
    #[arg(long, env = "GLASSBOX_PEAK_GFLOPS")]
    pub peak_gflops: Option<f64>,
}

impl ComputeArgs {
    /// The stated peak, when one was given.
    pub fn peak(&self) -> Option<Peak> {
        self.peak_gflops.map(Peak::given)
    }

    /// Sets the worker's threads and peak from the flags given.
    pub fn apply(&self, opts: &mut WorkerOptions) {
        if let Some(t) = self.threads {
            opts.threads = t.max(1);
        }
        if let Some(p) = self.peak() {
            opts.peak = Some(p);
        }
    }
}

/// The local user, who proposes and approves what they run themselves: `$USER`, else `local`.
pub fn local_user() -> String {
    std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "local".into())
}

/// Opens the lab at `--lab`; with `create`, makes one first if there is none (and says so).
/// The configuration is `--config`, else `<lab>/lab.toml`, else the defaults.
pub async fn open(global: &GlobalOpts, args: &LabArgs, create: bool) -> anyhow::Result<LabHandle> {
    open_with(global, args, create, None).await
}

/// [`open`] with a configuration the caller already read (`serve --config`).
pub async fn open_with(
    global: &GlobalOpts,
    args: &LabArgs,
    create: bool,
    config: Option<LabConfig>,
) -> anyhow::Result<LabHandle> {
    let options = LabOptions {
        database_url: args.database_url.clone(),
        config_path: args.config.clone(),
        config,
        blobs: args.blobs.clone(),
        create,
    };
    let handle = LabHandle::open(&global.lab, options).await?;
    if let Some(origin) = &handle.created {
        eprintln!(
            "created lab {} (origin {origin}); `glassbox verify` audits it",
            handle.lab.root().display()
        );
    }
    Ok(handle)
}

/// The blob store of a lab opened without the queue (`ledger ...`, `publish`): `location` (a
/// `--blobs` flag), else `GLASSBOX_BLOBS`, else the lab's own `lab.toml` `[storage] blobs`, else
/// its `blobs/` directory.
pub fn lab_blob_store(lab: &LabDir, location: Option<&str>) -> anyhow::Result<Arc<dyn BlobStore>> {
    let from_env = std::env::var("GLASSBOX_BLOBS")
        .ok()
        .filter(|v| !v.is_empty());
    let location = location.map(String::from).or(from_env);
    Ok(glassbox_lab::handle::own_blob_store(
        lab,
        location.as_deref(),
    )?)
}

/// A multi-threaded runtime: workers train on a blocking section of an async task.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}
