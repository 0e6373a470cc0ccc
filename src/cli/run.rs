//! `glassbox run FILE`: train a spec with the runner, show progress, print a summary, and exit
//! with a code that says the outcome (see `exit.rs`).
//!
//! Glue only: flag parsing, the progress display (an indicatif bar on a terminal, plain lines
//! otherwise) and file layout of the output directory:
//! `metrics.jsonl` (one record per step and per evaluation), `checkpoints/step-N.safetensors`,
//! `summary.json` (the outcome with final metrics, parameter hash, kernel hashes).

use glassbox_schemas::RunPhase;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::Context;
use glassbox_runner::backend::{self, Backend, BackendRequest, Selected};
use glassbox_runner::data::{DataPipeline, DirCorpusStore};
use glassbox_runner::observer::{
    Fanout, JsonlObserver, MetricRecord, Observer, RecordKind, RunInfo,
};
use glassbox_runner::train::{Peak, RunOptions, RunOutcome, Trainer};
use glassbox_schemas::RunStatus;
use glassbox_schemas::metrics as mn;
use glassbox_schemas::run::RunSummary;

use glassbox_lab::LiveSink;
use glassbox_schemas::{ExperimentId, RunId};

use crate::GlobalOpts;
use crate::cli::args::{self, ComputeArgs, LabArgs};
use crate::exit;

/// Which backend to train on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendArg {
    /// CUDA when built and present, else CPU.
    Auto,
    /// The CPU reference backend.
    Cpu,
    /// The CUDA backend.
    Cuda,
}

/// `glassbox run` flags.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The experiment spec (TOML), e.g. examples/tiny.toml.
    pub file: PathBuf,
    /// Compute backend.
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: BackendArg,
    /// Output directory for metrics, checkpoints and the summary. Default: runs/<slug>.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Resume from a checkpoint written by an earlier run of the same spec.
    #[arg(long)]
    pub resume: Option<PathBuf>,
    #[command(flatten)]
    pub compute: ComputeArgs,
    /// Print one JSON summary object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Train without the lab: no proposal, approval, run or result entries. `--resume`
    /// implies it (lab runs resume from their job's checkpoint by themselves).
    #[arg(long)]
    pub no_ledger: bool,
    /// Record and queue the job for a `glassbox worker` instead of training here; prints the
    /// job id.
    #[arg(long, conflicts_with_all = ["no_ledger", "resume"])]
    pub enqueue: bool,
    #[command(flatten)]
    pub lab: LabArgs,
}

impl From<BackendArg> for BackendRequest {
    fn from(b: BackendArg) -> Self {
        match b {
            BackendArg::Auto => BackendRequest::Auto,
            BackendArg::Cpu => BackendRequest::Cpu,
            BackendArg::Cuda => BackendRequest::Cuda,
        }
    }
}

pub fn run(args: RunArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    if glassbox_schemas::sweep::is_sweep(&text) {
        return enqueue_sweep(args, global, text);
    }
    let spec = match glassbox_schemas::parse_toml(&text) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{}: invalid spec:\n{e}", args.file.display());
            return Ok(exit::code(exit::CHECK_FAILED));
        }
    };
    // A backend that cannot run here is an operational error before anything is recorded.
    let selection = backend::select(args.backend.into())?;
    if !args.json {
        eprintln!("backend: {} ({})", selection.kind, selection.why);
    }
    if !(args.no_ledger || args.resume.is_some()) {
        return run_through_lab(args, global, spec, text);
    }
    let threads = args
        .compute
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    match selection.start(threads)? {
        Selected::Cpu(be) => {
            if let Some(code) = over_memory(&spec, None, &args) {
                return Ok(code);
            }
            let peak = match args.compute.peak() {
                Some(p) => p,
                None => {
                    be.run(|| glassbox_runner::backend::cpu::peak::measure_gemm_peak(threads, 0.3))
                }
            };
            train_on(&be, peak, spec, &args, global)
        }
        Selected::Cuda(be) => {
            let device_memory = be.memory().map(|(_, total)| total as u64);
            if let Some(code) = over_memory(&spec, device_memory, &args) {
                return Ok(code);
            }
            let peak = match args.compute.peak() {
                Some(p) => p,
                None => be.measured_peak()?,
            };
            train_on(&be, peak, spec, &args, global)
        }
    }
}

