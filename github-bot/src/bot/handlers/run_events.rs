//! Lab events to comments and labels: a run comment when a run starts (edited in place as it
//! progresses, with the live dashboard link), and a result comment when it ends, whatever the
//! ending, with the final metrics, forecast vs outcome, ledger index and inclusion proof link.
//! Alerts — a run's first anomaly, a stalled run, and a run that diverged or was stopped by
//! its budget — get a comment each, one per (alert kind, run). A reproduction's end gets a
//! comment per `reproduction` entry (a mismatch also the `reproduction-failed` label), and a
//! sweep's promotion gate one comment and a `gate-passed` / `gate-failed` label.
//!
//! Each is safe to deliver again: every comment is found by its marker before one is posted
//! (at most one result comment and one alert of each kind per run, even across a lost store
//! row or a crash after the POST), and labels are added and removed, never toggled.

use crate::bot::Bot;
use crate::error::BotError;
use crate::labels::{GATE_FAILED, GATE_PASSED, REPRODUCTION_FAILED, RUNNING, outcome_labels};
use crate::port::{LabEvent, LabPort};
use crate::render;
use glassbox_schemas::RunStatus;

fn run_comment_kind(run: &str) -> String {
    format!("run:{run}")
}

fn result_comment_kind(run: &str) -> String {
    format!("result:{run}")
}

fn alert_comment_kind(kind: &str, run: &str) -> String {
    format!("alert:{kind}:{run}")
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
        LabEvent::Alert { issue, run, alert } => {
            bot.upsert_comment(
                &issue,
                &alert_comment_kind(alert.kind(), &run.0),
                &render::run_alert(&run.0, &alert, dashboard),
            )
            .await?;
        }
        LabEvent::Reproduced {
            issue,
            run,
            outcome,
            detail,
            comparison,
            worker,
            automatic,
            ledger_index,
        } => {
            bot.upsert_comment(
                &issue,
                &format!("reproduction:{ledger_index}"),
                &render::reproduction_result(
                    &run.0,
                    &outcome,
                    detail.as_deref(),
                    comparison.as_deref(),
                    &worker,
                    automatic,
                    ledger_index,
                    dashboard,
                ),
            )
            .await?;
            if outcome == "differs" {
                bot.github
                    .add_labels(&issue.repo, issue.number, &[REPRODUCTION_FAILED])
                    .await?;
            }
        }
        LabEvent::Evaluated {
            issue,
            run,
            headline,
            outcome,
            contamination,
            ledger_index,
        } => {
            bot.upsert_comment(
                &issue,
                &format!("evaluation:{ledger_index}"),
                &render::evaluation_result(
                    &run.0,
                    &headline,
                    &outcome,
                    contamination,
                    ledger_index,
                    dashboard,
                ),
            )
            .await?;
        }
        LabEvent::Gate {
            issue,
            passed,
            detail,
            ledger_index,
        } => {
            bot.upsert_comment(
                &issue,
                "gate",
                &render::gate_result(passed, &detail, ledger_index),
            )
            .await?;
            let label = if passed { GATE_PASSED } else { GATE_FAILED };
            bot.github
                .add_labels(&issue.repo, issue.number, &[label])
                .await?;
        }
        LabEvent::Finished { issue, result } => {
            bot.upsert_comment(
                &issue,
                &result_comment_kind(&result.run.0),
                &render::run_result(&result, dashboard),
            )
            .await?;
            let status = result.ending.status;
            if matches!(status, RunStatus::Diverged | RunStatus::BudgetExceeded) {
                bot.upsert_comment(
                    &issue,
                    &alert_comment_kind(status.as_str(), &result.run.0),
                    &render::run_stopped_alert(&result, dashboard),
                )
                .await?;
            }
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
