//! `/reject <reason>`: record a rejection with its reason. A reason is required, because the
//! rejection is published in the ledger. The proposal stays rejected, whatever its author
//! edits, until a maintainer's `/approve` lifts it.

use crate::bot::Bot;
use crate::bot::handlers::{CommandContext, reply_lab_refusal};
use crate::error::BotError;
use crate::labels::APPROVED;
use crate::port::LabPort;
use crate::render;

pub(crate) async fn handle<L: LabPort>(
    bot: &Bot<L>,
    ctx: &CommandContext,
    reason: &str,
) -> Result<(), BotError> {
    let key = &ctx.issue.key;
    if reason.trim().is_empty() {
        bot.reply(key, &render::reject_needs_reason(&ctx.actor))
            .await?;
        return Ok(());
    }
    match bot.lab.reject(&ctx.experiment, &ctx.actor, reason).await {
        Ok(()) => {
            bot.github
                .remove_label(&key.repo, key.number, APPROVED)
                .await?;
            bot.reply(key, &render::rejected(&ctx.actor, reason))
                .await?;
            Ok(())
        }
        Err(e) => reply_lab_refusal(bot, ctx, "reject", e).await,
    }
}
