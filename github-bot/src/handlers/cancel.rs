//! `/cancel`: cancel the queued or running job. A cancelled run still ends in a `result`
//! entry (status `cancelled`); the lab reports it and [`super::run_events`] comments it.

use crate::bot::Bot;
use crate::error::BotError;
use crate::handlers::{CommandContext, reply_lab_refusal};
use crate::labels::APPROVED;
use crate::port::{Cancelled, LabPort};

pub(crate) async fn handle<L: LabPort>(bot: &Bot<L>, ctx: &CommandContext) -> Result<(), BotError> {
    let key = &ctx.issue.key;
    match bot.lab.cancel(&ctx.experiment, &ctx.actor).await {
        Ok(what) => {
            let text = match what {
                Cancelled::Queued => {
                    format!("🛑 Cancelled by @{}; removed from the queue.", ctx.actor)
                }
                Cancelled::Running(run) => format!(
                    "🛑 Cancelled by @{}; run `{run}` is being stopped and its result will be recorded as `cancelled`.",
                    ctx.actor
                ),
            };
            bot.github
                .remove_label(&key.repo, key.number, APPROVED)
                .await?;
            bot.reply(key, &text).await?;
            Ok(())
        }
        Err(e) => reply_lab_refusal(bot, ctx, "cancel", e).await,
    }
}
