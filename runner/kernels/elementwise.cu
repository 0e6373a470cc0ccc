// elementwise.cu — glassbox CUDA kernels: elementwise adds used by the residual stream and the
// Switch auxiliary-loss gradient, and the bf16 copies of matmul operands in bf16 runs.
//
// Design note: one thread per element, grid-stride loops, no reductions, so every result is a
// single IEEE operation and bitwise equal to the CPU reference (`cpu/elementwise.rs`:
// add_assign, add_row_broadcast). The bf16 copy rounds to nearest even by integer arithmetic on
// the f32 bits (no cuda_bf16.h, so NVRTC needs no headers); a NaN stays a (quiet) NaN; its CPU
// twin is `round_to_bf16` of the GPU check. Not here: anything that sums across elements (see
// reduce.cu). Launch: 1-D grid of 256-thread blocks over the elements.

extern "C" __global__ void add_assign_f32(float* __restrict__ a, const float* __restrict__ b,
                                          unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        a[i] += b[i];
    }
}

// buf [rows, e] += row [e] broadcast over rows.
extern "C" __global__ void add_row_broadcast_f32(float* __restrict__ buf,
                                                 const float* __restrict__ row,
                                                 unsigned long long n, int e) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        buf[i] += row[i % e];
    }
}

// out[i] = bf16(in[i]), round to nearest even; bf16 is the high 16 bits of an f32.
extern "C" __global__ void f32_to_bf16(unsigned short* __restrict__ out, const float* __restrict__ in,
                                       unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned int u = __float_as_uint(in[i]);
        unsigned int r;
        if ((u & 0x7fffffffu) > 0x7f800000u) {
            r = (u >> 16) | 0x0040u;  // NaN: keep the sign, force a quiet NaN
        } else {
            r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        }
        out[i] = (unsigned short)r;
    }
}
