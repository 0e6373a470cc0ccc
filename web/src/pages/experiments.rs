//! The Experiments list (filter by status, tag, author and a search in the query language of
//! [`crate::search`]; sort by any column; paginated; pick runs to compare; choose the columns,
//! final metrics included, and keep the whole view as a link) and the Negative results index
//! (diverged, failed, over-budget and refuted-forecast runs in one table).
//!
//! Both read the in-memory catalog (the search runs on the index first); neither queries metric
//! curves.

use axum::extract::{Query, State};
use maud::{Markup, html};

use super::{Nav, experiment_href, frame, num, query, short_hash, status_badge};
use crate::WebState;
use crate::catalog::{CatalogData, ExperimentFilter, ListPage};
use crate::error::WebError;
use glassbox_schemas::record::ForecastVerdict;

const COLUMNS: &[(&str, &str)] = &[
    ("id", "Experiment"),
    ("title", "Title"),
    ("status", "Status"),
    ("author", "Author"),
    ("spec_hash", "Spec"),
    ("runs", "Runs"),
    ("final_loss", "Final train/loss"),
    ("forecast", "Forecast"),
    ("updated", "Updated"),
];

/// Most runs on a search result's parallel coordinates (one page of rows).
const MAX_PC_RUNS: usize = 50;

/// Most columns a view may ask for.
const MAX_COLS: usize = 24;

/// A column of the list.
#[derive(Debug, Clone, PartialEq)]
enum Col {
    /// One of [`COLUMNS`]: its key and heading.
    Std(&'static str, &'static str),
    /// A final metric of the latest run.
    Metric(String),
    /// A field of the current spec, by its dotted path (`train.lr`, `model.moe.n_experts`).
    Spec(String),
}

/// Whether `path` reads as a spec field's dotted path (`model.moe.n_experts`,
/// `data.mixture[0].weight`).
fn is_spec_path(path: &str) -> bool {
    !path.is_empty()
        && path.len() <= 200
        && path.starts_with(|c: char| c.is_ascii_lowercase())
        && path
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_.[]".contains(c))
}

