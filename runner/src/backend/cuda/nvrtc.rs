//! Compiling the kernel sources with NVRTC at run time, for one GPU architecture, with an
//! on-disk cache of the PTX keyed by BLAKE3(source, options, NVRTC version) so a second run
//! (or a second process) skips the compiler.
//!
//! Goes through cudarc's `result` level rather than `compile_ptx` so the compiler log is kept
//! on success too: the kernel test fails on any warning. Callers must have checked that NVRTC
//! is loadable ([`nvrtc_present`]); cudarc panics otherwise. Not here: loading modules.

use std::ffi::CString;
use std::path::PathBuf;

use crate::backend::cuda::sources::KernelFile;

/// A compiled kernel file.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// The PTX text.
    pub ptx: String,
    /// The compiler's log (empty when clean).
    pub log: String,
    /// Whether the PTX came from the disk cache.
    pub cached: bool,
}

/// Whether `libnvrtc` can be loaded (no cudarc call that could panic is made before this).
pub fn nvrtc_present() -> bool {
    // SAFETY: only tries to dlopen the library by name.
    std::panic::catch_unwind(|| unsafe { cudarc::nvrtc::sys::is_culib_present() }).unwrap_or(false)
}

/// The NVRTC version `(major, minor)`.
pub fn version() -> Result<(i32, i32), String> {
    let mut major = 0;
    let mut minor = 0;
    // SAFETY: plain out-parameters; the library was checked present by the caller.
    let r = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    if r == cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS {
        Ok((major, minor))
    } else {
        Err(format!("nvrtcVersion failed: {r:?}"))
    }
}

/// The options every kernel is compiled with for `arch` (e.g. `sm_90`).
pub fn options(arch: &str) -> Vec<String> {
    vec![format!("--gpu-architecture={arch}"), "--std=c++17".into()]
}

/// Where compiled PTX is cached: `$GLASSBOX_KERNEL_CACHE`, else
/// `$XDG_CACHE_HOME/glassbox/kernels`, else `~/.cache/glassbox/kernels`.
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("GLASSBOX_KERNEL_CACHE") {
        return Some(PathBuf::from(d));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("glassbox").join("kernels"))
}

/// The cache key: BLAKE3 over the source, the options and the NVRTC version.
pub fn cache_key(file: &KernelFile, opts: &[String], nvrtc: (i32, i32)) -> String {
    let mut h = blake3::Hasher::new();
    h.update(file.text.as_bytes());
    for o in opts {
        h.update(&[0]);
        h.update(o.as_bytes());
    }
    h.update(format!("\0nvrtc {}.{}", nvrtc.0, nvrtc.1).as_bytes());
    h.finalize().to_hex().to_string()
}

/// Whether [`compile`] may answer from (and write to) the on-disk PTX cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PtxCache {
    /// Read a cached PTX when present; write a fresh one (a run's start-up).
    Use,
    /// Always ask the compiler, write nothing (the compile test wants today's verdict).
    Bypass,
}

/// Compiles one file for `arch`, from the cache when `cache` allows it and it has the PTX.
pub fn compile(file: &KernelFile, arch: &str, cache: PtxCache) -> Result<Compiled, String> {
    let use_cache = cache == PtxCache::Use;
    let opts = options(arch);
    let ver = version()?;
    let cached_path = cache_dir().map(|d| d.join(format!("{}.ptx", cache_key(file, &opts, ver))));
    if use_cache
        && let Some(ptx) = cached_path
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
    {
        return Ok(Compiled {
            ptx,
            log: String::new(),
            cached: true,
        });
    }
    let compiled = compile_uncached(file, &opts)?;
    if use_cache {
        // A cache that cannot be written only costs a recompile next time.
        if let Some(p) = &cached_path
            && let Some(dir) = p.parent()
        {
            let _ = std::fs::create_dir_all(dir);
            let tmp = p.with_extension(format!("tmp{}", std::process::id()));
            if std::fs::write(&tmp, &compiled.ptx).is_ok() {
                let _ = std::fs::rename(&tmp, p);
            }
        }
    }
    Ok(compiled)
}

fn compile_uncached(file: &KernelFile, opts: &[String]) -> Result<Compiled, String> {
    use cudarc::nvrtc::result;
    let src = CString::new(file.text).map_err(|_| format!("{}: NUL byte in source", file.path))?;
    let prog = result::create_program(src.as_c_str(), None)
        .map_err(|e| format!("{}: nvrtcCreateProgram: {e:?}", file.path))?;
    // SAFETY: `prog` is a live program created above and destroyed exactly once below.
    let outcome = unsafe {
        let compiled = result::compile_program(prog, opts);
        let log = result::get_program_log(prog)
            .map(|raw| {
                let bytes: Vec<u8> = raw
                    .iter()
                    .map(|&c| c as u8)
                    .take_while(|&b| b != 0)
                    .collect();
                String::from_utf8_lossy(&bytes).trim().to_string()
            })
            .unwrap_or_default();
        let ptx = match compiled {
            Ok(()) => result::get_ptx(prog)
                .map(|raw| {
                    let bytes: Vec<u8> = raw
                        .iter()
                        .map(|&c| c as u8)
                        .take_while(|&b| b != 0)
                        .collect();
                    String::from_utf8_lossy(&bytes).into_owned()
                })
                .map_err(|e| format!("{}: nvrtcGetPTX: {e:?}", file.path)),
            Err(e) => Err(format!("{}: compile failed ({e:?}):\n{log}", file.path)),
        };
        let _ = result::destroy_program(prog);
        ptx.map(|ptx| (ptx, log))
    };
    let (ptx, log) = outcome?;
    Ok(Compiled {
        ptx,
        log,
        cached: false,
    })
}
