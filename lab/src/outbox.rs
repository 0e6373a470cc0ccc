//! The notification outbox: what the lab has to tell people (a run started, a run ended, a
//! running run needs a look),
//! written to the queue database in the same place the worker records the job's end, and
//! delivered to the bot by the server. A worker on another machine, or one that dies right
//! after a run, still gets its result announced: the notice waits in the table until a server
//! delivers it and marks it delivered. Every notice is written after the ledger entry it
//! announces, so nothing is announced that is not on the record.
//!
//! Notices of different experiments are independent: one that fails is retried later
//! ([`retry_later`], an exponential backoff from [`RETRY_BASE`] up to [`RETRY_MAX`]) while the
//! others go out; one experiment's notices stay in order ([`due`]); one that cannot succeed
//! (GitHub refused it) is given up with the error ([`give_up`]). Delivering twice is
//! harmless (the bot finds its comments by marker), so a crash after a delivery and before
//! [`delivered`] repeats nothing people see.
//!
//! The rows are [`crate::db::notifications`]'s; this module holds what they mean.

use std::time::Duration;

use crate::db::notifications::{self, StoredNotice};
use crate::error::LabError;
use crate::queue::Queue;
use glassbox_schemas::record::{Anomaly, ForecastOutcome, RunEnding};
use glassbox_schemas::{ExperimentId, RunId, SpecHash};
use serde::{Deserialize, Serialize};

/// First wait before a failed notice is tried again; it doubles per attempt.
pub const RETRY_BASE: Duration = Duration::from_secs(2);

/// Longest wait between two attempts of a notice.
pub const RETRY_MAX: Duration = Duration::from_secs(3600);

/// The wait before attempt `attempts + 1` of a notice that failed `attempts` times (>= 1).
pub fn retry_delay(attempts: u32) -> Duration {
    RETRY_BASE
        .saturating_mul(1u32 << attempts.saturating_sub(1).min(20))
        .min(RETRY_MAX)
}

/// How delivering one notice went (see [`crate::flow::Flow::deliver_notices`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoticeDelivery {
    /// The bot took it.
    Delivered,
    /// It failed in a way that may pass (GitHub 5xx, rate limit, network): try again later.
    Retry(String),
    /// It cannot succeed (GitHub refused it): do not try again.
    GiveUp(String),
}

impl From<bool> for NoticeDelivery {
    fn from(delivered: bool) -> Self {
        if delivered {
            NoticeDelivery::Delivered
        } else {
            NoticeDelivery::Retry("the bot did not take the notice".into())
        }
    }
}

/// An undelivered notice and its attempts so far.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    /// Its row id.
    pub id: i64,
    /// What to announce.
    pub notice: Notice,
    /// Failed attempts so far.
    pub attempts: u32,
}

/// One thing to announce.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "notice", rename_all = "snake_case")]
pub enum Notice {
    /// A worker started (or resumed) a run.
    RunStarted {
        /// The experiment.
        experiment: ExperimentId,
        /// The run.
        run: RunId,
        /// The spec it trains.
        spec_hash: SpecHash,
        /// The `run_started` entry.
        entry: u64,
    },
    /// A run ended, whatever the ending.
    Finished {
        /// The experiment.
        experiment: ExperimentId,
        /// The run.
        run: RunId,
        /// How it ended (flat in the stored notice: `status`, `steps`, ...).
        #[serde(flatten)]
        ending: RunEnding,
        /// Forecast against outcome.
        forecast: Option<ForecastOutcome>,
        /// The `result` entry.
        entry: u64,
        /// What the model wrote at its last snapshot, when the spec asked for samples.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sample: Option<glassbox_github_bot::port::QuotedSample>,
    },
    /// A running run needs a look (raised once per run and kind, `db::alerts`).
    Alert {
        /// The experiment.
        experiment: ExperimentId,
        /// The run.
        run: RunId,
        /// What happened.
        alert: AlertNotice,
    },
    /// A reproduction of a run ended (a mismatch is a negative result, announced like one).
    Reproduced {
        /// The experiment.
        experiment: ExperimentId,
        /// The run re-run.
        run: RunId,
        /// `reproduced`, `differs`, `failed` or `cancelled`.
        outcome: String,
        /// The first difference, or why it could not finish.
        detail: Option<String>,
        /// Bitwise or within tolerances.
        comparison: Option<glassbox_schemas::record::Comparison>,
        /// The worker that re-ran it.
        worker: String,
        /// Queued by the lab's `[reproduce]` policy.
        automatic: bool,
        /// The `reproduction` entry.
        entry: u64,
    },
    /// An evaluation someone asked for (`/evaluate`) ended.
    Evaluated {
        /// The experiment.
        experiment: ExperimentId,
        /// The run evaluated.
        run: RunId,
        /// The result in one line (suite, step, headline metric).
        headline: String,
        /// How it ended.
        outcome: glassbox_schemas::record::EvalOutcome,
        /// The suite's contamination fraction, when it was checked.
        contamination: Option<f64>,
        /// The `evaluation` entry.
        entry: u64,
    },
    /// A sweep's promotion gate was decided.
    Gate {
        /// The sweep's experiment.
        experiment: ExperimentId,
        /// Passed or failed.
        outcome: glassbox_schemas::record::GateOutcome,
        /// The numbers, in one sentence.
        detail: String,
        /// The `gate` entry.
        entry: u64,
    },
}

