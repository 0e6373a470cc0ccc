// loss.cu — glassbox CUDA kernel: fused softmax cross-entropy with z-loss, forward and
// backward in one pass over the logits (llm.c's in-place trick).
//
// Shapes: N rows, V vocab; logits [N, V]; targets [N]; row_ce, row_z [N] (f64).
// Math (as cpu/loss.rs): lse = logsumexp(x), ce = lse - x[target], z = lse^2; with the gradient
// requested the row is overwritten by g (p + 2 z_coef lse p) - g onehot(target), p = softmax(x).
// Design note: one 256-thread block per row; max and sum are fixed shared-memory trees. The
// per-row losses go to f64 buffers and are summed over rows by reduce.cu's fixed-order tree, so
// the scalar loss never depends on timing. The host reads back only those two sums.

#define CE_THREADS 256

__device__ float ce_block_max(float v, float* sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = CE_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

__device__ float ce_block_sum(float v, float* sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = CE_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

// Grid: N blocks of CE_THREADS.
extern "C" __global__ void cross_entropy_f32(float* __restrict__ logits,
                                             const unsigned int* __restrict__ targets,
                                             double* __restrict__ row_ce, double* __restrict__ row_z,
                                             int n, int v, float z_coef, float grad_scale,
                                             int want_grad) {
    __shared__ float sh[CE_THREADS];
    int r = blockIdx.x;
    if (r >= n) return;
    float* x = logits + (unsigned long long)r * v;
    unsigned int tgt = targets[r];
    // Read before any thread overwrites the row (the reductions below synchronise).
    float xt = x[tgt];
    float mx = x[0];
    for (int i = threadIdx.x; i < v; i += CE_THREADS) mx = fmaxf(mx, x[i]);
    mx = ce_block_max(mx, sh);
    float sum = 0.0f;
    for (int i = threadIdx.x; i < v; i += CE_THREADS) sum += expf(x[i] - mx);
    sum = ce_block_sum(sum, sh);
    float lse = mx + logf(sum);
    if (threadIdx.x == 0) {
        row_ce[r] = (double)(lse - xt);
        row_z[r] = (double)lse * (double)lse;
    }
    if (!want_grad) return;
    float zc = (float)(2.0 * (double)z_coef * (double)lse);
    for (int i = threadIdx.x; i < v; i += CE_THREADS) {
        float p = expf(x[i] - lse);
        x[i] = grad_scale * (p + zc * p);
    }
    __syncthreads();
    if (threadIdx.x == 0) x[tgt] -= grad_scale;
}
