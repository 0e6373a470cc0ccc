//! `GET /runs/{run}/log`: a run's own log on a page, one section per attempt: the log the
//! worker stored when the attempt ended (`logs/<run>/attempt-<n>.log`) or, for an attempt that
//! never ended (a killed worker), the chunks stored while it ran
//! (`logs/<run>/attempt-<n>/lines-<first>-<last>.log`), joined. Lines are numbered as the
//! worker wrote them (a stored log's note of left-out lines skips the numbers it left out),
//! long lines wrap, warnings and errors are highlighted; the tail is shown (`?lines=`, default
//! [`DEFAULT_LINES`]) and a search box keeps only matching lines (`?q=`, case-insensitive
//! substring), with their numbers.
//!
//! The text is the log blobs', shown escaped (maud). While an attempt runs in this server its
//! lines so far come from the [`crate::LiveHub`] and `/assets/runlog.js` appends new ones as
//! they are written (SSE `log` events), following the end unless the reader turns that off.
//! Not here: writing logs (the lab's worker does).

use axum::extract::{Path, Query, State};
use glassbox_ledger::index::queries::EntryFilter;
use glassbox_schemas::EntryKind;
use glassbox_schemas::LedgerEntry;
use glassbox_schemas::record::EntryBody;
use glassbox_schemas::{RefRole, RunPhase};
use maud::{Markup, html};

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

/// One stored piece of a run's log, by its artifact name under `logs/<run>/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LogPiece {
    /// `attempt-<n>.log`: the whole log, stored when the attempt ended.
    Whole { attempt: u32 },
    /// `attempt-<n>/lines-<first>-<last>.log`: a chunk stored while it ran.
    Lines { attempt: u32, first: u64 },
}

impl LogPiece {
    fn parse(name: &str) -> Option<Self> {
        let rest = name.strip_prefix("attempt-")?;
        if let Some(n) = rest.strip_suffix(".log").and_then(|n| n.parse().ok()) {
            return Some(LogPiece::Whole { attempt: n });
        }
        let (n, chunk) = rest.split_once('/')?;
        let range = chunk.strip_prefix("lines-")?.strip_suffix(".log")?;
        let (first, _last) = range.split_once('-')?;
        Some(LogPiece::Lines {
            attempt: n.parse().ok()?,
            first: first.parse().ok()?,
        })
    }

    fn attempt(self) -> u32 {
        match self {
            LogPiece::Whole { attempt } | LogPiece::Lines { attempt, .. } => attempt,
        }
    }
}

/// What is stored of one attempt's log.
#[derive(Debug, Default)]
struct Attempt {
    /// The whole log (its entry and text), once the attempt ended.
    whole: Option<(i64, Option<String>)>,
    /// Chunks stored while it ran: entry, first line number, text.
    chunks: Vec<(i64, u64, Option<String>)>,
}

impl Attempt {
    /// The attempt's lines with their numbers (a note the worker wrote has none): the whole
    /// log where there is one, else the chunks in order.
    fn numbered(&self) -> Vec<(Option<u64>, String)> {
        let mut out = Vec::new();
        if let Some((_, Some(text))) = &self.whole {
            let mut n = 1;
            for line in text.lines() {
                if let Some(skipped) = left_out(line) {
                    out.push((None, line.to_string()));
                    n += skipped;
                } else {
                    out.push((Some(n), line.to_string()));
                    n += 1;
                }
            }
            return out;
        }
        let mut chunks: Vec<&(i64, u64, Option<String>)> = self.chunks.iter().collect();
        chunks.sort_by_key(|c| (c.1, c.0));
        for (_, first, text) in chunks {
            let Some(text) = text else { continue };
            let mut n = *first;
            for line in text.lines() {
                if line.starts_with("[... ") {
                    out.push((None, line.to_string()));
                } else {
                    out.push((Some(n), line.to_string()));
                    n += 1;
                }
            }
        }
        out
    }
}

