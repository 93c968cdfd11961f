//! A bound on failed admin sign-ins per client address: a token bucket per address (an IPv6
//! client by its /64, what one host is usually given), spent by each wrong token and refilled
//! with time, so a client may mistype a few times but cannot try tokens at the speed of the
//! network. An address whose bucket is empty is refused before its token is even checked (a
//! refusal that checked would still tell a guesser when it hit).
//!
//! The map is bounded ([`MAX_ADDRESSES`]): idle addresses (full buckets) are dropped when it
//! fills, and while it is still full, every address not in it shares one bucket, so a client
//! spraying addresses gets no more tries than one address, and never grows the map. The buckets
//! are the core's token bucket ([`sluice_core::algorithms::token_bucket`]); time is passed in.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sluice_core::algorithms::token_bucket::{self, TokenState};
use sluice_core::params::MeterParams;

use crate::log_limit::{LogLimit, LOG_EVERY};

/// Failed sign-ins an address may make back to back.
pub const BURST: u64 = 10;
/// One more failed sign-in is allowed per this much time (10 a minute, sustained).
pub const REFILL_EVERY: Duration = Duration::from_secs(6);
/// Addresses remembered at most (beyond them: one shared bucket).
pub const MAX_ADDRESSES: usize = 10_000;

/// Which bucket a client spends from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Slot {
    /// Its own (IPv4 address, or IPv6 /64).
    Address(IpAddr),
    /// The shared one of addresses that found the map full.
    Overflow,
}

type Buckets = HashMap<Slot, TokenState>;

/// Failed sign-ins per client address.
#[derive(Debug)]
pub struct SignIns {
    params: MeterParams,
    max_addresses: usize,
    /// The origin of the buckets' nanosecond clock.
    epoch: Instant,
    buckets: Mutex<Buckets>,
    /// The WARN lines about failed and refused sign-ins: one per kind per [`LOG_EVERY`].
    lines: LogLimit,
}

impl Default for SignIns {
    fn default() -> SignIns {
        SignIns::new(BURST, REFILL_EVERY, MAX_ADDRESSES)
    }
}

impl SignIns {
    /// `burst` failures back to back, one more per `refill_every`, `max_addresses` remembered.
    pub fn new(burst: u64, refill_every: Duration, max_addresses: usize) -> SignIns {
        SignIns {
            params: MeterParams {
                interval: u64::try_from(refill_every.as_nanos())
                    .unwrap_or(u64::MAX)
                    .max(1),
                capacity: burst.max(1),
            },
            max_addresses: max_addresses.max(1),
            epoch: Instant::now(),
            buckets: Mutex::new(HashMap::new()),
            lines: LogLimit::new(LOG_EVERY),
        }
    }

    /// The limit on WARN lines about sign-ins (kept with the counts, so that each instance's
    /// lines are its own).
    pub fn lines(&self) -> &LogLimit {
        &self.lines
    }

