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
//!    where the last checkpoint is;
//! 6. record the `result` (every ending: succeeded, diverged, budget_exceeded, cancelled,
//!    failed — including failures before training), with the forecast compared, then end the
//!    job in the queue, then add the notice to the outbox.
//!
//! A worker that dies stops heartbeating; another worker takes the job over when the lease
//! runs out and resumes from the checkpoint. The runner is deterministic on the CPU, so the
//! resumed run ends with the same parameters as an uninterrupted one.
//!
//! This module does not decide which jobs exist (the flow does) or how training works (the
//! runner does).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use glassbox_runner::backend::cpu::CpuBackend;
use glassbox_runner::backend::{self, Backend, BackendKind, BackendRequest};
use glassbox_runner::data::DataPipeline;
use glassbox_runner::observer::{MetricRecord, RunInfo};
use glassbox_runner::train::{Peak, RunOptions, RunOutcome, Trainer};
use glassbox_schemas::record::{ApprovalBody, ForecastOutcome, ResultBody, RunStartedBody};
use glassbox_schemas::spec::Forecast;
use glassbox_schemas::{
    Blake3Hash, BlobHash, EntryKind, ExperimentId, ExperimentSpec, RunId, RunStatus, SpecHash,
};
use tokio::runtime::Handle;

use crate::config::WorkerSettings;
use crate::error::LabError;
use crate::outbox::{self, Notice};
use crate::queue::{Job, JobId, JobKind, JobState, Queue, QueueError, WorkerId};
use crate::recorder::{Recorder, one_ref};

mod recording;

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
    fn status(&self, experiment: &ExperimentId, run: &RunId, status: &str);
}

/// Cancel flags of the jobs running in this process, so a maintainer's `/cancel` reaches a
/// local run at its next step instead of at the next heartbeat.
#[derive(Debug, Clone, Default)]
pub struct CancelSwitches {
    inner: Arc<Mutex<HashMap<JobId, Arc<AtomicBool>>>>,
}

impl CancelSwitches {
    /// Flips `job`'s flag if it runs in this process; returns whether it did.
    pub fn cancel(&self, job: JobId) -> bool {
        match self.lock().get(&job) {
            Some(flag) => {
                flag.store(true, Ordering::SeqCst);
                true
            }
            None => false,
        }
    }

    fn register(&self, job: JobId, flag: Arc<AtomicBool>) {
        self.lock().insert(job, flag);
    }

