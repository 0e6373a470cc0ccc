//! The run page's "Evaluations" section: per suite version a chart of its headline metric over
//! steps (the chart script places it on the page's x axis: tokens, FLOPs or time), the
//! contamination figure beside it, and a table of every metric at every step; failed and
//! cancelled attempts listed apart. Suite text and details are escaped (maud).
//!
//! Not here: reading and folding the entries (`crate::evals::run`) or drawing charts
//! (`crate::chart`).

use maud::{Markup, html};

use crate::chart::{self, Axes, Line};
use crate::evals::run::{RunEvaluations, SuiteResults};
use crate::evals::{ContaminationFigure, Evaluation, MAX_RUN_ENTRIES, Outcome};
use crate::pages::controls::{PageLine, View, page_line_figure};
use crate::pages::{count, encode_path, num, query, short_hash};
use glassbox_schemas::metrics::XAxis;

/// In words: `2 of 200 items (1.0%) share a 13-gram with the training data`.
pub fn contamination_sentence(c: &ContaminationFigure) -> String {
    let mut s = format!(
        "{} of {} items ({}) share a {}-gram with the training data",
        count(c.flagged as f64),
        count(c.items as f64),
        c.percent(),
        c.ngram
    );
    if c.too_short > 0 {
        s.push_str(&format!(
            "; {} too short to check",
            count(c.too_short as f64)
        ));
    }
    s
}

/// This page with the x axis `x` and the rest of `view`, at the Evaluations section.
fn x_link(view: &View, x: XAxis) -> String {
    let (smooth, from, to) = (
        view.smooth.to_string(),
        view.from.map(|f| f.to_string()),
        view.to.map(|t| t.to_string()),
    );
    let mut pairs: Vec<(&str, &str)> = Vec::new();
    if view.smooth > 0.0 {
        pairs.push(("smooth", &smooth));
    }
    if view.log_y {
        pairs.push(("logy", "1"));
    }
    if x != XAxis::Step {
        pairs.push(("x", x.name()));
    }
    if let Some(f) = &from {
        pairs.push(("from", f));
    }
    if let Some(t) = &to {
        pairs.push(("to", t));
    }
    format!("?{}#evaluations", query(&pairs))
}

/// An outcome as a badge.
pub fn outcome_badge(o: Outcome) -> Markup {
    let class = match o {
        Outcome::Evaluated => "badge ok",
        Outcome::Failed => "badge bad",
        Outcome::Cancelled => "badge warn",
    };
    html! { span class=(class) { (o.as_str()) } }
}

/// `value ± stderr` for a table cell.
fn with_stderr(e: &Evaluation, metric: &str) -> String {
    match (e.value(metric), e.stderr(metric)) {
        (Some(v), Some(se)) => format!("{} ± {}", num(Some(v)), num(Some(se))),
        (Some(v), None) => num(Some(v)),
        (None, _) => "–".into(),
    }
}

/// The anchor of a suite version's block on the run page.
pub fn anchor(suite: &str, version: &str) -> String {
    let short = version.strip_prefix("blake3:").unwrap_or(version);
    format!("eval-{suite}-{}", &short[..short.len().min(12)])
}

/// The chart of one suite version's headline metric over steps.
fn chart(run: &str, s: &SuiteResults, view: &View, flops_per_token: Option<f64>) -> Markup {
    let points: Vec<(u64, f64)> = s
        .results
        .iter()
        .filter_map(|e| e.headline().map(|v| (e.step, v)))
        .collect();
    let short = s.version.strip_prefix("blake3:").unwrap_or(&s.version);
    let title = format!(
        "{} ({}): {}",
        s.suite,
        &short[..short.len().min(12)],
        s.metric
    );
    let unit = format!(
        "{}, {} is better",
        s.metric,
        if s.higher_is_better {
            "higher"
        } else {
            "lower"
        }
    );
    let svg = chart::line_chart(
        &title,
        &[Line {
            label: s.metric.clone(),
            points: points.iter().map(|&(x, y)| (x as f64, y)).collect(),
            markers: true,
        }],
        &Axes {
            x_desc: "step".into(),
            y_desc: unit.clone(),
            log_y: view.log_y,
            ..Axes::default()
        },
    );
    page_line_figure(
        &title,
        &unit,
        &[PageLine {
            run,
            label: &s.metric,
            flops_per_token,
            points,
            markers: true,
        }],
        &svg,
    )
}

