//! `glassbox ladder` and `glassbox reproduce` end to end on the real binary: the ladder's
//! forecast is on the ledger before its target is even proposed, the target's result states
//! forecast against actual; a recorded run reproduces bitwise on the CPU, and a changed byte in
//! one of its blobs makes the reproduction fail, naming the blob.

use std::path::Path;

use glassbox_schemas::EntryKind;

use crate::support::{MICRO_MODEL, entries};

fn glassbox(dir: &Path, args: &[&str]) -> std::process::Output {
    crate::support::glassbox(dir, None, args).output().unwrap()
}

#[test]
fn ladder_registers_its_forecast_before_the_target_and_reports_the_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ladder = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/ladder.toml");
    let out = glassbox(d, &["ladder", ladder.to_str().unwrap(), "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["rungs"].as_array().unwrap().len(), 3);
    assert!(report["fit"]["alpha"].as_f64().unwrap().is_finite());
    assert_eq!(report["fit"]["e_fixed"], true);

    let all = entries(&d.join("lab"));
    let forecast_at = report["forecast"]["entry"].as_u64().unwrap() as usize;
    assert_eq!(all[forecast_at].kind(), EntryKind::Forecast);
    assert_eq!(
        crate::support::body(&all[forecast_at])["method"],
        "scaling_law"
    );
    let target_hash = crate::support::body(&all[forecast_at])["spec_hash"]
        .as_str()
        .unwrap()
        .to_string();
    // Everything about the target comes after the forecast.
    let first_target = all
        .iter()
        .position(|e| {
            e.kind() == EntryKind::Proposal
                && crate::support::body(e)["spec_hash"].as_str() == Some(&target_hash)
        })
        .unwrap();
    assert!(
        forecast_at < first_target,
        "forecast {forecast_at} before proposal {first_target}"
    );
    let result = all
        .iter()
        .rev()
        .find(|e| e.kind() == EntryKind::Result)
        .unwrap();
    assert_eq!(
        crate::support::body(result)["spec_hash"].as_str(),
        Some(target_hash.as_str())
    );
    let fc = &crate::support::body(result)["forecast"];
    assert_eq!(fc["predicted"], report["forecast"]["value"]);
    let actual = fc["actual"].as_f64().unwrap();
    let hit =
        (actual - fc["predicted"].as_f64().unwrap()).abs() <= fc["tolerance"].as_f64().unwrap();
    assert_eq!(fc["hit"], hit);
}

#[test]
fn a_run_reproduces_bitwise_and_a_tampered_blob_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("spec.toml"),
        format!(
            r#"
[experiment]
name = "reproduce me"
slug = "reproduce-me"
hypothesis = "Re-running a recorded run gives bitwise the same metrics."
{MICRO_MODEL}[[data.mixture]]
domain = "markov"
generator = {{ kind = "markov", seed = 2, order = 1, alphabet = 8, branching = 2 }}
[train]
steps = 60
batch_size = 2
lr = 0.003
eval_interval = 20
eval_batches = 1
checkpoint_interval = 30
seed = 4
"#
        ),
    )
    .unwrap();
    let out = glassbox(d, &["run", "spec.toml", "--threads", "2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Any thread count reproduces it.
    let out = glassbox(d, &["reproduce", "run-000001", "--threads", "1", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["outcome"], "reproduced");
    assert!(r["values_compared"].as_u64().unwrap() > 60 * 5);
    let all = entries(&d.join("lab"));
    let last = all.last().unwrap();
    assert_eq!(last.kind(), EntryKind::Reproduction);
    assert_eq!(crate::support::body(last)["outcome"], "reproduced");

    // Change one byte of a metric chunk: the reproduction refuses, naming the blob.
    let chunk = all
        .iter()
        .find(|e| e.kind() == EntryKind::Artifact && e.refs.contains_key("metrics"))
        .unwrap();
    let hex = chunk.refs["metrics"].to_hex();
    let path = d.join("lab/blobs").join(&hex[..2]).join(&hex[2..]);
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.iter().position(|b| b.is_ascii_digit()).unwrap();
    bytes[at] = if bytes[at] == b'1' { b'2' } else { b'1' };
    std::fs::write(&path, bytes).unwrap();
    let out = glassbox(d, &["reproduce", "run-000001"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&hex) && err.contains("corrupt"), "{err}");

    let out = glassbox(d, &["reproduce", "run-000009"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no `run_started` entry for run-000009"));
}
