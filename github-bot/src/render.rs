//! The text of every comment the bot writes, as pure functions of what it reports.
//!
//! Kept apart from the handlers so the wording can be read and tested in one place. Numbers
//! are printed so people can check them: FLOPs in scientific notation, parameters with
//! thousands separators, times in the largest sensible unit. This module does no I/O.

use std::fmt::Write;

use glassbox_schemas::{CostEstimate, RunStatus, SpecError, SpecHash};

use crate::command::{COMMAND_NAMES, Command, HashPin};
use crate::event::IssueAction;
use crate::form::FormProblem;
use crate::ids::Login;
use crate::port::{ApprovalInfo, Cancelled, ExperimentState, ExperimentStatus, RunOutcome, Voided};

/// Hidden marker that opens the validation comment (lets people and tools find it); it is
/// [`comment_marker`] of the kind `validation`.
pub const VALIDATION_MARKER: &str = "<!-- glassbox-bot: validation -->";

/// The hidden marker that opens the bot's comment of `kind` (`validation`, `run:<run>`,
/// `result:<run>`): how the bot finds its own comment again when its store has lost the id.
pub fn comment_marker(kind: &str) -> String {
    format!("<!-- glassbox-bot: {kind} -->")
}

/// `body`, opened by the marker of `kind` unless it already is.
pub fn with_marker(kind: &str, body: &str) -> String {
    let marker = comment_marker(kind);
    if body.starts_with(&marker) {
        body.to_string()
    } else {
        format!("{marker}\n{body}")
    }
}

/// `1234567` -> `1,234,567`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// FLOPs as `1.23e15`.
pub fn flops(x: f64) -> String {
    format!("{x:.3e}")
}

/// Seconds as `42 s`, `3.5 min`, `2.1 h` or `4.0 days`.
pub fn duration(secs: f64) -> String {
    if !secs.is_finite() {
        "unknown".into()
    } else if secs < 60.0 {
        format!("{secs:.1} s")
    } else if secs < 3600.0 {
        format!("{:.1} min", secs / 60.0)
    } else if secs < 86_400.0 {
        format!("{:.1} h", secs / 3600.0)
    } else {
        format!("{:.1} days", secs / 86_400.0)
    }
}

/// The state line of a validation or status comment.
pub fn state_line(status: Option<&ExperimentStatus>) -> String {
    match status.map(|s| &s.state) {
        None | Some(ExperimentState::Proposed) => {
            "waiting for a maintainer's `/approve`".to_string()
        }
        Some(ExperimentState::Queued { position }) => {
            format!("approved; queue position **{position}**")
        }
        Some(ExperimentState::Held) => "approved, on hold (`/unhold` releases it)".into(),
        Some(ExperimentState::Running { run }) => format!("running as `{run}`"),
        Some(ExperimentState::Finished { status }) => format!("finished: **{status}**"),
        Some(ExperimentState::Rejected { reason }) => format!(
            "rejected: {reason} (edits keep the rejection; a maintainer's `/approve` lifts it)"
        ),
        Some(ExperimentState::Cancelled) => "cancelled".into(),
    }
}

/// The validation comment for a valid spec.
pub fn valid_proposal(
    hash: &SpecHash,
    cost: &CostEstimate,
    flops_per_second: f64,
    status: Option<&ExperimentStatus>,
    voided: Option<&ApprovalInfo>,
) -> String {
    let mut s = format!("{VALIDATION_MARKER}\n### ✅ Valid experiment spec\n\n");
    let _ = writeln!(s, "| | |\n|---|---|");
    let _ = writeln!(s, "| spec hash | `{hash}` |");
    let _ = writeln!(
        s,
        "| parameters | {} total, {} active per token |",
        thousands(cost.params_total),
        thousands(cost.params_active)
    );
    let _ = writeln!(
        s,
        "| compute | {} FLOPs ({} training + {} evaluation) over {} tokens |",
        flops(cost.total_flops),
        flops(cost.train_flops),
        flops(cost.eval_flops),
        thousands(cost.train_tokens)
    );
    let _ = writeln!(
        s,
        "| estimated time | {} at {} FLOP/s |",
        duration(cost.seconds_at(flops_per_second)),
        flops(flops_per_second)
    );
    let _ = writeln!(s, "| status | {} |", state_line(status));
    if let Some(v) = voided {
        let _ = write!(
            s,
            "\n⚠️ The spec changed after @{} approved `{}`; that approval is void. A maintainer must `/approve` the new hash.\n",
            v.approver, v.spec_hash
        );
    }
    s
}

