//! Snapshot tests of every comment the bot writes, rendered from fixed inputs, as bors tests
//! its `comment.rs`: each snapshot in `snapshots/` is the whole text a person reads (markers
//! included where the comment carries one), so a change of wording shows in review as a diff.
//! Not here: when a comment is posted or edited (the scenario tests in `tests/scenarios/`).
//!
//! A mismatch fails `cargo test`. To accept a deliberate change, review the diff and then run
//! `cargo insta test -p glassbox-github-bot --review` (with `cargo-insta` installed) or
//! `INSTA_UPDATE=always cargo test -p glassbox-github-bot render::tests` and commit the
//! `.snap` files; a new comment kind writes its first snapshot the same way. Without
//! `INSTA_UPDATE`, insta writes `.snap.new` files beside the old ones locally, and nothing
//! where `CI` is set (CI fails instead, it never accepts a snapshot).

use std::collections::BTreeMap;

use glassbox_schemas::record::ForecastOutcome;
use glassbox_schemas::{CostEstimate, ExperimentId, FieldError, RunId, RunStatus, SpecError};
use insta::assert_snapshot;

use super::*;
use crate::ids::RepoName;

fn hash_a() -> SpecHash {
    format!("blake3:{}", "ab12".repeat(16)).parse().unwrap()
}

fn hash_b() -> SpecHash {
    format!("blake3:{}", "cd34".repeat(16)).parse().unwrap()
}

fn login(name: &str) -> Login {
    Login::new(name)
}

fn approval_by(name: &str) -> ApprovalInfo {
    ApprovalInfo {
        spec_hash: hash_a(),
        approver: login(name),
    }
}

/// The tiny spec's order of magnitude: 9,830,400 tokens at 2.7e6 FLOPs a token.
fn cost() -> CostEstimate {
    CostEstimate {
        params_total: 1_234_567,
        params_active: 456_789,
        params_active_nonembedding: 400_000,
        flops_per_token: 2.7e6,
        train_tokens: 9_830_400,
        train_flops: 2.654_208e13,
        eval_flops: 1.2e12,
        total_flops: 2.774_208e13,
        memory_bytes: 123_456_789,
    }
}

fn maintainers(collaborators: bool) -> Maintainers {
    Maintainers {
        listed: vec![login("alice"), login("bob")],
        collaborators,
        repo: RepoName::parse("glassbox-lab/glassbox").unwrap(),
    }
}

fn status_of(state: ExperimentState, approval: Option<ApprovalInfo>) -> ExperimentStatus {
    ExperimentStatus {
        spec_hash: hash_a(),
        state,
        approval,
    }
}

/// Every state an experiment can be in, named for its snapshot.
fn every_state() -> Vec<(&'static str, ExperimentStatus)> {
    vec![
        ("proposed", status_of(ExperimentState::Proposed, None)),
        (
            "queued",
            status_of(
                ExperimentState::Queued { position: 3 },
                Some(approval_by("alice")),
            ),
        ),
        (
            "held",
            status_of(ExperimentState::Held, Some(approval_by("alice"))),
        ),
        (
            "running",
            status_of(
                ExperimentState::Running {
                    run: RunId::from("run-000042"),
                },
                Some(approval_by("alice")),
            ),
        ),
        (
            "finished",
            status_of(
                ExperimentState::Finished {
                    status: RunStatus::Diverged,
                },
                Some(approval_by("alice")),
            ),
        ),
        (
            "rejected",
            status_of(
                ExperimentState::Rejected {
                    reason: "too big for the lab this month".into(),
                },
                None,
            ),
        ),
        ("cancelled", status_of(ExperimentState::Cancelled, None)),
    ]
}

