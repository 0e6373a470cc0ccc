//! `glassbox verify [TARGET] [--vkey KEY] [--prev CHECKPOINT] [--forget] [--witness KEY...
//! --quorum N] [--follow --every 60s --metrics-bind ADDR]`: the full audit of a lab directory,
//! a published copy, or the same layout over HTTP(S); with `--follow`, a monitor of it.
//!
//! Flags -> a [`Target`] and [`VerifyOptions`] -> [`glassbox_ledger::verify::verify`] (the key
//! policy, the witness quorum and the memory of what was seen live there) or
//! [`glassbox_ledger::monitor::follow`] -> printed lines. Exit 0 with one `verified:` line; exit
//! 1 naming the first bad item (or a key or origin that changed under the same target, or a
//! missing witness quorum; when following, a fork or rewrite naming both checkpoints); exit 3
//! when the target cannot be read.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use glassbox_ledger::audit::AuditPhase;
use glassbox_ledger::cosignature::{CosignerKey, WitnessPolicy};
use glassbox_ledger::monitor::{FollowOptions, MonitorState};
use glassbox_ledger::seen::SeenCheckpoints;
use glassbox_ledger::verify::{IndexCheck, KeySource, Target, VerifyOptions};
use glassbox_ledger::{DirSource, HttpSource, LogSource, VerifierKey, WithBlobStore};

use crate::GlobalOpts;
use crate::cli::ledger::{finish, runtime};
use crate::exit;

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// A lab directory, an http(s):// URL serving the same layout (a server, or the bucket a
    /// lab publishes its log to), or that bucket as `s3://bucket/prefix` (credentials from
    /// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL) [default: --lab].
    pub target: Option<String>,
    /// The verifier key (`name+hexid+base64`), or a file holding it.
    #[arg(long)]
    pub vkey: Option<String>,
    /// A signed checkpoint seen earlier (a file): the log must extend it.
    #[arg(long)]
    pub prev: Option<PathBuf>,
    /// Skip re-hashing blobs.
    #[arg(long)]
    pub no_blobs: bool,
    /// Read a lab directory's blobs from this store (a directory, `file:///path` or
    /// `s3://bucket/prefix`) [default: the lab's `lab.toml` `storage.blobs`, else its `blobs/`].
    #[arg(long, env = "GLASSBOX_BLOBS", conflicts_with = "no_blobs")]
    pub blobs: Option<String>,
    /// Index database to compare with the log [default: <lab>/index.db when it exists].
    #[arg(long, env = "GLASSBOX_INDEX_URL")]
    pub index_url: Option<String>,
    /// Forget what was remembered for this target before verifying (after a lab's announced
    /// key change or move), so its key is trusted on first use again.
    #[arg(long)]
    pub forget: bool,
    /// The most bytes read of a blob whose size no entry names [default: 64 GiB].
    #[arg(long)]
    pub max_blob_bytes: Option<u64>,
    /// Where remembered checkpoints are kept [default: $GLASSBOX_STATE_DIR, else
    /// $XDG_STATE_HOME/glassbox, else ~/.local/state/glassbox].
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// A witness whose cosignature the checkpoint must carry: its verifier key
    /// (`name+hexid+base64(0x04||key)`) or a file holding it. Repeat for more witnesses.
    #[arg(long = "witness")]
    pub witnesses: Vec<String>,
    /// How many of the --witness keys must have cosigned [default: all of them].
    #[arg(long, requires = "witnesses")]
    pub quorum: Option<usize>,
    /// Keep verifying the live log: check every new checkpoint (consistency with the last,
    /// new entries, their blobs, cosignatures) until a fork or rewrite, then exit 1.
    #[arg(long)]
    pub follow: bool,
    /// Time between checks when following (`60s`, `5m`, `500ms`, or seconds).
    #[arg(long, default_value = "60s", requires = "follow")]
    pub every: String,
    /// Serve the monitor's state as Prometheus metrics at http://ADDR/metrics.
    #[arg(long, requires = "follow")]
    pub metrics_bind: Option<std::net::SocketAddr>,
}

/// `60s`, `5m`, `1h`, `500ms` or a plain number of seconds.
fn parse_every(text: &str) -> anyhow::Result<std::time::Duration> {
    let t = text.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (t, 1.0)
    };
    let secs = num
        .trim()
        .parse::<f64>()
        .ok()
        .map(|v| v * scale)
        .filter(|s| s.is_finite() && *s >= 0.01 && *s <= 86_400.0);
    match secs {
        Some(s) => Ok(std::time::Duration::from_secs_f64(s)),
        None => anyhow::bail!(
            "--every {text:?}: expected a duration between 10ms and 24h, like 60s, 5m or 500ms"
        ),
    }
}

