//! A monitor: `glassbox verify URL --follow` keeps verifying a live log. After one full
//! [`crate::verify::verify`], every `every` it reads the served checkpoint again and, when it
//! changed, checks only what is new ([`check_extension`]):
//!
//! - the new checkpoint is signed by the log's key;
//! - its tree contains the last one: the hashes at the old tree's right edge, read from the
//!   new tiles, must rebuild the old root (this is the consistency check, from the tiles
//!   themselves) — a smaller tree, or one that does not rebuild it, is a fork or a rewrite;
//! - the new entries are canonical ledger entries that, pushed onto that edge, give the new
//!   root, and the new hash tiles hold exactly their hashes;
//! - the blobs the new entries reference hash to their names;
//! - the witnesses' cosignatures, when witnesses are given, counted against the quorum (a
//!   checkpoint below quorum is reported in the metrics, not an alarm: its witnesses may have
//!   been down, and the next checkpoint may carry them).
//!
//! A server that cannot be read is counted and retried at the next tick; a fork, a rewrite or a
//! bad new entry ends the watch with an [`Alarm`] naming both checkpoints. The watch's state
//! is a [`MonitorState`] the caller can expose ([`MonitorState::prometheus`]). Each verified
//! checkpoint is remembered as `glassbox verify` remembers it. Not here: flags, printing, the
//! metrics endpoint's HTTP server.

use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use crate::audit::{AuditFailure, BlobRefs, check_blobs, check_bundle, compare_tile};
use crate::checkpoint::{SignedCheckpoint, VerifierKey};
use crate::cosignature::{QuorumReport, WitnessPolicy};
use crate::error::Error;
use crate::merkle::leaf_hash;
use crate::seen::{Seen, SeenCheckpoints};
use crate::source::{LogSource, ReadLimit};
use crate::tiles::{TILE_WIDTH, TileId, TileKind, TreeBuilder, parse_hash_tile, split_bundle};
use crate::verify::{Target, VerifyFailure, VerifyOptions, VerifyReport, verify};

/// Why a watch ended: the log is not what it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Alarm {
    /// The first full verification failed.
    Verify(VerifyFailure),
    /// The served checkpoint is not validly signed by the log's key.
    BadCheckpoint {
        /// The last verified checkpoint.
        earlier: String,
        /// What is wrong with the served one.
        reason: String,
    },
    /// Two validly signed checkpoints that cannot both be true: the served tree is smaller
    /// than, or does not contain, the one verified before.
    Fork {
        /// The last verified checkpoint's note.
        earlier: String,
        /// The served checkpoint's note.
        later: String,
        /// How they contradict each other.
        reason: String,
    },
    /// The new checkpoint extends the last one, but what is served for it is bad.
    BadExtension {
        /// The served checkpoint's note.
        later: String,
        /// The finding.
        failure: AuditFailure,
    },
}

/// One line per note line, indented, for a message.
fn show(note: &str) -> String {
    note.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

impl fmt::Display for Alarm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Alarm::Verify(v) => v.fmt(f),
            Alarm::BadCheckpoint { earlier, reason } => write!(
                f,
                "the served checkpoint is not the log's: {reason}\n  last verified checkpoint:\n{}",
                show(earlier)
            ),
            Alarm::Fork {
                earlier,
                later,
                reason,
            } => write!(
                f,
                "fork: {reason}; the log's history was rewritten\n  verified before:\n{}\n  served now:\n{}",
                show(earlier),
                show(later)
            ),
            Alarm::BadExtension { later, failure } => write!(
                f,
                "the new checkpoint's entries or tiles are bad: {failure}\n  served checkpoint:\n{}",
                show(later)
            ),
        }
    }
}

/// What the watch has seen so far, for the metrics endpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MonitorState {
    /// The target (URL or directory).
    pub target: String,
    /// Entries in the last verified checkpoint.
    pub size: u64,
    /// Checks run (ticks).
    pub checks: u64,
    /// Ticks where the target could not be read.
    pub read_errors: u64,
    /// Checkpoints verified (the first and every new one).
    pub checkpoints_verified: u64,
    /// New entries checked since the watch began.
    pub entries_checked: u64,
    /// Blobs re-hashed since the watch began.
    pub blobs_checked: u64,
    /// POSIX seconds of the last tick that read and verified the target.
    pub last_success: u64,
    /// Valid witness cosignatures on the last verified checkpoint.
    pub cosignatures: u64,
    /// The quorum asked for (0: no witnesses given).
    pub quorum: u64,
    /// Whether the watch ended with an alarm.
    pub alarm: bool,
    /// The last read error, for people.
    pub last_error: Option<String>,
}

