//! Pockets at fixed times: the chunk's size and lifetime, admissions with no hostcall, two
//! workers spending one lease (every unit once, never more than granted), expiry, the bounded
//! table, and the headers' `remaining`.

use super::pocket::{chunk, set_of, Pockets, MAX_POCKETS, MAX_POCKET_UNITS, SETS, WAYS};
use super::table::{self, pocket_hash, slot_keys};
use super::test_support::{granted_for, host, id, store, MS, SLOTS, T0};
use super::*;
use crate::fake_host::FakeHost;

/// A take whose returns are not looked at (`returns_tests` looks at them).
fn spend(
    h: &mut FakeHost,
    pockets: &mut Pockets,
    identity: &[u8],
    slots: u64,
    quantity: u64,
    now: u64,
) -> Option<sluice_core::headers::RateLimit> {
    table::spend(h, pockets, identity, slots, quantity, now, &mut Vec::new())
}

fn granted(units: u64, sent: u64) -> Lease {
    granted_for(units, sent, 1000)
}

/// One worker's start: a host at `T0`, an empty pocket table, and alice's identity.
fn alice() -> (FakeHost, Pockets, Vec<u8>) {
    (host(), Pockets::default(), id("alice"))
}

/// Shared-data hostcalls so far: reads and writes.
fn calls(h: &FakeHost) -> u32 {
    h.shared_reads.get() + h.shared_writes
}

/// The live units of `identity`'s shared entry.
fn shared_live(h: &FakeHost, identity: &[u8], now: u64) -> u64 {
    slot_keys(identity, SLOTS)
        .iter()
        .filter_map(|k| h.shared.get(k))
        .filter_map(|b| decode(b))
        .find(|(_, stored_id)| *stored_id == identity)
        .map_or(0, |(lease, _)| lease.live_units(now))
}

#[test]
fn a_chunk_is_a_quarter_of_what_is_left_bounded_and_none_near_the_end() {
    assert_eq!(chunk(63, 0), 15);
    assert_eq!(chunk(16, 0), 4, "the smallest chunk");
    assert_eq!(
        chunk(15, 0),
        0,
        "the last units go through the shared table"
    );
    assert_eq!(chunk(0, 0), 0);
    assert_eq!(chunk(100_000, 0), MAX_POCKET_UNITS);
    assert_eq!(
        chunk(100_000, 10),
        MAX_POCKET_UNITS - 10,
        "a pocket never holds more"
    );
    assert_eq!(chunk(100_000, MAX_POCKET_UNITS), 0);
    assert_eq!(chunk(100_000, u64::MAX), 0);
}

#[test]
fn taken_units_live_only_while_every_grant_they_came_from_does() {
    // Grants of 3 (T0 .. T0 + 1 s) and 5 (T0 + 500 ms .. T0 + 1.5 s).
    let l = granted(3, T0)
        .absorb(granted(5, T0 + 500 * MS), T0 + 500 * MS)
        .0;
    let now = T0 + 600 * MS;
    let mut only_first = l.clone();
    assert_eq!(
        only_first.take_grant(2, now),
        Some(Grant {
            units: 2,
            from_ns: T0,
            until_ns: T0 + 1000 * MS,
            id: 0,
            granted: 0,
        })
    );
    let mut both = l.clone();
    assert_eq!(
        both.take_grant(4, now),
        Some(Grant {
            units: 4,
            from_ns: T0 + 500 * MS,
            until_ns: T0 + 1000 * MS,
            id: 0,
            granted: 0,
        }),
        "the later start, the earlier end"
    );
    assert_eq!(both.live_units(now), 4);
    let mut l2 = l.clone();
    assert_eq!(l2.take_grant(9, now), None, "more than live");
    assert_eq!(l2, l, "nothing taken");
    assert_eq!(l2.take_grant(0, now), None);
}

