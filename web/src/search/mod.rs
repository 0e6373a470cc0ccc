//! Run search: a small query language over runs and experiments, parsed into a typed [`Expr`]
//! and compiled to SQL on the index with bound parameters only.
//!
//! ```text
//! model.moe.n_experts >= 8 and metrics."eval/markov/loss" < 1.3
//! status in (diverged, budget_exceeded) or (tag = ladder and not author = bob)
//! created >= 2026-01-01 and title ~ "router bias"
//! markov                                   a bare word or "phrase": id, title, author, hypothesis
//! ```
//!
//! Fields: `id` (the experiment), `run`, `title`, `author`, `status`, `tag`, `steps`,
//! `created`, `updated` (the experiment's first and last entry), `started`, `ended` (the
//! run's); spec fields by path (`model.moe.n_experts`, `train.lr`, `experiment.tags`, or any
//! path after `spec.`); final metrics by name (`metrics."eval/markov/loss"`: quote names with
//! slashes). Operators `=`, `!=`, `<`, `<=`, `>`, `>=`, `in (...)`, and `~` (substring, case
//! insensitive); `and` binds tighter than `or`, `not` tighter than both, parentheses group.
//! Dates are `YYYY-MM-DD` (UTC days). `!=` is `not =`: a row without the field matches it.
//!
//! A row is an experiment with one of its runs, or an experiment without runs (its run
//! fields are then absent and their comparisons false; `status` is then the experiment's:
//! `proposed`, `approved` or `rejected`). The list page shows the experiments with a matching
//! row; the API's runs list the matching runs.
//!
//! - [`parse`] — text to [`Expr`] (a hand-written recursive-descent parser; every error names
//!   the column and what was expected: [`QueryError`]);
//! - [`sql`] — [`Expr`] to a `WHERE` clause and its parameters; no text of the query is ever
//!   part of the SQL.
//!
//! Not here: the tables it reads (the ledger's index derives them) or rendering.

pub mod parse;
pub mod sql;

use std::collections::BTreeSet;

use glassbox_ledger::index::Index;
use sqlx::Row;

pub use parse::{QueryError, parse};

use crate::error::WebError;

/// Longest query accepted, in characters.
pub const MAX_QUERY_CHARS: usize = 2000;
/// Most comparisons (and bare terms) in one query.
pub const MAX_TERMS: usize = 64;
/// Deepest nesting of parentheses and `not`.
pub const MAX_DEPTH: usize = 32;
/// Most values in one `in (...)` list.
pub const MAX_IN_VALUES: usize = 100;
/// Most rows one search returns.
pub const MAX_ROWS: i64 = 100_000;

/// A parsed query.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// Both.
    And(Box<Expr>, Box<Expr>),
    /// Either.
    Or(Box<Expr>, Box<Expr>),
    /// Not.
    Not(Box<Expr>),
    /// A field compared with a value.
    Cmp(Comparison),
    /// A bare word or quoted phrase: found in the id, title, author or hypothesis.
    Text(String),
}

/// `field op value` or `field in (values)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// What is compared.
    pub field: Field,
    /// How.
    pub op: Op,
    /// With what (one value, or the list of `in`).
    pub values: Vec<Value>,
}

/// What a comparison looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    /// The experiment id (`id` or `experiment`).
    Id,
    /// The run id.
    Run,
    /// The proposal's title.
    Title,
    /// The proposer.
    Author,
    /// The run's status, or the experiment's for a row without a run.
    Status,
    /// A tag of the spec (`tag` or `tags`).
    Tag,
    /// Steps the run completed.
    Steps,
    /// Time of the experiment's first entry.
    Created,
    /// Time of its last entry.
    Updated,
    /// When the run started.
    Started,
    /// When it ended.
    Ended,
    /// A field of the spec, by dotted path (`model.moe.n_experts`).
    Spec(String),
    /// A final metric of the run, by name (`eval/markov/loss`).
    Metric(String),
}

/// What kind of values a field holds, for checking a comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    /// Text: `=`, `!=`, `~`, `in`.
    Text,
    /// A number: every operator but `~`.
    Number,
    /// A UTC time: `=`, `!=`, `<`, `<=`, `>`, `>=` with a date.
    Date,
    /// A spec field: a number or text, whichever the value is.
    Spec,
}

impl Field {
    /// The kind of values it holds.
    pub fn kind(&self) -> FieldKind {
        match self {
            Field::Id | Field::Run | Field::Title | Field::Author | Field::Status | Field::Tag => {
                FieldKind::Text
            }
            Field::Steps | Field::Metric(_) => FieldKind::Number,
            Field::Created | Field::Updated | Field::Started | Field::Ended => FieldKind::Date,
            Field::Spec(_) => FieldKind::Spec,
        }
    }
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `=`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `~`: contains, case-insensitive.
    Contains,
    /// `in (...)`
    In,
}

