//! [`CudaBackend`]: the CUDA implementation of [`Backend`] — one context, one stream, one
//! cuBLAS handle with a fixed workspace, the NVRTC-compiled kernels of `runner/kernels/`, and a
//! caching buffer pool.
//!
//! Memory: the model asks for fresh buffers every step (`zeros`, `upload`, `duplicate`); the
//! pool keeps every freed device buffer by capacity class (powers of two up to 1 Mi elements,
//! then multiples of 1 Mi) and hands it out again, so after the first step a run does no
//! `cuMemAlloc` at all — the allocate-once habit without changing the model's code.
//!
//! Errors: the [`Backend`] trait's ops return values, not `Result`s (the CPU cannot fail). A
//! device failure (out of memory, a launch error) is recorded as the backend's *sticky error*:
//! later ops do nothing, and the trainer reads it with [`Backend::take_error`] after each step
//! and ends the run `failed` with the message. Nothing here panics on a device error.
//!
//! Host round trips per step: the scalar losses and norms, the per-expert row counts of each
//! layer's routing (the grouped matmuls' shapes, as the trait specifies), and the router scores
//! the model downloads for its statistics. Everything else stays on the device.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::cublas::CudaBlas;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DeviceRepr, LaunchConfig, ValidAsZeroBits,
};

use super::blas::{self, HeadProduct};
use super::nvrtc;
use super::sources::{self, KERNEL_FILES};
use crate::backend::{
    Accumulate, AdamW, AttnDims, Backend, BackendKind, CrossEntropySums, Groups, KernelSource, Qkv,
    RopeTables, Routing, ScoreKind,
};
use crate::error::RunnerError;

/// Threads per block for elementwise kernels.
const BLOCK: u32 = 256;
/// Rows per partial sum of the RMSNorm weight gradient (the CPU's `ROW_BLOCK`).
const ROW_BLOCK: usize = 64;
/// Elements per partial sum of `sum_squares` (the CPU's `NORM_BLOCK`).
const NORM_BLOCK: usize = 4096;
/// Assignments per chunk of the counting sort (permute.cu).
const SORT_CHUNK: usize = 1024;
/// cuBLAS workspace, fixed for the run (determinism: the same workspace every call).
const CUBLAS_WORKSPACE_BYTES: usize = 32 << 20;

/// Launches kernel `$kernel` (an `extern "C"` entry point of `runner/kernels/`) on the
/// backend's stream with launch configuration `$cfg`, passing the bracketed arguments in the
/// order of the kernel's parameters: device buffers as `&CudaSlice` / `&mut CudaSlice` (or
/// views), scalars by reference, each of the parameter's C type (`int` = `i32`,
/// `unsigned long long` = `u64`, `float` = `f32`):
///
/// ```ignore
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

/// Checks, without any call that could panic, whether CUDA can run here.
pub fn probe() -> Result<String, String> {
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
        Ok(format!("{n} CUDA device(s)"))
    });
    r.unwrap_or_else(|_| Err("loading the CUDA libraries failed (cudarc panicked)".into()))
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

/// What every buffer shares with the backend: the stream, the pool, the sticky error.
struct Shared {
    stream: Arc<CudaStream>,
    free: Mutex<FreeList>,
    error: Mutex<Option<String>>,
}

impl Shared {
    fn failed(&self) -> bool {
        self.error.lock().map(|e| e.is_some()).unwrap_or(true)
    }

