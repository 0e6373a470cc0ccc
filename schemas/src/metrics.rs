//! Metric names, following the Marin/Levanter conventions so researchers recognise them, and
//! the one line format metrics are written in ([`MetricRecord`]: a line of `metrics.jsonl` and
//! of every metric-chunk blob in the ledger).
//!
//! Fixed names are constants; per-domain and per-layer names are built by functions so that the
//! spelling lives in one place. This module does not record or store metrics.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

/// What a record is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordKind {
    /// One optimiser step.
    Train,
    /// A held-out evaluation after a step.
    Eval,
}

/// One metrics record — one JSON line: scalars and vectors (per-expert loads) at a step.
///
/// A value that is not finite (a diverged step's NaN) is written as JSON `null`, which is all
/// JSON can say, and read back as NaN.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricRecord {
    /// Steps completed when measured.
    pub step: u64,
    /// Train or eval.
    pub kind: RecordKind,
    /// Scalar metrics by name.
    #[serde(deserialize_with = "scalars_or_nan")]
    pub scalars: BTreeMap<String, f64>,
    /// Vector metrics by name (e.g. `train/router/layer_0/expert_load`).
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "vectors_or_nan"
    )]
    pub vectors: BTreeMap<String, Vec<f64>>,
}

impl MetricRecord {
    /// Every finite value as `(name, value)`; a vector's component `i` is named `<name>/<i>`
    /// (how the index stores and the dashboard draws them). Non-finite values are skipped: a
    /// chart cannot place them.
    pub fn points(&self) -> impl Iterator<Item = (String, f64)> + '_ {
        let scalars = self.scalars.iter().map(|(n, v)| (n.clone(), *v));
        let vectors = self.vectors.iter().flat_map(|(n, vs)| {
            vs.iter()
                .enumerate()
                .map(move |(i, v)| (format!("{n}/{i}"), *v))
        });
        scalars.chain(vectors).filter(|(_, v)| v.is_finite())
    }
}

fn scalars_or_nan<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, f64>, D::Error> {
    let raw = BTreeMap::<String, Option<f64>>::deserialize(d)?;
    Ok(raw
        .into_iter()
        .map(|(k, v)| (k, v.unwrap_or(f64::NAN)))
        .collect())
}

fn vectors_or_nan<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, Vec<f64>>, D::Error> {
    let raw = BTreeMap::<String, Vec<Option<f64>>>::deserialize(d)?;
    Ok(raw
        .into_iter()
        .map(|(k, v)| (k, v.into_iter().map(|x| x.unwrap_or(f64::NAN)).collect()))
        .collect())
}

/// Training loss including auxiliary terms (z-loss, balancing loss).
pub const TRAIN_LOSS: &str = "train/loss";
/// Cross-entropy part of the training loss (nats per token).
pub const TRAIN_CROSS_ENTROPY: &str = "train/cross_entropy_loss";
/// The z-loss term on the final logits.
pub const TRAIN_Z_LOSS: &str = "train/z_loss";
/// Global gradient norm before clipping.
pub const GRAD_NORM_TOTAL: &str = "grad/norm/total";
/// Global parameter norm.
pub const PARAMS_NORM_TOTAL: &str = "params/norm/total";
/// Learning rate used for the step.
pub const LEARNING_RATE: &str = "optim/learning_rate";
/// Training throughput.
pub const TOKENS_PER_SECOND: &str = "throughput/tokens_per_second";
/// Model FLOPs utilisation (against the peak named in the run record).
pub const MFU: &str = "throughput/mfu";
/// Tokens trained on so far.
pub const TOTAL_TOKENS: &str = "throughput/total_tokens";
/// Mean routing entropy over layers.
pub const ROUTING_ENTROPY_MEAN: &str = "train/router/routing_entropy_mean";
/// Switch-style load-balancing loss (reported whatever the balancing method).
pub const LOAD_BALANCING_LOSS: &str = "train/router/load_balancing_loss";
/// Router z-loss.
pub const ROUTER_Z_LOSS: &str = "train/router/router_z_loss";
/// Assignments dropped by a capacity limit.
pub const DROPPED_ASSIGNMENTS: &str = "moe/dropped_assignments";

/// Hardware telemetry (`hw/...`): what the machine did while a run trained. They describe
/// the machine, not the experiment: a reproduction does not compare them, and they are not
/// among a run's final metrics.
pub mod hw {
    use crate::cost::HARDWARE_SERIES;

