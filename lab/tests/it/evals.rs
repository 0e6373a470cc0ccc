//! Evaluations through the real flow, workers and ledger, on SQLite and on PostgreSQL: suites
//! imported (good and bad files), each snapshot evaluated as an eval job of its own at a
//! priority below training, a job whose worker died taken over with one `evaluation` entry,
//! `/evaluate` queueing a finished run's snapshots; `acc`/`acc_norm` of a two-item suite
//! against log-likelihoods computed another way in the test; and contamination of a suite
//! built to overlap a stored corpus's training split by a known fraction.

use std::time::Duration;

use glassbox_lab::LabConfig;
use glassbox_lab::eval::{self, SuiteRef, generate, score, suite};
use glassbox_lab::queue::{JobKind, JobState, WorkerId};
use glassbox_lab::trained::{Pick, TrainedModel};
use glassbox_runner::backend::Backend;
use glassbox_runner::backend::cpu::CpuBackend;
use glassbox_runner::inference;
use glassbox_schemas::eval::{EvalKind, SuiteItem, encode_pair};
use glassbox_schemas::record::{EvalOutcome, EvaluationBody};
use glassbox_schemas::{EntryKind, ExperimentId, RunStatus};

use crate::flow::{Setup, of_kind, recorded, setup_clocked, spec};

/// The flow tests' micro spec's Markov source, as a suite of `kind`.
fn write_suite(s: &Setup, name: &str, kind: EvalKind, items: usize) -> std::path::PathBuf {
    let g = spec(8, "", "").data.mixture[0].generator.clone().unwrap();
    let drawn = generate::markov_items(&g, kind, items, 5).unwrap();
    let path = s.dir.path().join(format!("{name}.jsonl"));
    std::fs::write(&path, suite::jsonl(&drawn).unwrap()).unwrap();
    path
}

fn import(s: &Setup, name: &str, kind: EvalKind, file: std::path::PathBuf) -> suite::StoredSuite {
    suite::import(
        &s.recorder,
        &suite::SuiteImport {
            file,
            name: name.parse().unwrap(),
            kind,
            licence: Some("CC0-1.0".into()),
            source: Some("test".into()),
        },
    )
    .unwrap()
}

fn evaluations(s: &Setup) -> Vec<EvaluationBody> {
    of_kind(&s.entries(), EntryKind::Evaluation)
        .iter()
        .map(|e| e.body_of::<EvaluationBody>().unwrap().clone())
        .collect()
}

async fn lab(engine: &str, name: &str, suites: &str) -> Setup {
    let config = LabConfig::parse(&format!("[evals]\nsuites = [{suites}]\n")).unwrap();
    setup_clocked(engine, name, config, glassbox_lab::queue::Clock::System).await
}

