//! Ledger records: the entry envelope every log leaf holds, and the typed body of each kind.
//!
//! An entry is canonical JSON (RFC 8785) of at most [`MAX_ENTRY_BYTES`]:
//! `{"v":1,"kind":...,"experiment":...,"time":RFC3339,"refs":{name: blake3 hash},"body":{...}}`.
//! `refs` names the blobs the entry vouches for (spec, metrics, checkpoint, ...); the blob bytes
//! live in the blob store and are re-hashed by `glassbox verify`. Large content never goes in an
//! entry: it goes in a blob and is referenced by hash.
//!
//! This module defines what a record says. It does not know how the log stores or proves it
//! (that is `glassbox-ledger`), nor who writes which record when (that is `glassbox-lab`).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::canonical::{CanonicalError, canonical_json};
use crate::data::{CorpusFormat, RunData, TokenizedBody, TokenizerBody};
use crate::eval::{EvalKind, SuiteName};
use crate::hash::{Blake3Hash, BlobHash, SpecHash};

/// The envelope version this crate writes.
pub const ENTRY_VERSION: u32 = 1;

/// Largest canonical entry the log accepts (64 KiB); bundles store lengths as uint16.
pub const MAX_ENTRY_BYTES: usize = 65_535;

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub String);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self(s.to_string())
            }
        }
    };
}

string_id!(
    /// An experiment: `<owner>/<repo>#<issue>` for proposals from GitHub, or the spec's slug for
    /// local runs.
    ExperimentId
);
impl ExperimentId {
    /// The experiment of an issue: `<owner>/<repo>#<number>`.
    pub fn issue(repo: &str, number: u64) -> Self {
        Self(format!("{repo}#{number}"))
    }

    /// A local run's experiment, proposed and approved by the local user: `local/<slug>`.
    pub fn local(slug: &str) -> Self {
        Self(format!("local/{slug}"))
    }

    /// The experiment of this sweep's child `index` (from 0): `<sweep>/<index>`.
    pub fn child(&self, index: usize) -> Self {
        Self(format!("{}/{index}", self.0))
    }

    /// The sweep this experiment is a child of, when it has a child's shape (`<sweep>/<digits>`
    /// where the sweep is an issue's or a local experiment).
    pub fn sweep(&self) -> Option<ExperimentId> {
        let (parent, index) = self.0.rsplit_once('/')?;
        let digits = !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit());
        (digits && (parent.contains('#') || parent.starts_with("local/")))
            .then(|| ExperimentId(parent.to_string()))
    }

    /// The issue this experiment is discussed on, as `(repository, number)`: its own, or its
    /// sweep's for a sweep's child. `None` for a local experiment. The repository is as
    /// written; checking that it names one is the caller's.
    pub fn issue_parts(&self) -> Option<(&str, u64)> {
        let (repo, n) = self.0.rsplit_once('#')?;
        let n = match n.split_once('/') {
            Some((n, child)) if !child.is_empty() && child.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => n,
        };
        Some((repo, n.parse().ok()?))
    }
}

string_id!(
    /// One run of an experiment (a job attempt that trained), e.g. `run-000042`.
    RunId
);

impl RunId {
    /// The run a job trains: `run-<job id, six digits at least>` (`run-000042`). One job is
    /// one run, whatever its attempts.
    pub fn for_job(job: JobId) -> RunId {
        RunId(format!("run-{:06}", job.0))
    }
}

/// A job's id in the lab's queue (its database row).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobId(pub i64);

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::str::FromStr for JobId {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.trim_start_matches('#')
            .parse::<i64>()
            .ok()
            .filter(|n| *n > 0)
            .map(JobId)
            .ok_or_else(|| format!("{s:?} is not a job id; expected a positive integer such as 42"))
    }
}

/// What an entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// A corpus was added (imported or generated).
    Dataset,
    /// An experiment was proposed (issue snapshot + spec).
    Proposal,
    /// A maintainer approved a spec hash.
    Approval,
    /// A maintainer rejected a proposal.
    Rejection,
    /// A forecast registered before the run it predicts.
    Forecast,
    /// A run began.
    RunStarted,
    /// A training snapshot (the model's whole training state, for resuming) was saved. Its
    /// name on the wire, `checkpoint`, predates the word: entries already written keep it.
    #[serde(rename = "checkpoint")]
    Snapshot,
    /// Any other artifact (metric chunk, log, ad-hoc file).
    Artifact,
    /// A run ended, in any way.
    Result,
    /// A run was re-run and compared.
    Reproduction,
    /// A tokenizer was stored (trained or imported).
    Tokenizer,
    /// A corpus was tokenized with a tokenizer into a token shard.
    Tokenized,
    /// Someone explained what they saw in a run (a `/note` on its issue).
    Annotation,
    /// The lab's detector flagged something in a run while it trained.
    Anomaly,
    /// A sweep was proposed: its children, each an ordinary experiment.
    Sweep,
    /// A promotion gate was decided when a sweep's children ended.
    Gate,
    /// What a run's snapshot wrote after the spec's prompts.
    Samples,
    /// An evaluation suite was stored (a version of it: its items' hash).
    EvalSuite,
    /// A run's snapshot was evaluated on a suite (or the attempt ended otherwise).
    Evaluation,
}

impl EntryKind {
    /// Every kind, in declaration order.
    pub const ALL: [EntryKind; 19] = [
        EntryKind::Dataset,
        EntryKind::Proposal,
        EntryKind::Approval,
        EntryKind::Rejection,
        EntryKind::Forecast,
        EntryKind::RunStarted,
        EntryKind::Snapshot,
        EntryKind::Artifact,
        EntryKind::Result,
        EntryKind::Reproduction,
        EntryKind::Tokenizer,
        EntryKind::Tokenized,
        EntryKind::Annotation,
        EntryKind::Anomaly,
        EntryKind::Sweep,
        EntryKind::Gate,
        EntryKind::Samples,
        EntryKind::EvalSuite,
        EntryKind::Evaluation,
    ];

    /// The kind's name as written in entries (`run_started`).
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::Dataset => "dataset",
            EntryKind::Proposal => "proposal",
            EntryKind::Approval => "approval",
            EntryKind::Rejection => "rejection",
            EntryKind::Forecast => "forecast",
            EntryKind::RunStarted => "run_started",
            EntryKind::Snapshot => "checkpoint",
            EntryKind::Artifact => "artifact",
            EntryKind::Result => "result",
            EntryKind::Reproduction => "reproduction",
            EntryKind::Tokenizer => "tokenizer",
            EntryKind::Tokenized => "tokenized",
            EntryKind::Annotation => "annotation",
            EntryKind::Anomaly => "anomaly",
            EntryKind::Sweep => "sweep",
            EntryKind::Gate => "gate",
            EntryKind::Samples => "samples",
            EntryKind::EvalSuite => "eval_suite",
            EntryKind::Evaluation => "evaluation",
        }
    }
}

