//! A `RateLimitRequest` as sluice checks: one (action, key, quantity) per descriptor, through
//! core's one mapping ([`sluice_core::descriptor::to_check`]). Every refusal names its field.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use sluice_core::descriptor::to_check;
use sluice_core::limits::MAX_QUANTITY;
use sluice_core::rls_commit::{split_budget_entries, CommitEntries};
use sluice_core::{Action, FieldError};

/// Most descriptors one request may carry.
pub use sluice_core::limits::MAX_RLS_DESCRIPTORS as MAX_DESCRIPTORS;

/// One descriptor as a sluice check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// The action whose rule applies.
    pub action: Action,
    /// The subject, as the mapping joined it.
    pub key: String,
    /// Units this descriptor costs: its `hits_addend` if set, else the request's; 0 means 1.
    /// For a commit: the actual cost, 0 included.
    pub quantity: u64,
    /// Set when the descriptor commits a reservation (sluice_core::rls_commit's budget entries).
    pub commit: Option<CommitEntries>,
    /// Set when the descriptor reserves under a request id (`sluice_reservation`): allowed, it
    /// is recorded as in flight until that id's commit.
    pub reservation: Option<String>,
}

/// The checks every request passes, whichever configuration answers it: a domain, 1 to
/// [`MAX_DESCRIPTORS`] descriptors.
pub fn check_shape(request: &RateLimitRequest) -> Result<(), FieldError> {
    if request.domain.is_empty() {
        return Err(FieldError::new("domain", "must not be empty"));
    }
    if request.descriptors.is_empty() {
        return Err(FieldError::new("descriptors", "must not be empty"));
    }
    if request.descriptors.len() > MAX_DESCRIPTORS {
        return Err(FieldError::new(
            "descriptors",
            format!(
                "at most {MAX_DESCRIPTORS} descriptors; got {}",
                request.descriptors.len()
            ),
        ));
    }
    Ok(())
}

/// Refuses descriptor `index`'s own `limit` (a per-request override), where limits are sluice
/// rules or the files' (the sluice-rules path, and a ratelimit-config domain under
/// `refuse_limit_overrides`).
pub fn refuse_limit_override(
    index: usize,
    descriptor: &RateLimitDescriptor,
) -> Result<(), FieldError> {
    if descriptor.limit.is_some() {
        return Err(FieldError::new(
            format!("descriptors[{index}].limit"),
            "per-descriptor limit overrides are not supported: limits are sluice rules (admin API, rules file) or the ratelimit config",
        ));
    }
    Ok(())
}

/// Descriptor `index`'s hits as Envoy sent them: its own `hits_addend` when set (0 included),
/// else the request's with 0 meaning 1; at most [`MAX_QUANTITY`]. Refuses what sluice never
/// does: negative hits.
pub fn hits_as_sent(
    index: usize,
    descriptor: &RateLimitDescriptor,
    request_hits: u32,
) -> Result<u64, FieldError> {
    if descriptor.is_negative_hits {
        return Err(FieldError::new(
            format!("descriptors[{index}].is_negative_hits"),
            "sluice never returns quota (a denied request consumes nothing already)",
        ));
    }
    let (hits, field) = match &descriptor.hits_addend {
        Some(h) => (h.value, format!("descriptors[{index}].hits_addend")),
        None => (u64::from(request_hits).max(1), "hits_addend".to_owned()),
    };
    if hits > MAX_QUANTITY {
        return Err(FieldError::new(
            field,
            format!("must be at most {MAX_QUANTITY}; got {hits}"),
        ));
    }
    Ok(hits)
}

