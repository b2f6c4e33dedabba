//! Lag compensation (seeds 000, 003): the server keeps a short history of every character's hit
//! boxes and judges a shot against the poses at the time the shooter saw.
//!
//! See [`LagCompensationPlugin`]. The data flow:
//!
//! 1. A character (a server entity with [`Authority`](unlag_net::Authority)) carries [`HitBox`]es
//!    on child entities: a shape, a bone name, whether it is the head, a damage multiplier. The
//!    boxes follow their parent's transform (and their own local transforms, so animation and
//!    crouching are captured).
//! 2. **Record** (server, `FixedPostUpdate`): after each tick every character's box poses are
//!    appended to its [`FrameHistory`], a preallocated ring buffer
//!    ([`PoseHistory`](unlag_core::PoseHistory)) covering `max_record_time`.
//! 3. **Query** ([`RewindQuery`]): a ray at time `t` is tested against the boxes at their poses
//!    interpolated between the two frames around `t` — nothing in the physics world moves —
//!    head boxes first, nearest hit wins; the static world occludes at the current time; the
//!    shooter never hits itself; `t` older than the window is refused.

mod query;

pub use query::{RewindError, RewindHit, RewindQuery};

use bevy::prelude::*;
use lightyear::core::tick::TickDuration;
use lightyear::prelude::server::Server;
use lightyear::prelude::*;
use unlag_core::PoseHistory;
use unlag_net::Authority;

/// The shape of a hit box, in its entity's local frame.
#[derive(Copy, Clone, Debug, PartialEq, Reflect)]
pub enum HitShape {
    /// A box with these half extents, metres.
    Cuboid {
        /// Half extents, metres.
        half_extents: Vec3,
    },
    /// A capsule along local Y.
    Capsule {
        /// Half the cylinder's height, metres.
        half_height: f32,
        /// Radius, metres.
        radius: f32,
    },
}

/// A hit box: put it on a child entity of a character, with a `Transform` relative to it.
#[derive(Component, Clone, Debug, PartialEq, Reflect)]
#[reflect(Component)]
#[require(Transform)]
pub struct HitBox {
    /// The shape.
    pub shape: HitShape,
    /// The bone it stands for ("head", "torso", ...).
    pub bone: String,
    /// Whether a hit here is a headshot (head boxes are tested first).
    pub is_head: bool,
    /// Damage multiplier of a hit here.
    pub damage_multiplier: f32,
}

/// Settings of [`LagCompensationPlugin`] (a resource).
#[derive(Resource, Clone, Debug, Reflect)]
pub struct RewindSettings {
    /// How far back shots may be judged, seconds (default 1).
    pub max_record_time: f64,
    /// A character moving farther than this in one tick teleported: its history is never
    /// interpolated across that tick, metres (default 3.84).
    pub teleport_distance: f32,
}

impl Default for RewindSettings {
    fn default() -> Self {
        Self {
            max_record_time: 1.0,
            teleport_distance: 3.84,
        }
    }
}

/// On the server, per character with hit boxes: the history of their poses.
#[derive(Component, Clone, Debug)]
pub struct FrameHistory {
    /// Box poses per tick.
    pub history: PoseHistory,
    /// The hit-box entities, in the order of the poses.
    pub boxes: Vec<Entity>,
    /// Head boxes first: the order boxes are tested in.
    pub(crate) order: Vec<usize>,
    /// Radius around the character's origin that holds every box in any pose, metres: rays
    /// that miss this sphere skip the character's boxes.
    pub(crate) reach: f32,
    scratch: Vec<(Vec3, Quat)>,
    last_root: Option<Vec3>,
}

/// Slack on a character's reach for animation moving boxes beyond their rest pose, metres.
const REACH_SLACK: f32 = 0.5;

impl HitShape {
    /// Radius of a sphere around the shape's centre that contains it, metres.
    pub fn bounding_radius(&self) -> f32 {
        match *self {
            HitShape::Cuboid { half_extents } => half_extents.length(),
            HitShape::Capsule {
                half_height,
                radius,
            } => half_height + radius,
        }
    }
}

/// System sets of lag compensation.
#[derive(SystemSet, Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum RewindSystems {
    /// `FixedPostUpdate` on the server: record this tick's hit-box poses.
    Record,
}

/// Records hit-box history on the server and provides [`RewindQuery`]. Add it on both sides;
/// it only works on the server.
#[derive(Clone, Debug, Default)]
pub struct LagCompensationPlugin {
    /// The settings.
    pub settings: RewindSettings,
}

impl Plugin for LagCompensationPlugin {
    fn build(&self, app: &mut App) {
        app.insert_resource(self.settings.clone())
            .register_type::<HitBox>()
            .add_systems(
                FixedPostUpdate,
                (start_histories, record_frames)
                    .chain()
                    .run_if(bevy::ecs::schedule::common_conditions::any_with_component::<Server>)
                    .in_set(RewindSystems::Record),
            );
    }
}

/// Gives every character with authority and hit boxes a history sized for the window.
fn start_histories(
    mut commands: Commands,
    settings: Res<RewindSettings>,
    tick: Res<TickDuration>,
    characters: Query<(Entity, &Children), (With<Authority>, Without<FrameHistory>)>,
    boxes: Query<(&HitBox, &Transform)>,
) {
    let frames = (settings.max_record_time / tick.0.as_secs_f64()).ceil() as usize + 2;
    for (entity, children) in &characters {
        let hit: Vec<Entity> = children.iter().filter(|c| boxes.contains(*c)).collect();
        if hit.is_empty() {
            continue;
        }
        let mut order: Vec<usize> = (0..hit.len()).collect();
        order.sort_by_key(|&i| !boxes.get(hit[i]).map(|(b, _)| b.is_head).unwrap_or(false));
        let reach = hit
            .iter()
            .filter_map(|e| boxes.get(*e).ok())
            .map(|(b, t)| t.translation.length() + b.shape.bounding_radius())
            .fold(0.0, f32::max)
            + REACH_SLACK;
        commands.entity(entity).insert(FrameHistory {
            // One pose per box, and the character's own (for the reach test) last.
            history: PoseHistory::new(hit.len() + 1, frames),
            reach,
            scratch: Vec::with_capacity(hit.len()),
            last_root: None,
            boxes: hit,
            order,
        });
    }
}

/// Appends this tick's poses: each box's pose is its parent's transform times its own.
fn record_frames(
    settings: Res<RewindSettings>,
    timeline: Res<LocalTimeline>,
    tick: Res<TickDuration>,
    mut characters: Query<(&Transform, &mut FrameHistory)>,
    boxes: Query<&Transform, With<HitBox>>,
) {
    let time = f64::from(timeline.tick().0) * tick.0.as_secs_f64();
    for (root, mut history) in &mut characters {
        let history = &mut *history;
        history.scratch.clear();
        for b in &history.boxes {
            let local = boxes.get(*b).copied().unwrap_or_default();
            let global = root.mul_transform(local);
            history.scratch.push((global.translation, global.rotation));
        }
        history.scratch.push((root.translation, root.rotation));
        let teleport = history
            .last_root
            .is_some_and(|last| last.distance(root.translation) > settings.teleport_distance);
        if history.scratch.len() == history.history.boxes() {
            // A refused frame (same tick twice, garbage) leaves the history as it was.
            let _ = history.history.record(time, teleport, &history.scratch);
        }
        history.last_root = Some(root.translation);
    }
}
