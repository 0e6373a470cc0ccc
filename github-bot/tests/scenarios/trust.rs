//! Scenarios of who may act, and when: the sender of an event is its actor, only the configured
//! repositories (and App installation) are served, a command acts once per comment whatever
//! delivers it, issue events apply in GitHub's order, a rejection outlives edits, `/approve`
//! can pin a hash, closing an issue voids its approval, notices are posted at most once, and a
//! failed delivery can be driven again. Each test fails on the bot before these rules.

use axum::http::StatusCode;
use glassbox_github_bot::config::GitHubAuth;
use glassbox_github_bot::port::{ExperimentState, LabEvent, RunResult};
use glassbox_github_bot::store::{DeliveryCounts, DeliveryState, RequeueError};
use glassbox_github_bot::{
    Bot, DeliveryId, GitHub, InstallationId, IssueKey, IssueNumber, RepoName, Store,
};
use glassbox_schemas::{RunId, RunStatus};
use serde_json::{Value, json};

use crate::harness::*;
use crate::{exp, tiny_hash};

fn last_comment(h: &Harness, issue: u64) -> String {
    h.comment_bodies(issue).pop().unwrap_or_default()
}

fn approvals(h: &Harness, n: u64) -> Vec<String> {
    h.lab
        .snapshot()
        .journal
        .into_iter()
        .filter(|j| j.starts_with(&format!("approval {}", exp(n))))
        .collect()
}

/// An `issue_comment.edited` whose sender is not the comment's author.
fn edited_by(
    number: u64,
    issue_author: &str,
    body: &str,
    (author, before, after, id): (&str, &str, &str, u64),
    editor: &str,
) -> Value {
    let mut p = comment_edited(number, issue_author, body, author, before, after, id);
    p["sender"]["login"] = json!(editor);
    p
}

#[tokio::test]
async fn edited_comment_acts_as_sender() {
    let mut h = Harness::new().await;
    let body = form_body(str::to_string);
    h.deliver("issues", &issue_event("opened", 30, "carol", &body))
        .await;

    // mallory (not a maintainer, but able to edit comments) adds `/approve` to alice's comment.
    let edit = (
        "alice",
        "Looks promising.",
        "Looks promising.\n/approve",
        300,
    );
    h.deliver(
        "issue_comment",
        &edited_by(30, "carol", &body, edit, "mallory"),
    )
    .await;
    assert!(h.lab.snapshot().queue.is_empty(), "it did not run as alice");
    assert_eq!(
        last_comment(&h, 30),
        "@mallory, `/approve` was not run: only maintainers may run it; it can be run by the lab's maintainers (@alice, @bob)."
    );

    // bob, a maintainer, adds `/approve` to mallory's comment: the approval names bob.
    let edit = ("mallory", "thanks", "thanks\n/approve", 301);
    h.deliver("issue_comment", &edited_by(30, "carol", &body, edit, "bob"))
        .await;
    assert_eq!(
        approvals(&h, 30),
        vec![format!(
            "approval {} {} by bob",
            exp(30),
            tiny_hash(TINY_SPEC)
        )]
    );

    // The author (a maintainer) edits another maintainer's comment: still self-approval.
    h.deliver("issues", &issue_event("opened", 31, "alice", &body))
        .await;
    let edit = ("bob", "LGTM", "LGTM\n/approve", 310);
    h.deliver(
        "issue_comment",
        &edited_by(31, "alice", &body, edit, "alice"),
    )
    .await;
    assert!(approvals(&h, 31).is_empty());
    assert_eq!(
        last_comment(&h, 31),
        "@alice, `/approve` was not run: authors cannot approve their own proposal; another maintainer must approve it."
    );
}

