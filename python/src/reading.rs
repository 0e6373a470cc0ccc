//! What a lab gives Python ([`LabReader`]: rows, metric points, entries, blobs, specs, proofs,
//! the auditor's verdict) and its reading of a lab directory or a bucket through an index of
//! the log ([`IndexedLab`]), in plain Rust:
//! the rows of runs and experiments (the dashboard's catalog, filtered by its run search), a
//! run's metric chunks at full resolution, entries, blobs checked against their hash, specs,
//! inclusion proofs and the auditor.
//!
//! Rows are the JSON API's own types (`RunRow`, `ExperimentRow`, `EntryRow`, `InclusionProof`
//! of `glassbox-web`) serialised to JSON values, plus the full spec of each row, so a row here
//! and a row of `/api/v1/runs` agree by construction. The index (`<lab>/index.db`, derived from
//! the log; a temporary one for a bucket) is brought up to date with the log before a query
//! reads it, as `glassbox ledger log` does; `verify` does not need it caught up and compares a
//! lab directory's with the log.
//!
//! Not here: Python objects or the GIL (`lab`), the metric columns' layout (`metrics`), a lab
//! behind a server (`remote`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};

use glassbox_ledger::audit::AuditPhase;
use glassbox_ledger::blob::copy_verified;
use glassbox_ledger::cosignature::{CosignerKey, WitnessPolicy};
use glassbox_ledger::index::Index;
use glassbox_ledger::index::queries::EntryFilter;
use glassbox_ledger::merkle::{LeafIndex, TreeSize, leaf_hash};
use glassbox_ledger::seen::SeenCheckpoints;
use glassbox_ledger::verify::{IndexCheck, Target, VerifyOptions};
use glassbox_ledger::{BlobStore, DirSource, LabDir, LogReader, LogSource, ReadLimit, VerifierKey};
use glassbox_schemas::{BlobHash, EntryKind, ExperimentSpec, LedgerEntry, RefRole};
use glassbox_web::api::{EntryRow, InclusionProof};
use glassbox_web::catalog::{Catalog, parse_spec_text};
use rayon::prelude::*;
use serde_json::{Value, json};

use crate::metrics::MetricColumns;
use glassbox_schemas::metrics::XAxis;

/// Why a read failed; each becomes its own Python exception.
#[derive(Debug, Clone, PartialEq)]
pub enum ReadError {
    /// There is no lab where one was named.
    NoLab(String),
    /// A query that does not parse: the message names the column.
    Query {
        /// The parser's message (column, expected, found).
        message: String,
        /// 1-based column, in characters.
        column: usize,
    },
    /// Nothing of that name (run, experiment, entry, blob).
    NotFound(String),
    /// An argument out of its domain (an unknown entry kind, a malformed hash).
    Invalid(String),
    /// The record is not what it should be: the first bad item, named.
    Verification(String),
    /// Could not read (I/O, the index database).
    Read(String),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::NoLab(m)
            | ReadError::NotFound(m)
            | ReadError::Invalid(m)
            | ReadError::Verification(m)
            | ReadError::Read(m) => f.write_str(m),
            ReadError::Query { message, .. } => f.write_str(message),
        }
    }
}

impl From<glassbox_ledger::Error> for ReadError {
    fn from(e: glassbox_ledger::Error) -> Self {
        match e {
            glassbox_ledger::Error::NoLab { .. } => ReadError::NoLab(e.to_string()),
            glassbox_ledger::Error::Corrupt { .. } => ReadError::Verification(e.to_string()),
            other => ReadError::Read(other.to_string()),
        }
    }
}

impl From<glassbox_web::WebError> for ReadError {
    fn from(e: glassbox_web::WebError) -> Self {
        ReadError::Read(e.to_string())
    }
}

type Result<T> = std::result::Result<T, ReadError>;

