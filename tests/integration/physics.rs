//! Hand-built rapier worlds for tests of movement models outside an App.

use bevy_rapier3d::rapier::prelude::{ColliderBuilder, PhysicsWorld, QueryFilter, Vector};
use unlag::movement::CollisionWorld;

/// A physics world with a 100 m × 100 m ground whose top is at y = 0, plus the colliders
/// `add` inserts, stepped once so queries see them.
pub fn ground_with(add: impl FnOnce(&mut PhysicsWorld)) -> PhysicsWorld {
    let mut physics = PhysicsWorld::new();
    physics.insert_collider(
        ColliderBuilder::cuboid(50.0, 0.5, 50.0).translation(Vector::new(0.0, -0.5, 0.0)),
        None,
    );
    add(&mut physics);
    physics.step();
    physics
}

/// What a movement model queries in `physics`, sensors left out (as the plugins do).
pub fn collision_world(physics: &PhysicsWorld) -> CollisionWorld<'_> {
    CollisionWorld::new(
        physics.query_pipeline_with_filter(QueryFilter::default().exclude_sensors()),
    )
}
