//! The Python class `glassbox._glassbox.Lab` and the exceptions: thin methods over
//! [`LabReader`]s (a lab directory or bucket, [`crate::reading::IndexedLab`]; a server,
//! [`crate::remote::RemoteLab`]) that release the GIL while Rust reads, catch any panic before
//! it reaches Python, and turn each [`ReadError`] into its exception with the Rust message.
//!
//! Rows come back as JSON text and metric points as native-endian byte buffers (`u32` name
//! codes, `u64` steps, `f64` x and values); `glassbox/__init__.py` turns them into typed
//! objects, numpy arrays, DataFrames and Arrow tables.
//!
//! Not here: what is read or how (`reading`, `metrics`).

use std::collections::BTreeSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::inclusion;
use crate::reading::{IndexedLab, LabReader, ReadError, VerifyArgs};
use crate::remote::RemoteLab;
use glassbox_schemas::metrics::XAxis;

create_exception!(
    _glassbox,
    GlassboxError,
    PyException,
    "Base class of every error glassbox raises (its message is the Rust error's)."
);
create_exception!(
    _glassbox,
    LabNotFoundError,
    GlassboxError,
    "There is no lab at the source given (the message says what is missing)."
);
create_exception!(
    _glassbox,
    NotFoundError,
    GlassboxError,
    "No run, experiment, entry or blob of that name in the lab."
);
create_exception!(
    _glassbox,
    QueryError,
    GlassboxError,
    "A run-search query that does not parse; `column` is the 1-based column of the error."
);
create_exception!(
    _glassbox,
    VerificationError,
    GlassboxError,
    "The record is not what it should be; the message names the first bad item."
);

/// What a guarded call ended with when it did not return.
#[derive(Debug)]
pub enum Failure {
    /// The read failed.
    Read(ReadError),
    /// Rust panicked: a bug, reported as an exception rather than crossing into Python.
    Panic(String),
}

impl From<ReadError> for Failure {
    fn from(e: ReadError) -> Self {
        Failure::Read(e)
    }
}

/// Runs `f`, catching a panic so that none unwinds into the interpreter.
pub fn guarded<T>(f: impl FnOnce() -> Result<T, Failure>) -> Result<T, Failure> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".into());
        Err(Failure::Panic(what))
    })
}

/// The Python exception for `f` (needs the GIL for the attributes it sets).
pub fn to_py(py: Python<'_>, f: Failure) -> PyErr {
    match f {
        Failure::Panic(what) => GlassboxError::new_err(format!(
            "internal error in glassbox (a bug; please report it): {what}"
        )),
        Failure::Read(e) => {
            let message = e.to_string();
            match e {
                ReadError::NoLab(_) => LabNotFoundError::new_err(message),
                ReadError::NotFound(_) => NotFoundError::new_err(message),
                ReadError::Invalid(_) => PyValueError::new_err(message),
                ReadError::Verification(_) => VerificationError::new_err(message),
                ReadError::Read(_) => GlassboxError::new_err(message),
                ReadError::Query { column, .. } => {
                    let err = QueryError::new_err(message);
                    // The attribute is a convenience; the message names the column as well.
                    let _ = err.value(py).setattr("column", column);
                    err
                }
            }
        }
    }
}

/// Runs `f` without the GIL and guarded, then maps its failure to an exception.
fn call<T: Send>(py: Python<'_>, f: impl FnOnce() -> Result<T, Failure> + Send) -> PyResult<T> {
    py.detach(|| guarded(f)).map_err(|e| to_py(py, e))
}

fn json_text(v: &impl serde::Serialize) -> Result<String, Failure> {
    serde_json::to_string(v)
        .map_err(|e| Failure::Read(ReadError::Read(format!("cannot encode JSON: {e}"))))
}

/// A lab, opened for reading: a directory, a bucket or a server.
#[pyclass(module = "glassbox._glassbox", name = "Lab", frozen)]
#[derive(Debug)]
pub struct Lab {
    inner: Box<dyn LabReader>,
}

