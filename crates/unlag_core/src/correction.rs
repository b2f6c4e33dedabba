//! Server-side pacing of corrections and client-side smoothing of their visual jump.

use crate::settings::{Fields, SettingsError, Validate};
use glam::Vec3;
use serde::{Deserialize, Serialize};

/// UE's throttle of client corrections: at most one every `min_interval`, or every
/// `min_interval_large` when the error is at least `large_error`.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CorrectionThrottle {
    /// Least time between two corrections, seconds (default 0.1).
    pub min_interval: f64,
    /// Least time between two corrections of a large error, seconds (default 0.05).
    pub min_interval_large: f64,
    /// An error at least this long is large, metres (default 0.5).
    pub large_error: f32,
}

impl Default for CorrectionThrottle {
    fn default() -> Self {
        Self {
            min_interval: 0.1,
            min_interval_large: 0.05,
            large_error: 0.5,
        }
    }
}

impl CorrectionThrottle {
    /// Whether a correction of an error `error` metres long may be sent at `now`, the last one
    /// having gone out at `last` (seconds).
    pub fn allows(&self, now: f64, last: Option<f64>, error: f32) -> bool {
        let interval = if error >= self.large_error {
            self.min_interval_large
        } else {
            self.min_interval
        };
        last.is_none_or(|last| now - last >= interval)
    }
}

/// How a correction's visual jump is hidden (UE's `SmoothClientPosition`): the offset the
/// drawn character keeps from its corrected simulation, and how fast it decays.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CorrectionSmoothing {
    /// Seconds over which the visual offset decays to zero (default 0.1).
    pub smooth_time: f32,
    /// Offsets longer than this are shortened to it first, metres (default 2.56).
    pub max_smooth_distance: f32,
    /// Offsets longer than this are not smoothed at all: the pose snaps, metres (default 3.84).
    pub teleport_distance: f32,
}

/// The former name of [`CorrectionSmoothing`], easily taken for proxy smoothing's settings
/// (`unlag_smoothing::SmoothingSettings`).
#[deprecated(since = "0.2.0", note = "renamed `CorrectionSmoothing`")]
pub type SmoothingSettings = CorrectionSmoothing;

impl Default for CorrectionSmoothing {
    fn default() -> Self {
        Self {
            smooth_time: 0.1,
            max_smooth_distance: 2.56,
            teleport_distance: 3.84,
        }
    }
}

impl Validate for CorrectionThrottle {
    fn validate(&self) -> Result<(), SettingsError> {
        let f = Fields::new("CorrectionThrottle");
        f.within("min_interval", self.min_interval, 0.0, 10.0, "s")?;
        f.within(
            "min_interval_large",
            self.min_interval_large,
            0.0,
            10.0,
            "s",
        )?;
        f.within("large_error", f64::from(self.large_error), 0.0, 100.0, "m")
    }
}

impl Validate for CorrectionSmoothing {
    fn validate(&self) -> Result<(), SettingsError> {
        let f = Fields::new("CorrectionSmoothing");
        f.within("smooth_time", f64::from(self.smooth_time), 0.0, 5.0, "s")?;
        let distance = f64::from(self.max_smooth_distance);
        f.within("max_smooth_distance", distance, 0.0, 1000.0, "m")?;
        f.within(
            "teleport_distance",
            f64::from(self.teleport_distance),
            0.0,
            1000.0,
            "m",
        )
    }
}

/// The offset between where a character is drawn and where it is simulated, after a
/// correction moved the simulation: it starts at the jump and eases out to zero over the smooth
/// time, so the player sees a short glide instead of a pop.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct VisualOffset {
    start: Vec3,
    elapsed: f32,
    duration: f32,
}

impl VisualOffset {
    /// Starts (or restarts) smoothing a jump of the simulated pose by `jump` metres, on top of
    /// whatever offset is still being shown, so the drawn pose does not move at this instant.
    /// Returns whether the jump was smoothed (false: it snapped).
    pub fn on_correction(&mut self, jump: Vec3, settings: &CorrectionSmoothing) -> bool {
        // The drawn pose stays where it was: the offset takes up the jump.
        let total = self.current() - jump;
        if !total.is_finite() || total.length() > settings.teleport_distance {
            *self = Self::default();
            return false;
        }
        *self = Self {
            start: total.clamp_length_max(settings.max_smooth_distance),
            elapsed: 0.0,
            duration: settings.smooth_time.max(0.0),
        };
        true
    }

