//! glassbox-python: the extension module `glassbox._glassbox` behind the `glassbox` Python
//! package (PyO3, built by maturin as one abi3 wheel for CPython >= 3.9).
//!
//! - [`reading`] — what a lab gives ([`reading::LabReader`]) and a lab directory read in plain
//!   Rust: rows (the dashboard's catalog and run search, so a query gives the JSON API's
//!   rows), entries, blobs, specs, proofs, the auditor; [`remote`] — the same from a running
//!   `glassbox serve`, through its log, blobs and JSON API;
//! - [`metrics`] — a run's metric chunks as columns at full resolution, and the x axes;
//! - [`inclusion`] — checking an inclusion proof offline;
//! - [`lab`] — the Python class `Lab` over them, and the Python exceptions.
//!
//! The key design choice: this crate translates, it does not decide. Every read, query and
//! check is the Rust code the CLI and the dashboard run (`glassbox-ledger`, `glassbox-web`),
//! so Python sees the same rows and the same verdicts. Rows cross as JSON text (small); metric
//! points cross as flat byte buffers that numpy and Arrow wrap without a copy per point. The
//! pure-Python side (`glassbox/__init__.py`) builds the typed objects and the DataFrames.
//!
//! Not here: anything the binary does (training, serving, writing the record). The module
//! never writes the log or the blobs; it brings the lab's derived index up to date, as
//! `glassbox ledger log` does.

pub mod inclusion;
pub mod lab;
pub mod metrics;
pub mod reading;
pub mod remote;

use pyo3::prelude::*;

/// The module `glassbox._glassbox`.
#[pymodule]
fn _glassbox(m: &Bound<'_, PyModule>) -> PyResult<()> {
    lab::register(m)
}
