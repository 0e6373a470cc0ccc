//! Throughput benchmark of the CPU backend on one spec: trains the spec's steps and prints one
//! JSON line with the median per-step tokens/s (steps 3..) and those steps' wall rate, MFU against the measured GEMM
//! peak, and peak RSS. Used by `bench/compare.py` (runner vs JAX); not a test.
//!
//! Then the two forward-only passes on one batch of the spec's shape, alternated, medians of 5:
//! the training forward alone (`Model::evaluate`, what a step runs before its backward) and
//! scoring (`inference::score`: the dropless forward, the logits on the host and each token's
//! log-likelihood), each as tokens/s, and scoring's ratio to the training forward.
//!
//! `cargo run --release -p glassbox-runner --features bench --example bench -- SPEC.toml [THREADS]`

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use glassbox_runner::backend::Backend;
use glassbox_runner::backend::cpu::CpuBackend;
use glassbox_runner::data::{DataPipeline, DirCorpusStore};
use glassbox_runner::inference;
use glassbox_runner::model::{BatchIds, Model, ModelDims};
use glassbox_runner::observer::{MetricRecord, Observer, RecordKind};
use glassbox_runner::train::{RunOptions, Trainer};
use glassbox_schemas::metrics as mn;

#[derive(Default)]
struct Tps(Vec<f64>);
impl Observer for Tps {
    fn on_metrics(&mut self, r: &MetricRecord) {
        if r.kind == RecordKind::Train
            && r.step >= 3
            && let Some(t) = r.scalars.get(mn::TOKENS_PER_SECOND)
        {
            self.0.push(*t);
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).ok_or("usage: bench SPEC.toml [THREADS]")?;
    let threads: usize = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(2);
    let spec = glassbox_schemas::parse_toml(&std::fs::read_to_string(path)?)?;
    let be = CpuBackend::<f32>::new(threads)?;
    let peak = be.run(|| glassbox_runner::backend::cpu::peak::measure_gemm_peak(threads, 1.0));
    let opts = RunOptions {
        out_dir: None,
        resume: None,
        peak: peak.clone(),
        cancel: Arc::new(AtomicBool::new(false)),
        wall_limit: None,
    };
    let data = DataPipeline::new(&spec, &DirCorpusStore::new("/nonexistent"))?;
    let spec_copy = spec.clone();
    let mut t = Trainer::new(&be, spec, data, &opts)?;
    let mut obs = Tps::default();
    let out = t.run(&opts, &mut obs);
    let mut v = obs.0.clone();
    v.sort_by(f64::total_cmp);
    let median = v.get(v.len() / 2).copied().unwrap_or(0.0);
    // The same steps' tokens over their summed time (every step has the same token count, so
    // this is the harmonic mean of the per-step rates): what a whole-run timer would report.
    let wall = v.len() as f64 / v.iter().map(|t| 1.0 / t).sum::<f64>();
    let rss = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|k| k.parse::<f64>().ok())
            })
        })
        .unwrap_or(0.0);
    let (forward, scoring) = be.run(|| forward_only(&be, &spec_copy))?;
    println!(
        "{}",
        serde_json::json!({
            "forward_tokens_per_second": forward,
            "score_tokens_per_second": scoring,
            "score_vs_forward": scoring / forward,
            "impl": "glassbox",
            "status": out.ending.status.as_str(),
            "tokens_per_second": median,
            "tokens_per_second_wall": wall,
            "mfu": median * out.info.flops_per_token / peak.flops_per_second,
            "peak_gflops": peak.flops_per_second / 1e9,
            "peak_label": peak.label,
            "peak_rss_mib": rss / 1024.0,
            "final_loss": out.ending.final_metrics.get(mn::TRAIN_LOSS),
        })
    );
    Ok(())
}

/// Tokens/s of the training forward alone and of scoring, on one batch of the spec's shape
/// (fresh parameters; random tokens), alternated, medians of 5.
fn forward_only(
    be: &CpuBackend<f32>,
    spec: &glassbox_schemas::ExperimentSpec,
) -> Result<(f64, f64), String> {
    let model = Model::new(ModelDims::from_spec(spec).map_err(|e| e.to_string())?);
    let params = model.init_params(be, 1);
    let bias = vec![vec![0.0; model.dims.n_experts]; model.dims.n_layers];
    let (b, t, v) = (
        spec.train.batch_size as usize,
        model.dims.seq_len,
        model.dims.vocab,
    );
    let n = b * t;
    let mut s = 0x9e37_79b9_u32;
    let ids: Vec<u32> = (0..=n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            s % v as u32
        })
        .collect();
    let tokens = be.upload_ids(&ids[..n]);
    let targets = be.upload_ids(&ids[1..]);
    let batch = BatchIds {
        tokens: &tokens,
        targets: &targets,
        batch_size: b,
    };
    let (mut fwd, mut score) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        let t0 = Instant::now();
        std::hint::black_box(model.evaluate(be, &params, &bias, &batch));
        fwd.push(n as f64 / t0.elapsed().as_secs_f64());
        let t0 = Instant::now();
        // n + 1 ids: n scored tokens, in b windows of the context.
        let scored = inference::score(&model, be, &params, &bias, &ids, &ids);
        std::hint::black_box(scored.map_err(|e| e.to_string())?);
        score.push(n as f64 / t0.elapsed().as_secs_f64());
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Ok((median(fwd), median(score)))
}
