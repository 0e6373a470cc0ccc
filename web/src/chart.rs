//! Server-side charts: plotters draws each chart as an SVG string that pages inline.
//!
//! [`line_chart`] overlays several lines (already downsampled by the caller); [`scatter_chart`]
//! draws labelled points, a series either connected in x order (a Pareto frontier) or not;
//! [`heatmap`] draws a matrix such as expert load over steps. Hover: after plotters has drawn the chart, up to
//! [`HOVER_POINTS`] points per line get an invisible circle at the position plotters mapped them
//! to, with an SVG `<title>` giving the line, step and value, which browsers show as a tooltip
//! without any script. Logarithmic axes plot `log10` of the values on a linear axis and label
//! the ticks with the original values.
//!
//! Every label that can come from a user (run ids, metric names) is escaped here before it
//! reaches the SVG text. This module knows nothing of runs, the index or HTTP.

use std::fmt::Write as _;

use plotters::prelude::*;

/// Size of a line chart in pixels.
pub const LINE_SIZE: (u32, u32) = (720, 260);
/// Points a server-drawn line keeps at most: two per horizontal pixel, where a line through
/// LTTB's choice looks like the line through every point (the chart script draws the API's
/// points on top once it runs).
pub const SVG_POINTS_PER_LINE: usize = 2 * LINE_SIZE.0 as usize;
/// Hover targets per line at most: one every 15 pixels of a 720-pixel chart, each 10 pixels
/// across. They are the no-script tooltips; with the script, the chart's own crosshair reads
/// every point. They were 120, and made 42% of a 12-chart page's bytes and most of its nodes.
pub const HOVER_POINTS: usize = 48;

/// Tableau 10: distinguishable, colour-blind friendlier than the plotters palette.
const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// One line of a chart.
#[derive(Debug, Clone)]
pub struct Line {
    /// Legend text.
    pub label: String,
    /// (x, y), sorted by x.
    pub points: Vec<(f64, f64)>,
    /// Draw points as markers as well (a handful of points, e.g. ladder rungs).
    pub markers: bool,
}

/// Axis options.
#[derive(Debug, Clone, Default)]
pub struct Axes {
    /// X axis description.
    pub x_desc: String,
    /// Y axis description.
    pub y_desc: String,
    /// Logarithmic x.
    pub log_x: bool,
    /// Logarithmic y.
    pub log_y: bool,
    /// Fixed x range (so charts of one run line up step for step).
    pub x_range: Option<(f64, f64)>,
    /// Bands or lines over x ranges (a run's notes and anomalies), drawn under the lines.
    pub marks: Vec<Mark>,
}

/// A marked x range: a band, or a line where it is one step wide. Its label is the tooltip.
/// Serialized (as steps) into the figure's `data-marks` for the chart script to draw too.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Mark {
    /// First x.
    pub from: f64,
    /// Last x (equal to `from` for a single step).
    pub to: f64,
    /// Tooltip text (escaped here).
    pub label: String,
    /// An anomaly (red) rather than a person's note (purple).
    pub anomaly: bool,
}

/// Escapes text for XML character data and attribute values.
pub fn escape_xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

/// A small SVG saying why there is no chart.
pub fn placeholder(title: &str, message: &str) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"60\" viewBox=\"0 0 {w} 60\" class=\"chart-empty\"><text x=\"10\" y=\"24\" font-family=\"sans-serif\" font-size=\"14\">{}</text><text x=\"10\" y=\"46\" font-family=\"sans-serif\" font-size=\"12\" fill=\"#666\">{}</text></svg>",
        escape_xml(title),
        escape_xml(message),
        w = LINE_SIZE.0
    )
}

