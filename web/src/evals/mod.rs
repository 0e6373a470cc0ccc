//! Evaluations on the dashboard: a run's `evaluation` entries (the run page's "Evaluations"
//! section and `/api/v1/runs/{run}/evaluations`, [`run`]), the board of every run's latest
//! valid result per suite version (`/evals` and `/api/v1/evals`, [`board`]), and the stored
//! suites (`eval_suite` entries, `/api/v1/eval-suites`).
//!
//! The rules every view here keeps: only an `evaluated` entry is a result (a `failed` or
//! `cancelled` one is listed as what it is, never as a value); of several entries for one
//! snapshot step and suite version the newest counts; and a suite's versions (its items'
//! hashes) are never mixed, so two versions of one suite are two charts and two columns.
//! Suite names, details and sources come from the log: they reach the pages through maud
//! (escaped). Not here: running evaluations or storing suites (the lab's worker), ranking a
//! leaderboard by an evaluation metric (`glassbox_ledger::board`).

pub mod board;
pub mod run;

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use glassbox_ledger::index::IndexedEntry;
use glassbox_ledger::index::queries::EntryFilter;
use glassbox_schemas::eval::{EvalKind, SuiteName};
use glassbox_schemas::record::EntryBody;
use glassbox_schemas::record::{Contamination, EvalOutcome};
use glassbox_schemas::{EntryKind, LedgerEntry, RefRole};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::WebState;
use crate::error::WebError;
use crate::extract::ApiQuery;

/// `evaluation` entries read for one run at most (the newest).
pub const MAX_RUN_ENTRIES: u32 = 2000;
/// `evaluation` entries read for the board at most (the newest).
pub const MAX_BOARD_ENTRIES: u32 = 20_000;
/// `eval_suite` entries listed at most (the newest).
pub const MAX_SUITE_ENTRIES: u32 = 1000;

/// What a suite measures (the record's `EvalKind`, as the API documents it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SuiteKind {
    /// Texts: bits per byte (the headline), negative log-likelihood, perplexity; lower is
    /// better.
    Perplexity,
    /// A context and choices: length-normalised accuracy (the headline), accuracy and their
    /// standard errors; higher is better.
    MultipleChoice,
}

impl From<EvalKind> for SuiteKind {
    fn from(k: EvalKind) -> Self {
        match k {
            EvalKind::Perplexity => SuiteKind::Perplexity,
            EvalKind::MultipleChoice => SuiteKind::MultipleChoice,
        }
    }
}

impl SuiteKind {
    /// The record's kind.
    pub fn eval_kind(self) -> EvalKind {
        match self {
            SuiteKind::Perplexity => EvalKind::Perplexity,
            SuiteKind::MultipleChoice => EvalKind::MultipleChoice,
        }
    }

    /// The word on the wire.
    pub fn as_str(self) -> &'static str {
        self.eval_kind().as_str()
    }

    /// The metrics its evaluations report, headline first.
    pub fn metrics(self) -> &'static [&'static str] {
        self.eval_kind().metrics()
    }

    /// The metric a chart or a board column shows.
    pub fn headline(self) -> &'static str {
        self.metrics()[0]
    }
}

/// How an evaluation ended (the record's `EvalOutcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Every item was scored: the metrics are a result.
    Evaluated,
    /// It could not be done (`detail` says why): not a result.
    Failed,
    /// A maintainer cancelled it: not a result.
    Cancelled,
}

impl From<EvalOutcome> for Outcome {
    fn from(o: EvalOutcome) -> Self {
        match o {
            EvalOutcome::Evaluated => Outcome::Evaluated,
            EvalOutcome::Failed => Outcome::Failed,
            EvalOutcome::Cancelled => Outcome::Cancelled,
        }
    }
}

impl Outcome {
    /// The word on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Evaluated => "evaluated",
            Outcome::Failed => "failed",
            Outcome::Cancelled => "cancelled",
        }
    }
}

/// How many of the suite's items share an n-gram with what the run trained on.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ContaminationFigure {
    /// Tokens per shared n-gram that flag an item (13, as in the GPT-3 paper).
    pub ngram: u32,
    /// Items flagged.
    pub flagged: u64,
    /// Items scored (what `fraction` is of).
    pub items: u64,
    /// `flagged / items`.
    pub fraction: f64,
    /// Items too short to hold one n-gram (never flagged).
    pub too_short: u64,
    /// Training tokens checked, every domain together.
    pub tokens_checked: u64,
    /// The first flagged items' indices (the per-item results list every one).
    pub first_flagged: Vec<u64>,
}

