//! Choosing the next token from a row of logits: greedy at temperature 0, otherwise a draw
//! from the tempered distribution cut to its `top_k` most likely tokens and to the smallest
//! set holding `top_p` of the mass (nucleus sampling), from a seeded stream.
//!
//! Every step is a pure function of (logits, settings, seed, draws so far): the same inputs
//! give the same token on any machine. Probabilities are computed in f64 from the f32 logits;
//! ties between equal logits go to the lower token id, in the greedy pick and in the order the
//! cut keeps. Not here: the model ([`crate::decode`]) or text.

use crate::error::RunnerError;
use crate::rng::{SplitMix64, derive};

/// Stream key of sampling draws (see [`crate::rng::derive`]).
const SAMPLE_STREAM: u64 = 0x5341_4d50; // "SAMP"

/// Largest temperature accepted.
pub const MAX_TEMPERATURE: f64 = 100.0;

/// How the next token is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SampleSettings {
    /// 0 is greedy (the argmax); otherwise logits are divided by it.
    pub temperature: f64,
    /// Keep only the `top_k` most likely tokens (`None`: all).
    pub top_k: Option<usize>,
    /// Keep the smallest set of most likely tokens whose probability reaches `top_p` (1: all).
    pub top_p: f64,
    /// Seed of the draws.
    pub seed: u64,
}

impl Default for SampleSettings {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_k: None,
            top_p: 1.0,
            seed: 0,
        }
    }
}

impl SampleSettings {
    /// Refuses settings out of range, naming the field, the value and what is accepted.
    pub fn check(&self) -> Result<(), RunnerError> {
        if !(self.temperature.is_finite() && (0.0..=MAX_TEMPERATURE).contains(&self.temperature)) {
            return Err(RunnerError::Invalid {
                field: "temperature",
                value: self.temperature.to_string(),
                accepted: format!("between 0 (greedy) and {MAX_TEMPERATURE}"),
            });
        }
        if !(self.top_p.is_finite() && self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(RunnerError::Invalid {
                field: "top_p",
                value: self.top_p.to_string(),
                accepted: "above 0 and at most 1 (1 keeps every token)".into(),
            });
        }
        if self.top_k == Some(0) {
            return Err(RunnerError::Invalid {
                field: "top_k",
                value: "0".into(),
                accepted: "at least 1 (leave it out to keep every token)".into(),
            });
        }
        Ok(())
    }

    /// Whether this is greedy decoding.
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }
}

/// The index of the largest logit, ties to the lower index (NaN never wins).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    for (i, &x) in logits.iter().enumerate() {
        if x > logits[best] || (logits[best].is_nan() && !x.is_nan()) {
            best = i;
        }
    }
    best as u32
}

/// A seeded chooser of next tokens.
#[derive(Debug, Clone)]
pub struct Sampler {
    settings: SampleSettings,
    rng: SplitMix64,
}

impl Sampler {
    /// Checked settings and a fresh stream from their seed.
    pub fn new(settings: SampleSettings) -> Result<Self, RunnerError> {
        settings.check()?;
        Ok(Self {
            settings,
            rng: SplitMix64::new(derive(&[settings.seed, SAMPLE_STREAM])),
        })
    }

    /// The settings.
    pub fn settings(&self) -> &SampleSettings {
        &self.settings
    }

    /// The next token from `logits [V]`.
    pub fn pick(&mut self, logits: &[f32]) -> u32 {
        if self.settings.is_greedy() {
            return argmax(logits);
        }
        let t = self.settings.temperature;
        let mut order: Vec<u32> = (0..logits.len() as u32)
            .filter(|&i| logits[i as usize].is_finite())
            .collect();
        if order.is_empty() {
            return argmax(logits);
        }
        // Most likely first; a stable sort keeps equal logits in id order.
        order.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]));
        if let Some(k) = self.settings.top_k {
            order.truncate(k.max(1));
        }
        let max = logits[order[0] as usize] as f64;
        let weights: Vec<f64> = order
            .iter()
            .map(|&i| ((logits[i as usize] as f64 - max) / t).exp())
            .collect();
        let total: f64 = weights.iter().sum();
        let mut keep = weights.len();
        if self.settings.top_p < 1.0 {
            let mut mass = 0.0;
            for (n, w) in weights.iter().enumerate() {
                mass += w / total;
                if mass >= self.settings.top_p {
                    keep = n + 1;
                    break;
                }
            }
        }
        let kept = &weights[..keep];
        let kept_total: f64 = kept.iter().sum();
        let mut u = self.rng.next_f64() * kept_total;
        for (n, w) in kept.iter().enumerate() {
            if u < *w {
                return order[n];
            }
            u -= w;
        }
        order[keep - 1]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_is_the_argmax_with_ties_to_the_lower_id() {
        let mut s = Sampler::new(SampleSettings {
            temperature: 0.0,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(s.pick(&[0.1, 3.0, 3.0, -1.0]), 1);
        assert_eq!(argmax(&[f32::NAN, 1.0, 0.5]), 1);
    }

    #[test]
    fn the_same_seed_gives_the_same_draws_and_another_seed_others() {
        let logits: Vec<f32> = (0..50).map(|i| ((i * 7) % 11) as f32 * 0.3).collect();
        let draw = |seed| {
            let mut s = Sampler::new(SampleSettings {
                seed,
                ..Default::default()
            })
            .unwrap();
            (0..64).map(|_| s.pick(&logits)).collect::<Vec<_>>()
        };
        assert_eq!(draw(5), draw(5));
        assert_ne!(draw(5), draw(6));
    }

    #[test]
    fn top_k_and_top_p_keep_only_the_most_likely() {
        let logits = [0.0f32, 5.0, 4.9, -3.0, 4.8];
        let mut s = Sampler::new(SampleSettings {
            top_k: Some(2),
            seed: 1,
            ..Default::default()
        })
        .unwrap();
        for _ in 0..200 {
            assert!([1, 2].contains(&s.pick(&logits)));
        }
        // One token holds almost all the mass: top_p 0.5 keeps it alone.
        let peaked = [0.0f32, 20.0, 1.0];
        let mut s = Sampler::new(SampleSettings {
            top_p: 0.5,
            seed: 2,
            ..Default::default()
        })
        .unwrap();
        for _ in 0..200 {
            assert_eq!(s.pick(&peaked), 1);
        }
    }

    #[test]
    fn out_of_range_settings_name_the_field() {
        for (settings, field) in [
            (
                SampleSettings {
                    temperature: -1.0,
                    ..Default::default()
                },
                "temperature",
            ),
            (
                SampleSettings {
                    top_p: 1.5,
                    ..Default::default()
                },
                "top_p",
            ),
            (
                SampleSettings {
                    top_p: 0.0,
                    ..Default::default()
                },
                "top_p",
            ),
            (
                SampleSettings {
                    top_k: Some(0),
                    ..Default::default()
                },
                "top_k",
            ),
        ] {
            let err = Sampler::new(settings).unwrap_err().to_string();
            assert!(err.contains(field), "{err}");
        }
    }
}
