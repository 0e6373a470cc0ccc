//! Turning spec text into an [`ExperimentSpec`], reporting every mistake at once.
//!
//! Three passes, each reporting all it finds:
//! 1. size (over [`MAX_SPEC_BYTES`] is refused before parsing), TOML syntax (line:column), and
//!    the values a spec may hold at all ([`crate::literals`]: finite numbers, text without
//!    control or bidirectional characters);
//! 2. shape: the JSON Schema derived from the types ([`crate::schema`]) — types, ranges,
//!    patterns, required and unknown fields (with the nearest known name);
//! 3. meaning: rules that relate fields (`top_k <= n_experts`, `d_model % n_heads`, ...).
//!
//! Pass 3 runs on every top-level section that deserializes on its own, so shape and meaning
//! errors are reported together. Every
//! [`FieldError`] carries the field path, the value given and the rule, e.g.
//! `model.moe.top_k = 9: must be <= model.moe.n_experts (8)`.
//! This module does not fill defaults (serde does, from [`crate::spec`]) and does not hash.

use jsonschema::error::ValidationErrorKind;
use serde_json::Value;

use crate::schema;
use crate::spec::{DataConfig, Experiment, ExperimentSpec, Forecast, GeneratorKind, Tokenizer};
pub use crate::spec_error::{FieldError, SpecError};

/// Largest spec text accepted (1 MiB); bigger input is refused before it is parsed.
pub const MAX_SPEC_BYTES: usize = 1 << 20;

/// Parses and validates TOML spec text. Defaults are filled in the result.
pub fn parse_toml(text: &str) -> Result<ExperimentSpec, SpecError> {
    let table = parse_toml_table(text)?;
    // TOML and JSON share a data model for everything a spec uses; datetimes (which a spec never
    // uses) come out as objects and fail the schema with a type error.
    let value = serde_json::to_value(&table).map_err(|e| {
        SpecError::Invalid(vec![FieldError {
            path: "(spec)".into(),
            value: None,
            rule: format!("cannot be represented as JSON: {e}"),
        }])
    })?;
    parse_value(&value)
}

/// The size check and TOML syntax pass, shared with ladder files.
pub(crate) fn parse_toml_table(text: &str) -> Result<toml::Table, SpecError> {
    if text.len() > MAX_SPEC_BYTES {
        return Err(SpecError::TooLarge {
            bytes: text.len(),
            limit: MAX_SPEC_BYTES,
        });
    }
    let table: toml::Table = toml::from_str(text).map_err(|e| syntax_error(text, &e))?;
    let refused = crate::literals::check(&table);
    if !refused.is_empty() {
        return Err(SpecError::Invalid(refused));
    }
    Ok(table)
}

