//! glassbox-lab: where the bot, the runner and the ledger meet.
//!
//! - [`queue`] — the durable job queue (SQLite on one machine, PostgreSQL for many): leases,
//!   heartbeats, retries from the last training snapshot, cancel and hold;
//! - [`db`] — [`Db`], the lab's database: one module per table family holding its
//!   statements (jobs, proposals, forecasts, notifications); [`clock`] — where times come from;
//! - [`handle`] — [`LabHandle`]: an open lab directory (its layout, queue, blobs, config);
//! - [`flow`] — [`Flow`]: proposals and maintainers' decisions become ledger entries and jobs;
//!   it implements the bot's `LabPort`;
//! - [`worker`] — [`Worker`]: leases a job, trains it with the runner, records `run_started`,
//!   metric chunks, checkpoints and the `result`, and survives its own death (another worker
//!   resumes from the checkpoint);
//! - [`recorder`] — [`Recorder`]: blobs and entries, durably, from any process on the lab;
//! - [`outbox`] — notices for the bot, written after the entries they announce (alerts too:
//!   a run's first anomaly, a stalled run; [`stall`] tells when a run has stalled);
//! - [`dataset`], [`tokens`] and [`corpus`] — corpora as blobs with `dataset` entries,
//!   tokenizers and token shards with `tokenizer` and `tokenized` entries, and the runner's
//!   corpus store over the blob store;
//! - [`eval`] — evaluation suites on the record, a snapshot scored on one (lm-eval-harness's
//!   definitions) with the contamination figure beside it;
//! - [`ladder`] — scaling ladders: rungs, the fit, the pre-registered forecast, the target;
//! - [`reproduce`] — re-running a recorded run from the ledger and comparing it (bitwise, or
//!   within tolerances for another backend), and the `[reproduce]` policy that queues it on
//!   another worker by itself;
//! - [`sweep`] — sweeps: children proposed together, one approval of the set, the gate;
//! - [`service`] — the running lab (`serve`): bot + webhook route, notice delivery, worker;
//! - [`config`] — [`LabConfig`]: budgets, quotas, job order, worker timing;
//! - [`limits`] — the `[limits]` on memory, metric volume and wall time applied to a spec;
//! - [`local`] — a run or sweep on this machine through the lab (`glassbox run`).
//!
//! The lab owns the mutable operational state (the queue database); the immutable record is
//! the ledger's, and every transition is written there before it is announced. It does not
//! train (the runner does), hash records (schemas), or speak HTTP (web, bot).

pub mod artifact;
pub mod cancel;
pub mod clock;
pub mod config;
pub mod corpus;
pub mod dataset;
pub mod db;
pub mod error;
pub mod eval;
pub mod export;
pub mod flow;
pub mod forecast;
pub mod handle;
pub mod job;
pub mod ladder;
pub mod limits;
pub mod local;
pub mod outbox;
pub mod queue;
pub mod recorder;
pub mod reproduce;
pub mod sequencer;
pub mod service;
pub mod stall;
pub mod tokens;
pub mod trained;
pub mod worker;

pub use config::LabConfig;
pub use db::{Db, Durability};
pub use error::LabError;
pub use flow::{Flow, NewProposal};
pub use handle::{LabHandle, LabOptions};
pub use queue::{
    CancelOutcome, Clock, Engine, Heartbeat, Job, JobId, JobKind, JobState, NewJob, Queue,
    QueueError, WorkerId,
};
pub use recorder::Recorder;
pub use worker::{JobEnd, LiveSink, Worker, WorkerOptions};
