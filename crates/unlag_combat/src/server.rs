//! The server side: judge shots, apply damage from the server's own weapon table, reload.

use crate::health::{Damaged, Health, Killed, deal_damage};
use crate::projectile::Projectile;
use crate::protocol::{
    COSMETIC_BATCH, ConfirmedHit, CosmeticFire, CosmeticFires, FireRequest, FireResult, Rejection,
    ReloadDone, ReloadRequest,
};
use crate::rules::{outside_lag_range, shot_directions, shot_tolerance, view_time_tolerance};
use crate::settings::{CombatSettings, Weapons};
use crate::stats::{CombatStats, LoggedShot, ShotLog};
use crate::weapons::{WeaponKind, WeaponSpec};
use bevy::ecs::system::SystemParam;
use bevy::platform::collections::HashMap;
use bevy::prelude::*;
use lightyear::prelude::server::ClientOf;
use lightyear::prelude::*;
use unlag_core::{Seq16, SharedFireGate, within_cone};
use unlag_net::{
    Authority, LinkTraffic, NetClock, ReliableChannel, RemoteClientClock, RemoteClockAt,
    UnreliableChannel,
};
use unlag_rewind::{ClaimedView, RewindError, RewindQuery};

/// Longest a shot waits beyond [`CombatSettings::max_shot_hold`] for the move of its shooter it
/// names, seconds: the move may wait to be played out (the playout's wait, and its catch-up
/// after a stall), or have been lost with the burst that the shot's copy outlived (the client
/// sends it again once the server reports it missing, a round trip and a little later).
const PLAYOUT_HOLD: f64 = 1.0;

/// Per weapon on the server: rounds, reload, fire rate.
#[derive(Clone, Debug)]
struct ServerWeapon {
    ammo: u32,
    /// The client's view times at which its reload started and ends, seconds.
    reloading: Option<(f64, f64)>,
    /// The view time of the latest reload request taken, seconds: copies and resends of it
    /// (the same view time) are ignored.
    last_reload_request: f64,
}

/// The server's record of a character's weapons: the only ammo that counts.
#[derive(Component, Clone, Debug)]
pub struct ServerArmory {
    weapons: Vec<ServerWeapon>,
    /// One fire rate over every weapon: a shot owes its weapon's interval before the next
    /// shot of any weapon (one weapon in hand at a time), and skipped fire indices owe the
    /// shortest interval each.
    gate: SharedFireGate,
    /// The shortest fire interval of any weapon, seconds: what a skipped fire index owes.
    shortest_interval: f64,
    /// Fire indices skipped since the last shot the gate let through (shots that never
    /// arrived: lost, or never sent): each owes fire rate at the next shot through it.
    skipped: u32,
    last_fire_index: u32,
    /// Reloads finished and not yet announced: (weapon, fire index of the shot before).
    reloaded: Vec<(u8, u32)>,
    /// How much later than the view reports' median the last shots arrived after the present
    /// they stamp, seconds (at most [`SHOT_LAG_SHOTS`]): see [`SHOT_LAG_DRIFT`].
    shot_lags: std::collections::VecDeque<f64>,
}

impl ServerArmory {
    /// Full magazines of every weapon in `table`, no shot taken; `allowance` is the fire-rate
    /// slack ([`CombatSettings::fire_interval_allowance`], seconds).
    pub fn new(table: &[WeaponSpec], allowance: f64) -> Self {
        Self {
            weapons: table
                .iter()
                .map(|w| ServerWeapon {
                    ammo: w.magazine,
                    reloading: None,
                    last_reload_request: f64::NEG_INFINITY,
                })
                .collect(),
            gate: SharedFireGate::new(allowance),
            shortest_interval: shortest_interval(table),
            skipped: 0,
            last_fire_index: 0,
            reloaded: Vec::new(),
            shot_lags: std::collections::VecDeque::new(),
        }
    }

    /// Fits the armory to a weapon table that replaced the one it was made for (the game may
    /// swap tables at run time): weapons the table added start with a full magazine, weapons
    /// it dropped are forgotten, and no weapon holds more than its new magazine.
    pub(crate) fn fit(&mut self, table: &[WeaponSpec]) {
        self.weapons.truncate(table.len());
        for spec in &table[self.weapons.len()..] {
            self.weapons.push(ServerWeapon {
                ammo: spec.magazine,
                reloading: None,
                last_reload_request: f64::NEG_INFINITY,
            });
        }
        for (weapon, spec) in self.weapons.iter_mut().zip(table) {
            weapon.ammo = weapon.ammo.min(spec.magazine);
        }
        self.shortest_interval = shortest_interval(table);
    }

    /// Takes a client's [`ReloadRequest`] against weapon table `table`: `expected` is the
    /// server's estimate of the client's view time when it was sent and `tolerance` how far
    /// the claimed view time may be from it (seconds; the start is clamped into that range).
    /// Starts the reload if the weapon is not full and not reloading already. Copies and
    /// resends (a view time not after the last request's) and garbage (an unknown weapon,
    /// a non-finite time) are ignored and change nothing: returns whether the request was
    /// taken.
    pub fn take_reload_request(
        &mut self,
        request: &ReloadRequest,
        table: &crate::WeaponTable,
        expected: f64,
        tolerance: f64,
    ) -> bool {
        let Some(spec) = table.get(request.weapon) else {
            return false;
        };
        if !(expected.is_finite() && tolerance.is_finite() && request.view_time.is_finite()) {
            return false;
        }
        let Some(w) = self.weapons.get_mut(usize::from(request.weapon)) else {
            return false;
        };
        if request.view_time <= w.last_reload_request {
            return false;
        }
        let tolerance = tolerance.max(0.0);
        let started = request
            .view_time
            .clamp(expected - tolerance, expected + tolerance);
        w.last_reload_request = request.view_time;
        if w.reloading.is_none() && w.ammo < spec.magazine {
            w.reloading = Some((started, started + f64::from(spec.reload_time)));
        }
        true
    }

