//! A run's metric points at full resolution, as columns: the metric-chunk blobs a run records
//! (JSON lines of `MetricRecord`) read into one long table of (name, step, value), and the x
//! axis the dashboard's charts offer (`step`, `tokens`, `flops`, `time`) computed per point.
//!
//! Columns, not rows: a million points become four flat arrays (a name code per point, the
//! distinct names once), which Python turns into a DataFrame or an Arrow table without touching
//! each point. Nothing is downsampled and nothing is skipped: a non-finite value (a diverged
//! step's NaN) stays a point, NaN, where the index and the charts leave it out.
//!
//! The x axes are the charts' (`web/assets/charts.js`): tokens are the run's own
//! `throughput/total_tokens` at that step (linear between the steps that recorded it, the first
//! or last value beyond them), FLOPs are those tokens times the spec's training FLOPs per token
//! (the cost model's), and training time is the sum over recorded steps of the tokens trained
//! since the previous one over that step's `throughput/tokens_per_second`.
//!
//! Not here: where the chunks come from (`reading`) or Python.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::BufRead;

use glassbox_schemas::metrics::{TOKENS_PER_SECOND, TOTAL_TOKENS, XAxis};
use serde::Deserialize;

/// Longest line of a metric chunk read (one step's scalars and expert loads): the index's bound.
const MAX_LINE_BYTES: u64 = 16 << 20;

/// One line of a chunk as it is read: a `glassbox_schemas::metrics::MetricRecord` whose names
/// borrow from the line (no allocation per name) and whose `null`s are NaN. The record's `kind`
/// is not needed here.
#[derive(Deserialize)]
struct Line<'a> {
    step: u64,
    #[serde(borrow)]
    scalars: BTreeMap<Cow<'a, str>, Option<f64>>,
    #[serde(borrow, default)]
    vectors: BTreeMap<Cow<'a, str>, Vec<Option<f64>>>,
}

/// A run's points, one per (record, metric), in the order read until [`MetricColumns::sort`].
#[derive(Debug, Default, Clone, PartialEq)]
pub struct MetricColumns {
    /// The distinct metric names; a point's code is a position here.
    pub names: Vec<String>,
    /// Per point: its metric, as a position in `names`.
    pub codes: Vec<u32>,
    /// Per point: steps completed when it was measured.
    pub steps: Vec<u64>,
    /// Per point: the value (NaN where the record wrote `null`).
    pub values: Vec<f64>,
    /// `throughput/total_tokens` by step, whether or not it was asked for (the x axes need it).
    tokens: Vec<(u64, f64)>,
    /// `throughput/tokens_per_second` by step.
    tokens_per_second: Vec<(u64, f64)>,
    interned: HashMap<String, u32>,
    /// A vector metric's component codes by component index, so `<name>/<i>` is formatted
    /// once per component rather than once per point (`None`: a component not asked for).
    components: HashMap<String, Vec<Option<u32>>>,
}

impl MetricColumns {
    /// Reads one chunk (JSON lines), keeping the metrics in `only` (all when `None`); a vector
    /// metric's component `i` is the metric `<name>/<i>`. `what` names the chunk in errors.
    pub fn read_chunk(
        &mut self,
        chunk: impl BufRead,
        only: Option<&BTreeSet<String>>,
        what: &str,
    ) -> Result<(), String> {
        let mut chunk = chunk;
        let mut line = String::new();
        for n in 1.. {
            line.clear();
            let read = std::io::Read::take(&mut chunk, MAX_LINE_BYTES + 1)
                .read_line(&mut line)
                .map_err(|e| format!("{what}: cannot read line {n}: {e}"))?;
            if read == 0 {
                break;
            }
            if read as u64 > MAX_LINE_BYTES {
                return Err(format!("{what}: line {n} is over {MAX_LINE_BYTES} bytes"));
            }
            if line.trim().is_empty() {
                continue;
            }
            let record: Line<'_> =
                serde_json::from_str(&line).map_err(|e| format!("{what}: line {n}: {e}"))?;
            self.push_line(&record, only);
        }
        Ok(())
    }

