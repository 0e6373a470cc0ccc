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
use sqlx::{Any, AnyConnection, Connection, Row};
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
        Ok(self.pool.acquire().await?)
    }

    /// Keeps `conn` for the next hot write, or gives it back to the pool when enough are kept
    /// or the pool is closing (which waits for it).
    fn keep_connection(&self, conn: PoolConnection<Any>) {
        let mut idle = self.group.held.lock();
        if idle.len() < self.group.held.max && !self.pool.is_closed() {
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
        let done = if self.engine == Engine::Sqlite && matches!(op, Op::FinishAndLease { .. }) {
            // Two statements on SQLite: one transaction, so one commit.
            let mut tx = conn.begin().await?;
            let done = apply(&mut tx, self.engine, op).await?;
            tx.commit()
                .await
                .map_err(|e| QueueError::CommitFailed(e.to_string()))?;
            done
        } else {
            apply(&mut conn, self.engine, op).await?
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
        let together = Self::apply_in_one_transaction(&mut conn, self.engine, batch).await;
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
        let Ok(mut tx) = conn.begin().await else {
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
/// Its first condition is the predicate of PostgreSQL's partial index `jobs_open`
/// (migrations/postgres/0003), so the pick never reads finished jobs.
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
             WHERE state IN ('queued', 'leased', 'running') \
               AND (state = 'queued' OR lease_expires_at < $3) \
               AND attempts < max_attempts AND cancel_requested = 0{except} \
             ORDER BY priority DESC, id ASC LIMIT 1{skip_locked}) \
         RETURNING {COLUMNS}"
    )
}

pub(super) async fn lease(
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

pub(super) async fn finish(conn: &mut AnyConnection, f: &Finish) -> Result<u64, QueueError> {
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

#[cfg(test)]
mod tests {
    //! The pick's query plans: neither engine reads finished jobs to find the next one.
    //! PostgreSQL is a real server (`GLASSBOX_TEST_POSTGRES_URL`, or the local default); the
    //! test fails, never skips, without it.

    use super::*;
    use crate::queue::{Clock, Durability};

    /// PostgreSQL caches a generic plan for a prepared statement, possibly made while the
    /// table was empty, when a scan of the whole table looks cheapest and stays cached as the
    /// finished jobs pile up. The pick must use the partial index of open jobs in that plan.
    #[tokio::test]
    async fn postgres_pick_reads_only_open_jobs_in_a_generic_plan() {
        let base = std::env::var("GLASSBOX_TEST_POSTGRES_URL")
            .expect("GLASSBOX_TEST_POSTGRES_URL is not set: run the tests with `cargo xtask test`, which provides a PostgreSQL server (`cargo xtask env` prints the variables for running one test by hand)");
        let schema = format!("lab_pick_plan_{}", std::process::id());
        sqlx::any::install_default_drivers();
        let admin = sqlx::AnyPool::connect(&base)
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL at {base} is required: {e}"));
        for ddl in [
            format!("DROP SCHEMA IF EXISTS {schema} CASCADE"),
            format!("CREATE SCHEMA {schema}"),
        ] {
            sqlx::query(&ddl).execute(&admin).await.unwrap();
        }
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}options=-c%20search_path%3D{schema}");
        let q = Queue::connect_with(&url, Clock::System, Durability::PowerLoss)
            .await
            .unwrap();

        let mut conn = q.pool.acquire().await.unwrap();
        sqlx::query("SET plan_cache_mode = force_generic_plan")
            .execute(&mut *conn)
            .await
            .unwrap();
        for except in [false, true] {
            let (name, types) = if except {
                ("pick_except", "text, bigint, bigint, bigint")
            } else {
                ("pick", "text, bigint, bigint")
            };
            let sql = lease_sql(Engine::Postgres, except);
            sqlx::query(&format!("PREPARE {name}({types}) AS {sql}"))
                .execute(&mut *conn)
                .await
                .unwrap();
            let args = if except { "'w', 0, 0, 0" } else { "'w', 0, 0" };
            let plan: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN EXECUTE {name}({args})"))
                .fetch_all(&mut *conn)
                .await
                .unwrap();
            let plan = plan.join("\n");
            assert!(plan.contains("jobs_open"), "{plan}");
            assert!(!plan.contains("Seq Scan"), "{plan}");
        }
        drop(conn);
        q.close().await;
        sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
            .execute(&admin)
            .await
            .unwrap();
    }

    /// SQLite probes the state index for the three open states, never scanning the table.
    #[tokio::test]
    async fn sqlite_pick_searches_the_open_states() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("queue.db").display());
        let q = Queue::connect(&url).await.unwrap();
        let rows = sqlx::query(&format!(
            "EXPLAIN QUERY PLAN {}",
            lease_sql(Engine::Sqlite, false)
        ))
        .fetch_all(&q.pool)
        .await
        .unwrap();
        let plan: Vec<String> = rows
            .iter()
            .map(|r| r.try_get::<String, _>("detail").unwrap())
            .collect();
        assert!(
            plan.iter().any(|d| d.contains("USING INDEX jobs_pick")),
            "{plan:?}"
        );
        assert!(!plan.iter().any(|d| d.starts_with("SCAN jobs")), "{plan:?}");
        q.close().await;
    }
}
