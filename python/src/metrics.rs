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
use std::collections::{BTreeSet, HashMap};
use std::io::BufRead;

use glassbox_schemas::metrics::{TOKENS_PER_SECOND, TOTAL_TOKENS, XAxis};
use serde::Deserialize;
use serde::de::{
    self, DeserializeSeed, Deserializer, Error as _, IgnoredAny, MapAccess, SeqAccess, Visitor,
};

/// Longest line of a metric chunk read (one step's scalars and expert loads): the index's bound.
const MAX_LINE_BYTES: u64 = 16 << 20;

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
    /// The names of the last line read, by their place in its `scalars` and `vectors`: a
    /// chunk's lines name the same metrics in the same order, so a name is matched against
    /// the one at its place before it is hashed.
    seen_scalars: Vec<SeenName>,
    seen_vectors: Vec<SeenVector>,
}

/// A scalar's name as last read at its place in a line, and what it maps to.
#[derive(Debug, Clone, PartialEq)]
struct SeenName {
    name: String,
    /// Its code (`None`: not asked for).
    code: Option<u32>,
    /// Which x-axis series it is, if any.
    axis: Option<AxisSeries>,
}

/// A vector metric's name as last read at its place in a line, and its components' codes.
#[derive(Debug, Clone, PartialEq)]
struct SeenVector {
    name: String,
    codes: Vec<Option<u32>>,
}

/// The series the x axes are drawn from.
#[derive(Debug, Clone, Copy, PartialEq)]
enum AxisSeries {
    Tokens,
    TokensPerSecond,
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
            let mut de = serde_json::Deserializer::from_str(&line);
            LineSeed { cols: self, only }
                .deserialize(&mut de)
                .and_then(|()| de.end())
                .map_err(|e| format!("{what}: line {n}: {e}"))?;
        }
        Ok(())
    }

    /// The scalar named `name` at place `i` of its line's `scalars`.
    fn scalar_at(&mut self, i: usize, name: &str, only: Option<&BTreeSet<String>>) -> &SeenName {
        if self.seen_scalars.get(i).is_none_or(|s| s.name != name) {
            let axis = match name {
                TOTAL_TOKENS => Some(AxisSeries::Tokens),
                TOKENS_PER_SECOND => Some(AxisSeries::TokensPerSecond),
                _ => None,
            };
            let code = only
                .is_none_or(|o| o.contains(name))
                .then(|| self.intern(name));
            let seen = SeenName {
                name: name.to_string(),
                code,
                axis,
            };
            if i < self.seen_scalars.len() {
                self.seen_scalars[i] = seen;
            } else {
                self.seen_scalars.push(seen);
            }
        }
        &self.seen_scalars[i]
    }

    /// Makes `seen_vectors[i]` the vector metric `name`'s.
    fn vector_at(&mut self, i: usize, name: &str) {
        if self.seen_vectors.get(i).is_some_and(|v| v.name == name) {
            return;
        }
        let seen = SeenVector {
            name: name.to_string(),
            codes: self.components.get(name).cloned().unwrap_or_default(),
        };
        if i < self.seen_vectors.len() {
            self.seen_vectors[i] = seen;
        } else {
            self.seen_vectors.push(seen);
        }
    }

    /// The code of component `c` of the vector metric at place `i` (`None`: not asked for).
    fn component(&mut self, i: usize, c: usize, only: Option<&BTreeSet<String>>) -> Option<u32> {
        if let Some(code) = self.seen_vectors[i].codes.get(c) {
            return *code;
        }
        let name = self.seen_vectors[i].name.clone();
        let component = format!("{name}/{c}");
        let code = only
            .is_none_or(|o| o.contains(&component))
            .then(|| self.intern(&component));
        let codes = self.components.entry(name).or_default();
        codes.resize(codes.len().max(c + 1), None);
        codes[c] = code;
        let seen = &mut self.seen_vectors[i].codes;
        seen.resize(seen.len().max(c + 1), None);
        seen[c] = code;
        code
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
        self.seen_scalars.clear();
        self.seen_vectors.clear();
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

/// One line of a chunk (a `glassbox_schemas::metrics::MetricRecord`: `step`, `scalars`,
/// `vectors`; `kind` and anything else skipped), streamed into the columns: no map is built
/// per line and no name allocated per point. A `null` value is NaN. `step` may come after the
/// maps (canonical JSON orders keys by name), so the line's points get their step at its end.
struct LineSeed<'c> {
    cols: &'c mut MetricColumns,
    only: Option<&'c BTreeSet<String>>,
}

/// The axis series' values a line recorded, waiting for its step.
#[derive(Default)]
struct LineAxes {
    tokens: Option<f64>,
    tokens_per_second: Option<f64>,
}

impl<'de> DeserializeSeed<'de> for LineSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for LineSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a metric record: {\"step\": N, \"scalars\": {...}, \"vectors\": {...}}")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let first = self.cols.codes.len();
        let (mut step, mut scalars) = (None, false);
        let mut axes = LineAxes::default();
        while let Some(key) = map.next_key::<LineKey>()? {
            match key {
                LineKey::Step => step = Some(map.next_value::<u64>()?),
                LineKey::Scalars => {
                    map.next_value_seed(ScalarsSeed {
                        cols: &mut *self.cols,
                        only: self.only,
                        axes: &mut axes,
                    })?;
                    scalars = true;
                }
                LineKey::Vectors => map.next_value_seed(VectorsSeed {
                    cols: &mut *self.cols,
                    only: self.only,
                })?,
                LineKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let step = step.ok_or_else(|| A::Error::missing_field("step"))?;
        if !scalars {
            return Err(A::Error::missing_field("scalars"));
        }
        debug_assert_eq!(self.cols.steps.len(), first);
        self.cols.steps.resize(self.cols.codes.len(), step);
        if let Some(v) = axes.tokens {
            self.cols.tokens.push((step, v));
        }
        if let Some(v) = axes.tokens_per_second {
            self.cols.tokens_per_second.push((step, v));
        }
        Ok(())
    }
}

