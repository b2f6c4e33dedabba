//! [`CharacterMovement`]: a walking, falling, jumping, crouching and dashing capsule, moved with
//! rapier's character controller called directly on the physics context.

use crate::model::{MoveEvents, MoveInputCodec, MovementModel};
use crate::world::CollisionWorld;
use bevy::prelude::*;
use bevy_rapier3d::rapier::control::{
    CharacterAutostep, CharacterLength, KinematicCharacterController,
};
use bevy_rapier3d::rapier::parry::shape::Capsule;
use serde::{Deserialize, Serialize};
use unlag_core::quantize::{dequantize_accel, dequantize_angle, dequantize_pitch};
use unlag_core::{ByteReader, ByteWriter, DecodeError};

/// Parameters of [`CharacterMovement`], in metres, seconds and radians. A resource: client and
/// server must use equal values, or every move is corrected.
#[derive(Resource, Clone, Debug, PartialEq, Reflect)]
#[reflect(Resource)]
pub struct CharacterMovement {
    /// Capsule radius, metres (default 0.35).
    pub radius: f32,
    /// Half the height of the capsule's cylinder when standing, metres (default 0.55: 1.8 m
    /// tall in all).
    pub half_height: f32,
    /// Half the cylinder height when crouched, metres (default 0.2: 1.1 m tall).
    pub crouched_half_height: f32,
    /// Top walking speed, m/s (default 6).
    pub max_walk_speed: f32,
    /// Top speed while crouched, m/s (default 3).
    pub max_crouch_speed: f32,
    /// Acceleration at full input, m/s² (default 30).
    pub max_acceleration: f32,
    /// Deceleration with no input on the ground, m/s² (default 20).
    pub braking_deceleration: f32,
    /// Ground friction, 1/s (default 8): how fast velocity turns towards the input direction
    /// and dies out without input.
    pub ground_friction: f32,
    /// Share of the acceleration available in the air (default 0.3).
    pub air_control: f32,
    /// Gravity, m/s² downwards (default 20).
    pub gravity: f32,
    /// Upward speed of a jump, m/s (default 7).
    pub jump_speed: f32,
    /// Horizontal speed of a dash, m/s (default 14).
    pub dash_speed: f32,
    /// How long a dash lasts, seconds (default 0.15).
    pub dash_duration: f32,
    /// Time between two dashes, seconds (default 1).
    pub dash_cooldown: f32,
    /// Longest sub-step of a move, seconds (default 0.05).
    pub max_step: f32,
    /// Most sub-steps of a move (default 8); a longer move gets longer sub-steps.
    pub max_iterations: u32,
    /// Tallest step climbed without jumping, metres (default 0.35).
    pub step_height: f32,
    /// Steepest slope walked up, radians (default 45°).
    pub max_slope: f32,
}

impl Default for CharacterMovement {
    fn default() -> Self {
        Self {
            radius: 0.35,
            half_height: 0.55,
            crouched_half_height: 0.2,
            max_walk_speed: 6.0,
            max_crouch_speed: 3.0,
            max_acceleration: 30.0,
            braking_deceleration: 20.0,
            ground_friction: 8.0,
            air_control: 0.3,
            gravity: 20.0,
            jump_speed: 7.0,
            dash_speed: 14.0,
            dash_duration: 0.15,
            dash_cooldown: 1.0,
            max_step: 0.05,
            max_iterations: 8,
            step_height: 0.35,
            max_slope: core::f32::consts::FRAC_PI_4,
        }
    }
}

/// Movement mode of a character.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, Reflect)]
pub enum MoveMode {
    /// On the ground.
    #[default]
    Walking,
    /// In the air.
    Falling,
}

