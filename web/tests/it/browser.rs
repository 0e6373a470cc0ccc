//! Real-browser end-to-end test: headless Chromium driven over WebDriver (fantoccini) against a
//! real server on 127.0.0.1: load the experiments page, open an experiment, see the loss chart
//! drawn (uPlot over the server's SVG), watch a live run add points over Server-Sent Events
//! while the test publishes into the `LiveHub`, and open a compare view by ticking runs; then
//! a sweep page with its gate and a leaderboard with its Pareto chart.
//! Screenshots of each page go to `target/screenshots/*.png`. The harness here ([`Browser`])
//! is shared with the interactive-chart suite (`charts`).
//!
//! Needs Debian's `chromium` and `chromium-driver` (`.ci/run` installs them). The test starts
//! `chromedriver` itself on a free port (`GLASSBOX_CHROMEDRIVER` overrides the binary) and
//! fails, never skips, when it is missing.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use glassbox_web::LiveEvent;

/// How long any one wait in this test may take: generous for a loaded 2-core CI machine.
const WAIT: Duration = Duration::from_secs(30);

pub(crate) fn chromedriver() -> PathBuf {
    if let Ok(p) = std::env::var("GLASSBOX_CHROMEDRIVER") {
        return PathBuf::from(p);
    }
    for dir in std::env::var("PATH").unwrap_or_default().split(':') {
        let p = PathBuf::from(dir).join("chromedriver");
        if p.is_file() {
            return p;
        }
    }
    for p in ["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"] {
        if std::path::Path::new(p).is_file() {
            return PathBuf::from(p);
        }
    }
    panic!(
        "chromedriver not found: install Debian's `chromium` and `chromium-driver` \
         (apt-get install chromium chromium-driver, as .ci/run does) or set GLASSBOX_CHROMEDRIVER"
    );
}

fn screenshots_dir() -> PathBuf {
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let dir = target.join("screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub(crate) async fn shot(c: &Client, name: &str) {
    let png = c.screenshot().await.unwrap();
    std::fs::write(screenshots_dir().join(format!("{name}.png")), png).unwrap();
}

/// A script function counting a canvas's pixels drawn in a colour (a line or marker: the axes,
/// grid and labels are grey or black), so a chart whose drawing stopped half-way reads 0
/// however much of its frame is there. Scripts call it as `colouredPixels(canvas)`.
pub(crate) const COLOURED_PIXELS_JS: &str = "const colouredPixels = cv => { \
       const d = cv.getContext('2d').getImageData(0, 0, cv.width, cv.height).data; \
       let n = 0; \
       for (let i = 0; i < d.length; i += 4) { \
         const hi = Math.max(d[i], d[i + 1], d[i + 2]), lo = Math.min(d[i], d[i + 1], d[i + 2]); \
         if (d[i + 3] > 0 && hi - lo > 60) { n++; } \
       } \
       return n; };";

/// A screenshot of the whole page (the window made as tall as the page, at most 6,000 px, then
/// put back).
pub(crate) async fn full_shot(c: &Client, name: &str) {
    let height = c
        .execute(
            "return Math.ceil(document.documentElement.scrollHeight)",
            vec![],
        )
        .await
        .ok()
        .and_then(|v| v.as_u64())
        .unwrap_or(1400)
        .clamp(600, 6000) as u32;
    let _ = c.set_window_size(1280, height).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    shot(c, name).await;
    let _ = c.set_window_size(1280, 1400).await;
}

/// ChromeDriver's log of the browser's console (`goog:loggingPrefs`), which drains it.
#[derive(Debug)]
struct BrowserLog;

impl fantoccini::wd::WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!(
            "session/{}/se/log",
            session_id.unwrap_or_default()
        ))
    }

    fn method_and_body(&self, _request_url: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(r#"{"type":"browser"}"#.into()))
    }
}

