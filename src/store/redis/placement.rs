//! Which Redis node serves a key ([`RedisPlacement`]), and which script
//! call serves a work's items: grouped by deployment (main or per-second)
//! and [`Route`] (a Cluster's primary, or a slot).

use std::sync::Arc;
use std::time::Duration;

use fred::interfaces::ClusterInterface;
use parking_lot::RwLock;
use tokio::time::Instant;

use super::args::{Destination, Route};
use super::node::{Backend, Node};
use crate::store::{NodeId, Placement, ReferenceStep};

/// Which Redis node serves a key: the per-second Redis for one-second
/// windows when there is one; on a cluster, the primary that owns the key's
/// slot, from a table refreshed from fred's routing table at most once a
/// second.
#[derive(Debug)]
pub struct RedisPlacement {
    main: Arc<Backend>,
    per_second: Option<Arc<Backend>>,
    /// Off a cluster nothing; on one, slot ranges → primary.
    routes: RwLock<Routes>,
}

/// How stale the slot → primary table behind [`Placement::node_of`] may get.
/// fred follows a failover itself (MOVED, resync); this only names breakers.
pub(super) const ROUTES_MAX_AGE: Duration = Duration::from_secs(1);

/// Slot ranges of a cluster and their primaries.
#[derive(Debug, Default)]
struct Routes {
    read_at: Option<Instant>,
    ranges: Vec<(u16, u16, NodeId)>,
    /// The ranges were read from a primary itself ([`RedisPlacement::set_routes`]):
    /// fred's cached tables, which may lag behind, are not read again.
    read_from_primary: bool,
}

/// Batch positions grouped by the script call that can serve them, in
/// order of first appearance. A request touches few nodes, so a linear
/// search beats a map here.
type Groups = Vec<(Destination, Vec<usize>)>;

impl RedisPlacement {
    /// Positions of `keys` grouped by the script call that can serve them
    /// (their [`Destination`]). Each key comes with whether it counts a
    /// one-second window (those go to the per-second Redis when there is
    /// one), whether its count must reach a replica (those go apart), and
    /// the node its work named for it (this store's
    /// [`Placement`], asked once when the work was built). On the main
    /// cluster with the per-node script, keys group by that primary, or, for
    /// a key built without one, by their slot's primary in the routing
    /// table (at most [`ROUTES_MAX_AGE`] old; a key that moved since fails
    /// its call, which refreshes the table); else by slot.
    pub(super) fn group_by_node<'k>(
        &self,
        keys: impl Iterator<Item = (&'k str, bool, bool, Option<&'k NodeId>)>,
    ) -> Groups {
        let mut groups = Groups::new();
        for (i, (key, one_second, replicated, named)) in keys.enumerate() {
            let per_second = self.per_second.is_some() && one_second;
            let backend = self.backend(one_second);
            let per_node = !per_second && backend.node_script.is_some();
            let route = match (backend.clustered, per_node, named) {
                (false, _, _) => Route::Slot(0),
                (true, true, Some(node)) => Route::Primary(node.clone()),
                (true, _, _) => {
                    let slot = fred::util::redis_keyslot(key.as_bytes());
                    per_node
                        .then(|| self.primary_of(slot))
                        .flatten()
                        .map_or(Route::Slot(slot), Route::Primary)
                }
            };
            let to = Destination {
                per_second,
                route,
                replicated,
            };
            match groups.iter_mut().find(|(d, _)| *d == to) {
                Some((_, positions)) => positions.push(i),
                None => groups.push((to, vec![i])),
            }
        }
        groups
    }

    /// The deployment that keeps a key: the per-second Redis for a
    /// one-second window when there is one, else the main one.
    fn backend(&self, one_second: bool) -> &Backend {
        match (&self.per_second, one_second) {
            (Some(b), true) => b,
            _ => &self.main,
        }
    }

    /// Reads the slot table afresh at its next use.
    pub(super) fn forget_routes(&self) {
        self.routes.write().read_at = None;
    }

    /// Follows a `MOVED <slot> <host:port>` reply: the range that holds
    /// the slot is served from the named node, until the next table read
    /// says otherwise. After a failover every slot of the old primary
    /// moves, and each of its ranges is fixed by its first redirected call
    /// instead of after a topology read; whether the message was a
    /// redirection at all.
    pub(super) fn follow_moved(&self, message: &str) -> bool {
        let Some((slot, to)) = moved_to(message) else {
            return false;
        };
        let mut routes = self.routes.write();
        if let Some(range) = routes
            .ranges
            .iter_mut()
            .find(|(start, end, _)| (*start..=*end).contains(&slot))
        {
            range.2 = to;
        }
        true
    }

    /// The slot table as a primary answered `CLUSTER SLOTS` just now.
    pub(super) fn set_routes(&self, table: &fred::types::cluster::ClusterRouting) {
        let mut routes = self.routes.write();
        routes.ranges = ranges_of(table);
        routes.read_at = Some(Instant::now());
        routes.read_from_primary = true;
    }

    pub(super) fn new(main: &Node, per_second: Option<&Node>) -> RedisPlacement {
        RedisPlacement {
            main: Arc::clone(&main.backend),
            per_second: per_second.map(|n| Arc::clone(&n.backend)),
            routes: RwLock::default(),
        }
    }

    /// The primary that owns `slot`: from the table a primary last answered
    /// (see [`RedisPlacement::set_routes`]), else from fred's cached table
    /// at most [`ROUTES_MAX_AGE`] old.
    fn primary_of(&self, slot: u16) -> Option<NodeId> {
        let find = |routes: &Routes| {
            routes
                .ranges
                .iter()
                .find(|(start, end, _)| (*start..=*end).contains(&slot))
                .map(|(_, _, node)| node.clone())
        };
        {
            let routes = self.routes.read();
            let fresh = routes
                .read_at
                .is_some_and(|at| at.elapsed() < ROUTES_MAX_AGE);
            if fresh || routes.read_from_primary {
                return find(&routes);
            }
        }
        let mut routes = self.routes.write();
        // The topology client's table first: it is read again after every
        // failed call (see `RedisStore::resync_soon`), while a decision
        // client may still be reconnecting to a dead primary.
        let state = self
            .main
            .discovery
            .as_ref()
            .and_then(|d| d.next().cached_cluster_state())
            .or_else(|| self.main.pool.next().cached_cluster_state());
        if let Some(state) = state {
            routes.ranges = ranges_of(&state);
        }
        routes.read_at = Some(Instant::now());
        find(&routes)
    }
}

