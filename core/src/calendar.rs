//! Calendar-aligned windows for `fixed_window` budgets: a day, an ISO week (from Monday) or a
//! month, in UTC, at a fixed offset from it (`"+08:00"`), or in a named IANA zone
//! (`"Europe/Paris"`, daylight saving included), so "1,000,000 tokens per tenant per month" is
//! one rule whose window starts on the 1st.
//!
//! UTC and fixed offsets are pure arithmetic on the civil calendar (proleptic Gregorian, days
//! since 1970-01-01), which the Redis twin (backend/lua/prelude.lua, `window_of`) repeats in Lua
//! from Redis `TIME`. Named zones need the tz database, whose rules change by decree: it is
//! compiled in behind the `tz` feature ([`named`], jiff with its bundled tzdb; the backend and
//! the dashboard turn it on, the proxy-wasm filter does not, so its wasm does not carry it).
//! Lua cannot read that database, so for a named zone the backend passes the boundaries of the
//! windows around its own clock as the script's argument ([`Calendar::script_arg`]) and the
//! script picks the one holding Redis `TIME` (docs/algorithms.md, "Calendar windows"). Core
//! without the feature refuses a zone name, naming the field, rather than read it as UTC.

use std::fmt;

use crate::time::{Nanos, NANOS_PER_MILLI};

#[cfg(feature = "tz")]
pub mod named;
#[cfg(feature = "tz")]
pub use named::NamedZone;

/// Milliseconds in a civil day (no leap seconds, as Unix time).
pub const DAY_MS: i64 = 86_400_000;
/// The largest offset from UTC a calendar may name, in minutes (±18:00, as ISO 8601 allows).
pub const MAX_OFFSET_MINUTES: i16 = 18 * 60;

/// How long one calendar window lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum CalendarUnit {
    /// From midnight to midnight.
    Day,
    /// From Monday 00:00 to the next Monday 00:00 (ISO 8601 weeks).
    Week,
    /// From the 1st 00:00 to the next month's 1st 00:00 (28 to 31 days).
    Month,
}

impl CalendarUnit {
    /// The name in rules.
    pub fn name(self) -> &'static str {
        match self {
            CalendarUnit::Day => "day",
            CalendarUnit::Week => "week",
            CalendarUnit::Month => "month",
        }
    }

    /// The longest window of this unit at a fixed offset, in ms (31 days for a month; a named
    /// zone's may be longer: [`Calendar::longest_ms`]).
    pub fn longest_ms(self) -> u64 {
        match self {
            CalendarUnit::Day => DAY_MS as u64,
            CalendarUnit::Week => 7 * DAY_MS as u64,
            CalendarUnit::Month => 31 * DAY_MS as u64,
        }
    }
}

impl fmt::Display for CalendarUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a calendar's midnights are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Zone {
    /// A fixed offset from UTC in minutes east (`+08:00` is 480, UTC is 0), within
    /// ±[`MAX_OFFSET_MINUTES`].
    Offset(i16),
    /// A zone of the bundled tz database, its offset following daylight saving.
    #[cfg(feature = "tz")]
    Named(NamedZone),
}

impl Zone {
    /// UTC.
    pub const UTC: Zone = Zone::Offset(0);

    /// Whether the zone is a named one (whose windows the Redis scripts take as boundaries).
    pub fn is_named(self) -> bool {
        !matches!(self, Zone::Offset(_))
    }

    /// Parses a zone as rules write it: `"UTC"` (or `"Z"`), an offset `±HH:MM` within ±18:00, or
    /// (feature `tz`) an IANA name of the bundled database, in any ASCII case (kept as the
    /// database spells it). The error says which forms are accepted.
    pub fn parse(text: &str) -> Result<Zone, String> {
        if text == "UTC" || text == "Z" {
            return Ok(Zone::UTC);
        }
        if let Some(minutes) = parse_offset(text) {
            return Ok(Zone::Offset(minutes));
        }
        #[cfg(feature = "tz")]
        if let Some(zone) = NamedZone::parse(text) {
            return Ok(Zone::Named(zone));
        }
        Err(zone_refusal(text))
    }
}

impl fmt::Display for Zone {
    /// `"UTC"`, `"+08:00"`, `"-03:30"` or the zone's name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Zone::Offset(0) => f.write_str("UTC"),
            Zone::Offset(minutes) => {
                let sign = if minutes < 0 { '-' } else { '+' };
                let m = minutes.unsigned_abs();
                write!(f, "{sign}{:02}:{:02}", m / 60, m % 60)
            }
            #[cfg(feature = "tz")]
            Zone::Named(zone) => f.write_str(zone.name()),
        }
    }
}

/// The release of the tz database this build carries (`Some("2026f")`), or `None` when built
/// without the `tz` feature (named zones refused).
pub fn tzdb_version() -> Option<&'static str> {
    #[cfg(feature = "tz")]
    return Some(named::TZDB_VERSION);
    #[cfg(not(feature = "tz"))]
    None
}

