//! The Experiments list (filter by status, tag, author and text; sort by any column;
//! paginated; pick runs to compare) and the Negative results index (diverged, failed,
//! over-budget and refuted-forecast runs in one table).
//!
//! Both read the in-memory catalog; neither queries metric curves.

use axum::extract::{Query, State};
use maud::{Markup, html};

use super::{Nav, experiment_href, frame, num, query, short_hash, status_badge};
use crate::WebState;
use crate::catalog::{CatalogData, ExperimentFilter, ListPage};
use crate::error::WebError;

const COLUMNS: &[(&str, &str)] = &[
    ("id", "Experiment"),
    ("title", "Title"),
    ("status", "Status"),
    ("author", "Author"),
    ("spec_hash", "Spec"),
    ("runs", "Runs"),
    ("final_loss", "Final loss"),
    ("forecast", "Forecast"),
    ("updated", "Updated"),
];

const STATUSES: &[&str] = &[
    "proposed",
    "approved",
    "rejected",
    "running",
    "succeeded",
    "diverged",
    "budget_exceeded",
    "failed",
    "cancelled",
];

fn filter_pairs(f: &ExperimentFilter) -> Vec<(&'static str, &str)> {
    let mut v = Vec::new();
    for (k, val) in [
        ("status", &f.status),
        ("tag", &f.tag),
        ("author", &f.author),
        ("q", &f.q),
    ] {
        if let Some(x) = val.as_deref().filter(|x| !x.is_empty()) {
            v.push((k, x));
        }
    }
    v
}

fn table(page: &ListPage, f: &ExperimentFilter) -> Markup {
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
                    @for (key, name) in COLUMNS {
                        th { a href=(sort_href(key)) {
                            (name)
                            @if sort == *key { @if desc { " ▼" } @else { " ▲" } }
                        } }
                    }
                } }
                tbody {
                    @for r in &page.items {
                        tr {
                            td { @if let Some(run) = &r.latest_run {
                                input type="checkbox" name="run" value=(run) aria-label={ "compare " (run) };
                            } }
                            td { a href=(experiment_href(&r.id)) { (r.id) } }
                            td { (r.title.as_deref().unwrap_or("")) }
                            td { (status_badge(&r.status)) }
                            td { (r.author.as_deref().unwrap_or("")) }
                            td { @if let Some(h) = &r.spec_hash { (short_hash(h)) } }
                            td.n { (r.runs) }
                            td.n { (num(r.final_loss)) }
                            td { @match r.forecast_hit {
                                Some(true) => span.badge.ok { "hit" },
                                Some(false) => span.badge.bad { "miss" },
                                None => "",
                            } }
                            td { time { (r.updated) } }
                        }
                        @if !r.tags.is_empty() {
                            tr.tags { td {} td colspan="9" { @for t in &r.tags {
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

/// `GET /` and `GET /experiments`.
pub async fn list_page(
    State(st): State<WebState>,
    Query(f): Query<ExperimentFilter>,
) -> Result<Markup, WebError> {
    let cat = st.catalog.read(st.index.pool(), st.blobs.as_ref()).await?;
    let page = cat.list(&f)?;
    let body = html! {
        h1 { "Experiments" }
        p.lead { "Every proposal and run of the lab, failures included. Filter, sort, open one, or tick runs to compare." }
        form.filters method="get" action="/experiments" {
            label { "Status " select name="status" {
                option value="" { "any" }
                @for s in STATUSES { option value=(s) selected[f.status.as_deref() == Some(*s)] { (s) } }
            } }
            label { "Tag " input type="text" name="tag" value=(f.tag.as_deref().unwrap_or("")); }
            label { "Author " input type="text" name="author" value=(f.author.as_deref().unwrap_or("")); }
            label { "Text " input type="search" name="q" value=(f.q.as_deref().unwrap_or("")); }
            button type="submit" { "Filter" }
        }
        (table(&page, &f))
        (pager(&page, &f))
    };
    Ok(frame("Experiments", Nav::Experiments, false, body))
}

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
                        td { (status_badge(&r.status)) }
                        td.n { (r.steps.map(|s| s.to_string()).unwrap_or_default()) }
                        td { @if let Some(fc) = &r.forecast {
                            (fc.metric) ": predicted " (num(Some(fc.predicted))) " ± " (num(Some(fc.tolerance)))
                            ", got " (num(fc.actual)) " "
                            @if fc.hit { span.badge.ok { "hit" } } @else { span.badge.bad { "refuted" } }
                        } }
                        td { (r.reason.as_deref().unwrap_or("")) }
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
    let rows = {
        let cat = st.catalog.read(st.index.pool(), st.blobs.as_ref()).await?;
        negative_rows(&cat, page - 1, 200)
    };
    let body = html! {
        h1 { "Negative results" }
        p.lead { "What did not work is recorded like what did: each run below has a signed result entry." }
        (rows)
        nav.pager {
            @if page > 1 { a href={ "/negative?page=" (page - 1) } { "← previous" } }
            a href={ "/negative?page=" (page + 1) } { "next →" }
        }
    };
    Ok(frame("Negative results", Nav::Negative, false, body))
}
