//! The webhook intake under ordinary load, against the real binary: `glassbox serve` (the bot
//! and the lab, SQLite stores, no worker) with the GitHub stand-in, and four senders posting
//! signed deliveries over HTTP for 20 s — GitHub's recorded example payloads (which name
//! another repository, so the bot stores and ignores them), pings, and experiment flows (an
//! issue opened from the form, then a maintainer's `/approve`) — while the bot drains them.
//!
//! What must hold: no response is a 5xx; every delivery sent is stored exactly once; every
//! `/approve` is acted on (an `approval` entry in the ledger for each issue). The figures
//! (deliveries/s, latency percentiles) are printed for BENCHMARKS.md.

use std::collections::{BTreeMap, BTreeSet};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use glassbox_github_bot::form::render_issue_form;
use glassbox_github_bot::local::{LOCAL_GITHUB_PREFIX, LocalIssues};
use glassbox_github_bot::store::DeliveryState;
use glassbox_github_bot::{Store, WEBHOOK_PATH};
use glassbox_schemas::EntryKind;

use crate::support::{BIN, entries, start_github};

const REPO: &str = "open-lab/load";
const MAINTAINER: &str = "grace";
const PROPOSER: &str = "ada";
const SECRET: &str = "webhook-load-secret";
const SENDERS: usize = 4;
const SEND_FOR: Duration = Duration::from_secs(20);
/// Each sender starts an experiment flow this often; between flows it sends example payloads
/// and pings as fast as the server answers.
const FLOW_EVERY: Duration = Duration::from_secs(1);
/// GitHub's recorded examples: another repository's events, stored and ignored by the bot.
const EXAMPLES: [(&str, &str); 4] = [
    ("issues", "issues_opened_webhook_event.json"),
    ("issues", "issues_labeled_webhook_event.json"),
    ("issue_comment", "issue_comment_edited_webhook_event.json"),
    ("issue_comment", "issue_comment_deleted_webhook_event.json"),
];

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn fixture(name: &str) -> serde_json::Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("github-bot/tests/fixtures/github-webhooks")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// The tiny example with a seed of its own, so each issue proposes a different experiment.
fn form(issue: u64) -> String {
    let tiny = include_str!("../../examples/tiny.toml")
        .replace("seed = 1\n", &format!("seed = {issue}\n"))
        .replace(
            "slug = \"tiny-moe-markov\"",
            &format!("slug = \"tiny-load-{issue}\""),
        );
    render_issue_form("Load: the intake keeps every delivery.", None, &tiny, true)
}

/// One delivery sent: what it was, how it was answered and how long that took.
struct Sent {
    id: String,
    stored: bool,
    status: u16,
    took: Duration,
    approve_of: Option<u64>,
}

fn send(
    agent: &ureq::Agent,
    url: &str,
    event: &str,
    id: &str,
    payload: &serde_json::Value,
) -> (u16, Duration) {
    let body = serde_json::to_vec(payload).unwrap();
    let sig = glassbox_github_bot::signature::sign(SECRET.as_bytes(), &body);
    let started = Instant::now();
    let status = match agent
        .post(url)
        .header("content-type", "application/json")
        .header("x-github-event", event)
        .header("x-github-delivery", id)
        .header("x-hub-signature-256", &sig)
        .send(&body[..])
    {
        Ok(resp) => resp.status().as_u16(),
        // A connection refused or reset counts as a 5xx: the delivery was not taken.
        Err(e) => {
            eprintln!("delivery {id}: {e}");
            599
        }
    };
    (status, started.elapsed())
}

