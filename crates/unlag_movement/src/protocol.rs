//! The messages of movement prediction and their compact encoding.
//!
//! - [`ServerMove`] (client → server, unordered, every frame the client simulated moves): the
//!   newest moves plus up to `redundancy` older unacknowledged ones, so a lost packet never
//!   costs a correction; the client's end position of the newest move; the last correction the
//!   client applied, until the server has heard it. The oldest move goes as its change from a
//!   move the server is known to hold ([`ServerMoveData::base`]) once there is one.
//! - [`MoveResponse`] (server → client, sequenced): the newest move processed (an
//!   acknowledgement), and when the client was wrong, the server's whole state after that move
//!   (a correction). Acks and corrections share one sequenced message so they never overtake
//!   each other.

use crate::model::{MoveInputCodec, MovementModel};
use bevy::ecs::entity::MapEntities;
use bevy::prelude::*;
use core::marker::PhantomData;
use serde::{Deserialize, Serialize};
use unlag_core::quantize::{dequantize_location, quantize_location};
use unlag_core::{ByteReader, ByteWriter, DecodeError, Seq16};
use unlag_net::WholeBody;

/// Most moves one [`ServerMove`] may carry (new ones plus redundant copies).
///
/// 32 moves are 0.53 s at 60 moves/s: a burst of losses that long is bridged by the first
/// message through (see [`MovementSettings::resend_all_above_miss`](crate::MovementSettings)).
pub const MAX_MOVES_PER_MESSAGE: usize = 32;

/// Seconds per unit of a move's encoded `dt` (2 µs; the longest move is 131 ms).
pub const DT_UNIT: f64 = 2e-6;

/// A move's duration in [`DT_UNIT`]s: what both sides simulate with.
pub fn encode_dt(dt: f64) -> u16 {
    (dt / DT_UNIT).round().clamp(0.0, f64::from(u16::MAX)) as u16
}

/// The duration an encoded `dt` stands for, seconds.
pub fn decode_dt(code: u16) -> f64 {
    f64::from(code) * DT_UNIT
}

/// One move on the wire.
#[derive(Clone, Debug, PartialEq)]
pub struct WireMove<I> {
    /// Sequence number.
    pub seq: Seq16,
    /// Duration in [`DT_UNIT`]s.
    pub dt: u16,
    /// The (quantised) input.
    pub input: I,
}

/// The decoded content of a [`ServerMove`].
#[derive(Clone, Debug, PartialEq)]
pub struct ServerMoveData<I> {
    /// Moves, oldest first, with consecutive sequence numbers.
    pub moves: Vec<WireMove<I>>,
    /// The client's position after the newest move, whole centimetres.
    pub end: IVec3,
    /// The id of the last correction the client applied, while it states it: from the
    /// correction until the server is known to have heard it (a message that stated it was
    /// acknowledged by the server's transport). `None`: not stated; the server takes the
    /// reports from the first message that stated a pending correction's id on as made after
    /// that correction.
    pub correction_ack: Option<u8>,
    /// A move the server holds (the newest of a message its transport acknowledged), older
    /// than the newest by 1 to [`MAX_BASE_AGE`] moves: the oldest move is written as its
    /// change from this one (a turn of the view in a byte or two, the duration not at all)
    /// where it would otherwise go whole (9 bytes for a character). `None`: written whole.
    pub base: Option<WireMove<I>>,
}

/// Client → server: moves of model `M` (see the module docs). The payload is packed by hand,
/// oldest move first, each newer one written as its change from the one before it: a move whose
/// input and duration equal the one before's costs one byte, its header, which also holds
/// the codec's tag of what changed ([`MoveInputCodec::DELTA_TAG_BITS`](crate::MoveInputCodec)).
/// The oldest goes whole, or as its change from [`ServerMoveData::base`] (mostly the move just
/// before it: the moves a message carries are those after the newest the server is known to
/// have). It goes on the wire as its payload alone ([`WholeBody`]: lightyear states its
/// length); it is decoded where the server's record of the moves it took is at hand
/// ([`ServerMove::decode_with`]).
pub struct ServerMove<M> {
    payload: Vec<u8>,
    _model: PhantomData<fn() -> M>,
}

