//! Deterministic strided GEMM for the CPU backend: packed panels, a register-blocked
//! micro-kernel, explicit SIMD chosen at run time (AVX-512F or AVX2+FMA on x86-64, a scalar
//! fallback everywhere), and the model's (grouped) linear layers on top of it.
//!
//! `C[m, n] (+)= A[m, k] B[k, n]` with arbitrary element strides for A and B and a row-major C.
//!
//! **The numerics contract** (what makes a run reproducible bitwise on another machine): every
//! output element is one ordered chain of fused multiply-adds over k,
//! `acc = init; for p in 0..k { acc = fma(A[i, p], B[p, j], acc) }`, where `init` is 0
//! ([`Accumulate::Overwrite`]) or the old `C[i, j]` ([`Accumulate::Add`]). The SIMD kernels
//! vectorise across output columns and keep one accumulator per output element, never across k,
//! and an `fma` rounds once whatever the instruction set, so the AVX-512, AVX2 and scalar
//! (`mul_add`) paths give the same bits. k is cut into blocks of [`KC`] for the caches, but the
//! chain continues through `C` between blocks (an f32 stored and reloaded is the same f32), so
//! the blocking changes nothing either. Hence the result does not depend on the tiling, the thread
//! count or the CPU; `gemm_bitwise_*` tests check it.
//!
//! **The work split**: a call's products (one, or a grouped layer's groups) first pack their
//! B once, k-block by k-block, into [`NR`]-column panels (zero padded at the last columns; the
//! padding's products are never stored), read straight from B's strides (a transposed `W^T`
//! or `k^T` too), in parallel jobs that each fill one column tile of one k-block. Then the
//! output is cut into tiles of at most [`TILE_M`] x [`TILE_N`] (a function of the shape only);
//! a tile walks its k-blocks and runs the micro-kernel over its [`Kernel::mr`]-row blocks of A
//! (read in place through the strides when A's rows are contiguous, else packed too) against
//! the packed panels. Tiles run in parallel on the current rayon pool, and a grouped linear
//! layer puts all its groups' packing jobs in one parallel loop and all their tiles in another
//! (two fork/joins per layer, not two per expert).
//!
//! **The thin path**: a product of at most [`THIN_M`] rows whose B is transposed (`W^T`: each
//! column a contiguous run, as every linear layer's forward reads its weights) is not packed
//! at all: one token's forward (decoding) reads each weight once, so packing would triple its
//! memory traffic. Eight columns at a time, eight k steps of their runs are loaded and
//! transposed in registers, then fed to the same per-element fma chains in the same order, so
//! the bits are those of the packed path (`gemm_bitwise_*` run both).
//!
//! A thin product whose B is row-major instead needs no transposing: each k step multiplies one
//! broadcast element of A into a run of B's row, the accumulators in registers, so the per-
//! element chains are again the same. A linear layer over [`WeightLayout::Panels`] (the
//! decoder's copy) is one such product per panel: its k rows of [`WEIGHT_PANEL`] columns are
//! one contiguous stream, which the hardware prefetchers keep up with, and a job is a panel.
//!
//! This is not a general BLAS: no alpha/beta beyond "overwrite or accumulate", row-major C only.
//! The AVX-512 intrinsics need Rust 1.89 (the runner's `rust-version`).

use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::sync::OnceLock;

use rayon::prelude::*;

use crate::backend::{Accumulate, Groups, WEIGHT_PANEL, WeightLayout};
use crate::scalar::Real;

/// The most output rows per tile (a multiple of every kernel's [`Kernel::mr`], so that only a
/// product's last rows make a short register block). A tile that packs its A (a transposed
/// one) reuses it for all its columns, and its B panels stay in cache across its rows; products
/// with few rows get shorter tiles ([`Problem::tile_m`]) so that there are enough tiles to share.
pub const TILE_M: usize = 192;
/// The most packed B elements one batch of a call's products holds at once (4 MiB of f32):
/// a grouped layer's 16 experts run in a few batches, so the packed copy of their weights
/// neither raises the run's peak memory nor leaves the caches between packing and use.
const PACK_BUDGET: usize = 1 << 20;
/// Tiles a product should have at least, when its rows allow (load balance on the pool).
const MIN_TILES: usize = 8;
/// Output columns per tile (a multiple of [`NR`]).
pub const TILE_N: usize = 256;
/// The k-block: rows of B (columns of A) packed at a time.
pub const KC: usize = 256;
/// Columns per micro-panel of B, and per micro-kernel call.
pub const NR: usize = 16;
/// [`Kernel::mr`] of the SIMD kernels.
const SIMD_MR: usize = 6;
/// The largest [`Kernel::mr`].
const MAX_MR: usize = 6;
/// The most rows a product may have to take the thin path (see the module doc): with more, the
/// packed panels' reuse across rows wins.
const THIN_M: usize = 4;
/// Output columns per job of the thin path (a multiple of 8, the SIMD block's width).
const THIN_COLS: usize = 64;
/// The fewest and most output columns per job of the thin path over a row-major B: a job
/// reads a run of each of B's rows, so it takes long runs, one share per thread where that
/// is within these bounds (multiples of 8).
const THIN_ROW_MAJOR_COLS: (usize, usize) = (64, 1024);
/// Multiply-adds below which a thin batch runs on this thread: forking to the pool costs
/// more than the work.
const THIN_SERIAL_MACS: usize = 16 * 1024;

/// A strided read-only matrix operand: element `(i, j)` is at `data[i * rs + j * cs]`.
#[derive(Debug, Clone, Copy)]
pub struct Mat<'a, F> {
    /// Backing storage.
    pub data: &'a [F],
    /// Row stride in elements.
    pub rs: usize,
    /// Column stride in elements.
    pub cs: usize,
}

impl<'a, F> Mat<'a, F> {
    /// Row-major `[rows, cols]` stored contiguously (`cols` is the row stride).
    pub fn rows(data: &'a [F], cols: usize) -> Self {
        Self {
            data,
            rs: cols,
            cs: 1,
        }
    }
    /// The transpose of a row-major `[rows, cols]` matrix, seen as `[cols, rows]`.
    pub fn transposed(data: &'a [F], cols: usize) -> Self {
        Self {
            data,
            rs: 1,
            cs: cols,
        }
    }
    fn max_index(&self, rows: usize, cols: usize) -> usize {
        (rows - 1) * self.rs + (cols - 1) * self.cs
    }
}

/// The row-major output `C`: element `(i, j)` is at `data[i * ld + j]`.
#[derive(Debug)]
pub struct MatMut<'a, F> {
    /// Backing storage (from `C[0, 0]` on).
    pub data: &'a mut [F],
    /// Row stride in elements (`ldc`).
    pub ld: usize,
}

impl<'a, F> MatMut<'a, F> {
    /// Row-major storage with row stride `ld`.
    pub fn rows(data: &'a mut [F], ld: usize) -> Self {
        Self { data, ld }
    }
}

/// The product's shape: `C[m, n] (+)= A[m, k] B[k, n]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmShape {
    /// Rows of A and C.
    pub m: usize,
    /// Columns of B and C.
    pub n: usize,
    /// Columns of A, rows of B (the summed dimension).
    pub k: usize,
}

/// Where a product's tiles run (the result is the same either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tiles {
    /// In parallel on the current rayon pool (the model's linear layers).
    Parallel,
    /// One after another on this thread (inside an already parallel loop, e.g. attention's
    /// per-head products).
    Serial,
}

/// A micro-kernel implementation. All give bitwise the same result (the module's contract);
/// they differ in speed only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// `mul_add` on scalars; any CPU, and every `f64` product.
    Scalar,
    /// 6 x 16 register block of 256-bit FMAs (x86-64 with AVX2 and FMA).
    Avx2Fma,
    /// 6 x 32 register block of 512-bit FMAs over two B panels (x86-64 with AVX-512F, AVX2
    /// and FMA).
    Avx512,
}

impl Kernel {
    /// The fastest kernel this CPU supports (detected once).
    pub fn best() -> Kernel {
        static BEST: OnceLock<Kernel> = OnceLock::new();
        *BEST.get_or_init(|| {
            Kernel::available()
                .last()
                .copied()
                .unwrap_or(Kernel::Scalar)
        })
    }

