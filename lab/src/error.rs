//! The lab's error types: [`QueueError`] for the job queue's database and rules, and
//! [`LabError`] for every failure of the flow, the worker and the datasets, with the
//! thing it is about. The binary maps these to exit codes; the bot port maps them to
//! [`glassbox_github_bot::port::LabError`] for comments.

use std::path::PathBuf;

use glassbox_schemas::JobId;

use crate::job::{JobState, WorkerId};

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

/// Queue errors. Each says what was asked and why it cannot be done.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// The database URL is not one this queue speaks.
    #[error(
        "unsupported database URL {0:?}: expected sqlite://PATH or postgres://USER@HOST:PORT/DB"
    )]
    UnsupportedUrl(String),
    /// The database failed.
    #[error("queue database error: {0}")]
    Database(#[from] sqlx::Error),
    /// Applying migrations failed.
    #[error("queue migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// No such job.
    #[error("no job {0} in the queue")]
    NotFound(JobId),
    /// The worker no longer holds the job (its lease expired and another worker took it, or
    /// it was cancelled); whatever it was about to record must be dropped.
    #[error("worker {worker} no longer holds the lease on job {job}")]
    LeaseLost {
        /// The job.
        job: JobId,
        /// The worker that lost it.
        worker: WorkerId,
    },
    /// The job is in a state that does not allow the operation.
    #[error("job {job} is {state}; {action} needs it to be {needs}")]
    WrongState {
        /// The job.
        job: JobId,
        /// Its state.
        state: JobState,
        /// What was attempted.
        action: &'static str,
        /// The state(s) that would allow it.
        needs: &'static str,
    },
    /// A reproduction of the run already waits or runs.
    #[error("job {job} already reproduces this run ({state}); wait for it or cancel it")]
    AlreadyOpen {
        /// The open job.
        job: JobId,
        /// Its state.
        state: JobState,
    },
    /// The lab's database has no ledger sequencer yet: a process that holds the lab's log sets
    /// it up when it opens the lab (`glassbox serve`, or any command run in the lab directory).
    #[error(
        "the lab database has no ledger sequencer yet; open the lab once where its log lives (glassbox serve) to set it up"
    )]
    NotSequencing,
    /// The commit of a group of writes failed; the database may or may not have applied them,
    /// so they are not retried blindly. Check with `glassbox jobs` before repeating one.
    #[error("queue commit failed (the change may or may not have been applied): {0}")]
    CommitFailed(String),
    /// The task committing queue writes stopped before answering (the process is shutting
    /// down).
    #[error("the queue's writer stopped before answering; the process is shutting down")]
    WriterStopped,
    /// A stored row does not decode.
    #[error("corrupt queue row for job {job}: {detail}")]
    Corrupt {
        /// The job.
        job: i64,
        /// What is wrong.
        detail: String,
    },
}

impl QueueError {
    /// The database could not be reached or could not commit: worth retrying a call that is
    /// safe to repeat. Everything else (a lost lease, a wrong state, a missing job) is an answer.
    pub fn is_transient(&self) -> bool {
        matches!(self, QueueError::Database(_) | QueueError::CommitFailed(_))
    }
}
