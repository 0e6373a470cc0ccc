//! `glassbox eval` (a run's snapshots scored on a suite, recorded as `evaluation` entries) and
//! `glassbox data eval-suite` (`import` a suite file, `generate` a built-in one, `list` them).
//! Flags and printing only: the work is [`glassbox_lab::eval`]'s.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use glassbox_lab::eval::{self, SuiteRef, generate, suite};
use glassbox_lab::trained::{Pick, RunSnapshots, TrainedModel};
use glassbox_schemas::RunId;
use glassbox_schemas::eval::{EvalKind, SuiteName};
use glassbox_schemas::spec::GeneratorSpec;

use crate::GlobalOpts;
use crate::cli::args::{self, LabArgs};
use crate::exit;

/// Suite kinds on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KindArg {
    /// `{"text": ...}` per line: NLL and bits per byte.
    Perplexity,
    /// `{"context": ..., "choices": [...], "answer": i}` per line: acc and acc_norm.
    MultipleChoice,
}

impl From<KindArg> for EvalKind {
    fn from(k: KindArg) -> Self {
        match k {
            KindArg::Perplexity => EvalKind::Perplexity,
            KindArg::MultipleChoice => EvalKind::MultipleChoice,
        }
    }
}

/// `glassbox data eval-suite` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum EvalSuiteCommand {
    /// Store a JSONL (or Parquet) file of items as a suite: a blob of canonical lines and an
    /// `eval_suite` entry whose hash is the suite's version. Every item is checked first; a bad
    /// one is named by line and field and nothing is stored.
    Import {
        /// The file: one item per line (JSONL) or per row (Parquet).
        file: PathBuf,
        /// The suite's name (a-z, 0-9, `.`, `_`, `-`).
        #[arg(long)]
        name: String,
        /// What each item is.
        #[arg(long, value_enum)]
        kind: KindArg,
        /// The items' licence, as the record should state it (e.g. `CC-BY-SA-4.0`).
        #[arg(long)]
        licence: Option<String>,
        /// Where the items came from (a URL).
        #[arg(long)]
        source: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write a suite drawn from a spec's Markov source, with a known answer (the continuation
    /// the source makes most likely), as JSONL. The same flags give the same bytes.
    Generate {
        /// The spec whose first Markov domain (or `--domain`) the items are drawn from.
        #[arg(long = "from")]
        from: PathBuf,
        /// Which of its domains.
        #[arg(long)]
        domain: Option<String>,
        /// What each item is.
        #[arg(long, value_enum)]
        kind: KindArg,
        /// Items to draw.
        #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=100_000))]
        items: u64,
        /// Seed of the draws.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Where to write the JSONL.
        #[arg(long)]
        out: PathBuf,
    },
    /// Every suite version on the record.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `glassbox eval` flags.
#[derive(Debug, clap::Args)]
pub struct EvalArgs {
    /// The run, e.g. run-000001.
    pub run: String,
    /// The suite: a name (its newest version) or a version's hash.
    #[arg(long)]
    pub suite: String,
    /// The snapshot saved after this many steps. Default: the newest.
    #[arg(long, conflicts_with = "all_snapshots")]
    pub step: Option<u64>,
    /// Every snapshot of the run, oldest first.
    #[arg(long)]
    pub all_snapshots: bool,
    #[command(flatten)]
    pub lab: LabArgs,
    /// CPU threads (the result is bitwise the same for any value). Default: all cores.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn suite_command(cmd: EvalSuiteCommand, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    if let EvalSuiteCommand::Generate {
        from,
        domain,
        kind,
        items,
        seed,
        out,
    } = cmd
    {
        return generate_file(&from, domain.as_deref(), kind.into(), items, seed, &out);
    }
    let lab_args = LabArgs::defaults();
    args::runtime()?.block_on(async {
        let ctx = args::open(global, &lab_args, true).await?;
        let rec = ctx.recorder.clone();
        match cmd {
            EvalSuiteCommand::Import {
                file,
                name,
                kind,
                licence,
                source,
                json,
            } => {
                let name: SuiteName = name
                    .parse()
                    .map_err(|e: String| anyhow::anyhow!("--name: {e}"))?;
                let req = suite::SuiteImport {
                    file,
                    name,
                    kind: kind.into(),
                    licence,
                    source,
                };
                let stored = tokio::task::spawn_blocking(move || suite::import(&rec, &req))
                    .await?
                    ?;
                if json {
                    let out = serde_json::json!({"entry": stored.entry, "suite": stored.body});
                    println!("{}", serde_json::to_string_pretty(&out)?);
                } else {
                    let b = &stored.body;
                    println!(
                        "suite {} ({}, {} items) version {} in entry {}",
                        b.name, b.kind, b.items, b.suite, stored.entry
                    );
                }
            }
            EvalSuiteCommand::List { json } => {
                let all = tokio::task::spawn_blocking(move || rec.eval_suites()).await??;
                if json {
                    let rows: Vec<_> = all
                        .iter()
                        .map(|(i, b)| serde_json::json!({"entry": i, "suite": b}))
                        .collect();
                    println!("{}", serde_json::to_string_pretty(&rows)?);
                } else if all.is_empty() {
                    println!(
                        "no suites; `glassbox data eval-suite import FILE --name N --kind K` stores one"
                    );
                } else {
                    for (i, b) in all {
                        println!(
                            "{:>6}  {:<24} {:<16} {:>7} items  {}",
                            i, b.name, b.kind, b.items, b.suite
                        );
                    }
                }
            }
            EvalSuiteCommand::Generate { .. } => {}
        }
        Ok(exit::code(exit::OK))
    })
}

