//! The dashboard's HTML pages, rendered on the server with maud (which escapes every
//! interpolated value, so a hypothesis containing `<script>` is shown as text).
//!
//! One file per page family: `experiments` (the list and negative results), `experiment`
//! (one experiment, its charts, and the Live page), `compare`, `ladder`, `boards`
//! (leaderboards), `sweeps`, `data`, `ledger`, `queue`.
//! This file holds the page frame, the routes and the small formatting pieces pages share; the
//! stylesheet and scripts are in `assets` (served from `/assets/`, so the
//! Content-Security-Policy can forbid inline code). Pages read through `catalog` and `series`;
//! they never write.

pub mod assets;
pub mod boards;
pub mod compare;
pub mod controls;
pub mod data;
pub mod experiment;
pub mod experiments;
pub mod ladder;
pub mod ledger;
pub mod queue;
pub mod run_log;
pub mod sweeps;

use axum::Router;
use axum::routing::get;
use maud::{DOCTYPE, Markup, html};

use crate::WebState;

/// The page routes.
pub fn routes() -> Router<WebState> {
    Router::new()
        .route("/", get(experiments::list_page))
        .route("/experiments", get(experiments::list_page))
        .route("/experiments/{*id}", get(experiment::page))
        .route("/runs/{run}", get(experiment::run_page))
        .route("/runs/{run}/log", get(run_log::page))
        .route("/live/{run}", get(experiment::live_page))
        .route("/runs/{run}/heatmap/{layer}", get(experiment::heatmap_svg))
        .route("/compare", get(compare::page))
        .route("/ladder", get(ladder::page))
        .route("/boards", get(boards::list_page))
        .route("/boards/{name}", get(boards::page))
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
                @let charts = matches!(scripts, Scripts::Charts | Scripts::ChartsAndParcoords);
                @if charts { link rel="stylesheet" href=(assets::UPLOT_CSS); }
                link rel="stylesheet" href=(assets::STYLE_CSS);
                @if charts {
                    script src=(assets::UPLOT_JS) defer {}
                    script src=(assets::CHARTS_JS) defer {}
                }
                @if matches!(scripts, Scripts::ChartsAndParcoords | Scripts::Parcoords) { script src=(assets::PARCOORDS_JS) defer {} }
                @if scripts == Scripts::RunLog { script src=(assets::RUNLOG_JS) defer {} }
            }
            body {
                header {
                    a.brand href="/" { "glassbox" }
                    nav {
                        (item(Nav::Experiments, "/experiments", "Experiments"))
                        (item(Nav::Compare, "/compare", "Compare"))
                        (item(Nav::Ladder, "/ladder", "Ladder"))
                        (item(Nav::Boards, "/boards", "Boards"))
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
