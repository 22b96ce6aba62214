//! RLQS, Envoy's rate limit quota protocol: Envoy's `rate_limit_quota`
//! filter enforces each bucket itself and reports its usage; this module
//! decides what each bucket is told, so that one rule's rate is split
//! between every Envoy that enforces it, on every instance.
//!
//! - [`Quotas`] is RLQS's part of the instance (config, statistics, the
//!   store stack, clock, options, the instance's name) and the registry
//!   of its streams' lines, to which a moved share is pushed at once.
//! - [`Session`] is one stream: a report's `domain` is the config domain
//!   (named by the stream's first report; a later report without one is
//!   in it), and a bucket's pairs are matched against its descriptor tree
//!   in the order the tree asks for them
//!   ([`crate::config::DescriptorTree::bucket_entries`]), with the same
//!   values, wildcards and defaults as a `ShouldRateLimit` request.
//! - A rule with a rate ([`Quota`]) is split max-min fair on the demand
//!   each Envoy reports (allowed + denied over `time_elapsed`), with
//!   headroom ([`crate::limiter::share`]), on a demand board
//!   ([`crate::store::board`]) whose assignments never add up past the
//!   rate, and sent as a token bucket Envoy can run ([`EnvoyBucket`]).
//!   Blanket rules: no rule, an unknown domain, `unlimited` and
//!   `shadow_mode` allow all; a limit of 0 denies all.
//! - Envoy replaces its bucket, starting full, whenever the assignment
//!   changes, so the board moves a share only when it moves by more than
//!   10 % ([`crate::limiter::share::moved`]), or cuts a kept share to keep
//!   the split within the rate; a share the board kept is sent as the same
//!   bucket. Over any span `t`, an
//!   Envoy admits at most `assigned × t + max_tokens × (1 + changes)`.
//! - Built to Envoy's client as it is: every TTL and fill interval is in
//!   whole seconds (Envoy truncates to seconds), a TTL is at least 1 s;
//!   only blanket rules and token buckets are sent (the kinds it
//!   applies); a first report with `time_elapsed` 0 is a newcomer's.
//! - When a board cannot answer, a bucket keeps its assignment until its
//!   TTL, then follows its rule's `failure_mode`.

pub mod bucket;
pub mod quotas;
pub mod session;

pub use bucket::{EnvoyBucket, Quota};
pub use quotas::{Push, QuotaOptions, QuotaParts, Quotas};
pub use session::{Action, BucketId, ReportError, Session, Strategy, Usage};
