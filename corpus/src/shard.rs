//! Token shards: a corpus tokenized with a tokenizer, as one content-addressed blob.
//!
//! # Layout (version 1)
//!
//! All integers little-endian. A shard is a 112-byte header, then four arrays:
//!
//! ```text
//! offset  size  field
//!      0     8  magic "GBSHARD1"
//!      8     1  id width W in bytes: 2 (vocab <= 65,536) or 4
//!      9     3  zero
//!     12     4  vocab size V (every id is < V)
//!     16     8  tokens N
//!     24     8  documents D
//!     32     8  text bytes (the sum of every token's byte count)
//!     40     8  long tokens K (tokens whose byte count is >= 255)
//!     48    32  BLAKE3 of the corpus blob
//!     80    32  BLAKE3 of the tokenizer blob
//!    112   W*N  token ids
//!      .     N  byte counts, one u8 per token; 255 means "see the long-token table"
//!      .   16*K long-token table: (u64 token index, u64 byte count), by ascending index
//!      .    8*D document starts: the index of each document's first token, ascending
//! ```
//!
//! Documents follow each other; each ends with the tokenizer's end-of-document token. A token's
//! byte count is how many source bytes it stands for (the runner's `data::tokenizer` says how
//! it is computed from the tokenizer's offsets), so the bytes behind
//! any window of tokens, and bits per byte over it, are exact. Reading checks every size, that
//! ids are below V, that the counts add up to the text bytes and that document starts ascend;
//! a shard that is not well formed is refused with what is wrong. The blob's hash is checked by
//! whoever loads it (the corpus store).
//!
//! Not here: which shard belongs to which (corpus, tokenizer) pair (the lab's `tokenized`
//! entries), or tokenizing (the runner).

use std::ops::Range;

use glassbox_schemas::{Blake3Hash, BlobHash};

use crate::error::DataError;

/// One document, encoded: what a tokenizer gives and a shard takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedDocument {
    /// Token ids, the end-of-document token last.
    pub ids: Vec<u32>,
    /// Source bytes each token stands for (same length as `ids`; they add up to the
    /// document's length).
    pub bytes: Vec<u32>,
}

/// The first 8 bytes of every shard.
pub const MAGIC: &[u8; 8] = b"GBSHARD1";

/// Header size.
pub const HEADER_BYTES: usize = 112;

/// The byte count that sends a reader to the long-token table.
const LONG: u8 = 255;

/// A token shard in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenShard {
    corpus: BlobHash,
    tokenizer: BlobHash,
    vocab: u32,
    ids: Vec<u32>,
    counts: Vec<u8>,
    long: Vec<(u64, u64)>,
    doc_starts: Vec<u64>,
    text_bytes: u64,
}

impl TokenShard {
    /// An empty shard of `corpus` tokenized with `tokenizer` (vocabulary `vocab`).
    pub fn new(corpus: BlobHash, tokenizer: BlobHash, vocab: u32) -> Self {
        Self {
            corpus,
            tokenizer,
            vocab,
            ids: Vec::new(),
            counts: Vec::new(),
            long: Vec::new(),
            doc_starts: Vec::new(),
            text_bytes: 0,
        }
    }

    /// Appends one encoded document.
    pub fn push(&mut self, doc: &EncodedDocument) {
        self.doc_starts.push(self.ids.len() as u64);
        for (&id, &b) in doc.ids.iter().zip(&doc.bytes) {
            if b >= u32::from(LONG) {
                self.long.push((self.ids.len() as u64, u64::from(b)));
                self.counts.push(LONG);
            } else {
                self.counts.push(b as u8);
            }
            self.ids.push(id);
            self.text_bytes += u64::from(b);
        }
    }

    /// The corpus it tokenizes.
    pub fn corpus(&self) -> &BlobHash {
        &self.corpus
    }

    /// The tokenizer it was made with.
    pub fn tokenizer(&self) -> &BlobHash {
        &self.tokenizer
    }

    /// The tokenizer's vocabulary size.
    pub fn vocab(&self) -> u32 {
        self.vocab
    }

