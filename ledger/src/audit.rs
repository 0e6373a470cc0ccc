//! The full audit behind `glassbox verify`: signature, every entry, every hash tile, the root,
//! consistency with a checkpoint seen before, and every referenced blob.
//!
//! The audit streams the log bundle by bundle through a [`TreeBuilder`], so memory stays
//! bounded by one tile per level plus the set of referenced blob hashes. Findings are
//! [`AuditFailure`]s naming the first bad item (entry index, tile path, blob hash); a source
//! that cannot be read at all is an [`Error`]. The audit does not look at the index database
//! (the caller compares it separately) and never writes anything.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::Read;
use std::time::Instant;

use glassbox_schemas::{Blake3Hash, BlobHash};

use crate::blob::{blob_rel_path, hash_reader};
use crate::checkpoint::{Checkpoint, CheckpointError, SignedCheckpoint, VerifierKey};
use crate::error::Error;
use crate::log::LogReader;
use crate::merkle::{MerkleHash, ProofError, TreeSize, leaf_hash, verify_consistency};
use crate::source::{LogSource, ReadLimit};
use crate::tiles::{
    TILE_WIDTH, TileId, TileKind, TreeBuilder, hash_tile_bytes, parse_hash_tile, split_bundle,
};

/// The file that lists blobs deliberately left out of a published copy (one
/// `blake3:<hex> <bytes>` per line); the audit counts them instead of failing.
pub const OMITTED_BLOBS: &str = "blobs/OMITTED";

/// The most bytes of one blob the audit reads when no entry names the blob's size (entries of
/// kind `artifact` and `dataset` do, and then the blob must be exactly that size).
pub const DEFAULT_MAX_BLOB_BYTES: u64 = 64 << 30;

/// What to check against.
#[derive(Default)]
pub struct AuditOptions<'a> {
    /// A checkpoint seen earlier: the log must extend it.
    pub prev: Option<Checkpoint>,
    /// Re-hash referenced blobs (on by default in the CLI).
    pub skip_blobs: bool,
    /// The most bytes read of a blob whose size no entry names [default
    /// [`DEFAULT_MAX_BLOB_BYTES`]].
    pub max_blob_bytes: Option<u64>,
    /// Called with (entries checked, total) and then (blobs checked, total).
    pub progress: Option<&'a mut dyn FnMut(AuditPhase, u64, u64)>,
}

impl fmt::Debug for AuditOptions<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "AuditOptions(prev={:?}, skip_blobs={})",
            self.prev, self.skip_blobs
        )
    }
}

/// Which part of the audit a progress report is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditPhase {
    /// Entries and tiles.
    Entries,
    /// Referenced blobs.
    Blobs,
}

impl AuditPhase {
    /// The phase in a word, for a progress display.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditPhase::Entries => "entries",
            AuditPhase::Blobs => "blobs",
        }
    }
}

/// A passed audit.
#[derive(Debug, Clone)]
pub struct AuditReport {
    /// The verified checkpoint.
    pub checkpoint: SignedCheckpoint,
    /// Entries checked.
    pub entries: u64,
    /// Distinct blobs re-hashed.
    pub blobs: u64,
    /// Bytes of blobs re-hashed.
    pub blob_bytes: u64,
    /// Referenced blobs listed as omitted by publication (not checked).
    pub blobs_omitted: u64,
    /// Wall time.
    pub seconds: f64,
}

