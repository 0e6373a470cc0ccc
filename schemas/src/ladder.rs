//! Scaling ladders: one file that describes several experiments of growing size.
//!
//! A ladder file is an ordinary spec (the *base*) plus a `[ladder]` table listing rungs; each
//! rung overrides a few size fields of the base. The last rung is the *target*: the lab fits
//! `L(C) = E + A * C^-alpha` on the earlier rungs' final eval loss and pre-registers a forecast
//! for the target before it runs. This module only turns the file into validated
//! [`ExperimentSpec`]s, one per rung; fitting and running are the lab's.
//!
//! ```toml
//! [ladder]
//! metric = "eval/markov/loss"
//! tolerance = 0.05
//! floor = "known"                      # or "fitted"
//! rungs = [ { d_model = 32 }, { d_model = 48 }, { d_model = 64 }, { d_model = 96, steps = 400 } ]
//!
//! [experiment]   # the base spec follows, as in any spec file
//! ```

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::spec::ExperimentSpec;
use crate::validate::{FieldError, SpecError, parse_toml_table, parse_value};

/// The `[ladder]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LadderConfig {
    /// The metric the scaling law is fitted on and the forecast predicts.
    pub metric: String,
    /// Allowed absolute error of the target's forecast.
    pub tolerance: f64,
    /// Whether the irreducible loss `E` is fitted or fixed to the known entropy floor of a
    /// synthetic domain.
    #[serde(default)]
    pub floor: FloorMode,
    /// The rungs, smallest first; the last is the target.
    pub rungs: Vec<Rung>,
}

/// How the irreducible-loss term `E` of the scaling law is obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FloorMode {
    /// Least squares over `E`, `A` and `alpha`.
    #[default]
    Fitted,
    /// `E` is the entropy floor of the (single, synthetic) training domain.
    Known,
}

/// What a rung changes in the base spec. Fields left out keep the base value.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rung {
    /// `model.d_model`.
    pub d_model: Option<u32>,
    /// `model.n_layers`.
    pub n_layers: Option<u32>,
    /// `model.n_heads`.
    pub n_heads: Option<u32>,
    /// `model.moe.d_expert`.
    pub d_expert: Option<u32>,
    /// `model.moe.n_experts`.
    pub n_experts: Option<u32>,
    /// `model.moe.top_k`.
    pub top_k: Option<u32>,
    /// `train.steps`.
    pub steps: Option<u64>,
    /// `train.batch_size`.
    pub batch_size: Option<u32>,
    /// `train.lr`.
    pub lr: Option<f64>,
}

/// A validated ladder: its settings and one full spec per rung.
#[derive(Debug, Clone, PartialEq)]
pub struct Ladder {
    /// The `[ladder]` table.
    pub config: LadderConfig,
    /// One spec per rung, smallest first; the last is the target.
    pub rungs: Vec<ExperimentSpec>,
}

impl Ladder {
    /// The rung the forecast is for.
    pub fn target(&self) -> &ExperimentSpec {
        self.rungs
            .last()
            .expect("a validated ladder has at least 3 rungs")
    }
}

/// Whether TOML text is a ladder file (has a top-level `[ladder]` table). Cheap: no validation.
pub fn is_ladder(text: &str) -> bool {
    text.lines().any(|l| {
        let l = l.trim();
        l == "[ladder]" || l.starts_with("[[ladder.") || l.starts_with("[ladder.")
    })
}

/// Parses and validates a ladder file; every rung's errors are reported with its index.
pub fn parse_ladder_toml(text: &str) -> Result<Ladder, SpecError> {
    let mut table = parse_toml_table(text)?;
    let field = |path: &str, value: Option<String>, rule: String| FieldError {
        path: path.to_string(),
        value,
        rule,
    };
    let Some(ladder_value) = table.remove("ladder") else {
        return Err(SpecError::Invalid(vec![field(
            "ladder",
            None,
            "is required in a ladder file".into(),
        )]));
    };
    let config: LadderConfig = ladder_value.try_into().map_err(|e: toml::de::Error| {
        SpecError::Invalid(vec![field("ladder", None, e.message().trim().to_string())])
    })?;
    let mut errors = Vec::new();
    if config.rungs.len() < 3 {
        errors.push(field(
            "ladder.rungs",
            Some(format!("{} rungs", config.rungs.len())),
            "must have at least 3 rungs (at least 2 to fit, then the target)".into(),
        ));
    }
    if !(config.tolerance.is_finite() && config.tolerance > 0.0) {
        errors.push(field(
            "ladder.tolerance",
            Some(config.tolerance.to_string()),
            "must be a positive number".into(),
        ));
    }
    let base = serde_json::to_value(&table).map_err(|e| {
        SpecError::Invalid(vec![field(
            "(spec)",
            None,
            format!("not representable: {e}"),
        )])
    })?;
    // The base must be a valid spec itself; report its errors once rather than per rung.
    if let Err(e) = parse_value(&base) {
        errors.extend(e.field_errors().iter().cloned());
        return Err(SpecError::Invalid(errors));
    }
    let mut rungs = Vec::new();
    let n = config.rungs.len();
    for (i, rung) in config.rungs.iter().enumerate() {
        let value = apply(&base, rung, i, n);
        match parse_value(&value) {
            Ok(spec) => rungs.push(spec),
            Err(e) => errors.extend(e.field_errors().iter().map(|fe| FieldError {
                path: format!("ladder.rungs[{i}] -> {}", fe.path),
                value: fe.value.clone(),
                rule: fe.rule.clone(),
            })),
        }
    }
    if errors.is_empty() {
        if !crate::metrics::is_known_metric(
            &config.metric,
            rungs[0].data.mixture.iter().map(|c| c.domain.as_str()),
        ) {
            errors.push(field(
                "ladder.metric",
                Some(format!("{:?}", config.metric)),
                "must be a metric the rungs report, e.g. eval/<domain>/loss".into(),
            ));
        }
        if config.floor == FloorMode::Known
            && !(rungs[0].data.mixture.len() == 1 && rungs[0].data.mixture[0].generator.is_some())
        {
            errors.push(field(
                "ladder.floor",
                Some("\"known\"".into()),
                "needs a single synthetic (generator) domain, whose entropy floor is known; use \"fitted\"".into(),
            ));
        }
    }
    if errors.is_empty() {
        Ok(Ladder { config, rungs })
    } else {
        Err(SpecError::Invalid(errors))
    }
}

