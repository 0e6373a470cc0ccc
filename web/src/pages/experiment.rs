//! One experiment: hypothesis and forecast against outcome, its runs, the charts of the
//! selected run, the spec (pretty TOML) with its hash, the timeline of its ledger entries with
//! links to their inclusion proofs, and its artifacts. Also the Live page, whose charts the
//! live script refreshes as Server-Sent Events arrive, and the chart panels both share.
//!
//! Charts are grouped into panels by metric name (loss, learning rate, norms, throughput, MFU,
//! router telemetry) with one x range per run, so a spike in one panel lines up with the
//! others step for step. Expert load (one series per expert) is a heatmap per layer.
//!
//! The experiment page and the live chart block are kept in the [`crate::render_cache`]: an
//! entry is sent again while the run's live version is the same and the last entry about the
//! experiment or its runs (the catalog's `touched`) is the one it was drawn after ([`fresh`]).
//! A finished experiment's page in the default view is also kept on disk
//! ([`crate::page_cache`]), so it is drawn once per change, not once per eviction. A page that
//! could not show a blob (not stored here yet) is not kept.

use glassbox_ledger::index::queries::EntryFilter;
use glassbox_schemas::RunPhase;
use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{Html, IntoResponse, Response};
use glassbox_schemas::metrics as m;
use maud::{Markup, PreEscaped, html};

use super::{
    Nav, encode_path, experiment_href, frame, num, query, safe_link, short_hash, status_badge,
};
use crate::WebState;
use crate::catalog::{ExperimentRow, ForecastRow, RunRow, parse_spec_text};
use crate::chart::{self, Axes, Line};
use crate::error::WebError;
use crate::pages::controls::{self, LineRef, View, ViewQuery, line_figure};
use crate::render_cache::Stamp;
use crate::series::{self, RunSeries};

/// Runs an experiment page overlays at most (the newest).
const MAX_OVERLAID_RUNS: usize = 8;
/// Columns of an expert-load heatmap at most.
const HEATMAP_COLUMNS: usize = 150;
/// Largest spec blob shown (the schema's own limit on a spec).
pub(crate) const MAX_SPEC_BYTES: u64 = glassbox_schemas::validate::MAX_SPEC_BYTES as u64;

/// A chart panel: a title, the y unit, and which metric names it draws.
struct Panel {
    title: &'static str,
    unit: &'static str,
    pick: fn(&str) -> bool,
}

fn is_layer_metric(n: &str, metric: &str) -> bool {
    n.strip_prefix("train/router/layer_")
        .and_then(|r| r.split_once('/'))
        .is_some_and(|(l, rest)| l.parse::<u32>().is_ok() && rest == metric)
}

const PANELS: &[Panel] = &[
    Panel {
        title: "Loss (train and eval per domain)",
        unit: "nats/token",
        pick: |n| {
            n == m::TRAIN_LOSS
                || n == m::TRAIN_CROSS_ENTROPY
                || (n.starts_with("eval/") && n.ends_with("/loss"))
        },
    },
    Panel {
        title: "Eval bits per byte",
        unit: "bits/byte",
        pick: |n| n.starts_with("eval/") && n.ends_with("/bpb"),
    },
    Panel {
        title: "Learning rate",
        unit: "lr",
        pick: |n| n == m::LEARNING_RATE,
    },
    Panel {
        title: "Gradient norm",
        unit: "L2 norm",
        pick: |n| n == m::GRAD_NORM_TOTAL,
    },
    Panel {
        title: "Parameter norm",
        unit: "L2 norm",
        pick: |n| n == m::PARAMS_NORM_TOTAL,
    },
    Panel {
        title: "Throughput",
        unit: "tokens/s",
        pick: |n| n == m::TOKENS_PER_SECOND,
    },
    Panel {
        title: "Model FLOPs utilisation",
        unit: "MFU",
        pick: |n| n == m::MFU,
    },
    Panel {
        title: "Router: routing entropy",
        unit: "nats",
        pick: |n| n == m::ROUTING_ENTROPY_MEAN,
    },
    Panel {
        title: "Router: balancing and z losses",
        unit: "loss",
        pick: |n| n == m::LOAD_BALANCING_LOSS || n == m::ROUTER_Z_LOSS || n == m::TRAIN_Z_LOSS,
    },
    Panel {
        title: "Router: bias norm per layer",
        unit: "L2 norm",
        pick: |n| is_layer_metric(n, "bias_norm"),
    },
    Panel {
        title: "MoE: dropped assignments",
        unit: "count",
        pick: |n| n == m::DROPPED_ASSIGNMENTS,
    },
    Panel {
        title: "Data: tokens trained per domain",
        unit: "tokens",
        pick: |n| n.starts_with("data/") && n.ends_with("/tokens"),
    },
];

