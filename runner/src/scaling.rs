//! Scaling-law fitting: `L(C) = E + A * C^-alpha` on the final losses of a ladder's rungs
//! against their training compute, and the forecast it makes for a larger run.
//!
//! The fit is least squares in log space: with `E` fixed (the known entropy floor of a
//! synthetic source), `ln(L - E) = ln A - alpha * ln C` is an ordinary linear regression, whose
//! standard errors give the uncertainty of `A`, `alpha` and of the forecast (a prediction
//! interval of the regression, mapped back through `exp`). With `E` fitted, `E` is found by a
//! one-dimensional search over `[0, min L)` minimising the residual of `L` itself (with `A`
//! and `alpha` from the log-space line at each `E`), and the uncertainties are those of the
//! regression at that `E` (conditional on it; stated so).
//!
//! Not here: running the rungs or recording the forecast (the lab does both).

use serde::{Deserialize, Serialize};

/// A fitted power law with its uncertainty.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PowerLawFit {
    /// Irreducible loss.
    pub e: f64,
    /// Whether `e` was fixed (known floor) rather than fitted.
    pub e_fixed: bool,
    /// Scale.
    pub a: f64,
    /// Exponent.
    pub alpha: f64,
    /// Standard error of `ln A` (None with only two points: no residual degrees of freedom).
    pub se_ln_a: Option<f64>,
    /// Standard error of `alpha`.
    pub se_alpha: Option<f64>,
    /// Residual standard deviation in log space.
    pub residual_std: Option<f64>,
    /// Points fitted.
    pub n: usize,
    /// Mean and spread of `ln C` (for prediction intervals).
    mean_ln_c: f64,
    sxx: f64,
}

/// Why a fit is impossible.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FitError {
    /// Too few points.
    #[error("a scaling law needs at least 2 points (rungs); got {0}")]
    TooFewPoints(usize),
    /// A loss at or below the floor, or a non-positive compute.
    #[error("point {index} (compute {compute}, loss {loss}): {reason}")]
    BadPoint {
        /// Which point.
        index: usize,
        /// Its compute.
        compute: f64,
        /// Its loss.
        loss: f64,
        /// What is wrong.
        reason: String,
    },
    /// All points have the same compute.
    #[error("all rungs have the same compute; a power law in compute cannot be fitted")]
    SameCompute,
}

/// Linear regression y = b0 + b1 x with its standard errors.
struct Line {
    b0: f64,
    b1: f64,
    sse: f64,
    mean_x: f64,
    sxx: f64,
}

fn regress(x: &[f64], y: &[f64]) -> Line {
    let n = x.len() as f64;
    let mean_x = x.iter().sum::<f64>() / n;
    let mean_y = y.iter().sum::<f64>() / n;
    let sxx: f64 = x.iter().map(|v| (v - mean_x).powi(2)).sum();
    let sxy: f64 = x
        .iter()
        .zip(y)
        .map(|(a, b)| (a - mean_x) * (b - mean_y))
        .sum();
    let b1 = sxy / sxx;
    let b0 = mean_y - b1 * mean_x;
    let sse = x
        .iter()
        .zip(y)
        .map(|(a, b)| (b - b0 - b1 * a).powi(2))
        .sum();
    Line {
        b0,
        b1,
        sse,
        mean_x,
        sxx,
    }
}

/// Fits `points` = (compute, loss); `floor` fixes `E`, `None` fits it.
pub fn fit(points: &[(f64, f64)], floor: Option<f64>) -> Result<PowerLawFit, FitError> {
    if points.len() < 2 {
        return Err(FitError::TooFewPoints(points.len()));
    }
    let min_loss = points.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    for (i, &(c, l)) in points.iter().enumerate() {
        let bad = |reason: String| FitError::BadPoint {
            index: i,
            compute: c,
            loss: l,
            reason,
        };
        if !(c.is_finite() && c > 0.0) {
            return Err(bad("compute must be positive".into()));
        }
        if !l.is_finite() {
            return Err(bad("loss must be finite".into()));
        }
        if let Some(e) = floor
            && l <= e
        {
            return Err(bad(format!(
                "loss is not above the floor E = {e}; the power law cannot reach it"
            )));
        }
    }
    let x: Vec<f64> = points.iter().map(|p| p.0.ln()).collect();
    if x.iter().all(|v| (v - x[0]).abs() < 1e-12) {
        return Err(FitError::SameCompute);
    }
    let line_at = |e: f64| {
        let y: Vec<f64> = points.iter().map(|p| (p.1 - e).ln()).collect();
        regress(&x, &y)
    };
    let (e, line) = match floor {
        Some(e) => (e, line_at(e)),
        None => {
            // Profile E: for each E the log-space line gives A and alpha; E is chosen by the
            // residual of L itself (log-space residuals are not comparable across E: near the
            // true floor ln(L - E) spreads widely, far below it barely varies). A coarse grid
            // finds the basin, golden-section search refines it.
            let sse_lin = |e: f64| {
                let l = line_at(e);
                points
                    .iter()
                    .zip(&x)
                    .map(|(p, xi)| (p.1 - e - (l.b0 + l.b1 * xi).exp()).powi(2))
                    .sum::<f64>()
            };
            let top = min_loss * (1.0 - 1e-9);
            const GRID: usize = 400;
            let at = |i: usize| top * i as f64 / GRID as f64;
            let best = (0..GRID)
                .min_by(|&a, &b| sse_lin(at(a)).total_cmp(&sse_lin(at(b))))
                .unwrap_or(0);
            let (mut lo, mut hi) = (at(best.saturating_sub(1)), at((best + 1).min(GRID - 1)));
            let g = (5f64.sqrt() - 1.0) / 2.0;
            for _ in 0..100 {
                let m1 = hi - g * (hi - lo);
                let m2 = lo + g * (hi - lo);
                if sse_lin(m1) <= sse_lin(m2) {
                    hi = m2;
                } else {
                    lo = m1;
                }
            }
            let e = (lo + hi) / 2.0;
            (e, line_at(e))
        }
    };
    let n = points.len();
    let dof = n as isize - 2 - isize::from(floor.is_none());
    let residual_std = (dof > 0).then(|| (line.sse / dof as f64).sqrt());
    let se_alpha = residual_std.map(|s| s / line.sxx.sqrt());
    let se_ln_a =
        residual_std.map(|s| s * (1.0 / n as f64 + line.mean_x.powi(2) / line.sxx).sqrt());
    Ok(PowerLawFit {
        e,
        e_fixed: floor.is_some(),
        a: line.b0.exp(),
        alpha: -line.b1,
        se_ln_a,
        se_alpha,
        residual_std,
        n,
        mean_ln_c: line.mean_x,
        sxx: line.sxx,
    })
}

