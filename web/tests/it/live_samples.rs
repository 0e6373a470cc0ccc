//! A running run's page in real headless Chromium while the run records samples: a `samples`
//! event on the live feed adds the snapshot's completions at the top of "What it writes" in
//! the server's markup, with hostile model output shown literally (markup, a mention, a
//! Markdown link, control bytes as their pictures), no script run, no console error; a
//! snapshot the page already shows is not added again; a page drawn before any snapshot gets
//! the section's introduction with its first one. Screenshot:
//! `target/screenshots/live-samples.png`.

use std::collections::BTreeMap;

use fantoccini::{Client, Locator};
use glassbox_schemas::RunId;
use glassbox_schemas::record::{RunStartedBody, SamplesBody};
use glassbox_test_support::lab::run_started;
use glassbox_web::LiveEvent;
use serde_json::Value;

use crate::browser::{Browser, console_errors, eventually, shot};
use crate::fixture::{Fixture, entry};

/// Model output at its most hostile: a mention, markup that would close the page's elements,
/// a script, an event handler, a Markdown link, and control bytes (BEL, ESC, CR, NUL).
const HOSTILE: &str = "@someone </details></pre><script>alert(1)</script><img src=x onerror=\"window.pwned=1\"> [click](javascript:window.pwned=2)\u{7}\u{1b}[31m\r\u{0}\ttab\nnext line";
/// The same as the page must show it: control characters as pictures, tab and newline kept.
const HOSTILE_SHOWN: &str = "@someone </details></pre><script>alert(1)</script><img src=x onerror=\"window.pwned=1\"> [click](javascript:window.pwned=2)\u{2407}\u{241b}[31m\u{240d}\u{2400}\ttab\nnext line";

fn started(run: &str, spec_hash: glassbox_schemas::SpecHash) -> glassbox_schemas::LedgerEntry {
    entry(
        Some("acme/lab#1"),
        BTreeMap::new(),
        RunStartedBody {
            worker: Some("w1".into()),
            host: Some("lab-host".into()),
            backend: "cpu: cpu (2 threads, f32)".into(),
            attempt: Some(1),
            ..run_started(run, spec_hash)
        },
    )
}

fn samples(run: &str, step: u64, texts: [&str; 2]) -> SamplesBody {
    SamplesBody {
        run: RunId::from(run),
        step,
        snapshot: None,
        max_tokens: 48,
        temperature: if step == 10 { 0.0 } else { 0.8 },
        seed: 7,
        prompts: vec!["First Citizen:".into(), "<b>To be</b>, or".into()],
        texts: texts.map(String::from).to_vec(),
    }
}

/// The index of the newest `samples` entry of `run`, as the API serves it.
async fn newest_samples_entry(fx: &Fixture, run: &str) -> u64 {
    let (_, _, body) =
        crate::routes::get(&fx.state(), &format!("/api/v1/runs/{run}/samples")).await;
    let v: Value = serde_json::from_str(&body).unwrap();
    v["snapshots"][0]["entry"].as_u64().unwrap()
}

/// The snapshots of "What it writes", top first: (data-entry, heading, first completion).
async fn blocks(c: &Client) -> Vec<(String, String, String)> {
    let v = c
        .execute(
            "return [...document.querySelectorAll('#samples .sample-step')].map(b => [\
               b.dataset.entry, b.querySelector('h3').textContent,\
               b.querySelector('pre.completion').textContent])",
            vec![],
        )
        .await
        .unwrap();
    serde_json::from_value(v).unwrap()
}

