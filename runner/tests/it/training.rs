//! Training-level checks of the CPU backend: bitwise determinism across thread counts, exact
//! in-process resume from a checkpoint, the run outcomes (cancelled, diverged,
//! budget_exceeded) with their metrics, and the balancing methods moving the router bias.
//! (Kill-and-resume of a real process is in the root package's `tests/e2e/run_resume.rs`; the
//! learning checks are in `learning.rs`.)

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use glassbox_runner::backend::cpu::CpuBackend;
use glassbox_runner::data::{DataPipeline, DirCorpusStore};
use glassbox_runner::observer::{MetricRecord, Observer, RecordKind};
use glassbox_runner::train::{Peak, RunOptions, RunOutcome, Trainer};
use glassbox_schemas::metrics as mn;
use glassbox_schemas::{ExperimentSpec, RunStatus};

/// A small spec exercising every model feature: 2 layers, shared expert, sigmoid scores,
/// capacity (so assignments drop), router z-loss, z-loss. `extra` is appended (TOML tables).
fn spec(steps: u64, balancing: &str, extra: &str) -> ExperimentSpec {
    let text = format!(
        r#"
[experiment]
name = "determinism"
slug = "determinism-check"
hypothesis = "The CPU backend gives bitwise identical results for any thread count."

[model]
d_model = 32
n_layers = 2
n_heads = 2
seq_len = 32
[model.moe]
n_experts = 4
top_k = 2
d_expert = 32
n_shared = 1
score = "sigmoid"
capacity_factor = 1.25
router_z_loss = 0.001
balancing = {balancing}

[[data.mixture]]
domain = "markov"
generator = {{ kind = "markov", seed = 3, order = 1, alphabet = 16, branching = 3 }}

[train]
steps = {steps}
batch_size = 4
lr = 0.003
warmup_steps = 5
z_loss = 0.0001
eval_interval = 10
eval_batches = 1
seed = 11
{extra}
"#
    );
    glassbox_schemas::parse_toml(&text).expect("test spec is valid")
}

fn opts(out: Option<std::path::PathBuf>, resume: Option<std::path::PathBuf>) -> RunOptions {
    RunOptions {
        out_dir: out,
        resume,
        peak: Peak {
            flops_per_second: 1e11,
            label: "fixed test peak".into(),
        },
        cancel: Arc::new(AtomicBool::new(false)),
        wall_limit: None,
    }
}

/// Collects records; optionally raises the cancel flag after a given step.
#[derive(Default)]
struct Collect {
    records: Vec<MetricRecord>,
    cancel_after: Option<(u64, Arc<AtomicBool>)>,
}

impl Observer for Collect {
    fn on_metrics(&mut self, r: &MetricRecord) {
        self.records.push(r.clone());
        if let Some((s, flag)) = &self.cancel_after
            && r.step >= *s
        {
            flag.store(true, Ordering::SeqCst);
        }
    }
}

/// Every metric except wall-clock throughput, which is the one thing allowed to differ.
fn deterministic_part(records: &[MetricRecord]) -> Vec<(u64, BTreeMap<String, f64>)> {
    records
        .iter()
        .map(|r| {
            let mut s = r.scalars.clone();
            s.remove(mn::TOKENS_PER_SECOND);
            s.remove(mn::MFU);
            // Hardware telemetry describes the machine and its moment, not the run.
            s.retain(|k, _| !mn::hw::is_hardware(k));
            (r.step, s)
        })
        .collect()
}

fn train(spec: &ExperimentSpec, threads: usize, o: &RunOptions) -> (RunOutcome, Vec<MetricRecord>) {
    let be = CpuBackend::<f32>::new(threads).expect("pool");
    let store = DirCorpusStore::new("/nonexistent");
    let data = DataPipeline::new(spec, &store).expect("data");
    let mut t = Trainer::new(&be, spec.clone(), data, o).expect("trainer");
    let mut c = Collect::default();
    let out = t.run(o, &mut c);
    (out, c.records)
}

