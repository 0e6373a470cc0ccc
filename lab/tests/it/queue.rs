//! The job queue, the same scenarios on SQLite and on PostgreSQL.
//!
//! PostgreSQL is a real server, `GLASSBOX_TEST_POSTGRES_URL` (`cargo xtask test` provides one on
//! a port of its own). These tests fail (never skip) when it is not set or not reachable. Each test gets its own PostgreSQL schema so tests run in parallel. Time is a
//! manual clock: lease expiry is tested by moving it, not by sleeping.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::time::Duration;

use glassbox_lab::queue::{
    ABANDONED_CANCELLED_REASON, ABANDONED_REASON, CancelOutcome, Clock, Durability, JobKind,
    JobState, NewJob, Queue, QueueError, WorkerId,
};
use glassbox_schemas::{Blake3Hash, ExperimentId, RunStatus, SpecHash};

const LEASE: Duration = Duration::from_secs(30);

use glassbox_test_support::postgres_url;

/// A fresh queue on `engine` with a manual clock, isolated from every other test.
async fn fresh(engine: &str, name: &str) -> (Queue, Clock, Option<tempfile::TempDir>) {
    fresh_with(engine, name, Durability::PowerLoss).await
}

/// [`fresh`] at a given durability.
async fn fresh_with(
    engine: &str,
    name: &str,
    durability: Durability,
) -> (Queue, Clock, Option<tempfile::TempDir>) {
    let clock = Clock::Manual(Arc::new(AtomicI64::new(1_700_000_000_000)));
    match engine {
        "sqlite" => {
            let dir = tempfile::tempdir().unwrap();
            let url = format!("sqlite://{}", dir.path().join("queue.db").display());
            let q = Queue::connect_with(&url, clock.clone(), durability)
                .await
                .unwrap();
            (q, clock, Some(dir))
        }
        _ => {
            let (url, _schema) = fresh_postgres_schema(name).await;
            let q = Queue::connect_with(&url, clock.clone(), durability)
                .await
                .unwrap();
            (q, clock, None)
        }
    }
}

/// An empty PostgreSQL schema for test `name`: the URL that works in it, and the schema's name,
/// which its connections also carry as their `application_name`.
async fn fresh_postgres_schema(name: &str) -> (String, String) {
    let schema = glassbox_test_support::postgres_schema("lab", name).await;
    (schema.url, schema.name)
}

fn job(n: u32, author: &str, priority: i64) -> NewJob {
    NewJob {
        kind: JobKind::Run,
        experiment: ExperimentId(format!("acme/lab#{n}")),
        spec_hash: SpecHash(Blake3Hash::of(&n.to_le_bytes())),
        author: author.to_string(),
        proposal_entry: Some(u64::from(n) * 2),
        approval_entry: Some(u64::from(n) * 2 + 1),
        priority,
        max_attempts: 3,
    }
}

fn worker(name: &str) -> WorkerId {
    WorkerId(name.to_string())
}

macro_rules! on_both_engines {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name("sqlite", stringify!($name)).await })*
        }
        mod postgres {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name("postgres", stringify!($name)).await })*
        }
    };
}

/// Each durability is what the database reports on the pool's connections, and the queue works
/// the same at both.
async fn durability_is_applied_to_every_connection(engine: &str, name: &str) {
    for (i, d) in [Durability::PowerLoss, Durability::ProcessCrash]
        .into_iter()
        .enumerate()
    {
        let (q, _clock, _dir) = fresh_with(engine, &format!("{name}{i}"), d).await;
        // More than one pooled connection: each was configured when it was opened.
        let (a, b, c, e) = tokio::join!(
            q.durability_in_effect(),
            q.durability_in_effect(),
            q.durability_in_effect(),
            q.durability_in_effect()
        );
        for r in [a, b, c, e] {
            assert_eq!(r.unwrap(), d, "{engine}");
        }
        let id = q.enqueue(&job(1, "ada", 0)).await.unwrap();
        let w = worker("w");
        let j = q.lease(&w, LEASE).await.unwrap().unwrap();
        assert_eq!(j.id, id);
        q.finish(id, &w, RunStatus::Succeeded, None).await.unwrap();
        assert_eq!(
            q.get(id).await.unwrap().state,
            JobState::Ended(RunStatus::Succeeded)
        );
    }
}

