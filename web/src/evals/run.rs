//! One run's evaluations: its `evaluation` entries folded per suite version ([`fold`]: the
//! newest result per snapshot step, the older ones it replaces named on it, the attempts that
//! did not evaluate listed apart), with tokens and FLOPs at each step from the run's own
//! counters; served as `/api/v1/runs/{run}/evaluations` ([`run_evaluations`]) and drawn as the
//! run page's "Evaluations" section ([`section`]): per suite version a chart of its headline
//! metric over steps (the chart script places it on the page's x axis: tokens, FLOPs or time),
//! the contamination figure beside it, and a table of every metric at every step.
//!
//! Not here: the board across runs (`board`) or the charts' drawing (`crate::chart`).

use std::collections::HashMap;

use axum::Json;
use axum::extract::State;
use glassbox_schemas::eval::{EvalKind, SuiteName};
use glassbox_schemas::metrics::TOTAL_TOKENS;
use maud::{Markup, html};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{Evaluation, MAX_RUN_ENTRIES, Outcome, SuiteKind, read_evaluations, suite_param};
use crate::WebState;
use crate::chart::{self, Axes, Line};
use crate::error::WebError;
use crate::extract::{ApiPath, ApiQuery, MAX_INTEGER};
use crate::pages::controls::{PageLine, View, XAxis, page_line_figure};
use crate::pages::{count, encode_path, num, query, short_hash};

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

/// The x axes the section links to, as the chart controls name them.
const X_AXES: [(XAxis, &str); 4] = [
    (XAxis::Step, "step"),
    (XAxis::Tokens, "tokens"),
    (XAxis::Flops, "FLOPs"),
    (XAxis::Time, "training time"),
];

/// This page with the x axis `x` and the rest of `view`, at the Evaluations section.
fn x_link(view: &View, x: XAxis) -> String {
    let (smooth, from, to) = (
        view.smooth.to_string(),
        view.from.map(|f| f.to_string()),
        view.to.map(|t| t.to_string()),
    );
    let mut pairs: Vec<(&str, &str)> = Vec::new();
    if view.smooth > 0.0 {
        pairs.push(("smooth", &smooth));
    }
    if view.log_y {
        pairs.push(("logy", "1"));
    }
    if x != XAxis::Step {
        pairs.push(("x", x.as_str()));
    }
    if let Some(f) = &from {
        pairs.push(("from", f));
    }
    if let Some(t) = &to {
        pairs.push(("to", t));
    }
    format!("?{}#evaluations", query(&pairs))
}

/// An outcome as a badge.
pub fn outcome_badge(o: Outcome) -> Markup {
    let class = match o {
        Outcome::Evaluated => "badge ok",
        Outcome::Failed => "badge bad",
        Outcome::Cancelled => "badge warn",
    };
    html! { span class=(class) { (o.as_str()) } }
}

/// `value ± stderr` for a table cell.
fn with_stderr(e: &Evaluation, metric: &str) -> String {
    match (e.value(metric), e.stderr(metric)) {
        (Some(v), Some(se)) => format!("{} ± {}", num(Some(v)), num(Some(se))),
        (Some(v), None) => num(Some(v)),
        (None, _) => "–".into(),
    }
}

/// The anchor of a suite version's block on the run page.
pub fn anchor(suite: &str, version: &str) -> String {
    let short = version.strip_prefix("blake3:").unwrap_or(version);
    format!("eval-{suite}-{}", &short[..short.len().min(12)])
}

/// The chart of one suite version's headline metric over steps.
fn chart(run: &str, s: &SuiteResults, view: &View, flops_per_token: Option<f64>) -> Markup {
    let points: Vec<(u64, f64)> = s
        .results
        .iter()
        .filter_map(|e| e.headline().map(|v| (e.step, v)))
        .collect();
    let short = s.version.strip_prefix("blake3:").unwrap_or(&s.version);
    let title = format!(
        "{} ({}): {}",
        s.suite,
        &short[..short.len().min(12)],
        s.metric
    );
    let unit = format!(
        "{}, {} is better",
        s.metric,
        if s.higher_is_better {
            "higher"
        } else {
            "lower"
        }
    );
    let svg = chart::line_chart(
        &title,
        &[Line {
            label: s.metric.clone(),
            points: points.iter().map(|&(x, y)| (x as f64, y)).collect(),
            markers: true,
        }],
        &Axes {
            x_desc: "step".into(),
            y_desc: unit.clone(),
            log_y: view.log_y,
            ..Axes::default()
        },
    );
    page_line_figure(
        &title,
        &unit,
        &[PageLine {
            run,
            label: &s.metric,
            flops_per_token,
            points,
            markers: true,
        }],
        &svg,
    )
}

