// combine.cu — glassbox CUDA kernels: the MoE combine (gather each token's K expert outputs
// and sum them with the routing weights), forward and backward.
//
// Shapes: N tokens, K choices, S slots, C channels; y, dy [S, C]; out, dout [N, C];
// weights, dweights [N*K]; token_slot [N*K] (0xffffffff = dropped); slot_assignment [S].
// Design note: the forward is a *gather*, not a scatter: thread (n, c) reads its K slots and
// adds them in the fixed order j = 0..K — no float atomicAdd anywhere, so the sum is the same
// every run and bitwise the CPU reference's order. The weight gradient is a dot product over C
// per (n, j): one warp per assignment, lanes take columns lane, lane+32, ..., then a fixed
// xor-shuffle tree (16, 8, 4, 2, 1) combines them.

#define DROPPED_SLOT 0xffffffffu

// out[n, c] (+)= sum_j w[n, j] y[token_slot[n, j], c].
extern "C" __global__ void combine_fwd_f32(float* __restrict__ out, const float* __restrict__ y,
                                           const float* __restrict__ weights,
                                           const unsigned int* __restrict__ token_slot, int n, int k,
                                           int c, int accumulate) {
    unsigned long long total = (unsigned long long)n * c;
    for (unsigned long long idx = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         idx < total; idx += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned long long t = idx / c;
        int col = idx % c;
        float acc = accumulate ? out[idx] : 0.0f;
        for (int j = 0; j < k; ++j) {
            unsigned int slot = token_slot[t * k + j];
            if (slot == DROPPED_SLOT) continue;
            acc += weights[t * k + j] * y[(unsigned long long)slot * c + col];
        }
        out[idx] = acc;
    }
}

// dy[s, c] = w[a] dout[a / K, c] with a = slot_assignment[s] (overwrites).
extern "C" __global__ void combine_bwd_dy_f32(float* __restrict__ dy, const float* __restrict__ dout,
                                              const float* __restrict__ weights,
                                              const unsigned int* __restrict__ slot_assignment,
                                              unsigned long long slots, int k, int c) {
    unsigned long long total = slots * c;
    for (unsigned long long idx = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         idx < total; idx += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned long long s = idx / c;
        int col = idx % c;
        unsigned int a = slot_assignment[s];
        dy[idx] = weights[a] * dout[(unsigned long long)(a / k) * c + col];
    }
}

// dweights[a] = dout[a / K, :] . y[token_slot[a], :] (0 when dropped). One warp per
// assignment: launch with blockDim.x = 32 * warps_per_block, grid over ceil(A / warps).
extern "C" __global__ void combine_bwd_dw_f32(float* __restrict__ dweights,
                                              const float* __restrict__ dout,
                                              const float* __restrict__ y,
                                              const unsigned int* __restrict__ token_slot,
                                              unsigned long long assignments, int k, int c) {
    unsigned long long a = (blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (a >= assignments) return;  // whole warps exit together: a is uniform per warp
    unsigned int slot = token_slot[a];
    float acc = 0.0f;
    if (slot != DROPPED_SLOT) {
        const float* g = dout + (a / k) * c;
        const float* yr = y + (unsigned long long)slot * c;
        for (int i = lane; i < c; i += 32) acc += g[i] * yr[i];
    }
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) dweights[a] = acc;
}