#[pymethods]
impl Lab {
    /// Opens `source`: a lab directory, a bucket the lab publishes to (`s3://bucket/prefix`,
    /// with the `AWS_*` variables `glassbox verify` reads), or the URL of a running
    /// `glassbox serve` (`http://...`); raises `LabNotFoundError` when there is no lab there.
    #[new]
    fn new(py: Python<'_>, source: PathBuf) -> PyResult<Self> {
        let text = source.to_string_lossy().into_owned();
        let inner = call(py, || -> Result<Box<dyn LabReader>, Failure> {
            if text.starts_with("http://") || text.starts_with("https://") {
                Ok(Box::new(RemoteLab::open(&text)?))
            } else if text.starts_with("s3://") {
                Ok(Box::new(IndexedLab::open_bucket(&text)?))
            } else if text.contains("://") {
                Err(ReadError::Invalid(format!(
                    "source = {text:?}: use a lab directory, s3://bucket/prefix or the http(s):// URL of a glassbox server"
                ))
                .into())
            } else {
                Ok(Box::new(IndexedLab::open(&source)?))
            }
        })?;
        Ok(Lab { inner })
    }

    /// Where the lab is read from (a directory or a URL).
    #[getter]
    fn source(&self) -> String {
        self.inner.describe()
    }

    /// The runs matching `query`, as a JSON array of rows.
    #[pyo3(signature = (query=None))]
    fn runs_json(&self, py: Python<'_>, query: Option<String>) -> PyResult<String> {
        call(py, || json_text(&self.inner.runs(query.as_deref())?))
    }

    /// The experiments with a row matching `query`, as a JSON array of rows.
    #[pyo3(signature = (query=None))]
    fn experiments_json(&self, py: Python<'_>, query: Option<String>) -> PyResult<String> {
        call(py, || json_text(&self.inner.experiments(query.as_deref())?))
    }

    /// Every point of a run's metrics: `(names, codes, steps, x, values)`, the last four
    /// native-endian buffers of `u32`, `u64`, `f64`, `f64`, one element per point.
    #[pyo3(signature = (run, names=None, x="step"))]
    #[allow(clippy::type_complexity)]
    fn metric_columns<'py>(
        &self,
        py: Python<'py>,
        run: String,
        names: Option<Vec<String>>,
        x: &str,
    ) -> PyResult<(
        Vec<String>,
        Bound<'py, PyBytes>,
        Bound<'py, PyBytes>,
        Bound<'py, PyBytes>,
        Bound<'py, PyBytes>,
    )> {
        let axis = XAxis::parse(x).map_err(|e| PyValueError::new_err(format!("x = {e}")))?;
        let only: Option<BTreeSet<String>> = names.map(|n| n.into_iter().collect());
        let (columns, xs) = call(py, || Ok(self.inner.metrics(&run, only.as_ref(), axis)?))?;
        let codes = bytes_of(py, &columns.codes, |v| v.to_ne_bytes())?;
        let steps = bytes_of(py, &columns.steps, |v| v.to_ne_bytes())?;
        let xs = bytes_of(py, &xs, |v| v.to_ne_bytes())?;
        let values = bytes_of(py, &columns.values, |v| v.to_ne_bytes())?;
        Ok((columns.names, codes, steps, xs, values))
    }

    /// A run's row and per-metric figures, as JSON.
    fn summary_json(&self, py: Python<'_>, run: String) -> PyResult<String> {
        call(py, || json_text(&self.inner.summary(&run)?))
    }

    /// Entries of `kind` from index `since` on, as a JSON array.
    #[pyo3(signature = (kind=None, since=None))]
    fn entries_json(
        &self,
        py: Python<'_>,
        kind: Option<String>,
        since: Option<u64>,
    ) -> PyResult<String> {
        call(py, || {
            json_text(&self.inner.entries(kind.as_deref(), since)?)
        })
    }

    /// Entry `index`, read from the log, as JSON.
    fn entry_json(&self, py: Python<'_>, index: u64) -> PyResult<String> {
        call(py, || json_text(&self.inner.entry(index)?))
    }

    /// A blob's bytes, checked against its hash.
    fn blob<'py>(&self, py: Python<'py>, hash: String) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = call(py, || Ok(self.inner.blob(&hash)?))?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// An experiment's current spec, as JSON.
    fn spec_json(&self, py: Python<'_>, experiment: String) -> PyResult<String> {
        call(py, || json_text(&self.inner.spec(&experiment)?))
    }

    /// The inclusion proof of entry `index`, as JSON.
    fn proof_json(&self, py: Python<'_>, index: u64) -> PyResult<String> {
        call(py, || json_text(&self.inner.proof(index)?))
    }

    /// Runs the auditor; the report as JSON, or `VerificationError` naming the bad item.
    /// With `witnesses`, the checkpoint must carry cosignatures from `quorum` of them (all by
    /// default).
    #[pyo3(signature = (vkey=None, state_dir=None, skip_blobs=false, witnesses=Vec::new(), quorum=None))]
    fn verify_json(
        &self,
        py: Python<'_>,
        vkey: Option<String>,
        state_dir: Option<PathBuf>,
        skip_blobs: bool,
        witnesses: Vec<String>,
        quorum: Option<usize>,
    ) -> PyResult<String> {
        let args = VerifyArgs {
            vkey,
            state_dir,
            skip_blobs,
            witnesses,
            quorum,
        };
        call(py, || json_text(&self.inner.verify(&args)?))
    }

    fn __repr__(&self) -> String {
        format!("Lab({:?})", self.inner.describe())
    }
}