/// Validates a spec given as JSON (e.g. read back from the ledger).
pub fn parse_json(text: &str) -> Result<ExperimentSpec, SpecError> {
    if text.len() > MAX_SPEC_BYTES {
        return Err(SpecError::TooLarge {
            bytes: text.len(),
            limit: MAX_SPEC_BYTES,
        });
    }
    let value: Value = serde_json::from_str(text).map_err(|e| SpecError::Syntax {
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
    parse_value(&value)
}

/// Validates a JSON value against the schema, then deserializes and checks cross-field rules.
pub fn parse_value(value: &Value) -> Result<ExperimentSpec, SpecError> {
    let mut errors = shape_errors(value);
    // A cross-field rule about a field (or a table) the shape pass already flagged inside
    // would only repeat that error in other words: it is left out.
    let semantic: Vec<FieldError> = semantic_errors(value, &errors)
        .into_iter()
        .filter(|s| {
            !errors.iter().any(|e| {
                e.path == s.path
                    || e.path.starts_with(&format!("{}.", s.path))
                    || e.path.starts_with(&format!("{}[", s.path))
            })
        })
        .collect();
    errors.extend(semantic);
    if !errors.is_empty() {
        return Err(SpecError::Invalid(errors));
    }
    serde_json::from_value(value.clone()).map_err(|e| {
        // The schema should have caught everything serde rejects (integer overflow is the one
        // known gap); report it in the same form rather than as a bare serde message.
        SpecError::Invalid(vec![FieldError {
            path: "(spec)".into(),
            value: None,
            rule: e.to_string(),
        }])
    })
}

fn syntax_error(text: &str, e: &toml::de::Error) -> SpecError {
    let offset = e.span().map(|s| s.start).unwrap_or(0).min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before
        .rsplit('\n')
        .next()
        .map(|l| l.chars().count())
        .unwrap_or(0)
        + 1;
    SpecError::Syntax {
        line,
        column,
        message: e.message().trim().to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// Pass 2: shape, from the JSON Schema.

fn shape_errors(value: &Value) -> Vec<FieldError> {
    let validator = schema::validator();
    let mut out = Vec::new();
    for err in validator.iter_errors(value) {
        let path = pointer_to_path(err.instance_path().as_str());
        convert(&path, err.instance(), err.kind(), &mut out);
    }
    out.dedup();
    out
}

/// Maps one schema error to field errors. Alternatives (`oneOf`/`anyOf`, used for optional
/// fields and for the `balancing` method table) are reported through the branch that came
/// closest, so the user sees "unknown field `rat`" rather than "no branch matched".
fn convert(path: &str, instance: &Value, kind: &ValidationErrorKind, out: &mut Vec<FieldError>) {
    let here = |rule: String| FieldError {
        path: display_path(path),
        value: Some(show(instance)),
        rule,
    };
    match kind {
        ValidationErrorKind::AdditionalProperties { unexpected } => {
            let known = schema::known_fields(path, instance);
            for name in unexpected {
                let child = if path.is_empty() {
                    name.clone()
                } else {
                    format!("{path}.{name}")
                };
                out.push(FieldError {
                    path: child,
                    value: None,
                    rule: unknown_field_rule(name, &known),
                });
            }
        }
        ValidationErrorKind::Required { property } => {
            let name = property.as_str().unwrap_or_default();
            let child = if path.is_empty() {
                name.to_string()
            } else {
                format!("{path}.{name}")
            };
            out.push(FieldError {
                path: child,
                value: None,
                rule: "is required".into(),
            });
        }
        ValidationErrorKind::Type { kind } => {
            let names: Vec<String> = match kind {
                jsonschema::error::TypeKind::Single(t) => vec![t.to_string()],
                jsonschema::error::TypeKind::Multiple(set) => {
                    set.iter().map(|t| t.to_string()).collect()
                }
            };
            let names: Vec<String> = names.into_iter().filter(|n| n != "null").collect();
            out.push(here(format!(
                "must be {}",
                with_article(&names.join(" or "))
            )));
        }
        ValidationErrorKind::Minimum { limit } => out.push(here(format!("must be >= {limit}"))),
        ValidationErrorKind::Maximum { limit } => out.push(here(format!("must be <= {limit}"))),
        ValidationErrorKind::ExclusiveMinimum { limit } => {
            out.push(here(format!("must be > {limit}")))
        }
        ValidationErrorKind::ExclusiveMaximum { limit } => {
            out.push(here(format!("must be < {limit}")))
        }
        ValidationErrorKind::MinLength { limit } => {
            out.push(here(format!("must have at least {limit} characters")))
        }
        ValidationErrorKind::MaxLength { limit } => {
            out.push(here(format!("must have at most {limit} characters")))
        }
        ValidationErrorKind::MinItems { limit } => {
            out.push(here(format!("must have at least {limit} entries")))
        }
        ValidationErrorKind::MaxItems { limit } => {
            out.push(here(format!("must have at most {limit} entries")))
        }
        ValidationErrorKind::Pattern { pattern } => {
            out.push(here(format!("must match the pattern {pattern}")))
        }
        ValidationErrorKind::Enum { options } => {
            out.push(here(format!("must be one of {}", list_values(options))))
        }
        ValidationErrorKind::Constant { expected_value } => {
            out.push(here(format!("must be {}", show(expected_value))))
        }
        ValidationErrorKind::OneOfNotValid { context } | ValidationErrorKind::AnyOf { context } => {
            convert_alternatives(path, instance, context, out)
        }
        _ => out.push(FieldError {
            path: display_path(path),
            value: Some(show(instance)),
            rule: kind_fallback(kind),
        }),
    }
}

fn kind_fallback(kind: &ValidationErrorKind) -> String {
    format!("does not match the spec schema ({kind:?})")
}

fn convert_alternatives(
    path: &str,
    instance: &Value,
    branches: &[Vec<jsonschema::ValidationError<'static>>],
    out: &mut Vec<FieldError>,
) {
    // A tagged table (`method = "..."`): if no branch accepts the tag, say which tags exist.
    if let Some(tag) = instance.get("method") {
        let mut tags = Vec::new();
        let mut tag_ok_branch = None;
        for (i, branch) in branches.iter().enumerate() {
            let mut tag_failed = false;
            for e in branch {
                if e.instance_path().as_str().ends_with("/method") {
                    if let ValidationErrorKind::Constant { expected_value } = e.kind() {
                        tags.push(show(expected_value));
                        tag_failed = true;
                    }
                }
            }
            if !tag_failed && tag_ok_branch.is_none() {
                tag_ok_branch = Some(i);
            }
        }
        match tag_ok_branch {
            Some(i) => {
                for e in &branches[i] {
                    let p = pointer_to_path(e.instance_path().as_str());
                    convert(&p, e.instance(), e.kind(), out);
                }
            }
            None => out.push(FieldError {
                path: display_path(&join(path, "method")),
                value: Some(show(tag)),
                rule: format!("must be one of {}", tags.join(", ")),
            }),
        }
        return;
    }
    // Optional fields are `anyOf [T, null]`: drop branches that only say "wrong type" (the null
    // branch, for a present value) and report the closest remaining one.
    let informative: Vec<&Vec<_>> = branches
        .iter()
        .filter(|b| {
            !(b.len() == 1
                && matches!(b[0].kind(), ValidationErrorKind::Type { .. })
                && pointer_to_path(b[0].instance_path().as_str()) == path)
        })
        .collect();
    match informative.iter().min_by_key(|b| b.len()) {
        Some(best) => {
            for e in best.iter() {
                let p = pointer_to_path(e.instance_path().as_str());
                convert(&p, e.instance(), e.kind(), out);
            }
        }
        None => {
            // Every branch is a type mismatch: report them together.
            let mut rules = Vec::new();
            for b in branches {
                let mut tmp = Vec::new();
                for e in b {
                    convert(path, e.instance(), e.kind(), &mut tmp);
                }
                rules.extend(tmp.into_iter().map(|e| e.rule));
            }
            rules.retain(|r| r != "must be ");
            out.push(FieldError {
                path: display_path(path),
                value: Some(show(instance)),
                rule: rules.join("; "),
            });
        }
    }
}

fn unknown_field_rule(name: &str, known: &[String]) -> String {
    let nearest = known
        .iter()
        .map(|k| (strsim::jaro_winkler(name, k), k))
        .filter(|(score, _)| *score >= 0.7)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k.clone());
    let list = if known.is_empty() {
        String::new()
    } else {
        format!(" (known fields: {})", known.join(", "))
    };
    match nearest {
        Some(k) => format!("unknown field `{name}`; did you mean `{k}`?{list}"),
        None => format!("unknown field `{name}`{list}"),
    }
}

/// `/data/mixture/0/weight` -> `data.mixture[0].weight` (the internal form keeps indices as
/// `[i]` so it can be shown as is).
fn pointer_to_path(pointer: &str) -> String {
    let mut out = String::new();
    for seg in pointer.split('/').skip(1) {
        let seg = seg.replace("~1", "/").replace("~0", "~");
        if !seg.is_empty() && seg.bytes().all(|b| b.is_ascii_digit()) {
            out.push_str(&format!("[{seg}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&seg);
        }
    }
    out
}

fn display_path(path: &str) -> String {
    if path.is_empty() {
        "(spec)".into()
    } else {
        path.to_string()
    }
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

fn with_article(noun: &str) -> String {
    let article = if noun.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    format!("{article} {noun}")
}

fn list_values(options: &Value) -> String {
    match options.as_array() {
        Some(items) => items.iter().map(show).collect::<Vec<_>>().join(", "),
        None => show(options),
    }
}

/// Compact JSON of a value, cut to 60 characters.
fn show(value: &Value) -> String {
    let s = value.to_string();
    if s.chars().count() > 60 {
        let cut: String = s.chars().take(57).collect();
        format!("{cut}...")
    } else {
        s
    }
}

// ---------------------------------------------------------------------------------------------
// Pass 3: meaning.

/// Words that carry no claim; a hypothesis needs at least four distinct words besides these.
const PLACEHOLDER_HYPOTHESES: &[&str] = &[
    "todo", "tbd", "n/a", "test", "testing", "lorem", "ipsum", "xxx", "asdf", "foo", "bar",
];

/// The sections of a spec that deserialized on their own, after the fields the shape pass
/// already flagged were taken out. Cross-field rules run on whatever parsed, so a type error in
/// `train` or a misspelt field in `[model.moe]` does not hide a `d_model`/`n_heads` mistake: a
/// spec's every error is reported in one pass.
struct Sections {
    experiment: Option<Experiment>,
    data: Option<DataConfig>,
    forecast: Option<Forecast>,
}

impl Sections {
    fn of(value: &Value, flagged: &[FieldError]) -> Self {
        let mut pruned = value.clone();
        for e in flagged {
            // A missing field cannot be taken out; anything else flagged at a path is.
            if e.rule != "is required" {
                remove_path(&mut pruned, &e.path);
            }
        }
        fn section<T: serde::de::DeserializeOwned>(value: &Value, name: &str) -> Option<T> {
            value
                .get(name)
                .and_then(|v| serde_json::from_value(v.clone()).ok())
        }
        Sections {
            experiment: section(&pruned, "experiment"),
            data: section(&pruned, "data"),
            forecast: section(&pruned, "forecast"),
        }
    }
}

/// Removes the field at a shown path (`model.moe.topk`, `data.mixture[0].weight`) from
/// `value`, if it is there.
fn remove_path(value: &mut Value, path: &str) {
    let mut segments: Vec<&str> = Vec::new();
    for part in path.split('.') {
        let (name, rest) = part.split_once('[').unwrap_or((part, ""));
        if !name.is_empty() {
            segments.push(name);
        }
        for index in rest.split('[') {
            let index = index.trim_end_matches(']');
            if !index.is_empty() {
                segments.push(index);
            }
        }
    }
    let Some((last, parents)) = segments.split_last() else {
        return;
    };
    let mut here = value;
    for seg in parents {
        here = match here {
            Value::Object(m) => match m.get_mut(*seg) {
                Some(v) => v,
                None => return,
            },
            Value::Array(a) => match seg.parse::<usize>().ok().and_then(|i| a.get_mut(i)) {
                Some(v) => v,
                None => return,
            },
            _ => return,
        };
    }
    if let Value::Object(m) = here {
        m.remove(*last);
    }
}

/// The model's whole-number fields the cross-field rules use, read one by one so that any
/// other problem in `[model]` (a misspelt `[model.moe]` field, a wrong type elsewhere) does not
/// hide them. A field the shape pass flagged is left out.
struct ModelNumbers {
    vocab: Option<u32>,
    d_model: Option<u32>,
    n_heads: Option<u32>,
    n_layers: Option<u32>,
    n_experts: Option<u32>,
    top_k: Option<u32>,
}

impl ModelNumbers {
    fn of(value: &Value, flagged: &[FieldError]) -> Self {
        let read = |path: &str| -> Option<u32> {
            if flagged.iter().any(|e| e.path == path) {
                return None;
            }
            let pointer = format!("/{}", path.replace('.', "/"));
            value
                .pointer(&pointer)?
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
        };
        let has_model = value.get("model").is_some_and(Value::is_object);
        ModelNumbers {
            vocab: read("model.vocab").or(has_model.then(crate::spec::default_vocab)),
            d_model: read("model.d_model"),
            n_heads: read("model.n_heads"),
            n_layers: read("model.n_layers"),
            n_experts: read("model.moe.n_experts"),
            top_k: read("model.moe.top_k"),
        }
    }
}

fn semantic_errors(value: &Value, flagged: &[FieldError]) -> Vec<FieldError> {
    let s = Sections::of(value, flagged);
    let m = ModelNumbers::of(value, flagged);
    let mut errs = Vec::new();
    let mut err = |path: &str, value: String, rule: String| {
        errs.push(FieldError {
            path: path.to_string(),
            value: Some(value),
            rule,
        })
    };

    if let Some(e) = &s.experiment {
        let lowered = e.hypothesis.trim().to_lowercase();
        let words: Vec<&str> = lowered.split_whitespace().collect();
        let distinct: std::collections::BTreeSet<&str> = words
            .iter()
            .copied()
            .filter(|w| !PLACEHOLDER_HYPOTHESES.contains(w))
            .collect();
        if words.len() < 5 || distinct.len() < 4 {
            err(
                "experiment.hypothesis",
                show(&Value::String(e.hypothesis.clone())),
                "must state a claim in at least 5 words (what you expect and why)".into(),
            );
        }
        let mut seen_tags = std::collections::BTreeSet::new();
        for (i, t) in e.tags.iter().enumerate() {
            if !seen_tags.insert(t) {
                err(
                    &format!("experiment.tags[{i}]"),
                    format!("{t:?}"),
                    "is listed twice".into(),
                );
            }
        }
    }

    if let (Some(d_model), Some(n_heads)) = (m.d_model, m.n_heads) {
        if n_heads == 0 || d_model % n_heads != 0 {
            err(
                "model.n_heads",
                n_heads.to_string(),
                format!("must divide model.d_model ({d_model})"),
            );
        } else if (d_model / n_heads) % 2 != 0 {
            err(
                "model.n_heads",
                n_heads.to_string(),
                format!(
                    "must leave an even head size for RoPE (d_model / n_heads = {})",
                    d_model / n_heads
                ),
            );
        }
    }
    if let Some(vocab) = m.vocab {
        if let Some(d) = &s.data {
            if d.tokenizer == Tokenizer::Bytes && vocab != 256 {
                err(
                    "model.vocab",
                    vocab.to_string(),
                    "must be 256 with data.tokenizer = \"bytes\"".into(),
                );
            }
        }
    }

    if let (Some(top_k), Some(n_experts)) = (m.top_k, m.n_experts) {
        if top_k > n_experts {
            err(
                "model.moe.top_k",
                top_k.to_string(),
                format!("must be <= model.moe.n_experts ({n_experts})"),
            );
        }
    }

    // Read field by field, like the model's numbers, so a wrong type elsewhere in `[train]`
    // does not hide these.
    let train_number = |path: &str| -> Option<u64> {
        if flagged.iter().any(|e| e.path == path) {
            return None;
        }
        value
            .pointer(&format!("/{}", path.replace('.', "/")))?
            .as_u64()
    };
    if let Some(steps) = train_number("train.steps") {
        if let Some(warmup) = train_number("train.warmup_steps") {
            if warmup > steps {
                err(
                    "train.warmup_steps",
                    warmup.to_string(),
                    format!("must be <= train.steps ({steps})"),
                );
            }
        }
        let milestones = value
            .pointer("/train/lr_milestones")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let mut previous = 0;
        for (i, m) in milestones.iter().enumerate() {
            let Some(step) = m.get("step").and_then(Value::as_u64) else {
                continue;
            };
            if step >= steps {
                err(
                    &format!("train.lr_milestones[{i}].step"),
                    step.to_string(),
                    format!("must be < train.steps ({steps})"),
                );
            } else if step <= previous && i > 0 {
                err(
                    &format!("train.lr_milestones[{i}].step"),
                    step.to_string(),
                    format!("must be after the previous milestone's step ({previous})"),
                );
            }
            previous = step;
        }
    }

    let mut domains = std::collections::BTreeSet::new();
    if let Some(d) = &s.data {
        let mut total_weight = 0.0;
        for (i, c) in d.mixture.iter().enumerate() {
            let p = format!("data.mixture[{i}]");
            if !domains.insert(c.domain.as_str()) {
                err(
                    &format!("{p}.domain"),
                    format!("{:?}", c.domain),
                    "is used by an earlier mixture entry; domain names must be unique".into(),
                );
            }
            if c.corpus.is_some() == c.generator.is_some() {
                err(
                    &p,
                    format!("{{domain = {:?}}}", c.domain),
                    "must give exactly one of `corpus` (a blake3 hash) or `generator`".into(),
                );
            }
            if let Some(g) = &c.generator {
                match g.kind {
                    GeneratorKind::Markov => {
                        if g.branching > g.alphabet {
                            err(
                                &format!("{p}.generator.branching"),
                                g.branching.to_string(),
                                format!("must be <= {p}.generator.alphabet ({})", g.alphabet),
                            );
                        }
                        if let Some(vocab) = m.vocab {
                            if g.alphabet > vocab {
                                err(
                                    &format!("{p}.generator.alphabet"),
                                    g.alphabet.to_string(),
                                    format!("must be <= model.vocab ({vocab})"),
                                );
                            }
                        }
                    }
                }
            }
            total_weight += c.weight;
        }
        if !d.mixture.is_empty() && total_weight <= 0.0 {
            err(
                "data.mixture",
                format!("total weight {total_weight}"),
                "at least one entry must have weight > 0".into(),
            );
        }
    }

    if let (Some(f), Some(_)) = (&s.forecast, &s.data) {
        let layers_ok = m
            .n_layers
            .is_none_or(|n| crate::metrics::layer_in_range(&f.metric, n));
        let reported =
            crate::metrics::is_known_metric(&f.metric, domains.iter().copied()) && layers_ok;
        let evaluated = crate::eval::parse_metric_name(&f.metric).is_some();
        if !(reported || evaluated) {
            err(
                "forecast.metric",
                format!("{:?}", f.metric),
                format!(
                    "must be a metric this run reports, e.g. {}, or an evaluation's, eval:SUITE/acc_norm",
                    crate::metrics::forecastable_examples(domains.iter().copied()).join(", ")
                ),
            );
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointer_paths_read_like_toml() {
        assert_eq!(
            pointer_to_path("/data/mixture/0/weight"),
            "data.mixture[0].weight"
        );
        assert_eq!(pointer_to_path(""), "");
        assert_eq!(pointer_to_path("/model"), "model");
    }

    /// Every error in one pass: a misspelt `[model.moe]` field, a wrong type in `[train]` and
    /// a field the schema refuses do not hide the cross-field rules (heads against width,
    /// `top_k` against the experts, warm-up against steps).
    #[test]
    fn every_error_is_reported_in_one_pass() {
        let tiny = include_str!("../../examples/tiny.toml");
        let text = tiny
            .replace("n_heads = 4", "n_heads = 5")
            .replace("top_k = 2", "topk = 2\ntop_k = 9")
            .replace("batch_size = 8", "batch_size = \"eight\"")
            .replace("warmup_steps = 30", "warmup_steps = 3000");
        let err = parse_toml(&text).unwrap_err();
        let paths: Vec<&str> = err.field_errors().iter().map(|e| e.path.as_str()).collect();
        for want in [
            "model.moe.topk",
            "train.batch_size",
            "model.n_heads",
            "model.moe.top_k",
            "train.warmup_steps",
        ] {
            assert!(paths.contains(&want), "{want} missing from {paths:?}");
        }
        // The clean file is valid, so each error above comes from one edit.
        parse_toml(tiny).unwrap();
    }

    #[test]
    fn flagged_fields_come_out_at_any_depth() {
        let mut v = serde_json::json!({"a": {"b": [{"c": 1, "d": 2}]}, "e": 3});
        remove_path(&mut v, "a.b[0].c");
        remove_path(&mut v, "e");
        remove_path(&mut v, "x.y[3]");
        assert_eq!(v, serde_json::json!({"a": {"b": [{"d": 2}]}}));
    }

    #[test]
    fn nearest_name_is_suggested() {
        let known = vec!["top_k".to_string(), "n_experts".to_string()];
        assert!(unknown_field_rule("topk", &known).contains("did you mean `top_k`"));
        assert!(!unknown_field_rule("zzzzzz", &known).contains("did you mean"));
    }
}
