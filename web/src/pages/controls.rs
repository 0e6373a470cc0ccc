//! The chart controls of a page: the [`View`] read from the URL (`smooth`, `logy`, `x`, `from`,
//! `to`) and the form that edits it, so a view is a link that can be shared; and the markup the
//! chart script reads ([`line_figure`]: a server-drawn SVG with the lines it shows as JSON;
//! [`page_line_figure`]: the same with the lines' points in the page).
//!
//! The chart script applies every control at once and rewrites the URL; without JavaScript the
//! form reloads the page and the server-drawn charts honour the step range and log-y (smoothing
//! and the x axis need the script). This module parses and renders; it reads no data.

use maud::{Markup, PreEscaped, html};
use serde::Serialize;

use crate::error::WebError;
use glassbox_schemas::metrics::XAxis;

/// Most smoothing (an EMA weight of 1 would never move).
pub const MAX_SMOOTH: f64 = 0.999;

/// The chart view a URL asks for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct View {
    /// EMA weight, 0 (off) to [`MAX_SMOOTH`].
    pub smooth: f64,
    /// Logarithmic y.
    pub log_y: bool,
    /// What x measures.
    pub x: XAxis,
    /// First step shown.
    pub from: Option<u64>,
    /// Last step shown.
    pub to: Option<u64>,
}

impl Default for View {
    fn default() -> Self {
        View {
            smooth: 0.0,
            log_y: false,
            x: XAxis::Step,
            from: None,
            to: None,
        }
    }
}

/// The view's query parameters as the URL gives them (all text: pages flatten this into their
/// own query, and a flattened field cannot be parsed as a number by the URL decoder).
#[derive(Debug, Default, Clone, serde::Deserialize)]
pub struct ViewQuery {
    /// EMA weight.
    pub smooth: Option<String>,
    /// `1` for log-y.
    pub logy: Option<String>,
    /// `step`, `tokens`, `flops` or `time`.
    pub x: Option<String>,
    /// First step.
    pub from: Option<String>,
    /// Last step.
    pub to: Option<String>,
}

fn step(field: &str, v: Option<&str>) -> Result<Option<u64>, WebError> {
    match v.filter(|s| !s.is_empty()) {
        None => Ok(None),
        Some(s) => s.parse().map(Some).map_err(|_| {
            WebError::BadRequest(format!("{field}={s:?}: use a step number (0 or more)"))
        }),
    }
}

impl ViewQuery {
    /// The validated view; a bad value is a 400 naming the field, the value and what is
    /// accepted.
    pub fn view(&self) -> Result<View, WebError> {
        let smooth = match self.smooth.as_deref().filter(|s| !s.is_empty()) {
            None => 0.0,
            Some(s) => match s.parse::<f64>() {
                Ok(v) if (0.0..=MAX_SMOOTH).contains(&v) => v,
                _ => {
                    return Err(WebError::BadRequest(format!(
                        "smooth={s:?}: use a number from 0 (off) to {MAX_SMOOTH}"
                    )));
                }
            },
        };
        let log_y = match self.logy.as_deref() {
            None | Some("" | "0" | "false") => false,
            Some("1" | "true" | "on") => true,
            Some(other) => {
                return Err(WebError::BadRequest(format!(
                    "logy={other:?}: use 1 (logarithmic y) or 0"
                )));
            }
        };
        let x = match self.x.as_deref().filter(|s| !s.is_empty()) {
            None => XAxis::Step,
            Some(s) => XAxis::parse(s).map_err(|e| WebError::BadRequest(format!("x={e}")))?,
        };
        let (from, to) = (
            step("from", self.from.as_deref())?,
            step("to", self.to.as_deref())?,
        );
        if let (Some(a), Some(b)) = (from, to) {
            if a > b {
                return Err(WebError::BadRequest(format!("from={a} is after to={b}")));
            }
        }
        Ok(View {
            smooth,
            log_y,
            x,
            from,
            to,
        })
    }
}

impl View {
    /// A cache key part: everything that changes the HTML.
    pub fn key(&self) -> String {
        format!(
            "{}|{}|{}|{:?}|{:?}",
            self.smooth,
            self.log_y,
            self.x.name(),
            self.from,
            self.to
        )
    }
}

