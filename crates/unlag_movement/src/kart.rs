//! [`KartMovement`] (seed 001): a go-kart driven by throttle and steering, with mass, driving
//! force, air drag, rolling resistance and a minimum turning radius. No rigid-body solver: the
//! kart's box is moved with collide-and-slide, so it never drives through a wall.

use crate::model::{MoveEvents, MoveInputCodec, MovementModel};
use crate::world::CollisionWorld;
use bevy::prelude::*;
use bevy_rapier3d::rapier::control::{CharacterLength, KinematicCharacterController};
use bevy_rapier3d::rapier::parry::shape::Cuboid;
use serde::{Deserialize, Serialize};
use unlag_core::quantize::dequantize_unit;
use unlag_core::{ByteReader, ByteWriter, DecodeError};

/// Parameters of [`KartMovement`] (SI units). A resource equal on client and server.
#[derive(Resource, Clone, Debug, PartialEq, Reflect)]
#[reflect(Resource)]
pub struct KartMovement {
    /// Mass, kg (default 1000).
    pub mass: f32,
    /// Driving force at full throttle, N (default 10 000).
    pub max_driving_force: f32,
    /// Air drag coefficient: drag force = coefficient × speed², kg/m (default 16).
    pub drag_coefficient: f32,
    /// Rolling resistance coefficient: force = coefficient × mass × g (default 0.015).
    pub rolling_resistance: f32,
    /// Tightest turning radius at full steering, metres (default 10).
    pub min_turning_radius: f32,
    /// Half extents of the kart's box (x width, y height, z length), metres.
    pub half_extents: Vec3,
    /// Gravity for rolling resistance, m/s² (default 9.81).
    pub gravity: f32,
    /// Longest sub-step, seconds (default 0.05).
    pub max_step: f32,
}

impl Default for KartMovement {
    fn default() -> Self {
        Self {
            mass: 1000.0,
            max_driving_force: 10_000.0,
            drag_coefficient: 16.0,
            rolling_resistance: 0.015,
            min_turning_radius: 10.0,
            half_extents: Vec3::new(0.8, 0.4, 1.4),
            gravity: 9.81,
            max_step: 0.05,
        }
    }
}

/// Most sub-steps of one kart move (a 0.125-s move at the default 0.05-s step takes 3).
pub const MAX_KART_SUBSTEPS: u32 = 64;

/// The whole state of a kart.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, Reflect)]
pub struct KartState {
    /// Centre of the kart's box, metres.
    pub position: Vec3,
    /// Heading, radians about +Y (0 faces −Z).
    pub yaw: f32,
    /// Velocity, m/s (horizontal).
    pub velocity: Vec3,
}

/// One move's input: throttle and steering in tenths of `[-1, 1]`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Reflect)]
pub struct KartInput {
    /// Throttle: forward positive, reverse negative.
    pub throttle: i8,
    /// Steering: left positive.
    pub steering: i8,
}

impl MoveInputCodec for KartInput {
    fn encode(&self, out: &mut ByteWriter) {
        out.i8(self.throttle);
        out.i8(self.steering);
    }

    fn decode(input: &mut ByteReader) -> Result<Self, DecodeError> {
        let throttle = input.i8()?;
        let steering = input.i8()?;
        if !(-10..=10).contains(&throttle) || !(-10..=10).contains(&steering) {
            return Err(DecodeError::Invalid);
        }
        Ok(Self { throttle, steering })
    }
}

impl KartMovement {
    fn controller(&self) -> KinematicCharacterController {
        KinematicCharacterController {
            offset: CharacterLength::Absolute(0.02),
            slide: true,
            autostep: None,
            snap_to_ground: None,
            ..default()
        }
    }
}

impl MovementModel for KartMovement {
    type Input = KartInput;
    type State = KartState;