/// How to verify (the CLI's `verify` flags that make sense from Python).
#[derive(Debug, Clone, Default)]
pub struct VerifyArgs {
    /// The verifier key to trust (`name+hexid+base64`); else the one remembered for this
    /// lab, else the lab's own `vkey`, trusted on first use.
    pub vkey: Option<String>,
    /// Where checkpoints seen before are remembered (else the CLI's default).
    pub state_dir: Option<PathBuf>,
    /// Do not re-hash the blobs.
    pub skip_blobs: bool,
    /// Witness keys (`<name>+<hex id>+<base64>`) whose cosignatures the checkpoint must carry.
    pub witnesses: Vec<String>,
    /// How many of `witnesses` must have cosigned (all of them when `None`).
    pub quorum: Option<usize>,
}

/// What `Lab` reads, from a lab directory or a bucket ([`IndexedLab`]) or a server
/// ([`crate::remote::RemoteLab`]): the same rows, points and verdicts from either.
pub trait LabReader: Send + Sync + std::fmt::Debug {
    /// Where the lab is read from (a directory or a URL).
    fn describe(&self) -> String;
    /// The runs matching `query` (the dashboard's search language), each a `RunRow` with its
    /// spec under `spec`, in run id order.
    fn runs(&self, query: Option<&str>) -> Result<Vec<Value>>;
    /// The experiments with a row matching `query`, each an `ExperimentRow` with its
    /// `status` and its current spec under `spec`, in id order.
    fn experiments(&self, query: Option<&str>) -> Result<Vec<Value>>;
    /// Every point of `run`'s metrics (those in `names`, else all) from its metric chunks, in
    /// log order, each chunk checked against its hash, sorted by name then step; and the x
    /// column for `axis`.
    fn metrics(
        &self,
        run: &str,
        names: Option<&BTreeSet<String>>,
        axis: XAxis,
    ) -> Result<(MetricColumns, Vec<f64>)>;
    /// Entries of `kind` (all when `None`) from index `since` on, in log order, as the API's
    /// `EntryRow` with the canonical bytes under `raw` (text).
    fn entries(&self, kind: Option<&str>, since: Option<u64>) -> Result<Vec<Value>>;
    /// Entry `i`, read from the log (under the signed checkpoint).
    fn entry(&self, i: u64) -> Result<Value>;
    /// A blob's bytes, checked against its hash (`blake3:<hex>`).
    fn blob(&self, hash: &str) -> Result<Vec<u8>>;
    /// The inclusion proof of entry `i` in the current checkpoint's tree (the API's shape).
    fn proof(&self, i: u64) -> Result<Value>;
    /// Runs the auditor (`glassbox verify`); a bad item is a [`ReadError::Verification`]
    /// naming it, a pass is the report.
    fn verify(&self, args: &VerifyArgs) -> Result<Value>;

    /// The current spec of `experiment` (with every default filled in, as it was hashed).
    fn spec(&self, experiment: &str) -> Result<Value> {
        let rows = self.experiments(None)?;
        let row = rows.iter().find(|r| r["id"] == experiment).ok_or_else(|| {
            ReadError::NotFound(format!("no experiment {experiment:?} in the lab"))
        })?;
        match &row["spec"] {
            Value::Null => Err(ReadError::NotFound(format!(
                "experiment {experiment:?} has no readable spec blob"
            ))),
            spec => Ok(spec.clone()),
        }
    }

    /// The run's row, or a not-found error naming it.
    fn run_row(&self, run: &str) -> Result<Value> {
        self.runs(None)?
            .into_iter()
            .find(|r| r["id"] == run)
            .ok_or_else(|| ReadError::NotFound(format!("no run {run:?} in the lab")))
    }

    /// The run's row and, per metric, how many points, the step range, the last, least and
    /// greatest finite value.
    fn summary(&self, run: &str) -> Result<Value> {
        let row = self.run_row(run)?;
        let (columns, _) = self.metrics(run, None, XAxis::Step)?;
        Ok(json!({ "run": row, "metrics": metric_figures(&columns) }))
    }
}

