//! The `jobs` table: every statement on it, each a function over a connection, a transaction
//! or the pool ([`sqlx::Executor`]), and the decoding of its rows into [`Job`]s.
//!
//! Each write that a worker makes names its worker id in the `WHERE` clause, so it changes
//! nothing once that worker lost its lease; the functions return the rows changed and the
//! queue turns 0 into [`QueueError::LeaseLost`]. The claiming statements are single `UPDATE`s
//! over a sub-select; PostgreSQL adds `FOR UPDATE SKIP LOCKED` to it ([`Engine::skip_locked`]).
//! The pick's first condition is the predicate of PostgreSQL's partial index `jobs_open`
//! (migrations/postgres/0003), so leasing never reads finished jobs.
//!
//! Not here: when a statement runs, or what its answer means (leases, retries, group commit):
//! that is [`crate::queue`].

use glassbox_schemas::{BlobHash, ExperimentId, JobId, RunId};
use sqlx::any::AnyRow;
use sqlx::{Any, Executor, Row};

use super::Engine;
use crate::error::QueueError;
use crate::job::{Avoid, EvalTarget, Job, JobState, NewJob, WorkerId};

/// Every column of a job, in the order [`decode`] reads them.
pub(crate) const COLUMNS: &str = "id, kind, experiment, spec_hash, author, proposal_entry, approval_entry, priority, \
    state, attempts, max_attempts, lease_owner, lease_expires_at, cancel_requested, \
    checkpoint_step, checkpoint_blob, run_id, reproduces, reason, created_at, updated_at, \
    avoid_worker, avoid_host, automatic, evaluates";

/// A worker may not take a job that avoids it: never its own id, and not its host while a worker
/// of another host asked for work in the last minute (60,000 ms). Uses only `$1` (the worker)
/// and `$3` (now), so every lease statement can include it.
const AVOIDS: &str = " AND (avoid_worker IS NULL OR avoid_worker <> $1) \
    AND (avoid_host IS NULL \
         OR NOT EXISTS (SELECT 1 FROM worker_hosts mine \
                        WHERE mine.worker = $1 AND mine.host = jobs.avoid_host) \
         OR NOT EXISTS (SELECT 1 FROM worker_hosts other \
                        WHERE other.host <> jobs.avoid_host AND other.seen_at > $3 - 60000))";

/// The states in which a job is not over, as SQL.
const OPEN: &str = "('queued', 'held', 'leased', 'running')";

/// Ending a job the worker holds.
#[derive(Debug)]
pub(crate) struct Finish {
    pub job: JobId,
    pub worker: WorkerId,
    pub state: JobState,
    pub reason: Option<String>,
    pub now: i64,
}

/// Adds a queued job of `job.kind`; its id.
pub(crate) async fn insert<'e>(
    db: impl Executor<'e, Database = Any>,
    job: &NewJob,
    now: i64,
) -> Result<JobId, QueueError> {
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
    .bind(now)
    .bind(job.kind.as_str())
    .fetch_one(db)
    .await?;
    Ok(JobId(row.try_get::<i64, _>("id")?))
}

/// Adds a queued reproduction of `run`, kept off the workers `avoid` names. The unique index
/// `jobs_one_reproduction` refuses a second open one (the database error is returned as it is;
/// the queue reads it).
pub(crate) async fn insert_reproduction<'e>(
    db: impl Executor<'e, Database = Any>,
    job: &NewJob,
    run: &RunId,
    avoid: &Avoid,
    now: i64,
) -> Result<JobId, sqlx::Error> {
    let row = sqlx::query(
        "INSERT INTO jobs (experiment, spec_hash, author, proposal_entry, approval_entry, \
         priority, state, max_attempts, created_at, updated_at, kind, reproduces, \
         avoid_worker, avoid_host, automatic) \
         VALUES ($1, $2, $3, $4, $5, $6, 'queued', $7, $8, $8, 'reproduction', $9, $10, $11, $12) \
         RETURNING id",
    )
    .bind(job.experiment.0.clone())
    .bind(job.spec_hash.to_string())
    .bind(job.author.clone())
    .bind(job.proposal_entry.map(|v| v as i64))
    .bind(job.approval_entry.map(|v| v as i64))
    .bind(job.priority)
    .bind(i64::from(job.max_attempts.max(1)))
    .bind(now)
    .bind(run.0.clone())
    .bind(avoid.worker.as_ref().map(|w| w.0.clone()))
    .bind(avoid.host.clone())
    .bind(i64::from(avoid.automatic))
    .fetch_one(db)
    .await?;
    Ok(JobId(row.try_get::<i64, _>("id")?))
}