/// The console errors the browser logged since the last call: uncaught exceptions,
/// `console.error`, failed requests, Content-Security-Policy violations (level `SEVERE`).
pub(crate) async fn console_errors(c: &Client) -> Vec<String> {
    let v = c
        .issue_cmd(BrowserLog)
        .await
        .expect("the browser's console log (goog:loggingPrefs)");
    v.as_array()
        .map(|a| {
            a.iter()
                .filter(|e| e["level"] == "SEVERE")
                .filter_map(|e| e["message"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Polls `check` every 100 ms until it yields `Some`, for at most [`WAIT`]; the page updates
/// asynchronously (SSE, fetch), so there is no event to wait on from outside the browser.
pub(crate) async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(start.elapsed() < WAIT, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(crate) async fn text_of(c: &Client, css: &str) -> Option<String> {
    c.find(Locator::Css(css)).await.ok()?.text().await.ok()
}

/// A real server on 127.0.0.1 serving `state`, and chromedriver on a free port.
pub(crate) struct Browser {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    driver_port: u16,
    driver: tokio::process::Child,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<Result<(), glassbox_web::WebError>>>,
}

impl Browser {
    /// Serves `state` and starts chromedriver.
    pub async fn start(state: glassbox_web::WebState) -> Browser {
        let driver_bin = chromedriver();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(glassbox_web::serve_on(
            listener,
            state,
            Default::default(),
            async {
                let _ = stop_rx.await;
            },
        ));
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = tokio::process::Command::new(&driver_bin)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", driver_bin.display()));
        eventually("chromedriver to listen", || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .ok()
        })
        .await;
        Browser {
            base: format!("http://{addr}"),
            driver_port: port,
            driver,
            stop: Some(stop_tx),
            server: Some(server),
        }
    }

    /// A headless Chromium session, with JavaScript or without.
    pub async fn session(&self, javascript: bool) -> Client {
        let mut args = vec![
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--window-size=1280,1400",
            "--hide-scrollbars",
        ];
        if !javascript {
            args.push("--blink-settings=scriptEnabled=false");
        }
        let mut opts = serde_json::json!({ "args": args });
        if std::path::Path::new("/usr/bin/chromium").is_file() {
            opts["binary"] = "/usr/bin/chromium".into();
        }
        let mut caps = serde_json::Map::new();
        caps.insert("goog:chromeOptions".into(), opts);
        // Keep the browser's console for `console_errors`.
        caps.insert(
            "goog:loggingPrefs".into(),
            serde_json::json!({ "browser": "ALL" }),
        );
        ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{}", self.driver_port))
            .await
            .expect("a WebDriver session with headless Chromium")
    }

    /// Stops chromedriver and the server (gracefully, within 10 s).
    pub async fn stop(mut self) {
        let _ = self.driver.kill().await;
        if let Some(stop) = self.stop.take() {
            stop.send(()).unwrap();
        }
        if let Some(server) = self.server.take() {
            tokio::time::timeout(Duration::from_secs(10), server)
                .await
                .unwrap()
                .unwrap()
                .unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_follows_experiments_charts_live_updates_and_compare() {
    let fx = crate::fixture::build().await;
    let state = fx.state();
    let live = state.live.clone();
    let browser = Browser::start(state).await;
    let base = browser.base.clone();
    let c = browser.session(true).await;

    // 1. Experiments list.
    c.goto(&format!("{base}/experiments")).await.unwrap();
    let title = c.title().await.unwrap();
    assert!(title.starts_with("Experiments"), "{title}");
    let first = text_of(&c, "#experiments tbody tr:first-child td:nth-child(3)")
        .await
        .unwrap();
    assert!(!first.is_empty());
    // The proposer's `<script>` is text on the page, and did not run.
    let body = text_of(&c, "#experiments").await.unwrap();
    assert!(body.contains("<script>alert('title')</script>"), "{body}");
    shot(&c, "experiments").await;

    // 2. Open an experiment; the loss chart is drawn by uPlot over the server's SVG (which stays
    // in the page, with its hover titles, for readers without JavaScript).
    c.find(Locator::Css("a[href='/experiments/acme/lab%231']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let loss = eventually("the loss chart", || async {
        c.find(Locator::Css(
            "figure.chart.interactive[data-title^='Loss'] .uplot canvas",
        ))
        .await
        .ok()
    })
    .await;
    let (_, _, w, h) = loss.rectangle().await.unwrap();
    assert!(w > 300.0 && h > 100.0, "chart is laid out: {w}x{h}");
    let lines = c
        .find_all(Locator::Css("figure.chart[data-title^='Loss'] svg polyline, figure.chart[data-title^='Loss'] svg path"))
        .await
        .unwrap();
    assert!(!lines.is_empty(), "the loss line is drawn");
    let hovers = c
        .find_all(Locator::Css(
            "figure.chart[data-title^='Loss'] circle.hp title",
        ))
        .await
        .unwrap();
    assert!(hovers.len() > 10, "hover targets carry step and value");
    assert!(
        c.find(Locator::Css(
            "figure.chart[data-title^='Router: expert load'] svg rect"
        ))
        .await
        .is_ok()
    );
    shot(&c, "experiment").await;

    // 2b. Notes and anomalies: the current note is a band and the anomaly a line on
    // every chart of the run, each with its text as the tooltip, and both are listed under the
    // charts, the note's markup as text and the superseded note struck through.
    let marks = c
        .find_all(Locator::Css("figure.chart[data-title^='Loss'] rect.mark"))
        .await
        .unwrap();
    assert_eq!(
        marks.len(),
        2,
        "one note band and one anomaly line on the loss chart"
    );
    let band = c
        .find(Locator::Css(
            "figure.chart[data-title^='Loss'] rect.mark.annotation title",
        ))
        .await
        .unwrap()
        .html(true)
        .await
        .unwrap();
    assert!(
        band.contains("&lt;i&gt;router_bias&lt;/i&gt;"),
        "the tooltip is escaped: {band}"
    );
    assert!(
        c.find(Locator::Css(
            "figure.chart[data-title^='Gradient'] rect.mark.anomaly"
        ))
        .await
        .is_ok(),
        "the anomaly is on the gradient-norm chart too"
    );
    // uPlot draws them too, over its lines (the SVG is hidden once it has drawn).
    eventually("the marks on the uPlot loss chart", || async {
        c.find(Locator::Css(
            "figure.chart.interactive[data-title^='Loss'][data-marks-drawn='2']",
        ))
        .await
        .ok()
    })
    .await;
    let list = text_of(&c, "#annotations-list").await.unwrap();
    assert!(list.contains(crate::fixture::NOTE_TEXT), "{list}");
    assert!(list.contains("grad_norm_spike"), "{list}");
    assert!(
        c.find(Locator::Css("#annotations-list del")).await.is_ok(),
        "the superseded note is struck through"
    );
    c.goto(&format!("{base}/experiments/acme/lab%231#annotations"))
        .await
        .unwrap();
    eventually("the notes list", || async {
        c.find(Locator::Css("#annotations-list")).await.ok()
    })
    .await;
    shot(&c, "annotations").await;

    // 3. Live: the page subscribes over SSE; points published now appear without a reload.
    live.publish(LiveEvent::Status {
        run: "run-live".into(),
        status: glassbox_schemas::RunPhase::Running,
    });
    live.publish(LiveEvent::Point {
        run: "run-live".into(),
        step: 1,
        name: "train/loss".into(),
        value: 4.0,
    });
    c.goto(&format!("{base}/live/run-live")).await.unwrap();
    eventually("the page's SSE subscription", || async {
        (live.subscribers() >= 1).then_some(())
    })
    .await;
    for step in 2..=40u64 {
        live.publish(LiveEvent::Point {
            run: "run-live".into(),
            step,
            name: "train/loss".into(),
            value: crate::fixture::loss_at(step * 5),
        });
        live.publish(LiveEvent::Point {
            run: "run-live".into(),
            step,
            name: "throughput/tokens_per_second".into(),
            value: 4000.0 + step as f64,
        });
    }
    eventually("step 40 to be shown", || async {
        (text_of(&c, "#last-step").await.as_deref() == Some("40")).then_some(())
    })
    .await;
    // Each point is appended to the drawn chart's data in place (no block re-fetch).
    eventually("the chart to include step 40", || async {
        let last = c
            .execute(
                "const ch = (window.glassboxCharts || []).find(c => c.lines.some(l => l.name === 'train/loss'));\
                 return ch && ch.plot ? ch.plot.data[0][ch.plot.data[0].length - 1] : null;",
                vec![],
            )
            .await
            .ok()?;
        (last.as_f64() == Some(40.0)).then_some(())
    })
    .await;
    let fetched = c
        .execute(
            "return performance.getEntriesByType('resource').map(e => e.name).filter(n => n.includes('/live/run-live')).length",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(fetched.as_u64(), Some(0), "no chart block was re-fetched");
    live.publish(LiveEvent::Status {
        run: "run-live".into(),
        status: glassbox_schemas::RunPhase::Ended(glassbox_schemas::RunStatus::Succeeded),
    });
    eventually("the status change", || async {
        (text_of(&c, "#run-status").await.as_deref() == Some("succeeded")).then_some(())
    })
    .await;
    shot(&c, "live").await;

    // 4. Compare: tick two runs on the list and submit.
    c.goto(&format!("{base}/experiments?sort=id&dir=asc"))
        .await
        .unwrap();
    for run in ["run-1", "run-2"] {
        c.find(Locator::Css(&format!("input[name='run'][value='{run}']")))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
    }
    c.find(Locator::Css("form.compare-pick button[type='submit']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    eventually("the compare chart", || async {
        c.find(Locator::Css(
            "#compare-charts figure.chart.interactive canvas",
        ))
        .await
        .ok()
    })
    .await;
    let url = c.current_url().await.unwrap();
    assert!(url.as_str().contains("run=run-1&run=run-2"), "{url}");
    let diff = text_of(&c, "#spec-diff").await.unwrap();
    assert!(diff.contains("model.d_model"), "{diff}");
    shot(&c, "compare").await;

    for (page, name) in [
        ("/ladder", "ladder"),
        ("/ledger", "ledger"),
        ("/data", "data"),
        ("/negative", "negative"),
    ] {
        c.goto(&format!("{base}{page}")).await.unwrap();
        if name == "ladder" {
            // The log-log fit is drawn by uPlot from the points in the page.
            eventually("the ladder chart", || async {
                c.find(Locator::Css("figure.chart.interactive[data-points] canvas"))
                    .await
                    .ok()
            })
            .await;
        }
        shot(&c, name).await;
    }

    c.close().await.unwrap();
    browser.stop().await;
}

/// The sweep page (children, the best one, the failed gate) and a leaderboard (the
/// ranked rows, the Pareto chart, the runs awaiting reproduction and the failed one), reached
/// through the site's navigation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_shows_a_sweep_and_a_leaderboard() {
    let fx = crate::fixture::build().await;
    crate::fixture::sweep::add(&fx).await;
    let state = fx
        .state()
        .with_boards(vec![crate::fixture::sweep::board_def()]);
    let browser = Browser::start(state).await;
    let base = browser.base.clone();
    let c = browser.session(true).await;

    // The sweeps list, from the navigation: the failed gate is listed.
    c.goto(&format!("{base}/experiments")).await.unwrap();
    c.find(Locator::Css("header nav a[href='/sweeps']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let row = eventually("the sweeps list", || async {
        text_of(&c, "#sweeps tbody tr:first-child").await
    })
    .await;
    assert!(
        row.contains("acme/lab#7") && row.contains("gate failed"),
        "{row}"
    );
    shot(&c, "sweeps").await;

    // The sweep page.
    c.find(Locator::Css("#sweeps a[href='/sweeps/acme/lab%237']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let title = eventually("the sweep page", || async { text_of(&c, "h1").await }).await;
    assert!(
        title.contains("Width sweep <i>wider</i>"),
        "the title is text: {title}"
    );
    let gate = text_of(&c, "#gate h2").await.unwrap();
    assert!(gate.contains("gate failed"), "{gate}");
    let best = text_of(&c, "#children tr.best").await.unwrap();
    assert!(
        best.contains("acme/lab#7/1") && best.contains("1.3000"),
        "{best}"
    );
    let (_, _, w, _) = c
        .find(Locator::Css("#gate"))
        .await
        .unwrap()
        .rectangle()
        .await
        .unwrap();
    assert!(w > 300.0, "the gate's box is laid out: {w}");
    shot(&c, "sweep").await;

    // The board, from the navigation.
    c.find(Locator::Css("header nav a[href='/boards']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    eventually("the boards list", || async {
        c.find(Locator::Css("#boards a[href='/boards/markov-loss']"))
            .await
            .ok()
    })
    .await
    .click()
    .await
    .unwrap();
    let first = eventually("the ranked rows", || async {
        text_of(&c, "#ranked tbody tr:first-child").await
    })
    .await;
    assert!(
        first.contains("acme/lab#7/0") && first.contains("reproduced"),
        "{first}"
    );
    let awaiting = text_of(&c, "#awaiting").await.unwrap();
    assert!(
        awaiting.contains("Awaiting reproduction") && awaiting.contains("run-7-1"),
        "{awaiting}"
    );
    let failed = text_of(&c, "#failed").await.unwrap();
    assert!(
        failed.contains("run-8") && failed.contains("differs"),
        "{failed}"
    );
    let (_, _, w, h) = c
        .find(Locator::Css("figure.pareto svg"))
        .await
        .unwrap()
        .rectangle()
        .await
        .unwrap();
    assert!(
        w > 300.0 && h > 100.0,
        "the Pareto chart is laid out: {w}x{h}"
    );
    let points = c
        .find_all(Locator::Css("figure.pareto circle.hp"))
        .await
        .unwrap();
    assert_eq!(
        points.len(),
        2,
        "the two ranked runs are plotted, nothing else"
    );
    shot(&c, "board").await;

    c.close().await.unwrap();
    browser.stop().await;
}
