//! `glassbox score` and `glassbox sample`: what a run's snapshot makes of a text, and what it
//! writes after a prompt, on this machine's CPU. Flags and printing only; loading the snapshot
//! and running the model are [`glassbox_lab::trained`]'s.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use glassbox_lab::trained::{Pick, TrainedModel};
use glassbox_runner::backend;
use glassbox_runner::sampling::SampleSettings;
use glassbox_schemas::{BlobHash, RunId};

use crate::GlobalOpts;
use crate::cli::args::{self, LabArgs};
use crate::cli::run::BackendArg;
use crate::exit;

/// Largest text `score` reads, and largest prompt file `sample` reads.
const MAX_TEXT_BYTES: u64 = 64 << 20;

/// Which snapshot of which run.
#[derive(Debug, Clone, clap::Args)]
pub struct SnapshotArgs {
    /// The run, e.g. run-000001 (see `glassbox jobs`).
    pub run: String,
    /// The snapshot saved after this many steps. Default: the newest.
    #[arg(long, conflicts_with = "snapshot")]
    pub step: Option<u64>,
    /// The snapshot with this blob hash (`blake3:<64 hex>`, from the run page or the ledger).
    #[arg(long)]
    pub snapshot: Option<String>,
}

impl SnapshotArgs {
    fn pick(&self) -> anyhow::Result<Pick> {
        Ok(match (&self.step, &self.snapshot) {
            (Some(step), _) => Pick::Step(*step),
            (None, Some(h)) => Pick::Blob(h.parse::<BlobHash>().map_err(|e| {
                anyhow::anyhow!(
                    "--snapshot {h:?} is not a blob hash: {e}; expected blake3:<64 hex>"
                )
            })?),
            (None, None) => Pick::Newest,
        })
    }
}

/// `glassbox score` flags.
#[derive(Debug, clap::Args)]
pub struct ScoreArgs {
    #[command(flatten)]
    pub snapshot: SnapshotArgs,
    /// The text to score (UTF-8).
    #[arg(long)]
    pub text: PathBuf,
    #[command(flatten)]
    pub lab: LabArgs,
    /// CPU threads (the result is bitwise the same for any value). Default: all cores.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Print JSON, with every token's log-likelihood.
    #[arg(long)]
    pub json: bool,
}

/// `glassbox sample` flags.
#[derive(Debug, clap::Args)]
pub struct SampleArgs {
    #[command(flatten)]
    pub snapshot: SnapshotArgs,
    /// The prompt.
    #[arg(
        long,
        conflicts_with = "prompt_file",
        required_unless_present = "prompt_file"
    )]
    pub prompt: Option<String>,
    /// A file holding the prompt (UTF-8).
    #[arg(long)]
    pub prompt_file: Option<PathBuf>,
    /// Tokens to write at most.
    #[arg(long, default_value_t = 64)]
    pub max_tokens: usize,
    /// 0 is greedy; higher is more random (at most 100).
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub temperature: f64,
    /// Draw only among the K most likely tokens.
    #[arg(long)]
    pub top_k: Option<usize>,
    /// Draw only among the most likely tokens holding this much probability (nucleus).
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub top_p: f64,
    /// Seed of the draws (the same seed, prompt and settings give the same text).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[command(flatten)]
    pub lab: LabArgs,
    /// CPU threads (the text is the same for any value). Default: all cores.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Compute backend. The CPU is the reference, whose text is the same on every machine;
    /// `cuda` (or `auto` where a GPU is usable) decodes on the GPU, in the run's precision.
    #[arg(long, value_enum, default_value = "cpu")]
    pub backend: BackendArg,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

fn threads(flag: Option<usize>) -> usize {
    flag.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// A UTF-8 file of at most [`MAX_TEXT_BYTES`].
fn read_text(path: &PathBuf, flag: &str) -> anyhow::Result<String> {
    let len = std::fs::metadata(path)
        .with_context(|| format!("{flag} {}: cannot read it", path.display()))?
        .len();
    anyhow::ensure!(
        len <= MAX_TEXT_BYTES,
        "{flag} {}: {len} bytes; the limit is {MAX_TEXT_BYTES}",
        path.display()
    );
    let bytes = std::fs::read(path)
        .with_context(|| format!("{flag} {}: cannot read it", path.display()))?;
    String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "{flag} {}: not UTF-8 text (first bad byte at offset {})",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })
}

/// Loads the snapshot on a blocking thread and runs `f` on it.
async fn with_model<T: Send + 'static>(
    global: &GlobalOpts,
    lab: &LabArgs,
    snapshot: &SnapshotArgs,
    f: impl FnOnce(&TrainedModel) -> Result<T, glassbox_lab::LabError> + Send + 'static,
) -> anyhow::Result<(TrainedModel, T)> {
    let ctx = args::open(global, lab, false).await?;
    let rec = ctx.recorder.clone();
    let run = RunId(snapshot.run.clone());
    let pick = snapshot.pick()?;
    let out = tokio::task::spawn_blocking(move || {
        let model = TrainedModel::load(&rec, &run, &pick)?;
        let out = f(&model)?;
        Ok::<_, glassbox_lab::LabError>((model, out))
    })
    .await??;
    Ok(out)
}

