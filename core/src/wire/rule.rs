//! A rule's JSON form, as the admin API, the rules file and the dashboard exchange it. Parsed
//! by serde into [`RawRule`], then validated into a [`Rule`] by `TryFrom`, so an invalid rule
//! cannot exist past the edge.

use serde::{Deserialize, Serialize};

use crate::calendar::{Calendar, CalendarUnit, Zone};
use crate::duration::Span;
use crate::field_error::FieldError;
use crate::lease::Lease;
use crate::rule::{Algorithm, Limit, Mode, Rate, Rule};

/// A rule as sent: every field present or not, nothing yet checked across fields. `rate` for
/// gcra, leaky_bucket and token_bucket; `window` for fixed_window, sliding_log and
/// sliding_window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = Rule))]
#[serde(deny_unknown_fields)]
pub struct RawRule {
    /// 1–64 of `[A-Za-z0-9_.:-]`. In `PUT /v1/rules/{action}` it may be omitted; if present it
    /// must equal the path's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(example = "reply"))]
    pub action: Option<String>,
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Requests that may pass back to back from idle (for gcra: redis-cell max_burst + 1).
    #[cfg_attr(feature = "openapi", schema(example = 16, minimum = 1))]
    pub capacity: u64,
    /// The steady rate of a meter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<Rate>,
    /// The window of a window algorithm: a duration, `"500ms"`, `"60s"`, `"5m"`, `"1h"`, `"1d"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, example = "60s"))]
    pub window: Option<Span>,
    /// fixed_window only, in place of `window`: windows aligned to the calendar,
    /// `{"unit": "month", "zone": "Europe/Paris"}` (unit day, week or month; zone `"UTC"`, the
    /// default, a fixed offset like `"+08:00"`, or an IANA zone name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calendar: Option<RawCalendar>,
    /// `enforce` (default) or `shadow`.
    #[serde(default)]
    pub mode: Option<Mode>,
    /// Free text for operators (at most 1024 bytes).
    #[serde(default)]
    pub description: Option<String>,
    /// Off unless set: let the sluice filter admit up to `max` requests per grant itself, for at
    /// most `ttl`, with units debited in advance (docs/algorithms.md states what that costs in
    /// exactness).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<Lease>,
}

/// A calendar window as sent: a unit and a zone (`"UTC"` when absent, `±HH:MM`, or an IANA
/// zone name such as `"Europe/Paris"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RawCalendar {
    /// `day`, `week` (from Monday) or `month` (from the 1st).
    pub unit: CalendarUnit,
    /// `"UTC"` (default), a fixed offset like `"+08:00"` (within ±18:00), or an IANA zone name
    /// like `"Europe/Paris"` or `"America/New_York"` (any ASCII case; answered as the tz database
    /// spells it). A named zone follows daylight saving: its windows start at local midnight
    /// (a day across a change lasts 23 or 25 hours, a month starts at midnight on the 1st
    /// whatever the offset that day). The tz database is bundled into the build (IANA
    /// release 2026f), never read from the system: a zone whose rules change by decree needs a
    /// new build (docs/algorithms.md, "Calendar windows").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(example = "Europe/Paris"))]
    pub zone: Option<String>,
}

impl TryFrom<&RawCalendar> for Calendar {
    type Error = FieldError;

    fn try_from(raw: &RawCalendar) -> Result<Calendar, FieldError> {
        let zone = match &raw.zone {
            None => Zone::UTC,
            Some(z) => Zone::parse(z).map_err(|r| FieldError::new("calendar.zone", r))?,
        };
        Ok(Calendar {
            unit: raw.unit,
            zone,
        })
    }
}

impl From<Calendar> for RawCalendar {
    fn from(c: Calendar) -> RawCalendar {
        RawCalendar {
            unit: c.unit,
            zone: Some(c.zone()),
        }
    }
}

impl TryFrom<RawRule> for Rule {
    type Error = FieldError;

    fn try_from(raw: RawRule) -> Result<Rule, FieldError> {
        let action = raw
            .action
            .ok_or_else(|| FieldError::new("action", "is required"))?;
        let algorithm = raw.algorithm;
        let limit = if algorithm.uses_rate() {
            if raw.window.is_some() {
                return Err(FieldError::new(
                    "window",
                    format!("{algorithm} takes a rate, not a window"),
                ));
            }
            if raw.calendar.is_some() {
                return Err(FieldError::new(
                    "calendar",
                    format!("{algorithm} takes a rate, not a calendar"),
                ));
            }
            Limit::Rate(raw.rate.ok_or_else(|| {
                FieldError::new("rate", "is required ({\"count\": N, \"period\": \"60s\"})")
            })?)
        } else {
            if raw.rate.is_some() {
                return Err(FieldError::new(
                    "rate",
                    format!("{algorithm} takes a window, not a rate"),
                ));
            }
            match (&raw.window, &raw.calendar) {
                (Some(_), Some(_)) => {
                    return Err(FieldError::new(
                        "calendar",
                        "give either a window or a calendar, not both",
                    ))
                }
                (Some(w), None) => Limit::Window(*w),
                (None, Some(c)) if algorithm == Algorithm::FixedWindow => {
                    Limit::Calendar(Calendar::try_from(c)?)
                }
                (None, Some(_)) => {
                    return Err(FieldError::new(
                        "calendar",
                        format!("{algorithm} takes a window; only fixed_window takes a calendar"),
                    ))
                }
                (None, None) => {
                    return Err(FieldError::new(
                        "window",
                        "is required (a duration like \"60s\")",
                    ))
                }
            }
        };
        Rule::new(
            &action,
            algorithm,
            raw.capacity,
            limit,
            raw.mode.unwrap_or_default(),
            raw.description.as_deref().unwrap_or(""),
        )?
        .with_lease(raw.lease)
    }
}

impl From<&Rule> for RawRule {
    fn from(rule: &Rule) -> RawRule {
        let (rate, window, calendar) = match rule.limit() {
            Limit::Rate(rate) => (Some(rate), None, None),
            Limit::Window(window) => (None, Some(window), None),
            Limit::Calendar(c) => (None, None, Some(RawCalendar::from(c))),
        };
        RawRule {
            action: Some(rule.action().as_str().to_owned()),
            algorithm: rule.algorithm(),
            capacity: rule.capacity(),
            rate,
            window,
            calendar,
            mode: Some(rule.mode()),
            description: Some(rule.description().to_owned()),
            lease: rule.lease(),
        }
    }
}

impl From<Rule> for RawRule {
    fn from(rule: Rule) -> RawRule {
        RawRule::from(&rule)
    }
}
