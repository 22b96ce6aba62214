//! `MEMCACHE_SRV`: the servers from a DNS SRV record
//! (`_service._proto.name`), through the system's resolver, as sorted
//! `host:port` strings (the original's order, so that keys map to the same
//! server in a mixed fleet).

use hickory_resolver::proto::rr::RData;
use hickory_resolver::TokioResolver;

use crate::store::{StoreError, StoreErrorKind};

/// Whether `name` has the SRV form `_service._proto.name`.
pub fn is_srv_name(name: &str) -> bool {
    let mut labels = name.splitn(3, '.');
    matches!(
        (labels.next(), labels.next(), labels.next()),
        (Some(s), Some(p), Some(rest)) if s.len() > 1 && s.starts_with('_') && p.len() > 1 && p.starts_with('_') && !rest.is_empty()
    )
}

/// `host:port` of every target, sorted; the target's trailing dot dropped.
pub fn servers(targets: impl IntoIterator<Item = (String, u16)>) -> Vec<String> {
    let mut out: Vec<String> = targets
        .into_iter()
        .map(|(host, port)| format!("{}:{port}", host.trim_end_matches('.')))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Looks `name` up.
pub async fn resolve(name: &str) -> Result<Vec<String>, StoreError> {
    let fail = |e: &dyn std::fmt::Display| {
        StoreError::new(
            StoreErrorKind::Unavailable,
            format!("MEMCACHE_SRV {name}: {e}"),
        )
    };
    if !is_srv_name(name) {
        return Err(fail(&"not of the form _service._proto.name"));
    }
    let resolver = TokioResolver::builder_tokio()
        .map_err(|e| fail(&e))?
        .build()
        .map_err(|e| fail(&e))?;
    let lookup = resolver.srv_lookup(name).await.map_err(|e| fail(&e))?;
    let found = servers(lookup.answers().iter().filter_map(|r| match &r.data {
        RData::SRV(srv) => Some((srv.target.to_string(), srv.port)),
        _ => None,
    }));
    if found.is_empty() {
        return Err(fail(&"no SRV records"));
    }
    Ok(found)
}

/// Re-resolves `name` every `every` (`MEMCACHE_SRV_REFRESH`) and gives
/// `store` the new list when it changed; a failed lookup is logged and the
/// list kept. Stops when the guard drops.
pub fn spawn_refresh(
    store: super::MemcacheStore,
    name: String,
    every: std::time::Duration,
) -> RefreshGuard {
    RefreshGuard(tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            match resolve(&name).await {
                Ok(found) if found != store.servers() => match store.set_servers(&found) {
                    Ok(()) => {
                        tracing::warn!(servers = ?found, "MEMCACHE_SRV {name}: new server list")
                    }
                    Err(e) => tracing::error!("MEMCACHE_SRV {name}: {e}"),
                },
                Ok(_) => {}
                Err(e) => tracing::error!("{e}; keeping the servers"),
            }
        }
    }))
}

/// Stops the refresh task when dropped.
#[derive(Debug)]
pub struct RefreshGuard(tokio::task::JoinHandle<()>);

impl Drop for RefreshGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn srv_names_and_server_lists() {
        assert!(is_srv_name("_memcache._tcp.example.com"));
        assert!(!is_srv_name("memcache.example.com"));
        assert!(!is_srv_name("_memcache._tcp"));
        assert_eq!(
            servers([
                ("b.example.".to_string(), 11211),
                ("a.example.".to_string(), 11212)
            ]),
            ["a.example:11212", "b.example:11211"]
        );
    }
}