impl fmt::Display for EntryKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for EntryKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EntryKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown entry kind {s:?}; expected one of {}",
                    EntryKind::ALL.map(|k| k.as_str()).join(", ")
                )
            })
    }
}

/// One ledger entry (a log leaf), before or after canonical encoding.
///
/// The kind is not a field: it is the variant of [`EntryBody`], so an entry whose kind and body
/// disagree cannot be built. On the wire (and in the canonical bytes) the envelope is unchanged:
/// `{"v", "kind", "experiment", "time", "refs", "body"}`.
#[derive(Debug, Clone, PartialEq)]
pub struct LedgerEntry {
    /// Envelope version, [`ENTRY_VERSION`].
    pub v: u32,
    /// The experiment it belongs to; `null` for lab-wide entries (datasets, ad-hoc artifacts).
    pub experiment: Option<ExperimentId>,
    /// When it was written, RFC 3339 in UTC.
    pub time: time::OffsetDateTime,
    /// Blobs the entry vouches for, by role name.
    pub refs: BTreeMap<String, Blake3Hash>,
    /// What the entry records, typed by kind.
    pub body: EntryBody,
}

macro_rules! entry_bodies {
    ($($(#[$doc:meta])* $variant:ident($body:ty)),* $(,)?) => {
        /// The body of an entry, one variant per [`EntryKind`]. Serialized alone it is the
        /// body object (no tag): the kind travels beside it in the envelope.
        #[derive(Debug, Clone, PartialEq)]
        pub enum EntryBody {
            $($(#[$doc])* $variant($body),)*
        }

        impl EntryBody {
            /// The kind this body records.
            pub fn kind(&self) -> EntryKind {
                match self {
                    $(EntryBody::$variant(_) => EntryKind::$variant,)*
                }
            }

            /// Reads the body of an entry of `kind`.
            pub fn from_value(kind: EntryKind, value: serde_json::Value) -> Result<Self, serde_json::Error> {
                Ok(match kind {
                    $(EntryKind::$variant => EntryBody::$variant(serde_json::from_value(value)?),)*
                })
            }
        }

        impl Serialize for EntryBody {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                match self {
                    $(EntryBody::$variant(b) => b.serialize(s),)*
                }
            }
        }

        $(impl From<$body> for EntryBody {
            fn from(b: $body) -> Self {
                EntryBody::$variant(b)
            }
        }

        impl KindBody for $body {
            const KIND: EntryKind = EntryKind::$variant;
            fn of(body: &EntryBody) -> Option<&Self> {
                match body {
                    EntryBody::$variant(b) => Some(b),
                    _ => None,
                }
            }
        })*
    };
}

entry_bodies! {
    /// A corpus was added.
    Dataset(DatasetBody),
    /// An experiment was proposed.
    Proposal(ProposalBody),
    /// A maintainer approved a spec hash.
    Approval(ApprovalBody),
    /// A proposal was rejected, or its approval voided.
    Rejection(RejectionBody),
    /// A forecast registered before the run it predicts.
    Forecast(ForecastBody),
    /// A run began.
    RunStarted(RunStartedBody),
    /// A training snapshot was saved.
    Snapshot(SnapshotBody),
    /// Any other artifact (metric chunk, run log, ad-hoc file).
    Artifact(ArtifactBody),
    /// A run ended, in any way.
    Result(ResultBody),
    /// A run was re-run and compared.
    Reproduction(ReproductionBody),
    /// A tokenizer was stored.
    Tokenizer(TokenizerBody),
    /// A corpus was tokenized into a token shard.
    Tokenized(TokenizedBody),
    /// A note on a run's steps.
    Annotation(AnnotationBody),
    /// A flag the lab's detector raised while a run trained.
    Anomaly(AnomalyBody),
    /// A sweep and its children.
    Sweep(SweepBody),
    /// A promotion gate's decision.
    Gate(GateBody),
    /// Completions written at a snapshot.
    Samples(SamplesBody),
    /// An evaluation suite.
    EvalSuite(EvalSuiteBody),
    /// A snapshot evaluated on a suite.
    Evaluation(EvaluationBody),
}

impl EntryBody {
    /// The run the body is about, for the kinds that name one.
    pub fn run(&self) -> Option<&RunId> {
        match self {
            EntryBody::RunStarted(b) => Some(&b.run),
            EntryBody::Snapshot(b) => Some(&b.run),
            EntryBody::Artifact(b) => b.run.as_ref(),
            EntryBody::Result(b) => Some(&b.run),
            EntryBody::Reproduction(b) => Some(&b.run),
            EntryBody::Annotation(b) => Some(&b.run),
            EntryBody::Anomaly(b) => Some(&b.run),
            EntryBody::Samples(b) => Some(&b.run),
            EntryBody::Evaluation(b) => Some(&b.run),
            EntryBody::Dataset(_)
            | EntryBody::EvalSuite(_)
            | EntryBody::Proposal(_)
            | EntryBody::Approval(_)
            | EntryBody::Rejection(_)
            | EntryBody::Forecast(_)
            | EntryBody::Tokenizer(_)
            | EntryBody::Tokenized(_)
            | EntryBody::Sweep(_)
            | EntryBody::Gate(_) => None,
        }
    }

    /// The spec the body is about, for the kinds that name one.
    pub fn spec_hash(&self) -> Option<&SpecHash> {
        match self {
            EntryBody::Proposal(b) => Some(&b.spec_hash),
            EntryBody::Approval(b) => Some(&b.spec_hash),
            EntryBody::Rejection(b) => Some(&b.spec_hash),
            EntryBody::Forecast(b) => Some(&b.spec_hash),
            EntryBody::RunStarted(b) => Some(&b.spec_hash),
            EntryBody::Result(b) => Some(&b.spec_hash),
            EntryBody::Dataset(_)
            | EntryBody::Snapshot(_)
            | EntryBody::Artifact(_)
            | EntryBody::Reproduction(_)
            | EntryBody::Tokenizer(_)
            | EntryBody::Tokenized(_) => None,
            EntryBody::Annotation(_) | EntryBody::Anomaly(_) => None,
            EntryBody::Sweep(b) => Some(&b.parent_hash),
            EntryBody::Gate(_) | EntryBody::Samples(_) => None,
            EntryBody::EvalSuite(_) | EntryBody::Evaluation(_) => None,
        }
    }
}

/// A body type of one kind, to ask an entry for it ([`LedgerEntry::body_of`]).
pub trait KindBody: Sized {
    /// The kind whose body this is.
    const KIND: EntryKind;
    /// `body` when it is of this kind.
    fn of(body: &EntryBody) -> Option<&Self>;
}

/// The envelope as it is on the wire, for reading: the body is parsed by kind afterwards.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireEntry {
    v: u32,
    kind: EntryKind,
    experiment: Option<ExperimentId>,
    #[serde(with = "time::serde::rfc3339")]
    time: time::OffsetDateTime,
    refs: BTreeMap<String, Blake3Hash>,
    body: serde_json::Value,
}

/// A time written as RFC 3339, for serializing the envelope.
struct Rfc3339<'a>(&'a time::OffsetDateTime);

impl Serialize for Rfc3339<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        time::serde::rfc3339::serialize(self.0, s)
    }
}