#[test]
fn admissions_from_a_pocket_cost_no_hostcall() {
    let (mut h, mut p, me) = alice();
    assert!(store(&mut h, &me, SLOTS, &granted(64, T0), T0));
    let now = T0 + MS;
    let before = calls(&h);
    // The first admission takes 1 for itself and a quarter of the 63 left (15) for the pocket,
    // in one read and one check-and-set.
    let (reads, writes) = (h.shared_reads.get(), h.shared_writes);
    let limit = spend(&mut h, &mut p, &me, SLOTS, 1, now).unwrap();
    assert_eq!(
        (h.shared_reads.get() - reads, h.shared_writes - writes),
        (1, 1)
    );
    assert_eq!(shared_live(&h, &me, now), 48);
    assert_eq!(p.units(pocket_hash(&me), &me, now), 15);
    assert_eq!(
        limit.remaining,
        40 + 48 + 15,
        "what this Envoy can still admit"
    );
    // The next 15 come from the pocket: no hostcall at all, headers counting down.
    for left in (0..15).rev() {
        let limit = spend(&mut h, &mut p, &me, SLOTS, 1, now).unwrap();
        assert_eq!(limit.remaining, 40 + 48 + left);
        assert_eq!(limit.retry_after_ms, None);
        assert_eq!(limit.quota, 1000);
    }
    assert_eq!(calls(&h) - before, 2, "16 admissions, two hostcalls");
    // Empty: the shared table again (47 left after the take: 11 more pocketed).
    spend(&mut h, &mut p, &me, SLOTS, 1, now).unwrap();
    assert_eq!(calls(&h) - before, 4);
    assert_eq!(shared_live(&h, &me, now), 36);
    assert_eq!(p.units(pocket_hash(&me), &me, now), 11);
}

#[test]
fn a_lease_of_64_costs_well_under_one_hostcall_per_admission() {
    let (mut h, mut p, me) = alice();
    store(&mut h, &me, SLOTS, &granted(64, T0), T0);
    let before = calls(&h);
    let mut admitted = 0;
    while spend(&mut h, &mut p, &me, SLOTS, 1, T0 + MS).is_some() {
        admitted += 1;
    }
    assert_eq!(admitted, 64, "every unit, once");
    // 20 takes from the shared table (chunks 15, 11, 8, 6, 4, then one unit at a time from 14
    // left), 2 hostcalls each, plus the final miss (the entry, then the empty second slot).
    assert_eq!(calls(&h) - before, 20 * 2 + 2);
    // Without pockets every admission reads and writes: 128.
}

#[test]
fn small_leases_never_pocket() {
    let (mut h, mut p, me) = alice();
    store(&mut h, &me, SLOTS, &granted(16, T0), T0);
    for left in (0..16).rev() {
        let before = calls(&h);
        let limit = spend(&mut h, &mut p, &me, SLOTS, 1, T0).unwrap();
        assert_eq!(calls(&h) - before, 2, "a shared take each");
        assert_eq!(limit.remaining, 40 + left);
    }
    assert!(p.is_empty());
}

/// Worker `w` of two admits `quantity` at `now`, perhaps racing: when `race` the other worker's
/// whole admission lands between this one's read and its check-and-set. Answers the units each
/// worker admitted.
fn admit(
    h: &mut FakeHost,
    pockets: &mut [Pockets; 2],
    me: &[u8],
    w: usize,
    quantity: u64,
    race: bool,
    now: u64,
) -> [u64; 2] {
    let mut admitted = [0; 2];
    let other = 1 - w;
    if race {
        // The other worker's admission, made on a copy of the VM's shared data; its write (if it
        // made one) reaches the real one just before this worker's first check-and-set.
        let mut theirs = h.clone();
        let writes = theirs.shared_writes;
        if spend(&mut theirs, &mut pockets[other], me, SLOTS, quantity, now).is_some() {
            admitted[other] += quantity;
        }
        if theirs.shared_writes > writes {
            for key in slot_keys(me, SLOTS) {
                if theirs.shared.get(&key) != h.shared.get(&key) {
                    if let Some(value) = theirs.shared.get(&key) {
                        h.racing_writes.push((key.clone(), value.clone()));
                    }
                }
            }
        }
    }
    if spend(h, &mut pockets[w], me, SLOTS, quantity, now).is_some() {
        admitted[w] += quantity;
    }
    // This worker made no check-and-set (a pocket admission, or nothing to take): the other
    // worker's write lands after it.
    for (key, value) in std::mem::take(&mut h.racing_writes) {
        h.write(&key, &value);
    }
    admitted
}

