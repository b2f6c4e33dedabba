//! The match: an arena with walls, server-driven bots, and scripted clients that move and shoot
//! at what they see.

use bevy::prelude::*;
use lightyear::prelude::*;
use unlag::combat::{Armory, FireCommand, ReloadCommand};
use unlag::core::SplitMix64;
use unlag::core::quantize::{quantize_accel, quantize_angle};
use unlag::movement::{
    CharacterInput, CharacterMovement, MovementState, NextMove, Prediction, flags,
};
use unlag::net::AutonomousProxy;
use unlag::rewind::{CROUCHED_BIT, HitBox};
use unlag::smoothing::{ProxyFlags, RenderedPose};

/// The shooter example's arena (from `unlag_demo`): the report plays on the same map.
pub use unlag_demo::shooter::{ARENA_HALF, COVER, spawn_arena as spawn_map};

/// The shooter's hit-box layout and how clients give it to proxies (from `unlag_demo`).
pub use unlag_demo::game::{HUMANOID, give_proxies_boxes};

/// A server-driven character: walks a loop around the arena's middle (between the cover and
/// the outer walls), strafing, and now and then jumps, crouches or dashes.
#[derive(Component, Clone, Debug)]
pub struct Bot {
    /// Where on the loop it starts, 0–1.
    pub phase: f32,
    /// Radius of its loop, metres.
    pub radius: f32,
    /// Its walking speed, m/s.
    pub speed: f32,
}

/// How high a bot's jump goes, metres.
const JUMP_HEIGHT: f32 = 1.0;

/// `FixedUpdate` on the server: places every bot at its scripted pose for this tick.
pub fn drive_bots(
    timeline: Res<LocalTimeline>,
    tick: Res<lightyear::core::tick::TickDuration>,
    mut bots: Query<(&Bot, &mut Transform, &mut ProxyFlags)>,
) {
    let t = timeline.tick().0 as f32 * tick.0.as_secs_f32();
    for (bot, mut transform, mut flags) in &mut bots {
        let s = t + bot.phase * 37.0;
        // Dashes: 0.3 s at 2.5× speed every 4 s, folded into the distance walked.
        let dashes = (s / 4.0).floor() * 0.45 + ((s % 4.0) - 3.7).clamp(0.0, 0.3) * 1.5;
        let walked = bot.speed * (s + dashes);
        let angle = bot.phase * std::f32::consts::TAU + walked / bot.radius;
        // Strafe in and out across the loop.
        let r = bot.radius + 1.5 * (s * 1.3).sin();
        let hop = s % 3.0;
        let y = if hop < 0.6 {
            JUMP_HEIGHT * 4.0 * (hop / 0.6) * (1.0 - hop / 0.6)
        } else {
            0.0
        };
        transform.translation = Vec3::new(r * angle.cos(), y, r * angle.sin());
        transform.rotation = Quat::from_rotation_y(-angle);
        flags.0 = if s % 5.0 > 4.0 { CROUCHED_BIT } else { 0 };
    }
}

/// A bot on loop `index` of `count` (radii between the cover and the outer walls).
pub fn bot(index: usize, count: usize, rng: &mut SplitMix64) -> Bot {
    let k = index as f32 / count.max(1) as f32;
    Bot {
        phase: k,
        radius: 17.0 + 8.0 * ((index * 7) % count.max(1)) as f32 / count.max(1) as f32,
        speed: 3.5 + rng.next_f64() as f32 * 1.5,
    }
}

/// Where client `i` of `count` starts, on the ground: spread on a circle of 8 m.
pub fn spawn_point(i: usize, count: usize) -> Vec3 {
    let a = i as f32 / count.max(1) as f32 * std::f32::consts::TAU + 0.4;
    Vec3::new(8.0 * a.cos(), 0.0, 8.0 * a.sin())
}

/// Makes a client App a scripted player: [`drive_client`] walks its character (`FixedUpdate`,
/// before the movement simulation) and [`client_shoots`] fires (`Update`, before the combat
/// client), once a [`ClientScript`] is inserted. The report's clients, the headless UDP
/// players and the tests all play this way.
pub fn add_client_script(app: &mut App) {
    app.add_systems(
        FixedUpdate,
        drive_client.before(unlag::movement::MovementPredictionSystems::Simulate),
    )
    .add_systems(
        Update,
        client_shoots.before(unlag::combat::CombatSystems::Client),
    );
}

/// A scripted client (resource on its App): moves its character and fires at what it draws.
#[derive(Resource, Clone, Debug)]
pub struct ClientScript {
    /// Randomness of its aims and weapon choices.
    pub rng: SplitMix64,
    /// The client's time (its `Time`'s elapsed seconds) at which it next fires.
    pub next_shot: f64,
    /// Seconds between two shots. A client whose frames are longer fires once a frame, as a
    /// player holding the trigger does.
    pub interval: f64,
    /// Weapons it uses, by id: rifle, shotgun, launcher.
    pub weapons: [u8; 3],
    /// Whether it moves and shoots.
    pub running: bool,
    /// Whether it fires honest shots (a cheater sends its own).
    pub shoots: bool,
}

