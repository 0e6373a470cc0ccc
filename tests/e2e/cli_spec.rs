//! End-to-end: `glassbox spec check` and `glassbox spec schema` as a user runs them, through the
//! real binary.

use std::path::Path;
use std::process::{Command, Output};

fn glassbox(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_glassbox"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the glassbox binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn tiny_example_checks_as_json() {
    let out = glassbox(&["spec", "check", "examples/tiny.toml", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let hash = v["spec_hash"].as_str().unwrap();
    assert!(hash.starts_with("blake3:") && hash.len() == 71, "{hash}");
    for key in [
        "params_total",
        "params_active",
        "flops_per_token",
        "total_flops",
    ] {
        assert!(v[key].as_f64().unwrap() > 0.0, "{key} in {v}");
    }
    assert!(v["params_active"].as_u64() < v["params_total"].as_u64());
}

#[test]
fn text_output_names_hash_and_cost() {
    let out = glassbox(&["spec", "check", "examples/hero.toml"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("spec hash       blake3:"), "{text}");
    assert!(text.contains("FLOPs"), "{text}");
}

#[test]
fn ladder_example_checks_every_rung() {
    let out = glassbox(&["spec", "check", "examples/ladder.toml", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(v["rungs"].as_array().unwrap().len() >= 3, "{v}");
}

/// `spec check` expands a sweep, printing each child's hash and cost, the total,
/// and the parent hash an approval binds; a bad child is named with its values.
#[test]
fn sweep_example_checks_every_child() {
    let out = glassbox(&["spec", "check", "examples/sweep.toml", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let children = v["children"].as_array().unwrap();
    assert_eq!(children.len(), 4, "{v}");
    assert_eq!(children[3]["values"]["model.moe.n_experts"], 8);
    assert_eq!(children[3]["values"]["train.lr"], 0.003);
    let total: f64 = children
        .iter()
        .map(|c| c["total_flops"].as_f64().unwrap())
        .sum();
    assert!((v["total_flops"].as_f64().unwrap() - total).abs() <= 1e-6 * total);
    assert!(v["parent_hash"].as_str().unwrap().starts_with("blake3:"));
    let text = stdout(&glassbox(&["spec", "check", "examples/sweep.toml"]));
    assert!(
        text.contains("valid sweep (grid), 4 children, best by eval/markov/loss"),
        "{text}"
    );
    assert!(text.contains("moe-experts-sweep-s3"), "{text}");
    assert!(text.contains("n_experts=8, lr=0.003"), "{text}");

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/sweep.toml"))
            .unwrap()
            .replace("[4, 8]", "[4, 0]"),
    )
    .unwrap();
    let out = glassbox(&["spec", "check", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("sweep child 2 (n_experts=0, lr=0.001) -> model.moe.n_experts = 0"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn three_mistakes_print_all_three_and_exit_1() {
    let out = glassbox(&[
        "spec",
        "check",
        "schemas/tests/data/invalid/three_mistakes.toml",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("3 error(s)"), "{err}");
    for needle in [
        "experiment.slug = \"Bad Slug!\"",
        "model.dropuot: unknown field `dropuot`",
        "train.lr = -0.5: must be >= 0",
    ] {
        assert!(err.contains(needle), "missing {needle:?} in\n{err}");
    }
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn errors_as_json_carry_path_value_rule() {
    let out = glassbox(&[
        "spec",
        "check",
        "schemas/tests/data/invalid/cross_field.toml",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["valid"], false);
    let first = &v["errors"][1];
    assert_eq!(first["path"], "model.moe.top_k");
    assert_eq!(first["value"], "9");
    assert_eq!(first["rule"], "must be <= model.moe.n_experts (8)");
}

#[test]
fn syntax_error_prints_line_and_column() {
    let out = glassbox(&[
        "spec",
        "check",
        "schemas/tests/data/invalid/syntax_error.toml",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("syntax_error.toml:11:11: TOML syntax error"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn unknown_field_is_named_with_a_suggestion() {
    let out = glassbox(&["spec", "check", "schemas/tests/data/invalid/typos.toml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("unknown field `topk`; did you mean `top_k`?"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn missing_file_is_an_operational_error_without_backtrace() {
    let out = glassbox(&["spec", "check", "does/not/exist.toml"]);
    assert_eq!(out.status.code(), Some(3));
    let err = stderr(&out);
    assert!(
        err.starts_with("error: cannot read does/not/exist.toml"),
        "{err}"
    );
    assert!(
        !err.contains("panicked") && !err.contains("backtrace"),
        "{err}"
    );
}

#[test]
fn oversized_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.toml");
    std::fs::write(&path, "#".repeat(2 << 20)).unwrap();
    let out = glassbox(&["spec", "check", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("limit is 1048576 bytes"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn schema_command_prints_the_committed_schema() {
    let out = glassbox(&["spec", "schema"]);
    assert_eq!(out.status.code(), Some(0));
    let committed = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas/json/experiment-spec.schema.json"),
    )
    .unwrap();
    assert_eq!(stdout(&out), committed);
}

#[test]
fn version_names_the_git_revision() {
    let out = glassbox(&["--version"]);
    let text = stdout(&out);
    // "glassbox 0.1.0 (<40 hex>[-dirty])": the full commit, as run records name it; or
    // "(unknown)" when built outside a git checkout.
    let rev = text
        .trim()
        .rsplit('(')
        .next()
        .unwrap()
        .trim_end_matches(')');
    let hex = rev.trim_end_matches("-dirty");
    assert!(
        rev == "unknown" || (hex.len() == 40 && hex.bytes().all(|b| b.is_ascii_hexdigit())),
        "{text}"
    );
}
