//! [`HitBoxLayout`]: a character's hit boxes declared in a RON asset, spawned as child entities
//! and posed (standing or crouched, and swung by a walk cycle) from what the character shows.
//!
//! The walk cycle runs on server time at a fixed cadence, its swing scaled by the character's
//! horizontal speed, so it is a function of what a proxy's states carry (time, velocity,
//! flags): a client poses a proxy's boxes at its two states and blends them by the rendered
//! blend factor, and the server rebuilds the same from the frames it recorded at those states'
//! ticks ([`RewindQuery::view_pose`](crate::RewindQuery::view_pose)).

use crate::{HitBox, HitShape, RewindSystems};
use bevy::asset::io::Reader;
use bevy::asset::{AssetLoadFailedEvent, AssetLoader, LoadContext};
use bevy::ecs::schedule::common_conditions::any_with_component;
use bevy::prelude::*;
use bevy::transform::TransformSystems;
use lightyear::core::tick::TickDuration;
use lightyear::prelude::Client;
use lightyear::prelude::LocalTimeline;
use lightyear::prelude::server::Server;
use serde::Deserialize;
use unlag_core::StateShown;
use unlag_net::{ProxyFlags, ProxySmoothingSystems, RenderedPose, SentStates};

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

/// A box's swing in a walk cycle, in a layout file: a rotation about a pivot that follows a
/// sine of the cycle.
#[derive(Copy, Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayoutSwing {
    /// The point swung about when standing (a leg's hip), metres in the character's frame
    /// (from the feet, like the poses).
    pub pivot: (f32, f32, f32),
    /// The point swung about when crouched, metres in the character's frame. Default `pivot`.
    #[serde(default)]
    pub crouch_pivot: Option<(f32, f32, f32)>,
    /// The swing's amplitude at full speed, degrees about the character's x, y, z when it moves
    /// forward (-Z) (applied y, then x, then z), reached at a quarter cycle. The swing turns
    /// with the direction of travel: a character moving sideways swings its legs sideways.
    pub swing_degrees: (f32, f32, f32),
    /// Where in the cycle the box is at time 0, cycles (0.5 swings opposite). Default 0.
    #[serde(default)]
    pub phase: f32,
}

/// A layout's walk cycle: how fast it runs and at what speed its swings are full.
#[derive(Copy, Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WalkCycle {
    /// Cycles per second (a stride of each leg), Hz. Default 1.5.
    #[serde(default = "default_cadence")]
    pub cadence_hz: f32,
    /// Horizontal speed at and above which the swings are full; slower, they shrink in
    /// proportion, m/s. Default 6 (a walking character's top speed).
    #[serde(default = "default_full_speed")]
    pub full_speed: f32,
}

impl Default for WalkCycle {
    fn default() -> Self {
        Self {
            cadence_hz: default_cadence(),
            full_speed: default_full_speed(),
        }
    }
}

fn default_cadence() -> f32 {
    1.5
}

fn default_full_speed() -> f32 {
    6.0
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
    /// The box's form and size, metres: a cuboid or a capsule along its local Y, centred
    /// where its pose (`stand` or `crouch`, swung by `walk`) puts it. Sizes must be finite and
    /// positive (a capsule's `half_height` may be 0).
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
    /// How the box swings in the walk cycle, from its standing or crouched pose; still when
    /// absent.
    #[serde(default)]
    pub walk: Option<LayoutSwing>,
}

fn one() -> f32 {
    1.0
}

impl LayoutBox {
    /// The poses of the box as spawned, with the layout's walk `cycle`.
    pub fn bone(&self, cycle: &WalkCycle) -> LayoutBone {
        let stand = self.stand.transform();
        LayoutBone {
            stand,
            crouch: self.crouch.map_or(stand, |p| p.transform()),
            walk: self.walk.map(|w| {
                let (x, y, z) = w.swing_degrees;
                BoneWalk {
                    pivot: w.pivot.into(),
                    crouch_pivot: w.crouch_pivot.unwrap_or(w.pivot).into(),
                    swing: Vec3::new(x, y, z) * (core::f32::consts::PI / 180.0),
                    phase: w.phase,
                    cadence_hz: cycle.cadence_hz,
                    full_speed: cycle.full_speed,
                }
            }),
        }
    }
}

