//! [`RapierFixedPlugin`]: rapier set up the way netcode needs it, for every testbed App.

use bevy::prelude::*;
use bevy_rapier3d::prelude::{NoUserData, RapierPhysicsPlugin, TimestepMode};

/// Transforms, and rapier stepping in `FixedUpdate` at the simulation tick (the movement and
/// rewind plugins query it there). Clone, so the testbed can add it to every App.
#[derive(Clone, Debug)]
pub struct RapierFixedPlugin {
    /// Simulation ticks per second (default 60).
    pub tick_rate_hz: f32,
}

impl Default for RapierFixedPlugin {
    fn default() -> Self {
        Self { tick_rate_hz: 60.0 }
    }
}

impl Plugin for RapierFixedPlugin {
    fn build(&self, app: &mut App) {
        if !app.is_plugin_added::<TransformPlugin>() {
            app.add_plugins(TransformPlugin);
        }
        app.insert_resource(TimestepMode::Fixed {
            dt: 1.0 / self.tick_rate_hz,
            substeps: 1,
        })
        .add_plugins(RapierPhysicsPlugin::<NoUserData>::default().in_fixed_schedule());
    }
}
