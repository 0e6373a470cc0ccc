//! The lab's error type: every failure of the flow, the worker and the datasets, with the
//! thing it is about. The binary maps these to exit codes; the bot port maps them to
//! [`glassbox_github_bot::port::LabError`] for comments.

use std::path::PathBuf;

use crate::queue::QueueError;

/// What went wrong in the lab.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// The job queue failed.
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// The queue database could not be opened.
    #[error("cannot open the queue database {url}: {source}")]
    QueueDatabase {
        /// Where (secrets removed).
        url: String,
        /// Why.
        source: sqlx::Error,
    },
    /// The ledger (blobs, log, index) failed.
    #[error(transparent)]
    Ledger(#[from] glassbox_ledger::Error),
    /// A corpus, tokenizer or token shard is not what it should be (bad input: named by
    /// file, line, row or column).
    #[error(transparent)]
    Data(#[from] glassbox_runner::data::DataError),
    /// The runner refused or failed before training.
    #[error(transparent)]
    Runner(#[from] glassbox_runner::error::RunnerError),
    /// A ledger entry could not be built.
    #[error("cannot build a ledger entry: {0}")]
    Entry(#[from] glassbox_schemas::record::EntryError),
    /// The lab configuration is invalid; every problem is listed.
    #[error("invalid lab configuration {path}:\n{}", .problems.join("\n"))]
    Config {
        /// The file.
        path: PathBuf,
        /// One line per problem, each naming the key.
        problems: Vec<String>,
    },
    /// A spec stored in the ledger does not parse or does not match its hash.
    #[error("spec {hash}: {reason}")]
    BadSpec {
        /// The spec hash.
        hash: String,
        /// What is wrong.
        reason: String,
    },
    /// An action that does not apply in the current state (shown to people).
    #[error("{0}")]
    Refused(String),
    /// A file could not be read or written.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was attempted.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A background task failed to join (a panic in training is reported, not propagated).
    #[error("task failed: {0}")]
    Task(String),
}

impl LabError {
    /// An I/O error constructor for `map_err`.
    pub fn io(what: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| LabError::Io { what, path, source }
    }
}

impl From<sqlx::Error> for LabError {
    fn from(e: sqlx::Error) -> Self {
        LabError::Queue(QueueError::Database(e))
    }
}
