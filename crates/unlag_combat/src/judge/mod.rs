//! The server's judgement of one shot, as a pipeline of named checks over one [`ShotContext`].
//! [`judge`] below is the whole order; each check lives with its kind:
//!
//! - `shape.rs`: well formed, the pellet count, the directions in the cone, the spread rolled;
//! - `timing.rs`: the view time against the server's estimate, the delay cap, the copy's age,
//!   the lead, the arrival lag against the view reports, and the drift over shots;
//! - `origin.rs`: where the shot started, near the shooter's body and in its sight;
//! - `hits.rs`: the claims on what the shooter drew, the rays through the rewound hit boxes,
//!   the tally per target, and the wall test when every claimed hit failed.
//!
//! Ammo, the fire index and the fire rate are the [`ServerArmory`]'s; `intake.rs` holds each
//! shot until its shooter's moves arrive and applies the verdict.

mod hits;
mod origin;
mod shape;
mod timing;

use crate::ammo::ServerArmory;
use crate::health::Health;
use crate::projectile::Projectile;
use crate::protocol::{FireRequest, Rejection};
use crate::settings::{CombatSettings, Weapons};
use crate::stats::CombatStats;
use crate::weapons::{WeaponKind, WeaponSpec, WeaponTable};
use bevy::ecs::system::SystemParam;
use bevy::prelude::*;
use unlag_net::{ClientAckLedger, NetClock, RemoteClientClock, RemoteClockAt, StatesSentTo};
use unlag_rewind::RewindQuery;
use unlag_smoothing::InterestSchedule;

/// One target's share of an accepted shot, as the server judged it.
#[derive(Clone, Debug, PartialEq)]
pub struct TargetHit {
    /// The server's character entity whose recorded hit boxes the pellets struck
    /// ([`RewindHit::character`](unlag_rewind::RewindHit::character)).
    pub target: Entity,
    /// Damage from the server's weapon table, all pellets together, hit points.
    pub damage: f32,
    /// Pellets that hit it.
    pub pellets: u8,
    /// The bone of its first hit box hit (a headshot's when there is one).
    pub bone: String,
    /// Whether a pellet hit the head.
    pub headshot: bool,
}

/// What the server made of an accepted shot.
#[derive(Clone, Debug)]
pub enum ShotVerdict {
    /// Rays judged at once: what they hit, per target, and where each pellet stopped
    /// (metres).
    Hits {
        /// Per target hit.
        hits: Vec<TargetHit>,
        /// Where each pellet stopped: at a hit, the world or the range.
        ends: Vec<Vec3>,
    },
    /// A projectile to launch (its flight is judged as it goes).
    Launch(Projectile),
}

/// When a shot arrived, and where its shooter's moves had taken it by then: what a shot held
/// for its shooter's moves is judged as of (see [`ShotJudge::judge_arrived`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Arrival {
    /// Server time the shot arrived, seconds.
    pub time: f64,
    /// Real time the shot arrived (`Time<Real>`, the clock the server's acknowledgement ledger
    /// reads), seconds.
    pub real: f64,
    /// The server's frame then, seconds.
    pub frame: f64,
    /// The shooter's link then: the shot's timing is checked against it.
    pub link: RemoteClockAt,
    /// Where the move the shot names ([`FireRequest::move_seq`]) left the shooter on the
    /// server, metres, once processed.
    pub moved_to: Option<Vec3>,
    /// Whether the copy came with a view report stamped as it is
    /// ([`RemoteClientClock::witnessed`]): it lags exactly as a report the view-time checks
    /// accepted, so it shows no lag beyond the reports' over shots (it is still held to
    /// their range).
    pub witnessed: bool,
}

/// Everything the server needs to judge a shot, as a read-only system parameter: the settings,
/// the weapon table, the clock, the frame, the rewind and the characters' health. The combat
/// plugin judges every [`FireRequest`] with it; a tool or benchmark can too.
#[derive(SystemParam)]
pub struct ShotJudge<'w, 's> {
    settings: Res<'w, CombatSettings>,
    weapons: Res<'w, Weapons>,
    clock: Res<'w, NetClock>,
    time: Res<'w, Time>,
    /// (A world built by hand, a benchmark's, may have no real clock: the judgement then
    /// finds no state its client surely had.)
    real: Option<Res<'w, Time<Real>>>,
    rewind: RewindQuery<'w, 's>,
    health: Query<'w, 's, &'static Health>,
    sent: SentToLinks<'w, 's>,
}