/// The hardware telemetry's panels (`hw/...`), on the run page's Hardware section.
const HARDWARE_PANELS: &[Panel] = &[
    Panel {
        title: "CPU: utilisation of the run's cores",
        unit: "percent",
        pick: |n| n == m::hw::CPU_UTILIZATION,
    },
    Panel {
        title: "Memory: the training process (resident, peak)",
        unit: "bytes",
        pick: |n| n == m::hw::PROCESS_RSS_BYTES || n == m::hw::PROCESS_PEAK_RSS_BYTES,
    },
    Panel {
        title: "Memory: available on the machine",
        unit: "bytes",
        pick: |n| n == m::hw::MACHINE_MEMORY_AVAILABLE_BYTES,
    },
    Panel {
        title: "CPU time of the process",
        unit: "seconds",
        pick: |n| n == m::hw::PROCESS_CPU_SECONDS,
    },
    Panel {
        title: "GPU: utilisation",
        unit: "percent",
        pick: |n| n == m::hw::GPU_UTILIZATION,
    },
    Panel {
        title: "GPU: memory",
        unit: "bytes",
        pick: |n| n == m::hw::GPU_MEMORY_USED_BYTES || n == m::hw::GPU_MEMORY_PEAK_BYTES,
    },
    Panel {
        title: "GPU: power",
        unit: "watts",
        pick: |n| n == m::hw::GPU_POWER_WATTS,
    },
    Panel {
        title: "GPU: temperature",
        unit: "°C",
        pick: |n| n == m::hw::GPU_TEMPERATURE_C,
    },
    Panel {
        title: "GPU: SM clock",
        unit: "MHz",
        pick: |n| n == m::hw::GPU_SM_CLOCK_MHZ,
    },
];

/// One line of a panel: its run, metric, legend label and points.
type PanelLine<'a> = (&'a str, &'a String, String, &'a Vec<(u64, f64)>);

/// Which panels a chart block draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PanelSet {
    /// The training panels and the expert-load heatmaps.
    Training,
    /// The hardware telemetry's panels.
    Hardware,
    /// Both.
    All,
}

/// Splits `train/router/layer_<l>/expert_load/<e>` into (l, e).
fn expert_load_component(n: &str) -> Option<(u32, u32)> {
    let rest = n.strip_prefix("train/router/layer_")?;
    let (l, rest) = rest.split_once('/')?;
    let e = rest.strip_prefix("expert_load/")?;
    Some((l.parse().ok()?, e.parse().ok()?))
}

/// Averages each expert's load into at most [`HEATMAP_COLUMNS`] step bins.
fn heatmap_columns(experts: &BTreeMap<u32, &Vec<(u64, f64)>>) -> Vec<(f64, f64, Vec<f64>)> {
    let (mut lo, mut hi) = (u64::MAX, 0u64);
    for pts in experts.values() {
        if let (Some(a), Some(b)) = (pts.first(), pts.last()) {
            lo = lo.min(a.0);
            hi = hi.max(b.0);
        }
    }
    if lo > hi {
        return Vec::new();
    }
    let n_experts = experts.keys().max().map(|k| *k as usize + 1).unwrap_or(0);
    let span = (hi - lo + 1) as f64;
    let cols = (HEATMAP_COLUMNS as u64).min(hi - lo + 1) as usize;
    let width = span / cols as f64;
    let mut sums = vec![vec![(0.0f64, 0u32); n_experts]; cols];
    for (&e, pts) in experts {
        for &(s, v) in pts.iter() {
            if !v.is_finite() {
                continue;
            }
            let c = (((s - lo) as f64 / width) as usize).min(cols - 1);
            let cell = &mut sums[c][e as usize];
            cell.0 += v;
            cell.1 += 1;
        }
    }
    sums.into_iter()
        .enumerate()
        .filter(|(_, col)| col.iter().any(|c| c.1 > 0))
        .map(|(c, col)| {
            let a = lo as f64 + c as f64 * width;
            let vals = col
                .into_iter()
                .map(|(s, k)| if k > 0 { s / k as f64 } else { f64::NAN })
                .collect();
            (a, a + width, vals)
        })
        .collect()
}

/// The chart panels of `run`'s series (already restricted to the view's step range): a line
/// chart per panel (server-drawn, made interactive by the chart script) with the run's notes and
/// anomalies marked on it, and an expert-load heatmap per layer (server-drawn, redrawn for the
/// zoomed range by the script).
pub fn charts(
    run: &str,
    all: &RunSeries,
    view: &View,
    flops_per_token: Option<f64>,
    marks: &[chart::Mark],
) -> Markup {
    charts_of(PanelSet::All, run, all, view, flops_per_token, marks)
}

/// [`charts`] of one set of panels.
pub fn charts_of(
    set: PanelSet,
    run: &str,
    all: &RunSeries,
    view: &View,
    flops_per_token: Option<f64>,
    marks: &[chart::Mark],
) -> Markup {
    overlaid_charts(set, &[(run, all)], view, flops_per_token, marks)
}

