//! `/hold` and `/unhold`: keep an approved proposal from being scheduled, and release it.

use crate::bot::Bot;
use crate::bot::handlers::{CommandContext, reply_lab_refusal};
use crate::error::BotError;
use crate::port::LabPort;
use crate::render;

pub(crate) async fn handle<L: LabPort>(
    bot: &Bot<L>,
    ctx: &CommandContext,
    held: bool,
) -> Result<(), BotError> {
    let name = if held { "hold" } else { "unhold" };
    match bot.lab.set_hold(&ctx.experiment, &ctx.actor, held).await {
        Ok(()) => {
            let text = if held {
                render::held(&ctx.actor)
            } else {
                render::released(&ctx.actor)
            };
            bot.reply(&ctx.issue.key, &text).await?;
            Ok(())
        }
        Err(e) => reply_lab_refusal(bot, ctx, name, e).await,
    }
}