/// One sender's deliveries for [`SEND_FOR`]; issue numbers start at `first_issue`.
fn sender(n: usize, url: &str, first_issue: u64) -> Vec<Sent> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let issues = LocalIssues::new(REPO, &format!("http://127.0.0.1:9{LOCAL_GITHUB_PREFIX}"));
    let examples: Vec<(&str, serde_json::Value)> = EXAMPLES
        .iter()
        .map(|(event, file)| (*event, fixture(file)))
        .collect();
    let ping = fixture("ping_webhook_event.json");
    let started = Instant::now();
    let mut next_flow = started;
    let mut issue = first_issue;
    let mut sent = Vec::new();
    let mut post =
        |event: &str, id: String, payload: &serde_json::Value, stored: bool, approve_of| {
            let (status, took) = send(&agent, url, event, &id, payload);
            sent.push(Sent {
                id,
                stored,
                status,
                took,
                approve_of,
            });
        };
    let mut k = 0u64;
    while started.elapsed() < SEND_FOR {
        k += 1;
        if Instant::now() >= next_flow {
            next_flow += FLOW_EVERY;
            issue += 1;
            let title = format!("[experiment] load {issue}");
            let body = form(issue);
            let opened = issues.opened(issue, PROPOSER, &title, &body);
            post("issues", format!("s{n}-open-{issue}"), &opened, true, None);
            let comment = issues.comment(
                issue, PROPOSER, &title, &body, MAINTAINER, "/approve", issue,
            );
            let id = format!("s{n}-approve-{issue}");
            post("issue_comment", id, &comment, true, Some(issue));
        } else if k % 8 == 0 {
            post("ping", format!("s{n}-ping-{k}"), &ping, false, None);
        } else {
            let (event, payload) = &examples[k as usize % examples.len()];
            post(event, format!("s{n}-example-{k}"), payload, true, None);
        }
    }
    sent
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[test]
fn four_senders_for_twenty_seconds_lose_no_delivery_and_no_approval() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let lab = d.join("lab");
    let out = Command::new(BIN)
        .args(["init", "--lab"])
        .arg(&lab)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (github, github_addr) = start_github(&[MAINTAINER]);
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = d.join("serve.toml");
    std::fs::write(
        &config,
        format!(
            r#"[web]
bind = "127.0.0.1:{port}"

# One proposer opens every issue: the per-author limits would refuse most approvals, and the
# test is about the intake, not the quotas.
[limits]
max_open_per_author = 100000
max_proposals_per_author_per_day = 100000

[github]
bot_login = "glassbox-bot"
repositories = ["{REPO}"]
webhook_secrets = ["{SECRET}"]
maintainers = ["{MAINTAINER}"]
flops_per_second = 5.0e10
api_base_url = "http://{github_addr}{LOCAL_GITHUB_PREFIX}"

[github.auth]
kind = "token"
token = "stand-in"
"#
        ),
    )
    .unwrap();
    let log = d.join("serve.log");
    let _server = Server(
        Command::new(BIN)
            .args(["serve", "--no-worker", "--config"])
            .arg(&config)
            .arg("--lab")
            .arg(&lab)
            .env("GLASSBOX_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let base = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while ureq::get(&format!("{base}/healthz")).call().is_err() {
        assert!(
            Instant::now() < deadline,
            "the server did not come up: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let url = Arc::new(format!("{base}{WEBHOOK_PATH}"));
    let started = Instant::now();
    let threads: Vec<_> = (0..SENDERS)
        .map(|n| {
            let url = Arc::clone(&url);
            std::thread::spawn(move || sender(n, &url, 1000 * (n as u64 + 1)))
        })
        .collect();
    let sent: Vec<Sent> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    let sending = started.elapsed();

    // No delivery refused.
    let refused: Vec<String> = sent
        .iter()
        .filter(|s| s.status >= 500)
        .map(|s| format!("{} -> {}", s.id, s.status))
        .collect();
    let server_log = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        refused.is_empty(),
        "{} of {} deliveries were refused, first: {:?}\nserver log:\n{}",
        refused.len(),
        sent.len(),
        &refused[..refused.len().min(5)],
        server_log()
    );
    let unexpected: Vec<String> = sent
        .iter()
        .filter(|s| !(200..300).contains(&s.status))
        .map(|s| format!("{} -> {}", s.id, s.status))
        .collect();
    assert!(unexpected.is_empty(), "answered: {unexpected:?}");

    // The bot drains everything.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store_url = format!("sqlite://{}", lab.join("bot.db").display());
    let store = rt.block_on(Store::open_existing(&store_url)).unwrap();
    let drain_deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let counts = rt.block_on(store.counts()).unwrap();
        if counts.pending == 0 {
            break;
        }
        assert!(
            Instant::now() < drain_deadline,
            "the bot did not drain: {counts:?}\n{}",
            server_log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let drained = started.elapsed();

    // Every delivery stored exactly once, none failed.
    let stored = rt.block_on(store.list_deliveries(None, 1_000_000)).unwrap();
    let mut times: BTreeMap<String, usize> = BTreeMap::new();
    for d in &stored {
        *times.entry(d.id.0.clone()).or_default() += 1;
        assert!(
            d.state != DeliveryState::Failed,
            "delivery {} failed: {:?}",
            d.id.0,
            d.detail
        );
    }
    let expected: BTreeSet<&str> = sent
        .iter()
        .filter(|s| s.stored)
        .map(|s| s.id.as_str())
        .collect();
    let missing: Vec<&&str> = expected
        .iter()
        .filter(|id| !times.contains_key(**id))
        .collect();
    assert!(missing.is_empty(), "never stored: {missing:?}");
    assert!(
        times.values().all(|n| *n == 1),
        "stored twice: {:?}",
        times.iter().filter(|(_, n)| **n > 1).collect::<Vec<_>>()
    );
    assert_eq!(stored.len(), expected.len(), "stored what was not sent");

    // Every maintainer's /approve acted on: one approval entry per issue.
    let approvals_sent: BTreeSet<u64> = sent.iter().filter_map(|s| s.approve_of).collect();
    assert!(
        approvals_sent.len() >= SENDERS * 10,
        "too few flows to mean anything: {}",
        approvals_sent.len()
    );
    let approved: BTreeSet<u64> = entries(&lab)
        .iter()
        .filter(|e| e.kind() == EntryKind::Approval)
        .filter_map(|e| {
            let id = &e.experiment.as_ref()?.0;
            id.strip_prefix(&format!("{REPO}#"))?.parse().ok()
        })
        .collect();
    let not_acted: Vec<&u64> = approvals_sent.difference(&approved).collect();
    assert!(
        not_acted.is_empty(),
        "/approve not acted on for issues {not_acted:?}; the bot said on the first:\n{}\n{}",
        github
            .comments()
            .iter()
            .filter(|c| Some(&c.issue) == not_acted.first().copied())
            .map(|c| c.body.as_str())
            .collect::<Vec<_>>()
            .join("\n---\n"),
        server_log()
    );

    let mut took: Vec<Duration> = sent.iter().map(|s| s.took).collect();
    took.sort();
    eprintln!(
        "BENCH webhook_load: {} deliveries from {SENDERS} senders in {:.1} s = {:.0}/s; \
         p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; {} flows approved; drained {:.1} s after the start",
        sent.len(),
        sending.as_secs_f64(),
        sent.len() as f64 / sending.as_secs_f64(),
        percentile(&took, 0.5).as_secs_f64() * 1e3,
        percentile(&took, 0.99).as_secs_f64() * 1e3,
        took.last().unwrap().as_secs_f64() * 1e3,
        approvals_sent.len(),
        drained.as_secs_f64(),
    );
}
