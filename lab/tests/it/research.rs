//! Research workflows through the real flow, workers and ledger, on SQLite and on
//! PostgreSQL: a 2×2 sweep proposed in one issue and approved once (an edit before approval
//! voids it), its four children trained, and its promotion gate decided (one passes, one
//! fails); automatic reproduction that never runs on the worker that made the run (nor on its
//! host while another host serves), recording a bitwise match; and a deliberately
//! nondeterministic worker (the `test-backend` feature) whose run's reproduction is recorded
//! as a mismatch and listed as such on the leaderboard.

use glassbox_lab::LabConfig;
use glassbox_lab::config::{ReproducePolicy, ReproduceSettings};
use glassbox_lab::flow::NewSweep;
use glassbox_lab::outbox;
use glassbox_ledger::board::{BoardBuilder, BoardDef, ComputeAxis, Standing};
use glassbox_schemas::record::{
    ApprovalBody, Comparison, GateBody, GateOutcome, IssueRef, ProposalBody, ReproductionBody,
};
use glassbox_schemas::sweep::{Direction, parse_sweep_toml};
use glassbox_schemas::{EntryKind, ExperimentId};

use crate::flow::{Setup, of_kind, recorded, setup_clocked, spec};

/// The micro spec of the flow tests as a sweep file over `lr` and `steps`, with `gate`.
fn sweep_text(slug: &str, lrs: &str, gate: &str) -> String {
    format!(
        r#"
[sweep]
metric = "train/loss"
train.lr = {lrs}
train.steps = [8, 12]
{gate}

[experiment]
name = "sweep test"
slug = "{slug}"
hypothesis = "A larger learning rate trains the micro model faster."
[model]
d_model = 16
n_layers = 1
n_heads = 2
seq_len = 16
[model.moe]
n_experts = 4
top_k = 2
d_expert = 16
[[data.mixture]]
domain = "markov"
generator = {{ kind = "markov", seed = 1, order = 1, alphabet = 8, branching = 2 }}
[train]
steps = 8
batch_size = 2
lr = 0.003
eval_interval = 1000
eval_batches = 1
checkpoint_interval = 4
seed = 3
"#
    )
}

fn new_sweep(n: u64, text: &str) -> NewSweep {
    NewSweep {
        experiment: ExperimentId(format!("octo/lab#{n}")),
        author: "alice".into(),
        title: format!("sweep {n}"),
        issue: Some(IssueRef {
            repo: "octo/lab".into(),
            number: n,
            url: format!("https://github.com/octo/lab/issues/{n}"),
        }),
        sweep: parse_sweep_toml(text).unwrap(),
        toml: text.to_string(),
    }
}

fn board() -> BoardDef {
    BoardDef {
        name: "loss".into(),
        metric: "train/loss".into(),
        direction: Direction::Min,
        compute: ComputeAxis::Flops,
    }
}

async fn lab(engine: &str, name: &str, policy: ReproducePolicy) -> Setup {
    let config = LabConfig {
        reproduce: ReproduceSettings {
            policy,
            top: 3,
            on_other_worker: true,
        },
        leaderboards: vec![board()],
        ..LabConfig::default()
    };
    setup_clocked(engine, name, config, glassbox_lab::queue::Clock::System).await
}

/// Runs every job the workers can take, in turn, until none takes one.
async fn drain(workers: &[&glassbox_lab::Worker]) -> usize {
    let mut n = 0;
    loop {
        let mut any = false;
        for w in workers {
            if w.run_next().await.unwrap().is_some() {
                any = true;
                n += 1;
            }
        }
        if !any {
            return n;
        }
    }
}

