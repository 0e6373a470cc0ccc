//! Compare: 2-8 runs overlaid on any metric, and a field-by-field diff of their specs.
//!
//! Runs are chosen by repeated `run=` query parameters (what a form of checkboxes sends) and
//! the metric by `metric=` (default `train/loss`). Specs are flattened to dotted paths
//! (`model.moe.n_experts`) so the diff lists exactly the fields that differ.

use std::collections::{BTreeMap, BTreeSet};

use axum::extract::{RawQuery, State};
use maud::{Markup, PreEscaped, html};
use serde_json::Value;

use super::{Nav, encode_path, experiment_href, frame, short_hash, status_badge};
use crate::WebState;
use crate::catalog::parse_spec_text;
use crate::chart::{self, Axes, Line};
use crate::error::WebError;
use crate::series::{self, MAX_POINTS_PER_LINE};

/// Most runs one comparison overlays.
pub const MAX_COMPARE: usize = 8;

/// The parsed query: runs (in order, without repeats) and the metric.
#[derive(Debug, Clone, PartialEq)]
pub struct CompareQuery {
    /// Runs.
    pub runs: Vec<String>,
    /// Metric.
    pub metric: String,
}

/// Parses `run=a&run=b&metric=...` (also `runs=a,b`).
pub fn parse_query(raw: Option<&str>) -> Result<CompareQuery, WebError> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw.unwrap_or(""))
        .map_err(|e| WebError::BadRequest(format!("query string: {e}")))?;
    let mut runs: Vec<String> = Vec::new();
    let mut metric = glassbox_schemas::metrics::TRAIN_LOSS.to_string();
    for (k, v) in pairs {
        match k.as_str() {
            "run" => runs.push(v),
            "runs" => runs.extend(v.split(',').map(str::to_string)),
            "metric" if !v.is_empty() => metric = v,
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
    Ok(CompareQuery { runs, metric })
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
        let cat = st.catalog.read(st.index.pool(), st.blobs.as_ref()).await?;
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
                    row.status.clone(),
                    row.spec_hash.clone(),
                    blob,
                ))
            })
            .collect::<Result<_, WebError>>()?
    };
    let mut out = Vec::new();
    for (run, experiment, status, spec_hash, blob) in picked {
        let spec = match blob.as_deref() {
            Some(b) => st
                .small_blob_text(b, super::experiment::MAX_SPEC_BYTES)
                .await
                .and_then(|t| parse_spec_text(&t))
                .and_then(|s| serde_json::to_value(s).ok())
                .map(|v| {
                    let mut flat = BTreeMap::new();
                    flatten(&v, "", &mut flat);
                    flat
                }),
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

/// `GET /compare?run=a&run=b[&metric=name]`.
pub async fn page(State(st): State<WebState>, RawQuery(raw): RawQuery) -> Result<Markup, WebError> {
    let q = parse_query(raw.as_deref())?;
    let runs = load(&st, &q.runs).await?;
    let mut lines = Vec::new();
    let mut names = BTreeSet::new();
    for r in &runs {
        names.extend(series::metric_names(st.index.pool(), &st.live, &r.run).await?);
        let pts = series::one_series(&st.index, &st.live, &r.run, &q.metric, 0, u64::MAX).await?;
        lines.push(Line {
            label: r.run.clone(),
            points: series::downsample(&pts, MAX_POINTS_PER_LINE)
                .into_iter()
                .map(|(s, v)| (s as f64, v))
                .collect(),
            markers: pts.len() == 1,
        });
    }
    // Per-expert components would flood the menu; the heatmaps show them.
    let names: Vec<String> = names
        .into_iter()
        .filter(|n| !n.contains("/expert_load/"))
        .collect();
    let svg = chart::line_chart(
        &q.metric,
        &lines,
        &Axes {
            x_desc: "step".into(),
            y_desc: q.metric.clone(),
            ..Axes::default()
        },
    );
    let keys: BTreeSet<&String> = runs
        .iter()
        .filter_map(|r| r.spec.as_ref())
        .flat_map(|s| s.keys())
        .collect();
    let differing: Vec<&String> = keys
        .iter()
        .copied()
        .filter(|k| {
            let vals: BTreeSet<Option<&String>> = runs
                .iter()
                .map(|r| r.spec.as_ref().and_then(|s| s.get(*k)))
                .collect();
            vals.len() > 1
        })
        .collect();
    let body = html! {
        h1 { "Compare runs" }
        @if runs.len() < 2 {
            p.lead { "Pick 2 to " (MAX_COMPARE) " runs: tick them on the " a href="/experiments" { "experiments" } " page or an experiment's run table, or add " code { "?run=A&run=B" } " to this address." }
        }
        @if !runs.is_empty() {
            form.filters method="get" action="/compare" {
                @for r in &runs { input type="hidden" name="run" value=(r.run); }
                label { "Metric " select name="metric" {
                    @for n in &names { option value=(n) selected[*n == q.metric] { (n) } }
                } }
                button type="submit" { "Show" }
            }
            figure.chart #compare-chart { (PreEscaped(svg)) }
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
            p.meta { (keys.len() - differing.len()) " other fields are identical." }
        }
    };
    Ok(frame("Compare", Nav::Compare, false, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_takes_repeated_runs_and_caps_them() {
        let q = parse_query(Some("run=a&run=b&run=a&metric=eval%2Fx%2Floss")).unwrap();
        assert_eq!(q.runs, ["a", "b"]);
        assert_eq!(q.metric, "eval/x/loss");
        assert_eq!(parse_query(Some("runs=a,b,c")).unwrap().runs.len(), 3);
        let many = (0..9)
            .map(|i| format!("run=r{i}"))
            .collect::<Vec<_>>()
            .join("&");
        assert!(parse_query(Some(&many)).is_err());
        assert_eq!(parse_query(None).unwrap().metric, "train/loss");
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
