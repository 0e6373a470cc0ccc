//! The lab the Python tests read (`python/tests/`): `lab_fixture DIR [--points N] [--serve]`
//! builds it in DIR by really appending ledger entries with `glassbox-ledger` (no training),
//! indexes it as a lab does, prints one JSON line saying what it holds, and with `--serve`
//! then serves the dashboard's router (the JSON API of `glassbox serve`) on 127.0.0.1 until
//! its standard input closes, printing `serving http://ADDR` first.
//!
//! What it holds: experiment `acme/lab#1` (tags `tiny`, `ci`; run `run-1` succeeded, its
//! metric chunks hold at least N points over four scalars and a 4-expert load vector, in
//! chunks of 10,000 steps), `acme/lab#2` (tag `ladder`, d_model 32; run `run-2` diverged at
//! step 121, its last loss `null`), `acme/lab#3` (proposed by `bob`, rejected).
//!
//! Not a test itself, and not part of the wheel.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use glassbox_ledger::index::Index;
use glassbox_ledger::{BlobStore, DirSource, LabDir, LockMode, LogReader};
use glassbox_schemas::record::{
    ApprovalBody, ArtifactBody, IssueRef, ProposalBody, RejectionBody, ResultBody, RunEnding,
    RunStartedBody, refs,
};
use glassbox_schemas::{Blake3Hash, ExperimentId, LedgerEntry, RefRole, RunId, RunStatus};

/// Steps per metric chunk (one `artifact` entry each).
const STEPS_PER_CHUNK: u64 = 10_000;
/// Points each step records: four scalars and four expert loads.
const POINTS_PER_STEP: u64 = 8;
/// Tokens per step of the fixture's specs (batch 8 x sequence 64).
const TOKENS_PER_STEP: u64 = 512;

