//! Group commit for the queue's hot writes on SQLite: enqueue, lease, finish.
//!
//! Each of these is one statement, and at the default durability each commit waits for a disk
//! flush (`synchronous = FULL`). SQLite has one writer, so workers that write at the same
//! moment would wait for one flush each, in turn. Instead, a write joins a pending list; one
//! drain task per queue handle takes everything pending, runs it in one transaction in arrival
//! order, commits once, then answers every caller. Nothing is acknowledged before its commit,
//! so durability is unchanged; a lone write is committed on its own at once (no timer, no
//! added latency when idle). Between batches the drain yields once, so callers just answered
//! that write again at once join the next batch rather than wait a commit for the one after.
//!
//! PostgreSQL does not go through the list: its server already lets one WAL flush cover every
//! commit waiting for it, and a shared transaction costs two more round trips (BEGIN, COMMIT).
//! Measured with `queue_bench`, grouping there was slower (BENCHMARKS.md, "Queue").
//!
//! One bad write cannot fail its neighbours: if a statement fails, the transaction is rolled
//! back (nothing of it happened) and each write of the batch is retried on its own. A failed
//! COMMIT is different — the database may or may not have applied it — so every caller of that
//! batch gets the error and nothing is retried blindly (an enqueue must never happen twice).
//!
//! Hot writes on both engines keep their pool connections between uses ([`Held`]): sqlx's
//! pool tests a connection with a round trip each time it is returned (and, by default, each
//! time it is handed out), which would double or triple the round trips of a one-statement
//! write. A kept connection that sat unused for [`RETEST_AFTER`] is tested before use, as the
//! pool would, so a database restarted while the queue was quiet is noticed before a write.
//!
//! This is the queue's only concurrency machinery; it is not a general write-behind cache.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyConnection, Connection};
use tokio::sync::oneshot;

use super::{Engine, Job, JobId, NewJob, Queue, QueueError, WorkerId};
use crate::db::jobs::{self, Finish};

/// At most this many writes share one transaction (a bound on lock hold time, not a target).
const MAX_BATCH: usize = 64;

/// A hot write, with the times it uses already taken (so a batch does not shift them).
#[derive(Debug)]
pub(super) enum Op {
    Enqueue {
        job: NewJob,
        now: i64,
    },
    Lease {
        worker: WorkerId,
        expires: i64,
        now: i64,
    },
    Finish(Finish),
    /// A finish and the same worker's next lease, committed together.
    FinishAndLease {
        finish: Finish,
        expires: i64,
    },
}

/// What a hot write did.
#[derive(Debug)]
pub(super) enum Done {
    Enqueued(JobId),
    Leased(Option<Box<Job>>),
    /// Rows changed (1, or 0 when the worker no longer held the lease).
    Finished(u64),
    /// Both of the above.
    FinishedAndLeased(u64, Option<Box<Job>>),
}

type Reply = oneshot::Sender<Result<Done, QueueError>>;

/// A kept connection unused for this long is tested (one round trip) before its next write.
const RETEST_AFTER: Duration = Duration::from_secs(1);

/// The writes waiting for the next commit, shared by a queue handle's clones.
#[derive(Debug, Default)]
pub(super) struct GroupCommit {
    pending: Mutex<Pending>,
    /// Hot writes answered, and the transactions that committed them (for [`WriteStats`]).
    writes: AtomicU64,
    commits: AtomicU64,
    /// Connections kept out of the pool between hot writes.
    held: Held,
}

/// Pool connections the hot writes keep between uses, each with the time it was last used.
/// They still count against the pool's size; at most `max` are kept (the rest go back), so the
/// pool always has connections left for reads and heartbeats.
#[derive(Debug, Default)]
struct Held {
    idle: Mutex<Vec<(PoolConnection<Any>, Instant)>>,
    max: usize,
}

