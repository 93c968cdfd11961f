//! Any bytes as the filter's plugin configuration (what Envoy hands `on_configure`): parsing never
//! panics, a refusal always names a field, and an accepted configuration holds every invariant
//! `Config::from_json` promises (so no request path can meet an unchecked value).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_core::limits::{MAX_QUANTITY, MIN_RESERVATION};
use sluice_core::Action;
use sluice_filter::config::{Config, KeySource, Reserve, MAX_KEY_DEPTH};

fn header_name_ok(name: &str) -> bool {
    let body = name.strip_prefix(':').unwrap_or(name);
    !body.is_empty() && body.bytes().all(|c| !c.is_ascii_uppercase() && c.is_ascii_graphic())
}

fn check_key(key: &KeySource, depth: usize) {
    assert!(depth <= MAX_KEY_DEPTH, "on_missing nested {depth} deep");
    let next = match key {
        KeySource::Header { name, on_missing } => {
            assert!(header_name_ok(name), "header name {name:?} kept as is");
            on_missing
        }
        KeySource::ClientIp { on_missing } | KeySource::Path { on_missing } => on_missing,
        KeySource::Constant { value } => {
            assert!(!value.is_empty(), "empty constant key accepted");
            return;
        }
    };
    if let Some(next) = next {
        check_key(next, depth + 1);
    }
}

/// A header-driven reservation never leaves [min, max], whatever the client sends (here: the
/// fuzz input itself as the header's value, once or twice, or absent), and no reservation is
/// ever below one unit (0 would pass a spent budget).
fn check_reserve(reserve: &Reserve, data: &[u8]) {
    if reserve.header.is_none() {
        let ok = |n: u64| (MIN_RESERVATION..=MAX_QUANTITY).contains(&n);
        assert!(reserve.constant.is_some_and(ok), "{reserve:?}");
        return;
    }
    let min = reserve.min.unwrap_or(MIN_RESERVATION);
    let max = reserve.max.unwrap_or(MAX_QUANTITY);
    let default = reserve.default.unwrap_or(u64::MAX);
    assert!(MIN_RESERVATION <= min, "{reserve:?}");
    assert!(min <= default && default <= max && max <= MAX_QUANTITY, "{reserve:?}");
    for values in [vec![], vec![data.to_vec()], vec![data.to_vec(), data.to_vec()]] {
        let n = reserve.amount(&values);
        assert!((min..=max).contains(&n), "{n} outside [{min}, {max}] for {values:?}");
    }
}

fuzz_target!(|data: &[u8]| {
    match Config::from_json(data) {
        Err(e) => assert!(!e.field.is_empty() && !e.reason.is_empty(), "a refusal names no field: {e:?}"),
        Ok(config) => {
            assert!(!config.backend.cluster.is_empty());
            assert!(!config.backend.authority.is_empty());
            assert!(config.backend.path.starts_with('/'));
            assert!((1..=60_000).contains(&config.backend.timeout_ms));
            assert!((400..=599).contains(&config.failure_status));
            assert!((1..=16).contains(&config.grpc_denied_status), "a denial must not be gRPC OK");
            assert!((1..=86_400_000).contains(&config.denial_cache.max_ttl_ms));
            assert!((1..=16_777_216).contains(&config.denial_cache.slots));
            assert!(!config.routes.is_empty());
            for route in &config.routes {
                assert!(Action::parse(&route.action).is_ok(), "bad action {:?} accepted", route.action);
                assert!((1..=MAX_QUANTITY).contains(&route.quantity));
                for h in &route.matcher.headers {
                    assert!(header_name_ok(&h.name), "match header {:?} kept as is", h.name);
                }
                if let Some(m) = &route.matcher.method {
                    assert!(!m.is_empty() && m.bytes().all(|c| c.is_ascii_uppercase()));
                }
                check_key(&route.key, 1);
                if let Some(cost) = &route.cost {
                    check_reserve(&cost.reserve, data);
                }
            }
            // Parsing is a pure function of the bytes.
            assert_eq!(Config::from_json(data).ok(), Some(config));
        }
    }
});
