//! Evaluations: a suite's items in the field's two shapes, suite names and kinds, a spec's
//! `[evals]` section and the metric names (`eval:SUITE/acc_norm`). The entries that record a
//! suite and a result (`eval_suite`, `evaluation`) are in [`crate::record`].
//!
//! The two item shapes are the field's: a perplexity item is `{"text": ...}`; a multiple-choice
//! item is lm-eval-harness's document shape `{"context": ..., "choices": [...], "answer": i}`,
//! each choice the continuation exactly as it follows the context (no delimiter is added).
//! Not here: reading files, scoring or storing (the lab and the runner do those).

use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Items a suite may hold.
pub const MAX_SUITE_ITEMS: usize = 100_000;
/// UTF-8 bytes one item may hold (its context and choices, or its text, together).
pub const MAX_ITEM_BYTES: usize = 65_536;
/// Choices a multiple-choice item may offer (at least 2).
pub const MAX_CHOICES: usize = 16;
/// Tokens in a shared n-gram that flag an item as contaminated (the GPT-3 paper's 13).
pub const CONTAMINATION_NGRAM: u32 = 13;
/// Flagged item indices an `evaluation` entry lists itself (the rest are in its blob).
pub const FLAGGED_LISTED: usize = 64;

/// What a name may be, as a pattern (also the JSON Schema's).
pub const SUITE_NAME_PATTERN: &str = r"^[a-z0-9][a-z0-9._-]{0,63}$";

/// A suite's name: lowercase letters, digits, `.`, `_` and `-`, at most 64, starting with a
/// letter or digit. Several versions (hashes) of a suite share its name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SuiteName(String);

impl SuiteName {
    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for SuiteName {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let ok = !s.is_empty()
            && s.len() <= 64
            && s.bytes().enumerate().all(|(i, b)| {
                b.is_ascii_lowercase()
                    || b.is_ascii_digit()
                    || (i > 0 && matches!(b, b'.' | b'_' | b'-'))
            });
        if ok {
            Ok(SuiteName(s.to_string()))
        } else {
            Err(format!(
                "suite name {s:?} is not a name: use 1 to 64 of a-z, 0-9, '.', '_' and '-', starting with a letter or digit"
            ))
        }
    }
}

impl TryFrom<String> for SuiteName {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<SuiteName> for String {
    fn from(n: SuiteName) -> String {
        n.0
    }
}

impl fmt::Display for SuiteName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl JsonSchema for SuiteName {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "SuiteName".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": SUITE_NAME_PATTERN,
            "description": "An evaluation suite's name, as `glassbox data eval-suite import --name` stored it."
        })
    }
}

/// What a suite measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvalKind {
    /// Texts: the model's negative log-likelihood and bits per byte.
    Perplexity,
    /// A context and choices: accuracy by log-likelihood, plain and length-normalised.
    MultipleChoice,
}

impl EvalKind {
    /// Both kinds.
    pub const ALL: [EvalKind; 2] = [EvalKind::Perplexity, EvalKind::MultipleChoice];

    /// The word on the wire and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            EvalKind::Perplexity => "perplexity",
            EvalKind::MultipleChoice => "multiple_choice",
        }
    }

    /// The metrics an evaluation of this kind reports, headline first.
    pub fn metrics(self) -> &'static [&'static str] {
        match self {
            EvalKind::Perplexity => &[metric::BPB, metric::NLL, metric::PPL],
            EvalKind::MultipleChoice => &[
                metric::ACC_NORM,
                metric::ACC,
                metric::ACC_NORM_STDERR,
                metric::ACC_STDERR,
            ],
        }
    }

    /// Whether a higher value of `metric` is better (accuracy) or a lower one (loss).
    pub fn higher_is_better(metric: &str) -> bool {
        matches!(metric, metric::ACC | metric::ACC_NORM)
    }
}

impl fmt::Display for EvalKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EvalKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        EvalKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                format!("unknown suite kind {s:?}; expected perplexity or multiple_choice")
            })
    }
}