/// The first bad item an audit found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuditFailure {
    /// The checkpoint is missing, malformed or not validly signed.
    Checkpoint {
        /// `log/checkpoint` located in the source.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// An entry bundle is missing or malformed.
    Bundle {
        /// The tile path.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// One entry is not a valid entry, or differs from the signed tree.
    Entry {
        /// Its index.
        index: u64,
        /// Its bundle.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A hash tile is missing, truncated or differs from the entries.
    HashTile {
        /// The tile path.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The entries and tiles agree with each other but not with the signed root.
    Root {
        /// Root recomputed from the entries.
        computed: MerkleHash,
        /// Root the checkpoint signs.
        signed: MerkleHash,
    },
    /// The log does not extend a checkpoint seen before.
    Consistency {
        /// The earlier checkpoint.
        prev_size: u64,
        /// Its root.
        prev_root: MerkleHash,
        /// What is wrong.
        reason: String,
    },
    /// A file of the layout is longer than its format allows (see [`ReadLimit`]).
    TooLarge {
        /// The path or URL.
        location: String,
        /// The most its format allows.
        limit: u64,
        /// What the file is.
        what: &'static str,
    },
    /// A referenced blob is missing or altered.
    Blob {
        /// The blob.
        hash: BlobHash,
        /// The first entry referencing it.
        entry: u64,
        /// What is wrong.
        reason: String,
    },
}

impl fmt::Display for AuditFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AuditFailure::Checkpoint { path, reason } => write!(f, "checkpoint {path}: {reason}"),
            AuditFailure::Bundle { path, reason } => write!(f, "entry bundle {path}: {reason}"),
            AuditFailure::Entry {
                index,
                path,
                reason,
            } => write!(f, "entry {index} (in {path}): {reason}"),
            AuditFailure::HashTile { path, reason } => write!(f, "hash tile {path}: {reason}"),
            AuditFailure::Root { computed, signed } => write!(
                f,
                "checkpoint root: the entries hash to root {computed} but the checkpoint signs {signed}"
            ),
            AuditFailure::Consistency {
                prev_size,
                prev_root,
                reason,
            } => write!(
                f,
                "consistency with the earlier checkpoint (size {prev_size}, root {prev_root}): {reason}; the log's history was rewritten"
            ),
            AuditFailure::TooLarge {
                location,
                limit,
                what,
            } => write!(
                f,
                "{location}: larger than {limit} bytes, the most {what} may be; stopped reading it (the server does not serve a valid log)"
            ),
            AuditFailure::Blob {
                hash,
                entry,
                reason,
            } => write!(f, "blob {hash} (referenced by entry {entry}): {reason}"),
        }
    }
}

/// Audits the log and blobs readable from `source` against `vkey`. Every file is read within
/// the size its format allows ([`ReadLimit`]); one served longer is an
/// [`AuditFailure::TooLarge`], read no further.
pub fn audit(
    source: &dyn LogSource,
    vkey: &VerifierKey,
    opts: AuditOptions<'_>,
) -> Result<Result<AuditReport, AuditFailure>, Error> {
    match audit_inner(source, vkey, opts) {
        Err(Error::TooLarge {
            location,
            limit,
            what,
        }) => Ok(Err(AuditFailure::TooLarge {
            location,
            limit,
            what,
        })),
        other => other,
    }
}

