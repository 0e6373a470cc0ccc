//! A disk that fills while a run is recorded, against the real binary: the lab lives on a small
//! tmpfs, mounted in a mount namespace of the test's own (`unshare --user --map-root-user
//! --mount`, so no root is needed and nothing outside sees it), with a filler file leaving a
//! few hundred kilobytes free. `glassbox run` trains the tiny example there until a write
//! fails; then the filler is removed ("space returns") and a worker takes over.
//!
//! What must hold, for each amount of free space tried:
//! - nothing is acknowledged that is not in the log: a `result entry N` printed by `run`, or a
//!   `result_entry` in its `summary.json`, is entry N of the log as it stood right after `run`
//!   exited, and a `result`;
//! - a run that could not record its end says so: exit code 3 (operational) with an error that
//!   names the cause (`No space left on device`, or SQLite's `database or disk is full`), never
//!   "cancelled", a lost lease, a panic or a backtrace;
//! - once space returns, a worker ends any job left open, `verify` passes, and the job has
//!   exactly one `result` entry.

use std::path::Path;
use std::process::Command;

use glassbox_schemas::{EntryKind, LedgerEntry};

use crate::support::{BIN, entries};

/// The tmpfs's size; the filler leaves `free_kb` of it.
const TMPFS_MB: u64 = 32;

/// The case as a shell script run inside the namespace. Every step's output and exit code go
/// to `$OUT`, outside the tmpfs, for the test to read after the namespace is gone.
const SCRIPT: &str = r#"
set -u
mount -t tmpfs -o "size=${TMPFS_MB}m" tmpfs "$MNT" || { echo "cannot mount a tmpfs" >&2; exit 90; }
LAB="$MNT/lab"
export GLASSBOX_CONFIG="$MNT/lab.toml"
export GLASSBOX_PEAK_GFLOPS=100
export GLASSBOX_LOG=warn
export GLASSBOX_STATE_DIR="$OUT/auditor"
printf '[worker]\nlease_seconds = 2\nheartbeat_seconds = 0.5\npoll_millis = 100\nmetrics_flush_steps = 20\n' > "$GLASSBOX_CONFIG"
"$BIN" init --lab "$LAB" > "$OUT/init.out" 2>&1 || exit 91
avail=$(df --output=avail -k "$MNT" | tail -n 1 | tr -d ' ')
fallocate -l "$(( (avail - FREE_KB) * 1024 ))" "$MNT/filler" || exit 92
"$BIN" run "$SPEC" --lab "$LAB" --threads 1 --out "$OUT/run" > "$OUT/run.stdout" 2> "$OUT/run.stderr"
echo $? > "$OUT/run.rc"
cp -r "$LAB" "$OUT/lab-at-exit"
rm -f "$MNT/filler"
sleep 3
"$BIN" worker --lab "$LAB" --exit-when-idle --threads 1 > "$OUT/worker.stdout" 2> "$OUT/worker.stderr"
echo $? > "$OUT/worker.rc"
"$BIN" verify --lab "$LAB" > "$OUT/verify.stdout" 2> "$OUT/verify.stderr"
echo $? > "$OUT/verify.rc"
"$BIN" jobs --lab "$LAB" --json > "$OUT/jobs.json" 2> "$OUT/jobs.stderr"
cp -r "$LAB" "$OUT/lab-after"
"#;

/// The tiny example, shorter, with a snapshot every 60 steps (about 3 MB each: parameters and
/// Adam's moments) and metric chunks every 20: the disk fills during training for the free
/// space tried, and the whole run fits once the filler is gone.
fn spec_text() -> String {
    include_str!("../../examples/tiny.toml")
        .replace("steps = 300", "steps = 180\ncheckpoint_interval = 60")
        .replace("warmup_steps = 30", "warmup_steps = 10")
        .replace("eval_interval = 100", "eval_interval = 30")
}

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_default()
}

fn code(dir: &Path, name: &str) -> i32 {
    read(dir, name).trim().parse().unwrap_or(-1)
}

fn results_of(entries: &[LedgerEntry], run: &str) -> usize {
    entries
        .iter()
        .filter(|e| e.kind() == EntryKind::Result)
        .filter(|e| e.body.run().is_some_and(|r| r.0 == run))
        .count()
}