on_both_engines!(
    durability_is_applied_to_every_connection,
    runs_by_priority_then_age,
    job_round_trips_every_field,
    many_workers_run_each_job_exactly_once,
    expired_lease_moves_to_another_worker,
    attempts_run_out_and_the_job_fails,
    cancel_before_and_during_a_run,
    hold_unhold_position_and_quota,
    concurrent_writes_keep_their_answers,
    finish_and_lease_hands_over_in_one_step,
    close_returns_with_connections_kept,
    an_abandoned_job_is_claimed_to_end_it,
    a_lost_lease_cannot_end_the_job,
    one_reproduction_per_run_at_a_time,
    prometheus_text_counts_jobs_writes_and_leases,
);

/// The gauges `glassbox serve` appends to `/metrics`.
async fn prometheus_text_counts_jobs_writes_and_leases(engine: &str, name: &str) {
    let (q, _clock, _dir) = fresh(engine, name).await;
    q.enqueue(&job(1, "ann", 0)).await.unwrap();
    q.enqueue(&job(2, "bob", 0)).await.unwrap();
    let w = worker("w\"1");
    q.lease(&w, LEASE).await.unwrap().unwrap();
    let text = q.prometheus_text().await.unwrap();
    for want in [
        "# TYPE glassbox_queue_jobs gauge\n",
        "glassbox_queue_jobs{state=\"queued\"} 1\n",
        "glassbox_queue_jobs{state=\"leased\"} 1\n",
        "glassbox_queue_depth 1\n",
        "glassbox_running_jobs 1\n",
        "glassbox_queue_writes_total 3\n",
        // The worker id is a label value, escaped.
        "glassbox_worker_lease_seconds_left{worker=\"w\\\"1\",job=\"1\"} ",
    ] {
        assert!(text.contains(want), "lacks {want:?}:\n{text}");
    }
}

/// The hot writes keep pool connections between uses; closing hands them back (the pool's
/// close waits for every connection), and a write after the close fails rather than waits.
async fn close_returns_with_connections_kept(engine: &str, name: &str) {
    let (q, _clock, _dir) = fresh(engine, name).await;
    let mut set = tokio::task::JoinSet::new();
    for n in 0..8 {
        let q = q.clone();
        set.spawn(async move { q.enqueue(&job(n, "ann", 0)).await.unwrap() });
    }
    assert_eq!(set.join_all().await.len(), 8);
    tokio::time::timeout(Duration::from_secs(10), q.close())
        .await
        .expect("close returns although connections were kept");
    let after = tokio::time::timeout(Duration::from_secs(10), q.enqueue(&job(9, "ann", 0)))
        .await
        .expect("a write after close answers");
    assert!(after.is_err(), "a closed queue accepted a write: {after:?}");
}

/// A queue handle that outlives its runtime (kept connections inside) drops without a panic.
#[test]
fn a_queue_outliving_its_runtime_drops_cleanly() {
    for engine in ["sqlite", "postgres"] {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let (q, dir) = runtime.block_on(async {
            let (q, _clock, dir) = fresh(engine, "outliving_its_runtime").await;
            q.enqueue(&job(1, "ann", 0)).await.unwrap();
            let me = worker("w");
            let leased = q.lease(&me, LEASE).await.unwrap().unwrap();
            q.finish(leased.id, &me, RunStatus::Succeeded, None)
                .await
                .unwrap();
            (q, dir)
        });
        drop(runtime);
        drop(q);
        drop(dir);
    }
}

