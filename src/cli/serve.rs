//! `glassbox serve [--bind ADDR] [--config FILE]`: the dashboard, JSON API, live metrics and the
//! log's static read API of `glassbox-web`, over the lab in `--lab`.
//!
//! Glue only: open the lab and its index, bring the index up to date with the log, serve
//! `glassbox_web::app`, and keep the index following the log (every two seconds) while
//! serving, since another process (`glassbox run`) may append. Ctrl-C or SIGTERM starts a
//! graceful shutdown: live streams end, requests in flight finish. Request logs go to stderr
//! (`GLASSBOX_LOG=debug|info|warn|error`, default `info`). Not here yet: the worker, the
//! scheduler and the webhook, which later extend this command.
//!
//! Exit 0 after a clean shutdown; 3 when the lab, index or socket cannot be used.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use glassbox_ledger::index::Index;
use glassbox_ledger::{DirSource, Lab, LogReader, VerifierKey};
use glassbox_web::{LiveHub, WebState};

use crate::GlobalOpts;
use crate::cli::ledger::IndexOpts;
use crate::exit;

/// Listen address when neither `--bind` nor the config file names one.
const DEFAULT_BIND: &str = "127.0.0.1:8080";

/// How often the index is brought up to date with the log while serving.
const SYNC_INTERVAL: Duration = Duration::from_secs(2);

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on [default: the config's `web.bind`, else 127.0.0.1:8080].
    #[arg(long)]
    pub bind: Option<SocketAddr>,
    /// Lab configuration (TOML). Read today: `[web] bind = "ADDR"`; other sections are left
    /// to the parts of `serve` that use them.
    #[arg(long)]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub index: IndexOpts,
}

/// The `[web]` section of the config file.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct WebSection {
    /// Listen address.
    bind: Option<SocketAddr>,
}

fn read_bind(args: &ServeArgs) -> anyhow::Result<SocketAddr> {
    if let Some(b) = args.bind {
        return Ok(b);
    }
    if let Some(path) = &args.config {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read config {}", path.display()))?;
        let table: toml::Table = toml::from_str(&text)
            .with_context(|| format!("config {} is not TOML", path.display()))?;
        if let Some(web) = table.get("web") {
            let web: WebSection = web
                .clone()
                .try_into()
                .with_context(|| format!("config {}: section [web]", path.display()))?;
            if let Some(b) = web.bind {
                return Ok(b);
            }
        }
    }
    Ok(DEFAULT_BIND.parse()?)
}

fn init_logs() {
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

async fn sync_index(lab: &Lab, vkey: &VerifierKey, index: &Index) -> anyhow::Result<u64> {
    let source = DirSource {
        root: lab.root().to_path_buf(),
    };
    let reader = LogReader::open(&source, vkey)?;
    Ok(index.sync(&reader).await?)
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

pub fn run(args: ServeArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    init_logs();
    let bind = read_bind(&args)?;
    let lab = Lab::open(&global.lab)?;
    let vkey = lab.verifier_key()?;
    let url = args.index.url(&lab);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(async move {
        let index = Index::connect(&url).await?;
        let added = sync_index(&lab, &vkey, &index).await?;
        tracing::info!(entries_indexed = added, lab = %lab.root().display(), "index up to date");
        let state = WebState::new(lab.clone(), index.clone(), LiveHub::default());
        let listener = tokio::net::TcpListener::bind(bind)
            .await
            .with_context(|| format!("cannot listen on {bind}"))?;
        let addr = listener.local_addr()?;
        eprintln!("serving the dashboard at http://{addr}/ (Ctrl-C to stop)");
        let server = tokio::spawn(glassbox_web::serve_on(listener, state, shutdown_signal()));
        // The index follows the log while serving; this loop ends when the server does.
        let follow = async {
            loop {
                tokio::time::sleep(SYNC_INTERVAL).await;
                if let Err(e) = sync_index(&lab, &vkey, &index).await {
                    tracing::warn!(error = %format!("{e:#}"), "index sync failed; retrying");
                }
            }
        };
        tokio::select! {
            done = server => done.context("the server task failed")??,
            _ = follow => {}
        }
        index.close().await;
        Ok(exit::code(exit::OK))
    })
}