    /// Every kernel this CPU can run, slowest first (the tests compare them all).
    pub fn available() -> Vec<Kernel> {
        let mut v = vec![Kernel::Scalar];
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            v.push(Kernel::Avx2Fma);
            if std::is_x86_feature_detected!("avx512f") {
                v.push(Kernel::Avx512);
            }
        }
        v
    }

    /// Whether this kernel is only chosen on CPUs with AVX2 and FMA (the vectorised
    /// elementwise code of [`super::expf`] asks).
    pub fn has_avx2_fma(self) -> bool {
        self != Kernel::Scalar
    }

    /// Rows per A panel (the register block's height).
    pub fn mr(self) -> usize {
        match self {
            Kernel::Scalar => 4,
            Kernel::Avx2Fma | Kernel::Avx512 => SIMD_MR,
        }
    }

    /// [`NR`]-column B panels per register block (its width over NR).
    pub fn panels(self) -> usize {
        match self {
            Kernel::Scalar | Kernel::Avx2Fma => 1,
            Kernel::Avx512 => 2,
        }
    }
}

/// A raw output pointer shared by tiles that write disjoint elements.
#[derive(Clone, Copy)]
struct OutPtr<F>(*mut F);
// SAFETY: tiles write disjoint index sets of one live `&mut [F]` (see `run_problems`), so
// sending the pointer to worker threads cannot create overlapping writes.
unsafe impl<F: Send> Send for OutPtr<F> {}
// SAFETY: as above; shared references to the pointer only copy it.
unsafe impl<F: Send> Sync for OutPtr<F> {}

/// One product of a batch: `C[c_off + i * ldc + j] (+)= A(i, :) . B(:, j)`.
#[derive(Clone, Copy)]
struct Problem<'a, F> {
    shape: GemmShape,
    c_off: usize,
    ldc: usize,
    a: Mat<'a, F>,
    b: Mat<'a, F>,
}

impl<F> Problem<'_, F> {
    /// Rows per tile: [`TILE_M`], halved (down to 48) while the product has fewer than
    /// [`MIN_TILES`] tiles. A function of the shape only (and the result does not depend on it
    /// anyway: see the module doc).
    fn tile_m(&self) -> usize {
        let mut tm = TILE_M;
        while tm > 48 && self.shape.m.div_ceil(tm) * self.tiles_n() < MIN_TILES {
            tm /= 2;
        }
        tm
    }
    fn tiles_n(&self) -> usize {
        self.shape.n.div_ceil(TILE_N)
    }
    fn tiles(&self) -> usize {
        if self.shape.k == 0 {
            // No k: one "tile" per row block that clears (or keeps) C.
            self.shape.m.div_ceil(self.tile_m())
        } else {
            self.shape.m.div_ceil(self.tile_m()) * self.tiles_n()
        }
    }
}

/// `c[i*ldc + j] (+)= sum_p a(i, p) b(p, j)` for `i < m`, `j < n`, tiled, with [`Kernel::best`].
pub fn gemm_into<F: Real>(
    shape: GemmShape,
    c: MatMut<'_, F>,
    a: Mat<'_, F>,
    b: Mat<'_, F>,
    accumulate: Accumulate,
    tiles: Tiles,
) {
    gemm_into_with(Kernel::best(), shape, c, a, b, accumulate, tiles);
}

/// [`gemm_into`] with a chosen kernel (the tests run each one; `kernel` must be in
/// [`Kernel::available`], else this panics).
pub fn gemm_into_with<F: Real>(
    kernel: Kernel,
    shape: GemmShape,
    c: MatMut<'_, F>,
    a: Mat<'_, F>,
    b: Mat<'_, F>,
    accumulate: Accumulate,
    tiles: Tiles,
) {
    assert!(
        Kernel::available().contains(&kernel),
        "gemm: kernel {kernel:?} is not supported by this CPU"
    );
    let p = Problem {
        shape,
        c_off: 0,
        ldc: c.ld,
        a,
        b,
    };
    run_problems(kernel, &[p], c.data, accumulate, tiles);
}

