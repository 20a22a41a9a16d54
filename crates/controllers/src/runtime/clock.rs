//! A monotonic clock that tests can control, for deadlines kept outside tokio timers
//! (expectation TTLs).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// Source of the current monotonic time.
pub trait Clock: Send + Sync {
    fn now(&self) -> Instant;
}

/// tokio's clock: real time, or the paused and advanced time of a test runtime.
#[derive(Clone, Copy, Debug, Default)]
pub struct TokioClock;

impl Clock for TokioClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that only moves when told to. Cloning gives another handle to the same time.
#[derive(Clone, Debug)]
pub struct FakeClock {
    now: Arc<Mutex<Instant>>,
}

impl FakeClock {
    pub fn new() -> Self {
        FakeClock {
            now: Arc::new(Mutex::new(Instant::now())),
        }
    }

    /// Moves the time forward by `d`.
    pub fn step(&self, d: Duration) {
        let mut now = self.now.lock().unwrap_or_else(|e| e.into_inner());
        *now += d;
    }
}

impl Default for FakeClock {
    fn default() -> Self {
        FakeClock::new()
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Instant {
        *self.now.lock().unwrap_or_else(|e| e.into_inner())
    }
}
