//! How a spec is refused: a [`FieldError`] names the field, the value given and the rule it
//! breaks; a [`SpecError`] is a whole refusal (too large, not TOML, or every broken rule).
//!
//! Not here: finding the errors (`crate::validate`, `crate::literals`).

use std::fmt;

/// One mistake in a spec: where, what was given, and what would be accepted.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// Dotted path, e.g. `model.moe.top_k` or `data.mixture[0].weight`.
    pub path: String,
    /// The value given, as compact JSON (cut to 60 characters); `None` when the field is missing.
    pub value: Option<String>,
    /// The rule the value breaks, phrased as what is accepted.
    pub rule: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            Some(v) => write!(f, "{} = {}: {}", self.path, v, self.rule),
            None => write!(f, "{}: {}", self.path, self.rule),
        }
    }
}

/// Why a spec was not accepted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpecError {
    /// The input is over [`crate::validate::MAX_SPEC_BYTES`].
    #[error("spec is {bytes} bytes; the limit is {limit} bytes (1 MiB)")]
    TooLarge {
        /// Size given.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// The text is not valid TOML.
    #[error("TOML syntax error at line {line}, column {column}: {message}")]
    Syntax {
        /// 1-based line.
        line: usize,
        /// 1-based column (in characters).
        column: usize,
        /// The parser's description.
        message: String,
    },
    /// The spec is well-formed but breaks rules; every broken rule is listed.
    #[error("{} error(s) in spec:\n{}", .0.len(), .0.iter().map(|e| format!("  {e}")).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<FieldError>),
}

impl SpecError {
    /// The individual field errors (empty for size and syntax errors).
    pub fn field_errors(&self) -> &[FieldError] {
        match self {
            SpecError::Invalid(errs) => errs,
            _ => &[],
        }
    }
}