/// Per metric of sorted `columns`: points, step range, last, least and greatest finite value.
fn metric_figures(columns: &MetricColumns) -> serde_json::Map<String, Value> {
    let mut metrics = serde_json::Map::new();
    let mut start = 0;
    while start < columns.len() {
        let code = columns.codes[start];
        let end = start + columns.codes[start..].partition_point(|c| *c == code);
        let values = &columns.values[start..end];
        let finite = values.iter().copied().filter(|v| v.is_finite());
        let (min, max) = finite.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(v), b.max(v))
        });
        metrics.insert(
            columns.names[code as usize].clone(),
            json!({
                "points": end - start,
                "first_step": columns.steps[start],
                "last_step": columns.steps[end - 1],
                "last": finite_or_null(values[values.len() - 1]),
                "min": finite_or_null(min),
                "max": finite_or_null(max),
            }),
        );
        start = end;
    }
    metrics
}

/// Reads the metric chunks `chunks` (entry index, chunk hash, its bytes) into columns, checking
/// each against its hash, and computes the x column; `spec` is the run's spec row value.
pub fn metric_columns(
    run: &str,
    chunks: impl Iterator<Item = Result<(u64, BlobHash, Vec<u8>)>>,
    names: Option<&BTreeSet<String>>,
    axis: XAxis,
    spec: &Value,
) -> Result<(MetricColumns, Vec<f64>)> {
    // Chunks are hashed and parsed on every core, then joined in log order.
    let chunks = chunks.collect::<Result<Vec<_>>>()?;
    let parsed = chunks
        .par_iter()
        .map(|(index, hash, bytes)| {
            let what = format!("metric chunk {hash} (entry {index})");
            let got = glassbox_schemas::Blake3Hash::from(blake3::hash(bytes));
            if got != hash.0 {
                return Err(ReadError::Verification(format!(
                    "{what}: the stored blob hashes to {got}"
                )));
            }
            let mut part = MetricColumns::default();
            part.read_chunk(&bytes[..], names, &what)
                .map_err(ReadError::Read)?;
            Ok(part)
        })
        .collect::<Result<Vec<_>>>()?;
    let mut columns = MetricColumns::default();
    for part in parsed {
        columns.append(part);
    }
    if let Some(wanted) = names {
        let have: BTreeSet<&str> = columns.names.iter().map(String::as_str).collect();
        if let Some(missing) = wanted.iter().find(|n| !have.contains(n.as_str())) {
            return Err(ReadError::NotFound(format!(
                "run {run:?} recorded no metric {missing:?}"
            )));
        }
    }
    columns.sort();
    let flops_per_token = serde_json::from_value::<ExperimentSpec>(spec.clone())
        .ok()
        .map(|s| glassbox_schemas::estimate(&s).flops_per_token);
    let x = columns
        .x(axis, flops_per_token)
        .map_err(ReadError::Invalid)?;
    Ok((columns, x))
}

/// The entry kind named `k`, or an error listing the kinds.
pub fn entry_kind(k: &str) -> Result<EntryKind> {
    EntryKind::ALL
        .into_iter()
        .find(|e| e.as_str() == k)
        .ok_or_else(|| {
            ReadError::Invalid(format!(
                "kind = {k:?}: not an entry kind; the kinds are {}",
                EntryKind::ALL.map(|k| k.as_str()).join(", ")
            ))
        })
}

/// A lab read through an index of its log: a lab directory (its own `index.db`) or the
/// public layout a lab publishes to a bucket (`s3://bucket/prefix`: log, `vkey`, blobs; no
/// index there, so the log is indexed into a temporary directory of this process on open).
pub struct IndexedLab {
    place: Place,
    vkey: VerifierKey,
    blobs: Box<dyn BlobStore>,
    runtime: tokio::runtime::Runtime,
    index: Index,
    catalog: Catalog,
}

/// Where an [`IndexedLab`]'s log and blobs are.
enum Place {
    /// A lab directory.
    Dir(LabDir),
    /// A bucket, named as given, and the temporary directory its index lives in (removed
    /// when the lab is dropped).
    Bucket {
        url: String,
        _index_dir: tempfile::TempDir,
    },
}