fn label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl MonitorState {
    /// The Prometheus text exposition of the state.
    pub fn prometheus(&self) -> String {
        let t = label(&self.target);
        let mut out = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, value: u64| {
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{target=\"{t}\"}} {value}\n"
            ));
        };
        metric(
            "glassbox_monitor_checkpoint_size",
            "gauge",
            "Entries in the last verified checkpoint.",
            self.size,
        );
        metric(
            "glassbox_monitor_checks_total",
            "counter",
            "Times the served checkpoint was read.",
            self.checks,
        );
        metric(
            "glassbox_monitor_read_errors_total",
            "counter",
            "Checks that could not read the target (retried at the next tick).",
            self.read_errors,
        );
        metric(
            "glassbox_monitor_checkpoints_verified_total",
            "counter",
            "Checkpoints verified.",
            self.checkpoints_verified,
        );
        metric(
            "glassbox_monitor_entries_checked_total",
            "counter",
            "New entries checked.",
            self.entries_checked,
        );
        metric(
            "glassbox_monitor_blobs_checked_total",
            "counter",
            "Blobs re-hashed.",
            self.blobs_checked,
        );
        metric(
            "glassbox_monitor_last_success_timestamp_seconds",
            "gauge",
            "When the target was last read and verified (POSIX seconds).",
            self.last_success,
        );
        metric(
            "glassbox_monitor_witness_cosignatures",
            "gauge",
            "Valid cosignatures of the given witnesses on the last verified checkpoint.",
            self.cosignatures,
        );
        metric(
            "glassbox_monitor_witness_quorum",
            "gauge",
            "Cosignatures asked for (0: no witnesses given).",
            self.quorum,
        );
        metric(
            "glassbox_monitor_alarm",
            "gauge",
            "1 once a fork, a rewrite or a bad entry was found.",
            u64::from(self.alarm),
        );
        out
    }
}

/// How to follow.
#[derive(Debug, Clone)]
pub struct FollowOptions {
    /// Time between checks.
    pub every: Duration,
    /// Do not re-hash blobs.
    pub skip_blobs: bool,
    /// Most bytes read of a blob whose size no entry names.
    pub max_blob_bytes: Option<u64>,
    /// Witnesses counted on every checkpoint.
    pub witnesses: WitnessPolicy,
}

/// What a check of a new checkpoint found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extension {
    /// New entries checked.
    pub entries: u64,
    /// Blobs re-hashed.
    pub blobs: u64,
}

/// Verifies `target` once (as `glassbox verify` does, with `first`), then keeps checking it
/// every `opts.every` until it finds an [`Alarm`], which it returns. `on_tick` is told of each
/// tick's state (for printing); `state` is updated for the metrics endpoint.
pub async fn follow(
    target: &Target,
    first: VerifyOptions<'_>,
    seen: &SeenCheckpoints,
    opts: &FollowOptions,
    state: &Mutex<MonitorState>,
    mut on_tick: impl FnMut(&MonitorState, Option<&Error>),
) -> Result<Alarm, Error> {
    let set = |f: &mut dyn FnMut(&mut MonitorState)| {
        let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut s);
        s.clone()
    };
    let report: VerifyReport = match verify(target, first, seen).await? {
        Ok(r) => r,
        Err(v) => {
            set(&mut |s| s.alarm = true);
            return Ok(Alarm::Verify(v));
        }
    };
    let vkey = report.vkey.clone();
    let mut last = report.audit.checkpoint.clone();
    let quorum_of = |cp: &SignedCheckpoint| -> Option<QuorumReport> {
        (!opts.witnesses.witnesses.is_empty()).then(|| opts.witnesses.check(cp))
    };
    let q = quorum_of(&last);
    let snapshot = set(&mut |s| {
        s.target = target.memory_key().to_string();
        s.size = last.checkpoint.size.0;
        s.checks += 1;
        s.checkpoints_verified += 1;
        s.entries_checked += report.audit.entries;
        s.blobs_checked += report.audit.blobs;
        s.last_success = crate::witness::unix_now();
        s.cosignatures = q.as_ref().map_or(0, |q| q.cosigned.len() as u64);
        s.quorum = opts.witnesses.quorum as u64;
    });
    on_tick(&snapshot, None);
    loop {
        tokio::time::sleep(opts.every).await;
        match tick(target.source(), &vkey, &last, opts) {
            Err(e) => {
                let snapshot = set(&mut |s| {
                    s.checks += 1;
                    s.read_errors += 1;
                    s.last_error = Some(e.to_string());
                });
                on_tick(&snapshot, Some(&e));
            }
            Ok(Err(alarm)) => {
                set(&mut |s| {
                    s.checks += 1;
                    s.alarm = true;
                });
                return Ok(alarm);
            }
            Ok(Ok(None)) => {
                let snapshot = set(&mut |s| {
                    s.checks += 1;
                    s.last_success = crate::witness::unix_now();
                });
                on_tick(&snapshot, None);
            }
            Ok(Ok(Some((new, ext)))) => {
                seen.save(
                    target.memory_key(),
                    &Seen {
                        vkey: vkey.to_string(),
                        note: new.to_bytes(),
                    },
                )?;
                let q = quorum_of(&new);
                last = new;
                let snapshot = set(&mut |s| {
                    s.checks += 1;
                    s.size = last.checkpoint.size.0;
                    s.checkpoints_verified += 1;
                    s.entries_checked += ext.entries;
                    s.blobs_checked += ext.blobs;
                    s.last_success = crate::witness::unix_now();
                    s.cosignatures = q.as_ref().map_or(0, |q| q.cosigned.len() as u64);
                });
                on_tick(&snapshot, None);
            }
        }
    }
}

