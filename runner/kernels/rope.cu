// rope.cu — glassbox CUDA kernels: QKV split with rotary position embedding (RoPE), and the
// head merge, forward and backward.
//
// Shapes: B batch, T positions, H heads, D head size, C = H D. qkv [B, T, 3C] (q at columns
// 0..C, k at C..2C, v at 2C..3C, head h at h*D..(h+1)*D within each); q, k, v [B, H, T, D]
// (head-major, so attention's batched GEMMs see one contiguous [T, D] block per (b, h));
// cos, sin [T, D/2]. RoPE rotates pairs (i, i + D/2) (GPT-NeoX layout):
// y1 = x1 cos - x2 sin, y2 = x1 sin + x2 cos; the backward is the inverse rotation.
// Design note: pure permutations and 2x2 rotations, one thread per (b, h, t, i < D/2) pair;
// no reductions, so results equal the CPU reference (cpu/rope.rs) up to FMA contraction.

// Grid-stride over B*H*T*(D/2) pairs.
extern "C" __global__ void qkv_rope_fwd_f32(float* __restrict__ q, float* __restrict__ k,
                                            float* __restrict__ v, const float* __restrict__ qkv,
                                            const float* __restrict__ cosv,
                                            const float* __restrict__ sinv, int b, int t, int h,
                                            int d) {
    int half = d / 2, c = h * d;
    unsigned long long total = (unsigned long long)b * h * t * half;
    for (unsigned long long idx = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         idx < total; idx += (unsigned long long)gridDim.x * blockDim.x) {
        int i = idx % half;
        unsigned long long rest = idx / half;
        int tt = rest % t;
        rest /= t;
        int hh = rest % h;
        int bb = rest / h;
        const float* row = qkv + ((unsigned long long)bb * t + tt) * 3 * c;
        float cs = cosv[tt * half + i], sn = sinv[tt * half + i];
        unsigned long long o = (((unsigned long long)bb * h + hh) * t + tt) * d;
        float q1 = row[hh * d + i], q2 = row[hh * d + half + i];
        float k1 = row[c + hh * d + i], k2 = row[c + hh * d + half + i];
        q[o + i] = q1 * cs - q2 * sn;
        q[o + half + i] = q1 * sn + q2 * cs;
        k[o + i] = k1 * cs - k2 * sn;
        k[o + half + i] = k1 * sn + k2 * cs;
        v[o + i] = row[2 * c + hh * d + i];
        v[o + half + i] = row[2 * c + hh * d + half + i];
    }
}

// Overwrites dqkv [B, T, 3C]. Grid-stride over B*H*T*(D/2) pairs.
extern "C" __global__ void qkv_rope_bwd_f32(float* __restrict__ dqkv, const float* __restrict__ dq,
                                            const float* __restrict__ dk, const float* __restrict__ dv,
                                            const float* __restrict__ cosv,
                                            const float* __restrict__ sinv, int b, int t, int h,
                                            int d) {
    int half = d / 2, c = h * d;
    unsigned long long total = (unsigned long long)b * h * t * half;
    for (unsigned long long idx = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         idx < total; idx += (unsigned long long)gridDim.x * blockDim.x) {
        int i = idx % half;
        unsigned long long rest = idx / half;
        int tt = rest % t;
        rest /= t;
        int hh = rest % h;
        int bb = rest / h;
        float* row = dqkv + ((unsigned long long)bb * t + tt) * 3 * c;
        float cs = cosv[tt * half + i], sn = sinv[tt * half + i];
        unsigned long long o = (((unsigned long long)bb * h + hh) * t + tt) * d;
        float gq1 = dq[o + i], gq2 = dq[o + half + i];
        float gk1 = dk[o + i], gk2 = dk[o + half + i];
        row[hh * d + i] = gq1 * cs + gq2 * sn;
        row[hh * d + half + i] = -gq1 * sn + gq2 * cs;
        row[c + hh * d + i] = gk1 * cs + gk2 * sn;
        row[c + hh * d + half + i] = -gk1 * sn + gk2 * cs;
        row[2 * c + hh * d + i] = dv[o + i];
        row[2 * c + hh * d + half + i] = dv[o + half + i];
    }
}

// out [B, T, C] from y [B, H, T, D]; one thread per output element.
extern "C" __global__ void merge_heads_fwd_f32(float* __restrict__ out, const float* __restrict__ y,
                                               int b, int t, int h, int d) {
    int c = h * d;
    unsigned long long total = (unsigned long long)b * t * c;
    for (unsigned long long idx = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         idx < total; idx += (unsigned long long)gridDim.x * blockDim.x) {
        int col = idx % c;
        unsigned long long bt = idx / c;
        int tt = bt % t;
        int bb = bt / t;
        int hh = col / d, i = col % d;
        out[idx] = y[(((unsigned long long)bb * h + hh) * t + tt) * d + i];
    }
}

// dy [B, H, T, D] from dout [B, T, C]; one thread per output element.
extern "C" __global__ void merge_heads_bwd_f32(float* __restrict__ dy, const float* __restrict__ dout,
                                               int b, int t, int h, int d) {
    int c = h * d;
    unsigned long long total = (unsigned long long)b * h * t * d;
    for (unsigned long long idx = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         idx < total; idx += (unsigned long long)gridDim.x * blockDim.x) {
        int i = idx % d;
        unsigned long long rest = idx / d;
        int tt = rest % t;
        rest /= t;
        int hh = rest % h;
        int bb = rest / h;
        dy[idx] = dout[((unsigned long long)bb * t + tt) * c + hh * d + i];
    }
}
