//! The lab's pen on the ledger: puts blobs and appends entries, durably, from any process.
//!
//! [`Recorder`] is shared by the flow (proposals, approvals) and the workers (run records). It
//! takes the lab's writer lock for each append and releases it right after, so the server,
//! `glassbox run` and several `glassbox worker` processes on one machine can all write to one
//! log in turn (the log's own group commit batches concurrent appends within a process). It
//! also reads entries back (an approval, to check a job against it) and keeps the index in
//! step with the log, and answers the few questions the lab asks of its own log (which corpora
//! a `dataset` entry declares, whether a run already has its `result`, the last approval of a
//! spec, an experiment's runs), reading only the entries appended since it last looked. It does not decide what to
//! record: the flow and the worker do.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::sync::{Arc, Mutex};

use glassbox_ledger::index::Index;
use glassbox_ledger::{BlobStore, DirSource, LabDir, LockMode, LogReader};
use glassbox_schemas::record::{EntryBody, refs};
use glassbox_schemas::{Blake3Hash, BlobHash, ExperimentId, LedgerEntry, RunId, SpecHash};

use crate::error::LabError;

/// Writes blobs and entries to one lab's ledger.
pub struct Recorder {
    lab: LabDir,
    blobs: Arc<dyn BlobStore>,
    /// Serialises this process's appends (the OS lock serialises processes).
    append_lock: Mutex<()>,
    /// What the log has said so far, caught up on each question.
    facts: Mutex<LogFacts>,
    /// The witnesses every checkpoint is sent to (`[ledger] witnesses`).
    witnessing: Option<Arc<glassbox_ledger::cosigning::Witnessing>>,
}

/// The facts the lab looks up in its own log, folded from the entries read so far.
#[derive(Debug, Default)]
struct LogFacts {
    /// Entries folded in.
    scanned: u64,
    /// Corpus hash -> its (first) `dataset` entry.
    datasets: HashMap<BlobHash, u64>,
    /// Tokenizer hash -> its (first) `tokenizer` entry.
    tokenizers: HashMap<BlobHash, u64>,
    /// (corpus, tokenizer) -> its (first) `tokenized` entry.
    tokenized: HashMap<(BlobHash, BlobHash), u64>,
    /// Run id -> its (first) `result` entry.
    results: HashMap<String, u64>,
    /// (experiment, spec hash) -> its last `approval` entry.
    approvals: HashMap<(String, SpecHash), u64>,
    /// Run id -> the experiment of its `run_started` entry, and runs in the order they
    /// started.
    runs: HashMap<String, Option<String>>,
    run_order: Vec<String>,
}

impl LogFacts {
    fn fold(&mut self, index: u64, e: &LedgerEntry) {
        match &e.body {
            EntryBody::Dataset(_) => {
                if let Some(h) = e.refs.get("corpus") {
                    self.datasets.entry(BlobHash(*h)).or_insert(index);
                }
            }
            EntryBody::Tokenizer(_) => {
                if let Some(h) = e.refs.get("tokenizer") {
                    self.tokenizers.entry(BlobHash(*h)).or_insert(index);
                }
            }
            EntryBody::Tokenized(b) => {
                self.tokenized
                    .entry((b.corpus, b.tokenizer))
                    .or_insert(index);
            }
            EntryBody::Result(b) => {
                self.results.entry(b.run.0.clone()).or_insert(index);
            }
            EntryBody::RunStarted(b) => {
                if !self.runs.contains_key(&b.run.0) {
                    self.run_order.push(b.run.0.clone());
                }
                self.runs
                    .insert(b.run.0.clone(), e.experiment.as_ref().map(|x| x.0.clone()));
            }
            EntryBody::Approval(b) => {
                if let Some(exp) = &e.experiment {
                    self.approvals.insert((exp.0.clone(), b.spec_hash), index);
                }
            }
            _ => {}
        }
    }
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Recorder({})", self.lab.root().display())
    }
}

