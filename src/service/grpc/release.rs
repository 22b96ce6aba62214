//! Giving memory that connections freed back to the OS while a worker is
//! idle.
//!
//! An allocator with per-thread heaps (the binary's mimalloc) takes back
//! what a thread freed only when that thread allocates again, so a gRPC
//! worker whose connections all closed keeps their memory until its next
//! request. Which allocator runs is the binary's choice, so the binary
//! registers how to release ([`register`]); each gRPC worker then calls it
//! on its own thread at the first [`RELEASE_INTERVAL`] tick after one of its
//! connections closed (`connection_closed`). A worker whose connections
//! stay open (Envoy's long-lived ones) never pays for a release. Without a
//! registration (the library's tests, another allocator) nothing runs.

use std::cell::Cell;
use std::sync::OnceLock;
use std::time::Duration;

/// How often each gRPC worker releases: a worker's freed memory is back
/// with the OS at most this long after its connections close.
pub const RELEASE_INTERVAL: Duration = Duration::from_secs(5);

static RELEASE: OnceLock<fn()> = OnceLock::new();

/// Registers `release`, which gives the calling thread's freed memory
/// back to the OS. The first registration stays.
pub fn register(release: fn()) {
    let _ = RELEASE.set(release);
}

thread_local! {
    /// Connections closed on this thread so far.
    static CLOSED: Cell<u64> = const { Cell::new(0) };
}

/// Counts a connection closed on the calling thread (its worker's).
pub(crate) fn connection_closed() {
    CLOSED.with(|c| c.set(c.get().wrapping_add(1)));
}

/// Calls the registered release on this thread every [`RELEASE_INTERVAL`]
/// in which a connection of this thread closed, forever (spawned on each
/// gRPC worker's own single-threaded runtime; it ends with it).
pub(crate) async fn periodically() {
    let Some(release) = RELEASE.get().copied() else {
        return;
    };
    let mut every = tokio::time::interval(RELEASE_INTERVAL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut released_at = CLOSED.with(Cell::get);
    loop {
        every.tick().await;
        let closed = CLOSED.with(Cell::get);
        if closed != released_at {
            released_at = closed;
            release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    static RELEASES: AtomicU64 = AtomicU64::new(0);

    fn count_release() {
        RELEASES.fetch_add(1, Ordering::SeqCst);
    }

    /// A release follows a closed connection, once, and never an interval
    /// in which none closed.
    #[tokio::test(start_paused = true)]
    async fn releases_only_after_a_connection_closed() {
        register(count_release);
        let task = tokio::spawn(periodically());
        tokio::time::sleep(RELEASE_INTERVAL * 3).await;
        assert_eq!(RELEASES.load(Ordering::SeqCst), 0, "nothing closed");
        connection_closed();
        connection_closed();
        tokio::time::sleep(RELEASE_INTERVAL + Duration::from_millis(1)).await;
        assert_eq!(RELEASES.load(Ordering::SeqCst), 1, "one release for both");
        tokio::time::sleep(RELEASE_INTERVAL * 3).await;
        assert_eq!(RELEASES.load(Ordering::SeqCst), 1);
        task.abort();
    }
}
