//! `/reproduce` and `/evaluate SUITE`: queue work on the experiment's finished run — a re-run
//! from the ledger compared with the recorded result, or its snapshots scored on a suite.

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

pub(crate) async fn evaluate<L: LabPort>(
    bot: &Bot<L>,
    ctx: &CommandContext,
    suite: &glassbox_schemas::eval::SuiteName,
) -> Result<(), BotError> {
    match bot.lab.evaluate(&ctx.experiment, suite, &ctx.actor).await {
        Ok((jobs, position)) => {
            bot.reply(
                &ctx.issue.key,
                &render::evaluation_queued(&ctx.actor, suite.as_str(), jobs, position),
            )
            .await?;
            Ok(())
        }
        Err(e) => reply_lab_refusal(bot, ctx, "evaluate", e).await,
    }
}
