//! `glassbox-ledger-dev`: the ledger's developer tool — the writer process the crash tests
//! kill, and the benchmarks behind BENCHMARKS.md. Not part of the user-facing CLI.
//!
//! ```text
//! glassbox-ledger-dev append-stream LAB FIRST_SEQ THREADS   append until killed; print "ack INDEX SEQ"
//! glassbox-ledger-dev bench-appends [ENTRIES] [THREADS]     durable 1 KiB appends, group commit
//! glassbox-ledger-dev bench-verify [ENTRIES]                build a log, then time a full audit
//! glassbox-ledger-dev bench-ingest FILE                     blob ingest vs `b3sum` on FILE
//! glassbox-ledger-dev bench-witness GLASSBOX [LOGS] [SECS]  `add-checkpoint` latency of a
//!                                                           `GLASSBOX witness serve`, LOGS logs
//!                                                           at one checkpoint a second each
//! ```

use glassbox_schemas::RefRole;
use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use glassbox_ledger::audit::AuditOptions;
use glassbox_ledger::{BlobStore, DirSource, LabDir, LockMode, audit};
use glassbox_schemas::record::ArtifactBody;
use glassbox_schemas::{Blake3Hash, LedgerEntry, RunId};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("append-stream") => append_stream(&args[1..]),
        Some("bench-appends") => bench_appends(&args[1..]),
        Some("bench-verify") => bench_verify(&args[1..]),
        Some("bench-ingest") => bench_ingest(&args[1..]),
        Some("bench-witness") => bench_witness(&args[1..]),
        _ => Err("usage: glassbox-ledger-dev append-stream LAB FIRST_SEQ THREADS | bench-appends [ENTRIES] [THREADS] | bench-verify [ENTRIES] | bench-ingest FILE | bench-witness GLASSBOX [LOGS] [SECS]".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(3)
        }
    }
}

type Res = Result<(), Box<dyn std::error::Error>>;

fn arg_u64(args: &[String], i: usize, default: u64) -> Result<u64, Box<dyn std::error::Error>> {
    match args.get(i) {
        None => Ok(default),
        Some(s) => s
            .parse()
            .map_err(|_| format!("argument {} must be a number, got {s:?}", i + 1).into()),
    }
}

/// An artifact entry whose name carries `seq`, padded so its canonical form is `size` bytes;
/// with a blob (hash, size), the entry references it and names its size.
fn sized_entry(seq: u64, size: usize, blob: Option<(Blake3Hash, u64)>) -> Vec<u8> {
    let mut refs = BTreeMap::new();
    let mut bytes = seq;
    if let Some((b, n)) = blob {
        refs.insert(RefRole::Artifact.as_str().to_string(), b);
        bytes = n;
    }
    // Padded in the `run` field, so the name stays `item-<seq>` (the crash test reads it).
    let make = |pad: usize| {
        let body = ArtifactBody {
            name: format!("item-{seq}"),
            bytes,
            run: Some(RunId("x".repeat(pad))),
        };
        let e = LedgerEntry::new(None, refs.clone(), body);
        e.to_canonical_bytes().expect("canonical")
    };
    let base = make(0).len();
    make(size.saturating_sub(base))
}

fn append_stream(args: &[String]) -> Res {
    let lab = LabDir::open(std::path::Path::new(args.first().ok_or("LAB missing")?))?;
    let first = arg_u64(args, 1, 0)?;
    let threads = arg_u64(args, 2, 4)?;
    let w = Arc::new(lab.writer(LockMode::Wait)?);
    let next = Arc::new(AtomicU64::new(first));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (w, next) = (Arc::clone(&w), Arc::clone(&next));
            std::thread::spawn(move || -> Result<(), String> {
                loop {
                    let seq = next.fetch_add(1, Ordering::SeqCst);
                    let idx = w
                        .append(sized_entry(seq, 200 + (seq % 5) as usize * 100, None))
                        .map_err(|e| e.to_string())?;
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "ack {} {seq}", idx.0).map_err(|e| e.to_string())?;
                    out.flush().map_err(|e| e.to_string())?;
                }
            })
        })
        .collect();
    for h in handles {
        h.join().map_err(|_| "appender panicked")??;
    }
    Ok(())
}