#[tokio::test]
async fn events_from_other_repositories_or_installations_never_reach_the_lab() {
    let mut h = Harness::with_config(|c| c.collaborators_are_maintainers = true).await;
    let body = form_body(str::to_string);
    let mut p = issue_event("opened", 40, "carol", &body);
    p["repository"]["full_name"] = json!("mallory/glassbox");
    let id = h.deliver("issues", &p).await;
    let mut c = comment_created(40, "carol", &body, "alice", "/approve", 400);
    c["repository"]["full_name"] = json!("mallory/glassbox");
    h.deliver("issue_comment", &c).await;
    assert!(h.lab.snapshot().journal.is_empty());
    assert!(h.gh.model().requests.is_empty(), "GitHub was not called");
    let d = h.delivery(&id).await;
    assert_eq!(d.state, DeliveryState::Ignored);
    assert_eq!(
        d.detail.as_deref(),
        Some("repository mallory/glassbox is not served (github.repositories)")
    );

    // Our repository, spelt otherwise by the payload: served, and the permission lookup
    // uses the configured name, never the payload's.
    let mut p = issue_event("opened", 41, "carol", &body);
    p["repository"]["full_name"] = json!("GLASSBOX-LAB/Glassbox");
    h.deliver("issues", &p).await;
    h.gh.set_permission("dave", "write", "write");
    let mut c = comment_created(41, "carol", &body, "dave", "/approve", 410);
    c["repository"]["full_name"] = json!("GLASSBOX-LAB/Glassbox");
    h.deliver("issue_comment", &c).await;
    assert_eq!(h.lab.snapshot().queue, vec![exp(41)]);
    assert_eq!(
        h.gh.count_requests("GET /repos/glassbox-lab/glassbox/collaborators/dave/permission"),
        1
    );
    assert_eq!(h.gh.count_requests("GET /repos/GLASSBOX-LAB"), 0);

    // With an App, only its installation's deliveries are served.
    let mut h = Harness::with_config(|c| {
        c.auth = GitHubAuth::App {
            app_id: 1,
            installation_id: InstallationId(7777777),
            private_key_pem: "unused: the harness reaches the fake with a token".into(),
        }
    })
    .await;
    let ours = issue_event("opened", 42, "carol", &body);
    assert_eq!(
        ours["installation"]["id"],
        json!(7777777),
        "the recorded payload's"
    );
    h.deliver("issues", &ours).await;
    assert_eq!(h.comment_bodies(42).len(), 1);
    let mut other = issue_event("opened", 43, "carol", &body);
    other["installation"]["id"] = json!(1234);
    let id = h.deliver("issues", &other).await;
    let mut none = issue_event("opened", 44, "carol", &body);
    none.as_object_mut().unwrap().remove("installation");
    let none_id = h.deliver("issues", &none).await;
    assert!(h.comment_bodies(43).is_empty() && h.comment_bodies(44).is_empty());
    assert_eq!(
        h.delivery(&id).await.detail.as_deref(),
        Some("installation 1234 is not the configured one (github.auth.installation_id = 7777777)")
    );
    assert_eq!(h.delivery(&none_id).await.state, DeliveryState::Ignored);
    assert_eq!(h.lab.snapshot().journal.len(), 1, "only #42 was recorded");
}

#[tokio::test]
async fn a_replayed_approve_does_not_act_again() {
    let mut h = Harness::new().await;
    let body = form_body(str::to_string);
    h.deliver("issues", &issue_event("opened", 50, "carol", &body))
        .await;
    let approve = comment_created(50, "carol", &body, "alice", "/approve", 500);
    h.deliver("issue_comment", &approve).await;
    h.deliver(
        "issue_comment",
        &comment_created(50, "carol", &body, "bob", "/cancel", 501),
    )
    .await;
    assert_eq!(
        h.lab.snapshot().experiments[&exp(50)].state,
        ExperimentState::Cancelled
    );
    let comments = h.comment_bodies(50).len();

    // The captured, validly signed `/approve`, re-sent under a fresh delivery id.
    assert_eq!(
        h.deliver_as("issue_comment", "replayed-approve", &approve)
            .await,
        StatusCode::ACCEPTED
    );
    h.drain().await;
    let lab = h.lab.snapshot();
    assert_eq!(lab.experiments[&exp(50)].state, ExperimentState::Cancelled);
    assert!(lab.queue.is_empty());
    assert_eq!(approvals(&h, 50).len(), 1, "approved once");
    assert_eq!(h.comment_bodies(50).len(), comments, "nothing said");
    let d = h.delivery("replayed-approve").await;
    assert_eq!(d.state, DeliveryState::Ignored);
    assert!(d.detail.unwrap().contains("already run"));

    // The same line edited back into the comment does not run again either.
    let edit = comment_edited(50, "carol", &body, "alice", "LGTM", "/approve", 500);
    h.deliver("issue_comment", &edit).await;
    assert_eq!(approvals(&h, 50).len(), 1);
}