impl std::fmt::Debug for IndexedLab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexedLab")
            .field("source", &self.describe())
            .field("vkey", &self.vkey.to_string())
            .finish_non_exhaustive()
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    // As many workers as cores, as the command line's runtime has: the audit hashes on them.
    tokio::runtime::Builder::new_multi_thread()
        .thread_name("glassbox-python")
        .enable_all()
        .build()
        .map_err(|e| ReadError::Read(format!("cannot start a runtime: {e}")))
}

/// The bucket at `url` (`s3://bucket/prefix`), its credentials and endpoint from the `AWS_*`
/// variables as `glassbox verify s3://...` reads them.
fn open_bucket(url: &str) -> Result<Box<dyn glassbox_ledger::source::Bucket>> {
    glassbox_ledger::open_bucket_with_env(url, &|k| std::env::var(k).ok())
        .map_err(|e| ReadError::NoLab(format!("cannot open the bucket {url}: {e}")))
}

impl IndexedLab {
    /// Opens the lab directory at `root`; an error says what is missing.
    pub fn open(root: &Path) -> Result<IndexedLab> {
        let lab = LabDir::open(root)?;
        let vkey = lab.verifier_key()?;
        let runtime = runtime()?;
        let index = runtime.block_on(Index::connect(&lab.index_path().display().to_string()))?;
        Ok(IndexedLab {
            blobs: Box::new(lab.blobs()),
            place: Place::Dir(lab),
            vkey,
            runtime,
            index,
            catalog: Catalog::default(),
        })
    }

    /// Opens the lab a bucket holds (`s3://bucket/prefix`), trusting its `vkey` as a lab
    /// directory's own is trusted; an error says what is missing.
    pub fn open_bucket(url: &str) -> Result<IndexedLab> {
        let url = url.trim_end_matches('/').to_string();
        let bucket = open_bucket(&url)?;
        let text = bucket
            .read("vkey", ReadLimit::VKEY)?
            .ok_or_else(|| ReadError::NoLab(format!("no lab at {url}: it holds no vkey")))?;
        let vkey: VerifierKey = String::from_utf8_lossy(&text).trim().parse().map_err(|e| {
            ReadError::Verification(format!("{url}/vkey is not a verifier key: {e}"))
        })?;
        if bucket
            .read("log/checkpoint", ReadLimit::CHECKPOINT)?
            .is_none()
        {
            return Err(ReadError::NoLab(format!(
                "no lab at {url}: it holds no log/checkpoint"
            )));
        }
        let blobs = glassbox_ledger::open_store_with_env(&url, &|k| std::env::var(k).ok())?;
        let index_dir = tempfile::Builder::new()
            .prefix("glassbox-bucket-index")
            .tempdir()
            .map_err(|e| ReadError::Read(format!("cannot make a directory for the index: {e}")))?;
        let runtime = runtime()?;
        let db = index_dir.path().join("index.db").display().to_string();
        let index = runtime.block_on(Index::connect(&db))?;
        Ok(IndexedLab {
            place: Place::Bucket {
                url,
                _index_dir: index_dir,
            },
            vkey,
            blobs,
            runtime,
            index,
            catalog: Catalog::default(),
        })
    }

    /// Runs `f` on the log's source: the directory, or the bucket.
    fn with_source<T>(&self, f: impl FnOnce(&dyn LogSource) -> Result<T>) -> Result<T> {
        match &self.place {
            Place::Dir(lab) => f(&DirSource {
                root: lab.root().to_path_buf(),
            }),
            Place::Bucket { url, .. } => match self.blobs.bucket() {
                Some(bucket) => f(bucket),
                None => Err(ReadError::Read(format!("{url} is not read as a bucket"))),
            },
        }
    }

