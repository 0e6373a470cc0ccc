//! Workers as real processes: `glassbox run --enqueue` queues a job, `glassbox worker` trains
//! it, and a worker killed with SIGKILL mid-run loses the job to another worker, which resumes
//! from the last checkpoint blob and ends with exactly the parameters of an uninterrupted run
//! (the CPU backend is bitwise deterministic). An eval job whose worker is killed the same way
//! mid-evaluation is taken over and scored again, and the record holds one `evaluation` entry
//! for it, equal to a by-hand evaluation of the snapshot. On SQLite and on PostgreSQL.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use glassbox_schemas::record::ResultBody;
use glassbox_schemas::{EntryKind, LedgerEntry, RunStatus};

use crate::support::{MICRO_MODEL, entries, postgres_schema};

fn write_spec(dir: &Path, steps: u64) -> PathBuf {
    let text = format!(
        r#"
[experiment]
name = "worker takeover"
slug = "worker-takeover"
hypothesis = "A job whose worker dies resumes elsewhere and ends bitwise the same."
{MICRO_MODEL}[[data.mixture]]
domain = "markov"
generator = {{ kind = "markov", seed = 1, order = 1, alphabet = 8, branching = 2 }}
[train]
steps = {steps}
batch_size = 2
lr = 0.003
eval_interval = 500
eval_batches = 1
checkpoint_interval = 25
seed = 5
"#
    );
    let p = dir.join("spec.toml");
    std::fs::write(&p, text).unwrap();
    p
}

/// `glassbox` with the test's lab, queue and lab config.
fn glassbox(dir: &Path, db: &str, args: &[&str]) -> Command {
    crate::support::glassbox(dir, Some(db), args)
}

fn jobs(dir: &Path, db: &str) -> serde_json::Value {
    let out = glassbox(dir, db, &["jobs", "--json"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn spawn_worker(dir: &Path, db: &str, id: &str) -> Child {
    glassbox(
        dir,
        db,
        &["worker", "--exit-when-idle", "--threads", "1", "--id", id],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap()
}

fn sigkill_takeover(db: &str) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("lab.toml"),
        "[worker]\nlease_seconds = 2\nheartbeat_seconds = 0.5\nmetrics_flush_steps = 100\n",
    )
    .unwrap();
    let spec = write_spec(d, 1500);
    let out = glassbox(
        d,
        db,
        &["run", spec.to_str().unwrap(), "--enqueue", "--json"],
    )
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let queued: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(queued["job"], 1);

    // Worker A trains until at least one checkpoint is recorded, then is killed outright.
    let mut a = spawn_worker(d, db, "worker-a");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let j = jobs(d, db);
        if j[0]["checkpoint_step"].as_u64().unwrap_or(0) >= 50 {
            break;
        }
        assert!(Instant::now() < deadline, "no checkpoint recorded: {j}");
        assert!(a.try_wait().unwrap().is_none(), "worker A ended early");
        std::thread::sleep(Duration::from_millis(50));
    }
    a.kill().unwrap(); // SIGKILL
    a.wait().unwrap();
    let j = jobs(d, db);
    assert_eq!(
        j[0]["state"], "running",
        "the dead worker still holds the lease: {j}"
    );

    // Worker B takes the job over once the lease runs out, resumes and finishes.
    let b = spawn_worker(d, db, "worker-b");
    let out = b.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j = jobs(d, db);
    assert_eq!(j[0]["state"], "succeeded", "{j}");
    assert_eq!(j[0]["attempts"], 2, "{j}");

    let all = entries(&d.join("lab"));
    let started: Vec<&LedgerEntry> = all
        .iter()
        .filter(|e| e.kind() == EntryKind::RunStarted)
        .collect();
    assert_eq!(started.len(), 2, "one run_started per attempt");
    let resumed = crate::support::body(started[1])["resumed_from_step"]
        .as_u64()
        .unwrap();
    assert!(
        resumed >= 50,
        "worker B resumed from the checkpoint, at {resumed}"
    );
    // Each attempt is named on the record, and so are its metric chunks: no two chunk entries
    // share a name, though the second attempt records again the steps after the snapshot.
    let attempts: Vec<u64> = started
        .iter()
        .map(|e| crate::support::body(e)["attempt"].as_u64().unwrap())
        .collect();
    assert_eq!(attempts, [1, 2]);
    let chunk_names: Vec<String> = all
        .iter()
        .filter(|e| e.kind() == EntryKind::Artifact)
        .filter_map(|e| crate::support::body(e)["name"].as_str().map(String::from))
        .filter(|n| n.starts_with("metrics/"))
        .collect();
    let distinct: std::collections::BTreeSet<&String> = chunk_names.iter().collect();
    assert_eq!(distinct.len(), chunk_names.len(), "{chunk_names:?}");
    assert!(chunk_names.iter().any(|n| n.contains("/attempt-1/")));
    assert!(chunk_names.iter().any(|n| n.contains("/attempt-2/")));
    let results: Vec<ResultBody> = all
        .iter()
        .filter(|e| e.kind() == EntryKind::Result)
        .map(|e| e.body_as().unwrap())
        .collect();
    assert_eq!(results.len(), 1, "exactly one result");
    assert_eq!(results[0].ending.status, RunStatus::Succeeded);
    assert_eq!(results[0].ending.steps, 1500);

    // The same spec trained without interruption and without the lab.
    let reference = glassbox(
        d,
        db,
        &[
            "run",
            spec.to_str().unwrap(),
            "--no-ledger",
            "--json",
            "--threads",
            "1",
            "--out",
            d.join("reference").to_str().unwrap(),
        ],
    )
    .output()
    .unwrap();
    assert!(reference.status.success());
    let r: serde_json::Value = serde_json::from_slice(&reference.stdout).unwrap();
    assert_eq!(
        results[0].params_blake3.map(|h| h.to_string()).as_deref(),
        r["outcome"]["params_blake3"].as_str(),
        "the resumed run ends with the uninterrupted run's parameters"
    );

    // The whole ledger still verifies.
    let v = glassbox(d, db, &["verify"]).output().unwrap();
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));
}

