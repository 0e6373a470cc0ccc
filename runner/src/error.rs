//! The runner's error type. Errors say what went wrong, with which value, and how to fix it.
//!
//! Run *outcomes* (diverged, budget exceeded, cancelled) are not errors: they are
//! [`crate::train::RunOutcome`]s carrying metrics. These are the failures that stop a run from
//! starting or continuing at all (bad input, I/O, an unavailable backend).

use std::path::PathBuf;

/// Everything that can fail in the runner.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// The requested backend cannot run here.
    #[error("backend `{backend}` is not available: {reason}")]
    BackendUnavailable {
        /// Backend name.
        backend: &'static str,
        /// Why, and what to use instead.
        reason: String,
    },
    /// The backend could not start (threads, device).
    #[error("backend error: {0}")]
    Backend(String),
    /// The spec asks for something this runner does not support.
    #[error("{field} = {value} is not accepted: {accepted}")]
    Invalid {
        /// What was given (a flag or a request field).
        field: &'static str,
        /// The value given.
        value: String,
        /// What would be accepted.
        accepted: String,
    },
    #[error("unsupported spec: {field} = {value}: {fix}")]
    Unsupported {
        /// Field path, e.g. `model.vocab`.
        field: &'static str,
        /// The offending value.
        value: String,
        /// What would work.
        fix: String,
    },
    /// A corpus named by the spec is not in the store.
    #[error("corpus {hash} not found under {dir}: import it first (`glassbox data import`)")]
    CorpusMissing {
        /// The corpus hash.
        hash: String,
        /// Where it was looked for.
        dir: PathBuf,
    },
    /// A corpus's bytes do not hash to its name.
    #[error("corpus {hash} at {path} is corrupt: its bytes hash to {actual}")]
    CorpusCorrupt {
        /// Expected hash.
        hash: String,
        /// File read.
        path: PathBuf,
        /// Hash of what was read.
        actual: String,
    },
    /// A corpus is too short to cut training or held-out windows from.
    #[error(
        "domain `{domain}`: corpus has {bytes} {unit}; at least {needed} are needed for seq_len windows in both the training and held-out parts"
    )]
    CorpusTooSmall {
        /// Domain name.
        domain: String,
        /// Corpus size.
        bytes: usize,
        /// Minimum size.
        needed: usize,
        /// `bytes`, or `tokens` for a token shard.
        unit: &'static str,
    },
    /// No token shard of a corpus with a tokenizer is at hand.
    #[error(
        "no token shard of corpus {corpus} with tokenizer {tokenizer}: tokenize it first (`glassbox data tokenize`), or train through the lab, which tokenizes what a spec needs"
    )]
    ShardMissing {
        /// The corpus.
        corpus: String,
        /// The tokenizer.
        tokenizer: String,
    },
    /// A corpus, tokenizer or shard could not be read, or is not what it should be.
    #[error(transparent)]
    Data(#[from] glassbox_corpus::error::DataError),
    /// A training snapshot cannot be read or does not fit the spec.
    #[error("checkpoint {path}: {reason}")]
    Snapshot {
        /// The snapshot file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Memory for a run's buffers could not be had (the machine, or the address space, does not
    /// have it): the run stops before it starts rather than the process aborting.
    #[error(
        "cannot allocate {bytes} bytes for {what}: {reason}; choose a smaller model or batch, or a machine with more memory"
    )]
    OutOfMemory {
        /// What the buffer was for (`parameters`, `optimizer state`).
        what: &'static str,
        /// Bytes asked for.
        bytes: u128,
        /// The allocator's answer.
        reason: String,
    },
    /// File-system error.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl RunnerError {
    /// A host vector with room for `n` elements, or [`RunnerError::OutOfMemory`] when the
    /// allocator refuses (instead of aborting the process as `Vec::with_capacity` would).
    pub fn try_vec<T>(n: usize, what: &'static str) -> Result<Vec<T>, RunnerError> {
        let mut v = Vec::new();
        v.try_reserve_exact(n)
            .map_err(|e| RunnerError::OutOfMemory {
                what,
                bytes: n as u128 * std::mem::size_of::<T>() as u128,
                reason: e.to_string(),
            })?;
        Ok(v)
    }

    /// An I/O error with context.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        RunnerError::Io {
            context: context.into(),
            source,
        }
    }
}