/// `data eval-suite generate`: the items as JSONL in `out`.
fn generate_file(
    spec_path: &PathBuf,
    domain: Option<&str>,
    kind: EvalKind,
    items: u64,
    seed: u64,
    out: &PathBuf,
) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(spec_path)
        .with_context(|| format!("--from {}: cannot read it", spec_path.display()))?;
    let spec = glassbox_schemas::parse_toml(&text)
        .map_err(|e| anyhow::anyhow!("--from {}: {e}", spec_path.display()))?;
    let g: &GeneratorSpec = spec
        .data
        .mixture
        .iter()
        .filter(|c| domain.is_none_or(|d| c.domain == d))
        .find_map(|c| c.generator.as_ref())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "--from {}: no Markov domain{} in its mixture",
                spec_path.display(),
                domain.map(|d| format!(" named {d}")).unwrap_or_default()
            )
        })?;
    let drawn = generate::markov_items(g, kind, items as usize, seed)?;
    let bytes = suite::jsonl(&drawn)?;
    std::fs::write(out, &bytes).with_context(|| format!("--out {}", out.display()))?;
    eprintln!(
        "{} {} items drawn from {}'s Markov source (seed {}) written to {}",
        drawn.len(),
        kind,
        spec_path.display(),
        seed,
        out.display()
    );
    Ok(exit::code(exit::OK))
}

pub fn run(a: EvalArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    let which: SuiteRef = a
        .suite
        .parse()
        .map_err(|e: String| anyhow::anyhow!("--suite: {e}"))?;
    let threads = a
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    args::runtime()?.block_on(async {
        let ctx = args::open(global, &a.lab, false).await?;
        let rec = ctx.recorder.clone();
        let run = RunId(a.run.clone());
        let (step, all) = (a.step, a.all_snapshots);
        let build = glassbox_lab::worker::build_identity(crate::GIT_REVISION);
        let done = tokio::task::spawn_blocking(move || {
            let stored = suite::find(&rec, &which)?;
            let loaded = suite::load(&rec, &stored)?;
            let picks: Vec<Pick> = if all {
                RunSnapshots::find(&rec, &run)?
                    .snapshots
                    .iter()
                    .map(|s| Pick::Blob(s.blob))
                    .collect()
            } else {
                vec![step.map(Pick::Step).unwrap_or_default()]
            };
            let mut out = Vec::new();
            for pick in picks {
                let model = TrainedModel::load(&rec, &run, &pick)?;
                let mut done = eval::evaluate(&rec, &model, &loaded, threads, &|| false)?
                    .ok_or_else(|| glassbox_lab::LabError::Refused("cancelled".into()))?;
                done.body.build = build.clone();
                done.body.worker = Some(glassbox_lab::worker::host_name());
                let entry = rec.record(
                    done.experiment.as_ref(),
                    done.refs.clone(),
                    done.body.clone(),
                )?;
                out.push((entry, done));
            }
            Ok::<_, glassbox_lab::LabError>(out)
        })
        .await?
        ?;
        if a.json {
            let rows: Vec<_> = done
                .iter()
                .map(|(entry, d)| {
                    serde_json::json!({
                        "entry": entry,
                        "run": d.body.run,
                        "step": d.body.step,
                        "snapshot": d.body.snapshot,
                        "suite": d.body.suite,
                        "suite_hash": d.body.suite_hash,
                        "kind": d.body.kind,
                        "items": d.body.items,
                        "metrics": d.body.metrics,
                        "contamination": d.body.contamination,
                        "seconds": d.score_seconds,
                        "contamination_seconds": d.contamination_seconds,
                    })
                })
                .collect();
            let out = if rows.len() == 1 {
                rows.into_iter().next().unwrap_or_default()
            } else {
                serde_json::Value::Array(rows)
            };
            println!("{}", serde_json::to_string_pretty(&out)?);
        } else {
            for (entry, d) in &done {
                let c = d.body.contamination.as_ref();
                println!(
                    "{} (entry {entry}; {} items in {:.2} s){}",
                    eval::headline(&d.body),
                    d.body.items,
                    d.score_seconds,
                    c.map(|c| format!(
                        "; contamination {} of {} items ({:.1}%) share a {}-gram with the training data",
                        c.flagged,
                        d.body.items,
                        c.fraction * 100.0,
                        c.ngram
                    ))
                    .unwrap_or_default()
                );
            }
        }
        Ok(exit::code(exit::OK))
    })
}