/// Metric names inside an evaluation (`evaluation` entries' `metrics`).
pub mod metric {
    /// Share of items whose answer has the highest log-likelihood.
    pub const ACC: &str = "acc";
    /// Share of items whose answer has the highest log-likelihood per character of the choice.
    pub const ACC_NORM: &str = "acc_norm";
    /// Standard error of `acc` (sample standard deviation over `sqrt(n)`).
    pub const ACC_STDERR: &str = "acc_stderr";
    /// Standard error of `acc_norm`.
    pub const ACC_NORM_STDERR: &str = "acc_norm_stderr";
    /// Mean negative log-likelihood per predicted token, in nats.
    pub const NLL: &str = "nll";
    /// Bits per UTF-8 byte of the predicted tokens, over the whole suite.
    pub const BPB: &str = "bpb";
    /// Token perplexity, `exp(nll)`.
    pub const PPL: &str = "ppl";
}

/// The name a chart, a forecast or a leaderboard gives an evaluation metric:
/// `eval:SUITE/METRIC`.
pub fn metric_name(suite: &SuiteName, metric: &str) -> String {
    format!("eval:{suite}/{metric}")
}

/// The suite and metric of an `eval:SUITE/METRIC` name, when it is one and names a metric an
/// evaluation reports.
pub fn parse_metric_name(name: &str) -> Option<(SuiteName, &str)> {
    let rest = name.strip_prefix("eval:")?;
    let (suite, metric) = rest.rsplit_once('/')?;
    let known = EvalKind::ALL.iter().any(|k| k.metrics().contains(&metric));
    Some((suite.parse().ok()?, metric)).filter(|_| known)
}

/// Python's `str.isspace` for one character: what lm-eval-harness's `context.rstrip()` strips
/// before it moves a context's trailing whitespace onto the continuation. It is wider than
/// Rust's `char::is_whitespace` (it holds the separators U+001C..U+001F, and not U+180E).
pub fn python_isspace(c: char) -> bool {
    matches!(
        c,
        '\t' | '\n' | '\u{0b}' | '\u{0c}' | '\r' | '\u{1c}'..='\u{1f}' | ' ' | '\u{85}' | '\u{a0}'
            | '\u{1680}' | '\u{2000}'..='\u{200a}' | '\u{2028}' | '\u{2029}' | '\u{202f}'
            | '\u{205f}' | '\u{3000}'
    )
}

/// A multiple-choice request as lm-eval-harness builds it: the context's trailing whitespace
/// (by [`python_isspace`]) moves onto the continuation. Returns (context, continuation).
pub fn encode_pair(context: &str, choice: &str) -> (String, String) {
    let kept = context.trim_end_matches(python_isspace);
    let moved = &context[kept.len()..];
    (kept.to_string(), format!("{moved}{choice}"))
}

/// One item of a suite.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged, deny_unknown_fields)]
pub enum SuiteItem {
    /// A multiple-choice item.
    Choice {
        /// What comes before each choice.
        context: String,
        /// The continuations, each as it follows the context.
        choices: Vec<String>,
        /// The index of the right one.
        answer: u32,
    },
    /// A perplexity item.
    Text {
        /// The text.
        text: String,
    },
}

impl SuiteItem {
    /// The kind of suite this item belongs in.
    pub fn kind(&self) -> EvalKind {
        match self {
            SuiteItem::Choice { .. } => EvalKind::MultipleChoice,
            SuiteItem::Text { .. } => EvalKind::Perplexity,
        }
    }

