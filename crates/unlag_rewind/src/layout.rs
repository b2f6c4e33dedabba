//! [`HitBoxLayout`]: a character's hit boxes declared in a RON asset, spawned as child entities
//! and posed (standing or crouched) from the flags the character shows.

use crate::{HitBox, HitShape, RewindSystems};
use bevy::asset::io::Reader;
use bevy::asset::{AssetLoadFailedEvent, AssetLoader, LoadContext};
use bevy::ecs::schedule::common_conditions::any_with_component;
use bevy::prelude::*;
use bevy::transform::TransformSystems;
use lightyear::prelude::Client;
use lightyear::prelude::server::Server;
use serde::Deserialize;
use unlag_smoothing::{ProxyFlags, ProxySmoothingSystems, RenderedPose};

/// Bit of [`ProxyFlags`] that crouches a layout's boxes (bit 0, the movement plugin's
/// convention).
pub const CROUCHED_BIT: u8 = 1;

/// A box's pose relative to the character in a layout file.
#[derive(Copy, Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayoutPose {
    /// Position, metres (x, y, z; y up from the character's feet).
    pub translation: (f32, f32, f32),
    /// Rotation, degrees about x, y, z (applied y, then x, then z). Default none.
    #[serde(default)]
    pub rotation_degrees: (f32, f32, f32),
}

impl LayoutPose {
    /// The pose as a transform.
    pub fn transform(&self) -> Transform {
        let (x, y, z) = self.translation;
        let (rx, ry, rz) = self.rotation_degrees;
        Transform::from_xyz(x, y, z).with_rotation(Quat::from_euler(
            EulerRot::YXZ,
            ry.to_radians(),
            rx.to_radians(),
            rz.to_radians(),
        ))
    }

    fn is_finite(&self) -> bool {
        let (a, b, c) = self.translation;
        let (d, e, f) = self.rotation_degrees;
        [a, b, c, d, e, f].iter().all(|v| v.is_finite())
    }
}

/// A shape in a layout file.
#[derive(Copy, Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum LayoutShape {
    /// A box with these half extents, metres.
    Cuboid {
        /// Half extents (x, y, z), metres.
        half_extents: (f32, f32, f32),
    },
    /// A capsule along the box's local Y.
    Capsule {
        /// Half the cylinder's height, metres.
        half_height: f32,
        /// Radius, metres.
        radius: f32,
    },
}

/// One hit box of a layout.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayoutBox {
    /// The bone ("head", "upper_arm_l", ...).
    pub bone: String,
    /// The shape.
    pub shape: LayoutShape,
    /// Whether a hit here is a headshot. Default false.
    #[serde(default)]
    pub is_head: bool,
    /// Damage multiplier. Default 1.
    #[serde(default = "one")]
    pub damage_multiplier: f32,
    /// Pose when standing.
    pub stand: LayoutPose,
    /// Pose when crouched ([`CROUCHED_BIT`] shown); the standing pose when absent.
    #[serde(default)]
    pub crouch: Option<LayoutPose>,
}

fn one() -> f32 {
    1.0
}

/// A character's hit boxes, loaded from a `.hitboxes.ron` file (see
/// `assets/humanoid.hitboxes.ron`). Put [`UseHitBoxLayout`] on a character to spawn them.
#[derive(Asset, TypePath, Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HitBoxLayout {
    /// The boxes.
    pub boxes: Vec<LayoutBox>,
}

/// A layout that does not parse or is not valid: the file and the field are named.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{file}: {message}")]
pub struct LayoutError {
    /// The file (its asset path).
    pub file: String,
    /// What is wrong, and where: `line:column` for syntax, `boxes[i].field` for values.
    pub message: String,
}

impl HitBoxLayout {
    /// Parses and checks a layout; `file` names it in errors.
    pub fn from_ron(text: &str, file: &str) -> Result<Self, LayoutError> {
        let error = |message: String| LayoutError {
            file: file.to_owned(),
            message,
        };
        let layout: Self = ron::from_str(text).map_err(|e| error(e.to_string()))?;
        layout.validate().map_err(error)?;
        Ok(layout)
    }

    fn validate(&self) -> Result<(), String> {
        if self.boxes.is_empty() {
            return Err("boxes: a layout needs at least one box".into());
        }
        for (i, b) in self.boxes.iter().enumerate() {
            let field = |name: &str| format!("boxes[{i}] ({}).{name}", b.bone);
            if b.bone.is_empty() {
                return Err(format!("boxes[{i}].bone: must not be empty"));
            }
            match b.shape {
                LayoutShape::Cuboid {
                    half_extents: (x, y, z),
                } => {
                    if ![x, y, z].iter().all(|v| v.is_finite() && *v > 0.0) {
                        return Err(format!(
                            "{}: must be finite and positive",
                            field("shape.half_extents")
                        ));
                    }
                }
                LayoutShape::Capsule {
                    half_height,
                    radius,
                } => {
                    if !(radius.is_finite() && radius > 0.0) {
                        return Err(format!(
                            "{}: must be finite and positive",
                            field("shape.radius")
                        ));
                    }
                    if !(half_height.is_finite() && half_height >= 0.0) {
                        return Err(format!(
                            "{}: must be finite and not negative",
                            field("shape.half_height")
                        ));
                    }
                }
            }
            if !(b.damage_multiplier.is_finite() && b.damage_multiplier >= 0.0) {
                return Err(format!(
                    "{}: must be finite and not negative",
                    field("damage_multiplier")
                ));
            }
            if !b.stand.is_finite() {
                return Err(format!("{}: must be finite", field("stand")));
            }
            if b.crouch.is_some_and(|c| !c.is_finite()) {
                return Err(format!("{}: must be finite", field("crouch")));
            }
        }
        Ok(())
    }

