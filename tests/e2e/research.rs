//! Research workflows as a user runs them, with real processes: a lab whose `[reproduce]` policy is "top"
//! and whose one `[[leaderboard]]` ranks `train/loss`. A good run trained by one `glassbox
//! worker` is reproduced automatically by the other worker process (never by the one that made
//! it) and ranked; a weaker run, which would not enter the top 1, is listed as awaiting
//! reproduction and not ranked. `glassbox board` over a copy of the log and blobs alone (no
//! database, no config beside the board definitions) prints the identical board. And a 2×2
//! sweep queued with `glassbox run --enqueue` runs as four children.

use std::path::Path;
use std::process::{Child, Stdio};

use glassbox_schemas::EntryKind;

use crate::support::{MICRO_MODEL, body, entries};

fn spec(dir: &Path, slug: &str, lr: f64, steps: u64) -> std::path::PathBuf {
    let text = format!(
        r#"
[experiment]
name = "{slug}"
slug = "{slug}"
hypothesis = "Independent reproduction makes the leaderboard trustworthy."
{MICRO_MODEL}[[data.mixture]]
domain = "markov"
generator = {{ kind = "markov", seed = 1, order = 1, alphabet = 8, branching = 2 }}
[train]
steps = {steps}
batch_size = 2
lr = {lr}
eval_interval = 500
eval_batches = 1
checkpoint_interval = 100
seed = 5
"#
    );
    let p = dir.join(format!("{slug}.toml"));
    std::fs::write(&p, text).unwrap();
    p
}

const CONFIG: &str = r#"
[worker]
poll_millis = 100
[reproduce]
policy = "top"
top = 1
on_other_worker = true
[[leaderboard]]
name = "loss"
metric = "train/loss"
direction = "min"
compute = "flops"
"#;

fn glassbox(dir: &Path, args: &[&str]) -> std::process::Command {
    let db = format!("sqlite://{}", dir.join("queue.db").display());
    crate::support::glassbox(dir, Some(&db), args)
}

