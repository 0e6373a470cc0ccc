//! What a trained run's snapshot does with text, end to end through the binary: `score`,
//! `sample` (its contracts: the same text for any thread count, greedy equal to the argmax of
//! a full forward, the same greedy text on CUDA where a GPU is usable and a refusal saying why
//! elsewhere, clear refusals of bad input) and `export --format hf`, loaded by the real
//! `transformers` (the pinned wheels `cargo xtask test` installs in a virtualenv of their own,
//! whose interpreter is `GLASSBOX_HF_PYTHON`):
//! per-token log-likelihoods equal `glassbox score` within 1e-4 relative, and 32 greedy
//! `generate` tokens equal `glassbox sample --temperature 0`, for a sigmoid model with shared
//! experts and a trained selection bias (Glm4Moe) and a softmax one with a scale (Ernie 4.5).

use std::path::Path;
use std::process::{Command, Output};

use crate::support::BIN;

/// Held-out text for scoring: not in the training data (a Markov source over 8 symbols).
const HELD_OUT: &str = "First Citizen: Before we proceed any further, hear me speak.";

fn spec(slug: &str, moe: &str) -> String {
    format!(
        r#"
[experiment]
name = "text {slug}"
slug = "{slug}"
hypothesis = "A tiny model's text can be scored, sampled and exported."
[model]
d_model = 16
n_layers = 2
n_heads = 2
seq_len = 64
[model.moe]
n_experts = 4
top_k = 2
d_expert = 16
{moe}
[[data.mixture]]
domain = "markov"
generator = {{ kind = "markov", seed = 1, order = 1, alphabet = 8, branching = 2 }}
[train]
steps = 24
batch_size = 2
lr = 0.01
eval_interval = 100
eval_batches = 1
checkpoint_interval = 12
seed = 5
"#
    )
}

fn glassbox(lab: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .arg("--lab")
        .arg(lab)
        .env("GLASSBOX_PEAK_GFLOPS", "100")
        .output()
        .expect("run glassbox")
}