/// A connection the hot writes kept, then the server dropped (a restart, an idle timeout), is
/// noticed and replaced before the next write: the write succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_connection_the_server_dropped_is_replaced() {
    let name = "kept_connection_dropped";
    let (url, schema) = fresh_postgres_schema(name).await;
    let q = Queue::connect(&url).await.unwrap();
    let first = q.enqueue(&job(1, "ann", 0)).await.unwrap();

    let admin = sqlx::AnyPool::connect(&postgres_url()).await.unwrap();
    let killed: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE application_name = $1) AS t",
    )
    .bind(&schema)
    .fetch_one(&admin)
    .await
    .unwrap();
    admin.close().await;
    assert!(killed >= 1, "the queue's connections were not found");

    // Past the time after which a kept connection is tested before use.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let second = q
        .enqueue(&job(2, "ann", 0))
        .await
        .expect("the write after the server dropped its connections");
    assert!(second.0 > first.0);
    let me = worker("w");
    assert_eq!(q.lease(&me, LEASE).await.unwrap().unwrap().id, first);
}

/// A worker going on to its next job: the end of one and the lease of the next in one commit,
/// the same answers as `finish` then `lease`; a stranger's attempt changes nothing; a job
/// leased ahead can be given back untouched.
async fn finish_and_lease_hands_over_in_one_step(engine: &str, name: &str) {
    let (q, _clock, _dir) = fresh(engine, name).await;
    let first = q.enqueue(&job(1, "ann", 0)).await.unwrap();
    let low = q.enqueue(&job(2, "ann", 0)).await.unwrap();
    let high = q.enqueue(&job(3, "bob", 5)).await.unwrap();
    let me = worker("w1");
    // Priority first: `high` is leased before the older `first`.
    let a = q.lease(&me, LEASE).await.unwrap().unwrap();
    assert_eq!(a.id, high);

    let b = q
        .finish_and_lease(a.id, &me, RunStatus::Succeeded, None, LEASE)
        .await
        .unwrap()
        .expect("the next job");
    assert_eq!(b.id, first, "then the oldest");
    assert_eq!((b.state, b.attempts), (JobState::Leased, 1));
    assert_eq!(b.lease_owner.as_ref(), Some(&me));
    assert_eq!(
        q.get(a.id).await.unwrap().state,
        JobState::Ended(RunStatus::Succeeded)
    );

    // Someone who does not hold `b`: refused, and nothing else moves.
    let err = q
        .finish_and_lease(
            b.id,
            &worker("stranger"),
            RunStatus::Failed,
            Some("x"),
            LEASE,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, QueueError::LeaseLost { job, .. } if job == b.id),
        "{err}"
    );
    let untouched = q.get(low).await.unwrap();
    assert_eq!((untouched.state, untouched.attempts), (JobState::Queued, 0));
    assert_eq!(q.get(b.id).await.unwrap().state, JobState::Leased);

    let c = q
        .finish_and_lease(b.id, &me, RunStatus::Diverged, Some("loss is NaN"), LEASE)
        .await
        .unwrap()
        .expect("the last job");
    assert_eq!(c.id, low);
    let ended = q.get(b.id).await.unwrap();
    assert_eq!(ended.state, JobState::Ended(RunStatus::Diverged));
    assert_eq!(ended.reason.as_deref(), Some("loss is NaN"));

    // A stopping worker gives the job it leased ahead back as it was.
    q.release(c.id, &me).await.unwrap();
    let back = q.get(c.id).await.unwrap();
    assert_eq!(
        (back.state, back.attempts, back.lease_owner),
        (JobState::Queued, 0, None)
    );
    assert!(matches!(
        q.release(c.id, &me).await,
        Err(QueueError::LeaseLost { .. })
    ));

    let again = q.lease(&me, LEASE).await.unwrap().unwrap();
    assert_eq!(again.id, low);
    let none = q
        .finish_and_lease(again.id, &me, RunStatus::Succeeded, None, LEASE)
        .await
        .unwrap();
    assert_eq!(none, None, "an empty queue leases nothing");
    let mut counts = q.counts().await.unwrap();
    counts.sort_by_key(|(s, _)| s.as_str());
    assert_eq!(
        counts,
        vec![
            (JobState::Ended(RunStatus::Diverged), 1),
            (JobState::Ended(RunStatus::Succeeded), 2)
        ]
    );
}

