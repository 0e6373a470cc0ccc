//! The JSON API under `/api/v1`: everything the pages show (experiments, runs, metric series
//! with a step range and downsampling, entries, inclusion proofs, datasets, the ladder,
//! leaderboards, evaluations (a run's, the board, the suites), sweeps, negative results, comparisons, the checkpoint), the live stream of a run as Server-Sent
//! Events, and the OpenAPI document (utoipa) at `/api/v1/openapi.json`.
//!
//! Handlers are thin: they read through `catalog`, `series` and the page modules' loaders, so
//! a page and its API answer agree. Read-only, like the rest of the crate.

use glassbox_ledger::index::queries::EntryFilter as IndexFilter;
use glassbox_schemas::EntryKind;
use std::convert::Infallible;

use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, RawQuery, State};
use axum::http::header;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures_util::Stream;
use glassbox_ledger::merkle::{LeafIndex, TreeSize, leaf_hash};
use glassbox_ledger::{DirSource, LogReader};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast::error::RecvError;
use utoipa::{IntoParams, OpenApi, ToSchema};

use crate::WebState;
use crate::catalog::{
    DatasetRow, ExperimentFilter, ExperimentRow, ForecastCheck, ForecastRow, GateRow, GateRule,
    GateSideRow, ListPage, ListRow, MixtureRow, RunRow, SpecFacts, SpecForecast, SweepLinkRow,
    SweepMemberRow, SweepRow, TokenizedRow, TokenizerRow,
};
use crate::error::WebError;
use crate::extract::{ApiPath, ApiQuery, MAX_INTEGER, at_most, within};
use crate::live::LiveEvent;
use crate::pages::boards::BoardSummary;
use crate::pages::compare::{self, CompareRun};
use crate::pages::data::{
    self as data_pages, DatasetDetail, DocQuery, DocumentView, DomainUse, RunConsumption, TokenSpan,
};
use crate::pages::ladder::{self, Ladder, Law, Rung, Settled};
use crate::pages::ledger::{self, LedgerSummary};
use crate::pages::sweeps::{self, SweepChild, SweepFilter, SweepSummary, SweepView};
use crate::series::{self, MAX_POINTS_PER_LINE};

/// The API's routes.
pub fn routes() -> Router<WebState> {
    Router::new()
        .route("/api/v1", get(index))
        .route("/api/v1/", get(index))
        .route("/api/v1/openapi.json", get(openapi))
        .route("/api/v1/experiments", get(experiments))
        .route("/api/v1/experiments/{*id}", get(experiment))
        .route("/api/v1/runs", get(runs))
        .route("/api/v1/runs/{run}", get(run))
        .route("/api/v1/runs/{run}/metrics", get(metric_names))
        .route("/api/v1/runs/{run}/metrics/{*name}", get(metric_series))
        .route("/api/v1/runs/{run}/series", get(series_batch))
        .route("/api/v1/runs/{run}/live", get(live))
        .route(
            "/api/v1/runs/{run}/annotations",
            get(crate::annotations::run_annotations),
        )
        .route(
            "/api/v1/runs/{run}/samples",
            get(crate::samples::run_samples),
        )
        .route(
            "/api/v1/runs/{run}/evaluations",
            get(crate::evals::run::run_evaluations),
        )
        .route("/api/v1/evals", get(crate::evals::board::evals))
        .route("/api/v1/eval-suites", get(crate::evals::eval_suites))
        .route("/api/v1/entries", get(entries))
        .route("/api/v1/entries/{idx}", get(entry))
        .route("/api/v1/entries/{idx}/proof", get(proof))
        .route("/api/v1/datasets", get(datasets))
        .route("/api/v1/datasets/{hash}", get(dataset))
        .route("/api/v1/datasets/{hash}/documents/{doc}", get(document))
        .route("/api/v1/tokenizers", get(tokenizers))
        .route("/api/v1/runs/{run}/data", get(run_data))
        .route("/api/v1/ladder", get(ladders))
        .route("/api/v1/boards", get(boards))
        .route("/api/v1/boards/{name}", get(board))
        .route("/api/v1/sweeps", get(sweep_list))
        .route("/api/v1/sweeps/{*id}", get(sweep))
        .route("/api/v1/negative", get(negative))
        .route("/api/v1/compare", get(compare_runs))
        .route("/api/v1/ledger", get(ledger_summary))
        .route("/api/v1/queue", get(queue))
}

/// What `GET /api/v1/` answers: where the API's document and collections are.
#[derive(Debug, Serialize, ToSchema)]
pub struct ApiIndex {
    /// The API's name.
    pub name: &'static str,
    /// The OpenAPI document that describes every route.
    pub openapi: &'static str,
    /// Each collection, by name, with its path.
    pub collections: Vec<ApiLink>,
    /// The log in the C2SP tlog-tiles layout (its checkpoint).
    pub log_checkpoint: &'static str,
}

