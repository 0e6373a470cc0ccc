//! RFC 6962 / RFC 9162 Merkle tree math over SHA-256: leaf and node hashes, tree roots,
//! inclusion and consistency proofs, and their verifiers.
//!
//! This module is pure computation. It does not know where hashes are stored: proofs are built
//! against a [`NodeSource`], which the tiled log (`tiles`) and the in-memory [`MemoryTree`]
//! implement. Hashes: `leaf = SHA-256(0x00 || entry)`, `node = SHA-256(0x01 || left || right)`,
//! and the empty tree's root is SHA-256 of nothing.

use std::fmt;

use base64::Engine as _;
use sha2::{Digest, Sha256};

/// A SHA-256 Merkle tree hash (a leaf, an interior node or a root).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MerkleHash(pub [u8; 32]);

impl MerkleHash {
    /// Standard base64 with padding, as checkpoints write roots.
    pub fn to_base64(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(self.0)
    }

    /// Lowercase hex.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Parses 64 hex digits.
    pub fn from_hex(s: &str) -> Option<Self> {
        let mut out = [0u8; 32];
        hex::decode_to_slice(s, &mut out).ok()?;
        Some(Self(out))
    }

    /// Reads the `i`-th 32-byte hash out of a hash tile's bytes.
    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        <[u8; 32]>::try_from(bytes).ok().map(Self)
    }
}

impl fmt::Display for MerkleHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for MerkleHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MerkleHash({})", self.to_hex())
    }
}

/// The position of a leaf (an entry) in the log, counted from 0.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct LeafIndex(pub u64);

/// The number of leaves in a tree (a checkpoint's size).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct TreeSize(pub u64);

impl fmt::Display for LeafIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for TreeSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Root of the empty tree: SHA-256 of nothing.
pub fn empty_root() -> MerkleHash {
    MerkleHash(Sha256::digest(b"").into())
}

/// `SHA-256(0x00 || entry)`.
pub fn leaf_hash(entry: &[u8]) -> MerkleHash {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(entry);
    MerkleHash(h.finalize().into())
}

/// `SHA-256(0x01 || left || right)`.
pub fn node_hash(left: &MerkleHash, right: &MerkleHash) -> MerkleHash {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(left.0);
    h.update(right.0);
    MerkleHash(h.finalize().into())
}

/// Root of a perfect subtree whose bottom row is `hashes` (its length a power of two).
pub fn perfect_root(hashes: &[MerkleHash]) -> MerkleHash {
    debug_assert!(hashes.len().is_power_of_two());
    let mut row: Vec<MerkleHash> = hashes.to_vec();
    while row.len() > 1 {
        row = row.chunks(2).map(|p| node_hash(&p[0], &p[1])).collect();
    }
    row[0]
}

/// Root of the RFC 6962 tree over `hashes` (any length): the largest-power-of-two split.
pub fn root_of_row(hashes: &[MerkleHash]) -> MerkleHash {
    match hashes.len() {
        0 => empty_root(),
        1 => hashes[0],
        n => {
            let k = largest_power_of_two_below(n as u64) as usize;
            node_hash(&root_of_row(&hashes[..k]), &root_of_row(&hashes[k..]))
        }
    }
}

/// The largest power of two strictly less than `n` (`n >= 2`).
fn largest_power_of_two_below(n: u64) -> u64 {
    debug_assert!(n >= 2);
    1u64 << (63 - (n - 1).leading_zeros())
}

/// Where proofs read node hashes from.
///
/// `perfect_node(level, index)` is the root of the perfect subtree over leaves
/// `[index << level, (index + 1) << level)`; level 0 is a leaf hash.
pub trait NodeSource {
    /// The error reading a node can fail with.
    type Error;
    /// The hash of a perfect subtree that lies wholly inside the tree.
    fn perfect_node(&self, level: u8, index: u64) -> Result<MerkleHash, Self::Error>;
}

/// MTH(D[start:end]) per RFC 6962 2.1, reading perfect subtrees from `src`.
pub fn subtree_hash<S: NodeSource>(src: &S, start: u64, end: u64) -> Result<MerkleHash, S::Error> {
    let n = end - start;
    if n == 0 {
        return Ok(empty_root());
    }
    if n.is_power_of_two() && start % n == 0 {
        return src.perfect_node(n.trailing_zeros() as u8, start / n);
    }
    let k = largest_power_of_two_below(n);
    let left = subtree_hash(src, start, start + k)?;
    let right = subtree_hash(src, start + k, end)?;
    Ok(node_hash(&left, &right))
}