impl Op {
    /// As written.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Eq => "=",
            Op::Ne => "!=",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
            Op::Contains => "~",
            Op::In => "in",
        }
    }
}

/// A value in a comparison.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A number.
    Number(f64),
    /// Text (a bare word or a quoted string).
    Text(String),
    /// A UTC day.
    Date(time::Date),
}

/// Statuses a row can have (runs' and experiments').
pub const STATUSES: &[&str] = &[
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

/// One matching row: an experiment and, when the row is a run, the run.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Hit {
    /// The experiment.
    pub experiment: String,
    /// The run.
    pub run: Option<String>,
}

/// The rows of the index matching `expr`, ordered by experiment then run.
pub async fn search(index: &Index, expr: &Expr) -> Result<Vec<Hit>, WebError> {
    let compiled = sql::compile(expr);
    let text = format!(
        "SELECT e.id AS experiment, r.id AS run FROM experiments e \
         LEFT JOIN runs r ON r.experiment = e.id WHERE {} ORDER BY e.id, r.id LIMIT {MAX_ROWS}",
        compiled.where_sql
    );
    let rows = bound(&text, &compiled.params)
        .fetch_all(index.pool())
        .await?;
    rows.iter()
        .map(|r| {
            Ok(Hit {
                experiment: r.try_get("experiment")?,
                run: r.try_get("run")?,
            })
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()
        .map_err(WebError::from)
}

/// The experiments with a row matching the query text `q`, or `None` (no filter) for no or
/// an empty query; a bad query is a 400 naming the column and what was expected.
pub async fn for_filter(
    index: &Index,
    q: Option<&str>,
) -> Result<Option<BTreeSet<String>>, WebError> {
    let Some(q) = q.map(str::trim).filter(|q| !q.is_empty()) else {
        return Ok(None);
    };
    let expr = parse(q).map_err(|e| WebError::BadRequest(format!("q: {e}")))?;
    let compiled = sql::compile(&expr);
    // Only the experiment ids, once each: the list page needs no more. A query about the
    // experiments alone reads them alone (a row per experiment, no join, nothing to dedupe).
    let rows = if sql::touches_runs(&expr) {
        format!(
            "SELECT DISTINCT e.id AS id FROM experiments e \
             LEFT JOIN runs r ON r.experiment = e.id WHERE {} LIMIT {MAX_ROWS}",
            compiled.where_sql
        )
    } else {
        format!(
            "SELECT e.id AS id FROM experiments e WHERE {} LIMIT {MAX_ROWS}",
            compiled.where_sql
        )
    };
    // All of them in one row (see [`unpack_ids`]): sqlx hands SQLite rows from its connection
    // thread one at a time, and a search matching thousands of experiments spent as long on
    // that hand-off as on the query itself.
    let text = format!(
        "SELECT string_agg(CAST(octet_length(x.id) AS TEXT) || ':' || x.id, '') AS ids \
         FROM ({rows}) x"
    );
    let row = bound(&text, &compiled.params)
        .fetch_one(index.pool())
        .await?;
    let packed: Option<String> = row.try_get("ids")?;
    unpack_ids(packed.as_deref().unwrap_or_default())
        .map(Some)
        .ok_or_else(|| {
            WebError::Index(sqlx::Error::Decode(
                "search: unreadable packed experiment ids".into(),
            ))
        })
}

/// Reads `<bytes>:<id><bytes>:<id>...` (each id prefixed by its length in bytes, so an id may
/// hold any character, `:` included); `None` when malformed.
fn unpack_ids(mut packed: &str) -> Option<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    while !packed.is_empty() {
        let (len, rest) = packed.split_once(':')?;
        let len: usize = len.parse().ok()?;
        out.insert(rest.get(..len)?.to_string());
        packed = rest.get(len..)?;
    }
    Some(out)
}

/// `text` with `params` bound in order.
fn bound<'q>(
    text: &'q str,
    params: &[sql::Param],
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    params.iter().fold(sqlx::query(text), |q, p| match p {
        sql::Param::Text(t) => q.bind(t.clone()),
        sql::Param::Number(n) => q.bind(*n),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_ids_keep_any_character_and_refuse_a_bad_length() {
        let ids = ["acme/s#1", "a:b:c", "é✓", ""];
        let packed: String = ids.iter().map(|i| format!("{}:{i}", i.len())).collect();
        let got = unpack_ids(&packed).unwrap();
        assert_eq!(got, ids.iter().map(|s| s.to_string()).collect());
        assert_eq!(unpack_ids("").unwrap(), BTreeSet::new());
        assert!(unpack_ids("9:short").is_none());
        assert!(unpack_ids("x:abc").is_none());
        // A length that ends inside a multi-byte character.
        assert!(unpack_ids("1:é").is_none());
    }
}
