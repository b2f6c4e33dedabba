//! Headless scripted players of the shooter that join a dedicated server (`shooter --server`)
//! over real UDP: the report's scripted client (walks a figure of eight, fires at what it
//! draws), in a separate process from the server. The `loadtest` example runs them beside a
//! flood or for a soak (and, next, for the report's figures from real processes).

use bevy::prelude::*;
use bevy::state::app::StatesPlugin;
use core::net::SocketAddr;
use unlag::combat::Weapons;
use unlag::core::{LinkConditions, SplitMix64};
use unlag::movement::MovementStats;
use unlag::net::{NetClock, NetConditions};
use unlag_demo::game::{Scoreboard, ShooterPlugins, ShooterSettings};
use unlag_demo::hud::Hud;
use unlag_demo::key::ServerKey;
use unlag_demo::session;

use crate::arena::{ClientScript, add_client_script, client_shoots};

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
    })
    .insert_resource(PendingScript(plan.clone()))
    .init_resource::<Respawns>()
    .add_systems(Last, sort_corrections)
    .add_systems(Update, arm_script.before(client_shoots));
    add_client_script(&mut app);
    session::join_udp(&mut app, addr, plan.id, key);
    unlag_testbed::finish_app(&mut app);
    app
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
    /// Real time it last came back to life on the scoreboard, seconds.
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
    time: Res<Time<Real>>,
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
}

/// `app`'s [`PlayerSummary`] now.
pub fn summary(app: &App) -> PlayerSummary {
    let world = app.world();
    let respawns = world.get_resource::<Respawns>().map_or(0, |r| r.respawns);
    let hud = world.get_resource::<Hud>();
    let clock = world.get_resource::<NetClock>();
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
    }
}