/// The panels of several runs at once, each panel overlaying every run's lines (labelled with
/// the run when there is more than one); the heatmaps and marks are the first run's.
pub fn overlaid_charts(
    set: PanelSet,
    runs: &[(&str, &RunSeries)],
    view: &View,
    flops_per_token: Option<f64>,
    marks: &[chart::Mark],
) -> Markup {
    let (mut lo, mut hi) = (u64::MAX, 0u64);
    for (_, all) in runs {
        for pts in all.values() {
            if let (Some(a), Some(b)) = (pts.first(), pts.last()) {
                lo = lo.min(a.0);
                hi = hi.max(b.0);
            }
        }
    }
    let x_range = (lo <= hi).then(|| (lo as f64, hi.max(lo.saturating_add(1)) as f64));
    let panels: Vec<&Panel> = match set {
        PanelSet::Training => PANELS.iter().collect(),
        PanelSet::Hardware => HARDWARE_PANELS.iter().collect(),
        PanelSet::All => PANELS.iter().chain(HARDWARE_PANELS).collect(),
    };
    let several = runs.len() > 1;
    let mut out = Vec::new();
    for p in panels {
        let mut names: Vec<PanelLine> = Vec::new();
        for (run, all) in runs {
            for (n, pts) in all.iter().filter(|(n, _)| (p.pick)(n)) {
                let label = if several {
                    format!("{run} {n}")
                } else {
                    n.clone()
                };
                names.push((run, n, label, pts));
            }
        }
        if names.is_empty() {
            continue;
        }
        let lines: Vec<Line> = names
            .iter()
            .map(|(_, _, label, pts)| Line {
                label: label.clone(),
                points: series::downsample(pts, chart::SVG_POINTS_PER_LINE)
                    .into_iter()
                    .map(|(s, v)| (s as f64, v))
                    .collect(),
                markers: pts.len() == 1,
            })
            .collect();
        let svg = chart::line_chart(
            p.title,
            &lines,
            &Axes {
                x_desc: "step".into(),
                y_desc: p.unit.into(),
                x_range,
                log_y: view.log_y,
                marks: marks.to_vec(),
                ..Axes::default()
            },
        );
        let refs: Vec<LineRef> = names
            .iter()
            .map(|(run, n, label, _)| LineRef {
                run,
                name: n,
                label,
                flops_per_token,
            })
            .collect();
        out.push(line_figure(p.title, p.unit, &refs, marks, &svg));
    }
    if set != PanelSet::Hardware {
        if let Some((run, all)) = runs.first() {
            type Experts<'a> = BTreeMap<u32, &'a Vec<(u64, f64)>>;
            let mut layers: BTreeMap<u32, Experts> = BTreeMap::new();
            for (n, pts) in all.iter() {
                if let Some((l, e)) = expert_load_component(n) {
                    layers.entry(l).or_default().insert(e, pts);
                }
            }
            let scale = shared_scale(layers.values().flat_map(|e| e.values().copied()));
            for (l, experts) in &layers {
                out.push(heatmap_figure(run, *l, experts, scale));
            }
        }
    }
    html! {
        @if out.is_empty() {
            p.empty { "No metric points recorded for this run yet." }
        }
        @for figure in &out { (figure) }
    }
}

/// The curves a page of `run` draws. A finished run seen over all its steps is drawn from its
/// overviews (each curve at most [`glassbox_ledger::index::OVERVIEW_POINTS`] points, chosen
/// once when the run was indexed), except a layer's expert loads whose overview is not the
/// whole curve: the heatmap averages every point, so those are read whole. Anything else (a
/// step range, a running run, a run whose overviews are not drawn yet) reads the points in the
/// view's range.
pub(crate) async fn page_series(
    st: &WebState,
    run: &str,
    finished: bool,
    view: &View,
) -> Result<RunSeries, WebError> {
    if finished && view.from.is_none() && view.to.is_none() {
        let overviews = st.index.overviews(run).await?;
        if !overviews.is_empty() {
            let mut read_whole = std::collections::BTreeSet::new();
            let mut all = RunSeries::new();
            for (name, o) in overviews {
                if let Some((layer, _)) = expert_load_component(&name)
                    && !o.is_whole()
                {
                    read_whole.insert(layer);
                }
                all.insert(name, o.points);
            }
            for layer in read_whole {
                let prefix = format!("train/router/layer_{layer}/expert_load/");
                all.extend(
                    series::prefixed_series(&st.index, &st.live, run, &prefix, 0, u64::MAX).await?,
                );
            }
            return Ok(all);
        }
    }
    series::run_series(
        &st.index,
        &st.live,
        run,
        view.from.unwrap_or(0),
        view.to.unwrap_or(u64::MAX),
    )
    .await
}

/// One layer's expert-load heatmap, in the figure the chart script redraws on zoom.
fn heatmap_figure(
    run: &str,
    layer: u32,
    experts: &BTreeMap<u32, &Vec<(u64, f64)>>,
    scale: (f64, f64),
) -> Markup {
    let title = format!("Router: expert load, layer {layer}");
    let svg = chart::heatmap(
        &title,
        "expert",
        &format!("layer {layer}, "),
        "share of assignments",
        &heatmap_columns(experts),
        Some(scale),
    );
    let query = super::query(&[("lo", &scale.0.to_string()), ("hi", &scale.1.to_string())]);
    html! {
        figure.chart.heatmap data-title=(title)
            data-heatmap={ "/runs/" (encode_path(run)) "/heatmap/" (layer) } data-scale=(query) { (PreEscaped(svg)) }
    }
}