/// The whole state of a [`CharacterMovement`] character.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, Reflect)]
pub struct CharacterState {
    /// The bottom of the capsule, metres.
    pub feet: Vec3,
    /// Velocity, m/s.
    pub velocity: Vec3,
    /// Facing, radians about +Y (0 faces −Z).
    pub yaw: f32,
    /// Look pitch, radians (up positive).
    pub pitch: f32,
    /// Walking or falling.
    pub mode: MoveMode,
    /// Whether the capsule is crouched (shorter, slower).
    pub crouched: bool,
    /// Seconds left of the current dash.
    pub dash_time: f32,
    /// Seconds until the next dash is allowed.
    pub dash_cooldown: f32,
}

/// Flags of a [`CharacterInput`].
pub mod flags {
    /// Jump (held).
    pub const JUMP: u8 = 1;
    /// Crouch (held).
    pub const CROUCH: u8 = 2;
    /// Dash (pressed this move).
    pub const DASH: u8 = 4;
    /// Every defined flag.
    pub const ALL: u8 = JUMP | CROUCH | DASH;
}

/// One move's input: world-space acceleration direction, look angles and ability flags, all
/// quantised (see [`unlag_core::quantize`]).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Reflect)]
pub struct CharacterInput {
    /// Acceleration direction in the horizontal plane (x, z), tenths, length ≤ 10.
    pub accel: [i8; 2],
    /// Facing, 16-bit turn fraction.
    pub yaw: u16,
    /// Look pitch, 16-bit.
    pub pitch: i16,
    /// [`flags`].
    pub flags: u8,
}

impl CharacterInput {
    /// Whether `flag` (see [`flags`]) is set.
    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

impl MoveInputCodec for CharacterInput {
    fn encode(&self, out: &mut ByteWriter) {
        out.i8(self.accel[0]);
        out.i8(self.accel[1]);
        out.u16(self.yaw);
        out.i16(self.pitch);
        out.u8(self.flags);
    }

    fn decode(input: &mut ByteReader) -> Result<Self, DecodeError> {
        let accel = read_accel(input)?;
        let yaw = input.u16()?;
        let pitch = input.i16()?;
        let flags = read_flags(input)?;
        Ok(Self {
            accel,
            yaw,
            pitch,
            flags,
        })
    }

    /// Accel, yaw, pitch, flags: one tag bit each.
    const DELTA_TAG_BITS: u32 = 4;

    fn encode_delta(&self, reference: &Self, out: &mut ByteWriter) -> u8 {
        let mask = u8::from(self.accel != reference.accel)
            | (u8::from(self.yaw != reference.yaw) << 1)
            | (u8::from(self.pitch != reference.pitch) << 2)
            | (u8::from(self.flags != reference.flags) << 3);
        if mask & 1 != 0 {
            out.i8(self.accel[0]);
            out.i8(self.accel[1]);
        }
        // Look angles as their turn from the reference's (zigzag varints): a mouse moves the
        // view a little each move, 1 byte for up to 0.35°, 2 for up to 45°, where the whole
        // angle took 2 (a message repeats up to a round trip of moves, each turned).
        if mask & 2 != 0 {
            out.zigzag(i32::from(self.yaw.wrapping_sub(reference.yaw) as i16));
        }
        if mask & 4 != 0 {
            out.zigzag(i32::from(self.pitch) - i32::from(reference.pitch));
        }
        if mask & 8 != 0 {
            out.u8(self.flags);
        }
        mask
    }

