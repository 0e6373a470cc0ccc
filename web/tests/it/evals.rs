//! Evaluations on the dashboard, against the fixture's lab with [`fixture::add_evals`]: the
//! API routes (a run's evaluations, the board, the suites) and their 400s; the board's rules
//! (two versions of a suite are two columns, never averaged; a missing suite is a blank, not a
//! zero; a failed evaluation is not a result; the newest evaluation of a step counts); the run
//! page's section and the `/evals` page as HTML; and both in real headless Chromium in every
//! chart mode, with no console error, the evaluation charts drawn (coloured pixels), placed on
//! the x axis the view asks for, and screenshots in `target/screenshots/evals-*.png`.

use axum::http::StatusCode;
use fantoccini::{Client, Locator};
use serde_json::Value;

use crate::browser::{Browser, COLOURED_PIXELS_JS, console_errors, full_shot, shot, text_of};
use crate::fixture::{
    self, CHOICE_SUITE, EVAL_FAILURE, Evals, RUN1_CHOICE_300, RUN1_CHOICE_V1, TEXT_SUITE,
    TOKENS_PER_STEP,
};
use crate::observatory::{blank_charts, settle};
use crate::routes::{get, json, ok};

/// A version's first 12 hex digits, as a column key and a heading show it.
fn short(h: glassbox_schemas::Blake3Hash) -> String {
    h.to_string()["blake3:".len()..][..12].to_string()
}

fn key(suite: &str, h: glassbox_schemas::Blake3Hash) -> String {
    format!("{suite}@{}", short(h))
}

async fn lab() -> (fixture::Fixture, Evals) {
    let fx = fixture::build().await;
    let evals = fixture::add_evals(&fx).await;
    (fx, evals)
}

/// A run's evaluations: one block per suite version (newer version of a suite first), the
/// newest result of each step naming the entry it replaces, tokens and FLOPs at each step from
/// the run's counters, the failed and cancelled attempts apart and never a value.
#[tokio::test]
async fn a_runs_evaluations_fold_per_version_with_failures_apart() {
    let (fx, ev) = lab().await;
    let st = fx.state();
    let first = fx.size; // the first entry add_evals appended
    let v = json(&st, "/api/v1/runs/run-1/evaluations").await;
    let suites = v["suites"].as_array().unwrap();
    let versions: Vec<&str> = suites
        .iter()
        .map(|s| s["version"].as_str().unwrap())
        .collect();
    assert_eq!(
        versions,
        [
            ev.choice_v2.to_string(),
            ev.choice_v1.to_string(),
            ev.text.to_string()
        ],
        "{v}"
    );
    let v1 = &suites[1];
    assert_eq!(v1["suite"], CHOICE_SUITE);
    assert_eq!(
        (v1["kind"].as_str(), v1["metric"].as_str()),
        (Some("multiple_choice"), Some("acc_norm"))
    );
    assert_eq!(v1["higher_is_better"], true);
    let got: Vec<(u64, f64)> = v1["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["step"].as_u64().unwrap(),
                r["metrics"]["acc_norm"].as_f64().unwrap(),
            )
        })
        .collect();
    let mut want: Vec<(u64, f64)> = RUN1_CHOICE_V1.to_vec();
    want[2].1 = RUN1_CHOICE_300;
    assert_eq!(got, want, "the re-evaluation of step 300 counts");
    let at_300 = &v1["results"][2];
    assert_eq!(at_300["entry"], first + 10);
    assert_eq!(at_300["replaces"], serde_json::json!([first + 5]));
    assert_eq!(at_300["outcome"], "evaluated");
    assert_eq!(
        at_300["tokens"].as_f64(),
        Some((300 * TOKENS_PER_STEP) as f64)
    );
    let flops = at_300["flops"].as_f64().expect("FLOPs at the step");
    assert!(flops > at_300["tokens"].as_f64().unwrap(), "{at_300}");
    let c = &at_300["contamination"];
    assert_eq!(
        (
            c["flagged"].as_u64(),
            c["items"].as_u64(),
            c["ngram"].as_u64()
        ),
        (Some(2), Some(200), Some(13))
    );
    assert_eq!(c["fraction"].as_f64(), Some(0.01));
    assert_eq!(c["first_flagged"], serde_json::json!([3, 17]));
    assert!(at_300["results"].as_str().unwrap().starts_with("blake3:"));
    let text = &suites[2];
    assert_eq!(
        (text["metric"].as_str(), text["higher_is_better"].as_bool()),
        (Some("bpb"), Some(false))
    );
    let not: Vec<(&str, &str)> = v["not_evaluated"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["outcome"].as_str().unwrap(),
                e["detail"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        not,
        [
            ("cancelled", "cancelled by a maintainer"),
            ("failed", EVAL_FAILURE)
        ]
    );
    for e in v["not_evaluated"].as_array().unwrap() {
        assert_eq!(e["metrics"], serde_json::json!({}), "no value: {e}");
    }
    assert_eq!(v["truncated"], false);

    // One suite's; a run with none; the 400s and the 404.
    let only = json(&st, "/api/v1/runs/run-1/evaluations?suite=markov-text").await;
    assert_eq!(only["suites"].as_array().unwrap().len(), 1);
    assert_eq!(only["suites"][0]["suite"], TEXT_SUITE);
    assert!(only["not_evaluated"].as_array().unwrap().is_empty());
    let run2 = json(&st, "/api/v1/runs/run-2/evaluations").await;
    assert_eq!(run2["suites"].as_array().unwrap().len(), 1);
    assert_eq!(
        run2["suites"][0]["results"][0]["contamination"],
        Value::Null
    );
    for (uri, names) in [
        ("/api/v1/runs/run-1/evaluations?suite=Markov", "suite"),
        ("/api/v1/runs/run-1/evaluations?suite=", "suite"),
        ("/api/v1/runs/run-1/evaluations?step=3", "step"),
    ] {
        let (status, _, body) = get(&st, uri).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}: {body}");
        assert!(body.contains(names), "{uri} names {names}: {body}");
    }
    let (status, _, body) = get(&st, "/api/v1/runs/nope/evaluations").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
}

