//! Evaluations: a run's snapshot scored on a suite on the record, with the contamination
//! figure beside it, as an `evaluation` entry.
//!
//! - [`suite`] — suites as blobs with `eval_suite` entries: import, find, load;
//! - [`generate`] — the built-in suites, drawn from a Markov source with a known answer;
//! - [`score`] — the metrics, defined as lm-eval-harness defines them;
//! - [`contamination`] — the suite's 13-grams against what the run trained on.
//!
//! [`evaluate`] does one (snapshot, suite) and returns the entry to record; the caller (the
//! `eval` job on a worker, or `glassbox eval`) says who ran it and records it. Not here: the
//! queue's eval jobs (`crate::worker`) or showing results (the web).

pub mod contamination;
pub mod generate;
pub mod score;
pub mod suite;

use std::collections::BTreeMap;
use std::time::Instant;

use glassbox_schemas::eval::{SuiteName, metric_name, parse_metric_name};
use glassbox_schemas::record::{EvalOutcome, EvaluationBody, ForecastOutcome, refs};
use glassbox_schemas::spec::Forecast;
use glassbox_schemas::{Blake3Hash, ExperimentId, RefRole};

use crate::error::LabError;
use crate::recorder::Recorder;
use crate::trained::TrainedModel;
pub use suite::{Suite, SuiteRef};

/// An evaluation, ready to record.
#[derive(Debug, Clone)]
pub struct Evaluated {
    /// The experiment of the run.
    pub experiment: Option<ExperimentId>,
    /// The entry's body (the caller adds who ran it).
    pub body: EvaluationBody,
    /// The entry's refs: the snapshot, the suite and the per-item results.
    pub refs: BTreeMap<String, Blake3Hash>,
    /// Seconds spent scoring the items (the model and suite already loaded).
    pub score_seconds: f64,
    /// Seconds spent on the contamination check.
    pub contamination_seconds: f64,
}

/// Scores `model`'s snapshot on `suite` on `threads` CPU threads and checks the suite against
/// the run's training data; stores the per-item results as a blob. `None` when `cancelled`
/// turned true on the way.
pub fn evaluate(
    rec: &Recorder,
    model: &TrainedModel,
    suite: &Suite,
    threads: usize,
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Result<Option<Evaluated>, LabError> {
    let kind = suite.stored.body.kind;
    let started = Instant::now();
    let Some(scored) = score::score_items(model, kind, &suite.items, threads, cancelled)? else {
        return Ok(None);
    };
    let score_seconds = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let (contamination, flagged) = contamination::check(rec, model, &suite.items)?;
    let contamination_seconds = started.elapsed().as_secs_f64();
    let mut lines = Vec::new();
    for (item, flag) in scored.items.iter().zip(&flagged) {
        let mut v = serde_json::to_value(item).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            o.insert("contaminated".into(), (*flag).into());
        }
        lines.extend_from_slice(v.to_string().as_bytes());
        lines.push(b'\n');
    }
    let per_item = rec.put_bytes(&lines)?;
    let body = EvaluationBody {
        run: model.run.clone(),
        step: model.snapshot.step,
        snapshot: model.snapshot.blob,
        suite: suite.stored.body.name.clone(),
        suite_hash: suite.stored.body.suite,
        kind,
        outcome: EvalOutcome::Evaluated,
        detail: None,
        items: suite.items.len() as u64,
        metrics: scored.metrics,
        contamination: Some(contamination),
        job: None,
        worker: None,
        host: None,
        threads: threads as u32,
        build: None,
        automatic: false,
        forecast: None,
    };
    Ok(Some(Evaluated {
        experiment: model.record.experiment.clone(),
        refs: refs([
            (RefRole::Checkpoint, model.snapshot.blob.0),
            (RefRole::Suite, suite.stored.body.suite.0),
            (RefRole::Artifact, per_item.0),
        ]),
        body,
        score_seconds,
        contamination_seconds,
    }))
}

/// The `evaluation` entry of an eval job that ended without scores (`failed`, `cancelled`):
/// its target, how it ended and why; the caller adds who ran it.
pub fn unscored(
    target: &crate::job::EvalTarget,
    outcome: EvalOutcome,
    detail: Option<String>,
) -> (EvaluationBody, BTreeMap<String, Blake3Hash>) {
    (
        EvaluationBody {
            run: target.run.clone(),
            step: target.step,
            snapshot: target.snapshot,
            suite: target.suite.clone(),
            suite_hash: target.suite_hash,
            kind: target.kind,
            outcome,
            detail,
            items: 0,
            metrics: BTreeMap::new(),
            contamination: None,
            job: None,
            worker: None,
            host: None,
            threads: 0,
            build: None,
            automatic: false,
            forecast: None,
        },
        refs([
            (RefRole::Checkpoint, target.snapshot.0),
            (RefRole::Suite, target.suite_hash.0),
        ]),
    )
}

/// The forecast an evaluation settles: one of an `eval:` metric of this suite, when the
/// evaluated snapshot is the run's last (`final_step`).
pub fn settles(
    forecast: &Forecast,
    body: &EvaluationBody,
    final_step: u64,
) -> Option<ForecastOutcome> {
    let (suite, metric) = parse_metric_name(&forecast.metric)?;
    if suite != body.suite || body.step != final_step || body.outcome != EvalOutcome::Evaluated {
        return None;
    }
    Some(ForecastOutcome::settle(
        &forecast.metric,
        forecast.value,
        forecast.tolerance,
        body.metrics.get(metric).copied(),
    ))
}

/// An evaluation's headline as one line (`markov-choice@step 600: acc_norm 0.615 ± 0.034`).
pub fn headline(body: &EvaluationBody) -> String {
    let name = |m: &str| metric_name(&body.suite, m);
    let main = body.kind.metrics()[0];
    match body.metrics.get(main) {
        Some(v) => {
            let err = body
                .metrics
                .get(&format!("{main}_stderr"))
                .map(|e| format!(" ± {e:.4}"))
                .unwrap_or_default();
            format!("{} at step {}: {v:.4}{err}", name(main), body.step)
        }
        None => format!(
            "{} at step {}: {}{}",
            body.suite,
            body.step,
            body.outcome,
            body.detail
                .as_deref()
                .map(|d| format!(" ({d})"))
                .unwrap_or_default()
        ),
    }
}

/// Every `evaluation` entry of `run` on the record, in log order.
pub fn of_run(
    rec: &Recorder,
    run: &glassbox_schemas::RunId,
) -> Result<Vec<EvaluationBody>, LabError> {
    let mut out = Vec::new();
    rec.for_each_entry(|_, e| {
        if let glassbox_schemas::record::EntryBody::Evaluation(b) = e.body
            && b.run == *run
        {
            out.push(b);
        }
    })?;
    Ok(out)
}

/// The suites a spec's snapshots are evaluated on: the lab's `[evals]` and the spec's own,
/// each once, in that order.
pub fn suites_for(lab: &[SuiteName], spec: &glassbox_schemas::ExperimentSpec) -> Vec<SuiteName> {
    let mut out: Vec<SuiteName> = Vec::new();
    for s in lab
        .iter()
        .chain(spec.evals.iter().flat_map(|e| e.suites.iter()))
    {
        if !out.contains(s) {
            out.push(s.clone());
        }
    }
    out
}
