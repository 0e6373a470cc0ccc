//! A run's notes and anomalies in the API: `/api/v1/runs/{run}/annotations` lists
//! the fixture's note on run-1, the edit that superseded it (both kept, the old one marked) and
//! the lab's anomaly; the OpenAPI document describes the route; the page shows the text escaped
//! and marks the run with an anomaly badge, as the experiments list does.

use axum::http::StatusCode;

use crate::fixture::{NOTE_TEXT, build};
use crate::routes::get;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_notes_and_anomalies_are_served() {
    let fx = build().await;
    let st = fx.state();
    let (status, _, body) = get(&st, "/api/v1/runs/run-1/annotations").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let marks = v["marks"].as_array().unwrap();
    assert_eq!(marks.len(), 3, "{body}");
    let (old, new, anomaly) = (&marks[0], &marks[1], &marks[2]);
    assert_eq!(old["superseded_by"], new["entry"]);
    assert_eq!(new["supersedes"], old["entry"]);
    assert_eq!(new["text"], NOTE_TEXT);
    assert_eq!(
        (new["from_step"].as_u64(), new["to_step"].as_u64()),
        (Some(140), Some(160))
    );
    assert_eq!(new["label"], "maintainer");
    assert_eq!(anomaly["kind"], "anomaly");
    assert_eq!(anomaly["label"], "grad_norm_spike");
    assert_eq!(anomaly["from_step"], 150);
    let (_, _, none) = get(&st, "/api/v1/runs/run-2/annotations").await;
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&none).unwrap()["marks"],
        serde_json::json!([])
    );

    let (_, _, doc) = get(&st, "/api/v1/openapi.json").await;
    let doc: serde_json::Value = serde_json::from_str(&doc).unwrap();
    assert!(doc["paths"]["/api/v1/runs/{run}/annotations"]["get"].is_object());
    assert!(doc["components"]["schemas"]["RunMark"].is_object());

    let (_, _, page) = get(&st, "/experiments/acme/lab%231").await;
    assert!(
        page.contains("norm spike from &lt;i&gt;router_bias&lt;/i&gt;"),
        "escaped"
    );
    assert!(!page.contains("<i>router_bias</i>"));
    // The dashboard marks the run: a badge on its row and on the experiments list, linking to
    // the notes; run-2 has none.
    assert!(page.contains("⚠ 1 anomaly"), "the run's row has the badge");
    let (_, _, list) = get(&st, "/experiments").await;
    assert_eq!(
        list.matches("⚠ 1 anomaly").count(),
        1,
        "only acme/lab#1 is marked"
    );
    let (_, _, runs) = get(&st, "/api/v1/runs/run-1").await;
    let runs: serde_json::Value = serde_json::from_str(&runs).unwrap();
    assert_eq!(runs["anomalies"], 1, "{runs}");
}

/// A run's log page: the worker's log of each attempt, warnings and errors highlighted, text
/// escaped, a search that keeps matching lines, and a bound on the search.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_log_is_shown_with_levels_and_search() {
    let fx = build().await;
    let st = fx.state();
    let (status, _, page) = get(&st, "/runs/run-2/log").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains("Attempt 1"), "{page}");
    // Each line numbered, in a gutter of its own, with its level's class.
    assert!(
        page.contains(
            "<span class=\"warn\"><span class=\"ln\">2</span>2026-12-01T10:00:01Z warn heartbeat"
        ),
        "{page}"
    );
    assert!(
        page.contains(
            "<span class=\"error\"><span class=\"ln\">3</span>2026-12-01T10:00:09Z error"
        ),
        "{page}"
    );
    assert!(page.contains("pre class=\"log numbered\""), "{page}");
    assert!(page.contains("&lt;script&gt;x&lt;/script&gt;") && !page.contains("<script>x"));
    assert!(page.contains("3 of 3 lines"), "{page}");
    let (_, _, found) = get(&st, "/runs/run-2/log?q=RETRYING").await;
    assert!(
        found.contains("1 of 1 lines matching") && !found.contains("leased by"),
        "{found}"
    );
    // A line found keeps its number.
    assert!(found.contains("<span class=\"ln\">2</span>"), "{found}");
    let (_, _, tail) = get(&st, "/runs/run-2/log?lines=1").await;
    assert!(
        tail.contains("1 of 3 lines") && tail.contains("non-finite"),
        "{tail}"
    );
    let long = format!("/runs/run-2/log?q={}", "x".repeat(201));
    let (status, _, _) = crate::routes::get(&st, &long).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (_, _, none) = get(&st, "/runs/run-1/log").await;
    assert!(none.contains("No log is stored for this run yet"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_samples_are_served_newest_first_and_shown_as_text() {
    let fx = build().await;
    let st = fx.state();
    let (status, _, body) = get(&st, "/api/v1/runs/run-1/samples").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let snaps = v["snapshots"].as_array().unwrap();
    assert_eq!(snaps.len(), 2, "{body}");
    assert_eq!(
        (snaps[0]["step"].as_u64(), snaps[1]["step"].as_u64()),
        (Some(300), Some(150))
    );
    assert_eq!(snaps[1]["texts"][0], crate::fixture::SAMPLE_TEXT_150);
    assert_eq!(snaps[0]["prompts"][1], "To be, or");
    let (_, _, doc) = get(&st, "/api/v1/openapi.json").await;
    assert!(
        doc.contains("/api/v1/runs/{run}/samples"),
        "the route is not documented"
    );
    let (_, _, page) = get(&st, "/runs/run-1").await;
    assert!(page.contains("What it writes"));
    assert!(
        !page.contains("<script>alert('model')"),
        "model output ran as markup"
    );
    assert!(page.contains("&lt;/pre&gt;&lt;script&gt;alert('model')"));
    // A run without samples says why there are none.
    let (_, _, other) = get(&st, "/runs/run-2").await;
    assert!(other.contains("wrote no samples"), "{other}");
}
