//! [`CudaBackend`]'s device side: one context, one stream, one cuBLAS handle with a fixed
//! workspace, the NVRTC-compiled kernels of `runner/kernels/` (module loading), a caching
//! buffer pool, the sticky error, and [`launch!`], the one way a kernel is launched.
//!
//! Memory: the model asks for fresh buffers every step (`zeros`, `upload`, `duplicate`); the
//! pool keeps every freed device buffer by capacity class (powers of two up to 1 Mi elements,
//! then multiples of 1 Mi) and hands it out again, so after the first step a run does no
//! `cuMemAlloc` at all — the allocate-once habit without changing the model's code.
//!
//! Errors: the [`Backend`](crate::backend::Backend) trait's ops return values, not `Result`s (the CPU cannot fail). A
//! device failure (out of memory, a launch error) is recorded as the backend's *sticky error*:
//! later ops do nothing, and the trainer reads it with [`Backend::take_error`](crate::backend::Backend::take_error) after each step
//! and ends the run `failed` with the message. Nothing here panics on a device error.
//!
//! Host round trips per step: the scalar losses and norms, the per-expert row counts of each
//! layer's routing (the grouped matmuls' shapes, as the trait specifies), and the router scores
//! the model downloads for its statistics. Everything else stays on the device.
//!
//! Settings fixed at start: cudarc's per-buffer event tracking is off (one stream, so stream
//! order is the only synchronisation needed, and the per-argument event records cost host time
//! on every launch); cuBLAS runs in pedantic f32 math (no TF32: f32 products are true f32 like
//! the CPU reference's) until [`Backend::set_precision`](crate::backend::Backend::set_precision)
//! asks for bf16, which switches to default math with f32 reductions
//! (`CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION`). The check mode
//! ([`CudaBackend::set_sync_each_op`]) waits for the stream after every op, so an asynchronous
//! failure is charged to the op that caused it (what `gpu_check` runs in).
//!
//! Not here: the ops — the [`Backend`](crate::backend::Backend) impl and its launchers are `cuda/ops/` (one file per op
//! family).

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::cublas::CudaBlas;
use cudarc::cublas::sys::cublasMath_t;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DeviceRepr, LaunchConfig, ValidAsZeroBits,
};
use glassbox_schemas::spec::Precision;

use super::AttentionPath;
use super::blas::Grouped;
use super::compat::{self, FoundVersions};
use super::nvml::{self as nvml_lib, Nvml};
use super::nvrtc;
use super::sources::KERNEL_FILES;
use crate::error::RunnerError;

/// Threads per block for elementwise kernels.
pub(super) const BLOCK: u32 = 256;
/// cuBLAS workspace, fixed for the run (determinism: the same workspace every call).
const CUBLAS_WORKSPACE_BYTES: usize = 32 << 20;

/// Launches kernel `$kernel` (an `extern "C"` entry point of `runner/kernels/`) on the
/// backend's stream with launch configuration `$cfg`, passing the bracketed arguments in the
/// order of the kernel's parameters: device buffers as `&CudaSlice` / `&mut CudaSlice` (or
/// views), scalars by reference, each of the parameter's C type (`int` = `i32`,
/// `unsigned long long` = `u64`, `float` = `f32`):
///
/// ```text
/// launch!(be, "add_assign_f32", grid_for(n), [a.get_mut()?, b.get()?, &n])?;
/// ```
///
/// Evaluates to `Result<(), String>` (the error names the kernel); it is used inside
/// [`CudaBackend::op`], whose closure returns that type.
macro_rules! launch {
    ($be:expr, $kernel:literal, $cfg:expr, [$($arg:expr),+ $(,)?]) => {
        match $be.func($kernel) {
            Err(err) => Err(err),
            Ok(func) => {
                let mut args = $be.stream().launch_builder(func);
                $(cudarc::driver::PushKernelArg::arg(&mut args, $arg);)+
                // SAFETY: every call site lists the kernel's parameters in order and with their
                // C types (checked by reading `runner/kernels/<family>.cu` next to the
                // launcher), with the launch geometry the kernel's design note states and
                // buffers at least as long as the shapes the kernel indexes.
                unsafe { args.launch($cfg) }
                    .map(|_| ())
                    .map_err(|err| format!("{}: {err:?}", $kernel))
            }
        }
    };
}
pub(super) use launch;

