//! Eval jobs on a worker: a run's snapshot scored on a suite version under the lab's limits,
//! heartbeating, cancellable, and ending — however it ends — with one `evaluation` entry,
//! fenced like every job's end (a worker that lost its lease records nothing; a job taken
//! over after its worker died is scored again from the start, and the result is the same).
//! Then the queue; then, for a job someone asked for (`/evaluate`), a notice for the bot.
//! Also here: queueing a snapshot's eval jobs as the run records it.
//!
//! Not here: how a snapshot is scored (`crate::eval`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use glassbox_schemas::RunStatus;
use glassbox_schemas::eval::SuiteName;
use glassbox_schemas::record::RunEnding;
use glassbox_schemas::record::{EvalOutcome, EvaluationBody};

use super::*;
use crate::eval::{self, SuiteRef, suite};
use crate::outbox::Notice;
use crate::queue::{EvalTarget, Job, NewJob};
use crate::trained::{Pick, TrainedModel};

/// What a finished evaluation hands to its recording.
pub(super) struct Scored {
    body: EvaluationBody,
    refs: BTreeMap<String, Blake3Hash>,
}

impl Worker {
    /// An eval job: loads the snapshot and the suite (each checked against its hash), scores
    /// it on this worker's threads and checks contamination, and records the end.
    pub(super) async fn evaluate(&self, job: Job, log: Arc<RunLog>) -> Result<JobEnd, LabError> {
        let Some(target) = job.evaluates.clone() else {
            let why = "the job names nothing to evaluate".to_string();
            return self
                .conclude_eval(&job, None, EvalOutcome::Failed, Some(why), &log)
                .await;
        };
        self.queue
            .mark_running(job.id, &self.opts.id, &target.run)
            .await?;
        let cancel = Arc::new(AtomicBool::new(false));
        self.switches.register(job.id, cancel.clone());
        let lost = Arc::new(AtomicBool::new(false));
        let (hb_stop, hb_task) =
            self.spawn_heartbeat(job.id, cancel.clone(), lost.clone(), log.clone());
        let threads = self.opts.threads.max(1);
        log.info(format!(
            "evaluating {} at step {} ({}) on {} {} with {threads} CPU threads",
            target.run, target.step, target.snapshot, target.suite, target.suite_hash
        ));
        let rec = self.recorder.clone();
        let (t, stop) = (target.clone(), cancel.clone());
        let scored = blocking(move || {
            let model = TrainedModel::load(&rec, &t.run, &Pick::Blob(t.snapshot))?;
            let stored = suite::find(&rec, &SuiteRef::Hash(t.suite_hash))?;
            let loaded = suite::load(&rec, &stored)?;
            let done = eval::evaluate(&rec, &model, &loaded, threads, &|| {
                stop.load(Ordering::SeqCst)
            })?;
            Ok(done.map(|d| {
                let f = model.spec.forecast.clone();
                (d, model.spec.train.steps, model.record.started.spec_hash, f)
            }))
        })
        .await;
        let _ = hb_stop.send(true);
        let _ = hb_task.await;
        self.switches.remove(job.id);
        if lost.load(Ordering::SeqCst) {
            log.warn("lost the lease mid-evaluation; another worker owns the job");
            return Ok(JobEnd::LeaseLost(job.id));
        }
        match scored {
            Ok(Some((done, final_step, spec_hash, in_spec))) => {
                log.info(format!(
                    "{} ({} items scored in {:.2} s; contamination checked in {:.2} s)",
                    eval::headline(&done.body),
                    done.body.items,
                    done.score_seconds,
                    done.contamination_seconds
                ));
                let mut body = done.body;
                let forecast = match in_spec {
                    Some(f) => Some(f),
                    None => crate::forecast::registered(&self.queue, &spec_hash).await?,
                };
                if let Some(f) = forecast {
                    body.forecast = eval::settles(&f, &body, final_step);
                }
                let scored = Scored {
                    body,
                    refs: done.refs,
                };
                self.conclude_eval(&job, Some(scored), EvalOutcome::Evaluated, None, &log)
                    .await
            }
            Ok(None) => {
                let why = "cancelled".to_string();
                self.conclude_eval(&job, None, EvalOutcome::Cancelled, Some(why), &log)
                    .await
            }
            Err(e) => {
                let why = e.to_string();
                log.error(format!("cannot evaluate: {why}"));
                self.conclude_eval(&job, None, EvalOutcome::Failed, Some(why), &log)
                    .await
            }
        }
    }

