//! The C2SP tlog-tiles layout: tile coordinates and paths, entry bundles, and [`TreeBuilder`],
//! the streaming right edge of the tree that turns leaf hashes into full and partial hash tiles.
//!
//! Tiles have height 8. A hash tile at tile level `L`, index `N` holds the tree-level-`8L`
//! hashes `N*256 .. N*256+W` (W = 256 when full, else `.p/W`). Tile level 0 holds leaf hashes;
//! the entry bundle with the same `N` holds the entries themselves as uint16-length-prefixed
//! byte strings. This module knows paths and bytes; it does not read or write files (that is
//! `log`) and does not sign anything (that is `checkpoint`).

use crate::merkle::{MerkleHash, node_hash, perfect_root};

/// Tile height: each tile covers 8 tree levels.
pub const TILE_HEIGHT: u8 = 8;
/// Hashes (or entries) in a full tile.
pub const TILE_WIDTH: u64 = 256;

/// Which kind of tile: hashes at a tile level, or the entry bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TileKind {
    /// `tile/<L>/...`: hashes at tree level `8L`.
    Hashes(u8),
    /// `tile/entries/...`: the entries themselves.
    Entries,
}

/// One tile of a tree of a given size: kind, index and width (1..=256).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TileId {
    /// Hash tile level or entry bundle.
    pub kind: TileKind,
    /// `N`: which tile along its level.
    pub index: u64,
    /// Hashes or entries in it; 256 is a full tile.
    pub width: u16,
}

impl TileId {
    /// The path below `<lab>/log/`, e.g. `tile/0/x001/234.p/17` or `tile/entries/005`.
    pub fn path(&self) -> String {
        let level = match self.kind {
            TileKind::Hashes(l) => l.to_string(),
            TileKind::Entries => "entries".to_string(),
        };
        let mut p = format!("tile/{level}/{}", encode_tile_index(self.index));
        if u64::from(self.width) < TILE_WIDTH {
            p.push_str(&format!(".p/{}", self.width));
        }
        p
    }

    /// Whether the tile is full (256 wide).
    pub fn is_full(&self) -> bool {
        u64::from(self.width) == TILE_WIDTH
    }
}

/// `N` written in 3-digit groups, all but the last prefixed `x`: 1234067 -> `x001/x234/067`.
pub fn encode_tile_index(n: u64) -> String {
    let mut groups = vec![format!("{:03}", n % 1000)];
    let mut rest = n / 1000;
    while rest > 0 {
        groups.push(format!("x{:03}", rest % 1000));
        rest /= 1000;
    }
    groups.reverse();
    groups.join("/")
}

/// Number of stored hashes at tile level `level` for a tree of `size` leaves.
fn hashes_at_level(size: u64, level: u8) -> u64 {
    let shift = u32::from(level) * u32::from(TILE_HEIGHT);
    if shift >= 64 { 0 } else { size >> shift }
}

/// The hash tile at `level` that holds stored hash `i` (at tree level `8*level`), sized for a
/// tree of `size` leaves. `None` when that hash is not in the tree.
pub fn hash_tile_for(size: u64, level: u8, i: u64) -> Option<TileId> {
    let count = hashes_at_level(size, level);
    if i >= count {
        return None;
    }
    let index = i / TILE_WIDTH;
    let width = (count - index * TILE_WIDTH).min(TILE_WIDTH) as u16;
    Some(TileId {
        kind: TileKind::Hashes(level),
        index,
        width,
    })
}

/// Every tile of a tree of `size` leaves: entry bundles, then hash tiles level by level.
pub fn tiles_for_size(size: u64) -> Vec<TileId> {
    let mut out = Vec::new();
    let mut push_row = |kind: TileKind, count: u64| {
        for index in 0..count.div_ceil(TILE_WIDTH) {
            let width = (count - index * TILE_WIDTH).min(TILE_WIDTH) as u16;
            out.push(TileId { kind, index, width });
        }
    };
    push_row(TileKind::Entries, size);
    let mut level = 0u8;
    loop {
        let count = hashes_at_level(size, level);
        if count == 0 {
            break;
        }
        push_row(TileKind::Hashes(level), count);
        level += 1;
    }
    out
}

