//! Training and evaluation data: content-addressed corpora behind [`CorpusStore`], documents
//! out of text, JSONL and Parquet files ([`documents`]), stored tokenizers ([`tokenizer`]),
//! token shards ([`shard`]), built-in generators ([`markov`]), and the mixture sampler.
//!
//! Sampling is a pure function of (seed, step): row `r` of step `s` draws its domain and its
//! window from the stream `derive([seed, TRAIN, s, r])`, so resuming at step `s` needs no saved
//! generator state, and any batch can be recomputed by anyone. A row is one domain's window of
//! `seq_len` tokens, so a domain's weight over the sum of weights is the expected fraction of
//! training tokens it gives; the tokens each domain actually gave are counted
//! ([`DataPipeline::tokens_by_domain`]). Held-out data per domain: for a corpus, the last
//! `heldout_fraction` of its bytes (or of its shard's tokens; training windows never touch
//! them); for a generator, a separate seeded stream (`derive([generator seed, EVAL, batch,
//! row])`).
//!
//! Tokenizers: `bytes` (token = byte value, vocab 256: nats per token / ln 2 = bits per byte),
//! or a stored one, whose corpora come as token shards in which every token carries the number
//! of source bytes it stands for, so bits per byte = the targets' summed NLL / ln 2 over their
//! summed bytes, exactly. Not here: where corpora and shards come from (the lab implements
//! [`CorpusStore`] over its blob store and ledger).

pub mod markov;
pub mod tokenizer;

/// The corpus formats (documents out of raw files, the token-shard layout), from
/// `glassbox-corpus`, which the dashboard reads too.
pub use glassbox_corpus::{documents, error, shard};

use std::path::{Path, PathBuf};
use std::sync::Arc;

use glassbox_schemas::BlobHash;
use glassbox_schemas::data::RunData;
use glassbox_schemas::spec::{ExperimentSpec, GeneratorKind};

use crate::error::RunnerError;
use crate::rng::{SplitMix64, derive};

pub use error::DataError;
pub use markov::MarkovSource;
pub use shard::TokenShard;
pub use tokenizer::TextTokenizer;

/// Stream key of training batches.
const TRAIN: u64 = 0x5452_4149; // "TRAI"
/// Stream key of held-out batches.
const EVAL: u64 = 0x4556_414c; // "EVAL"

/// Where corpora live, by the BLAKE3 of their bytes. The lab's blob store implements it later;
/// [`DirCorpusStore`] is the directory form.
pub trait CorpusStore: Send + Sync {
    /// The bytes of corpus `hash`, verified against the hash.
    fn load(&self, hash: &BlobHash) -> Result<Arc<Vec<u8>>, RunnerError>;

    /// The token shard of `corpus` tokenized with `tokenizer`, and its hash, verified against
    /// the hash. A store without shards says so.
    fn token_shard(
        &self,
        corpus: &BlobHash,
        tokenizer: &BlobHash,
    ) -> Result<(BlobHash, Arc<TokenShard>), RunnerError> {
        Err(RunnerError::ShardMissing {
            corpus: corpus.to_string(),
            tokenizer: tokenizer.to_string(),
        })
    }
}

/// Corpora in a directory laid out like the blob store: `<root>/<first 2 hex>/<other 62 hex>`.
#[derive(Debug, Clone)]
pub struct DirCorpusStore {
    root: PathBuf,
}

impl DirCorpusStore {
    /// A store rooted at `root` (created on first [`DirCorpusStore::put`]).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    fn path(&self, hex: &str) -> PathBuf {
        self.root.join(&hex[..2]).join(&hex[2..])
    }

    /// Store `bytes`, returning their hash (temp file, fsync, rename).
    pub fn put(&self, bytes: &[u8]) -> Result<BlobHash, RunnerError> {
        let hash = BlobHash(glassbox_schemas::Blake3Hash::of(bytes));
        let hex = hash.0.to_hex();
        let path = self.path(&hex);
        if path.exists() {
            return Ok(hash);
        }
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)
            .map_err(|e| RunnerError::io(format!("create {}", dir.display()), e))?;
        let tmp = dir.join(format!(".{}.tmp", &hex[2..]));
        {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp)
                .map_err(|e| RunnerError::io(format!("create {}", tmp.display()), e))?;
            f.write_all(bytes)
                .and_then(|_| f.sync_all())
                .map_err(|e| RunnerError::io(format!("write {}", tmp.display()), e))?;
        }
        std::fs::rename(&tmp, &path)
            .map_err(|e| RunnerError::io(format!("rename to {}", path.display()), e))?;
        Ok(hash)
    }
}