#[test]
fn thirty_steps_are_bitwise_identical_for_one_and_two_threads() {
    let s = spec(30, r#"{ method = "aux_loss_free", rate = 0.01 }"#, "");
    let (a, ra) = train(&s, 1, &opts(None, None));
    let (b, rb) = train(&s, 2, &opts(None, None));
    assert_eq!(a.ending.status, RunStatus::Succeeded);
    assert_eq!(a.params_blake3, b.params_blake3, "parameter hashes differ");
    assert_eq!(deterministic_part(&ra), deterministic_part(&rb));
    // The run did something: loss fell and the capacity limit dropped assignments.
    let loss = |r: &MetricRecord| r.scalars.get(mn::TRAIN_CROSS_ENTROPY).copied();
    let first = ra.iter().find_map(loss).expect("a loss");
    let last = ra.iter().rev().find_map(loss).expect("a loss");
    assert!(last < first - 0.3, "loss went from {first} to {last}");
    let dropped: f64 = ra
        .iter()
        .filter_map(|r| r.scalars.get(mn::DROPPED_ASSIGNMENTS))
        .sum();
    assert!(dropped > 0.0, "capacity 1.25 should drop some assignments");
    // Every DESIGN.md per-step metric is present.
    let train0 = ra
        .iter()
        .find(|r| r.kind == RecordKind::Train)
        .expect("train record");
    for name in glassbox_schemas::metrics::FIXED {
        assert!(train0.scalars.contains_key(*name), "missing {name}");
    }
    assert!(train0.vectors.contains_key(&mn::expert_load(1)));
    assert!(train0.scalars.contains_key(&mn::bias_norm(1)));
    let eval = ra
        .iter()
        .find(|r| r.kind == RecordKind::Eval)
        .expect("eval record");
    assert!(eval.scalars.contains_key("eval/markov/bpb"));
}

#[test]
fn resume_from_checkpoint_equals_never_stopping() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = spec(
        12,
        r#"{ method = "quantile", scale = 0.5 }"#,
        "checkpoint_interval = 5",
    );
    let (full, rfull) = train(&s, 2, &opts(None, None));
    // Run with checkpoints, then resume from step 5 in a fresh trainer.
    let (_, _) = train(&s, 2, &opts(Some(dir.path().to_path_buf()), None));
    let ck = dir.path().join("checkpoints/step-00000005.safetensors");
    assert!(ck.exists(), "checkpoint at step 5");
    let (resumed, rres) = train(&s, 1, &opts(None, Some(ck)));
    assert_eq!(resumed.ending.status, RunStatus::Succeeded);
    assert_eq!(resumed.ending.steps, 12);
    assert_eq!(full.params_blake3, resumed.params_blake3);
    let tail: Vec<_> = deterministic_part(&rfull)
        .into_iter()
        .filter(|(s, _)| *s > 5)
        .collect();
    assert_eq!(tail, deterministic_part(&rres));
}

