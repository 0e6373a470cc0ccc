//! `/cancel`: cancel the queued or running job. A cancelled run still ends in a `result`
//! entry (status `cancelled`); the lab reports it and [`super::run_events`] comments it.

use crate::bot::Bot;
use crate::bot::handlers::{CommandContext, reply_lab_refusal};
use crate::error::BotError;
use crate::labels::APPROVED;
use crate::port::LabPort;
use crate::render;

pub(crate) async fn handle<L: LabPort>(bot: &Bot<L>, ctx: &CommandContext) -> Result<(), BotError> {
    let key = &ctx.issue.key;
    match bot.lab.cancel(&ctx.experiment, &ctx.actor).await {
        Ok(what) => {
            bot.github
                .remove_label(&key.repo, key.number, APPROVED)
                .await?;
            bot.reply(key, &render::cancelled(&ctx.actor, &what))
                .await?;
            Ok(())
        }
        Err(e) => reply_lab_refusal(bot, ctx, "cancel", e).await,
    }
}
