//! The bot's durable state in SQLite (sqlx): the delivery queue, the bot's own comment ids, and
//! what makes repeated deliveries harmless.
//!
//! Tables:
//! - `deliveries`: every accepted `X-GitHub-Delivery` id (UNIQUE, which is the de-duplication)
//!   with its event name and raw payload, and a state: `pending` (to process), `acted`,
//!   `ignored` (`reason` says why: an event or action the bot does not handle, another
//!   repository, a stale issue event, ...; pruned after `github.ignored_retention_hours`) or
//!   `failed` (gave up; `last_error` says why). A delivery is written, and committed, before the
//!   webhook is answered, so a crash after the 2xx leaves it `pending` and the next worker picks
//!   it up. A `failed` delivery received again under its id (GitHub's "Redeliver") is queued
//!   again; any other repeat is a duplicate.
//! - `bot_comments`: `(repo, issue, kind) -> comment id`, so the validation comment (kind
//!   `validation`), a run's comment (`run:<run id>`) and its result (`result:<run id>`) are
//!   edited in place. A lost row is recovered from the comment's marker (see
//!   [`crate::bot::Bot`]), so this table is a cache, not the only memory.
//! - `command_runs`: `(comment id, command line)` of every command that has run, so a command
//!   acts once whatever delivery (a replay under a fresh delivery id included) carries it.
//! - `issue_versions`: per issue, GitHub's `updated_at` of the last issue event applied, so an
//!   older event (replayed or late) is never applied over a newer one.
//!
//! The schema is versioned with `PRAGMA user_version` ([`MIGRATIONS`]); a database from an
//! earlier version is brought up to date when opened.
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

/// The schema, one step per version (`PRAGMA user_version` = how many have run). Version 1 is
/// written idempotently because databases made before versioning already hold it.
pub const MIGRATIONS: [&str; 2] = [SCHEMA_V1, SCHEMA_V2];

const SCHEMA_V1: &str = "
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

const SCHEMA_V2: &str = "
ALTER TABLE deliveries ADD COLUMN reason TEXT;
UPDATE deliveries SET state = 'acted' WHERE state = 'done';
CREATE TABLE command_runs (
    comment_id INTEGER NOT NULL,
    line TEXT NOT NULL,
    acted_ms INTEGER NOT NULL,
    PRIMARY KEY (comment_id, line)
);
CREATE TABLE issue_versions (
    repo TEXT NOT NULL,
    issue INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (repo, issue)
);
CREATE INDEX deliveries_by_received ON deliveries (state, received_ms);
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
    /// Processed and acted on.
    pub acted: u64,
    /// Not acted on, for a reason; kept for de-duplication until pruned.
    pub ignored: u64,
    /// Given up.
    pub failed: u64,
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    /// Waiting to be processed (or to be retried).
    Pending,
    /// Processed and acted on.
    Acted,
    /// Not acted on; the record says why.
    Ignored,
    /// Given up; the record says why.
    Failed,
}

impl DeliveryState {
    /// The name stored in the table.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Acted => "acted",
            DeliveryState::Ignored => "ignored",
            DeliveryState::Failed => "failed",
        }
    }

    fn from_stored(s: &str) -> Self {
        match s {
            "pending" => DeliveryState::Pending,
            "acted" => DeliveryState::Acted,
            "ignored" => DeliveryState::Ignored,
            _ => DeliveryState::Failed,
        }
    }
}

impl std::fmt::Display for DeliveryState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One delivery as `glassbox bot deliveries` lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeliveryRecord {
    /// `X-GitHub-Delivery`.
    pub id: DeliveryId,
    /// `X-GitHub-Event`.
    pub event: String,
    /// Where it stands.
    pub state: DeliveryState,
    /// Processing attempts so far.
    pub attempts: u32,
    /// Why it was ignored, or the last error (failed, or pending a retry).
    pub detail: Option<String>,
    /// When it was received, Unix milliseconds.
    pub received_ms: i64,
}

/// What storing an accepted delivery did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intaken {
    /// A new delivery id: stored.
    New,
    /// The id of a delivery that had `failed`, received again (GitHub's "Redeliver"): queued
    /// again with the new body.
    Requeued,
    /// The id was already accepted and did not fail: not queued again.
    Duplicate,
}

