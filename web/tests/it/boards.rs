//! The leaderboard and sweep pages and API through the router (`oneshot`): a leaderboard ranks only reproduced
//! runs, lists one awaiting reproduction apart and one whose reproduction differed as failed,
//! and its JSON is exactly what `BoardBuilder` derives from the log read independently; a sweep
//! page shows its children, the best one and the failed gate's badge and numbers; the sweeps
//! list, the negative-results page and a child's experiment page lead to it. The lab is the
//! fixture plus `fixture::sweep`.

use axum::http::StatusCode;
use glassbox_ledger::board::{Board, BoardBuilder};
use glassbox_ledger::merkle::LeafIndex;
use glassbox_ledger::{BlobStore, DirSource, LogReader};
use glassbox_schemas::{BlobHash, LedgerEntry};
use glassbox_web::WebState;

use crate::fixture::sweep::{self, DIFFERS, SWEEP_TITLE, board_def};
use crate::fixture::{self, Fixture};
use crate::routes::{get, json, ok, tags};

async fn lab() -> (Fixture, WebState) {
    let fx = fixture::build().await;
    sweep::add(&fx).await;
    let st = fx.state().with_boards(vec![board_def()]);
    (fx, st)
}

/// The board as anyone derives it from a copy of the log: every entry in order, specs read by
/// their hash (what the lab's `derive_boards` does).
fn board_from_the_log(fx: &Fixture) -> Board {
    let source = DirSource {
        root: fx.lab.root().to_path_buf(),
    };
    let reader = LogReader::open(&source, &fx.vkey).unwrap();
    let mut builder = BoardBuilder::new();
    for i in 0..reader.size().0 {
        let bytes = reader.entry(LeafIndex(i)).unwrap();
        builder.add(i, &LedgerEntry::from_bytes(&bytes).unwrap());
    }
    let blobs = fx.lab.blobs();
    let mut boards = builder.finish(&[board_def()], |h| {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut blobs.get(&BlobHash(h.0)).ok()?, &mut bytes).ok()?;
        serde_json::from_slice(&bytes).ok()
    });
    boards.pop().unwrap()
}

/// The part of `page` from the element with `id` to the next `<section` (or the end).
fn section<'a>(page: &'a str, id: &str) -> &'a str {
    let start = page
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} in {page}"));
    let rest = &page[start..];
    let end = rest[1..].find("<section").map_or(rest.len(), |e| e + 1);
    &rest[..end]
}

fn assert_no_inline_code(uri: &str, page: &str) {
    for (name, attrs) in tags(page) {
        assert_ne!(name, "style", "{uri}: a <style> element");
        assert_ne!(name, "script", "{uri}: these pages need no script");
        for (a, _) in attrs {
            assert_ne!(a, "style", "{uri}: a style attribute on <{name}>");
            assert!(!a.starts_with("on"), "{uri}: an inline handler {a}");
        }
    }
}

#[tokio::test]
async fn a_board_ranks_only_reproduced_runs_and_is_what_the_log_derives() {
    let (fx, st) = lab().await;

    // The API's board is the one BoardBuilder derives from the log itself.
    let got: Board = serde_json::from_value(json(&st, "/api/v1/boards/markov-loss").await).unwrap();
    let expected = board_from_the_log(&fx);
    assert_eq!(got, expected);
    assert_eq!(got.log_size, fx.index.indexed().await.unwrap());
    let ranked: Vec<(Option<u32>, &str)> = got
        .ranked
        .iter()
        .map(|r| (r.rank, r.run.0.as_str()))
        .collect();
    assert_eq!(ranked, [(Some(1), "run-7-0"), (Some(2), "run-1")]);
    assert!(
        got.ranked.iter().all(|r| r.compute.is_some() && r.pareto),
        "both are on the frontier, with compute from their specs: {:?}",
        got.ranked
    );
    assert!(got.ranked[0].compute > got.ranked[1].compute);
    let repro = &got.ranked[0].reproductions[0];
    assert_eq!(
        (
            repro.outcome.as_str(),
            repro.worker.as_deref(),
            repro.comparison.as_deref()
        ),
        ("reproduced", Some("w2"), Some("bitwise"))
    );
    let awaiting: Vec<&str> = got.awaiting.iter().map(|r| r.run.0.as_str()).collect();
    assert_eq!(
        awaiting,
        ["run-7-1"],
        "the best value is not ranked until reproduced"
    );
    let failed: Vec<&str> = got.failed.iter().map(|r| r.run.0.as_str()).collect();
    assert_eq!(failed, ["run-8"]);

    // The page: ranked rows in order, the awaiting one apart, the differing one as failed.
    let page = ok(&st, "/boards/markov-loss").await;
    assert_no_inline_code("/boards/markov-loss", &page);
    let ranked_html = section(&page, "ranked-section");
    let (a, b) = (
        ranked_html.find("run-7-0").expect("run-7-0 is ranked"),
        ranked_html.find("run-1").expect("run-1 is ranked"),
    );
    assert!(a < b, "best first");
    assert!(ranked_html.contains("bitwise") && ranked_html.contains("w3"));
    assert!(!ranked_html.contains("run-7-1") && !ranked_html.contains("run-8"));
    let awaiting_html = section(&page, "awaiting");
    assert!(awaiting_html.contains("run-7-1"), "{awaiting_html}");
    assert!(awaiting_html.contains("none yet"));
    let failed_html = section(&page, "failed");
    assert!(failed_html.contains("run-8") && failed_html.contains("differs"));
    assert!(failed_html.contains(DIFFERS), "{failed_html}");
    // The Pareto chart plots the ranked runs only, the frontier joined.
    let chart = &page[page.find("<figure").unwrap()..page.find("</figure>").unwrap()];
    assert!(chart.contains("<svg") && chart.contains("Pareto frontier"));
    assert!(
        chart.contains("#1 acme/lab#7/0 (run-7-0): FLOPs"),
        "{chart}"
    );
    assert!(chart.contains("#2 acme/lab#1 (run-1)"));
    assert!(!chart.contains("run-7-1") && !chart.contains("run-8"));

    // The list of boards, page and API.
    let list = ok(&st, "/boards").await;
    assert!(list.contains("href=\"/boards/markov-loss\""));
    let boards = json(&st, "/api/v1/boards").await;
    assert_eq!(boards[0]["name"], "markov-loss");
    for (k, n) in [("ranked", 2), ("awaiting", 1), ("failed", 1)] {
        assert_eq!(boards[0][k], n, "{k}: {boards}");
    }

    // An unknown board says so; a lab without boards says it declares none.
    let (status, _, body) = get(&st, "/boards/nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        body.contains("board \"nope\"") && body.contains("/boards"),
        "{body}"
    );
    let (status, _, _) = get(&st, "/api/v1/boards/nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let bare = fx.state();
    assert!(
        ok(&bare, "/boards")
            .await
            .contains("declares no leaderboard")
    );
    assert_eq!(json(&bare, "/api/v1/boards").await, serde_json::json!([]));
}

