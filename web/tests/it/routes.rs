//! Route tests of the dashboard: every page and API endpoint through the axum router with
//! `oneshot` (no socket), including escaping of proposer text, path traversal on `/log/` and
//! `/blobs/`, caching headers, the OpenAPI document, SSE and `/metrics`, cached pages following
//! live points and new entries (and not other experiments' entries); then a real server on
//! 127.0.0.1:0 audited by the ledger's HTTP audit (what `glassbox verify URL` does), and a
//! graceful shutdown with a live stream open.

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use glassbox_ledger::HttpSource;
use glassbox_ledger::audit::{AuditOptions, audit};
use glassbox_web::{LiveEvent, app};
use http_body_util::BodyExt;
use tower::ServiceExt;

pub(crate) async fn get(
    state: &glassbox_web::WebState,
    uri: &str,
) -> (StatusCode, HeaderMap, String) {
    let resp = app(state.clone())
        .oneshot(Request::get(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

pub(crate) async fn ok(state: &glassbox_web::WebState, uri: &str) -> String {
    let (status, headers, body) = get(state, uri).await;
    assert_eq!(status, StatusCode::OK, "{uri}: {body}");
    assert!(
        headers["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("script-src 'self'"),
        "{uri} has the CSP"
    );
    body
}

pub(crate) async fn json(state: &glassbox_web::WebState, uri: &str) -> serde_json::Value {
    let body = ok(state, uri).await;
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{uri}: {e}: {body}"))
}

#[tokio::test]
async fn pages_render_and_escape_proposer_text() {
    let fx = crate::fixture::build().await;
    let st = fx.state();

    let list = ok(&st, "/").await;
    assert!(list.contains("acme/lab#1") && list.contains("acme/lab#3"));
    assert!(list.contains("Tiny MoE &lt;script&gt;"), "title escaped");
    assert!(
        !list.contains("<script>alert"),
        "no raw script from a title"
    );
    // Filters, sorting, paging.
    let ladder_only = ok(&st, "/experiments?tag=ladder").await;
    assert!(ladder_only.contains("acme/lab#2") && !ladder_only.contains("acme/lab#3"));
    let bob = ok(&st, "/experiments?author=BOB").await;
    assert!(bob.contains("acme/lab#3") && !bob.contains("acme/lab#1\""));
    let diverged = ok(&st, "/experiments?status=diverged").await;
    assert!(
        diverged.contains("acme/lab#2") && !diverged.contains("href=\"/experiments/acme/lab%231\"")
    );
    let text = ok(&st, "/experiments?q=narrow").await;
    assert!(text.contains("acme/lab#2") && !text.contains("href=\"/experiments/acme/lab%233\""));
    let sorted = ok(&st, "/experiments?sort=final_loss&dir=asc").await;
    let (a, b) = (
        sorted.find("lab%231").unwrap(),
        sorted.find("lab%232").unwrap(),
    );
    assert!(a < b, "lower final loss first");
    let paged = ok(&st, "/experiments?per_page=1&page=2&sort=id&dir=asc").await;
    assert!(paged.contains("page 2 of 3") && paged.contains("acme/lab#2"));
    let (status, _, body) = get(&st, "/experiments?sort=nonsense").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body.contains("final_loss"),
        "names the valid columns: {body}"
    );

    let exp = ok(&st, "/experiments/acme/lab%231").await;
    assert!(
        exp.contains("&lt;script&gt;alert(&#39;hyp&#39;)&lt;/script&gt;")
            || exp.contains("&lt;script&gt;alert('hyp')&lt;/script&gt;")
    );
    assert!(!exp.contains("<script>alert"));
    for want in [
        "Hypothesis",
        "Forecast vs outcome",
        "hit",
        // The forecast's checkpoint before run-1 began, signed by the lab's log.
        "Pre-registration proof",
        "glassbox ledger proof precedes ",
        "test.example/glassbox\n",
        "https://github.com/acme/lab/issues/1",
        "Loss (train and eval per domain)",
        "Learning rate",
        "Gradient norm",
        "Throughput",
        "Router: routing entropy",
        "Router: bias norm per layer",
        "Router: expert load, layer 0",
        "<svg",
        "<title>train/loss: step",
        "spec hash",
        "[model.moe]",
        "inclusion proof",
        "/api/v1/entries/11/proof",
        "download",
    ] {
        assert!(exp.contains(want), "experiment page lacks {want:?}");
    }
    let (status, _, _) = get(&st, "/experiments/acme/lab%2399").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, _) = get(&st, "/experiments/acme/lab%231?run=run-9").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // A run has a page of its own: how it ended, its numbers, its links.
    let run = ok(&st, "/runs/run-1").await;
    for want in [
        "id=\"summary\"",
        "Final metrics",
        "<code>train/loss</code>",
        "href=\"/runs/run-1/log\"",
        "href=\"/data/runs/run-1\"",
        "href=\"/experiments/acme/lab%231\"",
        "id=\"hardware\"",
        "id=\"snapshots\"",
        "Took",
    ] {
        assert!(run.contains(want), "run page lacks {want:?}");
    }
    assert_eq!(get(&st, "/runs/run-99").await.0, StatusCode::NOT_FOUND);

    let live = ok(&st, "/live/run-1").await;
    assert!(
        live.contains("/assets/charts.js") && live.contains("data-live=\"[&quot;run-1&quot;]\""),
        "{live}"
    );
    assert!(live.contains("<svg") && live.contains("data-series="));
    assert_eq!(get(&st, "/live/nope").await.0, StatusCode::NOT_FOUND);
    // The chart controls are in the URL; a bad one names the field.
    let view = ok(
        &st,
        "/experiments/acme/lab%231?logy=1&smooth=0.6&x=flops&from=10&to=200",
    )
    .await;
    assert!(
        view.contains("name=\"logy\" value=\"1\" checked"),
        "log-y ticked"
    );
    assert!(view.contains("<option value=\"flops\" selected>"));
    assert!(view.contains("data-flops-per-token") || view.contains("flops_per_token"));
    let (status, _, body) = get(&st, "/experiments/acme/lab%231?x=epochs").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body.contains("x=\"epochs\"") && body.contains("flops"),
        "{body}"
    );
    // An expert-load heatmap for a step range, with the layer in its hover values.
    let (status, h, svg) = get(&st, "/runs/run-1/heatmap/0?from=100&to=200").await;
    assert_eq!(status, StatusCode::OK, "{svg}");
    assert_eq!(h["content-type"], "image/svg+xml");
    assert!(
        svg.contains("<title>layer 0, expert 3, steps 100-"),
        "{svg}"
    );
    let (status, h, svg) = get(&st, "/runs/run-1/heatmap/7").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(h["content-type"], "image/svg+xml");
    assert!(
        svg.contains("no expert-load points of run run-1 in steps 0 to the end"),
        "{svg}"
    );

    let cmp = ok(&st, "/compare?run=run-1&run=run-2").await;
    assert!(cmp.contains("model.d_model") && cmp.contains(">64<") && cmp.contains(">32<"));
    assert!(cmp.contains("<title>run-2: step"));
    // Final metrics with the best (lowest) train/loss marked: run-1's.
    let best = format!(
        "{} ★",
        glassbox_web::pages::num(Some(crate::fixture::loss_at(300)))
    );
    assert!(cmp.contains(&best), "{cmp}");
    assert_eq!(
        cmp.matches(" ★</td>").count(),
        2,
        "train/loss and eval/markov/loss"
    );
    assert!(cmp.contains("id=\"parcoords\"") && cmp.contains("model.d_model"));
    let two = ok(
        &st,
        "/compare?run=run-1&run=run-2&metric=train%2Floss&metric=grad%2Fnorm%2Ftotal",
    )
    .await;
    assert_eq!(
        two.matches("<figure class=\"chart\"").count(),
        2,
        "one chart per metric"
    );
    assert!(ok(&st, "/compare").await.contains("Pick 2 to 8 runs"));
    let nine = (0..9)
        .map(|i| format!("run=r{i}"))
        .collect::<Vec<_>>()
        .join("&");
    assert_eq!(
        get(&st, &format!("/compare?{nine}")).await.0,
        StatusCode::BAD_REQUEST
    );

    let ladder = ok(&st, "/ladder").await;
    assert!(
        ladder.contains("eval/markov/loss")
            && ladder.contains("E = 1.2000")
            && ladder.contains("alpha_stderr")
    );
    let data = ok(&st, "/data").await;
    assert!(data.contains("generator:markov seed=7") && data.contains("generator markov seed=7"));
    let neg = ok(&st, "/negative").await;
    assert!(neg.contains("run-2") && neg.contains("loss became NaN") && !neg.contains(">run-1<"));
    let ledger = ok(&st, "/ledger").await;
    assert!(ledger.contains(&format!("{} entries", fx.size)));
    assert!(ledger.contains("glassbox verify http://") && ledger.contains(&fx.vkey.to_string()));

    let css = get(&st, "/assets/style.css").await;
    assert!(
        css.1["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/css")
    );
    let js = get(&st, "/assets/charts.js").await;
    assert!(js.2.contains("EventSource") && js.2.contains("uPlot"));
    assert_eq!(js.1["cache-control"], "public, max-age=300");
    for vendor in [
        glassbox_web::pages::assets::UPLOT_JS,
        glassbox_web::pages::assets::UPLOT_CSS,
    ] {
        let (status, h, body) = get(&st, vendor).await;
        assert_eq!(status, StatusCode::OK, "{vendor}");
        assert_eq!(h["cache-control"], "public, max-age=31536000, immutable");
        assert!(body.contains("uplot"), "{vendor}");
    }
}

/// Every attribute name of every tag in `html` (a small scanner: quotes respected).
pub(crate) fn tags(html: &str) -> Vec<(String, Vec<(String, String)>)> {
    let b = html.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'<' && i + 1 < b.len() && b[i + 1].is_ascii_alphabetic() {
            let mut j = i + 1;
            while j < b.len() && !b[j].is_ascii_whitespace() && b[j] != b'>' && b[j] != b'/' {
                j += 1;
            }
            let name = html[i + 1..j].to_ascii_lowercase();
            let mut attrs = Vec::new();
            loop {
                while j < b.len() && (b[j].is_ascii_whitespace() || b[j] == b'/') {
                    j += 1;
                }
                if j >= b.len() || b[j] == b'>' {
                    break;
                }
                let start = j;
                while j < b.len() && !b"= \t\n>/".contains(&b[j]) {
                    j += 1;
                }
                let attr = html[start..j].to_ascii_lowercase();
                let mut value = String::new();
                if j < b.len() && b[j] == b'=' {
                    j += 1;
                    if j < b.len() && (b[j] == b'"' || b[j] == b'\'') {
                        let q = b[j];
                        let vs = j + 1;
                        j = vs;
                        while j < b.len() && b[j] != q {
                            j += 1;
                        }
                        value = html[vs..j.min(b.len())].to_string();
                        j += 1;
                    } else {
                        let vs = j;
                        while j < b.len() && !b[j].is_ascii_whitespace() && b[j] != b'>' {
                            j += 1;
                        }
                        value = html[vs..j].to_string();
                    }
                }
                attrs.push((attr, value));
            }
            out.push((name, attrs));
            i = j;
        }
        i += 1;
    }
    out
}

