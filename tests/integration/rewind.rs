//! Lag compensation on the testbed's server: rays judged against recorded hit boxes.

use bevy::ecs::system::RunSystemOnce;
use bevy::prelude::*;
use bevy_rapier3d::prelude::*;
use core::time::Duration;
use lightyear::prelude::*;
use unlag::net::{LinkConditions, NetClock};
use unlag::rewind::{
    CROUCHED_BIT, ClaimedView, FrameHistory, HitBox, HitBoxLayout, HitShape, LayoutBone,
    RewindDebug, RewindDebugLog, RewindError, RewindHit, RewindPlugin, RewindQuery, RewindSettings,
    RewindStats, UseHitBoxLayout,
};
use unlag::smoothing::{
    NetUpdateFrequency, ProxyFlags, ProxySmoothing, ProxySmoothingPlugin, RenderedPose, SentStates,
    SmoothedProxy, SmoothingMode,
};
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
            .add_plugins(RewindPlugin::default())
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

    // The debug view: off, nothing is logged; on, each query logs its ray and the boxes it
    // tested, posed at the time asked, the one hit marked.
    let t = now(&tb) - 0.2;
    let (o, d) = (Vec3::new(5.0 * t as f32, 1.1, 10.0), Vec3::NEG_Z);
    assert!(ray(&mut tb, o, d, t).unwrap().is_some());
    assert!(
        tb.server_world()
            .resource::<RewindDebugLog>()
            .entries()
            .is_empty()
    );
    tb.server_world_mut()
        .resource_mut::<RewindDebug>()
        .show_queries = true;
    let hit = ray(&mut tb, o, d, t).unwrap().unwrap();
    let (miss_o, miss_d) = (o + Vec3::Y * 5.0, d);
    assert!(ray(&mut tb, miss_o, miss_d, t).unwrap().is_none());
    let log = tb.server_world().resource::<RewindDebugLog>().entries();
    assert_eq!(log.len(), 2);
    assert!(log[0].hit && !log[1].hit);
    assert!(
        (log[0].end - hit.point).length() < 1e-4,
        "the ray stops at the hit"
    );
    assert_eq!(log[0].boxes.iter().filter(|b| b.hit).count(), 1);
    let torso = log[0].boxes.iter().find(|b| b.hit).unwrap();
    assert!(
        (torso.position.x - 5.0 * t as f32).abs() < 1e-3,
        "posed at t"
    );
    tb.run_for(Duration::from_secs(4));
    assert!(
        tb.server_world()
            .resource::<RewindDebugLog>()
            .entries()
            .is_empty(),
        "entries expire"
    );
    let stats = tb.server_world().resource::<RewindStats>().clone();
    assert_eq!((stats.characters, stats.boxes), (2, 4));
    // Five seconds at 60 Hz, plus one frame beyond and one being written.
    assert_eq!(stats.frames_per_character, 302);
    assert!(stats.memory_bytes > 2 * 302 * 4 * 28 && stats.memory_bytes < 320 * 1024);

    // Too far back, and garbage.
    assert!(matches!(
        ray(&mut tb, o, d, t - 2.0),
        Err(RewindError::TooOld { .. })
    ));
    assert_eq!(ray(&mut tb, o, Vec3::ZERO, t), Err(RewindError::Invalid));
    assert_eq!(ray(&mut tb, o, d, f64::NAN), Err(RewindError::Invalid));
}

/// A shot held on the server for its shooter's moves (a burst's resend) is judged later than
/// its view: the judged window reaches back to the oldest one waiting, and only while it
/// waits.
#[test]
fn the_judged_window_reaches_back_to_a_held_shot_while_it_waits() {
    let mut tb = rewind_testbed();
    let walker = spawn_character(tb.server_world_mut(), Vec3::ZERO);
    tb.run_for(Duration::from_secs(3));
    let t = now(&tb) - 1.6;
    let (o, d) = (Vec3::new(5.0 * t as f32, 1.1, -10.0), Vec3::Z);
    assert!(
        matches!(ray(&mut tb, o, d, t), Err(RewindError::TooOld { .. })),
        "beyond the clients' views"
    );
    tb.server_world_mut()
        .insert_resource(unlag::net::HeldShotsOldest(Some(t)));
    tb.run_for(Duration::from_millis(50));
    let hit = ray(&mut tb, o, d, t).unwrap().expect("judged where it was");
    assert_eq!(hit.character, walker);
    tb.server_world_mut()
        .insert_resource(unlag::net::HeldShotsOldest(None));
    tb.run_for(Duration::from_millis(50));
    assert!(matches!(
        ray(&mut tb, o, d, t),
        Err(RewindError::TooOld { .. })
    ));
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
                0.0,
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
                0.0,
                t,
                None,
            )
        })
        .unwrap()
        .unwrap();
    assert_eq!(long.unwrap().character, character);
    // A projectile with a radius: passing 10 cm beside the torso (half width 0.25 m) misses
    // as a point and hits as a 15 cm ball, touching the box's side.
    let beside = |radius: f32| {
        move |q: RewindQuery| {
            q.segment(
                Vec3::new(x(t) + 0.35, 1.0, -10.0),
                Vec3::new(x(t) + 0.35, 1.0, 10.0),
                radius,
                t,
                None,
            )
        }
    };
    let point = tb.server_world_mut().run_system_once(beside(0.0)).unwrap();
    assert_eq!(point, Ok(None));
    let ball = tb
        .server_world_mut()
        .run_system_once(beside(0.15))
        .unwrap()
        .unwrap()
        .expect("the ball touches the torso");
    assert_eq!(ball.bone, "torso");
    assert!(
        (ball.point.x - (x(t) + 0.25)).abs() < 0.01,
        "{:?}",
        ball.point
    );
    // First contact is the box's vertical edge at (+0.25, -0.15): the ball's centre is then
    // sqrt(0.15² − 0.1²) before the front face, and the normal points from the edge to it.
    let before_face = (0.15f32 * 0.15 - 0.1 * 0.1).sqrt();
    let normal = Vec3::new(0.1, 0.0, -before_face) / 0.15;
    assert!(ball.normal.distance(normal) < 0.02, "{:?}", ball.normal);
    assert!(
        (ball.distance - (10.0 - 0.15 - before_face)).abs() < 0.01,
        "{}",
        ball.distance
    );
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

/// Loads assets from the repository root, so tests can reach `assets/` and `tests/fixtures/`.
pub(crate) use unlag_demo::asset_plugin;
pub(crate) use unlag_demo::game::{HUMANOID, give_proxies_boxes};

