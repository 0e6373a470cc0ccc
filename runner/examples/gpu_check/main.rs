//! The GPU check behind `scripts/gpu-check.sh`: flags into one
//! [`CheckConfig`], one call of [`run_check`], an exit status. What is checked and every
//! tolerance are documented in `check.rs` beside this file. Writes
//! `gpu-report.json` and `gpu-report.md` to the report directory (and nothing else there);
//! exits 0 when every check passed, 1 when one failed (the report says which), 2 on usage
//! errors, 3 when the check cannot run (CUDA not usable, a spec refused, the report
//! unwritable).
//!
//! ```text
//! gpu_check [--out DIR] [--spec examples/tiny.toml] [--steps 20]
//!           [--rung bench/configs/ladder-rung.toml] [--rung-batch 2] [--bench-steps 6]
//!           [--bench-wall-seconds S] [--skip-bench] [--no-gpu] [--threads N]
//! gpu_check --compile-kernels sm_90
//! ```
//!
//! `--compile-kernels ARCH` only compiles every kernel with NVRTC into the kernel cache (no GPU
//! needed: `scripts/gpu-check.sh --prepare` ships the cache with the binary) and fails on any
//! compiler message.
//! `--no-gpu` runs the whole check with a second CPU backend as the device (CI uses it to test
//! the harness: report placement, partial reports, the benchmark verdict). The kernel cache is
//! `GLASSBOX_KERNEL_CACHE` (else the user cache directory); it must not be inside `--out`.
//! Not a test: the GPU mode needs a GPU.

use std::path::PathBuf;
use std::process::ExitCode;

use glassbox_runner::backend::cpu::CpuBackend;
use glassbox_runner::backend::cuda::CudaBackend;
mod check;

use check::{CheckConfig, run_check};
use glassbox_runner::backend::cuda::nvrtc;
use glassbox_runner::backend::cuda::sources::KERNEL_FILES;
use glassbox_schemas::ExperimentSpec;

struct Flags {
    out: PathBuf,
    spec: PathBuf,
    steps: u64,
    rung: PathBuf,
    rung_batch: u32,
    bench_steps: u64,
    bench_wall_seconds: Option<f64>,
    skip_bench: bool,
    no_gpu: bool,
    threads: usize,
    compile_only: Option<String>,
}

fn parse_flags() -> Result<Flags, String> {
    let mut a = Flags {
        out: std::env::var_os("OUT")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("gpu-report")),
        spec: PathBuf::from("examples/tiny.toml"),
        steps: 20,
        rung: PathBuf::from("bench/configs/ladder-rung.toml"),
        rung_batch: 2,
        bench_steps: 6,
        bench_wall_seconds: None,
        skip_bench: false,
        no_gpu: false,
        threads: std::thread::available_parallelism().map_or(4, |n| n.get()),
        compile_only: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or(format!("{flag} needs a value"));
        fn num<T: std::str::FromStr>(flag: &str, v: String) -> Result<T, String>
        where
            T::Err: std::fmt::Display,
        {
            v.parse()
                .map_err(|e| format!("{flag} {v:?}: {e} (expected a number)"))
        }
        match flag.as_str() {
            "--out" => a.out = PathBuf::from(val()?),
            "--spec" => a.spec = PathBuf::from(val()?),
            "--steps" => a.steps = num(&flag, val()?)?,
            "--rung" | "--bench" => a.rung = PathBuf::from(val()?),
            "--rung-batch" => a.rung_batch = num(&flag, val()?)?,
            "--bench-steps" => a.bench_steps = num(&flag, val()?)?,
            "--bench-wall-seconds" => a.bench_wall_seconds = Some(num(&flag, val()?)?),
            "--skip-bench" => a.skip_bench = true,
            "--no-gpu" => a.no_gpu = true,
            "--threads" => a.threads = num(&flag, val()?)?,
            "--compile-kernels" => a.compile_only = Some(val()?),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(a)
}

fn read_spec(path: &PathBuf) -> Result<(String, ExperimentSpec), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let spec =
        glassbox_schemas::parse_toml(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((path.display().to_string(), spec))
}

/// Compiles every kernel file for `arch` through the cache; any compiler message is an error.
fn compile_kernels(arch: &str) -> Result<usize, String> {
    if !nvrtc::nvrtc_present() {
        return Err(
            "NVRTC 13 (libnvrtc.so.13) cannot be loaded: put its lib directory on \
                    LD_LIBRARY_PATH (`eval \"$(cargo xtask env)\"` does)"
                .into(),
        );
    }
    for file in KERNEL_FILES {
        let c = nvrtc::compile(file, arch, nvrtc::PtxCache::Use)?;
        if !c.log.is_empty() {
            return Err(format!(
                "{} [{arch}]: compiler messages:\n{}",
                file.path, c.log
            ));
        }
    }
    Ok(KERNEL_FILES.len())
}

fn main() -> ExitCode {
    let flags = match parse_flags() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("gpu_check: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(arch) = &flags.compile_only {
        return match compile_kernels(arch) {
            Ok(n) => {
                println!(
                    "gpu_check: {n} kernel files compiled for {arch} into {}",
                    nvrtc::cache_dir().map_or("(no cache)".into(), |p| p.display().to_string())
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("gpu_check: {e}");
                ExitCode::from(3)
            }
        };
    }
    let specs = read_spec(&flags.spec).and_then(|s| Ok((s, read_spec(&flags.rung)?)));
    let (spec, rung) = match specs {
        Ok(s) => s,
        Err(e) => {
            eprintln!("gpu_check: {e}");
            return ExitCode::from(3);
        }
    };
    let cfg = CheckConfig {
        out: flags.out,
        kernel_cache: nvrtc::cache_dir(),
        spec,
        steps: flags.steps,
        rung,
        rung_batch: flags.rung_batch,
        bench_steps: flags.bench_steps,
        bench_wall_seconds: flags.bench_wall_seconds,
        skip_bench: flags.skip_bench,
        threads: flags.threads,
    };
    let verdict = if flags.no_gpu {
        CpuBackend::<f32>::new(flags.threads.saturating_sub(1).max(1))
            .and_then(|dev| run_check(&cfg, &dev))
    } else {
        CudaBackend::new(0).and_then(|dev| run_check(&cfg, &dev))
    };
    match verdict {
        Ok(v) if v.ok => {
            println!("gpu_check: PASS (report in {})", cfg.out.display());
            ExitCode::SUCCESS
        }
        Ok(v) => {
            println!(
                "gpu_check: FAIL, {} check(s) (report in {})",
                v.failures.len(),
                cfg.out.display()
            );
            for f in &v.failures {
                println!("  - {f}");
            }
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("gpu_check: {e}");
            ExitCode::from(3)
        }
    }
}
