// reduce.cu — glassbox CUDA kernels: deterministic sums — the squared norm of a buffer (grad
// and parameter norms, clipping) and the sum of per-row f64 values (losses).
//
// Design note: the CPU reference sums x^2 in f64 over fixed blocks of NORM_BLOCK = 4096
// elements and adds the block sums in order. Here each 256-thread block owns one such
// 4096-element block (16 elements per thread, strided), accumulates in f64 and combines its
// threads with a fixed shared-memory tree; then one 1024-thread block sums the block partials
// (thread i takes partials i, i+1024, ... in order, then a fixed tree). Every order is a
// function of the length only, so the result is bitwise the same on every run (not bitwise
// the CPU's: the trees differ from its serial sums, within f64 rounding). No atomics.

#define RED_THREADS 256
#define FINAL_THREADS 1024

// partials[b] = sum over x[b*block_elems .. (b+1)*block_elems] of x^2, in f64.
// Grid: ceil(n / block_elems) blocks of RED_THREADS.
extern "C" __global__ void sum_squares_partial_f32(double* __restrict__ partials,
                                                   const float* __restrict__ x,
                                                   unsigned long long n, int block_elems) {
    __shared__ double sh[RED_THREADS];
    unsigned long long b0 = (unsigned long long)blockIdx.x * block_elems;
    unsigned long long b1 = b0 + block_elems < n ? b0 + block_elems : n;
    double acc = 0.0;
    for (unsigned long long i = b0 + threadIdx.x; i < b1; i += RED_THREADS) {
        double v = (double)x[i];
        acc += v * v;
    }
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int s = RED_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) partials[blockIdx.x] = sh[0];
}

// out[slot] = sum of values[0..n] in a fixed order. Grid: 1 block of FINAL_THREADS.
extern "C" __global__ void sum_f64(double* __restrict__ out, int slot,
                                   const double* __restrict__ values, unsigned long long n) {
    __shared__ double sh[FINAL_THREADS];
    double acc = 0.0;
    for (unsigned long long i = threadIdx.x; i < n; i += FINAL_THREADS) acc += values[i];
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int s = FINAL_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[slot] = sh[0];
}

// values[i] = (double)x[i]^2, for sums of squares of per-row f32 values (router z-loss).
extern "C" __global__ void square_to_f64(double* __restrict__ values, const float* __restrict__ x,
                                         unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        double v = (double)x[i];
        values[i] = v * v;
    }
}