#[test]
fn a_shotguns_pellets_find_in_one_traversal_what_each_finds_alone() {
    // 48 walkers in a crowd (6 rows of 8, 3-4 m apart), and shotgun shots from in front of it:
    // 12 pellets up to 2-20° off an aim at one walker. The pellets share one traversal of the
    // broad phase (the cone around them); each must find exactly what it finds alone.
    let mut tb = rewind_testbed();
    for row in 0..6 {
        for k in 0..8 {
            let start = Vec3::new(-14.0 + 4.0 * k as f32 + row as f32, 0.0, 3.0 * row as f32);
            spawn_character(tb.server_world_mut(), start);
        }
    }
    tb.run_for(Duration::from_secs(1));
    let t = now(&tb) - 0.1;
    let mut rng = unlag::core::SplitMix64::new(5);
    let mut f = move || rng.next_f64() as f32;
    let shots: Vec<Vec<(Vec3, Vec3)>> = (0..150)
        .map(|_| {
            let origin = Vec3::new(f() * 30.0 - 15.0 + 5.0 * t as f32, 1.5, -8.0 - f() * 10.0);
            let target = Vec3::new(
                -14.0 + 4.0 * (f() * 8.0).floor() + 5.0 * t as f32,
                0.8 + f() * 1.0,
                3.0 * (f() * 6.0).floor(),
            );
            let aim = (target - origin).normalize();
            let spread = (2.0 + f() * 18.0).to_radians();
            let side = aim.any_orthonormal_vector();
            (0..12)
                .map(|k| {
                    let turn = Quat::from_axis_angle(aim, f() * std::f32::consts::TAU);
                    let tilt = Quat::from_axis_angle(side, spread * f().sqrt());
                    (origin, if k == 0 { aim } else { turn * tilt * aim })
                })
                .collect()
        })
        .collect();
    let (together, alone) = tb
        .server_world_mut()
        .run_system_once(move |q: RewindQuery| {
            let together: Vec<Vec<Option<RewindHit>>> = shots
                .iter()
                .map(|pellets| q.rays(pellets, 100.0, t, None).unwrap())
                .collect();
            let alone: Vec<Vec<Option<RewindHit>>> = shots
                .iter()
                .map(|pellets| {
                    pellets
                        .iter()
                        .map(|&(o, d)| q.ray(o, d, 100.0, t, None).unwrap())
                        .collect()
                })
                .collect();
            (together, alone)
        })
        .unwrap();
    let key = |h: &Option<RewindHit>| h.as_ref().map(|h| (h.character, h.bone.clone(), h.point));
    let mut hits = 0;
    for (shot, (a, b)) in together.iter().zip(&alone).enumerate() {
        for (pellet, (a, b)) in a.iter().zip(b).enumerate() {
            assert_eq!(key(a), key(b), "shot {shot}, pellet {pellet}");
            hits += usize::from(a.is_some());
        }
    }
    // Enough pellets hit someone in the crowd for the comparison to mean something (348 of
    // 1800 here: the spreads reach 20°), and many fly past.
    assert!(hits > 250 && hits < 1200, "{hits} of 1800 pellets hit");
}

#[test]
fn layouts_name_the_file_and_field_that_is_wrong() {
    let error = |text: &str| HitBoxLayout::from_ron(text, "x.hitboxes.ron").unwrap_err();
    let good =
        std::fs::read_to_string(unlag_demo::asset_root().join("assets/humanoid.hitboxes.ron"))
            .unwrap();
    let layout = HitBoxLayout::from_ron(&good, HUMANOID).unwrap();
    assert!(layout.boxes.len() >= 11);
    for bone in ["head", "torso", "pelvis", "upper_arm_l", "lower_leg_r"] {
        assert!(layout.boxes.iter().any(|b| b.bone == bone), "{bone}");
    }
    assert_eq!(layout.boxes.iter().filter(|b| b.is_head).count(), 1);

    let missing = error(
        "(boxes: [(shape: Cuboid(half_extents: (1.0, 1.0, 1.0)), stand: (translation: (0.0, 0.0, 0.0)))])",
    );
    assert_eq!(missing.file, "x.hitboxes.ron");
    assert!(missing.message.contains("bone"), "{missing}");
    let syntax = error("(boxes: [(bone: \"head\",\n  shape: Cuboid(half_extents: (1.0, 1.0)),");
    assert!(
        syntax.message.starts_with("2:"),
        "the line is named: {syntax}"
    );
    let unknown = error("(boxes: [], colour: 3)");
    assert!(unknown.message.contains("colour"), "{unknown}");
    let negative = error(&good.replacen("(0.2, 0.2, 0.12)", "(0.2, -0.2, 0.12)", 1));
    assert!(
        negative
            .to_string()
            .contains("boxes[1] (torso).shape.half_extents"),
        "{negative}"
    );
    let nan = error(&good.replacen("damage_multiplier: 4.0", "damage_multiplier: NaN", 1));
    assert!(
        nan.to_string()
            .contains("boxes[0] (head).damage_multiplier"),
        "{nan}"
    );
    assert!(error("(boxes: [])").message.contains("at least one box"));
    // The walk cycle: legs and arms swing, each leg opposite the other.
    let swing = |bone: &str| layout.boxes.iter().find(|b| b.bone == bone).unwrap().walk;
    let (left, right) = (swing("upper_leg_l").unwrap(), swing("upper_leg_r").unwrap());
    assert!(left.swing_degrees.0 > 10.0 && (right.phase - left.phase).abs() == 0.5);
    assert!(swing("upper_arm_l").is_some() && swing("head").is_none());
    let cadence = error(&good.replacen("cadence_hz: 1.5", "cadence_hz: 0.0", 1));
    assert!(
        cadence.message.contains("walk_cycle.cadence_hz"),
        "{cadence}"
    );
    let wild = error(&good.replacen(
        "swing_degrees: (35.0, 0.0, 0.0)",
        "swing_degrees: (400.0, 0.0, 0.0)",
        1,
    ));
    assert!(
        wild.message.contains("(upper_leg_l).walk.swing_degrees"),
        "{wild}"
    );
}

