//! `/rerun`: queue the approved spec again (a new run of the same hash).

use crate::bot::Bot;
use crate::bot::handlers::{CommandContext, reply_lab_refusal};
use crate::error::BotError;
use crate::port::LabPort;
use crate::render;

pub(crate) async fn handle<L: LabPort>(bot: &Bot<L>, ctx: &CommandContext) -> Result<(), BotError> {
    match bot.lab.rerun(&ctx.experiment, &ctx.actor).await {
        Ok(position) => {
            bot.reply(&ctx.issue.key, &render::rerun_queued(&ctx.actor, position))
                .await?;
            Ok(())
        }
        Err(e) => reply_lab_refusal(bot, ctx, "rerun", e).await,
    }
}