/// Adds a queued eval job scoring `target` (`job.kind` is eval). The unique index
/// `jobs_one_eval` refuses a second open one for the same target (the database error is
/// returned as it is; the queue reads it).
pub(crate) async fn insert_eval<'e>(
    db: impl Executor<'e, Database = Any>,
    job: &NewJob,
    target: &EvalTarget,
    automatic: bool,
    now: i64,
) -> Result<JobId, sqlx::Error> {
    let evaluates = serde_json::to_string(target)
        .map_err(|e| sqlx::Error::Protocol(format!("eval target: {e}")))?;
    let row = sqlx::query(
        "INSERT INTO jobs (experiment, spec_hash, author, proposal_entry, approval_entry, \
         priority, state, max_attempts, created_at, updated_at, kind, evaluates, eval_key, \
         automatic) \
         VALUES ($1, $2, $3, $4, $5, $6, 'queued', $7, $8, $8, 'eval', $9, $10, $11) \
         RETURNING id",
    )
    .bind(job.experiment.0.clone())
    .bind(job.spec_hash.to_string())
    .bind(job.author.clone())
    .bind(job.proposal_entry.map(|v| v as i64))
    .bind(job.approval_entry.map(|v| v as i64))
    .bind(job.priority)
    .bind(i64::from(job.max_attempts.max(1)))
    .bind(now)
    .bind(evaluates)
    .bind(target.key())
    .bind(i64::from(automatic))
    .fetch_one(db)
    .await?;
    Ok(JobId(row.try_get::<i64, _>("id")?))
}

/// The open eval job of `target`, if one waits or runs.
pub(crate) async fn open_eval_of<'e>(
    db: impl Executor<'e, Database = Any>,
    target: &EvalTarget,
) -> Result<Option<Job>, QueueError> {
    let row = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM jobs WHERE eval_key = $1 AND state IN {OPEN} ORDER BY id DESC LIMIT 1"
    ))
    .bind(target.key())
    .fetch_optional(db)
    .await?;
    row.as_ref().map(decode).transpose()
}

/// Jobs queued, leased or running, less those that never run on `worker`.
pub(crate) async fn open_for<'e>(
    db: impl Executor<'e, Database = Any>,
    worker: &WorkerId,
) -> Result<u64, QueueError> {
    let n: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM jobs WHERE state IN ('queued', 'leased', 'running') \
         AND (avoid_worker IS NULL OR avoid_worker <> $1)",
    )
    .bind(worker.0.clone())
    .fetch_one(db)
    .await?;
    Ok(n as u64)
}

/// Records that `worker` runs on `host` and is asking for work now.
pub(crate) async fn announce<'e>(
    db: impl Executor<'e, Database = Any>,
    worker: &WorkerId,
    host: &str,
    now: i64,
) -> Result<(), QueueError> {
    sqlx::query(
        "INSERT INTO worker_hosts (worker, host, seen_at) VALUES ($1, $2, $3) \
         ON CONFLICT (worker) DO UPDATE SET host = excluded.host, seen_at = excluded.seen_at",
    )
    .bind(worker.0.clone())
    .bind(host.to_string())
    .bind(now)
    .execute(db)
    .await?;
    Ok(())
}

