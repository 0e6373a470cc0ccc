//! The experiment issue form's contract: the labels GitHub renders as `### <label>` headings in
//! the issue body, which the bot parses by.
//!
//! The form itself is `.github/ISSUE_TEMPLATE/experiment.yml`; a test parses it and checks that
//! its labels and ids are exactly these. The bot (`glassbox-github-bot`) maps headings to fields
//! through [`FIELDS`]; it never spells a label itself.

/// The GitHub label the form applies and the bot filters on.
pub const EXPERIMENT_LABEL: &str = "experiment";

/// Heading of the hypothesis textarea.
pub const HYPOTHESIS: &str = "Hypothesis";
/// Heading of the pre-registered forecast input.
pub const FORECAST: &str = "Pre-registered forecast";
/// Heading of the spec textarea (`render: toml`).
pub const SPEC: &str = "Experiment spec (TOML)";
/// Heading of the publication checkbox group.
pub const PUBLICATION: &str = "Publication of results";
/// The checkbox's text.
pub const PUBLICATION_CONSENT: &str = "I agree that every result of this experiment, including failed and negative ones, is published in the public ledger.";

/// What GitHub writes for an optional field left empty.
pub const NO_RESPONSE: &str = "_No response_";

/// A form field: its `id` in the YAML, its rendered heading, and whether it is required.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FormField {
    /// The field's `id` in the issue-form YAML.
    pub id: &'static str,
    /// The field's label, rendered as `### <label>` in the issue body.
    pub label: &'static str,
    /// Whether the form requires it.
    pub required: bool,
}

/// Every field of the form, in order.
pub const FIELDS: &[FormField] = &[
    FormField {
        id: "hypothesis",
        label: HYPOTHESIS,
        required: true,
    },
    FormField {
        id: "forecast",
        label: FORECAST,
        required: false,
    },
    FormField {
        id: "spec",
        label: SPEC,
        required: true,
    },
    FormField {
        id: "publication",
        label: PUBLICATION,
        required: true,
    },
];
