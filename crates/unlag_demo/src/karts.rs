//! The karts' match, apart from its rendering (seed 001's kart on the same prediction and
//! smoothing plugins): a walled loop, a kart for every client that connects, and
//! server-driven bot karts lapping it.

use crate::shooter::spawn_wall;
use bevy::prelude::*;
use lightyear::prelude::server::ClientOf;
use lightyear::prelude::*;
use unlag::movement::{
    KartInput, KartMovement, KartState, MovementPredictionPlugin, MovementPredictionSystems,
    MovementState, NextMove, ServerDriven,
};
use unlag::smoothing::{ProxySmoothingPlugin, SmoothedProxy};

/// Half the track's outer size (x, z), metres: the outer walls' inner faces.
pub const TRACK_HALF: Vec2 = Vec2::new(40.0, 24.0);

/// Half the island in the middle (x, z), metres: the track is 14 m wide all round.
pub const ISLAND_HALF: Vec2 = Vec2::new(26.0, 10.0);

/// Height of a kart's centre above the floor, metres (half its box).
pub const KART_HEIGHT: f32 = 0.45;

/// The corners of the loop's centre line, anticlockwise seen from above, metres.
pub const RACING_LINE: [Vec2; 4] = [
    Vec2::new(33.0, 17.0),
    Vec2::new(33.0, -17.0),
    Vec2::new(-33.0, -17.0),
    Vec2::new(-33.0, 17.0),
];

/// Spawns the floor, the outer walls and the island as rapier colliders with a
/// [`Wall`](crate::shooter::Wall) marker, the same on every App.
pub fn spawn_track(world: &mut World) {
    let mut wall = |centre, half| spawn_wall(world, centre, half);
    wall(
        Vec3::new(0.0, -0.5, 0.0),
        Vec3::new(TRACK_HALF.x + 1.0, 0.5, TRACK_HALF.y + 1.0),
    );
    let (x, z) = (TRACK_HALF.x + 0.5, TRACK_HALF.y + 0.5);
    wall(Vec3::new(x, 1.0, 0.0), Vec3::new(0.5, 1.0, z + 0.5));
    wall(Vec3::new(-x, 1.0, 0.0), Vec3::new(0.5, 1.0, z + 0.5));
    wall(Vec3::new(0.0, 1.0, z), Vec3::new(x + 0.5, 1.0, 0.5));
    wall(Vec3::new(0.0, 1.0, -z), Vec3::new(x + 0.5, 1.0, 0.5));
    wall(
        Vec3::new(0.0, 1.0, 0.0),
        Vec3::new(ISLAND_HALF.x, 1.0, ISLAND_HALF.y),
    );
}

/// A bot kart's driver: heads for the next corner of [`RACING_LINE`].
#[derive(Component, Clone, Copy, Debug, PartialEq)]
pub struct KartBot {
    /// The corner it heads for.
    pub next: usize,
    /// Its top throttle, tenths (bots differ a little).
    pub throttle: i8,
}

impl KartBot {
    /// The input that takes a kart at `state` towards its next corner (moving on to the one
    /// after within 9 m): steering towards it, slowing into turns.
    pub fn next_input(&mut self, state: &KartState) -> KartInput {
        let at = Vec2::new(state.position.x, state.position.z);
        if at.distance(RACING_LINE[self.next]) < 9.0 {
            self.next = (self.next + 1) % RACING_LINE.len();
        }
        let to = RACING_LINE[self.next] - at;
        let want = f32::atan2(-to.x, -to.y);
        let off = (want - state.yaw + core::f32::consts::PI).rem_euclid(core::f32::consts::TAU)
            - core::f32::consts::PI;
        KartInput {
            throttle: if off.abs() > 0.6 { 5 } else { self.throttle },
            steering: (off * 12.0).round().clamp(-10.0, 10.0) as i8,
        }
    }
}

