// topk.cu — glassbox CUDA kernel: top-k expert choice on biased scores, with the renormalised
// combine weights from the unbiased scores.
//
// Shapes: N tokens, E experts, K choices; scores [N, E]; bias [E] (the balancing state, kept
// in f64 on the host and converted to f32 as the CPU reference does); token_expert, weights
// [N*K].
// Design note: one thread per token. Choice j is the largest biased score strictly below
// choice j-1 in the order "higher value first, then lower expert index" — the same result as
// the CPU's greedy scan with a `taken` mask (ties go to the lower index) without a per-thread
// array sized by E. K E comparisons per token, tiny next to the matmuls. Weights:
// w_j = s_j / max(sum_j s_j, 1e-30) * scale, summed in order j = 0..K (bitwise the CPU's).

extern "C" __global__ void topk_bias_f32(unsigned int* __restrict__ token_expert,
                                         float* __restrict__ weights,
                                         const float* __restrict__ scores,
                                         const float* __restrict__ bias, int n, int e, int k,
                                         float scale) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    const float* s = scores + (unsigned long long)t * e;
    unsigned int* te = token_expert + (unsigned long long)t * k;
    float* w = weights + (unsigned long long)t * k;
    float prev_v = 0.0f;
    int prev_i = -1;
    float z = 0.0f;
    for (int j = 0; j < k; ++j) {
        int best = -1;
        float best_v = 0.0f;
        for (int i = 0; i < e; ++i) {
            float v = s[i] + bias[i];
            // Only candidates ranked after the previous choice.
            if (prev_i >= 0 && !(v < prev_v || (v == prev_v && i > prev_i))) continue;
            if (best < 0 || v > best_v) {
                best = i;
                best_v = v;
            }
        }
        // Only NaN scores leave no candidate; any valid index keeps memory safe (the trainer
        // reports the run as diverged).
        if (best < 0) best = j;
        te[j] = (unsigned int)best;
        w[j] = s[best];
        z += s[best];
        prev_v = best_v;
        prev_i = best;
    }
    z = fmaxf(z, 1e-30f);
    for (int j = 0; j < k; ++j) w[j] = w[j] / z * scale;
}
