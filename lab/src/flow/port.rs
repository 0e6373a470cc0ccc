//! The flow as the bot's [`LabPort`]: each port call is one flow call, and a refusal is an
//! invalid state the bot explains, anything else an unavailable lab it retries.
//!
//! Not here: what each call does (the sibling modules).

use crate::db::proposals::{self};
use crate::error::LabError;
use crate::queue::{CancelOutcome, JobState};
use glassbox_github_bot::Login;
use glassbox_github_bot::port::{
    Approval, ApprovalInfo, Cancelled, ExperimentStatus, LabError as PortError, LabPort,
    NoteRecorded, NoteRequest, Proposal, ProposalRecorded, Voided,
};
use glassbox_schemas::spec::Forecast;
use glassbox_schemas::{ExperimentId, SpecHash};

use super::*;

fn port_error(e: LabError) -> PortError {
    match e {
        LabError::Refused(m) => PortError::InvalidState(m),
        other => PortError::Unavailable(other.to_string()),
    }
}

impl LabPort for Flow {
    async fn record_sweep(
        &self,
        s: glassbox_github_bot::port::SweepProposal,
    ) -> Result<glassbox_github_bot::port::SweepRecorded, PortError> {
        let recorded = self
            .propose_sweep(super::NewSweep {
                experiment: s.experiment,
                author: s.author.as_str().to_string(),
                title: s.title,
                issue: Some(s.issue),
                sweep: s.sweep,
                toml: s.toml,
            })
            .await
            .map_err(port_error)?;
        Ok(glassbox_github_bot::port::SweepRecorded {
            voided: recorded.voided,
        })
    }

    async fn approve_sweep(
        &self,
        experiment: &ExperimentId,
        parent_hash: &SpecHash,
        approver: &Login,
    ) -> Result<u32, PortError> {
        match self.sweep(experiment).await.map_err(port_error)? {
            None => return Err(PortError::UnknownExperiment(experiment.clone())),
            Some((body, _, _)) if body.parent_hash != *parent_hash => {
                return Err(PortError::StaleHash {
                    seen: *parent_hash,
                    current: body.parent_hash,
                });
            }
            Some(_) => {}
        }
        let queued = Flow::approve_sweep(self, experiment, parent_hash, approver.as_str())
            .await
            .map_err(port_error)?;
        Ok(queued.len() as u32)
    }

    async fn record_proposal(&self, p: Proposal) -> Result<ProposalRecorded, PortError> {
        let forecast = p.forecast.as_ref().map(|f| Forecast {
            metric: f.metric.clone(),
            value: f.value,
            tolerance: f.tolerance,
        });
        let recorded = self
            .propose(NewProposal {
                experiment: p.experiment.clone(),
                author: p.author.as_str().to_string(),
                title: p.title.clone(),
                issue: Some(p.issue.clone()),
                spec: p.spec.clone(),
                spec_toml: None,
                snapshot: Some(p.issue_body.clone()),
                forecast,
            })
            .await
            .map_err(port_error)?;
        let over_limits = self
            .spec_limit_problems(&p.spec)
            .await
            .map_err(port_error)?;
        Ok(ProposalRecorded {
            voided_approval: recorded.voided.map(|(h, by)| ApprovalInfo {
                spec_hash: h,
                approver: Login::new(by),
            }),
            over_limits,
        })
    }

    async fn withdraw_proposal(
        &self,
        experiment: &ExperimentId,
    ) -> Result<Option<ApprovalInfo>, PortError> {
        let Some(row) = self.row(experiment).await.map_err(port_error)? else {
            return Ok(None);
        };
        let dropped = self
            .drop_waiting_job(experiment, "the issue no longer holds a valid proposal")
            .await
            .map_err(port_error)?;
        if dropped.is_none() {
            return Ok(None);
        }
        proposals::clear_approval(self.pool(), experiment)
            .await
            .map_err(port_error)?;
        Ok(match (row.approved_hash, row.approver) {
            (Some(h), Some(a)) => Some(ApprovalInfo {
                spec_hash: h,
                approver: Login::new(a),
            }),
            _ => None,
        })
    }

    async fn approve(&self, a: Approval) -> Result<u32, PortError> {
        let row = self.row(&a.experiment).await.map_err(port_error)?;
        let Some(row) = row else {
            return Err(PortError::UnknownExperiment(a.experiment));
        };
        if row.spec_hash != a.spec_hash {
            return Err(PortError::StaleHash {
                seen: a.spec_hash,
                current: row.spec_hash,
            });
        }
        Flow::approve(
            self,
            &a.experiment,
            &a.spec_hash,
            a.approver.as_str(),
            false,
        )
        .await
        .map(|q| q.position)
        .map_err(port_error)
    }

