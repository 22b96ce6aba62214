//! The decision audit's part of a request (see [`crate::audit`]): the
//! references of the request's audited limits added to its store work, and
//! their answers read back into the audit's rows. The store decides each
//! reference in the same atomic step as the limit it audits; nothing here
//! changes a decision.

use std::sync::Arc;

use super::checked::CheckedDescriptor;
use super::types::RateLimitRequest;
use super::Pending;
use crate::audit::{verdict, Audit, LimitFacts, Row};
use crate::config::{ConfiguredLimit, RateLimitRule};
use crate::limiter::{Limiter, SlidingLog};
use crate::store::key::reference_key;
use crate::store::{
    Answer, Check, CheckedLimit, Increment, OnFailure, ReferenceStep, Store, StoreError,
};

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
    /// The contract's limit per window.
    contract_limit: u64,
}

/// The contract, key suffix and facts of an original-vocabulary rule.
fn original(rule: &RateLimitRule) -> Option<(Limiter, String, LimitFacts)> {
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
    };
    Some((
        Limiter::SlidingLog(contract),
        format!("ow:{seconds}s"),
        facts,
    ))
}

/// The contract and facts of an opt-in limit (the logical limit, not a
/// sub-bucket).
fn configured(l: &ConfiguredLimit) -> Option<(Limiter, LimitFacts)> {
    let limiter = l.limiter;
    let facts = LimitFacts {
        algorithm: limiter.name().as_str(),
        limit: limiter.limit(),
        window_seconds: limiter.period().as_secs(),
        burst: matches!(limiter, Limiter::TokenBucket(_)).then(|| limiter.capacity()),
        shards: l.sub_buckets.len().max(1) as u64,
        lease: l.hot.lease,
    };
    Some((limiter.reference_of().ok()?, facts))
}

/// Appends to `batch` the reference of every audited binding check of
/// `described` (after all of them, so that each descriptor's checks stay
/// where `described` says).
pub(super) fn add_check_references(
    audit: &Audit,
    store: &dyn Store,
    prefix: &str,
    request: &RateLimitRequest,
    batch: &mut Vec<Check>,
    described: &[CheckedDescriptor],
) -> Vec<Audited> {
    let mut audited = Vec::new();
    for d in described {
        let rule = &d.limit.rule;
        let entries = &request.descriptors[d.index].entries;
        let pattern = d.limit.share_threshold_key_pattern.as_deref();
        for (n, subject) in d.checks.clone().enumerate() {
            if !batch[subject].binding {
                continue;
            }
            let found = match rule.limits.get(n) {
                Some(l) => configured(l).map(|(c, f)| (c, l.key_suffix.clone(), f)),
                None if rule.is_original() => original(rule),
                None => None,
            };
            let Some((contract, suffix, facts)) = found else {
                continue;
            };
            let key = reference_key(prefix, &request.domain, entries, pattern, &suffix);
            if !audit.covers(&key, &contract)
                || store.reference_step(&batch[subject].key, &key) == ReferenceStep::Unsupported
            {
                continue;
            }
            let Some(row) = audit.book().row(&d.limit.stats_key, &suffix, || facts) else {
                continue;
            };
            audited.push(Audited {
                subject,
                reference: batch.len(),
                row,
                cost: d.hits,
                window: !matches!(contract, Limiter::TokenBucket(_)),
                contract_limit: contract.limit(),
            });
            batch.push(Check {
                key,
                limit: CheckedLimit::Reference(contract),
                cost: d.hits,
                binding: false,
                on_failure: OnFailure::Error,
                lease: false,
            });
        }
    }
    audited
}

/// Records the outcome of every audited check of a reply.
pub(super) fn judge_checks(
    audited: &[Audited],
    answers: &[Result<Answer, StoreError>],
    committed: bool,
) {
    for a in audited {
        let outcome = verdict::of_check(
            &answers[a.subject],
            committed,
            &answers[a.reference],
            a.cost,
            a.window,
        );
        a.row.record(outcome);
    }
}

/// `batch` (one increment per pending descriptor, in order) with the
/// reference of each audited one right after it, when the store decides
/// it in the same step; and where each landed.
pub(super) fn add_count_references(
    audit: &Audit,
    store: &dyn Store,
    prefix: &str,
    request: &RateLimitRequest,
    batch: Vec<Increment>,
    pending: &[&Pending],
) -> (Vec<Increment>, Vec<Audited>) {
    let mut out = Vec::with_capacity(batch.len() + 1);
    let mut audited = Vec::new();
    for (inc, p) in batch.into_iter().zip(pending) {
        let subject = out.len();
        let reference = (!p.limit.rule.shadow_mode)
            .then(|| original(&p.limit.rule))
            .flatten()
            .and_then(|(contract, suffix, facts)| {
                let entries = &request.descriptors[p.index].entries;
                let pattern = p.limit.share_threshold_key_pattern.as_deref();
                let key = reference_key(prefix, &request.domain, entries, pattern, &suffix);
                let same = store.reference_step(&inc.key, &key) == ReferenceStep::Same;
                if !(same && audit.covers(&key, &contract)) {
                    return None;
                }
                let row = audit.book().row(&p.limit.stats_key, &suffix, || facts)?;
                Some((key, contract, row))
            });
        let reference = reference.map(|(key, contract, row)| {
            audited.push(Audited {
                subject,
                reference: subject + 1,
                row,
                cost: inc.hits,
                window: true,
                contract_limit: contract.limit(),
            });
            Increment {
                key,
                hits: inc.hits,
                window: inc.window,
                ttl_seconds: 0,
                limit: contract.limit(),
                on_failure: OnFailure::Error,
                reference: Some(contract),
            }
        });
        out.push(inc);
        out.extend(reference);
    }
    (out, audited)
}

/// Records the outcome of every audited counter of a reply and returns the
/// answers without the references'.
pub(super) fn judge_counts(
    audited: &[Audited],
    batch: &[Increment],
    mut answers: Vec<Result<Answer, StoreError>>,
) -> Vec<Result<Answer, StoreError>> {
    for a in audited {
        let subject = &batch[a.subject];
        let outcome = verdict::of_count(
            &answers[a.subject],
            a.cost,
            subject.limit,
            &answers[a.reference],
            a.contract_limit,
        );
        a.row.record(outcome);
    }
    let mut position = 0;
    answers.retain(|_| {
        let keep = batch[position].reference.is_none();
        position += 1;
        keep
    });
    answers
}
