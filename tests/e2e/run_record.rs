//! What a run's record says about the program and the machine that made it, end to end with
//! the real binary: `run_started` names the full commit, whether the tree was dirty, and the
//! BLAKE3 of the executable; `glassbox reproduce` says whether it is the same binary; the
//! run's own log is an `artifact`; and the lab's `[limits]` refuse a spec over the memory
//! limit with the figure.

use std::path::Path;

use crate::support::MICRO_MODEL;
use glassbox_schemas::record::{BinaryComparison, ReproductionBody, RunStartedBody};
use glassbox_schemas::{Blake3Hash, EntryKind};

fn write_spec(dir: &Path) -> std::path::PathBuf {
    let text = format!(
        r#"
[experiment]
name = "run record"
slug = "run-record"
hypothesis = "A run's record names the exact program that made it."
{MICRO_MODEL}[[data.mixture]]
domain = "markov"
generator = {{ kind = "markov", seed = 1, order = 1, alphabet = 8, branching = 2 }}
[train]
steps = 4
batch_size = 2
lr = 0.003
eval_interval = 4
eval_batches = 1
seed = 1
"#
    );
    let p = dir.join("spec.toml");
    std::fs::write(&p, text).unwrap();
    p
}

fn glassbox(dir: &Path, args: &[&str]) -> std::process::Output {
    crate::support::glassbox(dir, None, args).output().unwrap()
}

