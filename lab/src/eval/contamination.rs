//! Train/test overlap: which of a suite's items share an n-gram of [`CONTAMINATION_NGRAM`]
//! tokens (in the run's tokenization) with what the run trained on.
//!
//! The suite is the small side, so its n-grams are held (a hash of each, with where it is) and
//! the training data streams past them once, in the run's tokens, with a rolling hash: a stored
//! corpus's training split is read from its blob a chunk at a time (its bytes, or its token
//! shard's ids), never held whole; a generator domain's rows are the exact windows the run drew
//! over all its steps ([`generated_rows`]). A hash match is confirmed against the item's
//! tokens, so a collision never flags an item. Memory is bounded by the suite, not the corpus.
//!
//! An item's text is its `text`, or a multiple-choice item's context followed by its answer.
//! Not here: scoring (`super::score`).

use std::collections::{BTreeMap, HashMap};
use std::io::Read;

use glassbox_corpus::TokenShard;
use glassbox_runner::data::generated_rows;
use glassbox_schemas::eval::{CONTAMINATION_NGRAM, FLAGGED_LISTED, SuiteItem, encode_pair};
use glassbox_schemas::record::Contamination;
use glassbox_schemas::spec::ExperimentSpec;

use crate::error::LabError;
use crate::recorder::Recorder;
use crate::trained::TrainedModel;

/// The rolling hash's base (odd, so multiplication is invertible mod 2^64).
const BASE: u64 = 0x100_0000_01b3;

/// The n-grams of a suite, and which items hold each.
struct SuiteGrams {
    /// Each item's tokens.
    tokens: Vec<Vec<u32>>,
    /// Hash of an n-gram -> (item, offset) of each place it starts.
    at: HashMap<u64, Vec<(u32, u32)>>,
    /// `BASE^(n-1)`, to roll the oldest token out.
    top: u64,
    n: usize,
}

fn hash_of(window: impl Iterator<Item = u32>) -> u64 {
    window.fold(0u64, |h, t| {
        h.wrapping_mul(BASE).wrapping_add(u64::from(t) + 1)
    })
}

impl SuiteGrams {
    fn new(tokens: Vec<Vec<u32>>, n: usize) -> Self {
        let mut at: HashMap<u64, Vec<(u32, u32)>> = HashMap::new();
        for (i, t) in tokens.iter().enumerate() {
            for off in 0..t.len().saturating_sub(n - 1) {
                at.entry(hash_of(t[off..off + n].iter().copied()))
                    .or_default()
                    .push((i as u32, off as u32));
            }
        }
        let top = (1..n).fold(1u64, |p, _| p.wrapping_mul(BASE));
        Self { tokens, at, top, n }
    }
}

/// A rolling window over one stream of training tokens, flagging the items it meets.
struct Scanner<'g> {
    grams: &'g SuiteGrams,
    ring: Vec<u32>,
    filled: usize,
    head: usize,
    hash: u64,
    flagged: &'g mut [bool],
}

impl<'g> Scanner<'g> {
    fn new(grams: &'g SuiteGrams, flagged: &'g mut [bool]) -> Self {
        Self {
            grams,
            ring: vec![0; grams.n],
            filled: 0,
            head: 0,
            hash: 0,
            flagged,
        }
    }

    fn push(&mut self, token: u32) {
        let n = self.grams.n;
        if self.filled == n {
            let old = self.ring[self.head];
            self.hash = self
                .hash
                .wrapping_sub((u64::from(old) + 1).wrapping_mul(self.grams.top));
        } else {
            self.filled += 1;
        }
        self.ring[self.head] = token;
        self.head = (self.head + 1) % n;
        self.hash = self
            .hash
            .wrapping_mul(BASE)
            .wrapping_add(u64::from(token) + 1);
        if self.filled < n {
            return;
        }
        if let Some(places) = self.grams.at.get(&self.hash) {
            for &(item, off) in places {
                if self.flagged[item as usize] {
                    continue;
                }
                let want = &self.grams.tokens[item as usize][off as usize..off as usize + n];
                let same = (0..n).all(|j| self.ring[(self.head + j) % n] == want[j]);
                if same {
                    self.flagged[item as usize] = true;
                }
            }
        }
    }
}

/// An item's text as the check reads it.
fn item_text(item: &SuiteItem) -> String {
    match item {
        SuiteItem::Text { text } => text.clone(),
        SuiteItem::Choice {
            context,
            choices,
            answer,
        } => {
            let (c, a) = encode_pair(context, &choices[*answer as usize]);
            format!("{c}{a}")
        }
    }
}