    fn decode_delta(
        reference: &Self,
        mask: u8,
        input: &mut ByteReader,
    ) -> Result<Self, DecodeError> {
        if mask & !0x0F != 0 {
            return Err(DecodeError::Invalid);
        }
        let mut out = *reference;
        if mask & 1 != 0 {
            out.accel = read_accel(input)?;
        }
        if mask & 2 != 0 {
            let turn = i16::try_from(input.zigzag()?).map_err(|_| DecodeError::Invalid)?;
            out.yaw = reference.yaw.wrapping_add(turn as u16);
        }
        if mask & 4 != 0 {
            // Checked: the turn is the sender's word, any i32 (found by the server_move fuzz
            // target: a turn near i32::MAX overflowed the sum).
            let pitch = i32::from(reference.pitch)
                .checked_add(input.zigzag()?)
                .ok_or(DecodeError::Invalid)?;
            out.pitch = i16::try_from(pitch).map_err(|_| DecodeError::Invalid)?;
        }
        if mask & 8 != 0 {
            out.flags = read_flags(input)?;
        }
        Ok(out)
    }
}

fn read_accel(input: &mut ByteReader) -> Result<[i8; 2], DecodeError> {
    let accel = [input.i8()?, input.i8()?];
    if accel.iter().any(|a| !(-10..=10).contains(a)) {
        return Err(DecodeError::Invalid);
    }
    Ok(accel)
}

fn read_flags(input: &mut ByteReader) -> Result<u8, DecodeError> {
    let flags = input.u8()?;
    if flags & !flags::ALL != 0 {
        return Err(DecodeError::Invalid);
    }
    Ok(flags)
}

impl CharacterMovement {
    /// The capsule when standing or crouched, centred on the origin.
    pub fn capsule(&self, crouched: bool) -> Capsule {
        Capsule::new_y(self.cylinder_half_height(crouched), self.radius)
    }

    fn cylinder_half_height(&self, crouched: bool) -> f32 {
        if crouched {
            self.crouched_half_height
        } else {
            self.half_height
        }
    }

    /// From the feet to the capsule's centre, metres.
    pub fn centre_offset(&self, crouched: bool) -> Vec3 {
        Vec3::Y * (self.cylinder_half_height(crouched) + self.radius)
    }

    /// The character controller used for every sub-step.
    pub fn controller(&self) -> KinematicCharacterController {
        KinematicCharacterController {
            offset: CharacterLength::Absolute(0.01),
            slide: true,
            autostep: Some(CharacterAutostep {
                max_height: CharacterLength::Absolute(self.step_height),
                min_width: CharacterLength::Absolute(0.05),
                include_dynamic_bodies: false,
            }),
            max_slope_climb_angle: self.max_slope,
            min_slope_slide_angle: self.max_slope,
            snap_to_ground: Some(CharacterLength::Absolute(0.2)),
            ..default()
        }
    }

    /// Velocity after one sub-step of walking (UE's `CalcVelocity`): friction turns the
    /// velocity towards the input, acceleration adds to it, braking stops it without input.
    fn walk_velocity(&self, v: Vec3, accel: Vec3, max_speed: f32, dt: f32) -> Vec3 {
        let mut h = Vec3::new(v.x, 0.0, v.z);
        if accel.length_squared() > 1e-8 {
            let dir = accel.normalize();
            let speed = h.length();
            // Friction turns the velocity towards the input without changing its length.
            h -= (h - dir * speed) * (dt * self.ground_friction).min(1.0);
            h += accel * dt;
            h = h.clamp_length_max(max_speed);
        } else {
            let speed = h.length();
            let drop = (self.ground_friction * speed + self.braking_deceleration) * dt;
            h = if drop >= speed {
                Vec3::ZERO
            } else {
                h * ((speed - drop) / speed)
            };
        }
        Vec3::new(h.x, v.y, h.z)
    }
}

impl MovementModel for CharacterMovement {
    type Input = CharacterInput;
    type State = CharacterState;

