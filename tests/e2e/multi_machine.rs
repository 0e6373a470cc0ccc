//! The multi-machine deployment of docs/deploy.md, played on one machine with real processes:
//! PostgreSQL holds the queue, the flow and the ledger's sequencer, an S3-compatible object
//! store (moto, on loopback) holds the blobs and the public log, a `glassbox witness serve`
//! process cosigns the log's checkpoints, one `glassbox serve --no-worker` process runs the
//! dashboard and the bot and integrates the log (it alone holds the lab directory and its
//! signing key, and copies each checkpoint and its tiles into the bucket), and two
//! `glassbox worker` processes train, each in an empty directory of its own: no directory is
//! shared between processes. GitHub is the local stand-in (the bot's real
//! octocrab client talks to it over HTTP), served by this test. Five experiment issues arrive
//! as signed webhooks and are approved; one worker is killed with SIGKILL mid-run, and the
//! server (the integrator) is killed with SIGKILL once while jobs run and started again on
//! another host that has only the lab's signing key: it restores the log from the bucket. The
//! test checks what a maintainer would: every job ran to completion exactly once (one `result`
//! entry each, the killed one resumed by the other worker), every entry is in the log once,
//! every blob the ledger names is in the bucket and none in any directory, the workers' own
//! directories hold no key and no log, the bot commented each result, and `glassbox verify
//! --witness` passes against the bucket itself — its plain HTTP URL and `s3://` — with no
//! server of the lab's in between, and over HTTP against the running server.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use glassbox_github_bot::WEBHOOK_PATH;
use glassbox_github_bot::form::render_issue_form;
use glassbox_github_bot::local::{LOCAL_GITHUB_PREFIX, LocalIssues};
use glassbox_schemas::record::ResultBody;
use glassbox_schemas::{EntryKind, RunStatus};

use crate::support::moto::{self, Moto};
use crate::support::{MICRO_MODEL, entries, postgres_schema};

const REPO: &str = "open-lab/moe";
const MAINTAINER: &str = "grace";
const SECRET: &str = "multi-machine-webhook-secret";
const BUCKET: &str = "glassbox";
const PROPOSALS: u64 = 5;

/// A child process killed (if still running) on drop, its output kept in a file.
struct Proc {
    child: Child,
    name: String,
    log: std::path::PathBuf,
}

impl Proc {
    fn spawn(mut cmd: Command, dir: &Path, name: &str) -> Proc {
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let child = cmd
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        Proc {
            child,
            name: name.into(),
            log,
        }
    }

