//! Rendering a decision as HTTP response headers: the IETF httpapi draft-10 structured fields
//! (`RateLimit-Policy`, `RateLimit`), the draft-03 `X-RateLimit-*` trio Envoy users know, and
//! `Retry-After`. One home, so the filter and any other front end say the same thing.
//!
//! The input is [`RateLimit`], in the decision API's unit (milliseconds): a front end renders
//! straight from the [`ThrottleResponse`] it received (or from a cached copy of its numbers),
//! with no conversion back to nanoseconds and no made-up [`crate::Decision`] in between. Every
//! header carries whole seconds, rounded up, so waiting that long is always enough.

use crate::time::MILLIS_PER_SEC;
use crate::wire::ThrottleResponse;

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

/// The numbers the rate-limit headers carry, in milliseconds as the decision API sends them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Quota: the rule's capacity (`q=` and `X-RateLimit-Limit`).
    pub quota: u64,
    /// Policy window in milliseconds (`w=`; see [`crate::Params::policy_window_ns`]).
    pub window_ms: u64,
    /// Requests of quantity 1 that could pass now (`r=` and `X-RateLimit-Remaining`).
    pub remaining: u64,
    /// Milliseconds until the key is idle again (`t=` and `X-RateLimit-Reset`).
    pub reset_after_ms: u64,
    /// Milliseconds until the same request would pass. `Some` only when the client is refused:
    /// then, and only then, `Retry-After` is sent.
    pub retry_after_ms: Option<u64>,
}

impl RateLimit {
    /// The numbers of a decision API answer. A shadow rule's would-deny passed the client, so it
    /// renders as allowed: no `Retry-After`, even though the backend reports a retry time.
    pub fn of(r: &ThrottleResponse) -> RateLimit {
        RateLimit {
            quota: r.capacity,
            window_ms: r.window_ms,
            remaining: r.remaining,
            reset_after_ms: r.reset_after_ms,
            retry_after_ms: if r.allowed { None } else { r.retry_after_ms },
        }
    }
}

/// Whole seconds, rounded up, of a millisecond span.
fn ceil_secs_of_ms(ms: u64) -> u64 {
    ms.div_ceil(MILLIS_PER_SEC)
}

/// The `Retry-After` value for a retry time: whole seconds, rounded up, at least 1 (a client told
/// `0` would retry at once and be refused again). Problem bodies quote the same number.
pub fn retry_after_secs(retry_after_ms: u64) -> u64 {
    ceil_secs_of_ms(retry_after_ms).max(1)
}

/// Header names (lowercase, as HTTP/2 wants) and values for the policy named `name` (the action).
/// `Retry-After` is included only when [`RateLimit::retry_after_ms`] is set. Owned copies of
/// what [`render_each`] writes.
pub fn render(
    name: &str,
    limit: &RateLimit,
    families: HeaderFamilies,
) -> Vec<(&'static str, String)> {
    let mut headers = Vec::with_capacity(6);
    render_each(name, limit, families, &mut |n, v| {
        headers.push((n, String::from_utf8_lossy(v).into_owned()))
    });
    headers
}

