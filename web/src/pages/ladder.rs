//! Ladder: each rung's final loss against training compute (log-log), the fitted law
//! `L(C) = E + A * C^-alpha` with its parameters and uncertainty as registered in a
//! `scaling_law` forecast entry's `details`, the pre-registered forecast for the next rung, and
//! that rung's curve as it arrives (its metric against compute spent so far).
//!
//! Rungs are the runs of experiments tagged `ladder` and of experiments a `scaling_law`
//! forecast is about; compute is the spec's training FLOPs scaled by the steps completed. The
//! law's parameters are read from `details` as `E`, `A`, `alpha` (any case, at the top level or
//! under `params`); every other detail is listed as given. Nothing is fitted here.

use std::collections::BTreeSet;

use axum::extract::State;
use maud::{Markup, PreEscaped, html};
use serde_json::Value;

use super::{Nav, experiment_href, frame, num};
use crate::WebState;
use crate::catalog::{CatalogData, ForecastRow};
use crate::chart::{self, Axes, Line};
use crate::error::WebError;
use crate::pages::compare::flatten;
use crate::series;
use glassbox_schemas::record::{ForecastOutcome, ForecastVerdict};

/// One rung's result.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct Rung {
    /// Run.
    pub run: String,
    /// Experiment.
    pub experiment: Option<String>,
    /// Training FLOPs spent.
    pub compute: f64,
    /// Final value of the ladder metric.
    pub value: f64,
}

/// A forecast against the outcome of its target.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct Settled {
    /// The newest finished run of the forecast's spec, if any.
    pub run: Option<String>,
    /// Its final value of the metric.
    pub actual: Option<f64>,
    /// `actual - predicted`.
    pub error: Option<f64>,
    /// `hit`, `miss` or `pending`.
    #[schema(value_type = String, example = "hit")]
    pub verdict: ForecastVerdict,
}

impl Settled {
    /// `f` against the newest finished run of its spec in `cat`.
    pub fn of(cat: &CatalogData, f: &ForecastRow) -> Self {
        let run = cat
            .runs
            .values()
            .filter(|r| r.spec_hash == f.spec_hash && r.result_entry.is_some())
            .max_by_key(|r| r.result_entry);
        match run {
            None => Settled {
                run: None,
                actual: None,
                error: None,
                verdict: ForecastVerdict::Pending,
            },
            Some(r) => {
                let o = ForecastOutcome::settle(
                    &f.metric,
                    f.value,
                    f.tolerance,
                    r.final_metrics.get(&f.metric).copied(),
                );
                Settled {
                    run: Some(r.id.clone()),
                    actual: o.actual,
                    error: o.error(),
                    verdict: o.verdict(),
                }
            }
        }
    }
}

/// The fitted law's parameters.
#[derive(Debug, Clone, Copy, serde::Serialize, utoipa::ToSchema)]
pub struct Law {
    /// Irreducible loss.
    pub e: f64,
    /// Scale.
    pub a: f64,
    /// Exponent.
    pub alpha: f64,
}

impl Law {
    /// `E + A * C^-alpha`.
    pub fn at(&self, c: f64) -> f64 {
        self.e + self.a * c.powf(-self.alpha)
    }
}

/// One ladder: rungs and forecasts of one metric.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct Ladder {
    /// The metric fitted and forecast.
    pub metric: String,
    /// Finished rungs, by compute.
    pub rungs: Vec<Rung>,
    /// Forecasts of this metric.
    pub forecasts: Vec<ForecastRow>,
    /// Compute of each forecast's target, when its spec is known (same order).
    pub targets: Vec<Option<f64>>,
    /// What became of each forecast (same order): the newest finished run of its spec.
    pub outcomes: Vec<Settled>,
    /// The law of the latest scaling-law forecast that states one.
    pub law: Option<Law>,
}

fn param(details: &Value, name: &str) -> Option<f64> {
    let find = |o: &serde_json::Map<String, Value>| {
        o.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| v.as_f64())
    };
    let o = details.as_object()?;
    find(o).or_else(|| o.get("params").and_then(|p| p.as_object()).and_then(find))
}

/// The law in a forecast's details, if it states E, A and alpha.
pub fn law_of(details: &Value) -> Option<Law> {
    Some(Law {
        e: param(details, "e")?,
        a: param(details, "a")?,
        alpha: param(details, "alpha")?,
    })
}

