//! The GPU check: the harness behind this example (`main.rs`) and
//! `scripts/gpu-check.sh`. It checks a device backend against the CPU reference and measures
//! it, and writes `gpu-report.json` and `gpu-report.md` into the report directory after every
//! section, so a failure or a timeout later still leaves what was found.
//!
//! Sections, in order:
//! 1. **per-op parity** at two shape sets ([`SMALL`], and [`MID`]: more than one block per row,
//!    a sort over more than one chunk with a tail, repeated tokens, a vocabulary above the old
//!    65,535-row launch limit for the embedding backward), for the materialized and the fused
//!    attention, and the bf16 matmuls (dense and grouped) against their CPU twin: the f32
//!    product of the same operands rounded to bf16 ([`round_to_bf16`]). The device runs in
//!    check mode (a sync after every op), so a failing op is named and the partial report is
//!    written before the check stops;
//! 2. **whole-step parity** on a small spec (per-step `train/loss`, CPU vs device) and
//!    **run-to-run determinism** (two device runs: bitwise-equal parameters and losses);
//! 3. **cached decoding**: the same tokens fed to a decoder on each side (a prompt as one batch,
//!    then the CPU's greedy choices one at a time), the device's logits at every position
//!    within [`TOL_REORDERED`] of the CPU's; and the device's decoding speed at the rung's
//!    model (tokens/s after a 16-token prompt, and that prompt's batched forward);
//! 4. **the ladder rung, one step**: the first two losses of the rung config (at a smaller
//!    batch, so the CPU takes seconds, not minutes) on the CPU in f32 and on the device in f32
//!    and bf16;
//! 5. **the benchmark**: the rung at its own batch in f32 and bf16; each run must end
//!    `succeeded` after every step asked for ([`bench_verdict`]) — a diverged, cancelled or
//!    stopped-early run fails the check instead of reporting 0 tok/s; per kernel class
//!    (dense GEMM, expert GEMM, attention, elementwise) the achieved rate at the rung's shapes.
//!
//! Tolerances: `glassbox_runner::backend::parity`.
//!
//! No-GPU mode: the device is a second CPU backend (another thread count). Everything but the
//! bf16 and fused-attention sections runs, so CI exercises the harness itself — report
//! placement, partial reports, the bench verdict — without a GPU. Not here: flags (the
//! example), the CUDA ops themselves.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use glassbox_schemas::metrics as mn;
use glassbox_schemas::{ExperimentSpec, RunStatus};
use serde_json::{Map, Value, json};

use glassbox_runner::backend::cpu::CpuBackend;
use glassbox_runner::backend::cuda::{AttentionPath, CudaBackend};
use glassbox_runner::backend::parity::{
    TOL_BF16_LOSS, TOL_REORDERED, TOL_SAME_ORDER, TOL_STEP_LOSS,
};
use glassbox_runner::backend::{
    Accumulate, AdamW, AttnDims, Backend, Groups, Precision, Qkv, RmsNormSaved, RopeTables,
    ScoreKind, WeightLayout,
};
use glassbox_runner::data::{DataPipeline, DirCorpusStore};
use glassbox_runner::decode::{DecodeWeights, Decoder};
use glassbox_runner::error::RunnerError;
use glassbox_runner::model::{Model, ModelDims};
use glassbox_runner::observer::{MetricRecord, Observer, RecordKind};
use glassbox_runner::rng::SplitMix64;
use glassbox_runner::sampling::argmax;
use glassbox_runner::train::{Peak, RunOptions, RunOutcome, Trainer, WallLimit};

/// NVIDIA's dense bf16 tensor-core figure for the H100/H200 SXM (989 TFLOP/s): the MFU
/// reference; the measured matmul peaks are reported beside it.
pub const H200_BF16_DENSE_PEAK: f64 = 989e12;

/// The report files the check writes (and the only ones it writes) in its directory.
pub const REPORT_FILES: [&str; 2] = ["gpu-report.json", "gpu-report.md"];

/// What to check and where to write.
#[derive(Debug, Clone)]
pub struct CheckConfig {
    /// The report directory (`gpu-report.json`, `gpu-report.md` and nothing else).
    pub out: PathBuf,
    /// Where compiled kernels are cached; must not be inside `out` (the device tool returns
    /// only a few files from its output directory, so a cache there could crowd out the
    /// report). `None`: no cache.
    pub kernel_cache: Option<PathBuf>,
    /// The whole-step parity spec (a label for the report, and the spec).
    pub spec: (String, ExperimentSpec),
    /// Steps of whole-step parity and determinism.
    pub steps: u64,
    /// The ladder-rung config: one-step parity (at [`CheckConfig::rung_batch`]) and the
    /// benchmark (at its own batch).
    pub rung: (String, ExperimentSpec),
    /// Batch of the one-step rung parity.
    pub rung_batch: u32,
    /// Steps of each benchmark run (at least 3: the median skips the first two).
    pub bench_steps: u64,
    /// A wall-clock limit on each benchmark run (a run stopped by it fails the check).
    pub bench_wall_seconds: Option<f64>,
    /// Skip the benchmark.
    pub skip_bench: bool,
    /// CPU threads of the reference.
    pub threads: usize,
}

/// How the check ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Every section passed.
    pub ok: bool,
    /// One line per failed check.
    pub failures: Vec<String>,
}

/// What the check needs from a device beyond [`Backend`].
pub trait CheckDevice: Backend<F = f32> {
    /// A GPU (the numbers in the report are device figures), or the CPU twin (no-GPU mode).
    fn is_gpu(&self) -> bool;
    /// Wait after every op, so an asynchronous failure is charged to the op that caused it.
    fn set_check_mode(&self, on: bool);
    /// Run attention by `path`; `false` when this device has no such path.
    fn select_attention(&self, path: AttentionPath) -> bool;
    /// Measured matmul peak (FLOP/s) in the current precision, and its label.
    fn matmul_peak(&self) -> Result<(f64, String), RunnerError>;
    /// Device memory `(used, total)` bytes.
    fn memory_used(&self) -> Option<(u64, u64)>;
}

impl CheckDevice for CudaBackend {
    fn is_gpu(&self) -> bool {
        true
    }
    fn set_check_mode(&self, on: bool) {
        self.set_sync_each_op(on);
    }
    fn select_attention(&self, path: AttentionPath) -> bool {
        self.set_attention_path(path);
        true
    }
    fn matmul_peak(&self) -> Result<(f64, String), RunnerError> {
        let p = self.measure_matmul_peak(4096, 5)?;
        Ok((p, "cuBLAS 4096^3, random operands, best of 5".into()))
    }
    fn memory_used(&self) -> Option<(u64, u64)> {
        self.memory()
            .map(|(free, total)| ((total - free) as u64, total as u64))
    }
}

impl CheckDevice for CpuBackend<f32> {
    fn is_gpu(&self) -> bool {
        false
    }
    fn set_check_mode(&self, _on: bool) {}
    fn select_attention(&self, path: AttentionPath) -> bool {
        path != AttentionPath::Fused
    }
    fn matmul_peak(&self) -> Result<(f64, String), RunnerError> {
        let threads = self.threads();
        let p = self.run(|| glassbox_runner::backend::cpu::peak::measure_gemm_peak(threads, 0.2));
        Ok((p.flops_per_second, p.label))
    }
    fn memory_used(&self) -> Option<(u64, u64)> {
        None
    }
}

/// The two report files, rewritten after every section.
struct Report {
    dir: PathBuf,
    json: Map<String, Value>,
    md: String,
    failures: Vec<String>,
}

