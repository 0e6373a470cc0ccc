//! Scenario tests for the bot, written as scripts: signed webhooks go through the axum router,
//! the worker drains the durable queue, the real octocrab client talks to a fake GitHub on
//! loopback (wiremock), and the lab is [`InMemoryLab`]. Each test says what a person would see
//! in the issue and what the lab recorded.
//!
//! No sleeps: [`harness::Harness::drain`] returns when the queue is empty, and the one test of
//! the spawned worker waits on its `processed` channel.
//!
//! The crate's one integration-test binary: the property tests of the parsers that read
//! untrusted text are the module `fuzz_parsers`.

mod debugging;
mod fake_github;
mod fuzz_parsers;
mod harness;
mod sweeps;
mod trust;

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::http::StatusCode;
use glassbox_github_bot::port::{ExperimentState, LabEvent, RunResult};
use glassbox_github_bot::signature::sign;
use glassbox_github_bot::store::DeliveryCounts;
use glassbox_github_bot::worker::Processed;
use glassbox_github_bot::{
    Bot, GitHub, IssueKey, IssueNumber, RepoName, Store, WebhookSettings, Worker, start_intake,
    webhook_router,
};
use glassbox_schemas::record::ForecastOutcome;
use glassbox_schemas::{ExperimentId, RunId, RunStatus};
use harness::*;
use serde_json::json;
use tokio::sync::{Notify, mpsc};

fn tiny_hash(spec: &str) -> String {
    glassbox_schemas::spec_hash(&glassbox_schemas::parse_toml(spec).unwrap())
        .unwrap()
        .to_string()
}

fn exp(n: u64) -> ExperimentId {
    ExperimentId(format!("{REPO}#{n}"))
}

#[tokio::test]
async fn valid_proposal_gets_a_validation_comment_with_hash_and_cost() {
    let mut h = Harness::new().await;
    let body = form_body(str::to_string);
    h.deliver("issues", &issue_event("opened", 1, "carol", &body))
        .await;

    let comments = h.comment_bodies(1);
    assert_eq!(comments.len(), 1, "{comments:?}");
    let c = &comments[0];
    assert!(c.contains("Valid experiment spec"), "{c}");
    assert!(c.contains(&tiny_hash(TINY_SPEC)), "{c}");
    assert!(
        c.contains("parameters") && c.contains("FLOPs") && c.contains("at 1.000e12 FLOP/s"),
        "{c}"
    );
    assert!(c.contains("waiting for a maintainer"), "{c}");
    let lab = h.lab.snapshot();
    assert_eq!(
        lab.journal,
        vec![format!("proposal {} {}", exp(1), tiny_hash(TINY_SPEC))]
    );
}

#[tokio::test]
async fn invalid_proposal_lists_every_error_by_field_path() {
    let mut h = Harness::new().await;
    let body = form_body(|s| {
        s.replace("top_k = 2", "top_k = 9")
            .replace("steps = 300", "steps = 300\nlearning_rate = 1")
    });
    h.deliver("issues", &issue_event("opened", 2, "carol", &body))
        .await;
    let c = &h.comment_bodies(2)[0];
    assert!(c.contains("needs changes"), "{c}");
    assert!(c.contains("`train.learning_rate`"), "{c}");
    // Unknown field found in pass 2 stops pass 3; fix it and top_k's cross-field rule shows.
    let body = form_body(|s| s.replace("top_k = 2", "top_k = 9"));
    h.deliver("issues", &issue_event("edited", 2, "carol", &body))
        .await;
    let comments = h.comment_bodies(2);
    assert_eq!(comments.len(), 1);
    assert!(
        comments[0].contains("`model.moe.top_k` = `9`"),
        "{}",
        comments[0]
    );
    assert!(
        h.lab.snapshot().journal.is_empty(),
        "nothing recorded for an invalid spec"
    );

    // Form problems are reported by label too.
    let no_consent = form_body(str::to_string).replace("- [X]", "- [ ]");
    h.deliver("issues", &issue_event("edited", 2, "carol", &no_consent))
        .await;
    assert!(h.comment_bodies(2)[0].contains("**Publication of results**"));
}

#[tokio::test]
async fn editing_the_issue_updates_the_same_comment() {
    let mut h = Harness::new().await;
    h.deliver(
        "issues",
        &issue_event("opened", 3, "carol", &form_body(str::to_string)),
    )
    .await;
    let edited = |s: &str| s.replace("steps = 300", "steps = 400");
    h.deliver(
        "issues",
        &issue_event("edited", 3, "carol", &form_body(edited)),
    )
    .await;
    let comments = h.gh.comments_on(3);
    assert_eq!(comments.len(), 1, "one validation comment, edited in place");
    assert_eq!(comments[0].1.edits, 1);
    assert!(comments[0].1.body.contains(&tiny_hash(&edited(TINY_SPEC))));
}

