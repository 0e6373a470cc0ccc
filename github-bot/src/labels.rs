//! The GitHub labels the bot sets to reflect an experiment's state.
//!
//! `experiment` is the form's label and is owned by [`glassbox_schemas::issue_form`]; the state
//! labels are the bot's. Which outcome gets which label: `succeeded` for a run that trained
//! every step (plus `negative-result` when its pre-registered forecast missed); `diverged` is a
//! `negative-result` (the configuration does not train); `failed` for budget_exceeded, failed
//! and cancelled. This module only names labels; [`crate::github`] sets them.

use glassbox_schemas::RunStatus;

pub use glassbox_schemas::issue_form::EXPERIMENT_LABEL;

/// Approved and queued (or held).
pub const APPROVED: &str = "approved";
/// A run is in progress.
pub const RUNNING: &str = "running";
/// The run trained every step.
pub const SUCCEEDED: &str = "succeeded";
/// The result contradicts the hypothesis or forecast, or the model diverged.
pub const NEGATIVE_RESULT: &str = "negative-result";
/// The run did not complete.
pub const FAILED: &str = "failed";
/// A reproduction of one of the issue's runs did not match its record (a negative result).
pub const REPRODUCTION_FAILED: &str = "reproduction-failed";
/// A sweep's promotion gate passed.
pub const GATE_PASSED: &str = "gate-passed";
/// A sweep's promotion gate failed (a negative result).
pub const GATE_FAILED: &str = "gate-failed";

/// The labels a finished run adds.
pub fn outcome_labels(status: RunStatus, forecast_hit: Option<bool>) -> Vec<&'static str> {
    match status {
        RunStatus::Succeeded if forecast_hit == Some(false) => vec![SUCCEEDED, NEGATIVE_RESULT],
        RunStatus::Succeeded => vec![SUCCEEDED],
        RunStatus::Diverged => vec![NEGATIVE_RESULT],
        RunStatus::BudgetExceeded | RunStatus::Failed | RunStatus::Cancelled => vec![FAILED],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_map_to_labels() {
        assert_eq!(
            outcome_labels(RunStatus::Succeeded, Some(true)),
            vec![SUCCEEDED]
        );
        assert_eq!(
            outcome_labels(RunStatus::Succeeded, Some(false)),
            vec![SUCCEEDED, NEGATIVE_RESULT]
        );
        assert_eq!(
            outcome_labels(RunStatus::Diverged, None),
            vec![NEGATIVE_RESULT]
        );
        assert_eq!(outcome_labels(RunStatus::Cancelled, None), vec![FAILED]);
    }
}
