//! `glassbox publish --git DIR`: mirror the lab's log and referenced blobs into a git
//! repository, one commit per new checkpoint. Glue over `glassbox_ledger::publish`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use glassbox_ledger::LabDir;
use glassbox_ledger::publish::{DEFAULT_MAX_BLOB_BYTES, publish_with_blobs};

use crate::GlobalOpts;
use crate::cli::ledger::finish;
use crate::exit;

#[derive(Debug, Args)]
pub struct PublishArgs {
    /// The git repository (created if absent).
    #[arg(long)]
    pub git: PathBuf,
    /// Blobs larger than this are listed in blobs/OMITTED instead of copied.
    #[arg(long, default_value_t = DEFAULT_MAX_BLOB_BYTES)]
    pub max_blob_bytes: u64,
    /// Where the lab's blobs live (a directory, `file:///path` or `s3://bucket/prefix`)
    /// [default: the lab's `lab.toml` `storage.blobs`, else its `blobs/`].
    #[arg(long, env = "GLASSBOX_BLOBS")]
    pub blobs: Option<String>,
}

pub fn run(args: PublishArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    finish((|| {
        let lab = LabDir::open(&global.lab)?;
        let blobs = crate::cli::args::lab_blob_store(&lab, args.blobs.as_deref())?;
        let r = publish_with_blobs(&lab, blobs.as_ref(), &args.git, args.max_blob_bytes)?;
        if r.committed {
            println!(
                "published size {} to {}: {} tiles, {} blobs copied, {} blobs omitted (over {} bytes)",
                r.size,
                args.git.display(),
                r.tiles_copied,
                r.blobs_copied,
                r.blobs_omitted,
                args.max_blob_bytes
            );
        } else {
            println!("{} is up to date (size {})", args.git.display(), r.size);
        }
        Ok(exit::code(exit::OK))
    })())
}