#[tokio::test]
async fn an_older_issue_event_is_not_applied_over_a_newer_one() {
    let mut h = Harness::new().await;
    let a = form_body(str::to_string);
    let b = form_body(|s| s.replace("steps = 300", "steps = 301"));
    h.deliver("issues", &at(issue_event("opened", 51, "carol", &a), 1_000))
        .await;
    h.deliver("issues", &at(issue_event("edited", 51, "carol", &b), 3_000))
        .await;
    // The first edit, delivered late (or replayed): older than what was applied.
    let late = h
        .deliver("issues", &at(issue_event("edited", 51, "carol", &a), 2_000))
        .await;
    let lab = h.lab.snapshot();
    assert_eq!(
        lab.experiments[&exp(51)].proposal.spec_hash.to_string(),
        tiny_hash(&TINY_SPEC.replace("steps = 300", "steps = 301"))
    );
    let d = h.delivery(&late).await;
    assert_eq!(d.state, DeliveryState::Ignored);
    assert!(d.detail.unwrap().contains("older"), "{late}");
    assert!(
        h.comment_bodies(51)[0]
            .contains(&tiny_hash(&TINY_SPEC.replace("steps = 300", "steps = 301")))
    );
    // An event of the same second is applied (GitHub's times have one-second resolution).
    h.deliver("issues", &at(issue_event("edited", 51, "carol", &a), 3_000))
        .await;
    assert_eq!(
        h.lab.snapshot().experiments[&exp(51)]
            .proposal
            .spec_hash
            .to_string(),
        tiny_hash(TINY_SPEC)
    );
}

#[tokio::test]
async fn an_edit_keeps_a_rejection_until_a_maintainer_approves() {
    let mut h = Harness::new().await;
    let body = form_body(str::to_string);
    h.deliver("issues", &issue_event("opened", 60, "carol", &body))
        .await;
    h.deliver(
        "issue_comment",
        &comment_created(60, "carol", &body, "alice", "/reject too big", 600),
    )
    .await;
    assert!(
        last_comment(&h, 60).contains("stays rejected, even when the issue is edited"),
        "{}",
        last_comment(&h, 60)
    );
    let edited = form_body(|s| s.replace("steps = 300", "steps = 200"));
    h.deliver("issues", &issue_event("edited", 60, "carol", &edited))
        .await;
    let lab = h.lab.snapshot();
    assert_eq!(
        lab.experiments[&exp(60)].state,
        ExperimentState::Rejected {
            reason: "too big".into()
        },
        "the author's edit did not undo the rejection"
    );
    assert_eq!(
        lab.experiments[&exp(60)].proposal.spec_hash.to_string(),
        tiny_hash(&TINY_SPEC.replace("steps = 300", "steps = 200")),
        "the new spec is recorded"
    );
    let validation = &h.comment_bodies(60)[0];
    assert!(
        validation.contains("rejected: too big") && validation.contains("`/approve` lifts it"),
        "{validation}"
    );
    // A maintainer's `/approve` of the new hash lifts it, as the approval entry.
    h.deliver(
        "issue_comment",
        &comment_created(60, "carol", &edited, "bob", "/approve", 601),
    )
    .await;
    assert_eq!(h.lab.snapshot().queue, vec![exp(60)]);
    assert_eq!(approvals(&h, 60).len(), 1);
    let reply = h
        .comment_bodies(60)
        .into_iter()
        .find(|c| c.contains("Approved by @bob"))
        .unwrap();
    assert_eq!(
        reply,
        format!(
            "✅ Approved by @bob for spec `{}`; queued at position 1. This lifts the earlier rejection (too big); the approval entry records it. Editing the spec voids this approval.",
            tiny_hash(&TINY_SPEC.replace("steps = 300", "steps = 200"))
        )
    );
}

