//! One run's evaluations: its `evaluation` entries folded per suite version ([`fold`]: the
//! newest result per snapshot step, the older ones it replaces named on it, the attempts that
//! did not evaluate listed apart), with tokens and FLOPs at each step from the run's own
//! counters; served as `/api/v1/runs/{run}/evaluations` ([`run_evaluations`]).
//!
//! Not here: the board across runs (`board`), or drawing the run page's section
//! (`crate::pages::run_evals`).

use std::collections::HashMap;

use axum::Json;
use axum::extract::State;
use glassbox_schemas::eval::{EvalKind, SuiteName};
use glassbox_schemas::metrics::TOTAL_TOKENS;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{Evaluation, MAX_RUN_ENTRIES, Outcome, SuiteKind, read_evaluations, suite_param};
use crate::WebState;
use crate::error::WebError;
use crate::extract::{ApiPath, ApiQuery, MAX_INTEGER};

/// Points of the run's token counter read to place steps on the tokens and FLOPs axes (the
/// counter grows linearly between them, so interpolating is exact to well under a step).
const TOKEN_POINTS: usize = 4000;

/// One version of a suite as evaluated on the run.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SuiteResults {
    /// The suite's name.
    pub suite: String,
    /// Its version (the items' hash).
    pub version: String,
    /// What it measures.
    pub kind: SuiteKind,
    /// The headline metric (the chart's).
    pub metric: String,
    /// Whether a higher headline is better.
    pub higher_is_better: bool,
    /// The newest result per snapshot step, by step.
    pub results: Vec<Evaluation>,
}

impl SuiteResults {
    /// The first entry that evaluated the run on this version (a replaced one included): of
    /// two versions of a suite, the one first evaluated later is the newer.
    fn first_evaluated(&self) -> u64 {
        self.results
            .iter()
            .flat_map(|e| std::iter::once(e.entry).chain(e.replaces.iter().copied()))
            .min()
            .unwrap_or(0)
    }

    /// The result at the highest step.
    pub fn latest(&self) -> Option<&Evaluation> {
        self.results.last()
    }
}

/// A run's evaluations.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RunEvaluations {
    /// The run.
    pub run: String,
    /// One per suite version with at least one result: by suite name, newest version first.
    pub suites: Vec<SuiteResults>,
    /// Evaluations that ended `failed` or `cancelled` (not results), newest first.
    pub not_evaluated: Vec<Evaluation>,
    /// Whether the run has more than the newest [`MAX_RUN_ENTRIES`] entries read.
    pub truncated: bool,
}

/// Folds a run's evaluations, given newest first: per suite version the newest `evaluated`
/// entry of each step (the older ones named in its `replaces`), the rest apart.
pub fn fold(run: &str, evaluations: Vec<Evaluation>, truncated: bool) -> RunEvaluations {
    let mut suites: Vec<SuiteResults> = Vec::new();
    let mut by_version: HashMap<String, usize> = HashMap::new();
    let mut by_step: HashMap<(String, u64), (usize, usize)> = HashMap::new();
    let mut not_evaluated = Vec::new();
    for e in evaluations {
        if e.outcome != Outcome::Evaluated {
            not_evaluated.push(e);
            continue;
        }
        let s = *by_version.entry(e.version.clone()).or_insert_with(|| {
            suites.push(SuiteResults {
                suite: e.suite.clone(),
                version: e.version.clone(),
                kind: e.kind,
                metric: e.kind.headline().to_string(),
                higher_is_better: EvalKind::higher_is_better(e.kind.headline()),
                results: Vec::new(),
            });
            suites.len() - 1
        });
        match by_step.get(&(e.version.clone(), e.step)) {
            // Seen newest first: what comes later is older, and replaced.
            Some(&(s, r)) => suites[s].results[r].replaces.push(e.entry),
            None => {
                by_step.insert((e.version.clone(), e.step), (s, suites[s].results.len()));
                suites[s].results.push(e);
            }
        }
    }
    for s in &mut suites {
        s.results.sort_by_key(|e| e.step);
    }
    suites.sort_by(|a, b| {
        a.suite
            .cmp(&b.suite)
            .then(b.first_evaluated().cmp(&a.first_evaluated()))
    });
    RunEvaluations {
        run: run.to_string(),
        suites,
        not_evaluated,
        truncated,
    }
}

/// The value of a step -> value table at `step`, linearly interpolated (from 0 at step 0
/// before its first point); `None` past its last point or when it is empty.
fn at_step(points: &[(u64, f64)], step: u64) -> Option<f64> {
    let last = points.last()?;
    if step > last.0 {
        return None;
    }
    let i = points.partition_point(|p| p.0 < step);
    let (s1, v1) = points[i];
    if s1 == step {
        return Some(v1);
    }
    let (s0, v0) = if i == 0 { (0, 0.0) } else { points[i - 1] };
    Some(v0 + (v1 - v0) * (step - s0) as f64 / (s1 - s0) as f64)
}

