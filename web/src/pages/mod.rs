//! The dashboard's HTML pages, rendered on the server with maud (which escapes every
//! interpolated value, so a hypothesis containing `<script>` is shown as text).
//!
//! One file per page family: `experiments` (the list and negative results), `experiment`
//! (one experiment, its charts, and the Live page), `run` (one run's summary, charts,
//! evaluations and hardware), `run_log` (its console log), `compare`, `ladder`, `boards`
//! (leaderboards), `evals` (the evaluation board), `sweeps`, `data`, `ledger`, `queue`.
//! This file holds the page frame, the routes and the small formatting pieces pages share; the
//! stylesheet and scripts are in `assets` (served from `/assets/`, so the
//! Content-Security-Policy can forbid inline code). Pages read through `catalog` and `series`;
//! they never write.

pub mod assets;
pub mod boards;
pub mod compare;
pub mod controls;
pub mod data;
pub mod evals;
pub mod experiment;
pub mod experiments;
pub mod ladder;
pub mod ledger;
pub mod queue;
pub mod run;
pub mod run_evals;
pub mod run_log;
pub mod sweeps;

use axum::Router;
use axum::routing::get;
use maud::{DOCTYPE, Markup, html};

use crate::WebState;
use crate::annotations::RunMark;

/// The page routes.
pub fn routes() -> Router<WebState> {
    Router::new()
        .route("/", get(experiments::list_page))
        .route("/experiments", get(experiments::list_page))
        .route("/experiments/{*id}", get(experiment::page))
        .route("/runs/{run}", get(run::page))
        .route("/runs/{run}/log", get(run_log::page))
        .route("/live/{run}", get(experiment::live_page))
        .route("/runs/{run}/heatmap/{layer}", get(experiment::heatmap_svg))
        .route("/compare", get(compare::page))
        .route("/ladder", get(ladder::page))
        .route("/boards", get(boards::list_page))
        .route("/boards/{name}", get(boards::page))
        .route("/evals", get(evals::page))
        .route("/sweeps", get(sweeps::list_page))
        .route("/sweeps/{*id}", get(sweeps::page))
        .route("/data", get(data::page))
        .route("/data/corpora/{hash}", get(data::corpus_page))
        .route("/data/runs/{run}", get(data::run_page))
        .route("/negative", get(experiments::negative_page))
        .route("/ledger", get(ledger::page))
        .route("/queue", get(queue::page))
        .merge(assets::routes())
}

/// Which scripts a page loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scripts {
    /// None: the page is static.
    None,
    /// uPlot and the chart script.
    Charts,
    /// The charts and the parallel-coordinates script (compare).
    ChartsAndParcoords,
    /// The charts and the script that adds a running run's new samples (its run page).
    ChartsAndSamples,
    /// The run log's live-follow script (no charts).
    RunLog,
    /// The parallel-coordinates script alone (a search result).
    Parcoords,
}

/// A warning badge for a run's anomalies (none when there are none), linking to its notes.
pub fn anomaly_badge(n: u32, href: &str) -> Markup {
    html! {
        @if n > 0 {
            " " a.badge.warn href=(href) title="anomalies the worker flagged during the run" {
                "⚠ " (n) @if n == 1 { " anomaly" } @else { " anomalies" }
            }
        }
    }
}

/// A forecast's verdict as a badge, in the vocabulary every page and the API share.
pub fn verdict_badge(v: glassbox_schemas::record::ForecastVerdict) -> Markup {
    use glassbox_schemas::record::ForecastVerdict;
    let (class, title) = match v {
        ForecastVerdict::Hit => ("badge ok", "the outcome is within the forecast's tolerance"),
        ForecastVerdict::Miss => (
            "badge bad",
            "the outcome is outside the forecast's tolerance, or was never measured",
        ),
        ForecastVerdict::Pending => ("badge", "no finished run of the forecast's spec yet"),
    };
    html! { span class=(class) title=(title) { (v.as_str()) } }
}

