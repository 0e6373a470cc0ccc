//! The progress lines a person watching a run reads: one train line every twentieth of the run
//! (and at its last step) with the loss, throughput and time left, and one line per evaluation.
//! The CLI prints them when its output is not a terminal (a terminal gets a progress bar), and
//! the lab's worker writes them into the run's log, so the log on the record reads like the
//! terminal did.
//!
//! Not here: printing or storing them.

use std::time::Instant;

use glassbox_schemas::metrics as mn;

use crate::observer::{MetricRecord, RecordKind};

/// Which records get a line, and the time left.
#[derive(Debug, Clone)]
pub struct ProgressLines {
    every: u64,
    total: u64,
    first_step: u64,
    start: Instant,
}

impl ProgressLines {
    /// Lines for a run starting (or resuming) at `first_step` of `total`.
    pub fn new(first_step: u64, total: u64) -> Self {
        Self {
            every: (total / 20).max(1),
            total,
            first_step,
            start: Instant::now(),
        }
    }

    /// The line for `r`, when it gets one: every evaluation, and the train steps at every
    /// twentieth of the run and the last.
    pub fn line(&self, r: &MetricRecord) -> Option<String> {
        match r.kind {
            RecordKind::Eval => Some(eval_line(r)),
            RecordKind::Train => {
                if !(r.step.is_multiple_of(self.every) || r.step == self.total) {
                    return None;
                }
                let loss = r.scalars.get(mn::TRAIN_LOSS).copied().unwrap_or(f64::NAN);
                let tps = r.scalars.get(mn::TOKENS_PER_SECOND).copied().unwrap_or(0.0);
                let done = r.step.saturating_sub(self.first_step) as f64;
                let secs = self.start.elapsed().as_secs_f64();
                let eta = if done > 0.0 {
                    secs / done * self.total.saturating_sub(r.step) as f64
                } else {
                    0.0
                };
                Some(format!(
                    "step {}/{}  loss {loss:.4}  {tps:.0} tok/s  ETA {eta:.0} s",
                    r.step, self.total
                ))
            }
        }
    }
}

/// An evaluation's line: `step N: eval/<domain>/loss 1.2345  eval/<domain>/bpb ...`.
pub fn eval_line(r: &MetricRecord) -> String {
    let values = r
        .scalars
        .iter()
        .map(|(k, v)| format!("{k} {v:.4}"))
        .collect::<Vec<_>>()
        .join("  ");
    format!("step {}: {values}", r.step)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn rec(step: u64, kind: RecordKind, scalars: &[(&str, f64)]) -> MetricRecord {
        MetricRecord {
            step,
            kind,
            scalars: scalars.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            vectors: BTreeMap::new(),
        }
    }

    #[test]
    fn a_line_every_twentieth_of_the_run_the_last_step_and_every_evaluation() {
        let p = ProgressLines::new(0, 100);
        let shown: Vec<u64> = (1..=100)
            .filter(|s| {
                p.line(&rec(*s, RecordKind::Train, &[(mn::TRAIN_LOSS, 2.0)]))
                    .is_some()
            })
            .collect();
        assert_eq!(shown.len(), 20);
        assert_eq!(shown.last(), Some(&100));
        let l = p
            .line(&rec(5, RecordKind::Train, &[(mn::TRAIN_LOSS, 2.5)]))
            .unwrap();
        assert!(l.starts_with("step 5/100  loss 2.5000"), "{l}");
        let e = p
            .line(&rec(7, RecordKind::Eval, &[("eval/markov/loss", 1.25)]))
            .unwrap();
        assert_eq!(e, "step 7: eval/markov/loss 1.2500");
    }
}