/// One collection of the API.
#[derive(Debug, Serialize, ToSchema)]
pub struct ApiLink {
    /// What it lists.
    pub name: &'static str,
    /// Its path.
    pub href: &'static str,
}

/// The collections [`index`] lists.
const COLLECTIONS: [(&str, &str); 14] = [
    ("experiments", "/api/v1/experiments"),
    ("runs", "/api/v1/runs"),
    ("entries", "/api/v1/entries"),
    ("datasets", "/api/v1/datasets"),
    ("tokenizers", "/api/v1/tokenizers"),
    ("ladder", "/api/v1/ladder"),
    ("boards", "/api/v1/boards"),
    ("evals", "/api/v1/evals"),
    ("eval-suites", "/api/v1/eval-suites"),
    ("sweeps", "/api/v1/sweeps"),
    ("negative", "/api/v1/negative"),
    ("compare", "/api/v1/compare"),
    ("ledger", "/api/v1/ledger"),
    ("openapi", "/api/v1/openapi.json"),
];

/// The API's index: links to the OpenAPI document and to each collection (the job queue
/// only where this dashboard is attached to one).
#[utoipa::path(get, path = "/api/v1/", responses((status = 200, body = ApiIndex)))]
async fn index(State(st): State<WebState>) -> Json<ApiIndex> {
    let mut collections: Vec<ApiLink> = COLLECTIONS
        .iter()
        .map(|&(name, href)| ApiLink { name, href })
        .collect();
    if st.queue.is_some() {
        collections.push(ApiLink {
            name: "queue",
            href: "/api/v1/queue",
        });
    }
    Json(ApiIndex {
        name: "glassbox dashboard API",
        openapi: "/api/v1/openapi.json",
        collections,
        log_checkpoint: "/log/checkpoint",
    })
}

/// The OpenAPI document.
#[derive(Debug, OpenApi)]
#[openapi(
    info(
        title = "glassbox dashboard API",
        description = "Read-only JSON view of an open lab: experiments, runs, metric curves, ledger entries and proofs. The log itself is served in the C2SP tlog-tiles layout at /log/ and blobs at /blobs/."
    ),
    paths(
        index,
        experiments,
        experiment,
        runs,
        run,
        metric_names,
        metric_series,
        series_batch,
        live,
        crate::annotations::run_annotations,
        crate::samples::run_samples,
        crate::evals::run::run_evaluations,
        crate::evals::board::evals,
        crate::evals::eval_suites,
        entries,
        entry,
        proof,
        datasets,
        dataset,
        document,
        tokenizers,
        run_data,
        ladders,
        boards,
        board,
        sweep_list,
        sweep,
        negative,
        compare_runs,
        ledger_summary,
        queue
    ),
    components(schemas(
        ApiIndex,
        ApiLink,
        ListPage,
        ListRow,
        ExperimentDetail,
        ExperimentRow,
        SpecFacts,
        SpecForecast,
        MixtureRow,
        RunRow,
        ForecastRow,
        ForecastCheck,
        MetricNames,
        MetricSeries,
        SeriesBatch,
        EntryRow,
        InclusionProof,
        DatasetRow,
        DatasetDetail,
        DocumentView,
        TokenSpan,
        TokenizerRow,
        TokenizedRow,
        RunConsumption,
        DomainUse,
        Ladder,
        Rung,
        Settled,
        Law,
        BoardSummary,
        SweepSummary,
        SweepView,
        SweepChild,
        SweepRow,
        SweepMemberRow,
        SweepLinkRow,
        GateRule,
        GateRow,
        GateSideRow,
        CompareRun,
        LedgerSummary,
        LiveEvent,
        crate::live::LiveSample,
        crate::annotations::RunAnnotations,
        crate::annotations::RunMark,
        crate::samples::RunSamples,
        crate::samples::SampleRow,
        crate::evals::SuiteKind,
        crate::evals::Outcome,
        crate::evals::ContaminationFigure,
        crate::evals::Evaluation,
        crate::evals::SuiteRow,
        crate::evals::run::RunEvaluations,
        crate::evals::run::SuiteResults,
        crate::evals::board::EvalBoard,
        crate::evals::board::BoardColumn,
        crate::evals::board::BoardRow,
        crate::evals::board::BoardCell,
        crate::queue::QueueView,
        crate::queue::QueueRow,
        crate::queue::QueueJob
    ))
)]
pub struct ApiDoc;

