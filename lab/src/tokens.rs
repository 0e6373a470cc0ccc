//! Tokenizers and token shards in the lab: training a tokenizer on stored corpora, importing a
//! `tokenizer.json`, and tokenizing a corpus into a token shard, each a blob with its entry
//! (`tokenizer`, `tokenized`).
//!
//! Tokenizing is reused: a (corpus, tokenizer) pair that already has a `tokenized` entry is
//! not tokenized again, and its shard is checked against its hash when it is loaded. Every
//! blob read here (corpora, tokenizers) is re-hashed as it is read, so a damaged one stops the
//! work with its name. Documents are encoded in batches on all cores (the tokenizers crate's
//! parallel encode) with progress reported after each batch.
//!
//! Not here: the shard layout and the encoding rules (the runner's `data::shard` and
//! `data::tokenizer`), or importing corpora ([`crate::dataset`]).

use glassbox_schemas::RefRole;
use std::collections::BTreeMap;
use std::io::Read;

use glassbox_runner::data::documents::{self, DocumentSplitter};
use glassbox_runner::data::tokenizer::{TextTokenizer, TrainKind};
use glassbox_runner::data::{DataError, TokenShard};
use glassbox_schemas::data::{CorpusFormat, TokenizedBody, TokenizerBody, TokenizerKind};
use glassbox_schemas::record::DatasetBody;
use glassbox_schemas::spec::ExperimentSpec;
use glassbox_schemas::{Blake3Hash, BlobHash};

use crate::error::LabError;
use crate::recorder::{Recorder, one_ref};

/// A recorded tokenizer.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StoredTokenizer {
    /// The `tokenizer.json` blob (what a spec's `tokenizer = "..."` names).
    pub hash: BlobHash,
    /// The `tokenizer` entry's index (an earlier one when it was already recorded).
    pub entry: u64,
    /// The entry body.
    pub body: TokenizerBody,
}

/// A recorded token shard.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Tokenized {
    /// The `tokenized` entry's index (an earlier one when the pair was tokenized before).
    pub entry: u64,
    /// Whether an existing shard was reused.
    pub reused: bool,
    /// The entry body.
    pub body: TokenizedBody,
}

/// Progress of a long job: documents and text bytes done so far.
pub type Progress<'a> = &'a (dyn Fn(u64, u64) + Sync);

/// Text bytes encoded per batch: big enough to keep every core busy, small enough to bound
/// memory (a batch's text and its encodings).
const ENCODE_BATCH_BYTES: usize = 16 << 20;

/// Documents queued between the reader and the trainer.
const TRAIN_QUEUE: usize = 1024;

/// The `dataset` entry of corpus `hash`, or a refusal naming it.
fn dataset_of(rec: &Recorder, hash: &BlobHash) -> Result<DatasetBody, LabError> {
    let entry = rec.dataset_entry(hash)?.ok_or_else(|| {
        LabError::Refused(format!(
            "corpus {hash}: no `dataset` entry of this lab declares it; add it with `glassbox data import`"
        ))
    })?;
    Ok(rec.entry(entry)?.body_as::<DatasetBody>()?)
}

/// Reads every document of stored corpus `hash`, re-hashing the blob as it goes.
pub fn for_each_document(
    rec: &Recorder,
    hash: &BlobHash,
    visit: &mut dyn FnMut(&str) -> Result<(), DataError>,
) -> Result<(), LabError> {
    let body = dataset_of(rec, hash)?;
    // A corpus recorded before formats were is one text document (as the bytes tokenizer
    // reads it).
    let format = body
        .format
        .unwrap_or(CorpusFormat::Text { separator: None });
    let name = hash.to_string();
    let mut reader = HashingReader {
        inner: rec.blobs().get(hash)?,
        hasher: blake3::Hasher::new(),
    };
    match &format {
        CorpusFormat::Parquet { .. } => {
            // Parquet is read from its footer: it needs a file to seek in.
            let mut tmp =
                tempfile::tempfile().map_err(LabError::io("cannot create", "a temp file"))?;
            std::io::copy(&mut reader, &mut tmp)
                .map_err(LabError::io("cannot copy", format!("corpus {hash}")))?;
            reader.check(hash)?;
            use std::io::Seek;
            tmp.rewind()
                .map_err(LabError::io("cannot read", "a temp file"))?;
            documents::read_file(tmp, &name, &format, visit)?;
        }
        _ => {
            let mut splitter = DocumentSplitter::new(&format, &name)?;
            documents::read_stream(&mut reader, &mut splitter, visit)?;
            reader.check(hash)?;
        }
    }
    Ok(())
}