/// One colour scale for every layer's heatmap: from 0 to the largest share any expert of any
/// layer had (so the layers can be compared at a glance).
fn shared_scale<'a>(layers: impl Iterator<Item = &'a Vec<(u64, f64)>>) -> (f64, f64) {
    let hi = layers
        .flat_map(|pts| pts.iter().map(|p| p.1))
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    (0.0, if hi > 0.0 { hi } else { 1.0 })
}

/// `GET /runs/{run}/heatmap/{layer}?from=&to=`: one layer's expert-load heatmap over a step
/// range, as SVG (what the chart script swaps in when the page is zoomed).
pub async fn heatmap_svg(
    State(st): State<WebState>,
    Path((run, layer)): Path<(String, u32)>,
    Query(q): Query<StepRange>,
) -> Result<Response, WebError> {
    let (from, to) = (q.from.unwrap_or(0), q.to.unwrap_or(u64::MAX));
    if from > to {
        return Err(WebError::BadRequest(format!(
            "from={from} is after to={to}"
        )));
    }
    let prefix = format!("train/router/layer_{layer}/expert_load/");
    let all = series::prefixed_series(&st.index, &st.live, &run, &prefix, from, to).await?;
    let experts: BTreeMap<u32, &Vec<(u64, f64)>> = all
        .iter()
        .filter_map(|(n, pts)| Some((expert_load_component(n)?.1, pts)))
        .collect();
    let title = format!("Router: expert load, layer {layer}");
    if experts.is_empty() {
        // A 404 that is still a picture: the chart script shows it in place of the old range.
        let shown_to = if to == u64::MAX {
            "the end".to_string()
        } else {
            to.to_string()
        };
        return Ok((
            axum::http::StatusCode::NOT_FOUND,
            [
                (header::CONTENT_TYPE, "image/svg+xml"),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            chart::placeholder(
                &title,
                &format!("no expert-load points of run {run} in steps {from} to {shown_to}"),
            ),
        )
            .into_response());
    }
    let scale = match (q.lo, q.hi) {
        (Some(lo), Some(hi)) if lo.is_finite() && hi.is_finite() && lo <= hi => Some((lo, hi)),
        (None, None) => None,
        (lo, hi) => {
            return Err(WebError::BadRequest(format!(
                "lo={lo:?}, hi={hi:?}: give both, finite, with lo <= hi (the colour scale), or neither"
            )));
        }
    };
    let svg = chart::heatmap(
        &title,
        "expert",
        &format!("layer {layer}, "),
        "share of assignments",
        &heatmap_columns(&experts),
        scale,
    );
    Ok((
        [
            (header::CONTENT_TYPE, "image/svg+xml"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        svg,
    )
        .into_response())
}

/// A step range, and the colour scale of a heatmap (`lo`, `hi`: the page's scale shared by
/// every layer; without them, the range's own).
#[derive(Debug, Default, serde::Deserialize)]
pub struct StepRange {
    /// First step.
    pub from: Option<u64>,
    /// Last step.
    pub to: Option<u64>,
    /// The colour scale's low end.
    pub lo: Option<f64>,
    /// The colour scale's high end.
    pub hi: Option<f64>,
}

/// The experiment page's query: the run shown and the chart view.
#[derive(Debug, Default, serde::Deserialize)]
pub struct RunQuery {
    /// Which run's charts to show (default: the latest).
    pub run: Option<String>,
    /// The chart view (`smooth`, `logy`, `x`, `from`, `to`).
    #[serde(flatten)]
    pub view: ViewQuery,
}

/// One timeline row.
struct TimelineRow {
    idx: u64,
    kind: String,
    run: Option<String>,
    time: String,
    refs: Vec<(String, String)>,
}

/// Entries of an experiment's timeline shown at most.
const MAX_TIMELINE_ROWS: u32 = 2000;

async fn timeline(st: &WebState, experiment: &str) -> Result<Vec<TimelineRow>, WebError> {
    let rows = st
        .index
        .select_entries(&EntryFilter {
            experiment: Some(experiment),
            limit: Some(MAX_TIMELINE_ROWS),
            ..EntryFilter::default()
        })
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let refs = serde_json::from_str::<serde_json::Value>(&r.entry)
            .ok()
            .and_then(|v| {
                v.get("refs").and_then(|r| r.as_object()).map(|o| {
                    o.iter()
                        .filter_map(|(k, v)| v.as_str().map(|h| (k.clone(), h.to_string())))
                        .collect::<Vec<_>>()
                })
            })
            .unwrap_or_default();
        out.push(TimelineRow {
            idx: r.index,
            kind: r.kind,
            run: r.run,
            time: r.time,
            refs,
        });
    }
    Ok(out)
}

/// The size of a stored blob.
async fn blob_size(st: &WebState, hash: &str) -> Option<u64> {
    st.blob_size(hash).await
}

/// The spec as people read it: the TOML blob as stored, or canonical JSON turned into TOML.
pub async fn spec_text(st: &WebState, blob: &str) -> Option<String> {
    let text = st.small_blob_text(blob, MAX_SPEC_BYTES).await?;
    if text.trim_start().starts_with('{') {
        let spec = parse_spec_text(&text)?;
        toml::to_string_pretty(&spec).ok()
    } else {
        Some(text)
    }
}

fn forecast_block(exp: &ExperimentRow, forecasts: &[ForecastRow], run: Option<&RunRow>) -> Markup {
    let spec_fc = exp.spec.as_ref().and_then(|s| s.forecast.clone());
    html! {
        section.forecast {
            h2 { "Forecast vs outcome" }
            @if spec_fc.is_none() && forecasts.is_empty() {
                p.empty { "No forecast was registered." }
            }
            dl {
                @if let Some(f) = &spec_fc {
                    dt { "Pre-registered in the spec" }
                    dd { code { (f.metric) } " = " (num(Some(f.value))) " ± " (num(Some(f.tolerance))) }
                }
                @for f in forecasts {
                    dt { "Forecast entry " a href={ "/api/v1/entries/" (f.entry) } { "#" (f.entry) } " (" (f.method) ")" }
                    dd { code { (f.metric) } " = " (num(Some(f.value))) " ± " (num(Some(f.tolerance))) }
                }
                @if let Some(fc) = run.and_then(|r| r.forecast.as_ref()) {
                    dt { "Outcome" }
                    dd {
                        code { (fc.metric) } " = " (num(fc.actual)) " "
                        (super::verdict_badge(fc.verdict))
                    }
                } @else if let Some(r) = run {
                    dt { "Outcome" }
                    dd { (status_badge(r.status.as_str())) " " @if let Some(f) = &spec_fc {
                        code { (f.metric) } " = " (num(r.final_metrics.get(&f.metric).copied()))
                    } }
                }
            }
        }
    }
}

/// One forecast's pre-registration proof for the selected run: the archived checkpoint (with
/// its cosignatures) that held the forecast entry before the run's `run_started` entry was
/// sequenced (`glassbox_ledger::precedence`), or `None` when no checkpoint came between.
struct Precedence {
    forecast: u64,
    run_started: u64,
    note: Option<String>,
}

/// The proofs for every forecast entry before the selected run's `run_started`.
async fn precedence_proofs(
    st: &WebState,
    forecasts: &[ForecastRow],
    run: Option<&RunRow>,
) -> Vec<Precedence> {
    let Some(started) = run.and_then(|r| r.started_entry) else {
        return Vec::new();
    };
    let earlier: Vec<u64> = forecasts
        .iter()
        .map(|f| f.entry)
        .filter(|&f| f < started)
        .collect();
    if earlier.is_empty() {
        return Vec::new();
    }
    let lab = st.lab.clone();
    // The archive is a file scan: off the async threads.
    tokio::task::spawn_blocking(move || {
        let archive = glassbox_ledger::archive::CheckpointArchive::in_log_dir(&lab.log_dir());
        let vkey = lab.verifier_key().ok();
        earlier
            .into_iter()
            .map(|f| Precedence {
                forecast: f,
                run_started: started,
                note: vkey.as_ref().and_then(|k| {
                    glassbox_ledger::precedence::checkpoint_between(&archive, k, f, started)
                        .ok()
                        .flatten()
                        .map(|c| String::from_utf8_lossy(&c.to_bytes()).into_owned())
                }),
            })
            .collect()
    })
    .await
    .unwrap_or_default()
}

fn precedence_block(proofs: &[Precedence]) -> Markup {
    html! {
        @if !proofs.is_empty() {
            section.precedence {
                h2 { "Pre-registration proof" }
                @for p in proofs {
                    @if let Some(note) = &p.note {
                        p { "Forecast entry " a href={ "/api/v1/entries/" (p.forecast) } { "#" (p.forecast) }
                            " was in this signed checkpoint (its witnesses' cosignature lines carry their time) before the run's "
                            code { "run_started" } " entry " a href={ "/api/v1/entries/" (p.run_started) } { "#" (p.run_started) } " was sequenced:" }
                        pre { code { (note) } }
                    } @else {
                        p.empty { "No checkpoint was published between forecast entry #" (p.forecast)
                            " and the run's run_started entry #" (p.run_started) "; the log's order still puts the forecast first." }
                    }
                    p.meta { "Check it: " code { "glassbox ledger proof precedes " (p.forecast) " " (p.run_started) } }
                }
            }
        }
    }
}

fn runs_table(exp: &ExperimentRow, runs: &[RunRow], selected: Option<&str>) -> Markup {
    html! {
        form method="get" action="/compare" {
            table.list #runs {
                thead { tr { th {} th { "Run" } th { "Status" } th { "Steps" } th { "Final loss" } th { "Backend" } th { "Started" } th { "Ended" } th {} } }
                tbody {
                    @for r in runs {
                        tr class=[(Some(r.id.as_str()) == selected).then_some("selected")] {
                            td { input type="checkbox" name="run" value=(r.id) aria-label={ "compare " (r.id) }; }
                            td { a href={ (experiment_href(&exp.id)) "?" (query(&[("run", &r.id)])) } { (r.id) } }
                            td { (status_badge(r.status.as_str())) (super::anomaly_badge(r.anomalies, &format!("{}?{}#annotations", experiment_href(&exp.id), query(&[("run", &r.id)])))) }
                            td.n { (r.steps.map(|s| s.to_string()).unwrap_or_default()) }
                            td.n { (num(r.final_metrics.get(m::TRAIN_LOSS).copied())) }
                            td { (r.backend.as_deref().unwrap_or("")) }
                            td { (r.started.as_deref().unwrap_or("")) }
                            td { (r.ended.as_deref().unwrap_or("")) }
                            td { a href={ "/live/" (encode_path(&r.id)) } { "live" } }
                        }
                    }
                }
            }
            @if runs.len() > 1 { button type="submit" { "Compare selected runs" } }
        }
    }
}

/// `GET /experiments/{*id}`.
pub async fn page(
    State(st): State<WebState>,
    Path(id): Path<String>,
    Query(q): Query<RunQuery>,
) -> Result<Html<Bytes>, WebError> {
    let (exp, runs, forecasts, status, touched, is_sweep) = {
        let cat = st.catalog.read(&st.index, st.blobs.as_ref()).await?;
        let exp = cat
            .experiments
            .get(&id)
            .cloned()
            .ok_or_else(|| WebError::not_found(format!("experiment {id:?}")))?;
        let runs: Vec<RunRow> = exp
            .runs
            .iter()
            .filter_map(|r| cat.runs.get(r).cloned())
            .collect();
        let forecasts: Vec<ForecastRow> = exp
            .forecasts
            .iter()
            .filter_map(|i| cat.forecasts.get(i).cloned())
            .collect();
        let status = exp.status(&cat);
        let touched = cat.touched(&id);
        let is_sweep = cat.sweeps.contains_key(&id);
        (exp, runs, forecasts, status, touched, is_sweep)
    };
    let view = q.view.view()?;
    let selected = match &q.run {
        Some(r) => Some(
            runs.iter()
                .find(|x| &x.id == r)
                .ok_or_else(|| WebError::not_found(format!("run {r:?} of experiment {id:?}")))?,
        ),
        None => runs.last(),
    };
    let key = format!(
        "experiment\n{id}\n{}\n{}",
        q.run.as_deref().unwrap_or(""),
        view.key()
    );
    let stamp = Stamp {
        indexed: touched,
        live: selected.and_then(|r| st.live.version(&r.id)),
    };
    // Finished experiments in the default view are kept on disk too (bounded: one file per
    // experiment and run shown).
    // (A run the live hub still holds is drawn with the hub's points: memory only.)
    let on_disk = runs.iter().all(|r| !r.status.is_running())
        && stamp.live.is_none()
        && view == View::default();
    if let Some(body) = fresh(&st, &key, stamp) {
        return Ok(Html(body));
    }
    if on_disk {
        if let Some(body) = st.pages.get(&key, touched).await {
            st.renders.count(true);
            st.renders.put(key, body.clone(), stamp);
            return Ok(Html(body));
        }
    }
    st.renders.count(false);
    let flops_per_token = exp.spec.as_ref().map(|s| s.flops_per_token);
    // With no run asked for, an experiment with several runs (reruns, reproductions) overlays
    // them, newest first; a run asked for is drawn alone.
    let overlaid: Vec<&RunRow> = match (&q.run, runs.len()) {
        (None, n) if n > 1 => runs.iter().rev().take(MAX_OVERLAID_RUNS).collect(),
        _ => selected.into_iter().collect(),
    };
    let charts_markup = match selected {
        Some(r) => {
            let mut drawn_series = Vec::with_capacity(overlaid.len());
            for o in &overlaid {
                let finished = !o.status.is_running() && st.live.version(&o.id).is_none();
                drawn_series.push((
                    o.id.as_str(),
                    page_series(&st, &o.id, finished, &view).await?,
                ));
            }
            let refs: Vec<(&str, &RunSeries)> =
                drawn_series.iter().map(|(id, s)| (*id, s)).collect();
            let marks = crate::annotations::run_marks(&st, &r.id).await?;
            let drawn = overlaid_charts(
                PanelSet::All,
                &refs,
                &view,
                flops_per_token,
                &crate::annotations::chart_marks(&marks),
            );
            Some((drawn, super::notes_table(&marks)))
        }
        None => None,
    };
    let spec = match &exp.spec_blob {
        Some(b) => spec_text(&st, b).await,
        None => None,
    };
    let precedence = precedence_proofs(&st, &forecasts, selected).await;
    let tl = timeline(&st, &id).await?;
    let mut artifacts = Vec::new();
    for row in &tl {
        for (role, hash) in &row.refs {
            artifacts.push((
                row.idx,
                row.kind.clone(),
                role.clone(),
                hash.clone(),
                blob_size(&st, hash).await,
            ));
        }
    }
    // Blobs not stored here yet may arrive later: such a page is not kept.
    let complete =
        (exp.spec_blob.is_none() || spec.is_some()) && artifacts.iter().all(|a| a.4.is_some());
    let title = exp.title.clone().unwrap_or_else(|| exp.id.clone());
    let body = html! {
        h1 { (title) " " (status_badge(&status)) }
        p.meta {
            code { (exp.id) }
            @if let Some(a) = &exp.author { " · proposed by " strong { (a) } }
            @if let Some(u) = &exp.issue_url { " · issue " (safe_link(u)) }
            @if let Some(a) = &exp.approved_by { " · approved by " (a) }
            @if let Some(r) = &exp.rejected { " · rejected: " (r) }
        }
        @if let Some(l) = &exp.sweep {
            p.meta #sweep-link {
                "Child " (l.index) " of sweep " a href=(super::sweeps::sweep_href(&l.parent)) { (l.parent) }
                ": " code { (l.values) }
            }
        }
        @if is_sweep {
            p.meta #sweep-link { "This is a sweep: " a href=(super::sweeps::sweep_href(&exp.id)) { "its children and gate" } }
        }
        @if let Some(s) = &exp.spec {
            section.hypothesis {
                h2 { "Hypothesis" }
                blockquote { (s.hypothesis) }
                @if !s.tags.is_empty() { p { @for t in &s.tags { a.tag href={ "/experiments?" (query(&[("tag", t)])) } { (t) } " " } } }
            }
        }
        (forecast_block(&exp, &forecasts, selected))
        (precedence_block(&precedence))
        section {
            h2 { "Runs" }
            @if runs.is_empty() { p.empty { "Not run yet." } } @else { (runs_table(&exp, &runs, selected.map(|r| r.id.as_str()))) }
        }
        @if let (Some(r), Some((c, notes))) = (selected, &charts_markup) {
            section #charts-section {
                h2 {
                    "Charts: "
                    @if overlaid.len() > 1 {
                        @for (i, o) in overlaid.iter().enumerate() { @if i > 0 { ", " } (o.id) } " overlaid"
                    } @else { (r.id) }
                }
                p.meta { "Hover a line for step and value. " a href={ "/runs/" (encode_path(&r.id)) } { "run page" } " · " a href={ "/live/" (encode_path(&r.id)) } { "Follow live" } " · " a href={ "/api/v1/runs/" (encode_path(&r.id)) "/metrics" } { "metrics as JSON" } " · " a href={ "/runs/" (encode_path(&r.id)) "/log" } { "log" } }
                (controls::form(&view, &[("run", r.id.as_str())]))
                div #charts data-live=[r.status.is_running().then(|| live_list(&r.id))] { (c) }
                (notes)
            }
        }
        section.spec {
            h2 { "Spec" }
            @if let Some(h) = &exp.spec_hash { p { "spec hash " code.hash { (h) } } }
            @if let Some(t) = &spec { pre { code { (t) } } } @else { p.empty { "The spec blob is not available here." } }
        }
        section {
            h2 { "Timeline" }
            table.list #timeline {
                thead { tr { th { "Entry" } th { "Kind" } th { "Time" } th { "Run" } th { "Proof" } } }
                tbody { @for row in &tl { tr {
                    td.n { a href={ "/api/v1/entries/" (row.idx) } { (row.idx) } }
                    td { (row.kind) }
                    td { (row.time) }
                    td { (row.run.as_deref().unwrap_or("")) }
                    td { a href={ "/api/v1/entries/" (row.idx) "/proof" } { "inclusion proof" } }
                } } }
            }
        }
        section {
            h2 { "Artifacts" }
            @if artifacts.is_empty() { p.empty { "No blobs referenced yet." } }
            @else {
                table.list #artifacts {
                    thead { tr { th { "Entry" } th { "Role" } th { "Hash" } th { "Size" } th {} } }
                    tbody { @for (idx, kind, role, hash, size) in &artifacts { tr {
                        td.n { (idx) " " small { (kind) } }
                        td { (role) }
                        td { (short_hash(hash)) }
                        td.n { @if let Some(s) = size { (s) " B" } @else { "not stored here" } }
                        td { @if size.is_some() { a href={ "/blobs/" (encode_path(hash)) } download { "download" } } }
                    } } }
                }
            }
        }
    };
    let page = Bytes::from(frame(&title, Nav::Experiments, true, body).into_string());
    if complete {
        if on_disk {
            st.pages.put(&key, touched, &page).await;
        }
        st.renders.put(key, page.clone(), stamp);
    }
    Ok(Html(page))
}