    /// [`on_correction`](Self::on_correction), the ease lasting long enough that the offset
    /// moves no faster than the catch-up speed of a proxy running at `speed` m/s
    /// ([`catch_up_time`](crate::catch_up_time) of the offset left after the jump, with
    /// `settings.smooth_time` as the least): a long offset is not swept at many times the
    /// proxy's speed. Returns whether the jump was smoothed (false: it snapped).
    pub fn on_correction_paced(
        &mut self,
        jump: Vec3,
        settings: &CorrectionSmoothing,
        speed: f32,
    ) -> bool {
        if !self.on_correction(jump, settings) {
            return false;
        }
        self.duration = crate::catch_up_time(self.duration, self.start.length(), speed);
        true
    }

    /// The offset to add to the simulated position when drawing, metres.
    pub fn current(&self) -> Vec3 {
        if self.duration <= 0.0 || self.elapsed >= self.duration {
            return Vec3::ZERO;
        }
        let left = 1.0 - self.elapsed / self.duration;
        self.start * left * left
    }

    /// Advances by `dt` seconds and returns the new offset.
    pub fn advance(&mut self, dt: f32) -> Vec3 {
        if dt.is_finite() && dt > 0.0 {
            self.elapsed += dt;
        }
        self.current()
    }
}

/// An offset that eases out as a critically damped spring: it starts from a place *and a
/// velocity*, so the pose it is added to keeps moving on smoothly (no kink in its speed), and
/// settles on zero without overshooting (to 1 % in about 6.6 time constants).
///
/// The server shows a late player's guessed track with one (see `MovementSettings::playout`):
/// when the moves arrive, the shown place starts where the guess was, moving as the guess
/// moved, and bends onto the moves.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct SpringOffset {
    offset: Vec3,
    velocity: Vec3,
}

impl SpringOffset {
    /// Adds a jump of `offset` metres moving at `velocity` metres per second (the place and
    /// motion the pose had less those it now has).
    pub fn add(&mut self, offset: Vec3, velocity: Vec3) {
        self.offset += offset;
        self.velocity += velocity;
        if !self.offset.is_finite() || !self.velocity.is_finite() {
            self.clear();
        }
    }

    /// Drops the offset (a snap).
    pub fn clear(&mut self) {
        *self = Self::default();
    }

    /// The offset, metres.
    pub fn offset(&self) -> Vec3 {
        self.offset
    }

    /// How fast the offset changes, metres per second.
    pub fn velocity(&self) -> Vec3 {
        self.velocity
    }

