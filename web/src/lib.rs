//! glassbox-web: the public dashboard of an open lab, served by `glassbox serve`.
//!
//! - [`WebState`] — what the server reads: the lab directory ([`glassbox_ledger::LabDir`]: the
//!   static log and blobs), the index database ([`glassbox_ledger::index::Index`]), the
//!   [`LiveHub`] of live metric points, and what the binary adds: routes (the GitHub webhook)
//!   [`ops::MetricsSource`]s (the job queue's gauges), a [`queue::QueueSource`] (the jobs,
//!   for the public queue page) and the lab's leaderboard definitions
//!   ([`WebState::with_boards`]; the boards themselves are derived from the log,
//!   [`leaderboards`]);
//! - [`app`] — the axum router: HTML pages (`pages`), the JSON API under `/api/v1` with its
//!   OpenAPI document (`api`), the log's static read API `/log/...`, `/vkey`, `/blobs/...`
//!   (`static_log`), and operations `/healthz`, `/metrics` (`ops`);
//! - [`evals`] — evaluations: a run's (its page's section and API), the board of every run's
//!   latest valid result per suite version (`/evals`), and the stored suites;
//! - [`serve`] — binds a socket and serves [`app`] on the [`listener`] (connection cap, header
//!   and body deadlines, bounded graceful shutdown) until a shutdown future resolves;
//! - [`witness_api`] — a separate server on the same listener: a C2SP witness's HTTP API
//!   (`glassbox witness serve`), whose state is its own, not the lab's.
//!
//! Pages are rendered on the server (maud templates escape everything interpolated) with charts
//! drawn by plotters as inline SVG, each line downsampled by [`glassbox_ledger::lttb`], so every chart shows
//! without JavaScript. With it, `/assets/charts.js` redraws each line chart with the vendored
//! uPlot from the metric API (zoom to full resolution, smoothing, log-y, x by tokens, FLOPs or
//! time, live points over Server-Sent Events). A strict Content-Security-Policy forbids inline
//! scripts and styles. Finished experiments' pages are drawn once and kept on disk
//! ([`page_cache`]); finished runs' series are kept in memory for zooming ([`series_cache`]).
//!
//! The key design choice: the dashboard is read-only. It never writes the log, the blob store
//! or the index, and it does not know the lab's queue or workers (this crate depends on
//! `glassbox-schemas` and `glassbox-ledger` only); everything it shows comes from the index
//! (derived from the log), the blobs, the in-process [`LiveHub`], or what the binary hands in
//! ([`ops::MetricsSource`], [`queue::QueueSource`]).
//! Its only write route is whatever the caller merges in (the signed webhook of
//! `glassbox-github-bot`).

pub mod annotations;
pub mod api;
pub mod catalog;
pub mod chart;
pub mod config;
pub mod error;
pub mod evals;
pub mod extract;
pub mod leaderboards;
pub mod listener;
pub mod live;
pub mod ops;
pub mod page_cache;
pub mod pages;
pub mod queue;
pub mod render_cache;
pub mod samples;
pub mod search;
pub mod series;
pub mod series_cache;
pub mod spec_cache;
pub mod static_log;
pub mod witness_api;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use glassbox_ledger::board::BoardDef;
use glassbox_ledger::index::Index;
use glassbox_ledger::{BlobStore, LabDir};
use glassbox_schemas::BlobHash;

pub use config::WebConfig;
pub use error::WebError;
pub use listener::ServerLimits;
pub use live::{LiveEvent, LiveHub};

