//! The flags every lab command shares (`--database-url`, `--config`, `--blobs`) and their
//! mapping onto [`glassbox_lab::LabOptions`]; the lab's layout and resolution rules are
//! [`glassbox_lab::handle`]'s. Also the async runtime the lab commands run on.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use glassbox_lab::{LabConfig, LabHandle, LabOptions};
use glassbox_ledger::{BlobStore, LabDir};

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