impl Serialize for LedgerEntry {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("LedgerEntry", 6)?;
        st.serialize_field("v", &self.v)?;
        st.serialize_field("kind", &self.kind())?;
        st.serialize_field("experiment", &self.experiment)?;
        st.serialize_field("time", &Rfc3339(&self.time))?;
        st.serialize_field("refs", &self.refs)?;
        st.serialize_field("body", &self.body)?;
        st.end()
    }
}

impl<'de> Deserialize<'de> for LedgerEntry {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = WireEntry::deserialize(d)?;
        let body = EntryBody::from_value(w.kind, w.body).map_err(|e| {
            serde::de::Error::custom(format!("the body of a {} entry: {e}", w.kind))
        })?;
        Ok(LedgerEntry {
            v: w.v,
            experiment: w.experiment,
            time: w.time,
            refs: w.refs,
            body,
        })
    }
}

/// Why an entry cannot be encoded.
#[derive(Debug, thiserror::Error)]
pub enum EntryError {
    /// The body has no canonical JSON form.
    #[error(transparent)]
    Canonical(#[from] CanonicalError),
    /// The canonical entry is over the limit.
    #[error(
        "ledger entry is {bytes} bytes; the limit is {MAX_ENTRY_BYTES} bytes (put large content in a blob and reference it by hash)"
    )]
    TooLarge {
        /// Encoded size.
        bytes: usize,
    },
    /// The bytes are not a valid entry.
    #[error("not a valid ledger entry: {0}")]
    Malformed(String),
}

impl LedgerEntry {
    /// A new entry stamped with the current UTC time (to the second, so the text form is short
    /// and stable).
    pub fn new(
        experiment: Option<ExperimentId>,
        refs: BTreeMap<String, Blake3Hash>,
        body: impl Into<EntryBody>,
    ) -> Self {
        let now = time::OffsetDateTime::now_utc();
        let time = now.replace_nanosecond(0).unwrap_or(now);
        Self {
            v: ENTRY_VERSION,
            experiment,
            time,
            refs,
            body: body.into(),
        }
    }

    /// What the entry records.
    pub fn kind(&self) -> EntryKind {
        self.body.kind()
    }

    /// A copy of the body, when the entry is of `T`'s kind; else an error naming both kinds.
    pub fn body_as<T: KindBody + Clone>(&self) -> Result<T, EntryError> {
        self.body_of::<T>().cloned()
    }

    /// The body, when the entry is of `T`'s kind; else an error naming both kinds.
    pub fn body_of<T: KindBody>(&self) -> Result<&T, EntryError> {
        T::of(&self.body).ok_or_else(|| {
            EntryError::Malformed(format!(
                "the entry is a {} entry, not a {} one",
                self.kind(),
                T::KIND
            ))
        })
    }

    /// The canonical bytes stored in the log; refuses entries over [`MAX_ENTRY_BYTES`].
    pub fn to_canonical_bytes(&self) -> Result<Vec<u8>, EntryError> {
        let bytes = canonical_json(self)?;
        if bytes.len() > MAX_ENTRY_BYTES {
            return Err(EntryError::TooLarge { bytes: bytes.len() });
        }
        Ok(bytes)
    }

    /// Parses stored bytes back into an entry.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, EntryError> {
        serde_json::from_slice(bytes).map_err(|e| EntryError::Malformed(e.to_string()))
    }
}

/// How a run ended. Every ending is recorded; none is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Trained every step.
    Succeeded,
    /// Loss or gradients became NaN/inf.
    Diverged,
    /// Hit the spec's or the lab's FLOP or wall-time budget.
    BudgetExceeded,
    /// Crashed or could not run (reason given).
    Failed,
    /// Cancelled by a maintainer.
    Cancelled,
}

impl RunStatus {
    /// The status name (`budget_exceeded`).
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Succeeded => "succeeded",
            RunStatus::Diverged => "diverged",
            RunStatus::BudgetExceeded => "budget_exceeded",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl RunStatus {
    /// Every ending.
    pub const ALL: [RunStatus; 5] = [
        RunStatus::Succeeded,
        RunStatus::Diverged,
        RunStatus::BudgetExceeded,
        RunStatus::Failed,
        RunStatus::Cancelled,
    ];
}

impl std::str::FromStr for RunStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RunStatus::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| format!("unknown run status {s:?}"))
    }
}

/// Where a run stands: training, or ended as its `result` says. Written as one word:
/// `running`, or the ending's status (`succeeded`, `budget_exceeded`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunPhase {
    /// No `result` yet.
    Running,
    /// Its `result` says how it ended.
    Ended(RunStatus),
}

impl RunPhase {
    /// The word.
    pub fn as_str(self) -> &'static str {
        match self {
            RunPhase::Running => "running",
            RunPhase::Ended(s) => s.as_str(),
        }
    }

    /// Whether the run is still going.
    pub fn is_running(self) -> bool {
        self == RunPhase::Running
    }

    /// How it ended, once it has.
    pub fn ended(self) -> Option<RunStatus> {
        match self {
            RunPhase::Running => None,
            RunPhase::Ended(s) => Some(s),
        }
    }
}

impl fmt::Display for RunPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for RunPhase {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "running" {
            return Ok(RunPhase::Running);
        }
        s.parse::<RunStatus>()
            .map(RunPhase::Ended)
            .map_err(|_| format!("unknown run phase {s:?}: expected running or a run status"))
    }
}

impl Serialize for RunPhase {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for RunPhase {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Where an experiment stands on the record: its newest run's phase, else whether it was
/// rejected, approved or only proposed. Written as one word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExperimentPhase {
    /// Proposed, not decided.
    Proposed,
    /// Approved, no run yet.
    Approved,
    /// Rejected.
    Rejected,
    /// Its newest run's phase.
    Run(RunPhase),
}

impl ExperimentPhase {
    /// The word: `proposed`, `approved`, `rejected`, or the run's.
    pub fn as_str(self) -> &'static str {
        match self {
            ExperimentPhase::Proposed => "proposed",
            ExperimentPhase::Approved => "approved",
            ExperimentPhase::Rejected => "rejected",
            ExperimentPhase::Run(r) => r.as_str(),
        }
    }
}