/// The end of run `run-000042` as each status reports it.
fn outcome(status: RunStatus) -> RunResult {
    let metrics = |pairs: &[(&str, f64)]| -> BTreeMap<String, f64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    };
    let forecast = |actual: Option<f64>| ForecastOutcome {
        metric: "eval/markov/loss".into(),
        predicted: 1.3,
        tolerance: 0.05,
        actual,
        hit: actual.is_some_and(|a| (a - 1.3_f64).abs() <= 0.05),
    };
    let (final_metrics, forecast, reason) = match status {
        RunStatus::Succeeded => (
            metrics(&[("eval/markov/loss", 1.3213), ("train/loss", 1.28766)]),
            Some(forecast(Some(1.3213))),
            None,
        ),
        RunStatus::Diverged => (
            metrics(&[("train/loss", f64::NAN)]),
            Some(forecast(None)),
            Some("loss became NaN at step 212".to_string()),
        ),
        RunStatus::BudgetExceeded => (
            metrics(&[("eval/markov/loss", 1.4213)]),
            Some(forecast(Some(1.4213))),
            Some("the lab's wall-time limit of 3600 s was reached at step 150".to_string()),
        ),
        RunStatus::Failed => (
            BTreeMap::new(),
            None,
            Some("the worker ran out of memory".to_string()),
        ),
        RunStatus::Cancelled => (
            metrics(&[("train/loss", 2.5)]),
            Some(forecast(None)),
            Some("cancelled by @alice".to_string()),
        ),
    };
    RunResult {
        run: RunId::from("run-000042"),
        ending: glassbox_schemas::record::RunEnding {
            status,
            steps: 0,
            final_metrics,
            reason,
        },
        forecast,
        ledger_index: 41,
        proof_url: "https://lab.example.org/proof/41".into(),
        sample: None,
    }
}

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

// --- The validation comment ---

#[test]
fn validation_valid_waiting_for_approval() {
    assert_snapshot!(valid_proposal(&hash_a(), &cost(), 1.0e12, None, None, &[]));
}

#[test]
fn validation_valid_queued() {
    let status = status_of(
        ExperimentState::Queued { position: 1 },
        Some(approval_by("alice")),
    );
    assert_snapshot!(valid_proposal(
        &hash_a(),
        &cost(),
        1.0e12,
        Some(&status),
        None,
        &[]
    ));
}

#[test]
fn validation_valid_with_voided_approval() {
    let status = status_of(ExperimentState::Proposed, None);
    let voided = approval_by("bob");
    assert_snapshot!(valid_proposal(
        &hash_b(),
        &cost(),
        1.0e12,
        Some(&status),
        Some(&voided),
        &[]
    ));
}

#[test]
fn validation_valid_over_the_labs_limits() {
    let over = [
        "the model and optimizer need about 96.0 GB (96000000000 bytes); the lab's limit is 12.0 GB (12000000000 bytes) (limits.max_memory_bytes)".to_string(),
        "data.mixture[0] names blake3:00ff, which no dataset entry declares".to_string(),
    ];
    let body = valid_proposal(&hash_a(), &cost(), 1.0e12, None, None, &over);
    assert!(body.contains("over the lab's limits") && body.contains("limits.max_memory_bytes"));
    // Nothing on the page says the proposal is simply valid or awaits approval.
    assert!(
        !body.contains("✅") && !body.contains("waiting for a maintainer"),
        "{body}"
    );
    assert_snapshot!(body);
}

#[test]
fn validation_refused_by_the_lab() {
    let body = proposal_refused(
        &hash_a(),
        "alice has made 20 proposals in the last 24 hours; the limit is 20 (limits.max_proposals_per_author_per_day); try again later",
    );
    assert!(
        body.starts_with(VALIDATION_MARKER) && body.contains("max_proposals_per_author_per_day")
    );
    assert_snapshot!(body);
}

#[test]
fn validation_with_errors_by_field() {
    let problems = [
        FormProblem {
            field: "Hypothesis",
            message: "is required; say what you expect the run to show".into(),
        },
        FormProblem {
            field: "Publication of results",
            message: "must be ticked: results are published whatever they are".into(),
        },
    ];
    let spec_error = SpecError::Invalid(vec![
        FieldError {
            path: "model.moe.top_k".into(),
            value: Some("9".into()),
            rule: "must be at most model.moe.experts (4)".into(),
        },
        FieldError {
            path: "train.learning_rate".into(),
            value: None,
            rule: "is required".into(),
        },
    ]);
    assert_snapshot!(invalid_proposal(&problems, Some(&spec_error)));
}