/// `±HH:MM` within ±18:00, in minutes east of UTC.
fn parse_offset(text: &str) -> Option<i16> {
    let b = text.as_bytes();
    if b.len() != 6 || b[3] != b':' || !(b[0] == b'+' || b[0] == b'-') {
        return None;
    }
    let num = |s: &[u8]| -> Option<i16> {
        s.iter().try_fold(0i16, |acc, c| {
            c.is_ascii_digit().then(|| acc * 10 + i16::from(c - b'0'))
        })
    };
    let (h, m) = (num(&b[1..3])?, num(&b[4..6])?);
    let total = h * 60 + m;
    if m >= 60 || total > MAX_OFFSET_MINUTES {
        return None;
    }
    Some(if b[0] == b'-' { -total } else { total })
}

/// Why `text` is not a zone, and which forms are.
fn zone_refusal(text: &str) -> String {
    let looks_named = text.bytes().any(|c| c.is_ascii_alphabetic());
    #[cfg(feature = "tz")]
    {
        let _ = looks_named;
        format!(
            "must be \"UTC\", an offset like \"+08:00\" or \"-03:30\" (within ±18:00), or an \
             IANA zone name like \"Europe/Paris\" or \"America/New_York\" from the bundled tz \
             database {}; got {text:?}",
            named::TZDB_VERSION
        )
    }
    #[cfg(not(feature = "tz"))]
    {
        let why = if looks_named {
            " (named zones need the tz database, which this build of sluice-core does not carry: \
             feature `tz`)"
        } else {
            ""
        };
        format!(
            "must be \"UTC\" or an offset like \"+08:00\" or \"-03:30\" (within ±18:00){why}; \
             got {text:?}"
        )
    }
}

/// A calendar window: its unit and the zone its midnights are in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Calendar {
    /// Day, week or month.
    pub unit: CalendarUnit,
    /// UTC, a fixed offset or a named zone.
    pub zone: Zone,
}

impl Calendar {
    /// A calendar of `unit` in UTC.
    pub fn utc(unit: CalendarUnit) -> Calendar {
        Calendar {
            unit,
            zone: Zone::UTC,
        }
    }

    /// The longest window, in ms: the unit's, plus a day in a named zone, whose offset may
    /// change within a window (an hour for daylight saving; tzdb's largest change backwards is
    /// a day). It bounds the state's idle TTL.
    pub fn longest_ms(self) -> u64 {
        let extra = if self.zone.is_named() {
            DAY_MS as u64
        } else {
            0
        };
        self.unit.longest_ms() + extra
    }

    /// The window holding `t_ms` (ms since the epoch): its start and end, in ms since the epoch.
    pub fn bounds_ms(self, t_ms: i64) -> (i64, i64) {
        match self.zone {
            Zone::Offset(minutes) => offset_bounds_ms(self.unit, minutes, t_ms),
            // Past jiff's years (±9999), which no Nanos reaches, the UTC window.
            #[cfg(feature = "tz")]
            Zone::Named(zone) => zone
                .bounds_ms(self.unit, t_ms)
                .unwrap_or_else(|| offset_bounds_ms(self.unit, 0, t_ms)),
        }
    }

    /// The window holding `now`: its start and end in ns since the epoch (times before the epoch
    /// count as the epoch).
    pub fn bounds(self, now: Nanos) -> (Nanos, Nanos) {
        let t_ms = i64::try_from(now / NANOS_PER_MILLI).unwrap_or(i64::MAX / 2);
        let (start, end) = self.bounds_ms(t_ms);
        let ns = |ms: i64| {
            u64::try_from(ms)
                .unwrap_or(0)
                .saturating_mul(NANOS_PER_MILLI)
        };
        (ns(start), ns(end))
    }

    /// The zone as rules write it: `"UTC"`, `"+08:00"`, `"-03:30"`, `"Europe/Paris"`.
    pub fn zone(self) -> String {
        self.zone.to_string()
    }

    /// Parses a zone (see [`Zone::parse`]).
    pub fn parse_zone(text: &str) -> Result<Zone, String> {
        Zone::parse(text)
    }

    /// The form the Redis scripts take in place of a window's length (prelude.lua's
    /// `window_of`). UTC or an offset: `"month:480"`, which Lua turns into boundaries itself from
    /// Redis `TIME`. A named zone: `"bounds:<a>,<b>,<c>,<d>"`, the boundaries in ms of the window
    /// holding `now` (the caller's clock), the one before it and the one after it, so that
    /// Redis `TIME` up to a whole window away from `now` (clock skew between a backend and Redis,
    /// a window edge between them) still finds its window; beyond that the script refuses
    /// rather than count in a wrong window.
    #[cfg_attr(not(feature = "tz"), allow(unused_variables))]
    pub fn script_arg(self, now: Nanos) -> String {
        match self.zone {
            Zone::Offset(minutes) => format!("{}:{}", self.unit.name(), minutes),
            #[cfg(feature = "tz")]
            Zone::Named(_) => {
                let t_ms = i64::try_from(now / NANOS_PER_MILLI).unwrap_or(i64::MAX / 2);
                let (start, end) = self.bounds_ms(t_ms);
                let before = self.bounds_ms(start - 1).0;
                let after = self.bounds_ms(end).1;
                format!("bounds:{before},{start},{end},{after}")
            }
        }
    }
}