/// Which navigation item is current.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    /// Experiments list.
    Experiments,
    /// Compare.
    Compare,
    /// Ladder.
    Ladder,
    /// Leaderboards.
    Boards,
    /// The evaluation board.
    Evals,
    /// Sweeps.
    Sweeps,
    /// Data.
    Data,
    /// Negative results.
    Negative,
    /// Ledger.
    Ledger,
    /// The job queue.
    Queue,
    /// None of the above.
    Other,
}

/// The page frame: head, navigation, body; with the chart scripts when `charts`.
pub fn frame(title: &str, nav: Nav, charts: bool, body: Markup) -> Markup {
    let scripts = if charts {
        Scripts::Charts
    } else {
        Scripts::None
    };
    frame_with(title, nav, scripts, body)
}

/// The page frame with the given scripts.
pub fn frame_with(title: &str, nav: Nav, scripts: Scripts, body: Markup) -> Markup {
    let item = |n: Nav, href: &str, text: &str| {
        html! { a href=(href) class=[(n == nav).then_some("current")] { (text) } }
    };
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · glassbox" }
                @let charts = matches!(scripts, Scripts::Charts | Scripts::ChartsAndParcoords | Scripts::ChartsAndSamples);
                @if charts { link rel="stylesheet" href=(assets::UPLOT_CSS); }
                link rel="stylesheet" href=(assets::STYLE_CSS);
                link rel="icon" type="image/svg+xml" href=(assets::FAVICON_SVG);
                @if charts {
                    script src=(assets::UPLOT_JS) defer {}
                    script src=(assets::CHARTS_JS) defer {}
                }
                @if matches!(scripts, Scripts::ChartsAndParcoords | Scripts::Parcoords) { script src=(assets::PARCOORDS_JS) defer {} }
                @if scripts == Scripts::RunLog { script src=(assets::RUNLOG_JS) defer {} }
                @if scripts == Scripts::ChartsAndSamples { script src=(assets::SAMPLES_JS) defer {} }
            }
            body {
                header {
                    a.brand href="/" { "glassbox" }
                    nav {
                        (item(Nav::Experiments, "/experiments", "Experiments"))
                        (item(Nav::Compare, "/compare", "Compare"))
                        (item(Nav::Ladder, "/ladder", "Ladder"))
                        (item(Nav::Boards, "/boards", "Boards"))
                        (item(Nav::Evals, "/evals", "Evals"))
                        (item(Nav::Sweeps, "/sweeps", "Sweeps"))
                        (item(Nav::Data, "/data", "Data"))
                        (item(Nav::Negative, "/negative", "Negative results"))
                        (item(Nav::Queue, "/queue", "Queue"))
                        (item(Nav::Ledger, "/ledger", "Ledger"))
                    }
                }
                main { (body) }
                footer {
                    "Every record here is in a public, tamper-evident ledger. "
                    a href="/ledger" { "Verify it yourself" } " · "
                    a href="/api/v1/openapi.json" { "API" }
                }
            }
        }
    }
}