/// Run a batch of products writing disjoint parts of `c`, all their tiles in one loop.
fn run_problems<F: Real>(
    kernel: Kernel,
    problems: &[Problem<'_, F>],
    c: &mut [F],
    accumulate: Accumulate,
    tiles: Tiles,
) {
    // The SIMD kernels are f32 kernels; any other element type (f64 in the gradient checks)
    // runs the scalar one, with its panel layout.
    let kernel = if is_f32::<F>() {
        kernel
    } else {
        Kernel::Scalar
    };
    for p in problems {
        let GemmShape { m, n, k } = p.shape;
        if m > 0 && n > 0 {
            assert!(
                p.c_off + (m - 1) * p.ldc + n <= c.len() && n <= p.ldc,
                "gemm: C too small"
            );
            if k > 0 {
                assert!(p.a.max_index(m, k) < p.a.data.len(), "gemm: A too small");
                assert!(p.b.max_index(k, n) < p.b.data.len(), "gemm: B too small");
            }
        }
    }
    let (thin, problems): (Vec<_>, Vec<_>) = problems.iter().copied().partition(is_thin);
    if !thin.is_empty() {
        run_thin(kernel, &thin, c, accumulate, tiles);
    }
    let problems = &problems[..];
    // Batches of products whose packed B fit in PACK_BUDGET (at least one product each).
    let mut first = 0;
    while first < problems.len() {
        let mut size = packed_len(&problems[first]);
        let mut end = first + 1;
        while end < problems.len() && size + packed_len(&problems[end]) <= PACK_BUDGET {
            size += packed_len(&problems[end]);
            end += 1;
        }
        run_packed(kernel, &problems[first..end], c, accumulate, tiles);
        first = end;
    }
}

/// Elements of a problem's packed B: every k-block's panels, the last panel zero padded.
fn packed_len<F>(p: &Problem<'_, F>) -> usize {
    let GemmShape { m, n, k } = p.shape;
    if m > 0 && n > 0 && k > 0 {
        k * n.div_ceil(NR) * NR
    } else {
        0
    }
}

/// One packing job of [`run_packed`]: its slice of the buffer and the block of B it holds
/// (`B`, first row, rows, first column, columns).
struct PackJob<'o, 'b, F> {
    out: &'o mut [MaybeUninit<F>],
    block: (Mat<'b, F>, usize, usize, usize, usize),
}

/// [`run_problems`] after its checks, for one batch of its products: pack every product's B
/// once into a buffer (in parallel when the tiles are), then run all the tiles, each reading
/// its panels from there.
///
/// The packed layout of one product: k-block by k-block (the block starting at row `p0` of B,
/// `kc` rows, at offset `p0 * npan * NR`), and within a block panel by panel (`NR` columns,
/// `kc * NR` elements, element `(p, jj)` at `p * NR + jj`). A column tile's panels are
/// contiguous in each k-block, so the pack splits into disjoint (product, k-block, column
/// tile) jobs, and a tile reads its block as one slice. Packing once per product, not once
/// per tile, matters when a product has several row tiles (each used to pack the same B), and
/// it reads a transposed B (`W^T`, `k^T`) straight from its source.
fn run_packed<F: Real>(
    kernel: Kernel,
    problems: &[Problem<'_, F>],
    c: &mut [F],
    accumulate: Accumulate,
    tiles: Tiles,
) {
    // Per product, where its tiles start in the loop and its packed B in the buffer.
    let (mut starts, mut offsets) = (vec![0], vec![0]);
    let (mut total, mut len) = (0, 0);
    for p in problems {
        total += if p.shape.m > 0 && p.shape.n > 0 {
            p.tiles()
        } else {
            0
        };
        len += packed_len(p);
        starts.push(total);
        offsets.push(len);
    }
    let starts = &starts[..];
    // Not zeroed first: the jobs below write every element (`pack_b_block`'s contract). A
    // transient buffer, so that between products its memory serves the activations (the
    // allocator keeps it: `backend::heap`).
    let mut packed: Vec<F> = Vec::with_capacity(len);
    {
        // The jobs, in buffer order: each takes the next slice.
        let mut jobs = Vec::new();
        let mut rest = &mut packed.spare_capacity_mut()[..len];
        for p in problems.iter().filter(|p| packed_len(p) > 0) {
            let GemmShape { n, k, .. } = p.shape;
            for p0 in (0..k).step_by(KC) {
                let kc = KC.min(k - p0);
                for j0 in (0..n).step_by(TILE_N) {
                    let nn = TILE_N.min(n - j0);
                    let (job, tail) =
                        std::mem::take(&mut rest).split_at_mut(nn.div_ceil(NR) * NR * kc);
                    rest = tail;
                    jobs.push(PackJob {
                        out: job,
                        block: (p.b, p0, kc, j0, nn),
                    });
                }
            }
        }
        debug_assert!(rest.is_empty());
        let pack = |job: &mut PackJob<'_, '_, F>| {
            let (b, p0, kc, j0, nn) = job.block;
            pack_b_block(job.out, b, p0, kc, j0, nn)
        };
        if tiles == Tiles::Parallel && jobs.len() > 1 {
            jobs.par_iter_mut().for_each(pack);
        } else {
            jobs.iter_mut().for_each(pack);
        }
    }
    // SAFETY: the jobs wrote all `len` elements (every slice of the split, each filled by
    // `pack_b_block`, which writes every element of its slice).
    unsafe { packed.set_len(len) };
    let packed = &packed[..];
    let out = OutPtr(c.as_mut_ptr());
    let add = accumulate == Accumulate::Add;
    let tile = move |t: usize| {
        let pi = starts.partition_point(|&s| s <= t) - 1;
        let p = &problems[pi];
        let t = t - starts[pi];
        let out = out;
        let bp = &packed[offsets[pi]..offsets[pi + 1]];
        // SAFETY: the caller's problems write disjoint regions of `c` (each `linear_*` gives
        // its groups disjoint rows or matrices), every region was bounds-checked above, and a
        // tile writes only the elements of its own tile of its problem.
        unsafe { run_tile(kernel, p, bp, t, out.0, add) };
    };
    if tiles == Tiles::Parallel && total > 1 {
        (0..total).into_par_iter().for_each(tile);
    } else {
        (0..total).for_each(tile);
    }
}

/// Whether `p` takes the thin path: a few rows, and a B whose columns (or rows) are
/// contiguous runs.
fn is_thin<F>(p: &Problem<'_, F>) -> bool {
    let GemmShape { m, n, k } = p.shape;
    (1..=THIN_M).contains(&m) && n > 0 && k > 0 && (p.b.rs == 1 || p.b.cs == 1)
}

/// Columns per job of a thin problem: [`THIN_COLS`] over a transposed B, a share per thread
/// over a row-major one (see [`THIN_ROW_MAJOR_COLS`]).
fn thin_job_cols<F>(p: &Problem<'_, F>) -> usize {
    if p.b.rs == 1 {
        return THIN_COLS;
    }
    let (least, most) = THIN_ROW_MAJOR_COLS;
    let share = p.shape.n.div_ceil(rayon::current_num_threads().max(1));
    (share.div_ceil(8) * 8).clamp(least, most)
}

/// The thin products of a batch (checked by [`run_problems`]): jobs of [`THIN_COLS`] columns of
/// one product each, in parallel when the tiles are and the work is worth a fork.
fn run_thin<F: Real>(
    kernel: Kernel,
    problems: &[Problem<'_, F>],
    c: &mut [F],
    accumulate: Accumulate,
    tiles: Tiles,
) {
    let jobs: Vec<(usize, usize)> = problems
        .iter()
        .enumerate()
        .flat_map(|(pi, p)| {
            (0..p.shape.n)
                .step_by(thin_job_cols(p))
                .map(move |j0| (pi, j0))
        })
        .collect();
    let macs: usize = problems
        .iter()
        .map(|p| p.shape.m * p.shape.n * p.shape.k)
        .sum();
    let out = OutPtr(c.as_mut_ptr());
    let add = accumulate == Accumulate::Add;
    let job = move |&(pi, j0): &(usize, usize)| {
        let out = out;
        let p = &problems[pi];
        let cols = thin_job_cols(p).min(p.shape.n - j0);
        // SAFETY: as for the packed tiles: the problems write disjoint, bounds-checked regions
        // of `c`, and a job writes only its own columns of its problem.
        unsafe { thin_columns(kernel, p, j0, cols, out.0, add) };
    };
    if tiles == Tiles::Parallel && jobs.len() > 1 && macs >= THIN_SERIAL_MACS {
        jobs.par_iter().for_each(job);
    } else {
        jobs.iter().for_each(job);
    }
}

/// Columns `j0..j0 + cols` of every row of a thin problem: eight at a time with SIMD where the
/// kernel has it, the rest (and every column of the scalar kernel) one `mul_add` chain each.
///
/// # Safety
/// As [`run_tile`]: `c` valid for writes at the problem's C offsets of these columns, and no
/// one else touching them during the call; `p`'s operands bounds-checked for its shape.
unsafe fn thin_columns<F: Real>(
    kernel: Kernel,
    p: &Problem<'_, F>,
    j0: usize,
    cols: usize,
    c: *mut F,
    add: bool,
) {
    let GemmShape { m, k, .. } = p.shape;
    let (a, b) = (p.a, p.b);
    let mut j = j0;
    #[cfg(target_arch = "x86_64")]
    if kernel != Kernel::Scalar && is_f32::<F>() && b.rs != 1 {
        // SAFETY: F is f32 (checked), the CPU has AVX2 and FMA (a SIMD kernel is only
        // constructed then); B is row-major (`is_thin`: rs != 1 means cs == 1), its rows'
        // columns j0..j0+cols inside B (bounds-checked for the shape), A likewise; C as the
        // caller promised.
        unsafe {
            x86::thin_row_major_avx2(
                x86::ThinRowMajor {
                    a: a.data.as_ptr().cast(),
                    a_rs: a.rs,
                    a_cs: a.cs,
                    rows: m,
                    b: b.data.as_ptr().add(j0).cast(),
                    b_rs: b.rs,
                    k,
                    cols,
                },
                c.add(p.c_off + j0).cast(),
                p.ldc,
                add,
            )
        };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if kernel != Kernel::Scalar && is_f32::<F>() {
        while j + 8 <= j0 + cols {
            // SAFETY: F is f32 (checked), the CPU has AVX2 and FMA (a SIMD kernel is only
            // constructed then); B's columns j..j+8 are k-element runs at stride b.cs inside
            // B (bounds-checked for the shape), A's m rows likewise; C as the caller promised.
            unsafe {
                x86::thin_avx2(
                    x86::Thin {
                        a: a.data.as_ptr().cast(),
                        a_rs: a.rs,
                        a_cs: a.cs,
                        rows: m,
                        b: b.data.as_ptr().add(j * b.cs).cast(),
                        b_cs: b.cs,
                        k,
                    },
                    c.add(p.c_off + j).cast(),
                    p.ldc,
                    add,
                )
            };
            j += 8;
        }
    }
    let _ = kernel;
    for jj in j..j0 + cols {
        for i in 0..m {
            // SAFETY: row i < m, column jj < n of the problem's C region (caller's contract).
            let cp = unsafe { c.add(p.c_off + i * p.ldc + jj) };
            // SAFETY: as above.
            let mut acc = if add { unsafe { *cp } } else { F::ZERO };
            for q in 0..k {
                acc = a.data[i * a.rs + q * a.cs].mul_add(b.data[q * b.rs + jj * b.cs], acc);
            }
            // SAFETY: as above.
            unsafe { *cp = acc };
        }
    }
}

/// Whether `F` is `f32`.
fn is_f32<F: Real>() -> bool {
    F::as_f32(&[]).is_some()
}

thread_local! {
    /// Each thread's packed A block, reused by every tile it runs (f64 storage: aligned for
    /// both element types).
    static PANEL: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
}

/// Tile `t` of problem `p`.
///
/// A is read in place when its rows are contiguous (the micro-kernel broadcasts `A[i, p]`
/// through its strides), else packed per k-block into a per-thread buffer. B comes packed
/// (`bpacked`, the problem's part of [`run_packed`]'s buffer): [`NR`]-column panels, zero
/// padded at the last columns, which the micro-kernel reads contiguously (no TLB walk across
/// B's rows) for every row block of the tile.
///
/// # Safety
/// `c` must point to storage in which every element of the tile (offsets `p.c_off + i * ldc +
/// j`) is valid for writes and not accessed by anyone else during the call; `p`'s operands
/// must have been bounds-checked for its shape (`run_problems`).
unsafe fn run_tile<F: Real>(
    kernel: Kernel,
    p: &Problem<'_, F>,
    bpacked: &[F],
    t: usize,
    c: *mut F,
    add: bool,
) {
    let GemmShape { m, n, k } = p.shape;
    if k == 0 {
        if !add {
            let i0 = t * p.tile_m();
            for i in i0..m.min(i0 + p.tile_m()) {
                for j in 0..n {
                    // SAFETY: within the problem's C region (caller's contract).
                    unsafe { *c.add(p.c_off + i * p.ldc + j) = F::ZERO };
                }
            }
        }
        return;
    }
    let (ti, tj) = (t / p.tiles_n(), t % p.tiles_n());
    let tile_m = p.tile_m();
    let (i0, j0) = (ti * tile_m, tj * TILE_N);
    let (mm, nn) = (tile_m.min(m - i0), TILE_N.min(n - j0));
    let a = p.a;
    let npan = n.div_ceil(NR);
    let need = TILE_M * KC;
    let words = (need * size_of::<F>()).div_ceil(size_of::<f64>());
    let run = |buf: &mut Vec<f64>| {
        if buf.len() < words {
            buf.resize(words, 0.0);
        }
        // SAFETY: the buffer holds at least `need` elements of F (f32 or f64: no invalid bit
        // patterns, alignment at most f64's), and this borrow is its only user.
        let apacked: &mut [F] =
            unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<F>(), need) };
        let mr = kernel.mr();
        // A with non-contiguous rows (`dout^T` in the weight gradient) is packed per k-block
        // into `mr`-row panels `[p][r]`: reading it in place would touch a new cache line and
        // page at every k step.
        let pack_a = a.cs != 1;
        let mut p0 = 0;
        while p0 < k {
            let kc = KC.min(k - p0);
            let load = add || p0 > 0;
            // This tile's panels of the k-block (`run_packed`'s layout).
            let packed = &bpacked[(p0 * npan + j0 / NR * kc) * NR..];
            if pack_a && a.rs == 1 {
                // `dout^T`: A's column p is a contiguous run of the source row p, so read each
                // run once, in order, and deal it out to the panels. (Panel by panel would step
                // through the source at its row stride, often 4 KiB: every read a new page, and
                // all of them in one L1 set, evicted before the next panel reads the rest.)
                for pp in 0..kc {
                    let base = i0 + (p0 + pp) * a.cs;
                    let src = &a.data[base..base + mm];
                    for (ip, run) in src.chunks(mr).enumerate() {
                        let at = ip * mr * kc + pp * mr;
                        copy_a_run(&mut apacked[at..at + run.len()], run);
                    }
                }
            } else if pack_a {
                for ip in 0..mm.div_ceil(mr) {
                    let rows = mr.min(mm - ip * mr);
                    let panel = &mut apacked[ip * mr * kc..(ip + 1) * mr * kc];
                    for (pp, dst) in panel.chunks_exact_mut(mr).enumerate() {
                        let base = (i0 + ip * mr) * a.rs + (p0 + pp) * a.cs;
                        for (r, x) in dst[..rows].iter_mut().enumerate() {
                            *x = a.data[base + r * a.rs];
                        }
                    }
                }
            }
            let npanels = nn.div_ceil(NR);
            let step = kernel.panels();
            for jp in (0..npanels).step_by(step) {
                let jb = j0 + jp * NR;
                let cols = (step * NR).min(nn - jp * NR);
                let bs = &packed[jp * NR * kc..(jp + 1) * NR * kc];
                // The second panel of a two-panel block; the first again past the last panel
                // (its columns are then beyond `cols`: computed, never stored).
                let jp2 = if jp + 1 < npanels { jp + 1 } else { jp };
                let bs2 = &packed[jp2 * NR * kc..(jp2 + 1) * NR * kc];
                for ip in 0..mm.div_ceil(mr) {
                    let ib = i0 + ip * mr;
                    let rows = mr.min(mm - ip * mr);
                    let (ablk, a_rs, a_cs) = if pack_a {
                        (&apacked[ip * mr * kc..(ip + 1) * mr * kc], 1, mr)
                    } else {
                        (&a.data[ib * a.rs + p0 * a.cs..], a.rs, a.cs)
                    };
                    let blk = Block {
                        kc,
                        a: ablk,
                        a_rs,
                        a_cs,
                        b: bs,
                        b2: bs2,
                        b_rs: NR,
                        rows,
                        cols,
                    };
                    // SAFETY: rows x cols of C at this offset (stride ldc) lie inside this
                    // tile; the block's operands are in bounds (`Block`'s invariant holds: A's
                    // rows < rows were bounds-checked for the shape, B's panel is kc x NR).
                    unsafe { micro(kernel, &blk, c.add(p.c_off + ib * p.ldc + jb), p.ldc, load) };
                }
            }
            p0 += kc;
        }
    };
    PANEL.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => run(&mut buf),
        // Only if a tile ever ran inside another tile on this thread; stay correct anyway.
        Err(_) => run(&mut Vec::new()),
    });
}

/// `dst = src` for one packed A step of at most `mr` rows: a fixed-size copy at the SIMD
/// kernels' height (a few moves; a copy of run-time length would be a call to memcpy per run).
#[inline(always)]
fn copy_a_run<F: Copy>(dst: &mut [F], src: &[F]) {
    if let (Ok(d), Ok(s)) = (
        <&mut [F; SIMD_MR]>::try_from(&mut *dst),
        <&[F; SIMD_MR]>::try_from(src),
    ) {
        *d = *s;
    } else {
        for (d, &s) in dst.iter_mut().zip(src) {
            *d = s;
        }
    }
}

/// Pack `B[p0..p0+kc, j0..j0+nn]` into panels `packed[(jp*kc + p)*NR + jj]`, writing every
/// element of `packed[..nn.div_ceil(NR) * NR * kc]` (padding columns as zeros). Row by row when
/// B's rows are contiguous (one sequential read of each row, which the prefetcher follows;
/// panel by panel would read 64 bytes of each row per pass, a cache miss and a page each).
fn pack_b_block<F: Real>(
    packed: &mut [MaybeUninit<F>],
    b: Mat<'_, F>,
    p0: usize,
    kc: usize,
    j0: usize,
    nn: usize,
) {
    let full = nn / NR;
    if b.cs == 1 && full > 0 {
        for p in 0..kc {
            let base = (p0 + p) * b.rs + j0;
            let row = &b.data[base..base + full * NR];
            for (jp, src) in row.chunks_exact(NR).enumerate() {
                let at = (jp * kc + p) * NR;
                copy_panel_row(&mut packed[at..at + NR], src);
            }
        }
    } else {
        for jp in 0..full {
            pack_b(
                &mut packed[jp * NR * kc..(jp + 1) * NR * kc],
                b,
                p0,
                kc,
                j0 + jp * NR,
                NR,
            );
        }
    }
    if nn > full * NR {
        let jp = full;
        pack_b(
            &mut packed[jp * NR * kc..(jp + 1) * NR * kc],
            b,
            p0,
            kc,
            j0 + jp * NR,
            nn - full * NR,
        );
    }
}

/// One panel row: `NR` elements (fixed size, so a few vector moves, not a call to memcpy).
#[inline(always)]
fn copy_panel_row<F: Real>(dst: &mut [MaybeUninit<F>], src: &[F]) {
    let src: &[F; NR] = src.try_into().expect("NR elements");
    let dst: &mut [MaybeUninit<F>; NR] = dst.try_into().expect("NR elements");
    for (d, &x) in dst.iter_mut().zip(src) {
        d.write(x);
    }
}

/// Pack `B[p0..p0+kc, jb..jb+cols]` into `panel[p*NR + jj]`, columns past `cols` zero (every
/// element of `panel[..kc * NR]` is written).
fn pack_b<F: Real>(
    panel: &mut [MaybeUninit<F>],
    b: Mat<'_, F>,
    p0: usize,
    kc: usize,
    jb: usize,
    cols: usize,
) {
    let panel = &mut panel[..kc * NR];
    if cols < NR {
        for x in panel.iter_mut() {
            x.write(F::ZERO);
        }
    }
    if b.cs == 1 && cols == NR {
        for (p, dst) in panel.chunks_exact_mut(NR).enumerate() {
            let base = (p0 + p) * b.rs + jb;
            copy_panel_row(dst, &b.data[base..base + NR]);
        }
    } else if b.cs == 1 {
        for (p, dst) in panel.chunks_exact_mut(NR).enumerate() {
            let base = (p0 + p) * b.rs + jb;
            for (d, &x) in dst[..cols].iter_mut().zip(&b.data[base..base + cols]) {
                d.write(x);
            }
        }
    } else if b.rs == 1 {
        // A transposed B (`W^T`): each column is a contiguous run of the source.
        for jj in 0..cols {
            let base = (jb + jj) * b.cs + p0;
            for (p, &x) in b.data[base..base + kc].iter().enumerate() {
                panel[p * NR + jj].write(x);
            }
        }
    } else {
        for (p, dst) in panel.chunks_exact_mut(NR).enumerate() {
            for (jj, x) in dst[..cols].iter_mut().enumerate() {
                x.write(b.data[(p0 + p) * b.rs + (jb + jj) * b.cs]);
            }
        }
    }
}

/// One register block's operands: `A(r, p) = a[r * a_rs + p * a_cs]` for `r < rows`,
/// `B(p, j) = b[p * b_rs + j]` for `j < NR` and `b2[p * b_rs + j - NR]` for `NR <= j < 2 NR`
/// (two-panel kernels), `p < kc`. Invariant (what the micro-kernels rely on): those indices are
/// inside `a`, `b` and `b2` (the panels' full NR columns, padding included).
struct Block<'a, F> {
    kc: usize,
    a: &'a [F],
    a_rs: usize,
    a_cs: usize,
    b: &'a [F],
    b2: &'a [F],
    b_rs: usize,
    rows: usize,
    cols: usize,
}

