// adamw.cu — glassbox CUDA kernel: one AdamW update, elementwise.
//
// Math (as cpu/adamw.rs): g' = grad_scale g; m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2;
// p -= lr (m bc1 / (sqrt(v bc2) + eps) + wd p), with the bias corrections
// bc1 = 1/(1-b1^t), bc2 = 1/(1-b2^t) computed on the host in f64 and passed as f32 (as the CPU
// reference converts them). Design note: one thread per element, f32 master weights and
// moments; no reductions (the global norm for clipping comes from reduce.cu beforehand).

extern "C" __global__ void adamw_f32(float* __restrict__ p, const float* __restrict__ g,
                                     float* __restrict__ m, float* __restrict__ v,
                                     unsigned long long n, float lr, float b1, float b2, float eps,
                                     float wd, float grad_scale, float bc1, float bc2) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        float gi = g[i] * grad_scale;
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float mh = mi * bc1;
        float vh = vi * bc2;
        p[i] -= lr * (mh / (sqrtf(vh) + eps) + wd * p[i]);
    }
}