    /// Rounds left in weapon `weapon`.
    pub fn ammo(&self, weapon: u8) -> Option<u32> {
        self.weapons.get(usize::from(weapon)).map(|w| w.ammo)
    }

    /// Whether weapon `weapon` is reloading (`None` for a weapon the armory does not have).
    pub fn is_reloading(&self, weapon: u8) -> Option<bool> {
        self.weapons
            .get(usize::from(weapon))
            .map(|w| w.reloading.is_some())
    }

    /// The newest fire index judged (0 before the first): a request at or below it is a copy
    /// or a replay, dropped unjudged.
    pub fn last_fire_index(&self) -> u32 {
        self.last_fire_index
    }
}

/// The shortest fire interval of the table's weapons, seconds (at most 1).
fn shortest_interval(table: &[WeaponSpec]) -> f64 {
    table
        .iter()
        .map(|w| f64::from(w.fire_interval))
        .fold(f64::INFINITY, f64::min)
        .min(1.0)
}

/// Gives every controlled character an armory once the weapons are known.
pub(crate) fn arm_characters(
    mut commands: Commands,
    settings: Res<CombatSettings>,
    weapons: Res<Weapons>,
    characters: Query<Entity, (With<Authority>, With<ControlledBy>, Without<ServerArmory>)>,
    mut armed: Query<&mut ServerArmory>,
) {
    let Some(table) = &weapons.table else {
        return;
    };
    if weapons.is_changed() {
        for mut armory in &mut armed {
            armory.fit(&table.weapons);
        }
    }
    for entity in &characters {
        commands.entity(entity).insert(ServerArmory::new(
            &table.weapons,
            settings.fire_interval_allowance,
        ));
    }
}

/// Starts and finishes reloads.
#[allow(clippy::too_many_arguments)]
pub(crate) fn reloads(
    clock: Res<NetClock>,
    time: Res<Time>,
    settings: Res<CombatSettings>,
    weapons: Res<Weapons>,
    mut requests: Query<(Entity, &mut MessageReceiver<ReloadRequest>), With<ClientOf>>,
    clocks: Query<&RemoteClientClock, With<ClientOf>>,
    mut done: Query<&mut MessageSender<ReloadDone>, With<ClientOf>>,
    mut armories: Query<(Entity, &ControlledBy, &mut ServerArmory)>,
    work: Option<Res<unlag_net::ServerWork>>,
) {
    let _work = work.as_deref().map(|w| w.time(unlag_net::WorkPart::Shots));
    let Some(table) = &weapons.table else {
        return;
    };
    let now = clock.server_time;
    let frame = time.delta_secs_f64();
    // Each link's character, found once per frame and only when a request came (not by a
    // search of every armory per request: a flood of requests would cost players × requests).
    let mut by_link: Option<HashMap<Entity, Entity>> = None;
    for (link, mut receiver) in &mut requests {
        if !receiver.has_messages() {
            continue;
        }
        let Ok(remote) = clocks.get(link) else {
            receiver.receive().for_each(drop);
            continue;
        };
        let by_link = by_link.get_or_insert_with(|| {
            armories
                .iter()
                .map(|(character, controlled, _)| (controlled.owner, character))
                .collect()
        });
        let Some(mut armory) = by_link
            .get(&link)
            .and_then(|character| armories.get_mut(*character).ok())
            .map(|(.., armory)| armory)
        else {
            receiver.receive().for_each(drop);
            continue;
        };
        // The reload runs on the client's view clock, like its shots: it started at the view
        // time it claims, held to the tolerance around our estimate of it.
        let expected = remote.view_time(now - remote.rtt / 2.0);
        let tolerance =
            view_time_tolerance(&settings, (remote.jitter, remote.client_frame, 0.0), frame);
        for request in receiver.receive() {
            armory.take_reload_request(&request, table, expected, tolerance);
        }
    }
    for (_, controlled, mut armory) in &mut armories {
        // Done once the client's view clock is past the end (a shot fired after it may
        // finish it sooner: see `judge`).
        let Ok(remote) = clocks.get(controlled.owner) else {
            continue;
        };
        let view = remote.view_time(now);
        let last = armory.last_fire_index;
        let armory = &mut *armory;
        for (id, w) in armory.weapons.iter_mut().enumerate() {
            if w.reloading.is_some_and(|(_, until)| view >= until) {
                w.reloading = None;
                w.ammo = table.weapons.get(id).map_or(0, |spec| spec.magazine);
                armory.reloaded.push((id as u8, last));
            }
        }
        for (weapon, fire_index) in armory.reloaded.drain(..) {
            if let Ok(mut sender) = done.get_mut(controlled.owner) {
                sender.send::<ReliableChannel>(ReloadDone {
                    weapon,
                    ammo: table.get(weapon).map_or(0, |spec| spec.magazine),
                    fire_index,
                });
            }
        }
    }
}

