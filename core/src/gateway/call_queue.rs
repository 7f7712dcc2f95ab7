//! The calls waiting for one backend (connecting, a retry wait, a credential):
//! bounded by `limits.max_queued_per_backend`, in the order they are sent,
//! each with the time it may go and the time it fails.

use alloc::collections::VecDeque;
use alloc::vec::Vec;

use super::calls::Queued;
use crate::io::SessionId;
use crate::time::Instant;

/// One backend's waiting calls.
#[derive(Clone, Debug, Default)]
pub(super) struct CallQueue(VecDeque<Queued>);

impl CallQueue {
    /// Calls waiting.
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    /// Nothing waits.
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The waiting calls, in the order they will be sent.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Queued> {
        self.0.iter()
    }

    /// `queued` waits (first in line when `front`: a call resent after a
    /// crash keeps its turn), unless `limit` calls wait already: then it is
    /// handed back, to be refused.
    #[allow(clippy::result_large_err)] // the call comes back by value: refusing it allocates nothing
    pub(super) fn try_push(&mut self, queued: Queued, front: bool, limit: usize) -> Result<(), Queued> {
        if self.0.len() >= limit {
            return Err(queued);
        }
        match front {
            true => self.0.push_front(queued),
            false => self.0.push_back(queued),
        }
        Ok(())
    }

    /// Every waiting call, taken in order.
    pub(super) fn take_all(&mut self) -> Vec<Queued> {
        self.0.drain(..).collect()
    }

    /// The waiting calls `pick` chooses, taken in order; the others keep theirs.
    pub(super) fn take_where(&mut self, pick: impl Fn(&Queued) -> bool) -> Vec<Queued> {
        let (taken, rest): (Vec<Queued>, Vec<Queued>) = self.0.drain(..).partition(|q| pick(q));
        self.0 = rest.into();
        taken
    }

    /// The call of `session`'s request `id`, taken, if it waits here.
    pub(super) fn remove_call(&mut self, session: SessionId, id: &str) -> Option<Queued> {
        let pos = self.0.iter().position(|q| q.call.session == session && q.call.id == id)?;
        self.0.remove(pos)
    }

    /// Keeps the calls `keep` says to.
    pub(super) fn retain(&mut self, keep: impl FnMut(&Queued) -> bool) {
        self.0.retain(keep);
    }

    /// When the queue next needs attention: a call's retry wait ends (only
    /// while the backend is `ready` and the call's credential `epoch` is in
    /// hand), or a call's deadline passes.
    pub(super) fn next_deadline(&self, ready: bool, epoch: u64) -> Option<Instant> {
        let due = |q: &Queued| {
            if ready && q.not_before < q.deadline && q.call.wait_epoch <= epoch {
                q.not_before
            } else {
                q.deadline
            }
        };
        self.0.iter().map(due).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::calls::ClientCall;

    fn queued(id: &str, not_before: u64, deadline: u64, wait_epoch: u64) -> Queued {
        let call = ClientCall { wait_epoch, ..ClientCall::for_test(1, id) };
        Queued { call, not_before: Instant::from_millis(not_before), deadline: Instant::from_millis(deadline) }
    }

    fn ids(calls: &[Queued]) -> Vec<&str> {
        calls.iter().map(|q| q.call.id.as_str()).collect()
    }

    #[test]
    fn the_bound_hands_back_the_call_past_it_and_a_resent_call_goes_first() {
        let mut queue = CallQueue::default();
        assert!(queue.try_push(queued("a", 0, 10, 0), false, 2).is_ok());
        assert!(queue.try_push(queued("b", 0, 10, 0), true, 2).is_ok());
        let refused = queue.try_push(queued("c", 0, 10, 0), false, 2).unwrap_err();
        assert_eq!((refused.call.id.as_str(), queue.len()), ("c", 2));
        assert_eq!(ids(&queue.take_all()), ["b", "a"]);
        assert!(queue.is_empty());
    }

    #[test]
    fn calls_are_taken_by_choice_in_order_and_by_request() {
        let mut queue = CallQueue::default();
        for (id, deadline) in [("a", 5), ("b", 50), ("c", 5)] {
            queue.try_push(queued(id, 0, deadline, 0), false, 8).expect("room");
        }
        let expired = queue.take_where(|q| q.deadline <= Instant::from_millis(5));
        assert_eq!((ids(&expired), ids(&queue.take_where(|_| false))), (alloc::vec!["a", "c"], alloc::vec![]));
        assert_eq!(queue.remove_call(SessionId(1), "b").map(|q| q.deadline), Some(Instant::from_millis(50)));
        assert!(queue.remove_call(SessionId(1), "b").is_none());
    }

    #[test]
    fn the_next_deadline_is_a_retry_wait_only_while_ready_and_the_credential_is_in_hand() {
        let mut queue = CallQueue::default();
        queue.try_push(queued("a", 3, 40, 0), false, 8).expect("room");
        queue.try_push(queued("b", 7, 30, 2), false, 8).expect("room");
        assert_eq!(queue.next_deadline(true, 2), Some(Instant::from_millis(3)));
        assert_eq!(queue.next_deadline(false, 2), Some(Instant::from_millis(30)), "not ready: deadlines only");
        let mut waiting = CallQueue::default();
        waiting.try_push(queued("b", 7, 30, 2), false, 8).expect("room");
        assert_eq!(waiting.next_deadline(true, 1), Some(Instant::from_millis(30)), "its credential is not in hand");
        assert_eq!(CallQueue::default().next_deadline(true, 0), None);
    }
}