fn fmt_tick(v: f64, log: bool) -> String {
    let v = if log { 10f64.powf(v) } else { v };
    let a = v.abs();
    if v == 0.0 {
        "0".into()
    } else if !(1e-3..1e5).contains(&a) {
        format!("{v:.1e}")
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
}

fn fmt_value(v: f64) -> String {
    let a = v.abs();
    if v != 0.0 && !(1e-3..1e6).contains(&a) {
        format!("{v:.4e}")
    } else {
        format!("{v:.5}")
    }
}

fn padded(lo: f64, hi: f64) -> (f64, f64) {
    if !(lo.is_finite() && hi.is_finite()) {
        return (0.0, 1.0);
    }
    if hi - lo < 1e-12 {
        let d = if lo.abs() > 1e-9 {
            lo.abs() * 0.05
        } else {
            1.0
        };
        return (lo - d, hi + d);
    }
    let d = (hi - lo) * 0.05;
    (lo - d, hi + d)
}

/// Draws `lines` overlaid on one chart; returns the SVG text.
pub fn line_chart(title: &str, lines: &[Line], axes: &Axes) -> String {
    let tx = |x: f64| if axes.log_x { x.log10() } else { x };
    let ty = |y: f64| if axes.log_y { y.log10() } else { y };
    // (label, transformed points, markers)
    type Drawn = (String, Vec<(f64, f64)>, bool);
    let lines: Vec<Drawn> = lines
        .iter()
        .map(|l| {
            (
                l.label.clone(),
                l.points
                    .iter()
                    .map(|&(x, y)| (tx(x), ty(y)))
                    .filter(|(x, y)| x.is_finite() && y.is_finite())
                    .collect::<Vec<_>>(),
                l.markers,
            )
        })
        .filter(|l| !l.1.is_empty())
        .collect();
    if lines.is_empty() {
        return placeholder(title, "no data yet");
    }
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (_, pts, _) in &lines {
        for &(x, y) in pts {
            x0 = x0.min(x);
            x1 = x1.max(x);
            y0 = y0.min(y);
            y1 = y1.max(y);
        }
    }
    if let Some((a, b)) = axes.x_range {
        if a.is_finite() && b.is_finite() && b > a {
            (x0, x1) = (tx(a), tx(b));
        }
    }
    let (x0, x1) = if x1 - x0 < 1e-12 {
        padded(x0, x1)
    } else {
        (x0, x1)
    };
    let (y0, y1) = padded(y0, y1);
    let mut svg = String::new();
    let mut hover = String::new();
    let drawn = (|| -> Result<(), Box<dyn std::error::Error + '_>> {
        let root = SVGBackend::with_string(&mut svg, LINE_SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(escape_xml(title), ("sans-serif", 15))
            .margin(8)
            .x_label_area_size(34)
            .y_label_area_size(64)
            .build_cartesian_2d(x0..x1, y0..y1)?;
        let (lx, ly) = (axes.log_x, axes.log_y);
        let integer_x = axes.x_desc == "step";
        chart
            .configure_mesh()
            // Major grid lines only: minor ones multiply the SVG's size and drawing time by ~10
            // and add little to a dashboard chart.
            .x_max_light_lines(0)
            .y_max_light_lines(0)
            .bold_line_style(RGBColor(225, 225, 225))
            .x_desc(escape_xml(&axes.x_desc))
            .y_desc(escape_xml(&axes.y_desc))
            .x_labels(8)
            .y_labels(6)
            .x_label_formatter(&|v| {
                if integer_x {
                    format!("{v:.0}")
                } else {
                    fmt_tick(*v, lx)
                }
            })
            .y_label_formatter(&|v| fmt_tick(*v, ly))
            .label_style(("sans-serif", 11))
            .draw()?;
        for m in &axes.marks {
            let (a, b) = (tx(m.from), tx(m.to.max(m.from)));
            if !(a.is_finite() && b.is_finite()) || b < x0 || a > x1 {
                continue;
            }
            let (a, b) = (a.max(x0), b.min(x1));
            let (color, class) = if m.anomaly {
                (RGBColor(214, 39, 40), "mark anomaly")
            } else {
                (RGBColor(148, 103, 189), "mark annotation")
            };
            if b - a < (x1 - x0) * 0.004 {
                chart.draw_series(std::iter::once(PathElement::new(
                    vec![(a, y0), (a, y1)],
                    color.mix(0.8).stroke_width(2),
                )))?;
            } else {
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(a, y0), (b, y1)],
                    color.mix(0.18).filled(),
                )))?;
            }
            let (px0, py0) = chart.backend_coord(&(a, y1));
            let (px1, py1) = chart.backend_coord(&(b, y0));
            let _ = write!(
                hover,
                "<rect class=\"{class}\" x=\"{}\" y=\"{py0}\" width=\"{}\" height=\"{}\" fill=\"transparent\"><title>{}</title></rect>",
                px0 - 3,
                (px1 - px0).max(0) + 6,
                (py1 - py0).max(1),
                escape_xml(&m.label)
            );
        }
        for (i, (label, pts, markers)) in lines.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))?
                .label(escape_xml(label))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                });
            if *markers {
                chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
            }
            let stride = pts.len().div_ceil(HOVER_POINTS).max(1);
            for (k, &(x, y)) in pts.iter().enumerate() {
                if k % stride != 0 && k + 1 != pts.len() {
                    continue;
                }
                let (px, py) = chart.backend_coord(&(x, y));
                let xv = if lx { 10f64.powf(x) } else { x };
                let yv = if ly { 10f64.powf(y) } else { y };
                let xs = if lx || xv.fract() != 0.0 {
                    fmt_value(xv)
                } else if xv.is_sign_positive() && xv < 9.0e15 {
                    // An integral step below 2^53 is exactly that integer; printing it as one
                    // gives the same text as `{:.0}` at a fraction of the cost.
                    (xv as i64).to_string()
                } else {
                    format!("{xv:.0}")
                };
                let _ = write!(
                    hover,
                    "<circle class=\"hp\" cx=\"{px}\" cy=\"{py}\" r=\"5\"><title>{}: {} {}, value {}</title></circle>",
                    escape_xml(label),
                    escape_xml(&axes.x_desc),
                    xs,
                    fmt_value(yv)
                );
            }
        }
        if lines.len() > 1 {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.85))
                .border_style(RGBColor(200, 200, 200))
                .label_font(("sans-serif", 11))
                .draw()?;
        }
        root.present()?;
        Ok(())
    })();
    if let Err(e) = drawn {
        return placeholder(title, &format!("chart could not be drawn: {e}"));
    }
    with_hover(svg, &hover)
}