#[tokio::test]
async fn approve_pinned_to_a_hash_approves_only_that_hash() {
    let mut h = Harness::new().await;
    let a = form_body(str::to_string);
    let spec_b = TINY_SPEC.replace("steps = 300", "steps = 250");
    let b = form_body(|s| s.replace("steps = 300", "steps = 250"));
    h.deliver("issues", &issue_event("opened", 70, "carol", &a))
        .await;
    h.deliver("issues", &issue_event("edited", 70, "carol", &b))
        .await;
    // alice reviewed spec A; the issue now holds B.
    let pinned_a = format!("/approve {}", tiny_hash(TINY_SPEC));
    h.deliver(
        "issue_comment",
        &comment_created(70, "carol", &b, "alice", &pinned_a, 700),
    )
    .await;
    assert!(h.lab.snapshot().queue.is_empty());
    let (pinned, current) = (tiny_hash(TINY_SPEC), tiny_hash(&spec_b));
    assert_eq!(
        last_comment(&h, 70),
        format!(
            "@alice, `/approve` was not run: you pinned `{pinned}`, but the current spec is `{current}`. Review the current spec and `/approve {current}` if it is the one you mean."
        )
    );
    // Too short a prefix is refused, naming what is accepted.
    h.deliver(
        "issue_comment",
        &comment_created(70, "carol", &b, "alice", "/approve blake3:abc", 701),
    )
    .await;
    assert!(
        last_comment(&h, 70).contains("a prefix of at least 12"),
        "{}",
        last_comment(&h, 70)
    );
    assert!(h.lab.snapshot().queue.is_empty());
    // A 12-digit prefix of the current hash approves it.
    let prefix = &tiny_hash(&spec_b)[..("blake3:".len() + 12)];
    h.deliver(
        "issue_comment",
        &comment_created(70, "carol", &b, "alice", &format!("/approve {prefix}"), 702),
    )
    .await;
    assert_eq!(h.lab.snapshot().queue, vec![exp(70)]);
    assert_eq!(
        approvals(&h, 70),
        vec![format!(
            "approval {} {} by alice",
            exp(70),
            tiny_hash(&spec_b)
        )]
    );
}

/// Proposes issue `n` and has alice approve it.
async fn approved(h: &mut Harness, n: u64, body: &str) {
    h.deliver("issues", &issue_event("opened", n, "carol", body))
        .await;
    h.deliver(
        "issue_comment",
        &comment_created(n, "carol", body, "alice", "/approve", n * 10),
    )
    .await;
    assert!(h.lab.snapshot().experiments[&exp(n)].approval.is_some());
}

fn sent_by(mut p: Value, sender: &str) -> Value {
    p["sender"]["login"] = json!(sender);
    p
}

