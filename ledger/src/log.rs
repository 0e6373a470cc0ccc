//! The transparency log on disk: [`LogWriter`] (durable, group-committed appends under an OS
//! file lock) and [`LogReader`] (entries and proofs from any [`LogSource`]).
//!
//! Commit protocol, per batch of entries:
//!
//! 1. the batch is written to the journal `log/.batch` (from which size, the entries, a
//!    SHA-256 of both) and fsynced: from here on the batch's entries are fixed;
//! 2. its new tiles (full and partial hash tiles, entry bundles) are written each to a temp
//!    file, fsynced and renamed, and their directories fsynced;
//! 3. the checkpoint is signed and, when witnesses are configured ([`LogWriter::with_witnesses`]),
//!    sent to them for cosignatures ([`crate::cosigning`], bounded in time);
//! 4. the checkpoint, with the cosignatures that came back, is installed the same way. This is
//!    the commit point: an append returns only after it;
//! 5. the checkpoint is added to the archive of checkpoints ([`crate::archive`]), and partial
//!    tiles and bundles whose full tile is now published are deleted (C2SP tlog-tiles
//!    allows it; the partials of tiles not yet full stay, since a checkpoint named them).
//!
//! A crash anywhere leaves a journal that extends the checkpoint; the next writer integrates
//! that same batch first, so every tile path it had written gets the same bytes again (a tile
//! path's content never changes, as C2SP requires), and a witness asked in step 3 sees the same
//! checkpoint again rather than a fork. A reader only follows paths the installed checkpoint
//! implies. This module does not check blobs or the index.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, MutexGuard};

use glassbox_schemas::LedgerEntry;
use glassbox_schemas::record::MAX_ENTRY_BYTES;

use sha2::{Digest, Sha256};

use crate::archive::CheckpointArchive;
use crate::checkpoint::{Checkpoint, SignedCheckpoint, SigningKey, VerifierKey};
use crate::cosigning::{CosignOutcome, Witnessing};
use crate::error::Error;
use crate::fsync::sync_dir;
use crate::merkle::{
    self, LeafIndex, MerkleHash, NodeSource, ProofError, TreeSize, leaf_hash, perfect_root,
};
use crate::source::{DirSource, LogSource, ReadLimit};
use crate::tiles::{
    self, TILE_WIDTH, TileId, TileKind, TreeBuilder, hash_tile_bytes, parse_hash_tile,
    push_bundle_entry, split_bundle,
};

/// Checks that `bytes` is a canonical ledger entry within the size limit.
pub fn check_entry(bytes: &[u8]) -> Result<LedgerEntry, Error> {
    if bytes.len() > MAX_ENTRY_BYTES {
        return Err(Error::EntryTooLarge {
            bytes: bytes.len(),
            limit: MAX_ENTRY_BYTES,
        });
    }
    let entry = LedgerEntry::from_bytes(bytes).map_err(|e| Error::BadEntry(e.to_string()))?;
    let canonical = entry
        .to_canonical_bytes()
        .map_err(|e| Error::BadEntry(e.to_string()))?;
    if canonical != bytes {
        return Err(Error::BadEntry(
            "the bytes are not in RFC 8785 canonical form; encode with LedgerEntry::to_canonical_bytes".into(),
        ));
    }
    Ok(entry)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

struct Queue {
    pending: Vec<Vec<u8>>,
    next_index: u64,
    durable: u64,
    writing: bool,
    failed: Option<String>,
}

struct DiskState {
    log_dir: PathBuf,
    tree: TreeBuilder,
    /// Entries of the current partial bundle, encoded.
    bundle: Vec<u8>,
    bundle_len: usize,
    checkpoint: SignedCheckpoint,
}

/// The single writer of a lab's log. Holds the lab's writer lock until dropped.
pub struct LogWriter {
    key: SigningKey,
    witnessing: Option<std::sync::Arc<Witnessing>>,
    /// What the witnesses gave for the latest checkpoint.
    last_cosigning: Mutex<Option<CosignOutcome>>,
    queue: Mutex<Queue>,
    cond: Condvar,
    disk: Mutex<DiskState>,
    _lock: File,
}

impl std::fmt::Debug for LogWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LogWriter({})", self.key.name())
    }
}

/// How to react when another process holds the writer lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockMode {
    /// Block until the other writer finishes.
    Wait,
    /// Fail at once with [`Error::Locked`].
    FailFast,
}