/// A reader that hashes what passes through it.
struct HashingReader {
    inner: Box<dyn Read + Send>,
    hasher: blake3::Hasher,
}

impl Read for HashingReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

impl HashingReader {
    /// Reads to the end and checks the hash.
    fn check(mut self, hash: &BlobHash) -> Result<(), LabError> {
        std::io::copy(&mut self, &mut std::io::sink())
            .map_err(LabError::io("cannot read", format!("blob {hash}")))?;
        let actual: Blake3Hash = self.hasher.finalize().into();
        if actual != hash.0 {
            return Err(LabError::Refused(format!(
                "blob {hash} is damaged or substituted: its bytes hash to {actual}"
            )));
        }
        Ok(())
    }
}

/// Trains a tokenizer of `vocab` tokens on stored corpora and records it.
pub fn train_tokenizer(
    rec: &Recorder,
    kind: TrainKind,
    vocab: u32,
    corpora: &[BlobHash],
) -> Result<StoredTokenizer, LabError> {
    if corpora.is_empty() {
        return Err(LabError::Refused(
            "--from: name at least one corpus (a `dataset` hash) to train on".into(),
        ));
    }
    for c in corpora {
        dataset_of(rec, c)?;
    }
    // A reader thread streams documents to the trainer through a bounded queue; the queue
    // ends when the reader is done and drops its sender.
    let (tx, rx) = std::sync::mpsc::sync_channel::<String>(TRAIN_QUEUE);
    let (trained, read) = std::thread::scope(|s| {
        let reader = s.spawn(move || -> Result<(), LabError> {
            for c in corpora {
                for_each_document(rec, c, &mut |doc| {
                    tx.send(doc.to_string()).map_err(|_| DataError::Tokenizer {
                        what: "training".into(),
                        reason: "the trainer stopped reading".into(),
                    })
                })?;
            }
            Ok(())
        });
        let trained = TextTokenizer::train(kind, vocab, rx.into_iter());
        let read = reader
            .join()
            .unwrap_or_else(|_| Err(LabError::Task("the corpus reader panicked".into())));
        (trained, read)
    });
    // The trainer's own error first: a reader error may only say the trainer stopped.
    let tok = trained?;
    read?;
    let json = tok.to_json()?;
    let hash = rec.put_bytes(&json)?;
    let body = TokenizerBody {
        kind: match kind {
            TrainKind::Bpe => TokenizerKind::Bpe,
            TrainKind::Unigram => TokenizerKind::Unigram,
        },
        model: tok.model_name().into(),
        vocab_size: tok.vocab_size(),
        trained_on: corpora.to_vec(),
        special_tokens: tok.special_tokens(),
        end_of_document: tok.end_of_document().0.into(),
        end_of_document_id: tok.end_of_document().1,
        source: "trained".into(),
    };
    record_tokenizer(rec, hash, body)
}

