//! `verify`: the auditor's whole policy around [`crate::audit`] — which verifier key is trusted,
//! what was seen before, and what is remembered afterwards. `glassbox verify` parses its flags
//! into a [`Target`] and [`VerifyOptions`], calls [`verify`], and prints the [`VerifyReport`].
//!
//! The key, in order: the one the auditor gave (`--vkey`); else the one remembered for this
//! target; else the target's own `vkey` file, trusted on first use. Memory is kept per
//! **target** (the URL or directory the auditor named; [`Target::memory_key`]), not per the
//! origin the server claims, so a server that changes its key or its origin under the same URL
//! fails with [`VerifyFailure::KeyChanged`] / [`VerifyFailure::OriginChanged`] instead of
//! being trusted afresh. The auditor lifts that with `--vkey` (checked out of band) or by
//! forgetting the target (`--forget`). The checkpoint remembered for the target, when it was
//! signed by the key in use, is the `prev` the log must extend.
//!
//! With witnesses given ([`VerifyOptions::witnesses`]), the checkpoint must also carry valid
//! C2SP cosignatures from at least the quorum of them ([`VerifyFailure::Witnesses`] otherwise).
//!
//! Not here: reading flags, printing, opening a lab's configured blob store (the caller passes
//! the [`LogSource`] in [`Target`]).

use std::fmt;
use std::path::{Path, PathBuf};

use crate::audit::{AuditFailure, AuditOptions, AuditPhase, AuditReport, audit};
use crate::checkpoint::{Checkpoint, SignedCheckpoint, VerifierKey};
use crate::cosignature::{QuorumReport, WitnessPolicy};
use crate::error::Error;
use crate::index::{Index, IndexMismatch};
use crate::log::LogReader;
use crate::seen::{Seen, SeenCheckpoints};
use crate::source::{DirSource, LogSource, ReadLimit};

/// What is being verified: where it is, and how to read it.
pub struct Target {
    /// `url:<url>` or `dir:<canonical path>`; see [`Target::memory_key`].
    key: String,
    /// A lab directory (for the index comparison), when the target is one.
    dir: Option<PathBuf>,
    source: Box<dyn LogSource>,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target").field("key", &self.key).finish()
    }
}

impl Target {
    /// A log served over HTTP(S) at `url`, read through `source`.
    pub fn url(url: &str, source: Box<dyn LogSource>) -> Self {
        Target {
            key: format!("url:{}", url.trim_end_matches('/')),
            dir: None,
            source,
        }
    }

    /// A lab directory (or a published copy of one) read through `source` (a [`DirSource`],
    /// or one with the lab's blob store).
    pub fn dir(root: &Path, source: Box<dyn LogSource>) -> Self {
        let canonical = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
        Target {
            key: format!("dir:{}", canonical.display()),
            dir: Some(root.to_path_buf()),
            source,
        }
    }

    /// The name this target is remembered by: the URL (without a trailing `/`) or the
    /// directory's canonical path.
    pub fn memory_key(&self) -> &str {
        &self.key
    }

    /// The source the log is read from.
    pub fn source(&self) -> &dyn LogSource {
        self.source.as_ref()
    }
}

/// How to verify.
#[derive(Default)]
pub struct VerifyOptions<'a> {
    /// The verifier key the auditor trusts (`--vkey`).
    pub vkey: Option<VerifierKey>,
    /// A signed checkpoint note seen earlier (`--prev`): the log must extend it.
    pub prev: Option<Vec<u8>>,
    /// Forget what was remembered for the target first (`--forget`).
    pub forget: bool,
    /// Do not re-hash blobs.
    pub skip_blobs: bool,
    /// Most bytes read of a blob whose size no entry names.
    pub max_blob_bytes: Option<u64>,
    /// The index database to compare with the log (a lab directory's).
    pub index_url: Option<String>,
    /// Witnesses whose cosignatures the checkpoint must carry (none: not checked).
    pub witnesses: WitnessPolicy,
    /// Progress of the audit.
    pub progress: Option<&'a mut dyn FnMut(AuditPhase, u64, u64)>,
}

impl fmt::Debug for VerifyOptions<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerifyOptions")
            .field("vkey", &self.vkey.as_ref().map(|k| k.to_string()))
            .field("forget", &self.forget)
            .field("skip_blobs", &self.skip_blobs)
            .field("index_url", &self.index_url)
            .field("witnesses", &self.witnesses)
            .finish()
    }
}

