//! Settings: the 118 environment variables of the original service, parsed into typed,
//! grouped values.
//!
//! Values are read through a [`Source`] ([`Env`] in production, [`MapSource`] in tests), once,
//! at start-up. An unset variable takes its default from [`vars::VARS`]; a variable set to the
//! empty string is parsed as empty (so `PORT=""` is an error, `CACHE_KEY_PREFIX=""` is not).
//! Every variable is parsed before [`Settings::from_source`] returns, so one start-up error
//! lists every bad variable; like the original, any bad variable aborts start-up, including
//! variables this service does not act on yet ([`vars::Support::Accepted`]).
//!
//! ```
//! use ratelimit::settings::{LogLevel, MapSource, Settings};
//!
//! let src: MapSource = [("LOG_LEVEL", "debug"), ("PORT", "0x1F90")].into_iter().collect();
//! let settings = Settings::from_source(&src).expect("valid");
//! assert_eq!(settings.log.level, LogLevel::Debug);
//! assert_eq!(settings.listener.port, 8080);
//!
//! let bad: MapSource = [("PORT", ""), ("USE_STATSD", "yes")].into_iter().collect();
//! let err = Settings::from_source(&bad).expect_err("invalid");
//! assert_eq!(err.invalid().len(), 2);
//! ```

mod config_source;
pub mod help;
mod limiting;
pub mod parse;
mod reader;
mod server;
pub mod source;
mod stats;
mod store;
pub mod vars;

use std::fmt;

pub use config_source::{ConfigProviderSettings, ConfigType, RuntimeSettings, XdsSettings};
pub use limiting::{
    AuditSettings, HeaderFormatSetting, HotKeySettings, LeaseSettings, LimiterSettings,
    QuotaSettings, RequestHeaderSettings, ResponseHeaderSettings, ResponseSettings,
};
pub use parse::ParseError;
pub use server::{
    GrpcTlsSettings, GrpcWorkers, ListenerSettings, LogFormat, LogLevel, LogSettings,
    OverrideSettings, RequestSettings, ShutdownSettings, TracingProtocol, TracingSettings,
};
pub use source::{Env, MapSource, NotUnicode, Source};
pub use stats::StatsSettings;
pub use store::{
    BackendType, ClientTlsSettings, FailureMode, MemcacheSettings, PoolOnEmptyBehavior,
    RedisBackendSettings, RedisSettings, RedisType, StoreFailureSettings,
};
pub use vars::{Kind, Support, VarSpec, EXTENSIONS, VARS};

use parse::parse_count;
use reader::Reader;
use vars::*;

/// Every setting of the service, typed and grouped by the component that uses it.
///
/// `Settings::default()` equals parsing an empty source: every variable at its default.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Listening addresses, ports and gRPC connection options.
    pub listener: ListenerSettings,
    /// Log level and format.
    pub log: LogSettings,
    /// Where descriptor configuration comes from.
    pub config_provider: ConfigProviderSettings,
    /// Statistics sinks.
    pub stats: StatsSettings,
    /// Counting common to every backend.
    pub limiter: LimiterSettings,
    /// What a response carries, and the global modes that shape it.
    pub response: ResponseSettings,
    /// The Redis backend: main and per-second clients.
    pub redis: RedisBackendSettings,
    /// The memcache backend.
    pub memcache: MemcacheSettings,
    /// OpenTelemetry tracing.
    pub tracing: TracingSettings,
    /// Our graceful-shutdown timings (`SHUTDOWN_*`, not in the original).
    pub shutdown: ShutdownSettings,
    /// `STATSD_PROTOCOL` (`tcp`/`udp`), read by the original's statsd library.
    pub statsd_protocol: String,
    /// What happens when the store cannot answer (`STORE_*`, ours).
    pub store_failure: StoreFailureSettings,
    /// Hot keys (`LEASE_*`, `HOT_KEYS_TOP_K`, ours).
    pub hot_keys: HotKeySettings,
    /// The decision audit (`DECISION_AUDIT_*`, ours).
    pub audit: AuditSettings,
    /// How large a request may be (`REQUEST_MAX_*`, ours).
    pub request: RequestSettings,
    /// RLQS (`RLQS_*`, ours).
    pub quota: QuotaSettings,
    /// `MEMORY_MAX_KEYS` (ours): the most keys the memory store holds.
    pub memory_max_keys: usize,
    /// The per-tenant overrides (`ADMIN_TOKEN_FILE`, `OVERRIDES_MAX`, ours).
    pub overrides: OverrideSettings,
}

