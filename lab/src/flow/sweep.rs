//! Sweeps in the lab: one proposal of many children, one approval of the set, and the
//! promotion gate decided when the children end.
//!
//! [`Flow::propose_sweep`] records a `sweep` entry at the sweep's experiment (the issue; the
//! file as written is `refs.sweep_toml`) listing every child, then proposes each child as an
//! ordinary experiment `<sweep>/<i>` whose `proposal` links back ([`SweepLink`]). The same file
//! again is a no-op; any edit writes a new `sweep` entry and voids the set's approval: every
//! waiting child job leaves the queue, and an `/approve` of the old hash is refused.
//!
//! [`Flow::approve_sweep`] approves the set bound to the sweep file's hash: the total FLOPs must
//! fit `limits.max_flops_per_sweep` and every child the per-spec limits (all are checked before
//! any is queued); each child then gets its own `approval` entry carrying that hash, and a job.
//! The set counts once against the author's daily proposal limit and is not held to the
//! per-author open-job limit child by child.
//!
//! [`decide_gate`] runs after each child's job ends: once every child's latest job is over, the
//! first process to claim the sweep's row records one `gate` entry — the best child's final
//! value of the gate's metric against the newest succeeded run of the experiment whose slug the
//! gate names — and announces it on the issue.
//!
//! Not here: parsing and expanding the file (`glassbox_schemas::sweep`), or running children
//! (they are ordinary jobs).

use glassbox_schemas::RefRole;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use glassbox_schemas::record::{
    EntryBody, GateBody, GateOutcome, GateSide, IssueRef, SweepBody, SweepLink, SweepMember, refs,
};
use glassbox_schemas::sweep::{Direction, Sweep};
use glassbox_schemas::{BlobHash, ExperimentId, ExperimentSpec, RunStatus, SpecHash};

use crate::db::sweeps;
use crate::error::LabError;
use crate::flow::{Flow, NewProposal, Queued};
use crate::outbox::{self, Notice};
use crate::queue::Queue;
use crate::recorder::Recorder;

/// A sweep to record.
#[derive(Debug, Clone)]
pub struct NewSweep {
    /// The sweep's experiment (`<owner>/<repo>#<n>`, or `local/<slug>`).
    pub experiment: ExperimentId,
    /// The proposer.
    pub author: String,
    /// A title for people.
    pub title: String,
    /// The issue, when it came from GitHub.
    pub issue: Option<IssueRef>,
    /// The expanded, validated sweep.
    pub sweep: Sweep,
    /// The file as written.
    pub toml: String,
}

/// What recording a sweep did.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepRecorded {
    /// The sweep file's hash now current.
    pub parent_hash: SpecHash,
    /// The `sweep` entry (the existing one when the file did not change).
    pub entry: u64,
    /// Whether new entries were written.
    pub new: bool,
    /// The children: experiment, spec hash, FLOPs.
    pub children: Vec<SweepMember>,
    /// Total FLOPs.
    pub total_flops: f64,
    /// Waiting child jobs that the edit took out of the queue.
    pub voided: Vec<ExperimentId>,
}

impl Flow {
    /// Records a sweep and proposes its children ([module docs](self)).
    pub async fn propose_sweep(&self, s: NewSweep) -> Result<SweepRecorded, LabError> {
        let existing = sweeps::get(self.pool(), &s.experiment).await?;
        if let Some(row) = &existing
            && row.parent_hash == s.sweep.parent_hash
        {
            return Ok(SweepRecorded {
                parent_hash: row.parent_hash,
                entry: row.entry,
                new: false,
                children: row.body.children.clone(),
                total_flops: row.body.total_flops,
                voided: Vec::new(),
            });
        }
        if s.issue.is_some() {
            self.check_daily_proposals(&s.author).await?;
        }
        let mut children = Vec::new();
        for c in &s.sweep.children {
            let spec_hash =
                glassbox_schemas::spec_hash(&c.spec).map_err(|e| LabError::BadSpec {
                    hash: "?".into(),
                    reason: e.to_string(),
                })?;
            children.push(SweepMember {
                experiment: s.experiment.child(c.index),
                spec_hash,
                values: glassbox_schemas::sweep::describe(&c.values),
                flops: glassbox_schemas::estimate(&c.spec).total_flops,
            });
        }
        let total_flops = children.iter().map(|c| c.flops).sum();
        let body = SweepBody {
            parent_hash: s.sweep.parent_hash,
            author: s.author.clone(),
            title: s.title.clone(),
            mode: s.sweep.mode,
            metric: s.sweep.metric.clone(),
            direction: s.sweep.direction,
            gate: s.sweep.gate.clone(),
            children: children.clone(),
            total_flops,
        };
        let (experiment, toml, b) = (s.experiment.clone(), s.toml.clone(), body.clone());
        let entry = self
            .blocking(move |rec| {
                let r = refs([(RefRole::SweepToml, rec.put_bytes(toml.as_bytes())?.0)]);
                rec.record(Some(&experiment), r, b)
            })
            .await?;
        self.count_proposal_entry(&s.author, &s.experiment, entry)
            .await?;
        // Any edit voids the set's approval: every waiting child job of the old sweep goes.
        let mut voided = Vec::new();
        if let Some(old) = &existing {
            for c in &old.body.children {
                if self
                    .drop_waiting_job(&c.experiment, "its sweep changed after approval")
                    .await?
                    .is_some()
                {
                    voided.push(c.experiment.clone());
                }
            }
        }
        for (c, member) in s.sweep.children.iter().zip(&children) {
            self.propose_with(
                NewProposal {
                    experiment: member.experiment.clone(),
                    author: s.author.clone(),
                    title: format!("{} [{}]", s.title, member.values),
                    issue: s.issue.clone(),
                    spec: c.spec.clone(),
                    spec_toml: None,
                    snapshot: None,
                    forecast: None,
                },
                Some(SweepLink {
                    parent: s.experiment.clone(),
                    parent_hash: s.sweep.parent_hash,
                    index: c.index as u32,
                    values: member.values.clone(),
                }),
            )
            .await?;
        }
        sweeps::set_proposed(self.pool(), &s.experiment, &body, entry, self.now()).await?;
        Ok(SweepRecorded {
            parent_hash: s.sweep.parent_hash,
            entry,
            new: true,
            children,
            total_flops,
            voided,
        })
    }

