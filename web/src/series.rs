//! Metric curves: read a run's points from the index's `metric_points` table (portable SQL,
//! SQLite or PostgreSQL), add the newer points the [`LiveHub`] holds for a live run, and
//! downsample each line with [`lttb`] for drawing or for the API.
//!
//! Vector metrics are stored one component per name (`train/router/layer_0/expert_load/3`);
//! this module returns them as separate series and leaves grouping to the charts. It does not
//! draw anything. [`ranges`] serves the API: finished runs' series come from the
//! [`crate::series_cache`].

use std::collections::BTreeMap;

use glassbox_ledger::index::{CurveNames, Index};

use crate::error::WebError;
use crate::live::LiveHub;
use glassbox_ledger::lttb;

/// Points drawn per line at most (the issue's "~2,000 points per line").
pub const MAX_POINTS_PER_LINE: usize = 2000;

/// A run's metric series: name -> (step, value), sorted by step.
pub type RunSeries = BTreeMap<String, Vec<(u64, f64)>>;

/// The names of a run's metrics, from the index and the live hub.
pub async fn metric_names(
    index: &Index,
    live: &LiveHub,
    run: &str,
) -> Result<Vec<String>, WebError> {
    let mut names = index.metric_names(run).await?;
    if let Some(l) = live.recent(run) {
        names.extend(l.series.keys().cloned());
        names.sort();
        names.dedup();
    }
    Ok(names)
}

/// Every point of `run` with `from <= step <= to`, plus the hub's newer live points.
pub async fn run_series(
    index: &Index,
    live: &LiveHub,
    run: &str,
    from: u64,
    to: u64,
) -> Result<RunSeries, WebError> {
    let mut out = index.curves(run, CurveNames::All, from, to).await?;
    merge_live(&mut out, live, run, from, to);
    Ok(out)
}

/// The series of `run` whose names start with `prefix` (one layer's expert loads), with
/// `from <= step <= to`, plus the hub's newer live points.
pub async fn prefixed_series(
    index: &Index,
    live: &LiveHub,
    run: &str,
    prefix: &str,
    from: u64,
    to: u64,
) -> Result<RunSeries, WebError> {
    let mut out = index
        .curves(run, CurveNames::Prefix(prefix), from, to)
        .await?;
    merge_live(&mut out, live, run, from, to);
    out.retain(|n, _| n.starts_with(prefix));
    Ok(out)
}

/// One series of `run` with `from <= step <= to`, plus the hub's newer live points.
pub async fn one_series(
    index: &Index,
    live: &LiveHub,
    run: &str,
    name: &str,
    from: u64,
    to: u64,
) -> Result<Vec<(u64, f64)>, WebError> {
    let mut one = index.curves(run, CurveNames::One(name), from, to).await?;
    merge_live(&mut one, live, run, from, to);
    Ok(one.remove(name).unwrap_or_default())
}

/// Appends the hub's points that are newer than the last indexed step of each series.
fn merge_live(out: &mut RunSeries, live: &LiveHub, run: &str, from: u64, to: u64) {
    let Some(l) = live.recent(run) else { return };
    for (name, pts) in l.series {
        let s = out.entry(name).or_default();
        let last = s.last().map(|p| p.0);
        s.extend(
            pts.into_iter()
                .filter(|(step, _)| *step >= from && *step <= to)
                .filter(|(step, _)| last.is_none_or(|l| *step > l)),
        );
    }
    out.retain(|_, v| !v.is_empty());
}

/// Each of `names` of `run` with `from <= step <= to`: (points in the range, the range
/// downsampled to at most `max`). A finished run answers from its overview (drawn once when
/// the run was indexed, see [`glassbox_ledger::index::curves`]) when that is the whole curve,
/// or when the request spans the whole curve at no more than the overview's resolution (a
/// page's first draw); otherwise its series is read whole once and kept in the
/// [`crate::series_cache`] (zooming asks for many ranges of it). A running run's range is read
/// from the index and the live hub each time.
pub async fn ranges(
    st: &crate::WebState,
    run: &str,
    names: &[String],
    from: u64,
    to: u64,
    max: usize,
) -> Result<Vec<(usize, Vec<(u64, f64)>)>, WebError> {
    let finished = {
        let cat = st.catalog.read(&st.index, st.blobs.as_ref()).await?;
        cat.runs
            .get(run)
            .filter(|r| !r.status.is_running())
            .map(|_| cat.touched_runs.get(run).copied().unwrap_or(0))
    };
    let mut overviews = None;
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let Some(touched) = finished else {
            let pts = one_series(&st.index, &st.live, run, name, from, to).await?;
            out.push((pts.len(), downsample(&pts, max)));
            continue;
        };
        let cached = st.series.get(run, name, touched);
        if cached.is_none() {
            if overviews.is_none() {
                overviews = Some(st.index.overviews(run).await?);
            }
            if let Some(o) = overviews.as_ref().and_then(|o| o.get(name)) {
                if o.is_whole() {
                    let pts = crate::series_cache::range(&o.points, from, to);
                    out.push((pts.len(), downsample(pts, max)));
                    continue;
                }
                let spans = match (o.points.first(), o.points.last()) {
                    (Some(a), Some(b)) => from <= a.0 && to >= b.0,
                    _ => false,
                };
                if spans && max <= o.points.len() {
                    out.push((o.total as usize, downsample(&o.points, max)));
                    continue;
                }
            }
        }
        let whole = match cached {
            Some(p) => p,
            None => {
                let p = std::sync::Arc::new(
                    one_series(&st.index, &st.live, run, name, 0, u64::MAX).await?,
                );
                st.series.put(run, name, touched, p.clone());
                p
            }
        };
        let pts = crate::series_cache::range(&whole, from, to);
        out.push((pts.len(), downsample(pts, max)));
    }
    Ok(out)
}

