//! Metric curves: read a run's points from the index's `metric_points` table (portable SQL,
//! SQLite or PostgreSQL), add the newer points the [`LiveHub`] holds for a live run, and
//! downsample each line with [`lttb`] for drawing or for the API.
//!
//! Vector metrics are stored one component per name (`train/router/layer_0/expert_load/3`);
//! this module returns them as separate series and leaves grouping to the charts. It does not
//! draw anything.

use std::collections::BTreeMap;

use sqlx::{AnyPool, Row};

use crate::error::WebError;
use crate::live::LiveHub;
use crate::lttb;

/// Points drawn per line at most (the "~2,000 points per line").
pub const MAX_POINTS_PER_LINE: usize = 2000;

/// A run's metric series: name -> (step, value), sorted by step.
pub type RunSeries = BTreeMap<String, Vec<(u64, f64)>>;

/// The names of a run's metrics, from the index and the live hub.
pub async fn metric_names(
    pool: &AnyPool,
    live: &LiveHub,
    run: &str,
) -> Result<Vec<String>, WebError> {
    let rows = sqlx::query("SELECT DISTINCT name FROM metric_points WHERE run = $1 ORDER BY name")
        .bind(run.to_string())
        .fetch_all(pool)
        .await?;
    let mut names = rows
        .iter()
        .map(|r| r.try_get::<String, _>("name"))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(l) = live.recent(run) {
        names.extend(l.series.keys().cloned());
        names.sort();
        names.dedup();
    }
    Ok(names)
}

/// Every point of `run` with `from <= step <= to`, plus the hub's newer live points.
pub async fn run_series(
    pool: &AnyPool,
    live: &LiveHub,
    run: &str,
    from: u64,
    to: u64,
) -> Result<RunSeries, WebError> {
    let rows = sqlx::query(
        "SELECT name, step, value FROM metric_points WHERE run = $1 AND step >= $2 AND step <= $3 ORDER BY name, step",
    )
    .bind(run.to_string())
    .bind(from.min(i64::MAX as u64) as i64)
    .bind(to.min(i64::MAX as u64) as i64)
    .fetch_all(pool)
    .await?;
    let mut out = RunSeries::new();
    let mut current: Option<(String, Vec<(u64, f64)>)> = None;
    for r in &rows {
        let name: String = r.try_get("name")?;
        let step: i64 = r.try_get("step")?;
        let value: f64 = r.try_get("value")?;
        match &mut current {
            Some((n, pts)) if *n == name => pts.push((step as u64, value)),
            _ => {
                if let Some((n, pts)) = current.take() {
                    out.insert(n, pts);
                }
                current = Some((name, vec![(step as u64, value)]));
            }
        }
    }
    if let Some((n, pts)) = current {
        out.insert(n, pts);
    }
    merge_live(&mut out, live, run, from, to);
    Ok(out)
}

/// One series of `run` with `from <= step <= to`, plus the hub's newer live points.
pub async fn one_series(
    pool: &AnyPool,
    live: &LiveHub,
    run: &str,
    name: &str,
    from: u64,
    to: u64,
) -> Result<Vec<(u64, f64)>, WebError> {
    let rows = sqlx::query(
        "SELECT step, value FROM metric_points WHERE run = $1 AND name = $2 AND step >= $3 AND step <= $4 ORDER BY step",
    )
    .bind(run.to_string())
    .bind(name.to_string())
    .bind(from.min(i64::MAX as u64) as i64)
    .bind(to.min(i64::MAX as u64) as i64)
    .fetch_all(pool)
    .await?;
    let mut pts = Vec::with_capacity(rows.len());
    for r in &rows {
        pts.push((r.try_get::<i64, _>("step")? as u64, r.try_get("value")?));
    }
    let mut one = RunSeries::new();
    if !pts.is_empty() {
        one.insert(name.to_string(), pts);
    }
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

/// Downsamples a series to at most `max` points (LTTB over step, value).
pub fn downsample(points: &[(u64, f64)], max: usize) -> Vec<(u64, f64)> {
    let xy: Vec<(f64, f64)> = points.iter().map(|&(s, v)| (s as f64, v)).collect();
    lttb::downsample(&xy, max)
        .into_iter()
        .map(|(s, v)| (s as u64, v))
        .collect()
}