/// What one tick found: nothing new, a checked new checkpoint, or an alarm.
type Tick = Result<Option<(SignedCheckpoint, Extension)>, Alarm>;

/// One tick: `Ok(None)` when the checkpoint did not change; the new checkpoint once checked.
fn tick(
    source: &dyn LogSource,
    vkey: &VerifierKey,
    last: &SignedCheckpoint,
    opts: &FollowOptions,
) -> Result<Tick, Error> {
    let earlier = String::from_utf8_lossy(&last.to_bytes()).into_owned();
    let note = match source.read("log/checkpoint", ReadLimit::CHECKPOINT) {
        Ok(Some(n)) => n,
        Ok(None) => {
            return Ok(Err(Alarm::BadCheckpoint {
                earlier,
                reason: format!("{} is gone", source.locate("log/checkpoint")),
            }));
        }
        Err(Error::TooLarge {
            location,
            limit,
            what,
        }) => {
            return Ok(Err(Alarm::BadCheckpoint {
                earlier,
                reason: format!("{location} is larger than {limit} bytes, the most {what} may be"),
            }));
        }
        Err(e) => return Err(e),
    };
    let new = match vkey.verify(&note) {
        Ok(n) => n,
        Err(e) => {
            return Ok(Err(Alarm::BadCheckpoint {
                earlier,
                reason: e.to_string(),
            }));
        }
    };
    if new.text == last.text {
        return Ok(Ok(None));
    }
    match check_extension(source, last, &new, opts)? {
        Ok(ext) => Ok(Ok(Some((new, ext)))),
        Err(a) => Ok(Err(a)),
    }
}

