//! Queue throughput: enqueue + lease + finish cycles per second with 4 concurrent workers, on
//! SQLite and on PostgreSQL, in one run.
//!
//! ```sh
//! cargo run --release -p glassbox-lab --example queue_bench -- [JOBS] [POSTGRES_URL]
//! ```
//! Defaults: 4000 jobs, `postgres://postgres@127.0.0.1:5432/test` (a scratch schema is created
//! and dropped). Each cycle is three committed transactions: enqueue, lease, finish. Both
//! engines run at both durabilities (`power_loss`, the default, and `process_crash`).

use std::time::{Duration, Instant};

use glassbox_lab::queue::{Clock, Durability, JobKind, NewJob, Queue, WorkerId};
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
    for durability in [Durability::PowerLoss, Durability::ProcessCrash] {
        let dir = tempfile::tempdir().expect("temp dir");
        let sqlite_url = format!("sqlite://{}", dir.path().join("queue.db").display());
        let sqlite = Queue::connect_with(&sqlite_url, Clock::System, durability)
            .await
            .expect("sqlite queue");
        report("sqlite", durability, jobs, run(&sqlite, jobs).await);
        sqlite.close().await;

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
        report("postgres", durability, jobs, run(&postgres, jobs).await);
        postgres.close().await;
        sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
            .execute(&admin)
            .await
            .expect("drop schema");
    }
}

/// Each worker enqueues its share, then leases and finishes until the queue is empty.
async fn run(q: &Queue, jobs: usize) -> Duration {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..WORKERS {
        let q = q.clone();
        tasks.push(tokio::spawn(async move {
            let me = WorkerId(format!("bench-{w}"));
            let mut done = 0usize;
            for n in (w..jobs).step_by(WORKERS) {
                let job = NewJob {
                    kind: JobKind::Run,
                    experiment: ExperimentId(format!("bench#{n}")),
                    spec_hash: SpecHash(Blake3Hash::of(&n.to_le_bytes())),
                    author: "bench".into(),
                    proposal_entry: None,
                    approval_entry: None,
                    priority: 0,
                    max_attempts: 3,
                };
                q.enqueue(&job).await.expect("enqueue");
                if let Some(j) = q.lease(&me, Duration::from_secs(60)).await.expect("lease") {
                    q.finish(j.id, &me, RunStatus::Succeeded, None)
                        .await
                        .expect("finish");
                    done += 1;
                }
            }
            while let Some(j) = q.lease(&me, Duration::from_secs(60)).await.expect("lease") {
                q.finish(j.id, &me, RunStatus::Succeeded, None)
                    .await
                    .expect("finish");
                done += 1;
            }
            done
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("worker task");
    }
    assert_eq!(total, jobs, "every job completed exactly once");
    start.elapsed()
}

fn report(engine: &str, durability: Durability, jobs: usize, took: Duration) {
    println!(
        "{engine:<9} {:<13} {jobs} cycles, {WORKERS} workers: {:.2} s, {:.0} cycles/s",
        format!("{durability:?}"),
        took.as_secs_f64(),
        jobs as f64 / took.as_secs_f64()
    );
}