    /// Approves every child of the sweep at `experiment`, bound to `parent_hash` (the hash
    /// the approver saw): refused when the file changed since, or when the set is over the
    /// lab's limits (nothing is queued then). Approving again returns the same jobs.
    pub async fn approve_sweep(
        &self,
        experiment: &ExperimentId,
        parent_hash: &SpecHash,
        approver: &str,
    ) -> Result<Vec<Queued>, LabError> {
        let row = sweeps::get(self.pool(), experiment)
            .await?
            .ok_or_else(|| LabError::Refused(format!("no sweep is recorded for {experiment}")))?;
        if &row.parent_hash != parent_hash {
            return Err(LabError::Refused(format!(
                "the sweep changed: approved {parent_hash}, but the current sweep is {}",
                row.parent_hash
            )));
        }
        let limits = &self.inner.config.limits;
        let mut problems = Vec::new();
        if row.body.total_flops > limits.max_flops_per_sweep {
            problems.push(format!(
                "the sweep's {} children need {:.3e} FLOPs in all; the limit is {:.3e} (limits.max_flops_per_sweep)",
                row.body.children.len(),
                row.body.total_flops,
                limits.max_flops_per_sweep
            ));
        }
        for c in &row.body.children {
            let spec = self.spec(&c.spec_hash).await?;
            for p in self.spec_limit_problems(&spec).await? {
                problems.push(format!("child {} ({}): {p}", c.experiment, c.values));
            }
        }
        if !problems.is_empty() {
            return Err(LabError::Refused(problems.join("; ")));
        }
        let mut queued = Vec::new();
        for c in &row.body.children {
            queued.push(
                self.approve_with(
                    &c.experiment,
                    &c.spec_hash,
                    approver,
                    false,
                    Some(*parent_hash),
                )
                .await?,
            );
        }
        sweeps::set_approved(self.pool(), experiment, parent_hash, approver, self.now()).await?;
        Ok(queued)
    }

    /// The sweep recorded at `experiment`: its `sweep` entry's body, that entry, and the
    /// approved hash, if any.
    pub async fn sweep(
        &self,
        experiment: &ExperimentId,
    ) -> Result<Option<(SweepBody, u64, Option<SpecHash>)>, LabError> {
        Ok(sweeps::get(self.pool(), experiment)
            .await?
            .map(|r| (r.body, r.entry, r.approved_hash)))
    }
}