    /// Resident memory of the training process (bytes).
    pub const PROCESS_RSS_BYTES: &str = "hw/process/rss_bytes";
    /// Peak resident memory of the training process so far (bytes).
    pub const PROCESS_PEAK_RSS_BYTES: &str = "hw/process/peak_rss_bytes";
    /// CPU time of the training process so far, user + system, all threads (seconds).
    pub const PROCESS_CPU_SECONDS: &str = "hw/process/cpu_seconds";
    /// Busy share of the cores the run uses since the previous sample (percent).
    pub const CPU_UTILIZATION: &str = "hw/cpu/utilization_percent";
    /// Memory the machine has available for new work (`MemAvailable`, bytes).
    pub const MACHINE_MEMORY_AVAILABLE_BYTES: &str = "hw/machine/memory_available_bytes";
    /// GPU busy fraction over NVML's last sample period (percent).
    pub const GPU_UTILIZATION: &str = "hw/gpu/utilization_percent";
    /// GPU memory in use on the device, all processes (bytes).
    pub const GPU_MEMORY_USED_BYTES: &str = "hw/gpu/memory_used_bytes";
    /// The most GPU memory in use seen by this run's samples (bytes).
    pub const GPU_MEMORY_PEAK_BYTES: &str = "hw/gpu/memory_peak_bytes";
    /// Board power draw (watts).
    pub const GPU_POWER_WATTS: &str = "hw/gpu/power_watts";
    /// GPU temperature (degrees Celsius).
    pub const GPU_TEMPERATURE_C: &str = "hw/gpu/temperature_c";
    /// SM clock (MHz).
    pub const GPU_SM_CLOCK_MHZ: &str = "hw/gpu/sm_clock_mhz";

    /// Every hardware series, in the order the run page shows them.
    pub const ALL: [&str; HARDWARE_SERIES as usize] = [
        CPU_UTILIZATION,
        PROCESS_CPU_SECONDS,
        PROCESS_RSS_BYTES,
        PROCESS_PEAK_RSS_BYTES,
        MACHINE_MEMORY_AVAILABLE_BYTES,
        GPU_UTILIZATION,
        GPU_MEMORY_USED_BYTES,
        GPU_MEMORY_PEAK_BYTES,
        GPU_POWER_WATTS,
        GPU_TEMPERATURE_C,
        GPU_SM_CLOCK_MHZ,
    ];

    /// Whether `name` is a hardware series.
    pub fn is_hardware(name: &str) -> bool {
        name.starts_with("hw/")
    }
}

/// What a metric chart's or table's x axis measures: the dashboard's `?x=` and the Python
/// package's `x=` take the same names ([`XAxis::name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XAxis {
    /// Optimiser steps completed.
    Step,
    /// Tokens trained on ([`TOTAL_TOKENS`]).
    Tokens,
    /// Training FLOPs: [`TOTAL_TOKENS`] times the spec's training FLOPs per token (the cost
    /// model's, which is what the runner counts per step).
    Flops,
    /// Training time in seconds, summed from each step's tokens over its [`TOKENS_PER_SECOND`].
    Time,
}

impl XAxis {
    /// Every axis, in the order controls offer them.
    pub const ALL: [XAxis; 4] = [XAxis::Step, XAxis::Tokens, XAxis::Flops, XAxis::Time];

    /// The name a URL or an argument spells it with.
    pub fn name(self) -> &'static str {
        match self {
            XAxis::Step => "step",
            XAxis::Tokens => "tokens",
            XAxis::Flops => "flops",
            XAxis::Time => "time",
        }
    }

    /// How a person reads it (an axis title, a control's label).
    pub fn label(self) -> &'static str {
        match self {
            XAxis::Step => "step",
            XAxis::Tokens => "tokens",
            XAxis::Flops => "FLOPs",
            XAxis::Time => "training time",
        }
    }

    /// The axis named `name`; the error names the value and the accepted names.
    pub fn parse(name: &str) -> Result<XAxis, String> {
        XAxis::ALL
            .into_iter()
            .find(|a| a.name() == name)
            .ok_or_else(|| format!("{name:?}: use step, tokens, flops or time"))
    }
}

/// `eval/<domain>/loss` (nats per token).
pub fn eval_loss(domain: &str) -> String {
    format!("eval/{domain}/loss")
}

/// `eval/<domain>/bpb` (bits per byte).
pub fn eval_bpb(domain: &str) -> String {
    format!("eval/{domain}/bpb")
}

/// `data/<domain>/tokens`: training tokens the domain has given so far (cumulative).
pub fn data_tokens(domain: &str) -> String {
    format!("data/{domain}/tokens")
}

/// `train/router/layer_<i>/expert_load` (a vector: fraction of assignments per expert).
pub fn expert_load(layer: usize) -> String {
    format!("train/router/layer_{layer}/expert_load")
}

/// `train/router/layer_<i>/bias_norm`.
pub fn bias_norm(layer: usize) -> String {
    format!("train/router/layer_{layer}/bias_norm")
}

/// Scalar metrics with fixed names.
pub const FIXED: &[&str] = &[
    TRAIN_LOSS,
    TRAIN_CROSS_ENTROPY,
    TRAIN_Z_LOSS,
    GRAD_NORM_TOTAL,
    PARAMS_NORM_TOTAL,
    LEARNING_RATE,
    TOKENS_PER_SECOND,
    MFU,
    TOTAL_TOKENS,
    ROUTING_ENTROPY_MEAN,
    LOAD_BALANCING_LOSS,
    ROUTER_Z_LOSS,
    DROPPED_ASSIGNMENTS,
];

