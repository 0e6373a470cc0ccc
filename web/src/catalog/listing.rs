//! Listing experiments: filters, sort columns, pages and the list's rows, and the lists of
//! failed gates and negative results.
//!
//! Not here: the query language (`crate::search`) or rendering (`crate::pages`).

//! The catalog: experiments, runs, sweeps (with their gate decisions), datasets, tokenizers,
//! token shards and forecasts as the dashboard lists them, folded from the index's `entries`
//! table and kept in memory, together with the leaderboards' [`BoardBuilder`] fed in log order.
//!
//! Listing 10,000 experiments with their author, tags, status and final loss would otherwise
//! parse every proposal, result and spec on each request. The catalog reads each entry once:
//! [`Catalog::refresh`] fetches the entries past the last one folded (one indexed query that
//! returns nothing when the log has not grown) and folds them into [`CatalogData`]. Specs are
//! read from their blobs once per blob hash. The catalog is derived from the index, which is
//! derived from the log; it is never written back anywhere.
//!
//! A `sweep` entry becomes a [`SweepRow`] (a new entry for the same experiment replaces it,
//! and a decision recorded for an older version of the file is not shown against the new one);
//! a `gate` entry becomes that sweep's [`GateRow`]; a child's `proposal` carries its link to the
//! sweep ([`ExperimentRow::sweep`]). Boards are only *fed* here: ranking them needs the specs
//! (`crate::leaderboards`).
//!
//! This module does not render anything and does not read metric curves (that is `series`).
use crate::error::WebError;
use glassbox_schemas::RunStatus;
use serde::Serialize;
use std::borrow::Cow;
use utoipa::ToSchema;

use super::*;

/// Filters for the experiments list.
#[derive(Debug, Clone, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ExperimentFilter {
    /// Exact status (`running`, `succeeded`, `diverged`, `proposed`, ...).
    pub status: Option<String>,
    /// A tag the spec carries.
    pub tag: Option<String>,
    /// Proposer (case-insensitive).
    pub author: Option<String>,
    /// A search in the query language (`model.moe.n_experts >= 8 and status = succeeded`; a
    /// bare word is found in the id, title, author or hypothesis). A bad query is a 400 naming
    /// the column and what was expected.
    pub q: Option<String>,
    /// The columns shown, comma-separated (a saved view): any of the sort columns, and
    /// `metric:<name>` for a final metric of the latest run.
    pub cols: Option<String>,
    /// Column: `id`, `title`, `status`, `author`, `runs`, `final_loss`, `forecast`, `spec_hash`,
    /// `updated` (default).
    #[param(inline, value_type = Option<SortColumn>)]
    pub sort: Option<String>,
    /// `asc` or `desc` (default `desc`).
    #[param(inline, value_type = Option<SortDirection>)]
    pub dir: Option<String>,
    /// Page, from 1.
    #[param(minimum = 1, maximum = 2147483647)]
    pub page: Option<u32>,
    /// Rows per page (default 50, 1 to 500).
    #[param(minimum = 1, maximum = 500)]
    pub per_page: Option<u32>,
    /// The final metric on the search result's parallel coordinates (page only; default: the
    /// first metric column, else `train/loss`).
    pub pc: Option<String>,
}

/// One row of the experiments list.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ListRow {
    /// Experiment id.
    pub id: String,
    /// Title.
    pub title: Option<String>,
    /// Status.
    pub status: String,
    /// Author.
    pub author: Option<String>,
    /// Tags.
    pub tags: Vec<String>,
    /// Spec hash.
    pub spec_hash: Option<String>,
    /// Number of runs.
    pub runs: usize,
    /// Latest run.
    pub latest_run: Option<String>,
    /// Latest run's final `train/loss`.
    pub final_loss: Option<f64>,
    /// Latest run's forecast outcome.
    pub forecast_hit: Option<bool>,
    /// Anomalies flagged in the latest run.
    pub anomalies: u32,
    /// Time of the last entry.
    pub updated: String,
}

