//! The per-tenant overrides' book as a kind of store job
//! ([`crate::store::Job::Overrides`]): every store keeps one book. Redis
//! keeps it in three keys of one hash tag (so one Cluster slot), shared by
//! every instance on it and kept across restarts (`store::redis`'s
//! `overrides.lua`); the memory store and memcache keep this instance's own
//! ([`MemoryBook`]).
//!
//! The book is opaque to the store: an entry is an id and a record (JSON
//! text the [`crate::overrides`] layer writes and reads) with its version
//! and its expiry. What the store guarantees:
//!
//! - every change (a put or a delete) takes the next number of one counter
//!   as its version, and that number becomes the book's version: a reader
//!   that saw version `v` has seen every change up to `v`;
//! - a write that names the version it replaces is refused when that is
//!   not the entry's version (`0`: the entry must not exist), atomically
//!   with the write;
//! - a put of a new id is refused when the book already holds `max_entries`
//!   live entries (expired entries are dropped then, so they never count;
//!   a write is O(1) until the book is full);
//! - an expired entry is no entry: a write of its id finds none;
//! - every change appends one line to the change log, with the record
//!   before it and its version, and the log keeps its newest
//!   [`LOG_LINES`] lines.

use std::sync::Arc;

use parking_lot::Mutex;

use super::{NodeId, StoreError};

/// How many changes the log keeps (the oldest go first).
pub const LOG_LINES: usize = 10_000;

/// The three keys of a book, on one hash tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BookKeys {
    /// The entries: id → `"<version> <expires at, ms> <record>"`.
    pub entries: String,
    /// The book's version: the version of its newest change.
    pub version: String,
    /// The change log, oldest first.
    pub log: String,
}

impl BookKeys {
    /// The keys under `prefix` (`CACHE_KEY_PREFIX`).
    pub fn new(prefix: &str) -> BookKeys {
        let tag = format!("{prefix}{{ratelimit_overrides}}");
        BookKeys {
            entries: format!("{tag}:entries"),
            version: format!("{tag}:version"),
            log: format!("{tag}:log"),
        }
    }
}

/// A stored entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BookEntry {
    /// Its id (the layer's canonical name of its domain and descriptor).
    pub id: String,
    /// The version of the change that wrote it.
    pub version: u64,
    /// When it expires, in milliseconds since the Unix epoch; 0: never.
    pub expires_at_ms: u64,
    /// The record, as the layer wrote it.
    pub record: String,
}

impl BookEntry {
    /// Whether it has expired at `now_ms`.
    pub fn expired(&self, now_ms: u64) -> bool {
        self.expires_at_ms != 0 && self.expires_at_ms <= now_ms
    }

    /// The entry as a hash value: `"<version> <expires at> <record>"`.
    pub fn value(&self) -> String {
        format!("{} {} {}", self.version, self.expires_at_ms, self.record)
    }

    /// The entry `id` from its hash value; `None` if it is not one.
    pub fn parse(id: String, value: &str) -> Option<BookEntry> {
        let mut parts = value.splitn(3, ' ');
        let version = parts.next()?.parse().ok()?;
        let expires_at_ms = parts.next()?.parse().ok()?;
        let record = parts.next()?.to_string();
        Some(BookEntry {
            id,
            version,
            expires_at_ms,
            record,
        })
    }
}

/// A put (`record: Some`) or a delete (`None`) of entry `id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BookWrite {
    /// The entry.
    pub id: String,
    /// The new record, or `None` to delete the entry.
    pub record: Option<String>,
    /// The new entry's expiry (ms since the epoch; 0: never).
    pub expires_at_ms: u64,
    /// The version the write replaces (`0`: the entry must not exist);
    /// `None`: whatever it is.
    pub if_version: Option<u64>,
    /// The most live entries the book may hold.
    pub max_entries: usize,
    /// The writer's clock, ms since the epoch: entries that expired by
    /// then are dropped.
    pub now_ms: u64,
    /// The change's log line without its closing brace: a JSON object the
    /// store completes with `,"version":V,"before":<record or null>}`.
    pub log_head: String,
}

/// One step on the book.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BookStep {
    /// Every entry, unless the book's version is `known`.
    Read {
        /// The version the reader holds.
        known: u64,
    },
    /// A change.
    Write(BookWrite),
    /// The newest `count` log lines, oldest first.
    Log {
        /// How many.
        count: usize,
    },
}

