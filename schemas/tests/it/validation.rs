//! Validation, data-driven: every `tests/data/invalid/<case>.toml` is checked and its errors,
//! one per line, must equal `<case>.errors` beside it. Run with `UPDATE_EXPECT=1` to rewrite the
//! `.errors` files after an intended change, then review the diff.
//!
//! Also: the examples and the committed JSON Schema (fresh, and accepting every example when
//! checked by the `jsonschema` crate on its own), and the issue form's labels.

use std::path::{Path, PathBuf};

use glassbox_schemas::issue_form;
use glassbox_schemas::schema::{
    SCHEMA_PATH, experiment_spec_schema, experiment_spec_schema_pretty,
};
use glassbox_schemas::{SpecError, parse_toml};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn render(err: &SpecError) -> String {
    match err {
        SpecError::Invalid(list) => list.iter().map(|e| format!("{e}\n")).collect(),
        other => format!("{other}\n"),
    }
}

#[test]
fn invalid_specs_report_every_error() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/invalid");
    let update = std::env::var_os("UPDATE_EXPECT").is_some();
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    cases.sort();
    assert!(
        cases.len() >= 10,
        "expected the test cases in {}",
        dir.display()
    );
    let mut failures = Vec::new();
    for case in &cases {
        let text = std::fs::read_to_string(case).unwrap();
        let err = match parse_toml(&text) {
            Ok(_) => panic!("{} was accepted", case.display()),
            Err(e) => e,
        };
        let got = render(&err);
        let expected_path = case.with_extension("errors");
        if update {
            std::fs::write(&expected_path, &got).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_default();
        if got != expected {
            failures.push(format!(
                "{}:\n--- expected\n{expected}--- got\n{got}",
                case.display()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn three_distinct_mistakes_are_all_reported() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/invalid/three_mistakes.toml"),
    )
    .unwrap();
    let err = parse_toml(&text).unwrap_err();
    let paths: Vec<&str> = err.field_errors().iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        ["experiment.slug", "model.dropuot", "train.lr"],
        "{err}"
    );
    let unknown = &err.field_errors()[1];
    assert!(
        unknown.rule.contains("unknown field `dropuot`"),
        "{unknown}"
    );
}

#[test]
fn syntax_errors_give_line_and_column() {
    let err = parse_toml("[model]\nd_model = 64\nn_heads = = 4\n").unwrap_err();
    match err {
        SpecError::Syntax { line, column, .. } => assert_eq!((line, column), (3, 11)),
        other => panic!("expected a syntax error, got {other}"),
    }
}

#[test]
fn oversized_input_is_refused_before_parsing() {
    // Not even valid TOML: proves the size check runs first.
    let text = "x".repeat(glassbox_schemas::validate::MAX_SPEC_BYTES + 1);
    assert!(matches!(parse_toml(&text), Err(SpecError::TooLarge { .. })));
}

#[test]
fn examples_are_valid() {
    let dir = repo_root().join("examples");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let text = std::fs::read_to_string(&path).unwrap();
            // Ladder and sweep files expand into specs; each kind is checked by its module.
            if glassbox_schemas::ladder::is_ladder(&text) {
                glassbox_schemas::ladder::parse_ladder_toml(&text)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            } else if glassbox_schemas::sweep::is_sweep(&text) {
                glassbox_schemas::sweep::parse_sweep_toml(&text)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            } else {
                parse_toml(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            }
            n += 1;
        }
    }
    assert!(n >= 2, "expected examples in {}", dir.display());
}

#[test]
fn committed_schema_is_fresh() {
    let path = repo_root().join(SCHEMA_PATH);
    let generated = experiment_spec_schema_pretty();
    if std::env::var_os("UPDATE_SCHEMA").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is stale: regenerate it with `UPDATE_SCHEMA=1 cargo test -p glassbox-schemas` \
         (or `glassbox spec schema > {SCHEMA_PATH}`)",
        SCHEMA_PATH
    );
}

/// Checks the examples against the committed schema file with the validator alone (no glassbox
/// code in between), as an editor or another tool would.
#[test]
fn committed_schema_accepts_examples_and_rejects_mistakes() {
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(repo_root().join(SCHEMA_PATH)).unwrap())
            .unwrap();
    assert_eq!(&schema, experiment_spec_schema());
    jsonschema::meta::validate(&schema).expect("the schema is a valid JSON Schema document");
    let validator = jsonschema::validator_for(&schema).unwrap();
    for name in ["tiny.toml", "hero.toml"] {
        let text = std::fs::read_to_string(repo_root().join("examples").join(name)).unwrap();
        let value = serde_json::to_value(toml::from_str::<toml::Table>(&text).unwrap()).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(&value)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{name}: {errors:?}");
    }
    let bad = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/invalid/three_mistakes.toml"),
    )
    .unwrap();
    let value = serde_json::to_value(toml::from_str::<toml::Table>(&bad).unwrap()).unwrap();
    assert_eq!(validator.iter_errors(&value).count(), 3);
}

#[derive(serde::Deserialize)]
struct IssueForm {
    labels: Vec<String>,
    body: Vec<FormElement>,
}

#[derive(serde::Deserialize)]
struct FormElement {
    #[serde(rename = "type")]
    kind: String,
    id: Option<String>,
    attributes: serde_yaml_ng::Value,
    validations: Option<serde_yaml_ng::Value>,
}

#[test]
fn issue_form_matches_the_labels_the_bot_parses_by() {
    let text =
        std::fs::read_to_string(repo_root().join(".github/ISSUE_TEMPLATE/experiment.yml")).unwrap();
    let form: IssueForm = serde_yaml_ng::from_str(&text).unwrap();
    assert_eq!(form.labels, [issue_form::EXPERIMENT_LABEL]);
    let fields: Vec<&FormElement> = form.body.iter().filter(|e| e.kind != "markdown").collect();
    assert_eq!(fields.len(), issue_form::FIELDS.len());
    for (el, want) in fields.iter().zip(issue_form::FIELDS) {
        assert_eq!(el.id.as_deref(), Some(want.id));
        assert_eq!(
            el.attributes.get("label").and_then(|l| l.as_str()),
            Some(want.label),
            "label of {}",
            want.id
        );
        let required = el
            .validations
            .as_ref()
            .and_then(|v| v.get("required"))
            .and_then(|r| r.as_bool())
            .unwrap_or(false)
            || el.kind == "checkboxes";
        assert_eq!(required, want.required, "required of {}", want.id);
    }
    let spec = fields
        .iter()
        .find(|e| e.id.as_deref() == Some("spec"))
        .unwrap();
    assert_eq!(spec.kind, "textarea");
    assert_eq!(
        spec.attributes.get("render").and_then(|r| r.as_str()),
        Some("toml")
    );
    let consent = fields
        .iter()
        .find(|e| e.id.as_deref() == Some("publication"))
        .unwrap();
    let option = &consent.attributes.get("options").unwrap()[0];
    assert_eq!(
        option.get("label").and_then(|l| l.as_str()),
        Some(issue_form::PUBLICATION_CONSENT)
    );
    assert_eq!(option.get("required").and_then(|r| r.as_bool()), Some(true));
}
