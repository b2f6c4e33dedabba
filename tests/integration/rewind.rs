//! Lag compensation on the testbed's server: rays judged against recorded hit boxes.

use bevy::ecs::system::RunSystemOnce;
use bevy::prelude::*;
use bevy_rapier3d::prelude::*;
use core::time::Duration;
use lightyear::prelude::*;
use unlag::net::{LinkConditions, NetClock};
use unlag::rewind::{HitBox, HitShape, LagCompensationPlugin, RewindError, RewindHit, RewindQuery};
use unlag_testbed::{Testbed, TestbedConfig};

/// Crouching lowers the head box from 1.7 m to 1.2 m (the game's animation).
#[derive(Component)]
struct Crouching(bool);

fn animate(
    characters: Query<(&Crouching, &Children)>,
    mut boxes: Query<(&HitBox, &mut Transform)>,
) {
    for (crouching, children) in &characters {
        for child in children.iter() {
            if let Ok((hit_box, mut transform)) = boxes.get_mut(child)
                && hit_box.is_head
            {
                transform.translation.y = if crouching.0 { 1.2 } else { 1.7 };
            }
        }
    }
}

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
        app.add_plugins(unlag_testbed::RapierFixedPlugin::default())
            .add_plugins(LagCompensationPlugin::default())
            .add_systems(FixedUpdate, (walk, animate));
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

/// One server (and a client, so it runs) with physics, lag compensation and walkers, synced.
fn rewind_testbed() -> Testbed {
    let mut tb = Testbed::new(TestbedConfig {
        clients: 1,
        conditions: LinkConditions::default(),
        ..default()
    });
    tb.add_plugins(Setup);
    assert!(tb.run_until(Duration::from_secs(3), |tb| tb.all_synced()));
    tb
}

#[test]
fn rays_are_judged_against_the_past() {
    let mut tb = rewind_testbed();
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

#[test]
fn pellets_segments_poses_crouching_and_unknown_characters() {
    let mut tb = rewind_testbed();
    let character = spawn_character(tb.server_world_mut(), Vec3::ZERO);
    tb.server_world_mut()
        .entity_mut(character)
        .insert(Crouching(false));
    tb.run_for(Duration::from_secs(1));
    let standing = now(&tb) - 0.1;
    tb.server_world_mut()
        .entity_mut(character)
        .insert(Crouching(true));
    tb.run_for(Duration::from_millis(500));
    let crouched = now(&tb) - 0.1;
    let x = |t: f64| 5.0 * t as f32;

    // A ray over where the crouched head is misses while crouched, hits while standing.
    let over = |t: f64| (Vec3::new(x(t), 1.7, -10.0), Vec3::Z);
    let (o, d) = over(crouched);
    assert!(
        ray(&mut tb, o, d, crouched).unwrap().is_none(),
        "crouched head rewound"
    );
    let (o, d) = over(standing);
    assert!(ray(&mut tb, o, d, standing).unwrap().unwrap().is_head);

    // Pellets share one rewind: one answer per pellet, in order.
    let t = crouched;
    let pellets = vec![
        (Vec3::new(x(t), 1.2, -10.0), Vec3::Z),
        (Vec3::new(x(t) + 3.0, 1.2, -10.0), Vec3::Z),
        (Vec3::new(x(t), 1.0, -10.0), Vec3::Z),
    ];
    let hits = tb
        .server_world_mut()
        .run_system_once(move |q: RewindQuery| q.rays(&pellets, 100.0, t, None))
        .unwrap()
        .unwrap();
    assert_eq!(hits.len(), 3);
    assert!(hits[0].as_ref().unwrap().is_head && hits[1].is_none());
    assert_eq!(hits[2].as_ref().unwrap().bone, "torso");

    // A projectile's step: hits only if the segment reaches the box.
    let short = tb
        .server_world_mut()
        .run_system_once(move |q: RewindQuery| {
            q.segment(
                Vec3::new(x(t), 1.0, -10.0),
                Vec3::new(x(t), 1.0, -5.0),
                t,
                None,
            )
        })
        .unwrap()
        .unwrap();
    assert!(short.is_none());
    let long = tb
        .server_world_mut()
        .run_system_once(move |q: RewindQuery| {
            q.segment(
                Vec3::new(x(t), 1.0, -10.0),
                Vec3::new(x(t), 1.0, 0.0),
                t,
                None,
            )
        })
        .unwrap()
        .unwrap();
    assert_eq!(long.unwrap().character, character);
    // The shooter never hits itself.
    let own = tb
        .server_world_mut()
        .run_system_once(move |q: RewindQuery| {
            q.ray(
                Vec3::new(x(t), 1.0, -10.0),
                Vec3::Z,
                100.0,
                t,
                Some(character),
            )
        })
        .unwrap()
        .unwrap();
    assert!(own.is_none());

    // The pose at a time, and errors for characters that are not (or no longer) there.
    let poses = tb
        .server_world_mut()
        .run_system_once(move |q: RewindQuery| q.pose_at(character, crouched))
        .unwrap()
        .unwrap();
    assert_eq!(poses.len(), 2);
    assert!(poses.iter().any(|(_, p, _)| (p.y - 1.2).abs() < 1e-4));
    tb.server_world_mut().entity_mut(character).despawn();
    let gone = tb
        .server_world_mut()
        .run_system_once(move |q: RewindQuery| q.pose_at(character, crouched))
        .unwrap();
    assert_eq!(gone, Err(RewindError::UnknownCharacter));
}