/// Checks, without any call that could panic, whether CUDA can run here: the environment
/// (`NVIDIA_TF32_OVERRIDE`), the libraries' presence, a device, and the versions
/// ([`compat::check_versions`]: CUDA 13 NVRTC and cuBLAS, a driver that loads NVRTC's PTX).
pub fn probe() -> Result<String, String> {
    let tf32 = std::env::var_os("NVIDIA_TF32_OVERRIDE").map(|v| v.to_string_lossy().into_owned());
    compat::check_tf32_override(tf32.as_deref())?;
    // cudarc's dynamic loader panics when a library is missing; its presence checks (read in
    // cudarc 0.19.10: a `dlopen` by each candidate name) do not, but catch any unwind anyway.
    // (No panic-hook juggling: the hook is process-global and tests probe concurrently.)
    let r = std::panic::catch_unwind(|| -> Result<String, String> {
        // SAFETY (all three checks): they only try to dlopen the library by name.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err("the NVIDIA driver library (libcuda.so) was not found".into());
        }
        let n = CudaContext::device_count()
            .map_err(|e| format!("the CUDA driver reports no usable device ({e:?})"))?;
        if n < 1 {
            return Err("the CUDA driver found no GPU".into());
        }
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err("NVRTC 13 (libnvrtc.so.13) was not found: install it with \
                 `pip install nvidia-cuda-nvrtc==13.0.*` and add its lib directory to \
                 LD_LIBRARY_PATH"
                .into());
        }
        if !unsafe { cudarc::cublas::sys::is_culib_present() } {
            return Err(
                "cuBLAS 13 (libcublas.so.13) was not found: install it with \
                 `pip install nvidia-cublas==13.0.*` and add its lib directory to \
                 LD_LIBRARY_PATH"
                    .into(),
            );
        }
        let found = FoundVersions {
            driver: driver_version()?,
            nvrtc: nvrtc::version()?,
            cublas: cublas_version()?,
        };
        compat::check_versions(found)?;
        Ok(format!(
            "{n} CUDA device(s); driver CUDA {}, NVRTC {}.{}, cuBLAS {}.{}",
            compat::driver_version_text(found.driver),
            found.nvrtc.0,
            found.nvrtc.1,
            found.cublas.0,
            found.cublas.1
        ))
    });
    r.unwrap_or_else(|_| Err("loading the CUDA libraries failed (cudarc panicked)".into()))
}

/// `cuDriverGetVersion` (libcuda checked present by the caller).
fn driver_version() -> Result<i32, String> {
    let mut v = 0;
    // SAFETY: a plain out-parameter; needs no cuInit.
    let r = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut v) };
    if r == cudarc::driver::sys::CUresult::CUDA_SUCCESS {
        Ok(v)
    } else {
        Err(format!("cuDriverGetVersion failed: {r:?}"))
    }
}

/// cuBLAS's `(major, minor)` (libcublas checked present by the caller).
fn cublas_version() -> Result<(i32, i32), String> {
    use cudarc::cublas::sys::{cublasGetProperty, cublasStatus_t, libraryPropertyType};
    let (mut major, mut minor) = (0, 0);
    // SAFETY: plain out-parameters; no handle needed.
    let r = unsafe {
        (
            cublasGetProperty(libraryPropertyType::MAJOR_VERSION, &mut major),
            cublasGetProperty(libraryPropertyType::MINOR_VERSION, &mut minor),
        )
    };
    match r {
        (cublasStatus_t::CUBLAS_STATUS_SUCCESS, cublasStatus_t::CUBLAS_STATUS_SUCCESS) => {
            Ok((major, minor))
        }
        other => Err(format!("cublasGetProperty failed: {other:?}")),
    }
}

