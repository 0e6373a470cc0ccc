//! The port between the bot and the lab: [`LabPort`], the actions the bot asks of the lab, and
//! [`LabEvent`], what the lab tells the bot so it can comment. `glassbox-lab` implements the
//! port; [`InMemoryLab`] implements it for tests and for the load test.
//!
//! The bot knows nothing of training, queues or the ledger beyond this trait: it never builds a
//! ledger entry itself, it hands the lab a [`Proposal`] and the lab records it. Approval is
//! bound to a spec hash: the lab refuses an approval whose hash is not the proposal's current
//! one ([`LabError::StaleHash`]), and recording a proposal with a new hash voids an approval of
//! the old one ([`ProposalRecorded::voided_approval`]). A rejection outlives edits: only a
//! maintainer's approval lifts it. Closing, deleting, transferring or unlabelling the issue
//! voids the approval as a rejection ([`LabPort::void_approval`]).
//!
//! Not here: the lab's side of the port (`glassbox-lab`'s flow implements it) and the words of
//! the comments the bot writes about these actions ([`crate::render`]).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use glassbox_schemas::eval::SuiteName;
use glassbox_schemas::record::{IssueRef, RunEnding};
use glassbox_schemas::{ExperimentId, ExperimentSpec, RunId, RunStatus, SpecHash};

use crate::form::FormForecast;
use crate::ids::{IssueKey, Login};

/// A valid proposal, as the bot hands it to the lab.
#[derive(Debug, Clone, PartialEq)]
pub struct Proposal {
    /// `<owner>/<repo>#<number>`.
    pub experiment: ExperimentId,
    /// The issue it came from.
    pub issue: IssueRef,
    /// Who filed the issue.
    pub author: Login,
    /// The issue title.
    pub title: String,
    /// The validated spec, defaults filled.
    pub spec: ExperimentSpec,
    /// Its hash.
    pub spec_hash: SpecHash,
    /// The hypothesis field of the form.
    pub hypothesis: String,
    /// The form's pre-registered forecast, if given.
    pub forecast: Option<FormForecast>,
    /// The issue body as filed (the snapshot the lab stores as a blob).
    pub issue_body: String,
}

/// A valid sweep from an issue (`[sweep]` in the spec): its children become experiments
/// `<issue>/<i>`, approved together by one `/approve` bound to the sweep file's hash.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepProposal {
    /// `<owner>/<repo>#<number>`: the sweep's own experiment.
    pub experiment: ExperimentId,
    /// The issue it came from.
    pub issue: IssueRef,
    /// Who filed the issue.
    pub author: Login,
    /// The issue title.
    pub title: String,
    /// The expanded, validated sweep.
    pub sweep: glassbox_schemas::sweep::Sweep,
    /// The file as written.
    pub toml: String,
}

/// What the lab did with a sweep.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SweepRecorded {
    /// Waiting child jobs that the edit took out of the queue (their approval is void).
    pub voided: Vec<ExperimentId>,
}

/// What the lab did with a proposal.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProposalRecorded {
    /// An approval of an earlier spec hash that this new hash voided.
    pub voided_approval: Option<ApprovalInfo>,
    /// What in the spec is over the lab's limits (or names an undeclared corpus), one line
    /// each with the figure and the limit: the proposal is recorded, but `/approve` will be
    /// refused until the spec changes. Empty when it fits.
    pub over_limits: Vec<String>,
}

/// An approval as the lab holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalInfo {
    /// The hash that was approved.
    pub spec_hash: SpecHash,
    /// Who approved it.
    pub approver: Login,
}

/// Where an experiment stands.
#[derive(Debug, Clone, PartialEq)]
pub enum ExperimentState {
    /// Recorded, waiting for a maintainer.
    Proposed,
    /// Approved and waiting in the queue (1 = next).
    Queued {
        /// Position in the queue, 1-based.
        position: u32,
    },
    /// Approved but held by a maintainer.
    Held,
    /// A run is in progress.
    Running {
        /// The run.
        run: RunId,
    },
    /// The last run ended.
    Finished {
        /// How it ended.
        status: RunStatus,
    },
    /// Rejected by a maintainer.
    Rejected {
        /// Why.
        reason: String,
    },
    /// Cancelled before or during its run.
    Cancelled,
}

/// An experiment's state and the hash it is about.
#[derive(Debug, Clone, PartialEq)]
pub struct ExperimentStatus {
    /// The current spec hash.
    pub spec_hash: SpecHash,
    /// The state.
    pub state: ExperimentState,
    /// The approval in force, if any.
    pub approval: Option<ApprovalInfo>,
}

