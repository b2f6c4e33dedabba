//! [`ServerWork`]: how much wall-clock time the plugins' server systems have spent, by part.

use bevy::prelude::*;
use core::sync::atomic::{AtomicU64, Ordering};
use core::time::Duration;
use std::time::Instant;

/// A part of the server's work that [`ServerWork`] times.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WorkPart {
    /// Movement validation: taking in moves, simulating them, acknowledging or correcting.
    Movement,
    /// Recording every character's hit boxes into its history.
    Recording,
    /// Reloads, judging shots (checks and rewinds) and flying projectiles.
    Shots,
    /// Sampling the proxies, deciding which each client is interested in (sight tests
    /// included) and building the state updates due to each client.
    ProxyStates,
}

impl WorkPart {
    /// Every part, in order.
    pub const ALL: [WorkPart; 4] = [
        WorkPart::Movement,
        WorkPart::Recording,
        WorkPart::Shots,
        WorkPart::ProxyStates,
    ];
}

/// On the server: wall-clock time the plugins' server systems have spent since the App
/// started, by [`WorkPart`] (this machine, this build). Totals only grow; take the difference
/// between two reads for a tick or a second. The counters are atomic, so every system reads the
/// resource shared and none waits on another for it.
#[derive(Resource, Debug, Default)]
pub struct ServerWork {
    nanos: [AtomicU64; 4],
}

impl ServerWork {
    /// The time spent in `part` so far.
    pub fn total(&self, part: WorkPart) -> Duration {
        Duration::from_nanos(self.nanos[part as usize].load(Ordering::Relaxed))
    }

    /// Adds the time since `started` to `part`.
    pub fn add_since(&self, part: WorkPart, started: Instant) {
        let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.nanos[part as usize].fetch_add(nanos, Ordering::Relaxed);
    }

    /// Starts timing `part`: the time until the returned guard is dropped is added to it.
    pub fn time(&self, part: WorkPart) -> WorkTimer<'_> {
        WorkTimer {
            work: self,
            part,
            started: Instant::now(),
        }
    }
}

/// Adds the time from its creation to its drop to a [`ServerWork`] part (see
/// [`ServerWork::time`]).
#[must_use = "the time is counted when the timer is dropped"]
pub struct WorkTimer<'a> {
    work: &'a ServerWork,
    part: WorkPart,
    started: Instant,
}

impl Drop for WorkTimer<'_> {
    fn drop(&mut self) {
        self.work.add_since(self.part, self.started);
    }
}