/// After a job of `child` ended: when `child` is a sweep's and every child's latest job is over,
/// records the sweep's `gate` entry once (when the sweep names a gate) and announces it.
/// Returns the entry when this call recorded it.
pub async fn decide_gate(
    queue: &Queue,
    rec: &Arc<Recorder>,
    child: &ExperimentId,
) -> Result<Option<u64>, LabError> {
    let Some(sweep) = child.sweep() else {
        return Ok(None);
    };
    let pool = queue.db().pool();
    let Some(row) = sweeps::get(pool, &sweep).await? else {
        return Ok(None);
    };
    let Some(gate) = row.body.gate.clone() else {
        return Ok(None);
    };
    if row.gate_entry.is_some() || row.approved_hash != Some(row.parent_hash) {
        return Ok(None);
    }
    for c in &row.body.children {
        match queue.latest_job_of(&c.experiment).await? {
            Some(j) if j.state.is_terminal() && j.spec_hash == c.spec_hash => {}
            _ => return Ok(None),
        }
    }
    let now = queue.db().now_ms();
    if !sweeps::claim_gate(pool, &sweep, &row.parent_hash, now).await? {
        return Ok(None);
    }
    let decided = {
        let (rec, body, sweep) = (rec.clone(), row.body.clone(), sweep.clone());
        tokio::task::spawn_blocking(move || gate_body(&rec, &sweep, &body))
            .await
            .map_err(|e| LabError::Task(e.to_string()))
            .and_then(|r| r)
    };
    let body = match decided {
        Ok(b) => b,
        Err(e) => {
            sweeps::release_gate(pool, &sweep).await?;
            return Err(e);
        }
    };
    let (outcome, detail) = (body.outcome, body.detail.clone());
    let recorded = {
        let (rec, sweep) = (rec.clone(), sweep.clone());
        tokio::task::spawn_blocking(move || rec.record(Some(&sweep), Default::default(), body))
            .await
            .map_err(|e| LabError::Task(e.to_string()))
            .and_then(|r| r)
    };
    let entry = match recorded {
        Ok(e) => e,
        Err(e) => {
            sweeps::release_gate(pool, &sweep).await?;
            return Err(e);
        }
    };
    let word = match outcome {
        GateOutcome::Passed => "passed",
        GateOutcome::Failed => "failed",
    };
    sweeps::set_gate(pool, &sweep, word, entry, queue.db().now_ms()).await?;
    outbox::push(
        queue,
        &Notice::Gate {
            experiment: sweep.clone(),
            outcome,
            detail,
            entry,
        },
    )
    .await?;
    tracing::info!(%sweep, entry, gate = %gate.beats, outcome = word, "sweep gate decided");
    Ok(Some(entry))
}

/// The gate's decision from the record: the children's final values against the newest
/// succeeded run of the experiment whose spec's slug is the gate's `beats`.
fn gate_body(rec: &Recorder, sweep: &ExperimentId, body: &SweepBody) -> Result<GateBody, LabError> {
    let gate = body
        .gate
        .clone()
        .ok_or_else(|| LabError::Refused(format!("the sweep {sweep} names no gate")))?;
    let children: HashMap<&ExperimentId, &SweepMember> =
        body.children.iter().map(|c| (&c.experiment, c)).collect();
    // The newest succeeded result of each child (of its current spec) and of each experiment
    // whose spec is the baseline's slug.
    let mut child_values: BTreeMap<ExperimentId, GateSide> = BTreeMap::new();
    let mut baseline: Option<GateSide> = None;
    let mut slugs: HashMap<SpecHash, Option<String>> = HashMap::new();
    let mut slug_of = |h: &SpecHash| -> Option<String> {
        slugs
            .entry(*h)
            .or_insert_with(|| {
                rec.get_bytes(&BlobHash(h.0))
                    .ok()
                    .and_then(|b| serde_json::from_slice::<ExperimentSpec>(&b).ok())
                    .map(|s| s.experiment.slug)
            })
            .clone()
    };
    rec.for_each_entry(|_, e| {
        let EntryBody::Result(r) = &e.body else {
            return;
        };
        if r.ending.status != RunStatus::Succeeded {
            return;
        }
        let Some(exp) = &e.experiment else { return };
        let Some(&value) = r.ending.final_metrics.get(&gate.metric) else {
            return;
        };
        let side = GateSide {
            experiment: exp.clone(),
            run: r.run.clone(),
            value,
        };
        if let Some(c) = children.get(exp) {
            if c.spec_hash == r.spec_hash {
                child_values.insert(exp.clone(), side);
            }
        } else if slug_of(&r.spec_hash).as_deref() == Some(gate.beats.as_str()) {
            baseline = Some(side);
        }
    })?;
    let better = |a: f64, b: f64| glassbox_ledger::board::better(body.direction, a, b);
    let best = child_values
        .into_values()
        .reduce(|a, b| if better(b.value, a.value) { b } else { a });
    let (outcome, detail) = match (&best, &baseline) {
        (None, _) => (
            GateOutcome::Failed,
            format!(
                "no child of the sweep succeeded with {}; nothing to promote",
                gate.metric
            ),
        ),
        (Some(_), None) => (
            GateOutcome::Failed,
            format!(
                "no succeeded run of the baseline `{}` reports {}; the gate cannot pass without one",
                gate.beats, gate.metric
            ),
        ),
        (Some(b), Some(base)) => {
            let gain = match body.direction {
                Direction::Min => base.value - b.value,
                Direction::Max => b.value - base.value,
            };
            let passed = gain > 0.0 && gain >= gate.by;
            let verb = if passed { "beat" } else { "did not beat" };
            (
                if passed {
                    GateOutcome::Passed
                } else {
                    GateOutcome::Failed
                },
                format!(
                    "the best child {} ({} = {}) {verb} the baseline `{}` ({}) by {} (improvement {gain:.6})",
                    b.experiment, gate.metric, b.value, gate.beats, base.value, gate.by
                ),
            )
        }
    };
    Ok(GateBody {
        sweep: sweep.clone(),
        parent_hash: body.parent_hash,
        metric: gate.metric.clone(),
        direction: body.direction,
        beats: gate.beats.clone(),
        by: gate.by,
        outcome,
        baseline,
        best,
        detail,
    })
}