/// Enqueues, leases and finishes that arrive together share commits on SQLite (group commit;
/// PostgreSQL's server groups WAL flushes itself, so there each write is its own commit), and
/// each caller still gets its own answer: distinct ids, distinct jobs, and a finish by a worker
/// that does not hold the lease fails alone while its neighbours in the same commit succeed.
async fn concurrent_writes_keep_their_answers(engine: &str, name: &str) {
    const N: usize = 16;
    let (q, _clock, _dir) = fresh(engine, name).await;
    let together = Arc::new(tokio::sync::Barrier::new(N));

    let mut set = tokio::task::JoinSet::new();
    for n in 0..N {
        let (q, together) = (q.clone(), together.clone());
        set.spawn(async move {
            together.wait().await;
            q.enqueue(&job(n as u32, "ann", 0)).await.unwrap()
        });
    }
    let ids: BTreeSet<_> = set.join_all().await.into_iter().collect();
    assert_eq!(ids.len(), N, "every enqueue got its own id");
    let stats = q.write_stats();
    assert_eq!(stats.writes, N as u64);
    shares_commits(engine, stats);

    let mut set = tokio::task::JoinSet::new();
    for w in 0..N {
        let (q, together) = (q.clone(), together.clone());
        set.spawn(async move {
            together.wait().await;
            let me = worker(&format!("w{w}"));
            let job = q.lease(&me, LEASE).await.unwrap().expect("a job for each");
            assert_eq!(job.lease_owner.as_ref(), Some(&me));
            (w, job.id)
        });
    }
    let leased: BTreeMap<usize, _> = set.join_all().await.into_iter().collect();
    let jobs: BTreeSet<_> = leased.values().copied().collect();
    assert_eq!(jobs, ids, "each job leased by exactly one worker");

    let mut set = tokio::task::JoinSet::new();
    for (&w, &id) in &leased {
        let (q, together) = (q.clone(), together.clone());
        set.spawn(async move {
            together.wait().await;
            // Odd workers' jobs are finished by someone who does not hold them.
            let who = if w % 2 == 0 {
                worker(&format!("w{w}"))
            } else {
                worker("stranger")
            };
            (w, id, q.finish(id, &who, RunStatus::Succeeded, None).await)
        });
    }
    for (w, id, result) in set.join_all().await {
        if w % 2 == 0 {
            result.unwrap_or_else(|e| panic!("owner's finish of {id} failed: {e}"));
        } else {
            assert!(
                matches!(&result, Err(QueueError::LeaseLost { job, worker }) if *job == id && worker.0 == "stranger"),
                "a stranger's finish of {id} must fail alone: {result:?}"
            );
        }
    }
    let mut counts = q.counts().await.unwrap();
    counts.sort_by_key(|(s, _)| s.as_str());
    assert_eq!(
        counts,
        vec![
            (JobState::Leased, N as u64 / 2),
            (JobState::Ended(RunStatus::Succeeded), N as u64 / 2)
        ]
    );
    let stats = q.write_stats();
    assert_eq!(stats.writes, 3 * N as u64);
    shares_commits(engine, stats);
}

fn shares_commits(engine: &str, stats: glassbox_lab::queue::WriteStats) {
    if engine == "sqlite" {
        assert!(
            stats.commits < stats.writes,
            "simultaneous writes shared no commit: {stats:?}"
        );
    } else {
        assert_eq!(stats.commits, stats.writes, "{stats:?}");
    }
}