/// One series of a [`scatter_chart`]: points that each say what they are.
#[derive(Debug, Clone)]
pub struct Scatter {
    /// Legend text.
    pub label: String,
    /// (x, y, what the point is: its hover text's start), in any order.
    pub points: Vec<(f64, f64, String)>,
    /// Join the points in x order with a line (a frontier), or draw them alone (hollow).
    pub connect: bool,
}

/// Draws labelled points; returns the SVG text. Each point's hover title reads
/// `{point}: {x_desc} x, {y_desc} y`.
pub fn scatter_chart(title: &str, series: &[Scatter], axes: &Axes) -> String {
    let tx = |x: f64| if axes.log_x { x.log10() } else { x };
    let ty = |y: f64| if axes.log_y { y.log10() } else { y };
    // (series, its transformed points with their hover text)
    type Drawn<'a> = (&'a Scatter, Vec<(f64, f64, &'a str)>);
    let series: Vec<Drawn> = series
        .iter()
        .map(|s| {
            let mut pts: Vec<(f64, f64, &str)> = s
                .points
                .iter()
                .map(|(x, y, l)| (tx(*x), ty(*y), l.as_str()))
                .filter(|(x, y, _)| x.is_finite() && y.is_finite())
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            (s, pts)
        })
        .filter(|(_, pts)| !pts.is_empty())
        .collect();
    if series.is_empty() {
        return placeholder(title, "no points yet");
    }
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (_, pts) in &series {
        for &(x, y, _) in pts {
            x0 = x0.min(x);
            x1 = x1.max(x);
            y0 = y0.min(y);
            y1 = y1.max(y);
        }
    }
    // Points sit inside the frame, never on its edge.
    let (x0, x1) = padded(x0, x1);
    let (y0, y1) = padded(y0, y1);
    let mut svg = String::new();
    let mut hover = String::new();
    let drawn = (|| -> Result<(), Box<dyn std::error::Error + '_>> {
        let root = SVGBackend::with_string(&mut svg, LINE_SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(escape_xml(title), ("sans-serif", 15))
            .margin(8)
            .x_label_area_size(34)
            .y_label_area_size(64)
            .build_cartesian_2d(x0..x1, y0..y1)?;
        let (lx, ly) = (axes.log_x, axes.log_y);
        chart
            .configure_mesh()
            .x_max_light_lines(0)
            .y_max_light_lines(0)
            .bold_line_style(RGBColor(225, 225, 225))
            .x_desc(escape_xml(&axes.x_desc))
            .y_desc(escape_xml(&axes.y_desc))
            .x_labels(8)
            .y_labels(6)
            .x_label_formatter(&|v| fmt_tick(*v, lx))
            .y_label_formatter(&|v| fmt_tick(*v, ly))
            .label_style(("sans-serif", 11))
            .draw()?;
        for (i, (s, pts)) in series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let xy = || pts.iter().map(|&(x, y, _)| (x, y));
            if s.connect {
                chart
                    .draw_series(LineSeries::new(xy(), color.stroke_width(2)))?
                    .label(escape_xml(&s.label))
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                    });
                chart.draw_series(xy().map(|p| Circle::new(p, 5, color.filled())))?;
            } else {
                chart
                    .draw_series(xy().map(|p| Circle::new(p, 5, color.stroke_width(2))))?
                    .label(escape_xml(&s.label))
                    .legend(move |(x, y)| Circle::new((x + 8, y), 4, color.stroke_width(2)));
            }
            for &(x, y, what) in pts {
                let (px, py) = chart.backend_coord(&(x, y));
                let xv = if lx { 10f64.powf(x) } else { x };
                let yv = if ly { 10f64.powf(y) } else { y };
                let _ = write!(
                    hover,
                    "<circle class=\"hp\" cx=\"{px}\" cy=\"{py}\" r=\"6\"><title>{}: {} {}, {} {}</title></circle>",
                    escape_xml(what),
                    escape_xml(&axes.x_desc),
                    fmt_value(xv),
                    escape_xml(&axes.y_desc),
                    fmt_value(yv)
                );
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(200, 200, 200))
            .label_font(("sans-serif", 11))
            .draw()?;
        root.present()?;
        Ok(())
    })();
    if let Err(e) = drawn {
        return placeholder(title, &format!("chart could not be drawn: {e}"));
    }
    with_hover(svg, &hover)
}