/// What a `/cancel` stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cancelled {
    /// A job still in the queue.
    Queued,
    /// A running job; the run ends as `cancelled` and its result is still recorded.
    Running(RunId),
}

/// What [`LabPort::void_approval`] undid.
#[derive(Debug, Clone, PartialEq)]
pub struct Voided {
    /// The approval that was in force, if any.
    pub approval: Option<ApprovalInfo>,
    /// The job that was waiting (now out of the queue) or running (stopping at its next step).
    pub job: Option<Cancelled>,
}

/// Why the lab refused an action. Messages are shown to people in comments.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LabError {
    /// No proposal is recorded for this experiment.
    #[error("no valid proposal is recorded for {0}")]
    UnknownExperiment(ExperimentId),
    /// The approval's hash is not the proposal's current one.
    #[error("the spec changed: approved {seen}, but the current spec is {current}")]
    StaleHash {
        /// What the approver saw.
        seen: SpecHash,
        /// What the lab has.
        current: SpecHash,
    },
    /// The action does not apply in the current state.
    #[error("{0}")]
    InvalidState(String),
    /// The lab could not be reached or failed; the bot retries the event later.
    #[error("lab unavailable: {0}")]
    Unavailable(String),
}

/// A note to record as an `annotation` entry (`/note`).
#[derive(Debug, Clone, PartialEq)]
pub struct NoteRequest {
    /// The issue's experiment.
    pub experiment: ExperimentId,
    /// The run named, or `None` for the issue's only run.
    pub run: Option<RunId>,
    /// Who wrote it (the event's sender).
    pub author: Login,
    /// A maintainer's note (permission checked by the bot) or a community one.
    pub role: glassbox_schemas::record::NoteRole,
    /// First step.
    pub from_step: u64,
    /// Last step.
    pub to_step: u64,
    /// The text, as written.
    pub text: String,
    /// The comment's URL: an edited comment's new note supersedes the old one.
    pub url: String,
}

/// What the lab recorded for a note.
#[derive(Debug, Clone, PartialEq)]
pub struct NoteRecorded {
    /// The run it is on.
    pub run: RunId,
    /// Its `annotation` entry.
    pub entry: u64,
    /// The entry of the note it supersedes (the same comment, before the edit).
    pub supersedes: Option<u64>,
}

/// A new approval to record.
#[derive(Debug, Clone, PartialEq)]
pub struct Approval {
    /// The experiment.
    pub experiment: ExperimentId,
    /// The hash the approver saw (from the issue body at the time of the command).
    pub spec_hash: SpecHash,
    /// Who approved.
    pub approver: Login,
}