fn case(free_kb: u64) {
    let dir = tempfile::tempdir().unwrap();
    let (mnt, out) = (dir.path().join("mnt"), dir.path().join("out"));
    std::fs::create_dir_all(&mnt).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    let spec = dir.path().join("tiny.toml");
    std::fs::write(&spec, spec_text()).unwrap();
    let status = Command::new("unshare")
        .args(["--user", "--map-root-user", "--mount", "bash", "-c", SCRIPT])
        .env("BIN", BIN)
        .env("MNT", &mnt)
        .env("OUT", &out)
        .env("SPEC", &spec)
        .env("FREE_KB", free_kb.to_string())
        .env("TMPFS_MB", TMPFS_MB.to_string())
        .status()
        .expect("`unshare` (util-linux) runs");
    assert!(
        status.success(),
        "free {free_kb} KB: the namespace script failed ({status}); this test needs \
         `unshare --user --map-root-user --mount` (unprivileged user namespaces, or root)\n{}",
        read(&out, "init.out")
    );
    let context = || {
        format!(
            "free {free_kb} KB\n--- run (exit {}) stdout:\n{}\n--- run stderr:\n{}\n--- worker (exit {}):\n{}{}",
            code(&out, "run.rc"),
            read(&out, "run.stdout"),
            read(&out, "run.stderr"),
            code(&out, "worker.rc"),
            read(&out, "worker.stdout"),
            read(&out, "worker.stderr"),
        )
    };

    // 1. Nothing acknowledged that the log did not hold when `run` exited.
    let at_exit = entries(&out.join("lab-at-exit"));
    let stdout = read(&out, "run.stdout");
    let run_rc = code(&out, "run.rc");
    let mut acknowledged: Vec<u64> = stdout
        .lines()
        .filter_map(|l| l.split(" result entry ").nth(1))
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .collect();
    if let Ok(text) = std::fs::read_to_string(out.join("run/summary.json")) {
        let summary: serde_json::Value = serde_json::from_str(&text).unwrap();
        if let Some(n) = summary["ledger"]["result_entry"].as_u64() {
            acknowledged.push(n);
        }
    }
    for n in &acknowledged {
        let e = at_exit.get(*n as usize).unwrap_or_else(|| {
            panic!(
                "entry {n} acknowledged, the log has {}\n{}",
                at_exit.len(),
                context()
            )
        });
        assert_eq!(e.kind(), EntryKind::Result, "{}", context());
    }

    // 2. A run that could not record its end says why, as an operational error.
    let stderr = read(&out, "run.stderr");
    if acknowledged.is_empty() {
        assert_eq!(run_rc, 3, "{}", context());
        // The kernel's words, or SQLite's for the same thing.
        assert!(
            stderr.contains("No space left on device") || stderr.contains("disk is full"),
            "{}",
            context()
        );
    }
    for bad in [
        "panicked",
        "RUST_BACKTRACE",
        "no longer holds the lease",
        "cancel requested",
    ] {
        assert!(!stderr.contains(bad), "`{bad}` in the error\n{}", context());
        assert!(
            !stdout.contains(bad),
            "`{bad}` in the output\n{}",
            context()
        );
    }
    for line in stderr.lines() {
        assert!(
            line.matches("No space left on device").count() <= 1,
            "the cause is repeated: {line}"
        );
    }

    // 3. Once space returns: the job ends on the record, once, and the ledger verifies.
    assert_eq!(
        code(&out, "verify.rc"),
        0,
        "{}\n{}",
        read(&out, "verify.stderr"),
        context()
    );
    let jobs: serde_json::Value =
        serde_json::from_str(&read(&out, "jobs.json")).unwrap_or(serde_json::Value::Null);
    let after = entries(&out.join("lab-after"));
    for job in jobs.as_array().into_iter().flatten() {
        let state = job["state"].as_str().unwrap_or_default();
        assert!(
            !matches!(state, "queued" | "leased" | "running" | "held"),
            "job {} is still {state}\n{}",
            job["id"],
            context()
        );
        let run = job["run_id"]
            .as_str()
            .map(String::from)
            .unwrap_or_else(|| format!("run-{:06}", job["id"].as_u64().unwrap_or_default()));
        let run = run.as_str();
        assert_eq!(
            results_of(&after, run),
            1,
            "run {run} has not exactly one result\n{}",
            context()
        );
    }
    eprintln!(
        "disk full, {free_kb} KB free: run exit {run_rc}, {} entries at exit, {} after; jobs {}",
        at_exit.len(),
        after.len(),
        jobs
    );
}

#[test]
fn a_disk_that_fills_mid_run_acknowledges_only_the_log_and_the_job_ends_on_the_record() {
    // Too little to open the queue; enough for the proposal but not the first snapshot (about
    // 3 MB: parameters and Adam's moments); enough for one snapshot, not the second.
    for free_kb in [200, 2000, 5000] {
        case(free_kb);
    }
}