async fn snapshots_are_evaluated_as_jobs_below_training(engine: &str) {
    let s = lab(engine, "eval_jobs", "\"mc\", \"text\"").await;
    let mc = import(
        &s,
        "mc",
        EvalKind::MultipleChoice,
        write_suite(&s, "mc", EvalKind::MultipleChoice, 12),
    );
    import(
        &s,
        "text",
        EvalKind::Perplexity,
        write_suite(&s, "text", EvalKind::Perplexity, 4),
    );
    let w = s.worker_with("w1", |o| o.evals = s.flow.config().evals.clone());
    let (_, q) = s.propose_and_approve(1, "alice", spec(8, "", "")).await;
    let made = recorded(w.run_job(q.job).await.unwrap());
    assert_eq!(made.ending.status, RunStatus::Succeeded);
    // Snapshots at steps 4 and 8, two suites each: four eval jobs, below training.
    let open = s.queue.open_jobs(100).await.unwrap();
    let evals: Vec<_> = open.iter().filter(|j| j.kind == JobKind::Eval).collect();
    assert_eq!(evals.len(), 4, "{open:?}");
    assert!(evals.iter().all(|j| j.automatic && j.priority == -1000));
    let steps: Vec<u64> = evals
        .iter()
        .map(|j| j.evaluates.as_ref().unwrap().step)
        .collect();
    assert_eq!(steps, vec![4, 4, 8, 8]);
    // A training job approved now is leased before any of them.
    let (_, q2) = s.propose_and_approve(2, "bob", spec(4, "", "")).await;
    let next = recorded(w.run_next().await.unwrap());
    assert_eq!(next.job, q2.job, "training first");
    // Then the evaluations (the second run's snapshot adds its own two).
    let mut n = 0;
    while let Some(end) = w.run_next().await.unwrap() {
        let f = recorded(Some(end));
        assert_eq!(
            f.ending.status,
            RunStatus::Succeeded,
            "{:?}",
            f.ending.reason
        );
        n += 1;
    }
    assert_eq!(n, 6);
    let done = evaluations(&s);
    assert_eq!(done.len(), 6);
    for e in &done {
        assert_eq!(e.outcome, EvalOutcome::Evaluated, "{:?}", e.detail);
        assert!(e.automatic);
        assert_eq!(e.worker.as_deref(), Some("w1"));
        let c = e.contamination.as_ref().unwrap();
        assert_eq!(c.ngram, 13);
        assert!(c.tokens_checked["markov"] > 0);
        match e.kind {
            EvalKind::MultipleChoice => {
                assert_eq!(e.suite_hash, mc.body.suite);
                assert_eq!(e.items, 12);
                for m in ["acc", "acc_norm", "acc_stderr", "acc_norm_stderr"] {
                    let v = e.metrics[m];
                    assert!((0.0..=1.0).contains(&v), "{m} = {v}");
                }
            }
            EvalKind::Perplexity => {
                assert!(e.metrics["bpb"] > 0.0 && e.metrics["nll"] > 0.0);
                assert!((e.metrics["ppl"] - e.metrics["nll"].exp()).abs() < 1e-9);
            }
        }
    }
    // Each is bitwise what `glassbox eval` computes by hand on another thread count.
    let model = TrainedModel::load(&s.recorder, &made.run, &Pick::Step(8)).unwrap();
    let loaded = suite::load(&s.recorder, &mc).unwrap();
    let by_hand = eval::evaluate(&s.recorder, &model, &loaded, 2, &|| false)
        .unwrap()
        .unwrap();
    let queued = done
        .iter()
        .find(|e| e.run == made.run && e.step == 8 && e.suite_hash == mc.body.suite)
        .unwrap();
    assert_eq!(queued.metrics, by_hand.body.metrics);
    assert_eq!(queued.contamination, by_hand.body.contamination);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_are_evaluated_as_jobs_below_training_sqlite() {
    snapshots_are_evaluated_as_jobs_below_training("sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_are_evaluated_as_jobs_below_training_postgres() {
    snapshots_are_evaluated_as_jobs_below_training("postgres").await;
}

/// A worker that leased an eval job and died: the lease runs out, another worker takes the job
/// over, and the record has one `evaluation` entry.
async fn a_dead_workers_evaluation_is_taken_over(engine: &str) {
    let s = lab(engine, "eval_takeover", "").await;
    let mc = import(
        &s,
        "mc",
        EvalKind::MultipleChoice,
        write_suite(&s, "mc", EvalKind::MultipleChoice, 6),
    );
    let w = s.worker("w1");
    let (_, q) = s.propose_and_approve(1, "alice", spec(4, "", "")).await;
    recorded(w.run_job(q.job).await.unwrap());
    let (queued, _) = s
        .flow
        .queue_evaluation(&ExperimentId("octo/lab#1".into()), &mc.body.name, "maint")
        .await
        .unwrap();
    assert_eq!(queued, 1);
    // The dead worker takes it with a short lease and never comes back.
    let dead = s
        .queue
        .lease(&WorkerId("dead".into()), Duration::from_millis(300))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(dead.kind, JobKind::Eval);
    assert!(
        dead.evaluates.as_ref().unwrap().announce,
        "the last snapshot announces"
    );
    assert!(w.run_next().await.unwrap().is_none(), "leased elsewhere");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let f = recorded(w.run_next().await.unwrap());
    assert_eq!(f.job, dead.id);
    assert_eq!(f.ending.status, RunStatus::Succeeded);
    let job = s.queue.get(dead.id).await.unwrap();
    assert_eq!(
        (job.state, job.attempts),
        (JobState::Ended(RunStatus::Succeeded), 2)
    );
    let done = evaluations(&s);
    assert_eq!(done.len(), 1, "one evaluation entry");
    assert_eq!(done[0].job, Some(dead.id));
    assert!(!done[0].automatic);
    // The same request again queues nothing new only while one is open; now it is over.
    let again = s
        .flow
        .queue_evaluation(&ExperimentId("octo/lab#1".into()), &mc.body.name, "maint")
        .await
        .unwrap();
    assert_eq!(again.0, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_workers_evaluation_is_taken_over_sqlite() {
    a_dead_workers_evaluation_is_taken_over("sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_workers_evaluation_is_taken_over_postgres() {
    a_dead_workers_evaluation_is_taken_over("postgres").await;
}

/// A cancelled eval job ends with an `evaluation` entry saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_evaluation_is_on_the_record() {
    let s = lab("sqlite", "eval_cancel", "").await;
    let mc = import(
        &s,
        "mc",
        EvalKind::MultipleChoice,
        write_suite(&s, "mc", EvalKind::MultipleChoice, 4),
    );
    let w = s.worker("w1");
    let (_, q) = s.propose_and_approve(1, "alice", spec(4, "", "")).await;
    recorded(w.run_job(q.job).await.unwrap());
    s.flow
        .queue_evaluation(&ExperimentId("octo/lab#1".into()), &mc.body.name, "maint")
        .await
        .unwrap();
    let job = s.queue.open_jobs(10).await.unwrap()[0].clone();
    s.flow.cancel_job(job.id, "maint").await.unwrap();
    let done = evaluations(&s);
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(done[0].outcome, EvalOutcome::Cancelled);
    assert!(done[0].metrics.is_empty());
}

/// `/evaluate` of an experiment with nothing finished, or of a suite not on the record, is
/// refused with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evaluate_refusals_name_the_reason() {
    let s = lab("sqlite", "eval_refusals", "").await;
    let id = ExperimentId("octo/lab#1".into());
    let e = s
        .flow
        .queue_evaluation(&id, &"mc".parse().unwrap(), "maint")
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("nothing has run"), "{e}");
    let w = s.worker("w1");
    let (_, q) = s.propose_and_approve(1, "alice", spec(4, "", "")).await;
    recorded(w.run_job(q.job).await.unwrap());
    let e = s
        .flow
        .queue_evaluation(&id, &"nope".parse().unwrap(), "maint")
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("no evaluation suite nope"), "{e}");
}

/// A bad file is refused naming the line and the field, and stores nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_suite_file_names_the_line_and_stores_nothing() {
    let s = lab("sqlite", "eval_import", "").await;
    let file = s.dir.path().join("bad.jsonl");
    std::fs::write(
        &file,
        "{\"context\": \"a b\", \"choices\": [\"c\", \"d\"], \"answer\": 0}\n\n{\"context\": \"e\", \"choices\": [\"f\", \"g\"]}\n",
    )
    .unwrap();
    let blobs_before = s.recorder.blobs().list().unwrap().len();
    let err = suite::import(
        &s.recorder,
        &suite::SuiteImport {
            file: file.clone(),
            name: "bad".parse().unwrap(),
            kind: EvalKind::MultipleChoice,
            licence: None,
            source: None,
        },
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("line 3") && err.contains("answer"), "{err}");
    assert_eq!(s.recorder.blobs().list().unwrap().len(), blobs_before);
    assert!(s.recorder.eval_suites().unwrap().is_empty());
    // The same items as a perplexity suite: the field that is missing is named.
    let err = suite::import(
        &s.recorder,
        &suite::SuiteImport {
            file,
            name: "bad".parse().unwrap(),
            kind: EvalKind::Perplexity,
            licence: None,
            source: None,
        },
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("line 1") && err.contains("text"), "{err}");
    // A good file twice: one entry, the same version.
    let good = write_suite(&s, "good", EvalKind::Perplexity, 3);
    let a = import(&s, "good", EvalKind::Perplexity, good.clone());
    let b = import(&s, "good", EvalKind::Perplexity, good);
    assert_eq!(a, b);
    assert_eq!(s.recorder.eval_suites().unwrap().len(), 1);
    assert_eq!(a.body.items, 3);
    let found = suite::find(&s.recorder, &SuiteRef::Name("good".parse().unwrap())).unwrap();
    assert_eq!(found.body.suite, a.body.suite);
}