/// Percent-encodes a path made of `/`-separated segments (experiment ids such as
/// `owner/repo#12`, metric names such as `train/loss`).
pub fn encode_path(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// A query string from pairs (values encoded).
pub fn query(pairs: &[(&str, &str)]) -> String {
    serde_urlencoded::to_string(pairs).unwrap_or_default()
}

/// Link to an experiment page.
pub fn experiment_href(id: &str) -> String {
    format!("/experiments/{}", encode_path(id))
}

/// A hash shortened for tables, full text on hover.
pub fn short_hash(h: &str) -> Markup {
    let short = h
        .strip_prefix("blake3:")
        .map(|x| &x[..x.len().min(12)])
        .unwrap_or(h);
    html! { code.hash title=(h) { (short) } }
}

/// A status badge.
pub fn status_badge(status: &str) -> Markup {
    let class = match status {
        "succeeded" | "approved" => "ok",
        "running" | "proposed" => "info",
        "diverged" | "failed" | "rejected" => "bad",
        _ => "warn",
    };
    html! { span class={ "badge " (class) } { (status) } }
}

/// A number for tables.
pub fn num(v: Option<f64>) -> String {
    match v {
        None => "–".into(),
        Some(v) if !v.is_finite() => format!("{v}"),
        Some(v) if v != 0.0 && (v.abs() >= 1e6 || v.abs() < 1e-3) => format!("{v:.3e}"),
        Some(v) => format!("{v:.4}"),
    }
}

/// An integer count for people: `153,600`.
pub fn count(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    let n = v.round() as i128;
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

/// Whether a metric counts things (tokens, assignments), so it reads as an integer.
pub fn is_count_metric(name: &str) -> bool {
    name.ends_with("tokens") || name.ends_with("assignments") || name.ends_with("/count")
}

/// A final metric's value for tables: counts as integers, everything else as [`num`].
pub fn metric_value(name: &str, v: f64) -> String {
    if is_count_metric(name) {
        count(v)
    } else {
        num(Some(v))
    }
}

/// The table under the charts: every note and anomaly, superseded notes struck through.
pub fn notes_table(marks: &[RunMark]) -> Markup {
    html! {
        section #annotations {
            h2 { "Notes and anomalies" }
            @if marks.is_empty() {
                p.empty { "No notes yet. Comment `/note step <n>: <what you saw>` on the experiment issue to add one." }
            } @else {
                table.list #annotations-list {
                    thead { tr { th { "Steps" } th { "Kind" } th { "By" } th { "Note" } th { "Entry" } } }
                    tbody { @for m in marks {
                        tr class=(if m.kind == "anomaly" { "anomaly" } else { "annotation" }) {
                            td.n { (m.from_step) @if m.to_step != m.from_step { "–" (m.to_step) } }
                            td { span.badge { (m.label) } }
                            td { (m.author.as_deref().unwrap_or("lab")) }
                            td {
                                @if m.is_current() { (m.text) } @else { del { (m.text) } }
                                @if let Some(new) = m.superseded_by { " " small { "(superseded by entry " (new) ")" } }
                                @if let Some(u) = &m.url { " " (safe_link(u)) }
                            }
                            td.n { a href={ "/api/v1/entries/" (m.entry) } { (m.entry) } }
                        }
                    } }
                }
            }
        }
    }
}

/// An external link only when it is http(s); otherwise the text alone.
pub fn safe_link(url: &str) -> Markup {
    if url.starts_with("https://") || url.starts_with("http://") {
        html! { a href=(url) rel="nofollow noopener" { (url) } }
    } else {
        html! { (url) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_encoded_but_slashes_kept() {
        assert_eq!(encode_path("acme/lab#12"), "acme/lab%2312");
        assert_eq!(encode_path("a b<c>"), "a%20b%3Cc%3E");
    }

    #[test]
    fn counts_read_as_integers_with_separators() {
        assert_eq!(count(153600.0), "153,600");
        assert_eq!(count(999.0), "999");
        assert_eq!(count(1000.0), "1,000");
        assert_eq!(count(-1234567.4), "-1,234,567");
        assert_eq!(metric_value("throughput/total_tokens", 153600.0), "153,600");
        assert_eq!(metric_value("data/markov/tokens", 2048.0), "2,048");
        assert_eq!(metric_value("train/loss", 1.5), "1.5000");
    }

    #[test]
    fn only_http_links_are_links() {
        assert!(
            safe_link("javascript:alert(1)")
                .into_string()
                .find("href")
                .is_none()
        );
        assert!(
            safe_link("https://github.com/a/b/issues/1")
                .into_string()
                .contains("href")
        );
    }
}