fn spec_toml(slug: &str, hypothesis: &str, d_model: u32, tags: &[&str]) -> String {
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

/// One step's record as the runner writes it; `diverged` writes the loss as `null`.
fn record(step: u64, diverged: bool) -> String {
    let loss = if diverged {
        "null".to_string()
    } else {
        format!("{}", 1.5 + 2.5 * (-(step as f64) / 600.0).exp())
    };
    let load = (0..4)
        .map(|e| format!("{}", 0.25 + 0.01 * (((step + e) % 7) as f64 - 3.0)))
        .collect::<Vec<_>>()
        .join(",");
    format!(
        "{{\"step\":{step},\"kind\":\"train\",\"scalars\":{{\"train/loss\":{loss},\"optim/learning_rate\":0.003,\"throughput/total_tokens\":{},\"throughput/tokens_per_second\":{}}},\"vectors\":{{\"train/router/layer_0/expert_load\":[{load}]}}}}\n",
        step * TOKENS_PER_STEP,
        1000 + step % 100
    )
}

fn put(lab: &LabDir, bytes: &[u8]) -> Blake3Hash {
    lab.blobs()
        .put(&mut &bytes[..])
        .expect("blob stored")
        .hash
        .0
}

fn entry(
    experiment: &str,
    refs: BTreeMap<String, Blake3Hash>,
    body: impl Into<glassbox_schemas::record::EntryBody>,
) -> Vec<u8> {
    LedgerEntry::new(Some(ExperimentId::from(experiment)), refs, body)
        .to_canonical_bytes()
        .expect("canonical entry")
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut dir = None;
    let mut points: u64 = 1000;
    let mut serve = false;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--points" => {
                points = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .expect("--points N")
            }
            "--serve" => serve = true,
            other => dir = Some(PathBuf::from(other)),
        }
    }
    let dir = dir.expect("usage: lab_fixture DIR [--points N] [--serve]");
    let (lab, _) = LabDir::init(&dir, "test.example/glassbox").expect("a fresh lab");
    let vkey = lab.verifier_key().expect("verifier key");
    let steps1 = points.div_ceil(POINTS_PER_STEP).max(1);
    let mut out: Vec<Vec<u8>> = Vec::new();
    let experiments: [(&str, &str, &str, u32, &[&str]); 3] = [
        (
            "acme/lab#1",
            "tiny-moe-64",
            "Balancing keeps expert load flat",
            64,
            &["tiny", "ci"],
        ),
        (
            "acme/lab#2",
            "narrow-32",
            "A narrow model diverges at this learning rate",
            32,
            &["ladder"],
        ),
        (
            "acme/lab#3",
            "wide-48",
            "A wider model will not help at all here",
            48,
            &["tiny"],
        ),
    ];
    let mut hashes = Vec::new();
    for (i, (id, slug, hyp, d_model, tags)) in experiments.iter().enumerate() {
        let text = spec_toml(slug, hyp, *d_model, tags);
        let spec = glassbox_schemas::parse_toml(&text).expect("valid spec");
        let spec_hash = glassbox_schemas::spec_hash(&spec).expect("spec hash");
        hashes.push(spec_hash);
        out.push(entry(
            id,
            refs([(RefRole::Spec, put(&lab, text.as_bytes()))]),
            ProposalBody {
                sweep: None,
                spec_hash,
                author: if i == 2 { "bob".into() } else { "alice".into() },
                title: format!("Experiment {}", i + 1),
                issue: Some(IssueRef {
                    repo: "acme/lab".into(),
                    number: i as u64 + 1,
                    url: format!("https://github.com/acme/lab/issues/{}", i + 1),
                }),
            },
        ));
    }
    out.push(entry(
        "acme/lab#3",
        BTreeMap::new(),
        RejectionBody {
            spec_hash: hashes[2],
            by: "maintainer".into(),
            reason: "out of scope".into(),
        },
    ));
    let runs = [
        ("acme/lab#1", "run-1", steps1),
        ("acme/lab#2", "run-2", 121),
    ];
    for (i, (id, run, steps)) in runs.iter().enumerate() {
        out.push(entry(
            id,
            BTreeMap::new(),
            ApprovalBody {
                sweep: None,
                spec_hash: hashes[i],
                approver: "maintainer".into(),
            },
        ));
        out.push(entry(
            id,
            BTreeMap::new(),
            RunStartedBody {
                worker: None,
                host: None,
                run: RunId::from(*run),
                spec_hash: hashes[i],
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
            },
        ));
        let diverged = i == 1;
        let mut first = 1;
        while first <= *steps {
            let last = (first + STEPS_PER_CHUNK - 1).min(*steps);
            let chunk: String = (first..=last)
                .map(|s| record(s, diverged && s == *steps))
                .collect();
            out.push(entry(
                id,
                refs([(RefRole::Metrics, put(&lab, chunk.as_bytes()))]),
                ArtifactBody {
                    name: format!("metrics/{run}/{first:08}.jsonl"),
                    bytes: chunk.len() as u64,
                    run: Some(RunId::from(*run)),
                },
            ));
            first = last + 1;
        }
        out.push(entry(
            id,
            BTreeMap::new(),
            ResultBody {
                run: RunId::from(*run),
                spec_hash: hashes[i],
                ending: RunEnding {
                    status: if diverged {
                        RunStatus::Diverged
                    } else {
                        RunStatus::Succeeded
                    },
                    steps: *steps,
                    final_metrics: [("train/loss".to_string(), if diverged { 2.9 } else { 1.6 })]
                        .into_iter()
                        .collect(),
                    reason: diverged.then(|| "loss became NaN at step 121".to_string()),
                },
                forecast: None,
                params_blake3: None,
            },
        ));
    }
    let entries = out.len();
    let w = lab.writer(LockMode::Wait).expect("log writer");
    w.append_batch(out).expect("entries appended");
    drop(w);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let index = runtime.block_on(async {
        let index = Index::connect(&lab.index_path().display().to_string())
            .await
            .expect("index");
        let source = DirSource {
            root: lab.root().to_path_buf(),
        };
        let reader = LogReader::open(&source, &vkey).expect("log");
        let blobs = lab.blobs();
        index
            .sync_with_blobs(&reader, Some(&blobs as &dyn BlobStore))
            .await
            .expect("indexed");
        index
    });
    println!(
        "{{\"lab\":{:?},\"entries\":{entries},\"run\":\"run-1\",\"steps\":{steps1},\"points\":{},\"vkey\":\"{vkey}\"}}",
        dir.display().to_string(),
        steps1 * POINTS_PER_STEP,
    );
    if !serve {
        return;
    }
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a local port");
        let addr = listener.local_addr().expect("its address");
        println!("serving http://{addr}");
        std::io::stdout().flush().expect("stdout");
        let state = glassbox_web::WebState::new(lab, index, glassbox_web::LiveHub::new(64));
        // Until the test closes our standard input (or goes away).
        let stdin_closed = async {
            let _ = tokio::task::spawn_blocking(|| {
                let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new());
            })
            .await;
        };
        glassbox_web::serve_on(
            listener,
            state,
            glassbox_web::ServerLimits::default(),
            stdin_closed,
        )
        .await
        .expect("served");
    });
}
