//! Workers: lease a job, train it with the runner, and put everything on the record.
//!
//! A [`Worker`] runs one job at a time:
//! 1. lease it (heartbeats renew the lease; a cancel request arrives with a heartbeat, or at
//!    once through [`CancelSwitches`] for a worker in the server's process);
//! 2. load the spec from the blob store by its hash and check it against the job's `approval`
//!    entry — a job whose approval names another hash never trains;
//! 3. resume from the job's last checkpoint blob, if a previous attempt left one;
//! 4. record `run_started` (spec hash, code revision, kernel hashes, backend, hardware, seed);
//! 5. train, streaming metrics to a [`LiveSink`] as they arrive, storing metric chunks and
//!    checkpoints as blobs with an `artifact` / `checkpoint` entry each, and telling the queue
//!    where the last checkpoint is; a snapshot's completions (`[samples]`) go to the sink once
//!    their `samples` entry is in the log;
//! 6. record the `result` (every ending: succeeded, diverged, budget_exceeded, cancelled,
//!    failed — including failures before training, a spec over the worker's memory limit, and
//!    a panic on the training thread), with the forecast compared and the run's own log beside
//!    it (an `artifact` entry): both are sequenced in the transaction that ends the job in the
//!    queue, so the job's end and its record commit together; then they are published to the
//!    log, then the notice goes to the outbox. That is one path, [`Worker`]'s `conclude`,
//!    fenced by [`Queue::begin_ending`]: a worker that lost its lease records nothing, and a
//!    run that already has its `result` is not given a second.
//!
//! A worker that dies stops heartbeating; another worker takes the job over when the lease
//! runs out and resumes from the checkpoint. The runner is deterministic on the CPU, so the
//! resumed run ends with the same parameters as an uninterrupted one. A job whose worker dies
//! on its last allowed attempt is claimed by the next worker that looks
//! ([`Queue::claim_abandoned`]) and ended `failed` through the same path.
//!
//! Reproduction jobs (`/reproduce`) are queued like runs and run here too: on this worker's
//! threads, under the lab's limits, cancellable, with a `reproduction` entry at the end. So are
//! eval jobs (`[evals]`, `/evaluate`), queued as each snapshot is recorded, at a priority below
//! training, each ending with an `evaluation` entry.
//!
//! This module does not decide which jobs exist (the flow does) or how training works (the
//! runner does).

use crate::cancel::CancelSwitches;
use crate::error::LabError;
use crate::queue::{
    ABANDONED_CANCELLED_REASON, ABANDONED_REASON, Job, JobId, JobKind, Queue, QueueError, WorkerId,
};
use crate::recorder::{Recorder, one_ref};
use glassbox_runner::observer::{MetricRecord, RunInfo};
use glassbox_runner::train::{Peak, RunOutcome};
use glassbox_schemas::record::RunEnding;
use glassbox_schemas::record::SamplesBody;
use glassbox_schemas::record::{BuildIdentity, ForecastOutcome};
use glassbox_schemas::{Blake3Hash, ExperimentId, RunId, RunStatus};
use glassbox_schemas::{RefRole, RunPhase};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

mod admission;
mod ending;
mod evaluation;
mod options;
mod recording;
mod reproduction;
pub mod run_log;
mod training;

use options::executable_hash;
pub use options::{WorkerOptions, build_identity, hardware_description, host_name};
pub use run_log::{LogChunk, RunLog};

