//! The public queue (bors's and Prow Tide's queue pages): what runs now, what waits and in which
//! order, what is held, and what finished last, with each job's estimated duration and start.
//!
//! The jobs come from a [`QueueSource`] the binary hands in (the lab's job queue; this crate
//! does not depend on the lab). The estimates are made here, from what the dashboard already
//! knows: a job's spec FLOPs from the cost model (through the catalog) divided by the lab's
//! measured rate — the median FLOP/s of the last finished runs (their final
//! `throughput/tokens_per_second` × the spec's FLOPs per token). With no finished run to measure,
//! or a spec the catalog cannot read, the estimate is absent rather than guessed. Start times
//! assume one job per worker, the workers being those holding a job now (at least one).
//!
//! Not here: the page and the API route (`pages::queue`, `api`), the queue itself.

use std::collections::BTreeMap;

use serde::Serialize;
use utoipa::ToSchema;

use crate::WebState;
use crate::catalog::CatalogData;
use crate::error::WebError;

/// A job as the lab's queue holds it (what a [`QueueSource`] returns).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct QueueJob {
    /// Job id.
    pub id: i64,
    /// `run` or `reproduction`.
    pub kind: String,
    /// The experiment (`owner/repo#12`).
    pub experiment: String,
    /// The spec hash it trains.
    pub spec_hash: String,
    /// Who proposed it (or asked for the reproduction).
    pub author: String,
    /// Higher runs first; equal priorities in the order approved.
    pub priority: i64,
    /// `queued`, `held`, `leased`, `running`, or how it ended.
    pub state: String,
    /// Its run, once it has one.
    pub run: Option<String>,
    /// The worker holding it.
    pub worker: Option<String>,
    /// Why it ended as it did, or why it is held.
    pub reason: Option<String>,
    /// Enqueued at (Unix ms).
    pub created_at_ms: i64,
    /// Last change (Unix ms): for an ended job, when it ended.
    pub updated_at_ms: i64,
}

/// The jobs a [`QueueSource`] reports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueJobs {
    /// Every job not ended (queued, held, leased, running), any order.
    pub open: Vec<QueueJob>,
    /// The last jobs that ended, newest first.
    pub finished: Vec<QueueJob>,
    /// Now, on the queue's clock (Unix ms).
    pub now_ms: i64,
}

/// Where the queue's jobs come from (the lab's queue, which this crate does not know).
pub trait QueueSource: Send + Sync + 'static {
    /// The open jobs and the last `finished` ended ones; an error is answered 500 with it.
    fn jobs(&self, finished: u32) -> QueueFuture<'_>;
}

/// What [`QueueSource::jobs`] returns.
pub type QueueFuture<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<QueueJobs, String>> + Send + 'a>>;

/// Jobs ended that the page lists.
pub const FINISHED_SHOWN: u32 = 10;

/// Runs whose measured rate makes the lab's rate.
const RATE_RUNS: usize = 20;

/// A job on the queue page, with its estimates.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct QueueRow {
    /// The job.
    #[serde(flatten)]
    pub job: QueueJob,
    /// 1 = the next to run (waiting jobs only).
    pub position: Option<u32>,
    /// Its spec's training and evaluation FLOPs (cost model).
    pub flops: Option<f64>,
    /// How long it should take at the lab's measured rate, in seconds.
    pub estimated_seconds: Option<f64>,
    /// In how many seconds from now it should start (waiting jobs), or end (running ones).
    pub estimated_start_in_seconds: Option<f64>,
    /// How long its run took, start to result (finished jobs whose run is on the record).
    pub took_seconds: Option<f64>,
    /// How long it was on the queue, from enqueued to ended (finished jobs).
    pub queued_to_end_seconds: Option<f64>,
}

/// The queue page's and `/api/v1/queue`'s content.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct QueueView {
    /// Training now (or leased and about to).
    pub running: Vec<QueueRow>,
    /// Waiting, in the order they will run.
    pub waiting: Vec<QueueRow>,
    /// Held by a maintainer; not handed out until released.
    pub held: Vec<QueueRow>,
    /// The last jobs that ended, newest first.
    pub finished: Vec<QueueRow>,
    /// The lab's measured rate (median over its last finished runs), FLOP/s; absent until a
    /// run with a throughput has finished.
    pub measured_flops_per_second: Option<f64>,
    /// Runs that rate was measured on.
    pub measured_runs: usize,
    /// Workers assumed for the start estimates (those holding a job now, at least one).
    pub workers: usize,
}

