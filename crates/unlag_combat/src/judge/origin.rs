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

impl ShotContext<'_, '_, '_> {
    /// The origin is near where the shooter's body was over the last half second, or where the
    /// move the shot names left it (the moment it fired, exactly), or where it is now; and in
    /// sight of that body: the way from the body's axis, at the origin's height, to the origin
    /// is clear of the world (a shot cannot start on the far side of a wall or over cover the
    /// body is behind). [`Rejection::BadOrigin`] otherwise.
    pub(super) fn origin(&self) -> Result<(), Rejection> {
        let fits = |root: Vec3| self.near(root) && self.in_sight(root);
        let recorded = (0..=RECORDED_STEPS).any(|k| {
            self.rewind
                .root_at(
                    self.shooter,
                    self.arrival.time - f64::from(k) * RECORDED_STEP,
                )
                .is_ok_and(|(root, _)| fits(root))
        });
        let after_move = self.arrival.moved_to.is_some_and(fits);
        if !(after_move || recorded || fits(self.position)) {
            return Err(Rejection::BadOrigin);
        }
        Ok(())
    }

    /// Whether the origin is within the settings' distance of a body standing at `root`
    /// (horizontally, metres) and between its feet and 2.5 m above them (0.5 m below allowed).
    fn near(&self, root: Vec3) -> bool {
        let d = self.request.origin - root;
        Vec2::new(d.x, d.z).length() <= self.settings.max_origin_error
            && (-0.5..=2.5).contains(&d.y)
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