/// Where the verifier key came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySource {
    /// `--vkey`.
    Given,
    /// Remembered for this target.
    Remembered,
    /// The target's own `vkey`, trusted on first use (and now remembered).
    FirstUse,
}

impl fmt::Display for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeySource::Given => "given",
            KeySource::Remembered => "remembered",
            KeySource::FirstUse => "from the lab, trusted on first use",
        })
    }
}

/// How the index database compared with the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexCheck {
    /// No index to compare (a URL, or a lab without one).
    NoIndex,
    /// Every row matches.
    Matches,
    /// Every row matches a prefix of the log; newer entries are not indexed yet.
    Behind {
        /// Entries indexed.
        indexed: u64,
        /// Entries in the log.
        log: u64,
    },
}

/// A passed verification.
#[derive(Debug, Clone)]
pub struct VerifyReport {
    /// The audit.
    pub audit: AuditReport,
    /// The key it was checked with.
    pub vkey: VerifierKey,
    /// Where that key came from.
    pub key_source: KeySource,
    /// The earlier checkpoint the log was shown to extend, if any.
    pub extends: Option<Checkpoint>,
    /// The remembered key, when `--vkey` replaced a different one.
    pub replaced_key: Option<String>,
    /// The index comparison.
    pub index: IndexCheck,
    /// The witnesses' cosignatures, when witnesses were given.
    pub cosigned: Option<QuorumReport>,
}

/// Verification ran and the target is not what it should be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerifyFailure {
    /// The audit found a bad item.
    Audit(AuditFailure),
    /// The target now presents another verifier key than the one remembered for it.
    KeyChanged {
        /// The target.
        target: String,
        /// The key remembered.
        remembered: String,
        /// The key it serves now.
        served: String,
    },
    /// The target's checkpoint now names another origin than the one remembered for it.
    OriginChanged {
        /// The target.
        target: String,
        /// The origin remembered.
        remembered: String,
        /// The origin it serves now.
        served: String,
    },
    /// No verifier key was given, none is remembered, and the target serves none.
    NoKey {
        /// Where the key was looked for.
        location: String,
    },
    /// The index database disagrees with the log.
    Index {
        /// The index.
        url: String,
        /// How.
        mismatch: IndexMismatch,
    },
    /// Fewer of the given witnesses cosigned the checkpoint than the quorum.
    Witnesses {
        /// The checkpoint's size.
        size: u64,
        /// Who cosigned, who did not, and why.
        report: QuorumReport,
    },
}

impl fmt::Display for VerifyFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerifyFailure::Audit(a) => a.fmt(f),
            VerifyFailure::KeyChanged {
                target,
                remembered,
                served,
            } => write!(
                f,
                "{target} now presents verifier key {served}, but it was verified before with {remembered}; \
                 if the lab really changed its key, check the new one out of band and pass --vkey, or --forget to start over"
            ),
            VerifyFailure::OriginChanged {
                target,
                remembered,
                served,
            } => write!(
                f,
                "{target} now serves a log named {served:?}, but it was verified before as {remembered:?}; \
                 pass --vkey with the new log's key (checked out of band), or --forget to start over"
            ),
            VerifyFailure::NoKey { location } => write!(
                f,
                "no --vkey given, none remembered for this target, and {location} is missing"
            ),
            VerifyFailure::Index { url, mismatch } => write!(f, "index {url}: {mismatch}"),
            VerifyFailure::Witnesses { size, report } => write!(
                f,
                "the checkpoint of size {size} lacks its witnesses' quorum: {report}; the log may be showing this checkpoint to you alone, or its witnesses were down when it was made (a later checkpoint will carry them)"
            ),
        }
    }
}

