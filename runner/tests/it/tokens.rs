//! Training on token shards: exact bits per byte against a hand-computed case, the vocab check
//! against the tokenizer, and the per-domain token accounting (`data/<domain>/tokens`) that
//! survives a resume.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use glassbox_runner::backend::cpu::CpuBackend;
use glassbox_runner::data::tokenizer::EncodedDocument;
use glassbox_runner::data::{CorpusStore, DataPipeline, DirCorpusStore, TokenShard};
use glassbox_runner::error::RunnerError;
use glassbox_runner::observer::{MetricRecord, Observer, RecordKind};
use glassbox_runner::train::{Peak, RunOptions, Trainer};
use glassbox_schemas::metrics as mn;
use glassbox_schemas::{Blake3Hash, BlobHash, ExperimentSpec};

/// A store holding one shard for any (corpus, tokenizer).
struct OneShard(Arc<TokenShard>);

impl CorpusStore for OneShard {
    fn load(&self, hash: &BlobHash) -> Result<Arc<Vec<u8>>, RunnerError> {
        Err(RunnerError::CorpusMissing {
            hash: hash.to_string(),
            dir: "nowhere".into(),
        })
    }
    fn token_shard(
        &self,
        _corpus: &BlobHash,
        _tokenizer: &BlobHash,
    ) -> Result<(BlobHash, Arc<TokenShard>), RunnerError> {
        Ok((BlobHash(Blake3Hash::of(&self.0.to_bytes())), self.0.clone()))
    }
}

fn opts(out: Option<std::path::PathBuf>, resume: Option<std::path::PathBuf>) -> RunOptions {
    RunOptions {
        out_dir: out,
        resume,
        peak: Peak {
            flops_per_second: 1e11,
            label: "fixed test peak".into(),
        },
        cancel: Arc::new(AtomicBool::new(false)),
        wall_limit: None,
    }
}

#[derive(Default)]
struct Collect(Vec<MetricRecord>);

impl Observer for Collect {
    fn on_metrics(&mut self, r: &MetricRecord) {
        self.0.push(r.clone());
    }
}

fn shard_spec(vocab: u32, tokenizer: &BlobHash) -> ExperimentSpec {
    let text = format!(
        r#"
[experiment]
name = "bpb"
slug = "bpb-by-hand"
hypothesis = "Bits per byte over a token shard is the targets' NLL over their bytes."
[model]
vocab = {vocab}
d_model = 8
n_layers = 1
n_heads = 2
seq_len = 4
[model.moe]
n_experts = 2
top_k = 1
d_expert = 8
[data]
tokenizer = "{tokenizer}"
heldout_fraction = 0.5
[[data.mixture]]
domain = "text"
corpus = "{corpus}"
[train]
steps = 1
batch_size = 1
lr = 0.001
eval_batches = 1
"#,
        corpus = BlobHash(Blake3Hash::of(b"corpus"))
    );
    glassbox_schemas::parse_toml(&text).expect("valid test spec")
}

/// Ten tokens in three documents (id/bytes): `1/3 2/1 3/2 0/0 | 4/5 5/2 0/1 | 6/300 7/2 0/0`.
fn hand_shard() -> TokenShard {
    let mut s = TokenShard::new(
        BlobHash(Blake3Hash::of(b"corpus")),
        BlobHash(Blake3Hash::of(b"tokenizer")),
        8,
    );
    for (ids, bytes) in [
        (vec![1, 2, 3, 0], vec![3, 1, 2, 0]),
        (vec![4, 5, 0], vec![5, 2, 1]),
        (vec![6, 7, 0], vec![300, 2, 0]),
    ] {
        s.push(&EncodedDocument { ids, bytes });
    }
    s
}

