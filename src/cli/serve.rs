//! `glassbox serve [--bind ADDR] [--config FILE]`: the whole lab on one process — the dashboard,
//! JSON API, live metrics and the log's static read API of `glassbox-web`; the GitHub webhook
//! and the bot (when the config has a `[github]` section); the delivery of result comments; and
//! an in-process worker (unless `--no-worker`: then `glassbox worker` processes train).
//!
//! Glue only: read the config (every problem reported at once, with its key), open the lab,
//! its queue and its index, start `glassbox_lab::service::LabService`, serve `glassbox_web::app`,
//! and keep the index following the log (every second) while serving, since workers in other
//! processes append. Ctrl-C or SIGTERM starts a graceful shutdown: the running job is
//! recorded, live streams end, requests in flight finish. Request logs go to stderr
//! (`GLASSBOX_LOG=debug|info|warn|error`, default `info`).
//!
//! Exit 0 after a clean shutdown; 1 for an invalid config; 3 when the lab, a database or the
//! socket cannot be used.

use glassbox_schemas::RunPhase;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use glassbox_github_bot::config::BotConfig;
use glassbox_lab::worker::RecordedSamples;
use glassbox_lab::worker::{JobEnd, LiveFanout, LiveSink};
use glassbox_lab::{LabConfig, Worker};
use glassbox_ledger::index::Index;
use glassbox_runner::observer::MetricRecord;
use glassbox_schemas::{ExperimentId, RunId};
use glassbox_web::{LiveEvent, LiveHub, ServerLimits, WebConfig, WebState};

use crate::GlobalOpts;
use crate::cli::args::{self, LabArgs};
use crate::exit;
use glassbox_lab::LabHandle;

/// Listen address when neither `--bind` nor the config file names one.
pub const DEFAULT_BIND: &str = "127.0.0.1:8080";

/// How often the index is brought up to date with the log while serving.
const SYNC_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on [default: the config's `web.bind`, else 127.0.0.1:8080].
    #[arg(long)]
    pub bind: Option<SocketAddr>,
    /// The lab configuration (TOML): `[web]`, `[github]` and the lab's `[limits]`, `[queue]`,
    /// `[worker]` sections (see docs/deploy.md).
    #[arg(long, env = "GLASSBOX_CONFIG")]
    pub config: Option<PathBuf>,
    /// The queue database (`sqlite://PATH` or `postgres://...`). Default: `sqlite://<lab>/queue.db`.
    #[arg(long, env = "GLASSBOX_DATABASE_URL")]
    pub database_url: Option<String>,
    /// Where blobs live (a directory, `file:///path` or `s3://bucket/prefix`).
    /// Default: the config's `storage.blobs`, else `<lab>/blobs`.
    #[arg(long, env = "GLASSBOX_BLOBS")]
    pub blobs: Option<String>,
    /// Do not train here: leave the queue to `glassbox worker` processes.
    #[arg(long)]
    pub no_worker: bool,
    /// CPU threads for the in-process worker. Default: all cores.
    #[arg(long)]
    pub threads: Option<usize>,
}

/// The whole serve configuration: the lab's sections plus `[web]` and `[github]`.
#[derive(Debug, Clone, Default)]
pub struct ServeConfig {
    /// `[limits]`, `[queue]`, `[worker]`.
    pub lab: LabConfig,
    /// `[web]`.
    pub web: WebConfig,
    /// `[github]`, with secrets resolved from the environment or files.
    pub github: Option<BotConfig>,
}

/// Reads a serve config; every problem is reported at once, each with its key.
pub fn read_config(path: &std::path::Path) -> anyhow::Result<Result<ServeConfig, Vec<String>>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config {}", path.display()))?;
    let (lab, extra) = match LabConfig::parse_sections(&text, glassbox_lab::config::SERVER_SECTIONS)
    {
        Ok(x) => x,
        Err(problems) => return Ok(Err(problems)),
    };
    let mut problems = Vec::new();
    let mut cfg = ServeConfig {
        lab,
        ..Default::default()
    };
    if let Some(web) = extra.get("web") {
        match WebConfig::from_section(web.clone()) {
            Ok(w) => cfg.web = w,
            Err(mut p) => problems.append(&mut p),
        }
    }
    if let Some(gh) = extra.get("github") {
        match glassbox_github_bot::config_file::from_section(gh.clone()) {
            Ok(b) => cfg.github = Some(b),
            Err(mut p) => problems.append(&mut p),
        }
    }
    Ok(if problems.is_empty() {
        Ok(cfg)
    } else {
        Err(problems)
    })
}