impl CorpusStore for DirCorpusStore {
    fn load(&self, hash: &BlobHash) -> Result<Arc<Vec<u8>>, RunnerError> {
        let hex = hash.0.to_hex();
        let path = self.path(&hex);
        let bytes = std::fs::read(&path).map_err(|_| RunnerError::CorpusMissing {
            hash: hash.to_string(),
            dir: self.root.clone(),
        })?;
        let actual = glassbox_schemas::Blake3Hash::of(&bytes);
        if actual != hash.0 {
            return Err(RunnerError::CorpusCorrupt {
                hash: hash.to_string(),
                path,
                actual: actual.to_string(),
            });
        }
        Ok(Arc::new(bytes))
    }
}

/// Where a domain's bytes come from.
#[derive(Debug, Clone)]
pub enum Source {
    /// A stored corpus: training windows from `bytes[..split]`, held-out from `bytes[split..]`.
    Corpus {
        /// The corpus bytes.
        bytes: Arc<Vec<u8>>,
        /// First held-out byte.
        split: usize,
    },
    /// A built-in Markov source.
    Markov(MarkovSource),
    /// A corpus as a token shard: training windows from tokens `[..split]`, held-out from
    /// `[split..]`.
    Tokens {
        /// The shard.
        shard: Arc<TokenShard>,
        /// Its hash.
        hash: BlobHash,
        /// First held-out token.
        split: usize,
    },
}

/// The domain (of those with `weights`, summing to `total`) that row `r` of `step` draws from,
/// and the row's stream positioned after the draw: the one rule every training batch follows.
fn draw_row(
    seed: u64,
    weights: impl ExactSizeIterator<Item = f64>,
    total: f64,
    step: u64,
    r: usize,
) -> (usize, SplitMix64) {
    let mut rng = SplitMix64::new(derive(&[seed, TRAIN, step, r as u64]));
    let mut u = rng.next_f64() * total;
    let mut di = weights.len() - 1;
    for (i, w) in weights.enumerate() {
        if u < w {
            di = i;
            break;
        }
        u -= w;
    }
    (di, rng)
}

/// The training rows a spec's generator domains gave over its first `steps` steps, without
/// loading any stored corpus: `visit(the domain's index in the mixture, the row's
/// seq_len + 1 bytes)`, exactly the windows [`DataPipeline::train_batch`] draws.
pub fn generated_rows(spec: &ExperimentSpec, steps: u64, mut visit: impl FnMut(usize, &[u8])) {
    let mixture = &spec.data.mixture;
    let sources: Vec<Option<MarkovSource>> = mixture
        .iter()
        .map(|c| match (&c.corpus, &c.generator) {
            (None, Some(g)) => match g.kind {
                GeneratorKind::Markov => Some(MarkovSource::new(g)),
            },
            _ => None,
        })
        .collect();
    if sources.iter().all(Option::is_none) || mixture.is_empty() {
        return;
    }
    let total: f64 = mixture.iter().map(|c| c.weight).sum();
    let seq = spec.model.seq_len as usize;
    for step in 0..steps {
        for r in 0..spec.train.batch_size as usize {
            let (di, mut rng) = draw_row(
                spec.train.seed,
                mixture.iter().map(|c| c.weight),
                total,
                step,
                r,
            );
            if let Some(m) = &sources[di] {
                visit(di, &m.sample(rng.next_u64(), seq + 1));
            }
        }
    }
}

/// One mixture domain.
#[derive(Debug, Clone)]
pub struct Domain {
    /// Name (metric names use it).
    pub name: String,
    /// Relative weight.
    pub weight: f64,
    /// The bytes.
    pub source: Source,
    /// Seed of the generator's streams (generators only).
    generator_seed: u64,
}

impl Domain {
    /// Known entropy floor in bits per byte, for synthetic domains.
    pub fn entropy_bits_per_byte(&self) -> Option<f64> {
        match &self.source {
            Source::Markov(m) => Some(m.entropy_bits_per_byte()),
            Source::Corpus { .. } | Source::Tokens { .. } => None,
        }
    }
}

/// One batch: `tokens` and next-token `targets`, both `[B*T]`, row-major.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// Inputs.
    pub tokens: Vec<u32>,
    /// Targets (inputs shifted by one).
    pub targets: Vec<u32>,
    /// Source bytes the targets stand for (one per target for bytes and generators).
    pub target_bytes: u64,
    /// The domain of each row.
    pub row_domains: Vec<usize>,
}

