//! The [`MovementModel`] trait: what a movement model must provide to be predicted, checked and
//! corrected by [`MovementPredictionPlugin`](crate::MovementPredictionPlugin).

use crate::world::CollisionWorld;
use bevy::prelude::*;
use core::fmt::Debug;
use serde::{Serialize, de::DeserializeOwned};
use unlag_core::{ByteReader, ByteWriter, DecodeError};

/// What a move's simulation did that a game may want to show or play (a jump sound, a dash
/// trail). Emitted as [`MovementEvent`](crate::MovementEvent)s for live moves only, never for
/// moves replayed after a correction, so effects never fire twice.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Reflect)]
pub struct MoveEvents {
    /// The character left the ground by jumping.
    pub jumped: bool,
    /// The character used its dash ability.
    pub dashed: bool,
    /// The character touched the ground after falling (from a jump or off a ledge).
    pub landed: bool,
}

/// A move's input, encoded compactly for the wire. The encoded form is the exact value both
/// sides simulate: inputs hold quantised values (see [`unlag_core::quantize`]), so encoding and
/// decoding loses nothing.
pub trait MoveInputCodec: Sized {
    /// Appends the input's bytes.
    fn encode(&self, out: &mut ByteWriter);
    /// Reads an input back; errors on truncated or out-of-range bytes.
    fn decode(input: &mut ByteReader) -> Result<Self, DecodeError>;

    /// Low bits of each move's header byte in a [`ServerMove`](crate::ServerMove) the codec may
    /// use to say what changed from the reference (0 to [`MAX_DELTA_TAG_BITS`]; default 0):
    /// the mask of changed fields rides in a byte the message writes anyway.
    const DELTA_TAG_BITS: u32 = 0;

    /// Appends the input's bytes as a change from `reference` (the next newer move's input in
    /// the same message), and returns the tag [`decode_delta`](Self::decode_delta) reads them
    /// with, below `1 << DELTA_TAG_BITS` (it travels in the move's header byte). The default
    /// writes the whole input, tag 0; models whose inputs change one field at a time (look
    /// angles) save bytes by writing only what changed, naming it in the tag.
    fn encode_delta(&self, reference: &Self, out: &mut ByteWriter) -> u8 {
        let _ = reference;
        self.encode(out);
        0
    }

    /// Reads an input written by [`encode_delta`](Self::encode_delta) against `reference`
    /// with the tag it returned (any value below `1 << DELTA_TAG_BITS` may come from the
    /// network: errors, never panics).
    fn decode_delta(
        reference: &Self,
        tag: u8,
        input: &mut ByteReader,
    ) -> Result<Self, DecodeError> {
        let _ = (reference, tag);
        Self::decode(input)
    }
}

/// Most header bits a [`MoveInputCodec`] may tag its changes with (the header's other two say
/// "same input" and "same duration").
pub const MAX_DELTA_TAG_BITS: u32 = 6;

/// A movement model: its parameters (the type itself, a resource that must be equal on client
/// and server), its input and its state, and one move of simulation.
///
/// `simulate` must be a pure function of its arguments: the server re-simulates every move the
/// client made, and the client replays its pending moves after a correction, and both must
/// come out bit for bit the same as the first time.
pub trait MovementModel: Resource + Clone + Debug {
    /// The input of one move.
    type Input: MoveInputCodec + Clone + PartialEq + Default + Debug + Send + Sync + 'static;
    /// Everything the model needs to continue from a point: corrections carry the whole state,
    /// never the position alone.
    type State: Clone + Debug + PartialEq + Serialize + DeserializeOwned + Send + Sync + 'static;

    /// Simulates one move of `dt` seconds from `state` with `input` against `world`.
    fn simulate(
        &self,
        state: &Self::State,
        input: &Self::Input,
        dt: f32,
        world: &CollisionWorld,
    ) -> (Self::State, MoveEvents);

    /// Where the state stands, metres.
    fn position(state: &Self::State) -> Vec3;

    /// Which way the state faces.
    fn rotation(state: &Self::State) -> Quat;

    /// How fast the state moves, metres per second, when the model knows (the server then
    /// gives it to proxy states as [`SimulatedVelocity`](unlag_net::SimulatedVelocity)); `None`
    /// (the default) lets the proxy states read it from the motion of the last tick.
    fn velocity(_state: &Self::State) -> Option<Vec3> {
        None
    }

    /// The state moved to `position` (for the server's optional trust in client positions
    /// within tolerance, and for teleports by the game).
    fn with_position(state: &Self::State, position: Vec3) -> Self::State;

    /// Whether the state may be moved straight to `position` without passing through the
    /// world: the server adopts a client's end position
    /// ([`MovementSettings::accept_client_position`](crate::MovementSettings)) only then, so a
    /// client cannot creep through a wall by its error allowance a move at a time. Default: the
    /// segment between the two positions crosses nothing. Models with a body sweep it.
    fn may_move_to(&self, state: &Self::State, position: Vec3, world: &CollisionWorld) -> bool {
        world.segment_clear(Self::position(state), position)
    }

    /// Checks the model's own parameters (a resource the game may change), naming the first
    /// field out of range. The movement plugin calls it when built and undoes run-time
    /// changes that fail it. Default: nothing to check.
    fn validate(&self) -> Result<(), unlag_core::SettingsError> {
        Ok(())
    }

    /// Whether every number in the state is finite and in range (a corrupted state is never
    /// adopted).
    fn is_valid(state: &Self::State) -> bool;

    /// The input the server goes on with while a player's moves are late, from the last one it
    /// played (see [`PlayoutSettings::max_guess`](unlag_core::PlayoutSettings::max_guess)).
    /// Default: the same input. Models clear what acts once per press (a dash).
    fn guess_input(last: &Self::Input) -> Self::Input {
        last.clone()
    }

    /// The state a move with `input` ends in, known without simulating it: a move of the same
    /// length from the same state with `simulated` ended in `after`, and the two inputs move
    /// the body alike (they differ only in what every move sets afresh from its input, such as
    /// where the player looks). The state returned must differ from `after` only in that, so
    /// that it is where `after` is, moves as it does, and moves on as it would. `None` when the
    /// model cannot tell: the move is simulated. Default: `after` itself for the same input.
    ///
    /// The server uses it to take up what a guess simulated while the player's moves were
    /// late, once they come (see
    /// [`MovementStats::guessed_moves_taken`](crate::MovementStats::guessed_moves_taken)).
    fn moved_alike(
        after: &Self::State,
        simulated: &Self::Input,
        input: &Self::Input,
    ) -> Option<Self::State> {
        (simulated == input).then(|| after.clone())
    }

    /// Whether going from input `previous` to `next` should reach the server at once rather
    /// than wait for the send interval (an ability was used). Default: never.
    fn urgent(previous: &Self::Input, next: &Self::Input) -> bool {
        let _ = (previous, next);
        false
    }
}
