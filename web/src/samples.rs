//! What a run's model wrote at each snapshot: its `samples` entries, read from the index by run,
//! newest first, as the run page's "What it writes" section ([`section`]) and as the API
//! (`/api/v1/runs/{run}/samples`, [`run_samples`]).
//!
//! Model output is untrusted text: it reaches the page through maud (escaped), and control
//! characters (a byte model writes them) are shown as their Unicode control pictures so a
//! reader sees them instead of nothing. While a run trains, `/assets/samples.js` adds each new
//! snapshot's completions from the live feed ([`crate::LiveEvent::Samples`]) in the same markup,
//! with the same pictures. Not here: writing samples (the lab's worker).

use axum::Json;
use axum::extract::{Path, State};
use glassbox_ledger::index::queries::EntryFilter;
use glassbox_schemas::EntryKind;
use glassbox_schemas::LedgerEntry;
use glassbox_schemas::record::{EntryBody, SamplesBody};
use maud::{Markup, html};
use serde::Serialize;
use utoipa::ToSchema;

use crate::WebState;
use crate::error::WebError;

/// Most snapshots' samples read for one run (the newest).
pub const MAX_SAMPLE_ENTRIES: u32 = 200;

/// The completions written at one snapshot.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SampleRow {
    /// Its `samples` entry.
    pub entry: u64,
    /// When it was written (RFC 3339).
    pub time: String,
    /// Steps completed at the snapshot.
    pub step: u64,
    /// The snapshot's blob, when it was stored.
    pub snapshot: Option<String>,
    /// Tokens asked for per prompt.
    pub max_tokens: u32,
    /// 0 is greedy.
    pub temperature: f64,
    /// Seed of the draws.
    pub seed: u64,
    /// The prompts, as the model saw them.
    pub prompts: Vec<String>,
    /// The completion of each prompt (model output: untrusted text).
    pub texts: Vec<String>,
}

impl SampleRow {
    fn of(entry: u64, time: String, b: SamplesBody) -> Self {
        Self {
            entry,
            time,
            step: b.step,
            snapshot: b.snapshot.map(|h| h.to_string()),
            max_tokens: b.max_tokens,
            temperature: b.temperature,
            seed: b.seed,
            prompts: b.prompts,
            texts: b.texts,
        }
    }
}

/// A run's samples, newest snapshot first.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunSamples {
    /// The run.
    pub run: String,
    /// One row per snapshot, newest first.
    pub snapshots: Vec<SampleRow>,
}

/// The run's `samples` entries, newest first.
pub async fn run_sample_rows(st: &WebState, run: &str) -> Result<Vec<SampleRow>, WebError> {
    let rows = st
        .index
        .select_entries(&EntryFilter {
            run: Some(run),
            kinds: &[EntryKind::Samples],
            newest_first: true,
            limit: Some(MAX_SAMPLE_ENTRIES),
            ..EntryFilter::default()
        })
        .await?;
    Ok(rows
        .into_iter()
        .filter_map(|r| {
            let e = LedgerEntry::from_bytes(r.entry.as_bytes()).ok()?;
            match e.body {
                EntryBody::Samples(b) => Some(SampleRow::of(r.index, r.time, b)),
                _ => None,
            }
        })
        .collect())
}

/// What a run's model wrote at each snapshot (`samples` entries), newest first.
#[utoipa::path(get, path = "/api/v1/runs/{run}/samples", params(("run" = String, Path)),
    responses((status = 200, body = RunSamples)))]
pub async fn run_samples(
    State(st): State<WebState>,
    Path(run): Path<String>,
) -> Result<Json<RunSamples>, WebError> {
    let snapshots = run_sample_rows(&st, &run).await?;
    Ok(Json(RunSamples { run, snapshots }))
}

/// `text` as shown: control characters as their pictures
/// ([`glassbox_schemas::record::control_pictures`]).
pub fn visible(text: &str) -> String {
    glassbox_schemas::record::control_pictures(text)
}

/// The run page's "What it writes": per snapshot, newest first, each prompt beside its
/// completion. While `running`, the section names its run (`data-run`) and holds the
/// introduction even before the first snapshot (hidden), so `/assets/samples.js` can add the
/// snapshots that arrive live in this same markup; each snapshot names its entry
/// (`data-entry`), so one that arrives twice is shown once.
pub fn section(run: &str, rows: &[SampleRow], running: bool) -> Markup {
    html! {
        section #samples data-run=[running.then_some(run)] {
            h2 { "What it writes" }
            @if rows.is_empty() {
                p.empty {
                    @if running { "No snapshot has been sampled yet: completions appear at each snapshot when the spec has a [samples] section." }
                    @else { "This run wrote no samples (its spec has no [samples] section)." }
                }
            }
            @if running || !rows.is_empty() {
                p.meta.samples-intro hidden[rows.is_empty()] { "The model's completions of the same prompts at each snapshot, newest first. Model output, shown as written (control characters as ␀-style pictures)." }
            }
            @for r in rows {
                div.sample-step id={ "samples-step-" (r.step) } data-entry=(r.entry) {
                    h3 { "Step " (r.step) }
                    p.meta {
                        @if r.temperature == 0.0 { "greedy" } @else { "temperature " (r.temperature) ", seed " (r.seed) }
                        ", up to " (r.max_tokens) " tokens · entry "
                        a href={ "/api/v1/entries/" (r.entry) } { (r.entry) }
                    }
                    table.list.samples {
                        thead { tr { th { "Prompt" } th { "Completion" } } }
                        tbody { @for (i, p) in r.prompts.iter().enumerate() { tr {
                            td { pre.sample { (visible(p)) } }
                            td { pre.sample.completion { (visible(r.texts.get(i).map_or("", String::as_str))) } }
                        } } }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_become_pictures_and_markup_is_escaped() {
        assert_eq!(
            visible("a\u{0}b\u{7}\n\tc\u{7f}"),
            "a\u{2400}b\u{2407}\n\tc\u{2421}"
        );
        let row = SampleRow {
            entry: 3,
            time: "t".into(),
            step: 10,
            snapshot: None,
            max_tokens: 8,
            temperature: 0.0,
            seed: 0,
            prompts: vec!["<b>p".into()],
            texts: vec!["</pre><script>alert(1)</script>@someone [x](http://e)".into()],
        };
        let html = section("r", &[row], false).into_string();
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("&lt;/pre&gt;&lt;script&gt;"), "{html}");
    }
}
