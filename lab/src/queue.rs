//! The durable job queue: approved experiments waiting for, or held by, a worker.
//!
//! One table (`jobs`), one code path for both engines through sqlx's `Any` driver: SQLite in
//! `<lab>/queue.db` for one machine, PostgreSQL for many. The only difference is how a worker
//! claims a row: PostgreSQL adds `FOR UPDATE SKIP LOCKED` so concurrent workers never wait on
//! each other's row; SQLite has a single writer, so the claiming `UPDATE` is atomic already.
//!
//! Leases: a worker that claims a job owns it until `lease_expires_at`; it renews the lease with
//! [`Queue::heartbeat`]. A worker that dies stops renewing; once the lease expires the next
//! [`Queue::lease`] hands the job to another worker (which resumes from the job's last
//! checkpoint) until `max_attempts` is spent. A job whose lease ran out with no attempt left
//! (or with a cancel requested) is never handed out to train again: a worker claims it with
//! [`Queue::claim_abandoned`] and ends it like any other, `result` entry first.
//! Every write that a worker makes names its worker id and succeeds only while it still holds
//! the lease, so a worker that lost its job can never record a second result for it; a job's
//! end is fenced by [`Queue::begin_ending`], which holds the job's row while the worker puts
//! the result on the record.
//!
//! Enqueues, leases and finishes that arrive together share one transaction and one commit
//! ([`group_commit`]): each caller still returns only after its write is committed.
//!
//! Durability is chosen per queue ([`Durability`], the lab config's `queue.durability`): by
//! default a commit is on disk before it returns, on both engines; `process_crash` trades the
//! last fraction of a second of changes on a machine (or database server) crash for several
//! times the commit rate (BENCHMARKS.md, "Queue").
//!
//! Times are Unix milliseconds taken from a [`Clock`], so tests can move time without sleeping.
//! This module knows nothing of training, the ledger or GitHub: it stores ids and hashes.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use glassbox_schemas::JobId;
use glassbox_schemas::{BlobHash, ExperimentId, RunId, RunStatus, SpecHash};
use serde::{Deserialize, Serialize};
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Row};

mod gauges;
mod group_commit;
pub use group_commit::WriteStats;
use group_commit::{Done, Finish, GroupCommit, Op};

static SQLITE_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");
static POSTGRES_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// A worker's identity, unique per process (e.g. `host:pid:random`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct WorkerId(pub String);

impl fmt::Display for WorkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a job is in its life: waiting, held, leased or training, or ended with a run's
/// [`RunStatus`] (the one ending type; the queue stores its name, `succeeded` ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobState {
    /// Waiting for a worker.
    Queued,
    /// Held by a maintainer; not handed out until released.
    Held,
    /// Claimed by a worker that has not started training yet.
    Leased,
    /// Training.
    Running,
    /// Over, with how the run ended.
    Ended(RunStatus),
}

impl JobState {
    /// Every state.
    pub const ALL: [JobState; 9] = [
        JobState::Queued,
        JobState::Held,
        JobState::Leased,
        JobState::Running,
        JobState::Ended(RunStatus::Succeeded),
        JobState::Ended(RunStatus::Failed),
        JobState::Ended(RunStatus::Diverged),
        JobState::Ended(RunStatus::BudgetExceeded),
        JobState::Ended(RunStatus::Cancelled),
    ];

    /// The name stored in the database (an ended job's is its run status's).
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Held => "held",
            JobState::Leased => "leased",
            JobState::Running => "running",
            JobState::Ended(s) => s.as_str(),
        }
    }

    /// Whether the job is over.
    pub fn is_terminal(self) -> bool {
        matches!(self, JobState::Ended(_))
    }

    /// How the job's run ended, once it has.
    pub fn ended(self) -> Option<RunStatus> {
        match self {
            JobState::Ended(s) => Some(s),
            _ => None,
        }
    }
}

impl From<RunStatus> for JobState {
    fn from(s: RunStatus) -> Self {
        JobState::Ended(s)
    }
}

impl Serialize for JobState {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for JobState {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for JobState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobState::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown job state {s:?}; expected one of {}",
                    JobState::ALL.map(|k| k.as_str()).join(", ")
                )
            })
    }
}

/// What a job does with its spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobKind {
    /// Train the approved spec and record the result.
    Run,
    /// Re-run an earlier run from its ledger record and compare (`/reproduce`).
    Reproduction,
}

impl JobKind {
    /// The name stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::Run => "run",
            JobKind::Reproduction => "reproduction",
        }
    }
}

