//! Benchmarks of movement prediction, each beside the naive way.
//!
//! - `replay`: re-simulating 30 and 120 pending character moves (a correction's replay) with
//!   [`CharacterMovement`] in a level of 201 static colliders, beside rapier's
//!   `KinematicCharacterController` at its defaults making the same displacements.
//! - `server_move`: the server's cost per move: decoding a `ServerMove` with three redundant
//!   moves and simulating the new one.
//! - Printed once: the encoded size of a `ServerMove` with redundancy 3, and the upstream bytes
//!   per second of a client moving at 60 Hz in the testbed, lightyear's headers included, with
//!   its moves repeated as the link's losses call for beside every move in flight in every
//!   message whenever a loss is measured (`MovementSettings::resend_all_above_miss` 0).

// criterion's macros generate undocumented functions.
#![allow(missing_docs)]

use bevy::prelude::*;
use bevy_rapier3d::rapier::control::KinematicCharacterController;
use bevy_rapier3d::rapier::math::Pose;
use bevy_rapier3d::rapier::prelude::{ColliderBuilder, PhysicsWorld, QueryFilter, Vector};
use criterion::{BenchmarkId, Criterion, black_box, criterion_group, criterion_main};
use unlag::core::quantize::{quantize_accel, quantize_angle};
use unlag::core::{Seq16, SplitMix64};
use unlag::movement::{
    CharacterInput, CharacterMovement, CharacterState, CollisionWorld, MovementModel,
    MovementSettings, ServerMove, ServerMoveData, WireMove, decode_dt, encode_dt, flags,
};

/// A floor and 200 boxes of assorted sizes on a grid, some low enough to step on.
fn level() -> PhysicsWorld {
    let mut w = PhysicsWorld::new();
    w.insert_collider(
        ColliderBuilder::cuboid(100.0, 0.5, 100.0).translation(Vector::new(0.0, -0.5, 0.0)),
        None,
    );
    let mut rng = SplitMix64::new(5);
    for i in 0..200 {
        let (x, z) = ((i % 20) as f32 * 4.0 - 40.0, (i / 20) as f32 * 4.0 - 20.0);
        let h = 0.1 + (rng.next_f64() as f32) * 1.5;
        w.insert_collider(
            ColliderBuilder::cuboid(0.8, h, 0.8).translation(Vector::new(x + 2.0, h, z + 2.0)),
            None,
        );
    }
    w.step();
    w
}

/// Move `i` of a player running around the boxes: turning, jumping, crouching now and then.
fn input_at(i: usize) -> CharacterInput {
    let a = i as f32 * 0.07;
    let dir = Vec2::new(a.cos(), a.sin());
    CharacterInput {
        accel: quantize_accel(dir),
        yaw: quantize_angle(a),
        pitch: 0,
        flags: match i % 40 {
            5 => flags::JUMP,
            20..25 => flags::CROUCH,
            _ => 0,
        },
    }
}

/// The first `n` moves of that player.
fn inputs(n: usize) -> Vec<CharacterInput> {
    (0..n).map(input_at).collect()
}

fn dt() -> f32 {
    decode_dt(encode_dt(1.0 / 60.0)) as f32
}

fn start() -> CharacterState {
    CharacterState {
        feet: Vec3::new(0.0, 0.0, 0.0),
        ..default()
    }
}

fn replay(
    model: &CharacterMovement,
    world: &CollisionWorld,
    moves: &[CharacterInput],
) -> CharacterState {
    moves
        .iter()
        .fold(start(), |s, input| model.simulate(&s, input, dt(), world).0)
}

/// The displacement of every move, to hand rapier's default controller the same work.
fn displacements(
    model: &CharacterMovement,
    world: &CollisionWorld,
    moves: &[CharacterInput],
) -> Vec<Vec3> {
    let mut s = start();
    moves
        .iter()
        .map(|input| {
            let next = model.simulate(&s, input, dt(), world).0;
            let d = next.velocity * dt();
            s = next;
            d
        })
        .collect()
}

fn replay_bench(c: &mut Criterion) {
    let physics = level();
    let world = CollisionWorld::new(
        physics.query_pipeline_with_filter(QueryFilter::default().exclude_sensors()),
    );
    let model = CharacterMovement::default();
    let shape = model.capsule(false);
    let centre = model.centre_offset(false);
    let default_kcc = KinematicCharacterController::default();
    let mut group = c.benchmark_group("replay");
    for n in [30usize, 120] {
        let moves = inputs(n);
        let desired = displacements(&model, &world, &moves);
        group.bench_with_input(
            BenchmarkId::new("unlag_character", n),
            &moves,
            |b, moves| b.iter(|| replay(&model, &world, black_box(moves))),
        );
        group.bench_with_input(
            BenchmarkId::new("rapier_kcc_defaults", n),
            &desired,
            |b, desired| {
                b.iter(|| {
                    let mut pose = Pose::from_translation(start().feet + centre);
                    for d in black_box(desired) {
                        let out =
                            default_kcc.move_shape(dt(), world.query(), &shape, &pose, *d, |_| {});
                        pose.translation += out.translation;
                    }
                    pose
                })
            },
        );
    }
    group.finish();
}

/// A ServerMove's content: the given moves (a new one and its redundant copies) at 60 Hz.
fn four_moves(inputs: &[CharacterInput]) -> ServerMoveData<CharacterInput> {
    ServerMoveData {
        moves: inputs
            .iter()
            .enumerate()
            .map(|(i, input)| WireMove {
                seq: Seq16(100 + i as u16),
                dt: encode_dt(1.0 / 60.0),
                input: *input,
            })
            .collect(),
        end: IVec3::new(1234, 0, -4567),
        correction_ack: Some(1),
        base: None,
    }
}

