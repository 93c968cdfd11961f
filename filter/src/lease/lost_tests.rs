//! Units that leave the table unspent, at fixed times: every path that drops units the backend
//! debited gives them back (`returns`) or counts them in `sluice.lease_units_lost`, once; a grant
//! that is not live yet is never one of them.

use std::cell::RefCell;

use super::pocket::Pockets;
use super::table;
use super::test_support::{granted_for, host, id, MS, SLOTS, T0};
use super::*;
use crate::fake_host::FakeHost;
use crate::host::Counter;

/// A lease of `units` granted by a callout sent at `sent`, ttl 1 s.
fn granted(units: u64, sent: u64) -> Lease {
    granted_for(units, sent, 1000)
}

thread_local! {
    /// What the takes and stores of the running test gave back.
    static BACK: RefCell<Vec<Return>> = const { RefCell::new(Vec::new()) };
}

fn spend(
    h: &mut FakeHost,
    pockets: &mut Pockets,
    identity: &[u8],
    slots: u64,
    quantity: u64,
    now: u64,
) -> Option<sluice_core::headers::RateLimit> {
    let mut back = Vec::new();
    let taken = table::spend(h, pockets, identity, slots, quantity, now, &mut back);
    BACK.with_borrow_mut(|b| b.extend(back));
    taken
}

fn store(h: &mut FakeHost, identity: &[u8], slots: u64, granted: &Lease, now: u64) -> bool {
    let mut back = Vec::new();
    let stored = table::store(h, identity, slots, granted, now, &mut back);
    BACK.with_borrow_mut(|b| b.extend(back));
    stored
}

/// Stores a grant of `units` sent at `sent` when its answer came, 2 ms later.
fn grant(h: &mut FakeHost, identity: &[u8], units: u64, sent: u64) -> bool {
    store(h, identity, SLOTS, &granted(units, sent), sent + 2 * MS)
}

/// Units given back so far by the running test's takes and stores, and for whom.
fn returned() -> u64 {
    BACK.with_borrow(|b| b.iter().map(|r| r.grant.units).sum())
}

fn returned_for(who: &[u8]) -> u64 {
    BACK.with_borrow(|b| {
        b.iter()
            .filter(|r| r.identity == who)
            .map(|r| r.grant.units)
            .sum()
    })
}

fn lost(h: &FakeHost) -> u64 {
    h.counter(Counter::LeaseUnitsLost)
}

/// Admits from the table (and `pockets`) until it refuses: how many were admitted.
fn drain(h: &mut FakeHost, pockets: &mut Pockets, who: &[u8], now: u64) -> u64 {
    let mut n = 0;
    while spend(h, pockets, who, SLOTS, 1, now).is_some() {
        n += 1;
    }
    n
}

#[test]
fn a_grant_not_live_yet_survives_a_take_and_a_store_by_a_worker_with_an_older_clock() {
    // Worker 1 read its clock at T0 + 5 ms, then was descheduled; meanwhile worker 2's callout
    // left at T0 + 10 ms and its grant was stored. Worker 1's take (and its own store) at the
    // older time must keep that grant: it used to be dropped, a whole grant lost.
    let (mut h, a) = (host(), id("alice"));
    assert!(grant(&mut h, &a, 3, T0));
    assert!(grant(&mut h, &a, 9, T0 + 10 * MS));
    let mut p = Pockets::default();
    assert!(spend(&mut h, &mut p, &a, SLOTS, 1, T0 + 5 * MS).is_some());
    assert!(store(
        &mut h,
        &a,
        SLOTS,
        &granted(2, T0 + 4 * MS),
        T0 + 5 * MS
    ));
    assert_eq!((lost(&h), returned()), (0, 0));
    // Once both are live, every unit is spent: 3 + 9 + 2 - 1.
    assert_eq!(drain(&mut h, &mut p, &a, T0 + 20 * MS), 13);
    assert_eq!((lost(&h), returned()), (0, 0));

    let mut l = granted(3, T0)
        .absorb(granted(9, T0 + 10 * MS), T0 + 5 * MS)
        .0;
    assert_eq!(l.take_grant(1, T0 + 5 * MS).map(|g| g.units), Some(1));
    assert_eq!(l.unspent_units(), 11, "the later grant is still there");
    assert_eq!(l.drop_dead(T0 + 5 * MS), vec![]);
}