/// The queue now, with estimates; `None` when this dashboard has no queue (it serves a
/// published log only).
pub async fn view(st: &WebState) -> Result<Option<QueueView>, WebError> {
    let Some(source) = st.queue.clone() else {
        return Ok(None);
    };
    let jobs = source.jobs(FINISHED_SHOWN).await.map_err(WebError::Queue)?;
    let cat = st.catalog.read(&st.index, st.blobs.as_ref()).await?;
    Ok(Some(estimate(jobs, &cat)))
}

/// The median FLOP/s of the last finished runs that report a throughput.
fn measured_rate(cat: &CatalogData) -> (Option<f64>, usize) {
    let mut runs: Vec<_> = cat
        .runs
        .values()
        .filter(|r| r.result_entry.is_some())
        .filter_map(|r| {
            let tps = *r
                .final_metrics
                .get(glassbox_schemas::metrics::TOKENS_PER_SECOND)?;
            let fpt = spec_of(cat, r.experiment.as_deref()?, &r.spec_hash)?.flops_per_token;
            let rate = tps * fpt;
            (rate.is_finite() && rate > 0.0).then_some((r.result_entry, rate))
        })
        .collect();
    runs.sort_by_key(|r| std::cmp::Reverse(r.0));
    runs.truncate(RATE_RUNS);
    let mut rates: Vec<f64> = runs.into_iter().map(|r| r.1).collect();
    if rates.is_empty() {
        return (None, 0);
    }
    rates.sort_by(f64::total_cmp);
    let n = rates.len();
    let median = if n % 2 == 1 {
        rates[n / 2]
    } else {
        (rates[n / 2 - 1] + rates[n / 2]) / 2.0
    };
    (Some(median), n)
}

/// The cost facts of `experiment`'s spec when `spec_hash` is its current one.
fn spec_of<'a>(
    cat: &'a CatalogData,
    experiment: &str,
    spec_hash: &str,
) -> Option<&'a crate::catalog::SpecFacts> {
    let e = cat.experiments.get(experiment)?;
    (e.spec_hash.as_deref() == Some(spec_hash))
        .then_some(e.spec.as_ref())
        .flatten()
}

