//! The client's list of moves the server has not acknowledged yet.
//!
//! Every tick the client simulates a move at once and keeps it here until the server
//! acknowledges it (or a later one). When the server corrects the client, the moves after the
//! corrected one are replayed from the server's state, so the client stays ahead of the server
//! without being pulled back.

use crate::seq::Seq16;
use std::collections::VecDeque;

/// Something with a move sequence number.
pub trait Sequenced {
    /// The move's sequence number.
    fn seq(&self) -> Seq16;
}

/// A bounded, ordered queue of unacknowledged moves (UE: `SavedMoves`, default cap 96).
#[derive(Clone, Debug)]
pub struct SavedMoves<T> {
    moves: VecDeque<T>,
    capacity: usize,
    evicted: u64,
}

impl<T: Sequenced> SavedMoves<T> {
    /// An empty queue that keeps at most `capacity` moves (at least 1).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            moves: VecDeque::with_capacity(capacity),
            capacity,
            evicted: 0,
        }
    }

    /// Appends `m`, the newest move. When full, the oldest move is dropped and returned: the
    /// server has been silent for too long, and a correction will set things right.
    pub fn push(&mut self, m: T) -> Option<T> {
        let evicted = if self.moves.len() == self.capacity {
            self.evicted += 1;
            self.moves.pop_front()
        } else {
            None
        };
        self.moves.push_back(m);
        evicted
    }

    /// Drops every move up to and including `seq` (wrap-aware); returns how many.
    pub fn acknowledge(&mut self, seq: Seq16) -> usize {
        let before = self.moves.len();
        while self
            .moves
            .front()
            .is_some_and(|m| !m.seq().is_newer_than(seq))
        {
            self.moves.pop_front();
        }
        before - self.moves.len()
    }

    /// The moves not yet acknowledged, oldest first.
    pub fn pending(&self) -> impl DoubleEndedIterator<Item = &T> + ExactSizeIterator {
        self.moves.iter()
    }

    /// Mutable access to the pending moves (to rewrite their end states during a replay).
    pub fn pending_mut(&mut self) -> impl DoubleEndedIterator<Item = &mut T> + ExactSizeIterator {
        self.moves.iter_mut()
    }

    /// The newest `n` moves, oldest first.
    pub fn newest(&self, n: usize) -> impl Iterator<Item = &T> {
        self.moves.iter().skip(self.moves.len().saturating_sub(n))
    }

    /// The newest move not yet acknowledged (the last pushed); `None` once every move has
    /// been acknowledged.
    pub fn last(&self) -> Option<&T> {
        self.moves.back()
    }

    /// Number of pending moves.
    pub fn len(&self) -> usize {
        self.moves.len()
    }

    /// Whether no move is pending.
    pub fn is_empty(&self) -> bool {
        self.moves.is_empty()
    }

    /// The most moves kept.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Moves dropped because the queue was full.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Forgets every move.
    pub fn clear(&mut self) {
        self.moves.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Sequenced for Seq16 {
        fn seq(&self) -> Seq16 {
            *self
        }
    }

    #[test]
    fn acknowledge_drops_up_to_seq_across_wrap() {
        let mut q = SavedMoves::new(96);
        let mut s = Seq16(65_530);
        for _ in 0..12 {
            q.push(s);
            s = s.next();
        }
        assert_eq!(q.acknowledge(Seq16(65_533)), 4);
        assert_eq!(q.pending().next(), Some(&Seq16(65_534)));
        assert_eq!(q.acknowledge(Seq16(2)), 5);
        assert_eq!(
            q.pending().copied().collect::<Vec<_>>(),
            vec![Seq16(3), Seq16(4), Seq16(5)]
        );
        // An old acknowledgement changes nothing.
        assert_eq!(q.acknowledge(Seq16(65_000)), 0);
        assert_eq!(
            q.newest(2).copied().collect::<Vec<_>>(),
            vec![Seq16(4), Seq16(5)]
        );
    }

    #[test]
    fn bounded() {
        let mut q = SavedMoves::new(3);
        for i in 0..5 {
            q.push(Seq16(i));
        }
        assert_eq!(q.len(), 3);
        assert_eq!(q.evicted(), 2);
        assert_eq!(q.pending().next(), Some(&Seq16(2)));
    }
}