    fn remove(&self, job: JobId) {
        self.lock().remove(&job);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<JobId, Arc<AtomicBool>>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// How a worker runs.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// Its id in the queue (unique per process).
    pub id: WorkerId,
    /// Lease, heartbeat, poll, metric chunking.
    pub settings: WorkerSettings,
    /// CPU threads for training.
    pub threads: usize,
    /// Which backend to train on.
    pub backend: BackendRequest,
    /// Scratch space for checkpoints before they become blobs.
    pub scratch: PathBuf,
    /// The code revision recorded in `run_started`.
    pub code_revision: String,
    /// The MFU reference; measured once at the first job when `None`.
    pub peak: Option<Peak>,
}

impl WorkerOptions {
    /// Defaults for a worker named `id` with scratch space under `scratch`.
    pub fn new(id: WorkerId, scratch: PathBuf, code_revision: String) -> Self {
        Self {
            id,
            settings: WorkerSettings::default(),
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            backend: BackendRequest::Auto,
            scratch,
            code_revision,
            peak: None,
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
    /// How it ended.
    pub status: RunStatus,
    /// Why, when not succeeded.
    pub reason: Option<String>,
    /// Steps completed.
    pub steps: u64,
    /// Final metrics.
    pub final_metrics: BTreeMap<String, f64>,
    /// The `result` entry.
    pub result_entry: u64,
    /// The runner's outcome, when training started.
    pub outcome: Option<RunOutcome>,
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
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Worker({})", self.opts.id)
    }
}

impl Worker {
    /// A worker.
    pub fn new(queue: Queue, recorder: Arc<Recorder>, opts: WorkerOptions) -> Self {
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
        }
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
    pub async fn run_next(&self) -> Result<Option<JobEnd>, LabError> {
        let job = match self.take_next() {
            Some(job) => job,
            None => match self
                .queue
                .lease(&self.opts.id, self.opts.settings.lease())
                .await?
            {
                Some(job) => job,
                None => return Ok(None),
            },
        };
        Ok(Some(self.execute(job).await?))
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
    /// until its lease runs out and someone takes it over).
    async fn queue_is_drained(&self) -> Result<bool, LabError> {
        let counts = self.queue.counts().await?;
        Ok(counts.iter().all(|(state, n)| {
            *n == 0
                || !matches!(
                    state,
                    JobState::Queued | JobState::Leased | JobState::Running
                )
        }))
    }

    async fn execute(&self, job: Job) -> Result<JobEnd, LabError> {
        let run = RunId(format!("run-{:06}", job.id.0));
        if job.kind == JobKind::Reproduction {
            let reason = "reproduction jobs are run by `glassbox reproduce`, not by workers";
            return self.conclude_early(&job, &run, reason.into()).await;
        }
        let spec = match self.checked_spec(&job) {
            Ok(spec) => spec,
            Err(reason) => return self.conclude_early(&job, &run, reason).await,
        };
        self.queue
            .mark_running(job.id, &self.opts.id, &run.0)
            .await?;
        let scratch = self.opts.scratch.join(&run.0);
        let resume = match self.fetch_checkpoint(&job, &scratch) {
            Ok(r) => r,
            Err(e) => {
                return self
                    .conclude_early(&job, &run, format!("cannot fetch its checkpoint: {e}"))
                    .await;
            }
        };
        let cancel = Arc::new(AtomicBool::new(false));
        self.switches.register(job.id, cancel.clone());
        let end = self.train(&job, &run, spec, resume, &scratch, cancel).await;
        self.switches.remove(job.id);
        let _ = std::fs::remove_dir_all(&scratch);
        end
    }

    /// The job's spec from the blob store, checked against its hash and its approval.
    fn checked_spec(&self, job: &Job) -> Result<ExperimentSpec, String> {
        let bytes = self
            .recorder
            .get_bytes(&BlobHash(job.spec_hash.0))
            .map_err(|e| format!("cannot load its spec: {e}"))?;
        let spec: ExperimentSpec = serde_json::from_slice(&bytes)
            .map_err(|e| format!("its stored spec does not parse: {e}"))?;
        let hash = glassbox_schemas::spec_hash(&spec).map_err(|e| e.to_string())?;
        if hash != job.spec_hash {
            return Err(format!(
                "its stored spec hashes to {hash}, not the job's {}",
                job.spec_hash
            ));
        }
        let Some(index) = job.approval_entry else {
            return Err("it has no approval entry; only approved specs run".into());
        };
        let entry = self
            .recorder
            .entry(index)
            .map_err(|e| format!("cannot read its approval (entry {index}): {e}"))?;
        let approval: ApprovalBody = match entry.kind {
            EntryKind::Approval => entry.body_as().map_err(|e| e.to_string())?,
            other => {
                return Err(format!(
                    "entry {index} is a {} entry, not an approval",
                    other.as_str()
                ));
            }
        };
        if approval.spec_hash != hash {
            return Err(format!(
                "its approval (entry {index}) is for {}, but the spec is {hash}; it must be approved again",
                approval.spec_hash
            ));
        }
        Ok(spec)
    }

    /// Copies the job's last checkpoint blob into scratch space, if it has one.
    fn fetch_checkpoint(&self, job: &Job, scratch: &Path) -> Result<Option<PathBuf>, LabError> {
        let (Some(text), Some(step)) = (&job.checkpoint_blob, job.checkpoint_step) else {
            return Ok(None);
        };
        let hash: BlobHash = text.parse().map_err(|e| LabError::BadSpec {
            hash: text.clone(),
            reason: format!("the job's checkpoint hash does not parse: {e}"),
        })?;
        std::fs::create_dir_all(scratch).map_err(LabError::io("cannot create", scratch))?;
        let path = scratch.join(format!("resume-step-{step}.safetensors"));
        let mut out = std::fs::File::create(&path).map_err(LabError::io("cannot create", &path))?;
        let mut blob = self.recorder.blobs().get(&hash)?;
        std::io::copy(&mut blob, &mut out).map_err(LabError::io("cannot write", &path))?;
        Ok(Some(path))
    }

    fn peak(&self, threads: usize) -> Peak {
        let mut p = self.peak.lock().unwrap_or_else(|e| e.into_inner());
        p.get_or_insert_with(|| glassbox_runner::peak::measure_gemm_peak(threads, 0.3))
            .clone()
    }

    async fn train(
        &self,
        job: &Job,
        run: &RunId,
        spec: ExperimentSpec,
        resume: Option<PathBuf>,
        scratch: &Path,
        cancel: Arc<AtomicBool>,
    ) -> Result<JobEnd, LabError> {
        let selection = match backend::select(self.opts.backend) {
            Ok(k) => k,
            Err(e) => return self.conclude_early(job, run, e.to_string()).await,
        };
        match selection.kind {
            BackendKind::Cpu => {
                let threads = self.opts.threads.max(1);
                let be = match CpuBackend::<f32>::new(threads) {
                    Ok(be) => be,
                    Err(e) => return self.conclude_early(job, run, e.to_string()).await,
                };
                let peak = be.run(|| self.peak(threads));
                self.train_on(&be, peak, job, run, spec, resume, scratch, cancel)
                    .await
            }
            BackendKind::Cuda => {
                self.train_cuda(job, run, spec, resume, scratch, cancel)
                    .await
            }
        }
    }

    #[cfg(feature = "cuda")]
    async fn train_cuda(
        &self,
        job: &Job,
        run: &RunId,
        spec: ExperimentSpec,
        resume: Option<PathBuf>,
        scratch: &Path,
        cancel: Arc<AtomicBool>,
    ) -> Result<JobEnd, LabError> {
        let be = match glassbox_runner::backend::cuda::CudaBackend::new(0) {
            Ok(be) => be,
            Err(e) => return self.conclude_early(job, run, e.to_string()).await,
        };
        let peak = match self.opts.peak.clone() {
            Some(p) => p,
            None => match be.measure_sgemm_peak(4096, 5) {
                Ok(f) => Peak {
                    flops_per_second: f,
                    label: format!(
                        "measured f32 SGEMM peak (cuBLAS 4096^3) of {}",
                        be.describe()
                    ),
                },
                Err(e) => return self.conclude_early(job, run, e.to_string()).await,
            },
        };
        self.train_on(&be, peak, job, run, spec, resume, scratch, cancel)
            .await
    }

    #[cfg(not(feature = "cuda"))]
    async fn train_cuda(
        &self,
        job: &Job,
        run: &RunId,
        _spec: ExperimentSpec,
        _resume: Option<PathBuf>,
        _scratch: &Path,
        _cancel: Arc<AtomicBool>,
    ) -> Result<JobEnd, LabError> {
        self.conclude_early(
            job,
            run,
            "this worker was built without the CUDA backend (cargo feature `cuda`)".into(),
        )
        .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn train_on<B: Backend>(
        &self,
        be: &B,
        peak: Peak,
        job: &Job,
        run: &RunId,
        spec: ExperimentSpec,
        resume: Option<PathBuf>,
        scratch: &Path,
        cancel: Arc<AtomicBool>,
    ) -> Result<JobEnd, LabError> {
        let kind = be.kind();
        let opts = RunOptions {
            out_dir: Some(scratch.to_path_buf()),
            resume,
            peak,
            cancel: cancel.clone(),
            wall_limit: None,
        };
        let store = crate::corpus::BlobCorpusStore::new(self.recorder.blobs().clone());
        let data = match DataPipeline::new(&spec, &store) {
            Ok(d) => d,
            Err(e) => return self.conclude_early(job, run, e.to_string()).await,
        };
        let mut trainer = match Trainer::new(be, spec.clone(), data, &opts) {
            Ok(t) => t,
            Err(e) => return self.conclude_early(job, run, e.to_string()).await,
        };
        let resumed = opts.resume.as_ref().map(|_| trainer.step());
        let started = self
            .record_started(job, run, &spec, trainer.info(), kind.as_str(), resumed)
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
            live.status(&job.experiment, run, "running");
        }

        // Heartbeats run on the async side while training blocks a thread.
        let lost = Arc::new(AtomicBool::new(false));
        let (hb_stop, hb_task) = self.spawn_heartbeat(job.id, cancel.clone(), lost.clone());
        let ctx = recording::RunContext {
            recorder: self.recorder.clone(),
            queue: self.queue.clone(),
            handle: Handle::current(),
            job: job.id,
            worker: self.opts.id.clone(),
            experiment: job.experiment.clone(),
            run: run.clone(),
            cancel: cancel.clone(),
            lease: self.opts.settings.lease(),
        };
        let (mut observer, recording) = recording::spawn(
            ctx,
            self.opts.settings.metrics_flush_steps,
            self.live.clone(),
        )?;
        let (outcome, recorded) = tokio::task::block_in_place(|| {
            let outcome = trainer.run(&opts, &mut observer);
            // Closing the channel lets the recording thread finish what it was handed.
            drop(observer);
            (outcome, recording.finish())
        });
        let _ = hb_stop.send(true);
        let _ = hb_task.await;
        if lost.load(Ordering::SeqCst) {
            tracing::warn!(job = %job.id, worker = %self.opts.id, "lost the lease mid-run; another worker owns the job");
            return Ok(JobEnd::LeaseLost(job.id));
        }
        let (status, reason) = match (&recorded.error, outcome.status) {
            (Some(e), _) => (
                RunStatus::Failed,
                Some(format!("recording the run failed: {e}")),
            ),
            (None, s) => (s, outcome.reason.clone()),
        };
        let refs = recorded
            .last_checkpoint
            .as_ref()
            .map(|h| one_ref("checkpoint", h))
            .unwrap_or_default();
        let mut finished = self
            .conclude_with(
                job,
                run,
                Some(&spec),
                status,
                reason,
                outcome.steps,
                outcome.final_metrics.clone(),
                refs,
                Some(outcome.params_blake3.clone()),
            )
            .await?;
        finished.outcome = Some(outcome);
        Ok(JobEnd::Recorded(Box::new(finished)))
    }

    fn spawn_heartbeat(
        &self,
        job: JobId,
        cancel: Arc<AtomicBool>,
        lost: Arc<AtomicBool>,
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
                    Err(e) => tracing::warn!(%job, error = %e, "heartbeat failed; retrying"),
                }
            }
        });
        (tx, task)
    }

    async fn record_started(
        &self,
        job: &Job,
        run: &RunId,
        spec: &ExperimentSpec,
        info: &RunInfo,
        backend: &str,
        resumed: Option<u64>,
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
            run: run.clone(),
            spec_hash: job.spec_hash,
            code_revision: self.opts.code_revision.clone(),
            backend: format!("{backend}: {}", info.backend),
            hardware: hardware_description(),
            seed: spec.train.seed,
            kernel_hashes,
            resumed_from_step: resumed,
            build: None,
        };
        let rec = self.recorder.clone();
        let experiment = job.experiment.clone();
        blocking(move || {
            rec.record(
                EntryKind::RunStarted,
                Some(&experiment),
                BTreeMap::new(),
                &body,
            )
        })
        .await
    }

    /// Records a job that ends before training (bad spec, missing approval, missing corpus):
    /// it is still a `failed` result on the record.
    async fn conclude_early(
        &self,
        job: &Job,
        run: &RunId,
        reason: String,
    ) -> Result<JobEnd, LabError> {
        tracing::warn!(job = %job.id, %reason, "job failed before training");
        let spec = self.recorder.get_bytes(&BlobHash(job.spec_hash.0)).ok();
        let spec: Option<ExperimentSpec> = spec.and_then(|b| serde_json::from_slice(&b).ok());
        let finished = self
            .conclude_with(
                job,
                run,
                spec.as_ref(),
                RunStatus::Failed,
                Some(reason),
                0,
                BTreeMap::new(),
                BTreeMap::new(),
                None,
            )
            .await?;
        Ok(JobEnd::Recorded(Box::new(finished)))
    }

    /// The end of every job: `result` entry, then the queue, then the outbox.
    #[allow(clippy::too_many_arguments)]
    async fn conclude_with(
        &self,
        job: &Job,
        run: &RunId,
        spec: Option<&ExperimentSpec>,
        status: RunStatus,
        reason: Option<String>,
        steps: u64,
        final_metrics: BTreeMap<String, f64>,
        refs: BTreeMap<String, Blake3Hash>,
        params: Option<String>,
    ) -> Result<Finished, LabError> {
        let final_metrics: BTreeMap<String, f64> = final_metrics
            .into_iter()
            .filter(|(_, v)| v.is_finite())
            .collect();
        let forecast = match spec.and_then(|s| s.forecast.clone()) {
            Some(f) => Some(f),
            None => registered_forecast(&self.queue, &job.spec_hash).await?,
        }
        .map(|f| compare_forecast(&f, &final_metrics));
        let body = ResultBody {
            run: run.clone(),
            spec_hash: job.spec_hash,
            status,
            steps,
            final_metrics: final_metrics.clone(),
            forecast: forecast.clone(),
            reason: reason.clone(),
            params_blake3: params.clone(),
        };
        let rec = self.recorder.clone();
        let experiment = job.experiment.clone();
        let entry =
            blocking(move || rec.record(EntryKind::Result, Some(&experiment), refs, &body)).await?;
        // The result is on the record; the queue and the outbox must now learn of it even if
        // the database is restarting, or another worker would run the job again.
        let finish = retry_db(self.opts.settings.lease(), || async {
            if self.chaining.load(Ordering::SeqCst) {
                let next = self
                    .queue
                    .finish_and_lease(
                        job.id,
                        &self.opts.id,
                        status,
                        reason.as_deref(),
                        self.opts.settings.lease(),
                    )
                    .await?;
                *self.next.lock().unwrap_or_else(|e| e.into_inner()) = next;
                Ok(())
            } else {
                self.queue
                    .finish(job.id, &self.opts.id, status, reason.as_deref())
                    .await
            }
        })
        .await;
        match finish {
            Ok(()) => {}
            Err(QueueError::LeaseLost { .. }) => {
                tracing::warn!(job = %job.id, "lease lost while recording the result")
            }
            Err(e) => return Err(e.into()),
        }
        let notice = Notice::Finished {
            experiment: job.experiment.clone(),
            run: run.clone(),
            status,
            final_metrics: final_metrics.clone(),
            forecast,
            reason: reason.clone(),
            entry,
        };
        retry_db(self.opts.settings.lease(), || async {
            outbox::push(&self.queue, &notice)
                .await
                .map_err(|e| match e {
                    LabError::Queue(q) => q,
                    other => QueueError::Corrupt {
                        job: job.id.0,
                        detail: other.to_string(),
                    },
                })
        })
        .await?;
        if let Some(live) = &self.live {
            live.status(&job.experiment, run, status.as_str());
        }
        Ok(Finished {
            job: job.id,
            run: run.clone(),
            experiment: job.experiment.clone(),
            status,
            reason,
            steps,
            final_metrics,
            result_entry: entry,
            outcome: None,
        })
    }
}

