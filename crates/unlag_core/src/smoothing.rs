//! Smoothing simulated proxies between sparse server states: a bounded buffer of received
//! states and the curves that render a proxy at the client's view time.
//!
//! - `Snap`: the latest state, as is (the stop-motion baseline).
//! - `Linear`: lerp of position, slerp of rotation between the two states around the view time.
//! - `Hermite`: cubic Hermite curve on position whose tangents are each state's velocity times
//!   the interval between the two states (velocity is m/s and the curve parameter runs 0–1 over
//!   the interval, so the tangent in metres is `v × Δt`); rotation by slerp, never derived from
//!   velocity (a character can walk backwards). A curve assumes smooth motion: where the two
//!   velocities imply more than [`KINK_ACCELERATION`] (a landing, a wall, a jump's take-off), the
//!   segment is drawn straight instead, which is what such motion looks like.
//! - `Extrapolate`: dead reckoning from the newest state not after the view time
//!   (`p + v × (t − t₀)`), bounded by the max extrapolation time (UE's simulated proxies).
//!
//! Every rendered pose comes from `(state A, state B, blend factor)`, which [`evaluate`]
//! reproduces exactly: the client reports those with its shots so the server can rebuild the
//! pose the shooter saw.

use glam::{Quat, Vec3};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// One received state of a proxy.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProxyState {
    /// Server tick of the state.
    pub tick: u32,
    /// Server time of the state, seconds.
    pub time: f64,
    /// Position, metres.
    pub position: Vec3,
    /// Rotation.
    pub rotation: Quat,
    /// Velocity, m/s.
    pub velocity: Vec3,
    /// Movement flags (bit 0: crouched), shown as they were at the state.
    pub flags: u8,
    /// The proxy teleported to this state: never interpolate into it.
    pub teleport: bool,
    /// Sent between the states of the proxy's update rate (where its motion bent, so that the
    /// curve follows it): drawn from like any other, but no gap to it tells the rate, nor a
    /// loss ([`StateBuffer::recent_interval`]).
    #[serde(default)]
    pub off_grid: bool,
}

impl ProxyState {
    /// Whether every number is finite and the rotation is (about) unit length.
    pub fn is_valid(&self) -> bool {
        self.time.is_finite()
            && self.position.is_finite()
            && self.velocity.is_finite()
            && self.rotation.is_finite()
            && (self.rotation.length_squared() - 1.0).abs() < 1e-3
    }
}

/// What a state shows besides the pose: what a body drawn on the proxy is posed from (crouch
/// flags, a walk cycle's time and speed). The client that draws a proxy and the server that
/// rebuilds what it drew pose from the same values.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct StateShown {
    /// Server time of the state, seconds.
    pub time: f64,
    /// Velocity, m/s.
    pub velocity: Vec3,
    /// Rotation of the character.
    pub rotation: Quat,
    /// Movement flags (bit 0: crouched).
    pub flags: u8,
}

impl From<&ProxyState> for StateShown {
    fn from(s: &ProxyState) -> Self {
        Self {
            time: s.time,
            velocity: s.velocity,
            rotation: s.rotation,
            flags: s.flags,
        }
    }
}

/// How far a body drawn between states `from` and `to` at blend factor `alpha` (a
/// [`Sample`]'s) is blended from its pose at state A to its pose at state B: `alpha` clamped
/// to 0–1 between two states, 0 on a single state (held, extrapolated, snapped, teleported).
pub fn body_blend(from: u32, to: u32, alpha: f32) -> f32 {
    if from == to || !alpha.is_finite() {
        0.0
    } else {
        alpha.clamp(0.0, 1.0)
    }
}

/// How a proxy is rendered between states.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SmoothingMode {
    /// The newest state at or before the view time (the oldest while none is), as is, until
    /// the next one is due: stop motion, with no blending and no extrapolation.
    Snap,
    /// Lerp and slerp, one update behind.
    Linear,
    /// Cubic Hermite with velocity tangents (default).
    #[default]
    Hermite,
    /// Dead reckoning from the newest state, bounded.
    Extrapolate,
}

/// Why a rendered pose is what it is.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SampleKind {
    /// Between two states.
    Interpolated,
    /// Past the newest state, standing still at it (no newer state in time).
    Held,
    /// Past the newest state, moved on by its velocity (no newer state in time).
    Extrapolated,
    /// Before the oldest state kept, or with a single state: shown as is.
    Clamped,
}

impl SampleKind {
    /// Whether the pose shows an earlier moment than the view time: held past the newest
    /// state's extrapolation, or clamped before the oldest state.
    pub fn is_stale(self) -> bool {
        matches!(self, SampleKind::Held | SampleKind::Clamped)
    }
}