/// A page of rows.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ListPage {
    /// Rows matching the filter, in all pages.
    pub total: usize,
    /// This page, from 1.
    pub page: u32,
    /// Rows per page.
    pub per_page: u32,
    /// The rows.
    pub items: Vec<ListRow>,
}

/// The sort columns of [`ExperimentFilter::sort`] as the OpenAPI document lists them; the
/// handler checks against [`SORT_COLUMNS`], and a test holds the two equal.
#[derive(Debug, Clone, Copy, utoipa::ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum SortColumn {
    Id,
    Title,
    Status,
    Author,
    Runs,
    FinalLoss,
    Forecast,
    SpecHash,
    Updated,
}

/// [`ExperimentFilter::dir`] as the OpenAPI document lists it.
#[derive(Debug, Clone, Copy, utoipa::ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum SortDirection {
    Asc,
    Desc,
}

/// Sort columns accepted by [`ExperimentFilter::sort`].
pub const SORT_COLUMNS: &[&str] = &[
    "id",
    "title",
    "status",
    "author",
    "runs",
    "final_loss",
    "forecast",
    "spec_hash",
    "updated",
];

impl CatalogData {
    /// The experiments list: filtered, sorted, one page. `f.q` is not read here: the caller
    /// runs the query on the index ([`crate::search`]) and passes the experiments it matched as
    /// `only`.
    pub fn list(
        &self,
        f: &ExperimentFilter,
        only: Option<&std::collections::BTreeSet<String>>,
    ) -> Result<ListPage, WebError> {
        let sort = f.sort.as_deref().unwrap_or("updated");
        if !SORT_COLUMNS.contains(&sort) {
            return Err(WebError::BadRequest(format!(
                "sort={sort:?} is not a column; use one of {}",
                SORT_COLUMNS.join(", ")
            )));
        }
        let desc = match f.dir.as_deref().unwrap_or("desc") {
            "asc" => false,
            "desc" => true,
            other => {
                return Err(WebError::BadRequest(format!(
                    "dir={other:?}: use asc or desc"
                )));
            }
        };
        let per_page = match f.per_page {
            Some(n) => crate::extract::within("per_page", u64::from(n), 1, 500)? as u32,
            None => 50,
        };
        let page = match f.page {
            Some(n) => crate::extract::within("page", u64::from(n), 1, i32::MAX as u64)? as u32,
            None => 1,
        };
        let author = f
            .author
            .as_deref()
            .map(str::to_lowercase)
            .filter(|s| !s.is_empty());
        let status = f.status.as_deref().filter(|s| !s.is_empty());
        let tag = f.tag.as_deref().filter(|s| !s.is_empty());
        // Keys are computed once per experiment and rows built for the page only: with 10,000
        // experiments, cloning every row and every key per comparison was most of a list's time.
        // A search names its experiments: only those are looked up, not every one tested.
        let candidates: Box<dyn Iterator<Item = &ExperimentRow>> = match only {
            Some(ids) => Box::new(ids.iter().filter_map(|id| self.experiments.get(id))),
            None => Box::new(self.experiments.values()),
        };
        let picked: Vec<&ExperimentRow> = candidates
            .filter(|e| tag.is_none_or(|t| e.tags().iter().any(|x| x == t)))
            .filter(|e| {
                author
                    .as_deref()
                    .is_none_or(|a| e.author.as_deref().is_some_and(|x| x.to_lowercase() == a))
            })
            .filter(|e| status.is_none_or(|s| e.phase(self).as_str() == s))
            .collect();
        let key_f = |e: &ExperimentRow| -> Option<f64> {
            let latest = e.latest_run(self);
            match sort {
                "final_loss" => latest.and_then(|r| {
                    r.final_metrics
                        .get(glassbox_schemas::metrics::TRAIN_LOSS)
                        .copied()
                }),
                "runs" => Some(e.runs.len() as f64),
                "forecast" => latest
                    .and_then(|r| r.forecast.as_ref())
                    .map(|f| if f.hit { 1.0 } else { 0.0 }),
                _ => None,
            }
        };
        // Borrowed where the key is the field as it is (the default, `updated`, included).
        fn key_s<'a>(sort: &str, e: &'a ExperimentRow, data: &'a CatalogData) -> Cow<'a, str> {
            match sort {
                "id" => Cow::Borrowed(e.id.as_str()),
                "title" => Cow::Owned(e.title.as_deref().unwrap_or_default().to_lowercase()),
                "status" => Cow::Borrowed(e.phase(data).as_str()),
                "author" => Cow::Owned(e.author.as_deref().unwrap_or_default().to_lowercase()),
                "spec_hash" => Cow::Borrowed(e.spec_hash.as_deref().unwrap_or_default()),
                _ => Cow::Borrowed(e.updated.as_str()),
            }
        }
        let mut order: Vec<&ExperimentRow> = if matches!(sort, "final_loss" | "runs" | "forecast") {
            let mut keyed: Vec<(Option<f64>, &ExperimentRow)> =
                picked.into_iter().map(|e| (key_f(e), e)).collect();
            // Missing values sort last whatever the direction.
            keyed.sort_by(|(ka, a), (kb, b)| match (ka, kb) {
                (Some(x), Some(y)) => {
                    let o = x.total_cmp(y);
                    if desc { o.reverse() } else { o }
                }
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => a.id.cmp(&b.id),
            });
            keyed.into_iter().map(|(_, e)| e).collect()
        } else {
            let mut keyed: Vec<(Cow<'_, str>, &ExperimentRow)> = picked
                .into_iter()
                .map(|e| (key_s(sort, e, self), e))
                .collect();
            keyed.sort_by(|(ka, a), (kb, b)| {
                let o = ka.cmp(kb).then_with(|| a.id.cmp(&b.id));
                if desc { o.reverse() } else { o }
            });
            keyed.into_iter().map(|(_, e)| e).collect()
        };
        let total = order.len();
        let start = ((page - 1) as usize).saturating_mul(per_page as usize);
        let items = order
            .drain(..)
            .skip(start)
            .take(per_page as usize)
            .map(|e| self.list_row(e))
            .collect();
        Ok(ListPage {
            total,
            page,
            per_page,
            items,
        })
    }

    /// The list row of one experiment.
    pub fn list_row(&self, e: &ExperimentRow) -> ListRow {
        let latest = e.latest_run(self);
        ListRow {
            id: e.id.clone(),
            title: e.title.clone(),
            status: e.status(self),
            author: e.author.clone(),
            tags: e.tags().to_vec(),
            spec_hash: e.spec_hash.clone(),
            runs: e.runs.len(),
            latest_run: latest.map(|r| r.id.clone()),
            final_loss: latest.and_then(|r| {
                r.final_metrics
                    .get(glassbox_schemas::metrics::TRAIN_LOSS)
                    .copied()
            }),
            forecast_hit: latest.and_then(|r| r.forecast.as_ref().map(|f| f.hit)),
            anomalies: latest.map_or(0, |r| r.anomalies),
            updated: e.updated.clone(),
        }
    }

    /// Sweeps whose promotion gate failed (a negative result), newest decision first.
    pub fn failed_gates(&self) -> Vec<&SweepRow> {
        let mut v: Vec<&SweepRow> = self
            .sweeps
            .values()
            .filter(|s| s.gate_state() == "failed")
            .collect();
        v.sort_by_key(|s| std::cmp::Reverse(s.decision.as_ref().map(|d| d.entry)));
        v
    }

    /// Runs that diverged, failed, ran out of budget, or missed their forecast, newest first.
    pub fn negative(&self) -> Vec<&RunRow> {
        let mut v: Vec<&RunRow> = self
            .runs
            .values()
            .filter(|r| {
                matches!(
                    r.status.ended(),
                    Some(RunStatus::Diverged | RunStatus::Failed | RunStatus::BudgetExceeded)
                ) || r.forecast.as_ref().is_some_and(|f| !f.hit)
            })
            .collect();
        v.sort_by_key(|r| std::cmp::Reverse(r.result_entry));
        v
    }
}
