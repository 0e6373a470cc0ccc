//! `GET /runs/{run}`: one run's own page, the summary a person looks for first. How it ended
//! (status, reason, forecast verdict), how long it took, steps, tokens and FLOPs, its final
//! train and evaluation metrics by name, the backend and why it was chosen, the machine in
//! words, the exact program and the worker of each attempt, its evaluations per suite version
//! (`run_evals`), what its model wrote at each snapshot (`crate::samples`), its snapshots, reproductions, anomalies and notes, links to its log and data pages and to the API, then its charts and a
//! Hardware section with the `hw/...` telemetry.
//!
//! Read-only like every page: the catalog for the run's row and its experiment, and the index
//! for the run's own entries (`run_started` of each attempt, snapshots, reproductions). Not
//! here: the charts themselves (`experiment::charts_of`) or the notes table (`annotations`).

use axum::extract::{Path, Query, State};
use glassbox_ledger::index::queries::EntryFilter;
use glassbox_schemas::EntryKind;
use glassbox_schemas::LedgerEntry;
use glassbox_schemas::metrics::{self as m, hw};
use glassbox_schemas::record::{EntryBody, ReproductionBody, RunStartedBody, SnapshotBody};
use maud::{Markup, html};

use super::experiment::{PanelSet, charts_of, live_list, page_series};
use super::{
    Nav, count, encode_path, experiment_href, metric_value, num, query, short_hash, status_badge,
    verdict_badge,
};
use crate::WebState;
use crate::catalog::RunRow;
use crate::error::WebError;
use crate::pages::controls::{self, ViewQuery};
use crate::pages::queue::duration;

/// Entries of these kinds about a run are read for its page (metric chunks and logs are not:
/// a long run has thousands).
const RUN_KINDS: [EntryKind; 3] = [
    EntryKind::RunStarted,
    EntryKind::Snapshot,
    EntryKind::Reproduction,
];
/// Snapshots and attempts listed at most.
const MAX_ROWS: u32 = 500;

/// One attempt at the run, from its `run_started` entry.
struct Attempt {
    entry: u64,
    time: String,
    body: RunStartedBody,
}

/// Everything the index holds about the run beyond the catalog's row.
#[derive(Default)]
struct RunEntries {
    attempts: Vec<Attempt>,
    snapshots: Vec<(u64, String, SnapshotBody, Option<String>)>,
    reproductions: Vec<(u64, String, ReproductionBody)>,
}

async fn run_entries(st: &WebState, run: &str) -> Result<RunEntries, WebError> {
    let rows = st
        .index
        .select_entries(&EntryFilter {
            run: Some(run),
            kinds: &RUN_KINDS,
            limit: Some(MAX_ROWS),
            ..EntryFilter::default()
        })
        .await?;
    let mut out = RunEntries::default();
    for r in rows {
        let (idx, time) = (r.index, r.time);
        let Ok(e) = LedgerEntry::from_bytes(r.entry.as_bytes()) else {
            continue;
        };
        let blob = e.refs.values().next().map(|h| h.to_string());
        match e.body {
            EntryBody::RunStarted(body) => out.attempts.push(Attempt {
                entry: idx,
                time,
                body,
            }),
            EntryBody::Snapshot(body) => out.snapshots.push((idx, time, body, blob)),
            EntryBody::Reproduction(body) => out.reproductions.push((idx, time, body)),
            _ => {}
        }
    }
    Ok(out)
}

/// Seconds between two RFC 3339 times.
fn seconds_between(a: Option<&str>, b: Option<&str>) -> Option<f64> {
    let parse = |s: &str| {
        time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()
    };
    let (a, b) = (parse(a?)?, parse(b?)?);
    Some((b - a).as_seconds_f64().max(0.0))
}

/// The final-metrics table of one group (`train`, `eval`, ...).
fn metrics_table(id: &str, rows: &[(&String, &f64)]) -> Markup {
    html! {
        table.list.metrics id=(id) {
            thead { tr { th { "Metric" } th { "Final value" } } }
            tbody { @for (k, v) in rows { tr {
                td { code { (k) } }
                td.n { (metric_value(k, **v)) }
            } } }
        }
    }
}

