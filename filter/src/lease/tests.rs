//! Leases at fixed times: the entry (grant, take, merge, layout) and the table in shared data
//! (check-and-set, races between workers, the slot bound).

use super::pocket::Pockets;
use super::table::{self, slot_keys, MAX_CAS_TRIES};
use super::test_support::{host, id, store, MS, SLOTS, T0};
use super::*;
use crate::fake_host::FakeHost;
use crate::host::Host;

/// One admission by a worker with no pocket yet (a fresh pocket table per call): the shared
/// table's take. The leases below are small enough never to pocket, except where only whether a
/// take succeeds is checked (pockets: `pocket_tests`).
fn spend(
    h: &mut FakeHost,
    identity: &[u8],
    slots: u64,
    quantity: u64,
    now: u64,
) -> Option<sluice_core::headers::RateLimit> {
    table::spend(
        h,
        &mut Pockets::default(),
        identity,
        slots,
        quantity,
        now,
        &mut Vec::new(),
    )
}

fn answer(allowed: bool, lease: Option<(u64, u64)>, extra: &str) -> ThrottleResponse {
    let lease = lease.map_or("null".to_owned(), |(units, ttl_ms)| {
        format!(r#"{{"units": {units}, "ttl_ms": {ttl_ms}}}"#)
    });
    serde_json::from_str(&format!(
        r#"{{"allowed": {allowed}, "algorithm": "gcra", "mode": "enforce", "capacity": 100,
        "remaining": 40, "retry_after_ms": null, "reset_after_ms": 6000, "level": 60.0,
        "window_ms": 10000, "lease": {lease} {extra}}}"#
    ))
    .unwrap()
}

/// A lease of `units` granted by a callout sent at `sent`, answered 2 ms later, ttl 1 s.
fn granted(units: u64, sent: u64) -> Lease {
    // The send time is the grant's id: distinct per grant in these tests.
    Lease::of_answer(
        &answer(true, Some((units, 1000)), ""),
        sent,
        sent + 2 * MS,
        sent,
    )
    .unwrap()
}

fn stored(h: &FakeHost, identity: &[u8]) -> Option<Lease> {
    slot_keys(identity, SLOTS)
        .iter()
        .filter_map(|k| h.shared.get(k))
        .filter_map(|b| decode(b))
        .find(|(_, stored_id)| *stored_id == identity)
        .map(|(lease, _)| lease)
}

#[test]
fn a_grant_lives_from_the_send_for_its_ttl() {
    let l = Lease::of_answer(&answer(true, Some((64, 1000)), ""), T0, T0 + 3 * MS, 7).unwrap();
    assert_eq!(
        l.grants,
        vec![Grant {
            units: 64,
            from_ns: T0,
            until_ns: T0 + 1000 * MS,
            id: 7,
            granted: 64,
        }]
    );
    assert_eq!(
        l.reset_at_ns,
        T0 + 3 * MS + 6000 * MS,
        "reset from the answer"
    );
    assert_eq!((l.capacity, l.window_ms, l.remaining), (100, 10_000, 40));
    assert_eq!(l.live_units(T0 - 1), 0, "clock stepped back: unusable");
    assert_eq!(l.live_units(T0), 64);
    assert_eq!(l.live_units(T0 + 1000 * MS - 1), 64);
    assert_eq!(l.live_units(T0 + 1000 * MS), 0, "expired at sent + ttl");
}