/// `items` as one bytes object, each element written by `f`.
fn bytes_of<'py, T: Copy, const N: usize>(
    py: Python<'py>,
    items: &[T],
    f: impl Fn(T) -> [u8; N],
) -> PyResult<Bound<'py, PyBytes>> {
    PyBytes::new_with(py, items.len() * N, |buf| {
        for (chunk, item) in buf.chunks_exact_mut(N).zip(items) {
            chunk.copy_from_slice(&f(*item));
        }
        Ok(())
    })
}

/// Checks an inclusion proof offline; raises `VerificationError` saying which check failed.
#[pyfunction]
#[pyo3(signature = (entry, index, tree_size, proof, root, checkpoint=None, vkey=None))]
#[allow(clippy::too_many_arguments)]
fn verify_inclusion(
    py: Python<'_>,
    entry: &[u8],
    index: u64,
    tree_size: u64,
    proof: Vec<String>,
    root: &str,
    checkpoint: Option<&str>,
    vkey: Option<&str>,
) -> PyResult<()> {
    let p = inclusion::Proof {
        index,
        tree_size,
        proof: &proof,
        root,
        checkpoint,
    };
    guarded(|| {
        inclusion::check(entry, &p, vkey).map_err(|e| Failure::Read(ReadError::Verification(e)))
    })
    .map_err(|e| to_py(py, e))
}

/// Adds the class, the function and the exceptions to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<Lab>()?;
    m.add_function(wrap_pyfunction!(verify_inclusion, m)?)?;
    m.add("GlassboxError", py.get_type::<GlassboxError>())?;
    m.add("LabNotFoundError", py.get_type::<LabNotFoundError>())?;
    m.add("NotFoundError", py.get_type::<NotFoundError>())?;
    m.add("QueryError", py.get_type::<QueryError>())?;
    m.add("VerificationError", py.get_type::<VerificationError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_a_glassbox_error_not_an_unwind() {
        Python::initialize();
        Python::attach(|py| {
            let got = guarded(|| -> Result<(), Failure> { panic!("index out of bounds") });
            let err = to_py(py, got.unwrap_err());
            assert!(err.is_instance_of::<GlassboxError>(py));
            assert!(
                err.to_string().contains(
                    "internal error in glassbox (a bug; please report it): index out of bounds"
                ),
                "{err}"
            );
        });
    }

    #[test]
    fn a_bad_query_carries_its_column() {
        Python::initialize();
        Python::attach(|py| {
            let err = to_py(
                py,
                Failure::Read(ReadError::Query {
                    message: "query \"a >\": column 4: expected a value, found end of query".into(),
                    column: 4,
                }),
            );
            assert!(err.is_instance_of::<QueryError>(py));
            let column: usize = err.value(py).getattr("column").unwrap().extract().unwrap();
            assert_eq!(column, 4);
        });
    }
}