/// The columns `cols` asks for (comma-separated keys of [`COLUMNS`], `metric:<name>` and
/// `spec:<path>`), or all of [`COLUMNS`]; an unknown one is a 400 naming it and what is
/// accepted.
fn columns(cols: Option<&str>) -> Result<Vec<Col>, WebError> {
    let Some(cols) = cols.map(str::trim).filter(|c| !c.is_empty()) else {
        return Ok(COLUMNS.iter().map(|(k, n)| Col::Std(k, n)).collect());
    };
    let mut out = Vec::new();
    for part in cols.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if out.len() >= MAX_COLS {
            return Err(WebError::BadRequest(format!(
                "cols: at most {MAX_COLS} columns"
            )));
        }
        if let Some(name) = part.strip_prefix("metric:") {
            if name.is_empty() || name.chars().count() > 200 {
                return Err(WebError::BadRequest(format!(
                    "cols: `{part}` needs a metric name of 1 to 200 characters after `metric:`"
                )));
            }
            out.push(Col::Metric(name.to_string()));
            continue;
        }
        if let Some(path) = part.strip_prefix("spec:") {
            if !is_spec_path(path) {
                let shown: String = path.chars().take(40).collect();
                return Err(WebError::BadRequest(format!(
                    "cols: `spec:{shown}` needs a spec field's dotted path after `spec:`, e.g. spec:train.lr or spec:model.moe.n_experts"
                )));
            }
            out.push(Col::Spec(path.to_string()));
            continue;
        }
        match COLUMNS.iter().find(|(k, _)| *k == part) {
            Some((k, n)) => out.push(Col::Std(k, n)),
            None => {
                let shown: String = part.chars().take(40).collect();
                return Err(WebError::BadRequest(format!(
                    "cols: `{shown}` is not a column; use {}, metric:<name> or spec:<field>",
                    COLUMNS
                        .iter()
                        .map(|(k, _)| *k)
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }
    }
    Ok(out)
}

fn filter_pairs(f: &ExperimentFilter) -> Vec<(&'static str, &str)> {
    let mut v = Vec::new();
    for (k, val) in [
        ("status", &f.status),
        ("tag", &f.tag),
        ("author", &f.author),
        ("q", &f.q),
        ("cols", &f.cols),
        ("pc", &f.pc),
    ] {
        if let Some(x) = val.as_deref().filter(|x| !x.is_empty()) {
            v.push((k, x));
        }
    }
    v
}

/// The values the view's metric and spec columns show, by experiment.
type MetricCells = std::collections::HashMap<String, Vec<Option<Cell>>>;

/// One metric or spec column's value.
#[derive(Debug, Clone, PartialEq)]
enum Cell {
    /// A final metric.
    Number(f64),
    /// A spec field, as written.
    Text(String),
}

fn table(page: &ListPage, f: &ExperimentFilter, cols: &[Col], metrics: &MetricCells) -> Markup {
    let sort = f.sort.as_deref().unwrap_or("updated");
    let desc = f.dir.as_deref() != Some("asc");
    let base = filter_pairs(f);
    let sort_href = |key: &str| {
        let dir = if sort == key && desc { "asc" } else { "desc" };
        let mut pairs = base.clone();
        pairs.push(("sort", key));
        pairs.push(("dir", dir));
        format!("/experiments?{}", query(&pairs))
    };
    html! {
        form.compare-pick method="get" action="/compare" {
            table.list #experiments {
                thead { tr {
                    th { abbr title="pick runs to compare" { "⇄" } }
                    @for c in cols {
                        @match c {
                            Col::Std(key, name) => th { a href=(sort_href(key)) {
                                (name)
                                @if sort == *key { @if desc { " ▼" } @else { " ▲" } }
                            } },
                            Col::Metric(m) => th.metric title="final value in the latest run" { (m) },
                            Col::Spec(p) => th.spec title="field of the current spec" { code { (p) } },
                        }
                    }
                } }
                tbody {
                    @for r in &page.items {
                        tr data-run=[r.latest_run.as_deref()] {
                            td { @if let Some(run) = &r.latest_run {
                                input type="checkbox" name="run" value=(run) aria-label={ "compare " (run) };
                            } }
                            @for (i, c) in cols.iter().enumerate() { (cell(r, c, metrics.get(&r.id).and_then(|v| v.get(metric_slot(cols, i)).cloned().flatten()))) }
                        }
                        @if !r.tags.is_empty() {
                            tr.tags data-run=[r.latest_run.as_deref()] { td {} td colspan=(cols.len()) { @for t in &r.tags {
                                a.tag href={ "/experiments?" (query(&[("tag", t)])) } { (t) } " "
                            } } }
                        }
                    }
                }
            }
            button type="submit" { "Compare selected runs" }
        }
    }
}

/// Which value column (0-based among the metric and spec columns) column `i` is.
fn metric_slot(cols: &[Col], i: usize) -> usize {
    cols[..i]
        .iter()
        .filter(|c| matches!(c, Col::Metric(_) | Col::Spec(_)))
        .count()
}

fn cell(r: &crate::catalog::ListRow, c: &Col, value: Option<Cell>) -> Markup {
    let key = match c {
        Col::Std(key, _) => key,
        Col::Metric(name) => {
            return html! { td.n { @match value { Some(Cell::Number(v)) => (super::metric_value(name, v)), _ => "–" } } };
        }
        Col::Spec(_) => {
            return html! { td { @match value { Some(Cell::Text(t)) => code { (t) }, _ => "–" } } };
        }
    };
    match *key {
        "id" => html! { td { a href=(experiment_href(&r.id)) { (r.id) } } },
        "title" => html! { td { (r.title.as_deref().unwrap_or("")) } },
        "status" => {
            html! { td { (status_badge(r.status.as_str())) (super::anomaly_badge(r.anomalies, &format!("{}#annotations", experiment_href(&r.id)))) } }
        }
        "author" => html! { td { (r.author.as_deref().unwrap_or("")) } },
        "spec_hash" => html! { td { @if let Some(h) = &r.spec_hash { (short_hash(h)) } } },
        "runs" => html! { td.n { (r.runs) } },
        "final_loss" => html! { td.n { (num(r.final_loss)) } },
        "forecast" => html! { td { @match r.forecast_hit {
            Some(true) => (super::verdict_badge(ForecastVerdict::Hit)),
            Some(false) => (super::verdict_badge(ForecastVerdict::Miss)),
            None => "",
        } } },
        _ => html! { td { time { (r.updated) } } },
    }
}

fn pager(page: &ListPage, f: &ExperimentFilter) -> Markup {
    let pages = page.total.div_ceil(page.per_page as usize).max(1) as u32;
    let mut pairs = filter_pairs(f);
    let sort = f.sort.clone().unwrap_or_default();
    let dir = f.dir.clone().unwrap_or_default();
    if !sort.is_empty() {
        pairs.push(("sort", &sort));
    }
    if !dir.is_empty() {
        pairs.push(("dir", &dir));
    }
    let link = |p: u32| {
        let mut q = pairs.clone();
        let ps = p.to_string();
        q.push(("page", &ps));
        format!("/experiments?{}", query(&q))
    };
    html! {
        nav.pager {
            @if page.page > 1 { a rel="prev" href=(link(page.page - 1)) { "← previous" } }
            span { "page " (page.page) " of " (pages) " · " (page.total) " experiments" }
            @if page.page < pages { a rel="next" href=(link(page.page + 1)) { "next →" } }
        }
    }
}

/// The filter form; with `error`, the message beside the field it is about (`cols`, `q`, or
/// none of them: above the form).
fn filters_form(f: &ExperimentFilter, error: Option<(&str, &str)>) -> Markup {
    let beside = |field: &str| -> Markup {
        html! { @if let Some((at, msg)) = error.filter(|(at, _)| *at == field) { span.field-error role="alert" data-field=(at) { (msg) } } }
    };
    html! {
        @if let Some((at, msg)) = error.filter(|(at, _)| *at != "cols" && *at != "q") {
            p.field-error role="alert" data-field=(at) { (msg) }
        }
        form.filters method="get" action="/experiments" {
            label { "Status " select name="status" {
                option value="" { "any" }
                @for s in crate::search::STATUSES { option value=(s) selected[f.status.as_deref() == Some(*s)] { (s) } }
            } }
            label { "Tag " input type="text" name="tag" value=(f.tag.as_deref().unwrap_or("")); }
            label { "Author " input type="text" name="author" value=(f.author.as_deref().unwrap_or("")); }
            label.search { "Search " input type="search" name="q" size="48"
                placeholder="model.moe.n_experts >= 8 and metrics.\"eval/markov/loss\" < 1.3"
                aria-invalid=[error.filter(|(at, _)| *at == "q").map(|_| "true")]
                value=(f.q.as_deref().unwrap_or("")); (beside("q")) }
            label { "Columns " input type="text" name="cols" placeholder="id,status,metric:eval/markov/loss,spec:train.lr"
                aria-invalid=[error.filter(|(at, _)| *at == "cols").map(|_| "true")]
                value=(f.cols.as_deref().unwrap_or("")); (beside("cols")) }
            button type="submit" { "Filter" }
        }
    }
}

/// `GET /` and `GET /experiments`. A bad column or search is answered 400 with the page's
/// form and the error beside the field, in the site's layout.
pub async fn list_page(
    State(st): State<WebState>,
    Query(f): Query<ExperimentFilter>,
) -> Result<axum::response::Response, WebError> {
    use axum::response::IntoResponse;
    match list_view(&st, &f).await {
        Ok(page) => Ok(page.into_response()),
        Err(WebError::BadRequest(msg)) => {
            let field = msg
                .split_once(':')
                .map(|(f, _)| f.trim())
                .filter(|f| ["cols", "q", "sort", "dir", "status", "page", "per_page"].contains(f))
                .unwrap_or("query");
            let body = html! {
                h1 { "Experiments" }
                p.lead { "This view could not be shown: fix the field below and filter again." }
                (filters_form(&f, Some((field, &msg))))
            };
            Ok((
                axum::http::StatusCode::BAD_REQUEST,
                frame("Experiments: bad request", Nav::Experiments, false, body),
            )
                .into_response())
        }
        Err(e) => Err(e),
    }
}

async fn list_view(st: &WebState, f: &ExperimentFilter) -> Result<Markup, WebError> {
    let cols = columns(f.cols.as_deref())?;
    let only = crate::search::for_filter(&st.index, f.q.as_deref()).await?;
    let wanted: Vec<&Col> = cols
        .iter()
        .filter(|c| matches!(c, Col::Metric(_) | Col::Spec(_)))
        .collect();
    // The catalog is read under its lock, which is let go before anything else is awaited.
    let (page, mut metrics, specs) = {
        let cat = st.catalog.read(&st.index, st.blobs.as_ref()).await?;
        let page = cat.list(f, only.as_ref())?;
        let mut specs = Vec::new();
        let metrics: MetricCells = if wanted.is_empty() {
            MetricCells::new()
        } else {
            page.items
                .iter()
                .map(|r| {
                    let exp = cat.experiments.get(&r.id);
                    let last = exp.and_then(|e| e.latest_run(&cat));
                    if let Some(blob) = exp.and_then(|e| e.spec_blob.clone()) {
                        specs.push((r.id.clone(), blob));
                    }
                    let values = wanted
                        .iter()
                        .map(|c| match c {
                            Col::Metric(m) => last
                                .and_then(|run| run.final_metrics.get(m.as_str()).copied())
                                .map(Cell::Number),
                            _ => None,
                        })
                        .collect();
                    (r.id.clone(), values)
                })
                .collect()
        };
        (page, metrics, specs)
    };
    // Spec columns: each row's current spec blob, flattened (cached), after the catalog's lock.
    if wanted.iter().any(|c| matches!(c, Col::Spec(_))) {
        for (id, blob) in &specs {
            let Some(flat) = super::compare::flat_spec(st, blob).await else {
                continue;
            };
            if let Some(values) = metrics.get_mut(id) {
                for (slot, c) in wanted.iter().enumerate() {
                    if let Col::Spec(path) = c {
                        values[slot] = flat.get(path.as_str()).cloned().map(Cell::Text);
                    }
                }
            }
        }
    }
    let mut view = filter_pairs(f);
    let (sort, dir) = (
        f.sort.clone().unwrap_or_default(),
        f.dir.clone().unwrap_or_default(),
    );
    if !sort.is_empty() {
        view.push(("sort", &sort));
    }
    if !dir.is_empty() {
        view.push(("dir", &dir));
    }
    let view_url = format!("/experiments?{}", query(&view));
    // A search result's runs on parallel coordinates (the spec fields that differ, then a final
    // metric): at most one page of latest runs.
    let pc_metric =
        f.pc.clone()
            .filter(|m| !m.trim().is_empty())
            .or_else(|| {
                wanted.iter().find_map(|c| match c {
                    Col::Metric(m) => Some(m.clone()),
                    _ => None,
                })
            })
            .unwrap_or_else(|| glassbox_schemas::metrics::TRAIN_LOSS.to_string());
    let searched = f.q.as_deref().is_some_and(|q| !q.trim().is_empty());
    let latest: Vec<String> = page
        .items
        .iter()
        .filter_map(|r| r.latest_run.clone())
        .take(MAX_PC_RUNS)
        .collect();
    let pc = if searched {
        super::compare::parallel_data(st, &latest, &pc_metric).await?
    } else {
        None
    };
    let body = html! {
        h1 { "Experiments" }
        p.lead { "Every proposal and run of the lab, failures included. Filter, sort, open one, or tick runs to compare." }
        (filters_form(f, None))
        p.view {
            "This view: " a #view-link href=(view_url) { "link" } " "
            input #view-url type="text" readonly value=(view_url) aria-label="link to this view";
            " " button #copy-view type="button" data-copy="view-url" { "copy link" }
        }
        details.search-help {
            summary { "Search syntax" }
            p { "Fields: " code { "id run title author status tag steps created updated started ended" }
                ", spec paths such as " code { "model.moe.n_experts" } " or " code { "train.lr" }
                ", final metrics such as " code { "metrics.\"eval/markov/loss\"" } " (quote names with slashes)." }
            p { "Operators " code { "= != < <= > >= ~ in (…)" } " (" code { "~" } " finds text), "
                code { "and or not" } " and parentheses; dates as " code { "2026-01-31" }
                "; a bare word or \"phrase\" is looked for in the id, title, author and hypothesis." }
            p { "Columns: " code { "id title status author spec_hash runs final_loss forecast updated" }
                ", a final metric as " code { "metric:eval/markov/loss" } ", a spec field as " code { "spec:train.lr" } "." }
        }
        (table(&page, f, &cols, &metrics))
        (pager(&page, f))
        @if let Some(pc) = &pc {
            h2 { "Parallel coordinates of the result" }
            p.meta { "The latest run of each experiment above: one axis per spec field that differs, then the final metric "
                code { (pc_metric) } " (" code { "pc=" } " in the address picks another); lines coloured by it. Drag along an axis to filter the rows above; click the axis to clear." }
            figure #parcoords data-pc=(pc) {
                noscript { p.empty { "Parallel coordinates need JavaScript; the table shows the same runs." } }
            }
        }
        script src=(super::assets::VIEW_JS) defer {}
    };
    let scripts = if pc.is_some() {
        super::Scripts::Parcoords
    } else {
        super::Scripts::None
    };
    Ok(super::frame_with(
        "Experiments",
        Nav::Experiments,
        scripts,
        body,
    ))
}

/// Why a run is a negative result, in words: the reason its result gives, else the forecast it
/// missed or the status it ended with.
pub fn negative_reason(r: &crate::catalog::RunRow) -> String {
    if let Some(reason) = r.reason.as_deref().filter(|s| !s.trim().is_empty()) {
        return reason.to_string();
    }
    if let Some(fc) = r.forecast.as_ref().filter(|f| !f.hit) {
        return match (fc.actual, fc.error) {
            (Some(a), Some(e)) => format!(
                "missed its forecast: {} = {} ± {} predicted, {} measured ({:+.4} off)",
                fc.metric,
                num(Some(fc.predicted)),
                num(Some(fc.tolerance)),
                num(Some(a)),
                e
            ),
            _ => format!(
                "missed its forecast: {} was never measured (the run ended at step {})",
                fc.metric,
                r.steps.unwrap_or(0)
            ),
        };
    }
    match r.status.as_str() {
        "diverged" => "the loss diverged".into(),
        "budget_exceeded" => "it ran out of its budget".into(),
        "failed" => "it failed (no reason recorded)".into(),
        other => other.to_string(),
    }
}

/// How many pages `n` rows make at `per_page` a page (at least one).
pub fn page_count(n: usize, per_page: usize) -> usize {
    n.div_ceil(per_page.max(1)).max(1)
}

/// Rows per page of the negative results.
pub const NEGATIVE_PER_PAGE: usize = 200;

/// The negative-results table body (shared with the API's selection).
pub fn negative_rows(cat: &CatalogData, page: usize, per_page: usize) -> Markup {
    let all = cat.negative();
    html! {
        p { (all.len()) " runs diverged, failed, ran out of budget or missed their forecast." }
        table.list #negative {
            thead { tr { th { "Run" } th { "Experiment" } th { "Status" } th { "Steps" } th { "Forecast" } th { "Reason" } } }
            tbody {
                @for r in all.iter().skip(page * per_page).take(per_page) {
                    tr {
                        td { a href={ "/runs/" (super::encode_path(&r.id)) } { (r.id) } }
                        td { @if let Some(x) = &r.experiment { a href=(experiment_href(x)) { (x) } } }
                        td { (status_badge(r.status.as_str())) }
                        td.n { (r.steps.map(|s| s.to_string()).unwrap_or_default()) }
                        td { @if let Some(fc) = &r.forecast {
                            (fc.metric) ": predicted " (num(Some(fc.predicted))) " ± " (num(Some(fc.tolerance)))
                            ", got " (num(fc.actual)) " "
                            (super::verdict_badge(fc.verdict))
                        } }
                        td { (negative_reason(r)) }
                    }
                }
            }
        }
    }
}

