//! Where the lab's times come from: the system clock, or a hand-moved one in tests, so a test
//! moves time (a lease expiring, a notice's backoff, a day's proposal limit) without sleeping.
//!
//! Not here: timers or sleeping; this only answers "what time is it".

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where times come from: the system clock, or a hand-moved one in tests.
#[derive(Debug, Clone)]
pub enum Clock {
    /// Wall-clock time.
    System,
    /// A clock that only moves when told to.
    Manual(Arc<AtomicI64>),
}

impl Clock {
    /// Now, in Unix milliseconds.
    pub fn now_ms(&self) -> i64 {
        match self {
            Clock::System => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0),
            Clock::Manual(t) => t.load(Ordering::SeqCst),
        }
    }

    /// Moves a manual clock forward (no effect on the system clock).
    pub fn advance(&self, by: Duration) {
        if let Clock::Manual(t) = self {
            t.fetch_add(by.as_millis() as i64, Ordering::SeqCst);
        }
    }
}