/// Why `glassbox bot redeliver` could not queue a delivery again.
#[derive(Debug, thiserror::Error)]
pub enum RequeueError {
    /// No delivery has that id.
    #[error("no delivery {0} in the bot's store (see `glassbox bot deliveries`)")]
    NotFound(DeliveryId),
    /// Only failed deliveries keep their payload to be processed again.
    #[error("delivery {id} is {state}; only failed deliveries can be queued again")]
    NotFailed {
        /// The delivery.
        id: DeliveryId,
        /// Its state.
        state: DeliveryState,
    },
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
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

    /// Opens a database that must already exist (for `glassbox bot`, which must not create an
    /// empty store beside a lab whose bot never ran).
    pub async fn open_existing(url: &str) -> Result<Self, StoreError> {
        Self::open_inner(url, Durability::PowerLoss, false).await
    }

    /// Opens the database with the given durability.
    pub async fn open_with(url: &str, durability: Durability) -> Result<Self, StoreError> {
        Self::open_inner(url, durability, true).await
    }

    async fn open_inner(
        url: &str,
        durability: Durability,
        create: bool,
    ) -> Result<Self, StoreError> {
        let synchronous = match durability {
            Durability::PowerLoss => SqliteSynchronous::Full,
            Durability::ProcessCrash => SqliteSynchronous::Normal,
        };
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(create)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(synchronous)
            // The intake checkpoints the WAL in the background (`checkpoint`), off the commit
            // path; SQLite's own checkpoint (which runs inside a commit) is only a backstop.
            .pragma("wal_autocheckpoint", "16384")
            .busy_timeout(Duration::from_secs(5));
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            // A connection whose commit failed (a full disk: SQLite rolls the transaction back
            // itself, so sqlx's own rollback fails too) still counts itself inside a
            // transaction, and every `BEGIN` on it would be refused: it is closed, not reused.
            .before_acquire(|conn, _meta| {
                Box::pin(async move { Ok(!sqlx::Connection::is_in_transaction(conn)) })
            })
            .connect_with(options)
            .await?;
        let store = Self { pool };
        store.migrate().await?;
        Ok(store)
    }

    /// A transaction that may write, holding SQLite's write lock from its first statement
    /// (`BEGIN IMMEDIATE`). A plain `BEGIN` is deferred: it reads, then asks for the write lock
    /// at its first write, and when another connection wrote meanwhile that upgrade fails at
    /// once with `database is locked` (`SQLITE_BUSY`, code 5 or 517) — the busy timeout cannot
    /// wait it out, since the transaction's snapshot is already stale. Taking the lock first is
    /// what lets the busy timeout wait. Every transaction here that writes opens this way.
    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>, sqlx::Error> {
        self.pool.begin_with("BEGIN IMMEDIATE").await
    }

    /// Runs the [`MIGRATIONS`] the database has not seen, each in its own transaction.
    async fn migrate(&self) -> Result<(), StoreError> {
        let (version,): (i64,) = sqlx::query_as("PRAGMA user_version")
            .fetch_one(&self.pool)
            .await?;
        for (i, step) in MIGRATIONS.iter().enumerate().skip(version.max(0) as usize) {
            let mut tx = self.begin_write().await?;
            sqlx::raw_sql(step).execute(&mut *tx).await?;
            sqlx::raw_sql(&format!("PRAGMA user_version = {}", i + 1))
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
        }
        Ok(())
    }

