//! The gRPC edge: one single-threaded tokio runtime per core (`GRPC_WORKERS`),
//! each owning the connections handed to it.
//!
//! Why: on tokio's multi-threaded scheduler, a request task that finishes
//! wakes its connection task into the worker's LIFO slot, which runs next,
//! so the connection flushes after every response: one `writev` per
//! response, about 30 % of the service's CPU. On a single-threaded runtime
//! the connection task runs after every request that was ready, and the
//! responses ready together leave in one write. (The same effect needs
//! `disable_lifo_slot()`, an unstable tokio API, on the shared runtime.)
//!
//! How: the workers themselves ([`crate::platform::workers`]) are made before the
//! store, which may keep connections of its own on each. The listener
//! stays on the main runtime, which accepts and hands each connection, as
//! a `std` socket, to the next worker in turn; the worker registers it with
//! its own reactor, and performs the TLS handshake there. Each worker runs
//! its own tonic server over its connections, built from one factory, so
//! every option (max connection age, keepalive, the call statistics layer)
//! applies per worker alike. The engine and the store are shared; a Redis
//! call made on a worker goes out on that worker's own Redis connections.
//!
//! Each worker gives what its closed connections freed back to the OS
//! every few seconds ([`super::release`]), also when no request comes.
//!
//! Every connection is admitted first ([`super::admit`]): a slot out of
//! `GRPC_MAX_CONNECTIONS`, held until it closes, and on TCP its first bytes
//! within `GRPC_CONNECTION_TIMEOUT`; only then does it reach a worker (or the
//! shared runtime's server).
//!
//! A connection is served by one worker, so by at most one core: a proxy
//! that sends everything over a single HTTP/2 connection gets one core for
//! its gRPC work (Envoy opens a connection per worker thread, so it uses
//! them all). Shutdown: every worker stops accepting on the shared stop
//! signal and drains its connections as tonic's graceful shutdown does.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_rustls::rustls::ServerConfig;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;

use super::admit::{Admission, Held, Slot};
use crate::platform::workers::Workers;

/// Where gRPC connections come from.
#[derive(Debug)]
pub enum GrpcListener {
    /// `GRPC_HOST`:`GRPC_PORT`.
    Tcp(TcpListener),
    /// `GRPC_UDS`.
    Unix(UnixListener),
}

/// A worker's server: the same services on every worker.
pub type Router = tonic::transport::server::Router<
    tower::layer::util::Stack<super::metrics::GrpcMetricsLayer, tower::layer::util::Identity>,
>;

/// An accepted connection on its way to a worker, out of the main
/// runtime's reactor, with its slot.
enum Accepted {
    Tcp(std::net::TcpStream, Slot),
    Unix(std::os::unix::net::UnixStream, Slot),
}

/// A connection admitted on the accepting runtime: it holds a slot and has
/// sent its first bytes.
enum Admitted {
    Tcp(TcpStream, Slot),
    Unix(UnixStream, Slot),
}

/// Why the edge could not start.
#[derive(Debug, thiserror::Error)]
pub enum EdgeError {
    /// [`serve`] was given no worker to serve on.
    #[error("no gRPC worker to serve on")]
    NoWorker,
    /// TLS over a unix socket.
    #[error("GRPC_SERVER_USE_TLS with GRPC_UDS is not supported")]
    TlsOverUnixSocket,
}