/// The claiming `UPDATE`: the highest-priority, oldest job that is queued or whose lease ran
/// out with attempts left. Also excludes `except` (a job being finished in the same statement).
pub(crate) fn lease_sql(engine: Engine, except: bool) -> String {
    let skip_locked = engine.skip_locked();
    let except = if except { " AND id <> $4" } else { "" };
    format!(
        "UPDATE jobs SET state = 'leased', lease_owner = $1, lease_expires_at = $2, \
         attempts = attempts + 1, updated_at = $3 \
         WHERE id = (SELECT id FROM jobs \
             WHERE state IN ('queued', 'leased', 'running') \
               AND (state = 'queued' OR lease_expires_at < $3) \
               AND attempts < max_attempts AND cancel_requested = 0{except}{AVOIDS} \
             ORDER BY priority DESC, id ASC LIMIT 1{skip_locked}) \
         RETURNING {COLUMNS}"
    )
}

/// Claims the next job for `worker` until `expires` ([`lease_sql`]).
pub(crate) async fn lease<'e>(
    db: impl Executor<'e, Database = Any>,
    engine: Engine,
    worker: &WorkerId,
    expires: i64,
    now: i64,
) -> Result<Option<Box<Job>>, QueueError> {
    let row = sqlx::query(&lease_sql(engine, false))
        .bind(worker.0.clone())
        .bind(expires)
        .bind(now)
        .fetch_optional(db)
        .await?;
    row.map(|r| decode(&r).map(Box::new)).transpose()
}

/// Claims one given job for `worker` if it is queued with attempts left.
pub(crate) async fn lease_one<'e>(
    db: impl Executor<'e, Database = Any>,
    job: JobId,
    worker: &WorkerId,
    expires: i64,
    now: i64,
) -> Result<Option<Job>, QueueError> {
    let row = sqlx::query(&format!(
        "UPDATE jobs SET state = 'leased', lease_owner = $1, lease_expires_at = $2, \
         attempts = attempts + 1, updated_at = $3 \
         WHERE id = $4 AND state = 'queued' AND attempts < max_attempts{AVOIDS} \
         RETURNING {COLUMNS}"
    ))
    .bind(worker.0.clone())
    .bind(expires)
    .bind(now)
    .bind(job.0)
    .fetch_optional(db)
    .await?;
    row.map(|r| decode(&r)).transpose()
}

/// Claims for `worker` the oldest job whose lease ran out and that may not train again (out of
/// attempts, or a cancel was requested); its attempts are not counted.
pub(crate) async fn claim_abandoned<'e>(
    db: impl Executor<'e, Database = Any>,
    engine: Engine,
    worker: &WorkerId,
    expires: i64,
    now: i64,
) -> Result<Option<Job>, QueueError> {
    let skip_locked = engine.skip_locked();
    let row = sqlx::query(&format!(
        "UPDATE jobs SET lease_owner = $1, lease_expires_at = $2, updated_at = $3 \
         WHERE id = (SELECT id FROM jobs \
             WHERE state IN ('leased', 'running') AND lease_expires_at < $3 \
               AND (attempts >= max_attempts OR cancel_requested = 1) \
             ORDER BY id ASC LIMIT 1{skip_locked}) \
         RETURNING {COLUMNS}"
    ))
    .bind(worker.0.clone())
    .bind(expires)
    .bind(now)
    .fetch_optional(db)
    .await?;
    row.map(|r| decode(&r)).transpose()
}

