//! Pieces of the small labs tests build by really appending ledger entries: the tiny MoE spec
//! their experiments propose, a blob stored in a lab, a `run_started` body with a test
//! worker's fields, and the index brought up to date with the log (metric chunks included), as
//! a lab's integrator does.
//!
//! Not here: any one test's lab (what it holds is the test's business) or training.

use std::collections::BTreeMap;

use glassbox_ledger::index::Index;
use glassbox_ledger::{BlobStore, DirSource, LabDir, LogReader};
use glassbox_schemas::record::RunStartedBody;
use glassbox_schemas::{Blake3Hash, RunId, SpecHash};

/// The spec of a tiny two-layer, four-expert MoE on the built-in Markov source, 300 steps of
/// batch 8 x sequence 64 (512 tokens per step), with `slug`, `hypothesis`, `d_model` and
/// `tags`; a test appends sections (a `[forecast]`) as it needs.
pub fn tiny_spec_toml(slug: &str, hypothesis: &str, d_model: u32, tags: &[&str]) -> String {
    let tags = tags
        .iter()
        .map(|t| format!("{t:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        r#"[experiment]
name = "Tiny MoE"
slug = "{slug}"
hypothesis = {hypothesis:?}
tags = [{tags}]

[model]
d_model = {d_model}
n_layers = 2
n_heads = 4
seq_len = 64

[model.moe]
n_experts = 4
top_k = 2
d_expert = 128
score = "softmax"
balancing = {{ method = "aux_loss_free", rate = 0.001 }}

[[data.mixture]]
domain = "markov"
generator = {{ kind = "markov", seed = 7, order = 1, alphabet = 32, branching = 4 }}

[train]
steps = 300
batch_size = 8
lr = 0.003
warmup_steps = 30
schedule = "cosine"
eval_interval = 100
seed = 1
"#
    )
}

/// Stores `bytes` in the lab's blob store; their hash.
///
/// # Panics
/// When the store cannot write.
pub fn put_blob(lab: &LabDir, bytes: &[u8]) -> Blake3Hash {
    lab.blobs()
        .put(&mut &bytes[..])
        .expect("the blob is stored")
        .hash
        .0
}

/// Run `run` of the spec `spec_hash` started on a test CPU (revision `abc123`, seed 1), with no
/// worker, host or attempt: set those with `RunStartedBody { worker: ..., ..run_started(..) }`.
pub fn run_started(run: &str, spec_hash: SpecHash) -> RunStartedBody {
    RunStartedBody {
        worker: None,
        host: None,
        run: RunId::from(run),
        spec_hash,
        code_revision: "abc123".into(),
        backend: "cpu".into(),
        backend_reason: None,
        hardware: "test cpu x2".into(),
        seed: 1,
        kernel_hashes: BTreeMap::new(),
        resumed_from_step: None,
        build: None,
        data: None,
        attempt: None,
    }
}

/// Brings `index` up to date with the lab's log, metric chunks read from its blob store.
///
/// # Panics
/// When the log does not verify or the index cannot be written.
pub async fn index_log(lab: &LabDir, index: &Index) {
    let vkey = lab.verifier_key().expect("the lab's verifier key");
    let source = DirSource {
        root: lab.root().to_path_buf(),
    };
    let reader = LogReader::open(&source, &vkey).expect("the log verifies");
    let blobs = lab.blobs();
    index
        .sync_with_blobs(&reader, Some(&blobs as &dyn BlobStore))
        .await
        .expect("the index is brought up to date");
}
