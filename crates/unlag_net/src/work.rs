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

/// Fewest items worth spreading over threads: below it the hand-over costs more than it saves.
pub const MIN_ITEMS_TO_SHARE: usize = 32;

/// The most shares a server's per-client work goes in (a resource; without it, one a core:
/// [`for_each_in_shares`]). `WorkShares(1)` runs every item on the system's own thread, in
/// order, as a one-core machine does: a match plays the same to the bit either way (what a
/// test compares).
#[derive(Resource, Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkShares(pub usize);

/// The machine's cores, asked once per process: std asks the kernel (and reads the cgroup's
/// CPU quota files) on every call, which at 64 players cost 2.6 % of the server's update
/// (several calls a tick).
fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(bevy::tasks::available_parallelism)
}

/// Runs `f` on every item of `items`, each with the accumulator of its share, and returns the
/// accumulators in the order of the shares (one item after another, `items` cut into
/// contiguous shares). With two cores or more and at least [`MIN_ITEMS_TO_SHARE`] items there
/// is a share per core, run as tasks on Bevy's compute task pool (at once when the pool has as
/// many threads: a server gives it every core, `unlag_testbed::server_task_pools`); otherwise
/// there is one share, run on this thread.
///
/// For per-client work that is independent (each item touches only itself and what every item
/// only reads): the items end the same whichever thread ran them, and accumulators merged in
/// the returned order give the same totals, so a multi-threaded server's results are
/// bit-identical to a single-threaded one's.
pub fn for_each_in_shares<T: Send, A: Default + Send + 'static>(
    items: &mut [T],
    f: impl Fn(&mut T, &mut A) + Sync,
) -> Vec<A> {
    for_each_in_shares_at_most(None, items, f)
}

/// [`for_each_in_shares`] in at most `limit`'s shares (`None`: no more than it would).
pub fn for_each_in_shares_at_most<T: Send, A: Default + Send + 'static>(
    limit: Option<WorkShares>,
    items: &mut [T],
    f: impl Fn(&mut T, &mut A) + Sync,
) -> Vec<A> {
    // By the cores, not the pool's threads: Bevy's default pools leave a 2-core machine one
    // compute thread, and the shares cost little more on one thread than the items alone.
    let threads = cores().min(limit.map_or(usize::MAX, |l| l.0.max(1)));
    let shares =
        if items.len() < MIN_ITEMS_TO_SHARE || bevy::tasks::ComputeTaskPool::try_get().is_none() {
            1
        } else {
            threads.min(items.len())
        };
    if shares <= 1 {
        let mut acc = A::default();
        for item in items.iter_mut() {
            f(item, &mut acc);
        }
        return vec![acc];
    }
    let per_share = items.len().div_ceil(shares);
    let f = &f;
    // Spawned straight from the scope's closure, so the results come back in spawn order.
    bevy::tasks::ComputeTaskPool::get().scope(|scope| {
        for share in items.chunks_mut(per_share) {
            scope.spawn(async move {
                let mut acc = A::default();
                for item in share {
                    f(item, &mut acc);
                }
                acc
            });
        }
    })
}
