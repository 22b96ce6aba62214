//! Admitting a connection to the gRPC port.
//!
//! Bounds:
//! - at most `max` connections are open at once: each holds a slot until
//!   it closes ([`Held`]); one more is closed at once, counted in
//!   `ratelimit.grpc.connection_refused`, with one log line each time the
//!   port fills up. The default leaves the other ports and the stores their
//!   share of the process's file limit, so `/healthcheck` still answers
//!   when the gRPC port is full;
//! - a new TCP connection must send its first bytes within `first_bytes`,
//!   or it is closed (counted in `ratelimit.grpc.connection_silent`):
//!   silent connections do not hold slots for long. A connection that has
//!   spoken is never closed for being idle; HTTP/2 keepalive pings look
//!   after it. (A unix socket is local, reachable only through the file
//!   system; it takes a slot but is not timed.)

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::metrics;

/// The gRPC port's connection slots and first-bytes deadline.
#[derive(Debug)]
pub struct Admission {
    slots: Arc<Semaphore>,
    max: usize,
    first_bytes: Duration,
    full: AtomicBool,
}

/// One connection's slot: given back when dropped.
#[derive(Debug)]
pub struct Slot(#[allow(dead_code)] OwnedSemaphorePermit);

impl Admission {
    /// `max` connections at once, each sending within `first_bytes`.
    pub fn new(max: usize, first_bytes: Duration) -> Admission {
        Admission {
            slots: Arc::new(Semaphore::new(max)),
            max,
            first_bytes,
            full: AtomicBool::new(false),
        }
    }

    /// A slot for a connection just accepted, or `None` when every slot is
    /// held (then the caller closes it).
    pub fn slot(&self) -> Option<Slot> {
        match Arc::clone(&self.slots).try_acquire_owned() {
            Ok(permit) => {
                self.full.store(false, Ordering::Relaxed);
                Some(Slot(permit))
            }
            Err(_) => {
                ::metrics::counter!(metrics::GRPC_CONNECTION_REFUSED).increment(1);
                if !self.full.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        limit = self.max,
                        "gRPC port: connection limit reached (GRPC_MAX_CONNECTIONS); new connections are closed until some close"
                    );
                }
                None
            }
        }
    }

    /// Whether `s` sends a first byte within the first-bytes deadline
    /// (peeked, so nothing is consumed); counts the connections that stay
    /// silent or close first.
    pub async fn spoke(&self, s: &tokio::net::TcpStream) -> bool {
        let mut first = [0u8; 1];
        let spoke = matches!(
            tokio::time::timeout(self.first_bytes, s.peek(&mut first)).await,
            Ok(Ok(1..))
        );
        if !spoke {
            ::metrics::counter!(metrics::GRPC_CONNECTION_SILENT).increment(1);
        }
        spoke
    }
}

/// The default connection cap: the process's open-file limit less what
/// `reserved` descriptors need (the other ports, the stores, config files),
/// between 64 and 1,000,000; 10,000 where the limit cannot be read.
pub fn default_max_connections(reserved: usize) -> usize {
    let soft = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|limits| open_files_limit(&limits));
    match soft {
        Some(n) => n.saturating_sub(reserved).clamp(64, 1_000_000),
        None => 10_000,
    }
}

/// The soft "Max open files" of a `/proc/self/limits` text.
fn open_files_limit(limits: &str) -> Option<usize> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line
        .trim_start_matches("Max open files")
        .split_whitespace()
        .next()?;
    match soft {
        "unlimited" => Some(usize::MAX),
        n => n.parse().ok(),
    }
}

/// A connection holding its slot until it closes.
#[derive(Debug)]
pub struct Held<IO> {
    io: IO,
    _slot: Slot,
}

impl<IO> Drop for Held<IO> {
    /// Its worker may give what the connection held back to the OS.
    fn drop(&mut self) {
        super::release::connection_closed();
    }
}

impl<IO> Held<IO> {
    /// `io`, holding `slot`.
    pub fn new(io: IO, slot: Slot) -> Held<IO> {
        Held { io, _slot: slot }
    }

    /// The connection itself.
    pub fn get_ref(&self) -> &IO {
        &self.io
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Held<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Held<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

impl<IO: tonic::transport::server::Connected> tonic::transport::server::Connected for Held<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_open_file_limit_is_read_from_proc() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax processes             127          127          processes\nMax open files            1024                 524288               files\n";
        assert_eq!(open_files_limit(limits), Some(1024));
        assert_eq!(
            open_files_limit(
                "Max open files            unlimited            unlimited            files\n"
            ),
            Some(usize::MAX)
        );
        assert_eq!(open_files_limit("nothing"), None);
        assert!(default_max_connections(1024) >= 64);
    }

    #[tokio::test]
    async fn a_slot_is_held_until_its_connection_drops() {
        let admission = Admission::new(2, Duration::from_secs(1));
        let a = admission.slot().expect("first");
        let b = admission.slot().expect("second");
        assert!(admission.slot().is_none(), "full");
        drop(Held::new((), a));
        assert!(admission.slot().is_some(), "freed when dropped");
        drop(b);
    }
}