impl Held {
    /// Keeps at most `max` connections.
    fn new(max: usize) -> Self {
        Self {
            idle: Mutex::default(),
            max,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<(PoolConnection<Any>, Instant)>> {
        // Pushing and popping cannot panic half-way; a poisoned list is still a valid list.
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands every kept connection back to the pool.
    fn release_all(&self) {
        drop(std::mem::take(&mut *self.lock()));
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // Returning a connection to the pool spawns a task; without a runtime (the last queue
        // handle dropped after its runtime ended) that would panic, so the connections are
        // detached and closed by dropping them instead.
        if tokio::runtime::Handle::try_current().is_err() {
            for (conn, _) in std::mem::take(&mut *self.lock()) {
                drop(conn.detach());
            }
        }
    }
}

/// How well concurrent writes are sharing commits (`/metrics`, benchmarks, tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteStats {
    /// Enqueues, leases and finishes committed through this queue handle.
    pub writes: u64,
    /// Transactions that committed them (equal to `writes` when nothing was shared).
    pub commits: u64,
}

#[derive(Debug, Default)]
struct Pending {
    ops: Vec<(Op, Reply)>,
    /// Drain tasks running; each picks up whatever is pending when it looks.
    drains: usize,
}

impl GroupCommit {
    /// Nothing pending; hot writes keep at most `keep_connections` connections.
    pub(super) fn new(keep_connections: usize) -> Self {
        Self {
            held: Held::new(keep_connections),
            ..Self::default()
        }
    }

    /// Hands the kept connections back to the pool (before it closes: closing waits for every
    /// connection to come back).
    pub(super) fn release_connections(&self) {
        self.held.release_all();
    }

    fn lock(&self) -> MutexGuard<'_, Pending> {
        // The lock is never held across a panic-prone call; a poisoned one still holds
        // consistent data.
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Accounts for a drain task that ends abnormally (a panic, or its runtime shutting down):
/// it no longer counts as running, and if it was the last one the writes still pending are
/// dropped, so their callers see their reply channel close and get
/// [`QueueError::WriterStopped`] rather than waiting forever. A drain that ends normally
/// disarms it, having left the count under the same lock in which it saw nothing pending.
struct DrainGuard {
    group: Arc<GroupCommit>,
    armed: bool,
}

impl Drop for DrainGuard {
    fn drop(&mut self) {
        if self.armed {
            let mut p = self.group.lock();
            p.drains = p.drains.saturating_sub(1);
            if p.drains == 0 {
                p.ops.clear();
            }
        }
    }
}

impl Queue {
    /// A connection for a hot write: a kept one if there is one (tested first if it sat idle),
    /// else one from the pool.
    async fn take_connection(&self) -> Result<PoolConnection<Any>, QueueError> {
        let kept = self.group.held.lock().pop();
        if let Some((mut conn, last_used)) = kept {
            if last_used.elapsed() < RETEST_AFTER || conn.ping().await.is_ok() {
                return Ok(conn);
            }
            // Broken (a restarted database): dropping it lets the pool discard it.
        }
        Ok(self.db.pool().acquire().await?)
    }

    /// Keeps `conn` for the next hot write, or gives it back to the pool when enough are kept
    /// or the pool is closing (which waits for it).
    fn keep_connection(&self, conn: PoolConnection<Any>) {
        let mut idle = self.group.held.lock();
        if idle.len() < self.group.held.max && !self.db.pool().is_closed() {
            idle.push((conn, Instant::now()));
        }
    }

    /// Writes and commits so far through this handle and its clones.
    pub fn write_stats(&self) -> WriteStats {
        WriteStats {
            writes: self.group.writes.load(Ordering::Relaxed),
            commits: self.group.commits.load(Ordering::Relaxed),
        }
    }

    /// Runs `op` in the next group commit and waits for its outcome.
    pub(super) async fn submit(&self, op: Op) -> Result<Done, QueueError> {
        if self.engine() == Engine::Postgres {
            // PostgreSQL already shares WAL flushes between concurrent commits, and a shared
            // transaction costs it two more round trips (BEGIN, COMMIT): measured slower.
            return self.apply_alone(&op).await;
        }
        let (tx, rx) = oneshot::channel();
        let start_drain = {
            let mut p = self.group.lock();
            p.ops.push((op, tx));
            let start = p.drains == 0;
            if start {
                p.drains += 1;
            }
            start
        };
        if start_drain {
            // A task of its own, so a caller that stops waiting (a dropped future) never
            // strands the writes that joined its batch.
            let queue = self.clone();
            tokio::spawn(async move { queue.drain().await });
        }
        rx.await.map_err(|_| QueueError::WriterStopped)?
    }

    async fn drain(&self) {
        let mut guard = DrainGuard {
            group: self.group.clone(),
            armed: true,
        };
        loop {
            let batch: Vec<(Op, Reply)> = {
                let mut p = guard.group.lock();
                if p.ops.is_empty() {
                    p.drains -= 1;
                    drop(p);
                    guard.armed = false;
                    return;
                }
                let n = p.ops.len().min(MAX_BATCH);
                p.ops.drain(..n).collect()
            };
            self.commit_batch(batch).await;
            // The callers just answered are runnable now; one that writes again at once (a
            // worker enqueueing, then finishing) gets to join the next batch instead of waiting
            // a whole commit for the one after. No timer: when nothing else is runnable, this
            // returns at once.
            tokio::task::yield_now().await;
        }
    }

    async fn commit_batch(&self, batch: Vec<(Op, Reply)>) {
        if batch.len() == 1 {
            for (op, reply) in batch {
                let _ = reply.send(self.apply_alone(&op).await);
            }
            return;
        }
        match self.apply_together(&batch).await {
            Together::Committed(results) => {
                for ((_, reply), result) in batch.into_iter().zip(results) {
                    let _ = reply.send(Ok(result));
                }
            }
            Together::RolledBack => {
                for (op, reply) in batch {
                    let _ = reply.send(self.apply_alone(&op).await);
                }
            }
            Together::CommitFailed(e) => {
                let text = e.to_string();
                for (_, reply) in batch {
                    let _ = reply.send(Err(QueueError::CommitFailed(text.clone())));
                }
            }
        }
    }

    /// One write in its own commit. A connection that failed is not kept: the pool tests it
    /// on its return and discards it if broken.
    async fn apply_alone(&self, op: &Op) -> Result<Done, QueueError> {
        let mut conn = self.take_connection().await?;
        let done = if self.engine() == Engine::Sqlite && matches!(op, Op::FinishAndLease { .. }) {
            // Two statements on SQLite: one transaction, so one commit.
            let mut tx = conn.begin_with(self.engine().begin_write()).await?;
            let done = apply(&mut tx, self.engine(), op).await?;
            tx.commit()
                .await
                .map_err(|e| QueueError::CommitFailed(e.to_string()))?;
            done
        } else {
            apply(&mut conn, self.engine(), op).await?
        };
        self.keep_connection(conn);
        self.group.writes.fetch_add(1, Ordering::Relaxed);
        self.group.commits.fetch_add(1, Ordering::Relaxed);
        Ok(done)
    }

    async fn apply_together(&self, batch: &[(Op, Reply)]) -> Together {
        let Ok(mut conn) = self.take_connection().await else {
            return Together::RolledBack;
        };
        let together = Self::apply_in_one_transaction(&mut conn, self.engine(), batch).await;
        if let Together::Committed(results) = &together {
            self.keep_connection(conn);
            self.group
                .writes
                .fetch_add(results.len() as u64, Ordering::Relaxed);
            self.group.commits.fetch_add(1, Ordering::Relaxed);
        }
        together
    }

    async fn apply_in_one_transaction(
        conn: &mut AnyConnection,
        engine: Engine,
        batch: &[(Op, Reply)],
    ) -> Together {
        let Ok(mut tx) = conn.begin_with(engine.begin_write()).await else {
            return Together::RolledBack;
        };
        let mut results = Vec::with_capacity(batch.len());
        for (op, _) in batch {
            match apply(&mut tx, engine, op).await {
                Ok(done) => results.push(done),
                Err(_) => {
                    // Dropping the transaction rolls it back; each write is then retried
                    // alone, so the failing one reports its own error.
                    let _ = tx.rollback().await;
                    return Together::RolledBack;
                }
            }
        }
        match tx.commit().await {
            Ok(()) => Together::Committed(results),
            Err(e) => Together::CommitFailed(e),
        }
    }
}

enum Together {
    Committed(Vec<Done>),
    RolledBack,
    CommitFailed(sqlx::Error),
}

/// One hot write on `conn` (inside a transaction or on its own).
async fn apply(conn: &mut AnyConnection, engine: Engine, op: &Op) -> Result<Done, QueueError> {
    match op {
        Op::Enqueue { job, now } => Ok(Done::Enqueued(jobs::insert(&mut *conn, job, *now).await?)),
        Op::Lease {
            worker,
            expires,
            now,
        } => Ok(Done::Leased(
            jobs::lease(&mut *conn, engine, worker, *expires, *now).await?,
        )),
        Op::Finish(f) => Ok(Done::Finished(jobs::finish(&mut *conn, f).await?)),
        Op::FinishAndLease { finish: f, expires } => match engine {
            Engine::Sqlite => {
                let rows = jobs::finish(&mut *conn, f).await?;
                let next = jobs::lease(&mut *conn, engine, &f.worker, *expires, f.now).await?;
                Ok(Done::FinishedAndLeased(rows, next))
            }
            Engine::Postgres => {
                let (rows, next) = jobs::finish_and_lease_postgres(&mut *conn, f, *expires).await?;
                Ok(Done::FinishedAndLeased(rows, next))
            }
        },
    }
}