/// One row's window: its tokens (`seq_len + 1`) and the bytes its targets stand for.
struct Window {
    tokens: Vec<u32>,
    target_bytes: u64,
}

/// The mixture sampler of a spec.
#[derive(Debug, Clone)]
pub struct DataPipeline {
    /// Domains in spec order.
    pub domains: Vec<Domain>,
    seed: u64,
    batch: usize,
    seq: usize,
    total_weight: f64,
}

impl DataPipeline {
    /// Resolve a spec's mixture, loading corpora from `store`.
    pub fn new(spec: &ExperimentSpec, store: &dyn CorpusStore) -> Result<Self, RunnerError> {
        let seq = spec.model.seq_len as usize;
        let tokenizer = spec.data.tokenizer;
        let mut domains = Vec::new();
        // A corpus named by several domains is loaded (and held) once.
        let mut loaded: Vec<(BlobHash, Arc<Vec<u8>>)> = Vec::new();
        for comp in &spec.data.mixture {
            let (source, generator_seed) = match (&comp.corpus, &comp.generator) {
                (Some(hash), _) if tokenizer.stored().is_some() => {
                    let tok = tokenizer.stored().copied().unwrap_or(*hash);
                    let (shard_hash, shard) = store.token_shard(hash, &tok)?;
                    if shard.vocab() != spec.model.vocab {
                        return Err(RunnerError::Unsupported {
                            field: "model.vocab",
                            value: spec.model.vocab.to_string(),
                            fix: format!(
                                "the tokenizer {tok} has {} tokens (added tokens included); set model.vocab = {}",
                                shard.vocab(),
                                shard.vocab()
                            ),
                        });
                    }
                    let held = ((shard.len() as f64) * spec.data.heldout_fraction).ceil() as usize;
                    let split = shard.len().saturating_sub(held);
                    if split < seq + 1 || shard.len() - split < seq + 1 {
                        return Err(RunnerError::CorpusTooSmall {
                            domain: comp.domain.clone(),
                            bytes: shard.len(),
                            needed: ((seq + 1) as f64 / spec.data.heldout_fraction).ceil() as usize,
                            unit: "tokens",
                        });
                    }
                    (
                        Source::Tokens {
                            shard,
                            hash: shard_hash,
                            split,
                        },
                        0,
                    )
                }
                (Some(hash), _) => {
                    let bytes = match loaded.iter().find(|(h, _)| h == hash) {
                        Some((_, bytes)) => bytes.clone(),
                        None => {
                            let bytes = store.load(hash)?;
                            loaded.push((*hash, bytes.clone()));
                            bytes
                        }
                    };
                    let held = ((bytes.len() as f64) * spec.data.heldout_fraction).ceil() as usize;
                    let split = bytes.len().saturating_sub(held);
                    if split < seq + 1 || bytes.len() - split < seq + 1 {
                        return Err(RunnerError::CorpusTooSmall {
                            domain: comp.domain.clone(),
                            bytes: bytes.len(),
                            needed: ((seq + 1) as f64 / spec.data.heldout_fraction).ceil() as usize,
                            unit: "bytes",
                        });
                    }
                    (Source::Corpus { bytes, split }, 0)
                }
                (None, Some(g)) => match g.kind {
                    GeneratorKind::Markov => (Source::Markov(MarkovSource::new(g)), g.seed),
                },
                (None, None) => {
                    return Err(RunnerError::Unsupported {
                        field: "data.mixture.corpus",
                        value: comp.domain.clone(),
                        fix: "give a corpus hash or a generator".into(),
                    });
                }
            };
            domains.push(Domain {
                name: comp.domain.clone(),
                weight: comp.weight,
                source,
                generator_seed,
            });
        }
        let total_weight: f64 = domains.iter().map(|d| d.weight).sum();
        if total_weight.is_nan() || total_weight <= 0.0 {
            return Err(RunnerError::Unsupported {
                field: "data.mixture.weight",
                value: total_weight.to_string(),
                fix: "at least one domain needs a positive weight".into(),
            });
        }
        Ok(Self {
            domains,
            seed: spec.train.seed,
            batch: spec.train.batch_size as usize,
            seq,
            total_weight,
        })
    }

