//! `GET /rlconfig`: the loaded configuration as the peer's debug port prints it (`Dump` in its
//! `config_impl.go`), one line per limit:
//!
//! ```text
//! messaging.message_type_marketing.to_number: unit=DAY requests_per_unit=5, shadow_mode: false, quota_mode: false
//! ```
//!
//! From the configuration in force ([`crate::ratelimit::Live`], as `GET /v1/ratelimit-config`),
//! in file order (the peer's order is its map's, so none is promised). An `unlimited` limit prints
//! `unit=UNKNOWN requests_per_unit=0`, as the peer's does when the file gives no count. Without
//! `--ratelimit-config` the page is empty, as the peer's is without a configuration.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::text::TEXT_PLAIN;
use crate::ratelimit::matcher::Limit;
use crate::state::App;

/// The dump of the configuration in force.
pub async fn rlconfig(State(app): State<Arc<App>>) -> Response {
    let text = app
        .ratelimit
        .as_ref()
        .map(|live| dump(&live.current().limits))
        .unwrap_or_default();
    ([(header::CONTENT_TYPE, TEXT_PLAIN)], text).into_response()
}

/// One line per limit, in the peer's format.
pub fn dump(limits: &[Arc<Limit>]) -> String {
    let mut out = String::new();
    for l in limits {
        let (unit, rpu) = l
            .per_unit()
            .map_or(("UNKNOWN", 0), |(unit, rpu)| (unit.0.as_str_name(), rpu));
        let _ = writeln!(
            out,
            "{}: unit={unit} requests_per_unit={rpu}, shadow_mode: {}, quota_mode: {}",
            l.path, l.shadow_mode, l.quota_mode
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ratelimit::load::{build, MergeDomains};
    use std::path::PathBuf;

    #[test]
    fn one_line_per_limit_in_the_peers_format() {
        let yaml = "\
domain: messaging
descriptors:
  - {key: message_type, value: marketing, descriptors: [{key: to_number, rate_limit: {unit: day, requests_per_unit: 5}}]}
  - {key: ldap, rate_limit: {unlimited: true}}
  - {key: shadow, shadow_mode: true, rate_limit: {unit: minute, requests_per_unit: 0}}
  - {key: quota, quota_mode: true, rate_limit: {unit: Second, requests_per_unit: 2}}
  - {key: no_limit}
";
        let files = [(PathBuf::from("c.yaml"), yaml.to_owned())];
        let loaded = build(&files, MergeDomains(false)).unwrap();
        assert_eq!(
            dump(&loaded.limits),
            "messaging.message_type_marketing.to_number: unit=DAY requests_per_unit=5, shadow_mode: false, quota_mode: false\n\
             messaging.ldap: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false\n\
             messaging.shadow: unit=MINUTE requests_per_unit=0, shadow_mode: true, quota_mode: false\n\
             messaging.quota: unit=SECOND requests_per_unit=2, shadow_mode: false, quota_mode: true\n"
        );
    }
}
