//! `glassbox publish --git DIR`: mirror the lab's log and referenced blobs into a git
//! repository, one commit per new checkpoint. Glue over `glassbox_ledger::publish`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use glassbox_ledger::Lab;
use glassbox_ledger::publish::{DEFAULT_MAX_BLOB_BYTES, publish};

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
}

pub fn run(args: PublishArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    finish((|| {
        let lab = Lab::open(&global.lab)?;
        let r = publish(&lab, &args.git, args.max_blob_bytes)?;
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