fn bench_appends(args: &[String]) -> Res {
    let entries = arg_u64(args, 0, 50_000)?;
    let threads = arg_u64(args, 1, 256)?;
    let dir = tempfile::tempdir_in(std::env::var("BENCH_DIR").unwrap_or_else(|_| ".".into()))?;
    let (lab, _) = LabDir::init(dir.path(), "bench.example/log")?;
    let w = Arc::new(lab.writer(LockMode::FailFast)?);
    let payloads: Arc<Vec<Vec<u8>>> =
        Arc::new((0..entries).map(|i| sized_entry(i, 1024, None)).collect());
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (w, next, payloads) = (Arc::clone(&w), Arc::clone(&next), Arc::clone(&payloads));
            std::thread::spawn(move || -> Result<(), String> {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= payloads.len() as u64 {
                        return Ok(());
                    }
                    w.append(payloads[i as usize].clone())
                        .map_err(|e| e.to_string())?;
                }
            })
        })
        .collect();
    for h in handles {
        h.join().map_err(|_| "appender panicked")??;
    }
    let secs = start.elapsed().as_secs_f64();
    let size = w.checkpoint().checkpoint.size.0;
    println!(
        "bench-appends: {size} durable appends of {} B entries, {threads} concurrent appenders: {secs:.2} s, {:.0} entries/s",
        payloads[0].len(),
        size as f64 / secs
    );
    Ok(())
}

fn bench_verify(args: &[String]) -> Res {
    let entries = arg_u64(args, 0, 1_000_000)?;
    let dir = tempfile::tempdir_in(std::env::var("BENCH_DIR").unwrap_or_else(|_| ".".into()))?;
    let (lab, _) = LabDir::init(dir.path(), "bench.example/log")?;
    // Ten small blobs, each referenced by every 1000th entry: the audit re-hashes each once.
    let blobs: Vec<(Blake3Hash, u64)> = (0..10u8)
        .map(|i| {
            lab.blobs()
                .put(&mut vec![i; 64 << 10].as_slice())
                .map(|p| (p.hash.0, p.bytes))
        })
        .collect::<Result<_, _>>()?;
    let t0 = Instant::now();
    {
        let w = lab.writer(LockMode::FailFast)?;
        let mut i = 0u64;
        while i < entries {
            let n = (entries - i).min(16_384);
            let batch: Vec<Vec<u8>> = (i..i + n)
                .map(|k| {
                    sized_entry(
                        k,
                        300,
                        (k % 1000 == 0).then(|| blobs[(k / 1000 % 10) as usize]),
                    )
                })
                .collect();
            w.append_batch(batch)?;
            i += n;
        }
    }
    let build = t0.elapsed().as_secs_f64();
    let src = DirSource {
        root: lab.root().to_path_buf(),
    };
    let t1 = Instant::now();
    let report =
        audit(&src, &lab.verifier_key()?, AuditOptions::default())?.map_err(|f| f.to_string())?;
    let secs = t1.elapsed().as_secs_f64();
    println!(
        "bench-verify: built {entries} entries of ~300 B in {build:.1} s; full audit (signature, {} entries, every hash tile, root, {} blobs): {secs:.2} s",
        report.entries, report.blobs
    );
    Ok(())
}