/// Orders the jobs and puts estimates on them.
pub fn estimate(jobs: QueueJobs, cat: &CatalogData) -> QueueView {
    let (rate, measured_runs) = measured_rate(cat);
    let row = |job: QueueJob| {
        let flops = spec_of(cat, &job.experiment, &job.spec_hash).map(|s| s.train_flops);
        let estimated_seconds = flops.zip(rate).map(|(f, r)| f / r);
        QueueRow {
            job,
            position: None,
            flops,
            estimated_seconds,
            estimated_start_in_seconds: None,
            took_seconds: None,
            queued_to_end_seconds: None,
        }
    };
    let unix_ms = |rfc3339: Option<&str>| {
        let t =
            time::OffsetDateTime::parse(rfc3339?, &time::format_description::well_known::Rfc3339)
                .ok()?;
        Some((t.unix_timestamp_nanos() / 1_000_000) as i64)
    };
    let finished_row = |job: QueueJob| {
        let took_seconds = job
            .run
            .as_deref()
            .and_then(|run| cat.runs.get(run))
            .and_then(|r| Some((unix_ms(r.started.as_deref())?, unix_ms(r.ended.as_deref())?)))
            .map(|(a, b)| (b - a).max(0) as f64 / 1000.0);
        let queued_to_end_seconds =
            Some((job.updated_at_ms - job.created_at_ms).max(0) as f64 / 1000.0);
        QueueRow {
            took_seconds,
            queued_to_end_seconds,
            ..row(job)
        }
    };
    let (mut running, mut waiting, mut held) = (Vec::new(), Vec::new(), Vec::new());
    for j in jobs.open {
        match j.state.as_str() {
            "queued" => waiting.push(row(j)),
            "held" => held.push(row(j)),
            _ => running.push(row(j)),
        }
    }
    // The lease order: priority, then first approved.
    waiting.sort_by(|a, b| {
        b.job
            .priority
            .cmp(&a.job.priority)
            .then(a.job.id.cmp(&b.job.id))
    });
    running.sort_by_key(|r| r.job.id);
    held.sort_by_key(|r| r.job.id);
    let workers = running
        .iter()
        .filter_map(|r| r.job.worker.as_deref())
        .collect::<std::collections::BTreeSet<_>>()
        .len()
        .max(1);
    // When each worker is free: a running job's estimate less the time since its run started.
    let started: BTreeMap<&str, i64> = cat
        .runs
        .values()
        .filter_map(|r| Some((r.id.as_str(), unix_ms(r.started.as_deref())?)))
        .collect();
    let mut free: Vec<Option<f64>> = vec![Some(0.0); workers];
    for (i, r) in running.iter_mut().enumerate() {
        let elapsed = r
            .job
            .run
            .as_deref()
            .and_then(|run| started.get(run))
            .map_or(0.0, |t| (jobs.now_ms - t).max(0) as f64 / 1000.0);
        let left = r.estimated_seconds.map(|e| (e - elapsed).max(0.0));
        r.estimated_start_in_seconds = left;
        if i < workers {
            free[i] = left;
        }
    }
    for (i, w) in waiting.iter_mut().enumerate() {
        w.position = Some(i as u32 + 1);
        // The first worker free takes the next job.
        let Some(k) = (0..workers).min_by(|&a, &b| {
            free[a]
                .unwrap_or(f64::INFINITY)
                .total_cmp(&free[b].unwrap_or(f64::INFINITY))
        }) else {
            continue;
        };
        w.estimated_start_in_seconds = free[k];
        free[k] = free[k].zip(w.estimated_seconds).map(|(a, b)| a + b);
    }
    QueueView {
        running,
        waiting,
        held,
        finished: jobs.finished.into_iter().map(finished_row).collect(),
        measured_flops_per_second: rate,
        measured_runs,
        workers,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{ExperimentRow, RunRow, SpecFacts};

    fn experiment(id: &str, hash: &str, train_flops: f64) -> ExperimentRow {
        ExperimentRow {
            id: id.into(),
            title: None,
            author: None,
            spec_hash: Some(hash.into()),
            spec_blob: None,
            issue_url: None,
            spec: Some(SpecFacts {
                name: id.into(),
                hypothesis: String::new(),
                tags: Vec::new(),
                mixture: Vec::new(),
                train_flops,
                flops_per_token: 1e6,
                steps: 100,
                forecast: None,
            }),
            approved_by: None,
            rejected: None,
            runs: Vec::new(),
            forecasts: Vec::new(),
            first_entry: 0,
            last_entry: 0,
            updated: String::new(),
            sweep: None,
        }
    }

    fn run(id: &str, exp: &str, hash: &str, result: Option<u64>, tps: Option<f64>) -> RunRow {
        RunRow {
            id: id.into(),
            experiment: Some(exp.into()),
            spec_hash: hash.into(),
            status: if result.is_some() {
                glassbox_schemas::RunPhase::Ended(glassbox_schemas::RunStatus::Succeeded)
            } else {
                glassbox_schemas::RunPhase::Running
            },
            steps: None,
            started_entry: None,
            result_entry: result,
            started: Some("2026-12-03T10:00:00Z".into()),
            ended: None,
            backend: None,
            hardware: None,
            final_metrics: tps
                .map(|t| (glassbox_schemas::metrics::TOKENS_PER_SECOND.to_string(), t))
                .into_iter()
                .collect(),
            forecast: None,
            reason: None,
            tokenizer: None,
            shards: BTreeMap::new(),
            anomalies: 0,
        }
    }

    fn job(id: i64, exp: &str, hash: &str, priority: i64, state: &str) -> QueueJob {
        QueueJob {
            id,
            kind: "run".into(),
            experiment: exp.into(),
            spec_hash: hash.into(),
            author: "ann".into(),
            priority,
            state: state.into(),
            run: None,
            worker: None,
            reason: None,
            created_at_ms: 0,
            updated_at_ms: 0,
        }
    }

    /// 2026-12-03T10:00:00Z in Unix ms.
    const TEN: i64 = 1_796_292_000_000;

    #[test]
    fn waiting_jobs_are_in_lease_order_with_estimates_from_the_measured_rate() {
        let mut cat = CatalogData::default();
        cat.experiments
            .insert("o/r#1".into(), experiment("o/r#1", "blake3:a", 1e12));
        cat.experiments
            .insert("o/r#2".into(), experiment("o/r#2", "blake3:b", 2e12));
        // Two finished runs at 1e3 and 2e3 tokens/s of 1e6 FLOPs per token: 1.5e9 FLOP/s.
        cat.runs.insert(
            "run-1".into(),
            run("run-1", "o/r#1", "blake3:a", Some(10), Some(1000.0)),
        );
        cat.runs.insert(
            "run-2".into(),
            run("run-2", "o/r#2", "blake3:b", Some(11), Some(2000.0)),
        );
        // Running for 400 s of its 666.7 s.
        cat.runs.insert(
            "run-5".into(),
            run("run-5", "o/r#1", "blake3:a", None, None),
        );
        let mut running = job(5, "o/r#1", "blake3:a", 0, "running");
        running.run = Some("run-5".into());
        running.worker = Some("w1".into());
        let mut held = job(6, "o/r#2", "blake3:b", 9, "held");
        held.reason = None;
        let jobs = QueueJobs {
            open: vec![
                job(7, "o/r#2", "blake3:b", 0, "queued"),
                held,
                running,
                job(8, "o/r#1", "blake3:a", 5, "queued"),
                // A spec edited since: its cost is not known here, and neither is what follows.
                job(9, "o/r#1", "blake3:old", 0, "queued"),
                job(10, "o/r#2", "blake3:b", 0, "queued"),
            ],
            finished: vec![job(4, "o/r#2", "blake3:b", 0, "succeeded")],
            now_ms: TEN + 400_000,
        };
        let v = estimate(jobs, &cat);
        assert_eq!(v.measured_flops_per_second, Some(1.5e9));
        assert_eq!((v.measured_runs, v.workers), (2, 1));
        let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-6);
        assert_eq!(v.running.len(), 1);
        assert!(close(v.running[0].estimated_seconds, 1e12 / 1.5e9));
        assert!(close(
            v.running[0].estimated_start_in_seconds,
            1e12 / 1.5e9 - 400.0
        ));
        let order: Vec<i64> = v.waiting.iter().map(|r| r.job.id).collect();
        assert_eq!(
            order,
            vec![8, 7, 9, 10],
            "priority first, then first approved"
        );
        let positions: Vec<Option<u32>> = v.waiting.iter().map(|r| r.position).collect();
        assert_eq!(positions, vec![Some(1), Some(2), Some(3), Some(4)]);
        let first_free = 1e12 / 1.5e9 - 400.0;
        assert!(close(v.waiting[0].estimated_start_in_seconds, first_free));
        assert!(close(
            v.waiting[1].estimated_start_in_seconds,
            first_free + 1e12 / 1.5e9
        ));
        assert!(close(
            v.waiting[2].estimated_start_in_seconds,
            first_free + 1e12 / 1.5e9 + 2e12 / 1.5e9
        ));
        assert_eq!(v.waiting[2].flops, None);
        assert_eq!(v.waiting[2].estimated_seconds, None);
        assert_eq!(
            v.waiting[3].estimated_start_in_seconds, None,
            "unknown after an unknown"
        );
        assert_eq!(v.held.iter().map(|r| r.job.id).collect::<Vec<_>>(), vec![6]);
        assert_eq!(v.finished.len(), 1);
    }

    #[test]
    fn no_finished_run_means_no_time_estimates() {
        let mut cat = CatalogData::default();
        cat.experiments
            .insert("o/r#1".into(), experiment("o/r#1", "blake3:a", 1e12));
        let v = estimate(
            QueueJobs {
                open: vec![job(1, "o/r#1", "blake3:a", 0, "queued")],
                finished: Vec::new(),
                now_ms: TEN,
            },
            &cat,
        );
        assert_eq!(v.measured_flops_per_second, None);
        assert_eq!(v.waiting[0].flops, Some(1e12));
        assert_eq!(v.waiting[0].estimated_seconds, None);
        assert_eq!(v.waiting[0].estimated_start_in_seconds, Some(0.0));
    }
}