    /// Brings the index up to date with the log (metric chunks and spec fields included).
    fn catch_up(&self) -> Result<()> {
        self.with_source(|source| {
            let reader = LogReader::open(source, &self.vkey)?;
            self.runtime.block_on(
                self.index
                    .sync_with_blobs(&reader, Some(self.blobs.as_ref())),
            )?;
            Ok(())
        })
    }

    /// The spec in blob `blob` as JSON (null when there is none or it does not parse).
    fn spec_in(&self, cache: &mut SpecCache, blob: Option<&str>) -> Result<Value> {
        let spec =
            blob.and_then(|b| cache.get(b, |h| self.blobs.get(h).ok().map(|r| r as Box<dyn Read>)));
        spec_value(spec)
    }

    /// Spec hash -> the blob of the first proposal that named it.
    async fn specs_by_hash(&self) -> Result<HashMap<String, String>> {
        let proposals = self
            .index
            .select_entries(&EntryFilter {
                kinds: &[EntryKind::Proposal],
                ..EntryFilter::default()
            })
            .await?;
        Ok(spec_blobs(proposals.iter().map(|p| p.entry.as_bytes())))
    }
}

/// Spec hash -> the blob of the first of these proposal entries that named it.
pub fn spec_blobs<'a>(proposals: impl Iterator<Item = &'a [u8]>) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for bytes in proposals {
        let Ok(entry) = LedgerEntry::from_bytes(bytes) else {
            continue;
        };
        if let (Some(hash), Some(blob)) = (entry.body.spec_hash(), entry.blob(RefRole::Spec)) {
            out.entry(hash.to_string())
                .or_insert_with(|| blob.to_string());
        }
    }
    out
}

impl LabReader for IndexedLab {
    fn describe(&self) -> String {
        match &self.place {
            Place::Dir(lab) => lab.root().display().to_string(),
            Place::Bucket { url, .. } => url.clone(),
        }
    }

    fn runs(&self, query: Option<&str>) -> Result<Vec<Value>> {
        self.catch_up()?;
        self.runtime.block_on(async {
            let only: Option<BTreeSet<String>> = match parsed(query)? {
                Some(expr) => Some(
                    glassbox_web::search::search(&self.index, &expr)
                        .await?
                        .into_iter()
                        .filter_map(|h| h.run)
                        .collect(),
                ),
                None => None,
            };
            let specs = self.specs_by_hash().await?;
            let cat = self.catalog.read(&self.index, self.blobs.as_ref()).await?;
            let mut spec_cache = SpecCache::default();
            cat.runs
                .values()
                .filter(|r| only.as_ref().is_none_or(|m| m.contains(&r.id)))
                .map(|r| {
                    let mut row = to_value(r)?;
                    let blob = specs.get(&r.spec_hash).map(String::as_str);
                    row["spec"] = self.spec_in(&mut spec_cache, blob)?;
                    Ok(row)
                })
                .collect()
        })
    }

    fn experiments(&self, query: Option<&str>) -> Result<Vec<Value>> {
        self.catch_up()?;
        self.runtime.block_on(async {
            // Parsed here too, so a bad query is a query error rather than a read error.
            parsed(query)?;
            let only = glassbox_web::search::for_filter(&self.index, query).await?;
            let cat = self.catalog.read(&self.index, self.blobs.as_ref()).await?;
            let mut spec_cache = SpecCache::default();
            cat.experiments
                .values()
                .filter(|e| only.as_ref().is_none_or(|m| m.contains(&e.id)))
                .map(|e| {
                    let mut row = to_value(e)?;
                    row["status"] = Value::String(e.status(&cat));
                    row["spec"] = self.spec_in(&mut spec_cache, e.spec_blob.as_deref())?;
                    Ok(row)
                })
                .collect()
        })
    }