#[test]
fn validation_with_a_toml_syntax_error() {
    let spec_error = SpecError::Syntax {
        line: 3,
        column: 9,
        message: "expected `=`".into(),
    };
    assert_snapshot!(invalid_proposal(&[], Some(&spec_error)));
}

#[test]
fn validation_over_budget() {
    let breaches = [
        BudgetBreach::Flops {
            needed: 2.774_208e13,
            limit: 1.0e10,
        },
        BudgetBreach::WallTime {
            seconds: 27.742_08,
            flops_per_second: 1.0e12,
            limit: 10.0,
        },
    ];
    assert_snapshot!(over_budget(&hash_a(), &breaches));
}

// --- Replies to commands ---

#[test]
fn refused_not_a_maintainer() {
    let refusal = Refusal::NotMaintainer(maintainers(false));
    assert_snapshot!(refused(
        &login("mallory"),
        &Command::Approve { pin: None },
        &refusal
    ));
}

#[test]
fn refused_not_a_maintainer_nor_a_collaborator() {
    let refusal = Refusal::NotMaintainer(maintainers(true));
    assert_snapshot!(refused(&login("mallory"), &Command::Cancel, &refusal));
}

#[test]
fn refused_with_no_maintainers_configured() {
    let refusal = Refusal::NotMaintainer(Maintainers {
        listed: vec![],
        ..maintainers(false)
    });
    assert_snapshot!(refused(&login("mallory"), &Command::Hold, &refusal));
}

#[test]
fn refused_permission_unchecked() {
    let refusal = Refusal::PermissionUnchecked(maintainers(true));
    assert_snapshot!(refused(
        &login("carol"),
        &Command::Approve { pin: None },
        &refusal
    ));
}

#[test]
fn refused_self_approval() {
    assert_snapshot!(refused(
        &login("alice"),
        &Command::Approve { pin: None },
        &Refusal::SelfApproval
    ));
}

#[test]
fn unknown_command_reply() {
    assert_snapshot!(unknown_command(&login("alice"), "aprove", "approve"));
}

#[test]
fn malformed_approve_reply() {
    let problem = HashPin::parse("blake3:ab12").unwrap_err();
    assert_snapshot!(malformed_command(&login("alice"), "approve", &problem));
}

#[test]
fn approve_refused_hash_mismatch() {
    let pin = HashPin::parse("blake3:ab12ab12ab12").unwrap();
    assert_snapshot!(approve_pin_mismatch(&login("alice"), &pin, &hash_b()));
}

#[test]
fn approve_refused_invalid_proposal() {
    assert_snapshot!(approve_invalid(&login("alice")));
}

#[test]
fn approve_refused_over_budget() {
    let breaches = [BudgetBreach::Flops {
        needed: 2.774_208e13,
        limit: 1.0e10,
    }];
    assert_snapshot!(approve_over_budget(&login("alice"), &breaches));
}

#[test]
fn approve_refused_quota_full() {
    assert_snapshot!(approve_quota_full(&login("alice"), &login("dana"), 3, 3));
}

#[test]
fn approval_queued() {
    assert_snapshot!(approved(&login("alice"), &hash_a(), 2, None));
}

#[test]
fn approval_queued_lifting_a_rejection() {
    assert_snapshot!(approved(&login("bob"), &hash_a(), 1, Some("too big")));
}

#[test]
fn lab_refusal_stale_hash() {
    let error = LabError::StaleHash {
        seen: hash_a(),
        current: hash_b(),
    };
    assert_snapshot!(lab_refusal(&login("alice"), "approve", &error));
}

#[test]
fn lab_refusal_unknown_experiment() {
    let error = LabError::UnknownExperiment(ExperimentId("glassbox-lab/glassbox#7".into()));
    assert_snapshot!(lab_refusal(&login("alice"), "rerun", &error));
}

#[test]
fn lab_refusal_invalid_state() {
    let error = LabError::InvalidState("there is no finished run to reproduce yet".into());
    assert_snapshot!(lab_refusal(&login("alice"), "reproduce", &error));
}