fn audit_inner(
    source: &dyn LogSource,
    vkey: &VerifierKey,
    mut opts: AuditOptions<'_>,
) -> Result<Result<AuditReport, AuditFailure>, Error> {
    let start = Instant::now();
    let cp_loc = source.locate("log/checkpoint");
    let Some(note) = source.read("log/checkpoint", ReadLimit::CHECKPOINT)? else {
        return Ok(Err(AuditFailure::Checkpoint {
            path: cp_loc,
            reason: "missing".into(),
        }));
    };
    let signed = match vkey.verify(&note) {
        Ok(s) => s,
        Err(e) => {
            return Ok(Err(AuditFailure::Checkpoint {
                path: cp_loc,
                reason: e.to_string(),
            }));
        }
    };
    let size = signed.checkpoint.size.0;
    let signed_root = signed.checkpoint.root;

    // Pass 1: entries, leaf hashes against stored level-0 tiles, higher tiles as they fill.
    let mut builder = TreeBuilder::new();
    let mut refs = BlobRefs::new();
    let mut first_leaf_mismatch: Option<AuditFailure> = None;
    let mut first_tile_mismatch: Option<AuditFailure> = None;
    let tiles_count = size.div_ceil(TILE_WIDTH);
    for t in 0..tiles_count {
        let width = (size - t * TILE_WIDTH).min(TILE_WIDTH) as u16;
        let bundle_id = TileId {
            kind: TileKind::Entries,
            index: t,
            width,
        };
        let bundle_path = format!("log/{}", bundle_id.path());
        let Some(bytes) = source.read(&bundle_path, ReadLimit::tile(bundle_id))? else {
            return Ok(Err(AuditFailure::Bundle {
                path: source.locate(&bundle_path),
                reason: "missing".into(),
            }));
        };
        let entries = match split_bundle(&bytes, usize::from(width)) {
            Ok(e) => e,
            Err(e) => {
                return Ok(Err(AuditFailure::Bundle {
                    path: source.locate(&bundle_path),
                    reason: e.to_string(),
                }));
            }
        };
        let tile_id = TileId {
            kind: TileKind::Hashes(0),
            index: t,
            width,
        };
        let tile_path = format!("log/{}", tile_id.path());
        let Some(tile_bytes) = source.read(&tile_path, ReadLimit::tile(tile_id))? else {
            return Ok(Err(AuditFailure::HashTile {
                path: source.locate(&tile_path),
                reason: "missing".into(),
            }));
        };
        let Some(stored) = parse_hash_tile(&tile_bytes, width) else {
            return Ok(Err(AuditFailure::HashTile {
                path: source.locate(&tile_path),
                reason: format!(
                    "{} bytes, expected {} ({} hashes)",
                    tile_bytes.len(),
                    usize::from(width) * 32,
                    width
                ),
            }));
        };
        for (i, checked) in check_bundle(&entries).iter().enumerate() {
            let index = t * TILE_WIDTH + i as u64;
            let (leaf, entry_refs, named_size) = match checked {
                Ok(ok) => ok,
                Err(reason) => {
                    return Ok(Err(AuditFailure::Entry {
                        index,
                        path: source.locate(&bundle_path),
                        reason: reason.clone(),
                    }));
                }
            };
            for h in entry_refs {
                let slot = refs.entry(*h).or_insert((index, None));
                if let Some(n) = named_size {
                    slot.1.get_or_insert(*n);
                }
            }
            let leaf = *leaf;
            if leaf != stored[i] && first_leaf_mismatch.is_none() {
                first_leaf_mismatch = Some(AuditFailure::Entry {
                    index,
                    path: source.locate(&bundle_path),
                    reason: format!(
                        "its leaf hash {leaf} differs from the one stored in {} ({})",
                        source.locate(&tile_path),
                        stored[i]
                    ),
                });
            }
            let mut full_tiles = Vec::new();
            builder.push(leaf, |full| full_tiles.push(full));
            for full in full_tiles {
                let id = TileId {
                    kind: TileKind::Hashes(full.level),
                    index: full.index,
                    width: TILE_WIDTH as u16,
                };
                let rel = format!("log/{}", id.path());
                let bytes = if full.level == 0 {
                    Some(tile_bytes.clone())
                } else {
                    source.read(&rel, ReadLimit::tile(id))?
                };
                if let Some(f) = compare_tile(source, &rel, bytes, &full.hashes) {
                    first_tile_mismatch.get_or_insert(f);
                }
            }
        }
        if let Some(p) = opts.progress.as_mut() {
            p(AuditPhase::Entries, ((t + 1) * TILE_WIDTH).min(size), size);
        }
    }
    for (id, hashes) in builder.partial_tiles() {
        let rel = format!("log/{}", id.path());
        if let Some(f) = compare_tile(
            source,
            &rel,
            source.read(&rel, ReadLimit::tile(id))?,
            hashes,
        ) {
            first_tile_mismatch.get_or_insert(f);
        }
    }
    let computed_root = builder.root();
    if computed_root != signed_root {
        // The entries are not the signed ones: name the first entry that differs from the
        // stored leaf hashes, or else the root itself.
        return Ok(Err(first_leaf_mismatch.unwrap_or(AuditFailure::Root {
            computed: computed_root,
            signed: signed_root,
        })));
    }
    // The entries are authentic (they lead to the signed root): any stored tile that differs
    // from them was altered.
    if let Some(f) = first_tile_mismatch {
        return Ok(Err(f));
    }

    // Consistency with a checkpoint seen before, by a standard RFC 6962 proof built from the
    // (now verified) tiles.
    if let Some(prev) = &opts.prev {
        let fail = |reason: String| AuditFailure::Consistency {
            prev_size: prev.size.0,
            prev_root: prev.root,
            reason,
        };
        if prev.origin != signed.checkpoint.origin {
            return Ok(Err(fail(format!(
                "it is for origin {:?}, this log is {:?}",
                prev.origin, signed.checkpoint.origin
            ))));
        }
        if prev.size.0 > size {
            return Ok(Err(fail(format!("the log shrank to {size} entries"))));
        }
        let reader = LogReader::new(source, signed.clone());
        let proof = match reader.consistency_proof(prev.size, TreeSize(size))? {
            Ok(p) => p,
            Err(e) => return Ok(Err(fail(e.to_string()))),
        };
        if let Err(e) =
            verify_consistency(prev.size, TreeSize(size), &prev.root, &signed_root, &proof)
        {
            let reason = match e {
                ProofError::RootMismatch { .. } => {
                    "the first entries no longer hash to the earlier root".to_string()
                }
                other => other.to_string(),
            };
            return Ok(Err(fail(reason)));
        }
    }

    // Blobs.
    let (blobs, blob_bytes, blobs_omitted) = if opts.skip_blobs {
        (0, 0, 0)
    } else {
        match check_blobs(source, &refs, opts.max_blob_bytes, opts.progress.as_mut())? {
            Ok(counts) => counts,
            Err(f) => return Ok(Err(f)),
        }
    };
    Ok(Ok(AuditReport {
        checkpoint: signed,
        entries: size,
        blobs,
        blob_bytes,
        blobs_omitted,
        seconds: start.elapsed().as_secs_f64(),
    }))
}

