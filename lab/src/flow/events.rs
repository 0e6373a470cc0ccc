//! What the bot hears: an experiment's status, each outbox notice translated into the bot's
//! [`LabEvent`], and the delivery loop that hands them over in order.
//!
//! Not here: writing notices (`crate::outbox`) or rendering them (the bot).

use crate::error::LabError;
use crate::outbox::{self, AlertNotice, Notice, NoticeDelivery};
use crate::queue::JobState;
use glassbox_github_bot::Login;
use glassbox_github_bot::port::{
    ApprovalInfo, ExperimentState, ExperimentStatus, LabEvent, RunAlert, RunResult,
};
use glassbox_schemas::{ExperimentId, RunStatus};

use super::*;

impl Flow {
    /// Where an experiment stands, for `/status` and the bot.
    pub async fn status(
        &self,
        experiment: &ExperimentId,
    ) -> Result<Option<ExperimentStatus>, LabError> {
        let Some(row) = self.row(experiment).await? else {
            return Ok(None);
        };
        let job = self.inner.queue.latest_job_of(experiment).await?;
        let approval = match (&row.approved_hash, &row.approver) {
            (Some(h), Some(a)) if *h == row.spec_hash => Some(ApprovalInfo {
                spec_hash: *h,
                approver: Login::new(a.clone()),
            }),
            _ => None,
        };
        let state = if let Some(reason) = row.rejected_reason {
            ExperimentState::Rejected { reason }
        } else {
            match job {
                None => ExperimentState::Proposed,
                Some(j) => match j.state {
                    JobState::Queued => ExperimentState::Queued {
                        position: self.position(&j).await?,
                    },
                    JobState::Held => ExperimentState::Held,
                    JobState::Leased | JobState::Running => {
                        ExperimentState::Running { run: j.run() }
                    }
                    JobState::Ended(RunStatus::Cancelled) => ExperimentState::Cancelled,
                    JobState::Ended(status) => ExperimentState::Finished { status },
                },
            }
        };
        Ok(Some(ExperimentStatus {
            spec_hash: row.spec_hash,
            state,
            approval,
        }))
    }

    /// Converts an outbox notice into the bot's event; `None` for experiments that did not
    /// come from a GitHub issue (local runs).
    pub fn lab_event(&self, notice: &Notice) -> Option<LabEvent> {
        let issue = issue_key(notice.experiment())?;
        Some(match notice {
            Notice::RunStarted { run, spec_hash, .. } => LabEvent::RunStarted {
                issue,
                run: run.clone(),
                spec_hash: *spec_hash,
            },
            Notice::Finished {
                run,
                ending,
                forecast,
                entry,
                sample,
                ..
            } => LabEvent::Finished {
                issue,
                result: RunResult {
                    run: run.clone(),
                    ending: ending.clone(),
                    forecast: forecast.clone(),
                    ledger_index: *entry,
                    proof_url: format!("{}/api/v1/entries/{entry}/proof", self.inner.public_url),
                    sample: sample.clone(),
                },
            },
            Notice::Alert { run, alert, .. } => LabEvent::Alert {
                issue,
                run: run.clone(),
                alert: match alert {
                    AlertNotice::Anomaly { anomaly, entry } => RunAlert::Anomaly {
                        anomaly: anomaly.clone(),
                        ledger_index: *entry,
                    },
                    AlertNotice::Stalled {
                        last_step,
                        silent_ms,
                        median_step_ms,
                    } => RunAlert::Stalled {
                        last_step: *last_step,
                        silent_seconds: *silent_ms as f64 / 1000.0,
                        median_step_seconds: *median_step_ms as f64 / 1000.0,
                    },
                },
            },
            Notice::Reproduced {
                run,
                outcome,
                detail,
                comparison,
                worker,
                automatic,
                entry,
                ..
            } => LabEvent::Reproduced {
                issue,
                run: run.clone(),
                outcome: outcome.clone(),
                detail: detail.clone(),
                comparison: comparison.map(|c| match c {
                    glassbox_schemas::record::Comparison::Bitwise => "bitwise".to_string(),
                    glassbox_schemas::record::Comparison::Tolerance => "tolerance".to_string(),
                }),
                worker: worker.clone(),
                automatic: *automatic,
                ledger_index: *entry,
            },
            Notice::Evaluated {
                run,
                headline,
                outcome,
                contamination,
                entry,
                ..
            } => LabEvent::Evaluated {
                issue,
                run: run.clone(),
                headline: headline.clone(),
                outcome: outcome.to_string(),
                contamination: *contamination,
                ledger_index: *entry,
            },
            Notice::Gate {
                outcome,
                detail,
                entry,
                ..
            } => LabEvent::Gate {
                issue,
                passed: *outcome == glassbox_schemas::record::GateOutcome::Passed,
                detail: detail.clone(),
                ledger_index: *entry,
            },
        })
    }

    /// Delivers the due notices through `deliver` (the bot), each on its own: a delivered one
    /// is marked delivered, one that failed ([`NoticeDelivery::Retry`], or `false`) waits its
    /// backoff ([`outbox::retry_later`]) while other experiments' notices still go out (its own
    /// later ones wait behind it, to stay in order), and one that cannot succeed
    /// ([`NoticeDelivery::GiveUp`]) is not tried again. Returns how many were delivered.
    pub async fn deliver_notices<F, Fut, O>(&self, mut deliver: F) -> Result<usize, LabError>
    where
        F: FnMut(LabEvent) -> Fut,
        Fut: std::future::Future<Output = O>,
        O: Into<NoticeDelivery>,
    {
        let mut n = 0;
        // Experiments whose notice failed this round: their later notices wait, in order.
        let mut held = std::collections::HashSet::new();
        for p in outbox::due(&self.inner.queue, 100).await? {
            if held.contains(p.notice.experiment()) {
                continue;
            }
            let outcome = match self.lab_event(&p.notice) {
                Some(event) => deliver(event).await.into(),
                None => NoticeDelivery::Delivered,
            };
            match outcome {
                NoticeDelivery::Delivered => {
                    outbox::delivered(&self.inner.queue, p.id).await?;
                    n += 1;
                }
                NoticeDelivery::Retry(error) => {
                    held.insert(p.notice.experiment().clone());
                    let wait = outbox::retry_later(&self.inner.queue, p.id, &error).await?;
                    tracing::warn!(notice = p.id, %error, ?wait, "notice not delivered; will retry");
                }
                NoticeDelivery::GiveUp(error) => {
                    outbox::give_up(&self.inner.queue, p.id, &error).await?;
                    tracing::error!(notice = p.id, %error, "notice given up");
                }
            }
        }
        Ok(n)
    }
}
