//! Notes on a run (`/note`): an `annotation` entry, bounded per author per hour.
//!
//! Not here: showing them (the dashboard).

use crate::db::annotations;
use crate::error::LabError;
use glassbox_github_bot::port::{LabError as PortError, NoteRecorded, NoteRequest, pick_note_run};
use glassbox_schemas::record::AnnotationBody;

use super::*;

/// An hour in milliseconds (the per-author note window).
const HOUR_MS: i64 = 60 * 60 * 1000;

impl Flow {
    /// Records a `/note` as an `annotation` entry: the run must be one of the experiment's (or,
    /// named by none, its only run), the author under `limits.max_notes_per_author_per_hour`;
    /// a note from a comment that already gave one supersedes the last such note.
    pub async fn annotate(&self, note: NoteRequest) -> Result<NoteRecorded, LabError> {
        let refuse = |e: PortError| LabError::Refused(e.to_string());
        let max = self.inner.config.limits.max_notes_per_author_per_hour;
        let written =
            annotations::count_since(self.pool(), note.author.as_str(), self.now() - HOUR_MS)
                .await?;
        if written >= u64::from(max) {
            return Err(LabError::Refused(format!(
                "{} has written {written} notes in the last hour; the limit is {max} (limits.max_notes_per_author_per_hour); try again later",
                note.author
            )));
        }
        let experiment = note.experiment.clone();
        let named = note.run.clone();
        let (runs, owner) = self
            .blocking(move |rec| {
                let runs = rec.runs_of(&experiment)?;
                let owner = match &named {
                    Some(r) => rec.experiment_of_run(r)?,
                    None => None,
                };
                Ok((runs, owner))
            })
            .await?;
        let run =
            pick_note_run(&note.experiment, &runs, note.run.as_ref(), || owner).map_err(refuse)?;
        let supersedes = annotations::latest_for_url(self.pool(), &note.url).await?;
        let body = AnnotationBody {
            run: run.clone(),
            author: note.author.as_str().to_string(),
            role: note.role,
            from_step: note.from_step,
            to_step: note.to_step,
            text: note.text.clone(),
            url: note.url.clone(),
            supersedes,
        };
        let experiment = note.experiment.clone();
        let entry = self
            .blocking(move |rec| rec.record(Some(&experiment), Default::default(), body))
            .await?;
        annotations::insert(
            self.pool(),
            &annotations::NoteRow {
                entry,
                author: note.author.as_str(),
                experiment: &note.experiment.0,
                run: &run.0,
                url: &note.url,
                created_at: self.now(),
            },
        )
        .await?;
        Ok(NoteRecorded {
            run,
            entry,
            supersedes,
        })
    }
}
