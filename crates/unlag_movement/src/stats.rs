//! [`MovementStats`]: counters of movement prediction, for HUDs, reports and tests.

use bevy::prelude::*;

/// Why the server dropped a move or a whole [`ServerMove`](crate::ServerMove).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Reflect)]
pub enum RejectReason {
    /// The bytes do not decode to a move list.
    Malformed,
    /// More moves in one message than allowed.
    TooManyMoves,
    /// A move's duration is zero or above `max_move_delta`.
    BadDelta,
    /// Every move in the message was processed before (a replayed message).
    Stale,
    /// The first move is too far ahead of the last processed one.
    FarAhead,
    /// More moves per second than real time allows.
    TooFrequent,
    /// The sending client controls no character of this model.
    NotControlled,
    /// The oldest move is written against a move the server does not hold (see
    /// [`ServerMoveData::base`](crate::ServerMoveData)): a message delayed past the server's
    /// record of the moves it took, or bytes naming a move that never came.
    UnknownBase,
}

impl RejectReason {
    /// Every reason, in a fixed order.
    pub const ALL: [RejectReason; 8] = [
        RejectReason::Malformed,
        RejectReason::TooManyMoves,
        RejectReason::BadDelta,
        RejectReason::Stale,
        RejectReason::FarAhead,
        RejectReason::TooFrequent,
        RejectReason::NotControlled,
        RejectReason::UnknownBase,
    ];

    fn index(self) -> usize {
        Self::ALL.iter().position(|r| *r == self).unwrap_or(0)
    }
}

/// Counters of movement prediction in this App (all models together). On a client the client
/// figures move; on the server the server figures.
#[derive(Resource, Clone, Debug, Default, Reflect)]
#[reflect(Resource)]
pub struct MovementStats {
    /// Client: moves simulated live (not replays).
    pub moves_simulated: u64,
    /// Client: `ServerMove` messages sent.
    pub messages_sent: u64,
    /// Client: moves sent, redundant copies included.
    pub moves_sent: u64,
    /// Client: `ServerMove` messages whose oldest move went as its change from a move the
    /// server was known to hold (a base), not whole.
    pub messages_with_base: u64,
    /// Client: `ServerMove` messages that stated the last correction applied (sent until the
    /// server is known to have heard it).
    pub messages_stating_ack: u64,
    /// Client: acknowledgements received.
    pub acks_received: u64,
    /// Client: corrections applied: states from the server that disagreed with the
    /// prediction (beyond `max_position_error_sq`).
    pub corrections_received: u64,
    /// Client: states the server sent again (its initial state or a correction whose
    /// confirmation was late) that agreed with the prediction: applied, not corrections.
    pub states_agreed: u64,
    /// Client: moves replayed after corrections.
    pub moves_replayed: u64,
    /// Client: corrections too large to smooth (snapped).
    pub snaps: u64,
    /// Client: moves dropped from a full saved-move list.
    pub saved_moves_evicted: u64,
    /// Client: responses dropped (unknown entity, not controlled, stale).
    pub responses_dropped: u64,
    /// Server: new moves processed.
    pub moves_processed: u64,
    /// Server: redundant copies of moves already processed (normal).
    pub duplicate_moves: u64,
    /// Server: moves lost in every copy, simulated with the next move's input.
    pub missing_moves_filled: u64,
    /// Server: client end positions within the error allowed that were not adopted
    /// ([`MovementSettings::accept_client_position`](crate::MovementSettings)) because the
    /// body could not go straight there from the server's place (through a wall).
    pub client_positions_refused: u64,
    /// Server: steps simulated to show late players' tracks going on (guesses), each at most a
    /// tick: the cost of the guess, beside `moves_processed`.
    pub guess_steps: u64,
    /// Server: moves played that a guess had simulated already (its input and length, from
    /// the same state): taken from the guess, not simulated again. Of `moves_processed`.
    pub guessed_moves_taken: u64,
    /// Server: acknowledgements sent (corrections included).
    pub acks_sent: u64,
    /// Server: corrections sent.
    pub corrections_sent: u64,
    /// Server: corrections due but held back by the throttle.
    pub corrections_throttled: u64,
    /// Server: speed hacks flagged.
    pub speed_hacks_flagged: u64,
    /// Server: moves or messages rejected, per [`RejectReason::ALL`].
    pub rejected: [u64; 8],
}

impl MovementStats {
    /// Rejections for `reason`.
    pub fn rejected(&self, reason: RejectReason) -> u64 {
        self.rejected[reason.index()]
    }

    /// Counts a rejection for `reason`; returns the count so far.
    pub fn reject(&mut self, reason: RejectReason) -> u64 {
        let slot = self.rejected_mut(reason);
        *slot += 1;
        *slot
    }

    /// The count of rejections for `reason`, to count one more.
    pub(crate) fn rejected_mut(&mut self, reason: RejectReason) -> &mut u64 {
        &mut self.rejected[reason.index()]
    }

    /// Every rejection, all reasons together.
    pub fn rejected_total(&self) -> u64 {
        self.rejected.iter().sum()
    }
}
