//! The engine of the `report` example: a headless match on the testbed (a dedicated server,
//! server-driven bots, scripted clients that move and shoot at what they see) under given
//! network conditions, and every figure of how it felt, measured.
//!
//! ```no_run
//! let options = unlag_report::ReportOptions { seconds: 10.0, ..Default::default() };
//! let report = unlag_report::run(&options, &mut |_done| {}).unwrap();
//! println!("{}", report.table());
//! ```
//!
//! What is measured, over the measured span (after a warm-up):
//!
//! - **movement**: corrections per minute per client (the server correcting an honest client
//!   is a failure of prediction), and how far corrections moved the character;
//! - **smoothing**: each proxy's drawn position against the server's own pose of that character
//!   at the view time it was drawn for (RMS, p99), the largest per-frame change of that error
//!   (a visible jump), the interpolation delay in effect, and the share of proxy frames held or
//!   extrapolated for want of a newer state;
//! - **combat**: of the shots a client saw hit, the share the server confirmed; of those it saw
//!   miss, the share it (wrongly) confirmed; headshot agreement; per weapon; projectiles
//!   launched and their hits; every refusal by reason;
//! - **bandwidth**: bytes per second up and down per client, by message kind;
//! - **server**: wall-clock µs per server tick spent checking moves, recording hit boxes and
//!   judging shots (this machine, this build);
//! - **run**: simulated seconds per wall second.

pub mod arena;
pub mod cheat;
pub mod compare;
pub mod grid;
pub mod options;
pub mod peek;
pub mod remote;
pub mod sweep;

pub use options::{OptionError, ReportOptions, USAGE};

use arena::{
    ClientScript, HUMANOID, add_client_script, bot, drive_bots, give_proxies_boxes, spawn_map,
    spawn_point,
};
use bevy::prelude::*;
use bevy_replicon::shared::server_entity_map::ServerEntityMap;
use core::time::Duration;
use lightyear::prelude::*;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Instant;
use unlag::CharacterProxyPlugin;
use unlag::combat::{
    CombatPlugin, CombatSettings, CombatStats, Health, LocalFire, ProjectileExploded,
    ShotConfirmed, WeaponKind, Weapons,
};
use unlag::core::{SampleKind, SplitMix64, Summary};
use unlag::movement::{
    CharacterMovement, CharacterState, CorrectionApplied, MovementPredictionPlugin,
    MovementSettings, MovementState, MovementStats,
};
use unlag::net::{NetClock, ServerWork, WorkPart};
use unlag::rewind::{FrameHistory, RewindPlugin, UseHitBoxLayout};
use unlag::smoothing::{
    ProxyFlags, ProxySmoothingPlugin, RenderedPose, SmoothedProxy, SmoothingSettings,
};
use unlag_testbed::{RapierFixedPlugin, Testbed, TestbedConfig};

/// Seconds of play before the measured span: connection, loading, the first states.
const WARM_UP: f64 = 4.0;

/// Peeks measured for the peeker's advantage.
const PEEKS: usize = 6;

/// Seconds after the measured span for the last verdicts to arrive.
const COOL_DOWN: f64 = 1.5;

/// Where the repository's `assets/` are found.
use unlag_demo::asset_plugin;

/// A distribution's figures, in the unit of the field holding it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Stat {
    /// Samples.
    pub count: usize,
    /// Mean.
    pub mean: f64,
    /// Root mean square.
    pub rms: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Stat {
    /// The figures of `samples`, scaled by `unit` (e.g. 1000 for seconds to milliseconds).
    pub fn of(samples: &[f64], unit: f64) -> Self {
        let s = Summary::of(samples);
        Self {
            count: s.count,
            mean: s.mean * unit,
            rms: s.rms * unit,
            p95: s.p95 * unit,
            p99: s.p99 * unit,
            max: if s.count == 0 { 0.0 } else { s.max * unit },
        }
    }
}

/// One weapon's agreement between what clients saw and what the server confirmed.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Agreement {
    /// The weapon's name.
    pub weapon: String,
    /// Shots fired.
    pub shots: u64,
    /// Pellets the shooters saw hit a target.
    pub seen_hits: u64,
    /// Of those, pellets the server confirmed on that target.
    pub hits_confirmed: u64,
    /// Pellets the shooters saw miss.
    pub seen_misses: u64,
    /// Pellets the server confirmed that the shooters saw miss (wrong confirmations).
    pub misses_confirmed: u64,
    /// Shots with a headshot seen.
    pub headshots_seen: u64,
    /// Of those, the headshots the server confirmed.
    pub headshots_agree: u64,
    /// Shots the server refused.
    pub refused: u64,
}

impl Agreement {
    /// Share of seen hits confirmed, 0–1 (1 when nothing was seen hit).
    pub fn hit_rate(&self) -> f64 {
        if self.seen_hits == 0 {
            1.0
        } else {
            self.hits_confirmed as f64 / self.seen_hits as f64
        }
    }

    /// Share of seen misses confirmed, 0–1.
    pub fn miss_rate(&self) -> f64 {
        if self.seen_misses == 0 {
            0.0
        } else {
            self.misses_confirmed as f64 / self.seen_misses as f64
        }
    }
}

/// Projectile shots of the whole match.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Projectiles {
    /// Projectiles launched by the server.
    pub launched: u64,
    /// Impacts the shooters heard of.
    pub impacts: u64,
    /// Of those, direct hits on a character.
    pub direct_hits: u64,
    /// Characters damaged by splash.
    pub splash_hits: u64,
}

