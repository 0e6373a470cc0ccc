//! The evaluation board: runs × suite versions, each cell a run's latest valid result on that
//! version — the suite's headline metric at the highest evaluated snapshot step, the newest
//! `evaluated` entry of that step — with the share of the suite's items found in the run's
//! training data. [`fold`] derives it from evaluations (a pure function, so the rules are
//! tested without a lab), [`load`] reads them and adds what the catalog knows of each run, and
//! [`evals`] serves it as `/api/v1/evals` (the page is `pages::evals`).
//!
//! Its rules: a column is one version of one suite (two versions of a suite are two columns,
//! never averaged); a run without a result on a version has no cell there (`null`, a blank,
//! never a zero); a `failed` or `cancelled` evaluation is not a result. The work is bounded:
//! the newest [`super::MAX_BOARD_ENTRIES`] entries, [`MAX_BOARD_COLUMNS`] versions (the most
//! recently evaluated) and [`MAX_BOARD_RUNS`] runs, each cut said in the answer.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use axum::Json;
use axum::extract::State;
use glassbox_schemas::eval::{EvalKind, SuiteName};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{Evaluation, MAX_BOARD_ENTRIES, SuiteKind, read_evaluations, read_suites, suite_param};
use crate::WebState;
use crate::error::WebError;
use crate::extract::{ApiQuery, within};

/// Runs shown at most (the `limit` parameter's default and largest value).
pub const MAX_BOARD_RUNS: u64 = 100;
/// Suite versions shown at most (the most recently evaluated).
pub const MAX_BOARD_COLUMNS: usize = 24;
/// Hex digits of a version in a column's key and heading.
const SHORT_VERSION: usize = 12;

/// Which board to draw.
#[derive(Debug, Default, Clone, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct BoardQuery {
    /// Only this suite's versions (a name: 1 to 64 of `a-z`, `0-9`, `.`, `_`, `-`).
    #[param(pattern = r"^[a-z0-9][a-z0-9._-]{0,63}$")]
    pub suite: Option<String>,
    /// Only suites of this kind.
    pub kind: Option<SuiteKind>,
    /// Rank the runs by this column (a column's `key`, `SUITE@VERSION`), best first; without
    /// it, the run with the newest result comes first.
    pub sort: Option<String>,
    /// Runs shown at most (1 to 100; default 100).
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<u64>,
}

/// One version of one suite.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct BoardColumn {
    /// `SUITE@VERSION` (the version's first 12 hex digits): what `sort` takes.
    pub key: String,
    /// The suite's name.
    pub suite: String,
    /// The version (the items' hash).
    pub version: String,
    /// What it measures.
    pub kind: SuiteKind,
    /// The metric in its cells (the kind's headline).
    pub metric: String,
    /// Whether a higher value is better.
    pub higher_is_better: bool,
    /// Items in the suite, from its `eval_suite` entry (absent when that entry was not read).
    pub items: Option<u64>,
    /// Its `eval_suite` entry.
    pub suite_entry: Option<u64>,
    /// Runs with a result on it (before the `limit` on rows).
    pub runs: usize,
    /// The lowest value among the rows shown (the colour scale's end).
    pub lo: Option<f64>,
    /// The highest value among the rows shown.
    pub hi: Option<f64>,
}

impl BoardColumn {
    /// Where `v` sits on this column's own scale, 0 (worst) to 8 (best); `None` when the
    /// column's values do not spread (one run, or all equal).
    pub fn shade(&self, v: f64) -> Option<u8> {
        let (lo, hi) = (self.lo?, self.hi?);
        if !(hi - lo > 1e-12 && v.is_finite()) {
            return None;
        }
        let t = ((v - lo) / (hi - lo)).clamp(0.0, 1.0);
        let t = if self.higher_is_better { t } else { 1.0 - t };
        Some((t * 8.0).round() as u8)
    }
}

/// A run's result on one suite version.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct BoardCell {
    /// The headline metric.
    pub value: f64,
    /// Its standard error, where the kind reports one.
    pub stderr: Option<f64>,
    /// The snapshot step evaluated.
    pub step: u64,
    /// The `evaluation` entry.
    pub entry: u64,
    /// Items scored.
    pub items: u64,
    /// Share of the items that share an n-gram with the run's training data (absent: not
    /// checked).
    pub contamination: Option<f64>,
    /// Items flagged.
    pub flagged: Option<u64>,
    /// Tokens per shared n-gram.
    pub ngram: Option<u32>,
}

