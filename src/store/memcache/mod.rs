//! The memcache store (`BACKEND_TYPE=memcache`): the original's fixed
//! windows in memcached, with the original's keys, arithmetic and
//! statistics, so that an old and a new instance on one memcached share
//! counters.
//!
//! Per request, as the original: one `get` of the request's keys per
//! server; each value read as a decimal (absent or unparseable: 0); the
//! counter after the request is that value plus the request's hits, and
//! the statuses are decided from it. The increments are then sent without
//! the response waiting for them: `incr key hits`; a missing key is `add`ed
//! with the hits and the window's TTL; if another instance added it first
//! (`NOT_STORED`), `incr` again. So, as in the original, concurrent requests
//! read the same count and a burst can overshoot by the requests in flight
//! (read-then-increment is not atomic in memcache's text protocol).
//!
//! Differences from the original, each compatible (docs/differences.md
//! lists every one):
//! - a server that cannot answer fails its own items, which the
//!   resilience layers answer by their rules' `failure_mode` (default
//!   `error`, the RLS's UNKNOWN) instead of reading 0 for every key;
//! - TTLs above 30 days are sent as absolute times, as memcached reads
//!   them (the original's month and year keys expire at once);
//! - a key memcached cannot hold (over 250 bytes, whitespace) fails alone
//!   instead of the whole request.
//!
//! Keys go to server `CRC32(key) mod n` of `MEMCACHE_HOST_PORT`, as the
//! original's client picks them. The opt-in algorithms need an atomic
//! read-modify-write and are refused here (use Redis or the memory store).

pub mod protocol;
mod server;
pub mod srv;

use server::{Server, ServerFactory};

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::{
    Answer, Decided, Done, Item, Job, Limit, NodeId, Placement, ReferenceStep, Reply, Store,
    StoreError, StoreErrorKind,
};
use crate::platform::client_tls::ClientTls;
use protocol::Reply as Said;

/// The original client's I/O timeout per command.
pub const IO_TIMEOUT: Duration = Duration::from_millis(500);

use crate::metrics::memcache as stat;

/// How to reach the servers.
#[derive(Debug, Clone, Default)]
pub struct MemcacheOptions {
    /// `host:port` of each server, in `MEMCACHE_HOST_PORT` order.
    pub servers: Vec<String>,
    /// `MEMCACHE_MAX_IDLE_CONNS`: idle connections kept per server.
    pub max_idle: usize,
    /// `MEMCACHE_TLS`.
    pub tls: Option<ClientTls>,
}

/// The memcache store.
#[derive(Debug, Clone)]
pub struct MemcacheStore {
    /// The servers now; replaced whole when `MEMCACHE_SRV` resolves to
    /// another list (a request uses the list it started with).
    servers: Arc<arc_swap::ArcSwap<Vec<Arc<Server>>>>,
    make: Arc<ServerFactory>,
    /// RLQS's demand boards: memcached has no atomic step to share them,
    /// so each instance splits alone.
    boards: Arc<crate::store::board::MemoryBoards>,
    /// The overrides' book, likewise this instance's own.
    book: Arc<crate::store::overrides::MemoryBook>,
}

impl MemcacheStore {
    /// A store over `options.servers` (connections are opened on first
    /// use, as the original's client does).
    pub fn new(options: &MemcacheOptions) -> Result<MemcacheStore, StoreError> {
        if options.servers.is_empty() {
            return Err(StoreError::new(
                StoreErrorKind::Rejected,
                "BACKEND_TYPE=memcache needs MEMCACHE_HOST_PORT or MEMCACHE_SRV",
            ));
        }
        let tls = match &options.tls {
            Some(t) => Some(tokio_rustls::TlsConnector::from(Arc::new(
                t.rustls_config().map_err(|e| {
                    StoreError::new(StoreErrorKind::Rejected, format!("memcache TLS {e}"))
                })?,
            ))),
            None => None,
        };
        let make = ServerFactory {
            tls,
            max_idle: options.max_idle.max(1),
        };
        let servers = options
            .servers
            .iter()
            .map(|addr| make.server(addr).map(Arc::new))
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(MemcacheStore {
            servers: Arc::new(arc_swap::ArcSwap::from_pointee(servers)),
            make: Arc::new(make),
            boards: Arc::new(crate::store::board::MemoryBoards::new(Arc::new(
                crate::limiter::SystemClock,
            ))),
            book: crate::store::overrides::MemoryBook::new(),
        })
    }

    /// The servers' addresses now, in order.
    pub fn servers(&self) -> Vec<String> {
        self.servers.load().iter().map(|s| s.addr.clone()).collect()
    }