fn read_witness_arg(text: &str) -> anyhow::Result<CosignerKey> {
    let p = Path::new(text);
    let t = if !text.contains('+') && p.is_file() {
        std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?
    } else {
        text.to_string()
    };
    t.trim()
        .parse()
        .with_context(|| format!("--witness {text:?}"))
}

pub fn run(args: VerifyArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    finish(run_inner(args, global))
}

fn read_key_arg(text: &str) -> anyhow::Result<VerifierKey> {
    let p = Path::new(text);
    let t = if !text.contains('+') && p.is_file() {
        std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?
    } else {
        text.to_string()
    };
    Ok(t.trim().parse()?)
}

fn run_inner(args: VerifyArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    let text = args
        .target
        .clone()
        .unwrap_or_else(|| global.lab.display().to_string());
    let is_url = text.starts_with("http://") || text.starts_with("https://");
    let (target, index_url) = if is_url {
        (Target::url(&text, Box::new(HttpSource::new(&text))), None)
    } else if text.starts_with("s3://") {
        let bucket = glassbox_ledger::open_bucket_with_env(&text, &|k| std::env::var(k).ok())
            .with_context(|| format!("cannot open the bucket {text}"))?;
        (Target::url(&text, bucket), None)
    } else {
        let root = PathBuf::from(&text);
        if !root.is_dir() {
            return Err(glassbox_ledger::Error::NoLab {
                path: root,
                reason: "the directory does not exist".into(),
            }
            .into());
        }
        let store = match args.blobs.clone() {
            Some(loc) => Some(loc),
            None => glassbox_lab::handle::own_config(&root)?.and_then(|c| c.storage.blobs),
        };
        let source: Box<dyn LogSource> = match store {
            Some(loc) if !args.no_blobs => Box::new(WithBlobStore {
                inner: DirSource { root: root.clone() },
                blobs: glassbox_ledger::open_store(&loc)
                    .with_context(|| format!("cannot open the blob store {loc}"))?,
            }),
            _ => Box::new(DirSource { root: root.clone() }),
        };
        let index_url = args.index_url.clone().or_else(|| {
            let p = glassbox_ledger::LabDir::elsewhere(&root).index_path();
            p.is_file().then(|| p.display().to_string())
        });
        (Target::dir(&root, source), index_url)
    };
    let vkey = args.vkey.as_deref().map(read_key_arg).transpose()?;
    let witnesses: Vec<CosignerKey> = args
        .witnesses
        .iter()
        .map(|w| read_witness_arg(w))
        .collect::<anyhow::Result<_>>()?;
    let quorum = args.quorum.unwrap_or(witnesses.len());
    if !witnesses.is_empty() && (quorum == 0 || quorum > witnesses.len()) {
        eprintln!(
            "error: --quorum {quorum}: must be between 1 and the number of --witness keys ({})",
            witnesses.len()
        );
        return Ok(exit::code(2));
    }
    let policy = WitnessPolicy { witnesses, quorum };
    let every = if args.follow {
        Some(parse_every(&args.every)?)
    } else {
        None
    };
    let prev = match &args.prev {
        Some(p) => {
            Some(std::fs::read(p).with_context(|| format!("cannot read --prev {}", p.display()))?)
        }
        None => None,
    };
    let seen = SeenCheckpoints::new(
        args.state_dir
            .clone()
            .unwrap_or_else(SeenCheckpoints::default_dir),
    );
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg:8} [{bar:40}] {pos}/{len} {eta}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut progress = |phase: AuditPhase, done: u64, total: u64| {
        if total < 100_000 && phase == AuditPhase::Entries {
            return;
        }
        bar.set_message(phase.as_str());
        bar.set_length(total);
        bar.set_position(done);
    };
    let opts = VerifyOptions {
        vkey,
        prev,
        forget: args.forget,
        skip_blobs: args.no_blobs,
        max_blob_bytes: args.max_blob_bytes,
        index_url,
        witnesses: policy.clone(),
        progress: Some(&mut progress),
    };
    if let Some(every) = every {
        return follow(&target, opts, &seen, every, policy, &args);
    }
    let outcome = runtime()?.block_on(glassbox_ledger::verify::verify(&target, opts, &seen))?;
    bar.finish_and_clear();
    let report = match outcome {
        Ok(r) => r,
        Err(failure) => {
            eprintln!("verify failed: {failure}");
            return Ok(exit::code(exit::CHECK_FAILED));
        }
    };
    let audit = &report.audit;
    let cp = &audit.checkpoint.checkpoint;
    let omitted = if audit.blobs_omitted > 0 {
        format!(" (+{} omitted by publication)", audit.blobs_omitted)
    } else {
        String::new()
    };
    let consistency = match &report.extends {
        Some(p) => format!("consistent with size {}", p.size.0),
        None => "no earlier checkpoint".into(),
    };
    let index_note = match report.index {
        IndexCheck::NoIndex => "no index".to_string(),
        IndexCheck::Matches => "index matches".to_string(),
        IndexCheck::Behind { indexed, log } => format!(
            "index matches its first {indexed} of {log} entries (behind the log; `glassbox ledger log` catches it up)"
        ),
    };
    let key_note = match (&report.replaced_key, report.key_source) {
        (Some(old), KeySource::Given) => format!("given; replaces the remembered {old}"),
        (_, src) => src.to_string(),
    };
    let witness_note = match &report.cosigned {
        Some(q) => format!(", {q}"),
        None => String::new(),
    };
    println!(
        "verified: size {}, root {}, {} entries, {} blobs{} ({} bytes), {}, {}, key {} ({}){}, {:.2} s",
        cp.size.0,
        cp.root.to_base64(),
        audit.entries,
        audit.blobs,
        omitted,
        audit.blob_bytes,
        consistency,
        index_note,
        report.vkey,
        key_note,
        witness_note,
        audit.seconds
    );
    Ok(exit::code(exit::OK))
}