async fn openapi() -> Response {
    match ApiDoc::openapi().to_pretty_json() {
        Ok(json) => ([(header::CONTENT_TYPE, "application/json")], json).into_response(),
        Err(e) => {
            WebError::BadRequest(format!("cannot render the OpenAPI document: {e}")).into_response()
        }
    }
}

/// List experiments.
#[utoipa::path(get, path = "/api/v1/experiments", params(ExperimentFilter),
    responses((status = 200, body = ListPage),
        (status = 400, content_type = "text/plain", description = "a malformed or out-of-range parameter, or a query that does not parse, named in the body")))]
async fn experiments(
    State(st): State<WebState>,
    ApiQuery(f): ApiQuery<ExperimentFilter>,
) -> Result<Json<ListPage>, WebError> {
    let only = crate::search::for_filter(&st.index, f.q.as_deref()).await?;
    let cat = st.catalog.read(&st.index, st.blobs.as_ref()).await?;
    Ok(Json(cat.list(&f, only.as_ref())?))
}

/// One experiment with its runs, forecasts and entries.
#[derive(Debug, Serialize, ToSchema)]
pub struct ExperimentDetail {
    /// The experiment.
    pub experiment: ExperimentRow,
    /// Its status.
    pub status: String,
    /// Its runs.
    pub runs: Vec<RunRow>,
    /// Forecast entries about it.
    pub forecasts: Vec<ForecastRow>,
    /// Its ledger entries, in log order.
    pub entries: Vec<EntryRow>,
}

/// One experiment (the id may contain `/` and `#`, percent-encode `#`).
#[utoipa::path(get, path = "/api/v1/experiments/{id}", params(("id" = String, Path, description = "experiment id")),
    responses((status = 200, body = ExperimentDetail), (status = 404)))]
async fn experiment(
    State(st): State<WebState>,
    Path(id): Path<String>,
) -> Result<Json<ExperimentDetail>, WebError> {
    let (experiment, status, runs, forecasts) = {
        let cat = st.catalog.read(&st.index, st.blobs.as_ref()).await?;
        let e = cat
            .experiments
            .get(&id)
            .ok_or_else(|| WebError::not_found(format!("experiment {id:?}")))?;
        (
            e.clone(),
            e.status(&cat),
            e.runs
                .iter()
                .filter_map(|r| cat.runs.get(r).cloned())
                .collect(),
            e.forecasts
                .iter()
                .filter_map(|i| cat.forecasts.get(i).cloned())
                .collect(),
        )
    };
    let entries = query_entries(
        &st,
        &EntryFilter {
            experiment: Some(id),
            limit: Some(MAX_ENTRIES),
            ..EntryFilter::default()
        },
    )
    .await?;
    Ok(Json(ExperimentDetail {
        experiment,
        status,
        runs,
        forecasts,
        entries,
    }))
}

/// Run filters.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RunFilter {
    /// Only runs with this status.
    pub status: Option<String>,
    /// Only runs of this experiment.
    pub experiment: Option<String>,
    /// Only runs matching this search (the query language of `/experiments?q=`).
    pub q: Option<String>,
}

/// List runs.
#[utoipa::path(get, path = "/api/v1/runs", params(RunFilter), responses((status = 200, body = Vec<RunRow>),
    (status = 400, description = "a query that does not parse: the column and what was expected")))]
async fn runs(
    State(st): State<WebState>,
    Query(f): Query<RunFilter>,
) -> Result<Json<Vec<RunRow>>, WebError> {
    let matched: Option<std::collections::BTreeSet<String>> =
        match f.q.as_deref().map(str::trim).filter(|q| !q.is_empty()) {
            Some(q) => {
                let expr =
                    crate::search::parse(q).map_err(|e| WebError::BadRequest(format!("q: {e}")))?;
                Some(
                    crate::search::search(&st.index, &expr)
                        .await?
                        .into_iter()
                        .filter_map(|h| h.run)
                        .collect(),
                )
            }
            None => None,
        };
    let cat = st.catalog.read(&st.index, st.blobs.as_ref()).await?;
    Ok(Json(
        cat.runs
            .values()
            .filter(|r| matched.as_ref().is_none_or(|m| m.contains(&r.id)))
            .filter(|r| f.status.as_deref().is_none_or(|s| r.status.as_str() == s))
            .filter(|r| {
                f.experiment
                    .as_deref()
                    .is_none_or(|x| r.experiment.as_deref() == Some(x))
            })
            .cloned()
            .collect(),
    ))
}

/// One run.
#[utoipa::path(get, path = "/api/v1/runs/{run}", params(("run" = String, Path)),
    responses((status = 200, body = RunRow), (status = 404)))]
async fn run(
    State(st): State<WebState>,
    Path(run): Path<String>,
) -> Result<Json<RunRow>, WebError> {
    let cat = st.catalog.read(&st.index, st.blobs.as_ref()).await?;
    cat.runs
        .get(&run)
        .cloned()
        .map(Json)
        .ok_or_else(|| WebError::not_found(format!("run {run:?}")))
}

