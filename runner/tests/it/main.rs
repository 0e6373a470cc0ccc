//! glassbox-runner's integration tests (gradients per op, training, learning, token shards,
//! tokenizer interop with Python, the kernels' NVRTC compile, the GPU check's no-GPU mode), in
//! one test binary.

mod gpu_check;
mod gradcheck;
mod inference;
mod kernels_nvrtc;
mod learning;
mod tokenizer_interop;
mod tokens;
mod training;
