//! Which CUDA installations the CUDA backend can run on: the rules [`super::probe`] applies to
//! the versions it finds (the driver, NVRTC, cuBLAS) and to the environment
//! (`NVIDIA_TF32_OVERRIDE`). Pure functions over numbers and strings, always built, so the
//! fallback reasons are tested on machines with no GPU and no CUDA at all.
//!
//! Why each rule:
//! - the bindings are cudarc's CUDA 13.0 ones (`cuda-13000`), and the loader finds libraries by
//!   name, so an unversioned `libnvrtc.so` or `libcublas.so` of another major version could be
//!   picked up: the major versions are checked, not assumed;
//! - NVRTC writes PTX of its own ISA version, and a driver loads only PTX of the CUDA versions
//!   it supports, so the driver must support at least NVRTC's version (else every module load
//!   fails with `CUDA_ERROR_UNSUPPORTED_PTX_VERSION` after the whole compile);
//! - the backend sets cuBLAS's math mode explicitly (pedantic f32, so f32 products are true f32
//!   like the CPU reference's); `NVIDIA_TF32_OVERRIDE` is read by the NVIDIA libraries
//!   themselves and overrides programmatic settings, so any value that could turn TF32 on is
//!   refused rather than silently changing the numbers. `0` (TF32 off) agrees with pedantic f32.
//!
//! Not here: finding the libraries or reading the versions (`device.rs`, with the `cuda`
//! feature).

/// The CUDA major version the bindings are built for.
pub const CUDA_MAJOR: i32 = 13;

/// The versions found on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FoundVersions {
    /// `cuDriverGetVersion`: `1000 * major + 10 * minor` of the newest CUDA the driver supports.
    pub driver: i32,
    /// `nvrtcVersion`: `(major, minor)`.
    pub nvrtc: (i32, i32),
    /// `cublasGetProperty`: `(major, minor)`.
    pub cublas: (i32, i32),
}

/// `13.0` from the driver API's `13000`.
pub fn driver_version_text(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

/// Whether the backend can run with these versions; the error says which one is wrong and
/// what to install.
pub fn check_versions(v: FoundVersions) -> Result<(), String> {
    let (nm, nn) = v.nvrtc;
    if nm != CUDA_MAJOR {
        return Err(format!(
            "NVRTC {nm}.{nn} was found, but this build targets CUDA {CUDA_MAJOR}: install \
             NVRTC {CUDA_MAJOR} (`pip install nvidia-cuda-nvrtc=={CUDA_MAJOR}.0.*`) and put its \
             lib directory first on LD_LIBRARY_PATH"
        ));
    }
    let (bm, bn) = v.cublas;
    if bm != CUDA_MAJOR {
        return Err(format!(
            "cuBLAS {bm}.{bn} was found, but this build targets CUDA {CUDA_MAJOR}: install \
             cuBLAS {CUDA_MAJOR} (`pip install nvidia-cublas=={CUDA_MAJOR}.0.*`) and put its \
             lib directory first on LD_LIBRARY_PATH"
        ));
    }
    let needed = 1000 * nm + 10 * nn;
    if v.driver < needed {
        return Err(format!(
            "the NVIDIA driver supports CUDA {} but NVRTC is {nm}.{nn}: the driver cannot load \
             the PTX that NVRTC {nm}.{nn} writes; update the driver (CUDA {nm}.{nn} or newer) or \
             use NVRTC {}",
            driver_version_text(v.driver),
            driver_version_text(v.driver),
        ));
    }
    Ok(())
}

/// Whether `NVIDIA_TF32_OVERRIDE` (its value, if set) leaves the backend's f32 math alone.
pub fn check_tf32_override(value: Option<&str>) -> Result<(), String> {
    match value {
        None => Ok(()),
        Some(v) if v.trim() == "0" => Ok(()),
        Some(v) => Err(format!(
            "NVIDIA_TF32_OVERRIDE={v:?} is set: it overrides cuBLAS's math mode, and the CUDA \
             backend runs f32 products in pedantic f32 to match the CPU reference; unset it \
             (or set it to 0)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: FoundVersions = FoundVersions {
        driver: 13000,
        nvrtc: (13, 0),
        cublas: (13, 0),
    };

    #[test]
    fn matching_cuda_13_versions_are_accepted() {
        assert_eq!(check_versions(GOOD), Ok(()));
        // A newer driver loads older PTX.
        let newer = FoundVersions {
            driver: 13020,
            ..GOOD
        };
        assert_eq!(check_versions(newer), Ok(()));
    }

    #[test]
    fn an_old_driver_is_refused_with_both_versions_named() {
        let v = FoundVersions {
            driver: 12080,
            ..GOOD
        };
        let why = check_versions(v).unwrap_err();
        assert!(why.contains("supports CUDA 12.8"), "{why}");
        assert!(why.contains("NVRTC is 13.0"), "{why}");
        // A driver one minor version behind NVRTC cannot load its PTX either.
        let v = FoundVersions {
            driver: 13000,
            nvrtc: (13, 1),
            ..GOOD
        };
        let why = check_versions(v).unwrap_err();
        assert!(why.contains("CUDA 13.0 but NVRTC is 13.1"), "{why}");
    }

    #[test]
    fn libraries_of_another_cuda_major_are_refused_with_the_pip_command() {
        let v = FoundVersions {
            nvrtc: (12, 8),
            ..GOOD
        };
        let why = check_versions(v).unwrap_err();
        assert!(why.contains("NVRTC 12.8 was found"), "{why}");
        assert!(why.contains("nvidia-cuda-nvrtc==13.0.*"), "{why}");
        let v = FoundVersions {
            cublas: (12, 9),
            ..GOOD
        };
        let why = check_versions(v).unwrap_err();
        assert!(why.contains("cuBLAS 12.9 was found"), "{why}");
        assert!(why.contains("nvidia-cublas==13.0.*"), "{why}");
    }

    #[test]
    fn tf32_override_is_refused_unless_it_turns_tf32_off() {
        assert_eq!(check_tf32_override(None), Ok(()));
        assert_eq!(check_tf32_override(Some("0")), Ok(()));
        for v in ["1", "", "yes"] {
            let why = check_tf32_override(Some(v)).unwrap_err();
            assert!(why.contains("NVIDIA_TF32_OVERRIDE"), "{why}");
            assert!(why.contains("unset it"), "{why}");
        }
    }

    #[test]
    fn driver_versions_print_as_cuda_versions() {
        assert_eq!(driver_version_text(13000), "13.0");
        assert_eq!(driver_version_text(12080), "12.8");
        assert_eq!(driver_version_text(13020), "13.2");
    }
}
