//! Route matching and key extraction. Header values are bytes from the wire: nothing here assumes
//! UTF-8, and nothing can panic on an empty, huge or binary value.

use crate::config::{KeySource, Match, Route, DEFAULT_MISSING_KEY};
use crate::host::Host;
use crate::key;

/// The parts of a request that routing looks at, read once from the host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestLine {
    /// `:method`.
    pub method: Vec<u8>,
    /// `:path` without the query string.
    pub path: Vec<u8>,
}

impl RequestLine {
    /// Reads `:method` and `:path` (first values) from the host.
    pub fn read(host: &dyn Host) -> RequestLine {
        let mut line = RequestLine::default();
        line.read_into(host);
        line
    }

    /// Reads `:method` and `:path` into this line's buffers (emptied first): a host that reuses
    /// one line per worker reads the request line with no allocation.
    pub fn read_into(&mut self, host: &dyn Host) {
        first_value_into(host, ":path", &mut self.path);
        if let Some(q) = self.path.iter().position(|&c| c == b'?') {
            self.path.truncate(q);
        }
        first_value_into(host, ":method", &mut self.method);
    }
}

/// The first value of request header `name` copied into `out` (emptied first; left empty when
/// the header is absent).
fn first_value_into(host: &dyn Host, name: &str, out: &mut Vec<u8>) {
    out.clear();
    let mut first = true;
    host.each_request_header(name, &mut |v| {
        if std::mem::take(&mut first) {
            out.extend_from_slice(v);
        }
    });
}

/// The first route whose conditions all hold, if any.
pub fn find<'a>(routes: &'a [Route], line: &RequestLine, host: &dyn Host) -> Option<&'a Route> {
    find_at(routes, line, host).and_then(|i| routes.get(i))
}

/// The position of [`find`]'s route in `routes`.
pub fn find_at(routes: &[Route], line: &RequestLine, host: &dyn Host) -> Option<usize> {
    routes.iter().position(|r| matches(&r.matcher, line, host))
}

fn matches(m: &Match, line: &RequestLine, host: &dyn Host) -> bool {
    if let Some(prefix) = &m.path_prefix {
        if !line.path.starts_with(prefix.as_bytes()) {
            return false;
        }
    }
    if let Some(suffix) = &m.path_suffix {
        if !line.path.ends_with(suffix.as_bytes()) {
            return false;
        }
    }
    if let Some(path) = &m.path {
        if line.path != path.as_bytes() {
            return false;
        }
    }
    if let Some(method) = &m.method {
        if line.method != method.as_bytes() {
            return false;
        }
    }
    m.headers.iter().all(|h| {
        let mut holds = false;
        host.each_request_header(&h.name, &mut |v| {
            holds |= h.equals.as_ref().is_none_or(|want| v == want.as_bytes());
        });
        holds
    })
}

