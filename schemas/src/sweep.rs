//! Sweeps: one spec file that asks one research question over several values of some fields.
//!
//! A sweep file is an ordinary spec (the *base*) plus a `[sweep]` table naming spec fields by
//! their dotted path, each with a list of values. `mode = "grid"` (the default) runs every
//! combination; `mode = "list"` runs the i-th value of every field together (all lists the same
//! length). Each child is an ordinary, fully validated [`ExperimentSpec`] with its own hash; the
//! sweep as a whole has a *parent hash* (the canonical hash of the whole file, base and
//! `[sweep]` table), to which one approval of the set is bound, so an edit of either voids it.
//! `metric` names the final metric by which the best child is chosen (lower is better unless
//! `direction = "max"`).
//!
//! ```toml
//! [sweep]
//! mode = "grid"
//! metric = "eval/markov/loss"
//! model.moe.n_experts = [4, 8, 16]
//! train.lr = [1e-3, 3e-3]
//!
//! [experiment]   # the base spec follows, as in any spec file
//! ```
//!
//! This module only turns the file into validated children; approving and running them are the
//! lab's.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::hash::SpecHash;
use crate::spec::ExperimentSpec;
use crate::validate::{FieldError, SpecError, parse_toml_table, parse_value};

/// Most children a sweep may have.
pub const MAX_SWEEP_CHILDREN: usize = 64;

/// How the value lists combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SweepMode {
    /// Every combination (the cartesian product).
    #[default]
    Grid,
    /// The i-th value of every field together.
    List,
}

/// Which way the sweep's metric is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Lower is better (a loss).
    #[default]
    Min,
    /// Higher is better (an accuracy).
    Max,
}

/// A promotion gate: when every child has ended, the best child's final `metric` must beat the
/// final value of the experiment whose slug is `beats` by at least `by` (in the metric's units,
/// in the sweep's direction). The lab records the decision as a `gate` entry.
///
/// ```toml
/// [sweep]
/// gate = { metric = "eval/markov/loss", beats = "baseline-moe", by = 0.01 }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gate {
    /// The metric compared (defaults to the sweep's `metric`).
    pub metric: String,
    /// The baseline experiment's slug.
    pub beats: String,
    /// The margin, at least 0.
    pub by: f64,
}

/// One field swept: its dotted path and its values, in the file's order.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    /// `model.moe.n_experts`.
    pub path: String,
    /// The values tried.
    pub values: Vec<Value>,
}

/// One child of a sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepChild {
    /// Its position, from 0.
    pub index: usize,
    /// The value of each swept field, in axis order.
    pub values: Vec<(String, Value)>,
    /// The full spec.
    pub spec: ExperimentSpec,
}

/// A validated sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct Sweep {
    /// Grid or list.
    pub mode: SweepMode,
    /// The final metric that picks the best child, if named.
    pub metric: Option<String>,
    /// Which way it is better.
    pub direction: Direction,
    /// The promotion gate, if any.
    pub gate: Option<Gate>,
    /// The fields swept, by path (sorted).
    pub axes: Vec<Axis>,
    /// The children, in order.
    pub children: Vec<SweepChild>,
    /// The canonical hash of the whole file (base and `[sweep]`): what one approval binds.
    pub parent_hash: SpecHash,
}

/// Whether TOML text is a sweep file (has a top-level `[sweep]` table). Cheap: no validation.
pub fn is_sweep(text: &str) -> bool {
    text.lines().any(|l| {
        let l = l.trim();
        l == "[sweep]" || l.starts_with("[sweep.")
    })
}

