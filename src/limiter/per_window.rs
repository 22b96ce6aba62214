//! "At most `limit` per `window`": the rate every algorithm holds
//! ([`FixedWindowCounter`](super::FixedWindowCounter),
//! [`SlidingWindowCounter`](super::SlidingWindowCounter),
//! [`SlidingLog`](super::SlidingLog), and [`Gcra`](super::Gcra), which reads
//! the window as its refill period).

use std::time::Duration;

use super::decision::{window_nanos, InvalidLimit};

/// A limit per window.
///
/// Invariant (checked by [`PerWindow::new`]): `1 ≤ window ≤ u64::MAX` ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerWindow {
    /// The most admitted per window (0: nothing with a cost is admitted).
    pub(crate) limit: u64,
    /// The window, in nanoseconds (`1 ..= u64::MAX`).
    pub(crate) window_ns: u64,
}

impl PerWindow {
    /// At most `limit` per `window`; refuses a zero window and one longer
    /// than `u64::MAX` nanoseconds.
    pub fn new(limit: u64, window: Duration) -> Result<PerWindow, InvalidLimit> {
        Ok(PerWindow {
            limit,
            window_ns: window_nanos(window)?,
        })
    }

    /// The most admitted per window.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The window.
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.window_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_bounds() {
        let p = PerWindow::new(3, Duration::from_millis(1500)).unwrap();
        assert_eq!((p.limit(), p.window()), (3, Duration::from_millis(1500)));
        assert_eq!(
            PerWindow::new(1, Duration::ZERO),
            Err(InvalidLimit::ZeroWindow)
        );
        assert!(matches!(
            PerWindow::new(1, Duration::MAX),
            Err(InvalidLimit::WindowTooLong { .. })
        ));
        let longest = Duration::from_nanos(u64::MAX);
        assert_eq!(PerWindow::new(0, longest).unwrap().window(), longest);
    }
}
