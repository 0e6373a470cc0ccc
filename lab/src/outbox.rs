//! The notification outbox: what the lab has to tell people (a run started, a run ended),
//! written to the queue database in the same place the worker records the job's end, and
//! delivered to the bot by the server. A worker on another machine, or one that dies right
//! after a run, still gets its result announced: the notice waits in the table until a server
//! delivers it and marks it delivered. Every notice is written after the ledger entry it
//! announces, so nothing is announced that is not on the record.

use std::collections::BTreeMap;

use glassbox_schemas::record::ForecastOutcome;
use glassbox_schemas::{ExperimentId, RunId, RunStatus, SpecHash};
use serde::{Deserialize, Serialize};
use sqlx::Row;

use crate::error::LabError;
use crate::queue::Queue;

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
        /// How it ended.
        status: RunStatus,
        /// Final metrics.
        final_metrics: BTreeMap<String, f64>,
        /// Forecast against outcome.
        forecast: Option<ForecastOutcome>,
        /// Why, for anything but success.
        reason: Option<String>,
        /// The `result` entry.
        entry: u64,
    },
}

impl Notice {
    /// The experiment it is about.
    pub fn experiment(&self) -> &ExperimentId {
        match self {
            Notice::RunStarted { experiment, .. } | Notice::Finished { experiment, .. } => {
                experiment
            }
        }
    }
}

/// Adds a notice to the outbox.
pub async fn push(queue: &Queue, notice: &Notice) -> Result<(), LabError> {
    let json = serde_json::to_string(notice)
        .map_err(|e| LabError::Task(format!("cannot encode notice: {e}")))?;
    sqlx::query("INSERT INTO notifications (experiment, event, created_at) VALUES ($1, $2, $3)")
        .bind(notice.experiment().0.clone())
        .bind(json)
        .bind(queue.clock().now_ms())
        .execute(queue.pool())
        .await?;
    Ok(())
}

/// Undelivered notices, oldest first, at most `limit`.
pub async fn pending(queue: &Queue, limit: u32) -> Result<Vec<(i64, Notice)>, LabError> {
    let rows = sqlx::query(
        "SELECT id, event FROM notifications WHERE delivered_at IS NULL ORDER BY id LIMIT $1",
    )
    .bind(i64::from(limit))
    .fetch_all(queue.pool())
    .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let id: i64 = r.try_get("id")?;
        let text: String = r.try_get("event")?;
        let notice = serde_json::from_str(&text)
            .map_err(|e| LabError::Task(format!("notification {id} does not decode: {e}")))?;
        out.push((id, notice));
    }
    Ok(out)
}

/// Marks a notice delivered.
pub async fn delivered(queue: &Queue, id: i64) -> Result<(), LabError> {
    sqlx::query("UPDATE notifications SET delivered_at = $1 WHERE id = $2")
        .bind(queue.clock().now_ms())
        .bind(id)
        .execute(queue.pool())
        .await?;
    Ok(())
}