impl LogWriter {
    /// Takes the writer lock at `lock_path` and resumes the log in `log_dir` from its checkpoint.
    pub fn open(
        log_dir: &Path,
        lock_path: &Path,
        key: SigningKey,
        mode: LockMode,
    ) -> Result<Self, Error> {
        let lock_file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(lock_path)
            .map_err(Error::io("cannot open lock file", lock_path))?;
        let op = match mode {
            LockMode::Wait => rustix::fs::FlockOperation::LockExclusive,
            LockMode::FailFast => rustix::fs::FlockOperation::NonBlockingLockExclusive,
        };
        match rustix::fs::flock(&lock_file, op) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => {
                return Err(Error::Locked {
                    path: lock_path.to_path_buf(),
                });
            }
            Err(e) => return Err(Error::io("cannot lock", lock_path)(e.into())),
        }
        remove_temp_files(log_dir)?;
        let disk = DiskState::resume(log_dir, &key)?;
        let size = disk.tree.size();
        Ok(Self {
            key,
            witnessing: None,
            last_cosigning: Mutex::new(None),
            queue: Mutex::new(Queue {
                pending: Vec::new(),
                next_index: size,
                durable: size,
                writing: false,
                failed: None,
            }),
            cond: Condvar::new(),
            disk: Mutex::new(disk),
            _lock: lock_file,
        })
    }

    /// Creates the empty log (first checkpoint, size 0) in `log_dir`.
    pub fn create(log_dir: &Path, key: &SigningKey) -> Result<SignedCheckpoint, Error> {
        fs::create_dir_all(log_dir.join("tile")).map_err(Error::io("cannot create", log_dir))?;
        let signed = key.sign(Checkpoint {
            origin: key.name().to_string(),
            size: TreeSize(0),
            root: merkle::empty_root(),
        });
        write_durable(log_dir, &log_dir.join("checkpoint"), &signed.to_bytes())?;
        sync_dir(log_dir)?;
        CheckpointArchive::in_log_dir(log_dir).append(&signed)?;
        Ok(signed)
    }

    /// Asks `witnessing`'s witnesses to cosign every checkpoint from now on (see the module
    /// docs). The `Witnessing` remembers what each witness holds, so share one across writers.
    pub fn with_witnesses(mut self, witnessing: std::sync::Arc<Witnessing>) -> Self {
        self.witnessing = Some(witnessing);
        self
    }

    /// What the witnesses gave for the latest checkpoint this writer made (`None` before the
    /// first, or without witnesses).
    pub fn last_cosigning(&self) -> Option<CosignOutcome> {
        lock(&self.last_cosigning).clone()
    }

    /// The latest durable checkpoint.
    pub fn checkpoint(&self) -> SignedCheckpoint {
        lock(&self.disk).checkpoint.clone()
    }

    /// Appends a ledger entry; returns its index once it is durable.
    pub fn append_entry(&self, entry: &LedgerEntry) -> Result<LeafIndex, Error> {
        let bytes = entry.to_canonical_bytes().map_err(|e| match e {
            glassbox_schemas::record::EntryError::TooLarge { bytes } => Error::EntryTooLarge {
                bytes,
                limit: MAX_ENTRY_BYTES,
            },
            other => Error::BadEntry(other.to_string()),
        })?;
        self.append(bytes)
    }

    /// Appends canonical entry bytes; returns the index once durable. Concurrent callers are
    /// batched: whoever finds no write in progress writes everything queued so far.
    pub fn append(&self, bytes: Vec<u8>) -> Result<LeafIndex, Error> {
        self.append_batch(vec![bytes])
    }

    /// Appends several entries in order; returns the first one's index once all are durable.
    /// All entries are checked before any is queued, so a bad one appends nothing.
    pub fn append_batch(&self, entries: Vec<Vec<u8>>) -> Result<LeafIndex, Error> {
        for e in &entries {
            check_entry(e)?;
        }
        let count = entries.len() as u64;
        let mut q = lock(&self.queue);
        if let Some(f) = &q.failed {
            return Err(Error::WriterFailed(f.clone()));
        }
        let first = q.next_index;
        if count == 0 {
            return Ok(LeafIndex(first));
        }
        let idx = first + count - 1;
        q.next_index += count;
        q.pending.extend(entries);
        loop {
            if q.durable > idx {
                return Ok(LeafIndex(first));
            }
            if let Some(f) = &q.failed {
                return Err(Error::WriterFailed(f.clone()));
            }
            if q.writing {
                q = self.cond.wait(q).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            q.writing = true;
            let batch = std::mem::take(&mut q.pending);
            drop(q);
            let result = lock(&self.disk).write_batch(&self.key, batch, self.witnessing.as_deref());
            q = lock(&self.queue);
            q.writing = false;
            match result {
                Ok((size, outcome)) => {
                    q.durable = size;
                    if outcome.is_some() {
                        *lock(&self.last_cosigning) = outcome;
                    }
                }
                Err(e) => q.failed = Some(e.to_string()),
            }
            self.cond.notify_all();
        }
    }
}