/// Where a run's live telemetry goes as it happens (the dashboard's SSE feed). Called from the
/// training thread: implementations must not block.
pub trait LiveSink: Send + Sync {
    /// `run` (re)started at `step` of `total_steps` on the backend `info` describes.
    fn started(
        &self,
        _experiment: &ExperimentId,
        _run: &RunId,
        _step: u64,
        _total_steps: u64,
        _info: &RunInfo,
    ) {
    }
    /// A train or eval record of `run`.
    fn metrics(&self, experiment: &ExperimentId, run: &RunId, record: &MetricRecord);
    /// `run` changed state (`running`, or its final status).
    fn status(&self, experiment: &ExperimentId, run: &RunId, status: RunPhase);
    /// A line of the run's own log (`<time> <level> <text>`), as the worker writes it.
    fn log(&self, _experiment: &ExperimentId, _run: &RunId, _line: &str) {}
    /// A snapshot's completions, once their `samples` entry is in the log. Called from the
    /// recording thread.
    fn samples(&self, _experiment: &ExperimentId, _run: &RunId, _recorded: RecordedSamples<'_>) {}
}

/// A snapshot's completions as just recorded: the `samples` entry's index and what it holds.
#[derive(Debug, Clone, Copy)]
pub struct RecordedSamples<'a> {
    /// The `samples` entry's index in the log.
    pub entry: u64,
    /// Its body: the prompts, the settings and the texts.
    pub samples: &'a SamplesBody,
}

/// Several sinks as one.
pub struct LiveFanout(pub Vec<Arc<dyn LiveSink>>);

impl std::fmt::Debug for LiveFanout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LiveFanout({} sinks)", self.0.len())
    }
}

impl LiveSink for LiveFanout {
    fn started(&self, e: &ExperimentId, r: &RunId, step: u64, total: u64, info: &RunInfo) {
        for s in &self.0 {
            s.started(e, r, step, total, info);
        }
    }
    fn metrics(&self, e: &ExperimentId, r: &RunId, m: &MetricRecord) {
        for s in &self.0 {
            s.metrics(e, r, m);
        }
    }
    fn status(&self, e: &ExperimentId, r: &RunId, st: RunPhase) {
        for s in &self.0 {
            s.status(e, r, st);
        }
    }
    fn log(&self, e: &ExperimentId, r: &RunId, line: &str) {
        for s in &self.0 {
            s.log(e, r, line);
        }
    }
    fn samples(&self, e: &ExperimentId, r: &RunId, recorded: RecordedSamples<'_>) {
        for s in &self.0 {
            s.samples(e, r, recorded);
        }
    }
}

/// A job's end as the worker recorded it.
#[derive(Debug, Clone)]
pub struct Finished {
    /// The job.
    pub job: JobId,
    /// The run.
    pub run: RunId,
    /// The experiment.
    pub experiment: ExperimentId,
    /// How it ended (as its `result` entry records it).
    pub ending: RunEnding,
    /// The entry that ends the job (its `result`, or a reproduction's `reproduction`).
    pub result_entry: u64,
    /// Why that entry is not in the log yet, when it is not: it is sequenced (committed with the
    /// job's end, so it is on its way) but could not be written to the log, e.g. a full disk.
    /// The next process that integrates publishes it; until then nothing may report it as
    /// recorded. `None` once it is in a published checkpoint.
    pub unpublished: Option<String>,
    /// The runner's outcome, when training started.
    pub outcome: Option<RunOutcome>,
    /// The forecast the result settles, when one was registered: its verdict is on the record.
    pub forecast: Option<ForecastOutcome>,
}

/// What happened to a leased job.
#[derive(Debug)]
pub enum JobEnd {
    /// The worker recorded its result.
    Recorded(Box<Finished>),
    /// The worker lost its lease mid-run (another worker owns the job now); it recorded
    /// nothing more.
    LeaseLost(JobId),
}

/// A runner worker bound to a queue and a ledger.
pub struct Worker {
    queue: Queue,
    recorder: Arc<Recorder>,
    opts: WorkerOptions,
    live: Option<Arc<dyn LiveSink>>,
    switches: CancelSwitches,
    peak: Mutex<Option<Peak>>,
    /// Inside [`Worker::serve`]: a job's end also leases the next job in the same commit
    /// ([`Queue::finish_and_lease`]), kept here until the loop comes round.
    chaining: AtomicBool,
    next: Mutex<Option<Job>>,
    /// This program's identity, hashed once at the first job.
    build: OnceLock<Option<BuildIdentity>>,
    /// When this worker last told the queue its host.
    announced: Mutex<Option<std::time::Instant>>,
}