#[test]
fn expired_units_are_given_back_once_when_a_take_or_a_store_drops_them() {
    let (mut h, a) = (host(), id("alice"));
    let mut p = Pockets::default();
    assert!(grant(&mut h, &a, 5, T0));
    assert!(spend(&mut h, &mut p, &a, SLOTS, 1, T0 + 10 * MS).is_some());
    // Expired with 4 left: the failed take writes the entry without them and gives them back.
    assert!(spend(&mut h, &mut p, &a, SLOTS, 1, T0 + 1000 * MS).is_none());
    assert_eq!(returned_for(&a), 4);
    assert!(spend(&mut h, &mut p, &a, SLOTS, 1, T0 + 1001 * MS).is_none());
    assert_eq!(returned_for(&a), 4, "given back once");
    BACK.with_borrow(|b| {
        let g = b[0].grant;
        assert_eq!((g.units, g.granted, g.id, g.from_ns), (4, 5, T0, T0));
    });

    // A store that absorbs over an expired grant gives back what it had left.
    let b = id("bob");
    assert!(grant(&mut h, &b, 6, T0));
    assert!(grant(&mut h, &b, 2, T0 + 2000 * MS));
    assert_eq!(returned_for(&b), 6);
    // A take that succeeds from a live grant gives back the expired one beside it.
    let c = id("carol");
    assert!(grant(&mut h, &c, 7, T0));
    assert!(grant(&mut h, &c, 3, T0 + 900 * MS));
    assert!(spend(&mut h, &mut p, &c, SLOTS, 1, T0 + 1500 * MS).is_some());
    assert_eq!(returned_for(&c), 7);
    assert_eq!(drain(&mut h, &mut p, &c, T0 + 1500 * MS), 2);
    assert_eq!((returned(), lost(&h)), (17, 0), "nothing lost");
}

#[test]
fn a_grant_that_cannot_be_stored_is_given_back_whole() {
    let (mut h, a) = (host(), id("alice"));
    h.refuse_writes = true;
    assert!(!grant(&mut h, &a, 8, T0));
    assert_eq!((returned_for(&a), lost(&h)), (8, 0));
}

#[test]
fn a_lease_replaced_by_another_identitys_is_given_back() {
    // One slot: bob's grant replaces alice's live lease (fewer live units than... the only slot).
    let (mut h, a, b) = (host(), id("alice"), id("bob"));
    assert!(store(&mut h, &a, 1, &granted(5, T0), T0 + 2 * MS));
    assert!(spend(&mut h, &mut Pockets::default(), &a, 1, 1, T0 + 3 * MS).is_some());
    assert!(store(&mut h, &b, 1, &granted(4, T0 + 3 * MS), T0 + 5 * MS));
    assert_eq!(returned_for(&a), 4, "alice's 4 unspent units");
    assert_eq!(lost(&h), 0);
}

#[test]
fn a_pocket_that_expires_unspent_is_counted_lost_when_the_worker_next_refills_it() {
    // One worker: a lease of 64 at T0 (until T0 + 1 s) gives its pocket a chunk; a second grant
    // at T0 + 900 ms lives on. At T0 + 1.5 s the first grant's units, in the entry and in the
    // pocket, are expired: the take from the second grant counts both.
    let (mut h, a) = (host(), id("alice"));
    let mut p = Pockets::default();
    assert!(grant(&mut h, &a, 64, T0));
    assert!(spend(&mut h, &mut p, &a, SLOTS, 1, T0 + 10 * MS).is_some());
    let pocketed = p.units(table::pocket_hash(&a), &a, T0 + 10 * MS);
    assert!(pocketed > 0);
    assert!(grant(&mut h, &a, 40, T0 + 900 * MS));
    assert_eq!(lost(&h), 0);
    assert!(spend(&mut h, &mut p, &a, SLOTS, 1, T0 + 1500 * MS).is_some());
    // 64 granted, 1 admitted: the entry's units go back, the pocket's are lost.
    assert_eq!(lost(&h), pocketed);
    assert_eq!(returned_for(&a), 63 - pocketed);
    // The second grant is spent whole, nothing more lost: admitted + returned + lost = granted.
    assert_eq!(drain(&mut h, &mut p, &a, T0 + 1500 * MS), 39);
    assert_eq!(lost(&h) + returned_for(&a), 63);
}
