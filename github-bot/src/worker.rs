//! The worker: drains the durable delivery queue through [`Bot::handle_delivery`].
//!
//! Deliveries are processed one at a time in arrival order (so two edits of one issue are seen
//! in the order GitHub sent them). Each ends `acted`, `ignored` with the reason the bot gave, or,
//! after a failure, `pending` again or `failed`: a transient failure (GitHub 5xx after the
//! client's own retries, rate limit, lab unavailable) is retried after `2^attempts` seconds, up
//! to [`MAX_ATTEMPTS`]; any other marks it `failed` with the error. Because a delivery is only
//! marked after it was handled, a crash mid-way re-handles it on restart (at-least-once; the
//! handlers are written to be safe to repeat: comments are found by marker and edited in
//! place, a command runs once per comment, recording the same proposal hash twice is a no-op).
//! While running, it prunes `ignored` deliveries older than `github.ignored_retention_hours`
//! every [`PRUNE_EVERY`].
//!
//! Tests drive it with [`Worker::process_pending`], which returns when the queue is empty, or
//! run it with [`Worker::run`] and wait on the `processed` channel instead of sleeping.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, mpsc};

use crate::bot::{Bot, Handled};
use crate::error::BotError;
use crate::ids::DeliveryId;
use crate::port::LabPort;

/// Attempts before a delivery is marked failed.
pub const MAX_ATTEMPTS: u32 = 8;

/// How often a running worker prunes old `ignored` deliveries.
pub const PRUNE_EVERY: Duration = Duration::from_secs(600);

/// How one delivery ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Processed {
    /// Handled and acted on.
    Acted(DeliveryId),
    /// Handled, nothing done; the reason.
    Ignored(DeliveryId, String),
    /// Will be retried.
    Retrying(DeliveryId, String),
    /// Given up.
    Failed(DeliveryId, String),
}

/// The queue drainer.
#[derive(Debug)]
pub struct Worker<L> {
    bot: Bot<L>,
    wake: Arc<Notify>,
    processed: Option<mpsc::UnboundedSender<Processed>>,
}

impl<L: LabPort> Worker<L> {
    /// A worker for `bot`, woken by `wake` (the same [`Notify`] given to the intake).
    pub fn new(bot: Bot<L>, wake: Arc<Notify>) -> Self {
        Self {
            bot,
            wake,
            processed: None,
        }
    }

    /// Reports every processed delivery on `tx` (tests wait on it rather than sleeping).
    pub fn with_processed_channel(mut self, tx: mpsc::UnboundedSender<Processed>) -> Self {
        self.processed = Some(tx);
        self
    }

    /// Processes every due pending delivery; returns how many were taken.
    pub async fn process_pending(&self) -> Result<usize, BotError> {
        let store = &self.bot.store;
        let mut n = 0;
        while let Some(d) = store.next_pending().await? {
            n += 1;
            let result = self.bot.handle_delivery(&d.event, &d.payload).await;
            let outcome = match result {
                Ok(Handled::Acted) => {
                    store.mark_acted(d.seq).await?;
                    Processed::Acted(d.id)
                }
                Ok(Handled::Ignored(reason)) => {
                    tracing::debug!(delivery = %d.id, %reason, "delivery ignored");
                    store.mark_ignored(d.seq, &reason).await?;
                    Processed::Ignored(d.id, reason)
                }
                Err(e) if e.is_transient() && d.attempts + 1 < MAX_ATTEMPTS => {
                    let wait = Duration::from_secs(1u64 << (d.attempts + 1).min(10));
                    tracing::warn!(delivery = %d.id, error = %e, ?wait, "delivery will be retried");
                    store
                        .mark_attempt_failed(d.seq, &e.to_string(), Some(wait))
                        .await?;
                    Processed::Retrying(d.id, e.to_string())
                }
                Err(e) => {
                    tracing::error!(delivery = %d.id, error = %e, "delivery failed");
                    store
                        .mark_attempt_failed(d.seq, &e.to_string(), None)
                        .await?;
                    Processed::Failed(d.id, e.to_string())
                }
            };
            if let Some(tx) = &self.processed {
                let _ = tx.send(outcome);
            }
        }
        Ok(n)
    }

    /// Deletes `ignored` deliveries older than the config's `ignored_retention_hours`.
    pub async fn prune_ignored(&self) -> Result<u64, BotError> {
        let age = Duration::from_secs(self.bot.config.ignored_retention_hours.saturating_mul(3600));
        Ok(self.bot.store.prune_ignored(age).await?)
    }

    /// Runs until the task is aborted: drains the queue, then sleeps until woken or until the
    /// next retry is due; prunes old `ignored` deliveries every [`PRUNE_EVERY`].
    pub async fn run(self) {
        let mut pruned_at: Option<tokio::time::Instant> = None;
        loop {
            if pruned_at.is_none_or(|t| t.elapsed() >= PRUNE_EVERY) {
                pruned_at = Some(tokio::time::Instant::now());
                match self.prune_ignored().await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(pruned = n, "old ignored deliveries pruned"),
                    Err(e) => tracing::warn!(error = %e, "could not prune ignored deliveries"),
                }
            }
            if let Err(e) = self.process_pending().await {
                tracing::error!(error = %e, "worker could not read the queue");
            }
            let due = match self.bot.store.next_due_in().await {
                Ok(Some(d)) => d.max(Duration::from_millis(50)),
                _ => Duration::from_secs(60),
            };
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(due) => {}
            }
        }
    }
}
