//! RLQS's demand boards on Redis: one hash per quota, every step of a
//! report on one node in one call of `board.lua`, through the script-call
//! path of the limits ([`super::node`]'s fail-fast, `NOSCRIPT` reload and
//! error kinds). A board is one key, so on Redis Cluster one slot; a
//! report's boards on one primary go in one call with the per-node key
//! layout where the cluster takes script flags, else one call per slot.

use std::sync::LazyLock;

use fred::types::scripts::Script;
use fred::types::Value;

use super::args::int;
use super::node::Backend;
use crate::store::board::{Assignments, BoardOp, BoardWork};
use crate::store::{StoreError, StoreErrorKind};

use super::scripts::{BOARD, BOARD_PER_NODE};

static SCRIPTS: LazyLock<(Script, Script)> =
    LazyLock::new(|| (Script::from_lua(BOARD), Script::from_lua(BOARD_PER_NODE)));

/// Millionths of a request per second: how rates cross the script.
const MICRO: f64 = 1e6;

fn micro(rate: f64) -> i64 {
    if rate.is_finite() {
        (rate.max(0.0) * MICRO).round().min(i64::MAX as f64) as i64
    } else {
        0
    }
}

/// The steps of `work` at `positions`, all on one node, in one call;
/// `per_node`: the call goes to a Cluster primary with the per-node layout.
pub(super) async fn call(
    backend: &Backend,
    per_node: bool,
    work: &BoardWork,
    positions: &[usize],
) -> Result<Vec<Assignments>, StoreError> {
    let steps: Vec<_> = positions.iter().map(|&i| &work.steps[i]).collect();
    let keys: Vec<String> = steps.iter().map(|s| s.key.clone()).collect();
    let mut args: Vec<Value> = Vec::with_capacity(3 + 4 * steps.len());
    args.push(Value::from(work.instance.as_ref()));
    args.push(int(
        u64::try_from(work.ttl.as_millis().max(1)).unwrap_or(u64::MAX)
    ));
    args.push(int(steps.len() as u64));
    for s in &steps {
        let (op, line, demand) = match s.op {
            BoardOp::Sync => (0, 0, 0.0),
            BoardOp::Report { line, demand } => (1, line, demand),
            BoardOp::Leave { line } => (2, line, 0.0),
        };
        args.push(int(op));
        args.push(int(line));
        args.push(Value::from(micro(demand)));
        args.push(Value::from(micro(s.rate)));
    }
    let (single, node) = &*SCRIPTS;
    let values = if per_node {
        // The first key is declared and routes the call; all of them
        // follow their count in ARGV (see node_keys.lua).
        let routing: Vec<String> = keys.first().cloned().into_iter().collect();
        let mut argv = Vec::with_capacity(1 + keys.len() + args.len());
        argv.push(int(keys.len() as u64));
        argv.extend(keys.into_iter().map(Value::from));
        argv.extend(args);
        backend.call_raw(node, routing, argv).await?
    } else {
        backend.call_raw(single, keys, args).await?
    };
    parse(&values, steps.len())
}

/// The script's reply: per board, a count m and m (line, assigned) pairs.
fn parse(values: &[i64], boards: usize) -> Result<Vec<Assignments>, StoreError> {
    let wrong = || {
        StoreError::new(
            StoreErrorKind::Rejected,
            "unexpected reply from the board script",
        )
    };
    let mut out = Vec::with_capacity(boards);
    let mut rest = values;
    for _ in 0..boards {
        let (&m, tail) = rest.split_first().ok_or_else(wrong)?;
        let m = usize::try_from(m).map_err(|_| wrong())?;
        let pairs = tail.get(..2 * m).ok_or_else(wrong)?;
        let mut lines: Vec<(u64, f64)> = pairs
            .chunks_exact(2)
            .map(|p| (u64::try_from(p[0]).unwrap_or(0), p[1].max(0) as f64 / MICRO))
            .collect();
        lines.sort_by_key(|(l, _)| *l);
        out.push(Assignments { lines });
        rest = &tail[2 * m..];
    }
    if rest.is_empty() {
        Ok(out)
    } else {
        Err(wrong())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_is_cut_into_each_boards_lines() {
        let shares = parse(&[2, 7, 5_000_000, 3, 2_500_000, 0], 2).expect("well formed");
        assert_eq!(shares[0].lines, vec![(3, 2.5), (7, 5.0)]);
        assert!(shares[1].lines.is_empty());
        assert!(parse(&[2, 7, 5_000_000], 1).is_err(), "short");
        assert!(parse(&[0, 0], 1).is_err(), "long");
        assert_eq!(micro(f64::NAN), 0);
        assert_eq!(micro(0.5), 500_000);
    }
}