    /// Every token id, documents one after another.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether it has no tokens.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Number of documents.
    pub fn documents(&self) -> usize {
        self.doc_starts.len()
    }

    /// Source bytes of each token of `range`, in order.
    pub fn byte_counts(&self, range: Range<usize>) -> Vec<u64> {
        range.map(|i| self.bytes_of(i)).collect()
    }

    /// The tokens of document `d` (its end-of-document token included).
    pub fn document(&self, d: usize) -> Option<Range<usize>> {
        let start = *self.doc_starts.get(d)? as usize;
        let end = self
            .doc_starts
            .get(d + 1)
            .map_or(self.ids.len(), |&e| e as usize);
        Some(start..end)
    }

    /// UTF-8 bytes of text the shard covers.
    pub fn text_bytes(&self) -> u64 {
        self.text_bytes
    }

    /// Source bytes token `i` stands for.
    pub fn bytes_of(&self, i: usize) -> u64 {
        match self.counts[i] {
            LONG => self
                .long
                .binary_search_by_key(&(i as u64), |&(at, _)| at)
                .map_or(0, |k| self.long[k].1),
            b => u64::from(b),
        }
    }

    /// Source bytes the tokens in `range` stand for.
    pub fn bytes_in(&self, range: Range<usize>) -> u64 {
        let mut sum: u64 = 0;
        let mut long = false;
        for &b in &self.counts[range.clone()] {
            if b == LONG {
                long = true;
            } else {
                sum += u64::from(b);
            }
        }
        if long {
            let from = self
                .long
                .partition_point(|&(at, _)| (at as usize) < range.start);
            sum += self.long[from..]
                .iter()
                .take_while(|&&(at, _)| (at as usize) < range.end)
                .map(|&(_, b)| b)
                .sum::<u64>();
        }
        sum
    }

    /// Bytes per id in the layout: 2 when every id fits in 16 bits, else 4.
    fn id_width(&self) -> usize {
        if self.vocab <= 1 << 16 { 2 } else { 4 }
    }

    /// The shard's bytes (the layout in the module docs).
    pub fn to_bytes(&self) -> Vec<u8> {
        let w = self.id_width();
        let n = self.ids.len();
        let mut out = Vec::with_capacity(
            HEADER_BYTES + n * (w + 1) + self.long.len() * 16 + self.doc_starts.len() * 8,
        );
        out.extend_from_slice(MAGIC);
        out.push(w as u8);
        out.extend_from_slice(&[0; 3]);
        out.extend_from_slice(&self.vocab.to_le_bytes());
        for x in [
            n as u64,
            self.doc_starts.len() as u64,
            self.text_bytes,
            self.long.len() as u64,
        ] {
            out.extend_from_slice(&x.to_le_bytes());
        }
        out.extend_from_slice(self.corpus.0.as_bytes());
        out.extend_from_slice(self.tokenizer.0.as_bytes());
        for &id in &self.ids {
            if w == 2 {
                out.extend_from_slice(&(id as u16).to_le_bytes());
            } else {
                out.extend_from_slice(&id.to_le_bytes());
            }
        }
        out.extend_from_slice(&self.counts);
        for &(at, b) in &self.long {
            out.extend_from_slice(&at.to_le_bytes());
            out.extend_from_slice(&b.to_le_bytes());
        }
        for &s in &self.doc_starts {
            out.extend_from_slice(&s.to_le_bytes());
        }
        out
    }