#[test]
fn sigkilled_worker_is_taken_over_and_resumes_bitwise_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("queue.db").display());
    sigkill_takeover(&db);
}

#[test]
fn sigkilled_worker_is_taken_over_and_resumes_bitwise_postgres() {
    sigkill_takeover(&postgres_schema("takeover"));
}

/// The queue's eval jobs (`jobs --json`), in queue order.
fn eval_jobs(dir: &Path, db: &str) -> Vec<serde_json::Value> {
    let all = jobs(dir, db);
    all.as_array()
        .unwrap()
        .iter()
        .filter(|j| j["kind"] == "eval")
        .cloned()
        .collect()
}

/// Runs `glassbox ARGS` to success and returns its stdout.
fn ok(dir: &Path, db: &str, args: &[&str]) -> Vec<u8> {
    let out = glassbox(dir, db, args).output().unwrap();
    assert!(
        out.status.success(),
        "glassbox {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn sigkill_mid_evaluation(db: &str) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("lab.toml"),
        "[worker]\nlease_seconds = 2\nheartbeat_seconds = 0.5\n\
         [evals]\nsuites = [\"takeover-choice\"]\n",
    )
    .unwrap();
    // One snapshot (at the last step), so one eval job.
    let spec = write_spec(d, 40).to_str().unwrap().to_string();
    let text = std::fs::read_to_string(&spec)
        .unwrap()
        .replace("checkpoint_interval = 25", "checkpoint_interval = 40");
    std::fs::write(&spec, text).unwrap();
    // A suite big enough that scoring it takes seconds on one thread of a debug build.
    let suite = d.join("suite.jsonl");
    let suite_arg = suite.to_str().unwrap();
    ok(
        d,
        db,
        &[
            "data",
            "eval-suite",
            "generate",
            "--from",
            &spec,
            "--kind",
            "multiple-choice",
            "--items",
            "6000",
            "--out",
            suite_arg,
        ],
    );
    ok(d, db, &["init"]);
    ok(
        d,
        db,
        &[
            "data",
            "eval-suite",
            "import",
            suite_arg,
            "--name",
            "takeover-choice",
            "--kind",
            "multiple-choice",
        ],
    );
    ok(d, db, &["run", &spec, "--enqueue", "--json"]);

    // Worker A trains the run, then leases the snapshot's eval job; it is killed as soon as the
    // queue shows it evaluating.
    let mut a = spawn_worker(d, db, "worker-a");
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let evals = eval_jobs(d, db);
        if evals.first().is_some_and(|j| j["state"] == "running") {
            break;
        }
        assert!(Instant::now() < deadline, "no eval job started: {evals:?}");
        assert!(a.try_wait().unwrap().is_none(), "worker A ended early");
        std::thread::sleep(Duration::from_millis(20));
    }
    a.kill().unwrap(); // SIGKILL
    a.wait().unwrap();
    let evals = eval_jobs(d, db);
    assert_eq!(evals.len(), 1, "{evals:?}");
    assert_eq!(
        evals[0]["state"], "running",
        "the dead worker holds the lease"
    );
    assert_eq!(evals[0]["lease_owner"], "worker-a");
    let evaluation = |all: &[LedgerEntry]| -> Vec<serde_json::Value> {
        all.iter()
            .filter(|e| e.kind() == EntryKind::Evaluation)
            .map(crate::support::body)
            .collect()
    };
    assert!(
        evaluation(&entries(&d.join("lab"))).is_empty(),
        "killed before its evaluation was recorded"
    );

    // Worker B takes the eval job over once the lease runs out and scores it from the start.
    let b = spawn_worker(d, db, "worker-b");
    let out = b.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let evals = eval_jobs(d, db);
    assert_eq!(evals[0]["state"], "succeeded", "{evals:?}");
    assert_eq!(evals[0]["attempts"], 2, "{evals:?}");
    let recorded = evaluation(&entries(&d.join("lab")));
    assert_eq!(recorded.len(), 1, "one evaluation entry: {recorded:?}");
    let e = &recorded[0];
    assert_eq!(e["outcome"], "evaluated", "{e}");
    assert_eq!(e["worker"], "worker-b", "{e}");
    assert_eq!(e["job"], evals[0]["id"], "{e}");
    assert_eq!(e["items"], 6000, "{e}");

    // The same snapshot scored by hand on two threads: the same metrics, bit for bit.
    let run = e["run"].as_str().unwrap().to_string();
    let by_hand: serde_json::Value = serde_json::from_slice(&ok(
        d,
        db,
        &[
            "eval",
            &run,
            "--suite",
            "takeover-choice",
            "--threads",
            "2",
            "--json",
        ],
    ))
    .unwrap();
    let by_hand = by_hand
        .as_array()
        .and_then(|a| a.first())
        .cloned()
        .unwrap_or(by_hand);
    assert_eq!(by_hand["metrics"], e["metrics"], "{by_hand}");

    let v = glassbox(d, db, &["verify"]).output().unwrap();
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));
}

#[test]
fn sigkilled_evaluation_is_taken_over_with_one_entry_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("queue.db").display());
    sigkill_mid_evaluation(&db);
}

#[test]
fn sigkilled_evaluation_is_taken_over_with_one_entry_postgres() {
    sigkill_mid_evaluation(&postgres_schema("eval_takeover"));
}

#[test]
fn jobs_cancel_of_an_unknown_job_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("lab.toml"), "").unwrap();
    let db = format!("sqlite://{}", d.join("queue.db").display());
    let init = glassbox(d, &db, &["init"]).output().unwrap();
    assert!(init.status.success());
    let out = glassbox(d, &db, &["jobs", "cancel", "42"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no job 42"), "{err}");
}