fn is_commit(s: &str) -> bool {
    s.len() == 40
        && s.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// `run_started` names the full commit, the dirty flag and the executable's BLAKE3;
/// `glassbox reproduce` with the same binary says so, in its output and its entry.
/// The run's log is on the record.
#[test]
fn the_record_names_the_exact_binary_and_reproduce_says_it_is_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let spec = write_spec(d);
    let out = glassbox(d, &["run", spec.to_str().unwrap(), "--threads", "1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let entries = crate::support::entries(&d.join("lab"));
    let started: RunStartedBody = entries
        .iter()
        .find(|e| e.kind() == EntryKind::RunStarted)
        .unwrap()
        .body_as()
        .unwrap();
    let build = started.build.expect("run_started records the build");
    let exe = std::fs::read(crate::support::BIN).unwrap();
    assert_eq!(build.executable_blake3, Blake3Hash::of(&exe));
    // Built from a git checkout (as in CI): the full commit, and `-dirty` exactly when dirty.
    let (commit, dirty) = match started.code_revision.strip_suffix("-dirty") {
        Some(c) => (c, true),
        None => (started.code_revision.as_str(), false),
    };
    assert!(is_commit(commit), "{}", started.code_revision);
    assert_eq!(build.commit.as_deref(), Some(commit));
    assert_eq!(build.dirty, dirty);

    let log = entries
        .iter()
        .find(|e| {
            e.kind() == EntryKind::Artifact
                && crate::support::body(e)["name"] == "logs/run-000001/attempt-1.log"
        })
        .expect("the run's log is an artifact");
    let blob = Blake3Hash::to_hex(&log.refs["artifact"]);
    let text =
        std::fs::read_to_string(d.join("lab/blobs").join(&blob[..2]).join(&blob[2..])).unwrap();
    assert!(text.contains("backend: cpu ("), "{text}");
    assert!(
        text.contains("run-000001 ended succeeded after 4 steps"),
        "{text}"
    );

    let out = glassbox(d, &["reproduce", "run-000001", "--threads", "1"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("program: same binary"), "{stdout}");
    let entries = crate::support::entries(&d.join("lab"));
    let repro: ReproductionBody = entries.last().unwrap().body_as().unwrap();
    assert_eq!(repro.outcome, "reproduced");
    assert_eq!(repro.binary, Some(BinaryComparison::SameBinary));
    assert_eq!(
        repro.build.unwrap().executable_blake3,
        build.executable_blake3
    );
}

/// A spec over the lab's `limits.max_memory_bytes` is refused before anything runs,
/// naming the figure and the key (exit 1, as for a spec that does not validate).
#[test]
fn a_spec_over_the_memory_limit_is_refused_by_glassbox_run() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let spec = write_spec(d);
    std::fs::write(d.join("lab.toml"), "[limits]\nmax_memory_bytes = 1000\n").unwrap();
    let out = crate::support::glassbox(d, None, &["run", spec.to_str().unwrap(), "--threads", "1"])
        .env("GLASSBOX_CONFIG", d.join("lab.toml"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("(1000 bytes) (limits.max_memory_bytes)"),
        "{stderr}"
    );
    assert!(stderr.contains("it needs about"), "{stderr}");
    let entries = crate::support::entries(&d.join("lab"));
    assert!(
        entries.iter().all(|e| e.kind() != EntryKind::Approval),
        "nothing was approved"
    );
}

/// An allocation the machine cannot satisfy ends the run `failed` with a result entry
/// naming it, and the process exits with the failed-run status instead of aborting. The address
/// space is capped at 3 GB (`RLIMIT_AS`) and the spec's first expert layer alone needs 3.2 GB of
/// parameters; the lab's memory limit is set high so that the refusal is the allocator's.
#[test]
fn a_run_whose_allocation_fails_ends_failed_on_the_record() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let spec = d.join("big.toml");
    std::fs::write(
        &spec,
        r#"
[experiment]
name = "too big for its address space"
slug = "too-big"
hypothesis = "An allocation failure is a failed run on the record, not an abort."
[model]
d_model = 1024
n_layers = 4
n_heads = 8
seq_len = 16
[model.moe]
n_experts = 64
top_k = 2
d_expert = 4096
[[data.mixture]]
domain = "markov"
generator = { kind = "markov", seed = 1, order = 1, alphabet = 8, branching = 2 }
[train]
steps = 1
batch_size = 1
lr = 0.003
eval_interval = 1
eval_batches = 1
seed = 1
"#,
    )
    .unwrap();
    std::fs::write(
        d.join("lab.toml"),
        "[limits]\nmax_memory_bytes = 1e12\nmax_flops_per_proposal = 1e18\n",
    )
    .unwrap();
    let mut cmd =
        crate::support::glassbox(d, None, &["run", spec.to_str().unwrap(), "--threads", "1"]);
    cmd.env("GLASSBOX_CONFIG", d.join("lab.toml"));
    // SAFETY: runs in the child between fork and exec; setrlimit is async-signal-safe and
    // touches nothing of the parent.
    unsafe {
        cmd.pre_exec(|| {
            let cap = libc::rlimit {
                rlim_cur: 3 << 30,
                rlim_max: 3 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &cap) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(13), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("status: failed") && stdout.contains("reason: cannot allocate"),
        "{stdout}\n{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    let entries = crate::support::entries(&d.join("lab"));
    let results: Vec<_> = entries
        .iter()
        .filter(|e| e.kind() == EntryKind::Result)
        .collect();
    assert_eq!(results.len(), 1, "one result entry");
    let body: glassbox_schemas::record::ResultBody = results[0].body_as().unwrap();
    assert_eq!(body.ending.status, glassbox_schemas::RunStatus::Failed);
    let reason = body.ending.reason.unwrap_or_default();
    assert!(reason.contains("cannot allocate"), "{reason}");
}

/// A bare run (`--no-ledger`) checks memory before it allocates, as a lab worker does: a spec
/// whose estimate is far over half this machine's RAM is refused at once with the figures and
/// the `budget_exceeded` exit code, and nothing is written.
#[test]
fn a_bare_run_over_the_machines_memory_is_refused_before_it_allocates() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("too-big.toml");
    std::fs::write(
        &spec,
        r#"[experiment]
name = "Too big for this machine"
slug = "too-big"
hypothesis = "A model far larger than half of this machine's memory is refused before it allocates."

[model]
d_model = 4096
n_layers = 32
n_heads = 32
seq_len = 512

[model.moe]
n_experts = 64
top_k = 8
d_expert = 4096

[[data.mixture]]
domain = "markov"
generator = { kind = "markov", seed = 7 }

[train]
steps = 10
batch_size = 1
lr = 0.001
"#,
    )
    .unwrap();
    let out_dir = dir.path().join("run");
    let out = crate::support::glassbox(
        dir.path(),
        None,
        &[
            "run",
            spec.to_str().unwrap(),
            "--no-ledger",
            "--out",
            out_dir.to_str().unwrap(),
        ],
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(11), "{stderr}");
    assert!(stderr.contains("not training: it needs about"), "{stderr}");
    assert!(stderr.contains("half of this machine's RAM"), "{stderr}");
    assert!(
        !out_dir.exists(),
        "the refused run wrote {}",
        out_dir.display()
    );
}