impl FromStr for JobKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "run" => Ok(JobKind::Run),
            "reproduction" => Ok(JobKind::Reproduction),
            other => Err(format!(
                "unknown job kind {other:?}; expected run or reproduction"
            )),
        }
    }
}

/// What to enqueue.
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    /// Run or reproduction.
    pub kind: JobKind,
    /// The experiment the job trains.
    pub experiment: ExperimentId,
    /// The approved spec's hash: the worker refuses a spec with any other hash.
    pub spec_hash: SpecHash,
    /// Who proposed it (for per-author quotas).
    pub author: String,
    /// Ledger index of the `proposal` entry.
    pub proposal_entry: Option<u64>,
    /// Ledger index of the `approval` entry.
    pub approval_entry: Option<u64>,
    /// Higher runs first; ties run oldest first.
    pub priority: i64,
    /// Attempts (leases) before the job fails for good.
    pub max_attempts: u32,
}

/// A job as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Job {
    /// Its id.
    pub id: JobId,
    /// Run or reproduction.
    pub kind: JobKind,
    /// The experiment.
    pub experiment: ExperimentId,
    /// The approved spec's hash.
    pub spec_hash: SpecHash,
    /// The proposer.
    pub author: String,
    /// Ledger index of the proposal.
    pub proposal_entry: Option<u64>,
    /// Ledger index of the approval.
    pub approval_entry: Option<u64>,
    /// Priority.
    pub priority: i64,
    /// Where it is.
    pub state: JobState,
    /// Leases taken so far.
    pub attempts: u32,
    /// Leases allowed.
    pub max_attempts: u32,
    /// The worker holding it, if leased or running.
    pub lease_owner: Option<WorkerId>,
    /// When that lease runs out (Unix ms).
    pub lease_expires_at: Option<i64>,
    /// A maintainer asked to cancel it while it runs.
    pub cancel_requested: bool,
    /// Last checkpoint's step, for resuming.
    pub checkpoint_step: Option<u64>,
    /// Last checkpoint's blob hash (text form), for resuming.
    pub checkpoint_blob: Option<BlobHash>,
    /// The run id of the current or last attempt.
    pub run_id: Option<RunId>,
    /// For a reproduction job: the run it re-runs.
    pub reproduces: Option<RunId>,
    /// Why it ended as it did (for anything but success).
    pub reason: Option<String>,
    /// Enqueued at (Unix ms).
    pub created_at: i64,
    /// Last change (Unix ms).
    pub updated_at: i64,
}

impl Job {
    /// The run this job trains (or trained): the id recorded when it started, else the one
    /// it will get ([`RunId::for_job`]).
    pub fn run(&self) -> RunId {
        self.run_id
            .clone()
            .unwrap_or_else(|| RunId::for_job(self.id))
    }
}

/// Queue errors. Each says what was asked and why it cannot be done.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// The database URL is not one this queue speaks.
    #[error(
        "unsupported database URL {0:?}: expected sqlite://PATH or postgres://USER@HOST:PORT/DB"
    )]
    UnsupportedUrl(String),
    /// The database failed.
    #[error("queue database error: {0}")]
    Database(#[from] sqlx::Error),
    /// Applying migrations failed.
    #[error("queue migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// No such job.
    #[error("no job {0} in the queue")]
    NotFound(JobId),
    /// The worker no longer holds the job (its lease expired and another worker took it, or
    /// it was cancelled); whatever it was about to record must be dropped.
    #[error("worker {worker} no longer holds the lease on job {job}")]
    LeaseLost {
        /// The job.
        job: JobId,
        /// The worker that lost it.
        worker: WorkerId,
    },
    /// The job is in a state that does not allow the operation.
    #[error("job {job} is {state}; {action} needs it to be {needs}")]
    WrongState {
        /// The job.
        job: JobId,
        /// Its state.
        state: JobState,
        /// What was attempted.
        action: &'static str,
        /// The state(s) that would allow it.
        needs: &'static str,
    },
    /// A reproduction of the run already waits or runs.
    #[error("job {job} already reproduces this run ({state}); wait for it or cancel it")]
    AlreadyOpen {
        /// The open job.
        job: JobId,
        /// Its state.
        state: JobState,
    },
    /// The commit of a group of writes failed; the database may or may not have applied them,
    /// so they are not retried blindly. Check with `glassbox jobs` before repeating one.
    #[error("queue commit failed (the change may or may not have been applied): {0}")]
    CommitFailed(String),
    /// The task committing queue writes stopped before answering (the process is shutting
    /// down).
    #[error("the queue's writer stopped before answering; the process is shutting down")]
    WriterStopped,
    /// A stored row does not decode.
    #[error("corrupt queue row for job {job}: {detail}")]
    Corrupt {
        /// The job.
        job: i64,
        /// What is wrong.
        detail: String,
    },
}