/// The board: two versions of one suite are two columns, never averaged; a run missing a
/// suite has a blank (`null`), not a zero; a failed evaluation is not a result (run-2 failed
/// on markov-choice v2: blank there); each cell is the latest step's newest evaluation, with
/// its contamination.
#[tokio::test]
async fn the_board_keeps_versions_apart_and_blanks_missing_results() {
    let (fx, ev) = lab().await;
    let st = fx.state();
    let b = json(&st, "/api/v1/evals").await;
    let keys: Vec<&str> = b["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["key"].as_str().unwrap())
        .collect();
    let (k2, k1, kt) = (
        key(CHOICE_SUITE, ev.choice_v2),
        key(CHOICE_SUITE, ev.choice_v1),
        key(TEXT_SUITE, ev.text),
    );
    assert_eq!(keys, [k2.as_str(), k1.as_str(), kt.as_str()], "{b}");
    let c0 = &b["columns"][0];
    assert_eq!(c0["version"], ev.choice_v2.to_string());
    assert_eq!(
        (
            c0["metric"].as_str(),
            c0["kind"].as_str(),
            c0["items"].as_u64()
        ),
        (Some("acc_norm"), Some("multiple_choice"), Some(220))
    );
    assert_eq!(b["columns"][2]["higher_is_better"], false);
    assert_eq!(b["columns"][2]["suite_entry"], fx.size + 1);
    let rows: Vec<(String, Vec<Option<f64>>)> = b["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["run"].as_str().unwrap().to_string(),
                r["cells"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c["value"].as_f64())
                    .collect(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("run-2".to_string(), vec![None, Some(0.35), None]),
            (
                "run-1".to_string(),
                vec![Some(0.58), Some(RUN1_CHOICE_300), Some(1.8)]
            ),
        ],
        "newest result first; blanks are null, never 0: {b}"
    );
    assert_eq!(b["rows"][0]["cells"][0], Value::Null);
    assert_eq!(b["rows"][0]["status"], "diverged");
    let cell = &b["rows"][1]["cells"][1];
    assert_eq!(
        (cell["step"].as_u64(), cell["entry"].as_u64()),
        (Some(300), Some(fx.size + 10))
    );
    assert_eq!(cell["contamination"].as_f64(), Some(0.01));
    assert_eq!(cell["stderr"].as_f64(), Some(0.0344));
    assert_eq!(b["rows"][0]["cells"][1]["contamination"], Value::Null);
    assert_eq!(
        (
            b["columns"][1]["lo"].as_f64(),
            b["columns"][1]["hi"].as_f64()
        ),
        (Some(0.35), Some(RUN1_CHOICE_300))
    );

    // Ranked by a column, best first, runs without a value last.
    let sorted = json(&st, &format!("/api/v1/evals?sort={k1}")).await;
    assert_eq!(sorted["rows"][0]["run"], "run-1");
    assert_eq!(sorted["sort"], k1);
    let sorted = json(&st, &format!("/api/v1/evals?sort={kt}")).await;
    assert_eq!(sorted["rows"][0]["run"], "run-1", "the only value first");
    let perplexity = json(&st, "/api/v1/evals?kind=perplexity").await;
    assert_eq!(perplexity["columns"].as_array().unwrap().len(), 1);
    assert_eq!(perplexity["rows"].as_array().unwrap().len(), 1);
    let one = json(&st, "/api/v1/evals?suite=markov-choice&limit=1").await;
    assert_eq!(
        (
            one["columns"].as_array().unwrap().len(),
            one["rows"].as_array().unwrap().len(),
            one["runs_total"].as_u64()
        ),
        (2, 1, Some(2))
    );
    for (uri, names) in [
        ("/api/v1/evals?kind=bogus", "kind"),
        ("/api/v1/evals?suite=Bad%20Name", "suite"),
        ("/api/v1/evals?limit=0", "limit"),
        ("/api/v1/evals?limit=101", "limit"),
        ("/api/v1/evals?limit=x", "limit"),
        ("/api/v1/evals?sort=markov-choice%40ffffffffffff", "sort"),
        ("/api/v1/evals?colour=1", "colour"),
        ("/evals?kind=bogus", "kind"),
        ("/evals?limit=0", "limit"),
        ("/evals?limit=x", "limit"),
        ("/evals?suite=No%20Such", "suite"),
    ] {
        let (status, headers, body) = get(&st, uri).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}: {body}");
        assert!(body.contains(names), "{uri} names {names}: {body}");
        assert!(
            headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/plain"),
            "{uri}"
        );
    }
    let (_, _, body) = get(&st, "/api/v1/evals?sort=nope").await;
    assert!(body.contains(&k1), "the 400 lists the keys: {body}");
}