impl ContaminationFigure {
    fn of(c: &Contamination, items: u64) -> Self {
        ContaminationFigure {
            ngram: c.ngram,
            flagged: c.flagged,
            items,
            fraction: c.fraction,
            too_short: c.too_short,
            tokens_checked: c
                .tokens_checked
                .values()
                .fold(0u64, |a, b| a.saturating_add(*b)),
            first_flagged: c.first_flagged.clone(),
        }
    }

    /// The share flagged as a percentage: `1.0%`.
    pub fn percent(&self) -> String {
        percent(self.fraction)
    }
}

/// A fraction as a percentage with one decimal: `0.01` is `1.0%`.
pub fn percent(fraction: f64) -> String {
    if fraction.is_finite() {
        format!("{:.1}%", fraction * 100.0)
    } else {
        "–".into()
    }
}

/// One `evaluation` entry: a snapshot of a run on one version of a suite, or how the attempt
/// ended.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Evaluation {
    /// Its `evaluation` entry (`/api/v1/entries/{entry}`).
    pub entry: u64,
    /// When it was recorded (RFC 3339).
    pub time: String,
    /// The run.
    pub run: String,
    /// The run's experiment.
    pub experiment: Option<String>,
    /// Steps completed at the snapshot.
    pub step: u64,
    /// Tokens trained on at the step (the run's `throughput/total_tokens`), where recorded;
    /// only in a run's evaluations.
    pub tokens: Option<f64>,
    /// Training FLOPs at the step (`tokens` times the spec's FLOPs per token); only in a run's
    /// evaluations.
    pub flops: Option<f64>,
    /// The snapshot's blob.
    pub snapshot: String,
    /// The suite's name.
    pub suite: String,
    /// The suite's version (its items' hash).
    pub version: String,
    /// What the suite measures.
    pub kind: SuiteKind,
    /// How it ended; only `evaluated` is a result.
    pub outcome: Outcome,
    /// Why, when it did not end `evaluated`.
    pub detail: Option<String>,
    /// Items scored.
    pub items: u64,
    /// The metrics (empty unless `evaluated`).
    pub metrics: BTreeMap<String, f64>,
    /// The suite against the run's training data, where it was checked.
    pub contamination: Option<ContaminationFigure>,
    /// The per-item results' blob (`/blobs/{results}`), where there are results.
    pub results: Option<String>,
    /// Queued by the lab's or the spec's `[evals]`, not asked for.
    pub automatic: bool,
    /// The worker that evaluated it.
    pub worker: Option<String>,
    /// Older `evaluated` entries of the same step and suite version that this one replaces
    /// (a re-evaluation); only in a run's evaluations.
    pub replaces: Vec<u64>,
}

impl Evaluation {
    /// The entry of index row `r`, when it is an `evaluation` entry that parses.
    pub fn of(r: &IndexedEntry) -> Option<Self> {
        let e = LedgerEntry::from_bytes(r.entry.as_bytes()).ok()?;
        let results = e
            .refs
            .get(RefRole::Artifact.as_str())
            .map(|h| h.to_string());
        let EntryBody::Evaluation(b) = e.body else {
            return None;
        };
        Some(Evaluation {
            entry: r.index,
            time: r.time.clone(),
            run: b.run.0,
            experiment: e.experiment.map(|x| x.0),
            step: b.step,
            tokens: None,
            flops: None,
            snapshot: b.snapshot.to_string(),
            suite: b.suite.to_string(),
            version: b.suite_hash.to_string(),
            kind: b.kind.into(),
            outcome: b.outcome.into(),
            detail: b.detail,
            items: b.items,
            contamination: b
                .contamination
                .as_ref()
                .map(|c| ContaminationFigure::of(c, b.items)),
            metrics: b.metrics,
            results,
            automatic: b.automatic,
            worker: b.worker,
            replaces: Vec::new(),
        })
    }

    /// The value of the suite's headline metric, when this is a result that has it.
    pub fn headline(&self) -> Option<f64> {
        self.value(self.kind.headline())
    }

    /// The value of `metric`, when this is a result that has it (finite).
    pub fn value(&self, metric: &str) -> Option<f64> {
        if self.outcome != Outcome::Evaluated {
            return None;
        }
        self.metrics.get(metric).copied().filter(|v| v.is_finite())
    }

    /// The standard error the result gives for `metric` (`acc` has `acc_stderr`).
    pub fn stderr(&self, metric: &str) -> Option<f64> {
        self.value(&format!("{metric}_stderr"))
    }
}

