//! Ledger append throughput: today's sequenced appends against the file-lock
//! appends they replaced, in one run, on this machine.
//!
//! ```sh
//! cargo run --release -p glassbox-lab --features bench --example sequence_bench -- \
//!     [SECONDS] [CLIENTS] [BATCH] [POSTGRES_URL] [RATE] [BUCKET]
//! ```
//! Defaults: 5 s per figure, 4 clients, 16 entries per append,
//! `postgres://postgres@127.0.0.1:5432/test` (a scratch schema is created and dropped), and
//! a paced rate of 5000 entries/s. With `BUCKET` (`s3://bucket/prefix`, credentials and
//! endpoint from the `AWS_*` variables), one more figure: PostgreSQL, paced, with the blob
//! store in that bucket, so the integrator also copies each checkpoint and its tiles there
//! before the entries count as published (as `serve` does with `[storage] blobs` in a bucket).
//!
//! - `file lock`: each client appends straight to the log as every process did before the
//!   sequencer: take the lab's writer lock, open the log, append the batch (tiles, fsync,
//!   signed checkpoint), let go.
//! - `sequenced <engine>`: each client (its own [`Sequencer`], as a separate process would
//!   have) inserts its batch into the lab database in a durable commit — what a worker on
//!   another machine does — while one integrator, as `glassbox serve` runs it (polling every
//!   [`INTEGRATE_POLL`]), writes the log. Reported: entries sequenced per second, and the
//!   integration lag — from an append's commit until a process waiting for it (polling the
//!   sequencer's integrated size every 5 ms, as `Recorder::publish` does) sees it published —
//!   at p50 and p99. Each engine runs twice: unpaced (the clients append as fast as
//!   they can: the sequencing ceiling), and paced at RATE entries/s in all (the clients spread
//!   their appends evenly: does integration keep up at that rate?).
//!
//! Every figure ends by checking that the log holds every entry once, at the index it was
//! given. The entries are ~230-byte `artifact` entries.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use glassbox_lab::Recorder;
use glassbox_lab::queue::Durability;
use glassbox_lab::sequencer::Sequencer;
use glassbox_lab::service::INTEGRATE_POLL;
use glassbox_ledger::{DirSource, LabDir, LockMode, LogReader};
use glassbox_schemas::record::ArtifactBody;
use glassbox_schemas::{ExperimentId, LedgerEntry};

fn entry(client: usize, i: usize) -> Vec<u8> {
    LedgerEntry::new(
        Some(ExperimentId(format!("open-lab/moe#{client}"))),
        Default::default(),
        ArtifactBody {
            name: format!("bench/client-{client}/entry-{i}.bin"),
            bytes: i as u64,
            run: None,
        },
    )
    .to_canonical_bytes()
    .expect("canonical")
}

fn log_size(lab: &LabDir) -> u64 {
    let source = DirSource {
        root: lab.root().to_path_buf(),
    };
    LogReader::open(&source, &lab.verifier_key().expect("vkey"))
        .expect("log")
        .size()
        .0
}