/// The rows of a tree of `size` leaves and the tiles' count in each: the entry bundles, then
/// the hash tiles level by level (the order of [`tiles_for_size`]).
fn rows(size: u64) -> Vec<(TileKind, u64)> {
    let mut out = vec![(TileKind::Entries, size)];
    let mut level = 0u8;
    loop {
        let count = hashes_at_level(size, level);
        if count == 0 {
            return out;
        }
        out.push((TileKind::Hashes(level), count));
        level += 1;
    }
}

/// The tiles a tree of `to` leaves has and one of `from` (<= `to`) leaves lacks: the tiles that
/// filled up on the way, and the new right-edge partials. Copying these and then the checkpoint
/// of size `to` brings a copy of the log at `from` up to `to`; the same as the set difference
/// of [`tiles_for_size`], without listing the whole tree.
pub fn grown(from: u64, to: u64) -> Vec<TileId> {
    let mut out = Vec::new();
    if to <= from {
        return out;
    }
    let before: std::collections::HashMap<TileKind, u64> = rows(from).into_iter().collect();
    for (kind, count) in rows(to) {
        let had = before.get(&kind).copied().unwrap_or(0);
        if had == count {
            continue;
        }
        // Tile `had / 256` was partial or absent at `from`: it and those after it are new.
        for index in had / TILE_WIDTH..count.div_ceil(TILE_WIDTH) {
            let width = (count - index * TILE_WIDTH).min(TILE_WIDTH) as u16;
            out.push(TileId { kind, index, width });
        }
    }
    out
}

/// The partial tiles of a tree of `from` leaves that one of `to` (>= `from`) leaves no longer
/// has: each right-edge partial whose row grew. A copy of the log at `to` may delete them (C2SP
/// tlog-tiles lets a log drop a partial tile once a wider one is published).
pub fn superseded(from: u64, to: u64) -> Vec<TileId> {
    let after: std::collections::HashMap<TileKind, u64> = rows(to).into_iter().collect();
    rows(from)
        .into_iter()
        .filter(|(kind, count)| {
            count % TILE_WIDTH != 0 && after.get(kind).copied().unwrap_or(0) != *count
        })
        .map(|(kind, count)| TileId {
            kind,
            index: count / TILE_WIDTH,
            width: (count % TILE_WIDTH) as u16,
        })
        .collect()
}

/// Why an entry bundle cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    /// The bytes end inside a length prefix or an entry.
    #[error("entry bundle is truncated at byte {offset} (entry {entry} of {expected})")]
    Truncated {
        /// Byte offset where the data ran out.
        offset: usize,
        /// Entry being read.
        entry: usize,
        /// Entries the bundle should hold.
        expected: usize,
    },
    /// More bytes than the entries account for.
    #[error("entry bundle has {extra} unexpected trailing bytes after {expected} entries")]
    TrailingBytes {
        /// Extra bytes.
        extra: usize,
        /// Entries the bundle should hold.
        expected: usize,
    },
}

/// Appends one entry to bundle bytes: big-endian uint16 length, then the bytes.
/// The caller guarantees `entry.len() <= u16::MAX` (entries are checked on append).
pub fn push_bundle_entry(bundle: &mut Vec<u8>, entry: &[u8]) {
    bundle.extend_from_slice(&(entry.len() as u16).to_be_bytes());
    bundle.extend_from_slice(entry);
}

/// Splits bundle bytes into exactly `expected` entries.
pub fn split_bundle(bytes: &[u8], expected: usize) -> Result<Vec<&[u8]>, BundleError> {
    let mut out = Vec::with_capacity(expected);
    let mut off = 0usize;
    for entry in 0..expected {
        let truncated = BundleError::Truncated {
            offset: bytes.len(),
            entry,
            expected,
        };
        let len_bytes = bytes.get(off..off + 2).ok_or(truncated.clone())?;
        let len = usize::from(u16::from_be_bytes([len_bytes[0], len_bytes[1]]));
        let body = bytes.get(off + 2..off + 2 + len).ok_or(truncated)?;
        out.push(body);
        off += 2 + len;
    }
    if off != bytes.len() {
        return Err(BundleError::TrailingBytes {
            extra: bytes.len() - off,
            expected,
        });
    }
    Ok(out)
}

/// Hash tile bytes: the hashes back to back.
pub fn hash_tile_bytes(hashes: &[MerkleHash]) -> Vec<u8> {
    let mut out = Vec::with_capacity(hashes.len() * 32);
    for h in hashes {
        out.extend_from_slice(&h.0);
    }
    out
}

