//! glassbox-lab: where the bot, the runner and the ledger meet.
//!
//! Today this crate holds the durable job queue ([`queue::Queue`]): approved experiments waiting
//! for a worker, leased with heartbeats, retried from their last checkpoint when a worker dies,
//! on SQLite (one machine) or PostgreSQL (many). The flow that drives it (proposal -> approval ->
//! job -> run -> ledger -> notification) builds on it.
//!
//! The lab owns the mutable operational state (the queue); the immutable record is the ledger's.
//! It does not train (the runner does), hash records (schemas), or speak HTTP (web, bot).

pub mod queue;

pub use queue::{
    CancelOutcome, Clock, Engine, Heartbeat, Job, JobId, JobState, NewJob, Queue, QueueError,
    WorkerId,
};
