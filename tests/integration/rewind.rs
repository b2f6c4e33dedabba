//! Lag compensation on the testbed's server: rays judged against recorded hit boxes.

use bevy::ecs::system::RunSystemOnce;
use bevy::prelude::*;
use bevy_rapier3d::prelude::*;
use core::time::Duration;
use lightyear::prelude::*;
use unlag::net::{LinkConditions, NetClock};
use unlag::rewind::{HitBox, HitShape, LagCompensationPlugin, RewindError, RewindHit, RewindQuery};
use unlag_testbed::{Testbed, TestbedConfig};

/// Walks along +X at 5 m/s from `start`.
#[derive(Component)]
struct Walker {
    start: Vec3,
}

fn walk(
    timeline: Res<LocalTimeline>,
    tick: Res<lightyear::core::tick::TickDuration>,
    mut walkers: Query<(&Walker, &mut Transform)>,
) {
    let t = timeline.tick().0 as f32 * tick.0.as_secs_f32();
    for (w, mut transform) in &mut walkers {
        transform.translation = w.start + Vec3::X * 5.0 * t;
    }
}

#[derive(Clone)]
struct Setup;

impl Plugin for Setup {
    fn build(&self, app: &mut App) {
        app.add_plugins(TransformPlugin)
            .insert_resource(TimestepMode::Fixed {
                dt: 1.0 / 60.0,
                substeps: 1,
            })
            .add_plugins(RapierPhysicsPlugin::<NoUserData>::default().in_fixed_schedule())
            .add_plugins(LagCompensationPlugin::default())
            .add_systems(FixedUpdate, walk);
    }
}

/// A character with a head box (0.3 m cube at 1.7 m) and a torso box.
fn spawn_character(world: &mut World, start: Vec3) -> Entity {
    world
        .spawn((
            Transform::from_translation(start),
            Walker { start },
            Replicate::to_clients(NetworkTarget::All),
        ))
        .with_children(|c| {
            c.spawn((
                HitBox {
                    shape: HitShape::Cuboid {
                        half_extents: Vec3::splat(0.15),
                    },
                    bone: "head".into(),
                    is_head: true,
                    damage_multiplier: 4.0,
                },
                Transform::from_xyz(0.0, 1.7, 0.0),
            ));
            c.spawn((
                HitBox {
                    shape: HitShape::Cuboid {
                        half_extents: Vec3::new(0.25, 0.4, 0.15),
                    },
                    bone: "torso".into(),
                    is_head: false,
                    damage_multiplier: 1.0,
                },
                Transform::from_xyz(0.0, 1.1, 0.0),
            ));
        })
        .id()
}

fn ray(
    tb: &mut Testbed,
    origin: Vec3,
    dir: Vec3,
    time: f64,
) -> Result<Option<RewindHit>, RewindError> {
    tb.server_world_mut()
        .run_system_once(move |q: RewindQuery| q.ray(origin, dir, 100.0, time, None))
        .unwrap()
}

fn now(tb: &Testbed) -> f64 {
    tb.server_world().resource::<NetClock>().server_time
}

#[test]
fn rays_are_judged_against_the_past() {
    let mut tb = Testbed::new(TestbedConfig {
        clients: 1,
        conditions: LinkConditions::default(),
        ..default()
    });
    tb.add_plugins(Setup);
    assert!(tb.run_until(Duration::from_secs(3), |tb| tb.all_synced()));
    let near = spawn_character(tb.server_world_mut(), Vec3::new(0.0, 0.0, 0.0));
    tb.run_for(Duration::from_secs(2));

    // Where the head was 300 ms ago.
    let t = now(&tb) - 0.3;
    let x_then = 5.0 * t as f32;
    let across = |x: f32, y: f32| (Vec3::new(x, y, -10.0), Vec3::Z);
    let (o, d) = across(x_then, 1.7);
    let hit = ray(&mut tb, o, d, t)
        .unwrap()
        .expect("hits where the head was");
    assert_eq!(hit.character, near);
    assert!(hit.is_head && hit.bone == "head");
    assert!(
        (hit.distance - (10.0 - 0.15)).abs() < 0.01,
        "{}",
        hit.distance
    );
    assert!(
        ray(&mut tb, o, d, t + 0.1).unwrap().is_none(),
        "100 ms later it has walked on"
    );

    // From above: through head and torso, the head is reported.
    let hit = ray(&mut tb, Vec3::new(x_then, 5.0, 0.0), Vec3::NEG_Y, t)
        .unwrap()
        .unwrap();
    assert!(hit.is_head);

    // The nearer of two characters wins.
    let far = spawn_character(tb.server_world_mut(), Vec3::new(0.0, 0.0, 3.0));
    tb.run_for(Duration::from_secs(1));
    let t = now(&tb) - 0.2;
    let (o, d) = across(5.0 * t as f32, 1.1);
    assert_eq!(ray(&mut tb, o, d, t).unwrap().unwrap().character, near);
    let (o, d) = (Vec3::new(5.0 * t as f32, 1.1, 10.0), Vec3::NEG_Z);
    assert_eq!(ray(&mut tb, o, d, t).unwrap().unwrap().character, far);

    // A wall between shooter and target blocks.
    tb.server_world_mut().spawn((
        Collider::cuboid(50.0, 5.0, 0.1),
        Transform::from_xyz(0.0, 0.0, -5.0),
    ));
    tb.run_for(Duration::from_millis(100));
    let t = now(&tb) - 0.2;
    let (o, d) = across(5.0 * t as f32, 1.1);
    assert!(
        ray(&mut tb, o, d, t).unwrap().is_none(),
        "the wall should block"
    );

    // Too far back, and garbage.
    assert!(matches!(
        ray(&mut tb, o, d, t - 2.0),
        Err(RewindError::TooOld { .. })
    ));
    assert_eq!(ray(&mut tb, o, Vec3::ZERO, t), Err(RewindError::Invalid));
    assert_eq!(ray(&mut tb, o, d, f64::NAN), Err(RewindError::Invalid));
}
