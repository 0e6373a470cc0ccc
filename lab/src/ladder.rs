//! Scaling ladders: run the small rungs, fit `L(C) = E + A * C^-alpha` on their final metric
//! against compute, **pre-register** the forecast for the target as a `forecast` entry, then run
//! the target and compare. The forecast entry is appended before the target is even proposed,
//! so its index and its inclusion in a signed checkpoint prove it came first.
//!
//! Every rung is an ordinary lab run (proposal, approval, run, result), trained by the worker
//! given; the target's `result` entry carries forecast against actual because the forecast is
//! registered for its spec hash. Not here: the fitting maths (`glassbox_runner::scaling`).

use glassbox_runner::data::MarkovSource;
use glassbox_runner::scaling::{self, PowerLawFit};
use glassbox_schemas::ladder::{FloorMode, Ladder};
use glassbox_schemas::record::{ForecastBody, ForecastOutcome};
use glassbox_schemas::spec::Forecast;
use glassbox_schemas::{ExperimentId, ExperimentSpec, RunStatus, SpecHash};
use serde::Serialize;

use crate::error::LabError;
use crate::flow::Flow;
use crate::forecast;
use crate::worker::{JobEnd, Worker};

/// One rung's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct RungResult {
    /// The rung's slug.
    pub slug: String,
    /// Its spec hash.
    pub spec_hash: SpecHash,
    /// Training compute (FLOPs, the cost model's `train_flops`).
    pub compute: f64,
    /// The ladder metric at the end.
    pub value: Option<f64>,
    /// How it ended.
    pub status: RunStatus,
    /// The run.
    pub run: String,
    /// Its `result` entry.
    pub result_entry: u64,
}

/// The pre-registered forecast.
#[derive(Debug, Clone, Serialize)]
pub struct Registered {
    /// Predicted value.
    pub value: f64,
    /// Allowed absolute error.
    pub tolerance: f64,
    /// ~95% prediction interval, when the fit has residual degrees of freedom.
    pub interval: Option<(f64, f64)>,
    /// The `forecast` entry.
    pub entry: u64,
}

/// The `details` of a ladder's scaling-law forecast: the law, its fit, the target's compute
/// and interval, and the rungs it was fitted on (the forecast entry's free-form part, written
/// from this type and nowhere else).
#[derive(Debug, Serialize)]
struct ForecastDetails<'a> {
    law: &'static str,
    compute: &'static str,
    params: &'a PowerLawFit,
    target_compute: f64,
    interval_95: Option<(f64, f64)>,
    rungs: &'a [RungResult],
}

/// A finished ladder.
#[derive(Debug, Clone, Serialize)]
pub struct LadderReport {
    /// The metric.
    pub metric: String,
    /// The fitted rungs.
    pub rungs: Vec<RungResult>,
    /// The fit.
    pub fit: PowerLawFit,
    /// The forecast, registered before the target ran.
    pub forecast: Registered,
    /// The target run.
    pub target: RungResult,
    /// Forecast against actual, as the target's `result` entry states it.
    pub outcome: Option<ForecastOutcome>,
}

/// What the ladder is doing, for progress lines.
#[derive(Debug, Clone)]
pub enum LadderEvent {
    /// A rung is about to train.
    RungStarting {
        /// 1-based.
        index: usize,
        /// Of how many (the target included).
        of: usize,
        /// Its slug.
        slug: String,
    },
    /// A rung finished.
    RungDone(RungResult),
    /// The forecast is on the record; the target starts next.
    Forecast {
        /// The fit.
        fit: PowerLawFit,
        /// The registration.
        registered: Registered,
    },
}

