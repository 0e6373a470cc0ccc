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

use crate::cancel::CancelSwitches;
use crate::config::LabConfig;
use crate::db::proposals::{self, ProposalRow};
use crate::error::LabError;
use crate::queue::{Job, JobId, Queue};
use crate::recorder::Recorder;
use glassbox_github_bot::{IssueKey, IssueNumber, RepoName};
use glassbox_schemas::record::IssueRef;
use glassbox_schemas::spec::Forecast;
use glassbox_schemas::{BlobHash, ExperimentId, ExperimentSpec, SpecHash};
use std::sync::Arc;

pub mod after_run;
mod decide;
mod events;
mod jobs;
mod notes;
mod port;
mod propose;
mod rules;
pub mod sweep;

pub use sweep::{NewSweep, SweepRecorded};

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

    /// Loads a recorded spec by its hash.
    pub async fn spec(&self, hash: &SpecHash) -> Result<ExperimentSpec, LabError> {
        let h = BlobHash(hash.0);
        let bytes = self.blocking(move |rec| rec.get_bytes(&h)).await?;
        serde_json::from_slice(&bytes).map_err(|e| LabError::BadSpec {
            hash: hash.to_string(),
            reason: e.to_string(),
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
}

/// The issue an experiment is announced on: its own, or its sweep's for a sweep's child.
pub fn issue_key(experiment: &ExperimentId) -> Option<IssueKey> {
    let (repo, number) = experiment.issue_parts()?;
    Some(IssueKey {
        repo: RepoName::parse(repo)?,
        number: IssueNumber(number),
    })
}