/// The suite's items against everything `model`'s run trained on; the figure and, for each
/// item, whether it is flagged.
pub fn check(
    rec: &Recorder,
    model: &TrainedModel,
    items: &[SuiteItem],
) -> Result<(Contamination, Vec<bool>), LabError> {
    let n = CONTAMINATION_NGRAM as usize;
    let tokens = items
        .iter()
        .map(|i| Ok(model.codec.encode(&item_text(i))?.0))
        .collect::<Result<Vec<_>, LabError>>()?;
    let too_short = tokens.iter().filter(|t| t.len() < n).count() as u64;
    let grams = SuiteGrams::new(tokens, n);
    let mut flagged = vec![false; items.len()];
    let checked = scan_training_data(rec, &model.spec, model, &grams, &mut flagged)?;
    let count = flagged.iter().filter(|f| **f).count() as u64;
    let first = flagged
        .iter()
        .enumerate()
        .filter(|(_, f)| **f)
        .take(FLAGGED_LISTED)
        .map(|(i, _)| i as u64)
        .collect();
    Ok((
        Contamination {
            ngram: CONTAMINATION_NGRAM,
            flagged: count,
            fraction: if items.is_empty() {
                0.0
            } else {
                count as f64 / items.len() as f64
            },
            too_short,
            first_flagged: first,
            tokens_checked: checked,
        },
        flagged,
    ))
}

/// Streams each domain's training tokens past the suite's n-grams; tokens read per domain.
fn scan_training_data(
    rec: &Recorder,
    spec: &ExperimentSpec,
    model: &TrainedModel,
    grams: &SuiteGrams,
    flagged: &mut [bool],
) -> Result<BTreeMap<String, u64>, LabError> {
    let mut checked = BTreeMap::new();
    let heldout = spec.data.heldout_fraction;
    for comp in &spec.data.mixture {
        let Some(corpus) = comp.corpus else { continue };
        let mut count = 0u64;
        match spec.data.tokenizer.stored() {
            None => {
                let size = rec.blobs().size(&corpus)?.ok_or_else(|| {
                    LabError::Refused(format!("corpus {corpus} is not in the blob store"))
                })?;
                let held = ((size as f64) * heldout).ceil() as u64;
                let split = size.saturating_sub(held);
                let mut reader = rec.blobs().get(&corpus)?.take(split);
                let mut buf = vec![0u8; 1 << 16];
                let mut s = Scanner::new(grams, &mut *flagged);
                loop {
                    let got = reader.read(&mut buf).map_err(|e| {
                        LabError::Refused(format!("corpus {corpus} cannot be read: {e}"))
                    })?;
                    if got == 0 {
                        break;
                    }
                    for &b in &buf[..got] {
                        s.push(u32::from(b));
                    }
                    count += got as u64;
                }
            }
            Some(_) => {
                let shard = model
                    .record
                    .started
                    .data
                    .as_ref()
                    .and_then(|d| d.shards.get(&comp.domain))
                    .copied()
                    .ok_or_else(|| {
                        LabError::Refused(format!(
                            "run {}'s record names no token shard for domain {}",
                            model.run, comp.domain
                        ))
                    })?;
                let reader = rec.blobs().get(&shard)?;
                let mut s = Scanner::new(grams, &mut *flagged);
                TokenShard::stream_ids(
                    reader,
                    &shard.to_string(),
                    |n| {
                        let held = ((n as f64) * heldout).ceil() as u64;
                        n.saturating_sub(held)
                    },
                    |ids| {
                        for &t in ids {
                            s.push(t);
                        }
                        count += ids.len() as u64;
                    },
                )?;
            }
        }
        *checked.entry(comp.domain.clone()).or_insert(0) += count;
    }
    // Generator domains: each row the run drew is a stream of its own.
    let mut rows: BTreeMap<usize, u64> = BTreeMap::new();
    generated_rows(spec, spec.train.steps, |d, bytes| {
        let mut s = Scanner::new(grams, &mut *flagged);
        for &b in bytes {
            s.push(u32::from(b));
        }
        *rows.entry(d).or_insert(0) += bytes.len() as u64;
    });
    for (d, count) in rows {
        *checked
            .entry(spec.data.mixture[d].domain.clone())
            .or_insert(0) += count;
    }
    Ok(checked)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(grams: &SuiteGrams, stream: &[u32], flagged: &mut [bool]) {
        let mut s = Scanner::new(grams, flagged);
        for &t in stream {
            s.push(t);
        }
    }

    #[test]
    fn an_item_is_flagged_exactly_when_one_of_its_ngrams_streams_past() {
        let items: Vec<Vec<u32>> = vec![
            (0..20).collect(),
            (100..120).collect(),
            (200..205).collect(), // too short for a 13-gram
        ];
        let grams = SuiteGrams::new(items, 13);
        let mut flagged = vec![false; 3];
        // The first item's tokens 5..18 inside noise; of the second, a 12-token run only.
        let mut stream: Vec<u32> = vec![7, 7, 7];
        stream.extend(5..18);
        stream.extend([9, 9]);
        stream.extend(100..112);
        stream.extend(200..205);
        scan(&grams, &stream, &mut flagged);
        assert_eq!(flagged, vec![true, false, false]);
        let mut again = vec![false; 3];
        scan(&grams, &(100..113).collect::<Vec<_>>(), &mut again);
        assert_eq!(again, vec![false, true, false]);
    }
}
