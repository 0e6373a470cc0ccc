// router.cu — glassbox CUDA kernels: MoE router scores (softmax or sigmoid), the router z-loss,
// and the backward of the renormalised combine weights.
//
// Shapes: N tokens, E experts (small: tens to hundreds), K choices; logits, scores,
// dscores, dlogits [N, E]; token_expert [N*K]; dweights [N*K]; lse [N].
// Design note: E is small, so each thread owns one token row and loops over its E experts
// serially in the CPU reference's order (cpu/router.rs) — no cross-thread reductions, bitwise
// equal to the CPU up to the device's expf/logf. The z-loss's scalar sum over tokens is done
// by reduce.cu (fixed tree), not here.
// Router statistics (the model's per-layer P_i and routing entropy) are reduced on the device
// so a step copies back E + 1 doubles instead of the N x E scores: chunks of 256 rows, one
// block each; in a block the per-row entropies meet in a fixed shared-memory tree and each
// expert's column is summed by one thread over the chunk's rows in order; then one block adds
// the chunks' partials in chunk order. All in double, as the CPU reference (cpu/router.rs
// router_stats) computes them.

// scores = softmax(logits) per row. One thread per row.
extern "C" __global__ void router_softmax_fwd_f32(float* __restrict__ scores,
                                                  const float* __restrict__ logits, int n, int e) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    const float* l = logits + (unsigned long long)r * e;
    float* s = scores + (unsigned long long)r * e;
    float mx = l[0];
    for (int i = 1; i < e; ++i) mx = fmaxf(mx, l[i]);
    float sum = 0.0f;
    for (int i = 0; i < e; ++i) {
        s[i] = expf(l[i] - mx);
        sum += s[i];
    }
    float inv = 1.0f / sum;
    for (int i = 0; i < e; ++i) s[i] *= inv;
}

// scores = sigmoid(logits), elementwise.
extern "C" __global__ void router_sigmoid_fwd_f32(float* __restrict__ scores,
                                                  const float* __restrict__ logits,
                                                  unsigned long long total) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         i < total; i += (unsigned long long)gridDim.x * blockDim.x) {
        scores[i] = 1.0f / (1.0f + expf(-logits[i]));
    }
}

// Softmax backward (overwrites): dl_i = s_i (ds_i - sum_j ds_j s_j). One thread per row.
extern "C" __global__ void router_softmax_bwd_f32(float* __restrict__ dlogits,
                                                  const float* __restrict__ dscores,
                                                  const float* __restrict__ scores, int n, int e) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    unsigned long long o = (unsigned long long)r * e;
    float dot = 0.0f;
    for (int i = 0; i < e; ++i) dot += dscores[o + i] * scores[o + i];
    for (int i = 0; i < e; ++i) dlogits[o + i] = scores[o + i] * (dscores[o + i] - dot);
}

// Sigmoid backward (overwrites): dl = ds s (1 - s), elementwise.
extern "C" __global__ void router_sigmoid_bwd_f32(float* __restrict__ dlogits,
                                                  const float* __restrict__ dscores,
                                                  const float* __restrict__ scores,
                                                  unsigned long long total) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         i < total; i += (unsigned long long)gridDim.x * blockDim.x) {
        dlogits[i] = dscores[i] * scores[i] * (1.0f - scores[i]);
    }
}

// lse[n] = logsumexp(logits[n, :]). One thread per row.
extern "C" __global__ void router_lse_f32(float* __restrict__ lse, const float* __restrict__ logits,
                                          int n, int e) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    const float* l = logits + (unsigned long long)r * e;
    float mx = l[0];
    for (int i = 1; i < e; ++i) mx = fmaxf(mx, l[i]);
    float sum = 0.0f;
    for (int i = 0; i < e; ++i) sum += expf(l[i] - mx);
    lse[r] = mx + logf(sum);
}

// dlogits[n, i] += coef * 2 lse[n] * softmax(logits[n])_i. One thread per row.
extern "C" __global__ void router_z_grad_f32(float* __restrict__ dlogits,
                                             const float* __restrict__ logits,
                                             const float* __restrict__ lse, int n, int e, float coef) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    unsigned long long o = (unsigned long long)r * e;
    float z = lse[r];
    float g = 2.0f * coef * z;
    for (int i = 0; i < e; ++i) dlogits[o + i] += g * expf(logits[o + i] - z);
}

// Backward of w_j = scale s_j / Z, Z = sum_j s_j over the K chosen experts:
// ds_i += scale (dw_i / Z - sum_j dw_j s_j / Z^2). One thread per token.
extern "C" __global__ void route_weights_bwd_f32(float* __restrict__ dscores,
                                                 const float* __restrict__ dweights,
                                                 const float* __restrict__ scores,
                                                 const unsigned int* __restrict__ token_expert,
                                                 int n, int e, int k, float scale) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    const float* s = scores + (unsigned long long)t * e;
    float* ds = dscores + (unsigned long long)t * e;
    const unsigned int* te = token_expert + (unsigned long long)t * k;
    const float* dw = dweights + (unsigned long long)t * k;
    float z = 0.0f, dot = 0.0f;
    for (int j = 0; j < k; ++j) {
        float sj = s[te[j]];
        z += sj;
        dot += dw[j] * sj;
    }
    z = fmaxf(z, 1e-30f);
    for (int j = 0; j < k; ++j) ds[te[j]] += scale * (dw[j] / z - dot / (z * z));
}

#define RS_ROWS 256

// part[b, 0..E) = sum over chunk b's rows of scores[r, i]; part[b, E] = sum over them of the
// entropy of the normalised row. Grid: ceil(N / RS_ROWS) blocks of RS_ROWS threads.
extern "C" __global__ void router_stats_partial(double* __restrict__ part, const float* __restrict__ scores,
                                                int n, int e) {
    __shared__ double ent[RS_ROWS];
    const int r0 = blockIdx.x * RS_ROWS;
    const int r = r0 + threadIdx.x;
    double h = 0.0;
    if (r < n) {
        const float* s = scores + (unsigned long long)r * e;
        double z = 0.0;
        for (int i = 0; i < e; ++i) z += (double)s[i];
        z = fmax(z, 1e-30);
        for (int i = 0; i < e; ++i) {
            double p = (double)s[i] / z;
            if (p > 0.0) h -= p * log(p);
        }
    }
    ent[threadIdx.x] = h;
    __syncthreads();
    for (int w = RS_ROWS / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) ent[threadIdx.x] += ent[threadIdx.x + w];
        __syncthreads();
    }
    double* out = part + (unsigned long long)blockIdx.x * (e + 1);
    if (threadIdx.x == 0) out[e] = ent[0];
    const int r1 = min(n, r0 + RS_ROWS);
    for (int i = threadIdx.x; i < e; i += blockDim.x) {
        double acc = 0.0;
        for (int rr = r0; rr < r1; ++rr) acc += (double)scores[(unsigned long long)rr * e + i];
        out[i] = acc;
    }
}

// out[i] = sum over chunks b in order of part[b, i], i = 0..=E. One block.
extern "C" __global__ void router_stats_finish(double* __restrict__ out, const double* __restrict__ part,
                                               int nchunks, int e) {
    for (int i = threadIdx.x; i <= e; i += blockDim.x) {
        double acc = 0.0;
        for (int b = 0; b < nchunks; ++b) acc += part[(unsigned long long)b * (e + 1) + i];
        out[i] = acc;
    }
}