impl Report {
    fn flush(&self) -> Result<(), RunnerError> {
        let mut json = self.json.clone();
        json.insert("failures".into(), json!(self.failures));
        json.insert("ok".into(), json!(self.failures.is_empty()));
        let write = |name: &str, text: &str| {
            let path = self.dir.join(name);
            std::fs::write(&path, text)
                .map_err(|e| RunnerError::io(format!("writing {}", path.display()), e))
        };
        let text = serde_json::to_string_pretty(&Value::Object(json))
            .map_err(|e| RunnerError::Backend(format!("report JSON: {e}")))?;
        write(REPORT_FILES[0], &text)?;
        write(REPORT_FILES[1], &self.md)
    }

    fn fail(&mut self, what: String) {
        eprintln!("gpu_check: FAIL: {what}");
        self.failures.push(what);
    }
}

/// Refuses a kernel cache inside the report directory (see [`CheckConfig::kernel_cache`]).
pub fn check_placement(out: &Path, kernel_cache: Option<&Path>) -> Result<(), RunnerError> {
    let Some(cache) = kernel_cache else {
        return Ok(());
    };
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    if abs(cache).starts_with(abs(out)) {
        return Err(RunnerError::Unsupported {
            field: "GLASSBOX_KERNEL_CACHE",
            value: cache.display().to_string(),
            fix: format!(
                "the kernel cache must be outside the report directory {} (the device tool \
                 returns only a few files from it); set GLASSBOX_KERNEL_CACHE elsewhere",
                out.display()
            ),
        });
    }
    Ok(())
}

/// Whether a benchmark run measured what it was asked to: `succeeded` after all `requested`
/// steps. Anything else — diverged, failed, cancelled, a budget or wall limit hit, fewer steps
/// — is an error naming the status, the steps and the reason.
pub fn bench_verdict(outcome: &RunOutcome, requested: u64) -> Result<(), String> {
    let e = &outcome.ending;
    if e.status == RunStatus::Succeeded && e.steps == requested {
        return Ok(());
    }
    Err(format!(
        "the benchmark run ended {} after {} of {requested} steps{}",
        e.status.as_str(),
        e.steps,
        e.reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default()
    ))
}

/// Runs the whole check; `Err` only when the check itself cannot run (bad configuration, the
/// report cannot be written, a spec the runner refuses). A device op failure is a failed
/// verdict with a partial report, not an `Err`.
pub fn run_check<D: CheckDevice>(cfg: &CheckConfig, dev: &D) -> Result<Verdict, RunnerError> {
    check_placement(&cfg.out, cfg.kernel_cache.as_deref())?;
    std::fs::create_dir_all(&cfg.out)
        .map_err(|e| RunnerError::io(format!("creating {}", cfg.out.display()), e))?;
    let cpu = CpuBackend::<f32>::new(cfg.threads.max(1))?;
    let mode = if dev.is_gpu() {
        "gpu"
    } else {
        "no-gpu (the device is a second CPU backend)"
    };
    let mut r = Report {
        dir: cfg.out.clone(),
        json: Map::new(),
        md: format!(
            "# glassbox GPU check\n\ndevice: {}\nreference: {}\nmode: {mode}\nkernel cache: {}\n\n",
            dev.describe(),
            cpu.describe(),
            cfg.kernel_cache
                .as_ref()
                .map_or("none".into(), |p| p.display().to_string())
        ),
        failures: Vec::new(),
    };
    r.json.insert("device".into(), json!(dev.describe()));
    r.json.insert("reference".into(), json!(cpu.describe()));
    r.json.insert("mode".into(), json!(mode));
    r.json.insert(
        "kernel_cache".into(),
        json!(cfg.kernel_cache.as_ref().map(|p| p.display().to_string())),
    );
    r.flush()?;

    // 1. Per-op parity, in check mode.
    dev.set_check_mode(true);
    let ops_ok = op_parity(&mut r, &cpu, dev);
    dev.set_check_mode(false);
    r.flush()?;
    if !ops_ok {
        return finish(r);
    }

    // 2. Whole-step parity and determinism.
    step_parity(&mut r, cfg, &cpu, dev)?;
    r.flush()?;

    // 3. Cached decoding.
    decode_parity(&mut r, cfg, &cpu, dev)?;
    r.flush()?;

    // 4. The rung, one step, f32 and bf16.
    rung_parity(&mut r, cfg, &cpu, dev)?;
    r.flush()?;

    // 5. The benchmark.
    if !cfg.skip_bench {
        bench(&mut r, cfg, dev)?;
        r.flush()?;
    }
    finish(r)
}

fn finish(mut r: Report) -> Result<Verdict, RunnerError> {
    let ok = r.failures.is_empty();
    r.md.push_str(&format!(
        "\n**overall: {}**\n",
        if ok { "PASS" } else { "FAIL" }
    ));
    for f in &r.failures {
        r.md.push_str(&format!("- {f}\n"));
    }
    r.flush()?;
    Ok(Verdict {
        ok,
        failures: r.failures,
    })
}

/// One pass of per-op outputs: every output downloaded with its tolerance.
type Outputs = BTreeMap<String, (Vec<f32>, f64)>;

/// An op that failed on the device: the output being read, and the device's error.
#[derive(Debug)]
struct OpFailed {
    output: String,
    error: String,
}

/// Collects a pass's outputs; after each, asks the backend for a device error.
struct OpRun<'a, B: Backend<F = f32>> {
    be: &'a B,
    prefix: String,
    out: Outputs,
}

impl<B: Backend<F = f32>> OpRun<'_, B> {
    fn put(&mut self, name: &str, buf: Vec<f32>, tol: f64) -> Result<(), OpFailed> {
        let key = format!("{}{name}", self.prefix);
        if let Some(error) = self.be.take_error() {
            return Err(OpFailed { output: key, error });
        }
        self.out.insert(key, (buf, tol));
        Ok(())
    }
    fn buf(&mut self, name: &str, b: &B::Buf, tol: f64) -> Result<(), OpFailed> {
        let v = self.be.download(b);
        self.put(name, v, tol)
    }
}

/// The shapes of a per-op pass (the shape legend of `backend/mod.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpShapes {
    /// Name in the report.
    pub label: &'static str,
    /// Batch.
    pub b: usize,
    /// Positions.
    pub t: usize,
    /// Heads.
    pub h: usize,
    /// Head size.
    pub d: usize,
    /// Vocabulary.
    pub v: usize,
    /// Experts.
    pub e: usize,
    /// Top-k.
    pub k: usize,
    /// Expert width.
    pub f: usize,
    /// Vocabulary of the separate embedding-backward case (0: none).
    pub big_vocab: usize,
}

/// The first shapes: everything fits one block.
pub const SMALL: OpShapes = OpShapes {
    label: "small",
    b: 2,
    t: 64,
    h: 4,
    d: 16,
    v: 256,
    e: 8,
    k: 2,
    f: 32,
    big_vocab: 0,
};

/// Mid-size shapes: `C = 320` and `T = 300` rows (more than one 256-thread block per row),
/// `N K = 1800` assignments (two sort chunks of 1024, the second a tail), 600 tokens over a
/// 256-symbol vocabulary (repeats), 33 experts (not a power of two), and an embedding backward
/// over 70,000 rows (above the 65,535 grid limit of the old kernel).
pub const MID: OpShapes = OpShapes {
    label: "mid",
    b: 2,
    t: 300,
    h: 5,
    d: 64,
    v: 256,
    e: 33,
    k: 3,
    f: 96,
    big_vocab: 70_000,
};

