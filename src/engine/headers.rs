//! Rate-limit response headers. Pure.
//!
//! Three formats (`LIMIT_RESPONSE_HEADERS_FORMAT`):
//! - [`HeaderFormat::Original`]: the original's three headers for one chosen
//!   status ([`chosen_status`], [`headers`]), byte for byte;
//! - [`HeaderFormat::Ietf`]: `RateLimit-Policy` and `RateLimit` of
//!   draft-ietf-httpapi-ratelimit-headers-11, one list member per limit that
//!   applied, plus `Retry-After` when the request is refused ([`ietf`]);
//! - [`HeaderFormat::XRateLimit`]: Envoy's `DRAFT_VERSION_03` spelling
//!   (`X-RateLimit-Limit: 10, 10;w=1;name="per-ip", 1000;w=3600`,
//!   `X-RateLimit-Remaining`, `X-RateLimit-Reset`) ([`x_ratelimit`]).
//!
//! The structured fields are written with the `sfv` crate, so every value is
//! a valid Structured Field List (tested by parsing it back).
//!
//! What a [`Policy`] says, per algorithm: `q` is `requests_per_unit`, `w` the
//! window in seconds (`unit_multiplier` applied), `r` what remains now and
//! `t` the seconds until the status's `duration_until_reset`, rounded up. For
//! a fixed window `t` is the window's end; for a sliding window or log the
//! time until the count falls (as the algorithm reports it); for a token
//! bucket `w` is its refill period, `r` the tokens left, `t` the time until
//! it is full again (when refused: until the next token), and the vendor
//! parameter `rl-burst` gives its capacity. An in-flight limit has no
//! window: its policy is `q` slots of the draft's quota unit
//! `qu="concurrent-requests"` with no `w`, and its state `r` free slots
//! with no `t` (a slot comes back when a request ends, which no time
//! says); `X-RateLimit-Limit` lists it without `w`.

use std::time::Duration;

use crate::config::Entry;
use crate::engine::aggregate::Disposition;
use crate::engine::types::{Code, DescriptorStatus};

/// `LIMIT_RESPONSE_HEADERS_FORMAT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HeaderFormat {
    /// The original's three headers.
    #[default]
    Original,
    /// `RateLimit-Policy` and `RateLimit` (draft 11) and `Retry-After`.
    Ietf,
    /// Envoy's `X-RateLimit-*` (draft 03).
    XRateLimit,
}

/// One limit that applied to a request, as the structured fields show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Printable ASCII only (see [`policy_name`]): always a valid sf-String.
    pub name: String,
    /// `q`: requests per window.
    pub quota: u64,
    /// `w`: the window in seconds.
    pub window_seconds: u64,
    /// `r`: what remains.
    pub remaining: u64,
    /// `t`: seconds until reset, rounded up.
    pub reset_seconds: u64,
    /// `rl-burst`: a token bucket's capacity.
    pub burst: Option<u64>,
}

impl Policy {
    /// The policy of `status` (of a descriptor with `entries`), if a limit
    /// applied to it.
    pub fn of(status: &DescriptorStatus, entries: &[Entry]) -> Option<Policy> {
        let limit = status.current_limit.as_ref()?;
        Some(Policy {
            name: policy_name(&limit.name, entries),
            quota: u64::from(limit.requests_per_unit),
            window_seconds: limit.window_seconds,
            remaining: u64::from(status.limit_remaining),
            reset_seconds: status.duration_until_reset.map_or(0, ceil_seconds),
            burst: limit.burst,
        })
    }
}

impl Policy {
    /// Whether it is an in-flight limit (no window).
    pub fn in_flight(&self) -> bool {
        self.window_seconds == 0
    }
}

