//! The query language's parser: a tokenizer that keeps each token's column, then recursive
//! descent over
//!
//! ```text
//! query      := or? END
//! or         := and ("or" and)*
//! and        := unary ("and" unary)*
//! unary      := "not" unary | "(" or ")" | comparison | term
//! comparison := field op value | field "in" "(" value ("," value)* ")"
//! field      := word ("." (word | string))*
//! term       := word | string                       (no operator after it)
//! value      := number | date | word | string
//! ```
//!
//! Keywords (`and`, `or`, `not`, `in`) are case-insensitive. Every error is a [`QueryError`]:
//! the 1-based column (in characters), what was expected there and what was found. Input is
//! bounded: [`super::MAX_QUERY_CHARS`] characters, [`super::MAX_TERMS`] comparisons,
//! [`super::MAX_DEPTH`] levels of nesting, [`super::MAX_IN_VALUES`] values in a list.

use std::fmt;

use super::{Comparison, Expr, Field, FieldKind, Op, STATUSES, Value};
use super::{MAX_DEPTH, MAX_IN_VALUES, MAX_QUERY_CHARS, MAX_TERMS};

/// A query that does not parse: where, what was expected, what was there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("column {column}: expected {expected}, found {found}")]
pub struct QueryError {
    /// 1-based column, in characters.
    pub column: usize,
    /// What would have been accepted there.
    pub expected: String,
    /// What was there (quoted, shortened), or `end of query`.
    pub found: String,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    LParen,
    RParen,
    Comma,
    Dot,
    Op(Op),
    Word(String),
    Str(String),
    Number(f64),
    Date(time::Date),
    End,
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shorten = |s: &str| -> String {
            let mut t: String = s.chars().take(30).collect();
            if s.chars().count() > 30 {
                t.push('…');
            }
            t
        };
        match self {
            Tok::LParen => f.write_str("`(`"),
            Tok::RParen => f.write_str("`)`"),
            Tok::Comma => f.write_str("`,`"),
            Tok::Dot => f.write_str("`.`"),
            Tok::Op(o) => write!(f, "`{}`", o.as_str()),
            Tok::Word(w) => write!(f, "`{}`", shorten(w)),
            Tok::Str(s) => write!(f, "\"{}\"", shorten(s)),
            Tok::Number(n) => write!(f, "`{n}`"),
            Tok::Date(d) => write!(f, "`{d}`"),
            Tok::End => f.write_str("end of query"),
        }
    }
}

fn err(column: usize, expected: impl Into<String>, found: impl fmt::Display) -> QueryError {
    QueryError {
        column,
        expected: expected.into(),
        found: found.to_string(),
    }
}

