//! `issues.opened` / `edited` / `reopened` / `labeled experiment`: validate the proposal, record
//! it with the lab when valid, and write the one validation comment (edited in place).
//!
//! When the lab reports that the new spec hash voided an approval, the bot says so in a
//! separate comment (so it notifies) and removes the `approved` label. An edit that makes the
//! proposal invalid or over budget withdraws it, which voids a waiting approval the same way.
//! A sweep (`[sweep]` in the spec) is recorded as a set of children and commented as a table:
//! each child's values, hash and cost, and the total one `/approve` would approve.

use crate::bot::{Bot, ProposalCheck, experiment_id};
use crate::error::BotError;
use crate::event::IssueData;
use crate::labels::APPROVED;
use crate::port::{LabError, LabPort};
use crate::render;

/// The `bot_comments` kind of the validation comment.
pub const VALIDATION_COMMENT: &str = "validation";

pub(crate) async fn handle<L: LabPort>(bot: &Bot<L>, issue: &IssueData) -> Result<(), BotError> {
    let check = bot.check_proposal(issue);
    if !matches!(
        check,
        ProposalCheck::Valid { .. } | ProposalCheck::Sweep { .. }
    ) {
        withdraw(bot, issue).await?;
    }
    let body = match check {
        ProposalCheck::Invalid {
            problems,
            spec_error,
        } => render::invalid_proposal(&problems, spec_error.as_ref()),
        ProposalCheck::OverBudget { hash, breaches } => render::over_budget(&hash, &breaches),
        ProposalCheck::Sweep { sweep, costs } => {
            let hash = sweep.sweep.parent_hash;
            let table = (*sweep).clone();
            match bot.lab.record_sweep(*sweep).await {
                Ok(recorded) => {
                    if !recorded.voided.is_empty() {
                        bot.github
                            .remove_label(&issue.key.repo, issue.key.number, APPROVED)
                            .await?;
                    }
                    render::valid_sweep(&table, &costs, bot.config.flops_per_second, &recorded)
                }
                Err(LabError::InvalidState(reason)) => render::proposal_refused(&hash, &reason),
                Err(e) => return Err(e.into()),
            }
        }
        ProposalCheck::Valid { proposal, cost } => {
            let hash = proposal.spec_hash;
            let experiment = proposal.experiment.clone();
            let recorded = match bot.lab.record_proposal(*proposal).await {
                Ok(r) => r,
                // The lab's own rules refused it: say why, and the issue no longer holds a
                // recorded proposal, so an approval of an earlier spec is withdrawn.
                Err(LabError::InvalidState(reason)) => {
                    withdraw(bot, issue).await?;
                    let body = render::proposal_refused(&hash, &reason);
                    bot.upsert_comment(&issue.key, VALIDATION_COMMENT, &body)
                        .await?;
                    return Ok(());
                }
                Err(e) => return Err(e.into()),
            };
            let status = bot.lab.status(&experiment).await?;
            if let Some(v) = &recorded.voided_approval {
                bot.reply(&issue.key, &render::approval_voided_by_edit(&hash, v))
                    .await?;
                bot.github
                    .remove_label(&issue.key.repo, issue.key.number, APPROVED)
                    .await?;
            }
            render::valid_proposal(
                &hash,
                &cost,
                bot.config.flops_per_second,
                status.as_ref(),
                recorded.voided_approval.as_ref(),
                &recorded.over_limits,
            )
        }
    };
    bot.upsert_comment(&issue.key, VALIDATION_COMMENT, &body)
        .await?;
    Ok(())
}

/// Withdraws the issue's proposal from the lab; when that voided a waiting approval, says so
/// on the issue and removes the `approved` label.
async fn withdraw<L: LabPort>(bot: &Bot<L>, issue: &IssueData) -> Result<(), BotError> {
    if let Some(v) = bot
        .lab
        .withdraw_proposal(&experiment_id(&issue.key))
        .await?
    {
        bot.reply(&issue.key, &render::approval_withdrawn(&v))
            .await?;
        bot.github
            .remove_label(&issue.key.repo, issue.key.number, APPROVED)
            .await?;
    }
    Ok(())
}
