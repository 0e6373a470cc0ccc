//! `GET /evals`: the evaluation board as a heatmap table — a row per run, a column per suite
//! version, each cell the run's latest valid result (value, step, and the share of the suite's
//! items found in the run's training data), coloured on its column's own scale with the better
//! end darker — then every stored suite version.
//!
//! The board comes from [`crate::evals::board`]; this module only draws it (colours are CSS
//! classes, so the Content-Security-Policy can forbid inline styles). Not here: which result a
//! cell holds.

use axum::extract::State;
use glassbox_schemas::eval::CONTAMINATION_NGRAM;
use maud::{Markup, html};

use super::run_evals::anchor;
use super::{Nav, encode_path, experiment_href, frame, num, query, safe_link, short_hash};
use crate::WebState;
use crate::error::WebError;
use crate::evals::board::{self, BoardColumn, BoardQuery, EvalBoard, MAX_BOARD_COLUMNS};
use crate::evals::{MAX_BOARD_ENTRIES, SuiteKind, SuiteRow, percent, read_suites, suite_param};
use crate::extract::ApiQuery;

/// The page's parameters as its filter form sends them: a field left empty is no filter.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageQuery {
    /// A suite name.
    pub suite: Option<String>,
    /// `multiple_choice` or `perplexity`.
    pub kind: Option<String>,
    /// A column's key.
    pub sort: Option<String>,
    /// Runs shown at most.
    pub limit: Option<String>,
}

impl PageQuery {
    /// The board these parameters ask for; a malformed one is a 400 naming it.
    pub fn board_query(&self) -> Result<BoardQuery, WebError> {
        let given = |v: &Option<String>| v.clone().filter(|s| !s.trim().is_empty());
        let kind = match given(&self.kind) {
            None => None,
            Some(k) => Some(
                k.parse::<glassbox_schemas::eval::EvalKind>()
                    .map(SuiteKind::from)
                    .map_err(|e| WebError::BadRequest(format!("kind = {k:?}: {e}")))?,
            ),
        };
        let limit = match given(&self.limit) {
            None => None,
            Some(l) => Some(l.parse::<u64>().map_err(|_| {
                WebError::BadRequest(format!(
                    "limit = {l:?}: use a whole number from 1 to {}",
                    board::MAX_BOARD_RUNS
                ))
            })?),
        };
        Ok(BoardQuery {
            suite: given(&self.suite),
            kind,
            sort: given(&self.sort),
            limit,
        })
    }
}

/// `GET /evals`.
pub async fn page(
    State(st): State<WebState>,
    ApiQuery(raw): ApiQuery<PageQuery>,
) -> Result<Markup, WebError> {
    let q = raw.board_query()?;
    let b = board::load(&st, &q).await?;
    let suites = read_suites(&st).await?;
    let only = suite_param("suite", q.suite.as_deref())?;
    let suites: Vec<&SuiteRow> = suites
        .iter()
        .rev()
        .filter(|s| only.as_ref().is_none_or(|n| s.name == n.as_str()))
        .filter(|s| q.kind.is_none_or(|k| s.kind == k))
        .collect();
    let body = html! {
        h1 { "Evaluations" }
        p.lead {
            "Every run's latest valid result on each evaluation suite: the suite's headline metric at the run's highest evaluated snapshot. "
            "A column is one version of a suite — versions are never averaged together. "
            "A blank cell means the run was not evaluated on that version (it is not a zero); a failed or cancelled evaluation is not a result. "
            "Each cell also gives the share of the suite's items that share a " (CONTAMINATION_NGRAM) "-gram with the run's training data."
        }
        (filters(&q))
        p.meta {
            (b.rows.len()) @if b.rows.len() == 1 { " run × " } @else { " runs × " }
            (b.columns.len()) @if b.columns.len() == 1 { " suite version · " } @else { " suite versions · " }
            "colours compare runs within a column only, darker is better · click a column to rank by it · "
            a href={ "/api/v1/evals" (api_query(&q)) } { "as JSON" } " · "
            a href="/api/v1/eval-suites" { "suites as JSON" }
        }
        @if b.columns_total > b.columns.len() {
            p.meta.note { "Showing the " (MAX_BOARD_COLUMNS) " most recently evaluated suite versions of " (b.columns_total) "; filter by suite or kind to see the others." }
        }
        @if b.runs_total > b.rows.len() {
            p.meta.note { "Showing " (b.rows.len()) " of " (b.runs_total) " runs." }
        }
        @if b.entries_truncated {
            p.meta.note { "Only the newest " (MAX_BOARD_ENTRIES) " evaluation entries are read." }
        }
        @if b.rows.is_empty() {
            p.empty {
                @if q.suite.is_some() || q.kind.is_some() { "No run has a result on a suite these filters keep." }
                @else { "No run has been evaluated yet. A run's snapshots are evaluated on the suites the lab's or the spec's [evals] names." }
            }
        } @else {
            (heatmap(&q, &b))
        }
        section #suites {
            h2 { "Suites" }
            @if suites.is_empty() { p.empty { "No evaluation suite is stored (glassbox data eval-suite import)." } }
            @else {
                table.list #suite-list {
                    thead { tr { th { "Suite" } th { "Version" } th { "Kind" } th { "Items" } th { "Licence" } th { "Source" } th { "Entry" } } }
                    tbody { @for s in &suites { tr {
                        td { (s.name) }
                        td { (short_hash(&s.version)) }
                        td { (s.kind.as_str()) }
                        td.n { (super::count(s.items as f64)) }
                        td { (s.licence.as_deref().unwrap_or("–")) }
                        td.source { @if let Some(src) = &s.source { (safe_link(src)) } @else { "–" } }
                        td.n { a href={ "/api/v1/entries/" (s.entry) } { (s.entry) } }
                    } } }
                }
            }
        }
    };
    Ok(frame("Evaluations", Nav::Evals, false, body))
}

