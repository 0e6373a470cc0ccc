// attention.cu — glassbox CUDA kernels: causal attention, two ways. (1) The causal softmax
// between cuBLAS products (the materialized path); (2) fused flash-style kernels that never
// form the T x T matrix (the fused path, used by bf16 runs and selectable for f32).
//
// Shapes: BH = B*H independent heads, T positions, D head size; q, k, v, out [BH, T, D]
// row-major; P, dP [BH, T, T] (materialized path only).
//
// (1) Design note (a cuBLAS-batched attention): the four matmuls per head — S = q k^T,
// out = P v, and in backward dv = P^T dout, dP = dout v^T, dq = dS k, dk = dS^T q — are cuBLAS
// strided-batched SGEMMs over the BH heads (see runner/src/backend/cuda/blas.rs for the
// row-major transpose trick). These kernels do the part between them, in place on the T x T
// buffer:
//   forward:  P[i, j] = exp(S[i, j] s - max) / sum for j <= i, 0 for j > i  (s = 1/sqrt(D))
//   backward: dS[i, j] = P[i, j] (dP[i, j] - sum_j dP[i, j] P[i, j]) s   (0 for j > i)
// One 256-thread block per row (BH*T blocks); row max and sums are fixed shared-memory trees,
// so the order never depends on timing. It keeps the full T x T matrix (as the CPU reference
// does), which is what the fused path avoids.
//
// (2) Design note (flash-style, FlashAttention-2's loop order, in f32 on the SIMT cores):
//   forward, one thread per query row i, 64 rows per block: K and V stream through shared
//   memory in tiles of 32 keys (only tiles with a key <= the block's last row: causal); the
//   thread keeps its q row, a running max m, a running sum l and the unnormalised output in
//   registers (its tile of scores in shared memory) and rescales them once per tile (online
//   softmax). It writes out = acc / l and
//   caches lse_i = m + log(l) and a copy of out for backward: cache = [lse (BH*T) | out
//   (BH*T*D)], BH*T*(D+1) floats instead of BH*T*T.
//   backward (recompute; no P is stored): delta_i = dout_i . out_i (one thread per row), then
//   two kernels, each owning its outputs, so no atomics and no cross-block reduction:
//     dq: one thread per query row, streaming K and V tiles: p = exp(q.k s - lse_i),
//         dp = dout_i . v_j, dq_i += p (dp - delta_i) k_j, finally times s;
//     dk, dv: one block per tile of 64 keys (one thread per key row j) streams the query
//         tiles at or after it (Q, dout, lse, delta through shared memory, 32 rows at a time):
//         dv_j += p dout_i, dk_j += p (dp - delta_i) q_i, finally dk times s.
//   Every sum is one thread's serial loop in a fixed order (keys ascending, queries
//   ascending), so results are bitwise reproducible run to run. The head size is a template
//   parameter (16, 32, 64, 128: registers for the rows); other sizes use the materialized
//   path. Launch geometry is in runner/src/backend/cuda/ops/attention.rs.

#define ATT_THREADS 256

