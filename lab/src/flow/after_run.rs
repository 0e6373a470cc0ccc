//! What the lab decides when a job has ended, on the worker that ended it: the sweep's
//! promotion gate once every child is over, and the `[reproduce]` policy (after a run
//! succeeds, queue a reproduction — `all`, or `top` when the run would enter a leaderboard's top
//! N — that may not run on that worker, nor on its host while another host's worker serves
//! the queue).
//!
//! Each decision is made after the job's ending is on the record and announced; a failure is
//! logged and the record stands.
//!
//! Not here: recording the ending (`crate::worker`) or how a reproduction compares
//! (`crate::reproduce`).

use std::sync::Arc;

use glassbox_ledger::board::BoardDef;
use glassbox_schemas::RunId;
use glassbox_schemas::record::RunEnding;

use crate::config::{ReproducePolicy, ReproduceSettings};
use crate::error::LabError;
use crate::queue::{Avoid, Job, JobId, JobKind, NewJob, Queue, QueueError, WorkerId};
use crate::recorder::Recorder;
use crate::reproduce::derive_boards;

/// The lab's policies that apply when a job ends, as the ending worker holds them.
#[derive(Debug, Clone, Copy)]
pub struct Policies<'a> {
    /// The `[reproduce]` policy.
    pub reproduce: &'a ReproduceSettings,
    /// The lab's leaderboards (what `policy = "top"` ranks against).
    pub leaderboards: &'a [BoardDef],
}

/// A job that has just ended, with its run when it made one.
#[derive(Debug, Clone, Copy)]
pub struct Ended<'a> {
    /// The job.
    pub job: &'a Job,
    /// The run and how it ended, when this ending newly recorded a run's `result`.
    pub run: Option<(&'a RunId, &'a RunEnding)>,
}

/// Everything the lab decides when `ended` is over: the reproduction its policy asks for (after
/// a newly recorded success), then the sweep's gate. Failures are logged, never returned: the
/// job's record already stands.
pub async fn job_ended(
    queue: &Queue,
    rec: &Arc<Recorder>,
    policies: Policies<'_>,
    origin: Origin<'_>,
    ended: Ended<'_>,
) {
    if let Some((run, ending)) = ended.run
        && ending.status == glassbox_schemas::RunStatus::Succeeded
    {
        match queue_by_policy(queue, rec, policies, ended.job, run, ending, &origin).await {
            Ok(Some(j)) => tracing::info!(%run, job = %j, "queued an automatic reproduction"),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(%run, error = %e, "cannot queue the automatic reproduction")
            }
        }
    }
    let experiment = &ended.job.experiment;
    if let Err(e) = super::sweep::decide_gate(queue, rec, experiment).await {
        tracing::warn!(%experiment, error = %e, "cannot decide the sweep's gate");
    }
}

/// The worker that ended a job (what a policy's reproduction avoids).
#[derive(Debug, Clone, Copy)]
pub struct Origin<'a> {
    /// Its id.
    pub worker: &'a WorkerId,
    /// Its host.
    pub host: &'a str,
    /// Leases the reproduction job gets.
    pub max_attempts: u32,
}

/// Queues an independent reproduction of `run` (just succeeded, made by `origin` for `job`)
/// when the policy asks for one: `all`, or `top` when one of the leaderboards would rank its
/// final value among the top `top`. With `on_other_worker`, the job avoids `origin`'s worker and
/// host. `None` when the policy asks for nothing (or one already waits).
async fn queue_by_policy(
    queue: &Queue,
    rec: &Arc<Recorder>,
    policies: Policies<'_>,
    job: &Job,
    run: &RunId,
    ending: &RunEnding,
    origin: &Origin<'_>,
) -> Result<Option<JobId>, LabError> {
    let (settings, boards) = (policies.reproduce, policies.leaderboards);
    let wanted = match settings.policy {
        ReproducePolicy::Off => false,
        ReproducePolicy::All => true,
        ReproducePolicy::Top => {
            let relevant: Vec<_> = boards
                .iter()
                .filter(|b| ending.final_metrics.contains_key(&b.metric))
                .cloned()
                .collect();
            if relevant.is_empty() {
                false
            } else {
                let rec2 = rec.clone();
                let defs = relevant.clone();
                let derived = tokio::task::spawn_blocking(move || derive_boards(&rec2, &defs))
                    .await
                    .map_err(|e| LabError::Task(e.to_string()))??;
                derived.iter().any(|b| {
                    ending
                        .final_metrics
                        .get(&b.def.metric)
                        .is_some_and(|v| b.would_enter_top(*v, settings.top))
                })
            }
        }
    };
    if !wanted {
        return Ok(None);
    }
    let avoid = Avoid {
        worker: settings.on_other_worker.then(|| origin.worker.clone()),
        host: settings.on_other_worker.then(|| origin.host.to_string()),
        automatic: true,
    };
    let new = NewJob {
        kind: JobKind::Reproduction,
        experiment: job.experiment.clone(),
        spec_hash: job.spec_hash,
        author: job.author.clone(),
        proposal_entry: job.proposal_entry,
        approval_entry: None,
        priority: job.priority,
        max_attempts: origin.max_attempts.max(1),
    };
    match queue.enqueue_reproduction(&new, run, &avoid).await {
        Ok(j) => Ok(Some(j)),
        Err(QueueError::AlreadyOpen { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}
