//! [`Overrides`]: the book's reader and writer. Writes go to the store's
//! book ([`crate::store::Job::Overrides`]) and are in force on the writing
//! instance when the write answers; every instance reads the book's version
//! every [`REFRESH`] and the whole book when it changed, so a change is in
//! force fleet-wide within `REFRESH` plus one store round trip (an instance
//! that cannot read the book keeps the one it has, and says so once).

use std::sync::Arc;
use std::time::Duration;

use super::record::{self, id_of, DeleteRequest, DescriptorEntry, Invalid, PutRequest, Record};
use super::table::{now_ms, OverrideTable, Snapshot};
use crate::store::overrides::{BookAnswer, BookKeys, BookStep, BookWork, BookWrite};
use crate::store::{Store, StoreError, StoreExt};

/// How often each instance reads the book's version.
pub const REFRESH: Duration = Duration::from_millis(250);

/// The most log lines one read answers.
pub const LOG_READ: usize = 1_000;

/// A change the book refused, or could not make.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refused {
    /// The request is not one (400).
    #[error(transparent)]
    Invalid(#[from] Invalid),
    /// `if_version` is not the override's version (409).
    #[error("if_version {given} is stale: the override's version is {current} (0: none)")]
    Stale {
        /// The version the write named.
        given: u64,
        /// The override's version now.
        current: u64,
    },
    /// The book holds its most overrides (409).
    #[error("the book holds its most overrides ({max}, OVERRIDES_MAX); delete one first")]
    Full {
        /// `OVERRIDES_MAX`.
        max: usize,
    },
    /// A delete of an override that does not exist (404).
    #[error("no override of that domain and descriptor")]
    Missing,
    /// The store did not answer (503).
    #[error("the store did not answer: {0}")]
    Store(StoreError),
}

/// A change the book made.
#[derive(Debug, Clone, PartialEq)]
pub struct Written {
    /// Its version.
    pub version: u64,
    /// The override before it, with its version, if there was one.
    pub before: Option<(u64, Record)>,
    /// The override after it (`None` after a delete).
    pub after: Option<Record>,
}

/// The overrides of one instance: its store's book and its table.
#[derive(Debug)]
pub struct Overrides {
    store: Arc<dyn Store>,
    keys: BookKeys,
    table: Arc<OverrideTable>,
    max_entries: usize,
    /// Whether the last read failed (to warn once per outage).
    failing: std::sync::atomic::AtomicBool,
}

impl Overrides {
    /// The overrides kept in `store`'s book under `prefix`
    /// (`CACHE_KEY_PREFIX`), at most `max_entries` of them, applied through
    /// `table`.
    pub fn new(
        store: Arc<dyn Store>,
        prefix: &str,
        max_entries: usize,
        table: Arc<OverrideTable>,
    ) -> Overrides {
        Overrides {
            store,
            keys: BookKeys::new(prefix),
            table,
            max_entries,
            failing: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The table the engine applies.
    pub fn table(&self) -> &Arc<OverrideTable> {
        &self.table
    }

    /// `OVERRIDES_MAX`.
    pub fn max_entries(&self) -> usize {
        self.max_entries
    }

    async fn step(&self, step: BookStep) -> Result<BookAnswer, StoreError> {
        let work = BookWork {
            keys: self.keys.clone(),
            node: None,
            steps: vec![step],
        };
        self.store.book(&work, None).await.pop().unwrap_or_else(|| {
            Err(StoreError::new(
                crate::store::StoreErrorKind::Rejected,
                "no answer",
            ))
        })
    }

    /// Reads the book unless its version is the table's, and puts what it
    /// read in force. Whether the table changed.
    pub async fn refresh(&self) -> Result<bool, StoreError> {
        use std::sync::atomic::Ordering;
        let known = self.table.version();
        let answer = self.step(BookStep::Read { known }).await;
        let changed = match answer {
            Ok(BookAnswer::Snapshot { version, entries }) => {
                self.table.publish(Snapshot::of(version, entries));
                true
            }
            Ok(_) => false,
            Err(e) => {
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!("overrides: cannot read the book, keeping version {known}: {e}");
                }
                return Err(e);
            }
        };
        if self.failing.swap(false, Ordering::Relaxed) {
            tracing::info!("overrides: the book is read again");
        }
        Ok(changed)
    }

    /// Refreshes every [`REFRESH`] until the table is dropped.
    pub fn spawn_refresher(self: &Arc<Overrides>) -> tokio::task::JoinHandle<()> {
        let this = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(REFRESH);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(o) = this.upgrade() else {
                    return;
                };
                let _ = o.refresh().await;
            }
        })
    }

    /// Puts (creates or replaces) an override, written by `who`.
    pub async fn put(&self, put: PutRequest, who: &str) -> Result<Written, Refused> {
        let expires_in = record::check_put(&put)?;
        let now = now_ms();
        let expires_at_ms = expires_in
            .map(|d| now.saturating_add(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)));
        let record = Record {
            domain: put.domain,
            descriptor: put.descriptor,
            limit: put.limit,
            expires_at_ms,
            updated_at_ms: now,
            updated_by: who.to_string(),
        };
        let text = serde_json::to_string(&record)
            .map_err(|e| Refused::Invalid(Invalid::Body(e.to_string())))?;
        let id = id_of(&record.domain, &record.descriptor);
        let head = log_head(
            now,
            who,
            "put",
            &record.domain,
            &record.descriptor,
            Some(&text),
        );
        let mut written = self
            .write(BookWrite {
                id,
                record: Some(text),
                expires_at_ms: expires_at_ms.unwrap_or(0),
                if_version: put.if_version,
                max_entries: self.max_entries,
                now_ms: now,
                log_head: head,
            })
            .await?;
        written.after = Some(record);
        Ok(written)
    }

    /// Deletes an override, by `who`.
    pub async fn delete(&self, delete: DeleteRequest, who: &str) -> Result<Written, Refused> {
        record::check_target(&delete.domain, &delete.descriptor)?;
        let now = now_ms();
        let head = log_head(now, who, "delete", &delete.domain, &delete.descriptor, None);
        self.write(BookWrite {
            id: id_of(&delete.domain, &delete.descriptor),
            record: None,
            expires_at_ms: 0,
            if_version: delete.if_version,
            max_entries: self.max_entries,
            now_ms: now,
            log_head: head,
        })
        .await
    }

    async fn write(&self, write: BookWrite) -> Result<Written, Refused> {
        let given = write.if_version.unwrap_or(0);
        match self.step(BookStep::Write(write)).await {
            Ok(BookAnswer::Written { version, before }) => {
                // In force here at once; the others read it within REFRESH.
                let _ = self.refresh().await;
                let before = before.and_then(|b| {
                    let r: Record = serde_json::from_str(&b.record).ok()?;
                    Some((b.version, r))
                });
                Ok(Written {
                    version,
                    before,
                    after: None,
                })
            }
            Ok(BookAnswer::Stale { current }) => Err(Refused::Stale { given, current }),
            Ok(BookAnswer::Full) => Err(Refused::Full {
                max: self.max_entries,
            }),
            Ok(BookAnswer::Missing) => Err(Refused::Missing),
            Ok(other) => Err(Refused::Store(StoreError::new(
                crate::store::StoreErrorKind::Rejected,
                format!("unexpected answer to a write: {other:?}"),
            ))),
            Err(e) => Err(Refused::Store(e)),
        }
    }

    /// The newest [`LOG_READ`] changes of `domain` (every domain: `None`),
    /// oldest first, each as the JSON object the book keeps.
    pub async fn log(&self, domain: Option<&str>) -> Result<Vec<serde_json::Value>, StoreError> {
        let lines = match self
            .step(BookStep::Log {
                count: crate::store::overrides::LOG_LINES,
            })
            .await?
        {
            BookAnswer::Log(lines) => lines,
            _ => Vec::new(),
        };
        let mut changes: Vec<serde_json::Value> = lines
            .iter()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|c| domain.is_none_or(|d| c["domain"] == d))
            .collect();
        let skip = changes.len().saturating_sub(LOG_READ);
        changes.drain(..skip);
        Ok(changes)
    }
}

