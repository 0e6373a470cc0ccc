//! glassbox-schemas: the contracts every other glassbox crate speaks.
//!
//! - [`spec::ExperimentSpec`] — what a proposer asks the lab to train, with every default;
//! - [`validate`] — TOML/JSON text to a spec, reporting *all* mistakes with field paths;
//! - [`canonical`] — RFC 8785 canonical JSON and BLAKE3 hashes ([`SpecHash`]);
//! - [`cost`] — parameters, FLOPs and memory of a spec (the one cost model);
//! - [`record`] — ledger entry envelope and the body of each entry kind;
//! - [`data`] — corpus formats, and the `tokenizer` and `tokenized` entry bodies;
//! - [`eval`] — evaluation suites and results, `[evals]` and `eval:` metric names;
//! - [`metrics`] — metric names (Marin/Levanter conventions) and the metric line format;
//! - [`run`] — what a run reports: its outcome and `summary.json`;
//! - [`ladder`] — scaling-ladder files: a base spec plus rungs, each a full spec;
//! - [`sweep`] — sweep files: a base spec plus values of some fields, one child per combination;
//! - [`schema`] — the JSON Schema derived from the types;
//! - [`issue_form`] — the labels of the GitHub experiment issue form.
//!
//! Serialization is a boundary: this crate owns the wire and record formats, and the others
//! convert into them explicitly. It does no I/O beyond parsing the strings it is given, and it
//! knows nothing of storage, training, GitHub or HTTP.

pub mod canonical;
pub mod cost;
pub mod data;
pub mod eval;
pub mod hash;
pub mod issue_form;
pub mod ladder;
pub mod literals;
pub mod metrics;
pub mod record;
pub mod run;
pub mod schema;
pub mod spec;
pub mod spec_error;
pub mod sweep;
pub mod validate;

pub use canonical::spec_hash;
pub use cost::{CostEstimate, estimate};
pub use hash::{Blake3Hash, BlobHash, HashParseError, SpecHash};
pub use record::{
    EntryKind, ExperimentId, ExperimentPhase, JobId, LedgerEntry, RefRole, RunId, RunPhase,
    RunStatus,
};
pub use spec::ExperimentSpec;
pub use validate::{FieldError, SpecError, parse_toml};