fn op_parity<D: CheckDevice>(r: &mut Report, cpu: &CpuBackend<f32>, dev: &D) -> bool {
    r.md.push_str(
        "## Per-op parity (device vs CPU)\n\n| output | max rel. error | tolerance | ok |\n|---|---|---|---|\n",
    );
    let mut rows = Vec::new();
    let mut all_ok = true;
    for shapes in [SMALL, MID] {
        // The materialized path, every op; the fused attention; the bf16 matmuls.
        let mut passes: Vec<(&str, Pass)> = vec![("", Pass::All)];
        if dev.select_attention(AttentionPath::Fused) {
            passes.push(("fused ", Pass::FusedAttention));
        }
        let bf16 = dev.is_gpu() && dev.set_precision(Precision::Bf16).is_ok();
        let _ = dev.set_precision(Precision::F32);
        if bf16 {
            passes.push(("bf16 ", Pass::Bf16Linear));
        }
        for (tag, pass) in passes {
            let prefix = format!("{}/{tag}", shapes.label);
            // The CPU reports no device errors: its pass always completes.
            let want = run_pass(cpu, shapes, pass, &prefix, true).unwrap_or_default();
            let path = if pass == Pass::FusedAttention {
                AttentionPath::Fused
            } else {
                AttentionPath::Materialized
            };
            dev.select_attention(path);
            if pass == Pass::Bf16Linear {
                let _ = dev.set_precision(Precision::Bf16);
            }
            let got = run_pass(dev, shapes, pass, &prefix, false);
            let _ = dev.set_precision(Precision::F32);
            dev.select_attention(AttentionPath::Auto);
            let (got, failed) = match got {
                Ok(g) => (g, None),
                Err(f) => (BTreeMap::new(), Some(f)),
            };
            for (name, (w, tol)) in &want {
                let Some((g, _)) = got.get(name) else {
                    continue;
                };
                let (err, ok) = compare(w, g, *tol);
                all_ok &= ok;
                r.md.push_str(&format!(
                    "| {name} | {err:.2e} | {tol:.0e} | {} |\n",
                    if ok { "yes" } else { "**NO**" }
                ));
                rows.push(
                    json!({"output": name, "max_rel_error": err, "tolerance": tol, "ok": ok}),
                );
                if !ok {
                    r.fail(format!(
                        "per-op parity: {name}: max rel. error {err:.2e} > {tol:.0e}"
                    ));
                }
            }
            if let Some(f) = failed {
                r.md.push_str(&format!(
                    "\n**device error while reading `{}`: {}** (outputs before it are above; \
                     the check stops here)\n",
                    f.output, f.error
                ));
                r.json.insert(
                    "op_error".into(),
                    json!({"output": f.output, "error": f.error}),
                );
                r.json.insert("ops".into(), json!(rows));
                r.fail(format!("device op failed at {}: {}", f.output, f.error));
                return false;
            }
        }
    }
    r.json.insert("ops".into(), json!(rows));
    all_ok
}

/// Which ops a per-op pass runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// Every op (f32, materialized attention).
    All,
    /// Attention only (the fused kernels on the device; the CPU reference as always).
    FusedAttention,
    /// The linear layers only, bf16 operands on the device; the twin rounds them.
    Bf16Linear,
}

fn randn(seed: u64, n: usize, std: f64) -> Vec<f32> {
    let mut r = SplitMix64::new(seed);
    (0..n).map(|_| (r.normal() * std) as f32).collect()
}

/// The value of `x` rounded to bf16 (nearest, ties to even) — the twin of `f32_to_bf16` in
/// `kernels/elementwise.cu`; NaN stays NaN.
pub fn round_to_bf16(x: f32) -> f32 {
    let u = x.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return f32::from_bits((u | 0x0040_0000) & 0xffff_0000);
    }
    let r = u.wrapping_add(0x7fff + ((u >> 16) & 1));
    f32::from_bits(r & 0xffff_0000)
}

/// Runs one pass on `be` with fixed host inputs. `twin`: this is the CPU side of a bf16 pass,
/// which rounds the matmul operands itself.
fn run_pass<B: Backend<F = f32>>(
    be: &B,
    s: OpShapes,
    pass: Pass,
    prefix: &str,
    twin: bool,
) -> Result<Outputs, OpFailed> {
    let mut run = OpRun {
        be,
        prefix: prefix.to_string(),
        out: BTreeMap::new(),
    };
    match pass {
        Pass::All => {
            ops_embedding_norm(&mut run, s)?;
            ops_linear(&mut run, s, false)?;
            ops_attention(&mut run, s, true)?;
            ops_moe_loss_optim(&mut run, s)?;
        }
        Pass::FusedAttention => ops_attention(&mut run, s, false)?,
        Pass::Bf16Linear => ops_linear(&mut run, s, twin)?,
    }
    Ok(run.out)
}

fn tokens_of(n: usize, v: usize) -> Vec<u32> {
    (0..n as u32).map(|i| (i * 37 + 11) % v as u32).collect()
}

fn ops_embedding_norm<B: Backend<F = f32>>(
    run: &mut OpRun<'_, B>,
    s: OpShapes,
) -> Result<(), OpFailed> {
    let be = run.be;
    let (c, n) = (s.h * s.d, s.b * s.t);
    let tokens = tokens_of(n, s.v);
    let tok = be.upload_ids(&tokens);
    let wte = be.upload(&randn(1, s.v * c, 0.02));
    let x = be.upload(&randn(2, n * c, 1.0));
    let dout = be.upload(&randn(3, n * c, 1.0));
    let mut emb = be.zeros(n * c);
    be.embedding_fwd(&mut emb, &wte, &tok, c);
    run.buf("embedding_fwd", &emb, TOL_SAME_ORDER)?;
    let mut dwte = be.upload(&randn(4, s.v * c, 0.1));
    be.embedding_bwd(&mut dwte, &dout, &tok, c);
    run.buf("embedding_bwd", &dwte, TOL_SAME_ORDER)?;
    if s.big_vocab > 0 {
        // A vocabulary above 65,535 rows, narrow rows, ids spread over all of it with repeats.
        let (bv, bc) = (s.big_vocab, 8);
        let ids: Vec<u32> = (0..n as u64)
            .map(|i| ((i * 7919 + 13) % (bv as u64 - 1)) as u32)
            .chain([bv as u32 - 1, 0, bv as u32 - 1])
            .collect();
        let big = be.upload_ids(&ids);
        let g = be.upload(&randn(30, ids.len() * bc, 1.0));
        let mut dbig = be.upload(&randn(31, bv * bc, 0.1));
        be.embedding_bwd(&mut dbig, &g, &big, bc);
        run.buf("embedding_bwd_vocab_70000", &dbig, TOL_SAME_ORDER)?;
    }
    let w = be.upload(&randn(5, c, 1.0));
    let (mut y, mut rstd) = (be.zeros(n * c), be.zeros(n));
    be.rmsnorm_fwd(&mut y, &mut rstd, &x, &w, c, 1e-5);
    run.buf("rmsnorm_fwd", &y, TOL_REORDERED)?;
    let (mut dx, mut dw) = (
        be.upload(&randn(6, n * c, 0.1)),
        be.upload(&randn(7, c, 0.1)),
    );
    let saved = RmsNormSaved {
        x: &x,
        w: &w,
        rstd: &rstd,
    };
    be.rmsnorm_bwd(&mut dx, &mut dw, &dout, saved, c);
    run.buf("rmsnorm_bwd_dx", &dx, TOL_REORDERED)?;
    run.buf("rmsnorm_bwd_dw", &dw, TOL_REORDERED)
}