/// A bare run checks memory before it allocates, as a lab worker does: against the device's
/// memory on a GPU, else half of this machine's RAM. Over it, nothing is trained and the exit
/// code is `budget_exceeded`'s.
fn over_memory(
    spec: &glassbox_schemas::spec::ExperimentSpec,
    device_memory: Option<u64>,
    args: &RunArgs,
) -> Option<ExitCode> {
    let problem = glassbox_lab::limits::bare_memory_problem(spec, device_memory)?;
    eprintln!("{}: not training: {problem}", args.file.display());
    Some(exit::code(status_code(RunStatus::BudgetExceeded)))
}

/// Trains `spec` on `be`, writing the run directory, and maps the outcome to an exit code.
fn train_on<B: Backend>(
    be: &B,
    peak: Peak,
    spec: glassbox_schemas::spec::ExperimentSpec,
    args: &RunArgs,
    global: &GlobalOpts,
) -> anyhow::Result<ExitCode> {
    let kind = be.kind();
    let out_dir = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("runs").join(&spec.experiment.slug));
    std::fs::create_dir_all(&out_dir)
        .with_context(|| format!("cannot create {}", out_dir.display()))?;
    let store = DirCorpusStore::new(glassbox_ledger::LabDir::elsewhere(&global.lab).blobs_dir());
    let data = DataPipeline::new(&spec, &store)?;
    let opts = RunOptions {
        out_dir: Some(out_dir.clone()),
        resume: args.resume.clone(),
        peak,
        cancel: Arc::new(AtomicBool::new(false)),
        wall_limit: None,
    };
    let mut trainer = Trainer::new(be, spec.clone(), data, &opts)?;
    let resumed_at = args.resume.as_ref().map(|_| trainer.step());
    let mut jsonl = JsonlObserver::open(&out_dir.join("metrics.jsonl"), resumed_at)?;
    let mut progress = Progress::new(args.json);
    if !args.json {
        eprintln!(
            "glassbox run {} on {} ({}): {} params, {} steps{}",
            spec.experiment.slug,
            kind,
            trainer.info().backend,
            trainer.info().params,
            spec.train.steps,
            resumed_at.map_or(String::new(), |s| format!(", resuming at step {s}"))
        );
    }
    let outcome = {
        let mut fan = Fanout {
            observers: vec![&mut jsonl, &mut progress],
        };
        trainer.run(&opts, &mut fan)
    };
    let summary_path = out_dir.join("summary.json");
    let peak_rss = peak_rss_bytes();
    let summary = RunSummary {
        spec: args.file.display().to_string(),
        status: outcome.ending.status,
        reason: outcome.ending.reason.clone(),
        outcome: Some(outcome.clone()),
        peak_rss_bytes: peak_rss,
        out_dir: out_dir.display().to_string(),
        ledger: None,
    };
    std::fs::write(&summary_path, serde_json::to_string_pretty(&summary)?)
        .with_context(|| format!("cannot write {}", summary_path.display()))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print_summary(&outcome, &out_dir, peak_rss);
    }
    Ok(exit::code(status_code(outcome.ending.status)))
}