fn vm_hwm_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn bench_ingest(args: &[String]) -> Res {
    let file = std::path::PathBuf::from(args.first().ok_or("FILE missing")?);
    let len = std::fs::metadata(&file)?.len();
    let dir = tempfile::tempdir_in(std::env::var("BENCH_DIR").unwrap_or_else(|_| ".".into()))?;
    let (lab, _) = LabDir::init(dir.path(), "bench.example/log")?;
    let mib = len as f64 / (1 << 20) as f64;
    let b3sum = |path: &std::path::Path| -> Result<(f64, String), Box<dyn std::error::Error>> {
        // Warm the page cache so both tools read the same cached file.
        std::io::copy(&mut std::fs::File::open(path)?, &mut std::io::sink())?;
        let t = Instant::now();
        let out = std::process::Command::new("b3sum")
            .arg("--no-names")
            .arg(path)
            .output()?;
        let took = t.elapsed().as_secs_f64();
        if !out.status.success() {
            return Err("b3sum failed (install it with `cargo install b3sum`)".into());
        }
        Ok((
            took,
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
        ))
    };

    // 1. `ledger put FILE`: hash + a durable copy (the file stays).
    let (b3, b3hex) = b3sum(&file)?;
    let t = Instant::now();
    let put = lab.blobs().put_file(&file)?;
    let ours = t.elapsed().as_secs_f64();
    if b3hex != put.hash.0.to_hex() {
        return Err(format!("hash mismatch: b3sum {b3hex}, ours {}", put.hash).into());
    }
    // The floor for any durable copy on this disk: a plain copy made durable the same way
    // (`dd ... conv=fsync`), into the same directory, in the same run.
    let copy = dir.path().join("dd-copy.bin");
    let t = Instant::now();
    let dd = std::process::Command::new("dd")
        .arg(format!("if={}", file.display()))
        .arg(format!("of={}", copy.display()))
        .args(["bs=4M", "conv=fsync", "status=none"])
        .status()?;
    let dd_s = t.elapsed().as_secs_f64();
    if !dd.success() {
        return Err("dd failed".into());
    }
    println!(
        "bench-ingest: {mib:.0} MiB; b3sum (hash only) {b3:.2} s = {:.0} MiB/s; glassbox put (hash + durable copy) {ours:.2} s = {:.0} MiB/s; ratio vs b3sum {:.2}x; durable copy (dd conv=fsync) {dd_s:.2} s = {:.0} MiB/s; ratio vs durable copy {:.2}x",
        mib / b3,
        mib / ours,
        b3 / ours,
        mib / dd_s,
        dd_s / ours,
    );

    // 2. `ledger put --move FILE`: the file (already on disk, on the store's file system, as
    // a user's downloaded corpus or a finished checkpoint is) becomes the blob. The dd copy
    // above is that file: durable, and cached once b3sum has read it.
    // A second, empty lab on the same file system, so the move really renames (the first
    // store already holds these bytes, which would make the move a hash and an unlink).
    let (lab2, _) = LabDir::init(&dir.path().join("lab2"), "bench.example/log2")?;
    let (b3, b3hex) = b3sum(&copy)?;
    let t = Instant::now();
    let moved = lab2.blobs().put_move(&copy)?;
    let ours = t.elapsed().as_secs_f64();
    if b3hex != moved.hash.0.to_hex() || moved.existed || copy.exists() {
        return Err(format!(
            "move went wrong: b3sum {b3hex}, ours {} (existed {}, source still there {})",
            moved.hash,
            moved.existed,
            copy.exists()
        )
        .into());
    }
    println!(
        "bench-ingest --move: {mib:.0} MiB; b3sum {b3:.2} s = {:.0} MiB/s; glassbox put --move (parallel hash + fsync + rename) {ours:.2} s = {:.0} MiB/s; ratio vs b3sum {:.2}x",
        mib / b3,
        mib / ours,
        b3 / ours,
    );
    println!("peak RSS (VmHWM) {} KiB", vm_hwm_kib().unwrap_or(0));
    Ok(())
}