/// A character's hit boxes, loaded from a `.hitboxes.ron` file (see
/// `assets/humanoid.hitboxes.ron`). Put [`UseHitBoxLayout`] on a character to spawn them.
#[derive(Asset, TypePath, Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HitBoxLayout {
    /// The walk cycle the boxes' `walk` swings follow. Default [`WalkCycle::default`].
    #[serde(default)]
    pub walk_cycle: WalkCycle,
    /// Every hit box of the character, each spawned as a child entity of it; at least one
    /// (checked when parsed).
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
        let cycle = &self.walk_cycle;
        if !(cycle.cadence_hz.is_finite() && cycle.cadence_hz > 0.0 && cycle.cadence_hz <= 10.0) {
            return Err("walk_cycle.cadence_hz: must be above 0 and at most 10".into());
        }
        if !(cycle.full_speed.is_finite() && cycle.full_speed > 0.0) {
            return Err("walk_cycle.full_speed: must be finite and positive".into());
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
            if let Some(walk) = b.walk {
                let (x, y, z) = walk.pivot;
                if ![x, y, z].iter().all(|v| v.is_finite()) {
                    return Err(format!("{}: must be finite", field("walk.pivot")));
                }
                if let Some((x, y, z)) = walk.crouch_pivot
                    && ![x, y, z].iter().all(|v| v.is_finite())
                {
                    return Err(format!("{}: must be finite", field("walk.crouch_pivot")));
                }
                let (x, y, z) = walk.swing_degrees;
                if ![x, y, z].iter().all(|v| v.is_finite() && v.abs() <= 180.0) {
                    return Err(format!(
                        "{}: must be within ±180",
                        field("walk.swing_degrees")
                    ));
                }
                if !walk.phase.is_finite() {
                    return Err(format!("{}: must be finite", field("walk.phase")));
                }
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
                c.spawn((
                    Self::hit_box(b),
                    b.stand.transform(),
                    b.bone(&self.walk_cycle),
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

/// The layout's poses of a spawned box: [`CROUCHED_BIT`] picks between standing and crouched,
/// and the walk cycle swings it from there.
#[derive(Component, Copy, Clone, Debug, PartialEq)]
pub struct LayoutBone {
    /// Pose when standing, relative to the character.
    pub stand: Transform,
    /// Pose when crouched, relative to the character.
    pub crouch: Transform,
    /// Its swing in the walk cycle; still when `None`.
    pub walk: Option<BoneWalk>,
}

/// A box's swing in its layout's walk cycle (see [`LayoutSwing`], [`WalkCycle`]).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct BoneWalk {
    /// The point swung about when standing, metres in the character's frame.
    pub pivot: Vec3,
    /// The point swung about when crouched, metres in the character's frame.
    pub crouch_pivot: Vec3,
    /// Amplitude at full speed about the character's x, y, z when moving forward, radians.
    pub swing: Vec3,
    /// Where in the cycle the box is at time 0, cycles.
    pub phase: f32,
    /// Cycles per second, Hz.
    pub cadence_hz: f32,
    /// Horizontal speed of full swings, m/s.
    pub full_speed: f32,
}

impl LayoutBone {
    /// The box's pose relative to the character for a state that shows `shown`: standing or
    /// crouched by its flags, swung by the walk cycle at its time and horizontal speed, in its
    /// direction of travel.
    pub fn pose(&self, shown: &StateShown) -> Transform {
        let crouched = shown.flags & CROUCHED_BIT != 0;
        let base = if crouched { self.crouch } else { self.stand };
        let Some(walk) = self.walk else {
            return base;
        };
        let speed = Vec2::new(shown.velocity.x, shown.velocity.z).length();
        let weight = (speed / walk.full_speed).clamp(0.0, 1.0);
        if weight.is_nan() || weight <= 0.0 {
            return base;
        }
        // The cycle's fraction in f64: server time grows past f32's precision in a long match.
        let cycle = (shown.time * f64::from(walk.cadence_hz)).rem_euclid(1.0) as f32 + walk.phase;
        let s = (cycle * core::f32::consts::TAU).sin() * weight;
        let angles = walk.swing * s;
        let swing = Quat::from_euler(EulerRot::YXZ, angles.y, angles.x, angles.z);
        // Turned to the direction of travel in the character's frame: forward is -Z.
        let travel = shown.rotation.inverse() * shown.velocity;
        let heading = Quat::from_rotation_y(f32::atan2(-travel.x, -travel.z));
        let swing = heading * swing * heading.inverse();
        // Rotate about the pivot.
        let pivot = if crouched {
            walk.crouch_pivot
        } else {
            walk.pivot
        };
        Transform {
            translation: pivot + swing * (base.translation - pivot),
            rotation: swing * base.rotation,
            scale: base.scale,
        }
    }
}

/// A box's pose between its poses at a proxy's two states, `w` of the way (0–1) from `a` to
/// `b`: positions lerped, rotations slerped, as the server blends what it recorded.
pub fn blend_poses(a: &Transform, b: &Transform, w: f32) -> Transform {
    if w <= 0.0 {
        return *a;
    }
    Transform {
        translation: a.translation.lerp(b.translation, w),
        rotation: a.rotation.slerp(b.rotation, w),
        scale: a.scale,
    }
}

/// Marks a character whose layout boxes were spawned.
#[derive(Component)]
struct LayoutSpawned;

/// On the server, per character with a layout: where it was at the last tick, for its
/// horizontal speed on ticks no state was sent.
#[derive(Component, Default)]
struct LayoutMotion {
    last: Option<(u32, Vec3)>,
}

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
            commands
                .entity(entity)
                .insert((LayoutSpawned, LayoutMotion::default()));
        }
    }
}

