//! The `forecasts` table: every forecast registered for a spec hash (by the proposer's form,
//! the spec itself, or a ladder's fit) with the ledger entry that records it, so the worker
//! can score the newest one against the run's result.
//!
//! Not here: scoring ([`crate::forecast::settle`]) or the `forecast` entry itself.

use glassbox_schemas::SpecHash;
use glassbox_schemas::spec::Forecast;
use sqlx::{Any, Executor, Row};

use crate::error::LabError;

/// Registers `f` for `spec_hash`, recorded in ledger entry `entry`.
pub(crate) async fn insert<'e>(
    db: impl Executor<'e, Database = Any>,
    spec_hash: &SpecHash,
    f: &Forecast,
    entry: u64,
) -> Result<(), LabError> {
    sqlx::query(
        "INSERT INTO forecasts (spec_hash, metric, value, tolerance, entry) VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(spec_hash.to_string())
    .bind(f.metric.clone())
    .bind(f.value)
    .bind(f.tolerance)
    .bind(entry as i64)
    .execute(db)
    .await?;
    Ok(())
}

/// The newest forecast registered for `spec_hash`.
pub(crate) async fn newest_for<'e>(
    db: impl Executor<'e, Database = Any>,
    spec_hash: &SpecHash,
) -> Result<Option<Forecast>, LabError> {
    let row = sqlx::query(
        "SELECT metric, value, tolerance FROM forecasts WHERE spec_hash = $1 ORDER BY entry DESC LIMIT 1",
    )
    .bind(spec_hash.to_string())
    .fetch_optional(db)
    .await?;
    Ok(match row {
        Some(r) => Some(Forecast {
            metric: r.try_get("metric")?,
            value: r.try_get("value")?,
            tolerance: r.try_get("tolerance")?,
        }),
        None => None,
    })
}
