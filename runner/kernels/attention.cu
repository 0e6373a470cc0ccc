// attention.cu — glassbox CUDA kernels: the causal softmax of attention, forward and backward.
//
// Shapes: BH = B*H independent heads, T positions; P, dP [BH, T, T] row-major.
// Design note (a cuBLAS-batched attention, the issue's accepted first version): the four
// matmuls per head — S = q k^T, out = P v, and in backward dv = P^T dout, dP = dout v^T,
// dq = dS k, dk = dS^T q — are cuBLAS strided-batched SGEMMs over the BH heads (see
// runner/src/backend/cuda/blas.rs for the row-major transpose trick). These kernels do the part
// between them, in place on the T x T buffer:
//   forward:  P[i, j] = exp(S[i, j] s - max) / sum for j <= i, 0 for j > i  (s = 1/sqrt(D))
//   backward: dS[i, j] = P[i, j] (dP[i, j] - sum_j dP[i, j] P[i, j]) s   (0 for j > i)
// One 256-thread block per row (BH*T blocks); row max and sums are fixed shared-memory trees,
// so the order never depends on timing. It keeps the full T x T matrix (as the CPU reference
// does and the backend trait caches it for backward); a fused flash-style kernel would avoid
// that memory and is the next step for long sequences.

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
