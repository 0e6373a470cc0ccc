//! The `notifications` table: the outbox's rows. Each holds one notice as JSON, its attempts,
//! when it may be tried next, the last error, and when it was delivered or given up.
//!
//! Not here: what a notice says, the retry policy, or delivering ([`crate::outbox`]).

use sqlx::any::AnyRow;
use sqlx::{Any, Executor, Row};

use crate::error::LabError;

/// A stored notice, undecoded.
#[derive(Debug, Clone)]
pub(crate) struct StoredNotice {
    /// The row id.
    pub id: i64,
    /// The notice as JSON.
    pub event: String,
    /// Failed attempts so far.
    pub attempts: u32,
}

/// Adds a notice about `experiment`.
pub(crate) async fn insert<'e>(
    db: impl Executor<'e, Database = Any>,
    experiment: &str,
    event: &str,
    now: i64,
) -> Result<(), LabError> {
    sqlx::query("INSERT INTO notifications (experiment, event, created_at) VALUES ($1, $2, $3)")
        .bind(experiment.to_string())
        .bind(event.to_string())
        .bind(now)
        .execute(db)
        .await?;
    Ok(())
}

fn stored(rows: Vec<AnyRow>) -> Result<Vec<StoredNotice>, LabError> {
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        out.push(StoredNotice {
            id: r.try_get("id")?,
            event: r.try_get("event")?,
            attempts: r
                .try_get::<i64, _>("attempts")?
                .clamp(0, i64::from(u32::MAX)) as u32,
        });
    }
    Ok(out)
}

/// Notices neither delivered nor given up, oldest first, at most `limit`.
pub(crate) async fn undelivered<'e>(
    db: impl Executor<'e, Database = Any>,
    limit: u32,
) -> Result<Vec<StoredNotice>, LabError> {
    let rows = sqlx::query(
        "SELECT id, event, attempts FROM notifications \
         WHERE delivered_at IS NULL AND gave_up_at IS NULL ORDER BY id LIMIT $1",
    )
    .bind(i64::from(limit))
    .fetch_all(db)
    .await?;
    stored(rows)
}

/// Undelivered notices whose next attempt is due at `now`, oldest first, at most `limit`,
/// none behind an older notice of the same experiment that waits for its retry.
pub(crate) async fn due<'e>(
    db: impl Executor<'e, Database = Any>,
    now: i64,
    limit: u32,
) -> Result<Vec<StoredNotice>, LabError> {
    let rows = sqlx::query(
        "SELECT n.id, n.event, n.attempts FROM notifications n \
         WHERE n.delivered_at IS NULL AND n.gave_up_at IS NULL AND n.next_attempt_at <= $1 \
         AND NOT EXISTS (SELECT 1 FROM notifications o WHERE o.experiment = n.experiment \
             AND o.id < n.id AND o.delivered_at IS NULL AND o.gave_up_at IS NULL \
             AND o.next_attempt_at > $1) \
         ORDER BY n.id LIMIT $2",
    )
    .bind(now)
    .bind(i64::from(limit))
    .fetch_all(db)
    .await?;
    stored(rows)
}

/// The failed attempts of notice `id` so far.
pub(crate) async fn attempts<'e>(
    db: impl Executor<'e, Database = Any>,
    id: i64,
) -> Result<u32, LabError> {
    let n: i64 = sqlx::query("SELECT attempts FROM notifications WHERE id = $1")
        .bind(id)
        .fetch_one(db)
        .await?
        .try_get("attempts")?;
    Ok(n.clamp(0, i64::from(u32::MAX)) as u32)
}

/// Records failed attempt number `attempts` of notice `id`; the next is not before `next_at`.
pub(crate) async fn set_retry<'e>(
    db: impl Executor<'e, Database = Any>,
    id: i64,
    attempts: u32,
    next_at: i64,
    error: &str,
) -> Result<(), LabError> {
    sqlx::query(
        "UPDATE notifications SET attempts = $1, next_attempt_at = $2, last_error = $3 \
         WHERE id = $4",
    )
    .bind(i64::from(attempts))
    .bind(next_at)
    .bind(error.to_string())
    .bind(id)
    .execute(db)
    .await?;
    Ok(())
}

/// Gives notice `id` up at `now` with `error`.
pub(crate) async fn set_given_up<'e>(
    db: impl Executor<'e, Database = Any>,
    id: i64,
    error: &str,
    now: i64,
) -> Result<(), LabError> {
    sqlx::query(
        "UPDATE notifications SET gave_up_at = $1, attempts = attempts + 1, last_error = $2 \
         WHERE id = $3",
    )
    .bind(now)
    .bind(error.to_string())
    .bind(id)
    .execute(db)
    .await?;
    Ok(())
}

/// Marks notice `id` delivered at `now`.
pub(crate) async fn set_delivered<'e>(
    db: impl Executor<'e, Database = Any>,
    id: i64,
    now: i64,
) -> Result<(), LabError> {
    sqlx::query("UPDATE notifications SET delivered_at = $1 WHERE id = $2")
        .bind(now)
        .bind(id)
        .execute(db)
        .await?;
    Ok(())
}
