//! Operations: `/healthz`, Prometheus `/metrics`, and the layers every response passes through
//! (request logs via tower-http tracing, request counting, the body cap, security headers).
//!
//! `/metrics` is the Prometheus text format written by hand (a few gauges and counters do not
//! need a metrics library): requests by route and status with their total duration, whatever
//! the caller's [`MetricsSource`]s add (the binary adds the lab's queue: depth per job state,
//! running jobs, each leasing worker's seconds until its lease expires), live tokens/s from the
//! [`crate::LiveHub`], SSE subscribers, the render cache's hits, misses and size, the page
//! cache's reads and writes, the series cache's size, and the log size.
//! This module does not serve pages or data.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Instant;

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tower_http::trace::TraceLayer;

use crate::WebState;
use crate::error::WebError;

/// The Content-Security-Policy of every response: no inline script or style, nothing from
/// other origins; the live script connects back to this origin only.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// More lines for `/metrics`, from a part of the server this crate does not know (the lab's
/// job queue): Prometheus text format, `# HELP` and `# TYPE` lines included.
pub trait MetricsSource: Send + Sync + 'static {
    /// The current text; an error is answered 500 with it.
    fn prometheus_text(&self) -> MetricsText<'_>;
}

/// What [`MetricsSource::prometheus_text`] returns: the text, or why it could not be read.
pub type MetricsText<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<String, String>> + Send + 'a>>;

/// Request counters by (route, status).
#[derive(Debug, Default)]
pub struct RequestMetrics {
    by_route: Mutex<BTreeMap<(String, u16), (u64, f64)>>,
}

impl RequestMetrics {
    fn record(&self, route: String, status: u16, seconds: f64) {
        let mut m = self.by_route.lock().unwrap_or_else(|p| p.into_inner());
        let e = m.entry((route, status)).or_insert((0, 0.0));
        e.0 += 1;
        e.1 += seconds;
    }
}

/// `/healthz` and `/metrics`.
pub fn routes() -> Router<WebState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
}

/// Wraps `router` in request counting, request logs and security headers.
pub fn layers(router: Router, state: WebState) -> Router {
    router
        .layer(middleware::from_fn_with_state(state, count_requests))
        .layer(TraceLayer::new_for_http())
        .layer(middleware::from_fn(security_headers))
}

async fn count_requests(State(st): State<WebState>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".into());
    let start = Instant::now();
    let resp = next.run(req).await;
    st.metrics
        .record(route, resp.status().as_u16(), start.elapsed().as_secs_f64());
    resp
}

async fn security_headers(req: Request, next: Next) -> Response {
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    for (k, v) in [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
    ] {
        h.insert(k, HeaderValue::from_static(v));
    }
    h.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    h.insert(
        "permissions-policy",
        HeaderValue::from_static("camera=(), microphone=(), geolocation=()"),
    );
    resp
}

async fn healthz(State(st): State<WebState>) -> Result<&'static str, WebError> {
    st.index.ping().await?;
    if !st.lab.log_dir().join("checkpoint").is_file() {
        return Err(WebError::not_found("log/checkpoint"));
    }
    Ok("ok\n")
}

fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

async fn metrics(State(st): State<WebState>) -> Result<Response, WebError> {
    let mut out = String::new();
    out.push_str("# HELP glassbox_http_requests_total HTTP requests answered, by route and status.\n# TYPE glassbox_http_requests_total counter\n");
    let snapshot: Vec<((String, u16), (u64, f64))> = {
        let m = st
            .metrics
            .by_route
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        m.iter().map(|(k, v)| (k.clone(), *v)).collect()
    };
    for ((route, status), (n, _)) in &snapshot {
        let _ = writeln!(
            out,
            "glassbox_http_requests_total{{route=\"{}\",status=\"{status}\"}} {n}",
            label(route)
        );
    }
    out.push_str("# HELP glassbox_http_request_seconds_total Time spent answering, by route and status.\n# TYPE glassbox_http_request_seconds_total counter\n");
    for ((route, status), (_, s)) in &snapshot {
        let _ = writeln!(
            out,
            "glassbox_http_request_seconds_total{{route=\"{}\",status=\"{status}\"}} {s:.6}",
            label(route)
        );
    }
    // What the caller adds (the lab's queue gauges), each source's text as it gives it.
    for source in st.metric_sources.iter() {
        match source.prometheus_text().await {
            Ok(text) => {
                out.push_str(&text);
                if !text.is_empty() && !text.ends_with('\n') {
                    out.push('\n');
                }
            }
            Err(e) => return Err(WebError::Metrics(e)),
        }
    }
    let _ = writeln!(
        out,
        "# HELP glassbox_tokens_per_second Training throughput summed over live runs.\n# TYPE glassbox_tokens_per_second gauge\nglassbox_tokens_per_second {}",
        st.live.tokens_per_second()
    );
    let _ = writeln!(
        out,
        "# HELP glassbox_live_subscribers Open live-update (SSE) connections.\n# TYPE glassbox_live_subscribers gauge\nglassbox_live_subscribers {}",
        st.live.subscribers()
    );
    let (hits, misses) = st.renders.hits_and_misses();
    let (entries, bytes) = st.renders.size();
    let _ = writeln!(
        out,
        "# HELP glassbox_render_cache_requests_total Cached pages asked for, by whether the render cache answered.\n# TYPE glassbox_render_cache_requests_total counter\nglassbox_render_cache_requests_total{{result=\"hit\"}} {hits}\nglassbox_render_cache_requests_total{{result=\"miss\"}} {misses}\n# HELP glassbox_render_cache_bytes Bytes held by the render cache (bodies and keys).\n# TYPE glassbox_render_cache_bytes gauge\nglassbox_render_cache_bytes {bytes}\n# HELP glassbox_render_cache_entries Pages held by the render cache.\n# TYPE glassbox_render_cache_entries gauge\nglassbox_render_cache_entries {entries}"
    );
    let (disk_hits, disk_misses, disk_writes) = st.pages.counts();
    let (series, points) = st.series.size();
    let _ = writeln!(
        out,
        "# HELP glassbox_page_cache_reads_total Finished pages looked up on disk, by whether they were there and current.\n# TYPE glassbox_page_cache_reads_total counter\nglassbox_page_cache_reads_total{{result=\"hit\"}} {disk_hits}\nglassbox_page_cache_reads_total{{result=\"miss\"}} {disk_misses}\n# HELP glassbox_page_cache_writes_total Finished pages written to disk.\n# TYPE glassbox_page_cache_writes_total counter\nglassbox_page_cache_writes_total {disk_writes}\n# HELP glassbox_series_cache_points Metric points of finished runs held for zooming.\n# TYPE glassbox_series_cache_points gauge\nglassbox_series_cache_points {points}\n# HELP glassbox_series_cache_series Series of finished runs held for zooming.\n# TYPE glassbox_series_cache_series gauge\nglassbox_series_cache_series {series}"
    );
    let n = st.index.entry_count().await?;
    let _ = writeln!(
        out,
        "# HELP glassbox_ledger_entries Entries in the index.\n# TYPE glassbox_ledger_entries gauge\nglassbox_ledger_entries {n}"
    );
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        out,
    )
        .into_response())
}