impl fmt::Display for ExperimentPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ExperimentPhase {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A GitHub issue an experiment came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IssueRef {
    /// `owner/repo`.
    pub repo: String,
    /// Issue number.
    pub number: u64,
    /// The issue's web URL.
    pub url: String,
}

/// Body of a `dataset` entry; `refs.corpus` is the corpus blob.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DatasetBody {
    /// Domain name.
    pub domain: String,
    /// Size in bytes.
    pub bytes: u64,
    /// Tokenizer the corpus is meant for.
    pub tokenizer: String,
    /// Where it came from: `import:<file name>` or `generator:<kind> seed=<n> ...`.
    pub source: String,
    /// Known entropy rate in bits per byte, for synthetic sources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entropy_bits_per_byte: Option<f64>,
    /// How the raw file splits into documents. Absent in entries written before formats were
    /// recorded (their corpus is plain bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<CorpusFormat>,
    /// Documents in the corpus, when its format was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documents: Option<u64>,
    /// UTF-8 bytes of document text (the raw file minus JSON or Parquet framing), when its
    /// format was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_bytes: Option<u64>,
}

/// Body of a `proposal` entry; `refs.spec` is the canonical spec blob, `refs.issue` the issue
/// snapshot blob when the proposal came from GitHub.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProposalBody {
    /// The proposed spec's hash.
    pub spec_hash: SpecHash,
    /// Who proposed it (GitHub login or local user).
    pub author: String,
    /// Title of the proposal.
    pub title: String,
    /// The issue, when it came from GitHub.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issue: Option<IssueRef>,
    /// When the experiment is a child of a sweep: which sweep, and which child.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<SweepLink>,
}

/// A sweep child's link to its sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepLink {
    /// The sweep's experiment (the issue it was proposed in).
    pub parent: ExperimentId,
    /// The sweep file's hash, to which the set's approval is bound.
    pub parent_hash: SpecHash,
    /// The child's position, from 0.
    pub index: u32,
    /// The swept fields' values, `n_experts=4, lr=0.001`.
    pub values: String,
}

/// Body of an `approval` entry: bound to the exact spec hash the approver saw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalBody {
    /// The approved spec's hash.
    pub spec_hash: SpecHash,
    /// Who approved.
    pub approver: String,
    /// For a sweep child: the sweep file's hash the one approval of the set was bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<SpecHash>,
}

/// Body of a `sweep` entry (`refs.sweep_toml` is the file as written): the set of children one
/// approval covers, each then proposed as an ordinary experiment linked back by [`SweepLink`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepBody {
    /// The whole file's hash (base and `[sweep]`).
    pub parent_hash: SpecHash,
    /// Who proposed it.
    pub author: String,
    /// Title of the proposal.
    pub title: String,
    /// `grid` or `list`.
    pub mode: crate::sweep::SweepMode,
    /// The metric that picks the best child, if named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
    /// Which way the metric is better.
    pub direction: crate::sweep::Direction,
    /// The promotion gate, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<crate::sweep::Gate>,
    /// The children, in order.
    pub children: Vec<SweepMember>,
    /// Total training-plus-evaluation FLOPs of all children (the cost model's).
    pub total_flops: f64,
}

/// One child as the `sweep` entry lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepMember {
    /// The child's experiment.
    pub experiment: ExperimentId,
    /// Its spec's hash.
    pub spec_hash: SpecHash,
    /// Its values, `n_experts=4, lr=0.001`.
    pub values: String,
    /// Its training-plus-evaluation FLOPs.
    pub flops: f64,
}

/// Body of a `gate` entry: whether a sweep's best child beat the baseline by the margin, with
/// the numbers. A failed gate is a negative result, recorded like any other.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateBody {
    /// The sweep's experiment.
    pub sweep: ExperimentId,
    /// The sweep file's hash.
    pub parent_hash: SpecHash,
    /// The metric compared.
    pub metric: String,
    /// Which way it is better.
    pub direction: crate::sweep::Direction,
    /// The baseline's slug, as the gate names it.
    pub beats: String,
    /// The margin the best child had to beat the baseline by (in the metric's units).
    pub by: f64,
    /// `passed` or `failed`.
    pub outcome: GateOutcome,
    /// The baseline's run and value, when one was found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<GateSide>,
    /// The best child's run and value, when any child reported the metric.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best: Option<GateSide>,
    /// Why, in one sentence with the numbers.
    pub detail: String,
}

/// A gate's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GateOutcome {
    /// The best child beat the baseline by the margin.
    Passed,
    /// It did not (or there was nothing to compare).
    Failed,
}

/// One side of a gate's comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateSide {
    /// The experiment.
    pub experiment: ExperimentId,
    /// Its run.
    pub run: RunId,
    /// Its final value of the gate's metric.
    pub value: f64,
}

/// Body of a `rejection` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RejectionBody {
    /// The rejected spec's hash.
    pub spec_hash: SpecHash,
    /// Who rejected.
    pub by: String,
    /// Why.
    pub reason: String,
}

/// Body of a `forecast` entry: written before the run it predicts starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForecastBody {
    /// The spec whose outcome is predicted.
    pub spec_hash: SpecHash,
    /// Metric name.
    pub metric: String,
    /// Predicted value.
    pub value: f64,
    /// Allowed absolute difference.
    pub tolerance: f64,
    /// How the forecast was made (`author`, `scaling_law`).
    pub method: String,
    /// Method details (for a scaling law: the fitted parameters and their uncertainty).
    #[serde(default)]
    pub details: serde_json::Value,
}

/// Body of a `run_started` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunStartedBody {
    /// The run.
    pub run: RunId,
    /// The spec being trained.
    pub spec_hash: SpecHash,
    /// Source revision of the glassbox binary (git hash, `-dirty` when modified).
    pub code_revision: String,
    /// `cpu` or `cuda`.
    pub backend: String,
    /// Why that backend: what was asked for and what the machine offered (e.g. `asked for
    /// auto; CUDA not usable (no libcuda.so); using the CPU`). Absent in older entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_reason: Option<String>,
    /// Hardware description (CPU model and threads, or GPU name).
    pub hardware: String,
    /// Training seed.
    pub seed: u64,
    /// BLAKE3 of each kernel source used, by file name (empty on the CPU backend).
    #[serde(default)]
    pub kernel_hashes: BTreeMap<String, Blake3Hash>,
    /// Step resumed from, when the run continues an interrupted attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_from_step: Option<u64>,
    /// Exactly which program ran: full commit, dirty tree, executable hash. Absent in entries
    /// written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<BuildIdentity>,
    /// The tokenizer and the exact token shards trained on, for a run with a stored tokenizer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<RunData>,
    /// The queue worker that trained it (absent for entries from before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// The host name of that worker's machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Which attempt at the job this is, from 1: a job whose worker died is taken over by
    /// another, which records a `run_started` of its own with the next number. Absent for bare
    /// runs and entries from before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
}

/// Exactly which program wrote a record: what it was built from and the bytes that ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuildIdentity {
    /// The full git commit (40 hex) the executable was built from; absent when it was built
    /// outside a git checkout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// Whether tracked files differed from that commit when it was built.
    pub dirty: bool,
    /// BLAKE3 of the running executable file.
    pub executable_blake3: Blake3Hash,
}