impl QueueError {
    /// The database could not be reached or could not commit: worth retrying a call that is
    /// safe to repeat. Everything else (a lost lease, a wrong state, a missing job) is an answer.
    pub fn is_transient(&self) -> bool {
        matches!(self, QueueError::Database(_) | QueueError::CommitFailed(_))
    }
}

/// Where times come from: the system clock, or a hand-moved one in tests.
#[derive(Debug, Clone)]
pub enum Clock {
    /// Wall-clock time.
    System,
    /// A clock that only moves when told to.
    Manual(Arc<AtomicI64>),
}

impl Clock {
    /// Now, in Unix milliseconds.
    pub fn now_ms(&self) -> i64 {
        match self {
            Clock::System => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0),
            Clock::Manual(t) => t.load(Ordering::SeqCst),
        }
    }

    /// Moves a manual clock forward (no effect on the system clock).
    pub fn advance(&self, by: Duration) {
        if let Clock::Manual(t) = self {
            t.fetch_add(by.as_millis() as i64, Ordering::SeqCst);
        }
    }
}

/// Which engine the queue runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// Embedded, one machine.
    Sqlite,
    /// Shared by many machines.
    Postgres,
}

/// What a cancel request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The job had not started; it is now `cancelled`.
    Cancelled,
    /// The job is running; its worker stops it at the next step.
    Requested,
    /// The job had already ended in this state.
    AlreadyOver(JobState),
}

/// What a heartbeat learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heartbeat {
    /// A maintainer asked to cancel the job.
    pub cancel_requested: bool,
}

/// A job's end in progress ([`Queue::begin_ending`]): the lease is checked and the job's row
/// held until [`Ending::finish`] (or [`Ending::finish_and_lease`]) commits; dropped, it changes
/// nothing.
pub struct Ending {
    tx: sqlx::Transaction<'static, sqlx::Any>,
    job: JobId,
    worker: WorkerId,
    engine: Engine,
    clock: Clock,
}

impl fmt::Debug for Ending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Ending(job {} by {})", self.job, self.worker)
    }
}

impl Ending {
    fn finish_op(&self, status: RunStatus, reason: Option<&str>) -> Finish {
        Finish {
            job: self.job,
            worker: self.worker.clone(),
            state: JobState::from(status),
            reason: reason.map(str::to_string),
            now: self.clock.now_ms(),
        }
    }

    /// Gives the job back untouched (the end could not be recorded); as dropping, but waits
    /// for the database to release the row.
    pub async fn rollback(self) -> Result<(), QueueError> {
        Ok(self.tx.rollback().await?)
    }

    /// Ends the job with `status` and commits.
    pub async fn finish(
        mut self,
        status: RunStatus,
        reason: Option<&str>,
    ) -> Result<(), QueueError> {
        let f = self.finish_op(status, reason);
        group_commit::finish(&mut self.tx, &f).await?;
        self.tx
            .commit()
            .await
            .map_err(|e| QueueError::CommitFailed(e.to_string()))
    }

    /// Ends the job and leases the worker's next one in the same commit
    /// ([`Queue::finish_and_lease`]).
    pub async fn finish_and_lease(
        mut self,
        status: RunStatus,
        reason: Option<&str>,
        lease_for: Duration,
    ) -> Result<Option<Job>, QueueError> {
        let f = self.finish_op(status, reason);
        group_commit::finish(&mut self.tx, &f).await?;
        let next = group_commit::lease(
            &mut self.tx,
            self.engine,
            &self.worker,
            f.now + lease_for.as_millis() as i64,
            f.now,
        )
        .await?;
        self.tx
            .commit()
            .await
            .map_err(|e| QueueError::CommitFailed(e.to_string()))?;
        Ok(next.map(|j| *j))
    }
}

const COLUMNS: &str = "id, kind, experiment, spec_hash, author, proposal_entry, approval_entry, priority, \
    state, attempts, max_attempts, lease_owner, lease_expires_at, cancel_requested, \
    checkpoint_step, checkpoint_blob, run_id, reproduces, reason, created_at, updated_at";