/// Whole seconds, rounded up: a sub-second wait is not "0".
pub fn ceil_seconds(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// A policy's name: the rule's `name`, or else the descriptor's entries as
/// `key=value` joined by `,` (`key` alone for an empty value). Bytes outside
/// printable ASCII, and `%`, are percent-encoded, so the name is a valid
/// sf-String whatever the descriptor holds, and the same descriptor always
/// gets the same name.
pub fn policy_name(rule_name: &str, entries: &[Entry]) -> String {
    let raw = if rule_name.is_empty() {
        entries
            .iter()
            .map(|e| {
                if e.value.is_empty() {
                    e.key.clone()
                } else {
                    format!("{}={}", e.key, e.value)
                }
            })
            .collect::<Vec<_>>()
            .join(",")
    } else {
        rule_name.to_string()
    };
    let mut out = String::with_capacity(raw.len());
    for b in raw.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// An sf-Integer (the fields' numbers are far below its 10^15 bound;
/// anything larger is clamped).
fn int(n: u64) -> sfv::Integer {
    let n = i64::try_from(n)
        .unwrap_or(i64::MAX)
        .min(999_999_999_999_999);
    sfv::Integer::try_from(n).unwrap_or(sfv::integer(0))
}

fn sf_string(s: &str) -> &sfv::StringRef {
    // `policy_name` leaves printable ASCII only; anything else (never seen)
    // becomes the empty string rather than an invalid field.
    sfv::StringRef::from_str(s).unwrap_or(sfv::string_ref(""))
}

/// `RateLimit-Policy`, `RateLimit` and, when the request was refused,
/// `Retry-After` (delta-seconds, at least 1). No policies, no fields.
pub fn ietf(policies: &[Policy], retry_after: Option<u64>) -> Vec<(String, String)> {
    let mut policy = sfv::ListSerializer::new();
    let mut state = sfv::ListSerializer::new();
    for p in policies {
        let item = policy
            .bare_item(sf_string(&p.name))
            .parameter(sfv::key_ref("q"), int(p.quota));
        let mut item = match p.in_flight() {
            true => item.parameter(sfv::key_ref("qu"), sfv::string_ref("concurrent-requests")),
            false => item.parameter(sfv::key_ref("w"), int(p.window_seconds)),
        };
        if let Some(b) = p.burst {
            item = item.parameter(sfv::key_ref("rl-burst"), int(b));
        }
        let _ = item.finish();
        let item = state
            .bare_item(sf_string(&p.name))
            .parameter(sfv::key_ref("r"), int(p.remaining));
        let _ = match p.in_flight() {
            true => item.finish(),
            false => item
                .parameter(sfv::key_ref("t"), int(p.reset_seconds))
                .finish(),
        };
    }
    let mut out = Vec::new();
    if let (Some(policy), Some(state)) = (policy.finish(), state.finish()) {
        out.push(("RateLimit-Policy".to_string(), policy));
        out.push(("RateLimit".to_string(), state));
    }
    if let Some(secs) = retry_after {
        out.push(("Retry-After".to_string(), secs.max(1).to_string()));
    }
    out
}

/// Envoy's `DRAFT_VERSION_03` headers: `X-RateLimit-Limit` is the chosen
/// policy's quota followed by every policy as `q;w=…[;name="…"]` (the rule's
/// own name only), then the chosen policy's remaining and reset.
pub fn x_ratelimit(chosen: &Policy, policies: &[(Policy, bool)]) -> Vec<(String, String)> {
    let mut limit = sfv::ListSerializer::new();
    let _ = limit.bare_item(int(chosen.quota));
    for (p, named) in policies {
        let item = limit.bare_item(int(p.quota));
        let item = match p.in_flight() {
            true => item,
            false => item.parameter(sfv::key_ref("w"), int(p.window_seconds)),
        };
        let _ = if *named {
            item.parameter(sfv::key_ref("name"), sf_string(&p.name))
        } else {
            item
        }
        .finish();
    }
    vec![
        (
            "X-RateLimit-Limit".to_string(),
            limit.finish().unwrap_or_default(),
        ),
        (
            "X-RateLimit-Remaining".to_string(),
            chosen.remaining.to_string(),
        ),
        (
            "X-RateLimit-Reset".to_string(),
            chosen.reset_seconds.to_string(),
        ),
    ]
}

/// The three header names (`LIMIT_*_HEADER`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderNames {
    /// `RateLimit-Limit` by default.
    pub limit: String,
    /// `RateLimit-Remaining` by default.
    pub remaining: String,
    /// `RateLimit-Reset` by default.
    pub reset: String,
}

impl Default for HeaderNames {
    fn default() -> Self {
        HeaderNames {
            limit: "RateLimit-Limit".into(),
            remaining: "RateLimit-Remaining".into(),
            reset: "RateLimit-Reset".into(),
        }
    }
}

/// The status the headers describe: the smallest remaining wins (ties keep
/// the earlier); any non-quota OVER_LIMIT descriptor overrides that, the
/// last such one winning.
pub fn chosen_status(
    statuses: &[DescriptorStatus],
    dispositions: &[Disposition],
    quota: &[bool],
) -> Option<usize> {
    let mut min = u32::MAX;
    let mut chosen = None;
    for (i, s) in statuses.iter().enumerate() {
        if s.current_limit.is_some() && s.limit_remaining < min {
            chosen = Some(i);
            min = s.limit_remaining;
        }
        let unlimited = dispositions.get(i) == Some(&Disposition::Unlimited);
        let is_quota = quota.get(i).copied().unwrap_or(false);
        if !unlimited && s.code == Code::OverLimit && !is_quota {
            chosen = Some(i);
            min = 0;
        }
    }
    chosen
}

/// The headers for the chosen status, in the original's order (limit,
/// remaining, reset); `reset_seconds` is the chosen window's time to reset.
pub fn headers(
    names: &HeaderNames,
    status: &DescriptorStatus,
    reset_seconds: u64,
) -> Vec<(String, String)> {
    let Some(limit) = &status.current_limit else {
        return Vec::new();
    };
    vec![
        (names.limit.clone(), limit.requests_per_unit.to_string()),
        (names.remaining.clone(), status.limit_remaining.to_string()),
        (names.reset.clone(), reset_seconds.to_string()),
    ]
}

/// A response's statuses as its headers see them.
#[derive(Clone, Copy)]
pub struct Listing<'a> {
    /// One per descriptor, in request order.
    pub statuses: &'a [DescriptorStatus],
    /// Each descriptor's entries (what a policy's name is made of).
    pub entries: &'a dyn Fn(usize) -> &'a [Entry],
    /// Whether a structured header may list descriptor `i`.
    pub shown: &'a dyn Fn(usize) -> bool,
    /// What `unlimited` and `replaces` made of each descriptor.
    pub dispositions: &'a [Disposition],
    /// Which descriptors count as quotas.
    pub quota: &'a [bool],
}

