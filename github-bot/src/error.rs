//! The bot's error type: what can stop the processing of one delivery or lab event.
//!
//! Whether a failure is worth retrying decides what the worker does with the delivery:
//! transient ones (GitHub 5xx or rate limit, network, lab unavailable, database busy) are
//! retried later; the rest mark it failed. Refusals that a person should read (no permission,
//! over budget, stale hash) are not errors: they are answered with a comment.

use crate::event::EventError;
use crate::github::GitHubError;
use crate::port::LabError;
use crate::store::StoreError;

/// Why a delivery or lab event could not be processed.
#[derive(Debug, thiserror::Error)]
pub enum BotError {
    /// The bot's database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A GitHub call failed after its retries.
    #[error(transparent)]
    GitHub(#[from] GitHubError),
    /// The lab failed.
    #[error(transparent)]
    Lab(#[from] LabError),
    /// The payload is not what its event name promises.
    #[error(transparent)]
    Event(#[from] EventError),
}

impl BotError {
    /// Whether processing the delivery again later could succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            BotError::Store(_) => true,
            BotError::GitHub(e) => e.is_transient(),
            BotError::Lab(e) => matches!(e, LabError::Unavailable(_)),
            BotError::Event(_) => false,
        }
    }
}
