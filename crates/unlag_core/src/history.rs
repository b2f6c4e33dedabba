//! [`PoseHistory`]: a time-indexed ring buffer of a character's hit-box poses, for rewinding.
//!
//! Every server tick the poses of all of a character's boxes are appended as one frame. Frames
//! live in preallocated struct-of-arrays storage (times, teleport flags, positions, rotations),
//! so recording is a few copies and a lookup is a binary search over a contiguous time array —
//! no linked list, no allocation after creation. The oldest frame is overwritten when full.

use glam::{Quat, Vec3};

/// Why a time cannot be looked up.
#[derive(Copy, Clone, Debug, PartialEq, thiserror::Error)]
pub enum LookupError {
    /// The time is NaN or infinite.
    #[error("time is not finite")]
    NotFinite,
    /// Nothing is recorded yet.
    #[error("no frame recorded")]
    Empty,
    /// The time is older than the oldest frame kept ("too laggy").
    #[error("time {requested} s is older than the oldest frame ({oldest} s)")]
    TooOld {
        /// The time asked for, seconds.
        requested: f64,
        /// The oldest frame's time, seconds.
        oldest: f64,
    },
}

/// Why a frame was not recorded.
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The frame's time is not after the newest one's.
    #[error("frame time not after the newest frame")]
    NotNewer,
    /// The number of poses differs from the history's box count.
    #[error("wrong number of boxes")]
    WrongBoxCount,
    /// A time or pose is not finite.
    #[error("non-finite frame")]
    NotFinite,
}

/// Where a time falls in the history.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct FramePair {
    /// Slot of the frame at or before the time.
    pub from: usize,
    /// Slot of the frame after it (equal to `from` when exact, newest or across a teleport).
    pub to: usize,
    /// Blend factor from `from` to `to`, 0–1.
    pub alpha: f32,
    /// Time of the `from` frame, seconds.
    pub from_time: f64,
}

/// The hit-box poses of one character over a window of time (see the module docs).
#[derive(Clone, Debug)]
pub struct PoseHistory {
    boxes: usize,
    capacity: usize,
    /// Slot of the oldest frame.
    head: usize,
    len: usize,
    times: Vec<f64>,
    teleports: Vec<bool>,
    positions: Vec<Vec3>,
    rotations: Vec<Quat>,
}

impl PoseHistory {
    /// A history of `frames` frames (at least 2) of `boxes` poses each, all allocated now.
    pub fn new(boxes: usize, frames: usize) -> Self {
        let capacity = frames.max(2);
        Self {
            boxes,
            capacity,
            head: 0,
            len: 0,
            times: vec![0.0; capacity],
            teleports: vec![false; capacity],
            positions: vec![Vec3::ZERO; capacity * boxes],
            rotations: vec![Quat::IDENTITY; capacity * boxes],
        }
    }

    /// Boxes per frame.
    pub fn boxes(&self) -> usize {
        self.boxes
    }

    /// Frames recorded (at most the capacity).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes held by the storage.
    pub fn memory_bytes(&self) -> usize {
        self.capacity
            * (size_of::<f64>()
                + size_of::<bool>()
                + self.boxes * (size_of::<Vec3>() + size_of::<Quat>()))
    }

    #[inline]
    fn slot(&self, i: usize) -> usize {
        // `head` and `i` are both below the capacity: one subtraction instead of a division.
        let s = self.head + i;
        if s >= self.capacity {
            s - self.capacity
        } else {
            s
        }
    }

    /// Frames the history holds when full.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The storage slot of the newest frame, if any (slots are `0..capacity`).
    pub fn newest_slot(&self) -> Option<usize> {
        (self.len > 0).then(|| self.slot(self.len - 1))
    }

    /// Whether storage slot `slot` holds a recorded frame.
    #[inline]
    pub fn slot_is_recorded(&self, slot: usize) -> bool {
        slot < self.capacity && (self.len == self.capacity || slot < self.len)
    }

    /// The position of box `index` in the frame at storage slot `slot`.
    #[inline]
    pub fn position_at_slot(&self, slot: usize, index: usize) -> Vec3 {
        self.positions[slot * self.boxes + index]
    }

    /// The time of the frame at storage slot `slot`, seconds, if it holds one.
    #[inline]
    pub fn time_at_slot(&self, slot: usize) -> Option<f64> {
        self.slot_is_recorded(slot).then(|| self.times[slot])
    }

