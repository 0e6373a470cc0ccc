//! glassbox-runner: trains the MoE transformers that experiments ask for.
//!
//! - [`backend::Backend`] — the op-level boundary (forward + backward kernel per op);
//!   [`backend::cpu::CpuBackend`] is the deterministic reference implementation.
//! - [`model`] — the model of DESIGN.md written once against the backend trait.
//! - [`inference`] — scoring a text and generating after a prompt ([`decode`]'s key/value
//!   cache, [`sampling`], [`text`]); [`hf`] — the model as its `transformers` twin.
//!
//! The runner takes a spec and data and reports through an observer. It knows nothing of
//! GitHub, HTTP or the ledger.

pub mod anomaly;
pub mod backend;
pub mod data;
pub mod decode;
pub mod error;
pub mod hf;
pub mod inference;
pub mod model;
pub mod observer;
pub mod progress;
pub mod rng;
pub mod sampling;
pub mod scalar;
pub mod scaling;
mod shared_context;
pub mod snapshot;
pub mod text;
pub mod train;

pub use error::RunnerError;
