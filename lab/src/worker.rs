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
//! threads, under the lab's limits, cancellable, with a `reproduction` entry at the end.
//!
//! This module does not decide which jobs exist (the flow does) or how training works (the
//! runner does).

use std::collections::{BTreeMap, HashMap};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use glassbox_runner::backend::{self, Backend, BackendRequest, Selected};
use glassbox_runner::data::DataPipeline;
use glassbox_runner::observer::{MetricRecord, RunInfo};
use glassbox_runner::train::{Peak, RunOptions, RunOutcome, Trainer};
use glassbox_schemas::record::{
    ApprovalBody, ArtifactBody, BuildIdentity, ForecastOutcome, ReproductionBody, ResultBody,
    RunStartedBody,
};
use glassbox_schemas::record::{EntryBody, RunEnding};
use glassbox_schemas::spec::Forecast;
use glassbox_schemas::{
    Blake3Hash, BlobHash, ExperimentId, ExperimentSpec, LedgerEntry, RunId, RunStatus, SpecHash,
};
use tokio::runtime::Handle;

use crate::config::{Limits, ReproduceSettings, WorkerSettings};
use crate::error::LabError;
use crate::outbox::{self, AlertNotice, Notice};
use crate::queue::{
    ABANDONED_CANCELLED_REASON, ABANDONED_REASON, Ending, Job, JobId, JobKind, Queue, QueueError,
    WorkerId,
};
use crate::recorder::{Recorder, one_ref};
use crate::stall::StallWatch;
use glassbox_ledger::board::BoardDef;

mod recording;
pub mod run_log;

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
    fn status(&self, experiment: &ExperimentId, run: &RunId, status: &str);
    /// A line of the run's own log (`<time> <level> <text>`), as the worker writes it.
    fn log(&self, _experiment: &ExperimentId, _run: &RunId, _line: &str) {}
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
    /// The code revision recorded in `run_started`: the full git commit, `-dirty` when the
    /// tree was modified (the binary's `GLASSBOX_GIT_REVISION`).
    pub code_revision: String,
    /// The MFU reference; measured once at the first job when `None`.
    pub peak: Option<Peak>,
    /// The lab's limits this worker applies: memory (checked before allocating) and wall time
    /// (every run, beside the spec's own budget).
    pub limits: Limits,
    /// This worker's host name, recorded in `run_started` and `reproduction` entries and
    /// checked by jobs that avoid a host. Default: the machine's host name.
    pub host: String,
    /// The lab's `[reproduce]` policy, applied when a run this worker made succeeds.
    pub reproduce: ReproduceSettings,
    /// The lab's leaderboards (what `reproduce.policy = "top"` ranks against).
    pub leaderboards: Vec<BoardDef>,
    /// Test only: train with a seed the spec does not state, as a nondeterministic backend
    /// would, so that a reproduction differs.
    #[cfg(feature = "test-backend")]
    pub nondeterministic: bool,
}

/// The machine's host name (`worker` when it cannot be read).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".into())
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
            limits: Limits::default(),
            host: host_name(),
            reproduce: ReproduceSettings::default(),
            leaderboards: Vec::new(),
            #[cfg(feature = "test-backend")]
            nondeterministic: false,
        }
    }
}