fn remove_temp_files(log_dir: &Path) -> Result<(), Error> {
    let Ok(rd) = fs::read_dir(log_dir) else {
        return Ok(());
    };
    for e in rd.flatten() {
        if e.file_name().to_string_lossy().starts_with(".tmp-") {
            fs::remove_file(e.path())
                .map_err(Error::io("cannot remove stale temp file", e.path()))?;
        }
    }
    Ok(())
}

/// Writes `bytes` to `dest` via a temp file in `log_dir`: write, fsync, rename. The caller
/// fsyncs the destination directory.
fn write_durable(log_dir: &Path, dest: &Path, bytes: &[u8]) -> Result<(), Error> {
    let mut tmp = tempfile::Builder::new()
        .prefix(".tmp-")
        .tempfile_in(log_dir)
        .map_err(Error::io("cannot create a temp file in", log_dir))?;
    tmp.write_all(bytes)
        .map_err(Error::io("cannot write", tmp.path()))?;
    tmp.as_file()
        .sync_data()
        .map_err(Error::io("cannot fsync", tmp.path()))?;
    tmp.persist(dest)
        .map_err(|e| Error::io("cannot rename into", dest)(e.error))?;
    Ok(())
}

fn corrupt(path: &Path, reason: impl Into<String>) -> Error {
    Error::Corrupt {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

impl DiskState {
    /// Reads the state at the installed checkpoint, then finishes the batch a crashed writer
    /// left in the journal (or the cleanup after it).
    fn resume(log_dir: &Path, key: &SigningKey) -> Result<Self, Error> {
        let mut state = Self::read_state(log_dir, &key.verifier_key())?;
        let size = state.tree.size();
        if let Some(JournaledBatch { from, entries }) = read_journal(log_dir)? {
            if from == size && !entries.is_empty() {
                state.integrate(key, &entries, None)?;
            } else if from < size {
                remove_superseded_partials(log_dir, from, size);
            } else if from > size {
                return Err(corrupt(
                    &log_dir.join(JOURNAL),
                    format!("the journal starts at size {from}, past the checkpoint's {size}"),
                ));
            }
        }
        // A crash between installing a checkpoint and archiving it: archive it now.
        let archive = CheckpointArchive::in_log_dir(log_dir);
        let size = state.tree.size();
        if archive.last_size()?.is_none_or(|last| last < size) {
            archive.append(&state.checkpoint)?;
        }
        Ok(state)
    }

    fn read_state(log_dir: &Path, vkey: &VerifierKey) -> Result<Self, Error> {
        let cp_path = log_dir.join("checkpoint");
        let note = fs::read(&cp_path).map_err(Error::io("cannot read", &cp_path))?;
        let checkpoint = vkey.verify(&note)?;
        let size = checkpoint.checkpoint.size.0;
        let mut rows = Vec::new();
        let mut level = 0u8;
        while (size >> (8 * u32::from(level))) > 0 {
            let count = size >> (8 * u32::from(level));
            let width = count % TILE_WIDTH;
            if width == 0 {
                rows.push(Vec::new());
            } else {
                let id = TileId {
                    kind: TileKind::Hashes(level),
                    index: count / TILE_WIDTH,
                    width: width as u16,
                };
                let path = log_dir.join(id.path());
                let bytes = fs::read(&path).map_err(Error::io("cannot read", &path))?;
                let row = parse_hash_tile(&bytes, id.width).ok_or_else(|| {
                    corrupt(
                        &path,
                        format!("{} bytes, expected {}", bytes.len(), width * 32),
                    )
                })?;
                rows.push(row);
            }
            level += 1;
        }
        let tree = TreeBuilder::resume(size, rows)
            .ok_or_else(|| corrupt(&cp_path, "partial tiles do not fit the size"))?;
        if tree.root() != checkpoint.checkpoint.root {
            return Err(corrupt(
                &cp_path,
                "the partial hash tiles do not lead to the checkpoint's root",
            ));
        }
        let bundle_len = (size % TILE_WIDTH) as usize;
        let mut bundle = Vec::new();
        if bundle_len > 0 {
            let id = TileId {
                kind: TileKind::Entries,
                index: size / TILE_WIDTH,
                width: bundle_len as u16,
            };
            let path = log_dir.join(id.path());
            bundle = fs::read(&path).map_err(Error::io("cannot read", &path))?;
            let entries =
                split_bundle(&bundle, bundle_len).map_err(|e| corrupt(&path, e.to_string()))?;
            let leaves: Vec<MerkleHash> = entries.iter().map(|e| leaf_hash(e)).collect();
            if tree.rows().first().map(|r| r.as_slice()) != Some(leaves.as_slice()) {
                return Err(corrupt(
                    &path,
                    "entries do not match the leaf hashes in tile level 0",
                ));
            }
        }
        Ok(Self {
            log_dir: log_dir.to_path_buf(),
            tree,
            bundle,
            bundle_len,
            checkpoint,
        })
    }

    /// Journals a batch, writes it durably and installs the new checkpoint; returns the new
    /// size and what the witnesses gave.
    fn write_batch(
        &mut self,
        key: &SigningKey,
        batch: Vec<Vec<u8>>,
        witnessing: Option<&Witnessing>,
    ) -> Result<(u64, Option<CosignOutcome>), Error> {
        if batch.is_empty() {
            return Ok((self.tree.size(), None));
        }
        write_journal(&self.log_dir, self.tree.size(), &batch)?;
        self.integrate(key, &batch, witnessing)
    }

    /// Steps 2-5 of the module docs for a journaled batch.
    fn integrate(
        &mut self,
        key: &SigningKey,
        batch: &[Vec<u8>],
        witnessing: Option<&Witnessing>,
    ) -> Result<(u64, Option<CosignOutcome>), Error> {
        let from = self.tree.size();
        let before: BTreeSet<TileId> = self.tree.partial_tiles().iter().map(|(t, _)| *t).collect();
        let mut files: Vec<(String, Vec<u8>)> = Vec::new();
        for entry in batch {
            let index = self.tree.size();
            push_bundle_entry(&mut self.bundle, entry);
            self.bundle_len += 1;
            if self.bundle_len as u64 == TILE_WIDTH {
                let id = TileId {
                    kind: TileKind::Entries,
                    index: index / TILE_WIDTH,
                    width: TILE_WIDTH as u16,
                };
                files.push((id.path(), std::mem::take(&mut self.bundle)));
                self.bundle_len = 0;
            }
            self.tree.push(leaf_hash(entry), |full| {
                let id = TileId {
                    kind: TileKind::Hashes(full.level),
                    index: full.index,
                    width: TILE_WIDTH as u16,
                };
                files.push((id.path(), hash_tile_bytes(&full.hashes)));
            });
        }
        let size = self.tree.size();
        if self.bundle_len > 0 {
            let id = TileId {
                kind: TileKind::Entries,
                index: size / TILE_WIDTH,
                width: self.bundle_len as u16,
            };
            files.push((id.path(), self.bundle.clone()));
        }
        for (id, hashes) in self.tree.partial_tiles() {
            if !before.contains(&id) {
                files.push((id.path(), hash_tile_bytes(hashes)));
            }
        }
        let mut dirs: BTreeSet<PathBuf> = BTreeSet::new();
        for (rel, _) in &files {
            let dest = self.log_dir.join(rel);
            let parent = dest.parent().unwrap_or(&self.log_dir).to_path_buf();
            create_dirs(&parent, &mut dirs)?;
            dirs.insert(parent);
        }
        // The files of one batch are independent: write and fsync them concurrently so the
        // filesystem can fold their journal commits together (a batch then costs about one
        // fsync latency per stage instead of one per file).
        let log_dir = &self.log_dir;
        std::thread::scope(|scope| -> Result<(), Error> {
            let writers: Vec<_> = files
                .iter()
                .map(|(rel, bytes)| {
                    scope.spawn(move || write_durable(log_dir, &log_dir.join(rel), bytes))
                })
                .collect();
            join_all(writers)
        })?;
        std::thread::scope(|scope| -> Result<(), Error> {
            let syncs: Vec<_> = dirs
                .iter()
                .map(|d| scope.spawn(move || sync_dir(d)))
                .collect();
            join_all(syncs)
        })?;
        let mut signed = key.sign(Checkpoint {
            origin: key.name().to_string(),
            size: TreeSize(size),
            root: self.tree.root(),
        });
        // The tiles are durable and the batch is journaled, so the checkpoint asked about is the
        // one a restart would make again: a witness can be asked before it is installed.
        let outcome = witnessing.map(|w| {
            let lab_root = self.log_dir.parent().unwrap_or(&self.log_dir).to_path_buf();
            let log_name = self
                .log_dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "log".into());
            let at = signed.clone();
            let prove = move |m: u64| -> Result<Vec<MerkleHash>, Error> {
                let source = PrefixedDir {
                    dir: DirSource {
                        root: lab_root.clone(),
                    },
                    log_name: log_name.clone(),
                };
                let reader = LogReader::new(&source, at.clone());
                reader
                    .consistency_proof(TreeSize(m), TreeSize(size))?
                    .map_err(|e| Error::WriterFailed(e.to_string()))
            };
            let outcome = w.collect(&self.checkpoint, &signed, &prove);
            signed
                .signatures
                .extend(outcome.cosignatures.iter().cloned());
            outcome
        });
        write_durable(
            &self.log_dir,
            &self.log_dir.join("checkpoint"),
            &signed.to_bytes(),
        )?;
        sync_dir(&self.log_dir)?;
        CheckpointArchive::in_log_dir(&self.log_dir).append(&signed)?;
        self.checkpoint = signed;
        remove_superseded_partials(&self.log_dir, from, size);
        Ok((size, outcome))
    }
}

/// A [`DirSource`] whose `log/` is the writer's log directory, whatever its name.
struct PrefixedDir {
    dir: DirSource,
    log_name: String,
}

impl PrefixedDir {
    fn map(&self, rel: &str) -> String {
        match rel.strip_prefix("log/") {
            Some(rest) => format!("{}/{rest}", self.log_name),
            None => rel.to_string(),
        }
    }
}

impl LogSource for PrefixedDir {
    fn open(
        &self,
        rel: &str,
        limit: ReadLimit,
    ) -> Result<Option<Box<dyn std::io::Read + '_>>, Error> {
        self.dir.open(&self.map(rel), limit)
    }

    fn locate(&self, rel: &str) -> String {
        self.dir.locate(&self.map(rel))
    }

    fn read_error(&self, rel: &str, e: std::io::Error) -> Error {
        self.dir.read_error(&self.map(rel), e)
    }
}