/// Wall-clock microseconds per server tick, by part (this machine, this build).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ServerCost {
    /// Checking clients' moves (movement validation, corrections).
    pub movement_us: Stat,
    /// Recording every character's hit boxes.
    pub record_us: Stat,
    /// Reloads, judging shots (checks and rewinds), flying projectiles, and queuing what the
    /// clients are told.
    pub combat_us: Stat,
    /// Sampling the proxies and building the state updates due to each client.
    pub proxy_states_us: Stat,
    /// The `PreUpdate` schedule: lightyear's transport and replication taking in what arrived
    /// (and the plugins' receiving systems).
    pub receive_us: Stat,
    /// The `PostUpdate` schedule: replication out, lightyear's messages and transport.
    pub send_us: Stat,
    /// The whole server update, every schedule from `First` to `Last`.
    pub total_us: Stat,
}

/// Every figure of a match.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Report {
    /// Bots, clients, seconds, conditions, smoothing and seed of the match.
    pub options: BTreeMap<&'static str, String>,
    /// Simulated seconds measured.
    pub seconds: f64,
    /// Corrections per minute, per client.
    pub corrections_per_min: Vec<f64>,
    /// How far corrections moved the character, metres.
    pub correction_distance_m: Stat,
    /// Drawn proxy position against the server's pose at the view time, metres.
    pub proxy_error_m: Stat,
    /// Largest change of a proxy's error from one frame to the next, metres.
    pub proxy_max_jump_m: f64,
    /// Largest growth of a proxy's error from one frame to the next beyond the character's
    /// own motion in that frame (a pop), teleports left out, metres.
    pub proxy_max_pop_m: f64,
    /// Interpolation delay in effect on the clients, per frame, milliseconds.
    pub interpolation_delay_ms: Stat,
    /// Share of proxy frames held or extrapolated, 0–1.
    pub starved_share: f64,
    /// Hit agreement, per hitscan weapon.
    pub agreement: Vec<Agreement>,
    /// Projectile shots.
    pub projectiles: Projectiles,
    /// Shots refused by the server, by reason.
    pub rejected: BTreeMap<String, u64>,
    /// Clients whose connection dropped during the match (a netcode timeout: nothing heard
    /// for longer than the connect token's timeout); their figures end where it dropped.
    pub disconnects: usize,
    /// Moves or messages the server's movement checks rejected.
    pub movement_rejected: u64,
    /// The clients' estimate of the server's time less the true one, per client frame, over
    /// every client: (mean, least, most), milliseconds.
    pub clock_error_ms: [f64; 3],
    /// Upstream bytes per second per client, on the wire (mean over clients).
    pub bytes_up_per_sec: f64,
    /// Downstream bytes per second per client, on the wire (mean over clients).
    pub bytes_down_per_sec: f64,
    /// Upstream payload bytes per second per client, by message kind.
    pub up_by_kind: BTreeMap<String, f64>,
    /// Downstream payload bytes per second per client, by message kind.
    pub down_by_kind: BTreeMap<String, f64>,
    /// Server time per tick.
    pub server_cost: ServerCost,
    /// Simulated seconds per wall-clock second.
    pub simulated_per_wall_second: f64,
    /// With `--compare-validation`: every hitscan and shotgun pellet judged four ways.
    pub validation: Vec<compare::MethodAgreement>,
    /// With `--cheat`: what client 0 did.
    pub cheat: Option<String>,
    /// Cheating shots client 0 sent.
    pub cheating_shots: u64,
    /// Claims on a pose held past its extrapolation (never hits), every shooter's.
    pub stale_claims: u64,
    /// Claims whose ease no starved frame explains (judged as none), every shooter's.
    pub unexplained_eases: u64,
    /// Speed hacks the server flagged.
    pub speed_hacks_flagged: u64,
    /// Peeker's advantage under the same conditions (a match of its own: two clients and a
    /// wall).
    pub peek: peek::PeekFigures,
}

/// Per client: what it saw and heard (a resource on its App).
#[derive(Resource, Default)]
pub(crate) struct Ledger {
    seen: Vec<LocalFire>,
    verdicts: Vec<ShotConfirmed>,
    impacts: Vec<ProjectileExploded>,
    corrections: Vec<f64>,
}

pub(crate) fn keep(
    ledger: Option<ResMut<Ledger>>,
    mut local: MessageReader<LocalFire>,
    mut verdicts: MessageReader<ShotConfirmed>,
    mut impacts: MessageReader<ProjectileExploded>,
    mut corrections: MessageReader<CorrectionApplied>,
) {
    let Some(mut ledger) = ledger else {
        return;
    };
    ledger.seen.extend(local.read().cloned());
    ledger.verdicts.extend(verdicts.read().cloned());
    ledger
        .impacts
        .extend(impacts.read().filter(|e| e.0.own).cloned());
    ledger
        .corrections
        .extend(corrections.read().filter_map(|c| {
            c.client_position
                .map(|p| f64::from(p.distance(c.server_position)))
        }));
}

/// Parts of the server's tick the [`Stopwatch`] times, in [`ServerCost`]'s order; the first
/// four are [`WorkPart::ALL`].
const PARTS: usize = 7;
const MOVEMENT: usize = 0;
const RECORD: usize = 1;
const COMBAT: usize = 2;
const PROXY_STATES: usize = 3;
const RECEIVE: usize = 4;
const SEND: usize = 5;
const TOTAL: usize = 6;