    /// The end of an eval job: its log and its `evaluation` entry (the scored one, or one
    /// saying how it ended), then the queue and, when someone asked for it, the notice.
    pub(super) async fn conclude_eval(
        &self,
        job: &Job,
        scored: Option<Scored>,
        outcome: EvalOutcome,
        detail: Option<String>,
        log: &RunLog,
    ) -> Result<JobEnd, LabError> {
        let target = job.evaluates.clone();
        let run = target
            .as_ref()
            .map(|t| t.run.clone())
            .unwrap_or_else(|| job.run());
        let (mut body, refs) = match scored {
            Some(s) => (s.body, s.refs),
            None => {
                let Some(t) = target.clone() else {
                    // A row the queue never writes (eval jobs are inserted with their target):
                    // there is no snapshot or suite to name, so the end is the queue's alone.
                    let reason = detail.clone().unwrap_or_default();
                    tracing::error!(job = %job.id, "{reason}");
                    self.queue
                        .finish(job.id, &self.opts.id, RunStatus::Failed, Some(&reason))
                        .await?;
                    return Ok(JobEnd::LeaseLost(job.id));
                };
                let (mut body, refs) = eval::unscored(&t, outcome, detail.clone());
                body.threads = self.opts.threads.max(1) as u32;
                (body, refs)
            }
        };
        body.job = Some(job.id);
        body.worker = Some(self.opts.id.0.clone());
        body.host = Some(self.opts.host.clone());
        body.build = self.build();
        body.automatic = job.automatic;
        let status = match body.outcome {
            EvalOutcome::Evaluated => RunStatus::Succeeded,
            EvalOutcome::Cancelled => RunStatus::Cancelled,
            EvalOutcome::Failed => RunStatus::Failed,
        };
        let reason = body.detail.clone();
        log.info(format!("evaluation of {run} ended {}", body.outcome));
        let log_name = format!("logs/{run}/eval-job-{}.log", job.id);
        let entries = self.log_and(job, &run, &log_name, log, refs, body.clone())?;
        let Some((recorded, held)) = self.record_fenced(job, entries, None).await? else {
            return Ok(JobEnd::LeaseLost(job.id));
        };
        let (entry, unpublished) = self
            .end_in_queue(job, held, &recorded, status, reason.as_deref())
            .await?;
        if target.as_ref().is_some_and(|t| t.announce) {
            self.announce_notice(
                job,
                &Notice::Evaluated {
                    experiment: job.experiment.clone(),
                    run: run.clone(),
                    headline: eval::headline(&body),
                    outcome: body.outcome,
                    contamination: body.contamination.as_ref().map(|c| c.fraction),
                    entry,
                },
            )
            .await?;
        }
        Ok(JobEnd::Recorded(Box::new(Finished {
            job: job.id,
            run,
            experiment: job.experiment.clone(),
            ending: RunEnding {
                status,
                steps: body.step,
                final_metrics: body.metrics.clone(),
                reason,
            },
            result_entry: entry,
            unpublished,
            outcome: None,
            forecast: body.forecast,
        })))
    }
}

/// The eval jobs of a run's snapshots: which suites, and the job each is queued as.
#[derive(Debug, Clone)]
pub struct EvalPlan {
    /// Suite names (the lab's `[evals]`, then the spec's).
    pub suites: Vec<SuiteName>,
    /// The job to queue for each (kind eval; its target is set per snapshot).
    pub job: NewJob,
}

/// Queues an eval job per suite of `plan` for the snapshot `snapshot` of `run` at `step`,
/// each on the suite's newest version. A suite not on the record, or a queue that refuses,
/// is logged and skipped: training goes on.
pub(super) async fn queue_snapshot_evals(
    queue: &Queue,
    recorder: &Recorder,
    plan: &EvalPlan,
    run: &RunId,
    step: u64,
    snapshot: &glassbox_schemas::BlobHash,
    log: &RunLog,
) {
    for name in &plan.suites {
        let stored = match suite::find(recorder, &SuiteRef::Name(name.clone())) {
            Ok(s) => s,
            Err(e) => {
                log.warn(format!("[evals] {name}: {e}; not evaluated"));
                continue;
            }
        };
        let target = EvalTarget {
            run: run.clone(),
            step,
            snapshot: *snapshot,
            suite: name.clone(),
            suite_hash: stored.body.suite,
            kind: stored.body.kind,
            announce: false,
        };
        match queue.enqueue_eval(&plan.job, &target, true).await {
            Ok(id) => log.info(format!(
                "queued eval job {id}: step {step} on {name} ({})",
                stored.body.suite
            )),
            Err(QueueError::AlreadyOpen { .. }) => {}
            Err(e) => log.warn(format!("[evals] {name}: cannot queue its job: {e}")),
        }
    }
}