/// `glassbox run --enqueue SWEEP`: the sweep is proposed as `local/<slug>`, its children
/// approved at once by the local user and queued for `glassbox worker`s.
fn enqueue_sweep(args: RunArgs, global: &GlobalOpts, text: String) -> anyhow::Result<ExitCode> {
    let sweep = match glassbox_schemas::sweep::parse_sweep_toml(&text) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{}: invalid sweep:\n{e}", args.file.display());
            return Ok(exit::code(exit::CHECK_FAILED));
        }
    };
    if !args.enqueue {
        eprintln!(
            "error: {} is a sweep; queue its {} children with `glassbox run --enqueue {}` and train them with `glassbox worker`",
            args.file.display(),
            sweep.children.len(),
            args.file.display()
        );
        return Ok(exit::code(exit::CHECK_FAILED));
    }
    args::runtime()?.block_on(async {
        let ctx = args::open(global, &args.lab, true).await?;
        let local =
            glassbox_lab::local::submit_sweep(&ctx, sweep, text, &args::local_user()).await?;
        let (experiment, recorded, queued) = (local.experiment, local.recorded, local.queued);
        if args.json {
            let children: Vec<_> = recorded
                .children
                .iter()
                .zip(&queued)
                .map(|(c, q)| {
                    serde_json::json!({
                        "experiment": c.experiment,
                        "values": c.values,
                        "spec_hash": c.spec_hash,
                        "job": q.job,
                        "approval_entry": q.approval_entry,
                    })
                })
                .collect();
            println!(
                "{}",
                serde_json::json!({
                    "sweep": experiment,
                    "parent_hash": recorded.parent_hash,
                    "sweep_entry": recorded.entry,
                    "total_flops": recorded.total_flops,
                    "children": children,
                })
            );
        } else {
            println!(
                "sweep {experiment} ({}): {} children queued; `glassbox worker` trains them",
                recorded.parent_hash,
                queued.len()
            );
            for (c, q) in recorded.children.iter().zip(&queued) {
                println!("  job {:<6} {}  {}", q.job, c.experiment, c.values);
            }
        }
        Ok(exit::code(exit::OK))
    })
}

/// `glassbox run` through the lab: the spec is proposed and approved by the local user, queued,
/// trained by an in-process worker, and every step of that is on the record.
fn run_through_lab(
    args: RunArgs,
    global: &GlobalOpts,
    spec: glassbox_schemas::ExperimentSpec,
    text: String,
) -> anyhow::Result<ExitCode> {
    args::runtime()?.block_on(async {
        let ctx = args::open(global, &args.lab, true).await?;
        let (recorded, queued) =
            glassbox_lab::local::submit(&ctx, spec.clone(), text, &args::local_user()).await?;
        if args.enqueue {
            if args.json {
                println!(
                    "{}",
                    serde_json::json!({
                        "job": queued.job,
                        "position": queued.position,
                        "spec_hash": recorded.spec_hash,
                        "proposal_entry": recorded.entry,
                        "approval_entry": queued.approval_entry,
                    })
                );
            } else {
                println!(
                    "job {} queued at position {} ({}); `glassbox worker` trains it",
                    queued.job, queued.position, recorded.spec_hash
                );
            }
            return Ok(exit::code(exit::OK));
        }
        let out_dir = args
            .out
            .clone()
            .unwrap_or_else(|| PathBuf::from("runs").join(&spec.experiment.slug));
        std::fs::create_dir_all(&out_dir)
            .with_context(|| format!("cannot create {}", out_dir.display()))?;
        if !args.json {
            eprintln!(
                "recorded: proposal entry {}, approval entry {} ({}); job {}",
                recorded.entry, queued.approval_entry, recorded.spec_hash, queued.job
            );
        }
        let sink = Arc::new(CliSink {
            inner: std::sync::Mutex::new((
                Progress::new(args.json),
                JsonlObserver::open(&out_dir.join("metrics.jsonl"), None)?,
            )),
        });
        let worker_id = format!("local-{}", std::process::id());
        let mut opts = ctx.worker_options(&worker_id, crate::GIT_REVISION);
        opts.backend = args.backend.into();
        args.compute.apply(&mut opts);
        let interrupt = async {
            crate::cli::worker::shutdown_signal().await;
            eprintln!("cancelling the run (its result is still recorded)");
        };
        let local =
            glassbox_lab::local::train(&ctx, recorded, queued, opts, sink, interrupt).await?;
        // The index is derived data, caught up by its readers (`ledger log`, `serve`), so the
        // run does not wait for it.
        let peak_rss = peak_rss_bytes();
        let summary = local.summary(
            &args.file.display().to_string(),
            &out_dir.display().to_string(),
            peak_rss,
        );
        let (f, outcome, checkpoint) = (&local.finished, &local.outcome, &local.snapshot);
        let summary_path = out_dir.join("summary.json");
        std::fs::write(&summary_path, serde_json::to_string_pretty(&summary)?)
            .with_context(|| format!("cannot write {}", summary_path.display()))?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&summary)?);
        } else {
            match outcome {
                Some(o) => print_summary(o, &out_dir, peak_rss),
                None => {
                    println!("status: {}", f.ending.status);
                    if let Some(r) = &f.ending.reason {
                        println!("reason: {r}");
                    }
                }
            }
            if let Some(fc) = &f.forecast {
                println!(
                    "forecast: {} = {} ± {}, actual {}, error {}; verdict: {}",
                    fc.metric,
                    fc.predicted,
                    fc.tolerance,
                    fc.actual.map_or("not measured".into(), |a| format!("{a:.4}")),
                    fc.error().map_or("-".into(), |e| format!("{e:+.4}")),
                    fc.verdict()
                );
            }
            if let Some((blob, step)) = checkpoint {
                println!(
                    "checkpoint: step {step} in the ledger's blob store (`glassbox ledger get {blob} -o FILE`)"
                );
            }
            if f.unpublished.is_none() {
                println!(
                    "ledger: {} result entry {} (`glassbox ledger show {}`; `glassbox verify` audits it)",
                    f.run, f.result_entry, f.result_entry
                );
            }
        }
        if let Some(why) = &f.unpublished {
            eprintln!(
                "error: {} ended {}, but its result could not be written to the log: {why}\nThe result is committed with the job's end and waits in the lab's sequencer; it is published by the next `glassbox serve`, `worker` or `ledger` command once the log can be written. It is not on the record until then.",
                f.run, f.ending.status
            );
            return Ok(exit::code(exit::OPERATIONAL));
        }
        Ok(exit::code(status_code(f.ending.status)))
    })
}