/// Server: wall-clock time spent in each measured part during the current tick.
#[derive(Resource, Default)]
struct Stopwatch {
    started: [Option<Instant>; PARTS],
    current: [f64; PARTS],
    ticks: Vec<[f64; PARTS]>,
    last_tick: Option<u32>,
    /// [`ServerWork`]'s totals when the last bucket closed.
    work_seen: [Duration; 4],
    measuring: bool,
}

fn start<const PART: usize>(mut watch: ResMut<Stopwatch>) {
    watch.started[PART] = Some(Instant::now());
}

fn stop<const PART: usize>(mut watch: ResMut<Stopwatch>) {
    if let Some(t) = watch.started[PART].take() {
        watch.current[PART] += t.elapsed().as_secs_f64() * 1e6;
    }
}

/// Closes the tick's bucket when the tick moved on (the last system of a server update). The
/// plugins' own parts come from [`ServerWork`], which their systems keep.
fn close_tick(timeline: Res<LocalTimeline>, work: Res<ServerWork>, mut watch: ResMut<Stopwatch>) {
    let tick = timeline.tick().0;
    if watch.last_tick != Some(tick) {
        for (k, part) in WorkPart::ALL.into_iter().enumerate() {
            let total = work.total(part);
            watch.current[k] = (total - watch.work_seen[k]).as_secs_f64() * 1e6;
            watch.work_seen[k] = total;
        }
        if watch.measuring && watch.last_tick.is_some() {
            let bucket = watch.current;
            watch.ticks.push(bucket);
        }
        watch.current = [0.0; PARTS];
        watch.last_tick = Some(tick);
    }
}

/// Schedules the server runs around its main ones, only to time them.
#[derive(bevy::ecs::schedule::ScheduleLabel, Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Mark {
    /// Before `First`.
    Start,
    /// Before `PreUpdate`.
    Receive,
    /// After `PreUpdate`.
    Received,
    /// Before `PostUpdate`.
    Send,
    /// After `PostUpdate`.
    Sent,
    /// After `Last`.
    End,
}

/// Times the server's parts per tick (see [`ServerCost`]).
fn add_stopwatch(server: &mut App) {
    server.init_resource::<Stopwatch>();
    for mark in [
        Mark::Start,
        Mark::Receive,
        Mark::Received,
        Mark::Send,
        Mark::Sent,
        Mark::End,
    ] {
        server.init_schedule(mark);
    }
    {
        let mut order = server
            .world_mut()
            .resource_mut::<bevy::app::MainScheduleOrder>();
        order.insert_before(First, Mark::Start);
        order.insert_before(PreUpdate, Mark::Receive);
        order.insert_after(PreUpdate, Mark::Received);
        order.insert_before(PostUpdate, Mark::Send);
        order.insert_after(PostUpdate, Mark::Sent);
        order.insert_after(Last, Mark::End);
    }
    server
        .add_systems(Mark::Start, start::<TOTAL>)
        .add_systems(Mark::Receive, start::<RECEIVE>)
        .add_systems(Mark::Received, stop::<RECEIVE>)
        .add_systems(Mark::Send, start::<SEND>)
        .add_systems(Mark::Sent, stop::<SEND>)
        .add_systems(Mark::End, (stop::<TOTAL>, close_tick).chain());
}

/// The server's cost per tick over the ticks measured since the match started measuring (or
/// since [`reset_server_cost`]).
pub fn server_cost(tb: &Testbed) -> ServerCost {
    let watch = tb.server_world().resource::<Stopwatch>();
    let part = |k: usize| -> Stat {
        let samples: Vec<f64> = watch.ticks.iter().map(|t| t[k]).collect();
        Stat::of(&samples, 1.0)
    };
    ServerCost {
        movement_us: part(MOVEMENT),
        record_us: part(RECORD),
        combat_us: part(COMBAT),
        proxy_states_us: part(PROXY_STATES),
        receive_us: part(RECEIVE),
        send_us: part(SEND),
        total_us: part(TOTAL),
    }
}

/// Forgets the server cost measured so far.
pub fn reset_server_cost(tb: &mut Testbed) {
    tb.server_world_mut()
        .resource_mut::<Stopwatch>()
        .ticks
        .clear();
}

/// A character's pose moving further than this between two of a client's frames is a
/// teleport, metres (the smoothing plugin's teleport distance).
const TELEPORT_DISTANCE: f32 = 3.84;

/// Over how long a character's mean speed is taken when judging a pop, seconds: longer than
/// the server's steps of a player's moves (a packet at a time), shorter than a turn.
const SPEED_WINDOW: f64 = 0.1;

/// Per-frame proxy figures, gathered by the runner.
#[derive(Default)]
struct ProxySamples {
    errors: Vec<f64>,
    jumps: Vec<f64>,
    delays: Vec<f64>,
    frames: u64,
    starved: u64,
    /// Per (client, proxy): the last frame's error, the server's pose it was measured
    /// against and the view time, server seconds.
    last_error: std::collections::HashMap<(usize, Entity), (Vec3, Vec3, f64)>,
    /// Per frame: how much more the error grew than the character itself moved (a pop the
    /// player sees beyond the motion), metres; frames across a teleport left out.
    pops: Vec<f64>,
}