/// Checks a request against the server's own view of the shooter; the reason when refused.
#[allow(clippy::too_many_arguments)]
fn check(
    request: &FireRequest,
    spec: &WeaponSpec,
    settings: &CombatSettings,
    arrival: Arrival,
    shooter: Entity,
    rewind: &RewindQuery,
    position: Vec3,
    (errors, lags): (
        &mut std::collections::VecDeque<f64>,
        &mut std::collections::VecDeque<f64>,
    ),
) -> Result<(), Rejection> {
    // Backtrack protection: the shot left the client one way ago, so its view time should be
    // the server's estimate of the client's view time then.
    let (now, frame, remote) = (arrival.time, arrival.frame, &arrival.link);
    if !remote.reported {
        return Err(Rejection::BadViewTime);
    }
    let expected = remote.view_time(now - remote.rtt / 2.0);
    let tolerance = shot_tolerance(settings, remote, frame);
    errors.push_back(request.view_time - expected);
    if errors.len() > 256 {
        errors.pop_front();
    }
    if (request.view_time - expected).abs() > tolerance {
        return Err(Rejection::BadViewTime);
    }
    // Judged later than drawn only by the part of the trip the server does not rewind, as
    // the server measures it, and the part of the delay it does not compensate (the delay the
    // copy carries, held by the lag check below: one claimed shorter than drawn lags longer),
    // by the cap the client counted on: one the server announced to it lately (it heard the
    // last of them a trip ago), none larger; without one, the server's own. The two sides'
    // smoothed RTTs differ by a few milliseconds plus the link's jitter (honest clients at
    // 500 ms: ±5 ms at 20 ms of jitter, ±18 ms at 60 ms), and the delay moves a little between
    // a shot and its copies; never earlier. A client claiming a fuller rewind gains at most
    // that slack.
    let cap = match request.delay_cap {
        None => remote.delay_cap,
        Some(cap)
            if cap.is_finite()
                && cap >= 0.0
                && remote.announced_cap.is_some_and(|most| cap <= most + 1e-6) =>
        {
            cap
        }
        Some(_) => return Err(Rejection::BadViewTime),
    };
    // Tighter, and free of the clock estimates: the copy may not arrive later after the view
    // time it stamps than the client's view reports do, and the shot is at most a few frames
    // older than its copy (never newer).
    let age = request.sent_view_time - request.view_time;
    if !(-1e-6..=settings.copy_age_allowed(remote.recent_client_frame)).contains(&age) {
        return Err(Rejection::BadViewTime);
    }
    let lead = request.judged_time - request.view_time;
    let lead_slack = LEAD_SLACK + remote.jitter;
    // The copy carries the delay when it left; the shot was led by the delay when it was
    // fired, which moved since by no more than the delay may move in the copy's age (a slow
    // client's copy follows its shot by a frame or two: 0.1 s and more with a hitch).
    let (grown, shrunk) = delay_movement(age);
    let owed = |delay: f64| settings.shot_lead(remote.rtt, delay, Some(cap));
    let (least, most) = (
        owed(request.sent_delay - grown),
        owed(request.sent_delay + shrunk),
    );
    // Without rewinding the present is judged, whatever the shot's judged time.
    if settings.rewind && (lead < 0.0 || lead < least - lead_slack || lead > most + lead_slack) {
        return Err(Rejection::BadViewTime);
    }
    match remote.view_lag_range {
        Some((least, most)) => {
            let lag = remote.lag_of(now, request.sent_view_time, request.sent_delay);
            lags.push_back(lag - most);
            if lags.len() > 256 {
                lags.pop_front();
            }
            if outside_lag_range(settings, (least, most), lag) {
                return Err(Rejection::BadViewTime);
            }
        }
        // A client that has reported for a whole window and no longer does is dodging the
        // check.
        None if remote.reporting_since_window => return Err(Rejection::BadViewTime),
        None => {}
    }
    if request.directions.len() != spec.pellets() {
        return Err(Rejection::WrongPelletCount);
    }
    let aim = request.aim;
    if (aim.length() - 1.0).abs() > 1e-3
        || request.directions.iter().any(|d| {
            (d.length() - 1.0).abs() > 1e-3
                || !within_cone(aim, *d, spec.spread(), settings.pellet_slack)
        })
    {
        return Err(Rejection::BadDirection);
    }
    let rolled = shot_directions(spec, request.fire_index, aim);
    if rolled
        .iter()
        .zip(&request.directions)
        .any(|(r, d)| r.angle_between(*d) > settings.pellet_slack)
    {
        return Err(Rejection::WrongSpread);
    }
    // The origin: near where the shooter's body was over the last half second (the client
    // predicts ahead of the server, and its moves arrive in bursts), and in sight of it: the
    // way from the body's axis, at the origin's height, to the origin is clear of the world (a
    // shot cannot start on the far side of a wall or over cover the body is behind).
    let near = |root: Vec3| {
        let d = request.origin - root;
        Vec2::new(d.x, d.z).length() <= settings.max_origin_error && (-0.5..=2.5).contains(&d.y)
    };
    let in_sight = |root: Vec3| {
        let from = Vec3::new(root.x, request.origin.y, root.z);
        let to = request.origin - from;
        let length = to.length();
        length < 1e-3 || rewind.wall(from, to / length, length, Some(shooter)) >= length - 1e-3
    };
    let recorded = (0..=10).any(|k| {
        rewind
            .root_at(shooter, now - f64::from(k) * 0.05)
            .is_ok_and(|(root, _)| near(root) && in_sight(root))
    });
    // Where the move the shot names left the shooter: the moment it fired, exactly.
    let after_move = arrival.moved_to.is_some_and(|p| near(p) && in_sight(p));
    if !(after_move || recorded || near(position) && in_sight(position)) {
        return Err(Rejection::BadOrigin);
    }
    Ok(())
}

