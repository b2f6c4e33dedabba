//! Real-time sessions run alone in a process: while a [`UdpSession`](crate::UdpSession) lives,
//! no simulated [`Testbed`](crate::Testbed) starts, and it waits for running ones to finish.
//! A test binary runs its tests on parallel threads; simulations at full speed on every core
//! would otherwise delay the real-time session's frames and skew what it measures in real time
//! (its round-trip times). Simulated testbeds run side by side as before.

use std::sync::{Condvar, Mutex};

#[derive(Default)]
struct State {
    simulations: usize,
    real_time: bool,
}

static STATE: Mutex<State> = Mutex::new(State {
    simulations: 0,
    real_time: false,
});
static CHANGED: Condvar = Condvar::new();

fn lock() -> std::sync::MutexGuard<'static, State> {
    // A test that panicked while holding the lock leaves the counts as they were: still valid.
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Held by a simulated testbed: shares the process with other simulations.
#[derive(Debug)]
pub(crate) struct SimulationTurn(());

impl SimulationTurn {
    /// Waits until no real-time session runs, then counts this simulation in.
    pub(crate) fn take() -> Self {
        let mut state = lock();
        while state.real_time {
            state = CHANGED.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        state.simulations += 1;
        Self(())
    }
}

impl Drop for SimulationTurn {
    fn drop(&mut self) {
        lock().simulations -= 1;
        CHANGED.notify_all();
    }
}

/// Held by a real-time session (a [`UdpSession`](crate::UdpSession), or a test stepping its
/// own real-time Apps): has the process to itself.
#[derive(Debug)]
pub struct RealTimeTurn(());

impl RealTimeTurn {
    /// Waits for running simulations to end and for any other real-time session, then keeps
    /// new simulations from starting until dropped.
    pub fn take() -> Self {
        let mut state = lock();
        while state.real_time {
            state = CHANGED.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        state.real_time = true;
        while state.simulations > 0 {
            state = CHANGED.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        Self(())
    }
}

impl Drop for RealTimeTurn {
    fn drop(&mut self) {
        lock().real_time = false;
        CHANGED.notify_all();
    }
}
