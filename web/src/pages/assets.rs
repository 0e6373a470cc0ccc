//! The dashboard's static assets, compiled into the binary and served under `/assets/`, so the
//! Content-Security-Policy can forbid inline script and style: the stylesheet, the chart script
//! (`charts.js`: uPlot charts fed by the metric API, zoom, smoothing, log-y, x by tokens/FLOPs/
//! time, live points over SSE), the parallel-coordinates script, the list's copy-link script, the run log's live-follow
//! script, the run page's live samples script, the tab icon, and uPlot itself, vendored from
//! the npm registry (`web/assets/vendor/uplot/README.md` names the version, the tarball's
//! integrity and each file's SHA-256; a test below checks them).
//!
//! uPlot is served under a path that names its version with a one-year immutable cache
//! lifetime; our own files, which change with the code, for five minutes. Not here: pages.

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

use crate::WebState;

/// The vendored uPlot's npm version; part of its asset paths.
pub const UPLOT_VERSION: &str = "1.6.32";
/// uPlot's script, as the pages link it.
pub const UPLOT_JS: &str = "/assets/vendor/uplot-1.6.32/uPlot.iife.min.js";
/// uPlot's stylesheet, as the pages link it.
pub const UPLOT_CSS: &str = "/assets/vendor/uplot-1.6.32/uPlot.min.css";
/// The chart script.
pub const CHARTS_JS: &str = "/assets/charts.js";
/// The parallel-coordinates script (compare page).
pub const PARCOORDS_JS: &str = "/assets/parcoords.js";
/// The run log page's live-follow script.
pub const RUNLOG_JS: &str = "/assets/runlog.js";
/// The run page's script that adds a running run's new samples.
pub const SAMPLES_JS: &str = "/assets/samples.js";
/// The experiments list's "copy link" script.
pub const VIEW_JS: &str = "/assets/view.js";
/// The stylesheet.
pub const STYLE_CSS: &str = "/assets/style.css";
/// The tab icon (also answered at `/favicon.ico`, where browsers look without a link).
pub const FAVICON_SVG: &str = "/assets/favicon.svg";

const STYLE: &str = include_str!("../../assets/style.css");
const CHARTS: &str = include_str!("../../assets/charts.js");
const PARCOORDS: &str = include_str!("../../assets/parcoords.js");
const VIEW: &str = include_str!("../../assets/view.js");
const RUNLOG: &str = include_str!("../../assets/runlog.js");
const SAMPLES: &str = include_str!("../../assets/samples.js");
const FAVICON: &str = include_str!("../../assets/favicon.svg");
const UPLOT_MIN_JS: &str = include_str!("../../assets/vendor/uplot/uPlot.iife.min.js");
const UPLOT_MIN_CSS: &str = include_str!("../../assets/vendor/uplot/uPlot.min.css");

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const SVG: &str = "image/svg+xml";
/// Our own files change with the code: a short lifetime.
const SHORT: &str = "public, max-age=300";
/// A versioned vendor file never changes under its path.
const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// The asset routes.
pub fn routes() -> Router<WebState> {
    let file = |ty: &'static str, cache: &'static str, body: &'static str| {
        get(move || async move {
            (
                [(header::CONTENT_TYPE, ty), (header::CACHE_CONTROL, cache)],
                body,
            )
                .into_response()
        })
    };
    Router::new()
        .route(STYLE_CSS, file(CSS, SHORT, STYLE))
        .route(CHARTS_JS, file(JS, SHORT, CHARTS))
        .route(PARCOORDS_JS, file(JS, SHORT, PARCOORDS))
        .route(VIEW_JS, file(JS, SHORT, VIEW))
        .route(RUNLOG_JS, file(JS, SHORT, RUNLOG))
        .route(SAMPLES_JS, file(JS, SHORT, SAMPLES))
        .route(FAVICON_SVG, file(SVG, SHORT, FAVICON))
        .route("/favicon.ico", file(SVG, SHORT, FAVICON))
        .route(UPLOT_JS, file(JS, IMMUTABLE, UPLOT_MIN_JS))
        .route(UPLOT_CSS, file(CSS, IMMUTABLE, UPLOT_MIN_CSS))
}

/// Bytes of script a chart page loads (uPlot and the chart script; the compare page adds the
/// parallel-coordinates script).
pub fn chart_script_bytes(with_parcoords: bool) -> usize {
    UPLOT_MIN_JS.len() + CHARTS.len() + if with_parcoords { PARCOORDS.len() } else { 0 }
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    use super::*;

    fn sha256_hex(bytes: &[u8]) -> String {
        Sha256::digest(bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    #[test]
    fn vendored_uplot_matches_its_checksums() {
        let readme = include_str!("../../assets/vendor/uplot/README.md");
        assert!(
            readme.contains(&format!("uplot@{UPLOT_VERSION}")),
            "the README names the version served"
        );
        assert!(UPLOT_JS.contains(UPLOT_VERSION) && UPLOT_CSS.contains(UPLOT_VERSION));
        assert!(UPLOT_MIN_JS.starts_with(&format!(
            "/*! https://github.com/leeoniya/uPlot (v{UPLOT_VERSION}) */"
        )));
        let license = include_str!("../../assets/vendor/uplot/LICENSE");
        for (file, bytes) in [
            ("uPlot.iife.min.js", UPLOT_MIN_JS.as_bytes()),
            ("uPlot.min.css", UPLOT_MIN_CSS.as_bytes()),
            ("LICENSE", license.as_bytes()),
        ] {
            let row = format!("| `{file}` | `{}` |", sha256_hex(bytes));
            assert!(
                readme.contains(&row),
                "{file} does not match the SHA-256 in web/assets/vendor/uplot/README.md \
                 (computed row: {row})"
            );
        }
        assert!(license.contains("MIT License") && license.contains("Leon Sorokin"));
    }

    #[test]
    fn chart_pages_load_under_100_kb_of_script() {
        let bytes = chart_script_bytes(true);
        assert!(bytes < 100 * 1024, "{bytes} bytes of script");
    }
}