    fn validate(&self) -> Result<(), unlag_core::SettingsError> {
        let f = unlag_core::Fields::new("CharacterMovement");
        let metres =
            |name: &str, v: f32, lo: f64, hi: f64| f.within(name, f64::from(v), lo, hi, "m");
        metres("radius", self.radius, 0.01, 10.0)?;
        metres("half_height", self.half_height, 0.0, 10.0)?;
        metres(
            "crouched_half_height",
            self.crouched_half_height,
            0.0,
            f64::from(self.half_height),
        )?;
        metres("step_height", self.step_height, 0.0, 10.0)?;
        let speed = |name: &str, v: f32| f.within(name, f64::from(v), 0.0, 1000.0, "m/s");
        speed("max_walk_speed", self.max_walk_speed)?;
        speed("max_crouch_speed", self.max_crouch_speed)?;
        speed("jump_speed", self.jump_speed)?;
        speed("dash_speed", self.dash_speed)?;
        let accel = |name: &str, v: f32| f.within(name, f64::from(v), 0.0, 1e4, "m/s²");
        accel("max_acceleration", self.max_acceleration)?;
        accel("braking_deceleration", self.braking_deceleration)?;
        accel("gravity", self.gravity)?;
        let friction = f64::from(self.ground_friction);
        f.within("ground_friction", friction, 0.0, 1000.0, "1/s")?;
        f.within("air_control", f64::from(self.air_control), 0.0, 1.0, "")?;
        let seconds = |name: &str, v: f32| f.within(name, f64::from(v), 0.0, 60.0, "s");
        seconds("dash_duration", self.dash_duration)?;
        seconds("dash_cooldown", self.dash_cooldown)?;
        f.within("max_step", f64::from(self.max_step), 1e-3, 1.0, "s")?;
        f.count("max_iterations", u64::from(self.max_iterations), 1, 64)?;
        let slope = f64::from(self.max_slope);
        f.within("max_slope", slope, 0.0, core::f64::consts::FRAC_PI_2, "rad")
    }

    fn simulate(
        &self,
        state: &CharacterState,
        input: &CharacterInput,
        dt: f32,
        world: &CollisionWorld,
    ) -> (CharacterState, MoveEvents) {
        let mut s = state.clone();
        let mut events = MoveEvents::default();
        if !(dt.is_finite() && dt > 0.0) {
            return (s, events);
        }
        s.yaw = dequantize_angle(input.yaw);
        s.pitch = dequantize_pitch(input.pitch);
        let controller = self.controller();

        // Abilities are flags of the move, so a replay applies them again, exactly.
        if input.has(flags::CROUCH) {
            s.crouched = true;
        } else if s.crouched {
            let standing = self.capsule(false);
            // Stand up only where there is room (raised by the offset so the floor is no hit).
            let centre = s.feet + self.centre_offset(false) + Vec3::Y * 0.02;
            if !world.intersects(&standing, centre) {
                s.crouched = false;
            }
        }
        let wish = dequantize_accel(input.accel).clamp_length_max(1.0);
        let wish = Vec3::new(wish.x, 0.0, wish.y);
        if input.has(flags::DASH) && s.dash_cooldown <= 0.0 {
            let facing = Quat::from_rotation_y(s.yaw) * Vec3::NEG_Z;
            let dir = if wish.length_squared() > 1e-6 {
                wish.normalize()
            } else {
                facing
            };
            s.velocity = Vec3::new(
                dir.x * self.dash_speed,
                s.velocity.y,
                dir.z * self.dash_speed,
            );
            s.dash_time = self.dash_duration;
            s.dash_cooldown = self.dash_cooldown;
            events.dashed = true;
        }
        if input.has(flags::JUMP) && s.mode == MoveMode::Walking && !s.crouched {
            s.velocity.y = self.jump_speed;
            s.mode = MoveMode::Falling;
            events.jumped = true;
        }

        let steps = ((dt / self.max_step).ceil() as u32).clamp(1, self.max_iterations.max(1));
        let step = dt / steps as f32;
        for _ in 0..steps {
            s.dash_cooldown = (s.dash_cooldown - step).max(0.0);
            let dashing = s.dash_time > 0.0;
            s.dash_time = (s.dash_time - step).max(0.0);
            let max_speed = if s.crouched {
                self.max_crouch_speed
            } else {
                self.max_walk_speed
            };
            let accel = wish * self.max_acceleration;
            match s.mode {
                MoveMode::Walking if !dashing => {
                    s.velocity = self.walk_velocity(s.velocity, accel, max_speed, step);
                    s.velocity.y = 0.0;
                }
                MoveMode::Walking => s.velocity.y = 0.0,
                MoveMode::Falling => {
                    if !dashing {
                        let air = accel * self.air_control * step;
                        let h = Vec3::new(s.velocity.x + air.x, 0.0, s.velocity.z + air.z);
                        let speed = Vec3::new(s.velocity.x, 0.0, s.velocity.z).length();
                        let h = h.clamp_length_max(speed.max(max_speed));
                        s.velocity.x = h.x;
                        s.velocity.z = h.z;
                    }
                    s.velocity.y -= self.gravity * step;
                }
            }
            let desired = s.velocity * step;
            let shape = self.capsule(s.crouched);
            let centre = s.feet + self.centre_offset(s.crouched);
            let out = world.move_shape(&controller, step, &shape, centre, desired);
            s.feet += out.translation;
            // Whatever the walls took off the move is taken off the velocity too (sliding).
            if s.mode == MoveMode::Walking || out.grounded {
                let actual = out.translation / step;
                let h = Vec3::new(s.velocity.x, 0.0, s.velocity.z);
                let actual_h = Vec3::new(actual.x, 0.0, actual.z);
                if actual_h.length_squared() < h.length_squared() {
                    s.velocity.x = actual_h.x;
                    s.velocity.z = actual_h.z;
                }
            }
            if s.mode == MoveMode::Falling && desired.y > 0.0 && out.translation.y < desired.y * 0.5
            {
                s.velocity.y = 0.0; // head hit a ceiling
            }
            if out.grounded && s.velocity.y <= 0.0 {
                if s.mode == MoveMode::Falling {
                    events.landed = true;
                }
                s.mode = MoveMode::Walking;
                s.velocity.y = 0.0;
            } else if !out.grounded {
                s.mode = MoveMode::Falling;
            }
        }
        (s, events)
    }