/// Downsamples a series to at most `max` points (LTTB over step, value).
pub fn downsample(points: &[(u64, f64)], max: usize) -> Vec<(u64, f64)> {
    let xy: Vec<(f64, f64)> = points.iter().map(|&(s, v)| (s as f64, v)).collect();
    lttb::downsample(&xy, max)
        .into_iter()
        .map(|(s, v)| (s as u64, v))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SplitMix64, so the values are the same on every run.
    fn splitmix(x: &mut u64) -> u64 {
        *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Writes finite values chosen to be hard to print (thirds, subnormals, extremes, random bit
    /// patterns) as two series, steps inserted backwards, and reads them back through the packed
    /// query: every value bit for bit, in step order.
    async fn check_round_trip(index: &Index) {
        let mut values = vec![
            0.1 + 0.2,
            1.0 / 3.0,
            2.5,
            1e-300,
            f64::MIN_POSITIVE,
            5e-324,
            f64::MAX,
            -f64::MAX,
            123456789.0,
            -7.25e-5,
        ];
        let mut seed = 7;
        while values.len() < 5000 {
            let v = f64::from_bits(splitmix(&mut seed));
            if v.is_finite() {
                values.push(v);
            }
        }
        let mut tx = index.write_pool().begin().await.unwrap();
        for (i, v) in values.iter().enumerate().rev() {
            for name in ["a", "b"] {
                sqlx::query(
                    "INSERT INTO metric_points (run, name, step, value, entry) VALUES ('r', $1, $2, $3, 0)",
                )
                .bind(name)
                .bind(i as i64)
                .bind(if name == "a" { *v } else { -*v })
                .execute(&mut *tx)
                .await
                .unwrap();
            }
        }
        tx.commit().await.unwrap();
        let live = LiveHub::new(4);
        let all = run_series(index, &live, "r", 0, u64::MAX).await.unwrap();
        assert_eq!(all.keys().collect::<Vec<_>>(), ["a", "b"]);
        let want_a: Vec<(u64, u64)> = values
            .iter()
            .enumerate()
            .map(|(i, v)| (i as u64, v.to_bits()))
            .collect();
        let got_a: Vec<(u64, u64)> = all["a"].iter().map(|(s, v)| (*s, v.to_bits())).collect();
        assert_eq!(got_a, want_a);
        assert!(all["b"].iter().zip(&values).all(|(p, v)| p.1 == -*v));
        let some = one_series(index, &live, "r", "b", 10, 12).await.unwrap();
        assert_eq!(
            some,
            vec![(10, -values[10]), (11, -values[11]), (12, -values[12])]
        );
        assert!(
            one_series(index, &live, "r", "c", 0, u64::MAX)
                .await
                .unwrap()
                .is_empty()
        );
    }

    #[tokio::test]
    async fn packed_points_read_back_bit_for_bit_on_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        let index = Index::connect(&dir.path().join("index.db").display().to_string())
            .await
            .unwrap();
        check_round_trip(&index).await;
        index.close().await;
    }

    /// The same on PostgreSQL (the server `cargo xtask test` provides), in a schema of its own,
    /// dropped afterwards.
    #[tokio::test]
    async fn packed_points_read_back_bit_for_bit_on_postgres() {
        let schema = glassbox_test_support::postgres_schema("web", "packed_points").await;
        let index = Index::connect(&schema.url).await.unwrap();
        assert!(index.is_postgres());
        check_round_trip(&index).await;
        index.close().await;
        schema.drop_schema().await;
    }
}