impl BuildIdentity {
    /// How the program that wrote `self` relates to the one that wrote `original`.
    pub fn compare(&self, original: Option<&BuildIdentity>) -> BinaryComparison {
        let Some(original) = original else {
            return BinaryComparison::Unrecorded;
        };
        if self.executable_blake3 == original.executable_blake3 {
            return BinaryComparison::SameBinary;
        }
        match (&self.commit, &original.commit) {
            (Some(a), Some(b)) if a != b => BinaryComparison::DifferentCommit,
            (Some(_), Some(_)) if !self.dirty && !original.dirty => BinaryComparison::SameCommit,
            _ => BinaryComparison::DifferentBinary,
        }
    }
}

/// How a re-run's program relates to the original run's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BinaryComparison {
    /// The very same executable (equal BLAKE3).
    SameBinary,
    /// A different executable built from the same commit, both from clean trees (another
    /// compiler, flags or machine).
    SameCommit,
    /// Built from different commits.
    DifferentCommit,
    /// A different executable whose source cannot be told apart: a dirty tree or an unknown
    /// commit on either side.
    DifferentBinary,
    /// The original run did not record its executable.
    Unrecorded,
}

impl BinaryComparison {
    /// The name as written in entries (`same_binary`).
    pub fn as_str(self) -> &'static str {
        match self {
            BinaryComparison::SameBinary => "same_binary",
            BinaryComparison::SameCommit => "same_commit",
            BinaryComparison::DifferentCommit => "different_commit",
            BinaryComparison::DifferentBinary => "different_binary",
            BinaryComparison::Unrecorded => "unrecorded",
        }
    }

    /// A sentence for people.
    pub fn describe(self) -> &'static str {
        match self {
            BinaryComparison::SameBinary => "same binary",
            BinaryComparison::SameCommit => "different binary, same commit",
            BinaryComparison::DifferentCommit => "different binary, different commit",
            BinaryComparison::DifferentBinary => {
                "different binary; its source may differ (a dirty tree or an unknown commit)"
            }
            BinaryComparison::Unrecorded => "the original run did not record its binary",
        }
    }
}

impl fmt::Display for BinaryComparison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Body of a `checkpoint` entry (a training snapshot); `refs.checkpoint` is the snapshot's blob.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotBody {
    /// The run.
    pub run: RunId,
    /// Steps completed when it was saved.
    pub step: u64,
}

/// Body of an `artifact` entry; `refs.artifact` is the blob.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArtifactBody {
    /// File name or role (`metrics.jsonl`, `train.log`).
    pub name: String,
    /// Size in bytes.
    pub bytes: u64,
    /// The run it belongs to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunId>,
}

/// A forecast compared with what happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForecastOutcome {
    /// Metric name.
    pub metric: String,
    /// Predicted value.
    pub predicted: f64,
    /// Allowed absolute difference.
    pub tolerance: f64,
    /// Observed value; `None` when the run ended before reporting it.
    pub actual: Option<f64>,
    /// `|actual - predicted| <= tolerance`.
    pub hit: bool,
}

impl ForecastOutcome {
    /// A forecast of `predicted ± tolerance` against what was measured: a hit when the metric
    /// was measured and is within the tolerance.
    pub fn settle(metric: &str, predicted: f64, tolerance: f64, actual: Option<f64>) -> Self {
        ForecastOutcome {
            metric: metric.to_string(),
            predicted,
            tolerance,
            actual,
            hit: actual.is_some_and(|a| (a - predicted).abs() <= tolerance),
        }
    }

    /// The forecast settled by a finished run: a hit or a miss (a run that ended without the
    /// metric misses).
    pub fn verdict(&self) -> ForecastVerdict {
        if self.hit {
            ForecastVerdict::Hit
        } else {
            ForecastVerdict::Miss
        }
    }

    /// `actual - predicted`, when the metric was measured.
    pub fn error(&self) -> Option<f64> {
        self.actual.map(|a| a - self.predicted)
    }
}

/// What became of a forecast: the one vocabulary every page, the API, the CLI and the bot use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ForecastVerdict {
    /// The outcome was within the tolerance of the prediction.
    Hit,
    /// The outcome was outside it, or the run ended without measuring the metric.
    Miss,
    /// No finished run of the forecast's spec yet.
    Pending,
}

impl ForecastVerdict {
    /// Every verdict, in the order they are explained.
    pub const ALL: [ForecastVerdict; 3] = [Self::Hit, Self::Miss, Self::Pending];

    /// The word shown and served (`hit`, `miss`, `pending`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hit => "hit",
            Self::Miss => "miss",
            Self::Pending => "pending",
        }
    }
}

impl fmt::Display for ForecastVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a run ended — the one ending type. The runner produces it (in its `RunOutcome`); the
/// `result` entry, the queue's job state, the lab's notices and the bot's result comment carry
/// it as it is. Its fields sit flat in the bodies that carry it (`status`, `steps`, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunEnding {
    /// How it ended.
    pub status: RunStatus,
    /// Steps completed.
    #[serde(default)]
    pub steps: u64,
    /// Last value of each metric.
    pub final_metrics: BTreeMap<String, f64>,
    /// Why it ended that way, for anything but success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl RunEnding {
    /// An ending before any step: no metrics.
    pub fn early(status: RunStatus, reason: impl Into<String>) -> Self {
        RunEnding {
            status,
            steps: 0,
            final_metrics: BTreeMap::new(),
            reason: Some(reason.into()),
        }
    }
}

/// Body of a `result` entry; `refs.checkpoint` is the last checkpoint blob, when one was
/// written. The metric curves are in the run's metric-chunk `artifact` entries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultBody {
    /// The run.
    pub run: RunId,
    /// The spec that was trained.
    pub spec_hash: SpecHash,
    /// How it ended (`status`, `steps`, `final_metrics`, `reason`, flat in the body).
    #[serde(flatten)]
    pub ending: RunEnding,
    /// Forecast vs outcome, when a forecast was registered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forecast: Option<ForecastOutcome>,
    /// `blake3:<hex>` of the final parameters (little-endian, checkpoint order), when training
    /// started: what a reproduction must match bitwise on the CPU backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params_blake3: Option<Blake3Hash>,
}

/// Body of a `reproduction` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReproductionBody {
    /// The run that was re-run.
    pub run: RunId,
    /// `reproduced` or `differs`; for a queued reproduction that could not finish, `failed` or
    /// `cancelled`.
    pub outcome: String,
    /// For `differs`: `differs at step N: metric, expected, got`; for `failed` and
    /// `cancelled`: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Backend of the re-run.
    pub backend: String,
    /// The re-run's program against the original run's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binary: Option<BinaryComparison>,
    /// The re-run's program.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<BuildIdentity>,
    /// How the re-run was compared: bitwise, or within the stated parity tolerances (a run
    /// made on another backend or device model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comparison: Option<Comparison>,
    /// The queue worker that re-ran it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// The host name of that worker's machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Queued by the lab's `[reproduce]` policy rather than asked for (`/reproduce`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub automatic: bool,
}

