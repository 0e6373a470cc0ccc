//! The flow's tables: `proposals` (per experiment: the current spec hash, its author and
//! title, the approval in force or the rejection that stands) and `proposal_entries` (one row
//! per `proposal` entry an author caused, for the per-author daily limit).
//!
//! Not here: what an edit, an approval or a rejection means ([`crate::flow`] decides); the
//! ledger entries themselves.

use glassbox_schemas::{ExperimentId, SpecHash};
use sqlx::{Any, Executor, Row};

use crate::error::LabError;

/// An experiment's row of `proposals`.
#[derive(Debug, Clone)]
pub(crate) struct ProposalRow {
    /// The current spec.
    pub spec_hash: SpecHash,
    /// Its proposer.
    pub author: String,
    /// The spec hash approved, while an approval is in force.
    pub approved_hash: Option<SpecHash>,
    /// Who approved it.
    pub approver: Option<String>,
    /// Why it was rejected, while the rejection stands.
    pub rejected_reason: Option<String>,
}

/// The proposal now recorded for an experiment.
#[derive(Debug, Clone)]
pub(crate) struct Proposed<'a> {
    pub experiment: &'a ExperimentId,
    pub spec_hash: &'a SpecHash,
    pub author: &'a str,
    pub title: &'a str,
    /// Its `proposal` entry.
    pub entry: u64,
}

fn parse_hash(s: String) -> Result<SpecHash, LabError> {
    s.parse::<SpecHash>().map_err(|e| LabError::BadSpec {
        hash: s.clone(),
        reason: format!("stored hash does not parse: {e}"),
    })
}

/// The experiment's row, if it was ever proposed.
pub(crate) async fn get<'e>(
    db: impl Executor<'e, Database = Any>,
    experiment: &ExperimentId,
) -> Result<Option<ProposalRow>, LabError> {
    let row = sqlx::query(
        "SELECT spec_hash, author, approved_hash, approver, rejected_reason \
         FROM proposals WHERE experiment = $1",
    )
    .bind(experiment.0.clone())
    .fetch_optional(db)
    .await?;
    let Some(r) = row else { return Ok(None) };
    Ok(Some(ProposalRow {
        spec_hash: parse_hash(r.try_get("spec_hash")?)?,
        author: r.try_get("author")?,
        approved_hash: r
            .try_get::<Option<String>, _>("approved_hash")?
            .map(parse_hash)
            .transpose()?,
        approver: r.try_get("approver")?,
        rejected_reason: r.try_get("rejected_reason")?,
    }))
}

/// The `proposal` entry of the experiment's current spec.
pub(crate) async fn entry_of<'e>(
    db: impl Executor<'e, Database = Any>,
    experiment: &ExperimentId,
) -> Result<u64, LabError> {
    let r = sqlx::query("SELECT proposal_entry FROM proposals WHERE experiment = $1")
        .bind(experiment.0.clone())
        .fetch_one(db)
        .await?;
    Ok(r.try_get::<i64, _>("proposal_entry")? as u64)
}

/// Records `p` as the experiment's current proposal; an approval of an earlier spec is
/// dropped, a rejection is kept (only an approval lifts it).
pub(crate) async fn set_proposed<'e>(
    db: impl Executor<'e, Database = Any>,
    p: &Proposed<'_>,
    now: i64,
) -> Result<(), LabError> {
    sqlx::query(
        "INSERT INTO proposals (experiment, spec_hash, author, title, proposal_entry, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6) \
         ON CONFLICT (experiment) DO UPDATE SET spec_hash = excluded.spec_hash, \
         author = excluded.author, title = excluded.title, proposal_entry = excluded.proposal_entry, \
         approved_hash = NULL, approver = NULL, approval_entry = NULL, \
         updated_at = excluded.updated_at",
    )
    .bind(p.experiment.0.clone())
    .bind(p.spec_hash.to_string())
    .bind(p.author.to_string())
    .bind(p.title.to_string())
    .bind(p.entry as i64)
    .bind(now)
    .execute(db)
    .await?;
    Ok(())
}

/// Puts an approval of `spec_hash` by `approver` (entry `entry`) in force. With
/// `lifts_rejection` a standing rejection is lifted too (a new approval); without, it is kept
/// (re-entering an approval the row missed).
pub(crate) async fn set_approved<'e>(
    db: impl Executor<'e, Database = Any>,
    experiment: &ExperimentId,
    spec_hash: &SpecHash,
    approver: &str,
    entry: u64,
    lifts_rejection: bool,
    now: i64,
) -> Result<(), LabError> {
    let lift = if lifts_rejection {
        ", rejected_reason = NULL"
    } else {
        ""
    };
    sqlx::query(&format!(
        "UPDATE proposals SET approved_hash = $1, approver = $2, approval_entry = $3{lift}, \
         updated_at = $4 WHERE experiment = $5"
    ))
    .bind(spec_hash.to_string())
    .bind(approver.to_string())
    .bind(entry as i64)
    .bind(now)
    .bind(experiment.0.clone())
    .execute(db)
    .await?;
    Ok(())
}

/// Records a rejection that stands until an approval lifts it; the approval in force is void.
pub(crate) async fn set_rejected<'e>(
    db: impl Executor<'e, Database = Any>,
    experiment: &ExperimentId,
    reason: &str,
    now: i64,
) -> Result<(), LabError> {
    sqlx::query(
        "UPDATE proposals SET rejected_reason = $1, approved_hash = NULL, approver = NULL, \
         updated_at = $2 WHERE experiment = $3",
    )
    .bind(reason.to_string())
    .bind(now)
    .bind(experiment.0.clone())
    .execute(db)
    .await?;
    Ok(())
}

/// Drops a spent approval (its run is over) without a rejection.
pub(crate) async fn clear_approval<'e>(
    db: impl Executor<'e, Database = Any>,
    experiment: &ExperimentId,
) -> Result<(), LabError> {
    sqlx::query("UPDATE proposals SET approved_hash = NULL, approver = NULL WHERE experiment = $1")
        .bind(experiment.0.clone())
        .execute(db)
        .await?;
    Ok(())
}

/// Counts a `proposal` entry against its author.
pub(crate) async fn count_entry<'e>(
    db: impl Executor<'e, Database = Any>,
    author: &str,
    experiment: &ExperimentId,
    entry: u64,
    now: i64,
) -> Result<(), LabError> {
    sqlx::query(
        "INSERT INTO proposal_entries (author, experiment, entry, created_at) VALUES ($1, $2, $3, $4)",
    )
    .bind(author.to_string())
    .bind(experiment.0.clone())
    .bind(entry as i64)
    .bind(now)
    .execute(db)
    .await?;
    Ok(())
}

/// How many `proposal` entries `author` caused after `since` (Unix ms).
pub(crate) async fn entries_since<'e>(
    db: impl Executor<'e, Database = Any>,
    author: &str,
    since: i64,
) -> Result<u64, LabError> {
    let row = sqlx::query(
        "SELECT COUNT(*) AS n FROM proposal_entries WHERE author = $1 AND created_at > $2",
    )
    .bind(author.to_string())
    .bind(since)
    .fetch_one(db)
    .await?;
    Ok(row.try_get::<i64, _>("n")?.max(0) as u64)
}
