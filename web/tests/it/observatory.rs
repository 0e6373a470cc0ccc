//! The observatory as a person sees it, in real headless Chromium: every page of a lab this
//! test fills, in every chart mode (linear, log y, smoothing, x by step, tokens, FLOPs and
//! time, an experiment's runs overlaid, compare's small multiples, the ladder's log-log chart,
//! the expert-load heatmaps, a live run, the run page with its Hardware section, the console
//! log, the data, queue, negative-results, ledger, boards, evaluations and sweeps pages, and a
//! 400 page).
//! Each page fails the test on any console error the browser logged (uncaught exceptions,
//! failed requests, CSP violations), and on any chart drawn blank: a uPlot canvas with no
//! coloured pixel, a server-drawn SVG chart with no mark. A screenshot of each page goes to
//! `target/screenshots/observatory-*.png`.
//!
//! The lab: the shared fixture with its sweep and evaluations, plus hardware telemetry (`hw/...`) on run-1 and
//! a run that is still training (`run-live`, points in the live hub and in the index).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use fantoccini::Client;
use glassbox_schemas::metrics::hw;
use glassbox_schemas::record::RunStartedBody;
use glassbox_test_support::lab::run_started;
use glassbox_web::LiveEvent;
use glassbox_web::queue::{QueueFuture, QueueJob, QueueJobs, QueueSource};
use serde_json::Value;

use crate::browser::{Browser, console_errors, full_shot, text_of};
use crate::fixture::{self, Fixture, entry};

/// Every page and mode, by the name its screenshot gets.
const PAGES: &[(&str, &str)] = &[
    ("experiments", "/experiments"),
    (
        "experiments-columns",
        "/experiments?cols=id,status,final_loss,metric:eval/markov/loss,spec:model.d_model",
    ),
    ("experiments-bad-column", "/experiments?cols=id,bogus"),
    ("experiment", "/experiments/acme/lab%231"),
    ("experiment-run-1", "/experiments/acme/lab%231?run=run-1"),
    (
        "experiment-logy",
        "/experiments/acme/lab%231?run=run-1&logy=1",
    ),
    (
        "experiment-smooth",
        "/experiments/acme/lab%231?run=run-1&smooth=0.8",
    ),
    (
        "experiment-x-tokens",
        "/experiments/acme/lab%231?run=run-1&x=tokens",
    ),
    (
        "experiment-x-flops",
        "/experiments/acme/lab%231?run=run-1&x=flops",
    ),
    (
        "experiment-x-time",
        "/experiments/acme/lab%231?run=run-1&x=time",
    ),
    ("run", "/runs/run-1"),
    ("run-logy", "/runs/run-1?logy=1"),
    ("run-diverged", "/runs/run-2"),
    ("run-live-page", "/runs/run-live"),
    ("live", "/live/run-live"),
    ("run-log", "/runs/run-2/log"),
    ("run-log-search", "/runs/run-2/log?q=retry"),
    ("compare", "/compare?run=run-1&run=run-2"),
    ("compare-logy", "/compare?run=run-1&run=run-2&logy=1"),
    ("ladder", "/ladder"),
    ("boards", "/boards"),
    ("evals", "/evals"),
    ("sweeps", "/sweeps"),
    ("data", "/data"),
    ("data-run", "/data/runs/run-1"),
    ("negative", "/negative"),
    ("ledger", "/ledger"),
    ("queue", "/queue"),
];

/// The queue the dashboard shows: the live run training, one waiting, run-1 finished.
struct Jobs;

impl QueueSource for Jobs {
    fn jobs(&self, _finished: u32) -> QueueFuture<'_> {
        let job = |id: i64, state: &str, run: Option<&str>| QueueJob {
            id,
            kind: "run".into(),
            experiment: "acme/lab#1".into(),
            spec_hash: String::new(),
            author: "ann".into(),
            priority: 0,
            state: state.into(),
            run: run.map(str::to_string),
            worker: run.map(|_| "w1".to_string()),
            reason: None,
            created_at_ms: 0,
            updated_at_ms: 60_000,
        };
        Box::pin(async move {
            Ok(QueueJobs {
                open: vec![job(3, "running", Some("run-live")), job(4, "queued", None)],
                finished: vec![job(1, "succeeded", Some("run-1"))],
                now_ms: 120_000,
            })
        })
    }
}