/// The controls form; `hidden` are the page's own parameters (the run shown, the runs
/// compared) kept across a reload.
pub fn form(view: &View, hidden: &[(&str, &str)]) -> Markup {
    html! {
        form.filters.controls #chart-controls method="get" {
            @for (k, v) in hidden { input type="hidden" name=(k) value=(v); }
            @if let Some(f) = view.from { input type="hidden" name="from" value=(f); }
            @if let Some(t) = view.to { input type="hidden" name="to" value=(t); }
            label { "Smoothing " input type="range" name="smooth" min="0" max=(MAX_SMOOTH) step="0.01" value=(view.smooth); " " output { (format!("{:.2}", view.smooth)) } }
            label { input type="checkbox" name="logy" value="1" checked[view.log_y]; " log y" }
            label { "x axis " select name="x" {
                @for a in XAxis::ALL { option value=(a.name()) selected[a == view.x] { (a.label()) } }
            } }
            button type="submit" { "Apply" }
            span.meta { "Drag across a chart to zoom (every recorded point at enough zoom), double-click to reset." }
        }
    }
}

/// One line of an interactive chart: which run's which metric, under what legend label.
#[derive(Debug, Clone, Serialize)]
pub struct LineRef<'a> {
    /// Run id.
    pub run: &'a str,
    /// Metric name.
    pub name: &'a str,
    /// Legend label.
    pub label: &'a str,
    /// The run's training FLOPs per token (x by FLOPs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flops_per_token: Option<f64>,
}

/// A line chart: the server-drawn `svg` (shown without JavaScript and until the script has
/// drawn) in a figure that tells the chart script what to fetch, and which notes and
/// anomalies (`marks`, by step) it draws over the lines.
pub fn line_figure(
    title: &str,
    unit: &str,
    lines: &[LineRef<'_>],
    marks: &[crate::chart::Mark],
    svg: &str,
) -> Markup {
    let series = serde_json::to_string(lines).unwrap_or_else(|_| "[]".into());
    let marks = (!marks.is_empty()).then(|| serde_json::to_string(marks).unwrap_or_default());
    html! {
        figure.chart data-title=(title) data-unit=(unit) data-series=(series) data-marks=[marks] { (PreEscaped(svg)) }
    }
}

/// A line whose points are in the page (an evaluation's results at a few snapshots): the chart
/// script draws it like a fetched line — x by step, tokens, FLOPs or time through the run's
/// own counters, log y, the page's step range — with a marker at each point, never smoothed.
#[derive(Debug, Clone, Serialize)]
pub struct PageLine<'a> {
    /// Run id (whose counters map steps to tokens, FLOPs and time).
    pub run: &'a str,
    /// Legend label.
    pub label: &'a str,
    /// The run's training FLOPs per token (x by FLOPs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flops_per_token: Option<f64>,
    /// `[step, value]` pairs, by step.
    pub points: Vec<(u64, f64)>,
    /// Draw a marker at each point.
    pub markers: bool,
}

/// A chart of [`PageLine`]s: the server-drawn `svg` in a figure the chart script redraws from
/// the points it carries.
pub fn page_line_figure(title: &str, unit: &str, lines: &[PageLine<'_>], svg: &str) -> Markup {
    let series = serde_json::to_string(lines).unwrap_or_else(|_| "[]".into());
    html! {
        figure.chart data-title=(title) data-unit=(unit) data-series=(series) { (PreEscaped(svg)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(smooth: Option<&str>, logy: Option<&str>, x: Option<&str>) -> ViewQuery {
        ViewQuery {
            smooth: smooth.map(str::to_string),
            logy: logy.map(str::to_string),
            x: x.map(str::to_string),
            from: None,
            to: None,
        }
    }

    #[test]
    fn views_parse_and_bad_values_name_the_field() {
        let v = q(Some("0.6"), Some("1"), Some("flops")).view().unwrap();
        assert_eq!((v.smooth, v.log_y, v.x), (0.6, true, XAxis::Flops));
        assert_eq!(q(None, None, None).view().unwrap(), View::default());
        for (bad, field) in [
            (q(Some("1.5"), None, None), "smooth=\"1.5\""),
            (q(Some("x"), None, None), "smooth=\"x\""),
            (q(None, Some("yes"), None), "logy=\"yes\""),
            (q(None, None, Some("epochs")), "x=\"epochs\""),
        ] {
            let e = bad.view().unwrap_err().to_string();
            assert!(e.contains(field), "{e}");
        }
        let backwards = ViewQuery {
            from: Some("9".into()),
            to: Some("3".into()),
            ..ViewQuery::default()
        };
        assert!(backwards.view().is_err());
        let junk = ViewQuery {
            to: Some("-1".into()),
            ..ViewQuery::default()
        };
        assert!(junk.view().unwrap_err().to_string().contains("to=\"-1\""));
    }
}