/// Per client link: what the server sent it and when the client acknowledged it.
pub(crate) type SentToLinks<'w, 's> = Query<
    'w,
    's,
    (
        &'static InterestSchedule,
        &'static StatesSentTo,
        &'static ClientAckLedger,
    ),
>;

impl ShotJudge<'_, '_> {
    /// Checks `request` from the client on `link` (whose clock figures are `remote`) for the
    /// character `shooter` at `position` with `armory`, spends its round and judges it: the
    /// verdict, or why it was refused (copies of a shot already judged come back as
    /// [`Rejection::Duplicate`]). Nothing is applied: damage is the caller's.
    ///
    /// What a refusal leaves behind: garbage (non-finite or oversized fields, an unknown
    /// weapon), copies and replays change nothing. A shot refused after that was still fired
    /// by its client: it uses up its fire index (its later copies are duplicates), owes its
    /// weapon's fire rate once it got through the gate (so refused shots cannot buy rewinds
    /// faster than the weapon fires), counts as evidence of its lateness when it came late,
    /// and finishes a reload its checked view time is past. It never spends a round, starts a
    /// reload or touches health.
    #[allow(clippy::too_many_arguments)]
    pub fn judge(
        &self,
        request: &FireRequest,
        shooter: Entity,
        link: Entity,
        remote: &RemoteClientClock,
        armory: &mut ServerArmory,
        position: Vec3,
        stats: &mut CombatStats,
    ) -> Result<ShotVerdict, Rejection> {
        let (time, frame) = (self.clock.server_time, self.time.delta_secs_f64());
        let mut link_then = remote.at(time, frame);
        // Judged at once, a rise in the link's trips cannot be seen to last: it counts for
        // nothing (the combat plugin holds such a shot until a trip after it shows).
        link_then.fresh_trip = None;
        let arrival = Arrival {
            time,
            real: self.real.as_ref().map_or(0.0, |r| r.elapsed_secs_f64()),
            frame,
            link: link_then,
            moved_to: None,
            witnessed: remote.witnessed(
                time,
                link_then.lag_of(time, request.sent_view_time, request.sent_delay),
            ),
        };
        self.judge_arrived(request, shooter, link, armory, position, arrival, stats)
    }

    /// [`ShotJudge::judge`] for a shot that arrived at `arrival` and was held until its
    /// shooter's moves caught up: its timing is checked as of its arrival (against the link
    /// as it was then), its origin also against where the move it names left the shooter.
    #[allow(clippy::too_many_arguments)]
    pub fn judge_arrived(
        &self,
        request: &FireRequest,
        shooter: Entity,
        link: Entity,
        armory: &mut ServerArmory,
        position: Vec3,
        arrival: Arrival,
        stats: &mut CombatStats,
    ) -> Result<ShotVerdict, Rejection> {
        let table = self
            .weapons
            .table
            .as_ref()
            .ok_or(Rejection::UnknownWeapon)?;
        shape::well_formed(request)?;
        let shot = ShotContext {
            request,
            spec: weapon(table, request)?,
            settings: &self.settings,
            arrival,
            present: self.clock.server_time,
            tick: self.clock.tick_duration,
            shooter,
            link,
            position,
            rewind: &self.rewind,
            health: &self.health,
            sent: &self.sent,
        };
        judge(&shot, armory, stats)
    }
}

/// Whether [`ShotJudge::judge_arrived`] would refuse `request` as a copy of a shot judged
/// already ([`Rejection::Duplicate`]) before reading anything about its arrival: well formed,
/// of a weapon of the server's `table`, its fire index among the `armory`'s recent ones.
pub(crate) fn copy_of_judged(
    table: Option<&WeaponTable>,
    request: &FireRequest,
    armory: &ServerArmory,
) -> bool {
    table.is_some_and(|table| {
        shape::well_formed(request).is_ok()
            && weapon(table, request).is_ok()
            && armory.is_copy(request.fire_index)
    })
}

/// The weapon a request names, from the server's own table.
fn weapon<'a>(table: &'a WeaponTable, request: &FireRequest) -> Result<&'a WeaponSpec, Rejection> {
    table.get(request.weapon).ok_or(Rejection::UnknownWeapon)
}

