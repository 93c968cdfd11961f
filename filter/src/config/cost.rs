//! A route's `cost` section: the route meters units of cost known only after the response (LLM
//! tokens, rows, bytes). At request time the filter reserves [`Cost::reserve`] units (the
//! throttle's quantity); when the response ends it commits the actual cost read from
//! [`Cost::actual`] (`POST /v1/commit`), and the backend refunds or debits the difference.

use serde::Deserialize;
use sluice_core::limits::{MAX_QUANTITY, MIN_RESERVATION};
use sluice_core::FieldError;

use super::validate::header_name;
use super::{Protocol, RouteCheck};

/// What a request reserves: a constant, or a request header's number with a default and a cap.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reserve {
    /// The same reservation for every request, at least [`MIN_RESERVATION`] (1 is a check that
    /// the budget is not spent, the whole actual cost debited at commit: check-then-debit).
    #[serde(default)]
    pub constant: Option<u64>,
    /// A request header holding a decimal number (e.g. the `max_tokens` a client asked for).
    #[serde(default)]
    pub header: Option<String>,
    /// With `header`: the reservation when the header is absent, repeated or not a number.
    #[serde(default)]
    pub default: Option<u64>,
    /// With `header`: the largest reservation; a larger number is capped to it (default 10^9).
    #[serde(default)]
    pub max: Option<u64>,
    /// With `header`: the smallest reservation; a smaller number (0 included) is raised to it
    /// (default and least [`MIN_RESERVATION`], 1). Why: the header is the client's, and a client
    /// that sent 0 would reserve nothing, pass a spent budget and have its whole usage debited
    /// afterwards: check-then-debit, whatever the upstream does with the header. An explicit 0 is
    /// refused, not merely warned about: the commit settles the difference to the actual cost
    /// anyway, so a floor of 1 costs a client nothing on a budget that is not spent, and 0 would
    /// buy only the free pass (docs/cost-budgets.md).
    #[serde(default)]
    pub min: Option<u64>,
}

/// Where the actual cost comes from: a response header, or a response trailer (streamed
/// responses, whose usage is known only at their end).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActualWritten {
    /// A response header holding the actual cost (a decimal number).
    #[serde(default)]
    pub header: Option<String>,
    /// A response trailer holding the actual cost (a decimal number).
    #[serde(default)]
    pub trailer: Option<String>,
}

/// Where the actual cost is read, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Actual {
    /// A response header (lowercase name).
    Header(String),
    /// A response trailer (lowercase name).
    Trailer(String),
}

/// A route's cost section as written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostWritten {
    /// What to reserve at request time.
    pub reserve: Reserve,
    /// Where the actual cost comes from.
    pub actual: ActualWritten,
}

/// A route's cost section, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cost {
    /// What to reserve.
    pub reserve: Reserve,
    /// Where the actual cost is read.
    pub actual: Actual,
}

/// A decimal number of units (ASCII whitespace around it allowed), at most 10^9; `None` otherwise.
pub fn units(bytes: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(bytes).ok()?.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse::<u64>().ok().filter(|n| *n <= MAX_QUANTITY)
}

/// The number a reservation header asks for: ASCII digits (ASCII whitespace around them
/// allowed), of any length; a number beyond `u64` saturates. Unlike [`units`] (an upstream's
/// usage), a number too large is not "not a number": it asks for more than any cap, and reading
/// it as absent would reserve the (smaller) default for the client that asks for the most.
fn requested(bytes: &[u8]) -> Option<u64> {
    let digits = bytes.trim_ascii();
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(digits.iter().fold(0u64, |n, d| {
        n.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    }))
}

impl Reserve {
    /// The reservation for a request whose `header` values are `values` (ignored for a constant).
    /// A header given once with a decimal number is raised to `min` and capped at `max`; anything
    /// else (absent, repeated, not a number) takes `default` (validated to lie within them).
    /// Never less than [`MIN_RESERVATION`], even for a `Reserve` that was not validated: no value
    /// a client sends reserves nothing.
    pub fn amount(&self, values: &[Vec<u8>]) -> u64 {
        let n = match self.constant {
            Some(n) => n,
            None => {
                let default = self.default.unwrap_or(MIN_RESERVATION);
                let max = self.max.unwrap_or(MAX_QUANTITY);
                let min = self.min.unwrap_or(MIN_RESERVATION);
                match values {
                    // Raised, then capped: never a panic, even on a `Reserve` not validated.
                    [one] => requested(one).map_or(default, |n| n.max(min).min(max)),
                    _ => default,
                }
            }
        };
        n.max(MIN_RESERVATION)
    }
}

