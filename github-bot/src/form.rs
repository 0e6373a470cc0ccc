//! Parsing the rendered experiment issue form: `### <label>` sections into a [`ProposalForm`].
//!
//! GitHub renders each form field as a `### <label>` heading followed by the answer; an empty
//! optional field reads `_No response_`, a ticked checkbox `- [X] <text>`, and a `render: toml`
//! textarea arrives inside a ```` ```toml ```` fence (people who edit the issue by hand sometimes
//! drop the fence, so both are accepted). Bodies may use CRLF. Labels come from
//! [`glassbox_schemas::issue_form`]; this module never spells one.
//!
//! Only headings that are form labels start a section, and never inside a code fence, so a TOML
//! comment such as `### model` stays part of the spec. This module does not validate the spec
//! (that is [`glassbox_schemas::parse_toml`]); it only finds the text.

use glassbox_schemas::issue_form::{
    FIELDS, FORECAST, HYPOTHESIS, NO_RESPONSE, PUBLICATION, PUBLICATION_CONSENT, SPEC,
};

/// The answers found in an issue body. `None` means the section is absent or `_No response_`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProposalForm {
    /// The hypothesis text.
    pub hypothesis: Option<String>,
    /// The forecast line as written.
    pub forecast: Option<String>,
    /// The spec TOML, without its code fence.
    pub spec_toml: Option<String>,
    /// Whether the publication checkbox is ticked.
    pub publication_consent: bool,
}

/// A pre-registered forecast parsed from `metric = value +- tolerance` (or `±`).
#[derive(Debug, Clone, PartialEq)]
pub struct FormForecast {
    /// Metric name, e.g. `eval/markov/loss`.
    pub metric: String,
    /// Predicted value.
    pub value: f64,
    /// Allowed absolute difference.
    pub tolerance: f64,
}

/// Something wrong with the form itself (as opposed to the spec inside it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormProblem {
    /// The form label the problem is about.
    pub field: &'static str,
    /// What is wrong and what would be accepted.
    pub message: String,
}

impl ProposalForm {
    /// Problems with the form: missing required answers, an unticked consent, a forecast that
    /// does not parse. The spec's own errors are not included.
    pub fn problems(&self) -> Vec<FormProblem> {
        let mut out = Vec::new();
        for field in FIELDS.iter().filter(|f| f.required) {
            let missing = match field.label {
                l if l == HYPOTHESIS => self.hypothesis.is_none(),
                l if l == SPEC => self.spec_toml.is_none(),
                l if l == PUBLICATION => !self.publication_consent,
                _ => false,
            };
            if missing {
                let message = if field.label == PUBLICATION {
                    format!("the box \"{PUBLICATION_CONSENT}\" must be ticked")
                } else {
                    "is required; fill it in by editing the issue".to_string()
                };
                out.push(FormProblem {
                    field: field.label,
                    message,
                });
            }
        }
        if let Some(text) = &self.forecast
            && parse_forecast(text).is_none()
        {
            out.push(FormProblem {
                field: FORECAST,
                message: format!(
                    "{:?} is not `<metric> = <value> +- <tolerance>`, e.g. `eval/markov/loss = 1.30 +- 0.05`",
                    cut(text, 80)
                ),
            });
        }
        out
    }

    /// The forecast, parsed; `None` when absent or unparseable (see [`Self::problems`]).
    pub fn parsed_forecast(&self) -> Option<FormForecast> {
        self.forecast.as_deref().and_then(parse_forecast)
    }
}