/// One register block: `C[r, j] = chain over p of fma(A(r, p), B(p, j), .)` for `r < rows`,
/// `j < cols`, starting from `C[r, j]` if `load`, else from 0. Rows past `rows` (up to the
/// kernel's height) recompute the last row and are not stored.
///
/// # Safety
/// `c + r * ldc + j` must be valid for reads and writes for `r < rows`, `j < cols`, and the
/// block must satisfy [`Block`]'s invariant.
unsafe fn micro<F: Real>(kernel: Kernel, blk: &Block<'_, F>, c: *mut F, ldc: usize, load: bool) {
    let Block {
        kc,
        a,
        a_rs,
        a_cs,
        b,
        b2,
        b_rs,
        rows,
        cols,
    } = *blk;
    debug_assert!(rows >= 1 && (rows - 1) * a_rs + (kc - 1) * a_cs < a.len());
    debug_assert!((kc - 1) * b_rs + NR <= b.len());
    #[cfg(target_arch = "x86_64")]
    if kernel != Kernel::Scalar && is_f32::<F>() {
        let o = x86::Operands {
            kc,
            a: a.as_ptr().cast(),
            a_rs,
            a_cs,
            b: b.as_ptr().cast(),
            b2: b2.as_ptr().cast(),
            b_rs,
            rows,
            cols,
        };
        // SAFETY: F is f32 (checked above), so the casts only rename the type; a SIMD kernel
        // is constructed only when the CPU has its features (`Kernel::available`, asserted by
        // the entry points); operands and C as the caller promised.
        unsafe {
            if kernel == Kernel::Avx512 {
                x86::micro_avx512(o, c.cast(), ldc, load)
            } else {
                x86::micro_avx2(o, c.cast(), ldc, load)
            }
        };
        return;
    }
    let _ = (kernel, b2);
    let mut acc = [[F::ZERO; NR]; MAX_MR];
    if load {
        for (r, row) in acc.iter_mut().enumerate().take(rows) {
            for (j, x) in row.iter_mut().enumerate().take(cols) {
                // SAFETY: r < rows, j < cols (caller's contract).
                *x = unsafe { *c.add(r * ldc + j) };
            }
        }
    }
    for p in 0..kc {
        let bv = &b[p * b_rs..p * b_rs + NR];
        for (r, row) in acc.iter_mut().enumerate().take(rows) {
            let av = a[r * a_rs + p * a_cs];
            for (x, &bj) in row.iter_mut().zip(bv) {
                *x = av.mul_add(bj, *x);
            }
        }
    }
    for (r, row) in acc.iter().enumerate().take(rows) {
        for (j, &x) in row.iter().enumerate().take(cols) {
            // SAFETY: r < rows, j < cols (caller's contract).
            unsafe { *c.add(r * ldc + j) = x };
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! The SIMD register blocks: AVX2+FMA 6 rows x 16 columns (two 256-bit vectors per row),
    //! AVX-512F 6 x 32 (two 512-bit vectors per row); one broadcast of A per row and k step.
    //! Not here: packing, tiling.

    use std::arch::x86_64::*;

    use super::{NR, SIMD_MR};

    /// [`super::Block`] as raw pointers.
    pub(super) struct Operands {
        pub kc: usize,
        pub a: *const f32,
        pub a_rs: usize,
        pub a_cs: usize,
        pub b: *const f32,
        pub b2: *const f32,
        pub b_rs: usize,
        pub rows: usize,
        pub cols: usize,
    }

    /// See [`super::micro`].
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA; `a[r * a_rs + p * a_cs]` for `r < rows`, `p < kc`
    /// and `b[p * b_rs + j]` for `j < 16`, `p < kc` must be readable; `c + r * ldc + j` must be
    /// valid for reads and writes for `r < rows`, `j < cols`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn micro_avx2(o: Operands, c: *mut f32, ldc: usize, load: bool) {
        const MR: usize = SIMD_MR;
        let Operands {
            kc,
            a,
            a_rs,
            a_cs,
            b,
            b_rs,
            rows,
            cols,
            ..
        } = o;
        let full = rows == MR && cols == NR;
        // Edge blocks go through a full-size scratch block, so the loop below is always 6x16.
        let mut scratch = [0f32; MR * NR];
        let (cp, ld) = if full {
            (c, ldc)
        } else {
            if load {
                for r in 0..rows {
                    for j in 0..cols {
                        // SAFETY: r < rows, j < cols (caller's contract).
                        scratch[r * NR + j] = unsafe { *c.add(r * ldc + j) };
                    }
                }
            }
            (scratch.as_mut_ptr(), NR)
        };
        // SAFETY: row pointers are clamped to the last valid row, so every A read is at
        // r < rows; B and C as the caller promised (cp addresses a full 6x16 block with
        // stride ld: C itself when full, else the scratch).
        unsafe {
            let ar: [*const f32; MR] = std::array::from_fn(|r| a.add(r.min(rows - 1) * a_rs));
            let mut acc = [[_mm256_setzero_ps(); 2]; MR];
            if load {
                for (r, x) in acc.iter_mut().enumerate() {
                    x[0] = _mm256_loadu_ps(cp.add(r * ld));
                    x[1] = _mm256_loadu_ps(cp.add(r * ld + 8));
                }
            }
            for p in 0..kc {
                let b0 = _mm256_loadu_ps(b.add(p * b_rs));
                let b1 = _mm256_loadu_ps(b.add(p * b_rs + 8));
                for (r, x) in acc.iter_mut().enumerate() {
                    let av = _mm256_set1_ps(*ar[r].add(p * a_cs));
                    x[0] = _mm256_fmadd_ps(av, b0, x[0]);
                    x[1] = _mm256_fmadd_ps(av, b1, x[1]);
                }
            }
            for (r, x) in acc.iter().enumerate() {
                _mm256_storeu_ps(cp.add(r * ld), x[0]);
                _mm256_storeu_ps(cp.add(r * ld + 8), x[1]);
            }
        }
        if !full {
            for r in 0..rows {
                for j in 0..cols {
                    // SAFETY: r < rows, j < cols (caller's contract).
                    unsafe { *c.add(r * ldc + j) = scratch[r * NR + j] };
                }
            }
        }
    }

    /// One thin block's operands: A's `rows` rows (`a[i * a_rs + p * a_cs]`) and eight
    /// columns of a transposed B, column `r` the run `b[r * b_cs .. r * b_cs + k]`.
    pub(super) struct Thin {
        pub a: *const f32,
        pub a_rs: usize,
        pub a_cs: usize,
        pub rows: usize,
        pub b: *const f32,
        pub b_cs: usize,
        pub k: usize,
    }

    /// `C[i, r] = chain over p of fma(A(i, p), B(p, r), .)` for `i < rows`, `r < 8`, starting
    /// from `C[i, r]` if `load`: eight k steps of the eight columns loaded at a time and
    /// transposed in registers, so each vector holds one k step of the eight columns and the
    /// chains run in k order as the register blocks' do.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA; `1 <= rows <= THIN_M`; the operands readable as
    /// [`Thin`] says; `c + i * ldc + r` valid for reads and writes for `i < rows`, `r < 8`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn thin_avx2(o: Thin, c: *mut f32, ldc: usize, load: bool) {
        match o.rows {
            // SAFETY: forwarded contract, with the row count as a constant.
            1 => unsafe { thin_rows::<1>(o, c, ldc, load) },
            2 => unsafe { thin_rows::<2>(o, c, ldc, load) },
            3 => unsafe { thin_rows::<3>(o, c, ldc, load) },
            _ => unsafe { thin_rows::<{ super::THIN_M }>(o, c, ldc, load) },
        }
    }

    /// [`thin_avx2`] for `R` rows.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn thin_rows<const R: usize>(o: Thin, c: *mut f32, ldc: usize, load: bool) {
        let Thin {
            a,
            a_rs,
            a_cs,
            b,
            b_cs,
            k,
            ..
        } = o;
        // SAFETY: every read is inside the operands (r < 8 columns of k elements, i < R rows
        // of A), every write inside C's R x 8 block (the caller's contract).
        unsafe {
            let mut acc = [_mm256_setzero_ps(); R];
            if load {
                for (i, x) in acc.iter_mut().enumerate() {
                    *x = _mm256_loadu_ps(c.add(i * ldc));
                }
            }
            let ar: [*const f32; R] = std::array::from_fn(|i| a.add(i * a_rs));
            let whole = k / 8 * 8;
            let mut p0 = 0;
            while p0 < whole {
                let r: [__m256; 8] = std::array::from_fn(|j| _mm256_loadu_ps(b.add(j * b_cs + p0)));
                // The 8x8 transpose: t[q] lane j = column j's element p0 + q.
                let u0 = _mm256_unpacklo_ps(r[0], r[1]);
                let u1 = _mm256_unpackhi_ps(r[0], r[1]);
                let u2 = _mm256_unpacklo_ps(r[2], r[3]);
                let u3 = _mm256_unpackhi_ps(r[2], r[3]);
                let u4 = _mm256_unpacklo_ps(r[4], r[5]);
                let u5 = _mm256_unpackhi_ps(r[4], r[5]);
                let u6 = _mm256_unpacklo_ps(r[6], r[7]);
                let u7 = _mm256_unpackhi_ps(r[6], r[7]);
                let s0 = _mm256_shuffle_ps::<0x44>(u0, u2);
                let s1 = _mm256_shuffle_ps::<0xEE>(u0, u2);
                let s2 = _mm256_shuffle_ps::<0x44>(u1, u3);
                let s3 = _mm256_shuffle_ps::<0xEE>(u1, u3);
                let s4 = _mm256_shuffle_ps::<0x44>(u4, u6);
                let s5 = _mm256_shuffle_ps::<0xEE>(u4, u6);
                let s6 = _mm256_shuffle_ps::<0x44>(u5, u7);
                let s7 = _mm256_shuffle_ps::<0xEE>(u5, u7);
                let t = [
                    _mm256_permute2f128_ps::<0x20>(s0, s4),
                    _mm256_permute2f128_ps::<0x20>(s1, s5),
                    _mm256_permute2f128_ps::<0x20>(s2, s6),
                    _mm256_permute2f128_ps::<0x20>(s3, s7),
                    _mm256_permute2f128_ps::<0x31>(s0, s4),
                    _mm256_permute2f128_ps::<0x31>(s1, s5),
                    _mm256_permute2f128_ps::<0x31>(s2, s6),
                    _mm256_permute2f128_ps::<0x31>(s3, s7),
                ];
                for (q, tq) in t.iter().enumerate() {
                    for (x, ai) in acc.iter_mut().zip(&ar) {
                        let av = _mm256_set1_ps(*ai.add((p0 + q) * a_cs));
                        *x = _mm256_fmadd_ps(av, *tq, *x);
                    }
                }
                p0 += 8;
            }
            for p in whole..k {
                let step: [f32; 8] = std::array::from_fn(|j| *b.add(j * b_cs + p));
                let tq = _mm256_loadu_ps(step.as_ptr());
                for (x, ai) in acc.iter_mut().zip(&ar) {
                    let av = _mm256_set1_ps(*ai.add(p * a_cs));
                    *x = _mm256_fmadd_ps(av, tq, *x);
                }
            }
            for (i, x) in acc.iter().enumerate() {
                _mm256_storeu_ps(c.add(i * ldc), *x);
            }
        }
    }

    /// One thin job's operands over a row-major B: A's `rows` rows (`a[i * a_rs + p * a_cs]`)
    /// and `cols` columns of B from `b` (`b[p * b_rs + j]`, `j < cols`).
    pub(super) struct ThinRowMajor {
        pub a: *const f32,
        pub a_rs: usize,
        pub a_cs: usize,
        pub rows: usize,
        pub b: *const f32,
        pub b_rs: usize,
        pub k: usize,
        pub cols: usize,
    }

    /// `C[i, j] = chain over p of fma(A(i, p), B(p, j), .)` for `i < rows`, `j < cols`,
    /// starting from `C[i, j]` if `load`: register blocks of the rows by up to 64 columns
    /// (fewer the more rows), each walking k with a broadcast A element times a run of B's
    /// row p per step, then the last columns one `mul_add` chain each; every element's chain
    /// runs in k order.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA; `1 <= rows <= THIN_M`; the operands readable as
    /// [`ThinRowMajor`] says; `c + i * ldc + j` valid for reads and writes for `i < rows`,
    /// `j < cols`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn thin_row_major_avx2(o: ThinRowMajor, c: *mut f32, ldc: usize, load: bool) {
        // SAFETY: forwarded contract, with the row count as a constant.
        unsafe {
            match o.rows {
                1 => row_major_rows::<1, 8>(&o, c, ldc, load),
                2 => row_major_rows::<2, 4>(&o, c, ldc, load),
                3 => row_major_rows::<3, 2>(&o, c, ldc, load),
                _ => row_major_rows::<{ super::THIN_M }, 2>(&o, c, ldc, load),
            }
        }
    }

    /// [`thin_row_major_avx2`] for `R` rows, `V` vectors of columns per register block.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn row_major_rows<const R: usize, const V: usize>(
        o: &ThinRowMajor,
        c: *mut f32,
        ldc: usize,
        load: bool,
    ) {
        let mut j = 0;
        // SAFETY: the blocks and the tail stay within the `cols` columns (the caller's
        // contract covers them).
        unsafe {
            while j + 8 * V <= o.cols {
                row_major_block::<R, V>(o, j, c, ldc, load);
                j += 8 * V;
            }
            while j + 8 <= o.cols {
                row_major_block::<R, 1>(o, j, c, ldc, load);
                j += 8;
            }
            for jj in j..o.cols {
                for i in 0..R {
                    let cp = c.add(i * ldc + jj);
                    let mut acc = if load { *cp } else { 0.0 };
                    for p in 0..o.k {
                        acc = (*o.a.add(i * o.a_rs + p * o.a_cs))
                            .mul_add(*o.b.add(p * o.b_rs + jj), acc);
                    }
                    *cp = acc;
                }
            }
        }
    }

    /// Columns `j..j + 8V` of `R` rows, accumulated in registers over every k step.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn row_major_block<const R: usize, const V: usize>(
        o: &ThinRowMajor,
        j: usize,
        c: *mut f32,
        ldc: usize,
        load: bool,
    ) {
        // SAFETY: reads of B's columns j..j+8V of rows p < k and of A's R rows, reads and
        // writes of C's R x 8V block: all inside the caller's contract.
        unsafe {
            let mut acc = [[_mm256_setzero_ps(); V]; R];
            if load {
                for (i, row) in acc.iter_mut().enumerate() {
                    for (v, x) in row.iter_mut().enumerate() {
                        *x = _mm256_loadu_ps(c.add(i * ldc + j + 8 * v));
                    }
                }
            }
            let mut bp = o.b.add(j);
            for p in 0..o.k {
                let bv: [__m256; V] = std::array::from_fn(|v| _mm256_loadu_ps(bp.add(8 * v)));
                for (i, row) in acc.iter_mut().enumerate() {
                    let av = _mm256_set1_ps(*o.a.add(i * o.a_rs + p * o.a_cs));
                    for (x, &b) in row.iter_mut().zip(&bv) {
                        *x = _mm256_fmadd_ps(av, b, *x);
                    }
                }
                bp = bp.add(o.b_rs);
            }
            for (i, row) in acc.iter().enumerate() {
                for (v, x) in row.iter().enumerate() {
                    _mm256_storeu_ps(c.add(i * ldc + j + 8 * v), *x);
                }
            }
        }
    }

    /// The AVX-512 register block: 6 rows x 32 columns (two 512-bit vectors per row, one
    /// from each of two B panels), twelve accumulators; the same per-element fma chain as
    /// [`micro_avx2`].
    ///
    /// # Safety
    /// As [`micro_avx2`], with AVX-512F instead of AVX2 and FMA, 32 columns (`cols <= 32`) and
    /// `b2[p * b_rs + j]` for `j < 16` readable too.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn micro_avx512(o: Operands, c: *mut f32, ldc: usize, load: bool) {
        const MR: usize = SIMD_MR;
        const W: usize = 2 * NR;
        let Operands {
            kc,
            a,
            a_rs,
            a_cs,
            b,
            b2,
            b_rs,
            rows,
            cols,
        } = o;
        let full = rows == MR && cols == W;
        let mut scratch = [0f32; MR * W];
        let (cp, ld) = if full {
            (c, ldc)
        } else {
            if load {
                for r in 0..rows {
                    for j in 0..cols {
                        // SAFETY: r < rows, j < cols (caller's contract).
                        scratch[r * W + j] = unsafe { *c.add(r * ldc + j) };
                    }
                }
            }
            (scratch.as_mut_ptr(), W)
        };
        // SAFETY: as in `micro_avx2`: clamped A rows, B panels and C as the caller promised.
        unsafe {
            let ar: [*const f32; MR] = std::array::from_fn(|r| a.add(r.min(rows - 1) * a_rs));
            let mut acc = [[_mm512_setzero_ps(); 2]; MR];
            if load {
                for (r, x) in acc.iter_mut().enumerate() {
                    x[0] = _mm512_loadu_ps(cp.add(r * ld));
                    x[1] = _mm512_loadu_ps(cp.add(r * ld + NR));
                }
            }
            for p in 0..kc {
                let b0 = _mm512_loadu_ps(b.add(p * b_rs));
                let b1 = _mm512_loadu_ps(b2.add(p * b_rs));
                for (r, x) in acc.iter_mut().enumerate() {
                    let av = _mm512_set1_ps(*ar[r].add(p * a_cs));
                    x[0] = _mm512_fmadd_ps(av, b0, x[0]);
                    x[1] = _mm512_fmadd_ps(av, b1, x[1]);
                }
            }
            for (r, x) in acc.iter().enumerate() {
                _mm512_storeu_ps(cp.add(r * ld), x[0]);
                _mm512_storeu_ps(cp.add(r * ld + NR), x[1]);
            }
        }
        if !full {
            for r in 0..rows {
                for j in 0..cols {
                    // SAFETY: r < rows, j < cols (caller's contract).
                    unsafe { *c.add(r * ldc + j) = scratch[r * W + j] };
                }
            }
        }
    }
}

