//! A route's `cost` section: the route meters units of cost known only after the response (LLM
//! tokens, rows, bytes). At request time the filter reserves [`Cost::reserve`] units (the
//! throttle's quantity); when the response ends it commits the actual cost read from
//! [`Cost::actual`] (`POST /v1/commit`), and the backend refunds or debits the difference.

use serde::Deserialize;
use sluice_core::limits::MAX_QUANTITY;
use sluice_core::FieldError;

use super::{header_name, Protocol};

/// What a request reserves: a constant, or a request header's number with a default and a cap.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reserve {
    /// The same reservation for every request (0 reserves nothing: a pure check, then the whole
    /// actual cost is debited at commit: check-then-debit).
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

impl Reserve {
    /// The reservation for a request whose `header` values are `values` (ignored for a constant).
    /// A header given once with a number is capped at `max`; anything else takes `default`.
    pub fn amount(&self, values: &[Vec<u8>]) -> u64 {
        if let Some(n) = self.constant {
            return n;
        }
        let default = self.default.unwrap_or(0);
        match values {
            [one] => units(one).map_or(default, |n| n.min(self.max.unwrap_or(MAX_QUANTITY))),
            _ => default,
        }
    }
}

fn bounded(field: String, value: u64) -> Result<u64, FieldError> {
    if value > MAX_QUANTITY {
        return Err(FieldError::new(
            field,
            format!("must be at most {MAX_QUANTITY}; got {value}"),
        ));
    }
    Ok(value)
}

impl CostWritten {
    /// Validates the section of the route at `at` (`routes[i]`), naming the field at fault.
    pub fn validate(self, at: &str, protocol: Protocol, checks: bool) -> Result<Cost, FieldError> {
        let here = format!("{at}.cost");
        if protocol == Protocol::Grpc {
            return Err(FieldError::new(
                here,
                "cost needs backend.protocol grpc_stream or http (the commit is POST /v1/commit; the filter's RLS callout cannot commit; Envoy's own ratelimit filter can, docs/rls.md)",
            ));
        }
        if checks {
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
                for (name, given) in [("default", reserve.default), ("max", reserve.max)] {
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
                if default > max {
                    return Err(FieldError::new(
                        format!("{r}.default"),
                        format!("must be at most max ({max}); got {default}"),
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
            r#"{"reserve": {"constant": 0}, "actual": {"header": "x-rows"}}"#,
        )
        .unwrap();
        assert_eq!(c.routes[0].cost.as_ref().unwrap().reserve.amount(&[]), 0);
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