/// Each referenced blob: the first entry naming it, and its size when an entry names it.
pub(crate) type BlobRefs = BTreeMap<Blake3Hash, (u64, Option<u64>)>;

/// Re-hashes every blob in `refs` from `source` (those listed in `blobs/OMITTED` may be
/// absent); returns (blobs checked, bytes, omitted) or the first bad blob.
pub(crate) fn check_blobs(
    source: &dyn LogSource,
    refs: &BlobRefs,
    max_blob_bytes: Option<u64>,
    mut progress: Option<&mut &mut dyn FnMut(AuditPhase, u64, u64)>,
) -> Result<Result<(u64, u64, u64), AuditFailure>, Error> {
    let omitted = read_omitted(source)?;
    let (mut blobs, mut blob_bytes, mut blobs_omitted) = (0u64, 0u64, 0u64);
    {
        let total = refs.len() as u64;
        let cap = max_blob_bytes.unwrap_or(DEFAULT_MAX_BLOB_BYTES);
        for (done, (h, (entry, named_size))) in refs.iter().enumerate() {
            let hash = BlobHash(*h);
            let rel = blob_rel_path(&hash);
            let limit = ReadLimit::blob(named_size.unwrap_or(cap));
            match source.open(&rel, limit)? {
                None if omitted.contains(h) => blobs_omitted += 1,
                None => {
                    return Ok(Err(AuditFailure::Blob {
                        hash,
                        entry: *entry,
                        reason: format!("missing ({})", source.locate(&rel)),
                    }));
                }
                Some(r) => {
                    // One byte past the limit tells "longer" without reading further.
                    let mut capped = r.take(limit.max.saturating_add(1));
                    let (got, n) = hash_reader(&mut capped as &mut dyn Read)
                        .map_err(|e| source.read_error(&rel, e))?;
                    let entry = *entry;
                    if n > limit.max {
                        let reason = match named_size {
                            Some(s) => format!(
                                "{} serves more than the {s} bytes entry {entry} names",
                                source.locate(&rel)
                            ),
                            None => format!(
                                "{} is larger than {cap} bytes, the most the audit reads of a blob whose size no entry names (raise it with --max-blob-bytes)",
                                source.locate(&rel)
                            ),
                        };
                        return Ok(Err(AuditFailure::Blob {
                            hash,
                            entry,
                            reason,
                        }));
                    }
                    if got != *h {
                        return Ok(Err(AuditFailure::Blob {
                            hash,
                            entry,
                            reason: format!(
                                "content at {} hashes to {got}: the blob was altered",
                                source.locate(&rel)
                            ),
                        }));
                    }
                    if let Some(s) = named_size
                        && *s != n
                    {
                        return Ok(Err(AuditFailure::Blob {
                            hash,
                            entry,
                            reason: format!("it is {n} bytes, but entry {entry} says {s}"),
                        }));
                    }
                    blobs += 1;
                    blob_bytes += n;
                }
            }
            if let Some(p) = progress.as_mut() {
                p(AuditPhase::Blobs, done as u64 + 1, total);
            }
        }
    }
    Ok(Ok((blobs, blob_bytes, blobs_omitted)))
}