    fn record(&self, what: &str, e: impl std::fmt::Display) {
        if let Ok(mut slot) = self.error.lock() {
            if slot.is_none() {
                *slot = Some(format!("{what}: {e}"));
            }
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

/// Element types a device buffer can hold (`f32`, `u32`, `f64`).
pub trait Pooled:
    DeviceRepr + ValidAsZeroBits + Default + Clone + Unpin + Send + Sync + 'static
{
}
impl Pooled for f32 {}
impl Pooled for u32 {}
impl Pooled for f64 {}

/// A device buffer of `len` elements (its allocation may be larger); returned to the pool on
/// drop. `None` only after a device failure (the sticky error says which).
pub struct DevBuf<T: Pooled> {
    slice: Option<CudaSlice<T>>,
    len: usize,
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
    fn get(&self) -> Result<&CudaSlice<T>, String> {
        self.slice
            .as_ref()
            .ok_or_else(|| "buffer lost to an earlier device failure".to_string())
    }
    fn get_mut(&mut self) -> Result<&mut CudaSlice<T>, String> {
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
    description: String,
    arch: String,
    _workspace: CudaSlice<u8>,
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBackend")
            .field("device", &self.description)
            .finish()
    }
}

fn grid_for(n: usize) -> LaunchConfig {
    let blocks = n.div_ceil(BLOCK as usize).clamp(1, i32::MAX as usize) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn blocks_of(n: usize, threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.clamp(1, i32::MAX as usize) as u32, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn e(what: &'static str) -> impl Fn(cudarc::driver::DriverError) -> String {
    move |err| format!("{what}: {err:?}")
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
        let nv = nvrtc::version()?;
        Ok(Self {
            shared: Arc::new(Shared {
                stream,
                free: Mutex::new(HashMap::new()),
                error: Mutex::new(None),
            }),
            ctx,
            blas,
            funcs,
            description: format!("cuda ({name}, {arch}, f32, NVRTC {}.{})", nv.0, nv.1),
            arch,
            _workspace: workspace,
        })
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

    /// Measured f32 SGEMM throughput (FLOP/s) of a `n^3` product, best of `reps`: the MFU
    /// reference for f32 runs.
    pub fn measure_sgemm_peak(&self, n: usize, reps: usize) -> Result<f64, RunnerError> {
        let mut a = self.zeros(n * n);
        let b = self.zeros(n * n);
        let mut best = f64::INFINITY;
        let g = Groups::dense(n, n, n);
        for _ in 0..reps.max(2) {
            self.synchronize()?;
            let t0 = std::time::Instant::now();
            self.linear_fwd(&mut a, &b, &b, &g);
            self.synchronize()?;
            best = best.min(t0.elapsed().as_secs_f64());
        }
        if let Some(err) = self.take_error() {
            return Err(RunnerError::Backend(err));
        }
        Ok(2.0 * (n as f64).powi(3) / best.max(1e-9))
    }

    /// A buffer of `n` zeros.
    fn zeroed<T: Pooled>(&self, n: usize) -> DevBuf<T> {
        self.alloc(n, Contents::Zeros)
    }

    /// A buffer of `n` elements with whatever a pooled allocation last held: for outputs a
    /// kernel writes in full before anything reads them.
    fn scratch<T: Pooled>(&self, n: usize) -> DevBuf<T> {
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

    fn upload_any<T: Pooled>(&self, host: &[T]) -> DevBuf<T> {
        let mut buf = self.scratch::<T>(host.len());
        if let Some(s) = buf.slice.as_mut() {
            let mut view = s.slice_mut(0..host.len());
            if let Err(err) = self.shared.stream.memcpy_htod(host, &mut view) {
                self.shared.record("upload", format!("{err:?}"));
            }
        }
        buf
    }

    fn download_any<T: Pooled>(&self, buf: &DevBuf<T>) -> Vec<T> {
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

    /// Runs one op; a failure becomes the sticky error, and nothing runs after one.
    fn op(&self, name: &str, f: impl FnOnce() -> Result<(), String>) {
        if self.shared.failed() {
            return;
        }
        if let Err(err) = f() {
            self.shared.record(name, err);
        }
    }

    /// The backend's one stream.
    fn stream(&self) -> &Arc<CudaStream> {
        &self.shared.stream
    }

    fn func(&self, name: &str) -> Result<&CudaFunction, String> {
        self.funcs
            .get(name)
            .ok_or_else(|| format!("kernel {name} is not in runner/kernels"))
    }

    /// Sums `values[0..n]` (f64) on the device into `out[slot]`.
    fn sum_f64_into(
        &self,
        out: &mut DevBuf<f64>,
        slot: i32,
        values: &DevBuf<f64>,
        n: usize,
    ) -> Result<(), String> {
        let n64 = n as u64;
        let (o, v) = (out.get_mut()?, values.get()?);
        launch!(self, "sum_f64", blocks_of(1, 1024), [o, &slot, v, &n64])?;
        Ok(())
    }
}

impl Backend for CudaBackend {
    type F = f32;
    type Buf = CudaBuf;
    type Ids = CudaIds;

    fn kind(&self) -> BackendKind {
        BackendKind::Cuda
    }

    fn describe(&self) -> String {
        self.description.clone()
    }

    fn kernel_sources(&self) -> Vec<KernelSource> {
        sources::kernel_sources()
    }

    fn take_error(&self) -> Option<String> {
        if let Err(err) = self.shared.stream.synchronize() {
            self.shared.record("cuda", format!("{err:?}"));
        }
        self.shared.error.lock().ok().and_then(|mut e| e.take())
    }

    fn zeros(&self, n: usize) -> CudaBuf {
        self.zeroed(n)
    }
    fn upload(&self, host: &[f32]) -> CudaBuf {
        self.upload_any(host)
    }
    fn upload_ids(&self, host: &[u32]) -> CudaIds {
        self.upload_any(host)
    }
    fn download(&self, buf: &CudaBuf) -> Vec<f32> {
        self.download_any(buf)
    }
    fn download_ids(&self, ids: &CudaIds) -> Vec<u32> {
        self.download_any(ids)
    }
    fn duplicate(&self, buf: &CudaBuf) -> CudaBuf {
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
    fn fill_zero(&self, buf: &mut CudaBuf) {
        let n = buf.len;
        self.op("fill_zero", || {
            let mut v = buf.get_mut()?.slice_mut(0..n);
            self.shared.stream.memset_zeros(&mut v).map_err(e("memset"))
        });
    }
    fn len(&self, buf: &CudaBuf) -> usize {
        buf.len
    }

    fn add_assign(&self, a: &mut CudaBuf, b: &CudaBuf) {
        let n = a.len as u64;
        self.op("add_assign", || {
            launch!(
                self,
                "add_assign_f32",
                grid_for(n as usize),
                [a.get_mut()?, b.get()?, &n]
            )?;
            Ok(())
        });
    }
    fn add_row_broadcast(&self, buf: &mut CudaBuf, row: &[f32]) {
        let rowb = self.upload(row);
        let (n, w) = (buf.len as u64, row.len() as i32);
        self.op("add_row_broadcast", || {
            launch!(
                self,
                "add_row_broadcast_f32",
                grid_for(n as usize),
                [buf.get_mut()?, rowb.get()?, &n, &w]
            )?;
            Ok(())
        });
    }

    fn embedding_fwd(&self, out: &mut CudaBuf, wte: &CudaBuf, tokens: &CudaIds, c: usize) {
        let (n, ci) = (tokens.len as i32, c as i32);
        self.op("embedding_fwd", || {
            launch!(
                self,
                "embedding_fwd_f32",
                grid_for(tokens.len * c),
                [out.get_mut()?, wte.get()?, tokens.get()?, &n, &ci]
            )?;
            Ok(())
        });
    }
    fn embedding_bwd(&self, dwte: &mut CudaBuf, dout: &CudaBuf, tokens: &CudaIds, c: usize) {
        let (n, ci) = (tokens.len as i32, c as i32);
        let v = (dwte.len / c.max(1)) as u32;
        self.op("embedding_bwd", || {
            let cfg = LaunchConfig {
                grid_dim: ((c as u32).div_ceil(BLOCK), v, 1),
                block_dim: (BLOCK, 1, 1),
                shared_mem_bytes: 0,
            };
            // Grid (ceil(C/256), V).
            launch!(
                self,
                "embedding_bwd_f32",
                cfg,
                [dwte.get_mut()?, dout.get()?, tokens.get()?, &n, &ci]
            )?;
            Ok(())
        });
    }

    fn rmsnorm_fwd(
        &self,
        out: &mut CudaBuf,
        rstd: &mut CudaBuf,
        x: &CudaBuf,
        w: &CudaBuf,
        c: usize,
        eps: f64,
    ) {
        let n = x.len / c.max(1);
        let (ni, ci, epsf) = (n as i32, c as i32, eps as f32);
        self.op("rmsnorm_fwd", || {
            // One 256-thread block per row.
            launch!(
                self,
                "rmsnorm_fwd_f32",
                blocks_of(n, 256),
                [
                    out.get_mut()?,
                    rstd.get_mut()?,
                    x.get()?,
                    w.get()?,
                    &ni,
                    &ci,
                    &epsf
                ]
            )?;
            Ok(())
        });
    }
    fn rmsnorm_bwd(
        &self,
        dx: &mut CudaBuf,
        dw: &mut CudaBuf,
        dout: &CudaBuf,
        x: &CudaBuf,
        w: &CudaBuf,
        rstd: &CudaBuf,
        c: usize,
    ) {
        let n = x.len / c.max(1);
        let nblk = n.div_ceil(ROW_BLOCK);
        let mut part = self.scratch::<f32>(nblk * c);
        let (ni, ci, rb, nb) = (n as i32, c as i32, ROW_BLOCK as i32, nblk as i32);
        self.op("rmsnorm_bwd", || {
            // One block per row.
            launch!(
                self,
                "rmsnorm_bwd_dx_f32",
                blocks_of(n, 256),
                [
                    dx.get_mut()?,
                    dout.get()?,
                    x.get()?,
                    w.get()?,
                    rstd.get()?,
                    &ni,
                    &ci
                ]
            )?;
            let cfg = LaunchConfig {
                grid_dim: ((c as u32).div_ceil(BLOCK), nblk as u32, 1),
                block_dim: (BLOCK, 1, 1),
                shared_mem_bytes: 0,
            };
            // Grid (ceil(C/256), nblk).
            launch!(
                self,
                "rmsnorm_bwd_dw_partial_f32",
                cfg,
                [
                    part.get_mut()?,
                    dout.get()?,
                    x.get()?,
                    rstd.get()?,
                    &ni,
                    &ci,
                    &rb
                ]
            )?;
            // One thread per column.
            launch!(
                self,
                "col_sum_accumulate_f32",
                grid_for(c),
                [dw.get_mut()?, part.get()?, &nb, &ci]
            )?;
            Ok(())
        });
    }

    fn linear_fwd(&self, out: &mut CudaBuf, inp: &CudaBuf, w: &CudaBuf, groups: &Groups) {
        self.op("linear_fwd", || {
            blas::linear_fwd(&self.blas, out.get_mut()?, inp.get()?, w.get()?, groups)
        });
    }
    fn linear_bwd_data(
        &self,
        dinp: &mut CudaBuf,
        dout: &CudaBuf,
        w: &CudaBuf,
        groups: &Groups,
        accumulate: Accumulate,
    ) {
        self.op("linear_bwd_data", || {
            blas::linear_bwd_data(
                &self.blas,
                dinp.get_mut()?,
                dout.get()?,
                w.get()?,
                groups,
                accumulate,
            )
        });
    }
    fn linear_bwd_weight(&self, dw: &mut CudaBuf, dout: &CudaBuf, inp: &CudaBuf, groups: &Groups) {
        self.op("linear_bwd_weight", || {
            blas::linear_bwd_weight(&self.blas, dw.get_mut()?, dout.get()?, inp.get()?, groups)
        });
    }

    fn qkv_rope_fwd(
        &self,
        out: Qkv<&mut CudaBuf>,
        qkv: &CudaBuf,
        rope: RopeTables<&CudaBuf>,
        dims: AttnDims,
    ) {
        let (Qkv { q, k, v }, RopeTables { cos, sin }) = (out, rope);
        let (b, t, h, d) = (dims.b as i32, dims.t as i32, dims.h as i32, dims.d as i32);
        let pairs = dims.b * dims.h * dims.t * (dims.d / 2);
        self.op("qkv_rope_fwd", || {
            // Grid-stride over pairs.
            launch!(
                self,
                "qkv_rope_fwd_f32",
                grid_for(pairs),
                [
                    q.get_mut()?,
                    k.get_mut()?,
                    v.get_mut()?,
                    qkv.get()?,
                    cos.get()?,
                    sin.get()?,
                    &b,
                    &t,
                    &h,
                    &d
                ]
            )?;
            Ok(())
        });
    }
    fn qkv_rope_bwd(
        &self,
        dqkv: &mut CudaBuf,
        d: Qkv<&CudaBuf>,
        rope: RopeTables<&CudaBuf>,
        dims: AttnDims,
    ) {
        let Qkv {
            q: dq,
            k: dk,
            v: dv,
        } = d;
        let RopeTables { cos, sin } = rope;
        let (b, t, h, d) = (dims.b as i32, dims.t as i32, dims.h as i32, dims.d as i32);
        let pairs = dims.b * dims.h * dims.t * (dims.d / 2);
        self.op("qkv_rope_bwd", || {
            // Grid-stride over pairs.
            launch!(
                self,
                "qkv_rope_bwd_f32",
                grid_for(pairs),
                [
                    dqkv.get_mut()?,
                    dq.get()?,
                    dk.get()?,
                    dv.get()?,
                    cos.get()?,
                    sin.get()?,
                    &b,
                    &t,
                    &h,
                    &d
                ]
            )?;
            Ok(())
        });
    }
    fn attention_fwd(
        &self,
        out: &mut CudaBuf,
        probs: &mut CudaBuf,
        qkv: Qkv<&CudaBuf>,
        dims: AttnDims,
    ) {
        let Qkv { q, k, v } = qkv;
        let AttnDims { b, t, h, d } = dims;
        let bh = b * h;
        let rows = (bh * t) as u64;
        let (ti, scale) = (t as i32, (1.0 / (d as f64).sqrt()) as f32);
        self.op("attention_fwd", || {
            let p = probs.get_mut()?;
            blas::per_head(&self.blas, HeadProduct::ABt, p, q.get()?, k.get()?, dims)?;
            // One block per row.
            launch!(
                self,
                "causal_softmax_fwd_f32",
                blocks_of(bh * t, 256),
                [&mut *p, &rows, &ti, &scale]
            )?;
            blas::per_head(
                &self.blas,
                HeadProduct::AB,
                out.get_mut()?,
                p,
                v.get()?,
                dims,
            )
        });
    }
    fn attention_bwd(
        &self,
        d: Qkv<&mut CudaBuf>,
        dout: &CudaBuf,
        probs: &CudaBuf,
        qkv: Qkv<&CudaBuf>,
        dims: AttnDims,
    ) {
        let Qkv {
            q: dq,
            k: dk,
            v: dv,
        } = d;
        let Qkv { q, k, v } = qkv;
        let AttnDims { b, t, h, d } = dims;
        let bh = b * h;
        let rows = (bh * t) as u64;
        let (ti, scale) = (t as i32, (1.0 / (d as f64).sqrt()) as f32);
        let mut ds = self.scratch::<f32>(bh * t * t);
        self.op("attention_bwd", || {
            let (p, g) = (probs.get()?, dout.get()?);
            blas::per_head(&self.blas, HeadProduct::AtB, dv.get_mut()?, p, g, dims)?;
            let dsb = ds.get_mut()?;
            blas::per_head(&self.blas, HeadProduct::ABt, dsb, g, v.get()?, dims)?;
            // One block per row.
            launch!(
                self,
                "causal_softmax_bwd_f32",
                blocks_of(bh * t, 256),
                [&mut *dsb, p, &rows, &ti, &scale]
            )?;
            blas::per_head(
                &self.blas,
                HeadProduct::AB,
                dq.get_mut()?,
                dsb,
                k.get()?,
                dims,
            )?;
            blas::per_head(
                &self.blas,
                HeadProduct::AtB,
                dk.get_mut()?,
                dsb,
                q.get()?,
                dims,
            )
        });
    }
    fn merge_heads_fwd(&self, out: &mut CudaBuf, y: &CudaBuf, dims: AttnDims) {
        let (b, t, h, d) = (dims.b as i32, dims.t as i32, dims.h as i32, dims.d as i32);
        let total = out.len;
        self.op("merge_heads_fwd", || {
            launch!(
                self,
                "merge_heads_fwd_f32",
                grid_for(total),
                [out.get_mut()?, y.get()?, &b, &t, &h, &d]
            )?;
            Ok(())
        });
    }
    fn merge_heads_bwd(&self, dy: &mut CudaBuf, dout: &CudaBuf, dims: AttnDims) {
        let (b, t, h, d) = (dims.b as i32, dims.t as i32, dims.h as i32, dims.d as i32);
        let total = dy.len;
        self.op("merge_heads_bwd", || {
            launch!(
                self,
                "merge_heads_bwd_f32",
                grid_for(total),
                [dy.get_mut()?, dout.get()?, &b, &t, &h, &d]
            )?;
            Ok(())
        });
    }

    fn swiglu_fwd(&self, out: &mut CudaBuf, h: &CudaBuf, f: usize) {
        let rows = (out.len / f.max(1)) as u64;
        let (fi, total) = (f as i32, out.len);
        self.op("swiglu_fwd", || {
            launch!(
                self,
                "swiglu_fwd_f32",
                grid_for(total),
                [out.get_mut()?, h.get()?, &rows, &fi]
            )?;
            Ok(())
        });
    }
    fn swiglu_bwd(&self, dh: &mut CudaBuf, dout: &CudaBuf, h: &CudaBuf, f: usize) {
        let rows = (dout.len / f.max(1)) as u64;
        let fi = f as i32;
        self.op("swiglu_bwd", || {
            launch!(
                self,
                "swiglu_bwd_f32",
                grid_for(dout.len),
                [dh.get_mut()?, dout.get()?, h.get()?, &rows, &fi]
            )?;
            Ok(())
        });
    }

    fn router_scores_fwd(
        &self,
        scores: &mut CudaBuf,
        logits: &CudaBuf,
        e_: usize,
        kind: ScoreKind,
    ) {
        let n = logits.len / e_.max(1);
        let (ni, ei, total) = (n as i32, e_ as i32, logits.len as u64);
        self.op("router_scores_fwd", || {
            match kind {
                ScoreKind::Softmax => {
                    // One thread per row.
                    launch!(
                        self,
                        "router_softmax_fwd_f32",
                        grid_for(n),
                        [scores.get_mut()?, logits.get()?, &ni, &ei]
                    )?;
                }
                ScoreKind::Sigmoid => {
                    launch!(
                        self,
                        "router_sigmoid_fwd_f32",
                        grid_for(logits.len),
                        [scores.get_mut()?, logits.get()?, &total]
                    )?;
                }
            }
            Ok(())
        });
    }
    fn router_scores_bwd(
        &self,
        dlogits: &mut CudaBuf,
        dscores: &CudaBuf,
        scores: &CudaBuf,
        e_: usize,
        kind: ScoreKind,
    ) {
        let n = scores.len / e_.max(1);
        let (ni, ei, total) = (n as i32, e_ as i32, scores.len as u64);
        self.op("router_scores_bwd", || {
            match kind {
                ScoreKind::Softmax => {
                    // One thread per row.
                    launch!(
                        self,
                        "router_softmax_bwd_f32",
                        grid_for(n),
                        [dlogits.get_mut()?, dscores.get()?, scores.get()?, &ni, &ei]
                    )?;
                }
                ScoreKind::Sigmoid => {
                    launch!(
                        self,
                        "router_sigmoid_bwd_f32",
                        grid_for(scores.len),
                        [dlogits.get_mut()?, dscores.get()?, scores.get()?, &total]
                    )?;
                }
            }
            Ok(())
        });
    }
    fn router_z_loss(
        &self,
        dlogits: Option<&mut CudaBuf>,
        logits: &CudaBuf,
        e_: usize,
        coef_per_token: f64,
    ) -> f64 {
        let n = logits.len / e_.max(1);
        let mut lse = self.scratch::<f32>(n);
        let mut sq = self.scratch::<f64>(n);
        let mut out = self.scratch::<f64>(1);
        let (ni, ei, n64, coef) = (n as i32, e_ as i32, n as u64, coef_per_token as f32);
        self.op("router_z_loss", || {
            // One thread per row.
            launch!(
                self,
                "router_lse_f32",
                grid_for(n),
                [lse.get_mut()?, logits.get()?, &ni, &ei]
            )?;
            launch!(
                self,
                "square_to_f64",
                grid_for(n),
                [sq.get_mut()?, lse.get()?, &n64]
            )?;
            self.sum_f64_into(&mut out, 0, &sq, n)?;
            if let Some(dl) = dlogits {
                // One thread per row.
                launch!(
                    self,
                    "router_z_grad_f32",
                    grid_for(n),
                    [dl.get_mut()?, logits.get()?, lse.get()?, &ni, &ei, &coef]
                )?;
            }
            Ok(())
        });
        self.download_any(&out).first().copied().unwrap_or(f64::NAN)
    }
    fn route(
        &self,
        scores: &CudaBuf,
        bias: &[f64],
        top_k: usize,
        combine_scale: f64,
        capacity: Option<usize>,
    ) -> Routing<Self> {
        let e_ = bias.len().max(1);
        let n = scores.len / e_;
        let a = n * top_k;
        let nchunks = a.div_ceil(SORT_CHUNK).max(1);
        let bias_f: Vec<f32> = bias.iter().map(|&b| b as f32).collect();
        let bias_d = self.upload(&bias_f);
        let mut token_expert = self.scratch::<u32>(a);
        let mut weights = self.scratch::<f32>(a);
        let mut counts = self.scratch::<u32>(nchunks * e_);
        let mut chunk_start = self.scratch::<u32>(nchunks * e_);
        // load | rows | offset, one buffer so the host reads load and rows in one copy.
        let mut meta = self.scratch::<u32>(3 * e_);
        let mut token_slot = self.scratch::<u32>(a);
        let mut slot_assignment = self.scratch::<u32>(a);
        let cap = capacity.map_or(u32::MAX, |c| c.min(u32::MAX as usize) as u32);
        let (ni, ei, ki, scale) = (n as i32, e_ as i32, top_k as i32, combine_scale as f32);
        let (a32, chunk, nc) = (a as u32, SORT_CHUNK as u32, nchunks as i32);
        self.op("route", || {
            // One thread per token.
            launch!(
                self,
                "topk_bias_f32",
                grid_for(n),
                [
                    token_expert.get_mut()?,
                    weights.get_mut()?,
                    scores.get()?,
                    bias_d.get()?,
                    &ni,
                    &ei,
                    &ki,
                    &scale
                ]
            )?;
            let shared_bytes = (4 * e_) as u32;
            let cfg = LaunchConfig {
                shared_mem_bytes: shared_bytes,
                ..blocks_of(nchunks, 256)
            };
            // E u32 counters in shared memory.
            launch!(
                self,
                "expert_count_chunks",
                cfg,
                [counts.get_mut()?, token_expert.get()?, &a32, &ei, &chunk]
            )?;
            {
                let m = meta.get_mut()?;
                let (mut load, mut rest) = m.split_at_mut(e_);
                let (mut rows, mut offset) = rest.split_at_mut(e_);
                // One block.
                launch!(
                    self,
                    "expert_scan",
                    blocks_of(1, 256),
                    [
                        chunk_start.get_mut()?,
                        &mut load,
                        &mut rows,
                        &mut offset,
                        counts.get()?,
                        &nc,
                        &ei,
                        &cap
                    ]
                )?;
            }
            let m = meta.get()?;
            let (rows, offset) = (m.slice(e_..2 * e_), m.slice(2 * e_..3 * e_));
            let cfg = LaunchConfig {
                shared_mem_bytes: shared_bytes,
                ..blocks_of(nchunks, 1)
            };
            // One serial thread per chunk.
            launch!(
                self,
                "expert_scatter",
                cfg,
                [
                    token_slot.get_mut()?,
                    slot_assignment.get_mut()?,
                    token_expert.get()?,
                    chunk_start.get()?,
                    &rows,
                    &offset,
                    &a32,
                    &ei,
                    &chunk
                ]
            )?;
            Ok(())
        });
        let host = self.download_any(&meta);
        let expert_load: Vec<u64> = host.iter().take(e_).map(|&x| x as u64).collect();
        let expert_rows: Vec<usize> = host.iter().skip(e_).take(e_).map(|&x| x as usize).collect();
        let kept: usize = expert_rows.iter().sum();
        slot_assignment.len = kept.min(a);
        Routing {
            top_k,
            token_expert,
            token_slot,
            slot_assignment,
            weights,
            dropped: (a - kept.min(a)) as u64,
            expert_rows,
            expert_load,
        }
    }
    fn route_weights_bwd(
        &self,
        dscores: &mut CudaBuf,
        dweights: &CudaBuf,
        scores: &CudaBuf,
        routing: &Routing<Self>,
        combine_scale: f64,
    ) {
        let e_ = routing.expert_rows.len().max(1);
        let n = scores.len / e_;
        let (ni, ei, ki, scale) = (
            n as i32,
            e_ as i32,
            routing.top_k as i32,
            combine_scale as f32,
        );
        self.op("route_weights_bwd", || {
            // One thread per token.
            launch!(
                self,
                "route_weights_bwd_f32",
                grid_for(n),
                [
                    dscores.get_mut()?,
                    dweights.get()?,
                    scores.get()?,
                    routing.token_expert.get()?,
                    &ni,
                    &ei,
                    &ki,
                    &scale
                ]
            )?;
            Ok(())
        });
    }

    fn dispatch_fwd(&self, xs: &mut CudaBuf, x: &CudaBuf, routing: &Routing<Self>, c: usize) {
        let slots = routing.slot_assignment.len as u64;
        let (ki, ci) = (routing.top_k as i32, c as i32);
        self.op("dispatch_fwd", || {
            if slots == 0 {
                return Ok(());
            }
            launch!(
                self,
                "dispatch_fwd_f32",
                grid_for(slots as usize * c),
                [
                    xs.get_mut()?,
                    x.get()?,
                    routing.slot_assignment.get()?,
                    &slots,
                    &ki,
                    &ci
                ]
            )?;
            Ok(())
        });
    }
    fn dispatch_bwd(&self, dx: &mut CudaBuf, dxs: &CudaBuf, routing: &Routing<Self>, c: usize) {
        let n = dx.len / c.max(1);
        let (ni, ki, ci, total) = (n as i32, routing.top_k as i32, c as i32, dx.len);
        self.op("dispatch_bwd", || {
            launch!(
                self,
                "dispatch_bwd_f32",
                grid_for(total),
                [
                    dx.get_mut()?,
                    dxs.get()?,
                    routing.token_slot.get()?,
                    &ni,
                    &ki,
                    &ci
                ]
            )?;
            Ok(())
        });
    }
    fn combine_fwd(
        &self,
        out: &mut CudaBuf,
        y: &CudaBuf,
        routing: &Routing<Self>,
        c: usize,
        accumulate: Accumulate,
    ) {
        let n = out.len / c.max(1);
        let acc = (accumulate == Accumulate::Add) as i32;
        let (ni, ki, ci) = (n as i32, routing.top_k as i32, c as i32);
        let total = out.len;
        self.op("combine_fwd", || {
            launch!(
                self,
                "combine_fwd_f32",
                grid_for(total),
                [
                    out.get_mut()?,
                    y.get()?,
                    routing.weights.get()?,
                    routing.token_slot.get()?,
                    &ni,
                    &ki,
                    &ci,
                    &acc
                ]
            )?;
            Ok(())
        });
    }
    fn combine_bwd(
        &self,
        dy: &mut CudaBuf,
        dweights: &mut CudaBuf,
        dout: &CudaBuf,
        y: &CudaBuf,
        routing: &Routing<Self>,
        c: usize,
    ) {
        let slots = routing.slot_assignment.len as u64;
        let assignments = routing.token_slot.len as u64;
        let (ki, ci) = (routing.top_k as i32, c as i32);
        self.op("combine_bwd", || {
            if slots > 0 {
                launch!(
                    self,
                    "combine_bwd_dy_f32",
                    grid_for(slots as usize * c),
                    [
                        dy.get_mut()?,
                        dout.get()?,
                        routing.weights.get()?,
                        routing.slot_assignment.get()?,
                        &slots,
                        &ki,
                        &ci
                    ]
                )?;
            }
            // One warp per assignment, 8 warps per block.
            let blocks = (assignments as usize).div_ceil(8);
            // 256 threads = 8 warps per block.
            launch!(
                self,
                "combine_bwd_dw_f32",
                blocks_of(blocks, 256),
                [
                    dweights.get_mut()?,
                    dout.get()?,
                    y.get()?,
                    routing.token_slot.get()?,
                    &assignments,
                    &ki,
                    &ci
                ]
            )?;
            Ok(())
        });
    }

    fn cross_entropy(
        &self,
        logits: &mut CudaBuf,
        targets: &CudaIds,
        v: usize,
        z_coef: f64,
        grad_scale: Option<f64>,
    ) -> CrossEntropySums {
        let n = targets.len;
        let mut row_ce = self.scratch::<f64>(n);
        let mut row_z = self.scratch::<f64>(n);
        let mut out = self.scratch::<f64>(2);
        let (ni, vi, zc) = (n as i32, v as i32, z_coef as f32);
        let (gs, want) = (
            grad_scale.unwrap_or(0.0) as f32,
            grad_scale.is_some() as i32,
        );
        self.op("cross_entropy", || {
            // One 256-thread block per row.
            launch!(
                self,
                "cross_entropy_f32",
                blocks_of(n, 256),
                [
                    logits.get_mut()?,
                    targets.get()?,
                    row_ce.get_mut()?,
                    row_z.get_mut()?,
                    &ni,
                    &vi,
                    &zc,
                    &gs,
                    &want
                ]
            )?;
            self.sum_f64_into(&mut out, 0, &row_ce, n)?;
            self.sum_f64_into(&mut out, 1, &row_z, n)
        });
        let sums = self.download_any(&out);
        CrossEntropySums {
            cross_entropy: sums.first().copied().unwrap_or(f64::NAN),
            z: sums.get(1).copied().unwrap_or(f64::NAN),
        }
    }

    fn sum_squares(&self, buf: &CudaBuf) -> f64 {
        let nblk = buf.len.div_ceil(NORM_BLOCK).max(1);
        let mut part = self.scratch::<f64>(nblk);
        let mut out = self.scratch::<f64>(1);
        let (n64, be) = (buf.len as u64, NORM_BLOCK as i32);
        self.op("sum_squares", || {
            // One block per NORM_BLOCK elements.
            launch!(
                self,
                "sum_squares_partial_f32",
                blocks_of(nblk, 256),
                [part.get_mut()?, buf.get()?, &n64, &be]
            )?;
            self.sum_f64_into(&mut out, 0, &part, nblk)
        });
        self.download_any(&out).first().copied().unwrap_or(f64::NAN)
    }
    fn adamw(
        &self,
        param: &mut CudaBuf,
        grad: &CudaBuf,
        m: &mut CudaBuf,
        v: &mut CudaBuf,
        hp: &AdamW,
    ) {
        let t = hp.step.min(i32::MAX as u64) as i32;
        let bc1 = (1.0 / (1.0 - hp.beta1.powi(t))) as f32;
        let bc2 = (1.0 / (1.0 - hp.beta2.powi(t))) as f32;
        let (lr, b1, b2, eps, wd, gs) = (
            hp.lr as f32,
            hp.beta1 as f32,
            hp.beta2 as f32,
            hp.eps as f32,
            hp.weight_decay as f32,
            hp.grad_scale as f32,
        );
        let n = param.len as u64;
        self.op("adamw", || {
            launch!(
                self,
                "adamw_f32",
                grid_for(n as usize),
                [
                    param.get_mut()?,
                    grad.get()?,
                    m.get_mut()?,
                    v.get_mut()?,
                    &n,
                    &lr,
                    &b1,
                    &b2,
                    &eps,
                    &wd,
                    &gs,
                    &bc1,
                    &bc2
                ]
            )?;
            Ok(())
        });
    }

    fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        // Kernels launch from this thread on the backend's one stream; make the context
        // current here (the trainer may call from any thread).
        if let Err(err) = self.ctx.bind_to_thread() {
            self.shared.record("bind context", format!("{err:?}"));
        }
        f()
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