/// The run page's "Evaluations": per suite version its chart, contamination and table; then
/// the evaluations that did not end `evaluated`.
pub fn section(
    ev: &RunEvaluations,
    view: &View,
    flops_per_token: Option<f64>,
    running: bool,
) -> Markup {
    html! {
        section #evaluations {
            h2 { "Evaluations" }
            @if ev.suites.is_empty() && ev.not_evaluated.is_empty() {
                p.empty {
                    @if running { "No snapshot has been evaluated yet: each snapshot is scored on the suites the lab's or the spec's [evals] names." }
                    @else { "This run's snapshots were not evaluated (the lab's or the spec's [evals] names the suites each snapshot is scored on)." }
                }
            } @else {
                p.meta {
                    "Each snapshot scored on held-out suites, one block per suite version (versions are never mixed). "
                    "Where a snapshot was evaluated more than once, the newest evaluation counts. "
                    "The charts follow the chart controls above (x by step, tokens, FLOPs or time; log y). · "
                    a href={ "/api/v1/runs/" (encode_path(&ev.run)) "/evaluations" } { "as JSON" } " · "
                    a href="/evals" { "every run's evaluations" }
                }
                p.meta.x-axes {
                    "x axis: "
                    @for (i, x) in XAxis::ALL.into_iter().enumerate() {
                        @if i > 0 { " · " }
                        @if x == view.x { strong { (x.label()) } } @else { a href=(x_link(view, x)) { (x.label()) } }
                    }
                }
                @if ev.truncated { p.meta { "Only the newest " (MAX_RUN_ENTRIES) " evaluation entries of this run are read." } }
                @for s in &ev.suites { (suite_block(&ev.run, s, view, flops_per_token)) }
                @if !ev.not_evaluated.is_empty() {
                    h3 { "Not evaluated" }
                    p.meta { "Attempts that failed or were cancelled: not results, and never shown as a value." }
                    table.list #evals-not-evaluated {
                        thead { tr { th { "Step" } th { "Suite" } th { "Outcome" } th { "Detail" } th { "Time" } th { "Entry" } } }
                        tbody { @for e in &ev.not_evaluated { tr {
                            td.n { (e.step) }
                            td { (e.suite) " " (short_hash(&e.version)) }
                            td { (outcome_badge(e.outcome)) }
                            td { (e.detail.as_deref().unwrap_or("")) }
                            td { (e.time) }
                            td.n { a href={ "/api/v1/entries/" (e.entry) } { (e.entry) } }
                        } } }
                    }
                }
            }
        }
    }
}

fn suite_block(run: &str, s: &SuiteResults, view: &View, flops_per_token: Option<f64>) -> Markup {
    let metrics: Vec<&str> = s
        .kind
        .metrics()
        .iter()
        .copied()
        .filter(|m| !m.ends_with("_stderr"))
        .collect();
    let latest = s.latest();
    html! {
        div.eval-suite id=(anchor(&s.suite, &s.version)) {
            h3 {
                (s.suite) " " (short_hash(&s.version))
                " " span.meta { (s.kind.as_str()) @if let Some(l) = latest { " · " (count(l.items as f64)) " items" } }
            }
            div.eval-body {
                (chart(run, s, view, flops_per_token))
                aside.contamination
                    .flagged[latest.and_then(|l| l.contamination.as_ref()).is_some_and(|c| c.flagged > 0)]
                    .unchecked[latest.is_none_or(|l| l.contamination.is_none())] {
                    h4 { "Contamination" }
                    @match latest.and_then(|l| l.contamination.as_ref().map(|c| (l, c))) {
                        Some((l, c)) => {
                            p.figure { (c.percent()) }
                            p { (contamination_sentence(c)) " (at step " (l.step) ")." }
                            @if c.tokens_checked > 0 { p.meta { (count(c.tokens_checked as f64)) " training tokens checked." } }
                            @if !c.first_flagged.is_empty() {
                                p.meta {
                                    "Flagged items: "
                                    (c.first_flagged.iter().take(12).map(u64::to_string).collect::<Vec<_>>().join(", "))
                                    @if c.flagged > c.first_flagged.len().min(12) as u64 { ", …" }
                                }
                            }
                        }
                        None => { p.meta { "Not checked: the newest evaluation records no contamination figure." } }
                    }
                }
            }
            table.list.evals {
                thead { tr {
                    th { "Step" } th { "Tokens" } th { "FLOPs" }
                    @for m in &metrics { th { (m) @if *m == s.metric { " " small.meta { "(headline)" } } } }
                    th { "Contamination" } th { "Entry" }
                } }
                tbody { @for e in s.results.iter().rev() { tr {
                    td.n { (e.step) }
                    td.n { (e.tokens.map(count).unwrap_or_else(|| "–".into())) }
                    td.n { (num(e.flops)) }
                    @for m in &metrics { td.n { (with_stderr(e, m)) } }
                    td.n {
                        @if let Some(c) = &e.contamination { span title=(contamination_sentence(c)) { (c.flagged) " of " (c.items) " (" (c.percent()) ")" } }
                        @else { "not checked" }
                    }
                    td.n {
                        a href={ "/api/v1/entries/" (e.entry) } { (e.entry) }
                        @if let Some(r) = &e.results { " " small { a href={ "/blobs/" (encode_path(r)) } download { "per item" } } }
                        @if !e.replaces.is_empty() {
                            br; small.meta { "replaces " (e.replaces.iter().map(|x| format!("#{x}")).collect::<Vec<_>>().join(", ")) }
                        }
                    }
                } } }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evals::run::fold;
    use crate::evals::run::tests::ev;

    /// A failed evaluation's detail that is markup reaches the page escaped.
    #[test]
    fn suite_text_is_escaped() {
        let mut e = ev(3, 100, "blake3:aa", Outcome::Failed, f64::NAN);
        e.detail = Some("<script>alert(1)</script>".into());
        let f = fold("r", vec![e], false);
        let html = section(&f, &View::default(), None, false).into_string();
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("&lt;script&gt;"), "{html}");
    }

    #[test]
    fn contamination_reads_as_a_sentence() {
        let c = ContaminationFigure {
            ngram: 13,
            flagged: 2,
            items: 200,
            fraction: 0.01,
            too_short: 0,
            tokens_checked: 61_440,
            first_flagged: vec![3, 17],
        };
        assert_eq!(
            contamination_sentence(&c),
            "2 of 200 items (1.0%) share a 13-gram with the training data"
        );
        let short = ContaminationFigure {
            too_short: 3,
            flagged: 1500,
            items: 3000,
            fraction: 0.5,
            ..c
        };
        assert_eq!(
            contamination_sentence(&short),
            "1,500 of 3,000 items (50.0%) share a 13-gram with the training data; 3 too short to check"
        );
    }
}
