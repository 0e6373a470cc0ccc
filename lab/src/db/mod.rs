//! The lab's database: one owner for its tables, bors-style. [`Db`] is the connection (SQLite
//! in `<lab>/queue.db` on one machine, PostgreSQL for many, through sqlx's `Any` driver), its
//! migrations and its durability; each table family has one module holding every statement
//! on it as a function:
//!
//! - [`jobs`] — the job queue's rows (the rules of a job's life are [`crate::queue`]'s) and
//!   `worker_hosts` (which host each worker is on, for jobs that avoid a host);
//! - [`proposals`] — the flow's state per experiment (`proposals`) and the per-author count
//!   of proposal entries (`proposal_entries`);
//! - [`sweeps`] — a sweep's current file hash, children, set approval and gate claim;
//! - [`forecasts`] — forecasts registered for a spec hash, for the worker to score;
//! - [`notifications`] — the outbox (what [`crate::outbox`] delivers to the bot);
//! - [`annotations`] — notes written through `/note` (rate limit, superseding);
//! - [`alerts`] — anomalies flagged and alerts raised (one per run and kind);
//! - [`sequence`] — the ledger's sequencer: entries get their log index here, in the
//!   transaction of the change they record, before the integrator writes them to the log.
//!
//! Every statement is written once, in the `$N` placeholder form both engines accept, and
//! binds every value. The tables are operational state: ids, hashes and times; the record
//! itself is the ledger's (the sequencer holds entries on their way into it). Not here: what a change means (the queue, the flow, the worker
//! decide), or the ledger.

pub mod alerts;
pub mod annotations;
pub mod forecasts;
pub mod jobs;
pub mod notifications;
pub mod proposals;
pub mod sequence;
pub mod sweeps;

use std::time::Duration;

use serde::Deserialize;
use sqlx::any::AnyPoolOptions;
use sqlx::{AnyPool, Row};

use glassbox_ledger::index::EmbeddedMigrations;

use crate::clock::Clock;
use crate::error::QueueError;

/// The queue database's migrations on SQLite, in order (`migrations/sqlite/`).
const SQLITE_MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "jobs",
        include_str!("../../migrations/sqlite/0001_jobs.sql"),
    ),
    (
        2,
        "flow",
        include_str!("../../migrations/sqlite/0002_flow.sql"),
    ),
    (
        3,
        "notice retries",
        include_str!("../../migrations/sqlite/0003_notice_retries.sql"),
    ),
    (
        4,
        "trust",
        include_str!("../../migrations/sqlite/0004_trust.sql"),
    ),
    (
        5,
        "debugging",
        include_str!("../../migrations/sqlite/0005_debugging.sql"),
    ),
    (
        6,
        "sequence",
        include_str!("../../migrations/sqlite/0006_sequence.sql"),
    ),
    (
        7,
        "reproduce",
        include_str!("../../migrations/sqlite/0007_reproduce.sql"),
    ),
    (
        8,
        "evals",
        include_str!("../../migrations/sqlite/0008_evals.sql"),
    ),
];
/// The same on PostgreSQL (`migrations/postgres/`).
const POSTGRES_MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "jobs",
        include_str!("../../migrations/postgres/0001_jobs.sql"),
    ),
    (
        2,
        "flow",
        include_str!("../../migrations/postgres/0002_flow.sql"),
    ),
    (
        3,
        "jobs open",
        include_str!("../../migrations/postgres/0003_jobs_open.sql"),
    ),
    (
        4,
        "notice retries",
        include_str!("../../migrations/postgres/0004_notice_retries.sql"),
    ),
    (
        5,
        "trust",
        include_str!("../../migrations/postgres/0005_trust.sql"),
    ),
    (
        6,
        "debugging",
        include_str!("../../migrations/postgres/0006_debugging.sql"),
    ),
    (
        7,
        "sequence",
        include_str!("../../migrations/postgres/0007_sequence.sql"),
    ),
    (
        8,
        "reproduce",
        include_str!("../../migrations/postgres/0008_reproduce.sql"),
    ),
    (
        9,
        "evals",
        include_str!("../../migrations/postgres/0009_evals.sql"),
    ),
];

