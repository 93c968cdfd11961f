//! Reserve, then commit, through Envoy's own ratelimit filter (RLS v3): the descriptor convention
//! that turns an `apply_on_stream_done` descriptor into a commit of the request's reservation
//! (docs/rls.md, "Cost budgets: reserve, then commit").
//!
//! The request-time descriptor is an ordinary one whose `hits_addend` is the reservation N. The
//! stream-done descriptor carries the same entries plus three of sluice's, in any position:
//!
//! | entry key | value | Envoy action that makes it |
//! |---|---|---|
//! | `sluice_commit` | the request's id | `request_headers {header_name: x-request-id, descriptor_key: sluice_commit}` |
//! | `sluice_reserved` | N, the units reserved | `generic_key {descriptor_key: sluice_reserved, descriptor_value: "N"}` |
//! | `sluice_reserved_at_ms` (optional) | when N was reserved, ms since the epoch | a header the route sets |
//!
//! and its `hits_addend` is the actual cost (`{format: "%RESP(x-usage)%"}`). These budget entries
//! (docs/cost-budgets.md, "The words") are taken off before the mapping of [`crate::descriptor`], so both descriptors name the same action and
//! key; the commit is once per id, as `POST /v1/commit`.

use crate::commit::check_id;
use crate::field_error::FieldError;
use crate::limits::MAX_QUANTITY;

/// The entry whose value is the request's id: its presence makes the descriptor a commit.
pub const COMMIT_ID_KEY: &str = "sluice_commit";
/// The entry whose value is the units reserved at request time.
pub const RESERVED_KEY: &str = "sluice_reserved";
/// The optional entry whose value is when the reservation was made (ms since the epoch).
pub const RESERVED_AT_KEY: &str = "sluice_reserved_at_ms";

/// The entry of a request-time descriptor whose value is the request's id (the same as its
/// stream-done descriptor's `sluice_commit`): the reservation is recorded as in flight under it
/// until that commit (the key view's `budget`). Optional: without it the reservation is decided and
/// committed all the same, only not shown as in flight.
pub const RESERVATION_ID_KEY: &str = "sluice_reservation";

/// Takes a request-time descriptor's `sluice_reservation` off its entries: `(id, the rest)`.
/// Refused, naming `descriptors[index].entries`, on a commit descriptor (one with
/// `sluice_commit`) and for an id that `POST /v1/commit` would refuse.
pub fn split_reservation<'a>(
    index: usize,
    entries: &[(&'a str, &'a str)],
) -> Result<(Option<String>, Entries<'a>), FieldError> {
    let field = || format!("descriptors[{index}].entries");
    let Some(id) = entries
        .iter()
        .find(|(k, _)| *k == RESERVATION_ID_KEY)
        .map(|(_, v)| *v)
    else {
        return Ok((None, entries.to_vec()));
    };
    if entries.iter().any(|(k, _)| *k == COMMIT_ID_KEY) {
        return Err(FieldError::new(
            field(),
            format!("{RESERVATION_ID_KEY} belongs on the request-time descriptor, not with {COMMIT_ID_KEY}"),
        ));
    }
    check_id(id).map_err(|r| FieldError::new(field(), format!("{RESERVATION_ID_KEY}: {r}")))?;
    let rest = entries
        .iter()
        .filter(|(k, _)| *k != RESERVATION_ID_KEY)
        .copied()
        .collect();
    Ok((Some(id.to_owned()), rest))
}

/// A commit descriptor's budget entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitEntries {
    /// The request's id (as `POST /v1/commit`'s `id`).
    pub id: String,
    /// Units reserved at request time.
    pub reserved: u64,
    /// When they were reserved, if the descriptor said; else the commit's arrival stands in.
    pub reserved_at_ms: Option<u64>,
}

/// A descriptor's entries, `(key, value)` in order.
pub type Entries<'a> = Vec<(&'a str, &'a str)>;

/// Takes sluice's commit entries off a descriptor's entries: `(None, entries)` for an ordinary
/// descriptor, `(Some(commit), the rest)` for a commit. `index` names the descriptor in refusals.
pub fn split_commit<'a>(
    index: usize,
    entries: &[(&'a str, &'a str)],
) -> Result<(Option<CommitEntries>, Entries<'a>), FieldError> {
    let field = || format!("descriptors[{index}].entries");
    let find = |key: &str| entries.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
    let rest: Entries<'a> = entries
        .iter()
        .filter(|(k, _)| ![COMMIT_ID_KEY, RESERVED_KEY, RESERVED_AT_KEY].contains(k))
        .copied()
        .collect();
    let Some(id) = find(COMMIT_ID_KEY) else {
        if let Some(key) = [RESERVED_KEY, RESERVED_AT_KEY]
            .into_iter()
            .find(|k| find(k).is_some())
        {
            return Err(FieldError::new(
                field(),
                format!("{key} without {COMMIT_ID_KEY} (the request id a commit is matched by)"),
            ));
        }
        return Ok((None, rest));
    };
    check_id(id).map_err(|r| FieldError::new(field(), format!("{COMMIT_ID_KEY}: {r}")))?;
    let number = |key: &str, text: &str| {
        text.parse::<u64>().map_err(|_| {
            FieldError::new(
                field(),
                format!("{key} must be a whole number; got {text:?}"),
            )
        })
    };
    let reserved = find(RESERVED_KEY)
        .ok_or_else(|| {
            FieldError::new(
                field(),
                format!(
                    "{COMMIT_ID_KEY} needs {RESERVED_KEY} (the units reserved at request time)"
                ),
            )
        })
        .and_then(|t| number(RESERVED_KEY, t))?;
    if reserved > MAX_QUANTITY {
        return Err(FieldError::new(
            field(),
            format!("{RESERVED_KEY} must be at most {MAX_QUANTITY}; got {reserved}"),
        ));
    }
    let reserved_at_ms = find(RESERVED_AT_KEY)
        .map(|t| number(RESERVED_AT_KEY, t))
        .transpose()?;
    Ok((
        Some(CommitEntries {
            id: id.to_owned(),
            reserved,
            reserved_at_ms,
        }),
        rest,
    ))
}

