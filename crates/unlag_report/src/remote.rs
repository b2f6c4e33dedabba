//! Headless scripted players of the shooter that join a dedicated server (`shooter --server`)
//! over real UDP: the report's scripted client (walks a figure of eight, fires at what it
//! draws), in a separate process from the server. The `loadtest` example runs them beside a
//! flood or for a soak, and with `--compare` sets their figures beside the same players'
//! in one process ([`testbed_match`]).

use bevy::prelude::*;
use bevy::state::app::StatesPlugin;
use core::net::SocketAddr;
use lightyear::prelude::client::Client;
use unlag::combat::{WeaponKind, Weapons};
use unlag::core::{LinkConditions, SplitMix64};
use unlag::movement::MovementStats;
use unlag::net::{LinkTraffic, NetClock, NetConditions};
use unlag_demo::NetPanel;
use unlag_demo::game::{Scoreboard, ShooterPlugins, ShooterSettings};
use unlag_demo::hud::Hud;
use unlag_demo::key::ServerKey;
use unlag_demo::session;
use unlag_testbed::{ClientPace, Testbed, TestbedConfig};

use crate::Agreement;
use crate::arena::{ClientScript, add_client_script, client_shoots};
use crate::measure::{Ledger, agree, keep};

/// How a [`udp_player`] plays.
#[derive(Clone, Debug)]
pub struct PlayerPlan {
    /// Its client id on the server (unique per server).
    pub id: u64,
    /// Seed of its aims, its weapon choices and its link conditioner.
    pub seed: u64,
    /// Conditions its link conditioner simulates, both directions.
    pub conditions: LinkConditions,
    /// Seconds between two shots.
    pub fire_interval: f64,
}

/// A headless App that joins the shooter's dedicated server at `addr` with `key` as the
/// scripted player `plan` once it is updated. Its plugins are finished: step it with
/// [`App::update`] (it has no loop of its own;
/// [`ScheduleRunnerPlugin`](bevy::app::ScheduleRunnerPlugin) is left out so that several
/// players share one thread).
pub fn udp_player(addr: SocketAddr, key: &ServerKey, plan: &PlayerPlan) -> App {
    let mut app = App::new();
    app.add_plugins((
        MinimalPlugins
            .build()
            .disable::<bevy::app::ScheduleRunnerPlugin>(),
        StatesPlugin,
        unlag_demo::asset_plugin(),
    ));
    session::client_net(&mut app, plan.seed);
    app.insert_resource(
        NetConditions::new(plan.conditions, plan.seed).expect("conditions checked by the caller"),
    )
    .add_plugins(ShooterPlugins {
        settings: ShooterSettings::default(),
    });
    add_player(&mut app, plan);
    session::join_udp(&mut app, addr, plan.id, key);
    unlag_testbed::finish_app(&mut app);
    app
}

/// The same players in one process: a [`Testbed`] whose server runs the shooter's rules as
/// `shooter --server` does (its bots, health, respawns) and whose client `i` plays `plans[i]`
/// over the testbed's simulated link (`plans[0].conditions`, each way, applied by the
/// transport) at a steady `fps`. Step it with [`Testbed::step`]; read each player with
/// [`summary`] of its App.
pub fn testbed_match(plans: &[PlayerPlan], fps: f64, seed: u64) -> Testbed {
    let conditions = plans
        .first()
        .map_or_else(LinkConditions::default, |p| p.conditions);
    let mut tb = Testbed::new(TestbedConfig {
        clients: plans.len(),
        conditions,
        seed,
        client_pace: Some(ClientPace::steady(fps)),
        ..default()
    });
    tb.server()
        .add_plugins(unlag_demo::asset_plugin())
        .insert_resource(NetPanel::default());
    tb.add_plugins(ShooterPlugins {
        settings: ShooterSettings::default(),
    });
    for (i, plan) in plans.iter().enumerate() {
        tb.client(i).add_plugins(unlag_demo::asset_plugin());
        add_player(tb.client(i), plan);
    }
    tb
}

/// Makes a client App that has the shooter's plugins the scripted player `plan`: its net
/// panel shows the plan's link conditions (the panel is applied to the link when it changes,
/// so a default one would undo them), the script starts once the weapon table has loaded, and
/// from then on the App measures what [`summary`] reports.
pub fn add_player(app: &mut App, plan: &PlayerPlan) {
    let c = plan.conditions;
    app.insert_resource(NetPanel {
        rtt_ms: c.latency.as_secs_f64() * 1e3,
        jitter_ms: c.jitter.as_secs_f64() * 1e3,
        loss_percent: f64::from(c.loss) * 100.0,
        ..default()
    })
    .insert_resource(PendingScript(plan.clone()))
    .init_resource::<Respawns>()
    .init_resource::<Ledger>()
    .init_resource::<Measured>()
    .add_systems(Last, (sort_corrections, measure))
    .add_systems(
        Update,
        (
            arm_script.before(client_shoots),
            keep.after(unlag::combat::CombatSystems::Client),
        ),
    );
    add_client_script(app);
}