#[test]
fn the_walk_cycle_swings_limbs_about_the_hips_in_the_direction_of_travel() {
    use unlag::smoothing::StateShown;

    let text =
        std::fs::read_to_string(unlag_demo::asset_root().join("assets/humanoid.hitboxes.ron"))
            .unwrap();
    let layout = HitBoxLayout::from_ron(&text, HUMANOID).unwrap();
    let bone = |name: &str| {
        layout
            .boxes
            .iter()
            .find(|b| b.bone == name)
            .unwrap()
            .bone(&layout.walk_cycle)
    };
    let (thigh, shin, head) = (bone("upper_leg_l"), bone("lower_leg_l"), bone("head"));
    let walk = thigh.walk.unwrap();
    // A quarter of the way into a cycle the left leg is swung all the way (phase 0).
    let quarter = 0.25 / f64::from(walk.cadence_hz);
    let full = walk.full_speed;
    let shown = |velocity: Vec3, rotation: Quat, flags: u8| StateShown {
        time: quarter + 7.0 / f64::from(walk.cadence_hz),
        velocity,
        rotation,
        flags,
    };
    // The foot: the shin's far end, in the character's frame.
    let foot = |t: Transform| t.transform_point(Vec3::new(0.0, -0.16, 0.0));
    let knee = |t: Transform| t.transform_point(Vec3::new(0.0, -0.16, 0.0));
    let rest = foot(shin.stand);

    // Standing still, or the head at any speed: the rest pose.
    assert_eq!(
        thigh.pose(&shown(Vec3::ZERO, Quat::IDENTITY, 0)),
        thigh.stand
    );
    let forward = Vec3::new(0.0, 0.0, -full);
    assert_eq!(head.pose(&shown(forward, Quat::IDENTITY, 0)), head.stand);

    // Walking forward (-Z) at full speed: the foot swings along Z by the whole amplitude, the
    // hip stays, and thigh and shin stay joined (they swing about the same hip).
    let swung = foot(shin.pose(&shown(forward, Quat::IDENTITY, 0)));
    let hip = walk.pivot;
    let angle = (rest - hip).angle_between(swung - hip).to_degrees();
    assert!((angle - 35.0).abs() < 0.1, "{angle}");
    assert!((swung.x - rest.x).abs() < 1e-4 && (swung.z - rest.z).abs() > 0.3);
    let joined = |flags: u8, velocity: Vec3| {
        let s = shown(velocity, Quat::IDENTITY, flags);
        knee(thigh.pose(&s)).distance(shin.pose(&s).transform_point(Vec3::new(0.0, 0.16, 0.0)))
    };
    let still = joined(0, Vec3::ZERO);
    assert!((joined(0, forward) - still).abs() < 1e-4);
    // The right leg swings the other way.
    let right = bone("lower_leg_r");
    let right_foot = foot(right.pose(&shown(forward, Quat::IDENTITY, 0)));
    assert!((right_foot.z - foot(right.stand).z) * (swung.z - rest.z) < 0.0);

    // Sideways (+X), the same swing turns sideways; turned with the character, the same.
    let sideways = foot(shin.pose(&shown(Vec3::new(full, 0.0, 0.0), Quat::IDENTITY, 0)));
    assert!((sideways.z - rest.z).abs() < 1e-4 && (sideways.x - rest.x).abs() > 0.3);
    let turn = Quat::from_rotation_y(1.0);
    let turned = foot(shin.pose(&shown(turn * forward, turn, 0)));
    assert!(turned.distance(swung) < 1e-4, "{turned} vs {swung}");

    // Half speed, half the swing.
    let half = foot(shin.pose(&shown(forward * 0.5, Quat::IDENTITY, 0)));
    let angle = (rest - hip).angle_between(half - hip).to_degrees();
    assert!((angle - 17.5).abs() < 0.1, "{angle}");

    // Crouched, about the crouched hip: the thigh's top stays put.
    let top = |t: Transform| t.transform_point(Vec3::new(0.0, 0.16, 0.0));
    let crouched = thigh.pose(&shown(forward * 0.5, Quat::IDENTITY, CROUCHED_BIT));
    assert!(
        top(crouched).distance(top(thigh.crouch)) < 0.02,
        "{} vs {}",
        top(crouched),
        top(thigh.crouch)
    );
    assert!(crouched.rotation.angle_between(thigh.crouch.rotation) > 0.2);
}

/// The server's character: walks a circle (turning), crouching for 0.4 s of every second;
/// with `stops`, standing still for 0.5 s of every 1.3 s (its motion bends between a slow
/// proxy's states: states off its grid).
#[derive(Component)]
struct Circler {
    stops: bool,
}

fn circle(
    timeline: Res<LocalTimeline>,
    tick: Res<lightyear::core::tick::TickDuration>,
    mut characters: Query<(&mut Transform, &mut ProxyFlags, &Circler)>,
) {
    let t = timeline.tick().0 as f32 * tick.0.as_secs_f32();
    for (mut transform, mut flags, circler) in &mut characters {
        // (Walking 0.8 of each 1.3 s, the angle stands for the rest.)
        let walked = if circler.stops {
            (t / 1.3).floor() * 0.8 + (t % 1.3).min(0.8)
        } else {
            t
        };
        let a = walked * 0.8;
        transform.translation = Vec3::new(6.0 * a.cos(), 0.0, 6.0 * a.sin());
        transform.rotation = Quat::from_rotation_y(-a);
        flags.0 = u8::from(t % 1.0 < 0.4) * CROUCHED_BIT;
    }
}

/// What the client had on screen at one frame: its rendered pose and each box by bone.
type Screen = (RenderedPose, Vec<(String, GlobalTransform)>);

fn screen(world: &mut World) -> Option<Screen> {
    let mut proxies = world.query::<(&RenderedPose, &Children)>();
    let (pose, children) = proxies.iter(world).next()?;
    let (pose, children) = (*pose, children.to_vec());
    // Its own boxes only: the server's are not replicated along with the character.
    assert_eq!(children.len(), 11, "the proxy's children");
    let boxes = children
        .iter()
        .filter_map(|c| {
            let e = world.entity(*c);
            Some((
                e.get::<HitBox>()?.bone.clone(),
                *e.get::<GlobalTransform>()?,
            ))
        })
        .collect::<Vec<_>>();
    Some((pose, boxes))
}

#[test]
fn layouts_load_and_the_server_rebuilds_exactly_what_the_client_drew() {
    the_server_rebuilds_exactly_what_the_client_drew(20.0, false, 120);
}

/// At 1 Hz with stops, the states sent between a slow proxy's grid's (the tick after they were
/// sampled) pose the boxes as the server recorded them too.
#[test]
fn a_slow_proxys_boxes_are_rebuilt_exactly_through_its_states_off_the_grid() {
    the_server_rebuilds_exactly_what_the_client_drew(1.0, true, 600);
}