/// The journal of the batch being integrated, in the log directory.
const JOURNAL: &str = ".batch";
/// The journal's first line.
const JOURNAL_MAGIC: &[u8] = b"glassbox log batch v1\n";

/// Writes the journal in place and fsyncs it: magic, the size it starts from (u64), the entry
/// count (u32), the entries as in a bundle, then SHA-256 of all that. A torn write fails the
/// hash and is ignored on reading; nothing of its batch was written yet.
fn write_journal(log_dir: &Path, from: u64, batch: &[Vec<u8>]) -> Result<(), Error> {
    let mut bytes = JOURNAL_MAGIC.to_vec();
    bytes.extend_from_slice(&from.to_be_bytes());
    bytes.extend_from_slice(&(batch.len() as u32).to_be_bytes());
    for e in batch {
        push_bundle_entry(&mut bytes, e);
    }
    let digest = Sha256::digest(&bytes);
    bytes.extend_from_slice(&digest);
    let path = log_dir.join(JOURNAL);
    let existed = path.exists();
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)
        .map_err(Error::io("cannot open the batch journal", &path))?;
    f.write_all(&bytes)
        .map_err(Error::io("cannot write the batch journal", &path))?;
    f.sync_data()
        .map_err(Error::io("cannot fsync the batch journal", &path))?;
    if !existed {
        sync_dir(log_dir)?;
    }
    Ok(())
}