/// A rendered pose and where it came from.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Sample {
    /// Position, metres.
    pub position: Vec3,
    /// Rotation.
    pub rotation: Quat,
    /// Flags in effect.
    pub flags: u8,
    /// Tick of the state the pose starts from.
    pub from: u32,
    /// Tick of the state the pose goes towards (equal to `from` when holding).
    pub to: u32,
    /// Blend factor between them: 0 at `from`, 1 at `to`; above 1 when extrapolating, in
    /// units of the interval (or seconds past `from` over 1 s when `from == to`).
    pub alpha: f32,
    /// How the pose was obtained.
    pub kind: SampleKind,
}

/// The pose between states `a` and `b` at blend factor `alpha` with `mode`: the function the
/// client renders with and the server replays with.
pub fn evaluate(mode: SmoothingMode, a: &ProxyState, b: &ProxyState, alpha: f32) -> (Vec3, Quat) {
    let rotation = a.rotation.slerp(b.rotation, alpha.clamp(0.0, 1.0));
    (Segment::new(mode, a, b).position(alpha), rotation)
}

/// The path [`evaluate`] draws a position on between two states, set up once (the Hermite
/// curve's tangents) and placed at any blend factor: the server tries the same pairs of states
/// at many moments when it explains a claimed ease. Bit for bit [`evaluate`]'s position.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Segment(SegmentPath);

#[derive(Copy, Clone, Debug, PartialEq)]
enum SegmentPath {
    /// At the first until the blend reaches 1, then at the second.
    Snap(Vec3, Vec3),
    /// Straight from the first to the second.
    Line(Vec3, Vec3),
    /// A Hermite curve: start, its tangent, end, its tangent.
    Curve(Vec3, Vec3, Vec3, Vec3),
    /// From a place at a velocity, the blend in units of a time (seconds):
    /// `position + velocity × (time × alpha)`.
    Ray(Vec3, Vec3, f32),
}

impl Segment {
    /// The path between `a` and `b` that [`evaluate`] draws with `mode`.
    pub fn new(mode: SmoothingMode, a: &ProxyState, b: &ProxyState) -> Self {
        Self(match mode {
            SmoothingMode::Snap => SegmentPath::Snap(a.position, b.position),
            SmoothingMode::Linear => SegmentPath::Line(a.position, b.position),
            SmoothingMode::Hermite => {
                let dt = (b.time - a.time) as f32;
                if (b.velocity - a.velocity).length() > KINK_ACCELERATION * dt {
                    SegmentPath::Line(a.position, b.position)
                } else {
                    // A tangent far longer than the chord overshoots it: a state's velocity is
                    // the motion of one moment, and across a long interval (states lost, a slow
                    // update rate) or a stop (a stalled player's track) the character did not
                    // keep it. Up to twice the chord a Hermite curve still draws a uniform
                    // acceleration or braking exactly; beyond, the tangent is shortened to
                    // that. Height the same way on its own: a vertical speed lasts a jump or a
                    // landing (gravity, then the floor), so across a second the curve would
                    // dive under the floor or fly over the states; held to twice the height
                    // between them, it stays between their heights.
                    // Unless the states say the motion between them was a steady acceleration
                    // (the chord is the mean of the two velocities over the interval, as in a
                    // jump's arc or a uniform braking): the curve is then that motion exactly,
                    // a parabola, and nothing is limited (an arc between two states at one
                    // height would be flattened to nothing).
                    let chord = b.position - a.position;
                    let mean = (a.velocity + b.velocity) * (0.5 * dt);
                    let steady = (chord - mean).length() <= STEADY_TOLERANCE;
                    // (Heights within a share of the vertical speeds: a player's track runs at
                    // the playout's pace, 0.8-1.5 times its own, which bends its arc a little.)
                    let vertical = (a.velocity.y.abs() + b.velocity.y.abs()) * dt;
                    let steady_height =
                        (chord.y - mean.y).abs() <= STEADY_TOLERANCE + STEADY_SHARE * vertical;
                    let limit = |m: Vec3| {
                        if steady {
                            return m;
                        }
                        let mut m = m.clamp_length_max(MAX_TANGENT_OVER_CHORD * chord.length());
                        if !steady_height {
                            let height = MAX_TANGENT_OVER_CHORD * chord.y.abs();
                            m.y = m.y.clamp(-height, height);
                        }
                        m
                    };
                    SegmentPath::Curve(
                        a.position,
                        limit(a.velocity * dt),
                        b.position,
                        limit(b.velocity * dt),
                    )
                }
            }
            SmoothingMode::Extrapolate => {
                let dt = (b.time - a.time) as f32;
                SegmentPath::Ray(a.position, a.velocity, dt)
            }
        })
    }

    /// The path [`replay`] places a position on between `a` and `b` with `mode`.
    pub fn replay(mode: SmoothingMode, a: &ProxyState, b: &ProxyState) -> Self {
        if a.tick == b.tick {
            return Self(SegmentPath::Ray(a.position, a.velocity, 1.0));
        }
        let mode = match mode {
            SmoothingMode::Extrapolate => SmoothingMode::Hermite,
            m => m,
        };
        Self::new(mode, a, b)
    }

