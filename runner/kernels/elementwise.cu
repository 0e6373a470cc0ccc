// elementwise.cu — glassbox CUDA kernels: elementwise adds used by the residual stream and the
// Switch auxiliary-loss gradient.
//
// Design note: one thread per element, grid-stride loops, no reductions, so every result is a
// single IEEE operation and bitwise equal to the CPU reference (`cpu/elementwise.rs`:
// add_assign, add_row_broadcast). Not here: anything that sums across elements (see reduce.cu).
// Launch: 1-D grid of 256-thread blocks over the elements.

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
