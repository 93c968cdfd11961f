//! Envoy rate limit descriptors (RLS v3) as sluice checks: the one mapping from a descriptor's
//! entries to an (action, key), used by the backend's gRPC service and by the filter when it
//! calls that service.
//!
//! # The mapping
//!
//! A descriptor is an ordered list of `(key, value)` entries, as Envoy's `rate_limits` actions
//! produce them. Its **first entry names the action**: a `generic_key` entry names it by its
//! value, any other entry by its key. The **key** is the values of the other entries (and of the
//! first one, unless it is a `generic_key`), in order: one value is the key exactly as sent (so
//! the filter's HTTP and gRPC callouts meter the same bucket); several are joined by `|` after
//! escaping `%` and `|`, so different value lists of one shape never share a bucket. Give each
//! action one descriptor shape.
//!
//! | Envoy `rate_limits` actions | entries | action | key |
//! |---|---|---|---|
//! | `request_headers {header_name: x-user-id, descriptor_key: user}` | `(user, alice)` | `user` | `alice` |
//! | `remote_address {}` | `(remote_address, 10.0.0.7)` | `remote_address` | `10.0.0.7` |
//! | `generic_key {descriptor_value: reply}` + `request_headers {…, descriptor_key: user}` | `(generic_key, reply) (user, alice)` | `reply` | `alice` |
//! | `generic_key {descriptor_value: reply_all}` | `(generic_key, reply_all)` | `reply_all` | `` (one bucket) |
//! | `request_headers {header_name: ":path", descriptor_key: path}` | `(path, /api/x)` | `path` | `/api/x` |
//!
//! The request's `domain` is not part of the action (sluice's rules are global); it must not be
//! empty, as Envoy requires.

use crate::field_error::FieldError;
use crate::rule::Action;

/// The entry key whose value names the action instead of its key.
pub const GENERIC_KEY: &str = "generic_key";

/// The entry key the filter uses for the subject when it sends its own checks as descriptors.
pub const SUBJECT_KEY: &str = "key";

/// The `domain` of every request the sluice filter sends to the rate limit service: always
/// answered by sluice's rules, even beside an envoyproxy/ratelimit configuration whose
/// semantics answer other unknown domains OK (else every `grpc` callout would pass unchecked).
pub const FILTER_DOMAIN: &str = "sluice";

/// The dynamic metadata key the rate limit service lists sluice's answers under (one
/// `ThrottleResponse` or null per descriptor, in order).
pub const METADATA_KEY: &str = "sluice";

/// Most entries one descriptor may carry.
pub const MAX_ENTRIES: usize = 16;

const MS_PER_DAY: u64 = 86_400_000;

/// Envoy's `RateLimitResponse.RateLimit.Unit` values (ratelimit/v3/rls.proto) with their length in
/// milliseconds (a month as 30 days, a year as 365), shortest first: the one table both the
/// backend's statuses and the filter's reading of them use.
pub const RLS_UNITS: [(i32, u64); 7] = [
    (1, 1_000),            // SECOND
    (2, 60_000),           // MINUTE
    (3, 3_600_000),        // HOUR
    (4, MS_PER_DAY),       // DAY
    (7, 7 * MS_PER_DAY),   // WEEK
    (5, 30 * MS_PER_DAY),  // MONTH
    (6, 365 * MS_PER_DAY), // YEAR
];

/// The length of an RLS unit in milliseconds; `None` for `UNKNOWN` (0) or a value not in the
/// proto.
pub fn unit_millis(unit: i32) -> Option<u64> {
    RLS_UNITS
        .iter()
        .find(|(u, _)| *u == unit)
        .map(|(_, ms)| *ms)
}

/// The RLS unit closest to a policy window, by ratio (30 s is a minute, not 30 seconds: 2× off
/// rather than 30×); a tie goes to the shorter unit. A window below a second is a second.
pub fn closest_unit(window_ms: u64) -> i32 {
    let w = window_ms.max(1) as f64;
    let mut best = (RLS_UNITS[0].0, f64::INFINITY);
    for (unit, ms) in RLS_UNITS {
        let off = (w / ms as f64).ln().abs();
        if off < best.1 {
            best = (unit, off);
        }
    }
    best.0
}

