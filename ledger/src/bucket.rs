//! The lab's public layout in an object-store bucket (`<prefix>/log/...`, `<prefix>/vkey`,
//! `<prefix>/blobs/...`): the log that outsiders audit straight from the bucket, with no server
//! in between (`glassbox verify s3://bucket/prefix`, or the bucket's HTTP URL).
//!
//! [`Bucket`] is what the layout needs of a store (read a file, write one, delete one); the S3
//! store implements it. [`Mirror`] copies the integrator's log into a bucket, one installed
//! checkpoint at a time, so the bucket is always a valid log:
//! 1. the tiles the new size has and the bucket's size lacks ([`tiles::grown`]) — full tiles and
//!    bundles once, the new right-edge partials — read from the local log, whose checkpoint is
//!    durable, so every path written holds the bytes it will always hold;
//! 2. then `log/checkpoint` (the note with its cosignatures), the one object that changes;
//! 3. then, best effort, the partial tiles the new checkpoint no longer needs
//!    ([`tiles::superseded`]), so the bucket holds about what the full tiles need.
//!
//! A crash between the steps leaves the bucket at its previous checkpoint plus tiles that the
//! next copy writes again with the same bytes, or partials of a size the log may never
//! publish, which the next mirror's first copy lists and deletes. Each copy starts from what the bucket holds,
//! read afresh (another integrator may have copied since: the one before a restart, a CLI
//! process with the key), and checks it: the lab's verifier key (once per mirror), and a
//! checkpoint signed by it whose root the local log has at that size; anything else (another
//! lab's log, a fork, a copy ahead of the local log) is a [`Error::BucketConflict`] and nothing
//! is written. [`restore`] goes the other way: an integrator taking over on a host without
//! the lab directory rebuilds the log from the bucket. Not here: blobs (the blob store writes
//! them under the same prefix), which process copies (the integrator, `glassbox-lab`).

use std::path::Path;
use std::sync::Mutex;

use crate::checkpoint::{SignedCheckpoint, VerifierKey};
use crate::error::Error;
use crate::log::LogReader;
use crate::merkle::TreeSize;
pub use crate::source::Bucket;
use crate::source::{DirSource, LogSource, ReadLimit};
use crate::tiles::{self, TileId};

/// Files copied at once (each is one request to the store).
const PARALLEL_PUTS: usize = 8;

/// What one [`Mirror::sync`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MirrorReport {
    /// The size of the checkpoint the bucket holds now.
    pub size: u64,
    /// Tiles and bundles written.
    pub written: usize,
    /// Superseded partial tiles deleted (and, on a mirror's first copy, partials a copy cut
    /// short left behind).
    pub deleted: usize,
}

/// Copies a lab's log into a [`Bucket`].
#[derive(Debug, Default)]
pub struct Mirror {
    /// The bucket's checkpoint size as this mirror last read or wrote it (`None` before its
    /// first copy).
    published: Mutex<Option<u64>>,
}