impl<M> WholeBody for ServerMove<M> {
    fn body(&self) -> std::borrow::Cow<'_, [u8]> {
        std::borrow::Cow::Borrowed(&self.payload)
    }

    /// Any bytes: they are read by [`ServerMove::decode_with`] (refused there, and counted,
    /// when they do not decode).
    fn from_body(bytes: &[u8]) -> Result<Self, DecodeError> {
        Ok(Self {
            payload: bytes.to_vec(),
            _model: PhantomData,
        })
    }
}

impl<M> Clone for ServerMove<M> {
    fn clone(&self) -> Self {
        Self {
            payload: self.payload.clone(),
            _model: PhantomData,
        }
    }
}

impl<M> core::fmt::Debug for ServerMove<M> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "ServerMove({} bytes)", self.payload.len())
    }
}

/// Most moves a [`ServerMoveData::base`] may be older than the newest: the server keeps the
/// moves it took for [`HELD_MOVES_KEPT`] sequence numbers, so a message may come that many
/// less this late (2.1 s at 60 moves/s) and still find its base.
pub const MAX_BASE_AGE: u16 = 128;

/// How many of the newest sequence numbers the server keeps the moves it took of (their
/// input and duration, what a [`ServerMoveData::base`] names).
pub const HELD_MOVES_KEPT: usize = 256;

const SAME_INPUT: u8 = 1;
const SAME_DT: u8 = 2;

/// The first byte: the move count in its low six bits, then what follows the newest move's
/// sequence number.
const COUNT_BITS: u8 = 0x3F;
/// The base's age (before the newest move) follows in one byte, and the oldest move is written
/// against the base.
const HAS_BASE: u8 = 0x40;
/// The correction ack follows (one byte).
const HAS_CORRECTION_ACK: u8 = 0x80;

/// The bits of a move's tag (before its shift above the two flags) that model `M`'s codec may
/// use.
fn tag_mask<M: MovementModel>() -> u8 {
    let bits = M::Input::DELTA_TAG_BITS.min(crate::model::MAX_DELTA_TAG_BITS);
    ((1u16 << bits) - 1) as u8
}

/// Writes move `m` as its change from `reference`: its header (what stayed the same, the
/// codec's tag of what changed), then the change and the duration unless the same.
fn write_change<M: MovementModel>(
    w: &mut ByteWriter,
    m: &WireMove<M::Input>,
    reference: &WireMove<M::Input>,
) {
    let same_input = reference.input == m.input;
    let same_dt = reference.dt == m.dt;
    let at = w.len();
    w.u8(0);
    let tag = if same_input {
        0
    } else {
        let tag = m.input.encode_delta(&reference.input, w);
        debug_assert!(tag <= tag_mask::<M>(), "a tag beyond DELTA_TAG_BITS");
        tag & tag_mask::<M>()
    };
    w.set_u8(
        at,
        (u8::from(same_input) * SAME_INPUT) | (u8::from(same_dt) * SAME_DT) | (tag << 2),
    );
    if !same_dt {
        w.u16(m.dt);
    }
}

/// Reads a move's input and duration written by [`write_change`] against `reference`.
fn read_change<M: MovementModel>(
    r: &mut ByteReader,
    reference: &WireMove<M::Input>,
) -> Result<(M::Input, u16), DecodeError> {
    let header = r.u8()?;
    let tag = (header >> 2) & tag_mask::<M>();
    let same_input = header & SAME_INPUT != 0;
    if header & !(SAME_INPUT | SAME_DT | (tag_mask::<M>() << 2)) != 0 || (same_input && tag != 0) {
        return Err(DecodeError::Invalid);
    }
    let input = if same_input {
        reference.input.clone()
    } else {
        M::Input::decode_delta(&reference.input, tag, r)?
    };
    let dt = if header & SAME_DT != 0 {
        reference.dt
    } else {
        r.u16()?
    };
    Ok((input, dt))
}

