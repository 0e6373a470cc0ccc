//! A file put on the record by hand (`glassbox ledger put`): stored as a blob and named by an
//! `artifact` entry, sequenced through the lab's database like every other entry, so nothing
//! reaches the log around the sequencer.
//!
//! Not here: artifacts a run makes (the worker records those) or reading blobs back
//! (`glassbox_ledger::blob::copy_verified`).

use glassbox_schemas::RefRole;
use std::path::Path;
use std::sync::Arc;

use glassbox_ledger::{BlobStore, LabDir};
use glassbox_schemas::record::{ArtifactBody, refs};
use glassbox_schemas::{BlobHash, LedgerEntry};

use crate::error::LabError;
use crate::handle::{own_config, queue_url};
use crate::recorder::Recorder;
use crate::sequencer::Sequencer;

/// How a file is taken in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ingest {
    /// Store a copy; the file stays.
    Copy,
    /// Move the file into the store.
    Move,
}

/// A file on the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutArtifact {
    /// The blob.
    pub hash: BlobHash,
    /// Its size.
    pub bytes: u64,
    /// Whether the store held it already.
    pub existed: bool,
    /// The `artifact` entry's index in the log.
    pub entry: u64,
}

/// Stores `file` in `blobs` and appends its `artifact` entry (named by the file's name) to the
/// log of `lab`, through the lab's sequencer: `database_url` when given, else the lab's own
/// `queue.db`; the witnesses are those the lab's own `lab.toml` names, as for the server and
/// workers.
pub fn put_file(
    lab: &LabDir,
    blobs: Arc<dyn BlobStore>,
    database_url: Option<&str>,
    file: &Path,
    how: Ingest,
) -> Result<PutArtifact, LabError> {
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .ok_or_else(|| LabError::Refused(format!("{} has no file name", file.display())))?;
    let put = match how {
        Ingest::Copy => blobs.put_file(file)?,
        Ingest::Move => blobs.put_move(file)?,
    };
    let entry = LedgerEntry::new(
        None,
        refs([(RefRole::Artifact, put.hash.0)]),
        ArtifactBody {
            name,
            bytes: put.bytes,
            run: None,
        },
    );
    let config = own_config(lab.root())?;
    let url = database_url.map_or_else(|| queue_url(lab.root()), String::from);
    let durability = config
        .as_ref()
        .map(|c| c.queue.durability)
        .unwrap_or_default();
    let seq = Sequencer::connect(&url, durability)?;
    let recorder = Recorder::open(lab.clone(), blobs, seq)?
        .with_witnesses(config.and_then(|c| c.ledger.witnessing()));
    let index = recorder.append(std::slice::from_ref(&entry))?[0];
    Ok(PutArtifact {
        hash: put.hash,
        bytes: put.bytes,
        existed: put.existed,
        entry: index,
    })
}
