//! Rendering a decision as HTTP response headers: the IETF httpapi draft-10 structured fields
//! (`RateLimit-Policy`, `RateLimit`), the draft-03 `X-RateLimit-*` trio Envoy users know, and
//! `Retry-After`. One home, so the filter and any other front end say the same thing.

use crate::decision::Decision;
use crate::time::ceil_secs;

/// Which header families to emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HeaderFamilies {
    /// `RateLimit-Policy` and `RateLimit` (draft-10).
    #[serde(default = "yes")]
    pub ietf: bool,
    /// `X-RateLimit-Limit`, `-Remaining`, `-Reset` (draft-03).
    #[serde(default = "yes")]
    pub x_ratelimit: bool,
}

fn yes() -> bool {
    true
}

impl Default for HeaderFamilies {
    fn default() -> Self {
        HeaderFamilies {
            ietf: true,
            x_ratelimit: true,
        }
    }
}

/// The quota policy a decision was made under, as the headers name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy<'a> {
    /// Policy name: the action.
    pub name: &'a str,
    /// Quota: the capacity.
    pub quota: u64,
    /// Window in nanoseconds (see [`crate::Params::policy_window_ns`]).
    pub window_ns: u64,
}

/// Header names and values for a decision. `Retry-After` is included only on a denial with a
/// retry time.
pub fn render(
    policy: &Policy<'_>,
    decision: &Decision,
    families: HeaderFamilies,
) -> Vec<(&'static str, String)> {
    let window_s = ceil_secs(policy.window_ns).max(1);
    let reset_s = ceil_secs(decision.reset_after);
    let mut headers = Vec::with_capacity(6);
    if families.ietf {
        headers.push((
            "ratelimit-policy",
            format!("\"{}\";q={};w={}", policy.name, policy.quota, window_s),
        ));
        headers.push((
            "ratelimit",
            format!("\"{}\";r={};t={}", policy.name, decision.remaining, reset_s),
        ));
    }
    if families.x_ratelimit {
        headers.push((
            "x-ratelimit-limit",
            format!("{}, {};w={}", policy.quota, policy.quota, window_s),
        ));
        headers.push(("x-ratelimit-remaining", decision.remaining.to_string()));
        headers.push(("x-ratelimit-reset", reset_s.to_string()));
    }
    if let (false, Some(retry)) = (decision.allowed, decision.retry_after) {
        headers.push(("retry-after", ceil_secs(retry).max(1).to_string()));
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::NANOS_PER_SEC as S;

    #[test]
    fn a_denial_carries_every_family_and_retry_after_rounded_up() {
        let d = Decision {
            allowed: false,
            capacity: 16,
            remaining: 0,
            retry_after: Some(S + 1),
            reset_after: 32 * S - 5,
            level: 16.0,
        };
        let policy = Policy {
            name: "reply",
            quota: 16,
            window_ns: 32 * S,
        };
        let h = render(&policy, &d, HeaderFamilies::default());
        assert_eq!(
            h,
            vec![
                ("ratelimit-policy", "\"reply\";q=16;w=32".to_string()),
                ("ratelimit", "\"reply\";r=0;t=32".to_string()),
                ("x-ratelimit-limit", "16, 16;w=32".to_string()),
                ("x-ratelimit-remaining", "0".to_string()),
                ("x-ratelimit-reset", "32".to_string()),
                ("retry-after", "2".to_string()),
            ]
        );
    }

    #[test]
    fn families_can_be_turned_off() {
        let d = Decision {
            allowed: true,
            capacity: 1,
            remaining: 0,
            retry_after: None,
            reset_after: 0,
            level: 1.0,
        };
        let policy = Policy {
            name: "a",
            quota: 1,
            window_ns: 1,
        };
        let h = render(
            &policy,
            &d,
            HeaderFamilies {
                ietf: false,
                x_ratelimit: false,
            },
        );
        assert!(h.is_empty());
    }
}