/// A change's log line without its closing brace (the store adds its
/// version and the record before): when, who, what, and the record after.
fn log_head(
    at_ms: u64,
    who: &str,
    action: &str,
    domain: &str,
    descriptor: &[DescriptorEntry],
    after: Option<&str>,
) -> String {
    let head = serde_json::json!({
        "at": crate::overrides::timestamp(at_ms),
        "who": who,
        "action": action,
        "domain": domain,
        "descriptor": descriptor,
    })
    .to_string();
    // `{...}` less its brace, then the record after as raw JSON.
    let open = head.strip_suffix('}').unwrap_or(&head);
    format!("{open},\"after\":{}", after.unwrap_or("null"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::overrides::record::OverrideLimit;

    fn overrides(max: usize) -> Overrides {
        let store: Arc<dyn Store> = Arc::new(crate::store::MemoryStore::new(Arc::new(
            crate::limiter::SystemClock,
        )));
        Overrides::new(store, "", max, OverrideTable::new())
    }

    fn put(value: &str, n: u32, if_version: Option<u64>) -> PutRequest {
        PutRequest {
            domain: "api".into(),
            descriptor: vec![DescriptorEntry {
                key: "tenant".into(),
                value: value.into(),
            }],
            limit: OverrideLimit {
                requests_per_unit: n,
                unit: "minute".into(),
                algorithm: None,
                burst: None,
                unit_multiplier: None,
            },
            expires_in: None,
            if_version,
        }
    }

    #[tokio::test]
    async fn a_write_is_in_force_here_when_it_answers_and_logged_with_who_and_before() {
        let o = overrides(10);
        let w = o.put(put("acme", 50, None), "alice").await.expect("put");
        assert_eq!((w.version, w.before.is_none()), (1, true));
        let e = [crate::config::tree::Entry::new("tenant", "acme")];
        assert!(o.table().find("api", &e).is_some());
        let w = o.put(put("acme", 60, Some(1)), "bob").await.expect("cas");
        assert_eq!(
            w.before.map(|(v, r)| (v, r.limit.requests_per_unit)),
            Some((1, 50))
        );
        let log = o.log(Some("api")).await.expect("log");
        assert_eq!(log.len(), 2);
        assert_eq!(log[1]["who"], "bob");
        assert_eq!(log[1]["version"], 2);
        assert_eq!(log[1]["before"]["limit"]["requests_per_unit"], 50);
        assert_eq!(log[1]["after"]["limit"]["requests_per_unit"], 60);
        assert!(o.log(Some("web")).await.expect("log").is_empty());
    }

    #[tokio::test]
    async fn stale_full_and_missing_are_refused_as_such() {
        let o = overrides(1);
        o.put(put("a", 1, None), "t").await.expect("put");
        assert_eq!(
            o.put(put("a", 2, Some(0)), "t").await,
            Err(Refused::Stale {
                given: 0,
                current: 1
            })
        );
        assert_eq!(
            o.put(put("b", 2, None), "t").await,
            Err(Refused::Full { max: 1 })
        );
        let gone = DeleteRequest {
            domain: "api".into(),
            descriptor: put("b", 1, None).descriptor,
            if_version: None,
        };
        assert_eq!(o.delete(gone, "t").await, Err(Refused::Missing));
    }
}
