//! The anomaly detector: flags loss spikes, gradient-norm spikes, parameter-norm jumps,
//! router-bias jumps and expert collapse in a run's train records as they arrive.
//!
//! The rule (thresholds from the spec's `[train.anomaly]`, defaults in
//! [`glassbox_schemas::spec::AnomalyConfig`]): for each watched series, keep its trailing
//! `window` values `w`. With `m = median(w)` and `MAD = median(|w_i - m|)`, a new value `x` is
//! flagged when
//!
//! ```text
//!   |x - m| > threshold * 1.4826 * MAD     (1.4826 x MAD estimates one standard deviation
//!                                           of normal noise, unmoved by the spikes themselves)
//!   and |x - m| > min_relative * r         (a flat or lumpy series, MAD ~ 0, is not flagged
//!                                           for noise; r is |m| for a spike, and for a jump
//!                                           the norm's previous value)
//! ```
//!
//! in the series' direction, once the series has seen `min_steps` values, and not within
//! `cooldown` steps of its last flag. Spikes look upwards at the value itself (`train/loss`,
//! `grad/norm/total`); jumps look either way at the step-to-step change
//! (`params/norm/total`, which covers trained parameters only, and each layer's
//! `train/router/layer_<i>/bias_norm`, which is balancing state and never trained). The two
//! norms are separate series with separate kinds, so a jump in the router bias is never
//! reported as a jump of the parameters, nor the other way round.
//!
//! Expert collapse: one expert taking more than `collapse_share` of a layer's tokens (its share
//! of the layer's assignments times `top_k`) for `collapse_steps` steps in a row, flagged once
//! per episode. A layer whose even share `top_k / n_experts` is already at the threshold is not
//! watched (with `top_k = n_experts` every expert sees every token).
//!
//! NaN and inf are not anomalies here: they end the run `diverged`. Not here: recording a flag
//! (the lab's worker writes an `anomaly` entry) or alerting anyone.

use std::collections::{BTreeMap, VecDeque};

use glassbox_schemas::metrics as mn;
use glassbox_schemas::record::{Anomaly, AnomalyKind};
use glassbox_schemas::spec::AnomalyConfig;

use crate::observer::{MetricRecord, RecordKind};

/// One standard deviation of normal noise per unit of MAD.
const MAD_TO_SIGMA: f64 = 1.4826;

/// Which way a series is watched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Watch {
    /// The value itself, upwards only.
    Spike,
    /// The change from the previous value, either way.
    Jump,
}

/// One watched scalar series.
#[derive(Debug)]
struct Series {
    kind: AnomalyKind,
    watch: Watch,
    layer: Option<u32>,
    /// The trailing values (of the level for a spike, of the change for a jump).
    window: VecDeque<f64>,
    /// Values seen so far.
    seen: u64,
    /// The previous level (for a jump).
    previous: Option<f64>,
    /// No flag before this step (cool-down).
    quiet_until: u64,
}

/// One layer's collapse watch: the expert over the threshold and since which step.
#[derive(Debug, Default, Clone)]
struct Collapse {
    /// `(expert, first step over the threshold, flagged already)`.
    current: Option<(usize, u64, bool)>,
}

/// Watches one run's train records; see the module text for the rule.
#[derive(Debug)]
pub struct AnomalyDetector {
    cfg: AnomalyConfig,
    series: BTreeMap<String, Series>,
    collapse: Vec<Collapse>,
    /// `top_k`, to turn assignment shares into token shares.
    top_k: f64,
    /// Whether collapse can be told from even routing at all.
    watch_collapse: bool,
}

