//! The command line of the observatory, through the real binary: `glassbox run` of a spec with
//! a forecast prints the verdict it settles (the one vocabulary, `hit` or `miss`), and its
//! record holds the whole console log (progress and evaluation lines, the backend and why) as
//! chunks written while it ran and whole at the end, plus hardware telemetry (`hw/...`) in its
//! metric chunks; `spec check` reports every error of a file in one pass; `glassbox board`
//! with no boards declared says so.

use std::path::Path;

use glassbox_schemas::EntryKind;
use glassbox_schemas::record::ArtifactBody;

use crate::support::MICRO_MODEL;

fn write_spec(dir: &Path, forecast: &str) -> std::path::PathBuf {
    let text = format!(
        r#"
[experiment]
name = "Observatory"
slug = "observatory"
hypothesis = "The record shows what a person at the terminal saw while it trained."
{MICRO_MODEL}[[data.mixture]]
domain = "markov"
generator = {{ kind = "markov", seed = 1, order = 1, alphabet = 8, branching = 2 }}
[train]
steps = 120
batch_size = 2
lr = 0.003
eval_interval = 40
eval_batches = 1
seed = 1
{forecast}
"#
    );
    let p = dir.join("spec.toml");
    std::fs::write(&p, text).unwrap();
    p
}

fn glassbox(dir: &Path, args: &[&str]) -> std::process::Output {
    crate::support::glassbox(dir, None, args).output().unwrap()
}

#[test]
fn a_run_prints_its_forecast_verdict_and_records_its_console_log_and_hardware() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A forecast no run of this spec can meet: the verdict is a miss.
    let spec = write_spec(
        d,
        "[forecast]\nmetric = \"eval/markov/loss\"\nvalue = 0.001\ntolerance = 0.0001",
    );
    let out = glassbox(d, &["run", spec.to_str().unwrap(), "--threads", "1"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find(|l| l.starts_with("forecast: eval/markov/loss"))
        .unwrap_or_else(|| panic!("no forecast line in\n{stdout}"));
    assert!(line.ends_with("verdict: miss"), "{line}");
    assert!(line.contains("error +"), "{line}");

    let entries = crate::support::entries(&d.join("lab"));
    let artifacts: Vec<(ArtifactBody, glassbox_schemas::Blake3Hash)> = entries
        .iter()
        .filter(|e| e.kind() == EntryKind::Artifact)
        .map(|e| {
            (
                e.body_as::<ArtifactBody>().unwrap(),
                *e.refs.values().next().unwrap(),
            )
        })
        .collect();
    let blob = |h: &glassbox_schemas::Blake3Hash| {
        let hex = h.to_string()["blake3:".len()..].to_string();
        std::fs::read_to_string(d.join("lab/blobs").join(&hex[..2]).join(&hex[2..]))
            .unwrap_or_else(|e| panic!("blob {hex}: {e}"))
    };
    // The log in chunks while it ran (numbered lines), then whole.
    let chunks: Vec<&(ArtifactBody, _)> = artifacts
        .iter()
        .filter(|(a, _)| a.name.contains("/attempt-1/lines-"))
        .collect();
    assert!(!chunks.is_empty(), "no log chunk: {artifacts:?}");
    let whole = artifacts
        .iter()
        .find(|(a, _)| a.name.ends_with("/attempt-1.log"))
        .expect("the whole log at the end");
    let text = blob(&whole.1);
    for want in [
        " info backend: cpu",
        " info step 120/120  loss ",
        " info step 40: eval/markov/",
        "ended succeeded after 120 steps",
    ] {
        assert!(
            text.contains(want),
            "{want:?} missing from the log:\n{text}"
        );
    }
    assert!(
        text.lines().filter(|l| l.contains(" info step ")).count() >= 20,
        "every progress line: {text}"
    );
    let chunked: String = chunks.iter().map(|(_, h)| blob(h)).collect();
    assert!(
        chunked.contains(" info backend: cpu") && chunked.contains(" info step 6/120"),
        "{chunked}"
    );
    // Hardware telemetry in the metric chunks.
    let metrics: String = artifacts
        .iter()
        .filter(|(a, _)| a.name.starts_with("metrics/"))
        .map(|(_, h)| blob(h))
        .collect();
    assert!(
        metrics.contains("\"hw/process/rss_bytes\"")
            && metrics.contains("\"hw/machine/memory_available_bytes\""),
        "no hardware telemetry in the metric chunks"
    );
}

#[test]
fn spec_check_reports_every_error_in_one_pass() {
    let dir = tempfile::tempdir().unwrap();
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/tiny.toml"))
            .unwrap()
            .replace("n_heads = 4", "n_heads = 5")
            .replace("top_k = 2", "topk = 2\ntop_k = 9");
    let p = dir.path().join("spec.toml");
    std::fs::write(&p, text).unwrap();
    let out = std::process::Command::new(crate::support::BIN)
        .args(["spec", "check"])
        .arg(&p)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    for want in ["model.moe.topk", "model.n_heads = 5", "model.moe.top_k = 9"] {
        assert!(err.contains(want), "{want:?} missing from\n{err}");
    }
}

#[test]
fn board_with_no_boards_declared_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let out = glassbox(dir.path(), &["board"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("no leaderboards declared") && text.contains("[[leaderboard]]"),
        "{text}"
    );
}