/// `--follow`: the monitor, with its metrics served from a thread of their own (a check reads
/// the target with blocking I/O and must not stall a scrape).
fn follow(
    target: &Target,
    first: VerifyOptions<'_>,
    seen: &SeenCheckpoints,
    every: std::time::Duration,
    witnesses: WitnessPolicy,
    args: &VerifyArgs,
) -> anyhow::Result<ExitCode> {
    let state = std::sync::Arc::new(std::sync::Mutex::new(MonitorState::default()));
    if let Some(bind) = args.metrics_bind {
        let listener = std::net::TcpListener::bind(bind)
            .with_context(|| format!("cannot listen on --metrics-bind {bind}"))?;
        listener
            .set_nonblocking(true)
            .context("the metrics socket")?;
        let state = state.clone();
        std::thread::spawn(move || {
            let serve = async move {
                let listener = tokio::net::TcpListener::from_std(listener)?;
                let app = axum::Router::new().route(
                    "/metrics",
                    axum::routing::get(move || {
                        let text = state.lock().unwrap_or_else(|p| p.into_inner()).prometheus();
                        async move {
                            (
                                [(
                                    axum::http::header::CONTENT_TYPE,
                                    "text/plain; version=0.0.4",
                                )],
                                text,
                            )
                        }
                    }),
                );
                glassbox_web::listener::serve_router(
                    listener,
                    app,
                    glassbox_web::ServerLimits::default(),
                    std::future::pending(),
                )
                .await
                .map_err(std::io::Error::other)
            };
            if let Ok(rt) = runtime()
                && let Err(e) = rt.block_on(serve)
            {
                eprintln!("warning: the metrics endpoint stopped: {e}");
            }
        });
        eprintln!("metrics at http://{bind}/metrics");
    }
    let opts = FollowOptions {
        every,
        skip_blobs: args.no_blobs,
        max_blob_bytes: args.max_blob_bytes,
        witnesses,
    };
    let mut last_size = None;
    let alarm = runtime()?.block_on(glassbox_ledger::monitor::follow(
        target,
        first,
        seen,
        &opts,
        &state,
        |s, err| match err {
            Some(e) => eprintln!("check {}: cannot read the log ({e}); retrying", s.checks),
            None if last_size != Some(s.size) => {
                last_size = Some(s.size);
                let witnesses = if s.quorum > 0 {
                    format!(", {} of quorum {} cosigned", s.cosignatures, s.quorum)
                } else {
                    String::new()
                };
                println!(
                    "following: size {} verified ({} entries and {} blobs checked so far{witnesses})",
                    s.size, s.entries_checked, s.blobs_checked
                );
            }
            None => {}
        },
    ))?;
    eprintln!("verify failed: {alarm}");
    Ok(exit::code(exit::CHECK_FAILED))
}
