//! The interpolation delay: how far behind the newest receivable server state a client renders
//! simulated proxies.
//!
//! Definitions (seconds, on the server's clock):
//!
//! - *server time*: the client's estimate of the server's current time;
//! - *one-way trip*: half the round-trip time; the newest state a client can have received was
//!   sent at `server_time − one_way`, and no client can do better than that;
//! - *interpolation delay*: how far the view time sits behind that newest receivable state;
//! - *view time* = `server_time − one_way − interpolation_delay`: the server time at which
//!   proxies are rendered, and the time every shot is judged at.
//!
//! Every millisecond of interpolation delay is a millisecond of peeker's advantage for the other
//! side, so the target is the least that keeps a state newer than the view time in hand: one
//! update interval (states are sent that far apart), plus what bridges a lost update when the
//! link loses packets (one more interval, or for slow proxies, whose states are sent twice, the
//! time to the repeat: [`repeat_after`]), plus a margin for late packets.

use serde::{Deserialize, Serialize};

/// Proxies whose states are sent this far apart or further (seconds: 10 Hz and slower) get
/// each state sent twice ([`repeat_after`]).
pub const REPEAT_MIN_INTERVAL: f64 = 0.1;

/// A repeated state's second copy follows the first by this share of the send interval.
pub const REPEAT_SHARE: f64 = 0.25;

/// How long after a state the server sends it again, seconds, for a proxy sent every
/// `send_interval` seconds: a quarter interval at [`REPEAT_MIN_INTERVAL`] and slower, else
/// never (`None`). A lost state of a slow proxy would otherwise leave a gap of two intervals,
/// which the delay must cover (2 s at 1 Hz): with the repeat, a quarter interval more than the
/// one a state is late anyway. Faster proxies bridge a loss with one more short interval.
pub fn repeat_after(send_interval: f64) -> Option<f64> {
    (send_interval.is_finite() && send_interval >= REPEAT_MIN_INTERVAL)
        .then_some(REPEAT_SHARE * send_interval)
}

/// How the target interpolation delay is chosen and how fast the delay in effect may follow it.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DelayPolicy {
    /// Jitter margin, in multiples of the measured jitter (default 2), used until lateness has
    /// been measured (see [`DelayPolicy::target_with_margin`]).
    pub jitter_multiplier: f64,
    /// Packet loss (0–1) above which one extra update interval is kept to bridge a lost update
    /// (default 0.005).
    pub bridge_loss_threshold: f64,
    /// Smallest delay, seconds (default 0).
    pub min_delay: f64,
    /// Largest delay, seconds (default 2.5: a 1 Hz proxy bridging one lost update).
    pub max_delay: f64,
    /// How fast the delay in effect may grow towards its target, in seconds per second: view
    /// time then runs this much slower than real time (default 0.1).
    pub max_increase_rate: f64,
    /// How fast the delay in effect may shrink towards its target, in seconds per second: view
    /// time then runs this much faster than real time (default 0.05).
    pub max_decrease_rate: f64,
}

impl Default for DelayPolicy {
    fn default() -> Self {
        Self {
            jitter_multiplier: 2.0,
            bridge_loss_threshold: 0.005,
            min_delay: 0.0,
            max_delay: 2.5,
            max_increase_rate: 0.1,
            max_decrease_rate: 0.05,
        }
    }
}

impl DelayPolicy {
    /// The target interpolation delay, seconds, for states sent every `send_interval` seconds
    /// over a link with `jitter` seconds of jitter and `loss` (0–1) packet loss. Non-finite or
    /// negative inputs count as zero.
    pub fn target(&self, send_interval: f64, jitter: f64, loss: f64) -> f64 {
        let clean = |x: f64| if x.is_finite() && x > 0.0 { x } else { 0.0 };
        let (send_interval, jitter, loss) = (clean(send_interval), clean(jitter), clean(loss));
        (send_interval + self.bridge(send_interval, loss) + self.jitter_multiplier * jitter)
            .clamp(self.min_delay, self.max_delay.max(self.min_delay))
    }

    /// What bridges a lost state, seconds: nothing on a clean link; else the state's repeat
    /// ([`repeat_after`]) or, for proxies sent too often to be repeated, the next state.
    fn bridge(&self, send_interval: f64, loss: f64) -> f64 {
        if loss > self.bridge_loss_threshold {
            repeat_after(send_interval).unwrap_or(send_interval)
        } else {
            0.0
        }
    }
}

impl DelayPolicy {
    /// The target interpolation delay, seconds, for states sent every `send_interval` seconds
    /// that arrive up to `margin` seconds later than expected (e.g. the 99th percentile of
    /// measured lateness), over a link losing `loss` (0–1) of its packets.
    pub fn target_with_margin(&self, send_interval: f64, margin: f64, loss: f64) -> f64 {
        let clean = |x: f64| if x.is_finite() && x > 0.0 { x } else { 0.0 };
        let send_interval = clean(send_interval);
        (send_interval + self.bridge(send_interval, clean(loss)) + clean(margin))
            .clamp(self.min_delay, self.max_delay.max(self.min_delay))
    }
}

