//! The `annotations` table: one row per `annotation` entry written through `/note`, with its
//! author, run and comment URL, so the flow can count an author's recent notes (the rate limit)
//! and find the note an edited comment supersedes.
//!
//! Not here: what a note says (the ledger entry holds it) or the limit's policy
//! ([`crate::flow`]).

use sqlx::{Any, Executor, Row};

use crate::error::LabError;

/// One note as the table holds it.
#[derive(Debug, Clone)]
pub(crate) struct NoteRow<'a> {
    pub entry: u64,
    pub author: &'a str,
    pub experiment: &'a str,
    pub run: &'a str,
    pub url: &'a str,
    pub created_at: i64,
}

/// Adds a note's row.
pub(crate) async fn insert<'e>(
    db: impl Executor<'e, Database = Any>,
    note: &NoteRow<'_>,
) -> Result<(), LabError> {
    sqlx::query(
        "INSERT INTO annotations (entry, author, experiment, run, url, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(note.entry as i64)
    .bind(note.author.to_string())
    .bind(note.experiment.to_string())
    .bind(note.run.to_string())
    .bind(note.url.to_string())
    .bind(note.created_at)
    .execute(db)
    .await?;
    Ok(())
}

/// How many notes `author` wrote after `since` (Unix ms).
pub(crate) async fn count_since<'e>(
    db: impl Executor<'e, Database = Any>,
    author: &str,
    since: i64,
) -> Result<u64, LabError> {
    let row =
        sqlx::query("SELECT COUNT(*) AS n FROM annotations WHERE author = $1 AND created_at > $2")
            .bind(author.to_string())
            .bind(since)
            .fetch_one(db)
            .await?;
    Ok(row.try_get::<i64, _>("n")?.max(0) as u64)
}

/// The newest note written from the comment at `url`, if any (its entry index).
pub(crate) async fn latest_for_url<'e>(
    db: impl Executor<'e, Database = Any>,
    url: &str,
) -> Result<Option<u64>, LabError> {
    let row = sqlx::query("SELECT MAX(entry) AS e FROM annotations WHERE url = $1")
        .bind(url.to_string())
        .fetch_one(db)
        .await?;
    Ok(row.try_get::<Option<i64>, _>("e")?.map(|e| e as u64))
}