    fn metrics(
        &self,
        run: &str,
        names: Option<&BTreeSet<String>>,
        axis: XAxis,
    ) -> Result<(MetricColumns, Vec<f64>)> {
        let row = self.run_row(run)?;
        let artifacts = self
            .runtime
            .block_on(self.index.select_entries(&EntryFilter {
                run: Some(run),
                kinds: &[EntryKind::Artifact],
                ..EntryFilter::default()
            }))?;
        let chunks = artifacts.into_iter().filter_map(|c| {
            let entry = match LedgerEntry::from_bytes(c.entry.as_bytes()) {
                Ok(e) => e,
                Err(e) => return Some(Err(ReadError::Read(format!("entry {}: {e}", c.index)))),
            };
            let hash = BlobHash(*entry.blob(RefRole::Metrics)?);
            let mut bytes = Vec::new();
            Some(
                self.blobs
                    .get(&hash)
                    .and_then(|mut r| {
                        r.read_to_end(&mut bytes)
                            .map_err(glassbox_ledger::Error::io(
                                "cannot read blob",
                                Path::new(&hash.to_string()),
                            ))
                    })
                    .map(|_| (c.index, hash, bytes))
                    .map_err(|e| {
                        ReadError::Read(format!("metric chunk {hash} (entry {}): {e}", c.index))
                    }),
            )
        });
        metric_columns(run, chunks, names, axis, &row["spec"])
    }

    fn entries(&self, kind: Option<&str>, since: Option<u64>) -> Result<Vec<Value>> {
        let kinds = match kind {
            None => Vec::new(),
            Some(k) => vec![entry_kind(k)?],
        };
        self.catch_up()?;
        let rows = self
            .runtime
            .block_on(self.index.select_entries(&EntryFilter {
                kinds: &kinds,
                from: since,
                ..EntryFilter::default()
            }))?;
        rows.into_iter()
            .map(|r| {
                entry_row(
                    r.index,
                    r.kind,
                    r.experiment,
                    r.run,
                    r.time,
                    r.entry.as_bytes(),
                )
            })
            .collect()
    }

    fn entry(&self, i: u64) -> Result<Value> {
        self.with_source(|source| log_entry(source, &self.vkey, i))
    }

    fn blob(&self, hash: &str) -> Result<Vec<u8>> {
        let hash: BlobHash = hash
            .parse()
            .map_err(|e| ReadError::Invalid(format!("hash {hash:?}: {e}")))?;
        if !self.blobs.has(&hash)? {
            return Err(ReadError::NotFound(format!(
                "no blob {hash} in {}",
                self.blobs.describe()
            )));
        }
        let mut out = Vec::new();
        copy_verified(self.blobs.as_ref(), &hash, &mut out)?;
        Ok(out)
    }

    fn proof(&self, i: u64) -> Result<Value> {
        self.with_source(|source| log_proof(source, &self.vkey, i))
    }

    /// The CLI's `glassbox verify DIR`: the checkpoint's signature, every tile and entry, every
    /// blob re-hashed, the index compared with the log.
    fn verify(&self, args: &VerifyArgs) -> Result<Value> {
        let vkey = args
            .vkey
            .as_deref()
            .map(|k| {
                k.trim()
                    .parse::<VerifierKey>()
                    .map_err(|e| ReadError::Invalid(format!("vkey {k:?}: {e}")))
            })
            .transpose()?;
        let (target, index_url) = match &self.place {
            Place::Dir(lab) => {
                let source: Box<dyn LogSource> = Box::new(glassbox_ledger::WithBlobStore {
                    inner: DirSource {
                        root: lab.root().to_path_buf(),
                    },
                    blobs: Box::new(lab.blobs()) as Box<dyn BlobStore>,
                });
                let index = lab.index_path();
                let index_url = index.is_file().then(|| index.display().to_string());
                (Target::dir(lab.root(), source), index_url)
            }
            // The bucket as `glassbox verify s3://...` reads it; the temporary index is this
            // process's own and not compared.
            Place::Bucket { url, .. } => (Target::url(url, open_bucket(url)?), None),
        };
        audit(&self.runtime, &target, args, vkey, index_url)
    }
}