/// Parses and validates a sweep file; a child's errors are reported with its index and values.
pub fn parse_sweep_toml(text: &str) -> Result<Sweep, SpecError> {
    let mut table = parse_toml_table(text)?;
    let invalid = |path: &str, value: Option<String>, rule: String| {
        SpecError::Invalid(vec![FieldError {
            path: path.to_string(),
            value,
            rule,
        }])
    };
    let whole = serde_json::to_value(&table)
        .map_err(|e| invalid("(spec)", None, format!("not representable: {e}")))?;
    let parent_hash = crate::canonical::canonical_hash(&whole)
        .map(SpecHash)
        .map_err(|e| invalid("(spec)", None, e.to_string()))?;
    let Some(toml::Value::Table(mut sweep)) = table.remove("sweep") else {
        return Err(invalid(
            "sweep",
            None,
            "must be a table of the fields to sweep".into(),
        ));
    };
    let mode = match sweep.remove("mode") {
        None => SweepMode::Grid,
        Some(toml::Value::String(s)) if s == "grid" => SweepMode::Grid,
        Some(toml::Value::String(s)) if s == "list" => SweepMode::List,
        Some(v) => {
            return Err(invalid(
                "sweep.mode",
                Some(v.to_string()),
                "must be \"grid\" (every combination) or \"list\" (the i-th values together)"
                    .into(),
            ));
        }
    };
    let metric = match sweep.remove("metric") {
        None => None,
        Some(toml::Value::String(s)) => Some(s),
        Some(v) => {
            return Err(invalid(
                "sweep.metric",
                Some(v.to_string()),
                "must be a metric name, e.g. \"eval/markov/loss\"".into(),
            ));
        }
    };
    let direction = match sweep.remove("direction") {
        None => Direction::Min,
        Some(toml::Value::String(s)) if s == "min" => Direction::Min,
        Some(toml::Value::String(s)) if s == "max" => Direction::Max,
        Some(v) => {
            return Err(invalid(
                "sweep.direction",
                Some(v.to_string()),
                "must be \"min\" (lower is better) or \"max\"".into(),
            ));
        }
    };
    let gate = match sweep.remove("gate") {
        None => None,
        Some(toml::Value::Table(t)) => Some(parse_gate(t, metric.as_deref())?),
        Some(v) => {
            return Err(invalid(
                "sweep.gate",
                Some(v.to_string()),
                "must be a table: gate = { metric = \"eval/<domain>/loss\", beats = \"baseline-slug\", by = 0.01 }".into(),
            ));
        }
    };
    let mut axes = Vec::new();
    flatten("", &sweep, &mut axes)?;
    if axes.is_empty() {
        return Err(invalid(
            "sweep",
            None,
            "names no field to sweep; add e.g. model.moe.n_experts = [4, 8]".into(),
        ));
    }
    let count = match mode {
        SweepMode::Grid => axes
            .iter()
            .try_fold(1usize, |n, a| n.checked_mul(a.values.len()))
            .unwrap_or(usize::MAX),
        SweepMode::List => {
            let n = axes[0].values.len();
            if let Some(a) = axes.iter().find(|a| a.values.len() != n) {
                return Err(invalid(
                    &format!("sweep.{}", a.path),
                    Some(format!("{} values", a.values.len())),
                    format!(
                        "must have as many values as sweep.{} ({n}) in list mode",
                        axes[0].path
                    ),
                ));
            }
            n
        }
    };
    if count > MAX_SWEEP_CHILDREN {
        return Err(invalid(
            "sweep",
            Some(format!("{count} children")),
            format!("must make at most {MAX_SWEEP_CHILDREN} children; sweep fewer values"),
        ));
    }
    let base = serde_json::to_value(&table)
        .map_err(|e| invalid("(spec)", None, format!("not representable: {e}")))?;
    // The base must be a valid spec itself; its errors are reported once, not per child.
    parse_value(&base)?;
    let mut errors = Vec::new();
    let mut children = Vec::new();
    for index in 0..count {
        let values: Vec<(String, Value)> = axes
            .iter()
            .enumerate()
            .map(|(k, a)| {
                (
                    a.path.clone(),
                    a.values[pick(mode, &axes, index, k)].clone(),
                )
            })
            .collect();
        let value = apply(&base, &values, index, count);
        match parse_value(&value) {
            Ok(spec) => children.push(SweepChild {
                index,
                values,
                spec,
            }),
            Err(e) => errors.extend(e.field_errors().iter().map(|fe| FieldError {
                path: format!("sweep child {index} ({}) -> {}", describe(&values), fe.path),
                value: fe.value.clone(),
                rule: fe.rule.clone(),
            })),
        }
    }
    if errors.is_empty()
        && let Some(m) = &metric
        && !crate::metrics::is_known_metric(
            m,
            children[0]
                .spec
                .data
                .mixture
                .iter()
                .map(|c| c.domain.as_str()),
        )
    {
        errors.push(FieldError {
            path: "sweep.metric".into(),
            value: Some(format!("{m:?}")),
            rule: "must be a metric the children report, e.g. eval/<domain>/loss".into(),
        });
    }
    if errors.is_empty()
        && let Some(g) = &gate
        && !crate::metrics::is_known_metric(
            &g.metric,
            children[0]
                .spec
                .data
                .mixture
                .iter()
                .map(|c| c.domain.as_str()),
        )
    {
        errors.push(FieldError {
            path: "sweep.gate.metric".into(),
            value: Some(format!("{:?}", g.metric)),
            rule: "must be a metric the children report, e.g. eval/<domain>/loss".into(),
        });
    }
    if errors.is_empty() {
        Ok(Sweep {
            mode,
            metric,
            direction,
            gate,
            axes,
            children,
            parent_hash,
        })
    } else {
        Err(SpecError::Invalid(errors))
    }
}

