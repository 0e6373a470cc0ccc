//! Dispatch of webhook events to handlers: issue events to [`proposal`], comment commands to
//! one file per command, as in bors's `handlers/`.
//!
//! A comment is acted on only when it is on an experiment issue (not a pull request) and neither
//! written nor edited by the bot itself or another bot. A created comment runs all its
//! commands; an edited one only those not in its previous text. The actor of every command is
//! the event's `sender` (for an edit, the editor). A command runs once per (comment id, command
//! line), whatever delivery carries it. Every command is permission-checked
//! ([`crate::permissions`]) before its handler runs; unknown commands get the nearest name.
//!
//! Issue events are applied in GitHub's order (`updated_at`); closing, deleting, transferring
//! or unlabelling an experiment issue goes to [`closed`].

pub mod approve;
pub mod cancel;
pub mod closed;
pub mod help;
pub mod hold;
pub mod note;
pub mod proposal;
pub mod reject;
pub mod reproduce;
pub mod rerun;
pub mod run_events;
pub mod status;

use glassbox_schemas::ExperimentId;

use crate::bot::{Bot, Handled, experiment_id, is_experiment_issue};
use crate::command::{Command, ParsedCommand, new_commands, parse_commands};
use crate::error::BotError;
use crate::event::{CommentAction, IssueAction, IssueData, WebhookEvent};
use crate::ids::Login;
use crate::labels::EXPERIMENT_LABEL;
use crate::permissions::{Decision, authorize};
use crate::port::LabPort;
use crate::render;

/// Who runs a command where.
#[derive(Debug, Clone)]
pub struct CommandContext {
    /// The issue (as of the comment event).
    pub issue: IssueData,
    /// Its experiment id.
    pub experiment: ExperimentId,
    /// Who runs the command: the event's sender (for an edited comment, the editor).
    pub actor: Login,
    /// The comment the command is in.
    pub comment: crate::ids::CommentId,
}

pub(crate) async fn dispatch<L: LabPort>(
    bot: &Bot<L>,
    event: WebhookEvent,
) -> Result<Handled, BotError> {
    match event {
        WebhookEvent::Ping { .. } => Ok(Handled::Ignored("`ping` needs no action".into())),
        WebhookEvent::Ignored { reason, .. } => Ok(Handled::Ignored(reason)),
        WebhookEvent::Issue {
            action,
            mut issue,
            sender,
            installation,
        } => {
            match bot.config.scope(Some(&issue.key.repo), installation) {
                Ok(repo) => issue.key.repo = repo.clone(),
                Err(e) => return Ok(Handled::Ignored(e.to_string())),
            }
            issue_event(bot, action, issue, sender).await
        }
        WebhookEvent::Comment {
            action,
            mut issue,
            comment,
            sender,
            sender_is_bot,
            installation,
        } => {
            match bot.config.scope(Some(&issue.key.repo), installation) {
                Ok(repo) => issue.key.repo = repo.clone(),
                Err(e) => return Ok(Handled::Ignored(e.to_string())),
            }
            if sender_is_bot
                || sender == bot.config.bot_login
                || comment.author_is_bot
                || comment.author == bot.config.bot_login
            {
                return Ok(Handled::Ignored(format!(
                    "comment {} by or edited by a bot (@{sender})",
                    comment.id
                )));
            }
            if !is_experiment_issue(&issue) {
                return Ok(Handled::Ignored(format!(
                    "#{} is not an experiment issue",
                    issue.key.number
                )));
            }
            let commands = match &action {
                CommentAction::Created => parse_commands(&comment.body),
                CommentAction::Edited { previous_body } => {
                    new_commands(previous_body.as_deref().unwrap_or(""), &comment.body)
                }
            };
            if commands.is_empty() {
                return Ok(Handled::Ignored(format!(
                    "no new command in comment {}",
                    comment.id
                )));
            }
            // The actor is whoever sent the event: for an edit, the editor, not the author of
            // the comment (Prow and bors do the same).
            let ctx = CommandContext {
                experiment: experiment_id(&issue.key),
                issue,
                actor: sender,
                comment: comment.id,
            };
            let mut ran = 0;
            for c in commands {
                // A (comment, command line) acts once, whatever delivery carries it: a replay
                // under a fresh delivery id, or the same line edited back in.
                let line = c.line();
                if bot.store.command_ran(comment.id, &line).await? {
                    continue;
                }
                run_command(bot, &ctx, c).await?;
                bot.store.record_command(comment.id, &line).await?;
                ran += 1;
            }
            Ok(if ran == 0 {
                Handled::Ignored(format!(
                    "every command in comment {} has already run",
                    comment.id
                ))
            } else {
                Handled::Acted
            })
        }
    }
}