/// The log `source` serves, read under its checkpoint (signed by `vkey`), and the bytes of its
/// entry `i`; a not-found error when the log is shorter.
fn read_log_entry<'s>(
    source: &'s dyn LogSource,
    vkey: &VerifierKey,
    i: u64,
) -> Result<(LogReader<'s>, Vec<u8>)> {
    let reader = LogReader::open(source, vkey)?;
    let size = reader.size().0;
    if i >= size {
        return Err(ReadError::NotFound(format!(
            "no entry {i}: the log has {size} entries"
        )));
    }
    let bytes = reader.entry(LeafIndex(i))?;
    Ok((reader, bytes))
}

/// Entry `i` of the log `source` serves, as an entry row (read from the log, not an index).
pub(crate) fn log_entry(source: &dyn LogSource, vkey: &VerifierKey, i: u64) -> Result<Value> {
    let (_, bytes) = read_log_entry(source, vkey, i)?;
    let (row, _) = glassbox_ledger::index::IndexedEntry::from_log(i, &bytes);
    entry_row(i, row.kind, row.experiment, row.run, row.time, &bytes)
}

/// The inclusion proof of entry `i` in the tree of the checkpoint `source` serves (the API's
/// shape).
pub(crate) fn log_proof(source: &dyn LogSource, vkey: &VerifierKey, i: u64) -> Result<Value> {
    let (reader, bytes) = read_log_entry(source, vkey, i)?;
    let size = reader.size();
    let path = reader
        .inclusion_proof(LeafIndex(i), TreeSize(size.0))?
        .map_err(|e| ReadError::Verification(e.to_string()))?;
    to_value(&InclusionProof {
        index: i,
        tree_size: size.0,
        leaf_hash: leaf_hash(&bytes).to_hex(),
        proof: path.iter().map(|h| h.to_base64()).collect(),
        root: reader.checkpoint.checkpoint.root.to_base64(),
        checkpoint: String::from_utf8_lossy(&reader.checkpoint.to_bytes()).into_owned(),
    })
}

