//! Leaderboards: `/boards` lists the lab's boards; `/boards/{name}` shows one —
//! the ranked runs (each with the reproductions that earned its place), then the runs awaiting
//! reproduction, listed apart and never ranked, then those a reproduction found different (a
//! negative result, shown as such) — and the Pareto chart of the metric against compute
//! (log x): the frontier joined, the other ranked runs drawn alone, unranked runs not plotted.
//!
//! The boards come from [`crate::leaderboards`] (derived from the log); this module only draws
//! them. Not here: ranking rules (`glassbox_ledger::board`).

use axum::extract::{Path, State};
use glassbox_ledger::board::{Board, BoardDef, BoardRow, ComputeAxis, RowReproduction};
use glassbox_schemas::sweep::Direction;
use maud::{Markup, PreEscaped, html};

use super::{Nav, encode_path, experiment_href, frame, num};
use crate::WebState;
use crate::chart::{self, Axes, Scatter};
use crate::error::WebError;

/// One board as `/api/v1/boards` lists it.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct BoardSummary {
    /// Its name (`/boards/{name}`).
    pub name: String,
    /// The final metric ranked.
    pub metric: String,
    /// `min` (lower is better) or `max`.
    pub direction: String,
    /// `flops` or `tokens`.
    pub compute: String,
    /// Entries of the log it is derived from.
    pub log_size: u64,
    /// Ranked runs (reproduced).
    pub ranked: usize,
    /// Runs awaiting reproduction.
    pub awaiting: usize,
    /// Runs whose reproduction differed.
    pub failed: usize,
}

impl BoardSummary {
    /// The summary of `b`.
    pub fn of(b: &Board) -> Self {
        BoardSummary {
            name: b.def.name.clone(),
            metric: b.def.metric.clone(),
            direction: direction_name(b.def.direction).into(),
            compute: match b.def.compute {
                ComputeAxis::Flops => "flops",
                ComputeAxis::Tokens => "tokens",
            }
            .into(),
            log_size: b.log_size,
            ranked: b.ranked.len(),
            awaiting: b.awaiting.len(),
            failed: b.failed.len(),
        }
    }
}

fn direction_name(d: Direction) -> &'static str {
    match d {
        Direction::Min => "min",
        Direction::Max => "max",
    }
}

/// `lower is better` or `higher is better`.
pub fn better_words(d: Direction) -> &'static str {
    match d {
        Direction::Min => "lower is better",
        Direction::Max => "higher is better",
    }
}

/// Link to a board's page.
pub fn board_href(name: &str) -> String {
    format!("/boards/{}", encode_path(name))
}

/// `GET /boards`.
pub async fn list_page(State(st): State<WebState>) -> Result<Markup, WebError> {
    let boards = st.leaderboards.boards(&st).await?;
    let body = html! {
        h1 { "Leaderboards" }
        p.lead { "Each board ranks runs by one final metric (or one evaluation metric of their last snapshot, " code { "eval:SUITE/METRIC" } ") against the compute they used. Only a run that an independent reproduction matched is ranked; the others are listed apart. Every board is derived from the public log alone, so anyone can rebuild it." }
        @if boards.is_empty() {
            p.empty { "This lab declares no leaderboard (" code { "[[leaderboard]]" } " in its config)." }
        } @else {
            table.list #boards {
                thead { tr { th { "Board" } th { "Metric" } th { "Better" } th { "Compute" } th { "Ranked" } th { "Awaiting reproduction" } th { "Reproduction failed" } } }
                tbody { @for b in boards.iter() { tr {
                    td { a href=(board_href(&b.def.name)) { (b.def.name) } }
                    td { code { (b.def.metric) } }
                    td { (better_words(b.def.direction)) }
                    td { (b.def.compute.unit()) }
                    td.n { (b.ranked.len()) }
                    td.n { (b.awaiting.len()) }
                    td.n { (b.failed.len()) }
                } } }
            }
        }
    };
    Ok(frame("Leaderboards", Nav::Boards, false, body))
}