impl std::fmt::Debug for Listing<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listing")
            .field("statuses", &self.statuses)
            .field("dispositions", &self.dispositions)
            .field("quota", &self.quota)
            .finish_non_exhaustive()
    }
}

/// The rate-limit headers in `format` (computed before global shadow mode
/// turns a refusal into OK, as the original does; `refused`: the request
/// is refused after it).
///
/// The structured formats list every limit that applied and is `shown`,
/// in request order; the engine shows neither unlimited rules (no quota)
/// nor shadow-mode rules (a limit on trial must not change how clients
/// behave; under global `SHADOW_MODE` none is listed). Quota-mode limits
/// are listed: they are real quotas. `Retry-After` comes with a refused
/// request: the longest wait of its refusing limits, jitter included.
pub fn for_response(
    format: HeaderFormat,
    names: &HeaderNames,
    listing: &Listing<'_>,
    refused: bool,
) -> Vec<(String, String)> {
    let Listing {
        statuses,
        entries,
        shown,
        dispositions,
        quota,
    } = *listing;
    let policies = || {
        statuses
            .iter()
            .enumerate()
            .filter(move |(i, _)| shown(*i))
            .filter_map(|(i, s)| Policy::of(s, entries(i)).map(|p| (i, p)))
    };
    match format {
        HeaderFormat::Original => match chosen_status(statuses, dispositions, quota) {
            Some(i) => {
                let reset = statuses[i].duration_until_reset.map_or(0, ceil_seconds);
                headers(names, &statuses[i], reset)
            }
            None => Vec::new(),
        },
        HeaderFormat::Ietf => {
            let listed: Vec<Policy> = policies().map(|(_, p)| p).collect();
            let retry_after = refused
                .then(|| {
                    statuses
                        .iter()
                        .filter(|s| s.code == Code::OverLimit)
                        .filter_map(|s| s.duration_until_reset)
                        .max()
                        .map(ceil_seconds)
                })
                .flatten();
            ietf(&listed, retry_after)
        }
        HeaderFormat::XRateLimit => {
            let listed: Vec<(usize, Policy)> = policies().collect();
            let chosen = chosen_status(statuses, dispositions, quota)
                .and_then(|c| listed.iter().find(|(i, _)| *i == c))
                .or(listed.first());
            match chosen {
                Some((_, chosen)) => {
                    let all: Vec<(Policy, bool)> = listed
                        .iter()
                        .map(|(i, p)| {
                            let named = statuses[*i]
                                .current_limit
                                .as_ref()
                                .is_some_and(|l| !l.name.is_empty());
                            (p.clone(), named)
                        })
                        .collect();
                    x_ratelimit(chosen, &all)
                }
                None => Vec::new(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Entry;
    use crate::engine::types::CurrentLimit;
    use crate::limiter::Unit;

    fn st(code: Code, limit: Option<u32>, remaining: u32) -> DescriptorStatus {
        DescriptorStatus {
            code,
            current_limit: limit.map(|l| CurrentLimit {
                requests_per_unit: l,
                unit: Unit::Minute,
                name: String::new(),
                window_seconds: 60,
                burst: None,
            }),
            limit_remaining: remaining,
            duration_until_reset: None,
            shadowed: false,
        }
    }

    const C: Disposition = Disposition::Checked;

    #[test]
    fn smallest_remaining_ties_keep_the_earlier() {
        let s = [st(Code::Ok, Some(10), 3), st(Code::Ok, Some(5), 3)];
        assert_eq!(chosen_status(&s, &[C, C], &[false, false]), Some(0));
        let s = [st(Code::Ok, Some(10), 3), st(Code::Ok, Some(5), 2)];
        assert_eq!(chosen_status(&s, &[C, C], &[false, false]), Some(1));
    }

    #[test]
    fn last_non_quota_over_limit_wins() {
        let s = [
            st(Code::OverLimit, Some(10), 0),
            st(Code::Ok, Some(5), 0),
            st(Code::OverLimit, Some(7), 0),
        ];
        assert_eq!(
            chosen_status(&s, &[C, C, C], &[false, false, false]),
            Some(2)
        );
        assert_eq!(
            chosen_status(&s, &[C, C, C], &[false, false, true]),
            Some(0)
        );
    }

    fn policy(name: &str, q: u64, w: u64, r: u64, t: u64, burst: Option<u64>) -> Policy {
        Policy {
            name: name.into(),
            quota: q,
            window_seconds: w,
            remaining: r,
            reset_seconds: t,
            burst,
        }
    }

    #[test]
    fn ietf_fields_as_the_draft_spells_them() {
        let p = [
            policy("per_min", 5, 60, 2, 41, None),
            policy("bucket", 10, 1, 7, 1, Some(20)),
        ];
        assert_eq!(
            ietf(&p, None),
            vec![
                (
                    "RateLimit-Policy".to_string(),
                    r#""per_min";q=5;w=60, "bucket";q=10;w=1;rl-burst=20"#.to_string()
                ),
                (
                    "RateLimit".to_string(),
                    r#""per_min";r=2;t=41, "bucket";r=7;t=1"#.to_string()
                ),
            ]
        );
        let refused = ietf(&p[..1], Some(0));
        assert_eq!(refused[2], ("Retry-After".to_string(), "1".to_string()));
        assert!(ietf(&[], None).is_empty());
    }

    #[test]
    fn an_in_flight_limit_shows_slots_and_no_window() {
        let slots = policy("tenant=acme", 3, 0, 1, 0, None);
        let per_min = policy("per_min", 5, 60, 2, 41, None);
        let fields = ietf(&[slots.clone(), per_min.clone()], None);
        assert_eq!(
            fields[0].1,
            r#""tenant=acme";q=3;qu="concurrent-requests", "per_min";q=5;w=60"#
        );
        assert_eq!(fields[1].1, r#""tenant=acme";r=1, "per_min";r=2;t=41"#);
        let x = x_ratelimit(&slots, &[(slots.clone(), false), (per_min, false)]);
        assert_eq!(x[0].1, "3, 3, 5;w=60");
    }

    #[test]
    fn x_ratelimit_as_envoy_spells_it() {
        let per_ip = policy("per-ip", 10, 1, 3, 1, None);
        let hourly = policy("k=v", 1000, 3600, 900, 1200, None);
        assert_eq!(
            x_ratelimit(&per_ip, &[(per_ip.clone(), true), (hourly, false)]),
            vec![
                (
                    "X-RateLimit-Limit".to_string(),
                    r#"10, 10;w=1;name="per-ip", 1000;w=3600"#.to_string()
                ),
                ("X-RateLimit-Remaining".to_string(), "3".to_string()),
                ("X-RateLimit-Reset".to_string(), "1".to_string()),
            ]
        );
    }

    #[test]
    fn names_are_stable_printable_and_from_the_descriptor() {
        let e = [
            Entry::new("remote_address", "10.0.0.1"),
            Entry::new("path", ""),
        ];
        assert_eq!(policy_name("", &e), "remote_address=10.0.0.1,path");
        assert_eq!(policy_name("per-ip", &e), "per-ip");
        assert_eq!(
            policy_name("", &[Entry::new("k", "é\"%\n")]),
            "k=%C3%A9\"%25%0A"
        );
    }

    proptest::proptest! {
        /// Whatever the descriptor and the counts, every emitted field is a
        /// Structured Field List that parses back to what was meant.
        #[test]
        fn every_field_parses_back(
            limits in proptest::collection::vec(
                (".{0,12}", "\\PC{0,8}", ".{0,8}", 0u64..5_000_000_000, 1u64..31_536_000,
                 0u64..5_000_000_000, 0u64..31_536_000, proptest::option::of(1u64..1_000_000)),
                1..6,
            ),
            refused in proptest::option::of(0u64..100_000),
        ) {
            let policies: Vec<Policy> = limits
                .iter()
                .map(|(rule, k, v, q, w, r, t, b)| Policy {
                    name: policy_name(rule, &[Entry::new(k.as_str(), v.as_str())]),
                    quota: *q,
                    window_seconds: *w,
                    remaining: *r,
                    reset_seconds: *t,
                    burst: *b,
                })
                .collect();
            let fields = ietf(&policies, refused);
            let list = |name: &str| -> sfv::List {
                let value = &fields.iter().find(|(n, _)| n == name).expect("field").1;
                sfv::Parser::new(value).parse().expect("a valid sf-List")
            };
            let int = |i: &sfv::Item, key: &str| -> i64 {
                i.params.get(key).and_then(|v| v.as_integer()).map(i64::from).expect("an integer")
            };
            for (field, want) in [("RateLimit-Policy", true), ("RateLimit", false)] {
                let parsed = list(field);
                proptest::prop_assert_eq!(parsed.len(), policies.len());
                for (entry, p) in parsed.iter().zip(&policies) {
                    let sfv::ListEntry::Item(item) = entry else {
                        return Err(proptest::test_runner::TestCaseError::fail("an inner list"));
                    };
                    let name = item.bare_item.as_string().expect("an sf-String");
                    proptest::prop_assert_eq!(name.as_str(), p.name.as_str());
                    if want {
                        proptest::prop_assert_eq!(int(item, "q"), p.quota as i64);
                        proptest::prop_assert_eq!(int(item, "w"), p.window_seconds as i64);
                        proptest::prop_assert_eq!(
                            item.params.get("rl-burst").and_then(|v| v.as_integer()).map(i64::from),
                            p.burst.map(|b| b as i64)
                        );
                    } else {
                        proptest::prop_assert_eq!(int(item, "r"), p.remaining as i64);
                        proptest::prop_assert_eq!(int(item, "t"), p.reset_seconds as i64);
                    }
                }
            }
            let retry = fields.iter().find(|(n, _)| n == "Retry-After").map(|(_, v)| v.clone());
            proptest::prop_assert_eq!(retry, refused.map(|s| s.max(1).to_string()));
            let named: Vec<(Policy, bool)> = policies.iter().map(|p| (p.clone(), true)).collect();
            let x = x_ratelimit(&policies[0], &named);
            let parsed: sfv::List = sfv::Parser::new(&x[0].1).parse().expect("a valid sf-List");
            proptest::prop_assert_eq!(parsed.len(), policies.len() + 1);
        }
    }

    #[test]
    fn no_limit_no_headers() {
        let s = [st(Code::Ok, None, 0)];
        assert_eq!(chosen_status(&s, &[Disposition::NoLimit], &[false]), None);
        let h = headers(
            &HeaderNames::default(),
            &st(Code::OverLimit, Some(10), 0),
            58,
        );
        assert_eq!(
            h,
            vec![
                ("RateLimit-Limit".into(), "10".into()),
                ("RateLimit-Remaining".into(), "0".into()),
                ("RateLimit-Reset".into(), "58".into())
            ]
        );
    }
}