/// How often a polling worker renews its host in the queue (well inside the minute a job that
/// avoids a host waits for another host's worker).
const ANNOUNCE_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Worker({})", self.opts.id)
    }
}

impl Worker {
    /// A worker.
    pub fn new(queue: Queue, recorder: Arc<Recorder>, opts: WorkerOptions) -> Self {
        // Hash the executable in the background, so the first run does not wait for it.
        std::thread::spawn(executable_hash);
        let peak = Mutex::new(opts.peak.clone());
        Self {
            chaining: AtomicBool::new(false),
            next: Mutex::new(None),
            queue,
            recorder,
            opts,
            live: None,
            switches: CancelSwitches::default(),
            peak,
            build: OnceLock::new(),
            announced: Mutex::new(None),
        }
    }

    /// Tells the queue which host this worker is on, at most every few seconds (what jobs that
    /// avoid a host are checked against). A failure is only logged: leasing goes on.
    async fn announce_host(&self) {
        let now = std::time::Instant::now();
        {
            let mut last = self.announced.lock().unwrap_or_else(|e| e.into_inner());
            if last.is_some_and(|t| now.duration_since(t) < ANNOUNCE_EVERY) {
                return;
            }
            *last = Some(now);
        }
        if let Err(e) = self.queue.announce(&self.opts.id, &self.opts.host).await {
            tracing::warn!(worker = %self.opts.id, error = %e, "cannot announce this worker's host");
        }
    }

    /// This program's identity for the record (computed once).
    fn build(&self) -> Option<BuildIdentity> {
        self.build
            .get_or_init(|| build_identity(&self.opts.code_revision))
            .clone()
    }

    /// Streams live telemetry to `sink`.
    pub fn with_live(mut self, sink: Arc<dyn LiveSink>) -> Self {
        self.live = Some(sink);
        self
    }

    /// Shares cancel switches with the flow (a worker in the server's process).
    pub fn with_switches(mut self, switches: CancelSwitches) -> Self {
        self.switches = switches;
        self
    }

    /// Its id.
    pub fn id(&self) -> &WorkerId {
        &self.opts.id
    }

    /// Leases the next job and runs it; `None` when the queue is idle.
    /// Before leasing, it ends a job whose worker died on its last allowed attempt (or after a
    /// cancel request), if there is one: that is a job's end like any other, returned here.
    pub async fn run_next(&self) -> Result<Option<JobEnd>, LabError> {
        let job = match self.take_next() {
            Some(job) => job,
            None => {
                self.announce_host().await;
                let lease = self.opts.settings.lease();
                if let Some(job) = self.queue.claim_abandoned(&self.opts.id, lease).await? {
                    return Ok(Some(self.end_abandoned(job).await?));
                }
                match self.queue.lease(&self.opts.id, lease).await? {
                    Some(job) => job,
                    None => return Ok(None),
                }
            }
        };
        Ok(Some(self.execute(job).await?))
    }