/// Verifies `target` as the module docs say, remembering a passed checkpoint in `seen`.
pub async fn verify(
    target: &Target,
    opts: VerifyOptions<'_>,
    seen: &SeenCheckpoints,
) -> Result<Result<VerifyReport, VerifyFailure>, Error> {
    let key = target.memory_key();
    if opts.forget {
        seen.forget(key)?;
    }
    let remembered = seen.load(key)?;
    let source = target.source();
    let note = match source.read("log/checkpoint", ReadLimit::CHECKPOINT) {
        Ok(Some(n)) => n,
        Ok(None) => {
            return Ok(Err(VerifyFailure::Audit(AuditFailure::Checkpoint {
                path: source.locate("log/checkpoint"),
                reason: "missing: is it a glassbox lab?".into(),
            })));
        }
        Err(Error::TooLarge {
            location,
            limit,
            what,
        }) => {
            return Ok(Err(VerifyFailure::Audit(AuditFailure::TooLarge {
                location,
                limit,
                what,
            })));
        }
        Err(e) => return Err(e),
    };
    let served_origin = String::from_utf8_lossy(&note)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string();

    let (vkey, key_source, replaced_key) = match (&opts.vkey, &remembered) {
        (Some(k), r) => (
            k.clone(),
            KeySource::Given,
            r.as_ref()
                .filter(|r| r.vkey != k.to_string())
                .map(|r| r.vkey.clone()),
        ),
        (None, Some(r)) => {
            if r.origin() != served_origin {
                return Ok(Err(VerifyFailure::OriginChanged {
                    target: display_target(key),
                    remembered: r.origin(),
                    served: served_origin,
                }));
            }
            if let Some(served) = read_vkey(source)?
                && served != r.vkey
            {
                return Ok(Err(VerifyFailure::KeyChanged {
                    target: display_target(key),
                    remembered: r.vkey.clone(),
                    served,
                }));
            }
            (r.vkey.parse::<VerifierKey>()?, KeySource::Remembered, None)
        }
        (None, None) => {
            let Some(text) = read_vkey(source)? else {
                return Ok(Err(VerifyFailure::NoKey {
                    location: source.locate("vkey"),
                }));
            };
            (text.parse::<VerifierKey>()?, KeySource::FirstUse, None)
        }
    };

    let prev = match (&opts.prev, &remembered) {
        (Some(p), _) => Some(vkey.verify(p)?.checkpoint),
        (None, Some(r)) if r.vkey == vkey.to_string() => {
            SignedCheckpoint::parse(&r.note).ok().map(|c| c.checkpoint)
        }
        _ => None,
    };
    let report = match audit(
        source,
        &vkey,
        AuditOptions {
            prev: prev.clone(),
            skip_blobs: opts.skip_blobs,
            max_blob_bytes: opts.max_blob_bytes,
            progress: opts.progress,
        },
    )? {
        Ok(r) => r,
        Err(f) => return Ok(Err(VerifyFailure::Audit(f))),
    };

    let cosigned = if opts.witnesses.witnesses.is_empty() {
        None
    } else {
        let q = opts.witnesses.check(&report.checkpoint);
        if !q.met() {
            return Ok(Err(VerifyFailure::Witnesses {
                size: report.checkpoint.checkpoint.size.0,
                report: q,
            }));
        }
        Some(q)
    };

    let index = match (&target.dir, &opts.index_url) {
        (Some(root), Some(url)) => match check_index(root, url, &report.checkpoint).await? {
            Ok(i) => i,
            Err(mismatch) => {
                return Ok(Err(VerifyFailure::Index {
                    url: url.clone(),
                    mismatch,
                }));
            }
        },
        _ => IndexCheck::NoIndex,
    };

    seen.save(
        key,
        &Seen {
            vkey: vkey.to_string(),
            note: report.checkpoint.to_bytes(),
        },
    )?;
    Ok(Ok(VerifyReport {
        audit: report,
        vkey,
        key_source,
        extends: prev,
        replaced_key,
        index,
        cosigned,
    }))
}

/// The target's `vkey` file, trimmed; `None` when it has none.
fn read_vkey(source: &dyn LogSource) -> Result<Option<String>, Error> {
    Ok(source
        .read("vkey", ReadLimit::VKEY)?
        .map(|b| String::from_utf8_lossy(&b).trim().to_string()))
}

/// `url:https://x` -> `https://x`, `dir:/p` -> `/p`.
fn display_target(key: &str) -> String {
    key.split_once(':')
        .map(|(_, rest)| rest.to_string())
        .unwrap_or_else(|| key.to_string())
}

/// Compares the index at `url` with the log of the lab at `root`, at `checkpoint`. A derived
/// index that lags a growing log is not a finding (every row it has matched); rows that
/// differ, or an index ahead of the log, are.
pub async fn check_index(
    root: &Path,
    url: &str,
    checkpoint: &SignedCheckpoint,
) -> Result<Result<IndexCheck, IndexMismatch>, Error> {
    let dir = DirSource {
        root: root.to_path_buf(),
    };
    let reader = LogReader::new(&dir, checkpoint.clone());
    let idx = Index::connect(url).await?;
    let r = idx.check(&reader).await;
    idx.close().await;
    Ok(match r? {
        Ok(()) => Ok(IndexCheck::Matches),
        Err(IndexMismatch::Behind { indexed, log }) => Ok(IndexCheck::Behind { indexed, log }),
        Err(m) => Err(m),
    })
}
