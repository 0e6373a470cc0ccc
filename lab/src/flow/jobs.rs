//! Requests on an experiment's jobs: cancel (on the record when it ends a job), rerun, and a
//! queued reproduction of its newest run.
//!
//! Not here: the queue's own transitions (`crate::queue`).

use crate::error::LabError;
use crate::queue::{CancelOutcome, Job, JobId, JobKind, NewJob};
use glassbox_schemas::record::{ResultBody, RunEnding};
use glassbox_schemas::{ExperimentId, RunId, RunStatus};

use super::*;

/// The most snapshots one `/evaluate` queues (the newest).
pub const MAX_EVAL_SNAPSHOTS: usize = 32;

impl Flow {
    /// Queues a reproduction of `run` (of `experiment`) requested by `by`: a job like any
    /// other (the requester's priority and open-job limit), at most one per run at a time.
    /// Returns the job and its position.
    pub async fn queue_reproduction(
        &self,
        experiment: &ExperimentId,
        run: &RunId,
        by: &str,
    ) -> Result<(JobId, u32), LabError> {
        let of_run = self
            .inner
            .queue
            .latest_job_of(experiment)
            .await?
            .filter(|j| j.run_id.as_ref() == Some(run))
            .ok_or_else(|| LabError::Refused(format!("{run} is not a run of {experiment}")))?;
        let limits = &self.inner.config.limits;
        let open = self.inner.queue.open_jobs_of(by).await?;
        if open >= limits.max_open_per_author {
            return Err(LabError::Refused(format!(
                "{by} already has {open} jobs waiting or running; the limit is {} (limits.max_open_per_author)",
                limits.max_open_per_author
            )));
        }
        let new = NewJob {
            kind: JobKind::Reproduction,
            experiment: experiment.clone(),
            spec_hash: of_run.spec_hash,
            author: by.to_string(),
            proposal_entry: of_run.proposal_entry,
            approval_entry: None,
            priority: self.inner.config.queue.priority_of(by),
            max_attempts: limits.max_attempts,
        };
        let job = match self
            .inner
            .queue
            .enqueue_reproduction(&new, run, &Default::default())
            .await
        {
            Ok(j) => j,
            Err(crate::queue::QueueError::AlreadyOpen { job, state }) => {
                return Err(LabError::Refused(format!(
                    "a reproduction of {run} is already {state} (job {job}); wait for it or cancel it"
                )));
            }
            Err(e) => return Err(e.into()),
        };
        let j = self.inner.queue.get(job).await?;
        Ok((job, self.position(&j).await?))
    }