/// A witness under the issue's load: `LOGS` logs (default 100), each sending one checkpoint a
/// second (its tree grown by 1-4 entries, with the consistency proof from the last size) for
/// `SECS` seconds (default 30), each log on its own keep-alive connection, phases spread over
/// the second. The witness is the real `glassbox witness serve` (the binary given), on a
/// loopback port, with its SQLite state fsynced per cosignature. Prints the latency
/// percentiles of the answered requests and the machine's load average.
fn bench_witness(args: &[String]) -> Res {
    use glassbox_ledger::checkpoint::{Checkpoint, SigningKey};
    use glassbox_ledger::merkle::{MemoryTree, TreeSize, consistency_proof};
    use glassbox_ledger::witness::AddCheckpoint;
    use std::time::Duration;

    let bin = args
        .first()
        .ok_or("GLASSBOX (the glassbox binary) missing")?;
    let logs = arg_u64(args, 1, 100)? as usize;
    let secs = arg_u64(args, 2, 30)?;
    let dir = tempfile::tempdir()?;
    let keys: Vec<SigningKey> = (0..logs)
        .map(|i| {
            let mut seed = [0u8; 32];
            seed[..8].copy_from_slice(&(i as u64).to_be_bytes());
            SigningKey::from_seed(&format!("bench.example/log-{i}"), seed)
        })
        .collect::<Result<_, _>>()?;
    let vkeys = dir.path().join("logs.vkeys");
    std::fs::write(
        &vkeys,
        keys.iter()
            .map(|k| format!("{}\n", k.verifier_key()))
            .collect::<String>(),
    )?;
    let wkey = dir.path().join("w.key");
    let out = std::process::Command::new(bin)
        .args([
            "witness",
            "init",
            "--name",
            "bench.example/witness",
            "--key",
        ])
        .arg(&wkey)
        .output()?;
    if !out.status.success() {
        return Err(format!("witness init: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut server = std::process::Command::new(bin)
        .args(["witness", "serve", "--key"])
        .arg(&wkey)
        .arg("--state")
        .arg(dir.path().join("w.db"))
        .arg("--log")
        .arg(&vkeys)
        .args(["--bind", &format!("127.0.0.1:{port}")])
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if started.elapsed() > Duration::from_secs(30) {
            let _ = server.kill();
            return Err("the witness did not start listening within 30 s".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let url = format!("http://127.0.0.1:{port}/add-checkpoint");
    let t0 = Instant::now() + Duration::from_millis(500);
    let results: Vec<(Vec<f64>, u64)> = std::thread::scope(|scope| {
        let handles: Vec<_> = keys
            .iter()
            .enumerate()
            .map(|(i, key)| {
                let url = url.clone();
                scope.spawn(move || {
                    let agent: ureq::Agent = ureq::Agent::config_builder()
                        .http_status_as_error(false)
                        .timeout_global(Some(Duration::from_secs(10)))
                        .build()
                        .into();
                    let mut entries: Vec<Vec<u8>> = Vec::new();
                    let (mut held, mut lat, mut refused) = (0u64, Vec::new(), 0u64);
                    let phase = Duration::from_micros((i as u64 * 1_000_000) / logs as u64);
                    for tick in 0..secs {
                        let due = t0 + phase + Duration::from_secs(tick);
                        if let Some(wait) = due.checked_duration_since(Instant::now()) {
                            std::thread::sleep(wait);
                        }
                        for _ in 0..1 + (tick + i as u64) % 4 {
                            entries.push(format!("log {i} entry {}", entries.len()).into_bytes());
                        }
                        let tree = MemoryTree::from_entries(entries.iter().map(|e| e.as_slice()));
                        let n = TreeSize(entries.len() as u64);
                        let proof = if held == 0 {
                            Vec::new()
                        } else {
                            match consistency_proof(&tree, TreeSize(held), n) {
                                Ok(Ok(p)) => p,
                                _ => Vec::new(),
                            }
                        };
                        let note = key
                            .sign(Checkpoint {
                                origin: key.name().to_string(),
                                size: n,
                                root: tree.root(n),
                            })
                            .to_bytes();
                        let body = AddCheckpoint {
                            old_size: held,
                            proof,
                            note,
                        }
                        .to_bytes();
                        let sent = Instant::now();
                        match agent.post(&url).send(&body[..]) {
                            Ok(mut r) => {
                                let _ = r.body_mut().read_to_vec();
                                lat.push(sent.elapsed().as_secs_f64() * 1000.0);
                                if r.status().as_u16() == 200 {
                                    held = n.0;
                                } else {
                                    refused += 1;
                                }
                            }
                            Err(_) => refused += 1,
                        }
                    }
                    (lat, refused)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let _ = server.kill();
    let _ = server.wait();
    let mut all: Vec<f64> = results
        .iter()
        .flat_map(|(l, _)| l.iter().copied())
        .collect();
    let refused: u64 = results.iter().map(|(_, r)| r).sum();
    all.sort_by(f64::total_cmp);
    if all.is_empty() {
        return Err("no request was answered".into());
    }
    let pct = |p: f64| all[((all.len() as f64 * p).ceil() as usize).clamp(1, all.len()) - 1];
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "witness add-checkpoint: {logs} logs x 1/s for {secs} s: {} requests ({refused} not 200), p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; load average {}",
        all.len(),
        pct(0.50),
        pct(0.99),
        all[all.len() - 1],
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    Ok(())
}