/// Stores an existing `tokenizer.json` as it is and records it. `eod` names its
/// end-of-document token (left out: a usual one it has).
pub fn import_tokenizer(
    rec: &Recorder,
    file: &std::path::Path,
    eod: Option<&str>,
) -> Result<StoredTokenizer, LabError> {
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| file.display().to_string());
    let f = std::fs::File::open(file).map_err(LabError::io("cannot open", file))?;
    let mut bytes = Vec::new();
    f.take(glassbox_runner::data::tokenizer::MAX_TOKENIZER_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(LabError::io("cannot read", file))?;
    let tok = TextTokenizer::from_json(&bytes, &name, eod)?;
    let hash = rec.put_bytes(&bytes)?;
    let body = TokenizerBody {
        kind: TokenizerKind::Imported,
        model: tok.model_name().into(),
        vocab_size: tok.vocab_size(),
        trained_on: Vec::new(),
        special_tokens: tok.special_tokens(),
        end_of_document: tok.end_of_document().0.into(),
        end_of_document_id: tok.end_of_document().1,
        source: format!("import {name}"),
    };
    record_tokenizer(rec, hash, body)
}

/// Records a tokenizer unless its blob is recorded already (then that entry is returned).
fn record_tokenizer(
    rec: &Recorder,
    hash: BlobHash,
    body: TokenizerBody,
) -> Result<StoredTokenizer, LabError> {
    if let Some(entry) = rec.tokenizer_entry(&hash)? {
        let body = rec.entry(entry)?.body_as::<TokenizerBody>()?;
        return Ok(StoredTokenizer { hash, entry, body });
    }
    let entry = rec.record(None, one_ref(RefRole::Tokenizer, &hash), body.clone())?;
    Ok(StoredTokenizer { hash, entry, body })
}

/// Loads stored tokenizer `hash` (re-hashed) with the end-of-document token its entry names.
/// The text codec of `spec`'s tokenizer: bytes, or its stored tokenizer loaded and checked.
pub fn codec_for(
    rec: &Recorder,
    spec: &ExperimentSpec,
) -> Result<glassbox_runner::text::TextCodec, LabError> {
    use glassbox_runner::text::TextCodec;
    Ok(match spec.data.tokenizer.stored() {
        None => TextCodec::Bytes,
        Some(h) => TextCodec::Stored(Box::new(load_tokenizer(rec, h)?)),
    })
}

pub fn load_tokenizer(rec: &Recorder, hash: &BlobHash) -> Result<TextTokenizer, LabError> {
    let entry = rec.tokenizer_entry(hash)?.ok_or_else(|| {
        LabError::Refused(format!(
            "tokenizer {hash}: no `tokenizer` entry of this lab declares it; add one with `glassbox data tokenizer train` or `import`"
        ))
    })?;
    let body = rec.entry(entry)?.body_as::<TokenizerBody>()?;
    let bytes = rec.get_bytes(hash)?;
    let actual = Blake3Hash::of(&bytes);
    if actual != hash.0 {
        return Err(LabError::Refused(format!(
            "tokenizer {hash} is damaged or substituted: its bytes hash to {actual}"
        )));
    }
    Ok(TextTokenizer::from_json(
        &bytes,
        &hash.to_string(),
        Some(&body.end_of_document),
    )?)
}

/// The vocabulary size of stored tokenizer `hash`, from its entry.
pub fn tokenizer_vocab(rec: &Recorder, hash: &BlobHash) -> Result<Option<u32>, LabError> {
    match rec.tokenizer_entry(hash)? {
        Some(entry) => Ok(Some(
            rec.entry(entry)?.body_as::<TokenizerBody>()?.vocab_size,
        )),
        None => Ok(None),
    }
}

