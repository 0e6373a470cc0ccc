//! Load test of the webhook intake: signed deliveries over loopback HTTP/1.1 into the real
//! router and durable SQLite queue, then drained by the real worker. Not a unit test: run it
//! with `cargo run --release -p glassbox-github-bot --features bench --example webhook_load [-- N CONNECTIONS]`;
//! `GLASSBOX_BOT_DURABILITY=process` opens the queue with `Durability::ProcessCrash` instead of
//! the default `PowerLoss` (fsync per commit).
//!
//! It reports acknowledgement latency (p50/p99/max, measured at the client from sending the
//! request to reading the whole response) and accepted deliveries per second, and checks that
//! none was lost or doubled: every unique delivery is queued exactly once, every re-sent one is
//! answered `200 duplicate`, and the worker processes each id exactly once. Exits 1 when a
//! target is missed (p99 < 10 ms, >= 1,000 deliveries/s) or a delivery is lost or doubled.
//!
//! Deliveries are the recorded `issue_comment` payload (~16 KB) on an issue without the
//! experiment label, so the worker handles them (as `ignored`) without calling GitHub.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use glassbox_github_bot::config::{BotConfig, GitHubAuth};
use glassbox_github_bot::signature::sign;
use glassbox_github_bot::store::Durability;
use glassbox_github_bot::worker::Processed;
use glassbox_github_bot::{
    Bot, GitHub, InMemoryLab, Login, RepoName, Store, WebhookSettings, Worker, start_intake,
    webhook_router,
};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::sync::{Notify, mpsc};