/// Touches the job's row if `worker` holds it, taking the row's lock for the transaction it
/// runs in; the rows changed (0 when the worker lost it).
pub(crate) async fn touch_held<'e>(
    db: impl Executor<'e, Database = Any>,
    job: JobId,
    worker: &WorkerId,
    now: i64,
) -> Result<u64, QueueError> {
    let done = sqlx::query(
        "UPDATE jobs SET updated_at = $1 \
         WHERE id = $2 AND lease_owner = $3 AND state IN ('leased', 'running')",
    )
    .bind(now)
    .bind(job.0)
    .bind(worker.0.clone())
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

/// Renews `worker`'s lease until `expires`: whether a cancel was requested, or `None` when the
/// worker no longer holds the job.
pub(crate) async fn renew<'e>(
    db: impl Executor<'e, Database = Any>,
    job: JobId,
    worker: &WorkerId,
    expires: i64,
    now: i64,
) -> Result<Option<bool>, QueueError> {
    let row = sqlx::query(
        "UPDATE jobs SET lease_expires_at = $1, updated_at = $2 \
         WHERE id = $3 AND lease_owner = $4 AND state IN ('leased', 'running') \
         RETURNING cancel_requested",
    )
    .bind(expires)
    .bind(now)
    .bind(job.0)
    .bind(worker.0.clone())
    .fetch_optional(db)
    .await?;
    Ok(match row {
        Some(r) => Some(r.try_get::<i64, _>("cancel_requested")? != 0),
        None => None,
    })
}

/// Marks `worker`'s job running under `run`; the rows changed.
pub(crate) async fn set_running<'e>(
    db: impl Executor<'e, Database = Any>,
    job: JobId,
    worker: &WorkerId,
    run: &RunId,
    now: i64,
) -> Result<u64, QueueError> {
    let done = sqlx::query(
        "UPDATE jobs SET state = 'running', run_id = $1, updated_at = $2 \
         WHERE id = $3 AND lease_owner = $4 AND state IN ('leased', 'running')",
    )
    .bind(run.0.clone())
    .bind(now)
    .bind(job.0)
    .bind(worker.0.clone())
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

/// Records the training snapshot a take-over resumes from; the rows changed.
pub(crate) async fn set_snapshot<'e>(
    db: impl Executor<'e, Database = Any>,
    job: JobId,
    worker: &WorkerId,
    step: u64,
    blob: &BlobHash,
    now: i64,
) -> Result<u64, QueueError> {
    let done = sqlx::query(
        "UPDATE jobs SET checkpoint_step = $1, checkpoint_blob = $2, updated_at = $3 \
         WHERE id = $4 AND lease_owner = $5 AND state = 'running'",
    )
    .bind(step as i64)
    .bind(blob.to_string())
    .bind(now)
    .bind(job.0)
    .bind(worker.0.clone())
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

/// Ends `f.job` if `f.worker` still holds it; the rows changed.
pub(crate) async fn finish<'e>(
    db: impl Executor<'e, Database = Any>,
    f: &Finish,
) -> Result<u64, QueueError> {
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
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

/// PostgreSQL: the finish and the next lease as one statement (data-modifying CTEs), so one
/// round trip and one commit. Both parts see the same snapshot, so the job being finished is
/// excluded from the lease explicitly. The rows finished and the job leased.
pub(crate) async fn finish_and_lease_postgres<'e>(
    db: impl Executor<'e, Database = Any>,
    f: &Finish,
    expires: i64,
) -> Result<(u64, Option<Box<Job>>), QueueError> {
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
        .fetch_one(db)
        .await?;
    let rows = row.try_get::<i64, _>("finished_rows")? as u64;
    let next = match row.try_get::<Option<i64>, _>("id")? {
        Some(_) => Some(Box::new(decode(&row)?)),
        None => None,
    };
    Ok((rows, next))
}