/// The cores this process may use: the default number of workers.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Serves `listener` on the calling runtime itself (`GRPC_WORKERS=0`): one
/// router whose connections the multi-threaded scheduler spreads over its
/// threads, as before the edge existed. Responses are written one at a
/// time (see the module doc), but a request and its store call run on any
/// thread, next to the store's connections.
pub fn serve_shared(
    listener: GrpcListener,
    tls: Option<Arc<ServerConfig>>,
    router: Router,
    admission: Arc<Admission>,
    mut stop: watch::Receiver<bool>,
) -> Result<impl Future<Output = Result<(), String>> + Send + 'static, EdgeError> {
    if tls.is_some() && matches!(listener, GrpcListener::Unix(_)) {
        return Err(EdgeError::TlsOverUnixSocket);
    }
    let unix_listener = matches!(listener, GrpcListener::Unix(_));
    let (tx, rx) = mpsc::unbounded_channel::<Admitted>();
    tokio::spawn(admit(listener, admission, stop.clone(), move |c| {
        let _ = tx.send(c);
    }));
    let stopped = async move {
        let _ = stop.wait_for(|&s| s).await;
    };
    let conns = UnboundedReceiverStream::new(rx);
    let served: std::pin::Pin<
        Box<dyn Future<Output = Result<(), tonic::transport::Error>> + Send>,
    > = match tls {
        Some(config) => {
            let tcp = conns.filter_map(|c| match c {
                Admitted::Tcp(s, slot) => Some(Held::new(s, slot)),
                Admitted::Unix(..) => None,
            });
            let incoming = super::tls::incoming(tcp, config);
            Box::pin(router.serve_with_incoming_shutdown(incoming, stopped))
        }
        None => {
            // Every connection is of the listener's one kind.
            let (tcp, unix) = (
                |c| match c {
                    Admitted::Tcp(s, slot) => Some(Ok::<_, std::io::Error>(Held::new(s, slot))),
                    Admitted::Unix(..) => None,
                },
                |c| match c {
                    Admitted::Unix(s, slot) => Some(Ok::<_, std::io::Error>(Held::new(s, slot))),
                    Admitted::Tcp(..) => None,
                },
            );
            if unix_listener {
                Box::pin(router.serve_with_incoming_shutdown(conns.filter_map(unix), stopped))
            } else {
                Box::pin(router.serve_with_incoming_shutdown(conns.filter_map(tcp), stopped))
            }
        }
    };
    Ok(async move { served.await.map_err(|e| e.to_string()) })
}

/// Serves `listener` on `workers` (at least one), each with a router from
/// `router`, until `stop` turns true; TLS with `tls`. Must be called on the
/// main runtime, which runs the accept loop. The returned future ends when
/// every worker has drained, with the first error; it keeps the workers
/// running until then.
pub fn serve(
    workers: &Workers,
    listener: GrpcListener,
    tls: Option<Arc<ServerConfig>>,
    router: Arc<dyn Fn() -> Router + Send + Sync>,
    admission: Arc<Admission>,
    stop: watch::Receiver<bool>,
) -> Result<impl Future<Output = Result<(), String>> + Send + 'static, EdgeError> {
    if tls.is_some() && matches!(listener, GrpcListener::Unix(_)) {
        return Err(EdgeError::TlsOverUnixSocket);
    }
    if workers.is_empty() {
        return Err(EdgeError::NoWorker);
    }
    let unix = matches!(listener, GrpcListener::Unix(_));
    let mut senders = Vec::with_capacity(workers.len());
    let mut finished = Vec::with_capacity(workers.len());
    for handle in workers.handles() {
        let (tx, rx) = mpsc::unbounded_channel();
        let (done_tx, done_rx) = oneshot::channel();
        let (router, stop, tls) = (Arc::clone(&router), stop.clone(), tls.clone());
        // Ends with the worker's runtime.
        handle.spawn(super::release::periodically());
        handle.spawn(async move {
            let served = worker(rx, unix, tls, router(), stop).await;
            let _ = done_tx.send(served);
        });
        senders.push(tx);
        finished.push(done_rx);
    }
    // Admitted connections go to the workers in turn, as std sockets.
    let next = AtomicUsize::new(0);
    tokio::spawn(admit(listener, admission, stop, move |c| {
        let i = next.fetch_add(1, Ordering::Relaxed) % senders.len();
        let accepted = match c {
            Admitted::Tcp(s, slot) => s.into_std().map(|s| Accepted::Tcp(s, slot)),
            Admitted::Unix(s, slot) => s.into_std().map(|s| Accepted::Unix(s, slot)),
        };
        match accepted {
            // A worker that has stopped drops what it is sent.
            Ok(a) => {
                let _ = senders[i].send(a);
            }
            Err(e) => tracing::warn!("gRPC connection: {e}"),
        }
    }));
    let workers = workers.clone();
    Ok(async move {
        let _running = workers;
        let mut first = Ok(());
        for done in finished {
            let served = done
                .await
                .unwrap_or_else(|_| Err("a gRPC worker stopped".into()));
            if first.is_ok() {
                first = served;
            }
        }
        first
    })
}