/// The journaled batch: the size it starts from and its entries; `None` when there is no
/// journal or it is torn.
/// A batch read back from the journal: the size it starts from, and its entries.
struct JournaledBatch {
    from: u64,
    entries: Vec<Vec<u8>>,
}

fn read_journal(log_dir: &Path) -> Result<Option<JournaledBatch>, Error> {
    let path = log_dir.join(JOURNAL);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("cannot read the batch journal", &path)(e)),
    };
    let head = JOURNAL_MAGIC.len() + 12;
    if bytes.len() < head + 32 || !bytes.starts_with(JOURNAL_MAGIC) {
        return Ok(None);
    }
    let (body, digest) = bytes.split_at(bytes.len() - 32);
    if Sha256::digest(body).as_slice() != digest {
        return Ok(None);
    }
    let m = JOURNAL_MAGIC.len();
    let from = u64::from_be_bytes(body[m..m + 8].try_into().unwrap_or([0; 8]));
    let count = u32::from_be_bytes(body[m + 8..m + 12].try_into().unwrap_or([0; 4]));
    let entries = split_bundle(&body[head..], count as usize)
        .map_err(|e| corrupt(&path, format!("a journal with a valid hash but {e}")))?;
    Ok(Some(JournaledBatch {
        from,
        entries: entries.into_iter().map(<[u8]>::to_vec).collect(),
    }))
}