/// A run's metric names.
#[derive(Debug, Serialize, ToSchema)]
pub struct MetricNames {
    /// Run.
    pub run: String,
    /// Metric names (vector metrics one per component: `.../expert_load/3`).
    pub names: Vec<String>,
}

/// A run's metric names.
#[utoipa::path(get, path = "/api/v1/runs/{run}/metrics", params(("run" = String, Path)),
    responses((status = 200, body = MetricNames)))]
async fn metric_names(
    State(st): State<WebState>,
    Path(run): Path<String>,
) -> Result<Json<MetricNames>, WebError> {
    let names = series::metric_names(&st.index, &st.live, &run).await?;
    Ok(Json(MetricNames { run, names }))
}

/// Step range and downsampling.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SeriesQuery {
    /// First step (inclusive).
    #[param(minimum = 0, maximum = 9007199254740991.0)]
    pub from: Option<u64>,
    /// Last step (inclusive).
    #[param(minimum = 0, maximum = 9007199254740991.0)]
    pub to: Option<u64>,
    /// Points at most, LTTB-downsampled within the range (default 2000, 3 to 100000). Ask for
    /// the chart's pixel width: zoomed in far enough, the range holds fewer points than that
    /// and every one is returned.
    #[param(minimum = 3, maximum = 100000)]
    pub max_points: Option<usize>,
}

impl SeriesQuery {
    /// The step range and the point budget, each checked against its documented bounds.
    fn checked(&self) -> Result<(u64, u64, usize), WebError> {
        let from = at_most("from", self.from.unwrap_or(0), MAX_INTEGER)?;
        let to = at_most("to", self.to.unwrap_or(MAX_INTEGER), MAX_INTEGER)?;
        if from > to {
            return Err(WebError::BadRequest(format!(
                "from = {from} is after to = {to}"
            )));
        }
        let max = match self.max_points {
            Some(m) => within("max_points", m as u64, 3, MAX_POINTS_CAP as u64)? as usize,
            None => MAX_POINTS_PER_LINE,
        };
        Ok((from, to, max))
    }
}

/// One metric series.
#[derive(Debug, Serialize, ToSchema)]
pub struct MetricSeries {
    /// Run.
    pub run: String,
    /// Metric.
    pub name: String,
    /// Points in the range before downsampling.
    pub total_points: usize,
    /// `[step, value]` pairs, by step.
    pub points: Vec<(u64, f64)>,
}

/// One metric of a run over a step range, downsampled.
#[utoipa::path(get, path = "/api/v1/runs/{run}/metrics/{name}",
    params(("run" = String, Path), ("name" = String, Path, description = "metric name, slashes included"), SeriesQuery),
    responses((status = 200, body = MetricSeries),
        (status = 400, content_type = "text/plain", description = "a malformed or out-of-range parameter, or from after to, named in the body"),
        (status = 404, content_type = "text/plain", description = "no point of that metric of that run in the range")))]
async fn metric_series(
    State(st): State<WebState>,
    ApiPath((run, name)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<SeriesQuery>,
) -> Result<Json<MetricSeries>, WebError> {
    let (from, to, max) = q.checked()?;
    let (total_points, points) =
        series::ranges(&st, &run, std::slice::from_ref(&name), from, to, max)
            .await?
            .pop()
            .unwrap_or_default();
    if total_points == 0 {
        return Err(WebError::not_found(format!(
            "metric {name:?} of run {run:?} in steps {from}..={to}"
        )));
    }
    Ok(Json(MetricSeries {
        total_points,
        points,
        run,
        name,
    }))
}

/// Several metrics of one run over one step range (what a page of charts asks for at once).
#[derive(Debug, Serialize, ToSchema)]
pub struct SeriesBatch {
    /// Run.
    pub run: String,
    /// One per name asked for, in that order; a metric with no point in the range has
    /// `total_points` 0.
    pub series: Vec<MetricSeries>,
}

/// Metrics asked for at most in one batch.
pub const MAX_BATCH_NAMES: usize = 64;

/// Several metrics of a run over a step range, each downsampled (`?name=a&name=b&from=&to=&max_points=`).
#[utoipa::path(get, path = "/api/v1/runs/{run}/series",
    params(("run" = String, Path), ("name" = Vec<String>, Query, description = "repeat for each metric, 1 to 64", min_items = 1, max_items = 64),
        ("from" = Option<u64>, Query, description = "first step (inclusive)", minimum = 0, maximum = 9007199254740991.0),
        ("to" = Option<u64>, Query, description = "last step (inclusive)", minimum = 0, maximum = 9007199254740991.0),
        ("max_points" = Option<usize>, Query, description = "per metric, as for one metric (default 2000)", minimum = 3, maximum = 100000)),
    responses((status = 200, body = SeriesBatch),
        (status = 400, content_type = "text/plain", description = "a malformed or out-of-range parameter, an unknown one, or too many names, named in the body")))]
