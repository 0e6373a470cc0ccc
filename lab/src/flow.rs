//! The flow: proposals and maintainers' decisions become ledger entries and queued jobs.
//!
//! [`Flow`] is the lab behind the bot's [`LabPort`]: a valid issue becomes a `proposal` entry
//! (with the spec stored as a blob whose hash *is* the spec hash, the TOML and the issue
//! snapshot as blobs beside it, and the form's forecast as a `forecast` entry); `/approve`
//! becomes an `approval` entry bound to that hash and a queued job; `/reject` a `rejection`
//! entry. Every transition is written to the ledger before anything is announced or queued,
//! and every call is idempotent where the bot may retry it (deliveries are at-least-once).
//! Local runs (`glassbox run`) take the same path with the local user as proposer and
//! approver, so a local run is on the record exactly like a GitHub one.
//!
//! The flow's state (which hash is current, which is approved) lives in the lab database
//! beside the jobs ([`crate::db::proposals`]); the ledger holds the record. This module does not train (workers do) and
//! does not speak to GitHub (the bot does, through [`crate::outbox`]).

use std::sync::Arc;

use crate::config::LabConfig;
use crate::db::proposals::{self, ProposalRow, Proposed};
use crate::db::{annotations, forecasts};
use crate::error::LabError;
use crate::outbox::{self, AlertNotice, Notice, NoticeDelivery};
use crate::queue::{CancelOutcome, Job, JobId, JobKind, JobState, NewJob, Queue};
use crate::recorder::Recorder;
use crate::worker::CancelSwitches;
use glassbox_github_bot::port::{
    Approval, ApprovalInfo, Cancelled, ExperimentState, ExperimentStatus, LabError as PortError,
    LabEvent, LabPort, NoteRecorded, NoteRequest, Proposal, ProposalRecorded, RunAlert,
    RunOutcome as PortOutcome, Voided, pick_note_run,
};
use glassbox_github_bot::{IssueKey, IssueNumber, Login, RepoName};
use glassbox_schemas::record::{
    AnnotationBody, ApprovalBody, ForecastBody, IssueRef, ProposalBody, RejectionBody, ResultBody,
    RunEnding, refs,
};
use glassbox_schemas::spec::Forecast;
use glassbox_schemas::{BlobHash, ExperimentId, ExperimentSpec, RunId, RunStatus, SpecHash};

/// A proposal to record.
#[derive(Debug, Clone)]
pub struct NewProposal {
    /// `<owner>/<repo>#<n>` for GitHub issues, `local/<slug>` for local runs.
    pub experiment: ExperimentId,
    /// The proposer.
    pub author: String,
    /// A title for people.
    pub title: String,
    /// The issue, when it came from GitHub.
    pub issue: Option<IssueRef>,
    /// The validated spec, defaults filled.
    pub spec: ExperimentSpec,
    /// The TOML as written, kept beside the canonical spec for people.
    pub spec_toml: Option<String>,
    /// The issue body as filed.
    pub snapshot: Option<String>,
    /// A forecast registered with the proposal (besides any in the spec itself).
    pub forecast: Option<Forecast>,
}

/// What recording a proposal did.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// The spec hash now current.
    pub spec_hash: SpecHash,
    /// The `proposal` entry (the existing one when the hash did not change).
    pub entry: u64,
    /// Whether a new entry was written.
    pub new: bool,
    /// An approval of the previous hash that this proposal voided.
    pub voided: Option<(SpecHash, String)>,
}

/// A queued job and where it stands.
#[derive(Debug, Clone, PartialEq)]
pub struct Queued {
    /// The job.
    pub job: JobId,
    /// 1 = next.
    pub position: u32,
    /// The `approval` entry.
    pub approval_entry: u64,
}

/// The lab's flow; cheap to clone.
#[derive(Debug, Clone)]
pub struct Flow {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) queue: Queue,
    pub(crate) recorder: Arc<Recorder>,
    pub(crate) config: LabConfig,
    switches: CancelSwitches,
    /// Base URL of the public dashboard, for proof links in comments.
    public_url: String,
}