/// A descriptor's budget entries: what [`split_budget_entries`] takes off before it is matched.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BudgetEntries {
    /// `sluice_reservation`: the request-time descriptor reserves under this id.
    pub reservation: Option<String>,
    /// `sluice_commit` and its companions: the descriptor commits a reservation.
    pub commit: Option<CommitEntries>,
}

/// Takes every budget entry off a descriptor's entries ([`split_reservation`], then
/// [`split_commit`]): `(budget entries, the rest)`, the rest matched as if they were never sent.
/// One function for every configuration that answers RLS (sluice rules and an
/// envoyproxy/ratelimit directory), so that both accept and refuse exactly the same entries.
pub fn split_budget_entries<'a>(
    index: usize,
    entries: &[(&'a str, &'a str)],
) -> Result<(BudgetEntries, Entries<'a>), FieldError> {
    let (reservation, entries) = split_reservation(index, entries)?;
    let (commit, entries) = split_commit(index, &entries)?;
    Ok((
        BudgetEntries {
            reservation,
            commit,
        },
        entries,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reservation_id_comes_off_a_request_time_descriptor_only() {
        let e = [("tokens", "alice"), ("sluice_reservation", "req-1")];
        let (id, rest) = split_reservation(0, &e).unwrap();
        assert_eq!(
            (id.as_deref(), rest),
            (Some("req-1"), vec![("tokens", "alice")])
        );
        let (id, rest) = split_reservation(0, &e[..1]).unwrap();
        assert_eq!((id, rest.len()), (None, 1));
        let bad = [("tokens", "a"), ("sluice_reservation", "a b")];
        assert_eq!(
            split_reservation(2, &bad).unwrap_err().field,
            "descriptors[2].entries"
        );
        let both = [("sluice_commit", "r"), ("sluice_reservation", "r")];
        assert!(split_reservation(0, &both).is_err());
    }

    #[test]
    fn commit_entries_come_off_and_the_rest_maps_as_before() {
        let e = [
            ("tokens", "alice"),
            ("sluice_commit", "req-1"),
            ("sluice_reserved", "100"),
        ];
        let (commit, rest) = split_commit(0, &e).unwrap();
        assert_eq!(
            commit,
            Some(CommitEntries {
                id: "req-1".into(),
                reserved: 100,
                reserved_at_ms: None
            })
        );
        assert_eq!(rest, vec![("tokens", "alice")]);
        let (commit, rest) = split_commit(0, &e[..1]).unwrap();
        assert_eq!((commit, rest.len()), (None, 1));
    }

    #[test]
    fn all_budget_entries_come_off_in_one_split() {
        let e = [
            ("sluice_reservation", "r1"),
            ("tokens", "alice"),
            ("plan", "free"),
        ];
        let (entries, rest) = split_budget_entries(0, &e).unwrap();
        assert_eq!(entries.reservation.as_deref(), Some("r1"));
        assert_eq!(rest, vec![("tokens", "alice"), ("plan", "free")]);
        let c = [
            ("tokens", "alice"),
            ("sluice_commit", "r1"),
            ("sluice_reserved", "5"),
        ];
        let (entries, rest) = split_budget_entries(0, &c).unwrap();
        assert_eq!(
            (entries.commit.map(|m| m.reserved), rest),
            (Some(5), vec![("tokens", "alice")])
        );
        let (entries, rest) = split_budget_entries(0, &c[..1]).unwrap();
        assert_eq!((entries, rest.len()), (BudgetEntries::default(), 1));
        assert!(split_budget_entries(1, &[("sluice_reserved", "5")]).is_err());
    }

    #[test]
    fn refusals_name_the_descriptor() {
        let bad = |e: &[(&str, &str)]| split_commit(2, e).unwrap_err();
        let e = bad(&[("t", "a"), ("sluice_commit", "r")]);
        assert_eq!(e.field, "descriptors[2].entries");
        assert!(e.reason.contains("sluice_reserved"), "{}", e.reason);
        bad(&[("t", "a"), ("sluice_reserved", "5")]);
        bad(&[("sluice_commit", "r"), ("sluice_reserved", "x")]);
        bad(&[("sluice_commit", "a b"), ("sluice_reserved", "1")]);
        bad(&[("sluice_commit", "r"), ("sluice_reserved", "2000000000")]);
    }
}