    fn push_line(&mut self, line: &Line<'_>, only: Option<&BTreeSet<String>>) {
        let step = line.step;
        for (name, value) in &line.scalars {
            let value = value.unwrap_or(f64::NAN);
            if name == TOTAL_TOKENS {
                self.tokens.push((step, value));
            } else if name == TOKENS_PER_SECOND {
                self.tokens_per_second.push((step, value));
            }
            if only.is_none_or(|o| o.contains(name.as_ref())) {
                self.point(name, step, value);
            }
        }
        for (name, values) in &line.vectors {
            if !self.components.contains_key(name.as_ref()) {
                self.components.insert(name.to_string(), Vec::new());
            }
            for (i, value) in values.iter().enumerate() {
                let known = self.components[name.as_ref()].get(i).copied();
                let code = match known {
                    Some(code) => code,
                    None => {
                        let component = format!("{name}/{i}");
                        let code = only
                            .is_none_or(|o| o.contains(&component))
                            .then(|| self.intern(&component));
                        if let Some(codes) = self.components.get_mut(name.as_ref()) {
                            codes.resize(codes.len().max(i + 1), None);
                            codes[i] = code;
                        }
                        code
                    }
                };
                if let Some(code) = code {
                    self.codes.push(code);
                    self.steps.push(step);
                    self.values.push(value.unwrap_or(f64::NAN));
                }
            }
        }
    }

    fn intern(&mut self, name: &str) -> u32 {
        match self.interned.get(name) {
            Some(c) => *c,
            None => {
                let c = self.names.len() as u32;
                self.names.push(name.to_string());
                self.interned.insert(name.to_string(), c);
                c
            }
        }
    }

    fn point(&mut self, name: &str, step: u64, value: f64) {
        let code = self.intern(name);
        self.codes.push(code);
        self.steps.push(step);
        self.values.push(value);
    }

    /// Appends `other`'s points after these (chunks parsed apart, joined in log order).
    pub fn append(&mut self, other: MetricColumns) {
        let recode: Vec<u32> = other.names.iter().map(|n| self.intern(n)).collect();
        self.codes
            .extend(other.codes.iter().map(|c| recode[*c as usize]));
        self.steps.extend(other.steps);
        self.values.extend(other.values);
        self.tokens.extend(other.tokens);
        self.tokens_per_second.extend(other.tokens_per_second);
    }

