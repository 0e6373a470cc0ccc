//! [`LiveHub`]: the in-process fan-out of live metric points, run-status changes, the lines
//! of a running attempt's own log and the completions a snapshot wrote (`samples`).
//!
//! The lab's workers call [`LiveHub::publish`] as steps complete; the Live page's SSE endpoint
//! (`/api/v1/runs/{run}/live`) calls [`LiveHub::subscribe`]. Underneath is a tokio broadcast
//! channel: publishing never blocks and never fails, and a subscriber that falls more than
//! `capacity` events behind skips ahead (it is told how many it missed) instead of slowing the
//! trainer. The hub also keeps the most recent points of each live run (a bounded window), so a
//! page opened mid-run draws the curve so far, the last [`RECENT_LOG_LINES`] log lines, and the
//! last tokens/s per run for `/metrics`.
//!
//! A [`LiveEvent::Samples`] is published after its `samples` entry is on the record, and the
//! hub keeps none of them: a page drawn later reads the entry from the index. Each is bounded
//! ([`MAX_LIVE_SAMPLES`] completions, [`MAX_LIVE_SAMPLE_BYTES`] per text) and says when it was
//! cut (`truncated`), so a page shows that the entry holds more.
//!
//! The hub is not a record: nothing here is durable, and the ledger (metric-chunk blobs, result
//! entries) stays the source of truth for curves once they are indexed.

use glassbox_schemas::RunPhase;
use glassbox_schemas::record::SamplesBody;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

/// Points kept per live series (the newest ones).
pub const RECENT_POINTS: usize = 4096;
/// Log lines kept per live run (the newest ones).
pub const RECENT_LOG_LINES: usize = 500;
/// Longest log line passed on (longer ones are cut, with a note).
pub const MAX_LOG_LINE_BYTES: usize = 4096;
/// Completions one samples event carries at most (a spec asks for at most 8 prompts).
pub const MAX_LIVE_SAMPLES: usize = 8;
/// Longest prompt or completion text one samples event carries (longer ones are cut at a
/// character boundary).
pub const MAX_LIVE_SAMPLE_BYTES: usize = 4096;
/// Runs whose recent points are kept; the least recently updated is dropped first.
pub const MAX_LIVE_RUNS: usize = 64;

/// One live update.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LiveEvent {
    /// A metric value at a step.
    Point {
        /// The run.
        run: String,
        /// Step.
        step: u64,
        /// Metric name (`train/loss`, ...).
        name: String,
        /// Value (non-finite values are sent as `null`).
        value: f64,
    },
    /// The run's status changed (`running`, `succeeded`, `diverged`, ...).
    Status {
        /// The run.
        run: String,
        /// Where the run stands now.
        #[schema(value_type = String)]
        status: RunPhase,
    },
    /// A line of the running attempt's own log (`<time> <level> <text>`).
    Log {
        /// The run.
        run: String,
        /// The line, without its newline.
        line: String,
    },
    /// A snapshot's completions, sent once its `samples` entry is on the record. Model output:
    /// untrusted text.
    Samples {
        /// The run.
        run: String,
        /// Its `samples` entry.
        entry: u64,
        /// Steps completed at the snapshot.
        step: u64,
        /// Tokens asked for per prompt.
        max_tokens: u32,
        /// 0 is greedy.
        temperature: f64,
        /// Seed of the draws.
        seed: u64,
        /// Each prompt with its completion, in the entry's order (at most
        /// [`MAX_LIVE_SAMPLES`]).
        samples: Vec<LiveSample>,
        /// Completions the entry holds (more than `samples` when some were left out).
        total: usize,
        /// Whether completions were left out or a text was cut (at
        /// [`MAX_LIVE_SAMPLE_BYTES`]): the entry holds them whole.
        truncated: bool,
    },
}

/// A prompt and what the model wrote after it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LiveSample {
    /// The prompt, as the model saw it.
    pub prompt: String,
    /// The completion (model output).
    pub text: String,
}

impl LiveEvent {
    /// The run the event is about.
    pub fn run(&self) -> &str {
        match self {
            LiveEvent::Point { run, .. }
            | LiveEvent::Status { run, .. }
            | LiveEvent::Log { run, .. }
            | LiveEvent::Samples { run, .. } => run,
        }
    }