    /// Every frame kept, newest first: (time in seconds, storage slot, whether it was recorded
    /// as a teleport).
    pub fn frames_newest_first(&self) -> impl Iterator<Item = (f64, usize, bool)> + '_ {
        (0..self.len).rev().map(|i| {
            let slot = self.slot(i);
            (self.times[slot], slot, self.teleports[slot])
        })
    }

    /// Time of the oldest and newest frames, seconds.
    pub fn span(&self) -> Option<(f64, f64)> {
        (self.len > 0).then(|| {
            (
                self.times[self.slot(0)],
                self.times[self.slot(self.len - 1)],
            )
        })
    }

    /// Appends a frame at `time` (seconds) with one pose per box; `teleport` forbids
    /// interpolating between this frame and the one before. Overwrites the oldest frame when
    /// full. A refused frame changes nothing.
    pub fn record(
        &mut self,
        time: f64,
        teleport: bool,
        poses: &[(Vec3, Quat)],
    ) -> Result<(), RecordError> {
        if poses.len() != self.boxes {
            return Err(RecordError::WrongBoxCount);
        }
        if !time.is_finite() || poses.iter().any(|(p, r)| !p.is_finite() || !r.is_finite()) {
            return Err(RecordError::NotFinite);
        }
        if self.span().is_some_and(|(_, newest)| time <= newest) {
            return Err(RecordError::NotNewer);
        }
        let slot = if self.len < self.capacity {
            self.len += 1;
            self.slot(self.len - 1)
        } else {
            let slot = self.head;
            self.head = (self.head + 1) % self.capacity;
            slot
        };
        let base = slot * self.boxes;
        for (k, (p, r)) in poses.iter().enumerate() {
            self.positions[base + k] = *p;
            self.rotations[base + k] = *r;
        }
        self.times[slot] = time;
        self.teleports[slot] = teleport;
        Ok(())
    }

    /// Finds the frames around `time` (seconds): too old is an error, newer than the newest
    /// gives the newest, and a teleport between the two frames gives the nearer one alone.
    pub fn lookup(&self, time: f64) -> Result<FramePair, LookupError> {
        if !time.is_finite() {
            return Err(LookupError::NotFinite);
        }
        let (oldest, newest) = self.span().ok_or(LookupError::Empty)?;
        if time < oldest {
            return Err(LookupError::TooOld {
                requested: time,
                oldest,
            });
        }
        if time >= newest {
            let s = self.slot(self.len - 1);
            return Ok(FramePair {
                from: s,
                to: s,
                alpha: 0.0,
                from_time: newest,
            });
        }
        // The last frame at or before `time`. Frames are usually one tick apart, so first guess
        // the index from the time and check its neighbours; else binary search.
        let (mut lo, mut hi) = (0, self.len - 1);
        let guess = ((time - oldest) / (newest - oldest) * (self.len - 1) as f64) as usize;
        let guess = guess.min(self.len - 2);
        for g in [
            guess,
            guess.saturating_sub(1),
            (guess + 1).min(self.len - 2),
        ] {
            if self.times[self.slot(g)] <= time && time < self.times[self.slot(g + 1)] {
                (lo, hi) = (g, g + 1);
                break;
            }
        }
        while hi - lo > 1 {
            let mid = (lo + hi) / 2;
            if self.times[self.slot(mid)] <= time {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let (a, b) = (self.slot(lo), self.slot(hi));
        let (ta, tb) = (self.times[a], self.times[b]);
        let alpha = ((time - ta) / (tb - ta)) as f32;
        if self.teleports[b] {
            let nearer = if alpha < 0.5 { a } else { b };
            return Ok(FramePair {
                from: nearer,
                to: nearer,
                alpha: 0.0,
                from_time: self.times[nearer],
            });
        }
        Ok(FramePair {
            from: a,
            to: b,
            alpha,
            from_time: ta,
        })
    }

    /// The pose of box `index` at `pair` (lerp of position, slerp of rotation).
    #[inline]
    pub fn pose(&self, pair: &FramePair, index: usize) -> (Vec3, Quat) {
        (self.position(pair, index), self.rotation(pair, index))
    }

    /// The box around every recorded position of box `index` (its centre, not its extent), or
    /// `None` while empty.
    pub fn bounds(&self, index: usize) -> Option<crate::Aabb> {
        (self.len > 0 && index < self.boxes).then(|| {
            let mut b = crate::Aabb::EMPTY;
            for i in 0..self.len {
                let p = self.positions[self.slot(i) * self.boxes + index];
                b.min = b.min.min(p);
                b.max = b.max.max(p);
            }
            b
        })
    }

    /// The slot of the frame recorded at exactly `time` seconds, if it is still kept.
    pub fn frame_at(&self, time: f64) -> Option<FramePair> {
        let pair = self.lookup(time).ok()?;
        (pair.from_time == time).then_some(FramePair {
            to: pair.from,
            alpha: 0.0,
            ..pair
        })
    }

    /// The position of box `index` at `pair` (the lerp of [`PoseHistory::pose`] alone).
    #[inline]
    pub fn position(&self, pair: &FramePair, index: usize) -> Vec3 {
        let (i, j) = (pair.from * self.boxes + index, pair.to * self.boxes + index);
        if pair.from == pair.to || pair.alpha <= 0.0 {
            return self.positions[i];
        }
        self.positions[i].lerp(self.positions[j], pair.alpha)
    }

    /// The rotation of box `index` at `pair` (the slerp of [`PoseHistory::pose`] alone).
    #[inline]
    pub fn rotation(&self, pair: &FramePair, index: usize) -> Quat {
        let (i, j) = (pair.from * self.boxes + index, pair.to * self.boxes + index);
        if pair.from == pair.to || pair.alpha <= 0.0 {
            return self.rotations[i];
        }
        self.rotations[i].slerp(self.rotations[j], pair.alpha)
    }

    /// The time of the newest frame recorded at or after `since` (seconds) as a teleport (a
    /// jump no pose between it and the frame before may bridge), if any is kept.
    pub fn teleported_since(&self, since: f64) -> Option<f64> {
        (0..self.len)
            .rev()
            .map(|i| self.slot(i))
            .take_while(|&slot| self.times[slot] >= since)
            .find(|&slot| self.teleports[slot])
            .map(|slot| self.times[slot])
    }

    /// Every box's pose at `time`.
    pub fn poses_at(&self, time: f64) -> Result<Vec<(Vec3, Quat)>, LookupError> {
        let pair = self.lookup(time)?;
        Ok((0..self.boxes).map(|k| self.pose(&pair, k)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(x: f32) -> [(Vec3, Quat); 2] {
        [
            (Vec3::new(x, 0.0, 0.0), Quat::IDENTITY),
            (Vec3::new(x, 1.6, 0.0), Quat::from_rotation_y(x)),
        ]
    }

    fn filled(frames: usize) -> PoseHistory {
        let mut h = PoseHistory::new(2, frames);
        for k in 0..frames {
            h.record(k as f64 / 10.0, false, &frame(k as f32)).unwrap();
        }
        h
    }

    #[test]
    fn lookup_at_between_before_after() {
        let h = filled(5); // frames at 0.0 .. 0.4
        let at = h.lookup(0.2).unwrap();
        assert_eq!((at.alpha, at.from_time), (0.0, 0.2));
        assert_eq!(h.pose(&at, 0).0.x, 2.0);
        let between = h.lookup(0.25).unwrap();
        assert!((between.alpha - 0.5).abs() < 1e-5);
        assert!((h.pose(&between, 0).0.x - 2.5).abs() < 1e-5);
        let r = h.pose(&between, 1).1;
        assert!(
            r.angle_between(Quat::from_rotation_y(2.5)) < 1e-4,
            "slerped"
        );
        assert!(matches!(h.lookup(-0.01), Err(LookupError::TooOld { .. })));
        let after = h.lookup(9.0).unwrap();
        assert_eq!(
            h.pose(&after, 0).0.x,
            4.0,
            "newer than newest gives the newest"
        );
        assert_eq!(h.lookup(f64::NAN), Err(LookupError::NotFinite));
        assert_eq!(PoseHistory::new(2, 3).lookup(0.0), Err(LookupError::Empty));
    }

    #[test]
    fn lookup_finds_the_pair_around_any_time_with_uneven_spacing() {
        let times = [0.0, 0.1, 0.15, 0.5, 0.52, 0.9, 1.4, 1.41];
        let mut h = PoseHistory::new(2, 6);
        for t in times {
            h.record(t, false, &frame(t as f32)).unwrap();
        }
        let kept = &times[2..]; // 6 frames kept after wrapping
        for i in 0..=140 {
            let t = 0.15 + (1.41 - 0.15) * f64::from(i) / 140.0;
            let pair = h.lookup(t).unwrap();
            let from = kept.iter().rposition(|k| *k <= t).unwrap();
            assert_eq!(pair.from_time, kept[from], "{t}");
            let x = h.pose(&pair, 0).0.x;
            assert!((x - t as f32).abs() < 1e-4, "{t}: {x}");
        }
    }

    #[test]
    fn wraps_around_keeping_the_newest_frames() {
        let mut h = filled(4);
        for k in 4..11 {
            h.record(k as f64 / 10.0, false, &frame(k as f32)).unwrap();
        }
        assert_eq!(h.len(), 4);
        let (oldest, newest) = h.span().unwrap();
        assert!((oldest - 0.7).abs() < 1e-9 && (newest - 1.0).abs() < 1e-9);
        assert!(matches!(h.lookup(0.65), Err(LookupError::TooOld { .. })));
        for t in [0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0] {
            let x = h.pose(&h.lookup(t).unwrap(), 0).0.x;
            assert!((x - (t * 10.0) as f32).abs() < 1e-4, "{t}: {x}");
        }
    }

    #[test]
    fn bounds_and_exact_frames_cover_what_is_kept() {
        let mut h = filled(4); // x = 0..3
        let b = h.bounds(1).unwrap();
        assert_eq!(
            (b.min, b.max),
            (Vec3::new(0.0, 1.6, 0.0), Vec3::new(3.0, 1.6, 0.0))
        );
        h.record(0.4, false, &frame(-2.0)).unwrap(); // x = 0 leaves, -2 comes in
        let b = h.bounds(0).unwrap();
        assert_eq!((b.min.x, b.max.x), (-2.0, 3.0));
        assert_eq!(h.bounds(2), None);
        assert_eq!(PoseHistory::new(2, 3).bounds(0), None);
        let exact = h.frame_at(0.2).unwrap();
        assert_eq!(h.pose(&exact, 0).0.x, 2.0);
        assert_eq!(h.frame_at(0.25), None, "between frames");
        assert_eq!(h.frame_at(0.0), None, "overwritten");
    }

    #[test]
    fn never_interpolates_across_a_teleport() {
        let mut h = PoseHistory::new(2, 8);
        h.record(0.0, false, &frame(0.0)).unwrap();
        h.record(0.1, true, &frame(50.0)).unwrap();
        assert_eq!(h.pose(&h.lookup(0.04).unwrap(), 0).0.x, 0.0);
        assert_eq!(h.pose(&h.lookup(0.06).unwrap(), 0).0.x, 50.0);
    }

    #[test]
    fn the_newest_teleport_since_a_time_is_found() {
        let mut h = PoseHistory::new(2, 4);
        h.record(0.0, false, &frame(0.0)).unwrap();
        h.record(0.1, true, &frame(50.0)).unwrap();
        h.record(0.2, false, &frame(51.0)).unwrap();
        h.record(0.3, true, &frame(0.0)).unwrap();
        h.record(0.4, false, &frame(1.0)).unwrap();
        assert_eq!(h.teleported_since(0.0), Some(0.3), "the newest");
        assert_eq!(h.teleported_since(0.3), Some(0.3));
        assert_eq!(h.teleported_since(0.31), None, "none since");
        // Overwritten: the teleports are no longer kept (4 frames: 0.4 to 0.7).
        for (t, x) in [(0.5, 2.0), (0.6, 3.0), (0.7, 4.0)] {
            h.record(t, false, &frame(x)).unwrap();
        }
        assert_eq!(h.teleported_since(0.0), None);
        assert_eq!(PoseHistory::new(2, 3).teleported_since(0.0), None);
    }

    #[test]
    fn bad_frames_are_refused_and_change_nothing() {
        let mut h = filled(3);
        assert_eq!(
            h.record(0.2, false, &frame(9.0)),
            Err(RecordError::NotNewer)
        );
        assert_eq!(
            h.record(1.0, false, &[(Vec3::ZERO, Quat::IDENTITY)]),
            Err(RecordError::WrongBoxCount)
        );
        assert_eq!(
            h.record(f64::INFINITY, false, &frame(1.0)),
            Err(RecordError::NotFinite)
        );
        assert_eq!(
            h.record(1.0, false, &frame(f32::NAN)),
            Err(RecordError::NotFinite)
        );
        assert_eq!(h.len(), 3);
        assert_eq!(h.span(), Some((0.0, 0.2)));
        assert_eq!(h.pose(&h.lookup(0.2).unwrap(), 0).0.x, 2.0);
        // Also when full (the refused frame would have overwritten the oldest).
        let mut h = filled(3);
        assert_eq!(
            h.record(1.0, false, &frame(f32::NAN)),
            Err(RecordError::NotFinite)
        );
        assert_eq!(h.span(), Some((0.0, 0.2)));
        assert_eq!(h.pose(&h.lookup(0.0).unwrap(), 0).0.x, 0.0);
    }
}