/// Dense and grouped linear layers; `round`: round the operands to bf16 first (the twin of a
/// bf16 device pass).
fn ops_linear<B: Backend<F = f32>>(
    run: &mut OpRun<'_, B>,
    s: OpShapes,
    round: bool,
) -> Result<(), OpFailed> {
    let be = run.be;
    let (c, n) = (s.h * s.d, s.b * s.t);
    let prep = |v: Vec<f32>| -> Vec<f32> {
        if round {
            v.into_iter().map(round_to_bf16).collect()
        } else {
            v
        }
    };
    let x = be.upload(&prep(randn(2, n * c, 1.0)));
    let wl = be.upload(&prep(randn(8, 3 * 3 * c * c, 0.05)));
    let dense = Groups::dense(n, c, 3 * c);
    // Three experts of unequal rows, one empty, starting at weight 1 of 3.
    let grouped = Groups {
        rows: vec![50, 0, n - 50],
        first: 0,
        in_dim: c,
        out_dim: c,
        layout: WeightLayout::OutIn,
    };
    let shared = Groups {
        rows: vec![n],
        first: 2,
        in_dim: c,
        out_dim: c,
        layout: WeightLayout::OutIn,
    };
    for (tag, g) in [
        ("dense", &dense),
        ("grouped", &grouped),
        ("offset", &shared),
    ] {
        let mut o = be.zeros(g.total_rows() * g.out_dim);
        be.linear_fwd(&mut o, &x, &wl, g);
        run.buf(&format!("linear_fwd_{tag}"), &o, TOL_REORDERED)?;
        let go = be.upload(&prep(randn(9, g.total_rows() * g.out_dim, 1.0)));
        let mut di = be.upload(&randn(10, n * c, 0.1));
        be.linear_bwd_data(&mut di, &go, &wl, g, Accumulate::Add);
        run.buf(&format!("linear_bwd_data_{tag}"), &di, TOL_REORDERED)?;
        let mut dwl = be.upload(&randn(11, 3 * 3 * c * c, 0.1));
        be.linear_bwd_weight(&mut dwl, &go, &x, g);
        run.buf(&format!("linear_bwd_weight_{tag}"), &dwl, TOL_REORDERED)?;
    }
    Ok(())
}

/// QKV split with RoPE, attention forward and backward, head merge. `with_probs`: also compare
/// the cached probabilities (the materialized path's cache is `P`; the fused one's is not).
fn ops_attention<B: Backend<F = f32>>(
    run: &mut OpRun<'_, B>,
    s: OpShapes,
    with_probs: bool,
) -> Result<(), OpFailed> {
    let be = run.be;
    let (b, t, h, d) = (s.b, s.t, s.h, s.d);
    let (c, n) = (h * d, b * t);
    let dims = AttnDims { b, t, h, d };
    let dout = be.upload(&randn(3, n * c, 1.0));
    let qkv = be.upload(&randn(12, n * 3 * c, 1.0));
    let half = d / 2;
    let (mut cs, mut sn) = (Vec::new(), Vec::new());
    for p in 0..t {
        for i in 0..half {
            let a = p as f64 * 10000f64.powf(-2.0 * i as f64 / d as f64);
            cs.push(a.cos() as f32);
            sn.push(a.sin() as f32);
        }
    }
    let rope = RopeTables {
        cos: be.upload(&cs),
        sin: be.upload(&sn),
    };
    let mut heads = Qkv {
        q: be.zeros(n * c),
        k: be.zeros(n * c),
        v: be.zeros(n * c),
    };
    be.qkv_rope_fwd(heads.each_mut(), &qkv, rope.each_ref(), dims);
    run.buf("qkv_rope_fwd_q", &heads.q, TOL_SAME_ORDER)?;
    run.buf("qkv_rope_fwd_k", &heads.k, TOL_SAME_ORDER)?;
    let (mut att, mut cache) = (be.zeros(n * c), be.zeros(be.attention_cache_len(dims)));
    be.attention_fwd(&mut att, &mut cache, heads.each_ref(), dims);
    run.buf("attention_fwd_out", &att, TOL_REORDERED)?;
    if with_probs {
        run.buf("attention_fwd_probs", &cache, TOL_REORDERED)?;
    }
    let mut dheads = Qkv {
        q: be.zeros(n * c),
        k: be.zeros(n * c),
        v: be.zeros(n * c),
    };
    be.attention_bwd(dheads.each_mut(), &dout, &cache, heads.each_ref(), dims);
    run.buf("attention_bwd_dq", &dheads.q, TOL_REORDERED)?;
    run.buf("attention_bwd_dk", &dheads.k, TOL_REORDERED)?;
    run.buf("attention_bwd_dv", &dheads.v, TOL_REORDERED)?;
    let mut dqkv = be.zeros(n * 3 * c);
    be.qkv_rope_bwd(&mut dqkv, dheads.each_ref(), rope.each_ref(), dims);
    run.buf("qkv_rope_bwd", &dqkv, TOL_REORDERED)?;
    let mut merged = be.zeros(n * c);
    be.merge_heads_fwd(&mut merged, &att, dims);
    run.buf("merge_heads_fwd", &merged, TOL_REORDERED)?;
    let mut split = be.zeros(n * c);
    be.merge_heads_bwd(&mut split, &dout, dims);
    run.buf("merge_heads_bwd", &split, TOL_SAME_ORDER)
}