    /// The samples event of entry `entry`, whose body is `body`, bounded as
    /// [`LiveHub::publish`] would (an entry is at most 64 KiB, so the copy is small).
    pub fn samples(entry: u64, body: &SamplesBody) -> LiveEvent {
        let samples: Vec<LiveSample> = body
            .prompts
            .iter()
            .enumerate()
            .map(|(i, p)| LiveSample {
                prompt: p.clone(),
                text: body.texts.get(i).cloned().unwrap_or_default(),
            })
            .collect();
        let mut event = LiveEvent::Samples {
            run: body.run.0.clone(),
            entry,
            step: body.step,
            max_tokens: body.max_tokens,
            temperature: body.temperature,
            seed: body.seed,
            total: samples.len(),
            samples,
            truncated: false,
        };
        event.bound();
        event
    }

    /// Cuts a samples event to its bounds, saying so in `truncated`.
    fn bound(&mut self) {
        if let LiveEvent::Samples {
            samples,
            total,
            truncated,
            ..
        } = self
        {
            *total = (*total).max(samples.len());
            samples.truncate(MAX_LIVE_SAMPLES);
            let mut cut = samples.len() < *total;
            for s in samples.iter_mut() {
                for text in [&mut s.prompt, &mut s.text] {
                    if text.len() > MAX_LIVE_SAMPLE_BYTES {
                        let keep = prefix(text, MAX_LIVE_SAMPLE_BYTES).len();
                        text.truncate(keep);
                        cut = true;
                    }
                }
            }
            *truncated |= cut;
        }
    }
}