/// Hash tile bytes back to hashes; `None` when the length is not `width * 32`.
pub fn parse_hash_tile(bytes: &[u8], width: u16) -> Option<Vec<MerkleHash>> {
    if bytes.len() != usize::from(width) * 32 {
        return None;
    }
    Some(
        bytes
            .chunks_exact(32)
            .filter_map(MerkleHash::from_slice)
            .collect(),
    )
}

/// A hash tile that became full while appending.
#[derive(Debug, Clone)]
pub struct FullTile {
    /// Tile level.
    pub level: u8,
    /// Tile index along the level.
    pub index: u64,
    /// Its 256 hashes.
    pub hashes: Vec<MerkleHash>,
}

/// The right edge of a tiled tree: per tile level, the hashes of the not-yet-full tile.
///
/// Pushing leaf hashes one by one yields each hash tile the moment it fills; the partial rows
/// left over are exactly the partial tiles of the current size, and they determine the root.
/// Memory: at most 255 hashes per level.
#[derive(Debug, Clone, Default)]
pub struct TreeBuilder {
    size: u64,
    /// `rows[L]`: hashes at tree level `8L` in the current (partial) tile of tile level `L`.
    rows: Vec<Vec<MerkleHash>>,
}

impl TreeBuilder {
    /// An empty tree.
    pub fn new() -> Self {
        Self::default()
    }

    /// Resumes from the partial tiles of a tree of `size` leaves (`rows[L]` must hold
    /// `(size >> 8L) % 256` hashes; the caller read them from the partial tiles).
    pub fn resume(size: u64, rows: Vec<Vec<MerkleHash>>) -> Option<Self> {
        for (l, row) in rows.iter().enumerate() {
            if row.len() as u64 != hashes_at_level(size, l as u8) % TILE_WIDTH {
                return None;
            }
        }
        if hashes_at_level(size, rows.len() as u8) != 0 {
            return None;
        }
        Some(Self { size, rows })
    }

    /// Leaves so far.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The partial rows, level by level (some may be empty).
    pub fn rows(&self) -> &[Vec<MerkleHash>] {
        &self.rows
    }

    /// Adds a leaf hash; calls `on_full` for every hash tile that became full, lowest first.
    pub fn push(&mut self, leaf: MerkleHash, mut on_full: impl FnMut(FullTile)) {
        self.size += 1;
        let mut carry = leaf;
        let mut level = 0usize;
        loop {
            if self.rows.len() == level {
                self.rows.push(Vec::with_capacity(TILE_WIDTH as usize));
            }
            self.rows[level].push(carry);
            if self.rows[level].len() as u64 != TILE_WIDTH {
                break;
            }
            let hashes = std::mem::take(&mut self.rows[level]);
            carry = perfect_root(&hashes);
            let index = hashes_at_level(self.size, level as u8) / TILE_WIDTH - 1;
            on_full(FullTile {
                level: level as u8,
                index,
                hashes,
            });
            level += 1;
        }
    }

    /// The tree root: each partial row splits into perfect subtrees along the bits of its
    /// length; all of them, left to right from the top level down, fold right to left.
    pub fn root(&self) -> MerkleHash {
        let mut perfect: Vec<MerkleHash> = Vec::new();
        for row in self.rows.iter().rev() {
            let mut off = 0usize;
            for bit in (0..TILE_HEIGHT).rev() {
                let w = 1usize << bit;
                if row.len() & w != 0 {
                    perfect.push(perfect_root(&row[off..off + w]));
                    off += w;
                }
            }
        }
        match perfect.split_last() {
            None => crate::merkle::empty_root(),
            Some((last, rest)) => rest.iter().rev().fold(*last, |acc, h| node_hash(h, &acc)),
        }
    }

