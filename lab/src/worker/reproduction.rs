//! Reproduction jobs on a worker: re-running a recorded run under the lab's limits,
//! cancellable, and recording its `reproduction` entry when the job ends.
//!
//! Not here: how a run is re-run and compared (`crate::reproduce`).

use crate::error::LabError;
use crate::outbox::Notice;
use crate::queue::Job;
use glassbox_schemas::RunStatus;
use glassbox_schemas::record::ReproductionBody;
use glassbox_schemas::record::RunEnding;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::*;

impl Worker {
    /// A reproduction job: re-runs the run it names on this worker's CPU threads, under the
    /// lab's wall-clock limit, cancellable like a run (a cancel arrives with a heartbeat or
    /// through [`CancelSwitches`]), and ends with a `reproduction` entry.
    pub(super) async fn reproduce(&self, job: Job, log: Arc<RunLog>) -> Result<JobEnd, LabError> {
        let Some(target) = job.reproduces.clone() else {
            let why = "the job names no run to reproduce".to_string();
            return self
                .conclude_reproduction(&job, "failed", Some(why), None, &log)
                .await;
        };
        self.queue
            .mark_running(job.id, &self.opts.id, &target)
            .await?;
        let cancel = Arc::new(AtomicBool::new(false));
        self.switches.register(job.id, cancel.clone());
        let lost = Arc::new(AtomicBool::new(false));
        let (hb_stop, hb_task) =
            self.spawn_heartbeat(job.id, cancel.clone(), lost.clone(), log.clone());
        let threads = self.opts.threads.max(1);
        log.info(format!(
            "re-running {target} on {threads} CPU threads to compare it bitwise with its record"
        ));
        let opts = crate::reproduce::ReproduceOptions {
            threads,
            cancel,
            wall_limit: Some(crate::limits::wall_limit(&self.opts.limits)),
            build: self.build(),
        };
        let compared = crate::reproduce::compare(
            self.recorder.clone(),
            target.clone(),
            &opts,
            |revision, backend| {
                log.info(format!(
                    "{target} was made by code revision {revision} on {backend}"
                ))
            },
        )
        .await;
        let _ = hb_stop.send(true);
        let _ = hb_task.await;
        self.switches.remove(job.id);
        if lost.load(Ordering::SeqCst) {
            log.warn("lost the lease mid-run; another worker owns the job");
            return Ok(JobEnd::LeaseLost(job.id));
        }
        match compared {
            Ok(c) => {
                if let Some(b) = c.body.binary {
                    log.info(format!("program: {}", b.describe()));
                }
                self.conclude_reproduction(&job, "", None, Some(c.body), &log)
                    .await
            }
            Err(e) => {
                let why = e.to_string();
                log.error(format!("cannot reproduce {target}: {why}"));
                self.conclude_reproduction(&job, "failed", Some(why), None, &log)
                    .await
            }
        }
    }

    /// The end of a reproduction job: its log and its `reproduction` entry (`body`, or one
    /// saying `outcome` and `detail`), then the queue. `reproduced` ends the job `succeeded`,
    /// `cancelled` `cancelled`, anything else `failed` with the detail as the reason.
    pub(super) async fn conclude_reproduction(
        &self,
        job: &Job,
        outcome: &str,
        detail: Option<String>,
        body: Option<ReproductionBody>,
        log: &RunLog,
    ) -> Result<JobEnd, LabError> {
        // A reproduction job always names its run; were it not to, the entry still records
        // the ending, under the job's own run id.
        let target = job.reproduces.clone().unwrap_or_else(|| job.run());
        let mut body = body.unwrap_or_else(|| ReproductionBody {
            comparison: None,
            worker: None,
            host: None,
            automatic: false,
            run: target.clone(),
            outcome: outcome.to_string(),
            detail,
            backend: "cpu".into(),
            binary: None,
            build: self.build(),
        });
        body.worker = Some(self.opts.id.0.clone());
        body.host = Some(self.opts.host.clone());
        body.automatic = job.automatic;
        let status = match body.outcome.as_str() {
            "reproduced" => RunStatus::Succeeded,
            "cancelled" => RunStatus::Cancelled,
            _ => RunStatus::Failed,
        };
        let reason = body.detail.clone();
        log.info(format!(
            "reproduction of {target} ended {}{}",
            body.outcome,
            reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        ));
        let log_name = format!("logs/{target}/reproduction-job-{}.log", job.id);
        let entries = self.log_and(job, &target, &log_name, log, BTreeMap::new(), body.clone())?;
        let Some((recorded, held)) = self.record_fenced(job, entries, None).await? else {
            return Ok(JobEnd::LeaseLost(job.id));
        };
        let (entry, unpublished) = self
            .end_in_queue(job, held, &recorded, status, reason.as_deref())
            .await?;
        self.announce_notice(
            job,
            &Notice::Reproduced {
                experiment: job.experiment.clone(),
                run: target.clone(),
                outcome: body.outcome.clone(),
                detail: body.detail.clone(),
                comparison: body.comparison,
                worker: self.opts.id.0.clone(),
                automatic: job.automatic,
                entry,
            },
        )
        .await?;
        if body.outcome == "reproduced" || body.outcome == "differs" {
            self.after_end(job, None).await;
        }
        Ok(JobEnd::Recorded(Box::new(Finished {
            job: job.id,
            run: target,
            experiment: job.experiment.clone(),
            ending: RunEnding {
                status,
                steps: 0,
                final_metrics: BTreeMap::new(),
                reason,
            },
            result_entry: entry,
            unpublished,
            outcome: None,
            forecast: None,
        })))
    }
}