impl BoardCell {
    fn of(e: &Evaluation, value: f64) -> Self {
        BoardCell {
            value,
            stderr: e.stderr(e.kind.headline()),
            step: e.step,
            entry: e.entry,
            items: e.items,
            contamination: e.contamination.as_ref().map(|c| c.fraction),
            flagged: e.contamination.as_ref().map(|c| c.flagged),
            ngram: e.contamination.as_ref().map(|c| c.ngram),
        }
    }
}

/// One run on the board.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct BoardRow {
    /// The run.
    pub run: String,
    /// Its experiment.
    pub experiment: Option<String>,
    /// Its status (`running`, `succeeded`, ...), where the catalog knows the run.
    pub status: Option<String>,
    /// One per column, in the columns' order: `null` where the run has no result on it.
    pub cells: Vec<Option<BoardCell>>,
}

/// The board.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct EvalBoard {
    /// Suite versions, by suite name, the newest version of a suite first.
    pub columns: Vec<BoardColumn>,
    /// Runs: ranked by `sort`'s column when given, else the newest result first.
    pub rows: Vec<BoardRow>,
    /// The column the rows are ranked by.
    pub sort: Option<String>,
    /// Runs with a result on a shown column (before `limit`).
    pub runs_total: usize,
    /// Suite versions with a result (before the cap of 24).
    pub columns_total: usize,
    /// `evaluation` entries read.
    pub entries_read: usize,
    /// Whether the log holds more `evaluation` entries than were read (the newest 20,000).
    pub entries_truncated: bool,
}

/// A column as it is gathered: an evaluation naming its version, its newest result entry, the
/// version's age (the entry that stored it, or else the first that evaluated on it) and how
/// many runs have a result on it.
struct Column<'a> {
    named: &'a Evaluation,
    newest: u64,
    age: u64,
    runs: usize,
}

/// A column's key: `SUITE@` and the version's first hex digits.
pub fn column_key(suite: &str, version: &str) -> String {
    let hex = version.strip_prefix("blake3:").unwrap_or(version);
    format!("{suite}@{}", &hex[..hex.len().min(SHORT_VERSION)])
}

