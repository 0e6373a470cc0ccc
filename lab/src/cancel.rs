//! Cancel switches: the running jobs' cancel flags, shared by the flow (which cancels) and the
//! workers in the same process (which register a flag per running job), so a cancel reaches a
//! running job at once instead of at its next heartbeat.
//!
//! Not here: cancelling in the queue (`crate::queue`) or on the record (`crate::flow`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use glassbox_schemas::JobId;

/// Cancel flags of the jobs running in this process, so a maintainer's `/cancel` reaches a
/// local run at its next step instead of at the next heartbeat.
#[derive(Debug, Clone, Default)]
pub struct CancelSwitches {
    inner: Arc<Mutex<HashMap<JobId, Arc<AtomicBool>>>>,
}

impl CancelSwitches {
    /// Flips `job`'s flag if it runs in this process; returns whether it did.
    pub fn cancel(&self, job: JobId) -> bool {
        match self.lock().get(&job) {
            Some(flag) => {
                flag.store(true, Ordering::SeqCst);
                true
            }
            None => false,
        }
    }

    pub(crate) fn register(&self, job: JobId, flag: Arc<AtomicBool>) {
        self.lock().insert(job, flag);
    }

    pub(crate) fn remove(&self, job: JobId) {
        self.lock().remove(&job);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<JobId, Arc<AtomicBool>>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}
