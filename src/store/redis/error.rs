//! Redis errors read as the store's failures: which mean the node cannot
//! answer now (for the breaker and the failure policies) and which are
//! Redis's own answer (never a node's failure).

use crate::store::{StoreError, StoreErrorKind};

/// `e` as a store error: a timeout, an unreachable or refusing node
/// (unavailable), or Redis's own error reply (rejected).
pub(super) fn store_error(e: &fred::error::Error) -> StoreError {
    use fred::error::ErrorKind as K;
    let kind = match e.kind() {
        K::Timeout => StoreErrorKind::Timeout,
        K::IO | K::Canceled | K::Cluster | K::Sentinel | K::Routing | K::Backpressure => {
            StoreErrorKind::Unavailable
        }
        // A Redis at `maxmemory` under `noeviction` refuses writes, and a
        // Cluster in a failover refuses or cannot take them: the store
        // cannot count now, as if it were down, and may again soon.
        _ if is_out_of_memory(e.details()) || is_unavailable_now(e.details()) => {
            StoreErrorKind::Unavailable
        }
        _ => StoreErrorKind::Rejected,
    };
    let message = if e.details().is_empty() {
        format!("{:?}", e.kind())
    } else {
        e.details().to_string()
    };
    StoreError::new(kind, message)
}

/// Whether an error says the node cannot serve the call now but may soon,
/// as in a failover: the client gave up writing it to a connection (fred's
/// `Too many failed write attempts`), or Redis refused it for its state:
/// `CLUSTERDOWN` (slots unserved), `TRYAGAIN` (a slot migrating), `LOADING`
/// (a restarted node reading its data), `MASTERDOWN` (a replica that lost
/// its primary), `READONLY` (a write to a demoted primary before the
/// routes changed), `NOREPLICAS` (too few replicas for `min-replicas`), also
/// inside a script's error.
fn is_unavailable_now(details: &str) -> bool {
    const STATES: [&str; 6] = [
        "CLUSTERDOWN",
        "TRYAGAIN",
        "LOADING",
        "MASTERDOWN",
        "READONLY",
        "NOREPLICAS",
    ];
    details.starts_with("Too many failed write attempts")
        || STATES
            .iter()
            .any(|s| details.starts_with(s) || details.contains(&format!("-{s} ")))
}

/// Whether an error reply is Redis's refusal of a write at `maxmemory`
/// (`OOM command not allowed when used memory > 'maxmemory'`, also inside a
/// script's error).
fn is_out_of_memory(details: &str) -> bool {
    details.starts_with("OOM ") || details.contains("OOM command not allowed")
}

/// A per-node call that touched a key its primary no longer serves (the
/// routes changed under a failover or a resharding) did not reach the
/// key's node: unreachable, as a call to a failed node is, so that the
/// routing table is read again and the items' policies answer.
pub(super) fn moved_key(e: StoreError) -> StoreError {
    let moved = e.message.contains("non local key")
        || e.message.starts_with("MOVED ")
        || e.message.starts_with("ASK ");
    if e.kind == StoreErrorKind::Rejected && moved {
        StoreError::new(StoreErrorKind::Unavailable, e.message)
    } else {
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_its_primary_no_longer_serves_is_unreachable_not_refused() {
        // Redis 7 and Valkey 8 both word it so.
        let moved = StoreError::new(
            StoreErrorKind::Rejected,
            "ERR Script attempted to access a non local key in a cluster node script: 3fb5, on @user_script:2.",
        );
        assert_eq!(moved_key(moved).kind, StoreErrorKind::Unavailable);
        let other = StoreError::new(StoreErrorKind::Rejected, "ERR wrong number of arguments");
        assert_eq!(moved_key(other).kind, StoreErrorKind::Rejected);
    }

    #[test]
    fn a_redis_out_of_memory_is_the_stores_failure_not_an_answer() {
        use fred::error::{Error, ErrorKind};
        for text in [
            "OOM command not allowed when used memory > 'maxmemory'.",
            "ERR Error running script (call to f_x): @user_script:12: @user_script: 12: -OOM command not allowed when used memory > 'maxmemory'.",
        ] {
            let e = store_error(&Error::new(ErrorKind::Unknown, text));
            assert_eq!(e.kind, StoreErrorKind::Unavailable, "{text}");
        }
        let wrong = store_error(&Error::new(ErrorKind::Unknown, "WRONGTYPE Operation"));
        assert_eq!(wrong.kind, StoreErrorKind::Rejected);
    }

    #[test]
    fn a_failover_s_refusals_are_the_stores_failure_not_an_answer() {
        use fred::error::{Error, ErrorKind};
        for text in [
            "Too many failed write attempts.",
            "CLUSTERDOWN The cluster is down",
            "TRYAGAIN Multiple keys request during rehashing of slot",
            "LOADING Redis is loading the dataset in memory",
            "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
            "READONLY You can't write against a read only replica.",
            "NOREPLICAS Not enough good replicas to write.",
            "ERR Error running script (call to f_x): @user_script:3: -READONLY You can't write against a read only replica.",
        ] {
            let e = store_error(&Error::new(ErrorKind::Unknown, text));
            assert_eq!(e.kind, StoreErrorKind::Unavailable, "{text}");
        }
        let script = store_error(&Error::new(
            ErrorKind::Unknown,
            "ERR Error running script: attempt to compare nil with number",
        ));
        assert_eq!(
            script.kind,
            StoreErrorKind::Rejected,
            "a script's own error"
        );
    }
}