async fn runs_by_priority_then_age(engine: &str, name: &str) {
    let (q, _clock, _dir) = fresh(engine, name).await;
    let low = q.enqueue(&job(1, "ann", 0)).await.unwrap();
    let high = q.enqueue(&job(2, "bob", 5)).await.unwrap();
    let low2 = q.enqueue(&job(3, "cid", 0)).await.unwrap();
    let w = worker("w1");
    let order: Vec<_> = [
        q.lease(&w, LEASE).await.unwrap().unwrap().id,
        q.lease(&w, LEASE).await.unwrap().unwrap().id,
        q.lease(&w, LEASE).await.unwrap().unwrap().id,
    ]
    .into();
    assert_eq!(order, vec![high, low, low2]);
    assert!(q.lease(&w, LEASE).await.unwrap().is_none());
}

async fn job_round_trips_every_field(engine: &str, name: &str) {
    let (q, clock, _dir) = fresh(engine, name).await;
    let new = job(7, "ann", 2);
    let id = q.enqueue(&new).await.unwrap();
    let leased = q.lease(&worker("w1"), LEASE).await.unwrap().unwrap();
    assert_eq!(leased.id, id);
    assert_eq!(leased.experiment, new.experiment);
    assert_eq!(leased.spec_hash, new.spec_hash);
    assert_eq!(leased.author, "ann");
    assert_eq!(
        (leased.proposal_entry, leased.approval_entry),
        (Some(14), Some(15))
    );
    assert_eq!(leased.state, JobState::Leased);
    assert_eq!(leased.attempts, 1);
    assert_eq!(leased.lease_owner, Some(worker("w1")));
    assert_eq!(
        leased.lease_expires_at,
        Some(clock.now_ms() + LEASE.as_millis() as i64)
    );
    q.mark_running(
        id,
        &worker("w1"),
        &glassbox_schemas::RunId::from("run-000001"),
    )
    .await
    .unwrap();
    q.record_snapshot(
        id,
        &worker("w1"),
        40,
        &"blake3:abababababababababababababababababababababababababababababababab"
            .parse()
            .unwrap(),
    )
    .await
    .unwrap();
    q.finish(
        id,
        &worker("w1"),
        RunStatus::Diverged,
        Some("loss became NaN at step 41"),
    )
    .await
    .unwrap();
    let done = q.get(id).await.unwrap();
    assert_eq!(done.state, JobState::Ended(RunStatus::Diverged));
    assert_eq!(done.snapshot_step, Some(40));
    assert_eq!(
        done.run_id.as_ref().map(|r| r.0.as_str()),
        Some("run-000001")
    );
    assert_eq!(done.reason.as_deref(), Some("loss became NaN at step 41"));
    assert_eq!(done.lease_owner, None);
}

/// 50 jobs, 4 workers leasing concurrently: each job is leased once and finished once.
async fn many_workers_run_each_job_exactly_once(engine: &str, name: &str) {
    let (q, _clock, _dir) = fresh(engine, name).await;
    for n in 0..50 {
        q.enqueue(&job(n, "ann", 0)).await.unwrap();
    }
    let mut tasks = Vec::new();
    for w in 0..4 {
        let q = q.clone();
        tasks.push(tokio::spawn(async move {
            let me = worker(&format!("w{w}"));
            let mut mine = Vec::new();
            while let Some(j) = q.lease(&me, LEASE).await.unwrap() {
                q.mark_running(j.id, &me, &glassbox_schemas::RunId(format!("run-{}", j.id)))
                    .await
                    .unwrap();
                q.finish(j.id, &me, RunStatus::Succeeded, None)
                    .await
                    .unwrap();
                mine.push(j.id);
            }
            mine
        }));
    }
    let mut seen = BTreeMap::new();
    for t in tasks {
        for id in t.await.unwrap() {
            *seen.entry(id).or_insert(0) += 1;
        }
    }
    assert_eq!(seen.len(), 50, "every job ran");
    assert!(seen.values().all(|&n| n == 1), "no job ran twice: {seen:?}");
    let counts = q.counts().await.unwrap();
    assert_eq!(counts, vec![(JobState::Ended(RunStatus::Succeeded), 50)]);
}

