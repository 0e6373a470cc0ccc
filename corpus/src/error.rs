//! Errors of the data path: a corpus file that does not read as its format, a tokenizer that
//! cannot be loaded or trained, a token shard that is not well formed. Each names the file and
//! where in it (line, row, column), the value found and what would be accepted.
//!
//! Not here: run-level errors (the runner's `RunnerError` wraps these).

use std::fmt;

/// Where in a corpus file something was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// The file as a whole (its header, its schema).
    File,
    /// A 1-based line of a text or JSONL file.
    Line(u64),
    /// A 1-based row of a Parquet file, in a column.
    Row {
        /// 1-based row over all row groups.
        row: u64,
        /// The column.
        column: String,
    },
    /// A column of a Parquet file.
    Column(String),
    /// A 1-based document.
    Document(u64),
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::File => Ok(()),
            Location::Line(n) => write!(f, "line {n}: "),
            Location::Row { row, column } => write!(f, "row {row}, column {column:?}: "),
            Location::Column(c) => write!(f, "column {c:?}: "),
            Location::Document(n) => write!(f, "document {n}: "),
        }
    }
}

/// What went wrong on the data path.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// A corpus file is not what its format says.
    #[error("{file}: {at}{problem}; {accepted}")]
    Document {
        /// The file (its name, or the corpus hash for a stored corpus).
        file: String,
        /// Where in it.
        at: Location,
        /// What was found.
        problem: String,
        /// What would be accepted.
        accepted: String,
    },
    /// A tokenizer cannot be loaded, trained or used.
    #[error("tokenizer {what}: {reason}")]
    Tokenizer {
        /// Which tokenizer (a file name or a hash).
        what: String,
        /// Why, and what would work.
        reason: String,
    },
    /// A token shard is not well formed.
    #[error("token shard {what}: {reason}")]
    Shard {
        /// Which shard.
        what: String,
        /// What is wrong.
        reason: String,
    },
    /// A visitor stopped reading early on purpose (see `documents::nth`); never shown.
    #[error("reading stopped early")]
    Stopped,
    /// Reading or writing failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl DataError {
    /// An I/O error with context.
    pub fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> DataError {
        let context = context.into();
        move |source| DataError::Io { context, source }
    }
}