    /// Streams a shard's ids from `reader` without holding the shard: reads the header, asks
    /// `take(tokens in the shard)` how many of the first ids to read, and calls `visit` with
    /// them a chunk at a time; returns the shard's token count. `what` names it in errors.
    pub fn stream_ids(
        mut reader: impl std::io::Read,
        what: &str,
        take: impl FnOnce(u64) -> u64,
        mut visit: impl FnMut(&[u32]),
    ) -> Result<u64, DataError> {
        let bad = |reason: String| DataError::Shard {
            what: what.into(),
            reason,
        };
        let mut header = [0u8; HEADER_BYTES];
        reader
            .read_exact(&mut header)
            .map_err(|e| bad(format!("its header cannot be read ({e})")))?;
        if &header[..8] != MAGIC {
            return Err(bad(format!(
                "does not start with the {HEADER_BYTES}-byte header of a glassbox token shard (\"GBSHARD1\")"
            )));
        }
        let w = header[8] as usize;
        if w != 2 && w != 4 {
            return Err(bad(format!("id width {w}; a shard's ids are 2 or 4 bytes")));
        }
        let n = u64::from_le_bytes(header[16..24].try_into().unwrap_or([0; 8]));
        let mut left = take(n).min(n);
        let mut buf = vec![0u8; 64 * 1024 * w];
        let mut ids = Vec::with_capacity(64 * 1024);
        while left > 0 {
            let count = (left as usize).min(64 * 1024);
            let bytes = &mut buf[..count * w];
            reader
                .read_exact(bytes)
                .map_err(|e| bad(format!("its ids cannot be read ({e})")))?;
            ids.clear();
            if w == 2 {
                ids.extend(
                    bytes
                        .chunks_exact(2)
                        .map(|c| u32::from(u16::from_le_bytes([c[0], c[1]]))),
                );
            } else {
                ids.extend(
                    bytes
                        .chunks_exact(4)
                        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
                );
            }
            visit(&ids);
            left -= count as u64;
        }
        Ok(n)
    }