pub fn init_logs() {
    let level = match std::env::var("GLASSBOX_LOG").as_deref() {
        Ok("debug") => tracing::Level::DEBUG,
        Ok("warn") => tracing::Level::WARN,
        Ok("error") => tracing::Level::ERROR,
        Ok("trace") => tracing::Level::TRACE,
        _ => tracing::Level::INFO,
    };
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

/// Live telemetry into the dashboard's hub.
pub struct HubSink(pub LiveHub);

impl LiveSink for HubSink {
    fn metrics(&self, _e: &ExperimentId, run: &RunId, r: &MetricRecord) {
        for (name, value) in r.points() {
            self.0.publish(LiveEvent::Point {
                run: run.0.clone(),
                step: r.step,
                name,
                value,
            });
        }
    }

    fn status(&self, _e: &ExperimentId, run: &RunId, status: RunPhase) {
        self.0.publish(LiveEvent::Status {
            run: run.0.clone(),
            status,
        });
    }

    fn log(&self, _e: &ExperimentId, run: &RunId, line: &str) {
        self.0.publish(LiveEvent::Log {
            run: run.0.clone(),
            line: line.to_string(),
        });
    }

    fn samples(&self, _e: &ExperimentId, _run: &RunId, recorded: RecordedSamples<'_>) {
        self.0
            .publish(LiveEvent::samples(recorded.entry, recorded.samples));
    }
}

/// The lab's queue gauges on the dashboard's `/metrics`.
struct QueueMetrics(glassbox_lab::Queue);

impl glassbox_web::ops::MetricsSource for QueueMetrics {
    fn prometheus_text(&self) -> glassbox_web::ops::MetricsText<'_> {
        Box::pin(async move { self.0.prometheus_text().await.map_err(|e| e.to_string()) })
    }
}

/// The lab's jobs on the dashboard's public queue page.
struct QueueJobs(glassbox_lab::Queue);

/// Open jobs the queue page lists at most.
const QUEUE_PAGE_JOBS: u32 = 500;

impl glassbox_web::queue::QueueSource for QueueJobs {
    fn jobs(&self, finished: u32) -> glassbox_web::queue::QueueFuture<'_> {
        Box::pin(async move {
            let row = |j: glassbox_lab::Job| glassbox_web::queue::QueueJob {
                id: j.id.0,
                kind: j.kind.as_str().to_string(),
                experiment: j.experiment.0.clone(),
                spec_hash: j.spec_hash.to_string(),
                author: j.author.clone(),
                priority: j.priority,
                state: j.state.as_str().to_string(),
                run: j.run_id.as_ref().map(|r| r.0.clone()),
                worker: j.lease_owner.as_ref().map(|w| w.to_string()),
                reason: j.reason.clone(),
                created_at_ms: j.created_at,
                updated_at_ms: j.updated_at,
            };
            let open = self
                .0
                .open_jobs(QUEUE_PAGE_JOBS)
                .await
                .map_err(|e| e.to_string())?;
            let ended = self
                .0
                .recently_ended(finished)
                .await
                .map_err(|e| e.to_string())?;
            Ok(glassbox_web::queue::QueueJobs {
                open: open.into_iter().map(row).collect(),
                finished: ended.into_iter().map(row).collect(),
                now_ms: self.0.clock().now_ms(),
            })
        })
    }
}

/// What a running server needs from its caller.
pub struct ServeParts {
    /// The open lab.
    pub ctx: LabHandle,
    /// The bot's configuration, when GitHub is wired.
    pub github: Option<BotConfig>,
    /// Extra routes (the quickstart's local GitHub stand-in).
    pub extra: Option<axum::Router>,
    /// Train in this process.
    pub worker: bool,
    /// Threads for that worker.
    pub threads: Option<usize>,
    /// More live sinks (the quickstart's progress bar).
    pub live_sinks: Vec<Arc<dyn LiveSink>>,
    /// What one client may cost the listener.
    pub limits: ServerLimits,
}

/// A running lab server.
pub struct Running {
    /// Where it listens.
    pub addr: SocketAddr,
    server: tokio::task::JoinHandle<Result<(), glassbox_web::WebError>>,
    follow: tokio::task::JoinHandle<()>,
    service: glassbox_lab::service::LabService,
    stop: tokio::sync::watch::Sender<bool>,
    index: Index,
}