#[tokio::test]
async fn no_page_has_inline_script_or_style() {
    let fx = crate::fixture::build().await;
    let st = fx.state();
    for uri in [
        "/",
        "/experiments?tag=tiny",
        "/experiments/acme/lab%231",
        "/experiments/acme/lab%231?run=run-1&logy=1&smooth=0.5&x=flops&from=5&to=250",
        "/experiments/acme/lab%232",
        "/live/run-1",
        "/compare",
        "/compare?run=run-1&run=run-2&metric=train%2Floss&metric=grad%2Fnorm%2Ftotal",
        "/ladder",
        "/data",
        "/negative",
        "/ledger",
        "/runs/run-1/heatmap/0",
        "/boards",
        "/sweeps",
    ] {
        let body = ok(&st, uri).await;
        let tags = tags(&body);
        assert!(tags.len() > 3, "{uri}: parsed");
        let mut scripts = 0;
        for (name, attrs) in &tags {
            assert_ne!(name, "style", "{uri}: a <style> element");
            for (a, v) in attrs {
                assert_ne!(a, "style", "{uri}: a style attribute on <{name}>");
                assert!(
                    !(a.starts_with("on") && a.len() > 2),
                    "{uri}: an inline handler {a} on <{name}>"
                );
                assert!(
                    !v.trim_start()
                        .to_ascii_lowercase()
                        .starts_with("javascript:"),
                    "{uri}: a javascript: URL"
                );
            }
            if name == "script" {
                scripts += 1;
                let src = attrs.iter().find(|(a, _)| a == "src").map(|(_, v)| v);
                assert!(
                    src.is_some_and(|s| s.starts_with("/assets/")),
                    "{uri}: a script that is not one of ours: {attrs:?}"
                );
            }
        }
        // Every script element is empty: `<script src=...></script>`.
        assert_eq!(body.matches("></script>").count(), scripts, "{uri}");
        if uri.starts_with("/experiments/") || uri.starts_with("/live/") {
            assert!(scripts >= 2, "{uri}: uPlot and the chart script");
        }
    }
}

