//! The lab's pen on the ledger: puts blobs and appends entries, durably, from any process.
//!
//! [`Recorder`] is shared by the flow (proposals, approvals) and the workers (run records).
//! An entry is first *sequenced*: inserted into the lab database's sequencer
//! ([`crate::db::sequence`]), which gives it its log index — in the same transaction as the
//! change it records when there is one ([`crate::queue::Ending::sequence`],
//! [`crate::queue::Queue::enqueue_sequenced`]), else in one of its own ([`Recorder::append`]).
//! Then it is *integrated*: [`Recorder::publish`] writes every sequenced entry up to it into the
//! log in index order (tiles, signed checkpoint, witness cosignatures) and returns once the
//! checkpoint covers it. A process that holds the lab's signing key integrates itself, under the
//! integrator lock (PostgreSQL's advisory lock, then the log's file lock); one without the key
//! (a worker on another machine) only sequences and waits for the integrator (`serve`) to
//! publish. When the blob store is a bucket, the integrator copies each checkpoint and its
//! tiles there before the entries count as published ([`glassbox_ledger::Mirror`]), so the
//! bucket is the public log. A crashed integrator loses nothing: the entries wait in the database at their
//! indices, and the next one integrates them exactly once.
//!
//! It also reads entries back (an approval, to check a job against it), keeps the index in step
//! with the log, and answers the few questions the lab asks of its own record (which corpora a
//! `dataset` entry declares, whether a run already has its `result`, the last approval of a
//! spec, an experiment's runs), reading only the entries sequenced since it last looked. It
//! does not decide what to record: the flow and the worker do.

use glassbox_schemas::RefRole;
use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use glassbox_ledger::index::Index;
use glassbox_ledger::{BlobStore, DirSource, LabDir, LockMode, LogReader};
use glassbox_schemas::record::{EntryBody, EvalSuiteBody, refs};
use glassbox_schemas::{Blake3Hash, BlobHash, ExperimentId, LedgerEntry, RunId, SpecHash};

use crate::error::LabError;
use crate::error::QueueError;
use crate::sequencer::Sequencer;

/// Entries integrated per log batch (one checkpoint each).
const INTEGRATE_BATCH: u32 = 4096;

/// How long a process without the signing key waits for the integrator to publish an entry it
/// sequenced before reporting that nothing integrates.
pub const PUBLISH_WAIT: Duration = Duration::from_secs(120);

/// Writes blobs and entries to one lab's ledger.
pub struct Recorder {
    lab: LabDir,
    blobs: Arc<dyn BlobStore>,
    /// The lab database's sequencer.
    seq: Sequencer,
    /// Whether this process holds the signing key and so integrates.
    integrates: bool,
    /// Serialises this process's integrations (the integrator lock serialises processes).
    append_lock: Mutex<()>,
    /// What the log has said so far, caught up on each question.
    facts: Mutex<LogFacts>,
    /// The witnesses every checkpoint is sent to (`[ledger] witnesses`).
    witnessing: Option<Arc<glassbox_ledger::cosigning::Witnessing>>,
    /// Copies each checkpoint and its tiles into the blob store's bucket, when it has one.
    mirror: glassbox_ledger::Mirror,
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
    /// Every `eval_suite` entry, in log order.
    suites: Vec<(u64, EvalSuiteBody)>,
}