/// The interpolation delay in effect, moved smoothly towards its target so that view time never
/// jumps: it only runs a little slower or faster than real time while the delay changes.
#[derive(Clone, Debug)]
pub struct DelayController {
    policy: DelayPolicy,
    current: f64,
    target: f64,
}

impl DelayController {
    /// A controller that starts at (and targets) `initial` seconds.
    pub fn new(policy: DelayPolicy, initial: f64) -> Self {
        let initial = initial.clamp(policy.min_delay, policy.max_delay.max(policy.min_delay));
        Self {
            policy,
            current: initial,
            target: initial,
        }
    }

    /// The policy in use.
    pub fn policy(&self) -> &DelayPolicy {
        &self.policy
    }

    /// The delay in effect, seconds.
    pub fn current(&self) -> f64 {
        self.current
    }

    /// The delay being moved towards, seconds.
    pub fn target(&self) -> f64 {
        self.target
    }

    /// Sets the target directly, seconds (clamped to the policy's bounds).
    pub fn set_target(&mut self, target: f64) {
        if target.is_finite() {
            self.target = target.clamp(
                self.policy.min_delay,
                self.policy.max_delay.max(self.policy.min_delay),
            );
        }
    }

    /// Sets the target from the link's measured figures (see [`DelayPolicy::target`]).
    pub fn set_inputs(&mut self, send_interval: f64, jitter: f64, loss: f64) {
        self.target = self.policy.target(send_interval, jitter, loss);
    }

    /// Jumps straight to the target (e.g. on the first state received, when nothing is shown
    /// yet and nothing can jump).
    pub fn snap_to_target(&mut self) {
        self.current = self.target;
    }

    /// Advances by `dt` seconds of real time and returns the delay in effect.
    pub fn update(&mut self, dt: f64) -> f64 {
        if !(dt.is_finite() && dt > 0.0) {
            return self.current;
        }
        let gap = self.target - self.current;
        let step = if gap > 0.0 {
            gap.min(self.policy.max_increase_rate * dt)
        } else {
            gap.max(-self.policy.max_decrease_rate * dt)
        };
        self.current += step;
        self.current
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_is_one_interval_plus_jitter_margin_without_loss() {
        let p = DelayPolicy::default();
        assert!((p.target(0.05, 0.0, 0.0) - 0.05).abs() < 1e-12);
        assert!((p.target(0.05, 0.01, 0.0) - 0.07).abs() < 1e-12);
    }

    #[test]
    fn measured_margin_replaces_the_jitter_estimate() {
        let p = DelayPolicy::default();
        assert!((p.target_with_margin(1.0 / 60.0, 0.01, 0.05) - (2.0 / 60.0 + 0.01)).abs() < 1e-12);
        assert!((p.target_with_margin(0.05, -1.0, 0.0) - 0.05).abs() < 1e-12);
        // Slow proxies' states are repeated a quarter interval later: that bridges a loss.
        assert!((p.target_with_margin(1.0, 0.01, 0.05) - 1.26).abs() < 1e-12);
        assert!((p.target(0.1, 0.0, 0.05) - 0.125).abs() < 1e-12);
        assert_eq!(repeat_after(0.05), None);
        assert_eq!(repeat_after(f64::NAN), None);
        let mut c = DelayController::new(p, 0.05);
        c.set_target(9.0);
        assert_eq!(c.target(), 2.5);
    }

    #[test]
    fn loss_adds_one_interval_to_bridge_a_lost_update() {
        let p = DelayPolicy::default();
        assert!((p.target(0.05, 0.0, 0.03) - 0.10).abs() < 1e-12);
        assert!((p.target(0.05, 0.0, 0.004) - 0.05).abs() < 1e-12);
    }

    #[test]
    fn target_is_clamped_and_ignores_garbage() {
        let p = DelayPolicy::default();
        assert_eq!(p.target(2.0, 0.0, 0.5), 2.5);
        assert_eq!(p.target(f64::NAN, -1.0, f64::INFINITY), 0.0);
    }

    #[test]
    fn controller_moves_at_bounded_rate() {
        let mut c = DelayController::new(DelayPolicy::default(), 0.05);
        c.set_inputs(0.05, 0.0, 0.1); // target 0.10
        let mut t = 0.0;
        let mut last = c.current();
        while t < 0.2 {
            let now = c.update(0.01);
            assert!(now - last <= 0.1 * 0.01 + 1e-12);
            last = now;
            t += 0.01;
        }
        assert!((c.current() - 0.07).abs() < 1e-9);
        for _ in 0..100 {
            c.update(0.01);
        }
        assert!(
            (c.current() - 0.10).abs() < 1e-12,
            "reaches the target and stays"
        );
        c.set_inputs(0.05, 0.0, 0.0); // back to 0.05, shrinking at 0.05 s/s
        c.update(0.2);
        assert!((c.current() - 0.09).abs() < 1e-9);
        c.snap_to_target();
        assert!((c.current() - 0.05).abs() < 1e-12);
    }
}
