//! Lab events to comments and labels: a run comment when a run starts (edited in place as it
//! progresses, with the live dashboard link), and a result comment when it ends, whatever the
//! ending, with the final metrics, forecast vs outcome, ledger index and inclusion proof link.
//!
//! Each is safe to deliver again: both comments are found by their marker before one is
//! posted (at most one result comment per run, even across a lost store row or a crash after
//! the POST), and labels are added and removed, never toggled.

use crate::bot::Bot;
use crate::error::BotError;
use crate::labels::{RUNNING, outcome_labels};
use crate::port::{LabEvent, LabPort};
use crate::render;

fn run_comment_kind(run: &str) -> String {
    format!("run:{run}")
}

fn result_comment_kind(run: &str) -> String {
    format!("result:{run}")
}

pub(crate) async fn handle<L: LabPort>(bot: &Bot<L>, event: LabEvent) -> Result<(), BotError> {
    let dashboard = bot.config.dashboard_url.as_str();
    match event {
        LabEvent::RunStarted {
            issue,
            run,
            spec_hash,
        } => {
            let body = render::run_progress(&run.0, Some(&spec_hash), None, dashboard);
            bot.upsert_comment(&issue, &run_comment_kind(&run.0), &body)
                .await?;
            bot.github
                .add_labels(&issue.repo, issue.number, &[RUNNING])
                .await?;
        }
        LabEvent::Progress {
            issue,
            run,
            step,
            total_steps,
        } => {
            let body = render::run_progress(&run.0, None, Some((step, total_steps)), dashboard);
            bot.upsert_comment(&issue, &run_comment_kind(&run.0), &body)
                .await?;
        }
        LabEvent::Finished { issue, result } => {
            bot.upsert_comment(
                &issue,
                &result_comment_kind(&result.run.0),
                &render::run_result(&result, dashboard),
            )
            .await?;
            bot.github
                .remove_label(&issue.repo, issue.number, RUNNING)
                .await?;
            let labels = outcome_labels(
                result.ending.status,
                result.forecast.as_ref().map(|f| f.hit),
            );
            bot.github
                .add_labels(&issue.repo, issue.number, &labels)
                .await?;
        }
    }
    Ok(())
}
