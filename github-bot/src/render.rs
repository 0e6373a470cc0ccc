//! The text of every comment the bot writes, as pure functions of what it reports: one
//! function per kind of comment, taking typed inputs. Handlers decide what to say; this module
//! words it, as bors's `comment.rs` does.
//!
//! Kept apart from the handlers so the wording can be read and tested in one place: the
//! snapshot tests in `render/tests.rs`, one `.snap` per comment in `render/snapshots/`.
//! Numbers are printed so people can check them: FLOPs in scientific notation, parameters
//! with thousands separators, times in the largest sensible unit. Not here: deciding
//! anything, and I/O; the texts of errors that other modules own ([`LabError`]'s and a
//! [`HashPin`]'s parse error) are quoted, not written, here.

use std::fmt::Write;

use glassbox_schemas::{CostEstimate, RunStatus, SpecError, SpecHash};

use crate::command::{COMMAND_NAMES, Command, HashPin};
use crate::config::BudgetBreach;
use crate::event::IssueAction;
use crate::form::FormProblem;
use crate::ids::Login;
use crate::permissions::{Maintainers, Refusal};
use crate::port::{
    ApprovalInfo, Cancelled, ExperimentState, ExperimentStatus, LabError, NoteRecorded, RunAlert,
    RunResult, Voided,
};
use glassbox_schemas::record::NoteRole;

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
    over_limits: &[String],
) -> String {
    // A spec over the lab's limits is well-formed but cannot run here: the heading says that
    // first, with what to change, so nobody reads "valid" as "approvable".
    let mut s = if over_limits.is_empty() {
        format!("{VALIDATION_MARKER}\n### ✅ Valid experiment spec\n\n")
    } else {
        let mut s = format!(
            "{VALIDATION_MARKER}\n### ⛔ Valid spec, over the lab's limits\n\nThe proposal is recorded, but `/approve` will be refused until the spec fits:\n\n"
        );
        for p in over_limits {
            let _ = writeln!(s, "- {p}");
        }
        s.push('\n');
        s
    };
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
    let state = if over_limits.is_empty() {
        state_line(status)
    } else {
        "over the lab's limits: cannot be approved until the spec fits".to_string()
    };
    let _ = writeln!(s, "| status | {state} |");
    if let Some(v) = voided {
        let _ = write!(
            s,
            "\n⚠️ The spec changed after @{} approved `{}`; that approval is void. A maintainer must `/approve` the new hash.\n",
            v.approver, v.spec_hash
        );
    }
    s
}

