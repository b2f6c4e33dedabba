//! [`CollisionWorld`]: what a movement model collides with, read straight from rapier.

use bevy::prelude::*;
use bevy_rapier3d::rapier::control::{EffectiveCharacterMovement, KinematicCharacterController};
use bevy_rapier3d::rapier::geometry::{Group, InteractionGroups, InteractionTestMode};
use bevy_rapier3d::rapier::math::Pose;
use bevy_rapier3d::rapier::parry::query::ShapeCastOptions;
use bevy_rapier3d::rapier::parry::shape::Shape;
use bevy_rapier3d::rapier::pipeline::{QueryFilter, QueryPipeline};

/// The rapier collision group of movement-driven characters. Characters are members of it; the
/// static world is not, so queries can leave characters out by group.
pub const CHARACTER_GROUP: Group = Group::GROUP_2;

/// Interaction groups of a character's own collider (see [`CHARACTER_GROUP`]).
pub fn character_collision_groups() -> bevy_rapier3d::prelude::CollisionGroups {
    bevy_rapier3d::prelude::CollisionGroups::new(
        bevy_rapier3d::prelude::Group::GROUP_2,
        bevy_rapier3d::prelude::Group::ALL,
    )
}

/// The query filter of a movement query: solids only; characters left out unless
/// `include_characters` (then the querying character's own collider must be excluded by
/// `exclude`).
pub fn movement_filter<'a>(
    include_characters: bool,
    exclude: Option<bevy_rapier3d::rapier::geometry::ColliderHandle>,
) -> QueryFilter<'a> {
    let mut filter = QueryFilter::default().exclude_sensors();
    if !include_characters {
        filter = filter.groups(InteractionGroups::new(
            Group::ALL,
            !CHARACTER_GROUP,
            InteractionTestMode::And,
        ));
    }
    if let Some(handle) = exclude {
        filter = filter.exclude_collider(handle);
    }
    filter
}

impl<M> crate::MovementSettings<M> {
    /// The filter of the movement queries of a character whose own collider is `own`: other
    /// characters block it only with [`CharacterCollisions::Block`](crate::CharacterCollisions).
    pub(crate) fn query_filter<'a>(
        &self,
        own: Option<&bevy_rapier3d::prelude::RapierColliderHandle>,
    ) -> QueryFilter<'a> {
        movement_filter(
            self.character_collisions == crate::CharacterCollisions::Block,
            own.map(|c| c.0),
        )
    }
}

/// Read-only access to the colliders a move collides with: rapier's query pipeline with a
/// filter, valid for as long as the physics context is borrowed.
///
/// Moves only read the world, so a whole list of moves can be re-simulated inside one system
/// run (a replay), which rapier's component-driven character controller cannot do.
#[derive(Copy, Clone)]
pub struct CollisionWorld<'a> {
    query: QueryPipeline<'a>,
}

impl<'a> CollisionWorld<'a> {
    /// Wraps a query pipeline (with its filter).
    pub fn new(query: QueryPipeline<'a>) -> Self {
        Self { query }
    }