/// One variable whose value does not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidVar {
    /// The variable name.
    pub name: &'static str,
    /// The value as set (lossily converted if it was not UTF-8).
    pub value: String,
    /// Why it does not parse.
    pub error: ParseError,
}

impl fmt::Display for InvalidVar {
    /// `NAME=value is not valid: reason`, on one line: control characters in the value are
    /// escaped.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}=", self.name)?;
        for c in self.value.chars() {
            if c.is_control() {
                write!(f, "{}", c.escape_default())?;
            } else {
                write!(f, "{c}")?;
            }
        }
        write!(f, " is not valid: {}", self.error)
    }
}

/// The settings could not be parsed. Holds every bad variable, never none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingsError {
    invalid: Vec<InvalidVar>,
}

impl SettingsError {
    /// The bad variables, in reading order; never empty.
    pub fn invalid(&self) -> &[InvalidVar] {
        &self.invalid
    }
}

impl fmt::Display for SettingsError {
    /// One `NAME=value is not valid: reason` line per bad variable.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, var) in self.invalid.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{var}")?;
        }
        Ok(())
    }
}

impl std::error::Error for SettingsError {}

impl Settings {
    /// Parses every variable from `src`, returning all bad ones together on failure.
    pub fn from_source(src: &dyn Source) -> Result<Self, SettingsError> {
        let (settings, invalid) = Self::read(src);
        if invalid.is_empty() {
            Ok(settings)
        } else {
            Err(SettingsError { invalid })
        }
    }

    /// [`Settings::from_source`] on the process environment.
    pub fn from_env() -> Result<Self, SettingsError> {
        Self::from_source(&Env)
    }

    /// The variables set in `src` (to any value, the empty string included) that this
    /// service parses but does not act on yet, in [`VARS`] order. The caller names them in
    /// one start-up warning.
    pub fn accepted_but_inactive(&self, src: &dyn Source) -> Vec<&'static str> {
        VARS.iter()
            .filter(|v| v.support == Support::Accepted && src.get(v.name).is_some())
            .map(|v| v.name)
            .collect()
    }

    /// Reads every variable. A bad one is recorded and its field left at `T::default()`;
    /// the `Settings` is then meaningless and only the list is used.
    fn read(src: &dyn Source) -> (Self, Vec<InvalidVar>) {
        let mut r = Reader::new(src);
        let settings = Settings {
            listener: ListenerSettings::read(&mut r),
            log: LogSettings::read(&mut r),
            config_provider: ConfigProviderSettings::read(&mut r),
            stats: StatsSettings::read(&mut r),
            limiter: LimiterSettings::read(&mut r),
            response: ResponseSettings::read(&mut r),
            redis: RedisBackendSettings::read(&mut r),
            memcache: MemcacheSettings::read(&mut r),
            tracing: TracingSettings::read(&mut r),
            statsd_protocol: r.string(ENV_STATSD_PROTOCOL),
            shutdown: ShutdownSettings::read(&mut r),
            store_failure: StoreFailureSettings::read(&mut r),
            hot_keys: HotKeySettings::read(&mut r),
            memory_max_keys: r.get(ENV_MEMORY_MAX_KEYS, |s| {
                parse_count(s).map(|n| usize::try_from(n).unwrap_or(usize::MAX).max(1))
            }),
            quota: QuotaSettings::read(&mut r),
            audit: AuditSettings::read(&mut r),
            request: RequestSettings::read(&mut r),
            overrides: OverrideSettings::read(&mut r),
        };
        (settings, r.into_invalid())
    }
}

impl Default for Settings {
    /// Every variable at its default. The defaults in [`VARS`] all parse (unit-tested).
    fn default() -> Self {
        let (settings, invalid) = Self::read(&MapSource::new());
        debug_assert!(invalid.is_empty(), "a default does not parse: {invalid:?}");
        settings
    }
}

/// Shows whether a secret is set without showing it.
pub(super) struct Redacted<'a>(&'a str);

impl fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_empty() {
            "\"\""
        } else {
            "<redacted>"
        })
    }
}

#[cfg(test)]
mod tests;
