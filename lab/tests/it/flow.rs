//! The lab's flow end to end in one process, on SQLite and on PostgreSQL: proposals and
//! approvals become ledger entries and jobs, workers train them with the real CPU runner, and
//! every ending (succeeded, diverged, cancelled, budget_exceeded, failed before training) is a
//! `result` entry followed by a notice. The ledger is a real lab directory; PostgreSQL is the
//! real server (`GLASSBOX_TEST_POSTGRES_URL`, which `cargo xtask test` provides), one schema per
//! test; the tests fail, never skip, without it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use glassbox_github_bot::port::{
    Approval, Cancelled, ExperimentState, LabEvent, LabPort, Proposal,
};
use glassbox_github_bot::{IssueNumber, Login};
use glassbox_lab::flow::issue_key;
use glassbox_lab::outbox::{self, NoticeDelivery};
use glassbox_lab::queue::{CancelOutcome, Clock, JobKind, JobState, NewJob, Queue, WorkerId};
use glassbox_lab::worker::{JobEnd, WorkerOptions};
use glassbox_lab::{Flow, LabConfig, NewProposal, Recorder, Worker};
use glassbox_ledger::index::Index;
use glassbox_ledger::{DirSource, LabDir, LogReader};
use glassbox_runner::train::Peak;
use glassbox_schemas::record::{IssueRef, RejectionBody, ResultBody, RunStartedBody};
use glassbox_schemas::spec::Forecast;
use glassbox_schemas::{EntryKind, ExperimentId, ExperimentSpec, LedgerEntry, RunStatus};

/// A lab directory, a queue on `engine`, a flow and its recorder.
pub(crate) struct Setup {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) flow: Flow,
    pub(crate) queue: Queue,
    pub(crate) recorder: Arc<Recorder>,
    /// The queue database's URL (for a test that reaches behind the flow).
    pub(crate) url: String,
}

async fn setup(engine: &str, name: &str, config: LabConfig) -> Setup {
    setup_clocked(engine, name, config, Clock::System).await
}

/// [`setup`] with a given clock (a manual one moves leases and days without sleeping).
pub(crate) async fn setup_clocked(
    engine: &str,
    name: &str,
    config: LabConfig,
    clock: Clock,
) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let (lab, _) = LabDir::init(&dir.path().join("lab"), "test.glassbox/lab").unwrap();
    let url = match engine {
        "sqlite" => format!("sqlite://{}", dir.path().join("queue.db").display()),
        _ => {
            glassbox_test_support::postgres_schema("flow", name)
                .await
                .url
        }
    };
    let queue = Queue::connect_with_clock(&url, clock).await.unwrap();
    let seq = glassbox_lab::sequencer::Sequencer::connect(
        &url,
        glassbox_lab::queue::Durability::PowerLoss,
    )
    .unwrap();
    let blobs = Arc::new(lab.blobs());
    let recorder = Arc::new(Recorder::open(lab, blobs, seq).unwrap());
    let flow = Flow::new(queue.clone(), recorder.clone(), config);
    Setup {
        dir,
        flow,
        queue,
        recorder,
        url,
    }
}

impl Setup {
    pub(crate) fn worker(&self, name: &str) -> Worker {
        self.worker_with(name, |_| {})
    }

    /// [`Setup::worker`] with its options changed by `edit`.
    pub(crate) fn worker_with(&self, name: &str, edit: impl FnOnce(&mut WorkerOptions)) -> Worker {
        let mut opts = WorkerOptions::new(
            WorkerId(name.into()),
            self.dir.path().join("scratch").join(name),
            "test-revision".into(),
        );
        opts.threads = 1;
        opts.peak = Some(Peak {
            flops_per_second: 1e11,
            label: "given".into(),
        });
        opts.settings.heartbeat_seconds = 0.2;
        opts.settings.metrics_flush_steps = 3;
        opts.limits = self.flow.config().limits.clone();
        opts.reproduce = self.flow.config().reproduce.clone();
        opts.leaderboards = self.flow.config().leaderboards.clone();
        edit(&mut opts);
        Worker::new(self.queue.clone(), self.recorder.clone(), opts)
            .with_switches(self.flow.switches())
    }

    /// Proposes `sp` as issue `n` by `author` and has a maintainer approve it.
    pub(crate) async fn propose_and_approve(
        &self,
        n: u64,
        author: &str,
        sp: ExperimentSpec,
    ) -> (glassbox_lab::flow::Recorded, glassbox_lab::flow::Queued) {
        let r = self
            .flow
            .propose(proposal(n, author, sp, None))
            .await
            .unwrap();
        let q = self
            .flow
            .approve(
                &ExperimentId(format!("octo/lab#{n}")),
                &r.spec_hash,
                "maint",
                false,
            )
            .await
            .unwrap();
        (r, q)
    }

    /// Every entry in the log, in order.
    pub(crate) fn entries(&self) -> Vec<LedgerEntry> {
        let lab = self.recorder.lab();
        let source = DirSource {
            root: lab.root().to_path_buf(),
        };
        let reader = LogReader::open(&source, &lab.verifier_key().unwrap()).unwrap();
        (0..reader.size().0)
            .map(|i| {
                LedgerEntry::from_bytes(&reader.entry(glassbox_ledger::LeafIndex(i)).unwrap())
                    .unwrap()
            })
            .collect()
    }
}

/// A micro spec: trains in well under a second on one thread.
pub(crate) fn spec(steps: u64, extra_train: &str, budget: &str) -> ExperimentSpec {
    let text = format!(
        r#"
[experiment]
name = "flow test"
slug = "flow-test"
hypothesis = "The lab records every run."
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
steps = {steps}
batch_size = 2
lr = 0.003
eval_interval = 1000
eval_batches = 1
checkpoint_interval = 4
seed = 3
{extra_train}
{budget}
"#
    );
    // A key in `extra_train` replaces the base line of the same key.
    let overridden: Vec<&str> = extra_train
        .lines()
        .filter_map(|l| l.split('=').next())
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .collect();
    let text: String = text
        .lines()
        .filter(|l| {
            let key = l.split('=').next().unwrap_or("").trim();
            !(l.contains('=') && overridden.contains(&key) && !extra_train.contains(l))
        })
        .map(|l| format!("{l}\n"))
        .collect();
    glassbox_schemas::parse_toml(&text).unwrap()
}

fn proposal(n: u64, author: &str, spec: ExperimentSpec, forecast: Option<Forecast>) -> NewProposal {
    NewProposal {
        experiment: ExperimentId(format!("octo/lab#{n}")),
        author: author.into(),
        title: format!("experiment {n}"),
        issue: Some(IssueRef {
            repo: "octo/lab".into(),
            number: n,
            url: format!("https://github.com/octo/lab/issues/{n}"),
        }),
        spec,
        spec_toml: Some("# as written\n".into()),
        snapshot: Some("issue body".into()),
        forecast,
    }
}

pub(crate) fn recorded(end: Option<JobEnd>) -> glassbox_lab::worker::Finished {
    match end {
        Some(JobEnd::Recorded(f)) => *f,
        other => panic!("expected a recorded job end, got {other:?}"),
    }
}

fn kinds(entries: &[LedgerEntry]) -> Vec<&'static str> {
    entries.iter().map(|e| e.kind().as_str()).collect()
}

