// permute.cu — glassbox CUDA kernels: the stable sort of routing assignments by expert (with
// an optional capacity), and dispatch (gather tokens into expert order) forward and backward.
//
// Shapes: N tokens, K choices, A = N*K assignments (a = n*K + j), E experts, S kept slots,
// C channels. token_expert, token_slot [A]; slot_assignment [S]; x, dx [N, C]; xs, dxs [S, C].
// Design note: a deterministic counting sort in three launches, no float anything:
//   1. expert_count_chunks: assignments are cut into fixed chunks of `chunk` (1024); one block
//      per chunk counts its experts (integer atomics on shared memory: the *count* is exact
//      whatever the order) into counts[chunk, E];
//   2. expert_scan: one thread per expert adds the chunk counts in chunk order (the start of
//      each expert's run in each chunk), the load (before capacity) and the kept rows
//      min(load, capacity); then thread 0 lays the experts out in order (offsets);
//   3. expert_scatter: one block per chunk, one thread walking its assignments in ascending
//      order, gives each its rank within its expert: kept if rank < rows[e] (slot
//      offset[e] + rank), else DROPPED (0xffffffff).
// The result is exactly the CPU reference's stable sort (cpu/permute.rs sort_by_expert). The
// host reads back only `load` and `rows` (the grouped matmuls' shapes).
// Dispatch backward sums each token's K slots in order j = 0..K (no scatter, no atomics).

#define DROPPED_SLOT 0xffffffffu

// Grid: nchunks blocks; dynamic shared memory E * 4 bytes.
extern "C" __global__ void expert_count_chunks(unsigned int* __restrict__ counts,
                                               const unsigned int* __restrict__ token_expert,
                                               unsigned int total, int e, unsigned int chunk) {
    extern __shared__ unsigned int local_counts[];
    for (int i = threadIdx.x; i < e; i += blockDim.x) local_counts[i] = 0;
    __syncthreads();
    unsigned int a0 = blockIdx.x * chunk;
    unsigned int a1 = min(total, a0 + chunk);
    for (unsigned int a = a0 + threadIdx.x; a < a1; a += blockDim.x)
        atomicAdd(&local_counts[token_expert[a]], 1u);
    __syncthreads();
    for (int i = threadIdx.x; i < e; i += blockDim.x)
        counts[(unsigned long long)blockIdx.x * e + i] = local_counts[i];
}

// One block. chunk_start[c, x] = sum of counts[c' < c, x]; load[x]; rows[x] = min(load, cap);
// offset[x] = sum of rows[x' < x]. capacity = 0xffffffff means dropless.
extern "C" __global__ void expert_scan(unsigned int* __restrict__ chunk_start,
                                       unsigned int* __restrict__ load, unsigned int* __restrict__ rows,
                                       unsigned int* __restrict__ offset,
                                       const unsigned int* __restrict__ counts, int nchunks, int e,
                                       unsigned int capacity) {
    for (int x = threadIdx.x; x < e; x += blockDim.x) {
        unsigned int run = 0;
        for (int c = 0; c < nchunks; ++c) {
            chunk_start[(unsigned long long)c * e + x] = run;
            run += counts[(unsigned long long)c * e + x];
        }
        load[x] = run;
        rows[x] = min(run, capacity);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned int o = 0;
        for (int x = 0; x < e; ++x) {
            offset[x] = o;
            o += rows[x];
        }
    }
}

// Grid: nchunks blocks of 1 thread (the walk is serial so ranks follow assignment order);
// dynamic shared memory E * 4 bytes.
extern "C" __global__ void expert_scatter(unsigned int* __restrict__ token_slot,
                                          unsigned int* __restrict__ slot_assignment,
                                          const unsigned int* __restrict__ token_expert,
                                          const unsigned int* __restrict__ chunk_start,
                                          const unsigned int* __restrict__ rows,
                                          const unsigned int* __restrict__ offset, unsigned int total,
                                          int e, unsigned int chunk) {
    extern __shared__ unsigned int rank[];
    if (threadIdx.x != 0) return;
    for (int x = 0; x < e; ++x) rank[x] = chunk_start[(unsigned long long)blockIdx.x * e + x];
    unsigned int a0 = blockIdx.x * chunk;
    unsigned int a1 = min(total, a0 + chunk);
    for (unsigned int a = a0; a < a1; ++a) {
        unsigned int x = token_expert[a];
        unsigned int r = rank[x]++;
        if (r < rows[x]) {
            unsigned int slot = offset[x] + r;
            slot_assignment[slot] = a;
            token_slot[a] = slot;
        } else {
            token_slot[a] = DROPPED_SLOT;
        }
    }
}

// xs[s, :] = x[slot_assignment[s] / K, :]; one thread per element of xs.
extern "C" __global__ void dispatch_fwd_f32(float* __restrict__ xs, const float* __restrict__ x,
                                            const unsigned int* __restrict__ slot_assignment,
                                            unsigned long long slots, int k, int c) {
    unsigned long long total = slots * c;
    for (unsigned long long idx = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         idx < total; idx += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned long long s = idx / c;
        int col = idx % c;
        unsigned long long t = slot_assignment[s] / k;
        xs[idx] = x[t * c + col];
    }
}

// dx[n, :] += sum_{j = 0..K} dxs[token_slot[n*K + j], :], j ascending, dropped skipped.
extern "C" __global__ void dispatch_bwd_f32(float* __restrict__ dx, const float* __restrict__ dxs,
                                            const unsigned int* __restrict__ token_slot, int n, int k,
                                            int c) {
    unsigned long long total = (unsigned long long)n * c;
    for (unsigned long long idx = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         idx < total; idx += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned long long t = idx / c;
        int col = idx % c;
        float acc = dx[idx];
        for (int j = 0; j < k; ++j) {
            unsigned int slot = token_slot[t * k + j];
            if (slot == DROPPED_SLOT) continue;
            acc += dxs[(unsigned long long)slot * c + col];
        }
        dx[idx] = acc;
    }
}