#[tokio::test]
async fn api_answers_what_the_pages_show() {
    let fx = crate::fixture::build().await;
    let st = fx.state();

    let list = json(&st, "/api/v1/experiments?sort=id&dir=asc").await;
    assert_eq!(list["total"], 3);
    assert_eq!(list["items"][0]["id"], "acme/lab#1");
    assert_eq!(list["items"][0]["forecast_hit"], true);
    assert_eq!(list["items"][1]["status"], "diverged");
    assert_eq!(list["items"][2]["status"], "rejected");

    let exp = json(&st, "/api/v1/experiments/acme/lab%231").await;
    assert_eq!(exp["experiment"]["title"], crate::fixture::EVIL_TITLE);
    assert_eq!(exp["experiment"]["spec"]["tags"][0], "tiny");
    assert_eq!(exp["runs"][0]["id"], "run-1");
    assert_eq!(exp["forecasts"][0]["method"], "scaling_law");
    assert!(exp["entries"].as_array().unwrap().len() >= 5);
    assert_eq!(
        get(&st, "/api/v1/experiments/none").await.0,
        StatusCode::NOT_FOUND
    );

    let runs = json(&st, "/api/v1/runs?status=diverged").await;
    assert_eq!(runs.as_array().unwrap().len(), 1);
    let run = json(&st, "/api/v1/runs/run-1").await;
    assert_eq!(run["status"], "succeeded");
    assert_eq!(run["steps"], 300);
    assert_eq!(get(&st, "/api/v1/runs/zzz").await.0, StatusCode::NOT_FOUND);

    let names = json(&st, "/api/v1/runs/run-1/metrics").await;
    assert!(
        names["names"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n == "train/router/layer_0/expert_load/3")
    );
    let s = json(&st, "/api/v1/runs/run-1/metrics/train/loss").await;
    assert_eq!(s["total_points"], 300);
    assert_eq!(s["points"].as_array().unwrap().len(), 300);
    let s = json(
        &st,
        "/api/v1/runs/run-1/metrics/train/loss?from=101&to=200&max_points=10",
    )
    .await;
    assert_eq!(s["total_points"], 100);
    let pts = s["points"].as_array().unwrap();
    assert_eq!(pts.len(), 10);
    assert_eq!(pts[0][0], 101);
    assert_eq!(pts[9][0], 200);
    // The spike survives downsampling.
    let g = json(
        &st,
        "/api/v1/runs/run-1/metrics/grad/norm/total?max_points=20",
    )
    .await;
    assert!(g["points"].as_array().unwrap().iter().any(|p| p[1] == 9.0));
    assert_eq!(
        get(&st, "/api/v1/runs/run-1/metrics/train/loss?from=5&to=1")
            .await
            .0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        get(&st, "/api/v1/runs/run-1/metrics/nope").await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get(&st, "/api/v1/runs/run-1/metrics/train/loss?from=x")
            .await
            .0,
        StatusCode::BAD_REQUEST
    );

    let entries = json(&st, "/api/v1/entries?kind=result").await;
    assert_eq!(entries.as_array().unwrap().len(), 2);
    let page = json(&st, "/api/v1/entries?after=100&limit=5").await;
    assert_eq!(page[0]["idx"], 101);
    assert_eq!(page.as_array().unwrap().len(), 5);
    let e = json(&st, "/api/v1/entries/11").await;
    assert_eq!(e["kind"], "result");
    assert_eq!(e["entry"]["body"]["run"], "run-1");
    assert_eq!(
        get(&st, "/api/v1/entries/99999").await.0,
        StatusCode::NOT_FOUND
    );

    // The proof verifies against the served checkpoint's root.
    let p = json(&st, "/api/v1/entries/11/proof").await;
    assert_eq!(p["tree_size"], fx.size);
    let proof: Vec<glassbox_ledger::MerkleHash> = p["proof"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            use base64::Engine as _;
            let b = base64::engine::general_purpose::STANDARD
                .decode(h.as_str().unwrap())
                .unwrap();
            glassbox_ledger::MerkleHash::from_slice(&b).unwrap()
        })
        .collect();
    let leaf = glassbox_ledger::MerkleHash::from_hex(p["leaf_hash"].as_str().unwrap()).unwrap();
    let root = {
        use base64::Engine as _;
        let b = base64::engine::general_purpose::STANDARD
            .decode(p["root"].as_str().unwrap())
            .unwrap();
        glassbox_ledger::MerkleHash::from_slice(&b).unwrap()
    };
    glassbox_ledger::merkle::verify_inclusion(
        &leaf,
        glassbox_ledger::LeafIndex(11),
        glassbox_ledger::TreeSize(fx.size),
        &proof,
        &root,
    )
    .unwrap();
    assert_eq!(
        get(&st, &format!("/api/v1/entries/{}/proof", fx.size))
            .await
            .0,
        StatusCode::NOT_FOUND
    );

    assert_eq!(json(&st, "/api/v1/datasets").await[0]["domain"], "markov");
    let ladder = json(&st, "/api/v1/ladder").await;
    assert_eq!(ladder[0]["metric"], "eval/markov/loss");
    assert_eq!(ladder[0]["law"]["alpha"], 0.3);
    let neg = json(&st, "/api/v1/negative").await;
    assert_eq!(neg[0]["id"], "run-2");
    let cmp = json(&st, "/api/v1/compare?run=run-1&run=run-2").await;
    assert_eq!(cmp[0]["spec"]["model.d_model"], "64");
    assert_eq!(cmp[1]["spec"]["model.d_model"], "32");
    let l = json(&st, "/api/v1/ledger").await;
    assert_eq!(l["size"], fx.size);
    assert_eq!(l["vkey"], fx.vkey.to_string());
}

/// `GET /api/v1/` (and without the slash) is an index a client can start from: the OpenAPI
/// document and every collection, each of which answers.
#[tokio::test]
async fn the_api_root_is_an_index_whose_links_answer() {
    let fx = crate::fixture::build().await;
    let st = fx.state();
    for root in ["/api/v1/", "/api/v1"] {
        let index = json(&st, root).await;
        assert_eq!(index["openapi"], "/api/v1/openapi.json", "{index}");
        let links = index["collections"].as_array().unwrap();
        assert!(links.len() >= 10, "{index}");
        for l in links {
            let href = l["href"].as_str().unwrap();
            let (status, _, body) = get(&st, href).await;
            assert_eq!(status, StatusCode::OK, "{href}: {body}");
        }
    }
    let doc = json(&st, "/api/v1/openapi.json").await;
    assert!(doc["paths"]["/api/v1/"].is_object());
}

