//! `glassbox ladder FILE`: run a scaling ladder through the lab — each rung smallest first, the
//! fit, the forecast registered on the ledger before the target runs, then forecast against
//! actual. One line per stage; `--json` prints the whole report.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use glassbox_lab::Worker;
use glassbox_lab::ladder::{self, LadderEvent};

use crate::GlobalOpts;
use crate::cli::args::{self, ComputeArgs, LabArgs};
use crate::exit;

/// `glassbox ladder` flags.
#[derive(Debug, clap::Args)]
pub struct LadderArgs {
    /// The ladder file (a spec with a `[ladder]` table), e.g. examples/ladder.toml.
    pub file: PathBuf,
    #[command(flatten)]
    pub lab: LabArgs,
    #[command(flatten)]
    pub compute: ComputeArgs,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: LadderArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let ladder = match glassbox_schemas::ladder::parse_ladder_toml(&text) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("{}: invalid ladder:\n{e}", args.file.display());
            return Ok(exit::code(exit::CHECK_FAILED));
        }
    };
    args::runtime()?.block_on(async {
        let ctx = args::open(global, &args.lab, true).await?;
        let user = args::local_user();
        let id = format!("ladder-{}", std::process::id());
        let mut opts = ctx.worker_options(&id, crate::GIT_REVISION);
        args.compute.apply(&mut opts);
        let worker = Worker::new(ctx.queue.clone(), ctx.recorder.clone(), opts)
            .with_switches(ctx.flow.switches());
        let metric = ladder.config.metric.clone();
        let quiet = args.json;
        let report = ladder::run_ladder(&ctx.flow, &worker, &ladder, &user, |ev| {
            if quiet {
                return;
            }
            match ev {
                LadderEvent::RungStarting { index, of, slug } => {
                    eprintln!("rung {index}/{of}: {slug} training")
                }
                LadderEvent::RungDone(r) => eprintln!(
                    "  {} {}: {metric} = {} at {:.3e} FLOPs (result entry {})",
                    r.run,
                    r.status,
                    r.value.map_or("-".into(), |v| format!("{v:.4}")),
                    r.compute,
                    r.result_entry
                ),
                LadderEvent::Forecast { fit, registered } => {
                    eprintln!(
                        "fit: L(C) = {:.4}{} + {:.4e} * C^-{:.4}{}",
                        fit.e,
                        if fit.e_fixed { " (known floor)" } else { "" },
                        fit.a,
                        fit.alpha,
                        fit.se_alpha
                            .map(|s| format!(" (alpha ± {s:.4})"))
                            .unwrap_or_default()
                    );
                    eprintln!(
                        "forecast: {metric} = {:.4} ± {} for the target{}, registered as entry {} before it runs",
                        registered.value,
                        registered.tolerance,
                        registered
                            .interval
                            .map(|(lo, hi)| format!(" (95% interval {lo:.4}..{hi:.4})"))
                            .unwrap_or_default(),
                        registered.entry
                    );
                }
            }
        })
        .await;
        let report = report?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            match &report.outcome {
                Some(o) => println!(
                    "target: forecast {:.4} ± {}, actual {}, error {}; verdict: {}",
                    o.predicted,
                    o.tolerance,
                    o.actual.map_or("-".into(), |a| format!("{a:.4}")),
                    o.error().map_or("-".into(), |e| format!("{e:+.4}")),
                    o.verdict(),
                ),
                None => println!("target ended {} without `{metric}`", report.target.status),
            }
        }
        Ok(exit::code(exit::OK))
    })
}