/// Accepts until `stop`; each connection that gets a slot and sends its
/// first bytes in time goes to `deliver` (a spawned task waits for the
/// first bytes, so a silent client holds up no other).
async fn admit(
    listener: GrpcListener,
    admission: Arc<Admission>,
    mut stop: watch::Receiver<bool>,
    deliver: impl Fn(Admitted) + Send + Sync + 'static,
) {
    let deliver = Arc::new(deliver);
    loop {
        let accepted = tokio::select! {
            _ = stop.wait_for(|&s| s) => return,
            a = accept_one(&listener) => a,
        };
        let conn = match accepted {
            Ok(conn) => conn,
            Err(e) => {
                tracing::warn!("gRPC accept: {e}");
                // A full file table: do not spin.
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        let Some(slot) = admission.slot() else {
            continue;
        };
        let (admission, deliver) = (Arc::clone(&admission), Arc::clone(&deliver));
        tokio::spawn(async move {
            let spoke = match &conn {
                Incoming::Tcp(s) => admission.spoke(s).await,
                Incoming::Unix(_) => true,
            };
            if spoke {
                deliver(match conn {
                    Incoming::Tcp(s) => Admitted::Tcp(s, slot),
                    Incoming::Unix(s) => Admitted::Unix(s, slot),
                });
            }
        });
    }
}

/// A connection just accepted.
enum Incoming {
    Tcp(TcpStream),
    Unix(UnixStream),
}

async fn accept_one(listener: &GrpcListener) -> std::io::Result<Incoming> {
    match listener {
        GrpcListener::Tcp(l) => {
            let (s, _) = l.accept().await?;
            // No Nagle: a small response must not wait for a delayed ACK.
            s.set_nodelay(true)?;
            Ok(Incoming::Tcp(s))
        }
        GrpcListener::Unix(l) => Ok(Incoming::Unix(l.accept().await?.0)),
    }
}

/// One worker: its router over the connections it is sent, until `stop`.
async fn worker(
    rx: mpsc::UnboundedReceiver<Accepted>,
    unix: bool,
    tls: Option<Arc<ServerConfig>>,
    router: Router,
    mut stop: watch::Receiver<bool>,
) -> Result<(), String> {
    let stopped = async move {
        let _ = stop.wait_for(|&s| s).await;
    };
    let conns = UnboundedReceiverStream::new(rx);
    // Every connection is of the listener's one kind.
    let tcp = |c| match c {
        Accepted::Tcp(s, slot) => tcp_stream(s).map(|s| Held::new(s, slot)),
        Accepted::Unix(..) => None,
    };
    let served = match (tls, unix) {
        (Some(config), _) => {
            let incoming = super::tls::incoming(conns.filter_map(tcp), config);
            router.serve_with_incoming_shutdown(incoming, stopped).await
        }
        (None, false) => {
            let incoming = conns.filter_map(tcp).map(Ok::<_, std::io::Error>);
            router.serve_with_incoming_shutdown(incoming, stopped).await
        }
        (None, true) => {
            let incoming = conns
                .filter_map(|c| match c {
                    Accepted::Unix(s, slot) => unix_stream(s).map(|s| Held::new(s, slot)),
                    Accepted::Tcp(..) => None,
                })
                .map(Ok::<_, std::io::Error>);
            router.serve_with_incoming_shutdown(incoming, stopped).await
        }
    };
    served.map_err(|e| e.to_string())
}

fn tcp_stream(s: std::net::TcpStream) -> Option<TcpStream> {
    s.set_nonblocking(true).ok()?;
    TcpStream::from_std(s)
        .map_err(|e| tracing::warn!("gRPC connection: {e}"))
        .ok()
}

fn unix_stream(s: std::os::unix::net::UnixStream) -> Option<UnixStream> {
    s.set_nonblocking(true).ok()?;
    UnixStream::from_std(s)
        .map_err(|e| tracing::warn!("gRPC connection: {e}"))
        .ok()
}