    /// The position at blend factor `alpha`, metres.
    pub fn position(&self, alpha: f32) -> Vec3 {
        match self.0 {
            SegmentPath::Snap(a, b) => {
                if alpha >= 1.0 {
                    b
                } else {
                    a
                }
            }
            SegmentPath::Line(a, b) => a.lerp(b, alpha),
            SegmentPath::Curve(p0, m0, p1, m1) => hermite(p0, m0, p1, m1, alpha),
            SegmentPath::Ray(p, v, time) => p + v * (time * alpha),
        }
    }
}

/// The pose a [`StateBuffer::sample`] with `mode` showed, from what the [`Sample`] reports:
/// the states it started from (`a`, tick `from`) and went towards (`b`, tick `to`; the same
/// state when they are equal) and its blend factor. Bit for bit what the client computed, so
/// the server can rebuild what was on screen from the states it sent.
///
/// With `a == b` (held, extrapolated, snapped, clamped, or at a teleport) the pose is `a`
/// moved on by its velocity for `alpha` seconds; otherwise it is [`evaluate`] with `mode`
/// (`Extrapolate` proxies are sampled on the Hermite curve).
pub fn replay(mode: SmoothingMode, a: &ProxyState, b: &ProxyState, alpha: f32) -> (Vec3, Quat) {
    let rotation = if a.tick == b.tick {
        a.rotation
    } else {
        a.rotation.slerp(b.rotation, alpha.clamp(0.0, 1.0))
    };
    (Segment::replay(mode, a, b).position(alpha), rotation)
}

/// The longest a Hermite tangent (a state's velocity times the interval) may be against the
/// chord between the two states, and its vertical part against the chord's: 2, where a curve
/// from full speed to a standstill still draws a uniform braking exactly.
pub const MAX_TANGENT_OVER_CHORD: f32 = 2.0;

/// How far the chord between two states may be from the mean of their velocities over the
/// interval for the motion between them to count as a steady acceleration (drawn exactly,
/// tangents not limited), metres: a few steps of the states' quantisation.
pub const STEADY_TOLERANCE: f32 = 0.02;

/// For the height alone, the share of the vertical speeds' travel over the interval by which
/// the chord may also differ from their mean and still count as a steady acceleration (a jump's
/// arc drawn whole): 0.1.
pub const STEADY_SHARE: f32 = 0.1;

/// Velocity change between two states above which the motion between them is taken as a kink
/// (landing, take-off, bump), not a curve, m/s² (walking accelerates at ~30, gravity is ~20).
pub const KINK_ACCELERATION: f32 = 50.0;

/// Cubic Hermite curve from `p0` (tangent `m0`) to `p1` (tangent `m1`) at `s` in `[0, 1]`.
pub fn hermite(p0: Vec3, m0: Vec3, p1: Vec3, m1: Vec3, s: f32) -> Vec3 {
    let s2 = s * s;
    let s3 = s2 * s;
    let h00 = 2.0 * s3 - 3.0 * s2 + 1.0;
    let h10 = s3 - 2.0 * s2 + s;
    let h01 = -2.0 * s3 + 3.0 * s2;
    let h11 = s3 - s2;
    p0 * h00 + m0 * h10 + p1 * h01 + m1 * h11
}

/// Why a state was not buffered.
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StateRejected {
    /// A number is not finite, or the rotation is not a unit quaternion.
    #[error("non-finite or invalid values")]
    Invalid,
    /// A state with this tick is already buffered.
    #[error("duplicate tick")]
    Duplicate,
    /// Older than every buffered state (the view time has passed it).
    #[error("out of order")]
    OutOfOrder,
    /// Further in the future than the server can be.
    #[error("far-future tick")]
    FarFuture,
}

/// A bounded, time-ordered buffer of one proxy's states.
#[derive(Clone, Debug)]
pub struct StateBuffer {
    states: VecDeque<ProxyState>,
    capacity: usize,
}

impl StateBuffer {
    /// An empty buffer keeping at most `capacity` states (at least 2).
    pub fn new(capacity: usize) -> Self {
        Self {
            states: VecDeque::with_capacity(capacity.max(2)),
            capacity: capacity.max(2),
        }
    }

    /// Forgets every state (a proxy starting afresh, as after a dormant spell).
    pub fn clear(&mut self) {
        self.states.clear();
    }

    /// The buffered states, oldest first.
    pub fn states(&self) -> impl DoubleEndedIterator<Item = &ProxyState> + ExactSizeIterator {
        self.states.iter()
    }

    /// The buffered state with the latest server time (not necessarily the last received:
    /// late states are inserted in time order); `None` while empty.
    pub fn newest(&self) -> Option<&ProxyState> {
        self.states.back()
    }

