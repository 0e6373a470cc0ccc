//! Putting a run on the record while it trains, off the training thread.
//!
//! The runner calls its [`Observer`] on the training thread, between steps. Everything durable
//! — a metric chunk's blob and `artifact` entry, a checkpoint's blob, `checkpoint` entry and
//! queue pointer — waits for fsyncs, so doing it there would stall training on the disk. The
//! [`RecordingObserver`] only buffers metrics and hands finished chunks and checkpoint files
//! to a recording thread ([`spawn`]) through a bounded channel, in order; training goes on
//! while they are written. The channel's bound keeps memory flat if the disk falls behind
//! (training then waits, as it did before).
//!
//! Order is kept: a checkpoint is recorded after every chunk before it, so a worker that
//! resumes from the queue's checkpoint finds the metrics up to that step on the record. The
//! first failure cancels the run (it ends `failed` with the reason) and later work is skipped.
//!
//! Anomalies the runner's detector flags take the same path: each becomes an `anomaly` entry
//! (with a warning in the run's log), is counted for `/metrics`, and the run's first raises
//! an alert in the outbox. Each train step also tells the run's [`StallWatch`] when it ended.
//!
//! This module does not decide what a run's result is; [`super::Worker`] does, after
//! [`Recording::finish`] has drained the thread.

use glassbox_schemas::RefRole;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use glassbox_runner::observer::{Anomaly, MetricRecord, Observer, RecordKind, SampleSet};
use glassbox_runner::progress::ProgressLines;
use glassbox_runner::text::TextCodec;
use glassbox_runner::train::RunOutcome;
use glassbox_schemas::record::{AnomalyBody, ArtifactBody, SamplesBody, SnapshotBody};
use glassbox_schemas::{BlobHash, ExperimentId, RunId};
use tokio::runtime::Handle;

use super::{LiveSink, RunLog, retry_db};
use crate::error::LabError;
use crate::outbox::{self, AlertNotice};
use crate::queue::{JobId, Queue, QueueError, WorkerId};
use crate::recorder::{Recorder, one_ref};
use crate::stall::StallWatch;

/// Finished chunks and checkpoints waiting for the recording thread before training waits.
const BACKLOG: usize = 16;

/// What the training thread hands over.
enum Work {
    /// Buffered metric records, stored as one JSON-lines blob with an `artifact` entry.
    Chunk(Vec<MetricRecord>),
    /// A training snapshot the runner wrote (moved into the store, so it is gone afterwards).
    Snapshot { step: u64, path: PathBuf },
    /// Something the anomaly detector flagged.
    Anomaly(Anomaly),
    /// The spec's `[samples]` at a snapshot.
    Samples(SampleSet),
}

/// Who and what a run's records belong to.
pub(super) struct RunContext {
    pub recorder: Arc<Recorder>,
    pub queue: Queue,
    pub handle: Handle,
    pub job: JobId,
    pub worker: WorkerId,
    pub experiment: ExperimentId,
    pub run: RunId,
    /// The job's attempt this run is (from 1), which names its metric chunks.
    pub attempt: u32,
    /// Set on the first failure so the trainer stops at its next step.
    pub cancel: Arc<AtomicBool>,
    /// How long to ride out a database outage.
    pub lease: std::time::Duration,
    /// The run's own log (anomalies are warned there).
    pub log: Arc<RunLog>,
    /// The run's tokenizer, when the spec asks for `[samples]` (they are stored as text).
    pub codec: Option<Arc<TextCodec>>,
    /// The eval jobs to queue for each snapshot (`[evals]`), if any.
    pub evals: Option<super::evaluation::EvalPlan>,
}

/// What the recording thread leaves behind.
pub(super) struct Recording {
    /// The first recording failure, if any.
    pub error: Option<LabError>,
    /// The last checkpoint stored and pointed to in the queue.
    pub last_snapshot: Option<BlobHash>,
    /// The last samples' completion of the first prompt.
    pub last_sample: Option<glassbox_github_bot::port::QuotedSample>,
}

