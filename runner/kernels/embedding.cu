// embedding.cu — glassbox CUDA kernels: token embedding forward and backward.
//
// Shapes: N tokens, C channels, V vocab. wte [V, C], out/dout [N, C], tokens [N] (checked < V
// by the data pipeline on the host).
// Design note: the backward is a scatter-add (several tokens may share a vocab row). Float
// atomics are banned (their order varies run to run), and one thread per (v, c) walking all N
// tokens is O(V N) work with a vocab-sized grid (it cannot launch above 65,535 ids). Instead:
//   1. sort the token positions by id with a stable LSD radix sort, 8 bits of the id per pass
//      (ceil(log2 V / 8) passes; one for the bytes tokenizer), each pass a counting sort in
//      three launches as in permute.cu: per-chunk digit counts (integer counting atomics in
//      shared memory: exact whatever the order), a scan in chunk order, and a serial scatter
//      per chunk that keeps positions in ascending order within a digit;
//   2. one block per sorted position: the block whose position starts a run of equal ids adds
//      that run's dout rows, in ascending position order, into dwte[id] (threads over C); the
//      other blocks return at once. Grid N, work O(N C + passes N), no vocab-sized dimension.
// The summation order per dwte element is tokens ascending, starting from dwte's old value:
// the CPU reference's order, so the result is bitwise equal to it.
// Not here: the lm_head (a cuBLAS matmul, untied from wte).

#define EMB_BINS 256

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

// perm[i] = i (the sort's starting order). One thread per element.
extern "C" __global__ void embedding_sort_init(unsigned int* __restrict__ perm, unsigned int n) {
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        perm[i] = i;
}

// counts[chunk, b] = how many of the chunk's positions have digit b of their token id.
// Grid: nchunks blocks; counts in shared memory.
extern "C" __global__ void embedding_digit_count(unsigned int* __restrict__ counts,
                                                 const unsigned int* __restrict__ tokens,
                                                 const unsigned int* __restrict__ perm, unsigned int n,
                                                 int shift, unsigned int chunk) {
    __shared__ unsigned int local_counts[EMB_BINS];
    for (int i = threadIdx.x; i < EMB_BINS; i += blockDim.x) local_counts[i] = 0;
    __syncthreads();
    unsigned int a0 = blockIdx.x * chunk;
    unsigned int a1 = min(n, a0 + chunk);
    for (unsigned int a = a0 + threadIdx.x; a < a1; a += blockDim.x)
        atomicAdd(&local_counts[(tokens[perm[a]] >> shift) & (EMB_BINS - 1)], 1u);
    __syncthreads();
    for (int i = threadIdx.x; i < EMB_BINS; i += blockDim.x)
        counts[(unsigned long long)blockIdx.x * EMB_BINS + i] = local_counts[i];
}

// chunk_start[c, b] = offset of digit b's run + positions with digit b in chunks before c.
// One block of EMB_BINS threads: thread b scans its digit over the chunks in chunk order, then
// thread 0 lays the digits out in order.
extern "C" __global__ void embedding_digit_scan(unsigned int* __restrict__ chunk_start,
                                                const unsigned int* __restrict__ counts, int nchunks) {
    __shared__ unsigned int total[EMB_BINS];
    __shared__ unsigned int offset[EMB_BINS];
    int b = threadIdx.x;
    unsigned int run = 0;
    for (int c = 0; c < nchunks; ++c) run += counts[(unsigned long long)c * EMB_BINS + b];
    total[b] = run;
    __syncthreads();
    if (b == 0) {
        unsigned int o = 0;
        for (int x = 0; x < EMB_BINS; ++x) {
            offset[x] = o;
            o += total[x];
        }
    }
    __syncthreads();
    unsigned int at = offset[b];
    for (int c = 0; c < nchunks; ++c) {
        chunk_start[(unsigned long long)c * EMB_BINS + b] = at;
        at += counts[(unsigned long long)c * EMB_BINS + b];
    }
}

// perm_out[rank] = perm_in[a], stable by digit. Grid: nchunks blocks; one thread walks its chunk
// in order so equal digits keep their order.
extern "C" __global__ void embedding_digit_scatter(unsigned int* __restrict__ perm_out,
                                                   const unsigned int* __restrict__ perm_in,
                                                   const unsigned int* __restrict__ tokens,
                                                   const unsigned int* __restrict__ chunk_start,
                                                   unsigned int n, int shift, unsigned int chunk) {
    __shared__ unsigned int next[EMB_BINS];
    for (int i = threadIdx.x; i < EMB_BINS; i += blockDim.x)
        next[i] = chunk_start[(unsigned long long)blockIdx.x * EMB_BINS + i];
    __syncthreads();
    if (threadIdx.x != 0) return;
    unsigned int a0 = blockIdx.x * chunk;
    unsigned int a1 = min(n, a0 + chunk);
    for (unsigned int a = a0; a < a1; ++a) {
        unsigned int p = perm_in[a];
        unsigned int digit = (tokens[p] >> shift) & (EMB_BINS - 1);
        perm_out[next[digit]++] = p;
    }
}

// Backward: for each run of equal ids in the sorted positions, dwte[id, :] += the run's dout
// rows in ascending position order. Grid: N blocks (block s handles sorted position s if it
// starts a run); threads stride over C.
extern "C" __global__ void embedding_bwd_runs(float* __restrict__ dwte, const float* __restrict__ dout,
                                              const unsigned int* __restrict__ tokens,
                                              const unsigned int* __restrict__ sorted, unsigned int n,
                                              int c) {
    unsigned int s = blockIdx.x;
    if (s >= n) return;
    unsigned int id = tokens[sorted[s]];
    if (s > 0 && tokens[sorted[s - 1]] == id) return;
    unsigned int end = s + 1;
    while (end < n && tokens[sorted[end]] == id) ++end;
    for (int col = threadIdx.x; col < c; col += blockDim.x) {
        float acc = dwte[(unsigned long long)id * c + col];
        for (unsigned int r = s; r < end; ++r)
            acc += dout[(unsigned long long)sorted[r] * c + col];
        dwte[(unsigned long long)id * c + col] = acc;
    }
}
