//! `/reproduce`: queue a re-run from the ledger, to be compared with the recorded result.

use crate::bot::Bot;
use crate::bot::handlers::{CommandContext, reply_lab_refusal};
use crate::error::BotError;
use crate::port::LabPort;
use crate::render;

pub(crate) async fn handle<L: LabPort>(bot: &Bot<L>, ctx: &CommandContext) -> Result<(), BotError> {
    match bot.lab.reproduce(&ctx.experiment, &ctx.actor).await {
        Ok(position) => {
            bot.reply(
                &ctx.issue.key,
                &render::reproduction_queued(&ctx.actor, position),
            )
            .await?;
            Ok(())
        }
        Err(e) => reply_lab_refusal(bot, ctx, "reproduce", e).await,
    }
}
