//! A lab read from a running `glassbox serve` (`http://...`): the log, its tiles and blobs
//! through the ledger's `HttpSource` (the same reads `glassbox verify URL` makes, bounded in
//! size and time), and runs, experiments and entries through the server's JSON API.
//!
//! The rows are the ones a lab directory gives: the API's runs and experiments (an experiment's
//! full row from `/api/v1/experiments/{id}`), each with its spec read from its blob; a query
//! is parsed here first by the same parser, so a bad one fails alike. Metric points are the
//! run's metric chunks, fetched as blobs and checked against their hash, never the API's
//! downsampled series. The verifier key is the one the auditor trusts for the URL.
//!
//! Not here: Python, or what a row holds (`reading`).

use std::collections::{BTreeSet, HashMap};
use std::io::Read;

use glassbox_ledger::blob::blob_rel_path;
use glassbox_ledger::verify::Target;
use glassbox_ledger::{HttpSource, LogSource, ReadLimit, VerifierKey};
use glassbox_schemas::{BlobHash, LedgerEntry};
use serde_json::Value;

use crate::metrics::MetricColumns;
use crate::reading::{
    LabReader, ReadError, SpecCache, VerifyArgs, audit, entry_kind, entry_row, log_entry,
    log_proof, metric_columns, parsed, spec_blobs, spec_value,
};
use glassbox_schemas::metrics::XAxis;

type Result<T> = std::result::Result<T, ReadError>;

/// The most bytes of one JSON API answer read.
const MAX_API_BYTES: u64 = 256 << 20;
/// Entries per page of `/api/v1/entries` (the API's most).
const ENTRIES_PER_PAGE: u64 = 1000;
/// Experiments per page of `/api/v1/experiments` (the API's most).
const EXPERIMENTS_PER_PAGE: u64 = 500;
/// The most bytes of a blob whose size no entry names (the auditor's default).
const MAX_BLOB_BYTES: u64 = 64 << 30;

/// A lab behind a server.
#[derive(Debug)]
pub struct RemoteLab {
    base: String,
    source: HttpSource,
    runtime: tokio::runtime::Runtime,
}

