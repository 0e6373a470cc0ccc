//! The JSON Schema of the experiment spec, derived from the Rust types (schemars).
//!
//! The committed copy at `schemas/json/experiment-spec.schema.json` is what editors and other
//! tools use; a test fails when it differs from what the types generate (regenerate with
//! `UPDATE_SCHEMA=1 cargo test -p glassbox-schemas`, or `glassbox spec schema`). This module also
//! holds the compiled validator that [`crate::validate`] runs, and answers "which fields exist
//! here?" for unknown-field suggestions. It does not define any rule itself.

use std::sync::OnceLock;

use serde_json::Value;

use crate::spec::ExperimentSpec;

/// Where the committed schema lives, relative to the workspace root.
pub const SCHEMA_PATH: &str = "schemas/json/experiment-spec.schema.json";

/// The schema as a JSON value (draft 2020-12).
pub fn experiment_spec_schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let mut schema = serde_json::to_value(schemars::schema_for!(ExperimentSpec))
            .expect("a derived schema is always representable as JSON");
        if let Some(obj) = schema.as_object_mut() {
            obj.insert(
                "$id".into(),
                Value::String("https://glassbox.dev/schemas/experiment-spec.schema.json".into()),
            );
        }
        schema
    })
}

/// The schema as pretty JSON with a trailing newline: the exact bytes of the committed file.
pub fn experiment_spec_schema_pretty() -> String {
    let mut s = serde_json::to_string_pretty(experiment_spec_schema())
        .expect("a JSON value always serializes");
    s.push('\n');
    s
}

pub(crate) fn validator() -> &'static jsonschema::Validator {
    static VALIDATOR: OnceLock<jsonschema::Validator> = OnceLock::new();
    VALIDATOR.get_or_init(|| {
        jsonschema::validator_for(experiment_spec_schema())
            .expect("the derived schema is a valid JSON Schema (tested)")
    })
}

/// The field names allowed at a dotted path (`model.moe`, `data.mixture[0]`), for suggesting
/// the nearest name when an unknown one is given. Empty when the path is not an object.
/// `instance` is the object found there: for a tagged table (`method = "quantile"`) only the
/// fields of that variant are listed.
pub(crate) fn known_fields(path: &str, instance: &Value) -> Vec<String> {
    let root = experiment_spec_schema();
    let mut node = resolve(root, root);
    for seg in path_segments(path) {
        let next = match seg {
            Segment::Index => node.get("items"),
            Segment::Field(name) => find_property(root, node, name),
        };
        match next {
            Some(n) => node = resolve(root, n),
            None => return Vec::new(),
        }
    }
    let mut names = Vec::new();
    collect_properties(root, node, instance, &mut names);
    names.sort();
    names.dedup();
    names
}

enum Segment<'a> {
    Field(&'a str),
    Index,
}

fn path_segments(path: &str) -> Vec<Segment<'_>> {
    let mut out = Vec::new();
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (name, rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !name.is_empty() {
            out.push(Segment::Field(name));
        }
        for _ in rest.matches('[') {
            out.push(Segment::Index);
        }
    }
    out
}

/// Follows a local `$ref` (`#/$defs/Name`).
fn resolve<'a>(root: &'a Value, node: &'a Value) -> &'a Value {
    match node.get("$ref").and_then(Value::as_str) {
        Some(r) => r
            .strip_prefix('#')
            .and_then(|p| root.pointer(p))
            .map(|n| resolve(root, n))
            .unwrap_or(node),
        None => node,
    }
}

/// Alternatives of a node (`oneOf` / `anyOf` branches), or the node itself.
fn branches<'a>(root: &'a Value, node: &'a Value) -> Vec<&'a Value> {
    let mut out = Vec::new();
    for key in ["oneOf", "anyOf"] {
        if let Some(items) = node.get(key).and_then(Value::as_array) {
            out.extend(items.iter().map(|b| resolve(root, b)));
        }
    }
    if out.is_empty() {
        out.push(node);
    }
    out
}

fn find_property<'a>(root: &'a Value, node: &'a Value, name: &str) -> Option<&'a Value> {
    branches(root, node)
        .into_iter()
        .find_map(|b| b.get("properties").and_then(|p| p.get(name)))
}

fn collect_properties(root: &Value, node: &Value, instance: &Value, names: &mut Vec<String>) {
    let all = branches(root, node);
    // Keep only the variant named by the instance's tag, when it names one.
    let tagged: Vec<&Value> = match instance.get("method") {
        Some(tag) => all
            .iter()
            .copied()
            .filter(|b| b.pointer("/properties/method/const") == Some(tag))
            .collect(),
        None => Vec::new(),
    };
    let chosen = if tagged.is_empty() { all } else { tagged };
    for b in chosen {
        if let Some(props) = b.get("properties").and_then(Value::as_object) {
            names.extend(props.keys().cloned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_fields_follow_refs_and_arrays() {
        let none = Value::Null;
        let moe = known_fields("model.moe", &none);
        assert!(moe.contains(&"top_k".to_string()), "{moe:?}");
        let mix = known_fields("data.mixture[0]", &none);
        assert!(mix.contains(&"generator".to_string()), "{mix:?}");
        let bal = known_fields("model.moe.balancing", &none);
        assert!(bal.contains(&"rate".to_string()) && bal.contains(&"coef".to_string()));
        let quantile = known_fields(
            "model.moe.balancing",
            &serde_json::json!({"method": "quantile", "rate": 1}),
        );
        assert_eq!(quantile, vec!["method".to_string(), "scale".to_string()]);
        assert!(known_fields("model.d_model", &none).is_empty());
    }
}