/// The number of lines a stored log's note says it left out (`[... N lines (B bytes) left out
/// here ...]`).
fn left_out(line: &str) -> Option<u64> {
    line.strip_prefix("[... ")?
        .split(' ')
        .next()?
        .parse()
        .ok()
        .filter(|_| line.contains("left out here"))
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
    let rows = st
        .index
        .select_entries(&EntryFilter {
            run: Some(&run),
            kinds: &[EntryKind::Artifact],
            ..EntryFilter::default()
        })
        .await?;
    let prefix = format!("logs/{run}/");
    let mut attempts: std::collections::BTreeMap<u32, Attempt> = Default::default();
    for r in &rows {
        let Ok(e) = LedgerEntry::from_bytes(r.entry.as_bytes()) else {
            continue;
        };
        let EntryBody::Artifact(a) = &e.body else {
            continue;
        };
        let Some(piece) = a.name.strip_prefix(&prefix).and_then(LogPiece::parse) else {
            continue;
        };
        let idx = r.index as i64;
        let body = match e.blob(RefRole::Artifact) {
            Some(h) => st.small_blob_text(&h.to_string(), MAX_LOG_BYTES).await,
            None => None,
        };
        let at = attempts.entry(piece.attempt()).or_default();
        match piece {
            LogPiece::Whole { .. } => at.whole = Some((idx, body)),
            LogPiece::Lines { first, .. } => at.chunks.push((idx, first, body)),
        }
    }
    let needle = find.map(str::to_lowercase);
    let live = st
        .live
        .recent(&run)
        .filter(|r| !r.log.is_empty() || r.status.is_some_and(RunPhase::is_running));
    let body = html! {
        h1 { "Log of " (run) }
        p.meta {
            a href={ "/runs/" (encode_path(&run)) } { "run page" } " · "
            "what the worker's terminal showed for each attempt: the backend, progress and evaluations, warnings, anomalies and how it ended. "
            "Stored in chunks while the attempt runs and whole when it ends."
        }
        form.filters method="get" {
            label { "Find " input type="search" name="q" value=(find.unwrap_or("")); }
            label { "Lines " input type="number" name="lines" min="1" max=(MAX_LINES) value=(lines); }
            button type="submit" { "Show" }
        }
        @if let Some(l) = &live {
            section.run-log #live {
                h2 { "Running attempt, live " small #live-log-status { (l.status.map_or("", RunPhase::as_str)) } }
                p.meta {
                    "The newest lines as the worker writes them. "
                    label { input #follow type="checkbox" checked; " follow the end" }
                }
                pre.log #live-log data-run=(run) { @for line in &l.log { span class=(level(line)) { (line) } "\n" } }
            }
        }
        @if attempts.is_empty() && live.is_none() { p.empty { "No log is stored for this run yet." } }
        @for (attempt, at) in attempts.iter().rev() {
            @let numbered = at.numbered();
            section.run-log {
                h2 {
                    "Attempt " (attempt) " "
                    small {
                        @match &at.whole {
                            Some((idx, _)) => { a href={ "/api/v1/entries/" (idx) } { "entry " (idx) } },
                            None => { (at.chunks.len()) " chunk" @if at.chunks.len() != 1 { "s" } " stored while it ran; it has no stored end (its worker stopped)" },
                        }
                    }
                }
                @if numbered.is_empty() {
                    p.empty { "The log blob is not available here." }
                } @else {
                    @let all: Vec<&(Option<u64>, String)> = numbered.iter().filter(|(_, l)| needle.as_deref().is_none_or(|n| l.to_lowercase().contains(n))).collect();
                    @let shown = &all[all.len().saturating_sub(lines)..];
                    p.meta { (shown.len()) " of " (all.len()) " lines" @if find.is_some() { " matching" } }
                    pre.log.numbered {
                        @for (n, l) in shown.iter().map(|x| (&x.0, &x.1)) {
                            span class=(level(l)) {
                                span.ln { @if let Some(n) = n { (n) } }
                                (l)
                            } "\n"
                        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_are_told_apart_by_name() {
        assert_eq!(
            LogPiece::parse("attempt-2.log"),
            Some(LogPiece::Whole { attempt: 2 })
        );
        assert_eq!(
            LogPiece::parse("attempt-1/lines-000051-000060.log"),
            Some(LogPiece::Lines {
                attempt: 1,
                first: 51
            })
        );
        assert_eq!(LogPiece::parse("attempt-x.log"), None);
        assert_eq!(LogPiece::parse("notes.txt"), None);
    }

    #[test]
    fn numbers_skip_what_a_stored_log_left_out_and_chunks_start_where_they_say() {
        let whole = Attempt {
            whole: Some((
                9,
                Some("a\nb\n[... 40 lines (900 bytes) left out here: ...]\nc\n".into()),
            )),
            chunks: Vec::new(),
        };
        let n: Vec<Option<u64>> = whole.numbered().into_iter().map(|x| x.0).collect();
        assert_eq!(n, [Some(1), Some(2), None, Some(43)]);
        let killed = Attempt {
            whole: None,
            chunks: vec![(5, 3, Some("c\nd\n".into())), (4, 1, Some("a\nb\n".into()))],
        };
        let lines: Vec<(Option<u64>, String)> = killed.numbered();
        assert_eq!(
            lines,
            [
                (Some(1), "a".to_string()),
                (Some(2), "b".to_string()),
                (Some(3), "c".to_string()),
                (Some(4), "d".to_string())
            ]
        );
    }
}
