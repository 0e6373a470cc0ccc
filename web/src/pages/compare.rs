//! Compare: 2-8 runs overlaid, one chart per chosen metric (shared crosshair and zoom, live runs
//! appended over SSE by the chart script), their final metrics with the best of each column
//! marked, parallel coordinates over the spec fields that differ, and a field-by-field diff of
//! their specs.
//!
//! Runs are chosen by repeated `run=` query parameters (what a form of checkboxes sends), the
//! charts' metrics by repeated `metric=` (default `train/loss`), the parallel coordinates'
//! metric by `pc=` (default `train/loss`), and the chart view as on the experiment page
//! (`controls`). Specs are flattened to dotted paths (`model.moe.n_experts`) so the diff lists
//! exactly the fields that differ.

use std::collections::{BTreeMap, BTreeSet};

use axum::extract::{RawQuery, State};
use maud::{Markup, html};
use serde_json::Value;

use super::controls::{self, LineRef, View, ViewQuery, line_figure};
use super::{Nav, Scripts, encode_path, experiment_href, frame_with, short_hash, status_badge};
use crate::WebState;
use crate::catalog::parse_spec_text;
use crate::chart::{self, Axes, Line};
use crate::error::WebError;
use crate::series;

/// Most runs one comparison overlays.
pub const MAX_COMPARE: usize = 8;
/// Most metrics (charts) one comparison draws.
pub const MAX_METRICS: usize = 12;
/// Most spec fields the parallel coordinates give an axis.
const MAX_PC_AXES: usize = 12;

/// The parsed query: runs (in order, without repeats), the charts' metrics, the parallel
/// coordinates' metric and the chart view.
#[derive(Debug, Clone, PartialEq)]
pub struct CompareQuery {
    /// Runs.
    pub runs: Vec<String>,
    /// One chart per metric, in order, without repeats.
    pub metrics: Vec<String>,
    /// The final metric the parallel coordinates end on and colour by.
    pub pc_metric: String,
    /// The chart view.
    pub view: View,
    /// Whether `metrics` is the default (no `metric=` given): the page then charts the
    /// metrics a reader looks at first, of those the runs have.
    pub default_metrics: bool,
}

/// What the page charts when no `metric=` is given, in order, where the runs have them:
/// the train loss, each domain's held-out loss, the learning rate, the gradient norm and the
/// throughput (small multiples sharing the x axis and the crosshair).
fn default_metrics(names: &BTreeSet<String>) -> Vec<String> {
    use glassbox_schemas::metrics as m;
    let mut out = vec![m::TRAIN_LOSS.to_string()];
    out.extend(
        names
            .iter()
            .filter(|n| n.starts_with("eval/") && n.ends_with("/loss"))
            .take(4)
            .cloned(),
    );
    for n in [m::LEARNING_RATE, m::GRAD_NORM_TOTAL, m::TOKENS_PER_SECOND] {
        if names.contains(n) {
            out.push(n.to_string());
        }
    }
    out
}

/// Parses `run=a&run=b&metric=...&pc=...` (also `runs=a,b`) and the view parameters.
pub fn parse_query(raw: Option<&str>) -> Result<CompareQuery, WebError> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw.unwrap_or(""))
        .map_err(|e| WebError::BadRequest(format!("query string: {e}")))?;
    let mut runs: Vec<String> = Vec::new();
    let mut metrics: Vec<String> = Vec::new();
    let mut pc_metric = glassbox_schemas::metrics::TRAIN_LOSS.to_string();
    let mut vq = ViewQuery::default();
    for (k, v) in pairs {
        match k.as_str() {
            "run" => runs.push(v),
            "runs" => runs.extend(v.split(',').map(str::to_string)),
            "metric" if !v.is_empty() => metrics.push(v),
            "pc" if !v.is_empty() => pc_metric = v,
            "smooth" => vq.smooth = Some(v),
            "logy" => vq.logy = Some(v),
            "x" => vq.x = Some(v),
            "from" => vq.from = Some(v),
            "to" => vq.to = Some(v),
            _ => {}
        }
    }
    let mut seen = BTreeSet::new();
    runs.retain(|r| !r.is_empty() && seen.insert(r.clone()));
    if runs.len() > MAX_COMPARE {
        return Err(WebError::BadRequest(format!(
            "{} runs asked for; compare at most {MAX_COMPARE} at a time",
            runs.len()
        )));
    }
    let mut seen = BTreeSet::new();
    metrics.retain(|m| seen.insert(m.clone()));
    if metrics.len() > MAX_METRICS {
        return Err(WebError::BadRequest(format!(
            "{} metrics asked for; chart at most {MAX_METRICS} at a time",
            metrics.len()
        )));
    }
    let default_metrics = metrics.is_empty();
    if default_metrics {
        metrics.push(glassbox_schemas::metrics::TRAIN_LOSS.to_string());
    }
    Ok(CompareQuery {
        runs,
        metrics,
        pc_metric,
        view: vq.view()?,
        default_metrics,
    })
}