async fn series_batch(
    State(st): State<WebState>,
    Path(run): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Json<SeriesBatch>, WebError> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw.as_deref().unwrap_or(""))
        .map_err(|e| WebError::BadRequest(format!("query string: {e}")))?;
    let mut names = Vec::new();
    let mut q = SeriesQuery::default();
    let number = |k: &str, v: &str| -> Result<u64, WebError> {
        v.parse().map_err(|_| {
            WebError::BadRequest(format!(
                "{k} = {v:?}: must be a whole number from 0 to {MAX_INTEGER}"
            ))
        })
    };
    for (k, v) in &pairs {
        match k.as_str() {
            "name" => names.push(v.clone()),
            "from" => q.from = Some(number(k, v)?),
            "to" => q.to = Some(number(k, v)?),
            "max_points" => q.max_points = Some(number(k, v)?.min(usize::MAX as u64) as usize),
            other => {
                return Err(WebError::BadRequest(format!(
                    "unknown parameter {other:?}: use name, from, to, max_points"
                )));
            }
        }
    }
    if names.is_empty() || names.len() > MAX_BATCH_NAMES {
        return Err(WebError::BadRequest(format!(
            "{} names asked for: ask for 1 to {MAX_BATCH_NAMES}",
            names.len()
        )));
    }
    let (from, to, max) = q.checked()?;
    let got = series::ranges(&st, &run, &names, from, to, max).await?;
    Ok(Json(SeriesBatch {
        series: names
            .into_iter()
            .zip(got)
            .map(|(name, (total_points, points))| MetricSeries {
                run: run.clone(),
                name,
                total_points,
                points,
            })
            .collect(),
        run,
    }))
}

/// The most points one metric request returns, whatever it asks for.
pub const MAX_POINTS_CAP: usize = 100_000;

/// Live updates of a run.
#[utoipa::path(get, path = "/api/v1/runs/{run}/live", params(("run" = String, Path)),
    responses((status = 200, content_type = "text/event-stream", body = LiveEvent,
        description = "Server-Sent Events: `point`, `status`, `log` and `samples` events whose data is a LiveEvent; `lagged` when events were skipped")))]
async fn live(
    State(st): State<WebState>,
    Path(run): Path<String>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let rx = st.live.subscribe();
    let closing = st.closing.subscribe();
    let stream = futures_util::stream::unfold(
        (rx, closing, run),
        |(mut rx, mut closing, run)| async move {
            loop {
                let got = tokio::select! {
                    _ = closing.wait_for(|c| *c) => None,
                    got = rx.recv() => Some(got),
                };
                let event = match got? {
                    Ok(ev) if ev.run() == run => {
                        let kind = match &ev {
                            LiveEvent::Point { .. } => "point",
                            LiveEvent::Status { .. } => "status",
                            LiveEvent::Log { .. } => "log",
                            LiveEvent::Samples { .. } => "samples",
                        };
                        let data = serde_json::to_string(&ev).unwrap_or_default();
                        Event::default().event(kind).data(data)
                    }
                    Ok(_) => continue,
                    Err(RecvError::Lagged(n)) => {
                        Event::default().event("lagged").data(n.to_string())
                    }
                    Err(RecvError::Closed) => return None,
                };
                return Some((Ok(event), (rx, closing, run)));
            }
        },
    );
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// Entries returned at most per request.
const MAX_ENTRIES: u32 = 1000;

/// Entry filters.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EntryFilter {
    /// Kind (`proposal`, `result`, ...).
    pub kind: Option<String>,
    /// Experiment.
    pub experiment: Option<String>,
    /// Run.
    pub run: Option<String>,
    /// Only entries with a larger index (paging forward).
    #[param(minimum = 0, maximum = 9007199254740991.0)]
    pub after: Option<u64>,
    /// At most this many (default 1000, 1 to 1000).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
}

/// One ledger entry as indexed.
#[derive(Debug, Serialize, ToSchema)]
pub struct EntryRow {
    /// Leaf index.
    pub idx: u64,
    /// Kind.
    pub kind: String,
    /// Experiment.
    pub experiment: Option<String>,
    /// Run.
    pub run: Option<String>,
    /// Time.
    pub time: String,
    /// The entry (canonical JSON, parsed).
    #[schema(value_type = Object)]
    pub entry: serde_json::Value,
}

