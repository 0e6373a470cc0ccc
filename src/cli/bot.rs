//! `glassbox bot deliveries [--failed] [--json]` and `glassbox bot redeliver ID`: the GitHub
//! bot's delivery store (`<lab>/bot.db`, written by `glassbox serve`) as a table, and a failed
//! delivery queued again.
//!
//! Glue only: flags, one call to `glassbox_github_bot::Store`, printing. Not here: processing
//! (the running server's bot worker picks a queued delivery up, within a minute).

use std::process::ExitCode;

use anyhow::Context;
use glassbox_github_bot::store::{DeliveryState, RequeueError};
use glassbox_github_bot::{DeliveryId, Store};

use crate::GlobalOpts;
use crate::cli::args;
use crate::exit;

/// `glassbox bot` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum BotCommand {
    /// The webhook deliveries the bot received, newest first: acted, ignored (with the
    /// reason), failed (with the error) or pending.
    Deliveries {
        /// Only the failed ones (those `glassbox bot redeliver` can queue again).
        #[arg(long)]
        failed: bool,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// Print JSON (one array of delivery objects) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Queue a failed delivery again, from the payload the bot kept; the running server's bot
    /// processes it within a minute.
    Redeliver {
        /// The delivery id (`X-GitHub-Delivery`, as `glassbox bot deliveries` lists it).
        id: String,
    },
}

pub fn run(cmd: BotCommand, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    let url = glassbox_lab::handle::bot_store_url(&global.lab);
    args::runtime()?.block_on(async {
        let store = Store::open_existing(&url).await.with_context(|| {
            format!(
                "cannot open the bot's store {url} (does `glassbox serve` run this lab with a [github] section?)"
            )
        })?;
        match cmd {
            BotCommand::Deliveries {
                failed,
                limit,
                json,
            } => {
                let state = failed.then_some(DeliveryState::Failed);
                let list = store.list_deliveries(state, limit).await?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&list)?);
                    return Ok(exit::code(exit::OK));
                }
                if list.is_empty() {
                    println!("no deliveries");
                }
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as i64);
                for d in &list {
                    println!(
                        "{:<38} {:<8} {:<14} attempts {}  {:>6} s ago{}",
                        d.id.0,
                        d.state.as_str(),
                        d.event,
                        d.attempts,
                        (now - d.received_ms).max(0) / 1000,
                        d.detail
                            .as_deref()
                            .map(|r| format!("  ({r})"))
                            .unwrap_or_default()
                    );
                }
                Ok(exit::code(exit::OK))
            }
            BotCommand::Redeliver { id } => match store.requeue(&DeliveryId(id.clone())).await {
                Ok(()) => {
                    println!("delivery {id}: queued again");
                    Ok(exit::code(exit::OK))
                }
                Err(e @ (RequeueError::NotFound(_) | RequeueError::NotFailed { .. })) => {
                    eprintln!("error: {e}");
                    Ok(exit::code(exit::CHECK_FAILED))
                }
                Err(e) => Err(e.into()),
            },
        }
    })
}
