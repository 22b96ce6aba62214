//! The per-tenant overrides' book on Redis: `overrides.lua`, one step per
//! call (a read of an unchanged book, one `GET`), through the script-call path of the limits ([`super::node`]'s
//! fail-fast, `NOSCRIPT` reload and error kinds). The book's three keys
//! share one hash tag, so on Redis Cluster they are one slot, and every
//! step is atomic there.

use std::sync::LazyLock;

use fred::types::scripts::Script;
use fred::types::Value;

use super::node::Backend;
use crate::store::overrides::{BookAnswer, BookEntry, BookStep, BookWork, LOG_LINES};
use crate::store::{StoreError, StoreErrorKind};

static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::from_lua(super::scripts::OVERRIDES));

/// One step of `work` on `backend`. A read whose version is current is a
/// plain `GET` of the version (the every-250-ms poll of every instance);
/// only a changed book is read by the script.
pub(super) async fn call(
    backend: &Backend,
    work: &BookWork,
    step: &BookStep,
) -> Result<BookAnswer, StoreError> {
    let k = &work.keys;
    if let BookStep::Read { known } = step {
        let version = backend.get(&k.version).await?;
        let version: u64 = version
            .as_deref()
            .unwrap_or("0")
            .parse()
            .map_err(|_| wrong())?;
        if version == *known {
            return Ok(BookAnswer::Unchanged);
        }
    }
    let keys = vec![k.entries.clone(), k.version.clone(), k.log.clone()];
    let argv: Vec<Value> = match step {
        BookStep::Read { known } => vec!["read".into(), known.to_string().into()],
        BookStep::Log { count } => vec!["log".into(), count.to_string().into()],
        BookStep::Write(w) => vec![
            "write".into(),
            w.id.as_str().into(),
            w.record.as_deref().unwrap_or("").into(),
            w.expires_at_ms.to_string().into(),
            w.if_version
                .map_or_else(|| "-1".to_string(), |v| v.to_string())
                .into(),
            w.max_entries.to_string().into(),
            w.now_ms.to_string().into(),
            LOG_LINES.to_string().into(),
            w.log_head.as_str().into(),
        ],
    };
    let reply: Vec<Value> = backend.call_script(&SCRIPT, keys, argv).await?;
    parse(step, reply)
}

fn wrong() -> StoreError {
    StoreError::new(
        StoreErrorKind::Rejected,
        "unexpected reply from the overrides script",
    )
}

fn text(v: Value) -> Result<String, StoreError> {
    v.into_string().ok_or_else(wrong)
}

fn number(v: Value) -> Result<u64, StoreError> {
    match v {
        Value::Integer(n) => u64::try_from(n).map_err(|_| wrong()),
        other => text(other)?.parse().map_err(|_| wrong()),
    }
}

fn parse(step: &BookStep, reply: Vec<Value>) -> Result<BookAnswer, StoreError> {
    let mut values = reply.into_iter();
    match step {
        BookStep::Read { .. } => {
            let version = number(values.next().ok_or_else(wrong)?)?;
            let rest: Vec<Value> = values.collect();
            if rest.is_empty() {
                // Unchanged, or a book with no entries at a new version.
                return Ok(match step {
                    BookStep::Read { known } if *known == version => BookAnswer::Unchanged,
                    _ => BookAnswer::Snapshot {
                        version,
                        entries: Vec::new(),
                    },
                });
            }
            let mut entries = Vec::with_capacity(rest.len() / 2);
            let mut pairs = rest.into_iter();
            while let (Some(id), Some(value)) = (pairs.next(), pairs.next()) {
                let id = text(id)?;
                let value = text(value)?;
                match BookEntry::parse(id, &value) {
                    Some(e) => entries.push(e),
                    None => tracing::warn!("overrides: an entry that is not one: {value:?}"),
                }
            }
            Ok(BookAnswer::Snapshot { version, entries })
        }
        BookStep::Log { .. } => Ok(BookAnswer::Log(values.map(text).collect::<Result<_, _>>()?)),
        BookStep::Write(w) => {
            let tag = text(values.next().ok_or_else(wrong)?)?;
            match tag.as_str() {
                "written" => {
                    let version = number(values.next().ok_or_else(wrong)?)?;
                    let before = text(values.next().ok_or_else(wrong)?)?;
                    let before = match before.is_empty() {
                        true => None,
                        false => Some(BookEntry::parse(w.id.clone(), &before).ok_or_else(wrong)?),
                    };
                    Ok(BookAnswer::Written { version, before })
                }
                "stale" => Ok(BookAnswer::Stale {
                    current: number(values.next().ok_or_else(wrong)?)?,
                }),
                "full" => Ok(BookAnswer::Full),
                "missing" => Ok(BookAnswer::Missing),
                _ => Err(wrong()),
            }
        }
    }
}
