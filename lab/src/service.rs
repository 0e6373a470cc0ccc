//! The lab as a running service (`glassbox serve`, `glassbox quickstart`): the bot wired to the
//! flow, the webhook route, the delivery of outbox notices to the bot, and an optional
//! in-process worker. The web crate serves the router this returns beside its own pages.
//!
//! [`LabService::start`] spawns, on the current runtime:
//! - the bot's intake writer and its delivery worker (GitHub events -> [`Flow`]);
//! - the notice loop: every outbox notice becomes a comment through the bot, and is marked
//!   delivered only once the bot has taken it; a notice that failed transiently backs off on
//!   its own (the others still go out), one GitHub refused is given up;
//! - the integrator, when this process holds the lab's signing key: every entry a process
//!   without the key (a worker on another machine) sequenced is written to the log within
//!   [`INTEGRATE_POLL`];
//! - the in-process [`Worker`], when one is configured (one machine: `serve` trains too).
//!
//! Not here: HTTP pages and APIs (web), the GitHub client's retries (bot).

use std::sync::Arc;
use std::time::Duration;

use glassbox_github_bot::config::BotConfig;
use glassbox_github_bot::{Bot, GitHub, Store, WebhookSettings, start_intake, webhook_router};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use crate::error::LabError;
use crate::flow::Flow;
use crate::outbox::NoticeDelivery;
use crate::worker::{JobEnd, Worker};

/// How often undelivered notices are looked for.
const NOTICE_POLL: Duration = Duration::from_millis(500);

/// How often the integrator looks for sequenced entries no one has integrated yet.
pub const INTEGRATE_POLL: Duration = Duration::from_millis(200);

/// A running lab service.
#[derive(Debug)]
pub struct LabService {
    /// The webhook route (`POST /github/webhook`), when a bot is configured.
    pub webhook: Option<axum::Router>,
    tasks: Vec<JoinHandle<()>>,
    stop: watch::Sender<bool>,
    worker: Option<JoinHandle<Result<(), LabError>>>,
}

impl LabService {
    /// Starts the bot (when `bot` is given, with its delivery store at [`crate::handle::bot_store_url`]), the
    /// notice loop and the in-process `worker`.
    pub async fn start(
        flow: Flow,
        bot: Option<(BotConfig, String)>,
        worker: Option<Worker>,
        mut on_job_end: impl FnMut(&JobEnd) + Send + 'static,
    ) -> Result<Self, LabError> {
        let (stop, stop_rx) = watch::channel(false);
        let mut tasks = Vec::new();
        let mut webhook = None;
        let recorder = flow.recorder().clone();
        if recorder.integrates() {
            tasks.push(tokio::spawn(async move {
                loop {
                    let rec = recorder.clone();
                    match tokio::task::spawn_blocking(move || rec.integrate_pending()).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => tracing::warn!(error = %e, "cannot integrate sequenced entries; retrying"),
                        Err(e) => tracing::warn!(error = %e, "the integrator task failed; retrying"),
                    }
                    tokio::time::sleep(INTEGRATE_POLL).await;
                }
            }));
        }
        if let Some((config, store_url)) = bot {
            let store = Store::open(&store_url)
                .await
                .map_err(|e| LabError::Task(format!("bot store {store_url}: {e}")))?;
            let github = GitHub::from_config(&config)
                .map_err(|e| LabError::Task(format!("GitHub client: {e}")))?;
            let settings = WebhookSettings {
                secrets: config.webhook_secrets.clone(),
                max_body_bytes: config.max_body_bytes,
            };
            let bot = Bot::new(config, github, flow.clone(), store.clone());
            let wake = Arc::new(Notify::new());
            let (intake, intake_task) = start_intake(store, wake.clone());
            tasks.push(intake_task);
            webhook = Some(webhook_router(settings, intake));
            let delivery = glassbox_github_bot::Worker::new(bot.clone(), wake);
            tasks.push(tokio::spawn(delivery.run()));
            let notices_flow = flow.clone();
            tasks.push(tokio::spawn(async move {
                loop {
                    let b = bot.clone();
                    let sent = notices_flow
                        .deliver_notices(|event| {
                            let b = b.clone();
                            async move {
                                match b.handle_lab_event(event).await {
                                    Ok(()) => NoticeDelivery::Delivered,
                                    Err(e) if e.is_transient() => {
                                        NoticeDelivery::Retry(e.to_string())
                                    }
                                    Err(e) => NoticeDelivery::GiveUp(e.to_string()),
                                }
                            }
                        })
                        .await;
                    if let Err(e) = sent {
                        tracing::warn!(error = %e, "cannot read the outbox; retrying");
                    }
                    tokio::time::sleep(NOTICE_POLL).await;
                }
            }));
        }
        let worker = worker.map(|w| {
            tokio::spawn(async move { w.serve(stop_rx, false, move |e| on_job_end(e)).await })
        });
        Ok(Self {
            webhook,
            tasks,
            stop,
            worker,
        })
    }

    /// Stops taking jobs, waits for the running one to be recorded, then stops the bot.
    pub async fn shutdown(self) -> Result<(), LabError> {
        let _ = self.stop.send(true);
        if let Some(w) = self.worker {
            w.await.map_err(|e| LabError::Task(e.to_string()))??;
        }
        for t in self.tasks {
            t.abort();
        }
        Ok(())
    }
}