/// `GET /runs/{run}`.
pub async fn page(
    State(st): State<WebState>,
    Path(run): Path<String>,
    Query(q): Query<ViewQuery>,
) -> Result<Markup, WebError> {
    let view = q.view()?;
    let (row, title, spec_steps, flops_per_token, siblings): (
        RunRow,
        Option<String>,
        Option<u64>,
        Option<f64>,
        Vec<RunRow>,
    ) = {
        let cat = st.catalog.read(&st.index, st.blobs.as_ref()).await?;
        let row = cat
            .runs
            .get(&run)
            .cloned()
            .ok_or_else(|| WebError::not_found(format!("run {run:?}")))?;
        let exp = row.experiment.as_ref().and_then(|x| cat.experiments.get(x));
        let siblings = exp
            .map(|e| {
                e.runs
                    .iter()
                    .filter(|r| **r != run)
                    .filter_map(|r| cat.runs.get(r).cloned())
                    .collect()
            })
            .unwrap_or_default();
        (
            row,
            exp.and_then(|e| e.title.clone()),
            exp.and_then(|e| e.spec.as_ref()).map(|s| s.steps),
            exp.and_then(|e| e.spec.as_ref()).map(|s| s.flops_per_token),
            siblings,
        )
    };
    let entries = run_entries(&st, &run).await?;
    let finished = !row.status.is_running() && st.live.version(&run).is_none();
    let all: crate::series::RunSeries = page_series(&st, &run, finished, &view)
        .await?
        .into_iter()
        .filter(|(k, _)| !hw::is_hardware(k))
        .collect();
    // Hardware telemetry is read whole: a run has at most a few thousand samples of it (the
    // cost model's bound), and an overview drawn before it arrived would leave it out.
    let hardware = crate::series::prefixed_series(
        &st.index,
        &st.live,
        &run,
        "hw/",
        view.from.unwrap_or(0),
        view.to.unwrap_or(u64::MAX),
    )
    .await?;
    let marks = crate::annotations::run_marks(&st, &run).await?;
    let samples = crate::samples::run_sample_rows(&st, &run).await?;
    let evaluations = crate::evals::run::load(&st, &run, None).await?;
    let chart_marks = crate::annotations::chart_marks(&marks);
    let training_charts = charts_of(
        PanelSet::Training,
        &run,
        &all,
        &view,
        flops_per_token,
        &chart_marks,
    );
    let hardware_charts = charts_of(
        PanelSet::Hardware,
        &run,
        &hardware,
        &view,
        flops_per_token,
        &chart_marks,
    );

    let took = seconds_between(row.started.as_deref(), row.ended.as_deref());
    let tokens = row.final_metrics.get(m::TOTAL_TOKENS).copied();
    let flops = tokens.zip(flops_per_token).map(|(t, f)| t * f);
    let latest = entries.attempts.last();
    let group = |prefix: &str| -> Vec<(&String, &f64)> {
        row.final_metrics
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .collect()
    };
    let train = group("train/");
    let eval = group("eval/");
    let other: Vec<(&String, &f64)> = row
        .final_metrics
        .iter()
        .filter(|(k, _)| !k.starts_with("train/") && !k.starts_with("eval/"))
        .collect();
    let heading = format!("Run {run}");
    let body = html! {
        h1 { (run) " " (status_badge(row.status.as_str())) (super::anomaly_badge(row.anomalies, "#annotations")) }
        p.meta {
            @if let Some(x) = &row.experiment {
                "experiment " a href=(experiment_href(x)) { (x) }
                @if let Some(t) = &title { " · " (t) }
                " · "
            }
            a href={ "/runs/" (encode_path(&run)) "/log" } { "log" } " · "
            a href={ "/data/runs/" (encode_path(&run)) } { "data" } " · "
            a href={ "/live/" (encode_path(&run)) } { "live charts" } " · "
            a href={ "/api/v1/runs/" (encode_path(&run)) } { "as JSON" }
        }
        section #summary {
            h2 { "Summary" }
            dl.summary {
                dt { "Status" } dd { (status_badge(row.status.as_str())) @if let Some(r) = &row.reason { " " (r) } }
                @if let Some(fc) = &row.forecast {
                    dt { "Forecast" }
                    dd { code { (fc.metric) } " predicted " (num(Some(fc.predicted))) " ± " (num(Some(fc.tolerance))) ", got " (num(fc.actual)) " " (verdict_badge(fc.verdict)) }
                }
                dt { "Started" } dd { (row.started.as_deref().unwrap_or("–")) }
                dt { "Ended" } dd { (row.ended.as_deref().unwrap_or("not yet")) }
                dt { "Took" } dd { (duration(took)) }
                dt { "Steps" } dd { (row.steps.map(|s| count(s as f64)).unwrap_or_else(|| "–".into())) @if let Some(t) = spec_steps { " of " (count(t as f64)) } }
                dt { "Tokens" } dd { (tokens.map(count).unwrap_or_else(|| "–".into())) }
                dt { "Training FLOPs" } dd { (num(flops)) }
                dt { "Backend" } dd {
                    (row.backend.as_deref().unwrap_or("–"))
                    @if let Some(why) = latest.and_then(|a| a.body.backend_reason.as_deref()) { br; small.meta { "chosen because: " (why) } }
                }
                dt { "Hardware" } dd { (row.hardware.as_deref().unwrap_or("–")) }
                @if let Some(a) = latest {
                    dt { "Program" } dd {
                        code { (a.body.code_revision) }
                        @if let Some(b) = &a.body.build {
                            br; small.meta {
                                @if let Some(c) = &b.commit { "commit " code { (c) } }
                                @if b.dirty { " (modified tree)" }
                                " · executable " (short_hash(&b.executable_blake3.to_string()))
                            }
                        }
                    }
                    dt { "Worker" } dd { (a.body.worker.as_deref().unwrap_or("–")) @if let Some(h) = &a.body.host { " on " (h) } }
                }
                dt { "Spec" } dd { (short_hash(&row.spec_hash)) }
            }
        }
        section #final-metrics {
            h2 { "Final metrics" }
            @if row.final_metrics.is_empty() { p.empty { @if row.status.is_running() { "Running: the final values come with its result." } @else { "The run recorded no metric." } } }
            @if !train.is_empty() { h3 { "Training" } (metrics_table("final-train", &train)) }
            @if !eval.is_empty() { h3 { "Evaluation (held-out)" } (metrics_table("final-eval", &eval)) }
            @if !other.is_empty() { h3 { "Throughput, optimiser and data" } (metrics_table("final-other", &other)) }
        }
        section #charts-section {
            h2 { "Charts" }
            p.meta { "Drag across a chart to zoom; double-click to reset. Hover a red line for the anomaly it marks." }
            (controls::form(&view, &[]))
            div #charts data-live=[row.status.is_running().then(|| live_list(&run))] { (training_charts) }
        }
        (super::run_evals::section(&evaluations, &view, flops_per_token, row.status.is_running()))
        (crate::samples::section(&run, &samples, row.status.is_running()))
        section #hardware {
            h2 { "Hardware" }
            p.meta {
                (row.hardware.as_deref().unwrap_or("machine not recorded"))
                " · " (row.backend.as_deref().unwrap_or(""))
            }
            @if hardware.is_empty() {
                p.empty { "No hardware telemetry was recorded for this run (it is sampled every few seconds of training)." }
            } @else {
                div #hardware-charts.charts-grid { (hardware_charts) }
            }
        }
        section #attempts {
            h2 { "Attempts" }
            @if entries.attempts.is_empty() { p.empty { "No attempt started (the run ended before training)." } }
            @else {
                table.list {
                    thead { tr { th { "Attempt" } th { "Entry" } th { "Started" } th { "Worker" } th { "Resumed from step" } th { "Backend" } } }
                    tbody { @for a in &entries.attempts { tr {
                        td.n { (a.body.attempt.unwrap_or(1)) }
                        td.n { a href={ "/api/v1/entries/" (a.entry) } { (a.entry) } }
                        td { (a.time) }
                        td { (a.body.worker.as_deref().unwrap_or("–")) }
                        td.n { (a.body.resumed_from_step.map(|s| s.to_string()).unwrap_or_else(|| "–".into())) }
                        td { (a.body.backend) }
                    } } }
                }
            }
        }
        section #snapshots {
            h2 { "Snapshots" }
            @if entries.snapshots.is_empty() { p.empty { "No snapshot was saved." } }
            @else {
                table.list {
                    thead { tr { th { "Step" } th { "Entry" } th { "Time" } th { "Blob" } } }
                    tbody { @for (idx, time, s, blob) in &entries.snapshots { tr {
                        td.n { (s.step) }
                        td.n { a href={ "/api/v1/entries/" (idx) } { (idx) } }
                        td { (time) }
                        td { @if let Some(b) = blob { a href={ "/blobs/" (encode_path(b)) } download { (short_hash(b)) } } }
                    } } }
                }
            }
        }
        section #reproductions {
            h2 { "Reproductions" }
            @if entries.reproductions.is_empty() { p.empty { "Not reproduced yet." } }
            @else {
                table.list {
                    thead { tr { th { "Entry" } th { "Time" } th { "Outcome" } th { "Backend" } th { "Detail" } } }
                    tbody { @for (idx, time, r) in &entries.reproductions { tr {
                        td.n { a href={ "/api/v1/entries/" (idx) } { (idx) } }
                        td { (time) }
                        td { (status_badge(match r.outcome.as_str() { "reproduced" => "succeeded", "differs" => "failed", o => o })) " " (r.outcome) }
                        td { (r.backend) }
                        td { (r.detail.as_deref().unwrap_or("")) }
                    } } }
                }
            }
        }
        @if !siblings.is_empty() {
            section #other-runs {
                h2 { "Other runs of this experiment" }
                ul { @for s in &siblings {
                    li { a href={ "/runs/" (encode_path(&s.id)) } { (s.id) } " " (status_badge(s.status.as_str())) }
                } }
                @if let Some(x) = &row.experiment {
                    p.meta { a href={ "/compare?" (query(&std::iter::once(run.as_str()).chain(siblings.iter().map(|s| s.id.as_str())).map(|r| ("run", r)).collect::<Vec<_>>())) } { "Compare them" } " · " a href=(experiment_href(x)) { "their charts overlaid" } }
                }
            }
        }
        (super::notes_table(&marks))
    };
    let scripts = if row.status.is_running() {
        super::Scripts::ChartsAndSamples
    } else {
        super::Scripts::Charts
    };
    Ok(super::frame_with(&heading, Nav::Other, scripts, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_come_from_the_times() {
        assert_eq!(
            seconds_between(Some("2026-12-07T00:00:00Z"), Some("2026-12-07T00:01:30Z")),
            Some(90.0)
        );
        assert_eq!(seconds_between(None, Some("2026-12-07T00:01:30Z")), None);
    }
}