/// The job queue.
#[derive(Debug, Clone)]
pub struct Queue {
    pool: AnyPool,
    engine: Engine,
    clock: Clock,
    /// When this handle last swept expired leases (Unix ms); shared by its clones.
    last_sweep: Arc<AtomicI64>,
    /// Enqueues, leases and finishes waiting for the next group commit; shared by its clones.
    group: Arc<GroupCommit>,
}

/// How often one queue handle looks for abandoned jobs when it found none last time. A job
/// whose lease ran out with no attempts left is never handed out to train again (the lease
/// query excludes it); it only waits for a worker to record its end, so looking once a second
/// instead of on every lease costs nothing in correctness and saves a statement per lease.
const SWEEP_EVERY_MS: i64 = 1_000;

/// The reason a job ends with when its worker stopped answering on its last allowed attempt.
pub const ABANDONED_REASON: &str = "worker lost its lease on every allowed attempt";

/// The reason a job ends with when a cancel was requested and its worker then stopped answering.
pub const ABANDONED_CANCELLED_REASON: &str = "cancelled; its worker stopped answering";

/// What a committed queue change survives (the lab config's `queue.durability`).
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

impl Queue {
    /// Opens (creating if needed) the queue at `url` — `sqlite://PATH` or `postgres://...` —
    /// and applies the embedded migrations; [`Durability::PowerLoss`].
    pub async fn connect(url: &str) -> Result<Self, QueueError> {
        Self::connect_with(url, Clock::System, Durability::PowerLoss).await
    }

    /// As [`Queue::connect`], with a given clock.
    pub async fn connect_with_clock(url: &str, clock: Clock) -> Result<Self, QueueError> {
        Self::connect_with(url, clock, Durability::PowerLoss).await
    }

