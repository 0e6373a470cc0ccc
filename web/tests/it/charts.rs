//! Interactive charts in real headless Chromium: drag-zoom then
//! double-click reset; a one-step spike in a 1M-point series found at full resolution after
//! zooming (the test reads the chart's data); smoothing changes the drawn values; log-y; x by
//! FLOPs; three runs overlaid on compare with the crosshair showing three values and legend
//! toggles; parallel coordinates brushing filtering lines and the table; expert-load heatmap
//! hover values and zoom; no Content-Security-Policy violation; and the pages without
//! JavaScript still showing every chart. Screenshots go to `target/screenshots/charts-*.png`.
//!
//! The same session measures, with the Performance API, the 12-chart 1M-step page's time to
//! all charts drawn, the zoom round trip (request and redraw) and the script bytes the page
//! loads, and prints them (`BENCHMARKS.md` records them; no figure is asserted here: the
//! machine is shared, so timings belong in benchmarks, not tests).
//!
//! The lab is the shared fixture plus experiment `acme/lab#4` with runs `run-4a` (300 steps)
//! and `run-long` (1,000,000 steps of `train/loss` with a spike at [`SPIKE`], ten more metrics
//! every 100 steps and an expert-load heatmap), appended to the log and indexed here.

use glassbox_schemas::RefRole;
use glassbox_test_support::lab::run_started;
use std::collections::BTreeMap;
use std::time::Duration;

use fantoccini::actions::{InputSource, MOUSE_BUTTON_LEFT, MouseActions, PointerAction};
use fantoccini::{Client, Locator};
use glassbox_schemas::record::{ProposalBody, ResultBody, RunEnding, RunStartedBody, refs};
use glassbox_schemas::{RunId, RunStatus, SpecHash};
use serde_json::Value;

use crate::browser::{Browser, eventually, shot};
use crate::fixture::{self, Fixture, entry, put, spec_toml};

/// The step of `run-long`'s one-step loss spike.
const SPIKE: u64 = 654_321;
/// The spike's value (the loss is below 4 everywhere else).
const SPIKE_VALUE: f64 = 50.0;
/// Steps of `run-long`.
const LONG_STEPS: u64 = 1_000_000;

/// Writes the curves of runs `run-4a` and `run-long` into the index, then appends experiment
/// `acme/lab#4` with those runs and indexes it: indexing the runs' results draws their
/// overviews from the curves, as it does for a lab's runs.
async fn add_long_run(fx: &Fixture) {
    let text = spec_toml("A medium width keeps the loss spike-free", 48, &["tiny"]);
    let spec = glassbox_schemas::parse_toml(&text).unwrap();
    let spec_hash: SpecHash = glassbox_schemas::spec_hash(&spec).unwrap();
    let blob = put(&fx.lab, text.as_bytes());
    let x = Some("acme/lab#4");
    let mut batch = vec![entry(
        x,
        refs([(RefRole::Spec, blob)]),
        ProposalBody {
            sweep: None,
            spec_hash,
            author: "carol".into(),
            title: "Medium rung".into(),
            issue: None,
        },
    )];
    for (run, steps, loss) in [("run-4a", 300, 1.6), ("run-long", LONG_STEPS, 1.45)] {
        batch.push(entry(
            x,
            BTreeMap::new(),
            RunStartedBody {
                seed: 2,
                ..run_started(run, spec_hash)
            },
        ));
        batch.push(entry(
            x,
            BTreeMap::new(),
            ResultBody {
                run: RunId::from(run),
                spec_hash,
                ending: RunEnding {
                    status: RunStatus::Succeeded,
                    steps,
                    final_metrics: [("train/loss".to_string(), loss)].into_iter().collect(),
                    reason: None,
                },
                forecast: None,
                params_blake3: None,
            },
        ));
    }
    // The curves first, as a worker's metric chunks reach the index before its result.
    // SQLite generates them itself (one statement each): 1M rows in about a second.
    let pool = fx.index.write_pool();
    for sql in [
        // run-4a: a loss between run-1's and run-2's.
        "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 300) \
         INSERT OR REPLACE INTO metric_points (run, name, step, value, entry) \
         SELECT 'run-4a', 'train/loss', i, 1.6 + 2.0 / (1.0 + i / 30.0), 0 FROM s",
        // run-long: train/loss at every step, one spike.
        "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 1000000) \
         INSERT OR REPLACE INTO metric_points (run, name, step, value, entry) \
         SELECT 'run-long', 'train/loss', i, \
         CASE WHEN i = 654321 THEN 50.0 ELSE 1.45 + 2.5 / (1.0 + i / 20000.0) END, 0 FROM s",
        // Ten more panels every 100 steps.
        "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 10000), \
         n(name, k) AS (VALUES ('eval/markov/bpb', 1), ('optim/learning_rate', 2), \
         ('grad/norm/total', 3), ('params/norm/total', 4), ('throughput/tokens_per_second', 5), \
         ('throughput/mfu', 6), ('train/router/routing_entropy_mean', 7), \
         ('train/router/load_balancing_loss', 8), ('train/router/layer_0/bias_norm', 9), \
         ('moe/dropped_assignments', 10)) \
         INSERT OR REPLACE INTO metric_points (run, name, step, value, entry) \
         SELECT 'run-long', name, i * 100, k + 1.0 / (1.0 + i / 100.0), 0 FROM s CROSS JOIN n",
        "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 10000) \
         INSERT OR REPLACE INTO metric_points (run, name, step, value, entry) \
         SELECT 'run-long', 'throughput/total_tokens', i * 100, i * 100.0 * 512, 0 FROM s",
        // The expert-load heatmap, every 1,000 steps.
        "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 1000), \
         e(k) AS (VALUES (0), (1), (2), (3)) \
         INSERT OR REPLACE INTO metric_points (run, name, step, value, entry) \
         SELECT 'run-long', 'train/router/layer_0/expert_load/' || k, i * 1000, \
         0.25 + 0.01 * k, 0 FROM s CROSS JOIN e",
    ] {
        sqlx::query(sql).execute(pool).await.unwrap();
    }
    fx.append(&batch).await;
}

