//! Evaluation suites on the record: importing a file of items (JSON Lines or Parquet) as a blob
//! of canonical lines with an `eval_suite` entry, finding a suite by name (its newest version)
//! or by hash, and loading its items back, checked against the hash.
//!
//! A file that does not read is refused naming the line or row and the field, and nothing is
//! stored: every item is checked before the blob is written. Not here: scoring items
//! ([`super::score`]) or generating the built-in suites ([`super::generate`]).

use std::path::PathBuf;

use glassbox_corpus::rows;
use glassbox_schemas::eval::{EvalKind, MAX_ITEM_BYTES, MAX_SUITE_ITEMS, SuiteItem, SuiteName};
use glassbox_schemas::record::EvalSuiteBody;
use glassbox_schemas::{BlobHash, RefRole};

use crate::error::LabError;
use crate::recorder::{Recorder, one_ref};
use crate::reproduce::verified;

/// The largest suite file read (bytes).
pub const MAX_SUITE_FILE: u64 = 256 << 20;

/// What to import.
#[derive(Debug, Clone)]
pub struct SuiteImport {
    /// The file (JSON Lines, or Parquet by its magic bytes).
    pub file: PathBuf,
    /// The suite's name.
    pub name: SuiteName,
    /// What it measures (each item must have that kind's shape).
    pub kind: EvalKind,
    /// The items' licence.
    pub licence: Option<String>,
    /// Where they came from.
    pub source: Option<String>,
}

/// A suite version on the record.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredSuite {
    /// Its `eval_suite` entry.
    pub entry: u64,
    /// The entry's body (name, kind, items, hash).
    pub body: EvalSuiteBody,
}

/// A suite's items, loaded.
#[derive(Debug, Clone)]
pub struct Suite {
    /// Where it is on the record.
    pub stored: StoredSuite,
    /// Its items, in order.
    pub items: Vec<SuiteItem>,
}

/// Reads and checks every item of `req.file`; the items and the canonical bytes they hash to.
pub fn read_items(req: &SuiteImport) -> Result<(Vec<SuiteItem>, Vec<u8>), LabError> {
    let file = &req.file;
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| file.display().to_string());
    let meta = std::fs::metadata(file).map_err(LabError::io("cannot read", file))?;
    if meta.len() > MAX_SUITE_FILE {
        return Err(LabError::Refused(format!(
            "{}: {} bytes is more than a suite file may hold ({MAX_SUITE_FILE} bytes)",
            file.display(),
            meta.len()
        )));
    }
    let f = std::fs::File::open(file).map_err(LabError::io("cannot open", file))?;
    let mut items = Vec::new();
    rows::read_records(
        f,
        &name,
        MAX_SUITE_ITEMS,
        MAX_ITEM_BYTES * 4,
        &mut |at, value| {
            let item = SuiteItem::from_json(req.kind, &value).map_err(|e| {
                glassbox_corpus::DataError::Document {
                    file: name.clone(),
                    // A Parquet row names the column the field is in.
                    at: match at {
                        glassbox_corpus::Location::Row { row, .. } => {
                            glassbox_corpus::Location::Row {
                                row,
                                column: e.field.to_string(),
                            }
                        }
                        other => other,
                    },
                    problem: format!("{} {}", e.field, e.problem),
                    accepted: format!("expected {}", e.accepted),
                }
            })?;
            items.push(item);
            Ok(())
        },
    )
    .map_err(|e| LabError::Refused(e.to_string()))?;
    if items.is_empty() {
        return Err(LabError::Refused(format!(
            "{}: no items in it; a suite needs at least one {} item",
            file.display(),
            req.kind
        )));
    }
    let canonical = jsonl(&items)?;
    Ok((items, canonical))
}

/// Items as canonical JSON Lines (keys in order, no spaces, one item per line): a suite blob's
/// bytes, and what `glassbox data eval-suite generate` writes.
pub fn jsonl(items: &[SuiteItem]) -> Result<Vec<u8>, LabError> {
    let mut out = Vec::new();
    for item in items {
        let line = glassbox_schemas::canonical::json_line(item)
            .map_err(|e| LabError::Task(format!("suite item: {e}")))?;
        out.extend_from_slice(line.as_bytes());
        out.push(b'\n');
    }
    Ok(out)
}

