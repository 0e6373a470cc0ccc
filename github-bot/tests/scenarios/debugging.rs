//! Community debugging as people see it in the issue: `/note` by a maintainer and by
//! a stranger (both recorded, marked differently), a note on another issue's run refused, the
//! rate limit, an edited note superseding the old one (which stays), and alerts commented once
//! per kind and run however often the lab's event is delivered.

use std::collections::BTreeMap;

use glassbox_github_bot::port::{LabEvent, RunAlert, RunResult};
use glassbox_github_bot::{IssueKey, IssueNumber, RepoName};
use glassbox_schemas::record::{Anomaly, AnomalyKind, NoteRole};
use glassbox_schemas::{ExperimentId, RunId, RunStatus};

use crate::harness::*;

fn exp(n: u64) -> ExperimentId {
    ExperimentId(format!("{REPO}#{n}"))
}

fn key(n: u64) -> IssueKey {
    IssueKey {
        repo: RepoName::parse(REPO).unwrap(),
        number: IssueNumber(n),
    }
}

/// Issue `n` by carol, approved by alice, running `run-<n>`.
async fn running_issue(h: &mut Harness, n: u64) -> (String, RunId) {
    let body = form_body(str::to_string);
    h.deliver("issues", &issue_event("opened", n, "carol", &body))
        .await;
    h.deliver(
        "issue_comment",
        &comment_created(n, "carol", &body, "alice", "/approve", 1000 + n),
    )
    .await;
    let run = RunId(format!("run-{n:06}"));
    h.lab.start_run(&exp(n), run.clone());
    (body, run)
}

#[tokio::test]
async fn notes_by_a_maintainer_and_a_stranger_are_recorded_and_marked() {
    let mut h = Harness::new().await;
    let (body, run) = running_issue(&mut h, 30).await;
    h.deliver(
        "issue_comment",
        &comment_created(
            30,
            "carol",
            &body,
            "alice",
            "/note steps 480-520: norm spike from router_bias",
            31,
        ),
    )
    .await;
    h.deliver(
        "issue_comment",
        &comment_created(
            30,
            "carol",
            &body,
            "zed",
            "I think\n/note run-000030 step 500: <script>alert(1)</script>",
            32,
        ),
    )
    .await;
    let notes = h.lab.snapshot().notes;
    assert_eq!(notes.len(), 2);
    let (maint, _) = &notes[0];
    assert_eq!(maint.role, NoteRole::Maintainer);
    assert_eq!((maint.from_step, maint.to_step), (480, 520));
    assert_eq!(maint.run, None, "the issue's only run is the lab's to pick");
    assert_eq!(
        maint.url,
        format!("https://github.com/{REPO}/issues/30#issuecomment-31")
    );
    let (stranger, recorded) = &notes[1];
    assert_eq!(stranger.role, NoteRole::Community);
    assert_eq!(stranger.author.as_str(), "zed", "the sender is the author");
    assert_eq!(
        stranger.text, "<script>alert(1)</script>",
        "kept as written"
    );
    assert_eq!(recorded.run, run);
    let comments = h.comment_bodies(30);
    let n = comments.len();
    assert!(
        comments[n - 2].starts_with("📝 @alice, your note on `run-000030` steps 480–520 is recorded as a **maintainer** note"),
        "{}",
        comments[n - 2]
    );
    assert!(
        comments[n - 1].contains("a **community** note") && !comments[n - 1].contains("<script>"),
        "{}",
        comments[n - 1]
    );
}

#[tokio::test]
async fn a_note_on_a_run_of_another_issue_is_refused() {
    let mut h = Harness::new().await;
    let (body, _) = running_issue(&mut h, 40).await;
    running_issue(&mut h, 41).await;
    h.deliver(
        "issue_comment",
        &comment_created(40, "carol", &body, "zed", "/note run-000041 step 3: hm", 42),
    )
    .await;
    assert!(h.lab.snapshot().notes.is_empty());
    assert_eq!(
        h.comment_bodies(40).pop().unwrap(),
        format!(
            "@zed, `/note` was not run: run-000041 is a run of {REPO}#41, not of {REPO}#40; note it on its own issue."
        )
    );
    // A malformed note says what is accepted, and records nothing either.
    h.deliver(
        "issue_comment",
        &comment_created(40, "carol", &body, "zed", "/note steps 9-3: backwards", 43),
    )
    .await;
    let reply = h.comment_bodies(40).pop().unwrap();
    assert!(reply.contains("ends before it starts"), "{reply}");
    assert!(h.lab.snapshot().notes.is_empty());
}