/// With every parameter zero the logits are all zero, so each target's NLL is ln 8 nats =
/// 3 bits. Held out (fraction 0.5) are tokens 5..10, exactly one window of seq_len + 1 = 5, so
/// the eval targets are tokens 6..10 (`0/1 6/300 7/2 0/0`): 4 targets x 3 bits = 12 bits over
/// 1 + 300 + 2 + 0 = 303 bytes. Bytes-per-target would say 3 bits per byte instead.
#[test]
fn eval_bits_per_byte_is_exact_for_a_hand_computed_shard() {
    let shard = hand_shard();
    let spec = shard_spec(8, shard.tokenizer());
    let store = OneShard(Arc::new(shard));
    let data = DataPipeline::new(&spec, &store).unwrap();
    let batch = data.eval_batch(0, 0);
    assert_eq!(batch.tokens, [5, 0, 6, 7]);
    assert_eq!(batch.targets, [0, 6, 7, 0]);
    assert_eq!(batch.target_bytes, 303);
    let be = CpuBackend::<f32>::new(1).unwrap();
    let mut t = Trainer::new(&be, spec.clone(), data, &opts(None, None)).unwrap();
    for p in t.params_mut() {
        p.fill(0.0);
    }
    let ev = t.evaluate();
    let loss = ev[&mn::eval_loss("text")];
    let bpb = ev[&mn::eval_bpb("text")];
    // ln 8 through f32 logits: within 1e-6 relative of the exact value.
    assert!((loss - 8f64.ln()).abs() < 1e-6 * 8f64.ln(), "loss {loss}");
    let want = 12.0 / 303.0;
    assert!((bpb - want).abs() < 1e-6 * want, "bpb {bpb}, want {want}");
}

#[test]
fn a_vocab_that_disagrees_with_the_tokenizer_is_refused_with_the_fix() {
    let shard = hand_shard();
    let spec = shard_spec(9, shard.tokenizer());
    let err = DataPipeline::new(&spec, &OneShard(Arc::new(shard)))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("unsupported spec: model.vocab = 9: the tokenizer blake3:"),
        "{err}"
    );
    assert!(
        err.ends_with("has 8 tokens (added tokens included); set model.vocab = 8"),
        "{err}"
    );
    // A store without shards says what to do.
    let err = DataPipeline::new(&spec, &DirCorpusStore::new("/nonexistent"))
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("no token shard of corpus blake3:"), "{err}");
}

fn two_domains(steps: u64) -> ExperimentSpec {
    let text = format!(
        r#"
[experiment]
name = "accounting"
slug = "token-accounting"
hypothesis = "Each domain's consumed tokens are counted and survive a resume."
[model]
d_model = 16
n_layers = 1
n_heads = 2
seq_len = 8
[model.moe]
n_experts = 2
top_k = 1
d_expert = 16
[[data.mixture]]
domain = "big"
weight = 3
generator = {{ kind = "markov", seed = 1, order = 1, alphabet = 16, branching = 2 }}
[[data.mixture]]
domain = "small"
weight = 1
generator = {{ kind = "markov", seed = 2, order = 1, alphabet = 16, branching = 2 }}
[train]
steps = {steps}
batch_size = 8
lr = 0.001
eval_interval = 100
eval_batches = 1
checkpoint_interval = 3
"#
    );
    glassbox_schemas::parse_toml(&text).expect("valid test spec")
}