#[tokio::test]
async fn a_sweep_page_shows_its_children_the_best_one_and_the_gate() {
    let (_fx, st) = lab().await;
    let uri = "/sweeps/acme/lab%237";
    let page = ok(&st, uri).await;
    assert_no_inline_code(uri, &page);
    assert!(
        page.contains("Width sweep &lt;i&gt;wider&lt;/i&gt;"),
        "the title is text"
    );
    assert!(!page.contains(SWEEP_TITLE));
    // The gate's badge and numbers.
    let gate = section(&page, "gate");
    assert!(
        gate.contains("badge gate bad") && gate.contains("gate failed"),
        "{gate}"
    );
    assert!(gate.contains("tiny-moe-64"));
    let best = section(gate, "gate-best");
    assert!(
        best[..best.find("</dd>").unwrap()].contains("1.3000"),
        "{best}"
    );
    assert!(gate.contains("1.5500") && gate.contains("0.2500"), "{gate}");
    // The children, the best one marked.
    let children = section(&page, "children");
    for (i, status) in ["succeeded", "succeeded", "diverged"].iter().enumerate() {
        assert!(
            children.contains(&format!("href=\"/experiments/acme/lab%237/{i}\"")),
            "{children}"
        );
        assert!(children.contains(status));
    }
    let best = &children[children.find("<tr class=\"best\"").expect("a best row")..];
    let best = &best[..best.find("</tr>").unwrap()];
    assert!(
        best.contains("acme/lab#7/1") && best.contains("1.3000"),
        "{best}"
    );
    assert_eq!(children.matches("class=\"best\"").count(), 1);

    let v = json(&st, "/api/v1/sweeps/acme/lab%237").await;
    assert_eq!(v["gate"], "failed");
    assert_eq!(v["best"], "acme/lab#7/1");
    assert_eq!(v["sweep"]["decision"]["best"]["value"], 1.3);
    let statuses: Vec<&str> = v["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["succeeded", "succeeded", "diverged"]);
    assert_eq!(v["children"][0]["value"], 1.4);
    assert!(v["children"][2]["value"].is_null());

    // The list shows the failed gate (a negative result), and filters by it.
    let list = ok(&st, "/sweeps").await;
    assert_no_inline_code("/sweeps", &list);
    assert!(list.contains("href=\"/sweeps/acme/lab%237\"") && list.contains("gate failed"));
    assert!(ok(&st, "/sweeps?gate=failed").await.contains("acme/lab#7"));
    assert!(!ok(&st, "/sweeps?gate=passed").await.contains("acme/lab#7"));
    let (status, _, body) = get(&st, "/api/v1/sweeps?gate=maybe").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("passed, failed, pending, none"), "{body}");
    let listed = json(&st, "/api/v1/sweeps").await;
    assert_eq!(listed[0]["id"], "acme/lab#7");
    assert_eq!(listed[0]["ended"], 3);
    let negative = ok(&st, "/negative").await;
    assert!(section(&negative, "failed-gates").contains("href=\"/sweeps/acme/lab%237\""));

    // A child's page and the sweep's own experiment page lead to the sweep.
    let child = ok(&st, "/experiments/acme/lab%237/1").await;
    let link = section(&child, "sweep-link");
    let link = &link[..link.find("</p>").unwrap()];
    assert!(link.contains("href=\"/sweeps/acme/lab%237\"") && link.contains("d_model=80"));
    assert!(
        ok(&st, "/experiments/acme/lab%237")
            .await
            .contains("href=\"/sweeps/acme/lab%237\"")
    );
    let (status, _, body) = get(&st, "/sweeps/acme/lab%2399").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body.contains("sweep \"acme/lab#99\""), "{body}");
    // The navigation has both.
    assert!(list.contains("href=\"/boards\"") && list.contains("href=\"/sweeps\""));
}