#[test]
fn two_workers_never_spend_a_unit_twice_nor_more_than_granted() {
    // Two workers' pockets over one VM's shared data, on a deterministic random schedule of
    // admissions of 1 or 5 units, some racing, with new grants stored along the way. At every
    // step: units admitted + live in the shared entry + in both pockets = units granted.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut rand = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for round in 0..40 {
        let mut h = host();
        let mut pockets = [Pockets::default(), Pockets::default()];
        let me = id(&format!("hot{round}"));
        let now = T0 + MS;
        let mut total_granted = 0;
        let mut admitted = [0u64; 2];
        for step in 0..400 {
            if step % 100 == 0 {
                let units = 20 + rand(200);
                assert!(store(&mut h, &me, SLOTS, &granted(units, T0), now));
                total_granted += units;
            }
            let w = rand(2) as usize;
            let quantity = if rand(8) == 0 { 5 } else { 1 };
            let got = admit(&mut h, &mut pockets, &me, w, quantity, rand(4) == 0, now);
            admitted[0] += got[0];
            admitted[1] += got[1];
            let held = shared_live(&h, &me, now)
                + pockets[0].units(pocket_hash(&me), &me, now)
                + pockets[1].units(pocket_hash(&me), &me, now);
            assert_eq!(
                admitted[0] + admitted[1] + held,
                total_granted,
                "round {round} step {step}"
            );
        }
        // Traffic on both workers until neither admits: every granted unit was admitted once.
        loop {
            let got: u64 = (0..2)
                .map(|w| {
                    admit(&mut h, &mut pockets, &me, w, 1, false, now)
                        .iter()
                        .sum::<u64>()
                })
                .sum();
            if got == 0 {
                break;
            }
            admitted[0] += got;
        }
        assert_eq!(admitted[0] + admitted[1], total_granted, "round {round}");
    }
}

#[test]
fn a_pocket_expires_at_exactly_its_grants_until() {
    let (mut h, mut p, me) = alice();
    let hash = pocket_hash(&me);
    store(&mut h, &me, SLOTS, &granted(64, T0), T0);
    let until = T0 + 1000 * MS;
    assert!(spend(&mut h, &mut p, &me, SLOTS, 1, until - MS).is_some());
    assert_eq!(p.units(hash, &me, until - 1), 15);
    let before = calls(&h);
    assert!(spend(&mut h, &mut p, &me, SLOTS, 1, until - 1).is_some());
    assert_eq!(calls(&h), before, "from the pocket, the last nanosecond");
    assert_eq!(p.units(hash, &me, until), 0);
    assert_eq!(spend(&mut h, &mut p, &me, SLOTS, 1, until), None, "expired");
    // A clock stepped back before the grant's start makes the pocket unusable too.
    let mut h = host();
    let mut p = Pockets::default();
    store(&mut h, &me, SLOTS, &granted(64, T0), T0);
    assert!(spend(&mut h, &mut p, &me, SLOTS, 1, T0).is_some());
    assert_eq!(p.units(hash, &me, T0), 15);
    assert_eq!(p.units(hash, &me, T0 - 1), 0);
    assert_eq!(spend(&mut h, &mut p, &me, SLOTS, 1, T0 - 1), None);
}

#[test]
fn a_pocket_drawn_from_two_grants_ends_with_the_earlier() {
    // 10 units until T0 + 1 s and 100 until T0 + 1.5 s: the take spends the older first, so the
    // chunk (16 of the 109 left) is 9 older and 7 newer units, living until T0 + 1 s.
    let (mut h, mut p, me) = alice();
    store(&mut h, &me, SLOTS, &granted(10, T0), T0);
    let later = T0 + 500 * MS;
    store(&mut h, &me, SLOTS, &granted(100, later), later);
    assert!(spend(&mut h, &mut p, &me, SLOTS, 1, later).is_some());
    assert_eq!(p.units(pocket_hash(&me), &me, later), 16);
    assert_eq!(shared_live(&h, &me, later), 93);
    assert_eq!(p.units(pocket_hash(&me), &me, T0 + 1000 * MS - 1), 16);
    assert_eq!(p.units(pocket_hash(&me), &me, T0 + 1000 * MS), 0);
}

