//! `/status`: the proposal's state, hash, approval and queue position, with a link to the
//! dashboard's queue page. Open to everyone.

use crate::bot::Bot;
use crate::bot::handlers::CommandContext;
use crate::error::BotError;
use crate::port::LabPort;
use crate::render;

pub(crate) async fn handle<L: LabPort>(bot: &Bot<L>, ctx: &CommandContext) -> Result<(), BotError> {
    let status = bot.lab.status(&ctx.experiment).await?;
    let dashboard = bot.config.dashboard_url.as_str();
    bot.reply(&ctx.issue.key, &render::status(status.as_ref(), dashboard))
        .await?;
    Ok(())
}
