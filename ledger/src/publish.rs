//! `glassbox publish --git DIR`: mirrors the log and the referenced blobs into a git
//! repository (git2), one commit per new checkpoint, the checkpoint note as the message.
//!
//! Incremental: only tiles and blobs the repository lacks are copied, and the new checkpoint
//! must be consistent with the one already published (a rewritten history is refused). Blobs
//! over the size cap are listed in `blobs/OMITTED` instead of copied, so the published copy
//! still passes `glassbox verify --lab DIR`. It never pushes: where the repository goes is the
//! operator's choice.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use glassbox_schemas::{Blake3Hash, BlobHash, LedgerEntry};

use crate::audit::OMITTED_BLOBS;
use crate::blob::{BlobStore, blob_rel_path};
use crate::checkpoint::SignedCheckpoint;
use crate::error::Error;
use crate::lab::LabDir;
use crate::log::LogReader;
use crate::merkle::verify_consistency;
use crate::source::DirSource;
use crate::tiles::{TILE_WIDTH, tiles_for_size};

/// Default per-blob cap: 50 MiB (below common git hosting limits).
pub const DEFAULT_MAX_BLOB_BYTES: u64 = 50 << 20;

/// What a publication did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishReport {
    /// The published checkpoint size.
    pub size: u64,
    /// Whether a commit was made (false: already up to date).
    pub committed: bool,
    /// Tile files copied.
    pub tiles_copied: u64,
    /// Blobs copied.
    pub blobs_copied: u64,
    /// Blobs over the cap, listed in `blobs/OMITTED`.
    pub blobs_omitted: u64,
}

fn git_err(path: &Path) -> impl Fn(git2::Error) -> Error + '_ {
    move |e| Error::Git {
        path: path.to_path_buf(),
        reason: e.message().to_string(),
    }
}

/// Publishes `lab` into the git repository at `repo_dir` (created if absent).
pub fn publish(lab: &LabDir, repo_dir: &Path, max_blob_bytes: u64) -> Result<PublishReport, Error> {
    publish_with_blobs(lab, &lab.blobs(), repo_dir, max_blob_bytes)
}