/// The plan until the weapon table has loaded and the script can start.
#[derive(Resource)]
struct PendingScript(PlayerPlan);

fn arm_script(
    mut commands: Commands,
    pending: Option<Res<PendingScript>>,
    weapons: Res<Weapons>,
    time: Res<Time>,
) {
    let Some(pending) = pending else {
        return;
    };
    let Some(table) = weapons.table.as_ref() else {
        return;
    };
    let [Some(rifle), Some(shotgun), Some(launcher)] =
        [table.id("rifle"), table.id("shotgun"), table.id("launcher")]
    else {
        return;
    };
    let plan = &pending.0;
    commands.insert_resource(ClientScript {
        rng: SplitMix64::new(plan.seed.wrapping_mul(31)),
        next_shot: time.elapsed_secs_f64() + plan.fire_interval,
        interval: plan.fire_interval,
        weapons: [rifle, shotgun, launcher],
        running: true,
        shoots: true,
    });
    commands.remove_resource::<PendingScript>();
}

/// A player's corrections, told apart: a respawn moves the character on the server, which
/// reaches the client as a correction like any other.
#[derive(Resource, Default, Debug)]
struct Respawns {
    /// Whether the scoreboard showed the player alive last frame.
    alive: bool,
    /// Game time it last came back to life on the scoreboard, seconds.
    revived_at: f64,
    /// Corrections that came with a respawn.
    respawns: u64,
}

/// Seconds after the scoreboard shows a respawn within which a correction is the respawn's:
/// the status (4 a second) and the correction travel separately.
const RESPAWN_WINDOW: f64 = 1.0;

/// `Last`: a correction applied while the scoreboard shows the player dead (its respawn's
/// status not in yet) or within [`RESPAWN_WINDOW`] of its coming back is the respawn's.
fn sort_corrections(
    mut applied: MessageReader<unlag::movement::CorrectionApplied>,
    mut respawns: ResMut<Respawns>,
    board: Res<Scoreboard>,
    own: Query<Entity, With<unlag::net::AutonomousProxy>>,
    time: Res<Time>,
) {
    let now = time.elapsed_secs_f64();
    let alive = own
        .iter()
        .next()
        .and_then(|e| board.get(e))
        .is_none_or(|f| f.alive);
    if alive && !respawns.alive {
        respawns.revived_at = now;
    }
    respawns.alive = alive;
    for _ in applied.read() {
        if !alive || now - respawns.revived_at <= RESPAWN_WINDOW {
            respawns.respawns += 1;
        }
    }
}

/// What a player measures from the frame its script starts: its link's bytes, its RTT.
#[derive(Resource, Default, Debug)]
struct Measured {
    /// Game time the script started, seconds (`None` before it has).
    since: Option<f64>,
    /// Game time of the last frame measured, seconds.
    now: f64,
    /// Bytes and datagrams its link had sent and received (on the wire, headers included)
    /// when the script started: bytes sent, bytes received, datagrams sent, received.
    base: [u64; 4],
    /// The same, at the last frame measured.
    now_counts: [u64; 4],
    /// Frames it has run since the script started.
    frames: u64,
    /// Sum over the frames measured while synced of the RTT the client measured, seconds.
    rtt_sum: f64,
    /// Frames measured while synced.
    synced_frames: u64,
}

/// `Last`: once the script has started, the link's byte counts and the RTT, each frame.
fn measure(
    time: Res<Time>,
    script: Option<Res<ClientScript>>,
    clock: Option<Res<NetClock>>,
    link: Query<&LinkTraffic, With<Client>>,
    mut measured: ResMut<Measured>,
) {
    let Some(traffic) = link.iter().next() else {
        return;
    };
    let counts = [
        traffic.bytes_sent,
        traffic.bytes_received,
        traffic.datagrams_sent,
        traffic.datagrams_received,
    ];
    if measured.since.is_none() {
        if script.is_none() {
            return;
        }
        measured.since = Some(time.elapsed_secs_f64());
        measured.base = counts;
    } else {
        measured.frames += 1;
    }
    measured.now = time.elapsed_secs_f64();
    measured.now_counts = counts;
    if let Some(clock) = clock.filter(|c| c.synced) {
        measured.rtt_sum += clock.rtt;
        measured.synced_frames += 1;
    }
}