/// Splits `text` into tokens with their 1-based columns.
fn tokenize(text: &str) -> Result<Vec<(Tok, usize)>, QueryError> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let col = i + 1;
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let single = match c {
            '(' => Some(Tok::LParen),
            ')' => Some(Tok::RParen),
            ',' => Some(Tok::Comma),
            '.' => Some(Tok::Dot),
            '~' => Some(Tok::Op(Op::Contains)),
            '=' => Some(Tok::Op(Op::Eq)),
            _ => None,
        };
        if let Some(t) = single {
            out.push((t, col));
            i += 1;
            continue;
        }
        let next = chars.get(i + 1).copied();
        match c {
            '!' if next == Some('=') => {
                out.push((Tok::Op(Op::Ne), col));
                i += 2;
            }
            '<' | '>' => {
                let eq = next == Some('=');
                let op = match (c, eq) {
                    ('<', true) => Op::Le,
                    ('<', false) => Op::Lt,
                    (_, true) => Op::Ge,
                    _ => Op::Gt,
                };
                out.push((Tok::Op(op), col));
                i += if eq { 2 } else { 1 };
            }
            '"' => {
                let mut s = String::new();
                let mut j = i + 1;
                loop {
                    match chars.get(j) {
                        None => {
                            return Err(err(
                                col,
                                "a closing `\"` for the string opened here",
                                Tok::End,
                            ));
                        }
                        Some('"') => break,
                        Some('\\') => match chars.get(j + 1) {
                            Some(e @ ('"' | '\\')) => {
                                s.push(*e);
                                j += 2;
                            }
                            other => {
                                return Err(err(
                                    j + 1,
                                    "`\\\"` or `\\\\` (the only escapes in a string)",
                                    other
                                        .map_or("end of query".to_string(), |c| format!("`\\{c}`")),
                                ));
                            }
                        },
                        Some(ch) => {
                            s.push(*ch);
                            j += 1;
                        }
                    }
                }
                out.push((Tok::Str(s), col));
                i = j + 1;
            }
            c if c.is_ascii_digit() || (c == '-' && next.is_some_and(|n| n.is_ascii_digit())) => {
                let j = number_end(&chars, i);
                let word: String = chars[i..j].iter().collect();
                if chars
                    .get(j)
                    .is_some_and(|c| c.is_alphanumeric() || *c == '_')
                {
                    let mut k = j;
                    while chars
                        .get(k)
                        .is_some_and(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'))
                    {
                        k += 1;
                    }
                    let bad: String = chars[i..k].iter().take(30).collect();
                    return Err(err(
                        col,
                        "a number such as 8, 1.3 or 1e-3, or a date as YYYY-MM-DD",
                        format!("`{bad}`"),
                    ));
                }
                out.push((number_or_date(&word, col)?, col));
                i = j;
            }
            c if c.is_alphabetic() || c == '_' => {
                let mut j = i + 1;
                while j < chars.len()
                    && (chars[j].is_alphanumeric() || matches!(chars[j], '_' | '-'))
                {
                    j += 1;
                }
                out.push((Tok::Word(chars[i..j].iter().collect()), col));
                i = j;
            }
            other => {
                return Err(err(
                    col,
                    "a field, a value, an operator (= != < <= > >= ~ in), `(` or `)`",
                    format!("`{other}`"),
                ));
            }
        }
    }
    out.push((Tok::End, chars.len() + 1));
    Ok(out)
}

/// Where the number or date starting at `i` ends: `dddd-dd-dd`, or
/// `-?digits(.digits)?([eE][+-]?digits)?`.
fn number_end(chars: &[char], i: usize) -> usize {
    let digit = |k: usize| chars.get(k).is_some_and(|c| c.is_ascii_digit());
    if (0..4).all(|k| digit(i + k))
        && chars.get(i + 4) == Some(&'-')
        && digit(i + 5)
        && digit(i + 6)
        && chars.get(i + 7) == Some(&'-')
        && digit(i + 8)
        && digit(i + 9)
    {
        return i + 10;
    }
    let mut j = i;
    if chars.get(j) == Some(&'-') {
        j += 1;
    }
    while digit(j) {
        j += 1;
    }
    if chars.get(j) == Some(&'.') && digit(j + 1) {
        j += 1;
        while digit(j) {
            j += 1;
        }
    }
    if matches!(chars.get(j), Some('e' | 'E')) {
        let mut k = j + 1;
        if matches!(chars.get(k), Some('+' | '-')) {
            k += 1;
        }
        if digit(k) {
            j = k;
            while digit(j) {
                j += 1;
            }
        }
    }
    j
}

/// A number (`1.3`, `-2`, `1e-3`) or a date (`2026-01-31`).
fn number_or_date(word: &str, col: usize) -> Result<Tok, QueryError> {
    let b = word.as_bytes();
    if b.len() == 10 && b[4] == b'-' && b[7] == b'-' {
        let format = time::macros::format_description!("[year]-[month]-[day]");
        return time::Date::parse(word, &format)
            .map(Tok::Date)
            .map_err(|_| err(col, "a date as YYYY-MM-DD", format!("`{word}`")));
    }
    match word.parse::<f64>() {
        Ok(n) if n.is_finite() => Ok(Tok::Number(n)),
        _ => Err(err(
            col,
            "a number such as 8, 1.3 or 1e-3",
            format!("`{word}`"),
        )),
    }
}