/// Loads the layout (a broken one is reported), lets a client draw a circling character sent
/// at `rate_hz` (standing now and then with `stops`) in every mode, `steps` frames each, and
/// checks every frame that the server rebuilds its boxes exactly as the client drew them.
fn the_server_rebuilds_exactly_what_the_client_drew(rate_hz: f32, stops: bool, steps: usize) {
    let mut tb = Testbed::new(TestbedConfig {
        clients: 1,
        conditions: LinkConditions {
            latency: Duration::from_millis(60),
            jitter: Duration::from_millis(10),
            loss: 0.05,
            update_rate_hz: 20.0,
        },
        ..default()
    });
    tb.server().add_plugins(asset_plugin());
    tb.client(0).add_plugins(asset_plugin());
    tb.add_plugins(unlag_testbed::RapierFixedPlugin::default())
        .add_plugins(ProxySmoothingPlugin::default())
        .add_plugins(RewindPlugin::default());
    tb.server().add_systems(FixedUpdate, circle);
    tb.client(0).add_systems(Update, give_proxies_boxes);
    assert!(tb.run_until(Duration::from_secs(3), |tb| tb.all_synced()));

    // A broken layout is reported with its file and field, and spawns nothing.
    let broken: Handle<HitBoxLayout> = tb
        .server_world()
        .resource::<AssetServer>()
        .load("tests/fixtures/broken.hitboxes.ron");
    assert!(tb.run_until(Duration::from_secs(5), |tb| {
        tb.server_world()
            .resource::<AssetServer>()
            .load_state(&broken)
            .is_failed()
    }));
    let state = tb
        .server_world()
        .resource::<AssetServer>()
        .load_state(&broken);
    let message = format!("{state:?}");
    assert!(
        message.contains("broken.hitboxes.ron") && message.contains("bone"),
        "{message}"
    );

    let layout = tb.server_world().resource::<AssetServer>().load(HUMANOID);
    let server_character = tb
        .server_world_mut()
        .spawn((
            Circler { stops },
            SmoothedProxy,
            NetUpdateFrequency(rate_hz),
            UseHitBoxLayout(layout),
            Replicate::to_clients(NetworkTarget::All),
        ))
        .id();
    assert!(
        tb.run_until(Duration::from_secs(5), |tb| {
            tb.server_world()
                .get::<FrameHistory>(server_character)
                .is_some_and(|h| h.boxes().len() == 11)
        }),
        "the layout's 11 boxes are spawned and recorded"
    );
    // (A 1-Hz proxy is drawn a second and more behind, from its third state on.)
    tb.run_for(Duration::from_secs_f64(2.0 + 2.0 / f64::from(rate_hz)));

    let mut compared = 0;
    // Frames drawn towards or from a state sent off the grid.
    let mut off_grid_frames = 0;
    let mut crouched_frames = 0;
    let mut bones_seen = 0;
    // How far the left leg's box swung from its standing or crouched pose, degrees.
    let mut leg_swing: Vec<f32> = Vec::new();
    for mode in [
        SmoothingMode::Hermite,
        SmoothingMode::Linear,
        SmoothingMode::Extrapolate,
        SmoothingMode::Snap,
    ] {
        {
            let world = tb.client_world_mut(0);
            let mut q = world.query::<&mut ProxySmoothing>();
            for mut p in q.iter_mut(world) {
                p.mode = mode;
            }
        }
        for _ in 0..steps {
            tb.step();
            let Some((pose, boxes)) = screen(tb.client_world_mut(0)) else {
                continue;
            };
            let sent = tb
                .server_world()
                .get::<SentStates>(server_character)
                .unwrap();
            if [pose.from, pose.to]
                .iter()
                .any(|t| sent.get(*t).is_some_and(|s| s.off_grid))
            {
                off_grid_frames += 1;
            }
            assert_eq!(boxes.len(), 11);
            assert_eq!(pose.mode, mode);
            let view = ClaimedView::from_rendered(server_character, &pose);
            let rebuilt = tb
                .server_world_mut()
                .run_system_once(move |q: RewindQuery| q.view_pose(&view))
                .unwrap()
                .unwrap_or_else(|e| panic!("{mode:?} {pose:?}: {e}"));
            let history = tb
                .server_world()
                .get::<FrameHistory>(server_character)
                .unwrap();
            // The root as drawn.
            let root = rebuilt.last().unwrap();
            assert!(
                root.0.distance(pose.position) < 1e-4,
                "{mode:?}: root {} vs drawn {}",
                root.0,
                pose.position
            );
            for (bone, global) in &boxes {
                let k = history
                    .hit_boxes()
                    .iter()
                    .position(|b| &b.bone == bone)
                    .unwrap();
                let (p, r) = rebuilt[k];
                let (_, client_r, client_p) = global.to_scale_rotation_translation();
                assert!(
                    // q and −q are the same rotation.
                    p.distance(client_p) < 1e-4 && r.dot(client_r).abs() > 1.0 - 1e-6,
                    "{mode:?} {bone}: server {p} {r} vs client {client_p} {client_r}"
                );
                bones_seen += 1;
            }
            if pose.flags & CROUCHED_BIT != 0 {
                crouched_frames += 1;
            }
            let leg = tb
                .client_world_mut(0)
                .query::<(&LayoutBone, &HitBox, &Transform)>()
                .iter(tb.client_world(0))
                .find(|(_, b, _)| b.bone == "upper_leg_l")
                .map(|(bone, _, t)| {
                    let rest = if pose.flags & CROUCHED_BIT != 0 {
                        bone.crouch
                    } else {
                        bone.stand
                    };
                    rest.rotation.angle_between(t.rotation).to_degrees()
                })
                .unwrap();
            leg_swing.push(leg);
            compared += 1;
        }
    }
    assert!(compared > 3 * steps, "{compared}");
    // Only slow proxies are sent states off their grid; a stopping one is.
    if stops {
        assert!(
            off_grid_frames > steps,
            "frames drawn with a state off the grid: {off_grid_frames}"
        );
    } else {
        assert_eq!(off_grid_frames, 0);
    }
    assert_eq!(bones_seen, compared * 11);
    assert!(
        crouched_frames > 50,
        "crouched poses compared: {crouched_frames}"
    );
    // It walks at 4.8 m/s: its legs swing up to 0.8 × 35°, through the whole arc.
    let most = leg_swing.iter().copied().fold(0.0, f32::max);
    let least = leg_swing.iter().copied().fold(f32::MAX, f32::min);
    assert!(
        most > 20.0 && least < 5.0,
        "left leg's swing: {least}° to {most}°"
    );

    // A claim the server never sent, or an impossible blend, is refused.
    let (pose, _) = screen(tb.client_world_mut(0)).unwrap();
    let refused = |view: ClaimedView| move |q: RewindQuery| q.view_pose(&view).map(|_| ());
    let base = ClaimedView::from_rendered(server_character, &pose);
    for (bad, why) in [
        (
            ClaimedView {
                from: base.from + 1_000_000,
                ..base
            },
            "unsent state",
        ),
        (
            ClaimedView {
                from: base.from,
                to: base.from + 3,
                alpha: 1.5,
                ..base
            },
            "alpha",
        ),
        (
            ClaimedView {
                ease: Vec3::splat(5.0),
                ..base
            },
            "ease",
        ),
        (
            ClaimedView {
                alpha: f32::NAN,
                ..base
            },
            "NaN",
        ),
        (
            ClaimedView {
                character: Entity::PLACEHOLDER,
                ..base
            },
            "unknown",
        ),
    ] {
        let result = tb.server_world_mut().run_system_once(refused(bad)).unwrap();
        assert!(result.is_err(), "{why}: {result:?}");
    }
}

