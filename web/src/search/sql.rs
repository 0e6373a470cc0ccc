//! A parsed query as SQL: a `WHERE` clause over `experiments e LEFT JOIN runs r` and the
//! values it binds, in order (`$1`, `$2`, ...). The clause is built only from fixed fragments
//! of this file; every value of the query, field names of spec paths and metrics included, is
//! a bound parameter. The same text runs on SQLite and PostgreSQL.
//!
//! Every comparison is two-valued (true or false, never SQL `NULL`), so `not` means what it
//! says: a comparison on a field the row does not have (a metric of a run-less row) is false,
//! and its `not` is true. `!=` is `not =`. Spec fields and final metrics are matched through
//! uncorrelated `IN (SELECT ...)` subqueries on their indexed tables, which the engines
//! evaluate once per query rather than once per row. Not here: parsing or running the query.

use super::{Comparison, Expr, Field, Op, Value};

/// A value bound to the statement.
#[derive(Debug, Clone, PartialEq)]
pub enum Param {
    /// Text.
    Text(String),
    /// A number.
    Number(f64),
}

/// The `WHERE` clause and its parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Compiled {
    /// SQL text, with `$N` placeholders only.
    pub where_sql: String,
    /// The values, `$1` first.
    pub params: Vec<Param>,
}

/// Compiles `expr`.
pub fn compile(expr: &Expr) -> Compiled {
    let mut c = Compiler { params: Vec::new() };
    let where_sql = c.expr(expr);
    Compiled {
        where_sql,
        params: c.params,
    }
}

/// Whether `expr` reads a field of the run (its id, status, steps, times, metrics) or of the
/// row's spec (tags, spec fields: a run's spec may differ from its experiment's). A query that
/// does not is answered from the experiments alone, without the join.
pub fn touches_runs(expr: &Expr) -> bool {
    match expr {
        Expr::And(a, b) | Expr::Or(a, b) => touches_runs(a) || touches_runs(b),
        Expr::Not(a) => touches_runs(a),
        // The experiment's own fields and its current spec's hypothesis.
        Expr::Text(_) => false,
        Expr::Cmp(c) => !matches!(
            c.field,
            Field::Id | Field::Title | Field::Author | Field::Created | Field::Updated
        ),
    }
}

struct Compiler {
    params: Vec<Param>,
}

/// The spec a row is about: its run's, else the experiment's current one.
const ROW_SPEC: &str = "COALESCE(r.spec_hash, e.spec_hash)";

/// `%text%` for `LIKE ... ESCAPE '\'`, lowercased, with `%`, `_` and `\` taken literally.
fn like_pattern(text: &str) -> String {
    let mut out = String::from("%");
    for c in text.to_lowercase().chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('%');
    out
}

impl Compiler {
    fn bind(&mut self, p: Param) -> String {
        self.params.push(p);
        format!("${}", self.params.len())
    }

    fn text(&mut self, t: &str) -> String {
        self.bind(Param::Text(t.to_string()))
    }

    fn expr(&mut self, e: &Expr) -> String {
        match e {
            Expr::And(a, b) => format!("({} AND {})", self.expr(a), self.expr(b)),
            Expr::Or(a, b) => format!("({} OR {})", self.expr(a), self.expr(b)),
            Expr::Not(a) => format!("(NOT {})", self.expr(a)),
            Expr::Text(t) => {
                let p = like_pattern(t);
                let (a, b, c, d, path) = (
                    self.text(&p),
                    self.text(&p),
                    self.text(&p),
                    self.text(&p),
                    self.text("experiment.hypothesis"),
                );
                format!(
                    "(LOWER(e.id) LIKE {a} ESCAPE '\\' OR LOWER(COALESCE(e.title, '')) LIKE {b} ESCAPE '\\' \
                     OR LOWER(COALESCE(e.author, '')) LIKE {c} ESCAPE '\\' \
                     OR (e.spec_hash IS NOT NULL AND e.spec_hash IN (SELECT spec_hash FROM spec_fields \
                     WHERE path = {path} AND LOWER(text) LIKE {d} ESCAPE '\\')))"
                )
            }
            Expr::Cmp(c) => self.comparison(c),
        }
    }