/// `text` percent-encoded for a URL's query or path segment.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl RemoteLab {
    /// A lab served at `base`; fails when it serves no log there.
    pub fn open(base: &str) -> Result<RemoteLab> {
        let base = base.trim_end_matches('/').to_string();
        let source = HttpSource::new(&base);
        if source
            .read("log/checkpoint", ReadLimit::CHECKPOINT)?
            .is_none()
        {
            return Err(ReadError::NoLab(format!(
                "no lab at {base}: it serves no log/checkpoint"
            )));
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| ReadError::Read(format!("cannot start a runtime: {e}")))?;
        Ok(RemoteLab {
            base,
            source,
            runtime,
        })
    }

    /// The JSON answer at `rel` (`api/v1/...`); `None` for a 404.
    fn api(&self, rel: &str) -> Result<Option<Value>> {
        let limit = ReadLimit {
            max: MAX_API_BYTES,
            what: "a JSON API answer",
        };
        match self.source.read(rel, limit)? {
            None => Ok(None),
            Some(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                ReadError::Read(format!("{}: not JSON: {e}", self.source.locate(rel)))
            }),
        }
    }

    fn api_found(&self, rel: &str) -> Result<Value> {
        self.api(rel)?
            .ok_or_else(|| ReadError::NotFound(format!("{} answers 404", self.source.locate(rel))))
    }

    /// A blob's bytes (at most `max`), checked against its hash.
    fn blob_bytes(&self, hash: &BlobHash, max: u64) -> Result<Vec<u8>> {
        let rel = blob_rel_path(hash);
        let bytes = self
            .source
            .read(&rel, ReadLimit::blob(max))?
            .ok_or_else(|| ReadError::NotFound(format!("no blob {hash} at {}", self.base)))?;
        let got = glassbox_schemas::Blake3Hash::from(blake3::hash(&bytes));
        if got != hash.0 {
            return Err(ReadError::Verification(format!(
                "blob {hash} (from {}): the served bytes hash to {got}",
                self.source.locate(&rel)
            )));
        }
        Ok(bytes)
    }

    /// Every entry row of the API matching `params` (`kind=...&run=...`), paged, from `since`.
    fn entry_rows(&self, params: &str, since: Option<u64>) -> Result<Vec<Value>> {
        let mut out: Vec<Value> = Vec::new();
        let mut after: Option<u64> = since.and_then(|s| s.checked_sub(1));
        loop {
            let mut rel = format!("api/v1/entries?limit={ENTRIES_PER_PAGE}{params}");
            if let Some(a) = after {
                rel.push_str(&format!("&after={a}"));
            }
            let page = match self.api_found(&rel)? {
                Value::Array(rows) => rows,
                other => {
                    return Err(ReadError::Read(format!(
                        "{}: expected a list, got {other}",
                        self.source.locate(&rel)
                    )));
                }
            };
            let n = page.len() as u64;
            after = page.last().and_then(|r| r["idx"].as_u64()).or(after);
            out.extend(page);
            if n < ENTRIES_PER_PAGE {
                return Ok(out);
            }
        }
    }

    fn spec_of(&self, cache: &mut SpecCache, blob: Option<&str>) -> Result<Value> {
        let spec = blob.and_then(|b| {
            cache.get(b, |h| {
                self.blob_bytes(h, crate::reading::MAX_SPEC_BLOB_BYTES)
                    .ok()
                    .map(|v| Box::new(std::io::Cursor::new(v)) as Box<dyn Read>)
            })
        });
        spec_value(spec)
    }

    fn vkey_for(&self, given: Option<&str>) -> Result<VerifierKey> {
        let text = match given {
            Some(k) => k.to_string(),
            None => String::from_utf8_lossy(
                &self
                    .source
                    .read("vkey", ReadLimit::VKEY)?
                    .ok_or_else(|| ReadError::NotFound(format!("{} serves no vkey", self.base)))?,
            )
            .into_owned(),
        };
        text.trim()
            .parse()
            .map_err(|e| ReadError::Invalid(format!("vkey {:?}: {e}", text.trim())))
    }
}

impl LabReader for RemoteLab {
    fn describe(&self) -> String {
        self.base.clone()
    }

    fn runs(&self, query: Option<&str>) -> Result<Vec<Value>> {
        let q = parsed(query)?.and(query.map(str::trim));
        let rel = match q {
            Some(q) => format!("api/v1/runs?q={}", encode(q)),
            None => "api/v1/runs".to_string(),
        };
        let Value::Array(rows) = self.api_found(&rel)? else {
            return Err(ReadError::Read(format!("{rel}: expected a list")));
        };
        let proposals = self.entry_rows("&kind=proposal", None)?;
        let raw: Vec<Vec<u8>> = proposals.iter().map(canonical).collect();
        let specs: HashMap<String, String> = spec_blobs(raw.iter().map(Vec::as_slice));
        let mut cache = SpecCache::default();
        rows.into_iter()
            .map(|mut row| {
                let blob = row["spec_hash"]
                    .as_str()
                    .and_then(|h| specs.get(h))
                    .cloned();
                row["spec"] = self.spec_of(&mut cache, blob.as_deref())?;
                Ok(row)
            })
            .collect()
    }