    fn validate(&self) -> Result<(), unlag_core::SettingsError> {
        let f = unlag_core::Fields::new("KartMovement");
        f.above("mass", f64::from(self.mass), 0.0, 1e6, "kg")?;
        let force = f64::from(self.max_driving_force);
        f.within("max_driving_force", force, 0.0, 1e8, "N")?;
        let drag = f64::from(self.drag_coefficient);
        f.within("drag_coefficient", drag, 0.0, 1e4, "kg/m")?;
        let rolling = f64::from(self.rolling_resistance);
        f.within("rolling_resistance", rolling, 0.0, 10.0, "")?;
        let radius = f64::from(self.min_turning_radius);
        f.above("min_turning_radius", radius, 0.0, 1e4, "m")?;
        for (axis, v) in [
            ("x", self.half_extents.x),
            ("y", self.half_extents.y),
            ("z", self.half_extents.z),
        ] {
            f.above(
                &format!("half_extents.{axis}"),
                f64::from(v),
                0.0,
                100.0,
                "m",
            )?;
        }
        f.within("gravity", f64::from(self.gravity), 0.0, 1000.0, "m/s²")?;
        // At least a millisecond: a 0.125-s move then takes at most MAX_KART_SUBSTEPS.
        f.within("max_step", f64::from(self.max_step), 1e-3, 1.0, "s")
    }

    fn simulate(
        &self,
        state: &KartState,
        input: &KartInput,
        dt: f32,
        world: &CollisionWorld,
    ) -> (KartState, MoveEvents) {
        let mut s = state.clone();
        if !(dt.is_finite() && dt > 0.0) {
            return (s, MoveEvents::default());
        }
        let throttle = dequantize_unit(input.throttle);
        let steering = dequantize_unit(input.steering);
        let shape = Cuboid::new(self.half_extents);
        let controller = self.controller();
        // A hand-set step of 0 or NaN must not hang the server in sub-steps: at most
        // `MAX_KART_SUBSTEPS`, longer steps beyond.
        let steps = ((dt / self.max_step).ceil().max(1.0) as u32).min(MAX_KART_SUBSTEPS);
        let step = dt / steps as f32;
        for _ in 0..steps {
            let forward = Quat::from_rotation_y(s.yaw) * Vec3::NEG_Z;
            let speed = s.velocity.length();
            let mut force = forward * self.max_driving_force * throttle;
            if speed > 1e-4 {
                let back = -s.velocity / speed;
                force += back * self.drag_coefficient * speed * speed;
                force += back * self.rolling_resistance * self.mass * self.gravity;
            }
            let before = s.velocity;
            s.velocity += force / self.mass * step;
            // Resistance stops the kart; it never pushes it backwards.
            if throttle == 0.0 && s.velocity.dot(before) <= 0.0 {
                s.velocity = Vec3::ZERO;
            }
            // Turning (seed 001): the heading turns by the distance driven over the radius.
            let driven = s.velocity.dot(forward) * step;
            let turn = driven / self.min_turning_radius * steering;
            s.yaw = (s.yaw + turn).rem_euclid(core::f32::consts::TAU);
            s.velocity = Quat::from_rotation_y(turn) * s.velocity;
            s.velocity.y = 0.0;
            let rotation = Quat::from_rotation_y(s.yaw);
            let desired = s.velocity * step;
            let out =
                world.move_shape_rotated(&controller, step, &shape, s.position, rotation, desired);
            let moved = Vec3::new(out.translation.x, 0.0, out.translation.z);
            s.position += moved;
            // A wall takes what it stopped off the velocity.
            if moved.length_squared() + 1e-8 < desired.length_squared() {
                s.velocity = moved / step;
            }
        }
        (s, MoveEvents::default())
    }

    fn position(state: &KartState) -> Vec3 {
        state.position
    }

    fn rotation(state: &KartState) -> Quat {
        Quat::from_rotation_y(state.yaw)
    }

    fn velocity(state: &KartState) -> Option<Vec3> {
        Some(state.velocity)
    }

    fn with_position(state: &KartState, position: Vec3) -> KartState {
        KartState {
            position,
            ..state.clone()
        }
    }

    fn is_valid(s: &KartState) -> bool {
        s.position.is_finite()
            && s.velocity.is_finite()
            && s.yaw.is_finite()
            && s.velocity.length() < 500.0
    }
}