/// Where kart `k` starts: on the grid, on the track's straight at +x.
pub fn grid_slot(k: usize) -> Vec3 {
    let row = (k / 2) as f32;
    let side = if k.is_multiple_of(2) { -3.0 } else { 3.0 };
    Vec3::new(33.0 + side, KART_HEIGHT, 10.0 - row * 5.0)
}

/// Server, on a client's link: its kart.
#[derive(Component, Clone, Copy, Debug)]
pub struct PlayerKart(pub Entity);

/// The karts' rules: the track on every App; on the server, bot karts and a kart for every
/// client that connects. Needs the kart movement plugin.
#[derive(Clone, Debug)]
pub struct KartGamePlugin {
    /// Bot karts.
    pub bots: usize,
}

impl Plugin for KartGamePlugin {
    fn build(&self, app: &mut App) {
        let bots = self.bots;
        app.add_systems(Startup, spawn_track)
            .add_systems(
                Update,
                (
                    (move |commands: Commands, done: Local<bool>| {
                        spawn_bot_karts(commands, done, bots)
                    }),
                    spawn_player_karts,
                )
                    .run_if(any_with_component::<lightyear::prelude::server::Server>),
            )
            .add_systems(
                FixedUpdate,
                drive_kart_bots
                    .run_if(any_with_component::<lightyear::prelude::server::Server>)
                    .before(MovementPredictionSystems::Simulate),
            );
    }
}

fn kart_bundle(position: Vec3) -> impl Bundle {
    (
        MovementState::<KartMovement>(KartState {
            position,
            // Facing −z, down the straight.
            yaw: 0.0,
            ..default()
        }),
        SmoothedProxy,
        Replicate::to_clients(NetworkTarget::All),
    )
}

fn spawn_bot_karts(mut commands: Commands, mut done: Local<bool>, bots: usize) {
    if *done {
        return;
    }
    *done = true;
    for i in 0..bots {
        commands.spawn((
            kart_bundle(grid_slot(i + 2)),
            ServerDriven,
            NextMove::<KartMovement>(KartInput::default()),
            KartBot {
                next: 1,
                throttle: 10 - (i % 3) as i8,
            },
        ));
    }
}

fn spawn_player_karts(
    mut commands: Commands,
    links: Query<Entity, (With<ClientOf>, With<Connected>, Without<PlayerKart>)>,
    mut joined: Local<usize>,
) {
    for link in &links {
        let slot = *joined % 2;
        *joined += 1;
        let kart = commands
            .spawn((
                kart_bundle(grid_slot(slot)),
                ControlledBy {
                    owner: link,
                    lifetime: Lifetime::default(),
                },
            ))
            .id();
        commands.entity(link).insert(PlayerKart(kart));
    }
}

/// `FixedUpdate` on the server: every bot kart decides its move.
pub fn drive_kart_bots(
    mut bots: Query<(
        &mut KartBot,
        &MovementState<KartMovement>,
        &mut NextMove<KartMovement>,
    )>,
) {
    for (mut bot, state, mut next) in &mut bots {
        next.0 = bot.next_input(&state.0);
    }
}

/// Everything the karts add to an App, server or client (as [`ShooterPlugins`](crate::game::ShooterPlugins)
/// for the shooter): physics, kart prediction, smoothing, the net panel, the net graph and the
/// rules.
#[derive(Clone, Debug)]
pub struct KartPlugins {
    /// Bot karts.
    pub bots: usize,
}

impl PluginGroup for KartPlugins {
    fn build(self) -> bevy::app::PluginGroupBuilder {
        bevy::app::PluginGroupBuilder::start::<Self>()
            .add(unlag_testbed::RapierFixedPlugin::default())
            .add(MovementPredictionPlugin::<KartMovement>::default())
            .add(ProxySmoothingPlugin::default())
            .add(crate::NetPanelPlugin)
            .add(unlag::diagnostics::NetGraphPlugin::default())
            .add(KartGamePlugin { bots: self.bots })
    }
}
