//! The bot's durable state in SQLite (sqlx): the delivery queue and the bot's own comment ids.
//!
//! Tables:
//! - `deliveries`: every accepted `X-GitHub-Delivery` id (UNIQUE, which is the de-duplication)
//!   with its event name and raw payload, and a state: `pending` (to process), `done`,
//!   `ignored` (an event the bot does not handle; kept only for de-duplication) or `failed`
//!   (gave up; `last_error` says why). A delivery is written, and committed, before the webhook
//!   is answered, so a crash after the 2xx leaves it `pending` and the next worker picks it up.
//! - `bot_comments`: `(repo, issue, kind) -> comment id`, so the validation comment (kind
//!   `validation`) and a run's comment (kind `run:<run id>`) are edited in place.
//!
//! The file is opened in WAL mode. [`Durability::PowerLoss`] (the default, `synchronous =
//! FULL`) fsyncs every commit, so a committed delivery survives a process crash and a power cut;
//! [`Durability::ProcessCrash`] (`synchronous = NORMAL`) leaves the WAL in the OS page cache at
//! commit, which survives a crash of the process (the case the 2xx promise is about) but not
//! of the machine, and costs no fsync per batch. Queries are free functions over the pool, as in bors's
//! `database/operations.rs`. One worker per database is assumed (no leases).

use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, SqlitePool};

use crate::ids::{CommentId, DeliveryId, IssueKey};

/// The schema; each statement is idempotent.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS deliveries (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    delivery_id TEXT NOT NULL UNIQUE,
    event TEXT NOT NULL,
    payload BLOB,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    not_before_ms INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    received_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS deliveries_by_state ON deliveries (state, seq);
CREATE TABLE IF NOT EXISTS bot_comments (
    repo TEXT NOT NULL,
    issue INTEGER NOT NULL,
    kind TEXT NOT NULL,
    comment_id INTEGER NOT NULL,
    PRIMARY KEY (repo, issue, kind)
);
";

/// A storage failure.
#[derive(Debug, thiserror::Error)]
#[error("bot database: {0}")]
pub struct StoreError(#[from] sqlx::Error);

/// A delivery to store: what the intake accepted.
#[derive(Debug, Clone)]
pub struct NewDelivery {
    /// `X-GitHub-Delivery`.
    pub id: DeliveryId,
    /// `X-GitHub-Event`.
    pub event: String,
    /// The raw body; `None` for events stored only for de-duplication.
    pub payload: Option<Vec<u8>>,
}

/// A pending delivery, as the worker sees it.
#[derive(Debug, Clone)]
pub struct PendingDelivery {
    /// Row id (processing order).
    pub seq: i64,
    /// `X-GitHub-Delivery`.
    pub id: DeliveryId,
    /// `X-GitHub-Event`.
    pub event: String,
    /// The raw body.
    pub payload: Vec<u8>,
    /// Attempts so far.
    pub attempts: u32,
}

/// Counts by state, for tests and `/status`-style diagnostics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeliveryCounts {
    /// Waiting to be processed.
    pub pending: u64,
    /// Processed.
    pub done: u64,
    /// Not handled, kept for de-duplication.
    pub ignored: u64,
    /// Given up.
    pub failed: u64,
}

/// What a committed delivery survives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Durability {
    /// A power cut: every commit is fsynced (`synchronous = FULL`).
    #[default]
    PowerLoss,
    /// A crash of the process: the WAL is written at commit and fsynced at checkpoints
    /// (`synchronous = NORMAL`).
    ProcessCrash,
}

/// The bot's database.
#[derive(Debug, Clone)]
pub struct Store {
    pool: SqlitePool,
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Store {
    /// Opens (creating if needed) the database at `url`, e.g. `sqlite://lab/github-bot.db`,
    /// with [`Durability::PowerLoss`].
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        Self::open_with(url, Durability::PowerLoss).await
    }

    /// Opens the database with the given durability.
    pub async fn open_with(url: &str, durability: Durability) -> Result<Self, StoreError> {
        let synchronous = match durability {
            Durability::PowerLoss => SqliteSynchronous::Full,
            Durability::ProcessCrash => SqliteSynchronous::Normal,
        };
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(synchronous)
            // The intake checkpoints the WAL in the background (`checkpoint`), off the commit
            // path; SQLite's own checkpoint (which runs inside a commit) is only a backstop.
            .pragma("wal_autocheckpoint", "16384")
            .busy_timeout(Duration::from_secs(5));
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await?;
        sqlx::raw_sql(SCHEMA).execute(&pool).await?;
        Ok(Self { pool })
    }