impl Mirror {
    /// A mirror that has not looked at the bucket yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The size of the checkpoint the bucket held when this mirror last copied (`None` before
    /// its first copy).
    pub fn published(&self) -> Option<u64> {
        *self.published.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Brings `bucket` up to the installed checkpoint of the log in `lab_root` (its `log/` and
    /// `vkey`), as the module docs say. The caller keeps the log from growing meanwhile (the
    /// integrator holds the writer lock).
    pub fn sync(
        &self,
        bucket: &dyn Bucket,
        lab_root: &Path,
        vkey: &VerifierKey,
    ) -> Result<MirrorReport, Error> {
        let local = DirSource {
            root: lab_root.to_path_buf(),
        };
        let note = local
            .read("log/checkpoint", ReadLimit::CHECKPOINT)?
            .ok_or_else(|| Error::NoLab {
                path: lab_root.to_path_buf(),
                reason: "no log/checkpoint".into(),
            })?;
        let checkpoint = vkey.verify(&note)?;
        let size = checkpoint.checkpoint.size.0;
        let mut published = self.published.lock().unwrap_or_else(|p| p.into_inner());
        // A copy that failed part-way may have written tiles its checkpoint never named: the
        // next one sweeps, as a mirror's first copy does (a killed integrator's leftovers).
        let sweep = published.is_none();
        *published = None;
        if sweep {
            check_vkey(bucket, vkey)?;
        }
        let from = bucket_size(bucket, &local, vkey, &checkpoint)?;
        let grown = tiles::grown(from, size);
        if from < size {
            copy_tiles(bucket, &local, &grown)?;
            bucket.write("log/checkpoint", note)?;
        }
        // Deleting is best effort: a partial left behind costs space, not correctness.
        let mut deleted = 0;
        for id in tiles::superseded(from, size) {
            if bucket.remove(&format!("log/{}", id.path())).is_ok() {
                deleted += 1;
            }
        }
        if sweep {
            deleted += sweep_partials(bucket, size);
        }
        *published = Some(size);
        Ok(MirrorReport {
            size,
            written: if from < size { grown.len() } else { 0 },
            deleted,
        })
    }
}

fn conflict(bucket: &dyn Bucket, reason: String) -> Error {
    Error::BucketConflict {
        bucket: bucket.name(),
        reason,
    }
}

/// Checks the bucket's `vkey` is the lab's; writes it when the bucket has none.
fn check_vkey(bucket: &dyn Bucket, vkey: &VerifierKey) -> Result<(), Error> {
    let ours = vkey.to_string();
    match bucket.read("vkey", ReadLimit::VKEY)? {
        None => bucket.write("vkey", format!("{ours}\n").into_bytes())?,
        Some(theirs) if String::from_utf8_lossy(&theirs).trim() == ours => {}
        Some(theirs) => {
            return Err(conflict(
                bucket,
                format!(
                    "its vkey is {:?}, this lab's is {ours:?}",
                    String::from_utf8_lossy(&theirs).trim()
                ),
            ));
        }
    }
    Ok(())
}

/// The size of the bucket's checkpoint, once checked to be signed by the lab's key and a
/// prefix of the local log (whose installed checkpoint is `checkpoint`); 0 when it has none.
fn bucket_size(
    bucket: &dyn Bucket,
    local: &DirSource,
    vkey: &VerifierKey,
    checkpoint: &SignedCheckpoint,
) -> Result<u64, Error> {
    let conflict = |reason: String| conflict(bucket, reason);
    let Some(note) = bucket.read("log/checkpoint", ReadLimit::CHECKPOINT)? else {
        return Ok(0);
    };
    let theirs = vkey.verify(&note).map_err(|e| {
        conflict(format!(
            "its log/checkpoint is not signed by this lab's key ({e})"
        ))
    })?;
    let (at, root) = (theirs.checkpoint.size, theirs.checkpoint.root);
    let ours_size = checkpoint.checkpoint.size;
    if at > ours_size {
        return Err(conflict(format!(
            "its checkpoint has {} entries, the local log {}; is another integrator publishing there?",
            at.0, ours_size.0
        )));
    }
    let reader = LogReader::new(local, checkpoint.clone());
    let local_root = reader.root_at(TreeSize(at.0))?;
    if local_root != root {
        return Err(conflict(format!(
            "its checkpoint of size {} has root {root}, the local log has {local_root} at that size",
            at.0
        )));
    }
    Ok(at.0)
}

/// Deletes every partial tile in the bucket that its checkpoint of `size` does not need (left by
/// a copy cut short between its tiles and its checkpoint); returns how many. Best effort.
fn sweep_partials(bucket: &dyn Bucket, size: u64) -> usize {
    let needed: std::collections::HashSet<String> = tiles::tiles_for_size(size)
        .into_iter()
        .filter(|t| !t.is_full())
        .map(|t| format!("log/{}", t.path()))
        .collect();
    let Ok(stored) = bucket.files("log/tile/") else {
        return 0;
    };
    stored
        .iter()
        .filter(|rel| rel.contains(".p/") && !needed.contains(rel.as_str()))
        .filter(|rel| bucket.remove(rel).is_ok())
        .count()
}

/// Copies `ids` from the local log to the bucket.
fn copy_tiles(bucket: &dyn Bucket, local: &DirSource, ids: &[TileId]) -> Result<(), Error> {
    in_parallel(ids, |id| {
        let rel = format!("log/{}", id.path());
        let bytes = local
            .read(&rel, ReadLimit::tile(*id))?
            .ok_or_else(|| Error::Corrupt {
                path: local.root.join(&rel),
                reason: "a tile the installed checkpoint needs is missing".into(),
            })?;
        bucket.write(&rel, bytes)
    })
}

/// Runs `f` on every tile id, [`PARALLEL_PUTS`] threads at a time (each call is one request to
/// the store); returns the first error.
fn in_parallel(
    ids: &[TileId],
    f: impl Fn(&TileId) -> Result<(), Error> + Sync,
) -> Result<(), Error> {
    let chunk = ids.len().div_ceil(PARALLEL_PUTS).max(1);
    let f = &f;
    std::thread::scope(|s| {
        let workers: Vec<_> = ids
            .chunks(chunk)
            .map(|part| s.spawn(move || part.iter().try_for_each(f)))
            .collect();
        let mut first = Ok(());
        for w in workers {
            let r = w.join().unwrap_or_else(|_| {
                Err(Error::WriterFailed(
                    "a thread copying tiles to or from the bucket panicked".into(),
                ))
            });
            if first.is_ok() {
                first = r;
            }
        }
        first
    })
}

/// Restores a lab's log from the bucket it was published to, into `lab_root` (which has no
/// `log/checkpoint`): the integrator taking over on a host without the lab directory, with
/// only the signing key. Downloads the bucket's checkpoint (it must be signed by `vkey`) and
/// every tile of its tree, writes the checkpoint last, then audits the restored log's tiles
/// against it (blobs are not read); a log that does not audit is removed again. Returns the
/// restored size, or `None` when the bucket holds no log. Writes `vkey` when it is missing.
pub fn restore(
    bucket: &dyn Bucket,
    lab_root: &Path,
    vkey: &VerifierKey,
) -> Result<Option<u64>, Error> {
    let log_dir = lab_root.join("log");
    let cp_path = log_dir.join("checkpoint");
    if cp_path.exists() {
        return Err(Error::LabExists {
            path: lab_root.to_path_buf(),
            found: "log/checkpoint".into(),
        });
    }
    let Some(note) = bucket.read("log/checkpoint", ReadLimit::CHECKPOINT)? else {
        return Ok(None);
    };
    check_vkey(bucket, vkey)?;
    let checkpoint = vkey.verify(&note).map_err(|e| {
        conflict(
            bucket,
            format!("its log/checkpoint is not signed by this lab's key ({e})"),
        )
    })?;
    let size = checkpoint.checkpoint.size.0;
    let ids = tiles::tiles_for_size(size);
    in_parallel(&ids, |id| {
        let rel = format!("log/{}", id.path());
        let bytes = bucket.read(&rel, ReadLimit::tile(*id))?.ok_or_else(|| {
            conflict(
                bucket,
                format!("its checkpoint of size {size} needs {rel}, which it lacks"),
            )
        })?;
        let path = lab_root.join(&rel);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(Error::io("cannot create", dir))?;
        }
        std::fs::write(&path, bytes).map_err(Error::io("cannot write", &path))
    })?;
    std::fs::create_dir_all(log_dir.join("tile")).map_err(Error::io("cannot create", &log_dir))?;
    let vkey_path = lab_root.join("vkey");
    if !vkey_path.exists() {
        std::fs::write(&vkey_path, format!("{vkey}\n"))
            .map_err(Error::io("cannot write", &vkey_path))?;
    }
    let tmp = log_dir.join(".tmp-restored-checkpoint");
    std::fs::write(&tmp, &note).map_err(Error::io("cannot write", &tmp))?;
    std::fs::File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(Error::io("cannot fsync", &tmp))?;
    std::fs::rename(&tmp, &cp_path).map_err(Error::io("cannot rename into", &cp_path))?;
    let source = DirSource {
        root: lab_root.to_path_buf(),
    };
    let opts = crate::audit::AuditOptions {
        skip_blobs: true,
        ..Default::default()
    };
    match crate::audit::audit(&source, vkey, opts)? {
        Ok(_) => Ok(Some(size)),
        Err(failure) => {
            let _ = std::fs::remove_file(&cp_path);
            Err(conflict(
                bucket,
                format!("the log restored from it does not audit: {failure}"),
            ))
        }
    }
}

/// A directory standing in for a bucket (for tests, and for a layout served by any static web
/// server from a directory).
#[derive(Debug, Clone)]
pub struct DirBucket(pub DirSource);

impl LogSource for DirBucket {
    fn open(
        &self,
        rel: &str,
        limit: ReadLimit,
    ) -> Result<Option<Box<dyn std::io::Read + '_>>, Error> {
        self.0.open(rel, limit)
    }

