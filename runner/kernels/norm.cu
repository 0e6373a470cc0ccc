// norm.cu — glassbox CUDA kernels: RMSNorm forward and backward.
//
// Shapes: N rows, C channels; x, out, dout, dx [N, C]; w, dw [C]; rstd [N] (cached by forward).
// Math (as cpu/norm.rs): rstd = 1/sqrt(mean(x^2) + eps), out = x rstd w;
// backward with xh = x rstd, g = dout w: dx += rstd (g - xh mean(g xh)), dw += sum_n dout xh.
// Design note: one 256-thread block per row; the row sum is a fixed shared-memory tree (thread
// i sums columns i, i+256, ... serially, then halves 128, 64, ..., 1), so its order depends only
// on C, never on timing. dw is a cross-row reduction: rows are cut into fixed blocks of
// `row_block` rows, each block's column sums go to a partial buffer [nblk, C], and a second
// kernel adds the partials in block order — the CPU reference's blocking (ROW_BLOCK = 64),
// with no float atomics. Results differ from the CPU in the last bits (tree vs serial sums).

#define RMS_THREADS 256

__device__ float rms_block_sum(float v, float* sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = RMS_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

// Grid: N blocks of RMS_THREADS.
extern "C" __global__ void rmsnorm_fwd_f32(float* __restrict__ out, float* __restrict__ rstd,
                                           const float* __restrict__ x, const float* __restrict__ w,
                                           int n, int c, float eps) {
    __shared__ float sh[RMS_THREADS];
    int row = blockIdx.x;
    if (row >= n) return;
    const float* xr = x + (unsigned long long)row * c;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < c; i += RMS_THREADS) ss += xr[i] * xr[i];
    float total = rms_block_sum(ss, sh);
    float s = 1.0f / sqrtf(total * (1.0f / (float)c) + eps);
    if (threadIdx.x == 0) rstd[row] = s;
    float* orow = out + (unsigned long long)row * c;
    for (int i = threadIdx.x; i < c; i += RMS_THREADS) orow[i] = xr[i] * s * w[i];
}

// dx += rstd (dout w - xh mean(dout w xh)). Grid: N blocks of RMS_THREADS.
extern "C" __global__ void rmsnorm_bwd_dx_f32(float* __restrict__ dx, const float* __restrict__ dout,
                                              const float* __restrict__ x, const float* __restrict__ w,
                                              const float* __restrict__ rstd, int n, int c) {
    __shared__ float sh[RMS_THREADS];
    int row = blockIdx.x;
    if (row >= n) return;
    unsigned long long o = (unsigned long long)row * c;
    float s = rstd[row];
    float dot = 0.0f;
    for (int i = threadIdx.x; i < c; i += RMS_THREADS) dot += dout[o + i] * w[i] * x[o + i] * s;
    float mean = rms_block_sum(dot, sh) * (1.0f / (float)c);
    for (int i = threadIdx.x; i < c; i += RMS_THREADS) {
        float xh = x[o + i] * s;
        dx[o + i] += s * (dout[o + i] * w[i] - xh * mean);
    }
}

// part[b, i] = sum over rows r in block b (ascending) of dout[r, i] x[r, i] rstd[r].
// Grid: (ceil(C / blockDim.x), nblk).
extern "C" __global__ void rmsnorm_bwd_dw_partial_f32(float* __restrict__ part,
                                                      const float* __restrict__ dout,
                                                      const float* __restrict__ x,
                                                      const float* __restrict__ rstd, int n, int c,
                                                      int row_block) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int blk = blockIdx.y;
    if (col >= c) return;
    int r0 = blk * row_block;
    int r1 = min(n, r0 + row_block);
    float acc = 0.0f;
    for (int r = r0; r < r1; ++r) {
        unsigned long long o = (unsigned long long)r * c + col;
        acc += dout[o] * (x[o] * rstd[r]);
    }
    part[(unsigned long long)blk * c + col] = acc;
}

// dw[i] += sum over blocks b ascending of part[b, i]. Grid: ceil(C / blockDim.x).
extern "C" __global__ void col_sum_accumulate_f32(float* __restrict__ dw, const float* __restrict__ part,
                                                  int nblk, int c) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= c) return;
    // Same order as the CPU: dw = ((dw + part0) + part1) + ...
    float acc = dw[col];
    for (int b = 0; b < nblk; ++b) acc += part[(unsigned long long)b * c + col];
    dw[col] = acc;
}
