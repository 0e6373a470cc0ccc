//! `glassbox verify [TARGET] [--vkey KEY] [--prev CHECKPOINT] [--forget]`: the full audit of a
//! lab directory, a published copy, or the same layout over HTTP(S).
//!
//! Flags -> a [`Target`] and [`VerifyOptions`] -> [`glassbox_ledger::verify::verify`] (the key
//! policy and the memory of what was seen live there) -> one printed line. Exit 0 with one
//! `verified:` line; exit 1 naming the first bad item (or a key or origin that changed under
//! the same target); exit 3 when the target cannot be read.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use glassbox_ledger::audit::AuditPhase;
use glassbox_ledger::seen::SeenCheckpoints;
use glassbox_ledger::verify::{IndexCheck, KeySource, Target, VerifyOptions};
use glassbox_ledger::{DirSource, HttpSource, LogSource, VerifierKey, WithBlobStore};

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
            let p = root.join("index.db");
            p.is_file().then(|| p.display().to_string())
        });
        (Target::dir(&root, source), index_url)
    };
    let vkey = args.vkey.as_deref().map(read_key_arg).transpose()?;
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
        bar.set_message(match phase {
            AuditPhase::Entries => "entries",
            AuditPhase::Blobs => "blobs",
        });
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
        progress: Some(&mut progress),
    };
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
    println!(
        "verified: size {}, root {}, {} entries, {} blobs{} ({} bytes), {}, {}, key {} ({}), {:.2} s",
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
        audit.seconds
    );
    Ok(exit::code(exit::OK))
}
