//! The shooter's match, apart from its rendering: the arena and its server-driven bots.

use bevy::prelude::*;
use bevy_rapier3d::prelude::Collider;
use lightyear::prelude::Server;
use unlag::combat::Health;
use unlag::core::quantize::{quantize_accel, quantize_angle};
use unlag::movement::{
    CharacterInput, CharacterMovement, CharacterState, MovementPredictionSystems, MovementState,
    NextMove, ServerDriven, flags,
};

/// Half the arena's side, metres: a floor of 60 m × 60 m closed by walls 4 m high.
pub const ARENA_HALF: f32 = 30.0;

/// The walls inside the arena: (centre, half extents), metres. They block shots and movement.
pub const COVER: [(Vec3, Vec3); 4] = [
    (Vec3::new(0.0, 1.5, 0.0), Vec3::new(3.0, 1.5, 0.5)),
    (Vec3::new(-12.0, 1.0, 10.0), Vec3::new(0.5, 1.0, 3.0)),
    (Vec3::new(12.0, 1.0, -10.0), Vec3::new(0.5, 1.0, 3.0)),
    (Vec3::new(10.0, 1.5, 14.0), Vec3::new(2.0, 1.5, 0.5)),
];

/// Spawns the floor, the outer walls and [`COVER`] as rapier colliders (the same on server and
/// clients), each with a [`Wall`] marker a renderer can give a mesh.
pub fn spawn_arena(world: &mut World) {
    let mut wall = |centre, half| spawn_wall(world, centre, half);
    wall(
        Vec3::new(0.0, -0.5, 0.0),
        Vec3::new(ARENA_HALF, 0.5, ARENA_HALF),
    );
    for (x, z, hx, hz) in [
        (ARENA_HALF, 0.0, 0.5, ARENA_HALF),
        (-ARENA_HALF, 0.0, 0.5, ARENA_HALF),
        (0.0, ARENA_HALF, ARENA_HALF, 0.5),
        (0.0, -ARENA_HALF, ARENA_HALF, 0.5),
    ] {
        wall(Vec3::new(x, 2.0, z), Vec3::new(hx, 2.0, hz));
    }
    for (centre, half) in COVER {
        wall(centre, half);
    }
}

/// Spawns one solid box of a level: a rapier collider centred at `centre` with `half_extents`
/// (metres), marked [`Wall`].
pub fn spawn_wall(world: &mut World, centre: Vec3, half_extents: Vec3) {
    world.spawn((
        Wall { half_extents },
        Transform::from_translation(centre),
        Collider::cuboid(half_extents.x, half_extents.y, half_extents.z),
    ));
}

/// A solid box of the arena (the floor included).
#[derive(Component, Clone, Copy, Debug, PartialEq)]
pub struct Wall {
    /// Half its size along each axis, metres.
    pub half_extents: Vec3,
}

/// A bot's behaviour: it runs around a loop between the cover and the outer walls, strafing in
/// and out, and hops, crouches and dashes on its own rhythm. The server moves it as a
/// [`ServerDriven`] character, with the players' own movement rules.
#[derive(Component, Clone, Copy, Debug, PartialEq)]
pub struct BotBrain {
    /// Where on the loop it starts, 0–1.
    pub phase: f32,
    /// Radius of its loop, metres.
    pub radius: f32,
    /// +1 runs anticlockwise (seen from above), −1 clockwise.
    pub direction: f32,
    /// Ticks since it started.
    pub ticks: u32,
}

impl BotBrain {
    /// Bot `index` of `count`: spread around loops of 16–22 m, every other one the other way.
    pub fn new(index: usize, count: usize) -> Self {
        Self {
            phase: index as f32 / count.max(1) as f32,
            radius: 16.0 + 6.0 * ((index * 7) % 5) as f32 / 4.0,
            direction: if index.is_multiple_of(2) { 1.0 } else { -1.0 },
            ticks: (index as u32) * 37,
        }
    }

    /// Where it starts, feet on the floor.
    pub fn start(&self) -> Vec3 {
        let a = self.phase * core::f32::consts::TAU;
        Vec3::new(self.radius * a.cos(), 0.0, self.radius * a.sin())
    }

    /// The input of its next move from where it is (at 60 Hz ticks): along the loop, pulled
    /// back onto it, strafing in and out every 1.5 s; a hop every 3 s, crouching 1 s in 5, a
    /// dash every 4 s.
    pub fn next_input(&mut self, feet: Vec3) -> CharacterInput {
        self.ticks = self.ticks.wrapping_add(1);
        let t = self.ticks;
        let flat = Vec2::new(feet.x, feet.z);
        let out = flat.normalize_or(Vec2::X);
        let along = Vec2::new(-out.y, out.x) * self.direction;
        let strafe = if (t / 90).is_multiple_of(2) {
            0.6
        } else {
            -0.6
        };
        let back = (self.radius - flat.length()).clamp(-1.0, 1.0);
        let dir = (along + out * (strafe + back)).normalize_or_zero();
        let mut f = 0;
        if t % 180 < 3 {
            f |= flags::JUMP;
        }
        if t % 300 < 60 {
            f |= flags::CROUCH;
        }
        if t % 240 == 120 {
            f |= flags::DASH;
        }
        CharacterInput {
            accel: quantize_accel(dir),
            yaw: quantize_angle(f32::atan2(-along.x, -along.y)),
            pitch: 0,
            flags: f,
        }
    }
}

/// Everything a server-side bot needs, at its start (add the game's own components, e.g.
/// replication, health and hit boxes).
pub fn bot_bundle(index: usize, count: usize) -> impl Bundle {
    let brain = BotBrain::new(index, count);
    (
        MovementState::<CharacterMovement>(CharacterState {
            feet: brain.start(),
            ..default()
        }),
        ServerDriven,
        NextMove::<CharacterMovement>(CharacterInput::default()),
        brain,
    )
}

/// `FixedUpdate` on the server, before the movement simulation: every bot decides its move
/// (a dead one, with a [`Health`] at zero, stands still).
pub fn drive_bots(
    mut bots: Query<(
        &mut BotBrain,
        &MovementState<CharacterMovement>,
        &mut NextMove<CharacterMovement>,
        Option<&Health>,
    )>,
) {
    for (mut brain, state, mut next, health) in &mut bots {
        next.0 = if health.is_none_or(|h| h.alive()) {
            brain.next_input(state.0.feet)
        } else {
            CharacterInput::default()
        };
    }
}

/// The shooter's bots: [`drive_bots`] on the server. (The arena is spawned by the game on
/// every App with [`spawn_arena`].)
#[derive(Clone, Copy, Debug, Default)]
pub struct ShooterBotsPlugin;

impl Plugin for ShooterBotsPlugin {
    fn build(&self, app: &mut App) {
        app.add_systems(
            FixedUpdate,
            drive_bots
                .run_if(any_with_component::<Server>)
                .before(MovementPredictionSystems::Simulate),
        );
    }
}
