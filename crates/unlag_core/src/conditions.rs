//! Simulated network conditions and their validation.

use core::time::Duration;
use serde::{Deserialize, Serialize};

/// Largest round-trip latency that may be simulated.
pub const MAX_LATENCY: Duration = Duration::from_millis(2000);
/// Largest jitter that may be simulated.
pub const MAX_JITTER: Duration = Duration::from_millis(500);
/// Longest mean burst of losses that may be simulated, packets.
pub const MAX_BURST: f32 = 100.0;
/// Lowest proxy update rate, in updates per second.
pub const MIN_UPDATE_RATE_HZ: f32 = 1.0;
/// Highest proxy update rate, in updates per second.
pub const MAX_UPDATE_RATE_HZ: f32 = 60.0;

/// Network conditions to simulate on every link: round-trip latency, jitter, loss, and the
/// default rate at which the server sends each simulated proxy's state.
///
/// The latency is the whole round trip: each direction gets half of it. Jitter and loss apply to
/// each direction independently.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkConditions {
    /// Round-trip latency added to every link (0–2000 ms), half in each direction.
    pub latency: Duration,
    /// How far each packet's delay varies from the one-way latency, either way, uniformly, per
    /// direction (0–500 ms; "±jitter" as netem and engine lag simulators mean it). The mean
    /// latency stays as configured: packets cannot arrive before they are sent, so the jitter in
    /// effect is capped at the one-way latency.
    pub jitter: Duration,
    /// Share of packets dropped in each direction, from 0.0 (none) to 1.0 (all).
    pub loss: f32,
    /// Default number of state updates per second the server sends for each simulated proxy
    /// (1–60 Hz).
    pub update_rate_hz: f32,
}

impl Default for LinkConditions {
    /// A perfect link with 20 proxy updates per second.
    fn default() -> Self {
        Self {
            latency: Duration::ZERO,
            jitter: Duration::ZERO,
            loss: 0.0,
            update_rate_hz: 20.0,
        }
    }
}

/// Why a set of [`LinkConditions`] was refused.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ConditionsError {
    /// `latency` is above 2000 ms.
    #[error("latency {0:?} is out of range (0 to 2000 ms)")]
    Latency(Duration),
    /// `jitter` is above 500 ms.
    #[error("jitter {0:?} is out of range (0 to 500 ms)")]
    Jitter(Duration),
    /// `loss` is not a finite number between 0 and 1.
    #[error("loss {0} is out of range (0.0 to 1.0, i.e. 0 to 100 %)")]
    Loss(f32),
    /// A mean loss burst that is not a finite number between 1 and 100 packets.
    #[error("loss burst {0} is out of range (1 to 100 packets)")]
    Burst(f32),
    /// `update_rate_hz` is not a finite number between 1 and 60.
    #[error("update_rate_hz {0} is out of range (1 to 60 Hz)")]
    UpdateRate(f32),
}

impl LinkConditions {
    /// Conditions with the given round-trip latency, jitter and loss, and the default update
    /// rate. Not validated: call [`LinkConditions::validate`].
    pub fn new(latency: Duration, jitter: Duration, loss: f32) -> Self {
        Self {
            latency,
            jitter,
            loss,
            ..Self::default()
        }
    }

    /// Checks every field against its allowed range.
    pub fn validate(&self) -> Result<(), ConditionsError> {
        if self.latency > MAX_LATENCY {
            return Err(ConditionsError::Latency(self.latency));
        }
        if self.jitter > MAX_JITTER {
            return Err(ConditionsError::Jitter(self.jitter));
        }
        if !(0.0..=1.0).contains(&self.loss) {
            return Err(ConditionsError::Loss(self.loss));
        }
        if !(MIN_UPDATE_RATE_HZ..=MAX_UPDATE_RATE_HZ).contains(&self.update_rate_hz) {
            return Err(ConditionsError::UpdateRate(self.update_rate_hz));
        }
        Ok(())
    }

    /// The latency added in one direction: half the round trip.
    pub fn one_way_latency(&self) -> Duration {
        self.latency / 2
    }

    /// The interval between two proxy updates, in seconds.
    pub fn update_interval_secs(&self) -> f64 {
        1.0 / f64::from(self.update_rate_hz)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid() {
        assert_eq!(LinkConditions::default().validate(), Ok(()));
    }

    #[test]
    fn bounds_are_inclusive() {
        let c = LinkConditions {
            latency: MAX_LATENCY,
            jitter: MAX_JITTER,
            loss: 1.0,
            update_rate_hz: 60.0,
        };
        assert_eq!(c.validate(), Ok(()));
        let c = LinkConditions {
            update_rate_hz: 1.0,
            ..c
        };
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn out_of_range_fields_are_named() {
        let ok = LinkConditions::default();
        let bad = LinkConditions {
            latency: Duration::from_millis(2001),
            ..ok
        };
        assert!(matches!(bad.validate(), Err(ConditionsError::Latency(_))));
        let bad = LinkConditions {
            jitter: Duration::from_millis(501),
            ..ok
        };
        assert!(matches!(bad.validate(), Err(ConditionsError::Jitter(_))));
        for loss in [-0.01, 1.01, f32::NAN, f32::INFINITY] {
            let bad = LinkConditions { loss, ..ok };
            assert!(
                matches!(bad.validate(), Err(ConditionsError::Loss(_))),
                "{loss}"
            );
        }
        for rate in [0.5, 61.0, f32::NAN] {
            let bad = LinkConditions {
                update_rate_hz: rate,
                ..ok
            };
            assert!(matches!(
                bad.validate(),
                Err(ConditionsError::UpdateRate(_))
            ));
        }
        assert!(
            LinkConditions { loss: 2.0, ..ok }
                .validate()
                .unwrap_err()
                .to_string()
                .contains("loss")
        );
    }

    #[test]
    fn one_way_is_half() {
        let c = LinkConditions::new(Duration::from_millis(150), Duration::ZERO, 0.0);
        assert_eq!(c.one_way_latency(), Duration::from_millis(75));
        assert!((c.update_interval_secs() - 0.05).abs() < 1e-12);
    }
}