#[test]
fn a_chunk_added_to_older_pocket_units_keeps_the_earlier_end() {
    let (mut h, mut p, me) = alice();
    let hash = pocket_hash(&me);
    // 20 units until T0 + 1 s: the first take pockets 4 of the 19 left.
    store(&mut h, &me, SLOTS, &granted(20, T0), T0);
    assert!(spend(&mut h, &mut p, &me, SLOTS, 1, T0).is_some());
    assert_eq!(p.units(hash, &me, T0), 4);
    for _ in 0..2 {
        assert!(spend(&mut h, &mut p, &me, SLOTS, 1, T0).is_some());
    }
    // Another worker spends the shared rest; then a grant of 100 until T0 + 1.5 s arrives.
    let mut other = Pockets::default();
    while spend(&mut h, &mut other, &me, SLOTS, 1, T0).is_some() {}
    let later = T0 + 500 * MS;
    store(&mut h, &me, SLOTS, &granted(100, later), later);
    // 5 units: the pocket's 2 are too few, so the shared table gives 5 and 14 more of the new
    // grant, kept with the 2 older units until the older end.
    assert!(spend(&mut h, &mut p, &me, SLOTS, 5, later).is_some());
    assert_eq!(p.units(hash, &me, later), 16);
    assert_eq!(p.units(hash, &me, T0 + 1000 * MS - 1), 16);
    assert_eq!(p.units(hash, &me, T0 + 1000 * MS), 0);
}

#[test]
fn a_pocket_too_small_for_the_quantity_is_kept_and_topped_up_within_its_bound() {
    let (mut h, mut p, me) = alice();
    let hash = pocket_hash(&me);
    store(&mut h, &me, SLOTS, &granted(1000, T0), T0);
    assert!(spend(&mut h, &mut p, &me, SLOTS, 1, T0).is_some());
    assert_eq!(p.units(hash, &me, T0), 16);
    for _ in 0..13 {
        assert!(spend(&mut h, &mut p, &me, SLOTS, 1, T0).is_some());
    }
    assert_eq!(p.units(hash, &me, T0), 3);
    let shared = shared_live(&h, &me, T0);
    // 5 units: more than the pocket's 3, so the shared table gives all 5 and tops the pocket
    // up to 16 (13 more), in one check-and-set.
    let before = calls(&h);
    let limit = spend(&mut h, &mut p, &me, SLOTS, 5, T0).unwrap();
    assert_eq!(calls(&h) - before, 2);
    assert_eq!(shared_live(&h, &me, T0), shared - 5 - 13);
    assert_eq!(p.units(hash, &me, T0), 16);
    assert_eq!(limit.remaining, 40 + shared - 18 + 16);
    // A quantity the pocket holds comes from it.
    let before = calls(&h);
    assert_eq!(
        spend(&mut h, &mut p, &me, SLOTS, 5, T0).unwrap().remaining,
        40 + shared - 18 + 11
    );
    assert_eq!(calls(&h), before);
}

#[test]
fn pocket_headers_count_shared_units_as_last_seen_that_are_still_live() {
    // Two shared grants: 40 units until T0 + 1 s, 40 until T0 + 1.2 s. After the first take
    // (chunk 16, all from the older grant) the shared entry keeps 23 older and 40 newer units.
    let (mut h, mut p, me) = alice();
    store(&mut h, &me, SLOTS, &granted(40, T0), T0);
    let later = T0 + 200 * MS;
    store(&mut h, &me, SLOTS, &granted(40, later), later);
    let limit = spend(&mut h, &mut p, &me, SLOTS, 1, later).unwrap();
    assert_eq!(limit.remaining, 40 + 63 + 16);
    let limit = spend(&mut h, &mut p, &me, SLOTS, 1, later).unwrap();
    assert_eq!(limit.remaining, 40 + 63 + 15, "from the pocket");
    assert_eq!(
        limit.reset_after_ms,
        6000 + 2,
        "the newest answer's deadline"
    );
    // Another worker spends from the shared entry meanwhile: this worker does not know, and
    // says what it last saw, as a leased admission never knows what other Envoys spent.
    let mut other = Pockets::default();
    spend(&mut h, &mut other, &me, SLOTS, 1, later).unwrap();
    let limit = spend(&mut h, &mut p, &me, SLOTS, 1, later).unwrap();
    assert_eq!(limit.remaining, 40 + 63 + 14);
    // The pocket expires with the older grant, so it can no longer admit after T0 + 1 s.
    assert_eq!(p.units(pocket_hash(&me), &me, T0 + 1000 * MS), 0);
}

