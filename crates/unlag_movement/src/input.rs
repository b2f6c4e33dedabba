//! Input for [`CharacterMovement`] from leafwing-input-manager: an `InputMap` turns keys and the
//! mouse into [`CharacterAction`]s, which become the next move's [`CharacterInput`].

use crate::character::{CharacterInput, CharacterMovement, flags};
use crate::{MovementPredictionSystems, NextMove};
use bevy::prelude::*;
use leafwing_input_manager::prelude::*;
use unlag_core::quantize::{quantize_accel, quantize_angle, quantize_pitch};
use unlag_net::AutonomousProxy;

/// What a player does with a [`CharacterMovement`] character.
#[derive(Actionlike, Debug, Clone, Copy, PartialEq, Eq, Hash, Reflect)]
pub enum CharacterAction {
    /// Walk: x right, y forward, each in `[-1, 1]`.
    #[actionlike(DualAxis)]
    Move,
    /// Turn and look: mouse motion, in counts.
    #[actionlike(DualAxis)]
    Look,
    /// Jump (held).
    Jump,
    /// Crouch (held).
    Crouch,
    /// Dash (pressed).
    Dash,
}

impl CharacterAction {
    /// WASD, mouse look, Space jump, left Ctrl crouch, left Shift dash.
    pub fn default_input_map() -> InputMap<CharacterAction> {
        InputMap::default()
            .with_dual_axis(CharacterAction::Move, VirtualDPad::wasd())
            .with_dual_axis(CharacterAction::Look, MouseMove::default())
            .with(CharacterAction::Jump, KeyCode::Space)
            .with(CharacterAction::Crouch, KeyCode::ControlLeft)
            .with(CharacterAction::Dash, KeyCode::ShiftLeft)
    }
}

/// Where the player looks, radians; turned by [`CharacterAction::Look`] every frame.
#[derive(Component, Copy, Clone, Debug, Default, PartialEq, Reflect)]
pub struct LookAngles {
    /// About +Y; 0 faces −Z.
    pub yaw: f32,
    /// Up positive, within ±89°.
    pub pitch: f32,
}

/// Feeds [`CharacterMovement`] from leafwing input on the client's own character.
///
/// On a client it gives the predicted character an `InputMap` (unless
/// [`insert_input_map`](Self::insert_input_map) is off: tests and bots then drive its
/// `ActionState` directly) and a [`LookAngles`], turns the look action into angles every frame,
/// and before each simulated tick turns the actions into the move's [`CharacterInput`]. Harmless
/// on a server.
#[derive(Clone, Debug)]
pub struct CharacterInputPlugin {
    /// Radians of turn per mouse count (default 0.003).
    pub sensitivity: f32,
    /// Whether predicted characters get [`CharacterAction::default_input_map`] (default true).
    pub insert_input_map: bool,
}

impl Default for CharacterInputPlugin {
    fn default() -> Self {
        Self {
            sensitivity: 0.003,
            insert_input_map: true,
        }
    }
}

#[derive(Resource, Clone, Copy)]
struct InputSettings {
    sensitivity: f32,
    insert_input_map: bool,
}

impl Plugin for CharacterInputPlugin {
    fn build(&self, app: &mut App) {
        if !app.is_plugin_added::<bevy::input::InputPlugin>() {
            app.add_plugins(bevy::input::InputPlugin);
        }
        app.add_plugins(InputManagerPlugin::<CharacterAction>::default())
            .insert_resource(InputSettings {
                sensitivity: self.sensitivity,
                insert_input_map: self.insert_input_map,
            })
            .register_type::<LookAngles>()
            .add_observer(equip)
            .add_systems(Update, turn)
            .add_systems(
                FixedUpdate,
                write_next_move.before(MovementPredictionSystems::Simulate),
            );
    }
}

fn equip(add: On<Add, AutonomousProxy>, settings: Res<InputSettings>, mut commands: Commands) {
    let mut entity = commands.entity(add.entity);
    entity.insert((
        LookAngles::default(),
        ActionState::<CharacterAction>::default(),
    ));
    if settings.insert_input_map {
        entity.insert(CharacterAction::default_input_map());
    }
}

fn turn(
    settings: Res<InputSettings>,
    mut looks: Query<(&ActionState<CharacterAction>, &mut LookAngles), With<AutonomousProxy>>,
) {
    for (actions, mut look) in &mut looks {
        let delta = actions.axis_pair(&CharacterAction::Look) * settings.sensitivity;
        if delta != Vec2::ZERO && delta.is_finite() {
            look.yaw = (look.yaw - delta.x).rem_euclid(core::f32::consts::TAU);
            let limit = 89f32.to_radians();
            look.pitch = (look.pitch - delta.y).clamp(-limit, limit);
        }
    }
}

/// The world-space input of one move from the player's actions and look angles.
pub fn character_input(
    actions: &ActionState<CharacterAction>,
    look: &LookAngles,
) -> CharacterInput {
    let stick = actions.clamped_axis_pair(&CharacterAction::Move);
    let turn = Quat::from_rotation_y(look.yaw);
    let forward = turn * Vec3::NEG_Z;
    let right = turn * Vec3::X;
    let world = right * stick.x + forward * stick.y;
    let mut bits = 0;
    if actions.pressed(&CharacterAction::Jump) {
        bits |= flags::JUMP;
    }
    if actions.pressed(&CharacterAction::Crouch) {
        bits |= flags::CROUCH;
    }
    if actions.just_pressed(&CharacterAction::Dash) {
        bits |= flags::DASH;
    }
    CharacterInput {
        accel: quantize_accel(Vec2::new(world.x, world.z)),
        yaw: quantize_angle(look.yaw),
        pitch: quantize_pitch(look.pitch),
        flags: bits,
    }
}

fn write_next_move(
    mut commands: Commands,
    mut characters: Query<
        (
            Entity,
            &ActionState<CharacterAction>,
            &LookAngles,
            Option<&mut NextMove<CharacterMovement>>,
        ),
        With<AutonomousProxy>,
    >,
) {
    for (entity, actions, look, next) in &mut characters {
        NextMove::write(&mut commands, entity, next, character_input(actions, look));
    }
}