/// `FixedUpdate` on a client, before the movement simulation: walks the character around its
/// corner of the arena (a wide figure of eight), jumping now and then.
pub fn drive_client(
    script: Option<Res<ClientScript>>,
    mut players: Query<
        (
            &Prediction<CharacterMovement>,
            &MovementState<CharacterMovement>,
            Option<&mut NextMove<CharacterMovement>>,
            Entity,
        ),
        With<AutonomousProxy>,
    >,
    mut commands: Commands,
) {
    let running = script.as_ref().is_some_and(|s| s.running);
    for (prediction, state, next, entity) in &mut players {
        let seq = u32::from(prediction.next_seq().0) as f32;
        let input = if running {
            let t = seq / 60.0;
            let dir = Vec2::new((t * 0.9).cos(), (t * 0.45).sin() * 1.4);
            // Turn back towards the middle near the walls.
            let feet = state.0.feet;
            let dir = if feet.x.abs() > 20.0 || feet.z.abs() > 20.0 {
                -Vec2::new(feet.x, feet.z).normalize_or_zero()
            } else {
                dir.normalize_or_zero()
            };
            CharacterInput {
                accel: quantize_accel(dir),
                yaw: quantize_angle(f32::atan2(-dir.x, -dir.y)),
                pitch: 0,
                flags: if (seq as u32).is_multiple_of(170) {
                    flags::JUMP
                } else {
                    0
                },
            }
        } else {
            CharacterInput::default()
        };
        NextMove::write(&mut commands, entity, next, input);
    }
}

/// `Update` on a client, before combat: every [`ClientScript::interval`], fire at a point of a random proxy's
/// hit box as drawn (its centre, or 2 cm outside its silhouette), with a rifle most of the
/// time, else the shotgun or the launcher; reload when empty.
pub fn client_shoots(
    time: Res<Time>,
    script: Option<ResMut<ClientScript>>,
    armory: Option<Res<Armory>>,
    own: Query<&MovementState<CharacterMovement>, With<AutonomousProxy>>,
    proxies: Query<&Children, With<RenderedPose>>,
    boxes: Query<(&HitBox, &GlobalTransform)>,
    (mut fire, mut reload): (MessageWriter<FireCommand>, MessageWriter<ReloadCommand>),
) {
    let Some(mut script) = script else {
        return;
    };
    let now = time.elapsed_secs_f64();
    if !script.running || !script.shoots || now < script.next_shot {
        return;
    }
    script.next_shot = (script.next_shot + script.interval).max(now);
    let Ok(me) = own.single() else {
        return;
    };
    let roll = script.rng.next_u64() % 10;
    let weapon = match roll {
        0 => script.weapons[1],
        1 => script.weapons[2],
        _ => script.weapons[0],
    };
    if armory.as_ref().and_then(|a| a.ammo(weapon)) == Some(0) {
        if !armory.as_ref().is_some_and(|a| a.reloading(weapon)) {
            reload.write(ReloadCommand { weapon });
        }
        return;
    }
    let eye = me.0.feet + Vec3::Y * 1.6;
    let all: Vec<Entity> = proxies.iter().flat_map(|c| c.iter()).collect();
    let Some(target) = aim_at_a_box(&mut script.rng, eye, &all, &boxes) else {
        return;
    };
    fire.write(FireCommand {
        weapon,
        origin: eye,
        aim: target - eye,
    });
}

/// Where a scripted shooter at `eye` aims: a point of a random hit box among `parts` (the
/// proxies' children, as drawn), its centre half the time, else 2 cm outside its silhouette
/// to one side of the line of sight: the report's clients and the combat tests shoot this
/// way, so seen hits and seen misses both come close to every edge. `None` when there is no
/// proxy, or the part drawn is not a hit box. Draws from `rng` in a fixed order (the part,
/// centre or edge, the side), so a seed plays the same shots.
pub fn aim_at_a_box(
    rng: &mut SplitMix64,
    eye: Vec3,
    parts: &[Entity],
    boxes: &Query<(&HitBox, &GlobalTransform)>,
) -> Option<Vec3> {
    if parts.is_empty() {
        return None;
    }
    let pick = parts[(rng.next_u64() % parts.len() as u64) as usize];
    let (hit_box, global) = boxes.get(pick).ok()?;
    let centre = global.translation();
    if rng.next_u64().is_multiple_of(2) {
        return Some(centre);
    }
    let toward = (centre - eye).normalize_or_zero();
    let side = toward.cross(Vec3::Y).normalize_or_zero();
    let sign = if rng.next_u64().is_multiple_of(2) {
        1.0
    } else {
        -1.0
    };
    // The box's extent along `side`: its support distance.
    let extent = hit_box.shape.extent_along(global.rotation(), side);
    Some(centre + side * sign * (extent + 0.02))
}