/// Shots over which [`SHOT_LAG_DRIFT`] is judged: the last this many that passed the per-shot
/// checks or were refused for arriving late.
pub const SHOT_LAG_SHOTS: usize = 9;

/// Most the median of a client's last [`SHOT_LAG_SHOTS`] shots may lag beyond the median of its
/// view reports, seconds (0.04). Shot by shot, a copy stamped older than its view by less than
/// the up-link's spread cannot be told from one of the link's slow trips (at ±125 ms of jitter,
/// a 150-ms backtrack passes the lag range four times in ten); over shots it can: an honest
/// client's shots travel the link its reports travel and lag about as they do (the first copy
/// of three to arrive, a little less), a backtracking client's all lag by what it claims.
pub const SHOT_LAG_DRIFT: f64 = 0.04;

/// Fixed part of the slack on a shot's lead above the rewind cap, seconds (the jitter is
/// added): the client's and the server's smoothed RTTs differ by this much on a steady link.
const LEAD_SLACK: f64 = 0.01;

/// How far a client's interpolation delay may have grown and shrunk, seconds, over the span in
/// which its view time advanced `age` seconds, at the delay's default rates
/// ([`unlag_core::DelayPolicy`]): while it grows, view time runs that much slower than real
/// time, so the span is longer than `age`.
fn delay_movement(age: f64) -> (f64, f64) {
    let policy = unlag_core::DelayPolicy::default();
    let age = unlag_core::finite_non_negative(age);
    let span = age / (1.0 - policy.max_increase_rate).max(0.5);
    (
        policy.max_increase_rate * span,
        policy.max_decrease_rate * span,
    )
}

/// How far the first claim's shown time may be from the shot's view time, seconds: rounding
/// (the blend travels as an `f32`) and the delay report's microseconds.
const FIRST_CLAIM_SLACK: f64 = 0.002;

/// Fire indices this close below the newest are copies of recent shots (the client sends each
/// several times), dropped without an answer.
const DUPLICATE_WINDOW: u32 = 8;

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
    rewind: RewindQuery<'w, 's>,
    health: Query<'w, 's, &'static Health>,
}

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
        let link_then = remote.at(time, frame);
        let arrival = Arrival {
            time,
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
        judge(
            request,
            table,
            &self.settings,
            arrival,
            self.clock.server_time,
            shooter,
            link,
            armory,
            position,
            &self.rewind,
            &self.health,
            stats,
        )
    }
}

/// A shot waiting for its shooter's moves.
pub(crate) struct HeldShot {
    /// The copy judged: the first to arrive, or a later one that arrived in time.
    request: FireRequest,
    arrival: Arrival,
    /// When the first copy arrived, server seconds.
    first: f64,
    /// Whether the copy held arrived later (or sooner) after the present it stamps than this
    /// client's view reports did (the arrival-lag check `check` makes): under heavy jitter
    /// one copy can land in a tail the reports have not sampled. Copies travel apart, so a
    /// later copy that arrived within the range stands in for it; a backtracking client's
    /// copies are all late.
    late: bool,
}

/// How long past the copies' span a shot whose first copy arrived late waits for a later one,
/// seconds (the jitter spread of a link the copies can come through).
const COPY_JITTER_WAIT: f64 = 0.06;

/// Most shots one client may have waiting; beyond, the oldest is judged at once.
const MAX_HELD_SHOTS: usize = 16;

/// A shot naming a move further ahead of the server's than this is not waited for: the movement
/// plugin's saved moves (256 by default, 4.3 s at 60 moves/s), beyond which a client's moves
/// are lost to it anyway. After a second-long burst of losses an honest client is 100 moves
/// ahead of what the server has played.
const MAX_MOVES_AHEAD: i32 = 256;