/// Reads `[sweep] gate = { metric, beats, by }`; `metric` defaults to the sweep's.
fn parse_gate(mut t: toml::Table, sweep_metric: Option<&str>) -> Result<Gate, SpecError> {
    let err = |path: &str, value: Option<String>, rule: &str| {
        SpecError::Invalid(vec![FieldError {
            path: format!("sweep.gate.{path}"),
            value,
            rule: rule.to_string(),
        }])
    };
    let metric = match t.remove("metric") {
        Some(toml::Value::String(s)) => s,
        None => match sweep_metric {
            Some(m) => m.to_string(),
            None => {
                return Err(err(
                    "metric",
                    None,
                    "is required when the sweep names no `metric`",
                ));
            }
        },
        Some(v) => return Err(err("metric", Some(v.to_string()), "must be a metric name")),
    };
    let beats = match t.remove("beats") {
        Some(toml::Value::String(s))
            if !s.is_empty()
                && s.len() <= 64
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') =>
        {
            s
        }
        Some(v) => {
            return Err(err(
                "beats",
                Some(v.to_string()),
                "must be the baseline experiment's slug (lowercase letters, digits and -, at most 64)",
            ));
        }
        None => {
            return Err(err(
                "beats",
                None,
                "is required: the slug of the experiment to beat",
            ));
        }
    };
    let by = match t.remove("by") {
        None => 0.0,
        Some(toml::Value::Float(f)) if f.is_finite() && f >= 0.0 => f,
        Some(toml::Value::Integer(i)) if i >= 0 => i as f64,
        Some(v) => {
            return Err(err(
                "by",
                Some(v.to_string()),
                "must be a finite number at least 0 (the margin, in the metric's units)",
            ));
        }
    };
    if let Some((k, v)) = t.into_iter().next() {
        return Err(err(
            &k,
            Some(v.to_string()),
            "is not a gate field; expected metric, beats or by",
        ));
    }
    Ok(Gate { metric, beats, by })
}