/// SwiGLU, the router, routing, dispatch and combine, the loss, norms and AdamW.
fn ops_moe_loss_optim<B: Backend<F = f32>>(
    run: &mut OpRun<'_, B>,
    s: OpShapes,
) -> Result<(), OpFailed> {
    let be = run.be;
    let (c, n, v, e, k, f) = (s.h * s.d, s.b * s.t, s.v, s.e, s.k, s.f);
    let x = be.upload(&randn(2, n * c, 1.0));
    let dout = be.upload(&randn(3, n * c, 1.0));
    let hh = be.upload(&randn(13, n * 2 * f, 1.0));
    let mut a = be.zeros(n * f);
    be.swiglu_fwd(&mut a, &hh, f);
    run.buf("swiglu_fwd", &a, TOL_SAME_ORDER)?;
    let da = be.upload(&randn(14, n * f, 1.0));
    let mut dh = be.zeros(n * 2 * f);
    be.swiglu_bwd(&mut dh, &da, &hh, f);
    run.buf("swiglu_bwd", &dh, TOL_SAME_ORDER)?;

    let logits = be.upload(&randn(15, n * e, 1.0));
    let bias: Vec<f64> = (0..e).map(|i| (i as f64 - e as f64 / 2.0) * 0.01).collect();
    for (tag, kind) in [
        ("softmax", ScoreKind::Softmax),
        ("sigmoid", ScoreKind::Sigmoid),
    ] {
        let mut sc = be.zeros(n * e);
        be.router_scores_fwd(&mut sc, &logits, e, kind);
        run.buf(&format!("router_{tag}_fwd"), &sc, TOL_SAME_ORDER)?;
        let ds = be.upload(&randn(16, n * e, 1.0));
        let mut dl = be.zeros(n * e);
        be.router_scores_bwd(&mut dl, &ds, &sc, e, kind);
        run.buf(&format!("router_{tag}_bwd"), &dl, TOL_SAME_ORDER)?;
    }
    let mut dlz = be.zeros(n * e);
    let z = be.router_z_loss(Some(&mut dlz), &logits, e, 0.01);
    run.put("router_z_loss_value", vec![z as f32], TOL_REORDERED)?;
    run.buf("router_z_loss_grad", &dlz, TOL_SAME_ORDER)?;
    let mut scores = be.zeros(n * e);
    be.router_scores_fwd(&mut scores, &logits, e, ScoreKind::Softmax);
    for quantile in [false, true] {
        let st = be.router_stats(&scores, &bias, k, quantile);
        let tag = if quantile { "quantile" } else { "device" };
        let mut v: Vec<f32> = st.p_mean.iter().map(|&p| p as f32).collect();
        v.push(st.entropy_mean as f32);
        run.put(&format!("router_stats_{tag}"), v, TOL_REORDERED)?;
        if let Some(q) = st.quantile_offset {
            run.put(
                "router_stats_quantile_offset",
                q.iter().map(|&x| x as f32).collect(),
                TOL_REORDERED,
            )?;
        }
    }
    for (tag, cap) in [("dropless", None), ("capacity", Some(n * k / e))] {
        let rt = be.route(&scores, &bias, k, 1.0, cap);
        let as_f = |ids: Vec<u32>| ids.into_iter().map(|i| i as f32).collect::<Vec<_>>();
        run.put(
            &format!("route_{tag}_token_expert"),
            as_f(be.download_ids(&rt.token_expert)),
            0.0,
        )?;
        run.put(
            &format!("route_{tag}_token_slot"),
            as_f(be.download_ids(&rt.token_slot)),
            0.0,
        )?;
        run.put(
            &format!("route_{tag}_slot_assignment"),
            as_f(be.download_ids(&rt.slot_assignment)),
            0.0,
        )?;
        run.buf(&format!("route_{tag}_weights"), &rt.weights, TOL_SAME_ORDER)?;
        let rows: usize = rt.expert_rows.iter().sum();
        run.put(
            &format!("route_{tag}_rows"),
            rt.expert_rows.iter().map(|&x| x as f32).collect(),
            0.0,
        )?;
        let mut xs = be.zeros(rows * c);
        be.dispatch_fwd(&mut xs, &x, &rt, c);
        run.buf(&format!("dispatch_{tag}_fwd"), &xs, 0.0)?;
        let mut dxd = be.upload(&randn(17, n * c, 1.0));
        be.dispatch_bwd(&mut dxd, &xs, &rt, c);
        run.buf(&format!("dispatch_{tag}_bwd"), &dxd, TOL_SAME_ORDER)?;
        let ys = be.upload(&randn(18, rows * c, 1.0));
        let mut comb = be.upload(&randn(19, n * c, 1.0));
        be.combine_fwd(&mut comb, &ys, &rt, c, Accumulate::Add);
        run.buf(&format!("combine_{tag}_fwd"), &comb, TOL_SAME_ORDER)?;
        let (mut dy, mut dwts) = (be.zeros(rows * c), be.zeros(n * k));
        be.combine_bwd(&mut dy, &mut dwts, &dout, &ys, &rt, c);
        run.buf(&format!("combine_{tag}_bwd_dy"), &dy, TOL_SAME_ORDER)?;
        run.buf(&format!("combine_{tag}_bwd_dweights"), &dwts, TOL_REORDERED)?;
        let mut dsc = be.upload(&randn(20, n * e, 0.1));
        be.route_weights_bwd(&mut dsc, &dwts, &scores, &rt, 1.0);
        run.buf(&format!("route_{tag}_weights_bwd"), &dsc, TOL_REORDERED)?;
    }

    let mut lg = be.upload(&randn(21, n * v, 2.0));
    let targets = be.upload_ids(&tokens_of(n, v));
    let sums = be.cross_entropy(&mut lg, &targets, v, 1e-4, Some(1.0 / n as f64));
    run.put(
        "cross_entropy_sums",
        vec![sums.cross_entropy as f32, sums.z as f32],
        TOL_REORDERED,
    )?;
    run.buf("cross_entropy_grad", &lg, TOL_REORDERED)?;
    run.put(
        "sum_squares",
        vec![be.sum_squares(&x) as f32],
        TOL_REORDERED,
    )?;
    let (mut p, g) = (
        be.upload(&randn(22, 10_000, 1.0)),
        be.upload(&randn(23, 10_000, 1.0)),
    );
    let (mut m, mut vm) = (
        be.upload(&randn(24, 10_000, 0.1)),
        be.upload(&randn(25, 10_000, 0.1)),
    );
    be.fill_zero(&mut vm);
    let hp = AdamW {
        lr: 1e-3,
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        weight_decay: 0.1,
        step: 3,
        grad_scale: 0.5,
    };
    be.adamw(&mut p, &g, &mut m, &mut vm, &hp);
    run.buf("adamw_param", &p, TOL_SAME_ORDER)?;
    run.buf("adamw_m", &m, TOL_SAME_ORDER)?;
    run.buf("adamw_v", &vm, TOL_SAME_ORDER)
}

/// Max error relative to the reference's largest magnitude; NaN anywhere, or a length
/// mismatch, fails.
pub fn compare(want: &[f32], got: &[f32], tol: f64) -> (f64, bool) {
    if want.len() != got.len() {
        return (f64::INFINITY, false);
    }
    let scale = want
        .iter()
        .fold(0.0f64, |m, &x| m.max((x as f64).abs()))
        .max(1e-30);
    let mut err = 0.0f64;
    for (&w, &g) in want.iter().zip(got) {
        let d = ((w as f64) - (g as f64)).abs() / scale;
        if d.is_nan() {
            return (f64::NAN, false);
        }
        err = err.max(d);
    }
    (err, err <= tol)
}

/// Per-step train losses and tokens/s of a run.
#[derive(Default)]
struct Losses {
    loss: Vec<f64>,
    tps: Vec<f64>,
}

impl Observer for Losses {
    fn on_metrics(&mut self, r: &MetricRecord) {
        if r.kind == RecordKind::Train {
            if let Some(l) = r.scalars.get(mn::TRAIN_LOSS) {
                self.loss.push(*l);
            }
            if let Some(t) = r.scalars.get(mn::TOKENS_PER_SECOND) {
                self.tps.push(*t);
            }
        }
    }
}

/// A trained run: its outcome, per-step losses and the median tokens/s of steps 3...
struct Trained {
    outcome: RunOutcome,
    loss: Vec<f64>,
    median_tps: f64,
}

fn train<B: Backend>(
    be: &B,
    spec: &ExperimentSpec,
    wall: Option<f64>,
) -> Result<Trained, RunnerError> {
    let opts = RunOptions {
        out_dir: None,
        resume: None,
        peak: Peak {
            flops_per_second: H200_BF16_DENSE_PEAK,
            label: "H100/H200 SXM bf16 dense".into(),
        },
        cancel: Arc::new(AtomicBool::new(false)),
        wall_limit: wall.map(|seconds| WallLimit {
            seconds,
            source: "gpu_check --bench-wall-seconds".into(),
        }),
    };
    let data = DataPipeline::new(spec, &DirCorpusStore::new("/nonexistent"))?;
    let mut t = Trainer::new(be, spec.clone(), data, &opts)?;
    let mut obs = Losses::default();
    let outcome = t.run(&opts, &mut obs);
    let mut v: Vec<f64> = obs.tps.iter().skip(2).copied().collect();
    v.sort_by(f64::total_cmp);
    let median_tps = v.get(v.len() / 2).copied().unwrap_or(0.0);
    Ok(Trained {
        outcome,
        loss: obs.loss,
        median_tps,
    })
}