/// Runs `ladder` through `flow`, training on `worker`, as `user`.
pub async fn run_ladder(
    flow: &Flow,
    worker: &Worker,
    ladder: &Ladder,
    user: &str,
    mut on_event: impl FnMut(LadderEvent),
) -> Result<LadderReport, LabError> {
    let metric = ladder.config.metric.clone();
    let n = ladder.rungs.len();
    let floor = match ladder.config.floor {
        FloorMode::Fitted => None,
        FloorMode::Known => Some(known_floor(ladder.target())?),
    };
    let mut rungs = Vec::new();
    for (i, spec) in ladder.rungs[..n - 1].iter().enumerate() {
        on_event(LadderEvent::RungStarting {
            index: i + 1,
            of: n,
            slug: spec.experiment.slug.clone(),
        });
        let r = run_rung(flow, worker, spec, user, &metric).await?;
        on_event(LadderEvent::RungDone(r.clone()));
        if r.status != RunStatus::Succeeded || r.value.is_none() {
            return Err(LabError::Refused(format!(
                "rung {} ({}) ended {} without `{metric}`; the ladder stops before fitting (its result is recorded as entry {})",
                i + 1,
                r.slug,
                r.status,
                r.result_entry
            )));
        }
        rungs.push(r);
    }
    let points: Vec<(f64, f64)> = rungs
        .iter()
        .map(|r| (r.compute, r.value.unwrap_or(f64::NAN)))
        .collect();
    let fit = scaling::fit(&points, floor).map_err(|e| LabError::Refused(e.to_string()))?;
    let target = ladder.target();
    let target_hash = glassbox_schemas::spec_hash(target).map_err(|e| LabError::BadSpec {
        hash: "?".into(),
        reason: e.to_string(),
    })?;
    let compute = glassbox_schemas::estimate(target).train_flops;
    let value = fit.predict(compute);
    let interval = fit.interval(compute);
    let body = ForecastBody {
        spec_hash: target_hash,
        metric: metric.clone(),
        value,
        tolerance: ladder.config.tolerance,
        method: "scaling_law".into(),
        details: serde_json::to_value(ForecastDetails {
            law: "L(C) = E + A * C^-alpha",
            compute: "train FLOPs (6N + 12 L d T per token)",
            params: &fit,
            target_compute: compute,
            interval_95: interval,
            rungs: &rungs,
        })
        .map_err(|e| LabError::Task(format!("cannot write the forecast's details: {e}")))?,
    };
    let experiment = ExperimentId::local(&target.experiment.slug);
    let rec = flow.recorder().clone();
    let entry = tokio::task::spawn_blocking(move || {
        rec.record(Some(&experiment), Default::default(), body)
    })
    .await
    .map_err(|e| LabError::Task(e.to_string()))??;
    forecast::register(
        flow.queue(),
        &target_hash,
        &Forecast {
            metric: metric.clone(),
            value,
            tolerance: ladder.config.tolerance,
        },
        entry,
    )
    .await?;
    let registered = Registered {
        value,
        tolerance: ladder.config.tolerance,
        interval,
        entry,
    };
    on_event(LadderEvent::Forecast {
        fit: fit.clone(),
        registered: registered.clone(),
    });
    on_event(LadderEvent::RungStarting {
        index: n,
        of: n,
        slug: target.experiment.slug.clone(),
    });
    let t = run_rung(flow, worker, target, user, &metric).await?;
    let outcome = flow.recorder().entry(t.result_entry).ok().and_then(|e| {
        e.body_of::<glassbox_schemas::record::ResultBody>()
            .ok()
            .and_then(|b| b.forecast.clone())
    });
    on_event(LadderEvent::RungDone(t.clone()));
    Ok(LadderReport {
        metric,
        rungs,
        fit,
        forecast: registered,
        target: t,
        outcome,
    })
}

async fn run_rung(
    flow: &Flow,
    worker: &Worker,
    spec: &ExperimentSpec,
    user: &str,
    metric: &str,
) -> Result<RungResult, LabError> {
    let (recorded, queued) = flow.submit_local(spec.clone(), None, user).await?;
    let f = match worker.run_job(queued.job).await? {
        Some(JobEnd::Recorded(f)) => f,
        Some(JobEnd::LeaseLost(j)) => {
            return Err(LabError::Refused(format!(
                "job {j} was taken over by another worker"
            )));
        }
        None => {
            return Err(LabError::Refused(format!(
                "job {} was taken by another worker before this ladder could run it",
                queued.job
            )));
        }
    };
    if let Some(why) = &f.unpublished {
        return Err(LabError::Task(format!(
            "{} ended {}, but its result (entry {}) could not be written to the log: {why}",
            f.run, f.ending.status, f.result_entry
        )));
    }
    Ok(RungResult {
        slug: spec.experiment.slug.clone(),
        spec_hash: recorded.spec_hash,
        compute: glassbox_schemas::estimate(spec).train_flops,
        value: f.ending.final_metrics.get(metric).copied(),
        status: f.ending.status,
        run: f.run.0.clone(),
        result_entry: f.result_entry,
    })
}

/// The entropy floor (nats per token) of a spec's single synthetic domain.
fn known_floor(spec: &ExperimentSpec) -> Result<f64, LabError> {
    match spec.data.mixture.as_slice() {
        [one] => match &one.generator {
            Some(g) => Ok(MarkovSource::new(g).entropy_nats_per_token()),
            None => Err(LabError::Refused(
                "ladder.floor = \"known\" needs a synthetic (generator) domain".into(),
            )),
        },
        _ => Err(LabError::Refused(
            "ladder.floor = \"known\" needs exactly one domain".into(),
        )),
    }
}