    /// As [`Queue::connect`], with a given clock and durability.
    pub async fn connect_with(
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
        let mut options = AnyPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(30));
        options = options.after_connect(move |conn, _meta| {
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
        match engine {
            Engine::Sqlite => SQLITE_MIGRATOR.run(&pool).await?,
            Engine::Postgres => POSTGRES_MIGRATOR.run(&pool).await?,
        }
        Ok(Self {
            pool,
            engine,
            clock,
            last_sweep: Arc::new(AtomicI64::new(i64::MIN)),
            // Half the pool at most stays with the hot writes (one suffices on SQLite, whose
            // writes go one batch at a time); the rest serves reads and heartbeats.
            group: Arc::new(GroupCommit::new(max_connections as usize / 2)),
        })
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

    /// The engine in use.
    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// The clock in use.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// `sqlite` or `postgresql`, for messages (never the URL: it may hold a password).
    pub fn engine_name(&self) -> &'static str {
        match self.engine {
            Engine::Sqlite => "sqlite",
            Engine::Postgres => "postgresql",
        }
    }

    /// Closes the pool (after handing back the connections the hot writes keep).
    pub async fn close(&self) {
        self.group.release_connections();
        self.pool.close().await;
    }

    /// Adds a job; returns its id once committed (concurrent writes share one commit; see
    /// [`group_commit`]).
    pub async fn enqueue(&self, job: &NewJob) -> Result<JobId, QueueError> {
        let op = Op::Enqueue {
            job: job.clone(),
            now: self.clock.now_ms(),
        };
        match self.submit(op).await? {
            Done::Enqueued(id) => Ok(id),
            other => Err(mismatched("enqueue", other)),
        }
    }

    /// Claims the next job for `worker` for `lease_for`: the highest priority, then the oldest,
    /// among queued jobs and jobs whose lease expired with attempts left. `None` when idle.
    pub async fn lease(
        &self,
        worker: &WorkerId,
        lease_for: Duration,
    ) -> Result<Option<Job>, QueueError> {
        let now = self.clock.now_ms();
        let op = Op::Lease {
            worker: worker.clone(),
            expires: now + lease_for.as_millis() as i64,
            now,
        };
        match self.submit(op).await? {
            Done::Leased(job) => Ok(job.map(|j| *j)),
            other => Err(mismatched("lease", other)),
        }
    }

    /// Claims, for `worker` and `lease_for`, a job whose lease ran out and that may not be
    /// trained again: out of attempts, or a cancel was requested. The worker then ends it the
    /// way every job ends (the `result` entry, then [`Queue::begin_ending`]), with
    /// [`ABANDONED_REASON`] or [`ABANDONED_CANCELLED_REASON`]; its attempts are not counted.
    /// If that worker dies too, the job is claimed again once this lease runs out. `None` when
    /// there is none (and then, for a second, without asking the database again).
    pub async fn claim_abandoned(
        &self,
        worker: &WorkerId,
        lease_for: Duration,
    ) -> Result<Option<Job>, QueueError> {
        let now = self.clock.now_ms();
        let last = self.last_sweep.load(Ordering::Relaxed);
        if now.saturating_sub(last) < SWEEP_EVERY_MS {
            return Ok(None);
        }
        let skip_locked = match self.engine {
            Engine::Postgres => " FOR UPDATE SKIP LOCKED",
            Engine::Sqlite => "",
        };
        let row = sqlx::query(&format!(
            "UPDATE jobs SET lease_owner = $1, lease_expires_at = $2, updated_at = $3 \
             WHERE id = (SELECT id FROM jobs \
                 WHERE state IN ('leased', 'running') AND lease_expires_at < $3 \
                   AND (attempts >= max_attempts OR cancel_requested = 1) \
                 ORDER BY id ASC LIMIT 1{skip_locked}) \
             RETURNING {COLUMNS}"
        ))
        .bind(worker.0.clone())
        .bind(now + lease_for.as_millis() as i64)
        .bind(now)
        .fetch_optional(&self.pool)
        .await?;
        match row {
            Some(r) => decode(&r).map(Some),
            None => {
                self.last_sweep.store(now, Ordering::Relaxed);
                Ok(None)
            }
        }
    }

    /// Starts ending `job` for `worker`: checks that `worker` holds its lease and keeps the
    /// job's row locked (on SQLite, the database's write lock) until [`Ending::finish`]
    /// commits or the [`Ending`] is dropped (nothing changes). The worker records the job's
    /// end in the ledger while it holds the [`Ending`], so a worker whose lease ran out (and
    /// whose job another worker took) gets [`QueueError::LeaseLost`] here and records nothing:
    /// a job never has two results.
    pub async fn begin_ending(&self, job: JobId, worker: &WorkerId) -> Result<Ending, QueueError> {
        let mut tx = self.pool.begin().await?;
        let held = sqlx::query(
            "UPDATE jobs SET updated_at = $1 \
             WHERE id = $2 AND lease_owner = $3 AND state IN ('leased', 'running')",
        )
        .bind(self.clock.now_ms())
        .bind(job.0)
        .bind(worker.0.clone())
        .execute(&mut *tx)
        .await?;
        if held.rows_affected() != 1 {
            let _ = tx.rollback().await;
            return Err(QueueError::LeaseLost {
                job,
                worker: worker.clone(),
            });
        }
        Ok(Ending {
            tx,
            job,
            worker: worker.clone(),
            engine: self.engine,
            clock: self.clock.clone(),
        })
    }

    /// Adds a reproduction job of `run` (its `kind` must be [`JobKind::Reproduction`]); at most
    /// one waits or runs per run: a second is [`QueueError::AlreadyOpen`].
    pub async fn enqueue_reproduction(
        &self,
        job: &NewJob,
        run: &RunId,
    ) -> Result<JobId, QueueError> {
        if let Some(open) = self.open_reproduction_of(run).await? {
            return Err(QueueError::AlreadyOpen {
                job: open.id,
                state: open.state,
            });
        }
        let now = self.clock.now_ms();
        let row = sqlx::query(
            "INSERT INTO jobs (experiment, spec_hash, author, proposal_entry, approval_entry, \
             priority, state, max_attempts, created_at, updated_at, kind, reproduces) \
             VALUES ($1, $2, $3, $4, $5, $6, 'queued', $7, $8, $8, 'reproduction', $9) RETURNING id",
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
        .fetch_one(&self.pool)
        .await;
        match row {
            Ok(r) => Ok(JobId(r.try_get::<i64, _>("id")?)),
            // Two requests at once: the unique index lets one through.
            Err(e) => match self.open_reproduction_of(run).await? {
                Some(open) => Err(QueueError::AlreadyOpen {
                    job: open.id,
                    state: open.state,
                }),
                None => Err(e.into()),
            },
        }
    }

    /// The reproduction job of `run` that is waiting or running, if any.
    pub async fn open_reproduction_of(&self, run: &RunId) -> Result<Option<Job>, QueueError> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM jobs WHERE kind = 'reproduction' AND reproduces = $1 \
             AND state IN ('queued', 'held', 'leased', 'running') ORDER BY id DESC LIMIT 1"
        ))
        .bind(run.0.clone())
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| decode(&r)).transpose()
    }

    /// The newest reproduction job of an experiment that is waiting or running, if any.
    pub async fn open_reproduction_of_experiment(
        &self,
        experiment: &ExperimentId,
    ) -> Result<Option<Job>, QueueError> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM jobs WHERE kind = 'reproduction' AND experiment = $1 \
             AND state IN ('queued', 'held', 'leased', 'running') ORDER BY id DESC LIMIT 1"
        ))
        .bind(experiment.0.clone())
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| decode(&r)).transpose()
    }

    /// The job, of any kind, whose approval is ledger entry `entry`, if any.
    pub async fn job_with_approval(&self, entry: u64) -> Result<Option<Job>, QueueError> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM jobs WHERE approval_entry = $1 ORDER BY id DESC LIMIT 1"
        ))
        .bind(entry as i64)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| decode(&r)).transpose()
    }

    /// Claims one given job for `worker` if it is queued (a local `glassbox run` trains the job
    /// it just enqueued, whatever else waits). `None` when the job is not queued.
    pub async fn lease_job(
        &self,
        job: JobId,
        worker: &WorkerId,
        lease_for: Duration,
    ) -> Result<Option<Job>, QueueError> {
        let now = self.clock.now_ms();
        let row = sqlx::query(&format!(
            "UPDATE jobs SET state = 'leased', lease_owner = $1, lease_expires_at = $2, \
             attempts = attempts + 1, updated_at = $3 \
             WHERE id = $4 AND state = 'queued' AND attempts < max_attempts \
             RETURNING {COLUMNS}"
        ))
        .bind(worker.0.clone())
        .bind(now + lease_for.as_millis() as i64)
        .bind(now)
        .bind(job.0)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| decode(&r)).transpose()
    }

    /// The newest run job of an experiment, if any (reproductions of its runs are not its
    /// state; see [`Queue::open_reproduction_of`]).
    pub async fn latest_job_of(
        &self,
        experiment: &ExperimentId,
    ) -> Result<Option<Job>, QueueError> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM jobs WHERE experiment = $1 AND kind = 'run' \
             ORDER BY id DESC LIMIT 1"
        ))
        .bind(experiment.0.clone())
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| decode(&r)).transpose()
    }

    /// The pool, for the flow's own tables in the same database.
    pub(crate) fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// Renews the lease; tells the worker whether a cancel was requested.
    pub async fn heartbeat(
        &self,
        job: JobId,
        worker: &WorkerId,
        lease_for: Duration,
    ) -> Result<Heartbeat, QueueError> {
        let now = self.clock.now_ms();
        let row = sqlx::query(
            "UPDATE jobs SET lease_expires_at = $1, updated_at = $2 \
             WHERE id = $3 AND lease_owner = $4 AND state IN ('leased', 'running') \
             RETURNING cancel_requested",
        )
        .bind(now + lease_for.as_millis() as i64)
        .bind(now)
        .bind(job.0)
        .bind(worker.0.clone())
        .fetch_optional(&self.pool)
        .await?;
        match row {
            Some(r) => Ok(Heartbeat {
                cancel_requested: r.try_get::<i64, _>("cancel_requested")? != 0,
            }),
            None => Err(QueueError::LeaseLost {
                job,
                worker: worker.clone(),
            }),
        }
    }

    /// Marks a leased job as running under `run_id`.
    pub async fn mark_running(
        &self,
        job: JobId,
        worker: &WorkerId,
        run_id: &RunId,
    ) -> Result<(), QueueError> {
        let now = self.clock.now_ms();
        let done = sqlx::query(
            "UPDATE jobs SET state = 'running', run_id = $1, updated_at = $2 \
             WHERE id = $3 AND lease_owner = $4 AND state IN ('leased', 'running')",
        )
        .bind(run_id.0.clone())
        .bind(now)
        .bind(job.0)
        .bind(worker.0.clone())
        .execute(&self.pool)
        .await?;
        self.require_lease(done.rows_affected(), job, worker)
    }

    /// Records the latest checkpoint, so a worker that takes over can resume from it.
    pub async fn record_checkpoint(
        &self,
        job: JobId,
        worker: &WorkerId,
        step: u64,
        blob: &BlobHash,
    ) -> Result<(), QueueError> {
        let now = self.clock.now_ms();
        let done = sqlx::query(
            "UPDATE jobs SET checkpoint_step = $1, checkpoint_blob = $2, updated_at = $3 \
             WHERE id = $4 AND lease_owner = $5 AND state = 'running'",
        )
        .bind(step as i64)
        .bind(blob.to_string())
        .bind(now)
        .bind(job.0)
        .bind(worker.0.clone())
        .execute(&self.pool)
        .await?;
        self.require_lease(done.rows_affected(), job, worker)
    }

    /// Ends a job with a run outcome. Fails with [`QueueError::LeaseLost`] when the worker no
    /// longer holds it, so a result is never recorded twice.
    pub async fn finish(
        &self,
        job: JobId,
        worker: &WorkerId,
        status: RunStatus,
        reason: Option<&str>,
    ) -> Result<(), QueueError> {
        let op = Op::Finish(Finish {
            job,
            worker: worker.clone(),
            state: JobState::from(status),
            reason: reason.map(str::to_string),
            now: self.clock.now_ms(),
        });
        match self.submit(op).await? {
            Done::Finished(rows) => self.require_lease(rows, job, worker),
            other => Err(mismatched("finish", other)),
        }
    }

    /// [`Queue::finish`], then [`Queue::lease`] for the same worker, committed together: a
    /// worker that goes on to its next job saves a commit (and on PostgreSQL a round trip).
    /// The finish's answer comes first: [`QueueError::LeaseLost`] when the worker no longer
    /// held the job, and then the job leased with it is handed straight back
    /// ([`Queue::release`]), so nothing is left waiting on a lease.
    pub async fn finish_and_lease(
        &self,
        job: JobId,
        worker: &WorkerId,
        status: RunStatus,
        reason: Option<&str>,
        lease_for: Duration,
    ) -> Result<Option<Job>, QueueError> {
        let now = self.clock.now_ms();
        let op = Op::FinishAndLease {
            finish: Finish {
                job,
                worker: worker.clone(),
                state: JobState::from(status),
                reason: reason.map(str::to_string),
                now,
            },
            expires: now + lease_for.as_millis() as i64,
        };
        match self.submit(op).await? {
            Done::FinishedAndLeased(rows, next) => {
                if rows == 1 {
                    Ok(next.map(|j| *j))
                } else {
                    if let Some(next) = next {
                        // Hand the job back untouched rather than strand it until its lease
                        // runs out.
                        self.release(next.id, worker).await?;
                    }
                    self.require_lease(rows, job, worker).map(|()| None)
                }
            }
            other => Err(mismatched("finish_and_lease", other)),
        }
    }

    /// Gives a leased job that has not started back to the queue as it was (its attempt is not
    /// counted): a worker that stops with a job it leased ahead of time.
    pub async fn release(&self, job: JobId, worker: &WorkerId) -> Result<(), QueueError> {
        let done = sqlx::query(
            "UPDATE jobs SET state = 'queued', lease_owner = NULL, lease_expires_at = NULL, \
             attempts = attempts - 1, updated_at = $1 \
             WHERE id = $2 AND lease_owner = $3 AND state = 'leased'",
        )
        .bind(self.clock.now_ms())
        .bind(job.0)
        .bind(worker.0.clone())
        .execute(&self.pool)
        .await?;
        self.require_lease(done.rows_affected(), job, worker)
    }

    /// Cancels a job: at once if it has not started, at its next step if it runs.
    pub async fn cancel(&self, job: JobId, reason: &str) -> Result<CancelOutcome, QueueError> {
        let now = self.clock.now_ms();
        let done = sqlx::query(
            "UPDATE jobs SET state = 'cancelled', reason = $1, updated_at = $2 \
             WHERE id = $3 AND state IN ('queued', 'held')",
        )
        .bind(reason.to_string())
        .bind(now)
        .bind(job.0)
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 1 {
            return Ok(CancelOutcome::Cancelled);
        }
        let done = sqlx::query(
            "UPDATE jobs SET cancel_requested = 1, reason = $1, updated_at = $2 \
             WHERE id = $3 AND state IN ('leased', 'running')",
        )
        .bind(reason.to_string())
        .bind(now)
        .bind(job.0)
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 1 {
            return Ok(CancelOutcome::Requested);
        }
        let current = self.get(job).await?;
        Ok(CancelOutcome::AlreadyOver(current.state))
    }

    /// Holds a queued job (a maintainer's `/hold`).
    pub async fn hold(&self, job: JobId) -> Result<(), QueueError> {
        self.transition(job, JobState::Queued, JobState::Held, "hold", "queued")
            .await
    }

    /// Releases a held job back to the queue (`/unhold`).
    pub async fn unhold(&self, job: JobId) -> Result<(), QueueError> {
        self.transition(job, JobState::Held, JobState::Queued, "unhold", "held")
            .await
    }

    async fn transition(
        &self,
        job: JobId,
        from: JobState,
        to: JobState,
        action: &'static str,
        needs: &'static str,
    ) -> Result<(), QueueError> {
        let done =
            sqlx::query("UPDATE jobs SET state = $1, updated_at = $2 WHERE id = $3 AND state = $4")
                .bind(to.as_str())
                .bind(self.clock.now_ms())
                .bind(job.0)
                .bind(from.as_str())
                .execute(&self.pool)
                .await?;
        if done.rows_affected() == 1 {
            return Ok(());
        }
        let current = self.get(job).await?;
        Err(QueueError::WrongState {
            job,
            state: current.state,
            action,
            needs,
        })
    }

    /// One job.
    pub async fn get(&self, job: JobId) -> Result<Job, QueueError> {
        let row = sqlx::query(&format!("SELECT {COLUMNS} FROM jobs WHERE id = $1"))
            .bind(job.0)
            .fetch_optional(&self.pool)
            .await?;
        match row {
            Some(r) => decode(&r),
            None => Err(QueueError::NotFound(job)),
        }
    }

    /// Jobs, newest first, optionally only those in `state`; at most `limit`.
    pub async fn list(&self, state: Option<JobState>, limit: u32) -> Result<Vec<Job>, QueueError> {
        let rows = match state {
            Some(s) => {
                sqlx::query(&format!(
                    "SELECT {COLUMNS} FROM jobs WHERE state = $1 ORDER BY id DESC LIMIT $2"
                ))
                .bind(s.as_str())
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await?
            }
            None => {
                sqlx::query(&format!(
                    "SELECT {COLUMNS} FROM jobs ORDER BY id DESC LIMIT $1"
                ))
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await?
            }
        };
        rows.iter().map(decode).collect()
    }

    /// How many queued jobs run before this one (0 = next); `None` if it is not queued.
    pub async fn position(&self, job: JobId) -> Result<Option<u64>, QueueError> {
        let j = self.get(job).await?;
        if j.state != JobState::Queued {
            return Ok(None);
        }
        let row = sqlx::query(
            "SELECT COUNT(*) AS n FROM jobs WHERE state = 'queued' \
             AND (priority > $1 OR (priority = $1 AND id < $2))",
        )
        .bind(j.priority)
        .bind(j.id.0)
        .fetch_one(&self.pool)
        .await?;
        Ok(Some(row.try_get::<i64, _>("n")? as u64))
    }

    /// Jobs of `author` not yet over (for per-author quotas).
    pub async fn open_jobs_of(&self, author: &str) -> Result<u64, QueueError> {
        let row = sqlx::query(
            "SELECT COUNT(*) AS n FROM jobs WHERE author = $1 \
             AND state IN ('queued', 'held', 'leased', 'running')",
        )
        .bind(author.to_string())
        .fetch_one(&self.pool)
        .await?;
        Ok(row.try_get::<i64, _>("n")? as u64)
    }

    /// Number of jobs in each state (for `/metrics` and `glassbox jobs`).
    pub async fn counts(&self) -> Result<Vec<(JobState, u64)>, QueueError> {
        let rows = sqlx::query("SELECT state, COUNT(*) AS n FROM jobs GROUP BY state")
            .fetch_all(&self.pool)
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

    fn require_lease(&self, rows: u64, job: JobId, worker: &WorkerId) -> Result<(), QueueError> {
        if rows == 1 {
            Ok(())
        } else {
            Err(QueueError::LeaseLost {
                job,
                worker: worker.clone(),
            })
        }
    }
}

/// A group commit answered with another operation's outcome: a bug in this module, reported
/// rather than panicking.
fn mismatched(asked: &str, got: Done) -> QueueError {
    QueueError::Corrupt {
        job: 0,
        detail: format!("group commit answered {asked} with {got:?}"),
    }
}

fn decode(r: &AnyRow) -> Result<Job, QueueError> {
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
        checkpoint_step: opt_u64("checkpoint_step")?,
        checkpoint_blob: r
            .try_get::<Option<String>, _>("checkpoint_blob")?
            .map(|h| h.parse::<BlobHash>())
            .transpose()
            .map_err(|e| corrupt(format!("checkpoint_blob: {e}")))?,
        run_id: r.try_get::<Option<String>, _>("run_id")?.map(RunId),
        reproduces: r.try_get::<Option<String>, _>("reproduces")?.map(RunId),
        reason: r.try_get("reason")?,
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
    })
}