struct Parser {
    toks: Vec<(Tok, usize)>,
    pos: usize,
    terms: usize,
}

/// Parses a query. An empty (or all-space) query is an error: callers treat "no `q`" as no
/// filter before asking.
pub fn parse(text: &str) -> Result<Expr, QueryError> {
    let n = text.chars().count();
    if n > MAX_QUERY_CHARS {
        return Err(err(
            MAX_QUERY_CHARS + 1,
            format!("at most {MAX_QUERY_CHARS} characters"),
            format!("{n} characters"),
        ));
    }
    let mut p = Parser {
        toks: tokenize(text)?,
        pos: 0,
        terms: 0,
    };
    let expr = p.or(0)?;
    match p.peek() {
        Tok::End => Ok(expr),
        t => Err(err(p.col(), "`and`, `or` or the end of the query", t)),
    }
}

fn keyword(t: &Tok, k: &str) -> bool {
    matches!(t, Tok::Word(w) if w.eq_ignore_ascii_case(k))
}

impl Parser {
    fn peek(&self) -> &Tok {
        &self.toks[self.pos].0
    }

    fn col(&self) -> usize {
        self.toks[self.pos].1
    }

    fn bump(&mut self) -> (Tok, usize) {
        let t = self.toks[self.pos].clone();
        if self.pos + 1 < self.toks.len() {
            self.pos += 1;
        }
        t
    }

    fn deeper(&self, depth: usize) -> Result<usize, QueryError> {
        if depth >= MAX_DEPTH {
            return Err(err(
                self.col(),
                format!("at most {MAX_DEPTH} levels of parentheses and `not`"),
                self.peek(),
            ));
        }
        Ok(depth + 1)
    }