/// A bursty link brings states after the ones behind them (a lost state's repeat or trail
/// copy comes after the next state): the client was drawing a curve across the gap, and eases
/// from it onto the curve through the late state. Those eases, decimetres where the walker
/// stops, are ones the server explains (so a shot is judged where the proxy was drawn), as it
/// explains the eases after starved frames: every claimed ease is, in `Hermite` and `Linear`
/// modes, over seeds whose draws bring dozens of late eases beyond
/// [`unlag::rewind::EASE_SLACK`] and holds that leave the proxy a metre behind its curve. A
/// burst long enough to hold the proxy past its extrapolation and two of its intervals is one
/// the server reads from the client's acknowledgements (`unlag::net::StatesSentTo::heard`):
/// each claim is judged half a second after it was drawn, as a shot's claims are once its
/// datagram (with the client's acknowledgements) has come up the link. In `Extrapolate` mode,
/// every new state's jump is eased: after a hold, the next one adds onto what is left of the
/// long ease, two jumps the server does not try together (the stop of a walker a hold ago):
/// such frames are judged on the curve, fewer than one in 500 (25 of 14 437 eased frames over
/// seeds 1-20).
#[test]
fn a_late_states_ease_is_one_the_server_explains() {
    /// How long after it was drawn a claim is judged: the up-link's 50 ms, and the client's
    /// acknowledgements packed and sent after a burst of upstream losses.
    const JUDGED_AFTER: usize = 120;
    let (mut late_beyond_slack, mut longest_ease) = (0, 0.0f32);
    let mut through_unheard_spells = 0;
    for (mode, seeds) in [
        (SmoothingMode::Hermite, 40u64),
        (SmoothingMode::Linear, 20),
        (SmoothingMode::Extrapolate, 20),
    ] {
        let (mut judged, mut unexplained) = (0usize, 0usize);
        for seed in 1..=seeds {
            let mut tb = Testbed::new(TestbedConfig {
                clients: 1,
                conditions: LinkConditions::new(
                    Duration::from_millis(100),
                    Duration::from_millis(10),
                    0.1,
                ),
                loss_burst: 8.0,
                seed,
                ..default()
            });
            tb.add_plugins(unlag_testbed::RapierFixedPlugin::default())
                .add_plugins(ProxySmoothingPlugin::default())
                .add_plugins(RewindPlugin::default());
            tb.server().add_systems(FixedUpdate, circle);
            assert!(tb.run_until(Duration::from_secs(3), |tb| tb.all_synced()));
            // (Before the proxy comes: a mode switched on a proxy drawn eases from where the
            // old mode drew it, which the server does not see.)
            tb.client_world_mut(0)
                .resource_mut::<unlag::smoothing::SmoothingSettings>()
                .default_mode = mode;
            let character = tb
                .server_world_mut()
                .spawn((
                    Circler { stops: true },
                    SmoothedProxy,
                    Replicate::to_clients(NetworkTarget::All),
                ))
                .id();
            tb.run_for(Duration::from_secs(3));
            let late_eases = |tb: &Testbed| {
                tb.client_world(0)
                    .resource::<unlag::smoothing::SmoothingStats>()
                    .late_eases
            };
            let (mut last_late, mut since_late) = (late_eases(&tb), u32::MAX);
            // The claims drawn and not yet judged, each with the step it is judged at.
            let mut waiting: std::collections::VecDeque<(usize, RenderedPose)> = default();
            let steps = 240 * 20;
            for step in 0..steps + JUDGED_AFTER {
                tb.step();
                while let Some(&(due, pose)) = waiting.front()
                    && due <= step
                {
                    waiting.pop_front();
                    let view = ClaimedView::from_rendered(character, &pose);
                    let (explained, without_heard) = tb
                        .server_world_mut()
                        .run_system_once(
                            move |q: RewindQuery,
                                  links: Query<(
                                &unlag::net::StatesSentTo,
                                &unlag::net::ClientAckLedger,
                            )>| {
                                let heard = links.single().ok().map(|(log, l)| log.heard(&l.0));
                                let Ok(at) = q.claimed_time(&view) else {
                                    return (false, false);
                                };
                                (
                                    q.ease_explained(&view, at, heard.as_ref()),
                                    q.ease_explained(&view, at, None),
                                )
                            },
                        )
                        .unwrap();
                    assert!(
                        explained || mode == SmoothingMode::Extrapolate,
                        "{mode:?}, seed {seed}: {pose:?}"
                    );
                    judged += 1;
                    unexplained += usize::from(!explained);
                    through_unheard_spells += usize::from(explained && !without_heard);
                }
                if step >= steps {
                    continue;
                }
                let late = late_eases(&tb);
                since_late = if late > last_late {
                    0
                } else {
                    since_late.saturating_add(1)
                };
                last_late = late;
                let Some(pose) = tb
                    .client_world_mut(0)
                    .query::<&RenderedPose>()
                    .iter(tb.client_world(0))
                    .next()
                    .copied()
                else {
                    continue;
                };
                assert_eq!(pose.mode, mode);
                if pose.ease.length() <= unlag::rewind::EASE_SLACK {
                    continue;
                }
                longest_ease = longest_ease.max(pose.ease.length());
                // Within the ease's 0.1 s of a late state (24 frames), and not starved since.
                if since_late < 24 && pose.kind == unlag::core::SampleKind::Interpolated {
                    late_beyond_slack += 1;
                }
                waiting.push_back((step + JUDGED_AFTER, pose));
            }
        }
        println!(
            "{mode:?}: {judged} frames eased beyond the slack, {unexplained} unexplained; so far {late_beyond_slack} after a late state, longest {longest_ease} m, {through_unheard_spells} explained through spells the client heard nothing in"
        );
        assert!(
            unexplained * 500 < judged,
            "{mode:?}: {unexplained} of {judged}"
        );
    }
    assert!(late_beyond_slack >= 30, "{late_beyond_slack}");
    // Bursts that held the proxy past its extrapolation left eases of a metre and more, paced
    // out over longer than the base 0.1 s (`unlag_core::catch_up_time`): explained all along.
    assert!(longest_ease >= 1.0, "{longest_ease}");
    // Some only through the spells the client acknowledged nothing in.
    assert!(through_unheard_spells >= 100, "{through_unheard_spells}");
}