impl Flow {
    /// A flow over `queue` and `recorder`, applying `config`.
    pub fn new(queue: Queue, recorder: Arc<Recorder>, config: LabConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                queue,
                recorder,
                config,
                switches: CancelSwitches::default(),
                public_url: "http://127.0.0.1:8080".into(),
            }),
        }
    }

    /// Sets the public base URL used in proof links (before sharing the flow).
    pub fn with_public_url(mut self, url: &str) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.public_url = url.trim_end_matches('/').to_string();
        }
        self
    }

    /// The cancel switches an in-process worker must share.
    pub fn switches(&self) -> CancelSwitches {
        self.inner.switches.clone()
    }

    /// The queue.
    pub fn queue(&self) -> &Queue {
        &self.inner.queue
    }

    /// The recorder.
    pub fn recorder(&self) -> &Arc<Recorder> {
        &self.inner.recorder
    }

    /// The configuration.
    pub fn config(&self) -> &LabConfig {
        &self.inner.config
    }

    async fn row(&self, experiment: &ExperimentId) -> Result<Option<ProposalRow>, LabError> {
        proposals::get(self.pool(), experiment).await
    }

    pub(crate) fn pool(&self) -> &sqlx::AnyPool {
        self.inner.queue.db().pool()
    }

    pub(crate) fn now(&self) -> i64 {
        self.inner.queue.db().now_ms()
    }

    pub(crate) async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Recorder) -> Result<T, LabError> + Send + 'static,
    ) -> Result<T, LabError> {
        let rec = self.inner.recorder.clone();
        tokio::task::spawn_blocking(move || f(&rec))
            .await
            .map_err(|e| LabError::Task(e.to_string()))?
    }

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
                let mut r = refs([("spec", spec_blob.0)]);
                if let Some(t) = &p.spec_toml {
                    r.insert("spec_toml".into(), rec.put_bytes(t.as_bytes())?.0);
                }
                if let Some(s) = &p.snapshot {
                    r.insert("issue".into(), rec.put_bytes(s.as_bytes())?.0);
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
            register_forecast(&self.inner.queue, &spec_hash, f, fe).await?;
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

    async fn proposal_entry(&self, experiment: &ExperimentId) -> Result<u64, LabError> {
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

    /// Loads a recorded spec by its hash.
    pub async fn spec(&self, hash: &SpecHash) -> Result<ExperimentSpec, LabError> {
        let h = BlobHash(hash.0);
        let bytes = self.blocking(move |rec| rec.get_bytes(&h)).await?;
        serde_json::from_slice(&bytes).map_err(|e| LabError::BadSpec {
            hash: hash.to_string(),
            reason: e.to_string(),
        })
    }

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

    async fn position(&self, job: &Job) -> Result<u32, LabError> {
        Ok(self
            .inner
            .queue
            .position(job.id)
            .await?
            .map_or(0, |p| p as u32 + 1))
    }

    /// What in `spec` is over the lab's limits (FLOPs, wall clock, memory, metric volume) or
    /// names corpora no `dataset` entry declares: listed in the bot's validation comment when
    /// the proposal is recorded, and refused at approval ([`Flow::check_limits`]).
    pub async fn spec_limit_problems(
        &self,
        spec: &ExperimentSpec,
    ) -> Result<Vec<String>, LabError> {
        let limits = &self.inner.config.limits;
        let cost = glassbox_schemas::estimate(spec);
        let mut problems = Vec::new();
        if cost.total_flops > limits.max_flops_per_proposal {
            problems.push(format!(
                "it needs about {:.3e} FLOPs; the lab's limit per proposal is {:.3e} (limits.max_flops_per_proposal)",
                cost.total_flops, limits.max_flops_per_proposal
            ));
        }
        if let Some(w) = spec.budget.max_wall_seconds
            && w > limits.max_wall_seconds as f64
        {
            problems.push(format!(
                "budget.max_wall_seconds = {w} is over the lab's limit of {} (limits.max_wall_seconds)",
                limits.max_wall_seconds
            ));
        }
        problems.extend(crate::limits::spec_problems(limits, spec));
        problems.extend(self.undeclared_corpora(spec).await?);
        Ok(problems)
    }

    /// The lab's budget and quota rules for approving `spec` by `author`: the spec's own
    /// limits ([`Flow::spec_limit_problems`]) and the author's open jobs.
    async fn check_limits(
        &self,
        spec: &ExperimentSpec,
        author: &str,
        local: bool,
    ) -> Result<(), LabError> {
        let limits = &self.inner.config.limits;
        let mut problems = self.spec_limit_problems(spec).await?;
        if !local {
            let open = self.inner.queue.open_jobs_of(author).await?;
            if open >= limits.max_open_per_author {
                problems.push(format!(
                    "{author} already has {open} approved runs waiting or running; the limit is {} (limits.max_open_per_author)",
                    limits.max_open_per_author
                ));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(LabError::Refused(problems.join("; ")))
        }
    }

    /// The lab's rules for recording a proposal at all (issue 16): a forecast must name a
    /// metric the spec's run reports, and an author may cause at most
    /// `limits.max_proposals_per_author_per_day` proposal entries from GitHub in 24 hours.
    async fn check_proposal(&self, p: &NewProposal) -> Result<(), LabError> {
        let forecasts = p.forecast.iter().chain(p.spec.forecast.iter());
        let problems: Vec<String> = forecasts
            .filter_map(|f| glassbox_schemas::metrics::forecast_metric_problem(&p.spec, &f.metric))
            .collect();
        if !problems.is_empty() {
            return Err(LabError::Refused(problems.join("; ")));
        }
        if p.issue.is_none() {
            return Ok(());
        }
        self.check_daily_proposals(&p.author).await
    }

    /// Refuses when `author` already caused `limits.max_proposals_per_author_per_day` proposal
    /// entries in the last 24 hours.
    pub(crate) async fn check_daily_proposals(&self, author: &str) -> Result<(), LabError> {
        let max = self.inner.config.limits.max_proposals_per_author_per_day;
        let since = self.now() - DAY_MS;
        let n = proposals::entries_since(self.pool(), author, since).await?;
        if n >= u64::from(max) {
            return Err(LabError::Refused(format!(
                "{author} has made {n} proposals in the last 24 hours; the limit is {max} (limits.max_proposals_per_author_per_day); try again later"
            )));
        }
        Ok(())
    }

    /// Counts a proposal entry against its author's daily limit.
    pub(crate) async fn count_proposal_entry(
        &self,
        author: &str,
        experiment: &ExperimentId,
        entry: u64,
    ) -> Result<(), LabError> {
        proposals::count_entry(self.pool(), author, experiment, entry, self.now()).await
    }

    /// Every corpus of the mixture must be one a `dataset` entry declares (a checkpoint or any
    /// other blob is not a corpus); one problem per component that names another blob. A
    /// stored tokenizer must be declared too, with the spec's `model.vocab` as its size.
    async fn undeclared_corpora(&self, spec: &ExperimentSpec) -> Result<Vec<String>, LabError> {
        let named: Vec<(usize, BlobHash)> = spec
            .data
            .mixture
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.corpus.map(|h| (i, h)))
            .collect();
        if named.is_empty() && spec.data.tokenizer.stored().is_none() {
            return Ok(Vec::new());
        }
        let spec = spec.clone();
        self.blocking(move |rec| {
            // A stored tokenizer must be in the lab, and `model.vocab` must be its size.
            let mut out: Vec<String> = crate::tokens::vocab_problem(rec, &spec)?
                .into_iter()
                .collect();
            for (i, hash) in named {
                if rec.dataset_entry(&hash)?.is_none() {
                    out.push(format!(
                        "data.mixture[{i}].corpus = {hash}: no `dataset` entry of this lab declares it; only corpora added with `glassbox data import` or `glassbox data generate` can be trained on"
                    ));
                }
            }
            Ok(out)
        })
        .await
    }

    /// An approval entry of `spec_hash` written after the current proposal (`since`) that has
    /// no job: its job was never queued (a crash in between), so a retried `/approve` uses it
    /// rather than writing a second approval.
    async fn unqueued_approval(
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
    async fn repair_approved_row(
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
    async fn job_to_cancel(&self, experiment: &ExperimentId) -> Result<Option<Job>, LabError> {
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

    /// Records a local proposal and its approval by the same person and queues it: the path
    /// of `glassbox run`.
    pub async fn submit_local(
        &self,
        spec: ExperimentSpec,
        spec_toml: Option<String>,
        user: &str,
    ) -> Result<(Recorded, Queued), LabError> {
        let experiment = ExperimentId(format!("local/{}", spec.experiment.slug));
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
    async fn cancel_on_record(&self, job: &Job, reason: &str) -> Result<CancelOutcome, LabError> {
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
                ..
            } => LabEvent::Finished {
                issue,
                result: PortOutcome {
                    run: run.clone(),
                    ending: ending.clone(),
                    forecast: forecast.clone(),
                    ledger_index: *entry,
                    proof_url: format!("{}/api/v1/entries/{entry}/proof", self.inner.public_url),
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

impl Flow {
    /// Records a `/note` as an `annotation` entry: the run must be one of the experiment's (or,
    /// named by none, its only run), the author under `limits.max_notes_per_author_per_hour`;
    /// a note from a comment that already gave one supersedes the last such note.
    pub async fn annotate(&self, note: NoteRequest) -> Result<NoteRecorded, LabError> {
        let refuse = |e: PortError| LabError::Refused(e.to_string());
        let max = self.inner.config.limits.max_notes_per_author_per_hour;
        let written =
            annotations::count_since(self.pool(), note.author.as_str(), self.now() - HOUR_MS)
                .await?;
        if written >= u64::from(max) {
            return Err(LabError::Refused(format!(
                "{} has written {written} notes in the last hour; the limit is {max} (limits.max_notes_per_author_per_hour); try again later",
                note.author
            )));
        }
        let experiment = note.experiment.clone();
        let named = note.run.clone();
        let (runs, owner) = self
            .blocking(move |rec| {
                let runs = rec.runs_of(&experiment)?;
                let owner = match &named {
                    Some(r) => rec.experiment_of_run(r)?,
                    None => None,
                };
                Ok((runs, owner))
            })
            .await?;
        let run =
            pick_note_run(&note.experiment, &runs, note.run.as_ref(), || owner).map_err(refuse)?;
        let supersedes = annotations::latest_for_url(self.pool(), &note.url).await?;
        let body = AnnotationBody {
            run: run.clone(),
            author: note.author.as_str().to_string(),
            role: note.role,
            from_step: note.from_step,
            to_step: note.to_step,
            text: note.text.clone(),
            url: note.url.clone(),
            supersedes,
        };
        let experiment = note.experiment.clone();
        let entry = self
            .blocking(move |rec| rec.record(Some(&experiment), Default::default(), body))
            .await?;
        annotations::insert(
            self.pool(),
            &annotations::NoteRow {
                entry,
                author: note.author.as_str(),
                experiment: &note.experiment.0,
                run: &run.0,
                url: &note.url,
                created_at: self.now(),
            },
        )
        .await?;
        Ok(NoteRecorded {
            run,
            entry,
            supersedes,
        })
    }
}

/// An hour in milliseconds (the per-author note window).
const HOUR_MS: i64 = 60 * 60 * 1000;

/// 24 hours in milliseconds (the per-author proposal window).
const DAY_MS: i64 = 24 * 60 * 60 * 1000;

/// `<owner>/<repo>#<n>` as an issue, when it is one; a sweep child `<owner>/<repo>#<n>/<i>`
/// is announced on its sweep's issue.
pub fn issue_key(experiment: &ExperimentId) -> Option<IssueKey> {
    let (repo, n) = experiment.0.rsplit_once('#')?;
    let n = match n.split_once('/') {
        Some((n, child)) if !child.is_empty() && child.bytes().all(|b| b.is_ascii_digit()) => n,
        _ => n,
    };
    Some(IssueKey {
        repo: RepoName::parse(repo)?,
        number: IssueNumber(n.parse().ok()?),
    })
}

/// Remembers a forecast entry so the worker can compare it with the result.
pub async fn register_forecast(
    queue: &Queue,
    spec_hash: &SpecHash,
    f: &Forecast,
    entry: u64,
) -> Result<(), LabError> {
    forecasts::insert(queue.db().pool(), spec_hash, f, entry).await
}

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
            .propose_sweep(crate::sweep::NewSweep {
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
