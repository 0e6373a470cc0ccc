//! Maintainers' decisions on a proposal: `/approve` becomes an `approval` entry bound to the
//! spec hash and a queued job (in one transaction), `/reject` a `rejection`, a void takes an
//! approval back; a local run is proposed and approved by its own user.
//!
//! Not here: requests on a queued or ended job (`jobs`).

use crate::db::proposals::{self, ProposalRow};
use crate::error::LabError;
use crate::queue::{Job, JobKind, NewJob};
use glassbox_github_bot::Login;
use glassbox_github_bot::port::ApprovalInfo;
use glassbox_schemas::record::{ApprovalBody, RejectionBody};
use glassbox_schemas::{ExperimentId, ExperimentSpec, SpecHash};

use super::*;

impl Flow {
    /// Records an approval of `spec_hash` by `approver` and queues a job. Approving the hash
    /// that is already approved and waiting returns that job (a retried delivery). An approval
    /// lifts a rejection.
    pub async fn approve(
        &self,
        experiment: &ExperimentId,
        spec_hash: &SpecHash,
        approver: &str,
        local: bool,
    ) -> Result<Queued, LabError> {
        self.approve_with(experiment, spec_hash, approver, local, None)
            .await
    }

    /// [`Flow::approve`], for a sweep's child when `sweep` is the sweep file's hash the set's
    /// approval is bound to: the hash goes in the entry, and the author's open-job limit is
    /// not applied per child (the sweep's total is checked instead).
    pub(crate) async fn approve_with(
        &self,
        experiment: &ExperimentId,
        spec_hash: &SpecHash,
        approver: &str,
        local: bool,
        sweep: Option<SpecHash>,
    ) -> Result<Queued, LabError> {
        let row = self.row(experiment).await?.ok_or_else(|| {
            LabError::Refused(format!("no proposal is recorded for {experiment}"))
        })?;
        if &row.spec_hash != spec_hash {
            return Err(LabError::Refused(format!(
                "the spec changed: approved {spec_hash}, but the current spec is {}",
                row.spec_hash
            )));
        }
        if let Some(job) = self.inner.queue.latest_job_of(experiment).await?
            && !job.state.is_terminal()
        {
            // A retried delivery: the job of this very hash is the answer, even when the
            // flow's own row missed the approval (a crash between the enqueue and the row).
            if !local
                && job.spec_hash == *spec_hash
                && let Some(approval_entry) = job.approval_entry
            {
                self.repair_approved_row(experiment, &row, spec_hash, approval_entry)
                    .await?;
                let position = self.position(&job).await?;
                return Ok(Queued {
                    job: job.id,
                    position,
                    approval_entry,
                });
            }
            if local {
                return Err(LabError::Refused(format!(
                    "{experiment} already has job {} ({}); cancel it with `glassbox jobs cancel {}` first",
                    job.id, job.state, job.id
                )));
            }
        }
        let spec = self.spec(spec_hash).await?;
        self.check_limits(&spec, &row.author, local || sweep.is_some())
            .await?;
        let body = ApprovalBody {
            sweep,
            spec_hash: *spec_hash,
            approver: approver.to_string(),
        };
        let proposal_entry = self.proposal_entry(experiment).await?;
        let new_job = NewJob {
            kind: JobKind::Run,
            experiment: experiment.clone(),
            spec_hash: *spec_hash,
            author: row.author.clone(),
            proposal_entry: Some(proposal_entry),
            approval_entry: None,
            priority: self.inner.config.queue.priority_of(&row.author),
            max_attempts: self.inner.config.limits.max_attempts,
        };
        let (job, approval_entry) = match self
            .unqueued_approval(experiment, spec_hash, proposal_entry)
            .await?
        {
            // An approval recorded without its job (a lab from before the sequencer, which
            // appended first and enqueued after): that approval gets its job now.
            Some(entry) => {
                let job = self
                    .inner
                    .queue
                    .enqueue(&NewJob {
                        approval_entry: Some(entry),
                        ..new_job
                    })
                    .await?;
                (job, entry)
            }
            // The approval entry and its job commit together, or neither does.
            None => {
                let entry = glassbox_schemas::LedgerEntry::new(
                    Some(experiment.clone()),
                    Default::default(),
                    body,
                );
                let bytes = crate::recorder::canonical(std::slice::from_ref(&entry))?;
                let (job, idx) = self
                    .inner
                    .queue
                    .enqueue_sequenced(&new_job, bytes.into_iter().next().unwrap_or_default())
                    .await?;
                if let Err(e) = self.blocking(move |rec| rec.publish(idx)).await {
                    // The approval and its job are committed; the integrator publishes the
                    // entry when it can.
                    tracing::warn!(entry = idx, error = %e, "the approval is sequenced but not yet in the log");
                }
                (job, idx)
            }
        };
        // An approval lifts a rejection; the `approval` entry is its record.
        let lifts_rejection = true;
        proposals::set_approved(
            self.pool(),
            experiment,
            spec_hash,
            approver,
            approval_entry,
            lifts_rejection,
            self.now(),
        )
        .await?;
        let j = self.inner.queue.get(job).await?;
        Ok(Queued {
            job,
            position: self.position(&j).await?,
            approval_entry,
        })
    }

