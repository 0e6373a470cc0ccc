//! Load test of the dashboard (BENCHMARKS.md, "Web"): builds a lab of `--runs` experiments
//! (proposal, run_started and result entries really appended to the ledger and indexed) with
//! `--points` metric points generated straight into the SQLite index by one SQL statement,
//! then, against a real server on loopback:
//!
//! 1. the experiment page and the metric API under `--conns` concurrent keep-alive
//!    connections for `--seconds`, reporting requests/s, p50 and p99 per endpoint, and the
//!    render cache's hits, misses and size from `/metrics`;
//! 2. SSE fan-out: `--sse` clients subscribed to one run's live stream, `--events` points
//!    published 50 ms apart, reporting how long each took to reach every client;
//! 3. search: the experiments list with `?q=` queries of the query language (spec
//!    fields, final metrics, status, tags, text, `and`/`or`/`not`) over all the runs, from
//!    `--search-conns` connections for `--seconds`, reporting p50 and p99. The generated specs
//!    come in four expert counts so spec-field queries select a part of the runs.
//!
//! Run: `cargo run --release -p glassbox-web --features bench --example web_load -- [--runs 10000]
//! [--points 10000000] [--conns 64] [--seconds 20] [--sse 1000] [--dir PATH]`. With `--dir` an
//! existing generated lab is reused. Not a test: it prints figures and asserts nothing.
//!
//! For a comparison with nginx (`bench/web-pages.sh`): `--export DIR` asks the server for every
//! experiment page once (which also draws each once, as a first view does) and writes them as
//! files `DIR/experiments/load/lab#<k>`; `--serve ADDR` then serves the lab on ADDR until the
//! process is killed, instead of running the load itself.

use glassbox_schemas::RefRole;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::body::Body;
use glassbox_ledger::index::Index;
use glassbox_ledger::{BlobStore, DirSource, LabDir, LockMode, LogReader};
use glassbox_schemas::record::{
    EntryBody, ProposalBody, ResultBody, RunEnding, RunStartedBody, refs,
};
use glassbox_schemas::{ExperimentId, LedgerEntry, RunId, RunStatus};
use glassbox_web::{LiveEvent, LiveHub, WebState};
use http_body_util::BodyExt;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const METRICS: [&str; 5] = [
    "eval/markov/loss",
    "grad/norm/total",
    "optim/learning_rate",
    "throughput/tokens_per_second",
    "train/loss",
];

struct Args {
    runs: u64,
    points: u64,
    conns: usize,
    seconds: u64,
    sse: usize,
    events: u64,
    search_conns: usize,
    dir: Option<std::path::PathBuf>,
    export: Option<std::path::PathBuf>,
    serve: Option<std::net::SocketAddr>,
}