/// Why a proof cannot be built or does not verify. Each names what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    /// The leaf index is not inside the tree.
    #[error("leaf index {index} is outside a tree of size {size}; use an index below the size")]
    IndexOutOfRange {
        /// The index asked for.
        index: u64,
        /// The tree size.
        size: u64,
    },
    /// Consistency needs `m <= n`.
    #[error(
        "consistency from size {m} to size {n} is undefined: the first size must not exceed the second"
    )]
    SizesOutOfOrder {
        /// Old size.
        m: u64,
        /// New size.
        n: u64,
    },
    /// The proof has the wrong number of hashes for these sizes.
    #[error("proof has {got} hashes, {expected} expected for these sizes")]
    WrongLength {
        /// Hashes in the proof.
        got: usize,
        /// Hashes the shape requires.
        expected: usize,
    },
    /// The recomputed root differs.
    #[error("proof does not lead to the expected root: computed {computed}, expected {expected}")]
    RootMismatch {
        /// Root the proof leads to.
        computed: MerkleHash,
        /// Root it should lead to.
        expected: MerkleHash,
    },
}

/// The inclusion proof (audit path) of leaf `index` in the tree of `size` leaves, RFC 6962 2.1.1.
pub fn inclusion_proof<S: NodeSource>(
    src: &S,
    index: LeafIndex,
    size: TreeSize,
) -> Result<Result<Vec<MerkleHash>, ProofError>, S::Error> {
    if index.0 >= size.0 {
        return Ok(Err(ProofError::IndexOutOfRange {
            index: index.0,
            size: size.0,
        }));
    }
    let mut proof = Vec::new();
    // PATH(m, D[start:end]) unrolled: each step records the sibling subtree, deepest last, so
    // the list is reversed at the end to run leaf-to-root.
    let (mut m, mut start, mut end) = (index.0, 0u64, size.0);
    while end - start > 1 {
        let k = largest_power_of_two_below(end - start);
        if m < k {
            proof.push(subtree_hash(src, start + k, end)?);
            end = start + k;
        } else {
            proof.push(subtree_hash(src, start, start + k)?);
            start += k;
            m -= k;
        }
    }
    proof.reverse();
    Ok(Ok(proof))
}

/// The consistency proof between sizes `m` and `n`, RFC 6962 2.1.2 (empty when `m` is 0 or `m == n`).
pub fn consistency_proof<S: NodeSource>(
    src: &S,
    m: TreeSize,
    n: TreeSize,
) -> Result<Result<Vec<MerkleHash>, ProofError>, S::Error> {
    if m.0 > n.0 {
        return Ok(Err(ProofError::SizesOutOfOrder { m: m.0, n: n.0 }));
    }
    if m.0 == 0 || m.0 == n.0 {
        return Ok(Ok(Vec::new()));
    }
    let mut proof = Vec::new();
    // SUBPROOF(m, D[start:end], b) unrolled.
    let (mut mm, mut start, mut end, mut complete) = (m.0, 0u64, n.0, true);
    loop {
        let len = end - start;
        if mm == len {
            if !complete {
                proof.push(subtree_hash(src, start, end)?);
            }
            break;
        }
        let k = largest_power_of_two_below(len);
        if mm <= k {
            proof.push(subtree_hash(src, start + k, end)?);
            end = start + k;
        } else {
            proof.push(subtree_hash(src, start, start + k)?);
            start += k;
            mm -= k;
            complete = false;
        }
    }
    proof.reverse();
    Ok(Ok(proof))
}

/// Checks an inclusion proof, RFC 9162 2.1.3.2.
pub fn verify_inclusion(
    leaf: &MerkleHash,
    index: LeafIndex,
    size: TreeSize,
    proof: &[MerkleHash],
    root: &MerkleHash,
) -> Result<(), ProofError> {
    if index.0 >= size.0 {
        return Err(ProofError::IndexOutOfRange {
            index: index.0,
            size: size.0,
        });
    }
    let expected_len = inclusion_proof_len(index.0, size.0);
    if proof.len() != expected_len {
        return Err(ProofError::WrongLength {
            got: proof.len(),
            expected: expected_len,
        });
    }
    let (mut f, mut s) = (index.0, size.0 - 1);
    let mut r = *leaf;
    for p in proof {
        if f & 1 == 1 || f == s {
            r = node_hash(p, &r);
            while f & 1 == 0 && f != 0 {
                f >>= 1;
                s >>= 1;
            }
        } else {
            r = node_hash(&r, p);
        }
        f >>= 1;
        s >>= 1;
    }
    if s != 0 || r != *root {
        return Err(ProofError::RootMismatch {
            computed: r,
            expected: *root,
        });
    }
    Ok(())
}