/// Which way a final metric is better, if it has a direction: losses and bits per byte lower,
/// throughput and MFU higher; anything else (learning rate, norms, counters) is not ranked.
fn better_is_lower(name: &str) -> Option<bool> {
    if name.contains("loss") || name.ends_with("/bpb") {
        Some(true)
    } else if name == glassbox_schemas::metrics::TOKENS_PER_SECOND
        || name == glassbox_schemas::metrics::MFU
    {
        Some(false)
    } else {
        None
    }
}

/// The best value of each ranked column: name -> the value to mark.
fn best_per_column(rows: &[&BTreeMap<String, f64>]) -> BTreeMap<String, f64> {
    let mut best: BTreeMap<String, f64> = BTreeMap::new();
    for row in rows {
        for (name, &v) in row.iter() {
            let Some(lower) = better_is_lower(name) else {
                continue;
            };
            if !v.is_finite() {
                continue;
            }
            best.entry(name.clone())
                .and_modify(|b| {
                    if (lower && v < *b) || (!lower && v > *b) {
                        *b = v;
                    }
                })
                .or_insert(v);
        }
    }
    best
}

/// The parallel coordinates' data: one axis per differing spec field (numbers when every value
/// parses as one), then the metric axis.
fn parcoords(
    runs: &[CompareRun],
    finals: &[&BTreeMap<String, f64>],
    differing: &[&String],
    metric: &str,
) -> Value {
    let value = |text: Option<&String>| -> Value {
        match text {
            None => Value::Null,
            Some(t) => t
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .map(Value::from)
                .unwrap_or_else(|| Value::from(t.as_str())),
        }
    };
    let mut axes: Vec<Value> = differing
        .iter()
        .take(MAX_PC_AXES)
        .map(|k| {
            serde_json::json!({
                "name": k,
                "values": runs.iter().map(|r| value(r.spec.as_ref().and_then(|s| s.get(*k)))).collect::<Vec<_>>(),
            })
        })
        .collect();
    axes.push(serde_json::json!({
        "name": metric,
        "values": finals.iter().map(|f| f.get(metric).copied().filter(|v| v.is_finite()).map(Value::from).unwrap_or(Value::Null)).collect::<Vec<_>>(),
    }));
    serde_json::json!({
        "runs": runs.iter().map(|r| r.run.as_str()).collect::<Vec<_>>(),
        "axes": axes,
    })
}

/// The spec fields whose values differ between the runs (those with a readable spec).
pub(crate) fn differing_fields(runs: &[CompareRun]) -> Vec<&String> {
    let keys: BTreeSet<&String> = runs
        .iter()
        .filter_map(|r| r.spec.as_ref())
        .flat_map(|s| s.keys())
        .collect();
    keys.iter()
        .copied()
        .filter(|k| {
            let vals: BTreeSet<Option<&String>> = runs
                .iter()
                .map(|r| r.spec.as_ref().and_then(|s| s.get(*k)))
                .collect();
            vals.len() > 1
        })
        .collect()
}

/// The parallel coordinates (`data-pc`) of a set of runs, such as a search result's latest
/// runs: the spec fields that differ between them, then their final `metric`. `None` for fewer
/// than two runs.
pub(crate) async fn parallel_data(
    st: &WebState,
    run_ids: &[String],
    metric: &str,
) -> Result<Option<String>, WebError> {
    if run_ids.len() < 2 {
        return Ok(None);
    }
    let runs = load(st, run_ids).await?;
    let finals: Vec<BTreeMap<String, f64>> = {
        let cat = st.catalog.read(&st.index, st.blobs.as_ref()).await?;
        runs.iter()
            .map(|r| {
                cat.runs
                    .get(&r.run)
                    .map(|x| x.final_metrics.clone())
                    .unwrap_or_default()
            })
            .collect()
    };
    let finals: Vec<&BTreeMap<String, f64>> = finals.iter().collect();
    let differing = differing_fields(&runs);
    Ok(Some(
        parcoords(&runs, &finals, &differing, metric).to_string(),
    ))
}

