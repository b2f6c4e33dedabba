//! Movement prediction and correction on the testbed: honest players are never corrected,
//! divergence is corrected and replayed, speed and teleport hacks are caught, bad input is
//! refused.

use bevy::prelude::*;
use bevy_rapier3d::prelude::*;
use core::time::Duration;
use lightyear::prelude::*;
use unlag::movement::{
    CharacterInput, CharacterMovement, CharacterState, MovementEvent, MovementPredictionPlugin,
    MovementPredictionSystems, MovementSettings, MovementState, MovementStats, NextMove,
    Prediction, flags,
};
use unlag::net::{AutonomousProxy, LinkConditions};
use unlag_core::quantize::{quantize_accel, quantize_angle};
use unlag_testbed::{Testbed, TestbedConfig};

/// The arena every App builds the same way: a floor, four walls, a wall to slide along, a step
/// and a low ceiling to crouch under.
fn arena(mut commands: Commands) {
    let mut solid = |half: Vec3, at: Vec3| {
        commands.spawn((
            Collider::cuboid(half.x, half.y, half.z),
            Transform::from_translation(at),
        ));
    };
    solid(Vec3::new(50.0, 0.5, 50.0), Vec3::new(0.0, -0.5, 0.0));
    for (half, at) in [
        (Vec3::new(0.5, 3.0, 20.0), Vec3::new(20.0, 3.0, 0.0)),
        (Vec3::new(0.5, 3.0, 20.0), Vec3::new(-20.0, 3.0, 0.0)),
        (Vec3::new(20.0, 3.0, 0.5), Vec3::new(0.0, 3.0, 20.0)),
        (Vec3::new(20.0, 3.0, 0.5), Vec3::new(0.0, 3.0, -20.0)),
        // A wall to walk into and slide along.
        (Vec3::new(0.5, 2.0, 4.0), Vec3::new(6.0, 2.0, 0.0)),
        // A 0.3 m step.
        (Vec3::new(1.5, 0.15, 1.5), Vec3::new(0.0, 0.15, -6.0)),
        // A roof 1.3 m above the floor: crouch to pass.
        (Vec3::new(2.0, 0.25, 2.0), Vec3::new(-6.0, 1.55, 0.0)),
    ] {
        solid(half, at);
    }
}

/// What every App gets: transforms, rapier in the fixed schedule, the arena, and movement
/// prediction of characters.
#[derive(Clone, Default)]
struct MovementTestPlugin {
    settings: Option<MovementSettings<CharacterMovement>>,
}

impl Plugin for MovementTestPlugin {
    fn build(&self, app: &mut App) {
        app.add_plugins(TransformPlugin)
            .insert_resource(TimestepMode::Fixed {
                dt: 1.0 / 60.0,
                substeps: 1,
            })
            .add_plugins(RapierPhysicsPlugin::<NoUserData>::default().in_fixed_schedule())
            .add_plugins(MovementPredictionPlugin::<CharacterMovement>::new(
                self.settings.clone().unwrap_or_default(),
            ))
            .add_systems(Startup, arena);
    }
}

/// Whether the scripted player moves (on the client App).
#[derive(Resource, Clone, Copy)]
struct Script {
    running: bool,
}

/// The scripted player's input for its move number `n` (a 10 s loop at 60 Hz): walk, slide
/// along a wall, jump, crouch under a roof, dash, and circle.
fn scripted_input(n: u32) -> CharacterInput {
    let phase = n % 600;
    let t = phase as f32;
    let (dir, bits) = match phase {
        0..100 => (Vec2::new(0.0, -1.0), 0),
        100..200 => (Vec2::new(1.0, 0.2), 0),
        200..260 => (
            Vec2::new(-0.3, 1.0),
            if (210..215).contains(&phase) {
                flags::JUMP
            } else {
                0
            },
        ),
        260..400 => (Vec2::new(-1.0, 0.0), flags::CROUCH),
        400..450 => (
            Vec2::new(1.0, 0.3),
            if phase == 405 { flags::DASH } else { 0 },
        ),
        _ => (Vec2::new((t * 0.05).cos(), (t * 0.05).sin()), 0),
    };
    CharacterInput {
        accel: quantize_accel(dir),
        yaw: quantize_angle(f32::atan2(-dir.x, -dir.y)),
        pitch: 0,
        flags: bits,
    }
}

fn drive(
    script: Res<Script>,
    mut players: Query<
        (
            &Prediction<CharacterMovement>,
            &mut NextMove<CharacterMovement>,
        ),
        With<AutonomousProxy>,
    >,
) {
    for (prediction, mut next) in &mut players {
        next.0 = if script.running {
            scripted_input(u32::from(prediction.next_seq().0))
        } else {
            CharacterInput::default()
        };
    }
}

fn give_next_move(
    mut commands: Commands,
    players: Query<
        Entity,
        (
            With<Prediction<CharacterMovement>>,
            Without<NextMove<CharacterMovement>>,
        ),
    >,
) {
    for e in &players {
        commands
            .entity(e)
            .insert(NextMove::<CharacterMovement>(CharacterInput::default()));
    }
}