/// Why a reservation below [`MIN_RESERVATION`] is refused, in the error naming its field.
const ZERO_RESERVES_NOTHING: &str = "a reservation of 0 asks for nothing: it would pass a spent budget and have the whole usage debited afterwards";

fn bounded(field: String, value: u64) -> Result<u64, FieldError> {
    if value < MIN_RESERVATION {
        return Err(FieldError::new(
            field,
            format!("must be at least {MIN_RESERVATION} ({ZERO_RESERVES_NOTHING}); got {value}"),
        ));
    }
    if value > MAX_QUANTITY {
        return Err(FieldError::new(
            field,
            format!("must be at most {MAX_QUANTITY}; got {value}"),
        ));
    }
    Ok(value)
}

impl CostWritten {
    /// Validates the section of the route at `at` (`routes[i]`, with its all-or-nothing
    /// `checks`), naming the field at fault.
    pub fn validate(
        self,
        at: &str,
        protocol: Protocol,
        checks: &[RouteCheck],
    ) -> Result<Cost, FieldError> {
        let here = format!("{at}.cost");
        if protocol == Protocol::Grpc {
            return Err(FieldError::new(
                here,
                "cost needs backend.protocol grpc_stream or http (the commit is POST /v1/commit; the filter's RLS callout cannot commit; Envoy's own ratelimit filter can, docs/rls.md)",
            ));
        }
        if !checks.is_empty() {
            return Err(FieldError::new(
                here,
                "a route with all-or-nothing checks cannot meter cost; give action and key",
            ));
        }
        let mut reserve = self.reserve;
        let r = format!("{here}.reserve");
        match (&reserve.constant, &reserve.header) {
            (Some(_), Some(_)) | (None, None) => {
                return Err(FieldError::new(
                    r,
                    "give either constant (units) or header (a request header's number)",
                ));
            }
            (Some(n), None) => {
                bounded(format!("{r}.constant"), *n)?;
                let only_with_header = [
                    ("default", reserve.default),
                    ("max", reserve.max),
                    ("min", reserve.min),
                ];
                for (name, given) in only_with_header {
                    if given.is_some() {
                        return Err(FieldError::new(
                            format!("{r}.{name}"),
                            "only with header (a constant is the reservation)",
                        ));
                    }
                }
            }
            (None, Some(name)) => {
                let name =
                    header_name(name).map_err(|e| FieldError::new(format!("{r}.header"), e))?;
                reserve.header = Some(name);
                let default = reserve.default.ok_or_else(|| {
                    FieldError::new(
                        format!("{r}.default"),
                        "required with header: the reservation when the header is absent or not a number",
                    )
                })?;
                bounded(format!("{r}.default"), default)?;
                let max = bounded(format!("{r}.max"), reserve.max.unwrap_or(MAX_QUANTITY))?;
                let min = bounded(format!("{r}.min"), reserve.min.unwrap_or(MIN_RESERVATION))?;
                if min > max {
                    return Err(FieldError::new(
                        format!("{r}.min"),
                        format!("must be at most max ({max}); got {min}"),
                    ));
                }
                if default > max {
                    return Err(FieldError::new(
                        format!("{r}.default"),
                        format!("must be at most max ({max}); got {default}"),
                    ));
                }
                // Else a client would get under the floor by leaving the header out.
                if default < min {
                    return Err(FieldError::new(
                        format!("{r}.default"),
                        format!("must be at least min ({min}); got {default}"),
                    ));
                }
            }
        }
        let a = format!("{here}.actual");
        let actual = match (self.actual.header, self.actual.trailer) {
            (Some(name), None) => Actual::Header(
                header_name(&name).map_err(|e| FieldError::new(format!("{a}.header"), e))?,
            ),
            (None, Some(name)) => Actual::Trailer(
                header_name(&name).map_err(|e| FieldError::new(format!("{a}.trailer"), e))?,
            ),
            _ => {
                return Err(FieldError::new(
                    a,
                    "give either header (a response header) or trailer (a response trailer)",
                ));
            }
        };
        Ok(Cost { reserve, actual })
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Actual, Config};