#[tokio::test]
async fn issues_without_the_experiment_label_are_ignored() {
    let mut h = Harness::new().await;
    let mut p = issue_event("opened", 4, "carol", &form_body(str::to_string));
    p["issue"]["labels"] = json!([{"name": "bug"}]);
    h.deliver("issues", &p).await;
    assert!(h.comment_bodies(4).is_empty());
    assert!(h.lab.snapshot().journal.is_empty());
}

#[tokio::test]
async fn maintainer_approval_queues_the_job() {
    let mut h = Harness::new().await;
    let body = form_body(str::to_string);
    h.deliver("issues", &issue_event("opened", 5, "carol", &body))
        .await;
    h.deliver(
        "issue_comment",
        &comment_created(5, "carol", &body, "alice", "Looks good.\n/approve", 1),
    )
    .await;

    let lab = h.lab.snapshot();
    assert_eq!(lab.queue, vec![exp(5)]);
    assert!(
        lab.journal
            .iter()
            .any(|j| j == &format!("approval {} {} by alice", exp(5), tiny_hash(TINY_SPEC)))
    );
    assert!(h.gh.labels_on(5).contains("approved"));
    let comments = h.comment_bodies(5);
    let approved = format!(
        "✅ Approved by @alice for spec `{}`; queued at position 1. Editing the spec voids this approval.",
        tiny_hash(TINY_SPEC)
    );
    assert!(comments.contains(&approved), "{comments:?}");
    assert!(
        comments[0].contains("queue position **1**"),
        "validation comment shows the position"
    );
}

#[tokio::test]
async fn non_maintainer_approval_is_refused_and_nothing_is_queued() {
    let mut h = Harness::new().await;
    let body = form_body(str::to_string);
    h.deliver("issues", &issue_event("opened", 6, "carol", &body))
        .await;
    h.deliver(
        "issue_comment",
        &comment_created(6, "carol", &body, "mallory", "/approve", 2),
    )
    .await;
    let lab = h.lab.snapshot();
    assert!(lab.queue.is_empty());
    assert!(!lab.journal.iter().any(|j| j.starts_with("approval")));
    let reply = h.comment_bodies(6).pop().unwrap();
    assert_eq!(
        reply,
        "@mallory, `/approve` was not run: only maintainers may run it; it can be run by the lab's maintainers (@alice, @bob).",
        "names the actor and says who can"
    );
    assert!(!h.gh.labels_on(6).contains("approved"));
}

#[tokio::test]
async fn authors_cannot_approve_their_own_proposal_unless_configured() {
    let mut h = Harness::new().await;
    let body = form_body(str::to_string);
    h.deliver("issues", &issue_event("opened", 7, "alice", &body))
        .await;
    h.deliver(
        "issue_comment",
        &comment_created(7, "alice", &body, "Alice", "/approve", 3),
    )
    .await;
    assert!(h.lab.snapshot().queue.is_empty());
    assert_eq!(
        h.comment_bodies(7).pop().unwrap(),
        "@Alice, `/approve` was not run: authors cannot approve their own proposal; another maintainer must approve it."
    );

    let mut h = Harness::with_config(|c| c.allow_self_approval = true).await;
    h.deliver("issues", &issue_event("opened", 7, "alice", &body))
        .await;
    h.deliver(
        "issue_comment",
        &comment_created(7, "alice", &body, "alice", "/approve", 3),
    )
    .await;
    assert_eq!(h.lab.snapshot().queue, vec![exp(7)]);
}

#[tokio::test]
async fn editing_after_approval_voids_it_and_says_so() {
    let mut h = Harness::new().await;
    let body = form_body(str::to_string);
    h.deliver("issues", &issue_event("opened", 8, "carol", &body))
        .await;
    h.deliver(
        "issue_comment",
        &comment_created(8, "carol", &body, "bob", "/approve", 4),
    )
    .await;
    assert_eq!(h.lab.snapshot().queue, vec![exp(8)]);

    let edited = form_body(|s| s.replace("steps = 300", "steps = 30000"));
    h.deliver("issues", &issue_event("edited", 8, "carol", &edited))
        .await;
    let lab = h.lab.snapshot();
    assert!(
        lab.queue.is_empty(),
        "the voided approval's job left the queue"
    );
    assert!(lab.experiments[&exp(8)].approval.is_none());
    assert!(lab.journal.contains(&format!("approval_voided {}", exp(8))));
    let comments = h.comment_bodies(8);
    let (old_hash, new_hash) = (
        tiny_hash(TINY_SPEC),
        tiny_hash(&TINY_SPEC.replace("steps = 300", "steps = 30000")),
    );
    let voided = format!(
        "⚠️ The spec was edited: its hash is now `{new_hash}`. The approval by @bob of `{old_hash}` is void; a maintainer must `/approve` the new spec."
    );
    assert!(comments.contains(&voided), "{comments:?}");
    assert!(
        comments[0].contains("that approval is void"),
        "validation comment: {}",
        comments[0]
    );
    assert!(!h.gh.labels_on(8).contains("approved"));

    // An /approve of a stale hash: the comment event carries the old body.
    h.deliver(
        "issue_comment",
        &comment_created(8, "carol", &body, "bob", "/approve", 5),
    )
    .await;
    assert!(h.lab.snapshot().queue.is_empty());
    assert_eq!(
        h.comment_bodies(8).pop().unwrap(),
        format!(
            "@bob, `/approve` was not run: the spec changed: approved {old_hash}, but the current spec is {new_hash}."
        )
    );
}