/// The board of `evaluations` (any order) that `suite` and `kind` keep, ranked by `sort`'s
/// column, at most `limit` rows; a `sort` naming no column is a 400 listing the keys.
/// `stored` is each version's `eval_suite` entry, where known: of two versions of a suite, the
/// one stored later is the newer (without it, the one first evaluated later).
pub fn fold(
    evaluations: &[Evaluation],
    stored: &HashMap<String, u64>,
    suite: Option<&SuiteName>,
    kind: Option<SuiteKind>,
    sort: Option<&str>,
    limit: usize,
) -> Result<EvalBoard, WebError> {
    // The latest valid result per (run, version): highest step, then newest entry.
    let mut best: HashMap<(&str, &str), (&Evaluation, f64)> = HashMap::new();
    for e in evaluations {
        if suite.is_some_and(|s| s.as_str() != e.suite) || kind.is_some_and(|k| k != e.kind) {
            continue;
        }
        let Some(v) = e.headline() else { continue };
        match best.entry((&e.run, &e.version)) {
            Entry::Vacant(slot) => {
                slot.insert((e, v));
            }
            Entry::Occupied(mut slot) => {
                let held = slot.get().0;
                if (e.step, e.entry) > (held.step, held.entry) {
                    slot.insert((e, v));
                }
            }
        }
    }
    let mut first_seen: HashMap<&str, u64> = HashMap::new();
    for e in evaluations {
        let f = first_seen.entry(&e.version).or_insert(e.entry);
        *f = (*f).min(e.entry);
    }
    // Columns. The cap keeps the most recently evaluated versions; of one suite, the newer
    // version comes first.
    let mut by_version: HashMap<&str, Column> = HashMap::new();
    for (e, _) in best.values() {
        let c = by_version.entry(&e.version).or_insert_with(|| Column {
            named: e,
            newest: e.entry,
            age: stored
                .get(&e.version)
                .or(first_seen.get(e.version.as_str()))
                .copied()
                .unwrap_or(e.entry),
            runs: 0,
        });
        c.newest = c.newest.max(e.entry);
        c.runs += 1;
    }
    let columns_total = by_version.len();
    let mut cols: Vec<Column> = by_version.into_values().collect();
    cols.sort_by_key(|c| std::cmp::Reverse(c.newest));
    cols.truncate(MAX_BOARD_COLUMNS);
    cols.sort_by(|a, b| a.named.suite.cmp(&b.named.suite).then(b.age.cmp(&a.age)));
    let mut columns: Vec<BoardColumn> = cols
        .iter()
        .map(|&Column { named: e, runs, .. }| BoardColumn {
            key: column_key(&e.suite, &e.version),
            suite: e.suite.clone(),
            version: e.version.clone(),
            kind: e.kind,
            metric: e.kind.headline().to_string(),
            higher_is_better: EvalKind::higher_is_better(e.kind.headline()),
            items: None,
            suite_entry: None,
            runs,
            lo: None,
            hi: None,
        })
        .collect();
    let column_of: HashMap<&str, usize> = cols
        .iter()
        .enumerate()
        .map(|(i, c)| (c.named.version.as_str(), i))
        .collect();
    let sort_column = match sort {
        None => None,
        Some(key) => Some(columns.iter().position(|c| c.key == key).ok_or_else(|| {
            WebError::BadRequest(format!(
                "sort = {key:?}: no column has that key; use one of {}",
                if columns.is_empty() {
                    "none (the board has no column)".to_string()
                } else {
                    columns
                        .iter()
                        .map(|c| c.key.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            ))
        })?),
    };
    // Rows: (run, experiment, newest entry, cells).
    type Row<'a> = (&'a str, Option<&'a str>, u64, Vec<Option<BoardCell>>);
    let mut rows: HashMap<&str, Row> = HashMap::new();
    for ((run, version), (e, v)) in &best {
        let Some(&i) = column_of.get(version) else {
            continue;
        };
        let row = rows
            .entry(run)
            .or_insert_with(|| (run, None, 0, vec![None; columns.len()]));
        row.1 = row.1.or(e.experiment.as_deref());
        row.2 = row.2.max(e.entry);
        row.3[i] = Some(BoardCell::of(e, *v));
    }
    let mut rows: Vec<Row> = rows.into_values().collect();
    rows.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(b.0)));
    if let Some(i) = sort_column {
        let higher = columns[i].higher_is_better;
        // Stable: runs without a value keep the newest-first order below the ranked ones.
        rows.sort_by(|a, b| match (&a.3[i], &b.3[i]) {
            (Some(x), Some(y)) if higher => y.value.total_cmp(&x.value),
            (Some(x), Some(y)) => x.value.total_cmp(&y.value),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => std::cmp::Ordering::Equal,
        });
    }
    let runs_total = rows.len();
    rows.truncate(limit);
    for (i, c) in columns.iter_mut().enumerate() {
        for (_, _, _, cells) in &rows {
            if let Some(cell) = &cells[i] {
                c.lo = Some(c.lo.map_or(cell.value, |lo| lo.min(cell.value)));
                c.hi = Some(c.hi.map_or(cell.value, |hi| hi.max(cell.value)));
            }
        }
    }
    Ok(EvalBoard {
        columns,
        rows: rows
            .into_iter()
            .map(|(run, experiment, _, cells)| BoardRow {
                run: run.to_string(),
                experiment: experiment.map(str::to_string),
                status: None,
                cells,
            })
            .collect(),
        sort: sort.map(str::to_string),
        runs_total,
        columns_total,
        entries_read: evaluations.len(),
        entries_truncated: false,
    })
}

/// The board `q` asks for, from the newest evaluation entries, with each column's suite
/// entry and each run's status.
pub async fn load(st: &WebState, q: &BoardQuery) -> Result<EvalBoard, WebError> {
    let suite = suite_param("suite", q.suite.as_deref())?;
    let limit = match q.limit {
        Some(l) => within("limit", l, 1, MAX_BOARD_RUNS)?,
        None => MAX_BOARD_RUNS,
    };
    let (evaluations, truncated) = read_evaluations(st, None, MAX_BOARD_ENTRIES).await?;
    let suites = read_suites(st).await?;
    let mut stored: HashMap<String, u64> = HashMap::new();
    for s in &suites {
        stored.entry(s.version.clone()).or_insert(s.entry);
    }
    let mut board = fold(
        &evaluations,
        &stored,
        suite.as_ref(),
        q.kind,
        q.sort.as_deref(),
        limit as usize,
    )?;
    board.entries_truncated = truncated;
    for c in &mut board.columns {
        if let Some(s) = suites.iter().rev().find(|s| s.version == c.version) {
            c.items = Some(s.items);
            c.suite_entry = Some(s.entry);
        }
    }
    let cat = st.catalog.read(&st.index, st.blobs.as_ref()).await?;
    for r in &mut board.rows {
        if let Some(row) = cat.runs.get(&r.run) {
            r.status = Some(row.status.as_str().to_string());
            if r.experiment.is_none() {
                r.experiment = row.experiment.clone();
            }
        }
    }
    Ok(board)
}