    /// Stores a batch of deliveries in one transaction (one fsync for the batch: group commit).
    /// Returns, for each, what happened to it (see [`Intaken`]).
    pub async fn insert_deliveries(
        &self,
        batch: &[NewDelivery],
    ) -> Result<Vec<Intaken>, StoreError> {
        let mut tx = self.begin_write().await?;
        let now = now_ms();
        let mut out = Vec::with_capacity(batch.len());
        for d in batch {
            let existing: Option<(String,)> =
                sqlx::query_as("SELECT state FROM deliveries WHERE delivery_id = ?")
                    .bind(&d.id.0)
                    .fetch_optional(&mut *tx)
                    .await?;
            let intaken = match existing {
                None => {
                    let (state, reason) = match d.payload {
                        Some(_) => ("pending", None),
                        None => (
                            "ignored",
                            Some(format!("event `{}` is not handled", d.event)),
                        ),
                    };
                    sqlx::query(
                        "INSERT INTO deliveries (delivery_id, event, payload, state, reason, received_ms)
                         VALUES (?, ?, ?, ?, ?, ?)",
                    )
                    .bind(&d.id.0)
                    .bind(&d.event)
                    .bind(d.payload.as_deref())
                    .bind(state)
                    .bind(reason)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                    Intaken::New
                }
                Some((state,)) if state == "failed" && d.payload.is_some() => {
                    sqlx::query(
                        "UPDATE deliveries SET state = 'pending', payload = ?, attempts = 0,
                         not_before_ms = 0, last_error = NULL, reason = NULL, received_ms = ?
                         WHERE delivery_id = ?",
                    )
                    .bind(d.payload.as_deref())
                    .bind(now)
                    .bind(&d.id.0)
                    .execute(&mut *tx)
                    .await?;
                    Intaken::Requeued
                }
                Some(_) => Intaken::Duplicate,
            };
            out.push(intaken);
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

    /// Marks a delivery acted on; its payload is dropped.
    pub async fn mark_acted(&self, seq: i64) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE deliveries SET state = 'acted', payload = NULL, last_error = NULL WHERE seq = ?",
        )
        .bind(seq)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Marks a delivery ignored, with the reason; its payload is dropped.
    pub async fn mark_ignored(&self, seq: i64, reason: &str) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE deliveries SET state = 'ignored', payload = NULL, reason = ?,
             last_error = NULL WHERE seq = ?",
        )
        .bind(reason)
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
            match DeliveryState::from_stored(&state) {
                DeliveryState::Pending => c.pending = n,
                DeliveryState::Acted => c.acted = n,
                DeliveryState::Ignored => c.ignored = n,
                DeliveryState::Failed => c.failed += n,
            }
        }
        Ok(c)
    }

    /// The newest deliveries first, at most `limit`, only those in `state` when given.
    pub async fn list_deliveries(
        &self,
        state: Option<DeliveryState>,
        limit: u32,
    ) -> Result<Vec<DeliveryRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT delivery_id, event, state, attempts, COALESCE(reason, last_error), received_ms
             FROM deliveries WHERE (? IS NULL OR state = ?) ORDER BY seq DESC LIMIT ?",
        )
        .bind(state.map(DeliveryState::as_str))
        .bind(state.map(DeliveryState::as_str))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| DeliveryRecord {
                id: DeliveryId(r.get(0)),
                event: r.get(1),
                state: DeliveryState::from_stored(&r.get::<String, _>(2)),
                attempts: r.get::<i64, _>(3).max(0) as u32,
                detail: r.get(4),
                received_ms: r.get(5),
            })
            .collect())
    }

    /// Queues a failed delivery again (`glassbox bot redeliver`), from the payload it kept.
    pub async fn requeue(&self, id: &DeliveryId) -> Result<(), RequeueError> {
        let state: Option<(String,)> =
            sqlx::query_as("SELECT state FROM deliveries WHERE delivery_id = ?")
                .bind(&id.0)
                .fetch_optional(&self.pool)
                .await
                .map_err(StoreError::from)?;
        match state.map(|(s,)| DeliveryState::from_stored(&s)) {
            None => Err(RequeueError::NotFound(id.clone())),
            Some(DeliveryState::Failed) => {
                sqlx::query(
                    "UPDATE deliveries SET state = 'pending', attempts = 0, not_before_ms = 0,
                     last_error = NULL WHERE delivery_id = ? AND state = 'failed'",
                )
                .bind(&id.0)
                .execute(&self.pool)
                .await
                .map_err(StoreError::from)?;
                Ok(())
            }
            Some(state) => Err(RequeueError::NotFailed {
                id: id.clone(),
                state,
            }),
        }
    }

    /// Deletes `ignored` deliveries received at least `age` ago; returns how many.
    pub async fn prune_ignored(&self, age: Duration) -> Result<u64, StoreError> {
        let cutoff = now_ms().saturating_sub(age.as_millis().min(i64::MAX as u128) as i64);
        let r = sqlx::query("DELETE FROM deliveries WHERE state = 'ignored' AND received_ms <= ?")
            .bind(cutoff)
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected())
    }

    /// Whether the command `line` of comment `comment` has already run.
    pub async fn command_ran(&self, comment: CommentId, line: &str) -> Result<bool, StoreError> {
        let row: Option<(i64,)> =
            sqlx::query_as("SELECT 1 FROM command_runs WHERE comment_id = ? AND line = ?")
                .bind(comment.0 as i64)
                .bind(line)
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.is_some())
    }

    /// Remembers that the command `line` of comment `comment` has run.
    pub async fn record_command(&self, comment: CommentId, line: &str) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO command_runs (comment_id, line, acted_ms) VALUES (?, ?, ?)
             ON CONFLICT (comment_id, line) DO NOTHING",
        )
        .bind(comment.0 as i64)
        .bind(line)
        .bind(now_ms())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// GitHub's `updated_at` (Unix seconds) of the last issue event applied to `issue`.
    pub async fn issue_version(&self, issue: &IssueKey) -> Result<Option<i64>, StoreError> {
        let row: Option<(i64,)> =
            sqlx::query_as("SELECT updated_at FROM issue_versions WHERE repo = ? AND issue = ?")
                .bind(issue.repo.to_string())
                .bind(issue.number.0 as i64)
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.map(|(t,)| t))
    }

    /// Remembers that an issue event of `updated_at` (Unix seconds) was applied; never moves
    /// the stored time backwards.
    pub async fn record_issue_version(
        &self,
        issue: &IssueKey,
        updated_at: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO issue_versions (repo, issue, updated_at) VALUES (?, ?, ?)
             ON CONFLICT (repo, issue) DO UPDATE
             SET updated_at = MAX(updated_at, excluded.updated_at)",
        )
        .bind(issue.repo.to_string())
        .bind(issue.number.0 as i64)
        .bind(updated_at)
        .execute(&self.pool)
        .await?;
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_database_from_before_versioning_is_brought_up_to_date() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("old.db").display());
        // What the bot wrote before the schema had versions: v1 tables and a `done` row.
        let old = SqlitePoolOptions::new()
            .connect_with(
                SqliteConnectOptions::from_str(&url)
                    .unwrap()
                    .create_if_missing(true),
            )
            .await
            .unwrap();
        sqlx::raw_sql(SCHEMA_V1).execute(&old).await.unwrap();
        sqlx::query(
            "INSERT INTO deliveries (delivery_id, event, state, received_ms)
             VALUES ('old', 'issues', 'done', 1)",
        )
        .execute(&old)
        .await
        .unwrap();
        old.close().await;

        let store = Store::open(&url).await.unwrap();
        assert_eq!(store.counts().await.unwrap().acted, 1);
        let (version,): (i64,) = sqlx::query_as("PRAGMA user_version")
            .fetch_one(&store.pool)
            .await
            .unwrap();
        assert_eq!(version, MIGRATIONS.len() as i64);
        // Opening again runs nothing twice.
        drop(store);
        Store::open(&url).await.unwrap();
        assert!(
            Store::open_existing(&format!(
                "sqlite://{}",
                dir.path().join("missing.db").display()
            ))
            .await
            .is_err()
        );
    }

    /// Writers that read before they write, many at once on two handles of one file (two
    /// processes' worth of connections): each batch reads the ids, then inserts. With deferred
    /// transactions a writer whose snapshot another commit overtook fails at once with
    /// `database is locked`; opened `IMMEDIATE`, every one waits its turn and lands.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_read_then_write_batches_all_land() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("bot.db").display());
        let a = Store::open_with(&url, Durability::ProcessCrash)
            .await
            .unwrap();
        let b = Store::open_with(&url, Durability::ProcessCrash)
            .await
            .unwrap();
        const WRITERS: usize = 16;
        const BATCHES: usize = 25;
        let mut tasks = Vec::new();
        for w in 0..WRITERS {
            let store = if w % 2 == 0 { a.clone() } else { b.clone() };
            tasks.push(tokio::spawn(async move {
                let mut failures = Vec::new();
                for n in 0..BATCHES {
                    let batch: Vec<NewDelivery> = (0..3)
                        .map(|k| NewDelivery {
                            id: DeliveryId(format!("w{w}-b{n}-{k}")),
                            event: "issue_comment".into(),
                            payload: Some(b"{}".to_vec()),
                        })
                        .collect();
                    if let Err(e) = store.insert_deliveries(&batch).await {
                        failures.push(e.to_string());
                    }
                }
                failures
            }));
        }
        let mut failures = Vec::new();
        for t in tasks {
            failures.extend(t.await.unwrap());
        }
        assert!(
            failures.is_empty(),
            "{} of {} batches failed, first: {:?}",
            failures.len(),
            WRITERS * BATCHES,
            failures.first()
        );
        let (stored,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM deliveries")
            .fetch_one(&a.pool)
            .await
            .unwrap();
        assert_eq!(stored as usize, WRITERS * BATCHES * 3);
    }
}
