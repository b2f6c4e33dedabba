//! The ping monitor and high-ping warning (seed 000).

use crate::clock::{NetClock, RemoteClientClock};
use bevy::prelude::*;
use unlag_core::{HighPingChange, HighPingMonitor, HighPingSettings};

/// On a client: the high-ping warning, updated every frame from [`NetClock`]'s RTT.
///
/// The ping is checked every `check_interval`; a check above `threshold` raises the warning,
/// which stays up for `display_time` after the last high check, then clears. A [`HighPing`]
/// event is triggered on each change.
#[derive(Resource, Clone, Debug)]
pub struct PingMonitor {
    monitor: HighPingMonitor,
    above_max_rewind_ping: bool,
}

impl PingMonitor {
    /// A monitor with these settings; the first check happens at the first synced frame.
    pub fn new(settings: HighPingSettings) -> Self {
        Self {
            monitor: HighPingMonitor::new(settings, 0.0),
            above_max_rewind_ping: false,
        }
    }

    /// The settings in use.
    pub fn settings(&self) -> &HighPingSettings {
        self.monitor.settings()
    }

    /// Sets the rewind cap, seconds (the combat plugin copies its own here).
    pub fn set_max_rewind_ping(&mut self, rtt: f64) {
        self.monitor.set_max_rewind_ping(rtt);
    }

    /// Whether the high-ping warning is up.
    pub fn is_high(&self) -> bool {
        self.monitor.is_high()
    }

    /// Whether the RTT is above the rewind cap ([`HighPingSettings::max_rewind_ping`]): the
    /// server rewinds this client's shots only as far as for a client at the cap, so the
    /// player must lead targets by the rest.
    pub fn above_max_rewind_ping(&self) -> bool {
        self.above_max_rewind_ping
    }
}

/// Triggered on a client when the high-ping warning goes up or down.
#[derive(Event, Copy, Clone, Debug, PartialEq)]
pub struct HighPing {
    /// `true` when the warning went up, `false` when it cleared.
    pub raised: bool,
    /// The round-trip time at that moment, seconds.
    pub rtt: f64,
}

pub(crate) fn update_ping_monitor(
    real: Res<Time<Real>>,
    clock: Res<NetClock>,
    mut monitor: ResMut<PingMonitor>,
    mut commands: Commands,
) {
    if !clock.synced {
        return;
    }
    let now = real.elapsed_secs_f64();
    let rtt = clock.rtt;
    let change = monitor.monitor.update(now, rtt);
    monitor.above_max_rewind_ping = monitor.monitor.above_max_rewind_ping(rtt);
    if let Some(change) = change {
        let raised = change == HighPingChange::Raised;
        if raised {
            warn!("high ping: {:.0} ms", rtt * 1000.0);
        }
        commands.trigger(HighPing { raised, rtt });
    }
}

impl RemoteClientClock {
    /// Whether this client's RTT is above `settings.max_rewind_ping`, beyond which the server
    /// rewinds no further for it.
    pub fn above_max_rewind_ping(&self, settings: &HighPingSettings) -> bool {
        self.rtt > settings.max_rewind_ping
    }
}
