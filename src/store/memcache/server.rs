//! The memcache store's plumbing: one server's connections (plain or
//! TLS), pooled up to `MEMCACHE_MAX_IDLE_CONNS`, and one command on one of
//! them within the I/O timeout and the caller's deadline. What the
//! commands count is the store's ([`super::MemcacheStore`]).

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

use super::protocol::{self, Reply as Said};
use super::IO_TIMEOUT;
use crate::store::{NodeId, StoreError, StoreErrorKind};

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// One connection and what it has read past the last reply.
struct Conn {
    io: Box<dyn Io>,
    buf: Vec<u8>,
}

impl Conn {
    async fn command(&mut self, bytes: &[u8], multi: bool) -> Result<Said, StoreError> {
        self.io.write_all(bytes).await.map_err(io_error)?;
        loop {
            match protocol::parse(&self.buf, multi) {
                Ok((reply, used)) => {
                    self.buf.drain(..used);
                    return Ok(reply);
                }
                Err(protocol::ParseError::Incomplete) => {}
                Err(e) => return Err(StoreError::new(StoreErrorKind::Rejected, e.to_string())),
            }
            let mut chunk = [0u8; 4096];
            let n = self.io.read(&mut chunk).await.map_err(io_error)?;
            if n == 0 {
                return Err(StoreError::new(
                    StoreErrorKind::Unavailable,
                    "memcache closed the connection",
                ));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

fn io_error(e: std::io::Error) -> StoreError {
    StoreError::new(StoreErrorKind::Unavailable, format!("memcache: {e}"))
}

/// One server and its idle connections.
pub(super) struct Server {
    pub(super) addr: String,
    pub(super) node: NodeId,
    idle: parking_lot::Mutex<Vec<Conn>>,
    max_idle: usize,
    tls: Option<(
        tokio_rustls::TlsConnector,
        rustls::pki_types::ServerName<'static>,
    )>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("addr", &self.addr).finish()
    }
}

impl Server {
    async fn dial(&self) -> Result<Conn, StoreError> {
        let tcp = tokio::net::TcpStream::connect(&self.addr)
            .await
            .map_err(io_error)?;
        let _ = tcp.set_nodelay(true);
        let io: Box<dyn Io> = match &self.tls {
            Some((connector, name)) => Box::new(
                connector
                    .connect(name.clone(), tcp)
                    .await
                    .map_err(io_error)?,
            ),
            None => Box::new(tcp),
        };
        Ok(Conn {
            io,
            buf: Vec::new(),
        })
    }

    /// Runs `bytes` on a pooled connection, within [`IO_TIMEOUT`] and
    /// `deadline`.
    pub(super) async fn command(
        &self,
        bytes: &[u8],
        multi: bool,
        deadline: Option<Instant>,
    ) -> Result<Said, StoreError> {
        let limit = Instant::now() + IO_TIMEOUT;
        let until = deadline.map_or(limit, |d| d.min(limit));
        let work = async {
            let pooled = self.idle.lock().pop();
            let mut conn = match pooled {
                Some(c) => c,
                None => self.dial().await?,
            };
            let reply = conn.command(bytes, multi).await?;
            let mut idle = self.idle.lock();
            if idle.len() < self.max_idle {
                idle.push(conn);
            }
            Ok(reply)
        };
        tokio::time::timeout_at(until, work)
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::new(
                    StoreErrorKind::Timeout,
                    crate::store::DEADLINE_EXCEEDED,
                ))
            })
    }
}

/// What a new [`Server`] needs.
pub(super) struct ServerFactory {
    pub(super) tls: Option<tokio_rustls::TlsConnector>,
    pub(super) max_idle: usize,
}

impl std::fmt::Debug for ServerFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerFactory")
            .field("tls", &self.tls.is_some())
            .field("max_idle", &self.max_idle)
            .finish()
    }
}

impl ServerFactory {
    pub(super) fn server(&self, addr: &str) -> Result<Server, StoreError> {
        let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
        let tls = match &self.tls {
            Some(c) => {
                let name =
                    rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|e| {
                        StoreError::new(
                            StoreErrorKind::Rejected,
                            format!("memcache TLS server name {host}: {e}"),
                        )
                    })?;
                Some((c.clone(), name))
            }
            None => None,
        };
        Ok(Server {
            addr: addr.to_string(),
            node: NodeId::new(addr),
            idle: parking_lot::Mutex::new(Vec::new()),
            max_idle: self.max_idle,
            tls,
        })
    }
}
