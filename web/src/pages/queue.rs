//! The Queue page: running jobs, waiting jobs in the order they will run (priority, author,
//! estimated duration and start), held jobs, and the last that finished. The estimates and their
//! assumptions are `crate::queue`'s; this file only draws them. The same view is
//! `/api/v1/queue`.

use axum::extract::State;
use maud::{Markup, html};

use super::{Nav, encode_path, experiment_href, frame, status_badge};
use crate::WebState;
use crate::error::WebError;
use crate::queue::{QueueRow, QueueView};

/// A duration for people: `45 s`, `12 min`, `3.5 h`, `2.0 days`; `–` when unknown.
pub fn duration(seconds: Option<f64>) -> String {
    match seconds {
        None => "–".into(),
        Some(s) if !s.is_finite() => "–".into(),
        Some(s) if s < 90.0 => format!("{s:.0} s"),
        Some(s) if s < 90.0 * 60.0 => format!("{:.0} min", s / 60.0),
        Some(s) if s < 48.0 * 3600.0 => format!("{:.1} h", s / 3600.0),
        Some(s) => format!("{:.1} days", s / 86400.0),
    }
}

fn table(rows: &[QueueRow], what: &str, empty: &str) -> Markup {
    html! {
        @if rows.is_empty() {
            p.empty { (empty) }
        } @else {
            table.list id=(what) {
                thead { tr {
                    // Only waiting jobs have a place in line.
                    @if what == "waiting" { th title="place in line: 1 runs next" { "#" } }
                    th { "Job" } th { "Experiment" } th { "Kind" } th { "Author" }
                    th { "Priority" } th { "State" } th { "Run" }
                    @if what == "finished" {
                        th title="the run's wall time, start to result" { "Took" }
                        th title="from enqueued to ended, waiting included" { "Queued to end" }
                    } @else {
                        th { "Estimated duration" }
                    }
                    @if what == "waiting" { th { "Starts in" } }
                    @if what == "running" { th { "Ends in" } }
                    @if what != "waiting" && what != "running" { th { "Note" } }
                } }
                tbody {
                    @for r in rows {
                        tr {
                            @if what == "waiting" {
                                td.num { (r.position.map(|p| p.to_string()).unwrap_or_default()) }
                            }
                            td { (r.job.id) }
                            td { a href=(experiment_href(&r.job.experiment)) { (r.job.experiment) } }
                            td { (r.job.kind) }
                            td { (r.job.author) }
                            td.num { (r.job.priority) }
                            td { (status_badge(&r.job.state)) }
                            td { @if let Some(run) = &r.job.run { a href={ "/runs/" (encode_path(run)) } { (run) } } }
                            @if what == "finished" {
                                td.num { (duration(r.took_seconds)) }
                                td.num { (duration(r.queued_to_end_seconds)) }
                            } @else {
                                td.num { (duration(r.estimated_seconds)) }
                            }
                            @if what == "waiting" || what == "running" {
                                td.num { (duration(r.estimated_start_in_seconds)) }
                            } @else if what == "held" {
                                td { (r.job.reason.as_deref().unwrap_or("held by a maintainer; `/unhold` releases it")) }
                            } @else {
                                td { (r.job.reason.as_deref().unwrap_or("")) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The page's body for a view.
pub fn body(v: &QueueView) -> Markup {
    html! {
        h1 { "Queue" }
        p.lead {
            "Approved experiments run in this order: higher priority first, then first approved. "
            @match v.measured_flops_per_second {
                Some(r) => {
                    "Estimates use the cost model's FLOPs at the lab's measured rate, "
                    (format!("{:.3e}", r)) " FLOP/s (median of its last " (v.measured_runs) " finished runs), with "
                    (v.workers) " worker" @if v.workers != 1 { "s" } "."
                }
                None => { "No run has finished with a measured throughput yet, so there are no time estimates." }
            }
            " As JSON: " a href="/api/v1/queue" { "/api/v1/queue" } "."
        }
        h2 { "Running" }
        (table(&v.running, "running", "Nothing is running."))
        h2 { "Waiting" }
        (table(&v.waiting, "waiting", "Nothing is waiting."))
        h2 { "Held" }
        (table(&v.held, "held", "Nothing is held."))
        h2 { "Finished last" }
        (table(&v.finished, "finished", "Nothing has finished yet."))
    }
}

/// `GET /queue`.
pub async fn page(State(st): State<WebState>) -> Result<Markup, WebError> {
    let body = match crate::queue::view(&st).await? {
        Some(v) => body(&v),
        None => html! {
            h1 { "Queue" }
            p.empty { "This dashboard serves a published log and is not attached to a lab's job queue." }
        },
    };
    Ok(frame("Queue", Nav::Queue, false, body))
}

#[cfg(test)]
mod tests {
    use super::duration;

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(duration(None), "–");
        assert_eq!(duration(Some(f64::NAN)), "–");
        assert_eq!(duration(Some(42.4)), "42 s");
        assert_eq!(duration(Some(600.0)), "10 min");
        assert_eq!(duration(Some(3.0 * 3600.0)), "3.0 h");
        assert_eq!(duration(Some(3.0 * 86400.0)), "3.0 days");
    }
}
