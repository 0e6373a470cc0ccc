//! Sweeps: `/sweeps` lists every sweep with its gate's badge (a failed gate
//! is a negative result and is listed like a passed one); `/sweeps/{id}` shows one — its title,
//! author, file hash, mode and total FLOPs, the table of children (values, experiment, status,
//! final value of the sweep's metric, compute) with the best child marked, and the promotion
//! gate's verdict with its numbers once a `gate` entry records it.
//!
//! [`sweep_view`] and [`sweep_list`] read the catalog only, so the pages and `/api/v1/sweeps`
//! agree. A child's value is that of its newest succeeded run of the spec the sweep lists (what
//! the lab's gate compares). Not here: deciding the gate (the lab does, once, on the record).

use axum::extract::{Path, Query, State};
use glassbox_schemas::{RunPhase, RunStatus};
use maud::{Markup, html};

use super::{Nav, encode_path, experiment_href, frame, num, short_hash, status_badge};
use crate::WebState;
use crate::catalog::{CatalogData, GateRow, SweepRow};
use crate::error::WebError;

/// One child of a sweep, with what has happened to it.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct SweepChild {
    /// Its position, from 0.
    pub index: usize,
    /// Its experiment.
    pub experiment: String,
    /// Its values, `n_experts=4, lr=0.001`.
    pub values: String,
    /// Its spec's hash.
    pub spec_hash: String,
    /// Its FLOPs (the cost model's, from the `sweep` entry).
    pub flops: f64,
    /// The experiment's status (`not proposed` while the catalog has no proposal of it).
    pub status: String,
    /// Its latest run.
    pub run: Option<String>,
    /// The final value of the sweep's metric, from its newest succeeded run of this spec.
    pub value: Option<f64>,
    /// That run.
    pub value_run: Option<String>,
    /// The best child by the sweep's metric and direction.
    pub best: bool,
}

/// A sweep, its children and its gate.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct SweepView {
    /// The sweep as recorded (its latest `sweep` entry and gate decision).
    pub sweep: SweepRow,
    /// The metric the best child is picked by (the sweep's, else its gate's).
    pub metric: Option<String>,
    /// The children, in order.
    pub children: Vec<SweepChild>,
    /// The best child's experiment, once one reports the metric.
    pub best: Option<String>,
    /// Children whose latest run has ended.
    pub ended: usize,
    /// `passed`, `failed`, `pending` or `none`.
    pub gate: String,
}

/// One sweep as the list shows it.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct SweepSummary {
    /// The sweep's experiment.
    pub id: String,
    /// Its title.
    pub title: String,
    /// Who proposed it.
    pub author: String,
    /// Children.
    pub children: usize,
    /// Children whose latest run has ended.
    pub ended: usize,
    /// Total FLOPs of all children.
    pub total_flops: f64,
    /// The metric the best child is picked by.
    pub metric: Option<String>,
    /// The best child's value.
    pub best_value: Option<f64>,
    /// `passed`, `failed`, `pending` or `none`.
    pub gate: String,
    /// The `sweep` entry.
    pub entry: u64,
}

/// The sweeps list's filter.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SweepFilter {
    /// Only sweeps whose gate is `passed`, `failed`, `pending` (not decided yet) or `none` (no
    /// gate).
    #[param(inline, value_type = Option<GateState>)]
    pub gate: Option<String>,
}

/// [`SweepFilter::gate`] as the OpenAPI document lists it; the handler checks against
/// [`GATE_STATES`], and a test holds the two equal.
#[derive(Debug, Clone, Copy, utoipa::ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum GateState {
    Passed,
    Failed,
    Pending,
    None,
}

pub const GATE_STATES: [&str; 4] = ["passed", "failed", "pending", "none"];

/// Link to a sweep's page.
pub fn sweep_href(id: &str) -> String {
    format!("/sweeps/{}", encode_path(id))
}

/// A sweep's children as they stand, the best one marked.
fn children(cat: &CatalogData, s: &SweepRow) -> Vec<SweepChild> {
    let metric = s.ranking_metric();
    let mut out: Vec<SweepChild> = s
        .children
        .iter()
        .enumerate()
        .map(|(index, c)| {
            let exp = cat.experiments.get(&c.experiment);
            let latest = exp.and_then(|e| e.latest_run(cat));
            let valued = exp.zip(metric).and_then(|(e, m)| {
                e.runs.iter().rev().find_map(|r| {
                    let r = cat.runs.get(r)?;
                    let v = *r.final_metrics.get(m)?;
                    (r.status == RunPhase::Ended(RunStatus::Succeeded)
                        && r.spec_hash == c.spec_hash
                        && v.is_finite())
                    .then(|| (v, r.id.clone()))
                })
            });
            SweepChild {
                index,
                experiment: c.experiment.clone(),
                values: c.values.clone(),
                spec_hash: c.spec_hash.clone(),
                flops: c.flops,
                status: exp
                    .map(|e| e.status(cat))
                    .unwrap_or_else(|| "not proposed".into()),
                run: latest.map(|r| r.id.clone()),
                value: valued.as_ref().map(|v| v.0),
                value_run: valued.map(|v| v.1),
                best: false,
            }
        })
        .collect();
    let max = s.direction == "max";
    let best = out
        .iter()
        .enumerate()
        .filter_map(|(i, c)| c.value.map(|v| (i, v)))
        .reduce(|a, b| {
            let b_better = if max { b.1 > a.1 } else { b.1 < a.1 };
            if b_better { b } else { a }
        });
    if let Some((i, _)) = best {
        out[i].best = true;
    }
    out
}