pub fn score(args: ScoreArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    let text = read_text(&args.text, "--text")?;
    let threads = threads(args.threads);
    args::runtime()?.block_on(async {
        let (model, s) = with_model(global, &args.lab, &args.snapshot, move |m| {
            m.score(threads, &text)
        })
        .await?;
        if args.json {
            let out = serde_json::json!({
                "run": model.run,
                "step": model.snapshot.step,
                "snapshot": model.snapshot.blob,
                "score": s,
            });
            println!("{}", serde_json::to_string_pretty(&out)?);
        } else {
            println!(
                "{} at step {} ({}): {} tokens, {} scored over {} bytes",
                model.run, model.snapshot.step, model.snapshot.blob, s.tokens, s.predicted, s.bytes
            );
            println!(
                "nll {:.6} nats in all, {:.6} per token, {:.6} bits per byte",
                s.total_nll, s.nll_per_token, s.bits_per_byte
            );
        }
        Ok(exit::code(exit::OK))
    })
}

pub fn sample(args: SampleArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    let prompt = match (&args.prompt, &args.prompt_file) {
        (Some(p), _) => p.clone(),
        (None, Some(f)) => read_text(f, "--prompt-file")?,
        (None, None) => anyhow::bail!("give --prompt TEXT or --prompt-file FILE"),
    };
    let settings = SampleSettings {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        seed: args.seed,
    };
    let threads = threads(args.threads);
    let max_tokens = args.max_tokens;
    // A backend that cannot run here is refused before the snapshot is read.
    let selection = backend::select(args.backend.into())?;
    eprintln!("backend: {} ({})", selection.kind, selection.why);
    let backend = selection.kind;
    args::runtime()?.block_on(async {
        let (model, c) = with_model(global, &args.lab, &args.snapshot, move |m| {
            let on = selection.start(threads)?;
            m.sample(&on, &prompt, max_tokens, settings)
        })
        .await?;
        if args.json {
            let out = serde_json::json!({
                "run": model.run,
                "step": model.snapshot.step,
                "snapshot": model.snapshot.blob,
                "backend": backend.as_str(),
                "settings": {
                    "max_tokens": max_tokens,
                    "temperature": settings.temperature,
                    "top_k": settings.top_k,
                    "top_p": settings.top_p,
                    "seed": settings.seed,
                },
                "completion": c,
            });
            println!("{}", serde_json::to_string_pretty(&out)?);
        } else {
            if c.prompt_tokens_dropped > 0 {
                eprintln!(
                    "note: the prompt and {max_tokens} new tokens do not fit the context of {} tokens: its first {} tokens were cut; the model saw {:?}",
                    model.model.dims.seq_len, c.prompt_tokens_dropped, c.prompt_kept
                );
            }
            println!("{}", c.text);
            eprintln!(
                "{} at step {}: {} tokens in {:.3} s ({:.1} tokens/s; first token after {:.3} s), stopped: {:?}",
                model.run,
                model.snapshot.step,
                c.ids.len(),
                c.seconds,
                c.ids.len() as f64 / c.seconds.max(1e-9),
                c.time_to_first_token,
                c.stop
            );
        }
        Ok(exit::code(exit::OK))
    })
}

/// Formats `glassbox export` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    /// A Hugging Face `transformers` directory.
    Hf,
}

/// `glassbox export` flags.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    #[command(flatten)]
    pub snapshot: SnapshotArgs,
    /// The directory to write (new or empty).
    pub out_dir: PathBuf,
    /// The format.
    #[arg(long, value_enum, default_value = "hf")]
    pub format: ExportFormat,
    #[command(flatten)]
    pub lab: LabArgs,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn export(args: ExportArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    let ExportFormat::Hf = args.format;
    args::runtime()?.block_on(async {
        let ctx = args::open(global, &args.lab, false).await?;
        let facts = glassbox_lab::export::CardFacts {
            licence: ctx.config.export.licence.clone(),
            verify_command: format!("glassbox --lab {} verify", ctx.lab.root().display()),
        };
        let rec = ctx.recorder.clone();
        let run = RunId(args.snapshot.run.clone());
        let pick = args.snapshot.pick()?;
        let out = args.out_dir.clone();
        let e = tokio::task::spawn_blocking(move || {
            let model = TrainedModel::load(&rec, &run, &pick)?;
            glassbox_lab::export::export_hf(&rec, &model, &out, &facts)
        })
        .await??;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&e)?);
        } else {
            println!(
                "exported {} as {} to {}",
                args.snapshot.run,
                e.architecture,
                e.dir.display()
            );
            for f in &e.files {
                println!("  {:<24} {:>12} bytes  {}  entry {}", f.name, f.bytes, f.blake3, f.entry);
            }
            println!(
                "load it with: AutoModelForCausalLM.from_pretrained({:?}) and AutoTokenizer.from_pretrained({:?})",
                e.dir.display().to_string(),
                e.dir.display().to_string()
            );
        }
        Ok(exit::code(exit::OK))
    })
}
