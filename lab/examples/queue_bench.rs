//! Queue throughput: enqueue + lease + finish cycles per second with 4 concurrent workers, on
//! SQLite and on PostgreSQL, in one run.
//!
//! ```sh
//! cargo run --release -p glassbox-lab --features bench --example queue_bench -- [JOBS] [POSTGRES_URL]
//! ```
//! Defaults: 4000 jobs, `postgres://postgres@127.0.0.1:5432/test` (a scratch schema is created
//! and dropped). A cycle is enqueue + lease + finish of one job. `Separate`: a worker finishes,
//! then leases (three commits per cycle); `Chained`: `finish_and_lease`, as `glassbox worker`
//! does (two). On SQLite, writes that arrive together also share a commit (group commit). Both
//! engines run at both durabilities (`power_loss`, the default, and `process_crash`).

use std::time::{Duration, Instant};

use glassbox_lab::queue::{Clock, Durability, JobKind, NewJob, Queue, WorkerId, WriteStats};
use glassbox_schemas::{Blake3Hash, ExperimentId, RunStatus, SpecHash};

const WORKERS: usize = 4;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let jobs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(4000);
    let pg = args
        .next()
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".to_string());

    sqlx::any::install_default_drivers();
    let admin = sqlx::AnyPool::connect(&pg)
        .await
        .expect("PostgreSQL reachable");
    // A fresh, empty queue for every figure, so no run inherits another's rows.
    for durability in [Durability::PowerLoss, Durability::ProcessCrash] {
        for step in [Step::Separate, Step::Chained] {
            let dir = tempfile::tempdir().expect("temp dir");
            let sqlite_url = format!("sqlite://{}", dir.path().join("queue.db").display());
            let sqlite = Queue::connect_with(&sqlite_url, Clock::System, durability)
                .await
                .expect("sqlite queue");
            let took = run(&sqlite, jobs, step).await;
            report("sqlite", durability, step, jobs, took, sqlite.write_stats());
            sqlite.close().await;
        }
        for step in [Step::Separate, Step::Chained] {
            let schema = format!("queue_bench_{}", std::process::id());
            sqlx::query(&format!("CREATE SCHEMA {schema}"))
                .execute(&admin)
                .await
                .expect("create schema");
            let sep = if pg.contains('?') { '&' } else { '?' };
            let pg_url = format!("{pg}{sep}options=-c%20search_path%3D{schema}");
            let postgres = Queue::connect_with(&pg_url, Clock::System, durability)
                .await
                .expect("postgres queue");
            let took = run(&postgres, jobs, step).await;
            report(
                "postgres",
                durability,
                step,
                jobs,
                took,
                postgres.write_stats(),
            );
            postgres.close().await;
            sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
                .execute(&admin)
                .await
                .expect("drop schema");
        }
    }
}

/// How a worker goes from one job to the next.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// `finish`, then `lease`: three commits per cycle with the enqueue.
    Separate,
    /// `finish_and_lease`, as `glassbox worker` does: two commits per cycle.
    Chained,
}

/// Each worker enqueues its share, taking and finishing one job after each enqueue, then
/// drains the queue.
async fn run(q: &Queue, jobs: usize, step: Step) -> Duration {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..WORKERS {
        let q = q.clone();
        tasks.push(tokio::spawn(async move {
            let me = WorkerId(format!("bench-{w}"));
            let lease = Duration::from_secs(60);
            let mut done = 0usize;
            let mut held = None;
            let mut n = w;
            loop {
                if n < jobs {
                    q.enqueue(&new_job(n)).await.expect("enqueue");
                    n += WORKERS;
                }
                held = match (held.take(), step) {
                    (None, _) => q.lease(&me, lease).await.expect("lease"),
                    (Some(j), Step::Chained) => {
                        done += 1;
                        q.finish_and_lease(j.id, &me, RunStatus::Succeeded, None, lease)
                            .await
                            .expect("finish and lease")
                    }
                    (Some(j), Step::Separate) => {
                        done += 1;
                        q.finish(j.id, &me, RunStatus::Succeeded, None)
                            .await
                            .expect("finish");
                        q.lease(&me, lease).await.expect("lease")
                    }
                };
                if held.is_none() && n >= jobs {
                    return done;
                }
            }
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("worker task");
    }
    assert_eq!(total, jobs, "every job completed exactly once");
    start.elapsed()
}

fn new_job(n: usize) -> NewJob {
    NewJob {
        kind: JobKind::Run,
        experiment: ExperimentId(format!("bench#{n}")),
        spec_hash: SpecHash(Blake3Hash::of(&n.to_le_bytes())),
        author: "bench".into(),
        proposal_entry: None,
        approval_entry: None,
        priority: 0,
        max_attempts: 3,
    }
}

fn report(
    engine: &str,
    durability: Durability,
    step: Step,
    jobs: usize,
    took: Duration,
    stats: WriteStats,
) {
    println!(
        "{engine:<9} {:<13} {:<9} {jobs} cycles, {WORKERS} workers: {:.2} s, {:.0} cycles/s \
         ({} writes in {} commits)",
        format!("{durability:?}"),
        format!("{step:?}"),
        took.as_secs_f64(),
        jobs as f64 / took.as_secs_f64(),
        stats.writes,
        stats.commits,
    );
}