fn args() -> Args {
    let mut a = Args {
        runs: 10_000,
        points: 10_000_000,
        conns: 64,
        seconds: 20,
        sse: 1000,
        events: 40,
        search_conns: 4,
        dir: None,
        export: None,
        serve: None,
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i + 1 < v.len() {
        let x = &v[i + 1];
        match v[i].as_str() {
            "--runs" => a.runs = x.parse().expect("--runs N"),
            "--points" => a.points = x.parse().expect("--points N"),
            "--conns" => a.conns = x.parse().expect("--conns N"),
            "--seconds" => a.seconds = x.parse().expect("--seconds N"),
            "--sse" => a.sse = x.parse().expect("--sse N"),
            "--events" => a.events = x.parse().expect("--events N"),
            "--search-conns" => a.search_conns = x.parse().expect("--search-conns N"),
            "--dir" => a.dir = Some(x.into()),
            "--export" => a.export = Some(x.into()),
            "--serve" => a.serve = Some(x.parse().expect("--serve HOST:PORT")),
            other => panic!("unknown flag {other}"),
        }
        i += 2;
    }
    a
}

fn run_id(k: u64) -> String {
    format!("run-{k:06}")
}

fn experiment_id(k: u64) -> String {
    format!("load/lab#{k}")
}

async fn generate(root: &std::path::Path, runs: u64, points: u64) -> (LabDir, Index) {
    let t = Instant::now();
    let (lab, _) = LabDir::init(root, "load.example/glassbox").unwrap();
    let spec_text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/tiny.toml"
    ))
    .unwrap();
    // Four variants of the spec (4, 8, 16 and 32 experts), for the search phase.
    let variants: Vec<_> = [4u32, 8, 16, 32]
        .iter()
        .map(|n| {
            let text = spec_text.replace("n_experts = 4", &format!("n_experts = {n}"));
            let spec = glassbox_schemas::parse_toml(&text).unwrap();
            let hash = glassbox_schemas::spec_hash(&spec).unwrap();
            let blob = lab.blobs().put(&mut text.as_bytes()).unwrap().hash.0;
            (hash, blob)
        })
        .collect();
    let w = lab.writer(LockMode::Wait).unwrap();
    let mut batch = Vec::new();
    for k in 0..runs {
        let (spec_hash, blob) = variants[(k % 4) as usize];
        let exp = Some(ExperimentId(experiment_id(k)));
        let e = |refs, body: EntryBody| {
            LedgerEntry::new(exp.clone(), refs, body)
                .to_canonical_bytes()
                .unwrap()
        };
        batch.push(e(
            refs([(RefRole::Spec, blob)]),
            EntryBody::Proposal(ProposalBody {
                sweep: None,
                spec_hash,
                author: format!("user{}", k % 97),
                title: format!("Load experiment {k}"),
                issue: None,
            }),
        ));
        batch.push(e(
            BTreeMap::new(),
            EntryBody::RunStarted(RunStartedBody {
                worker: None,
                host: None,
                run: RunId(run_id(k)),
                spec_hash,
                code_revision: "load".into(),
                backend: "cpu".into(),
                backend_reason: None,
                hardware: "load".into(),
                seed: k,
                kernel_hashes: BTreeMap::new(),
                resumed_from_step: None,
                build: None,
                data: None,
                attempt: None,
            }),
        ));
        batch.push(e(
            BTreeMap::new(),
            EntryBody::Result(ResultBody {
                run: RunId(run_id(k)),
                spec_hash,
                ending: RunEnding {
                    status: if k % 10 == 3 {
                        RunStatus::Diverged
                    } else {
                        RunStatus::Succeeded
                    },
                    steps: 300,
                    final_metrics: [
                        ("train/loss".to_string(), 1.5 + (k % 100) as f64 / 100.0),
                        (
                            "eval/markov/loss".to_string(),
                            1.2 + (k % 37) as f64 / 100.0,
                        ),
                    ]
                    .into_iter()
                    .collect(),
                    reason: None,
                },
                forecast: None,
                params_blake3: None,
            }),
        ));
        if batch.len() >= 3000 {
            w.append_batch(std::mem::take(&mut batch)).unwrap();
        }
    }
    if !batch.is_empty() {
        w.append_batch(batch).unwrap();
    }
    drop(w);
    eprintln!(
        "ledger: {} entries in {:.1}s",
        runs * 3,
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    let index = Index::connect(&lab.index_path().display().to_string())
        .await
        .unwrap();
    let vkey = lab.verifier_key().unwrap();
    let source = DirSource {
        root: lab.root().to_path_buf(),
    };
    let reader = LogReader::open(&source, &vkey).unwrap();
    // With the blobs: the specs' search fields are indexed from them.
    index
        .sync_with_blobs(&reader, Some(&lab.blobs()))
        .await
        .unwrap();
    eprintln!("index sync: {:.1}s", t.elapsed().as_secs_f64());
    let t = Instant::now();
    let per_metric = (points / runs / METRICS.len() as u64).max(1);
    for p in ["PRAGMA synchronous = OFF", "PRAGMA cache_size = -262144"] {
        sqlx::query(p).execute(index.write_pool()).await.unwrap();
    }
    let names = METRICS
        .iter()
        .map(|n| format!("('{n}')"))
        .collect::<Vec<_>>()
        .join(", ");
    // One statement: rows come out in primary-key order (run, name, step), so the B-tree is
    // appended to rather than split at random.
    let sql = format!(
        "WITH RECURSIVE r(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM r WHERE k + 1 < {runs}), \
         n(name) AS (VALUES {names}), \
         s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {per_metric}) \
         INSERT INTO metric_points (run, name, step, value, entry) \
         SELECT printf('run-%06d', k), name, i, 1.5 + 2.5 / (1.0 + i / 20.0) + (k % 7) / 100.0, 0 \
         FROM r CROSS JOIN n CROSS JOIN s"
    );
    sqlx::query(&sql).execute(index.write_pool()).await.unwrap();
    sqlx::query("PRAGMA synchronous = FULL")
        .execute(index.write_pool())
        .await
        .unwrap();
    eprintln!(
        "metric points: {} in {:.1}s",
        runs * per_metric * METRICS.len() as u64,
        t.elapsed().as_secs_f64()
    );
    // Written past the indexer: each run's overviews (what a page draws first) are drawn now,
    // as indexing the runs' metric chunks would have.
    let t = Instant::now();
    let n = index.rebuild_overviews().await.unwrap();
    eprintln!("overviews: {n} runs in {:.1}s", t.elapsed().as_secs_f64());
    (lab, index)
}