/// `n_experts=4, lr=0.001`: a child's values, by the last part of each path.
pub fn describe(values: &[(String, Value)]) -> String {
    values
        .iter()
        .map(|(p, v)| format!("{}={v}", p.rsplit('.').next().unwrap_or(p)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Which value of axis `k` child `index` takes: in a grid the last axis varies fastest.
fn pick(mode: SweepMode, axes: &[Axis], index: usize, k: usize) -> usize {
    match mode {
        SweepMode::List => index,
        SweepMode::Grid => {
            let stride: usize = axes[k + 1..].iter().map(|a| a.values.len()).product();
            (index / stride) % axes[k].values.len()
        }
    }
}

/// The `[sweep]` table's fields as dotted paths with their lists of values.
fn flatten(prefix: &str, t: &toml::Table, out: &mut Vec<Axis>) -> Result<(), SpecError> {
    for (k, v) in t {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(inner) => flatten(&path, inner, out)?,
            toml::Value::Array(values) if !values.is_empty() => {
                if path == "experiment" || path.starts_with("experiment.") || path == "sweep" {
                    return Err(SpecError::Invalid(vec![FieldError {
                        path: format!("sweep.{path}"),
                        value: None,
                        rule: "cannot be swept; sweep model, data, train, budget or metrics fields"
                            .into(),
                    }]));
                }
                let values = values
                    .iter()
                    .map(|x| serde_json::to_value(x).unwrap_or(Value::Null))
                    .collect();
                out.push(Axis { path, values });
            }
            other => {
                return Err(SpecError::Invalid(vec![FieldError {
                    path: format!("sweep.{path}"),
                    value: Some(other.to_string()),
                    rule: "must be a non-empty list of values, e.g. [4, 8, 16]".into(),
                }]));
            }
        }
    }
    Ok(())
}

/// The base spec with one child's values and a child-specific name and slug.
fn apply(base: &Value, values: &[(String, Value)], index: usize, count: usize) -> Value {
    let mut v = base.clone();
    for (path, value) in values {
        let mut at = &mut v;
        let parts: Vec<&str> = path.split('.').collect();
        for (i, part) in parts.iter().enumerate() {
            let Some(obj) = at.as_object_mut() else { break };
            if i + 1 == parts.len() {
                obj.insert(part.to_string(), value.clone());
                break;
            }
            at = obj
                .entry(part.to_string())
                .or_insert_with(|| Value::Object(Default::default()));
        }
    }
    let text = |p: &str| {
        v.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("sweep")
            .to_string()
    };
    let (slug, name) = (text("/experiment/slug"), text("/experiment/name"));
    if let Some(e) = v.get_mut("experiment").and_then(Value::as_object_mut) {
        e.insert("slug".into(), Value::from(format!("{slug}-s{index}")));
        e.insert(
            "name".into(),
            Value::from(format!("{name} [{}/{count}]", index + 1)),
        );
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example() -> String {
        std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/sweep.toml"
        ))
        .unwrap()
    }

    #[test]
    fn a_grid_makes_every_combination_last_axis_fastest() {
        let text = example();
        assert!(is_sweep(&text));
        let s = parse_sweep_toml(&text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.mode, SweepMode::Grid);
        assert_eq!(s.children.len(), 4);
        let got: Vec<(u32, f64)> = s
            .children
            .iter()
            .map(|c| (c.spec.model.moe.n_experts, c.spec.train.lr))
            .collect();
        assert_eq!(got, vec![(4, 0.001), (4, 0.003), (8, 0.001), (8, 0.003)]);
        let slugs: Vec<&str> = s
            .children
            .iter()
            .map(|c| c.spec.experiment.slug.as_str())
            .collect();
        assert_eq!(slugs[0], "moe-experts-sweep-s0");
        let hashes: std::collections::BTreeSet<_> = s
            .children
            .iter()
            .map(|c| crate::spec_hash(&c.spec).unwrap())
            .collect();
        assert_eq!(hashes.len(), 4, "every child is its own experiment");
        assert_eq!(s.metric.as_deref(), Some("eval/markov/loss"));
        assert_eq!(describe(&s.children[1].values), "n_experts=4, lr=0.003");
    }

    #[test]
    fn the_parent_hash_covers_the_base_and_the_sweep() {
        let text = example();
        let a = parse_sweep_toml(&text).unwrap().parent_hash;
        let again = parse_sweep_toml(&text).unwrap().parent_hash;
        assert_eq!(a, again);
        let other_values = parse_sweep_toml(&text.replace("[4, 8]", "[4, 16]"))
            .unwrap()
            .parent_hash;
        let other_base = parse_sweep_toml(&text.replace("steps = 60", "steps = 80"))
            .unwrap()
            .parent_hash;
        assert!(a != other_values && a != other_base && other_values != other_base);
    }

    #[test]
    fn a_list_pairs_values_and_needs_equal_lengths() {
        let text = example().replace("mode = \"grid\"", "mode = \"list\"");
        let s = parse_sweep_toml(&text).unwrap();
        let got: Vec<(u32, f64)> = s
            .children
            .iter()
            .map(|c| (c.spec.model.moe.n_experts, c.spec.train.lr))
            .collect();
        assert_eq!(got, vec![(4, 0.001), (8, 0.003)]);
        let err = parse_sweep_toml(&text.replace("[4, 8]", "[4, 8, 16]")).unwrap_err();
        assert!(
            err.to_string()
                .contains("as many values as sweep.model.moe.n_experts (3)")
                || err.to_string().contains("as many values"),
            "{err}"
        );
    }

    #[test]
    fn bad_sweeps_name_the_field() {
        let text = example();
        let err = parse_sweep_toml(&text.replace("[4, 8]", "[4, 0]")).unwrap_err();
        let first = &err.field_errors()[0];
        assert_eq!(
            first.path, "sweep child 2 (n_experts=0, lr=0.001) -> model.moe.n_experts",
            "{err}"
        );
        let err = parse_sweep_toml(&text.replace("[4, 8]", "4")).unwrap_err();
        assert!(
            err.to_string().contains("non-empty list of values"),
            "{err}"
        );
        let err =
            parse_sweep_toml(&text.replace("mode = \"grid\"", "mode = \"random\"")).unwrap_err();
        assert!(err.to_string().contains("sweep.mode"), "{err}");
        let err = parse_sweep_toml(&text.replace(
            "model.moe.n_experts = [4, 8]",
            "experiment.slug = [\"a\", \"b\"]",
        ))
        .unwrap_err();
        assert!(err.to_string().contains("cannot be swept"), "{err}");
        let many = text.replace("[4, 8]", &format!("{:?}", (1..=33).collect::<Vec<u32>>()));
        let err = parse_sweep_toml(&many).unwrap_err();
        assert!(err.to_string().contains("at most 64 children"), "{err}");
        let err =
            parse_sweep_toml(&text.replace("eval/markov/loss", "eval/markov/los")).unwrap_err();
        assert!(err.to_string().contains("sweep.metric"), "{err}");
    }
}
