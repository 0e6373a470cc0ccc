//! The queue's Prometheus gauges and counters as text: jobs by state, queue depth, running
//! jobs, this process's writes and commits, each leasing worker's seconds until its lease
//! expires, the anomalies workers flagged by kind and the runs stalled now (`db::alerts`). `glassbox serve` appends this to the dashboard's `/metrics`.
//!
//! Not here: serving it (the web crate's `/metrics` route), the HTTP request counters.

use std::fmt::Write as _;

use super::{JobState, Queue, QueueError};

/// The queue's error inside a lab error (the table functions speak the lab's).
fn queue_error(e: crate::error::LabError) -> QueueError {
    match e {
        crate::error::LabError::Queue(q) => q,
        other => QueueError::Corrupt {
            job: 0,
            detail: other.to_string(),
        },
    }
}

/// A Prometheus label value, escaped.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Queue {
    /// The queue's metrics in the Prometheus text format (see the module docs).
    pub async fn prometheus_text(&self) -> Result<String, QueueError> {
        let mut out = String::new();
        let counts = self.counts().await?;
        let count = |states: &[JobState]| -> u64 {
            counts
                .iter()
                .filter(|(k, _)| states.contains(k))
                .map(|(_, n)| n)
                .sum()
        };
        out.push_str("# HELP glassbox_queue_jobs Jobs in the queue by state.\n# TYPE glassbox_queue_jobs gauge\n");
        for s in JobState::ALL {
            let _ = writeln!(
                out,
                "glassbox_queue_jobs{{state=\"{}\"}} {}",
                s.as_str(),
                count(&[s])
            );
        }
        let _ = writeln!(
            out,
            "# HELP glassbox_queue_depth Jobs waiting for a worker.\n# TYPE glassbox_queue_depth gauge\nglassbox_queue_depth {}",
            count(&[JobState::Queued])
        );
        let _ = writeln!(
            out,
            "# HELP glassbox_running_jobs Jobs leased or training.\n# TYPE glassbox_running_jobs gauge\nglassbox_running_jobs {}",
            count(&[JobState::Leased, JobState::Running])
        );
        let writes = self.write_stats();
        let _ = writeln!(
            out,
            "# HELP glassbox_queue_writes_total Enqueues, leases and finishes this process committed.\n# TYPE glassbox_queue_writes_total counter\nglassbox_queue_writes_total {}\n# HELP glassbox_queue_commits_total Transactions that committed them (fewer than the writes when concurrent writes shared a commit).\n# TYPE glassbox_queue_commits_total counter\nglassbox_queue_commits_total {}",
            writes.writes, writes.commits
        );
        out.push_str("# HELP glassbox_worker_lease_seconds_left Seconds until a worker's lease expires unless it heartbeats, per worker and job.\n# TYPE glassbox_worker_lease_seconds_left gauge\n");
        let now = self.clock().now_ms();
        for state in [JobState::Leased, JobState::Running] {
            for job in self.list(Some(state), 1000).await? {
                if let (Some(w), Some(exp)) = (&job.lease_owner, job.lease_expires_at) {
                    let _ = writeln!(
                        out,
                        "glassbox_worker_lease_seconds_left{{worker=\"{}\",job=\"{}\"}} {:.3}",
                        label(&w.0),
                        job.id.0,
                        (exp - now) as f64 / 1000.0
                    );
                }
            }
        }
        out.push_str("# HELP glassbox_run_anomalies_total Anomalies the workers' detectors flagged (anomaly entries), by kind.\n# TYPE glassbox_run_anomalies_total counter\n");
        let flagged = crate::db::alerts::anomaly_counts(self.db.pool())
            .await
            .map_err(queue_error)?;
        for kind in glassbox_schemas::record::AnomalyKind::ALL {
            let n = flagged
                .iter()
                .find(|(k, _)| k == kind.as_str())
                .map_or(0, |(_, n)| *n);
            let _ = writeln!(out, "glassbox_run_anomalies_total{{kind=\"{kind}\"}} {n}");
        }
        let stalled = crate::db::alerts::current(self.db.pool(), "stalled")
            .await
            .map_err(queue_error)?;
        let _ = writeln!(
            out,
            "# HELP glassbox_stalled_runs Running jobs whose run has not stepped for worker.stall_factor median step times.\n# TYPE glassbox_stalled_runs gauge\nglassbox_stalled_runs {}",
            stalled.len()
        );
        Ok(out)
    }
}