/// Identities whose pockets fall in one set.
fn same_set(n: usize) -> Vec<Vec<u8>> {
    let first = set_of(pocket_hash(&id("s0")));
    (0..)
        .map(|i| id(&format!("s{i}")))
        .filter(|k| set_of(pocket_hash(k)) == first)
        .take(n)
        .collect()
}

#[test]
fn a_full_set_of_live_pockets_sends_a_new_identity_to_the_shared_table_and_loses_nothing() {
    let keys = same_set(WAYS + 1);
    let mut h = host();
    let mut p = Pockets::default();
    for k in &keys {
        store(&mut h, k, SLOTS, &granted(100, T0), T0);
    }
    for k in &keys[..WAYS] {
        assert!(spend(&mut h, &mut p, k, SLOTS, 1, T0).is_some());
        assert_eq!(p.units(pocket_hash(k), k, T0), 16);
    }
    let last = &keys[WAYS];
    let before = calls(&h);
    assert!(spend(&mut h, &mut p, last, SLOTS, 1, T0).is_some());
    assert_eq!(calls(&h) - before, 2);
    assert_eq!(p.units(pocket_hash(last), last, T0), 0, "no room: no chunk");
    assert_eq!(
        shared_live(&h, last, T0),
        99,
        "only the admission was taken"
    );
    for k in &keys[..WAYS] {
        assert_eq!(p.units(pocket_hash(k), k, T0), 16, "no live pocket evicted");
    }
    // Once one of them is empty it makes room.
    for _ in 0..16 {
        assert!(spend(&mut h, &mut p, &keys[1], SLOTS, 1, T0).is_some());
    }
    assert!(spend(&mut h, &mut p, last, SLOTS, 1, T0).is_some());
    assert_eq!(p.units(pocket_hash(last), last, T0), 16);
    assert_eq!(p.len(), WAYS);
    // Each identity spends only its own pocket.
    for k in &keys {
        let before = calls(&h);
        assert!(spend(&mut h, &mut p, k, SLOTS, 1, T0).is_some());
        assert_eq!(calls(&h) - before, if *k == keys[1] { 2 } else { 0 });
    }
}

#[test]
fn the_pocket_table_never_grows_past_its_bound() {
    let mut h = host();
    let mut p = Pockets::default();
    let n = 3 * MAX_POCKETS;
    for i in 0..n {
        let k = id(&format!("spray{i}"));
        store(&mut h, &k, SLOTS, &granted(100, T0), T0);
        assert!(spend(&mut h, &mut p, &k, SLOTS, 1, T0).is_some());
        assert!(p.len() <= MAX_POCKETS);
    }
    assert!(p.len() > MAX_POCKETS / 2, "{} of {SETS} × {WAYS}", p.len());
    // Every one of them was admitted, and no pocket's units were lost to another's: each key's
    // units are in its shared entry or its pocket (unless a later key's lease displaced the
    // shared entry in the slot table, which loses units there, not here).
    for i in 0..n {
        let k = id(&format!("spray{i}"));
        let (shared, pocketed) = (shared_live(&h, &k, T0), p.units(pocket_hash(&k), &k, T0));
        assert!(pocketed <= MAX_POCKET_UNITS);
        assert!(
            shared + pocketed == 99 || shared == 0,
            "{shared} + {pocketed}"
        );
    }
    // Later, with every pocket dead, new identities take their ways.
    let later = T0 + 5_000 * MS;
    for i in 0..n {
        let k = id(&format!("later{i}"));
        store(&mut h, &k, SLOTS, &granted(100, later), later);
        assert!(spend(&mut h, &mut p, &k, SLOTS, 1, later).is_some());
        assert!(p.len() <= MAX_POCKETS);
    }
}
