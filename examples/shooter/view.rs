//! The shooter's 3D view (the arena's boxes are `scene`'s): a first-person camera on the local
//! player, every other character built of boxes and capsules that are exactly its hit boxes
//! (so what you shoot at is what the server rewinds), tracers, projectiles and explosions.

use bevy::camera::{PerspectiveProjection, Projection};
use bevy::prelude::*;
use bevy::transform::TransformSystems;
use unlag::combat::{Armory, ClientProjectile, LocalFire, ProjectileExploded, RemoteFire, Weapons};
use unlag::movement::{CharacterMovement, LookAngles, MovementPredictionSystems, MovementState};
use unlag::net::AutonomousProxy;
use unlag::rewind::{HitBox, HitShape};
use unlag_demo::game::{Scoreboard, eye_height};

pub struct ViewPlugin;

impl Plugin for ViewPlugin {
    fn build(&self, app: &mut App) {
        app.init_resource::<Effects>()
            .add_systems(Startup, (spawn_camera, load_palette))
            .add_systems(
                Update,
                (
                    dress_hit_boxes,
                    hide_dormant,
                    dress_projectiles,
                    show_the_dead,
                    collect_effects,
                    draw_effects,
                ),
            )
            .add_systems(
                PostUpdate,
                follow_player
                    .after(MovementPredictionSystems::Place)
                    .before(TransformSystems::Propagate),
            );
    }
}

/// The player's eyes.
#[derive(Component)]
pub struct PlayerCamera;

fn spawn_camera(mut commands: Commands) {
    commands.spawn((
        PlayerCamera,
        Camera3d::default(),
        // Multisampling costs software renderers (CI, virtual displays) most of their frame.
        Msaa::Off,
        Projection::Perspective(PerspectiveProjection {
            fov: 75f32.to_radians(),
            ..default()
        }),
        Transform::from_xyz(0.0, 12.0, 30.0).looking_at(Vec3::ZERO, Vec3::Y),
    ));
}

/// Materials of the characters' parts.
#[derive(Resource)]
struct Palette {
    head: Handle<StandardMaterial>,
    torso: Handle<StandardMaterial>,
    limb: Handle<StandardMaterial>,
    dead: Handle<StandardMaterial>,
    projectile: Handle<StandardMaterial>,
}

fn load_palette(mut commands: Commands, mut materials: ResMut<Assets<StandardMaterial>>) {
    let mut plain = |c: Color| materials.add(StandardMaterial::from_color(c));
    let palette = Palette {
        head: plain(Color::srgb(0.95, 0.78, 0.6)),
        torso: plain(Color::srgb(0.85, 0.25, 0.2)),
        limb: plain(Color::srgb(0.3, 0.3, 0.38)),
        dead: plain(Color::srgb(0.25, 0.25, 0.25)),
        projectile: materials.add(StandardMaterial {
            base_color: Color::srgb(1.0, 0.6, 0.1),
            emissive: LinearRgba::rgb(8.0, 3.0, 0.5),
            ..default()
        }),
    };
    commands.insert_resource(palette);
}

fn part_material(palette: &Palette, hit_box: &HitBox) -> Handle<StandardMaterial> {
    if hit_box.is_head {
        palette.head.clone()
    } else if matches!(hit_box.bone.as_str(), "torso" | "pelvis") {
        palette.torso.clone()
    } else {
        palette.limb.clone()
    }
}

fn dress_hit_boxes(
    mut commands: Commands,
    bodies: Query<Entity, (With<unlag::smoothing::RenderedPose>, Without<Visibility>)>,
    unseen: Query<(), Without<Visibility>>,
    palette: Res<Palette>,
    mut meshes: ResMut<Assets<Mesh>>,
    boxes: Query<(Entity, &HitBox, Option<&ChildOf>), Without<Mesh3d>>,
) {
    // The characters carry their parts' visibility.
    for body in &bodies {
        commands.entity(body).insert(Visibility::default());
    }
    for (entity, hit_box, parent) in &boxes {
        // A proxy's boxes come with its layout, before its first drawn pose: its body gets its
        // visibility before they get their meshes (else Bevy warns, B0004, for every part).
        if let Some(body) = parent.map(ChildOf::parent)
            && unseen.contains(body)
        {
            commands.entity(body).insert(Visibility::default());
        }
        let mesh = match hit_box.shape {
            HitShape::Cuboid { half_extents } => meshes.add(Cuboid::from_size(half_extents * 2.0)),
            HitShape::Capsule {
                half_height,
                radius,
            } => meshes.add(Capsule3d::new(radius, half_height * 2.0)),
        };
        commands.entity(entity).insert((
            Mesh3d(mesh),
            MeshMaterial3d(part_material(&palette, hit_box)),
        ));
    }
}