/// The slot and the node a `MOVED <slot> <host:port>` error names, also
/// inside a longer message.
fn moved_to(message: &str) -> Option<(u16, NodeId)> {
    let rest = &message[message.find("MOVED ")? + "MOVED ".len()..];
    let mut words = rest.split_whitespace();
    let slot = words.next()?.parse().ok()?;
    let to = words.next().filter(|a| a.contains(':'))?;
    Some((slot, NodeId::new(to)))
}

/// A routing table's ranges and the primary of each.
fn ranges_of(table: &fred::types::cluster::ClusterRouting) -> Vec<(u16, u16, NodeId)> {
    table
        .slots()
        .iter()
        .map(|r| {
            (
                r.start,
                r.end,
                NodeId::new(&format!("{}:{}", r.primary.host, r.primary.port)),
            )
        })
        .collect()
}

impl Placement for RedisPlacement {
    fn node_of(&self, key: &str, one_second: bool) -> Option<NodeId> {
        let backend = self.backend(one_second);
        if backend.clustered {
            self.primary_of(fred::util::redis_keyslot(key.as_bytes()))
        } else {
            Some(backend.name.clone())
        }
    }

    /// In one script off a cluster; on one, iff both keys hash to one slot
    /// (an algorithm's reference shares its hash tag; the original's keys,
    /// which name their window, move slot every window).
    fn reference_step(&self, subject: &str, reference: &str) -> ReferenceStep {
        let slot = |k: &str| fred::util::redis_keyslot(k.as_bytes());
        if !self.main.clustered || slot(subject) == slot(reference) {
            ReferenceStep::Same
        } else {
            ReferenceStep::Separate
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moved_error_names_its_slot_and_new_primary() {
        assert_eq!(
            moved_to("MOVED 14065 127.0.0.1:44133"),
            Some((14065, NodeId::new("127.0.0.1:44133")))
        );
        assert_eq!(
            moved_to("ERR Error running script: -MOVED 3 10.0.0.2:6379 "),
            Some((3, NodeId::new("10.0.0.2:6379")))
        );
        for other in [
            "ASK 3 10.0.0.2:6379",
            "MOVED x 10.0.0.2:6379",
            "MOVED 3",
            "MOVED 3 nowhere",
        ] {
            assert_eq!(moved_to(other), None, "{other}");
        }
    }
}
