//! A run on this machine through the lab (`glassbox run`): the spec proposed and approved by
//! the local user, queued, and trained at once by a worker in this process, with every step on
//! the record exactly like a GitHub experiment's. A sweep is proposed and approved the same
//! way, and queued for `glassbox worker`s.
//!
//! Not here: the terminal display and the run directory's files (the binary's), or the
//! proposal and approval themselves ([`crate::flow`]).

use std::future::Future;
use std::sync::Arc;

use glassbox_runner::train::RunOutcome;
use glassbox_schemas::run::{RunSummary, SummaryLedger, SummarySnapshot, UnpublishedEntry};
use glassbox_schemas::sweep::Sweep;
use glassbox_schemas::{BlobHash, ExperimentId, ExperimentSpec};

use crate::error::LabError;
use crate::flow::{NewSweep, Queued, Recorded, SweepRecorded};
use crate::handle::LabHandle;
use crate::worker::{Finished, JobEnd, LiveSink, Worker, WorkerOptions};

/// Who cancels a local run when the person at the terminal interrupts it.
const INTERRUPTED_BY: &str = "the local user (Ctrl-C)";

/// A local run as it ended, on the record.
#[derive(Debug, Clone)]
pub struct LocalRun {
    /// Its `proposal` entry and spec hash.
    pub recorded: Recorded,
    /// Its job and `approval` entry.
    pub queued: Queued,
    /// The job's end as the worker recorded it.
    pub finished: Finished,
    /// The runner's outcome as the record states it, when training started: the ending is the
    /// `result` entry's (a run stopped because recording failed ends `failed` with that cause,
    /// whatever the trainer saw), and no snapshot path (the worker moved the files into the
    /// blob store).
    pub outcome: Option<RunOutcome>,
    /// The newest snapshot on the record: its blob and step.
    pub snapshot: Option<(BlobHash, u64)>,
}

impl LocalRun {
    /// The run's `summary.json`: `spec` as the person named it, the run directory, the
    /// process's peak RSS.
    pub fn summary(&self, spec: &str, out_dir: &str, peak_rss_bytes: Option<u64>) -> RunSummary {
        let f = &self.finished;
        RunSummary {
            spec: spec.to_string(),
            status: f.ending.status,
            reason: f.ending.reason.clone(),
            outcome: self.outcome.clone(),
            peak_rss_bytes,
            out_dir: out_dir.to_string(),
            ledger: Some(SummaryLedger {
                experiment: f.experiment.clone(),
                run: f.run.clone(),
                job: f.job,
                spec_hash: self.recorded.spec_hash,
                proposal_entry: self.recorded.entry,
                approval_entry: self.queued.approval_entry,
                result_entry: f.unpublished.is_none().then_some(f.result_entry),
                unpublished_result: f.unpublished.clone().map(|error| UnpublishedEntry {
                    entry: f.result_entry,
                    error,
                }),
                snapshot: self
                    .snapshot
                    .map(|(blob, step)| SummarySnapshot { blob, step }),
            }),
        }
    }
}

/// Proposes `spec` (its file's text `toml`) as the local user `user` and approves it: the job
/// is queued. A refusal (a limit, a quota) is [`LabError::Refused`].
pub async fn submit(
    lab: &LabHandle,
    spec: ExperimentSpec,
    toml: String,
    user: &str,
) -> Result<(Recorded, Queued), LabError> {
    lab.flow.submit_local(spec, Some(toml), user).await
}

/// Trains the submitted job `queued` here with a worker of `opts`, streaming to `live`; when
/// `interrupt` completes first the job is cancelled, and still ends with its `result` on the
/// record.
pub async fn train(
    lab: &LabHandle,
    recorded: Recorded,
    queued: Queued,
    opts: WorkerOptions,
    live: Arc<dyn LiveSink>,
    interrupt: impl Future<Output = ()> + Send + 'static,
) -> Result<LocalRun, LabError> {
    let worker = Worker::new(lab.queue.clone(), lab.recorder.clone(), opts)
        .with_live(live)
        .with_switches(lab.flow.switches());
    let flow = lab.flow.clone();
    let job = queued.job;
    let cancel = tokio::spawn(async move {
        interrupt.await;
        tracing::warn!(%job, "interrupted: cancelling the job (its result is still recorded)");
        if let Err(e) = flow.cancel_job(job, INTERRUPTED_BY).await {
            tracing::warn!(%job, error = %e, "cannot cancel the job");
        }
    });
    let end = worker.run_job(job).await;
    cancel.abort();
    let finished = match end? {
        Some(JobEnd::Recorded(f)) => *f,
        Some(JobEnd::LeaseLost(j)) => {
            return Err(LabError::Task(format!(
                "job {j} was taken over by another worker"
            )));
        }
        None => {
            return Err(LabError::Task(format!(
                "job {job} was no longer queued (another worker took it)"
            )));
        }
    };
    let mut outcome = finished.outcome.clone();
    if let Some(o) = &mut outcome {
        o.snapshot = None;
        o.ending = finished.ending.clone();
    }
    let row = lab.queue.get(finished.job).await?;
    Ok(LocalRun {
        recorded,
        queued,
        finished,
        outcome,
        snapshot: row.snapshot_blob.zip(row.snapshot_step),
    })
}

/// A local sweep, recorded and queued.
#[derive(Debug, Clone)]
pub struct LocalSweep {
    /// Its experiment, `local/<slug>`.
    pub experiment: ExperimentId,
    /// Its `sweep` entry and children.
    pub recorded: SweepRecorded,
    /// Each child's job, in the children's order.
    pub queued: Vec<Queued>,
}

/// Proposes `sweep` (its file's text `toml`) as the local user `user` at `local/<slug>`, the
/// slug its children share (`<slug>-s<i>`), and approves the set: every child is queued for
/// `glassbox worker`s.
pub async fn submit_sweep(
    lab: &LabHandle,
    sweep: Sweep,
    toml: String,
    user: &str,
) -> Result<LocalSweep, LabError> {
    let base = &sweep
        .children
        .first()
        .ok_or_else(|| LabError::Refused("the sweep has no children".into()))?
        .spec
        .experiment;
    let slug = base
        .slug
        .rsplit_once("-s")
        .map_or(base.slug.as_str(), |(b, _)| b);
    let experiment = ExperimentId::local(slug);
    let new = NewSweep {
        experiment: experiment.clone(),
        author: user.to_string(),
        title: base.name.clone(),
        issue: None,
        sweep,
        toml,
    };
    let recorded = lab.flow.propose_sweep(new).await?;
    let queued = lab
        .flow
        .approve_sweep(&experiment, &recorded.parent_hash, user)
        .await?;
    Ok(LocalSweep {
        experiment,
        recorded,
        queued,
    })
}
