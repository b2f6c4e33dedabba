//! Sequence numbers that wrap around safely.
//!
//! Every message that refers to time or order carries a 16-bit sequence number. They wrap after
//! 65 536 values (18 minutes of moves at 60 Hz), so they are compared in a window of half the
//! range around each other (RFC 1982 serial-number arithmetic), never with plain `<`.

use serde::{Deserialize, Serialize};

/// A 16-bit sequence number that wraps around.
///
/// `a.is_newer_than(b)` holds when `a` is less than half the range (32 768) ahead of `b`, so
/// `Seq16(0)` is newer than `Seq16(65_535)`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Seq16(pub u16);

impl Seq16 {
    /// The signed distance from `other` to `self`, in `[-32 768, 32 767]`: positive when `self`
    /// is newer.
    pub fn diff(self, other: Seq16) -> i32 {
        i32::from(self.0.wrapping_sub(other.0) as i16)
    }

    /// Whether `self` comes strictly after `other` (within half the range).
    pub fn is_newer_than(self, other: Seq16) -> bool {
        self.diff(other) > 0
    }

    /// The number that follows this one.
    #[must_use]
    pub fn next(self) -> Seq16 {
        Seq16(self.0.wrapping_add(1))
    }

    /// This number moved by `n` steps (negative goes back), wrapping.
    #[must_use]
    pub fn offset(self, n: i32) -> Seq16 {
        Seq16((i32::from(self.0) + n).rem_euclid(1 << 16) as u16)
    }
}

/// Turns wrapping 16-bit sequence numbers back into an ever-growing 64-bit count, given that
/// consecutive numbers seen are less than half the range apart.
///
/// Used where a receiver must keep a total order over hours (e.g. to reject a replayed message
/// from 18 minutes ago that has the same 16-bit number as a fresh one).
#[derive(Clone, Debug, Default)]
pub struct SeqUnwrapper {
    latest: Option<u64>,
}

impl SeqUnwrapper {
    /// A new unwrapper that has seen nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// The extended value of `seq`, relative to the latest value seen, and records it as the
    /// latest if it is newer. Returns `None` for a number that would fall before zero.
    pub fn unwrap(&mut self, seq: Seq16) -> Option<u64> {
        let extended = match self.latest {
            None => u64::from(seq.0),
            Some(latest) => {
                let diff = seq.diff(Seq16(latest as u16));
                let value = latest as i64 + i64::from(diff);
                if value < 0 {
                    return None;
                }
                value as u64
            }
        };
        if self.latest.is_none_or(|latest| extended > latest) {
            self.latest = Some(extended);
        }
        Some(extended)
    }

    /// The latest extended value seen, if any.
    pub fn latest(&self) -> Option<u64> {
        self.latest
    }
}

/// The receive window of one reliable channel, as a transport that delivers each message once
/// sees it: the oldest id not yet received, and the ids received beyond it. (lightyear's reliable
/// receivers keep every message from that oldest id up to 32 767 ids on; the server's packet
/// guard follows the same window to refuse ids too far ahead.)
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReceiveWindow {
    next: u16,
    ahead: std::collections::BTreeSet<u16>,
}

impl ReceiveWindow {
    /// The oldest id not yet received.
    pub fn next(&self) -> u16 {
        self.next
    }

    /// How many ids have been received beyond a gap (waiting for the gap to fill).
    pub fn held(&self) -> usize {
        self.ahead.len()
    }

    /// How far `id` lies ahead of [`next`](Self::next), in ids (wrapping): 0 for the next one,
    /// negative for an id already received or given up (up to 32 768 behind).
    pub fn ahead_of_next(&self, id: u16) -> i16 {
        id.wrapping_sub(self.next) as i16
    }

    /// Marks `id` received: the next one moves on past every id received in a row; an id
    /// behind is ignored (a copy).
    pub fn receive(&mut self, id: u16) {
        match self.ahead_of_next(id) {
            0 => {
                self.next = self.next.wrapping_add(1);
                while self.ahead.remove(&self.next) {
                    self.next = self.next.wrapping_add(1);
                }
            }
            d if d > 0 => {
                self.ahead.insert(id);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newer_across_wrap() {
        assert!(Seq16(0).is_newer_than(Seq16(65_535)));
        assert!(Seq16(10).is_newer_than(Seq16(65_530)));
        assert!(!Seq16(65_535).is_newer_than(Seq16(0)));
        assert!(!Seq16(5).is_newer_than(Seq16(5)));
        assert!(Seq16(100).is_newer_than(Seq16(99)));
    }

    #[test]
    fn diff_is_signed_and_wraps() {
        assert_eq!(Seq16(0).diff(Seq16(65_535)), 1);
        assert_eq!(Seq16(65_535).diff(Seq16(0)), -1);
        assert_eq!(Seq16(32_767).diff(Seq16(0)), 32_767);
        assert_eq!(Seq16(32_768).diff(Seq16(0)), -32_768);
    }

    #[test]
    fn next_and_offset_wrap() {
        assert_eq!(Seq16(65_535).next(), Seq16(0));
        assert_eq!(Seq16(2).offset(-3), Seq16(65_535));
        assert_eq!(Seq16(65_530).offset(10), Seq16(4));
    }

    #[test]
    fn unwrapper_counts_past_many_wraps() {
        let mut u = SeqUnwrapper::new();
        let mut seq = Seq16(65_000);
        let mut last = u.unwrap(seq).unwrap();
        for _ in 0..200_000 {
            seq = seq.next();
            let v = u.unwrap(seq).unwrap();
            assert_eq!(v, last + 1);
            last = v;
        }
        assert_eq!(u.latest(), Some(65_000 + 200_000));
    }

    #[test]
    fn unwrapper_places_old_numbers_in_the_past() {
        let mut u = SeqUnwrapper::new();
        u.unwrap(Seq16(3));
        assert_eq!(u.unwrap(Seq16(65_534)), None, "before zero");
        u.unwrap(Seq16(70));
        let mut u2 = SeqUnwrapper::new();
        u2.unwrap(Seq16(65_530));
        assert_eq!(u2.unwrap(Seq16(4)), Some(65_540));
        // A late packet from before the wrap keeps its place and does not move `latest` back.
        assert_eq!(u2.unwrap(Seq16(65_535)), Some(65_535));
        assert_eq!(u2.latest(), Some(65_540));
    }

    #[test]
    fn a_receive_window_follows_the_oldest_missing_id() {
        let mut w = ReceiveWindow::default();
        w.receive(1);
        w.receive(2);
        assert_eq!((w.next(), w.held()), (0, 2));
        w.receive(0);
        assert_eq!((w.next(), w.held()), (3, 0));
        assert!(w.ahead_of_next(2) < 0, "a copy");
        w.receive(2);
        assert_eq!((w.next(), w.held()), (3, 0), "a copy changes nothing");
        assert_eq!(w.ahead_of_next(3 + 511), 511);
        assert_eq!(w.ahead_of_next(3 + 32_767), 32_767);
        assert!(w.ahead_of_next(3u16.wrapping_add(32_768)) < 0);
        // Across the wrap.
        let mut w = ReceiveWindow::default();
        for id in 0..u16::MAX {
            w.receive(id);
        }
        assert_eq!(w.next(), u16::MAX);
        w.receive(0);
        assert_eq!((w.next(), w.held()), (u16::MAX, 1));
        w.receive(u16::MAX);
        assert_eq!((w.next(), w.held()), (1, 0));
    }
}