    /// Queues eval jobs (`/evaluate SUITE` by `by`) of every snapshot of the experiment's last
    /// finished run on the suite's newest version, at the lab's eval priority (the last
    /// [`MAX_EVAL_SNAPSHOTS`] when there are more); the job of the last snapshot announces its
    /// result on the issue. A snapshot whose job already waits or runs is not queued twice.
    /// Returns the jobs queued and the first one's queue position.
    pub async fn queue_evaluation(
        &self,
        experiment: &ExperimentId,
        suite: &glassbox_schemas::eval::SuiteName,
        by: &str,
    ) -> Result<(u32, u32), LabError> {
        let job = self.inner.queue.latest_job_of(experiment).await?;
        let (job, run) = match job {
            Some(j) if j.state.is_terminal() && j.run_id.is_some() => {
                let run = j.run();
                (j, run)
            }
            Some(j) => {
                return Err(LabError::Refused(format!(
                    "job {} is {}; a run can be evaluated once it has ended",
                    j.id, j.state
                )));
            }
            None => {
                return Err(LabError::Refused(
                    "nothing has run for this issue yet".into(),
                ));
            }
        };
        let rec = self.inner.recorder.clone();
        let (r, s) = (run.clone(), suite.clone());
        let (snapshots, stored) = tokio::task::spawn_blocking(move || {
            let snaps = crate::trained::RunSnapshots::find(&rec, &r)?.snapshots;
            let stored = crate::eval::suite::find(&rec, &crate::eval::SuiteRef::Name(s))?;
            Ok::<_, LabError>((snaps, stored))
        })
        .await
        .map_err(|e| LabError::Task(e.to_string()))??;
        if snapshots.is_empty() {
            return Err(LabError::Refused(format!(
                "{run} kept no snapshot to evaluate (set train.checkpoint_interval)"
            )));
        }
        let skip = snapshots.len().saturating_sub(MAX_EVAL_SNAPSHOTS);
        let new = NewJob {
            kind: JobKind::Eval,
            experiment: experiment.clone(),
            spec_hash: job.spec_hash,
            author: by.to_string(),
            proposal_entry: job.proposal_entry,
            approval_entry: None,
            priority: self.inner.config.evals.priority,
            max_attempts: self.inner.config.limits.max_attempts,
        };
        let (mut queued, mut first) = (0u32, None);
        let last = snapshots.len() - 1;
        for (i, snap) in snapshots.iter().enumerate().skip(skip) {
            let target = crate::queue::EvalTarget {
                run: run.clone(),
                step: snap.step,
                snapshot: snap.blob,
                suite: suite.clone(),
                suite_hash: stored.body.suite,
                kind: stored.body.kind,
                // Only the last snapshot's job announces: one comment per request.
                announce: i == last,
            };
            match self.inner.queue.enqueue_eval(&new, &target, false).await {
                Ok(id) => {
                    queued += 1;
                    first.get_or_insert(id);
                }
                Err(crate::queue::QueueError::AlreadyOpen { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let Some(first) = first else {
            return Err(LabError::Refused(format!(
                "every snapshot of {run} already has an evaluation on {suite} waiting or running"
            )));
        };
        let j = self.inner.queue.get(first).await?;
        Ok((queued, self.position(&j).await?))
    }

    /// What a `/cancel` on an experiment stops: its run job while that is not over, else a
    /// reproduction of it that waits or runs.
    pub(super) async fn job_to_cancel(
        &self,
        experiment: &ExperimentId,
    ) -> Result<Option<Job>, LabError> {
        let run = self.inner.queue.latest_job_of(experiment).await?;
        if let Some(j) = &run
            && !j.state.is_terminal()
        {
            return Ok(run);
        }
        Ok(self
            .inner
            .queue
            .open_reproduction_of_experiment(experiment)
            .await?
            .or(run))
    }

    /// Cancels a job: at once if waiting, at its next step if running (in this process) or at
    /// its worker's next heartbeat (elsewhere).
    pub async fn cancel_job(&self, job: JobId, by: &str) -> Result<CancelOutcome, LabError> {
        let job = self.inner.queue.get(job).await?;
        self.cancel_on_record(&job, &format!("cancelled by {by}"))
            .await
    }

    /// Cancels `job`: one that had not started leaves the queue with its `result` entry
    /// (`cancelled`, no steps, the reason; an eval job's `evaluation` entry) in the same
    /// transaction; a running one is asked to
    /// stop, and its worker records the result.
    pub(super) async fn cancel_on_record(
        &self,
        job: &Job,
        reason: &str,
    ) -> Result<CancelOutcome, LabError> {
        let before = format!("{reason} before it started");
        let entry = match &job.evaluates {
            // An eval job's end is an `evaluation` entry, as every way it ends is.
            Some(target) if job.kind == JobKind::Eval => {
                let (mut body, refs) = crate::eval::unscored(
                    target,
                    glassbox_schemas::record::EvalOutcome::Cancelled,
                    Some(before),
                );
                body.job = Some(job.id);
                body.automatic = job.automatic;
                glassbox_schemas::LedgerEntry::new(Some(job.experiment.clone()), refs, body)
            }
            _ => glassbox_schemas::LedgerEntry::new(
                Some(job.experiment.clone()),
                Default::default(),
                ResultBody {
                    run: job.run(),
                    spec_hash: job.spec_hash,
                    ending: RunEnding::early(RunStatus::Cancelled, before),
                    forecast: None,
                    params_blake3: None,
                },
            ),
        };
        let bytes = crate::recorder::canonical(std::slice::from_ref(&entry))?;
        let (out, sequenced) = self
            .inner
            .queue
            .cancel_recorded(job.id, reason, bytes.into_iter().next().unwrap_or_default())
            .await?;
        if let Some(idx) = sequenced
            && let Err(e) = self.blocking(move |rec| rec.publish(idx)).await
        {
            // The cancellation and its entry are committed together; the integrator
            // publishes the entry when it can.
            tracing::warn!(entry = idx, error = %e, "the cancellation is sequenced but not yet in the log");
        }
        if out == CancelOutcome::Requested {
            self.inner.switches.cancel(job.id);
        }
        Ok(out)
    }

    /// Queues the approved spec of `experiment` again.
    pub async fn rerun(&self, experiment: &ExperimentId, by: &str) -> Result<Queued, LabError> {
        let row = self.row(experiment).await?.ok_or_else(|| {
            LabError::Refused(format!("no proposal is recorded for {experiment}"))
        })?;
        let Some(h) = row.approved_hash else {
            return Err(LabError::Refused(
                "the current spec is not approved; /approve it first".into(),
            ));
        };
        if h != row.spec_hash {
            return Err(LabError::Refused(
                "the spec changed since its approval; /approve the new one".into(),
            ));
        }
        if let Some(job) = self.inner.queue.latest_job_of(experiment).await?
            && !job.state.is_terminal()
        {
            return Err(LabError::Refused(format!(
                "job {} is still {}; wait for it or /cancel it",
                job.id, job.state
            )));
        }
        // A re-run is a new approval by whoever asked for it.
        self.approve(experiment, &h, by, false).await
    }
}
