//! Every CUDA kernel source in `runner/kernels/` compiles with NVRTC, for sm_80 (A100) and
//! sm_90 (H100/H200), with an empty compiler log (no errors, no warnings). Runs on machines with
//! no GPU: NVRTC is a plain library (CI installs it from PyPI, see `.ci/run`). Fails — never
//! skips — when NVRTC cannot be loaded, naming the pip command.
//! Not here: running the kernels (that needs a GPU: `scripts/gpu-check.sh`).
#![cfg(feature = "cuda")]

use glassbox_runner::backend::cuda::nvrtc::{self, PtxCache};
use glassbox_runner::backend::cuda::sources::KERNEL_FILES;

#[test]
fn every_kernel_compiles_cleanly_for_sm80_and_sm90() {
    assert!(
        nvrtc::nvrtc_present(),
        "NVRTC (libnvrtc.so.13) cannot be loaded. Install it with \
         `pip install nvidia-cuda-nvrtc==13.0.*` and put the wheel's lib directory on \
         LD_LIBRARY_PATH, e.g. \
         LD_LIBRARY_PATH=$(python3 -c 'import nvidia.cu13, os; print(os.path.join(list(nvidia.cu13.__path__)[0], \"lib\"))')"
    );
    let (major, minor) = nvrtc::version().expect("nvrtcVersion");
    eprintln!("NVRTC {major}.{minor}");
    assert!(
        major >= 13,
        "the backend targets CUDA 13 (driver 580); found NVRTC {major}.{minor}"
    );
    let mut failures = Vec::new();
    for arch in ["sm_80", "sm_90"] {
        for file in KERNEL_FILES {
            // Bypass the cache: this test is about the compiler's verdict now.
            match nvrtc::compile(file, arch, PtxCache::Bypass) {
                Ok(c) if c.log.is_empty() => {
                    for entry in file.entry_points() {
                        if !c.ptx.contains(&format!(".entry {entry}(")) {
                            failures.push(format!(
                                "{} [{arch}]: no .entry {entry} in the PTX",
                                file.path
                            ));
                        }
                    }
                }
                Ok(c) => failures.push(format!(
                    "{} [{arch}] compiled with warnings:\n{}",
                    file.path, c.log
                )),
                Err(e) => failures.push(format!("[{arch}] {e}")),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn cache_key_changes_with_source_options_and_compiler_version() {
    let f = &KERNEL_FILES[0];
    let base = nvrtc::cache_key(f, &nvrtc::options("sm_90"), (13, 0));
    assert_ne!(base, nvrtc::cache_key(f, &nvrtc::options("sm_80"), (13, 0)));
    assert_ne!(base, nvrtc::cache_key(f, &nvrtc::options("sm_90"), (13, 1)));
    assert_ne!(
        base,
        nvrtc::cache_key(&KERNEL_FILES[1], &nvrtc::options("sm_90"), (13, 0))
    );
    assert_eq!(base, nvrtc::cache_key(f, &nvrtc::options("sm_90"), (13, 0)));
}

#[test]
fn a_broken_kernel_fails_and_a_warning_shows_in_the_log() {
    use glassbox_runner::backend::cuda::sources::KernelFile;
    assert!(
        nvrtc::nvrtc_present(),
        "NVRTC missing: see the first test's message"
    );
    let broken = KernelFile {
        path: "broken.cu",
        text: "extern \"C\" __global__ void f(float* x) { x[0] = ; }",
    };
    let err = nvrtc::compile(&broken, "sm_90", PtxCache::Bypass).expect_err("must not compile");
    assert!(err.contains("broken.cu"), "{err}");
    let warns = KernelFile {
        path: "warns.cu",
        text: "extern \"C\" __global__ void f(float* x) { int unused = 3; x[0] = 1.0f; }",
    };
    let c = nvrtc::compile(&warns, "sm_90", PtxCache::Bypass).expect("compiles");
    assert!(
        !c.log.is_empty(),
        "an unused variable must produce a warning in the log"
    );
}
