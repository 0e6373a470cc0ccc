//! Metric curves in the index: a run's points read back one row per metric (packed), and each
//! finished run's **overview**, every curve downsampled once with [`crate::lttb`] to at most
//! [`OVERVIEW_POINTS`] points when the run's `result` is indexed. A dashboard's first view of a
//! run reads the overview (a few thousand points per chart) instead of the whole series (a
//! million points for a long run); zooming in still reads every point.
//!
//! Overviews are derived rows like the rest of the index: writing a point of a run marks the
//! run in `overview_pending`, and before the indexer commits it draws the overviews of the
//! marked runs that have ended ([`refresh_pending`]). Tools that write `metric_points` directly
//! (load generators, test fixtures) call [`crate::index::Index::rebuild_overviews`] afterwards.
//! This module does not draw charts or serve HTTP.

use std::collections::BTreeMap;

use sqlx::{AnyConnection, Row};

use crate::lttb;

/// Points an overview keeps of a curve at most (the dashboard draws about this many per line).
pub const OVERVIEW_POINTS: usize = 2000;

/// Curves by metric name: (step, value), sorted by step.
pub type Curves = BTreeMap<String, Vec<(u64, f64)>>;

/// Which curves of a run to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CurveNames<'a> {
    /// Every metric of the run.
    All,
    /// One metric.
    One(&'a str),
    /// The metrics whose names start with this (one layer's expert loads).
    Prefix(&'a str),
}

/// One curve's overview: the whole curve when it has at most [`OVERVIEW_POINTS`] points, else
/// that many chosen by LTTB (first and last point kept, so it spans the whole curve).
#[derive(Debug, Clone, PartialEq)]
pub struct Overview {
    /// Points in the whole curve.
    pub total: u64,
    /// The overview's points, sorted by step.
    pub points: Vec<(u64, f64)>,
}

impl Overview {
    /// Whether the overview holds every point of the curve.
    pub fn is_whole(&self) -> bool {
        self.total == self.points.len() as u64
    }

    /// The overview of `curve` (sorted by step).
    pub fn of(curve: &[(u64, f64)]) -> Overview {
        let xy: Vec<(f64, f64)> = curve.iter().map(|&(s, v)| (s as f64, v)).collect();
        let points = if curve.len() <= OVERVIEW_POINTS {
            curve.to_vec()
        } else {
            // LTTB keeps input points, so each x is a step read back exactly (steps are below
            // 2^53, as are all a run records).
            lttb::downsample(&xy, OVERVIEW_POINTS)
                .into_iter()
                .map(|(s, v)| (s as u64, v))
                .collect()
        };
        Overview {
            total: curve.len() as u64,
            points,
        }
    }
}

/// Reads the points of `run` (all metrics, one, or a prefix) with `from <= step <= to`, one row
/// per metric with its points packed as `step:value;step:value;...`, and returns them sorted by
/// step.
///
/// Why packed: sqlx hands SQLite rows from the connection's thread to the async task one at a
/// time, and 1,000 points as 1,000 rows cost ~4 ms of CPU in that hand-off (thread wake-ups and
/// per-row conversions, measured with `perf` under the web crate's load example), several times
/// the cost of drawing the charts. `string_agg` is in both PostgreSQL and SQLite (3.44+).
///
/// Values travel as text that reads back as the same `f64`. PostgreSQL prints floats in their
/// shortest exact form (sqlx sets `extra_float_digits`). SQLite's `CAST(value AS TEXT)` keeps
/// only 15 digits, so SQLite prints 17 significant digits, enough for any `f64` (the web crate's
/// tests check the round trip on both, on 5,000 values, random bit patterns, subnormals and
/// extremes).
pub(crate) async fn read_packed(
    conn: &mut AnyConnection,
    is_pg: bool,
    run: &str,
    names: CurveNames<'_>,
    from: u64,
    to: u64,
) -> Result<Curves, sqlx::Error> {
    let value = if is_pg {
        "CAST(value AS TEXT)"
    } else {
        "printf('%!.17g', value)"
    };
    // A prefix is a range of the primary key (run, name, step): names >= the prefix and below
    // the prefix with its last byte incremented.
    let one = match names {
        CurveNames::All => "",
        CurveNames::One(_) => "AND name = $4 ",
        CurveNames::Prefix(_) => "AND name >= $4 AND name < $5 ",
    };
    let sql = format!(
        "SELECT name, string_agg(CAST(step AS TEXT) || ':' || {value}, ';') AS pts \
         FROM metric_points WHERE run = $1 AND step >= $2 AND step <= $3 {one}\
         GROUP BY name ORDER BY name"
    );
    let mut query = sqlx::query(&sql)
        .bind(run.to_string())
        .bind(from.min(i64::MAX as u64) as i64)
        .bind(to.min(i64::MAX as u64) as i64);
    match names {
        CurveNames::All => {}
        CurveNames::One(n) => query = query.bind(n.to_string()),
        CurveNames::Prefix(p) => {
            let mut end = p.as_bytes().to_vec();
            match end.last_mut() {
                // ASCII below 0x7F (our names); anything else is a full scan of the run.
                Some(b) if *b < 0x7F => *b += 1,
                _ => end = vec![0x7F],
            }
            query = query
                .bind(p.to_string())
                .bind(String::from_utf8(end).unwrap_or_default());
        }
    }
    let rows = query.fetch_all(&mut *conn).await?;
    let mut out = Curves::new();
    for r in &rows {
        let name: String = r.try_get("name")?;
        let packed: String = r.try_get("pts")?;
        let mut pts = unpack(&packed).ok_or_else(|| {
            sqlx::Error::Decode(
                format!("metric {name:?} of run {run:?}: unreadable packed points").into(),
            )
        })?;
        // Sorted here rather than with `ORDER BY` in the aggregate, which costs SQLite a sort
        // per series although the primary key (run, name, step) already yields step order;
        // on sorted input this is one pass.
        pts.sort_by_key(|p| p.0);
        if let CurveNames::Prefix(p) = names
            && !name.starts_with(p)
        {
            continue;
        }
        out.insert(name, pts);
    }
    Ok(out)
}

/// The overviews of `run`'s curves by name (none for a run that has not ended or has no
/// points).
pub(crate) async fn read_overviews(
    conn: &mut AnyConnection,
    run: &str,
) -> Result<BTreeMap<String, Overview>, sqlx::Error> {
    let rows =
        sqlx::query("SELECT name, total, points FROM metric_overview WHERE run = $1 ORDER BY name")
            .bind(run.to_string())
            .fetch_all(&mut *conn)
            .await?;
    let mut out = BTreeMap::new();
    for r in &rows {
        let name: String = r.try_get("name")?;
        let total: i64 = r.try_get("total")?;
        let packed: String = r.try_get("points")?;
        let points = unpack(&packed).ok_or_else(|| {
            sqlx::Error::Decode(
                format!("overview of metric {name:?} of run {run:?}: unreadable points").into(),
            )
        })?;
        out.insert(
            name,
            Overview {
                total: total.max(0) as u64,
                points,
            },
        );
    }
    Ok(out)
}

/// Marks `run`'s overviews as out of date (its points changed).
pub(crate) async fn mark(conn: &mut AnyConnection, run: &str) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO overview_pending (run) VALUES ($1) ON CONFLICT (run) DO NOTHING")
        .bind(run.to_string())
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Marks every run that has ended (a `result` indexed).
pub(crate) async fn mark_all_ended(conn: &mut AnyConnection) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO overview_pending (run) SELECT id FROM runs WHERE result_entry IS NOT NULL \
         ON CONFLICT (run) DO NOTHING",
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Draws the overviews of the marked runs that have ended (replacing the old ones), drops the
/// overviews of marked runs that have not (a run that started again), and clears the marks.
/// Returns the runs whose overviews were drawn. Meant to run inside the indexer's transaction,
/// so the overviews commit with the points they summarise.
pub(crate) async fn refresh_pending(
    conn: &mut AnyConnection,
    is_pg: bool,
) -> Result<u64, sqlx::Error> {
    let rows = sqlx::query(
        "SELECT p.run AS run, r.result_entry AS done FROM overview_pending p \
         LEFT JOIN runs r ON r.id = p.run ORDER BY p.run",
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut drawn = 0;
    for r in &rows {
        let run: String = r.try_get("run")?;
        let done: Option<i64> = r.try_get("done")?;
        // Only the marks read here: a mark another writer adds meanwhile stays for its sync.
        for table in ["overview_pending", "metric_overview"] {
            sqlx::query(&format!("DELETE FROM {table} WHERE run = $1"))
                .bind(run.clone())
                .execute(&mut *conn)
                .await?;
        }
        if done.is_none() {
            continue;
        }
        let curves = read_packed(conn, is_pg, &run, CurveNames::All, 0, u64::MAX).await?;
        for (name, curve) in &curves {
            let o = Overview::of(curve);
            sqlx::query(
                "INSERT INTO metric_overview (run, name, total, points) VALUES ($1, $2, $3, $4)",
            )
            .bind(run.clone())
            .bind(name.clone())
            .bind(o.total as i64)
            .bind(pack(&o.points))
            .execute(&mut *conn)
            .await?;
        }
        drawn += 1;
    }
    Ok(drawn)
}

/// `step:value;...`, each value in Rust's shortest form that reads back as the same `f64`
/// (exponent notation, so 1e-300 is not 300 zeros).
fn pack(points: &[(u64, f64)]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(points.len() * 24);
    for (i, (step, value)) in points.iter().enumerate() {
        if i > 0 {
            s.push(';');
        }
        let _ = write!(s, "{step}:{value:e}");
    }
    s
}

/// Parses `step:value;step:value;...`; `None` if any part is malformed.
fn unpack(packed: &str) -> Option<Vec<(u64, f64)>> {
    packed
        .split(';')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (s, v) = p.split_once(':')?;
            Some((s.parse().ok()?, v.parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_points_read_back_bit_for_bit() {
        let pts = vec![
            (0, 0.1 + 0.2),
            (1, 1e-300),
            (2, 5e-324),
            (3, f64::MAX),
            (4, -7.25e-5),
            (5, 0.0),
            (6, -0.0),
            (7, f64::INFINITY),
        ];
        let back = unpack(&pack(&pts)).unwrap();
        let bits = |v: &[(u64, f64)]| v.iter().map(|p| (p.0, p.1.to_bits())).collect::<Vec<_>>();
        assert_eq!(bits(&back), bits(&pts));
        assert!(pack(&[(1, 1e-300)]).len() < 16, "{}", pack(&[(1, 1e-300)]));
    }

    #[test]
    fn malformed_packed_points_are_refused() {
        assert_eq!(unpack("1:2.5;3:-1e-7"), Some(vec![(1, 2.5), (3, -1e-7)]));
        assert_eq!(unpack(""), Some(vec![]));
        assert_eq!(unpack("1:2.5;x:1"), None);
        assert_eq!(unpack("1"), None);
    }

    #[test]
    fn an_overview_is_the_whole_curve_or_spans_it_and_keeps_a_spike() {
        let short: Vec<(u64, f64)> = (0..OVERVIEW_POINTS as u64).map(|s| (s, 1.0)).collect();
        let o = Overview::of(&short);
        assert!(o.is_whole());
        assert_eq!(o.points, short);
        let long: Vec<(u64, f64)> = (1..=100_000u64)
            .map(|s| (s, if s == 54_321 { 50.0 } else { 1.0 / s as f64 }))
            .collect();
        let o = Overview::of(&long);
        assert!(!o.is_whole());
        assert_eq!(o.total, 100_000);
        assert_eq!(o.points.len(), OVERVIEW_POINTS);
        assert_eq!(o.points.first(), long.first());
        assert_eq!(o.points.last(), long.last());
        assert!(o.points.contains(&(54_321, 50.0)));
    }
}
