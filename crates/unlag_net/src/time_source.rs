//! Which clock lightyear reads: real time for games, a manual clock for the testbed.
//!
//! lightyear reads `lightyear_core::time::Instant::now()` for pings, RTT and packet timestamps.
//! Its `test_utils` feature swaps that for a process-wide mock clock that only moves when told
//! to, and Cargo unifies features across everything built together: a test binary or example
//! built beside the testbed gets the mock clock whether it wants it or not. A real-time binary
//! on a frozen clock would measure an RTT of zero.
//!
//! So `unlag` never relies on which clock was compiled in. With [`NetTimeSource::Real`] (the
//! default) the mock clock is set to real elapsed time at the start of every frame: if the mock
//! is compiled in, it follows real time; if not, setting it changes nothing. The testbed uses
//! [`NetTimeSource::Manual`] and moves the clock itself, through [`with_net_clock_at`], which
//! also serialises several testbeds (or a testbed and a real-time run) sharing one process.

use bevy::prelude::*;
use core::time::Duration;
use mock_instant::global::MockClock;
use std::sync::{Mutex, MutexGuard, OnceLock};

/// Where the clock lightyear reads comes from. A resource; set it before the first update.
#[derive(Resource, Copy, Clone, Debug, Default, PartialEq, Eq, Reflect)]
pub enum NetTimeSource {
    /// The clock follows real (monotonic) time. For games, examples and anything that talks to
    /// real sockets.
    #[default]
    Real,
    /// The clock is moved by whoever steps the App (the testbed), through
    /// [`with_net_clock_at`].
    Manual,
}

/// Real time since the first call in this process: the value the clock is set to in
/// [`NetTimeSource::Real`] mode.
pub fn real_elapsed() -> Duration {
    static START: OnceLock<std::time::Instant> = OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed()
}

fn clock_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    // A panic in another test while holding the lock leaves nothing half-written: the clock is a
    // single value. Carry on.
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs `f` with lightyear's clock set to `now`, holding a process-wide lock so that no other
/// caller moves the clock meanwhile.
///
/// Everything stepped inside `f` sees `Instant::now() == now` (when the mock clock is compiled
/// in). Each caller must keep its own `now` monotonic. Not re-entrant: do not call it from
/// inside `f`.
pub fn with_net_clock_at<R>(now: Duration, f: impl FnOnce() -> R) -> R {
    let _guard = clock_lock();
    MockClock::set_time(now);
    f()
}

/// Sets lightyear's clock to real elapsed time; runs in `First` in [`NetTimeSource::Real`] mode.
pub(crate) fn follow_real_time(source: Res<NetTimeSource>) {
    if *source == NetTimeSource::Real {
        MockClock::set_time(real_elapsed());
    }
}

/// Whether lightyear's `Instant` is the mock clock in this build (`lightyear_core/test_utils`
/// unified in by something built beside it). Real-time Apps are correct either way; this tells
/// which case a binary is in.
pub fn lightyear_clock_is_mocked() -> bool {
    let _guard = clock_lock();
    let before = MockClock::time();
    MockClock::set_time(Duration::from_secs(1_000_000));
    let a = lightyear::core::time::Instant::now();
    MockClock::set_time(Duration::from_secs(1_000_100));
    let b = lightyear::core::time::Instant::now();
    MockClock::set_time(before);
    b.duration_since(a) >= Duration::from_secs(100)
}
