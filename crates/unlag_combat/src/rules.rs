//! The shot rules client and server share: the directions a shot's pellets take, and how far its
//! timing may stray from what the server expects. (How many copies and claims a request may
//! carry are wire limits, in `protocol.rs`.)

use bevy::prelude::*;
use unlag_core::{pellet_directions, spread_seed};
use unlag_net::RemoteClockAt;

use crate::settings::CombatSettings;
use crate::weapons::{WeaponKind, WeaponSpec};

/// The directions a shot of `spec` with this fire index and aim must carry: its pellets (or
/// its one spread ray) rolled from a seed client and server both derive from the fire index
/// alone, turned to the aim. The aim is not part of the seed: a client could otherwise try
/// aims a rounding error apart until one rolled the pattern it wanted. Skipping fire indices
/// instead costs fire rate ([`SharedFireGate`](unlag_core::SharedFireGate)), and no pattern is tighter than another
/// ([`pellet_directions`]).
pub fn shot_directions(spec: &WeaponSpec, fire_index: u32, aim: Vec3) -> Vec<Vec3> {
    let seed = spread_seed(0, fire_index);
    match spec.kind {
        WeaponKind::Hitscan { spread_degrees } if spread_degrees > 0.0 => {
            vec![pellet_directions(seed, aim, 2, spec.spread())[1]]
        }
        WeaponKind::Shotgun { pellets, .. } => {
            pellet_directions(seed, aim, usize::from(pellets), spec.spread())
        }
        _ => vec![aim.normalize_or_zero()],
    }
}

/// How far a shot's view time may be from the server's estimate of it, seconds: the fixed part,
/// the link's jitter (the request's arrival varies with it), two server frames of arrival
/// rounding, and two of the client's frames (a shot shows what was drawn the frame before it
/// left, and the client's frame delays its reading of the server's clock too). The tight bound
/// is the view-lag check after it.
///
/// `spread` is the span of the client's view-report lags the server measured (the tight
/// check's window, 0 when unknown): the link's jitter term is at least that, so this coarse
/// bound, centred on smoothed estimates, never refuses a shot the tight check finds in time.
/// (The measured jitter is a smoothed average: under a wide, flat spread of delays it reads a
/// quarter of the spread.)
pub(crate) fn view_time_tolerance(
    settings: &CombatSettings,
    (jitter, client_frame, spread): (f64, f64, f64),
    frame: f64,
) -> f64 {
    // Settings are validated, but a NaN or negative sum must still never cross a clamp's
    // bounds: it counts as no tolerance (strict, never open).
    unlag_core::finite_non_negative(
        settings.view_time_tolerance
            + (settings.view_time_jitter_factor * jitter).max(spread)
            + 2.0 * frame
            + 2.0 * client_frame,
    )
}

/// [`view_time_tolerance`] for a shot, from its link as the server knew it at its arrival
/// (with the span of the view reports' lags), seconds.
pub(crate) fn shot_tolerance(settings: &CombatSettings, link: &RemoteClockAt, frame: f64) -> f64 {
    view_time_tolerance(
        settings,
        (link.jitter, link.client_frame, link.lag_spread()),
        frame,
    )
}

/// Whether a packet that arrived `lag` seconds after the present it stamps lies outside the
/// (least, most) lags of its client's view reports: too old for how this client's packets
/// arrive, or stamped ahead of them by more than a frame or two of clock movement (which would
/// cut reloads and fire intervals short). The copies of a shot are sorted by it as they arrive,
/// and the copy judged is held to it.
pub(crate) fn outside_lag_range(
    settings: &CombatSettings,
    (least, most): (f64, f64),
    lag: f64,
) -> bool {
    lag > most + settings.view_lag_margin || lag < least - settings.view_lag_ahead_margin
}

/// Shots over which [`SHOT_LAG_DRIFT`] is judged: the last this many that passed the per-shot
/// checks or were refused for arriving late.
pub(crate) const SHOT_LAG_SHOTS: usize = 9;

/// Most the median of a client's last [`SHOT_LAG_SHOTS`] shots may lag beyond the median of its
/// view reports, seconds (0.04). Shot by shot, a copy stamped older than its view by less than
/// the up-link's spread cannot be told from one of the link's slow trips (at ±125 ms of jitter,
/// a 150-ms backtrack passes the lag range four times in ten); over shots it can: an honest
/// client's shots travel the link its reports travel and lag about as they do (the first copy
/// of three to arrive, a little less), a backtracking client's all lag by what it claims.
pub(crate) const SHOT_LAG_DRIFT: f64 = 0.04;

/// How much later than its view reports' median a client's last [`SHOT_LAG_SHOTS`] shots
/// arrived after the present they stamp, seconds, oldest first: the evidence the drift check
/// judges over shots ([`SHOT_LAG_DRIFT`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct ShotLags(std::collections::VecDeque<f64>);

impl ShotLags {
    /// Adds one shot's lag beyond the reports' median, seconds, forgetting the oldest beyond
    /// [`SHOT_LAG_SHOTS`].
    pub(crate) fn push(&mut self, lag: f64) {
        if self.0.len() == SHOT_LAG_SHOTS {
            self.0.pop_front();
        }
        self.0.push_back(lag);
    }

    /// Whether a full window's median lags the reports' by more than [`SHOT_LAG_DRIFT`].
    pub(crate) fn drifted(&self) -> bool {
        if self.0.len() < SHOT_LAG_SHOTS {
            return false;
        }
        let mut lags: Vec<f64> = self.0.iter().copied().collect();
        unlag_core::nth_smallest(&mut lags, SHOT_LAG_SHOTS / 2) > SHOT_LAG_DRIFT
    }
}