/// The run's evaluations, `suite`'s only when given, with tokens and FLOPs at each step (404
/// for a run the log does not know).
pub async fn load(
    st: &WebState,
    run: &str,
    suite: Option<&SuiteName>,
) -> Result<RunEvaluations, WebError> {
    let flops_per_token = {
        let cat = st.catalog.read(&st.index, st.blobs.as_ref()).await?;
        let row = cat
            .runs
            .get(run)
            .ok_or_else(|| WebError::not_found(format!("run {run:?}")))?;
        row.experiment
            .as_ref()
            .and_then(|x| cat.experiments.get(x))
            .and_then(|e| e.spec.as_ref())
            .map(|s| s.flops_per_token)
    };
    let (mut evaluations, truncated) = read_evaluations(st, Some(run), MAX_RUN_ENTRIES).await?;
    if let Some(name) = suite {
        evaluations.retain(|e| e.suite == name.as_str());
    }
    if !evaluations.is_empty() {
        let tokens = crate::series::ranges(
            st,
            run,
            &[TOTAL_TOKENS.to_string()],
            0,
            MAX_INTEGER,
            TOKEN_POINTS,
        )
        .await?
        .pop()
        .map(|(_, points)| points)
        .unwrap_or_default();
        for e in &mut evaluations {
            e.tokens = at_step(&tokens, e.step);
            e.flops = e.tokens.zip(flops_per_token).map(|(t, f)| t * f);
        }
    }
    Ok(fold(run, evaluations, truncated))
}

/// Which of a run's evaluations to list.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RunEvalQuery {
    /// Only this suite's (a name: 1 to 64 of `a-z`, `0-9`, `.`, `_`, `-`).
    #[param(pattern = r"^[a-z0-9][a-z0-9._-]{0,63}$")]
    pub suite: Option<String>,
}

/// A run's evaluations: per suite version the newest result of each evaluated snapshot (with
/// the entries it replaces), and the evaluations that failed or were cancelled.
#[utoipa::path(get, path = "/api/v1/runs/{run}/evaluations",
    params(("run" = String, Path), RunEvalQuery),
    responses((status = 200, body = RunEvaluations),
        (status = 400, content_type = "text/plain", description = "a malformed suite name or an unknown parameter, named in the body"),
        (status = 404, content_type = "text/plain", description = "no such run")))]
pub async fn run_evaluations(
    State(st): State<WebState>,
    ApiPath(run): ApiPath<String>,
    ApiQuery(q): ApiQuery<RunEvalQuery>,
) -> Result<Json<RunEvaluations>, WebError> {
    let suite = suite_param("suite", q.suite.as_deref())?;
    Ok(Json(load(&st, &run, suite.as_ref()).await?))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// An evaluation of suite `mc` at `step` for the tests (acc_norm `acc` when evaluated).
    pub(crate) fn ev(
        entry: u64,
        step: u64,
        version: &str,
        outcome: Outcome,
        acc: f64,
    ) -> Evaluation {
        Evaluation {
            entry,
            time: "t".into(),
            run: "r".into(),
            experiment: None,
            step,
            tokens: None,
            flops: None,
            snapshot: "blake3:00".into(),
            suite: "mc".into(),
            version: version.into(),
            kind: SuiteKind::MultipleChoice,
            outcome,
            detail: None,
            items: 10,
            metrics: if outcome == Outcome::Evaluated {
                BTreeMap::from([("acc_norm".to_string(), acc)])
            } else {
                BTreeMap::new()
            },
            contamination: None,
            results: None,
            automatic: true,
            worker: None,
            replaces: Vec::new(),
        }
    }

    /// Newest per (version, step); the replaced entries are named; versions stay apart; a
    /// failed evaluation is listed apart and never a result.
    #[test]
    fn newest_result_per_step_and_version() {
        let newest_first = vec![
            ev(9, 200, "blake3:bb", Outcome::Evaluated, 0.7),
            ev(8, 100, "blake3:aa", Outcome::Failed, f64::NAN),
            ev(7, 100, "blake3:aa", Outcome::Evaluated, 0.6),
            ev(6, 200, "blake3:aa", Outcome::Evaluated, 0.65),
            ev(5, 100, "blake3:aa", Outcome::Evaluated, 0.5),
        ];
        let f = fold("r", newest_first, false);
        assert_eq!(f.suites.len(), 2);
        assert_eq!(f.suites[0].version, "blake3:bb", "newest version first");
        let a = &f.suites[1];
        let got: Vec<(u64, u64, Option<f64>)> = a
            .results
            .iter()
            .map(|e| (e.step, e.entry, e.headline()))
            .collect();
        assert_eq!(got, [(100, 7, Some(0.6)), (200, 6, Some(0.65))]);
        assert_eq!(a.results[0].replaces, [5]);
        assert_eq!(f.not_evaluated.len(), 1);
        assert_eq!(f.not_evaluated[0].headline(), None);
    }

    #[test]
    fn steps_map_through_the_token_counter() {
        let pts = [(10, 5120.0), (20, 10240.0)];
        assert_eq!(at_step(&pts, 10), Some(5120.0));
        assert_eq!(at_step(&pts, 15), Some(7680.0));
        assert_eq!(at_step(&pts, 5), Some(2560.0));
        assert_eq!(at_step(&pts, 21), None);
        assert_eq!(at_step(&[], 1), None);
    }
}