/// Puts `worker`'s leased, not yet started job back in the queue, its attempt not counted;
/// the rows changed.
pub(crate) async fn unlease<'e>(
    db: impl Executor<'e, Database = Any>,
    job: JobId,
    worker: &WorkerId,
    now: i64,
) -> Result<u64, QueueError> {
    let done = sqlx::query(
        "UPDATE jobs SET state = 'queued', lease_owner = NULL, lease_expires_at = NULL, \
         attempts = attempts - 1, updated_at = $1 \
         WHERE id = $2 AND lease_owner = $3 AND state = 'leased'",
    )
    .bind(now)
    .bind(job.0)
    .bind(worker.0.clone())
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

/// Cancels the job if it waits (queued or held); the rows changed.
pub(crate) async fn cancel_waiting<'e>(
    db: impl Executor<'e, Database = Any>,
    job: JobId,
    reason: &str,
    now: i64,
) -> Result<u64, QueueError> {
    let done = sqlx::query(
        "UPDATE jobs SET state = 'cancelled', reason = $1, updated_at = $2 \
         WHERE id = $3 AND state IN ('queued', 'held')",
    )
    .bind(reason.to_string())
    .bind(now)
    .bind(job.0)
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

/// Asks the worker of a leased or running job to stop; the rows changed.
pub(crate) async fn request_cancel<'e>(
    db: impl Executor<'e, Database = Any>,
    job: JobId,
    reason: &str,
    now: i64,
) -> Result<u64, QueueError> {
    let done = sqlx::query(
        "UPDATE jobs SET cancel_requested = 1, reason = $1, updated_at = $2 \
         WHERE id = $3 AND state IN ('leased', 'running')",
    )
    .bind(reason.to_string())
    .bind(now)
    .bind(job.0)
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

/// Moves the job from state `from` to `to`; the rows changed (0 when it was not in `from`).
pub(crate) async fn move_state<'e>(
    db: impl Executor<'e, Database = Any>,
    job: JobId,
    from: JobState,
    to: JobState,
    now: i64,
) -> Result<u64, QueueError> {
    let done =
        sqlx::query("UPDATE jobs SET state = $1, updated_at = $2 WHERE id = $3 AND state = $4")
            .bind(to.as_str())
            .bind(now)
            .bind(job.0)
            .bind(from.as_str())
            .execute(db)
            .await?;
    Ok(done.rows_affected())
}

/// One job.
pub(crate) async fn get<'e>(
    db: impl Executor<'e, Database = Any>,
    job: JobId,
) -> Result<Option<Job>, QueueError> {
    let row = sqlx::query(&format!("SELECT {COLUMNS} FROM jobs WHERE id = $1"))
        .bind(job.0)
        .fetch_optional(db)
        .await?;
    row.map(|r| decode(&r)).transpose()
}

/// Jobs, newest first, optionally only those in `state`; at most `limit`.
pub(crate) async fn list<'e>(
    db: impl Executor<'e, Database = Any>,
    state: Option<JobState>,
    limit: u32,
) -> Result<Vec<Job>, QueueError> {
    let rows = match state {
        Some(s) => {
            sqlx::query(&format!(
                "SELECT {COLUMNS} FROM jobs WHERE state = $1 ORDER BY id DESC LIMIT $2"
            ))
            .bind(s.as_str())
            .bind(i64::from(limit))
            .fetch_all(db)
            .await?
        }
        None => {
            sqlx::query(&format!(
                "SELECT {COLUMNS} FROM jobs ORDER BY id DESC LIMIT $1"
            ))
            .bind(i64::from(limit))
            .fetch_all(db)
            .await?
        }
    };
    rows.iter().map(decode).collect()
}

/// Every open job (queued, held, leased, running) in lease order (priority, then id); at most
/// `limit`.
pub(crate) async fn open<'e>(
    db: impl Executor<'e, Database = Any>,
    limit: u32,
) -> Result<Vec<Job>, QueueError> {
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM jobs WHERE state IN {OPEN} ORDER BY priority DESC, id ASC LIMIT $1"
    ))
    .bind(i64::from(limit))
    .fetch_all(db)
    .await?;
    rows.iter().map(decode).collect()
}

/// The jobs that ended last, newest ending first; at most `limit`.
pub(crate) async fn recently_ended<'e>(
    db: impl Executor<'e, Database = Any>,
    limit: u32,
) -> Result<Vec<Job>, QueueError> {
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM jobs WHERE state NOT IN {OPEN} ORDER BY updated_at DESC, id DESC LIMIT $1"
    ))
    .bind(i64::from(limit))
    .fetch_all(db)
    .await?;
    rows.iter().map(decode).collect()
}

