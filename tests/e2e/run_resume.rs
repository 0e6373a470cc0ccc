//! `glassbox run` end to end: a real child process is killed with SIGKILL mid-run, resumed from
//! its last checkpoint, and must end with bitwise the same parameters and metrics as a run
//! that never stopped. Also: `--backend cuda` fails clearly, and the exit code of a budget stop.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::MICRO_MODEL;

const BIN: &str = env!("CARGO_BIN_EXE_glassbox");

/// A small spec: ~1 ms steps, many of them, a checkpoint every 20 steps.
fn write_spec(dir: &Path, steps: u64, budget: &str) -> std::path::PathBuf {
    let text = format!(
        r#"
[experiment]
name = "kill and resume"
slug = "kill-resume"
hypothesis = "Resuming from a checkpoint after SIGKILL gives bitwise the same run."
{MICRO_MODEL}balancing = {{ method = "aux_loss_free", rate = 0.01 }}
[[data.mixture]]
domain = "markov"
generator = {{ kind = "markov", seed = 1, order = 1, alphabet = 8, branching = 2 }}
[train]
steps = {steps}
batch_size = 2
lr = 0.003
eval_interval = 100
eval_batches = 1
checkpoint_interval = 20
seed = 3
{budget}
"#
    );
    let p = dir.join("spec.toml");
    std::fs::write(&p, text).expect("write spec");
    p
}

fn glassbox(args: &[&str], dir: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.args(args)
        .arg("--lab")
        .arg(dir.join("lab"))
        .env("GLASSBOX_PEAK_GFLOPS", "100")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

fn summary(out: &Path) -> serde_json::Value {
    let s = std::fs::read_to_string(out.join("summary.json")).expect("summary.json");
    serde_json::from_str(&s).expect("summary is JSON")
}

/// metrics.jsonl without the wall-clock throughput fields.
fn metrics(out: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(out.join("metrics.jsonl"))
        .expect("metrics.jsonl")
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).expect("json line");
            if let Some(s) = v.get_mut("scalars").and_then(|s| s.as_object_mut()) {
                s.remove("throughput/tokens_per_second");
                s.remove("throughput/mfu");
                // Hardware telemetry describes the machine and its moment, not the run.
                s.retain(|k, _| !k.starts_with("hw/"));
            }
            v
        })
        .collect()
}

#[test]
fn sigkill_mid_run_then_resume_is_bitwise_identical_to_an_uninterrupted_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = write_spec(dir.path(), 3000, "");
    let spec_s = spec.to_str().expect("utf-8 path");

    let full = dir.path().join("full");
    let st = glassbox(
        &[
            "run",
            spec_s,
            "--no-ledger",
            "--threads",
            "2",
            "--out",
            full.to_str().expect("p"),
        ],
        dir.path(),
    )
    .status()
    .expect("run glassbox");
    assert!(st.success(), "uninterrupted run failed: {st}");

    let cut = dir.path().join("cut");
    let mut child = glassbox(
        &[
            "run",
            spec_s,
            "--no-ledger",
            "--threads",
            "1",
            "--out",
            cut.to_str().expect("p"),
        ],
        dir.path(),
    )
    .spawn()
    .expect("spawn glassbox");
    // Wait (polling the file system, 10 ms apart, at most 120 s) until a checkpoint past step
    // 100 exists, so the kill lands mid-run with real progress behind it.
    let ckdir = cut.join("checkpoints");
    let deadline = Instant::now() + Duration::from_secs(120);
    let latest = loop {
        let mut names: Vec<String> = std::fs::read_dir(&ckdir)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.ends_with(".safetensors"))
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        if let Some(last) = names.last() {
            if last.as_str() > "step-00000100.safetensors" {
                break ckdir.join(last);
            }
        }
        assert!(Instant::now() < deadline, "no checkpoint appeared");
        assert!(
            child.try_wait().expect("poll child").is_none(),
            "child ended before the kill"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    child.kill().expect("SIGKILL"); // std's kill() sends SIGKILL on Unix
    let status = child.wait().expect("reap child");
    assert!(
        !status.success(),
        "the child must have died from the signal"
    );
    assert!(
        !cut.join("summary.json").exists(),
        "the killed run must not have finished"
    );

    let st = glassbox(
        &[
            "run",
            spec_s,
            "--threads",
            "2",
            "--out",
            cut.to_str().expect("p"),
            "--resume",
            latest.to_str().expect("p"),
        ],
        dir.path(),
    )
    .status()
    .expect("resume glassbox");
    assert!(st.success(), "resumed run failed: {st}");

    let (a, b) = (summary(&full), summary(&cut));
    assert_eq!(a["outcome"]["status"], "succeeded");
    assert_eq!(b["outcome"]["steps"], 3000);
    assert_eq!(a["outcome"]["params_blake3"], b["outcome"]["params_blake3"]);
    assert_eq!(a["outcome"]["total_tokens"], b["outcome"]["total_tokens"]);
    assert_eq!(metrics(&full), metrics(&cut), "metric streams differ");
}

#[test]
fn cuda_backend_fails_clearly_until_it_is_built() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = write_spec(dir.path(), 2, "");
    let out = glassbox(
        &["run", spec.to_str().expect("p"), "--backend", "cuda"],
        dir.path(),
    )
    .output()
    .expect("run glassbox");
    assert_eq!(out.status.code(), Some(3), "operational error exit code");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cuda") && err.contains("not"), "stderr: {err}");
}

#[test]
fn budget_stop_exits_with_its_own_code_and_records_the_outcome() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = write_spec(dir.path(), 1000, "[budget]\nmax_flops = 2e7");
    let out_dir = dir.path().join("out");
    let st = glassbox(
        &[
            "run",
            spec.to_str().expect("p"),
            "--out",
            out_dir.to_str().expect("p"),
        ],
        dir.path(),
    )
    .status()
    .expect("run glassbox");
    assert_eq!(st.code(), Some(11), "budget_exceeded exit code");
    let s = summary(&out_dir);
    assert_eq!(s["outcome"]["status"], "budget_exceeded");
    assert!(s["outcome"]["final_metrics"]["train/loss"].is_number());
}