fn status_code(s: RunStatus) -> u8 {
    match s {
        RunStatus::Succeeded => exit::OK,
        RunStatus::Diverged => exit::DIVERGED,
        RunStatus::BudgetExceeded => exit::BUDGET_EXCEEDED,
        RunStatus::Cancelled => exit::CANCELLED,
        RunStatus::Failed => exit::FAILED,
    }
}

/// The terminal display and `metrics.jsonl` of a lab run, fed by the worker's live stream.
struct CliSink {
    inner: std::sync::Mutex<(Progress, JsonlObserver)>,
}

impl LiveSink for CliSink {
    fn started(&self, _e: &ExperimentId, _r: &RunId, step: u64, total: u64, info: &RunInfo) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.0.on_start(step, total, info);
    }

    fn metrics(&self, _e: &ExperimentId, _r: &RunId, record: &MetricRecord) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.0.on_metrics(record);
        g.1.on_metrics(record);
    }

    fn status(&self, _e: &ExperimentId, _r: &RunId, status: RunPhase) {
        if !status.is_running() {
            let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            g.0.finish();
        }
    }
}

/// The terminal progress display alone, as a live sink (`glassbox quickstart`).
pub(crate) struct ProgressSink {
    inner: std::sync::Mutex<Progress>,
}

impl ProgressSink {
    pub(crate) fn new() -> Self {
        Self {
            inner: std::sync::Mutex::new(Progress::new(false)),
        }
    }
}

impl LiveSink for ProgressSink {
    fn started(&self, _e: &ExperimentId, _r: &RunId, step: u64, total: u64, info: &RunInfo) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.on_start(step, total, info);
    }

    fn metrics(&self, _e: &ExperimentId, _r: &RunId, record: &MetricRecord) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.on_metrics(record);
    }

    fn status(&self, _e: &ExperimentId, _r: &RunId, status: RunPhase) {
        if !status.is_running() {
            let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            g.finish();
        }
    }
}

/// Peak resident set size from `/proc/self/status` (`VmHWM`), where available.
fn peak_rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