/// `acc` and `acc_norm` of a two-item suite, against log-likelihoods the test takes from the
/// model's full forward over each whole request (`inference::score`), and the definitions
/// worked by hand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acc_and_acc_norm_match_a_hand_worked_two_item_suite() {
    let s = lab("sqlite", "eval_hand", "").await;
    let w = s.worker("w1");
    let (_, q) = s.propose_and_approve(1, "alice", spec(8, "", "")).await;
    let made = recorded(w.run_job(q.job).await.unwrap());
    let model = TrainedModel::load(&s.recorder, &made.run, &Pick::Newest).unwrap();
    // Bytes 0..8 are the source's symbols; a trailing space moves onto the continuation.
    let items = vec![
        SuiteItem::Choice {
            context: "\u{1}\u{3}\u{2}\u{1} ".into(),
            choices: vec![
                "\u{3}".into(),
                "\u{5}\u{5}\u{5}".into(),
                "\u{7}\u{2}".into(),
            ],
            answer: 0,
        },
        SuiteItem::Choice {
            context: "\u{4}\u{4}\u{6}".into(),
            choices: vec!["\u{0}\u{1}".into(), "\u{2}\u{6}\u{1}\u{1}".into()],
            answer: 1,
        },
    ];
    // Each choice's log-likelihood from the whole request's per-token scores.
    let be = CpuBackend::<f32>::new(1).unwrap();
    let params: Vec<_> = model
        .state
        .params
        .iter()
        .map(|(_, _, v)| be.upload(v))
        .collect();
    let ll = |context: &str, choice: &str| -> f64 {
        let (c, cont) = encode_pair(context, choice);
        let whole: Vec<u32> = format!("{c}{cont}").bytes().map(u32::from).collect();
        let bytes = vec![1u32; whole.len()];
        let scored = be
            .run(|| {
                inference::score(
                    &model.model,
                    &be,
                    &params,
                    &model.state.router_bias,
                    &whole,
                    &bytes,
                )
            })
            .unwrap();
        let n = cont.len();
        scored.per_token[scored.per_token.len() - n..]
            .iter()
            .map(|(_, lp)| lp)
            .sum()
    };
    let mut acc = Vec::new();
    let mut acc_norm = Vec::new();
    for item in &items {
        let SuiteItem::Choice {
            context,
            choices,
            answer,
        } = item
        else {
            unreachable!()
        };
        let lls: Vec<f64> = choices.iter().map(|c| ll(context, c)).collect();
        let norm: Vec<f64> = lls
            .iter()
            .zip(choices)
            .map(|(l, c)| l / c.chars().count() as f64)
            .collect();
        let best = |v: &[f64]| {
            let mut b = 0;
            for (i, x) in v.iter().enumerate() {
                if *x > v[b] {
                    b = i;
                }
            }
            b as u32
        };
        acc.push(f64::from(u8::from(best(&lls) == *answer)));
        acc_norm.push(f64::from(u8::from(best(&norm) == *answer)));
    }
    let got = score::score_items(&model, EvalKind::MultipleChoice, &items, 2, &|| false)
        .unwrap()
        .unwrap();
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let stderr = |v: &[f64]| {
        let m = mean(v);
        (v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (v.len() as f64 - 1.0)).sqrt()
            / (v.len() as f64).sqrt()
    };
    assert_eq!(got.metrics["acc"], mean(&acc));
    assert_eq!(got.metrics["acc_norm"], mean(&acc_norm));
    assert_eq!(got.metrics["acc_stderr"], stderr(&acc));
    assert_eq!(got.metrics["acc_norm_stderr"], stderr(&acc_norm));
    // And the log-likelihoods themselves agree with the full forward's.
    for (item, scored) in items.iter().zip(&got.items) {
        let SuiteItem::Choice {
            context, choices, ..
        } = item
        else {
            unreachable!()
        };
        for (c, got) in choices.iter().zip(&scored.logliks) {
            let want = ll(context, c);
            assert!(
                (got - want).abs() <= 1e-9 * want.abs().max(1.0),
                "{got} vs {want}"
            );
        }
    }
}