    /// Number of points.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Orders the names alphabetically and the points by name, then step; points of one name
    /// and step (a step recorded again after a resume) keep the order they were read in.
    pub fn sort(&mut self) {
        let mut order: Vec<u32> = (0..self.names.len() as u32).collect();
        order.sort_by(|a, b| self.names[*a as usize].cmp(&self.names[*b as usize]));
        let mut recode = vec![0u32; order.len()];
        for (new, old) in order.iter().enumerate() {
            recode[*old as usize] = new as u32;
        }
        self.names = order
            .iter()
            .map(|o| self.names[*o as usize].clone())
            .collect();
        self.interned = self
            .names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i as u32))
            .collect();
        // A counting sort by name (stable, one pass), then by step within a name only where
        // the chunks were not already in step order (a resumed run's repeated steps).
        let mut start = vec![0usize; order.len() + 1];
        for c in &self.codes {
            start[recode[*c as usize] as usize + 1] += 1;
        }
        for i in 1..start.len() {
            start[i] += start[i - 1];
        }
        let mut next = start.clone();
        let n = self.len();
        let (mut codes, mut steps, mut values) = (vec![0u32; n], vec![0u64; n], vec![0f64; n]);
        for i in 0..n {
            let code = recode[self.codes[i] as usize];
            let at = next[code as usize];
            next[code as usize] += 1;
            codes[at] = code;
            steps[at] = self.steps[i];
            values[at] = self.values[i];
        }
        for w in start.windows(2) {
            let (a, b) = (w[0], w[1]);
            if !steps[a..b].is_sorted() {
                let mut pairs: Vec<(u64, f64)> = steps[a..b]
                    .iter()
                    .copied()
                    .zip(values[a..b].iter().copied())
                    .collect();
                pairs.sort_by_key(|p| p.0);
                for (k, (s, v)) in pairs.into_iter().enumerate() {
                    steps[a + k] = s;
                    values[a + k] = v;
                }
            }
        }
        (self.codes, self.steps, self.values) = (codes, steps, values);
        self.components.clear();
        self.tokens.sort_by_key(|p| p.0);
        self.tokens_per_second.sort_by_key(|p| p.0);
    }

    /// The x column for `axis`: one value per point. `flops_per_token` is the run's spec's
    /// (needed for [`XAxis::Flops`] only). Call after [`MetricColumns::sort`].
    pub fn x(&self, axis: XAxis, flops_per_token: Option<f64>) -> Result<Vec<f64>, String> {
        let by_step = |f: &dyn Fn(u64) -> f64| self.steps.iter().map(|s| f(*s)).collect();
        let tokens = || -> Result<&[(u64, f64)], String> {
            if self.tokens.is_empty() {
                Err(format!(
                    "this run recorded no {TOTAL_TOKENS:?}, which the tokens, flops and time axes are drawn from; use x=\"step\""
                ))
            } else {
                Ok(&self.tokens)
            }
        };
        match axis {
            XAxis::Step => Ok(self.steps.iter().map(|s| *s as f64).collect()),
            XAxis::Tokens => {
                let t = tokens()?;
                Ok(by_step(&|s| lerp(t, s)))
            }
            XAxis::Flops => {
                let t = tokens()?;
                let per = flops_per_token.ok_or_else(|| {
                    "the FLOPs axis needs the run's spec (its FLOPs per token), and its spec blob could not be read; use x=\"tokens\"".to_string()
                })?;
                Ok(by_step(&|s| lerp(t, s) * per))
            }
            XAxis::Time => {
                let t = tokens()?;
                if self.tokens_per_second.is_empty() {
                    return Err(format!(
                        "this run recorded no {TOKENS_PER_SECOND:?}, which the time axis is drawn from; use x=\"tokens\""
                    ));
                }
                let elapsed = training_time(t, &self.tokens_per_second);
                Ok(by_step(&|s| lerp(&elapsed, s)))
            }
        }
    }
}

/// Seconds of training at each step that recorded a throughput: the sum of each interval's
/// tokens over its tokens per second, from 0 at step 0.
fn training_time(tokens: &[(u64, f64)], tokens_per_second: &[(u64, f64)]) -> Vec<(u64, f64)> {
    let mut out = vec![(0u64, 0.0f64)];
    let mut t = 0.0;
    for (step, tps) in tokens_per_second {
        let (last, _) = out[out.len() - 1];
        let dtok = lerp(tokens, *step) - lerp(tokens, last);
        if *tps > 0.0 && dtok.is_finite() {
            t += dtok / tps;
        }
        out.push((*step, t));
    }
    out
}