fn ok(dir: &Path, args: &[&str]) -> String {
    let out = glassbox(dir, args).output().unwrap();
    assert!(
        out.status.success(),
        "glassbox {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn worker(dir: &Path, id: &str) -> Child {
    glassbox(
        dir,
        &["worker", "--exit-when-idle", "--threads", "1", "--id", id],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap()
}

/// A worker that serves until stopped.
fn serving(dir: &Path, id: &str) -> Child {
    glassbox(dir, &["worker", "--threads", "1", "--id", id])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Stops a serving worker as an operator does (SIGTERM: after the current job).
fn stop(child: Child) -> String {
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    finish(child)
}

fn finish(child: Child) -> String {
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    text
}

#[test]
fn a_board_ranks_the_reproduced_run_and_lists_the_other_apart() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("lab.toml"), CONFIG).unwrap();
    let good = spec(d, "good-lr", 0.01, 16);
    let weak = spec(d, "weak-lr", 0.00001, 16);

    // The good run, with two workers serving until its reproduction is on the record: the one
    // that did not train it reproduces it.
    ok(d, &["run", good.to_str().unwrap(), "--enqueue", "--json"]);
    let (a, b) = (serving(d, "worker-a"), serving(d, "worker-b"));
    let lab = d.join("lab");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
    while !entries(&lab)
        .iter()
        .any(|e| e.kind() == EntryKind::Reproduction)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no reproduction within 3 minutes"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let (a, b) = (stop(a), stop(b));
    let log = entries(&lab);
    let started = log
        .iter()
        .find(|e| e.kind() == EntryKind::RunStarted)
        .unwrap();
    let maker = body(started)["worker"].as_str().unwrap().to_string();
    let repro = log
        .iter()
        .find(|e| e.kind() == EntryKind::Reproduction)
        .unwrap_or_else(|| panic!("no reproduction was recorded:\n{a}\n{b}"));
    let r = body(repro);
    assert_eq!(r["outcome"], "reproduced", "{r}");
    assert_eq!(r["automatic"], true);
    assert_eq!(r["comparison"], "bitwise");
    assert_ne!(
        r["worker"].as_str().unwrap(),
        maker,
        "reproduced on the worker that made it"
    );

    // The weaker run would not enter the top 1: it is not reproduced.
    ok(d, &["run", weak.to_str().unwrap(), "--enqueue", "--json"]);
    finish(worker(d, "worker-a"));
    assert_eq!(
        entries(&lab)
            .iter()
            .filter(|e| e.kind() == EntryKind::Reproduction)
            .count(),
        1
    );

    let board: serde_json::Value =
        serde_json::from_str(&ok(d, &["board", "loss", "--json"])).unwrap();
    let ranked = board["ranked"].as_array().unwrap();
    assert_eq!(ranked.len(), 1, "{board}");
    assert_eq!(ranked[0]["experiment"], "local/good-lr");
    assert_eq!(ranked[0]["rank"], 1);
    assert_eq!(ranked[0]["pareto"], true);
    let awaiting = board["awaiting"].as_array().unwrap();
    assert_eq!(awaiting.len(), 1, "{board}");
    assert_eq!(awaiting[0]["experiment"], "local/weak-lr");
    assert!(
        awaiting[0].get("rank").is_none(),
        "an awaiting run is never ranked"
    );
    assert!(board["failed"].as_array().unwrap().is_empty());
    assert!(ranked[0]["compute"].as_f64().unwrap() > 0.0);

    // The same board from a copy of the log and blobs alone: no database, no queue.
    let copy = d.join("copy");
    for part in ["log", "blobs"] {
        copy_dir(&lab.join(part), &copy.join(part));
    }
    std::fs::copy(lab.join("vkey"), copy.join("vkey")).unwrap();
    std::fs::write(copy.join("lab.toml"), CONFIG).unwrap();
    let out = std::process::Command::new(crate::support::BIN)
        .args(["board", "loss", "--json", "--lab"])
        .arg(&copy)
        .env_remove("GLASSBOX_CONFIG")
        .env_remove("GLASSBOX_LAB")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let again: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        again, board,
        "the board rebuilt from the copied log differs"
    );
    let text = ok(d, &["board"]);
    assert!(text.contains("awaiting reproduction"), "{text}");

    // And the dashboard serves the same board.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let bind = format!("127.0.0.1:{port}");
    let mut serve = glassbox(d, &["serve", "--no-worker", "--bind", &bind])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(d.join("serve.log")).unwrap())
        .spawn()
        .unwrap();
    let url = format!("http://{bind}/api/v1/boards/loss");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let served: serde_json::Value = loop {
        if let Ok(mut r) = ureq::get(&url).call() {
            break serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
        }
        if std::time::Instant::now() > deadline || serve.try_wait().unwrap().is_some() {
            let _ = serve.kill();
            panic!(
                "the dashboard did not serve {url}: {}",
                std::fs::read_to_string(d.join("serve.log")).unwrap_or_default()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    let _ = serve.kill();
    let _ = serve.wait();
    assert_eq!(
        served["ranked"], board["ranked"],
        "the served board differs"
    );
    assert_eq!(served["awaiting"], board["awaiting"]);
    assert_eq!(served["failed"], board["failed"]);
}

#[test]
fn a_sweep_is_queued_with_one_command_and_runs_as_its_children() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("lab.toml"), "[worker]\npoll_millis = 100\n").unwrap();
    let base = std::fs::read_to_string(spec(d, "lr-grid", 0.003, 8)).unwrap();
    let file = d.join("sweep.toml");
    std::fs::write(
        &file,
        format!("[sweep]\nmetric = \"train/loss\"\ntrain.lr = [0.003, 0.01]\ntrain.steps = [8, 12]\n{base}"),
    )
    .unwrap();
    let out: serde_json::Value = serde_json::from_str(&ok(
        d,
        &["run", file.to_str().unwrap(), "--enqueue", "--json"],
    ))
    .unwrap();
    assert_eq!(out["sweep"], "local/lr-grid");
    assert_eq!(out["children"].as_array().unwrap().len(), 4);
    let w = finish(worker(d, "worker-a"));
    assert_eq!(w.matches("succeeded").count(), 4, "{w}");
    let log = entries(&d.join("lab"));
    assert_eq!(
        log.iter().filter(|e| e.kind() == EntryKind::Sweep).count(),
        1
    );
    let approvals: Vec<_> = log
        .iter()
        .filter(|e| e.kind() == EntryKind::Approval)
        .map(body)
        .collect();
    assert_eq!(approvals.len(), 4);
    assert!(approvals.iter().all(|a| a["sweep"] == out["parent_hash"]));
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}
