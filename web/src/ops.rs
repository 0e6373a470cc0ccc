//! Operations: `/healthz`, Prometheus `/metrics`, and the layers every response passes through
//! (request logs via tower-http tracing, request counting, the body cap, security headers).
//!
//! `/metrics` is the Prometheus text format written by hand (a few gauges and counters do not
//! need a metrics library): requests by route and status with their total duration, queue depth
//! per job state, running jobs, each leasing worker's seconds until its lease expires (its
//! heartbeat), live tokens/s from the [`crate::LiveHub`], SSE subscribers, the render cache's
//! hits, misses and size, and the log size.
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
use glassbox_lab::JobState;
use sqlx::Row;
use tower_http::trace::TraceLayer;

use crate::WebState;
use crate::error::WebError;

/// The Content-Security-Policy of every response: no inline script or style, nothing from
/// other origins; the live script connects back to this origin only.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

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
    sqlx::query("SELECT 1 AS one")
        .fetch_one(st.index.pool())
        .await?;
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
    if let Some(q) = &st.queue {
        let counts = q.counts().await?;
        out.push_str("# HELP glassbox_queue_jobs Jobs in the queue by state.\n# TYPE glassbox_queue_jobs gauge\n");
        for s in JobState::ALL {
            let n = counts
                .iter()
                .find(|(k, _)| *k == s)
                .map(|(_, n)| *n)
                .unwrap_or(0);
            let _ = writeln!(out, "glassbox_queue_jobs{{state=\"{}\"}} {n}", s.as_str());
        }
        let depth: u64 = counts
            .iter()
            .filter(|(k, _)| *k == JobState::Queued)
            .map(|(_, n)| n)
            .sum();
        let running: u64 = counts
            .iter()
            .filter(|(k, _)| matches!(k, JobState::Leased | JobState::Running))
            .map(|(_, n)| n)
            .sum();
        let _ = writeln!(
            out,
            "# HELP glassbox_queue_depth Jobs waiting for a worker.\n# TYPE glassbox_queue_depth gauge\nglassbox_queue_depth {depth}"
        );
        let _ = writeln!(
            out,
            "# HELP glassbox_running_jobs Jobs leased or training.\n# TYPE glassbox_running_jobs gauge\nglassbox_running_jobs {running}"
        );
        let writes = q.write_stats();
        let _ = writeln!(
            out,
            "# HELP glassbox_queue_writes_total Enqueues, leases and finishes this process committed.\n# TYPE glassbox_queue_writes_total counter\nglassbox_queue_writes_total {}\n# HELP glassbox_queue_commits_total Transactions that committed them (fewer than the writes when concurrent writes shared a commit).\n# TYPE glassbox_queue_commits_total counter\nglassbox_queue_commits_total {}",
            writes.writes, writes.commits
        );
        out.push_str("# HELP glassbox_worker_lease_seconds_left Seconds until a worker's lease expires unless it heartbeats, per worker and job.\n# TYPE glassbox_worker_lease_seconds_left gauge\n");
        let now = q.clock().now_ms();
        for state in [JobState::Leased, JobState::Running] {
            for job in q.list(Some(state), 1000).await? {
                if let (Some(w), Some(exp)) = (&job.lease_owner, job.lease_expires_at) {
                    let _ = writeln!(
                        out,
                        "glassbox_worker_lease_seconds_left{{worker=\"{}\",job=\"{}\"}} {:.3}",
                        label(&w.0),
                        job.id.0,
                        (exp - now) as f64 / 1000.0
                    );
                }
            }
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
    let n: i64 = sqlx::query("SELECT COUNT(*) AS n FROM entries")
        .fetch_one(st.index.pool())
        .await?
        .try_get("n")?;
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