/// Page number query.
#[derive(Debug, serde::Deserialize)]
pub struct PageQuery {
    /// From 1.
    pub page: Option<usize>,
}

/// `GET /negative`.
pub async fn negative_page(
    State(st): State<WebState>,
    Query(p): Query<PageQuery>,
) -> Result<Markup, WebError> {
    let page = p.page.unwrap_or(1).max(1);
    let (rows, gates, pages) = {
        let cat = st.catalog.read(&st.index, st.blobs.as_ref()).await?;
        let gates: Vec<(String, String, String)> = cat
            .failed_gates()
            .into_iter()
            .map(|s| {
                (
                    s.id.clone(),
                    s.title.clone(),
                    s.decision
                        .as_ref()
                        .map(|d| d.detail.clone())
                        .unwrap_or_default(),
                )
            })
            .collect();
        let pages = page_count(cat.negative().len(), NEGATIVE_PER_PAGE);
        (
            negative_rows(&cat, page - 1, NEGATIVE_PER_PAGE),
            gates,
            pages,
        )
    };
    let body = html! {
        h1 { "Negative results" }
        p.lead { "What did not work is recorded like what did: each run below has a signed result entry." }
        @if page == 1 && !gates.is_empty() {
            section #failed-gates {
                h2 { "Sweeps whose promotion gate failed" }
                ul { @for (id, title, detail) in &gates {
                    li { a href=(super::sweeps::sweep_href(id)) { (id) } " " (title) " " (super::sweeps::gate_badge("failed")) br; small { (detail) } }
                } }
                p.meta { a href="/sweeps?gate=failed" { "All failed gates" } }
            }
        }
        (rows)
        @if pages > 1 || page > 1 {
            nav.pager {
                @if page > 1 { a href={ "/negative?page=" ((page - 1).min(pages)) } { "← previous" } }
                " page " (page) " of " (pages) " "
                @if page < pages { a href={ "/negative?page=" (page + 1) } { "next →" } }
            }
        }
    };
    Ok(frame("Negative results", Nav::Negative, false, body))
}