async fn expired_lease_moves_to_another_worker(engine: &str, name: &str) {
    let (q, clock, _dir) = fresh(engine, name).await;
    let id = q.enqueue(&job(1, "ann", 0)).await.unwrap();
    let (a, b) = (worker("a"), worker("b"));
    q.lease(&a, LEASE).await.unwrap().unwrap();
    q.mark_running(id, &a, &glassbox_schemas::RunId::from("run-1"))
        .await
        .unwrap();
    q.record_snapshot(
        id,
        &a,
        20,
        &"blake3:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
            .parse()
            .unwrap(),
    )
    .await
    .unwrap();
    // While a's lease holds, nobody else gets the job.
    assert!(q.lease(&b, LEASE).await.unwrap().is_none());
    clock.advance(LEASE + Duration::from_millis(1));
    let taken = q
        .lease(&b, LEASE)
        .await
        .unwrap()
        .expect("expired lease is re-leased");
    assert_eq!(taken.id, id);
    assert_eq!(taken.attempts, 2);
    assert_eq!(
        taken.snapshot_step,
        Some(20),
        "b resumes from a's checkpoint"
    );
    // a comes back: every write it tries is refused, so no second result exists.
    assert!(matches!(
        q.heartbeat(id, &a, LEASE).await,
        Err(QueueError::LeaseLost { .. })
    ));
    assert!(matches!(
        q.finish(id, &a, RunStatus::Succeeded, None).await,
        Err(QueueError::LeaseLost { .. })
    ));
    q.finish(id, &b, RunStatus::Succeeded, None).await.unwrap();
    assert_eq!(
        q.get(id).await.unwrap().state,
        JobState::Ended(RunStatus::Succeeded)
    );
}

async fn attempts_run_out_and_the_job_fails(engine: &str, name: &str) {
    let (q, clock, _dir) = fresh(engine, name).await;
    let id = q.enqueue(&job(1, "ann", 0)).await.unwrap();
    for attempt in 1..=3 {
        let j = q.lease(&worker("w"), LEASE).await.unwrap().unwrap();
        assert_eq!(j.attempts, attempt);
        clock.advance(LEASE * 2);
    }
    assert!(q.lease(&worker("w"), LEASE).await.unwrap().is_none());
    // The job is not trained again; a worker claims it to record its end (the lab appends the
    // `result` entry first), then ends it.
    let reaper = worker("reaper");
    let claimed = q.claim_abandoned(&reaper, LEASE).await.unwrap().unwrap();
    assert_eq!((claimed.id, claimed.attempts), (id, 3));
    q.begin_ending(id, &reaper)
        .await
        .unwrap()
        .finish(RunStatus::Failed, Some(ABANDONED_REASON))
        .await
        .unwrap();
    let j = q.get(id).await.unwrap();
    assert_eq!(j.state, JobState::Ended(RunStatus::Failed));
    assert_eq!(
        j.reason.as_deref(),
        Some("worker lost its lease on every allowed attempt")
    );
}

