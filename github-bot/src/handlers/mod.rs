//! Dispatch of webhook events to handlers: issue events to [`proposal`], comment commands to
//! one file per command, as in bors's `handlers/`.
//!
//! A comment is acted on only when it is on an experiment issue (not a pull request) and not
//! written by the bot itself or another bot. A created comment runs all its commands; an
//! edited one only those not in its previous text. Every command is permission-checked
//! ([`crate::permissions`]) before its handler runs; unknown commands get the nearest name.

pub mod approve;
pub mod cancel;
pub mod help;
pub mod hold;
pub mod proposal;
pub mod reject;
pub mod reproduce;
pub mod rerun;
pub mod run_events;
pub mod status;

use glassbox_schemas::ExperimentId;

use crate::bot::{Bot, experiment_id, is_experiment_issue};
use crate::command::{Command, ParsedCommand, new_commands, parse_commands};
use crate::error::BotError;
use crate::event::{CommentAction, IssueAction, IssueData, WebhookEvent};
use crate::ids::Login;
use crate::lab::LabPort;
use crate::labels::EXPERIMENT_LABEL;
use crate::permissions::{Decision, authorize};
use crate::render;

/// Who runs a command where.
#[derive(Debug, Clone)]
pub struct CommandContext {
    /// The issue (as of the comment event).
    pub issue: IssueData,
    /// Its experiment id.
    pub experiment: ExperimentId,
    /// Who wrote the command.
    pub actor: Login,
}

pub(crate) async fn dispatch<L: LabPort>(
    bot: &Bot<L>,
    event: WebhookEvent,
) -> Result<(), BotError> {
    match event {
        WebhookEvent::Ping { .. } | WebhookEvent::Ignored { .. } => Ok(()),
        WebhookEvent::Issue { action, issue, .. } => {
            let relevant = match &action {
                IssueAction::Opened | IssueAction::Edited | IssueAction::Reopened => true,
                IssueAction::Labeled(name) => name == EXPERIMENT_LABEL,
            };
            if relevant && is_experiment_issue(&issue) {
                proposal::handle(bot, &issue).await
            } else {
                Ok(())
            }
        }
        WebhookEvent::Comment {
            action,
            issue,
            comment,
        } => {
            if comment.author_is_bot
                || comment.author == bot.config.bot_login
                || !is_experiment_issue(&issue)
            {
                return Ok(());
            }
            let commands = match &action {
                CommentAction::Created => parse_commands(&comment.body),
                CommentAction::Edited { previous_body } => {
                    new_commands(previous_body.as_deref().unwrap_or(""), &comment.body)
                }
            };
            let ctx = CommandContext {
                experiment: experiment_id(&issue.key),
                issue,
                actor: comment.author,
            };
            for c in commands {
                run_command(bot, &ctx, c).await?;
            }
            Ok(())
        }
    }
}

async fn run_command<L: LabPort>(
    bot: &Bot<L>,
    ctx: &CommandContext,
    parsed: ParsedCommand,
) -> Result<(), BotError> {
    let command = match parsed {
        ParsedCommand::Known(c) => c,
        ParsedCommand::Unknown { word, nearest } => {
            bot.reply(
                &ctx.issue.key,
                &render::unknown_command(&ctx.actor, &word, nearest),
            )
            .await?;
            return Ok(());
        }
    };
    let decision = authorize(
        &bot.config,
        &bot.github,
        &ctx.issue.key.repo,
        &ctx.actor,
        &command,
        &ctx.issue.author,
    )
    .await;
    if let Decision::Refused(why) = decision {
        bot.reply(&ctx.issue.key, &render::refused(&ctx.actor, &command, &why))
            .await?;
        return Ok(());
    }
    match command {
        Command::Approve => approve::handle(bot, ctx).await,
        Command::Reject { reason } => reject::handle(bot, ctx, &reason).await,
        Command::Hold => hold::handle(bot, ctx, true).await,
        Command::Unhold => hold::handle(bot, ctx, false).await,
        Command::Cancel => cancel::handle(bot, ctx).await,
        Command::Rerun => rerun::handle(bot, ctx).await,
        Command::Reproduce => reproduce::handle(bot, ctx).await,
        Command::Status => status::handle(bot, ctx).await,
        Command::Help => help::handle(bot, ctx).await,
    }
}

/// Replies with a lab refusal (a state that does not allow the command), or propagates a lab
/// failure that is worth retrying.
pub(crate) async fn reply_lab_refusal<L: LabPort>(
    bot: &Bot<L>,
    ctx: &CommandContext,
    command: &str,
    error: crate::lab::LabError,
) -> Result<(), BotError> {
    if matches!(error, crate::lab::LabError::Unavailable(_)) {
        return Err(error.into());
    }
    bot.reply(
        &ctx.issue.key,
        &format!("@{}, `/{command}` was not run: {error}.", ctx.actor),
    )
    .await?;
    Ok(())
}
