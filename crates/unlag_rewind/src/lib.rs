//! Lag compensation (seeds 000, 003): the server keeps a short history of every character's hit
//! boxes and judges a shot against the poses at the time the shooter saw.
//!
//! See [`RewindPlugin`]. The data flow:
//!
//! 1. A character (a server entity with [`Authority`](unlag_net::Authority)) carries [`HitBox`]es
//!    on child entities: a shape, a bone name, whether it is the head, a damage multiplier. The
//!    boxes follow their parent's transform and their own local transforms, so animation and
//!    crouching are captured. A [`HitBoxLayout`] asset (RON) spawns a whole humanoid's boxes.
//! 2. **Record** (server, `FixedPostUpdate`): after each tick every character's box poses are
//!    appended to its [`FrameHistory`], a preallocated ring buffer
//!    ([`PoseHistory`](unlag_core::PoseHistory)) covering `max_record_time` plus one frame, and
//!    the [`RewindBroadPhase`] (a BVH over each character's bounds across the whole window) is
//!    rebuilt.
//! 3. **Query** ([`RewindQuery`]): a ray at time `t` asks the broad phase which characters it
//!    can reach, tests the sphere around each one's pose at `t`, then its boxes at their poses
//!    interpolated between the two frames around `t` — nothing in the physics world moves —
//!    head boxes first, nearest hit wins; the static world occludes at the current time; the
//!    shooter never hits itself; `t` older than the window is refused.
//! 4. **Exact reconstruction** ([`ClaimedView`]): a client reports which two proxy states it
//!    blended and how ([`RenderedPose`](unlag_net::RenderedPose)); the server replays the
//!    same curve over the states it sent ([`SentStates`](unlag_net::SentStates)) and poses
//!    the boxes there, so it tests exactly what was on the shooter's screen.

mod debug;
mod history;
mod layout;
mod query;
mod sight;

pub use debug::{DebugBox, RewindDebug, RewindDebugEntry, RewindDebugLog};
pub use history::{FrameHistory, RewindBroadPhase, RewindStats, judged_span};
pub use layout::{
    BoneWalk, CROUCHED_BIT, HitBoxLayout, HitBoxLayoutLoader, LayoutBone, LayoutBox, LayoutError,
    LayoutPose, LayoutShape, LayoutSwing, UseHitBoxLayout, WalkCycle, blend_poses,
};
pub use query::{
    ClaimedView, EASE_SLACK, Histories, RewindError, RewindHit, RewindQuery, RewindScene,
    hit_box_ray,
};

use bevy::ecs::schedule::common_conditions::any_with_component;
use bevy::prelude::*;
use lightyear::prelude::server::Server;

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

impl HitShape {
    /// Whether every size of the shape is finite and not negative (a hand-built shape may be
    /// neither; queries skip such shapes rather than panic in the geometry).
    pub fn is_solid(&self) -> bool {
        let ok = |v: f32| v.is_finite() && v >= 0.0;
        match *self {
            HitShape::Cuboid { half_extents } => half_extents.to_array().into_iter().all(ok),
            HitShape::Capsule {
                half_height,
                radius,
            } => ok(half_height) && ok(radius),
        }
    }

    /// The shape with every face moved `by` metres outwards (inwards when negative): a
    /// capsule's radius, a box's half extents plus `by`, never below zero. A grown box keeps
    /// square corners, so it holds everything within `by` of the box (and a little more).
    pub fn inflated(&self, by: f32) -> HitShape {
        let size = |v: f32| (v + by).max(0.0);
        match *self {
            HitShape::Cuboid { half_extents } => HitShape::Cuboid {
                half_extents: half_extents.to_array().map(size).into(),
            },
            HitShape::Capsule {
                half_height,
                radius,
            } => HitShape::Capsule {
                half_height,
                radius: size(radius),
            },
        }
    }