    /// Reads one item of a `kind` suite from a JSON object, checking what an evaluation
    /// needs; an error names the field, the value and what would be accepted.
    pub fn from_json(kind: EvalKind, value: &serde_json::Value) -> Result<Self, ItemError> {
        let obj = value.as_object().ok_or_else(|| ItemError {
            field: "(line)".into(),
            problem: format!("{} is not a JSON object", kind_of(value)),
            accepted: shape(kind).into(),
        })?;
        let text_field = |name: &str| -> Result<String, ItemError> {
            match obj.get(name) {
                Some(serde_json::Value::String(s)) => Ok(s.clone()),
                Some(other) => Err(ItemError {
                    field: name.into(),
                    problem: format!("is {}", kind_of(other)),
                    accepted: "a string".into(),
                }),
                None => Err(ItemError {
                    field: name.into(),
                    problem: "is missing".into(),
                    accepted: shape(kind).into(),
                }),
            }
        };
        let item = match kind {
            EvalKind::Perplexity => {
                let text = text_field("text")?;
                if text.chars().count() < 2 {
                    return Err(ItemError {
                        field: "text".into(),
                        problem: format!("{text:?} is shorter than 2 characters"),
                        accepted: "a text of at least 2 characters (the first is context)".into(),
                    });
                }
                SuiteItem::Text { text }
            }
            EvalKind::MultipleChoice => {
                let context = text_field("context")?;
                if context.chars().all(python_isspace) {
                    return Err(ItemError {
                        field: "context".into(),
                        problem: format!("{context:?} holds no text"),
                        accepted: "a context with at least one character that is not whitespace"
                            .into(),
                    });
                }
                let choices = match obj.get("choices") {
                    Some(serde_json::Value::Array(a)) => a
                        .iter()
                        .enumerate()
                        .map(|(i, c)| match c {
                            serde_json::Value::String(s) if !s.is_empty() => Ok(s.clone()),
                            other => Err(ItemError {
                                field: format!("choices[{i}]"),
                                problem: format!("is {}", kind_of(other)),
                                accepted: "a non-empty string".into(),
                            }),
                        })
                        .collect::<Result<Vec<_>, _>>()?,
                    Some(other) => {
                        return Err(ItemError {
                            field: "choices".into(),
                            problem: format!("is {}", kind_of(other)),
                            accepted: "an array of strings".into(),
                        });
                    }
                    None => {
                        return Err(ItemError {
                            field: "choices".into(),
                            problem: "is missing".into(),
                            accepted: shape(kind).into(),
                        });
                    }
                };
                if !(2..=MAX_CHOICES).contains(&choices.len()) {
                    return Err(ItemError {
                        field: "choices".into(),
                        problem: format!("has {} choice(s)", choices.len()),
                        accepted: format!("2 to {MAX_CHOICES} choices"),
                    });
                }
                let answer = match obj.get("answer") {
                    Some(serde_json::Value::Number(n)) => n.as_u64(),
                    _ => None,
                };
                let answer = match answer {
                    Some(a) if (a as usize) < choices.len() => a as u32,
                    _ => {
                        return Err(ItemError {
                            field: "answer".into(),
                            problem: match obj.get("answer") {
                                Some(v) => format!("{v} is not a choice's index"),
                                None => "is missing".into(),
                            },
                            accepted: format!(
                                "the index of the right choice, 0 to {}",
                                choices.len() - 1
                            ),
                        });
                    }
                };
                SuiteItem::Choice {
                    context,
                    choices,
                    answer,
                }
            }
        };
        if let Some(extra) = obj.keys().find(|k| !field_of(kind, k)) {
            return Err(ItemError {
                field: extra.clone(),
                problem: "is not a field of this kind of item".into(),
                accepted: shape(kind).into(),
            });
        }
        let bytes = match &item {
            SuiteItem::Text { text } => text.len(),
            SuiteItem::Choice {
                context, choices, ..
            } => context.len() + choices.iter().map(String::len).sum::<usize>(),
        };
        if bytes > MAX_ITEM_BYTES {
            return Err(ItemError {
                field: "(item)".into(),
                problem: format!("holds {bytes} bytes of text"),
                accepted: format!("at most {MAX_ITEM_BYTES} bytes per item"),
            });
        }
        Ok(item)
    }
}

fn field_of(kind: EvalKind, key: &str) -> bool {
    match kind {
        EvalKind::Perplexity => key == "text",
        EvalKind::MultipleChoice => matches!(key, "context" | "choices" | "answer"),
    }
}

fn shape(kind: EvalKind) -> &'static str {
    match kind {
        EvalKind::Perplexity => r#"{"text": "..."}"#,
        EvalKind::MultipleChoice => r#"{"context": "...", "choices": ["...", "..."], "answer": 0}"#,
    }
}

