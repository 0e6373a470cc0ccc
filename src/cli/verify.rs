//! `glassbox verify [TARGET] [--vkey KEY] [--prev CHECKPOINT]`: the full audit of a lab
//! directory, a published copy, or the same layout over HTTP(S).
//!
//! Exit 0 with one `verified:` line; exit 1 naming the first bad item; exit 3 when the target
//! cannot be read. The verifier key comes from `--vkey`, else the key remembered for this log,
//! else the target's own `vkey` file (trusted on first use, and remembered). The last verified
//! checkpoint is remembered per log so the next run checks that the history only grew.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use glassbox_ledger::audit::{AuditOptions, AuditPhase, parse_prev};
use glassbox_ledger::index::{Index, IndexMismatch};
use glassbox_ledger::seen::{Seen, SeenCheckpoints};
use glassbox_ledger::{
    DirSource, HttpSource, LogReader, LogSource, SignedCheckpoint, VerifierKey, WithBlobStore,
};

use crate::GlobalOpts;
use crate::cli::ledger::{finish, runtime};
use crate::exit;

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// A lab directory or an http(s):// URL serving the same layout [default: --lab].
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
    /// Where remembered checkpoints are kept [default: $GLASSBOX_STATE_DIR, else
    /// $XDG_STATE_HOME/glassbox, else ~/.local/state/glassbox].
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
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
    let target = args
        .target
        .clone()
        .unwrap_or_else(|| global.lab.display().to_string());
    let is_url = target.starts_with("http://") || target.starts_with("https://");
    let source: Box<dyn LogSource> = if is_url {
        Box::new(HttpSource::new(&target))
    } else {
        let root = PathBuf::from(&target);
        if !root.is_dir() {
            return Err(glassbox_ledger::Error::NoLab {
                path: root,
                reason: "the directory does not exist".into(),
            }
            .into());
        }
        let store = match args.blobs.clone() {
            Some(loc) => Some(loc),
            None => crate::cli::lab_context::configured_blobs(&root)?,
        };
        match store {
            Some(loc) if !args.no_blobs => Box::new(WithBlobStore {
                inner: DirSource { root },
                blobs: glassbox_ledger::open_store(&loc)
                    .with_context(|| format!("cannot open the blob store {loc}"))?,
            }),
            _ => Box::new(DirSource { root }),
        }
    };
    let note = source.read("log/checkpoint")?.with_context(|| {
        format!(
            "{} has no log/checkpoint: is it a glassbox lab?",
            source.locate("")
        )
    })?;
    // The origin names the log; the signature is checked by the audit below.
    let origin = String::from_utf8_lossy(&note)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string();
    let seen_store = SeenCheckpoints::new(
        args.state_dir
            .clone()
            .unwrap_or_else(SeenCheckpoints::default_dir),
    );
    let seen = seen_store.load(&origin)?;
    let (vkey, key_note) = match (&args.vkey, &seen) {
        (Some(k), _) => (read_key_arg(k)?, "given"),
        (None, Some(s)) => (s.vkey.parse::<VerifierKey>()?, "remembered"),
        (None, None) => {
            let text = source.read("vkey")?.with_context(|| {
                format!("no --vkey given and {} is missing", source.locate("vkey"))
            })?;
            (
                String::from_utf8_lossy(&text)
                    .trim()
                    .parse::<VerifierKey>()?,
                "from the lab, trusted on first use",
            )
        }
    };
    let prev = match (&args.prev, &seen) {
        (Some(p), _) => {
            let bytes =
                std::fs::read(p).with_context(|| format!("cannot read --prev {}", p.display()))?;
            Some(parse_prev(&bytes, &vkey).with_context(|| format!("--prev {}", p.display()))?)
        }
        (None, Some(s)) if s.vkey == vkey.to_string() => {
            SignedCheckpoint::parse(&s.note).ok().map(|c| c.checkpoint)
        }
        _ => None,
    };
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg:8} [{bar:40}] {pos}/{len} {eta}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut progress = |phase: AuditPhase, done: u64, total: u64| {
        if total < 100_000 && phase == AuditPhase::Entries {
            return;
        }
        bar.set_message(match phase {
            AuditPhase::Entries => "entries",
            AuditPhase::Blobs => "blobs",
        });
        bar.set_length(total);
        bar.set_position(done);
    };
    let outcome = glassbox_ledger::audit(
        source.as_ref(),
        &vkey,
        AuditOptions {
            prev: prev.clone(),
            skip_blobs: args.no_blobs,
            progress: Some(&mut progress),
        },
    )?;
    bar.finish_and_clear();
    let report = match outcome {
        Ok(r) => r,
        Err(failure) => {
            eprintln!("verify failed: {failure}");
            return Ok(exit::code(exit::CHECK_FAILED));
        }
    };
    // The index, for a local lab that has one.
    let mut index_note = String::from("no index");
    if !is_url {
        let root = PathBuf::from(&target);
        let url = args.index_url.clone().or_else(|| {
            let p = root.join("index.db");
            p.is_file().then(|| p.display().to_string())
        });
        if let Some(url) = url {
            let dir = DirSource { root };
            let reader = LogReader::new(&dir, report.checkpoint.clone());
            let res = runtime()?.block_on(async {
                let idx = Index::connect(&url).await?;
                let r = idx.check(&reader).await?;
                idx.close().await;
                anyhow::Ok(r)
            })?;
            index_note = match res {
                Ok(()) => "index matches".into(),
                // A derived index that lags a growing log is not a finding: every row it has
                // matched. Rows that differ, or an index ahead of the log, are.
                Err(IndexMismatch::Behind { indexed, log }) => format!(
                    "index matches its first {indexed} of {log} entries (behind the log;                      `glassbox ledger log` catches it up)"
                ),
                Err(m) => {
                    eprintln!("verify failed: index {url}: {m}");
                    return Ok(exit::code(exit::CHECK_FAILED));
                }
            };
        }
    }
    seen_store.save(
        &origin,
        &Seen {
            vkey: vkey.to_string(),
            note: report.checkpoint.to_bytes(),
        },
    )?;
    let cp = &report.checkpoint.checkpoint;
    let omitted = if report.blobs_omitted > 0 {
        format!(" (+{} omitted by publication)", report.blobs_omitted)
    } else {
        String::new()
    };
    let consistency = match &prev {
        Some(p) => format!("consistent with size {}", p.size.0),
        None => "no earlier checkpoint".into(),
    };
    println!(
        "verified: size {}, root {}, {} entries, {} blobs{} ({} bytes), {}, {}, key {} ({}), {:.2} s",
        cp.size.0,
        cp.root.to_base64(),
        report.entries,
        report.blobs,
        omitted,
        report.blob_bytes,
        consistency,
        index_note,
        vkey,
        key_note,
        report.seconds
    );
    Ok(exit::code(exit::OK))
}