/// Every stored suite version, in log order, filtered by name and kind.
#[tokio::test]
async fn the_suites_are_listed_with_their_versions() {
    let (fx, ev) = lab().await;
    let st = fx.state();
    let all = json(&st, "/api/v1/eval-suites").await;
    let rows: Vec<(u64, &str, &str, u64)> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["entry"].as_u64().unwrap(),
                s["name"].as_str().unwrap(),
                s["kind"].as_str().unwrap(),
                s["items"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (fx.size, CHOICE_SUITE, "multiple_choice", 200),
            (fx.size + 1, TEXT_SUITE, "perplexity", 50),
            (fx.size + 2, CHOICE_SUITE, "multiple_choice", 220),
        ]
    );
    assert_eq!(all[0]["version"], ev.choice_v1.to_string());
    assert_eq!(all[0]["licence"], "CC0-1.0");
    assert!(all[0]["source"].as_str().unwrap().contains("eval-suite"));
    let named = json(&st, "/api/v1/eval-suites?name=markov-choice").await;
    assert_eq!(named.as_array().unwrap().len(), 2);
    let kind = json(&st, "/api/v1/eval-suites?kind=perplexity").await;
    assert_eq!(kind.as_array().unwrap().len(), 1);
    for (uri, names) in [
        ("/api/v1/eval-suites?kind=choice", "kind"),
        ("/api/v1/eval-suites?name=-x", "name"),
        ("/api/v1/eval-suites?suite=x", "suite"),
    ] {
        let (status, _, body) = get(&st, uri).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}: {body}");
        assert!(body.contains(names), "{uri} names {names}: {body}");
    }
}