impl ProxySamples {
    /// Every proxy client `i` draws, against the server's pose at its view time.
    fn sample(&mut self, tb: &Testbed, i: usize) {
        let client = tb.client_world(i);
        let server = tb.server_world();
        if let Some(clock) = client.get_resource::<NetClock>() {
            self.delays.push(clock.interpolation_delay);
        }
        let Some(map) = client.get_resource::<ServerEntityMap>() else {
            return;
        };
        let Some(mut poses) = client.try_query::<(Entity, &RenderedPose)>() else {
            return;
        };
        for (entity, pose) in poses.iter(client) {
            let Some(history) = map
                .to_server()
                .get(&entity)
                .and_then(|e| server.get::<FrameHistory>(*e))
            else {
                continue;
            };
            let Ok(pair) = history.poses().lookup(pose.view_time) else {
                continue;
            };
            let at = |time: f64| {
                let pair = history.poses().lookup(time).ok()?;
                Some(history.poses().pose(&pair, history.boxes().len()).0)
            };
            let truth = history.poses().pose(&pair, history.boxes().len()).0;
            let error = pose.position - truth;

            self.errors.push(f64::from(error.length()));
            let key = (i, entity);
            if let Some((last, last_truth, last_view)) =
                self.last_error.insert(key, (error, truth, pose.view_time))
            {
                let jump = error.distance(last);
                self.jumps.push(f64::from(jump));
                // A teleport (a respawn) moves the truth further than any walk in one frame.
                // A pop: the drawn proxy falls further from the truth than the character
                // itself moved this frame (a proxy that follows it stays close; one that
                // jumps, holds or lags far behind does not). The server's track moves in
                // steps of its ticks (a player's moves arrive a packet at a time), so the
                // character's motion in the frame is also taken at its mean speed over the
                // `SPEED_WINDOW` around the view time: a proxy drawn smoothly along a stepped
                // track does not pop.
                let moved = truth.distance(last_truth);
                let half = SPEED_WINDOW / 2.0;
                let mean_speed = at(pose.view_time - half)
                    .zip(at(pose.view_time + half))
                    .map_or(0.0, |(before, after)| {
                        after.distance(before) / SPEED_WINDOW as f32
                    });
                let motion = moved.max(mean_speed * (pose.view_time - last_view).abs() as f32);
                if moved < TELEPORT_DISTANCE {
                    let pop = f64::from(error.length() - last.length() - motion).max(0.0);
                    self.pops.push(pop);
                }
            }
            self.frames += 1;
            self.starved += u64::from(matches!(
                pose.kind,
                SampleKind::Held | SampleKind::Extrapolated
            ));
        }
    }
}

/// How fast a match runs: frames per second of the server (and of the clients unless the
/// options pace them), and how often clients shoot.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pace {
    /// Frames per second of the server, and of the clients unless `--client-fps` sets theirs
    /// (the tick rate is 60 Hz).
    pub frame_rate_hz: f64,
    /// Seconds between two shots of one client (clients take turns: client `i` starts
    /// `7 × i / 240` s later in the cycle).
    pub fire_interval: f64,
}

impl Default for Pace {
    /// The report's pace: 240 fps, a shot every 0.15 s (6.7 shots/s per client).
    fn default() -> Self {
        Self {
            frame_rate_hz: 240.0,
            fire_interval: 0.15,
        }
    }
}

/// Builds the match of `options` at `pace`, connects every client, spawns the characters and
/// bots, plays the warm-up and sets the scripts running: from the returned testbed's next step
/// on, the server's cost per tick is measured (see [`server_cost`]). Any number of clients
/// may be asked for here (the option's range is the report's).
pub fn start_match(options: &ReportOptions, pace: Pace) -> Result<Testbed, OptionError> {
    start_match_with(options, pace, |_| {})
}