/// The `evaluation` entries of `run` (every run's when `None`), newest first, at most `limit`;
/// and whether there were more.
pub async fn read_evaluations(
    st: &WebState,
    run: Option<&str>,
    limit: u32,
) -> Result<(Vec<Evaluation>, bool), WebError> {
    let rows = st
        .index
        .select_entries(&EntryFilter {
            run,
            kinds: &[EntryKind::Evaluation],
            newest_first: true,
            limit: Some(limit.saturating_add(1)),
            ..EntryFilter::default()
        })
        .await?;
    let more = rows.len() > limit as usize;
    Ok((
        rows.iter()
            .take(limit as usize)
            .filter_map(Evaluation::of)
            .collect(),
        more,
    ))
}

/// One stored version of a suite (an `eval_suite` entry).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SuiteRow {
    /// Its `eval_suite` entry.
    pub entry: u64,
    /// When it was stored (RFC 3339).
    pub time: String,
    /// The suite's name (several versions may share it).
    pub name: String,
    /// What it measures.
    pub kind: SuiteKind,
    /// Items it holds.
    pub items: u64,
    /// This version: the items' blob hash, which every evaluation on it names.
    pub version: String,
    /// The licence of its items, as the importer declared it.
    pub licence: Option<String>,
    /// Where the items came from (a URL, or the command that generated them).
    pub source: Option<String>,
}

impl SuiteRow {
    fn of(r: &IndexedEntry) -> Option<Self> {
        let e = LedgerEntry::from_bytes(r.entry.as_bytes()).ok()?;
        let EntryBody::EvalSuite(b) = e.body else {
            return None;
        };
        Some(SuiteRow {
            entry: r.index,
            time: r.time.clone(),
            name: b.name.to_string(),
            kind: b.kind.into(),
            items: b.items,
            version: b.suite.to_string(),
            licence: b.licence,
            source: b.source,
        })
    }
}

/// Every `eval_suite` entry (the newest [`MAX_SUITE_ENTRIES`]), in log order.
pub async fn read_suites(st: &WebState) -> Result<Vec<SuiteRow>, WebError> {
    let rows = st
        .index
        .select_entries(&EntryFilter {
            kinds: &[EntryKind::EvalSuite],
            newest_first: true,
            limit: Some(MAX_SUITE_ENTRIES),
            ..EntryFilter::default()
        })
        .await?;
    let mut out: Vec<SuiteRow> = rows.iter().filter_map(SuiteRow::of).collect();
    out.reverse();
    Ok(out)
}

/// A suite name given as a parameter: a 400 naming `field` when it cannot be one.
pub fn suite_param(field: &str, value: Option<&str>) -> Result<Option<SuiteName>, WebError> {
    match value {
        None => Ok(None),
        Some(v) => v
            .parse::<SuiteName>()
            .map(Some)
            .map_err(|e| WebError::BadRequest(format!("{field} = {v:?}: {e}"))),
    }
}

/// Which stored suites to list.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct SuiteQuery {
    /// Only the versions of this suite (a name: 1 to 64 of `a-z`, `0-9`, `.`, `_`, `-`).
    #[param(pattern = r"^[a-z0-9][a-z0-9._-]{0,63}$")]
    pub name: Option<String>,
    /// Only suites of this kind.
    pub kind: Option<SuiteKind>,
}

/// Every stored evaluation suite version (`eval_suite` entries), in log order.
#[utoipa::path(get, path = "/api/v1/eval-suites", params(SuiteQuery),
    responses((status = 200, body = Vec<SuiteRow>),
        (status = 400, content_type = "text/plain", description = "a malformed suite name, an unknown kind or an unknown parameter, named in the body")))]
pub async fn eval_suites(
    State(st): State<WebState>,
    ApiQuery(q): ApiQuery<SuiteQuery>,
) -> Result<Json<Vec<SuiteRow>>, WebError> {
    let name = suite_param("name", q.name.as_deref())?;
    let rows = read_suites(&st)
        .await?
        .into_iter()
        .filter(|s| name.as_ref().is_none_or(|n| s.name == n.as_str()))
        .filter(|s| q.kind.is_none_or(|k| s.kind == k))
        .collect();
    Ok(Json(rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_have_one_decimal() {
        assert_eq!(percent(0.01), "1.0%");
        assert_eq!(percent(f64::NAN), "–");
    }

    #[test]
    fn kinds_name_their_headline() {
        assert_eq!(SuiteKind::MultipleChoice.headline(), "acc_norm");
        assert_eq!(SuiteKind::Perplexity.headline(), "bpb");
        assert_eq!(
            SuiteKind::from(EvalKind::MultipleChoice).as_str(),
            "multiple_choice"
        );
    }
}