/// A suite built to share 13-grams with a stored corpus's training split in 3 of its 11
/// items (one more quotes the held-out split, which the run never trained on) is 3/11
/// contaminated, and exactly those items are flagged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contamination_of_a_suite_built_to_overlap_the_corpus() {
    let s = lab("sqlite", "eval_overlap", "").await;
    // A corpus of lowercase words; 5% of it held out at the end.
    let mut corpus = String::new();
    let mut x = 12345u64;
    while corpus.len() < 40_000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let len = 2 + (x >> 60) as usize;
        for k in 0..len {
            corpus.push(char::from(b'a' + ((x >> (8 + 5 * (k % 11))) % 26) as u8));
        }
        corpus.push(' ');
    }
    let file = s.dir.path().join("corpus.txt");
    std::fs::write(&file, &corpus).unwrap();
    let ds = glassbox_lab::dataset::import(
        &s.recorder,
        &glassbox_lab::dataset::ImportRequest {
            domain: "words".into(),
            file,
            format: glassbox_schemas::data::CorpusFormat::Text { separator: None },
        },
    )
    .unwrap();
    let mut sp = spec(4, "", "");
    sp.data.mixture[0].generator = None;
    sp.data.mixture[0].corpus = Some(ds.hash);
    sp.data.mixture[0].domain = "words".into();
    let w = s.worker("w1");
    let (_, q) = s.propose_and_approve(1, "alice", sp).await;
    let made = recorded(w.run_job(q.job).await.unwrap());
    assert_eq!(
        made.ending.status,
        RunStatus::Succeeded,
        "{:?}",
        made.ending.reason
    );
    let split = corpus.len() - (corpus.len() as f64 * 0.05).ceil() as usize;
    let mut texts: Vec<String> = (0..7)
        .map(|i| format!("UPPER CASE TEXT NUMBER {i} NEVER SEEN"))
        .collect();
    texts.insert(1, format!("XX{}YY", &corpus[100..120]));
    texts.insert(4, corpus[5000..5013].to_string());
    texts.insert(8, format!("{}ZZ", &corpus[split - 30..split - 10]));
    // Held out only: from well past the split.
    texts.push(corpus[split + 100..split + 140].to_string());
    let file = s.dir.path().join("overlap.jsonl");
    std::fs::write(
        &file,
        suite::jsonl(
            &texts
                .iter()
                .map(|t| SuiteItem::Text { text: t.clone() })
                .collect::<Vec<_>>(),
        )
        .unwrap(),
    )
    .unwrap();
    let stored = import(&s, "overlap", EvalKind::Perplexity, file);
    let model = TrainedModel::load(&s.recorder, &made.run, &Pick::Newest).unwrap();
    let loaded = suite::load(&s.recorder, &stored).unwrap();
    let done = eval::evaluate(&s.recorder, &model, &loaded, 1, &|| false)
        .unwrap()
        .unwrap();
    let c = done.body.contamination.unwrap();
    assert_eq!(done.body.items, 11);
    assert_eq!(c.first_flagged, vec![1, 4, 8]);
    assert_eq!(c.flagged, 3);
    assert!((c.fraction - 3.0 / 11.0).abs() < 1e-12);
    assert_eq!(c.tokens_checked["words"], split as u64);
}