impl Recorder {
    /// A recorder for `lab`, storing blobs in `blobs` (the lab's directory store or an object
    /// store shared by many machines).
    pub fn new(lab: LabDir, blobs: Arc<dyn BlobStore>) -> Self {
        Self {
            lab,
            blobs,
            append_lock: Mutex::new(()),
            facts: Mutex::new(LogFacts::default()),
            witnessing: None,
        }
    }

    /// Sends every checkpoint this recorder makes to `witnessing`'s witnesses for cosignatures.
    pub fn with_witnesses(
        mut self,
        witnessing: Option<Arc<glassbox_ledger::cosigning::Witnessing>>,
    ) -> Self {
        self.witnessing = witnessing;
        self
    }

    /// A recorder on the lab's own blob directory.
    pub fn local(lab: LabDir) -> Self {
        let blobs: Arc<dyn BlobStore> = Arc::new(lab.blobs());
        Self::new(lab, blobs)
    }

    /// The lab.
    pub fn lab(&self) -> &LabDir {
        &self.lab
    }

    /// The blob store.
    pub fn blobs(&self) -> &Arc<dyn BlobStore> {
        &self.blobs
    }

    /// Stores `bytes`; returns their hash.
    pub fn put_bytes(&self, bytes: &[u8]) -> Result<BlobHash, LabError> {
        let mut r = bytes;
        Ok(self.blobs.put(&mut r)?.hash)
    }

    /// Streams a file into the store; returns its hash and size.
    pub fn put_file(&self, path: &std::path::Path) -> Result<(BlobHash, u64), LabError> {
        let mut f = std::fs::File::open(path).map_err(LabError::io("cannot open", path))?;
        let out = self.blobs.put(&mut f)?;
        Ok((out.hash, out.bytes))
    }

    /// Moves a file into the store (renamed when on the store's file system, so nothing is
    /// copied); returns its hash and size. The file's name is gone afterwards.
    pub fn put_moved(&self, path: &std::path::Path) -> Result<(BlobHash, u64), LabError> {
        let out = self.blobs.put_move(path)?;
        Ok((out.hash, out.bytes))
    }

    /// Reads a whole blob (for small ones: specs, metric chunks).
    pub fn get_bytes(&self, hash: &BlobHash) -> Result<Vec<u8>, LabError> {
        let mut out = Vec::new();
        self.blobs
            .get(hash)?
            .read_to_end(&mut out)
            .map_err(LabError::io("cannot read blob", hash.to_string()))?;
        Ok(out)
    }

    /// Appends entries in order; returns each one's index once all are durable.
    pub fn append(&self, entries: &[LedgerEntry]) -> Result<Vec<u64>, LabError> {
        let mut bytes = Vec::with_capacity(entries.len());
        for e in entries {
            bytes.push(e.to_canonical_bytes()?);
        }
        let _guard = self
            .append_lock
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut writer = self.lab.writer(LockMode::Wait)?;
        if let Some(w) = &self.witnessing {
            writer = writer.with_witnesses(w.clone());
        }
        let first = writer.append_batch(bytes)?.0;
        Ok((first..first + entries.len() as u64).collect())
    }

    /// Builds and appends one entry; returns its index.
    pub fn record(
        &self,
        experiment: Option<&ExperimentId>,
        refs: BTreeMap<String, Blake3Hash>,
        body: impl Into<EntryBody>,
    ) -> Result<u64, LabError> {
        let entry = LedgerEntry::new(experiment.cloned(), refs, body);
        Ok(self.append(std::slice::from_ref(&entry))?[0])
    }

    /// Reads entry `index` back from the log (checked against the signed checkpoint).
    pub fn entry(&self, index: u64) -> Result<LedgerEntry, LabError> {
        let source = DirSource {
            root: self.lab.root().to_path_buf(),
        };
        let reader = LogReader::open(&source, &self.lab.verifier_key()?)?;
        let bytes = reader.entry(glassbox_ledger::LeafIndex(index))?;
        Ok(LedgerEntry::from_bytes(&bytes)?)
    }

