//! Pre-registered forecasts: remembered when their `forecast` entry is written (by a
//! proposer's form or a ladder), looked up by spec hash when the run ends, and settled against
//! the run's final metrics as a hit or a miss.
//!
//! Not here: the `forecast` entry itself (`glassbox_schemas::record`) or its table
//! (`crate::db::forecasts`).

use std::collections::BTreeMap;

use glassbox_schemas::SpecHash;
use glassbox_schemas::record::ForecastOutcome;
use glassbox_schemas::spec::Forecast;

use crate::db::forecasts;
use crate::error::LabError;
use crate::queue::Queue;

/// Remembers a forecast entry so the worker can compare it with the result.
pub async fn register(
    queue: &Queue,
    spec_hash: &SpecHash,
    f: &Forecast,
    entry: u64,
) -> Result<(), LabError> {
    forecasts::insert(queue.db().pool(), spec_hash, f, entry).await
}

/// The newest forecast registered for a spec hash (by the proposer's form or a ladder).
pub async fn registered(queue: &Queue, spec_hash: &SpecHash) -> Result<Option<Forecast>, LabError> {
    forecasts::newest_for(queue.db().pool(), spec_hash).await
}

/// Forecast against outcome: a hit when the metric exists and is within the tolerance.
pub fn settle(f: &Forecast, metrics: &BTreeMap<String, f64>) -> ForecastOutcome {
    ForecastOutcome::settle(
        &f.metric,
        f.value,
        f.tolerance,
        metrics.get(&f.metric).copied(),
    )
}