/// The newest run job (not reproduction) of an experiment.
pub(crate) async fn latest_run_of<'e>(
    db: impl Executor<'e, Database = Any>,
    experiment: &ExperimentId,
) -> Result<Option<Job>, QueueError> {
    let row = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM jobs WHERE experiment = $1 AND kind = 'run' \
         ORDER BY id DESC LIMIT 1"
    ))
    .bind(experiment.0.clone())
    .fetch_optional(db)
    .await?;
    row.map(|r| decode(&r)).transpose()
}

/// The open reproduction job of `run`.
pub(crate) async fn open_reproduction_of<'e>(
    db: impl Executor<'e, Database = Any>,
    run: &RunId,
) -> Result<Option<Job>, QueueError> {
    let row = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM jobs WHERE kind = 'reproduction' AND reproduces = $1 \
         AND state IN {OPEN} ORDER BY id DESC LIMIT 1"
    ))
    .bind(run.0.clone())
    .fetch_optional(db)
    .await?;
    row.map(|r| decode(&r)).transpose()
}

/// The newest open reproduction job of an experiment.
pub(crate) async fn open_reproduction_of_experiment<'e>(
    db: impl Executor<'e, Database = Any>,
    experiment: &ExperimentId,
) -> Result<Option<Job>, QueueError> {
    let row = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM jobs WHERE kind = 'reproduction' AND experiment = $1 \
         AND state IN {OPEN} ORDER BY id DESC LIMIT 1"
    ))
    .bind(experiment.0.clone())
    .fetch_optional(db)
    .await?;
    row.map(|r| decode(&r)).transpose()
}

/// The newest job whose approval is ledger entry `entry`.
pub(crate) async fn with_approval<'e>(
    db: impl Executor<'e, Database = Any>,
    entry: u64,
) -> Result<Option<Job>, QueueError> {
    let row = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM jobs WHERE approval_entry = $1 ORDER BY id DESC LIMIT 1"
    ))
    .bind(entry as i64)
    .fetch_optional(db)
    .await?;
    row.map(|r| decode(&r)).transpose()
}

/// Queued jobs that run before one of `priority` and id `id`.
pub(crate) async fn queued_ahead_of<'e>(
    db: impl Executor<'e, Database = Any>,
    priority: i64,
    id: JobId,
) -> Result<u64, QueueError> {
    let row = sqlx::query(
        "SELECT COUNT(*) AS n FROM jobs WHERE state = 'queued' \
         AND (priority > $1 OR (priority = $1 AND id < $2))",
    )
    .bind(priority)
    .bind(id.0)
    .fetch_one(db)
    .await?;
    Ok(row.try_get::<i64, _>("n")? as u64)
}

/// Jobs of `author` not yet over.
pub(crate) async fn open_of_author<'e>(
    db: impl Executor<'e, Database = Any>,
    author: &str,
) -> Result<u64, QueueError> {
    let row = sqlx::query(&format!(
        "SELECT COUNT(*) AS n FROM jobs WHERE author = $1 AND state IN {OPEN}"
    ))
    .bind(author.to_string())
    .fetch_one(db)
    .await?;
    Ok(row.try_get::<i64, _>("n")? as u64)
}

/// Jobs of `author` waiting to start (queued or held).
pub(crate) async fn waiting_of_author<'e>(
    db: impl Executor<'e, Database = Any>,
    author: &str,
) -> Result<u64, QueueError> {
    let row = sqlx::query(
        "SELECT COUNT(*) AS n FROM jobs WHERE author = $1 AND state IN ('queued', 'held')",
    )
    .bind(author.to_string())
    .fetch_one(db)
    .await?;
    Ok(row.try_get::<i64, _>("n")? as u64)
}

/// Jobs per state.
pub(crate) async fn count_by_state<'e>(
    db: impl Executor<'e, Database = Any>,
) -> Result<Vec<(JobState, u64)>, QueueError> {
    let rows = sqlx::query("SELECT state, COUNT(*) AS n FROM jobs GROUP BY state")
        .fetch_all(db)
        .await?;
    let mut out = Vec::new();
    for r in rows {
        let state: String = r.try_get("state")?;
        let n: i64 = r.try_get("n")?;
        let state = state
            .parse()
            .map_err(|detail| QueueError::Corrupt { job: 0, detail })?;
        out.push((state, n as u64));
    }
    Ok(out)
}