/// The built-in suites in `examples/evals/` are what `glassbox data eval-suite generate` draws
/// from `examples/tiny.toml` (seed 1): regenerating them gives the same bytes.
#[test]
fn the_shipped_suites_are_what_the_generator_draws() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let tiny = std::fs::read_to_string(root.join("examples/tiny.toml")).unwrap();
    let g = glassbox_schemas::parse_toml(&tiny).unwrap().data.mixture[0]
        .generator
        .clone()
        .unwrap();
    for (file, kind, n) in [
        ("markov-choice.jsonl", EvalKind::MultipleChoice, 200),
        ("markov-text.jsonl", EvalKind::Perplexity, 50),
    ] {
        let shipped = std::fs::read_to_string(root.join("examples/evals").join(file)).unwrap();
        let drawn = suite::jsonl(&generate::markov_items(&g, kind, n, 1).unwrap()).unwrap();
        assert_eq!(shipped.as_bytes(), drawn, "{file}");
    }
}

/// A forecast of `eval:SUITE/acc_norm` is not settled by the run's result (the run reports no
/// such metric) but by the evaluation of its last snapshot, in that `evaluation` entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forecast_of_an_evaluation_metric_is_settled_by_the_last_snapshots_evaluation() {
    let s = lab("sqlite", "eval_forecast", "\"mc\"").await;
    import(
        &s,
        "mc",
        EvalKind::MultipleChoice,
        write_suite(&s, "mc", EvalKind::MultipleChoice, 8),
    );
    let w = s.worker_with("w1", |o| o.evals = s.flow.config().evals.clone());
    let mut sp = spec(8, "", "");
    sp.forecast = Some(glassbox_schemas::spec::Forecast {
        metric: "eval:mc/acc_norm".into(),
        value: 0.5,
        tolerance: 1.0,
    });
    let (_, q) = s.propose_and_approve(1, "alice", sp).await;
    let made = recorded(w.run_job(q.job).await.unwrap());
    assert_eq!(made.ending.status, RunStatus::Succeeded);
    assert_eq!(made.forecast, None, "not the result's to settle");
    while w.run_next().await.unwrap().is_some() {}
    let done = evaluations(&s);
    assert_eq!(done.len(), 2);
    let last = done.iter().find(|e| e.step == 8).unwrap();
    let settled = last
        .forecast
        .as_ref()
        .expect("the last snapshot settles it");
    assert_eq!(settled.actual, Some(last.metrics["acc_norm"]));
    assert!(settled.hit);
    assert!(
        done.iter()
            .find(|e| e.step == 4)
            .unwrap()
            .forecast
            .is_none()
    );
    let entries = s.entries();
    let results = of_kind(&entries, EntryKind::Result);
    let body = results[0]
        .body_of::<glassbox_schemas::record::ResultBody>()
        .unwrap();
    assert_eq!(body.forecast, None);
}