    fn nanos(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    /// One sign-in of `peer` at `now`: `Err(wait)`, with how long until it may try again, when
    /// its failures are spent (and `check` is not run); otherwise what `check` (the credential's
    /// check) says, a `None` counted as a failure. All under one lock: parallel guesses from one
    /// address are counted one after the other, so none gets past the bound by arriving together
    /// (a check is a few HMACs: microseconds).
    pub fn attempt<T>(
        &self,
        peer: IpAddr,
        now: Instant,
        check: impl FnOnce() -> Option<T>,
    ) -> Result<Option<T>, Duration> {
        let now = self.nanos(now);
        let mut buckets = self.lock();
        self.may_try(&buckets, peer, now)?;
        let accepted = check();
        if accepted.is_none() {
            self.spend(&mut buckets, peer, now);
        }
        Ok(accepted)
    }

    /// Whether `peer` may try a token at `now` (nanoseconds since `epoch`).
    fn may_try(&self, buckets: &Buckets, peer: IpAddr, now: u64) -> Result<(), Duration> {
        let state = match buckets.get(&Slot::Address(slot_address(peer))) {
            Some(state) => *state,
            None if buckets.len() >= self.max_addresses => buckets
                .get(&Slot::Overflow)
                .copied()
                .unwrap_or_else(|| TokenState::full(self.params)),
            None => return Ok(()),
        };
        // A probe of quantity 1 that is never stored: the state changes only on a failure.
        let (decision, _) = token_bucket::decide(self.params, state, now, 1);
        match decision.retry_after {
            _ if decision.allowed => Ok(()),
            Some(wait) => Err(Duration::from_nanos(wait).max(Duration::from_secs(1))),
            None => Err(Duration::from_secs(1)),
        }
    }

    /// Spends one failure of `peer` at `now`.
    fn spend(&self, buckets: &mut Buckets, peer: IpAddr, now: u64) {
        let own = Slot::Address(slot_address(peer));
        if !buckets.contains_key(&own) && buckets.len() >= self.max_addresses {
            // Idle buckets (refilled in full) carry nothing worth keeping.
            let params = self.params;
            buckets.retain(|_, state| state.tokens_at(params, now) < params.tolerance());
        }
        let slot = if buckets.contains_key(&own) || buckets.len() < self.max_addresses {
            own
        } else {
            Slot::Overflow
        };
        let state = buckets
            .get(&slot)
            .copied()
            .unwrap_or_else(|| TokenState::full(self.params));
        let (_, next) = token_bucket::decide(self.params, state, now, 1);
        buckets.insert(slot, next);
    }

    /// Addresses (and the shared bucket) remembered now.
    pub fn remembered(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Buckets> {
        // A poisoned lock only means another thread panicked while counting; the buckets are
        // still usable.
        self.buckets.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The address a client's failures are counted under: an IPv4 address as it is, an IPv6 one by
/// its /64 (an IPv4-mapped one as IPv4).
fn slot_address(peer: IpAddr) -> IpAddr {
    match peer {
        IpAddr::V4(_) => peer,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut segments = v6.segments();
                segments[4..].fill(0);
                IpAddr::V6(segments.into())
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    /// A right token: `Ok(())`, or how long to wait.
    fn right(limit: &SignIns, peer: IpAddr, now: Instant) -> Result<(), Duration> {
        limit.attempt(peer, now, || Some(())).map(|_| ())
    }

    /// A wrong token: counted (and refused unchecked past the bound).
    fn wrong(limit: &SignIns, peer: IpAddr, now: Instant) {
        let _ = limit.attempt(peer, now, || None::<()>);
    }

    #[test]
    fn an_address_gets_its_burst_then_one_per_refill() {
        let limit = SignIns::new(3, Duration::from_secs(6), 100);
        let t0 = Instant::now();
        let a = ip("10.0.0.1");
        for _ in 0..3 {
            assert_eq!(right(&limit, a, t0), Ok(()));
            wrong(&limit, a, t0);
        }
        let wait = right(&limit, a, t0).unwrap_err();
        assert_eq!(wait, Duration::from_secs(6));
        // Another address is not held back.
        assert_eq!(right(&limit, ip("10.0.0.2"), t0), Ok(()));
        assert_eq!(
            right(&limit, a, t0 + Duration::from_secs(3)),
            Err(Duration::from_secs(3))
        );
        assert_eq!(right(&limit, a, t0 + Duration::from_secs(6)), Ok(()));
    }

    #[test]
    fn ipv6_addresses_of_one_64_share_a_bucket() {
        let limit = SignIns::new(2, Duration::from_secs(60), 100);
        let t0 = Instant::now();
        wrong(&limit, ip("2001:db8::1"), t0);
        wrong(&limit, ip("2001:db8::ffff:2"), t0);
        assert!(right(&limit, ip("2001:db8::3"), t0).is_err());
        assert_eq!(right(&limit, ip("2001:db8:0:1::1"), t0), Ok(()));
    }

    #[test]
    fn a_full_map_drops_idle_addresses_then_shares_one_bucket() {
        let limit = SignIns::new(2, Duration::from_secs(60), 3);
        let t0 = Instant::now();
        for i in 1..=3 {
            wrong(&limit, ip(&format!("10.0.0.{i}")), t0);
        }
        assert_eq!(limit.remembered(), 3);
        // Sprayed addresses: none grows the map; together they get one address's tries.
        wrong(&limit, ip("10.0.1.1"), t0);
        wrong(&limit, ip("10.0.1.2"), t0);
        assert!(limit.remembered() <= 4, "{}", limit.remembered());
        assert!(right(&limit, ip("10.0.1.3"), t0).is_err());
        // Once the first addresses are idle again, they make room.
        let later = t0 + Duration::from_secs(600);
        wrong(&limit, ip("10.0.2.1"), later);
        assert_eq!(right(&limit, ip("10.0.2.1"), later), Ok(()));
        assert!(limit.remembered() <= 3, "{}", limit.remembered());
    }

    #[test]
    fn a_refused_sign_in_is_not_checked_and_a_right_token_spends_nothing() {
        let limit = SignIns::new(2, Duration::from_secs(60), 100);
        let t0 = Instant::now();
        let a = ip("192.0.2.1");
        for _ in 0..5 {
            assert_eq!(right(&limit, a, t0), Ok(()));
        }
        wrong(&limit, a, t0);
        wrong(&limit, a, t0);
        let mut checked = false;
        let refused = limit.attempt(a, t0, || {
            checked = true;
            Some(())
        });
        assert!(refused.is_err());
        assert!(!checked, "past the bound the credential is not checked");
    }
}
