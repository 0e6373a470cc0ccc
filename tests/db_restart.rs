//! The queue's PostgreSQL server restarted while a `glassbox worker` trains: the worker's
//! heartbeats and checkpoint updates ride out the outage (the pool reconnects), the job
//! finishes on its first attempt, and exactly one result is recorded.
//!
//! The test picks the moment: once the job has checkpointed, the worker is paused (SIGSTOP),
//! the server restarted (every connection the worker held is dropped), and the worker resumed
//! (SIGCONT) mid-run, so the run is short and cannot end before the restart however fast the
//! machine is.
//!
//! This restarts the real server (the script `cargo xtask test` provides, or `pg_ctlcluster ...
//! restart` as root), so it is the one end-to-end suite outside `tests/e2e/`: cargo runs test
//! binaries one after another, so no other test is using PostgreSQL while it runs.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[path = "e2e/support/mod.rs"]
mod support;
use support::MICRO_MODEL;

fn glassbox(dir: &Path, db: &str, args: &[&str]) -> Command {
    support::glassbox(dir, Some(db), args)
}

fn jobs(dir: &Path, db: &str) -> Option<serde_json::Value> {
    let out = glassbox(dir, db, &["jobs", "--json"]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

/// Restarts the tests' PostgreSQL: `GLASSBOX_TEST_POSTGRES_RESTART` (the script `cargo xtask
/// test` writes beside the cluster it provides), else the machine's Debian cluster with
/// `pg_ctlcluster` (as root).
fn restart_postgres() {
    if let Some(script) = std::env::var_os("GLASSBOX_TEST_POSTGRES_RESTART") {
        let status = Command::new(&script)
            .stdout(Stdio::null())
            .status()
            .unwrap_or_else(|e| panic!("cannot run {script:?}: {e}"));
        assert!(
            status.success(),
            "restarting PostgreSQL with {script:?} failed"
        );
        return;
    }
    let version = std::fs::read_dir("/etc/postgresql")
        .expect("a Debian PostgreSQL cluster (/etc/postgresql) is required")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().to_string())
        .next()
        .expect("a PostgreSQL version directory");
    let status = Command::new("pg_ctlcluster")
        .args(["--skip-systemctl-redirect", &version, "main", "restart"])
        .status()
        .expect("pg_ctlcluster is required to restart PostgreSQL");
    assert!(status.success(), "restarting PostgreSQL failed");
}

#[test]
fn a_worker_rides_out_a_postgres_restart() {
    let db = support::postgres_schema("restart");

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("lab.toml"),
        "[worker]\nlease_seconds = 20\nheartbeat_seconds = 0.3\n",
    )
    .unwrap();
    let spec = d.join("spec.toml");
    std::fs::write(
        &spec,
        format!(
            r#"
[experiment]
name = "db restart"
slug = "db-restart"
hypothesis = "A worker survives its database restarting."
{MICRO_MODEL}[[data.mixture]]
domain = "markov"
generator = {{ kind = "markov", seed = 1, order = 1, alphabet = 8, branching = 2 }}
[train]
steps = 3000
batch_size = 2
lr = 0.003
eval_interval = 5000
eval_batches = 1
checkpoint_interval = 50
seed = 5
"#
        ),
    )
    .unwrap();
    let out = glassbox(d, &db, &["run", spec.to_str().unwrap(), "--enqueue"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let worker = glassbox(
        d,
        &db,
        &["worker", "--exit-when-idle", "--threads", "1", "--id", "w"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(j) = jobs(d, &db)
            && j[0]["checkpoint_step"].as_u64().unwrap_or(0) >= 50
        {
            break;
        }
        assert!(Instant::now() < deadline, "the job never checkpointed");
        std::thread::sleep(Duration::from_millis(20));
    }
    let signal = |sig: &str| {
        let ok = Command::new("kill")
            .args([sig, &worker.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} failed");
    };
    signal("-STOP");
    // Paused mid-run: the job cannot have ended.
    let paused = jobs(d, &db).expect("the queue is readable");
    assert_eq!(paused[0]["state"], "running", "{paused}");
    restart_postgres();
    signal("-CONT");
    // The worker's connections died with the old server; the run goes on against the new one.
    let j = loop {
        if let Some(j) = jobs(d, &db) {
            break j;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_ne!(j[0]["state"], "failed", "{j}");
    let out = worker.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let j = loop {
        if let Some(j) = jobs(d, &db) {
            break j;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(j[0]["state"], "succeeded", "{j}\n{stderr}");
    assert_eq!(j[0]["attempts"], 1, "no takeover was needed: {j}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.matches("succeeded").count(), 1, "{stdout}");
}