#[tokio::test]
async fn closing_or_unlabelling_an_issue_voids_its_approval() {
    let mut h = Harness::new().await;
    let body = form_body(str::to_string);

    // Closed while queued: a rejection naming the sender; the job leaves the queue.
    approved(&mut h, 80, &body).await;
    assert!(h.gh.labels_on(80).contains("approved"));
    h.deliver(
        "issues",
        &sent_by(issue_event("closed", 80, "carol", &body), "bob"),
    )
    .await;
    let lab = h.lab.snapshot();
    assert!(lab.queue.is_empty());
    assert!(
        lab.journal.contains(&format!(
            "rejection {} by bob: issue closed by @bob",
            exp(80)
        )),
        "{:?}",
        lab.journal
    );
    assert!(!h.gh.labels_on(80).contains("approved"));
    assert_eq!(
        last_comment(&h, 80),
        format!(
            "🛑 Issue closed by @bob: the approval by @alice of `{}` is void and its job left the queue. This is recorded as a rejection; reopening the issue needs a maintainer's new `/approve`.",
            tiny_hash(TINY_SPEC)
        )
    );
    // Reopening does not bring the approval back; a new `/approve` does.
    h.deliver(
        "issues",
        &sent_by(issue_event("reopened", 80, "carol", &body), "carol"),
    )
    .await;
    assert!(h.lab.snapshot().queue.is_empty());
    assert!(h.comment_bodies(80)[0].contains("rejected: issue closed by @bob"));
    h.deliver(
        "issue_comment",
        &comment_created(80, "carol", &body, "alice", "/approve", 801),
    )
    .await;
    assert_eq!(h.lab.snapshot().queue, vec![exp(80)]);

    // Unlabelled while running: the run is stopped at its next step.
    approved(&mut h, 81, &body).await;
    h.lab.start_run(&exp(81), RunId("run-000081".into()));
    let mut unlabeled = sent_by(issue_event("unlabeled", 81, "carol", &body), "bob");
    unlabeled["label"] = json!({"name": "experiment"});
    unlabeled["issue"]["labels"] = json!([]);
    h.deliver("issues", &unlabeled).await;
    assert!(h.lab.snapshot().journal.contains(&format!(
        "rejection {} by bob: `experiment` label removed by @bob",
        exp(81)
    )));
    assert!(
        last_comment(&h, 81).contains("run `run-000081` is being stopped"),
        "{}",
        last_comment(&h, 81)
    );

    // Deleted or transferred: voided and recorded, and no comment on an issue that is gone.
    for (n, action, word) in [
        (82, "deleted", "deleted"),
        (83, "transferred", "transferred"),
    ] {
        approved(&mut h, n, &body).await;
        let before = h.comment_bodies(n).len();
        h.deliver(
            "issues",
            &sent_by(issue_event(action, n, "carol", &body), "bob"),
        )
        .await;
        assert!(h.lab.snapshot().journal.contains(&format!(
            "rejection {} by bob: issue {word} by @bob",
            exp(n)
        )));
        assert!(!h.lab.snapshot().queue.contains(&exp(n)));
        assert_eq!(h.comment_bodies(n).len(), before);
    }
}

fn finished(n: u64, run: &str) -> LabEvent {
    LabEvent::Finished {
        issue: IssueKey {
            repo: RepoName::parse(REPO).unwrap(),
            number: IssueNumber(n),
        },
        result: RunResult {
            run: RunId(run.into()),
            forecast: None,
            ending: glassbox_schemas::record::RunEnding {
                status: RunStatus::Succeeded,
                steps: 0,
                final_metrics: Default::default(),
                reason: None,
            },
            ledger_index: 12,
            proof_url: "https://lab.example.org/proof/12".into(),
            sample: None,
        },
    }
}

#[tokio::test]
async fn the_result_comment_is_posted_once_even_when_the_store_forgets_it() {
    let h = Harness::new().await;
    let event = finished(90, "run-000090");
    h.bot.handle_lab_event(event.clone()).await.unwrap();
    // The same notice again, from a bot whose store lost the row (or that crashed after the
    // POST): it finds its comment by the marker and does not post a second one.
    let dir = tempfile::tempdir().unwrap();
    let fresh = Store::open(&format!("sqlite://{}", dir.path().join("b.db").display()))
        .await
        .unwrap();
    let config = default_config(&h.gh.uri());
    let forgetful = Bot::new(
        config.clone(),
        GitHub::from_config(&config).unwrap(),
        h.lab.clone(),
        fresh,
    );
    forgetful.handle_lab_event(event.clone()).await.unwrap();
    h.bot.handle_lab_event(event).await.unwrap();
    let results: Vec<_> =
        h.gh.comments_on(90)
            .into_iter()
            .filter(|(_, c)| c.body.contains("Run `run-000090` ended"))
            .collect();
    assert_eq!(results.len(), 1, "one result comment");
    assert!(
        results[0]
            .1
            .body
            .starts_with("<!-- glassbox-bot: result:run-000090 -->")
    );

    // A comment by someone else carrying the marker is never taken for the bot's.
    let forged = h.gh.add_comment(
        91,
        "mallory",
        "<!-- glassbox-bot: result:run-000091 -->\nRun `run-000091` ended: **succeeded**",
    );
    forgetful
        .handle_lab_event(finished(91, "run-000091"))
        .await
        .unwrap();
    let comments = h.gh.comments_on(91);
    assert_eq!(comments.len(), 2);
    assert_eq!(comments[0].0, forged);
    assert_eq!(comments[0].1.edits, 0, "mallory's comment is untouched");
}