/// One shot under judgement: the request and everything the checks read about it (the weapon,
/// the settings, when it arrived, the shooter, the rewind). The checks are its methods, each
/// `Result<_, Rejection>`; none of them changes anything but the figures it is handed.
pub(crate) struct ShotContext<'a, 'w, 's> {
    /// The copy judged.
    request: &'a FireRequest,
    /// The weapon it names, from the server's table.
    spec: &'a WeaponSpec,
    settings: &'a CombatSettings,
    /// When it arrived, and the shooter's link then.
    arrival: Arrival,
    /// The server's time now, seconds (later than the arrival for a shot held for moves).
    present: f64,
    /// The server's tick, seconds.
    tick: f64,
    /// The shooting character.
    shooter: Entity,
    /// The shooter's client link.
    link: Entity,
    /// Where the shooter is now on the server, metres.
    position: Vec3,
    rewind: &'a RewindQuery<'w, 's>,
    health: &'a Query<'w, 's, &'static Health>,
    /// What the server sent each client link, and when the client acknowledged it.
    sent: &'a SentToLinks<'w, 's>,
}

impl ShotContext<'_, '_, '_> {
    /// Whether `character` is dead now on the server.
    fn dead(&self, character: Entity) -> bool {
        self.health.get(character).is_ok_and(|h| !h.alive())
    }

    /// Refuses a shot from a dead shooter ([`Rejection::ShooterDead`]: fired before its client
    /// heard of the death).
    fn shooter_alive(&self) -> Result<(), Rejection> {
        if self.dead(self.shooter) {
            return Err(Rejection::ShooterDead);
        }
        Ok(())
    }

    /// Launches the projectile a request fires (it claims nothing: it has not hit yet; its
    /// flight is judged as it goes).
    fn launch(&self) -> Result<Projectile, Rejection> {
        if !self.request.claims.is_empty() {
            return Err(Rejection::BadClaim);
        }
        let request = self.request;
        Projectile::launch(
            self.settings,
            self.spec,
            self.shooter,
            self.link,
            request.weapon,
            request.fire_index,
            request.origin,
            request.pellets(self.spec)[0],
            request.judged_time,
            self.arrival.link.rtt,
            self.present,
        )
        .ok_or(Rejection::UnknownWeapon)
    }
}

/// Judges one well-formed shot of a known weapon, in this order (the order is part of the
/// rules: see [`ShotJudge::judge`] for what a refusal leaves behind):
///
/// 1. the fire index (copies and replays change nothing); from here on the shot has used it;
/// 2. the shooter is alive;
/// 3. timing, shape and origin, at the shot's arrival; the shot's lag beyond the reports goes
///    into the drift window if they passed, or if it was refused for arriving late;
/// 4. the drift over shots;
/// 5. a reload the shot's view time is past is finished; then a round, then the fire rate
///    (whose gate moves its credit even when it refuses);
/// 6. a projectile is launched; rays have their claims checked, are traced through the
///    rewound hit boxes and tallied, and the round is spent.
fn judge(
    shot: &ShotContext,
    armory: &mut ServerArmory,
    stats: &mut CombatStats,
) -> Result<ShotVerdict, Rejection> {
    let request = shot.request;
    let previous = armory.take_fire_index(request.fire_index)?;
    shot.shooter_alive()?;
    let drift = shot.drift();
    let checked = shot
        .timing(stats)
        .and_then(|()| shot.shape())
        .and_then(|()| shot.origin());
    // The shots over which drift is judged: those that passed, and those refused for arriving
    // late (evidence of the same lateness: leaving them out would judge a backtracker only by
    // the shots its link's jitter happened to bring in early).
    if let Some(lag) = drift
        && (checked.is_ok() || checked == Err(Rejection::BadViewTime) && lag > 0.0)
    {
        armory.shot_lags.push(lag);
    }
    checked?;
    if drift.is_some() && armory.shot_lags.drifted() {
        return Err(Rejection::BadViewTime);
    }
    armory.finish_reload_by(request.weapon, shot.spec, request.view_time, previous)?;
    armory.has_round(request.weapon, request.view_time)?;
    armory.pass_fire_rate(request.view_time, f64::from(shot.spec.fire_interval))?;
    if matches!(shot.spec.kind, WeaponKind::Projectile { .. }) {
        let projectile = shot.launch()?;
        armory.spend_round(request.weapon);
        return Ok(ShotVerdict::Launch(projectile));
    }
    let claims = shot.claims(stats)?;
    let rays = request.rays(shot.spec);
    let answers = shot.trace(&rays, &claims)?;
    let (hits, ends, corpse_pellets) = shot.tally(&rays, &answers, &claims);
    if hits.is_empty() {
        shot.not_through_wall(&claims)?;
    }
    armory.spend_round(request.weapon);
    stats.corpse_pellets += corpse_pellets;
    Ok(ShotVerdict::Hits { hits, ends })
}