/// The body kept in memory under `key` if it was drawn at `now`: the same last entry about
/// what it shows (from the catalog, so no query) and the same live version. Counts only hits;
/// the caller counts a miss once it has looked everywhere.
fn fresh(st: &WebState, key: &str, now: Stamp) -> Option<Bytes> {
    let found = st
        .renders
        .get(key)
        .and_then(|(body, was)| (was == now).then_some(body));
    if found.is_some() {
        st.renders.count(true);
    }
    found
}

/// The live page's chart block; kept in the render cache like the experiment page, so a
/// thousand viewers opening it between two live points cost one drawing.
async fn live_markup(
    st: &WebState,
    run: &str,
    view: &View,
    flops_per_token: Option<f64>,
) -> Result<Bytes, WebError> {
    let key = format!("live\n{run}\n{}", view.key());
    let (indexed, finished) = {
        let cat = st.catalog.read(&st.index, st.blobs.as_ref()).await?;
        (
            cat.touched_runs.get(run).copied().unwrap_or(0),
            cat.runs.get(run).is_some_and(|r| !r.status.is_running()),
        )
    };
    let stamp = Stamp {
        indexed,
        live: st.live.version(run),
    };
    if let Some(body) = fresh(st, key.as_str(), stamp) {
        return Ok(body);
    }
    st.renders.count(false);
    let all = page_series(st, run, finished && stamp.live.is_none(), view).await?;
    let marks = crate::annotations::run_marks(st, run).await?;
    let marks = crate::annotations::chart_marks(&marks);
    let last_step = all.values().filter_map(|p| p.last().map(|x| x.0)).max();
    let markup = html! {
        p.live-status {
            "latest step " span #last-step { (last_step.map(|s| s.to_string()).unwrap_or_else(|| "–".into())) }
        }
        (charts(run, &all, view, flops_per_token, &marks))
    };
    let body = Bytes::from(markup.into_string());
    st.renders.put(key, body.clone(), stamp);
    Ok(body)
}