async fn js(c: &Client, script: &str) -> Value {
    c.execute(script, vec![])
        .await
        .unwrap_or_else(|e| panic!("{script}: {e}"))
}

/// Runs `script` (which must call `done(value)`) and waits for its value.
async fn js_async(c: &Client, script: &str) -> Value {
    let wrapped = format!("const done = arguments[arguments.length - 1]; {script}");
    c.execute_async(&wrapped, vec![])
        .await
        .unwrap_or_else(|e| panic!("{script}: {e}"))
}

/// Waits until the chart script has drawn every chart of the page; returns how many.
async fn drawn(c: &Client) -> u64 {
    eventually("every chart drawn", || async {
        js(
            c,
            "return document.documentElement.getAttribute('data-charts')",
        )
        .await
        .as_str()
        .and_then(|s| s.parse().ok())
    })
    .await
}

/// From now on, every uncaught exception on the page is kept in `window.__errors`.
async fn keep_errors(c: &Client) {
    js(
        c,
        "window.__errors = []; window.addEventListener('error', e => window.__errors.push(String(e.message)));",
    )
    .await;
}

/// The uncaught exceptions kept since [`keep_errors`].
async fn errors(c: &Client) -> Vec<String> {
    js(c, "return window.__errors || []")
        .await
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// For each uPlot chart of the page, in order, the pixels of its canvas drawn in a colour (a
/// line or marker: the axes, grid and labels are grey or black), so a chart whose drawing
/// stopped half-way reads 0 however much of its frame is there.
async fn coloured_pixels(c: &Client) -> Vec<u64> {
    js(
        c,
        &format!(
            "{} return Array.from(document.querySelectorAll('.uplot canvas')).map(colouredPixels);",
            crate::browser::COLOURED_PIXELS_JS
        ),
    )
    .await
    .as_array()
    .map(|a| a.iter().filter_map(Value::as_u64).collect())
    .unwrap_or_default()
}

/// The data of the first chart whose lines include `name`: `[xs, ys...]`.
async fn chart_data(c: &Client, name: &str) -> Vec<Vec<Option<f64>>> {
    let v = js(
        c,
        &format!(
            "const ch = window.glassboxCharts.find(c => c.lines.some(l => l.name === '{name}'));\
             return ch && ch.plot ? ch.plot.data : null;"
        ),
    )
    .await;
    v.as_array()
        .unwrap_or_else(|| panic!("no chart of {name}"))
        .iter()
        .map(|s| s.as_array().unwrap().iter().map(|x| x.as_f64()).collect())
        .collect()
}

/// The viewport position of value (`x`, middle of the y range) on the chart of `name`.
async fn position(c: &Client, name: &str, x: f64) -> (f64, f64) {
    let v = js(
        c,
        &format!(
            "const ch = window.glassboxCharts.find(c => c.lines.some(l => l.name === '{name}'));\
             const u = ch.plot; u.over.scrollIntoView({{block: 'center'}});\
             const r = u.over.getBoundingClientRect();\
             return [r.left + u.valToPos({x}, 'x'), r.top + r.height / 2];"
        ),
    )
    .await;
    (v[0].as_f64().unwrap(), v[1].as_f64().unwrap())
}

/// Drags the mouse across the chart of `name` from x value `a` to `b`.
async fn drag(c: &Client, name: &str, a: f64, b: f64) {
    let (x0, y) = position(c, name, a).await;
    let (x1, _) = position(c, name, b).await;
    let mouse = MouseActions::new("mouse".into())
        .then(PointerAction::MoveTo {
            duration: None,
            x: x0.round(),
            y: y.round(),
        })
        .then(PointerAction::Down {
            button: MOUSE_BUTTON_LEFT,
        })
        .then(PointerAction::MoveTo {
            duration: Some(Duration::from_millis(100)),
            x: x1.round(),
            y: y.round(),
        })
        .then(PointerAction::Up {
            button: MOUSE_BUTTON_LEFT,
        });
    c.perform_actions(mouse).await.unwrap();
}

/// Waits until the chart of `name` shows x from at least `lo` to at most `hi`.
async fn zoomed_to(c: &Client, name: &str, lo: f64, hi: f64) -> Vec<Vec<Option<f64>>> {
    let mut last = Vec::new();
    let found = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let d = chart_data(c, name).await;
            let xs: Vec<f64> = d[0].iter().flatten().copied().collect();
            if let (Some(a), Some(b)) = (xs.first(), xs.last()) {
                if *a >= lo && *b <= hi {
                    return d;
                }
            }
            last = d;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    found.unwrap_or_else(|_| {
        let xs = last.first().cloned().unwrap_or_default();
        panic!(
            "the chart of {name} was not zoomed to {lo}..{hi}: x from {:?} to {:?}",
            xs.first(),
            xs.last()
        )
    })
}

async fn no_csp_violations(c: &Client, page: &str) {
    let v = js(c, "return window.glassboxCsp").await;
    assert_eq!(v, serde_json::json!([]), "{page}: CSP violations");
}

fn p99(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 * 0.99).ceil() as usize).clamp(1, v.len()) - 1]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn charts_zoom_smooth_scale_compare_and_fall_back_without_javascript() {
    let fx = fixture::build().await;
    add_long_run(&fx).await;
    let browser = Browser::start(fx.state()).await;
    let base = browser.base.clone();
    let c = browser.session(true).await;

    // 1. The 12-chart page of a 1M-step run: first visit (draws and caches), then warm.
    let long = format!("{base}/experiments/acme/lab%234?run=run-long");
    c.goto(&long).await.unwrap();
    let charts = drawn(&c).await;
    let heatmaps = c
        .find_all(Locator::Css("figure.heatmap[data-heatmap]"))
        .await
        .unwrap()
        .len();
    assert_eq!((charts, heatmaps), (11, 1), "11 line charts and a heatmap");
    let first_ms = js(
        &c,
        "return performance.getEntriesByName('glassbox-charts-drawn')[0].startTime",
    )
    .await;
    // Where the first visit's time goes: the page's response, the DOM, the API requests.
    let first_parts = js(
        &c,
        "const n = performance.getEntriesByType('navigation')[0]; \
         const api = performance.getEntriesByType('resource').filter(e => e.name.includes('/api/')); \
         return `page ${Math.round(n.decodedBodySize / 1024)} KiB, response ${Math.round(n.responseEnd)} ms, parsed ${Math.round(n.domInteractive)} ms, scripts loaded ${Math.round(Math.max(0, ...performance.getEntriesByType('resource').filter(e => e.initiatorType === 'script').map(e => e.responseEnd)))} ms, DOM ready ${Math.round(n.domContentLoadedEventEnd)} ms, \
         ${api.length} API requests ending ${Math.round(Math.max(0, ...api.map(e => e.responseEnd)))} ms \
         (longest ${Math.round(Math.max(0, ...api.map(e => e.duration)))} ms)`",
    )
    .await;
    let script_bytes = js(
        &c,
        "return performance.getEntriesByType('resource').filter(e => e.initiatorType === 'script')\
         .reduce((a, e) => a + e.encodedBodySize, 0)",
    )
    .await;
    c.goto(&long).await.unwrap();
    drawn(&c).await;
    let warm_ms = js(
        &c,
        "return performance.getEntriesByName('glassbox-charts-drawn')[0].startTime",
    )
    .await;
    shot(&c, "charts-long").await;

    // 2. Drag-zoom twice towards the spike: at full resolution every recorded step in range is
    // drawn, the spike among them.
    drag(
        &c,
        "train/loss",
        SPIKE as f64 - 15_000.0,
        SPIKE as f64 + 15_000.0,
    )
    .await;
    let d = zoomed_to(&c, "train/loss", 630_000.0, 680_000.0).await;
    let url = c.current_url().await.unwrap();
    assert!(
        url.as_str().contains("from="),
        "the zoom is in the URL: {url}"
    );
    // The heatmap was redrawn for the zoomed range (its hover values name the steps).
    eventually("the heatmap to follow the zoom", || async {
        let steps = js(
            &c,
            "return Array.from(document.querySelectorAll('figure.heatmap circle.hp title'))\
             .map(t => Number(/steps (\\d+)-/.exec(t.textContent)[1]))",
        )
        .await;
        let steps: Vec<f64> = steps
            .as_array()?
            .iter()
            .filter_map(|s| s.as_f64())
            .collect();
        (!steps.is_empty() && steps.iter().all(|s| (620_000.0..690_000.0).contains(s)))
            .then_some(())
    })
    .await;
    drag(&c, "train/loss", SPIKE as f64 - 250.0, SPIKE as f64 + 250.0).await;
    let d2 = zoomed_to(
        &c,
        "train/loss",
        SPIKE as f64 - 2_000.0,
        SPIKE as f64 + 2_000.0,
    )
    .await;
    assert!(d.len() == 2 && d2.len() == 2);
    let xs: Vec<f64> = d2[0].iter().flatten().copied().collect();
    let span = (xs[xs.len() - 1] - xs[0]) as usize + 1;
    assert_eq!(
        xs.len(),
        span,
        "every step in {}..{} is drawn",
        xs[0],
        xs[xs.len() - 1]
    );
    let at = xs
        .iter()
        .position(|x| *x == SPIKE as f64)
        .expect("the spike's step");
    assert_eq!(d2[1][at], Some(SPIKE_VALUE), "the spike's value");
    assert!(d2[1][at - 1].unwrap() < 4.0 && d2[1][at + 1].unwrap() < 4.0);
    // The other charts and the heatmap followed the zoom.
    let lr = chart_data(&c, "optim/learning_rate").await;
    assert!(
        lr[0]
            .iter()
            .flatten()
            .all(|x| *x >= xs[0] && *x <= xs[xs.len() - 1])
    );
    shot(&c, "charts-zoomed").await;
    // Double-click resets every chart to the whole run.
    let over = c
        .find(Locator::Css("figure.chart.interactive .u-over"))
        .await
        .unwrap();
    let dbl = MouseActions::new("mouse".into())
        .then(PointerAction::MoveToElement {
            element: over,
            duration: None,
            x: 0.0,
            y: 0.0,
        })
        .then(PointerAction::Down {
            button: MOUSE_BUTTON_LEFT,
        })
        .then(PointerAction::Up {
            button: MOUSE_BUTTON_LEFT,
        })
        .then(PointerAction::Down {
            button: MOUSE_BUTTON_LEFT,
        })
        .then(PointerAction::Up {
            button: MOUSE_BUTTON_LEFT,
        });
    c.perform_actions(dbl).await.unwrap();
    eventually("the zoom to reset", || async {
        let d = chart_data(&c, "train/loss").await;
        let xs: Vec<f64> = d[0].iter().flatten().copied().collect();
        (xs.first() == Some(&1.0) && xs.last() == Some(&(LONG_STEPS as f64))).then_some(())
    })
    .await;
    assert!(!c.current_url().await.unwrap().as_str().contains("from="));

    // 3. Zoom round trips (request and redraw of all 11 charts and the heatmap), measured in
    // the page: 20 ranges across the run.
    let mut trips = Vec::new();
    for k in 0..20u64 {
        let a = k * 45_000 + 1;
        let b = a + 20_000 + k * 1_000;
        let ms = js_async(
            &c,
            &format!("window.glassboxZoom({a}, {b}).then(() => done(window.glassboxZooms[window.glassboxZooms.length - 1]));"),
        )
        .await;
        trips.push(ms.as_f64().unwrap());
    }
    no_csp_violations(&c, "experiment (long run)").await;
    println!(
        "BENCH charts: 12-chart 1M-step page: all charts drawn {:.0} ms after navigation start (first visit: {}), {:.0} ms (warm); zoom round trip p50 {:.0} ms, p99 {:.0} ms over {} zooms; script bytes {}",
        first_ms.as_f64().unwrap_or(f64::NAN),
        first_parts.as_str().unwrap_or("?"),
        warm_ms.as_f64().unwrap_or(f64::NAN),
        {
            let mut t = trips.clone();
            t.sort_by(f64::total_cmp);
            t[t.len() / 2]
        },
        p99(trips.clone()),
        trips.len(),
        script_bytes
    );
    assert!(
        script_bytes.as_u64().unwrap() < 100 * 1024,
        "{script_bytes}"
    );

    // 4. Smoothing (from the URL): the raw line stays, faint, and the smoothed one differs.
    c.goto(&format!(
        "{base}/experiments/acme/lab%231?run=run-1&smooth=0.9"
    ))
    .await
    .unwrap();
    drawn(&c).await;
    let d = chart_data(&c, "train/loss").await;
    let labels = js(
        &c,
        "const ch = window.glassboxCharts.find(c => c.lines.some(l => l.name === 'train/loss'));\
         return ch.plot.series.map(s => s.label);",
    )
    .await;
    let labels: Vec<&str> = labels
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l.as_str())
        .collect();
    let raw_at = labels
        .iter()
        .position(|l| *l == "train/loss (raw)")
        .unwrap();
    let smooth_at = labels.iter().position(|l| *l == "train/loss").unwrap();
    let (raw, smooth) = (&d[raw_at], &d[smooth_at]);
    assert_eq!(
        raw[9],
        Some(fixture::loss_at(10)),
        "the raw line is the recorded one"
    );
    assert!(
        (smooth[9].unwrap() - raw[9].unwrap()).abs() > 0.05,
        "smoothed {:?} vs raw {:?}",
        smooth[9],
        raw[9]
    );
    shot(&c, "charts-smoothed").await;

    // 5. Log-y and x by FLOPs through the controls; both land in the URL.
    c.goto(&format!("{base}/experiments/acme/lab%231?run=run-1"))
        .await
        .unwrap();
    drawn(&c).await;
    keep_errors(&c).await;
    c.find(Locator::Css("#chart-controls input[name='logy']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    eventually("log-y", || async {
        let distr = js(
            &c,
            "return window.glassboxCharts.map(c => c.plot && c.plot.scales.y.distr)",
        )
        .await;
        distr
            .as_array()?
            .iter()
            .all(|d| d.as_u64() == Some(3))
            .then_some(())
    })
    .await;
    // Every chart still draws its lines on the log scale, and nothing threw (uPlot hands the
    // tick formatter `null` for the log splits it leaves unlabelled).
    let pixels = eventually("every chart drawn on log-y", || async {
        let p = coloured_pixels(&c).await;
        (!p.is_empty() && p.iter().all(|n| *n > 50)).then_some(p)
    })
    .await;
    assert_eq!(
        errors(&c).await,
        Vec::<String>::new(),
        "pixels per chart: {pixels:?}"
    );
    c.find(Locator::Css("#chart-controls select[name='x']"))
        .await
        .unwrap()
        .select_by_value("flops")
        .await
        .unwrap();
    let fpt = js(
        &c,
        "return JSON.parse(document.querySelector('figure.chart[data-series]').dataset.series)[0].flops_per_token",
    )
    .await
    .as_f64()
    .unwrap();
    let want = (fixture::RUN1_STEPS * fixture::TOKENS_PER_STEP) as f64 * fpt;
    eventually("x by FLOPs", || async {
        let d = chart_data(&c, "train/loss").await;
        let last = d[0].iter().flatten().last().copied()?;
        ((last - want).abs() <= want * 1e-9).then_some(())
    })
    .await;
    let url = c.current_url().await.unwrap();
    assert!(
        url.as_str().contains("logy=1") && url.as_str().contains("x=flops"),
        "{url}"
    );
    shot(&c, "charts-logy-flops").await;
    // The same view opened from its address: drawn at once, nothing thrown.
    c.goto(&format!("{base}/experiments/acme/lab%231?run=run-1&logy=1"))
        .await
        .unwrap();
    drawn(&c).await;
    let pixels = coloured_pixels(&c).await;
    assert!(
        !pixels.is_empty() && pixels.iter().all(|n| *n > 50),
        "a chart opened on log-y is blank: {pixels:?}"
    );
    // The scaling ladder's log-log fit: every chart of the page draws its points and lines.
    c.goto(&format!("{base}/ladder")).await.unwrap();
    drawn(&c).await;
    let pixels = eventually("the ladder's log-log chart drawn", || async {
        let p = coloured_pixels(&c).await;
        (!p.is_empty() && p.iter().all(|n| *n > 50)).then_some(p)
    })
    .await;
    assert!(!pixels.is_empty());
    shot(&c, "charts-ladder").await;
    // Back to the log-y, x-by-FLOPs view for the heatmap.
    c.goto(url.as_str()).await.unwrap();
    drawn(&c).await;
    // The heatmap has hover values with the layer.
    js(
        &c,
        "document.querySelector('figure.heatmap').scrollIntoView({block: 'center'})",
    )
    .await;
    let hm = c
        .find(Locator::Css("figure.heatmap[data-heatmap] svg"))
        .await
        .unwrap();
    let hover = MouseActions::new("mouse".into()).then(PointerAction::MoveToElement {
        element: hm,
        duration: None,
        x: 0.0,
        y: 0.0,
    });
    c.perform_actions(hover).await.unwrap();
    let tip = eventually("the heatmap's hover value", || async {
        let t = c
            .find(Locator::Css(".hm-tip"))
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        (!t.is_empty()).then_some(t)
    })
    .await;
    assert!(
        tip.starts_with("layer 0, expert ") && tip.contains(": share of assignments "),
        "{tip}"
    );
    no_csp_violations(&c, "experiment (run-1)").await;

    // 6. Compare three runs: one chart per metric, the shared crosshair shows three values.
    c.goto(&format!(
        "{base}/compare?run=run-1&run=run-2&run=run-4a&metric=train%2Floss&metric=grad%2Fnorm%2Ftotal"
    ))
    .await
    .unwrap();
    assert_eq!(drawn(&c).await, 2);
    let (x, y) = position(&c, "train/loss", 60.0).await;
    let hover = MouseActions::new("mouse".into()).then(PointerAction::MoveTo {
        duration: None,
        x: x.round(),
        y: y.round(),
    });
    c.perform_actions(hover).await.unwrap();
    let values = eventually("three values under the cursor", || async {
        let v = js(
            &c,
            "const ch = window.glassboxCharts.find(c => c.lines.some(l => l.name === 'train/loss'));\
             return Array.from(ch.plot.root.querySelectorAll('.u-legend .u-series .u-value')).map(e => e.textContent);",
        )
        .await;
        let v: Vec<String> = v.as_array()?.iter().filter_map(|s| s.as_str().map(str::to_string)).collect();
        // The x value, then one per run.
        (v.len() == 4 && v[1..].iter().all(|s| s != "–" && !s.is_empty())).then_some(v)
    })
    .await;
    let step: f64 = values[0].parse().unwrap();
    assert!((step - 60.0).abs() <= 2.0, "cursor at step {step}");
    let cursor = js(
        &c,
        "const ch = window.glassboxCharts.find(c => c.lines.some(l => l.name === 'grad/norm/total'));\
         return ch.plot.cursor.left;",
    )
    .await;
    assert!(
        cursor.as_f64().unwrap_or(-1.0) >= 0.0,
        "the crosshair is shared"
    );
    shot(&c, "charts-compare").await;
    // A click on a legend entry hides that run's line, a second shows it again.
    let entry = c
        .find(Locator::XPath(
            "(//figure[contains(@class, 'interactive')])[1]//tr[contains(@class, 'u-series')]/th[contains(., 'run-2')]",
        ))
        .await
        .unwrap();
    let shown = || async {
        js(
            &c,
            "const ch = window.glassboxCharts.find(c => c.lines.some(l => l.name === 'train/loss'));\
             return ch.plot.series.map(s => s.show);",
        )
        .await
    };
    entry.click().await.unwrap();
    assert_eq!(shown().await, serde_json::json!([true, true, false, true]));
    entry.click().await.unwrap();
    assert_eq!(shown().await, serde_json::json!([true, true, true, true]));

    // 7. Parallel coordinates: brushing the top of model.d_model keeps run-1 (64) only.
    js(
        &c,
        "document.getElementById('parcoords').scrollIntoView({block: 'center'})",
    )
    .await;
    let axis = c
        .find(Locator::Css(
            "#parcoords g.pc-axis[data-axis='model.d_model'] rect.pc-hit",
        ))
        .await
        .unwrap();
    let (_, _, _, ah) = axis.rectangle().await.unwrap();
    let brush = MouseActions::new("mouse".into())
        .then(PointerAction::MoveToElement {
            element: axis.clone(),
            duration: None,
            x: 0.0,
            y: -(ah / 2.0) + 1.0,
        })
        .then(PointerAction::Down {
            button: MOUSE_BUTTON_LEFT,
        })
        .then(PointerAction::MoveToElement {
            element: axis,
            duration: Some(Duration::from_millis(100)),
            x: 0.0,
            y: -(ah / 2.0) + ah * 0.3,
        })
        .then(PointerAction::Up {
            button: MOUSE_BUTTON_LEFT,
        });
    c.perform_actions(brush).await.unwrap();
    eventually("the brush to filter", || async {
        let shown = c
            .find(Locator::Css("#parcoords"))
            .await
            .ok()?
            .attr("data-shown")
            .await
            .ok()??;
        (shown == "run-1").then_some(())
    })
    .await;
    let hidden = js(
        &c,
        "return Array.from(document.querySelectorAll('#final-metrics tr[data-run]')).filter(r => r.hidden).map(r => r.dataset.run)",
    )
    .await;
    assert_eq!(hidden, serde_json::json!(["run-2", "run-4a"]));
    let dimmed = c
        .find_all(Locator::Css("#parcoords path.pc-off"))
        .await
        .unwrap()
        .len();
    assert_eq!(dimmed, 2);
    no_csp_violations(&c, "compare").await;
    shot(&c, "charts-parcoords").await;
    c.close().await.unwrap();

    // 8. Without JavaScript every chart is still there, drawn by the server.
    let nojs = browser.session(false).await;
    nojs.goto(&format!("{base}/experiments/acme/lab%231?run=run-1"))
        .await
        .unwrap();
    let figures = nojs.find_all(Locator::Css("figure.chart")).await.unwrap();
    // run-1 has six panels of lines and one expert-load heatmap.
    assert_eq!(figures.len(), 7);
    for f in &figures {
        let svg = f.find(Locator::Css("svg")).await.unwrap();
        let (_, _, w, h) = svg.rectangle().await.unwrap();
        assert!(w > 300.0 && h > 100.0, "a fallback chart is shown: {w}x{h}");
    }
    assert!(
        nojs.find(Locator::Css(".uplot")).await.is_err(),
        "no script ran"
    );
    shot(&nojs, "charts-nojs").await;
    nojs.close().await.unwrap();
    browser.stop().await;
}