    fn position(state: &CharacterState) -> Vec3 {
        state.feet
    }

    fn rotation(state: &CharacterState) -> Quat {
        Quat::from_rotation_y(state.yaw)
    }

    fn velocity(state: &CharacterState) -> Option<Vec3> {
        Some(state.velocity)
    }

    fn with_position(state: &CharacterState, position: Vec3) -> CharacterState {
        CharacterState {
            feet: position,
            ..state.clone()
        }
    }

    /// The capsule swept from where the state stands to `position` touches nothing (the
    /// controller keeps it 1 cm off every surface, so an honest end position is clear).
    fn may_move_to(&self, state: &CharacterState, position: Vec3, world: &CollisionWorld) -> bool {
        let motion = position - state.feet;
        if !(state.feet.is_finite() && motion.is_finite()) {
            return false;
        }
        let centre = state.feet + self.centre_offset(state.crouched);
        world
            .cast_shape(&self.capsule(state.crouched), centre, motion)
            .is_none()
    }

    /// Goes on walking the way the player was, looking where it looked; a dash is pressed once,
    /// never guessed again.
    fn guess_input(last: &CharacterInput) -> CharacterInput {
        CharacterInput {
            flags: last.flags & !flags::DASH,
            ..*last
        }
    }

    /// Every move sets the look angles from its input, and only a dash reads them (its way
    /// when no direction is held): inputs with the same acceleration and flags, no dash, move
    /// the body alike.
    fn moved_alike(
        after: &CharacterState,
        simulated: &CharacterInput,
        input: &CharacterInput,
    ) -> Option<CharacterState> {
        let alike = simulated.accel == input.accel
            && simulated.flags == input.flags
            && !input.has(flags::DASH);
        alike.then(|| CharacterState {
            yaw: dequantize_angle(input.yaw),
            pitch: dequantize_pitch(input.pitch),
            ..after.clone()
        })
    }

    fn urgent(previous: &CharacterInput, next: &CharacterInput) -> bool {
        previous.flags != next.flags
    }

    fn is_valid(s: &CharacterState) -> bool {
        s.feet.is_finite()
            && s.velocity.is_finite()
            && s.yaw.is_finite()
            && s.pitch.is_finite()
            && s.dash_time.is_finite()
            && s.dash_cooldown.is_finite()
            && s.velocity.length() < 1000.0
    }
}