/// The batch of one grouped linear layer: group `g` is a product on the next `rows[g]` rows.
fn grouped<'a, F>(
    g: &Groups,
    mut one: impl FnMut(usize, usize, usize) -> Option<Problem<'a, F>>,
) -> Vec<Problem<'a, F>> {
    let mut r0 = 0;
    let mut v = Vec::with_capacity(g.rows.len());
    for (gi, &rows) in g.rows.iter().enumerate() {
        if let Some(p) = one(gi, r0, rows) {
            v.push(p);
        }
        r0 += rows;
    }
    v
}

/// Linear forward: `out[rows_g, :] = inp[rows_g, :] @ W[first+g]^T`; inp `[R, in]`,
/// W `[G, out, in]` (or its panels, as `g.layout` says), out `[R, out]`.
pub fn linear_fwd<F: Real>(out: &mut [F], inp: &[F], w: &[F], g: &Groups) {
    let (ind, outd) = (g.in_dim, g.out_dim);
    let probs = match g.layout {
        WeightLayout::OutIn => grouped(g, |gi, r0, rows| {
            let wo = (g.first + gi) * outd * ind;
            Some(Problem {
                shape: GemmShape {
                    m: rows,
                    n: outd,
                    k: ind,
                },
                c_off: r0 * outd,
                ldc: outd,
                a: Mat::rows(&inp[r0 * ind..], ind),
                b: Mat::transposed(&w[wo..wo + outd * ind], ind),
            })
        }),
        // One product per group and panel: the panel is a row-major `[in, width]` B
        // writing its own columns of the group's rows.
        WeightLayout::Panels => {
            let mut v = Vec::new();
            let mut r0 = 0;
            for (gi, &rows) in g.rows.iter().enumerate() {
                let wo = (g.first + gi) * outd * ind;
                if rows > 0 {
                    for o0 in (0..outd).step_by(WEIGHT_PANEL) {
                        let width = WEIGHT_PANEL.min(outd - o0);
                        let panel = &w[wo + ind * o0..wo + ind * (o0 + width)];
                        v.push(Problem {
                            shape: GemmShape {
                                m: rows,
                                n: width,
                                k: ind,
                            },
                            c_off: r0 * outd + o0,
                            ldc: outd,
                            a: Mat::rows(&inp[r0 * ind..], ind),
                            b: Mat::rows(panel, width),
                        });
                    }
                }
                r0 += rows;
            }
            v
        }
    };
    run_problems(
        Kernel::best(),
        &probs,
        out,
        Accumulate::Overwrite,
        Tiles::Parallel,
    );
}

