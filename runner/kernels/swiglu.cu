// swiglu.cu — glassbox CUDA kernels: the SwiGLU activation of the experts, forward and backward.
//
// Shapes: R rows (expert slots or tokens for shared experts), F expert width; h, dh [R, 2F]
// (gate then up), a, da [R, F].
// Math (as cpu/swiglu.rs): a = silu(g) u with silu(g) = g sigmoid(g);
// dg = da u sg (1 + g (1 - sg)), du = da g sg with sg = sigmoid(g).
// Design note: one thread per (r, i); no reductions.

extern "C" __global__ void swiglu_fwd_f32(float* __restrict__ out, const float* __restrict__ h,
                                          unsigned long long rows, int f) {
    unsigned long long total = rows * f;
    for (unsigned long long idx = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         idx < total; idx += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned long long r = idx / f;
        int i = idx % f;
        float g = h[r * 2 * f + i], u = h[r * 2 * f + f + i];
        float sg = 1.0f / (1.0f + expf(-g));
        out[idx] = g * sg * u;
    }
}

// Overwrites dh.
extern "C" __global__ void swiglu_bwd_f32(float* __restrict__ dh, const float* __restrict__ dout,
                                          const float* __restrict__ h, unsigned long long rows, int f) {
    unsigned long long total = rows * f;
    for (unsigned long long idx = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         idx < total; idx += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned long long r = idx / f;
        int i = idx % f;
        float g = h[r * 2 * f + i], u = h[r * 2 * f + f + i];
        float sg = 1.0f / (1.0f + expf(-g));
        float d = dout[idx];
        dh[r * 2 * f + i] = d * u * sg * (1.0f + g * (1.0f - sg));
        dh[r * 2 * f + f + i] = d * g * sg;
    }
}
