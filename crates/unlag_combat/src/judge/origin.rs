//! The origin check: a shot starts where its shooter's body could fire it from.

use super::ShotContext;
use crate::protocol::Rejection;
use bevy::prelude::*;

/// Body positions of the recorded history the origin may be near: now and every 0.05 s back,
/// this many (half a second: the client predicts ahead of the server, and its moves arrive in
/// bursts).
const RECORDED_STEPS: u32 = 10;

/// Spacing of those positions, seconds.
const RECORDED_STEP: f64 = 0.05;

/// Beyond the round trip, how long after the game moves a shooter its shots may still start
/// where it stood before, seconds: the move reaches its client with the answer to the next
/// move the server plays out (moves wait up to a few frames for their turn), and a shot fired
/// meanwhile may be held for its move.
const MOVE_NEWS: f64 = 0.5;

impl ShotContext<'_, '_, '_> {
    /// The origin is near where the move the shot names left the shooter's body (the moment it
    /// fired, exactly), or where the body was over the last half second, or where it is now;
    /// and in sight of that body: the way from the body's axis, at the origin's height, to the
    /// origin is clear of the world (a shot cannot start on the far side of a wall or over
    /// cover the body is behind). [`Rejection::BadOrigin`] otherwise, or
    /// [`Rejection::ShooterMoved`] for a shot fired before its client heard that the game had
    /// moved it (see `fired_before_moved`).
    pub(super) fn origin(&self) -> Result<(), Rejection> {
        let fits = |root: Vec3| self.near(root) && self.in_sight(root);
        let recorded = || {
            (0..=RECORDED_STEPS).any(|k| {
                self.rewind
                    .root_at(
                        self.shooter,
                        self.arrival.time - f64::from(k) * RECORDED_STEP,
                    )
                    .is_ok_and(|(root, _)| fits(root))
            })
        };
        if self.arrival.moved_to.is_some_and(fits) {
            return Ok(());
        }
        // Before the half second's positions: one of them may be where the game moved the
        // shooter away from (a respawn leaves the body where it died).
        if self.fired_before_moved() {
            return Err(Rejection::ShooterMoved);
        }
        if !(recorded() || fits(self.position)) {
            return Err(Rejection::BadOrigin);
        }
        Ok(())
    }

    /// Whether the game moved the shooter (a teleport in its recorded history: a respawn, a
    /// teleporter) within the round trip and [`MOVE_NEWS`] before the shot arrived, and the
    /// origin lies nearer where the body stood in the [`RECORDED_STEPS`] before the move than
    /// anywhere it stood since: fired before its client heard of the move, which reaches it
    /// with the answer to its next move played out. Such a shot is never granted, so the
    /// window buys a cheater nothing; past it, a client still firing from where it is not is
    /// refused.
    fn fired_before_moved(&self) -> bool {
        let (time, rtt) = (self.arrival.time, self.arrival.link.rtt);
        let window = unlag_core::finite_non_negative(rtt) + MOVE_NEWS;
        let Some(moved_at) = self.rewind.teleported_since(self.shooter, time - window) else {
            return false;
        };
        let stood = |at: f64| {
            self.rewind
                .root_at(self.shooter, at)
                .ok()
                .map(|(r, _)| self.away(r))
        };
        let step = |k: u32| f64::from(k) * RECORDED_STEP;
        // (A step or more before it: nearer the teleport's frame than the one before, a
        // lookup gives the teleport's.)
        let before = (1..=RECORDED_STEPS)
            .filter_map(|k| stood(moved_at - step(k)))
            .reduce(f32::min);
        let since = (0..)
            .map(step)
            .take_while(|&back| time - back >= moved_at)
            .filter_map(|back| stood(time - back))
            .chain([self.away(self.position)])
            .reduce(f32::min);
        before
            .zip(since)
            .is_some_and(|(before, since)| before < since)
    }

    /// Whether the origin is within the settings' distance of a body standing at `root`
    /// (horizontally, metres) and between its feet and 2.5 m above them (0.5 m below allowed).
    fn near(&self, root: Vec3) -> bool {
        self.away(root) <= self.settings.max_origin_error
            && (-0.5..=2.5).contains(&(self.request.origin.y - root.y))
    }

    /// How far the origin lies from a body standing at `root`, horizontally, metres.
    fn away(&self, root: Vec3) -> f32 {
        let d = self.request.origin - root;
        Vec2::new(d.x, d.z).length()
    }

    /// Whether the world leaves the way clear from the axis of a body at `root`, at the
    /// origin's height, to the origin.
    fn in_sight(&self, root: Vec3) -> bool {
        let origin = self.request.origin;
        let from = Vec3::new(root.x, origin.y, root.z);
        let to = origin - from;
        let length = to.length();
        length < 1e-3
            || self
                .rewind
                .wall(from, to / length, length, Some(self.shooter))
                >= length - 1e-3
    }
}