/// Linear backward to the input: `dinp[rows_g, :] (+)= dout[rows_g, :] @ W[first+g]`.
pub fn linear_bwd_data<F: Real>(
    dinp: &mut [F],
    dout: &[F],
    w: &[F],
    g: &Groups,
    accumulate: Accumulate,
) {
    assert_eq!(g.layout, WeightLayout::OutIn, "{TRAINED_ONLY}");
    let (ind, outd) = (g.in_dim, g.out_dim);
    let probs = grouped(g, |gi, r0, rows| {
        let wo = (g.first + gi) * outd * ind;
        Some(Problem {
            shape: GemmShape {
                m: rows,
                n: ind,
                k: outd,
            },
            c_off: r0 * ind,
            ldc: ind,
            a: Mat::rows(&dout[r0 * outd..], outd),
            b: Mat::rows(&w[wo..wo + outd * ind], ind),
        })
    });
    run_problems(Kernel::best(), &probs, dinp, accumulate, Tiles::Parallel);
}

/// Why the backward ops take the trained layout only: a decoder's panels are never trained.
const TRAINED_ONLY: &str = "the linear backward reads [out, in] weights (WeightLayout::OutIn)";

/// Linear backward to the weights: `dW[first+g] += dout[rows_g, :]^T @ inp[rows_g, :]`
/// (an empty group leaves its matrix as it is).
pub fn linear_bwd_weight<F: Real>(dw: &mut [F], dout: &[F], inp: &[F], g: &Groups) {
    assert_eq!(g.layout, WeightLayout::OutIn, "{TRAINED_ONLY}");
    let (ind, outd) = (g.in_dim, g.out_dim);
    let probs = grouped(g, |gi, r0, rows| {
        let wo = (g.first + gi) * outd * ind;
        (rows > 0).then(|| Problem {
            shape: GemmShape {
                m: outd,
                n: ind,
                k: rows,
            },
            c_off: wo,
            ldc: ind,
            a: Mat::transposed(&dout[r0 * outd..r0 * outd + rows * outd], outd),
            b: Mat::rows(&inp[r0 * ind..r0 * ind + rows * ind], ind),
        })
    });
    run_problems(Kernel::best(), &probs, dw, Accumulate::Add, Tiles::Parallel);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The contract written out naively: one `mul_add` chain per element.
    fn reference(shape: GemmShape, c: &mut [f32], a: Mat<'_, f32>, b: Mat<'_, f32>, add: bool) {
        for i in 0..shape.m {
            for j in 0..shape.n {
                let mut acc = if add { c[i * shape.n + j] } else { 0.0 };
                for p in 0..shape.k {
                    acc = a.data[i * a.rs + p * a.cs].mul_add(b.data[p * b.rs + j * b.cs], acc);
                }
                c[i * shape.n + j] = acc;
            }
        }
    }

    /// Values with full mantissas, so that any change in the order or fusing of the
    /// operations shows in the bits.
    fn values(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s as f32 / u32::MAX as f32) * 2.0 - 1.0
            })
            .collect()
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// Odd shapes: edges in every direction, k across several KC blocks, k = 1, m or n = 1.
    const SHAPES: &[(usize, usize, usize)] = &[
        (1, 1, 1),
        (7, 5, 3),
        (13, 17, 29),
        (97, 257, 300),
        (200, 33, 513),
        (5, 300, 1),
        (1, 100, 700),
        (101, 1, 64),
        // The thin path: a few rows, column tails, k tails and k below one SIMD step.
        (2, 37, 300),
        (3, 8, 9),
        (4, 23, 17),
        (1, 130, 5),
        // Thin over a row-major B with several jobs and a column tail.
        (1, 300, 40),
        (3, 1030, 12),
    ];

    #[test]
    fn gemm_bitwise_every_kernel_equals_the_scalar_chain_on_odd_shapes() {
        let kernels = Kernel::available();
        for &(m, n, k) in SHAPES {
            let shape = GemmShape { m, n, k };
            let av = values(m * k, 1);
            let bv = values(k * n, 2);
            let c0 = values(m * n, 3);
            // A row-major or transposed, B row-major or transposed: every packing branch.
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                let a = if ta {
                    Mat::transposed(&av, m)
                } else {
                    Mat::rows(&av, k)
                };
                let b = if tb {
                    Mat::transposed(&bv, k)
                } else {
                    Mat::rows(&bv, n)
                };
                for add in [Accumulate::Overwrite, Accumulate::Add] {
                    let mut want = c0.clone();
                    reference(shape, &mut want, a, b, add == Accumulate::Add);
                    for &kernel in &kernels {
                        let mut got = c0.clone();
                        gemm_into_with(
                            kernel,
                            shape,
                            MatMut::rows(&mut got, n),
                            a,
                            b,
                            add,
                            Tiles::Parallel,
                        );
                        assert_eq!(
                            bits(&got),
                            bits(&want),
                            "{kernel:?} {m}x{n}x{k} ta={ta} tb={tb} {add:?}"
                        );
                    }
                }
            }
        }
    }

    /// f64 (the gradient checks' type) runs the scalar kernel whatever the CPU offers, on every
    /// shape: the same chain as f32, in f64.
    #[test]
    fn gemm_f64_equals_the_chain_on_odd_shapes() {
        for &(m, n, k) in SHAPES {
            let av: Vec<f64> = values(m * k, 8).iter().map(|&x| x as f64 / 3.0).collect();
            let bv: Vec<f64> = values(k * n, 9).iter().map(|&x| x as f64 / 7.0).collect();
            let mut want = vec![0f64; m * n];
            for i in 0..m {
                for j in 0..n {
                    let mut acc = 0f64;
                    for p in 0..k {
                        acc = av[i * k + p].mul_add(bv[p * n + j], acc);
                    }
                    want[i * n + j] = acc;
                }
            }
            let mut got = vec![0f64; m * n];
            gemm_into(
                GemmShape { m, n, k },
                MatMut::rows(&mut got, n),
                Mat::rows(&av, k),
                Mat::rows(&bv, n),
                Accumulate::Overwrite,
                Tiles::Parallel,
            );
            assert!(
                got.iter()
                    .zip(&want)
                    .all(|(g, w)| g.to_bits() == w.to_bits()),
                "f64 {m}x{n}x{k}"
            );
        }
    }

    #[test]
    fn gemm_bitwise_the_same_for_any_thread_count() {
        let (m, n, k) = (300, 520, 700);
        let (av, bv) = (values(m * k, 4), values(k * n, 5));
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let mut c = vec![0f32; m * n];
            pool.install(|| {
                gemm_into(
                    GemmShape { m, n, k },
                    MatMut::rows(&mut c, n),
                    Mat::rows(&av, k),
                    Mat::rows(&bv, n),
                    Accumulate::Overwrite,
                    Tiles::Parallel,
                )
            });
            bits(&c)
        };
        let one = run(1);
        assert_eq!(one, run(2));
        assert_eq!(one, run(5));
        // And not trivially: the product is not all zeros.
        assert!(one.iter().filter(|&&b| b != 0).count() > m * n / 2);
    }

    /// A grouped forward against the chain per group (groups start at matrix 1).
    fn check_grouped(ind: usize, outd: usize, rows: Vec<usize>) {
        let r: usize = rows.iter().sum();
        let g = Groups {
            first: 1,
            rows: rows.clone(),
            in_dim: ind,
            out_dim: outd,
            layout: WeightLayout::OutIn,
        };
        let inp = values(r * ind, 6);
        let w = values((rows.len() + 1) * outd * ind, 7);
        let mut out = vec![0f32; r * outd];
        linear_fwd(&mut out, &inp, &w, &g);
        let mut r0 = 0;
        for (gi, &n) in rows.iter().enumerate() {
            let wo = (1 + gi) * outd * ind;
            let mut want = vec![0f32; n * outd];
            reference(
                GemmShape {
                    m: n,
                    n: outd,
                    k: ind,
                },
                &mut want,
                Mat::rows(&inp[r0 * ind..], ind),
                Mat::transposed(&w[wo..wo + outd * ind], ind),
                false,
            );
            assert_eq!(
                bits(&out[r0 * outd..(r0 + n) * outd]),
                bits(&want),
                "group {gi} of {rows:?}, {ind} -> {outd}"
            );
            r0 += n;
        }
    }

    /// A linear forward over panels gives the bits it gives over `[G, out, in]`, for thin and
    /// packed groups, a narrow last panel and a layer narrower than one panel.
    #[test]
    fn a_linear_layer_over_panels_gives_the_same_bits() {
        for (ind, outd, rows) in [
            (37, 21, vec![1, 0, 3, 7]),
            (40, 150, vec![2, 1, 4]),
            (9, 64, vec![1]),
        ] {
            let r: usize = rows.iter().sum();
            let g = Groups {
                first: 1,
                rows: rows.clone(),
                in_dim: ind,
                out_dim: outd,
                layout: WeightLayout::OutIn,
            };
            let gp = g.clone().with_layout(WeightLayout::Panels);
            let inp = values(r * ind, 6);
            let w = values((rows.len() + 1) * outd * ind, 7);
            let mut wp = vec![0f32; w.len()];
            crate::backend::panel_matrices(&w, &mut wp, outd, ind);
            assert_ne!(w, wp);
            let (mut out, mut out_p) = (vec![0f32; r * outd], vec![0f32; r * outd]);
            linear_fwd(&mut out, &inp, &w, &g);
            linear_fwd(&mut out_p, &inp, &wp, &gp);
            assert_eq!(bits(&out), bits(&out_p), "{ind} -> {outd} {rows:?}");
            assert!(out.iter().filter(|&&x| x != 0.0).count() > out.len() / 2);
        }
    }

    #[test]
    fn grouped_linear_layers_equal_one_product_per_group() {
        // Three groups, one empty.
        check_grouped(37, 21, vec![5, 0, 40]);
    }

    #[test]
    fn grouped_layers_bigger_than_the_pack_budget_run_in_batches_with_the_same_bits() {
        // Each group's packed W^T is a third of the budget (plus padding): six non-empty
        // groups make three batches of two, the empty one rides along.
        let (ind, outd) = (300, PACK_BUDGET / 300 / 3);
        let packed = ind * outd.div_ceil(NR) * NR;
        assert!(2 * packed <= PACK_BUDGET && 3 * packed > PACK_BUDGET);
        check_grouped(ind, outd, vec![3, 9, 0, 1, 13, 2, 7]);
    }

    #[test]
    fn an_empty_k_clears_or_keeps_c() {
        let mut c = vec![1f32; 6];
        let (a, b) = ([0f32; 1], [0f32; 1]);
        let shape = GemmShape { m: 2, n: 3, k: 0 };
        gemm_into(
            shape,
            MatMut::rows(&mut c, 3),
            Mat::rows(&a, 0),
            Mat::rows(&b, 3),
            Accumulate::Add,
            Tiles::Serial,
        );
        assert_eq!(c, vec![1.0; 6]);
        gemm_into(
            shape,
            MatMut::rows(&mut c, 3),
            Mat::rows(&a, 0),
            Mat::rows(&b, 3),
            Accumulate::Overwrite,
            Tiles::Serial,
        );
        assert_eq!(c, vec![0.0; 6]);
    }
}
