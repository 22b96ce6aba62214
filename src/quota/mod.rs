//! RLQS, Envoy's rate limit quota protocol: Envoy's `rate_limit_quota`
//! filter enforces each bucket itself and reports its usage; this module
//! decides what each bucket is told, so that one rule's rate is split
//! between every Envoy that enforces it, on every instance.
//!
//! - A report's `domain` is the config domain, and a bucket's pairs are
//!   matched against its descriptor tree in the order the tree asks for
//!   them ([`crate::config::DescriptorTree::bucket_entries`]), with the
//!   same values, wildcards and defaults as a `ShouldRateLimit` request.
//! - A rule with a rate ([`Quota`]) is split max-min fair on the demand
//!   each Envoy reports (allowed + denied over `time_elapsed`), with
//!   headroom ([`share`]); the split is shared through a demand board
//!   ([`crate::store::board`]) whose assignments never add up past the
//!   rate, and sent as a token bucket Envoy can run ([`EnvoyBucket`]).
//!   Blanket rules: no rule, an unknown domain, `unlimited` and
//!   `shadow_mode` allow all; a limit of 0 denies all.
//! - Envoy replaces its bucket, starting full, whenever the assignment
//!   changes, so an assignment changes only when a share moves by more
//!   than 10 % ([`share::moved`]). Over any span `t`, an Envoy admits at
//!   most `assigned × t + max_tokens × (1 + changes)`.

pub mod bucket;
pub mod session;
pub mod share;

pub use bucket::{EnvoyBucket, Quota};
pub use session::{Action, QuotaOptions, ReportError, Session, Strategy, Usage};