    /// Reads a shard's bytes; `what` names it in errors.
    pub fn from_bytes(bytes: &[u8], what: &str) -> Result<Self, DataError> {
        let bad = |reason: String| DataError::Shard {
            what: what.into(),
            reason,
        };
        if bytes.len() < HEADER_BYTES || &bytes[..8] != MAGIC {
            return Err(bad(format!(
                "does not start with the {HEADER_BYTES}-byte header of a glassbox token shard (\"GBSHARD1\")"
            )));
        }
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or([0; 8]));
        let w = bytes[8] as usize;
        if w != 2 && w != 4 {
            return Err(bad(format!("id width {w}; a shard's ids are 2 or 4 bytes")));
        }
        let vocab = u32::from_le_bytes(bytes[12..16].try_into().unwrap_or([0; 4]));
        let (n, d, text_bytes, k) = (u64_at(16), u64_at(24), u64_at(32), u64_at(40));
        let hash_at = |at: usize| {
            let mut h = [0u8; 32];
            h.copy_from_slice(&bytes[at..at + 32]);
            BlobHash(Blake3Hash::from_bytes(h))
        };
        let (corpus, tokenizer) = (hash_at(48), hash_at(80));
        let expected = (n as u128) * (w as u128 + 1) + (k as u128) * 16 + (d as u128) * 8;
        if HEADER_BYTES as u128 + expected != bytes.len() as u128 {
            return Err(bad(format!(
                "is {} bytes; its header ({n} tokens, {k} long tokens, {d} documents, {w}-byte ids) says {}",
                bytes.len(),
                HEADER_BYTES as u128 + expected
            )));
        }
        let n = n as usize;
        let mut at = HEADER_BYTES;
        let ids: Vec<u32> = if w == 2 {
            bytes[at..at + 2 * n]
                .chunks_exact(2)
                .map(|c| u32::from(u16::from_le_bytes([c[0], c[1]])))
                .collect()
        } else {
            bytes[at..at + 4 * n]
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        };
        at += w * n;
        if let Some((i, id)) = ids.iter().enumerate().find(|(_, id)| **id >= vocab) {
            return Err(bad(format!(
                "token {i} is id {id}, not below the vocabulary size {vocab}"
            )));
        }
        let counts = bytes[at..at + n].to_vec();
        at += n;
        let mut long = Vec::with_capacity(k as usize);
        for j in 0..k as usize {
            long.push((u64_at(at + 16 * j), u64_at(at + 16 * j + 8)));
        }
        at += 16 * k as usize;
        let doc_starts: Vec<u64> = (0..d as usize).map(|j| u64_at(at + 8 * j)).collect();
        let shard = Self {
            corpus,
            tokenizer,
            vocab,
            ids,
            counts,
            long,
            doc_starts,
            text_bytes,
        };
        shard.check().map_err(bad)?;
        Ok(shard)
    }

    /// The consistency rules of the layout.
    fn check(&self) -> Result<(), String> {
        let n = self.ids.len() as u64;
        let long_marks = self.counts.iter().filter(|&&b| b == LONG).count();
        if long_marks != self.long.len()
            || self.long.windows(2).any(|p| p[0].0 >= p[1].0)
            || self
                .long
                .iter()
                .any(|&(at, b)| at >= n || b < u64::from(LONG) || self.counts[at as usize] != LONG)
        {
            return Err(
                "its long-token table does not match the tokens marked 255, by ascending index"
                    .into(),
            );
        }
        let total = self.bytes_in(0..self.ids.len());
        if total != self.text_bytes {
            return Err(format!(
                "its tokens' byte counts add up to {total}, not the {} text bytes in its header",
                self.text_bytes
            ));
        }
        if self.doc_starts.first().is_some_and(|&s| s != 0)
            || self.doc_starts.windows(2).any(|p| p[0] >= p[1])
            || self.doc_starts.last().is_some_and(|&s| s >= n)
        {
            return Err("its document starts do not ascend from 0 within its tokens".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(ids: &[u32], bytes: &[u32]) -> EncodedDocument {
        EncodedDocument {
            ids: ids.to_vec(),
            bytes: bytes.to_vec(),
        }
    }

    fn sample(vocab: u32) -> TokenShard {
        let mut s = TokenShard::new(
            BlobHash(Blake3Hash::of(b"corpus")),
            BlobHash(Blake3Hash::of(b"tok")),
            vocab,
        );
        s.push(&doc(&[5, 6, 0], &[3, 300, 0]));
        s.push(&doc(&[7, 0], &[1, 2]));
        s.push(&doc(&[vocab - 1, 0], &[70_000, 0]));
        s
    }

    #[test]
    fn round_trips_at_both_widths_and_counts_bytes_exactly() {
        for vocab in [300, 100_000] {
            let s = sample(vocab);
            let bytes = s.to_bytes();
            let width = if vocab <= 65_536 { 2 } else { 4 };
            assert_eq!(bytes.len(), HEADER_BYTES + 7 * (width + 1) + 2 * 16 + 3 * 8);
            let back = TokenShard::from_bytes(&bytes, "s").unwrap();
            assert_eq!(back, s);
            assert_eq!(back.text_bytes(), 3 + 300 + 1 + 2 + 70_000);
            assert_eq!(back.bytes_in(1..4), 300 + 1);
            assert_eq!(back.bytes_in(5..6), 70_000);
            assert_eq!(back.bytes_of(1), 300);
            assert_eq!(back.document(1), Some(3..5));
            assert_eq!(back.document(2), Some(5..7));
            assert_eq!(back.document(3), None);
        }
    }

    #[test]
    fn malformed_shards_are_refused_with_the_reason() {
        let good = sample(300).to_bytes();
        let err = |b: &[u8]| {
            TokenShard::from_bytes(b, "blake3:ab")
                .unwrap_err()
                .to_string()
        };
        assert!(err(b"nope").contains("does not start with"));
        assert!(
            err(&good[..good.len() - 1])
                .contains("its header (7 tokens, 2 long tokens, 3 documents, 2-byte ids) says")
        );
        let mut big_id = good.clone();
        big_id[HEADER_BYTES..HEADER_BYTES + 2].copy_from_slice(&400u16.to_le_bytes());
        assert_eq!(
            err(&big_id),
            "token shard blake3:ab: token 0 is id 400, not below the vocabulary size 300"
        );
        let mut count = good.clone();
        count[HEADER_BYTES + 14] = 4;
        assert!(
            err(&count).contains("add up to 70307, not the 70306 text bytes"),
            "{}",
            err(&count)
        );
    }
}