/// Sets the value at a JSON pointer, creating the last key when the base left it out (it had a
/// default). `None` leaves the base value.
fn set(v: &mut Value, pointer: &str, value: Option<Value>) {
    let Some(value) = value else { return };
    let (parent, key) = pointer.rsplit_once('/').unwrap_or(("", pointer));
    if let Some(obj) = v.pointer_mut(parent).and_then(Value::as_object_mut) {
        obj.insert(key.to_string(), value);
    }
}

/// The base spec with one rung's overrides and a rung-specific name and slug.
fn apply(base: &Value, rung: &Rung, index: usize, count: usize) -> Value {
    let mut v = base.clone();
    set(&mut v, "/model/d_model", rung.d_model.map(Value::from));
    set(&mut v, "/model/n_layers", rung.n_layers.map(Value::from));
    set(&mut v, "/model/n_heads", rung.n_heads.map(Value::from));
    set(
        &mut v,
        "/model/moe/d_expert",
        rung.d_expert.map(Value::from),
    );
    set(
        &mut v,
        "/model/moe/n_experts",
        rung.n_experts.map(Value::from),
    );
    set(&mut v, "/model/moe/top_k", rung.top_k.map(Value::from));
    set(&mut v, "/train/steps", rung.steps.map(Value::from));
    set(
        &mut v,
        "/train/batch_size",
        rung.batch_size.map(Value::from),
    );
    set(&mut v, "/train/lr", rung.lr.map(Value::from));
    let text = |p: &str| {
        v.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("ladder")
            .to_string()
    };
    let (slug, name) = (text("/experiment/slug"), text("/experiment/name"));
    let role = if index + 1 == count { "target" } else { "rung" };
    set(
        &mut v,
        "/experiment/slug",
        Some(Value::from(format!("{slug}-r{index}"))),
    );
    set(
        &mut v,
        "/experiment/name",
        Some(Value::from(format!(
            "{name} ({role} {}/{count})",
            index + 1
        ))),
    );
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ladder_example() -> String {
        std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/ladder.toml"
        ))
        .unwrap()
    }

    #[test]
    fn example_ladder_validates_and_grows() {
        let text = ladder_example();
        assert!(is_ladder(&text));
        let ladder = parse_ladder_toml(&text).unwrap_or_else(|e| panic!("{e}"));
        assert!(ladder.rungs.len() >= 3);
        let costs: Vec<f64> = ladder
            .rungs
            .iter()
            .map(|r| crate::cost::estimate(r).total_flops)
            .collect();
        assert!(costs.windows(2).all(|w| w[0] < w[1]), "{costs:?}");
        let slugs: Vec<&str> = ladder
            .rungs
            .iter()
            .map(|r| r.experiment.slug.as_str())
            .collect();
        assert!(slugs[0].ends_with("-r0"), "{slugs:?}");
        // Every rung is a different experiment.
        let hashes: std::collections::BTreeSet<_> = ladder
            .rungs
            .iter()
            .map(|r| crate::spec_hash(r).unwrap())
            .collect();
        assert_eq!(hashes.len(), ladder.rungs.len());
    }

    #[test]
    fn rung_errors_name_the_rung() {
        let text = ladder_example().replacen("rungs = [", "rungs = [\n  { top_k = 99 },", 1);
        let err = parse_ladder_toml(&text).unwrap_err();
        let first = &err.field_errors()[0];
        assert_eq!(first.path, "ladder.rungs[0] -> model.moe.top_k", "{err}");
    }

    #[test]
    fn too_few_rungs_and_unknown_override_are_errors() {
        let base = ladder_example();
        let start = base.find("rungs = [").unwrap();
        let end = base[start..].find(']').unwrap() + start + 1;
        let two = format!(
            "{}rungs = [{{ d_model = 16 }}, {{ d_model = 32 }}]{}",
            &base[..start],
            &base[end..]
        );
        let err = parse_ladder_toml(&two).unwrap_err();
        assert!(err.to_string().contains("at least 3 rungs"), "{err}");
        let unknown = format!(
            "{}rungs = [{{ width = 16 }}]{}",
            &base[..start],
            &base[end..]
        );
        let err = parse_ladder_toml(&unknown).unwrap_err();
        assert!(err.to_string().contains("unknown field `width`"), "{err}");
    }
}
