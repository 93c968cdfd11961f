//! Which peer a stream's holders belong to, for the split ([`by_demand_of`]): the Envoy's
//! address (without the port, which a reconnect changes) and the stream's domain. A client that
//! reconnects often leaves a holder behind on every closed stream until its TTL ends; counted
//! as one peer, its holders share one peer's part of the key instead of taking one part each.
//! Envoys behind one address (NAT, one host) with one domain share a part too: fairness between
//! them, never the bound, is what that costs. A stream whose address is unknown is its own peer.
//!
//! [`by_demand_of`]: sluice_core::rlqs::rebalance::by_demand_of

use std::hash::{DefaultHasher, Hash, Hasher};

use super::{Ledger, StreamId};

impl Ledger {
    /// The peer `stream` belongs to, as a number (a hash of address and domain: a collision
    /// merges two peers' parts, it never lifts a bound).
    pub(super) fn peer_of(&self, stream: StreamId) -> u64 {
        let info = self.streams.get(&stream).map(|s| &s.info);
        let mut h = DefaultHasher::new();
        match info.and_then(|i| i.peer) {
            Some(addr) => {
                0u8.hash(&mut h);
                addr.ip().hash(&mut h);
                info.and_then(|i| i.domain.as_deref()).hash(&mut h);
            }
            None => {
                1u8.hash(&mut h);
                stream.hash(&mut h);
            }
        }
        h.finish()
    }
}