fn max_rel_diff(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs() / x.abs().max(1e-12))
        .fold(0.0, f64::max)
}

fn step_parity<D: CheckDevice>(
    r: &mut Report,
    cfg: &CheckConfig,
    cpu: &CpuBackend<f32>,
    dev: &D,
) -> Result<(), RunnerError> {
    let mut spec = cfg.spec.1.clone();
    spec.train.steps = cfg.steps;
    spec.train.eval_interval = cfg.steps.max(1);
    let c = train(cpu, &spec, None)?;
    let g = train(dev, &spec, None)?;
    let g2 = train(dev, &spec, None)?;
    let worst = max_rel_diff(&c.loss, &g.loss);
    let steps_ok = c.loss.len() == g.loss.len()
        && !g.loss.is_empty()
        && worst <= TOL_STEP_LOSS
        && g.outcome.ending.status == RunStatus::Succeeded;
    if !steps_ok {
        r.fail(format!(
            "whole-step parity on {}: max relative loss difference {worst:.2e} (tolerance \
             {TOL_STEP_LOSS:.0e}), device run {}",
            cfg.spec.0,
            g.outcome.ending.status.as_str()
        ));
    }
    r.md.push_str(&format!(
        "\n## Whole-step parity ({}, {} steps)\n\nmax relative train/loss difference: {worst:.2e} (tolerance {TOL_STEP_LOSS:.0e}) — {}\n\n| step | cpu loss | device loss |\n|---|---|---|\n",
        cfg.spec.0,
        cfg.steps,
        if steps_ok { "ok" } else { "**FAILED**" }
    ));
    for (i, (a, b)) in c.loss.iter().zip(&g.loss).enumerate() {
        r.md.push_str(&format!("| {} | {a:.6} | {b:.6} |\n", i + 1));
    }
    let det_ok = g.outcome.params_blake3 == g2.outcome.params_blake3
        && g.loss
            .iter()
            .map(|x| x.to_bits())
            .eq(g2.loss.iter().map(|x| x.to_bits()));
    if !det_ok {
        r.fail("run-to-run determinism: two device runs differ".into());
    }
    r.md.push_str(&format!(
        "\n## Run-to-run determinism\n\ntwo device runs: params {} vs {} — {}\n",
        g.outcome.params_blake3,
        g2.outcome.params_blake3,
        if det_ok {
            "bitwise identical"
        } else {
            "**DIFFER**"
        }
    ));
    r.json.insert(
        "step_parity".into(),
        json!({"spec": cfg.spec.0, "steps": cfg.steps, "max_rel_loss_diff": worst,
               "tolerance": TOL_STEP_LOSS, "ok": steps_ok,
               "cpu_loss": c.loss, "device_loss": g.loss}),
    );
    r.json.insert(
        "determinism".into(),
        json!({"params_run1": g.outcome.params_blake3, "params_run2": g2.outcome.params_blake3,
               "ok": det_ok}),
    );
    Ok(())
}

/// Logits after each token a decoder over `params` is fed: `prompt` as one batch, then each of
/// `then` alone; `Ok` also carries the seconds of the prompt and of the rest.
fn decoded_logits<B: Backend<F = f32>>(
    be: &B,
    model: &Model,
    params: &[B::Buf],
    bias: &[Vec<f64>],
    prompt: &[u32],
    then: &[u32],
) -> Result<(Vec<Vec<f32>>, f64, f64), RunnerError> {
    be.run(|| {
        let w = DecodeWeights::new(model, be, params);
        let mut d = Decoder::new(model, be, &w, bias);
        let t0 = Instant::now();
        let mut rows = vec![d.feed_all(prompt)?];
        let first = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        for &t in then {
            rows.push(d.feed(t)?);
        }
        let rest = t1.elapsed().as_secs_f64();
        match be.take_error() {
            Some(e) => Err(RunnerError::Backend(e)),
            None => Ok((rows, first, rest)),
        }
    })
}

fn decode_parity<D: CheckDevice>(
    r: &mut Report,
    cfg: &CheckConfig,
    cpu: &CpuBackend<f32>,
    dev: &D,
) -> Result<(), RunnerError> {
    // Parity on the whole-step spec's model, the same parameters on both sides.
    let model = Model::new(ModelDims::from_spec(&cfg.spec.1)?);
    let bias = vec![vec![0.0; model.dims.n_experts]; model.dims.n_layers];
    let host = model.init_params(cpu, 17);
    let on_dev: Vec<_> = host.iter().map(|p| dev.upload(p)).collect();
    let len = model.dims.seq_len.min(48);
    let prompt = tokens_of(8.min(len - 1), model.dims.vocab);
    // The CPU's greedy tokens (and its logits), which the device is then fed.
    let (want, fed) = cpu.run(|| -> Result<_, RunnerError> {
        let w = DecodeWeights::new(&model, cpu, &host);
        let mut d = Decoder::new(&model, cpu, &w, &bias);
        let mut rows = vec![d.feed_all(&prompt)?];
        let mut fed = Vec::new();
        while prompt.len() + fed.len() < len {
            let next = argmax(&rows[rows.len() - 1]);
            fed.push(next);
            rows.push(d.feed(next)?);
        }
        Ok((rows, fed))
    })?;
    let (got, ..) = decoded_logits(dev, &model, &on_dev, &bias, &prompt, &fed)?;
    let mut worst = 0.0f64;
    let mut ok = want.len() == got.len();
    for (w, g) in want.iter().zip(&got) {
        let (err, fine) = compare(w, g, TOL_REORDERED);
        worst = worst.max(err);
        ok &= fine;
    }
    let greedy_same = want
        .iter()
        .zip(&got)
        .filter(|(w, g)| argmax(w) == argmax(g))
        .count();
    if !ok {
        r.fail(format!(
            "cached decoding on {}: logits differ by {worst:.2e} of the largest (tolerance \
             {TOL_REORDERED:.0e})",
            cfg.spec.0
        ));
    }
    // Speed at the rung's model: fresh parameters on the device, a 16-token prompt, then
    // tokens fed one at a time (their choice does not change the work).
    let big = Model::new(ModelDims::from_spec(&cfg.rung.1)?);
    let big_bias = vec![vec![0.0; big.dims.n_experts]; big.dims.n_layers];
    let big_params = big.init_params(dev, 3);
    let new = big.dims.seq_len.saturating_sub(16).min(128);
    let (_, prompt_s, rest_s) = decoded_logits(
        dev,
        &big,
        &big_params,
        &big_bias,
        &tokens_of(16.min(big.dims.seq_len), big.dims.vocab),
        &tokens_of(new, big.dims.vocab),
    )?;
    let tps = new as f64 / rest_s.max(1e-9);
    r.md.push_str(&format!(
        "\n## Cached decoding\n\nparity on {} ({} positions, a {}-token prompt as one batch): \
         max logit difference {worst:.2e} of the largest (tolerance {TOL_REORDERED:.0e}) — {}; \
         greedy choice equal at {greedy_same} of {} positions\n\nspeed on the device at {} \
         ({} layers, d_model {}): {tps:.0} tokens/s over {new} tokens; the 16-token prompt's \
         forward {:.1} ms\n",
        cfg.spec.0,
        want.len(),
        prompt.len(),
        if ok { "ok" } else { "**FAILED**" },
        want.len(),
        cfg.rung.0,
        big.dims.n_layers,
        big.dims.d_model,
        prompt_s * 1e3
    ));
    r.json.insert(
        "decode".into(),
        json!({"spec": cfg.spec.0, "positions": want.len(), "max_rel_logit_diff": worst,
               "tolerance": TOL_REORDERED, "ok": ok, "greedy_equal": greedy_same,
               "speed_model": cfg.rung.0, "new_tokens": new, "tokens_per_second": tps,
               "prompt_forward_seconds": prompt_s}),
    );
    Ok(())
}