/// [`start_match`], with `add` called once the match's plugins are in and before anything
/// runs: to add a game's own plugins and resources to the server and the clients.
pub fn start_match_with(
    options: &ReportOptions,
    pace: Pace,
    add: impl FnOnce(&mut Testbed),
) -> Result<Testbed, OptionError> {
    let conditions = options.conditions()?;
    let mut tb = Testbed::new(TestbedConfig {
        clients: options.clients,
        conditions,
        seed: options.seed,
        loss_burst: options.burst as f32,
        frame_rate_hz: pace.frame_rate_hz,
        client_pace: options.client_pace(),
        listen: options.listen,
        ..default()
    });
    tb.server().add_plugins(asset_plugin());
    for i in 0..options.clients {
        tb.client(i).add_plugins(asset_plugin());
    }
    tb.add_plugins(RapierFixedPlugin::default())
        .add_plugins(MovementPredictionPlugin::<CharacterMovement>::new(
            MovementSettings {
                playout: unlag::core::PlayoutSettings {
                    enabled: options.playout,
                    ..default()
                },
                ..default()
            },
        ))
        .add_plugins(ProxySmoothingPlugin {
            settings: SmoothingSettings {
                default_mode: options.smoothing,
                ..default()
            },
        })
        .add_plugins(RewindPlugin::default())
        .add_plugins(CombatPlugin {
            settings: CombatSettings {
                weapons_path: Some(unlag_demo::game::WEAPONS.into()),
                ..default()
            },
        })
        .add_plugins(CharacterProxyPlugin);
    add(&mut tb);
    tb.server().add_systems(FixedUpdate, drive_bots);
    add_stopwatch(tb.server());
    if options.compare_validation {
        tb.server()
            .init_resource::<unlag::combat::ShotLog>()
            .init_resource::<compare::Compared>()
            .add_systems(
                Update,
                compare::compare_validation.after(unlag::combat::CombatSystems::Server),
            );
    }
    tb.client(0).add_systems(Update, cheat::cheat);
    for i in 0..options.clients {
        add_client_script(tb.client(i));
        tb.client(i)
            .init_resource::<Ledger>()
            .add_systems(PreUpdate, give_proxies_boxes)
            .add_systems(Update, keep.after(unlag::combat::CombatSystems::Client));
    }
    spawn_map(tb.server_world_mut());
    for i in 0..options.clients {
        spawn_map(tb.client_world_mut(i));
    }
    if !tb.run_until(Duration::from_secs(10), |tb| tb.all_synced()) {
        return Err(OptionError("the clients never connected".into()));
    }
    // Characters: one per client, and the bots.
    let layout: Handle<unlag::rewind::HitBoxLayout> =
        tb.server_world().resource::<AssetServer>().load(HUMANOID);
    for i in 0..options.clients {
        let owner = tb.server_link(i).expect("connected");
        tb.server_world_mut().spawn((
            MovementState::<CharacterMovement>(CharacterState {
                feet: spawn_point(i, options.clients),
                ..default()
            }),
            UseHitBoxLayout(layout.clone()),
            Health::new(1e9),
            Replicate::to_clients(NetworkTarget::All),
            ControlledBy {
                owner,
                lifetime: Lifetime::default(),
            },
        ));
    }
    let mut rng = SplitMix64::new(options.seed);
    for k in 0..options.bots {
        tb.server_world_mut().spawn((
            bot(k, options.bots, &mut rng),
            Transform::default(),
            SmoothedProxy,
            ProxyFlags::default(),
            UseHitBoxLayout(layout.clone()),
            Health::new(1e9),
            Replicate::to_clients(NetworkTarget::All),
        ));
    }
    tb.run_for(Duration::from_secs_f64(WARM_UP));
    // The weapons, as the clients loaded them.
    let ids = {
        let weapons = tb.client_world(0).resource::<Weapons>();
        let table = weapons
            .table
            .as_ref()
            .ok_or_else(|| OptionError("assets/weapons.ron did not load".into()))?;
        [table.id("rifle"), table.id("shotgun"), table.id("launcher")]
    };
    let [Some(rifle), Some(shotgun), Some(launcher)] = ids else {
        return Err(OptionError(
            "assets/weapons.ron lacks a rifle, shotgun or launcher".into(),
        ));
    };
    for i in 0..options.clients {
        let start = tb.client_world(i).resource::<Time>().elapsed_secs_f64();
        let turn = (i as f64 * 7.0 / 240.0) % pace.fire_interval;
        tb.client(i).insert_resource(ClientScript {
            rng: SplitMix64::new(options.seed.wrapping_mul(31).wrapping_add(i as u64)),
            next_shot: start + pace.fire_interval - turn,
            interval: pace.fire_interval,
            weapons: [rifle, shotgun, launcher],
            running: true,
            // A cheater sends shots of its own.
            shoots: !(i == 0 && options.cheat.is_some_and(|c| c.shoots())),
        });
    }
    if let Some(c) = options.cheat {
        tb.client(0).insert_resource(cheat::Cheater::new(c));
        cheat::start_movement_cheat(tb.client_world_mut(0), c);
        cheat::start_link_cheat(&mut tb, c);
    }
    // Measure from here.
    tb.reset_measures();
    *tb.server_world_mut().resource_mut::<CombatStats>() = default();
    if options.compare_validation {
        *tb.server_world_mut().resource_mut::<compare::Compared>() = default();
    }
    *tb.server_world_mut().resource_mut::<MovementStats>() = default();
    tb.server_world_mut().resource_mut::<Stopwatch>().measuring = true;
    for i in 0..options.clients {
        *tb.client_world_mut(i).resource_mut::<MovementStats>() = default();
        *tb.client_world_mut(i).resource_mut::<Ledger>() = default();
    }
    Ok(tb)
}