/// The routes are in the API's index and its OpenAPI document, with the kind as an enum.
#[tokio::test]
async fn the_api_index_and_document_name_the_evaluation_routes() {
    let fx = fixture::build().await;
    let st = fx.state();
    let index = json(&st, "/api/v1/").await;
    let hrefs: Vec<&str> = index["collections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["href"].as_str().unwrap())
        .collect();
    for h in ["/api/v1/evals", "/api/v1/eval-suites"] {
        assert!(hrefs.contains(&h), "{hrefs:?}");
    }
    let doc = json(&st, "/api/v1/openapi.json").await;
    for p in [
        "/api/v1/runs/{run}/evaluations",
        "/api/v1/evals",
        "/api/v1/eval-suites",
    ] {
        assert!(doc["paths"][p]["get"].is_object(), "OpenAPI lacks {p}");
        assert!(
            doc["paths"][p]["get"]["responses"]["400"].is_object(),
            "{p} documents its 400"
        );
    }
    let kind = &doc["components"]["schemas"]["SuiteKind"]["enum"];
    assert_eq!(
        kind,
        &serde_json::json!(["perplexity", "multiple_choice"]),
        "{kind}"
    );
    let limit = doc["paths"]["/api/v1/evals"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "limit")
        .unwrap()["schema"]
        .clone();
    assert_eq!(
        (limit["minimum"].as_f64(), limit["maximum"].as_f64()),
        (Some(1.0), Some(100.0))
    );
    // With no evaluation on the log, the board and the run's section say so.
    let b = json(&st, "/api/v1/evals").await;
    assert_eq!(b["columns"], serde_json::json!([]));
    let page = ok(&st, "/runs/run-1").await;
    assert!(
        page.contains("This run&#39;s snapshots were not evaluated")
            || page.contains("This run's snapshots were not evaluated"),
        "one line of empty state"
    );
    let page = ok(&st, "/evals").await;
    assert!(page.contains("No run has been evaluated yet"), "{page}");
}

/// The run page's section and the board page as HTML: the right numbers, blanks as blanks,
/// untrusted text escaped, the board in the navigation.
#[tokio::test]
async fn the_pages_show_results_contamination_and_blanks() {
    let (fx, ev) = lab().await;
    let st = fx.state();
    let page = ok(&st, "/runs/run-1").await;
    let section = page
        .split("<section id=\"evaluations\">")
        .nth(1)
        .and_then(|s| s.split("</section>").next())
        .expect("the Evaluations section");
    assert_eq!(section.matches("class=\"eval-suite\"").count(), 3);
    assert!(
        section.contains("2 of 200 items (1.0%) share a 13-gram with the training data"),
        "{section}"
    );
    assert!(section.contains("0.6150 ± 0.0344"), "{section}");
    assert!(section.contains("replaces #"), "{section}");
    assert!(
        section.contains("worker lost its lease &lt;b&gt;mid-suite&lt;/b&gt;"),
        "{section}"
    );
    assert!(!section.contains("<b>mid-suite"), "{section}");
    assert!(
        section.contains(&format!(
            "id=\"eval-{CHOICE_SUITE}-{}\"",
            short(ev.choice_v1)
        )),
        "{section}"
    );
    // Each chart carries its points for the chart script (steps and values).
    assert!(
        section.contains("&quot;points&quot;:[[100,0.41],[200,0.52],[300,0.615]]"),
        "{section}"
    );

    let board = ok(&st, "/evals").await;
    assert!(board.contains("<a href=\"/evals\" class=\"current\">Evals</a>"));
    let table = board
        .split("id=\"eval-board\"")
        .nth(1)
        .and_then(|s| s.split("</table>").next())
        .unwrap();
    assert_eq!(table.matches("class=\"cell blank\"").count(), 2, "{table}");
    assert!(table.contains(">0.3500<"), "{table}");
    assert!(table.contains("1.0% contam."), "{table}");
    assert!(table.contains("contamination not checked"), "{table}");
    assert!(table.contains("class=\"cell q8\""), "{table}");
    assert!(
        !table.contains(">0.0000<"),
        "a blank is never a zero: {table}"
    );
    assert!(board.contains("id=\"suite-list\""));
    // The filter form sends its empty fields: an empty field is no filter.
    let filtered = ok(&st, "/evals?suite=&kind=perplexity&limit=").await;
    assert_eq!(filtered.matches("class=\"cell ").count(), 1, "{filtered}");
    let all = ok(&st, "/evals?suite=&kind=").await;
    assert_eq!(all.matches("class=\"cell ").count(), 6);
}

/// The pages in every chart mode of the other browser tests.
const PAGES: &[(&str, &str)] = &[
    ("run", "/runs/run-1"),
    ("run-logy", "/runs/run-1?logy=1"),
    ("run-smooth", "/runs/run-1?smooth=0.8"),
    ("run-x-tokens", "/runs/run-1?x=tokens"),
    ("run-x-flops", "/runs/run-1?x=flops"),
    ("run-x-time", "/runs/run-1?x=time"),
    ("run-2", "/runs/run-2"),
    ("board", "/evals"),
    ("board-perplexity", "/evals?kind=perplexity"),
];

/// Brings the run page's Evaluations section to the top of the window (for a screenshot of it).
const SCROLL_TO_EVALUATIONS: &str =
    "document.getElementById('evaluations').scrollIntoView(); return null;";

/// The evaluation charts of the page: (title, coloured pixels, last x, points drawn).
async fn eval_charts(c: &Client) -> Vec<(String, u64, f64, u64)> {
    let script = format!(
        "{COLOURED_PIXELS_JS} return (window.glassboxCharts || []) \
           .filter(ch => ch.el.closest('#evaluations') && ch.plot) \
           .map(ch => {{ const xs = ch.plot.data[0]; \
             return [ch.title, colouredPixels(ch.plot.ctx.canvas), xs.length ? xs[xs.length - 1] : null, xs.length]; }});"
    );
    let v = c.execute(&script, vec![]).await.unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x[0].as_str().unwrap_or_default().to_string(),
                x[1].as_u64().unwrap_or(0),
                x[2].as_f64().unwrap_or(f64::NAN),
                x[3].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_draws_evaluations_in_every_mode() {
    let (fx, _) = lab().await;
    let st = fx.state();
    let api = json(&st, "/api/v1/runs/run-1/evaluations").await;
    let at_300 = &api["suites"][1]["results"][2];
    let (tokens, flops) = (
        at_300["tokens"].as_f64().unwrap(),
        at_300["flops"].as_f64().unwrap(),
    );
    let b = Browser::start(st).await;
    let c = b.session(true).await;
    let mut failures = Vec::new();
    for (name, path) in PAGES {
        c.goto(&format!("{}{path}", b.base)).await.unwrap();
        if !settle(&c).await {
            failures.push(format!("{name}: the charts never finished drawing"));
        }
        let errors = console_errors(&c).await;
        if !errors.is_empty() {
            failures.push(format!("{name} ({path}): console errors {errors:?}"));
        }
        let blank = blank_charts(&c).await;
        if !blank.is_empty() {
            failures.push(format!("{name} ({path}): blank charts {blank:?}"));
        }
        if name.starts_with("run") && *name != "run-2" {
            let charts = eval_charts(&c).await;
            if charts.len() != 3 {
                failures.push(format!("{name}: {} evaluation charts drawn", charts.len()));
            }
            // Where the last point (step 300) sits on this mode's x axis.
            let want = match *path {
                p if p.ends_with("x=tokens") => Some(tokens),
                p if p.ends_with("x=flops") => Some(flops),
                p if p.ends_with("x=time") => None,
                _ => Some(300.0),
            };
            for (title, pixels, last_x, n) in &charts {
                // A line through three points, or one point's marker (about 40 pixels).
                let least = if *n > 1 { 200 } else { 20 };
                if *pixels < least {
                    failures.push(format!("{name}: {title} has {pixels} coloured pixels"));
                }
                if let Some(w) = want {
                    if (last_x - w).abs() > w * 1e-9 {
                        failures.push(format!("{name}: {title} ends at x {last_x}, not {w}"));
                    }
                }
                if !title.contains("markov-choice") && !title.contains("markov-text") {
                    failures.push(format!("{name}: a chart titled {title:?}"));
                }
                if *n == 0 {
                    failures.push(format!("{name}: {title} has no points"));
                }
            }
        }
        if *name == "run-2" {
            let section = text_of(&c, "#evaluations").await.unwrap_or_default();
            if !section.contains("the snapshot's weights are not finite") {
                failures.push(format!("{name}: the failure reads {section:?}"));
            }
        }
        if name.starts_with("board") {
            let cells = c
                .find_all(Locator::Css("#eval-board td.cell"))
                .await
                .unwrap()
                .len();
            let want = if *name == "board" { 6 } else { 1 };
            if cells != want {
                failures.push(format!("{name}: {cells} cells, not {want}"));
            }
        }
        full_shot(&c, &format!("evals-{name}")).await;
    }
    // A zoom on the evaluation chart (drag across steps 150-300) narrows every chart.
    c.goto(&format!("{}/runs/run-1", b.base)).await.unwrap();
    settle(&c).await;
    c.execute("return window.glassboxZoom(150, 300)", vec![])
        .await
        .unwrap();
    let shown = crate::browser::eventually("the zoomed evaluation chart", || async {
        let charts = eval_charts(&c).await;
        let v1 = charts
            .iter()
            .find(|(t, _, _, n)| t.contains("markov-choice") && *n == 2)?;
        Some(v1.3)
    })
    .await;
    assert_eq!(shown, 2, "steps 200 and 300 of markov-choice v1");
    c.execute(SCROLL_TO_EVALUATIONS, vec![]).await.unwrap();
    shot(&c, "evals-run-zoomed").await;

    // Without JavaScript the server's SVG of each evaluation chart is the chart.
    let nojs = b.session(false).await;
    nojs.goto(&format!("{}/runs/run-1", b.base)).await.unwrap();
    let lines = nojs
        .find_all(Locator::Css(
            "#evaluations figure.chart svg polyline, #evaluations figure.chart svg path",
        ))
        .await
        .unwrap();
    if lines.is_empty() {
        failures.push("no-JS run page: no evaluation line in the SVGs".into());
    }
    let hovers = nojs
        .find_all(Locator::Css("#evaluations figure.chart circle.hp title"))
        .await
        .unwrap();
    if hovers.len() < 7 {
        failures.push(format!(
            "no-JS run page: {} hover points, not one per result",
            hovers.len()
        ));
    }
    nojs.execute(SCROLL_TO_EVALUATIONS, vec![]).await.unwrap();
    shot(&nojs, "evals-run-nojs").await;
    nojs.close().await.unwrap();
    c.close().await.unwrap();
    b.stop().await;
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A leaderboard may rank by an evaluation metric: run-1 (reproduced) is ranked by its last
/// snapshot's result on markov-choice's newest version (v2, 0.58 — not v1's 0.615), with the
/// evaluation entry it comes from on the page and in the API.
#[tokio::test]
async fn a_leaderboard_ranks_by_an_evaluation_of_the_last_snapshot() {
    use glassbox_ledger::board::{BoardDef, ComputeAxis};
    use glassbox_schemas::sweep::Direction;
    let (fx, _) = lab().await;
    fx.append(&[fixture::entry(
        Some("acme/lab#1"),
        std::collections::BTreeMap::new(),
        fixture::sweep::reproduction(
            "run-1",
            "reproduced",
            glassbox_schemas::record::Comparison::Bitwise,
            "w2",
            None,
        ),
    )])
    .await;
    let st = fx.state().with_boards(vec![BoardDef {
        name: "choice".into(),
        metric: format!("eval:{CHOICE_SUITE}/acc_norm"),
        direction: Direction::Max,
        compute: ComputeAxis::Flops,
    }]);
    let b = json(&st, "/api/v1/boards/choice").await;
    let ranked = b["ranked"].as_array().unwrap();
    assert_eq!(ranked.len(), 1, "{b}");
    assert_eq!(ranked[0]["run"], "run-1");
    assert_eq!(ranked[0]["value"].as_f64(), Some(0.58));
    assert_eq!(ranked[0]["value_entry"], fx.size + 9);
    let page = ok(&st, "/boards/choice").await;
    assert!(
        page.contains(&format!("evaluation #{}", fx.size + 9)),
        "{page}"
    );
    assert!(page.contains("of their last snapshot"), "{page}");
}
