//! What the shooter and karts examples draw alike: sky, sun, ambient light, and a mesh for every
//! box of the level (`unlag_demo::shooter::Wall`: the floor and the walls).

use bevy::prelude::*;
use unlag_demo::shooter::Wall;

/// Sky, sun, ambient light and the level's boxes.
pub struct ScenePlugin;

impl Plugin for ScenePlugin {
    fn build(&self, app: &mut App) {
        app.insert_resource(GlobalAmbientLight {
            brightness: 400.0,
            ..default()
        })
        .insert_resource(ClearColor(Color::srgb(0.55, 0.7, 0.85)))
        .add_systems(Startup, spawn_sun)
        .add_systems(Update, dress_walls);
    }
}

fn spawn_sun(mut commands: Commands) {
    commands.spawn((
        DirectionalLight {
            illuminance: 9000.0,
            shadow_maps_enabled: false,
            ..default()
        },
        Transform::from_xyz(10.0, 30.0, 15.0).looking_at(Vec3::ZERO, Vec3::Y),
    ));
}

#[derive(Default)]
struct WallMaterials(Option<Handle<StandardMaterial>>);

/// A box whose faces carry their light in vertex colours: unlit, so a software renderer (CI,
/// virtual displays) does not light every pixel of the level.
fn shaded_box(half_extents: Vec3, colour: Color) -> Mesh {
    let mut mesh = Mesh::from(Cuboid::from_size(half_extents * 2.0));
    let sun = Vec3::new(0.4, 1.0, 0.6).normalize();
    let base = colour.to_linear();
    let colours: Vec<[f32; 4]> = match mesh.attribute(Mesh::ATTRIBUTE_NORMAL) {
        Some(bevy::mesh::VertexAttributeValues::Float32x3(normals)) => normals
            .iter()
            .map(|n| {
                let light = 0.55 + 0.45 * Vec3::from(*n).dot(sun).max(0.0);
                [base.red * light, base.green * light, base.blue * light, 1.0]
            })
            .collect(),
        _ => Vec::new(),
    };
    mesh.insert_attribute(Mesh::ATTRIBUTE_COLOR, colours);
    mesh
}

fn dress_walls(
    mut commands: Commands,
    mut materials: ResMut<Assets<StandardMaterial>>,
    mut meshes: ResMut<Assets<Mesh>>,
    walls: Query<(Entity, &Wall, &Transform), Without<Mesh3d>>,
    mut made: Local<WallMaterials>,
) {
    if walls.is_empty() {
        return;
    }
    let material = made
        .0
        .get_or_insert_with(|| {
            materials.add(StandardMaterial {
                unlit: true,
                ..default()
            })
        })
        .clone();
    for (entity, w, transform) in &walls {
        let colour = if transform.translation.y < 0.0 {
            Color::srgb(0.42, 0.5, 0.4)
        } else {
            Color::srgb(0.62, 0.6, 0.66)
        };
        commands.entity(entity).insert((
            Mesh3d(meshes.add(shaded_box(w.half_extents, colour))),
            MeshMaterial3d(material.clone()),
        ));
    }
}
