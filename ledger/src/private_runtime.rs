//! [`PrivateRuntime`]: a Tokio runtime of a component's own, for synchronous code that must
//! drive async clients (the S3 blob store, the lab's sequencer) from any thread.
//!
//! [`PrivateRuntime::drive`] runs a future to completion on it: directly on a plain thread;
//! on a thread inside another runtime's context (a `spawn_blocking` closure, `block_in_place`,
//! or — discouraged, as it blocks an executor thread — an async task), where `Runtime::block_on`
//! would panic, through a short-lived scoped thread instead (one thread start per call, small
//! next to a network round trip). Dropping it never blocks: Tokio forbids a blocking runtime
//! drop inside another runtime, where a component held by async code is dropped, so it shuts
//! down in the background; nothing is in flight by then, since every call was driven to
//! completion. Not here: what runs on it.

use std::future::Future;

/// A runtime owned by one component, shut down in the background when dropped.
#[derive(Debug)]
pub struct PrivateRuntime(Option<tokio::runtime::Runtime>);

impl PrivateRuntime {
    /// A multi-threaded runtime with `workers` threads named `name`, timers and I/O enabled.
    pub fn new(name: &str, workers: usize) -> std::io::Result<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers.max(1))
            .thread_name(name)
            .enable_all()
            .build()?;
        Ok(Self(Some(rt)))
    }

    /// Runs `f` to completion on this runtime, from any thread.
    pub fn drive<F>(&self, f: F) -> F::Output
    where
        F: Future + Send,
        F::Output: Send,
    {
        let Some(rt) = &self.0 else {
            unreachable!("the runtime is only taken on drop")
        };
        if tokio::runtime::Handle::try_current().is_err() {
            return rt.block_on(f);
        }
        std::thread::scope(|s| {
            s.spawn(|| rt.block_on(f))
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }
}

impl Drop for PrivateRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}