/// The `data-live` list of runs the chart script follows over SSE.
pub(crate) fn live_list(run: &str) -> String {
    serde_json::to_string(&[run]).unwrap_or_else(|_| "[]".into())
}

/// `GET /live/{run}`: charts that follow the run as it trains (the chart script subscribes to
/// `/api/v1/runs/{run}/live` and appends each point to its chart in place).
pub async fn live_page(
    State(st): State<WebState>,
    Path(run): Path<String>,
    Query(q): Query<ViewQuery>,
) -> Result<Markup, WebError> {
    let view = q.view()?;
    let (known, status, experiment, flops_per_token) = {
        let cat = st.catalog.read(&st.index, st.blobs.as_ref()).await?;
        match cat.runs.get(&run) {
            Some(r) => (
                true,
                r.status,
                r.experiment.clone(),
                r.experiment
                    .as_ref()
                    .and_then(|x| cat.experiments.get(x))
                    .and_then(|e| e.spec.as_ref())
                    .map(|s| s.flops_per_token),
            ),
            None => (false, RunPhase::Running, None, None),
        }
    };
    let live = st.live.recent(&run);
    if !known && live.is_none() {
        return Err(WebError::not_found(format!("run {run:?}")));
    }
    let status = live.and_then(|l| l.status).unwrap_or(status);
    let inner = live_markup(&st, &run, &view, flops_per_token).await?;
    let inner = PreEscaped(String::from_utf8_lossy(&inner).into_owned());
    let body = html! {
        h1 { "Live: " (run) " " span #run-status { (status_badge(status.as_str())) } }
        @if let Some(x) = &experiment { p.meta { "experiment " a href=(experiment_href(x)) { (x) } } }
        p.meta #live-note { "Updates arrive over Server-Sent Events; without JavaScript, reload the page." }
        (controls::form(&view, &[]))
        div #live data-live=(live_list(&run)) {
            (inner)
        }
    };
    Ok(frame(&format!("Live {run}"), Nav::Other, true, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_names_go_to_the_right_panels() {
        let panel_of = |n: &str| PANELS.iter().find(|p| (p.pick)(n)).map(|p| p.title);
        assert_eq!(panel_of("eval/markov/loss"), Some(PANELS[0].title));
        assert_eq!(
            panel_of("train/router/layer_3/bias_norm"),
            Some(PANELS[9].title)
        );
        assert_eq!(panel_of("train/router/layer_x/bias_norm"), None);
        assert_eq!(
            expert_load_component("train/router/layer_1/expert_load/7"),
            Some((1, 7))
        );
        assert_eq!(
            expert_load_component("train/router/layer_1/expert_load"),
            None
        );
    }

    #[test]
    fn heatmap_bins_average_each_expert() {
        let a: Vec<(u64, f64)> = (0..300).map(|s| (s, 0.25)).collect();
        let b: Vec<(u64, f64)> = (0..300).map(|s| (s, 0.75)).collect();
        let experts: BTreeMap<u32, &Vec<(u64, f64)>> = [(0, &a), (1, &b)].into_iter().collect();
        let cols = heatmap_columns(&experts);
        assert_eq!(cols.len(), HEATMAP_COLUMNS);
        assert!(cols.iter().all(|c| c.2 == vec![0.25, 0.75]));
    }
}