/// How a reproduction compared the re-run with the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Comparison {
    /// Every deterministic metric and the final parameters, bit for bit (same backend and
    /// device model).
    Bitwise,
    /// Every deterministic metric within the backend-parity tolerances (another backend or
    /// device model); parameters are not compared.
    Tolerance,
}

/// Longest annotation text, in characters (a note is a sentence or a paragraph; evidence goes
/// in the comment it links to).
pub const MAX_NOTE_CHARS: usize = 2000;

/// Whose note an annotation is: a maintainer's (permission checked when it was written) or
/// anyone else's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoteRole {
    /// A maintainer of the lab's repository wrote it.
    Maintainer,
    /// Anyone else.
    Community,
}

impl NoteRole {
    /// The name as written in entries.
    pub fn as_str(self) -> &'static str {
        match self {
            NoteRole::Maintainer => "maintainer",
            NoteRole::Community => "community",
        }
    }
}

/// Body of an `annotation` entry: someone's note on steps `from_step..=to_step` of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnnotationBody {
    /// The run.
    pub run: RunId,
    /// Who wrote it (GitHub login).
    pub author: String,
    /// A maintainer's note or a community one.
    pub role: NoteRole,
    /// First step it is about (1-based, as metrics are).
    pub from_step: u64,
    /// Last step it is about (equal to `from_step` for a single step).
    pub to_step: u64,
    /// What they saw, as written (at most [`MAX_NOTE_CHARS`] characters; shown escaped).
    pub text: String,
    /// The comment it came from.
    pub url: String,
    /// The annotation entry this one replaces (the same comment, edited). The old entry stays
    /// in the log; readers show the newest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supersedes: Option<u64>,
}

/// What the detector flagged (`runner::anomaly` states the rule for each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnomalyKind {
    /// `train/loss` far above its trailing median.
    LossSpike,
    /// `grad/norm/total` far above its trailing median.
    GradNormSpike,
    /// The step-to-step change of `params/norm/total` (trained parameters only) far from its
    /// trailing median.
    ParamsNormJump,
    /// The step-to-step change of one layer's router bias norm (balancing state, not a trained
    /// parameter) far from its trailing median.
    RouterBiasJump,
    /// One expert took more than the threshold share of a layer's tokens for N steps.
    ExpertCollapse,
}

impl AnomalyKind {
    /// Every kind, in declaration order.
    pub const ALL: [AnomalyKind; 5] = [
        AnomalyKind::LossSpike,
        AnomalyKind::GradNormSpike,
        AnomalyKind::ParamsNormJump,
        AnomalyKind::RouterBiasJump,
        AnomalyKind::ExpertCollapse,
    ];

    /// The name as written in entries (`loss_spike`).
    pub fn as_str(self) -> &'static str {
        match self {
            AnomalyKind::LossSpike => "loss_spike",
            AnomalyKind::GradNormSpike => "grad_norm_spike",
            AnomalyKind::ParamsNormJump => "params_norm_jump",
            AnomalyKind::RouterBiasJump => "router_bias_jump",
            AnomalyKind::ExpertCollapse => "expert_collapse",
        }
    }

    /// A phrase for people (`loss spike`).
    pub fn describe(self) -> &'static str {
        match self {
            AnomalyKind::LossSpike => "loss spike",
            AnomalyKind::GradNormSpike => "gradient-norm spike",
            AnomalyKind::ParamsNormJump => "parameter-norm jump (trained parameters)",
            AnomalyKind::RouterBiasJump => "router-bias jump (balancing state, not trained)",
            AnomalyKind::ExpertCollapse => "expert collapse",
        }
    }
}

impl fmt::Display for AnomalyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for AnomalyKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        AnomalyKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown anomaly kind {s:?}; expected one of {}",
                    AnomalyKind::ALL.map(|k| k.as_str()).join(", ")
                )
            })
    }
}

/// One flag the detector raised, without the run it is about (the runner does not name runs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Anomaly {
    /// What was flagged.
    pub kind: AnomalyKind,
    /// The step (1-based) whose value was flagged.
    pub step: u64,
    /// The metric checked (`train/loss`, `train/router/layer_0/bias_norm`, ...).
    pub metric: String,
    /// The value flagged: the metric, its step-to-step change for a jump, or the expert's token
    /// share for a collapse.
    pub value: f64,
    /// What it was compared with: the trailing median, or the collapse threshold.
    pub baseline: f64,
    /// How far off: robust deviations from the median, or steps collapsed.
    pub deviations: f64,
    /// The layer, for per-layer kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer: Option<u32>,
    /// The expert, for a collapse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expert: Option<u32>,
    /// What the chart of `metric` shows at that step, where it is not `value`: for a collapse,
    /// the expert's share of the layer's assignments (`value` is its share of the tokens, the
    /// assignment share times `top_k`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub charted: Option<f64>,
}

impl Anomaly {
    /// What happened, in one sentence that states the kind's own rule with its numbers: for a
    /// spike, the value against its trailing median in robust deviations; for a jump, the
    /// step's change against the typical change; for a collapse, which expert took what share
    /// of its layer's tokens (and what the metric's chart shows), for how many steps, against
    /// which threshold.
    pub fn message(&self) -> String {
        let layer = self
            .layer
            .map(|l| format!(" in layer {l}"))
            .unwrap_or_default();
        let how_far = |d: f64| {
            if d >= 1e9 {
                "with no spread in its trailing window".to_string()
            } else {
                format!("{d:.1} robust deviations")
            }
        };
        match self.kind {
            AnomalyKind::LossSpike | AnomalyKind::GradNormSpike => format!(
                "{}{layer} at step {}: `{}` = {:.4}, {} above its trailing median of {:.4}",
                self.kind.describe(),
                self.step,
                self.metric,
                self.value,
                how_far(self.deviations),
                self.baseline
            ),
            AnomalyKind::ParamsNormJump | AnomalyKind::RouterBiasJump => format!(
                "{}{layer} at step {}: `{}` changed by {:+.4} in one step, {} from its typical change of {:+.4}",
                self.kind.describe(),
                self.step,
                self.metric,
                self.value,
                how_far(self.deviations),
                self.baseline
            ),
            AnomalyKind::ExpertCollapse => {
                let expert = self
                    .expert
                    .map_or_else(|| "one expert".to_string(), |e| format!("expert {e}"));
                let charted = self
                    .charted
                    .map(|c| {
                        format!(
                            " ({c:.4} of its assignments, as the `{}` chart shows)",
                            self.metric
                        )
                    })
                    .unwrap_or_else(|| format!(" (`{}`)", self.metric));
                let steps = self.deviations.clamp(1.0, 1e9) as u64;
                format!(
                    "{}{layer} at step {}: {expert} took {:.1}% of the layer's tokens{charted} for {steps} step{} in a row, above the collapse threshold of {:.1}% (`[train.anomaly] collapse_share`)",
                    self.kind.describe(),
                    self.step,
                    self.value * 100.0,
                    if steps == 1 { "" } else { "s" },
                    self.baseline * 100.0
                )
            }
        }
    }
}

