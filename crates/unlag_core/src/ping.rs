//! The high-ping warning of seed 000, as a pure state machine.

use crate::settings::{Fields, SettingsError, Validate};
use serde::{Deserialize, Serialize};

/// Settings of the high-ping warning.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HighPingSettings {
    /// Seconds between two checks of the ping (default 5 s).
    pub check_interval: f64,
    /// Round-trip time above which the warning is raised, in seconds (default 0.150 s).
    pub threshold: f64,
    /// Seconds the warning stays up after the last check that found the ping high (default 5 s).
    pub display_time: f64,
    /// Round-trip time beyond which the server rewinds this client's shots no further (it
    /// rewinds them as for a client at the cap), in seconds (default 0.4 s, the combat plugin's
    /// `CombatSettings::max_rewind_ping`, which that plugin copies here). Unreal Tournament
    /// stops at its `MaxPredictionPing` (0.16 s); rewinding with exact reconstruction still
    /// agrees with the shooter at 250 ms, so the default cap is higher.
    pub max_rewind_ping: f64,
}

impl Default for HighPingSettings {
    fn default() -> Self {
        Self {
            check_interval: 5.0,
            threshold: 0.150,
            display_time: 5.0,
            max_rewind_ping: 0.4,
        }
    }
}

impl Validate for HighPingSettings {
    fn validate(&self) -> Result<(), SettingsError> {
        let f = Fields::new("HighPingSettings");
        f.above("check_interval", self.check_interval, 0.0, 3600.0, "s")?;
        f.within("threshold", self.threshold, 0.0, 10.0, "s")?;
        f.within("display_time", self.display_time, 0.0, 3600.0, "s")?;
        f.within("max_rewind_ping", self.max_rewind_ping, 0.0, 10.0, "s")
    }
}

/// What a [`HighPingMonitor::update`] call changed.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum HighPingChange {
    /// The warning went up (it was down).
    Raised,
    /// The warning went down after its display time.
    Cleared,
}

/// Checks the ping every `check_interval`; a check above `threshold` raises the warning (or keeps
/// it up), and the warning clears `display_time` after the last check that found the ping high.
#[derive(Clone, Debug)]
pub struct HighPingMonitor {
    settings: HighPingSettings,
    next_check: f64,
    raised_at: Option<f64>,
}

impl HighPingMonitor {
    /// A monitor whose first check happens at time `now` (seconds).
    pub fn new(settings: HighPingSettings, now: f64) -> Self {
        Self {
            settings,
            next_check: now,
            raised_at: None,
        }
    }

    /// The settings in use.
    pub fn settings(&self) -> &HighPingSettings {
        &self.settings
    }

    /// Replaces the settings; the next check happens at the next update.
    pub fn set_settings(&mut self, settings: HighPingSettings, now: f64) {
        self.settings = settings;
        self.next_check = now;
    }

    /// Whether the warning is up.
    pub fn is_high(&self) -> bool {
        self.raised_at.is_some()
    }

    /// Advances the monitor to time `now` (seconds) with the current round-trip time `rtt`
    /// (seconds) and returns what changed.
    pub fn update(&mut self, now: f64, rtt: f64) -> Option<HighPingChange> {
        let mut change = None;
        if let Some(raised_at) = self.raised_at
            && now - raised_at >= self.settings.display_time
        {
            self.raised_at = None;
            change = Some(HighPingChange::Cleared);
        }
        if now >= self.next_check {
            self.next_check = now + self.settings.check_interval;
            if rtt > self.settings.threshold {
                let was_high = self.raised_at.is_some();
                self.raised_at = Some(now);
                change = match (was_high, change) {
                    (false, Some(HighPingChange::Cleared)) => None,
                    (false, _) => Some(HighPingChange::Raised),
                    (true, c) => c,
                };
            }
        }
        change
    }

    /// Whether `rtt` (seconds) is above the rewind cap, beyond which the server rewinds shots
    /// no further.
    pub fn above_max_rewind_ping(&self, rtt: f64) -> bool {
        rtt > self.settings.max_rewind_ping
    }

    /// Sets the rewind cap, seconds (see [`HighPingSettings::max_rewind_ping`]).
    pub fn set_max_rewind_ping(&mut self, rtt: f64) {
        self.settings.max_rewind_ping = rtt;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Updates every 0.1 s from `from` up to `to` (exclusive); times are exact tenths.
    fn run(m: &mut HighPingMonitor, from: f64, to: f64, rtt: f64) -> Vec<(f64, HighPingChange)> {
        let (from, to) = ((from * 10.0).round() as i64, (to * 10.0).round() as i64);
        (from..to)
            .filter_map(|i| {
                let t = i as f64 / 10.0;
                m.update(t, rtt).map(|c| (t, c))
            })
            .collect()
    }

    #[test]
    fn raised_at_a_check_and_cleared_after_display_time() {
        let mut m = HighPingMonitor::new(HighPingSettings::default(), 0.0);
        assert!(run(&mut m, 0.0, 4.0, 0.05).is_empty());
        // Ping rises at t=4; the next check is at t=5.
        let changes = run(&mut m, 4.0, 8.0, 0.3);
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].0, 5.0);
        assert_eq!(changes[0].1, HighPingChange::Raised);
        assert!(m.is_high());
        // Ping drops at t=8: the t=10 check finds it low, the warning clears at 5 + 5 = 10.
        let changes = run(&mut m, 8.0, 20.0, 0.05);
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].1, HighPingChange::Cleared);
        assert_eq!(changes[0].0, 10.0);
        assert!(!m.is_high());
    }

    #[test]
    fn stays_up_while_ping_stays_high() {
        let mut m = HighPingMonitor::new(HighPingSettings::default(), 0.0);
        let changes = run(&mut m, 0.0, 60.0, 0.3);
        assert_eq!(changes, vec![(0.0, HighPingChange::Raised)]);
        assert!(m.is_high());
    }

    #[test]
    fn threshold_is_exclusive_and_the_rewind_cap_is_separate() {
        let mut m = HighPingMonitor::new(HighPingSettings::default(), 0.0);
        assert_eq!(m.update(0.0, 0.150), None);
        assert!(!m.above_max_rewind_ping(0.35));
        assert!(m.above_max_rewind_ping(0.401));
        m.set_max_rewind_ping(0.16);
        assert!(m.above_max_rewind_ping(0.161));
    }
}