/// Only what the audit needs from an entry: its blob references, and the size its body names
/// for them. Parsing into this still checks the whole document is JSON, without building the
/// full typed entry.
#[derive(serde::Deserialize)]
struct EntryRefs {
    v: u32,
    kind: String,
    refs: BTreeMap<String, Blake3Hash>,
    #[serde(default)]
    body: Option<NamedSize>,
}

/// `body.bytes` of an `artifact` or `dataset` entry: the size of its one blob.
#[derive(serde::Deserialize)]
struct NamedSize {
    #[serde(default)]
    bytes: Option<u64>,
}

/// Leaf hash, blob references and the size named for them, of one entry.
pub(crate) type CheckedEntry = (MerkleHash, Vec<Blake3Hash>, Option<u64>);

/// [`CheckedEntry`] of each entry of a bundle, on two threads (the audit is CPU-bound on JSON
/// parsing and SHA-256).
pub(crate) fn check_bundle(entries: &[&[u8]]) -> Vec<Result<CheckedEntry, String>> {
    let one = |e: &[u8]| -> Result<CheckedEntry, String> {
        if e.len() > glassbox_schemas::record::MAX_ENTRY_BYTES {
            return Err(format!("{} bytes, over the entry limit", e.len()));
        }
        let parsed: EntryRefs =
            serde_json::from_slice(e).map_err(|err| format!("not a ledger entry: {err}"))?;
        if parsed.v != glassbox_schemas::record::ENTRY_VERSION {
            return Err(format!("unknown entry version {}", parsed.v));
        }
        let named_size = match (parsed.kind.as_str(), parsed.refs.len(), &parsed.body) {
            ("artifact" | "dataset", 1, Some(b)) => b.bytes,
            _ => None,
        };
        Ok((
            leaf_hash(e),
            parsed.refs.into_values().collect(),
            named_size,
        ))
    };
    let mid = entries.len() / 2;
    let (a, b) = entries.split_at(mid);
    std::thread::scope(|s| {
        let h = s.spawn(|| a.iter().map(|e| one(e)).collect::<Vec<_>>());
        let mut second: Vec<_> = b.iter().map(|e| one(e)).collect();
        let mut first = h
            .join()
            .unwrap_or_else(|_| a.iter().map(|e| one(e)).collect());
        first.append(&mut second);
        first
    })
}

pub(crate) fn compare_tile(
    source: &dyn LogSource,
    rel: &str,
    stored: Option<Vec<u8>>,
    computed: &[MerkleHash],
) -> Option<AuditFailure> {
    let path = source.locate(rel);
    match stored {
        None => Some(AuditFailure::HashTile { path, reason: "missing".into() }),
        Some(bytes) if bytes.len() != computed.len() * 32 => Some(AuditFailure::HashTile {
            path,
            reason: format!("{} bytes, expected {}", bytes.len(), computed.len() * 32),
        }),
        Some(bytes) if bytes != hash_tile_bytes(computed) => Some(AuditFailure::HashTile {
            path,
            reason: "its hashes differ from those recomputed from the signed entries (the tile was altered)".into(),
        }),
        Some(_) => None,
    }
}

fn read_omitted(source: &dyn LogSource) -> Result<BTreeSet<Blake3Hash>, Error> {
    let Some(bytes) = source.read(OMITTED_BLOBS, ReadLimit::OMITTED)? else {
        return Ok(BTreeSet::new());
    };
    Ok(String::from_utf8_lossy(&bytes)
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect())
}

/// Parses a `--prev` checkpoint note and checks its signature.
pub fn parse_prev(note: &[u8], vkey: &VerifierKey) -> Result<Checkpoint, CheckpointError> {
    vkey.verify(note).map(|s| s.checkpoint)
}
