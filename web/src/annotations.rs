//! What people and the lab said about a run's steps: `annotation` entries (`/note`s) and
//! `anomaly` entries (the worker's detector), read from the index's `entries` table by run.
//!
//! [`run_marks`] loads them; a note an edited comment superseded is kept, marked with the
//! entry that replaced it, and left off the charts. [`chart_marks`] turns the current ones into
//! the charts' bands and markers (`crate::pages::notes_table` renders the table under the
//! charts), and
//! [`run_annotations`] is the API (`/api/v1/runs/{run}/annotations`). Every text a person wrote
//! reaches the page through maud (escaped) or [`crate::chart::escape_xml`]. Not here: drawing
//! (the chart module) or writing anything (the dashboard is read-only).

use axum::Json;
use axum::extract::{Path, State};
use glassbox_ledger::index::queries::EntryFilter;
use glassbox_schemas::EntryKind;
use glassbox_schemas::LedgerEntry;
use glassbox_schemas::record::{AnnotationBody, AnomalyBody, EntryBody};

use serde::Serialize;
use utoipa::ToSchema;

use crate::WebState;
use crate::chart::Mark;
use crate::error::WebError;

/// Most marks read for one run (a run with more shows the newest; the cap bounds the page).
pub const MAX_MARKS: u32 = 2000;

/// One note or anomaly on a run.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RunMark {
    /// Its ledger entry.
    pub entry: u64,
    /// `annotation` or `anomaly`.
    pub kind: String,
    /// When it was written (RFC 3339).
    pub time: String,
    /// First step.
    pub from_step: u64,
    /// Last step.
    pub to_step: u64,
    /// The note's author (annotations).
    pub author: Option<String>,
    /// `maintainer` or `community` (annotations); the anomaly's kind (anomalies).
    pub label: String,
    /// The note's text, or a sentence describing the anomaly.
    pub text: String,
    /// The comment a note came from.
    pub url: Option<String>,
    /// The note it replaces.
    pub supersedes: Option<u64>,
    /// The note that replaced it, if an edit did.
    pub superseded_by: Option<u64>,
}

impl RunMark {
    fn from_entry(idx: u64, e: &LedgerEntry) -> Option<Self> {
        let time = e
            .time
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default();
        match &e.body {
            EntryBody::Annotation(AnnotationBody {
                author,
                role,
                from_step,
                to_step,
                text,
                url,
                supersedes,
                ..
            }) => Some(RunMark {
                entry: idx,
                kind: "annotation".into(),
                time,
                from_step: *from_step,
                to_step: (*to_step).max(*from_step),
                author: Some(author.clone()),
                label: role.as_str().into(),
                text: text.clone(),
                url: Some(url.clone()),
                supersedes: *supersedes,
                superseded_by: None,
            }),
            EntryBody::Anomaly(AnomalyBody { anomaly: a, .. }) => Some(RunMark {
                entry: idx,
                kind: "anomaly".into(),
                time,
                from_step: a.step,
                to_step: a.step,
                author: None,
                label: a.kind.as_str().into(),
                text: a.message(),
                url: None,
                supersedes: None,
                superseded_by: None,
            }),
            _ => None,
        }
    }

    /// Whether it is still current (no later edit replaced it).
    pub fn is_current(&self) -> bool {
        self.superseded_by.is_none()
    }
}

/// A run's notes and anomalies, in log order (at most [`MAX_MARKS`], the newest).
pub async fn run_marks(st: &WebState, run: &str) -> Result<Vec<RunMark>, WebError> {
    let rows = st
        .index
        .select_entries(&EntryFilter {
            run: Some(run),
            kinds: &[EntryKind::Annotation, EntryKind::Anomaly],
            newest_first: true,
            limit: Some(MAX_MARKS),
            ..EntryFilter::default()
        })
        .await?;
    let mut marks = Vec::with_capacity(rows.len());
    for r in rows.iter().rev() {
        if let Some(m) = LedgerEntry::from_bytes(r.entry.as_bytes())
            .ok()
            .and_then(|e| RunMark::from_entry(r.index, &e))
        {
            marks.push(m);
        }
    }
    let replaced: Vec<(u64, u64)> = marks
        .iter()
        .filter_map(|m| m.supersedes.map(|old| (old, m.entry)))
        .collect();
    for (old, new) in replaced {
        if let Some(m) = marks.iter_mut().find(|m| m.entry == old) {
            m.superseded_by = Some(new);
        }
    }
    Ok(marks)
}

/// The current marks as chart bands: notes one colour per role, anomalies another.
pub fn chart_marks(marks: &[RunMark]) -> Vec<Mark> {
    marks
        .iter()
        .filter(|m| m.is_current())
        .map(|m| Mark {
            from: m.from_step as f64,
            to: m.to_step as f64,
            label: match &m.author {
                Some(a) => format!("{} note by {a}: {}", m.label, m.text),
                None => format!("anomaly ({}): {}", m.label, m.text),
            },
            anomaly: m.kind == "anomaly",
        })
        .collect()
}

/// A run's notes and anomalies.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunAnnotations {
    /// The run.
    pub run: String,
    /// Notes and anomalies, in log order; superseded notes included, marked.
    pub marks: Vec<RunMark>,
}

/// A run's notes (`annotation` entries) and anomalies (`anomaly` entries).
#[utoipa::path(get, path = "/api/v1/runs/{run}/annotations", params(("run" = String, Path)),
    responses((status = 200, body = RunAnnotations)))]
pub async fn run_annotations(
    State(st): State<WebState>,
    Path(run): Path<String>,
) -> Result<Json<RunAnnotations>, WebError> {
    let marks = run_marks(&st, &run).await?;
    Ok(Json(RunAnnotations { run, marks }))
}