async fn query_entries(st: &WebState, f: &EntryFilter) -> Result<Vec<EntryRow>, WebError> {
    let kind = match f.kind.as_deref() {
        None => None,
        Some(k) => match EntryKind::ALL.into_iter().find(|e| e.as_str() == k) {
            Some(kind) => Some(kind),
            // No entry is of a kind that does not exist.
            None => return Ok(Vec::new()),
        },
    };
    let kinds: Vec<EntryKind> = kind.into_iter().collect();
    let rows = st
        .index
        .select_entries(&IndexFilter {
            run: f.run.as_deref(),
            experiment: f.experiment.as_deref(),
            kinds: &kinds,
            from: f.after.map(|a| a.saturating_add(1)),
            newest_first: false,
            limit: Some(f.limit.unwrap_or(MAX_ENTRIES)),
        })
        .await?;
    Ok(rows
        .into_iter()
        .map(|r| EntryRow {
            idx: r.index,
            kind: r.kind,
            experiment: r.experiment,
            run: r.run,
            time: r.time,
            entry: serde_json::from_str(&r.entry).unwrap_or(serde_json::Value::String(r.entry)),
        })
        .collect())
}

/// Ledger entries, in log order.
#[utoipa::path(get, path = "/api/v1/entries", params(EntryFilter), responses((status = 200, body = Vec<EntryRow>),
    (status = 400, content_type = "text/plain", description = "a malformed or out-of-range parameter, named in the body")))]
async fn entries(
    State(st): State<WebState>,
    ApiQuery(f): ApiQuery<EntryFilter>,
) -> Result<Json<Vec<EntryRow>>, WebError> {
    if let Some(a) = f.after {
        at_most("after", a, MAX_INTEGER)?;
    }
    if let Some(l) = f.limit {
        within("limit", u64::from(l), 1, u64::from(MAX_ENTRIES))?;
    }
    Ok(Json(query_entries(&st, &f).await?))
}

/// One ledger entry.
#[utoipa::path(get, path = "/api/v1/entries/{idx}", params(("idx" = u64, Path, description = "leaf index, from 0", minimum = 0, maximum = 9007199254740991.0)),
    responses((status = 200, body = EntryRow),
        (status = 400, content_type = "text/plain", description = "an index that is not a whole number in range, named in the body"),
        (status = 404, content_type = "text/plain", description = "no entry at that index yet")))]
async fn entry(
    State(st): State<WebState>,
    ApiPath(idx): ApiPath<u64>,
) -> Result<Json<EntryRow>, WebError> {
    at_most("idx", idx, MAX_INTEGER)?;
    let mut v = query_entries(
        &st,
        &EntryFilter {
            after: idx.checked_sub(1),
            limit: Some(1),
            ..EntryFilter::default()
        },
    )
    .await?;
    match v.pop() {
        Some(e) if e.idx == idx => Ok(Json(e)),
        _ => Err(WebError::not_found(format!("entry {idx}"))),
    }
}

/// An RFC 6962 inclusion proof of one entry in the tree of the current checkpoint.
#[derive(Debug, Serialize, ToSchema)]
pub struct InclusionProof {
    /// Leaf index.
    pub index: u64,
    /// Tree size the proof is for (the checkpoint's).
    pub tree_size: u64,
    /// SHA-256 leaf hash (`0x00 || entry`), hex.
    pub leaf_hash: String,
    /// Sibling hashes from the leaf up, base64.
    pub proof: Vec<String>,
    /// The Merkle root, base64 (as in the checkpoint).
    pub root: String,
    /// The signed checkpoint the proof leads to.
    pub checkpoint: String,
}

/// Inclusion proof of an entry in the current checkpoint's tree.
#[utoipa::path(get, path = "/api/v1/entries/{idx}/proof", params(("idx" = u64, Path, description = "leaf index, from 0", minimum = 0, maximum = 9007199254740991.0)),
    responses((status = 200, body = InclusionProof),
        (status = 400, content_type = "text/plain", description = "an index that is not a whole number in range, named in the body"),
        (status = 404, content_type = "text/plain", description = "no entry at that index in the current checkpoint")))]
