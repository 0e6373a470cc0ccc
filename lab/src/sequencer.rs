//! [`Sequencer`]: the recorder's handle on the ledger's sequencer tables
//! ([`crate::db::sequence`]), usable from synchronous code.
//!
//! The [`crate::recorder::Recorder`] is synchronous (its callers put blobs and write files on
//! blocking threads), but the sequencer lives in the lab's database, which sqlx reaches only
//! from async code. So the sequencer keeps a pool of its own on a one-thread
//! [`PrivateRuntime`] and drives each statement to completion on it, from any thread. The pool is separate from the queue's, so a caller blocked here never holds
//! up (or waits on) the runtime the queue runs on.
//!
//! [`Sequencer::integrator_lock`] is the one-integrator rule on PostgreSQL: a session advisory
//! lock, held on a connection of its own for as long as the guard lives and released by the
//! server when the process dies. On SQLite (one machine) the log's own file lock is enough.
//!
//! Not here: what the integrator writes (the recorder), or sequencing inside another
//! transaction (`crate::queue::Ending::sequence`, `crate::queue::Queue::enqueue_sequenced`).

use std::future::Future;
use std::time::{Duration, Instant};

use sqlx::Row;
use sqlx::pool::PoolConnection;

use glassbox_ledger::private_runtime::PrivateRuntime;

use crate::clock::Clock;
use crate::db::sequence::{self, Head};
use crate::db::{Db, Durability, Engine};
use crate::error::QueueError;

/// How long [`Sequencer::append`] (and the recorder's publishing) wait for a database that is
/// away before giving up.
pub const RETRY_FOR: Duration = Duration::from_secs(30);

/// The advisory lock key of the integrator ("glassbox" in ASCII, as a big-endian i64).
const INTEGRATOR_LOCK: i64 = 0x676c_6173_7362_6f78;

/// The ledger's sequencer, for synchronous callers.
pub struct Sequencer {
    db: Db,
    rt: PrivateRuntime,
}

impl std::fmt::Debug for Sequencer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sequencer({})", self.db.engine().name())
    }
}

impl Drop for Sequencer {
    fn drop(&mut self) {
        // Close the pool's connections while their runtime still runs.
        self.rt.drive(self.db.pool().close());
    }
}

/// Holds the integrator's advisory lock (PostgreSQL) until dropped.
pub struct IntegratorLock<'s> {
    seq: &'s Sequencer,
    conn: Option<PoolConnection<sqlx::Any>>,
}

impl std::fmt::Debug for IntegratorLock<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IntegratorLock(held: {})", self.conn.is_some())
    }
}

impl Drop for IntegratorLock<'_> {
    fn drop(&mut self) {
        if let Some(mut conn) = self.conn.take() {
            // Unlock and hand the connection back on the sequencer's runtime (returning a
            // pooled connection needs one). A failed unlock closes the connection instead,
            // which releases the lock too.
            self.seq.drive(async move {
                let unlocked = sqlx::query("SELECT pg_advisory_unlock($1)")
                    .bind(INTEGRATOR_LOCK)
                    .execute(&mut *conn)
                    .await;
                if unlocked.is_err() {
                    let _ = conn.close().await;
                }
            });
        }
    }
}

impl Sequencer {
    /// Connects to the lab database at `url` (applying migrations, as the queue does).
    pub fn connect(url: &str, durability: Durability) -> Result<Self, QueueError> {
        let rt = PrivateRuntime::new("glassbox-sequencer", 1).map_err(|e| {
            QueueError::CommitFailed(format!("cannot start the sequencer's runtime: {e}"))
        })?;
        let db = rt.drive(Db::connect(url, Clock::System, durability))?;
        Ok(Self { db, rt })
    }

    /// Runs `f` to completion on the private runtime, from any thread.
    fn drive<F>(&self, f: F) -> F::Output
    where
        F: Future + Send,
        F::Output: Send,
    {
        self.rt.drive(f)
    }

    /// The engine the sequencer runs on.
    pub fn engine(&self) -> Engine {
        self.db.engine()
    }

    /// The head, or `None` before the sequencer is set up.
    pub fn head(&self) -> Result<Option<Head>, QueueError> {
        self.drive(sequence::head(self.db.pool()))
    }

    /// Sets the sequencer up over the log's `entries` unless it is already; returns whether
    /// this call did it.
    pub fn set_up(&self, entries: &[Vec<u8>]) -> Result<bool, QueueError> {
        let now = self.db.now_ms();
        self.drive(async {
            let mut tx = self.db.begin_write().await?;
            let did = sequence::set_up(&mut tx, entries, now).await?;
            tx.commit().await?;
            Ok(did)
        })
    }