    /// Radius of a sphere around the shape's centre that contains it, metres (0 for a shape
    /// that is not [solid](Self::is_solid)).
    pub fn bounding_radius(&self) -> f32 {
        if !self.is_solid() {
            return 0.0;
        }
        match *self {
            HitShape::Cuboid { half_extents } => half_extents.length(),
            HitShape::Capsule {
                half_height,
                radius,
            } => half_height + radius,
        }
    }

    /// How far the shape reaches from its centre along the unit vector `direction` when turned
    /// by `rotation` (its support distance), metres.
    pub fn extent_along(&self, rotation: Quat, direction: Vec3) -> f32 {
        match *self {
            HitShape::Cuboid { half_extents } => {
                (rotation * Vec3::X * half_extents.x).dot(direction).abs()
                    + (rotation * Vec3::Y * half_extents.y).dot(direction).abs()
                    + (rotation * Vec3::Z * half_extents.z).dot(direction).abs()
            }
            HitShape::Capsule {
                radius,
                half_height,
            } => radius + (rotation * Vec3::Y * half_height).dot(direction).abs(),
        }
    }
}

/// A hit box: put it on a child entity of a character, with a `Transform` relative to it.
/// The layout is read when the character's history starts: to change a character's boxes,
/// remove its [`FrameHistory`] and a new one starts on the next tick.
#[derive(Component, Clone, Debug, PartialEq, Reflect)]
#[reflect(Component)]
#[require(Transform)]
pub struct HitBox {
    /// The box's volume in the entity's local frame, metres: centred on its `Transform` and
    /// turned with it. Queries skip a shape with a size not finite or negative.
    pub shape: HitShape,
    /// The bone it stands for ("head", "torso", ...).
    pub bone: String,
    /// Whether a hit here is a headshot (head boxes are tested first).
    pub is_head: bool,
    /// Damage multiplier of a hit here.
    pub damage_multiplier: f32,
}

/// Settings of [`RewindPlugin`] (a resource).
#[derive(Resource, Clone, Debug, Reflect)]
pub struct RewindSettings {
    /// How far back the history reaches, seconds (default 5): the oldest view a client can
    /// have at the slowest update rate the net panel offers (1 Hz: an interpolation delay of up
    /// to 2.6 s, the one-way trip at the rewind cap, and the state a claim starts from, two
    /// intervals back when one between was lost). Shots are judged no further back than the
    /// oldest view any connected client can have now ([`RewindSettings::min_window`] or more):
    /// at 20 Hz that is the 1-s minimum, and the broad phase covers only that span.
    pub max_record_time: f64,
    /// The shortest span the broad phase and the judged window cover, seconds (default 1):
    /// beyond it they follow the clients' views (each client's one-way trip, interpolation
    /// delay and frames, and two of the slowest update intervals), up to
    /// [`RewindSettings::max_record_time`].
    pub min_window: f64,
    /// A character moving farther than this in one tick teleported (as does one the game marks
    /// [`unlag_net::Teleported`], however short the move): its history is never
    /// interpolated across that tick, metres (default 3.84).
    pub teleport_distance: f32,
    /// Longest offset from the curve a claimed view may carry (a client easing a proxy back
    /// onto its path after starved frames), metres (default 3.84, the smoothing plugin's
    /// teleport distance: the longest it eases). Only an offset the states sent explain counts
    /// ([`RewindQuery::ease_explained`]).
    pub max_claimed_ease: f32,
    /// How long a client takes to ease a proxy back onto its curve, seconds (default 0.1, the
    /// smoothing plugin's `extrapolation_smooth_time`), for fast proxies: slow ones take
    /// longer, as [`unlag_core::ease_time`] says, and long jumps longer still, paced by the
    /// target's speed ([`unlag_core::catch_up_time`]). Claimed eases are explained by jumps of
    /// the last two such spans.
    pub max_ease_time: f32,
    /// Longest extrapolation a claimed view may carry when it holds one state, seconds
    /// (default 0.25, the smoothing plugin's default).
    pub max_claimed_extrapolation: f32,
}

