//! Requests on an experiment's jobs: cancel (on the record when it ends a job), rerun, and a
//! queued reproduction of its newest run.
//!
//! Not here: the queue's own transitions (`crate::queue`).

use crate::error::LabError;
use crate::queue::{CancelOutcome, Job, JobId, JobKind, NewJob};
use glassbox_schemas::record::{ResultBody, RunEnding};
use glassbox_schemas::{ExperimentId, RunId, RunStatus};

use super::*;

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
    /// (`cancelled`, no steps, the reason) in the same transaction; a running one is asked to
    /// stop, and its worker records the result.
    pub(super) async fn cancel_on_record(
        &self,
        job: &Job,
        reason: &str,
    ) -> Result<CancelOutcome, LabError> {
        let body = ResultBody {
            run: job.run(),
            spec_hash: job.spec_hash,
            ending: RunEnding::early(RunStatus::Cancelled, format!("{reason} before it started")),
            forecast: None,
            params_blake3: None,
        };
        let entry = glassbox_schemas::LedgerEntry::new(
            Some(job.experiment.clone()),
            Default::default(),
            body,
        );
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