fn server_move_bench(c: &mut Criterion) {
    let physics = level();
    let world = CollisionWorld::new(
        physics.query_pipeline_with_filter(QueryFilter::default().exclude_sensors()),
    );
    let model = CharacterMovement::default();
    let message = ServerMove::<CharacterMovement>::encode(&four_moves(&inputs(4)));
    let state = start();
    c.bench_function("server_move/decode_and_simulate_one_new_move", |b| {
        b.iter(|| {
            let data = black_box(&message).decode().unwrap();
            let newest = data.moves.last().unwrap();
            model.simulate(&state, &newest.input, decode_dt(newest.dt) as f32, &world)
        })
    });
}

/// Prints the sizes the movement issue asks for; runs once (not a timing).
fn sizes(_c: &mut Criterion) {
    let changing = inputs(4);
    let steady = vec![changing[0]; 4];
    let encode = |same: bool| {
        let moves = if same { &steady } else { &changing };
        ServerMove::<CharacterMovement>::encode(&four_moves(moves)).len()
    };
    println!(
        "ServerMove with redundancy 3: {} bytes (steady input), {} bytes (input changing every move)",
        encode(true),
        encode(false)
    );
    for (name, script) in [
        (
            "circling, direction and look changing every move",
            input_at as fn(usize) -> CharacterInput,
        ),
        ("strafing with the mouse turning every move", strafe_at),
    ] {
        // Side by side: the repeats as few as the link's losses call for, and every move in
        // flight in every message whenever a loss is measured (as before
        // `resend_all_above_miss`, which sent them above 0.1 % and repeated 3 times below).
        for (rule, miss) in [
            (
                "repeats as the losses call for",
                MovementSettings::<CharacterMovement>::default().resend_all_above_miss,
            ),
            ("every move in flight whenever a loss is measured", 0.0),
        ] {
            let up = upstream_in_testbed(script, miss);
            println!(
                "upstream per client moving at 60 Hz in the testbed, {name}, {rule}: {:.0} B/s on the wire in {:.0} datagrams/s (goal ≤ 3000 B/s); payload {}",
                up.bytes_up_per_sec,
                up.datagrams_up_per_sec,
                up.up_by_kind
                    .iter()
                    .map(|k| format!("{} {:.0} B/s", k.kind, k.bytes_per_sec))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
}

/// Move `i` of a player holding a strafe key while turning with the mouse.
fn strafe_at(i: usize) -> CharacterInput {
    CharacterInput {
        accel: quantize_accel(Vec2::X),
        yaw: quantize_angle(i as f32 * 0.01),
        pitch: 0,
        flags: 0,
    }
}

/// One client moving by `script` for 10 simulated seconds (after connecting), measured, its
/// moves repeated by `MovementSettings::resend_all_above_miss` = `miss`.
fn upstream_in_testbed(
    script: fn(usize) -> CharacterInput,
    miss: f64,
) -> unlag_testbed::ClientMeasures {
    use bevy_rapier3d::prelude::*;
    use core::time::Duration;
    use lightyear::prelude::*;
    use unlag::movement::{
        MovementPredictionPlugin, MovementPredictionSystems, MovementState, NextMove, Prediction,
    };
    use unlag::net::LinkConditions;
    use unlag_testbed::{Testbed, TestbedConfig};

    #[derive(Clone)]
    struct Setup(f64);
    impl Plugin for Setup {
        fn build(&self, app: &mut App) {
            app.add_plugins(unlag_testbed::RapierFixedPlugin::default())
                .add_plugins(MovementPredictionPlugin::<CharacterMovement>::new(
                    MovementSettings {
                        resend_all_above_miss: self.0,
                        ..Default::default()
                    },
                ))
                .add_systems(Startup, |mut commands: Commands| {
                    commands.spawn((
                        Collider::cuboid(100.0, 0.5, 100.0),
                        Transform::from_xyz(0.0, -0.5, 0.0),
                    ));
                });
        }
    }
    #[derive(Resource)]
    struct Script(fn(usize) -> CharacterInput);
    fn walk(
        mut commands: Commands,
        script: Res<Script>,
        players: Query<(Entity, &Prediction<CharacterMovement>)>,
    ) {
        for (e, p) in &players {
            commands
                .entity(e)
                .insert(NextMove::<CharacterMovement>((script.0)(usize::from(
                    p.next_seq().0,
                ))));
        }
    }
    let mut tb = Testbed::new(TestbedConfig {
        clients: 1,
        conditions: LinkConditions::new(
            Duration::from_millis(100),
            Duration::from_millis(10),
            0.01,
        ),
        // A game renders at least at its tick rate: what a frame sends shares one datagram.
        frame_rate_hz: 60.0,
        ..Default::default()
    });
    tb.add_plugins(Setup(miss));
    tb.client(0).insert_resource(Script(script)).add_systems(
        FixedUpdate,
        walk.before(MovementPredictionSystems::Simulate),
    );
    assert!(tb.run_until(Duration::from_secs(3), |tb| tb.all_synced()));
    let owner = tb.server_link(0).unwrap();
    tb.server_world_mut().spawn((
        MovementState::<CharacterMovement>(start()),
        Replicate::to_clients(NetworkTarget::All),
        ControlledBy {
            owner,
            lifetime: Lifetime::default(),
        },
    ));
    tb.run_for(Duration::from_secs(2));
    tb.reset_measures();
    tb.run_for(Duration::from_secs(10));
    tb.measures(0)
}

criterion_group!(benches, replay_bench, server_move_bench, sizes);
criterion_main!(benches);