impl<M: MovementModel> ServerMove<M> {
    /// Packs `data`. Panics if it has no move, more than [`MAX_MOVES_PER_MESSAGE`], or
    /// non-consecutive sequence numbers (a bug on the sending side, not bad input). A `base`
    /// not 1 to [`MAX_BASE_AGE`] moves older than the newest is left out (the oldest goes
    /// whole).
    pub fn encode(data: &ServerMoveData<M::Input>) -> Self {
        let moves = &data.moves;
        assert!(!moves.is_empty() && moves.len() <= MAX_MOVES_PER_MESSAGE);
        assert!(moves.windows(2).all(|w| w[1].seq == w[0].seq.next()));
        let mut w = ByteWriter::new();
        let newest = moves.last().unwrap();
        let base = data
            .base
            .as_ref()
            .filter(|b| (1..=i32::from(MAX_BASE_AGE)).contains(&newest.seq.diff(b.seq)));
        w.u8(moves.len() as u8
            | if base.is_some() { HAS_BASE } else { 0 }
            | if data.correction_ack.is_some() {
                HAS_CORRECTION_ACK
            } else {
                0
            });
        w.u16(newest.seq.0);
        if let Some(b) = base {
            w.u8(newest.seq.diff(b.seq) as u8);
        }
        if let Some(ack) = data.correction_ack {
            w.u8(ack);
        }
        w.zigzag(data.end.x);
        w.zigzag(data.end.y);
        w.zigzag(data.end.z);
        // Oldest first, each against the one before it in time: the oldest against the base,
        // or whole. (Each change spans one move, a turn of the view in a byte; the oldest's
        // base is mostly the move just before it.)
        let mut before = base;
        for m in moves {
            match before {
                Some(b) => write_change::<M>(&mut w, m, b),
                None => {
                    m.input.encode(&mut w);
                    w.u16(m.dt);
                }
            }
            before = Some(m);
        }
        Self {
            payload: w.into_bytes(),
            _model: PhantomData,
        }
    }

    /// Unpacks a payload whose oldest move is written whole; never panics, whatever the bytes.
    /// One written against a base is refused (see [`ServerMove::decode_with`]).
    pub fn decode(&self) -> Result<ServerMoveData<M::Input>, DecodeError> {
        self.decode_with(|_| None)
    }

    /// The sequence number of the move the oldest is written against, if it is (without
    /// reading further: what a refusal of the base names).
    pub fn base_seq(&self) -> Option<Seq16> {
        let mut r = ByteReader::new(&self.payload);
        let head = r.u8().ok()?;
        let newest = Seq16(r.u16().ok()?);
        (head & HAS_BASE != 0).then(|| r.u8().ok().map(|age| newest.offset(-i32::from(age))))?
    }