/// Whether `name` is a metric a run over these domains reports.
pub fn is_known_metric<'a>(name: &str, domains: impl IntoIterator<Item = &'a str>) -> bool {
    if FIXED.contains(&name) {
        return true;
    }
    if domains
        .into_iter()
        .any(|d| name == eval_loss(d) || name == eval_bpb(d))
    {
        return true;
    }
    // Per-layer router metrics.
    if let Some(rest) = name.strip_prefix("train/router/layer_") {
        if let Some((layer, metric)) = rest.split_once('/') {
            return layer.parse::<usize>().is_ok() && metric == "bias_norm";
        }
    }
    false
}

/// Whether a run of `spec` reports the scalar `name` (what a forecast may name): the fixed
/// metrics, `eval/<domain>/{loss,bpb}` of its domains, and `bias_norm` of its layers.
pub fn reports(spec: &crate::spec::ExperimentSpec, name: &str) -> bool {
    let domains = spec.data.mixture.iter().map(|c| c.domain.as_str());
    is_known_metric(name, domains) && layer_in_range(name, spec.model.n_layers)
}

/// Whether a per-layer name (`train/router/layer_<i>/...`) names one of `n_layers` layers;
/// names that are not per-layer pass.
pub fn layer_in_range(name: &str, n_layers: u32) -> bool {
    match name
        .strip_prefix("train/router/layer_")
        .and_then(|rest| rest.split_once('/'))
        .and_then(|(layer, _)| layer.parse::<u64>().ok())
    {
        Some(layer) => layer < u64::from(n_layers),
        None => true,
    }
}

/// Why `metric` cannot be forecast for `spec`, phrased as what is accepted; `None` when a run
/// of the spec reports it or it names an evaluation's metric (`eval:SUITE/METRIC`). The lab refuses such a forecast when it is proposed (a typo would
/// otherwise make every run a missed forecast).
pub fn forecast_metric_problem(spec: &crate::spec::ExperimentSpec, metric: &str) -> Option<String> {
    // An evaluation's metric is settled by the evaluation of the run's last snapshot.
    if reports(spec, metric) || crate::eval::parse_metric_name(metric).is_some() {
        return None;
    }
    let domains = spec.data.mixture.iter().map(|c| c.domain.as_str());
    Some(format!(
        "forecast.metric = {metric:?}: must be a metric this run reports, e.g. {}, or an evaluation's, eval:SUITE/acc_norm",
        forecastable_examples(domains).join(", ")
    ))
}

/// A few names suitable for a forecast, for error messages.
pub fn forecastable_examples<'a>(domains: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = domains.into_iter().take(2).map(eval_loss).collect();
    out.push(TRAIN_LOSS.to_string());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x_axes_parse_by_name_and_reject_others_naming_the_value() {
        for a in XAxis::ALL {
            assert_eq!(XAxis::parse(a.name()), Ok(a));
        }
        assert_eq!(XAxis::Flops.label(), "FLOPs");
        let e = XAxis::parse("epoch").unwrap_err();
        assert!(e.contains("\"epoch\"") && e.contains("time"), "{e}");
    }

    #[test]
    fn names_follow_conventions() {
        assert_eq!(eval_loss("markov"), "eval/markov/loss");
        assert_eq!(eval_bpb("web"), "eval/web/bpb");
        assert_eq!(expert_load(3), "train/router/layer_3/expert_load");
        assert!(is_known_metric("eval/markov/bpb", ["markov"]));
        assert!(!is_known_metric("eval/other/bpb", ["markov"]));
        assert!(is_known_metric("train/router/layer_0/bias_norm", []));
        assert!(!is_known_metric("train/losss", []));
        assert!(layer_in_range("train/router/layer_1/bias_norm", 2));
        assert!(!layer_in_range("train/router/layer_2/bias_norm", 2));
        assert!(layer_in_range("train/loss", 0));
    }

    #[test]
    fn a_record_with_nan_round_trips_and_its_points_skip_what_a_chart_cannot_place() {
        let r = MetricRecord {
            step: 7,
            kind: RecordKind::Train,
            scalars: [("train/loss".to_string(), f64::NAN), ("lr".into(), 0.5)]
                .into_iter()
                .collect(),
            vectors: [("load".to_string(), vec![1.0, f64::INFINITY, 3.0])]
                .into_iter()
                .collect(),
        };
        let line = serde_json::to_string(&r).unwrap();
        assert_eq!(
            line,
            r#"{"step":7,"kind":"train","scalars":{"lr":0.5,"train/loss":null},"vectors":{"load":[1.0,null,3.0]}}"#
        );
        let back: MetricRecord = serde_json::from_str(&line).unwrap();
        assert!(back.scalars["train/loss"].is_nan());
        let points: Vec<_> = back.points().collect();
        assert_eq!(
            points,
            [
                ("lr".to_string(), 0.5),
                ("load/0".to_string(), 1.0),
                ("load/2".to_string(), 3.0)
            ]
        );
        let err = serde_json::from_str::<MetricRecord>(r#"{"step":1,"scalars":{}}"#).unwrap_err();
        assert!(err.to_string().contains("kind"), "{err}");
    }
}