fn ended(cat: &CatalogData, children: &[SweepChild]) -> usize {
    children
        .iter()
        .filter(|c| {
            c.run
                .as_ref()
                .and_then(|r| cat.runs.get(r))
                .is_some_and(|r| r.result_entry.is_some())
        })
        .count()
}

/// The sweep `id` as the page and the API show it.
pub fn sweep_view(cat: &CatalogData, id: &str) -> Result<SweepView, WebError> {
    let s = cat
        .sweeps
        .get(id)
        .ok_or_else(|| WebError::not_found(format!("sweep {id:?}")))?;
    let children = children(cat, s);
    Ok(SweepView {
        metric: s.ranking_metric().map(str::to_string),
        best: children
            .iter()
            .find(|c| c.best)
            .map(|c| c.experiment.clone()),
        ended: ended(cat, &children),
        gate: s.gate_state().into(),
        sweep: s.clone(),
        children,
    })
}

/// Every sweep, newest first, those whose gate is in `filter.gate` when given.
pub fn sweep_list(cat: &CatalogData, filter: &SweepFilter) -> Result<Vec<SweepSummary>, WebError> {
    let gate = filter.gate.as_deref().filter(|g| !g.is_empty());
    if let Some(g) = gate {
        if !GATE_STATES.contains(&g) {
            return Err(WebError::BadRequest(format!(
                "gate={g:?}: use one of {}",
                GATE_STATES.join(", ")
            )));
        }
    }
    let mut out: Vec<SweepSummary> = cat
        .sweeps
        .values()
        .filter(|s| gate.is_none_or(|g| s.gate_state() == g))
        .map(|s| {
            let children = children(cat, s);
            SweepSummary {
                id: s.id.clone(),
                title: s.title.clone(),
                author: s.author.clone(),
                children: children.len(),
                ended: ended(cat, &children),
                total_flops: s.total_flops,
                metric: s.ranking_metric().map(str::to_string),
                best_value: children.iter().find(|c| c.best).and_then(|c| c.value),
                gate: s.gate_state().into(),
                entry: s.entry,
            }
        })
        .collect();
    out.sort_by_key(|s| std::cmp::Reverse(s.entry));
    Ok(out)
}

/// The gate's badge: `gate passed`, `gate failed`, `gate pending`, or nothing without a gate.
pub fn gate_badge(state: &str) -> Markup {
    let class = match state {
        "passed" => "ok",
        "failed" => "bad",
        _ => "info",
    };
    html! {
        @if state != "none" {
            span class={ "badge gate " (class) } title="the sweep's promotion gate" { "gate " (state) }
        }
    }
}

fn better_words(direction: &str) -> &'static str {
    if direction == "max" {
        "higher is better"
    } else {
        "lower is better"
    }
}

/// `GET /sweeps`.
pub async fn list_page(
    State(st): State<WebState>,
    Query(f): Query<SweepFilter>,
) -> Result<Markup, WebError> {
    let rows = {
        let cat = st.catalog.read(&st.index, st.blobs.as_ref()).await?;
        sweep_list(&cat, &f)?
    };
    let current = f.gate.as_deref().unwrap_or("");
    let body = html! {
        h1 { "Sweeps" }
        p.lead { "One proposal, one approval, many children. A sweep's promotion gate is decided once every child has ended, and recorded either way: a failed gate is a negative result." }
        nav.pager #gate-filter {
            @for (g, text) in [("", "all"), ("passed", "gate passed"), ("failed", "gate failed"), ("pending", "gate pending")] {
                @if g == current { strong { (text) } } @else {
                    a href={ "/sweeps" @if !g.is_empty() { "?gate=" (g) } } { (text) }
                }
            }
        }
        @if rows.is_empty() { p.empty { "No sweep here yet." } } @else {
            table.list #sweeps {
                thead { tr { th { "Sweep" } th { "Title" } th { "Author" } th { "Children ended" } th { "Total FLOPs" } th { "Metric" } th { "Best" } th { "Gate" } } }
                tbody { @for s in &rows { tr class={ "gate-" (s.gate) } {
                    td { a href=(sweep_href(&s.id)) { (s.id) } }
                    td { (s.title) }
                    td { (s.author) }
                    td.n { (s.ended) " / " (s.children) }
                    td.n { (num(Some(s.total_flops))) }
                    td { @if let Some(m) = &s.metric { code { (m) } } }
                    td.n { (num(s.best_value)) }
                    td { (gate_badge(&s.gate)) }
                } } }
            }
        }
    };
    Ok(frame("Sweeps", Nav::Sweeps, false, body))
}

