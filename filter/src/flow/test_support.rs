//! What the flow's test files share: the fixed clock, the HTTP-backend config they start from,
//! and the check that a request ended exactly once.

use std::rc::Rc;

use super::{Config, Next};
use crate::fake_host::FakeHost;

pub(super) const MS: u64 = sluice_core::time::NANOS_PER_MILLI;
pub(super) const T0: u64 = 1_700_000_000_000 * MS;

/// A config with the HTTP backend `sluice_backend` (authority `sluice`, 30 ms timeout), the
/// top-level fields `extra` (each followed by a comma) and the routes `routes` (a JSON list).
pub(super) fn http_config(extra: &str, routes: &str) -> Rc<Config> {
    let json = format!(
        r#"{{"backend": {{"protocol": "http", "cluster": "sluice_backend", "authority": "sluice", "timeout_ms": 30}},
        {extra}
        "routes": {routes}}}"#
    );
    Rc::new(Config::from_json(json.as_bytes()).unwrap())
}

/// Every path ends in exactly one resume or reply, or continues synchronously.
pub(super) fn ended_once(host: &FakeHost, next: Next) {
    let ends = host.effects.resumed as usize
        + host.effects.replies.len()
        + usize::from(next == Next::Continue);
    assert_eq!(ends, 1, "{:?}", host.effects);
}
