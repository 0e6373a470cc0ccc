//! Proposals: a valid spec becomes a `proposal` entry with its blobs (the spec stored under
//! its own hash, the TOML, the issue snapshot) and its forecast; a changed spec replaces the
//! waiting job of the old one.
//!
//! Not here: the rules a proposal must pass (`rules`) or decisions on it (`decide`).

use crate::db::proposals::{self, Proposed};
use crate::error::LabError;
use crate::queue::{JobId, JobState};
use glassbox_schemas::ExperimentId;
use glassbox_schemas::RefRole;
use glassbox_schemas::record::{ForecastBody, ProposalBody, refs};

use super::*;

impl Flow {
    /// Records a proposal. The same hash again is a no-op; a new hash writes a new entry and
    /// voids a waiting approval of the old one (its job leaves the queue). A rejection is kept
    /// across edits: only an approval lifts it.
    pub async fn propose(&self, p: NewProposal) -> Result<Recorded, LabError> {
        self.propose_with(p, None).await
    }

    /// [`Flow::propose`], for a sweep's child when `sweep` links it: the link goes in the entry,
    /// and the entry is not counted against the author's daily limit (the sweep was, once).
    pub(crate) async fn propose_with(
        &self,
        p: NewProposal,
        sweep: Option<glassbox_schemas::record::SweepLink>,
    ) -> Result<Recorded, LabError> {
        let child = sweep.is_some();
        let spec_hash = glassbox_schemas::spec_hash(&p.spec).map_err(|e| LabError::BadSpec {
            hash: "?".into(),
            reason: e.to_string(),
        })?;
        let existing = self.row(&p.experiment).await?;
        if let Some(row) = &existing
            && row.spec_hash == spec_hash
        {
            let entry = self.proposal_entry(&p.experiment).await?;
            return Ok(Recorded {
                spec_hash,
                entry,
                new: false,
                voided: None,
            });
        }
        if !child {
            self.check_proposal(&p).await?;
        }
        let canonical = glassbox_schemas::canonical::spec_canonical_json(&p.spec).map_err(|e| {
            LabError::BadSpec {
                hash: spec_hash.to_string(),
                reason: e.to_string(),
            }
        })?;
        let experiment = p.experiment.clone();
        let body = ProposalBody {
            spec_hash,
            author: p.author.clone(),
            title: p.title.clone(),
            issue: p.issue.clone(),
            sweep,
        };
        let forecast = p.forecast.clone();
        let (entry, forecast_entry) = self
            .blocking(move |rec| {
                let spec_blob = rec.put_bytes(&canonical)?;
                debug_assert_eq!(spec_blob.0, spec_hash.0);
                let mut r = refs([(RefRole::Spec, spec_blob.0)]);
                if let Some(t) = &p.spec_toml {
                    r.insert(
                        RefRole::SpecToml.as_str().into(),
                        rec.put_bytes(t.as_bytes())?.0,
                    );
                }
                if let Some(s) = &p.snapshot {
                    r.insert(
                        RefRole::Issue.as_str().into(),
                        rec.put_bytes(s.as_bytes())?.0,
                    );
                }
                let mut entries = vec![glassbox_schemas::LedgerEntry::new(
                    Some(experiment.clone()),
                    r,
                    body,
                )];
                if let Some(f) = &forecast {
                    entries.push(glassbox_schemas::LedgerEntry::new(
                        Some(experiment.clone()),
                        Default::default(),
                        ForecastBody {
                            spec_hash,
                            metric: f.metric.clone(),
                            value: f.value,
                            tolerance: f.tolerance,
                            method: "author".into(),
                            details: serde_json::Value::Null,
                        },
                    ));
                }
                let idx = rec.append(&entries)?;
                Ok((idx[0], idx.get(1).copied()))
            })
            .await?;
        if let (Some(f), Some(fe)) = (&p.forecast, forecast_entry) {
            crate::forecast::register(&self.inner.queue, &spec_hash, f, fe).await?;
        }
        if !child {
            self.count_proposal_entry(&p.author, &p.experiment, entry)
                .await?;
        }
        let proposed = Proposed {
            experiment: &p.experiment,
            spec_hash: &spec_hash,
            author: &p.author,
            title: &p.title,
            entry,
        };
        proposals::set_proposed(self.pool(), &proposed, self.now()).await?;
        let mut voided = None;
        if let Some(row) = existing
            && let (Some(h), Some(by)) = (row.approved_hash, row.approver)
            && h != spec_hash
        {
            self.drop_waiting_job(&p.experiment, "its spec changed after approval")
                .await?;
            voided = Some((h, by));
        }
        Ok(Recorded {
            spec_hash,
            entry,
            new: true,
            voided,
        })
    }

    pub(super) async fn proposal_entry(&self, experiment: &ExperimentId) -> Result<u64, LabError> {
        proposals::entry_of(self.pool(), experiment).await
    }

    /// Cancels the experiment's job if it is still waiting (queued or held).
    pub(crate) async fn drop_waiting_job(
        &self,
        experiment: &ExperimentId,
        why: &str,
    ) -> Result<Option<JobId>, LabError> {
        match self.inner.queue.latest_job_of(experiment).await? {
            Some(job) if matches!(job.state, JobState::Queued | JobState::Held) => {
                self.cancel_on_record(&job, why).await?;
                Ok(Some(job.id))
            }
            _ => Ok(None),
        }
    }
}