    /// Ends a job whose lease ran out on its last attempt (or with a cancel requested): its
    /// worker is gone, so this one records the end for it.
    async fn end_abandoned(&self, job: Job) -> Result<JobEnd, LabError> {
        let log = RunLog::default();
        let (status, reason) = if job.cancel_requested {
            (RunStatus::Cancelled, ABANDONED_CANCELLED_REASON)
        } else {
            (RunStatus::Failed, ABANDONED_REASON)
        };
        log.warn(format!(
            "job {}: {reason} ({} of {} attempts); worker {} records its end",
            job.id, job.attempts, job.max_attempts, self.opts.id
        ));
        if job.kind == JobKind::Eval {
            let outcome = if job.cancel_requested {
                glassbox_schemas::record::EvalOutcome::Cancelled
            } else {
                glassbox_schemas::record::EvalOutcome::Failed
            };
            return self
                .conclude_eval(&job, None, outcome, Some(reason.to_string()), &log)
                .await;
        }
        if job.kind == JobKind::Reproduction {
            let outcome = if job.cancel_requested {
                "cancelled"
            } else {
                "failed"
            };
            return self
                .conclude_reproduction(&job, outcome, Some(reason.to_string()), None, &log)
                .await;
        }
        let run = job.run();
        let spec = self.stored_spec(&job);
        let mut outcome = JobOutcome::early(status, reason.to_string());
        // The last checkpoint the dead worker left is where the run got to.
        outcome.ending.steps = job.snapshot_step.unwrap_or(0);
        if let Some(h) = job.snapshot_blob {
            outcome.refs = one_ref(RefRole::Checkpoint, &h);
        }
        self.conclude(&job, &run, spec.as_ref(), outcome, &log)
            .await
    }