#[tokio::test]
async fn a_403_is_not_retried_as_transient_and_a_201_without_id_is_not_reposted() {
    let mut h = Harness::new().await;
    let route = "/repos/glassbox-lab/glassbox/issues/92/comments";
    h.gh.fail_next("POST", route, 403, 1, &[]);
    let id = h
        .deliver(
            "issues",
            &issue_event("opened", 92, "carol", &form_body(str::to_string)),
        )
        .await;
    let d = h.delivery(&id).await;
    assert_eq!(d.state, DeliveryState::Failed, "{d:?}");
    assert!(d.detail.unwrap().contains("403"));
    assert_eq!(h.gh.count_requests(&format!("POST {route}")), 1);

    // A 403 that is a rate limit past our longest wait stays queued for later.
    let route = "/repos/glassbox-lab/glassbox/issues/95/comments";
    h.gh.fail_next("POST", route, 403, 1, &[("retry-after", "3600")]);
    let id = h
        .deliver(
            "issues",
            &issue_event("opened", 95, "carol", &form_body(str::to_string)),
        )
        .await;
    assert_eq!(h.delivery(&id).await.state, DeliveryState::Pending);

    // GitHub created the comment (201) but sent no id: it is not posted again.
    let route = "/repos/glassbox-lab/glassbox/issues/93/comments";
    h.gh.fail_next("POST", route, 201, 1, &[]);
    let id = h
        .deliver(
            "issues",
            &issue_event("opened", 93, "carol", &form_body(str::to_string)),
        )
        .await;
    assert_eq!(h.delivery(&id).await.state, DeliveryState::Acted);
    assert_eq!(h.gh.count_requests(&format!("POST {route}")), 1);
}

#[tokio::test]
async fn a_failed_delivery_is_processed_again_when_redelivered() {
    let h = Harness::new().await;
    let p = issue_event("opened", 94, "carol", &form_body(str::to_string));
    h.gh.fail_next(
        "POST",
        "/repos/glassbox-lab/glassbox/issues/94/comments",
        422,
        1,
        &[],
    );
    assert_eq!(
        h.deliver_as("issues", "redeliver-me", &p).await,
        StatusCode::ACCEPTED
    );
    h.drain().await;
    assert_eq!(
        h.delivery("redeliver-me").await.state,
        DeliveryState::Failed
    );
    // GitHub's "Redeliver": the same delivery id, processed again.
    assert_eq!(
        h.deliver_as("issues", "redeliver-me", &p).await,
        StatusCode::ACCEPTED
    );
    assert_eq!(h.drain().await, 1);
    assert_eq!(h.delivery("redeliver-me").await.state, DeliveryState::Acted);
    assert_eq!(h.comment_bodies(94).len(), 1);
    // A delivery that acted is still a duplicate.
    assert_eq!(
        h.deliver_as("issues", "redeliver-me", &p).await,
        StatusCode::OK
    );
    assert_eq!(h.drain().await, 0);

    // `glassbox bot redeliver ID`: a failed delivery queued again from its stored payload.
    h.gh.fail_next(
        "PATCH",
        "/repos/glassbox-lab/glassbox/issues/comments",
        422,
        1,
        &[],
    );
    let edited = issue_event(
        "edited",
        94,
        "carol",
        &form_body(|s| s.replace("seed = 1", "seed = 2")),
    );
    h.deliver_as("issues", "failed-once", &edited).await;
    h.drain().await;
    assert_eq!(h.delivery("failed-once").await.state, DeliveryState::Failed);
    let failed = h
        .store
        .list_deliveries(Some(DeliveryState::Failed), 10)
        .await
        .unwrap();
    assert_eq!(failed.len(), 1);
    assert!(matches!(
        h.store
            .requeue(&DeliveryId("redeliver-me".into()))
            .await
            .unwrap_err(),
        RequeueError::NotFailed {
            state: DeliveryState::Acted,
            ..
        }
    ));
    h.store
        .requeue(&DeliveryId("failed-once".into()))
        .await
        .unwrap();
    assert_eq!(h.drain().await, 1);
    assert_eq!(h.delivery("failed-once").await.state, DeliveryState::Acted);
}