/// `ys` at `x`, linear between the points of `xy` (sorted by x), the first or last value beyond
/// them; NaN when there are none.
fn lerp(xy: &[(u64, f64)], x: u64) -> f64 {
    let i = xy.partition_point(|(k, _)| *k < x);
    match (i, xy.len()) {
        (_, 0) => f64::NAN,
        (0, _) => xy[0].1,
        (i, n) if i >= n => xy[n - 1].1,
        (i, _) => {
            let ((x0, y0), (x1, y1)) = (xy[i - 1], xy[i]);
            if x1 == x0 {
                y1
            } else {
                y0 + (y1 - y0) * (x - x0) as f64 / (x1 - x0) as f64
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHUNK: &str = r#"{"step":2,"kind":"train","scalars":{"train/loss":3.0,"throughput/total_tokens":200,"throughput/tokens_per_second":100},"vectors":{"load":[0.5,0.5]}}
{"step":1,"kind":"train","scalars":{"train/loss":4.0,"throughput/total_tokens":100,"throughput/tokens_per_second":50}}

{"step":4,"kind":"train","scalars":{"train/loss":null,"throughput/total_tokens":400,"throughput/tokens_per_second":200}}
"#;

    fn read(only: Option<&BTreeSet<String>>) -> MetricColumns {
        let mut m = MetricColumns::default();
        m.read_chunk(CHUNK.as_bytes(), only, "chunk").unwrap();
        m.sort();
        m
    }

    #[test]
    fn every_point_is_kept_sorted_by_name_then_step_with_nan_kept() {
        let m = read(None);
        assert_eq!(
            m.names,
            [
                "load/0",
                "load/1",
                "throughput/tokens_per_second",
                "throughput/total_tokens",
                "train/loss"
            ]
        );
        assert_eq!(m.len(), 2 + 3 + 3 + 3);
        let loss: Vec<(u64, f64)> = (0..m.len())
            .filter(|i| m.names[m.codes[*i] as usize] == "train/loss")
            .map(|i| (m.steps[i], m.values[i]))
            .collect();
        assert_eq!(&loss[..2], &[(1, 4.0), (2, 3.0)]);
        assert_eq!(loss[2].0, 4);
        assert!(loss[2].1.is_nan());
    }

    #[test]
    fn a_filter_keeps_its_names_and_the_axes_still_map() {
        let only: BTreeSet<String> = ["train/loss".to_string()].into();
        let m = read(Some(&only));
        assert_eq!(m.names, ["train/loss"]);
        assert_eq!(m.x(XAxis::Step, None).unwrap(), [1.0, 2.0, 4.0]);
        assert_eq!(m.x(XAxis::Tokens, None).unwrap(), [100.0, 200.0, 400.0]);
        assert_eq!(
            m.x(XAxis::Flops, Some(6.0)).unwrap(),
            [600.0, 1200.0, 2400.0]
        );
        // 0 -> 1: 100 tokens (clamped to the first value) at 50/s is 0 s past the first
        // recorded step's own lerp (100 - 100); then 100 tokens at 100/s, 200 at 200/s.
        assert_eq!(m.x(XAxis::Time, None).unwrap(), [0.0, 1.0, 2.0]);
        assert!(
            m.x(XAxis::Flops, None)
                .unwrap_err()
                .contains("FLOPs per token")
        );
    }

    #[test]
    fn axes_without_their_series_say_which_is_missing() {
        let mut m = MetricColumns::default();
        m.read_chunk(
            r#"{"step":1,"kind":"train","scalars":{"train/loss":1.0}}"#.as_bytes(),
            None,
            "c",
        )
        .unwrap();
        let e = m.x(XAxis::Tokens, None).unwrap_err();
        assert!(e.contains("throughput/total_tokens"), "{e}");
    }

    #[test]
    fn steps_repeated_after_a_resume_are_ordered_and_kept() {
        let mut m = MetricColumns::default();
        let chunks = [
            "{\"step\":1,\"scalars\":{\"a\":1.0},\"vectors\":{\"v\":[1.0,2.0]}}\n{\"step\":2,\"scalars\":{\"a\":2.0}}\n",
            "{\"step\":2,\"scalars\":{\"a\":2.5},\"vectors\":{\"v\":[3.0,4.0,5.0]}}\n",
        ];
        let only: BTreeSet<String> = ["a".to_string(), "v/1".to_string()].into();
        for c in chunks {
            m.read_chunk(c.as_bytes(), Some(&only), "c").unwrap();
        }
        m.sort();
        assert_eq!(m.names, ["a", "v/1"]);
        assert_eq!(m.codes, [0, 0, 0, 1, 1]);
        assert_eq!(m.steps, [1, 2, 2, 1, 2]);
        assert_eq!(m.values, [1.0, 2.0, 2.5, 2.0, 4.0]);
    }

    #[test]
    fn a_bad_line_is_named() {
        let mut m = MetricColumns::default();
        let e = m
            .read_chunk("{\"step\":1}\nnot json\n".as_bytes(), None, "chunk X")
            .unwrap_err();
        assert!(e.starts_with("chunk X: line 1"), "{e}");
    }
}
