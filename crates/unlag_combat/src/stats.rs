//! The server's combat counters and its optional log of accepted shots.

use bevy::platform::collections::HashMap;
use bevy::prelude::*;

use crate::protocol::{FireRequest, Rejection};

/// One accepted hitscan or shotgun shot, as the server judged it (see [`ShotLog`]).
#[derive(Clone, Debug)]
pub struct LoggedShot {
    /// The shooter's link.
    pub link: Entity,
    /// The server's character entity that fired (the one `link` controls).
    pub shooter: Entity,
    /// The request (claims mapped to the server's entities).
    pub request: FireRequest,
    /// The shooter's round trip when it was judged, seconds.
    pub rtt: f64,
    /// The server time it was judged at, seconds.
    pub server_time: f64,
}

/// When this resource exists on the server, every accepted hitscan and shotgun shot is appended
/// to it as it is judged, so a tool can judge the same shot other ways on the same history in
/// the same frame (the report's validation comparison). Drain it: it is never emptied here.
#[derive(Resource, Clone, Debug, Default)]
pub struct ShotLog {
    /// The shots, oldest first.
    pub shots: Vec<LoggedShot>,
}

/// Server counters of combat.
#[derive(Resource, Clone, Debug, Default, PartialEq)]
pub struct CombatStats {
    /// Shots accepted and judged.
    pub accepted: u64,
    /// Shots refused, by reason.
    pub rejected: HashMap<Rejection, u64>,
    /// Pellets confirmed on a target.
    pub pellet_hits: u64,
    /// Shots with a confirmed headshot.
    pub headshots: u64,
    /// Pellets that hit a target the shooter saw alive but that had died meanwhile (killed by
    /// a shot the shooter had not heard of yet): misses, not refusals.
    pub corpse_pellets: u64,
    /// Claims on a pose held on one state past its extrapolation (not at the moment drawn):
    /// what they show is older than the view, so they never count as hits.
    pub stale_claims: u64,
    /// Shots refused (`BadClaim`) for a claim judged earlier than the shot by more than the
    /// server compensates its target's delay ([`WireClaim::behind`](crate::WireClaim::behind)).
    pub claims_too_far_behind: u64,
    /// Claims taken judged earlier than their shot ([`WireClaim::behind`](crate::WireClaim::behind)
    /// above 0): on proxies the client drew with a longer delay than the shot's (slower ones).
    pub claims_behind: u64,
    /// Claims whose offset from the curve no starved frames explain, judged on the curve
    /// instead ([`RewindQuery::ease_explained`](unlag_rewind::RewindQuery::ease_explained)):
    /// a magnet pulling a hit box onto the ray, or a mode switch the server did not see.
    pub unexplained_eases: u64,
    /// Claims on a target the server no longer has (it left, or was despawned, while the shot
    /// was on its way): judged as a miss on it, the shot judged without it.
    pub gone_targets: u64,
    /// Shots that arrived after their shooter died ([`Rejection::ShooterDead`]): answered, not
    /// counted as refusals.
    pub posthumous: u64,
    /// Shots fired from where the game had just moved their shooter away from
    /// ([`Rejection::ShooterMoved`]): answered, not counted as refusals.
    pub fired_before_moved: u64,
    /// Shots that arrived before their client's frame time was known (its first moments after
    /// joining) and waited for it, to be judged with it.
    pub waited_for_frame: u64,
    /// Copies of shots already judged, dropped (each shot is sent several times).
    pub duplicates: u64,
    /// Shots judged against current poses because rewinding was off
    /// ([`CombatSettings::rewind`](crate::CombatSettings::rewind)).
    pub unrewound: u64,
    /// Shots rewound only part of the way, their shooter's ping being above the cap or its
    /// interpolation delay longer than the server compensates ([`CombatSettings::shot_lead`](crate::CombatSettings::shot_lead)).
    pub partly_rewound: u64,
    /// Projectiles launched.
    pub projectiles: u64,
    /// Projectile sweeps the rewind could not run (a query error), counted and logged at
    /// powers of two.
    pub projectile_sweep_errors: u64,
    /// The latest shots' copies' view time as they left (`sent_view_time`) less the server's
    /// estimate of it, seconds (the last 256): what backtrack protection measures.
    pub view_time_errors: std::collections::VecDeque<f64>,
    /// The latest shots' arrival lag after the view time their copy stamps, less the most the
    /// client's view reports showed, seconds (the last 256): backtrack protection's margin in
    /// use (honest shots stay at or below zero, plus a frame).
    pub view_lag_excess: std::collections::VecDeque<f64>,
    /// Wall-clock time the server spent checking and judging each of the latest shots
    /// (rewind included), microseconds (the last 256): a measure for reports, not a limit.
    pub judge_micros: std::collections::VecDeque<f64>,
}

impl CombatStats {
    /// All refusals.
    pub fn rejected_total(&self) -> u64 {
        self.rejected.values().sum()
    }
}

/// How many of the latest shots [`CombatStats`]' figures per shot keep.
pub(crate) const SHOT_FIGURES: usize = 256;

/// Adds `value` to one of [`CombatStats`]' figures per shot, forgetting the oldest beyond
/// [`SHOT_FIGURES`].
pub(crate) fn keep_latest(figures: &mut std::collections::VecDeque<f64>, value: f64) {
    figures.push_back(value);
    if figures.len() > SHOT_FIGURES {
        figures.pop_front();
    }
}
