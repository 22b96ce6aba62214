//! The time unit of a limit, numbered as Envoy's
//! `envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit`.

use std::fmt;

/// A limit's unit. The discriminants are the protobuf enum numbers, which the
/// per-request override carries and the response copies by number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum Unit {
    /// Not a usable window: unlimited rules carry it.
    Unknown = 0,
    /// 1 s.
    Second = 1,
    /// 60 s.
    Minute = 2,
    /// 3,600 s.
    Hour = 3,
    /// 86,400 s.
    Day = 4,
    /// 30 days (2,592,000 s), as the original counts a month.
    Month = 5,
    /// 365 days (31,536,000 s).
    Year = 6,
    /// 604,800 s.
    Week = 7,
}

impl Unit {
    /// The unit for a protobuf enum number; `None` outside the enum.
    pub fn from_proto(n: i32) -> Option<Unit> {
        Some(match n {
            0 => Unit::Unknown,
            1 => Unit::Second,
            2 => Unit::Minute,
            3 => Unit::Hour,
            4 => Unit::Day,
            5 => Unit::Month,
            6 => Unit::Year,
            7 => Unit::Week,
            _ => return None,
        })
    }

    /// The unit named by a config file, matched case-insensitively as the
    /// original does (`strings.ToUpper`). `UNKNOWN` is a name too; the config
    /// validation decides whether it is acceptable.
    pub fn from_name(name: &str) -> Option<Unit> {
        Some(match name.to_uppercase().as_str() {
            "UNKNOWN" => Unit::Unknown,
            "SECOND" => Unit::Second,
            "MINUTE" => Unit::Minute,
            "HOUR" => Unit::Hour,
            "DAY" => Unit::Day,
            "MONTH" => Unit::Month,
            "YEAR" => Unit::Year,
            "WEEK" => Unit::Week,
            _ => return None,
        })
    }

    /// The names a rule's `unit` may take (any case), as a config error
    /// lists them.
    pub const NAMES: &'static [&'static str] =
        &["second", "minute", "hour", "day", "week", "month", "year"];

    /// The protobuf enum name, as `/rlconfig` prints it.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Unknown => "UNKNOWN",
            Unit::Second => "SECOND",
            Unit::Minute => "MINUTE",
            Unit::Hour => "HOUR",
            Unit::Day => "DAY",
            Unit::Month => "MONTH",
            Unit::Year => "YEAR",
            Unit::Week => "WEEK",
        }
    }

    /// The window length in seconds; `None` for [`Unit::Unknown`], which has
    /// no window (the original crashes computing it).
    pub fn seconds(self) -> Option<u64> {
        match self {
            Unit::Unknown => None,
            Unit::Second => Some(1),
            Unit::Minute => Some(60),
            Unit::Hour => Some(3_600),
            Unit::Day => Some(86_400),
            Unit::Week => Some(604_800),
            Unit::Month => Some(2_592_000),
            Unit::Year => Some(31_536_000),
        }
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listed_names_are_every_unit_with_a_window() {
        let listed: Vec<Unit> = Unit::NAMES
            .iter()
            .filter_map(|n| Unit::from_name(n))
            .collect();
        assert_eq!(listed.len(), Unit::NAMES.len());
        let windowed = (0..8)
            .filter_map(Unit::from_proto)
            .filter(|u| u.seconds().is_some())
            .count();
        assert_eq!(listed.len(), windowed);
    }

    #[test]
    fn names_round_trip_in_any_case() {
        for n in 0..8 {
            let unit = Unit::from_proto(n).expect("in range");
            assert_eq!(unit as i32, n);
            assert_eq!(Unit::from_name(&unit.name().to_lowercase()), Some(unit));
        }
        assert_eq!(Unit::from_name("MiNuTe"), Some(Unit::Minute));
        assert_eq!(Unit::from_name("seconds"), None);
        assert_eq!(Unit::from_proto(8), None);
        assert_eq!(Unit::from_proto(-1), None);
    }

    #[test]
    fn windows() {
        assert_eq!(Unit::Month.seconds(), Some(2_592_000));
        assert_eq!(Unit::Year.seconds(), Some(31_536_000));
        assert_eq!(Unit::Unknown.seconds(), None);
    }
}
