//! Datasets: corpora added to the lab, each stored as a blob and recorded as a `dataset` entry
//! (hash, bytes, source, format and document counts, or for a synthetic source its exact
//! entropy rate), so a spec can name it by hash and anyone can fetch the very bytes a run
//! trained on.
//!
//! `glassbox data import` stores a text, JSONL or Parquet file as it is; `glassbox data
//! generate` samples a built-in seeded Markov source. Tokenizers and token shards are in
//! [`crate::tokens`]. Not here: how runs sample from corpora (the runner's data pipeline).

use glassbox_ledger::blob::Inspect;
use glassbox_runner::data::documents::{self, DocumentSplitter};
use glassbox_runner::data::{DataError, MarkovSource};
use glassbox_schemas::BlobHash;
use glassbox_schemas::RefRole;
use glassbox_schemas::data::CorpusFormat;
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

/// What to import: a file, its domain and how it splits into documents.
#[derive(Debug, Clone)]
pub struct ImportRequest {
    /// Domain name for metric names.
    pub domain: String,
    /// The raw file (it becomes the corpus blob as it is).
    pub file: std::path::PathBuf,
    /// How it splits into documents.
    pub format: CorpusFormat,
}

/// Stores a file as a corpus and records it with its format and document counts. The file is
/// parsed as it is hashed and copied into the store (text and JSONL in that one pass; Parquet,
/// which is read from its footer, is checked first); a file that does not parse is refused,
/// naming the line, row or column, and leaves nothing in the store.
pub fn import(rec: &Recorder, req: &ImportRequest) -> Result<Dataset, LabError> {
    check_domain(&req.domain)?;
    let file = &req.file;
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| file.display().to_string());
    let meta = std::fs::metadata(file).map_err(LabError::io("cannot read", file))?;
    if meta.len() == 0 {
        return Err(LabError::Refused(format!(
            "{}: the file is empty; a corpus needs bytes to train on",
            file.display()
        )));
    }
    let (hash, bytes, counts) = match &req.format {
        CorpusFormat::Parquet { .. } => {
            let f = std::fs::File::open(file).map_err(LabError::io("cannot open", file))?;
            let counts = documents::read_file(f, &name, &req.format, &mut |_| Ok(()))?;
            let (hash, bytes) = rec.put_file(file)?;
            (hash, bytes, counts)
        }
        _ => {
            let mut parser = Parser {
                splitter: DocumentSplitter::new(&req.format, &name)?,
                failed: None,
            };
            let put = rec.blobs().put_file_inspected(file, &mut parser);
            if let Some(e) = parser.failed.take() {
                return Err(e.into());
            }
            let out = put?;
            (out.hash, out.bytes, parser.splitter.counts())
        }
    };
    if counts.documents == 0 {
        return Err(LabError::Refused(format!(
            "{}: no documents in it (every document was empty); a corpus needs text to train on",
            file.display()
        )));
    }
    let body = DatasetBody {
        domain: req.domain.clone(),
        bytes,
        tokenizer: match req.format {
            CorpusFormat::Text { .. } => "bytes".into(),
            _ => "stored".into(),
        },
        source: format!("file {name}"),
        entropy_bits_per_byte: None,
        format: Some(req.format.clone()),
        documents: Some(counts.documents),
        text_bytes: Some(counts.text_bytes),
    };
    record(rec, hash, bytes, body)
}

/// Parses a text or JSONL corpus as the store copies and hashes it, counting its documents on
/// every core. A parse error stops the put (the store then keeps nothing) and is kept for the
/// caller.
struct Parser {
    splitter: DocumentSplitter,
    failed: Option<DataError>,
}

impl Parser {
    fn keep(&mut self, parsed: Result<(), DataError>) -> std::io::Result<()> {
        parsed.map_err(|e| {
            let text = e.to_string();
            self.failed = Some(e);
            std::io::Error::new(std::io::ErrorKind::InvalidData, text)
        })
    }
}

impl Inspect for Parser {
    fn bytes(&mut self, chunk: &[u8]) -> std::io::Result<()> {
        let parsed = self.splitter.feed_counting(chunk);
        self.keep(parsed)
    }

    fn end(&mut self) -> std::io::Result<()> {
        let parsed = self.splitter.finish(&mut |_| Ok(())).map(|_| ());
        self.keep(parsed)
    }
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
        format: None,
        documents: None,
        text_bytes: None,
    };
    record(rec, hash, bytes, body)
}

fn record(
    rec: &Recorder,
    hash: BlobHash,
    bytes: u64,
    body: DatasetBody,
) -> Result<Dataset, LabError> {
    let entry = rec.record(None, one_ref(RefRole::Corpus, &hash), body.clone())?;
    Ok(Dataset {
        hash,
        bytes,
        entry,
        body,
    })
}
