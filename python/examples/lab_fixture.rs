//! The lab the Python tests read (`python/tests/`): `lab_fixture DIR [--points N] [--bucket
//! s3://BUCKET/PREFIX] [--serve]` builds it in DIR by really appending ledger entries with
//! `glassbox-ledger` (no training), indexes it as a lab does, with `--bucket` publishes it to
//! that bucket (blobs and log, as an integrator does), prints one JSON line saying what it
//! holds, and with `--serve` then serves the dashboard's router (the JSON API of `glassbox
//! serve`) on 127.0.0.1 until
//! its standard input closes, printing `serving http://ADDR` first.
//!
//! What it holds: experiment `acme/lab#1` (tags `tiny`, `ci`; run `run-1` succeeded, its
//! metric chunks hold at least N points over four scalars and a 4-expert load vector, in
//! chunks of 10,000 steps), `acme/lab#2` (tag `ladder`, d_model 32; run `run-2` diverged at
//! step 121, its last loss `null`), `acme/lab#3` (proposed by `bob`, rejected); its checkpoint
//! carries a cosignature by the witness `witness.test.example` (the JSON line gives its key,
//! and the key of a witness that did not cosign).
//!
//! Not a test itself, and not part of the wheel.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use glassbox_ledger::bucket::Mirror;
use glassbox_ledger::checkpoint::SignedCheckpoint;
use glassbox_ledger::cosignature::{CosignerKey, CosigningKey};
use glassbox_ledger::index::Index;
use glassbox_ledger::{BlobStore, LabDir, LockMode};
use glassbox_schemas::record::{
    ApprovalBody, ArtifactBody, IssueRef, ProposalBody, RejectionBody, ResultBody, RunEnding, refs,
};
use glassbox_schemas::{Blake3Hash, ExperimentId, LedgerEntry, RefRole, RunId, RunStatus};
use glassbox_test_support::lab::{index_log, put_blob, run_started, tiny_spec_toml};

/// Steps per metric chunk (one `artifact` entry each).
const STEPS_PER_CHUNK: u64 = 10_000;
/// Points each step records: four scalars and four expert loads.
const POINTS_PER_STEP: u64 = 8;
/// Tokens per step of the tiny spec (batch 8 x sequence 64).
const TOKENS_PER_STEP: u64 = 512;

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

fn entry(
    experiment: &str,
    refs: BTreeMap<String, Blake3Hash>,
    body: impl Into<glassbox_schemas::record::EntryBody>,
) -> Vec<u8> {
    LedgerEntry::new(Some(ExperimentId::from(experiment)), refs, body)
        .to_canonical_bytes()
        .expect("canonical entry")
}

/// Adds a cosignature by the witness `witness.test.example` to the lab's checkpoint, as a
/// witness would; that witness's key, and the key of one that did not cosign.
fn cosign_checkpoint(lab: &LabDir) -> (CosignerKey, CosignerKey) {
    let path = lab.root().join("log/checkpoint");
    let mut note = SignedCheckpoint::parse(&std::fs::read(&path).expect("the checkpoint"))
        .expect("a checkpoint note");
    let witness = CosigningKey::from_seed("witness.test.example", [7; 32]).expect("a witness key");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    note.signatures.push(witness.cosign(&note.text, now));
    // Replaced as the log writer replaces it (the file itself is read-only).
    let tmp = path.with_extension("cosigned");
    std::fs::write(&tmp, note.to_bytes()).expect("the cosigned checkpoint written");
    std::fs::rename(&tmp, &path).expect("the cosigned checkpoint installed");
    let absent = CosigningKey::from_seed("absent.test.example", [8; 32]).expect("a witness key");
    (witness.verifier_key(), absent.verifier_key())
}

/// Publishes the lab to the bucket at `url` as an integrator does: every blob under the
/// prefix, then the log (tiles, `vkey`, the checkpoint last). The `AWS_*` variables name the
/// server.
fn publish(lab: &LabDir, url: &str) {
    let env = |k: &str| std::env::var(k).ok();
    let store = glassbox_ledger::open_store_with_env(url, &env).expect("the bucket's blob store");
    let local = lab.blobs();
    for hash in local.list().expect("the lab's blobs") {
        let mut reader = local.get(&hash).expect("a blob of the lab");
        store.put(&mut reader).expect("the blob copied");
    }
    let bucket = glassbox_ledger::open_bucket_with_env(url, &env).expect("the bucket");
    let vkey = lab.verifier_key().expect("verifier key");
    Mirror::new()
        .sync(bucket.as_ref(), lab.root(), &vkey)
        .expect("the log published");
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut dir = None;
    let mut points: u64 = 1000;
    let mut serve = false;
    let mut bucket: Option<String> = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--points" => {
                points = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .expect("--points N")
            }
            "--serve" => serve = true,
            "--bucket" => bucket = Some(args.next().expect("--bucket s3://BUCKET/PREFIX")),
            other => dir = Some(PathBuf::from(other)),
        }
    }
    let dir =
        dir.expect("usage: lab_fixture DIR [--points N] [--bucket s3://BUCKET/PREFIX] [--serve]");
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
        let text = tiny_spec_toml(slug, hyp, *d_model, tags);
        let spec = glassbox_schemas::parse_toml(&text).expect("valid spec");
        let spec_hash = glassbox_schemas::spec_hash(&spec).expect("spec hash");
        hashes.push(spec_hash);
        out.push(entry(
            id,
            refs([(RefRole::Spec, put_blob(&lab, text.as_bytes()))]),
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
        out.push(entry(id, BTreeMap::new(), run_started(run, hashes[i])));
        let diverged = i == 1;
        let mut first = 1;
        while first <= *steps {
            let last = (first + STEPS_PER_CHUNK - 1).min(*steps);
            let chunk: String = (first..=last)
                .map(|s| record(s, diverged && s == *steps))
                .collect();
            out.push(entry(
                id,
                refs([(RefRole::Metrics, put_blob(&lab, chunk.as_bytes()))]),
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
    let (witness, absent_witness) = cosign_checkpoint(&lab);
    if let Some(url) = &bucket {
        publish(&lab, url);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let index = runtime.block_on(async {
        let index = Index::connect(&lab.index_path().display().to_string())
            .await
            .expect("index");
        index_log(&lab, &index).await;
        index
    });
    println!(
        "{{\"lab\":{:?},\"entries\":{entries},\"run\":\"run-1\",\"steps\":{steps1},\"points\":{},\"vkey\":\"{vkey}\",\"witness\":\"{witness}\",\"absent_witness\":\"{absent_witness}\"}}",
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