#[tokio::test]
async fn ignored_deliveries_are_pruned_after_the_configured_age() {
    let mut h = Harness::new().await;
    h.deliver(
        "issues",
        &issue_event("opened", 96, "carol", &form_body(str::to_string)),
    )
    .await;
    assert_eq!(
        h.deliver_as("star", "s-1", &json!({"action": "created"}))
            .await,
        StatusCode::ACCEPTED
    );
    assert_eq!(
        h.worker.prune_ignored().await.unwrap(),
        0,
        "a week by default"
    );
    assert_eq!(h.store.counts().await.unwrap().ignored, 1);

    let h2 = Harness::with_config(|c| c.ignored_retention_hours = 0).await;
    h2.deliver_as("star", "s-2", &json!({"action": "created"}))
        .await;
    h2.deliver_as(
        "issues",
        "o-1",
        &issue_event("opened", 97, "carol", &form_body(str::to_string)),
    )
    .await;
    h2.drain().await;
    assert_eq!(h2.worker.prune_ignored().await.unwrap(), 1);
    assert_eq!(
        h2.store.counts().await.unwrap(),
        DeliveryCounts {
            acted: 1,
            ..Default::default()
        },
        "acted deliveries are kept"
    );
}

#[tokio::test]
async fn an_ignored_action_with_a_drifted_payload_is_ignored() {
    let mut h = Harness::new().await;
    let mut p = issue_event("assigned", 98, "carol", &form_body(str::to_string));
    // Fields the bot never reads for this action, drifted from what it parses strictly.
    p["issue"]["number"] = json!("ninety-eight");
    p["issue"].as_object_mut().unwrap().remove("user");
    let id = h.deliver("issues", &p).await;
    let d = h.delivery(&id).await;
    assert_eq!(d.state, DeliveryState::Ignored, "{d:?}");
    assert_eq!(
        d.detail.as_deref(),
        Some("`issues.assigned` is not handled")
    );
    assert_eq!(h.store.counts().await.unwrap().failed, 0);
}

/// The validation comment (edited in place) of issue `n`.
fn validation_comment(h: &Harness, n: u64) -> String {
    h.comment_bodies(n)
        .into_iter()
        .find(|b| b.starts_with("<!-- glassbox-bot: validation -->"))
        .unwrap_or_default()
}