fn with_hover(mut svg: String, hover: &str) -> String {
    if let Some(end) = svg.rfind("</svg>") {
        svg.insert_str(end, &format!("<g class=\"hover\">{hover}</g>"));
    }
    svg
}

/// Viridis at five stops, linearly interpolated: perceptually ordered and colour-blind safe.
fn viridis(t: f64) -> RGBColor {
    const STOPS: [(f64, f64, f64); 5] = [
        (68.0, 1.0, 84.0),
        (59.0, 82.0, 139.0),
        (33.0, 145.0, 140.0),
        (94.0, 201.0, 98.0),
        (253.0, 231.0, 37.0),
    ];
    let t = if t.is_finite() {
        t.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let f = t * 4.0;
    let i = (f.floor() as usize).min(3);
    let u = f - i as f64;
    let (a, b) = (STOPS[i], STOPS[i + 1]);
    let mix = |p: f64, q: f64| (p + (q - p) * u).round() as u8;
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

/// A heatmap of `columns` (each `(x from, x to, one value per row)`): a labelled tick per row
/// (every row up to 32, then every second or fourth), axes and labels at a readable size, and a
/// colour bar with its scale on the right. `scale` fixes the colours' range (one scale across
/// several heatmaps, e.g. every layer of a run); without it the values' own range is used.
/// Cells overlap their neighbours by a hair so anti-aliasing leaves no white seams.
pub fn heatmap(
    title: &str,
    row_desc: &str,
    hover_prefix: &str,
    value_desc: &str,
    columns: &[(f64, f64, Vec<f64>)],
    scale: Option<(f64, f64)>,
) -> String {
    let rows = columns.iter().map(|c| c.2.len()).max().unwrap_or(0);
    if columns.is_empty() || rows == 0 {
        return placeholder(title, "no data yet");
    }
    let (mut lo, mut hi) = (f64::MAX, f64::MIN);
    for (_, _, vals) in columns {
        for &v in vals.iter().filter(|v| v.is_finite()) {
            lo = lo.min(v);
            hi = hi.max(v);
        }
    }
    if lo > hi {
        return placeholder(title, "no finite values");
    }
    if let Some((a, b)) = scale.filter(|(a, b)| a.is_finite() && b.is_finite() && a <= b) {
        (lo, hi) = (a, b);
    }
    let span = if hi - lo < 1e-12 { 1.0 } else { hi - lo };
    let x0 = columns.first().map(|c| c.0).unwrap_or(0.0);
    let x1 = columns.last().map(|c| c.1).unwrap_or(1.0).max(x0 + 1.0);
    let height = (90 + rows as u32 * 16).clamp(180, 560);
    let label_every = rows.div_ceil(32).next_power_of_two().max(1);
    let seam = (x1 - x0) * 0.002;
    let mut svg = String::new();
    let mut hover = String::new();
    let drawn = (|| -> Result<(), Box<dyn std::error::Error + '_>> {
        let root = SVGBackend::with_string(&mut svg, (LINE_SIZE.0, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let (plot_area, bar_area) = root.split_horizontally(LINE_SIZE.0 - 96);
        let mut chart = ChartBuilder::on(&plot_area)
            .caption(escape_xml(title), ("sans-serif", 19))
            .margin(8)
            .x_label_area_size(40)
            .y_label_area_size(58)
            .build_cartesian_2d(x0..x1, 0f64..rows as f64)?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc("step")
            .y_desc(escape_xml(row_desc))
            .x_labels(8)
            .y_labels(0)
            .x_label_formatter(&|v| format!("{v:.0}"))
            .label_style(("sans-serif", 16))
            .axis_desc_style(("sans-serif", 17))
            .draw()?;
        // Each cell reaches the next column's start (and a hair beyond), so no background
        // shows between them.
        let ends: Vec<f64> = columns
            .iter()
            .enumerate()
            .map(|(k, c)| columns.get(k + 1).map_or(c.1, |n| n.0.max(c.1)) + seam)
            .collect();
        chart.draw_series(columns.iter().zip(&ends).flat_map(|((a, _, vals), end)| {
            vals.iter()
                .enumerate()
                .filter(|(_, v)| v.is_finite())
                .map(move |(r, &v)| {
                    Rectangle::new(
                        [
                            (*a, r as f64),
                            (end.min(x1), (r as f64 + 1.02).min(rows as f64)),
                        ],
                        viridis(((v - lo) / span).clamp(0.0, 1.0)).filled(),
                    )
                })
        }))?;
        // A tick and a label per row (per second or fourth row past 32).
        // plotters' SVG text comes out at about 0.8 of the size asked for: these read as 13 px.
        let tick = ("sans-serif", 16).into_font().color(&BLACK);
        for r in (0..rows).filter(|r| r % label_every == 0) {
            let (px, py) = chart.backend_coord(&(x0, r as f64 + 0.5));
            plot_area.draw(&PathElement::new(vec![(px - 5, py), (px, py)], BLACK))?;
            plot_area.draw(&Text::new(
                format!("{r}"),
                (px - 8, py),
                tick.clone().pos(plotters::style::text_anchor::Pos::new(
                    plotters::style::text_anchor::HPos::Right,
                    plotters::style::text_anchor::VPos::Center,
                )),
            ))?;
        }
        // The colour bar: the scale from `lo` (bottom) to `hi` (top), with its ends and middle.
        let (top, bottom) = (40i32, height as i32 - 48);
        let steps = 48;
        for k in 0..steps {
            let y0 = bottom - (bottom - top) * (k + 1) / steps;
            let y1 = bottom - (bottom - top) * k / steps + 1;
            bar_area.draw(&Rectangle::new(
                [(10, y0), (28, y1)],
                viridis((k as f64 + 0.5) / steps as f64).filled(),
            ))?;
        }
        bar_area.draw(&Rectangle::new(
            [(10, top), (28, bottom)],
            BLACK.stroke_width(1),
        ))?;
        let small = ("sans-serif", 15).into_font().color(&BLACK);
        for (t, v) in [(0.0, lo), (0.5, lo + span / 2.0), (1.0, hi)] {
            let y = bottom - ((bottom - top) as f64 * t) as i32;
            bar_area.draw(&Text::new(
                fmt_value(v),
                (32, y),
                small.clone().pos(plotters::style::text_anchor::Pos::new(
                    plotters::style::text_anchor::HPos::Left,
                    plotters::style::text_anchor::VPos::Center,
                )),
            ))?;
        }
        // The scale's name above the bar, on two lines when it is more than one word.
        let words: Vec<&str> = value_desc.split(' ').collect();
        let half = words.len().div_ceil(2);
        let lines = [words[..half].join(" "), words[half..].join(" ")];
        for (k, line) in lines.iter().filter(|l| !l.is_empty()).enumerate() {
            bar_area.draw(&Text::new(
                escape_xml(line),
                (4, top - 30 + 14 * k as i32),
                small.clone(),
            ))?;
        }
        let stride = columns.len().div_ceil(40).max(1);
        for (k, (a, b, vals)) in columns.iter().enumerate() {
            if k % stride != 0 {
                continue;
            }
            for (r, v) in vals.iter().enumerate() {
                let (px, py) = chart.backend_coord(&((a + b) / 2.0, r as f64 + 0.5));
                let _ = write!(
                    hover,
                    "<circle class=\"hp\" cx=\"{px}\" cy=\"{py}\" r=\"5\"><title>{}{} {r}, steps {:.0}-{:.0}: {} {}</title></circle>",
                    escape_xml(hover_prefix),
                    escape_xml(row_desc),
                    a,
                    b,
                    escape_xml(value_desc),
                    fmt_value(*v)
                );
            }
        }
        root.present()?;
        Ok(())
    })();
    if let Err(e) = drawn {
        return placeholder(title, &format!("chart could not be drawn: {e}"));
    }
    with_hover(svg, &hover)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_chart_is_svg_with_hover_titles_and_escaped_labels() {
        let svg = line_chart(
            "loss <b>",
            &[Line {
                label: "run<script>".into(),
                points: (0..50)
                    .map(|i| (i as f64, 1.0 / (1.0 + i as f64)))
                    .collect(),
                markers: false,
            }],
            &Axes {
                x_desc: "step".into(),
                y_desc: "nats".into(),
                ..Axes::default()
            },
        );
        assert!(svg.starts_with("<svg"), "{}", &svg[..80]);
        assert!(
            svg.contains("<polyline") || svg.contains("<path"),
            "a line is drawn"
        );
        assert!(svg.contains("<title>run&lt;script&gt;: step 49, value"));
        assert!(!svg.contains("<script>"));
        assert!(!svg.contains("<b>"));
    }

    #[test]
    fn empty_and_degenerate_inputs_do_not_panic() {
        assert!(line_chart("x", &[], &Axes::default()).contains("no data yet"));
        let one = line_chart(
            "x",
            &[Line {
                label: "a".into(),
                points: vec![(5.0, 2.0)],
                markers: true,
            }],
            &Axes {
                log_x: true,
                log_y: true,
                ..Axes::default()
            },
        );
        assert!(one.starts_with("<svg"));
        assert!(heatmap("h", "expert", "", "load", &[], None).contains("no data yet"));
        let h = heatmap(
            "h",
            "expert",
            "layer 2, ",
            "load",
            &[(0.0, 10.0, vec![0.25, 0.75])],
            None,
        );
        assert!(h.contains("<rect"));
        assert!(
            h.contains("<title>layer 2, expert 1, steps 0-10: load 0.75000</title>"),
            "{h}"
        );
    }

    /// A tick label per row, the colour bar's ends at the given scale, and every cell's
    /// rectangle reaching its neighbour's (no seam the background shows through).
    #[test]
    fn heatmaps_label_each_row_and_show_their_scale() {
        let columns: Vec<(f64, f64, Vec<f64>)> = (0..10)
            .map(|k| {
                (
                    k as f64 * 10.0,
                    k as f64 * 10.0 + 9.0,
                    vec![0.1, 0.2, 0.3, 0.4],
                )
            })
            .collect();
        let h =
            heatmap("layer 0", "expert", "", "load", &columns, Some((0.0, 1.0))).replace('\n', "");
        for r in 0..4 {
            assert!(
                h.contains(&format!(">{r}</text>")),
                "row {r} unlabelled: {h}"
            );
        }
        assert!(h.contains(">1.00000</text>"), "{h}");
        assert!(h.contains(">0.50000</text>"), "{h}");
    }

    #[test]
    fn scatter_chart_connects_a_frontier_and_labels_every_point() {
        let svg = scatter_chart(
            "board <b>",
            &[
                Scatter {
                    label: "frontier".into(),
                    points: vec![(1e9, 2.0, "a<x>".into()), (1e8, 3.0, "b".into())],
                    connect: true,
                },
                Scatter {
                    label: "others".into(),
                    points: vec![(5e9, 2.5, "c".into()), (0.0, 1.0, "zero compute".into())],
                    connect: false,
                },
            ],
            &Axes {
                x_desc: "FLOPs".into(),
                y_desc: "loss".into(),
                log_x: true,
                ..Axes::default()
            },
        );
        assert!(svg.starts_with("<svg"), "{}", &svg[..80]);
        assert!(
            svg.contains("<title>a&lt;x&gt;: FLOPs 1.0000e9, loss 2.00000</title>"),
            "{svg}"
        );
        assert!(svg.contains("<title>c: FLOPs"));
        assert!(
            !svg.contains("zero compute"),
            "a point at 0 has no place on a log axis"
        );
        assert!(!svg.contains("<b>"));
        assert!(scatter_chart("x", &[], &Axes::default()).contains("no points yet"));
    }

    #[test]
    fn viridis_ends() {
        assert_eq!(viridis(0.0), RGBColor(68, 1, 84));
        assert_eq!(viridis(1.0), RGBColor(253, 231, 37));
        assert_eq!(viridis(f64::NAN), RGBColor(68, 1, 84));
    }
}
