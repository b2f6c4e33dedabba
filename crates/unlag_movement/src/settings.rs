//! [`MovementSettings`]: the numbers of movement prediction, with UE's defaults in metres.

use bevy::prelude::*;
use core::marker::PhantomData;
use unlag_core::{
    CorrectionSmoothing, CorrectionThrottle, Fields, PlayoutSettings, SettingsError,
    TimeDiscrepancySettings, Validate,
};

/// Whether characters block each other.
///
/// A client predicts its own character in the present but sees every other character in the
/// past (at its view time), so a collision the client predicts against another character is
/// against where that character *was*: bumping into others is where honest corrections come
/// from. By default characters pass through each other and only the static world blocks them;
/// a game that wants blocking accepts occasional corrections when players brush past.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Reflect)]
pub enum CharacterCollisions {
    /// Characters do not block each other (default).
    #[default]
    Ignore,
    /// Characters' own colliders (members of [`CHARACTER_GROUP`](crate::CHARACTER_GROUP))
    /// block other characters.
    Block,
}

/// Settings of [`MovementPredictionPlugin<M>`](crate::MovementPredictionPlugin) for model `M`.
/// A resource; defaults are UE's CharacterMovementComponent values converted to metres.
#[derive(Resource, Clone, Debug)]
pub struct MovementSettings<M> {
    /// Most unacknowledged moves the client keeps (default 256: at 60 moves/s, 4.3 s, enough
    /// for a second-long burst of losses, the playout's catch-up after it and the
    /// acknowledgement's trip back; UE keeps 96, which such a burst overflows, and a move
    /// dropped before the server has it is a move the server must guess).
    pub max_saved_moves: usize,
    /// Most earlier messages whose moves each `ServerMove` repeats while the server lacks them
    /// (default 3): that many lost packets in a row cost no correction. Fewer (never fewer than
    /// 2) while fewer keep a move lost with every repeat as unlikely as
    /// `resend_all_above_miss` (at 3 % loss lost independently, 2 repeats: 2.7e-5).
    pub redundancy: usize,
    /// How likely a send's moves may be lost in every message that carries them (in it and in
    /// the `redundancy` after it: [`unlag_core::redundancy_miss`] of the client's measured
    /// [`NetClock::loss`](unlag_net::NetClock) and of how its losses run) above which every
    /// move the server does not have goes again in each message, up to
    /// [`MAX_MOVES_PER_MESSAGE`](crate::MAX_MOVES_PER_MESSAGE) (default 1e-4: one send in
    /// about five minutes at 30 a second). Links that lose in runs go over it (3 % loss in
    /// runs of four: 0.013), and a burst of losses is bridged by the first message through.
    /// Independent losses stay far under it (3 %: 8e-7), and redundancy bridges them at a
    /// fraction of the bytes: every move in flight, a round trip's worth, went in every
    /// message. A send lost with every repeat goes again once a later one is acknowledged.
    /// 0 resends every move in flight whenever the link loses anything; `f64::INFINITY`
    /// keeps to `redundancy`.
    pub resend_all_above_miss: f64,
    /// Least time between two `ServerMove`s, seconds (default 1/30: two 60 Hz moves per
    /// message, which halves lightyear's per-packet overhead, ~40 bytes). A move that changes
    /// the ability flags (jump, crouch, dash) is sent at once. 0 sends every frame.
    pub send_interval: f64,
    /// How likely a lost datagram of the server's must be to be followed by another (the
    /// client's reading of its link, `LinkTraffic::datagram_loss`, from the first run of losses
    /// met) for every move to go as soon as it is made, `send_interval` aside (default 0.3;
    /// 0 to 2, above 1 never). A link that loses datagrams in runs loses a number of them in
    /// a row, not a span of time: moves sent every `send_interval` are held up by a burst for
    /// that many intervals, and the server's track of the player stands, then catches up,
    /// which its proxies show. Sent with each move, a burst takes that many moves instead.
    /// Links that lose independently keep `send_interval`.
    pub every_move_above_runs: f64,
    /// Squared distance between the client's and the server's end position above which the
    /// client is corrected, m² (default 0.0003, UE's 3 cm²).
    pub max_position_error_sq: f32,
    /// Longest move accepted, seconds (default 0.125).
    pub max_move_delta: f64,
    /// Spacing of corrections.
    pub throttle: CorrectionThrottle,
    /// How the client hides a correction's jump.
    pub smoothing: CorrectionSmoothing,
    /// Seconds between two batched acknowledgements (default 0.1).
    pub ack_interval: f64,
    /// Speed-hack detection and resolution (on by default).
    pub time_discrepancy: TimeDiscrepancySettings,
    /// Whether every move is corrected while a speed hack is being resolved (default true).
    pub force_corrections_during_resolution: bool,
    /// Whether the server adopts the client's end position when it is within
    /// `max_position_error_sq` of its own (UE's `bServerAcceptClientAuthoritativePosition`;
    /// default false).
    pub accept_client_position: bool,
    /// Most new moves per second accepted from one client, sustained (default 120, twice the
    /// tick rate); bursts of up to two seconds' worth are allowed after a stall.
    pub max_moves_per_second: f64,
    /// Largest jump ahead of the last processed sequence number accepted (default 600 moves);
    /// farther is dropped.
    pub max_seq_gap: u32,
    /// How long the server waits at least for a missing move (late, or in the next messages'
    /// redundant copies) before simulating it with the next move's input, seconds (default
    /// 0.2: longer than `redundancy + 1` send intervals plus jitter). It waits longer for a
    /// client whose resend of a lost move takes longer (its round trip, jitter and two
    /// `ack_interval`s, up to 1.5 s).
    pub max_gap_wait: f64,
    /// Server: how a client's moves are played out at the pace they were made instead of a
    /// packet at a time ([`unlag_core::playout`]; on by default). Off, the server's track of a
    /// player stands still and jumps with every packet, and so do the proxies drawn from it
    /// and the hit boxes recorded from it. The price is the buffer's wait, about the spread of
    /// the moves' arrival: the player is seen that much later by the others.
    pub playout: PlayoutSettings,
    /// Whether characters block each other.
    pub character_collisions: CharacterCollisions,
    /// Server: whether a move that comes as a guess went on is taken from the guess instead of
    /// simulated again (default true): while a player's moves are a hair late the server runs
    /// its track on by a guess (see `playout`), and when the move comes with an input that
    /// moves the body alike ([`MovementModel::moved_alike`](crate::MovementModel)), from the
    /// state the guess started that step from, the guess's state is the move's. The same
    /// state, one simulation fewer; the move then meets the world as it was on the tick the
    /// guess simulated it (one or two ticks before). Never with `character_collisions:
    /// Block`, where the others move between ticks; off for a world whose solids move.
    pub take_guessed_moves: bool,
    /// Client: whether the local player's character is shown where the client predicts it
    /// (default true). False shows it where the server will have put it, one smoothed round
    /// trip late, as in a game without client-side prediction; the view's rotation stays
    /// immediate, as it does in such games. For demonstrating what prediction saves: moves are
    /// still simulated, sent and checked the same way. Can change at any time.
    pub show_prediction: bool,
    #[doc(hidden)]
    pub _model: PhantomData<fn() -> M>,
}

