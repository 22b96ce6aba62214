//! Time, injected: every decision takes `now` from a [`Clock`], so tests and
//! the accuracy harness run on a [`ManualClock`] and nothing reads the wall
//! clock behind the caller's back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of Unix time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Now, since the Unix epoch.
    fn now(&self) -> Duration;

    /// Now in whole seconds, as the original's windows count.
    fn now_secs(&self) -> u64 {
        self.now().as_secs()
    }
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        // A clock before 1970 is a broken machine; treat it as the epoch
        // rather than failing every request.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
    }
}

/// A clock that moves only when told to (nanosecond resolution).
#[derive(Debug, Default)]
pub struct ManualClock {
    nanos: AtomicU64,
}

impl ManualClock {
    /// A clock at `now` since the epoch.
    pub fn new(now: Duration) -> ManualClock {
        ManualClock {
            nanos: AtomicU64::new(now.as_nanos() as u64),
        }
    }

    /// A clock at `secs` whole seconds since the epoch.
    pub fn at_secs(secs: u64) -> ManualClock {
        ManualClock::new(Duration::from_secs(secs))
    }

    /// Sets the time.
    pub fn set(&self, now: Duration) {
        self.nanos.store(now.as_nanos() as u64, Ordering::SeqCst);
    }

    /// Moves the time forward.
    pub fn advance(&self, by: Duration) {
        self.nanos.fetch_add(by.as_nanos() as u64, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::at_secs(2222);
        assert_eq!(c.now_secs(), 2222);
        c.advance(Duration::from_millis(1500));
        assert_eq!(c.now_secs(), 2223);
        c.set(Duration::from_secs(10));
        assert_eq!(c.now(), Duration::from_secs(10));
    }
}
