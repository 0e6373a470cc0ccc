//! glassbox-ledger: the lab's public, tamper-evident record.
//!
//! - [`blob`] — content-addressed BLAKE3 blob store ([`BlobStore`], [`LocalBlobStore`]);
//! - [`merkle`] — RFC 6962 SHA-256 Merkle math, inclusion/consistency proofs and verifiers;
//! - [`tiles`] — the C2SP tlog-tiles layout and [`tiles::TreeBuilder`], the tree's right edge;
//! - [`checkpoint`] — C2SP signed-note checkpoints with Ed25519 keys;
//! - [`cosignature`] — C2SP tlog-cosignature (timestamped Ed25519) and the witness quorum;
//!   [`witness`] — a C2SP tlog-witness; [`cosigning`] — the log asking its witnesses;
//! - [`log`] — [`LogWriter`] (durable group-committed appends, one writer per lab by OS lock)
//!   and [`LogReader`] (entries and proofs from a directory or HTTP [`source`]);
//! - [`audit`] — the full check of a log; [`verify`] — the auditor's policy around it (which
//!   key is trusted, what was seen before); [`seen`] — the auditor's memory, by target;
//!   [`monitor`] — following a live log, checking only what is new;
//! - [`archive`] — every checkpoint the writer installed; [`precedence`] — proof that one
//!   entry was published (signed, cosigned) before another was sequenced;
//! - [`index`] — the derived sqlx index (SQLite or PostgreSQL), with each finished run's curves
//!   downsampled once ([`lttb`]) for a dashboard's first view; [`board`] — leaderboards
//!   derived from the entries alone, ranking only reproduced runs;
//! - [`bucket`] — the public layout in an object-store bucket, and [`bucket::Mirror`] copying
//!   the log there; [`publish`] — git mirroring; [`lab`] — the lab directory layout;
//! - [`private_runtime`] — a component's own Tokio runtime, driven from synchronous code.
//!
//! The key design choice: the log is the only source of truth, stored in the standard C2SP
//! layout so that third-party tlog clients and witnesses can check it; everything else (the
//! index, git mirrors) is derived from it and checked against it. Entries are the canonical
//! JSON records of `glassbox-schemas`; this crate stores and proves them but does not decide
//! who writes which record when (that is `glassbox-lab`).

pub mod archive;
pub mod audit;
pub mod blob;
pub mod board;
pub mod bucket;
pub mod checkpoint;
pub mod cosignature;
pub mod cosigning;
pub mod error;
mod fsync;
pub mod index;
pub mod lab;
pub mod log;
pub mod lttb;
pub mod merkle;
pub mod monitor;
mod note_error;
pub mod note_key;
pub mod precedence;
pub mod private_runtime;
pub mod publish;
#[cfg(feature = "aws")]
pub mod s3;
pub mod seen;
pub mod source;
pub mod store;
pub mod tiles;
pub mod verify;
pub mod witness;

pub use audit::{AuditFailure, AuditOptions, AuditReport, audit};
pub use blob::{BlobStore, LocalBlobStore, PutOutcome, WithBlobStore};
pub use bucket::{Bucket, Mirror};
pub use checkpoint::{Checkpoint, SignedCheckpoint, SigningKey, VerifierKey};
pub use error::Error;
pub use lab::LabDir;
pub use log::{LockMode, LogReader, LogWriter};
pub use merkle::{LeafIndex, MerkleHash, TreeSize};
pub use source::{DirSource, HttpSource, LogSource, ReadLimit};
pub use store::{open_bucket_with_env, open_store, open_store_with_env};