impl AnomalyDetector {
    /// A detector for a run of `n_layers` layers routing `top_k` of `n_experts` experts.
    pub fn new(cfg: &AnomalyConfig, n_layers: usize, n_experts: usize, top_k: usize) -> Self {
        let mut series = BTreeMap::new();
        let mut add = |name: String, kind, watch, layer| {
            series.insert(
                name,
                Series {
                    kind,
                    watch,
                    layer,
                    window: VecDeque::new(),
                    seen: 0,
                    previous: None,
                    quiet_until: 0,
                },
            );
        };
        add(
            mn::TRAIN_LOSS.to_string(),
            AnomalyKind::LossSpike,
            Watch::Spike,
            None,
        );
        add(
            mn::GRAD_NORM_TOTAL.to_string(),
            AnomalyKind::GradNormSpike,
            Watch::Spike,
            None,
        );
        add(
            mn::PARAMS_NORM_TOTAL.to_string(),
            AnomalyKind::ParamsNormJump,
            Watch::Jump,
            None,
        );
        for layer in 0..n_layers {
            add(
                mn::bias_norm(layer),
                AnomalyKind::RouterBiasJump,
                Watch::Jump,
                Some(layer as u32),
            );
        }
        let even = top_k as f64 / n_experts.max(1) as f64;
        Self {
            cfg: cfg.clone(),
            series,
            collapse: vec![Collapse::default(); n_layers],
            top_k: top_k.max(1) as f64,
            watch_collapse: top_k < n_experts && even < cfg.collapse_share,
        }
    }

    /// Feeds one record; returns what it flags (eval records flag nothing).
    pub fn observe(&mut self, record: &MetricRecord) -> Vec<Anomaly> {
        let mut out = Vec::new();
        if record.kind != RecordKind::Train {
            return out;
        }
        for (name, s) in &mut self.series {
            let Some(&x) = record.scalars.get(name) else {
                continue;
            };
            if !x.is_finite() {
                continue;
            }
            if let Some(a) = s.observe(&self.cfg, name, record.step, x) {
                out.push(a);
            }
        }
        if self.watch_collapse {
            for (layer, c) in self.collapse.iter_mut().enumerate() {
                let Some(shares) = record.vectors.get(&mn::expert_load(layer)) else {
                    continue;
                };
                if let Some(a) = c.observe(&self.cfg, self.top_k, layer, record.step, shares) {
                    out.push(a);
                }
            }
        }
        out
    }
}