    /// Sequences `entries` in a transaction of their own; returns the first one's index. A
    /// database that is away (a restart, a dropped connection) is waited for, up to
    /// [`RETRY_FOR`], as long as the transaction had not reached its commit; a commit whose
    /// outcome is unknown is never repeated (the entries could be sequenced twice):
    /// [`QueueError::CommitFailed`].
    pub fn append(&self, entries: &[Vec<u8>]) -> Result<u64, QueueError> {
        let now = self.db.now_ms();
        let deadline = Instant::now() + RETRY_FOR;
        let mut pause = Duration::from_millis(50);
        loop {
            let attempt = self.drive(async {
                let mut tx = self.db.begin_write().await.map_err(|e| (e.into(), false))?;
                let first = sequence::sequence(&mut tx, entries, now)
                    .await
                    .map_err(|e| (e, false))?;
                tx.commit()
                    .await
                    .map_err(|e| (QueueError::CommitFailed(e.to_string()), true))?;
                Ok::<_, (QueueError, bool)>(first)
            });
            match attempt {
                Ok(first) => return Ok(first),
                Err((e, false)) if e.is_transient() && Instant::now() < deadline => {
                    tracing::warn!(error = %e, "the sequencer's database is away; retrying");
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
                Err((e, _)) => return Err(e),
            }
        }
    }

    /// Adopts `missing`, the entries the log holds from index `at` on, past the sequencer's
    /// head (appended to the log around it, by a tool that wrote the log directly): sequences
    /// them and marks them integrated, only if `at` is still the head — the head's row lock
    /// makes that certain for the length of the transaction. Otherwise those indices were
    /// handed out meanwhile and the log conflicts with the sequencer: refused.
    pub fn adopt(&self, at: u64, missing: Vec<Vec<u8>>) -> Result<(), crate::error::LabError> {
        let now = self.db.now_ms();
        let size = at + missing.len() as u64;
        let adopted = self.drive(async {
            let mut tx = self.db.begin_write().await?;
            if sequence::sequence(&mut tx, &missing, now).await? != at {
                return Ok::<_, QueueError>(false);
            }
            sequence::set_integrated(&mut *tx, size).await?;
            tx.commit().await?;
            Ok(true)
        })?;
        if adopted {
            return Ok(());
        }
        Err(crate::error::LabError::Refused(format!(
            "the log holds {size} entries but the sequencer handed out index {at} meanwhile: \
             something appended to the log around the sequencer"
        )))
    }

    /// The sequenced entries at `from..`, in index order, at most `limit`.
    pub fn entries_from(&self, from: u64, limit: u32) -> Result<Vec<(u64, Vec<u8>)>, QueueError> {
        self.drive(sequence::entries_from(self.db.pool(), from, limit))
    }

    /// The entry at `idx`, if sequenced.
    pub fn entry(&self, idx: u64) -> Result<Option<Vec<u8>>, QueueError> {
        self.drive(sequence::entry(self.db.pool(), idx))
    }

    /// Records that the published checkpoint covers `size` entries.
    pub fn set_integrated(&self, size: u64) -> Result<(), QueueError> {
        self.drive(sequence::set_integrated(self.db.pool(), size))
    }

    /// Takes the integrator's lock (waiting for it when `wait`; else `None` when another
    /// process holds it): on PostgreSQL a session advisory lock on a connection held until the
    /// guard drops; on SQLite nothing (the log's file lock serialises the one machine's
    /// integrators).
    pub fn integrator_lock(&self, wait: bool) -> Result<Option<IntegratorLock<'_>>, QueueError> {
        let conn = match self.db.engine() {
            Engine::Sqlite => None,
            Engine::Postgres => {
                let conn = self.drive(async {
                    let mut conn = self.db.pool().acquire().await?;
                    if wait {
                        sqlx::query("SELECT pg_advisory_lock($1)")
                            .bind(INTEGRATOR_LOCK)
                            .execute(&mut *conn)
                            .await?;
                        return Ok::<_, QueueError>(Some(conn));
                    }
                    let row = sqlx::query("SELECT pg_try_advisory_lock($1)")
                        .bind(INTEGRATOR_LOCK)
                        .fetch_one(&mut *conn)
                        .await?;
                    Ok(row.try_get::<bool, _>(0)?.then_some(conn))
                })?;
                match conn {
                    Some(c) => Some(c),
                    None => return Ok(None),
                }
            }
        };
        Ok(Some(IntegratorLock { seq: self, conn }))
    }
}
