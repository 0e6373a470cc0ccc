//! Why a signed note (a checkpoint and its signature lines) or a signed-note key is rejected.
//!
//! Its own module so that the key types ([`crate::note_key`]) and the checkpoint format
//! ([`crate::checkpoint`], which re-exports it) both sit above it. Not here: checking anything.

/// Why a checkpoint, note or key is rejected. Each says which part is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    /// The note is not `text`, an empty line, and signature lines.
    #[error("checkpoint is not a signed note: {0}")]
    Malformed(String),
    /// No signature by the expected key.
    #[error("checkpoint has no signature by key {name}+{key_id:08x}")]
    Unsigned {
        /// Key name.
        name: String,
        /// Key id.
        key_id: u32,
    },
    /// A signature by the key that does not verify.
    #[error(
        "checkpoint signature by {name}+{key_id:08x} is invalid (the checkpoint text or signature was altered)"
    )]
    BadSignature {
        /// Key name.
        name: String,
        /// Key id.
        key_id: u32,
    },
    /// A key's text form is wrong.
    #[error("bad key {value:?}: {reason}")]
    BadKey {
        /// The key text (cut to 100 characters).
        value: String,
        /// What is wrong and what is expected.
        reason: String,
    },
    /// The origin differs from the key's log.
    #[error("checkpoint origin {got:?} differs from the expected origin {expected:?}")]
    WrongOrigin {
        /// Origin in the checkpoint.
        got: String,
        /// Origin expected.
        expected: String,
    },
}
