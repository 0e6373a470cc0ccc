//! The index's read queries for the dashboard and the API, one function per question a reader
//! asks (bors's `database/operations.rs`): every statement on the `entries` table that a reader
//! runs is here, its filters bound as parameters and its kinds taken from [`EntryKind`].
//!
//! Not here: writing the index (the parent module) or the metric curves (`curves`).

use glassbox_schemas::EntryKind;
use sqlx::Row;

use super::{Index, IndexedEntry};
use crate::error::Error;

/// Which entries to read.
#[derive(Debug, Clone, Copy, Default)]
pub struct EntryFilter<'a> {
    /// Only this run's.
    pub run: Option<&'a str>,
    /// Only this experiment's.
    pub experiment: Option<&'a str>,
    /// Only these kinds (all when empty).
    pub kinds: &'a [EntryKind],
    /// Only entries at this index or later.
    pub from: Option<u64>,
    /// Newest first (else in log order).
    pub newest_first: bool,
    /// At most this many (all when `None`).
    pub limit: Option<u32>,
}

/// An entry as [`Index::entries_about`] reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct EntryAbout {
    /// Leaf index.
    pub index: u64,
    /// Its experiment, if any.
    pub experiment: Option<String>,
    /// Its run, if any.
    pub run: Option<String>,
    /// The canonical entry JSON, when its kind was asked for.
    pub entry: Option<String>,
}

impl Index {
    /// The entries `filter` names, from the read connections.
    pub async fn select_entries(
        &self,
        filter: &EntryFilter<'_>,
    ) -> Result<Vec<IndexedEntry>, Error> {
        let mut sql = String::from(
            "SELECT idx, kind, experiment, run, time, entry FROM entries WHERE idx >= $1",
        );
        let mut texts: Vec<&str> = Vec::new();
        for (column, value) in [("run", filter.run), ("experiment", filter.experiment)] {
            if let Some(v) = value {
                texts.push(v);
                sql.push_str(&format!(" AND {column} = ${}", texts.len() + 1));
            }
        }
        if !filter.kinds.is_empty() {
            let mut marks = Vec::with_capacity(filter.kinds.len());
            for kind in filter.kinds {
                texts.push(kind.as_str());
                marks.push(format!("${}", texts.len() + 1));
            }
            sql.push_str(&format!(" AND kind IN ({})", marks.join(", ")));
        }
        sql.push_str(if filter.newest_first {
            " ORDER BY idx DESC"
        } else {
            " ORDER BY idx"
        });
        if filter.limit.is_some() {
            sql.push_str(&format!(" LIMIT ${}", texts.len() + 2));
        }
        let from = filter.from.unwrap_or(0).min(i64::MAX as u64) as i64;
        let mut query = sqlx::query(&sql).bind(from);
        for t in texts {
            query = query.bind(t.to_string());
        }
        if let Some(limit) = filter.limit {
            query = query.bind(i64::from(limit));
        }
        let rows = query
            .fetch_all(self.pool())
            .await
            .map_err(|e| self.err(e))?;
        rows.iter()
            .map(IndexedEntry::from_row)
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(|e| self.err(e))
    }

    /// One past the newest indexed entry (0 when the index is empty): how far a reader that
    /// folds entries in order can go.
    pub async fn next_index(&self) -> Result<u64, Error> {
        let n: i64 = sqlx::query("SELECT COALESCE(MAX(idx) + 1, 0) AS n FROM entries")
            .fetch_one(self.pool())
            .await
            .and_then(|r| r.try_get("n"))
            .map_err(|e| self.err(e))?;
        Ok(n.max(0) as u64)
    }

    /// At most `limit` entries from index `from` on, in log order: each with what it is about,
    /// and its text only when its kind is one of `text_of` (a reader that folds a few kinds
    /// does not pay for the others' text).
    pub async fn entries_about(
        &self,
        from: u64,
        limit: u32,
        text_of: &[EntryKind],
    ) -> Result<Vec<EntryAbout>, Error> {
        let marks: Vec<String> = (0..text_of.len()).map(|i| format!("${}", i + 3)).collect();
        let text = if marks.is_empty() {
            "NULL".to_string()
        } else {
            format!(
                "CASE WHEN kind IN ({}) THEN entry ELSE NULL END",
                marks.join(", ")
            )
        };
        let sql = format!(
            "SELECT idx, experiment, run, {text} AS entry FROM entries WHERE idx >= $1 \
             ORDER BY idx LIMIT $2"
        );
        let mut query = sqlx::query(&sql)
            .bind(from.min(i64::MAX as u64) as i64)
            .bind(i64::from(limit));
        for kind in text_of {
            query = query.bind(kind.as_str().to_string());
        }
        let rows = query
            .fetch_all(self.pool())
            .await
            .map_err(|e| self.err(e))?;
        rows.iter()
            .map(|r| {
                Ok(EntryAbout {
                    index: r.try_get::<i64, _>("idx")? as u64,
                    experiment: r.try_get("experiment")?,
                    run: r.try_get("run")?,
                    entry: r.try_get("entry")?,
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(|e| self.err(e))
    }

    /// The names of a run's metric series, sorted.
    pub async fn metric_names(&self, run: &str) -> Result<Vec<String>, Error> {
        let rows =
            sqlx::query("SELECT DISTINCT name FROM metric_points WHERE run = $1 ORDER BY name")
                .bind(run.to_string())
                .fetch_all(self.pool())
                .await
                .map_err(|e| self.err(e))?;
        rows.iter()
            .map(|r| r.try_get::<String, _>("name"))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.err(e))
    }

    /// How many entries the index holds.
    pub async fn entry_count(&self) -> Result<u64, Error> {
        let n: i64 = sqlx::query("SELECT COUNT(*) AS n FROM entries")
            .fetch_one(self.pool())
            .await
            .and_then(|r| r.try_get("n"))
            .map_err(|e| self.err(e))?;
        Ok(n.max(0) as u64)
    }

    /// Whether the index answers at all (a health check).
    pub async fn ping(&self) -> Result<(), Error> {
        sqlx::query("SELECT 1 AS one")
            .fetch_one(self.pool())
            .await
            .map_err(|e| self.err(e))?;
        Ok(())
    }
}