/// The validation comment for a form or spec with mistakes: every one, by field.
pub fn invalid_proposal(problems: &[FormProblem], spec_error: Option<&SpecError>) -> String {
    let mut s = format!("{VALIDATION_MARKER}\n### ❌ This proposal needs changes\n\n");
    let mut n = 0;
    for p in problems {
        n += 1;
        let _ = writeln!(s, "- **{}**: {}", p.field, p.message);
    }
    match spec_error {
        Some(SpecError::Invalid(errors)) => {
            for e in errors {
                n += 1;
                match &e.value {
                    Some(v) => {
                        let _ = writeln!(s, "- `{}` = `{}`: {}", e.path, v, e.rule);
                    }
                    None => {
                        let _ = writeln!(s, "- `{}`: {}", e.path, e.rule);
                    }
                }
            }
        }
        Some(other) => {
            n += 1;
            let _ = writeln!(s, "- spec: {other}");
        }
        None => {}
    }
    let _ = write!(
        s,
        "\n{n} problem(s). Edit the issue to fix them; this comment is updated on every edit. Check a spec locally with `glassbox spec check FILE`.\n"
    );
    s
}

/// The validation comment for a valid spec over the lab's budget.
pub fn over_budget(hash: &SpecHash, reasons: &[String]) -> String {
    let mut s = format!(
        "{VALIDATION_MARKER}\n### ⛔ Over the lab's budget\n\nThe spec `{hash}` is valid but is refused:\n\n"
    );
    for r in reasons {
        let _ = writeln!(s, "- {r}");
    }
    s.push_str(
        "\nMake the experiment smaller (fewer steps, a smaller model) and edit the issue.\n",
    );
    s
}

/// A refusal for lack of permission.
pub fn refused(actor: &Login, command: &Command, why: &str) -> String {
    format!("@{actor}, `/{}` was not run: {why}", command.name())
}

/// Who may run maintainer commands.
pub fn who_can(maintainers: &[Login], collaborators: bool, repo: &str) -> String {
    let list: Vec<String> = maintainers.iter().map(|m| format!("@{m}")).collect();
    let mut s = if list.is_empty() {
        "no maintainers are configured".to_string()
    } else {
        format!(
            "it can be run by the lab's maintainers ({})",
            list.join(", ")
        )
    };
    if collaborators {
        let _ = write!(
            s,
            " and by collaborators of {repo} with write, maintain or admin permission"
        );
    }
    s
}

/// Reply to a command with an argument it does not take.
pub fn malformed_command(actor: &Login, name: &str, problem: &str) -> String {
    format!("@{actor}, `/{name}` was not run: {problem}.")
}

/// Reply to `/approve <pin>` when the current spec is not the pinned one.
pub fn approve_pin_mismatch(actor: &Login, pin: &HashPin, current: &SpecHash) -> String {
    format!(
        "@{actor}, `/approve` was not run: you pinned `{pin}`, but the current spec is `{current}`. Review the current spec and `/approve {current}` if it is the one you mean."
    )
}

/// Reply to a successful `/approve`; `lifted` is the reason of the rejection it lifts.
pub fn approved(actor: &Login, hash: &SpecHash, position: u32, lifted: Option<&str>) -> String {
    let mut s =
        format!("✅ Approved by @{actor} for spec `{hash}`; queued at position {position}.");
    if let Some(reason) = lifted {
        let _ = write!(
            s,
            " This lifts the earlier rejection ({reason}); the approval entry records it."
        );
    }
    s.push_str(" Editing the spec voids this approval.");
    s
}

/// Reply to a successful `/reject`.
pub fn rejected(actor: &Login, reason: &str) -> String {
    format!(
        "Rejected by @{actor}: {reason}\n\nThe proposal stays rejected, even when the issue is edited, until a maintainer `/approve`s it (the approval lifts the rejection and is recorded in its place)."
    )
}

/// The reason recorded when an issue event voids an approval, naming who did it.
pub fn closing_reason(action: &IssueAction, sender: &Login) -> String {
    match action {
        IssueAction::Deleted => format!("issue deleted by @{sender}"),
        IssueAction::Transferred => format!("issue transferred by @{sender}"),
        IssueAction::Unlabeled(label) => format!("`{label}` label removed by @{sender}"),
        _ => format!("issue closed by @{sender}"),
    }
}

/// The comment after closing or unlabelling an issue voided its approval.
pub fn voided_by_issue(reason: &str, voided: &Voided) -> String {
    let mut s = format!("🛑 {}", capitalised(reason));
    match &voided.approval {
        Some(a) => {
            let _ = write!(
                s,
                ": the approval by @{} of `{}` is void",
                a.approver, a.spec_hash
            );
        }
        None => s.push_str(": the approval is void"),
    }
    match &voided.job {
        Some(Cancelled::Queued) => s.push_str(" and its job left the queue."),
        Some(Cancelled::Running(run)) => {
            let _ = write!(
                s,
                " and run `{run}` is being stopped; its result will be recorded as `cancelled`."
            );
        }
        None => s.push('.'),
    }
    s.push_str(" This is recorded as a rejection; reopening the issue needs a maintainer's new `/approve`.");
    s
}