__device__ float att_block_max(float v, float* sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = ATT_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

__device__ float att_block_sum(float v, float* sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = ATT_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

// In place: p holds S on entry and P on exit. Grid: BH*T blocks of ATT_THREADS.
extern "C" __global__ void causal_softmax_fwd_f32(float* __restrict__ p, unsigned long long rows,
                                                  int t, float scale) {
    __shared__ float sh[ATT_THREADS];
    unsigned long long r = blockIdx.x;
    if (r >= rows) return;
    int i = r % t;  // query position: keys 0..=i are visible
    float* row = p + r * t;
    float mx = __int_as_float(0xff800000);  // -inf (NVRTC has no math.h)
    for (int j = threadIdx.x; j <= i; j += ATT_THREADS) mx = fmaxf(mx, row[j] * scale);
    mx = att_block_max(mx, sh);
    float sum = 0.0f;
    for (int j = threadIdx.x; j <= i; j += ATT_THREADS) {
        float e = expf(row[j] * scale - mx);
        row[j] = e;
        sum += e;
    }
    float inv = 1.0f / att_block_sum(sum, sh);
    for (int j = threadIdx.x; j < t; j += ATT_THREADS) row[j] = j <= i ? row[j] * inv : 0.0f;
}

// In place: ds holds dP on entry and dS (already times the score scale) on exit.
// Grid: BH*T blocks of ATT_THREADS.
extern "C" __global__ void causal_softmax_bwd_f32(float* __restrict__ ds, const float* __restrict__ p,
                                                  unsigned long long rows, int t, float scale) {
    __shared__ float sh[ATT_THREADS];
    unsigned long long r = blockIdx.x;
    if (r >= rows) return;
    int i = r % t;
    float* dr = ds + r * t;
    const float* pr = p + r * t;
    float dot = 0.0f;
    for (int j = threadIdx.x; j <= i; j += ATT_THREADS) dot += dr[j] * pr[j];
    dot = att_block_sum(dot, sh);
    for (int j = threadIdx.x; j < t; j += ATT_THREADS)
        dr[j] = j <= i ? pr[j] * (dr[j] - dot) * scale : 0.0f;
}

// ---------------------------------------------------------------------------------------------
// (2) Fused path.

#define FA_ROWS 64  // query (forward, dq) or key (dk/dv) rows per block: one thread each
#define FA_TILE 32  // rows per shared-memory tile of the streamed operand

// Forward. Grid (ceil(T / FA_ROWS), BH); FA_ROWS threads.
template <int D>
__device__ void fa_fwd(float* __restrict__ out, float* __restrict__ cache, const float* __restrict__ q,
                       const float* __restrict__ k, const float* __restrict__ v, int t, float scale) {
    __shared__ float ks[FA_TILE][D];
    __shared__ float vs[FA_TILE][D];
    __shared__ float ss[FA_ROWS][FA_TILE + 1];  // each thread's scores of the tile (+1: no bank conflicts)
    const float neg_inf = __int_as_float(0xff800000);
    const unsigned long long bh = blockIdx.y;
    const unsigned long long base = bh * t * D;
    const int i = blockIdx.x * FA_ROWS + threadIdx.x;
    const bool live = i < t;
    const int last = min(t - 1, (int)(blockIdx.x * FA_ROWS + FA_ROWS - 1));
    float qr[D];
    float acc[D];
#pragma unroll
    for (int d = 0; d < D; ++d) {
        qr[d] = live ? q[base + (unsigned long long)i * D + d] : 0.0f;
        acc[d] = 0.0f;
    }
    float m = neg_inf;
    float l = 0.0f;
    for (int j0 = 0; j0 <= last; j0 += FA_TILE) {
        for (int x = threadIdx.x; x < FA_TILE * D; x += FA_ROWS) {
            int jj = x / D, d = x % D, j = j0 + jj;
            ks[jj][d] = j < t ? k[base + (unsigned long long)j * D + d] : 0.0f;
            vs[jj][d] = j < t ? v[base + (unsigned long long)j * D + d] : 0.0f;
        }
        __syncthreads();
        if (live && j0 <= i) {
            const int n = min(FA_TILE, i - j0 + 1);
            float* s = ss[threadIdx.x];
            float tmax = neg_inf;
            for (int jj = 0; jj < n; ++jj) {
                float dot = 0.0f;
#pragma unroll
                for (int d = 0; d < D; ++d) dot += qr[d] * ks[jj][d];
                s[jj] = dot * scale;
                tmax = fmaxf(tmax, s[jj]);
            }
            const float mnew = fmaxf(m, tmax);
            const float corr = expf(m - mnew);
            l *= corr;
#pragma unroll
            for (int d = 0; d < D; ++d) acc[d] *= corr;
            for (int jj = 0; jj < n; ++jj) {
                const float p = expf(s[jj] - mnew);
                l += p;
#pragma unroll
                for (int d = 0; d < D; ++d) acc[d] += p * vs[jj][d];
            }
            m = mnew;
        }
        __syncthreads();
    }
    if (live) {
        const unsigned long long rows = (unsigned long long)gridDim.y * t;
        const float inv = 1.0f / l;
#pragma unroll
        for (int d = 0; d < D; ++d) {
            const float o = acc[d] * inv;
            out[base + (unsigned long long)i * D + d] = o;
            cache[rows + base + (unsigned long long)i * D + d] = o;
        }
        cache[bh * t + i] = m + logf(l);
    }
}

// delta[r] = dout[r, :] . out[r, :] for the BH*T rows; out is read from the cache. One thread
// per row, 1-D grid of 256-thread blocks.
extern "C" __global__ void flash_attn_bwd_delta(float* __restrict__ delta, const float* __restrict__ dout,
                                                const float* __restrict__ cache,
                                                unsigned long long rows, int d) {
    for (unsigned long long r = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; r < rows;
         r += (unsigned long long)gridDim.x * blockDim.x) {
        const float* o = cache + rows + r * d;
        const float* g = dout + r * d;
        float acc = 0.0f;
        for (int x = 0; x < d; ++x) acc += g[x] * o[x];
        delta[r] = acc;
    }
}

// dq. Grid (ceil(T / FA_ROWS), BH); FA_ROWS threads.
template <int D>
__device__ void fa_bwd_dq(float* __restrict__ dq, const float* __restrict__ dout,
                          const float* __restrict__ cache, const float* __restrict__ delta,
                          const float* __restrict__ q, const float* __restrict__ k,
                          const float* __restrict__ v, int t, float scale) {
    __shared__ float ks[FA_TILE][D];
    __shared__ float vs[FA_TILE][D];
    const unsigned long long bh = blockIdx.y;
    const unsigned long long base = bh * t * D;
    const int i = blockIdx.x * FA_ROWS + threadIdx.x;
    const bool live = i < t;
    const int last = min(t - 1, (int)(blockIdx.x * FA_ROWS + FA_ROWS - 1));
    float qr[D];
    float gr[D];
    float acc[D];
#pragma unroll
    for (int d = 0; d < D; ++d) {
        qr[d] = live ? q[base + (unsigned long long)i * D + d] : 0.0f;
        gr[d] = live ? dout[base + (unsigned long long)i * D + d] : 0.0f;
        acc[d] = 0.0f;
    }
    const float lse = live ? cache[bh * t + i] : 0.0f;
    const float di = live ? delta[bh * t + i] : 0.0f;
    for (int j0 = 0; j0 <= last; j0 += FA_TILE) {
        for (int x = threadIdx.x; x < FA_TILE * D; x += FA_ROWS) {
            int jj = x / D, d = x % D, j = j0 + jj;
            ks[jj][d] = j < t ? k[base + (unsigned long long)j * D + d] : 0.0f;
            vs[jj][d] = j < t ? v[base + (unsigned long long)j * D + d] : 0.0f;
        }
        __syncthreads();
        if (live && j0 <= i) {
            const int n = min(FA_TILE, i - j0 + 1);
            for (int jj = 0; jj < n; ++jj) {
                float s = 0.0f, dp = 0.0f;
#pragma unroll
                for (int d = 0; d < D; ++d) {
                    s += qr[d] * ks[jj][d];
                    dp += gr[d] * vs[jj][d];
                }
                const float p = expf(s * scale - lse);
                const float ds = p * (dp - di);
#pragma unroll
                for (int d = 0; d < D; ++d) acc[d] += ds * ks[jj][d];
            }
        }
        __syncthreads();
    }
    if (live) {
#pragma unroll
        for (int d = 0; d < D; ++d) dq[base + (unsigned long long)i * D + d] = acc[d] * scale;
    }
}

// dk, dv. Grid (ceil(T / FA_ROWS), BH); FA_ROWS threads, one per key row.
template <int D>
__device__ void fa_bwd_dkdv(float* __restrict__ dk, float* __restrict__ dv,
                            const float* __restrict__ dout, const float* __restrict__ cache,
                            const float* __restrict__ delta, const float* __restrict__ q,
                            const float* __restrict__ k, const float* __restrict__ v, int t,
                            float scale) {
    __shared__ float qs[FA_TILE][D];
    __shared__ float gs[FA_TILE][D];
    __shared__ float lses[FA_TILE];
    __shared__ float deltas[FA_TILE];
    const unsigned long long bh = blockIdx.y;
    const unsigned long long base = bh * t * D;
    const int first = blockIdx.x * FA_ROWS;
    const int j = first + threadIdx.x;
    const bool live = j < t;
    float kr[D];
    float vr[D];
    float gk[D];
    float gv[D];
#pragma unroll
    for (int d = 0; d < D; ++d) {
        kr[d] = live ? k[base + (unsigned long long)j * D + d] : 0.0f;
        vr[d] = live ? v[base + (unsigned long long)j * D + d] : 0.0f;
        gk[d] = 0.0f;
        gv[d] = 0.0f;
    }
    // Query tiles from the one holding this block's first key (causal: i >= j).
    for (int i0 = (first / FA_TILE) * FA_TILE; i0 < t; i0 += FA_TILE) {
        for (int x = threadIdx.x; x < FA_TILE * D; x += FA_ROWS) {
            int ii = x / D, d = x % D, i = i0 + ii;
            qs[ii][d] = i < t ? q[base + (unsigned long long)i * D + d] : 0.0f;
            gs[ii][d] = i < t ? dout[base + (unsigned long long)i * D + d] : 0.0f;
        }
        for (int ii = threadIdx.x; ii < FA_TILE; ii += FA_ROWS) {
            int i = i0 + ii;
            lses[ii] = i < t ? cache[bh * t + i] : 0.0f;
            deltas[ii] = i < t ? delta[bh * t + i] : 0.0f;
        }
        __syncthreads();
        if (live) {
            for (int ii = 0; ii < FA_TILE; ++ii) {
                const int i = i0 + ii;
                if (i >= t) break;
                if (i < j) continue;
                float s = 0.0f, dp = 0.0f;
#pragma unroll
                for (int d = 0; d < D; ++d) {
                    s += qs[ii][d] * kr[d];
                    dp += gs[ii][d] * vr[d];
                }
                const float p = expf(s * scale - lses[ii]);
                const float ds = p * (dp - deltas[ii]);
#pragma unroll
                for (int d = 0; d < D; ++d) {
                    gv[d] += p * gs[ii][d];
                    gk[d] += ds * qs[ii][d];
                }
            }
        }
        __syncthreads();
    }
    if (live) {
#pragma unroll
        for (int d = 0; d < D; ++d) {
            dk[base + (unsigned long long)j * D + d] = gk[d] * scale;
            dv[base + (unsigned long long)j * D + d] = gv[d];
        }
    }
}

// Entry points, one per supported head size (the launcher picks by D).
extern "C" __global__ void flash_attn_fwd_d16(float* out, float* cache, const float* q, const float* k,
                                              const float* v, int t, float scale) {
    fa_fwd<16>(out, cache, q, k, v, t, scale);
}
extern "C" __global__ void flash_attn_fwd_d32(float* out, float* cache, const float* q, const float* k,
                                              const float* v, int t, float scale) {
    fa_fwd<32>(out, cache, q, k, v, t, scale);
}
extern "C" __global__ void flash_attn_fwd_d64(float* out, float* cache, const float* q, const float* k,
                                              const float* v, int t, float scale) {
    fa_fwd<64>(out, cache, q, k, v, t, scale);
}
extern "C" __global__ void flash_attn_fwd_d128(float* out, float* cache, const float* q, const float* k,
                                               const float* v, int t, float scale) {
    fa_fwd<128>(out, cache, q, k, v, t, scale);
}
extern "C" __global__ void flash_attn_bwd_dq_d16(float* dq, const float* dout, const float* cache,
                                                 const float* delta, const float* q, const float* k,
                                                 const float* v, int t, float scale) {
    fa_bwd_dq<16>(dq, dout, cache, delta, q, k, v, t, scale);
}
extern "C" __global__ void flash_attn_bwd_dq_d32(float* dq, const float* dout, const float* cache,
                                                 const float* delta, const float* q, const float* k,
                                                 const float* v, int t, float scale) {
    fa_bwd_dq<32>(dq, dout, cache, delta, q, k, v, t, scale);
}
extern "C" __global__ void flash_attn_bwd_dq_d64(float* dq, const float* dout, const float* cache,
                                                 const float* delta, const float* q, const float* k,
                                                 const float* v, int t, float scale) {
    fa_bwd_dq<64>(dq, dout, cache, delta, q, k, v, t, scale);
}
extern "C" __global__ void flash_attn_bwd_dq_d128(float* dq, const float* dout, const float* cache,
                                                  const float* delta, const float* q, const float* k,
                                                  const float* v, int t, float scale) {
    fa_bwd_dq<128>(dq, dout, cache, delta, q, k, v, t, scale);
}
extern "C" __global__ void flash_attn_bwd_dkdv_d16(float* dk, float* dv, const float* dout,
                                                   const float* cache, const float* delta,
                                                   const float* q, const float* k, const float* v,
                                                   int t, float scale) {
    fa_bwd_dkdv<16>(dk, dv, dout, cache, delta, q, k, v, t, scale);
}
extern "C" __global__ void flash_attn_bwd_dkdv_d32(float* dk, float* dv, const float* dout,
                                                   const float* cache, const float* delta,
                                                   const float* q, const float* k, const float* v,
                                                   int t, float scale) {
    fa_bwd_dkdv<32>(dk, dv, dout, cache, delta, q, k, v, t, scale);
}
extern "C" __global__ void flash_attn_bwd_dkdv_d64(float* dk, float* dv, const float* dout,
                                                   const float* cache, const float* delta,
                                                   const float* q, const float* k, const float* v,
                                                   int t, float scale) {
    fa_bwd_dkdv<64>(dk, dv, dout, cache, delta, q, k, v, t, scale);
}
extern "C" __global__ void flash_attn_bwd_dkdv_d128(float* dk, float* dv, const float* dout,
                                                    const float* cache, const float* delta,
                                                    const float* q, const float* k, const float* v,
                                                    int t, float scale) {
    fa_bwd_dkdv<128>(dk, dv, dout, cache, delta, q, k, v, t, scale);
}