/// Deletes the partial tiles and bundles made superseded by growing from `from` to `to`
/// entries: at each level, the tile that was partial at `from` when it is full at `to`. Only
/// that one can have partials (a batch writes no intermediate partials), and every other
/// partial is still needed. A failure to delete costs space, not correctness: it is ignored.
fn remove_superseded_partials(log_dir: &Path, from: u64, to: u64) {
    let mut level = 0u32;
    loop {
        let shift = 8 * level;
        if shift >= 64 || (to >> shift) == 0 {
            break;
        }
        let (count_from, count_to) = (from >> shift, to >> shift);
        let index = count_from / TILE_WIDTH;
        if count_from % TILE_WIDTH != 0 && count_to / TILE_WIDTH > index {
            let mut kinds = vec![TileKind::Hashes(level as u8)];
            if level == 0 {
                kinds.push(TileKind::Entries);
            }
            for kind in kinds {
                let one = TileId {
                    kind,
                    index,
                    width: 1,
                };
                let path = log_dir.join(one.path());
                if let Some(dir) = path.parent() {
                    let _ = fs::remove_dir_all(dir);
                }
            }
        }
        level += 1;
    }
}

/// Joins scoped threads, returning the first error.
fn join_all(
    handles: Vec<std::thread::ScopedJoinHandle<'_, Result<(), Error>>>,
) -> Result<(), Error> {
    let mut first = Ok(());
    for h in handles {
        let r = h
            .join()
            .unwrap_or_else(|_| Err(Error::WriterFailed("a tile-writing thread panicked".into())));
        if first.is_ok() {
            first = r;
        }
    }
    first
}

/// Creates `dir` and its missing ancestors, recording each parent whose listing changed.
fn create_dirs(dir: &Path, changed: &mut BTreeSet<PathBuf>) -> Result<(), Error> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dirs(parent, changed)?;
        changed.insert(parent.to_path_buf());
    }
    match fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::io("cannot create", dir)(e)),
    }
}

/// Reads entries and proofs of a log at one checkpoint, from any [`LogSource`].
///
/// Hash tiles are cached as they are read. The reader trusts the tiles it reads; use
/// `audit` to check them.
pub struct LogReader<'s> {
    source: &'s dyn LogSource,
    /// The checkpoint this reader serves.
    pub checkpoint: SignedCheckpoint,
    cache: RefCell<HashMap<TileId, Vec<MerkleHash>>>,
}

impl std::fmt::Debug for LogReader<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LogReader({:?})", self.checkpoint.checkpoint)
    }
}

impl<'s> LogReader<'s> {
    /// A reader of `source` at a checkpoint already verified by the caller.
    pub fn new(source: &'s dyn LogSource, checkpoint: SignedCheckpoint) -> Self {
        Self {
            source,
            checkpoint,
            cache: RefCell::new(HashMap::new()),
        }
    }

    /// Reads `log/checkpoint` and checks its signature with `vkey`.
    pub fn open(source: &'s dyn LogSource, vkey: &VerifierKey) -> Result<Self, Error> {
        let note = source
            .read("log/checkpoint", ReadLimit::CHECKPOINT)?
            .ok_or_else(|| corrupt(Path::new(&source.locate("log/checkpoint")), "missing"))?;
        let checkpoint = vkey.verify(&note)?;
        Ok(Self::new(source, checkpoint))
    }