fn capitalised(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(first) => first.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// Reply to an unknown command.
pub fn unknown_command(actor: &Login, word: &str, nearest: &str) -> String {
    format!(
        "@{actor}, I don't know `/{word}`. Did you mean `/{nearest}`? `/help` lists every command."
    )
}

/// `/help`.
pub fn help() -> String {
    let mut s = String::from("Commands (one per line, at the start of a line):\n\n");
    for name in COMMAND_NAMES {
        let _ = writeln!(s, "- {}", Command::usage(name));
    }
    s.push_str("\n`/status` and `/help` are open to everyone; the others need a maintainer.\n");
    s
}

/// `/status`.
pub fn status(status: Option<&ExperimentStatus>) -> String {
    match status {
        None => "No valid proposal is recorded for this issue yet.".into(),
        Some(st) => {
            let mut s = format!("Spec `{}`: {}.", st.spec_hash, state_line(Some(st)));
            if let Some(a) = &st.approval {
                let _ = write!(s, " Approved by @{} for `{}`.", a.approver, a.spec_hash);
            }
            s
        }
    }
}

/// The run comment: started, and later progress.
pub fn run_progress(
    run: &str,
    hash: Option<&SpecHash>,
    progress: Option<(u64, u64)>,
    dashboard: &str,
) -> String {
    let mut s = format!("🚀 Run `{run}` started");
    if let Some(h) = hash {
        let _ = write!(s, " for spec `{h}`");
    }
    s.push('.');
    if let Some((step, total)) = progress {
        let pct = if total > 0 {
            100.0 * step as f64 / total as f64
        } else {
            0.0
        };
        let _ = write!(s, " Step {step} of {total} ({pct:.0}%).");
    }
    if !dashboard.is_empty() {
        let _ = write!(
            s,
            " Live metrics: {}/runs/{run}",
            dashboard.trim_end_matches('/')
        );
    }
    s
}

/// The result comment.
pub fn run_result(outcome: &RunOutcome, dashboard: &str) -> String {
    let icon = match outcome.status {
        RunStatus::Succeeded => "✅",
        RunStatus::Diverged => "📉",
        RunStatus::BudgetExceeded => "⏱️",
        RunStatus::Failed => "💥",
        RunStatus::Cancelled => "🛑",
    };
    let mut s = format!("{icon} Run `{}` ended: **{}**", outcome.run, outcome.status);
    if let Some(r) = &outcome.reason {
        let _ = write!(s, " — {r}");
    }
    s.push_str("\n\n");
    if !outcome.final_metrics.is_empty() {
        s.push_str("| metric | final |\n|---|---|\n");
        for (k, v) in &outcome.final_metrics {
            let _ = writeln!(s, "| `{k}` | {v:.4} |");
        }
        s.push('\n');
    }
    if let Some(f) = &outcome.forecast {
        let actual = f
            .actual
            .map(|a| format!("{a:.4}"))
            .unwrap_or_else(|| "not measured".into());
        let _ = writeln!(
            s,
            "Forecast `{}` = {} ± {}; outcome {actual}: **{}**.\n",
            f.metric,
            f.predicted,
            f.tolerance,
            if f.hit { "hit" } else { "miss" }
        );
    }
    let _ = write!(
        s,
        "Recorded as ledger entry {} ([inclusion proof]({})).",
        outcome.ledger_index, outcome.proof_url
    );
    if !dashboard.is_empty() {
        let _ = write!(
            s,
            " Dashboard: {}/runs/{}",
            dashboard.trim_end_matches('/'),
            outcome.run
        );
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(thousands(100), "100");
        assert_eq!(flops(1.5e15), "1.500e15");
        assert_eq!(duration(30.0), "30.0 s");
        assert_eq!(duration(90.0), "1.5 min");
        assert_eq!(duration(7200.0), "2.0 h");
    }

    #[test]
    fn markers_open_the_bots_comments_once() {
        assert_eq!(comment_marker("validation"), VALIDATION_MARKER);
        let once = with_marker("result:run-1", "done");
        assert_eq!(once, "<!-- glassbox-bot: result:run-1 -->\ndone");
        assert_eq!(with_marker("result:run-1", &once), once);
        assert!(!once.contains(&comment_marker("result:run-10")));
    }
}