#[test]
fn tokens_per_domain_are_counted_and_survive_a_resume() {
    let spec = two_domains(6);
    let be = CpuBackend::<f32>::new(1).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = DirCorpusStore::new("/nonexistent");
    let data = DataPipeline::new(&spec, &store).unwrap();
    let want = data.tokens_by_domain(6);
    let o = opts(Some(dir.path().to_path_buf()), None);
    let mut t = Trainer::new(&be, spec.clone(), data, &o).unwrap();
    let mut c = Collect::default();
    t.run(&o, &mut c);
    let last =
        c.0.iter()
            .rev()
            .find(|r| r.kind == RecordKind::Train)
            .unwrap();
    let got = [
        last.scalars[&mn::data_tokens("big")],
        last.scalars[&mn::data_tokens("small")],
    ];
    assert_eq!(got, [want[0] as f64, want[1] as f64]);
    assert_eq!(got[0] + got[1], last.scalars[mn::TOTAL_TOKENS]);
    // 48 rows of 8 tokens, weights 3:1: "big" gave more, both gave some.
    assert!(want[0] > want[1] && want[1] > 0, "{want:?}");

    // Resumed from the step-3 checkpoint, the counts carry on from the seed.
    let ckpt = dir
        .path()
        .join("checkpoints")
        .join("step-00000003.safetensors");
    let o2 = opts(None, Some(ckpt));
    let data = DataPipeline::new(&spec, &store).unwrap();
    let mut t2 = Trainer::new(&be, spec.clone(), data, &o2).unwrap();
    let mut c2 = Collect::default();
    t2.run(&o2, &mut c2);
    let last2 =
        c2.0.iter()
            .rev()
            .find(|r| r.kind == RecordKind::Train)
            .unwrap();
    assert_eq!(last2.scalars[&mn::data_tokens("big")], got[0]);
    assert_eq!(last2.scalars[&mn::data_tokens("small")], got[1]);
}

/// A 32k vocabulary trains on the CPU backend: the embedding and output head are then most of
/// the parameters, and the FLOPs MFU is stated against count the head's matmul (`6 d V` per
/// token) but not the embedding lookup, which is a gather.
#[test]
fn a_32k_vocab_trains_on_the_cpu_and_counts_the_head_in_its_flops() {
    const V: u32 = 32_000;
    let mut shard = TokenShard::new(
        BlobHash(Blake3Hash::of(b"corpus")),
        BlobHash(Blake3Hash::of(b"tokenizer")),
        V,
    );
    // A corpus that repeats one 97-token document: learnable, so the loss falls.
    let doc: Vec<u32> = (0..96u32).map(|i| (i * 331 + 7) % (V - 1) + 1).collect();
    for _ in 0..40 {
        let mut ids = doc.clone();
        ids.push(0);
        let bytes = vec![3; ids.len()];
        shard.push(&EncodedDocument { ids, bytes });
    }
    let mut spec = shard_spec(V, shard.tokenizer());
    spec.model.seq_len = 32;
    spec.model.d_model = 16;
    spec.train.steps = 8;
    spec.train.batch_size = 4;
    spec.train.lr = 0.01;
    spec.train.eval_interval = 8;
    spec.data.heldout_fraction = 0.1;
    let data = DataPipeline::new(&spec, &OneShard(Arc::new(shard))).unwrap();
    let be = CpuBackend::<f32>::new(2).unwrap();
    let o = opts(None, None);
    let mut t = Trainer::new(&be, spec.clone(), data, &o).unwrap();
    let (_, _, nonembedding) = glassbox_schemas::cost::param_counts(&spec);
    let head = 16 * u64::from(V);
    assert!(nonembedding > head, "the head is counted as compute");
    assert!(
        t.info().params > 2 * head,
        "embedding and head are most of the model"
    );
    let mut c = Collect::default();
    let out = t.run(&o, &mut c);
    assert_eq!(out.ending.status, glassbox_schemas::RunStatus::Succeeded);
    let losses: Vec<f64> =
        c.0.iter()
            .filter(|r| r.kind == RecordKind::Train)
            .map(|r| r.scalars[mn::TRAIN_CROSS_ENTROPY])
            .collect();
    // Starts near ln V (10.37 nats) and falls.
    assert!((losses[0] - f64::from(V).ln()).abs() < 0.5, "{losses:?}");
    assert!(losses[7] < losses[0] - 0.05, "{losses:?}");
    let mfu = c.0.last().map(|r| r.scalars.get(mn::MFU).copied());
    assert!(out.ending.final_metrics[mn::MFU] > 0.0, "{mfu:?}");
}