/// Which program is running: the commit and dirty flag from the code revision
/// (`<40 hex>[-dirty]`), and the BLAKE3 of the executable file (`std::env::current_exe`).
/// `None` when the executable cannot be read.
pub fn build_identity(code_revision: &str) -> Option<BuildIdentity> {
    let executable_blake3 = executable_hash()?;
    let (commit, dirty) = match code_revision.strip_suffix("-dirty") {
        Some(c) => (c, true),
        None => (code_revision, false),
    };
    let is_commit = commit.len() == 40 && commit.bytes().all(|b| b.is_ascii_hexdigit());
    Some(BuildIdentity {
        commit: is_commit.then(|| commit.to_ascii_lowercase()),
        dirty,
        executable_blake3,
    })
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

/// BLAKE3 of the running executable, read once per process (a binary replaced on disk while
/// it runs is still named by the bytes it started from, as far as the first read saw them).
fn executable_hash() -> Option<Blake3Hash> {
    static HASH: OnceLock<Option<Blake3Hash>> = OnceLock::new();
    *HASH.get_or_init(|| {
        let exe = std::env::current_exe().ok()?;
        let mut hasher = blake3::Hasher::new();
        hasher.update_reader(std::fs::File::open(&exe).ok()?).ok()?;
        Some(Blake3Hash::from_bytes(*hasher.finalize().as_bytes()))
    })
}

/// How a job ended, as [`Worker`]'s `conclude` records it.
struct JobOutcome {
    ending: RunEnding,
    refs: BTreeMap<String, Blake3Hash>,
    params: Option<String>,
}

impl JobOutcome {
    /// An ending before training (or without it): no steps, no metrics.
    fn early(status: RunStatus, reason: String) -> Self {
        Self {
            ending: RunEnding::early(status, reason),
            refs: BTreeMap::new(),
            params: None,
        }
    }
}

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
            outcome.refs = one_ref("checkpoint", &h);
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

    /// The job's spec from the blob store, if it can be read (for an ending's forecast).
    fn stored_spec(&self, job: &Job) -> Option<ExperimentSpec> {
        let bytes = self.recorder.get_bytes(&BlobHash(job.spec_hash.0)).ok()?;
        serde_json::from_slice(&bytes).ok()
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
        let approval: ApprovalBody = match &entry.body {
            EntryBody::Approval(b) => b.clone(),
            other => {
                return Err(format!(
                    "entry {index} is a {} entry, not an approval",
                    other.kind().as_str()
                ));
            }
        };
        if approval.spec_hash != hash {
            return Err(format!(
                "its approval (entry {index}) is for {}, but the spec is {hash}; it must be approved again",
                approval.spec_hash
            ));
        }
        // Only declared corpora are read (a job approved before the flow checked it).
        for (i, c) in spec.data.mixture.iter().enumerate() {
            if let Some(h) = &c.corpus
                && self
                    .recorder
                    .dataset_entry(h)
                    .map_err(|e| e.to_string())?
                    .is_none()
            {
                return Err(format!(
                    "data.mixture[{i}].corpus = {h}: no `dataset` entry of this lab declares it"
                ));
            }
        }
        Ok(spec)
    }

    /// Copies the job's last checkpoint blob into scratch space, if it has one.
    fn fetch_snapshot(&self, job: &Job, scratch: &Path) -> Result<Option<PathBuf>, LabError> {
        let (Some(hash), Some(step)) = (job.snapshot_blob, job.snapshot_step) else {
            return Ok(None);
        };
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

    /// A spec over this worker's limits (memory, metric volume) ends `budget_exceeded` before
    /// anything is allocated; `device_memory` is the GPU's, on a GPU worker.
    async fn over_limits(
        &self,
        job: &Job,
        run: &RunId,
        spec: &ExperimentSpec,
        device_memory: Option<u64>,
        log: &RunLog,
    ) -> Option<Result<JobEnd, LabError>> {
        let problem = crate::limits::worker_problem(&self.opts.limits, spec, device_memory)?;
        log.warn(format!("not training: {problem}"));
        let outcome = JobOutcome::early(RunStatus::BudgetExceeded, problem);
        Some(self.conclude(job, run, Some(spec), outcome, log).await)
    }

    #[allow(clippy::too_many_arguments)]
    async fn train(
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
    async fn train_on<B: Backend>(
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
            live.status(&job.experiment, run, "running");
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
                    ending.refs = one_ref("checkpoint", h);
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
            .map(|h| one_ref("checkpoint", h))
            .unwrap_or_default();
        let ending = JobOutcome {
            ending: RunEnding {
                status,
                reason,
                ..outcome.ending.clone()
            },
            refs,
            params: Some(outcome.params_blake3.clone()),
        };
        let mut end = self.conclude(job, run, Some(&spec), ending, log).await?;
        if let JobEnd::Recorded(finished) = &mut end {
            finished.outcome = Some(outcome);
        }
        Ok(end)
    }

    fn spawn_heartbeat(
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
    fn spawn_stall_check(
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
    async fn record_started(
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

    /// Records a job that ends before training (bad spec, missing approval, missing corpus):
    /// it is still a `failed` result on the record.
    async fn conclude_early(
        &self,
        job: &Job,
        run: &RunId,
        reason: String,
        log: &RunLog,
    ) -> Result<JobEnd, LabError> {
        log.error(format!("failed before training: {reason}"));
        let spec = self.stored_spec(job);
        let outcome = JobOutcome::early(RunStatus::Failed, reason);
        self.conclude(job, run, spec.as_ref(), outcome, log).await
    }

    /// The end of every run job, one path: the run's log (`artifact`) and its `result` entry,
    /// then the queue, then the outbox. The entries are appended while the job's row is held
    /// ([`Queue::begin_ending`]): a worker that lost its lease records nothing, and a run that
    /// already has a `result` (its worker died between recording it and ending the job) gets
    /// no second one; the job ends as that result says.
    async fn conclude(
        &self,
        job: &Job,
        run: &RunId,
        spec: Option<&ExperimentSpec>,
        outcome: JobOutcome,
        log: &RunLog,
    ) -> Result<JobEnd, LabError> {
        let JobOutcome {
            mut ending,
            refs,
            params,
        } = outcome;
        ending.final_metrics.retain(|_, v| v.is_finite());
        let mut forecast = match spec.and_then(|s| s.forecast.clone()) {
            Some(f) => Some(f),
            None => registered_forecast(&self.queue, &job.spec_hash).await?,
        }
        .map(|f| compare_forecast(&f, &ending.final_metrics));
        let (status, steps) = (ending.status, ending.steps);
        match &ending.reason {
            Some(r) => log.info(format!("{run} ended {status} after {steps} steps: {r}")),
            None => log.info(format!("{run} ended {status} after {steps} steps")),
        }
        let body = ResultBody {
            run: run.clone(),
            spec_hash: job.spec_hash,
            ending: ending.clone(),
            forecast: forecast.clone(),
            params_blake3: params,
        };
        let log_name = format!("logs/{run}/attempt-{}.log", job.attempts.max(1));
        let entries = self.log_and(job, run, &log_name, log, refs, body.clone())?;
        let Some((recorded, held)) = self.record_fenced(job, entries, Some(run)).await? else {
            return Ok(JobEnd::LeaseLost(job.id));
        };
        // The run's first result stands: the job ends as it says.
        if let Fenced::AlreadyRecorded(_, existing) = &recorded {
            ending = existing.ending.clone();
            forecast = existing.forecast.clone();
        }
        let (entry, unpublished) = self
            .end_in_queue(
                job,
                held,
                &recorded,
                ending.status,
                ending.reason.as_deref(),
            )
            .await?;
        let notice = Notice::Finished {
            experiment: job.experiment.clone(),
            run: run.clone(),
            ending: ending.clone(),
            forecast: forecast.clone(),
            entry,
        };
        self.announce_notice(job, &notice).await?;
        if let Some(live) = &self.live {
            live.status(&job.experiment, run, ending.status.as_str());
        }
        if ending.status == RunStatus::Succeeded && matches!(recorded, Fenced::Appended(..)) {
            self.reproduce_by_policy(job, run, &ending).await;
        }
        self.after_sweep_child(job).await;
        Ok(JobEnd::Recorded(Box::new(Finished {
            job: job.id,
            run: run.clone(),
            experiment: job.experiment.clone(),
            ending,
            result_entry: entry,
            unpublished,
            outcome: None,
            forecast,
        })))
    }

    /// Puts `notice` in the outbox (retrying a database that blinks for up to a lease).
    async fn announce_notice(&self, job: &Job, notice: &Notice) -> Result<(), LabError> {
        retry_db(self.opts.settings.lease(), || async {
            outbox::push(&self.queue, notice)
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
        Ok(())
    }

    /// After `run` succeeded: queues its independent reproduction when the lab's `[reproduce]`
    /// policy asks for one. A failure here is logged; the run's record stands.
    async fn reproduce_by_policy(&self, job: &Job, run: &RunId, ending: &RunEnding) {
        let ctx = crate::reproduce::Origin {
            worker: &self.opts.id,
            host: &self.opts.host,
            max_attempts: self.opts.limits.max_attempts,
        };
        match crate::reproduce::queue_by_policy(
            &self.queue,
            &self.recorder,
            &self.opts.reproduce,
            &self.opts.leaderboards,
            job,
            run,
            ending,
            &ctx,
        )
        .await
        {
            Ok(Some(j)) => tracing::info!(%run, job = %j, "queued an automatic reproduction"),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(%run, error = %e, "cannot queue the automatic reproduction")
            }
        }
    }

    /// After a job of a sweep child ended: decides the sweep's gate when every child has.
    async fn after_sweep_child(&self, job: &Job) {
        if let Err(e) =
            crate::sweep::decide_gate(&self.queue, &self.recorder, &job.experiment).await
        {
            tracing::warn!(experiment = %job.experiment, error = %e, "cannot decide the sweep's gate");
        }
    }

    /// The run's log as a blob with its `artifact` entry, followed by the entry that ends the
    /// job (`refs`, `body`): what [`Worker::record_fenced`] appends together. A log that cannot
    /// be stored is left out (with a warning) rather than holding up the ending.
    fn log_and(
        &self,
        job: &Job,
        run: &RunId,
        log_name: &str,
        log: &RunLog,
        refs: BTreeMap<String, Blake3Hash>,
        body: impl Into<EntryBody>,
    ) -> Result<Vec<LedgerEntry>, LabError> {
        let mut entries = Vec::with_capacity(2);
        let text = log.text();
        match self.recorder.put_bytes(text.as_bytes()) {
            Ok(hash) => entries.push(LedgerEntry::new(
                Some(job.experiment.clone()),
                one_ref("artifact", &hash),
                ArtifactBody {
                    name: log_name.to_string(),
                    bytes: text.len() as u64,
                    run: Some(run.clone()),
                },
            )),
            Err(e) => tracing::warn!(job = %job.id, error = %e, "cannot store the run's log"),
        }
        entries.push(LedgerEntry::new(Some(job.experiment.clone()), refs, body));
        Ok(entries)
    }

    /// Sequences `entries` (the last one ends the job) in the transaction that holds the job's
    /// lease in the queue, and hands back the held [`Ending`] for [`Worker::end_in_queue`],
    /// which commits the entries and the job's end together; `None` when this worker no longer
    /// holds the lease. With `run`, a run that already has a `result` entry gets none
    /// sequenced: that one is returned instead.
    async fn record_fenced(
        &self,
        job: &Job,
        entries: Vec<LedgerEntry>,
        run: Option<&RunId>,
    ) -> Result<Option<(Fenced, Ending)>, LabError> {
        let lease = self.opts.settings.lease();
        let mut ending = match retry_db(lease, || self.queue.begin_ending(job.id, &self.opts.id))
            .await
        {
            Ok(e) => e,
            Err(QueueError::LeaseLost { .. }) => {
                tracing::warn!(job = %job.id, worker = %self.opts.id, "lease lost before recording the job's end; recording nothing");
                return Ok(None);
            }
            Err(e) => return Err(e.into()),
        };
        let rec = self.recorder.clone();
        let run = run.map(|r| r.0.clone());
        let checked = blocking(move || {
            if let Some(run) = &run
                && let Some(entry) = rec.result_entry(run)?
            {
                let existing: ResultBody = rec.entry(entry)?.body_of::<ResultBody>()?.clone();
                return Ok(Err((entry, Box::new(existing))));
            }
            Ok(Ok(crate::recorder::canonical(&entries)?))
        })
        .await;
        let fenced = match checked {
            Ok(Err((entry, existing))) => Fenced::AlreadyRecorded(entry, existing),
            Ok(Ok(bytes)) => match ending.sequence(&bytes).await {
                Ok(first) => Fenced::Appended(first + bytes.len() as u64 - 1, bytes),
                Err(e) => {
                    let _ = ending.rollback().await;
                    return Err(e.into());
                }
            },
            Err(e) => {
                // Nothing changes in the queue: the job stays this worker's until it retries or
                // its lease runs out.
                let _ = ending.rollback().await;
                return Err(e);
            }
        };
        Ok(Some((fenced, ending)))
    }

    /// Commits the job's end in the queue together with the entries [`Worker::record_fenced`]
    /// sequenced in it (leasing the next job in the same commit inside [`Worker::serve`]), then
    /// publishes them; returns the index of the entry that ends the job, and why it is not in
    /// the log yet when publishing failed (see [`Finished::unpublished`]).
    ///
    /// A commit whose outcome is unknown (the database went away) is found out: the job is
    /// taken again and ended, sequencing the entries again, since a failed commit took them
    /// with it. When the job can no longer be taken (it ended, or its lease ran out meanwhile),
    /// the sequencer says whether the first commit applied: it did when it holds these very
    /// entries at their indices. When it did not, nothing of this job's end is on the record
    /// and it is an error, never a claimed entry: the job stays with its lease, for this worker
    /// or the next, to end again.
    async fn end_in_queue(
        &self,
        job: &Job,
        held: Ending,
        fenced: &Fenced,
        status: RunStatus,
        reason: Option<&str>,
    ) -> Result<(u64, Option<String>), LabError> {
        let lease = self.opts.settings.lease();
        let (last, pending): (u64, &[Vec<u8>]) = match fenced {
            Fenced::Appended(last, bytes) => (*last, bytes),
            Fenced::AlreadyRecorded(entry, _) => (*entry, &[]),
        };
        let mut first_error = None;
        let finish = match self.finish_ending(held, status, reason).await {
            Err(e) if e.is_transient() => {
                first_error = Some(e.to_string());
                retry_db(lease, || async {
                    let mut ending = self.queue.begin_ending(job.id, &self.opts.id).await?;
                    let again = if pending.is_empty() {
                        last
                    } else {
                        ending.sequence(pending).await? + pending.len() as u64 - 1
                    };
                    self.finish_ending(ending, status, reason).await?;
                    Ok(again)
                })
                .await
            }
            Ok(()) => Ok(last),
            Err(e) => Err(e),
        };
        let last = match finish {
            Ok(l) => l,
            Err(QueueError::LeaseLost { .. }) if pending.is_empty() => {
                // Nothing new was to be recorded: the run's result is the earlier entry.
                tracing::warn!(job = %job.id, "lease lost while ending the job in the queue");
                return Ok((last, None));
            }
            Err(QueueError::LeaseLost { .. }) => {
                let first = last + 1 - pending.len() as u64;
                let rec = self.recorder.clone();
                let entries = pending.to_vec();
                if blocking(move || rec.is_sequenced(first, &entries)).await? {
                    last
                } else {
                    return Err(LabError::Task(format!(
                        "could not record the end of job {} ({}): {}; nothing of it is on the record, and the job is left to end again once its lease runs out",
                        job.id,
                        status,
                        first_error.unwrap_or_else(|| "the job was no longer this worker's".into())
                    )));
                }
            }
            Err(e) => return Err(e.into()),
        };
        if pending.is_empty() {
            return Ok((last, None));
        }
        let rec = self.recorder.clone();
        match blocking(move || rec.publish(last)).await {
            Ok(()) => Ok((last, None)),
            Err(e) => {
                // The end is on its way to the record (sequenced, committed with the job's
                // end); the next integrator publishes it, before `serve` announces it.
                tracing::warn!(job = %job.id, entry = last, error = %e, "the job's end is sequenced but not yet in the log");
                Ok((last, Some(e.to_string())))
            }
        }
    }
}

impl Worker {
    /// A reproduction job: re-runs the run it names on this worker's CPU threads, under the
    /// lab's wall-clock limit, cancellable like a run (a cancel arrives with a heartbeat or
    /// through [`CancelSwitches`]), and ends with a `reproduction` entry.
    async fn reproduce(&self, job: Job, log: Arc<RunLog>) -> Result<JobEnd, LabError> {
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
    async fn conclude_reproduction(
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
            self.after_sweep_child(job).await;
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

    /// Commits a held [`Ending`] (with the next lease inside [`Worker::serve`]).
    async fn finish_ending(
        &self,
        ending: Ending,
        status: RunStatus,
        reason: Option<&str>,
    ) -> Result<(), QueueError> {
        if self.chaining.load(Ordering::SeqCst) {
            let next = ending
                .finish_and_lease(status, reason, self.opts.settings.lease())
                .await?;
            *self.next.lock().unwrap_or_else(|e| e.into_inner()) = next;
            Ok(())
        } else {
            ending.finish(status, reason).await
        }
    }
}

/// What a fenced append did.
enum Fenced {
    /// The entries were sequenced in the held ending; the last one's index, and their bytes.
    Appended(u64, Vec<Vec<u8>>),
    /// The run already had this `result` entry; nothing was appended.
    AlreadyRecorded(u64, Box<ResultBody>),
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

/// The newest forecast registered for a spec hash (by the proposer's form or a ladder).
pub async fn registered_forecast(
    queue: &Queue,
    spec_hash: &SpecHash,
) -> Result<Option<Forecast>, LabError> {
    crate::db::forecasts::newest_for(queue.db().pool(), spec_hash).await
}

/// Forecast against outcome: a hit when the metric exists and is within the tolerance.
pub fn compare_forecast(f: &Forecast, metrics: &BTreeMap<String, f64>) -> ForecastOutcome {
    ForecastOutcome::settle(
        &f.metric,
        f.value,
        f.tolerance,
        metrics.get(&f.metric).copied(),
    )
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