/// Flattens JSON into `dotted.path -> scalar text`; arrays index as `path[i]`.
pub fn flatten(v: &Value, prefix: &str, out: &mut BTreeMap<String, String>) {
    match v {
        Value::Object(o) => {
            for (k, x) in o {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(x, &p, out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                flatten(x, &format!("{prefix}[{i}]"), out);
            }
            if a.is_empty() {
                out.insert(prefix.to_string(), "[]".into());
            }
        }
        Value::String(s) => {
            out.insert(prefix.to_string(), s.clone());
        }
        other => {
            out.insert(prefix.to_string(), other.to_string());
        }
    }
}

/// One run's side of the comparison.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct CompareRun {
    /// Run id.
    pub run: String,
    /// Experiment.
    pub experiment: Option<String>,
    /// Status.
    pub status: String,
    /// Spec hash.
    pub spec_hash: String,
    /// The spec flattened to dotted paths, when its blob is available.
    pub spec: Option<BTreeMap<String, String>>,
}

/// The runs' catalog facts and flattened specs; unknown runs are a 404.
pub async fn load(st: &WebState, runs: &[String]) -> Result<Vec<CompareRun>, WebError> {
    // (run, experiment, status, spec hash, spec blob)
    type Picked = (String, Option<String>, String, String, Option<String>);
    let picked: Vec<Picked> = {
        let cat = st.catalog.read(&st.index, st.blobs.as_ref()).await?;
        runs.iter()
            .map(|r| {
                let row = cat
                    .runs
                    .get(r)
                    .ok_or_else(|| WebError::not_found(format!("run {r:?}")))?;
                // The spec blob of the proposal whose hash this run trained.
                let blob = row
                    .experiment
                    .as_ref()
                    .and_then(|x| cat.experiments.get(x))
                    .filter(|e| e.spec_hash.as_deref() == Some(row.spec_hash.as_str()))
                    .and_then(|e| e.spec_blob.clone());
                Ok((
                    row.id.clone(),
                    row.experiment.clone(),
                    row.status.as_str().to_string(),
                    row.spec_hash.clone(),
                    blob,
                ))
            })
            .collect::<Result<_, WebError>>()?
    };
    let mut out = Vec::new();
    for (run, experiment, status, spec_hash, blob) in picked {
        let spec = match blob.as_deref() {
            Some(b) => flat_spec(st, b).await.map(|s| (*s).clone()),
            None => None,
        };
        out.push(CompareRun {
            run,
            experiment,
            status,
            spec_hash,
            spec,
        });
    }
    Ok(out)
}

/// The spec in blob `hash` flattened to dotted paths, from the server's [`SpecCache`] or read
/// and parsed (then kept); `None` when the blob is absent, too large or not a spec.
///
/// [`SpecCache`]: crate::spec_cache::SpecCache
pub(crate) async fn flat_spec(st: &WebState, hash: &str) -> Option<crate::spec_cache::FlatSpec> {
    if let Some(s) = st.specs.get(hash) {
        return Some(s);
    }
    let text = st
        .small_blob_text(hash, super::experiment::MAX_SPEC_BYTES)
        .await?;
    let value = serde_json::to_value(parse_spec_text(&text)?).ok()?;
    let mut flat = BTreeMap::new();
    flatten(&value, "", &mut flat);
    let flat = std::sync::Arc::new(flat);
    st.specs.put(hash, flat.clone());
    Some(flat)
}