async fn sweep_approved_once_and_gated(engine: &str) {
    let s = lab(engine, "sweep", ReproducePolicy::Off).await;
    let w = s.worker("w1");
    // The baseline the gates name: a run with a learning rate too small to train.
    let mut base = spec(8, "lr = 0.00001", "");
    base.experiment.slug = "baseline-moe".into();
    let (_, q) = s.propose_and_approve(1, "bob", base).await;
    recorded(w.run_job(q.job).await.unwrap());

    // Proposed, then edited before approval: the first hash no longer approves anything.
    let gate = r#"gate = { beats = "baseline-moe", by = 0.01 }"#;
    let first = s
        .flow
        .propose_sweep(new_sweep(2, &sweep_text("lr-sweep", "[0.003, 0.01]", gate)))
        .await
        .unwrap();
    assert_eq!(first.children.len(), 4);
    let again = s
        .flow
        .propose_sweep(new_sweep(2, &sweep_text("lr-sweep", "[0.003, 0.01]", gate)))
        .await
        .unwrap();
    assert!(!again.new, "the same file again writes nothing");
    let edited = s
        .flow
        .propose_sweep(new_sweep(2, &sweep_text("lr-sweep", "[0.003, 0.02]", gate)))
        .await
        .unwrap();
    assert_ne!(edited.parent_hash, first.parent_hash);
    let sweep = ExperimentId("octo/lab#2".into());
    let stale = s
        .flow
        .approve_sweep(&sweep, &first.parent_hash, "maint")
        .await
        .unwrap_err()
        .to_string();
    assert!(stale.contains("the sweep changed"), "{stale}");
    assert!(
        s.queue
            .latest_job_of(&ExperimentId("octo/lab#2/0".into()))
            .await
            .unwrap()
            .is_none()
    );

    // One approval queues all four children, each with its own approval entry bound to the
    // sweep's hash.
    let queued = s
        .flow
        .approve_sweep(&sweep, &edited.parent_hash, "maint")
        .await
        .unwrap();
    assert_eq!(queued.len(), 4);
    let again = s
        .flow
        .approve_sweep(&sweep, &edited.parent_hash, "maint")
        .await
        .unwrap();
    assert_eq!(
        again.iter().map(|q| q.job).collect::<Vec<_>>(),
        queued.iter().map(|q| q.job).collect::<Vec<_>>(),
        "a retried /approve returns the same jobs"
    );
    // A second sweep whose gate cannot pass (it must beat the baseline by 100).
    let hopeless = r#"gate = { beats = "baseline-moe", by = 100.0 }"#;
    let other = s
        .flow
        .propose_sweep(new_sweep(
            3,
            &sweep_text("lr-sweep-b", "[0.003, 0.01]", hopeless),
        ))
        .await
        .unwrap();
    s.flow
        .approve_sweep(
            &ExperimentId("octo/lab#3".into()),
            &other.parent_hash,
            "maint",
        )
        .await
        .unwrap();
    assert_eq!(drain(&[&w]).await, 8);

    let entries = s.entries();
    let approvals: Vec<ApprovalBody> = of_kind(&entries, EntryKind::Approval)
        .iter()
        .filter(|e| {
            e.experiment
                .as_ref()
                .is_some_and(|x| x.0.starts_with("octo/lab#2/"))
        })
        .map(|e| e.body_of::<ApprovalBody>().unwrap().clone())
        .collect();
    assert_eq!(approvals.len(), 4);
    assert!(
        approvals
            .iter()
            .all(|a| a.sweep == Some(edited.parent_hash))
    );
    let children: Vec<ProposalBody> = of_kind(&entries, EntryKind::Proposal)
        .iter()
        .filter_map(|e| e.body_of::<ProposalBody>().ok().cloned())
        .filter(|p| p.sweep.as_ref().is_some_and(|l| l.parent == sweep))
        .collect();
    assert!(
        children.len() >= 4,
        "every child is an ordinary, linked proposal"
    );
    assert_eq!(of_kind(&entries, EntryKind::Sweep).len(), 3);

    let gates: Vec<GateBody> = of_kind(&entries, EntryKind::Gate)
        .iter()
        .map(|e| e.body_of::<GateBody>().unwrap().clone())
        .collect();
    assert_eq!(gates.len(), 2, "one gate entry per sweep: {gates:?}");
    let passed = gates.iter().find(|g| g.sweep == sweep).unwrap();
    assert_eq!(passed.outcome, GateOutcome::Passed, "{}", passed.detail);
    let base = passed.baseline.as_ref().unwrap();
    let best = passed.best.as_ref().unwrap();
    assert!(best.value < base.value - 0.01, "{base:?} {best:?}");
    assert!(best.experiment.0.starts_with("octo/lab#2/"));
    let failed = gates.iter().find(|g| g.sweep.0 == "octo/lab#3").unwrap();
    assert_eq!(failed.outcome, GateOutcome::Failed, "{}", failed.detail);
    assert!(failed.detail.contains("did not beat"), "{}", failed.detail);
    // Both are announced on their issues.
    let notices = outbox::pending(&s.queue, 1000).await.unwrap();
    let gate_notices = notices
        .iter()
        .filter(|(_, n)| matches!(n, outbox::Notice::Gate { .. }))
        .count();
    assert_eq!(gate_notices, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_approved_once_and_gated_sqlite() {
    sweep_approved_once_and_gated("sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_approved_once_and_gated_postgres() {
    sweep_approved_once_and_gated("postgres").await;
}

async fn reproduced_on_the_other_worker(engine: &str) {
    let s = lab(engine, "repro", ReproducePolicy::All).await;
    let (w1, w2) = (s.worker("w1"), s.worker("w2"));
    let (_, q) = s.propose_and_approve(1, "alice", spec(8, "", "")).await;
    let made = recorded(w1.run_job(q.job).await.unwrap());
    assert_eq!(made.ending.status, glassbox_schemas::RunStatus::Succeeded);
    // The lab queued the reproduction itself; the worker that made the run never takes it.
    let job = s
        .queue
        .open_reproduction_of(&made.run)
        .await
        .unwrap()
        .unwrap();
    assert!(job.automatic);
    assert_eq!(job.avoid_worker.as_ref().map(|w| w.0.as_str()), Some("w1"));
    assert!(
        w1.run_next().await.unwrap().is_none(),
        "w1 must not reproduce its own run"
    );
    let again = recorded(w2.run_next().await.unwrap());
    assert_eq!(again.ending.status, glassbox_schemas::RunStatus::Succeeded);

    let entries = s.entries();
    let repro: Vec<&ReproductionBody> = of_kind(&entries, EntryKind::Reproduction)
        .iter()
        .map(|e| e.body_of::<ReproductionBody>().unwrap())
        .collect();
    assert_eq!(repro.len(), 1);
    assert_eq!(repro[0].outcome, "reproduced", "{:?}", repro[0].detail);
    assert_eq!(repro[0].worker.as_deref(), Some("w2"));
    assert_eq!(repro[0].comparison, Some(Comparison::Bitwise));
    assert!(repro[0].automatic);
    let started = of_kind(&entries, EntryKind::RunStarted)[0]
        .body_of::<glassbox_schemas::record::RunStartedBody>()
        .unwrap();
    assert_eq!(started.worker.as_deref(), Some("w1"));

    // Ranked, from the entries alone.
    let mut b = BoardBuilder::new();
    for (i, e) in entries.iter().enumerate() {
        b.add(i as u64, e);
    }
    let boards = b.finish(&[board()], |_| None);
    assert_eq!(boards[0].ranked.len(), 1);
    assert_eq!(boards[0].ranked[0].run, made.run);
    assert!(boards[0].awaiting.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reproduced_on_the_other_worker_sqlite() {
    reproduced_on_the_other_worker("sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reproduced_on_the_other_worker_postgres() {
    reproduced_on_the_other_worker("postgres").await;
}

/// While a worker of another host serves the queue, a worker on the run's host leaves the
/// reproduction to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reproduction_waits_for_another_host() {
    let s = lab("sqlite", "hosts", ReproducePolicy::All).await;
    let on = |name: &str, host: &str| {
        let host = host.to_string();
        s.worker_with(name, move |o| o.host = host)
    };
    let (w1, w2, w3) = (on("w1", "alpha"), on("w2", "alpha"), on("w3", "beta"));
    assert!(
        w3.run_next().await.unwrap().is_none(),
        "w3 announces host beta"
    );
    let (_, q) = s.propose_and_approve(1, "alice", spec(8, "", "")).await;
    let made = recorded(w1.run_job(q.job).await.unwrap());
    assert!(
        w2.run_next().await.unwrap().is_none(),
        "same host as the run"
    );
    let again = recorded(w3.run_next().await.unwrap());
    assert_eq!(again.run, made.run);
    let entries = s.entries();
    let r = of_kind(&entries, EntryKind::Reproduction)[0]
        .body_of::<ReproductionBody>()
        .unwrap();
    assert_eq!(r.host.as_deref(), Some("beta"));
}

async fn a_nondeterministic_backend_is_a_recorded_mismatch(engine: &str) {
    let s = lab(engine, "nondet", ReproducePolicy::All).await;
    let w1 = s.worker_with("w1", |o| o.nondeterministic = true);
    let w2 = s.worker("w2");
    let (_, q) = s.propose_and_approve(1, "alice", spec(8, "", "")).await;
    let made = recorded(w1.run_job(q.job).await.unwrap());
    let again = recorded(w2.run_next().await.unwrap());
    assert_eq!(again.ending.status, glassbox_schemas::RunStatus::Failed);
    let entries = s.entries();
    let r = of_kind(&entries, EntryKind::Reproduction)[0]
        .body_of::<ReproductionBody>()
        .unwrap();
    assert_eq!(r.outcome, "differs");
    assert!(
        r.detail
            .as_deref()
            .unwrap_or("")
            .starts_with("differs at step"),
        "{:?}",
        r.detail
    );
    // Announced, and shown on the board as a failed reproduction, never ranked.
    let notices = outbox::pending(&s.queue, 1000).await.unwrap();
    assert!(notices.iter().any(|(_, n)| matches!(
        n,
        outbox::Notice::Reproduced { outcome, .. } if outcome == "differs"
    )));
    let mut b = BoardBuilder::new();
    for (i, e) in entries.iter().enumerate() {
        b.add(i as u64, e);
    }
    let boards = b.finish(&[board()], |_| None);
    assert!(boards[0].ranked.is_empty());
    assert_eq!(boards[0].failed.len(), 1);
    assert_eq!(boards[0].failed[0].run, made.run);
    assert_eq!(boards[0].failed[0].standing, Standing::ReproductionFailed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nondeterministic_backend_is_a_recorded_mismatch_sqlite() {
    a_nondeterministic_backend_is_a_recorded_mismatch("sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nondeterministic_backend_is_a_recorded_mismatch_postgres() {
    a_nondeterministic_backend_is_a_recorded_mismatch("postgres").await;
}

/// `policy = "top"` reproduces a run that would enter the top N, and not one that would not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_policy_reproduces_only_contenders() {
    let config = LabConfig {
        reproduce: ReproduceSettings {
            policy: ReproducePolicy::Top,
            top: 1,
            on_other_worker: true,
        },
        leaderboards: vec![board()],
        ..LabConfig::default()
    };
    let s = setup_clocked("sqlite", "top", config, glassbox_lab::queue::Clock::System).await;
    let (w1, w2) = (s.worker("w1"), s.worker("w2"));
    // The first run enters an empty board's top 1, and is reproduced (so ranked).
    let (_, q) = s
        .propose_and_approve(1, "alice", spec(12, "lr = 0.01", ""))
        .await;
    let good = recorded(w1.run_job(q.job).await.unwrap());
    assert!(
        s.queue
            .open_reproduction_of(&good.run)
            .await
            .unwrap()
            .is_some()
    );
    recorded(w2.run_next().await.unwrap());
    // A run that cannot train (tiny lr) would not beat it: nothing is queued.
    let (_, q) = s
        .propose_and_approve(2, "alice", spec(8, "lr = 0.00001", ""))
        .await;
    let weak = recorded(w1.run_job(q.job).await.unwrap());
    assert!(
        weak.ending.final_metrics["train/loss"] > good.ending.final_metrics["train/loss"],
        "the test needs the second run to be worse"
    );
    assert!(
        s.queue
            .open_reproduction_of(&weak.run)
            .await
            .unwrap()
            .is_none()
    );
}