    /// The job leased together with the last one's end, if any.
    fn take_next(&self) -> Option<Job> {
        self.next.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Gives back a job leased ahead that this worker will not run (it is stopping).
    async fn release_next(&self) -> Result<(), LabError> {
        self.chaining.store(false, Ordering::SeqCst);
        if let Some(job) = self.take_next() {
            match self.queue.release(job.id, &self.opts.id).await {
                // Its lease already ran out and someone else has it: nothing to give back.
                Ok(()) | Err(QueueError::LeaseLost { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Leases one given queued job and runs it; `None` when it is not queued.
    pub async fn run_job(&self, id: JobId) -> Result<Option<JobEnd>, LabError> {
        let Some(job) = self
            .queue
            .lease_job(id, &self.opts.id, self.opts.settings.lease())
            .await?
        else {
            return Ok(None);
        };
        Ok(Some(self.execute(job).await?))
    }

    /// Runs jobs until `stop` turns true (or, with `exit_when_idle`, until the queue is
    /// empty), calling `on_end` after each; waits `poll` between empty leases. A database that
    /// goes away is retried (the pool reconnects) rather than ending the loop.
    pub async fn serve(
        &self,
        mut stop: tokio::sync::watch::Receiver<bool>,
        exit_when_idle: bool,
        mut on_end: impl FnMut(&JobEnd),
    ) -> Result<(), LabError> {
        self.chaining.store(true, Ordering::SeqCst);
        let served = self
            .serve_loop(&mut stop, exit_when_idle, &mut on_end)
            .await;
        let released = self.release_next().await;
        served.and(released)
    }

    async fn serve_loop(
        &self,
        stop: &mut tokio::sync::watch::Receiver<bool>,
        exit_when_idle: bool,
        on_end: &mut impl FnMut(&JobEnd),
    ) -> Result<(), LabError> {
        loop {
            if *stop.borrow() {
                return Ok(());
            }
            let idle = match self.run_next().await {
                Ok(Some(end)) => {
                    on_end(&end);
                    false
                }
                Ok(None) if exit_when_idle && self.queue_is_drained().await? => return Ok(()),
                Ok(None) => true,
                Err(LabError::Queue(e)) if e.is_transient() => {
                    tracing::warn!(worker = %self.opts.id, error = %e, "queue unavailable; retrying");
                    eprintln!("worker {}: queue unavailable ({e}); retrying", self.opts.id);
                    true
                }
                Err(e) => return Err(e),
            };
            if idle {
                tokio::select! {
                    _ = tokio::time::sleep(self.opts.settings.poll()) => {}
                    _ = stop.changed() => {}
                }
            }
        }
    }

    /// Nothing queued and nothing leased or running (a job whose worker died still counts
    /// until its lease runs out and someone takes it over), except jobs that never run on this
    /// worker (a reproduction of its own run is another worker's).
    async fn queue_is_drained(&self) -> Result<bool, LabError> {
        Ok(self.queue.open_for(&self.opts.id).await? == 0)
    }

    async fn execute(&self, job: Job) -> Result<JobEnd, LabError> {
        // The run's log, its lines also sent live (a reproduction's run is named later).
        let log = Arc::new(match (&self.live, job.kind) {
            (Some(live), JobKind::Run) => {
                let (live, experiment, run) = (live.clone(), job.experiment.clone(), job.run());
                RunLog::following(Box::new(move |line| live.log(&experiment, &run, line)))
            }
            _ => RunLog::default(),
        });
        log.info(format!(
            "job {} ({}), attempt {} of {}, leased by worker {}",
            job.id, job.experiment, job.attempts, job.max_attempts, self.opts.id
        ));
        if job.kind == JobKind::Reproduction {
            return self.reproduce(job, log).await;
        }
        if job.kind == JobKind::Eval {
            return self.evaluate(job, log).await;
        }
        let run = job.run();
        // The record may be ahead of the queue (a worker died after recording the result but
        // before ending the job): end the job as recorded, without training it again.
        let rec = self.recorder.clone();
        let run_text = run.0.clone();
        if blocking(move || rec.result_entry(&run_text))
            .await?
            .is_some()
        {
            log.warn(format!(
                "{run} already has its result on the record; ending the job"
            ));
            let outcome = JobOutcome::early(RunStatus::Failed, "already recorded".into());
            return self.conclude(&job, &run, None, outcome, &log).await;
        }
        let spec = match self.checked_spec(&job) {
            Ok(spec) => spec,
            Err(reason) => return self.conclude_early(&job, &run, reason, &log).await,
        };
        self.queue.mark_running(job.id, &self.opts.id, &run).await?;
        let scratch = self.opts.scratch.join(&run.0);
        let resume = match self.fetch_snapshot(&job, &scratch) {
            Ok(r) => r,
            Err(e) => {
                let reason = format!("cannot fetch its checkpoint: {e}");
                return self.conclude_early(&job, &run, reason, &log).await;
            }
        };
        let cancel = Arc::new(AtomicBool::new(false));
        self.switches.register(job.id, cancel.clone());
        let end = self
            .train(&job, &run, spec, resume, &scratch, cancel, &log)
            .await;
        self.switches.remove(job.id);
        let _ = std::fs::remove_dir_all(&scratch);
        end
    }
}

/// How a job ended, as [`Worker`]'s `conclude` records it.
struct JobOutcome {
    ending: RunEnding,
    refs: BTreeMap<String, Blake3Hash>,
    params: Option<Blake3Hash>,
    /// The last snapshot's completion of the first `[samples]` prompt, for the result comment.
    sample: Option<glassbox_github_bot::port::QuotedSample>,
}

impl JobOutcome {
    /// An ending before training (or without it): no steps, no metrics.
    fn early(status: RunStatus, reason: String) -> Self {
        Self {
            ending: RunEnding::early(status, reason),
            refs: BTreeMap::new(),
            params: None,
            sample: None,
        }
    }
}

/// A panic's message, as far as it is text.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a panic without a message)".into()
    }
}

/// Retries a queue call while the database is unreachable, for up to `within`; other errors
/// (a lost lease, a wrong state) return at once. Only for calls that are safe to repeat after
/// a commit whose outcome is unknown (a repeated finish reports a lost lease, never a second
/// result).
async fn retry_db<T, F, Fut>(within: std::time::Duration, mut f: F) -> Result<T, QueueError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, QueueError>>,
{
    let deadline = tokio::time::Instant::now() + within;
    let mut wait = std::time::Duration::from_millis(100);
    loop {
        match f().await {
            Err(e) if e.is_transient() && tokio::time::Instant::now() < deadline => {
                tracing::warn!(error = %e, "queue unavailable; retrying");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(std::time::Duration::from_secs(2));
            }
            other => return other,
        }
    }
}

/// Runs blocking ledger I/O off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, LabError> + Send + 'static,
) -> Result<T, LabError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| LabError::Task(e.to_string()))?
}
