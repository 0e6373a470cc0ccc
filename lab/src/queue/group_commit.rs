//! Group commit for the queue's hot writes on SQLite: enqueue, lease, finish.
//!
//! Each of these is one statement, and at the default durability each commit waits for a disk
//! flush (`synchronous = FULL`). SQLite has one writer, so workers that write at the same
//! moment would wait for one flush each, in turn. Instead, a write joins a pending list; one
//! drain task per queue handle takes everything pending, runs it in one transaction in arrival
//! order, commits once, then answers every caller. Nothing is acknowledged before its commit,
//! so durability is unchanged; a lone write is committed on its own at once (no timer, no
//! added latency when idle).
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
//! This is the queue's only concurrency machinery; it is not a general write-behind cache.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use sqlx::{AnyConnection, Row};
use tokio::sync::oneshot;

use super::{COLUMNS, Engine, Job, JobId, JobState, NewJob, Queue, QueueError, WorkerId, decode};

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

/// Ending a job the worker holds.
#[derive(Debug)]
pub(super) struct Finish {
    pub job: JobId,
    pub worker: WorkerId,
    pub state: JobState,
    pub reason: Option<String>,
    pub now: i64,
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

/// The writes waiting for the next commit, shared by a queue handle's clones.
#[derive(Debug, Default)]
pub(super) struct GroupCommit {
    pending: Mutex<Pending>,
    /// Hot writes answered, and the transactions that committed them (for [`WriteStats`]).
    writes: AtomicU64,
    commits: AtomicU64,
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
    /// Writes and commits so far through this handle and its clones.
    pub fn write_stats(&self) -> WriteStats {
        WriteStats {
            writes: self.group.writes.load(Ordering::Relaxed),
            commits: self.group.commits.load(Ordering::Relaxed),
        }
    }

