//! The CUDA kernel sources (`runner/kernels/*.cu`), embedded in the binary with `include_str!`
//! so a run compiles exactly the text it hashes. Always built, with or without the `cuda`
//! feature: run records, the kernel compile test and tools list them from here.
//!
//! Not here: compiling them (`nvrtc.rs`) or launching them (`ops/`).

use crate::backend::KernelSource;

/// One kernel source file: one op family, forward and backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelFile {
    /// Path relative to the repository root, e.g. `runner/kernels/norm.cu`.
    pub path: &'static str,
    /// The CUDA C text.
    pub text: &'static str,
}

macro_rules! kernel_files {
    ($($name:literal),* $(,)?) => {
        &[$(KernelFile {
            path: concat!("runner/kernels/", $name),
            text: include_str!(concat!("../../../kernels/", $name)),
        }),*]
    };
}

/// Every kernel source, in a fixed order.
pub const KERNEL_FILES: &[KernelFile] = kernel_files!(
    "elementwise.cu",
    "embedding.cu",
    "norm.cu",
    "rope.cu",
    "attention.cu",
    "swiglu.cu",
    "router.cu",
    "topk.cu",
    "permute.cu",
    "combine.cu",
    "loss.cu",
    "reduce.cu",
    "adamw.cu",
);

impl KernelFile {
    /// `blake3:<hex>` of the source bytes.
    pub fn blake3(&self) -> String {
        format!("blake3:{}", blake3::hash(self.text.as_bytes()).to_hex())
    }

    /// The `extern "C" __global__` entry points the file defines, in source order.
    pub fn entry_points(&self) -> Vec<&'static str> {
        let marker = "extern \"C\" __global__ void ";
        self.text
            .match_indices(marker)
            .filter_map(|(at, _)| {
                let rest = &self.text[at + marker.len()..];
                rest.split('(').next().map(str::trim)
            })
            .collect()
    }
}

/// The run-record form: each file's path and BLAKE3.
pub fn kernel_sources() -> Vec<KernelSource> {
    KERNEL_FILES
        .iter()
        .map(|f| KernelSource {
            name: f.path.to_string(),
            blake3: f.blake3(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_in_the_kernels_directory_is_embedded_and_documented() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".cu"))
            .collect();
        on_disk.sort();
        let mut embedded: Vec<String> = KERNEL_FILES
            .iter()
            .map(|f| f.path.trim_start_matches("runner/kernels/").to_string())
            .collect();
        embedded.sort();
        assert_eq!(on_disk, embedded, "KERNEL_FILES must list every .cu file");
        for f in KERNEL_FILES {
            let name = f.path.trim_start_matches("runner/kernels/");
            assert!(
                f.text.starts_with(&format!("// {name} — ")),
                "{} must open with a `// {name} — ...` design note",
                f.path
            );
            assert!(!f.entry_points().is_empty(), "{} has no kernels", f.path);
            // No float atomics anywhere (the determinism rule); integer counts are allowed.
            for (i, line) in f.text.lines().enumerate() {
                if line.contains("atomicAdd(") {
                    assert!(
                        line.contains("1u)"),
                        "{}:{}: only integer counting atomics are allowed: {line}",
                        f.path,
                        i + 1
                    );
                }
            }
        }
        let names: Vec<_> = KERNEL_FILES.iter().flat_map(|f| f.entry_points()).collect();
        let mut dedup = names.clone();
        dedup.sort();
        dedup.dedup();
        assert_eq!(names.len(), dedup.len(), "kernel names must be unique");
        assert_eq!(kernel_sources().len(), KERNEL_FILES.len());
    }

    /// One op family, three files of one name: `backend/cpu/<family>.rs` (the reference),
    /// `backend/cuda/ops/<family>.rs` (the launchers) and `kernels/<family>.cu` (the kernels;
    /// none for `gemm`, which is cuBLAS).
    #[test]
    fn every_op_family_has_the_same_name_on_both_backends() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let stems = |dir: &str, ext: &str| -> Vec<String> {
            let mut v: Vec<String> = std::fs::read_dir(root.join(dir))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter_map(|n| n.strip_suffix(ext).map(str::to_string))
                // `mod.rs`; `cpu/expf.rs`, not an op but the f32 exponential that two CPU
                // families share (CUDA's kernels call the device's own); and `cpu/peak.rs`, not
                // an op but the machine's GEMM rate timed through `cpu/gemm.rs` (the CUDA
                // backend times its cuBLAS GEMM in `cuda/ops/gemm.rs`).
                .filter(|n| !["mod", "expf", "peak"].contains(&n.as_str()))
                .collect();
            v.sort();
            v
        };
        let cpu = stems("src/backend/cpu", ".rs");
        let cuda = stems("src/backend/cuda/ops", ".rs");
        let mut kernels = stems("kernels", ".cu");
        assert_eq!(
            cpu, cuda,
            "cpu/ and cuda/ops/ must name the same op families"
        );
        kernels.push("gemm".into());
        kernels.sort();
        assert_eq!(
            cpu, kernels,
            "every family but gemm (cuBLAS) has kernels/<family>.cu"
        );
    }
}