async fn wait_for_feed(c: &Client) {
    eventually("the samples script's live feed", || async {
        c.find(Locator::Css("#samples[data-live='open']"))
            .await
            .ok()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_runs_page_shows_new_samples_live_as_text() {
    let fx = crate::fixture::build().await;
    let spec_hash = {
        let (_, _, body) = crate::routes::get(&fx.state(), "/api/v1/runs/run-1").await;
        let v: Value = serde_json::from_str(&body).unwrap();
        v["spec_hash"].as_str().unwrap().parse().unwrap()
    };
    // run-sampling has one snapshot sampled when the page is drawn; run-quiet none.
    fx.append(&[
        started("run-sampling", spec_hash),
        started("run-quiet", spec_hash),
        entry(
            Some("acme/lab#1"),
            BTreeMap::new(),
            samples("run-sampling", 10, ["ere we proceed", " not to be"]),
        ),
    ])
    .await;
    let first = newest_samples_entry(&fx, "run-sampling").await;
    let state = fx.state();
    let live = state.live.clone();
    live.publish(LiveEvent::Status {
        run: "run-sampling".into(),
        status: glassbox_schemas::RunPhase::Running,
    });
    let browser = Browser::start(state).await;
    let c = browser.session(true).await;

    c.goto(&format!("{}/runs/run-sampling#samples", browser.base))
        .await
        .unwrap();
    wait_for_feed(&c).await;
    let before = blocks(&c).await;
    assert_eq!(before.len(), 1, "{before:?}");
    assert_eq!(before[0].0, first.to_string());

    // The snapshot the page already shows arrives on the feed (the page was drawn after its
    // entry), then the next snapshot's, whose entry is on the record too.
    live.publish(LiveEvent::samples(
        first,
        &samples("run-sampling", 10, ["ere we proceed", " not to be"]),
    ));
    let next_body = samples("run-sampling", 20, [HOSTILE, " not to be\u{7}"]);
    fx.append(&[entry(
        Some("acme/lab#1"),
        BTreeMap::new(),
        next_body.clone(),
    )])
    .await;
    let next = newest_samples_entry(&fx, "run-sampling").await;
    assert!(next > first);
    live.publish(LiveEvent::samples(next, &next_body));
    let after = eventually("the new snapshot on the page", || async {
        let b = blocks(&c).await;
        (b.len() >= 2).then_some(b)
    })
    .await;
    // Newest first, each once; the hostile text exactly as the server would show it.
    assert_eq!(
        after,
        [
            (
                next.to_string(),
                "Step 20".to_string(),
                HOSTILE_SHOWN.to_string()
            ),
            before[0].clone(),
        ]
    );
    let top = "#samples .sample-step:first-of-type";
    let meta = crate::browser::text_of(&c, &format!("{top} p.meta"))
        .await
        .unwrap();
    assert_eq!(
        meta,
        format!("temperature 0.8, seed 7, up to 48 tokens · entry {next}")
    );
    let link = c
        .find(Locator::Css(&format!("{top} p.meta a")))
        .await
        .unwrap()
        .attr("href")
        .await
        .unwrap();
    assert_eq!(
        link.as_deref(),
        Some(format!("/api/v1/entries/{next}").as_str())
    );
    let prompt = crate::browser::text_of(&c, &format!("{top} tr:nth-child(2) pre.sample"))
        .await
        .unwrap();
    assert_eq!(prompt, "<b>To be</b>, or");
    // Nothing in the model's text became an element, and nothing of it ran.
    let hostile_dom = c
        .execute(
            &format!(
                "const b = document.querySelector('{top}');\
                 return [b.querySelectorAll('script, img, a[href^=\"javascript\"], b, details').length,\
                         typeof window.pwned, b.querySelector('pre.completion').innerHTML];"
            ),
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        hostile_dom[0], 0,
        "model output became markup: {hostile_dom}"
    );
    assert_eq!(
        hostile_dom[1], "undefined",
        "model output ran: {hostile_dom}"
    );
    assert!(
        hostile_dom[2]
            .as_str()
            .unwrap()
            .contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{hostile_dom}"
    );
    // The live block is the server's markup: a reload draws the same.
    let live_html = c
        .find(Locator::Css(top))
        .await
        .unwrap()
        .html(false)
        .await
        .unwrap();
    c.execute(
        "document.getElementById('samples').scrollIntoView()",
        vec![],
    )
    .await
    .unwrap();
    shot(&c, "live-samples").await;
    let errors = console_errors(&c).await;
    assert!(errors.is_empty(), "console errors: {errors:?}");
    c.refresh().await.unwrap();
    wait_for_feed(&c).await;
    let served_html = c
        .find(Locator::Css(top))
        .await
        .unwrap()
        .html(false)
        .await
        .unwrap();
    assert_eq!(
        live_html, served_html,
        "the live block is the server's markup"
    );

    // A page drawn before any snapshot: the section says so, then shows the first one with
    // its introduction.
    c.goto(&format!("{}/runs/run-quiet#samples", browser.base))
        .await
        .unwrap();
    wait_for_feed(&c).await;
    assert!(c.find(Locator::Css("#samples p.empty")).await.is_ok());
    live.publish(LiveEvent::samples(
        next + 1,
        &samples("run-quiet", 30, ["first words", "second"]),
    ));
    eventually("the first snapshot of run-quiet", || async {
        (blocks(&c).await.len() == 1).then_some(())
    })
    .await;
    let section = c
        .execute(
            "const s = document.getElementById('samples');\
             return [s.querySelectorAll('p.empty').length, s.querySelector('.samples-intro').hidden,\
                     s.querySelector('.sample-step h3').textContent];",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(section, serde_json::json!([0, false, "Step 30"]));
    let errors = console_errors(&c).await;
    assert!(errors.is_empty(), "console errors: {errors:?}");

    c.close().await.unwrap();
    browser.stop().await;
}