    async fn reject(
        &self,
        experiment: &ExperimentId,
        by: &Login,
        reason: &str,
    ) -> Result<(), PortError> {
        Flow::reject(self, experiment, by.as_str(), reason)
            .await
            .map(|_| ())
            .map_err(port_error)
    }

    async fn void_approval(
        &self,
        experiment: &ExperimentId,
        by: &Login,
        reason: &str,
    ) -> Result<Option<Voided>, PortError> {
        let voided = Flow::void_approval(self, experiment, by.as_str(), reason)
            .await
            .map_err(port_error)?;
        Ok(voided.map(|(approval, job)| Voided {
            approval,
            job: Some(match job.state {
                JobState::Queued | JobState::Held => Cancelled::Queued,
                _ => Cancelled::Running(job.run()),
            }),
        }))
    }

    async fn set_hold(
        &self,
        experiment: &ExperimentId,
        _by: &Login,
        held: bool,
    ) -> Result<(), PortError> {
        let job = self
            .inner
            .queue
            .latest_job_of(experiment)
            .await
            .map_err(|e| port_error(e.into()))?
            .ok_or_else(|| PortError::InvalidState("nothing is queued for this issue".into()))?;
        let r = if held {
            self.inner.queue.hold(job.id).await
        } else {
            self.inner.queue.unhold(job.id).await
        };
        r.map_err(|e| PortError::InvalidState(e.to_string()))
    }

    async fn cancel(&self, experiment: &ExperimentId, by: &Login) -> Result<Cancelled, PortError> {
        let job = self
            .job_to_cancel(experiment)
            .await
            .map_err(port_error)?
            .ok_or_else(|| PortError::InvalidState("nothing is queued or running".into()))?;
        match self
            .cancel_job(job.id, by.as_str())
            .await
            .map_err(port_error)?
        {
            CancelOutcome::Cancelled => Ok(Cancelled::Queued),
            CancelOutcome::Requested => Ok(Cancelled::Running(job.run())),
            CancelOutcome::AlreadyOver(s) => Err(PortError::InvalidState(format!(
                "the job already ended: {s}"
            ))),
        }
    }

    async fn rerun(&self, experiment: &ExperimentId, by: &Login) -> Result<u32, PortError> {
        Flow::rerun(self, experiment, by.as_str())
            .await
            .map(|q| q.position)
            .map_err(port_error)
    }

    async fn evaluate(
        &self,
        experiment: &ExperimentId,
        suite: &glassbox_schemas::eval::SuiteName,
        by: &Login,
    ) -> Result<(u32, u32), PortError> {
        self.queue_evaluation(experiment, suite, by.as_str())
            .await
            .map_err(port_error)
    }

    async fn reproduce(&self, experiment: &ExperimentId, by: &Login) -> Result<u32, PortError> {
        let job = self
            .inner
            .queue
            .latest_job_of(experiment)
            .await
            .map_err(|e| port_error(e.into()))?;
        let run = match job {
            Some(j) if j.state.is_terminal() && j.run_id.is_some() => j.run(),
            Some(j) => {
                return Err(PortError::InvalidState(format!(
                    "job {} is {}; a run can be reproduced once it has ended",
                    j.id, j.state
                )));
            }
            None => {
                return Err(PortError::InvalidState(
                    "nothing has run for this issue yet".into(),
                ));
            }
        };
        // A queued job like any other: a worker re-trains it and records the `reproduction`.
        self.queue_reproduction(experiment, &run, by.as_str())
            .await
            .map(|(_, position)| position)
            .map_err(port_error)
    }

    async fn status(
        &self,
        experiment: &ExperimentId,
    ) -> Result<Option<ExperimentStatus>, PortError> {
        Flow::status(self, experiment).await.map_err(port_error)
    }

    async fn annotate(&self, note: NoteRequest) -> Result<NoteRecorded, PortError> {
        Flow::annotate(self, note).await.map_err(port_error)
    }

    async fn queued_count(&self, author: &Login) -> Result<u32, PortError> {
        let n = self
            .inner
            .queue
            .waiting_jobs_of(author.as_str())
            .await
            .map_err(|e| port_error(e.into()))?;
        Ok(u32::try_from(n).unwrap_or(u32::MAX))
    }
}