impl PowerLawFit {
    /// The forecast `L(C)`.
    pub fn predict(&self, compute: f64) -> f64 {
        self.e + self.a * compute.powf(-self.alpha)
    }

    /// A ~95% prediction interval for `L(C)` (two standard errors of a new observation in log
    /// space), when the fit has residual degrees of freedom.
    pub fn interval(&self, compute: f64) -> Option<(f64, f64)> {
        let s = self.residual_std?;
        let x = compute.ln();
        let se = s * (1.0 + 1.0 / self.n as f64 + (x - self.mean_ln_c).powi(2) / self.sxx).sqrt();
        let y = (self.a.ln()) - self.alpha * x;
        Some((self.e + (y - 2.0 * se).exp(), self.e + (y + 2.0 * se).exp()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovers_an_exact_power_law_with_a_known_floor() {
        let (e, a, alpha) = (0.7, 50.0, 0.3);
        let pts: Vec<(f64, f64)> = [1e6, 1e7, 1e8, 1e9]
            .iter()
            .map(|&c: &f64| (c, e + a * c.powf(-alpha)))
            .collect();
        let f = fit(&pts, Some(e)).unwrap();
        assert!((f.alpha - alpha).abs() < 1e-9, "{f:?}");
        assert!((f.a - a).abs() / a < 1e-9, "{f:?}");
        assert!(f.residual_std.unwrap() < 1e-9);
        assert!((f.predict(1e10) - (e + a * 1e10f64.powf(-alpha))).abs() < 1e-9);
    }

    #[test]
    fn fits_the_floor_when_it_is_unknown() {
        let (e, a, alpha) = (1.2, 8.0, 0.5);
        // Compute spans where L - E is still a fair share of L (as on a real ladder); far past
        // that, E and alpha trade off and no fit can tell them apart.
        let pts: Vec<(f64, f64)> = [1e2, 3e2, 1e3, 3e3, 1e4, 1e5]
            .iter()
            .map(|&c: &f64| (c, e + a * c.powf(-alpha)))
            .collect();
        let f = fit(&pts, None).unwrap();
        assert!((f.e - e).abs() < 1e-3, "{f:?}");
        assert!((f.alpha - alpha).abs() < 1e-2, "{f:?}");
        assert!(!f.e_fixed);
    }

    #[test]
    fn noisy_points_give_an_interval_that_contains_the_truth() {
        let (e, a, alpha) = (0.5, 20.0, 0.25);
        let noise = [1.03, 0.98, 1.01, 0.99];
        let pts: Vec<(f64, f64)> = [1e5, 1e6, 1e7, 1e8]
            .iter()
            .zip(noise)
            .map(|(&c, k): (&f64, f64)| (c, e + a * c.powf(-alpha) * k))
            .collect();
        let f = fit(&pts, Some(e)).unwrap();
        let (lo, hi) = f.interval(1e9).unwrap();
        let truth = e + a * 1e9f64.powf(-alpha);
        assert!(lo < truth && truth < hi, "{lo} < {truth} < {hi}");
        assert!(f.se_alpha.unwrap() > 0.0);
    }

    #[test]
    fn bad_points_are_refused_with_the_reason() {
        assert_eq!(fit(&[(1.0, 2.0)], None), Err(FitError::TooFewPoints(1)));
        let err = fit(&[(1e3, 0.5), (1e4, 0.4)], Some(0.45)).unwrap_err();
        assert!(err.to_string().contains("not above the floor"), "{err}");
        assert_eq!(
            fit(&[(1e3, 2.0), (1e3, 1.0)], None),
            Err(FitError::SameCompute)
        );
    }
}