/// Judges every shot received, once the server has processed the moves it names.
#[allow(clippy::too_many_arguments)]
pub(crate) fn judge_shots(
    mut commands: Commands,
    settings: Res<CombatSettings>,
    weapons: Res<Weapons>,
    clock: Res<NetClock>,
    mut stats: ResMut<CombatStats>,
    mut links: Query<
        (
            Entity,
            &mut MessageReceiver<FireRequest>,
            &mut MessageSender<FireResult>,
            &mut LinkTraffic,
            &RemoteClientClock,
        ),
        With<ClientOf>,
    >,
    mut echo: Query<(Entity, &mut MessageSender<CosmeticFires>), With<ClientOf>>,
    mut shooters: Query<(Entity, &ControlledBy, &mut ServerArmory, &Transform)>,
    mut judge: ParamSet<(ShotJudge, Query<&mut Health>)>,
    mut damaged: MessageWriter<Damaged>,
    mut killed: MessageWriter<Killed>,
    mut log: Option<ResMut<ShotLog>>,
    work: Option<Res<unlag_net::ServerWork>>,
    (time, trails, mut oldest_held): (
        Res<Time>,
        Query<&unlag_net::MoveTrail>,
        ResMut<unlag_net::HeldShotsOldest>,
    ),
    mut held: Local<HashMap<Entity, std::collections::VecDeque<HeldShot>>>,
) {
    let _work = work.as_deref().map(|w| w.time(unlag_net::WorkPart::Shots));
    if weapons.table.is_none() {
        return;
    }
    let mut echoes: Vec<(Entity, CosmeticFire)> = Vec::new();
    // Each link's character, found once per frame (not once per shot).
    let by_link: HashMap<Entity, Entity> = shooters
        .iter()
        .map(|(character, controlled, ..)| (controlled.owner, character))
        .collect();
    held.retain(|link, _| links.contains(*link));
    for (link, mut requests, mut results, mut traffic, remote) in &mut links {
        let queue = held.entry(link).or_default();
        // Whether a copy arrived within the range of lags after the present it stamps that this
        // client's view reports show (the check `check` makes): under heavy jitter one copy
        // can land in a tail the reports have not sampled. Copies travel apart, so a later
        // copy that arrived within it stands in for it; a backtracking client's copies are
        // all late.
        // Decided once, as the copy arrives, against the view reports' range then (taken once
        // per link and frame, and only when a shot came: it sorts the window).
        let mut link_now: Option<RemoteClockAt> = None;
        let copies_wait = settings.copy_age_allowed(remote.client_frame) + COPY_JITTER_WAIT;
        for request in requests.receive() {
            let (now, frame) = (clock.server_time, time.delta_secs_f64());
            let link_then = *link_now.get_or_insert_with(|| remote.at(now, frame));
            let lag = link_then.lag_of(now, request.sent_view_time, request.sent_delay);
            let arrival = Arrival {
                time: now,
                frame,
                link: link_then,
                moved_to: None,
                witnessed: remote.witnessed(now, lag),
            };
            // Outside the reports' range on either side: a copy can land in either tail of
            // the up-link's spread that the reports of the window have not sampled yet.
            let late = link_then
                .view_lag_range
                .is_some_and(|range| outside_lag_range(&settings, range, lag));
            // (Among the newest few: copies arrive within frames of each other, and a flood
            // costs no more than that per request.)
            if let Some(waiting) = queue
                .iter_mut()
                .rev()
                .take(MAX_HELD_SHOTS)
                .find(|h| h.request.fire_index == request.fire_index)
            {
                if waiting.late && !late {
                    waiting.request = request;
                    waiting.arrival = arrival;
                    waiting.late = false;
                }
                stats.duplicates += 1;
                continue;
            }
            queue.push_back(HeldShot {
                request,
                first: arrival.time,
                arrival,
                late,
            });
        }
        // In order of arrival, each once the shooter's moves have caught up with it (or it
        // has waited long enough, or names a move too far ahead to wait for).
        let trail = by_link.get(&link).and_then(|c| trails.get(*c).ok());
        while let Some(front) = queue.front() {
            let seq = front.request.move_seq.map(Seq16);
            let waited = clock.server_time - front.first;
            if front.late && waited < copies_wait {
                break;
            }
            let ready = match (trail, seq) {
                (Some(trail), Some(seq)) => {
                    trail.reached(seq)
                        // A move that has arrived is only waiting its turn in the playout;
                        // one lost is sent again once the client sees it missing.
                        || waited >= settings.max_shot_hold + PLAYOUT_HOLD
                        || queue.len() > MAX_HELD_SHOTS
                        || trail.newest().is_none_or(|n| seq.diff(n) > MAX_MOVES_AHEAD)
                }
                _ => true,
            };
            if !ready {
                break;
            }
            let Some(HeldShot {
                request,
                mut arrival,
                ..
            }) = queue.pop_front()
            else {
                break;
            };
            arrival.moved_to = trail
                .zip(seq)
                .and_then(|(trail, seq)| trail.position_after(seq));
            let Some((shooter, _, mut armory, transform)) = by_link
                .get(&link)
                .and_then(|character| shooters.get_mut(*character).ok())
            else {
                *stats.rejected.entry(Rejection::NoShooter).or_default() += 1;
                continue;
            };
            let position = transform.translation;
            let started = std::time::Instant::now();
            let verdict = judge.p0().judge_arrived(
                &request,
                shooter,
                link,
                &mut armory,
                position,
                arrival,
                &mut stats,
            );
            stats
                .judge_micros
                .push_back(started.elapsed().as_secs_f64() * 1e6);
            if stats.judge_micros.len() > 256 {
                stats.judge_micros.pop_front();
            }
            let ammo = armory.ammo(request.weapon).unwrap_or(0);
            let rewound = settings.rewind;
            if verdict.is_ok() {
                stats.accepted += 1;
                if !rewound {
                    stats.unrewound += 1;
                } else if request.judged_time > request.view_time {
                    stats.partly_rewound += 1;
                }
            }
            let outcome = match verdict {
                // Copies of a shot already judged (and replays of old ones): no answer.
                Err(Rejection::Duplicate) => {
                    stats.duplicates += 1;
                    continue;
                }
                // Fired before its client heard it had died: answered (the ammo settles),
                // counted apart, no warning.
                Err(Rejection::ShooterDead) => {
                    stats.posthumous += 1;
                    Err(Rejection::ShooterDead)
                }
                // Counted always, logged at the 1st, 2nd, 4th, 8th, ... of each reason: a
                // flood of bad shots must not flood the log.
                Err(Rejection::StaleFireIndex) => {
                    unlag_net::warn_counted!(
                        *stats.rejected.entry(Rejection::StaleFireIndex).or_default(),
                        "stale shot {} from client {link} dropped",
                        request.fire_index
                    );
                    continue;
                }
                Err(reason) => {
                    unlag_net::warn_counted!(
                        *stats.rejected.entry(reason).or_default(),
                        "shot {} of client {link} refused: {reason:?}",
                        request.fire_index
                    );
                    Err(reason)
                }
                Ok(ShotVerdict::Launch(projectile)) => {
                    commands.spawn(projectile);
                    Ok(Vec::new())
                }
                Ok(ShotVerdict::Hits { hits, ends }) => {
                    if let Some(log) = log.as_mut() {
                        log.shots.push(LoggedShot {
                            link,
                            shooter,
                            request: request.clone(),
                            rtt: remote.rtt,
                            server_time: clock.server_time,
                        });
                    }
                    let mut confirmed = Vec::new();
                    for TargetHit {
                        target,
                        damage,
                        pellets,
                        bone,
                        headshot,
                    } in hits
                    {
                        stats.pellet_hits += u64::from(pellets);
                        let died = deal_damage(
                            &mut judge.p1(),
                            &mut damaged,
                            &mut killed,
                            target,
                            shooter,
                            request.weapon,
                            damage,
                            &bone,
                            headshot,
                        );
                        confirmed.push(ConfirmedHit {
                            target,
                            bone,
                            headshot,
                            damage,
                            pellets,
                            killed: died,
                        });
                    }
                    if confirmed.iter().any(|c| c.headshot) {
                        stats.headshots += 1;
                    }
                    echoes.push((
                        link,
                        CosmeticFire {
                            shooter,
                            weapon: request.weapon,
                            origin: request.origin,
                            ends: ends.into(),
                        },
                    ));
                    Ok(confirmed)
                }
            };
            traffic.send_counted::<ReliableChannel, _>(
                &mut results,
                FireResult {
                    fire_index: request.fire_index,
                    weapon: request.weapon,
                    ammo,
                    rewound,
                    outcome,
                },
            );
        }
    }
    // The rewind's window must still reach the shots left waiting when their turn comes (those
    // that can pass: one stamped older than its link's reports allow is refused anyway, and
    // must not stretch the broad phase over the whole history while it waits).
    let oldest = held
        .values()
        .flatten()
        .map(|h| {
            let link = &h.arrival.link;
            let delay = link.interpolation_delay.max(link.delay_cap).max(0.0);
            let allowed = link.view_lag_range.map_or(1.0, |(_, most)| most) + delay + 0.25;
            let at = h.request.view_time.min(h.request.judged_time);
            (at, h.arrival.time - at <= allowed)
        })
        .filter(|(t, plausible)| t.is_finite() && *plausible)
        .map(|(t, _)| t)
        .reduce(f64::min);
    if oldest_held.0 != oldest {
        oldest_held.0 = oldest;
    }
    // Everyone but the shooter sees the shot (effects only): one batch per client per frame.
    if echoes.is_empty() {
        return;
    }
    for (link, mut sender) in &mut echo {
        let mut others = echoes.iter().filter(|(from, _)| *from != link).peekable();
        while others.peek().is_some() {
            let shots: Vec<CosmeticFire> = others
                .by_ref()
                .take(COSMETIC_BATCH)
                .map(|(_, fire)| fire.clone())
                .collect();
            sender.send::<UnreliableChannel>(CosmeticFires { shots });
        }
    }
}

