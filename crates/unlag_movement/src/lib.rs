//! Movement prediction and correction (seeds 001, 002, 004): the local player moves at once, the
//! server stays the authority, and an honest player is never pulled back.
//!
//! See [`MovementPredictionPlugin`]. The data flow, one move at a time:
//!
//! 1. **Input** (client, `FixedUpdate`, before [`MovementPredictionSystems::Simulate`]): the
//!    game (or [`CharacterInputPlugin`] from leafwing actions) writes the tick's input into
//!    [`NextMove<M>`] on the client's own character. Inputs are quantised, so the server will
//!    simulate exactly what the client did.
//! 2. **Simulate and save** (client, `FixedUpdate`): the move is simulated at once from the
//!    predicted [`MovementState<M>`] and kept in [`Prediction<M>`]'s saved moves.
//! 3. **Send** (client, `PostUpdate`): one [`ServerMove<M>`] per frame carries the new moves,
//!    up to `redundancy` older unacknowledged ones and the client's end position.
//! 4. **Check** (server, `Update`): each new move is validated (duration, sequence, rate),
//!    charged against the client's clock (speed hacks), simulated with its own duration, and
//!    the end position compared with the client's.
//! 5. **Acknowledge or correct** (server): good moves are acknowledged in batches; a wrong end
//!    position gets a [`MoveResponse<M>`] with the server's whole state, throttled.
//! 6. **Replay** (client, `PreUpdate`): on a correction the client restores the server's state,
//!    drops the acknowledged moves, replays the pending ones in the same frame (their events
//!    are not emitted again), and hides the jump with a decaying visual offset.
//!
//! Models implement [`MovementModel`]: [`CharacterMovement`] (a rapier capsule) and
//! [`KartMovement`] (seed 001) come with the crate.

mod character;
#[cfg(feature = "cheats")]
mod cheats;
mod client;
mod debug;
mod input;
mod kart;
mod model;
mod protocol;
mod server;
mod settings;
mod stats;
mod world;

pub use character::{CharacterInput, CharacterMovement, CharacterState, MoveMode, flags};
#[cfg(feature = "cheats")]
pub use cheats::Cheats;
pub use client::{Prediction, SavedMove};
pub use debug::{CorrectionApplied, CorrectionMark, CorrectionMarks, MovementDebug};
pub use input::{CharacterAction, CharacterInputPlugin, LookAngles, character_input};
pub use kart::{KartInput, KartMovement, KartState};
pub use model::{MAX_DELTA_TAG_BITS, MoveEvents, MoveInputCodec, MovementModel};
pub use protocol::{
    Correction, DT_UNIT, HELD_MOVES_KEPT, MAX_BASE_AGE, MAX_MOVES_PER_MESSAGE, MoveResponse,
    ServerMove, ServerMoveData, WireMove, decode_dt, decode_end, encode_dt, encode_end,
};
pub use server::ServerMovement;
pub use settings::{CharacterCollisions, MovementSettings};
pub use stats::{MovementStats, RejectReason};
pub use world::{CHARACTER_GROUP, CollisionWorld, character_collision_groups, movement_filter};

use bevy::ecs::schedule::common_conditions::any_with_component;
use bevy::prelude::*;
use bevy::transform::TransformSystems;
use bevy_rapier3d::prelude::PhysicsSet;
use core::marker::PhantomData;
use lightyear::prelude::server::Server;
use lightyear::prelude::*;
use unlag_net::{NetDirection, NetMessageAppExt, NetSystems, ValidatedSettingsAppExt};

/// The movement state of a character of model `M`: authoritative on the server, predicted on
/// the owning client. Spawn it on the server with lightyear's `Replicate` and `ControlledBy`;
/// the owning client receives it with its first acknowledgement.
#[derive(Component)]
#[require(Transform)]
pub struct MovementState<M: MovementModel>(pub M::State);

impl<M: MovementModel> Clone for MovementState<M> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<M: MovementModel> core::fmt::Debug for MovementState<M> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_tuple("MovementState").field(&self.0).finish()
    }
}

/// The input of the next move of the client's own character (client, written before
/// [`MovementPredictionSystems::Simulate`] each tick; the default input when absent), or of a
/// [`ServerDriven`] character on the server.
#[derive(Component)]
pub struct NextMove<M: MovementModel>(pub M::Input);

/// On the server: a character no client controls (a bot, an NPC) that the server moves itself
/// with the same model, collisions and tick: each `FixedUpdate` it simulates one move with the
/// input in its [`NextMove<M>`] (written before [`MovementPredictionSystems::Simulate`]) and is
/// placed like every character. Give it [`MovementState<M>`] too; with smoothing it is a proxy
/// on every client like a player.
#[derive(Component, Clone, Copy, Debug, Default)]
pub struct ServerDriven;

impl<M: MovementModel> Clone for NextMove<M> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<M: MovementModel> NextMove<M> {
    /// Makes `input` the next move of `entity`, whose [`NextMove`] is `next`: written in place,
    /// or inserted the first time (when `next` is `None`).
    pub fn write(
        commands: &mut Commands,
        entity: Entity,
        next: Option<Mut<Self>>,
        input: M::Input,
    ) {
        match next {
            Some(mut next) => next.0 = input,
            None => {
                commands.entity(entity).insert(Self(input));
            }
        }
    }
}

/// What a live move did (a jump, a dash, a landing), for effects. Never written for replayed
/// moves.
#[derive(Message, Copy, Clone, Debug, PartialEq)]
pub struct MovementEvent {
    /// The client's own predicted character (its
    /// [`AutonomousProxy`](unlag_net::AutonomousProxy)) that made the move. Only the
    /// controlling client writes these: the server and other clients get none.
    pub entity: Entity,
    /// What happened.
    pub events: MoveEvents,
}