/// Every ladder the catalog knows.
pub fn ladders(cat: &CatalogData) -> Vec<Ladder> {
    let law_forecasts: Vec<&ForecastRow> = cat
        .forecasts
        .values()
        .filter(|f| f.method == "scaling_law")
        .collect();
    let tagged = |x: &str| {
        cat.experiments
            .get(x)
            .is_some_and(|e| e.tags().iter().any(|t| t == "ladder"))
    };
    let mut metrics: BTreeSet<String> = law_forecasts.iter().map(|f| f.metric.clone()).collect();
    if metrics.is_empty() && cat.experiments.keys().any(|x| tagged(x)) {
        metrics.insert(glassbox_schemas::metrics::TRAIN_LOSS.into());
    }
    let target_specs: BTreeSet<&str> = law_forecasts.iter().map(|f| f.spec_hash.as_str()).collect();
    let compute_of_spec = |h: &str| {
        cat.experiments
            .values()
            .find(|e| e.spec_hash.as_deref() == Some(h))
            .and_then(|e| e.spec.as_ref())
            .map(|s| s.train_flops)
    };
    metrics
        .into_iter()
        .map(|metric| {
            let mut rungs: Vec<Rung> = cat
                .runs
                .values()
                .filter(|r| r.result_entry.is_some())
                .filter(|r| {
                    r.experiment.as_deref().is_some_and(tagged)
                        || target_specs.contains(r.spec_hash.as_str())
                })
                .filter_map(|r| {
                    let value = *r.final_metrics.get(&metric)?;
                    let exp = cat.experiments.get(r.experiment.as_deref()?)?;
                    let spec = exp.spec.as_ref()?;
                    let done = r.steps.unwrap_or(spec.steps) as f64 / spec.steps.max(1) as f64;
                    Some(Rung {
                        run: r.id.clone(),
                        experiment: r.experiment.clone(),
                        compute: spec.train_flops * done,
                        value,
                    })
                })
                .collect();
            rungs.sort_by(|a, b| a.compute.total_cmp(&b.compute));
            let forecasts: Vec<ForecastRow> = cat
                .forecasts
                .values()
                .filter(|f| f.metric == metric)
                .cloned()
                .collect();
            let targets = forecasts
                .iter()
                .map(|f| compute_of_spec(&f.spec_hash))
                .collect();
            let outcomes = forecasts.iter().map(|f| Settled::of(cat, f)).collect();
            let law = forecasts
                .iter()
                .rev()
                .filter(|f| f.method == "scaling_law")
                .find_map(|f| law_of(&f.details));
            Ladder {
                metric,
                rungs,
                forecasts,
                targets,
                outcomes,
                law,
            }
        })
        .collect()
}

fn flat_details(details: &Value) -> std::collections::BTreeMap<String, String> {
    let mut flat = std::collections::BTreeMap::new();
    flatten(details, "", &mut flat);
    flat
}

