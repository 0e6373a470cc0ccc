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
//! next copy writes again with the same bytes. Each copy starts from what the bucket holds,
//! read afresh (another integrator may have copied since: the one before a restart, a CLI
//! process with the key), and checks it: the lab's verifier key (once per mirror), and a
//! checkpoint signed by it whose root the local log has at that size; anything else (another
//! lab's log, a fork, a copy ahead of the local log) is a [`Error::BucketConflict`] and nothing
//! is written. Not here: blobs (the blob store writes
//! them under the same prefix), which process copies (the integrator, `glassbox-lab`).

use std::path::Path;
use std::sync::Mutex;

use crate::checkpoint::{SignedCheckpoint, VerifierKey};
use crate::error::Error;
use crate::log::LogReader;
use crate::merkle::TreeSize;
use crate::source::{DirSource, LogSource, ReadLimit};
use crate::tiles::{self, TileId};

/// Files copied at once (each is one request to the store).
const PARALLEL_PUTS: usize = 8;

/// A store holding a lab's public layout below some prefix.
pub trait Bucket: LogSource + Send + Sync {
    /// Writes `bytes` at `rel` (`log/checkpoint`, `log/tile/0/000`), replacing what is there.
    fn put(&self, rel: &str, bytes: Vec<u8>) -> Result<(), Error>;
    /// Deletes `rel`; deleting what is absent is no error.
    fn delete(&self, rel: &str) -> Result<(), Error>;
    /// The bucket and prefix, for messages (`s3://bucket/prefix`).
    fn describe(&self) -> String;
}

/// What one [`Mirror::sync`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MirrorReport {
    /// The size of the checkpoint the bucket holds now.
    pub size: u64,
    /// Tiles and bundles written.
    pub written: usize,
    /// Superseded partial tiles deleted.
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
        if published.is_none() {
            check_vkey(bucket, vkey)?;
        }
        let from = bucket_size(bucket, &local, vkey, &checkpoint)?;
        *published = Some(from);
        if from == size {
            return Ok(MirrorReport {
                size,
                written: 0,
                deleted: 0,
            });
        }
        let grown = tiles::grown(from, size);
        copy_tiles(bucket, &local, &grown)?;
        bucket.put("log/checkpoint", note)?;
        *published = Some(size);
        let mut deleted = 0;
        for id in tiles::superseded(from, size) {
            // A partial left behind costs space, not correctness.
            if bucket.delete(&format!("log/{}", id.path())).is_ok() {
                deleted += 1;
            }
        }
        Ok(MirrorReport {
            size,
            written: grown.len(),
            deleted,
        })
    }
}

fn conflict(bucket: &dyn Bucket, reason: String) -> Error {
    Error::BucketConflict {
        bucket: bucket.describe(),
        reason,
    }
}

/// Checks the bucket's `vkey` is the lab's; writes it when the bucket has none.
fn check_vkey(bucket: &dyn Bucket, vkey: &VerifierKey) -> Result<(), Error> {
    let ours = vkey.to_string();
    match bucket.read("vkey", ReadLimit::VKEY)? {
        None => bucket.put("vkey", format!("{ours}\n").into_bytes())?,
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

/// Copies `ids` from the local log to the bucket, [`PARALLEL_PUTS`] at a time.
fn copy_tiles(bucket: &dyn Bucket, local: &DirSource, ids: &[TileId]) -> Result<(), Error> {
    let chunk = ids.len().div_ceil(PARALLEL_PUTS).max(1);
    std::thread::scope(|s| {
        let workers: Vec<_> = ids
            .chunks(chunk)
            .map(|part| {
                s.spawn(move || -> Result<(), Error> {
                    for id in part {
                        let rel = format!("log/{}", id.path());
                        let bytes = local.read(&rel, ReadLimit::tile(*id))?.ok_or_else(|| {
                            Error::Corrupt {
                                path: local.root.join(&rel),
                                reason: "a tile the installed checkpoint needs is missing".into(),
                            }
                        })?;
                        bucket.put(&rel, bytes)?;
                    }
                    Ok(())
                })
            })
            .collect();
        let mut first = Ok(());
        for w in workers {
            let r = w.join().unwrap_or_else(|_| {
                Err(Error::WriterFailed(
                    "a thread copying tiles to the bucket panicked".into(),
                ))
            });
            if first.is_ok() {
                first = r;
            }
        }
        first
    })
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
    fn put(&self, rel: &str, bytes: Vec<u8>) -> Result<(), Error> {
        let path = self.0.root.join(rel);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(Error::io("cannot create", dir))?;
        }
        let tmp = path.with_extension("tmp-mirror");
        std::fs::write(&tmp, &bytes).map_err(Error::io("cannot write", &tmp))?;
        std::fs::rename(&tmp, &path).map_err(Error::io("cannot rename into", &path))
    }

    fn delete(&self, rel: &str) -> Result<(), Error> {
        let path = self.0.root.join(rel);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io("cannot delete", path)(e)),
        }
    }

    fn describe(&self) -> String {
        self.0.root.display().to_string()
    }
}