/// What a new buffer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Contents {
    /// Zeros (a memset after taking it from the pool).
    Zeros,
    /// Whatever it held before (no memset).
    Unspecified,
}

/// Capacity class of a request for `n` elements.
fn capacity(n: usize) -> usize {
    const MI: usize = 1 << 20;
    if n <= MI {
        n.max(1).next_power_of_two()
    } else {
        n.div_ceil(MI) * MI
    }
}

/// Freed device buffers, by element type and capacity class (type-erased so one map serves
/// every element type).
type FreeList = HashMap<(TypeId, usize), Vec<Box<dyn Any + Send>>>;

/// What every buffer shares with the backend: the stream, the pool, the sticky error, and
/// whether ops wait for the stream (check mode).
struct Shared {
    stream: Arc<CudaStream>,
    free: Mutex<FreeList>,
    error: Mutex<Option<String>>,
    sync_each_op: AtomicBool,
}

impl Shared {
    fn failed(&self) -> bool {
        self.error.lock().map(|e| e.is_some()).unwrap_or(true)
    }

    fn record(&self, what: &str, e: impl std::fmt::Display) {
        if let Ok(mut slot) = self.error.lock()
            && slot.is_none()
        {
            *slot = Some(format!("{what}: {e}"));
        }
    }

    fn take_free<T: Pooled>(&self, cap: usize) -> Option<CudaSlice<T>> {
        let mut free = self.free.lock().ok()?;
        let b = free.get_mut(&(TypeId::of::<T>(), cap))?.pop()?;
        b.downcast::<CudaSlice<T>>().ok().map(|b| *b)
    }

    fn give_back<T: Pooled>(&self, s: CudaSlice<T>) {
        if let Ok(mut free) = self.free.lock() {
            free.entry((TypeId::of::<T>(), s.len()))
                .or_default()
                .push(Box::new(s));
        }
    }
}

/// Element types a device buffer can hold (`f32`, `u32`, `f64`; `u16` for bf16 copies of
/// matmul operands, `u64` for device pointer arrays).
pub trait Pooled:
    DeviceRepr + ValidAsZeroBits + Default + Clone + Unpin + Send + Sync + 'static
{
}
impl Pooled for f32 {}
impl Pooled for u32 {}
impl Pooled for f64 {}
impl Pooled for u16 {}
impl Pooled for u64 {}

/// A device buffer of `len` elements (its allocation may be larger); returned to the pool on
/// drop. `None` only after a device failure (the sticky error says which).
pub struct DevBuf<T: Pooled> {
    slice: Option<CudaSlice<T>>,
    /// Elements in use (ops read and write `0..len`).
    pub(super) len: usize,
    shared: Arc<Shared>,
}

/// A float buffer of the CUDA backend.
pub type CudaBuf = DevBuf<f32>;
/// An index buffer of the CUDA backend.
pub type CudaIds = DevBuf<u32>;

impl<T: Pooled> std::fmt::Debug for DevBuf<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevBuf")
            .field("len", &self.len)
            .field("allocated", &self.slice.is_some())
            .finish()
    }
}

impl<T: Pooled> Drop for DevBuf<T> {
    fn drop(&mut self) {
        if let Some(s) = self.slice.take() {
            self.shared.give_back(s);
        }
    }
}

impl<T: Pooled> DevBuf<T> {
    /// The device slice, or why it is gone.
    pub(super) fn get(&self) -> Result<&CudaSlice<T>, String> {
        self.slice
            .as_ref()
            .ok_or_else(|| "buffer lost to an earlier device failure".to_string())
    }
    /// The device slice, mutably, or why it is gone.
    pub(super) fn get_mut(&mut self) -> Result<&mut CudaSlice<T>, String> {
        self.slice
            .as_mut()
            .ok_or_else(|| "buffer lost to an earlier device failure".to_string())
    }
}