/// Every run's latest valid evaluation result per suite version: columns (suite name,
/// version, kind, headline metric), rows (a run and one cell or `null` per column).
#[utoipa::path(get, path = "/api/v1/evals", params(BoardQuery),
    responses((status = 200, body = EvalBoard),
        (status = 400, content_type = "text/plain", description = "a malformed suite name, an unknown kind, a sort key naming no column, a limit out of range or an unknown parameter, named in the body")))]
pub async fn evals(
    State(st): State<WebState>,
    ApiQuery(q): ApiQuery<BoardQuery>,
) -> Result<Json<EvalBoard>, WebError> {
    Ok(Json(load(&st, &q).await?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evals::Outcome;
    use std::collections::BTreeMap;

    fn ev(entry: u64, run: &str, suite: &str, version: &str, step: u64, acc: f64) -> Evaluation {
        Evaluation {
            entry,
            time: "t".into(),
            run: run.into(),
            experiment: None,
            step,
            tokens: None,
            flops: None,
            snapshot: "blake3:00".into(),
            suite: suite.into(),
            version: version.into(),
            kind: SuiteKind::MultipleChoice,
            outcome: Outcome::Evaluated,
            detail: None,
            items: 100,
            metrics: BTreeMap::from([("acc_norm".to_string(), acc)]),
            contamination: None,
            results: None,
            automatic: true,
            worker: None,
            replaces: Vec::new(),
        }
    }

    fn values(b: &EvalBoard) -> Vec<(String, Vec<Option<f64>>)> {
        b.rows
            .iter()
            .map(|r| {
                (
                    r.run.clone(),
                    r.cells
                        .iter()
                        .map(|c| c.as_ref().map(|c| c.value))
                        .collect(),
                )
            })
            .collect()
    }

    /// Two versions are two columns; the latest step wins over a newer entry of an older step;
    /// a failure is no result; a missing suite is `None`.
    #[test]
    fn versions_are_columns_and_failures_are_not_results() {
        let mut failed = ev(10, "a", "mc", "blake3:bbbb", 400, 0.0);
        failed.outcome = Outcome::Failed;
        failed.metrics.clear();
        let evals = vec![
            ev(1, "a", "mc", "blake3:aaaa", 100, 0.5),
            ev(2, "a", "mc", "blake3:aaaa", 200, 0.6),
            ev(3, "a", "mc", "blake3:bbbb", 200, 0.7),
            ev(4, "b", "mc", "blake3:aaaa", 200, 0.4),
            ev(5, "a", "mc", "blake3:aaaa", 100, 0.9),
            failed,
        ];
        let b = fold(&evals, &HashMap::new(), None, None, None, 100).unwrap();
        let keys: Vec<&str> = b.columns.iter().map(|c| c.key.as_str()).collect();
        assert_eq!(keys, ["mc@bbbb", "mc@aaaa"], "the newer version first");
        assert_eq!(
            values(&b),
            [
                ("b".to_string(), vec![None, Some(0.4)]),
                ("a".to_string(), vec![Some(0.7), Some(0.6)]),
            ],
            "the run whose shown result is newest first"
        );
        assert_eq!((b.columns[1].lo, b.columns[1].hi), (Some(0.4), Some(0.6)));
        assert_eq!(b.columns[1].shade(0.6), Some(8));
        assert_eq!(b.columns[1].shade(0.4), Some(0));
        assert_eq!(b.columns[0].shade(0.7), None, "one value does not spread");
    }

    #[test]
    fn sort_ranks_by_a_column_and_refuses_unknown_keys() {
        let evals = vec![
            ev(1, "a", "mc", "blake3:aaaa", 100, 0.5),
            ev(2, "b", "mc", "blake3:aaaa", 100, 0.8),
            ev(3, "c", "pp", "blake3:cccc", 100, 0.1),
        ];
        let b = fold(&evals, &HashMap::new(), None, None, Some("mc@aaaa"), 100).unwrap();
        let runs: Vec<&str> = b.rows.iter().map(|r| r.run.as_str()).collect();
        assert_eq!(runs, ["b", "a", "c"], "blank last");
        let e = fold(&evals, &HashMap::new(), None, None, Some("mc@ffff"), 100).unwrap_err();
        assert!(
            e.to_string().contains("sort = \"mc@ffff\"") && e.to_string().contains("mc@aaaa"),
            "{e}"
        );
        let only: SuiteName = "pp".parse().unwrap();
        let b = fold(&evals, &HashMap::new(), Some(&only), None, None, 1).unwrap();
        assert_eq!(values(&b), [("c".to_string(), vec![Some(0.1)])]);
        let b = fold(&evals, &HashMap::new(), None, None, None, 1).unwrap();
        assert_eq!((b.rows.len(), b.runs_total), (1, 3));
    }
}
