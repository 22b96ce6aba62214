//! What the load saw: per in-flight slot, merged into the run's.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;

use super::Failure;

/// What one worker (one in-flight slot) saw.
pub(crate) struct Tally {
    pub(crate) latency: Histogram<u64>,
    pub(crate) ok: u64,
    pub(crate) over_limit: u64,
    pub(crate) other_code: u64,
    pub(crate) errors: u64,
    pub(crate) error_kinds: BTreeMap<String, u64>,
}

impl Tally {
    pub(crate) fn new() -> Result<Tally, Failure> {
        // 1 µs .. 1 h, 3 significant digits.
        let latency = Histogram::new_with_bounds(1, 3_600_000_000, 3)
            .map_err(|e| Failure::Fatal(format!("histogram: {e}")))?;
        Ok(Tally {
            latency,
            ok: 0,
            over_limit: 0,
            other_code: 0,
            errors: 0,
            error_kinds: BTreeMap::new(),
        })
    }

    pub(crate) fn merge(&mut self, other: Tally) -> Result<(), Failure> {
        self.latency
            .add(&other.latency)
            .map_err(|e| Failure::Fatal(format!("histogram: {e:?}")))?;
        self.ok += other.ok;
        self.over_limit += other.over_limit;
        self.other_code += other.other_code;
        self.errors += other.errors;
        for (k, v) in other.error_kinds {
            *self.error_kinds.entry(k).or_default() += v;
        }
        Ok(())
    }

    pub(crate) fn error(&mut self, kind: String) {
        self.errors += 1;
        *self.error_kinds.entry(kind).or_default() += 1;
    }
}
