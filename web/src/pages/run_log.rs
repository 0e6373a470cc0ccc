//! `GET /runs/{run}/log`: a run's own log (the worker's `logs/<run>/attempt-<n>.log` artifacts,
//! one per attempt, in log order) on a page: the tail (`?lines=`, default [`DEFAULT_LINES`]),
//! a search box (`?q=`, case-insensitive substring), warnings and errors highlighted.
//!
//! The text is the log blob's, shown escaped (maud). A log is stored when its attempt ends; while
//! an attempt runs in this server, its lines so far come from the [`crate::LiveHub`] and
//! `/assets/runlog.js` appends new ones as they are written (SSE `log` events). Not here:
//! writing logs (the lab's worker does).

use axum::extract::{Path, Query, State};
use glassbox_schemas::LedgerEntry;
use glassbox_schemas::record::EntryBody;
use maud::{Markup, html};
use sqlx::Row;

use super::{Nav, Scripts, encode_path, frame_with};
use crate::WebState;
use crate::error::WebError;

/// Lines shown of each attempt's log by default.
pub const DEFAULT_LINES: usize = 200;
/// Most lines shown of one attempt's log.
pub const MAX_LINES: usize = 5000;
/// Largest log blob read (a run log keeps at most 256 KiB, plus its note).
pub const MAX_LOG_BYTES: u64 = 512 * 1024;
/// Longest search text.
pub const MAX_QUERY_CHARS: usize = 200;

/// The page's query.
#[derive(Debug, Default, serde::Deserialize)]
pub struct LogQuery {
    /// Text to find (case-insensitive); only matching lines are shown.
    pub q: Option<String>,
    /// Lines of the tail to show.
    pub lines: Option<usize>,
}

/// A line's level, from the worker's format `<time> <level> <text>`.
fn level(line: &str) -> &'static str {
    match line.split(' ').nth(1) {
        Some("warn") => "warn",
        Some("error") => "error",
        _ => "info",
    }
}

/// `GET /runs/{run}/log`.
pub async fn page(
    State(st): State<WebState>,
    Path(run): Path<String>,
    Query(q): Query<LogQuery>,
) -> Result<Markup, WebError> {
    let find = q.q.as_deref().map(str::trim).filter(|s| !s.is_empty());
    if let Some(f) = find
        && f.chars().count() > MAX_QUERY_CHARS
    {
        return Err(WebError::BadRequest(format!(
            "q: at most {MAX_QUERY_CHARS} characters"
        )));
    }
    let lines = q.lines.unwrap_or(DEFAULT_LINES).clamp(1, MAX_LINES);
    let rows = sqlx::query(
        "SELECT idx, entry FROM entries WHERE run = $1 AND kind = 'artifact' ORDER BY idx",
    )
    .bind(run.clone())
    .fetch_all(st.index.pool())
    .await?;
    let prefix = format!("logs/{run}/");
    let mut logs = Vec::new();
    for r in &rows {
        let text: String = r.try_get("entry")?;
        let Ok(e) = LedgerEntry::from_bytes(text.as_bytes()) else {
            continue;
        };
        let EntryBody::Artifact(a) = &e.body else {
            continue;
        };
        if !a.name.starts_with(&prefix) {
            continue;
        }
        let idx: i64 = r.try_get("idx")?;
        let body = match e.refs.get("artifact") {
            Some(h) => st.small_blob_text(&h.to_string(), MAX_LOG_BYTES).await,
            None => None,
        };
        logs.push((idx, a.name.clone(), body));
    }
    let needle = find.map(str::to_lowercase);
    let live = st
        .live
        .recent(&run)
        .filter(|r| !r.log.is_empty() || r.status.as_deref() == Some("running"));
    let body = html! {
        h1 { "Log of " (run) }
        p.meta { a href={ "/runs/" (encode_path(&run)) } { "charts" } " · the worker's own log of each attempt, stored when the attempt ended." }
        form.filters method="get" {
            label { "Find " input type="search" name="q" value=(find.unwrap_or("")); }
            label { "Lines " input type="number" name="lines" min="1" max=(MAX_LINES) value=(lines); }
            button type="submit" { "Show" }
        }
        @if let Some(l) = &live {
            section.run-log #live {
                h2 { "Running attempt, live " small #live-log-status { (l.status.as_deref().unwrap_or("")) } }
                p.meta { "The newest lines as the worker writes them; stored with the record when the attempt ends." }
                pre.log #live-log data-run=(run) { @for line in &l.log { span class=(level(line)) { (line) } "\n" } }
            }
        }
        @if logs.is_empty() && live.is_none() { p.empty { "No log is stored for this run yet (a log is stored when its attempt ends)." } }
        @for (idx, name, text) in &logs {
            section.run-log {
                h2 { (name) " " small { a href={ "/api/v1/entries/" (idx) } { "entry " (idx) } } }
                @match text {
                    None => p.empty { "The log blob is not available here." },
                    Some(t) => {
                        @let all: Vec<&str> = t.lines().filter(|l| needle.as_deref().is_none_or(|n| l.to_lowercase().contains(n))).collect();
                        @let shown = &all[all.len().saturating_sub(lines)..];
                        p.meta { (shown.len()) " of " (all.len()) " lines" @if find.is_some() { " matching" } }
                        pre.log { @for l in shown { span class=(level(l)) { (l) } "\n" } }
                    }
                }
            }
        }
    };
    let scripts = if live.is_some() {
        Scripts::RunLog
    } else {
        Scripts::None
    };
    Ok(frame_with(
        &format!("Log of {run}"),
        Nav::Other,
        scripts,
        body,
    ))
}
