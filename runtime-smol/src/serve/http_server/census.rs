//! The connections open now, and who gives way when the caps are reached.
//!
//! A cap on connections that counts idle ones locks everyone out as soon as one
//! client opens enough sockets and sends nothing (on loopback, or behind a
//! proxy, every client is the same peer address). So idle connections do not
//! hold their place: at a cap, a new connection takes the place of the one idle
//! longest (of the same peer at the per-peer cap, of anyone at the total cap),
//! and only when every connection is busy with a request is the new one refused.
//! Idle means not in a request: connected and sent nothing yet, between
//! keep-alive requests, or still sending a request's head.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Instant;

/// One open connection.
#[derive(Debug)]
struct Entry {
    peer: IpAddr,
    /// Requests being served on it (hyper serves one at a time; a response
    /// body still being sent counts).
    busy: usize,
    /// Since when it has been idle (when `busy` is 0).
    idle_since: Instant,
    /// Closed to make it give way.
    evict: async_channel::Sender<()>,
}

/// A connection let in: its id, and what ends it when it has to give way.
pub(super) struct Admitted {
    pub(super) id: u64,
    pub(super) evicted: async_channel::Receiver<()>,
}

/// The connections open now: in all and by peer address.
#[derive(Debug, Default)]
pub(super) struct Census {
    next_id: u64,
    open: HashMap<u64, Entry>,
    by_peer: HashMap<IpAddr, usize>,
}

impl Census {
    /// Lets a connection from `peer` in, making room under the caps by ending
    /// the connection idle longest (`None`: every one in the way is busy).
    pub(super) fn admit(
        &mut self,
        peer: IpAddr,
        max_total: usize,
        max_per_peer: usize,
        now: Instant,
    ) -> Option<Admitted> {
        let from_peer = self.by_peer.get(&peer).copied().unwrap_or(0);
        if from_peer >= max_per_peer {
            self.evict_longest_idle(Some(peer))?;
        } else if self.open.len() >= max_total {
            self.evict_longest_idle(None)?;
        }
        let (evict, evicted) = async_channel::bounded(1);
        let id = self.next_id;
        self.next_id += 1;
        self.open.insert(id, Entry { peer, busy: 0, idle_since: now, evict });
        *self.by_peer.entry(peer).or_default() += 1;
        Some(Admitted { id, evicted })
    }

    /// Ends the connection idle longest (of `peer`, when given); `None` if there is none.
    fn evict_longest_idle(&mut self, peer: Option<IpAddr>) -> Option<()> {
        let victim = self
            .open
            .iter()
            .filter(|(_, e)| e.busy == 0 && peer.map_or(true, |p| e.peer == p))
            .min_by_key(|(id, e)| (e.idle_since, **id))
            .map(|(id, _)| *id)?;
        let entry = self.release(victim)?;
        entry.evict.close();
        Some(())
    }

    /// The connection ended (or gave way): its place is free.
    fn release(&mut self, id: u64) -> Option<Entry> {
        let entry = self.open.remove(&id)?;
        if let Some(n) = self.by_peer.get_mut(&entry.peer) {
            *n -= 1;
            if *n == 0 {
                self.by_peer.remove(&entry.peer);
            }
        }
        Some(entry)
    }

    /// The connection `id` ended.
    pub(super) fn closed(&mut self, id: u64) {
        self.release(id);
    }

    /// A request on `id` began: it does not give way until it is answered.
    pub(super) fn busy(&mut self, id: u64) {
        if let Some(e) = self.open.get_mut(&id) {
            e.busy += 1;
        }
    }

    /// A request on `id` was answered (its response body sent or dropped).
    pub(super) fn done(&mut self, id: u64, now: Instant) {
        if let Some(e) = self.open.get_mut(&id) {
            e.busy = e.busy.saturating_sub(1);
            if e.busy == 0 {
                e.idle_since = now;
            }
        }
    }

    /// Connections open now.
    #[cfg(test)]
    pub(super) fn total(&self) -> usize {
        self.open.len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn at_a_cap_the_connection_idle_longest_gives_way_and_busy_ones_never_do() {
        let (a, b, c): (IpAddr, IpAddr, IpAddr) =
            ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap(), "10.0.0.3".parse().unwrap());
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut census = Census::default();
        let a1 = census.admit(a, 3, 2, at(0)).unwrap();
        let a2 = census.admit(a, 3, 2, at(1)).unwrap();
        census.busy(a1.id);
        let a3 = census.admit(a, 3, 2, at(2)).expect("a third from one peer takes the idle one's place");
        assert!(a2.evicted.is_closed() && !a1.evicted.is_closed(), "the busy one stays");
        census.busy(a3.id);
        assert!(census.admit(a, 3, 2, at(3)).is_none(), "every connection of the peer is busy");

        let b1 = census.admit(b, 3, 2, at(4)).unwrap();
        census.done(a1.id, at(5));
        let c1 = census.admit(c, 3, 2, at(6)).expect("a fourth in all takes the longest idle place");
        assert!(b1.evicted.is_closed(), "b1 idle since 4, a1 only since 5");
        assert!(!a1.evicted.is_closed() && !c1.evicted.is_closed());
        assert_eq!(census.total(), 3);

        for id in [a1.id, a3.id, c1.id, b1.id] {
            census.closed(id);
        }
        assert_eq!(census.total(), 0);
        assert!(census.by_peer.is_empty(), "peers with no connection are forgotten");
    }
}