async fn whole_flow(engine: &str) {
    let s = setup(engine, "whole", LabConfig::default()).await;
    let forecast = Forecast {
        metric: "train/loss".into(),
        value: 2.0,
        tolerance: 10.0,
    };
    let r = s
        .flow
        .propose(proposal(1, "alice", spec(8, "", ""), Some(forecast)))
        .await
        .unwrap();
    assert!(r.new);
    // The same proposal again (a retried delivery) writes nothing.
    let again = s
        .flow
        .propose(proposal(1, "alice", spec(8, "", ""), None))
        .await
        .unwrap();
    assert!(!again.new);
    assert_eq!(again.entry, r.entry);
    let q = s
        .flow
        .approve(
            &ExperimentId("octo/lab#1".into()),
            &r.spec_hash,
            "maint",
            false,
        )
        .await
        .unwrap();
    assert_eq!(q.position, 1);
    let f = recorded(s.worker("w1").run_next().await.unwrap());
    assert_eq!(
        f.ending.status,
        RunStatus::Succeeded,
        "{:?}",
        f.ending.reason
    );
    assert_eq!(f.ending.steps, 8);

    let entries = s.entries();
    let k = kinds(&entries);
    assert_eq!(&k[..4], ["proposal", "forecast", "approval", "run_started"]);
    assert_eq!(k.last(), Some(&"result"));
    assert_eq!(k.iter().filter(|k| **k == "checkpoint").count(), 2);
    assert!(k.iter().filter(|k| **k == "artifact").count() >= 3, "{k:?}");
    // The proposal names the spec blob by the spec hash itself, and the TOML and issue beside.
    assert_eq!(entries[0].refs["spec"], r.spec_hash.0);
    assert!(entries[0].refs.contains_key("spec_toml") && entries[0].refs.contains_key("issue"));
    let started: RunStartedBody = entries[3].body_as().unwrap();
    assert_eq!(started.spec_hash, r.spec_hash);
    assert_eq!(started.code_revision, "test-revision");
    assert!(!started.kernel_hashes.is_empty());
    let result: ResultBody = entries.last().unwrap().body_as().unwrap();
    assert_eq!(result.ending.status, RunStatus::Succeeded);
    let fc = result
        .forecast
        .expect("the registered forecast is compared");
    assert!(fc.hit && fc.actual.is_some());
    assert!(entries.last().unwrap().refs.contains_key("checkpoint"));

    // The notices follow the entries, and convert to the bot's events for the issue.
    let pending = outbox::pending(&s.queue, 10).await.unwrap();
    assert_eq!(pending.len(), 2);
    let events: Vec<LabEvent> = pending
        .iter()
        .filter_map(|(_, n)| s.flow.lab_event(n))
        .collect();
    match &events[1] {
        LabEvent::Finished { issue, result } => {
            assert_eq!(issue.number, IssueNumber(1));
            assert_eq!(result.ledger_index, entries.len() as u64 - 1);
            assert_eq!(result.ending.status, RunStatus::Succeeded);
        }
        other => panic!("expected Finished, got {other:?}"),
    }
    let n = s.flow.deliver_notices(|_| async { true }).await.unwrap();
    assert_eq!(n, 2);
    assert!(outbox::pending(&s.queue, 10).await.unwrap().is_empty());

    // The index has the whole loss curve from the metric chunks.
    let index = Index::connect(&s.dir.path().join("index.db").display().to_string())
        .await
        .unwrap();
    s.recorder.sync_index(&index).await.unwrap();
    let points = index.metric_points(&f.run.0).await.unwrap();
    let loss: Vec<u64> = points
        .iter()
        .filter(|(n, _, _)| n == "train/loss")
        .map(|(_, s, _)| *s)
        .collect();
    assert_eq!(loss, (1..=8).collect::<Vec<_>>());
    assert!(
        points
            .iter()
            .any(|(n, _, _)| n.starts_with("train/router/layer_0/expert_load/")),
        "vector metrics are indexed per component"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_flow_sqlite() {
    whole_flow("sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_flow_postgres() {
    whole_flow("postgres").await;
}

async fn two_workers_fifty_jobs(engine: &str) {
    let cfg = LabConfig::parse(
        "[limits]\nmax_open_per_author = 100\nmax_proposals_per_author_per_day = 100\n",
    )
    .unwrap();
    let s = setup(engine, "fifty", cfg).await;
    let sp = spec(2, "checkpoint_interval = 0", "");
    for n in 0..50 {
        s.propose_and_approve(n, "alice", sp.clone()).await;
    }
    let mut tasks = Vec::new();
    for w in 0..2 {
        let worker = s.worker(&format!("w{w}"));
        tasks.push(tokio::spawn(async move {
            let mut done = Vec::new();
            while let Some(end) = worker.run_next().await.unwrap() {
                done.push(recorded(Some(end)).job);
            }
            done
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        let d = t.await.unwrap();
        assert!(!d.is_empty(), "both workers took jobs");
        all.extend(d);
    }
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 50, "every job ran, none twice");
    for job in s.queue.list(None, 100).await.unwrap() {
        assert_eq!(job.state, JobState::Ended(RunStatus::Succeeded));
        assert_eq!(job.attempts, 1);
    }
    let entries = s.entries();
    let results: Vec<ResultBody> = entries
        .iter()
        .filter(|e| e.kind() == EntryKind::Result)
        .map(|e| e.body_as().unwrap())
        .collect();
    let mut runs: Vec<String> = results.iter().map(|r| r.run.0.clone()).collect();
    runs.sort();
    runs.dedup();
    assert_eq!(runs.len(), 50, "one result per run");
    assert_eq!(
        entries
            .iter()
            .filter(|e| e.kind() == EntryKind::RunStarted)
            .count(),
        50
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_fifty_jobs_sqlite() {
    two_workers_fifty_jobs("sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_fifty_jobs_postgres() {
    two_workers_fifty_jobs("postgres").await;
}

async fn every_ending_is_recorded(engine: &str) {
    let cfg = LabConfig::parse("[limits]\nmax_open_per_author = 100\n").unwrap();
    let s = setup(engine, "endings", cfg).await;
    let approve = |n: u64, sp: ExperimentSpec| {
        let s = &s;
        async move { s.propose_and_approve(n, "bob", sp).await.1 }
    };
    // Over budget: a FLOP budget far below the run's cost.
    approve(1, spec(50, "", "[budget]\nmax_flops = 2e6")).await;
    let f = recorded(s.worker("w").run_next().await.unwrap());
    assert_eq!(f.ending.status, RunStatus::BudgetExceeded);
    assert!(f.ending.final_metrics.contains_key("train/loss"));

    // Diverged: sign-Adam at lr 10 with a strong z-loss overflows (deterministically, at
    // step 2414 of this spec on the CPU backend).
    let wild = "grad_clip = 1000000.0\nlr = 10.0\nwarmup_steps = 0\nbeta1 = 0.0\nbeta2 = 0.0\n\
                weight_decay = 0.0\nz_loss = 1.0\ncheckpoint_interval = 0";
    approve(2, spec(3000, wild, "")).await;
    let f = recorded(s.worker("w").run_next().await.unwrap());
    assert_eq!(
        f.ending.status,
        RunStatus::Diverged,
        "{:?}",
        f.ending.reason
    );

    // Cancelled while running: the request reaches the run within a step.
    let q = approve(3, spec(100_000, "checkpoint_interval = 0", "")).await;
    // Cancelled before it started: the job leaves the queue with its `result` on the record.
    let waiting = approve(4, spec(10, "", "")).await;
    let before = s.entries().len();
    assert_eq!(
        s.flow.cancel_job(waiting.job, "maint").await.unwrap(),
        CancelOutcome::Cancelled
    );
    let after = s.entries();
    assert_eq!(after.len(), before + 1, "one entry for the cancellation");
    let ended: ResultBody = after.last().unwrap().body_as().unwrap();
    assert_eq!(ended.ending.status, RunStatus::Cancelled);
    assert_eq!(
        ended.ending.reason.as_deref(),
        Some("cancelled by maint before it started")
    );
    assert_eq!(ended.run, s.queue.get(waiting.job).await.unwrap().run());

    let worker = s.worker("w");
    let run = tokio::spawn(async move { worker.run_next().await });
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while s.queue.get(q.job).await.unwrap().state != JobState::Running {
        assert!(std::time::Instant::now() < deadline, "job never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    s.flow.cancel_job(q.job, "maint").await.unwrap();
    let f = recorded(run.await.unwrap().unwrap());
    assert_eq!(f.ending.status, RunStatus::Cancelled);
    assert!(f.ending.steps < 100_000);

    let entries = s.entries();
    let statuses: Vec<RunStatus> = entries
        .iter()
        .filter(|e| e.kind() == EntryKind::Result)
        .map(|e| e.body_as::<ResultBody>().unwrap().ending.status)
        .collect();
    assert_eq!(
        statuses,
        [
            RunStatus::BudgetExceeded,
            RunStatus::Diverged,
            RunStatus::Cancelled,
            RunStatus::Cancelled
        ]
    );
    let finished = outbox::pending(&s.queue, 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|(_, n)| matches!(n, outbox::Notice::Finished { .. }))
        .count();
    // Each ending of a run is announced; the job cancelled before it started was answered by
    // the command that cancelled it.
    assert_eq!(finished, 3, "each run's ending is announced");
    let states: BTreeMap<i64, JobState> = s
        .queue
        .list(None, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|j| (j.id.0, j.state))
        .collect();
    assert_eq!(
        states.values().copied().collect::<Vec<_>>(),
        [
            JobState::Ended(RunStatus::BudgetExceeded),
            JobState::Ended(RunStatus::Diverged),
            JobState::Ended(RunStatus::Cancelled),
            JobState::Ended(RunStatus::Cancelled)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_ending_is_recorded_sqlite() {
    every_ending_is_recorded("sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_ending_is_recorded_postgres() {
    every_ending_is_recorded("postgres").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_approval_names_another_hash_never_trains() {
    let s = setup("sqlite", "mismatch", LabConfig::default()).await;
    let (a, q) = s.propose_and_approve(1, "carol", spec(4, "", "")).await;
    // A second spec whose job claims the first spec's approval.
    let b = s
        .flow
        .propose(proposal(2, "carol", spec(5, "", ""), None))
        .await
        .unwrap();
    s.flow.cancel_job(q.job, "test").await.unwrap();
    s.queue
        .enqueue(&NewJob {
            kind: JobKind::Run,
            experiment: ExperimentId("octo/lab#2".into()),
            spec_hash: b.spec_hash,
            author: "carol".into(),
            proposal_entry: Some(b.entry),
            approval_entry: Some(q.approval_entry),
            priority: 0,
            max_attempts: 1,
        })
        .await
        .unwrap();
    let f = recorded(s.worker("w").run_next().await.unwrap());
    assert_eq!(f.ending.status, RunStatus::Failed);
    let reason = f.ending.reason.unwrap();
    assert!(
        reason.contains("approval") && reason.contains(&a.spec_hash.to_string()),
        "{reason}"
    );
    let k = kinds(&s.entries());
    assert!(!k.contains(&"run_started"), "it never trained: {k:?}");
    assert_eq!(k.last(), Some(&"result"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn editing_voids_the_approval_and_limits_are_applied() {
    let cfg = LabConfig::parse("[limits]\nmax_flops_per_proposal = 1e9\n").unwrap();
    let s = setup("sqlite", "edit", cfg).await;
    let id = ExperimentId("octo/lab#7".into());
    let a = s
        .flow
        .propose(proposal(7, "dan", spec(4, "", ""), None))
        .await
        .unwrap();
    let q = s
        .flow
        .approve(&id, &a.spec_hash, "maint", false)
        .await
        .unwrap();
    let b = s
        .flow
        .propose(proposal(7, "dan", spec(6, "", ""), None))
        .await
        .unwrap();
    assert_eq!(b.voided.as_ref().map(|v| v.0), Some(a.spec_hash));
    assert_eq!(
        s.queue.get(q.job).await.unwrap().state,
        JobState::Ended(RunStatus::Cancelled)
    );
    // Approving the old hash is refused as stale, through the bot's port too.
    let err = LabPort::approve(
        &s.flow,
        Approval {
            experiment: id.clone(),
            spec_hash: a.spec_hash,
            approver: Login::new("maint"),
        },
    )
    .await
    .unwrap_err();
    assert!(matches!(
        err,
        glassbox_github_bot::port::LabError::StaleHash { .. }
    ));
    // A spec over the lab's FLOP limit is refused with the limit's key.
    let big = s
        .flow
        .propose(proposal(8, "dan", spec(100_000, "", ""), None))
        .await
        .unwrap();
    let err = s
        .flow
        .approve(
            &ExperimentId("octo/lab#8".into()),
            &big.spec_hash,
            "maint",
            false,
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("limits.max_flops_per_proposal"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bot_port_records_a_proposal_from_an_issue() {
    let s = setup("sqlite", "port", LabConfig::default()).await;
    let sp = spec(4, "", "");
    let hash = glassbox_schemas::spec_hash(&sp).unwrap();
    let experiment = ExperimentId("octo/lab#42".into());
    let p = Proposal {
        experiment: experiment.clone(),
        issue: IssueRef {
            repo: "octo/lab".into(),
            number: 42,
            url: "https://github.com/octo/lab/issues/42".into(),
        },
        author: Login::new("erin"),
        title: "Try a thing".into(),
        spec: sp,
        spec_hash: hash,
        hypothesis: "It works.".into(),
        forecast: None,
        issue_body: "### Spec\n```toml\n...\n```".into(),
    };
    LabPort::record_proposal(&s.flow, p).await.unwrap();
    let pos = LabPort::approve(
        &s.flow,
        Approval {
            experiment: experiment.clone(),
            spec_hash: hash,
            approver: Login::new("maint"),
        },
    )
    .await
    .unwrap();
    assert_eq!(pos, 1);
    // A retried approval returns the same queued job rather than a second one.
    let again = LabPort::approve(
        &s.flow,
        Approval {
            experiment: experiment.clone(),
            spec_hash: hash,
            approver: Login::new("maint"),
        },
    )
    .await
    .unwrap();
    assert_eq!(again, 1);
    assert_eq!(s.queue.list(None, 10).await.unwrap().len(), 1);
    assert_eq!(
        LabPort::queued_count(&s.flow, &Login::new("erin"))
            .await
            .unwrap(),
        1
    );
    let status = LabPort::status(&s.flow, &experiment)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.spec_hash, hash);
    assert_eq!(issue_key(&experiment).unwrap().number, IssueNumber(42));
}

// Who may act: a rejection outlives edits, closing an issue voids its approval as a
// rejection, and one failing notice does not hold back the others.

async fn an_edit_keeps_a_rejection_until_an_approval_lifts_it(engine: &str) {
    let s = setup(engine, "keep_rejection", LabConfig::default()).await;
    let id = ExperimentId("octo/lab#11".into());
    let a = s
        .flow
        .propose(proposal(11, "erin", spec(4, "", ""), None))
        .await
        .unwrap();
    s.flow.reject(&id, "maint", "too big").await.unwrap();
    let rejected = |reason: &str| ExperimentState::Rejected {
        reason: reason.into(),
    };
    let again = s
        .flow
        .propose(proposal(11, "erin", spec(4, "", ""), None))
        .await
        .unwrap();
    assert!(!again.new, "the same spec again records nothing");
    let b = s
        .flow
        .propose(proposal(11, "erin", spec(5, "", ""), None))
        .await
        .unwrap();
    assert!(b.new && b.spec_hash != a.spec_hash, "the edit is recorded");
    let status = s.flow.status(&id).await.unwrap().unwrap();
    assert_eq!(status.spec_hash, b.spec_hash);
    assert_eq!(
        status.state,
        rejected("too big"),
        "and the rejection is kept"
    );
    // A maintainer's approval of the new hash lifts it; the approval entry is the record.
    s.flow
        .approve(&id, &b.spec_hash, "maint2", false)
        .await
        .unwrap();
    let status = s.flow.status(&id).await.unwrap().unwrap();
    assert_eq!(status.state, ExperimentState::Queued { position: 1 });
    assert_eq!(
        kinds(&s.entries()),
        ["proposal", "rejection", "proposal", "approval"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_keeps_a_rejection_until_an_approval_lifts_it_sqlite() {
    an_edit_keeps_a_rejection_until_an_approval_lifts_it("sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_keeps_a_rejection_until_an_approval_lifts_it_postgres() {
    an_edit_keeps_a_rejection_until_an_approval_lifts_it("postgres").await;
}

async fn closing_voids_the_approval_as_a_rejection(engine: &str) {
    let cfg = LabConfig::parse("[limits]\nmax_open_per_author = 100\n").unwrap();
    let s = setup(engine, "closing", cfg).await;
    let bob = Login::new("bob");
    let id = |n: u64| ExperimentId(format!("octo/lab#{n}"));

    // Waiting: the job leaves the queue, after a `rejection` entry naming the sender.
    let (r, q) = s.propose_and_approve(12, "erin", spec(4, "", "")).await;
    let v = LabPort::void_approval(&s.flow, &id(12), &bob, "issue closed by @bob")
        .await
        .unwrap()
        .expect("an approval was voided");
    assert_eq!(v.approval.unwrap().spec_hash, r.spec_hash);
    assert_eq!(v.job, Some(Cancelled::Queued));
    assert_eq!(
        s.queue.get(q.job).await.unwrap().state,
        JobState::Ended(RunStatus::Cancelled)
    );
    let entries = s.entries();
    // The decision, then the job's ending: a `rejection`, then its `result` (cancelled, no
    // steps), the job's run named.
    let [.., rejection, last] = entries.as_slice() else {
        panic!("too few entries");
    };
    assert_eq!(last.kind(), EntryKind::Result);
    let ended: ResultBody = last.body_as().unwrap();
    assert_eq!(ended.ending.status, RunStatus::Cancelled);
    assert_eq!(ended.ending.steps, 0);
    assert_eq!(ended.run, s.queue.get(q.job).await.unwrap().run());
    let last = rejection;
    assert_eq!(last.kind(), EntryKind::Rejection);
    let body: RejectionBody = last.body_as().unwrap();
    assert_eq!(
        (body.by.as_str(), body.reason.as_str(), body.spec_hash),
        ("bob", "issue closed by @bob", r.spec_hash)
    );
    let status = s.flow.status(&id(12)).await.unwrap().unwrap();
    assert!(status.approval.is_none());
    assert!(matches!(status.state, ExperimentState::Rejected { .. }));
    // Again (closed, then deleted): nothing left to void, nothing recorded.
    let n = s.entries().len();
    assert!(
        LabPort::void_approval(&s.flow, &id(12), &bob, "issue deleted by @bob")
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(s.entries().len(), n);

    // Running: the run is stopped at its next step and ends `cancelled`, on the record.
    let (_, q) = s
        .propose_and_approve(13, "erin", spec(100_000, "checkpoint_interval = 0", ""))
        .await;
    let worker = s.worker("w");
    let run = tokio::spawn(async move { worker.run_next().await });
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while s.queue.get(q.job).await.unwrap().state != JobState::Running {
        assert!(std::time::Instant::now() < deadline, "job never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let v = LabPort::void_approval(&s.flow, &id(13), &bob, "issue transferred by @bob")
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(v.job, Some(Cancelled::Running(_))), "{v:?}");
    let f = recorded(run.await.unwrap().unwrap());
    assert_eq!(f.ending.status, RunStatus::Cancelled);

    // A spent approval (its run ended) is dropped without an entry.
    let (_, _) = s.propose_and_approve(14, "erin", spec(2, "", "")).await;
    recorded(s.worker("w").run_next().await.unwrap());
    let n = s.entries().len();
    assert!(
        LabPort::void_approval(&s.flow, &id(14), &bob, "issue closed by @bob")
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(s.entries().len(), n);
    assert!(
        s.flow
            .status(&id(14))
            .await
            .unwrap()
            .unwrap()
            .approval
            .is_none()
    );
    assert!(
        s.flow.rerun(&id(14), "bob").await.is_err(),
        "a rerun needs a new approval"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_voids_the_approval_as_a_rejection_sqlite() {
    closing_voids_the_approval_as_a_rejection("sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_voids_the_approval_as_a_rejection_postgres() {
    closing_voids_the_approval_as_a_rejection("postgres").await;
}

async fn a_failing_notice_backs_off_and_the_others_go_out(engine: &str) {
    let clock = Clock::Manual(Arc::new(std::sync::atomic::AtomicI64::new(1_000_000)));
    let s = setup_clocked(engine, "notices", LabConfig::default(), clock.clone()).await;
    let hash = glassbox_schemas::spec_hash(&spec(4, "", "")).unwrap();
    // Notices for #1, #2, #3, then a second one for #1.
    for (entry, n) in [(1, 1u64), (2, 2), (3, 3), (4, 1)] {
        outbox::push(
            &s.queue,
            &outbox::Notice::RunStarted {
                experiment: ExperimentId(format!("octo/lab#{n}")),
                run: glassbox_schemas::RunId(format!("run-{entry}")),
                spec_hash: hash,
                entry,
            },
        )
        .await
        .unwrap();
    }
    let number = |e: &LabEvent| e.issue().number.0;
    // #1 fails (GitHub down), #3 cannot succeed (GitHub refused it); #2 still goes out.
    let tried = std::sync::Mutex::new(Vec::new());
    let sent = s
        .flow
        .deliver_notices(|e| {
            let n = number(&e);
            tried.lock().unwrap().push(n);
            async move {
                match n {
                    1 => NoticeDelivery::Retry("GitHub answered 502".into()),
                    3 => NoticeDelivery::GiveUp("GitHub answered 403".into()),
                    _ => NoticeDelivery::Delivered,
                }
            }
        })
        .await
        .unwrap();
    assert_eq!(sent, 1);
    assert_eq!(
        *tried.lock().unwrap(),
        [1, 2, 3],
        "#1's second notice waits behind its first"
    );
    let pending: Vec<u64> = outbox::pending(&s.queue, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, n)| issue_key(n.experiment()).unwrap().number.0)
        .collect();
    assert_eq!(pending, [1, 1], "#1's wait; #3 was given up");
    // Not due yet: nothing is tried.
    let sent = s.flow.deliver_notices(|_| async { true }).await.unwrap();
    assert_eq!(sent, 0);
    // After its backoff #1's first goes out, then its second, in order.
    clock.advance(outbox::retry_delay(1));
    let runs = std::sync::Mutex::new(Vec::new());
    let record = |e: LabEvent| {
        if let LabEvent::RunStarted { run, .. } = e {
            runs.lock().unwrap().push(run.0);
        }
        async { true }
    };
    assert_eq!(s.flow.deliver_notices(record).await.unwrap(), 2);
    assert_eq!(*runs.lock().unwrap(), ["run-1", "run-4"]);
    assert!(outbox::pending(&s.queue, 10).await.unwrap().is_empty());
    assert!(outbox::retry_delay(2) > outbox::retry_delay(1));
    assert_eq!(outbox::retry_delay(40), outbox::RETRY_MAX);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_notice_backs_off_and_the_others_go_out_sqlite() {
    a_failing_notice_backs_off_and_the_others_go_out("sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_notice_backs_off_and_the_others_go_out_postgres() {
    a_failing_notice_backs_off_and_the_others_go_out("postgres").await;
}

// ---------------------------------------------------------------------------------------------
// Trust: limits, endings, reproductions, the run's own record.

/// Entries of `kind`.
pub(crate) fn of_kind(entries: &[LedgerEntry], kind: EntryKind) -> Vec<&LedgerEntry> {
    entries.iter().filter(|e| e.kind() == kind).collect()
}

/// The run log artifact of `run` (`logs/<run>/attempt-<n>.log`), as text.
pub(crate) fn run_log(s: &Setup, run: &str) -> String {
    let entries = s.entries();
    let e = entries
        .iter()
        .filter(|e| e.kind() == EntryKind::Artifact)
        .find(|e| {
            e.body_as::<glassbox_schemas::record::ArtifactBody>()
                .ok()
                .map(|b| b.name)
                .as_deref()
                .is_some_and(|n| {
                    // The whole log of an attempt, not a chunk written while it ran.
                    n.strip_prefix(&format!("logs/{run}/attempt-"))
                        .and_then(|rest| rest.strip_suffix(".log"))
                        .is_some_and(|a| a.parse::<u32>().is_ok())
                })
        })
        .unwrap_or_else(|| panic!("no log artifact of {run}: {:?}", kinds(&entries)));
    let hash = glassbox_schemas::BlobHash(e.refs["artifact"]);
    String::from_utf8(s.recorder.get_bytes(&hash).unwrap()).unwrap()
}

pub(crate) fn manual_clock() -> Clock {
    Clock::Manual(Arc::new(std::sync::atomic::AtomicI64::new(
        1_700_000_000_000,
    )))
}

/// A spec whose memory estimate is over `limits.max_memory_bytes` is refused when it is
/// approved, with both figures and the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spec_over_the_memory_limit_is_refused_with_the_figure() {
    let cfg = LabConfig::parse("[limits]\nmax_memory_bytes = 100000\n").unwrap();
    let s = setup("sqlite", "memory_refused", cfg).await;
    let sp = spec(4, "", "");
    let need = glassbox_schemas::estimate(&sp).memory_bytes;
    let r = s.flow.propose(proposal(1, "ann", sp, None)).await.unwrap();
    let err = s
        .flow
        .approve(
            &ExperimentId("octo/lab#1".into()),
            &r.spec_hash,
            "maint",
            false,
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains(&format!("({need} bytes)")), "{err}");
    assert!(
        err.contains("(100000 bytes) (limits.max_memory_bytes)"),
        "{err}"
    );
    assert!(s.queue.list(None, 10).await.unwrap().is_empty());
}

/// The bot's validation comment lists what is over the lab's limits when the proposal
/// is recorded (before anyone approves it), with the same figures the approval is refused with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proposal_over_the_limits_says_so_when_recorded() {
    let cfg = LabConfig::parse("[limits]\nmax_memory_bytes = 100000\n").unwrap();
    let s = setup("sqlite", "over_limits_recorded", cfg).await;
    let sp = spec(4, "", "");
    let need = glassbox_schemas::estimate(&sp).memory_bytes;
    let hash = glassbox_schemas::spec_hash(&sp).unwrap();
    let p = Proposal {
        experiment: ExperimentId("octo/lab#43".into()),
        issue: IssueRef {
            repo: "octo/lab".into(),
            number: 43,
            url: "https://github.com/octo/lab/issues/43".into(),
        },
        author: Login::new("erin"),
        title: "Too big".into(),
        spec: sp,
        spec_hash: hash,
        hypothesis: "It does not fit.".into(),
        forecast: None,
        issue_body: "### Spec".into(),
    };
    let recorded = LabPort::record_proposal(&s.flow, p).await.unwrap();
    assert_eq!(recorded.over_limits.len(), 1, "{:?}", recorded.over_limits);
    let line = &recorded.over_limits[0];
    assert!(line.contains(&format!("({need} bytes)")), "{line}");
    assert!(line.contains("limits.max_memory_bytes"), "{line}");
    let err = LabPort::approve(
        &s.flow,
        Approval {
            experiment: ExperimentId("octo/lab#43".into()),
            spec_hash: hash,
            approver: Login::new("maint"),
        },
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains("limits.max_memory_bytes"), "{err}");
    // Within the limits, nothing is listed.
    let fits = setup("sqlite", "within_limits_recorded", LabConfig::default()).await;
    let sp = spec(4, "", "");
    let hash = glassbox_schemas::spec_hash(&sp).unwrap();
    let p = Proposal {
        experiment: ExperimentId("octo/lab#44".into()),
        issue: IssueRef {
            repo: "octo/lab".into(),
            number: 44,
            url: "https://github.com/octo/lab/issues/44".into(),
        },
        author: Login::new("erin"),
        title: "Fits".into(),
        spec: sp,
        spec_hash: hash,
        hypothesis: "It fits.".into(),
        forecast: None,
        issue_body: "### Spec".into(),
    };
    let recorded = LabPort::record_proposal(&fits.flow, p).await.unwrap();
    assert!(
        recorded.over_limits.is_empty(),
        "{:?}",
        recorded.over_limits
    );
}

/// A worker whose memory limit is lower than the spec's estimate ends the run
/// `budget_exceeded` with a result entry, before it allocates anything (no `run_started`).
async fn a_worker_over_its_memory_limit_ends_the_run_budget_exceeded(engine: &str) {
    let s = setup(engine, "memory_worker", LabConfig::default()).await;
    s.propose_and_approve(1, "ann", spec(4, "", "")).await;
    let w = s.worker_with("w", |o| o.limits.max_memory_bytes = Some(100_000.0));
    let f = recorded(w.run_next().await.unwrap());
    assert_eq!(f.ending.status, RunStatus::BudgetExceeded);
    let reason = f.ending.reason.unwrap();
    assert!(reason.contains("limits.max_memory_bytes"), "{reason}");
    let entries = s.entries();
    assert!(of_kind(&entries, EntryKind::RunStarted).is_empty());
    let results = of_kind(&entries, EntryKind::Result);
    assert_eq!(results.len(), 1);
    assert_eq!(
        results[0].body_as::<ResultBody>().unwrap().ending.status,
        RunStatus::BudgetExceeded
    );
    assert!(run_log(&s, "run-000001").contains("not training: it needs about"));
    assert_eq!(
        s.queue.get(f.job).await.unwrap().state,
        JobState::Ended(RunStatus::BudgetExceeded)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_over_its_memory_limit_ends_the_run_budget_exceeded_sqlite() {
    a_worker_over_its_memory_limit_ends_the_run_budget_exceeded("sqlite").await;
}

/// A spec approved under the lab's permissive metric-volume limit, taken by a worker whose
/// own `limits.max_metric_points` is stricter: the worker's limit holds where it runs, so the
/// run ends `budget_exceeded` before it allocates, naming the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_over_its_metric_volume_limit_ends_the_run_budget_exceeded() {
    let s = setup("sqlite", "metric_volume_worker", LabConfig::default()).await;
    s.propose_and_approve(1, "ann", spec(4, "", "")).await;
    let w = s.worker_with("w", |o| o.limits.max_metric_points = 10);
    let f = recorded(w.run_next().await.unwrap());
    assert_eq!(f.ending.status, RunStatus::BudgetExceeded);
    let reason = f.ending.reason.unwrap();
    assert!(reason.contains("limits.max_metric_points"), "{reason}");
    let entries = s.entries();
    assert!(of_kind(&entries, EntryKind::RunStarted).is_empty());
    assert_eq!(of_kind(&entries, EntryKind::Result).len(), 1);
    assert!(run_log(&s, "run-000001").contains("not training: it would record"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_over_its_memory_limit_ends_the_run_budget_exceeded_postgres() {
    a_worker_over_its_memory_limit_ends_the_run_budget_exceeded("postgres").await;
}

/// A live sink that panics on the training thread at step 2 of the first run it sees.
struct PanicOnce {
    fired: std::sync::atomic::AtomicBool,
}

impl glassbox_lab::LiveSink for PanicOnce {
    fn metrics(
        &self,
        _e: &ExperimentId,
        _r: &glassbox_schemas::RunId,
        record: &glassbox_runner::observer::MetricRecord,
    ) {
        if record.step == 2 && !self.fired.swap(true, std::sync::atomic::Ordering::SeqCst) {
            panic!("injected fault in a live sink");
        }
    }
    fn status(
        &self,
        _e: &ExperimentId,
        _r: &glassbox_schemas::RunId,
        _s: glassbox_schemas::RunPhase,
    ) {
    }
}

/// A panic on the training thread ends that run `failed` with a result entry, and the
/// serving worker goes on to the next job.
async fn a_panic_in_training_fails_the_run_and_the_worker_serves_on(engine: &str) {
    let s = setup(engine, "panic", LabConfig::default()).await;
    s.propose_and_approve(1, "ann", spec(4, "", "")).await;
    s.propose_and_approve(2, "ann", spec(4, "", "")).await;
    let w = s.worker("w").with_live(Arc::new(PanicOnce {
        fired: Default::default(),
    }));
    let (_stop, rx) = tokio::sync::watch::channel(false);
    let mut ends = Vec::new();
    w.serve(rx, true, |end| {
        if let JobEnd::Recorded(f) = end {
            ends.push((f.ending.status, f.ending.reason.clone()));
        }
    })
    .await
    .unwrap();
    assert_eq!(ends.len(), 2, "{ends:?}");
    assert_eq!(ends[0].0, RunStatus::Failed);
    let reason = ends[0].1.clone().unwrap();
    assert!(
        reason.contains("training panicked after step 2: injected fault in a live sink"),
        "{reason}"
    );
    assert_eq!(ends[1].0, RunStatus::Succeeded, "{:?}", ends[1].1);
    let entries = s.entries();
    let statuses: Vec<RunStatus> = of_kind(&entries, EntryKind::Result)
        .iter()
        .map(|e| e.body_as::<ResultBody>().unwrap().ending.status)
        .collect();
    assert_eq!(statuses, [RunStatus::Failed, RunStatus::Succeeded]);
    assert!(run_log(&s, "run-000001").contains("training panicked"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_training_fails_the_run_and_the_worker_serves_on_sqlite() {
    a_panic_in_training_fails_the_run_and_the_worker_serves_on("sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_training_fails_the_run_and_the_worker_serves_on_postgres() {
    a_panic_in_training_fails_the_run_and_the_worker_serves_on("postgres").await;
}

/// A spec whose metric volume is over `limits.max_metric_points` is refused when it is
/// approved, with the figure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spec_over_the_metric_volume_limit_is_refused_with_the_figure() {
    let cfg = LabConfig::parse("[limits]\nmax_metric_points = 100\n").unwrap();
    let s = setup("sqlite", "volume", cfg).await;
    let sp = spec(8, "", "");
    let v = glassbox_schemas::cost::metric_volume(&sp);
    // 8 steps x (13 + 1 layer + 1 domain) scalars, one evaluation of one domain, 8 x 1 x 4
    // components.
    assert_eq!((v.scalar_points, v.vector_components), (8 * 15 + 2, 32));
    let r = s.flow.propose(proposal(1, "ann", sp, None)).await.unwrap();
    let err = s
        .flow
        .approve(
            &ExperimentId("octo/lab#1".into()),
            &r.spec_hash,
            "maint",
            false,
        )
        .await
        .unwrap_err()
        .to_string();
    // 122 scalar points, 32 expert-load components and up to 8 x 11 hardware points.
    assert!(err.contains("it would record 242 metric values"), "{err}");
    assert!(err.contains("up to 88 hardware telemetry points"), "{err}");
    assert!(
        err.contains("limit is 100 (limits.max_metric_points)"),
        "{err}"
    );
}

/// The lab's `limits.max_wall_seconds` stops a run whose spec names no budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lab_wall_limit_applies_to_a_spec_without_a_budget() {
    let cfg = LabConfig::parse("[limits]\nmax_wall_seconds = 1\n").unwrap();
    let s = setup("sqlite", "wall", cfg).await;
    let sp = spec(1_000_000, "checkpoint_interval = 0", "");
    assert_eq!(sp.budget.max_wall_seconds, None);
    s.propose_and_approve(1, "ann", sp).await;
    let f = recorded(s.worker("w").run_next().await.unwrap());
    assert_eq!(
        f.ending.status,
        RunStatus::BudgetExceeded,
        "{:?}",
        f.ending.reason
    );
    let reason = f.ending.reason.unwrap();
    assert!(
        reason.contains("wall-clock limit (the lab's limits.max_wall_seconds) of 1 s"),
        "{reason}"
    );
    assert!(f.ending.steps > 0 && f.ending.steps < 1_000_000);
}

/// An edit that leaves the spec hash unchanged writes no entry, and does not
/// count against the author's daily limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_with_the_same_spec_hash_writes_no_entry() {
    let cfg = LabConfig::parse("[limits]\nmax_proposals_per_author_per_day = 1\n").unwrap();
    let s = setup("sqlite", "same_hash", cfg).await;
    let first = s
        .flow
        .propose(proposal(1, "ann", spec(4, "", ""), None))
        .await
        .unwrap();
    let before = s.entries().len();
    for _ in 0..3 {
        let again = s
            .flow
            .propose(proposal(1, "ann", spec(4, "", ""), None))
            .await
            .unwrap();
        assert!(!again.new);
        assert_eq!(again.entry, first.entry);
    }
    assert_eq!(s.entries().len(), before);
}

/// An author may cause `limits.max_proposals_per_author_per_day` proposal entries in
/// 24 hours; the next is refused with the key until the day has passed.
async fn an_author_over_the_daily_proposal_limit_is_refused(engine: &str) {
    let cfg = LabConfig::parse("[limits]\nmax_proposals_per_author_per_day = 2\n").unwrap();
    let clock = manual_clock();
    let s = setup_clocked(engine, "daily", cfg, clock.clone()).await;
    s.flow
        .propose(proposal(1, "spam", spec(4, "", ""), None))
        .await
        .unwrap();
    // An edit with a new hash is a new entry and counts.
    s.flow
        .propose(proposal(1, "spam", spec(5, "", ""), None))
        .await
        .unwrap();
    let err = s
        .flow
        .propose(proposal(2, "spam", spec(6, "", ""), None))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("spam has made 2 proposals in the last 24 hours; the limit is 2 (limits.max_proposals_per_author_per_day)"),
        "{err}"
    );
    assert_eq!(of_kind(&s.entries(), EntryKind::Proposal).len(), 2);
    // Someone else is not affected; a day later the author may propose again.
    s.flow
        .propose(proposal(3, "other", spec(6, "", ""), None))
        .await
        .unwrap();
    clock.advance(Duration::from_secs(24 * 3600));
    s.flow
        .propose(proposal(2, "spam", spec(6, "", ""), None))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_author_over_the_daily_proposal_limit_is_refused_sqlite() {
    an_author_over_the_daily_proposal_limit_is_refused("sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_author_over_the_daily_proposal_limit_is_refused_postgres() {
    an_author_over_the_daily_proposal_limit_is_refused("postgres").await;
}

/// A spec training on a stored corpus (domain `web`) instead of the Markov generator.
fn corpus_spec(corpus: &glassbox_schemas::BlobHash) -> ExperimentSpec {
    let mut sp = spec(2, "", "");
    sp.data.mixture[0].generator = None;
    sp.data.mixture[0].corpus = Some(*corpus);
    sp.data.mixture[0].domain = "web".into();
    sp
}

/// A mixture may name only corpora a `dataset` entry declares (a checkpoint blob is
/// not one); declared ones are approved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixture_may_name_only_declared_datasets() {
    let s = setup("sqlite", "datasets", LabConfig::default()).await;
    let stray = s.recorder.put_bytes(&[7u8; 4096]).unwrap();
    let r = s
        .flow
        .propose(proposal(1, "ann", corpus_spec(&stray), None))
        .await
        .unwrap();
    let err = s
        .flow
        .approve(
            &ExperimentId("octo/lab#1".into()),
            &r.spec_hash,
            "maint",
            false,
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!(
            "data.mixture[0].corpus = {stray}: no `dataset` entry of this lab declares it"
        )),
        "{err}"
    );
    let generator = glassbox_schemas::spec::GeneratorSpec {
        kind: glassbox_schemas::spec::GeneratorKind::Markov,
        seed: 1,
        order: 1,
        alphabet: 8,
        branching: 2,
    };
    let ds = glassbox_lab::dataset::generate(&s.recorder, "web", &generator, 4096).unwrap();
    let (_, q) = s.propose_and_approve(2, "ann", corpus_spec(&ds.hash)).await;
    let f = recorded(s.worker("w").run_next().await.unwrap());
    assert_eq!(
        (f.job, f.ending.status),
        (q.job, RunStatus::Succeeded),
        "{:?}",
        f.ending.reason
    );
}

/// A forecast must name a metric the spec's run reports; a typo is refused when it is
/// proposed (it would otherwise mark the run a missed forecast).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forecast_of_a_metric_the_run_does_not_report_is_refused() {
    let s = setup("sqlite", "forecast_typo", LabConfig::default()).await;
    for metric in ["eval/markvo/loss", "train/router/layer_1/bias_norm"] {
        let f = Forecast {
            metric: metric.into(),
            value: 2.0,
            tolerance: 0.1,
        };
        let err = s
            .flow
            .propose(proposal(1, "ann", spec(4, "", ""), Some(f)))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("forecast.metric = {metric:?}: must be a metric this run reports, e.g. eval/markov/loss")),
            "{err}"
        );
    }
    assert!(s.entries().is_empty(), "nothing was recorded");
    let ok = Forecast {
        metric: "train/router/layer_0/bias_norm".into(),
        value: 0.0,
        tolerance: 1.0,
    };
    s.flow
        .propose(proposal(1, "ann", spec(4, "", ""), Some(ok)))
        .await
        .unwrap();
}

/// `/reproduce` queues a job like any other (one per run at a time, cancellable) that
/// a worker runs and records; the entry says the program was the same binary.
async fn reproduce_is_a_queued_job(engine: &str) {
    let s = setup(engine, "reproduce", LabConfig::default()).await;
    s.propose_and_approve(1, "ann", spec(4, "", "")).await;
    let f = recorded(s.worker("w").run_next().await.unwrap());
    assert_eq!(f.ending.status, RunStatus::Succeeded);
    let id = ExperimentId("octo/lab#1".into());
    let maint = Login::new("maint");
    assert_eq!(LabPort::reproduce(&s.flow, &id, &maint).await.unwrap(), 1);
    let again = LabPort::reproduce(&s.flow, &id, &maint).await.unwrap_err();
    assert!(
        again
            .to_string()
            .contains("a reproduction of run-000001 is already queued"),
        "{again}"
    );
    // Nothing runs inside the flow: the job waits for a worker.
    let jobs = s.queue.list(None, 10).await.unwrap();
    assert_eq!(jobs[0].kind, JobKind::Reproduction);
    assert_eq!(jobs[0].state, JobState::Queued);
    assert_eq!(
        jobs[0].reproduces.as_ref().map(|r| r.0.as_str()),
        Some("run-000001")
    );
    assert!(of_kind(&s.entries(), EntryKind::Reproduction).is_empty());
    // The experiment's state is still its run's.
    let status = LabPort::status(&s.flow, &id).await.unwrap().unwrap();
    assert!(
        matches!(
            status.state,
            glassbox_github_bot::port::ExperimentState::Finished { .. }
        ),
        "{:?}",
        status.state
    );

    let r = recorded(s.worker("w2").run_next().await.unwrap());
    assert_eq!(
        r.ending.status,
        RunStatus::Succeeded,
        "{:?}",
        r.ending.reason
    );
    let entries = s.entries();
    let repro = entries.last().unwrap();
    assert_eq!(repro.kind(), EntryKind::Reproduction);
    let body: glassbox_schemas::record::ReproductionBody = repro.body_as().unwrap();
    assert_eq!(body.outcome, "reproduced", "{:?}", body.detail);
    assert_eq!(
        body.binary,
        Some(glassbox_schemas::record::BinaryComparison::SameBinary)
    );
    assert_eq!(
        s.queue.get(r.job).await.unwrap().state,
        JobState::Ended(RunStatus::Succeeded)
    );
    let log = entries[entries.len() - 2]
        .body_as::<glassbox_schemas::record::ArtifactBody>()
        .ok()
        .map(|b| b.name)
        .as_deref()
        .unwrap()
        .to_string();
    assert_eq!(
        log,
        format!("logs/run-000001/reproduction-job-{}.log", r.job)
    );

    // Another may be queued now, and /cancel stops it.
    LabPort::reproduce(&s.flow, &id, &maint).await.unwrap();
    let cancelled = LabPort::cancel(&s.flow, &id, &maint).await.unwrap();
    assert_eq!(cancelled, glassbox_github_bot::port::Cancelled::Queued);
    let latest = s.queue.list(None, 1).await.unwrap().remove(0);
    assert_eq!(
        (latest.kind, latest.state),
        (JobKind::Reproduction, JobState::Ended(RunStatus::Cancelled))
    );
    assert!(s.worker("w3").run_next().await.unwrap().is_none());
}

/// A reproduction job takes its requester's priority and counts against their open
/// jobs like any other job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reproduction_has_its_requesters_priority_and_limit() {
    let cfg = LabConfig::parse(
        "[limits]\nmax_open_per_author = 1\n[queue]\nauthor_priority = { boss = 7 }\n",
    )
    .unwrap();
    let s = setup("sqlite", "reproduce_priority", cfg).await;
    s.propose_and_approve(1, "ann", spec(4, "", "")).await;
    s.propose_and_approve(2, "bob", spec(4, "", "")).await;
    for _ in 0..2 {
        let f = recorded(s.worker("w").run_next().await.unwrap());
        assert_eq!(f.ending.status, RunStatus::Succeeded);
    }
    s.propose_and_approve(3, "carol", spec(4, "", "")).await;
    let boss = Login::new("boss");
    // Ahead of carol's waiting run: boss's priority is 7, hers the default 0.
    let position = LabPort::reproduce(&s.flow, &ExperimentId("octo/lab#1".into()), &boss)
        .await
        .unwrap();
    assert_eq!(position, 1);
    let err = LabPort::reproduce(&s.flow, &ExperimentId("octo/lab#2".into()), &boss)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("boss already has 1 jobs waiting or running; the limit is 1 (limits.max_open_per_author)"),
        "{err}"
    );
    let next = recorded(s.worker("w").run_next().await.unwrap());
    assert_eq!(
        s.queue.get(next.job).await.unwrap().kind,
        JobKind::Reproduction
    );
    // Once it has ended, boss may ask again.
    LabPort::reproduce(&s.flow, &ExperimentId("octo/lab#2".into()), &boss)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reproduce_is_a_queued_job_sqlite() {
    reproduce_is_a_queued_job("sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reproduce_is_a_queued_job_postgres() {
    reproduce_is_a_queued_job("postgres").await;
}

/// A job whose worker died on its last allowed attempt is ended by the next worker:
/// exactly one `result` entry (with the run's log before it), the job `failed`, the notice.
async fn a_worker_killed_on_its_last_attempt_ends_with_one_result(engine: &str) {
    let cfg = LabConfig::parse("[limits]\nmax_attempts = 1\n").unwrap();
    let clock = manual_clock();
    let s = setup_clocked(engine, "killed_last", cfg, clock.clone()).await;
    let (_, q) = s.propose_and_approve(1, "ann", spec(4, "", "")).await;
    // The worker that took it died after it started (it never heartbeats again).
    let dead = WorkerId("dead".into());
    s.queue
        .lease(&dead, Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    s.queue
        .mark_running(q.job, &dead, &glassbox_schemas::RunId::from("run-000001"))
        .await
        .unwrap();
    assert!(s.worker("w").run_next().await.unwrap().is_none());
    clock.advance(Duration::from_secs(31));
    let f = recorded(s.worker("w").run_next().await.unwrap());
    assert_eq!((f.job, f.ending.status), (q.job, RunStatus::Failed));
    assert_eq!(
        f.ending.reason.as_deref(),
        Some(glassbox_lab::queue::ABANDONED_REASON)
    );
    clock.advance(Duration::from_secs(31));
    assert!(s.worker("w").run_next().await.unwrap().is_none());
    let entries = s.entries();
    let results = of_kind(&entries, EntryKind::Result);
    assert_eq!(results.len(), 1, "{:?}", kinds(&entries));
    let body: ResultBody = results[0].body_as().unwrap();
    assert_eq!(
        (body.run.0.as_str(), body.ending.status),
        ("run-000001", RunStatus::Failed)
    );
    assert!(run_log(&s, "run-000001").contains("worker lost its lease on every allowed attempt"));
    assert_eq!(
        s.queue.get(q.job).await.unwrap().state,
        JobState::Ended(RunStatus::Failed)
    );
    let finished: Vec<_> = outbox::pending(&s.queue, 10)
        .await
        .unwrap()
        .into_iter()
        .filter(|(_, n)| matches!(n, outbox::Notice::Finished { .. }))
        .collect();
    assert_eq!(finished.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_on_its_last_attempt_ends_with_one_result_sqlite() {
    a_worker_killed_on_its_last_attempt_ends_with_one_result("sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_on_its_last_attempt_ends_with_one_result_postgres() {
    a_worker_killed_on_its_last_attempt_ends_with_one_result("postgres").await;
}

/// At the run's last step, hands control to the test (which gives the job to another worker)
/// and waits for it: the training worker then finishes having lost its lease.
struct TakeOverAtStep {
    step: u64,
    reached: std::sync::Mutex<std::sync::mpsc::Sender<()>>,
    resume: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
}

impl glassbox_lab::LiveSink for TakeOverAtStep {
    fn metrics(
        &self,
        _e: &ExperimentId,
        _r: &glassbox_schemas::RunId,
        record: &glassbox_runner::observer::MetricRecord,
    ) {
        if record.step == self.step && record.kind == glassbox_runner::observer::RecordKind::Train {
            let _ = self.reached.lock().unwrap().send(());
            let _ = self.resume.lock().unwrap().recv();
        }
    }
    fn status(
        &self,
        _e: &ExperimentId,
        _r: &glassbox_schemas::RunId,
        _s: glassbox_schemas::RunPhase,
    ) {
    }
}

/// A worker whose lease was taken over while it trained records no result when it
/// finishes; the job still ends with exactly one (here by the worker that ends it when the
/// second holder dies too).
async fn a_worker_that_lost_its_lease_records_no_result(engine: &str) {
    let cfg = LabConfig::parse("[limits]\nmax_attempts = 2\n").unwrap();
    let clock = manual_clock();
    let s = setup_clocked(engine, "lost_lease", cfg, clock.clone()).await;
    s.propose_and_approve(1, "ann", spec(6, "", "")).await;
    let (reached_tx, reached_rx) = std::sync::mpsc::channel();
    let (resume_tx, resume_rx) = std::sync::mpsc::channel();
    let sink = Arc::new(TakeOverAtStep {
        step: 6,
        reached: std::sync::Mutex::new(reached_tx),
        resume: std::sync::Mutex::new(resume_rx),
    });
    // No heartbeat during the test: only the test moves the lease.
    let a = s
        .worker_with("a", |o| o.settings.heartbeat_seconds = 25.0)
        .with_live(sink);
    let running = tokio::spawn(async move { a.run_next().await });
    tokio::task::spawn_blocking(move || reached_rx.recv().unwrap())
        .await
        .unwrap();
    clock.advance(Duration::from_secs(31));
    let b = WorkerId("b".into());
    let taken = s.queue.lease(&b, Duration::from_secs(30)).await.unwrap();
    assert!(taken.is_some(), "b takes the expired lease");
    resume_tx.send(()).unwrap();
    match running.await.unwrap().unwrap() {
        Some(JobEnd::LeaseLost(_)) => {}
        other => panic!("a lost its lease, so it records nothing; got {other:?}"),
    }
    assert!(of_kind(&s.entries(), EntryKind::Result).is_empty());
    // b dies on the last attempt: the next worker ends the job.
    clock.advance(Duration::from_secs(31));
    let f = recorded(s.worker("c").run_next().await.unwrap());
    assert_eq!(f.ending.status, RunStatus::Failed);
    assert_eq!(of_kind(&s.entries(), EntryKind::Result).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_lost_its_lease_records_no_result_sqlite() {
    a_worker_that_lost_its_lease_records_no_result("sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_lost_its_lease_records_no_result_postgres() {
    a_worker_that_lost_its_lease_records_no_result("postgres").await;
}

/// A crash between an approval's job and the flow's own row (or between the
/// approval entry and its job) does not let a redelivered `/approve` make a second approval or
/// a second job.
async fn a_redelivered_approve_after_a_crash_makes_no_second_job(engine: &str) {
    let s = setup(engine, "redelivered", LabConfig::default()).await;
    let id = ExperimentId("octo/lab#1".into());
    let (r, q) = s.propose_and_approve(1, "ann", spec(4, "", "")).await;
    // The crash: the job is queued, the flow's row never learned of the approval.
    sqlx::any::install_default_drivers();
    let db = sqlx::AnyPool::connect(&s.url).await.unwrap();
    sqlx::query(
        "UPDATE proposals SET approved_hash = NULL, approver = NULL, approval_entry = NULL \
         WHERE experiment = $1",
    )
    .bind(id.0.clone())
    .execute(&db)
    .await
    .unwrap();
    let approve = |id: ExperimentId, hash| {
        LabPort::approve(
            &s.flow,
            Approval {
                experiment: id,
                spec_hash: hash,
                approver: Login::new("maint"),
            },
        )
    };
    assert_eq!(approve(id.clone(), r.spec_hash).await.unwrap(), 1);
    assert_eq!(
        s.queue.list(None, 10).await.unwrap().len(),
        1,
        "no second job"
    );
    assert_eq!(of_kind(&s.entries(), EntryKind::Approval).len(), 1);
    let status = LabPort::status(&s.flow, &id).await.unwrap().unwrap();
    assert!(status.approval.is_some(), "the row is repaired");
    assert_eq!(s.queue.get(q.job).await.unwrap().state, JobState::Queued);

    // The other crash: the approval entry is written, its job never queued.
    let id2 = ExperimentId("octo/lab#2".into());
    let r2 = s
        .flow
        .propose(proposal(2, "ann", spec(5, "", ""), None))
        .await
        .unwrap();
    let orphan = s
        .recorder
        .record(
            Some(&id2),
            Default::default(),
            glassbox_schemas::record::ApprovalBody {
                sweep: None,
                spec_hash: r2.spec_hash,
                approver: "maint".into(),
            },
        )
        .unwrap();
    assert_eq!(approve(id2.clone(), r2.spec_hash).await.unwrap(), 2);
    let approvals = of_kind(&s.entries(), EntryKind::Approval).len();
    assert_eq!(approvals, 2, "the orphan approval got its job; no new one");
    let job = s.queue.latest_job_of(&id2).await.unwrap().unwrap();
    assert_eq!(job.approval_entry, Some(orphan));
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivered_approve_after_a_crash_makes_no_second_job_sqlite() {
    a_redelivered_approve_after_a_crash_makes_no_second_job("sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivered_approve_after_a_crash_makes_no_second_job_postgres() {
    a_redelivered_approve_after_a_crash_makes_no_second_job("postgres").await;
}

/// Every run ends with its own log on the record (an `artifact` entry before the
/// `result`): what the worker chose and why, and the error that ended a failed run.
async fn every_run_records_its_log(engine: &str) {
    let s = setup(engine, "run_log", LabConfig::default()).await;
    s.propose_and_approve(1, "ann", spec(4, "", "")).await;
    let ok = recorded(s.worker("w").run_next().await.unwrap());
    assert_eq!(ok.ending.status, RunStatus::Succeeded);
    // A job that fails before training: it names a proposal where its approval should be.
    let b = s
        .flow
        .propose(proposal(2, "ann", spec(5, "", ""), None))
        .await
        .unwrap();
    s.queue
        .enqueue(&NewJob {
            kind: JobKind::Run,
            experiment: ExperimentId("octo/lab#2".into()),
            spec_hash: b.spec_hash,
            author: "ann".into(),
            proposal_entry: Some(b.entry),
            approval_entry: Some(b.entry),
            priority: 0,
            max_attempts: 1,
        })
        .await
        .unwrap();
    let failed = recorded(s.worker("w").run_next().await.unwrap());
    assert_eq!(failed.ending.status, RunStatus::Failed);

    let log = run_log(&s, "run-000001");
    assert!(log.contains(" info backend: cpu ("), "{log}");
    assert!(
        log.contains("run-000001 ended succeeded after 4 steps"),
        "{log}"
    );
    let log = run_log(&s, "run-000002");
    let reason = failed.ending.reason.unwrap();
    assert!(
        log.contains(&format!("failed before training: {reason}")),
        "{log}"
    );
    // The log comes right before the result it belongs to.
    let entries = s.entries();
    for (i, e) in entries.iter().enumerate() {
        if e.kind() == EntryKind::Result {
            let before = &entries[i - 1];
            assert_eq!(before.kind(), EntryKind::Artifact);
            assert!(
                before
                    .body_as::<glassbox_schemas::record::ArtifactBody>()
                    .ok()
                    .map(|b| b.name)
                    .as_deref()
                    .unwrap()
                    .ends_with("/attempt-1.log")
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_run_records_its_log_sqlite() {
    every_run_records_its_log("sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_run_records_its_log_postgres() {
    every_run_records_its_log("postgres").await;
}
