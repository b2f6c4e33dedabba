//! Projectile flight for Unreal Tournament-style projectiles (seed 003): a ballistic path that
//! client and server evaluate alike, advanced in steps whose segments are swept against hit
//! boxes, and the numbers of the catch-up.

use glam::Vec3;

/// A projectile in flight under constant downward gravity.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Ballistic {
    /// Where it is, metres.
    pub position: Vec3,
    /// How fast it goes, m/s.
    pub velocity: Vec3,
    /// Downward acceleration, m/s² (positive pulls towards −Y).
    pub gravity: f32,
}

impl Ballistic {
    /// Where it will be `t` seconds from now: `p + v t − ½ g t² Y`.
    pub fn position_after(&self, t: f32) -> Vec3 {
        self.position + self.velocity * t - Vec3::Y * (0.5 * self.gravity * t * t)
    }

    /// Its velocity `t` seconds from now, m/s.
    pub fn velocity_after(&self, t: f32) -> Vec3 {
        self.velocity - Vec3::Y * (self.gravity * t)
    }

    /// Moves it on by `dt` seconds and returns the segment travelled (from, to), to sweep
    /// against what it may hit. A non-finite or negative `dt` moves nothing.
    pub fn advance(&mut self, dt: f32) -> (Vec3, Vec3) {
        let from = self.position;
        if !(dt.is_finite() && dt > 0.0) {
            return (from, from);
        }
        let to = self.position_after(dt);
        self.velocity = self.velocity_after(dt);
        self.position = to;
        (from, to)
    }

    /// The segments of advancing by `total` seconds in steps of at most `step` seconds (the
    /// server's catch-up and tick steps), in order.
    pub fn advance_in_steps(&mut self, total: f32, step: f32) -> Vec<(Vec3, Vec3)> {
        let mut segments = Vec::new();
        if !(total.is_finite() && total > 0.0 && step.is_finite() && step > 0.0) {
            return segments;
        }
        let mut left = total;
        while left > 1e-6 {
            let dt = left.min(step);
            segments.push(self.advance(dt));
            left -= dt;
        }
        segments
    }
}

/// The longest a client's fake projectile may live before the real one replaces it, seconds:
/// twice the time the server advanced the real one by (Unreal Tournament), at least one tick.
pub fn fake_projectile_life(prediction_time: f64, tick: f64) -> f64 {
    (2.0 * prediction_time.max(0.0)).max(tick.max(0.0))
}

/// How long the shooter holds its fake projectile back before showing it, seconds: the part of
/// the one-way trip (`rtt / 2`, less half the fudge) that the server's prediction time
/// ([`projectile_prediction_time`](crate::projectile_prediction_time)) does not make up. Zero
/// unless `rtt − fudge` is above the cap; then the fake and the server's projectile still agree,
/// and a high ping buys no head start.
pub fn fake_projectile_hold(rtt: f64, fudge: f64, cap: f64) -> f64 {
    if !rtt.is_finite() {
        return 0.0;
    }
    (0.5 * (rtt - fudge) - crate::projectile_prediction_time(rtt, fudge, cap)).max(0.0)
}

/// The server time whose hit boxes a projectile's step ending at age `age` (seconds) is judged
/// against, seconds: the shooter's view time at age 0 (`seen_from`) plus the age, never
/// before `oldest` (the oldest time the rewind judges) nor after `now`; with no rewind
/// (`seen_from` is `None`), the present. A history shorter than a tick puts `oldest` after
/// `now`: then the present.
pub fn projectile_judged_time(seen_from: Option<f64>, age: f32, now: f64, oldest: f64) -> f64 {
    seen_from.map_or(now, |t| (t + f64::from(age)).clamp(oldest.min(now), now))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A history shorter than a tick puts the oldest judged time after the present: this used
    /// to panic (a clamp with crossed bounds) on the first rewound projectile.
    #[test]
    fn a_history_shorter_than_a_tick_judges_the_present() {
        let now = 10.0;
        let oldest = now - 0.001 + 1.0 / 60.0;
        assert_eq!(projectile_judged_time(Some(9.8), 0.05, now, oldest), now);
        assert_eq!(
            projectile_judged_time(Some(9.8), 0.05, now, 9.0),
            9.8 + f64::from(0.05f32)
        );
        assert_eq!(projectile_judged_time(None, 0.05, now, 9.0), now);
        assert_eq!(projectile_judged_time(Some(9.0), 0.05, now, 9.5), 9.5);
    }

    #[test]
    fn the_path_is_the_same_in_one_step_or_many() {
        let start = Ballistic {
            position: Vec3::new(0.0, 1.6, 0.0),
            velocity: Vec3::new(0.0, 5.0, -30.0),
            gravity: 9.8,
        };
        let mut stepped = start;
        let segments = stepped.advance_in_steps(0.5, 1.0 / 60.0);
        assert_eq!(segments.len(), 30);
        let direct = start.position_after(0.5);
        assert!(
            stepped.position.distance(direct) < 1e-3,
            "{} vs {direct}",
            stepped.position
        );
        assert!(stepped.velocity.distance(start.velocity_after(0.5)) < 1e-3);
        // Segments chain without gaps.
        assert!(segments.windows(2).all(|w| w[0].1 == w[1].0));
        assert_eq!(segments[0].0, start.position);
        // At the top of the arc the vertical speed is zero.
        let top = 5.0 / 9.8;
        assert!(start.velocity_after(top).y.abs() < 1e-5);
        // Garbage steps move nothing.
        let mut p = start;
        assert_eq!(p.advance(f32::NAN), (start.position, start.position));
        assert!(p.advance_in_steps(-1.0, 0.1).is_empty());
        assert_eq!(p, start);
    }

    #[test]
    fn fakes_are_held_back_only_above_the_cap() {
        assert_eq!(fake_projectile_hold(0.1, 0.015, 0.16), 0.0);
        assert_eq!(fake_projectile_hold(0.175, 0.015, 0.16), 0.0);
        assert!((fake_projectile_hold(0.2, 0.015, 0.16) - 0.0125).abs() < 1e-12);
        assert!((fake_projectile_hold(0.4, 0.015, 0.16) - 0.1125).abs() < 1e-12);
        assert_eq!(fake_projectile_hold(f64::NAN, 0.015, 0.16), 0.0);
        // Hold plus prediction is always half the round trip less half the fudge.
        for rtt in [0.05, 0.1, 0.2, 0.3, 0.5] {
            let sum = fake_projectile_hold(rtt, 0.015, 0.16)
                + crate::projectile_prediction_time(rtt, 0.015, 0.16);
            assert!((sum - 0.5 * (rtt - 0.015)).abs() < 1e-12, "{rtt}");
        }
    }

    #[test]
    fn fake_projectiles_live_twice_the_catch_up() {
        assert_eq!(fake_projectile_life(0.08, 1.0 / 60.0), 0.16);
        assert_eq!(fake_projectile_life(0.0, 1.0 / 60.0), 1.0 / 60.0);
        assert_eq!(fake_projectile_life(-1.0, 1.0 / 60.0), 1.0 / 60.0);
    }
}