/// A key of a line's object.
enum LineKey {
    Step,
    Scalars,
    Vectors,
    Other,
}

impl<'de> Deserialize<'de> for LineKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = LineKey;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<LineKey, E> {
                Ok(match v {
                    "step" => LineKey::Step,
                    "scalars" => LineKey::Scalars,
                    "vectors" => LineKey::Vectors,
                    _ => LineKey::Other,
                })
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// A line's `scalars`: each `name: value` becomes a point (its step filled in by the line).
struct ScalarsSeed<'c> {
    cols: &'c mut MetricColumns,
    only: Option<&'c BTreeSet<String>>,
    axes: &'c mut LineAxes,
}

impl<'de> DeserializeSeed<'de> for ScalarsSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ScalarsSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a map of metric names to numbers or null")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut i = 0;
        while let Some(name) = map.next_key::<Name<'de>>()? {
            let value = map.next_value::<Option<f64>>()?.unwrap_or(f64::NAN);
            let seen = self.cols.scalar_at(i, name.as_str(), self.only);
            let (code, axis) = (seen.code, seen.axis);
            match axis {
                Some(AxisSeries::Tokens) => self.axes.tokens = Some(value),
                Some(AxisSeries::TokensPerSecond) => self.axes.tokens_per_second = Some(value),
                None => {}
            }
            if let Some(code) = code {
                self.cols.codes.push(code);
                self.cols.values.push(value);
            }
            i += 1;
        }
        Ok(())
    }
}

/// A line's `vectors`: component `c` of vector `name` is the point `<name>/<c>`.
struct VectorsSeed<'c> {
    cols: &'c mut MetricColumns,
    only: Option<&'c BTreeSet<String>>,
}

impl<'de> DeserializeSeed<'de> for VectorsSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for VectorsSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a map of metric names to lists of numbers or null")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut i = 0;
        while let Some(name) = map.next_key::<Name<'de>>()? {
            self.cols.vector_at(i, name.as_str());
            map.next_value_seed(ComponentsSeed {
                cols: &mut *self.cols,
                only: self.only,
                at: i,
            })?;
            i += 1;
        }
        Ok(())
    }
}

/// One vector's components, the vector at place `at` of its line.
struct ComponentsSeed<'c> {
    cols: &'c mut MetricColumns,
    only: Option<&'c BTreeSet<String>>,
    at: usize,
}

impl<'de> DeserializeSeed<'de> for ComponentsSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ComponentsSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a list of numbers or null")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut c = 0;
        while let Some(value) = seq.next_element::<Option<f64>>()? {
            if let Some(code) = self.cols.component(self.at, c, self.only) {
                self.cols.codes.push(code);
                self.cols.values.push(value.unwrap_or(f64::NAN));
            }
            c += 1;
        }
        Ok(())
    }
}

/// A metric name as the line holds it: borrowed unless it has escapes.
struct Name<'de>(Cow<'de, str>);

impl Name<'_> {
    fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for Name<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct NameVisitor;
        impl<'de> Visitor<'de> for NameVisitor {
            type Value = Name<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a metric name")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(v.to_string())))
            }
        }
        d.deserialize_str(NameVisitor)
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
    fn lines_read_alike_in_any_key_order_with_escaped_and_changing_names() {
        let chunk = concat!(
            r#"{"kind":"train","scalars":{"a":1,"b":2},"step":1,"vectors":{"v":[1,null]}}"#,
            "\n",
            r#"{"vectors":{"v":[3,4,5]},"step":2,"scalars":{"b":3,"c\u002fd":4},"extra":[1,{"x":2}]}"#,
            "\n",
            r#"{"step":3,"scalars":{"a":5}}"#,
            "\n",
        );
        let mut m = MetricColumns::default();
        m.read_chunk(chunk.as_bytes(), None, "c").unwrap();
        m.sort();
        assert_eq!(m.names, ["a", "b", "c/d", "v/0", "v/1", "v/2"]);
        assert_eq!(m.codes, [0, 0, 1, 1, 2, 3, 3, 4, 4, 5]);
        assert_eq!(m.steps, [1, 3, 1, 2, 2, 1, 2, 1, 2, 2]);
        let values: Vec<String> = m.values.iter().map(|v| v.to_string()).collect();
        assert_eq!(values, ["1", "5", "2", "3", "4", "1", "3", "NaN", "4", "5"]);
        let only: BTreeSet<String> = ["b", "v/2"].map(String::from).into();
        let mut m = MetricColumns::default();
        m.read_chunk(chunk.as_bytes(), Some(&only), "c").unwrap();
        m.sort();
        assert_eq!(m.names, ["b", "v/2"]);
        assert_eq!((m.steps, m.values), (vec![1, 2, 2], vec![2.0, 3.0, 5.0]));
    }

    #[test]
    fn a_bad_line_is_named() {
        let mut m = MetricColumns::default();
        let e = m
            .read_chunk("{\"step\":1}\nnot json\n".as_bytes(), None, "chunk X")
            .unwrap_err();
        assert!(e.starts_with("chunk X: line 1"), "{e}");
        assert!(e.contains("scalars"), "{e}");
        let e = m
            .read_chunk(
                "{\"step\":1,\"scalars\":{}}\n{\"step\":\"two\",\"scalars\":{}}\n".as_bytes(),
                None,
                "chunk Y",
            )
            .unwrap_err();
        assert!(e.starts_with("chunk Y: line 2"), "{e}");
    }
}