/// [`render`]'s headers, each handed to `each` in order as soon as it is written. Values are
/// bytes (ASCII digits and punctuation around the name, so UTF-8 when the name is), written on
/// the stack: a front end that adds them to its response at once (the filter's leased hit)
/// renders them with no allocation and no UTF-8 check.
///
/// Written without `format!` (the formatting machinery cost a leased hit ~4.5k instructions of
/// its ~5k here, callgrind) and without a string per value (~0.2k per allocation and free): one
/// buffer sized for the longest values ([`rendered_len`]), digits written in place.
pub fn render_each(
    name: &str,
    limit: &RateLimit,
    families: HeaderFamilies,
    each: &mut dyn FnMut(&'static str, &[u8]),
) {
    let mut stack = [0u8; STACK_BYTES];
    let mut heap = Vec::new();
    let needed = rendered_len(name);
    let buf: &mut [u8] = if needed <= STACK_BYTES {
        &mut stack
    } else {
        // A name longer than any valid action.
        heap.resize(needed, 0);
        &mut heap
    };
    let mut w = Writer { buf, len: 0 };
    let window_s = ceil_secs_of_ms(limit.window_ms).max(1);
    let reset_s = ceil_secs_of_ms(limit.reset_after_ms);
    let quota = limit.quota;
    if families.ietf {
        let at = w.len;
        w.item(name, b";q=", quota, b";w=", window_s);
        each("ratelimit-policy", w.since(at));
        let at = w.len;
        w.item(name, b";r=", limit.remaining, b";t=", reset_s);
        each("ratelimit", w.since(at));
    }
    if families.x_ratelimit {
        // `{quota}, {quota};w={window_s}`
        let at = w.len;
        w.number(quota);
        w.put(b", ");
        w.number(quota);
        w.put(b";w=");
        w.number(window_s);
        each("x-ratelimit-limit", w.since(at));
        let at = w.len;
        w.number(limit.remaining);
        each("x-ratelimit-remaining", w.since(at));
        let at = w.len;
        w.number(reset_s);
        each("x-ratelimit-reset", w.since(at));
    }
    if let Some(retry) = limit.retry_after_ms {
        let at = w.len;
        w.number(retry_after_secs(retry));
        each("retry-after", w.since(at));
    }
}

/// The most decimal digits of a `u64`.
const MAX_U64_DIGITS: usize = 20;

/// Bytes [`render_each`] writes at most for a policy named `name`: two items (quotes, name, two
/// keys, two numbers each), the limit (three numbers), three more numbers.
fn rendered_len(name: &str) -> usize {
    let item = name.len() + 2 + 6 + 2 * MAX_U64_DIGITS;
    2 * item + (3 * MAX_U64_DIGITS + 5) + 3 * MAX_U64_DIGITS
}

/// [`render_each`]'s stack buffer: room for a name of 64 bytes (the longest valid action) and
/// more.
const STACK_BYTES: usize = 512;

/// Two decimal digits of every number below 100.
const DIGIT_PAIRS: &[u8; 200] = b"\
0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Header values written one after another into a buffer sized for them all. A write that
/// would not fit is dropped (unreachable: the buffer is sized by [`rendered_len`]), never a
/// panic.
struct Writer<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl Writer<'_> {
    /// The bytes written since `at`.
    fn since(&self, at: usize) -> &[u8] {
        self.buf.get(at..self.len).unwrap_or_default()
    }

    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        let end = self.len + bytes.len();
        if let Some(room) = self.buf.get_mut(self.len..end) {
            room.copy_from_slice(bytes);
            self.len = end;
        }
    }

    /// `n` in decimal (what `n.to_string()` writes), two digits at a time, in place.
    fn number(&mut self, mut n: u64) {
        let count = n.checked_ilog10().map_or(1, |l| l as usize + 1);
        let end = self.len + count;
        let Some(room) = self.buf.get_mut(self.len..end) else {
            return;
        };
        let mut at = count;
        while n >= 100 {
            // Below 100: the cast keeps every bit.
            let pair = 2 * (n % 100) as usize;
            n /= 100;
            at -= 2;
            room[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
        }
        if n >= 10 {
            let pair = 2 * n as usize;
            room[..2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
        } else {
            room[0] = b'0' + n as u8;
        }
        self.len = end;
    }

    /// `"{name}"{k1}{v1}{k2}{v2}`: one `RateLimit-Policy` or `RateLimit` item.
    fn item(&mut self, name: &str, k1: &[u8; 3], v1: u64, k2: &[u8; 3], v2: u64) {
        self.put(b"\"");
        self.put(name.as_bytes());
        self.put(b"\"");
        self.put(k1);
        self.number(v1);
        self.put(k2);
        self.number(v2);
    }
}

/// Writes with a [`Writer`] sized for `name`, as a string.
fn written(name: &str, write: impl FnOnce(&mut Writer<'_>)) -> String {
    let mut buf = vec![0u8; rendered_len(name)];
    let mut w = Writer {
        buf: &mut buf,
        len: 0,
    };
    write(&mut w);
    String::from_utf8_lossy(w.since(0)).into_owned()
}

/// `n` in decimal, as a string.
#[cfg(test)]
fn u64_string(n: u64) -> String {
    written("", |w| w.number(n))
}

/// `"{name}";q={quota};w={window_s}`: one `RateLimit-Policy` item.
fn policy_item(name: &str, quota: u64, window_s: u64) -> String {
    written(name, |w| w.item(name, b";q=", quota, b";w=", window_s))
}

/// `"{name}";r={remaining};t={reset_s}`: one `RateLimit` item.
fn limit_item(name: &str, remaining: u64, reset_s: u64) -> String {
    written(name, |w| w.item(name, b";r=", remaining, b";t=", reset_s))
}

/// The headers for several policies on one request (a route with all-or-nothing checks): every policy in
/// `RateLimit-Policy` and `RateLimit` (draft-10 lists, in order), while `X-RateLimit-*` and
/// `Retry-After` describe the most restrictive one ([`most_restrictive`]), since those fields hold
/// one policy each. `denied` is the position of the policy that refused the request, if any.
pub fn render_all(
    policies: &[(&str, RateLimit)],
    denied: Option<usize>,
    families: HeaderFamilies,
) -> Vec<(&'static str, String)> {
    let Some(worst) = most_restrictive(policies, denied) else {
        return Vec::new();
    };
    let mut headers = Vec::with_capacity(6);
    if families.ietf {
        let (mut policy, mut limit) = (Vec::new(), Vec::new());
        for (name, numbers) in policies {
            let window_s = ceil_secs_of_ms(numbers.window_ms).max(1);
            let reset_s = ceil_secs_of_ms(numbers.reset_after_ms);
            policy.push(policy_item(name, numbers.quota, window_s));
            limit.push(limit_item(name, numbers.remaining, reset_s));
        }
        headers.push(("ratelimit-policy", policy.join(", ")));
        headers.push(("ratelimit", limit.join(", ")));
    }
    let (name, numbers) = worst;
    let x_only = HeaderFamilies {
        ietf: false,
        x_ratelimit: families.x_ratelimit,
    };
    headers.extend(render(name, numbers, x_only));
    headers
}

/// The policy that restricts the request most: the one that refused it (`denied`, whose
/// `Retry-After` is the request's, or none when it can never pass), else the one with the fewest
/// requests left (the first on a tie).
pub fn most_restrictive<'a>(
    policies: &'a [(&'a str, RateLimit)],
    denied: Option<usize>,
) -> Option<&'a (&'a str, RateLimit)> {
    denied.and_then(|i| policies.get(i)).or_else(|| {
        policies
            .iter()
            .enumerate()
            .min_by_key(|(i, (_, l))| (l.remaining, *i))
            .map(|(_, p)| p)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(allowed: bool, retry_after_ms: Option<u64>, would_deny: bool) -> ThrottleResponse {
        serde_json::from_value(serde_json::json!({
            "allowed": allowed, "algorithm": "gcra",
            "mode": if would_deny { "shadow" } else { "enforce" },
            "capacity": 16, "remaining": 0, "retry_after_ms": retry_after_ms,
            "reset_after_ms": 31_999, "level": 16.0, "window_ms": 32_000,
            "would_deny": would_deny,
        }))
        .unwrap()
    }

    #[test]
    fn a_denial_carries_every_family_and_retry_after_rounded_up() {
        // 1 s + 1 ns of retry reaches the wire as 1001 ms; 32 s − 5 ns of reset as 32000 ms.
        let limit = RateLimit {
            quota: 16,
            window_ms: 32_000,
            remaining: 0,
            reset_after_ms: 32_000,
            retry_after_ms: Some(1_001),
        };
        let h = render("reply", &limit, HeaderFamilies::default());
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
    fn values_are_the_text_format_wrote() {
        // The rendering without `format!` says byte for byte what `format!` said.
        let edges = [
            0,
            1,
            9,
            10,
            99,
            100,
            12_345,
            u64::from(u32::MAX),
            u64::MAX - 1,
            u64::MAX,
        ];
        for &n in edges
            .iter()
            .chain(&[11, 19, 101, 1_000, 9_999, 10_001, 99_999_999])
        {
            assert_eq!(u64_string(n), n.to_string());
        }
        for n in 0..100_000 {
            assert_eq!(u64_string(n), n.to_string());
        }
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for i in 0..2_000u64 {
            // A few magnitudes of every field (splitmix-style mixing, no randomness).
            x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9).wrapping_add(i);
            let pick = |shift: u32| (x >> shift) >> ((x >> (shift + 3)) % 64);
            let limit = RateLimit {
                quota: pick(1),
                window_ms: pick(7),
                remaining: pick(13),
                reset_after_ms: pick(19),
                retry_after_ms: (i % 2 == 0).then(|| pick(29)),
            };
            let name = ["reply", "a", "login.v2:x-y_z", ""][(i % 4) as usize];
            let window_s = ceil_secs_of_ms(limit.window_ms).max(1);
            let reset_s = ceil_secs_of_ms(limit.reset_after_ms);
            let q = limit.quota;
            let mut want = vec![
                ("ratelimit-policy", format!("\"{name}\";q={q};w={window_s}")),
                (
                    "ratelimit",
                    format!("\"{name}\";r={};t={reset_s}", limit.remaining),
                ),
                ("x-ratelimit-limit", format!("{q}, {q};w={window_s}")),
                ("x-ratelimit-remaining", limit.remaining.to_string()),
                ("x-ratelimit-reset", reset_s.to_string()),
            ];
            if let Some(r) = limit.retry_after_ms {
                want.push(("retry-after", retry_after_secs(r).to_string()));
            }
            assert_eq!(render(name, &limit, HeaderFamilies::default()), want);
        }
    }

    #[test]
    fn a_name_past_the_stack_buffer_spills_to_the_heap_and_says_the_same() {
        let limit = RateLimit {
            quota: u64::MAX,
            window_ms: 60_000,
            remaining: u64::MAX - 1,
            reset_after_ms: 1,
            retry_after_ms: None,
        };
        let edge = (STACK_BYTES - rendered_len("")) / 2;
        for len in [0, 64, edge, edge + 1, 5000] {
            let name = "n".repeat(len);
            let headers = render(&name, &limit, HeaderFamilies::default());
            let q = u64::MAX;
            assert_eq!(headers[0].1, format!("\"{name}\";q={q};w=60"), "{len}");
            assert_eq!(headers[1].1, format!("\"{name}\";r={};t=1", q - 1), "{len}");
        }
    }

    #[test]
    fn families_can_be_turned_off() {
        let limit = RateLimit {
            quota: 1,
            window_ms: 1,
            remaining: 0,
            reset_after_ms: 0,
            retry_after_ms: None,
        };
        let off = HeaderFamilies {
            ietf: false,
            x_ratelimit: false,
        };
        assert!(render("a", &limit, off).is_empty());
    }

    #[test]
    fn a_tiny_window_still_says_one_second_and_retry_after_is_at_least_one() {
        let limit = RateLimit {
            quota: 2,
            window_ms: 0,
            remaining: 1,
            reset_after_ms: 0,
            retry_after_ms: Some(0),
        };
        let h = render("a", &limit, HeaderFamilies::default());
        assert!(h.contains(&("ratelimit-policy", "\"a\";q=2;w=1".to_string())));
        assert!(h.contains(&("ratelimit", "\"a\";r=1;t=0".to_string())));
        assert!(h.contains(&("retry-after", "1".to_string())));
        assert_eq!(retry_after_secs(1_000), 1);
        assert_eq!(retry_after_secs(1_001), 2);
    }

    #[test]
    fn a_response_renders_as_its_outcome() {
        let denied = RateLimit::of(&response(false, Some(1_500), false));
        assert_eq!(denied.retry_after_ms, Some(1_500));
        assert_eq!((denied.quota, denied.window_ms), (16, 32_000));
        assert_eq!((denied.remaining, denied.reset_after_ms), (0, 31_999));
        // Shadow would-deny: the client passed, so no Retry-After.
        let shadow = RateLimit::of(&response(true, Some(1_500), true));
        assert_eq!(shadow.retry_after_ms, None);
        let h = render("reply", &shadow, HeaderFamilies::default());
        assert!(h.iter().all(|(n, _)| *n != "retry-after"));
    }

    #[test]
    fn several_policies_list_every_one_and_the_x_headers_show_the_tightest() {
        let limit = |quota, remaining, retry| RateLimit {
            quota,
            window_ms: 60_000,
            remaining,
            reset_after_ms: 1_500,
            retry_after_ms: retry,
        };
        let policies = [
            ("user", limit(5, 3, None)),
            ("ip", limit(100, 97, None)),
            ("all", limit(2000, 0, Some(400))),
        ];
        let h = render_all(&policies, Some(2), HeaderFamilies::default());
        let get = |n: &str| h.iter().find(|(k, _)| *k == n).map(|(_, v)| v.as_str());
        assert_eq!(
            get("ratelimit-policy"),
            Some("\"user\";q=5;w=60, \"ip\";q=100;w=60, \"all\";q=2000;w=60")
        );
        assert_eq!(
            get("ratelimit"),
            Some("\"user\";r=3;t=2, \"ip\";r=97;t=2, \"all\";r=0;t=2")
        );
        assert_eq!(get("x-ratelimit-limit"), Some("2000, 2000;w=60"));
        assert_eq!(get("x-ratelimit-remaining"), Some("0"));
        assert_eq!(get("retry-after"), Some("1"));
        // Allowed: the fewest left is the tightest; no Retry-After.
        let allowed = [("user", limit(5, 3, None)), ("ip", limit(100, 2, None))];
        let h = render_all(&allowed, None, HeaderFamilies::default());
        let get = |n: &str| h.iter().find(|(k, _)| *k == n).map(|(_, v)| v.as_str());
        assert_eq!(get("x-ratelimit-limit"), Some("100, 100;w=60"));
        assert_eq!(get("retry-after"), None);
        assert!(render_all(&[], None, HeaderFamilies::default()).is_empty());
        assert_eq!(most_restrictive(&allowed, None).map(|p| p.0), Some("ip"));
        // A refusal that can never pass (no retry time) is still the one shown, with no
        // Retry-After: waiting would not help.
        let never = [("user", limit(5, 3, None)), ("big", limit(1, 1, None))];
        assert_eq!(most_restrictive(&never, Some(1)).map(|p| p.0), Some("big"));
    }
}
