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
//! Every statement on the `jobs` table is in [`crate::db::jobs`]; this module holds the rules
//! of a job's life and decides which statement runs when. It knows nothing of training, the
//! ledger or GitHub: it stores ids and hashes.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

pub use glassbox_schemas::JobId;

pub use crate::error::QueueError;
pub use crate::job::{Avoid, CancelOutcome, EvalTarget, Job, JobKind, JobState, NewJob, WorkerId};
use glassbox_schemas::{BlobHash, ExperimentId, RunId, RunStatus};

pub use crate::clock::Clock;
use crate::db::jobs::{self, Finish};
use crate::db::sequence;
pub use crate::db::{Db, Durability, Engine};

mod gauges;
mod group_commit;
pub use group_commit::WriteStats;
use group_commit::{Done, GroupCommit, Op};

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

    /// Sequences `entries` (canonical entry bytes, the job's end last) in this ending's
    /// transaction: they get their log indices now and are committed with the job's end, or
    /// not at all. Returns the first one's index. Publishing them
    /// ([`crate::recorder::Recorder::publish`]) comes after the commit.
    pub async fn sequence(&mut self, entries: &[Vec<u8>]) -> Result<u64, QueueError> {
        sequence::sequence(&mut self.tx, entries, self.clock.now_ms()).await
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
        jobs::finish(&mut *self.tx, &f).await?;
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
        jobs::finish(&mut *self.tx, &f).await?;
        let next = jobs::lease(
            &mut *self.tx,
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

/// The job queue.
#[derive(Debug, Clone)]
pub struct Queue {
    db: Db,
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
        Ok(Self::over(Db::connect(url, clock, durability).await?))
    }

    /// The queue over an open lab database.
    pub fn over(db: Db) -> Self {
        // Half the pool at most stays with the hot writes (one suffices on SQLite, whose
        // writes go one batch at a time); the rest serves reads and heartbeats.
        let keep = db.max_connections() as usize / 2;
        Self {
            db,
            last_sweep: Arc::new(AtomicI64::new(i64::MIN)),
            group: Arc::new(GroupCommit::new(keep)),
        }
    }

    /// The lab database this queue's table lives in (the flow's and the outbox's too).
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// The durability the database reports (see [`Db::durability_in_effect`]).
    pub async fn durability_in_effect(&self) -> Result<Durability, QueueError> {
        self.db.durability_in_effect().await
    }

    /// The engine in use.
    pub fn engine(&self) -> Engine {
        self.db.engine()
    }

    /// The clock in use.
    pub fn clock(&self) -> &Clock {
        self.db.clock()
    }

    /// `sqlite` or `postgresql`, for messages (never the URL: it may hold a password).
    pub fn engine_name(&self) -> &'static str {
        self.db.engine().name()
    }

    /// Closes the pool (after handing back the connections the hot writes keep).
    pub async fn close(&self) {
        self.group.release_connections();
        self.db.close().await;
    }

    fn now(&self) -> i64 {
        self.db.now_ms()
    }

    /// Adds a job; returns its id once committed (concurrent writes share one commit; see
    /// [`group_commit`]).
    pub async fn enqueue(&self, job: &NewJob) -> Result<JobId, QueueError> {
        let op = Op::Enqueue {
            job: job.clone(),
            now: self.now(),
        };
        match self.submit(op).await? {
            Done::Enqueued(id) => Ok(id),
            other => Err(mismatched("enqueue", other)),
        }
    }

    /// Adds a job together with the entry that decides it (its `approval`): the entry is
    /// sequenced and the job inserted, naming the entry's index as its `approval_entry`, in one
    /// transaction. Returns the job and the entry's index; publish the entry after.
    pub async fn enqueue_sequenced(
        &self,
        job: &NewJob,
        approval: Vec<u8>,
    ) -> Result<(JobId, u64), QueueError> {
        let now = self.now();
        let mut tx = self.db.begin_write().await?;
        let entry = sequence::sequence(&mut tx, std::slice::from_ref(&approval), now).await?;
        let mut job = job.clone();
        job.approval_entry = Some(entry);
        let id = jobs::insert(&mut *tx, &job, now).await?;
        tx.commit()
            .await
            .map_err(|e| QueueError::CommitFailed(e.to_string()))?;
        Ok((id, entry))
    }

    /// Claims the next job for `worker` for `lease_for`: the highest priority, then the oldest,
    /// among queued jobs and jobs whose lease expired with attempts left. `None` when idle.
    pub async fn lease(
        &self,
        worker: &WorkerId,
        lease_for: Duration,
    ) -> Result<Option<Job>, QueueError> {
        let now = self.now();
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
        let now = self.now();
        let last = self.last_sweep.load(Ordering::Relaxed);
        if now.saturating_sub(last) < SWEEP_EVERY_MS {
            return Ok(None);
        }
        let expires = now + lease_for.as_millis() as i64;
        let job =
            jobs::claim_abandoned(self.db.pool(), self.engine(), worker, expires, now).await?;
        if job.is_none() {
            self.last_sweep.store(now, Ordering::Relaxed);
        }
        Ok(job)
    }

    /// Starts ending `job` for `worker`: checks that `worker` holds its lease and keeps the
    /// job's row locked (on SQLite, the database's write lock) until [`Ending::finish`]
    /// commits or the [`Ending`] is dropped (nothing changes). The worker records the job's
    /// end in the ledger while it holds the [`Ending`], so a worker whose lease ran out (and
    /// whose job another worker took) gets [`QueueError::LeaseLost`] here and records nothing:
    /// a job never has two results.
    pub async fn begin_ending(&self, job: JobId, worker: &WorkerId) -> Result<Ending, QueueError> {
        let mut tx = self.db.begin_write().await?;
        if jobs::touch_held(&mut *tx, job, worker, self.now()).await? != 1 {
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
            engine: self.engine(),
            clock: self.clock().clone(),
        })
    }

    /// Adds a reproduction job of `run` (its `kind` must be [`JobKind::Reproduction`]); at most
    /// one waits or runs per run: a second is [`QueueError::AlreadyOpen`].
    pub async fn enqueue_reproduction(
        &self,
        job: &NewJob,
        run: &RunId,
        avoid: &Avoid,
    ) -> Result<JobId, QueueError> {
        if let Some(open) = self.open_reproduction_of(run).await? {
            return Err(QueueError::AlreadyOpen {
                job: open.id,
                state: open.state,
            });
        }
        match jobs::insert_reproduction(self.db.pool(), job, run, avoid, self.now()).await {
            Ok(id) => Ok(id),
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

    /// Adds an eval job scoring `target` (`job.kind` must be [`JobKind::Eval`]); at most one
    /// waits or runs per target: a second is [`QueueError::AlreadyOpen`].
    pub async fn enqueue_eval(
        &self,
        job: &NewJob,
        target: &EvalTarget,
        automatic: bool,
    ) -> Result<JobId, QueueError> {
        if let Some(open) = jobs::open_eval_of(self.db.pool(), target).await? {
            return Err(QueueError::AlreadyOpen {
                job: open.id,
                state: open.state,
            });
        }
        match jobs::insert_eval(self.db.pool(), job, target, automatic, self.now()).await {
            Ok(id) => Ok(id),
            // Two requests at once: the unique index lets one through.
            Err(e) => match jobs::open_eval_of(self.db.pool(), target).await? {
                Some(open) => Err(QueueError::AlreadyOpen {
                    job: open.id,
                    state: open.state,
                }),
                None => Err(e.into()),
            },
        }
    }

    /// Records that `worker` runs on `host` and asks for work now (what [`Avoid::host`] is
    /// checked against).
    pub async fn announce(&self, worker: &WorkerId, host: &str) -> Result<(), QueueError> {
        jobs::announce(self.db.pool(), worker, host, self.now()).await
    }

    /// The reproduction job of `run` that is waiting or running, if any.
    pub async fn open_reproduction_of(&self, run: &RunId) -> Result<Option<Job>, QueueError> {
        jobs::open_reproduction_of(self.db.pool(), run).await
    }

    /// The newest reproduction job of an experiment that is waiting or running, if any.
    pub async fn open_reproduction_of_experiment(
        &self,
        experiment: &ExperimentId,
    ) -> Result<Option<Job>, QueueError> {
        jobs::open_reproduction_of_experiment(self.db.pool(), experiment).await
    }

    /// The job, of any kind, whose approval is ledger entry `entry`, if any.
    pub async fn job_with_approval(&self, entry: u64) -> Result<Option<Job>, QueueError> {
        jobs::with_approval(self.db.pool(), entry).await
    }

    /// Claims one given job for `worker` if it is queued (a local `glassbox run` trains the job
    /// it just enqueued, whatever else waits). `None` when the job is not queued.
    pub async fn lease_job(
        &self,
        job: JobId,
        worker: &WorkerId,
        lease_for: Duration,
    ) -> Result<Option<Job>, QueueError> {
        let now = self.now();
        jobs::lease_one(
            self.db.pool(),
            job,
            worker,
            now + lease_for.as_millis() as i64,
            now,
        )
        .await
    }

    /// The newest run job of an experiment, if any (reproductions of its runs are not its
    /// state; see [`Queue::open_reproduction_of`]).
    pub async fn latest_job_of(
        &self,
        experiment: &ExperimentId,
    ) -> Result<Option<Job>, QueueError> {
        jobs::latest_run_of(self.db.pool(), experiment).await
    }

    /// Renews the lease; tells the worker whether a cancel was requested.
    pub async fn heartbeat(
        &self,
        job: JobId,
        worker: &WorkerId,
        lease_for: Duration,
    ) -> Result<Heartbeat, QueueError> {
        let now = self.now();
        let expires = now + lease_for.as_millis() as i64;
        match jobs::renew(self.db.pool(), job, worker, expires, now).await? {
            Some(cancel_requested) => Ok(Heartbeat { cancel_requested }),
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
        let rows = jobs::set_running(self.db.pool(), job, worker, run_id, self.now()).await?;
        self.require_lease(rows, job, worker)
    }

    /// Records the latest training snapshot, so a worker that takes over can resume from it.
    pub async fn record_snapshot(
        &self,
        job: JobId,
        worker: &WorkerId,
        step: u64,
        blob: &BlobHash,
    ) -> Result<(), QueueError> {
        let rows = jobs::set_snapshot(self.db.pool(), job, worker, step, blob, self.now()).await?;
        self.require_lease(rows, job, worker)
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
            now: self.now(),
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
        let now = self.now();
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
        let rows = jobs::unlease(self.db.pool(), job, worker, self.now()).await?;
        self.require_lease(rows, job, worker)
    }

    /// Cancels a job in the queue alone: at once if it has not started, at its next step if it
    /// runs. For a queue with no ledger beside it; the lab cancels through
    /// [`Queue::cancel_recorded`] (by way of `Flow::cancel_job`), which records the ending.
    pub async fn cancel(&self, job: JobId, reason: &str) -> Result<CancelOutcome, QueueError> {
        let now = self.now();
        if jobs::cancel_waiting(self.db.pool(), job, reason, now).await? == 1 {
            return Ok(CancelOutcome::Cancelled);
        }
        if jobs::request_cancel(self.db.pool(), job, reason, now).await? == 1 {
            return Ok(CancelOutcome::Requested);
        }
        let current = self.get(job).await?;
        Ok(CancelOutcome::AlreadyOver(current.state))
    }

    /// Cancels a job. One that had not started (queued or held) leaves the queue together with
    /// `entry`, the record of its ending (its `result`, status `cancelled`), sequenced in the
    /// same transaction, so a cancellation is never off the record; a leased or running one is
    /// asked to stop, and its worker records its own result when it stops. Returns the entry's
    /// index when it was sequenced (publish it after).
    pub async fn cancel_recorded(
        &self,
        job: JobId,
        reason: &str,
        entry: Vec<u8>,
    ) -> Result<(CancelOutcome, Option<u64>), QueueError> {
        let now = self.now();
        let mut tx = self.db.begin_write().await?;
        if jobs::cancel_waiting(&mut *tx, job, reason, now).await? == 1 {
            let idx = sequence::sequence(&mut tx, std::slice::from_ref(&entry), now).await?;
            tx.commit()
                .await
                .map_err(|e| QueueError::CommitFailed(e.to_string()))?;
            return Ok((CancelOutcome::Cancelled, Some(idx)));
        }
        drop(tx);
        Ok((self.cancel(job, reason).await?, None))
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
        if jobs::move_state(self.db.pool(), job, from, to, self.now()).await? == 1 {
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
        jobs::get(self.db.pool(), job)
            .await?
            .ok_or(QueueError::NotFound(job))
    }

    /// Jobs, newest first, optionally only those in `state`; at most `limit`.
    pub async fn list(&self, state: Option<JobState>, limit: u32) -> Result<Vec<Job>, QueueError> {
        jobs::list(self.db.pool(), state, limit).await
    }

    /// The open jobs (queued, held, leased, running) in the order a worker would lease the
    /// waiting ones (priority, then first approved); at most `limit`.
    pub async fn open_jobs(&self, limit: u32) -> Result<Vec<Job>, QueueError> {
        jobs::open(self.db.pool(), limit).await
    }

    /// The jobs that ended last, newest ending first; at most `limit`.
    pub async fn recently_ended(&self, limit: u32) -> Result<Vec<Job>, QueueError> {
        jobs::recently_ended(self.db.pool(), limit).await
    }

    /// How many queued jobs run before this one (0 = next); `None` if it is not queued.
    pub async fn position(&self, job: JobId) -> Result<Option<u64>, QueueError> {
        let j = self.get(job).await?;
        if j.state != JobState::Queued {
            return Ok(None);
        }
        Ok(Some(
            jobs::queued_ahead_of(self.db.pool(), j.priority, j.id).await?,
        ))
    }

    /// Jobs of `author` not yet over (for per-author quotas).
    pub async fn open_jobs_of(&self, author: &str) -> Result<u64, QueueError> {
        jobs::open_of_author(self.db.pool(), author).await
    }

    /// Jobs of `author` waiting to start (queued or held).
    pub async fn waiting_jobs_of(&self, author: &str) -> Result<u64, QueueError> {
        jobs::waiting_of_author(self.db.pool(), author).await
    }

    /// Number of jobs in each state (for `/metrics` and `glassbox jobs`).
    pub async fn counts(&self) -> Result<Vec<(JobState, u64)>, QueueError> {
        jobs::count_by_state(self.db.pool()).await
    }

    /// Jobs queued, leased or running that `worker` may ever take or is waiting on (a job that
    /// avoids `worker` is another worker's to run, so it does not keep `worker` busy).
    pub async fn open_for(&self, worker: &WorkerId) -> Result<u64, QueueError> {
        jobs::open_for(self.db.pool(), worker).await
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