    /// Uses `addrs` from now on (an SRV refresh); servers that stay keep
    /// their idle connections. Keys map by `CRC32 mod n` over the new list,
    /// as the original's client remaps on a membership change.
    pub fn set_servers(&self, addrs: &[String]) -> Result<(), StoreError> {
        if addrs.is_empty() {
            return Err(StoreError::new(
                StoreErrorKind::Rejected,
                "an empty memcache server list is not taken",
            ));
        }
        let now = self.servers.load_full();
        let next = addrs
            .iter()
            .map(|a| match now.iter().find(|s| &s.addr == a) {
                Some(kept) => Ok(Arc::clone(kept)),
                None => self.make.server(a).map(Arc::new),
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        self.servers.store(Arc::new(next));
        Ok(())
    }

    /// The server of `key` in `servers`: `CRC32(key) mod n`, as the
    /// original's client.
    fn server_of(servers: &[Arc<Server>], key: &str) -> usize {
        (crc32fast::hash(key.as_bytes()) as usize) % servers.len().max(1)
    }

    /// The original counters: read, then increment in the background.
    /// Anything else is refused (the config loader refuses rules it would
    /// need for, so this is a guard, not a path).
    async fn count(&self, items: &[Item], deadline: Option<Instant>) -> Reply {
        let servers = self.servers.load_full();
        let mut answers: Vec<Result<Answer, StoreError>> = Vec::with_capacity(items.len());
        let mut by_server: Vec<Vec<usize>> = vec![Vec::new(); servers.len()];
        for (i, inc) in items.iter().enumerate() {
            if !matches!(inc.limit, Limit::Counter(_)) {
                answers.push(Err(StoreError::new(
                    StoreErrorKind::Rejected,
                    ONLY_COUNTERS,
                )));
            } else if protocol::valid_key(&inc.key) {
                by_server[MemcacheStore::server_of(&servers, &inc.key)].push(i);
                answers.push(Err(StoreError::new(StoreErrorKind::Rejected, "not read")));
            } else {
                answers.push(Err(StoreError::new(
                    StoreErrorKind::Rejected,
                    format!("memcache cannot hold the key {:?}", inc.key),
                )));
            }
        }
        let reads = by_server
            .iter()
            .enumerate()
            .filter(|(_, p)| !p.is_empty())
            .map(|(s, positions)| {
                let keys: Vec<&str> = positions.iter().map(|&i| items[i].key.as_str()).collect();
                let command = protocol::get(&keys);
                let server = Arc::clone(&servers[s]);
                async move {
                    ::metrics::counter!(stat::KEYS_REQUESTED).increment(keys.len() as u64);
                    (s, server.command(&command, true, deadline).await)
                }
            });
        let mut answered = Vec::new();
        for (s, reply) in futures::future::join_all(reads).await {
            let positions = &by_server[s];
            match reply {
                Ok(Said::Values(values)) => {
                    ::metrics::counter!(stat::MULTIGET_SUCCESS).increment(1);
                    ::metrics::counter!(stat::KEYS_FOUND).increment(values.len() as u64);
                    for &i in positions {
                        let before = values
                            .iter()
                            .find(|(k, _)| *k == items[i].key)
                            .map_or(0, |(_, v)| count_of(&items[i].key, v));
                        answers[i] = Ok(counted(&items[i], before));
                        answered.push(i);
                    }
                }
                other => {
                    ::metrics::counter!(stat::MULTIGET_ERROR).increment(1);
                    let e = match other {
                        Err(e) => e,
                        Ok(r) => StoreError::new(
                            StoreErrorKind::Rejected,
                            format!("memcache get answered {r:?}"),
                        ),
                    };
                    tracing::error!("memcache get from {}: {e}", servers[s].addr);
                    for &i in positions {
                        answers[i] = Err(e.clone());
                    }
                }
            }
        }
        // Increments (and a give-back's decrement) after the answer, not
        // awaited (as the original).
        let increments: Vec<Change> = answered
            .into_iter()
            .filter(|&i| items[i].cost() > 0)
            .filter_map(|i| {
                let inc = &items[i];
                let w = inc.limit.original_window()?;
                Some(Change {
                    server: Arc::clone(&servers[MemcacheStore::server_of(&servers, &inc.key)]),
                    key: inc.key.clone(),
                    hits: inc.cost(),
                    ttl: w.expiry_seconds(),
                    give_back: inc.gives_back(),
                })
            })
            .collect();
        if !increments.is_empty() {
            tokio::spawn(increment_all(increments));
        }
        Reply {
            answers,
            committed: true,
        }
    }
}

/// Why memcache refuses an item that is not the original's counter.
pub const ONLY_COUNTERS: &str = "the memcache backend counts the original's fixed windows only; the opt-in algorithms, ALL_OR_NOTHING, shards, leases and the decision audit need BACKEND_TYPE=redis or memory";

/// One counter's change after the answer: `hits` added, or given back.
struct Change {
    server: Arc<Server>,
    key: String,
    hits: u64,
    ttl: u64,
    give_back: bool,
}

/// A counter's answer from its value before the increment (which memcache
/// makes after answering, as the original); a give-back's after it.
fn counted(item: &Item, before: u64) -> Answer {
    let after = match item.gives_back() {
        true => before.saturating_sub(item.cost()),
        false => before.saturating_add(item.cost()),
    };
    let now = crate::limiter::Clock::now(&crate::limiter::SystemClock);
    let decision = match item.limit.original_window() {
        Some(w) => w.decision(after, now.as_secs()),
        None => crate::limiter::Decision::Allow {
            remaining: 0,
            reset_after: Duration::ZERO,
        },
    };
    Answer::Decided(Decided {
        decision,
        count: after,
        at: now,
    })
}

/// The increments of one request, concurrently; failures are logged. A
/// give-back is a `decr` (memcached stops at 0; a missing key has nothing
/// to give back).
async fn increment_all(increments: Vec<Change>) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let all = increments.iter().map(|c| async move {
        let (server, key) = (&c.server, c.key.as_str());
        let done = match c.give_back {
            true => match server
                .command(&protocol::decr(key, c.hits), false, None)
                .await
            {
                Ok(Said::Number(_) | Said::NotFound) => Ok(()),
                other => Err(unexpected(other)),
            },
            false => increment(server, key, c.hits, protocol::exptime(c.ttl, now)).await,
        };
        if let Err(e) = done {
            tracing::error!("memcache increment of {key} on {}: {e}", server.addr);
        }
    });
    futures::future::join_all(all).await;
}

/// `incr`; when missing `add`; when another added it first, `incr` again.
async fn increment(server: &Server, key: &str, hits: u64, exptime: u64) -> Result<(), StoreError> {
    let incr = protocol::incr(key, hits);
    match server.command(&incr, false, None).await {
        Ok(Said::Number(_)) => {
            ::metrics::counter!(stat::INCREMENT_SUCCESS).increment(1);
            return Ok(());
        }
        Ok(Said::NotFound) => ::metrics::counter!(stat::INCREMENT_MISS).increment(1),
        other => {
            ::metrics::counter!(stat::INCREMENT_ERROR).increment(1);
            return Err(unexpected(other));
        }
    }
    match server
        .command(&protocol::add(key, &hits.to_string(), exptime), false, None)
        .await
    {
        Ok(Said::Stored) => {
            ::metrics::counter!(stat::ADD_SUCCESS).increment(1);
            Ok(())
        }
        Ok(Said::NotStored) => {
            ::metrics::counter!(stat::ADD_NOT_STORED).increment(1);
            match server.command(&incr, false, None).await {
                Ok(Said::Number(_)) => {
                    ::metrics::counter!(stat::INCREMENT_SUCCESS).increment(1);
                    Ok(())
                }
                other => {
                    ::metrics::counter!(stat::INCREMENT_ERROR).increment(1);
                    Err(unexpected(other))
                }
            }
        }
        other => {
            ::metrics::counter!(stat::ADD_ERROR).increment(1);
            Err(unexpected(other))
        }
    }
}

fn unexpected(reply: Result<Said, StoreError>) -> StoreError {
    match reply {
        Err(e) => e,
        Ok(r) => StoreError::new(StoreErrorKind::Rejected, format!("memcache answered {r:?}")),
    }
}

/// A stored value as the original reads it: a signed 32-bit decimal;
/// anything else counts 0 (and is logged).
fn count_of(key: &str, value: &[u8]) -> u64 {
    match std::str::from_utf8(value)
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
    {
        Some(n) => u64::try_from(n).unwrap_or(0),
        None => {
            tracing::error!("memcache value of {key} is not a number: {value:?}");
            0
        }
    }
}

#[async_trait]
impl Store for MemcacheStore {
    /// The limits in memcached; the boards and the overrides' book this
    /// instance's own.
    async fn call(&self, job: Job<'_>, deadline: Option<Instant>) -> Done {
        let work = match job {
            Job::Limits(work) => work,
            Job::Boards(work) => return Done::Boards(self.boards.share(work)),
            Job::Overrides(work) => return Done::Overrides(self.book.run(work)),
        };
        if crate::platform::telemetry::enabled() {
            use tracing::Instrument;
            let span = tracing::info_span!(
                target: crate::platform::telemetry::SPAN_TARGET,
                "Memcached Fetch Execution",
                "keysToGet length" = work.len(),
            );
            return Done::Limits(self.count(&work.items, deadline).instrument(span).await);
        }
        Done::Limits(self.count(&work.items, deadline).await)
    }
}

impl MemcacheStore {
    /// Where this store keeps its keys.
    pub fn placement(&self) -> Arc<dyn Placement> {
        Arc::new(self.clone())
    }
}

/// A key's server, by CRC32 as the original's client; memcache holds no
/// audit reference.
impl Placement for MemcacheStore {
    fn node_of(&self, key: &str, _one_second: bool) -> Option<NodeId> {
        let servers = self.servers.load();
        servers
            .get(MemcacheStore::server_of(&servers, key))
            .map(|s| s.node.clone())
    }

    fn reference_step(&self, _subject: &str, _reference: &str) -> ReferenceStep {
        ReferenceStep::Unsupported
    }
}

#[cfg(test)]
mod tests;