    /// The interval at which states have been coming, seconds: the shortest of the last four
    /// gaps between buffered states on the proxy's grid (lost states make some gaps longer,
    /// never shorter; [`ProxyState::off_grid`] ones are passed over).
    pub fn recent_interval(&self) -> Option<f64> {
        self.recent_interval_from(0)
    }

    /// [`recent_interval`](Self::recent_interval) read from the states on the grid of tick
    /// `since` and later only: the gaps of a rate the proxy was sent at before `since` are
    /// passed over (a proxy whose rate fell at `since` showed its old, shorter gaps for four
    /// more of the new ones).
    pub fn recent_interval_from(&self, since: u32) -> Option<f64> {
        let mut grid = self
            .grid_states()
            .rev()
            .take_while(|s| s.tick >= since)
            .take(5)
            .map(|s| s.time);
        let mut later = grid.next()?;
        grid.map(|t| core::mem::replace(&mut later, t) - t)
            .filter(|gap| *gap > 0.0)
            .min_by(f64::total_cmp)
    }

    /// The buffered states on the proxy's grid (not [`ProxyState::off_grid`]), oldest first.
    pub fn grid_states(&self) -> impl DoubleEndedIterator<Item = &ProxyState> {
        self.states.iter().filter(|s| !s.off_grid)
    }

    /// The newest buffered state on the proxy's grid (not [`ProxyState::off_grid`]).
    pub fn newest_on_grid(&self) -> Option<&ProxyState> {
        self.grid_states().next_back()
    }

    /// The state with tick `tick`, if buffered.
    pub fn get(&self, tick: u32) -> Option<&ProxyState> {
        self.states.iter().find(|s| s.tick == tick)
    }

    /// Adds a state received when the client's estimate of server time was `server_now`;
    /// late states still newer than the oldest kept are inserted in order, older ones refused.
    /// The oldest state goes when the buffer is full.
    pub fn push(&mut self, state: ProxyState, server_now: f64) -> Result<(), StateRejected> {
        if !state.is_valid() {
            return Err(StateRejected::Invalid);
        }
        // A state cannot come from more than a second past the server's present.
        if state.time > server_now + 1.0 {
            return Err(StateRejected::FarFuture);
        }
        if self.states.iter().any(|s| s.tick == state.tick) {
            return Err(StateRejected::Duplicate);
        }
        // Older than everything kept: the view time has passed it.
        if self.states.front().is_some_and(|s| state.time < s.time) {
            return Err(StateRejected::OutOfOrder);
        }
        let at = self.states.partition_point(|s| s.time < state.time);
        self.states.insert(at, state);
        while self.states.len() > self.capacity {
            self.states.pop_front();
        }
        Ok(())
    }

    /// Drops states no longer needed to render at `view_time` or later (all but the newest one
    /// at or before it, and the newest on the grid at or before it: the gap from it to the
    /// next on the grid tells the rate, [`recent_interval`](Self::recent_interval)).
    pub fn prune(&mut self, view_time: f64) {
        while self.states.len() > 2 && self.states[1].time <= view_time {
            let grid_after = || {
                self.states
                    .iter()
                    .skip(1)
                    .take_while(|s| s.time <= view_time)
                    .any(|s| !s.off_grid)
            };
            if !self.states[0].off_grid && !grid_after() {
                break;
            }
            self.states.pop_front();
        }
    }

    /// The pose at `view_time` (server seconds) with `mode`; `None` while empty. Past the newest
    /// state, `Extrapolate` (and, for up to `max_extrapolation` seconds, every mode but `Snap`)
    /// moves on by the newest velocity; beyond that the proxy holds.
    pub fn sample(
        &self,
        view_time: f64,
        mode: SmoothingMode,
        max_extrapolation: f64,
    ) -> Option<Sample> {
        let newest = self.states.back()?;
        if mode == SmoothingMode::Snap {
            // The latest state that has "arrived" in view time, else the oldest.
            let s = self
                .states
                .iter()
                .rev()
                .find(|s| s.time <= view_time)
                .unwrap_or(&self.states[0]);
            return Some(at_state(s, SampleKind::Interpolated));
        }
        let oldest = self.states.front()?;
        if view_time < oldest.time || self.states.len() == 1 && view_time <= newest.time {
            return Some(at_state(oldest, SampleKind::Clamped));
        }
        if view_time >= newest.time {
            let past = view_time - newest.time;
            let ahead = past.min(max_extrapolation.max(0.0));
            let kind = if past <= max_extrapolation && ahead > 0.0 {
                SampleKind::Extrapolated
            } else if past > 0.0 {
                SampleKind::Held
            } else {
                SampleKind::Interpolated
            };
            return Some(Sample {
                position: newest.position + newest.velocity * ahead as f32,
                rotation: newest.rotation,
                flags: newest.flags,
                from: newest.tick,
                to: newest.tick,
                alpha: ahead as f32,
                kind,
            });
        }
        // Two states around the view time.
        let i = self.states.partition_point(|s| s.time <= view_time);
        let (a, b) = (&self.states[i - 1], &self.states[i]);
        if b.teleport {
            // Never sweep through the world: stay at A until B's time, then jump.
            return Some(at_state(a, SampleKind::Interpolated));
        }
        let alpha = ((view_time - a.time) / (b.time - a.time)) as f32;
        let (position, rotation) = evaluate(mode, a, b, alpha);
        Some(Sample {
            position,
            rotation,
            // Flags switch at the state that set them, as on the server.
            flags: a.flags,
            from: a.tick,
            to: b.tick,
            alpha,
            kind: SampleKind::Interpolated,
        })
    }
}

