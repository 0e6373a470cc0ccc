//! Ending a job on the record, on one path for every ending: the `result` (or a
//! reproduction's entry) with the run's log beside it, sequenced in the transaction that ends
//! the job in the queue, fenced by [`Queue::begin_ending`]; then published, then announced.
//!
//! Not here: what the lab decides after a job ended (`crate::flow::after_run`).

use crate::error::LabError;
use crate::outbox::{self, Notice};
use crate::queue::{Ending, Job, QueueError};
use crate::recorder::one_ref;
use glassbox_schemas::record::{ArtifactBody, ResultBody};
use glassbox_schemas::record::{EntryBody, RunEnding};
use glassbox_schemas::{Blake3Hash, ExperimentSpec, LedgerEntry, RunId, RunStatus};
use glassbox_schemas::{RefRole, RunPhase};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use super::*;
use crate::flow::after_run;
use crate::forecast;

/// What a fenced append did.
pub(super) enum Fenced {
    /// The entries were sequenced in the held ending; the last one's index, and their bytes.
    Appended(u64, Vec<Vec<u8>>),
    /// The run already had this `result` entry; nothing was appended.
    AlreadyRecorded(u64, Box<ResultBody>),
}

impl Worker {
    /// Records a job that ends before training (bad spec, missing approval, missing corpus):
    /// it is still a `failed` result on the record.
    pub(super) async fn conclude_early(
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
    pub(super) async fn conclude(
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
            sample,
        } = outcome;
        ending.final_metrics.retain(|_, v| v.is_finite());
        let mut forecast = match spec.and_then(|s| s.forecast.clone()) {
            Some(f) => Some(f),
            None => forecast::registered(&self.queue, &job.spec_hash).await?,
        }
        // A forecast of an evaluation's metric is settled by that evaluation's entry.
        .filter(|f| glassbox_schemas::eval::parse_metric_name(&f.metric).is_none())
        .map(|f| forecast::settle(&f, &ending.final_metrics));
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
            sample,
        };
        self.announce_notice(job, &notice).await?;
        if let Some(live) = &self.live {
            live.status(&job.experiment, run, RunPhase::Ended(ending.status));
        }
        let newly = matches!(recorded, Fenced::Appended(..)).then_some((run, &ending));
        self.after_end(job, newly).await;
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
    pub(super) async fn announce_notice(&self, job: &Job, notice: &Notice) -> Result<(), LabError> {
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

    /// The run's log as a blob with its `artifact` entry, followed by the entry that ends the
    /// job (`refs`, `body`): what [`Worker::record_fenced`] appends together. A log that cannot
    /// be stored is left out (with a warning) rather than holding up the ending.
    pub(super) fn log_and(
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
                one_ref(RefRole::Artifact, &hash),
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
    pub(super) async fn record_fenced(
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
    pub(super) async fn end_in_queue(
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

    /// Commits a held [`Ending`] (with the next lease inside [`Worker::serve`]).
    pub(super) async fn finish_ending(
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

    /// Hands the ended job to the lab's decisions (`crate::flow::after_run`), with the run when
    /// this ending newly recorded its `result`.
    pub(super) async fn after_end(&self, job: &Job, run: Option<(&RunId, &RunEnding)>) {
        let policies = after_run::Policies {
            reproduce: &self.opts.reproduce,
            leaderboards: &self.opts.leaderboards,
        };
        let origin = after_run::Origin {
            worker: &self.opts.id,
            host: &self.opts.host,
            max_attempts: self.opts.limits.max_attempts,
        };
        let ended = after_run::Ended { job, run };
        after_run::job_ended(&self.queue, &self.recorder, policies, origin, ended).await;
    }
}