/// `GET /boards/{name}`.
pub async fn page(
    State(st): State<WebState>,
    Path(name): Path<String>,
) -> Result<Markup, WebError> {
    let b = st.leaderboards.board(&st, &name).await?;
    let def = &b.def;
    let body = html! {
        h1 { "Board " code { (def.name) } }
        p.lead {
            @if glassbox_schemas::eval::parse_metric_name(&def.metric).is_some() {
                "Runs ranked by " code { (def.metric) } " (" (better_words(def.direction)) ") of their last snapshot, on the suite's newest version, against training " (def.compute.unit()) ". "
            } @else {
                "Runs ranked by their final " code { (def.metric) } " (" (better_words(def.direction)) ") against training " (def.compute.unit()) ". "
            }
            "Only a run that an independent reproduction matched is ranked; ties go to less compute, then the earlier result."
        }
        p.meta { "Derived from the log's first " (b.log_size) " entries · " a href={ "/api/v1/boards/" (encode_path(&def.name)) } { "as JSON" } " · " a href="/boards" { "all boards" } }
        (pareto_figure(&b))
        section #ranked-section {
            h2 { "Ranked" }
            @if b.ranked.is_empty() { p.empty { "No run has been reproduced yet." } }
            @else { (rows_table("ranked", def, &b.ranked, true)) }
        }
        section #awaiting {
            h2 { "Awaiting reproduction" }
            p.meta { "Not ranked, whatever their value, until a reproduction matches them." }
            @if b.awaiting.is_empty() { p.empty { "None." } }
            @else { (rows_table("awaiting-rows", def, &b.awaiting, false)) }
        }
        section #failed {
            h2 { "Reproduction failed" }
            p.meta { "A reproduction of each of these runs came out different: a negative result, kept on the record." }
            @if b.failed.is_empty() { p.empty { "None." } }
            @else { (rows_table("failed-rows", def, &b.failed, false)) }
        }
    };
    Ok(frame(
        &format!("Board {}", def.name),
        Nav::Boards,
        false,
        body,
    ))
}

/// The metric against compute (log x): ranked rows only; the frontier joined.
fn pareto_figure(b: &Board) -> Markup {
    let point = |r: &BoardRow| {
        r.compute.map(|c| {
            (
                c,
                r.value,
                format!("#{} {} ({})", r.rank.unwrap_or(0), r.experiment.0, r.run.0),
            )
        })
    };
    let frontier: Vec<_> = b
        .ranked
        .iter()
        .filter(|r| r.pareto)
        .filter_map(point)
        .collect();
    let others: Vec<_> = b
        .ranked
        .iter()
        .filter(|r| !r.pareto)
        .filter_map(point)
        .collect();
    let unit = b.def.compute.unit();
    let title = format!("{} against training {unit}", b.def.metric);
    let svg = chart::scatter_chart(
        &title,
        &[
            Scatter {
                label: "Pareto frontier".into(),
                points: frontier,
                connect: true,
            },
            Scatter {
                label: "ranked, dominated".into(),
                points: others,
                connect: false,
            },
        ],
        &Axes {
            x_desc: unit.into(),
            y_desc: b.def.metric.clone(),
            log_x: true,
            ..Axes::default()
        },
    );
    html! {
        figure.chart.pareto data-title=(title) { (PreEscaped(svg)) }
    }
}

fn rows_table(id: &str, def: &BoardDef, rows: &[BoardRow], ranked: bool) -> Markup {
    html! {
        table.list id=(id) {
            thead { tr {
                @if ranked { th { "Rank" } }
                th { "Experiment" } th { "Author" } th { (def.metric) } th { "Compute (" (def.compute.unit()) ")" }
                th { "Run" } th { "Reproductions" }
                @if ranked { th { "Frontier" } }
            } }
            tbody { @for r in rows { tr class=[r.pareto.then_some("pareto")] {
                @if ranked { td.n.rank { (r.rank.map(|n| n.to_string()).unwrap_or_default()) } }
                td {
                    a href=(experiment_href(&r.experiment.0)) { (r.experiment.0) }
                    @if !r.title.is_empty() { br; small { (r.title) } }
                }
                td { (r.author) }
                td.n {
                    (num(Some(r.value)))
                    @if let Some(e) = r.value_entry { br; small { a href={ "/api/v1/entries/" (e) } title="the evaluation of the run's last snapshot this value comes from" { "evaluation #" (e) } } }
                }
                td.n { (num(r.compute)) }
                td {
                    a href={ "/runs/" (encode_path(&r.run.0)) } { (r.run.0) }
                    " " small { a href={ "/api/v1/entries/" (r.result_entry) } { "result #" (r.result_entry) } }
                }
                td { @if r.reproductions.is_empty() { span.meta { "none yet" } } @for x in &r.reproductions { (reproduction(x)) br; } }
                @if ranked { td { @if r.pareto { span.badge.ok title="no other ranked run beats it on both the metric and compute" { "frontier" } } } }
            } } }
        }
    }
}

fn reproduction(x: &RowReproduction) -> Markup {
    let class = match x.outcome.as_str() {
        "reproduced" => "ok",
        "differs" => "bad",
        _ => "warn",
    };
    html! {
        span class={ "badge repro " (class) } { (x.outcome) }
        @if let Some(c) = &x.comparison { " " (c) }
        @if let Some(w) = &x.worker { " on " code { (w) } }
        " " small { a href={ "/api/v1/entries/" (x.entry) } { "#" (x.entry) } }
        @if let Some(d) = &x.detail { br; small.detail { (d) } }
    }
}