/// Checks, spends the round and judges one shot: the hits per target and where each pellet
/// stopped.
#[allow(clippy::too_many_arguments)]
fn judge(
    request: &FireRequest,
    table: &crate::WeaponTable,
    settings: &CombatSettings,
    arrival: Arrival,
    present: f64,
    shooter: Entity,
    link: Entity,
    armory: &mut ServerArmory,
    position: Vec3,
    rewind: &RewindQuery,
    health: &Query<&Health>,
    stats: &mut CombatStats,
) -> Result<ShotVerdict, Rejection> {
    let finite = request.origin.is_finite()
        && request.aim.is_finite()
        && request.view_time.is_finite()
        && request.sent_view_time.is_finite()
        && request.sent_delay.is_finite()
        && request.judged_time.is_finite()
        && request.directions.len() <= 64
        && request.claims.len() <= crate::protocol::MAX_CLAIMS
        && request.directions.iter().all(|d| d.is_finite())
        && request
            .claims
            .iter()
            .all(|c| c.alpha.is_finite() && c.ease.is_finite());
    if !finite {
        return Err(Rejection::Malformed);
    }
    let spec = table.get(request.weapon).ok_or(Rejection::UnknownWeapon)?;
    if request.fire_index <= armory.last_fire_index {
        return Err(
            if armory.last_fire_index - request.fire_index < DUPLICATE_WINDOW {
                Rejection::Duplicate
            } else {
                Rejection::StaleFireIndex
            },
        );
    }
    let previous = armory.last_fire_index;
    armory.last_fire_index = request.fire_index;
    // Indices between the newest that arrived and this one never arrived (yet: one that
    // arrives later is a copy, dropped above): they owe fire rate at the next shot through the
    // gate, whatever becomes of this one. The first shot an armory sees starts its count (a
    // client keeps counting across characters and connections).
    if previous > 0 {
        armory.skipped = armory
            .skipped
            .saturating_add(request.fire_index - previous - 1);
    }
    if health.get(shooter).is_ok_and(|h| !h.alive()) {
        return Err(Rejection::ShooterDead);
    }
    let remote = &arrival.link;
    // How much later than the reports' median this copy arrived after the present it stamps;
    // none beyond the reports for one that came with a report stamped as it is.
    let drift = remote.view_lag_median.map(|centre| {
        if arrival.witnessed {
            0.0
        } else {
            remote.lag_of(arrival.time, request.sent_view_time, request.sent_delay) - centre
        }
    });
    let checked = check(
        request,
        spec,
        settings,
        arrival,
        shooter,
        rewind,
        position,
        (&mut stats.view_time_errors, &mut stats.view_lag_excess),
    );
    // The shots over which drift is judged: those that passed, and those refused for arriving
    // late (evidence of the same lateness: leaving them out would judge a backtracker only by
    // the shots its link's jitter happened to bring in early).
    let late = checked == Err(Rejection::BadViewTime) && drift.is_some_and(|d| d > 0.0);
    if let Some(lag) = drift
        && (checked.is_ok() || late)
    {
        if armory.shot_lags.len() == SHOT_LAG_SHOTS {
            armory.shot_lags.pop_front();
        }
        armory.shot_lags.push_back(lag);
    }
    checked?;
    if drift.is_some() && armory.shot_lags.len() == SHOT_LAG_SHOTS {
        let mut sorted: Vec<f64> = armory.shot_lags.iter().copied().collect();
        sorted.sort_by(f64::total_cmp);
        if sorted[SHOT_LAG_SHOTS / 2] > SHOT_LAG_DRIFT {
            return Err(Rejection::BadViewTime);
        }
    }
    let weapon = armory
        .weapons
        .get_mut(usize::from(request.weapon))
        .ok_or(Rejection::UnknownWeapon)?;
    // A shot fired (by its checked view time) after the reload's end finishes it: the client
    // showed a full magazine then.
    if weapon
        .reloading
        .is_some_and(|(_, until)| request.view_time >= until)
    {
        weapon.reloading = None;
        weapon.ammo = spec.magazine;
        armory.reloaded.push((request.weapon, previous));
    }
    let weapon = armory
        .weapons
        .get_mut(usize::from(request.weapon))
        .ok_or(Rejection::UnknownWeapon)?;
    // A shot fired before the reload started (it may arrive after the reload request) spends
    // a round of the old magazine.
    let reloading = weapon
        .reloading
        .is_some_and(|(start, _)| request.view_time >= start);
    if weapon.ammo == 0 || reloading {
        return Err(Rejection::NoAmmo);
    }
    // Skipped fire indices owe fire rate: skipping costs what firing would.
    let interval = f64::from(spec.fire_interval);
    if !armory.gate.try_fire(
        request.view_time,
        interval,
        armory.skipped,
        armory.shortest_interval,
    ) {
        return Err(Rejection::TooFast);
    }
    armory.skipped = 0;
    let weapon = armory
        .weapons
        .get_mut(usize::from(request.weapon))
        .ok_or(Rejection::UnknownWeapon)?;
    // A projectile claims nothing (it has not hit yet): it is launched, and its flight judged
    // as it goes.
    if matches!(spec.kind, WeaponKind::Projectile { .. }) {
        if !request.claims.is_empty() {
            return Err(Rejection::BadClaim);
        }
        let projectile = Projectile::launch(
            settings,
            spec,
            shooter,
            link,
            request.weapon,
            request.fire_index,
            request.origin,
            request.directions[0],
            request.judged_time,
            remote.rtt,
            present,
        )
        .ok_or(Rejection::UnknownWeapon)?;
        weapon.ammo -= 1;
        return Ok(ShotVerdict::Launch(projectile));
    }
    let mut claims = Vec::with_capacity(request.claims.len());
    // Whether the claim's target counts: a target that died after the shooter's screen showed
    // it alive (killed by a shot the shooter had not heard of yet) is a miss, not a refusal.
    let mut claim_hits = Vec::with_capacity(request.claims.len());
    // Targets claimed on a stale pose (see below): never hit.
    let mut stale_targets: Vec<Entity> = Vec::new();
    let dead = |e: Entity| health.get(e).is_ok_and(|h| !h.alive());
    let tolerance = shot_tolerance(settings, remote, arrival.frame);
    for (k, c) in request.claims.iter().enumerate() {
        // One pose per target: a client drew each proxy once, so two claims on one target
        // would make its hit box the union of two chosen poses.
        if request.claims[..k].iter().any(|o| o.target == c.target) {
            return Err(Rejection::BadClaim);
        }
        let mut claim = c.view();
        // A claim shows one moment: the shot's view time (Extrapolate proxies are drawn at the
        // present the client knows, one delay later), whether it blends two states or runs on
        // past the newest one.
        let shown = rewind.claimed_time(&claim).map_err(|e| match e {
            RewindError::UnknownCharacter => Rejection::BadTarget,
            _ => Rejection::BadClaim,
        })?;
        // An `Extrapolate` proxy is drawn at the present the client knows, one delay after
        // the view time: its window moves there rather than widening to cover both.
        let shift = if c.mode == unlag_core::SmoothingMode::Extrapolate {
            remote.interpolation_delay
        } else {
            0.0
        };
        let centre = request.judged_time + shift;
        // The first claim is the one whose view time the shot carries: it was drawn at
        // exactly that moment (an `Extrapolate` one a delay later, as closely as the reported
        // delay follows the drawn one while it changes). Others may be proxies at other rates,
        // drawn with their own delays.
        let window = match (k, shift > 0.0) {
            (0, false) => FIRST_CLAIM_SLACK,
            (0, true) => FIRST_CLAIM_SLACK.max(
                unlag_net::PLAUSIBLE_DELAY_DECAY
                    * (remote.rtt / 2.0 + unlag_net::MIN_REPORT_GAP + remote.client_frame)
                    + FIRST_CLAIM_SLACK,
            ),
            _ => tolerance,
        };
        let off_time = (shown - centre).abs() > window;
        if c.from != c.to && off_time {
            return Err(Rejection::BadClaim);
        }
        // One state, not at the moment drawn: held past its extrapolation (a client starved
        // of newer states; with loss it may hold an older state than the server sent) or shown
        // before its first state. (Held before a teleport is the moment drawn: smoothing stays
        // on the state before a teleport until the teleport's time.) What such a pose shows is older than the view, so it never
        // counts as a hit (the client promises none on it): a miss, which still stops the
        // pellet where it was drawn. Otherwise a held claim would let any state of the last
        // second be claimed.
        let stale = c.from == c.to
            && off_time
            && !(shown < centre && rewind.held_before_teleport(&claim, centre - window));
        // An offset from the curve counts only as far as starved frames explain it: otherwise
        // it could be a magnet pulling the hit box onto the ray. Judged as none: on the curve.
        let drawn_at = if c.from == c.to { centre } else { shown };
        if !rewind.ease_explained(&claim, drawn_at) {
            claim.ease = Vec3::ZERO;
            stats.unexplained_eases += 1;
        }
        claims.push(claim);
        claim_hits.push(c.hit && !dead(c.target) && !stale);
        if stale {
            stale_targets.push(c.target);
            stats.stale_claims += 1;
        }
    }
    let rays = request.rays();
    // Rewound to the judged time (above the rewind cap, later than the view time), or, with
    // rewinding off, judged against the present.
    let answers = if settings.rewind {
        rewind.rays_as_seen(
            &rays,
            spec.range,
            request.judged_time,
            Some(shooter),
            &claims,
        )
    } else {
        rewind.rays(&rays, spec.range, present, Some(shooter))
    }
    .map_err(|e| match e {
        RewindError::UnknownCharacter => Rejection::BadTarget,
        RewindError::InvalidView(_) | RewindError::TooOld { .. } => Rejection::BadClaim,
        RewindError::Invalid => Rejection::Malformed,
    })?;
    let mut tally: Vec<TargetHit> = Vec::new();
    let mut ends = Vec::with_capacity(rays.len());
    let mut corpse_hits = 0u64;
    for ((origin, dir), answer) in rays.iter().zip(answers) {
        let claimed = |e: Entity| {
            !stale_targets.contains(&e) && request.claims.iter().any(|c| c.target == e && c.hit)
        };
        match answer {
            // Only what the shooter saw hit counts: a hit it did not see is a miss (and stops
            // the pellet all the same). So is a corpse.
            Some(hit) if claimed(hit.character) && dead(hit.character) => {
                corpse_hits += 1;
                ends.push(hit.point);
            }
            Some(hit) if claimed(hit.character) => {
                ends.push(hit.point);
                let multiplier = if hit.is_head {
                    spec.headshot_multiplier
                } else {
                    1.0
                } * hit.damage_multiplier;
                let damage = spec.damage * multiplier;
                match tally.iter_mut().find(|t| t.target == hit.character) {
                    Some(t) => {
                        t.damage += damage;
                        t.pellets += 1;
                        if hit.is_head && !t.headshot {
                            t.bone = hit.bone.clone();
                            t.headshot = true;
                        }
                    }
                    None => tally.push(TargetHit {
                        target: hit.character,
                        damage,
                        pellets: 1,
                        bone: hit.bone.clone(),
                        headshot: hit.is_head,
                    }),
                }
            }
            Some(hit) => ends.push(hit.point),
            None => ends.push(*origin + *dir * spec.range),
        }
    }
    // Claimed hits that all failed: if the world stands between the shot and every target
    // claimed, the claim was a shot through a wall.
    if tally.is_empty() && !claims.is_empty() {
        let hit_claims: Vec<&ClaimedView> = claims
            .iter()
            .zip(&claim_hits)
            .filter(|(_, hit)| **hit)
            .map(|(claim, _)| claim)
            .collect();
        let behind_wall = |claim: &&ClaimedView| {
            rewind.view_pose(claim).is_ok_and(|poses| {
                let body = poses.last().map_or(Vec3::ZERO, |p| p.0) + Vec3::Y;
                let to = body - request.origin;
                let length = to.length();
                length > 0.1
                    && rewind.wall(request.origin, to / length, length, Some(shooter))
                        < length - 0.3
            })
        };
        if !hit_claims.is_empty() && hit_claims.iter().all(behind_wall) {
            return Err(Rejection::ThroughWall);
        }
    }
    if let Some(weapon) = armory.weapons.get_mut(usize::from(request.weapon)) {
        weapon.ammo = weapon.ammo.saturating_sub(1);
    }
    stats.corpse_pellets += corpse_hits;
    Ok(ShotVerdict::Hits { hits: tally, ends })
}

#[cfg(test)]
mod tests {
    use super::ServerArmory;
    use crate::WeaponTable;

    fn table(text: &str) -> WeaponTable {
        WeaponTable::from_ron(text, "test.ron").unwrap()
    }

    /// A weapon table swapped at run time used to index armories out of bounds.
    #[test]
    fn an_armory_fits_a_table_that_replaced_its_own() {
        let shipped = include_str!("../../../assets/weapons.ron");
        let full = table(shipped);
        let one = WeaponTable {
            weapons: full.weapons[..1].to_vec(),
        };
        let mut armory = ServerArmory::new(&one.weapons, 0.01);
        assert_eq!(armory.ammo(1), None);
        armory.fit(&full.weapons);
        for (id, spec) in full.weapons.iter().enumerate() {
            assert_eq!(armory.ammo(id as u8), Some(spec.magazine));
        }
        armory.fit(&one.weapons);
        assert_eq!(armory.ammo(1), None);
        assert_eq!(armory.ammo(0), Some(one.weapons[0].magazine));
    }
}
