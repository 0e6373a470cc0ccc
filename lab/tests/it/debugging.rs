//! Community debugging through the real lab: a run whose learning rate jumps at a
//! known step gets an `anomaly` entry at that step and exactly one alert notice; `/note`s
//! become `annotation` entries (the only run picked, another issue's run refused, the rate
//! limit, an edited comment's note superseding the old one); a stalled run raises one alert
//! and the stalled-runs gauge, on a manual clock. SQLite and PostgreSQL alike.

use std::time::Duration;

use glassbox_github_bot::Login;
use glassbox_github_bot::port::{LabEvent, NoteRequest, RunAlert};
use glassbox_lab::LabConfig;
use glassbox_lab::outbox::{self, AlertNotice, Notice};
use glassbox_lab::queue::{JobKind, NewJob, WorkerId};
use glassbox_lab::stall::StallWatch;
use glassbox_schemas::record::{AnnotationBody, AnomalyBody, AnomalyKind, NoteRole};
use glassbox_schemas::{EntryKind, ExperimentId, RunId, RunStatus};

use crate::flow::{manual_clock, of_kind, recorded, run_log, setup_clocked, spec};

async fn an_injected_spike_is_flagged_at_its_step(engine: &str) {
    let s = setup_clocked(
        engine,
        "spike",
        LabConfig::default(),
        glassbox_lab::Clock::System,
    )
    .await;
    // The learning rate jumps 100x from the 0-based step 40 on: the update of optimiser step 41
    // is the first at the new rate, so the parameter norm jumps at step 41.
    let sp = spec(
        56,
        "schedule = \"constant\"\nlr_milestones = [{ step = 40, factor = 100.0 }]",
        "",
    );
    s.propose_and_approve(1, "alice", sp).await;
    let f = recorded(s.worker("w1").run_next().await.unwrap());
    assert_ne!(f.ending.status, RunStatus::Failed, "{:?}", f.ending.reason);

    let entries = s.entries();
    let anomalies: Vec<AnomalyBody> = of_kind(&entries, EntryKind::Anomaly)
        .into_iter()
        .map(|e| e.body_as().unwrap())
        .collect();
    let first = anomalies.first().expect("the jump is flagged");
    assert_eq!(first.run, f.run);
    assert_eq!(
        (first.anomaly.kind, first.anomaly.step),
        (AnomalyKind::ParamsNormJump, 41),
        "{anomalies:?}"
    );
    assert!(
        anomalies.iter().all(|a| a.anomaly.step >= 41),
        "nothing before the jump is flagged: {anomalies:?}"
    );
    assert!(
        anomalies
            .iter()
            .all(|a| a.anomaly.kind != AnomalyKind::RouterBiasJump
                || a.anomaly.metric.contains("bias_norm")),
        "the router bias is its own series"
    );
    let log = run_log(&s, &f.run.0);
    assert!(
        log.contains(" warn anomaly: parameter-norm jump (trained parameters) at step 41: `params/norm/total` changed by "),
        "{log}"
    );

    // Exactly one alert, however many anomalies: the run's first.
    let alerts: Vec<Notice> = outbox::pending(&s.queue, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, n)| n)
        .filter(|n| matches!(n, Notice::Alert { .. }))
        .collect();
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    match s.flow.lab_event(&alerts[0]) {
        Some(LabEvent::Alert {
            run,
            alert:
                RunAlert::Anomaly {
                    anomaly,
                    ledger_index,
                },
            ..
        }) => {
            assert_eq!(run, f.run);
            assert_eq!(anomaly.step, 41);
            assert_eq!(
                entries[ledger_index as usize].kind(),
                EntryKind::Anomaly,
                "the alert names the anomaly's entry"
            );
        }
        other => panic!("expected an anomaly alert, got {other:?}"),
    }
    // A second raise of the same kind for the run tells no one.
    let again = AlertNotice::Anomaly {
        anomaly: first.anomaly.clone(),
        entry: 0,
    };
    assert!(
        !outbox::raise_alert(&s.queue, &ExperimentId("octo/lab#1".into()), &f.run, again)
            .await
            .unwrap()
    );
    let metrics = s.queue.prometheus_text().await.unwrap();
    let line = format!(
        "glassbox_run_anomalies_total{{kind=\"params_norm_jump\"}} {}",
        anomalies
            .iter()
            .filter(|a| a.anomaly.kind == AnomalyKind::ParamsNormJump)
            .count()
    );
    assert!(metrics.contains(&line), "{line} in\n{metrics}");
    assert!(metrics.contains("glassbox_run_anomalies_total{kind=\"expert_collapse\"} 0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_injected_spike_is_flagged_at_its_step_sqlite() {
    an_injected_spike_is_flagged_at_its_step("sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_injected_spike_is_flagged_at_its_step_postgres() {
    an_injected_spike_is_flagged_at_its_step("postgres").await;
}

fn note(n: u64, run: Option<&RunId>, author: &str, comment: u64, text: &str) -> NoteRequest {
    NoteRequest {
        experiment: ExperimentId(format!("octo/lab#{n}")),
        run: run.cloned(),
        author: Login::new(author),
        role: if author == "maint" {
            NoteRole::Maintainer
        } else {
            NoteRole::Community
        },
        from_step: 2,
        to_step: 3,
        text: text.into(),
        url: format!("https://github.com/octo/lab/issues/{n}#issuecomment-{comment}"),
    }
}

async fn notes_become_annotation_entries(engine: &str) {
    let clock = manual_clock();
    let mut config = LabConfig::default();
    config.limits.max_notes_per_author_per_hour = 2;
    let s = setup_clocked(engine, "notes", config, clock.clone()).await;
    s.propose_and_approve(1, "alice", spec(4, "", "")).await;
    s.propose_and_approve(2, "bob", spec(4, "seed = 9", ""))
        .await;
    let w = s.worker("w1");
    let run1 = recorded(w.run_next().await.unwrap()).run;
    let run2 = recorded(w.run_next().await.unwrap()).run;

    // The only run is picked; the text is kept as written.
    let first = s
        .flow
        .annotate(note(1, None, "maint", 10, "<b>spike</b> from router_bias"))
        .await
        .unwrap();
    assert_eq!((first.run.clone(), first.supersedes), (run1.clone(), None));
    // Another issue's run is refused, naming the issue it belongs to.
    let err = s
        .flow
        .annotate(note(1, Some(&run2), "zed", 11, "wrong issue"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("{run2} is a run of octo/lab#2")),
        "{err}"
    );
    // The same comment, edited: the new note supersedes the old, which stays in the log.
    let edited = s
        .flow
        .annotate(note(
            1,
            Some(&run1),
            "maint",
            10,
            "spike from the bias heuristic",
        ))
        .await
        .unwrap();
    assert_eq!(edited.supersedes, Some(first.entry));
    let notes: Vec<AnnotationBody> = of_kind(&s.entries(), EntryKind::Annotation)
        .into_iter()
        .map(|e| e.body_as().unwrap())
        .collect();
    assert_eq!(notes.len(), 2);
    assert_eq!(notes[0].text, "<b>spike</b> from router_bias");
    assert_eq!(notes[0].role, NoteRole::Maintainer);
    assert_eq!((notes[1].from_step, notes[1].to_step), (2, 3));
    assert_eq!(notes[1].supersedes, Some(first.entry));

    // Two notes an hour: the third is refused with the limit's name, and allowed an hour on.
    let err = s
        .flow
        .annotate(note(1, None, "maint", 12, "third"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("limits.max_notes_per_author_per_hour"),
        "{err}"
    );
    clock.advance(Duration::from_secs(3601));
    s.flow
        .annotate(note(1, None, "maint", 12, "third"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notes_become_annotation_entries_sqlite() {
    notes_become_annotation_entries("sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notes_become_annotation_entries_postgres() {
    notes_become_annotation_entries("postgres").await;
}

/// A running job whose watch says it stalled raises one alert and the gauge, on a manual clock;
/// a step clears the gauge without a second alert.
async fn a_stalled_run_alerts_once(engine: &str) {
    let clock = manual_clock();
    let s = setup_clocked(engine, "stall", LabConfig::default(), clock.clone()).await;
    let sp = spec(4, "", "");
    let hash = glassbox_schemas::spec_hash(&sp).unwrap();
    let job = s
        .queue
        .enqueue(&NewJob {
            kind: JobKind::Run,
            experiment: ExperimentId("octo/lab#1".into()),
            spec_hash: hash,
            author: "alice".into(),
            proposal_entry: None,
            approval_entry: None,
            priority: 0,
            max_attempts: 3,
        })
        .await
        .unwrap();
    let me = WorkerId("w1".into());
    let leased = s
        .queue
        .lease(&me, Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(leased.id, job);
    let run = leased.run();
    s.queue.mark_running(job, &me, &run).await.unwrap();

    let watch = StallWatch::new(clock.clone(), 10.0, 1_000);
    for step in 1..=5 {
        clock.advance(Duration::from_millis(200));
        watch.stepped(step);
    }
    clock.advance(Duration::from_millis(1_900));
    assert_eq!(
        watch.check(),
        None,
        "under the floor of 1 s... and 10 x 200 ms"
    );
    clock.advance(Duration::from_millis(200));
    let stalled = watch.check().expect("2.1 s without a step is stalled");
    assert_eq!(stalled.last_step, 5);
    let alert = AlertNotice::Stalled {
        last_step: stalled.last_step,
        silent_ms: stalled.silent_ms,
        median_step_ms: stalled.median_step_ms,
    };
    let exp = ExperimentId("octo/lab#1".into());
    assert!(
        outbox::raise_alert(&s.queue, &exp, &run, alert.clone())
            .await
            .unwrap()
    );
    assert!(
        !outbox::raise_alert(&s.queue, &exp, &run, alert)
            .await
            .unwrap()
    );
    let metrics = s.queue.prometheus_text().await.unwrap();
    assert!(metrics.contains("glassbox_stalled_runs 1"), "{metrics}");
    let pending = outbox::pending(&s.queue, 10).await.unwrap();
    assert_eq!(pending.len(), 1);
    match s.flow.lab_event(&pending[0].1) {
        Some(LabEvent::Alert {
            alert:
                RunAlert::Stalled {
                    last_step,
                    silent_seconds,
                    median_step_seconds,
                },
            ..
        }) => {
            assert_eq!(last_step, 5);
            assert!((silent_seconds - 2.1).abs() < 1e-9);
            assert!((median_step_seconds - 0.2).abs() < 1e-9);
        }
        other => panic!("expected a stalled alert, got {other:?}"),
    }
    watch.stepped(6);
    assert_eq!(watch.check(), None);
    outbox::clear_alert(&s.queue, &run, "stalled")
        .await
        .unwrap();
    let metrics = s.queue.prometheus_text().await.unwrap();
    assert!(metrics.contains("glassbox_stalled_runs 0"), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_run_alerts_once_sqlite() {
    a_stalled_run_alerts_once("sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_run_alerts_once_postgres() {
    a_stalled_run_alerts_once("postgres").await;
}

/// The sample alert rules in `docs/` pass `promtool check rules` (Debian's `prometheus`
/// package; `cargo xtask test` provides it as `GLASSBOX_PROMTOOL`), and every `glassbox_`
/// metric they name is one the lab's `/metrics` text has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sample_alert_rules_pass_promtool_and_name_our_metrics() {
    let promtool = std::env::var_os("GLASSBOX_PROMTOOL").expect(
        "GLASSBOX_PROMTOOL is not set: run the tests with `cargo xtask test`, which provides promtool (`cargo xtask env` prints the variables for running one test by hand)",
    );
    let rules =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/prometheus-alerts.yml");
    let out = std::process::Command::new(&promtool)
        .args(["check", "rules"])
        .arg(&rules)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {promtool:?}: {e}"));
    assert!(
        out.status.success(),
        "promtool check rules failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let s = setup_clocked("sqlite", "rules", LabConfig::default(), manual_clock()).await;
    let exported = s.queue.prometheus_text().await.unwrap();
    let text = std::fs::read_to_string(&rules).unwrap();
    let mut named = 0;
    for (i, _) in text.match_indices("glassbox_") {
        let name: String = text[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if text[..i].ends_with(|c: char| c.is_ascii_alphanumeric()) || name == "glassbox_" {
            continue;
        }
        named += 1;
        assert!(
            exported.contains(&format!("# TYPE {name} ")),
            "the rules name {name}, which the lab does not export:\n{exported}"
        );
    }
    assert!(named >= 3, "the rules name the run metrics");
}