/// The window of `unit` holding `t_ms` at a fixed offset (minutes east of UTC).
fn offset_bounds_ms(unit: CalendarUnit, minutes: i16, t_ms: i64) -> (i64, i64) {
    let off = i64::from(minutes) * 60_000;
    let (first, next) = window_days(unit, (t_ms + off).div_euclid(DAY_MS));
    (first * DAY_MS - off, next * DAY_MS - off)
}

/// The first local day of the window of `unit` holding local day `days` (days since
/// 1970-01-01), and the first of the next window.
fn window_days(unit: CalendarUnit, days: i64) -> (i64, i64) {
    match unit {
        CalendarUnit::Day => (days, days + 1),
        CalendarUnit::Week => {
            // 1970-01-01 was a Thursday: day 0 is 3 days after a Monday.
            let first = days - (days + 3).rem_euclid(7);
            (first, first + 7)
        }
        CalendarUnit::Month => {
            let first = days - (day_of_month(days) - 1);
            // 31 days on is always in the next month (months have 28 to 31 days).
            let later = first + 31;
            (first, later - (day_of_month(later) - 1))
        }
    }
}

/// The day of the month (1–31) of a day counted from 1970-01-01 (the Lua twin in
/// backend/lua/prelude.lua is the same arithmetic).
fn day_of_month(days: i64) -> i64 {
    civil_from_days(days).2
}

/// The (year, month 1–12, day 1–31) of a day counted from 1970-01-01 (H. Hinnant's
/// civil_from_days).
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    // 2024-01-31T23:59:59.999Z, 2024-02-01T00:00Z, 2024-03-01T00:00Z (2024 is a leap year).
    const JAN_END: i64 = 1_706_745_599_999;
    const FEB_1: i64 = 1_706_745_600_000;
    const MAR_1: i64 = 1_709_251_200_000;

    #[test]
    fn months_start_on_the_first() {
        let c = Calendar::utc(CalendarUnit::Month);
        assert_eq!(c.bounds_ms(FEB_1), (FEB_1, MAR_1));
        assert_eq!(c.bounds_ms(MAR_1 - 1), (FEB_1, MAR_1));
        assert_eq!(c.bounds_ms(JAN_END).1, FEB_1);
        // 2023-12-01 .. 2024-01-01 crosses a year.
        assert_eq!(
            c.bounds_ms(1_703_000_000_000),
            (1_701_388_800_000, 1_704_067_200_000)
        );
    }

    #[test]
    fn offsets_move_midnight() {
        let c = Calendar {
            unit: CalendarUnit::Month,
            zone: Zone::Offset(480),
        };
        // 2024-02-01T00:00+08:00 is 2024-01-31T16:00Z.
        let feb_1_sgt = FEB_1 - 8 * 3_600_000;
        assert_eq!(c.bounds_ms(feb_1_sgt).0, feb_1_sgt);
        assert_eq!(c.bounds_ms(feb_1_sgt - 1).1, feb_1_sgt);
    }

    #[test]
    fn weeks_start_on_monday() {
        let c = Calendar::utc(CalendarUnit::Week);
        // 2024-02-01 was a Thursday; its week began Monday 2024-01-29.
        let (s, e) = c.bounds_ms(FEB_1);
        assert_eq!(s, FEB_1 - 3 * DAY_MS);
        assert_eq!(e - s, 7 * DAY_MS);
        let d = Calendar::utc(CalendarUnit::Day);
        assert_eq!(d.bounds_ms(FEB_1 + 5), (FEB_1, FEB_1 + DAY_MS));
    }

    #[test]
    fn zones_parse_and_print() {
        assert_eq!(Calendar::parse_zone("+08:00"), Ok(Zone::Offset(480)));
        assert_eq!(Calendar::parse_zone("-03:30"), Ok(Zone::Offset(-210)));
        assert_eq!(Calendar::parse_zone("UTC"), Ok(Zone::UTC));
        for bad in [
            "Mars/Olympus_Mons",
            "+8:00",
            "+19:00",
            "+08:60",
            "08:00",
            "",
        ] {
            let why = Calendar::parse_zone(bad).expect_err(bad);
            assert!(why.contains("\"UTC\"") && why.contains("+08:00"), "{why}");
        }
        let c = Calendar {
            unit: CalendarUnit::Day,
            zone: Zone::Offset(-210),
        };
        assert_eq!(c.zone(), "-03:30");
        // The Redis form of an offset is the unit and minutes, whatever the clock.
        assert_eq!(c.script_arg(0), "day:-210");
        assert_eq!(c.script_arg(u64::MAX), "day:-210");
    }

    #[cfg(not(feature = "tz"))]
    #[test]
    fn without_the_tz_feature_a_zone_name_is_refused_not_read_as_utc() {
        let why = Calendar::parse_zone("Europe/Paris").expect_err("no tz database");
        assert!(why.contains("feature `tz`"), "{why}");
        assert_eq!(tzdb_version(), None);
    }
}