/// Which engine the lab's database runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// Embedded, one machine.
    Sqlite,
    /// Shared by many machines.
    Postgres,
}

impl Engine {
    /// `sqlite` or `postgresql`, for messages (never the URL: it may hold a password).
    pub fn name(self) -> &'static str {
        match self {
            Engine::Sqlite => "sqlite",
            Engine::Postgres => "postgresql",
        }
    }

    /// The row-locking suffix of a claiming `SELECT`: PostgreSQL skips rows another worker
    /// holds; SQLite has one writer, so its claiming `UPDATE` is atomic already.
    pub(crate) fn skip_locked(self) -> &'static str {
        match self {
            Engine::Postgres => " FOR UPDATE SKIP LOCKED",
            Engine::Sqlite => "",
        }
    }

    /// The statement that opens a transaction which may write. SQLite's plain `BEGIN` is
    /// deferred: it reads first and asks for the write lock at its first write, and when
    /// another connection wrote meanwhile that upgrade fails at once with `SQLITE_BUSY`
    /// (`database is locked`, code 5 or 517) — the busy timeout cannot wait it out, because
    /// waiting would not make the transaction's snapshot current. `BEGIN IMMEDIATE` takes the
    /// write lock first, where the busy timeout does wait. PostgreSQL locks rows as it goes.
    pub(crate) fn begin_write(self) -> &'static str {
        match self {
            Engine::Sqlite => "BEGIN IMMEDIATE",
            Engine::Postgres => "BEGIN",
        }
    }
}

/// What a committed change survives (the lab config's `queue.durability`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// A power cut or an OS crash: a commit returns once it is on disk (SQLite
    /// `synchronous = FULL`; PostgreSQL `synchronous_commit = on`). The default.
    #[default]
    PowerLoss,
    /// A crash of a glassbox process (a killed worker or server), not of the machine: a commit
    /// returns once the database has it, before the disk flush. SQLite `synchronous = NORMAL`
    /// (the WAL reaches the OS at commit and is fsynced at checkpoints); PostgreSQL
    /// `synchronous_commit = off` (the WAL writer flushes within about three
    /// `wal_writer_delay`s, so a crash of the database server or the machine can lose the last
    /// fraction of a second of queue changes, an approval's job included).
    ProcessCrash,
}

/// An open lab database: the pool, its engine and the clock every row's time comes from.
/// Cheap to clone (the pool is shared).
#[derive(Debug, Clone)]
pub struct Db {
    pool: AnyPool,
    engine: Engine,
    clock: Clock,
    max_connections: u32,
}