    fn or(&mut self, depth: usize) -> Result<Expr, QueryError> {
        let mut left = self.and(depth)?;
        while keyword(self.peek(), "or") {
            self.bump();
            let right = self.and(depth)?;
            left = Expr::Or(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn and(&mut self, depth: usize) -> Result<Expr, QueryError> {
        let mut left = self.unary(depth)?;
        while keyword(self.peek(), "and") {
            self.bump();
            let right = self.unary(depth)?;
            left = Expr::And(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn unary(&mut self, depth: usize) -> Result<Expr, QueryError> {
        let depth = self.deeper(depth)?;
        if keyword(self.peek(), "not") {
            self.bump();
            return Ok(Expr::Not(Box::new(self.unary(depth)?)));
        }
        if *self.peek() == Tok::LParen {
            self.bump();
            let inner = self.or(depth)?;
            return match self.peek() {
                Tok::RParen => {
                    self.bump();
                    Ok(inner)
                }
                t => Err(err(self.col(), "`)`, `and` or `or`", t)),
            };
        }
        self.terms += 1;
        if self.terms > MAX_TERMS {
            return Err(err(
                self.col(),
                format!("at most {MAX_TERMS} comparisons"),
                self.peek(),
            ));
        }
        self.comparison_or_term()
    }

    fn comparison_or_term(&mut self) -> Result<Expr, QueryError> {
        let start = self.col();
        let w = match self.peek() {
            Tok::Word(w)
                if ["and", "or", "in"]
                    .iter()
                    .any(|k| w.eq_ignore_ascii_case(k)) =>
            {
                return Err(err(
                    start,
                    "a field, a word to find, `not` or `(`",
                    self.peek(),
                ));
            }
            Tok::Word(w) => {
                let w = w.clone();
                self.bump();
                w
            }
            Tok::Str(s) => {
                // A quoted string alone is text to find; it cannot name a field.
                let s = s.clone();
                self.bump();
                if matches!(self.peek(), Tok::Op(_)) || keyword(self.peek(), "in") {
                    return Err(err(
                        start,
                        "a field name before the operator (strings are values)",
                        format!("\"{s}\""),
                    ));
                }
                return Ok(Expr::Text(s));
            }
            t => return Err(err(start, "a field, a word to find, `not` or `(`", t)),
        };
        // A word with no dot and no operator after it: text to find.
        let next_is_op = matches!(self.peek(), Tok::Op(_)) || keyword(self.peek(), "in");
        if *self.peek() != Tok::Dot && !next_is_op {
            return Ok(Expr::Text(w));
        }
        let mut segments = vec![w];
        while *self.peek() == Tok::Dot {
            self.bump();
            match self.bump() {
                (Tok::Word(s) | Tok::Str(s), _) => segments.push(s),
                (t, col) => return Err(err(col, "a field name after `.`", t)),
            }
        }
        let field = field(&segments, start)?;
        let (op, col) = match self.peek() {
            Tok::Op(o) => {
                let o = *o;
                (o, self.bump().1)
            }
            t if keyword(t, "in") => (Op::In, self.bump().1),
            t => {
                return Err(err(
                    self.col(),
                    "an operator: = != < <= > >= ~ or in",
                    t.clone(),
                ));
            }
        };
        let kind = field.kind();
        let allowed = match kind {
            FieldKind::Text => matches!(op, Op::Eq | Op::Ne | Op::Contains | Op::In),
            FieldKind::Number => op != Op::Contains,
            FieldKind::Date => !matches!(op, Op::Contains | Op::In),
            FieldKind::Spec => true,
        };
        if !allowed {
            let which = match kind {
                FieldKind::Text => "= != ~ or in (it holds text)",
                FieldKind::Number => "= != < <= > >= or in (it holds a number)",
                _ => "= != < <= > or >= (it holds a time)",
            };
            return Err(err(
                col,
                format!("an operator for this field: {which}"),
                format!("`{}`", op.as_str()),
            ));
        }
        let values = if op == Op::In {
            match self.bump() {
                (Tok::LParen, _) => {}
                (t, c) => return Err(err(c, "`(` and a list of values after `in`", t)),
            }
            let mut values = vec![self.value(&field, op)?];
            loop {
                match self.bump() {
                    (Tok::Comma, _) => {
                        if values.len() >= MAX_IN_VALUES {
                            return Err(err(
                                self.col(),
                                format!("at most {MAX_IN_VALUES} values in a list"),
                                self.peek(),
                            ));
                        }
                        values.push(self.value(&field, op)?);
                    }
                    (Tok::RParen, _) => break,
                    (t, c) => return Err(err(c, "`,` or `)`", t)),
                }
            }
            values
        } else {
            vec![self.value(&field, op)?]
        };
        Ok(Expr::Cmp(Comparison { field, op, values }))
    }

    /// One value for `field op`, checked against the field's kind.
    fn value(&mut self, field: &Field, op: Op) -> Result<Value, QueryError> {
        let (tok, col) = self.bump();
        let value = match tok {
            Tok::Number(n) => Value::Number(n),
            Tok::Date(d) => Value::Date(d),
            Tok::Word(w)
                if !["and", "or", "not", "in"]
                    .iter()
                    .any(|k| w.eq_ignore_ascii_case(k)) =>
            {
                Value::Text(w)
            }
            Tok::Str(s) => Value::Text(s),
            t => {
                return Err(err(
                    col,
                    "a value: a number, a date, a word or a \"quoted string\"",
                    t,
                ));
            }
        };
        match (field.kind(), &value) {
            (FieldKind::Number, Value::Number(_)) => {}
            (FieldKind::Number, v) => {
                return Err(err(col, "a number", shown(v)));
            }
            (FieldKind::Date, Value::Date(_)) => {}
            (FieldKind::Date, v) => return Err(err(col, "a date as YYYY-MM-DD", shown(v))),
            (FieldKind::Text, Value::Date(_)) if op != Op::Contains => {}
            (FieldKind::Spec, Value::Date(_)) => {
                return Err(err(
                    col,
                    "a number or text (spec fields hold no dates)",
                    shown(&value),
                ));
            }
            (FieldKind::Spec, Value::Text(_))
                if matches!(op, Op::Lt | Op::Le | Op::Gt | Op::Ge) =>
            {
                return Err(err(
                    col,
                    format!("a number after `{}`", op.as_str()),
                    shown(&value),
                ));
            }
            (FieldKind::Spec, Value::Number(_)) if op == Op::Contains => {
                return Err(err(col, "text after `~`", shown(&value)));
            }
            _ => {}
        }
        if *field == Field::Status {
            let text = match &value {
                Value::Text(t) => t.to_ascii_lowercase(),
                other => {
                    return Err(err(
                        col,
                        format!("a status: {}", STATUSES.join(", ")),
                        shown(other),
                    ));
                }
            };
            if op != Op::Contains && !STATUSES.contains(&text.as_str()) {
                return Err(err(
                    col,
                    format!("a status: {}", STATUSES.join(", ")),
                    shown(&value),
                ));
            }
            return Ok(Value::Text(text));
        }
        // Text fields compare with a number's text (`run = 7` is not a run id, but `id ~ 12`
        // finds `#12`).
        Ok(match (field.kind(), value) {
            (FieldKind::Text, Value::Number(n)) => Value::Text(format_number(n)),
            (FieldKind::Text, Value::Date(d)) => Value::Text(d.to_string()),
            (_, v) => v,
        })
    }
}

fn format_number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        n.to_string()
    }
}

fn shown(v: &Value) -> String {
    match v {
        Value::Number(n) => format!("`{}`", format_number(*n)),
        Value::Text(t) => format!("\"{}\"", t.chars().take(30).collect::<String>()),
        Value::Date(d) => format!("`{d}`"),
    }
}

/// Spec sections a path may start with (or any path after `spec.`).
const SPEC_SECTIONS: &[&str] = &["experiment", "model", "data", "train", "budget", "forecast"];

/// The field a dotted name names.
fn field(segments: &[String], col: usize) -> Result<Field, QueryError> {
    let name = segments.join(".");
    let lower: Vec<String> = segments.iter().map(|s| s.to_ascii_lowercase()).collect();
    let single = |f: Field| {
        if segments.len() == 1 {
            Ok(f)
        } else {
            Err(err(
                col,
                "a field (`id`, `status`, a spec path such as model.moe.n_experts, or metrics.\"name\")",
                format!("`{name}`"),
            ))
        }
    };
    match lower[0].as_str() {
        "id" | "experiment" if segments.len() == 1 => single(Field::Id),
        "run" => single(Field::Run),
        "title" => single(Field::Title),
        "author" => single(Field::Author),
        "status" => single(Field::Status),
        "tag" | "tags" => single(Field::Tag),
        "steps" => single(Field::Steps),
        "created" => single(Field::Created),
        "updated" => single(Field::Updated),
        "started" => single(Field::Started),
        "ended" => single(Field::Ended),
        "metrics" | "metric" if segments.len() >= 2 => {
            let metric = segments[1..].join(".");
            if metric.is_empty() || metric.chars().count() > 200 {
                return Err(err(
                    col,
                    "a metric name (at most 200 characters)",
                    format!("`{name}`"),
                ));
            }
            Ok(Field::Metric(metric))
        }
        "spec" if segments.len() >= 2 => spec_path(&lower[1..], col, &name),
        s if SPEC_SECTIONS.contains(&s) && segments.len() >= 2 => spec_path(&lower, col, &name),
        _ => Err(err(
            col,
            "a field: id, run, title, author, status, tag, steps, created, updated, started, ended, a spec path (model.moe.n_experts) or metrics.\"name\"",
            format!("`{}`", name.chars().take(60).collect::<String>()),
        )),
    }
}

fn spec_path(segments: &[String], col: usize, name: &str) -> Result<Field, QueryError> {
    let ok = segments.len() <= 8
        && segments.iter().all(|s| {
            !s.is_empty()
                && s.len() <= 64
                && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
    if !ok {
        return Err(err(
            col,
            "a spec path of letters, digits and `_` (model.moe.n_experts)",
            format!("`{}`", name.chars().take(60).collect::<String>()),
        ));
    }
    Ok(Field::Spec(segments.join(".")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmp(field: Field, op: Op, v: Value) -> Expr {
        Expr::Cmp(Comparison {
            field,
            op,
            values: vec![v],
        })
    }

    #[test]
    fn and_binds_tighter_than_or_and_not_tighter_than_and() {
        let e = parse("status = failed or not tag = x and steps > 3").unwrap();
        let want = Expr::Or(
            Box::new(cmp(Field::Status, Op::Eq, Value::Text("failed".into()))),
            Box::new(Expr::And(
                Box::new(Expr::Not(Box::new(cmp(
                    Field::Tag,
                    Op::Eq,
                    Value::Text("x".into()),
                )))),
                Box::new(cmp(Field::Steps, Op::Gt, Value::Number(3.0))),
            )),
        );
        assert_eq!(e, want);
    }

    #[test]
    fn fields_values_and_lists() {
        assert_eq!(
            parse("metrics.\"eval/markov/loss\" <= 1.3e0").unwrap(),
            cmp(
                Field::Metric("eval/markov/loss".into()),
                Op::Le,
                Value::Number(1.3)
            )
        );
        assert_eq!(
            parse("model.moe.n_experts>=8").unwrap(),
            cmp(
                Field::Spec("model.moe.n_experts".into()),
                Op::Ge,
                Value::Number(8.0)
            )
        );
        assert_eq!(
            parse("spec.metrics.vector_interval = 5").unwrap(),
            cmp(
                Field::Spec("metrics.vector_interval".into()),
                Op::Eq,
                Value::Number(5.0)
            )
        );
        let d = time::macros::date!(2026 - 01 - 31);
        assert_eq!(
            parse("created < 2026-01-31").unwrap(),
            cmp(Field::Created, Op::Lt, Value::Date(d))
        );
        match parse("status IN (Diverged, \"failed\")").unwrap() {
            Expr::Cmp(c) => assert_eq!(
                c.values,
                vec![Value::Text("diverged".into()), Value::Text("failed".into())]
            ),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            parse("\"tiny moe\"").unwrap(),
            Expr::Text("tiny moe".into())
        );
        assert_eq!(
            parse("train.lr = -0.5").unwrap(),
            cmp(Field::Spec("train.lr".into()), Op::Eq, Value::Number(-0.5))
        );
        assert_eq!(
            parse("title ~ \"say \\\"hi\\\"\"").unwrap(),
            cmp(Field::Title, Op::Contains, Value::Text("say \"hi\"".into()))
        );
    }

    #[test]
    fn errors_name_the_column() {
        for (q, column, says) in [
            ("status = ", 10, "a value"),
            ("steps > abc", 9, "a number"),
            ("(status = failed", 17, "`)`"),
            ("bogus.field = 1", 1, "a field"),
            ("status = winning", 10, "a status"),
            ("title < 3", 7, "an operator for this field"),
            ("a b", 3, "`and`, `or`"),
            ("model.x # 1", 9, "an operator"),
            ("title = \"open", 9, "closing"),
            ("created = 2026-13-01", 11, "a date"),
        ] {
            let e = parse(q).unwrap_err();
            assert_eq!(e.column, column, "{q}: {e}");
            assert!(e.expected.contains(says), "{q}: {e}");
        }
    }

    #[test]
    fn input_is_bounded() {
        let long = "a".repeat(MAX_QUERY_CHARS + 1);
        assert!(parse(&long).unwrap_err().expected.contains("characters"));
        let deep = format!("{}x{}", "(".repeat(40), ")".repeat(40));
        assert!(parse(&deep).unwrap_err().expected.contains("levels"));
        let many = vec!["x"; MAX_TERMS + 1].join(" and ");
        assert!(parse(&many).unwrap_err().expected.contains("comparisons"));
    }
}
