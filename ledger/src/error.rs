//! The crate's operational error: what went wrong while reading or writing a lab, naming the
//! path, value or setting involved and what to do about it.
//!
//! Audit findings (a bad entry, a tampered tile) are not errors of this kind: they are
//! [`crate::audit::AuditFailure`] values, so callers can tell "could not check" from "checked,
//! and it is bad".

use std::path::PathBuf;

use crate::checkpoint::CheckpointError;

/// An operation on a lab could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No lab at the path.
    #[error("no glassbox lab at {path}: {reason}; create one with `glassbox init --lab {path}`")]
    NoLab {
        /// The lab directory.
        path: PathBuf,
        /// What is missing.
        reason: String,
    },
    /// `init` on an existing lab.
    #[error("{path} already holds a glassbox lab (found {found}); pick another directory")]
    LabExists {
        /// The lab directory.
        path: PathBuf,
        /// The file that shows it.
        found: String,
    },
    /// A file operation failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done (`cannot write`).
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Another process holds the lab's writer lock.
    #[error(
        "another process is writing to the lab (lock {path} is held); wait for it to finish or stop it"
    )]
    Locked {
        /// The lock file.
        path: PathBuf,
    },
    /// An entry over the size limit.
    #[error(
        "ledger entry is {bytes} bytes; the limit is {limit} bytes (put large content in a blob and reference it by hash)"
    )]
    EntryTooLarge {
        /// Its size.
        bytes: usize,
        /// The limit, [`glassbox_schemas::record::MAX_ENTRY_BYTES`].
        limit: usize,
    },
    /// A file of the published layout is longer than its format allows (a hostile or broken
    /// server); nothing past the limit was read.
    #[error("{location} is larger than {limit} bytes, the most {what} may be; stopped reading it")]
    TooLarge {
        /// The path or URL.
        location: String,
        /// The most that was allowed.
        limit: u64,
        /// What the file should have been (`a checkpoint note`).
        what: &'static str,
    },
    /// Entry bytes that are not a canonical ledger entry.
    #[error("not a canonical ledger entry: {0}")]
    BadEntry(String),
    /// The signing key or a checkpoint could not be used.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The stored log contradicts itself (the writer refuses to append to it).
    #[error(
        "the log at {path} is inconsistent: {reason}; run `glassbox verify` to locate the damage"
    )]
    Corrupt {
        /// The file that is wrong.
        path: PathBuf,
        /// How.
        reason: String,
    },
    /// A previous write failed and left the writer unusable.
    #[error(
        "the log writer stopped after a failed write ({0}); reopen the lab to recover from the last checkpoint"
    )]
    WriterFailed(String),
    /// A leaf index or size outside the log.
    #[error("{what} {value} is outside the log of size {size}")]
    OutOfRange {
        /// `entry index`, `tree size`.
        what: &'static str,
        /// The value given.
        value: u64,
        /// The log size.
        size: u64,
    },
    /// No blob with that hash.
    #[error("no blob {hash} in {store}")]
    BlobNotFound {
        /// The hash.
        hash: String,
        /// The store.
        store: String,
    },
    /// An HTTP request failed.
    #[error("cannot fetch {url}: {reason}")]
    Http {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// The index database failed.
    #[error("index database {url}: {reason}")]
    Index {
        /// Where (secrets removed).
        url: String,
        /// Why.
        reason: String,
    },
    /// Git publication failed.
    #[error("git repository {path}: {reason}")]
    Git {
        /// The repository.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The operating system gave no randomness (for a new lab's origin).
    #[error("no randomness from the operating system: {0}")]
    NoRandomness(String),
    /// A bucket already holds a log this lab's log does not extend (another lab's, a fork, or
    /// a copy ahead of the local log); nothing was written to it.
    #[error("{bucket} holds a log this lab's log does not extend: {reason}")]
    BucketConflict {
        /// The bucket and prefix.
        bucket: String,
        /// What differs.
        reason: String,
    },
    /// Object storage failed.
    #[error("object store {store}: {reason}")]
    ObjectStore {
        /// The store.
        store: String,
        /// Why.
        reason: String,
    },
}

impl Error {
    /// Wraps an I/O error with what was being done to which path.
    pub fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io {
            action,
            path,
            source,
        }
    }
}