/// Runs the match of `options` and measures it; `progress` hears the share done (0–1) now
/// and then.
pub fn run(options: &ReportOptions, progress: &mut dyn FnMut(f64)) -> Result<Report, OptionError> {
    let mut tb = start_match(options, Pace::default())?;
    let mut proxies = ProxySamples::default();
    let wall = Instant::now();
    let frame = tb.frame().as_secs_f64();
    let frames = (options.seconds / frame).round() as u64;
    let mut drawn: Vec<u64> = (0..options.clients).map(|i| tb.client_frames(i)).collect();
    for f in 0..frames {
        tb.step();
        // Once per frame a client drew (a slow client draws fewer than the server runs).
        for (i, drawn) in drawn.iter_mut().enumerate() {
            if tb.client_frames(i) != *drawn {
                *drawn = tb.client_frames(i);
                proxies.sample(&tb, i);
            }
        }
        if f % 240 == 0 {
            progress(f as f64 / frames as f64);
        }
    }
    let wall_seconds = wall.elapsed().as_secs_f64();
    tb.server_world_mut().resource_mut::<Stopwatch>().measuring = false;
    let measures: Vec<_> = (0..options.clients).map(|i| tb.measures(i)).collect();
    let corrections: Vec<u64> = (0..options.clients)
        .map(|i| {
            tb.client_world(i)
                .resource::<MovementStats>()
                .corrections_received
        })
        .collect();
    // Let the last verdicts arrive.
    for i in 0..options.clients {
        tb.client_world_mut(i)
            .resource_mut::<ClientScript>()
            .running = false;
    }
    tb.run_for(Duration::from_secs_f64(COOL_DOWN));

    let mut report = Report {
        disconnects: measures.iter().filter(|m| !m.connected).count(),
        seconds: options.seconds,
        simulated_per_wall_second: options.seconds / wall_seconds.max(1e-9),
        ..default()
    };
    report.options = BTreeMap::from([
        ("bots", options.bots.to_string()),
        ("clients", options.clients.to_string()),
        ("seconds", options.seconds.to_string()),
        ("rtt_ms", options.rtt_ms.to_string()),
        ("jitter_ms", options.jitter_ms.to_string()),
        ("loss_percent", options.loss_percent.to_string()),
        ("burst", options.burst.to_string()),
        ("update_rate_hz", options.update_rate_hz.to_string()),
        ("smoothing", format!("{:?}", options.smoothing)),
        ("seed", options.seed.to_string()),
        (
            "client_fps",
            options
                .client_fps
                .map_or("server's".into(), |f| f.to_string()),
        ),
        (
            "frame_jitter_percent",
            options.frame_jitter_percent.to_string(),
        ),
        (
            "hitches",
            options.hitches.map_or("none".into(), |(p, ms)| {
                format!("{p} % of frames take {ms} ms")
            }),
        ),
        (
            "server",
            if options.listen {
                "listen"
            } else {
                "dedicated"
            }
            .into(),
        ),
        ("playout", if options.playout { "on" } else { "off" }.into()),
        (
            "cheat",
            options.cheat.map_or("none".into(), |c| c.name().to_owned()),
        ),
    ]);
    // Movement.
    report.corrections_per_min = corrections
        .iter()
        .map(|c| *c as f64 * 60.0 / options.seconds)
        .collect();
    let distances: Vec<f64> = (0..options.clients)
        .flat_map(|i| tb.client_world(i).resource::<Ledger>().corrections.clone())
        .collect();
    report.correction_distance_m = Stat::of(&distances, 1.0);
    report.movement_rejected = tb
        .server_world()
        .resource::<MovementStats>()
        .rejected_total();
    report.speed_hacks_flagged = tb
        .server_world()
        .resource::<MovementStats>()
        .speed_hacks_flagged;
    report.cheat = options.cheat.map(|c| c.name().to_owned());
    {
        let combat = tb.server_world().resource::<CombatStats>();
        report.stale_claims = combat.stale_claims;
        report.unexplained_eases = combat.unexplained_eases;
    }
    report.cheating_shots = tb
        .client_world(0)
        .get_resource::<cheat::Cheater>()
        .map_or(0, |c| c.sent);
    // Smoothing.
    report.proxy_error_m = Stat::of(&proxies.errors, 1.0);
    report.proxy_max_jump_m = proxies.jumps.iter().copied().fold(0.0, f64::max);
    report.proxy_max_pop_m = proxies.pops.iter().copied().fold(0.0, f64::max);
    report.interpolation_delay_ms = Stat::of(&proxies.delays, 1000.0);
    report.starved_share = proxies.starved as f64 / proxies.frames.max(1) as f64;
    // Combat.
    let table = tb
        .client_world(0)
        .resource::<Weapons>()
        .table
        .clone()
        .expect("loaded above");
    for (id, spec) in table.weapons.iter().enumerate() {
        if matches!(spec.kind, WeaponKind::Projectile { .. }) {
            continue;
        }
        let mut a = Agreement {
            weapon: spec.name.clone(),
            ..default()
        };
        for i in 0..options.clients {
            agree(tb.client_world(i).resource::<Ledger>(), id as u8, &mut a);
        }
        report.agreement.push(a);
    }
    let stats = tb.server_world().resource::<CombatStats>().clone();
    report.projectiles.launched = stats.projectiles;
    for i in 0..options.clients {
        for impact in &tb.client_world(i).resource::<Ledger>().impacts {
            report.projectiles.impacts += 1;
            report.projectiles.direct_hits +=
                u64::from(impact.0.hits.iter().any(|h| h.pellets > 0));
            report.projectiles.splash_hits +=
                impact.0.hits.iter().filter(|h| h.pellets == 0).count() as u64;
        }
    }
    report.rejected = stats
        .rejected
        .iter()
        .map(|(reason, n)| (format!("{reason:?}"), *n))
        .collect();
    if options.compare_validation {
        report.validation = compare_agreement(&tb, options.clients);
    }
    // Bandwidth.
    let n = measures.len().max(1) as f64;
    // The clients' clocks: their estimate of the server's time less the truth, each frame.
    report.clock_error_ms = [
        measures
            .iter()
            .map(|m| m.server_time_error.mean)
            .sum::<f64>()
            / n
            * 1e3,
        measures
            .iter()
            .map(|m| m.server_time_error.min)
            .fold(f64::INFINITY, f64::min)
            * 1e3,
        measures
            .iter()
            .map(|m| m.server_time_error.max)
            .fold(f64::NEG_INFINITY, f64::max)
            * 1e3,
    ];
    report.bytes_up_per_sec = measures.iter().map(|m| m.bytes_up_per_sec).sum::<f64>() / n;
    report.bytes_down_per_sec = measures.iter().map(|m| m.bytes_down_per_sec).sum::<f64>() / n;
    for m in &measures {
        for k in &m.up_by_kind {
            *report.up_by_kind.entry(k.kind.to_string()).or_default() += k.bytes_per_sec / n;
        }
        for k in &m.down_by_kind {
            *report.down_by_kind.entry(k.kind.to_string()).or_default() += k.bytes_per_sec / n;
        }
    }
    // Server.
    report.server_cost = server_cost(&tb);
    // The peeks run a match of their own, after this one.
    drop(tb);
    report.peek = peek::measure(options, PEEKS)?;
    progress(1.0);
    Ok(report)
}

