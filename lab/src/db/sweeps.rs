//! The `sweeps` table (one row per sweep, keyed by its experiment): the sweep file's hash now
//! current, its `sweep` entry's body as JSON, the approval of the set in force, and the gate's
//! decision (claimed once, so two workers ending the last two children record one `gate`
//! entry).
//!
//! Not here: what an edit or an approval of a sweep means ([`crate::flow::sweep`] decides).

use glassbox_schemas::record::SweepBody;
use glassbox_schemas::{ExperimentId, SpecHash};
use sqlx::{Any, Executor, Row};

use crate::error::LabError;

/// A sweep's row.
#[derive(Debug, Clone)]
pub(crate) struct SweepRow {
    /// The sweep file's hash now current.
    pub parent_hash: SpecHash,
    /// Its `sweep` entry's body.
    pub body: SweepBody,
    /// The `sweep` entry.
    pub entry: u64,
    /// The hash the set's approval is bound to, while it is in force.
    pub approved_hash: Option<SpecHash>,
    /// The `gate` entry, once decided.
    pub gate_entry: Option<u64>,
}

/// The sweep of `experiment`, if one was proposed there.
pub(crate) async fn get<'e>(
    db: impl Executor<'e, Database = Any>,
    experiment: &ExperimentId,
) -> Result<Option<SweepRow>, LabError> {
    let row = sqlx::query(
        "SELECT parent_hash, body, entry, approved_hash, gate_entry FROM sweeps \
         WHERE experiment = $1",
    )
    .bind(experiment.0.clone())
    .fetch_optional(db)
    .await?;
    let Some(r) = row else { return Ok(None) };
    let corrupt = |what: &str, e: String| {
        LabError::Refused(format!(
            "the stored sweep {experiment} has a bad {what}: {e}"
        ))
    };
    let parent_hash: String = r.try_get("parent_hash")?;
    let body: String = r.try_get("body")?;
    Ok(Some(SweepRow {
        parent_hash: parent_hash
            .parse()
            .map_err(|e| corrupt("hash", format!("{e}")))?,
        body: serde_json::from_str(&body).map_err(|e| corrupt("body", e.to_string()))?,
        entry: r.try_get::<i64, _>("entry")? as u64,
        approved_hash: r
            .try_get::<Option<String>, _>("approved_hash")?
            .map(|h| h.parse())
            .transpose()
            .map_err(|e| corrupt("approved hash", format!("{e}")))?,
        gate_entry: r.try_get::<Option<i64>, _>("gate_entry")?.map(|v| v as u64),
    }))
}

/// Records the sweep now proposed at `experiment`: a new hash clears the approval and the
/// gate.
pub(crate) async fn set_proposed<'e>(
    db: impl Executor<'e, Database = Any>,
    experiment: &ExperimentId,
    body: &SweepBody,
    entry: u64,
    now: i64,
) -> Result<(), LabError> {
    let json = serde_json::to_string(body)
        .map_err(|e| LabError::Refused(format!("the sweep body does not encode: {e}")))?;
    sqlx::query(
        "INSERT INTO sweeps (experiment, parent_hash, body, entry, updated_at) \
         VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT (experiment) DO UPDATE SET parent_hash = excluded.parent_hash, \
         body = excluded.body, entry = excluded.entry, approved_hash = NULL, approver = NULL, \
         gate_state = NULL, gate_entry = NULL, updated_at = excluded.updated_at",
    )
    .bind(experiment.0.clone())
    .bind(body.parent_hash.to_string())
    .bind(json)
    .bind(entry as i64)
    .bind(now)
    .execute(db)
    .await?;
    Ok(())
}

/// Records the approval of the set bound to `parent_hash`.
pub(crate) async fn set_approved<'e>(
    db: impl Executor<'e, Database = Any>,
    experiment: &ExperimentId,
    parent_hash: &SpecHash,
    approver: &str,
    now: i64,
) -> Result<(), LabError> {
    sqlx::query(
        "UPDATE sweeps SET approved_hash = $1, approver = $2, updated_at = $3 \
         WHERE experiment = $4 AND parent_hash = $1",
    )
    .bind(parent_hash.to_string())
    .bind(approver.to_string())
    .bind(now)
    .bind(experiment.0.clone())
    .execute(db)
    .await?;
    Ok(())
}

/// Claims the right to decide the gate of the sweep at `parent_hash`; `false` when another
/// process already did (or the sweep changed).
pub(crate) async fn claim_gate<'e>(
    db: impl Executor<'e, Database = Any>,
    experiment: &ExperimentId,
    parent_hash: &SpecHash,
    now: i64,
) -> Result<bool, LabError> {
    let done = sqlx::query(
        "UPDATE sweeps SET gate_state = 'deciding', updated_at = $1 \
         WHERE experiment = $2 AND parent_hash = $3 AND gate_state IS NULL",
    )
    .bind(now)
    .bind(experiment.0.clone())
    .bind(parent_hash.to_string())
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Gives a claim back (the decision could not be recorded; the next child's end retries).
pub(crate) async fn release_gate<'e>(
    db: impl Executor<'e, Database = Any>,
    experiment: &ExperimentId,
) -> Result<(), LabError> {
    sqlx::query("UPDATE sweeps SET gate_state = NULL WHERE experiment = $1 AND gate_entry IS NULL")
        .bind(experiment.0.clone())
        .execute(db)
        .await?;
    Ok(())
}

/// Records the decided gate's entry.
pub(crate) async fn set_gate<'e>(
    db: impl Executor<'e, Database = Any>,
    experiment: &ExperimentId,
    outcome: &str,
    entry: u64,
    now: i64,
) -> Result<(), LabError> {
    sqlx::query(
        "UPDATE sweeps SET gate_state = $1, gate_entry = $2, updated_at = $3 WHERE experiment = $4",
    )
    .bind(outcome.to_string())
    .bind(entry as i64)
    .bind(now)
    .bind(experiment.0.clone())
    .execute(db)
    .await?;
    Ok(())
}