/// Starts everything on `listener`; returns once the server accepts connections.
pub async fn start(
    parts: ServeParts,
    listener: tokio::net::TcpListener,
) -> anyhow::Result<Running> {
    let ServeParts {
        ctx,
        github,
        extra,
        worker,
        threads,
        live_sinks,
        limits,
    } = parts;
    let index_url = ctx.lab.index_path().display().to_string();
    let index = Index::connect(&index_url).await?;
    let added = ctx.recorder.sync_index(&index).await?;
    tracing::info!(entries_indexed = added, lab = %ctx.lab.root().display(), "index up to date");
    let live = LiveHub::default();
    let worker = worker.then(|| {
        let id = format!("serve-{}", std::process::id());
        let mut opts = ctx.worker_options(&id, crate::GIT_REVISION);
        if let Some(t) = threads {
            opts.threads = t.max(1);
        }
        let mut sinks: Vec<Arc<dyn LiveSink>> = vec![Arc::new(HubSink(live.clone()))];
        sinks.extend(live_sinks);
        Worker::new(ctx.queue.clone(), ctx.recorder.clone(), opts)
            .with_switches(ctx.flow.switches())
            .with_live(Arc::new(LiveFanout(sinks)))
    });
    let bot = github.map(|g| (g, ctx.bot_store_url()));
    let service = glassbox_lab::service::LabService::start(
        ctx.flow.clone(),
        bot,
        worker,
        |end: &JobEnd| {
            if let JobEnd::Recorded(f) = end {
                match &f.unpublished {
                    None => tracing::info!(job = %f.job, run = %f.run, status = %f.ending.status, entry = f.result_entry, "job recorded"),
                    Some(why) => tracing::warn!(job = %f.job, run = %f.run, status = %f.ending.status, entry = f.result_entry, error = %why, "job ended; its result is sequenced but not yet in the log"),
                }
            }
        },
    )
    .await?;
    let mut router = axum::Router::new();
    if let Some(w) = &service.webhook {
        router = router.merge(w.clone());
    }
    if let Some(x) = extra {
        router = router.merge(x);
    }
    let state = WebState::new(ctx.lab.clone(), index.clone(), live.clone())
        .with_blobs(ctx.recorder.blobs().clone())
        .with_metrics(Arc::new(QueueMetrics(ctx.queue.clone())))
        .with_queue(Arc::new(QueueJobs(ctx.queue.clone())))
        .with_boards(ctx.config.leaderboards.clone())
        .with_extra(router);
    let addr = listener.local_addr()?;
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let mut server_stop = stop_rx.clone();
    let server = tokio::spawn(glassbox_web::serve_on(
        listener,
        state,
        limits,
        async move {
            let _ = server_stop.wait_for(|s| *s).await;
        },
    ));
    // The index follows the log (appended by this process's worker or by others).
    let follow = ctx
        .recorder
        .clone()
        .follow_index(index.clone(), SYNC_INTERVAL, stop_rx);
    Ok(Running {
        addr,
        server,
        follow,
        service,
        stop,
        index,
    })
}

impl Running {
    /// Graceful shutdown: the worker records its job, requests in flight finish.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        self.service.shutdown().await?;
        let _ = self.stop.send(true);
        self.server.await.context("the server task failed")??;
        let _ = self.follow.await;
        self.index.close().await;
        Ok(())
    }
}

pub fn run(args: ServeArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    init_logs();
    let config = match &args.config {
        Some(p) => match read_config(p)? {
            Ok(c) => c,
            Err(problems) => {
                eprintln!("invalid config {}:", p.display());
                for p in problems {
                    eprintln!("  {p}");
                }
                return Ok(exit::code(exit::CHECK_FAILED));
            }
        },
        None => ServeConfig::default(),
    };
    let bind = args
        .bind
        .or(config.web.bind)
        .unwrap_or_else(|| DEFAULT_BIND.parse().unwrap_or_else(|_| unreachable!()));
    args::runtime()?.block_on(async move {
        let lab_args = LabArgs {
            database_url: args.database_url.clone(),
            config: None,
            blobs: args.blobs.clone(),
        };
        // Without --config, the lab's own `<lab>/lab.toml` (if any) applies, as for workers.
        let lab_config = args.config.is_some().then(|| config.lab.clone());
        let mut ctx = args::open_with(global, &lab_args, false, lab_config).await?;
        let public = config
            .web
            .public_url
            .clone()
            .unwrap_or_else(|| format!("http://{bind}"));
        ctx.flow =
            glassbox_lab::Flow::new(ctx.queue.clone(), ctx.recorder.clone(), ctx.config.clone())
                .with_public_url(&public);
        let listener = tokio::net::TcpListener::bind(bind)
            .await
            .with_context(|| format!("cannot listen on {bind}"))?;
        let github = config.github.clone();
        let has_bot = github.is_some();
        let running = start(
            ServeParts {
                ctx,
                github,
                extra: None,
                worker: !args.no_worker,
                threads: args.threads,
                live_sinks: Vec::new(),
                limits: config.web.server_limits().unwrap_or_default(),
            },
            listener,
        )
        .await?;
        eprintln!(
            "serving the lab at http://{}/ ({}, {}; Ctrl-C to stop)",
            running.addr,
            if has_bot {
                "GitHub webhook at /github/webhook"
            } else {
                "no [github] section: no webhook"
            },
            if args.no_worker {
                "no in-process worker"
            } else {
                "training in this process"
            }
        );
        crate::cli::worker::shutdown_signal().await;
        eprintln!("shutting down: recording the running job, finishing requests");
        running.shutdown().await?;
        Ok(exit::code(exit::OK))
    })
}