/// The (action, key) a descriptor stands for. `index` is the descriptor's position in the
/// request, for the field named in a refusal (`descriptors[2].entries[0].key`).
pub fn to_check<'a>(
    index: usize,
    entries: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<(Action, String), FieldError> {
    let field = |what: &str| format!("descriptors[{index}].{what}");
    let mut entries = entries.into_iter().enumerate();
    let Some((_, (first_key, first_value))) = entries.next() else {
        return Err(FieldError::new(field("entries"), "must not be empty"));
    };
    let (name, name_field) = if first_key == GENERIC_KEY {
        (first_value, field("entries[0].value"))
    } else {
        (first_key, field("entries[0].key"))
    };
    let action = Action::parse(name).map_err(|reason| {
        FieldError::new(name_field, format!("names the action, which {reason}"))
    })?;
    let mut values: Vec<&str> = Vec::new();
    if first_key != GENERIC_KEY {
        values.push(first_value);
    }
    for (i, (key, value)) in entries {
        if i >= MAX_ENTRIES {
            return Err(FieldError::new(
                field("entries"),
                format!("at most {MAX_ENTRIES} entries"),
            ));
        }
        if key.is_empty() {
            return Err(FieldError::new(
                field(&format!("entries[{i}].key")),
                "must not be empty",
            ));
        }
        values.push(value);
    }
    Ok((action, join(&values)))
}

/// The descriptor entries the filter sends for one of its own checks; [`to_check`] maps them back
/// to exactly `(action, key)`.
pub fn from_check(action: &Action, key: &str) -> [(&'static str, String); 2] {
    [
        (GENERIC_KEY, action.as_str().to_owned()),
        (SUBJECT_KEY, key.to_owned()),
    ]
}

/// A key from descriptor values: one value as sent, several joined by `|` after escaping `%`
/// and `|` (also the key of a limit from an envoyproxy/ratelimit configuration).
pub fn join(values: &[&str]) -> String {
    match values {
        [] => String::new(),
        [one] => (*one).to_owned(),
        many => many.iter().map(|v| escape(v)).collect::<Vec<_>>().join("|"),
    }
}

/// `%` → `%25`, `|` → `%7C`: values joined by `|` stay apart.
fn escape(value: &str) -> String {
    if !value.contains(['%', '|']) {
        return value.to_owned();
    }
    value.replace('%', "%25").replace('|', "%7C")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(entries: &[(&str, &str)]) -> Result<(String, String), String> {
        to_check(0, entries.iter().copied())
            .map(|(a, k)| (a.as_str().to_owned(), k))
            .map_err(|e| e.field)
    }

    #[test]
    fn the_documented_examples() {
        let ok = |a: &str, k: &str| Ok((a.to_owned(), k.to_owned()));
        assert_eq!(check(&[("user", "alice")]), ok("user", "alice"));
        assert_eq!(
            check(&[("remote_address", "10.0.0.7")]),
            ok("remote_address", "10.0.0.7")
        );
        assert_eq!(
            check(&[("generic_key", "reply"), ("user", "alice")]),
            ok("reply", "alice")
        );
        assert_eq!(check(&[("generic_key", "reply_all")]), ok("reply_all", ""));
        assert_eq!(check(&[("path", "/api/x")]), ok("path", "/api/x"));
        assert_eq!(
            check(&[("generic_key", "r"), ("user", "a"), ("path", "/x")]),
            ok("r", "a|/x")
        );
    }

    #[test]
    fn different_value_lists_never_share_a_key() {
        let a = check(&[("generic_key", "r"), ("u", "a|b"), ("v", "c")]);
        let b = check(&[("generic_key", "r"), ("u", "a"), ("v", "b|c")]);
        assert_ne!(a, b);
        let c = check(&[("generic_key", "r"), ("u", "a%7Cb")]);
        let d = check(&[("generic_key", "r"), ("u", "a|b")]);
        assert_ne!(c, d);
    }

    #[test]
    fn the_filters_checks_round_trip() {
        for key in ["", "alice", "a|b", "100%", "%7C", "sha256:ab"] {
            let action = Action::parse("reply").unwrap();
            let entries = from_check(&action, key);
            let back = to_check(0, entries.iter().map(|(k, v)| (*k, v.as_str()))).unwrap();
            assert_eq!(back.0, action);
            assert_eq!(back.1, key, "the same bucket as the HTTP callout's");
        }
    }

    #[test]
    fn refusals_name_the_entry() {
        assert_eq!(check(&[]), Err("descriptors[0].entries".to_owned()));
        assert_eq!(
            check(&[("generic_key", "")]),
            Err("descriptors[0].entries[0].value".to_owned())
        );
        assert_eq!(
            check(&[("a b", "x")]),
            Err("descriptors[0].entries[0].key".to_owned())
        );
        assert_eq!(
            check(&[("u", "x"), ("", "y")]),
            Err("descriptors[0].entries[1].key".to_owned())
        );
    }
}