/// The run page's "Evaluations": per suite version its chart, contamination and table; then
/// the evaluations that did not end `evaluated`.
pub fn section(
    ev: &RunEvaluations,
    view: &View,
    flops_per_token: Option<f64>,
    running: bool,
) -> Markup {
    html! {
        section #evaluations {
            h2 { "Evaluations" }
            @if ev.suites.is_empty() && ev.not_evaluated.is_empty() {
                p.empty {
                    @if running { "No snapshot has been evaluated yet: each snapshot is scored on the suites the lab's or the spec's [evals] names." }
                    @else { "This run's snapshots were not evaluated (the lab's or the spec's [evals] names the suites each snapshot is scored on)." }
                }
            } @else {
                p.meta {
                    "Each snapshot scored on held-out suites, one block per suite version (versions are never mixed). "
                    "Where a snapshot was evaluated more than once, the newest evaluation counts. "
                    "The charts follow the chart controls above (x by step, tokens, FLOPs or time; log y). · "
                    a href={ "/api/v1/runs/" (encode_path(&ev.run)) "/evaluations" } { "as JSON" } " · "
                    a href="/evals" { "every run's evaluations" }
                }
                p.meta.x-axes {
                    "x axis: "
                    @for (i, (x, label)) in X_AXES.iter().enumerate() {
                        @if i > 0 { " · " }
                        @if *x == view.x { strong { (label) } } @else { a href=(x_link(view, *x)) { (label) } }
                    }
                }
                @if ev.truncated { p.meta { "Only the newest " (MAX_RUN_ENTRIES) " evaluation entries of this run are read." } }
                @for s in &ev.suites { (suite_block(&ev.run, s, view, flops_per_token)) }
                @if !ev.not_evaluated.is_empty() {
                    h3 { "Not evaluated" }
                    p.meta { "Attempts that failed or were cancelled: not results, and never shown as a value." }
                    table.list #evals-not-evaluated {
                        thead { tr { th { "Step" } th { "Suite" } th { "Outcome" } th { "Detail" } th { "Time" } th { "Entry" } } }
                        tbody { @for e in &ev.not_evaluated { tr {
                            td.n { (e.step) }
                            td { (e.suite) " " (short_hash(&e.version)) }
                            td { (outcome_badge(e.outcome)) }
                            td { (e.detail.as_deref().unwrap_or("")) }
                            td { (e.time) }
                            td.n { a href={ "/api/v1/entries/" (e.entry) } { (e.entry) } }
                        } } }
                    }
                }
            }
        }
    }
}

fn suite_block(run: &str, s: &SuiteResults, view: &View, flops_per_token: Option<f64>) -> Markup {
    let metrics: Vec<&str> = s
        .kind
        .metrics()
        .iter()
        .copied()
        .filter(|m| !m.ends_with("_stderr"))
        .collect();
    let latest = s.latest();
    html! {
        div.eval-suite id=(anchor(&s.suite, &s.version)) {
            h3 {
                (s.suite) " " (short_hash(&s.version))
                " " span.meta { (s.kind.as_str()) @if let Some(l) = latest { " · " (count(l.items as f64)) " items" } }
            }
            div.eval-body {
                (chart(run, s, view, flops_per_token))
                aside.contamination
                    .flagged[latest.and_then(|l| l.contamination.as_ref()).is_some_and(|c| c.flagged > 0)]
                    .unchecked[latest.is_none_or(|l| l.contamination.is_none())] {
                    h4 { "Contamination" }
                    @match latest.and_then(|l| l.contamination.as_ref().map(|c| (l, c))) {
                        Some((l, c)) => {
                            p.figure { (c.percent()) }
                            p { (c.sentence()) " (at step " (l.step) ")." }
                            @if c.tokens_checked > 0 { p.meta { (count(c.tokens_checked as f64)) " training tokens checked." } }
                            @if !c.first_flagged.is_empty() {
                                p.meta {
                                    "Flagged items: "
                                    (c.first_flagged.iter().take(12).map(u64::to_string).collect::<Vec<_>>().join(", "))
                                    @if c.flagged > c.first_flagged.len().min(12) as u64 { ", …" }
                                }
                            }
                        }
                        None => { p.meta { "Not checked: the newest evaluation records no contamination figure." } }
                    }
                }
            }
            table.list.evals {
                thead { tr {
                    th { "Step" } th { "Tokens" } th { "FLOPs" }
                    @for m in &metrics { th { (m) @if *m == s.metric { " " small.meta { "(headline)" } } } }
                    th { "Contamination" } th { "Entry" }
                } }
                tbody { @for e in s.results.iter().rev() { tr {
                    td.n { (e.step) }
                    td.n { (e.tokens.map(count).unwrap_or_else(|| "–".into())) }
                    td.n { (num(e.flops)) }
                    @for m in &metrics { td.n { (with_stderr(e, m)) } }
                    td.n {
                        @if let Some(c) = &e.contamination { span title=(c.sentence()) { (c.flagged) " of " (c.items) " (" (c.percent()) ")" } }
                        @else { "not checked" }
                    }
                    td.n {
                        a href={ "/api/v1/entries/" (e.entry) } { (e.entry) }
                        @if let Some(r) = &e.results { " " small { a href={ "/blobs/" (encode_path(r)) } download { "per item" } } }
                        @if !e.replaces.is_empty() {
                            br; small.meta { "replaces " (e.replaces.iter().map(|x| format!("#{x}")).collect::<Vec<_>>().join(", ")) }
                        }
                    }
                } } }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn ev(entry: u64, step: u64, version: &str, outcome: Outcome, acc: f64) -> Evaluation {
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

    #[test]
    fn suite_text_is_escaped() {
        let mut e = ev(3, 100, "blake3:aa", Outcome::Failed, f64::NAN);
        e.detail = Some("<script>alert(1)</script>".into());
        let f = fold("r", vec![e], false);
        let html = section(&f, &View::default(), None, false).into_string();
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("&lt;script&gt;"), "{html}");
    }
}