/// Starts the recording thread for one run; returns the observer to train with and the
/// thread's handle.
pub(super) fn spawn(
    ctx: RunContext,
    flush_steps: u64,
    live: Option<Arc<dyn LiveSink>>,
    stall: StallWatch,
) -> Result<(RecordingObserver, RecordingThread), LabError> {
    let (tx, rx) = sync_channel(BACKLOG);
    let observer = RecordingObserver {
        stall,
        experiment: ctx.experiment.clone(),
        run: ctx.run.clone(),
        live: live.clone(),
        chunk: Vec::new(),
        chunk_train_steps: 0,
        flush_steps: flush_steps.max(1),
        to_thread: Some(tx),
        log: ctx.log.clone(),
        lines: None,
    };
    let thread = std::thread::Builder::new()
        .name(format!("record-{}", ctx.run))
        .spawn(move || record_all(ctx, rx, live))
        .map_err(|e| LabError::Task(format!("cannot start the recording thread: {e}")))?;
    Ok((observer, RecordingThread(thread)))
}

/// The recording thread of one run.
pub(super) struct RecordingThread(std::thread::JoinHandle<Recording>);

impl RecordingThread {
    /// Waits until everything handed over is recorded (call after dropping the observer, which
    /// closes the channel). Blocks: call from a blocking context.
    pub fn finish(self) -> Recording {
        self.0.join().unwrap_or_else(|_| Recording {
            error: Some(LabError::Task("the recording thread panicked".into())),
            last_snapshot: None,
            last_sample: None,
        })
    }
}

/// The observer the trainer calls: buffers metrics and hands work to the recording thread.
pub(super) struct RecordingObserver {
    stall: StallWatch,
    experiment: ExperimentId,
    run: RunId,
    live: Option<Arc<dyn LiveSink>>,
    chunk: Vec<MetricRecord>,
    chunk_train_steps: u64,
    flush_steps: u64,
    /// `None` once the recording thread has gone away (it failed and stopped listening).
    to_thread: Option<SyncSender<Work>>,
    /// The run's log, which gets the progress and evaluation lines.
    log: Arc<RunLog>,
    lines: Option<ProgressLines>,
}

impl RecordingObserver {
    fn hand_over(&mut self, work: Work) {
        if let Some(tx) = &self.to_thread
            && tx.send(work).is_err()
        {
            // The thread has ended (a panic); `Recording::finish` reports it.
            self.to_thread = None;
        }
    }

    fn flush(&mut self) {
        if !self.chunk.is_empty() {
            let records = std::mem::take(&mut self.chunk);
            self.chunk_train_steps = 0;
            self.hand_over(Work::Chunk(records));
        }
    }
}

impl Observer for RecordingObserver {
    fn on_start(&mut self, step: u64, total: u64, _info: &glassbox_runner::observer::RunInfo) {
        self.lines = Some(ProgressLines::new(step, total));
    }

    fn on_metrics(&mut self, record: &MetricRecord) {
        if let Some(live) = &self.live {
            live.metrics(&self.experiment, &self.run, record);
        }
        if let Some(line) = self.lines.as_ref().and_then(|p| p.line(record)) {
            self.log.info(line);
        }
        self.chunk.push(record.clone());
        if record.kind == RecordKind::Train {
            self.stall.stepped(record.step);
            self.chunk_train_steps += 1;
            if self.chunk_train_steps >= self.flush_steps {
                self.flush();
            }
        }
    }

    fn on_anomaly(&mut self, anomaly: &Anomaly) {
        self.hand_over(Work::Anomaly(anomaly.clone()));
    }

    fn on_snapshot(&mut self, step: u64, path: &std::path::Path) {
        self.flush();
        self.hand_over(Work::Snapshot {
            step,
            path: path.to_path_buf(),
        });
    }

    fn on_samples(&mut self, samples: &SampleSet) {
        self.hand_over(Work::Samples(samples.clone()));
    }

    fn on_end(&mut self, _outcome: &RunOutcome) {
        self.flush();
    }
}