    fn locate(&self, rel: &str) -> String {
        self.0.locate(rel)
    }

    fn read_error(&self, rel: &str, e: std::io::Error) -> Error {
        self.0.read_error(rel, e)
    }
}

impl Bucket for DirBucket {
    fn write(&self, rel: &str, bytes: Vec<u8>) -> Result<(), Error> {
        let path = self.0.root.join(rel);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(Error::io("cannot create", dir))?;
        }
        let tmp = path.with_extension("tmp-mirror");
        std::fs::write(&tmp, &bytes).map_err(Error::io("cannot write", &tmp))?;
        std::fs::rename(&tmp, &path).map_err(Error::io("cannot rename into", &path))
    }

    fn remove(&self, rel: &str) -> Result<(), Error> {
        let path = self.0.root.join(rel);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io("cannot delete", path)(e)),
        }
    }

    fn files(&self, prefix: &str) -> Result<Vec<String>, Error> {
        fn walk(dir: &Path, root: &Path, out: &mut Vec<String>) -> Result<(), Error> {
            let rd = match std::fs::read_dir(dir) {
                Ok(rd) => rd,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(Error::io("cannot list", dir)(e)),
            };
            for e in rd.flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, root, out)?;
                } else if let Ok(rel) = p.strip_prefix(root) {
                    out.push(rel.to_string_lossy().into_owned());
                }
            }
            Ok(())
        }
        let mut out = Vec::new();
        walk(&self.0.root.join(prefix), &self.0.root, &mut out)?;
        Ok(out)
    }

    fn name(&self) -> String {
        self.0.root.display().to_string()
    }
}