    /// Folds the entries appended since the last question into the facts and answers `ask`.
    fn ask<T>(&self, ask: impl FnOnce(&LogFacts) -> T) -> Result<T, LabError> {
        let mut facts = self.facts.lock().unwrap_or_else(|p| p.into_inner());
        let source = DirSource {
            root: self.lab.root().to_path_buf(),
        };
        let reader = LogReader::open(&source, &self.lab.verifier_key()?)?;
        let size = reader.size().0;
        let width = glassbox_ledger::tiles::TILE_WIDTH;
        while facts.scanned < size {
            let bundle = facts.scanned / width;
            for (i, bytes) in reader.bundle(bundle)?.iter().enumerate() {
                let index = bundle * width + i as u64;
                if index >= facts.scanned {
                    facts.fold(index, &LedgerEntry::from_bytes(bytes)?);
                }
            }
            facts.scanned = ((bundle + 1) * width).min(size);
        }
        Ok(ask(&facts))
    }

    /// The `dataset` entry that declares corpus `hash`, if any.
    pub fn dataset_entry(&self, hash: &BlobHash) -> Result<Option<u64>, LabError> {
        self.ask(|f| f.datasets.get(hash).copied())
    }

    /// The `tokenizer` entry that declares tokenizer `hash`, if any.
    pub fn tokenizer_entry(&self, hash: &BlobHash) -> Result<Option<u64>, LabError> {
        self.ask(|f| f.tokenizers.get(hash).copied())
    }

    /// The `tokenized` entry of `corpus` with `tokenizer`, if any.
    pub fn tokenized_entry(
        &self,
        corpus: &BlobHash,
        tokenizer: &BlobHash,
    ) -> Result<Option<u64>, LabError> {
        self.ask(|f| f.tokenized.get(&(*corpus, *tokenizer)).copied())
    }

    /// The `result` entry of `run`, if it has one.
    pub fn result_entry(&self, run: &str) -> Result<Option<u64>, LabError> {
        self.ask(|f| f.results.get(run).copied())
    }

    /// The runs of `experiment` (those with a `run_started` entry), oldest first.
    pub fn runs_of(&self, experiment: &ExperimentId) -> Result<Vec<RunId>, LabError> {
        self.ask(|f| {
            f.run_order
                .iter()
                .filter(|r| {
                    f.runs.get(*r).and_then(|x| x.as_deref()) == Some(experiment.0.as_str())
                })
                .map(|r| RunId(r.clone()))
                .collect()
        })
    }

    /// The experiment `run` belongs to, when it is on the record.
    pub fn experiment_of_run(&self, run: &RunId) -> Result<Option<ExperimentId>, LabError> {
        self.ask(|f| f.runs.get(&run.0).cloned().flatten().map(ExperimentId))
    }

    /// The last `approval` entry of `spec_hash` for `experiment`, if any.
    pub fn last_approval(
        &self,
        experiment: &ExperimentId,
        spec_hash: &SpecHash,
    ) -> Result<Option<u64>, LabError> {
        self.ask(|f| {
            f.approvals
                .get(&(experiment.0.clone(), *spec_hash))
                .copied()
        })
    }

    /// Catches the index up with the log, metric chunks included.
    pub async fn sync_index(&self, index: &Index) -> Result<u64, LabError> {
        let source = DirSource {
            root: self.lab.root().to_path_buf(),
        };
        let reader = LogReader::open(&source, &self.lab.verifier_key()?)?;
        Ok(index
            .sync_with_blobs(&reader, Some(self.blobs.as_ref()))
            .await?)
    }
}

/// `refs` with a single blob.
pub fn one_ref(name: &str, hash: &BlobHash) -> BTreeMap<String, Blake3Hash> {
    refs([(name, hash.0)])
}