#[test]
fn rejection() {
    assert_snapshot!(rejected(&login("bob"), "too big for the lab this month"));
}

#[test]
fn rejection_without_a_reason() {
    assert_snapshot!(reject_needs_reason(&login("bob")));
}

#[test]
fn hold() {
    assert_snapshot!(held(&login("alice")));
}

#[test]
fn unhold() {
    assert_snapshot!(released(&login("alice")));
}

#[test]
fn cancel_queued() {
    assert_snapshot!(cancelled(&login("alice"), &Cancelled::Queued));
}

#[test]
fn cancel_running() {
    let what = Cancelled::Running(RunId::from("run-000042"));
    assert_snapshot!(cancelled(&login("alice"), &what));
}

#[test]
fn rerun() {
    assert_snapshot!(rerun_queued(&login("alice"), 2));
}

#[test]
fn reproduction() {
    assert_snapshot!(reproduction_queued(&login("bob"), 1));
}

#[test]
fn help_reply() {
    assert_snapshot!(help());
}

#[test]
fn status_reply_with_nothing_recorded() {
    assert_snapshot!(status(None, "https://lab.example.org"));
}

#[test]
fn status_reply_in_every_state() {
    for (name, st) in every_state() {
        assert_snapshot!(
            format!("status_reply_{name}"),
            status(Some(&st), "https://lab.example.org")
        );
    }
}

// --- Approvals voided by the issue ---

#[test]
fn approval_voided_by_an_edit() {
    assert_snapshot!(approval_voided_by_edit(&hash_b(), &approval_by("bob")));
}

#[test]
fn approval_withdrawn_by_an_invalid_edit() {
    assert_snapshot!(approval_withdrawn(&approval_by("bob")));
}

#[test]
fn closing_reasons() {
    let bob = login("bob");
    let actions = [
        IssueAction::Closed,
        IssueAction::Deleted,
        IssueAction::Transferred,
        IssueAction::Unlabeled("experiment".into()),
    ];
    let lines: Vec<String> = actions
        .iter()
        .map(|a| format!("{}: {}", a.name(), closing_reason(a, &bob)))
        .collect();
    assert_snapshot!(lines.join("\n"));
}

#[test]
fn voided_by_closing_a_queued_proposal() {
    let voided = Voided {
        approval: Some(approval_by("alice")),
        job: Some(Cancelled::Queued),
    };
    let reason = closing_reason(&IssueAction::Closed, &login("bob"));
    assert_snapshot!(voided_by_issue(&reason, &voided));
}

#[test]
fn voided_by_unlabelling_a_running_proposal() {
    let voided = Voided {
        approval: Some(approval_by("alice")),
        job: Some(Cancelled::Running(RunId::from("run-000042"))),
    };
    let reason = closing_reason(&IssueAction::Unlabeled("experiment".into()), &login("bob"));
    assert_snapshot!(voided_by_issue(&reason, &voided));
}

#[test]
fn voided_by_closing_without_an_approval() {
    let voided = Voided {
        approval: None,
        job: None,
    };
    let reason = closing_reason(&IssueAction::Closed, &login("bob"));
    assert_snapshot!(voided_by_issue(&reason, &voided));
}

// --- Run and result comments (as posted: marker first) ---

#[test]
fn run_started() {
    let body = run_progress(
        "run-000042",
        Some(&hash_a()),
        None,
        "https://lab.example.org/",
    );
    assert_snapshot!(with_marker("run:run-000042", &body));
}

#[test]
fn run_progress_without_a_dashboard() {
    let body = run_progress("run-000042", None, Some((150, 300)), "");
    assert_snapshot!(with_marker("run:run-000042", &body));
}

#[test]
fn run_result_of_every_status() {
    let statuses = [
        RunStatus::Succeeded,
        RunStatus::Diverged,
        RunStatus::BudgetExceeded,
        RunStatus::Failed,
        RunStatus::Cancelled,
    ];
    for status in statuses {
        let body = run_result(&outcome(status), "https://lab.example.org");
        assert_snapshot!(
            format!("run_result_{status}"),
            with_marker("result:run-000042", &body)
        );
    }
}