/// The fixture's evaluations, hardware telemetry and tokens drawn on run-1 (every 10 steps), and
/// `run-live`: started, no result, 40 steps of points in the index and 40 more in the live hub.
async fn fill(fx: &Fixture) {
    fixture::add_evals(fx).await;
    let pool = fx.index.write_pool();
    for (name, base, slope) in [
        // What every train step records of the data (the fixture's curves leave it out).
        ("data/markov/tokens", 0.0, 512.0),
        (hw::CPU_UTILIZATION, 90.0, 0.01),
        (hw::PROCESS_RSS_BYTES, 3.0e8, 1.0e5),
        (hw::PROCESS_PEAK_RSS_BYTES, 3.2e8, 1.0e5),
        (hw::PROCESS_CPU_SECONDS, 0.0, 0.2),
        (hw::MACHINE_MEMORY_AVAILABLE_BYTES, 2.0e10, -1.0e5),
    ] {
        for step in (10..=300u64).step_by(10) {
            sqlx::query(
                "INSERT OR REPLACE INTO metric_points (run, name, step, value, entry) VALUES ($1, $2, $3, $4, 0)",
            )
            .bind("run-1")
            .bind(name)
            .bind(step as i64)
            .bind(base + slope * step as f64)
            .execute(pool)
            .await
            .unwrap();
        }
    }
    let spec_hash = {
        let st = fx.state();
        let (_, _, body) = crate::routes::get(&st, "/api/v1/runs/run-1").await;
        let v: Value = serde_json::from_str(&body).unwrap();
        v["spec_hash"]
            .as_str()
            .or_else(|| v["run"]["spec_hash"].as_str())
            .unwrap()
            .parse()
            .unwrap()
    };
    let started = entry(
        Some("acme/lab#1"),
        BTreeMap::new(),
        RunStartedBody {
            worker: Some("w1".into()),
            host: Some("lab-host".into()),
            backend: "cpu: cpu (2 threads, f32)".into(),
            backend_reason: Some("asked for auto; no CUDA device".into()),
            attempt: Some(1),
            ..run_started("run-live", spec_hash)
        },
    );
    fx.append(&[started]).await;
    for step in 1..=40u64 {
        sqlx::query(
            "INSERT OR REPLACE INTO metric_points (run, name, step, value, entry) VALUES ('run-live', 'train/loss', $1, $2, 0)",
        )
        .bind(step as i64)
        .bind(fixture::loss_at(step) + 0.1)
        .execute(pool)
        .await
        .unwrap();
    }
    fx.live.publish(LiveEvent::Status {
        run: "run-live".into(),
        status: glassbox_schemas::RunPhase::Running,
    });
    for step in 41..=80u64 {
        fx.live.publish(LiveEvent::Point {
            run: "run-live".into(),
            step,
            name: "train/loss".into(),
            value: fixture::loss_at(step) + 0.1,
        });
        fx.live.publish(LiveEvent::Log {
            run: "run-live".into(),
            line: format!(
                "2026-12-07T00:00:{:02}Z info step {step}/300  loss 2.0",
                step % 60
            ),
        });
    }
}