/// Stores `req.file` as a suite: every item checked, then the canonical lines as a blob and an
/// `eval_suite` entry. Importing the same items under the same name again records nothing new
/// and returns the entry there is.
pub fn import(rec: &Recorder, req: &SuiteImport) -> Result<StoredSuite, LabError> {
    let (items, canonical) = read_items(req)?;
    let hash = BlobHash(glassbox_schemas::Blake3Hash::of(&canonical));
    if let Some(same) = rec
        .eval_suites()?
        .into_iter()
        .rev()
        .find(|(_, b)| b.suite == hash && b.name == req.name)
    {
        return Ok(StoredSuite {
            entry: same.0,
            body: same.1,
        });
    }
    let stored = rec.put_bytes(&canonical)?;
    debug_assert_eq!(stored, hash);
    let body = EvalSuiteBody {
        name: req.name.clone(),
        kind: req.kind,
        items: items.len() as u64,
        suite: hash,
        licence: req.licence.clone(),
        source: req.source.clone(),
    };
    let entry = rec.record(None, one_ref(RefRole::Suite, &hash), body.clone())?;
    Ok(StoredSuite { entry, body })
}

/// Stores JSON Lines `text` (a suite a program carries, such as the built-in ones) as
/// [`import`] stores a file: `req.file` is ignored.
pub fn import_text(rec: &Recorder, text: &str, req: &SuiteImport) -> Result<StoredSuite, LabError> {
    let mut tmp = tempfile::NamedTempFile::new()
        .map_err(|e| LabError::Task(format!("cannot make a temporary file: {e}")))?;
    std::io::Write::write_all(&mut tmp, text.as_bytes())
        .map_err(|e| LabError::Task(format!("cannot write a temporary file: {e}")))?;
    let req = SuiteImport {
        file: tmp.path().to_path_buf(),
        ..req.clone()
    };
    import(rec, &req)
}

/// Which suite: a name (its newest version) or a version's hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SuiteRef {
    /// The newest `eval_suite` entry of this name.
    Name(SuiteName),
    /// The version with this hash.
    Hash(BlobHash),
}

impl std::str::FromStr for SuiteRef {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.starts_with("blake3:") {
            s.parse::<BlobHash>()
                .map(SuiteRef::Hash)
                .map_err(|e| format!("suite {s:?}: {e}"))
        } else {
            s.parse().map(SuiteRef::Name)
        }
    }
}

impl std::fmt::Display for SuiteRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SuiteRef::Name(n) => write!(f, "{n}"),
            SuiteRef::Hash(h) => write!(f, "{h}"),
        }
    }
}

/// The suite `which` names, or an error listing the suites there are.
pub fn find(rec: &Recorder, which: &SuiteRef) -> Result<StoredSuite, LabError> {
    let all = rec.eval_suites()?;
    let found = all.iter().rev().find(|(_, b)| match which {
        SuiteRef::Name(n) => b.name == *n,
        SuiteRef::Hash(h) => b.suite == *h,
    });
    match found {
        Some((entry, body)) => Ok(StoredSuite {
            entry: *entry,
            body: body.clone(),
        }),
        None => {
            let mut names: Vec<String> = all.iter().map(|(_, b)| b.name.to_string()).collect();
            names.sort();
            names.dedup();
            Err(LabError::Refused(format!(
                "no evaluation suite {which} in this ledger ({}); `glassbox data eval-suite import` stores one",
                if names.is_empty() {
                    "it has none".to_string()
                } else {
                    format!("it has {}", names.join(", "))
                }
            )))
        }
    }
}

/// Loads a stored suite's items, checking the blob against its hash.
pub fn load(rec: &Recorder, stored: &StoredSuite) -> Result<Suite, LabError> {
    let bytes = verified(rec, &stored.body.suite, "suite")?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|e| LabError::Refused(format!("suite {} is not UTF-8: {e}", stored.body.suite)))?;
    let items = text
        .lines()
        .enumerate()
        .map(|(i, line)| {
            let value: serde_json::Value = serde_json::from_str(line).map_err(|e| {
                LabError::Refused(format!("suite {} line {}: {e}", stored.body.suite, i + 1))
            })?;
            SuiteItem::from_json(stored.body.kind, &value).map_err(|e| {
                LabError::Refused(format!("suite {} line {}: {e}", stored.body.suite, i + 1))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Suite {
        stored: stored.clone(),
        items,
    })
}