/// Number of hashes in the inclusion proof of `index` in a tree of `size`.
fn inclusion_proof_len(index: u64, size: u64) -> usize {
    let (mut m, mut n, mut len) = (index, size, 0);
    while n > 1 {
        let k = largest_power_of_two_below(n);
        if m < k {
            n = k;
        } else {
            m -= k;
            n -= k;
        }
        len += 1;
    }
    len
}

/// Number of hashes in the consistency proof from `m` to `n` (`0 < m < n`).
fn consistency_proof_len(m: u64, n: u64) -> usize {
    let (mut mm, mut len_n, mut complete, mut len) = (m, n, true, 0);
    loop {
        if mm == len_n {
            return len + usize::from(!complete);
        }
        let k = largest_power_of_two_below(len_n);
        if mm <= k {
            len_n = k;
        } else {
            mm -= k;
            len_n -= k;
            complete = false;
        }
        len += 1;
    }
}

/// Checks a consistency proof, RFC 9162 2.1.4.2.
pub fn verify_consistency(
    m: TreeSize,
    n: TreeSize,
    root_m: &MerkleHash,
    root_n: &MerkleHash,
    proof: &[MerkleHash],
) -> Result<(), ProofError> {
    if m.0 > n.0 {
        return Err(ProofError::SizesOutOfOrder { m: m.0, n: n.0 });
    }
    if m.0 == n.0 || m.0 == 0 {
        if !proof.is_empty() {
            return Err(ProofError::WrongLength {
                got: proof.len(),
                expected: 0,
            });
        }
        if m.0 == n.0 && root_m != root_n {
            return Err(ProofError::RootMismatch {
                computed: *root_m,
                expected: *root_n,
            });
        }
        return Ok(());
    }
    let expected_len = consistency_proof_len(m.0, n.0);
    if proof.len() != expected_len {
        return Err(ProofError::WrongLength {
            got: proof.len(),
            expected: expected_len,
        });
    }
    let mut path: Vec<MerkleHash> = Vec::with_capacity(proof.len() + 1);
    if m.0.is_power_of_two() {
        path.push(*root_m);
    }
    path.extend_from_slice(proof);
    let (mut f, mut s) = (m.0 - 1, n.0 - 1);
    while f & 1 == 1 {
        f >>= 1;
        s >>= 1;
    }
    let (mut fr, mut sr) = (path[0], path[0]);
    for c in &path[1..] {
        if s == 0 {
            return Err(ProofError::WrongLength {
                got: proof.len(),
                expected: expected_len,
            });
        }
        if f & 1 == 1 || f == s {
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            while f & 1 == 0 && f != 0 {
                f >>= 1;
                s >>= 1;
            }
        } else {
            sr = node_hash(&sr, c);
        }
        f >>= 1;
        s >>= 1;
    }
    if fr != *root_m {
        return Err(ProofError::RootMismatch {
            computed: fr,
            expected: *root_m,
        });
    }
    if sr != *root_n || s != 0 {
        return Err(ProofError::RootMismatch {
            computed: sr,
            expected: *root_n,
        });
    }
    Ok(())
}

/// A whole tree held in memory as its leaf hashes: for tests, vectors and small tools.
#[derive(Debug, Clone, Default)]
pub struct MemoryTree {
    /// Leaf hashes in order.
    pub leaves: Vec<MerkleHash>,
}

impl MemoryTree {
    /// A tree over these entries.
    pub fn from_entries<'a>(entries: impl IntoIterator<Item = &'a [u8]>) -> Self {
        Self {
            leaves: entries.into_iter().map(leaf_hash).collect(),
        }
    }

    /// Root of the first `size` leaves.
    pub fn root(&self, size: TreeSize) -> MerkleHash {
        root_of_row(&self.leaves[..size.0 as usize])
    }
}

/// A node outside the tree was asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("node at level {level}, index {index} is outside the tree")]
pub struct NodeOutOfRange {
    /// Tree level (0 = leaves).
    pub level: u8,
    /// Index within the level.
    pub index: u64,
}

impl NodeSource for MemoryTree {
    type Error = NodeOutOfRange;
    fn perfect_node(&self, level: u8, index: u64) -> Result<MerkleHash, NodeOutOfRange> {
        let lo = index << level;
        let hi = (index + 1) << level;
        if hi as usize > self.leaves.len() {
            return Err(NodeOutOfRange { level, index });
        }
        Ok(perfect_root(&self.leaves[lo as usize..hi as usize]))
    }
}