fn kind_of(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Why an item was refused: the field, what is wrong with it, and what would be accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemError {
    /// The field (`choices[2]`, or `(line)` for the whole line).
    pub field: String,
    /// What is wrong.
    pub problem: String,
    /// What would be accepted.
    pub accepted: String,
}

impl fmt::Display for ItemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}; expected {}",
            self.field, self.problem, self.accepted
        )
    }
}

/// A spec's (or the lab config's) `[evals]`: the suites each snapshot is evaluated on, each
/// as its own queued job. Left out of a spec, the spec hashes as before.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EvalsConfig {
    /// Suite names (the newest version of each on the record when the snapshot is saved).
    #[schemars(length(max = 16))]
    pub suites: Vec<SuiteName>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_move_trailing_whitespace_as_lm_eval_does() {
        assert_eq!(encode_pair("Q: A ", "yes"), ("Q: A".into(), " yes".into()));
        assert_eq!(
            encode_pair("ab\u{1f}\n", "c"),
            ("ab".into(), "\u{1f}\nc".into())
        );
        assert_eq!(encode_pair("ab", " c"), ("ab".into(), " c".into()));
        assert!(python_isspace('\u{1c}') && !python_isspace('\u{180e}') && !python_isspace('x'));
    }

    #[test]
    fn suite_names_are_checked() {
        assert!("markov-choice".parse::<SuiteName>().is_ok());
        assert!("arc.easy_v1".parse::<SuiteName>().is_ok());
        for bad in ["", "-x", "Upper", "a b", &"x".repeat(65)] {
            let e = bad.parse::<SuiteName>().unwrap_err();
            assert!(e.contains("is not a name"), "{e}");
        }
    }

    #[test]
    fn metric_names_round_trip_and_refuse_unknown_metrics() {
        let s: SuiteName = "hs".parse().unwrap();
        let n = metric_name(&s, metric::ACC_NORM);
        assert_eq!(n, "eval:hs/acc_norm");
        assert_eq!(parse_metric_name(&n), Some((s, "acc_norm")));
        assert_eq!(parse_metric_name("eval:hs/accuracy"), None);
        assert_eq!(parse_metric_name("eval/markov/loss"), None);
        assert_eq!(parse_metric_name("eval:Bad/acc"), None);
    }

    #[test]
    fn items_are_read_with_errors_naming_the_field() {
        let mc = EvalKind::MultipleChoice;
        let ok = serde_json::json!({"context": "a", "choices": ["b", "c"], "answer": 1});
        let item = SuiteItem::from_json(mc, &ok).unwrap();
        assert_eq!(serde_json::to_value(&item).unwrap(), ok);
        let cases = [
            (serde_json::json!([1]), "(line)"),
            (
                serde_json::json!({"choices": ["b", "c"], "answer": 0}),
                "context",
            ),
            (
                serde_json::json!({"context": "a", "choices": ["b"], "answer": 0}),
                "choices",
            ),
            (
                serde_json::json!({"context": "a", "choices": ["b", 3], "answer": 0}),
                "choices[1]",
            ),
            (
                serde_json::json!({"context": "a", "choices": ["b", "c"], "answer": 2}),
                "answer",
            ),
            (
                serde_json::json!({"context": "a", "choices": ["b", "c"], "answer": -1}),
                "answer",
            ),
            (
                serde_json::json!({"context": "a", "choices": ["b", "c"], "answer": 0, "label": 1}),
                "label",
            ),
        ];
        for (value, field) in cases {
            let e = SuiteItem::from_json(mc, &value).unwrap_err();
            assert_eq!(e.field, field, "{value}: {e}");
        }
        let e = SuiteItem::from_json(EvalKind::Perplexity, &serde_json::json!({"text": 5}))
            .unwrap_err();
        assert_eq!(
            (e.field.as_str(), e.accepted.as_str()),
            ("text", "a string")
        );
        let line = serde_json::to_string(&SuiteItem::Text { text: "hi".into() }).unwrap();
        assert_eq!(line, r#"{"text":"hi"}"#);
        let back: SuiteItem = serde_json::from_str(&line).unwrap();
        assert_eq!(back.kind(), EvalKind::Perplexity);
    }
}