/// Every method's agreement with what each client saw, pellet by pellet.
fn compare_agreement(tb: &Testbed, clients: usize) -> Vec<compare::MethodAgreement> {
    let mut methods: Vec<compare::MethodAgreement> = compare::METHODS
        .iter()
        .map(|m| compare::MethodAgreement {
            method: (*m).to_owned(),
            ..default()
        })
        .collect();
    let compared = tb.server_world().resource::<compare::Compared>();
    for i in 0..clients {
        let Some(link) = tb.server_link(i) else {
            continue;
        };
        let client = tb.client_world(i);
        let Some(map) = client.get_resource::<ServerEntityMap>() else {
            continue;
        };
        for shot in &client.resource::<Ledger>().seen {
            let Some(judged) = compared
                .shots
                .iter()
                .find(|s| s.link == link && s.fire_index == shot.fire_index)
            else {
                continue;
            };
            for (k, seen) in shot.hits.iter().enumerate() {
                let seen = seen
                    .as_ref()
                    .map(|h| map.to_server().get(&h.target).copied());
                for (m, answers) in methods.iter_mut().zip(&judged.answers) {
                    let answer = answers.get(k).copied().flatten();
                    match seen {
                        Some(target) => {
                            m.seen_hits += 1;
                            m.hits_confirmed += u64::from(target.is_some() && answer == target);
                        }
                        None => {
                            m.seen_misses += 1;
                            m.misses_confirmed += u64::from(answer.is_some());
                        }
                    }
                }
            }
        }
    }
    methods
}

/// Adds client `ledger`'s shots of weapon `weapon` to `a`.
pub(crate) fn agree(ledger: &Ledger, weapon: u8, a: &mut Agreement) {
    for shot in ledger.seen.iter().filter(|s| s.weapon == weapon) {
        let Some(verdict) = ledger
            .verdicts
            .iter()
            .find(|v| v.fire_index == shot.fire_index)
        else {
            continue;
        };
        a.shots += 1;
        let confirmed = match &verdict.outcome {
            Ok(hits) => hits.clone(),
            Err(_) => {
                a.refused += 1;
                Vec::new()
            }
        };
        let mut seen: Vec<(Entity, u64, bool)> = Vec::new();
        // Hits on a body the shooter expected dead promise nothing (nor are they misses).
        let unpromised: Vec<Entity> = shot
            .hits
            .iter()
            .flatten()
            .filter(|h| h.expected_dead)
            .map(|h| h.target)
            .collect();
        for hit in shot.hits.iter().flatten().filter(|h| !h.expected_dead) {
            match seen.iter_mut().find(|s| s.0 == hit.target) {
                Some(s) => {
                    s.1 += 1;
                    s.2 |= hit.headshot;
                }
                None => seen.push((hit.target, 1, hit.headshot)),
            }
        }
        a.seen_misses += shot.hits.iter().filter(|h| h.is_none()).count() as u64;
        for (target, pellets, headshot) in &seen {
            a.seen_hits += pellets;
            a.headshots_seen += u64::from(*headshot);
            if let Some(c) = confirmed.iter().find(|c| c.target == *target) {
                let p = u64::from(c.pellets);
                a.hits_confirmed += p.min(*pellets);
                a.misses_confirmed += p.saturating_sub(*pellets);
                a.headshots_agree += u64::from(*headshot && c.headshot);
            }
        }
        for c in &confirmed {
            if !seen.iter().any(|s| s.0 == c.target) && !unpromised.contains(&c.target) {
                a.misses_confirmed += u64::from(c.pellets);
            }
        }
    }
}

