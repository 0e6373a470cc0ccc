//! Checking an inclusion proof offline: that an entry's bytes are leaf `index` of the tree of
//! `tree_size` entries whose root is `root` (RFC 9162 2.1.3.2, the ledger's own verifier), and,
//! given the lab's verifier key, that the signed checkpoint names that size and root.
//!
//! Not here: making proofs (the ledger's `LogReader`) or Python.

use base64::Engine;
use glassbox_ledger::VerifierKey;
use glassbox_ledger::merkle::{LeafIndex, MerkleHash, TreeSize, leaf_hash, verify_inclusion};

/// An inclusion proof as the JSON API (`/api/v1/entries/{idx}/proof`) and `Lab.proof` give it.
#[derive(Debug, Clone, Default)]
pub struct Proof<'a> {
    /// Leaf index.
    pub index: u64,
    /// The tree's size.
    pub tree_size: u64,
    /// Sibling hashes from the leaf up, base64.
    pub proof: &'a [String],
    /// The root, base64.
    pub root: &'a str,
    /// The signed checkpoint note the proof leads to.
    pub checkpoint: Option<&'a str>,
}

fn hash(text: &str, what: &str) -> Result<MerkleHash, String> {
    base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .ok()
        .and_then(|b| MerkleHash::from_slice(&b))
        .ok_or_else(|| format!("{what} {text:?} is not a base64 SHA-256 hash"))
}

/// Checks `proof` for `entry` (its canonical bytes); with `vkey`, also the checkpoint's
/// signature and that it signs this size and root. The error says which check failed.
pub fn check(entry: &[u8], proof: &Proof<'_>, vkey: Option<&str>) -> Result<(), String> {
    let root = hash(proof.root, "root")?;
    let path = proof
        .proof
        .iter()
        .enumerate()
        .map(|(i, h)| hash(h, &format!("proof[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    verify_inclusion(
        &leaf_hash(entry),
        LeafIndex(proof.index),
        TreeSize(proof.tree_size),
        &path,
        &root,
    )
    .map_err(|e| {
        format!(
            "entry {} is not in the tree of size {} with root {}: {e}",
            proof.index, proof.tree_size, proof.root
        )
    })?;
    let Some(vkey) = vkey else { return Ok(()) };
    let key: VerifierKey = vkey
        .trim()
        .parse()
        .map_err(|e| format!("vkey {vkey:?}: {e}"))?;
    let note = proof
        .checkpoint
        .ok_or("a vkey was given but the proof carries no checkpoint to check it against")?;
    let signed = key
        .verify(note.as_bytes())
        .map_err(|e| format!("checkpoint: {e}"))?;
    let cp = &signed.checkpoint;
    if cp.size.0 != proof.tree_size || cp.root != root {
        return Err(format!(
            "checkpoint: it signs size {} root {}, not the proof's size {} root {}",
            cp.size.0,
            cp.root.to_base64(),
            proof.tree_size,
            proof.root
        ));
    }
    Ok(())
}
