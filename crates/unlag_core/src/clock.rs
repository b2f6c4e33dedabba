//! The client's estimate of the server's clock.
//!
//! The server stamps each periodic beat with its exact simulation time. When a beat arrives,
//! the server is one one-way trip further on, so `server_time_at_send + one_way − local_now` is
//! one sample of the offset between the two clocks. Samples are noisy by the jitter of that one
//! trip; an exponential average of them is the estimate. Between samples the estimate runs on
//! the local clock.
//!
//! Exact stamps matter: lightyear's own estimate reads the server's whole tick from packet
//! headers, which lags the server's real time by the unknown part of a tick.

/// Offset samples further than this from the estimate (seconds) restart it (a reconnect, or a
/// server that stalled and jumped).
pub const RESET_OFFSET: f64 = 0.5;

/// How fast the clock shown moves towards the estimate: at most this many seconds per second
/// (5 %), so server time, and the view time derived from it, never jump.
pub const SLEW_RATE: f64 = 0.05;

/// A gap between the clock shown and the estimate above this (seconds) is closed at once.
pub const SLEW_SNAP: f64 = 0.1;

/// Estimates the server's clock from stamped samples (see the module docs).
#[derive(Clone, Debug)]
pub struct ServerClockEstimator {
    alpha: f64,
    offset: Option<f64>,
    /// The offset shown: follows `offset` at a bounded rate.
    shown: Option<(f64, f64)>,
    samples: u64,
}

impl Default for ServerClockEstimator {
    fn default() -> Self {
        Self::new(0.1)
    }
}

impl ServerClockEstimator {
    /// An estimator that weighs each new sample by `alpha` (0–1]; 0.1 averages about the last
    /// ten samples.
    pub fn new(alpha: f64) -> Self {
        Self {
            alpha: alpha.clamp(1e-6, 1.0),
            offset: None,
            shown: None,
            samples: 0,
        }
    }

    /// Adds a sample: a stamp of `server_time` (seconds) sent by the server and received when
    /// the local clock read `local_now`, with `one_way` seconds of travel. Non-finite inputs are
    /// ignored.
    pub fn add_sample(&mut self, local_now: f64, server_time: f64, one_way: f64) {
        if !(local_now.is_finite() && server_time.is_finite() && one_way.is_finite()) {
            return;
        }
        let sample = server_time + one_way.max(0.0) - local_now;
        self.offset = Some(match self.offset {
            Some(offset) if (sample - offset).abs() <= RESET_OFFSET => {
                offset + self.alpha * (sample - offset)
            }
            _ => {
                self.samples = 0;
                sample
            }
        });
        self.samples += 1;
    }

    /// The estimated server time when the local clock reads `local_now`, once a sample came in.
    pub fn server_time(&self, local_now: f64) -> Option<f64> {
        self.offset.map(|offset| local_now + offset)
    }

    /// The server time shown when the local clock reads `local_now`: it runs smoothly, moving
    /// towards [`server_time`](Self::server_time) at most [`SLEW_RATE`] seconds per second (a
    /// gap above [`SLEW_SNAP`] closes at once). Call with non-decreasing `local_now`.
    pub fn smooth_server_time(&mut self, local_now: f64) -> Option<f64> {
        let target = self.offset?;
        let shown = match self.shown {
            Some((at, shown)) if (target - shown).abs() <= SLEW_SNAP => {
                let step = SLEW_RATE * (local_now - at).max(0.0);
                shown + (target - shown).clamp(-step, step)
            }
            _ => target,
        };
        self.shown = Some((local_now, shown));
        Some(local_now + shown)
    }

    /// Samples since the estimate last (re)started.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Forgets everything (on disconnect).
    pub fn reset(&mut self) {
        self.offset = None;
        self.shown = None;
        self.samples = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SplitMix64;

    #[test]
    fn exact_samples_give_exact_time() {
        let mut e = ServerClockEstimator::default();
        assert_eq!(e.server_time(1.0), None);
        // Server is 100 s ahead of the local clock; one-way 50 ms.
        for i in 0..10 {
            let local = 1.0 + f64::from(i) * 0.1;
            e.add_sample(local, local + 100.0 - 0.05, 0.05);
        }
        assert!((e.server_time(3.0).unwrap() - 103.0).abs() < 1e-9);
    }

    #[test]
    fn jittered_samples_average_out() {
        let mut e = ServerClockEstimator::default();
        let mut rng = SplitMix64::new(3);
        let mut worst: f64 = 0.0;
        for i in 0..600 {
            let send = f64::from(i) * 0.1; // server time at send; local clock = server − 7 s
            let delay = 0.05 + 0.02 * rng.next_normal();
            let arrive_local = send + delay - 7.0;
            e.add_sample(arrive_local, send, 0.05);
            if i > 50 {
                // The truth at the moment of arrival: the local clock plus 7 s.
                let err = e.server_time(arrive_local).unwrap() - (arrive_local + 7.0);
                worst = worst.max(err.abs());
            }
        }
        assert!(worst < 0.02, "estimate strays {worst} s with 20 ms jitter");
    }

    #[test]
    fn a_jump_restarts_the_estimate_and_garbage_is_ignored() {
        let mut e = ServerClockEstimator::default();
        e.add_sample(0.0, 10.0, 0.0);
        e.add_sample(0.1, 10.1, 0.0);
        e.add_sample(f64::NAN, 10.2, 0.0);
        assert_eq!(e.samples(), 2);
        e.add_sample(0.2, 50.0, 0.0);
        assert_eq!(e.samples(), 1);
        assert!((e.server_time(0.2).unwrap() - 50.0).abs() < 1e-9);
        e.reset();
        assert_eq!(e.server_time(0.3), None);
    }

    #[test]
    fn the_shown_clock_slews_and_snaps() {
        let mut e = ServerClockEstimator::new(1.0);
        e.add_sample(0.0, 100.0, 0.0);
        assert_eq!(e.smooth_server_time(0.0), Some(100.0));
        assert_eq!(e.smooth_server_time(0.9), Some(100.9));
        // The estimate moves 20 ms ahead: the shown clock follows at 5 %.
        e.add_sample(1.0, 101.02, 0.0);
        let t = e.smooth_server_time(1.0).unwrap();
        assert!((t - 101.005).abs() < 1e-9, "no jump: {t}");
        let t = e.smooth_server_time(1.2).unwrap();
        assert!((t - 101.215).abs() < 1e-9, "{t}");
        let t = e.smooth_server_time(2.0).unwrap();
        assert!((t - 102.02).abs() < 1e-9, "caught up: {t}");
        // A large jump (a hitch) is taken at once.
        e.add_sample(3.0, 103.4, 0.0);
        assert!((e.smooth_server_time(3.0).unwrap() - 103.4).abs() < 1e-9);
    }

    #[test]
    fn precise_after_hours() {
        let mut e = ServerClockEstimator::default();
        let hours = 10.0 * 3600.0;
        e.add_sample(hours, hours + 3.0, 0.04);
        let t = e.server_time(hours + 1.0 / 60.0).unwrap();
        assert!((t - (hours + 3.04 + 1.0 / 60.0)).abs() < 1e-9);
    }
}