/// The closed-form capsule cast used by rewind queries is exact: it lands on the surface (its
/// distance to the axis segment is the radius), and it hits exactly the rays that pass closer
/// to the axis than the radius. Printed beside it: how parry's iterative cast compares (it
/// stops up to millimetres off the surface and misses some rays outright, which is why the
/// rewind queries do not use it for capsules).
#[test]
fn capsule_casts_are_exact() {
    use bevy_rapier3d::parry::math::Pose;
    use bevy_rapier3d::parry::query::{Ray, RayCast};
    use bevy_rapier3d::parry::shape::Capsule;
    let mut rng = unlag::core::SplitMix64::new(3);
    let mut f = || rng.next_f64() as f32;
    let (mut hits, mut checked, mut worst_ours) = (0, 0, 0.0f32);
    let (mut parry_differs, mut parry_wrong, mut worst_parry) = (0, 0, 0.0f32);
    for i in 0..20_000 {
        let (h, r) = (0.05 + f() * 0.3, 0.03 + f() * 0.1);
        let origin = Vec3::new(f() - 0.5, f() - 0.5, f() - 0.5) * 4.0;
        let target = Vec3::new(f() - 0.5, f() - 0.5, f() - 0.5) * (h + r) * 2.0;
        let dir = (target - origin).normalize();
        let ours = unlag::core::ray_capsule(origin, dir, h, r, 10.0);
        let parry = Capsule::new_y(h, r).cast_ray_and_get_normal(
            &Pose::IDENTITY,
            &Ray::new(origin, dir),
            10.0,
            true,
        );
        let to_axis = |t: f32| {
            let p = origin + dir * t;
            p.distance(Vec3::new(0.0, p.y.clamp(-h, h), 0.0))
        };
        if let Some((t, n)) = ours {
            hits += 1;
            if t > 0.0 {
                worst_ours = worst_ours.max((to_axis(t) - r).abs());
            }
            let p = origin + dir * t;
            let expected = (p - Vec3::new(0.0, p.y.clamp(-h, h), 0.0)).normalize();
            assert!(
                t == 0.0 || n.distance(expected) < 1e-3,
                "normal {n} vs {expected}"
            );
        }
        if let Some(hit) = parry
            && hit.time_of_impact > 0.0
        {
            worst_parry = worst_parry.max((to_axis(hit.time_of_impact) - r).abs());
        }
        let differs = ours.is_some() != parry.is_some();
        if differs || i % 20 == 0 {
            // The truth: the closest the ray comes to the axis, sampled every 0.25 mm.
            let closest = (0..40_000)
                .map(|s| to_axis(s as f32 * 10.0 / 40_000.0))
                .fold(f32::INFINITY, f32::min);
            let graze = (closest - r).abs() < 3e-4;
            assert!(
                graze || ours.is_some() == (closest < r),
                "ours {ours:?}: the ray passes {closest} from the axis, radius {r}"
            );
            checked += 1;
            if differs {
                parry_differs += 1;
                if !graze && parry.is_some() != (closest < r) {
                    parry_wrong += 1;
                }
            }
        }
    }
    println!(
        "capsule casts: {hits} hits, {checked} checked against the sampled truth; off the \
         surface: ours ≤ {worst_ours:e} m, parry ≤ {worst_parry:e} m; parry hits or misses \
         differently on {parry_differs} rays, wrongly on {parry_wrong}"
    );
    assert!(hits > 5_000 && checked > 1_000);
    assert!(worst_ours < 1e-4, "{worst_ours}");
}

/// An infinite or NaN history set by hand used to overflow the frame count.
#[test]
fn history_frames_stay_bounded_whatever_the_record_time() {
    let tick = Duration::from_secs_f64(1.0 / 60.0);
    let frames = |t: f64| {
        RewindSettings {
            max_record_time: t,
            ..Default::default()
        }
        .history_frames(tick)
    };
    assert_eq!(frames(1.0), 62);
    assert_eq!(frames(f64::INFINITY), 3602);
    assert_eq!(frames(f64::NAN), 2);
    assert_eq!(frames(-1.0), 2);
}

/// `HitShape::inflated` moves every face: a ray just outside a capsule or a box reaches the
/// grown shape and not the shape, one just inside reaches the shape and not the shrunk one,
/// and no size goes below zero.
#[test]
fn an_inflated_hit_shape_moves_its_faces_by_the_margin() {
    use unlag::rewind::{HitShape, hit_box_ray};
    let m = 1e-4;
    let capsule = HitShape::Capsule {
        half_height: 0.16,
        radius: 0.06,
    };
    let cuboid = HitShape::Cuboid {
        half_extents: Vec3::new(0.2, 0.3, 0.06),
    };
    for shape in [capsule, cuboid] {
        // Along X, passing the shape's surface on +Z by `offset`.
        let reach = |shape: &HitShape, offset: f32| {
            let origin = Vec3::new(-5.0, 0.0, 0.06 + offset);
            hit_box_ray(
                shape,
                Vec3::ZERO,
                Quat::IDENTITY,
                origin,
                Vec3::X,
                10.0,
                0.0,
            )
            .is_some()
        };
        assert!(!reach(&shape, m / 2.0) && reach(&shape.inflated(m), m / 2.0));
        assert!(reach(&shape, -m / 2.0) && !reach(&shape.inflated(-m), -m / 2.0));
        assert!(reach(&shape.inflated(-m), -2.0 * m));
    }
    assert_eq!(
        capsule.inflated(-1.0),
        HitShape::Capsule {
            half_height: 0.16,
            radius: 0.0
        }
    );
}

