//! The decision audit's part of a request (see [`crate::audit`]): the
//! references of the request's audited limits added to its store work, and
//! their answers read back into the audit's rows. The store decides each
//! reference in the same trip as the limit it audits (in the same atomic
//! step wherever the store can); nothing here changes a decision.

use std::sync::Arc;

use super::plan::{Plan, PlanOptions};
use super::types::DecisionId;
use crate::audit::{verdict, Audit, LimitFacts, Row};
use crate::config::{ConfiguredLimit, RateLimitRule};
use crate::limiter::{Limiter, SlidingLog};
use crate::store::{Item, Limit, ReferenceStep, Reply, RuleOptions, Work};

/// One audited limit of a request's store work.
pub(super) struct Audited {
    /// The position of the limit's item in the work.
    subject: usize,
    /// The position of its reference.
    reference: usize,
    row: Arc<Row>,
    cost: u64,
    /// The contract is a window (its reference reports what it held).
    window: bool,
    /// The subject gives back (`is_negative_hits`): so does its reference,
    /// and it is counted as refunded, not compared.
    give_back: bool,
}

/// The contract, key suffix and facts of an original-vocabulary rule;
/// `None` for a calendar's, whose periods vary in length, so that no
/// trailing window of one length is its contract.
fn original(rule: &RateLimitRule) -> Option<(Limiter, String, LimitFacts)> {
    if rule.calendar.is_some() {
        return None;
    }
    let seconds = rule.unit.seconds()?;
    let limit = u64::from(rule.requests_per_unit);
    let contract = SlidingLog::reference(limit, std::time::Duration::from_secs(seconds)).ok()?;
    let facts = LimitFacts {
        algorithm: "fixed_window",
        limit,
        window_seconds: seconds,
        burst: None,
        shards: 1,
        lease: false,
        local_first_over: 0,
    };
    Some((
        Limiter::SlidingLog(contract),
        format!("ow:{seconds}s"),
        facts,
    ))
}

/// The contract and facts of an opt-in limit (the logical limit, not a
/// sub-bucket); `None` for a calendar's, as for [`original`].
fn configured(l: &ConfiguredLimit) -> Option<(Limiter, LimitFacts)> {
    if l.calendar.is_some() {
        return None;
    }
    let limiter = l.limiter;
    let facts = LimitFacts {
        algorithm: limiter.name().as_str(),
        limit: limiter.limit(),
        window_seconds: limiter.period().as_secs(),
        burst: matches!(limiter, Limiter::TokenBucket(_)).then(|| limiter.capacity()),
        shards: l.sub_buckets.len().max(1) as u64,
        lease: l.hot.lease,
        local_first_over: 0,
    };
    Some((limiter.reference_of().ok()?, facts))
}

/// Appends to the plan's work the reference of every audited limit: each
/// binding decided limit, and each original counter outside shadow mode
/// whose reference the store decides in the same step (a counter's
/// reference records iff the counter took, which only that step knows).
pub(super) fn add_references(
    audit: &Audit,
    options: &PlanOptions<'_>,
    plan: &mut Plan,
) -> Vec<Audited> {
    let Plan { work, descriptors } = plan;
    let mut audited = Vec::new();
    for d in descriptors.iter() {
        let rule = &d.limit.rule;
        for (n, subject) in d.items.clone().enumerate() {
            let item = &work.items[subject];
            let counter = matches!(item.limit, Limit::Counter(_));
            let eligible = match (counter || item.gives_back(), item.binding) {
                (true, _) => !(options.shadow_mode || rule.shadow_mode),
                (false, binding) => binding,
            };
            if !eligible {
                continue;
            }
            let found = match rule.limits.get(n) {
                Some(l) => configured(l).map(|(c, f)| (c, l.key_suffix.clone(), f)),
                None if rule.is_original() => original(rule),
                None => None,
            };
            let Some((contract, suffix, mut facts)) = found else {
                continue;
            };
            if item.rule.sync_interval.is_some() {
                // Decided from this instance's view far from its limit.
                facts.local_first_over = audit.local_first_over(facts.limit);
            }
            let key = d.key.reference(options.prefix, &suffix);
            let usable = match options.placement.reference_step(&item.key, &key) {
                ReferenceStep::Same => true,
                ReferenceStep::Separate => !counter,
                ReferenceStep::Unsupported => false,
            };
            if !usable || !audit.covers(&key, &contract) {
                continue;
            }
            let Some(row) = audit.book().row(&d.limit.stats_key, &suffix, || facts) else {
                continue;
            };
            audited.push(Audited {
                subject,
                reference: work.items.len(),
                row,
                cost: d.hits,
                window: !matches!(contract, Limiter::TokenBucket(_)),
                give_back: item.gives_back(),
            });
            let give_back = item.gives_back();
            let node = options.placement.node_of(&key, false);
            let limit = Limit::Reference {
                contract,
                subject: Some(subject),
            };
            let reference = Item {
                binding: false,
                node,
                rule: RuleOptions {
                    id: Some(rule.id.clone()),
                    ..RuleOptions::default()
                },
                ..Item::new(key, limit, d.hits)
            };
            work.items.push(match give_back {
                true => reference.giving_back(),
                false => reference,
            });
        }
    }
    audited
}

/// Records the outcome of every audited limit of a reply, decision `id`'s.
pub(super) fn judge(audited: &[Audited], work: &Work, reply: &Reply, id: DecisionId) {
    for a in audited {
        if a.give_back {
            // What was admitted less what was given back is the contract's.
            if reply.answers[a.reference].is_ok() {
                a.row.refunded(a.cost);
            }
            continue;
        }
        // A counter took iff it had a cost; the rest iff the work committed.
        let taken = match work.items[a.subject].limit {
            Limit::Counter(_) => a.cost > 0,
            _ => reply.committed,
        };
        let outcome = verdict::of(
            &reply.answers[a.subject],
            taken,
            &reply.answers[a.reference],
            a.cost,
            a.window,
        );
        a.row.record(outcome, id.0);
    }
}