/// The negative results say why each run is there, even when its result gives no reason (a
/// forecast it missed), and the pager stops at the last page.
#[tokio::test]
async fn negative_results_give_a_reason_and_the_pager_ends() {
    use glassbox_schemas::record::{ForecastOutcome, ResultBody, RunEnding};
    let fx = crate::fixture::build().await;
    let hash: glassbox_schemas::SpecHash =
        json(&fx.state(), "/api/v1/runs/run-2").await["spec_hash"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
    let miss = crate::fixture::entry(
        Some("acme/lab#2"),
        std::collections::BTreeMap::new(),
        ResultBody {
            run: glassbox_schemas::RunId::from("run-miss"),
            spec_hash: hash,
            ending: RunEnding {
                status: glassbox_schemas::RunStatus::Succeeded,
                steps: 300,
                final_metrics: [("eval/markov/loss".to_string(), 2.0)]
                    .into_iter()
                    .collect(),
                reason: None,
            },
            forecast: Some(ForecastOutcome::settle(
                "eval/markov/loss",
                1.5,
                0.2,
                Some(2.0),
            )),
            params_blake3: None,
        },
    );
    fx.append(&[miss]).await;
    let st = fx.state();
    let page = ok(&st, "/negative").await;
    let row = page
        .split("<tr>")
        .find(|r| r.contains(">run-miss<"))
        .expect("the missed forecast is a negative result");
    assert!(
        row.contains(
            "missed its forecast: eval/markov/loss = 1.5000 ± 0.2000 predicted, 2.0000 measured"
        ),
        "{row}"
    );
    assert!(row.contains(">miss<"), "one verdict word: {row}");
    assert!(!page.contains("refuted"), "{page}");
    assert!(
        !page.contains("next →"),
        "one page of results has no next page: {page}"
    );
    let api = json(&st, "/api/v1/negative").await;
    let run = api
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == "run-miss")
        .unwrap();
    assert_eq!(run["forecast"]["verdict"], "miss");
    assert_eq!(run["forecast"]["error"], 0.5);
}

#[tokio::test]
async fn openapi_lists_every_api_route() {
    let fx = crate::fixture::build().await;
    let doc = json(&fx.state(), "/api/v1/openapi.json").await;
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let paths = doc["paths"].as_object().unwrap();
    for p in [
        "/api/v1/experiments",
        "/api/v1/experiments/{id}",
        "/api/v1/runs",
        "/api/v1/runs/{run}",
        "/api/v1/runs/{run}/metrics",
        "/api/v1/runs/{run}/metrics/{name}",
        "/api/v1/runs/{run}/series",
        "/api/v1/runs/{run}/live",
        "/api/v1/entries",
        "/api/v1/entries/{idx}",
        "/api/v1/entries/{idx}/proof",
        "/api/v1/datasets",
        "/api/v1/ladder",
        "/api/v1/negative",
        "/api/v1/compare",
        "/api/v1/ledger",
        "/api/v1/boards",
        "/api/v1/boards/{name}",
        "/api/v1/sweeps",
        "/api/v1/sweeps/{id}",
    ] {
        assert!(paths.contains_key(p), "OpenAPI lacks {p}");
    }
    assert!(doc["components"]["schemas"]["ExperimentRow"].is_object());
    assert!(doc["components"]["schemas"]["SweepView"].is_object());
}

/// The OpenAPI document is as strict as the server, and the server as the document: every
/// operation with a query parameter or a numeric path parameter documents its 400 (a text/plain
/// body naming the parameter); bounds, enums and list sizes are in the schema; and a value
/// outside them is answered 400 naming the parameter, never 200.
#[tokio::test]
async fn openapi_names_every_bound_enum_and_error_and_the_server_keeps_them() {
    let fx = crate::fixture::build().await;
    let st = fx.state();
    let doc = json(&st, "/api/v1/openapi.json").await;
    let mut undocumented = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        let op = &item["get"];
        let params = op["parameters"].as_array().cloned().unwrap_or_default();
        let can_be_malformed = params
            .iter()
            .any(|p| p["in"] == "query" || (p["in"] == "path" && p["schema"]["type"] == "integer"));
        if can_be_malformed && !op["responses"]["400"].is_object() {
            undocumented.push(path.clone());
        }
        for code in ["400", "404"] {
            if let Some(r) = op["responses"][code].as_object() {
                assert!(
                    r.get("content")
                        .is_none_or(|c| c.get("text/plain").is_some()),
                    "{path} {code} is text/plain: {r:?}"
                );
            }
        }
    }
    assert!(
        undocumented.is_empty(),
        "no 400 documented: {undocumented:?}"
    );
    let param = |path: &str, name: &str| -> serde_json::Value {
        doc["paths"][path]["get"]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{path} has no parameter {name}"))["schema"]
            .clone()
    };
    let limit = param("/api/v1/entries", "limit");
    assert_eq!(
        (limit["minimum"].as_f64(), limit["maximum"].as_f64()),
        (Some(1.0), Some(1000.0))
    );
    for (path, name) in [
        ("/api/v1/runs/{run}/metrics/{name}", "to"),
        ("/api/v1/runs/{run}/series", "from"),
        ("/api/v1/entries/{idx}", "idx"),
        ("/api/v1/entries", "after"),
    ] {
        assert_eq!(
            param(path, name)["maximum"].as_f64(),
            Some(9007199254740991.0),
            "{path} {name}"
        );
    }
    assert_eq!(param("/api/v1/compare", "run")["maxItems"], 8);
    assert_eq!(param("/api/v1/compare", "run")["minItems"], 2);
    assert_eq!(param("/api/v1/runs/{run}/series", "name")["maxItems"], 64);
    let names = |schema: serde_json::Value| -> Vec<String> {
        // An optional enum is `oneOf: [null, {enum}]` or a plain enum, by utoipa's version.
        let found = schema["enum"]
            .as_array()
            .or_else(|| {
                schema["oneOf"]
                    .as_array()?
                    .iter()
                    .find_map(|s| s["enum"].as_array())
            })
            .unwrap_or_else(|| panic!("no enum in {schema}"));
        found
            .iter()
            .filter_map(|v| v.as_str().map(String::from))
            .collect()
    };
    assert_eq!(
        names(param("/api/v1/experiments", "sort")),
        glassbox_web::catalog::SORT_COLUMNS
    );
    assert_eq!(names(param("/api/v1/experiments", "dir")), ["asc", "desc"]);
    assert_eq!(
        names(param("/api/v1/sweeps", "gate")),
        glassbox_web::pages::sweeps::GATE_STATES
    );

    for (uri, names_it) in [
        ("/api/v1/entries?limit=2147483648", "limit"),
        ("/api/v1/entries?limit=1001", "limit"),
        ("/api/v1/entries?limit=0", "limit"),
        ("/api/v1/entries?after=9223372036854775808", "after"),
        ("/api/v1/entries/-1", "idx"),
        ("/api/v1/entries/18446744073709551615/proof", "idx"),
        (
            "/api/v1/runs/run-1/metrics/train%2Floss?to=9223372036854775808",
            "to",
        ),
        (
            "/api/v1/runs/run-1/metrics/train%2Floss?max_points=100001",
            "max_points",
        ),
        ("/api/v1/runs/run-1/series?name=train%2Floss&from=x", "from"),
        ("/api/v1/experiments?per_page=501", "per_page"),
        ("/api/v1/experiments?page=0", "page"),
        ("/api/v1/experiments?sort=nope", "sort"),
    ] {
        let (status, headers, body) = get(&st, uri).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}: {body}");
        assert!(
            body.contains(names_it),
            "{uri}: the answer names {names_it}: {body}"
        );
        assert!(
            headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/plain"),
            "{uri}"
        );
    }
}