/// The validation comment for a valid spec the lab would not record (an author over the daily
/// proposal limit, a forecast on a metric the run will not report): the lab's reason as given.
pub fn proposal_refused(hash: &SpecHash, reason: &str) -> String {
    format!(
        "{VALIDATION_MARKER}\n### ⛔ Not recorded by the lab\n\nThe spec `{hash}` is valid, but the lab refused to record it: {reason}\n\nNothing was added to the ledger. Edit the issue to try again.\n"
    )
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

/// One broken budget limit, with the numbers.
pub fn budget_breach(breach: &BudgetBreach) -> String {
    match breach {
        BudgetBreach::Flops { needed, limit } => format!(
            "it needs {} FLOPs; the lab's per-proposal limit is {} FLOPs",
            flops(*needed),
            flops(*limit)
        ),
        BudgetBreach::WallTime {
            seconds,
            flops_per_second,
            limit,
        } => format!(
            "it would take about {} s ({}) at {} FLOP/s; the lab's per-proposal limit is {} s",
            seconds.round(),
            duration(*seconds),
            flops(*flops_per_second),
            limit
        ),
    }
}

/// The validation comment for a valid spec over the lab's budget.
pub fn over_budget(hash: &SpecHash, breaches: &[BudgetBreach]) -> String {
    let mut s = format!(
        "{VALIDATION_MARKER}\n### ⛔ Over the lab's budget\n\nThe spec `{hash}` is valid but is refused:\n\n"
    );
    for b in breaches {
        let _ = writeln!(s, "- {}", budget_breach(b));
    }
    s.push_str(
        "\nMake the experiment smaller (fewer steps, a smaller model) and edit the issue.\n",
    );
    s
}

/// A refusal for lack of permission (not a maintainer, permission unchecked, self-approval).
pub fn refused(actor: &Login, command: &Command, refusal: &Refusal) -> String {
    let why = match refusal {
        Refusal::NotMaintainer(who) => format!("only maintainers may run it; {}.", who_can(who)),
        Refusal::PermissionUnchecked(who) => format!(
            "your permission could not be checked with GitHub, so it is denied; {}.",
            who_can(who)
        ),
        Refusal::SelfApproval => {
            "authors cannot approve their own proposal; another maintainer must approve it.".into()
        }
    };
    format!("@{actor}, `/{}` was not run: {why}", command.name())
}

/// Who may run maintainer commands.
pub fn who_can(maintainers: &Maintainers) -> String {
    let Maintainers {
        listed,
        collaborators,
        repo,
    } = maintainers;
    let list: Vec<String> = listed.iter().map(|m| format!("@{m}")).collect();
    let mut s = if list.is_empty() {
        "no maintainers are configured".to_string()
    } else {
        format!(
            "it can be run by the lab's maintainers ({})",
            list.join(", ")
        )
    };
    if *collaborators {
        let _ = write!(
            s,
            " and by collaborators of {repo} with write, maintain or admin permission"
        );
    }
    s
}

/// Reply to a maintainer command that the lab refused in the proposal's current state (the
/// error's text says why: [`LabError`]'s messages are written to be shown).
pub fn lab_refusal(actor: &Login, command: &str, error: &LabError) -> String {
    format!("@{actor}, `/{command}` was not run: {error}.")
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

/// Reply to `/approve` on a proposal whose form or spec has mistakes.
pub fn approve_invalid(actor: &Login) -> String {
    format!(
        "@{actor}, `/approve` was not run: the proposal is not valid; see the validation comment."
    )
}

/// Reply to `/approve` on a valid proposal over the lab's budget.
pub fn approve_over_budget(actor: &Login, breaches: &[BudgetBreach]) -> String {
    let reasons: Vec<String> = breaches.iter().map(budget_breach).collect();
    format!(
        "@{actor}, `/approve` was not run: the proposal is over the lab's budget: {}.",
        reasons.join("; ")
    )
}

/// Reply to `/approve` when the author already has `queued` approved proposals waiting and the
/// limit per author is `limit`.
pub fn approve_quota_full(actor: &Login, author: &Login, queued: u32, limit: u32) -> String {
    format!(
        "@{actor}, `/approve` was not run: @{author} already has {queued} approved proposal(s) waiting; the limit is {limit} per author. Approve this one when one of them has run."
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

/// Reply to `/reject` without a reason.
pub fn reject_needs_reason(actor: &Login) -> String {
    format!(
        "@{actor}, `/reject` needs a reason, which is published with the rejection: `/reject <reason>`."
    )
}

/// Reply to a successful `/reject`.
pub fn rejected(actor: &Login, reason: &str) -> String {
    format!(
        "Rejected by @{actor}: {reason}\n\nThe proposal stays rejected, even when the issue is edited, until a maintainer `/approve`s it (the approval lifts the rejection and is recorded in its place)."
    )
}

/// Reply to a successful `/hold`.
pub fn held(actor: &Login) -> String {
    format!("⏸️ Held by @{actor}; `/unhold` releases it.")
}

/// Reply to a successful `/unhold`.
pub fn released(actor: &Login) -> String {
    format!("▶️ Released by @{actor}; back in the queue.")
}

/// Reply to a successful `/cancel`, saying what it stopped.
pub fn cancelled(actor: &Login, what: &Cancelled) -> String {
    match what {
        Cancelled::Queued => format!("🛑 Cancelled by @{actor}; removed from the queue."),
        Cancelled::Running(run) => format!(
            "🛑 Cancelled by @{actor}; run `{run}` is being stopped and its result will be recorded as `cancelled`."
        ),
    }
}

/// Reply to a successful `/rerun`.
pub fn rerun_queued(actor: &Login, position: u32) -> String {
    format!("🔁 Re-run requested by @{actor}; queued at position {position}.")
}

/// Reply to a successful `/reproduce`.
pub fn reproduction_queued(actor: &Login, position: u32) -> String {
    format!(
        "🔬 Reproduction requested by @{actor}; queued at position {position}. The result is compared with the recorded one."
    )
}

/// The reply to `/evaluate SUITE`.
pub fn evaluation_queued(actor: &Login, suite: &str, jobs: u32, position: u32) -> String {
    format!(
        "📏 Evaluation on `{suite}` requested by @{actor}: {jobs} snapshot{} queued (first at position {position}, below training). The result of the last snapshot is posted here.",
        if jobs == 1 { "" } else { "s" }
    )
}

/// The comment (apart from the validation comment, so it notifies) when an edit gave the spec
/// a new hash, `hash`, and so voided the approval of the old one.
pub fn approval_voided_by_edit(hash: &SpecHash, voided: &ApprovalInfo) -> String {
    format!(
        "⚠️ The spec was edited: its hash is now `{hash}`. The approval by @{} of `{}` is void; a maintainer must `/approve` the new spec.",
        voided.approver, voided.spec_hash
    )
}

/// The comment when an edit made an approved proposal invalid or over budget, which withdrew
/// it and voided the waiting approval.
pub fn approval_withdrawn(voided: &ApprovalInfo) -> String {
    format!(
        "⚠️ The spec was edited and is no longer a valid proposal. The approval by @{} of `{}` is void; a maintainer must `/approve` again once it is fixed.",
        voided.approver, voided.spec_hash
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
        let _ = writeln!(s, "- {}", command_usage(name));
    }
    s.push_str(
        "\n`/status`, `/note` and `/help` are open to everyone; the others need a maintainer.\n",
    );
    s
}

/// One line of `/help`: the command `name`'s syntax and what it does.
fn command_usage(name: &str) -> &'static str {
    match name {
        "approve" => {
            "`/approve [blake3:<hash>]` — approve the current spec (bound to its hash) and queue it; with a hash (or its first 12+ digits), only if that is the current spec; it also lifts a rejection"
        }
        "reject" => "`/reject <reason>` — reject the proposal, recording the reason",
        "hold" => "`/hold` — keep the approved proposal from being scheduled",
        "unhold" => "`/unhold` — release a hold",
        "cancel" => "`/cancel` — cancel the queued or running job",
        "rerun" => "`/rerun` — queue the same spec again",
        "reproduce" => "`/reproduce` — re-run from the ledger and compare with the result",
        "evaluate" => {
            "`/evaluate <suite>` — score the finished run's snapshots on an evaluation suite (its newest version) and post the result"
        }
        "status" => "`/status` — show the state and queue position",
        "note" => {
            "`/note [run-<n>] step <n>|steps <a>-<b>: <text>` — annotate steps of a run (the run may be left out when the issue has one); a maintainer's note is marked as such; editing the comment records a note that supersedes it"
        }
        "help" => "`/help` — this list",
        _ => "",
    }
}

/// `/status`.
pub fn status(status: Option<&ExperimentStatus>, dashboard: &str) -> String {
    match status {
        None => "No valid proposal is recorded for this issue yet.".into(),
        Some(st) => {
            let mut s = format!("Spec `{}`: {}.", st.spec_hash, state_line(Some(st)));
            if let Some(a) = &st.approval {
                let _ = write!(s, " Approved by @{} for `{}`.", a.approver, a.spec_hash);
            }
            if !dashboard.is_empty() {
                let _ = write!(
                    s,
                    " The whole queue, in the order it runs: {}/queue",
                    dashboard.trim_end_matches('/')
                );
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
pub fn run_result(outcome: &RunResult, dashboard: &str) -> String {
    let icon = match outcome.ending.status {
        RunStatus::Succeeded => "✅",
        RunStatus::Diverged => "📉",
        RunStatus::BudgetExceeded => "⏱️",
        RunStatus::Failed => "💥",
        RunStatus::Cancelled => "🛑",
    };
    let mut s = format!(
        "{icon} Run `{}` ended: **{}**",
        outcome.run, outcome.ending.status
    );
    if let Some(r) = &outcome.ending.reason {
        let _ = write!(s, " — {r}");
    }
    s.push_str("\n\n");
    if !outcome.ending.final_metrics.is_empty() {
        s.push_str("| metric | final |\n|---|---|\n");
        for (k, v) in &outcome.ending.final_metrics {
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
    if let Some(q) = &outcome.sample {
        s.push_str(&quoted_sample(q));
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

/// Characters of a completion quoted in a comment at most.
const MAX_QUOTED_CHARS: usize = 600;

/// The model's last completion of its first prompt, as inert text: inside a code fence longer
/// than any run of backticks in it (so it cannot close the fence, and no mention, link, HTML
/// or `</details>` in it is rendered), control characters as pictures, cut to
/// [`MAX_QUOTED_CHARS`].
fn quoted_sample(q: &crate::port::QuotedSample) -> String {
    let cut = |t: &str| -> String {
        let shown = glassbox_schemas::record::control_pictures(t);
        match shown.char_indices().nth(MAX_QUOTED_CHARS) {
            Some((i, _)) => format!("{}…", &shown[..i]),
            None => shown,
        }
    };
    let body = format!("{}⟶{}", cut(&q.prompt), cut(&q.text));
    let longest = body.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    format!(
        "What it writes at step {} (its first prompt, then ⟶ and the model's completion):\n\n{fence}text\n{body}\n{fence}\n\n",
        q.step
    )
}

/// Reply to a recorded `/note`. The note's text is not repeated (it is the comment just above,
/// and the dashboard shows it escaped).
pub fn note_recorded(
    actor: &Login,
    role: NoteRole,
    steps: (u64, u64),
    recorded: &NoteRecorded,
    dashboard: &str,
) -> String {
    let steps = if steps.0 == steps.1 {
        format!("step {}", steps.0)
    } else {
        format!("steps {}–{}", steps.0, steps.1)
    };
    let mut s = format!(
        "📝 @{actor}, your note on `{}` {steps} is recorded as a **{}** note (ledger entry {}",
        recorded.run,
        role.as_str(),
        recorded.entry
    );
    if let Some(old) = recorded.supersedes {
        let _ = write!(s, "; it supersedes entry {old}, which stays in the log");
    }
    s.push_str(").");
    if !dashboard.is_empty() {
        let _ = write!(
            s,
            " It is drawn on the run's charts: {}/runs/{}",
            dashboard.trim_end_matches('/'),
            recorded.run
        );
    }
    s
}

/// The validation comment of a sweep: one row per child (values, hash, cost, time), the total,
/// the best-child metric and the gate, and what one `/approve` does.
pub fn valid_sweep(
    sweep: &crate::port::SweepProposal,
    costs: &[CostEstimate],
    flops_per_second: f64,
    recorded: &crate::port::SweepRecorded,
) -> String {
    let sw = &sweep.sweep;
    let mut s = format!(
        "{VALIDATION_MARKER}\n### ✅ Valid sweep: {} children\n\nSweep hash `{}` ({} mode). One `/approve` approves every child, bound to this hash; any edit voids it.\n\n",
        sw.children.len(),
        sw.parent_hash,
        match sw.mode {
            glassbox_schemas::sweep::SweepMode::Grid => "grid",
            glassbox_schemas::sweep::SweepMode::List => "list",
        }
    );
    let _ = writeln!(s, "| # | values | spec hash | compute | estimated time |");
    let _ = writeln!(s, "|---|---|---|---|---|");
    let mut total = 0.0;
    for (c, cost) in sw.children.iter().zip(costs) {
        total += cost.total_flops;
        let hash = glassbox_schemas::spec_hash(&c.spec)
            .map(|h| format!("`{h}`"))
            .unwrap_or_else(|_| "?".into());
        let _ = writeln!(
            s,
            "| {} | {} | {hash} | {} FLOPs | {} |",
            c.index,
            glassbox_schemas::sweep::describe(&c.values).replace('|', "\\|"),
            flops(cost.total_flops),
            duration(cost.seconds_at(flops_per_second))
        );
    }
    let _ = writeln!(
        s,
        "| | **total** | | **{} FLOPs** | **{}** |",
        flops(total),
        duration(total / flops_per_second)
    );
    if let Some(m) = &sw.metric {
        let _ = write!(s, "\nBest child by `{m}`");
        let _ = writeln!(
            s,
            " ({}).",
            match sw.direction {
                glassbox_schemas::sweep::Direction::Min => "lower is better",
                glassbox_schemas::sweep::Direction::Max => "higher is better",
            }
        );
    }
    if let Some(g) = &sw.gate {
        let _ = writeln!(
            s,
            "\nPromotion gate: the best child's `{}` must beat `{}` by {} when every child has ended.",
            g.metric, g.beats, g.by
        );
    }
    if !recorded.voided.is_empty() {
        let _ = writeln!(
            s,
            "\n⚠️ The sweep changed after approval; {} waiting children left the queue. A maintainer must `/approve` the new hash.",
            recorded.voided.len()
        );
    }
    s
}

/// The reply to `/approve` on a sweep.
pub fn sweep_approved(actor: &Login, hash: &SpecHash, children: u32) -> String {
    format!(
        "✅ Approved by @{actor} for sweep `{hash}`: {children} children queued, each with its own approval entry bound to this hash. Editing the sweep voids this approval."
    )
}

/// The comment when a reproduction of a run ends: it matched, it differs (a negative result,
/// with the first difference), or it could not finish.
#[allow(clippy::too_many_arguments)]
pub fn reproduction_result(
    run: &str,
    outcome: &str,
    detail: Option<&str>,
    comparison: Option<&str>,
    worker: &str,
    automatic: bool,
    ledger_index: u64,
    dashboard: &str,
) -> String {
    let how = match comparison {
        Some("tolerance") => "within the backend-parity tolerances",
        _ => "bit for bit",
    };
    let who = if automatic {
        "The lab's independent reproduction"
    } else {
        "The reproduction"
    };
    let mut s = match outcome {
        "reproduced" => format!(
            "✅ {who} of run `{run}` on worker `{worker}` **matched** its record {how}. Recorded as ledger entry {ledger_index}; the run can now be ranked on the lab's leaderboards."
        ),
        "differs" => format!(
            "❌ {who} of run `{run}` on worker `{worker}` **did not match** its record ({how}): {}. This is a negative result, recorded as ledger entry {ledger_index}; the run is listed as \"reproduction failed\" and is not ranked.",
            detail.unwrap_or("no detail recorded")
        ),
        other => format!(
            "⚠️ {who} of run `{run}` on worker `{worker}` ended **{other}**: {}. Recorded as ledger entry {ledger_index}; the run still awaits reproduction.",
            detail.unwrap_or("no detail recorded")
        ),
    };
    if !dashboard.is_empty() {
        let _ = write!(
            s,
            " Dashboard: {}/runs/{run}",
            dashboard.trim_end_matches('/')
        );
    }
    s
}

/// The comment when an evaluation a maintainer asked for (`/evaluate`) ends. The headline is
/// the lab's own text but may quote an error, so it is shown as inert code (no backticks, no
/// line breaks, at most 300 characters).
pub fn evaluation_result(
    run: &str,
    headline: &str,
    outcome: &str,
    contamination: Option<f64>,
    ledger_index: u64,
    dashboard: &str,
) -> String {
    let inert: String = headline
        .chars()
        .map(|c| if c == '`' || c.is_control() { ' ' } else { c })
        .take(300)
        .collect();
    let mut s = match outcome {
        "evaluated" => format!("📏 Evaluation of run `{run}`: `{inert}`."),
        other => format!("⚠️ Evaluation of run `{run}` ended **{other}**: `{inert}`."),
    };
    if let Some(c) = contamination {
        let _ = write!(
            s,
            " Contamination: {:.1}% of the suite's items share a 13-gram with the run's training data.",
            c * 100.0
        );
    }
    let _ = write!(s, " Recorded as ledger entry {ledger_index}.");
    if !dashboard.is_empty() {
        let _ = write!(
            s,
            " Dashboard: {}/runs/{run}",
            dashboard.trim_end_matches('/')
        );
    }
    s
}

/// The comment when a sweep's promotion gate is decided.
pub fn gate_result(passed: bool, detail: &str, ledger_index: u64) -> String {
    if passed {
        format!("🟢 Promotion gate **passed**: {detail}. Recorded as ledger entry {ledger_index}.")
    } else {
        format!(
            "🔴 Promotion gate **failed**: {detail}. This is a negative result, recorded as ledger entry {ledger_index}."
        )
    }
}

/// The alert comment about a running run: its first anomaly, or a stall.
pub fn run_alert(run: &str, alert: &RunAlert, dashboard: &str) -> String {
    let mut s = match alert {
        RunAlert::Anomaly {
            anomaly,
            ledger_index,
        } => {
            format!(
                "⚠️ Alert on run `{run}`: {}. Recorded as ledger entry {ledger_index}. Later anomalies of this run are drawn on its charts without another comment.",
                anomaly.message(),
            )
        }
        RunAlert::Stalled {
            last_step,
            silent_seconds,
            median_step_seconds,
        } => format!(
            "⏸️ Alert: run `{run}` has **stalled**: no step since step {last_step} for {} (its median step takes {}). Its worker is still alive; a maintainer may `/cancel` it.",
            duration(*silent_seconds),
            duration(*median_step_seconds)
        ),
    };
    if !dashboard.is_empty() {
        let _ = write!(
            s,
            " Dashboard: {}/runs/{run}",
            dashboard.trim_end_matches('/')
        );
    }
    s
}

/// The alert comment when a run stops because it diverged or ran out of budget (beside its
/// result comment, so a watcher of alerts sees every kind the same way).
pub fn run_stopped_alert(outcome: &RunResult, dashboard: &str) -> String {
    let what = match outcome.ending.status {
        RunStatus::Diverged => "**diverged** (non-finite loss or gradients)",
        RunStatus::BudgetExceeded => "was **stopped by its budget**",
        other => other.as_str(),
    };
    let mut s = format!(
        "🚨 Alert: run `{}` {what} after {} steps",
        outcome.run,
        thousands(outcome.ending.steps)
    );
    if let Some(r) = &outcome.ending.reason {
        let _ = write!(s, ": {r}");
    }
    s.push('.');
    if !dashboard.is_empty() {
        let _ = write!(
            s,
            " Dashboard: {}/runs/{}",
            dashboard.trim_end_matches('/'),
            outcome.run
        );
    }
    s
}

#[cfg(test)]
mod tests;