fn cut(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// Parses `metric = value +- tolerance` (also `±` and `+/-`).
pub fn parse_forecast(text: &str) -> Option<FormForecast> {
    let text = text.trim().trim_matches('`').trim();
    let (metric, rest) = text.split_once('=')?;
    let metric = metric.trim();
    if metric.is_empty() || metric.contains(char::is_whitespace) {
        return None;
    }
    let (value, tolerance) = ["+-", "±", "+/-"]
        .iter()
        .find_map(|sep| rest.split_once(sep))?;
    let value: f64 = value.trim().parse().ok()?;
    let tolerance: f64 = tolerance.trim().parse().ok()?;
    if !value.is_finite() || !tolerance.is_finite() || tolerance < 0.0 {
        return None;
    }
    Some(FormForecast {
        metric: metric.to_string(),
        value,
        tolerance,
    })
}

/// Whether `line` opens or closes a fenced code block (three or more backticks or tildes).
fn fence_marker(line: &str) -> Option<char> {
    let t = line.trim_start();
    if t.starts_with("```") {
        Some('`')
    } else if t.starts_with("~~~") {
        Some('~')
    } else {
        None
    }
}

/// Splits the body into `(label, text)` sections for the form's labels.
fn sections(body: &str) -> Vec<(&'static str, String)> {
    let mut out: Vec<(&'static str, String)> = Vec::new();
    let mut fence: Option<char> = None;
    for line in body.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if fence.is_none()
            && let Some(heading) = line.strip_prefix("### ")
            && let Some(field) = FIELDS.iter().find(|f| f.label == heading.trim())
        {
            out.push((field.label, String::new()));
            continue;
        }
        match (fence, fence_marker(line)) {
            (None, Some(c)) => fence = Some(c),
            (Some(open), Some(c)) if open == c => fence = None,
            _ => {}
        }
        if let Some((_, text)) = out.last_mut() {
            text.push_str(line);
            text.push('\n');
        }
    }
    out
}

/// `None` for empty text and GitHub's `_No response_`.
fn answer(text: &str) -> Option<String> {
    let t = text.trim();
    if t.is_empty() || t == NO_RESPONSE {
        None
    } else {
        Some(t.to_string())
    }
}

/// Removes one surrounding code fence, if the text is exactly one fenced block.
fn unfence(text: &str) -> String {
    let t = text.trim();
    let lines: Vec<&str> = t.lines().collect();
    if lines.len() >= 2
        && let (Some(open), Some(close)) = (fence_marker(lines[0]), lines.last().copied())
        && fence_marker(close) == Some(open)
        && close.trim().chars().all(|c| c == open)
    {
        let mut inner = lines[1..lines.len() - 1].join("\n");
        inner.push('\n');
        return inner;
    }
    let mut s = t.to_string();
    s.push('\n');
    s
}

/// Parses an issue body rendered from the experiment form. Never fails: what is missing is
/// reported by [`ProposalForm::problems`].
pub fn parse_issue_form(body: &str) -> ProposalForm {
    let mut form = ProposalForm::default();
    for (label, text) in sections(body) {
        match label {
            l if l == HYPOTHESIS => form.hypothesis = answer(&text),
            l if l == FORECAST => form.forecast = answer(&text),
            l if l == SPEC => {
                form.spec_toml = answer(&text)
                    .map(|t| unfence(&t))
                    .filter(|t| !t.trim().is_empty());
            }
            l if l == PUBLICATION => {
                form.publication_consent = text.lines().any(|line| {
                    let line = line.trim();
                    ["- [X] ", "- [x] "].iter().any(|p| {
                        line.strip_prefix(p)
                            .is_some_and(|rest| rest.trim() == PUBLICATION_CONSENT)
                    })
                });
            }
            _ => {}
        }
    }
    form
}

/// An issue body as GitHub renders it from the form (used by tests and documentation).
pub fn render_issue_form(
    hypothesis: &str,
    forecast: Option<&str>,
    spec_toml: &str,
    consent: bool,
) -> String {
    let tick = if consent { "X" } else { " " };
    format!(
        "### {HYPOTHESIS}\n\n{hypothesis}\n\n### {FORECAST}\n\n{}\n\n### {SPEC}\n\n```toml\n{}\n```\n\n### {PUBLICATION}\n\n- [{tick}] {PUBLICATION_CONSENT}\n",
        forecast.unwrap_or(NO_RESPONSE),
        spec_toml.trim_end(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC_TEXT: &str = "[experiment]\nname = \"x\"\n### a TOML comment that looks like a heading\n[model]\nd_model = 64\n";

    #[test]
    fn parses_rendered_form() {
        let body = render_issue_form(
            "Sigmoid routing wins.",
            Some("eval/markov/loss = 1.30 +- 0.05"),
            SPEC_TEXT,
            true,
        );
        let form = parse_issue_form(&body);
        assert_eq!(form.hypothesis.as_deref(), Some("Sigmoid routing wins."));
        assert_eq!(form.spec_toml.as_deref(), Some(SPEC_TEXT));
        assert!(form.publication_consent);
        assert_eq!(
            form.parsed_forecast(),
            Some(FormForecast {
                metric: "eval/markov/loss".into(),
                value: 1.30,
                tolerance: 0.05
            })
        );
        assert!(form.problems().is_empty());
    }

    #[test]
    fn crlf_no_response_and_unticked_box() {
        let body = render_issue_form("H.", None, SPEC_TEXT, false).replace('\n', "\r\n");
        let form = parse_issue_form(&body);
        assert_eq!(form.forecast, None);
        assert_eq!(form.spec_toml.as_deref(), Some(SPEC_TEXT));
        assert!(!form.publication_consent);
        let problems = form.problems();
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].field, PUBLICATION);
    }

    #[test]
    fn spec_without_fence_is_accepted() {
        let body = format!(
            "### {HYPOTHESIS}\n\nH.\n\n### {SPEC}\n\n{SPEC_TEXT}\n### {PUBLICATION}\n\n- [x] {PUBLICATION_CONSENT}\n"
        );
        let form = parse_issue_form(&body);
        // Without a fence the TOML comment `### a TOML ...` is not a form label, so it stays.
        assert_eq!(form.spec_toml.as_deref(), Some(SPEC_TEXT));
        assert!(form.publication_consent);
    }

    #[test]
    fn missing_sections_are_problems_by_label() {
        let form = parse_issue_form("just some text\n### Unrelated\nmore");
        let fields: Vec<_> = form.problems().iter().map(|p| p.field).collect();
        assert_eq!(fields, vec![HYPOTHESIS, SPEC, PUBLICATION]);
    }

    #[test]
    fn forecast_forms() {
        assert!(parse_forecast("eval/x/loss = 1 ± 0.1").is_some());
        assert!(parse_forecast("`eval/x/loss = 1 +/- 0.1`").is_some());
        assert!(parse_forecast("eval/x/loss = 1").is_none());
        assert!(parse_forecast("eval x = 1 +- 1").is_none());
        assert!(parse_forecast("m = 1 +- -1").is_none());
    }
}