    fn parse(protocol: &str, cost: &str) -> Result<Config, sluice_core::FieldError> {
        let json = format!(
            r#"{{"backend": {{"cluster": "c", "protocol": "{protocol}"}},
            "routes": [{{"action": "a", "key": {{"source": "path"}}, "cost": {cost}}}]}}"#
        );
        Config::from_json(json.as_bytes())
    }

    #[test]
    fn a_cost_section_parses_and_names_its_header() {
        let c = parse(
            "grpc_stream",
            r#"{"reserve": {"header": "X-Max-Tokens", "default": 256, "max": 4096},
                "actual": {"trailer": "X-Usage"}}"#,
        )
        .unwrap();
        let cost = c.routes[0].cost.as_ref().unwrap();
        assert_eq!(cost.reserve.header.as_deref(), Some("x-max-tokens"));
        assert_eq!(cost.actual, Actual::Trailer("x-usage".into()));
        assert!(c.meters_cost());
        let c = parse(
            "http",
            r#"{"reserve": {"constant": 1}, "actual": {"header": "x-rows"}}"#,
        )
        .unwrap();
        assert_eq!(c.routes[0].cost.as_ref().unwrap().reserve.amount(&[]), 1);
    }

    #[test]
    fn a_reserve_header_is_raised_to_min_and_capped_at_max() {
        let c = parse(
            "http",
            r#"{"reserve": {"header": "x-m", "default": 50, "min": 10, "max": 100},
                "actual": {"header": "x-used"}}"#,
        )
        .unwrap();
        let reserve = &c.routes[0].cost.as_ref().unwrap().reserve;
        let one = |v: &[u8]| reserve.amount(&[v.to_vec()]);
        assert_eq!(one(b"0"), 10, "0 is raised to min");
        assert_eq!(one(b"1"), 10);
        assert_eq!(one(b"10"), 10);
        assert_eq!(one(b"11"), 11);
        assert_eq!(one(b" 7 "), 10);
        assert_eq!(one(b"101"), 100);
        // A number of any length asks for more than the cap: the cap, not the default.
        assert_eq!(one(b"1000000001"), 100);
        assert_eq!(one(&[b'9'; 60_000]), 100);
        for not_a_number in [
            &b""[..],
            b"-5",
            b"1e3",
            b"+7",
            b"0x10",
            b"\xff\xfe",
            b"\xc2\xa07",
        ] {
            assert_eq!(one(not_a_number), 50, "{not_a_number:?}");
        }
        assert_eq!(reserve.amount(&[]), 50, "absent");
        assert_eq!(
            reserve.amount(&[b"0".to_vec(), b"0".to_vec()]),
            50,
            "repeated"
        );
    }

    #[test]
    fn without_min_no_header_value_reserves_less_than_one_unit() {
        // The route as the docs write it, with no `min`: the floor is 1, so a spent budget
        // refuses whatever the client sends.
        let c = parse(
            "http",
            r#"{"reserve": {"header": "x-m", "default": 5, "max": 100}, "actual": {"header": "x-used"}}"#,
        )
        .unwrap();
        let reserve = &c.routes[0].cost.as_ref().unwrap().reserve;
        assert_eq!(reserve.min, None, "as written");
        let one = |v: &[u8]| reserve.amount(&[v.to_vec()]);
        assert_eq!(one(b"0"), 1, "0 is raised to the floor");
        assert_eq!(one(b"000"), 1);
        assert_eq!(one(b"1"), 1);
        assert_eq!(one(b"2"), 2);
        assert_eq!(one(&[b'9'; 100]), 100, "huge: the cap");
        for not_a_number in [&b""[..], b"-1", b"junk", b"\xff\xfe0"] {
            assert_eq!(one(not_a_number), 5, "{not_a_number:?}: the default");
        }
        assert_eq!(reserve.amount(&[]), 5, "absent: the default");
        // A `Reserve` that skipped validation still never reserves 0.
        let raw = crate::config::Reserve {
            constant: None,
            header: Some("x-m".into()),
            default: Some(0),
            max: Some(0),
            min: Some(0),
        };
        assert_eq!(raw.amount(&[b"0".to_vec()]), 1);
        assert_eq!(raw.amount(&[]), 1);
        let raw = crate::config::Reserve {
            constant: Some(0),
            ..raw
        };
        assert_eq!(raw.amount(&[]), 1);
    }

    #[test]
    fn a_reservation_of_zero_is_refused_naming_the_field_and_why() {
        let ok_actual = r#""actual": {"header": "x-used"}"#;
        for (reserve, field) in [
            (r#"{"constant": 0}"#, "routes[0].cost.reserve.constant"),
            (
                r#"{"header": "x-m", "default": 5, "min": 0}"#,
                "routes[0].cost.reserve.min",
            ),
            (
                r#"{"header": "x-m", "default": 0}"#,
                "routes[0].cost.reserve.default",
            ),
            (
                r#"{"header": "x-m", "default": 0, "min": 0}"#,
                "routes[0].cost.reserve.default",
            ),
        ] {
            let err =
                parse("http", &format!(r#"{{"reserve": {reserve}, {ok_actual}}}"#)).unwrap_err();
            assert_eq!(err.field, field, "{reserve} -> {err}");
            assert!(
                err.to_string().contains("must be at least 1")
                    && err.to_string().contains("spent budget"),
                "{err}"
            );
        }
    }

    #[test]
    fn bad_cost_sections_are_refused_naming_the_field() {
        let ok_actual = r#""actual": {"header": "x-used"}"#;
        let cases = [
            (
                "grpc",
                format!(r#"{{"reserve": {{"constant": 1}}, {ok_actual}}}"#),
                "routes[0].cost",
            ),
            (
                "http",
                format!(r#"{{"reserve": {{}}, {ok_actual}}}"#),
                "routes[0].cost.reserve",
            ),
            (
                "http",
                format!(r#"{{"reserve": {{"constant": 1, "header": "x"}}, {ok_actual}}}"#),
                "routes[0].cost.reserve",
            ),
            (
                "http",
                format!(r#"{{"reserve": {{"constant": 1000000001}}, {ok_actual}}}"#),
                "routes[0].cost.reserve.constant",
            ),
            (
                "http",
                format!(r#"{{"reserve": {{"constant": 1, "max": 3}}, {ok_actual}}}"#),
                "routes[0].cost.reserve.max",
            ),
            (
                "http",
                format!(r#"{{"reserve": {{"header": "x-m"}}, {ok_actual}}}"#),
                "routes[0].cost.reserve.default",
            ),
            (
                "http",
                format!(r#"{{"reserve": {{"header": "x m", "default": 1}}, {ok_actual}}}"#),
                "routes[0].cost.reserve.header",
            ),
            (
                "http",
                format!(
                    r#"{{"reserve": {{"header": "x-m", "default": 9, "max": 8}}, {ok_actual}}}"#
                ),
                "routes[0].cost.reserve.default",
            ),
            (
                "http",
                format!(r#"{{"reserve": {{"constant": 1, "min": 1}}, {ok_actual}}}"#),
                "routes[0].cost.reserve.min",
            ),
            (
                "http",
                format!(
                    r#"{{"reserve": {{"header": "x-m", "default": 8, "min": 9, "max": 8}}, {ok_actual}}}"#
                ),
                "routes[0].cost.reserve.min",
            ),
            (
                "http",
                format!(
                    r#"{{"reserve": {{"header": "x-m", "default": 2, "min": 3, "max": 8}}, {ok_actual}}}"#
                ),
                "routes[0].cost.reserve.default",
            ),
            (
                "http",
                format!(
                    r#"{{"reserve": {{"header": "x-m", "default": 2, "min": 1000000001}}, {ok_actual}}}"#
                ),
                "routes[0].cost.reserve.min",
            ),
            (
                "http",
                r#"{"reserve": {"constant": 1}, "actual": {}}"#.to_owned(),
                "routes[0].cost.actual",
            ),
            (
                "http",
                r#"{"reserve": {"constant": 1}, "actual": {"header": "a", "trailer": "b"}}"#
                    .to_owned(),
                "routes[0].cost.actual",
            ),
            (
                "http",
                r#"{"reserve": {"constant": 1}, "actual": {"trailer": "a b"}}"#.to_owned(),
                "routes[0].cost.actual.trailer",
            ),
            (
                "http",
                r#"{"reserve": {"constant": 1}, "actual": {"header": "x"}, "extra": 1}"#.to_owned(),
                "routes[0].cost.extra",
            ),
        ];
        for (protocol, cost, field) in cases {
            let err = parse(protocol, &cost).unwrap_err();
            assert_eq!(err.field, field, "{cost} -> {err}");
        }
        let err = Config::from_json(
            br#"{"backend": {"cluster": "c"}, "routes": [{"match": {},
            "checks": [{"action": "a", "key": {"source": "path"}}, {"action": "b", "key": {"source": "path"}}],
            "cost": {"reserve": {"constant": 1}, "actual": {"header": "x"}}}]}"#,
        )
        .unwrap_err();
        assert_eq!(err.field, "routes[0].cost", "{err}");
    }
}