impl Default for RewindSettings {
    fn default() -> Self {
        Self {
            max_record_time: 5.0,
            min_window: 1.0,
            teleport_distance: 3.84,
            max_claimed_ease: 3.84,
            max_ease_time: 0.1,
            max_claimed_extrapolation: 0.25,
        }
    }
}

/// Longest [`RewindSettings::max_record_time`], seconds: a minute of history at 60 Hz is
/// 3600 frames per character.
pub const MAX_RECORD_TIME: f64 = 60.0;

impl unlag_net::Validate for RewindSettings {
    fn validate(&self) -> Result<(), unlag_net::SettingsError> {
        let f = unlag_core::Fields::new("RewindSettings");
        // Above 0: a history must hold at least the frame being judged (to switch lag
        // compensation off, set `CombatSettings::rewind` to false).
        f.above(
            "max_record_time",
            self.max_record_time,
            0.0,
            MAX_RECORD_TIME,
            "s",
        )?;
        f.within(
            "min_window",
            self.min_window,
            0.0,
            self.max_record_time,
            "s",
        )?;
        let teleport = f64::from(self.teleport_distance);
        f.above("teleport_distance", teleport, 0.0, 1000.0, "m")?;
        let ease = f64::from(self.max_claimed_ease);
        f.within("max_claimed_ease", ease, 0.0, 100.0, "m")?;
        f.within(
            "max_ease_time",
            f64::from(self.max_ease_time),
            0.0,
            5.0,
            "s",
        )?;
        let extrapolation = f64::from(self.max_claimed_extrapolation);
        f.within("max_claimed_extrapolation", extrapolation, 0.0, 5.0, "s")
    }
}

/// System sets of lag compensation.
#[derive(SystemSet, Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum RewindSystems {
    /// `FixedPostUpdate` on the server: record this tick's hit-box poses.
    Record,
}

/// Records hit-box history on the server and provides [`RewindQuery`]; loads
/// [`HitBoxLayout`] assets and poses their boxes (crouching) on both sides. Add it on both
/// sides; recording only happens on the server. Needs Bevy's `AssetPlugin` for layouts.
#[derive(Clone, Debug, Default)]
pub struct RewindPlugin {
    /// The [`RewindSettings`] to start with: checked and inserted as a resource when the
    /// plugin is built (settings out of range panic there). Later changes go to the resource.
    pub settings: RewindSettings,
}

/// The former name of [`RewindPlugin`] (everything else in this crate is `Rewind*`).
#[deprecated(since = "0.2.0", note = "renamed `RewindPlugin`")]
pub type LagCompensationPlugin = RewindPlugin;

impl Plugin for RewindPlugin {
    fn build(&self, app: &mut App) {
        unlag_net::ValidatedSettingsAppExt::insert_validated(app, self.settings.clone())
            .init_resource::<RewindBroadPhase>()
            .init_resource::<RewindStats>()
            .init_resource::<RewindDebug>()
            .init_resource::<RewindDebugLog>()
            .register_type::<(HitBox, RewindDebug)>()
            .add_systems(
                FixedPostUpdate,
                (history::start_histories, history::record_frames)
                    .chain()
                    .run_if(any_with_component::<Server>)
                    .in_set(RewindSystems::Record),
            )
            // The game's teleport markers are kept until the recording has seen them.
            .configure_sets(
                FixedPostUpdate,
                RewindSystems::Record.before(unlag_net::TeleportsSeen),
            );
        // Sight for interest management: tested where the world is known.
        app.insert_resource(unlag_net::SightTested).add_systems(
            FixedPostUpdate,
            sight::test_sight
                .run_if(any_with_component::<Server>)
                .in_set(unlag_net::InterestSystems::Sight),
        );
        layout::build(app);
        debug::build(app);
    }

    fn finish(&self, app: &mut App) {
        layout::finish(app);
    }
}