    /// The hit box a layout box stands for.
    pub fn hit_box(b: &LayoutBox) -> HitBox {
        HitBox {
            shape: match b.shape {
                LayoutShape::Cuboid { half_extents } => HitShape::Cuboid {
                    half_extents: half_extents.into(),
                },
                LayoutShape::Capsule {
                    half_height,
                    radius,
                } => HitShape::Capsule {
                    half_height,
                    radius,
                },
            },
            bone: b.bone.clone(),
            is_head: b.is_head,
            damage_multiplier: b.damage_multiplier,
        }
    }

    /// Spawns the layout's boxes as children of `character`, standing. They are not
    /// replicated with their character (lightyear would otherwise copy every child of a
    /// replicated entity): each side spawns its own from the layout.
    pub fn spawn(&self, commands: &mut Commands, character: Entity) {
        commands.entity(character).with_children(|c| {
            for b in &self.boxes {
                let stand = b.stand.transform();
                c.spawn((
                    Self::hit_box(b),
                    stand,
                    LayoutBone {
                        stand,
                        crouch: b.crouch.map_or(stand, |p| p.transform()),
                    },
                    lightyear::prelude::DisableReplicateHierarchy,
                ));
            }
        });
    }
}

/// Loads [`HitBoxLayout`]s from `.hitboxes.ron` files.
#[derive(Default, TypePath)]
pub struct HitBoxLayoutLoader;

impl AssetLoader for HitBoxLayoutLoader {
    type Asset = HitBoxLayout;
    type Settings = ();
    type Error = LayoutError;

    async fn load(
        &self,
        reader: &mut dyn Reader,
        _settings: &(),
        load_context: &mut LoadContext<'_>,
    ) -> Result<HitBoxLayout, LayoutError> {
        let file = load_context.path().to_string();
        let mut bytes = Vec::new();
        reader
            .read_to_end(&mut bytes)
            .await
            .map_err(|e| LayoutError {
                file: file.clone(),
                message: e.to_string(),
            })?;
        let text = std::str::from_utf8(&bytes).map_err(|e| LayoutError {
            file: file.clone(),
            message: format!("not UTF-8: {e}"),
        })?;
        HitBoxLayout::from_ron(text, &file)
    }

    fn extensions(&self) -> &[&str] {
        &["hitboxes.ron"]
    }
}

/// Put on a character (server entity, or a client's proxy of one) to give it the layout's hit
/// boxes once the asset is loaded. A layout that fails to load is logged with its file and
/// field, and the character gets no boxes.
#[derive(Component, Clone, Debug)]
pub struct UseHitBoxLayout(pub Handle<HitBoxLayout>);

/// The layout's poses of a spawned box; [`CROUCHED_BIT`] picks between them.
#[derive(Component, Copy, Clone, Debug, PartialEq)]
pub struct LayoutBone {
    /// Pose when standing.
    pub stand: Transform,
    /// Pose when crouched.
    pub crouch: Transform,
}

/// Marks a character whose layout boxes were spawned.
#[derive(Component)]
struct LayoutSpawned;

fn spawn_layouts(
    mut commands: Commands,
    layouts: Option<Res<Assets<HitBoxLayout>>>,
    characters: Query<(Entity, &UseHitBoxLayout), Without<LayoutSpawned>>,
) {
    let Some(layouts) = layouts else {
        return;
    };
    for (entity, layout) in &characters {
        if let Some(layout) = layouts.get(&layout.0) {
            layout.spawn(&mut commands, entity);
            commands.entity(entity).insert(LayoutSpawned);
        }
    }
}

fn report_failures(mut failures: MessageReader<AssetLoadFailedEvent<HitBoxLayout>>) {
    for failure in failures.read() {
        error!("hit-box layout did not load: {}", failure.error);
    }
}

/// Poses layout boxes from the flags the character shows: a proxy's rendered flags on a
/// client, the character's own flags on the server.
fn pose_layout_boxes(
    characters: Query<(&Children, Option<&RenderedPose>, Option<&ProxyFlags>)>,
    mut bones: Query<(&LayoutBone, &mut Transform)>,
) {
    for (children, rendered, flags) in &characters {
        let shown = rendered
            .map(|r| r.flags)
            .or(flags.map(|f| f.0))
            .unwrap_or(0);
        let crouched = shown & CROUCHED_BIT != 0;
        for child in children.iter() {
            if let Ok((bone, mut transform)) = bones.get_mut(child) {
                let pose = if crouched { bone.crouch } else { bone.stand };
                transform.set_if_neq(pose);
            }
        }
    }
}

/// Registers the layout asset once every plugin is built (the `AssetPlugin` may come after
/// this one), if the app has an asset server.
pub(crate) fn finish(app: &mut App) {
    if app.world().contains_resource::<AssetServer>()
        && !app.world().contains_resource::<Assets<HitBoxLayout>>()
    {
        app.init_asset::<HitBoxLayout>()
            .register_asset_loader(HitBoxLayoutLoader)
            .add_systems(PreUpdate, (spawn_layouts, report_failures));
    }
}

pub(crate) fn build(app: &mut App) {
    // The server poses boxes for recording, after each tick; a client poses its proxies'
    // boxes once they are placed for the frame.
    app.add_systems(
        FixedPostUpdate,
        pose_layout_boxes
            .run_if(any_with_component::<Server>)
            .before(RewindSystems::Record),
    )
    .add_systems(
        PostUpdate,
        pose_layout_boxes
            .run_if(any_with_component::<Client>)
            .after(ProxySmoothingSystems::Place)
            .before(TransformSystems::Propagate),
    );
}