/// A row of [`COLUMNS`] as a [`Job`]; a value that does not parse is [`QueueError::Corrupt`].
pub(crate) fn decode(r: &AnyRow) -> Result<Job, QueueError> {
    let id: i64 = r.try_get("id")?;
    let corrupt = |detail: String| QueueError::Corrupt { job: id, detail };
    let state: String = r.try_get("state")?;
    let kind: String = r.try_get("kind")?;
    let spec_hash: String = r.try_get("spec_hash")?;
    let opt_u64 = |name: &str| -> Result<Option<u64>, QueueError> {
        Ok(r.try_get::<Option<i64>, _>(name)?.map(|v| v as u64))
    };
    Ok(Job {
        id: JobId(id),
        kind: kind.parse().map_err(corrupt)?,
        experiment: ExperimentId(r.try_get("experiment")?),
        spec_hash: spec_hash.parse().map_err(|e| corrupt(format!("{e}")))?,
        author: r.try_get("author")?,
        proposal_entry: opt_u64("proposal_entry")?,
        approval_entry: opt_u64("approval_entry")?,
        priority: r.try_get("priority")?,
        state: state.parse().map_err(corrupt)?,
        attempts: r.try_get::<i64, _>("attempts")? as u32,
        max_attempts: r.try_get::<i64, _>("max_attempts")? as u32,
        lease_owner: r.try_get::<Option<String>, _>("lease_owner")?.map(WorkerId),
        lease_expires_at: r.try_get("lease_expires_at")?,
        cancel_requested: r.try_get::<i64, _>("cancel_requested")? != 0,
        snapshot_step: opt_u64("checkpoint_step")?,
        snapshot_blob: r
            .try_get::<Option<String>, _>("checkpoint_blob")?
            .map(|h| h.parse::<BlobHash>())
            .transpose()
            .map_err(|e| corrupt(format!("checkpoint_blob: {e}")))?,
        run_id: r.try_get::<Option<String>, _>("run_id")?.map(RunId),
        reproduces: r.try_get::<Option<String>, _>("reproduces")?.map(RunId),
        reason: r.try_get("reason")?,
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
        avoid_worker: r
            .try_get::<Option<String>, _>("avoid_worker")?
            .map(WorkerId),
        avoid_host: r.try_get("avoid_host")?,
        automatic: r.try_get::<i64, _>("automatic")? != 0,
        evaluates: r
            .try_get::<Option<String>, _>("evaluates")?
            .map(|t| serde_json::from_str(&t))
            .transpose()
            .map_err(|e| corrupt(format!("evaluates: {e}")))?,
    })
}

#[cfg(test)]
mod tests {
    //! The pick's query plans: neither engine reads finished jobs to find the next one.
    //! PostgreSQL is a real server (`GLASSBOX_TEST_POSTGRES_URL`, or the local default); the
    //! test fails, never skips, without it.

    use super::*;
    use crate::queue::{Clock, Durability, Queue};

    /// PostgreSQL caches a generic plan for a prepared statement, possibly made while the
    /// table was empty, when a scan of the whole table looks cheapest and stays cached as the
    /// finished jobs pile up. The pick must use the partial index of open jobs in that plan.
    #[tokio::test]
    async fn postgres_pick_reads_only_open_jobs_in_a_generic_plan() {
        let schema = glassbox_test_support::postgres_schema("lab", "pick_plan").await;
        let url = schema.url.clone();
        let q = Queue::connect_with(&url, Clock::System, Durability::PowerLoss)
            .await
            .unwrap();

        let mut conn = q.db().pool().acquire().await.unwrap();
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
            assert!(!plan.contains("Seq Scan on jobs"), "{plan}");
        }
        drop(conn);
        q.close().await;
        schema.drop_schema().await;
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
        .fetch_all(q.db().pool())
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