fn main() {
    let mut args = std::env::args().skip(1);
    let seconds: f64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(5.0);
    let clients: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(4);
    let batch: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(16);
    let pg = args
        .next()
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".to_string());
    let paced: f64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(5000.0);
    let bucket = args.next();
    let run_for = Duration::from_secs_f64(seconds);
    println!(
        "{clients} clients, {batch} entries per append, {seconds} s per figure, {} cores",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );

    // Today's file-lock append, for the ratio.
    let dir = tempfile::tempdir().expect("temp dir");
    let (lab, _) = LabDir::init(&dir.path().join("lab"), "bench.glassbox/lab").expect("lab");
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|c| {
            let (lab, stop) = (lab.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let entries: Vec<Vec<u8>> = (0..batch).map(|i| entry(c, n + i)).collect();
                    let w = lab.writer(LockMode::Wait).expect("writer");
                    w.append_batch(entries).expect("append");
                    n += batch;
                }
                n
            })
        })
        .collect();
    std::thread::sleep(run_for);
    stop.store(true, Ordering::Relaxed);
    let total: usize = threads.into_iter().map(|t| t.join().expect("client")).sum();
    let took = start.elapsed().as_secs_f64();
    assert_eq!(log_size(&lab) as usize, total);
    let file_lock = total as f64 / took;
    println!("file lock            {file_lock:>9.0} entries/s  ({total} entries)");

    sqlx::any::install_default_drivers();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let admin = rt.block_on(async {
        sqlx::AnyPool::connect(&pg)
            .await
            .expect("PostgreSQL reachable")
    });
    let mut schemas = Vec::new();
    let mut figures: Vec<(&str, Option<f64>, Option<String>)> = Vec::new();
    for engine in ["postgresql", "sqlite"] {
        for rate in [None, Some(paced)] {
            figures.push((engine, rate, None));
        }
    }
    if let Some(b) = &bucket {
        // A prefix of its own, so the bucket holds no other log.
        let prefix = format!(
            "{}/sequence-bench-{}",
            b.trim_end_matches('/'),
            std::process::id()
        );
        figures.push(("postgresql", Some(paced), Some(prefix)));
    }
    for (engine, rate, blobs) in figures {
        // A fresh, empty database for every figure.
        let sqlite_dir = tempfile::tempdir().expect("temp dir");
        let url = if engine == "postgresql" {
            let schema = format!("sequence_bench_{}_{}", std::process::id(), schemas.len());
            rt.block_on(sqlx::query(&format!("CREATE SCHEMA {schema}")).execute(&admin))
                .expect("create schema");
            let sep = if pg.contains('?') { '&' } else { '?' };
            let url = format!("{pg}{sep}options=-c%20search_path%3D{schema}");
            schemas.push(schema);
            url
        } else {
            format!("sqlite://{}", sqlite_dir.path().join("queue.db").display())
        };
        let r = sequenced(&url, clients, batch, run_for, rate, blobs.as_deref());
        let how = match (rate, &blobs) {
            (None, _) => "unpaced".to_string(),
            (Some(p), None) => format!("paced {p:.0}/s"),
            (Some(p), Some(b)) => format!("paced {p:.0}/s, log copied to {b}"),
        };
        println!(
            "sequenced {engine:<10} {how:<14} {:>9.0} entries/s  ({} entries), {:.2}x file lock; integration lag p50 {:.0} ms, p99 {:.0} ms",
            r.per_second,
            r.entries,
            r.per_second / file_lock,
            r.lag_p50.as_secs_f64() * 1e3,
            r.lag_p99.as_secs_f64() * 1e3,
        );
    }
    for schema in schemas {
        rt.block_on(sqlx::query(&format!("DROP SCHEMA {schema} CASCADE")).execute(&admin))
            .expect("drop schema");
    }
}

struct Rate {
    entries: usize,
    per_second: f64,
    lag_p50: Duration,
    lag_p99: Duration,
}