    /// Stores a batch of deliveries in one transaction (one fsync for the batch: group commit).
    /// Returns, for each, whether it was new (`false` = a duplicate delivery id).
    pub async fn insert_deliveries(&self, batch: &[NewDelivery]) -> Result<Vec<bool>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let now = now_ms();
        let mut out = Vec::with_capacity(batch.len());
        for d in batch {
            let state = if d.payload.is_some() {
                "pending"
            } else {
                "ignored"
            };
            let r = sqlx::query(
                "INSERT INTO deliveries (delivery_id, event, payload, state, received_ms)
                 VALUES (?, ?, ?, ?, ?) ON CONFLICT (delivery_id) DO NOTHING",
            )
            .bind(&d.id.0)
            .bind(&d.event)
            .bind(d.payload.as_deref())
            .bind(state)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            out.push(r.rows_affected() == 1);
        }
        tx.commit().await?;
        Ok(out)
    }

    /// Copies the WAL back into the database file without blocking writers
    /// (`PRAGMA wal_checkpoint(PASSIVE)`).
    pub async fn checkpoint(&self) -> Result<(), StoreError> {
        sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The oldest pending delivery that is due, if any.
    pub async fn next_pending(&self) -> Result<Option<PendingDelivery>, StoreError> {
        let row = sqlx::query(
            "SELECT seq, delivery_id, event, payload, attempts FROM deliveries
             WHERE state = 'pending' AND not_before_ms <= ? ORDER BY seq LIMIT 1",
        )
        .bind(now_ms())
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| PendingDelivery {
            seq: r.get(0),
            id: DeliveryId(r.get(1)),
            event: r.get(2),
            payload: r.get::<Option<Vec<u8>>, _>(3).unwrap_or_default(),
            attempts: r.get::<i64, _>(4) as u32,
        }))
    }

    /// Milliseconds until the earliest pending delivery that is not yet due.
    pub async fn next_due_in(&self) -> Result<Option<Duration>, StoreError> {
        let row: Option<(i64,)> = sqlx::query_as(
            "SELECT MIN(not_before_ms) FROM deliveries WHERE state = 'pending' HAVING COUNT(*) > 0",
        )
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|(t,)| Duration::from_millis((t - now_ms()).max(0) as u64)))
    }

    /// Marks a delivery processed.
    pub async fn mark_done(&self, seq: i64) -> Result<(), StoreError> {
        sqlx::query("UPDATE deliveries SET state = 'done', payload = NULL WHERE seq = ?")
            .bind(seq)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Records a failed attempt: retried after `retry_in`, or given up when `None`.
    pub async fn mark_attempt_failed(
        &self,
        seq: i64,
        error: &str,
        retry_in: Option<Duration>,
    ) -> Result<(), StoreError> {
        let (state, not_before) = match retry_in {
            Some(d) => ("pending", now_ms() + d.as_millis() as i64),
            None => ("failed", 0),
        };
        sqlx::query(
            "UPDATE deliveries SET state = ?, attempts = attempts + 1, not_before_ms = ?,
             last_error = ? WHERE seq = ?",
        )
        .bind(state)
        .bind(not_before)
        .bind(error)
        .bind(seq)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// How many deliveries are in each state.
    pub async fn counts(&self) -> Result<DeliveryCounts, StoreError> {
        let rows: Vec<(String, i64)> =
            sqlx::query_as("SELECT state, COUNT(*) FROM deliveries GROUP BY state")
                .fetch_all(&self.pool)
                .await?;
        let mut c = DeliveryCounts::default();
        for (state, n) in rows {
            let n = n as u64;
            match state.as_str() {
                "pending" => c.pending = n,
                "done" => c.done = n,
                "ignored" => c.ignored = n,
                _ => c.failed += n,
            }
        }
        Ok(c)
    }

    /// The bot's comment of `kind` on `issue`, if it made one.
    pub async fn bot_comment(
        &self,
        issue: &IssueKey,
        kind: &str,
    ) -> Result<Option<CommentId>, StoreError> {
        let row: Option<(i64,)> = sqlx::query_as(
            "SELECT comment_id FROM bot_comments WHERE repo = ? AND issue = ? AND kind = ?",
        )
        .bind(issue.repo.to_string())
        .bind(issue.number.0 as i64)
        .bind(kind)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|(id,)| CommentId(id as u64)))
    }

    /// Remembers the bot's comment of `kind` on `issue`.
    pub async fn set_bot_comment(
        &self,
        issue: &IssueKey,
        kind: &str,
        id: CommentId,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO bot_comments (repo, issue, kind, comment_id) VALUES (?, ?, ?, ?)
             ON CONFLICT (repo, issue, kind) DO UPDATE SET comment_id = excluded.comment_id",
        )
        .bind(issue.repo.to_string())
        .bind(issue.number.0 as i64)
        .bind(kind)
        .bind(id.0 as i64)
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}