#[tokio::test]
async fn editing_an_approved_spec_into_an_invalid_one_voids_the_approval() {
    let mut h = Harness::new().await;
    let body = form_body(str::to_string);
    h.deliver("issues", &issue_event("opened", 23, "carol", &body))
        .await;
    h.deliver(
        "issue_comment",
        &comment_created(23, "carol", &body, "bob", "/approve", 30),
    )
    .await;
    assert_eq!(h.lab.snapshot().queue, vec![exp(23)]);
    let broken = form_body(|s| s.replace("top_k = 2", "top_k = 9"));
    h.deliver("issues", &issue_event("edited", 23, "carol", &broken))
        .await;
    let lab = h.lab.snapshot();
    assert!(lab.queue.is_empty());
    assert!(lab.experiments[&exp(23)].approval.is_none());
    let comments = h.comment_bodies(23);
    let withdrawn = format!(
        "⚠️ The spec was edited and is no longer a valid proposal. The approval by @bob of `{}` is void; a maintainer must `/approve` again once it is fixed.",
        tiny_hash(TINY_SPEC)
    );
    assert!(comments.contains(&withdrawn), "{comments:?}");
    assert!(comments[0].contains("needs changes"));
    assert!(!h.gh.labels_on(23).contains("approved"));
}

#[tokio::test]
async fn a_duplicate_delivery_is_processed_once() {
    let h = Harness::new().await;
    let p = issue_event("opened", 9, "carol", &form_body(str::to_string));
    assert_eq!(
        h.deliver_as("issues", "same-id", &p).await,
        StatusCode::ACCEPTED
    );
    assert_eq!(h.drain().await, 1);
    assert_eq!(h.deliver_as("issues", "same-id", &p).await, StatusCode::OK);
    assert_eq!(h.drain().await, 0, "a redelivery is not queued again");
    assert_eq!(h.comment_bodies(9).len(), 1);
    assert_eq!(h.lab.snapshot().journal.len(), 1);
}