/// The recording thread's loop: every piece of work in order until the observer is dropped.
fn record_all(ctx: RunContext, rx: Receiver<Work>, live: Option<Arc<dyn LiveSink>>) -> Recording {
    let mut state = Recording {
        error: None,
        last_snapshot: None,
        last_sample: None,
    };
    for work in rx {
        if state.error.is_some() {
            continue;
        }
        let done = match work {
            Work::Chunk(records) => {
                store_chunk(&ctx, &records).and_then(|()| store_log_chunk(&ctx))
            }
            Work::Snapshot { step, path } => store_snapshot(&ctx, &mut state, step, &path),
            Work::Anomaly(anomaly) => store_anomaly(&ctx, anomaly),
            Work::Samples(set) => store_samples(&ctx, &mut state, &set, live.as_deref()),
        };
        if let Err(e) = done {
            tracing::error!(run = %ctx.run, error = %e, "recording failed; stopping the run");
            state.error = Some(e);
            ctx.cancel.store(true, Ordering::SeqCst);
        }
    }
    state
}

/// A metric chunk as a JSON-lines blob with an `artifact` entry naming its steps.
fn store_chunk(ctx: &RunContext, records: &[MetricRecord]) -> Result<(), LabError> {
    let mut text = String::new();
    for r in records {
        let line =
            serde_json::to_string(r).map_err(|e| LabError::Task(format!("metric record: {e}")))?;
        text.push_str(&line);
        text.push('\n');
    }
    let first = records.first().map_or(0, |r| r.step);
    let last = records.last().map_or(0, |r| r.step);
    let hash = ctx.recorder.put_bytes(text.as_bytes())?;
    let body = ArtifactBody {
        // The attempt is in the name: a retried job re-records the steps after its last
        // snapshot, and those chunks are other blobs than the killed attempt's.
        name: format!(
            "metrics/{}/attempt-{}/steps-{first:08}-{last:08}.jsonl",
            ctx.run, ctx.attempt
        ),
        bytes: text.len() as u64,
        run: Some(ctx.run.clone()),
    };
    ctx.recorder.record(
        Some(&ctx.experiment),
        one_ref(RefRole::Metrics, &hash),
        body,
    )?;
    Ok(())
}

/// The run's log lines written since its last chunk, as a blob with an `artifact` entry
/// (`logs/<run>/attempt-<n>/lines-<first>-<last>.log`), so the log is on the record as the run
/// goes; the whole log is stored again when the attempt ends.
fn store_log_chunk(ctx: &RunContext) -> Result<(), LabError> {
    let Some(chunk) = ctx.log.take_chunk() else {
        return Ok(());
    };
    let hash = ctx.recorder.put_bytes(chunk.text.as_bytes())?;
    let body = ArtifactBody {
        name: format!(
            "logs/{}/attempt-{}/lines-{:06}-{:06}.log",
            ctx.run, ctx.attempt, chunk.first_line, chunk.last_line
        ),
        bytes: chunk.text.len() as u64,
        run: Some(ctx.run.clone()),
    };
    ctx.recorder.record(
        Some(&ctx.experiment),
        one_ref(RefRole::Artifact, &hash),
        body,
    )?;
    Ok(())
}

/// An anomaly: a warning in the run's log, an `anomaly` entry, its count, and, for the run's
/// first, an alert.
fn store_anomaly(ctx: &RunContext, anomaly: Anomaly) -> Result<(), LabError> {
    ctx.log.warn(format!("anomaly: {}", anomaly.message()));
    let body = AnomalyBody {
        run: ctx.run.clone(),
        anomaly,
    };
    let entry = ctx
        .recorder
        .record(Some(&ctx.experiment), Default::default(), body.clone())?;
    let db = ctx.queue.db();
    ctx.handle.block_on(async {
        crate::db::alerts::count_anomaly(
            db.pool(),
            entry,
            &ctx.run.0,
            body.anomaly.kind.as_str(),
            body.anomaly.step,
            db.now_ms(),
        )
        .await?;
        let alert = AlertNotice::Anomaly {
            anomaly: body.anomaly.clone(),
            entry,
        };
        outbox::raise_alert(&ctx.queue, &ctx.experiment, &ctx.run, alert).await
    })?;
    Ok(())
}