fn at_state(s: &ProxyState, kind: SampleKind) -> Sample {
    Sample {
        position: s.position,
        rotation: s.rotation,
        flags: s.flags,
        from: s.tick,
        to: s.tick,
        alpha: 0.0,
        kind,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(tick: u32, time: f64, position: Vec3, velocity: Vec3) -> ProxyState {
        ProxyState {
            tick,
            time,
            position,
            rotation: Quat::IDENTITY,
            velocity,
            flags: 0,
            teleport: false,
            off_grid: false,
        }
    }

    #[test]
    fn a_segment_places_positions_bit_for_bit_as_replay_and_evaluate_do() {
        let mut rng = crate::SplitMix64::new(7);
        let mut f = || (rng.next_f64() * 20.0 - 10.0) as f32;
        let mut v = || Vec3::new(f(), f(), f());
        for i in 0..200u32 {
            let a = state(i, 1.0, v(), v());
            let b = state(i + 3, 1.05 + f64::from(i % 7) * 0.1, v(), v() * 0.1);
            for mode in [
                SmoothingMode::Snap,
                SmoothingMode::Linear,
                SmoothingMode::Hermite,
                SmoothingMode::Extrapolate,
            ] {
                for alpha in [0.0, 0.25, 0.999, 1.0, 1.7] {
                    let segment = Segment::replay(mode, &a, &b);
                    assert_eq!(segment.position(alpha), replay(mode, &a, &b, alpha).0);
                    assert_eq!(
                        Segment::new(mode, &a, &b).position(alpha),
                        evaluate(mode, &a, &b, alpha).0
                    );
                    assert_eq!(
                        Segment::replay(mode, &a, &a).position(alpha),
                        a.position + a.velocity * alpha
                    );
                }
            }
            // Dead reckoning moves on by the velocity over the interval's share.
            let dt = (b.time - a.time) as f32;
            let e = Segment::new(SmoothingMode::Extrapolate, &a, &b).position(1.3);
            assert_eq!(e, a.position + a.velocity * (dt * 1.3));
        }
    }

    #[test]
    fn hermite_meets_ends_and_tangents() {
        let (p0, p1) = (Vec3::ZERO, Vec3::new(1.0, 0.0, 0.0));
        let (m0, m1) = (Vec3::new(0.0, 0.0, 2.0), Vec3::new(0.0, 0.0, -2.0));
        assert_eq!(hermite(p0, m0, p1, m1, 0.0), p0);
        assert!((hermite(p0, m0, p1, m1, 1.0) - p1).length() < 1e-6);
        // Numerical derivative at 0 equals the tangent.
        let d = (hermite(p0, m0, p1, m1, 1e-3) - p0) / 1e-3;
        assert!((d - m0).length() < 1e-2, "{d}");
    }

    #[test]
    fn hermite_follows_a_circle_better_than_linear() {
        // A proxy on a circle of radius 5 m at 1 rad/s, states every 0.5 s.
        let on = |t: f64| {
            let t = t as f32;
            (
                Vec3::new(5.0 * t.cos(), 0.0, 5.0 * t.sin()),
                Vec3::new(-5.0 * t.sin(), 0.0, 5.0 * t.cos()),
            )
        };
        let mut buffer = StateBuffer::new(16);
        for k in 0..8 {
            let (p, v) = on(k as f64 * 0.5);
            buffer.push(state(k, k as f64 * 0.5, p, v), 10.0).unwrap();
        }
        let (mut lin, mut her) = (0.0f32, 0.0f32);
        for i in 0..300 {
            let t = 0.5 + i as f64 * 0.01;
            let truth = on(t).0;
            lin += (buffer
                .sample(t, SmoothingMode::Linear, 0.0)
                .unwrap()
                .position
                - truth)
                .length_squared();
            her += (buffer
                .sample(t, SmoothingMode::Hermite, 0.0)
                .unwrap()
                .position
                - truth)
                .length_squared();
        }
        assert!(her * 20.0 < lin, "hermite {her} vs linear {lin}");
    }

    #[test]
    fn a_tangent_longer_than_twice_the_chord_is_shortened() {
        // Uniform braking from 2 m/s to a stop over 0.05 s: drawn exactly (tangent = 2 chords).
        let a = state(1, 1.0, Vec3::ZERO, Vec3::new(2.0, 0.0, 0.0));
        let b = state(4, 1.05, Vec3::new(0.05, 0.0, 0.0), Vec3::ZERO);
        for k in 0..=10 {
            let s = k as f32 / 10.0;
            let t = 0.05 * s;
            let exact = 2.0 * t - 20.0 * t * t;
            let (p, _) = evaluate(SmoothingMode::Hermite, &a, &b, s);
            assert!((p.x - exact).abs() < 1e-5, "{s}: {p} vs {exact}");
        }
        // A stalled track: running at 6 m/s, then standing 5 cm further for 0.45 s. The
        // state's velocity would carry the curve 0.45 m past where the character stands.
        let a = state(1, 1.0, Vec3::ZERO, Vec3::new(6.0, 0.0, 0.0));
        let b = state(31, 1.5, Vec3::new(0.05, 0.0, 0.0), Vec3::ZERO);
        let furthest = (0..=100)
            .map(|k| {
                evaluate(SmoothingMode::Hermite, &a, &b, k as f32 / 100.0)
                    .0
                    .x
            })
            .fold(f32::MIN, f32::max);
        assert!(furthest <= 0.05 + 0.05 * 4.0 / 27.0 + 1e-4, "{furthest}");
        // A landing a second before the next state (1-Hz updates): falling at 6.7 m/s 5 cm
        // above the floor. The curve stays above the floor instead of diving half a metre
        // under it.
        let a = state(1, 1.0, Vec3::new(0.0, 0.05, 0.0), Vec3::new(4.0, -6.7, 0.0));
        let b = state(61, 2.0, Vec3::new(4.0, 0.0, 0.0), Vec3::new(4.0, 0.0, 0.0));
        let lowest = (0..=100)
            .map(|k| {
                evaluate(SmoothingMode::Hermite, &a, &b, k as f32 / 100.0)
                    .0
                    .y
            })
            .fold(f32::MAX, f32::min);
        assert!(lowest > -0.01, "{lowest}");
    }

    #[test]
    fn a_jumps_arc_between_two_states_at_one_height_is_drawn_whole() {
        // Rising at 5 m/s, falling at 5 m/s half a second later at the same height (gravity
        // 20 m/s²): the apex is 0.3125 m up. Limiting the height of the tangents to twice the
        // (zero) height between the states would draw it flat.
        let a = state(1, 1.0, Vec3::ZERO, Vec3::new(4.0, 5.0, 0.0));
        let b = state(31, 1.5, Vec3::new(2.0, 0.0, 0.0), Vec3::new(4.0, -5.0, 0.0));
        for k in 0..=10 {
            let s = k as f32 / 10.0;
            let t = 0.5 * s;
            let exact = Vec3::new(4.0 * t, 5.0 * t - 10.0 * t * t, 0.0);
            let (p, _) = evaluate(SmoothingMode::Hermite, &a, &b, s);
            assert!((p - exact).length() < 1e-4, "{s}: {p} vs {exact}");
        }
        // The same jump seen from a walk that stays on the ground (no vertical speed at the
        // second state): not steady, its height limited as before.
        let b = state(31, 1.5, Vec3::new(2.0, 0.0, 0.0), Vec3::new(4.0, 0.0, 0.0));
        let highest = (0..=100)
            .map(|k| {
                evaluate(SmoothingMode::Hermite, &a, &b, k as f32 / 100.0)
                    .0
                    .y
            })
            .fold(f32::MIN, f32::max);
        assert!(highest.abs() < 1e-6, "{highest}");
    }

    #[test]
    fn a_kink_is_drawn_straight() {
        // Falling at 8 m/s, then standing on the ground 50 ms later: a landing.
        let a = state(1, 1.0, Vec3::new(0.0, 0.3, 0.0), Vec3::new(0.0, -8.0, 0.0));
        let b = state(4, 1.05, Vec3::ZERO, Vec3::ZERO);
        let (p, _) = evaluate(SmoothingMode::Hermite, &a, &b, 0.5);
        assert!((p - Vec3::new(0.0, 0.15, 0.0)).length() < 1e-6);
        // A gentle turn stays a curve.
        let d = state(1, 1.0, Vec3::ZERO, Vec3::X);
        let c = state(4, 1.05, Vec3::new(0.05, 0.0, 0.0), Vec3::new(1.0, 0.0, 0.1));
        let (p, _) = evaluate(SmoothingMode::Hermite, &d, &c, 0.5);
        assert!((p - d.position.lerp(c.position, 0.5)).length() > 1e-6);
    }

    #[test]
    fn sample_reproduces_from_pair_and_alpha() {
        let mut buffer = StateBuffer::new(8);
        buffer
            .push(state(10, 1.0, Vec3::ZERO, Vec3::X), 5.0)
            .unwrap();
        buffer
            .push(
                state(
                    13,
                    1.05,
                    Vec3::new(0.05, 0.1, 0.0),
                    Vec3::new(1.0, 2.0, 0.0),
                ),
                5.0,
            )
            .unwrap();
        for mode in [SmoothingMode::Linear, SmoothingMode::Hermite] {
            let s = buffer.sample(1.0317, mode, 0.1).unwrap();
            let (a, b) = (buffer.get(s.from).unwrap(), buffer.get(s.to).unwrap());
            let (p, r) = evaluate(mode, a, b, s.alpha);
            assert_eq!(p, s.position);
            assert_eq!(r, s.rotation);
        }
    }

    #[test]
    fn replay_matches_every_kind_of_sample_bit_for_bit() {
        let mut buffer = StateBuffer::new(8);
        let mut a = state(10, 1.0, Vec3::new(0.3, 0.0, 0.1), Vec3::new(4.0, 0.0, 1.0));
        a.rotation = Quat::from_rotation_y(0.3);
        let mut b = state(
            13,
            1.05,
            Vec3::new(0.5, 0.1, 0.15),
            Vec3::new(4.5, 2.0, 0.0),
        );
        b.rotation = Quat::from_rotation_y(0.7);
        let mut c = state(16, 1.1, Vec3::new(9.0, 0.1, 0.15), Vec3::ZERO);
        c.teleport = true;
        for s in [a, b, c] {
            buffer.push(s, 5.0).unwrap();
        }
        let modes = [
            SmoothingMode::Snap,
            SmoothingMode::Linear,
            SmoothingMode::Hermite,
            SmoothingMode::Extrapolate,
        ];
        let mut kinds = Vec::new();
        for mode in modes {
            for view in [0.9, 1.0, 1.0317, 1.07, 1.1, 1.16, 1.5] {
                let curve = if mode == SmoothingMode::Extrapolate {
                    SmoothingMode::Hermite
                } else {
                    mode
                };
                let s = buffer.sample(view, curve, 0.1).unwrap();
                let (a, b) = (buffer.get(s.from).unwrap(), buffer.get(s.to).unwrap());
                assert_eq!(
                    replay(mode, a, b, s.alpha),
                    (s.position, s.rotation),
                    "{mode:?} at {view}"
                );
                kinds.push(s.kind);
            }
        }
        for kind in [
            SampleKind::Interpolated,
            SampleKind::Held,
            SampleKind::Extrapolated,
            SampleKind::Clamped,
        ] {
            assert!(kinds.contains(&kind), "{kind:?} covered");
        }
    }

    #[test]
    fn past_the_newest_it_extrapolates_then_holds() {
        let mut buffer = StateBuffer::new(8);
        buffer
            .push(state(1, 1.0, Vec3::ZERO, Vec3::X), 5.0)
            .unwrap();
        buffer
            .push(state(2, 1.1, Vec3::new(0.1, 0.0, 0.0), Vec3::X), 5.0)
            .unwrap();
        let s = buffer.sample(1.15, SmoothingMode::Hermite, 0.1).unwrap();
        assert_eq!(s.kind, SampleKind::Extrapolated);
        assert!((s.position.x - 0.15).abs() < 1e-6);
        let s = buffer.sample(1.5, SmoothingMode::Hermite, 0.1).unwrap();
        assert_eq!(s.kind, SampleKind::Held);
        assert!((s.position.x - 0.2).abs() < 1e-6, "stops at the bound");
    }

    #[test]
    fn recent_interval_ignores_gaps_from_loss() {
        let mut buffer = StateBuffer::new(16);
        assert_eq!(buffer.recent_interval(), None);
        for (k, t) in [0.0, 0.05, 0.15, 0.2, 0.3, 0.35].iter().enumerate() {
            buffer
                .push(state(k as u32, *t, Vec3::ZERO, Vec3::ZERO), 5.0)
                .unwrap();
        }
        assert!((buffer.recent_interval().unwrap() - 0.05).abs() < 1e-9);
    }

    #[test]
    fn the_interval_from_a_rate_change_passes_over_the_old_rates_gaps() {
        // 20 Hz over 60-Hz ticks until tick 9, then 2 Hz.
        let mut buffer = StateBuffer::new(16);
        for tick in [0, 3, 6, 9, 39, 69] {
            let time = f64::from(tick) / 60.0;
            buffer
                .push(state(tick, time, Vec3::ZERO, Vec3::ZERO), 5.0)
                .unwrap();
        }
        assert!((buffer.recent_interval().unwrap() - 0.05).abs() < 1e-9);
        assert!((buffer.recent_interval_from(9).unwrap() - 0.5).abs() < 1e-9);
        // None before the new rate's first gap; the whole buffer from tick 0.
        assert_eq!(buffer.recent_interval_from(69), None);
        assert_eq!(buffer.recent_interval_from(0), buffer.recent_interval());
    }

    #[test]
    fn off_grid_states_neither_tell_the_rate_nor_leave_it_unknown() {
        // A 1-Hz proxy with states between its grid's where it started and stopped walking.
        let mut buffer = StateBuffer::new(16);
        for (k, (t, off)) in [
            (0.0, false),
            (0.4, true),
            (0.55, true),
            (1.0, false),
            (1.2, true),
        ]
        .into_iter()
        .enumerate()
        {
            let mut s = state(k as u32, t, Vec3::ZERO, Vec3::ZERO);
            s.off_grid = off;
            buffer.push(s, 5.0).unwrap();
        }
        assert!((buffer.recent_interval().unwrap() - 1.0).abs() < 1e-9);
        assert_eq!(buffer.newest_on_grid().unwrap().time, 1.0);
        // Drawn at 0.9 s, the grid's state at 0 goes only with a newer one on the grid
        // before the view: the gap to the next tells the rate.
        buffer.prune(0.9);
        assert_eq!(buffer.states().next().unwrap().time, 0.0);
        assert!((buffer.recent_interval().unwrap() - 1.0).abs() < 1e-9);
        buffer.prune(1.1);
        assert_eq!(buffer.states().next().unwrap().time, 1.0);
        // Only one state on the grid left: no rate read from the others.
        assert_eq!(buffer.recent_interval(), None);
        // And the pose between the states is drawn through the off-grid ones.
        let mut buffer = StateBuffer::new(16);
        for (k, t) in [0.0, 0.4, 1.0].into_iter().enumerate() {
            let mut s = state(k as u32, t, Vec3::X * k as f32, Vec3::ZERO);
            s.off_grid = k == 1;
            buffer.push(s, 5.0).unwrap();
        }
        let sample = buffer.sample(0.5, SmoothingMode::Linear, 0.0).unwrap();
        assert_eq!((sample.from, sample.to), (1, 2));
    }

    #[test]
    fn teleport_never_sweeps() {
        let mut buffer = StateBuffer::new(8);
        buffer
            .push(state(1, 1.0, Vec3::ZERO, Vec3::ZERO), 5.0)
            .unwrap();
        let mut far = state(2, 1.1, Vec3::new(50.0, 0.0, 0.0), Vec3::ZERO);
        far.teleport = true;
        buffer.push(far, 5.0).unwrap();
        for i in 0..=20 {
            let t = 1.0 + i as f64 * 0.01;
            let x = buffer
                .sample(t, SmoothingMode::Hermite, 0.1)
                .unwrap()
                .position
                .x;
            assert!(
                x == 0.0 || x == 50.0,
                "rendered between the two places: {x}"
            );
        }
    }

    #[test]
    fn bad_states_are_refused_and_the_buffer_is_bounded() {
        let mut buffer = StateBuffer::new(4);
        let mut bad = state(1, 1.0, Vec3::NAN, Vec3::ZERO);
        assert_eq!(buffer.push(bad, 5.0), Err(StateRejected::Invalid));
        bad.position = Vec3::ZERO;
        bad.rotation = Quat::from_xyzw(0.0, 0.0, 0.0, 3.0);
        assert_eq!(buffer.push(bad, 5.0), Err(StateRejected::Invalid));
        assert_eq!(
            buffer.push(state(9, 100.0, Vec3::ZERO, Vec3::ZERO), 5.0),
            Err(StateRejected::FarFuture)
        );
        for k in 0..10 {
            buffer
                .push(state(k, 1.0 + k as f64 * 0.05, Vec3::ZERO, Vec3::ZERO), 5.0)
                .unwrap();
        }
        assert_eq!(buffer.states().len(), 4);
        assert_eq!(
            buffer.push(state(9, 2.0, Vec3::ZERO, Vec3::ZERO), 5.0),
            Err(StateRejected::Duplicate)
        );
        assert_eq!(
            buffer.push(state(2, 1.1, Vec3::ZERO, Vec3::ZERO), 5.0),
            Err(StateRejected::OutOfOrder)
        );
        // A late state that still fits goes in order.
        let mut buffer = StateBuffer::new(4);
        buffer
            .push(state(1, 1.0, Vec3::ZERO, Vec3::ZERO), 5.0)
            .unwrap();
        buffer
            .push(state(3, 1.1, Vec3::ZERO, Vec3::ZERO), 5.0)
            .unwrap();
        buffer
            .push(state(2, 1.05, Vec3::ZERO, Vec3::ZERO), 5.0)
            .unwrap();
        let ticks: Vec<u32> = buffer.states().map(|s| s.tick).collect();
        assert_eq!(ticks, vec![1, 2, 3]);
    }
}