#[tokio::test]
async fn static_log_serves_the_layout_with_cache_headers_and_refuses_traversal() {
    let fx = crate::fixture::build().await;
    let st = fx.state();
    let (status, h, body) = get(&st, "/log/checkpoint").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(h["cache-control"], "no-cache");
    assert!(body.starts_with("test.example/glassbox\n"));
    // 269 entries: tile 0 is full, tile 1 partial.
    assert!(fx.size > 256 && fx.size < 512);
    let w = fx.size - 256;
    for (path, cache) in [
        (
            "/log/tile/0/000".to_string(),
            "public, max-age=31536000, immutable",
        ),
        (
            "/log/tile/entries/000".to_string(),
            "public, max-age=31536000, immutable",
        ),
        (format!("/log/tile/0/001.p/{w}"), "no-cache"),
        (format!("/log/tile/entries/001.p/{w}"), "no-cache"),
        ("/log/tile/1/000.p/1".to_string(), "no-cache"),
    ] {
        let (status, h, _) = get(&st, &path).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert_eq!(h["cache-control"], cache, "{path}");
    }
    let hex = fx.snapshot_blob.to_hex();
    for path in [
        format!("/blobs/{}/{}", &hex[..2], &hex[2..]),
        format!("/blobs/blake3:{hex}"),
    ] {
        let (status, h, body) = get(&st, &path).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert_eq!(h["cache-control"], "public, max-age=31536000, immutable");
        assert_eq!(body, "fake safetensors checkpoint of run-1");
    }
    assert_eq!(get(&st, "/vkey").await.2.trim(), fx.vkey.to_string());
    for bad in [
        "/log/../keys/ledger.key",
        "/log/tile/../../keys/ledger.key",
        "/log/tile/0/..%2F..%2F..%2Fkeys%2Fledger.key",
        "/log/tile/%2E%2E/%2E%2E/keys/ledger.key",
        "/log/keys/ledger.key",
        "/blobs/../keys/ledger.key",
        "/blobs/..%2Fkeys%2Fledger.key",
        "/blobs/%2E%2E/keys",
        "/blobs/blake3:..%2F..%2Fkeys%2Fledger.key",
        "/blobs/blake3:0000000000000000000000000000000000000000000000000000000000000000",
        "/blobs/ab/cd",
        "/keys/ledger.key",
        "/index.db",
        "/ledger.lock",
    ] {
        let (status, _, body) = get(&st, bad).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{bad}");
        assert!(!body.contains("PRIVATE"), "{bad} leaked a key");
    }
}