    /// The underlying query pipeline.
    pub fn query(&self) -> &QueryPipeline<'a> {
        &self.query
    }

    /// Moves `shape` from `position` by `desired` metres with collide-and-slide (rapier's
    /// character controller, called directly); returns the translation actually made, and
    /// whether the shape ends on the ground.
    pub fn move_shape(
        &self,
        controller: &KinematicCharacterController,
        dt: f32,
        shape: &dyn Shape,
        position: Vec3,
        desired: Vec3,
    ) -> EffectiveCharacterMovement {
        self.move_shape_rotated(controller, dt, shape, position, Quat::IDENTITY, desired)
    }

    /// [`move_shape`](Self::move_shape) for a shape turned by `rotation`.
    pub fn move_shape_rotated(
        &self,
        controller: &KinematicCharacterController,
        dt: f32,
        shape: &dyn Shape,
        position: Vec3,
        rotation: Quat,
        desired: Vec3,
    ) -> EffectiveCharacterMovement {
        controller.move_shape(
            dt,
            &self.query,
            shape,
            &Pose::from_parts(position, rotation),
            desired,
            |_| {},
        )
    }

    /// Whether `shape` at `position` overlaps anything.
    pub fn intersects(&self, shape: &dyn Shape, position: Vec3) -> bool {
        self.query
            .intersect_shape(Pose::from_translation(position), shape)
            .next()
            .is_some()
    }

    /// Whether the straight segment from `from` to `to` (metres) crosses nothing; false for
    /// non-finite ends.
    pub fn segment_clear(&self, from: Vec3, to: Vec3) -> bool {
        let motion = to - from;
        if !(from.is_finite() && motion.is_finite()) {
            return false;
        }
        if motion.length_squared() == 0.0 {
            return true;
        }
        let ray = bevy_rapier3d::rapier::geometry::Ray::new(from, motion);
        self.query.cast_ray(&ray, 1.0, true).is_none()
    }

    /// Sweeps `shape` from `position` along `motion` (metres); returns the fraction of the
    /// motion (0–1) before the first contact, if any, and the contact normal.
    pub fn cast_shape(
        &self,
        shape: &dyn Shape,
        position: Vec3,
        motion: Vec3,
    ) -> Option<(f32, Vec3)> {
        let options = ShapeCastOptions {
            max_time_of_impact: 1.0,
            stop_at_penetration: false,
            ..ShapeCastOptions::default()
        };
        self.query
            .cast_shape(&Pose::from_translation(position), motion, shape, options)
            .map(|(_, hit)| (hit.time_of_impact, hit.normal1))
    }
}

/// Empty collider sets, for Apps without a rapier context (nothing to collide with).
#[derive(Default)]
pub(crate) struct EmptyPhysics {
    broad_phase: bevy_rapier3d::rapier::geometry::BroadPhaseBvh,
    bodies: bevy_rapier3d::rapier::dynamics::RigidBodySet,
    colliders: bevy_rapier3d::rapier::geometry::ColliderSet,
}

/// The App's rapier context (its default one), or `None` if it has none. Looked up once per
/// system run: the context is read-only while moves are checked, so the characters' checks can
/// share it across threads.
pub(crate) fn rapier_context<'a>(
    rapier: &'a bevy_rapier3d::prelude::ReadRapierContext,
) -> Option<bevy_rapier3d::prelude::RapierContext<'a>> {
    // Checked first: without a context `single` builds an error with a backtrace (microseconds).
    if rapier.rapier_context.is_empty() {
        None
    } else {
        rapier.single().ok()
    }
}

/// Runs `f` with the App's collision world (rapier's default context, or nothing if there is
/// none), filtered by `filter`.
pub(crate) fn with_collision_world<R>(
    rapier: &bevy_rapier3d::prelude::ReadRapierContext,
    empty: &EmptyPhysics,
    filter: QueryFilter,
    f: impl FnOnce(&CollisionWorld) -> R,
) -> R {
    with_world_of(rapier_context(rapier).as_ref(), empty, filter, f)
}

/// Runs `f` with the collision world of `context` (from [`rapier_context`]; nothing to collide
/// with when `None`), filtered by `filter`.
pub(crate) fn with_world_of<R>(
    context: Option<&bevy_rapier3d::prelude::RapierContext>,
    empty: &EmptyPhysics,
    filter: QueryFilter,
    f: impl FnOnce(&CollisionWorld) -> R,
) -> R {
    use bevy_rapier3d::rapier::parry::query::DefaultQueryDispatcher;
    match context {
        Some(ctx) => {
            let query = ctx.simulation.broad_phase.as_query_pipeline(
                &DefaultQueryDispatcher,
                &ctx.rigidbody_set.bodies,
                &ctx.colliders.colliders,
                filter,
            );
            f(&CollisionWorld::new(query))
        }
        None => {
            let query = empty.broad_phase.as_query_pipeline(
                &DefaultQueryDispatcher,
                &empty.bodies,
                &empty.colliders,
                filter,
            );
            f(&CollisionWorld::new(query))
        }
    }
}