impl Db {
    /// Opens (creating if needed) the database at `url` — `sqlite://PATH` or
    /// `postgres://...` — with `durability`, and applies the embedded migrations.
    pub async fn connect(
        url: &str,
        clock: Clock,
        durability: Durability,
    ) -> Result<Self, QueueError> {
        sqlx::any::install_default_drivers();
        let engine = if url.starts_with("sqlite:") {
            Engine::Sqlite
        } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            Engine::Postgres
        } else {
            return Err(QueueError::UnsupportedUrl(url.to_string()));
        };
        let url = match engine {
            // Create the file if missing.
            Engine::Sqlite if !url.contains("mode=") => {
                let sep = if url.contains('?') { '&' } else { '?' };
                format!("{url}{sep}mode=rwc")
            }
            _ => url.to_string(),
        };
        let max_connections = match engine {
            Engine::Sqlite => 4,
            Engine::Postgres => 8,
        };
        let options = AnyPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(30))
            // A connection whose commit failed (a full disk: SQLite rolls the transaction back
            // itself, so sqlx's own rollback fails too) still counts itself inside a
            // transaction, and every `BEGIN` on it would be refused: it is closed, not reused.
            .before_acquire(|conn, _meta| {
                Box::pin(async move { Ok(!sqlx::Connection::is_in_transaction(conn)) })
            })
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    match (engine, durability) {
                        (Engine::Sqlite, _) => {
                            // WAL lets readers run beside the writer.
                            sqlx::query("PRAGMA journal_mode = WAL")
                                .execute(&mut *conn)
                                .await?;
                            let sync = match durability {
                                Durability::PowerLoss => "PRAGMA synchronous = FULL",
                                Durability::ProcessCrash => "PRAGMA synchronous = NORMAL",
                            };
                            sqlx::query(sync).execute(&mut *conn).await?;
                            sqlx::query("PRAGMA busy_timeout = 10000")
                                .execute(&mut *conn)
                                .await?;
                        }
                        (Engine::Postgres, Durability::ProcessCrash) => {
                            sqlx::query("SET synchronous_commit = off")
                                .execute(&mut *conn)
                                .await?;
                        }
                        (Engine::Postgres, Durability::PowerLoss) => {}
                    }
                    Ok(())
                })
            });
        let pool = options.connect(&url).await?;
        let migrations = match engine {
            Engine::Sqlite => SQLITE_MIGRATIONS,
            Engine::Postgres => POSTGRES_MIGRATIONS,
        };
        EmbeddedMigrations(migrations).run(&pool).await?;
        Ok(Self {
            pool,
            engine,
            clock,
            max_connections,
        })
    }

    /// The pool, for this module's statements.
    pub(crate) fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// The engine in use.
    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// A transaction that may write ([`Engine::begin_write`]). Every transaction of the lab's
    /// that writes opens this way; a plain `begin()` is for reading only.
    pub(crate) async fn begin_write(
        &self,
    ) -> Result<sqlx::Transaction<'static, sqlx::Any>, sqlx::Error> {
        self.pool.begin_with(self.engine.begin_write()).await
    }

    /// The clock every row's time comes from.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Now, by [`Db::clock`], in Unix milliseconds.
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// The pool's size.
    pub fn max_connections(&self) -> u32 {
        self.max_connections
    }

    /// The durability the database reports for a pooled connection (read back from the
    /// engine: `PRAGMA synchronous` / `SHOW synchronous_commit`, not from the request).
    pub async fn durability_in_effect(&self) -> Result<Durability, QueueError> {
        Ok(match self.engine {
            Engine::Sqlite => {
                let row = sqlx::query("PRAGMA synchronous")
                    .fetch_one(&self.pool)
                    .await?;
                // 2 = FULL, 3 = EXTRA; 1 = NORMAL, 0 = OFF.
                if row.try_get::<i64, _>(0)? >= 2 {
                    Durability::PowerLoss
                } else {
                    Durability::ProcessCrash
                }
            }
            Engine::Postgres => {
                let row = sqlx::query("SHOW synchronous_commit")
                    .fetch_one(&self.pool)
                    .await?;
                if row.try_get::<String, _>(0)? == "off" {
                    Durability::ProcessCrash
                } else {
                    Durability::PowerLoss
                }
            }
        })
    }

    /// Closes the pool.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file under `migrations/<engine>/` is listed, in order, under its own version: a
    /// migration added to the directory and not to the list would never run.
    #[test]
    fn the_embedded_migrations_are_the_directories() {
        for (engine, listed) in [
            ("sqlite", SQLITE_MIGRATIONS),
            ("postgres", POSTGRES_MIGRATIONS),
        ] {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("migrations")
                .join(engine);
            let mut files: Vec<(i64, String)> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .map(|f| (f[..4].parse().unwrap(), f))
                .collect();
            files.sort();
            assert_eq!(files.len(), listed.len(), "{engine}: {files:?}");
            for ((version, file), (v, _, sql)) in files.iter().zip(listed) {
                assert_eq!(version, v, "{engine}: {file}");
                let text = std::fs::read_to_string(dir.join(file)).unwrap();
                assert_eq!(&text, sql, "{engine}: {file} is not the SQL listed as {v}");
            }
        }
    }
}