#[test]
fn only_an_admission_with_units_and_time_is_a_lease() {
    assert_eq!(Lease::of_answer(&answer(true, None, ""), T0, T0, 7), None);
    assert_eq!(
        Lease::of_answer(&answer(false, Some((64, 1000)), ""), T0, T0, 7),
        None,
        "a denial"
    );
    let shadow = answer(true, Some((64, 1000)), r#", "would_deny": true"#);
    assert_eq!(
        Lease::of_answer(&shadow, T0, T0, 7),
        None,
        "shadow would-deny"
    );
    assert_eq!(
        Lease::of_answer(&answer(true, Some((0, 1000)), ""), T0, T0, 7),
        None
    );
    assert_eq!(
        Lease::of_answer(&answer(true, Some((64, 0)), ""), T0, T0, 7),
        None
    );
}

#[test]
fn a_grant_beyond_core_bounds_is_capped() {
    let l = Lease::of_answer(&answer(true, Some((u64::MAX, u64::MAX)), ""), T0, T0, 7).unwrap();
    assert_eq!(l.grants[0].units, sluice_core::limits::MAX_LEASE_UNITS);
    assert_eq!(
        l.grants[0].until_ns,
        T0 + sluice_core::limits::MAX_LEASE_TTL_MS * MS
    );
}

#[test]
fn take_spends_the_soonest_expiring_units_first_and_never_more_than_live() {
    let mut l = granted(3, T0)
        .absorb(granted(5, T0 + 500 * MS), T0 + 500 * MS)
        .0;
    let now = T0 + 600 * MS;
    assert_eq!(l.live_units(now), 8);
    assert!(!l.take(9, now), "not enough");
    assert_eq!(l.live_units(now), 8, "a failed take takes nothing");
    assert!(!l.take(0, now), "quantity 0 is not an admission");
    assert!(l.take(4, now));
    assert_eq!(l.grants.len(), 1, "the older grant spent first");
    assert_eq!(l.grants[0].units, 4);
    assert_eq!(l.grants[0].until_ns, T0 + 1500 * MS);
    // After the first grant's expiry only the second's units are live.
    let mut l = granted(3, T0)
        .absorb(granted(5, T0 + 500 * MS), T0 + 500 * MS)
        .0;
    assert_eq!(l.live_units(T0 + 1000 * MS), 5);
    assert!(!l.take(6, T0 + 1000 * MS));
    assert!(l.take(5, T0 + 1000 * MS));
    assert_eq!(l.live_units(T0 + 1000 * MS), 0);
}

#[test]
fn a_grant_beyond_four_side_by_side_is_given_back_whole_never_merged() {
    let mut l = granted(1, T0);
    let mut back = Vec::new();
    for i in 1..10u64 {
        let (next, b) = l.absorb(granted(10, T0 + i * 10 * MS), T0 + i * 10 * MS);
        l = next;
        back.extend(b);
    }
    assert_eq!(l.grants.len(), MAX_GRANTS);
    assert_eq!(
        l.live_units(T0 + 95 * MS),
        31,
        "the first four kept as they came"
    );
    assert_eq!(back.len(), 6, "the other six given back");
    assert!(back.iter().all(|g| g.units == 10 && g.granted == 10));
    // Every kept grant is one of the originals, with its own id.
    for g in &l.grants {
        assert_eq!(g.id, g.from_ns, "{g:?}");
        assert_eq!(g.until_ns, g.from_ns + 1000 * MS, "{g:?}");
    }
    // Dead grants are dropped on absorb and given back; the header numbers are the newest
    // answer's, and a grant in flight is no longer marked.
    l.asking_until_ns = T0 + 6_000 * MS;
    let mut newest = granted(2, T0 + 5_000 * MS);
    newest.remaining = 7;
    let (l, back) = l.absorb(newest, T0 + 5_000 * MS);
    assert_eq!(l.grants.len(), 1);
    assert_eq!(l.remaining, 7);
    assert_eq!(l.asking_until_ns, 0);
    assert_eq!(back.iter().map(|g| g.units).sum::<u64>(), 31);
}

#[test]
fn headers_say_the_backend_remaining_plus_what_is_left_here() {
    let mut l = granted(10, T0);
    assert!(l.take(1, T0 + 100 * MS));
    let limit = l.rate_limit(T0 + 100 * MS);
    assert_eq!(limit.remaining, 40 + 9);
    assert_eq!(limit.quota, 100);
    assert_eq!(limit.window_ms, 10_000);
    assert_eq!(limit.retry_after_ms, None, "an admission");
    assert_eq!(
        limit.reset_after_ms,
        6000 + 2 - 100,
        "counted down from the answer"
    );
    // Expired: only the backend's remaining is left.
    assert_eq!(l.rate_limit(T0 + 2_000 * MS).remaining, 40);
}

#[test]
fn entries_round_trip_and_odd_bytes_decode_to_nothing() {
    let l = granted(3, T0).absorb(granted(5, T0 + MS), T0 + MS).0;
    let me = id("alice");
    let bytes = encode(&l, &me);
    assert_eq!(decode(&bytes), Some((l.clone(), &me[..])));
    assert_eq!(decode(&[]), None);
    assert_eq!(decode(&bytes[..10]), None, "truncated head");
    assert_eq!(
        decode(&bytes[..HEAD_LEN + GRANT_LEN]),
        None,
        "truncated grants"
    );
    let mut other = bytes.clone();
    other[0] = 9;
    assert_eq!(decode(&other), None, "another layout");
    let mut too_many = bytes.clone();
    too_many[1] = (MAX_GRANTS + 1) as u8;
    assert_eq!(decode(&too_many), None);
    // A denial-cache entry (version 2) is not a lease.
    assert_eq!(decode(&[2; 80]), None);
}

#[test]
fn identities_are_injective_because_actions_have_no_newline() {
    // The action ends at the first newline: an action cannot hold one, so no (action, key) pair
    // shares another's identity.
    assert!(sluice_core::Action::parse("a\nb").is_err());
    assert_ne!(identity("a", "b\nc"), identity("ab", "c"));
    assert_ne!(identity("reply", "alice"), identity("reply", "alice "));
    assert_ne!(identity("reply", "alice"), identity("post", "alice"));
}

#[test]
fn spend_takes_one_unit_per_admission_with_one_read_and_one_write() {
    let mut h = host();
    let me = id("alice");
    assert!(store(&mut h, &me, SLOTS, &granted(3, T0), T0));
    let (reads, writes) = (h.shared_reads.get(), h.shared_writes);
    let limit = spend(&mut h, &me, SLOTS, 1, T0 + MS).unwrap();
    assert_eq!(limit.remaining, 40 + 2);
    assert_eq!(h.shared_reads.get() - reads, 1, "one get_shared_data");
    assert_eq!(h.shared_writes - writes, 1, "one check-and-set");
    assert_eq!(spend(&mut h, &me, SLOTS, 1, T0 + MS).unwrap().remaining, 41);
    assert_eq!(spend(&mut h, &me, SLOTS, 1, T0 + MS).unwrap().remaining, 40);
    assert_eq!(spend(&mut h, &me, SLOTS, 1, T0 + MS), None, "spent");
    assert_eq!(stored(&h, &me).unwrap().live_units(T0 + MS), 0);
}

#[test]
fn an_expired_lease_is_not_spent() {
    let mut h = host();
    let me = id("alice");
    store(&mut h, &me, SLOTS, &granted(3, T0), T0);
    assert!(spend(&mut h, &me, SLOTS, 1, T0 + 999 * MS).is_some());
    assert_eq!(spend(&mut h, &me, SLOTS, 1, T0 + 1000 * MS), None);
    assert_eq!(spend(&mut h, &me, SLOTS, 1, T0 - MS), None, "clock back");
}

#[test]
fn a_missing_lease_costs_one_read_and_no_write() {
    let mut h = host();
    assert_eq!(spend(&mut h, &id("nobody"), SLOTS, 1, T0), None);
    assert_eq!((h.shared_reads.get(), h.shared_writes), (1, 0));
}

#[test]
fn a_lease_is_only_spent_by_its_own_identity() {
    let mut h = host();
    store(&mut h, &id("alice"), SLOTS, &granted(100, T0), T0);
    for other in [
        identity("reply", "alice "),
        identity("reply", "Alice"),
        identity("reply", ""),
        identity("post", "alice"),
        identity("reply", &crate::key::from_bytes(&[b'a'; 300])),
    ] {
        assert_eq!(spend(&mut h, &other, SLOTS, 1, T0), None);
    }
    // Even when every identity shares the one slot.
    let mut h = host();
    store(&mut h, &id("alice"), 1, &granted(100, T0), T0);
    assert_eq!(spend(&mut h, &id("bob"), 1, 1, T0), None);
    assert!(spend(&mut h, &id("alice"), 1, 1, T0).is_some());
}

#[test]
fn a_spend_that_loses_a_race_reads_again_and_never_double_spends() {
    let mut h = host();
    let me = id("alice");
    store(&mut h, &me, SLOTS, &granted(2, T0), T0);
    // Another worker spends one unit between this worker's read and its write.
    let key = slot_keys(&me, SLOTS)[0].clone();
    let mut theirs = stored(&h, &me).unwrap();
    assert!(theirs.take(1, T0));
    h.racing_writes.push((key, encode(&theirs, &me)));
    let limit = spend(&mut h, &me, SLOTS, 1, T0).unwrap();
    assert_eq!(limit.remaining, 40, "the retry saw the other worker's take");
    assert_eq!(stored(&h, &me).unwrap().live_units(T0), 0);
    assert_eq!(
        spend(&mut h, &me, SLOTS, 1, T0),
        None,
        "two units, two admissions"
    );
}

#[test]
fn a_spend_that_always_loses_gives_up_and_calls_out() {
    let mut h = host();
    let me = id("alice");
    store(&mut h, &me, SLOTS, &granted(100, T0), T0);
    let key = slot_keys(&me, SLOTS)[0].clone();
    let value = h.shared[&key].clone();
    h.racing_writes = vec![(key, value); MAX_CAS_TRIES];
    assert_eq!(spend(&mut h, &me, SLOTS, 1, T0), None);
    h.refuse_writes = true;
    assert_eq!(
        spend(&mut h, &me, SLOTS, 1, T0),
        None,
        "host error: no take"
    );
}

#[test]
fn two_workers_interleaved_spend_each_unit_once() {
    // Every interleaving of two workers' read/write steps over a lease of 5 units: each
    // worker spends until it sees none left. Admissions always total exactly 5.
    for pattern in 0u32..64 {
        let mut h = host();
        let me = id("hot");
        store(&mut h, &me, SLOTS, &granted(5, T0), T0);
        let key = slot_keys(&me, SLOTS)[0].clone();
        let mut admitted = 0;
        for step in 0..6 {
            if pattern & (1 << step) != 0 {
                // The other worker takes a unit between our read and our write.
                if let Some(mut theirs) = stored(&h, &me) {
                    if theirs.take(1, T0) {
                        admitted += 1;
                        h.racing_writes.push((key.clone(), encode(&theirs, &me)));
                    }
                }
            }
            if spend(&mut h, &me, SLOTS, 1, T0).is_some() {
                admitted += 1;
            }
            h.racing_writes.clear();
        }
        while spend(&mut h, &me, SLOTS, 1, T0).is_some() {
            admitted += 1;
        }
        assert_eq!(admitted, 5, "pattern {pattern:06b}");
    }
}

#[test]
fn grants_for_one_key_accumulate_and_two_inserts_never_clobber() {
    let mut h = host();
    let me = id("alice");
    assert!(store(&mut h, &me, SLOTS, &granted(3, T0), T0));
    assert!(store(&mut h, &me, SLOTS, &granted(4, T0 + MS), T0 + MS));
    assert_eq!(stored(&h, &me).unwrap().live_units(T0 + MS), 7);

    // Two workers insert a fresh key at once: the second sees a conflict, reads again and merges.
    let mut h = host();
    let key = slot_keys(&me, SLOTS)[0].clone();
    h.racing_writes.push((key, encode(&granted(3, T0), &me)));
    assert!(store(&mut h, &me, SLOTS, &granted(4, T0), T0));
    assert_eq!(stored(&h, &me).unwrap().live_units(T0), 7, "nothing lost");
}

#[test]
fn the_table_is_bounded_and_a_collision_only_loses_units() {
    // Two slots in all: three live leases cannot all stay; every spend is still of its own
    // identity, and a key whose lease was displaced calls out again.
    let slots = 2;
    let mut h = host();
    let keys: Vec<Vec<u8>> = (0..3).map(|i| id(&format!("k{i}"))).collect();
    for (i, k) in keys.iter().enumerate() {
        store(&mut h, k, slots, &granted(10 + i as u64, T0), T0);
    }
    assert!(h.shared.len() <= 2, "{:?}", h.shared.keys());
    let mut live = 0;
    for k in &keys {
        let mut spent = 0;
        while spend(&mut h, k, slots, 1, T0).is_some() {
            spent += 1;
        }
        assert!(spent == 0 || spent >= 10, "{spent}");
        live += usize::from(spent > 0);
    }
    assert!((1..=2).contains(&live), "{live}");
    // With many keys the table stays at its slot count.
    let mut h = host();
    for i in 0..500 {
        store(&mut h, &id(&format!("spray{i}")), 64, &granted(1, T0), T0);
    }
    assert!(h.shared.len() <= 64);
}

#[test]
fn a_second_slot_keeps_a_colliding_hot_key() {
    // Find two identities whose first slots collide (16 slots), and check both keep a lease.
    let slots = 16;
    let first = id("a0");
    let other = (1..1000)
        .map(|i| id(&format!("a{i}")))
        .find(|k| {
            let (a, b) = (slot_keys(&first, slots), slot_keys(k, slots));
            a[0] == b[0] && b[1] != a[0]
        })
        .unwrap();
    let mut h = host();
    store(&mut h, &first, slots, &granted(5, T0), T0);
    store(&mut h, &other, slots, &granted(5, T0), T0);
    assert!(spend(&mut h, &first, slots, 1, T0).is_some());
    assert!(spend(&mut h, &other, slots, 1, T0).is_some());
    // Once the first lease has expired, its slot is free for a new grant.
    assert!(store(
        &mut h,
        &other,
        slots,
        &granted(5, T0 + 2000 * MS),
        T0 + 2000 * MS
    ));
    assert!(h
        .shared_get_versioned(&slot_keys(&other, slots)[0])
        .is_some());
}

#[test]
fn a_mark_never_displaces_another_identitys_live_lease() {
    // One slot: alice's live lease stays; bob asks for a grant unmarked.
    let mut h = host();
    let (a, b) = (id("alice"), id("bob"));
    assert!(store(&mut h, &a, 1, &granted(5, T0), T0));
    let mut back = Vec::new();
    let ask = |h: &mut FakeHost, now: u64, back: &mut Vec<Return>| {
        table::ask(h, &b, 1, now, now + 30 * MS, back)
    };
    assert_eq!(ask(&mut h, T0, &mut back), table::Ask::Grant);
    assert!(back.is_empty());
    assert!(
        spend(&mut h, &a, 1, 1, T0).is_some(),
        "alice's lease is still there"
    );
    // Once alice's lease has expired, bob's mark takes the slot and alice's 4 units go back.
    let later = T0 + 1000 * MS;
    assert_eq!(ask(&mut h, later, &mut back), table::Ask::Grant);
    assert_eq!(back.iter().map(|r| r.grant.units).sum::<u64>(), 4);
    assert_eq!(back[0].identity, a);
    assert_eq!(
        ask(&mut h, later + 1, &mut back),
        table::Ask::Exact,
        "marked"
    );
}