impl<M> Default for MovementSettings<M> {
    fn default() -> Self {
        Self {
            max_saved_moves: 256,
            redundancy: 3,
            resend_all_above_miss: 1e-4,
            send_interval: 1.0 / 30.0,
            every_move_above_runs: 0.3,
            max_position_error_sq: 0.0003,
            max_move_delta: 0.125,
            throttle: CorrectionThrottle::default(),
            smoothing: CorrectionSmoothing::default(),
            ack_interval: 0.1,
            time_discrepancy: TimeDiscrepancySettings::default(),
            force_corrections_during_resolution: true,
            accept_client_position: false,
            max_moves_per_second: 120.0,
            max_seq_gap: 600,
            max_gap_wait: 0.2,
            playout: PlayoutSettings::default(),
            character_collisions: CharacterCollisions::Ignore,
            take_guessed_moves: true,
            show_prediction: true,
            _model: PhantomData,
        }
    }
}

/// Longest [`MovementSettings::max_seq_gap`], moves: half the 16-bit sequence space, beyond
/// which a sequence number's unwrapping is ambiguous.
pub const MAX_SEQ_GAP: u32 = 16_384;

impl<M> Validate for MovementSettings<M> {
    fn validate(&self) -> Result<(), SettingsError> {
        let f = Fields::new("MovementSettings");
        f.count("max_saved_moves", self.max_saved_moves as u64, 1, 16_384)?;
        let most = crate::MAX_MOVES_PER_MESSAGE as u64;
        f.count("redundancy", self.redundancy as u64, 0, most)?;
        f.at_least("resend_all_above_miss", self.resend_all_above_miss, 0.0, "")?;
        f.within("send_interval", self.send_interval, 0.0, 1.0, "s")?;
        f.within(
            "every_move_above_runs",
            self.every_move_above_runs,
            0.0,
            2.0,
            "",
        )?;
        let error = f64::from(self.max_position_error_sq);
        f.within("max_position_error_sq", error, 0.0, 100.0, "m²")?;
        f.above("max_move_delta", self.max_move_delta, 0.0, 1.0, "s")?;
        f.nested("throttle", &self.throttle)?;
        f.nested("smoothing", &self.smoothing)?;
        f.above("ack_interval", self.ack_interval, 0.0, 5.0, "s")?;
        f.nested("time_discrepancy", &self.time_discrepancy)?;
        let rate = self.max_moves_per_second;
        f.above("max_moves_per_second", rate, 0.0, 10_000.0, "moves/s")?;
        f.count(
            "max_seq_gap",
            u64::from(self.max_seq_gap),
            1,
            u64::from(MAX_SEQ_GAP),
        )?;
        f.within("max_gap_wait", self.max_gap_wait, 0.0, 5.0, "s")?;
        f.nested("playout", &self.playout)
    }
}