/// Server: a client's clock ran fast enough to claim more than `max_time_margin` of extra
/// time; its moves are now charged until the excess is paid back.
#[derive(Message, Copy, Clone, Debug, PartialEq)]
pub struct SpeedHackDetected {
    /// The server's character entity whose moves are now charged (the one `client` controls).
    pub character: Entity,
    /// The client's link entity.
    pub client: Entity,
    /// Claimed time in excess of elapsed time, seconds.
    pub excess: f64,
}

/// Marks that the model-independent correction marks system was added (by the first model's
/// plugin); further models share it.
#[derive(Resource, Default)]
struct MarksKept;

/// System sets of movement prediction.
#[derive(SystemSet, Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum MovementPredictionSystems {
    /// `PreUpdate`, after lightyear's message receive: the client applies acknowledgements and
    /// corrections (replays).
    Receive,
    /// `FixedUpdate`, after rapier's writeback: the client simulates and saves the tick's
    /// move. Input systems run before it.
    Simulate,
    /// `Update`, inside [`NetSystems::Moves`]: the server checks moves, places the characters
    /// they moved, acknowledges and corrects.
    Check,
    /// `PostUpdate`, before lightyear's message send: the client sends its moves.
    Send,
    /// `PostUpdate`, before transform propagation: characters are placed at their state (plus
    /// the correction's visual offset on the client).
    Place,
}

/// Movement prediction and correction for model `M`, on client and server alike (add the same
/// plugins on both; roles come from lightyear). Requires
/// [`UnlagNetPlugin`](unlag_net::UnlagNetPlugin) and the model resource `M` (inserted with its
/// default if missing).
pub struct MovementPredictionPlugin<M: MovementModel> {
    /// The settings (inserted as the [`MovementSettings<M>`] resource).
    pub settings: MovementSettings<M>,
    _model: PhantomData<fn() -> M>,
}

impl<M: MovementModel> Default for MovementPredictionPlugin<M> {
    fn default() -> Self {
        Self {
            settings: MovementSettings::default(),
            _model: PhantomData,
        }
    }
}

impl<M: MovementModel> Clone for MovementPredictionPlugin<M>
where
    MovementSettings<M>: Clone,
{
    fn clone(&self) -> Self {
        Self::new(self.settings.clone())
    }
}

impl<M: MovementModel> MovementPredictionPlugin<M> {
    /// The plugin with these settings.
    pub fn new(settings: MovementSettings<M>) -> Self {
        Self {
            settings,
            _model: PhantomData,
        }
    }
}

impl<M: MovementModel + Default> Plugin for MovementPredictionPlugin<M> {
    fn build(&self, app: &mut App) {
        app.init_resource::<M>();
        let model = app.world().resource::<M>().clone();
        app.insert_checked(model, M::validate)
            .insert_validated(self.settings.clone())
            .init_resource::<MovementStats>()
            .add_message::<MovementEvent>()
            .add_message::<SpeedHackDetected>()
            .add_message::<CorrectionApplied>()
            .init_resource::<MovementDebug>()
            .init_resource::<CorrectionMarks>()
            .add_net_message_whole::<ServerMove<M>>(NetDirection::ClientToServer)
            .add_net_message_mapped::<MoveResponse<M>>(NetDirection::ServerToClient);

        app.configure_sets(
            PreUpdate,
            MovementPredictionSystems::Receive
                .after(MessageSystems::Receive)
                .after(NetSystems::Clock),
        )
        .configure_sets(
            FixedUpdate,
            MovementPredictionSystems::Simulate.after(PhysicsSet::Writeback),
        )
        .configure_sets(
            Update,
            MovementPredictionSystems::Check.in_set(NetSystems::Moves),
        )
        .configure_sets(
            PostUpdate,
            (
                // Before what rides along with the moves (a shot's copies, delay reports).
                MovementPredictionSystems::Send
                    .before(MessageSystems::Send)
                    .before(NetSystems::Resend)
                    .before(NetSystems::RideAlong),
                MovementPredictionSystems::Place.before(TransformSystems::Propagate),
            ),
        )
        .add_systems(
            PreUpdate,
            client::apply_responses::<M>
                .run_if(any_with_component::<Client>)
                .in_set(MovementPredictionSystems::Receive),
        )
        .add_systems(
            FixedUpdate,
            (
                client::simulate_moves::<M>.run_if(any_with_component::<Client>),
                server::simulate_server_driven::<M>.run_if(any_with_component::<Server>),
            )
                .in_set(MovementPredictionSystems::Simulate),
        )
        .add_systems(
            Update,
            (
                server::start_characters::<M>,
                server::process_moves::<M>,
                // Placed at once, so what is judged after the moves this frame (a shot's
                // origin) sees where they took the character, not last frame's place.
                server::place_authoritative::<M>,
                server::send_acks::<M>,
            )
                .chain()
                .run_if(any_with_component::<Server>)
                .in_set(MovementPredictionSystems::Check),
        );
        // Shared by every model's plugin: added once.
        if !app.world().contains_resource::<MarksKept>() {
            app.init_resource::<MarksKept>()
                .add_systems(Update, debug::keep_marks);
            #[cfg(feature = "debug-draw")]
            app.add_systems(
                PostUpdate,
                debug::draw_marks.run_if(resource_exists::<bevy::gizmos::config::GizmoConfigStore>),
            );
        }
        app.add_systems(
            PostUpdate,
            (
                client::send_moves::<M>
                    .run_if(any_with_component::<Client>)
                    .in_set(MovementPredictionSystems::Send),
                (
                    client::place_predicted::<M>,
                    server::place_authoritative::<M>,
                )
                    .in_set(MovementPredictionSystems::Place),
            ),
        );
    }
}