/// The lab as the bot sees it. Every method is one lab action; implementations record the
/// matching ledger entry (proposal, approval, rejection, ...) before returning.
///
/// Methods return `Send` futures so the bot's worker can run on a multi-threaded runtime;
/// implementations may write them as `async fn`.
pub trait LabPort: Send + Sync + 'static {
    /// Records a valid proposal (a `proposal` entry). Re-recording the same hash is a no-op;
    /// a new hash voids an approval of the old one and says so.
    fn record_proposal(
        &self,
        proposal: Proposal,
    ) -> impl Future<Output = Result<ProposalRecorded, LabError>> + Send;
    /// The issue no longer holds a valid proposal (edited into an invalid or over-budget spec):
    /// voids an approval still waiting (queued or held) and takes its job out of the queue.
    /// Returns the voided approval, if any; a no-op for an unknown experiment.
    fn withdraw_proposal(
        &self,
        experiment: &ExperimentId,
    ) -> impl Future<Output = Result<Option<ApprovalInfo>, LabError>> + Send;
    /// Records a valid sweep (a `sweep` entry and one `proposal` per child). The same file again
    /// is a no-op; an edit voids the set's approval and takes waiting children out of the queue.
    fn record_sweep(
        &self,
        sweep: SweepProposal,
    ) -> impl Future<Output = Result<SweepRecorded, LabError>> + Send;
    /// Approves every child of the sweep, bound to `parent_hash` (refused with
    /// [`LabError::StaleHash`] when the file changed); returns how many children are queued.
    fn approve_sweep(
        &self,
        experiment: &ExperimentId,
        parent_hash: &SpecHash,
        approver: &Login,
    ) -> impl Future<Output = Result<u32, LabError>> + Send;
    /// Records an approval bound to `spec_hash` and queues the job; returns the queue position.
    /// An approval lifts a rejection (the `approval` entry is the record of it).
    fn approve(&self, approval: Approval) -> impl Future<Output = Result<u32, LabError>> + Send;
    /// Records a rejection with its reason. The proposal stays rejected, whatever its author
    /// edits, until a maintainer approves it.
    fn reject(
        &self,
        experiment: &ExperimentId,
        by: &Login,
        reason: &str,
    ) -> impl Future<Output = Result<(), LabError>> + Send;
    /// The issue was closed, deleted, transferred or unlabelled: when a job waits or runs,
    /// records a `rejection` by `by` with `reason`, takes the job out of the queue or stops it at
    /// its next step, and voids the approval; the proposal stays rejected until a maintainer
    /// approves it again. With no job open, an approval whose run has ended is dropped without a
    /// record (so reopening needs a new approval before a `/rerun`) and `None` is returned.
    fn void_approval(
        &self,
        experiment: &ExperimentId,
        by: &Login,
        reason: &str,
    ) -> impl Future<Output = Result<Option<Voided>, LabError>> + Send;
    /// Holds (`true`) or releases (`false`) an approved proposal.
    fn set_hold(
        &self,
        experiment: &ExperimentId,
        by: &Login,
        held: bool,
    ) -> impl Future<Output = Result<(), LabError>> + Send;
    /// Cancels the queued or running job.
    fn cancel(
        &self,
        experiment: &ExperimentId,
        by: &Login,
    ) -> impl Future<Output = Result<Cancelled, LabError>> + Send;
    /// Queues the current approved spec again; returns the queue position.
    fn rerun(
        &self,
        experiment: &ExperimentId,
        by: &Login,
    ) -> impl Future<Output = Result<u32, LabError>> + Send;
    /// Queues a reproduction of the last run from the ledger; returns the queue position.
    fn reproduce(
        &self,
        experiment: &ExperimentId,
        by: &Login,
    ) -> impl Future<Output = Result<u32, LabError>> + Send;
    /// Queues the evaluation of the last finished run's snapshots on `suite` (its newest
    /// version); returns how many eval jobs were queued and the first one's queue position.
    fn evaluate(
        &self,
        experiment: &ExperimentId,
        suite: &SuiteName,
        by: &Login,
    ) -> impl Future<Output = Result<(u32, u32), LabError>> + Send;
    /// The experiment's state, or `None` when nothing is recorded.
    fn status(
        &self,
        experiment: &ExperimentId,
    ) -> impl Future<Output = Result<Option<ExperimentStatus>, LabError>> + Send;
    /// How many of `author`'s proposals are approved and waiting (queued or held).
    fn queued_count(&self, author: &Login) -> impl Future<Output = Result<u32, LabError>> + Send;
    /// Records a note as an `annotation` entry. Refused ([`LabError::InvalidState`], with the
    /// reason) when the run is not one of the experiment's, when no run is named and the
    /// experiment has none or several, or when the author is over the lab's rate limit.
    fn annotate(
        &self,
        note: NoteRequest,
    ) -> impl Future<Output = Result<NoteRecorded, LabError>> + Send;
}

