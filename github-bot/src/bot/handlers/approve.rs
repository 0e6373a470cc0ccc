//! `/approve [blake3:<hex>]`: approve the spec hash in the issue as it is now, within the
//! author's quota, and queue the job. The approval names the hash, so a later edit cannot ride
//! on it; with a pin, it approves only if the current hash is the pinned one (what the
//! maintainer reviewed), else it answers with both hashes. An approval lifts a rejection. On a
//! sweep it approves every child at once, bound to the sweep file's hash.

use crate::bot::handlers::{CommandContext, proposal, reply_lab_refusal};
use crate::bot::{Bot, ProposalCheck};
use crate::command::HashPin;
use crate::error::BotError;
use crate::labels::APPROVED;
use crate::port::{Approval, ExperimentState, LabPort};
use crate::render;

pub(crate) async fn handle<L: LabPort>(
    bot: &Bot<L>,
    ctx: &CommandContext,
    pin: Option<&HashPin>,
) -> Result<(), BotError> {
    let key = &ctx.issue.key;
    let hash = match bot.check_proposal(&ctx.issue) {
        ProposalCheck::Valid { proposal, .. } => proposal.spec_hash,
        ProposalCheck::Sweep { sweep, .. } => {
            return approve_sweep(bot, ctx, pin, sweep.sweep.parent_hash).await;
        }
        ProposalCheck::Invalid { .. } => {
            bot.reply(key, &render::approve_invalid(&ctx.actor)).await?;
            return Ok(());
        }
        ProposalCheck::OverBudget { breaches, .. } => {
            bot.reply(key, &render::approve_over_budget(&ctx.actor, &breaches))
                .await?;
            return Ok(());
        }
    };
    if let Some(pin) = pin
        && !pin.matches(&hash)
    {
        bot.reply(key, &render::approve_pin_mismatch(&ctx.actor, pin, &hash))
            .await?;
        return Ok(());
    }
    if let Some(max) = bot.config.budget.max_queued_per_author {
        let queued = bot.lab.queued_count(&ctx.issue.author).await?;
        if queued >= max {
            bot.reply(
                key,
                &render::approve_quota_full(&ctx.actor, &ctx.issue.author, queued, max),
            )
            .await?;
            return Ok(());
        }
    }
    let lifted = match bot.lab.status(&ctx.experiment).await? {
        Some(s) => match s.state {
            ExperimentState::Rejected { reason } => Some(reason),
            _ => None,
        },
        None => None,
    };
    let approval = Approval {
        experiment: ctx.experiment.clone(),
        spec_hash: hash,
        approver: ctx.actor.clone(),
    };
    match bot.lab.approve(approval).await {
        Ok(position) => {
            bot.github
                .add_labels(&key.repo, key.number, &[APPROVED])
                .await?;
            bot.reply(
                key,
                &render::approved(&ctx.actor, &hash, position, lifted.as_deref()),
            )
            .await?;
            // Refresh the validation comment so it shows the queue position.
            proposal::handle(bot, &ctx.issue).await
        }
        Err(e) => reply_lab_refusal(bot, ctx, "approve", e).await,
    }
}

/// `/approve` on a sweep: one approval of every child, bound to the sweep file's hash (a pin
/// must name that hash).
async fn approve_sweep<L: LabPort>(
    bot: &Bot<L>,
    ctx: &CommandContext,
    pin: Option<&HashPin>,
    hash: glassbox_schemas::SpecHash,
) -> Result<(), BotError> {
    let key = &ctx.issue.key;
    if let Some(pin) = pin
        && !pin.matches(&hash)
    {
        bot.reply(key, &render::approve_pin_mismatch(&ctx.actor, pin, &hash))
            .await?;
        return Ok(());
    }
    match bot
        .lab
        .approve_sweep(&ctx.experiment, &hash, &ctx.actor)
        .await
    {
        Ok(children) => {
            bot.github
                .add_labels(&key.repo, key.number, &[APPROVED])
                .await?;
            bot.reply(key, &render::sweep_approved(&ctx.actor, &hash, children))
                .await?;
            Ok(())
        }
        Err(e) => reply_lab_refusal(bot, ctx, "approve", e).await,
    }
}