/// Serialises any body for `LedgerEntry::new` through one object-safe trait.
fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

/// A deterministic pseudo-random sequence (SplitMix64), so runs are comparable.
fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Asks for every experiment page once, 8 at a time, and writes each as a file nginx can serve
/// at the same path (`%23` decodes to `#`).
async fn export(
    client: &Client<hyper_util::client::legacy::connect::HttpConnector, Body>,
    addr: std::net::SocketAddr,
    runs: u64,
    dir: &std::path::Path,
) {
    let t = Instant::now();
    let out = dir.join("experiments/load");
    std::fs::create_dir_all(&out).unwrap();
    let mut bytes = 0usize;
    let mut k = 0;
    while k < runs {
        let batch: Vec<_> = (k..(k + 8).min(runs))
            .map(|k| {
                let client = client.clone();
                tokio::spawn(async move {
                    let uri = format!("http://{addr}/experiments/load/lab%23{k}");
                    let resp = client.get(uri.parse().unwrap()).await.unwrap();
                    assert!(resp.status().is_success(), "{uri}: {}", resp.status());
                    (k, resp.into_body().collect().await.unwrap().to_bytes())
                })
            })
            .collect();
        for t in batch {
            let (k, body) = t.await.unwrap();
            bytes += body.len();
            std::fs::write(out.join(format!("lab#{k}")), &body).unwrap();
        }
        k += 8;
    }
    eprintln!(
        "exported {runs} pages ({:.1} KB each on average) in {:.1}s",
        bytes as f64 / runs.max(1) as f64 / 1024.0,
        t.elapsed().as_secs_f64()
    );
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let a = args();
    let tmp = tempfile::tempdir().unwrap();
    let root = a.dir.clone().unwrap_or_else(|| tmp.path().join("lab"));
    let (lab, index) = if root.join("log/checkpoint").is_file() {
        let lab = LabDir::open(&root).unwrap();
        let index = Index::connect(&lab.index_path().display().to_string())
            .await
            .unwrap();
        eprintln!("reusing {}", root.display());
        (lab, index)
    } else {
        std::fs::create_dir_all(&root).unwrap();
        generate(&root, a.runs, a.points).await
    };
    let n_points: i64 = sqlx::Row::get(
        &sqlx::query("SELECT COUNT(*) AS n FROM metric_points")
            .fetch_one(index.pool())
            .await
            .unwrap(),
        "n",
    );
    let runs = a.runs;
    eprintln!("lab: {runs} runs, {n_points} metric points");

    let live = LiveHub::new(4096);
    let state = WebState::new(lab, index, live.clone());
    let listener = tokio::net::TcpListener::bind(
        a.serve
            .unwrap_or_else(|| std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
    )
    .await
    .unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(glassbox_web::serve_on(
        listener,
        state,
        Default::default(),
        async {
            let _ = stop_rx.await;
        },
    ));

    let client: Client<_, Body> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(a.conns)
        .build_http();
    // Warm the catalog (first request folds every entry).
    let t = Instant::now();
    let resp = client
        .get(format!("http://{addr}/experiments").parse().unwrap())
        .await
        .unwrap();
    let _ = resp.into_body().collect().await;
    eprintln!(
        "first request (catalog fold of {} entries): {:.2}s",
        runs * 3,
        t.elapsed().as_secs_f64()
    );

    if let Some(dir) = &a.export {
        export(&client, addr, runs, dir).await;
    }
    if a.serve.is_some() {
        eprintln!(
            "serving http://{addr}/ until killed (pid {})",
            std::process::id()
        );
        std::future::pending::<()>().await;
    }

    // 1. Experiment page + metric API.
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for c in 0..a.conns {
        let client = client.clone();
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let mut seed = c as u64 + 1;
            let (mut page, mut api, mut errors) = (Vec::new(), Vec::new(), 0u64);
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let k = splitmix(&mut seed) % runs;
                let is_page = i % 2 == 0;
                i += 1;
                let uri = if is_page {
                    format!("http://{addr}/experiments/load/lab%23{k}")
                } else {
                    format!(
                        "http://{addr}/api/v1/runs/{}/metrics/train/loss?max_points=500",
                        run_id(k)
                    )
                };
                let t = Instant::now();
                match client.get(uri.parse().unwrap()).await {
                    Ok(resp) => {
                        let ok = resp.status().is_success();
                        let _ = resp.into_body().collect().await;
                        if !ok {
                            errors += 1;
                        }
                    }
                    Err(_) => errors += 1,
                }
                if is_page {
                    page.push(t.elapsed())
                } else {
                    api.push(t.elapsed())
                }
            }
            (page, api, errors)
        }));
    }
    tokio::time::sleep(Duration::from_secs(a.seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let (mut page, mut api, mut errors) = (Vec::new(), Vec::new(), 0);
    for t in tasks {
        let (p, q, e) = t.await.unwrap();
        page.extend(p);
        api.extend(q);
        errors += e;
    }
    page.sort();
    api.sort();
    let secs = a.seconds as f64;
    println!("HTTP, {} connections, {}s:", a.conns, a.seconds);
    println!(
        "  experiment page: {} requests ({:.0}/s), p50 {:.1} ms, p99 {:.1} ms",
        page.len(),
        page.len() as f64 / secs,
        pct(&page, 0.5),
        pct(&page, 0.99)
    );
    println!(
        "  metric API:      {} requests ({:.0}/s), p50 {:.1} ms, p99 {:.1} ms",
        api.len(),
        api.len() as f64 / secs,
        pct(&api, 0.5),
        pct(&api, 0.99)
    );
    println!("  errors: {errors}");
    let resp = client
        .get(format!("http://{addr}/metrics").parse().unwrap())
        .await
        .unwrap();
    let text = resp.into_body().collect().await.unwrap().to_bytes();
    for line in String::from_utf8_lossy(&text)
        .lines()
        .filter(|l| l.starts_with("glassbox_render_cache"))
    {
        println!("  {line}");
    }

    // 2. SSE fan-out.
    let run = run_id(1);
    let sent: Arc<std::sync::Mutex<Vec<Option<Instant>>>> =
        Arc::new(std::sync::Mutex::new(vec![None; a.events as usize + 1]));
    let mut clients = Vec::new();
    for _ in 0..a.sse {
        let sent = sent.clone();
        let run = run.clone();
        let events = a.events;
        clients.push(tokio::spawn(async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(
                format!("GET /api/v1/runs/{run}/live HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes(),
            )
            .await
            .unwrap();
            let mut r = BufReader::new(s);
            let mut line = String::new();
            let mut lat = Vec::new();
            loop {
                line.clear();
                if r.read_line(&mut line).await.unwrap_or(0) == 0 {
                    break;
                }
                if let Some(i) = line.find("\"step\":") {
                    let rest = &line[i + 7..];
                    let n: u64 = rest
                        .split(|c: char| !c.is_ascii_digit())
                        .next()
                        .unwrap_or("0")
                        .parse()
                        .unwrap_or(0);
                    let at = sent.lock().unwrap()[n as usize];
                    if let Some(at) = at {
                        lat.push(at.elapsed());
                    }
                    if n == events {
                        break;
                    }
                }
            }
            lat
        }));
    }
    let t = Instant::now();
    while live.subscribers() < a.sse {
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "only {} subscribed",
            live.subscribers()
        );
    }
    eprintln!(
        "{} SSE clients subscribed in {:.2}s",
        a.sse,
        t.elapsed().as_secs_f64()
    );
    for step in 1..=a.events {
        sent.lock().unwrap()[step as usize] = Some(Instant::now());
        live.publish(LiveEvent::Point {
            run: run.clone(),
            step,
            name: "train/loss".into(),
            value: 2.0,
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut lat = Vec::new();
    let mut complete = 0;
    for c in clients {
        let l = tokio::time::timeout(Duration::from_secs(30), c)
            .await
            .unwrap()
            .unwrap();
        if l.len() as u64 == a.events {
            complete += 1;
        }
        lat.extend(l);
    }
    lat.sort();
    println!(
        "SSE fan-out: {} clients x {} events, {} clients got every event; delivery latency p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        a.sse,
        a.events,
        complete,
        pct(&lat, 0.5),
        pct(&lat, 0.99),
        lat.last()
            .map(|d| d.as_secs_f64() * 1000.0)
            .unwrap_or(f64::NAN)
    );
    // 3. Search.
    let queries = [
        "model.moe.n_experts >= 8 and metrics.\"eval/markov/loss\" < 1.3",
        "status = diverged or (tag = markov and metrics.\"train/loss\" < 1.6)",
        "not status = succeeded and model.moe.n_experts in (4, 32)",
        "author = user7",
        "\"load experiment 99\"",
        "title ~ \"experiment 12\" or steps < 100",
    ];
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for c in 0..a.search_conns {
        let client = client.clone();
        let stop = stop.clone();
        let queries = queries.map(str::to_string);
        tasks.push(tokio::spawn(async move {
            let (mut lat, mut errors, mut i) = (Vec::new(), 0u64, c);
            while !stop.load(Ordering::Relaxed) {
                let q = &queries[i % queries.len()];
                i += 1;
                let uri = format!(
                    "http://{addr}/experiments?{}",
                    serde_urlencoded::to_string([("q", q.as_str())]).unwrap()
                );
                let t = Instant::now();
                match client.get(uri.parse().unwrap()).await {
                    Ok(resp) => {
                        if !resp.status().is_success() {
                            errors += 1;
                        }
                        let _ = resp.into_body().collect().await;
                    }
                    Err(_) => errors += 1,
                }
                lat.push(t.elapsed());
            }
            (lat, errors)
        }));
    }
    tokio::time::sleep(Duration::from_secs(a.seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let (mut lat, mut errors) = (Vec::new(), 0);
    for t in tasks {
        let (l, e) = t.await.unwrap();
        lat.extend(l);
        errors += e;
    }
    lat.sort();
    println!(
        "search ({} queries over {runs} runs, {} connections, {}s): {} requests ({:.0}/s), p50 {:.1} ms, p99 {:.1} ms, errors {errors}",
        queries.len(),
        a.search_conns,
        a.seconds,
        lat.len(),
        lat.len() as f64 / a.seconds as f64,
        pct(&lat, 0.5),
        pct(&lat, 0.99)
    );
    stop_tx.send(()).unwrap();
    let _ = server.await;
}