    /// The tokenizer and the exact shard of each token-shard domain, for the run's record;
    /// `None` with the bytes tokenizer.
    pub fn run_data(&self, spec: &ExperimentSpec) -> Option<RunData> {
        let tokenizer = *spec.data.tokenizer.stored()?;
        let shards = self
            .domains
            .iter()
            .filter_map(|d| match &d.source {
                Source::Tokens { hash, .. } => Some((d.name.clone(), *hash)),
                _ => None,
            })
            .collect();
        Some(RunData { tokenizer, shards })
    }

    /// The domain of row `r` of `step`, and the row's stream positioned after the draw.
    fn row_domain(&self, step: u64, r: usize) -> (usize, SplitMix64) {
        draw_row(
            self.seed,
            self.domains.iter().map(|d| d.weight),
            self.total_weight,
            step,
            r,
        )
    }

    /// Training tokens each domain gave over the first `steps` steps (recomputed from the
    /// seed: sampling is a pure function of (seed, step)).
    pub fn tokens_by_domain(&self, steps: u64) -> Vec<u64> {
        let mut out = vec![0u64; self.domains.len()];
        for s in 0..steps {
            for r in 0..self.batch {
                out[self.row_domain(s, r).0] += self.seq as u64;
            }
        }
        out
    }

    /// The training batch of `step` (a pure function of seed and step).
    pub fn train_batch(&self, step: u64) -> Batch {
        let mut windows = Vec::with_capacity(self.batch);
        let mut row_domains = Vec::with_capacity(self.batch);
        for r in 0..self.batch {
            let (di, mut rng) = self.row_domain(step, r);
            row_domains.push(di);
            let d = &self.domains[di];
            windows.push(match &d.source {
                Source::Corpus { bytes, split } => {
                    let off = rng.below((split - self.seq) as u64) as usize;
                    self.byte_window(&bytes[off..off + self.seq + 1])
                }
                Source::Markov(m) => self.byte_window(&m.sample(rng.next_u64(), self.seq + 1)),
                Source::Tokens { shard, split, .. } => {
                    let off = rng.below((split - self.seq) as u64) as usize;
                    self.token_window(shard, off)
                }
            });
        }
        self.assemble(&windows, row_domains)
    }

    /// Held-out batch `i` of domain `d` (a pure function of the spec).
    pub fn eval_batch(&self, d: usize, i: u64) -> Batch {
        let dom = &self.domains[d];
        let mut windows = Vec::with_capacity(self.batch);
        for r in 0..self.batch {
            windows.push(match &dom.source {
                Source::Corpus { bytes, split } => {
                    let mut rng =
                        SplitMix64::new(derive(&[self.seed, EVAL, d as u64, i, r as u64]));
                    let span = bytes.len() - split - self.seq;
                    let off = split + rng.below(span as u64) as usize;
                    self.byte_window(&bytes[off..off + self.seq + 1])
                }
                Source::Markov(m) => self.byte_window(&m.sample(
                    derive(&[dom.generator_seed, EVAL, i, r as u64]),
                    self.seq + 1,
                )),
                Source::Tokens { shard, split, .. } => {
                    let mut rng =
                        SplitMix64::new(derive(&[self.seed, EVAL, d as u64, i, r as u64]));
                    let span = shard.len() - split - self.seq;
                    let off = split + rng.below(span as u64) as usize;
                    self.token_window(shard, off)
                }
            });
        }
        self.assemble(&windows, vec![d; self.batch])
    }

    /// A window of bytes: one token, and one byte, per symbol.
    fn byte_window(&self, w: &[u8]) -> Window {
        Window {
            tokens: w.iter().map(|&b| u32::from(b)).collect(),
            target_bytes: self.seq as u64,
        }
    }

    /// The shard's tokens `[off, off + seq + 1)`; the targets are `[off + 1, off + seq + 1)`.
    fn token_window(&self, shard: &TokenShard, off: usize) -> Window {
        Window {
            tokens: shard.ids()[off..off + self.seq + 1].to_vec(),
            target_bytes: shard.bytes_in(off + 1..off + self.seq + 1),
        }
    }

    fn assemble(&self, windows: &[Window], row_domains: Vec<usize>) -> Batch {
        let mut tokens = Vec::with_capacity(self.batch * self.seq);
        let mut targets = Vec::with_capacity(self.batch * self.seq);
        let mut target_bytes = 0;
        for w in windows {
            tokens.extend_from_slice(&w.tokens[..self.seq]);
            targets.extend_from_slice(&w.tokens[1..]);
            target_bytes += w.target_bytes;
        }
        Batch {
            tokens,
            targets,
            target_bytes,
            row_domains,
        }
    }
}
