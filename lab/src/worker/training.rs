//! Training a leased job: choosing the backend, recording `run_started`, running the runner
//! on a thread of its own with the lease's heartbeat and the stall watch beside it.
//!
//! Not here: the checks before (`admission`) or the ending's record (`ending`).

use crate::error::LabError;
use crate::outbox::{self, AlertNotice, Notice};
use crate::queue::{Job, JobId, QueueError};
use crate::recorder::one_ref;
use crate::stall::StallWatch;
use glassbox_runner::backend::{self, Backend, Selected};
use glassbox_runner::data::DataPipeline;
use glassbox_runner::observer::RunInfo;
use glassbox_runner::text::TextCodec;
use glassbox_runner::train::{Peak, RunOptions, Trainer};
use glassbox_schemas::record::RunEnding;
use glassbox_schemas::record::RunStartedBody;
use glassbox_schemas::{Blake3Hash, ExperimentSpec, RunId, RunStatus};
use glassbox_schemas::{RefRole, RunPhase};
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::runtime::Handle;

use super::*;

impl Worker {
    pub(super) fn peak(&self, threads: usize) -> Peak {
        let mut p = self.peak.lock().unwrap_or_else(|e| e.into_inner());
        p.get_or_insert_with(|| {
            glassbox_runner::backend::cpu::peak::measure_gemm_peak(threads, 0.3)
        })
        .clone()
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) async fn train(
        &self,
        job: &Job,
        run: &RunId,
        spec: ExperimentSpec,
        resume: Option<PathBuf>,
        scratch: &Path,
        cancel: Arc<AtomicBool>,
        log: &Arc<RunLog>,
    ) -> Result<JobEnd, LabError> {
        let selection = match backend::select(self.opts.backend) {
            Ok(k) => k,
            Err(e) => return self.conclude_early(job, run, e.to_string(), log).await,
        };
        log.info(format!("backend: {} ({})", selection.kind, selection.why));
        let threads = self.opts.threads.max(1);
        let selected = match selection.start(threads) {
            Ok(be) => be,
            Err(e) => return self.conclude_early(job, run, e.to_string(), log).await,
        };
        match selected {
            Selected::Cpu(be) => {
                if let Some(end) = self.over_limits(job, run, &spec, None, log).await {
                    return end;
                }
                let peak = be.run(|| self.peak(threads));
                self.train_on(
                    &be,
                    peak,
                    &selection.why,
                    job,
                    run,
                    spec,
                    resume,
                    scratch,
                    cancel,
                    log,
                )
                .await
            }
            Selected::Cuda(be) => {
                let device_memory = be.memory().map(|(_, total)| total as u64);
                if let Some(end) = self.over_limits(job, run, &spec, device_memory, log).await {
                    return end;
                }
                let peak = match self.opts.peak.clone() {
                    Some(p) => p,
                    None => match be.measured_peak() {
                        Ok(p) => p,
                        Err(e) => return self.conclude_early(job, run, e.to_string(), log).await,
                    },
                };
                self.train_on(
                    &be,
                    peak,
                    &selection.why,
                    job,
                    run,
                    spec,
                    resume,
                    scratch,
                    cancel,
                    log,
                )
                .await
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) async fn train_on<B: Backend>(
        &self,
        be: &B,
        peak: Peak,
        why: &str,
        job: &Job,
        run: &RunId,
        spec: ExperimentSpec,
        resume: Option<PathBuf>,
        scratch: &Path,
        cancel: Arc<AtomicBool>,
        log: &Arc<RunLog>,
    ) -> Result<JobEnd, LabError> {
        let kind = be.kind();
        let opts = RunOptions {
            out_dir: Some(scratch.to_path_buf()),
            resume,
            peak,
            cancel: cancel.clone(),
            wall_limit: Some(crate::limits::wall_limit(&self.opts.limits)),
        };
        if let Some(r) = &opts.resume {
            log.info(format!("resuming from checkpoint {}", r.display()));
        }
        // With a stored tokenizer, the token shards the spec needs (tokenized now when the lab
        // has none yet, reused otherwise).
        let shards = {
            let (rec, spec, log) = (self.recorder.clone(), spec.clone(), log.clone());
            blocking(move || {
                crate::tokens::shards_for(&rec, &spec, &|docs, bytes| {
                    log.info(format!("tokenizing: {docs} documents, {bytes} bytes"))
                })
            })
            .await
        };
        let shards = match shards {
            Ok(s) => s,
            Err(e) => return self.conclude_early(job, run, e.to_string(), log).await,
        };
        let store =
            crate::corpus::BlobCorpusStore::new(self.recorder.blobs().clone()).with_shards(shards);
        // Setting up allocates the run's big buffers: a panic there (or on the training thread
        // below) ends this run `failed`, never the process.
        #[cfg(feature = "test-backend")]
        let trained_spec = {
            let mut s = spec.clone();
            if self.opts.nondeterministic {
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.subsec_nanos() as u64 | 1);
                s.train.seed ^= nanos;
            }
            s
        };
        #[cfg(not(feature = "test-backend"))]
        let trained_spec = spec.clone();
        let set_up = std::panic::catch_unwind(AssertUnwindSafe(|| {
            let data = DataPipeline::new(&spec, &store)?;
            let run_data = data.run_data(&spec);
            Trainer::new(be, trained_spec, data, &opts).map(|t| (t, run_data))
        }));
        let (mut trainer, run_data) = match set_up {
            Ok(Ok(t)) => t,
            Ok(Err(e)) => return self.conclude_early(job, run, e.to_string(), log).await,
            Err(panic) => {
                let reason = format!("setting up the run panicked: {}", panic_text(&*panic));
                return self.conclude_early(job, run, reason, log).await;
            }
        };
        // `[samples]` become text on the recording thread, with the run's own tokenizer; a
        // stored tokenizer also encodes the spec's prompts, which the runner cannot.
        let codec = match &spec.samples {
            None => None,
            Some(cfg) => match crate::tokens::codec_for(&self.recorder, &spec) {
                Ok(codec) => {
                    if let (TextCodec::Stored(_), false) = (&codec, cfg.prompts.is_empty()) {
                        let mut prompts = Vec::new();
                        for p in &cfg.prompts {
                            match codec.encode(p) {
                                Ok((ids, _)) => prompts.push(ids),
                                Err(e) => {
                                    return self.conclude_early(job, run, e.to_string(), log).await;
                                }
                            }
                        }
                        trainer.set_sample_prompts(prompts);
                    }
                    Some(Arc::new(codec))
                }
                Err(e) => return self.conclude_early(job, run, e.to_string(), log).await,
            },
        };
        log.info(format!(
            "training {} steps of {} on {} ({} parameters)",
            spec.train.steps,
            job.spec_hash,
            trainer.info().backend,
            trainer.info().params
        ));
        let resumed = opts.resume.as_ref().map(|_| trainer.step());
        let started = self
            .record_started(
                job,
                run,
                &spec,
                trainer.info(),
                (kind.as_str(), why),
                resumed,
                run_data,
            )
            .await?;
        outbox::push(
            &self.queue,
            &Notice::RunStarted {
                experiment: job.experiment.clone(),
                run: run.clone(),
                spec_hash: job.spec_hash,
                entry: started,
            },
        )
        .await?;
        if let Some(live) = &self.live {
            live.started(
                &job.experiment,
                run,
                trainer.step(),
                spec.train.steps,
                trainer.info(),
            );
            live.status(&job.experiment, run, RunPhase::Running);
        }

        // Heartbeats run on the async side while training blocks a thread; they also ask the
        // stall watch, which the training thread tells of every step.
        let settings = &self.opts.settings;
        let stall = StallWatch::new(
            self.queue.clock().clone(),
            settings.stall_factor,
            (settings.stall_min_seconds * 1000.0) as i64,
        );
        let lost = Arc::new(AtomicBool::new(false));
        let (hb_stop, hb_task) =
            self.spawn_heartbeat(job.id, cancel.clone(), lost.clone(), log.clone());
        let stall_task =
            self.spawn_stall_check(job, run, stall.clone(), hb_stop.subscribe(), log.clone());
        let ctx = recording::RunContext {
            recorder: self.recorder.clone(),
            queue: self.queue.clone(),
            handle: Handle::current(),
            job: job.id,
            worker: self.opts.id.clone(),
            experiment: job.experiment.clone(),
            run: run.clone(),
            attempt: job.attempts.max(1),
            cancel: cancel.clone(),
            lease: self.opts.settings.lease(),
            log: log.clone(),
            codec,
            evals: {
                let suites = crate::eval::suites_for(&self.opts.evals.suites, &spec);
                (!suites.is_empty()).then(|| super::evaluation::EvalPlan {
                    suites,
                    job: crate::queue::NewJob {
                        kind: JobKind::Eval,
                        experiment: job.experiment.clone(),
                        spec_hash: job.spec_hash,
                        author: job.author.clone(),
                        proposal_entry: job.proposal_entry,
                        approval_entry: None,
                        priority: self.opts.evals.priority,
                        max_attempts: self.opts.limits.max_attempts,
                    },
                })
            },
        };
        let (mut observer, recording) = recording::spawn(
            ctx,
            self.opts.settings.metrics_flush_steps,
            self.live.clone(),
            stall,
        )?;
        let (outcome, recorded) = tokio::task::block_in_place(|| {
            // A panic on the training thread (a bug, a failed allocation that panics) ends the
            // run `failed` with the message; the worker and the process go on.
            let outcome =
                std::panic::catch_unwind(AssertUnwindSafe(|| trainer.run(&opts, &mut observer)));
            // Closing the channel lets the recording thread finish what it was handed.
            drop(observer);
            (outcome, recording.finish())
        });
        let _ = hb_stop.send(true);
        let _ = hb_task.await;
        let _ = stall_task.await;
        if lost.load(Ordering::SeqCst) {
            log.warn("lost the lease mid-run; another worker owns the job");
            return Ok(JobEnd::LeaseLost(job.id));
        }
        let outcome = match outcome {
            Ok(o) => o,
            Err(panic) => {
                let reason = format!(
                    "training panicked after step {}: {}",
                    trainer.step(),
                    panic_text(&*panic)
                );
                log.error(&reason);
                let mut ending = JobOutcome::early(RunStatus::Failed, reason);
                ending.ending.steps = trainer.step();
                if let Some(h) = &recorded.last_snapshot {
                    ending.refs = one_ref(RefRole::Checkpoint, h);
                }
                return self.conclude(job, run, Some(&spec), ending, log).await;
            }
        };
        let (status, reason) = match (&recorded.error, outcome.ending.status) {
            (Some(e), _) => (
                RunStatus::Failed,
                Some(format!("recording the run failed: {e}")),
            ),
            (None, s) => (s, outcome.ending.reason.clone()),
        };
        let refs = recorded
            .last_snapshot
            .as_ref()
            .map(|h| one_ref(RefRole::Checkpoint, h))
            .unwrap_or_default();
        let ending = JobOutcome {
            ending: RunEnding {
                status,
                reason,
                ..outcome.ending.clone()
            },
            refs,
            params: Some(outcome.params_blake3),
            sample: recorded.last_sample.clone(),
        };
        let mut end = self.conclude(job, run, Some(&spec), ending, log).await?;
        if let JobEnd::Recorded(finished) = &mut end {
            finished.outcome = Some(outcome);
        }
        Ok(end)
    }

    pub(super) fn spawn_heartbeat(
        &self,
        job: JobId,
        cancel: Arc<AtomicBool>,
        lost: Arc<AtomicBool>,
        log: Arc<RunLog>,
    ) -> (
        tokio::sync::watch::Sender<bool>,
        tokio::task::JoinHandle<()>,
    ) {
        let (tx, mut rx) = tokio::sync::watch::channel(false);
        let queue = self.queue.clone();
        let me = self.opts.id.clone();
        let every = self.opts.settings.heartbeat();
        let lease = self.opts.settings.lease();
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(every) => {}
                    _ = rx.changed() => return,
                }
                match queue.heartbeat(job, &me, lease).await {
                    Ok(hb) => {
                        if hb.cancel_requested {
                            cancel.store(true, Ordering::SeqCst);
                        }
                    }
                    Err(QueueError::LeaseLost { .. }) => {
                        lost.store(true, Ordering::SeqCst);
                        cancel.store(true, Ordering::SeqCst);
                        return;
                    }
                    // The database may be restarting: keep training and try again; the lease
                    // is long enough to ride out a short outage.
                    Err(e) => log.warn(format!("heartbeat of job {job} failed ({e}); retrying")),
                }
            }
        });
        (tx, task)
    }

    /// Asks the run's stall watch at every heartbeat period until `stop`: a stall raises the
    /// run's `stalled` alert (once per run) and is warned in its log; a step after it clears
    /// the alert (the stalled-runs gauge drops) without raising another.
    pub(super) fn spawn_stall_check(
        &self,
        job: &Job,
        run: &RunId,
        watch: StallWatch,
        mut stop: tokio::sync::watch::Receiver<bool>,
        log: Arc<RunLog>,
    ) -> tokio::task::JoinHandle<()> {
        let queue = self.queue.clone();
        let every = self.opts.settings.heartbeat();
        let (experiment, run) = (job.experiment.clone(), run.clone());
        tokio::spawn(async move {
            let mut stalled = false;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(every) => {}
                    _ = stop.changed() => return,
                }
                match (watch.check(), stalled) {
                    (Some(s), false) => {
                        stalled = true;
                        log.warn(format!(
                            "stalled: no step since step {} for {:.1} s (median step {:.3} s)",
                            s.last_step,
                            s.silent_ms as f64 / 1000.0,
                            s.median_step_ms as f64 / 1000.0
                        ));
                        let alert = AlertNotice::Stalled {
                            last_step: s.last_step,
                            silent_ms: s.silent_ms,
                            median_step_ms: s.median_step_ms,
                        };
                        if let Err(e) = outbox::raise_alert(&queue, &experiment, &run, alert).await
                        {
                            log.warn(format!("cannot raise the stalled alert ({e}); will retry"));
                            stalled = false;
                        }
                    }
                    (None, true) => {
                        log.info("stepping again after the stall");
                        match outbox::clear_alert(&queue, &run, "stalled").await {
                            Ok(()) => stalled = false,
                            Err(e) => log.warn(format!("cannot clear the stalled alert ({e})")),
                        }
                    }
                    _ => {}
                }
            }
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) async fn record_started(
        &self,
        job: &Job,
        run: &RunId,
        spec: &ExperimentSpec,
        info: &RunInfo,
        (backend, why): (&str, &str),
        resumed: Option<u64>,
        data: Option<glassbox_schemas::data::RunData>,
    ) -> Result<u64, LabError> {
        let kernel_hashes = info
            .kernel_sources
            .iter()
            .filter_map(|k| {
                k.blake3
                    .parse::<Blake3Hash>()
                    .ok()
                    .map(|h| (k.name.clone(), h))
            })
            .collect();
        let body = RunStartedBody {
            worker: Some(self.opts.id.0.clone()),
            host: Some(self.opts.host.clone()),
            run: run.clone(),
            spec_hash: job.spec_hash,
            code_revision: self.opts.code_revision.clone(),
            backend: format!("{backend}: {}", info.backend),
            backend_reason: Some(why.to_string()),
            hardware: hardware_description(),
            seed: spec.train.seed,
            kernel_hashes,
            resumed_from_step: resumed,
            build: self.build(),
            data,
            attempt: Some(job.attempts.max(1)),
        };
        let rec = self.recorder.clone();
        let experiment = job.experiment.clone();
        blocking(move || rec.record(Some(&experiment), BTreeMap::new(), body)).await
    }
}