/// The CUDA backend on one device.
pub struct CudaBackend {
    shared: Arc<Shared>,
    ctx: Arc<CudaContext>,
    blas: CudaBlas,
    funcs: HashMap<&'static str, CudaFunction>,
    name: String,
    arch: String,
    nvrtc: (i32, i32),
    /// 0: f32, 1: bf16 (see [`CudaBackend::precision`]).
    precision: AtomicU8,
    /// 0: auto, 1: fused, 2: materialized (see [`AttentionPath`]).
    attention: AtomicU8,
    // Boxed, with the telemetry: `Selected` holds a backend by value, and the CPU one is small.
    grouped: Box<Mutex<Grouped>>,
    /// GPU telemetry, or why there is none.
    nvml: Box<Result<Nvml, String>>,
    _workspace: CudaSlice<u8>,
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBackend")
            .field("device", &self.name)
            .field("arch", &self.arch)
            .finish()
    }
}

/// A 1-D grid of [`BLOCK`]-thread blocks covering `n` elements (kernels grid-stride past it).
pub(super) fn grid_for(n: usize) -> LaunchConfig {
    let blocks = n.div_ceil(BLOCK as usize).clamp(1, i32::MAX as usize) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// `n` blocks of `threads` threads (one block per row, per chunk, ...).
pub(super) fn blocks_of(n: usize, threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.clamp(1, i32::MAX as usize) as u32, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn e(what: &'static str) -> impl Fn(cudarc::driver::DriverError) -> String {
    move |err| format!("{what}: {err:?}")
}

/// cuBLAS math mode for `p`: pedantic f32 (no TF32, standard f32 arithmetic in every phase)
/// or, for bf16 inputs, default math without reduced-precision reductions (split-K partial
/// sums stay f32).
fn set_math_mode(blas: &CudaBlas, p: Precision) -> Result<(), String> {
    let mode = match p {
        Precision::F32 => cublasMath_t::CUBLAS_PEDANTIC_MATH,
        Precision::Bf16 => cublasMath_t::CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION,
    };
    // SAFETY: a live handle owned by the backend; no work is in flight on it that the mode
    // could affect (callers switch between runs).
    let r = unsafe { cudarc::cublas::sys::cublasSetMathMode(*blas.handle(), mode) };
    if r == cudarc::cublas::sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(format!("cublasSetMathMode({mode:?}): {r:?}"))
    }
}

impl CudaBackend {
    /// Opens device `ordinal`, compiles (or loads from the cache) every kernel for its
    /// architecture, and sets up the stream, cuBLAS and the pool. Fails with
    /// [`RunnerError::BackendUnavailable`] when CUDA cannot run here.
    pub fn new(ordinal: usize) -> Result<Self, RunnerError> {
        let unavailable = |reason: String| RunnerError::BackendUnavailable {
            backend: "cuda",
            reason,
        };
        probe().map_err(unavailable)?;
        let built = std::panic::catch_unwind(|| Self::build(ordinal))
            .unwrap_or_else(|_| Err("the CUDA runtime panicked while starting".into()));
        built.map_err(|reason| RunnerError::Backend(format!("cuda: {reason}")))
    }

    fn build(ordinal: usize) -> Result<Self, String> {
        let ctx = CudaContext::new(ordinal).map_err(e("cannot open the GPU"))?;
        // SAFETY: before any buffer exists; the backend uses one stream (this one) for every
        // kernel, copy and cuBLAS call, so stream order alone orders every use of a buffer,
        // and a buffer is freed (returned to the pool, reused) only in stream order too.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(e("cannot create a stream"))?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(e("cannot read the compute capability"))?;
        let arch = format!("sm_{major}{minor}");
        let name = ctx.name().map_err(e("cannot read the device name"))?;
        let mut funcs = HashMap::new();
        for file in KERNEL_FILES {
            let compiled = nvrtc::compile(file, &arch, nvrtc::PtxCache::Use)?;
            let module = ctx
                .load_module(cudarc::nvrtc::Ptx::from_src(compiled.ptx))
                .map_err(|err| format!("cannot load {}: {err:?}", file.path))?;
            for entry in file.entry_points() {
                let f = module
                    .load_function(entry)
                    .map_err(|err| format!("{}: no kernel {entry}: {err:?}", file.path))?;
                funcs.insert(entry, f);
            }
        }
        let blas = CudaBlas::new(stream.clone()).map_err(|err| format!("cuBLAS: {err:?}"))?;
        let workspace = stream
            .alloc_zeros::<u8>(CUBLAS_WORKSPACE_BYTES)
            .map_err(e("cannot allocate the cuBLAS workspace"))?;
        {
            use cudarc::driver::DevicePtr;
            let (ptr, _sync) = workspace.device_ptr(&stream);
            // SAFETY: the workspace lives as long as the backend (field `_workspace`), and the
            // handle is used only on this backend's stream.
            let r = unsafe {
                cudarc::cublas::sys::cublasSetWorkspace_v2(
                    *blas.handle(),
                    ptr as *mut std::ffi::c_void,
                    CUBLAS_WORKSPACE_BYTES,
                )
            };
            if r != cudarc::cublas::sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                return Err(format!("cublasSetWorkspace: {r:?}"));
            }
        }
        set_math_mode(&blas, Precision::F32)?;
        let nv = nvrtc::version()?;
        let grouped = Grouped::new(&ctx, &stream)?;
        let nvml = ctx
            .uuid()
            .map_err(|err| format!("no device UUID: {err:?}"))
            .and_then(|u| Nvml::open(&nvml_lib::uuid_text(&u.bytes.map(|b| b as u8))));
        Ok(Self {
            shared: Arc::new(Shared {
                stream,
                free: Mutex::new(HashMap::new()),
                error: Mutex::new(None),
                sync_each_op: AtomicBool::new(false),
            }),
            ctx,
            blas,
            funcs,
            name,
            arch,
            nvrtc: nv,
            precision: AtomicU8::new(0),
            attention: AtomicU8::new(0),
            grouped: Box::new(Mutex::new(grouped)),
            nvml: Box::new(nvml),
            _workspace: workspace,
        })
    }

    /// The precision of the matmuls (f32 until [`CudaBackend::switch_precision`]).
    pub fn precision(&self) -> Precision {
        match self.precision.load(Ordering::Relaxed) {
            0 => Precision::F32,
            _ => Precision::Bf16,
        }
    }

    /// Switches the matmuls to `p` and sets cuBLAS's math mode to match (pedantic f32, or
    /// default math with f32 reductions for bf16 inputs).
    pub(super) fn switch_precision(&self, p: Precision) -> Result<(), String> {
        set_math_mode(&self.blas, p)?;
        self.precision.store(
            match p {
                Precision::F32 => 0,
                Precision::Bf16 => 1,
            },
            Ordering::Relaxed,
        );
        Ok(())
    }

    /// How attention runs from now on (the check runs both paths against the CPU).
    pub fn set_attention_path(&self, path: AttentionPath) {
        let v = match path {
            AttentionPath::Auto => 0,
            AttentionPath::Fused => 1,
            AttentionPath::Materialized => 2,
        };
        self.attention.store(v, Ordering::Relaxed);
    }

    /// The attention path asked for.
    pub fn attention_path(&self) -> AttentionPath {
        match self.attention.load(Ordering::Relaxed) {
            0 => AttentionPath::Auto,
            1 => AttentionPath::Fused,
            _ => AttentionPath::Materialized,
        }
    }

    /// Check mode: wait for the stream after every op, so an asynchronous failure (a bad
    /// launch, an illegal address) becomes the sticky error of the op that caused it instead
    /// of a later one. Slow; for `gpu_check`.
    pub fn set_sync_each_op(&self, on: bool) {
        self.shared.sync_each_op.store(on, Ordering::Relaxed);
    }

    /// The grouped-GEMM state: pinned pointer staging and whether
    /// `cublasGemmGroupedBatchedEx` works here.
    pub(super) fn grouped(&self) -> std::sync::MutexGuard<'_, Grouped> {
        self.grouped
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The GPU's NVML session, or why there is none.
    pub fn nvml(&self) -> Result<&Nvml, &str> {
        self.nvml.as_ref().as_ref().map_err(String::as_str)
    }

    /// The device name, e.g. `NVIDIA H200`.
    pub fn device_name(&self) -> &str {
        &self.name
    }

    /// The device architecture kernels were compiled for, e.g. `sm_90`.
    pub fn arch(&self) -> &str {
        &self.arch
    }

    /// Device memory `(free, total)` in bytes.
    pub fn memory(&self) -> Option<(usize, usize)> {
        self.ctx.mem_get_info().ok()
    }

    /// Waits for all queued work (timing, benchmarks).
    pub fn synchronize(&self) -> Result<(), RunnerError> {
        self.shared
            .stream
            .synchronize()
            .map_err(|err| RunnerError::Backend(format!("cuda synchronize: {err:?}")))
    }

    /// A buffer of `n` zeros.
    pub(super) fn zeroed<T: Pooled>(&self, n: usize) -> DevBuf<T> {
        self.alloc(n, Contents::Zeros)
    }

    /// A buffer of `n` elements with whatever a pooled allocation last held: for outputs a
    /// kernel writes in full before anything reads them.
    pub(super) fn scratch<T: Pooled>(&self, n: usize) -> DevBuf<T> {
        self.alloc(n, Contents::Unspecified)
    }

    fn alloc<T: Pooled>(&self, n: usize, contents: Contents) -> DevBuf<T> {
        let mut buf = DevBuf {
            slice: None,
            len: n,
            shared: Arc::clone(&self.shared),
        };
        if self.shared.failed() {
            return buf;
        }
        let cap = capacity(n);
        let reused = self.shared.take_free::<T>(cap);
        let slice = match reused {
            Some(s) => Ok(s),
            None => self.shared.stream.alloc_zeros::<T>(cap),
        };
        match slice {
            Ok(mut s) => {
                if contents == Contents::Zeros {
                    let mut view = s.slice_mut(0..n);
                    if let Err(err) = self.shared.stream.memset_zeros(&mut view) {
                        self.shared.record("memset", format!("{err:?}"));
                    }
                }
                buf.slice = Some(s);
            }
            Err(err) => self.shared.record(
                "device allocation",
                format!("{n} elements: {err:?} (the model does not fit in GPU memory)"),
            ),
        }
        buf
    }

    /// Copies host values into a new buffer.
    pub(super) fn upload_any<T: Pooled>(&self, host: &[T]) -> DevBuf<T> {
        let mut buf = self.scratch::<T>(host.len());
        if let Some(s) = buf.slice.as_mut() {
            let mut view = s.slice_mut(0..host.len());
            if let Err(err) = self.shared.stream.memcpy_htod(host, &mut view) {
                self.shared.record("upload", format!("{err:?}"));
            }
        }
        buf
    }

    /// Copies a buffer to the host (default values after a device failure).
    pub(super) fn download_any<T: Pooled>(&self, buf: &DevBuf<T>) -> Vec<T> {
        let Some(s) = buf.slice.as_ref() else {
            return vec![T::default(); buf.len];
        };
        if self.shared.failed() {
            return vec![T::default(); buf.len];
        }
        match self.shared.stream.clone_dtoh(&s.slice(0..buf.len)) {
            Ok(v) => v,
            Err(err) => {
                self.shared.record("download", format!("{err:?}"));
                vec![T::default(); buf.len]
            }
        }
    }

    /// The cuBLAS handle (on the backend's stream, with its fixed workspace).
    pub(super) fn blas(&self) -> &CudaBlas {
        &self.blas
    }

    /// The run-record description, e.g.
    /// `cuda (NVIDIA H200, sm_90, bf16 matmuls, NVRTC 13.0, grouped GEMM: one call)`.
    pub(super) fn description(&self) -> String {
        let prec = match self.precision() {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16 matmuls (f32 accumulation, f32 master weights)",
        };
        format!(
            "cuda ({}, {}, {prec}, NVRTC {}.{}, grouped GEMM: {})",
            self.name,
            self.arch,
            self.nvrtc.0,
            self.nvrtc.1,
            self.grouped().describe()
        )
    }

    /// Waits for the stream, then takes the sticky error (see [`Backend::take_error`](crate::backend::Backend::take_error)),
    /// or else an error cudarc recorded on the context where it could not return one (a
    /// failed free or event in a `Drop`).
    pub(super) fn take_sticky_error(&self) -> Option<String> {
        if let Err(err) = self.shared.stream.synchronize() {
            self.shared.record("cuda", format!("{err:?}"));
        }
        if let Err(err) = self.ctx.check_err() {
            self.shared.record(
                "cuda (recorded by cudarc on the context)",
                format!("{err:?}"),
            );
        }
        self.shared.error.lock().ok().and_then(|mut e| e.take())
    }

    /// A device-to-device copy of a buffer.
    pub(super) fn duplicate_buf(&self, buf: &CudaBuf) -> CudaBuf {
        let mut out = self.scratch::<f32>(buf.len);
        let n = buf.len;
        self.op("duplicate", || {
            let src = buf.get()?;
            let dst = out.get_mut()?;
            let mut dv = dst.slice_mut(0..n);
            self.shared
                .stream
                .memcpy_dtod(&src.slice(0..n), &mut dv)
                .map_err(e("memcpy"))
        });
        out
    }

    /// Zeroes a buffer's `len` elements.
    pub(super) fn fill_zero_buf(&self, buf: &mut CudaBuf) {
        let n = buf.len;
        self.op("fill_zero", || {
            let mut v = buf.get_mut()?.slice_mut(0..n);
            self.shared.stream.memset_zeros(&mut v).map_err(e("memset"))
        });
    }

    /// Makes the backend's context current on this thread (a failure becomes the sticky
    /// error).
    pub(super) fn bind_to_this_thread(&self) {
        if let Err(err) = self.ctx.bind_to_thread() {
            self.shared.record("bind context", format!("{err:?}"));
        }
    }

    /// Runs one op; a failure becomes the sticky error, and nothing runs after one. In check
    /// mode it then waits for the stream, so a failure surfacing asynchronously is charged to
    /// this op.
    pub(super) fn op(&self, name: &str, f: impl FnOnce() -> Result<(), String>) {
        if self.shared.failed() {
            return;
        }
        if let Err(err) = f() {
            self.shared.record(name, err);
            return;
        }
        if self.shared.sync_each_op.load(Ordering::Relaxed)
            && let Err(err) = self.shared.stream.synchronize()
        {
            self.shared.record(
                name,
                format!("{err:?} (surfaced at the stream sync after it)"),
            );
        }
    }

    /// The backend's one stream.
    pub(super) fn stream(&self) -> &Arc<CudaStream> {
        &self.shared.stream
    }

    /// The loaded kernel `name` of `runner/kernels/`.
    pub(super) fn func(&self, name: &str) -> Result<&CudaFunction, String> {
        self.funcs
            .get(name)
            .ok_or_else(|| format!("kernel {name} is not in runner/kernels"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_classes_cover_the_request_and_are_few() {
        assert_eq!(capacity(0), 1);
        assert_eq!(capacity(1), 1);
        assert_eq!(capacity(1000), 1024);
        assert_eq!(capacity(1 << 20), 1 << 20);
        assert_eq!(capacity((1 << 20) + 1), 2 << 20);
        for n in [3usize, 17, 5000, 3 << 20, 7_000_001] {
            assert!(capacity(n) >= n);
        }
    }

    #[test]
    fn probe_fails_cleanly_without_a_gpu_or_succeeds_with_one() {
        // On the CPU-only CI machine this must be an explanation, never a panic.
        match probe() {
            Ok(desc) => assert!(desc.contains("CUDA device")),
            Err(why) => assert!(!why.is_empty()),
        }
    }
}
