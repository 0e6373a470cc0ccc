//! [`SeriesCache`]: whole metric series of finished runs kept in memory, so zooming a chart
//! (a range of a series, downsampled to the chart's width) does not read a million points from
//! the index on every drag.
//!
//! A finished run's series changes only when an entry about the run is indexed; each series is
//! stored with the index position of the last such entry (`CatalogData::touched_runs`) and
//! served only while it matches. Running runs are not cached (their points arrive live).
//! Memory is bounded by points: at most `max_points` over all series ([`DEFAULT_MAX_POINTS`],
//! 4M points, 64 MiB), least recently used evicted first; a series over half the cap is not
//! kept. This module knows nothing of SQL or HTTP.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// The server's cap on cached points (16 bytes each).
pub const DEFAULT_MAX_POINTS: usize = 4 << 20;

/// A series: (step, value), sorted by step.
pub type Points = Arc<Vec<(u64, f64)>>;

/// Whole series by (run, metric).
#[derive(Debug)]
pub struct SeriesCache {
    max_points: usize,
    inner: Mutex<Lru>,
}

#[derive(Debug, Default)]
struct Lru {
    entries: HashMap<(String, String), (u64, Points, u64)>,
    order: BTreeMap<u64, (String, String)>,
    points: usize,
    clock: u64,
}

impl SeriesCache {
    /// An empty cache of at most `max_points` points.
    pub fn new(max_points: usize) -> Self {
        SeriesCache {
            max_points,
            inner: Mutex::new(Lru::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lru> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The series stored for (`run`, `name`) at index position `touched`.
    pub fn get(&self, run: &str, name: &str, touched: u64) -> Option<Points> {
        let mut lru = self.lock();
        let key = (run.to_string(), name.to_string());
        let (at, pts, used) = lru.entries.get(&key)?.clone();
        if at != touched {
            return None;
        }
        lru.clock += 1;
        let now = lru.clock;
        lru.order.remove(&used);
        lru.order.insert(now, key.clone());
        if let Some(e) = lru.entries.get_mut(&key) {
            e.2 = now;
        }
        Some(pts)
    }

    /// Stores a whole series read at index position `touched`.
    pub fn put(&self, run: &str, name: &str, touched: u64, pts: Points) {
        let key = (run.to_string(), name.to_string());
        let mut lru = self.lock();
        if let Some((_, old, used)) = lru.entries.remove(&key) {
            lru.order.remove(&used);
            lru.points -= old.len();
        }
        if pts.len() > self.max_points / 2 {
            return;
        }
        while lru.points + pts.len() > self.max_points {
            let Some((_, oldest)) = lru.order.pop_first() else {
                break;
            };
            if let Some((_, old, _)) = lru.entries.remove(&oldest) {
                lru.points -= old.len();
            }
        }
        lru.clock += 1;
        let now = lru.clock;
        lru.points += pts.len();
        lru.order.insert(now, key.clone());
        lru.entries.insert(key, (touched, pts, now));
    }

    /// Series held and their points.
    pub fn size(&self) -> (usize, usize) {
        let lru = self.lock();
        (lru.entries.len(), lru.points)
    }
}

/// The points of `pts` with `from <= step <= to` (binary search on the sorted steps).
pub fn range(pts: &[(u64, f64)], from: u64, to: u64) -> &[(u64, f64)] {
    let a = pts.partition_point(|p| p.0 < from);
    let b = pts.partition_point(|p| p.0 <= to);
    &pts[a..b.max(a)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(n: u64) -> Points {
        Arc::new((0..n).map(|s| (s, s as f64)).collect())
    }

    #[test]
    fn stale_positions_miss_and_the_cap_evicts_the_least_recent() {
        let c = SeriesCache::new(100);
        c.put("r", "a", 5, series(40));
        c.put("r", "b", 5, series(40));
        assert!(c.get("r", "a", 5).is_some()); // b is now the least recent
        assert!(c.get("r", "a", 6).is_none(), "indexed since");
        c.put("r", "c", 5, series(40));
        assert!(c.get("r", "b", 5).is_none(), "b evicted");
        assert_eq!(c.size(), (2, 80));
        c.put("r", "big", 5, series(51));
        assert!(c.get("r", "big", 5).is_none(), "over half the cap");
        c.put("r", "a", 6, series(10));
        assert_eq!(c.size(), (2, 50), "replaced, not counted twice");
    }

    #[test]
    fn ranges_are_inclusive() {
        let pts: Vec<(u64, f64)> = [(1, 0.0), (5, 0.0), (9, 0.0)].into();
        assert_eq!(range(&pts, 5, 9).len(), 2);
        assert_eq!(range(&pts, 2, 4).len(), 0);
        assert_eq!(range(&pts, 0, u64::MAX).len(), 3);
        assert_eq!(range(&pts, 9, 1).len(), 0);
    }
}