/// Tokenizes corpus `corpus` with tokenizer `tokenizer` into a token shard and records it, or
/// returns the pair's existing `tokenized` entry.
pub fn tokenize(
    rec: &Recorder,
    corpus: &BlobHash,
    tokenizer: &BlobHash,
    progress: Progress<'_>,
) -> Result<Tokenized, LabError> {
    if let Some(entry) = rec.tokenized_entry(corpus, tokenizer)? {
        let body = rec.entry(entry)?.body_as::<TokenizedBody>()?;
        return Ok(Tokenized {
            entry,
            reused: true,
            body,
        });
    }
    let tok = load_tokenizer(rec, tokenizer)?;
    let mut shard = TokenShard::new(*corpus, *tokenizer, tok.vocab_size());
    let mut batch: Vec<String> = Vec::new();
    let mut batch_bytes = 0usize;
    let (mut done_docs, mut done_bytes) = (0u64, 0u64);
    let mut flush = |batch: &mut Vec<String>, shard: &mut TokenShard| -> Result<(), DataError> {
        let docs: Vec<&str> = batch.iter().map(String::as_str).collect();
        for enc in tok.encode_documents(&docs)? {
            shard.push(&enc);
        }
        done_docs += batch.len() as u64;
        done_bytes += docs.iter().map(|d| d.len() as u64).sum::<u64>();
        progress(done_docs, done_bytes);
        batch.clear();
        Ok(())
    };
    for_each_document(rec, corpus, &mut |doc| {
        batch_bytes += doc.len();
        batch.push(doc.to_string());
        if batch_bytes >= ENCODE_BATCH_BYTES {
            batch_bytes = 0;
            flush(&mut batch, &mut shard)?;
        }
        Ok(())
    })?;
    flush(&mut batch, &mut shard)?;
    let shard_hash = rec.put_bytes(&shard.to_bytes())?;
    let body = TokenizedBody {
        corpus: *corpus,
        tokenizer: *tokenizer,
        shard: shard_hash,
        tokens: shard.len() as u64,
        documents: shard.documents() as u64,
        text_bytes: shard.text_bytes(),
    };
    let entry = rec.record(None, one_ref(RefRole::Shard, &shard_hash), body.clone())?;
    Ok(Tokenized {
        entry,
        reused: false,
        body,
    })
}

/// (corpus, tokenizer) -> token shard: what a run with a stored tokenizer trains on.
pub type ShardMap = BTreeMap<(BlobHash, BlobHash), BlobHash>;

/// The token shards a spec trains on, tokenizing the corpora that have none yet. Empty for the
/// bytes tokenizer. The spec's `model.vocab` must be the tokenizer's vocabulary size.
pub fn shards_for(
    rec: &Recorder,
    spec: &ExperimentSpec,
    progress: Progress<'_>,
) -> Result<ShardMap, LabError> {
    let mut out = ShardMap::new();
    let Some(tokenizer) = spec.data.tokenizer.stored() else {
        return Ok(out);
    };
    check_vocab(rec, spec)?;
    for c in spec.data.mixture.iter().filter_map(|c| c.corpus) {
        if out.contains_key(&(c, *tokenizer)) {
            continue;
        }
        let t = tokenize(rec, &c, tokenizer, progress)?;
        out.insert((c, *tokenizer), t.body.shard);
    }
    Ok(out)
}

/// A spec's `model.vocab` against its stored tokenizer: `Some(problem)` when they disagree or
/// the tokenizer is not in the lab.
pub fn vocab_problem(rec: &Recorder, spec: &ExperimentSpec) -> Result<Option<String>, LabError> {
    let Some(tokenizer) = spec.data.tokenizer.stored() else {
        return Ok(None);
    };
    Ok(match tokenizer_vocab(rec, tokenizer)? {
        None => Some(format!(
            "data.tokenizer = {tokenizer}: no `tokenizer` entry of this lab declares it; add it with `glassbox data tokenizer train` or `glassbox data tokenizer import`"
        )),
        Some(v) if v != spec.model.vocab => Some(format!(
            "model.vocab = {}: the tokenizer {tokenizer} has {v} tokens (added tokens included); set model.vocab = {v}",
            spec.model.vocab
        )),
        Some(_) => None,
    })
}

fn check_vocab(rec: &Recorder, spec: &ExperimentSpec) -> Result<(), LabError> {
    match vocab_problem(rec, spec)? {
        Some(p) => Err(LabError::Refused(p)),
        None => Ok(()),
    }
}