/// The board's parameters as a query string (`?…`, or nothing), `sort` replaced by `sort`.
fn board_query(q: &BoardQuery, sort: Option<&str>) -> String {
    let limit = q.limit.map(|l| l.to_string());
    let pairs: Vec<(&str, &str)> = [
        ("suite", q.suite.as_deref()),
        ("kind", q.kind.map(SuiteKind::as_str)),
        ("sort", sort),
        ("limit", limit.as_deref()),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.map(|v| (k, v)))
    .collect();
    if pairs.is_empty() {
        String::new()
    } else {
        format!("?{}", query(&pairs))
    }
}

fn api_query(q: &BoardQuery) -> String {
    board_query(q, q.sort.as_deref())
}

fn filters(q: &BoardQuery) -> Markup {
    html! {
        form.filters method="get" action="/evals" {
            label { "Suite " input type="text" name="suite" value=[q.suite.as_deref()] placeholder="any" size="18"; }
            label { "Kind " select name="kind" {
                option value="" selected[q.kind.is_none()] { "any" }
                @for k in [SuiteKind::MultipleChoice, SuiteKind::Perplexity] {
                    option value=(k.as_str()) selected[q.kind == Some(k)] { (k.as_str()) }
                }
            } }
            button type="submit" { "Apply" }
        }
    }
}

fn heading(q: &BoardQuery, c: &BoardColumn, sorted: bool) -> Markup {
    let title = format!(
        "{} version {} ({}): {}, {} is better{}",
        c.suite,
        c.version,
        c.kind.as_str(),
        c.metric,
        if c.higher_is_better {
            "higher"
        } else {
            "lower"
        },
        c.items.map(|n| format!("; {n} items")).unwrap_or_default()
    );
    html! {
        th.col.sorted[sorted] title=(title) {
            a href={ "/evals" (board_query(q, Some(&c.key))) } {
                (c.suite)
                br;
                (short_hash(&c.version))
                br;
                small { (c.metric) " " @if c.higher_is_better { "↑" } @else { "↓" } }
            }
        }
    }
}

fn heatmap(q: &BoardQuery, b: &EvalBoard) -> Markup {
    html! {
        div.table-scroll {
            table.list.evalboard #eval-board {
                thead { tr {
                    th { "Run" }
                    @for c in &b.columns { (heading(q, c, b.sort.as_deref() == Some(c.key.as_str()))) }
                } }
                tbody { @for r in &b.rows { tr {
                    th.run {
                        a href={ "/runs/" (encode_path(&r.run)) } { (r.run) }
                        @if let Some(s) = &r.status { " " (super::status_badge(s)) }
                        @if let Some(x) = &r.experiment { br; small { a href=(experiment_href(x)) { (x) } } }
                    }
                    @for (c, cell) in b.columns.iter().zip(&r.cells) {
                        @match cell {
                            None => { td.cell.blank title={ (r.run) " was not evaluated on " (c.suite) " version " (c.version) } { "" } }
                            Some(v) => {
                                @let shade = c.shade(v.value).map_or_else(|| "flat".to_string(), |s| format!("q{s}"));
                                @let contamination = match (v.flagged, v.contamination, v.ngram) {
                                    (Some(f), Some(x), Some(n)) => format!("{f} of {} items ({}) share a {n}-gram with the training data", v.items, percent(x)),
                                    _ => "contamination not checked".to_string(),
                                };
                                td class={ "cell " (shade) }
                                    title={ (c.metric) " " (num(Some(v.value))) @if let Some(se) = v.stderr { " ± " (num(Some(se))) } " at step " (v.step) " (entry " (v.entry) "); " (contamination) } {
                                    a href={ "/runs/" (encode_path(&r.run)) "#" (anchor(&c.suite, &c.version)) } {
                                        span.v { (num(Some(v.value))) }
                                        @if let Some(se) = v.stderr { span.se { " ±" (num(Some(se))) } }
                                    }
                                    br;
                                    small.c {
                                        @match v.contamination { Some(x) => { (percent(x)) " contam." } None => { "contam. not checked" } }
                                        " · step " (v.step)
                                    }
                                }
                            }
                        }
                    }
                } } }
            }
        }
    }
}
