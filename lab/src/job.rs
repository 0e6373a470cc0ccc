//! The job row: what a queued job is ([`Job`], [`NewJob`]), where it is in its life
//! ([`JobState`]), what kind of work it is ([`JobKind`]), who holds it ([`WorkerId`]) and whom it
//! avoids ([`Avoid`]). The queue's rules (`crate::queue`) and the table's statements
//! (`crate::db::jobs`) both speak these types.
//!
//! Not here: any statement or transition.

use std::fmt;
use std::str::FromStr;

use glassbox_schemas::eval::{EvalKind, SuiteName};
use glassbox_schemas::{BlobHash, ExperimentId, JobId, RunId, RunStatus, SpecHash};
use serde::{Deserialize, Serialize};

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
    /// Score a run's snapshot on an evaluation suite (`[evals]`, `/evaluate`).
    Eval,
}

impl JobKind {
    /// The name stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::Run => "run",
            JobKind::Reproduction => "reproduction",
            JobKind::Eval => "eval",
        }
    }
}

impl FromStr for JobKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "run" => Ok(JobKind::Run),
            "reproduction" => Ok(JobKind::Reproduction),
            "eval" => Ok(JobKind::Eval),
            other => Err(format!(
                "unknown job kind {other:?}; expected run, reproduction or eval"
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
    /// The last training snapshot's step, for resuming.
    #[serde(rename = "checkpoint_step")]
    pub snapshot_step: Option<u64>,
    /// The last training snapshot's blob, for resuming.
    #[serde(rename = "checkpoint_blob")]
    pub snapshot_blob: Option<BlobHash>,
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
    /// A worker that may never take it (the one that made the run a reproduction re-runs).
    pub avoid_worker: Option<WorkerId>,
    /// A host whose workers take it only while no other host's worker serves the queue.
    pub avoid_host: Option<String>,
    /// Queued by the lab's own policy (`[reproduce]`, `[evals]`), not asked for.
    pub automatic: bool,
    /// For an eval job: the snapshot and suite version it scores.
    pub evaluates: Option<EvalTarget>,
}

/// What an eval job scores: one snapshot of a run on one version of a suite.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvalTarget {
    /// The run.
    pub run: RunId,
    /// Steps completed at the snapshot.
    pub step: u64,
    /// The snapshot's blob.
    pub snapshot: BlobHash,
    /// The suite's name.
    pub suite: SuiteName,
    /// The suite version.
    pub suite_hash: BlobHash,
    /// What the suite measures.
    pub kind: EvalKind,
    /// Whether its end is announced on the experiment's issue (the last snapshot of a
    /// `/evaluate`); not part of [`EvalTarget::key`].
    #[serde(default)]
    pub announce: bool,
}

impl EvalTarget {
    /// The target as one string: at most one job per key waits or runs.
    pub fn key(&self) -> String {
        format!("{} {} {}", self.run, self.snapshot, self.suite_hash)
    }
}

/// Where a reproduction job may not run, and whether the lab queued it by itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Avoid {
    /// Never this worker.
    pub worker: Option<WorkerId>,
    /// Not this host while a worker of another host serves the queue.
    pub host: Option<String>,
    /// Queued by the `[reproduce]` policy.
    pub automatic: bool,
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
