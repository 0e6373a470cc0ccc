//! Precedence you can prove: that entry `first` (a forecast) was in the public log, in a
//! signed — and, with witnesses, cosigned and timestamped — checkpoint, before entry `second`
//! (a run's `run_started`) was sequenced.
//!
//! The proof is an archived checkpoint ([`crate::archive`]) of size `s` with
//! `first < s <= second`: its tree holds `first` (an RFC 6962 inclusion proof against its root)
//! and not `second` (whose index is at least `s`), and the current checkpoint extends it (a
//! consistency proof from `s`), so nothing was reordered afterwards. The cosignatures on that
//! checkpoint say when witnesses saw it. [`prove_precedes`] builds every part from the log's
//! tiles and checks each before returning it; it does not know what the entries mean.

use crate::archive::CheckpointArchive;
use crate::checkpoint::{SignedCheckpoint, VerifierKey};
use crate::cosignature::{QuorumReport, WitnessPolicy};
use crate::error::Error;
use crate::log::LogReader;
use crate::merkle::{
    LeafIndex, MerkleHash, TreeSize, leaf_hash, verify_consistency, verify_inclusion,
};
use crate::source::LogSource;

/// A checked proof that entry `first` was published before entry `second` was sequenced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrecedenceProof {
    /// The earlier entry's index.
    pub first: u64,
    /// The later entry's index.
    pub second: u64,
    /// The earlier entry's bytes.
    pub first_entry: Vec<u8>,
    /// The later entry's bytes.
    pub second_entry: Vec<u8>,
    /// The archived checkpoint that holds `first` and not `second`.
    pub checkpoint: SignedCheckpoint,
    /// Inclusion of `first` in `checkpoint`.
    pub inclusion: Vec<MerkleHash>,
    /// The log's current checkpoint.
    pub current: SignedCheckpoint,
    /// Consistency from `checkpoint` to `current`.
    pub consistency: Vec<MerkleHash>,
    /// Inclusion of `second` in `current`.
    pub second_inclusion: Vec<MerkleHash>,
    /// The witnesses' cosignatures on `checkpoint`, when witnesses were given.
    pub cosigned: Option<QuorumReport>,
}

/// Why no precedence proof exists for the two entries.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrecedenceFailure {
    /// `first` is not before `second`, or one is past the log.
    #[error("entry {first} does not come before entry {second} in a log of {size} entries")]
    NotOrdered {
        /// The earlier entry.
        first: u64,
        /// The later entry.
        second: u64,
        /// The log's size.
        size: u64,
    },
    /// No archived checkpoint holds `first` without `second`.
    #[error(
        "no checkpoint was made with entry {first} and without entry {second} (they were integrated in the same batch, or the archive lost it): the log's order says {first} came first, but no signed checkpoint shows it public before {second}"
    )]
    NoCheckpointBetween {
        /// The earlier entry.
        first: u64,
        /// The later entry.
        second: u64,
    },
    /// The archived checkpoint is not the log's, or does not agree with the log.
    #[error("the archived checkpoint of size {size} {reason}")]
    BadCheckpoint {
        /// Its size.
        size: u64,
        /// What is wrong.
        reason: String,
    },
}

/// Builds and checks the proof that entry `first` preceded entry `second` (module docs).
pub fn prove_precedes(
    source: &dyn LogSource,
    vkey: &VerifierKey,
    archive: &CheckpointArchive,
    first: u64,
    second: u64,
    witnesses: &WitnessPolicy,
) -> Result<Result<PrecedenceProof, PrecedenceFailure>, Error> {
    let reader = LogReader::open(source, vkey)?;
    let n = reader.size();
    if first >= second || second >= n.0 {
        return Ok(Err(PrecedenceFailure::NotOrdered {
            first,
            second,
            size: n.0,
        }));
    }
    let Some(archived) = archive.first_between(first, second)? else {
        return Ok(Err(PrecedenceFailure::NoCheckpointBetween {
            first,
            second,
        }));
    };
    let s = archived.checkpoint.size;
    let bad = |reason: String| PrecedenceFailure::BadCheckpoint { size: s.0, reason };
    let checkpoint = match vkey.verify(&archived.to_bytes()) {
        Ok(c) => c,
        Err(e) => return Ok(Err(bad(e.to_string()))),
    };
    let first_entry = reader.entry(LeafIndex(first))?;
    let second_entry = reader.entry(LeafIndex(second))?;
    let inclusion = match reader.inclusion_proof(LeafIndex(first), s)? {
        Ok(p) => p,
        Err(e) => return Ok(Err(bad(e.to_string()))),
    };
    if let Err(e) = verify_inclusion(
        &leaf_hash(&first_entry),
        LeafIndex(first),
        s,
        &inclusion,
        &checkpoint.checkpoint.root,
    ) {
        return Ok(Err(bad(format!("does not hold entry {first}: {e}"))));
    }
    let consistency = match reader.consistency_proof(s, n)? {
        Ok(p) => p,
        Err(e) => return Ok(Err(bad(e.to_string()))),
    };
    let current_root = reader.checkpoint.checkpoint.root;
    if let Err(e) = verify_consistency(
        s,
        n,
        &checkpoint.checkpoint.root,
        &current_root,
        &consistency,
    ) {
        return Ok(Err(bad(format!(
            "is not extended by the current checkpoint: {e}"
        ))));
    }
    let second_inclusion = match reader.inclusion_proof(LeafIndex(second), n)? {
        Ok(p) => p,
        Err(e) => return Ok(Err(bad(e.to_string()))),
    };
    if let Err(e) = verify_inclusion(
        &leaf_hash(&second_entry),
        LeafIndex(second),
        n,
        &second_inclusion,
        &current_root,
    ) {
        return Ok(Err(bad(format!(
            "is followed by a log that does not hold entry {second}: {e}"
        ))));
    }
    let cosigned = (!witnesses.witnesses.is_empty()).then(|| witnesses.check(&checkpoint));
    Ok(Ok(PrecedenceProof {
        first,
        second,
        first_entry,
        second_entry,
        checkpoint,
        inclusion,
        current: reader.checkpoint.clone(),
        consistency,
        second_inclusion,
        cosigned,
    }))
}

/// The size of the archived checkpoint that shows `first` published before `second`, without
/// building the proofs (for pages that only name it); `None` when there is none.
pub fn checkpoint_between(
    archive: &CheckpointArchive,
    vkey: &VerifierKey,
    first: u64,
    second: u64,
) -> Result<Option<SignedCheckpoint>, Error> {
    if first >= second {
        return Ok(None);
    }
    Ok(archive
        .first_between(first, second)?
        .and_then(|c| vkey.verify(&c.to_bytes()).ok())
        .filter(|c| c.checkpoint.size > TreeSize(first)))
}