/// Body of a `samples` entry: what a run's snapshot wrote after each prompt, with the settings
/// (the completions blob, `refs.artifact`, holds the same with token ids). The texts are model
/// output: untrusted, shown escaped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SamplesBody {
    /// The run.
    pub run: RunId,
    /// Steps completed at the snapshot.
    pub step: u64,
    /// The snapshot's blob, when it was stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<BlobHash>,
    /// Tokens asked for per prompt.
    pub max_tokens: u32,
    /// 0 is greedy.
    pub temperature: f64,
    /// Seed of the draws.
    pub seed: u64,
    /// The prompts, as the model saw them.
    pub prompts: Vec<String>,
    /// The completion of each prompt, in order.
    pub texts: Vec<String>,
}

/// Body of an `eval_suite` entry: a suite stored as a blob (`refs.suite`) of canonical JSON
/// lines, one item each. The blob's hash is the suite's version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalSuiteBody {
    /// Its name.
    pub name: SuiteName,
    /// What it measures.
    pub kind: EvalKind,
    /// Items it holds.
    pub items: u64,
    /// Its hash (the blob's): the version every evaluation names.
    pub suite: BlobHash,
    /// The licence its items are under, as the importer declared it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub licence: Option<String>,
    /// Where the items came from (a URL, or the command that generated them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// How many of a suite's items share an n-gram (in the run's tokens) with what the run trained
/// on, and which.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Contamination {
    /// Tokens per n-gram ([`crate::eval::CONTAMINATION_NGRAM`]).
    pub ngram: u32,
    /// Items flagged.
    pub flagged: u64,
    /// `flagged / items`.
    pub fraction: f64,
    /// Items too short to hold one n-gram (never flagged).
    pub too_short: u64,
    /// The first flagged item indices (at most [`crate::eval::FLAGGED_LISTED`]; the blob lists all).
    pub first_flagged: Vec<u64>,
    /// Training tokens streamed past the suite's n-grams, by domain.
    pub tokens_checked: BTreeMap<String, u64>,
}

/// How an evaluation job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvalOutcome {
    /// Every item was scored; the metrics are the result.
    Evaluated,
    /// It could not be done (the reason is the entry's `detail`).
    Failed,
    /// A maintainer cancelled it.
    Cancelled,
}

impl EvalOutcome {
    /// The word on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            EvalOutcome::Evaluated => "evaluated",
            EvalOutcome::Failed => "failed",
            EvalOutcome::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for EvalOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Body of an `evaluation` entry: one snapshot of a run on one version of a suite, or how the
/// attempt to evaluate it ended. `refs.checkpoint` is the snapshot, `refs.suite` the suite and
/// `refs.artifact` the per-item results (JSON lines), when there are results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvaluationBody {
    /// The run.
    pub run: RunId,
    /// Steps completed at the snapshot.
    pub step: u64,
    /// The snapshot's blob.
    pub snapshot: BlobHash,
    /// The suite's name.
    pub suite: SuiteName,
    /// The suite's version (its blob's hash).
    pub suite_hash: BlobHash,
    /// What it measures.
    pub kind: EvalKind,
    /// How it ended.
    pub outcome: EvalOutcome,
    /// Why, when it did not end `evaluated`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Items scored.
    pub items: u64,
    /// The metrics ([`EvalKind::metrics`]); empty unless `evaluated`.
    pub metrics: BTreeMap<String, f64>,
    /// The suite against the run's training data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contamination: Option<Contamination>,
    /// The job that evaluated it, when a queued job did (`glassbox eval` run by hand has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<JobId>,
    /// The worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// The worker's host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// CPU threads it ran on (the results are the same for any count).
    pub threads: u32,
    /// The program that evaluated it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<BuildIdentity>,
    /// Queued by the lab's `[evals]` (or the spec's), not asked for.
    #[serde(default)]
    pub automatic: bool,
    /// The forecast this evaluation settles (a forecast of an `eval:` metric of the run's last
    /// snapshot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forecast: Option<ForecastOutcome>,
}

/// `text` with C0 control characters (but line breaks and tabs) and DEL shown as their
/// Unicode control pictures (U+2400..): model output that is bytes shows as something, on a
/// page or in a comment, instead of nothing or a terminal escape.
pub fn control_pictures(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '\n' | '\t' => c,
            '\u{0}'..='\u{1f}' => char::from_u32(0x2400 + c as u32).unwrap_or('\u{FFFD}'),
            '\u{7f}' => '\u{2421}',
            _ => c,
        })
        .collect()
}

/// Body of an `anomaly` entry: the lab's own annotation of a run, written by the worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnomalyBody {
    /// The run.
    pub run: RunId,
    /// What was flagged, flat in the body.
    #[serde(flatten)]
    pub anomaly: Anomaly,
}

/// What a blob named in an entry's `refs` is to that entry: the key it is stored under, one
/// word per role (the wire format is the word; an entry may carry a key this list does not
/// know, which readers leave alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RefRole {
    /// A proposal's spec, stored as canonical JSON under its own hash.
    Spec,
    /// A proposal's spec as its author wrote it (TOML).
    SpecToml,
    /// The issue a proposal was made from, as fetched.
    Issue,
    /// A sweep's file as written.
    SweepToml,
    /// A dataset's corpus.
    Corpus,
    /// A tokenizer's `tokenizer.json`.
    Tokenizer,
    /// A token shard.
    Shard,
    /// An artifact's file (a run's log, a file put by hand).
    Artifact,
    /// A training snapshot's safetensors.
    Checkpoint,
    /// A chunk of a run's metric records (JSON lines).
    Metrics,
    /// An evaluation suite's items (canonical JSON lines).
    Suite,
}

impl RefRole {
    /// Every role.
    pub const ALL: [RefRole; 11] = [
        RefRole::Spec,
        RefRole::SpecToml,
        RefRole::Issue,
        RefRole::SweepToml,
        RefRole::Corpus,
        RefRole::Tokenizer,
        RefRole::Shard,
        RefRole::Artifact,
        RefRole::Checkpoint,
        RefRole::Metrics,
        RefRole::Suite,
    ];

    /// The key in `refs`.
    pub fn as_str(self) -> &'static str {
        match self {
            RefRole::Spec => "spec",
            RefRole::SpecToml => "spec_toml",
            RefRole::Issue => "issue",
            RefRole::SweepToml => "sweep_toml",
            RefRole::Corpus => "corpus",
            RefRole::Tokenizer => "tokenizer",
            RefRole::Shard => "shard",
            RefRole::Artifact => "artifact",
            RefRole::Checkpoint => "checkpoint",
            RefRole::Metrics => "metrics",
            RefRole::Suite => "suite",
        }
    }
}

impl fmt::Display for RefRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for RefRole {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RefRole::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| format!("unknown ref role {s:?}"))
    }
}

impl LedgerEntry {
    /// The blob this entry names in `role`, if it names one.
    pub fn blob(&self, role: RefRole) -> Option<&Blake3Hash> {
        self.refs.get(role.as_str())
    }
}