/// A book job: steps on the book at `keys`, each answered on its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BookWork {
    /// Where the book is.
    pub keys: BookKeys,
    /// The node that serves the book's slot; `None`: not known.
    pub node: Option<NodeId>,
    /// The steps, in order.
    pub steps: Vec<BookStep>,
}

/// What a step answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BookAnswer {
    /// The book is still at the version the reader holds.
    Unchanged,
    /// The book at `version`: every entry, expired ones included.
    Snapshot {
        /// Its version.
        version: u64,
        /// Its entries, in no order.
        entries: Vec<BookEntry>,
    },
    /// The change was made, as version `version`; `before` is the entry it
    /// replaced or deleted.
    Written {
        /// The change's version.
        version: u64,
        /// The entry before, if there was one.
        before: Option<BookEntry>,
    },
    /// Refused: the entry's version is `current` (0: none), not the one
    /// the write named.
    Stale {
        /// The entry's version.
        current: u64,
    },
    /// Refused: the book holds `max_entries` live entries.
    Full,
    /// A delete of an entry that does not exist.
    Missing,
    /// Log lines, oldest first.
    Log(Vec<String>),
}

/// One answer per step, in order.
pub type BookReply = Vec<Result<BookAnswer, StoreError>>;

/// The log line of a change: `head` completed with its version and the
/// record before it.
pub fn log_line(head: &str, version: u64, before: Option<&BookEntry>) -> String {
    let before = before.map_or("null", |b| b.record.as_str());
    format!("{head},\"version\":{version},\"before\":{before}}}")
}

/// A book in this process: what the memory store and memcache keep, for
/// this instance alone.
#[derive(Debug, Default)]
pub struct MemoryBook {
    inner: Mutex<Book>,
}

#[derive(Debug, Default)]
struct Book {
    version: u64,
    entries: std::collections::HashMap<String, BookEntry>,
    log: std::collections::VecDeque<String>,
}

impl MemoryBook {
    /// An empty book.
    pub fn new() -> Arc<MemoryBook> {
        Arc::new(MemoryBook::default())
    }

    /// Every step of `work`, each atomic.
    pub fn run(&self, work: &BookWork) -> BookReply {
        work.steps.iter().map(|s| Ok(self.step(s))).collect()
    }

    fn step(&self, step: &BookStep) -> BookAnswer {
        let mut book = self.inner.lock();
        match step {
            BookStep::Read { known } if *known == book.version => BookAnswer::Unchanged,
            BookStep::Read { .. } => BookAnswer::Snapshot {
                version: book.version,
                entries: book.entries.values().cloned().collect(),
            },
            BookStep::Log { count } => {
                let skip = book.log.len().saturating_sub(*count);
                BookAnswer::Log(book.log.iter().skip(skip).cloned().collect())
            }
            BookStep::Write(w) => book.write(w),
        }
    }
}