/// The key for a request: the source's value, else the `on_missing` chain, else
/// [`DEFAULT_MISSING_KEY`]. Never empty, so a request never escapes its route's limit; encoded
/// and bounded by [`key`], so no value a client sends makes the callout too big to answer.
pub fn extract_key(source: &KeySource, line: &RequestLine, host: &dyn Host) -> String {
    let mut out = Vec::new();
    extract_key_into(source, line, host, &mut out);
    // Every key is UTF-8 (`key` encodes what is not); lossy only to never panic.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// [`extract_key`]'s key, appended to `out` (the usual key, a header given once, is copied
/// straight from the host's bytes: no string of its own).
pub fn extract_key_into(
    source: &KeySource,
    line: &RequestLine,
    host: &dyn Host,
    out: &mut Vec<u8>,
) {
    let mut current = Some(source);
    // Validation bounds the chain's depth; the loop is bounded by it.
    while let Some(src) = current {
        let (found, next) = match src {
            KeySource::Constant { value } => {
                key::push_from_constant(out, value);
                return;
            }
            KeySource::Header { name, on_missing } => {
                (push_header_key(out, host, name), on_missing)
            }
            KeySource::ClientIp { on_missing } => (
                host.client_address()
                    .is_some_and(|a| push_non_empty(out, strip_port(&a))),
                on_missing,
            ),
            KeySource::Path { on_missing } => (push_non_empty(out, &line.path), on_missing),
        };
        if found {
            return;
        }
        current = next.as_deref();
    }
    out.extend_from_slice(DEFAULT_MISSING_KEY.as_bytes());
}

/// Appends the key of a value; `false` (nothing appended) when it is empty: the source is then
/// missing.
fn push_non_empty(out: &mut Vec<u8>, value: &[u8]) -> bool {
    if value.is_empty() {
        return false;
    }
    key::push_from_bytes(out, value);
    true
}

/// Appends the key of request header `name`: its value, or its repeated values joined with `,`
/// in order (RFC 9110's equivalent single field). `false` (nothing appended) when the header is
/// absent, or given once and empty. A header given once (the usual case) is encoded straight
/// from the host's bytes.
fn push_header_key(out: &mut Vec<u8>, host: &dyn Host, name: &str) -> bool {
    let start = out.len();
    let mut count = 0usize;
    let mut found = false;
    host.each_request_header(name, &mut |v| {
        count += 1;
        if count == 1 {
            found = push_non_empty(out, v);
        }
    });
    if count < 2 {
        return found;
    }
    out.truncate(start);
    let mut joined = Vec::new();
    let mut later = false;
    host.each_request_header(name, &mut |v| {
        if std::mem::replace(&mut later, true) {
            joined.push(b',');
        }
        joined.extend_from_slice(v);
    });
    push_non_empty(out, &joined)
}

/// The IP part of `ip:port` or `[v6]:port`; the input unchanged when it has no port.
fn strip_port(addr: &[u8]) -> &[u8] {
    if let Some(rest) = addr.strip_prefix(b"[") {
        if let Some(end) = rest.iter().position(|&c| c == b']') {
            return rest.get(..end).unwrap_or(rest);
        }
        return addr;
    }
    let colons = addr.iter().filter(|&&c| c == b':').count();
    if colons == 1 {
        if let Some(at) = addr.iter().rposition(|&c| c == b':') {
            return addr.get(..at).unwrap_or(addr);
        }
    }
    addr
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::fake_host::FakeHost;

    fn config(routes: &str) -> Config {
        Config::from_json(
            format!(r#"{{"backend": {{"protocol": "http", "cluster": "b"}}, "routes": {routes}}}"#)
                .as_bytes(),
        )
        .unwrap()
    }

    fn key_of(routes: &str, host: &FakeHost) -> Option<(String, String)> {
        let c = config(routes);
        let line = RequestLine::read(host);
        find(&c.routes, &line, host).map(|r| (r.action.clone(), extract_key(&r.key, &line, host)))
    }

    const USER: &str = r#"[{"action": "a", "key": {"source": "header", "name": "x-user"}}]"#;

    #[test]
    fn first_matching_route_wins_and_conditions_are_anded() {
        let routes = r#"[
            {"action": "post", "match": {"path_prefix": "/api/", "method": "POST",
             "headers": [{"name": "X-Kind", "equals": "reply"}]}, "key": {"source": "path"}},
            {"action": "login", "match": {"path": "/login"}, "key": {"source": "client_ip"}},
            {"action": "api", "match": {"path_prefix": "/api/", "headers": [{"name": "x-token"}]},
             "key": {"source": "constant", "value": "all"}}
        ]"#;
        let h = FakeHost::request("POST", "/api/x?y=1").header("x-kind", b"reply");
        assert_eq!(key_of(routes, &h), Some(("post".into(), "/api/x".into())));
        let h = FakeHost::request("GET", "/api/x").header("x-kind", b"reply");
        assert_eq!(key_of(routes, &h), None, "no x-token, wrong method");
        let h = FakeHost::request("GET", "/api/x").header("x-token", b"");
        assert_eq!(
            key_of(routes, &h),
            Some(("api".into(), "all".into())),
            "present even if empty"
        );
        let h = FakeHost::request("GET", "/login?next=/").peer("10.1.2.3:5555");
        assert_eq!(
            key_of(routes, &h),
            Some(("login".into(), "10.1.2.3".into()))
        );
        let h = FakeHost::request("GET", "/login/x");
        assert_eq!(key_of(routes, &h), None, "exact path");
        let suffix = r#"[{"action": "reply", "match": {"path_prefix": "/posts/", "path_suffix": "/replies"},
            "key": {"source": "constant", "value": "k"}}]"#;
        assert!(key_of(suffix, &FakeHost::request("POST", "/posts/7/replies?x")).is_some());
        assert!(key_of(suffix, &FakeHost::request("POST", "/posts/7/like")).is_none());
    }

    #[test]
    fn missing_and_empty_keys_fall_back_never_to_a_free_pass() {
        let h = FakeHost::request("GET", "/");
        assert_eq!(key_of(USER, &h).unwrap().1, "anonymous");
        let h = FakeHost::request("GET", "/").header("x-user", b"");
        assert_eq!(key_of(USER, &h).unwrap().1, "anonymous");
        let chain = r#"[{"action": "a", "key": {"source": "header", "name": "x-user",
            "on_missing": {"source": "client_ip", "on_missing": {"source": "constant", "value": "nobody"}}}}]"#;
        let h = FakeHost::request("GET", "/").peer("[::1]:80");
        assert_eq!(key_of(chain, &h).unwrap().1, "::1");
        let h = FakeHost::request("GET", "/");
        assert_eq!(key_of(chain, &h).unwrap().1, "nobody");
    }

    #[test]
    fn odd_header_values_are_keys_like_any_other() {
        let h = FakeHost::request("GET", "/").header("x-user", b"caf\xc3\xa9\xff\xfe%");
        assert_eq!(key_of(USER, &h).unwrap().1, "café%FF%FE%25");
        let big = vec![b'x'; 10 * 1024];
        let h = FakeHost::request("GET", "/").header("x-user", &big);
        assert_eq!(key_of(USER, &h).unwrap().1, key::from_bytes(&big));
        assert!(key_of(USER, &h).unwrap().1.starts_with(key::DIGEST_PREFIX));
        let h = FakeHost::request("GET", "/")
            .header("x-user", b"alice")
            .header("x-user", b"bob");
        assert_eq!(key_of(USER, &h).unwrap().1, "alice,bob");
    }

    #[test]
    fn every_source_is_bounded() {
        let long_path = format!("/p/{}", "x".repeat(40_000));
        let h = FakeHost::request("GET", &format!("{long_path}?q=1"));
        let routes = r#"[{"action": "a", "key": {"source": "path"}}]"#;
        assert_eq!(
            key_of(routes, &h).unwrap().1,
            key::from_bytes(long_path.as_bytes()),
            "the path without the query, digested"
        );
        let constant = "c".repeat(300);
        let routes = format!(
            r#"[{{"action": "a", "key": {{"source": "constant", "value": "{constant}"}}}}]"#
        );
        let key = key_of(&routes, &FakeHost::request("GET", "/")).unwrap().1;
        assert!(key.len() <= key::MAX_KEY_BYTES && key.starts_with(key::DIGEST_PREFIX));
        let many = FakeHost::request("GET", "/").header("x-user", &[b'v'; 600]);
        let many = (0..90).fold(many, |h, _| h.header("x-user", &[b'v'; 600]));
        assert!(key_of(USER, &many)
            .unwrap()
            .1
            .starts_with(key::DIGEST_PREFIX));
    }

    #[test]
    fn ports_are_stripped_from_every_address_form() {
        assert_eq!(strip_port(b"1.2.3.4:80"), b"1.2.3.4");
        assert_eq!(strip_port(b"[2001:db8::1]:443"), b"2001:db8::1");
        assert_eq!(strip_port(b"2001:db8::1"), b"2001:db8::1");
        assert_eq!(strip_port(b"1.2.3.4"), b"1.2.3.4");
        assert_eq!(strip_port(b"[broken"), b"[broken");
    }
}