fn report_failures(mut failures: MessageReader<AssetLoadFailedEvent<HitBoxLayout>>) {
    for failure in failures.read() {
        error!("hit-box layout did not load: {}", failure.error);
    }
}

/// Poses a client's layout boxes: a proxy's at the two states it is drawn between, blended by
/// its rendered blend factor; a character with no rendered pose by its flags alone, still.
fn pose_on_client(
    characters: Query<(&Children, Option<&RenderedPose>, Option<&ProxyFlags>)>,
    mut bones: Query<(&LayoutBone, &mut Transform)>,
) {
    for (children, rendered, flags) in &characters {
        let (shown, w) = match rendered {
            Some(r) => (r.shown, r.body_blend()),
            None => {
                let shown = StateShown {
                    flags: flags.map_or(0, |f| f.0),
                    ..default()
                };
                ([shown; 2], 0.0)
            }
        };
        for child in children.iter() {
            if let Ok((bone, mut transform)) = bones.get_mut(child) {
                let pose = blend_poses(&bone.pose(&shown[0]), &bone.pose(&shown[1]), w);
                transform.set_if_neq(pose);
            }
        }
    }
}

/// Poses the server's layout boxes after each tick, for recording: from the state sent this
/// tick when there is one, or that may be sent as of it (a slow proxy's, off its grid: what
/// clients will pose from, bit for bit, [`SentStates::shown_at`]), else from the character's
/// flags and its motion since the last tick.
fn pose_on_server(
    timeline: Res<LocalTimeline>,
    tick: Res<TickDuration>,
    settings: Res<crate::RewindSettings>,
    mut characters: Query<
        (
            &Children,
            &Transform,
            Option<&ProxyFlags>,
            Option<&SentStates>,
            &mut LayoutMotion,
        ),
        Without<LayoutBone>,
    >,
    mut bones: Query<(&LayoutBone, &mut Transform)>,
) {
    let now = timeline.tick().0;
    let dt = tick.0.as_secs_f64();
    let time = f64::from(now) * dt;
    for (children, transform, flags, sent, mut motion) in &mut characters {
        let velocity = match motion.last {
            Some((then, before)) if now > then => {
                let moved = transform.translation - before;
                if moved.length() > settings.teleport_distance {
                    Vec3::ZERO
                } else {
                    moved / (dt * f64::from(now - then)) as f32
                }
            }
            _ => Vec3::ZERO,
        };
        motion.last = Some((now, transform.translation));
        let shown = match sent.and_then(|s| s.shown_at(now)) {
            Some(state) => StateShown::from(state),
            None => StateShown {
                time,
                velocity,
                rotation: transform.rotation,
                flags: flags.map_or(0, |f| f.0),
            },
        };
        for child in children.iter() {
            if let Ok((bone, mut transform)) = bones.get_mut(child) {
                transform.set_if_neq(bone.pose(&shown));
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
    // The server poses boxes for recording, after each tick and once its states are sent; a
    // client poses its proxies' boxes once they are placed for the frame.
    app.add_systems(
        FixedPostUpdate,
        pose_on_server
            .run_if(any_with_component::<Server>)
            .after(ProxySmoothingSystems::Send)
            .before(RewindSystems::Record),
    )
    .add_systems(
        PostUpdate,
        pose_on_client
            .run_if(any_with_component::<Client>)
            .after(ProxySmoothingSystems::Place)
            .before(TransformSystems::Propagate),
    );
}
