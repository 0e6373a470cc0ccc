//! Stalled runs: a run that has not finished a step for `worker.stall_factor` times its median
//! step time (and at least `worker.stall_min_seconds`) is stalled.
//!
//! The training thread tells a [`StallWatch`] the time of each step it finishes; the worker's
//! heartbeat task, which keeps running while training is stuck, asks it whether the run is
//! stalled now. The median is of the trailing [`STEP_WINDOW`] step intervals, so a run that
//! is slow all along is not stalled, and one slow step among fast ones does not move it.
//! Times come from the lab's [`Clock`], so a test moves a manual clock instead of waiting.
//!
//! Not here: raising the alert once per run (the worker, through `db::alerts`) or telling
//! anyone (the outbox and the bot).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use crate::clock::Clock;

/// Step intervals the median is taken over.
pub const STEP_WINDOW: usize = 64;

/// Fewest step intervals seen before a run can be called stalled (one interval is no median).
pub const MIN_INTERVALS: usize = 3;

/// A stall: how long the run has been silent and what its steps usually take.
#[derive(Debug, Clone, PartialEq)]
pub struct Stalled {
    /// The last step finished.
    pub last_step: u64,
    /// Milliseconds since it finished.
    pub silent_ms: i64,
    /// The median step time, in milliseconds.
    pub median_step_ms: i64,
}

#[derive(Debug, Default)]
struct Steps {
    last: Option<(u64, i64)>,
    intervals: VecDeque<i64>,
}

/// When a run's steps finished, shared between the training thread and the heartbeat. Cheap to
/// clone.
#[derive(Debug, Clone)]
pub struct StallWatch {
    clock: Clock,
    factor: f64,
    min_ms: i64,
    steps: Arc<Mutex<Steps>>,
}

impl StallWatch {
    /// A watch calling a run stalled after `factor` median step times, and at least `min_ms`.
    pub fn new(clock: Clock, factor: f64, min_ms: i64) -> Self {
        Self {
            clock,
            factor,
            min_ms,
            steps: Arc::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Steps> {
        self.steps.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Step `step` finished now.
    pub fn stepped(&self, step: u64) {
        let now = self.clock.now_ms();
        let mut s = self.lock();
        if let Some((_, at)) = s.last {
            s.intervals.push_back((now - at).max(0));
            if s.intervals.len() > STEP_WINDOW {
                s.intervals.pop_front();
            }
        }
        s.last = Some((step, now));
    }

    /// The stall, if the run is stalled now.
    pub fn check(&self) -> Option<Stalled> {
        let now = self.clock.now_ms();
        let s = self.lock();
        let (last_step, at) = s.last?;
        if s.intervals.len() < MIN_INTERVALS {
            return None;
        }
        let mut v: Vec<i64> = s.intervals.iter().copied().collect();
        v.sort_unstable();
        let median = v[v.len() / 2];
        let silent = now - at;
        let limit = ((median as f64 * self.factor) as i64).max(self.min_ms);
        (silent > limit).then_some(Stalled {
            last_step,
            silent_ms: silent,
            median_step_ms: median,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicI64;
    use std::time::Duration;

    #[test]
    fn a_run_is_stalled_after_factor_times_its_median_step() {
        let clock = Clock::Manual(Arc::new(AtomicI64::new(0)));
        let watch = StallWatch::new(clock.clone(), 10.0, 1_000);
        assert_eq!(watch.check(), None, "no step yet");
        for step in 1..=5 {
            clock.advance(Duration::from_millis(if step == 3 { 9_000 } else { 500 }));
            watch.stepped(step);
        }
        // Median of 500, 9000, 500, 500 is 500: the limit is 5 s.
        clock.advance(Duration::from_millis(4_900));
        assert_eq!(watch.check(), None);
        clock.advance(Duration::from_millis(200));
        let s = watch.check().expect("stalled");
        assert_eq!(
            (s.last_step, s.silent_ms, s.median_step_ms),
            (5, 5_100, 500)
        );
        watch.stepped(6);
        assert_eq!(watch.check(), None, "a step ends the stall");
    }

    #[test]
    fn the_floor_holds_for_fast_steps() {
        let clock = Clock::Manual(Arc::new(AtomicI64::new(0)));
        let watch = StallWatch::new(clock.clone(), 10.0, 60_000);
        for step in 1..=5 {
            clock.advance(Duration::from_millis(10));
            watch.stepped(step);
        }
        clock.advance(Duration::from_secs(59));
        assert_eq!(watch.check(), None);
        clock.advance(Duration::from_secs(2));
        assert!(watch.check().is_some());
    }
}