/// Largest request body the server accepts (the dashboard is read-only; the webhook sets its
/// own, larger cap on its route).
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// Everything the handlers read. Cheap to clone (all shared).
#[derive(Clone)]
pub struct WebState {
    /// The lab directory: `log/` and `vkey` are served from it.
    pub lab: LabDir,
    /// The blob store (`/blobs/`, specs on the pages): the lab's `blobs/` directory unless the
    /// server was given another store ([`WebState::with_blobs`]).
    pub blobs: Arc<dyn BlobStore>,
    /// The index database (read-only queries through [`Index::pool`]).
    pub index: Index,
    /// What `/metrics` adds from parts of the server this crate does not know (the lab's job
    /// queue).
    pub metric_sources: Arc<Vec<Arc<dyn ops::MetricsSource>>>,
    /// The lab's job queue, for the public queue page (`None`: a dashboard of a published log).
    pub queue: Option<Arc<dyn queue::QueueSource>>,
    /// Live metric points and run-status changes.
    pub live: LiveHub,
    /// Routes merged into [`app`] as they are (the GitHub webhook).
    pub extra: Option<Router>,
    /// The lab's leaderboards (`/boards`), as its config declares them; none by default.
    pub boards: Arc<Vec<BoardDef>>,
    /// The boards derived from the log, kept until it grows (see [`leaderboards`]).
    pub(crate) leaderboards: Arc<leaderboards::Leaderboards>,
    pub(crate) catalog: Arc<catalog::Catalog>,
    /// Rendered experiment pages and live charts (bounded; see [`render_cache`]).
    pub(crate) renders: Arc<render_cache::RenderCache>,
    /// Finished experiments' pages on disk (see [`page_cache`]).
    pub(crate) pages: Arc<page_cache::PageCache>,
    /// Finished runs' whole series, for zooming (see [`series_cache`]).
    pub(crate) series: Arc<series_cache::SeriesCache>,
    /// Flattened specs by blob hash (see [`spec_cache`]).
    pub(crate) specs: Arc<spec_cache::SpecCache>,
    pub(crate) metrics: Arc<ops::RequestMetrics>,
    /// Set when the server starts shutting down, so endless responses (SSE) end and the
    /// graceful shutdown can complete.
    pub(crate) closing: tokio::sync::watch::Sender<bool>,
}

