//! Durations as people write them in rules: `"500ms"`, `"60s"`, `"5m"`, `"1h"`, `"1d"`.

use std::fmt;

use crate::limits::{MAX_FIXED_WINDOW_SPAN_MS, MIN_SPAN_MS};
use crate::time::NANOS_PER_MILLI;

/// A validated duration of whole milliseconds, between [`MIN_SPAN_MS`] and
/// [`MAX_FIXED_WINDOW_SPAN_MS`] (365 days); rules bound every other use by
/// [`crate::limits::MAX_SPAN_MS`] (7 days).
///
/// Whole milliseconds keep clock-aligned windows computable exactly in the Redis Lua twins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Span {
    millis: u64,
}

/// Why a duration string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpanError {
    /// Not `<digits><unit>`.
    #[error("expected a whole number followed by a unit (ms, s, m, h, d), like \"500ms\" or \"60s\"; got {0:?}")]
    Syntax(String),
    /// Zero or below the minimum.
    #[error("must be at least 1ms; got {0:?}")]
    TooShort(String),
    /// Above the maximum.
    #[error("must be at most 365d; got {0:?}")]
    TooLong(String),
}

const UNITS: [(&str, u64); 5] = [
    ("d", 86_400_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1_000),
    ("ms", 1),
];

impl Span {
    /// A span of whole milliseconds, if within bounds.
    pub fn from_millis(millis: u64) -> Option<Span> {
        (MIN_SPAN_MS..=MAX_FIXED_WINDOW_SPAN_MS)
            .contains(&millis)
            .then_some(Span { millis })
    }

    /// Parses `"<digits><unit>"` with unit one of ms, s, m, h, d.
    ///
    /// ```
    /// use sluice_core::Span;
    ///
    /// assert_eq!(Span::parse("90s").unwrap().millis(), 90_000);
    /// assert_eq!(
    ///     Span::parse("1.5s").unwrap_err().to_string(),
    ///     r#"expected a whole number followed by a unit (ms, s, m, h, d), like "500ms" or "60s"; got "1.5s""#
    /// );
    /// ```
    pub fn parse(text: &str) -> Result<Span, SpanError> {
        let syntax = || SpanError::Syntax(text.to_owned());
        let digits_end = text
            .find(|c: char| !c.is_ascii_digit())
            .ok_or_else(syntax)?;
        let (digits, unit) = text.split_at(digits_end);
        if digits.is_empty() {
            return Err(syntax());
        }
        let per_unit = UNITS
            .iter()
            .find(|(name, _)| *name == unit)
            .map(|(_, ms)| *ms)
            .ok_or_else(syntax)?;
        // Many digits can only mean "too long" (leading zeros aside, which we refuse as syntax
        // noise only when they overflow).
        let value: u64 = digits
            .parse()
            .map_err(|_| SpanError::TooLong(text.to_owned()))?;
        let millis = value
            .checked_mul(per_unit)
            .ok_or_else(|| SpanError::TooLong(text.to_owned()))?;
        if millis < MIN_SPAN_MS {
            return Err(SpanError::TooShort(text.to_owned()));
        }
        if millis > MAX_FIXED_WINDOW_SPAN_MS {
            return Err(SpanError::TooLong(text.to_owned()));
        }
        Ok(Span { millis })
    }

    /// Length in milliseconds.
    pub fn millis(self) -> u64 {
        self.millis
    }

    /// Length in nanoseconds.
    pub fn nanos(self) -> u64 {
        self.millis * NANOS_PER_MILLI
    }
}

impl fmt::Display for Span {
    /// The largest unit that divides the span exactly, so `"60000ms"` prints as `"1m"`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (unit, per) = UNITS
            .iter()
            .find(|(_, per)| self.millis.is_multiple_of(*per))
            .copied()
            .unwrap_or(("ms", 1));
        write!(f, "{}{}", self.millis / per, unit)
    }
}

impl std::str::FromStr for Span {
    type Err = SpanError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Span::parse(s)
    }
}

impl serde::Serialize for Span {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Span {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Span::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_unit() {
        assert_eq!(Span::parse("500ms").map(Span::millis), Ok(500));
        assert_eq!(Span::parse("60s").map(Span::millis), Ok(60_000));
        assert_eq!(Span::parse("5m").map(Span::millis), Ok(300_000));
        assert_eq!(Span::parse("1h").map(Span::millis), Ok(3_600_000));
        assert_eq!(Span::parse("1d").map(Span::millis), Ok(86_400_000));
    }

    #[test]
    fn refuses_zero_huge_and_malformed() {
        assert!(matches!(Span::parse("0s"), Err(SpanError::TooShort(_))));
        assert!(matches!(
            Span::parse("99999999h"),
            Err(SpanError::TooLong(_))
        ));
        assert!(matches!(
            Span::parse("99999999999999999999999s"),
            Err(SpanError::TooLong(_))
        ));
        for bad in [
            "", "s", "60", "1.5s", "-1s", " 1s", "1 s", "1S", "1sec", "1µs",
        ] {
            assert!(
                matches!(Span::parse(bad), Err(SpanError::Syntax(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn displays_in_the_largest_exact_unit() {
        assert_eq!(
            Span::parse("60000ms").map(|s| s.to_string()),
            Ok("1m".into())
        );
        assert_eq!(Span::parse("90s").map(|s| s.to_string()), Ok("90s".into()));
        assert_eq!(
            Span::parse("1500ms").map(|s| s.to_string()),
            Ok("1500ms".into())
        );
    }
}
