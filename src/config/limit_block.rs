//! A limit given apart from the YAML (a per-tenant override's): the keys of
//! one `rate_limit` block that say how much, built and checked exactly as
//! that block would be in a file, and put in place of a rule's limit.

use super::error::ConfigError;
use super::model::{RawDescriptor, RawRateLimit};
use super::tree::RateLimitRule;

/// The keys of a `rate_limit` block that say how much: `requests_per_unit`
/// per `unit`, and the opt-in `algorithm`, `burst` and `unit_multiplier`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LimitBlock {
    /// Allowed hits per window (a token bucket: its rate per unit).
    pub requests_per_unit: u32,
    /// The unit's name, as in YAML (`second`, `minute`, …).
    pub unit: String,
    /// The algorithm's name; `None`: the rule's own (see [`with_block`]).
    pub algorithm: Option<String>,
    /// A token bucket's capacity.
    pub burst: Option<u32>,
    /// Windows of `unit_multiplier` units.
    pub unit_multiplier: Option<u32>,
}

/// The name errors in a limit block are reported under.
const SOURCE: &str = "override";

/// `block` checked on its own, as a YAML block with the same keys is: the
/// same errors, under the file name `override`.
pub fn check_block(block: &LimitBlock) -> Result<(), ConfigError> {
    with_block(&plain_rule(), block).map(drop)
}

/// `rule` with its limit replaced by `block`. What is kept: everything
/// but the limit (name, modes, `replaces`, metadata, path and id, so the
/// rule's statistics, and its failure policy). What the limit is: `block`
/// as a `rate_limit` block of its own, so the original's fixed window (on
/// the original's keys) unless it names an algorithm or opt-in key; a
/// block that names no algorithm on a rule of one opt-in limit takes that
/// limit's algorithm. A rule's several limits (`rate_limits`), calendar
/// windows and local-first interval give way to the one limit.
pub fn with_block(rule: &RateLimitRule, block: &LimitBlock) -> Result<RateLimitRule, ConfigError> {
    let algorithm = match (&block.algorithm, rule.limits.as_slice()) {
        (Some(a), _) => a.clone(),
        (None, [one]) => one.limiter.name().as_str().to_string(),
        (None, _) => String::new(),
    };
    let raw = RawRateLimit {
        line: 1,
        unit: block.unit.clone(),
        requests_per_unit: block.requests_per_unit,
        algorithm,
        burst: block.burst,
        unit_multiplier: block.unit_multiplier,
        ..RawRateLimit::default()
    };
    let unit = super::validate::check_block(SOURCE, &raw)?;
    let descriptor = RawDescriptor {
        line: 1,
        key: "override".into(),
        rate_limit: Some(raw),
        ..RawDescriptor::default()
    };
    let (_, mut limits) = super::validate::extension_limits_of(SOURCE, &descriptor)?;
    let failure = rule.limits.first().map_or(rule.failure, |l| l.failure);
    for l in &mut limits {
        l.failure = failure;
        l.name = rule.name.clone();
    }
    Ok(RateLimitRule {
        requests_per_unit: block.requests_per_unit,
        unit,
        limits,
        calendar: None,
        sync_interval: None,
        ..rule.clone()
    })
}

/// A rule with nothing of its own, to check a block against.
fn plain_rule() -> RateLimitRule {
    RateLimitRule::from_override(0, crate::limiter::Unit::Second, String::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::error::ConfigErrorKind;
    use crate::limiter::Unit;

    fn block(n: u32, unit: &str) -> LimitBlock {
        LimitBlock {
            requests_per_unit: n,
            unit: unit.into(),
            ..LimitBlock::default()
        }
    }

    #[test]
    fn a_plain_block_on_a_plain_rule_is_the_originals_window_and_keeps_the_rest() {
        let rule = RateLimitRule {
            name: "per_tenant".into(),
            shadow_mode: true,
            load_key: "api.tenant".into(),
            requests_per_unit: 10,
            unit: Unit::Minute,
            ..plain_rule()
        };
        let o = with_block(&rule, &block(50, "hour")).expect("a valid block");
        assert_eq!((o.requests_per_unit, o.unit), (50, Unit::Hour));
        assert!(o.is_original());
        assert_eq!((o.name.as_str(), o.shadow_mode), ("per_tenant", true));
        assert_eq!(o.load_key, "api.tenant");
    }

    #[test]
    fn a_block_without_an_algorithm_keeps_the_rules_one_opt_in_algorithm() {
        let bucket = with_block(
            &plain_rule(),
            &LimitBlock {
                algorithm: Some("token_bucket".into()),
                burst: Some(20),
                ..block(10, "second")
            },
        )
        .expect("a token bucket");
        assert_eq!(bucket.limits.len(), 1);
        let o = with_block(&bucket, &block(5, "second")).expect("a valid block");
        assert_eq!(o.limits.len(), 1);
        assert_eq!(o.limits[0].limiter.name().as_str(), "token_bucket");
        assert_eq!(o.limits[0].requests_per_unit, 5);
    }

    #[test]
    fn a_bad_block_fails_as_the_same_yaml_would() {
        let e = check_block(&block(5, "fortnight")).expect_err("no such unit");
        assert!(matches!(e.kind, ConfigErrorKind::InvalidUnit(_)));
        assert!(e.hint.is_some_and(|h| h.contains("valid units")));
        let e = check_block(&LimitBlock {
            algorithm: Some("leaky".into()),
            ..block(5, "second")
        })
        .expect_err("no such algorithm");
        assert!(matches!(e.kind, ConfigErrorKind::InvalidAlgorithm(_)));
    }
}