impl std::fmt::Debug for WebState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebState")
            .field("lab", &self.lab.root())
            .field("blobs", &self.blobs.describe())
            .field("index", &self.index.url())
            .field("metric_sources", &self.metric_sources.len())
            .field("queue", &self.queue.is_some())
            .field("extra", &self.extra.is_some())
            .field(
                "boards",
                &self.boards.iter().map(|b| &b.name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl WebState {
    /// State for a lab and its index, without a queue or extra routes; finished pages are kept
    /// in `<lab>/web-cache/` ([`WebState::with_page_cache`] to change that).
    pub fn new(lab: LabDir, index: Index, live: LiveHub) -> Self {
        WebState {
            pages: Arc::new(page_cache::PageCache::new(Some(
                lab.root().join("web-cache"),
            ))),
            series: Arc::new(series_cache::SeriesCache::new(
                series_cache::DEFAULT_MAX_POINTS,
            )),
            specs: Arc::new(spec_cache::SpecCache::new(spec_cache::DEFAULT_MAX_SPECS)),
            blobs: Arc::new(lab.blobs()),
            lab,
            index,
            metric_sources: Arc::new(Vec::new()),
            queue: None,
            live,
            extra: None,
            boards: Arc::new(Vec::new()),
            leaderboards: Arc::new(leaderboards::Leaderboards::default()),
            catalog: Arc::new(catalog::Catalog::default()),
            renders: Arc::new(render_cache::RenderCache::new(
                render_cache::DEFAULT_MAX_BYTES,
            )),
            metrics: Arc::new(ops::RequestMetrics::default()),
            closing: tokio::sync::watch::Sender::new(false),
        }
    }

    /// Keeps finished pages in `dir` instead of `<lab>/web-cache/`, or nowhere (`None`).
    pub fn with_page_cache(mut self, dir: Option<std::path::PathBuf>) -> Self {
        self.pages = Arc::new(page_cache::PageCache::new(dir));
        self
    }

    /// Serves blobs from `blobs` (an object store shared with the workers) instead of the lab
    /// directory's `blobs/`.
    pub fn with_blobs(mut self, blobs: Arc<dyn BlobStore>) -> Self {
        self.blobs = blobs;
        self
    }

    /// A blob's size; `None` when `hash` (`blake3:<hex>`) is malformed or not stored, or the
    /// store cannot be read (logged).
    pub(crate) async fn blob_size(&self, hash: &str) -> Option<u64> {
        let hash: BlobHash = hash.parse().ok()?;
        let blobs = self.blobs.clone();
        match tokio::task::spawn_blocking(move || blobs.size(&hash)).await {
            Ok(Ok(size)) => size,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot read the blob store");
                None
            }
            Err(_) => None,
        }
    }

    /// A small blob's text (a spec), at most `limit` bytes; `None` when malformed, absent,
    /// larger, not UTF-8 or unreadable.
    pub(crate) async fn small_blob_text(&self, hash: &str, limit: u64) -> Option<String> {
        let hash: BlobHash = hash.parse().ok()?;
        let blobs = self.blobs.clone();
        let read = move || -> Option<String> {
            let mut text = String::new();
            let r = blobs.get(&hash).ok()?;
            std::io::Read::read_to_string(&mut std::io::Read::take(r, limit + 1), &mut text)
                .ok()?;
            (text.len() as u64 <= limit).then_some(text)
        };
        tokio::task::spawn_blocking(read).await.ok().flatten()
    }

    /// Adds a source of `/metrics` lines (the lab's queue gauges).
    pub fn with_metrics(mut self, source: Arc<dyn ops::MetricsSource>) -> Self {
        Arc::make_mut(&mut self.metric_sources).push(source);
        self
    }

    /// Shows the lab's job queue on `/queue` and `/api/v1/queue`.
    pub fn with_queue(mut self, source: Arc<dyn queue::QueueSource>) -> Self {
        self.queue = Some(source);
        self
    }

    /// Serves the lab's leaderboards `boards` on `/boards` and `/api/v1/boards` (the lab
    /// config's `[[leaderboard]]`s).
    pub fn with_boards(mut self, boards: Vec<BoardDef>) -> Self {
        self.boards = Arc::new(boards);
        self.leaderboards = Arc::new(leaderboards::Leaderboards::default());
        self
    }

    /// Adds routes to merge into the app (e.g. the webhook).
    pub fn with_extra(mut self, router: Router) -> Self {
        self.extra = Some(router);
        self
    }
}

/// The whole router: pages, API, static log, operations, the extra routes; with request
/// logging, metrics, a body cap and security headers.
pub fn app(state: WebState) -> Router {
    let extra = state.extra.clone();
    let mut router = Router::new()
        .merge(pages::routes())
        .merge(api::routes())
        .merge(static_log::routes())
        .merge(ops::routes())
        .with_state(state.clone())
        // The dashboard's own routes are read-only: no request body is needed, so any is
        // capped small (413). Merged routes (the webhook) keep their own cap.
        .layer(tower_http::limit::RequestBodyLimitLayer::new(
            MAX_BODY_BYTES,
        ));
    if let Some(extra) = extra {
        router = router.merge(extra);
    }
    ops::layers(router, state)
}

/// Serves [`app`] on `listener` under `limits` until `shutdown` resolves; live streams then
/// end, requests in flight get the shutdown grace to finish (see [`listener`]).
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    state: WebState,
    limits: ServerLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), WebError> {
    let closing = state.closing.clone();
    let shutdown = async move {
        shutdown.await;
        tracing::info!("shutting down: finishing requests in flight");
        // Live streams end now; other requests run to completion (within the grace).
        closing.send_replace(true);
    };
    crate::listener::serve_router(listener, app(state), limits, shutdown).await
}

/// Binds `bind` and serves until `shutdown` resolves (see [`serve_on`]).
pub async fn serve(
    state: WebState,
    bind: SocketAddr,
    limits: ServerLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), WebError> {
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .map_err(|e| WebError::Bind {
            addr: bind.to_string(),
            reason: e.to_string(),
        })?;
    tracing::info!(addr = %bind, "serving the dashboard");
    serve_on(listener, state, limits, shutdown).await
}
