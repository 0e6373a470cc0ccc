//! A sweep filed as an experiment issue: the bot comments the children as a table (values,
//! hash, cost, the total), one `/approve` queues every child bound to the sweep file's hash,
//! and an `/approve` pinned to the hash before an edit approves nothing.

use glassbox_schemas::sweep::parse_sweep_toml;

use crate::exp;
use crate::harness::*;

fn sweep_spec(lrs: &str) -> String {
    format!(
        "[sweep]\nmetric = \"train/loss\"\ntrain.lr = {lrs}\ntrain.steps = [100, 200]\n\n{TINY_SPEC}"
    )
}

fn sweep_hash(text: &str) -> String {
    parse_sweep_toml(text).unwrap().parent_hash.to_string()
}

#[tokio::test]
async fn a_sweep_is_commented_as_a_table_and_approved_once() {
    let mut h = Harness::new().await;
    let first = sweep_spec("[0.001, 0.003]");
    let body = form_body(|_| first.clone());
    h.deliver("issues", &issue_event("opened", 80, "carol", &body))
        .await;
    let comment = h.comment_bodies(80).pop().unwrap();
    assert!(comment.contains("Valid sweep: 4 children"), "{comment}");
    assert!(comment.contains(&sweep_hash(&first)), "{comment}");
    assert!(comment.contains("lr=0.001, steps=100"), "{comment}");
    assert!(comment.contains("**total**"), "{comment}");
    assert_eq!(
        comment.matches("| blake3:").count() + comment.matches("| `blake3:").count(),
        4,
        "one row per child: {comment}"
    );

    // Edited before approval: a maintainer's /approve pinned to the old hash approves nothing.
    let second = sweep_spec("[0.001, 0.01]");
    let edited = form_body(|_| second.clone());
    h.deliver("issues", &issue_event("edited", 80, "carol", &edited))
        .await;
    let pinned = format!("/approve {}", sweep_hash(&first));
    h.deliver(
        "issue_comment",
        &comment_created(80, "carol", &edited, "alice", &pinned, 800),
    )
    .await;
    assert!(h.lab.snapshot().queue.is_empty());
    assert!(
        h.comment_bodies(80).pop().unwrap().contains("you pinned"),
        "{:?}",
        h.comment_bodies(80)
    );

    // One /approve queues all four children, attributed to the maintainer who sent it.
    h.deliver(
        "issue_comment",
        &comment_created(80, "carol", &edited, "alice", "/approve", 801),
    )
    .await;
    let queue = h.lab.snapshot().queue;
    let want: Vec<_> = (0..4)
        .map(|i| glassbox_schemas::ExperimentId(format!("{}/{i}", exp(80).0)))
        .collect();
    assert_eq!(queue, want);
    let reply = h.comment_bodies(80).pop().unwrap();
    assert_eq!(
        reply,
        format!(
            "✅ Approved by @alice for sweep `{}`: 4 children queued, each with its own approval entry bound to this hash. Editing the sweep voids this approval.",
            sweep_hash(&second)
        )
    );
    assert!(
        h.lab
            .snapshot()
            .journal
            .iter()
            .any(|j| j.ends_with("by alice (4 children)"))
    );
}