fn print_summary(o: &RunOutcome, out_dir: &Path, peak_rss: Option<u64>) {
    println!("status: {}", o.ending.status);
    if let Some(r) = &o.ending.reason {
        println!("reason: {r}");
    }
    println!(
        "steps: {}  tokens: {}  wall: {:.1} s",
        o.ending.steps, o.total_tokens, o.elapsed_seconds
    );
    let get = |k: &str| o.ending.final_metrics.get(k).copied();
    if let Some(l) = get(mn::TRAIN_LOSS) {
        println!("train/loss: {l:.4}");
    }
    for (k, v) in &o.ending.final_metrics {
        if k.starts_with("eval/") && k.ends_with("/loss") {
            let domain = &k["eval/".len()..k.len() - "/loss".len()];
            match o.info.entropy_floor_nats.get(domain) {
                Some(floor) => println!(
                    "{k}: {v:.4} nats (entropy floor {floor:.4}, {:+.1}% above)",
                    (v / floor - 1.0) * 100.0
                ),
                None => println!("{k}: {v:.4} nats"),
            }
        }
        if k.starts_with("eval/") && k.ends_with("/bpb") {
            println!("{k}: {v:.4} bits/byte");
        }
    }
    if o.elapsed_seconds > 0.0 {
        println!(
            "throughput: {:.0} tokens/s (mean over the run)",
            o.total_tokens as f64 / o.elapsed_seconds
        );
    }
    if let Some(m) = get(mn::MFU) {
        println!(
            "mfu: {:.1}% of {} ({:.1} GFLOP/s)",
            m * 100.0,
            o.info.peak_label,
            o.info.peak_flops / 1e9
        );
    }
    if let Some(rss) = peak_rss {
        println!("peak RSS: {:.1} MiB", rss as f64 / (1024.0 * 1024.0));
    }
    println!("params: {}", o.params_blake3);
    if let Some(c) = &o.snapshot {
        println!("checkpoint: {}", c.display());
    }
    println!("output: {}", out_dir.display());
}

/// The progress display: an indicatif bar on a terminal, plain lines otherwise.
struct Progress {
    quiet: bool,
    bar: Option<indicatif::ProgressBar>,
    /// The lines printed when stderr is not a terminal.
    lines: Option<glassbox_runner::progress::ProgressLines>,
}

impl Progress {
    fn new(quiet: bool) -> Self {
        Self {
            quiet,
            bar: None,
            lines: None,
        }
    }
}

impl Progress {
    /// Clears the bar.
    fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

impl Observer for Progress {
    fn on_start(&mut self, step: u64, total: u64, info: &RunInfo) {
        self.lines = Some(glassbox_runner::progress::ProgressLines::new(step, total));
        if self.quiet {
            return;
        }
        if std::io::stderr().is_terminal() {
            let bar = indicatif::ProgressBar::new(total);
            bar.set_position(step);
            let style = indicatif::ProgressStyle::with_template(
                "{bar:30} step {pos}/{len}  {msg}  ETA {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
            bar.set_style(style);
            self.bar = Some(bar);
        }
        eprintln!(
            "MFU is stated against: {} ({:.1} GFLOP/s)",
            info.peak_label,
            info.peak_flops / 1e9
        );
    }

    fn on_metrics(&mut self, r: &MetricRecord) {
        if self.quiet {
            return;
        }
        let loss = r.scalars.get(mn::TRAIN_LOSS).copied().unwrap_or(f64::NAN);
        let tps = r.scalars.get(mn::TOKENS_PER_SECOND).copied().unwrap_or(0.0);
        match (&self.bar, r.kind) {
            (Some(bar), RecordKind::Train) => {
                bar.set_position(r.step);
                bar.set_message(format!("loss {loss:.4}  {tps:.0} tok/s"));
            }
            (Some(bar), RecordKind::Eval) => {
                bar.println(glassbox_runner::progress::eval_line(r));
            }
            (None, _) => {
                if let Some(line) = self.lines.as_ref().and_then(|p| p.line(r)) {
                    eprintln!("{line}");
                }
            }
        }
    }

    fn on_end(&mut self, _o: &RunOutcome) {
        self.finish();
    }
}
