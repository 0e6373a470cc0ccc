//! Largest-Triangle-Three-Buckets downsampling (Steinarsson 2013, "Downsampling Time Series
//! for Visual Representation", ch. 4.2): picks `threshold` of `n` points so a line drawn through
//! them looks like the line through all of them. Spikes survive (a norm spike is a large
//! triangle), which plain striding or averaging would hide.
//!
//! The first and last points are always kept. The `n - 2` inner points are split into
//! `threshold - 2` equal buckets; from each bucket the point forming the largest triangle with
//! the point kept from the previous bucket and the average of the next bucket is kept. O(n).
//! Non-finite values are dropped before sampling (they cannot be drawn). This module knows
//! nothing of metrics or charts.

/// Downsamples `points` (sorted by x) to at most `threshold` points. A `threshold` below 3, or
/// at least the number of points, returns the points unchanged (less non-finite ones).
pub fn downsample(points: &[(f64, f64)], threshold: usize) -> Vec<(f64, f64)> {
    let finite: Vec<(f64, f64)>;
    let data: &[(f64, f64)] = if points.iter().all(|p| p.0.is_finite() && p.1.is_finite()) {
        points
    } else {
        finite = points
            .iter()
            .copied()
            .filter(|p| p.0.is_finite() && p.1.is_finite())
            .collect();
        &finite
    };
    let n = data.len();
    if threshold < 3 || n <= threshold {
        return data.to_vec();
    }
    let mut out = Vec::with_capacity(threshold);
    out.push(data[0]);
    // Bucket width over the inner points.
    let every = (n - 2) as f64 / (threshold - 2) as f64;
    let mut a = 0usize; // index of the point kept last
    for i in 0..threshold - 2 {
        // This bucket: [start, end); the next bucket: [end, next_end).
        let start = (i as f64 * every).floor() as usize + 1;
        let end = (((i + 1) as f64 * every).floor() as usize + 1).min(n - 1);
        let next_end = (((i + 2) as f64 * every).floor() as usize + 1).min(n);
        let (avg_x, avg_y) = if end < next_end {
            let m = (next_end - end) as f64;
            let (sx, sy) = data[end..next_end]
                .iter()
                .fold((0.0, 0.0), |(sx, sy), p| (sx + p.0, sy + p.1));
            (sx / m, sy / m)
        } else {
            data[n - 1]
        };
        let (ax, ay) = data[a];
        let mut best = start;
        let mut best_area = -1.0;
        for (j, &(bx, by)) in data.iter().enumerate().take(end.max(start + 1)).skip(start) {
            // Twice the triangle's area; the factor does not change the argmax.
            let area = ((ax - avg_x) * (by - ay) - (ax - bx) * (avg_y - ay)).abs();
            if area > best_area {
                best_area = area;
                best = j;
            }
        }
        out.push(data[best]);
        a = best;
    }
    out.push(data[n - 1]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_series_are_unchanged() {
        let pts: Vec<_> = (0..10).map(|i| (i as f64, (i * i) as f64)).collect();
        assert_eq!(downsample(&pts, 10), pts);
        assert_eq!(downsample(&pts, 2000), pts);
        assert_eq!(downsample(&pts, 2), pts);
    }

    #[test]
    fn keeps_threshold_points_with_ends_and_order() {
        let pts: Vec<_> = (0..100_000)
            .map(|i| (i as f64, (i as f64 / 1000.0).sin()))
            .collect();
        let out = downsample(&pts, 2000);
        assert_eq!(out.len(), 2000);
        assert_eq!(out[0], pts[0]);
        assert_eq!(out[1999], pts[99_999]);
        assert!(
            out.windows(2).all(|w| w[0].0 < w[1].0),
            "x strictly increasing"
        );
    }

    #[test]
    fn a_single_spike_survives() {
        // A flat series with one spike at step 54_321: striding by 50 would miss it.
        let mut pts: Vec<_> = (0..100_000).map(|i| (i as f64, 1.0)).collect();
        pts[54_321].1 = 50.0;
        let out = downsample(&pts, 2000);
        assert!(out.contains(&(54_321.0, 50.0)));
    }

    #[test]
    fn non_finite_values_are_dropped() {
        let pts = vec![
            (0.0, 1.0),
            (1.0, f64::NAN),
            (2.0, f64::INFINITY),
            (3.0, 2.0),
        ];
        assert_eq!(downsample(&pts, 100), vec![(0.0, 1.0), (3.0, 2.0)]);
    }

    #[test]
    fn matches_the_reference_on_a_small_case() {
        // Worked by hand: 7 points to 4. Buckets of the 5 inner points: [1,3), [3,6).
        let pts = [
            (0.0, 0.0),
            (1.0, 5.0),
            (2.0, 1.0),
            (3.0, 1.0),
            (4.0, -6.0),
            (5.0, 1.0),
            (6.0, 0.0),
        ];
        let out = downsample(&pts, 4);
        assert_eq!(out, vec![(0.0, 0.0), (1.0, 5.0), (4.0, -6.0), (6.0, 0.0)]);
    }
}