    /// Advances by `dt` seconds with time constant `time_constant` seconds (exactly: the
    /// spring's closed form, whatever the step).
    pub fn advance(&mut self, dt: f32, time_constant: f32) {
        if !(dt.is_finite() && dt > 0.0) {
            return;
        }
        let omega = 1.0 / time_constant.max(1e-3);
        // x(t) = (A + B t) e^(-ωt), A = x0, B = v0 + ω x0.
        let b = self.velocity + self.offset * omega;
        let decay = (-omega * dt).exp();
        self.offset = (self.offset + b * dt) * decay;
        self.velocity = (self.velocity - b * (omega * dt)) * decay;
        if self.offset.length() < 1e-6 && self.velocity.length() < 1e-5 {
            self.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spring_offset_starts_with_its_velocity_and_settles_without_overshoot() {
        // A guess 1 m east, still walking east at 6 m/s against a player that stands.
        let mut o = SpringOffset::default();
        o.add(Vec3::new(1.0, 0.0, 0.0), Vec3::new(6.0, 0.0, 0.0));
        let tau = 0.07;
        let dt = 1.0 / 240.0;
        let mut last = o.offset();
        let mut last_velocity = o.velocity();
        let mut peak: f32 = 0.0;
        for k in 0..(240 * 2) {
            o.advance(dt, tau);
            let step = (o.offset() - last) / dt;
            if k == 0 {
                // It goes on as the guess went: no kink (an exponential ease would start at
                // 6 - 1/0.07 = -8.3 m/s).
                assert!((step.x - 6.0).abs() < 1.0, "{step}");
            }
            // The closed form agrees with its own velocity.
            let mean = (last_velocity + o.velocity()) / 2.0;
            assert!((step - mean).length() < 0.05, "{step} {mean}");
            last_velocity = o.velocity();
            // Never past zero.
            assert!(o.offset().x >= 0.0, "{:?}", o.offset());
            peak = peak.max(o.offset().x);
            last = o.offset();
        }
        assert!(peak < 1.5, "{peak}");
        assert!(o.offset().length() < 1e-4, "{:?}", o.offset());
        // One step as long as many: the same place (a closed form, not an integration).
        let mut a = SpringOffset::default();
        let mut b = SpringOffset::default();
        a.add(Vec3::X, Vec3::Y);
        b.add(Vec3::X, Vec3::Y);
        a.advance(0.1, tau);
        for _ in 0..10 {
            b.advance(0.01, tau);
        }
        assert!((a.offset() - b.offset()).length() < 1e-5);
    }

    #[test]
    fn throttle_spacing() {
        let t = CorrectionThrottle::default();
        assert!(t.allows(1.0, None, 0.01));
        assert!(!t.allows(1.05, Some(1.0), 0.01));
        assert!(t.allows(1.1, Some(1.0), 0.01));
        assert!(t.allows(1.05, Some(1.0), 0.6));
        assert!(!t.allows(1.04, Some(1.0), 0.6));
    }

    #[test]
    fn offset_keeps_the_drawn_pose_then_decays_to_zero_within_smooth_time() {
        let s = CorrectionSmoothing::default();
        let mut o = VisualOffset::default();
        // The simulation jumped 1 m back along x: drawn = simulated + offset stays put.
        assert!(o.on_correction(Vec3::new(-1.0, 0.0, 0.0), &s));
        assert_eq!(o.current(), Vec3::new(1.0, 0.0, 0.0));
        let mut last = o.current().length();
        for _ in 0..9 {
            let now = o.advance(0.01).length();
            assert!(now < last);
            last = now;
        }
        assert!(o.advance(0.01).length() < 1e-6, "zero at the smooth time");
    }

    #[test]
    fn a_paced_offset_moves_no_faster_than_the_catch_up_speed() {
        let s = CorrectionSmoothing::default();
        // 2 m behind a proxy running at 5 m/s: 7.5 m/s at most, so over 2 × 2 / 7.5 s.
        let mut o = VisualOffset::default();
        assert!(o.on_correction_paced(Vec3::new(-2.0, 0.0, 0.0), &s, 5.0));
        assert_eq!(o.current(), Vec3::new(2.0, 0.0, 0.0));
        let dt = 1.0 / 240.0;
        let (mut last, mut fastest, mut frames) = (o.current(), 0.0f32, 0);
        while o.current() != Vec3::ZERO {
            let now = o.advance(dt);
            fastest = fastest.max((now - last).length() / dt);
            last = now;
            frames += 1;
        }
        assert!(fastest <= crate::CATCH_UP_SHARE * 5.0 + 1e-3, "{fastest}");
        assert!(
            (frames as f32 * dt - 4.0 / 7.5).abs() <= dt,
            "{frames} frames"
        );
        // A short one keeps the smooth time; a teleport still snaps.
        let mut o = VisualOffset::default();
        assert!(o.on_correction_paced(Vec3::new(0.1, 0.0, 0.0), &s, 5.0));
        o.advance(s.smooth_time);
        assert_eq!(o.current(), Vec3::ZERO);
        assert!(!o.on_correction_paced(Vec3::new(5.0, 0.0, 0.0), &s, 5.0));
        assert_eq!(o.current(), Vec3::ZERO);
    }

    #[test]
    fn large_jumps_clamp_and_teleports_snap() {
        let s = CorrectionSmoothing::default();
        let mut o = VisualOffset::default();
        assert!(o.on_correction(Vec3::new(3.0, 0.0, 0.0), &s));
        assert!((o.current().length() - 2.56).abs() < 1e-5);
        let mut o = VisualOffset::default();
        assert!(!o.on_correction(Vec3::new(5.0, 0.0, 0.0), &s));
        assert_eq!(o.current(), Vec3::ZERO);
        assert!(!o.on_correction(Vec3::NAN, &s));
    }
}