/// Waits until the page's chart script has drawn every chart (pages with charts), then a
/// moment for late requests (heatmaps, SSE); false when the charts never finished drawing.
pub(crate) async fn settle(c: &Client) -> bool {
    let has_charts = c
        .execute(
            "return document.querySelectorAll('figure.chart[data-series], figure.chart[data-points]').length",
            vec![],
        )
        .await
        .unwrap()
        .as_u64()
        .unwrap_or(0);
    let mut drawn = has_charts == 0;
    let start = std::time::Instant::now();
    while !drawn && start.elapsed() < Duration::from_secs(20) {
        drawn = c
            .execute(
                "return document.documentElement.getAttribute('data-charts')",
                vec![],
            )
            .await
            .ok()
            .is_some_and(|v| v.as_str().is_some());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    drawn
}

/// Charts of the page drawn blank: each uPlot canvas's coloured pixels, and each visible
/// server-drawn SVG chart's marks (lines, areas, cells); returns the blank ones' titles.
pub(crate) async fn blank_charts(c: &Client) -> Vec<String> {
    let script = format!("{} {BLANK_CHARTS_JS}", crate::browser::COLOURED_PIXELS_JS);
    let v = c.execute(&script, vec![]).await.unwrap();
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The blank charts of the page, by title (needs `colouredPixels`).
const BLANK_CHARTS_JS: &str = "const out = []; \
             document.querySelectorAll('.uplot').forEach(u => { \
               const t = (u.querySelector('.u-title') || {}).textContent || 'a uPlot chart'; \
               const n = colouredPixels(u.querySelector('canvas')); \
               if (n < 20) { out.push('canvas: ' + t + ' (' + n + ' coloured pixels)'); } \
             }); \
             document.querySelectorAll('figure.chart svg, div.chart svg').forEach(s => { \
               const r = s.getBoundingClientRect(); \
               if (r.width === 0 || r.height === 0) { return; } \
               const marks = s.querySelectorAll('polyline, path, polygon, rect, circle').length; \
               if (marks < 1) { out.push('svg: ' + (s.closest('figure, div').dataset.title || 'a chart') + ' (' + marks + ' marks)'); } \
             }); \
             return out;";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_in_every_mode_draws_without_console_errors() {
    let fx = fixture::build().await;
    fixture::sweep::add(&fx).await;
    fill(&fx).await;
    let st = fx.state().with_queue(Arc::new(Jobs));
    let b = Browser::start(st).await;
    let c = b.session(true).await;
    let mut failures = Vec::new();
    for (name, path) in PAGES {
        c.goto(&format!("{}{path}", b.base)).await.unwrap();
        if !settle(&c).await {
            failures.push(format!(
                "{name} ({path}): the charts never finished drawing"
            ));
        }
        // The 400 page's own document is the one request allowed to fail.
        let errors: Vec<String> = console_errors(&c)
            .await
            .into_iter()
            .filter(|e| !(*name == "experiments-bad-column" && e.contains("status of 400")))
            .collect();
        if !errors.is_empty() {
            failures.push(format!("{name} ({path}): console errors {errors:?}"));
        }
        let blank = blank_charts(&c).await;
        if !blank.is_empty() {
            failures.push(format!("{name} ({path}): blank charts {blank:?}"));
        }
        // What each page is for is there, not only drawn.
        let present = |css: &'static str| {
            let c = &c;
            async move {
                c.execute(
                    &format!("return document.querySelectorAll({css:?}).length"),
                    vec![],
                )
                .await
                .ok()
                .and_then(|v| v.as_u64())
                .unwrap_or(0)
            }
        };
        let wanted: &[(&str, &str)] = match *name {
            "run" => &[
                ("#hardware .uplot", "hardware charts"),
                ("#evaluations .uplot", "evaluation charts"),
                ("#final-metrics table", "final metrics"),
                ("figure.heatmap svg", "an expert-load heatmap"),
                (
                    "#samples-step-300 pre.completion",
                    "the newest snapshot's completions",
                ),
                (
                    "#samples-step-150 pre.completion",
                    "an older snapshot's completions",
                ),
            ],
            "compare" => &[("#compare-charts .uplot", "small multiples")],
            "evals" => &[("#eval-board td.cell.q8", "a best cell")],
            "ladder" => &[("table.forecasts td .badge", "a forecast verdict")],
            "run-log" => &[("pre.log.numbered .ln", "numbered lines")],
            "experiments-bad-column" => &[(
                ".field-error[data-field='cols']",
                "the error beside the field",
            )],
            _ => &[],
        };
        if *name == "run" {
            // Model output shows as text, newest snapshot first: no script of its ran, its
            // markup is there as characters, and the control byte shows as a picture.
            let order = c
                .execute(
                    "return [...document.querySelectorAll('#samples .sample-step h3')].map(h => h.textContent).join('|')",
                    vec![],
                )
                .await
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            if order != "Step 300|Step 150" {
                failures.push(format!("{name}: samples in the order {order:?}"));
            }
            let text = text_of(&c, "#samples-step-150 pre.completion")
                .await
                .unwrap_or_default();
            if !text.contains("</pre><script>alert('model')</script> @someone") {
                failures.push(format!("{name}: the model's markup reads {text:?}"));
            }
            let pictured = text_of(&c, "#samples-step-300 tr:nth-child(2) pre.completion")
                .await
                .unwrap_or_default();
            if !pictured.contains('\u{2407}') {
                failures.push(format!("{name}: the control byte reads {pictured:?}"));
            }
            // The anomaly's mark tells its kind and message under the cursor.
            let tip = c
                .execute(
                    "const ch = window.glassboxCharts.find(c => c.lines.some(l => l.name === 'grad/norm/total')); \
                     const u = ch.plot; u.setCursor({ left: u.valToPos(150, 'x'), top: 10 }); \
                     const t = u.over.querySelector('.mark-tip'); \
                     return t && t.style.display !== 'none' ? t.textContent : null;",
                    vec![],
                )
                .await
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            if !tip.contains("gradient-norm spike") {
                failures.push(format!("{name}: the anomaly's mark tip reads {tip:?}"));
            }
        }
        for (css, what) in wanted {
            if present(css).await == 0 {
                failures.push(format!("{name} ({path}): no {what} ({css})"));
            }
        }
        full_shot(&c, &format!("observatory-{name}")).await;
    }
    c.close().await.unwrap();
    b.stop().await;
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