fn rung_parity<D: CheckDevice>(
    r: &mut Report,
    cfg: &CheckConfig,
    cpu: &CpuBackend<f32>,
    dev: &D,
) -> Result<(), RunnerError> {
    let mut spec = cfg.rung.1.clone();
    spec.train.batch_size = cfg.rung_batch.max(1);
    spec.train.steps = 2;
    spec.train.eval_interval = 1_000_000;
    spec.train.precision = Precision::F32;
    let t0 = Instant::now();
    let c = train(cpu, &spec, None)?;
    let cpu_seconds = t0.elapsed().as_secs_f64();
    r.md.push_str(&format!(
        "\n## Ladder rung, first steps ({}, batch {}, 2 steps; CPU {cpu_seconds:.1} s)\n\n| precision | cpu losses (f32) | device losses | max rel. diff | tolerance | ok |\n|---|---|---|---|---|---|\n",
        cfg.rung.0, spec.train.batch_size
    ));
    let mut rows = Vec::new();
    for (prec, tol) in [
        (Precision::F32, TOL_STEP_LOSS),
        (Precision::Bf16, TOL_BF16_LOSS),
    ] {
        if prec == Precision::Bf16 && !dev.is_gpu() {
            r.md.push_str("| bf16 | — | not run (no GPU: the CPU twin has no bf16) | | | |\n");
            continue;
        }
        let mut s = spec.clone();
        s.train.precision = prec;
        let g = train(dev, &s, None)?;
        let d = max_rel_diff(&c.loss, &g.loss);
        let ok = g.loss.len() == c.loss.len()
            && g.outcome.ending.status == RunStatus::Succeeded
            && d <= tol;
        let name = precision_name(prec);
        if !ok {
            r.fail(format!(
                "rung step parity ({name}): max relative loss difference {d:.2e} (tolerance \
                 {tol:.0e}), device run {}",
                g.outcome.ending.status.as_str()
            ));
        }
        r.md.push_str(&format!(
            "| {name} | {:?} | {:?} | {d:.2e} | {tol:.0e} | {} |\n",
            c.loss,
            g.loss,
            if ok { "yes" } else { "**NO**" }
        ));
        rows.push(
            json!({"precision": name, "cpu_loss": c.loss, "device_loss": g.loss,
                         "max_rel_diff": d, "tolerance": tol, "ok": ok}),
        );
    }
    let _ = dev.set_precision(Precision::F32);
    r.json.insert(
        "rung_parity".into(),
        json!({"config": cfg.rung.0, "batch": spec.train.batch_size, "runs": rows}),
    );
    Ok(())
}

fn precision_name(p: Precision) -> &'static str {
    match p {
        Precision::F32 => "f32",
        Precision::Bf16 => "bf16",
    }
}

fn bench<D: CheckDevice>(r: &mut Report, cfg: &CheckConfig, dev: &D) -> Result<(), RunnerError> {
    let mut runs = Vec::new();
    let precisions: &[Precision] = if dev.is_gpu() {
        &[Precision::F32, Precision::Bf16]
    } else {
        &[Precision::F32]
    };
    for &prec in precisions {
        let name = precision_name(prec);
        let mut spec = cfg.rung.1.clone();
        spec.train.steps = cfg.bench_steps.max(3);
        spec.train.eval_interval = 1_000_000;
        spec.train.precision = prec;
        dev.set_precision(prec).map_err(RunnerError::Backend)?;
        let (peak, peak_label) = dev.matmul_peak()?;
        let classes = kernel_classes(dev, &spec);
        let t = train(dev, &spec, cfg.bench_wall_seconds)?;
        let _ = dev.set_precision(Precision::F32);
        let verdict = bench_verdict(&t.outcome, spec.train.steps);
        if let Err(why) = &verdict {
            r.fail(format!("benchmark ({name}): {why}"));
        }
        let fpt = t.outcome.info.flops_per_token;
        let achieved = t.median_tps * fpt;
        let memory = dev.memory_used();
        // The machine's side, sampled as the run ends (`hw/...`).
        let hw: BTreeMap<String, f64> = dev
            .telemetry()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        r.md.push_str(&format!(
            "\n## Benchmark ({}, {name}, batch {}, {} steps)\n\nstatus: {}\n",
            cfg.rung.0,
            spec.train.batch_size,
            spec.train.steps,
            match &verdict {
                Ok(()) => "succeeded, every step".to_string(),
                Err(why) => format!("**{why}**"),
            }
        ));
        r.md.push_str(&format!(
            "tokens/s (median of steps 3..): {:.0}\nFLOPs/token (cost model): {fpt:.3e}\nachieved: {:.2} TFLOP/s\nmeasured {name} matmul peak ({peak_label}): {:.2} TFLOP/s — MFU vs it: {:.2}%\n",
            t.median_tps,
            achieved / 1e12,
            peak / 1e12,
            100.0 * achieved / peak.max(1.0),
        ));
        if dev.is_gpu() {
            r.md.push_str(&format!(
                "MFU vs the H100/H200 SXM bf16 dense figure (989 TFLOP/s): {:.2}%\n",
                100.0 * achieved / H200_BF16_DENSE_PEAK
            ));
        }
        if let Some((used, total)) = memory {
            r.md.push_str(&format!(
                "device memory in use after the run: {:.1} GiB of {:.1} GiB\n",
                used as f64 / 1073741824.0,
                total as f64 / 1073741824.0
            ));
        }
        for (k, v) in &hw {
            r.md.push_str(&format!("{k}: {v:.1}\n"));
        }
        r.md.push_str("\n| kernel class | shape | seconds | achieved |\n|---|---|---|---|\n");
        for k in &classes {
            r.md.push_str(&format!(
                "| {} | {} | {:.3e} | {} |\n",
                k.class,
                k.shape,
                k.seconds,
                k.rate_text()
            ));
        }
        runs.push(json!({
            "config": cfg.rung.0, "precision": name, "batch": spec.train.batch_size,
            "steps_requested": spec.train.steps, "steps": t.outcome.ending.steps,
            "status": t.outcome.ending.status.as_str(), "ok": verdict.is_ok(),
            "tokens_per_second": t.median_tps, "flops_per_token": fpt,
            "tflops": achieved / 1e12, "matmul_peak_tflops": peak / 1e12,
            "matmul_peak_label": peak_label, "mfu_vs_measured_peak": achieved / peak.max(1.0),
            "mfu_vs_h200_bf16_dense": if dev.is_gpu() { json!(achieved / H200_BF16_DENSE_PEAK) } else { Value::Null },
            "device_memory_used_bytes": memory.map(|m| m.0), "hw": hw,
            "kernel_classes": classes.iter().map(ClassRate::to_json).collect::<Vec<_>>(),
        }));
        r.json.insert("benchmark".into(), json!(runs));
        r.flush()?;
    }
    Ok(())
}