impl LogFacts {
    fn fold(&mut self, index: u64, e: &LedgerEntry) {
        match &e.body {
            EntryBody::Dataset(_) => {
                if let Some(h) = e.blob(RefRole::Corpus) {
                    self.datasets.entry(BlobHash(*h)).or_insert(index);
                }
            }
            EntryBody::Tokenizer(_) => {
                if let Some(h) = e.blob(RefRole::Tokenizer) {
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
            EntryBody::EvalSuite(b) => self.suites.push((index, b.clone())),
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
    /// store shared by many machines) and sequencing entries in `seq`. With the lab's signing
    /// key it integrates, and sets the sequencer up over the log the first time (copying the
    /// log's entries in); without it, the sequencer must have been set up already.
    pub fn open(lab: LabDir, blobs: Arc<dyn BlobStore>, seq: Sequencer) -> Result<Self, LabError> {
        let integrates = lab.key_path().is_file();
        let rec = Self {
            lab,
            blobs,
            seq,
            integrates,
            append_lock: Mutex::new(()),
            facts: Mutex::new(LogFacts::default()),
            witnessing: None,
            mirror: glassbox_ledger::Mirror::new(),
        };
        if rec.integrates {
            let size = rec.log_size()?;
            match rec.seq.head()? {
                // A tool that wrote the log directly while no process ran: adopt its entries.
                Some(head) if size > head.next => {
                    rec.seq
                        .adopt(head.next, rec.log_entries(head.next, size)?)?;
                }
                Some(_) => {}
                None => {
                    rec.seq.set_up(&rec.log_entries(0, size)?)?;
                }
            }
        }
        Ok(rec)
    }

    /// Whether this process integrates (holds the lab's signing key).
    pub fn integrates(&self) -> bool {
        self.integrates
    }

    /// Sends every checkpoint this recorder makes to `witnessing`'s witnesses for cosignatures.
    pub fn with_witnesses(
        mut self,
        witnessing: Option<Arc<glassbox_ledger::cosigning::Witnessing>>,
    ) -> Self {
        self.witnessing = witnessing;
        self
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

    /// Sequences entries in order in a transaction of their own, then publishes them; returns
    /// each one's index once all are in a published checkpoint.
    pub fn append(&self, entries: &[LedgerEntry]) -> Result<Vec<u64>, LabError> {
        let bytes = canonical(entries)?;
        if bytes.is_empty() {
            return Ok(Vec::new());
        }
        let first = self.seq.append(&bytes)?;
        let last = first + bytes.len() as u64 - 1;
        self.publish(last)?;
        Ok((first..=last).collect())
    }

    /// Whether the sequencer holds exactly `entries` from index `first` on: how a writer that
    /// could not learn its commit's outcome finds out whether the commit applied (entries are
    /// sequenced in the same transaction as the change they record).
    pub fn is_sequenced(&self, first: u64, entries: &[Vec<u8>]) -> Result<bool, LabError> {
        let held = self.seq.entries_from(first, entries.len() as u32)?;
        Ok(held.len() == entries.len()
            && held
                .iter()
                .zip(entries)
                .enumerate()
                .all(|(k, ((i, bytes), e))| *i == first + k as u64 && bytes == e))
    }

    /// Returns once entry `index` is in a published checkpoint: integrating everything
    /// sequenced up to now when this process holds the key, else waiting (at most
    /// [`PUBLISH_WAIT`]) for the integrator to.
    pub fn publish(&self, index: u64) -> Result<(), LabError> {
        if self.integrates {
            let deadline = Instant::now() + crate::sequencer::RETRY_FOR;
            let mut pause = Duration::from_millis(50);
            let size = loop {
                match self.integrate() {
                    Ok(size) => break size,
                    // The database is away: the entries are sequenced; integrate once it is back.
                    Err(LabError::Queue(e)) if e.is_transient() && Instant::now() < deadline => {
                        tracing::warn!(error = %e, "cannot integrate: the database is away; retrying");
                        std::thread::sleep(pause);
                        pause = (pause * 2).min(Duration::from_secs(2));
                    }
                    Err(e) => return Err(e),
                }
            };
            if size > index {
                return Ok(());
            }
            return Err(LabError::Refused(format!(
                "entry {index} is not sequenced: the log's sequencer ends at {size}"
            )));
        }
        let start = Instant::now();
        let mut pause = Duration::from_millis(10);
        loop {
            let head = self.seq.head()?.ok_or(QueueError::NotSequencing)?;
            if head.integrated > index {
                return Ok(());
            }
            if start.elapsed() >= PUBLISH_WAIT {
                return Err(LabError::Refused(format!(
                    "entry {index} is sequenced but no integrator published it within {}s (the log's checkpoint covers {} entries); is `glassbox serve` running where the lab's key is?",
                    PUBLISH_WAIT.as_secs(),
                    head.integrated
                )));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }

    /// Integrates every entry sequenced so far into the log, in index order and in batches
    /// of up to [`INTEGRATE_BATCH`] (one checkpoint each); returns the log's size after.
    /// Needs the signing key. Under the integrator lock, so each entry is written once: the
    /// log's checkpoint says where the last integrator stopped, and a batch it left journaled
    /// is finished with the same entries when the log is opened.
    pub fn integrate(&self) -> Result<u64, LabError> {
        match self.integrate_with(true)? {
            Some(size) => Ok(size),
            None => Err(LabError::Task("the integrator lock was not taken".into())),
        }
    }

    /// [`Recorder::integrate`], waiting for the locks when `wait`, else returning `None` at
    /// once when another integrator holds one (it integrates these entries too).
    fn integrate_with(&self, wait: bool) -> Result<Option<u64>, LabError> {
        let _guard = if wait {
            self.append_lock
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
        } else {
            match self.append_lock.try_lock() {
                Ok(g) => g,
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => return Ok(None),
            }
        };
        let Some(_lock) = self.seq.integrator_lock(wait)? else {
            return Ok(None);
        };
        let mode = if wait {
            LockMode::Wait
        } else {
            LockMode::FailFast
        };
        let mut writer = match self.lab.writer(mode) {
            Ok(w) => w,
            Err(glassbox_ledger::Error::Locked { .. }) if !wait => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        if let Some(w) = &self.witnessing {
            writer = writer.with_witnesses(w.clone());
        }
        let mut size = writer.checkpoint().checkpoint.size.0;
        let head = self.seq.head()?.ok_or(QueueError::NotSequencing)?;
        if size > head.next {
            self.seq
                .adopt(head.next, self.log_entries(head.next, size)?)?;
        } else if size > head.integrated {
            // A crash between the checkpoint and this note, or a log grown around the
            // sequencer: the entries the log has past the note must be the sequenced ones.
            let logged = self.log_entries(head.integrated, size)?;
            let sequenced = self
                .seq
                .entries_from(head.integrated, (size - head.integrated) as u32)?;
            for ((i, bytes), log) in sequenced.into_iter().zip(logged) {
                if log != bytes {
                    return Err(LabError::Refused(format!(
                        "the log's entry {i} is not the entry sequenced at {i}: something appended to the log around the sequencer"
                    )));
                }
            }
        }
        loop {
            let batch = self.seq.entries_from(size, INTEGRATE_BATCH)?;
            if batch.is_empty() {
                self.mirror()?;
                self.seq.set_integrated(size)?;
                return Ok(Some(size));
            }
            let mut bytes = Vec::with_capacity(batch.len());
            for (i, (idx, entry)) in batch.into_iter().enumerate() {
                if idx != size + i as u64 {
                    return Err(LabError::Refused(format!(
                        "the sequencer has no entry {} (the next it has is {idx}): its sequence has a gap",
                        size + i as u64
                    )));
                }
                bytes.push(entry);
            }
            let n = bytes.len() as u64;
            let first = writer.append_batch(bytes)?.0;
            debug_assert_eq!(first, size);
            size += n;
            self.mirror()?;
            self.seq.set_integrated(size)?;
        }
    }

    /// Copies the log's installed checkpoint and the tiles it needs into the blob store's
    /// bucket (when the store is one), before the entries count as published: what a worker is
    /// told is published, an outsider can audit from the bucket. Under the integrator's locks.
    fn mirror(&self) -> Result<(), LabError> {
        if let Some(bucket) = self.blobs.bucket() {
            let report = self
                .mirror
                .sync(bucket, self.lab.root(), &self.lab.verifier_key()?)?;
            if report.written > 0 {
                tracing::debug!(size = report.size, tiles = report.written, deleted = report.deleted, bucket = %bucket.name(), "log copied to the bucket");
            }
        }
        Ok(())
    }

    /// Integrates when something sequenced is not yet in the log, or the bucket has not been
    /// brought up to it since this process started (one read of the sequencer's head
    /// otherwise), and no other integrator is at it (then it does nothing rather than wait:
    /// that one integrates these entries too); returns whether it integrated.
    pub fn integrate_pending(&self) -> Result<bool, LabError> {
        let head = self.seq.head()?.ok_or(QueueError::NotSequencing)?;
        // A bucket this process has not looked at may lag the log (a bucket configured for an
        // existing lab, an integrator killed between its checkpoint and the copy).
        let unmirrored = self.blobs.bucket().is_some() && self.mirror.published().is_none();
        if head.next <= head.integrated && !unmirrored {
            return Ok(false);
        }
        Ok(self.integrate_with(false)?.is_some())
    }

    /// The size of the log's installed checkpoint.
    fn log_size(&self) -> Result<u64, LabError> {
        let source = DirSource {
            root: self.lab.root().to_path_buf(),
        };
        Ok(LogReader::open(&source, &self.lab.verifier_key()?)?
            .size()
            .0)
    }

    /// Entries `from..to` as the log's files hold them (one reader, bundle by bundle).
    fn log_entries(&self, from: u64, to: u64) -> Result<Vec<Vec<u8>>, LabError> {
        let source = DirSource {
            root: self.lab.root().to_path_buf(),
        };
        let reader = LogReader::open(&source, &self.lab.verifier_key()?)?;
        let width = glassbox_ledger::tiles::TILE_WIDTH;
        let mut out = Vec::with_capacity(to.saturating_sub(from) as usize);
        let mut bundle = from / width;
        while bundle * width < to {
            for (k, e) in reader.bundle(bundle)?.into_iter().enumerate() {
                let i = bundle * width + k as u64;
                if i >= from && i < to {
                    out.push(e);
                }
            }
            bundle += 1;
        }
        Ok(out)
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

    /// Reads entry `index` back from the sequencer (every entry of the log, and those on
    /// their way into it).
    pub fn entry(&self, index: u64) -> Result<LedgerEntry, LabError> {
        let bytes = self
            .seq
            .entry(index)?
            .ok_or_else(|| LabError::Refused(format!("entry {index} is not on the record")))?;
        Ok(LedgerEntry::from_bytes(&bytes)?)
    }

    /// Calls `f` with every entry on the record — the log's and those on their way into it —
    /// in index order.
    pub fn for_each_entry(&self, f: impl FnMut(u64, LedgerEntry)) -> Result<(), LabError> {
        self.entries_from(0, f).map(drop)
    }

    /// Calls `f` with the sequenced entries from `from` on, in index order, stopping at a gap;
    /// returns the index after the last one.
    fn entries_from(
        &self,
        mut from: u64,
        mut f: impl FnMut(u64, LedgerEntry),
    ) -> Result<u64, LabError> {
        loop {
            let batch = self.seq.entries_from(from, INTEGRATE_BATCH)?;
            let before = from;
            for (i, bytes) in batch {
                if i != from {
                    break;
                }
                f(i, LedgerEntry::from_bytes(&bytes)?);
                from = i + 1;
            }
            if from == before {
                return Ok(from);
            }
        }
    }

    /// Folds the entries sequenced since the last question into the facts and answers `ask`.
    fn ask<T>(&self, ask: impl FnOnce(&LogFacts) -> T) -> Result<T, LabError> {
        let mut facts = self.facts.lock().unwrap_or_else(|p| p.into_inner());
        let from = facts.scanned;
        facts.scanned = self.entries_from(from, |i, e| facts.fold(i, &e))?;
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

    /// Every `eval_suite` entry on the record (index and body), oldest first.
    pub fn eval_suites(&self) -> Result<Vec<(u64, EvalSuiteBody)>, LabError> {
        self.ask(|f| f.suites.clone())
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

    /// Keeps `index` following the log every `interval` until `stop` turns true, on a thread
    /// of its own (a log reader is not `Send`); a failed sync is logged and retried.
    pub fn follow_index(
        self: Arc<Self>,
        index: Index,
        interval: std::time::Duration,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<()> {
        let handle = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
            handle.block_on(async move {
                loop {
                    tokio::select! {
                        _ = tokio::time::sleep(interval) => {}
                        _ = stop.changed() => return,
                    }
                    if let Err(e) = self.sync_index(&index).await {
                        tracing::warn!(error = %e, "index sync failed; retrying");
                    }
                }
            })
        })
    }
}

/// The canonical bytes of `entries`, each checked against the log's entry rules (size,
/// canonical form) before anything is sequenced.
pub fn canonical(entries: &[LedgerEntry]) -> Result<Vec<Vec<u8>>, LabError> {
    let mut bytes = Vec::with_capacity(entries.len());
    for e in entries {
        let b = e.to_canonical_bytes()?;
        glassbox_ledger::log::check_entry(&b)?;
        bytes.push(b);
    }
    Ok(bytes)
}

/// `refs` with a single blob in `role`.
pub fn one_ref(role: RefRole, hash: &BlobHash) -> BTreeMap<String, Blake3Hash> {
    refs([(role, hash.0)])
}
