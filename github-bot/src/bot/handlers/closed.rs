//! `issues.closed` / `deleted` / `transferred`, and `unlabeled` of the experiment label: the
//! issue no longer asks for a run, so its waiting job is cancelled, a running one stops at its
//! next step, and the approval is void, recorded by the lab as a `rejection` naming the
//! event's sender. Reopening needs a new `/approve`. A deleted or transferred issue gets no
//! comment (it is gone from this repository); the others are told what was voided.

use crate::bot::{Bot, Handled, experiment_id};
use crate::error::BotError;
use crate::event::{IssueAction, IssueData};
use crate::ids::Login;
use crate::labels::APPROVED;
use crate::port::{LabError, LabPort};
use crate::render;

pub(crate) async fn handle<L: LabPort>(
    bot: &Bot<L>,
    issue: &IssueData,
    action: &IssueAction,
    sender: &Login,
) -> Result<Handled, BotError> {
    let key = &issue.key;
    let experiment = experiment_id(key);
    let reason = render::closing_reason(action, sender);
    let voided = match bot.lab.void_approval(&experiment, sender, &reason).await {
        Ok(Some(v)) => v,
        Ok(None) => {
            return Ok(Handled::Ignored(format!(
                "{reason}: no job waits or runs for {experiment}; nothing to void"
            )));
        }
        Err(e @ LabError::Unavailable(_)) => return Err(e.into()),
        Err(e) => {
            tracing::warn!(%experiment, error = %e, "the lab refused to void the approval");
            return Ok(Handled::Ignored(format!("{reason}: the lab refused: {e}")));
        }
    };
    if matches!(action, IssueAction::Closed | IssueAction::Unlabeled(_)) {
        bot.github
            .remove_label(&key.repo, key.number, APPROVED)
            .await?;
        bot.reply(key, &render::voided_by_issue(&reason, &voided))
            .await?;
    }
    Ok(Handled::Acted)
}