/// [`publish`] for a lab whose blobs live in `blobs` (an object store) rather than its
/// `blobs/` directory; the published copy holds them in `blobs/` as usual.
pub fn publish_with_blobs(
    lab: &LabDir,
    blobs: &dyn BlobStore,
    repo_dir: &Path,
    max_blob_bytes: u64,
) -> Result<PublishReport, Error> {
    let vkey = lab.verifier_key()?;
    let source = DirSource {
        root: lab.root().to_path_buf(),
    };
    let reader = LogReader::open(&source, &vkey)?;
    let size = reader.size().0;
    let repo = match git2::Repository::open(repo_dir) {
        Ok(r) => r,
        Err(_) => {
            fs::create_dir_all(repo_dir).map_err(Error::io("cannot create", repo_dir))?;
            git2::Repository::init(repo_dir).map_err(git_err(repo_dir))?
        }
    };
    let published_cp = repo_dir.join("log").join("checkpoint");
    let mut from = 0u64;
    if let Ok(note) = fs::read(&published_cp) {
        let old: SignedCheckpoint = vkey.verify(&note).map_err(|e| Error::Git {
            path: repo_dir.to_path_buf(),
            reason: format!("the published checkpoint does not verify with this lab's key: {e}"),
        })?;
        let proof = reader
            .consistency_proof(old.checkpoint.size, reader.size())?
            .map_err(|e| Error::Git {
                path: repo_dir.to_path_buf(),
                reason: e.to_string(),
            })?;
        verify_consistency(old.checkpoint.size, reader.size(), &old.checkpoint.root, &reader.checkpoint.checkpoint.root, &proof)
            .map_err(|e| Error::Git {
                path: repo_dir.to_path_buf(),
                reason: format!("the lab's log is not an extension of the published one ({e}); refusing to publish a rewritten history"),
            })?;
        if old.checkpoint == reader.checkpoint.checkpoint {
            return Ok(PublishReport {
                size,
                committed: false,
                tiles_copied: 0,
                blobs_copied: 0,
                blobs_omitted: 0,
            });
        }
        from = old.checkpoint.size.0;
    }
    let mut added: Vec<PathBuf> = Vec::new();
    let mut tiles_copied = 0;
    for tile in tiles_for_size(size) {
        let rel = format!("log/{}", tile.path());
        let dest = repo_dir.join(&rel);
        if dest.exists() {
            continue;
        }
        copy_into(&lab.root().join(&rel), &dest)?;
        added.push(PathBuf::from(rel));
        tiles_copied += 1;
    }
    // Blobs referenced by the new entries.
    let mut refs: BTreeSet<Blake3Hash> = BTreeSet::new();
    let mut t = from / TILE_WIDTH;
    while t * TILE_WIDTH < size {
        for (k, bytes) in reader.bundle(t)?.iter().enumerate() {
            if t * TILE_WIDTH + (k as u64) < from {
                continue;
            }
            if let Ok(e) = LedgerEntry::from_bytes(bytes) {
                refs.extend(e.refs.values().copied());
            }
        }
        t += 1;
    }
    let omitted_path = repo_dir.join(OMITTED_BLOBS);
    let mut omitted_text = fs::read_to_string(&omitted_path).unwrap_or_default();
    let (mut blobs_copied, mut blobs_omitted) = (0, 0);
    for h in refs {
        let hash = BlobHash(h);
        let rel = blob_rel_path(&hash);
        let dest = repo_dir.join(&rel);
        if dest.exists() {
            continue;
        }
        let len = blobs.size(&hash)?.ok_or_else(|| Error::BlobNotFound {
            hash: hash.to_string(),
            store: blobs.describe(),
        })?;
        if len > max_blob_bytes {
            if !omitted_text.contains(&hash.to_string()) {
                omitted_text.push_str(&format!("{hash} {len}\n"));
                blobs_omitted += 1;
            }
            continue;
        }
        copy_blob_into(blobs, &hash, &dest)?;
        added.push(PathBuf::from(rel));
        blobs_copied += 1;
    }
    if blobs_omitted > 0 {
        write_file(&omitted_path, omitted_text.as_bytes())?;
        added.push(PathBuf::from(OMITTED_BLOBS));
    }
    write_file(&repo_dir.join("vkey"), format!("{vkey}\n").as_bytes())?;
    added.push(PathBuf::from("vkey"));
    let note = reader.checkpoint.to_bytes();
    write_file(&published_cp, &note)?;
    added.push(PathBuf::from("log/checkpoint"));

    let mut index = repo.index().map_err(git_err(repo_dir))?;
    for p in &added {
        index.add_path(p).map_err(git_err(repo_dir))?;
    }
    index.write().map_err(git_err(repo_dir))?;
    let tree_id = index.write_tree().map_err(git_err(repo_dir))?;
    let tree = repo.find_tree(tree_id).map_err(git_err(repo_dir))?;
    let sig = repo
        .signature()
        .or_else(|_| git2::Signature::now("glassbox", "glassbox@localhost"))
        .map_err(git_err(repo_dir))?;
    let parent = repo.head().ok().and_then(|h| h.peel_to_commit().ok());
    let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
    let message = String::from_utf8_lossy(&note).to_string();
    repo.commit(Some("HEAD"), &sig, &sig, &message, &tree, &parents)
        .map_err(git_err(repo_dir))?;
    Ok(PublishReport {
        size,
        committed: true,
        tiles_copied,
        blobs_copied,
        blobs_omitted,
    })
}

fn copy_into(src: &Path, dest: &Path) -> Result<(), Error> {
    if let Some(p) = dest.parent() {
        fs::create_dir_all(p).map_err(Error::io("cannot create", p))?;
    }
    fs::copy(src, dest).map_err(Error::io("cannot copy", src))?;
    Ok(())
}

fn copy_blob_into(blobs: &dyn BlobStore, hash: &BlobHash, dest: &Path) -> Result<(), Error> {
    if let Some(p) = dest.parent() {
        fs::create_dir_all(p).map_err(Error::io("cannot create", p))?;
    }
    let mut src = blobs.get(hash)?;
    let mut out = fs::File::create(dest).map_err(Error::io("cannot create", dest))?;
    std::io::copy(&mut src, &mut out).map_err(Error::io("cannot copy a blob into", dest))?;
    Ok(())
}

fn write_file(dest: &Path, bytes: &[u8]) -> Result<(), Error> {
    if let Some(p) = dest.parent() {
        fs::create_dir_all(p).map_err(Error::io("cannot create", p))?;
    }
    fs::write(dest, bytes).map_err(Error::io("cannot write", dest))
}