/// Checks that `new` extends `last` and that its new entries, tiles and blobs are sound, reading
/// only what is new (see the module docs).
pub fn check_extension(
    source: &dyn LogSource,
    last: &SignedCheckpoint,
    new: &SignedCheckpoint,
    opts: &FollowOptions,
) -> Result<Result<Extension, Alarm>, Error> {
    let (m, n) = (last.checkpoint.size.0, new.checkpoint.size.0);
    let earlier = String::from_utf8_lossy(&last.to_bytes()).into_owned();
    let later = String::from_utf8_lossy(&new.to_bytes()).into_owned();
    let fork = |reason: String| Alarm::Fork {
        earlier: earlier.clone(),
        later: later.clone(),
        reason,
    };
    let bad = |failure: AuditFailure| Alarm::BadExtension {
        later: later.clone(),
        failure,
    };
    if new.checkpoint.origin != last.checkpoint.origin {
        return Ok(Err(fork(format!(
            "the origin changed from {:?} to {:?}",
            last.checkpoint.origin, new.checkpoint.origin
        ))));
    }
    if n < m {
        return Ok(Err(fork(format!("the log shrank from {m} to {n} entries"))));
    }
    if n == m {
        return Ok(Err(fork(format!(
            "two checkpoints of size {m} with different roots ({} then {})",
            last.checkpoint.root.to_base64(),
            new.checkpoint.root.to_base64()
        ))));
    }

    // The old tree's right edge, read from the new tree's tiles.
    let mut rows = Vec::new();
    let mut level = 0u8;
    while (m >> (8 * u32::from(level))) > 0 {
        let count = m >> (8 * u32::from(level));
        let width = (count % TILE_WIDTH) as usize;
        if width == 0 {
            rows.push(Vec::new());
        } else {
            let index = count / TILE_WIDTH;
            let have = ((n >> (8 * u32::from(level))) - index * TILE_WIDTH).min(TILE_WIDTH) as u16;
            let id = TileId {
                kind: TileKind::Hashes(level),
                index,
                width: have,
            };
            let rel = format!("log/{}", id.path());
            let Some(bytes) = source.read(&rel, ReadLimit::tile(id))? else {
                return Ok(Err(bad(AuditFailure::HashTile {
                    path: source.locate(&rel),
                    reason: "missing".into(),
                })));
            };
            let Some(hashes) = parse_hash_tile(&bytes, have) else {
                return Ok(Err(bad(AuditFailure::HashTile {
                    path: source.locate(&rel),
                    reason: format!("{} bytes, expected {}", bytes.len(), usize::from(have) * 32),
                })));
            };
            rows.push(hashes[..width].to_vec());
        }
        level += 1;
    }
    let Some(mut builder) = TreeBuilder::resume(m, rows) else {
        return Err(Error::WriterFailed(
            "the old tree's edge has the wrong shape".into(),
        ));
    };
    if builder.root() != last.checkpoint.root {
        return Ok(Err(fork(format!(
            "the tree of {n} entries does not contain the earlier tree of {m} (its first {m} entries hash to {}, not {})",
            builder.root().to_base64(),
            last.checkpoint.root.to_base64()
        ))));
    }
    let old_leaves: Vec<_> = builder.rows().first().cloned().unwrap_or_default();

    let mut refs = BlobRefs::new();
    let mut tile_mismatch: Option<AuditFailure> = None;
    for b in m / TILE_WIDTH..n.div_ceil(TILE_WIDTH) {
        let width = (n - b * TILE_WIDTH).min(TILE_WIDTH) as u16;
        let id = TileId {
            kind: TileKind::Entries,
            index: b,
            width,
        };
        let rel = format!("log/{}", id.path());
        let Some(bytes) = source.read(&rel, ReadLimit::tile(id))? else {
            return Ok(Err(bad(AuditFailure::Bundle {
                path: source.locate(&rel),
                reason: "missing".into(),
            })));
        };
        let entries = match split_bundle(&bytes, usize::from(width)) {
            Ok(e) => e,
            Err(e) => {
                return Ok(Err(bad(AuditFailure::Bundle {
                    path: source.locate(&rel),
                    reason: e.to_string(),
                })));
            }
        };
        let skip = if b == m / TILE_WIDTH {
            (m % TILE_WIDTH) as usize
        } else {
            0
        };
        for (i, e) in entries[..skip].iter().enumerate() {
            if old_leaves.get(i) != Some(&leaf_hash(e)) {
                return Ok(Err(fork(format!(
                    "entry {} served now differs from the one in the earlier tree",
                    b * TILE_WIDTH + i as u64
                ))));
            }
        }
        for (i, checked) in check_bundle(&entries[skip..]).into_iter().enumerate() {
            let index = b * TILE_WIDTH + (skip + i) as u64;
            let (leaf, entry_refs, named_size) = match checked {
                Ok(ok) => ok,
                Err(reason) => {
                    return Ok(Err(bad(AuditFailure::Entry {
                        index,
                        path: source.locate(&rel),
                        reason,
                    })));
                }
            };
            for h in entry_refs {
                let slot = refs.entry(h).or_insert((index, None));
                if let Some(s) = named_size {
                    slot.1.get_or_insert(s);
                }
            }
            let mut full = Vec::new();
            builder.push(leaf, |t| full.push(t));
            for t in full {
                let id = TileId {
                    kind: TileKind::Hashes(t.level),
                    index: t.index,
                    width: TILE_WIDTH as u16,
                };
                let rel = format!("log/{}", id.path());
                if let Some(f) = compare_tile(
                    source,
                    &rel,
                    source.read(&rel, ReadLimit::tile(id))?,
                    &t.hashes,
                ) {
                    tile_mismatch.get_or_insert(f);
                }
            }
        }
    }
    if builder.root() != new.checkpoint.root {
        return Ok(Err(bad(AuditFailure::Root {
            computed: builder.root(),
            signed: new.checkpoint.root,
        })));
    }
    for (id, hashes) in builder.partial_tiles() {
        let rel = format!("log/{}", id.path());
        if let Some(f) = compare_tile(
            source,
            &rel,
            source.read(&rel, ReadLimit::tile(id))?,
            hashes,
        ) {
            tile_mismatch.get_or_insert(f);
        }
    }
    if let Some(f) = tile_mismatch {
        return Ok(Err(bad(f)));
    }
    let blobs = if opts.skip_blobs {
        0
    } else {
        match check_blobs(source, &refs, opts.max_blob_bytes, None)? {
            Ok((checked, _, _)) => checked,
            Err(f) => return Ok(Err(bad(f))),
        }
    };
    Ok(Ok(Extension {
        entries: n - m,
        blobs,
    }))
}