#[tokio::test]
async fn the_labs_refusals_and_limits_are_in_the_validation_comment() {
    let mut h = Harness::new().await;
    let memory = "the model and optimizer need about 96.0 GB (96000000000 bytes); the lab's limit is 12.0 GB (12000000000 bytes) (limits.max_memory_bytes)";
    h.lab.set_over_limits(vec![memory.to_string()]);
    let a = form_body(str::to_string);
    let id = h
        .deliver("issues", &issue_event("opened", 120, "carol", &a))
        .await;
    assert_eq!(h.delivery(&id).await.state, DeliveryState::Acted);
    let v = validation_comment(&h, 120);
    assert!(v.contains("over the lab's limits"), "{v}");
    assert!(v.contains(memory), "{v}");
    // The proposal is recorded, but an approval is refused with the lab's reason.
    h.deliver(
        "issue_comment",
        &comment_created(120, "carol", &a, "alice", "/approve", 1200),
    )
    .await;
    assert!(h.lab.snapshot().queue.is_empty());
    assert!(last_comment(&h, 120).contains("limits.max_memory_bytes"));

    // Within the limits, the comment says nothing about them.
    h.lab.set_over_limits(Vec::new());
    let b = form_body(|s| s.replace("steps = 300", "steps = 250"));
    h.deliver("issues", &issue_event("edited", 120, "carol", &b))
        .await;
    assert!(!validation_comment(&h, 120).contains("over the lab's limits"));

    // A proposal the lab will not record (the author's daily limit) is answered with the
    // lab's reason, not a failed delivery, and nothing reaches the journal.
    let reason = "carol has made 20 proposals in the last 24 hours; the limit is 20 (limits.max_proposals_per_author_per_day); try again later";
    h.lab.refuse_proposals(Some(reason));
    let journal = h.lab.snapshot().journal.len();
    let c = form_body(|s| s.replace("steps = 300", "steps = 200"));
    let id = h
        .deliver("issues", &issue_event("edited", 120, "carol", &c))
        .await;
    assert_eq!(h.delivery(&id).await.state, DeliveryState::Acted);
    let v = validation_comment(&h, 120);
    assert!(v.contains("Not recorded by the lab"), "{v}");
    assert!(v.contains(reason), "{v}");
    assert_eq!(h.lab.snapshot().journal.len(), journal);
    assert_eq!(
        h.comment_bodies(120)
            .iter()
            .filter(|b| b.starts_with("<!-- glassbox-bot: validation -->"))
            .count(),
        1,
        "one validation comment, edited in place"
    );
}

#[tokio::test]
async fn labels_are_set_idempotently_when_notices_repeat() {
    let h = Harness::new().await;
    let started = LabEvent::RunStarted {
        issue: IssueKey {
            repo: RepoName::parse(REPO).unwrap(),
            number: IssueNumber(121),
        },
        run: RunId("run-000121".into()),
        spec_hash: tiny_hash(TINY_SPEC).parse().unwrap(),
    };
    // Every notice delivered twice (the outbox's at-least-once): the same labels and comments.
    for _ in 0..2 {
        h.bot.handle_lab_event(started.clone()).await.unwrap();
    }
    assert_eq!(h.gh.labels_on(121), ["running".to_string()].into());
    for _ in 0..2 {
        h.bot
            .handle_lab_event(finished(121, "run-000121"))
            .await
            .unwrap();
    }
    assert_eq!(h.gh.labels_on(121), ["succeeded".to_string()].into());
    let bodies = h.comment_bodies(121);
    assert_eq!(
        bodies.len(),
        2,
        "one run comment and one result comment: {bodies:?}"
    );
}

#[tokio::test]
async fn a_403_on_a_notice_is_not_transient() {
    let h = Harness::new().await;
    let route = "/repos/glassbox-lab/glassbox/issues/122/comments";
    h.gh.fail_next("POST", route, 403, 1, &[]);
    let e = h
        .bot
        .handle_lab_event(finished(122, "run-000122"))
        .await
        .expect_err("a 403 fails the notice");
    assert!(!e.is_transient(), "a 403 is given up, not retried: {e}");
    assert_eq!(h.gh.count_requests(&format!("POST {route}")), 1);
    // A server error is retried by the lab's outbox later.
    let route = "/repos/glassbox-lab/glassbox/issues/123/comments";
    h.gh.fail_next("POST", route, 502, 10, &[]);
    let e = h
        .bot
        .handle_lab_event(finished(123, "run-000123"))
        .await
        .expect_err("a 502 that persists fails the notice");
    assert!(e.is_transient(), "a 5xx is retried: {e}");
}
