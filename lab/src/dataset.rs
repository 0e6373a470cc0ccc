//! Datasets: corpora added to the lab, each stored as a blob and recorded as a `dataset` entry
//! (hash, bytes, tokenizer, source and, for a synthetic source, its exact entropy rate), so a
//! spec can name it by hash and anyone can fetch the very bytes a run trained on.
//!
//! `glassbox data import` stores a file; `glassbox data generate` samples a built-in seeded
//! Markov source. Not here: how runs sample from corpora (the runner's data pipeline).

use std::path::Path;

use glassbox_runner::data::MarkovSource;
use glassbox_schemas::BlobHash;
use glassbox_schemas::record::DatasetBody;
use glassbox_schemas::spec::{GeneratorKind, GeneratorSpec};

use crate::error::LabError;
use crate::recorder::{Recorder, one_ref};

/// A recorded dataset.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Dataset {
    /// The corpus hash (what a spec's `corpus = "..."` names).
    pub hash: BlobHash,
    /// Its size.
    pub bytes: u64,
    /// The `dataset` entry's index.
    pub entry: u64,
    /// The entry body.
    pub body: DatasetBody,
}

/// Domain names as specs accept them (`[a-z0-9][a-z0-9_-]{0,31}`).
fn check_domain(domain: &str) -> Result<(), LabError> {
    let ok = !domain.is_empty()
        && domain.len() <= 32
        && domain
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
        && domain
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(LabError::Refused(format!(
            "--domain {domain:?}: must be 1-32 characters of a-z, 0-9, `_` or `-`, starting with a letter or digit"
        )))
    }
}

/// Stores `file` as a corpus of `domain` and records it.
pub fn import(rec: &Recorder, domain: &str, file: &Path) -> Result<Dataset, LabError> {
    check_domain(domain)?;
    let len = std::fs::metadata(file)
        .map_err(LabError::io("cannot read", file))?
        .len();
    if len == 0 {
        return Err(LabError::Refused(format!(
            "{}: the file is empty; a corpus needs bytes to train on",
            file.display()
        )));
    }
    let (hash, bytes) = rec.put_file(file)?;
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let body = DatasetBody {
        domain: domain.to_string(),
        bytes,
        tokenizer: "bytes".into(),
        source: format!("file {name}"),
        entropy_bits_per_byte: None,
    };
    record(rec, hash, bytes, body)
}

/// Largest generated corpus (1 GiB): generation holds the corpus in memory.
pub const MAX_GENERATED_BYTES: u64 = 1 << 30;

/// Samples `bytes` bytes of the built-in Markov source `generator` and records them.
pub fn generate(
    rec: &Recorder,
    domain: &str,
    generator: &GeneratorSpec,
    bytes: u64,
) -> Result<Dataset, LabError> {
    check_domain(domain)?;
    if bytes == 0 || bytes > MAX_GENERATED_BYTES {
        return Err(LabError::Refused(format!(
            "--bytes {bytes}: must be between 1 and {MAX_GENERATED_BYTES}"
        )));
    }
    let GeneratorKind::Markov = generator.kind;
    let source = MarkovSource::new(generator);
    let data = source.sample(generator.seed, bytes as usize);
    let hash = rec.put_bytes(&data)?;
    let body = DatasetBody {
        domain: domain.to_string(),
        bytes,
        tokenizer: "bytes".into(),
        source: format!(
            "markov seed={} order={} alphabet={} branching={}",
            generator.seed, generator.order, generator.alphabet, generator.branching
        ),
        entropy_bits_per_byte: Some(source.entropy_bits_per_byte()),
    };
    record(rec, hash, bytes, body)
}

fn record(
    rec: &Recorder,
    hash: BlobHash,
    bytes: u64,
    body: DatasetBody,
) -> Result<Dataset, LabError> {
    let entry = rec.record(None, one_ref("corpus", &hash), body.clone())?;
    Ok(Dataset {
        hash,
        bytes,
        entry,
        body,
    })
}
