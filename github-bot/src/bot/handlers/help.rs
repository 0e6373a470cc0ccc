//! `/help`: the list of commands. Open to everyone.

use crate::bot::Bot;
use crate::bot::handlers::CommandContext;
use crate::error::BotError;
use crate::port::LabPort;
use crate::render;

pub(crate) async fn handle<L: LabPort>(bot: &Bot<L>, ctx: &CommandContext) -> Result<(), BotError> {
    bot.reply(&ctx.issue.key, &render::help()).await?;
    Ok(())
}