fn sequenced(
    url: &str,
    clients: usize,
    batch: usize,
    run_for: Duration,
    rate: Option<f64>,
    bucket: Option<&str>,
) -> Rate {
    let dir = tempfile::tempdir().expect("temp dir");
    let (lab, _) = LabDir::init(&dir.path().join("lab"), "bench.glassbox/lab").expect("lab");
    let blobs: Arc<dyn glassbox_ledger::BlobStore> = match bucket {
        Some(loc) => Arc::from(glassbox_ledger::open_store(loc).expect("bucket")),
        None => Arc::new(lab.blobs()),
    };
    let integrator = Arc::new(
        Recorder::open(
            lab.clone(),
            blobs,
            Sequencer::connect(url, Durability::PowerLoss).expect("sequencer"),
        )
        .expect("recorder"),
    );
    let head = Sequencer::connect(url, Durability::PowerLoss).expect("sequencer");
    let stop = Arc::new(AtomicBool::new(false));
    let published: Arc<Mutex<Vec<(u64, Instant)>>> = Arc::default();
    let integrating = {
        let (rec, stop) = (integrator.clone(), stop.clone());
        std::thread::spawn(move || {
            loop {
                let done = stop.load(Ordering::Relaxed);
                if !rec.integrate_pending().expect("integrate") && done {
                    return;
                }
                std::thread::sleep(INTEGRATE_POLL);
            }
        })
    };
    // What a worker waiting for its entry sees: the sequencer's integrated size, polled as
    // `Recorder::publish` polls it (a batch counts once the integrator has noted it, after
    // its checkpoint and, with a bucket, the copy).
    let finished = Arc::new(AtomicBool::new(false));
    let watching = {
        let (finished, published) = (finished.clone(), published.clone());
        std::thread::spawn(move || {
            let mut last = 0;
            loop {
                // Read after the flag: once the integrator is done, one more read sees it all.
                let done = finished.load(Ordering::Acquire);
                let size = head.head().expect("head").expect("set up").integrated;
                if size > last {
                    published.lock().expect("lock").push((size, Instant::now()));
                    last = size;
                }
                if done {
                    return;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let start = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|c| {
            let stop = stop.clone();
            let url = url.to_string();
            std::thread::spawn(move || {
                let seq = Sequencer::connect(&url, Durability::PowerLoss).expect("sequencer");
                let mut committed = Vec::new();
                let mut n = 0;
                // Paced: this client's appends fall on an even grid, offset per client.
                let every =
                    rate.map(|r| Duration::from_secs_f64(batch as f64 * clients as f64 / r));
                let begin = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    if let Some(every) = every {
                        let slot = (n / batch) as f64 + c as f64 / clients as f64;
                        let due = begin + every.mul_f64(slot);
                        if let Some(wait) = due.checked_duration_since(Instant::now()) {
                            std::thread::sleep(wait);
                        }
                    }
                    let entries: Vec<Vec<u8>> = (0..batch).map(|i| entry(c, n + i)).collect();
                    let first = seq.append(&entries).expect("sequence");
                    committed.push((first + batch as u64 - 1, Instant::now(), entries));
                    n += batch;
                }
                committed
            })
        })
        .collect();
    std::thread::sleep(run_for);
    stop.store(true, Ordering::Relaxed);
    let committed: Vec<_> = threads
        .into_iter()
        .flat_map(|t| t.join().expect("client"))
        .collect();
    let took = start.elapsed().as_secs_f64();
    integrating.join().expect("integrator");
    finished.store(true, Ordering::Release);
    watching.join().expect("watcher");
    let total = committed.len() * batch;
    // Every entry in the log once, at its index.
    let source = DirSource {
        root: lab.root().to_path_buf(),
    };
    let reader = LogReader::open(&source, &lab.verifier_key().expect("vkey")).expect("log");
    assert_eq!(
        reader.size().0 as usize,
        total,
        "the log holds every entry once"
    );
    for (last, _, entries) in committed.iter().step_by(97) {
        let first = last + 1 - entries.len() as u64;
        for (k, e) in entries.iter().enumerate() {
            let got = reader
                .entry(glassbox_ledger::LeafIndex(first + k as u64))
                .expect("entry");
            assert_eq!(
                &got,
                e,
                "entry {} is the one sequenced there",
                first + k as u64
            );
        }
    }
    if let Some(b) = integrator.blobs().bucket() {
        let note = b
            .read("log/checkpoint", glassbox_ledger::ReadLimit::CHECKPOINT)
            .expect("read the bucket")
            .expect("a checkpoint in the bucket");
        let copied = glassbox_ledger::SignedCheckpoint::parse(&note).expect("checkpoint");
        assert_eq!(
            copied.checkpoint.size.0 as usize, total,
            "the bucket holds the whole log"
        );
    }
    let published = published.lock().expect("lock");
    let mut lags: Vec<Duration> = committed
        .iter()
        .map(|(last, at, _)| {
            let (_, when) = published
                .iter()
                .find(|(size, _)| size > last)
                .expect("every append was published");
            when.saturating_duration_since(*at)
        })
        .collect();
    lags.sort();
    let pick = |q: f64| lags[((lags.len() as f64 * q) as usize).min(lags.len() - 1)];
    Rate {
        entries: total,
        per_second: total as f64 / took,
        lag_p50: pick(0.5),
        lag_p99: pick(0.99),
    }
}