/// A history's window bounds (what the broad phase is built from) hold every frame it keeps,
/// tick after tick as the ring overwrites its oldest frames, with the body's capsule around
/// each body centre; and whenever the newest frame ends a chunk of the ring, they are exactly
/// the bounds of the frames kept (a chunk's bounds are kept per chunk of eight frames, and a
/// bound that only grew would cull less and less).
/// The humanoid layout's boxes, standing, each on a new entity of `world`: what
/// [`FrameHistory::new`] takes for one character recorded by hand.
fn standing_humanoid(world: &mut World) -> Vec<(Entity, HitBox, Transform)> {
    let layout = HitBoxLayout::from_ron(
        include_str!("../../assets/humanoid.hitboxes.ron"),
        "assets/humanoid.hitboxes.ron",
    )
    .unwrap();
    layout
        .boxes
        .iter()
        .map(|b| {
            (
                world.spawn_empty().id(),
                HitBoxLayout::hit_box(b),
                b.stand.transform(),
            )
        })
        .collect()
}

#[test]
fn a_historys_window_bounds_hold_every_frame_it_keeps_and_no_more_once_chunks_fill() {
    use unlag::core::{Aabb, SplitMix64};
    let mut world = World::new();
    let boxes = standing_humanoid(&mut world);
    let locals: Vec<(Entity, Transform)> = boxes.iter().map(|(e, _, t)| (*e, *t)).collect();
    // 60 frames: seven chunks of eight and one of four.
    let mut history = FrameHistory::new(boxes, 60);
    let mut rng = SplitMix64::new(7);
    let mut root = Transform::from_xyz(0.0, 0.0, 0.0);
    let mut velocity = Vec3::X * 5.0;
    let mut exact_checks = 0;
    for tick in 0..400u32 {
        if rng.next_f64() < 0.1 {
            let a = rng.next_f64() as f32 * std::f32::consts::TAU;
            velocity = Vec3::new(a.cos(), (rng.next_f64() as f32 - 0.5) * 4.0, a.sin()) * 6.0;
        }
        root.translation += velocity / 60.0;
        let local = |e: Entity| locals.iter().find(|(b, _)| *b == e).unwrap().1;
        history
            .record(f64::from(tick) / 60.0, &root, (3.84, false), local)
            .unwrap();
        let poses = history.poses();
        let centre = history.boxes().len() + 1;
        let (h, r) = history.body();
        let grow = Vec3::new(r, h + r, r);
        let mut exact = Aabb::EMPTY;
        for slot in 0..poses.capacity() {
            if poses.slot_is_recorded(slot) {
                let p = poses.position_at_slot(slot, centre);
                exact.min = exact.min.min(p - grow);
                exact.max = exact.max.max(p + grow);
            }
        }
        let bounds = history.window_bounds().unwrap();
        let holds = bounds.min.cmple(exact.min).all() && bounds.max.cmpge(exact.max).all();
        assert!(holds, "tick {tick}: {bounds:?} does not hold {exact:?}");
        let slot = poses.newest_slot().unwrap();
        if (slot + 1).is_multiple_of(8) || slot + 1 == poses.capacity() {
            let off = (bounds.min - exact.min)
                .abs()
                .max((bounds.max - exact.max).abs());
            assert!(
                off.max_element() < 1e-5,
                "tick {tick}: {bounds:?} against {exact:?}"
            );
            exact_checks += 1;
        }
    }
    assert!(exact_checks >= 45, "{exact_checks}");
}