impl Book {
    fn write(&mut self, w: &BookWrite) -> BookAnswer {
        if self.entries.get(&w.id).is_some_and(|e| e.expired(w.now_ms)) {
            self.entries.remove(&w.id);
        }
        if w.record.is_some()
            && !self.entries.contains_key(&w.id)
            && self.entries.len() >= w.max_entries
        {
            self.entries.retain(|_, e| !e.expired(w.now_ms));
        }
        let current = self.entries.get(&w.id);
        let current_version = current.map_or(0, |e| e.version);
        if w.if_version.is_some_and(|v| v != current_version) {
            return BookAnswer::Stale {
                current: current_version,
            };
        }
        match (&w.record, current) {
            (None, None) => return BookAnswer::Missing,
            (Some(_), None) if self.entries.len() >= w.max_entries => return BookAnswer::Full,
            _ => {}
        }
        self.version += 1;
        let version = self.version;
        let before = match &w.record {
            Some(record) => self.entries.insert(
                w.id.clone(),
                BookEntry {
                    id: w.id.clone(),
                    version,
                    expires_at_ms: w.expires_at_ms,
                    record: record.clone(),
                },
            ),
            None => self.entries.remove(&w.id),
        };
        self.log
            .push_back(log_line(&w.log_head, version, before.as_ref()));
        while self.log.len() > LOG_LINES {
            self.log.pop_front();
        }
        BookAnswer::Written { version, before }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(id: &str, if_version: Option<u64>) -> BookStep {
        BookStep::Write(BookWrite {
            id: id.into(),
            record: Some(format!("{{\"id\":\"{id}\"}}")),
            expires_at_ms: 0,
            if_version,
            max_entries: 2,
            now_ms: 1_000,
            log_head: format!("{{\"id\":\"{id}\""),
        })
    }

    fn work(steps: Vec<BookStep>) -> BookWork {
        BookWork {
            keys: BookKeys::new(""),
            node: None,
            steps,
        }
    }

    fn one(book: &MemoryBook, step: BookStep) -> BookAnswer {
        book.run(&work(vec![step]))
            .remove(0)
            .expect("the memory book always answers")
    }

    #[test]
    fn every_change_takes_the_next_version_and_a_reader_at_it_sees_no_change() {
        let book = MemoryBook::default();
        assert_eq!(
            one(&book, put("a", None)),
            BookAnswer::Written {
                version: 1,
                before: None
            }
        );
        let BookAnswer::Written {
            version: 2,
            before: Some(before),
        } = one(&book, put("a", Some(1)))
        else {
            panic!("the second put replaces version 1");
        };
        assert_eq!(before.version, 1);
        assert_eq!(
            one(&book, BookStep::Read { known: 2 }),
            BookAnswer::Unchanged
        );
        let BookAnswer::Snapshot { version, entries } = one(&book, BookStep::Read { known: 1 })
        else {
            panic!("a reader behind gets the book");
        };
        assert_eq!((version, entries.len(), entries[0].version), (2, 1, 2));
    }

    #[test]
    fn a_write_naming_a_stale_version_is_refused_and_changes_nothing() {
        let book = MemoryBook::default();
        one(&book, put("a", None));
        assert_eq!(
            one(&book, put("a", Some(0))),
            BookAnswer::Stale { current: 1 }
        );
        assert_eq!(
            one(&book, put("b", Some(3))),
            BookAnswer::Stale { current: 0 }
        );
        assert_eq!(
            one(&book, BookStep::Read { known: 1 }),
            BookAnswer::Unchanged
        );
    }

    #[test]
    fn a_full_book_refuses_a_new_id_but_not_a_change_of_an_old_one() {
        let book = MemoryBook::default();
        one(&book, put("a", None));
        one(&book, put("b", None));
        assert_eq!(one(&book, put("c", None)), BookAnswer::Full);
        assert!(matches!(
            one(&book, put("a", None)),
            BookAnswer::Written { version: 3, .. }
        ));
    }

    #[test]
    fn expired_entries_are_dropped_at_a_write_and_never_counted() {
        let book = MemoryBook::default();
        let mut short = put("a", None);
        if let BookStep::Write(w) = &mut short {
            w.expires_at_ms = 500;
        }
        one(&book, short);
        one(&book, put("b", None));
        // `a` expired at 500; the write at 1000 drops it, so `c` fits.
        assert!(matches!(
            one(&book, put("c", None)),
            BookAnswer::Written { before: None, .. }
        ));
    }

    #[test]
    fn a_delete_removes_and_a_delete_of_nothing_is_missing() {
        let book = MemoryBook::default();
        one(&book, put("a", None));
        let delete = |id: &str| {
            BookStep::Write(BookWrite {
                record: None,
                ..match put(id, None) {
                    BookStep::Write(w) => w,
                    _ => unreachable!(),
                }
            })
        };
        assert!(matches!(
            one(&book, delete("a")),
            BookAnswer::Written {
                version: 2,
                before: Some(_)
            }
        ));
        assert_eq!(one(&book, delete("a")), BookAnswer::Missing);
    }

    #[test]
    fn the_log_has_one_line_per_change_with_its_version_and_the_record_before() {
        let book = MemoryBook::default();
        one(&book, put("a", None));
        one(&book, put("a", None));
        let BookAnswer::Log(lines) = one(&book, BookStep::Log { count: 10 }) else {
            panic!("a log");
        };
        assert_eq!(
            lines,
            vec![
                r#"{"id":"a","version":1,"before":null}"#.to_string(),
                r#"{"id":"a","version":2,"before":{"id":"a"}}"#.to_string(),
            ]
        );
        let BookAnswer::Log(last) = one(&book, BookStep::Log { count: 1 }) else {
            panic!("a log");
        };
        assert_eq!(last.len(), 1);
    }

    #[test]
    fn an_entry_survives_its_hash_value() {
        let e = BookEntry {
            id: "x".into(),
            version: 7,
            expires_at_ms: 0,
            record: "{\"a\": \"b c\"}".into(),
        };
        assert_eq!(BookEntry::parse("x".into(), &e.value()), Some(e));
        assert_eq!(BookEntry::parse("x".into(), "junk"), None);
    }
}