/// `GET /ladder`.
pub async fn page(State(st): State<WebState>) -> Result<Markup, WebError> {
    let (all, arriving) = {
        let cat = st.catalog.read(&st.index, st.blobs.as_ref()).await?;
        let all = ladders(&cat);
        // Target runs still training: their curve is drawn against compute so far.
        let mut arriving = Vec::new();
        for l in &all {
            for f in &l.forecasts {
                for r in cat
                    .runs
                    .values()
                    .filter(|r| r.spec_hash == f.spec_hash && r.status.is_running())
                {
                    let per_step = r
                        .experiment
                        .as_ref()
                        .and_then(|x| cat.experiments.get(x))
                        .and_then(|e| e.spec.as_ref())
                        .map(|s| s.train_flops / s.steps.max(1) as f64);
                    if let Some(p) = per_step {
                        arriving.push((l.metric.clone(), r.id.clone(), p));
                    }
                }
            }
        }
        (all, arriving)
    };
    let mut charts = Vec::new();
    for l in &all {
        let mut lines = vec![Line {
            label: "rungs (final)".into(),
            points: l.rungs.iter().map(|r| (r.compute, r.value)).collect(),
            markers: true,
        }];
        let fc_points: Vec<(f64, f64)> = l
            .forecasts
            .iter()
            .zip(&l.targets)
            .filter_map(|(f, t)| t.map(|c| (c, f.value)))
            .collect();
        if let Some(law) = l.law {
            let cs: Vec<f64> = l
                .rungs
                .iter()
                .map(|r| r.compute)
                .chain(fc_points.iter().map(|p| p.0))
                .filter(|c| *c > 0.0)
                .collect();
            if let (Some(lo), Some(hi)) = (
                cs.iter().copied().reduce(f64::min),
                cs.iter().copied().reduce(f64::max),
            ) {
                let (lo, hi) = (lo.log10() - 0.2, hi.log10() + 0.2);
                lines.push(Line {
                    label: format!("L(C) = {:.3} + {:.3e}·C^-{:.3}", law.e, law.a, law.alpha),
                    points: (0..=60)
                        .map(|i| 10f64.powf(lo + (hi - lo) * i as f64 / 60.0))
                        .map(|c| (c, law.at(c)))
                        .collect(),
                    markers: false,
                });
            }
        }
        if !fc_points.is_empty() {
            lines.push(Line {
                label: "forecast".into(),
                points: fc_points,
                markers: true,
            });
        }
        for (metric, run, per_step) in &arriving {
            if metric != &l.metric {
                continue;
            }
            let pts = series::one_series(&st.index, &st.live, run, metric, 0, u64::MAX).await?;
            lines.push(Line {
                label: format!("{run} (arriving)"),
                points: series::downsample(&pts, 500)
                    .into_iter()
                    .filter(|(s, _)| *s > 0)
                    .map(|(s, v)| (s as f64 * per_step, v))
                    .collect(),
                markers: false,
            });
        }
        let title = format!("{} against training compute", l.metric);
        let svg = chart::line_chart(
            &title,
            &lines,
            &Axes {
                x_desc: "FLOPs".into(),
                y_desc: l.metric.clone(),
                log_x: true,
                log_y: true,
                x_range: None,
                marks: Vec::new(),
            },
        );
        charts.push(points_figure(&title, &l.metric, &lines, &svg));
    }
    let body = html! {
        h1 { "Scaling ladder" }
        p.lead { "Each rung's loss against the compute it used, the fitted law L(C) = E + A·C" sup { "−α" } ", and the forecast registered for the next rung before it ran." }
        @if all.is_empty() { p.empty { "No ladder yet: no scaling-law forecast and no experiment tagged " code { "ladder" } "." } }
        @for (l, svg) in all.iter().zip(&charts) {
            section.ladder {
                h2 { code { (l.metric) } }
                (svg)
                @if let Some(law) = l.law {
                    p { "Fitted: E = " (num(Some(law.e))) ", A = " (num(Some(law.a))) ", α = " (num(Some(law.alpha))) }
                }
                h3 { "Forecasts" }
                table.list.forecasts {
                    thead { tr { th { "Entry" } th { "Experiment" } th { "Method" } th { "Predicted" } th { "Target compute" } th { "Actual" } th { "Error" } th { "Verdict" } th { "Details" } } }
                    tbody { @for ((f, t), o) in l.forecasts.iter().zip(&l.targets).zip(&l.outcomes) { tr {
                        td.n { a href={ "/api/v1/entries/" (f.entry) } { (f.entry) } }
                        td { @if let Some(x) = &f.experiment { a href=(experiment_href(x)) { (x) } } }
                        td { (f.method) }
                        td.n { (num(Some(f.value))) " ± " (num(Some(f.tolerance))) }
                        td.n { (num(*t)) }
                        td.n { @if let Some(r) = &o.run { a href={ "/runs/" (super::encode_path(r)) } title=(r) { (num(o.actual)) } } }
                        td.n { @if let Some(e) = o.error { (format!("{e:+.4}")) } }
                        td { (super::verdict_badge(o.verdict)) }
                        td { @for (k, v) in &flat_details(&f.details) { code { (k) } "=" (v) " " } }
                    } } }
                }
                h3 { "Rungs" }
                table.list.rungs {
                    thead { tr { th { "Run" } th { "Experiment" } th { "Compute (FLOPs)" } th { (l.metric) } } }
                    tbody { @for r in &l.rungs { tr {
                        td { a href={ "/runs/" (super::encode_path(&r.run)) } { (r.run) } }
                        td { @if let Some(x) = &r.experiment { a href=(experiment_href(x)) { (x) } } }
                        td.n { (num(Some(r.compute))) }
                        td.n { (num(Some(r.value))) }
                    } } }
                }
            }
        }
    };
    Ok(frame("Ladder", Nav::Ladder, true, body))
}

/// A log-log chart whose points are in the page (`data-points`): the chart script draws it with
/// uPlot (zoom by dragging, double-click to reset, values under the cursor) over the SVG.
fn points_figure(title: &str, unit: &str, lines: &[Line], svg: &str) -> Markup {
    let data: Vec<Value> = lines
        .iter()
        .map(|l| {
            serde_json::json!({
                "label": l.label,
                "markers": l.markers,
                "points": l.points.iter().filter(|p| p.0.is_finite() && p.1.is_finite()).map(|p| [p.0, p.1]).collect::<Vec<_>>(),
            })
        })
        .collect();
    html! {
        figure.chart data-title=(title) data-unit=(unit) data-x="FLOPs" data-log="1"
            data-points=(Value::Array(data).to_string()) { (PreEscaped(svg)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn law_parameters_are_found_in_any_case_or_under_params() {
        let d = serde_json::json!({"E": 1.5, "A": 20.0, "alpha": 0.3, "alpha_stderr": 0.02});
        let l = law_of(&d).unwrap();
        assert_eq!((l.e, l.a, l.alpha), (1.5, 20.0, 0.3));
        let d = serde_json::json!({"params": {"e": 1.0, "a": 2.0, "Alpha": 0.5}});
        assert!((law_of(&d).unwrap().at(4.0) - 2.0).abs() < 1e-12);
        assert!(law_of(&serde_json::json!({"E": 1.0})).is_none());
    }
}