/// The checks of a request, in descriptor order, or the first field sluice refuses.
pub fn checks(request: &RateLimitRequest) -> Result<Vec<Check>, FieldError> {
    check_shape(request)?;
    request
        .descriptors
        .iter()
        .enumerate()
        .map(|(index, descriptor)| {
            refuse_limit_override(index, descriptor)?;
            let quantity = hits_as_sent(index, descriptor, request.hits_addend)?;
            let entries: Vec<(&str, &str)> = descriptor
                .entries
                .iter()
                .map(|e| (e.key.as_str(), e.value.as_str()))
                .collect();
            let (found, entries) = split_budget_entries(index, &entries)?;
            let (action, key) = to_check(index, entries)?;
            let (reservation, commit) = (found.reservation, found.commit);
            // A commit's hits are its actual cost, which may be 0; a check's 0 means 1.
            let quantity = if commit.is_some() {
                quantity
            } else {
                quantity.max(1)
            };
            Ok(Check {
                action,
                key,
                quantity,
                commit,
                reservation,
            })
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
    use envoy_types::pb::google::protobuf::UInt64Value;

    /// A descriptor of `entries` with its own `hits_addend` if given (also for the ratelimit
    /// config's tests).
    pub(crate) fn descriptor(entries: &[(&str, &str)], hits: Option<u64>) -> RateLimitDescriptor {
        RateLimitDescriptor {
            entries: entries
                .iter()
                .map(|(k, v)| Entry {
                    key: (*k).into(),
                    value: (*v).into(),
                })
                .collect(),
            hits_addend: hits.map(|value| UInt64Value { value }),
            ..Default::default()
        }
    }

    /// A request of domain `edge`.
    pub(crate) fn request(descriptors: Vec<RateLimitDescriptor>, hits: u32) -> RateLimitRequest {
        RateLimitRequest {
            domain: "edge".into(),
            descriptors,
            hits_addend: hits,
        }
    }

    fn refused(r: &RateLimitRequest) -> String {
        checks(r).unwrap_err().field
    }

    #[test]
    fn quantity_is_the_descriptors_addend_else_the_requests_and_zero_is_one() {
        let r = request(
            vec![
                descriptor(&[("user", "a")], None),
                descriptor(&[("user", "b")], Some(5)),
                descriptor(&[("user", "c")], Some(0)),
            ],
            3,
        );
        let q: Vec<u64> = checks(&r).unwrap().iter().map(|c| c.quantity).collect();
        assert_eq!(q, vec![3, 5, 1]);
        let r = request(vec![descriptor(&[("user", "a")], None)], 0);
        assert_eq!(checks(&r).unwrap()[0].quantity, 1);
        assert_eq!(checks(&r).unwrap()[0].action.as_str(), "user");
        assert_eq!(checks(&r).unwrap()[0].key, "a");
    }

    #[test]
    fn a_stream_done_descriptor_with_a_request_id_is_a_commit_of_the_same_key() {
        let r = request(
            vec![
                descriptor(&[("tokens", "alice")], Some(100)),
                descriptor(
                    &[
                        ("tokens", "alice"),
                        ("sluice_commit", "req-1"),
                        ("sluice_reserved", "100"),
                    ],
                    Some(0),
                ),
            ],
            0,
        );
        let c = checks(&r).unwrap();
        assert_eq!((c[0].key.as_str(), c[0].quantity), ("alice", 100));
        assert!(c[0].commit.is_none());
        assert_eq!((c[1].key.as_str(), c[1].quantity), ("alice", 0));
        assert_eq!(c[1].commit.as_ref().map(|m| m.reserved), Some(100));
    }

    #[test]
    fn refusals_name_the_field() {
        let mut r = request(vec![descriptor(&[("user", "a")], None)], 0);
        r.domain.clear();
        assert_eq!(refused(&r), "domain");
        assert_eq!(refused(&request(vec![], 0)), "descriptors");
        let r = request(vec![descriptor(&[("user", "a")], None); 65], 0);
        assert_eq!(refused(&r), "descriptors");
        let r = request(
            vec![descriptor(&[("user", "a")], None), descriptor(&[], None)],
            0,
        );
        assert_eq!(refused(&r), "descriptors[1].entries");
        let r = request(vec![descriptor(&[("user", "a")], Some(1 << 40))], 0);
        assert_eq!(refused(&r), "descriptors[0].hits_addend");
        let r = request(vec![descriptor(&[("user", "a")], None)], u32::MAX);
        assert_eq!(refused(&r), "hits_addend");
        let mut d = descriptor(&[("user", "a")], None);
        d.is_negative_hits = true;
        assert_eq!(
            refused(&request(vec![d], 0)),
            "descriptors[0].is_negative_hits"
        );
    }
}