    /// Number of entries.
    pub fn size(&self) -> TreeSize {
        self.checkpoint.checkpoint.size
    }

    fn read_tile(&self, id: TileId) -> Result<Vec<u8>, Error> {
        let rel = format!("log/{}", id.path());
        self.source
            .read(&rel, ReadLimit::tile(id))?
            .ok_or_else(|| corrupt(Path::new(&self.source.locate(&rel)), "tile is missing"))
    }

    /// The entries of bundle `index` (as many as the checkpoint's size puts in it).
    pub fn bundle(&self, index: u64) -> Result<Vec<Vec<u8>>, Error> {
        let size = self.size().0;
        if index * TILE_WIDTH >= size {
            return Err(Error::OutOfRange {
                what: "entry index",
                value: index * TILE_WIDTH,
                size,
            });
        }
        let width = (size - index * TILE_WIDTH).min(TILE_WIDTH) as u16;
        let id = TileId {
            kind: TileKind::Entries,
            index,
            width,
        };
        let bytes = self.read_tile(id)?;
        let entries = split_bundle(&bytes, usize::from(width)).map_err(|e| {
            corrupt(
                Path::new(&self.source.locate(&format!("log/{}", id.path()))),
                e.to_string(),
            )
        })?;
        Ok(entries.into_iter().map(|e| e.to_vec()).collect())
    }

    /// One entry's bytes.
    pub fn entry(&self, index: LeafIndex) -> Result<Vec<u8>, Error> {
        let size = self.size().0;
        if index.0 >= size {
            return Err(Error::OutOfRange {
                what: "entry index",
                value: index.0,
                size,
            });
        }
        let mut bundle = self.bundle(index.0 / TILE_WIDTH)?;
        Ok(bundle.swap_remove((index.0 % TILE_WIDTH) as usize))
    }

    /// Root of the first `size` entries.
    pub fn root_at(&self, size: TreeSize) -> Result<MerkleHash, Error> {
        self.check_size(size)?;
        merkle::subtree_hash(self, 0, size.0)
    }

    fn check_size(&self, size: TreeSize) -> Result<(), Error> {
        if size.0 > self.size().0 {
            return Err(Error::OutOfRange {
                what: "tree size",
                value: size.0,
                size: self.size().0,
            });
        }
        Ok(())
    }

    /// Inclusion proof of `index` in the tree of `size` (at most the checkpoint's size).
    pub fn inclusion_proof(
        &self,
        index: LeafIndex,
        size: TreeSize,
    ) -> Result<Result<Vec<MerkleHash>, ProofError>, Error> {
        self.check_size(size)?;
        merkle::inclusion_proof(self, index, size)
    }

    /// Consistency proof from `m` to `n` (both at most the checkpoint's size).
    pub fn consistency_proof(
        &self,
        m: TreeSize,
        n: TreeSize,
    ) -> Result<Result<Vec<MerkleHash>, ProofError>, Error> {
        self.check_size(m)?;
        self.check_size(n)?;
        merkle::consistency_proof(self, m, n)
    }
}

impl NodeSource for LogReader<'_> {
    type Error = Error;

    fn perfect_node(&self, level: u8, index: u64) -> Result<MerkleHash, Error> {
        let tile_level = level / tiles::TILE_HEIGHT;
        let r = level % tiles::TILE_HEIGHT;
        let lo = index << r;
        let hi = (index + 1) << r;
        let id =
            tiles::hash_tile_for(self.size().0, tile_level, hi - 1).ok_or(Error::OutOfRange {
                what: "tree size",
                value: hi << (8 * u32::from(tile_level)),
                size: self.size().0,
            })?;
        if !self.cache.borrow().contains_key(&id) {
            let bytes = self.read_tile(id)?;
            let hashes = parse_hash_tile(&bytes, id.width).ok_or_else(|| {
                corrupt(
                    Path::new(&self.source.locate(&format!("log/{}", id.path()))),
                    format!(
                        "{} bytes, expected {}",
                        bytes.len(),
                        usize::from(id.width) * 32
                    ),
                )
            })?;
            self.cache.borrow_mut().insert(id, hashes);
        }
        let cache = self.cache.borrow();
        let hashes = &cache[&id];
        let base = id.index * TILE_WIDTH;
        Ok(perfect_root(
            &hashes[(lo - base) as usize..(hi - base) as usize],
        ))
    }
}
