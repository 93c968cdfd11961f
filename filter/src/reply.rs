//! What the filter says to clients besides the rate-limit headers (those are rendered by
//! `sluice_core::headers`, the one home of their format): the names of its own headers and the
//! `application/problem+json` bodies of its own answers.

use sluice_core::headers::retry_after_secs;

/// Header saying the rule would have denied (shadow mode).
pub const SHADOW_HEADER: &str = "x-sluice-shadow";
/// Header saying the backend failed and the failure mode applied; the value is the reason.
pub const FAILURE_HEADER: &str = "x-sluice-failure";
/// Header saying the action has no rule and the `unknown_action` policy applied.
pub const UNKNOWN_ACTION_HEADER: &str = "x-sluice-unknown-action";
/// Header on 429s answered from the denial cache.
pub const CACHE_HEADER: &str = "x-sluice-cache";

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

/// The 429 body for a denial of `action`. `retry_after_ms` is `None` when the request can never
/// pass; the seconds quoted are the `Retry-After` header's.
pub fn too_many_requests(action: &str, retry_after_ms: Option<u64>) -> Vec<u8> {
    let detail = match retry_after_ms {
        Some(ms) => format!(
            "rate limit of action {action:?} exceeded; retry after {} s",
            retry_after_secs(ms)
        ),
        None => format!("rate limit of action {action:?} exceeded; this request can never pass"),
    };
    problem(
        429,
        "Too Many Requests",
        &detail,
        action,
        retry_after_ms.map(|ms| ("retry_after_ms", ms)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denial_body_is_a_problem_naming_the_action() {
        let body: serde_json::Value =
            serde_json::from_slice(&too_many_requests("reply", Some(1_500))).unwrap();
        assert_eq!(body["status"], 429);
        assert_eq!(body["action"], "reply");
        assert_eq!(body["retry_after_ms"], 1500);
        assert!(body["detail"].as_str().unwrap().contains("retry after 2 s"));
    }

    #[test]
    fn a_request_that_can_never_pass_says_so_and_has_no_retry_time() {
        let body: serde_json::Value =
            serde_json::from_slice(&too_many_requests("reply", None)).unwrap();
        assert!(body.get("retry_after_ms").is_none());
        assert!(body["detail"].as_str().unwrap().contains("never pass"));
    }
}