/// The median of `v` (not empty); sorts a copy.
fn median(v: impl Iterator<Item = f64>) -> f64 {
    let mut s: Vec<f64> = v.collect();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

impl Series {
    fn observe(
        &mut self,
        cfg: &AnomalyConfig,
        name: &str,
        step: u64,
        level: f64,
    ) -> Option<Anomaly> {
        // For a jump, the change is compared with the norm itself: the balancing bias moves in
        // steps of its rate, so its changes have almost no spread and only a move that is large
        // against the norm counts.
        let (x, reference) = match self.watch {
            Watch::Spike => (level, None),
            Watch::Jump => {
                let previous = self.previous.replace(level)?;
                (level - previous, Some(previous.abs()))
            }
        };
        let mut flag = None;
        if self.seen >= u64::from(cfg.min_steps)
            && step >= self.quiet_until
            && !self.window.is_empty()
        {
            let m = median(self.window.iter().copied());
            let mad = median(self.window.iter().map(|w| (w - m).abs()));
            let off = match self.watch {
                Watch::Spike => x - m,
                Watch::Jump => (x - m).abs(),
            };
            let sigma = MAD_TO_SIGMA * mad;
            // The last bound keeps rounding noise of a constant series from counting.
            let floor = 1e-12 * (1.0 + level.abs());
            let relative_to = reference.unwrap_or(m.abs());
            if off > cfg.threshold * sigma && off > cfg.min_relative * relative_to && off > floor {
                self.quiet_until = step + u64::from(cfg.cooldown) + 1;
                flag = Some(Anomaly {
                    kind: self.kind,
                    step,
                    metric: name.to_string(),
                    value: x,
                    baseline: m,
                    deviations: if sigma > 0.0 { off / sigma } else { f64::MAX },
                    layer: self.layer,
                    expert: None,
                    charted: None,
                });
            }
        }
        self.window.push_back(x);
        while self.window.len() > cfg.window.max(1) as usize {
            self.window.pop_front();
        }
        self.seen += 1;
        flag
    }
}

impl Collapse {
    fn observe(
        &mut self,
        cfg: &AnomalyConfig,
        top_k: f64,
        layer: usize,
        step: u64,
        shares: &[f64],
    ) -> Option<Anomaly> {
        let top = shares
            .iter()
            .enumerate()
            .filter(|(_, s)| s.is_finite())
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(e, s)| (e, s * top_k));
        let charted = top.map(|(e, _)| shares[e]);
        match (top, &mut self.current) {
            (Some((e, share)), Some((cur, since, flagged)))
                if share > cfg.collapse_share && e == *cur =>
            {
                let run = step.saturating_sub(*since) + 1;
                if !*flagged && run >= u64::from(cfg.collapse_steps) {
                    *flagged = true;
                    return Some(Anomaly {
                        kind: AnomalyKind::ExpertCollapse,
                        step,
                        metric: format!("{}/{e}", mn::expert_load(layer)),
                        value: share,
                        baseline: cfg.collapse_share,
                        deviations: run as f64,
                        layer: Some(layer as u32),
                        expert: Some(e as u32),
                        charted,
                    });
                }
                None
            }
            (Some((e, share)), _) if share > cfg.collapse_share => {
                self.current = Some((e, step, false));
                // A threshold of one step flags at once.
                if cfg.collapse_steps <= 1 {
                    self.current = Some((e, step, true));
                    return Some(Anomaly {
                        kind: AnomalyKind::ExpertCollapse,
                        step,
                        metric: format!("{}/{e}", mn::expert_load(layer)),
                        value: share,
                        baseline: cfg.collapse_share,
                        deviations: 1.0,
                        layer: Some(layer as u32),
                        expert: Some(e as u32),
                        charted,
                    });
                }
                None
            }
            _ => {
                self.current = None;
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(step: u64, scalars: &[(&str, f64)], loads: &[(usize, Vec<f64>)]) -> MetricRecord {
        MetricRecord {
            step,
            kind: RecordKind::Train,
            scalars: scalars.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            vectors: loads
                .iter()
                .map(|(l, v)| (mn::expert_load(*l), v.clone()))
                .collect(),
        }
    }

    /// A noisy, slowly falling loss: never flagged; one spike: flagged at its step, once.
    #[test]
    fn a_loss_spike_is_flagged_at_its_step_and_cooled_down() {
        let cfg = AnomalyConfig::default();
        let mut d = AnomalyDetector::new(&cfg, 1, 4, 1);
        let mut flags = Vec::new();
        for step in 1..=120u64 {
            let noise = ((step * 7919) % 13) as f64 / 13.0 - 0.5;
            let mut loss = 3.0 - 0.005 * step as f64 + 0.02 * noise;
            if step == 70 || step == 75 {
                loss += 2.0;
            }
            flags.extend(d.observe(&record(step, &[(mn::TRAIN_LOSS, loss)], &[])));
        }
        assert_eq!(flags.len(), 1, "{flags:?}");
        assert_eq!(flags[0].kind, AnomalyKind::LossSpike);
        assert_eq!(flags[0].step, 70, "the second spike falls in the cool-down");
        assert!(flags[0].deviations > cfg.threshold);
    }

    #[test]
    fn nothing_is_flagged_before_min_steps() {
        let cfg = AnomalyConfig::default();
        let mut d = AnomalyDetector::new(&cfg, 1, 4, 1);
        let mut flags = Vec::new();
        for step in 1..=u64::from(cfg.min_steps) {
            let loss = if step == 10 { 50.0 } else { 2.0 };
            flags.extend(d.observe(&record(step, &[(mn::TRAIN_LOSS, loss)], &[])));
        }
        assert!(flags.is_empty(), "{flags:?}");
    }

    /// A jump of the router bias is a router-bias jump of its layer; the parameter norm,
    /// moving smoothly at the same time, is not flagged.
    #[test]
    fn bias_and_parameter_norms_are_checked_apart() {
        let cfg = AnomalyConfig::default();
        let mut d = AnomalyDetector::new(&cfg, 2, 4, 1);
        let mut flags = Vec::new();
        for step in 1..=60u64 {
            let wobble = ((step * 31) % 7) as f64 * 1e-4;
            let params = 10.0 + 0.01 * step as f64 + wobble;
            let mut bias1 = 0.001 * step as f64 + wobble * 0.1;
            if step >= 40 {
                bias1 += 0.5;
            }
            flags.extend(d.observe(&record(
                step,
                &[
                    (mn::PARAMS_NORM_TOTAL, params),
                    (&mn::bias_norm(0), 0.001 * step as f64 + wobble * 0.1),
                    (&mn::bias_norm(1), bias1),
                ],
                &[],
            )));
        }
        assert_eq!(flags.len(), 1, "{flags:?}");
        assert_eq!(flags[0].kind, AnomalyKind::RouterBiasJump);
        assert_eq!((flags[0].step, flags[0].layer), (40, Some(1)));
        assert_eq!(flags[0].metric, mn::bias_norm(1));
    }

    /// With top-2 routing, an expert taking half of the assignments takes every token: the
    /// message says which expert, the token share and the charted assignment share, the steps,
    /// and the threshold, never a "trailing median".
    #[test]
    fn a_collapse_message_states_its_own_rule_with_the_charted_value() {
        let cfg = AnomalyConfig {
            collapse_steps: 3,
            ..AnomalyConfig::default()
        };
        let mut d = AnomalyDetector::new(&cfg, 2, 4, 2);
        let mut flags = Vec::new();
        for step in 1..=5u64 {
            let loads = vec![0.25, 0.5, 0.15, 0.10];
            flags.extend(d.observe(&record(step, &[], &[(1, loads)])));
        }
        assert_eq!(flags.len(), 1, "{flags:?}");
        let a = &flags[0];
        assert_eq!((a.step, a.layer, a.expert), (3, Some(1), Some(1)));
        assert_eq!(a.charted, Some(0.5));
        assert!((a.value - 1.0).abs() < 1e-12);
        let m = a.message();
        for want in [
            "expert collapse in layer 1 at step 3",
            "expert 1 took 100.0% of the layer's tokens",
            "0.5000 of its assignments",
            &mn::expert_load(1),
            "for 3 steps in a row",
            &format!("threshold of {:.1}%", cfg.collapse_share * 100.0),
        ] {
            assert!(m.contains(want), "{want:?} missing from {m}");
        }
        assert!(!m.contains("median"), "{m}");
    }

    #[test]
    fn a_spike_message_names_the_median_and_the_deviations() {
        let a = Anomaly {
            kind: AnomalyKind::LossSpike,
            step: 40,
            metric: mn::TRAIN_LOSS.into(),
            value: 9.0,
            baseline: 2.5,
            deviations: 31.0,
            layer: None,
            expert: None,
            charted: None,
        };
        let m = a.message();
        assert!(
            m.contains("loss spike at step 40")
                && m.contains("= 9.0000")
                && m.contains("31.0 robust deviations above its trailing median of 2.5000"),
            "{m}"
        );
    }

    #[test]
    fn a_collapsed_expert_is_flagged_once_per_episode() {
        let cfg = AnomalyConfig {
            collapse_steps: 5,
            ..AnomalyConfig::default()
        };
        let mut d = AnomalyDetector::new(&cfg, 1, 4, 1);
        let mut flags = Vec::new();
        for step in 1..=30u64 {
            let loads = if (10..20).contains(&step) || step >= 25 {
                vec![0.02, 0.95, 0.02, 0.01]
            } else {
                vec![0.25; 4]
            };
            flags.extend(d.observe(&record(step, &[], &[(0, loads)])));
        }
        let steps: Vec<(u64, Option<u32>)> = flags.iter().map(|a| (a.step, a.expert)).collect();
        assert_eq!(steps, vec![(14, Some(1)), (29, Some(1))]);
        assert!(flags.iter().all(|a| a.kind == AnomalyKind::ExpertCollapse));
    }

    /// With every expert chosen by every token, shares are even by construction: never flagged.
    #[test]
    fn collapse_is_not_watched_when_top_k_covers_every_expert() {
        let cfg = AnomalyConfig {
            collapse_steps: 1,
            ..AnomalyConfig::default()
        };
        let mut d = AnomalyDetector::new(&cfg, 1, 2, 2);
        let flags = d.observe(&record(1, &[], &[(0, vec![0.5, 0.5])]));
        assert!(flags.is_empty());
    }
}