/// The achieved rate of one kernel class at the benchmark's shapes.
#[derive(Debug, Clone)]
struct ClassRate {
    class: &'static str,
    shape: String,
    seconds: f64,
    /// FLOPs per call (matmul classes) or bytes moved per call (elementwise).
    work: f64,
    bytes: bool,
}

impl ClassRate {
    fn rate_text(&self) -> String {
        let rate = self.work / self.seconds.max(1e-12);
        if self.bytes {
            format!("{:.1} GB/s", rate / 1e9)
        } else {
            format!("{:.2} TFLOP/s", rate / 1e12)
        }
    }
    fn to_json(&self) -> Value {
        let rate = self.work / self.seconds.max(1e-12);
        let mut m = Map::new();
        m.insert("class".into(), json!(self.class));
        m.insert("shape".into(), json!(self.shape));
        m.insert("seconds".into(), json!(self.seconds));
        if self.bytes {
            m.insert("gb_per_s".into(), json!(rate / 1e9));
        } else {
            m.insert("tflops".into(), json!(rate / 1e12));
        }
        Value::Object(m)
    }
}

/// Best of 3 timed calls of `f` after one warm-up, with the device drained around each (a
/// download of a one-element buffer is the portable sync).
fn time_best<D: Backend<F = f32>>(dev: &D, mut f: impl FnMut()) -> f64 {
    let probe = dev.zeros(1);
    f();
    let _ = dev.download(&probe);
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let t0 = Instant::now();
        f();
        let _ = dev.download(&probe);
        best = best.min(t0.elapsed().as_secs_f64());
    }
    best
}

/// Dense GEMM (the QKV projection), expert GEMM (the first expert matmul over `N K / E` rows
/// per expert), attention forward + backward (causal: `6 B H T^2 D` useful FLOPs), elementwise
/// (SwiGLU forward over the expert rows: bytes read and written), each at the spec's shapes.
fn kernel_classes<D: CheckDevice>(dev: &D, spec: &ExperimentSpec) -> Vec<ClassRate> {
    let m = &spec.model;
    let (c, t, hh) = (m.d_model as usize, m.seq_len as usize, m.n_heads as usize);
    let (e, k, f) = (
        m.moe.n_experts as usize,
        m.moe.top_k as usize,
        m.moe.d_expert as usize,
    );
    let b = spec.train.batch_size as usize;
    let n = b * t;
    let d = c / hh;
    let mut out = Vec::new();

    let x = dev.upload(&randn(40, n * c, 1.0));
    let w = dev.upload(&randn(41, 3 * c * c, 0.02));
    let mut y = dev.zeros(n * 3 * c);
    let g = Groups::dense(n, c, 3 * c);
    let s = time_best(dev, || dev.linear_fwd(&mut y, &x, &w, &g));
    out.push(ClassRate {
        class: "dense GEMM",
        shape: format!("[{n}, {c}] x [{c}, {}]", 3 * c),
        seconds: s,
        work: 2.0 * (n * c * 3 * c) as f64,
        bytes: false,
    });
    drop((y, w));

    let per = (n * k) / e.max(1);
    let rows = vec![per; e];
    let s_rows = per * e;
    let xs = dev.upload(&randn(42, s_rows * c, 1.0));
    let we = dev.upload(&randn(43, e * 2 * f * c, 0.02));
    let mut h = dev.zeros(s_rows * 2 * f);
    let ge = Groups {
        rows,
        first: 0,
        in_dim: c,
        out_dim: 2 * f,
        layout: WeightLayout::OutIn,
    };
    let s = time_best(dev, || dev.linear_fwd(&mut h, &xs, &we, &ge));
    out.push(ClassRate {
        class: "expert GEMM (grouped)",
        shape: format!("{e} x [{per}, {c}] x [{c}, {}]", 2 * f),
        seconds: s,
        work: 2.0 * (s_rows * c * 2 * f) as f64,
        bytes: false,
    });
    let mut a = dev.zeros(s_rows * f);
    let s = time_best(dev, || dev.swiglu_fwd(&mut a, &h, f));
    out.push(ClassRate {
        class: "elementwise (SwiGLU fwd)",
        shape: format!("[{s_rows}, {}] -> [{s_rows}, {f}]", 2 * f),
        seconds: s,
        work: 4.0 * (s_rows * 3 * f) as f64,
        bytes: true,
    });
    drop((xs, we, h, a));

    let dims = AttnDims { b, t, h: hh, d };
    let heads = Qkv {
        q: dev.upload(&randn(44, n * c, 1.0)),
        k: dev.upload(&randn(45, n * c, 1.0)),
        v: dev.upload(&randn(46, n * c, 1.0)),
    };
    let dout = dev.upload(&randn(47, n * c, 1.0));
    let mut o = dev.zeros(n * c);
    let mut cache = dev.zeros(dev.attention_cache_len(dims));
    let mut dh = Qkv {
        q: dev.zeros(n * c),
        k: dev.zeros(n * c),
        v: dev.zeros(n * c),
    };
    let s = time_best(dev, || {
        dev.attention_fwd(&mut o, &mut cache, heads.each_ref(), dims);
        dev.attention_bwd(dh.each_mut(), &dout, &cache, heads.each_ref(), dims);
    });
    out.push(ClassRate {
        class: "attention fwd+bwd",
        shape: format!("B {b}, H {hh}, T {t}, D {d}"),
        seconds: s,
        work: 6.0 * (b * hh * t * t * d) as f64,
        bytes: false,
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounding_is_nearest_even_and_keeps_nan() {
        assert_eq!(round_to_bf16(1.0), 1.0);
        // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: ties to even (1).
        assert_eq!(round_to_bf16(1.0 + 2f32.powi(-8)), 1.0);
        // Just above halfway rounds up.
        assert_eq!(
            round_to_bf16(1.0 + 2f32.powi(-8) + 2f32.powi(-20)),
            1.0 + 2f32.powi(-7)
        );
        // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up to even.
        assert_eq!(
            round_to_bf16(1.0 + 3.0 * 2f32.powi(-8)),
            1.0 + 2f32.powi(-6)
        );
        assert!(round_to_bf16(f32::NAN).is_nan());
        assert_eq!(round_to_bf16(f32::INFINITY), f32::INFINITY);
        assert_eq!(round_to_bf16(-2.5), -2.5);
    }

    #[test]
    fn a_kernel_cache_inside_the_report_directory_is_refused() {
        let out = Path::new("/tmp/glassbox-report");
        let err = check_placement(out, Some(&out.join("kernel-cache"))).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("GLASSBOX_KERNEL_CACHE"), "{text}");
        assert!(text.contains("/tmp/glassbox-report"), "{text}");
        assert!(check_placement(out, Some(Path::new("/tmp/glassbox-kernels"))).is_ok());
        assert!(check_placement(out, None).is_ok());
        // A sibling whose name merely starts with the report's is not inside it.
        assert!(check_placement(out, Some(Path::new("/tmp/glassbox-report-cache"))).is_ok());
    }

    #[test]
    fn compare_fails_on_nan_and_length_and_scales_by_the_reference() {
        assert_eq!(compare(&[1.0, 2.0], &[1.0], 1.0), (f64::INFINITY, false));
        assert!(!compare(&[1.0], &[f32::NAN], 1.0).1);
        let (err, ok) = compare(&[100.0, 1.0], &[100.0, 1.01], 1e-3);
        assert!(ok && (err - 1e-4).abs() < 1e-6, "{err}");
    }
}