#[test]
fn note_recorded_as_maintainer_and_community() {
    let first = NoteRecorded {
        run: RunId::from("run-000042"),
        entry: 117,
        supersedes: None,
    };
    let body = note_recorded(
        &login("alice"),
        NoteRole::Maintainer,
        (480, 520),
        &first,
        "https://lab.example.org",
    );
    assert_snapshot!("note_recorded_maintainer_range", body);
    let edited = NoteRecorded {
        entry: 121,
        supersedes: Some(117),
        ..first
    };
    let body = note_recorded(&login("zed"), NoteRole::Community, (500, 500), &edited, "");
    assert_snapshot!("note_recorded_community_superseding", body);
}

#[test]
fn alerts_of_every_kind() {
    let anomaly = RunAlert::Anomaly {
        anomaly: glassbox_schemas::record::Anomaly {
            kind: glassbox_schemas::record::AnomalyKind::RouterBiasJump,
            step: 501,
            metric: "train/router/layer_3/bias_norm".into(),
            value: 0.8125,
            baseline: 0.0021,
            deviations: 412.5,
            layer: Some(3),
            expert: None,
            charted: None,
        },
        ledger_index: 88,
    };
    let body = run_alert("run-000042", &anomaly, "https://lab.example.org");
    assert_snapshot!(
        "alert_anomaly",
        with_marker("alert:anomaly:run-000042", &body)
    );
    let stalled = RunAlert::Stalled {
        last_step: 212,
        silent_seconds: 754.0,
        median_step_seconds: 1.5,
    };
    let body = run_alert("run-000042", &stalled, "https://lab.example.org");
    assert_snapshot!(
        "alert_stalled",
        with_marker("alert:stalled:run-000042", &body)
    );
    for status in [RunStatus::Diverged, RunStatus::BudgetExceeded] {
        let mut stopped = outcome(status);
        stopped.ending.steps = 212;
        let body = run_stopped_alert(&stopped, "https://lab.example.org");
        assert_snapshot!(
            format!("alert_{status}"),
            with_marker(&format!("alert:{status}:run-000042"), &body)
        );
    }
}

#[test]
fn a_quoted_completion_is_inert_text_whatever_the_model_wrote() {
    let mut r = outcome(RunStatus::Succeeded);
    let hostile =
        "hi @someone </details><b>bold</b> [click](https://evil.example) ``` \u{7}\n```\nout";
    r.sample = Some(crate::port::QuotedSample {
        step: 300,
        prompt: "First Citizen:".into(),
        text: hostile.into(),
    });
    let body = run_result(&r, "https://lab.example.org");
    // The quote sits inside one fence, longer than any backtick run in the text, so nothing
    // in it closes the fence; outside the fence no mention, markup or link from the model.
    let fence_line = body
        .lines()
        .find(|l| l.starts_with("````") && l.ends_with("text"))
        .unwrap_or_else(|| panic!("no fence of 4+ backticks opens the quote:\n{body}"));
    let fence = fence_line.trim_end_matches("text");
    let start = body.find(fence_line).unwrap();
    let rest = &body[start + fence_line.len()..];
    let end = rest
        .find(&format!("\n{fence}\n"))
        .expect("the fence closes");
    let (inside, outside) = (&rest[..end], format!("{}{}", &body[..start], &rest[end..]));
    assert!(
        inside.contains("@someone") && inside.contains("</details>"),
        "{inside}"
    );
    assert!(
        inside.contains("\u{2407}"),
        "the bell byte shows as its picture"
    );
    for bad in ["@someone", "</details>", "<b>", "evil.example"] {
        assert!(!outside.contains(bad), "{bad} escaped the fence:\n{body}");
    }
    assert!(body.contains("step 300"));
    // A long completion is cut, never the comment made huge.
    r.sample.as_mut().unwrap().text = "x".repeat(50_000);
    assert!(run_result(&r, "").len() < 3_000);
}