#[tokio::test]
async fn the_note_rate_limit_is_hit() {
    let mut h = Harness::new().await;
    let (body, _) = running_issue(&mut h, 50).await;
    h.lab.set_note_limit(2);
    for (i, text) in ["/note step 1: a", "/note step 2: b", "/note step 3: c"]
        .iter()
        .enumerate()
    {
        h.deliver(
            "issue_comment",
            &comment_created(50, "carol", &body, "zed", text, 51 + i as u64),
        )
        .await;
    }
    assert_eq!(h.lab.snapshot().notes.len(), 2);
    let reply = h.comment_bodies(50).pop().unwrap();
    assert!(
        reply.starts_with(
            "@zed, `/note` was not run: zed has written 2 notes in the last hour; the limit is 2"
        ),
        "{reply}"
    );
}

#[tokio::test]
async fn an_edited_note_supersedes_and_the_old_one_stays() {
    let mut h = Harness::new().await;
    let (body, _) = running_issue(&mut h, 60).await;
    let before = "/note steps 480-520: norm spike";
    let after = "/note steps 480-520: norm spike from the router_bias heuristic";
    h.deliver(
        "issue_comment",
        &comment_created(60, "carol", &body, "bob", before, 61),
    )
    .await;
    h.deliver(
        "issue_comment",
        &comment_edited(60, "carol", &body, "bob", before, after, 61),
    )
    .await;
    let notes = h.lab.snapshot().notes;
    assert_eq!(notes.len(), 2, "the old note stays on the record");
    assert_eq!(notes[0].0.text, "norm spike");
    assert_eq!(notes[1].0.text, "norm spike from the router_bias heuristic");
    assert_eq!(notes[1].1.supersedes, Some(notes[0].1.entry));
    let reply = h.comment_bodies(60).pop().unwrap();
    assert!(reply.contains("it supersedes entry 0"), "{reply}");
    // The same edit delivered again records nothing more.
    h.deliver(
        "issue_comment",
        &comment_edited(60, "carol", &body, "bob", before, after, 61),
    )
    .await;
    assert_eq!(h.lab.snapshot().notes.len(), 2);
}

#[tokio::test]
async fn alerts_are_commented_once_per_kind_and_run() {
    let mut h = Harness::new().await;
    let (_, run) = running_issue(&mut h, 70).await;
    let anomaly = |step| LabEvent::Alert {
        issue: key(70),
        run: run.clone(),
        alert: RunAlert::Anomaly {
            anomaly: Anomaly {
                kind: AnomalyKind::LossSpike,
                step,
                metric: "train/loss".into(),
                value: 7.5,
                baseline: 2.25,
                deviations: 31.0,
                layer: None,
                expert: None,
                charted: None,
            },
            ledger_index: 12,
        },
    };
    let stalled = LabEvent::Alert {
        issue: key(70),
        run: run.clone(),
        alert: RunAlert::Stalled {
            last_step: 41,
            silent_seconds: 600.0,
            median_step_seconds: 2.0,
        },
    };
    let before = h.comment_bodies(70).len();
    for event in [anomaly(41), anomaly(41), stalled.clone(), stalled] {
        h.bot.handle_lab_event(event).await.unwrap();
    }
    let diverged = LabEvent::Finished {
        issue: key(70),
        result: RunResult {
            run: run.clone(),
            forecast: None,
            ending: glassbox_schemas::record::RunEnding {
                status: RunStatus::Diverged,
                steps: 44,
                final_metrics: BTreeMap::from([("train/loss".to_string(), 7.5)]),
                reason: Some("non-finite values at step 45".into()),
            },
            ledger_index: 50,
            proof_url: "https://lab.example.org/proof/50".into(),
            sample: None,
        },
    };
    h.bot.handle_lab_event(diverged.clone()).await.unwrap();
    h.bot.handle_lab_event(diverged).await.unwrap();
    let comments = h.comment_bodies(70);
    let new = &comments[before..];
    assert_eq!(
        new.len(),
        4,
        "anomaly, stalled, result, divergence: {new:#?}"
    );
    assert!(
        new[0].contains("Alert on run `run-000070`: loss spike at step 41: `train/loss` = 7.5000"),
        "{}",
        new[0]
    );
    assert!(
        new[1].contains("has **stalled**: no step since step 41 for 10.0 min"),
        "{}",
        new[1]
    );
    assert!(new[2].contains("ended: **diverged**"), "{}", new[2]);
    assert!(
        new[3].contains("🚨 Alert: run `run-000070` **diverged**"),
        "{}",
        new[3]
    );
}