/// A job whose lease ran out on its last attempt is claimed by one worker at a time, to record
/// its end; if that worker dies too, the next claims it once its lease runs out.
async fn an_abandoned_job_is_claimed_to_end_it(engine: &str, name: &str) {
    let (q, clock, _dir) = fresh(engine, name).await;
    let mut one = job(1, "ann", 0);
    one.max_attempts = 1;
    let id = q.enqueue(&one).await.unwrap();
    let dead = worker("dead");
    q.lease(&dead, LEASE).await.unwrap().unwrap();
    q.mark_running(id, &dead, &glassbox_schemas::RunId::from("run-000001"))
        .await
        .unwrap();
    // Not before its lease runs out.
    assert!(
        q.claim_abandoned(&worker("a"), LEASE)
            .await
            .unwrap()
            .is_none()
    );
    clock.advance(LEASE + Duration::from_millis(1));
    let a = q
        .claim_abandoned(&worker("a"), LEASE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (a.id, a.run_id.as_ref().map(|r| r.0.as_str())),
        (id, Some("run-000001"))
    );
    assert!(
        q.claim_abandoned(&worker("b"), LEASE)
            .await
            .unwrap()
            .is_none(),
        "one claimer at a time"
    );
    // a dies before ending it; b takes over once a's lease runs out.
    clock.advance(LEASE + Duration::from_millis(1));
    let b = q
        .claim_abandoned(&worker("b"), LEASE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(b.id, id);
    assert!(matches!(
        q.begin_ending(id, &worker("a")).await,
        Err(QueueError::LeaseLost { .. })
    ));
    q.begin_ending(id, &worker("b"))
        .await
        .unwrap()
        .finish(RunStatus::Failed, Some(ABANDONED_REASON))
        .await
        .unwrap();
    assert_eq!(
        q.get(id).await.unwrap().state,
        JobState::Ended(RunStatus::Failed)
    );
}

/// A worker whose lease was taken over cannot start ending the job, and an ending in progress
/// holds the job: it is not leased to anyone until it commits or is dropped.
async fn a_lost_lease_cannot_end_the_job(engine: &str, name: &str) {
    let (q, clock, _dir) = fresh(engine, name).await;
    let id = q.enqueue(&job(1, "ann", 0)).await.unwrap();
    let (a, b) = (worker("a"), worker("b"));
    q.lease(&a, LEASE).await.unwrap().unwrap();
    clock.advance(LEASE + Duration::from_millis(1));
    q.lease(&b, LEASE).await.unwrap().unwrap();
    assert!(matches!(
        q.begin_ending(id, &a).await,
        Err(QueueError::LeaseLost { .. })
    ));
    // b's ending, dropped, changes nothing; committed, it ends the job.
    drop(q.begin_ending(id, &b).await.unwrap());
    assert_eq!(q.get(id).await.unwrap().state, JobState::Leased);
    q.begin_ending(id, &b)
        .await
        .unwrap()
        .finish(RunStatus::Succeeded, None)
        .await
        .unwrap();
    assert_eq!(
        q.get(id).await.unwrap().state,
        JobState::Ended(RunStatus::Succeeded)
    );
}

/// At most one reproduction of a run waits or runs; once it is over another may be queued.
async fn one_reproduction_per_run_at_a_time(engine: &str, name: &str) {
    let (q, _clock, _dir) = fresh(engine, name).await;
    let mut r = job(1, "maint", 0);
    r.kind = JobKind::Reproduction;
    r.approval_entry = None;
    let first = q
        .enqueue_reproduction(
            &r,
            &glassbox_schemas::RunId::from("run-000001"),
            &Default::default(),
        )
        .await
        .unwrap();
    let j = q.get(first).await.unwrap();
    assert_eq!(
        (j.kind, j.reproduces.as_ref().map(|r| r.0.as_str())),
        (JobKind::Reproduction, Some("run-000001"))
    );
    match q
        .enqueue_reproduction(
            &r,
            &glassbox_schemas::RunId::from("run-000001"),
            &Default::default(),
        )
        .await
    {
        Err(QueueError::AlreadyOpen { job, state }) => {
            assert_eq!((job, state), (first, JobState::Queued))
        }
        other => panic!("expected AlreadyOpen, got {other:?}"),
    }
    // Another run's reproduction is fine, and reproductions are not the experiment's state.
    q.enqueue_reproduction(
        &r,
        &glassbox_schemas::RunId::from("run-000002"),
        &Default::default(),
    )
    .await
    .unwrap();
    assert!(
        q.latest_job_of(&r.experiment).await.unwrap().is_none(),
        "latest_job_of is the experiment's run job"
    );
    q.cancel(first, "by @maint").await.unwrap();
    let again = q
        .enqueue_reproduction(
            &r,
            &glassbox_schemas::RunId::from("run-000001"),
            &Default::default(),
        )
        .await
        .unwrap();
    assert_ne!(again, first);
}

async fn cancel_before_and_during_a_run(engine: &str, name: &str) {
    let (q, clock, _dir) = fresh(engine, name).await;
    let queued = q.enqueue(&job(1, "ann", 0)).await.unwrap();
    assert_eq!(
        q.cancel(queued, "by @maint").await.unwrap(),
        CancelOutcome::Cancelled
    );
    assert!(
        q.lease(&worker("w"), LEASE).await.unwrap().is_none(),
        "cancelled jobs never run"
    );

    let running = q.enqueue(&job(2, "ann", 0)).await.unwrap();
    q.lease(&worker("w"), LEASE).await.unwrap().unwrap();
    q.mark_running(
        running,
        &worker("w"),
        &glassbox_schemas::RunId::from("run-2"),
    )
    .await
    .unwrap();
    assert!(
        !q.heartbeat(running, &worker("w"), LEASE)
            .await
            .unwrap()
            .cancel_requested
    );
    assert_eq!(
        q.cancel(running, "by @maint").await.unwrap(),
        CancelOutcome::Requested
    );
    assert!(
        q.heartbeat(running, &worker("w"), LEASE)
            .await
            .unwrap()
            .cancel_requested
    );
    q.finish(
        running,
        &worker("w"),
        RunStatus::Cancelled,
        Some("by @maint"),
    )
    .await
    .unwrap();
    assert_eq!(
        q.cancel(running, "again").await.unwrap(),
        CancelOutcome::AlreadyOver(JobState::Ended(RunStatus::Cancelled))
    );

    // A cancel requested of a worker that then dies ends the job cancelled, not re-run: a
    // worker claims it to record its end.
    let orphan = q.enqueue(&job(3, "ann", 0)).await.unwrap();
    q.lease(&worker("w"), LEASE).await.unwrap().unwrap();
    q.cancel(orphan, "by @maint").await.unwrap();
    clock.advance(LEASE * 2);
    assert!(q.lease(&worker("v"), LEASE).await.unwrap().is_none());
    let claimed = q
        .claim_abandoned(&worker("v"), LEASE)
        .await
        .unwrap()
        .unwrap();
    assert!(claimed.id == orphan && claimed.cancel_requested);
    q.begin_ending(orphan, &worker("v"))
        .await
        .unwrap()
        .finish(RunStatus::Cancelled, Some(ABANDONED_CANCELLED_REASON))
        .await
        .unwrap();
    assert_eq!(
        q.get(orphan).await.unwrap().state,
        JobState::Ended(RunStatus::Cancelled)
    );
}

async fn hold_unhold_position_and_quota(engine: &str, name: &str) {
    let (q, _clock, _dir) = fresh(engine, name).await;
    let a = q.enqueue(&job(1, "ann", 0)).await.unwrap();
    let b = q.enqueue(&job(2, "ann", 0)).await.unwrap();
    let c = q.enqueue(&job(3, "bob", 0)).await.unwrap();
    assert_eq!(q.position(c).await.unwrap(), Some(2));
    q.hold(a).await.unwrap();
    assert_eq!(q.position(c).await.unwrap(), Some(1));
    assert_eq!(q.position(a).await.unwrap(), None);
    let err = q.hold(a).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("job {a} is held; hold needs it to be queued")
    );
    assert_eq!(q.open_jobs_of("ann").await.unwrap(), 2);
    let first = q.lease(&worker("w"), LEASE).await.unwrap().unwrap();
    assert_eq!(first.id, b, "held jobs are skipped");
    q.unhold(a).await.unwrap();
    assert_eq!(q.position(a).await.unwrap(), Some(0));
    assert!(matches!(
        q.get(glassbox_lab::JobId(999)).await,
        Err(QueueError::NotFound(_))
    ));
}

#[tokio::test]
async fn unsupported_url_names_what_is_accepted() {
    let err = Queue::connect("mysql://localhost/x").await.unwrap_err();
    assert!(
        err.to_string()
            .contains("expected sqlite://PATH or postgres://"),
        "{err}"
    );
}