/// What the lab tells the bot, for result comments and labels.
#[derive(Debug, Clone, PartialEq)]
pub enum LabEvent {
    /// A worker started a run.
    RunStarted {
        /// The issue to comment on.
        issue: IssueKey,
        /// The run.
        run: RunId,
        /// The spec hash it trains.
        spec_hash: SpecHash,
    },
    /// A run made progress (the bot edits its run comment in place).
    Progress {
        /// The issue.
        issue: IssueKey,
        /// The run.
        run: RunId,
        /// Steps done.
        step: u64,
        /// Steps planned.
        total_steps: u64,
    },
    /// A run ended, whatever the ending.
    Finished {
        /// The issue.
        issue: IssueKey,
        /// The result.
        result: RunResult,
    },
    /// Something about a running run people should look at (the lab raises each kind once
    /// per run; the bot comments once per kind and run whatever is redelivered).
    Alert {
        /// The issue.
        issue: IssueKey,
        /// The run.
        run: RunId,
        /// What happened.
        alert: RunAlert,
    },
    /// A reproduction of a run ended: reproduced, or a mismatch (a negative result).
    Reproduced {
        /// The issue.
        issue: IssueKey,
        /// The run re-run.
        run: RunId,
        /// `reproduced`, `differs`, `failed` or `cancelled`.
        outcome: String,
        /// The first difference, or why it could not finish.
        detail: Option<String>,
        /// `bitwise` or `tolerance`.
        comparison: Option<String>,
        /// The worker that re-ran it.
        worker: String,
        /// Queued by the lab's own policy rather than asked for.
        automatic: bool,
        /// Index of the `reproduction` entry.
        ledger_index: u64,
    },
    /// An evaluation a maintainer asked for (`/evaluate`) ended.
    Evaluated {
        /// The issue.
        issue: IssueKey,
        /// The run evaluated.
        run: RunId,
        /// The result in one line (suite, step, headline metric), or how it ended.
        headline: String,
        /// `evaluated`, `failed` or `cancelled`.
        outcome: String,
        /// The share of the suite's items that share a 13-gram with the training data.
        contamination: Option<f64>,
        /// Index of the `evaluation` entry.
        ledger_index: u64,
    },
    /// A sweep's promotion gate was decided when its children ended.
    Gate {
        /// The sweep's issue.
        issue: IssueKey,
        /// Whether it passed.
        passed: bool,
        /// The numbers, in one sentence.
        detail: String,
        /// Index of the `gate` entry.
        ledger_index: u64,
    },
}

impl LabEvent {
    /// The issue the event is announced on.
    pub fn issue(&self) -> &IssueKey {
        match self {
            LabEvent::RunStarted { issue, .. }
            | LabEvent::Progress { issue, .. }
            | LabEvent::Finished { issue, .. }
            | LabEvent::Alert { issue, .. }
            | LabEvent::Reproduced { issue, .. }
            | LabEvent::Evaluated { issue, .. }
            | LabEvent::Gate { issue, .. } => issue,
        }
    }
}

/// An alert about a running run.
#[derive(Debug, Clone, PartialEq)]
pub enum RunAlert {
    /// The anomaly detector flagged something (the run's first flag; later ones are on the
    /// dashboard).
    Anomaly {
        /// What was flagged.
        anomaly: glassbox_schemas::record::Anomaly,
        /// Index of its `anomaly` entry.
        ledger_index: u64,
    },
    /// No step finished for many times the run's median step time.
    Stalled {
        /// The last step finished.
        last_step: u64,
        /// Seconds since.
        silent_seconds: f64,
        /// The median step time, in seconds.
        median_step_seconds: f64,
    },
}

impl RunAlert {
    /// The alert's kind, one comment per kind and run (`anomaly`, `stalled`).
    pub fn kind(&self) -> &'static str {
        match self {
            RunAlert::Anomaly { .. } => "anomaly",
            RunAlert::Stalled { .. } => "stalled",
        }
    }
}

/// What a run's model wrote at its last snapshot after its first prompt, for the result
/// comment. Model output: untrusted text.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct QuotedSample {
    /// Steps completed at the snapshot.
    pub step: u64,
    /// The prompt, as the model saw it.
    pub prompt: String,
    /// Its completion.
    pub text: String,
}

/// The end of a run, as the result comment reports it: the run's [`RunEnding`] with where it
/// is recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct RunResult {
    /// The run.
    pub run: RunId,
    /// How it ended.
    pub ending: RunEnding,
    /// Forecast vs outcome, when one was registered.
    pub forecast: Option<glassbox_schemas::record::ForecastOutcome>,
    /// Index of the `result` entry in the ledger.
    pub ledger_index: u64,
    /// URL of its inclusion proof.
    pub proof_url: String,
    /// What the model wrote at its last snapshot, when the spec asked for samples.
    pub sample: Option<QuotedSample>,
}