    /// Unpacks the payload, looking up a base in `held` (the server's record of the moves it
    /// took: their input and duration, by sequence number); never panics, whatever the bytes.
    /// A base `held` does not know is refused.
    pub fn decode_with(
        &self,
        held: impl FnOnce(Seq16) -> Option<(M::Input, u16)>,
    ) -> Result<ServerMoveData<M::Input>, DecodeError> {
        let mut r = ByteReader::new(&self.payload);
        let head = r.u8()?;
        let count = (head & COUNT_BITS) as usize;
        if count == 0 || count > MAX_MOVES_PER_MESSAGE {
            return Err(DecodeError::Invalid);
        }
        let newest = Seq16(r.u16()?);
        let base_seq = if head & HAS_BASE != 0 {
            let age = r.u8()?;
            if age == 0 || u16::from(age) > MAX_BASE_AGE {
                return Err(DecodeError::Invalid);
            }
            Some(newest.offset(-i32::from(age)))
        } else {
            None
        };
        let correction_ack = if head & HAS_CORRECTION_ACK != 0 {
            Some(r.u8()?)
        } else {
            None
        };
        let end = IVec3::new(r.zigzag()?, r.zigzag()?, r.zigzag()?);
        let base = match base_seq {
            Some(seq) => {
                let (input, dt) = held(seq).ok_or(DecodeError::Invalid)?;
                Some(WireMove { seq, dt, input })
            }
            None => None,
        };
        let mut moves: Vec<WireMove<M::Input>> = Vec::with_capacity(count);
        let oldest = newest.offset(1 - count as i32);
        for i in 0..count {
            let (input, dt) = match moves.last().or(base.as_ref()) {
                Some(before) => read_change::<M>(&mut r, before)?,
                None => (M::Input::decode(&mut r)?, r.u16()?),
            };
            moves.push(WireMove {
                seq: oldest.offset(i as i32),
                dt,
                input,
            });
        }
        r.finish()?;
        Ok(ServerMoveData {
            moves,
            end,
            correction_ack,
            base,
        })
    }

    /// The packed bytes as sent, without lightyear's headers: the move count (and what
    /// follows), the newest move's sequence number, the base's age and the correction ack when
    /// present, and the end position, then the moves, oldest first.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// The first payload byte (the move count in its low six bits, and whether a base and a
    /// correction ack follow), if any.
    pub fn first_byte(&self) -> Option<u8> {
        self.payload.first().copied()
    }

    /// The move count the first byte announces, if any (it may exceed
    /// [`MAX_MOVES_PER_MESSAGE`]: such a message does not decode).
    pub fn announced_count(&self) -> Option<usize> {
        self.first_byte().map(|b| usize::from(b & COUNT_BITS))
    }

    /// Encoded size, bytes (without lightyear's headers).
    pub fn len(&self) -> usize {
        self.payload.len()
    }

    /// Whether the payload is empty (never, for an encoded message).
    pub fn is_empty(&self) -> bool {
        self.payload.is_empty()
    }

    /// A message with raw bytes (for tests of malformed input).
    pub fn from_raw(payload: Vec<u8>) -> Self {
        Self {
            payload,
            _model: PhantomData,
        }
    }
}

/// The client's end position, encoded to the centimetre.
pub fn encode_end(position: Vec3) -> IVec3 {
    quantize_location(position)
}

/// The end position an encoded one stands for.
pub fn decode_end(end: IVec3) -> Vec3 {
    dequantize_location(end)
}

/// A correction: the server's whole state after move `seq`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(bound = "")]
pub struct Correction<M: MovementModel> {
    /// Id the client echoes in [`ServerMoveData::correction_ack`] once applied.
    pub id: u8,
    /// The server's state after the acknowledged move.
    pub state: M::State,
}

/// Server → client: acknowledgement of moves up to `ack`, with a correction when the client
/// was wrong (see the module docs).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(bound = "")]
pub struct MoveResponse<M: MovementModel> {
    /// The character (mapped to the client's entity on arrival).
    #[serde(with = "unlag_net::wire_entity")]
    pub entity: Entity,
    /// The newest move the server processed.
    pub ack: Seq16,
    /// The newest move up to which every move has arrived at the server (`ack` or later: moves
    /// may wait in the playout). The client sends the ones after it again when they are
    /// overdue.
    pub received: Seq16,
    /// The server's state after `ack`, when the client must be corrected.
    pub correction: Option<Correction<M>>,
}

impl<M: MovementModel> MapEntities for MoveResponse<M> {
    fn map_entities<E: EntityMapper>(&mut self, mapper: &mut E) {
        self.entity = mapper.get_mapped(self.entity);
    }
}