#[test]
fn resume_refuses_a_checkpoint_of_another_spec() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = spec(6, r#"{ method = "none" }"#, "");
    train(&s, 1, &opts(Some(dir.path().to_path_buf()), None));
    let ck = dir.path().join("checkpoints/step-00000006.safetensors");
    let other = spec(6, r#"{ method = "none" }"#, "grad_clip = 0.5");
    let be = CpuBackend::<f32>::new(1).expect("pool");
    let data = DataPipeline::new(&other, &DirCorpusStore::new("/x")).expect("data");
    let err = Trainer::new(&be, other, data, &opts(None, Some(ck))).expect_err("must refuse");
    assert!(err.to_string().contains("belongs to spec"), "{err}");
}

#[test]
fn cancel_then_divergence_end_with_their_status_and_last_good_metrics() {
    let s = spec(20, r#"{ method = "switch_aux_loss", coef = 0.01 }"#, "");
    let o = opts(None, None);
    let be = CpuBackend::<f32>::new(2).expect("pool");
    let data = DataPipeline::new(&s, &DirCorpusStore::new("/x")).expect("data");
    let mut t = Trainer::new(&be, s, data, &o).expect("trainer");
    let mut c = Collect {
        records: Vec::new(),
        cancel_after: Some((3, o.cancel.clone())),
    };
    let out = t.run(&o, &mut c);
    assert_eq!(out.ending.status, RunStatus::Cancelled);
    assert_eq!(out.ending.steps, 3, "cancel takes effect at the next step");
    let good_loss = out.ending.final_metrics[mn::TRAIN_LOSS];
    assert!(good_loss.is_finite());
    // Switch loss is on: the reported balancing loss is near its floor of 1 (E sum f P >= ~1).
    assert!(out.ending.final_metrics[mn::LOAD_BALANCING_LOSS] > 0.5);

    // Poison one weight: the next step's loss is NaN; the run ends `diverged` at step 3's
    // state, reporting step 3's metrics as the last good ones.
    o.cancel.store(false, Ordering::SeqCst);
    let lnf = t.params_mut().len() - 2; // the final norm's gain: every token uses it
    t.params_mut()[lnf][0] = f32::NAN;
    let out = t.run(&o, &mut Collect::default());
    assert_eq!(out.ending.status, RunStatus::Diverged);
    assert_eq!(out.ending.steps, 3);
    assert!(
        out.ending
            .reason
            .as_deref()
            .unwrap_or("")
            .contains("step 4"),
        "{:?}",
        out.ending.reason
    );
    assert_eq!(out.ending.final_metrics[mn::TRAIN_LOSS], good_loss);
}

#[test]
fn flop_budget_stops_the_run_before_it_is_exceeded() {
    let s = spec(50, r#"{ method = "none" }"#, "");
    let per_step = glassbox_schemas::cost::flops_per_token(&s) * (4 * 32) as f64;
    let mut s = s;
    s.budget.max_flops = Some(per_step * 7.5);
    let (out, _) = train(&s, 2, &opts(None, None));
    assert_eq!(out.ending.status, RunStatus::BudgetExceeded);
    // Steps 1..7 fit; the eval at step... none before 10, so exactly 7 steps ran.
    assert_eq!(out.ending.steps, 7);
    assert!(
        out.ending
            .reason
            .as_deref()
            .unwrap_or("")
            .contains("FLOP budget")
    );
    assert!(out.ending.final_metrics.contains_key(mn::TRAIN_LOSS));
}

#[test]
fn aux_loss_free_bias_stays_centred_and_moves() {
    // A small rate: with sigmoid scores near 0.5 a large one (0.05) flips the whole load
    // every step and the bias oscillates back to 0.
    let s = spec(8, r#"{ method = "aux_loss_free", rate = 0.0005 }"#, "");
    let (out, recs) = train(&s, 1, &opts(None, None));
    assert_eq!(out.ending.status, RunStatus::Succeeded);
    let last = recs
        .iter()
        .rev()
        .find(|r| r.kind == RecordKind::Train)
        .expect("train");
    // 8 sign steps of 0.05: the bias norm is positive and at most 8 * 0.05 * sqrt(4).
    let bn = last.scalars[&mn::bias_norm(0)];

    assert!(bn > 0.0 && bn <= 0.8 + 1e-9, "bias norm {bn}");
    let load = &last.vectors[&mn::expert_load(0)];
    assert!((load.iter().sum::<f64>() - 1.0).abs() < 1e-9);
}

/// A bf16 spec is refused by the CPU backend rather than silently trained in f32 (its hash
/// says bf16); the model itself accepts it (the CUDA backend runs it).
#[test]
fn bf16_is_refused_by_the_cpu_not_silently_run_in_f32() {
    let s = spec(10, r#"{ method = "none" }"#, "precision = \"bf16\"");
    assert!(glassbox_runner::model::ModelDims::from_spec(&s).is_ok());
    let be = CpuBackend::<f32>::new(1).expect("pool");
    let data = DataPipeline::new(&s, &DirCorpusStore::new("/nonexistent")).expect("data");
    let err = Trainer::new(&be, s, data, &opts(None, None)).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("train.precision = \"bf16\""), "{text}");
    assert!(text.contains("computes in f32 only"), "{text}");
    assert!(text.contains("use precision = \"f32\""), "{text}");
}

/// Vector metrics (expert load per layer) come every `metrics.vector_interval` steps and at the
/// last step; every train record still has all its scalars, as many as the cost model counts.
#[test]
fn vector_metrics_are_recorded_every_vector_interval_steps() {
    let s = spec(
        10,
        r#"{ method = "aux_loss_free", rate = 0.01 }"#,
        "[metrics]\nvector_interval = 4",
    );
    assert_eq!(s.vector_interval(), 4);
    let (out, recs) = train(&s, 1, &opts(None, None));
    assert_eq!(out.ending.status, RunStatus::Succeeded);
    let train_recs: Vec<&MetricRecord> = recs
        .iter()
        .filter(|r| r.kind == RecordKind::Train)
        .collect();
    let with_vectors: Vec<u64> = train_recs
        .iter()
        .filter(|r| !r.vectors.is_empty())
        .map(|r| r.step)
        .collect();
    assert_eq!(with_vectors, [4, 8, 10]);
    for r in &train_recs {
        assert_eq!(
            r.scalars.keys().filter(|k| !k.starts_with("hw/")).count() as u64,
            glassbox_schemas::cost::train_scalars_per_step(&s),
            "step {}",
            r.step
        );
    }
    let volume = glassbox_schemas::cost::metric_volume(&s);
    // Hardware telemetry: the first step carries a sample (process memory and CPU time at
    // least); all of it stays within what the volume counts.
    let hw = |r: &MetricRecord| r.scalars.keys().filter(|k| k.starts_with("hw/")).count() as u64;
    assert!(
        train_recs[0].scalars.contains_key("hw/process/rss_bytes"),
        "{:?}",
        train_recs[0].scalars.keys().collect::<Vec<_>>()
    );
    let hw_points: u64 = train_recs.iter().map(|r| hw(r)).sum();
    assert!(
        hw_points <= volume.hardware_points,
        "{hw_points} > {volume:?}"
    );
    assert!(
        recs.iter()
            .all(|r| r.kind == RecordKind::Train || hw(r) == 0),
        "evaluation records carry no telemetry"
    );
    let components: usize = recs
        .iter()
        .flat_map(|r| r.vectors.values())
        .map(Vec::len)
        .sum();
    assert_eq!(volume.vector_components, components as u64);
}

/// Left out, the interval keeps a run at about a million vector components whatever its size.
#[test]
fn the_default_vector_interval_bounds_the_volume() {
    let small = spec(10, r#"{ method = "none" }"#, "");
    assert_eq!(small.vector_interval(), 1, "small runs record every step");
    let long = spec(4_000_000, r#"{ method = "none" }"#, "");
    let v = glassbox_schemas::cost::metric_volume(&long);
    // 2 layers x 4 experts per record.
    assert_eq!(v.vector_interval, 32);
    assert!(v.vector_components <= 1_000_000 + 8, "{v:?}");
}

/// A wall-clock limit from outside the spec (the lab's) ends the run `budget_exceeded` even
/// though the spec's own budget is far larger: the smaller limit wins, and the reason says whose.
#[test]
fn an_outside_wall_limit_smaller_than_the_budget_ends_the_run() {
    let s = spec(
        1000,
        r#"{ method = "none" }"#,
        "[budget]\nmax_wall_seconds = 3600",
    );
    let mut o = opts(None, None);
    o.wall_limit = Some(glassbox_runner::train::WallLimit {
        seconds: 0.0,
        source: "the test's limit".into(),
    });
    let (out, _) = train(&s, 1, &o);
    assert_eq!(out.ending.status, RunStatus::BudgetExceeded);
    let reason = out.ending.reason.unwrap();
    assert!(
        reason.contains("wall-clock limit (the test's limit) of 0 s"),
        "{reason}"
    );
}

/// A mixture that names one corpus twice reads it from the store once.
#[test]
fn a_corpus_named_twice_is_loaded_once() {
    use glassbox_runner::data::CorpusStore;
    use glassbox_runner::error::RunnerError;
    use glassbox_schemas::BlobHash;
    use std::sync::atomic::AtomicUsize;

    struct Counting {
        bytes: Arc<Vec<u8>>,
        loads: AtomicUsize,
    }
    impl CorpusStore for Counting {
        fn load(&self, _hash: &BlobHash) -> Result<Arc<Vec<u8>>, RunnerError> {
            self.loads.fetch_add(1, Ordering::SeqCst);
            Ok(self.bytes.clone())
        }
    }
    let bytes: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
    let hash = BlobHash(glassbox_schemas::Blake3Hash::of(&bytes));
    let store = Counting {
        bytes: Arc::new(bytes),
        loads: AtomicUsize::new(0),
    };
    let text = format!(
        r#"
[experiment]
name = "twice"
slug = "corpus-twice"
hypothesis = "Naming one corpus twice loads it once from the store."
[model]
d_model = 16
n_layers = 1
n_heads = 2
seq_len = 16
[model.moe]
n_experts = 4
top_k = 2
d_expert = 16
[[data.mixture]]
domain = "a"
corpus = "{hash}"
[[data.mixture]]
domain = "b"
corpus = "{hash}"
[train]
steps = 1
batch_size = 2
lr = 0.001
"#
    );
    let s = glassbox_schemas::parse_toml(&text).unwrap();
    let data = DataPipeline::new(&s, &store).unwrap();
    assert_eq!(data.domains.len(), 2);
    assert_eq!(store.loads.load(Ordering::SeqCst), 1);
}

/// The run's big buffers are allocated fallibly: an impossible size is an error naming the
/// bytes, not an aborted process.
#[test]
fn an_impossible_allocation_is_an_error_not_an_abort() {
    use glassbox_runner::backend::Backend;
    let be = CpuBackend::<f32>::new(1).unwrap();
    let err = match be.try_zeros(usize::MAX / 2) {
        Ok(_) => panic!("allocated {} floats", usize::MAX / 2),
        Err(e) => e.to_string(),
    };
    assert!(err.starts_with("cannot allocate "), "{err}");
    assert!(err.contains("bytes for a buffer"), "{err}");
    assert!(be.try_zeros(16).unwrap().iter().all(|&x| x == 0.0));
    assert_eq!(be.try_upload(&[1.0, 2.0]).unwrap(), vec![1.0, 2.0]);
}

/// Keeps the samples a run writes.
#[derive(Default)]
struct Samples(Vec<glassbox_runner::observer::SampleSet>);

impl Observer for Samples {
    fn on_samples(&mut self, s: &glassbox_runner::observer::SampleSet) {
        self.0.push(s.clone());
    }
}

#[test]
fn samples_are_written_at_every_snapshot_the_same_for_any_thread_count() {
    let extra = "checkpoint_interval = 10\n[samples]\nmax_tokens = 12\ntemperature = 0.8\nseed = 3\nprompts = [\"ab\", \"q\"]";
    let s = spec(25, r#"{ method = "aux_loss_free", rate = 0.01 }"#, extra);
    let run = |threads| {
        let be = CpuBackend::<f32>::new(threads).expect("pool");
        let store = DirCorpusStore::new("/nonexistent");
        let data = DataPipeline::new(&s, &store).expect("data");
        let o = opts(None, None);
        let mut t = Trainer::new(&be, s.clone(), data, &o).expect("trainer");
        let mut c = Samples::default();
        let out = t.run(&o, &mut c);
        (out, c.0)
    };
    let (out, one) = run(1);
    let (_, two) = run(2);
    assert_eq!(out.ending.status, RunStatus::Succeeded);
    // Snapshots at steps 10, 20 and the last, 25: samples at each.
    assert_eq!(
        one.iter().map(|s| s.step).collect::<Vec<_>>(),
        vec![10, 20, 25]
    );
    for set in &one {
        assert_eq!(set.items.len(), 2);
        assert_eq!(set.items[0].0, vec![u32::from(b'a'), u32::from(b'b')]);
        assert!(set.items.iter().all(|(_, c)| c.len() == 12));
    }
    assert_eq!(one, two, "thread count changed the samples");
    // The model changes between snapshots, and with it what it writes.
    assert_ne!(one[0].items, one[2].items);
    // The cost model counts them: a spec with samples costs more than the same without.
    let plain = spec(
        25,
        r#"{ method = "aux_loss_free", rate = 0.01 }"#,
        "checkpoint_interval = 10",
    );
    let (with, without) = (
        glassbox_schemas::cost::estimate(&s),
        glassbox_schemas::cost::estimate(&plain),
    );
    assert_eq!(glassbox_schemas::cost::sample_tokens(&s), 3 * 2 * 32);
    assert!(with.total_flops > without.total_flops);
}