/// Live movement events seen by a client (replays never emit them).
#[derive(Resource, Default, Clone, Copy, Debug)]
struct EventCount {
    jumps: u32,
    dashes: u32,
    landings: u32,
}

fn count_events(mut reader: MessageReader<MovementEvent>, mut count: ResMut<EventCount>) {
    for e in reader.read() {
        count.jumps += u32::from(e.events.jumped);
        count.dashes += u32::from(e.events.dashed);
        count.landings += u32::from(e.events.landed);
    }
}

/// A testbed whose clients each get a scripted character, spawned by the server.
fn movement_testbed(
    clients: usize,
    conditions: LinkConditions,
    plugin: MovementTestPlugin,
) -> Testbed {
    let mut tb = Testbed::new(TestbedConfig {
        clients,
        conditions,
        ..default()
    });
    tb.add_plugins(plugin);
    for i in 0..clients {
        tb.client(i)
            .insert_resource(Script { running: true })
            .init_resource::<EventCount>()
            .add_systems(Update, count_events)
            .add_systems(
                FixedUpdate,
                (give_next_move, drive)
                    .chain()
                    .before(MovementPredictionSystems::Simulate),
            );
    }
    assert!(
        tb.run_until(Duration::from_secs(5), |tb| tb.all_synced()),
        "not synced"
    );
    for i in 0..clients {
        let owner = tb.server_link(i).unwrap();
        tb.server_world_mut().spawn((
            MovementState::<CharacterMovement>(CharacterState {
                feet: Vec3::new(i as f32 * 2.0, 0.0, 4.0),
                ..default()
            }),
            Replicate::to_clients(NetworkTarget::All),
            ControlledBy {
                owner,
                lifetime: Lifetime::default(),
            },
        ));
    }
    assert!(
        tb.run_until(Duration::from_secs(3), |tb| (0..clients)
            .all(|i| { predicted(tb, i).is_some() })),
        "characters never reached their clients"
    );
    tb
}

/// Client `i`'s predicted state, once it has one.
fn predicted(tb: &Testbed, i: usize) -> Option<CharacterState> {
    let world = tb.client_world(i);
    let mut q =
        world.try_query_filtered::<&MovementState<CharacterMovement>, With<AutonomousProxy>>()?;
    q.iter(world).next().map(|s| s.0.clone())
}

/// The server's state of client `i`'s character.
fn authoritative(tb: &mut Testbed, i: usize) -> CharacterState {
    let owner = tb.server_link(i).unwrap();
    let world = tb.server_world_mut();
    let mut q = world.query::<(&MovementState<CharacterMovement>, &ControlledBy)>();
    q.iter(world)
        .find(|(_, c)| c.owner == owner)
        .map(|(s, _)| s.0.clone())
        .unwrap()
}

fn stop_scripts(tb: &mut Testbed) {
    for i in 0..tb.client_count() {
        tb.client_world_mut(i).resource_mut::<Script>().running = false;
    }
}

fn honest_run(rtt_ms: u64) {
    let conditions = LinkConditions::new(
        Duration::from_millis(rtt_ms),
        Duration::from_millis(20),
        0.05,
    );
    let mut tb = movement_testbed(2, conditions, MovementTestPlugin::default());
    tb.run_for(Duration::from_secs(60));
    stop_scripts(&mut tb);
    tb.run_for(Duration::from_secs(2));
    let server = tb.server_world().resource::<MovementStats>().clone();
    println!("{rtt_ms} ms server: {server:?}");
    for i in 0..2 {
        let client = tb.client_world(i).resource::<MovementStats>().clone();
        println!("{rtt_ms} ms client {i}: {client:?}");
        assert_eq!(
            client.corrections_received, 0,
            "client {i} corrected at {rtt_ms} ms"
        );
        assert!(client.moves_simulated > 3500, "{client:?}");
        // The script really jumped and dashed (six 10 s loops).
        let events = *tb.client_world(i).resource::<EventCount>();
        assert!(
            events.jumps >= 5 && events.dashes >= 5 && events.landings >= 5,
            "{events:?}"
        );
        let p = predicted(&tb, i).unwrap();
        let s = authoritative(&mut tb, i);
        assert!(
            p.feet.distance(s.feet) < 1e-4,
            "client {i} ends at {:?}, server at {:?}",
            p.feet,
            s.feet
        );
    }
    assert_eq!(server.corrections_sent, 0, "{server:?}");
    assert_eq!(server.rejected_total(), 0, "{server:?}");
    assert_eq!(server.speed_hacks_flagged, 0);
    assert!(server.moves_processed > 7000, "{server:?}");
}

#[test]
fn honest_player_is_never_corrected_at_0_ms() {
    honest_run(0);
}

#[test]
fn honest_player_is_never_corrected_at_100_ms() {
    honest_run(100);
}

#[test]
fn honest_player_is_never_corrected_at_250_ms() {
    honest_run(250);
}
