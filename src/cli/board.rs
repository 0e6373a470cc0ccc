//! `glassbox board [NAME]`: the lab's leaderboards rebuilt from its log alone — the signed log
//! in the lab directory (or a copy of it), checked against the lab's key, and the spec blobs;
//! no database. The definitions come from the lab config's `[[leaderboard]]` tables. What
//! `--json` prints is what the dashboard serves at `/api/v1/boards/<name>`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use glassbox_lab::LabConfig;
use glassbox_ledger::board::{Board, BoardBuilder};
use glassbox_ledger::{BlobStore, DirSource, LabDir, LeafIndex, LogReader};
use glassbox_schemas::{BlobHash, LedgerEntry};

use crate::GlobalOpts;
use crate::exit;

/// `glassbox board` flags.
#[derive(Debug, clap::Args)]
pub struct BoardArgs {
    /// One board by name. Default: every board the config declares.
    pub name: Option<String>,
    /// The lab configuration declaring the boards. Default: `<lab>/lab.toml`.
    #[arg(long, env = "GLASSBOX_CONFIG")]
    pub config: Option<PathBuf>,
    /// Print JSON (one board with NAME, else an array).
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: BoardArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    let config_path = args
        .config
        .clone()
        .unwrap_or_else(|| global.lab.join(glassbox_lab::handle::CONFIG_FILE));
    let config = if config_path.exists() {
        LabConfig::load(&config_path)?
    } else {
        LabConfig::default()
    };
    let mut defs = config.leaderboards.clone();
    if let Some(name) = &args.name {
        defs.retain(|d| &d.name == name);
        if defs.is_empty() {
            let known: Vec<_> = config
                .leaderboards
                .iter()
                .map(|d| d.name.as_str())
                .collect();
            eprintln!(
                "error: no leaderboard {name:?} in {}; it declares: {}",
                config_path.display(),
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            );
            return Ok(exit::code(exit::CHECK_FAILED));
        }
    }
    if defs.is_empty() && !args.json {
        // Nothing to derive: say so and where boards are declared, rather than print nothing.
        println!(
            "no leaderboards declared in {}{}; declare one with a [[leaderboard]] table \
             (name, metric, direction), e.g.\n\n  [[leaderboard]]\n  name = \"eval-loss\"\n  \
             metric = \"eval/loss\"\n  direction = \"min\"",
            config_path.display(),
            if config_path.exists() {
                ""
            } else {
                " (the file does not exist)"
            },
        );
        return Ok(exit::code(exit::OK));
    }
    let boards = derive(&global.lab, &defs)?;
    if args.json {
        let out = match (&args.name, boards.as_slice()) {
            (Some(_), [one]) => serde_json::to_string_pretty(one)?,
            _ => serde_json::to_string_pretty(&boards)?,
        };
        println!("{out}");
        return Ok(exit::code(exit::OK));
    }
    for b in &boards {
        print_board(b);
    }
    Ok(exit::code(exit::OK))
}

/// Every board of `defs` over the log in `lab` (verified against its key) and its blobs.
fn derive(
    lab: &std::path::Path,
    defs: &[glassbox_ledger::board::BoardDef],
) -> anyhow::Result<Vec<Board>> {
    let dir =
        LabDir::open(lab).with_context(|| format!("cannot open the lab at {}", lab.display()))?;
    let source = DirSource {
        root: lab.to_path_buf(),
    };
    let reader = LogReader::open(&source, &dir.verifier_key()?)
        .with_context(|| format!("cannot read the log in {}", lab.display()))?;
    let mut builder = BoardBuilder::new();
    for i in 0..reader.size().0 {
        let bytes = reader.entry(LeafIndex(i))?;
        let entry = LedgerEntry::from_bytes(&bytes)
            .with_context(|| format!("entry {i} is not a ledger entry"))?;
        builder.add(i, &entry);
    }
    let blobs = dir.blobs();
    Ok(builder.finish(defs, |h| {
        // A spec is small; one that is not JSON (or missing) leaves the row without compute.
        blobs
            .get(&BlobHash(h.0))
            .ok()
            .and_then(|r| serde_json::from_reader(std::io::Read::take(r, 1 << 20)).ok())
    }))
}

fn print_board(b: &Board) {
    let dir = match b.def.direction {
        glassbox_schemas::sweep::Direction::Min => "lower is better",
        glassbox_schemas::sweep::Direction::Max => "higher is better",
    };
    println!(
        "{}: {} ({dir}), compute in {}; derived from {} entries",
        b.def.name,
        b.def.metric,
        b.def.compute.unit(),
        b.log_size
    );
    if b.ranked.is_empty() {
        println!("  no reproduced result yet");
    }
    for r in &b.ranked {
        println!(
            "  {:>3}. {:<28} {:<14} {:>12.6} {:>10} {}{}",
            r.rank.unwrap_or(0),
            r.experiment.0,
            r.author,
            r.value,
            r.compute
                .map(|c| format!("{c:.3e}"))
                .unwrap_or_else(|| "-".into()),
            r.run.0,
            if r.pareto { "  (frontier)" } else { "" }
        );
    }
    if !b.awaiting.is_empty() {
        println!("  awaiting reproduction (not ranked):");
        for r in &b.awaiting {
            println!(
                "       {:<28} {:<14} {:>12.6} {}",
                r.experiment.0, r.author, r.value, r.run.0
            );
        }
    }
    if !b.failed.is_empty() {
        println!("  reproduction failed (not ranked):");
        for r in &b.failed {
            let why = r
                .reproductions
                .iter()
                .find(|x| x.outcome == "differs")
                .and_then(|x| x.detail.clone())
                .unwrap_or_default();
            println!(
                "       {:<28} {:<14} {:>12.6} {} {why}",
                r.experiment.0, r.author, r.value, r.run.0
            );
        }
    }
}