    /// An approval entry of `spec_hash` written after the current proposal (`since`) that has
    /// no job: its job was never queued (a crash in between), so a retried `/approve` uses it
    /// rather than writing a second approval.
    pub(super) async fn unqueued_approval(
        &self,
        experiment: &ExperimentId,
        spec_hash: &SpecHash,
        since: u64,
    ) -> Result<Option<u64>, LabError> {
        let (exp, hash) = (experiment.clone(), *spec_hash);
        let last = self
            .blocking(move |rec| rec.last_approval(&exp, &hash))
            .await?;
        match last {
            Some(entry) if entry > since => {
                let queued = self.inner.queue.job_with_approval(entry).await?;
                Ok(queued.is_none().then_some(entry))
            }
            _ => Ok(None),
        }
    }

    /// Puts a queued approval back into the flow's row when the row missed it (a crash after
    /// the job was queued); the approver comes from the approval entry.
    pub(super) async fn repair_approved_row(
        &self,
        experiment: &ExperimentId,
        row: &ProposalRow,
        spec_hash: &SpecHash,
        approval_entry: u64,
    ) -> Result<(), LabError> {
        if row.approved_hash.as_ref() == Some(spec_hash) || row.rejected_reason.is_some() {
            return Ok(());
        }
        let approver = self
            .blocking(move |rec| {
                let entry = rec.entry(approval_entry)?;
                Ok(entry.body_of::<ApprovalBody>()?.approver.clone())
            })
            .await?;
        // The row missed this approval; a rejection recorded since it stands.
        let lifts_rejection = false;
        proposals::set_approved(
            self.pool(),
            experiment,
            spec_hash,
            &approver,
            approval_entry,
            lifts_rejection,
            self.now(),
        )
        .await
    }

    /// Records a rejection; a waiting job leaves the queue.
    pub async fn reject(
        &self,
        experiment: &ExperimentId,
        by: &str,
        reason: &str,
    ) -> Result<u64, LabError> {
        let row = self.row(experiment).await?.ok_or_else(|| {
            LabError::Refused(format!("no proposal is recorded for {experiment}"))
        })?;
        let body = RejectionBody {
            spec_hash: row.spec_hash,
            by: by.to_string(),
            reason: reason.to_string(),
        };
        let exp = experiment.clone();
        let entry = self
            .blocking(move |rec| rec.record(Some(&exp), Default::default(), body))
            .await?;
        self.drop_waiting_job(experiment, "rejected").await?;
        proposals::set_rejected(self.pool(), experiment, reason, self.now()).await?;
        Ok(entry)
    }

    /// The issue was closed, deleted, transferred or unlabelled (`reason` says which, naming
    /// `by`). When a job waits or runs: a `rejection` entry by `by` first, then the job is
    /// cancelled (a running one at its next step) and the approval voided; the proposal stays
    /// rejected until an approval lifts it. With no job open, a spent approval (its run ended)
    /// is dropped without an entry, so a `/rerun` after reopening needs a new approval, and
    /// `None` is returned.
    pub async fn void_approval(
        &self,
        experiment: &ExperimentId,
        by: &str,
        reason: &str,
    ) -> Result<Option<(Option<ApprovalInfo>, Job)>, LabError> {
        let Some(row) = self.row(experiment).await? else {
            return Ok(None);
        };
        let approval = match (row.approved_hash, row.approver) {
            (Some(h), Some(a)) => Some(ApprovalInfo {
                spec_hash: h,
                approver: Login::new(a),
            }),
            _ => None,
        };
        let open = self
            .inner
            .queue
            .latest_job_of(experiment)
            .await?
            .filter(|j| !j.state.is_terminal());
        let Some(job) = open else {
            proposals::clear_approval(self.pool(), experiment).await?;
            return Ok(None);
        };
        let body = RejectionBody {
            spec_hash: row.spec_hash,
            by: by.to_string(),
            reason: reason.to_string(),
        };
        let exp = experiment.clone();
        self.blocking(move |rec| rec.record(Some(&exp), Default::default(), body))
            .await?;
        self.cancel_on_record(&job, reason).await?;
        proposals::set_rejected(self.pool(), experiment, reason, self.now()).await?;
        Ok(Some((approval, job)))
    }

    /// Records a local proposal and its approval by the same person and queues it: the path
    /// of `glassbox run`.
    pub async fn submit_local(
        &self,
        spec: ExperimentSpec,
        spec_toml: Option<String>,
        user: &str,
    ) -> Result<(Recorded, Queued), LabError> {
        let experiment = ExperimentId::local(&spec.experiment.slug);
        let recorded = self
            .propose(NewProposal {
                experiment: experiment.clone(),
                author: user.to_string(),
                title: spec.experiment.name.clone(),
                issue: None,
                spec,
                spec_toml,
                snapshot: None,
                forecast: None,
            })
            .await?;
        let queued = self
            .approve(&experiment, &recorded.spec_hash, user, true)
            .await?;
        Ok((recorded, queued))
    }
}
