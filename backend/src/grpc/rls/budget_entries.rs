//! A request's descriptors with sluice's budget entries taken off
//! ([`sluice_core::rls_commit::split_budget_entries`]), for the envoyproxy/ratelimit-compatible
//! path: that path matches a descriptor's whole entry list against the peer's tree, so the budget
//! entries must be gone before the match, exactly as the sluice-rules path takes them off before
//! its mapping. A request without budget entries is passed on untouched (borrowed), so it is
//! answered exactly as before reserve/commit existed.

use std::borrow::Cow;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use sluice_core::rls_commit::{split_budget_entries, BudgetEntries};
use sluice_core::FieldError;

/// The request without budget entries, and each descriptor's budget entries in order. Bad ones
/// are refused as the sluice-rules path refuses them (`descriptors[i].entries`).
pub fn strip(
    request: &RateLimitRequest,
) -> Result<(Cow<'_, RateLimitRequest>, Vec<BudgetEntries>), FieldError> {
    let mut found_entries = Vec::with_capacity(request.descriptors.len());
    let mut rests = Vec::with_capacity(request.descriptors.len());
    for (index, descriptor) in request.descriptors.iter().enumerate() {
        let entries: Vec<(&str, &str)> = descriptor
            .entries
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str()))
            .collect();
        let (found, rest) = split_budget_entries(index, &entries)?;
        rests.push((found != BudgetEntries::default()).then(|| {
            rest.into_iter()
                .map(|(key, value)| Entry {
                    key: key.to_owned(),
                    value: value.to_owned(),
                })
                .collect::<Vec<_>>()
        }));
        found_entries.push(found);
    }
    if rests.iter().all(Option::is_none) {
        return Ok((Cow::Borrowed(request), found_entries));
    }
    let mut stripped = request.clone();
    for (descriptor, rest) in stripped.descriptors.iter_mut().zip(rests) {
        if let Some(entries) = rest {
            descriptor.entries = entries;
        }
    }
    Ok((Cow::Owned(stripped), found_entries))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grpc::rls::request::tests::{descriptor, request};

    #[test]
    fn marks_come_off_and_a_request_without_them_is_untouched() {
        let plain = request(vec![descriptor(&[("tokens", "alice")], Some(5))], 0);
        let (same, found) = strip(&plain).unwrap();
        assert!(matches!(same, Cow::Borrowed(_)));
        assert_eq!(found, vec![BudgetEntries::default()]);
        let marked = request(
            vec![
                descriptor(
                    &[("tokens", "alice"), ("sluice_reservation", "r1")],
                    Some(5),
                ),
                descriptor(
                    &[
                        ("sluice_commit", "r1"),
                        ("tokens", "alice"),
                        ("sluice_reserved", "5"),
                    ],
                    Some(3),
                ),
            ],
            0,
        );
        let (stripped, found) = strip(&marked).unwrap();
        assert_eq!(stripped.descriptors[0], plain.descriptors[0]);
        assert_eq!(
            stripped.descriptors[1].entries,
            plain.descriptors[0].entries
        );
        assert_eq!(found[0].reservation.as_deref(), Some("r1"));
        assert_eq!(found[1].commit.as_ref().map(|c| c.reserved), Some(5));
        let bad = request(
            vec![descriptor(
                &[
                    ("tokens", "a"),
                    ("sluice_commit", "r"),
                    ("sluice_reserved", "x"),
                ],
                None,
            )],
            0,
        );
        assert_eq!(strip(&bad).unwrap_err().field, "descriptors[0].entries");
    }
}