/// `GET /compare?run=a&run=b[&metric=name...][&pc=name]`.
pub async fn page(State(st): State<WebState>, RawQuery(raw): RawQuery) -> Result<Markup, WebError> {
    let mut q = parse_query(raw.as_deref())?;
    let view = q.view;
    let runs = load(&st, &q.runs).await?;
    // (final metrics, FLOPs per token, running) of each run, from the catalog.
    let facts: Vec<(BTreeMap<String, f64>, Option<f64>, bool)> = {
        let cat = st.catalog.read(&st.index, st.blobs.as_ref()).await?;
        runs.iter()
            .map(|r| {
                let row = cat.runs.get(&r.run);
                (
                    row.map(|x| x.final_metrics.clone()).unwrap_or_default(),
                    r.experiment
                        .as_ref()
                        .and_then(|x| cat.experiments.get(x))
                        .and_then(|e| e.spec.as_ref())
                        .map(|s| s.flops_per_token),
                    row.is_some_and(|x| x.status.is_running()),
                )
            })
            .collect()
    };
    let mut names = BTreeSet::new();
    for r in &runs {
        names.extend(series::metric_names(&st.index, &st.live, &r.run).await?);
    }
    if q.default_metrics {
        q.metrics = default_metrics(&names);
    }
    let (from, to) = (view.from.unwrap_or(0), view.to.unwrap_or(u64::MAX));
    let mut figures = Vec::new();
    for metric in &q.metrics {
        let mut lines = Vec::new();
        for r in &runs {
            // Through the overviews and the series cache, as the chart script's requests.
            let (total, pts) = series::ranges(
                &st,
                &r.run,
                std::slice::from_ref(metric),
                from,
                to,
                chart::SVG_POINTS_PER_LINE,
            )
            .await?
            .pop()
            .unwrap_or_default();
            lines.push(Line {
                label: r.run.clone(),
                points: pts.into_iter().map(|(s, v)| (s as f64, v)).collect(),
                markers: total == 1,
            });
        }
        let svg = chart::line_chart(
            metric,
            &lines,
            &Axes {
                x_desc: "step".into(),
                y_desc: metric.clone(),
                log_y: view.log_y,
                ..Axes::default()
            },
        );
        let refs: Vec<LineRef> = runs
            .iter()
            .zip(&facts)
            .map(|(r, f)| LineRef {
                run: &r.run,
                name: metric,
                label: &r.run,
                flops_per_token: f.1,
            })
            .collect();
        figures.push(line_figure(metric, metric, &refs, &[], &svg));
    }
    // Per-expert components would flood the menu; the heatmaps show them.
    let names: Vec<String> = names
        .into_iter()
        .filter(|n| !n.contains("/expert_load/"))
        .collect();
    let differing = differing_fields(&runs);
    let identical = runs
        .iter()
        .filter_map(|r| r.spec.as_ref())
        .flat_map(|s| s.keys())
        .collect::<BTreeSet<_>>()
        .len()
        - differing.len();
    let finals: Vec<&BTreeMap<String, f64>> = facts.iter().map(|f| &f.0).collect();
    let columns: Vec<&String> = finals
        .iter()
        .flat_map(|f| f.keys())
        .filter(|n| !n.contains("/expert_load/"))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let best = best_per_column(&finals);
    let pc = parcoords(&runs, &finals, &differing, &q.pc_metric);
    let live: Vec<&str> = runs
        .iter()
        .zip(&facts)
        .filter(|(_, f)| f.2)
        .map(|(r, _)| r.run.as_str())
        .collect();
    let hidden: Vec<(&str, &str)> = runs
        .iter()
        .map(|r| ("run", r.run.as_str()))
        .chain(q.metrics.iter().map(|m| ("metric", m.as_str())))
        .collect();
    let body = html! {
        h1 { "Compare runs" }
        @if runs.len() < 2 {
            p.lead { "Pick 2 to " (MAX_COMPARE) " runs: tick them on the " a href="/experiments" { "experiments" } " page or an experiment's run table, or add " code { "?run=A&run=B" } " to this address." }
        }
        @if !runs.is_empty() {
            form.filters method="get" action="/compare" {
                @for r in &runs { input type="hidden" name="run" value=(r.run); }
                label { "Metrics (one chart each) " select name="metric" multiple size="4" {
                    @for n in &names { option value=(n) selected[q.metrics.contains(n)] { (n) } }
                } }
                button type="submit" { "Show" }
            }
            (controls::form(&view, &hidden))
            div #compare-charts data-live=(serde_json::to_string(&live).unwrap_or_default()) {
                @for f in &figures { (f) }
            }
            h2 { "Final metrics" }
            p.meta { "The best value of each loss column (lowest) and throughput column (highest) is marked ★." }
            div.table-scroll { table.list #final-metrics {
                thead { tr { th { "Run" } @for c in &columns { th { code { (c) } } } } }
                tbody {
                    @for (r, f) in runs.iter().zip(&finals) { tr data-run=(r.run) {
                        td { a href={ "/runs/" (encode_path(&r.run)) } { (r.run) } " " (status_badge(&r.status)) }
                        @for c in &columns {
                            @let v = f.get(*c).copied();
                            @let is_best = v.is_some() && v == best.get(*c).copied();
                            td.n.best[is_best] title=[is_best.then_some("best of the runs compared")] {
                                @match v { Some(v) => (super::metric_value(c, v)), None => "–" } @if is_best { " ★" }
                            }
                        }
                    } }
                }
            } }
            @if runs.len() >= 2 {
                h2 { "Parallel coordinates" }
                form.filters method="get" action="/compare" {
                    @for (k, v) in &hidden { input type="hidden" name=(k) value=(v); }
                    label { "Final metric " select name="pc" {
                        @for c in &columns { option value=(c) selected[**c == q.pc_metric] { (c) } }
                    } }
                    button type="submit" { "Show" }
                }
                p.meta { "One axis per spec field that differs, then the final metric; lines coloured by it. Drag along an axis to filter the runs (and the table above); click the axis to clear." }
                figure #parcoords data-pc=(pc.to_string()) {
                    noscript { p.empty { "Parallel coordinates need JavaScript; the tables show the same values." } }
                }
            }
            h2 { "Spec differences" }
            table.list #spec-diff {
                thead { tr { th { "Field" } @for r in &runs { th {
                    a href={ "/runs/" (encode_path(&r.run)) } { (r.run) } " " (status_badge(&r.status)) br;
                    (short_hash(&r.spec_hash))
                    @if let Some(x) = &r.experiment { br; a href=(experiment_href(x)) { small { (x) } } }
                } } } }
                tbody {
                    @if differing.is_empty() { tr { td colspan=(runs.len() + 1) { "The specs do not differ in any field (or are not available)." } } }
                    @for k in &differing { tr {
                        td { code { (k) } }
                        @for r in &runs { td { (r.spec.as_ref().and_then(|s| s.get(*k)).map(String::as_str).unwrap_or("–")) } }
                    } }
                }
            }
            p.meta { (identical) " other fields are identical." }
        }
    };
    Ok(frame_with(
        "Compare",
        Nav::Compare,
        Scripts::ChartsAndParcoords,
        body,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_takes_repeated_runs_and_caps_them() {
        let q = parse_query(Some(
            "run=a&run=b&run=a&metric=eval%2Fx%2Floss&metric=train%2Floss&logy=1&pc=eval%2Fx%2Floss",
        ))
        .unwrap();
        assert_eq!(q.runs, ["a", "b"]);
        assert_eq!(q.metrics, ["eval/x/loss", "train/loss"]);
        assert_eq!(q.pc_metric, "eval/x/loss");
        assert!(q.view.log_y);
        assert!(parse_query(Some("run=a&x=epochs")).is_err());
        assert_eq!(parse_query(Some("runs=a,b,c")).unwrap().runs.len(), 3);
        let many = (0..9)
            .map(|i| format!("run=r{i}"))
            .collect::<Vec<_>>()
            .join("&");
        assert!(parse_query(Some(&many)).is_err());
        assert_eq!(parse_query(None).unwrap().metrics, ["train/loss"]);
        assert!(parse_query(None).unwrap().default_metrics);
        let names: BTreeSet<String> = [
            "train/loss",
            "eval/a/loss",
            "eval/a/bpb",
            "optim/learning_rate",
            "moe/dropped_assignments",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            default_metrics(&names),
            ["train/loss", "eval/a/loss", "optim/learning_rate"]
        );
    }

    #[test]
    fn best_per_column_follows_each_metrics_direction() {
        let a: BTreeMap<String, f64> = [
            ("train/loss".to_string(), 2.0),
            ("throughput/tokens_per_second".to_string(), 100.0),
            ("optim/learning_rate".to_string(), 0.1),
        ]
        .into_iter()
        .collect();
        let b: BTreeMap<String, f64> = [
            ("train/loss".to_string(), 1.5),
            ("throughput/tokens_per_second".to_string(), 50.0),
            ("optim/learning_rate".to_string(), 0.2),
            ("eval/x/bpb".to_string(), f64::NAN),
        ]
        .into_iter()
        .collect();
        let best = best_per_column(&[&a, &b]);
        assert_eq!(best["train/loss"], 1.5);
        assert_eq!(best["throughput/tokens_per_second"], 100.0);
        assert!(!best.contains_key("optim/learning_rate"), "not ranked");
        assert!(!best.contains_key("eval/x/bpb"), "NaN is never best");
    }

    #[test]
    fn flatten_uses_dotted_paths() {
        let v = serde_json::json!({"model": {"moe": {"n_experts": 4}}, "tags": ["a"], "x": "s"});
        let mut out = BTreeMap::new();
        flatten(&v, "", &mut out);
        assert_eq!(out["model.moe.n_experts"], "4");
        assert_eq!(out["tags[0]"], "a");
        assert_eq!(out["x"], "s");
    }
}