/// Characters the server stopped sending (not relevant to us now: far, or out of sight) are not
/// drawn until it sends them again.
fn hide_dormant(
    mut bodies: Query<
        (Has<unlag::smoothing::ProxyDormant>, &mut Visibility),
        With<unlag::smoothing::ProxySmoothing>,
    >,
) {
    for (dormant, mut visibility) in &mut bodies {
        visibility.set_if_neq(if dormant {
            Visibility::Hidden
        } else {
            Visibility::Inherited
        });
    }
}

fn dress_projectiles(
    mut commands: Commands,
    palette: Res<Palette>,
    mut meshes: ResMut<Assets<Mesh>>,
    projectiles: Query<Entity, (With<ClientProjectile>, Without<Mesh3d>)>,
) {
    for entity in &projectiles {
        commands.entity(entity).insert((
            Mesh3d(meshes.add(Sphere::new(0.12))),
            MeshMaterial3d(palette.projectile.clone()),
        ));
    }
}

/// The dead are drawn grey until they respawn.
fn show_the_dead(
    board: Res<Scoreboard>,
    palette: Res<Palette>,
    mut boxes: Query<(&HitBox, &ChildOf, &mut MeshMaterial3d<StandardMaterial>)>,
) {
    if !board.is_changed() {
        return;
    }
    for (hit_box, parent, mut material) in &mut boxes {
        let alive = board.get(parent.parent()).is_none_or(|f| f.alive);
        let want = if alive {
            part_material(&palette, hit_box)
        } else {
            palette.dead.clone()
        };
        if material.0 != want {
            material.0 = want;
        }
    }
}

/// The camera at the local player's eyes (lower when crouched), looking where it looks; wider
/// when not aiming.
fn follow_player(
    own: Query<(&Transform, &MovementState<CharacterMovement>, &LookAngles), With<AutonomousProxy>>,
    armory: Option<Res<Armory>>,
    mut camera: Query<
        (&mut Transform, &mut Projection),
        (With<PlayerCamera>, Without<AutonomousProxy>),
    >,
) {
    let Ok((me, state, look)) = own.single() else {
        return;
    };
    let Ok((mut transform, mut projection)) = camera.single_mut() else {
        return;
    };
    let height = eye_height(&state.0);
    transform.translation = me.translation + Vec3::Y * height;
    transform.rotation = Quat::from_euler(EulerRot::YXZ, look.yaw, look.pitch, 0.0);
    if let Projection::Perspective(p) = projection.as_mut() {
        let fov = if armory.is_some_and(|a| a.aiming) {
            40.0
        } else {
            75.0
        };
        p.fov = f32::to_radians(fov);
    }
}

/// Short-lived lines and spheres.
#[derive(Resource, Default)]
struct Effects {
    /// (from, to, colour, seconds left)
    tracers: Vec<(Vec3, Vec3, Color, f32)>,
    /// (centre, radius, seconds left)
    blasts: Vec<(Vec3, f32, f32)>,
}

fn collect_effects(
    weapons: Res<Weapons>,
    mut effects: ResMut<Effects>,
    mut own: MessageReader<LocalFire>,
    mut remote: MessageReader<RemoteFire>,
    mut exploded: MessageReader<ProjectileExploded>,
) {
    for shot in own.read() {
        let range = weapons
            .table
            .as_ref()
            .and_then(|t| t.get(shot.weapon))
            .map_or(100.0, |w| w.range.min(100.0));
        for (dir, hit) in shot.directions.iter().zip(&shot.hits) {
            let end = hit.as_ref().map_or(shot.origin + *dir * range, |h| h.point);
            // From just below the eye, like a gun.
            let from = shot.origin - Vec3::Y * 0.15 + *dir * 0.5;
            effects
                .tracers
                .push((from, end, Color::srgb(1.0, 1.0, 0.6), 0.08));
        }
    }
    for shot in remote.read() {
        for end in shot.0.ends.iter() {
            effects
                .tracers
                .push((shot.0.origin, *end, Color::srgb(1.0, 0.4, 0.3), 0.12));
        }
    }
    for blast in exploded.read() {
        if blast.0.exploded {
            effects.blasts.push((blast.0.point, 0.0, 0.4));
        }
    }
}

fn draw_effects(time: Res<Time>, mut effects: ResMut<Effects>, mut gizmos: Gizmos) {
    let dt = time.delta_secs();
    for (from, to, colour, _) in &effects.tracers {
        gizmos.line(*from, *to, *colour);
    }
    for (centre, radius, left) in &mut effects.blasts {
        *radius += dt * 10.0;
        gizmos.sphere(
            Isometry3d::from_translation(*centre),
            *radius,
            Color::srgba(1.0, 0.5, 0.1, (*left / 0.4).clamp(0.0, 1.0)),
        );
    }
    effects.tracers.retain_mut(|t| {
        t.3 -= dt;
        t.3 > 0.0
    });
    effects.blasts.retain_mut(|b| {
        b.2 -= dt;
        b.2 > 0.0
    });
}
