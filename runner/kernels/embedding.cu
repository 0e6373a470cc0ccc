// embedding.cu — glassbox CUDA kernels: token embedding forward and backward.
//
// Shapes: N tokens, C channels, V vocab. wte [V, C], out/dout [N, C], tokens [N] (checked < V
// by the data pipeline on the host).
// Design note: the backward is a scatter-add (several tokens may share a vocab row). Instead of
// float atomics (banned: their order varies run to run) each thread owns one element
// dwte[v, c] and walks the tokens n = 0..N in ascending order, adding dout[n, c] where
// tokens[n] == v. That is O(V N) token reads, cheap for the bytes tokenizer (V = 256) and the
// same summation order as the CPU reference, so the result is bitwise equal to it.
// Not here: the lm_head (a cuBLAS matmul, untied from wte).

// Forward: out[n, c] = wte[tokens[n], c]; one thread per output element.
extern "C" __global__ void embedding_fwd_f32(float* __restrict__ out, const float* __restrict__ wte,
                                             const unsigned int* __restrict__ tokens, int n, int c) {
    unsigned long long total = (unsigned long long)n * c;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         i < total; i += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned long long row = i / c, col = i % c;
        out[i] = wte[(unsigned long long)tokens[row] * c + col];
    }
}

// Backward: dwte[v, c] += sum over n ascending with tokens[n] == v of dout[n, c].
// Grid: (ceil(C / blockDim.x), V); thread (v, c).
extern "C" __global__ void embedding_bwd_f32(float* __restrict__ dwte, const float* __restrict__ dout,
                                             const unsigned int* __restrict__ tokens, int n, int c) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int v = blockIdx.y;
    if (col >= c) return;
    float acc = dwte[(unsigned long long)v * c + col];
    for (int t = 0; t < n; ++t) {
        if (tokens[t] == v) acc += dout[(unsigned long long)t * c + col];
    }
    dwte[(unsigned long long)v * c + col] = acc;
}