const SECRET: &str = "load test secret";
const DUPLICATE_EVERY: usize = 10;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let total = args.first().copied().unwrap_or(20_000);
    let connections = args.get(1).copied().unwrap_or(16).max(1);

    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/github-webhooks/issue_comment_created_webhook_event.json"
    );
    let mut payload: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(fixture)?)?;
    payload["comment"]["body"] = "/approve".into();
    payload["comment"]["user"]["type"] = "User".into();
    let body = Bytes::from(serde_json::to_vec(&payload)?);
    let signature = sign(SECRET.as_bytes(), &body);

    let dir = tempfile::tempdir()?;
    let db = format!("sqlite://{}", dir.path().join("load.db").display());
    let durability = match std::env::var("GLASSBOX_BOT_DURABILITY").as_deref() {
        Ok("process") => Durability::ProcessCrash,
        _ => Durability::PowerLoss,
    };
    let store = Store::open_with(&db, durability).await?;
    let wake = Arc::new(Notify::new());
    let (intake, _writer) = start_intake(store.clone(), wake.clone());
    let router = webhook_router(
        WebhookSettings {
            secrets: vec![SECRET.into()],
            max_body_bytes: 10 << 20,
        },
        intake,
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, router).await });

    println!(
        "webhook_load: {total} signed deliveries ({} bytes each) over {connections} keep-alive connections to {addr}, every {DUPLICATE_EVERY}th also re-sent, durability {durability:?}",
        body.len()
    );
    let started = Instant::now();
    let mut clients = Vec::new();
    for c in 0..connections {
        let (body, signature) = (body.clone(), signature.clone());
        clients.push(tokio::spawn(async move {
            let stream = tokio::net::TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            let (mut sender, conn) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
            tokio::spawn(conn);
            let mut latencies = Vec::new();
            let (mut accepted, mut duplicates, mut other) = (0usize, 0usize, 0usize);
            let mut i = c;
            while i < total {
                let mut ids = vec![format!("load-{i}")];
                if i % DUPLICATE_EVERY == 0 {
                    ids.push(format!("load-{i}"));
                }
                for id in ids {
                    let req = hyper::Request::post(glassbox_github_bot::WEBHOOK_PATH)
                        .header("host", "localhost")
                        .header("x-github-event", "issue_comment")
                        .header("x-github-delivery", id)
                        .header("x-hub-signature-256", signature.as_str())
                        .header("content-type", "application/json")
                        .body(Full::new(body.clone()))?;
                    let t = Instant::now();
                    let resp = sender.send_request(req).await?;
                    let status = resp.status();
                    resp.into_body().collect().await?;
                    latencies.push(t.elapsed());
                    match status.as_u16() {
                        202 => accepted += 1,
                        200 => duplicates += 1,
                        _ => other += 1,
                    }
                }
                i += connections;
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>((
                latencies, accepted, duplicates, other,
            ))
        }));
    }
    let mut latencies: Vec<Duration> = Vec::new();
    let (mut accepted, mut duplicates, mut other) = (0, 0, 0);
    for c in clients {
        let (l, a, d, o) = c.await?.map_err(|e| e.to_string())?;
        latencies.extend(l);
        accepted += a;
        duplicates += d;
        other += o;
    }
    let elapsed = started.elapsed();
    latencies.sort();
    let pct = |p: f64| latencies[((latencies.len() as f64 - 1.0) * p).round() as usize];
    let rate = accepted as f64 / elapsed.as_secs_f64();
    let expected_dups = total.div_ceil(DUPLICATE_EVERY);
    println!(
        "requests {}  accepted(202) {accepted}  duplicate(200) {duplicates} (expected {expected_dups})  other {other}",
        latencies.len()
    );
    println!(
        "ack latency p50 {:.3} ms  p99 {:.3} ms  max {:.3} ms",
        pct(0.50).as_secs_f64() * 1e3,
        pct(0.99).as_secs_f64() * 1e3,
        pct(1.0).as_secs_f64() * 1e3
    );
    println!(
        "accepted deliveries/s {rate:.0}  (wall {:.3} s)",
        elapsed.as_secs_f64()
    );
    let counts = store.counts().await?;
    println!("queued pending {} (expected {total})", counts.pending);

    // Drain with the real worker; every id must come out exactly once.
    let config = BotConfig {
        bot_login: Login::new("glassbox-bot"),
        repositories: vec![
            RepoName::parse(
                payload["repository"]["full_name"]
                    .as_str()
                    .unwrap_or("gagbo/circadian.nvim"),
            )
            .ok_or("the fixture names no repository")?,
        ],
        webhook_secrets: vec![SECRET.into()],
        max_body_bytes: 10 << 20,
        maintainers: vec![],
        collaborators_are_maintainers: false,
        allow_self_approval: false,
        flops_per_second: 1e12,
        dashboard_url: String::new(),
        api_base_url: "http://127.0.0.1:9".into(),
        auth: GitHubAuth::Token {
            token: "unused".into(),
        },
        budget: Default::default(),
        retry: Default::default(),
        ignored_retention_hours: glassbox_github_bot::config::DEFAULT_IGNORED_RETENTION_HOURS,
    };
    let github = GitHub::from_config(&config)?;
    let bot = Bot::new(config, github, InMemoryLab::new(), store.clone());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let t = Instant::now();
    Worker::new(bot, wake)
        .with_processed_channel(tx)
        .process_pending()
        .await?;
    let drain = t.elapsed();
    let mut seen = HashSet::new();
    let mut doubled = 0;
    let mut not_done = 0;
    while let Ok(p) = rx.try_recv() {
        match p {
            Processed::Acted(id) | Processed::Ignored(id, _) => {
                if !seen.insert(id) {
                    doubled += 1;
                }
            }
            _ => not_done += 1,
        }
    }
    let after = store.counts().await?;
    println!(
        "worker processed {} unique, {doubled} doubled, {not_done} not done, in {:.3} s; store acted+ignored {} pending {}",
        seen.len(),
        drain.as_secs_f64(),
        after.acted + after.ignored,
        after.pending
    );

    let p99_ms = pct(0.99).as_secs_f64() * 1e3;
    let ok = accepted == total
        && duplicates == expected_dups
        && other == 0
        && counts.pending as usize == total
        && seen.len() == total
        && doubled == 0
        && not_done == 0
        && p99_ms < 10.0
        && rate >= 1000.0;
    println!("{}", if ok { "PASS" } else { "FAIL" });
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}
