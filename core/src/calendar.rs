//! Calendar-aligned windows for `fixed_window` budgets: a day, an ISO week (from Monday) or a
//! month, in UTC or at a fixed offset from it (`"+08:00"`), so "1,000,000 tokens per tenant per
//! month" is one rule whose window starts on the 1st.
//!
//! Pure arithmetic on the civil calendar (proleptic Gregorian, days since 1970-01-01), with no
//! time-zone database: core reads no files and builds for both wasm targets. Named zones (with
//! daylight saving) are not supported: their rules change by decree, so they need a tz database,
//! and the Redis twin (backend/lua/prelude.lua, `window_of`) computes the same boundaries in Lua
//! from Redis `TIME`, which could not follow a database shipped with the backend without passing
//! every boundary in (docs/algorithms.md says more).

use std::fmt;

use crate::limits::MAX_CALENDAR_SPAN_MS;
use crate::time::{Nanos, NANOS_PER_MILLI};

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

    /// The longest window of this unit, in ms (31 days for a month).
    pub fn longest_ms(self) -> u64 {
        match self {
            CalendarUnit::Day => DAY_MS as u64,
            CalendarUnit::Week => 7 * DAY_MS as u64,
            CalendarUnit::Month => MAX_CALENDAR_SPAN_MS,
        }
    }
}

impl fmt::Display for CalendarUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A calendar window: its unit and the offset from UTC its midnights are at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Calendar {
    /// Day, week or month.
    pub unit: CalendarUnit,
    /// Minutes east of UTC (`+08:00` is 480), within ±[`MAX_OFFSET_MINUTES`].
    pub offset_minutes: i16,
}

impl Calendar {
    /// A calendar of `unit` in UTC.
    pub fn utc(unit: CalendarUnit) -> Calendar {
        Calendar {
            unit,
            offset_minutes: 0,
        }
    }

    /// The window holding `t_ms` (ms since the epoch): its start and end, in ms since the epoch.
    pub fn bounds_ms(self, t_ms: i64) -> (i64, i64) {
        let off = i64::from(self.offset_minutes) * 60_000;
        let days = (t_ms + off).div_euclid(DAY_MS);
        let (first, next) = match self.unit {
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
        };
        (first * DAY_MS - off, next * DAY_MS - off)
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

    /// The offset as rules write it: `"UTC"` or `"+08:00"`, `"-03:30"`.
    pub fn zone(self) -> String {
        if self.offset_minutes == 0 {
            return "UTC".to_owned();
        }
        let sign = if self.offset_minutes < 0 { '-' } else { '+' };
        let m = self.offset_minutes.unsigned_abs();
        format!("{sign}{:02}:{:02}", m / 60, m % 60)
    }

    /// Parses a zone: `"UTC"`, `"Z"` or `±HH:MM` within ±18:00.
    pub fn parse_zone(text: &str) -> Result<i16, String> {
        if text == "UTC" || text == "Z" {
            return Ok(0);
        }
        let bad = || {
            format!(
                "must be \"UTC\" or an offset like \"+08:00\" or \"-03:30\" (named zones are not \
                 supported: see docs/algorithms.md); got {text:?}"
            )
        };
        let b = text.as_bytes();
        if b.len() != 6 || b[3] != b':' || !(b[0] == b'+' || b[0] == b'-') {
            return Err(bad());
        }
        let num = |s: &[u8]| -> Option<i16> {
            s.iter().try_fold(0i16, |acc, c| {
                c.is_ascii_digit().then(|| acc * 10 + i16::from(c - b'0'))
            })
        };
        let (Some(h), Some(m)) = (num(&b[1..3]), num(&b[4..6])) else {
            return Err(bad());
        };
        let total = h * 60 + m;
        if m >= 60 || total > MAX_OFFSET_MINUTES {
            return Err(bad());
        }
        Ok(if b[0] == b'-' { -total } else { total })
    }

    /// The form the Redis scripts take in place of a window's length (`"month:480"`): see
    /// `window_of` in backend/lua/prelude.lua.
    pub fn script_arg(self) -> String {
        format!("{}:{}", self.unit.name(), self.offset_minutes)
    }
}

/// The day of the month (1–31) of a day counted from 1970-01-01 (H. Hinnant's civil_from_days;
/// the Lua twin in backend/lua/prelude.lua is the same arithmetic).
fn day_of_month(days: i64) -> i64 {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    doy - (153 * mp + 2) / 5 + 1
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
            offset_minutes: 480,
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
        assert_eq!(Calendar::parse_zone("+08:00"), Ok(480));
        assert_eq!(Calendar::parse_zone("-03:30"), Ok(-210));
        assert_eq!(Calendar::parse_zone("UTC"), Ok(0));
        for bad in ["Europe/Paris", "+8:00", "+19:00", "+08:60", "08:00"] {
            assert!(Calendar::parse_zone(bad).is_err(), "{bad}");
        }
        let c = Calendar {
            unit: CalendarUnit::Day,
            offset_minutes: -210,
        };
        assert_eq!(c.zone(), "-03:30");
    }
}
