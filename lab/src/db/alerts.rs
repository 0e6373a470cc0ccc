//! The `anomalies` and `run_alerts` tables: every anomaly a worker flagged (for the `/metrics`
//! counter by kind), and the alerts raised, one per (run, kind) by the table's primary key,
//! with a stalled run's alert cleared when it steps again.
//!
//! Not here: detecting anything (the runner and [`crate::stall`]) or wording an alert (the
//! bot).

use sqlx::{Any, Executor, Row};

use crate::error::LabError;

/// Counts an `anomaly` entry of `kind` on `run`.
pub(crate) async fn count_anomaly<'e>(
    db: impl Executor<'e, Database = Any>,
    entry: u64,
    run: &str,
    kind: &str,
    step: u64,
    now: i64,
) -> Result<(), LabError> {
    sqlx::query(
        "INSERT INTO anomalies (entry, run, kind, step, created_at) VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT (entry) DO NOTHING",
    )
    .bind(entry as i64)
    .bind(run.to_string())
    .bind(kind.to_string())
    .bind(step as i64)
    .bind(now)
    .execute(db)
    .await?;
    Ok(())
}

/// Anomalies flagged so far, by kind.
pub(crate) async fn anomaly_counts<'e>(
    db: impl Executor<'e, Database = Any>,
) -> Result<Vec<(String, u64)>, LabError> {
    let rows = sqlx::query("SELECT kind, COUNT(*) AS n FROM anomalies GROUP BY kind ORDER BY kind")
        .fetch_all(db)
        .await?;
    rows.iter()
        .map(|r| Ok((r.try_get("kind")?, r.try_get::<i64, _>("n")?.max(0) as u64)))
        .collect()
}

/// Raises the alert `kind` for `run` unless it was raised before; returns whether this call
/// raised it (so exactly one caller tells anyone).
pub(crate) async fn raise_once<'e>(
    db: impl Executor<'e, Database = Any>,
    run: &str,
    kind: &str,
    experiment: &str,
    now: i64,
) -> Result<bool, LabError> {
    let done = sqlx::query(
        "INSERT INTO run_alerts (run, kind, experiment, created_at) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (run, kind) DO NOTHING",
    )
    .bind(run.to_string())
    .bind(kind.to_string())
    .bind(experiment.to_string())
    .bind(now)
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Clears `run`'s alert of `kind` (a stalled run stepped again); it stays raised (no second
/// alert of the kind), only no longer counted as current.
pub(crate) async fn clear<'e>(
    db: impl Executor<'e, Database = Any>,
    run: &str,
    kind: &str,
    now: i64,
) -> Result<(), LabError> {
    sqlx::query(
        "UPDATE run_alerts SET cleared_at = $3 WHERE run = $1 AND kind = $2 AND cleared_at IS NULL",
    )
    .bind(run.to_string())
    .bind(kind.to_string())
    .bind(now)
    .execute(db)
    .await?;
    Ok(())
}

/// Runs of jobs still running whose alert `kind` is raised and not cleared.
pub(crate) async fn current<'e>(
    db: impl Executor<'e, Database = Any>,
    kind: &str,
) -> Result<Vec<String>, LabError> {
    let rows = sqlx::query(
        "SELECT a.run FROM run_alerts a WHERE a.kind = $1 AND a.cleared_at IS NULL \
         AND EXISTS (SELECT 1 FROM jobs j WHERE j.run_id = a.run AND j.state IN ('leased', 'running')) \
         ORDER BY a.run",
    )
    .bind(kind.to_string())
    .fetch_all(db)
    .await?;
    rows.iter()
        .map(|r| Ok(r.try_get::<String, _>("run")?))
        .collect()
}