async fn proof(
    State(st): State<WebState>,
    ApiPath(idx): ApiPath<u64>,
) -> Result<Json<InclusionProof>, WebError> {
    at_most("idx", idx, MAX_INTEGER)?;
    let lab = st.lab.clone();
    tokio::task::spawn_blocking(move || -> Result<InclusionProof, WebError> {
        let vkey = lab.verifier_key()?;
        let source = DirSource {
            root: lab.root().to_path_buf(),
        };
        let reader = LogReader::open(&source, &vkey)?;
        let size = reader.size();
        if idx >= size.0 {
            return Err(WebError::not_found(format!(
                "entry {idx} (the log has {} entries)",
                size.0
            )));
        }
        let bytes = reader.entry(LeafIndex(idx))?;
        let path = reader
            .inclusion_proof(LeafIndex(idx), TreeSize(size.0))?
            .map_err(|e| WebError::BadRequest(e.to_string()))?;
        Ok(InclusionProof {
            index: idx,
            tree_size: size.0,
            leaf_hash: leaf_hash(&bytes).to_hex(),
            proof: path.iter().map(|h| h.to_base64()).collect(),
            root: reader.checkpoint.checkpoint.root.to_base64(),
            checkpoint: String::from_utf8_lossy(&reader.checkpoint.to_bytes()).into_owned(),
        })
    })
    .await
    .map_err(|e| WebError::Io(std::io::Error::other(e)))?
    .map(Json)
}

/// Dataset entries.
#[utoipa::path(get, path = "/api/v1/datasets", responses((status = 200, body = Vec<DatasetRow>)))]
async fn datasets(State(st): State<WebState>) -> Result<Json<Vec<DatasetRow>>, WebError> {
    let cat = st.catalog.read(&st.index, st.blobs.as_ref()).await?;
    Ok(Json(cat.datasets.clone()))
}

/// One corpus: its `dataset` entry, its token shards and the runs whose spec names it.
#[utoipa::path(get, path = "/api/v1/datasets/{hash}",
    params(("hash" = String, Path, description = "corpus hash, blake3:<hex>")),
    responses((status = 200, body = DatasetDetail), (status = 404, description = "no dataset entry declares it")))]
async fn dataset(
    State(st): State<WebState>,
    Path(hash): Path<String>,
) -> Result<Json<DatasetDetail>, WebError> {
    let cat = st.catalog.read(&st.index, st.blobs.as_ref()).await?;
    Ok(Json(data_pages::dataset_detail(&cat, &hash)?))
}

/// One document of a corpus (0-based, empty documents not counted), with its token spans
/// under `tokenizer` when given.
#[utoipa::path(get, path = "/api/v1/datasets/{hash}/documents/{doc}",
    params(("hash" = String, Path, description = "corpus hash"), ("doc" = u64, Path, description = "document, from 0", minimum = 0, maximum = 9007199254740991.0), DocQuery),
    responses((status = 200, body = DocumentView), (status = 404, content_type = "text/plain", description = "no such corpus, document or shard"),
        (status = 400, content_type = "text/plain", description = "a malformed or out-of-range parameter, or a blob too large to open or damaged")))]
async fn document(
    State(st): State<WebState>,
    ApiPath((hash, doc)): ApiPath<(String, u64)>,
    ApiQuery(q): ApiQuery<DocQuery>,
) -> Result<Json<DocumentView>, WebError> {
    at_most("doc", doc, MAX_INTEGER)?;
    let detail = {
        let cat = st.catalog.read(&st.index, st.blobs.as_ref()).await?;
        data_pages::dataset_detail(&cat, &hash)?
    };
    tokio::task::spawn_blocking(move || {
        data_pages::document_view(&st, &detail, doc, q.tokenizer.as_deref())
    })
    .await
    .map_err(|e| WebError::Io(std::io::Error::other(e)))?
    .map(Json)
}

/// Stored tokenizers (`tokenizer` entries).
#[utoipa::path(get, path = "/api/v1/tokenizers", responses((status = 200, body = Vec<TokenizerRow>)))]
async fn tokenizers(State(st): State<WebState>) -> Result<Json<Vec<TokenizerRow>>, WebError> {
    let cat = st.catalog.read(&st.index, st.blobs.as_ref()).await?;
    Ok(Json(cat.tokenizers.clone()))
}

/// A run's data: the planned mixture next to the tokens drawn per domain, and
/// `data/<domain>/tokens` over steps.
#[utoipa::path(get, path = "/api/v1/runs/{run}/data", params(("run" = String, Path)),
    responses((status = 200, body = RunConsumption), (status = 404, description = "no such run")))]
async fn run_data(
    State(st): State<WebState>,
    Path(run): Path<String>,
) -> Result<Json<RunConsumption>, WebError> {
    Ok(Json(data_pages::run_data(&st, &run).await?))
}

/// Scaling ladders: rungs, forecasts, fitted law.
#[utoipa::path(get, path = "/api/v1/ladder", responses((status = 200, body = Vec<Ladder>)))]
async fn ladders(State(st): State<WebState>) -> Result<Json<Vec<Ladder>>, WebError> {
    let cat = st.catalog.read(&st.index, st.blobs.as_ref()).await?;
    Ok(Json(ladder::ladders(&cat)))
}