/// Completions at a snapshot: their text (with the token ids) as a JSON blob, and a `samples`
/// entry naming the snapshot, the settings, the prompts and the texts; then, the entry being in
/// the log, the same to the live sink (so a page never shows what the record does not hold).
fn store_samples(
    ctx: &RunContext,
    state: &mut Recording,
    set: &SampleSet,
    live: Option<&dyn LiveSink>,
) -> Result<(), LabError> {
    let Some(codec) = &ctx.codec else {
        return Err(LabError::Task("samples without the run's tokenizer".into()));
    };
    let text = |ids: &[u32]| codec.decode(ids).map(|d| d.text);
    let mut prompts = Vec::with_capacity(set.items.len());
    let mut texts = Vec::with_capacity(set.items.len());
    for (p, c) in &set.items {
        prompts.push(text(p)?);
        texts.push(text(c)?);
    }
    state.last_sample =
        prompts
            .first()
            .zip(texts.first())
            .map(|(p, t)| glassbox_github_bot::port::QuotedSample {
                step: set.step,
                prompt: p.clone(),
                text: t.clone(),
            });
    let body = SamplesBody {
        run: ctx.run.clone(),
        step: set.step,
        snapshot: state.last_snapshot,
        max_tokens: set.max_tokens,
        temperature: set.temperature,
        seed: set.seed,
        prompts,
        texts,
    };
    let blob = serde_json::json!({
        "body": &body,
        "prompt_ids": set.items.iter().map(|(p, _)| p).collect::<Vec<_>>(),
        "completion_ids": set.items.iter().map(|(_, c)| c).collect::<Vec<_>>(),
    });
    let bytes = serde_json::to_vec(&blob).map_err(|e| LabError::Task(e.to_string()))?;
    let hash = ctx.recorder.put_bytes(&bytes)?;
    let entry = ctx.recorder.record(
        Some(&ctx.experiment),
        one_ref(RefRole::Artifact, &hash),
        body.clone(),
    )?;
    if let Some(live) = live {
        live.samples(
            &ctx.experiment,
            &ctx.run,
            super::RecordedSamples {
                entry,
                samples: &body,
            },
        );
    }
    Ok(())
}

/// A checkpoint: its file moved into the store, a `checkpoint` entry, then the queue's pointer
/// (so a worker that takes over resumes from it).
fn store_snapshot(
    ctx: &RunContext,
    state: &mut Recording,
    step: u64,
    path: &std::path::Path,
) -> Result<(), LabError> {
    // The checkpoint file is scratch (the runner never reads it back), and scratch sits in
    // the lab beside `blobs/`: moving it in stores it without a second write.
    let (hash, _) = ctx.recorder.put_moved(path)?;
    ctx.recorder.record(
        Some(&ctx.experiment),
        one_ref(RefRole::Checkpoint, &hash),
        SnapshotBody {
            run: ctx.run.clone(),
            step,
        },
    )?;
    let told = ctx.handle.block_on(retry_db(ctx.lease, || {
        ctx.queue.record_snapshot(ctx.job, &ctx.worker, step, &hash)
    }));
    match told {
        Ok(()) => {
            state.last_snapshot = Some(hash);
            if let Some(plan) = &ctx.evals {
                ctx.handle.block_on(super::evaluation::queue_snapshot_evals(
                    &ctx.queue,
                    &ctx.recorder,
                    plan,
                    &ctx.run,
                    step,
                    &hash,
                    &ctx.log,
                ));
            }
        }
        // Lost the lease: the heartbeat notices too and the run stops.
        Err(QueueError::LeaseLost { .. }) => ctx.cancel.store(true, Ordering::SeqCst),
        Err(e) => return Err(e.into()),
    }
    Ok(())
}
