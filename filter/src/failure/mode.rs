//! What a failed decision does to its request: the configured `failure_mode`, in one place, for
//! the flow (a backend that could not decide) and for a host whose own hook failed before the
//! flow could (a panic caught at the ABI edge: `deny` must still deny).

use crate::config::{Config, FailureMode};
use crate::flow::Next;
use crate::host::{Counter, Host};
use crate::reply::{self, Reply, FAILURE_HEADER};

use super::Failure;

/// Where a request that could not be decided is, which says how it goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// In its request-headers hook: the hook's return ([`Next`]) stops it or lets it through.
    InRequestHeaders,
    /// Later (an answer's hook): a request still stopped for its decision is resumed or
    /// answered through the host.
    Later,
}

/// Applies the failure mode to an undecided request of `action` (empty when the failure came
/// before a route was known). `allow`: `x-sluice-failure` on the request, counted as passed
/// unchecked, resumed (or `Next::Continue` in the request-headers hook);
/// `deny`: `failure_status` with a problem body naming the reason. The caller counts the reason
/// and logs it; the flow also adds the header to the response.
pub fn apply(
    config: &Config,
    host: &mut dyn Host,
    action: &str,
    failure: &Failure,
    when: When,
) -> Next {
    let reason = failure.header.as_str();
    match config.failure_mode {
        FailureMode::Allow => {
            host.count(Counter::FailuresAllow);
            host.set_request_header(FAILURE_HEADER, reason);
            if when == When::InRequestHeaders {
                return Next::Continue;
            }
            host.resume();
            Next::Pause
        }
        FailureMode::Deny => {
            host.count(Counter::FailuresDeny);
            Reply {
                status: config.failure_status,
                title: "Rate Limiter Unavailable",
                detail: format!("the rate limiter could not decide ({reason}); failing closed"),
                action,
                grpc_status: reply::GRPC_FAILURE_STATUS,
                retry: None,
                headers: vec![(FAILURE_HEADER, reason)],
            }
            .send(host);
            Next::Pause
        }
    }
}