    /// The partial hash tiles of the current size (non-empty rows), lowest level first.
    pub fn partial_tiles(&self) -> Vec<(TileId, &[MerkleHash])> {
        self.rows
            .iter()
            .enumerate()
            .filter(|(_, r)| !r.is_empty())
            .map(|(l, r)| {
                let index = hashes_at_level(self.size, l as u8) / TILE_WIDTH;
                (
                    TileId {
                        kind: TileKind::Hashes(l as u8),
                        index,
                        width: r.len() as u16,
                    },
                    r.as_slice(),
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merkle::{MemoryTree, TreeSize, leaf_hash};

    #[test]
    fn grown_and_superseded_are_the_set_differences_of_the_two_trees() {
        use std::collections::BTreeSet;
        let sizes = [
            0u64, 1, 2, 255, 256, 257, 511, 512, 1000, 65_535, 65_536, 65_537, 70_000,
        ];
        for &from in &sizes {
            for &to in &sizes {
                if to < from {
                    continue;
                }
                let a: BTreeSet<TileId> = tiles_for_size(from).into_iter().collect();
                let b: BTreeSet<TileId> = tiles_for_size(to).into_iter().collect();
                let new: BTreeSet<TileId> = grown(from, to).into_iter().collect();
                let gone: BTreeSet<TileId> = superseded(from, to).into_iter().collect();
                assert_eq!(new, &b - &a, "grown({from}, {to})");
                assert_eq!(gone, &a - &b, "superseded({from}, {to})");
                assert!(gone.iter().all(|t| !t.is_full()), "a full tile superseded");
            }
        }
    }

    #[test]
    fn index_encoding_matches_c2sp_examples() {
        assert_eq!(encode_tile_index(5), "005");
        assert_eq!(encode_tile_index(1234067), "x001/x234/067");
        assert_eq!(encode_tile_index(1000), "x001/000");
        assert_eq!(encode_tile_index(0), "000");
    }

    #[test]
    fn paths() {
        let t = TileId {
            kind: TileKind::Hashes(1),
            index: 1234067,
            width: 17,
        };
        assert_eq!(t.path(), "tile/1/x001/x234/067.p/17");
        let e = TileId {
            kind: TileKind::Entries,
            index: 5,
            width: 256,
        };
        assert_eq!(e.path(), "tile/entries/005");
    }

    #[test]
    fn builder_root_matches_rfc_root_for_many_sizes() {
        let entries: Vec<Vec<u8>> = (0..70_000u32).map(|i| i.to_be_bytes().to_vec()).collect();
        let tree = MemoryTree::from_entries(entries.iter().map(|e| e.as_slice()));
        let mut b = TreeBuilder::new();
        let mut full = 0usize;
        for (i, leaf) in tree.leaves.iter().enumerate() {
            b.push(*leaf, |_| full += 1);
            let n = i as u64 + 1;
            if n < 600 || n % 977 == 0 || n == 65_536 || n == 70_000 {
                assert_eq!(b.root(), tree.root(TreeSize(n)), "size {n}");
            }
        }
        // 70000/256 = 273 level-0 tiles, 273/256 = 1 level-1 tile.
        assert_eq!(full, 274);
        let resumed = TreeBuilder::resume(70_000, b.rows().to_vec()).unwrap();
        assert_eq!(resumed.root(), b.root());
        assert!(TreeBuilder::resume(70_001, b.rows().to_vec()).is_none());
        assert_eq!(tree.leaves[0], leaf_hash(&0u32.to_be_bytes()));
    }

    #[test]
    fn tiles_for_size_lists_full_and_partial() {
        let paths: Vec<String> = tiles_for_size(70_000).iter().map(|t| t.path()).collect();
        assert!(paths.contains(&"tile/entries/273.p/112".to_string()));
        assert!(paths.contains(&"tile/0/272".to_string()));
        // 70000 >> 8 = 273 level-1 hashes: one full tile and 17 in the next.
        assert!(paths.contains(&"tile/1/000".to_string()));
        assert!(
            paths.contains(&"tile/1/001.p/17".to_string()),
            "{:?}",
            &paths[paths.len() - 3..]
        );
        // 70000 >> 16 = 1: one complete 65536-leaf subtree is stored at tile level 2.
        assert!(paths.contains(&"tile/2/000.p/1".to_string()));
        assert!(tiles_for_size(0).is_empty());
    }

    #[test]
    fn bundles_round_trip_and_reject_damage() {
        let mut b = Vec::new();
        push_bundle_entry(&mut b, b"abc");
        push_bundle_entry(&mut b, b"");
        assert_eq!(split_bundle(&b, 2).unwrap(), vec![&b"abc"[..], &b""[..]]);
        assert!(matches!(
            split_bundle(&b[..4], 2),
            Err(BundleError::Truncated { .. })
        ));
        assert!(matches!(
            split_bundle(&b, 1),
            Err(BundleError::TrailingBytes { extra: 2, .. })
        ));
    }
}