    fn experiments(&self, query: Option<&str>) -> Result<Vec<Value>> {
        let q = parsed(query)?.and(query.map(str::trim));
        let mut ids: Vec<String> = Vec::new();
        for page in 1.. {
            let mut rel = format!(
                "api/v1/experiments?sort=id&dir=asc&per_page={EXPERIMENTS_PER_PAGE}&page={page}"
            );
            if let Some(q) = q {
                rel.push_str(&format!("&q={}", encode(q)));
            }
            let listing = self.api_found(&rel)?;
            let items = listing["items"].as_array().cloned().unwrap_or_default();
            ids.extend(
                items
                    .iter()
                    .filter_map(|i| i["id"].as_str().map(str::to_string)),
            );
            let total = listing["total"].as_u64().unwrap_or(0);
            if items.is_empty() || ids.len() as u64 >= total {
                break;
            }
        }
        ids.sort();
        let mut cache = SpecCache::default();
        ids.iter()
            .map(|id| {
                let detail = self.api_found(&format!("api/v1/experiments/{}", encode(id)))?;
                let mut row = detail["experiment"].clone();
                row["status"] = detail["status"].clone();
                let blob = row["spec_blob"].as_str().map(str::to_string);
                row["spec"] = self.spec_of(&mut cache, blob.as_deref())?;
                Ok(row)
            })
            .collect()
    }

    fn metrics(
        &self,
        run: &str,
        names: Option<&BTreeSet<String>>,
        axis: XAxis,
    ) -> Result<(MetricColumns, Vec<f64>)> {
        let row = self.run_row(run)?;
        let artifacts = self.entry_rows(&format!("&kind=artifact&run={}", encode(run)), None)?;
        let chunks = artifacts.iter().filter_map(|a| {
            let index = a["idx"].as_u64().unwrap_or_default();
            let hash: BlobHash = a["entry"]["refs"]["metrics"].as_str()?.parse().ok()?;
            let max = a["entry"]["body"]["bytes"]
                .as_u64()
                .unwrap_or(MAX_BLOB_BYTES);
            Some(self.blob_bytes(&hash, max).map(|b| (index, hash, b)))
        });
        metric_columns(run, chunks, names, axis, &row["spec"])
    }

    fn entries(&self, kind: Option<&str>, since: Option<u64>) -> Result<Vec<Value>> {
        let params = match kind {
            Some(k) => format!("&kind={}", entry_kind(k)?.as_str()),
            None => String::new(),
        };
        self.entry_rows(&params, since)?
            .into_iter()
            .map(|r| {
                let raw = canonical(&r);
                let text = |k: &str| r[k].as_str().map(str::to_string);
                entry_row(
                    r["idx"].as_u64().unwrap_or_default(),
                    text("kind").unwrap_or_default(),
                    text("experiment"),
                    text("run"),
                    text("time").unwrap_or_default(),
                    &raw,
                )
            })
            .collect()
    }

    fn entry(&self, i: u64) -> Result<Value> {
        log_entry(&self.source, &self.vkey_for(None)?, i)
    }

    fn blob(&self, hash: &str) -> Result<Vec<u8>> {
        let hash: BlobHash = hash
            .parse()
            .map_err(|e| ReadError::Invalid(format!("hash {hash:?}: {e}")))?;
        self.blob_bytes(&hash, MAX_BLOB_BYTES)
    }

    fn proof(&self, i: u64) -> Result<Value> {
        log_proof(&self.source, &self.vkey_for(None)?, i)
    }

    /// The CLI's `glassbox verify URL`.
    fn verify(&self, args: &VerifyArgs) -> Result<Value> {
        let target = Target::url(&self.base, Box::new(HttpSource::new(&self.base)));
        let vkey = args
            .vkey
            .as_deref()
            .map(|k| self.vkey_for(Some(k)))
            .transpose()?;
        audit(&self.runtime, &target, args, vkey, None)
    }
}

/// An API entry row's entry as its canonical bytes (what the log holds: an entry's canonical
/// encoding never changes); the JSON as given when it is not a valid entry.
fn canonical(row: &Value) -> Vec<u8> {
    let json = serde_json::to_vec(&row["entry"]).unwrap_or_default();
    LedgerEntry::from_bytes(&json)
        .ok()
        .and_then(|e| e.to_canonical_bytes().ok())
        .unwrap_or(json)
}