/// What an [`Notice::Alert`] is about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "alert", rename_all = "snake_case")]
pub enum AlertNotice {
    /// The run's first anomaly.
    Anomaly {
        /// What was flagged.
        anomaly: Anomaly,
        /// Its `anomaly` entry.
        entry: u64,
    },
    /// The run has not stepped for many median step times.
    Stalled {
        /// The last step finished.
        last_step: u64,
        /// Milliseconds since.
        silent_ms: i64,
        /// The median step time in milliseconds.
        median_step_ms: i64,
    },
}

impl AlertNotice {
    /// The alert's kind (`anomaly`, `stalled`): at most one per run.
    pub fn kind(&self) -> &'static str {
        match self {
            AlertNotice::Anomaly { .. } => "anomaly",
            AlertNotice::Stalled { .. } => "stalled",
        }
    }
}

impl Notice {
    /// The experiment it is about.
    pub fn experiment(&self) -> &ExperimentId {
        match self {
            Notice::RunStarted { experiment, .. }
            | Notice::Finished { experiment, .. }
            | Notice::Alert { experiment, .. }
            | Notice::Reproduced { experiment, .. }
            | Notice::Evaluated { experiment, .. }
            | Notice::Gate { experiment, .. } => experiment,
        }
    }
}

/// Raises `alert` for `run` unless the run already had one of its kind, and adds its notice to
/// the outbox; returns whether it was raised now.
pub async fn raise_alert(
    queue: &Queue,
    experiment: &ExperimentId,
    run: &RunId,
    alert: AlertNotice,
) -> Result<bool, LabError> {
    let db = queue.db();
    let raised =
        crate::db::alerts::raise_once(db.pool(), &run.0, alert.kind(), &experiment.0, db.now_ms())
            .await?;
    if raised {
        push(
            queue,
            &Notice::Alert {
                experiment: experiment.clone(),
                run: run.clone(),
                alert,
            },
        )
        .await?;
    }
    Ok(raised)
}

/// Clears `run`'s alert of `kind` (a stalled run stepped again): no longer current for the
/// gauge, and still never raised twice.
pub async fn clear_alert(queue: &Queue, run: &RunId, kind: &str) -> Result<(), LabError> {
    let db = queue.db();
    crate::db::alerts::clear(db.pool(), &run.0, kind, db.now_ms()).await
}

/// Adds a notice to the outbox.
pub async fn push(queue: &Queue, notice: &Notice) -> Result<(), LabError> {
    let json = serde_json::to_string(notice)
        .map_err(|e| LabError::Task(format!("cannot encode notice: {e}")))?;
    let db = queue.db();
    notifications::insert(db.pool(), &notice.experiment().0, &json, db.now_ms()).await
}

/// Undelivered notices (those waiting to be retried included, those given up not), oldest
/// first, at most `limit`.
pub async fn pending(queue: &Queue, limit: u32) -> Result<Vec<(i64, Notice)>, LabError> {
    let rows = notifications::undelivered(queue.db().pool(), limit).await?;
    Ok(decode(rows)?
        .into_iter()
        .map(|p| (p.id, p.notice))
        .collect())
}

/// Undelivered notices whose next attempt is due now, oldest first, at most `limit`. A notice
/// waits while an older one of the same experiment waits for its retry, so one experiment's
/// notices are announced in order (a late "run started" never follows its result); the caller
/// stops an experiment's notices at the first that fails.
pub async fn due(queue: &Queue, limit: u32) -> Result<Vec<Pending>, LabError> {
    let db = queue.db();
    decode(notifications::due(db.pool(), db.now_ms(), limit).await?)
}

fn decode(rows: Vec<StoredNotice>) -> Result<Vec<Pending>, LabError> {
    rows.into_iter()
        .map(|r| {
            let notice = serde_json::from_str(&r.event).map_err(|e| {
                LabError::Task(format!("notification {} does not decode: {e}", r.id))
            })?;
            Ok(Pending {
                id: r.id,
                notice,
                attempts: r.attempts,
            })
        })
        .collect()
}

/// Records a failed attempt: the notice is tried again after [`retry_delay`] of its attempts.
pub async fn retry_later(queue: &Queue, id: i64, error: &str) -> Result<Duration, LabError> {
    let db = queue.db();
    let attempts = notifications::attempts(db.pool(), id)
        .await?
        .saturating_add(1);
    let wait = retry_delay(attempts);
    let next_at = db.now_ms() + wait.as_millis() as i64;
    notifications::set_retry(db.pool(), id, attempts, next_at, error).await?;
    Ok(wait)
}

/// Gives a notice up: it is not tried again; `error` says why.
pub async fn give_up(queue: &Queue, id: i64, error: &str) -> Result<(), LabError> {
    let db = queue.db();
    notifications::set_given_up(db.pool(), id, error, db.now_ms()).await
}

/// Marks a notice delivered.
pub async fn delivered(queue: &Queue, id: i64) -> Result<(), LabError> {
    let db = queue.db();
    notifications::set_delivered(db.pool(), id, db.now_ms()).await
}
