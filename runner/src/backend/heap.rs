//! Keeps the CPU backend's freed activation buffers in the process between training steps
//! (glibc only).
//!
//! The model allocates its activations with `Backend::zeros` and frees them each step, in the
//! same sizes every step. glibc's defaults give buffers from 128 KiB up their own `mmap` and
//! return the heap's free top to the kernel, so every step faulted its activations in again, page
//! by page (on the `small` benchmark config: 50k page faults per run, about a quarter of the
//! CPU time; 4k with the settings below). [`keep_freed_memory`] tells the allocator, once per
//! process, to serve buffers up to 32 MiB from the heap, to keep the freed top, and to use one
//! arena (the pool's threads free each other's buffers, so per-thread arenas only grow apart);
//! the next step then reuses the same pages. [`give_back_freed_memory`] returns what is free
//! to the kernel when a backend is dropped, so a long-lived worker does not keep a finished
//! run's peak.
//!
//! Numerics are untouched: `zeros` still hands out zeroed memory. Not here: any pooling of our
//! own (the allocator already has free lists), or other allocators than glibc's (elsewhere
//! both functions do nothing).

/// Tune the allocator for step-shaped allocation (once per process; later calls do nothing).
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            // Values from glibc's <malloc.h>.
            const M_TRIM_THRESHOLD: i32 = -1;
            const M_MMAP_THRESHOLD: i32 = -3;
            const M_ARENA_MAX: i32 = -8;
            // SAFETY: mallopt only changes the allocator's tuning parameters; it is safe to
            // call at any time from any thread (glibc takes its own locks), and values it
            // rejects leave the defaults in place (it returns 0, which we may ignore).
            unsafe {
                glibc::mallopt(M_MMAP_THRESHOLD, 32 << 20);
                glibc::mallopt(M_TRIM_THRESHOLD, i32::MAX);
                glibc::mallopt(M_ARENA_MAX, 1);
            }
        });
    }
}

/// Return the allocator's free memory to the kernel (after a run).
pub fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free pages of the allocator's own heaps; it is safe to
    // call from any thread at any time.
    unsafe {
        glibc::malloc_trim(0);
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod glibc {
    //! The two glibc functions, declared by hand (no `libc` dependency for two symbols).
    unsafe extern "C" {
        pub fn mallopt(param: i32, value: i32) -> i32;
        pub fn malloc_trim(pad: usize) -> i32;
    }
}
