//! Throughput benchmark of the CPU backend on one spec: trains the spec's steps and prints one
//! JSON line with the median per-step tokens/s (steps 3..) and those steps' wall rate, MFU against the measured GEMM
//! peak, and peak RSS. Used by `bench/compare.py` (runner vs JAX); not a test.
//!
//! `cargo run --release -p glassbox-runner --features bench --example bench -- SPEC.toml [THREADS]`

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use glassbox_runner::backend::Backend;
use glassbox_runner::backend::cpu::CpuBackend;
use glassbox_runner::data::{DataPipeline, DirCorpusStore};
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
    println!(
        "{}",
        serde_json::json!({
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