#[tokio::test]
async fn ops_health_metrics_body_cap_and_security_headers() {
    let fx = crate::fixture::build().await;
    /// A part of the server the web crate does not know (the binary adds the lab's queue).
    struct Gauges;
    impl glassbox_web::ops::MetricsSource for Gauges {
        fn prometheus_text(&self) -> glassbox_web::ops::MetricsText<'_> {
            Box::pin(async { Ok("# TYPE glassbox_test_gauge gauge\nglassbox_test_gauge 7".into()) })
        }
    }
    let st = fx.state().with_metrics(std::sync::Arc::new(Gauges));
    assert_eq!(ok(&st, "/healthz").await, "ok\n");
    fx.live.publish(LiveEvent::Point {
        run: "run-9".into(),
        step: 1,
        name: "throughput/tokens_per_second".into(),
        value: 1234.5,
    });
    let _ = ok(&st, "/experiments").await;
    let (_, h, m) = get(&st, "/metrics").await;
    assert!(
        h["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    for want in [
        "glassbox_http_requests_total{route=\"/experiments\",status=\"200\"} 1",
        "glassbox_test_gauge 7\n",
        "glassbox_tokens_per_second 1234.5",
        "glassbox_live_subscribers 0",
    ] {
        assert!(m.contains(want), "/metrics lacks {want:?}:\n{m}");
    }
    // Body cap: a declared large body is refused before any handler reads it.
    let resp = app(st.clone())
        .oneshot(
            Request::post("/experiments")
                .header("content-length", "1000000")
                .body(Body::from(vec![b'x'; 1_000_000]))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // Read-only: no write methods on pages.
    let resp = app(st.clone())
        .oneshot(Request::post("/experiments").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
    let (_, h, _) = get(&st, "/ledger").await;
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert_eq!(h["x-frame-options"], "DENY");
    assert!(
        h["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("default-src 'none'")
    );
}

#[tokio::test]
async fn extra_routes_are_merged() {
    let fx = crate::fixture::build().await;
    let extra =
        axum::Router::new().route("/github/webhook", axum::routing::post(|| async { "hook" }));
    let st = fx.state().with_extra(extra);
    let resp = app(st)
        .oneshot(
            Request::post("/github/webhook")
                .body(Body::from("{}"))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
}

#[tokio::test]
async fn sse_streams_the_runs_live_events_only() {
    let fx = crate::fixture::build().await;
    let st = fx.state();
    let resp = app(st.clone())
        .oneshot(
            Request::get("/api/v1/runs/run-7/live")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut body = resp.into_body();
    fx.live.publish(LiveEvent::Point {
        run: "other".into(),
        step: 1,
        name: "train/loss".into(),
        value: 9.0,
    });
    fx.live.publish(LiveEvent::Point {
        run: "run-7".into(),
        step: 5,
        name: "train/loss".into(),
        value: 2.5,
    });
    fx.live.publish(LiveEvent::Log {
        run: "run-7".into(),
        line: "2026-12-03T10:00:00Z warn retrying <b>the lease</b>".into(),
    });
    // The run log page shows the lines so far (escaped) and follows new ones.
    let log_page = ok(&st, "/runs/run-7/log").await;
    assert!(
        log_page.contains("<span class=\"warn\">2026-12-03T10:00:00Z warn retrying &lt;b&gt;the lease&lt;/b&gt;</span>"),
        "{log_page}"
    );
    assert!(log_page.contains("src=\"/assets/runlog.js\""), "{log_page}");
    assert!(
        !log_page.contains("uPlot"),
        "no chart scripts on a log page"
    );
    fx.live.publish(LiveEvent::Status {
        run: "run-7".into(),
        status: glassbox_schemas::RunPhase::Ended(glassbox_schemas::RunStatus::Succeeded),
    });
    let mut text = String::new();
    while !text.contains("succeeded") {
        let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
            .await
            .expect("an event within 5 s")
            .unwrap()
            .unwrap();
        if let Ok(d) = frame.into_data() {
            text.push_str(&String::from_utf8_lossy(&d));
        }
    }
    assert!(
        text.contains("event: point\ndata: {\"type\":\"point\",\"run\":\"run-7\",\"step\":5"),
        "{text}"
    );
    assert!(text.contains("event: status"));
    assert!(
        text.contains("event: log\ndata: {\"type\":\"log\",\"run\":\"run-7\",\"line\":"),
        "{text}"
    );
    assert!(!text.contains("\"other\""));
    // The live point is also drawn on the run's live page.
    let charts = ok(&st, "/live/run-7").await;
    assert!(
        charts.contains("<title>train/loss: step 5, value 2.50000</title>"),
        "{charts}"
    );
}

/// A snapshot's completions reach a subscriber of the run's live feed as one `samples` event
/// whose data is the documented JSON, cut to its bounds with `truncated` saying so; another
/// run's never does.
#[tokio::test]
async fn sse_streams_a_snapshots_samples_bounded_as_documented() {
    use glassbox_web::live::{MAX_LIVE_SAMPLE_BYTES, MAX_LIVE_SAMPLES};
    let fx = crate::fixture::build().await;
    let st = fx.state();
    let resp = app(st.clone())
        .oneshot(
            Request::get("/api/v1/runs/run-7/live")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let texts: Vec<String> = (0..MAX_LIVE_SAMPLES + 1)
        .map(|i| match i {
            0 => "</pre><script>alert(1)</script>\u{7}".to_string(),
            1 => "x".repeat(MAX_LIVE_SAMPLE_BYTES + 10),
            _ => format!("t{i}"),
        })
        .collect();
    let samples = |run: &str| glassbox_schemas::record::SamplesBody {
        run: run.into(),
        step: 40,
        snapshot: None,
        max_tokens: 16,
        temperature: 0.5,
        seed: 9,
        prompts: (0..texts.len()).map(|i| format!("p{i}")).collect(),
        texts: texts.clone(),
    };
    fx.live.publish(LiveEvent::samples(11, &samples("other")));
    fx.live.publish(LiveEvent::samples(12, &samples("run-7")));
    let mut text = String::new();
    while !text.contains("\n\n") || !text.contains("event: samples") {
        let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
            .await
            .expect("an event within 5 s")
            .unwrap()
            .unwrap();
        if let Ok(d) = frame.into_data() {
            text.push_str(&String::from_utf8_lossy(&d));
        }
    }
    let data = text
        .lines()
        .skip_while(|l| *l != "event: samples")
        .nth(1)
        .and_then(|l| l.strip_prefix("data: "))
        .unwrap_or_else(|| panic!("a samples event: {text}"));
    let got: serde_json::Value = serde_json::from_str(data).unwrap();
    let mut want_samples: Vec<serde_json::Value> = (0..MAX_LIVE_SAMPLES)
        .map(|i| serde_json::json!({ "prompt": format!("p{i}"), "text": texts[i] }))
        .collect();
    want_samples[1]["text"] = "x".repeat(MAX_LIVE_SAMPLE_BYTES).into();
    assert_eq!(
        got,
        serde_json::json!({
            "type": "samples",
            "run": "run-7",
            "entry": 12,
            "step": 40,
            "max_tokens": 16,
            "temperature": 0.5,
            "seed": 9,
            "samples": want_samples,
            "total": MAX_LIVE_SAMPLES + 1,
            "truncated": true,
        })
    );
    assert!(!text.contains("\"other\""), "{text}");
    // The event is in the OpenAPI document, with the fields a client reads.
    let doc = json(&st, "/api/v1/openapi.json").await;
    let live = doc["components"]["schemas"]["LiveEvent"].to_string();
    for field in ["\"samples\"", "\"truncated\"", "\"total\"", "\"entry\""] {
        assert!(live.contains(field), "LiveEvent lacks {field}: {live}");
    }
    assert!(doc["components"]["schemas"]["LiveSample"].is_object());
    // A finished run's page has nothing to follow: no samples script, no run to follow.
    let finished = ok(&st, "/runs/run-1").await;
    assert!(finished.contains("<section id=\"samples\">"), "{finished}");
    assert!(!finished.contains("/assets/samples.js"), "{finished}");
    let (status, headers, script) = get(&st, "/assets/samples.js").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/javascript")
    );
    assert!(script.contains("textContent") && !script.contains("innerHTML"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_server_passes_the_ledger_http_audit_and_shuts_down_gracefully() {
    let fx = crate::fixture::build().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(glassbox_web::serve_on(
        listener,
        fx.state(),
        Default::default(),
        async {
            let _ = stop_rx.await;
        },
    ));
    let base = format!("http://{addr}/");
    let vkey = fx.vkey.clone();
    let report = tokio::task::spawn_blocking(move || {
        audit(&HttpSource::new(&base), &vkey, AuditOptions::default())
    })
    .await
    .unwrap()
    .expect("the source can be read")
    .expect("the audit passes");
    assert_eq!(report.entries, fx.size);
    assert!(report.blobs >= 4, "blobs re-hashed: {}", report.blobs);

    // An SSE client stays connected; shutdown ends its stream and the server returns.
    let mut sse = tokio::net::TcpStream::connect(addr).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    sse.write_all(b"GET /api/v1/runs/run-1/live HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 256];
    let n = sse.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    stop_tx.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("graceful shutdown completes with a live stream open")
        .unwrap()
        .unwrap();
}

/// Appends `entries` (experiment, body) to the fixture's log and indexes them; returns
/// the index of the first.
async fn append(
    fx: &crate::fixture::Fixture,
    entries: Vec<(Option<&str>, glassbox_schemas::record::ArtifactBody)>,
) -> u64 {
    let first = fx.index.indexed().await.unwrap();
    let batch = entries
        .into_iter()
        .map(|(exp, body)| {
            glassbox_schemas::LedgerEntry::new(
                exp.map(|x| glassbox_schemas::ExperimentId(x.into())),
                Default::default(),
                body,
            )
            .to_canonical_bytes()
            .unwrap()
        })
        .collect();
    let w = fx.lab.writer(glassbox_ledger::LockMode::Wait).unwrap();
    w.append_batch(batch).unwrap();
    drop(w);
    let source = glassbox_ledger::DirSource {
        root: fx.lab.root().to_path_buf(),
    };
    let reader = glassbox_ledger::LogReader::open(&source, &fx.vkey).unwrap();
    fx.index.sync(&reader).await.unwrap();
    first
}

fn render_cache_count(metrics: &str, result: &str) -> u64 {
    let prefix = format!("glassbox_render_cache_requests_total{{result=\"{result}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn cached_pages_follow_live_points_and_new_entries() {
    let fx = crate::fixture::build().await;
    let st = fx.state();
    let uri = "/experiments/acme/lab%231?run=run-1";
    let first = ok(&st, uri).await;
    assert_eq!(ok(&st, uri).await, first, "the same page again");
    let m = ok(&st, "/metrics").await;
    assert_eq!(
        (
            render_cache_count(&m, "hit"),
            render_cache_count(&m, "miss")
        ),
        (1, 1)
    );

    // A live point of the run drawn: the next request draws it.
    fx.live.publish(LiveEvent::Point {
        run: "run-1".into(),
        step: 987_654,
        name: "train/loss".into(),
        value: 1.25,
    });
    let live = ok(&st, uri).await;
    assert!(live.contains("<title>train/loss: step 987654, value 1.25000</title>"));
    assert!(ok(&st, "/live/run-1").await.contains("step 987654"));

    // An entry about another experiment: the index grew, the cached page still holds.
    let other = append(
        &fx,
        vec![(
            Some("acme/lab#2"),
            glassbox_schemas::record::ArtifactBody {
                name: "other.txt".into(),
                bytes: 0,
                run: None,
            },
        )],
    )
    .await;
    // Past the catalog's catch-up interval (100 ms), so the new index position is seen.
    tokio::time::sleep(Duration::from_millis(150)).await;
    let hits = render_cache_count(&ok(&st, "/metrics").await, "hit");
    assert_eq!(ok(&st, uri).await, live);
    assert!(!live.contains(&format!("/api/v1/entries/{other}/proof")));
    let m = ok(&st, "/metrics").await;
    assert_eq!(
        render_cache_count(&m, "hit"),
        hits + 1,
        "served from the cache"
    );

    // An entry about this experiment: the page is drawn again and shows it.
    let mine = append(
        &fx,
        vec![(
            Some("acme/lab#1"),
            glassbox_schemas::record::ArtifactBody {
                name: "notes.txt".into(),
                bytes: 0,
                run: Some(glassbox_schemas::RunId("run-1".into())),
            },
        )],
    )
    .await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    let misses = render_cache_count(&ok(&st, "/metrics").await, "miss");
    let after = ok(&st, uri).await;
    assert!(after.contains(&format!("/api/v1/entries/{mine}/proof")));
    let m = ok(&st, "/metrics").await;
    assert_eq!(render_cache_count(&m, "miss"), misses + 1, "drawn again");
}

#[tokio::test]
async fn finished_pages_are_drawn_once_and_then_read_from_disk() {
    let fx = crate::fixture::build().await;
    let uri = "/experiments/acme/lab%231?run=run-1";
    let first = ok(&fx.state(), uri).await;
    let cache = fx.lab.root().join("web-cache");
    let files = |dir: &std::path::Path| -> usize {
        std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .map(|e| std::fs::read_dir(e.path()).map(|f| f.count()).unwrap_or(0))
                    .sum()
            })
            .unwrap_or(0)
    };
    assert_eq!(files(&cache), 1, "one page written");
    // A new server (nothing in memory) reads the page from disk instead of drawing it.
    let st = fx.state();
    assert_eq!(ok(&st, uri).await, first);
    let m = ok(&st, "/metrics").await;
    assert!(
        m.contains("glassbox_page_cache_reads_total{result=\"hit\"} 1")
            && m.contains("glassbox_page_cache_writes_total 0"),
        "{m}"
    );
    // Other views are drawn, not written: the files stay one per page of a finished run.
    let _ = ok(&st, "/experiments/acme/lab%231?run=run-1&logy=1&from=3").await;
    assert_eq!(files(&cache), 1);
    // An entry about the experiment: drawn again, written again, in place.
    let mine = append(
        &fx,
        vec![(
            Some("acme/lab#1"),
            glassbox_schemas::record::ArtifactBody {
                name: "notes.txt".into(),
                bytes: 0,
                run: Some(glassbox_schemas::RunId("run-1".into())),
            },
        )],
    )
    .await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    let st = fx.state();
    let after = ok(&st, uri).await;
    assert!(after.contains(&format!("/api/v1/entries/{mine}/proof")));
    assert_eq!(files(&cache), 1);
    assert!(
        ok(&st, "/metrics")
            .await
            .contains("glassbox_page_cache_writes_total 1")
    );
    // Without a cache directory nothing is written.
    let none = fx.state().with_page_cache(None);
    let _ = ok(&none, "/experiments/acme/lab%232").await;
    assert_eq!(files(&cache), 1);
}

#[tokio::test]
async fn a_finished_runs_ranges_come_from_its_overview_without_reading_the_series() {
    let fx = crate::fixture::build().await;
    let st = fx.state();
    let whole = json(
        &st,
        "/api/v1/runs/run-1/metrics/train/loss?max_points=100000",
    )
    .await;
    assert_eq!(whole["total_points"], 300);
    // The run has ended, so the index holds its curves' overviews; a curve of 300 points is
    // whole in its overview, which answers every range: the series itself is never read.
    let m = ok(&st, "/metrics").await;
    assert!(m.contains("glassbox_series_cache_points 0\n"), "{m}");
    // A range of the kept series, every point when the range is narrower than asked for.
    let part = json(
        &st,
        "/api/v1/runs/run-1/metrics/train/loss?from=140&to=160&max_points=500",
    )
    .await;
    assert_eq!(part["total_points"], 21);
    let pts = part["points"].as_array().unwrap();
    assert_eq!(pts.len(), 21);
    assert_eq!(pts[0][0], 140);
    assert_eq!(pts[0][1], crate::fixture::loss_at(140));
    // Several metrics in one request, in the order asked; one without points in the range.
    let batch = json(
        &st,
        "/api/v1/runs/run-1/series?name=grad%2Fnorm%2Ftotal&name=train%2Floss&name=nope&from=100&to=199&max_points=10",
    )
    .await;
    let series = batch["series"].as_array().unwrap();
    assert_eq!(series.len(), 3);
    assert_eq!(series[0]["name"], "grad/norm/total");
    assert_eq!(series[0]["total_points"], 100);
    assert_eq!(series[0]["points"].as_array().unwrap().len(), 10);
    assert!(
        series[0]["points"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p[0] == 150 && p[1] == 9.0),
        "the spike survives downsampling"
    );
    assert_eq!(series[1]["name"], "train/loss");
    assert_eq!(
        (
            series[2]["name"].as_str(),
            series[2]["total_points"].as_u64()
        ),
        (Some("nope"), Some(0))
    );
    for (bad, says) in [
        ("/api/v1/runs/run-1/series", "1 to 64"),
        ("/api/v1/runs/run-1/series?name=a&from=x", "from = \"x\""),
        ("/api/v1/runs/run-1/series?name=a&from=9&to=3", "after"),
        (
            "/api/v1/runs/run-1/series?name=a&colour=red",
            "unknown parameter",
        ),
    ] {
        let (status, _, body) = get(&st, bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
        assert!(body.contains(says), "{bad}: {body}");
    }
    let many = (0..65)
        .map(|i| format!("name=m{i}"))
        .collect::<Vec<_>>()
        .join("&");
    assert_eq!(
        get(&st, &format!("/api/v1/runs/run-1/series?{many}"))
            .await
            .0,
        StatusCode::BAD_REQUEST
    );
    // The cap is the documented maximum: asked for, it is answered; past it, refused.
    let capped = json(
        &st,
        "/api/v1/runs/run-1/metrics/train/loss?max_points=100000",
    )
    .await;
    assert_eq!(capped["points"].as_array().unwrap().len(), 300);
    assert_eq!(
        get(
            &st,
            "/api/v1/runs/run-1/metrics/train/loss?max_points=999999999"
        )
        .await
        .0,
        StatusCode::BAD_REQUEST
    );
    assert!(
        ok(&st, "/metrics")
            .await
            .contains("glassbox_series_cache_points 0\n")
    );
}

/// The public queue page and `/api/v1/queue`, from the jobs the binary hands in:
/// running, waiting in lease order with positions, held with the reason, the last finished;
/// a dashboard without a queue says so (404 on the API).
#[tokio::test]
async fn the_queue_page_and_api_show_the_jobs_in_the_order_they_run() {
    use glassbox_web::queue::{QueueFuture, QueueJob, QueueJobs, QueueSource};
    let fx = crate::fixture::build().await;
    let cat = json(&fx.state(), "/api/v1/experiments/acme/lab%231").await;
    let hash = cat["experiment"]["spec_hash"].as_str().unwrap().to_string();
    struct Jobs(String);
    impl QueueSource for Jobs {
        fn jobs(&self, finished: u32) -> QueueFuture<'_> {
            let job = |id: i64, priority: i64, state: &str, author: &str| QueueJob {
                id,
                kind: "run".into(),
                experiment: "acme/lab#1".into(),
                spec_hash: self.0.clone(),
                author: author.into(),
                priority,
                state: state.into(),
                run: (state == "running").then(|| format!("run-{id}")),
                worker: (state == "running").then(|| "w1".to_string()),
                reason: (state == "cancelled").then(|| "cancelled by @maint".to_string()),
                created_at_ms: 0,
                updated_at_ms: 0,
            };
            assert!(finished >= 1);
            Box::pin(async move {
                Ok(QueueJobs {
                    open: vec![
                        job(13, 0, "queued", "carol"),
                        job(12, 0, "held", "bob"),
                        job(11, 0, "running", "ann"),
                        job(14, 3, "queued", "<b>dave</b>"),
                    ],
                    finished: vec![
                        job(10, 0, "cancelled", "erin"),
                        QueueJob {
                            run: Some("run-1".into()),
                            created_at_ms: 1_000,
                            updated_at_ms: 61_000,
                            ..job(9, 0, "succeeded", "ann")
                        },
                    ],
                    now_ms: 0,
                })
            })
        }
    }
    let bare = fx.state();
    let page = ok(&bare, "/queue").await;
    assert!(page.contains("not attached to a lab's job queue"), "{page}");
    assert_eq!(get(&bare, "/api/v1/queue").await.0, StatusCode::NOT_FOUND);

    let st = fx.state().with_queue(std::sync::Arc::new(Jobs(hash)));
    let v = json(&st, "/api/v1/queue").await;
    let ids = |k: &str| -> Vec<i64> {
        v[k].as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_i64().unwrap())
            .collect()
    };
    assert_eq!(ids("running"), vec![11]);
    assert_eq!(ids("waiting"), vec![14, 13], "priority 3 runs first");
    assert_eq!(ids("held"), vec![12]);
    assert_eq!(ids("finished"), vec![10, 9]);
    // A finished job says how long it took: its run's wall time, and enqueued to ended.
    assert_eq!(v["finished"][1]["queued_to_end_seconds"], 60.0);
    assert!(
        v["finished"][1]["took_seconds"].as_f64().unwrap() >= 0.0,
        "{v}"
    );
    assert_eq!(v["waiting"][0]["position"], 1);
    assert_eq!(v["waiting"][1]["position"], 2);
    assert_eq!(v["workers"], 1);
    let page = ok(&st, "/queue").await;
    assert!(page.contains("id=\"waiting\""), "{page}");
    let waiting = &page[page.find("id=\"waiting\"").unwrap()..];
    assert!(
        waiting.find("<td>14</td>").unwrap() < waiting.find("<td>13</td>").unwrap(),
        "the page lists job 14 before 13"
    );
    assert!(
        page.contains("&lt;b&gt;dave&lt;/b&gt;"),
        "an author is text"
    );
    assert!(page.contains("cancelled by @maint"));
    // The finished table has the durations, and no `#` column left empty.
    let finished = &page[page.find("id=\"finished\"").unwrap()..];
    let finished = &finished[..finished.find("</table>").unwrap()];
    assert!(
        finished.contains(">Took<") && finished.contains("60 s"),
        "{finished}"
    );
    assert!(!finished.contains(">#<"), "{finished}");
    assert!(
        page.contains("href=\"/queue\""),
        "the navigation links the queue"
    );
    let doc = json(&st, "/api/v1/openapi.json").await;
    assert!(doc["paths"]["/api/v1/queue"].is_object());
}

/// A search result gets parallel coordinates of its experiments' latest runs (the
/// spec fields that differ, then a final metric), whose rows the brushing filters; a list
/// without a search has none.
#[tokio::test]
async fn a_search_result_has_parallel_coordinates_of_its_runs() {
    let fx = crate::fixture::build().await;
    let st = fx.state();
    let page = ok(
        &st,
        "/experiments?q=id%20~%20%22acme%2Flab%22&pc=train%2Floss",
    )
    .await;
    let start = page
        .find("data-pc=\"")
        .expect("a parallel-coordinates figure")
        + 9;
    let end = start + page[start..].find('"').unwrap();
    let pc: serde_json::Value =
        serde_json::from_str(&page[start..end].replace("&quot;", "\"")).unwrap();
    let runs: Vec<&str> = pc["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    assert_eq!(runs.len(), 2, "{pc}");
    assert!(runs.contains(&"run-1") && runs.contains(&"run-2"), "{pc}");
    let axes: Vec<&str> = pc["axes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert!(
        axes.contains(&"model.d_model"),
        "the differing field: {axes:?}"
    );
    assert_eq!(axes.last(), Some(&"train/loss"));
    assert!(page.contains("src=\"/assets/parcoords.js\""));
    assert!(page.contains("data-run=\"run-1\""), "rows carry their run");
    let plain = ok(&st, "/experiments").await;
    assert!(!plain.contains("data-pc="), "no search, no chart");
}
