//! What the filter says to clients: the rate-limit headers (rendered by `sluice_core::headers`,
//! the one home of their format) and the `application/problem+json` bodies of its own answers.

use sluice_core::headers::{render, HeaderFamilies, Policy};
use sluice_core::time::ceil_secs;
use sluice_core::wire::ThrottleResponse;
use sluice_core::Decision;

const NS_PER_MS: u64 = 1_000_000;

/// Header saying the rule would have denied (shadow mode).
pub const SHADOW_HEADER: &str = "x-sluice-shadow";
/// Header saying the backend failed and the failure mode applied; the value is the reason.
pub const FAILURE_HEADER: &str = "x-sluice-failure";
/// Header saying the action has no rule and the `unknown_action` policy applied.
pub const UNKNOWN_ACTION_HEADER: &str = "x-sluice-unknown-action";

/// The numbers the headers are rendered from, whether from the backend or the denial cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Numbers {
    /// Whether to render as an allowed request (no `Retry-After`).
    pub allowed: bool,
    /// Quota (the rule's capacity).
    pub limit: u64,
    /// Policy window in milliseconds.
    pub window_ms: u64,
    /// Remaining requests.
    pub remaining: u64,
    /// Retry time in nanoseconds, on a denial.
    pub retry_after_ns: Option<u64>,
    /// Time until the key is idle, in nanoseconds.
    pub reset_after_ns: u64,
}

impl Numbers {
    /// The numbers of a backend answer. Shadow would-deny renders as allowed: the client passed.
    pub fn of(r: &ThrottleResponse) -> Numbers {
        Numbers {
            allowed: r.allowed,
            limit: r.limit,
            window_ms: r.window_ms,
            remaining: r.remaining,
            retry_after_ns: if r.allowed {
                None
            } else {
                r.retry_after_ms.map(|ms| ms.saturating_mul(NS_PER_MS))
            },
            reset_after_ns: r.reset_after_ms.saturating_mul(NS_PER_MS),
        }
    }
}

/// Rate-limit headers for `action` (names lowercase, as HTTP/2 wants).
pub fn rate_limit_headers(
    action: &str,
    n: &Numbers,
    families: HeaderFamilies,
) -> Vec<(&'static str, String)> {
    let policy = Policy {
        name: action,
        quota: n.limit,
        window_ns: n.window_ms.saturating_mul(NS_PER_MS),
    };
    let decision = Decision {
        allowed: n.allowed,
        capacity: n.limit,
        remaining: n.remaining,
        retry_after: n.retry_after_ns,
        reset_after: n.reset_after_ns,
        level: 0.0,
    };
    render(&policy, &decision, families)
}

/// An RFC 9457 problem body. `detail` and `action` are escaped by serde_json.
pub fn problem(
    status: u16,
    title: &str,
    detail: &str,
    action: &str,
    extra: Option<(&str, u64)>,
) -> Vec<u8> {
    let mut body = serde_json::Map::new();
    body.insert("type".into(), "about:blank".into());
    body.insert("title".into(), title.into());
    body.insert("status".into(), status.into());
    body.insert("detail".into(), detail.into());
    body.insert("action".into(), action.into());
    if let Some((name, value)) = extra {
        body.insert(name.into(), value.into());
    }
    serde_json::to_vec(&serde_json::Value::Object(body)).unwrap_or_default()
}

/// The 429 body for a denial of `action`.
pub fn too_many_requests(action: &str, retry_after_ns: Option<u64>) -> Vec<u8> {
    let detail = match retry_after_ns {
        Some(ns) => format!(
            "rate limit of action {action:?} exceeded; retry after {} s",
            ceil_secs(ns).max(1)
        ),
        None => format!("rate limit of action {action:?} exceeded; this request can never pass"),
    };
    let retry_ms = retry_after_ns.map(|ns| ns.div_ceil(NS_PER_MS));
    problem(
        429,
        "Too Many Requests",
        &detail,
        action,
        retry_ms.map(|ms| ("retry_after_ms", ms)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denial_body_is_a_problem_naming_the_action() {
        let body: serde_json::Value =
            serde_json::from_slice(&too_many_requests("reply", Some(1_500 * NS_PER_MS))).unwrap();
        assert_eq!(body["status"], 429);
        assert_eq!(body["action"], "reply");
        assert_eq!(body["retry_after_ms"], 1500);
        assert!(body["detail"].as_str().unwrap().contains("retry after 2 s"));
    }

    #[test]
    fn numbers_of_a_denial_carry_retry_after() {
        let n = Numbers {
            allowed: false,
            limit: 3,
            window_ms: 60_000,
            remaining: 0,
            retry_after_ns: Some(20_000 * NS_PER_MS),
            reset_after_ns: 60_000 * NS_PER_MS,
        };
        let h = rate_limit_headers("reply", &n, HeaderFamilies::default());
        assert!(h.contains(&("retry-after", "20".to_string())));
        assert!(h.contains(&("ratelimit-policy", "\"reply\";q=3;w=60".to_string())));
        assert!(h.contains(&("x-ratelimit-remaining", "0".to_string())));
    }
}