/// The run a note is on: the named one when it is one of `runs` (the experiment's), else a
/// refusal naming the experiment it belongs to (`owner_of` finds it, if any); with none named,
/// the experiment's only run. Shared by the lab and the in-memory lab, so both refuse alike.
pub fn pick_note_run(
    experiment: &ExperimentId,
    runs: &[RunId],
    named: Option<&RunId>,
    owner_of: impl FnOnce() -> Option<ExperimentId>,
) -> Result<RunId, LabError> {
    match (named, runs) {
        (Some(r), _) if runs.contains(r) => Ok(r.clone()),
        (Some(r), _) => Err(LabError::InvalidState(match owner_of() {
            Some(other) => {
                format!("{r} is a run of {other}, not of {experiment}; note it on its own issue")
            }
            None => format!("{r} is not a run of {experiment}"),
        })),
        (None, [only]) => Ok(only.clone()),
        (None, []) => Err(LabError::InvalidState(format!(
            "{experiment} has no run yet; a note is about steps of a run"
        ))),
        (None, many) => Err(LabError::InvalidState(format!(
            "{experiment} has {} runs ({}); name one, e.g. `/note {} step 100: ...`",
            many.len(),
            many.iter()
                .map(|r| r.0.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            many[many.len() - 1]
        ))),
    }
}

/// An in-memory lab for tests: one record per experiment, a FIFO queue, and a log of every
/// action so tests can assert what was (and was not) recorded.
#[derive(Debug, Clone, Default)]
pub struct InMemoryLab {
    inner: Arc<Mutex<LabModel>>,
}

/// The in-memory lab's contents (see [`InMemoryLab::snapshot`]).
#[derive(Debug, Clone, Default)]
pub struct LabModel {
    /// Experiments by id.
    pub experiments: HashMap<ExperimentId, LabExperiment>,
    /// Queue of approved jobs, first = next.
    pub queue: Vec<ExperimentId>,
    /// Every recorded action, in order, e.g. `proposal owner/repo#1 blake3:...`.
    pub journal: Vec<String>,
    /// Every note recorded, in order (its position is its "entry").
    pub notes: Vec<(NoteRequest, NoteRecorded)>,
    /// Notes one author may write (the lab's hourly limit; the in-memory lab has no clock, so
    /// it counts all of them). `0` means the default, 30.
    pub note_limit: u32,
    /// When set, every proposal is refused with this reason (as the lab refuses one over an
    /// author's daily limit, or a forecast naming a metric the run will not report).
    pub refuse_proposals: Option<String>,
    /// What the lab says is over its limits for every proposal (see
    /// [`ProposalRecorded::over_limits`]); `/approve` is refused while it is not empty.
    pub over_limits: Vec<String>,
    /// Sweeps by their experiment: the current file hash and how many children it has.
    pub sweeps: HashMap<ExperimentId, (SpecHash, u32)>,
}

/// One experiment in the in-memory lab.
#[derive(Debug, Clone)]
pub struct LabExperiment {
    /// The latest proposal.
    pub proposal: Proposal,
    /// Its state.
    pub state: ExperimentState,
    /// The approval in force.
    pub approval: Option<ApprovalInfo>,
    /// Its runs, oldest first.
    pub runs: Vec<RunId>,
}

impl InMemoryLab {
    /// An empty lab.
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of the lab's contents.
    pub fn snapshot(&self) -> LabModel {
        self.lock().clone()
    }

    /// Sets how many notes one author may write.
    pub fn set_note_limit(&self, limit: u32) {
        self.lock().note_limit = limit;
    }

    /// Makes the lab refuse every proposal with `reason` (`None`: accept them again).
    pub fn refuse_proposals(&self, reason: Option<&str>) {
        self.lock().refuse_proposals = reason.map(str::to_string);
    }

    /// Makes the lab say these limits are exceeded by every proposal (empty: none are).
    pub fn set_over_limits(&self, problems: Vec<String>) {
        self.lock().over_limits = problems;
    }

    /// Marks an experiment as running (what a worker leasing its job would do).
    pub fn start_run(&self, experiment: &ExperimentId, run: RunId) {
        let mut m = self.lock();
        m.queue.retain(|e| e != experiment);
        if let Some(e) = m.experiments.get_mut(experiment) {
            e.state = ExperimentState::Running { run: run.clone() };
            if !e.runs.contains(&run) {
                e.runs.push(run.clone());
            }
        }
        m.journal.push(format!("run_started {experiment} {run}"));
    }

    /// Marks `experiment`'s run over with `status` (what the lab does when a run ends).
    pub fn finish_run(&self, experiment: &ExperimentId, status: RunStatus) {
        let mut m = self.lock();
        if let Some(e) = m.experiments.get_mut(experiment) {
            e.state = ExperimentState::Finished { status };
        }
        m.journal.push(format!("finished {experiment} {status}"));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LabModel> {
        // A poisoned lock only means a test thread panicked; the data is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn position(m: &LabModel, experiment: &ExperimentId) -> u32 {
        m.queue
            .iter()
            .position(|e| e == experiment)
            .map(|p| p as u32 + 1)
            .unwrap_or(0)
    }

    fn enqueue(m: &mut LabModel, experiment: &ExperimentId) -> u32 {
        if !m.queue.contains(experiment) {
            m.queue.push(experiment.clone());
        }
        let position = Self::position(m, experiment);
        if let Some(e) = m.experiments.get_mut(experiment) {
            e.state = ExperimentState::Queued { position };
        }
        position
    }
}

impl LabPort for InMemoryLab {
    async fn record_sweep(&self, sweep: SweepProposal) -> Result<SweepRecorded, LabError> {
        let mut m = self.lock();
        if let Some(reason) = &m.refuse_proposals {
            return Err(LabError::InvalidState(reason.clone()));
        }
        let hash = sweep.sweep.parent_hash;
        let children = sweep.sweep.children.len() as u32;
        let old = m.sweeps.insert(sweep.experiment.clone(), (hash, children));
        let mut voided = Vec::new();
        if let Some((old_hash, n)) = old
            && old_hash != hash
        {
            for i in 0..n {
                let child = sweep.experiment.child(i as usize);
                if m.queue.contains(&child) {
                    m.queue.retain(|e| e != &child);
                    voided.push(child);
                }
            }
        }
        m.journal.push(format!(
            "sweep {} {hash} ({children} children)",
            sweep.experiment
        ));
        Ok(SweepRecorded { voided })
    }

    async fn approve_sweep(
        &self,
        experiment: &ExperimentId,
        parent_hash: &SpecHash,
        approver: &Login,
    ) -> Result<u32, LabError> {
        let mut m = self.lock();
        let Some((current, n)) = m.sweeps.get(experiment).copied() else {
            return Err(LabError::UnknownExperiment(experiment.clone()));
        };
        if current != *parent_hash {
            return Err(LabError::StaleHash {
                seen: *parent_hash,
                current,
            });
        }
        for i in 0..n {
            let child = experiment.child(i as usize);
            if !m.queue.contains(&child) {
                m.queue.push(child);
            }
        }
        m.journal.push(format!(
            "approval {experiment} {parent_hash} by {approver} ({n} children)"
        ));
        Ok(n)
    }

    async fn record_proposal(&self, proposal: Proposal) -> Result<ProposalRecorded, LabError> {
        let mut m = self.lock();
        if let Some(reason) = &m.refuse_proposals {
            return Err(LabError::InvalidState(reason.clone()));
        }
        let id = proposal.experiment.clone();
        let mut recorded = ProposalRecorded {
            over_limits: m.over_limits.clone(),
            ..ProposalRecorded::default()
        };
        match m.experiments.get_mut(&id) {
            Some(e) if e.proposal.spec_hash == proposal.spec_hash => {
                e.proposal = proposal;
                return Ok(recorded);
            }
            Some(e) => {
                recorded.voided_approval = e.approval.take();
                e.proposal = proposal.clone();
                // A rejection outlives edits; only a maintainer's approval lifts it.
                if !matches!(e.state, ExperimentState::Rejected { .. }) {
                    e.state = ExperimentState::Proposed;
                }
            }
            None => {
                m.experiments.insert(
                    id.clone(),
                    LabExperiment {
                        proposal: proposal.clone(),
                        state: ExperimentState::Proposed,
                        approval: None,
                        runs: Vec::new(),
                    },
                );
            }
        }
        if recorded.voided_approval.is_some() {
            m.queue.retain(|e| e != &id);
            m.journal.push(format!("approval_voided {id}"));
        }
        m.journal
            .push(format!("proposal {id} {}", proposal.spec_hash));
        Ok(recorded)
    }

    async fn withdraw_proposal(
        &self,
        experiment: &ExperimentId,
    ) -> Result<Option<ApprovalInfo>, LabError> {
        let mut m = self.lock();
        let Some(e) = m.experiments.get_mut(experiment) else {
            return Ok(None);
        };
        if !matches!(
            e.state,
            ExperimentState::Queued { .. } | ExperimentState::Held
        ) {
            return Ok(None);
        }
        let voided = e.approval.take();
        e.state = ExperimentState::Proposed;
        m.queue.retain(|x| x != experiment);
        m.journal.push(format!("approval_voided {experiment}"));
        Ok(voided)
    }

    async fn approve(&self, approval: Approval) -> Result<u32, LabError> {
        let mut m = self.lock();
        if !m.over_limits.is_empty() {
            return Err(LabError::InvalidState(format!(
                "refused: {}",
                m.over_limits.join("; ")
            )));
        }
        let id = approval.experiment.clone();
        let e = m
            .experiments
            .get_mut(&id)
            .ok_or_else(|| LabError::UnknownExperiment(id.clone()))?;
        if e.proposal.spec_hash != approval.spec_hash {
            return Err(LabError::StaleHash {
                seen: approval.spec_hash,
                current: e.proposal.spec_hash,
            });
        }
        match &e.state {
            // An approval lifts a rejection; after a run ended or was cancelled it queues a
            // new one, as the lab's flow does.
            ExperimentState::Proposed
            | ExperimentState::Rejected { .. }
            | ExperimentState::Cancelled
            | ExperimentState::Finished { .. } => {}
            ExperimentState::Queued { .. } | ExperimentState::Held => {
                return Err(LabError::InvalidState("already approved".into()));
            }
            ExperimentState::Running { run } => {
                return Err(LabError::InvalidState(format!("already running as {run}")));
            }
        }
        e.approval = Some(ApprovalInfo {
            spec_hash: approval.spec_hash,
            approver: approval.approver.clone(),
        });
        m.journal.push(format!(
            "approval {id} {} by {}",
            approval.spec_hash, approval.approver
        ));
        Ok(Self::enqueue(&mut m, &id))
    }

    async fn reject(
        &self,
        experiment: &ExperimentId,
        by: &Login,
        reason: &str,
    ) -> Result<(), LabError> {
        let mut m = self.lock();
        let e = m
            .experiments
            .get_mut(experiment)
            .ok_or_else(|| LabError::UnknownExperiment(experiment.clone()))?;
        e.state = ExperimentState::Rejected {
            reason: reason.to_string(),
        };
        e.approval = None;
        m.queue.retain(|x| x != experiment);
        m.journal
            .push(format!("rejection {experiment} by {by}: {reason}"));
        Ok(())
    }

    async fn void_approval(
        &self,
        experiment: &ExperimentId,
        by: &Login,
        reason: &str,
    ) -> Result<Option<Voided>, LabError> {
        let mut m = self.lock();
        let Some(e) = m.experiments.get_mut(experiment) else {
            return Ok(None);
        };
        let job = match &e.state {
            ExperimentState::Queued { .. } | ExperimentState::Held => Some(Cancelled::Queued),
            ExperimentState::Running { run } => Some(Cancelled::Running(run.clone())),
            _ => None,
        };
        let approval = e.approval.take();
        if job.is_none() {
            // An approval whose run has ended was spent on it; it is dropped without a record,
            // so a `/rerun` after reopening needs a new `/approve`.
            return Ok(None);
        }
        e.state = ExperimentState::Rejected {
            reason: reason.to_string(),
        };
        m.queue.retain(|x| x != experiment);
        m.journal
            .push(format!("rejection {experiment} by {by}: {reason}"));
        Ok(Some(Voided { approval, job }))
    }

    async fn set_hold(
        &self,
        experiment: &ExperimentId,
        by: &Login,
        held: bool,
    ) -> Result<(), LabError> {
        let mut m = self.lock();
        let e = m
            .experiments
            .get_mut(experiment)
            .ok_or_else(|| LabError::UnknownExperiment(experiment.clone()))?;
        match (&e.state, held) {
            (ExperimentState::Queued { .. }, true) => e.state = ExperimentState::Held,
            (ExperimentState::Held, false) => {
                Self::enqueue(&mut m, experiment);
            }
            (state, _) => {
                return Err(LabError::InvalidState(format!(
                    "cannot {} in state {state:?}",
                    if held { "hold" } else { "unhold" }
                )));
            }
        }
        m.journal.push(format!(
            "{} {experiment} by {by}",
            if held { "hold" } else { "unhold" }
        ));
        Ok(())
    }

    async fn cancel(&self, experiment: &ExperimentId, by: &Login) -> Result<Cancelled, LabError> {
        let mut m = self.lock();
        let e = m
            .experiments
            .get_mut(experiment)
            .ok_or_else(|| LabError::UnknownExperiment(experiment.clone()))?;
        let what = match &e.state {
            ExperimentState::Queued { .. } | ExperimentState::Held => Cancelled::Queued,
            ExperimentState::Running { run } => Cancelled::Running(run.clone()),
            state => {
                return Err(LabError::InvalidState(format!(
                    "nothing to cancel in state {state:?}"
                )));
            }
        };
        e.state = ExperimentState::Cancelled;
        m.queue.retain(|x| x != experiment);
        m.journal.push(format!("cancel {experiment} by {by}"));
        Ok(what)
    }

    async fn rerun(&self, experiment: &ExperimentId, by: &Login) -> Result<u32, LabError> {
        let mut m = self.lock();
        let e = m
            .experiments
            .get(experiment)
            .ok_or_else(|| LabError::UnknownExperiment(experiment.clone()))?;
        if e.approval.is_none() {
            return Err(LabError::InvalidState(
                "the current spec is not approved; use /approve first".into(),
            ));
        }
        m.journal.push(format!("rerun {experiment} by {by}"));
        Ok(Self::enqueue(&mut m, experiment))
    }

    async fn reproduce(&self, experiment: &ExperimentId, by: &Login) -> Result<u32, LabError> {
        let mut m = self.lock();
        let e = m
            .experiments
            .get(experiment)
            .ok_or_else(|| LabError::UnknownExperiment(experiment.clone()))?;
        if !matches!(e.state, ExperimentState::Finished { .. }) {
            return Err(LabError::InvalidState(
                "there is no finished run to reproduce yet".into(),
            ));
        }
        m.journal.push(format!("reproduce {experiment} by {by}"));
        Ok(Self::enqueue(&mut m, experiment))
    }

    async fn evaluate(
        &self,
        experiment: &ExperimentId,
        suite: &SuiteName,
        by: &Login,
    ) -> Result<(u32, u32), LabError> {
        let mut m = self.lock();
        let e = m
            .experiments
            .get(experiment)
            .ok_or_else(|| LabError::UnknownExperiment(experiment.clone()))?;
        if !matches!(e.state, ExperimentState::Finished { .. }) {
            return Err(LabError::InvalidState(
                "there is no finished run to evaluate yet".into(),
            ));
        }
        m.journal
            .push(format!("evaluate {experiment} on {suite} by {by}"));
        Ok((1, Self::enqueue(&mut m, experiment)))
    }

    async fn status(
        &self,
        experiment: &ExperimentId,
    ) -> Result<Option<ExperimentStatus>, LabError> {
        let m = self.lock();
        Ok(m.experiments.get(experiment).map(|e| ExperimentStatus {
            spec_hash: e.proposal.spec_hash,
            state: match &e.state {
                ExperimentState::Queued { .. } => ExperimentState::Queued {
                    position: Self::position(&m, experiment),
                },
                s => s.clone(),
            },
            approval: e.approval.clone(),
        }))
    }

    async fn annotate(&self, note: NoteRequest) -> Result<NoteRecorded, LabError> {
        let mut m = self.lock();
        let limit = if m.note_limit == 0 { 30 } else { m.note_limit };
        let written = m
            .notes
            .iter()
            .filter(|(n, _)| n.author == note.author)
            .count();
        if written >= limit as usize {
            return Err(LabError::InvalidState(format!(
                "{} has written {written} notes in the last hour; the limit is {limit} (limits.max_notes_per_author_per_hour)",
                note.author
            )));
        }
        let run = {
            let e = m
                .experiments
                .get(&note.experiment)
                .ok_or_else(|| LabError::UnknownExperiment(note.experiment.clone()))?;
            pick_note_run(&note.experiment, &e.runs, note.run.as_ref(), || {
                m.experiments
                    .iter()
                    .find(|(_, x)| note.run.as_ref().is_some_and(|r| x.runs.contains(r)))
                    .map(|(id, _)| id.clone())
            })?
        };
        let supersedes = m
            .notes
            .iter()
            .rev()
            .find(|(n, _)| n.url == note.url)
            .map(|(_, r)| r.entry);
        let recorded = NoteRecorded {
            run: run.clone(),
            entry: m.notes.len() as u64,
            supersedes,
        };
        m.journal.push(format!(
            "annotation {} {run} steps {}-{} by {} ({}){}",
            note.experiment,
            note.from_step,
            note.to_step,
            note.author,
            note.role.as_str(),
            supersedes
                .map(|s| format!(" supersedes {s}"))
                .unwrap_or_default()
        ));
        m.notes.push((note, recorded.clone()));
        Ok(recorded)
    }

    async fn queued_count(&self, author: &Login) -> Result<u32, LabError> {
        let m = self.lock();
        Ok(m.experiments
            .values()
            .filter(|e| {
                e.proposal.author == *author
                    && matches!(
                        e.state,
                        ExperimentState::Queued { .. } | ExperimentState::Held
                    )
            })
            .count() as u32)
    }
}
