//! Logs in the original's formats: logrus text
//! `time="<RFC3339>" level=<level> msg="<text>"` or, with `LOG_FORMAT=json`,
//! one JSON object per line with `@timestamp`, `@message` and `level`.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// What is logged, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogOptions {
    /// The most verbose level written.
    pub max: Level,
    /// One JSON object per line instead of logrus text.
    pub json: bool,
}

/// Installs the global subscriber: the logs, and with `spans` the export of
/// the trace spans (see [`crate::platform::telemetry`]). Call once, early in `main`.
pub fn init(options: LogOptions, spans: Option<&opentelemetry_sdk::trace::SdkTracerProvider>) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let LogOptions { max, json } = options;
    // The logs leave the trace spans to the exporter.
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .event_format(LogrusFormat { json })
        .with_filter(
            tracing_subscriber::filter::Targets::new()
                .with_default(max)
                .with_target(
                    crate::platform::telemetry::SPAN_TARGET,
                    tracing::level_filters::LevelFilter::OFF,
                ),
        );
    let registry = tracing_subscriber::registry().with(logs);
    let _ = match spans {
        Some(p) => registry
            .with(crate::platform::telemetry::layer(p))
            .try_init(),
        None => registry.try_init(),
    };
}

/// The logrus-compatible event format.
#[derive(Debug, Clone, Copy)]
pub struct LogrusFormat {
    json: bool,
}

#[derive(Default)]
struct Fields {
    message: String,
    extra: Vec<(String, String)>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_string();
        } else {
            self.extra
                .push((field.name().to_string(), value.to_string()));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.extra
                .push((field.name().to_string(), format!("{value:?}")));
        }
    }
}

fn level_name(level: &Level) -> &'static str {
    match *level {
        Level::TRACE => "trace",
        Level::DEBUG => "debug",
        Level::INFO => "info",
        Level::WARN => "warning",
        Level::ERROR => "error",
    }
}

impl<S, N> FormatEvent<S, N> for LogrusFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let level = level_name(event.metadata().level());
        if self.json {
            let mut obj = serde_json::Map::new();
            obj.insert(
                "@timestamp".into(),
                rfc3339(now.as_secs(), now.subsec_nanos(), true).into(),
            );
            obj.insert("@message".into(), fields.message.into());
            obj.insert("level".into(), level.into());
            for (k, v) in fields.extra {
                obj.insert(k, v.into());
            }
            writeln!(writer, "{}", serde_json::Value::Object(obj))
        } else {
            write!(
                writer,
                "time=\"{}\" level={level} msg={:?}",
                rfc3339(now.as_secs(), 0, false),
                fields.message
            )?;
            for (k, v) in fields.extra {
                write!(writer, " {k}={v:?}")?;
            }
            writeln!(writer)
        }
    }
}

/// RFC 3339 in UTC, optionally with nanoseconds.
fn rfc3339(secs: u64, nanos: u32, with_nanos: bool) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, m, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    if with_nanos {
        format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{nanos:09}Z")
    } else {
        format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}Z")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(0, 0, false), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400, 0, false), "2000-02-29T00:00:00Z");
        assert_eq!(
            rfc3339(1_795_996_800, 5, true),
            "2026-11-30T00:00:00.000000005Z"
        );
    }
}