    fn output(&self) -> String {
        format!(
            "--- {} ---\n{}",
            self.name,
            std::fs::read_to_string(&self.log).unwrap_or_default()
        )
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port()
}

fn spec(i: u64) -> String {
    format!(
        r#"[experiment]
name = "multi machine {i}"
slug = "multi-machine-{i}"
hypothesis = "Run {i} of five trains once, wherever it lands."
{MICRO_MODEL}[[data.mixture]]
domain = "markov"
generator = {{ kind = "markov", seed = 1, order = 1, alphabet = 8, branching = 2 }}
[train]
steps = 600
batch_size = 2
lr = 0.003
eval_interval = 300
eval_batches = 1
checkpoint_interval = 25
seed = {i}
"#
    )
}

fn deliver(server: &str, event: &str, delivery: &str, payload: &serde_json::Value) {
    let body = serde_json::to_vec(payload).unwrap();
    let sig = glassbox_github_bot::signature::sign(SECRET.as_bytes(), &body);
    let resp = ureq::post(&format!("{server}{WEBHOOK_PATH}"))
        .header("content-type", "application/json")
        .header("x-github-event", event)
        .header("x-github-delivery", delivery)
        .header("x-hub-signature-256", &sig)
        .send(&body[..])
        .unwrap_or_else(|e| panic!("delivery {delivery}: {e}"));
    assert!(resp.status().is_success(), "delivery {delivery}");
}

/// `glassbox` with the test's lab, queue, config and object store.
fn glassbox(dir: &Path, db: &str, moto: &Moto, args: &[&str]) -> Command {
    glassbox_in(dir, &dir.join("lab").join("lab.toml"), db, moto, args)
}

/// [`glassbox`] run from `dir` (its `lab/` as `--lab`) with the configuration file `config`.
fn glassbox_in(dir: &Path, config: &Path, db: &str, moto: &Moto, args: &[&str]) -> Command {
    let mut c = crate::support::glassbox(dir, Some(db), args);
    c.env("GLASSBOX_CONFIG", config)
        .env("GLASSBOX_WEBHOOK_SECRET", SECRET)
        .env("GLASSBOX_GITHUB_TOKEN", "stand-in")
        .env("GLASSBOX_LOG", "warn")
        .env("GLASSBOX_STATE_DIR", dir.join("auditor"));
    for (k, v) in moto.env() {
        c.env(k, v);
    }
    c
}

fn jobs(dir: &Path, db: &str, moto: &Moto) -> Vec<serde_json::Value> {
    let out = glassbox(dir, db, moto, &["jobs", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<serde_json::Value>(&out.stdout)
        .unwrap()
        .as_array()
        .cloned()
        .unwrap()
}

/// Polls `check` every 100 ms until it yields, failing with `what` and the processes' output.
fn wait_for<T>(
    what: &str,
    limit: Duration,
    procs: &[&Proc],
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check() {
            return v;
        }
        if Instant::now() > deadline {
            let logs: Vec<String> = procs.iter().map(|p| p.output()).collect();
            panic!("timed out waiting for {what}\n{}", logs.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn serve_and_two_workers_on_postgres_and_s3_run_every_job_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let db = postgres_schema("multi");
    let moto = moto::start_moto();
    moto::create_bucket(&moto, BUCKET);
    moto::allow_public_read(&moto, BUCKET, "lab");
    let (github, github_addr) = crate::support::start_github(&[MAINTAINER]);

    let init = glassbox(d, &db, &moto, &["init"]).output().unwrap();
    assert!(
        init.status.success(),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );
    // The witness: its own directory, key and state; it cosigns this lab's checkpoints.
    let wdir = d.join("witness");
    std::fs::create_dir_all(&wdir).unwrap();
    let wkey = wdir.join("witness.key");
    let out = Command::new(crate::support::BIN)
        .args(["witness", "init", "--name", "witness.test/multi", "--key"])
        .arg(&wkey)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let witness_vkey = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let lab_vkey = std::fs::read_to_string(d.join("lab").join("vkey")).unwrap();
    let wport = free_port();
    let mut wcmd = Command::new(crate::support::BIN);
    wcmd.args(["witness", "serve", "--key"])
        .arg(&wkey)
        .arg("--state")
        .arg(wdir.join("state.db"))
        .args([
            "--log",
            lab_vkey.trim(),
            "--bind",
            &format!("127.0.0.1:{wport}"),
        ]);
    let witness = Proc::spawn(wcmd, &wdir, "witness");
    wait_for("the witness", Duration::from_secs(30), &[&witness], || {
        std::net::TcpStream::connect(("127.0.0.1", wport)).ok()
    });
    let port = free_port();
    let server = format!("http://127.0.0.1:{port}");
    // One file for the server and the workers, as docs/deploy.md has it.
    std::fs::write(
        d.join("lab").join("lab.toml"),
        format!(
            r#"[worker]
lease_seconds = 2
heartbeat_seconds = 0.5
poll_millis = 100
metrics_flush_steps = 100

[storage]
blobs = "s3://{BUCKET}/lab"

[ledger]
witnesses = [{{ url = "http://127.0.0.1:{wport}/", vkey = "{witness_vkey}" }}]
witness_quorum = 1

[web]
public_url = "{server}"

[github]
bot_login = "glassbox-bot"
repositories = ["{REPO}"]
webhook_secrets_env = ["GLASSBOX_WEBHOOK_SECRET"]
maintainers = ["{MAINTAINER}"]
flops_per_second = 5.0e10
api_base_url = "http://{github_addr}{LOCAL_GITHUB_PREFIX}"

[github.auth]
kind = "token"
token_env = "GLASSBOX_GITHUB_TOKEN"

[github.retry]
max_attempts = 3
base_backoff_ms = 100
max_wait_seconds = 5
"#
        ),
    )
    .unwrap();

    // `glassbox serve --no-worker` with the lab in `host/lab` and the configuration `config`.
    let start_serve = |host: &Path, config: &Path, name: &str| {
        let bind = format!("127.0.0.1:{port}");
        let args = ["serve", "--no-worker", "--bind", &bind];
        Proc::spawn(glassbox_in(host, config, &db, &moto, &args), host, name)
    };
    let mut serve = start_serve(d, &d.join("lab").join("lab.toml"), "serve");
    wait_for("the server", Duration::from_secs(60), &[&serve], || {
        ureq::get(&format!("{server}/healthz")).call().ok()
    });
    // Each worker: an empty directory of its own and its own copy of the configuration; no
    // lab files, no signing key.
    let worker_dirs: Vec<std::path::PathBuf> = (1..=2)
        .map(|n| {
            let w = d.join(format!("host-{n}"));
            std::fs::create_dir_all(w.join("lab")).unwrap();
            std::fs::copy(d.join("lab").join("lab.toml"), w.join("lab.toml")).unwrap();
            w
        })
        .collect();
    let worker = |id: &str, n: usize| {
        let w = &worker_dirs[n - 1];
        Proc::spawn(
            glassbox_in(
                w,
                &w.join("lab.toml"),
                &db,
                &moto,
                &["worker", "--threads", "1", "--id", id],
            ),
            w,
            id,
        )
    };
    let mut w1 = worker("worker-1", 1);
    let w2 = worker("worker-2", 2);

    // Five outsiders propose; the maintainer approves each.
    let issues = LocalIssues::new(REPO, &format!("http://{github_addr}{LOCAL_GITHUB_PREFIX}"));
    for i in 1..=PROPOSALS {
        let author = format!("proposer-{i}");
        let title = format!("[experiment] multi machine {i}");
        let body = render_issue_form(
            &format!("Run {i} of five trains once, wherever it lands."),
            None,
            &spec(i),
            true,
        );
        deliver(
            &server,
            "issues",
            &format!("open-{i}"),
            &issues.opened(i, &author, &title, &body),
        );
        deliver(
            &server,
            "issue_comment",
            &format!("approve-{i}"),
            &issues.comment(i, &author, &title, &body, MAINTAINER, "/approve", 100 + i),
        );
    }
    let procs = [&serve, &w1, &w2];
    wait_for("five queued jobs", Duration::from_secs(60), &procs, || {
        (jobs(d, &db, &moto).len() as u64 == PROPOSALS).then_some(())
    });

    // Kill worker 1 once a job it runs has a checkpoint.
    let victim = wait_for(
        "worker-1 to checkpoint a job",
        Duration::from_secs(180),
        &procs,
        || {
            jobs(d, &db, &moto).into_iter().find(|j| {
                j["state"] == "running"
                    && j["lease_owner"] == "worker-1"
                    && j["checkpoint_step"].as_u64().unwrap_or(0) >= 25
            })
        },
    );
    w1.child.kill().unwrap(); // SIGKILL
    w1.child.wait().unwrap();
    let victim_id = victim["id"].as_u64().unwrap();

    // Kill the integrator while worker 2 trains (its metric chunks and training snapshots
    // keep being sequenced), and bring it back on another host: the first host is gone with
    // its lab directory, and the standby starts with only the lab's signing key and the
    // configuration. It restores the log from the bucket, resumes from the last published
    // checkpoint and integrates what was sequenced meanwhile, each entry once.
    serve.child.kill().unwrap(); // SIGKILL
    serve.child.wait().unwrap();
    let standby = d.join("host-3");
    std::fs::create_dir_all(standby.join("lab").join("keys")).unwrap();
    std::fs::copy(
        d.join("lab").join("keys").join("ledger.key"),
        standby.join("lab").join("keys").join("ledger.key"),
    )
    .unwrap();
    std::fs::copy(
        d.join("lab").join("lab.toml"),
        standby.join("lab").join("lab.toml"),
    )
    .unwrap();
    for gone in ["log", "keys"] {
        std::fs::remove_dir_all(d.join("lab").join(gone)).unwrap();
    }
    for gone in ["vkey", "index.db", "bot.db"] {
        let _ = std::fs::remove_file(d.join("lab").join(gone));
    }
    std::thread::sleep(Duration::from_millis(1500));
    serve = start_serve(
        &standby,
        &standby.join("lab").join("lab.toml"),
        "serve-standby",
    );
    wait_for(
        "the server again",
        Duration::from_secs(60),
        &[&serve],
        || ureq::get(&format!("{server}/healthz")).call().ok(),
    );

    // Worker 2 finishes everything, the victim's job included once its lease runs out.
    let procs = [&serve, &w2];
    let done = wait_for("every job to end", Duration::from_secs(600), &procs, || {
        let all = jobs(d, &db, &moto);
        all.iter()
            .all(|j| {
                [
                    "succeeded",
                    "failed",
                    "diverged",
                    "cancelled",
                    "budget_exceeded",
                ]
                .contains(&j["state"].as_str().unwrap_or(""))
            })
            .then_some(all)
    });
    for j in &done {
        assert_eq!(j["state"], "succeeded", "{j}");
    }
    let taken_over = done
        .iter()
        .find(|j| j["id"].as_u64() == Some(victim_id))
        .unwrap();
    assert_eq!(taken_over["attempts"], 2, "{taken_over}");
    assert_eq!(taken_over["lease_owner"], serde_json::Value::Null);

    // The ledger: one result per experiment, all succeeded; the victim's run resumed.
    // A job's end commits with its sequenced `result`; the integrator publishes it within a
    // poll or two.
    let all = wait_for(
        "every result in the log",
        Duration::from_secs(30),
        &procs,
        || {
            let all = entries(&standby.join("lab"));
            (all.iter().filter(|e| e.kind() == EntryKind::Result).count() as u64 >= PROPOSALS)
                .then_some(all)
        },
    );
    let results: Vec<(String, ResultBody)> = all
        .iter()
        .filter(|e| e.kind() == EntryKind::Result)
        .map(|e| (e.experiment.clone().unwrap().0, e.body_as().unwrap()))
        .collect();
    assert_eq!(results.len() as u64, PROPOSALS, "one result per job");
    let mut experiments: Vec<&str> = results.iter().map(|(e, _)| e.as_str()).collect();
    experiments.sort();
    experiments.dedup();
    assert_eq!(experiments.len() as u64, PROPOSALS, "no job recorded twice");
    for (_, r) in &results {
        assert_eq!(r.ending.status, RunStatus::Succeeded);
        assert_eq!(r.ending.steps, 600);
    }
    let resumed = all
        .iter()
        .filter(|e| e.kind() == EntryKind::RunStarted)
        .filter(|e| {
            crate::support::body(e)["resumed_from_step"]
                .as_u64()
                .unwrap_or(0)
                >= 25
        })
        .count();
    assert_eq!(
        resumed, 1,
        "the killed worker's job resumed from its checkpoint"
    );

    // Every blob the ledger names is in the bucket; none landed in the lab directory.
    let keys = moto::raw_keys(&moto, BUCKET);
    let mut named = 0;
    for e in &all {
        for h in e.refs.values() {
            let hex = h.to_hex();
            let key = format!("lab/blobs/{}/{}", &hex[..2], &hex[2..]);
            assert!(
                keys.contains(&key),
                "{key} (entry {:?}) not in the bucket",
                e.kind()
            );
            named += 1;
        }
    }
    assert!(
        named >= PROPOSALS as usize * 4,
        "only {named} blob references"
    );
    let local: Vec<_> = walk(&d.join("lab").join("blobs"));
    assert!(local.is_empty(), "blobs written locally: {local:?}");
    // Every entry is in the log once (no batch integrated twice across the integrator's
    // restart), and the workers' directories hold no key, no log and no blob.
    let mut distinct: Vec<Vec<u8>> = all
        .iter()
        .map(|e| e.to_canonical_bytes().unwrap())
        .collect();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), all.len(), "an entry is in the log twice");
    for w in &worker_dirs {
        for f in walk(w) {
            let rel = f.strip_prefix(w).unwrap().to_string_lossy().to_string();
            assert!(
                !rel.starts_with("lab/keys")
                    && !rel.starts_with("lab/log")
                    && !rel.starts_with("lab/blobs")
                    && !rel.ends_with(".db"),
                "a worker wrote lab files in its own directory: {rel}"
            );
        }
    }

    // The bot commented every result on its issue.
    wait_for(
        "the result comments",
        Duration::from_secs(60),
        &procs,
        || {
            let comments = github.comments();
            (1..=PROPOSALS)
                .all(|i| {
                    comments
                        .iter()
                        .any(|c| c.issue == i && c.body.contains("ended: **succeeded**"))
                })
                .then_some(())
        },
    );

    // The dashboard reads the bucket too: the spec TOML on the experiment page, and the
    // training curve the server indexed from metric chunks it fetched from the object store.
    let page = ureq::get(&format!("{server}/experiments/open-lab/moe%231"))
        .call()
        .unwrap()
        .into_body()
        .read_to_string()
        .unwrap();
    assert!(page.contains("seq_len = 16"), "no spec text on the page");
    let run = done
        .iter()
        .find(|j| j["experiment"] == format!("{REPO}#1"))
        .and_then(|j| j["run_id"].as_str())
        .unwrap()
        .to_string();
    let curve = wait_for("the indexed curve", Duration::from_secs(30), &procs, || {
        let text = ureq::get(&format!("{server}/api/v1/runs/{run}/metrics/train/loss"))
            .call()
            .ok()?
            .into_body()
            .read_to_string()
            .ok()?;
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        (v["total_points"].as_u64()? >= 600).then_some(v)
    });
    assert_eq!(curve["points"].as_array().unwrap().len(), 600, "{curve}");

    // An outsider audits the log straight from the bucket, with the witness's cosignature
    // required: over the bucket's plain HTTP URL (no server of the lab's in between) and
    // through the S3 API, each from a directory of its own.
    let outsider = d.join("outsider");
    std::fs::create_dir_all(&outsider).unwrap();
    let bucket_url = format!("{}/{BUCKET}/lab/", moto.endpoint);
    for target in [bucket_url.as_str(), &format!("s3://{BUCKET}/lab")] {
        let mut c = Command::new(crate::support::BIN);
        c.args([
            "verify",
            target,
            "--witness",
            &witness_vkey,
            "--quorum",
            "1",
        ])
        .arg("--state-dir")
        .arg(outsider.join("state"))
        .current_dir(&outsider);
        for (k, v) in moto.env() {
            c.env(k, v);
        }
        let v = c.output().unwrap();
        let stdout = String::from_utf8_lossy(&v.stdout);
        assert!(
            v.status.success()
                && stdout.starts_with("verified:")
                && stdout.contains("1 of the 1 witnesses given cosigned (quorum 1)"),
            "verify {target}: {stdout}{}",
            String::from_utf8_lossy(&v.stderr)
        );
    }
    // The bucket holds the log's tiles without the partials its checkpoint no longer needs.
    let keys = moto::raw_keys(&moto, BUCKET);
    let checkpoint = glassbox_ledger::SignedCheckpoint::parse(
        &ureq::get(&format!("{bucket_url}log/checkpoint"))
            .call()
            .unwrap()
            .into_body()
            .read_to_vec()
            .unwrap(),
    )
    .unwrap();
    let size = checkpoint.checkpoint.size.0;
    assert_eq!(
        size as usize,
        all.len(),
        "the bucket's checkpoint is behind the log"
    );
    let mut stored: Vec<String> = keys
        .iter()
        .filter_map(|k| k.strip_prefix("lab/log/").map(str::to_string))
        .filter(|k| k.starts_with("tile/"))
        .collect();
    stored.sort();
    let mut needed: Vec<String> = glassbox_ledger::tiles::tiles_for_size(size)
        .iter()
        .map(|t| t.path())
        .collect();
    needed.sort();
    assert_eq!(
        stored, needed,
        "the bucket's tiles are not those of its checkpoint"
    );

    // An outsider audits the running lab over HTTP (the server reads the log and the blobs
    // from the bucket)...
    let v = glassbox(d, &db, &moto, &["verify", &server])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&v.stdout);
    assert!(
        v.status.success() && stdout.starts_with("verified:"),
        "{stdout}{}",
        String::from_utf8_lossy(&v.stderr)
    );
    // ... and the standby's lab directory (restored from the bucket, grown since) verifies
    // with its blobs read from the bucket its config names.
    let v = glassbox_in(
        &standby,
        &standby.join("lab").join("lab.toml"),
        &db,
        &moto,
        &["verify"],
    )
    .output()
    .unwrap();
    assert!(
        v.status.success(),
        "{}{}",
        String::from_utf8_lossy(&v.stdout),
        String::from_utf8_lossy(&v.stderr)
    );
    drop(w2);
    drop(serve);
    drop(witness);
}

/// Every file under `dir` (none when it does not exist).
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