/// An issue event on a served repository: applied unless it is older than the last one
/// applied to the issue (GitHub's `updated_at`), so a replayed or late event never undoes a
/// newer one.
async fn issue_event<L: LabPort>(
    bot: &Bot<L>,
    action: IssueAction,
    issue: IssueData,
    sender: Login,
) -> Result<Handled, BotError> {
    let key = &issue.key;
    if issue.is_pull_request {
        return Ok(Handled::Ignored(format!(
            "#{} is a pull request",
            key.number
        )));
    }
    let experiment = match &action {
        IssueAction::Labeled(name) | IssueAction::Unlabeled(name) => name == EXPERIMENT_LABEL,
        _ => is_experiment_issue(&issue),
    };
    if !experiment {
        return Ok(Handled::Ignored(format!(
            "#{} is not an experiment issue",
            key.number
        )));
    }
    let updated_at = issue.updated_at.map(|t| t.unix_timestamp());
    if let Some(t) = updated_at
        && let Some(last) = bot.store.issue_version(key).await?
        && t < last
    {
        return Ok(Handled::Ignored(format!(
            "`issues.{}` of {key} is older (updated_at {t}) than the last event applied ({last})",
            action.name()
        )));
    }
    let handled = match &action {
        IssueAction::Opened
        | IssueAction::Edited
        | IssueAction::Reopened
        | IssueAction::Labeled(_) => {
            proposal::handle(bot, &issue).await?;
            Handled::Acted
        }
        IssueAction::Closed
        | IssueAction::Deleted
        | IssueAction::Transferred
        | IssueAction::Unlabeled(_) => closed::handle(bot, &issue, &action, &sender).await?,
    };
    if let Some(t) = updated_at {
        bot.store.record_issue_version(key, t).await?;
    }
    Ok(handled)
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
        ParsedCommand::Malformed { name, problem } => {
            bot.reply(
                &ctx.issue.key,
                &render::malformed_command(&ctx.actor, name, &problem),
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
    if let Decision::Refused(refusal) = decision {
        bot.reply(
            &ctx.issue.key,
            &render::refused(&ctx.actor, &command, &refusal),
        )
        .await?;
        return Ok(());
    }
    match command {
        Command::Approve { pin } => approve::handle(bot, ctx, pin.as_ref()).await,
        Command::Reject { reason } => reject::handle(bot, ctx, &reason).await,
        Command::Hold => hold::handle(bot, ctx, true).await,
        Command::Unhold => hold::handle(bot, ctx, false).await,
        Command::Cancel => cancel::handle(bot, ctx).await,
        Command::Rerun => rerun::handle(bot, ctx).await,
        Command::Reproduce => reproduce::handle(bot, ctx).await,
        Command::Evaluate { suite } => reproduce::evaluate(bot, ctx, &suite).await,
        Command::Status => status::handle(bot, ctx).await,
        Command::Help => help::handle(bot, ctx).await,
        Command::Note(note) => note::handle(bot, ctx, ctx.comment, note).await,
    }
}

/// Replies with a lab refusal (a state that does not allow the command), or propagates a lab
/// failure that is worth retrying.
pub(crate) async fn reply_lab_refusal<L: LabPort>(
    bot: &Bot<L>,
    ctx: &CommandContext,
    command: &str,
    error: crate::port::LabError,
) -> Result<(), BotError> {
    if matches!(error, crate::port::LabError::Unavailable(_)) {
        return Err(error.into());
    }
    bot.reply(
        &ctx.issue.key,
        &render::lab_refusal(&ctx.actor, command, &error),
    )
    .await?;
    Ok(())
}
