//! glassbox-runner's integration tests (gradients per op, training, learning, the kernels'
//! NVRTC compile), in one test binary.

mod gradcheck;
mod kernels_nvrtc;
mod learning;
mod training;