/// How a match went for one [`udp_player`], from its own App.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlayerSummary {
    /// Whether it is connected (synced with the server's clock) now.
    pub connected: bool,
    /// Round trip it measures, seconds.
    pub rtt: f64,
    /// Shots it fired.
    pub shots: u64,
    /// Of them, refused by the server.
    pub refused: u64,
    /// Hits the server confirmed.
    pub confirmed: u64,
    /// Corrections of its movement the server sent, all told (a respawn is one: the server
    /// moves the character).
    pub corrections: u64,
    /// Of them, those that came with a respawn (applied while the scoreboard showed the
    /// player dead or within a second of its coming back).
    pub respawns: u64,
    /// Refusals by reason, for the log.
    pub refusals: String,
    /// Seconds measured: from the frame its script started (the weapon table loaded) to now.
    pub seconds: f64,
    /// Mean over those seconds' frames of the RTT it measured, seconds.
    pub rtt_mean: f64,
    /// Bytes per second its link sent (upstream, on the wire: lightyear's and netcode's headers
    /// included, UDP/IP's not) over those seconds.
    pub bytes_up_per_sec: f64,
    /// Bytes per second its link received (downstream, after the simulated loss).
    pub bytes_down_per_sec: f64,
    /// Datagrams per second its link sent.
    pub datagrams_up_per_sec: f64,
    /// Datagrams per second its link received (after the simulated loss).
    pub datagrams_down_per_sec: f64,
    /// Frames per second it ran over those seconds.
    pub fps: f64,
    /// Its hitscan shots (every weapon but projectiles, pooled): what it saw hit and miss
    /// against what the server confirmed.
    pub agreement: Agreement,
}

/// The [`PlayerSummary`] of the player whose App's World is `world`, now.
pub fn summary(world: &World) -> PlayerSummary {
    let respawns = world.get_resource::<Respawns>().map_or(0, |r| r.respawns);
    let hud = world.get_resource::<Hud>();
    let clock = world.get_resource::<NetClock>();
    let m = world.get_resource::<Measured>();
    let seconds = m
        .and_then(|m| m.since.map(|since| m.now - since))
        .unwrap_or(0.0);
    // A link that dropped and came back counts afresh: never below zero.
    let rate = |k: usize| {
        m.map_or(0.0, |m| {
            m.now_counts[k].saturating_sub(m.base[k]) as f64 / seconds.max(1e-9)
        })
    };
    PlayerSummary {
        connected: clock.is_some_and(|c| c.synced),
        rtt: clock.map_or(0.0, |c| c.rtt),
        shots: hud.map_or(0, |h| h.shots),
        refused: hud.map_or(0, |h| h.rejected),
        confirmed: hud.map_or(0, |h| h.confirmed_hits),
        corrections: world
            .get_resource::<MovementStats>()
            .map_or(0, |m| m.corrections_received),
        respawns,
        refusals: hud.map_or(String::new(), |h| {
            h.refusals
                .iter()
                .map(|(reason, n)| format!("{reason:?} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        }),
        seconds,
        rtt_mean: m.map_or(0.0, |m| m.rtt_sum / m.synced_frames.max(1) as f64),
        bytes_up_per_sec: rate(0),
        bytes_down_per_sec: rate(1),
        datagrams_up_per_sec: rate(2),
        datagrams_down_per_sec: rate(3),
        fps: m.map_or(0.0, |m| m.frames as f64 / seconds.max(1e-9)),
        agreement: hitscan_agreement(world),
    }
}

/// Whether the player whose App's World is `world` has started its script (and measuring).
pub fn started(world: &World) -> bool {
    world
        .get_resource::<Measured>()
        .is_some_and(|m| m.since.is_some())
}

/// The App's hitscan shots pooled into one [`Agreement`] (weapon "hitscan").
fn hitscan_agreement(world: &World) -> Agreement {
    let mut a = Agreement {
        weapon: "hitscan".into(),
        ..default()
    };
    let (Some(ledger), Some(table)) = (
        world.get_resource::<Ledger>(),
        world
            .get_resource::<Weapons>()
            .and_then(|w| w.table.as_ref()),
    ) else {
        return a;
    };
    for (id, spec) in table.weapons.iter().enumerate() {
        if !matches!(spec.kind, WeaponKind::Projectile { .. }) {
            agree(ledger, id as u8, &mut a);
        }
    }
    a
}