/// The longest prefix of `text` of at most `bytes` bytes that ends on a character boundary.
fn prefix(text: &str, bytes: usize) -> &str {
    let mut cut = bytes.min(text.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    &text[..cut]
}

/// What the hub remembers about one live run.
#[derive(Debug, Clone, Default)]
pub(crate) struct LiveRun {
    /// Recent points per metric, oldest first.
    pub series: BTreeMap<String, VecDeque<(u64, f64)>>,
    /// Last status published.
    pub status: Option<RunPhase>,
    /// Last `throughput/tokens_per_second`.
    pub tokens_per_second: Option<f64>,
    /// The newest lines of its log, oldest first (they do not change its `version`: no chart
    /// shows them).
    pub log: VecDeque<String>,
    /// The hub's publish count when this run last changed: equal versions, equal contents.
    pub version: u64,
    updated: Option<Instant>,
}

#[derive(Debug)]
struct Inner {
    tx: broadcast::Sender<LiveEvent>,
    runs: Mutex<HashMap<String, LiveRun>>,
    /// Events published so far (the next version).
    published: AtomicU64,
}

/// The live fan-out. Clones share one hub.
#[derive(Debug, Clone)]
pub struct LiveHub {
    inner: Arc<Inner>,
}

impl Default for LiveHub {
    fn default() -> Self {
        LiveHub::new(4096)
    }
}

impl LiveHub {
    /// A hub whose subscribers may fall up to `capacity` events behind (at least 1).
    pub fn new(capacity: usize) -> Self {
        let (tx, _) = broadcast::channel(capacity.max(1));
        LiveHub {
            inner: Arc::new(Inner {
                tx,
                runs: Mutex::new(HashMap::new()),
                published: AtomicU64::new(0),
            }),
        }
    }

    /// Sends `event` to every subscriber and remembers it in the run's recent window. Never
    /// blocks; with no subscriber the event is only remembered.
    pub fn publish(&self, mut event: LiveEvent) {
        if matches!(event, LiveEvent::Samples { .. }) {
            // Not remembered: the entry is on the record, which a page drawn later reads.
            event.bound();
            let _ = self.inner.tx.send(event);
            return;
        }
        {
            let mut runs = self
                .inner
                .runs
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if !runs.contains_key(event.run()) && runs.len() >= MAX_LIVE_RUNS {
                let oldest = runs
                    .iter()
                    .min_by_key(|(_, r)| r.updated)
                    .map(|(k, _)| k.clone());
                if let Some(k) = oldest {
                    runs.remove(&k);
                }
            }
            let run = runs.entry(event.run().to_string()).or_default();
            run.updated = Some(Instant::now());
            if let LiveEvent::Log { line, .. } = &mut event {
                if line.len() > MAX_LOG_LINE_BYTES {
                    let cut = prefix(line, MAX_LOG_LINE_BYTES).len();
                    line.truncate(cut);
                    line.push_str(" [line cut]");
                }
                if run.log.len() >= RECENT_LOG_LINES {
                    run.log.pop_front();
                }
                run.log.push_back(line.clone());
            } else {
                // Under the lock, so versions grow in the order changes are made.
                run.version = self.inner.published.fetch_add(1, Ordering::Relaxed) + 1;
            }
            match &event {
                LiveEvent::Point {
                    step, name, value, ..
                } => {
                    if name == glassbox_schemas::metrics::TOKENS_PER_SECOND {
                        run.tokens_per_second = Some(*value);
                    }
                    let s = run.series.entry(name.clone()).or_default();
                    if s.len() >= RECENT_POINTS {
                        s.pop_front();
                    }
                    s.push_back((*step, *value));
                }
                LiveEvent::Status { status, .. } => {
                    run.status = Some(*status);
                    if !status.is_running() {
                        run.tokens_per_second = None;
                    }
                }
                LiveEvent::Log { .. } | LiveEvent::Samples { .. } => {}
            }
        }
        // An error only means nobody is listening right now.
        let _ = self.inner.tx.send(event);
    }

    /// A receiver of every event published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<LiveEvent> {
        self.inner.tx.subscribe()
    }

    /// Number of live subscribers (SSE connections).
    pub fn subscribers(&self) -> usize {
        self.inner.tx.receiver_count()
    }

    /// What the hub remembers of `run`, if anything.
    pub(crate) fn recent(&self, run: &str) -> Option<LiveRun> {
        let runs = self
            .inner
            .runs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        runs.get(run).cloned()
    }

    /// The version of what the hub holds of `run` (`None`: nothing): it changes whenever the
    /// run's recent points or status change, including when the run is dropped and comes back.
    pub(crate) fn version(&self, run: &str) -> Option<u64> {
        let runs = self
            .inner
            .runs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        runs.get(run).map(|r| r.version)
    }

    /// Sum of the last tokens/s of every run still running.
    pub(crate) fn tokens_per_second(&self) -> f64 {
        let runs = self
            .inner
            .runs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        runs.values().filter_map(|r| r.tokens_per_second).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(run: &str, step: u64, value: f64) -> LiveEvent {
        LiveEvent::Point {
            run: run.into(),
            step,
            name: "train/loss".into(),
            value,
        }
    }

    #[tokio::test]
    async fn subscribers_receive_published_events_in_order() {
        let hub = LiveHub::new(16);
        let mut rx = hub.subscribe();
        hub.publish(point("r1", 1, 2.0));
        hub.publish(LiveEvent::Status {
            run: "r1".into(),
            status: RunPhase::Ended(glassbox_schemas::RunStatus::Succeeded),
        });
        assert_eq!(rx.recv().await.unwrap(), point("r1", 1, 2.0));
        assert!(matches!(rx.recv().await.unwrap(), LiveEvent::Status { .. }));
        let recent = hub.recent("r1").unwrap();
        assert_eq!(recent.series["train/loss"], [(1, 2.0)]);
        assert_eq!(
            recent.status,
            Some(RunPhase::Ended(glassbox_schemas::RunStatus::Succeeded))
        );
        assert_eq!(hub.version("r1"), Some(2));
        assert_eq!(hub.version("r2"), None);
        hub.publish(point("r2", 1, 2.0));
        assert_eq!(hub.version("r1"), Some(2), "another run's point");
        hub.publish(point("r1", 2, 2.0));
        assert_eq!(hub.version("r1"), Some(4));
    }

    #[test]
    fn log_lines_are_kept_bounded_and_cut_without_changing_the_version() {
        let hub = LiveHub::new(4);
        hub.publish(point("r", 1, 1.0));
        let v = hub.version("r");
        for i in 0..(RECENT_LOG_LINES + 3) {
            hub.publish(LiveEvent::Log {
                run: "r".into(),
                line: format!("t info line {i}"),
            });
        }
        hub.publish(LiveEvent::Log {
            run: "r".into(),
            line: "é".repeat(MAX_LOG_LINE_BYTES),
        });
        let r = hub.recent("r").unwrap();
        assert_eq!(r.log.len(), RECENT_LOG_LINES);
        assert_eq!(r.log[0], "t info line 4");
        let last = r.log.back().unwrap();
        assert!(last.ends_with(" [line cut]") && last.len() <= MAX_LOG_LINE_BYTES + 11);
        assert_eq!(hub.version("r"), v, "log lines do not redraw charts");
    }

    #[test]
    fn recent_window_and_run_count_are_bounded() {
        let hub = LiveHub::new(1);
        for s in 0..(RECENT_POINTS as u64 + 10) {
            hub.publish(point("r", s, s as f64));
        }
        let r = hub.recent("r").unwrap();
        assert_eq!(r.series["train/loss"].len(), RECENT_POINTS);
        assert_eq!(r.series["train/loss"][0].0, 10);
        for i in 0..(MAX_LIVE_RUNS + 5) {
            hub.publish(point(&format!("x{i}"), 0, 0.0));
        }
        let n = hub.inner.runs.lock().unwrap().len();
        assert_eq!(n, MAX_LIVE_RUNS);
    }

    #[test]
    fn tokens_per_second_sums_running_runs() {
        let hub = LiveHub::new(4);
        for (run, v) in [("a", 100.0), ("b", 50.0)] {
            hub.publish(LiveEvent::Point {
                run: run.into(),
                step: 1,
                name: glassbox_schemas::metrics::TOKENS_PER_SECOND.into(),
                value: v,
            });
        }
        assert_eq!(hub.tokens_per_second(), 150.0);
        hub.publish(LiveEvent::Status {
            run: "a".into(),
            status: RunPhase::Ended(glassbox_schemas::RunStatus::Succeeded),
        });
        assert_eq!(hub.tokens_per_second(), 50.0);
    }

    fn samples_body(prompts: usize, text: &str) -> SamplesBody {
        SamplesBody {
            run: "r".into(),
            step: 20,
            snapshot: None,
            max_tokens: 8,
            temperature: 0.0,
            seed: 0,
            prompts: (0..prompts).map(|i| format!("p{i}")).collect(),
            texts: (0..prompts).map(|_| text.to_string()).collect(),
        }
    }

    #[tokio::test]
    async fn samples_events_are_bounded_say_so_and_are_not_remembered() {
        let hub = LiveHub::new(4);
        let mut rx = hub.subscribe();
        let whole = LiveEvent::samples(7, &samples_body(2, "ok"));
        assert!(matches!(
            &whole,
            LiveEvent::Samples { samples, total: 2, truncated: false, .. } if samples[1].text == "ok"
        ));
        hub.publish(whole.clone());
        assert_eq!(rx.recv().await.unwrap(), whole);
        // Too many completions, each too long (a 2-byte character straddles the cut).
        let long = format!("a{}", "é".repeat(MAX_LIVE_SAMPLE_BYTES));
        hub.publish(LiveEvent::samples(
            8,
            &samples_body(MAX_LIVE_SAMPLES + 2, &long),
        ));
        let LiveEvent::Samples {
            samples,
            total,
            truncated,
            entry,
            ..
        } = rx.recv().await.unwrap()
        else {
            panic!("a samples event");
        };
        assert_eq!((entry, total, truncated), (8, MAX_LIVE_SAMPLES + 2, true));
        assert_eq!(samples.len(), MAX_LIVE_SAMPLES);
        assert_eq!(samples[0].text.len(), MAX_LIVE_SAMPLE_BYTES - 1);
        // One that was built by hand is bounded when it is published.
        hub.publish(LiveEvent::Samples {
            run: "r".into(),
            entry: 9,
            step: 1,
            max_tokens: 1,
            temperature: 0.0,
            seed: 0,
            samples: vec![
                LiveSample {
                    prompt: "p".into(),
                    text: long.clone(),
                };
                MAX_LIVE_SAMPLES + 1
            ],
            total: 0,
            truncated: false,
        });
        let LiveEvent::Samples {
            samples,
            total,
            truncated,
            ..
        } = rx.recv().await.unwrap()
        else {
            panic!("a samples event");
        };
        assert_eq!(
            (samples.len(), total, truncated),
            (MAX_LIVE_SAMPLES, MAX_LIVE_SAMPLES + 1, true)
        );
        assert!(hub.recent("r").is_none(), "the hub keeps no samples");
        assert_eq!(hub.version("r"), None);
    }
}
