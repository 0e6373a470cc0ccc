//! The GPU check's harness in its no-GPU mode (a second CPU backend as the device), so the parts
//! that decide its verdict run in CI without a GPU: the report files and where they go (never
//! the kernel cache), the cached decoder's parity section, the benchmark verdict (a run that stops early fails the check instead of
//! passing with 0 tok/s), and the plan of `scripts/gpu-check.sh`.
//! Not here: device numbers (they need a GPU: `scripts/gpu-check.sh`).

use std::path::{Path, PathBuf};

use glassbox_runner::backend::cpu::CpuBackend;
// The harness lives beside the example that drives it, not in the library; this test compiles
// the same file. What only the example calls is unused here.
#[allow(dead_code)]
#[path = "../../examples/gpu_check/check.rs"]
mod check;

use check::{CheckConfig, REPORT_FILES, run_check};
use glassbox_schemas::ExperimentSpec;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn spec(rel: &str) -> (String, ExperimentSpec) {
    let text = std::fs::read_to_string(repo().join(rel)).expect(rel);
    (
        rel.to_string(),
        glassbox_schemas::parse_toml(&text).expect(rel),
    )
}

/// CI-sized: the tiny spec for 3 steps, the `small` bench config as the rung.
fn config(out: &Path, cache: &Path) -> CheckConfig {
    CheckConfig {
        out: out.to_path_buf(),
        kernel_cache: Some(cache.to_path_buf()),
        spec: spec("examples/tiny.toml"),
        steps: 3,
        rung: spec("bench/configs/small.toml"),
        rung_batch: 2,
        bench_steps: 3,
        bench_wall_seconds: None,
        skip_bench: false,
        threads: 2,
    }
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("report dir")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn report_json(out: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("gpu-report.json")).unwrap()).unwrap()
}

#[test]
fn the_no_gpu_check_passes_and_writes_only_its_two_reports() {
    let tmp = tempfile::tempdir().unwrap();
    let (out, cache) = (tmp.path().join("report"), tmp.path().join("kernels"));
    let dev = CpuBackend::<f32>::new(1).unwrap();
    let verdict = run_check(&config(&out, &cache), &dev).expect("the check runs");
    assert!(verdict.ok, "{:?}", verdict.failures);
    assert_eq!(
        files_in(&out),
        REPORT_FILES,
        "nothing but the reports in the report dir"
    );
    let j = report_json(&out);
    assert_eq!(j["ok"], true);
    assert_eq!(j["kernel_cache"], cache.display().to_string());
    // Both shape sets ran, the mid one with the 70,000-row embedding backward.
    let ops = j["ops"].as_array().unwrap();
    assert!(ops.iter().any(|o| o["output"] == "small/embedding_bwd"));
    assert!(
        ops.iter()
            .any(|o| o["output"] == "mid/embedding_bwd_vocab_70000")
    );
    assert!(ops.iter().all(|o| o["ok"] == true));
    assert_eq!(j["determinism"]["ok"], true);
    // Cached decoding: a second CPU pool decodes the same logits to the bit, so every greedy
    // choice is the reference's; the speed is measured.
    let decode = &j["decode"];
    assert_eq!(decode["ok"], true);
    assert_eq!(decode["max_rel_logit_diff"], 0.0);
    assert!(decode["positions"].as_u64().unwrap() > 8);
    assert_eq!(decode["greedy_equal"], decode["positions"]);
    assert!(decode["tokens_per_second"].as_f64().unwrap() > 0.0);
    let bench = j["benchmark"].as_array().unwrap();
    assert_eq!(bench.len(), 1, "f32 only without a GPU");
    assert_eq!(bench[0]["status"], "succeeded");
    assert_eq!(bench[0]["steps"], 3);
    assert!(bench[0]["tokens_per_second"].as_f64().unwrap() > 0.0);
    assert_eq!(bench[0]["kernel_classes"].as_array().unwrap().len(), 4);
    let md = std::fs::read_to_string(out.join("gpu-report.md")).unwrap();
    assert!(md.contains("**overall: PASS**"), "{md}");
    assert!(md.contains("bf16 | — | not run (no GPU"), "{md}");
}

#[test]
fn a_benchmark_run_that_stops_early_fails_the_check() {
    let tmp = tempfile::tempdir().unwrap();
    let (out, cache) = (tmp.path().join("report"), tmp.path().join("kernels"));
    let mut cfg = config(&out, &cache);
    // Already used up when the loop first looks: the run ends budget_exceeded before a step.
    cfg.bench_wall_seconds = Some(1e-9);
    let dev = CpuBackend::<f32>::new(1).unwrap();
    let verdict = run_check(&cfg, &dev).expect("the check runs");
    assert!(!verdict.ok);
    assert_eq!(verdict.failures.len(), 1, "{:?}", verdict.failures);
    let why = &verdict.failures[0];
    assert!(why.starts_with("benchmark (f32)"), "{why}");
    assert!(
        why.contains("ended budget_exceeded after 0 of 3 steps"),
        "{why}"
    );
    let j = report_json(&out);
    assert_eq!(j["ok"], false);
    assert_eq!(j["benchmark"][0]["ok"], false);
    assert_eq!(j["benchmark"][0]["status"], "budget_exceeded");
    let md = std::fs::read_to_string(out.join("gpu-report.md")).unwrap();
    assert!(md.contains("**overall: FAIL**"), "{md}");
    assert_eq!(files_in(&out), REPORT_FILES);
}

#[test]
fn a_kernel_cache_inside_the_report_directory_stops_the_check_before_it_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("report");
    let cfg = config(&out, &out.join("kernel-cache"));
    let dev = CpuBackend::<f32>::new(1).unwrap();
    let err = run_check(&cfg, &dev).unwrap_err().to_string();
    assert!(err.contains("GLASSBOX_KERNEL_CACHE"), "{err}");
    assert!(!out.exists(), "nothing written");
}

/// The script's plan: reports in $OUT, the kernel cache outside it, and a cache inside $OUT
/// refused before anything runs.
#[test]
fn the_script_keeps_the_kernel_cache_out_of_the_report_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("report");
    let run = |cache: Option<&Path>| {
        let mut cmd = std::process::Command::new("bash");
        cmd.arg(repo().join("scripts/gpu-check.sh"))
            .arg("--dry-run")
            .env("OUT", &out)
            .env_remove("GLASSBOX_KERNEL_CACHE");
        if let Some(c) = cache {
            cmd.env("GLASSBOX_KERNEL_CACHE", c);
        }
        cmd.output().expect("bash runs")
    };
    let plan = run(None);
    assert!(plan.status.success(), "{plan:?}");
    let text = String::from_utf8_lossy(&plan.stdout);
    let cache = text
        .lines()
        .find_map(|l| l.strip_prefix("plan: GLASSBOX_KERNEL_CACHE="))
        .expect("the plan names the cache");
    assert!(!Path::new(cache).starts_with(&out), "{text}");
    assert!(text.contains(&format!("--out {}", out.display())), "{text}");
    let refused = run(Some(&out.join("kernels")));
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("inside the report directory"));
}