    /// Runs `op` in the next group commit and waits for its outcome.
    pub(super) async fn submit(&self, op: Op) -> Result<Done, QueueError> {
        if self.engine == Engine::Postgres {
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

    async fn apply_alone(&self, op: &Op) -> Result<Done, QueueError> {
        let done = if self.engine == Engine::Sqlite && matches!(op, Op::FinishAndLease { .. }) {
            // Two statements on SQLite: one transaction, so one commit.
            let mut tx = self.pool.begin().await?;
            let done = apply(&mut tx, self.engine, op).await?;
            tx.commit()
                .await
                .map_err(|e| QueueError::CommitFailed(e.to_string()))?;
            done
        } else {
            let mut conn = self.pool.acquire().await?;
            apply(&mut conn, self.engine, op).await?
        };
        self.group.writes.fetch_add(1, Ordering::Relaxed);
        self.group.commits.fetch_add(1, Ordering::Relaxed);
        Ok(done)
    }

    async fn apply_together(&self, batch: &[(Op, Reply)]) -> Together {
        let Ok(mut tx) = self.pool.begin().await else {
            return Together::RolledBack;
        };
        let mut results = Vec::with_capacity(batch.len());
        for (op, _) in batch {
            match apply(&mut tx, self.engine, op).await {
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
            Ok(()) => {
                self.group
                    .writes
                    .fetch_add(results.len() as u64, Ordering::Relaxed);
                self.group.commits.fetch_add(1, Ordering::Relaxed);
                Together::Committed(results)
            }
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
        Op::Enqueue { job, now } => {
            let row = sqlx::query(
                "INSERT INTO jobs (experiment, spec_hash, author, proposal_entry, approval_entry, \
                 priority, state, max_attempts, created_at, updated_at, kind) \
                 VALUES ($1, $2, $3, $4, $5, $6, 'queued', $7, $8, $8, $9) RETURNING id",
            )
            .bind(job.experiment.0.clone())
            .bind(job.spec_hash.to_string())
            .bind(job.author.clone())
            .bind(job.proposal_entry.map(|v| v as i64))
            .bind(job.approval_entry.map(|v| v as i64))
            .bind(job.priority)
            .bind(i64::from(job.max_attempts.max(1)))
            .bind(*now)
            .bind(job.kind.as_str())
            .fetch_one(&mut *conn)
            .await?;
            Ok(Done::Enqueued(JobId(row.try_get::<i64, _>("id")?)))
        }
        Op::Lease {
            worker,
            expires,
            now,
        } => Ok(Done::Leased(
            lease(conn, engine, worker, *expires, *now).await?,
        )),
        Op::Finish(f) => Ok(Done::Finished(finish(conn, f).await?)),
        Op::FinishAndLease { finish: f, expires } => match engine {
            Engine::Sqlite => {
                let rows = finish(conn, f).await?;
                let next = lease(conn, engine, &f.worker, *expires, f.now).await?;
                Ok(Done::FinishedAndLeased(rows, next))
            }
            Engine::Postgres => finish_and_lease_in_one_statement(conn, f, *expires).await,
        },
    }
}

/// The claiming `UPDATE`: the highest-priority, oldest job that is queued or whose lease ran
/// out with attempts left. Also excludes `except` (a job being finished in the same statement).
fn lease_sql(engine: Engine, except: bool) -> String {
    let skip_locked = match engine {
        Engine::Postgres => " FOR UPDATE SKIP LOCKED",
        Engine::Sqlite => "",
    };
    let except = if except { " AND id <> $4" } else { "" };
    format!(
        "UPDATE jobs SET state = 'leased', lease_owner = $1, lease_expires_at = $2, \
         attempts = attempts + 1, updated_at = $3 \
         WHERE id = (SELECT id FROM jobs \
             WHERE (state = 'queued' OR (state IN ('leased', 'running') AND lease_expires_at < $3)) \
               AND attempts < max_attempts AND cancel_requested = 0{except} \
             ORDER BY priority DESC, id ASC LIMIT 1{skip_locked}) \
         RETURNING {COLUMNS}"
    )
}

async fn lease(
    conn: &mut AnyConnection,
    engine: Engine,
    worker: &WorkerId,
    expires: i64,
    now: i64,
) -> Result<Option<Box<Job>>, QueueError> {
    let row = sqlx::query(&lease_sql(engine, false))
        .bind(worker.0.clone())
        .bind(expires)
        .bind(now)
        .fetch_optional(&mut *conn)
        .await?;
    row.map(|r| decode(&r).map(Box::new)).transpose()
}

async fn finish(conn: &mut AnyConnection, f: &Finish) -> Result<u64, QueueError> {
    let done = sqlx::query(
        "UPDATE jobs SET state = $1, reason = $2, lease_owner = NULL, \
         lease_expires_at = NULL, updated_at = $3 \
         WHERE id = $4 AND lease_owner = $5 AND state IN ('leased', 'running')",
    )
    .bind(f.state.as_str())
    .bind(f.reason.clone())
    .bind(f.now)
    .bind(f.job.0)
    .bind(f.worker.0.clone())
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected())
}

/// PostgreSQL: the finish and the next lease as one statement (data-modifying CTEs), so one
/// round trip and one commit. Both parts see the same snapshot, so the job being finished is
/// excluded from the lease explicitly.
async fn finish_and_lease_in_one_statement(
    conn: &mut AnyConnection,
    f: &Finish,
    expires: i64,
) -> Result<Done, QueueError> {
    // Parameters: $1 state, $2 reason, $3 now, $4 job, $5 worker, $6 lease expiry.
    let sql = format!(
        "WITH finished AS (\
             UPDATE jobs SET state = $1, reason = $2, lease_owner = NULL, \
             lease_expires_at = NULL, updated_at = $3 \
             WHERE id = $4 AND lease_owner = $5 AND state IN ('leased', 'running') RETURNING id), \
         next AS ({}) \
         SELECT (SELECT COUNT(*) FROM finished) AS finished_rows, next.* \
         FROM (SELECT 1) AS one LEFT JOIN next ON TRUE",
        lease_sql(Engine::Postgres, true)
            .replace("$1", "$5")
            .replace("$2", "$6")
    );
    let row = sqlx::query(&sql)
        .bind(f.state.as_str())
        .bind(f.reason.clone())
        .bind(f.now)
        .bind(f.job.0)
        .bind(f.worker.0.clone())
        .bind(expires)
        .fetch_one(&mut *conn)
        .await?;
    let rows = row.try_get::<i64, _>("finished_rows")? as u64;
    let next = match row.try_get::<Option<i64>, _>("id")? {
        Some(_) => Some(Box::new(decode(&row)?)),
        None => None,
    };
    Ok(Done::FinishedAndLeased(rows, next))
}