/// The newest forecast registered for a spec hash (by the proposer's form or a ladder).
pub async fn registered_forecast(
    queue: &Queue,
    spec_hash: &SpecHash,
) -> Result<Option<Forecast>, LabError> {
    use sqlx::Row;
    let row = sqlx::query(
        "SELECT metric, value, tolerance FROM forecasts WHERE spec_hash = $1 ORDER BY entry DESC LIMIT 1",
    )
    .bind(spec_hash.to_string())
    .fetch_optional(queue.pool())
    .await?;
    row.map(|r| {
        Ok(Forecast {
            metric: r.try_get("metric")?,
            value: r.try_get("value")?,
            tolerance: r.try_get("tolerance")?,
        })
    })
    .transpose()
    .map_err(|e: sqlx::Error| e.into())
}

/// Forecast against outcome: a hit when the metric exists and is within the tolerance.
pub fn compare_forecast(f: &Forecast, metrics: &BTreeMap<String, f64>) -> ForecastOutcome {
    let actual = metrics.get(&f.metric).copied();
    ForecastOutcome {
        metric: f.metric.clone(),
        predicted: f.value,
        tolerance: f.tolerance,
        actual,
        hit: actual.is_some_and(|a| (a - f.value).abs() <= f.tolerance),
    }
}

/// The CPU model and core count, for `run_started`.
pub fn hardware_description() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!("{model}, {cores} cores")
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