impl Report {
    /// The figures as a two-column Markdown table.
    pub fn table(&self) -> String {
        let mut rows: Vec<(String, String)> = Vec::new();
        let mut row = |figure: &str, value: String| rows.push((figure.to_owned(), value));
        let o = &self.options;
        let get = |k: &str| o.get(k).cloned().unwrap_or_default();
        row(
            "match",
            format!(
                "{} bots, {} clients, {} s, RTT {} ms, jitter {} ms, loss {} % (bursts of {}), {} Hz, {}, seed {}",
                get("bots"),
                get("clients"),
                get("seconds"),
                get("rtt_ms"),
                get("jitter_ms"),
                get("loss_percent"),
                get("burst"),
                get("update_rate_hz"),
                get("smoothing"),
                get("seed")
            ),
        );
        row(
            "clients and server",
            format!(
                "client frames: {} fps, {} % jitter, hitches {}; {} server, move playout {}",
                get("client_fps"),
                get("frame_jitter_percent"),
                get("hitches"),
                get("server"),
                get("playout")
            ),
        );
        row(
            "corrections / min per client",
            self.corrections_per_min
                .iter()
                .map(|c| format!("{c:.1}"))
                .collect::<Vec<_>>()
                .join(", "),
        );
        row(
            "correction distance (max, p99)",
            format!(
                "{:.3} m, {:.3} m ({} corrections)",
                self.correction_distance_m.max,
                self.correction_distance_m.p99,
                self.correction_distance_m.count
            ),
        );
        row(
            "proxy error at view time (RMS, p99)",
            format!(
                "{:.1} mm, {:.1} mm ({} proxy frames)",
                self.proxy_error_m.rms * 1e3,
                self.proxy_error_m.p99 * 1e3,
                self.proxy_error_m.count
            ),
        );
        row(
            "largest per-frame jump of the error (its growth beyond the character's own motion)",
            format!(
                "{:.1} mm ({:.1} mm)",
                self.proxy_max_jump_m * 1e3,
                self.proxy_max_pop_m * 1e3
            ),
        );
        row(
            "clients' server-time estimate less the truth (mean, least, most)",
            format!(
                "{:.1} ms, {:.1} ms, {:.1} ms",
                self.clock_error_ms[0], self.clock_error_ms[1], self.clock_error_ms[2]
            ),
        );
        row(
            "interpolation delay (mean, max)",
            format!(
                "{:.1} ms, {:.1} ms",
                self.interpolation_delay_ms.mean, self.interpolation_delay_ms.max
            ),
        );
        row(
            "proxy frames held or extrapolated",
            format!("{:.2} %", self.starved_share * 100.0),
        );
        let p = &self.peek;
        row(
            "peeker's advantage (mean, p95)",
            format!(
                "{:.1} ms, {:.1} ms over {} peeks; parts: one-way up {:.1} + input wait {:.1} + playout {:.1} + tick wait {:.1} + one-way down {:.1} + holder's delay {:.1} + frames {:.1} = {:.1} ms (state interval {:.1} ms, covered by the delay)",
                p.advantage_ms.mean,
                p.advantage_ms.p95,
                p.peeks,
                p.one_way_up_ms,
                p.input_buffer_ms,
                p.playout_ms,
                p.tick_wait_ms,
                p.one_way_down_ms,
                p.holder_delay_ms,
                p.frames_ms,
                p.parts_ms,
                p.send_interval_ms
            ),
        );
        for a in &self.agreement {
            row(
                &format!("hit agreement: {}", a.weapon),
                format!(
                    "seen hits confirmed {:.2} % ({}/{}), seen misses confirmed {:.2} % ({}/{}), headshots {}/{}, {} shots",
                    a.hit_rate() * 100.0,
                    a.hits_confirmed,
                    a.seen_hits,
                    a.miss_rate() * 100.0,
                    a.misses_confirmed,
                    a.seen_misses,
                    a.headshots_agree,
                    a.headshots_seen,
                    a.shots
                ),
            );
        }
        let p = &self.projectiles;
        row(
            "projectiles",
            format!(
                "{} launched, {} impacts, {} direct hits, {} splash hits",
                p.launched, p.impacts, p.direct_hits, p.splash_hits
            ),
        );
        row("clients disconnected", self.disconnects.to_string());
        row(
            "rejected shots by reason",
            if self.rejected.is_empty() {
                "none".into()
            } else {
                self.rejected
                    .iter()
                    .map(|(r, n)| format!("{r} {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        );
        row(
            "claims not judged as drawn",
            format!(
                "{} held past their extrapolation (never hits), {} eases no starved frame explains (judged on the curve)",
                self.stale_claims, self.unexplained_eases
            ),
        );
        row(
            "rejected moves, speed hacks flagged",
            format!("{}, {}", self.movement_rejected, self.speed_hacks_flagged),
        );
        if let Some(cheat) = &self.cheat {
            row(
                "cheat (client 0)",
                format!(
                    "{cheat}: {} cheating shots sent, {} shots refused, {} speed hacks flagged, {:.1} corrections/min, {} held claims never hits, {} eases judged as none",
                    self.cheating_shots,
                    self.rejected.values().sum::<u64>(),
                    self.speed_hacks_flagged,
                    self.corrections_per_min.first().copied().unwrap_or(0.0),
                    self.stale_claims,
                    self.unexplained_eases
                ),
            );
        }
        let kinds = |m: &BTreeMap<String, f64>| {
            let mut v: Vec<_> = m.iter().collect();
            v.sort_by(|a, b| b.1.total_cmp(a.1));
            v.iter()
                .map(|(k, b)| format!("{k} {b:.0}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        row(
            "upstream bytes/s per client",
            format!(
                "{:.0} on the wire; payload: {}",
                self.bytes_up_per_sec,
                kinds(&self.up_by_kind)
            ),
        );
        row(
            "downstream bytes/s per client",
            format!(
                "{:.0} on the wire; payload: {}",
                self.bytes_down_per_sec,
                kinds(&self.down_by_kind)
            ),
        );
        let c = &self.server_cost;
        for (part, stat) in [
            ("movement", &c.movement_us),
            ("history recording", &c.record_us),
            ("shots and rewinds", &c.combat_us),
            ("proxy states", &c.proxy_states_us),
        ] {
            row(
                &format!("server µs per tick: {part} (mean, p99)"),
                format!("{:.1}, {:.1}", stat.mean, stat.p99),
            );
        }
        row(
            "server µs per tick: receiving, sending (means)",
            format!("{:.1}, {:.1}", c.receive_us.mean, c.send_us.mean),
        );
        row(
            "server µs per tick: whole update (mean, p99)",
            format!("{:.1}, {:.1}", c.total_us.mean, c.total_us.p99),
        );
        for m in &self.validation {
            row(
                &format!("validation: {}", m.method),
                format!(
                    "seen hits confirmed {:.2} % ({}/{}), seen misses confirmed {:.2} % ({}/{})",
                    m.hit_rate() * 100.0,
                    m.hits_confirmed,
                    m.seen_hits,
                    m.miss_rate() * 100.0,
                    m.misses_confirmed,
                    m.seen_misses
                ),
            );
        }
        row(
            "simulated seconds per wall second",
            format!("{:.1}", self.simulated_per_wall_second),
        );
        let mut out = String::from("| figure | value |\n| --- | --- |\n");
        for (figure, value) in rows {
            out.push_str(&format!("| {figure} | {value} |\n"));
        }
        out
    }

    /// The figures as one JSON object.
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).expect("plain data")
    }
}