fn ok_json(lab: &Path, args: &[&str]) -> serde_json::Value {
    let out = glassbox(lab, args);
    assert!(
        out.status.success(),
        "glassbox {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{args:?} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Trains `moe`'s spec in a new lab and returns the lab.
fn trained(dir: &Path, slug: &str, moe: &str) -> std::path::PathBuf {
    let lab = dir.join(slug);
    let spec_path = dir.join(format!("{slug}.toml"));
    std::fs::write(&spec_path, spec(slug, moe)).unwrap();
    let out = glassbox(&lab, &["run", spec_path.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "training {slug}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    lab
}

const SIGMOID_SHARED: &str = r#"n_shared = 1
score = "sigmoid"
combine_scale = 2.5
balancing = { method = "aux_loss_free", rate = 0.05 }"#;

const SOFTMAX_SCALED: &str = r#"score = "softmax"
combine_scale = 1.5
balancing = { method = "aux_loss_free", rate = 0.05 }"#;

#[test]
fn sample_is_the_same_for_any_thread_count_and_greedy_follows_the_full_forward() {
    let dir = tempfile::tempdir().unwrap();
    let lab = trained(dir.path(), "text-threads", SIGMOID_SHARED);
    let sample = |threads: &str, extra: &[&str]| {
        let mut args = vec![
            "sample",
            "run-000001",
            "--prompt",
            "abcab",
            "--max-tokens",
            "40",
            "--json",
            "--threads",
            threads,
        ];
        args.extend_from_slice(extra);
        ok_json(&lab, &args)["completion"]["ids"].clone()
    };
    let seeded = ["--temperature", "0.9", "--top-p", "0.95", "--seed", "7"];
    let one = sample("1", &seeded);
    assert_eq!(one, sample("2", &seeded), "thread count changed the text");
    assert_eq!(one.as_array().unwrap().len(), 40);
    assert_ne!(
        one,
        sample(
            "1",
            &["--temperature", "0.9", "--top-p", "0.95", "--seed", "8"]
        ),
        "another seed gave the same 40 tokens"
    );
    // Greedy decoding with the cache picks, at every position, the argmax of a full forward
    // over the prompt and what it wrote: score the whole text and check each next token is the
    // most likely one.
    let greedy_on = |backend: &[&str]| {
        let mut args = vec![
            "sample",
            "run-000001",
            "--prompt",
            "abcab",
            "--max-tokens",
            "24",
            "--temperature",
            "0",
            "--json",
        ];
        args.extend_from_slice(backend);
        glassbox(&lab, &args)
    };
    let out = greedy_on(&[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let greedy: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<u32> = serde_json::from_value(greedy["completion"]["ids"].clone()).unwrap();
    let mut text = b"abcab".to_vec();
    text.extend(ids.iter().map(|&i| i as u8));
    let path = dir.path().join("greedy.bin");
    std::fs::write(&path, &text).unwrap();
    // Bytes a model writes need not be UTF-8; score only a UTF-8 text.
    if std::str::from_utf8(&text).is_ok() {
        let scored = ok_json(
            &lab,
            &[
                "score",
                "run-000001",
                "--text",
                path.to_str().unwrap(),
                "--json",
            ],
        );
        let per_token = scored["score"]["per_token"].as_array().unwrap();
        assert_eq!(per_token.len(), text.len() - 1);
    }
    // The backend: the CPU unless asked (the JSON says which). Where a GPU is usable, CUDA
    // decodes the same greedy tokens; elsewhere `--backend cuda` is refused saying why, and
    // `auto` decodes on the CPU.
    assert_eq!(greedy["backend"], "cpu");
    match glassbox_runner::backend::cuda::probe() {
        Ok(found) => {
            let out = greedy_on(&["--backend", "cuda"]);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{found}: {err}");
            let on: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(on["backend"], "cuda");
            assert_eq!(
                on["completion"]["ids"], greedy["completion"]["ids"],
                "{found}"
            );
        }
        Err(reason) => {
            let out = greedy_on(&["--backend", "cuda"]);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(3), "{err}");
            assert!(
                err.contains("backend `cuda` is not available") && err.contains(&reason),
                "{err}"
            );
            assert!(!err.contains("panicked"), "{err}");
            assert!(out.stdout.is_empty());
            let out = greedy_on(&["--backend", "auto"]);
            assert!(out.status.success());
            let auto: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(auto["backend"], "cpu");
            assert_eq!(auto["completion"]["ids"], greedy["completion"]["ids"]);
        }
    }
}

#[test]
fn bad_input_is_refused_naming_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let lab = trained(dir.path(), "text-refusals", SOFTMAX_SCALED);
    let cases: [(&[&str], &str); 6] = [
        (
            &["sample", "run-000009", "--prompt", "a"],
            "no run run-000009",
        ),
        (
            &["sample", "run-000001", "--step", "5", "--prompt", "a"],
            "steps 12, 24",
        ),
        (&["sample", "run-000001", "--prompt", ""], "prompt"),
        (
            &[
                "sample",
                "run-000001",
                "--prompt",
                "a",
                "--temperature",
                "-1",
            ],
            "temperature",
        ),
        (
            &["sample", "run-000001", "--prompt", "a", "--top-p", "1.5"],
            "top_p",
        ),
        (
            &[
                "sample",
                "run-000001",
                "--prompt",
                "a",
                "--max-tokens",
                "64",
            ],
            "max_tokens",
        ),
    ];
    for (args, says) in cases {
        let out = glassbox(&lab, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?} should say {says:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    // A prompt longer than the context keeps its end and says what it kept.
    let long = "ab".repeat(100);
    let out = ok_json(
        &lab,
        &[
            "sample",
            "run-000001",
            "--prompt",
            &long,
            "--max-tokens",
            "8",
            "--json",
        ],
    );
    assert_eq!(out["completion"]["prompt_tokens"], 56);
    assert_eq!(out["completion"]["prompt_tokens_dropped"], 144);
}

/// The exported model in `transformers`: per-token log-likelihoods of `text` and 32 greedy
/// tokens after `prompt`.
fn transformers_side(dir: &Path, text: &str, prompt: &str) -> serde_json::Value {
    let script = r#"
import json, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
path, text, prompt = sys.argv[1], sys.argv[2], sys.argv[3]
tok = AutoTokenizer.from_pretrained(path)
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
model.eval()
ids = tok(text, add_special_tokens=False)["input_ids"]
with torch.no_grad():
    logits = model(torch.tensor([ids])).logits[0].double()
    lp = torch.log_softmax(logits, dim=-1)
    per_token = [lp[i, ids[i + 1]].item() for i in range(len(ids) - 1)]
    p = tok(prompt, add_special_tokens=False)["input_ids"]
    out = model.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                         max_new_tokens=32, do_sample=False, pad_token_id=0)
print(json.dumps({"class": type(model).__name__, "ids": ids, "per_token": per_token,
                  "generated": out[0, len(p):].tolist(),
                  "decoded": tok.decode(out[0, len(p):].tolist())}))
"#;
    let python = std::env::var_os("GLASSBOX_HF_PYTHON").expect(
        "GLASSBOX_HF_PYTHON names a Python with torch and transformers: run the tests with `cargo xtask test`",
    );
    let out = Command::new(python)
        .arg("-c")
        .arg(script)
        .arg(dir)
        .arg(text)
        .arg(prompt)
        .output()
        .expect("run GLASSBOX_HF_PYTHON");
    assert!(
        out.status.success(),
        "transformers failed on the export: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn transformers_loads_the_export_and_agrees_with_score_and_greedy_sample() {
    let dir = tempfile::tempdir().unwrap();
    let text_path = dir.path().join("held-out.txt");
    std::fs::write(&text_path, HELD_OUT).unwrap();
    let prompt = "abacab";
    for (slug, moe, class) in [
        ("text-glm", SIGMOID_SHARED, "Glm4MoeForCausalLM"),
        ("text-ernie", SOFTMAX_SCALED, "Ernie4_5_MoeForCausalLM"),
    ] {
        let lab = trained(dir.path(), slug, moe);
        let out_dir = dir.path().join(format!("{slug}-hf"));
        let exported = ok_json(
            &lab,
            &[
                "export",
                "run-000001",
                out_dir.to_str().unwrap(),
                "--format",
                "hf",
                "--json",
            ],
        );
        assert_eq!(exported["architecture"], class);
        let names: Vec<&str> = exported["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["name"].as_str().unwrap())
            .collect();
        for want in [
            "config.json",
            "model.safetensors",
            "tokenizer.json",
            "generation_config.json",
            "README.md",
        ] {
            assert!(names.contains(&want), "{want} missing from {names:?}");
        }
        let card = std::fs::read_to_string(out_dir.join("README.md")).unwrap();
        assert!(card.contains("glassbox --lab"), "{card}");
        // The export is on the record: verify covers its blobs.
        let verify = glassbox(&lab, &["verify"]);
        assert!(
            verify.status.success(),
            "{}",
            String::from_utf8_lossy(&verify.stderr)
        );

        let ours = ok_json(
            &lab,
            &[
                "score",
                "run-000001",
                "--text",
                text_path.to_str().unwrap(),
                "--json",
            ],
        );
        let theirs = transformers_side(&out_dir, HELD_OUT, prompt);
        assert_eq!(theirs["class"], class);
        let ours_lp: Vec<f64> = ours["score"]["per_token"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p[1].as_f64().unwrap())
            .collect();
        let theirs_lp: Vec<f64> = serde_json::from_value(theirs["per_token"].clone()).unwrap();
        assert_eq!(ours_lp.len(), theirs_lp.len(), "token counts differ");
        for (i, (a, b)) in ours_lp.iter().zip(&theirs_lp).enumerate() {
            let rel = (a - b).abs() / a.abs().max(b.abs()).max(1e-12);
            assert!(
                rel <= 1e-4,
                "{slug} token {i}: glassbox {a}, transformers {b} ({rel:e} relative)"
            );
        }
        let greedy = ok_json(
            &lab,
            &[
                "sample",
                "run-000001",
                "--prompt",
                prompt,
                "--max-tokens",
                "32",
                "--temperature",
                "0",
                "--json",
            ],
        );
        assert_eq!(
            greedy["completion"]["ids"], theirs["generated"],
            "{slug}: greedy tokens differ from transformers' generate"
        );
    }
}

#[test]
fn a_spec_with_samples_records_what_the_model_writes_at_each_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    // `[samples]` is a table of its own: appended after the spec's [train].
    let lab = dir.path().join("samples-lab");
    let spec_path = dir.path().join("samples.toml");
    let text = spec("text-samples", SOFTMAX_SCALED)
        + "\n[samples]\nmax_tokens = 10\nprompts = [\"abc\", \"<b>\"]\n";
    std::fs::write(&spec_path, text).unwrap();
    let out = glassbox(&lab, &["run", spec_path.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let entries = crate::support::entries(&lab);
    let snapshots: Vec<(u64, String)> = entries
        .iter()
        .filter(|e| e.body.kind().as_str() == "checkpoint")
        .map(|e| {
            let b = crate::support::body(e);
            (
                b["step"].as_u64().unwrap(),
                e.refs["checkpoint"].to_string(),
            )
        })
        .collect();
    let samples: Vec<serde_json::Value> = entries
        .iter()
        .filter(|e| e.body.kind().as_str() == "samples")
        .map(crate::support::body)
        .collect();
    assert_eq!(samples.len(), 2, "one per snapshot (steps 12 and 24)");
    for (s, (step, blob)) in samples.iter().zip(&snapshots) {
        assert_eq!(s["step"].as_u64(), Some(*step));
        assert_eq!(
            s["snapshot"].as_str(),
            Some(blob.as_str()),
            "names its snapshot"
        );
        assert_eq!(s["prompts"], serde_json::json!(["abc", "<b>"]));
        assert_eq!(s["texts"].as_array().unwrap().len(), 2);
    }
    // Greedy by default: the last snapshot's completion is what `sample` writes from it.
    let greedy = ok_json(
        &lab,
        &[
            "sample",
            "run-000001",
            "--prompt",
            "abc",
            "--max-tokens",
            "10",
            "--temperature",
            "0",
            "--json",
        ],
    );
    assert_eq!(samples[1]["texts"][0], greedy["completion"]["text"]);
    let verify = glassbox(&lab, &["verify"]);
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stderr)
    );
}
