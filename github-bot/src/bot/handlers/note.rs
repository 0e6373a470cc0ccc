//! `/note [run-<n>] step <n>|steps <a>-<b>: <text>`: anyone's note on steps of a run, recorded
//! by the lab as an `annotation` entry with the comment's URL. A maintainer's note is marked
//! `maintainer` (the same check as maintainer commands; a failed lookup marks it `community`,
//! never refuses it). The lab refuses a run of another issue, a missing run where the issue has
//! several, and an author over the rate limit; the bot says why.
//!
//! An edited comment's changed `/note` line is a new command (see `handlers`): the lab finds
//! the earlier note of the same comment URL and the new entry supersedes it.

use glassbox_schemas::record::NoteRole;

use crate::bot::Bot;
use crate::bot::handlers::{CommandContext, reply_lab_refusal};
use crate::command::NoteCommand;
use crate::error::BotError;
use crate::ids::CommentId;
use crate::permissions::is_maintainer;
use crate::port::{LabPort, NoteRequest};
use crate::render;

pub(crate) async fn handle<L: LabPort>(
    bot: &Bot<L>,
    ctx: &CommandContext,
    comment: CommentId,
    note: NoteCommand,
) -> Result<(), BotError> {
    let role = match is_maintainer(&bot.config, &bot.github, &ctx.issue.key.repo, &ctx.actor).await
    {
        Some(true) => NoteRole::Maintainer,
        Some(false) | None => NoteRole::Community,
    };
    let request = NoteRequest {
        experiment: ctx.experiment.clone(),
        run: note.run,
        author: ctx.actor.clone(),
        role,
        from_step: note.from_step,
        to_step: note.to_step,
        text: note.text,
        url: format!("{}#issuecomment-{}", ctx.issue.html_url, comment.0),
    };
    let steps = (request.from_step, request.to_step);
    match bot.lab.annotate(request).await {
        Ok(recorded) => {
            let text = render::note_recorded(
                &ctx.actor,
                role,
                steps,
                &recorded,
                &bot.config.dashboard_url,
            );
            bot.reply(&ctx.issue.key, &text).await
        }
        Err(e) => reply_lab_refusal(bot, ctx, "note", e).await,
    }
}