/// A perplexity suite's `nll`, `ppl` and `bpb`, against each text scored another way: as one
/// continuation after its first token (the requests path), pooled by hand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn perplexity_metrics_match_texts_scored_as_continuations() {
    let s = lab("sqlite", "eval_ppl", "").await;
    let w = s.worker("w1");
    let (_, q) = s.propose_and_approve(1, "alice", spec(8, "", "")).await;
    let made = recorded(w.run_job(q.job).await.unwrap());
    let model = TrainedModel::load(&s.recorder, &made.run, &Pick::Newest).unwrap();
    // Two texts within the context of 16 tokens, bytes of the source's alphabet.
    let texts = [
        "\u{1}\u{3}\u{2}\u{1}\u{5}\u{0}\u{7}",
        "\u{4}\u{4}\u{6}\u{2}\u{2}\u{6}\u{1}\u{0}\u{3}\u{3}",
    ];
    let requests: Vec<inference::Continuation> = texts
        .iter()
        .map(|t| inference::Continuation {
            tokens: t.bytes().map(u32::from).collect(),
            continuation: t.len() - 1,
        })
        .collect();
    let lls = model
        .continuation_logliks(1, &requests, &|| false)
        .unwrap()
        .unwrap();
    let nll: f64 = -lls.iter().sum::<f64>();
    let predicted: usize = texts.iter().map(|t| t.len() - 1).sum();
    let items: Vec<SuiteItem> = texts
        .iter()
        .map(|t| SuiteItem::Text {
            text: t.to_string(),
        })
        .collect();
    let got = score::score_items(&model, EvalKind::Perplexity, &items, 2, &|| false)
        .unwrap()
        .unwrap();
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
    assert!(
        close(got.metrics["nll"], nll / predicted as f64),
        "{:?}",
        got.metrics
    );
    assert!(close(got.metrics["ppl"], (nll / predicted as f64).exp()));
    assert!(close(
        got.metrics["bpb"],
        nll / std::f64::consts::LN_2 / predicted as f64
    ));
}