/// An entry's `refs` from roles and blobs.
pub fn refs<const N: usize>(pairs: [(RefRole, Blake3Hash); N]) -> BTreeMap<String, Blake3Hash> {
    pairs
        .into_iter()
        .map(|(role, hash)| (role.as_str().to_string(), hash))
        .collect()
}

impl From<BlobHash> for Blake3Hash {
    fn from(h: BlobHash) -> Self {
        h.0
    }
}

impl From<SpecHash> for Blake3Hash {
    fn from(h: SpecHash) -> Self {
        h.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_are_their_words() {
        for status in RunStatus::ALL {
            assert_eq!(status.as_str().parse::<RunStatus>(), Ok(status));
            let phase = RunPhase::Ended(status);
            assert_eq!(phase.as_str().parse::<RunPhase>(), Ok(phase));
            assert_eq!(
                serde_json::to_string(&phase).unwrap(),
                format!("\"{status}\"")
            );
        }
        assert_eq!("running".parse::<RunPhase>(), Ok(RunPhase::Running));
        assert!("walking".parse::<RunPhase>().is_err());
        assert_eq!(ExperimentPhase::Run(RunPhase::Running).as_str(), "running");
        assert_eq!(ExperimentPhase::Rejected.to_string(), "rejected");
    }

    #[test]
    fn ref_roles_are_their_words() {
        for role in RefRole::ALL {
            assert_eq!(role.as_str().parse::<RefRole>(), Ok(role));
        }
        assert!("nonsense".parse::<RefRole>().is_err());
        let r = refs([(RefRole::SpecToml, Blake3Hash::of(b"x"))]);
        assert_eq!(r.keys().collect::<Vec<_>>(), ["spec_toml"]);
    }

    #[test]
    fn experiment_ids_are_built_and_read_back_in_one_place() {
        let issue = ExperimentId::issue("octo/lab", 7);
        assert_eq!(issue.0, "octo/lab#7");
        assert_eq!(issue.issue_parts(), Some(("octo/lab", 7)));
        assert_eq!(issue.sweep(), None);
        let child = issue.child(3);
        assert_eq!(child.0, "octo/lab#7/3");
        assert_eq!(child.sweep(), Some(issue.clone()));
        assert_eq!(child.issue_parts(), Some(("octo/lab", 7)));
        let local = ExperimentId::local("tiny");
        assert_eq!(local.0, "local/tiny");
        assert_eq!(local.issue_parts(), None);
        assert_eq!(local.child(0).sweep(), Some(local));
        assert_eq!(ExperimentId::from("local/tiny/x").sweep(), None);
        assert_eq!(ExperimentId::from("local/plain").sweep(), None);
        assert_eq!(ExperimentId::from("octo/lab#x").issue_parts(), None);
    }

    #[test]
    fn entry_round_trips_and_is_canonical() {
        let body = ArtifactBody {
            name: "notes.txt".into(),
            bytes: 3,
            run: None,
        };
        let e = LedgerEntry::new(
            None,
            refs([(RefRole::Artifact, Blake3Hash::of(b"abc"))]),
            body.clone(),
        );
        let bytes = e.to_canonical_bytes().unwrap();
        let text = std::str::from_utf8(&bytes).unwrap();
        // JCS sorts keys: body < experiment < kind < refs < time < v.
        assert!(text.starts_with("{\"body\":{\"bytes\":3,\"name\":\"notes.txt\"},\"experiment\":null,\"kind\":\"artifact\""), "{text}");
        let back = LedgerEntry::from_bytes(&bytes).unwrap();
        assert_eq!(back, e);
        assert_eq!(back.kind(), EntryKind::Artifact);
        assert_eq!(back.body, EntryBody::Artifact(body));
    }

    #[test]
    fn a_body_that_does_not_fit_its_kind_is_refused() {
        let text = r#"{"body":{"bytes":3,"name":"notes.txt"},"experiment":null,"kind":"result","refs":{},"time":"2026-01-01T00:00:00Z","v":1}"#;
        let err = LedgerEntry::from_bytes(text.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(err.contains("the body of a result entry"), "{err}");
    }

    #[test]
    fn oversized_entry_is_refused() {
        let body = ArtifactBody {
            name: "x".repeat(MAX_ENTRY_BYTES),
            bytes: 0,
            run: None,
        };
        let e = LedgerEntry::new(None, BTreeMap::new(), body);
        let err = e.to_canonical_bytes().unwrap_err();
        assert!(matches!(err, EntryError::TooLarge { .. }), "{err}");
        assert!(err.to_string().contains("put large content in a blob"));
    }

    /// Entries written before `build` / `binary` existed keep their exact canonical bytes.
    #[test]
    fn optional_build_fields_leave_old_entries_unchanged() {
        let old = r#"{"backend":"cpu: cpu (1 threads, f32)","code_revision":"0123456789ab","hardware":"x","kernel_hashes":{},"run":"run-000001","seed":3,"spec_hash":"blake3:0000000000000000000000000000000000000000000000000000000000000000"}"#;
        let body: RunStartedBody = serde_json::from_str(old).unwrap();
        assert_eq!(body.build, None);
        assert_eq!(canonical_json(&body).unwrap(), old.as_bytes());
        let old = r#"{"backend":"cpu","outcome":"reproduced","run":"run-000001"}"#;
        let body: ReproductionBody = serde_json::from_str(old).unwrap();
        assert_eq!(canonical_json(&body).unwrap(), old.as_bytes());
    }

    #[test]
    fn binaries_compare_by_hash_then_commit() {
        let build = |commit: Option<&str>, dirty, exe: &[u8]| BuildIdentity {
            commit: commit.map(str::to_string),
            dirty,
            executable_blake3: Blake3Hash::of(exe),
        };
        let a = build(Some("a"), false, b"one");
        assert_eq!(a.compare(None), BinaryComparison::Unrecorded);
        assert_eq!(a.compare(Some(&a)), BinaryComparison::SameBinary);
        assert_eq!(
            a.compare(Some(&build(Some("a"), false, b"two"))),
            BinaryComparison::SameCommit
        );
        assert_eq!(
            a.compare(Some(&build(Some("a"), true, b"two"))),
            BinaryComparison::DifferentBinary
        );
        assert_eq!(
            a.compare(Some(&build(Some("b"), false, b"two"))),
            BinaryComparison::DifferentCommit
        );
        assert_eq!(
            a.compare(Some(&build(None, false, b"two"))),
            BinaryComparison::DifferentBinary
        );
    }

    #[test]
    fn kinds_parse_by_name() {
        for k in EntryKind::ALL {
            assert_eq!(k.as_str().parse::<EntryKind>().unwrap(), k);
            assert_eq!(serde_json::to_value(k).unwrap(), k.as_str());
        }
        assert!(
            "runstarted"
                .parse::<EntryKind>()
                .unwrap_err()
                .contains("run_started")
        );
    }
}