    fn comparison(&mut self, c: &Comparison) -> String {
        if c.op == Op::Ne {
            let eq = Comparison {
                op: Op::Eq,
                ..c.clone()
            };
            return format!("(NOT {})", self.comparison(&eq));
        }
        match &c.field {
            Field::Id => self.column("e.id", false, c),
            Field::Run => self.column("r.id", false, c),
            Field::Title => self.column("e.title", true, c),
            Field::Author => self.column("e.author", true, c),
            Field::Status => self.column("COALESCE(r.status, e.status)", false, c),
            Field::Steps => self.column("r.steps", false, c),
            Field::Created => self.column("e.created", false, c),
            Field::Updated => self.column("e.updated", false, c),
            Field::Started => self.column("r.started", false, c),
            Field::Ended => self.column("r.ended", false, c),
            Field::Tag => {
                let path = self.text("experiment.tags");
                let test = self.test("text", true, c);
                format!(
                    "({ROW_SPEC} IS NOT NULL AND {ROW_SPEC} IN (SELECT spec_hash FROM spec_fields WHERE path = {path} AND {test}))"
                )
            }
            Field::Spec(path) => {
                let path = self.text(path);
                let column = if matches!(c.values.first(), Some(Value::Number(_))) {
                    "num"
                } else {
                    "text"
                };
                let test = self.test(column, false, c);
                format!(
                    "({ROW_SPEC} IS NOT NULL AND {ROW_SPEC} IN (SELECT spec_hash FROM spec_fields WHERE path = {path} AND {test}))"
                )
            }
            Field::Metric(name) => {
                let name = self.text(name);
                let test = self.test("value", false, c);
                format!(
                    "(r.id IS NOT NULL AND r.id IN (SELECT run FROM final_metrics WHERE name = {name} AND {test}))"
                )
            }
        }
    }

    /// A comparison on a column of the row, two-valued.
    fn column(&mut self, column: &str, fold_case: bool, c: &Comparison) -> String {
        let test = self.test(column, fold_case, c);
        format!("({column} IS NOT NULL AND {test})")
    }

    /// `column op value(s)`; text compared case-insensitively with `fold_case` (and always for
    /// `~`); a date compared as the RFC 3339 text of its day's bounds.
    fn test(&mut self, column: &str, fold_case: bool, c: &Comparison) -> String {
        if c.op == Op::Contains {
            let text = match c.values.first() {
                Some(Value::Text(t)) => t.clone(),
                Some(Value::Number(n)) => n.to_string(),
                Some(Value::Date(d)) => d.to_string(),
                None => String::new(),
            };
            let p = self.text(&like_pattern(&text));
            return format!("LOWER({column}) LIKE {p} ESCAPE '\\'");
        }
        if let Some(Value::Date(d)) = c.values.first() {
            let day = self.text(&d.to_string());
            let next = d
                .next_day()
                .map_or_else(|| "9999-12-32".to_string(), |n| n.to_string());
            let next = self.text(&next);
            return match c.op {
                Op::Lt => format!("{column} < {day}"),
                Op::Le => format!("{column} < {next}"),
                Op::Gt => format!("{column} >= {next}"),
                Op::Ge => format!("{column} >= {day}"),
                _ => format!("({column} >= {day} AND {column} < {next})"),
            };
        }
        let lhs = if fold_case {
            format!("LOWER({column})")
        } else {
            column.to_string()
        };
        let mut values = Vec::with_capacity(c.values.len());
        for v in &c.values {
            values.push(match v {
                Value::Number(n) => self.bind(Param::Number(*n)),
                Value::Text(t) if fold_case => self.text(&t.to_lowercase()),
                Value::Text(t) => self.text(t),
                Value::Date(d) => self.text(&d.to_string()),
            });
        }
        let op = match c.op {
            Op::In => return format!("{lhs} IN ({})", values.join(", ")),
            Op::Eq | Op::Ne => "=",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            // `~` returned above; were it to reach here it would compare as `=`.
            Op::Ge => ">=",
            Op::Contains => "=",
        };
        format!("{lhs} {op} {}", values.first().cloned().unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    #[test]
    fn values_are_bound_never_written() {
        let c =
            compile(&parse("title ~ \"50%_off\" or metrics.\"a'b\" > 1 and tag = Moe").unwrap());
        assert!(
            !c.where_sql.contains("50") && !c.where_sql.contains("a'b"),
            "{}",
            c.where_sql
        );
        assert_eq!(
            c.params,
            vec![
                Param::Text("%50\\%\\_off%".into()),
                Param::Text("a'b".into()),
                Param::Number(1.0),
                Param::Text("experiment.tags".into()),
                Param::Text("moe".into()),
            ]
        );
    }

    #[test]
    fn not_equal_is_not_equal_and_dates_take_whole_days() {
        let c = compile(&parse("status != failed").unwrap());
        assert!(c.where_sql.starts_with("(NOT ("), "{}", c.where_sql);
        let c = compile(&parse("created <= 2026-01-31").unwrap());
        assert_eq!(
            c.params,
            vec![
                Param::Text("2026-01-31".into()),
                Param::Text("2026-02-01".into())
            ]
        );
        assert!(c.where_sql.contains("e.created < $2"), "{}", c.where_sql);
    }

    #[test]
    fn only_queries_about_runs_or_their_specs_need_the_join() {
        for q in [
            "author = bob",
            "title ~ moe and created >= 2026-01-01",
            "not id = x or \"router bias\"",
        ] {
            assert!(!touches_runs(&parse(q).unwrap()), "{q}");
        }
        for q in [
            "author = bob and status = failed",
            "not steps < 10",
            "title ~ moe or metrics.loss < 1",
            "tag = moe",
            "model.moe.n_experts = 8",
            "run = r1",
        ] {
            assert!(touches_runs(&parse(q).unwrap()), "{q}");
        }
    }
}