/// The lab's leaderboards, with how many runs each ranks, awaits and lists as failed.
#[utoipa::path(get, path = "/api/v1/boards", responses((status = 200, body = Vec<BoardSummary>)))]
async fn boards(State(st): State<WebState>) -> Result<Json<Vec<BoardSummary>>, WebError> {
    let boards = st.leaderboards.boards(&st).await?;
    Ok(Json(boards.iter().map(BoardSummary::of).collect()))
}

/// One leaderboard as derived from the log (`glassbox_ledger::board::Board`): `name`, `metric`,
/// `direction`, `compute`, `log_size`, and the rows `ranked` (best first, each with `rank`),
/// `awaiting` and `failed` (newest first). A row: `standing`, `experiment`, `title`, `author`,
/// `value`, `compute` (absent when the spec could not be read), `run`, `result_entry`,
/// `reproductions` (`entry`, `outcome`, `worker`, `comparison`, `detail`) and `pareto`.
#[utoipa::path(get, path = "/api/v1/boards/{name}", params(("name" = String, Path, description = "board name")),
    responses((status = 200, body = Object, description = "the board, as `glassbox board --ledger` derives it from a copy of the log"),
        (status = 404, description = "the lab has no board of that name")))]
async fn board(
    State(st): State<WebState>,
    Path(name): Path<String>,
) -> Result<Json<glassbox_ledger::board::Board>, WebError> {
    Ok(Json(st.leaderboards.board(&st, &name).await?))
}

/// Sweeps, newest first, with their gate's state (`?gate=failed` lists the negative results).
#[utoipa::path(get, path = "/api/v1/sweeps", params(SweepFilter),
    responses((status = 200, body = Vec<SweepSummary>), (status = 400, content_type = "text/plain", description = "an unknown gate state")))]
async fn sweep_list(
    State(st): State<WebState>,
    Query(f): Query<SweepFilter>,
) -> Result<Json<Vec<SweepSummary>>, WebError> {
    let cat = st.catalog.read(&st.index, st.blobs.as_ref()).await?;
    Ok(Json(sweeps::sweep_list(&cat, &f)?))
}

/// One sweep: its children with their status and value, the best child, and its gate's
/// decision (the id may contain `/` and `#`, percent-encode `#`).
#[utoipa::path(get, path = "/api/v1/sweeps/{id}", params(("id" = String, Path, description = "the sweep's experiment id")),
    responses((status = 200, body = SweepView), (status = 404)))]
async fn sweep(
    State(st): State<WebState>,
    Path(id): Path<String>,
) -> Result<Json<SweepView>, WebError> {
    let cat = st.catalog.read(&st.index, st.blobs.as_ref()).await?;
    Ok(Json(sweeps::sweep_view(&cat, &id)?))
}

/// Diverged, failed, over-budget and refuted-forecast runs.
#[utoipa::path(get, path = "/api/v1/negative", responses((status = 200, body = Vec<RunRow>)))]
async fn negative(State(st): State<WebState>) -> Result<Json<Vec<RunRow>>, WebError> {
    let cat = st.catalog.read(&st.index, st.blobs.as_ref()).await?;
    Ok(Json(cat.negative().into_iter().cloned().collect()))
}

/// Runs side by side with their flattened specs (`?run=a&run=b`, 2-8 runs).
#[utoipa::path(get, path = "/api/v1/compare", params(("run" = Vec<String>, Query, description = "repeat for each run, 2 to 8 runs", min_items = 2, max_items = 8)),
    responses((status = 200, body = Vec<CompareRun>),
        (status = 400, content_type = "text/plain", description = "fewer than 2 or more than 8 runs, or an unknown parameter"),
        (status = 404, content_type = "text/plain", description = "a run that does not exist")))]
async fn compare_runs(
    State(st): State<WebState>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Vec<CompareRun>>, WebError> {
    let q = compare::parse_query(raw.as_deref())?;
    Ok(Json(compare::load(&st, &q.runs).await?))
}

/// The current checkpoint and verifier key.
#[utoipa::path(get, path = "/api/v1/ledger", responses((status = 200, body = LedgerSummary)))]
async fn ledger_summary(State(st): State<WebState>) -> Result<Json<LedgerSummary>, WebError> {
    Ok(Json(ledger::summary(&st).await?))
}

/// The lab's job queue: running, waiting in the order they will run, held, and the last
/// finished, with estimated durations and starts (404 when this dashboard has no queue).
#[utoipa::path(get, path = "/api/v1/queue",
    responses((status = 200, body = crate::queue::QueueView), (status = 404)))]
async fn queue(State(st): State<WebState>) -> Result<Json<crate::queue::QueueView>, WebError> {
    crate::queue::view(&st)
        .await?
        .map(Json)
        .ok_or_else(|| WebError::not_found("the job queue (this dashboard serves a published log)"))
}