#[test]
fn the_broad_phases_body_track_drops_only_characters_a_ray_would_miss() {
    // A crowd of 64 humanoids 2.5 m apart, walking and turning, recorded at 60 Hz for 1.5 s
    // (62 frames kept; the judged span is the last 0.55 s): three jump 6 m within the span
    // (teleports), two come in late, one misses four ticks, one is recorded
    // off the ticks (4 ms late: off the track, looked up as before). Rays, shotgun pellets,
    // swept segments and rays grazing a body's capsule, at times across the judged span (on
    // frames or a hair off, between them, past the newest, before the span), find exactly
    // what the same broad phase finds without its body track, every hit to the bit, and test
    // the same characters' boxes (the capsule's verdict); splashes there find the same
    // characters near, at the same distances.
    use bevy::platform::collections::HashMap;
    use unlag::core::SplitMix64;
    use unlag::rewind::{RewindBroadPhase, RewindScene};
    let mut world = World::new();
    let mut rng = SplitMix64::new(21);
    let mut f = move || rng.next_f64() as f32;
    let mut histories: HashMap<Entity, FrameHistory> = HashMap::default();
    let mut walkers = Vec::new();
    let mut locals: HashMap<Entity, Transform> = HashMap::default();
    for k in 0..64 {
        let character = world.spawn_empty().id();
        let boxes = standing_humanoid(&mut world);
        locals.extend(boxes.iter().map(|(e, _, t)| (*e, *t)));
        histories.insert(character, FrameHistory::new(boxes, 62));
        let start = Vec3::new(2.5 * (k % 8) as f32, 0.0, 2.5 * (k / 8) as f32);
        walkers.push((character, Transform::from_translation(start), Vec3::ZERO));
    }
    let characters: Vec<Entity> = walkers.iter().map(|w| w.0).collect();
    let (teleporters, late, skipper, off_track) = (&[3, 20, 41][..], &[10, 50][..], 33, 60);
    let mut broad = RewindBroadPhase::default();
    let (mut hits, mut asked, mut too_old, mut tested) = (0, 0, 0, 0);
    let (mut splashes_near, mut splashes_touching) = (0, 0);
    // Compared three times: right after the late pair's arrival remade the track (tick 70),
    // after a stretch of rebuilds that kept it from tick to tick (the skipper missing the
    // newest frames), and after more.
    for (from, to) in [(0u32, 71u32), (71, 82), (82, 90)] {
        for tick in from..to {
            let time = f64::from(tick) / 60.0;
            for (k, (character, root, velocity)) in walkers.iter_mut().enumerate() {
                if f() < 0.1 {
                    let a = f() * std::f32::consts::TAU;
                    *velocity = Vec3::new(a.cos(), 0.0, a.sin()) * 5.0 * f();
                    root.rotation = Quat::from_rotation_y(a);
                }
                root.translation += *velocity / 60.0;
                if teleporters.contains(&k) && tick == 72 + k as u32 % 8 {
                    root.translation.x += 6.0;
                }
                let absent =
                    (late.contains(&k) && tick < 70) || (k == skipper && (78..82).contains(&tick));
                if absent {
                    continue;
                }
                let at = if k == off_track { time + 0.004 } else { time };
                let history = histories.get_mut(character).unwrap();
                history
                    .record(at, root, (3.84, false), |b| locals[&b])
                    .unwrap();
            }
            // As the plugin: rebuilt after each tick's recording, over the judged span.
            broad.rebuild_since(characters.iter().map(|c| (*c, &histories[c])), time - 0.55);
        }
        let newest = f64::from(to - 1) / 60.0;
        let since = newest - 0.55;
        assert_eq!(
            broad.tracked(),
            63,
            "every character but the one off the ticks"
        );
        let plain = broad.clone().without_body_track();
        assert_eq!(plain.tracked(), 0);
        let tracked = RewindScene {
            broad: &broad,
            histories: &histories,
        };
        let untracked = RewindScene {
            broad: &plain,
            histories: &histories,
        };
        type Answer = Result<Vec<Option<(Entity, Entity, [u32; 3], u32)>>, RewindError>;
        let key = |answer: Result<Vec<Option<RewindHit>>, RewindError>| -> Answer {
            answer.map(|hits| {
                hits.into_iter()
                    .map(|h| {
                        h.map(|h| {
                            let p = h.point.to_array().map(f32::to_bits);
                            (h.character, h.hit_box, p, h.distance.to_bits())
                        })
                    })
                    .collect()
            })
        };
        for shot in 0..1000 {
            // Times on frames, between them, past the newest and before the span.
            let time = match shot % 5 {
                0 => newest - f64::from((f() * 36.0).floor()) / 60.0,
                1 => newest + 0.01 * f64::from(f()),
                2 => since - 0.05 * f64::from(f()),
                _ => since + (newest - since) * f64::from(f()),
            };
            let character = characters[(f() * 64.0) as usize % 64];
            let target = walkers[(f() * 64.0) as usize % 64].1.translation;
            let a = f() * std::f32::consts::TAU;
            let origin =
                target + Vec3::new(a.cos(), 0.0, a.sin()) * (5.0 + 20.0 * f()) + Vec3::Y * 1.5;
            let aim = (target + Vec3::Y * (0.3 + 1.4 * f()) - origin).normalize();
            let side = aim.any_orthonormal_vector();
            // Grazing: level, passing a character's body capsule (as its history poses it then)
            // within 2 mm of its edge, in or out.
            let mut graze = || {
                let history = &histories[&character];
                let pair = history.poses().lookup(time).ok()?;
                let centre = history.poses().position(&pair, history.boxes().len() + 1);
                let (_, r) = history.body();
                let level = Vec3::new(aim.x, 0.0, aim.z).normalize();
                let across = Vec3::Y.cross(level);
                let off = r + 0.2 * f32::from(shot % 4 == 0) + 0.004 * (f() - 0.5);
                Some(vec![(centre + across * off - level * 12.0, level)])
            };
            let rays: Vec<(Vec3, Vec3)> = match shot % 3 {
                0 => vec![(origin, aim)],
                1 => match graze() {
                    Some(rays) => rays,
                    None => vec![(origin, aim)],
                },
                _ => (0..12)
                    .map(|_| {
                        let turn = Quat::from_axis_angle(aim, f() * std::f32::consts::TAU);
                        (origin, turn * Quat::from_axis_angle(side, 0.15 * f()) * aim)
                    })
                    .collect(),
            };
            let (max, radius) = match shot % 4 {
                0 => (aim.length() * 40.0, 0.2),
                _ => (100.0, 0.0),
            };
            let shooter = (shot % 7 == 0).then(|| characters[shot % 64]);
            // (The log lists every character whose body capsule the ray passed: the same ones.)
            let cast = |scene: &RewindScene<'_, HashMap<Entity, FrameHistory>>| {
                let mut log = Vec::new();
                let answer = scene.cast(
                    &rays,
                    max,
                    radius,
                    time,
                    shooter,
                    &[],
                    |_, _, m| m,
                    Some(&mut log),
                );
                (key(answer), log)
            };
            let ((a, log_a), (b, log_b)) = (cast(&tracked), cast(&untracked));
            assert_eq!(a, b, "shot {shot} at {time}");
            assert!(
                log_a == log_b,
                "shot {shot} at {time}: other characters tested"
            );
            tested += log_a.iter().map(|e| e.boxes.len()).sum::<usize>();
            // A splash there: around one of the character's boxes as its history poses it then
            // (or the aimed-at spot), reaching a few centimetres to metres; the characters
            // near, and how near, are the same to the bit whether the track rules out the far
            // ones or every history is read.
            let centre = histories[&character]
                .poses()
                .lookup(time)
                .ok()
                .map(|pair| {
                    let boxes = histories[&character].boxes().len();
                    let k = (f() * boxes as f32) as usize % boxes;
                    histories[&character].poses().position(&pair, k)
                })
                .unwrap_or(target);
            let (yaw, pitch) = (
                f() * std::f32::consts::TAU,
                (f() - 0.5) * std::f32::consts::PI,
            );
            let way = Vec3::new(
                yaw.cos() * pitch.cos(),
                pitch.sin(),
                yaw.sin() * pitch.cos(),
            );
            let point = centre + way * f();
            let reach = if shot % 3 == 0 { 4.0 * f() } else { 0.3 * f() };
            let exclude = [characters[(shot * 7) % 64]];
            let splash = |scene: &RewindScene<'_, HashMap<Entity, FrameHistory>>| {
                scene
                    .within(characters.iter().copied(), point, reach, time, &exclude)
                    .map(|near| {
                        near.into_iter()
                            .map(|(e, d)| (e, d.to_bits()))
                            .collect::<Vec<_>>()
                    })
            };
            let (near_a, near_b) = (splash(&tracked), splash(&untracked));
            assert_eq!(near_a, near_b, "splash {shot} at {time}");
            let near = near_a.map_or(0, |n| n.len());
            splashes_near += near;
            splashes_touching += usize::from(near > 0);
            match a {
                Ok(answers) => {
                    asked += answers.len();
                    hits += answers.iter().flatten().count();
                }
                Err(_) => too_old += 1,
            }
        }
    }
    // The comparison means something: many rays hit someone in the crowd, many pass, and
    // times before the span are refused alike.
    assert!(
        hits > 2000 && hits < asked - 2000,
        "{hits} of {asked} rays hit"
    );
    assert!(too_old > 100, "{too_old} shots too old");
    assert!(tested > 0, "no box tested");
    // Splashes reach someone often, and several at once sometimes.
    assert!(
        splashes_touching > 1500 && splashes_near > splashes_touching + 1500,
        "{splashes_touching} splashes reached {splashes_near}"
    );
}