#[tokio::test]
async fn bad_or_missing_signature_is_401_and_nothing_is_recorded() {
    let h = Harness::new().await;
    let body = serde_json::to_vec(&issue_event(
        "opened",
        10,
        "carol",
        &form_body(str::to_string),
    ))
    .unwrap();
    let base = |sig: Option<String>| {
        let mut v = vec![
            ("content-type", "application/json".to_string()),
            ("x-github-event", "issues".to_string()),
            ("x-github-delivery", "d-10".to_string()),
        ];
        if let Some(s) = sig {
            v.push(("x-hub-signature-256", s));
        }
        v
    };
    let wrong_secret = sign(b"not our secret", &body);
    let mut tampered = body.clone();
    tampered.push(b' ');
    let good_for_other_body = sign(SECRET.as_bytes(), &tampered);
    for headers in [
        base(None),
        base(Some(wrong_secret)),
        base(Some(good_for_other_body)),
        base(Some("sha256=".into())),
    ] {
        let (status, _) = h.post(&headers, body.clone()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    assert_eq!(h.store.counts().await.unwrap(), DeliveryCounts::default());
    assert_eq!(h.drain().await, 0);
    assert!(h.gh.model().requests.is_empty(), "GitHub was not called");
    // The same delivery id, properly signed, is still accepted: nothing was recorded for it.
    let (status, _) = h
        .post(&base(Some(sign(SECRET.as_bytes(), &body))), body)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn oversized_body_is_413() {
    let h = Harness::new().await;
    let body = vec![b'x'; glassbox_github_bot::config::DEFAULT_MAX_BODY_BYTES + 1];
    let headers = [
        ("content-type", "application/json".to_string()),
        ("x-github-event", "issues".to_string()),
        ("x-github-delivery", "big".to_string()),
        ("x-hub-signature-256", sign(SECRET.as_bytes(), &body)),
    ];
    let (status, _) = h.post(&headers, body).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(h.store.counts().await.unwrap(), DeliveryCounts::default());
}

#[tokio::test]
async fn a_body_that_is_not_json_is_415_and_nothing_is_recorded() {
    let h = Harness::new().await;
    let body = serde_json::to_vec(&issue_event(
        "opened",
        11,
        "carol",
        &form_body(str::to_string),
    ))
    .unwrap();
    // GitHub's other webhook setting, form-encoded; no content type; a lookalike.
    for content_type in [
        Some("application/x-www-form-urlencoded"),
        None,
        Some("text/plain"),
        Some("application/jsonp"),
    ] {
        let mut headers = vec![
            ("x-github-event", "issues".to_string()),
            ("x-github-delivery", "d-11".to_string()),
            ("x-hub-signature-256", sign(SECRET.as_bytes(), &body)),
        ];
        if let Some(t) = content_type {
            headers.push(("content-type", t.to_string()));
        }
        let (status, text) = h.post(&headers, body.clone()).await;
        assert_eq!(
            status,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "{content_type:?}"
        );
        assert!(text.contains("application/json"), "{text}");
    }
    assert_eq!(h.store.counts().await.unwrap(), DeliveryCounts::default());
    // With its parameters, JSON is JSON.
    let headers = [
        (
            "content-type",
            "application/json; charset=utf-8".to_string(),
        ),
        ("x-github-event", "issues".to_string()),
        ("x-github-delivery", "d-11".to_string()),
        ("x-hub-signature-256", sign(SECRET.as_bytes(), &body)),
    ];
    assert_eq!(h.post(&headers, body).await.0, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn githubs_published_vector_passes_through_the_router_and_ping_is_answered() {
    let h = Harness::with_config(|c| c.webhook_secrets = vec!["It's a Secret to Everybody".into()])
        .await;
    let headers = [
        ("x-github-event", "ping".to_string()),
        ("x-github-delivery", "ping-1".to_string()),
        (
            "x-hub-signature-256",
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17".to_string(),
        ),
        ("content-type", "application/json".to_string()),
    ];
    let (status, text) = h.post(&headers, b"Hello, World!".to_vec()).await;
    assert_eq!((status, text.as_str()), (StatusCode::OK, "pong\n"));
    let mut bad = headers.clone();
    bad[2].1 = bad[2].1.replace("757", "758");
    assert_eq!(
        h.post(&bad, b"Hello, World!".to_vec()).await.0,
        StatusCode::UNAUTHORIZED
    );

    // The recorded ping payload, signed with our secret, is answered too.
    let h = Harness::new().await;
    assert_eq!(
        h.deliver_as("ping", "p", &fixture("ping_webhook_event.json"))
            .await,
        StatusCode::OK
    );
}

#[tokio::test]
async fn unknown_events_and_actions_are_acknowledged_and_ignored() {
    let mut h = Harness::new().await;
    assert_eq!(
        h.deliver_as("star", "s-1", &json!({"action": "created"}))
            .await,
        StatusCode::ACCEPTED
    );
    assert_eq!(h.drain().await, 0, "unhandled events are not queued");
    let counts = h.store.counts().await.unwrap();
    assert_eq!(counts.ignored, 1, "but remembered for de-duplication");
    h.deliver(
        "issues",
        &issue_event("closed", 11, "carol", &form_body(str::to_string)),
    )
    .await;
    let labeled = fixture("issues_labeled_webhook_event.json");
    let labeled_id = h.deliver("issues", &labeled).await;
    assert!(h.gh.model().requests.is_empty());
    // Each is recorded as ignored, with the reason; none failed, none acted.
    assert_eq!(
        h.store.counts().await.unwrap(),
        DeliveryCounts {
            ignored: 3,
            ..Default::default()
        }
    );
    let reason = h.delivery(&labeled_id).await.detail.unwrap();
    assert!(
        reason.contains("\"enhancement\", not `experiment`"),
        "{reason}"
    );
}

#[tokio::test]
async fn cancel_of_a_running_job_stops_it_and_the_result_is_commented() {
    let mut h = Harness::new().await;
    let body = form_body(str::to_string);
    h.deliver("issues", &issue_event("opened", 12, "carol", &body))
        .await;
    h.deliver(
        "issue_comment",
        &comment_created(12, "carol", &body, "alice", "/approve", 6),
    )
    .await;
    h.lab.start_run(&exp(12), RunId("run-000012".into()));
    let key = IssueKey {
        repo: RepoName::parse(REPO).unwrap(),
        number: IssueNumber(12),
    };
    h.bot
        .handle_lab_event(LabEvent::RunStarted {
            issue: key.clone(),
            run: RunId("run-000012".into()),
            spec_hash: tiny_hash(TINY_SPEC).parse().unwrap(),
        })
        .await
        .unwrap();
    assert!(h.gh.labels_on(12).contains("running"));

    h.deliver(
        "issue_comment",
        &comment_created(12, "carol", &body, "bob", "/cancel", 7),
    )
    .await;
    let reply = h.comment_bodies(12).pop().unwrap();
    assert_eq!(
        reply,
        "🛑 Cancelled by @bob; run `run-000012` is being stopped and its result will be recorded as `cancelled`."
    );
    assert_eq!(
        h.lab.snapshot().experiments[&exp(12)].state,
        ExperimentState::Cancelled
    );

    h.bot
        .handle_lab_event(LabEvent::Finished {
            issue: key,
            result: RunResult {
                run: RunId("run-000012".into()),
                forecast: None,
                ending: glassbox_schemas::record::RunEnding {
                    status: RunStatus::Cancelled,
                    steps: 0,
                    final_metrics: BTreeMap::from([("train/loss".to_string(), 2.5)]),
                    reason: Some("cancelled by @bob".into()),
                },
                ledger_index: 41,
                proof_url: "https://lab.example.org/proof/41".into(),
                sample: None,
            },
        })
        .await
        .unwrap();
    let result = h.comment_bodies(12).pop().unwrap();
    assert!(
        result.contains("**cancelled**") && result.contains("ledger entry 41"),
        "{result}"
    );
    let labels = h.gh.labels_on(12);
    assert!(
        labels.contains("failed") && !labels.contains("running"),
        "{labels:?}"
    );
}

#[tokio::test]
async fn github_500s_then_recovers_and_the_comment_arrives_once() {
    let mut h = Harness::new().await;
    h.gh.fail_next(
        "POST",
        "/repos/glassbox-lab/glassbox/issues/13/comments",
        500,
        2,
        &[],
    );
    h.deliver(
        "issues",
        &issue_event("opened", 13, "carol", &form_body(str::to_string)),
    )
    .await;
    assert_eq!(h.comment_bodies(13).len(), 1);
    assert_eq!(
        h.gh.count_requests("POST /repos/glassbox-lab/glassbox/issues/13/comments"),
        3
    );

    // Past the client's retries the delivery stays queued and is retried later, still once.
    h.gh.fail_next(
        "PATCH",
        "/repos/glassbox-lab/glassbox/issues/comments",
        502,
        4,
        &[],
    );
    let p = issue_event(
        "edited",
        13,
        "carol",
        &form_body(|s| s.replace("steps = 300", "steps = 301")),
    );
    assert_eq!(
        h.deliver_as("issues", "retry-me", &p).await,
        StatusCode::ACCEPTED
    );
    assert_eq!(h.drain().await, 1);
    let counts = h.store.counts().await.unwrap();
    assert_eq!(counts.pending, 1, "kept for a later attempt");
    assert_eq!(h.comment_bodies(13).len(), 1);
}

#[tokio::test]
async fn client_errors_are_not_retried_and_rate_limits_are_honoured() {
    let mut h = Harness::new().await;
    h.gh.fail_next(
        "POST",
        "/repos/glassbox-lab/glassbox/issues/14/comments",
        429,
        1,
        &[("retry-after", "0")],
    );
    h.deliver(
        "issues",
        &issue_event("opened", 14, "carol", &form_body(str::to_string)),
    )
    .await;
    assert_eq!(h.comment_bodies(14).len(), 1);
    assert_eq!(
        h.gh.count_requests("POST /repos/glassbox-lab/glassbox/issues/14/comments"),
        2
    );

    h.gh.fail_next(
        "POST",
        "/repos/glassbox-lab/glassbox/issues/15/comments",
        422,
        1,
        &[],
    );
    h.deliver(
        "issues",
        &issue_event("opened", 15, "carol", &form_body(str::to_string)),
    )
    .await;
    assert_eq!(
        h.gh.count_requests("POST /repos/glassbox-lab/glassbox/issues/15/comments"),
        1
    );
    assert_eq!(
        h.store.counts().await.unwrap().failed,
        1,
        "a 4xx fails the delivery at once"
    );
}

#[tokio::test]
async fn collaborators_are_checked_through_the_api_and_a_failed_lookup_denies() {
    let mut h = Harness::with_config(|c| c.collaborators_are_maintainers = true).await;
    let body = form_body(str::to_string);
    h.gh.set_permission("dave", "write", "maintain");
    h.deliver("issues", &issue_event("opened", 16, "carol", &body))
        .await;
    h.deliver(
        "issue_comment",
        &comment_created(16, "carol", &body, "erin", "/hold", 8),
    )
    .await;
    assert_eq!(
        h.comment_bodies(16).pop().unwrap(),
        "@erin, `/hold` was not run: only maintainers may run it; it can be run by the lab's maintainers (@alice, @bob) and by collaborators of glassbox-lab/glassbox with write, maintain or admin permission."
    );
    h.gh.fail_next(
        "GET",
        "/repos/glassbox-lab/glassbox/collaborators/dave",
        500,
        10,
        &[],
    );
    h.deliver(
        "issue_comment",
        &comment_created(16, "carol", &body, "dave", "/approve", 9),
    )
    .await;
    let reply = h.comment_bodies(16).pop().unwrap();
    assert_eq!(
        reply,
        "@dave, `/approve` was not run: your permission could not be checked with GitHub, so it is denied; it can be run by the lab's maintainers (@alice, @bob) and by collaborators of glassbox-lab/glassbox with write, maintain or admin permission."
    );
    assert!(h.lab.snapshot().queue.is_empty());
    h.gh.model().failures.clear();
    h.deliver(
        "issue_comment",
        &comment_created(16, "carol", &body, "dave", "/approve", 10),
    )
    .await;
    assert_eq!(h.lab.snapshot().queue, vec![exp(16)]);
}

#[tokio::test]
async fn commands_unknown_quoted_and_edited() {
    let mut h = Harness::new().await;
    let body = form_body(str::to_string);
    h.deliver("issues", &issue_event("opened", 17, "carol", &body))
        .await;
    h.deliver(
        "issue_comment",
        &comment_created(
            17,
            "carol",
            &body,
            "alice",
            "> /approve\n```\n/approve\n```\n/aprove",
            11,
        ),
    )
    .await;
    assert!(
        h.lab.snapshot().queue.is_empty(),
        "quoted and fenced commands do not run"
    );
    assert_eq!(
        h.comment_bodies(17).pop().unwrap(),
        "@alice, I don't know `/aprove`. Did you mean `/approve`? `/help` lists every command."
    );

    h.deliver(
        "issue_comment",
        &comment_edited(
            17,
            "carol",
            &body,
            "alice",
            "/status",
            "/status\n/approve",
            12,
        ),
    )
    .await;
    let comments = h.comment_bodies(17);
    assert!(
        !comments.iter().any(|c| c.starts_with("Spec `")),
        "the old /status did not run again: {comments:?}"
    );
    assert_eq!(h.lab.snapshot().queue, vec![exp(17)]);

    h.deliver(
        "issue_comment",
        &comment_created(17, "carol", &body, "zed", "/status\n/help", 13),
    )
    .await;
    let comments = h.comment_bodies(17);
    let n = comments.len();
    assert!(
        comments[n - 2].contains("queue position **1**"),
        "{}",
        comments[n - 2]
    );
    assert!(comments[n - 1].contains("`/reject <reason>`"));

    // The bot's own comments never run.
    let mut own = comment_created(17, "carol", &body, "glassbox-bot", "/approve", 14);
    own["comment"]["user"]["type"] = json!("Bot");
    let before = h.comment_bodies(17).len();
    h.deliver("issue_comment", &own).await;
    assert_eq!(h.comment_bodies(17).len(), before);
}

#[tokio::test]
async fn budgets_and_quotas_refuse_with_numbers() {
    let mut h = Harness::with_config(|c| {
        c.budget.max_flops = Some(1.0e10);
        c.budget.max_queued_per_author = Some(1);
    })
    .await;
    h.deliver(
        "issues",
        &issue_event("opened", 18, "carol", &form_body(str::to_string)),
    )
    .await;
    let c = &h.comment_bodies(18)[0];
    assert!(
        c.contains("Over the lab's budget") && c.contains("limit is 1.000e10 FLOPs"),
        "{c}"
    );
    assert!(h.lab.snapshot().journal.is_empty());

    let mut h = Harness::with_config(|c| c.budget.max_queued_per_author = Some(1)).await;
    let b1 = form_body(str::to_string);
    let b2 = form_body(|s| s.replace("seed = 1", "seed = 2"));
    h.deliver("issues", &issue_event("opened", 19, "carol", &b1))
        .await;
    h.deliver("issues", &issue_event("opened", 20, "carol", &b2))
        .await;
    h.deliver(
        "issue_comment",
        &comment_created(19, "carol", &b1, "alice", "/approve", 15),
    )
    .await;
    h.deliver(
        "issue_comment",
        &comment_created(20, "carol", &b2, "alice", "/approve", 16),
    )
    .await;
    assert_eq!(h.lab.snapshot().queue, vec![exp(19)]);
    let reply = h.comment_bodies(20).pop().unwrap();
    assert_eq!(
        reply,
        "@alice, `/approve` was not run: @carol already has 1 approved proposal(s) waiting; the limit is 1 per author. Approve this one when one of them has run."
    );
}

#[tokio::test]
async fn hold_reject_rerun_reproduce_and_results() {
    let mut h = Harness::new().await;
    let body = form_body(str::to_string);
    h.deliver("issues", &issue_event("opened", 21, "carol", &body))
        .await;
    h.deliver(
        "issue_comment",
        &comment_created(21, "carol", &body, "alice", "/approve\n/hold", 17),
    )
    .await;
    assert_eq!(
        h.lab.snapshot().experiments[&exp(21)].state,
        ExperimentState::Held
    );
    h.deliver(
        "issue_comment",
        &comment_created(21, "carol", &body, "alice", "/unhold", 18),
    )
    .await;
    assert_eq!(h.lab.snapshot().queue, vec![exp(21)]);
    h.deliver(
        "issue_comment",
        &comment_created(21, "carol", &body, "alice", "/reproduce", 19),
    )
    .await;
    assert_eq!(
        h.comment_bodies(21).pop().unwrap(),
        "@alice, `/reproduce` was not run: there is no finished run to reproduce yet."
    );

    let key = IssueKey {
        repo: RepoName::parse(REPO).unwrap(),
        number: IssueNumber(21),
    };
    let run = RunId("run-000021".into());
    h.lab.start_run(&exp(21), run.clone());
    h.bot
        .handle_lab_event(LabEvent::RunStarted {
            issue: key.clone(),
            run: run.clone(),
            spec_hash: tiny_hash(TINY_SPEC).parse().unwrap(),
        })
        .await
        .unwrap();
    h.bot
        .handle_lab_event(LabEvent::Progress {
            issue: key.clone(),
            run: run.clone(),
            step: 150,
            total_steps: 300,
        })
        .await
        .unwrap();
    let run_comments: Vec<_> =
        h.gh.comments_on(21)
            .into_iter()
            .filter(|(_, c)| c.body.contains("Run `run-000021` started"))
            .collect();
    assert_eq!(run_comments.len(), 1, "progress edits the run comment");
    assert!(
        run_comments[0].1.body.contains("Step 150 of 300")
            && run_comments[0]
                .1
                .body
                .contains("https://lab.example.org/runs/run-000021")
    );
    h.bot
        .handle_lab_event(LabEvent::Finished {
            issue: key,
            result: RunResult {
                run,
                forecast: Some(ForecastOutcome {
                    metric: "eval/markov/loss".into(),
                    predicted: 1.30,
                    tolerance: 0.05,
                    actual: Some(1.42),
                    hit: false,
                }),
                ending: glassbox_schemas::record::RunEnding {
                    status: RunStatus::Succeeded,
                    steps: 0,
                    final_metrics: BTreeMap::from([("eval/markov/loss".to_string(), 1.42)]),
                    reason: None,
                },
                ledger_index: 7,
                proof_url: "https://lab.example.org/proof/7".into(),
                sample: None,
            },
        })
        .await
        .unwrap();
    let result = h.comment_bodies(21).pop().unwrap();
    assert!(
        result.contains("outcome 1.4200: **miss**")
            && result.contains("(https://lab.example.org/proof/7)"),
        "{result}"
    );
    let labels = h.gh.labels_on(21);
    assert!(
        labels.contains("succeeded")
            && labels.contains("negative-result")
            && !labels.contains("running"),
        "{labels:?}"
    );

    h.deliver(
        "issue_comment",
        &comment_created(21, "carol", &body, "alice", "/reject", 20),
    )
    .await;
    assert_eq!(
        h.comment_bodies(21).pop().unwrap(),
        "@alice, `/reject` needs a reason, which is published with the rejection: `/reject <reason>`."
    );
    h.deliver(
        "issue_comment",
        &comment_created(21, "carol", &body, "alice", "/reject out of scope", 21),
    )
    .await;
    assert!(
        h.lab
            .snapshot()
            .journal
            .iter()
            .any(|j| j == &format!("rejection {} by alice: out of scope", exp(21)))
    );
}

/// `/evaluate SUITE`: refused until a run has finished, malformed without a suite name, then
/// queued; the lab's evaluation event becomes a comment with the result and contamination.
#[tokio::test]
async fn evaluate_is_queued_and_answered() {
    let mut h = Harness::new().await;
    let body = form_body(str::to_string);
    h.deliver("issues", &issue_event("opened", 24, "carol", &body))
        .await;
    h.deliver(
        "issue_comment",
        &comment_created(24, "carol", &body, "alice", "/approve", 30),
    )
    .await;
    h.deliver(
        "issue_comment",
        &comment_created(24, "carol", &body, "alice", "/evaluate markov-choice", 31),
    )
    .await;
    assert_eq!(
        h.comment_bodies(24).pop().unwrap(),
        "@alice, `/evaluate` was not run: there is no finished run to evaluate yet."
    );
    let run = RunId("run-000024".into());
    h.lab.start_run(&exp(24), run.clone());
    h.lab.finish_run(&exp(24), RunStatus::Succeeded);
    h.deliver(
        "issue_comment",
        &comment_created(24, "carol", &body, "alice", "/evaluate Markov Choice", 32),
    )
    .await;
    let malformed = h.comment_bodies(24).pop().unwrap();
    assert!(malformed.contains("/evaluate SUITE"), "{malformed}");
    // Anyone may not: it is a maintainer's command.
    h.deliver(
        "issue_comment",
        &comment_created(24, "carol", &body, "mallory", "/evaluate markov-choice", 33),
    )
    .await;
    assert!(
        !h.lab
            .snapshot()
            .journal
            .iter()
            .any(|j| j.starts_with("evaluate") && j.ends_with("mallory"))
    );
    h.deliver(
        "issue_comment",
        &comment_created(24, "carol", &body, "alice", "/evaluate markov-choice", 34),
    )
    .await;
    assert!(
        h.lab
            .snapshot()
            .journal
            .iter()
            .any(|j| j == &format!("evaluate {} on markov-choice by alice", exp(24)))
    );
    let queued = h.comment_bodies(24).pop().unwrap();
    assert!(
        queued.starts_with("📏 Evaluation on `markov-choice` requested by @alice"),
        "{queued}"
    );
    let key = IssueKey {
        repo: RepoName::parse(REPO).unwrap(),
        number: IssueNumber(24),
    };
    h.bot
        .handle_lab_event(LabEvent::Evaluated {
            issue: key,
            run,
            headline: "eval:markov-choice/acc_norm at step 300: 0.8450 ± 0.0256 `@x`".into(),
            outcome: "evaluated".into(),
            contamination: Some(0.015),
            ledger_index: 41,
        })
        .await
        .unwrap();
    let answer = h.comment_bodies(24).pop().unwrap();
    assert!(
        answer.contains("eval:markov-choice/acc_norm at step 300: 0.8450")
            && answer.contains("1.5% of the suite's items")
            && answer.contains("ledger entry 41")
            && !answer.contains("`@x`"),
        "{answer}"
    );
}

#[tokio::test]
async fn a_crash_after_the_2xx_loses_nothing() {
    let h = Harness::new().await;
    let p = issue_event("opened", 22, "carol", &form_body(str::to_string));
    assert_eq!(
        h.deliver_as("issues", "before-crash", &p).await,
        StatusCode::ACCEPTED
    );
    let (db_url, gh_uri) = (h.db_url.clone(), h.gh.uri());
    // "Crash": the process's bot, worker and pool go away without processing anything.
    let Harness { gh, _dir, .. } = h;

    let store = Store::open(&db_url).await.unwrap();
    assert_eq!(store.counts().await.unwrap().pending, 1);
    let config = default_config(&gh_uri);
    let lab = glassbox_github_bot::InMemoryLab::new();
    let bot = Bot::new(
        config.clone(),
        GitHub::from_config(&config).unwrap(),
        lab.clone(),
        store.clone(),
    );
    let wake = Arc::new(Notify::new());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let worker = tokio::spawn(
        Worker::new(bot, wake.clone())
            .with_processed_channel(tx)
            .run(),
    );
    // Sync marker: the restarted worker reports the delivery it recovered.
    assert_eq!(
        rx.recv().await,
        Some(Processed::Acted("before-crash".into()))
    );
    assert_eq!(gh.comments_on(22).len(), 1);
    assert_eq!(lab.snapshot().journal.len(), 1);

    // And the running worker is woken by the intake for new deliveries.
    let (intake, _t) = start_intake(store.clone(), wake);
    let router = webhook_router(
        WebhookSettings {
            secrets: config.webhook_secrets.clone(),
            max_body_bytes: 1 << 20,
        },
        intake,
    );
    let body = serde_json::to_vec(&issue_event(
        "edited",
        22,
        "carol",
        &form_body(|s| s.replace("seed = 1", "seed = 5")),
    ))
    .unwrap();
    let req = axum::http::Request::post("/github/webhook")
        .header("content-type", "application/json")
        .header("x-github-event", "issues")
        .header("x-github-delivery", "after-restart")
        .header("x-hub-signature-256", sign(SECRET.as_bytes(), &body))
        .body(axum::body::Body::from(body))
        .unwrap();
    use tower::ServiceExt;
    assert_eq!(
        router.oneshot(req).await.unwrap().status(),
        StatusCode::ACCEPTED
    );
    assert_eq!(
        rx.recv().await,
        Some(Processed::Acted("after-restart".into()))
    );
    assert_eq!(
        gh.comments_on(22).len(),
        1,
        "edited in place across the restart"
    );
    worker.abort();
}