/// `GET /sweeps/{*id}`.
pub async fn page(State(st): State<WebState>, Path(id): Path<String>) -> Result<Markup, WebError> {
    let v = {
        let cat = st.catalog.read(&st.index, st.blobs.as_ref()).await?;
        sweep_view(&cat, &id)?
    };
    let s = &v.sweep;
    let metric = v.metric.as_deref();
    let body = html! {
        h1 { (s.title) " " (gate_badge(&v.gate)) }
        p.meta {
            code { (s.id) } " · proposed by " strong { (s.author) }
            " · " a href=(experiment_href(&s.id)) { "its entries" }
            " · " a href={ "/api/v1/sweeps/" (encode_path(&s.id)) } { "as JSON" }
        }
        dl.sweep {
            dt { "Sweep file hash" } dd { code.hash { (s.parent_hash) } }
            dt { "Mode" } dd { (s.mode) " (" (s.children.len()) " children)" }
            dt { "Metric" } dd { @if let Some(m) = metric { code { (m) } " (" (better_words(&s.direction)) ")" } @else { "none named" } }
            dt { "Total FLOPs" } dd #total-flops { (num(Some(s.total_flops))) }
            dt { "Children ended" } dd { (v.ended) " of " (s.children.len()) }
            dt { "Recorded" } dd { a href={ "/api/v1/entries/" (s.entry) } { "entry #" (s.entry) } " · " (s.time) }
        }
        @if let Some(g) = &s.gate { (gate_section(s, g, s.decision.as_ref(), &v)) }
        section {
            h2 { "Children" }
            table.list #children {
                thead { tr { th { "#" } th { "Values" } th { "Experiment" } th { "Status" } th { @if let Some(m) = metric { (m) } @else { "metric" } } th { "Compute (FLOPs)" } th { "Run" } } }
                tbody { @for c in &v.children { tr class=[c.best.then_some("best")] {
                    td.n { (c.index) }
                    td { code { (c.values) } }
                    td { a href=(experiment_href(&c.experiment)) { (c.experiment) } " " (short_hash(&c.spec_hash)) }
                    td { (status_badge(&c.status)) }
                    td.n { (num(c.value)) @if c.best { " " span.badge.ok { "best" } } }
                    td.n { (num(Some(c.flops))) }
                    td { @if let Some(r) = &c.run { a href={ "/runs/" (encode_path(r)) } { (r) } } }
                } } }
            }
        }
    };
    Ok(frame(
        &format!("Sweep {}", s.title),
        Nav::Sweeps,
        false,
        body,
    ))
}

fn gate_section(
    s: &SweepRow,
    rule: &crate::catalog::GateRule,
    decision: Option<&GateRow>,
    v: &SweepView,
) -> Markup {
    let side = |x: &crate::catalog::GateSideRow| {
        html! {
            a href=(experiment_href(&x.experiment)) { (x.experiment) }
            " (run " a href={ "/runs/" (encode_path(&x.run)) } { (x.run) } "): "
            strong { (num(Some(x.value))) }
        }
    };
    let gain = decision.and_then(|d| {
        let (b, base) = (d.best.as_ref()?, d.baseline.as_ref()?);
        Some(if d.direction == "max" {
            b.value - base.value
        } else {
            base.value - b.value
        })
    });
    html! {
        section #gate class={ "gate " (v.gate) } {
            h2 { "Promotion gate " (gate_badge(&v.gate)) }
            p {
                "The best child's final " code { (rule.metric) } " (" (better_words(&s.direction)) ") must beat the baseline "
                code { (rule.beats) } " by at least " (num(Some(rule.by))) "."
            }
            @if let Some(d) = decision {
                dl {
                    dt { "Best child" } dd #gate-best { @if let Some(b) = &d.best { (side(b)) } @else { "none reported " code { (d.metric) } } }
                    dt { "Baseline " code { (d.beats) } } dd #gate-baseline { @if let Some(b) = &d.baseline { (side(b)) } @else { "no succeeded run" } }
                    dt { "Improvement" } dd #gate-gain { (num(gain)) " (needed " (num(Some(d.by))) ")" }
                    dt { "Decided" } dd { a href={ "/api/v1/entries/" (d.entry) } { "entry #" (d.entry) } " · " (d.time) }
                }
                p.detail { (d.detail) }
            } @else {
                p.meta { "Decided once every child has ended (" (v.ended) " of " (v.children.len()) " have)." }
            }
        }
    }
}