/// The witness keys and quorum `args` name, checked as the CLI checks `--witness`/`--quorum`.
fn witness_policy(args: &VerifyArgs) -> Result<WitnessPolicy> {
    let witnesses = args
        .witnesses
        .iter()
        .map(|w| {
            w.trim()
                .parse::<CosignerKey>()
                .map_err(|e| ReadError::Invalid(format!("witnesses: {w:?}: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    let quorum = args.quorum.unwrap_or(witnesses.len());
    if witnesses.is_empty() && args.quorum.is_some() {
        return Err(ReadError::Invalid(format!(
            "quorum = {quorum}: give the witnesses' keys too (witnesses=[...])"
        )));
    }
    if !witnesses.is_empty() && (quorum == 0 || quorum > witnesses.len()) {
        return Err(ReadError::Invalid(format!(
            "quorum = {quorum}: must be between 1 and the number of witnesses ({})",
            witnesses.len()
        )));
    }
    Ok(WitnessPolicy { witnesses, quorum })
}

/// Runs the auditor (`glassbox verify`) on `target`: a failure is a
/// [`ReadError::Verification`] naming the first bad item, a pass is the report as JSON.
pub(crate) fn audit(
    runtime: &tokio::runtime::Runtime,
    target: &Target,
    args: &VerifyArgs,
    vkey: Option<VerifierKey>,
    index_url: Option<String>,
) -> Result<Value> {
    let witnesses = witness_policy(args)?;
    let seen = SeenCheckpoints::new(
        args.state_dir
            .clone()
            .unwrap_or_else(SeenCheckpoints::default_dir),
    );
    let mut quiet = |_: AuditPhase, _: u64, _: u64| {};
    let opts = VerifyOptions {
        vkey,
        prev: None,
        forget: false,
        skip_blobs: args.skip_blobs,
        max_blob_bytes: None,
        index_url,
        witnesses,
        progress: Some(&mut quiet),
    };
    let outcome = runtime.block_on(glassbox_ledger::verify::verify(target, opts, &seen))?;
    let report = outcome.map_err(|f| ReadError::Verification(f.to_string()))?;
    let audit = &report.audit;
    Ok(json!({
        "size": audit.checkpoint.checkpoint.size.0,
        "root": audit.checkpoint.checkpoint.root.to_base64(),
        "entries": audit.entries,
        "blobs": audit.blobs,
        "blob_bytes": audit.blob_bytes,
        "vkey": report.vkey.to_string(),
        "key_source": report.key_source.to_string(),
        "index": match report.index {
            IndexCheck::NoIndex => "no index".to_string(),
            IndexCheck::Matches => "matches".to_string(),
            IndexCheck::Behind { indexed, log } => format!("matches its first {indexed} of {log} entries"),
        },
        "cosigned": report.cosigned.as_ref().map(|q| json!({
            "witnesses": q.cosigned.iter().map(|(name, _)| name).collect::<Vec<_>>(),
            "missing": q.missing,
            "quorum": q.quorum,
        })),
        "seconds": audit.seconds,
    }))
}

/// The query parsed, `None` for no or an empty query; a bad one is a [`ReadError::Query`].
pub(crate) fn parsed(query: Option<&str>) -> Result<Option<glassbox_web::search::Expr>> {
    match query.map(str::trim).filter(|q| !q.is_empty()) {
        None => Ok(None),
        Some(q) => glassbox_web::search::parse(q)
            .map(Some)
            .map_err(|e| ReadError::Query {
                message: format!("query {q:?}: {e}"),
                column: e.column,
            }),
    }
}

pub(crate) fn entry_row(
    idx: u64,
    kind: String,
    experiment: Option<String>,
    run: Option<String>,
    time: String,
    bytes: &[u8],
) -> Result<Value> {
    let entry: Value = serde_json::from_slice(bytes)
        .map_err(|e| ReadError::Verification(format!("entry {idx} is not JSON: {e}")))?;
    let mut row = to_value(&EntryRow {
        idx,
        kind,
        experiment,
        run,
        time,
        entry,
    })?;
    row["raw"] = Value::String(String::from_utf8_lossy(bytes).into_owned());
    Ok(row)
}

/// A row's `spec`: the spec as JSON, or null.
pub(crate) fn spec_value(spec: Option<ExperimentSpec>) -> Result<Value> {
    Ok(spec
        .map(|s| to_value(&s))
        .transpose()?
        .unwrap_or(Value::Null))
}

fn finite_or_null(v: f64) -> Value {
    if v.is_finite() { json!(v) } else { Value::Null }
}

pub(crate) fn to_value<T: serde::Serialize>(v: &T) -> Result<Value> {
    serde_json::to_value(v).map_err(|e| ReadError::Read(format!("cannot encode a row: {e}")))
}

/// Specs read from their blobs, once per blob.
#[derive(Default)]
pub(crate) struct SpecCache(BTreeMap<String, Option<ExperimentSpec>>);

/// The catalog's bound on a spec blob: a spec is at most this long, even as canonical JSON.
pub(crate) const MAX_SPEC_BLOB_BYTES: u64 = glassbox_schemas::validate::MAX_SPEC_BYTES as u64 * 4;

impl SpecCache {
    /// The spec in blob `blob` (`blake3:<hex>`), its text read by `read` (at most
    /// [`MAX_SPEC_BLOB_BYTES`] of it).
    pub(crate) fn get(
        &mut self,
        blob: &str,
        read: impl FnOnce(&BlobHash) -> Option<Box<dyn Read + '_>>,
    ) -> Option<ExperimentSpec> {
        self.0
            .entry(blob.to_string())
            .or_insert_with(|| {
                let hash: BlobHash = blob.parse().ok()?;
                let mut text = String::new();
                read(&hash)?
                    .take(MAX_SPEC_BLOB_BYTES + 1)
                    .read_to_string(&mut text)
                    .ok()?;
                (text.len() as u64 <= MAX_SPEC_BLOB_BYTES).then_some(())?;
                parse_spec_text(&text)
            })
            .clone()
    }
}
