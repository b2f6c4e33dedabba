//! The messages of movement prediction and their compact encoding.
//!
//! - [`ServerMove`] (client → server, unordered, every frame the client simulated moves): the
//!   newest moves plus up to `redundancy` older unacknowledged ones, so a lost packet never
//!   costs a correction; the client's end position of the newest move; the last correction the
//!   client applied.
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
    /// The id of the last correction the client applied.
    pub correction_ack: u8,
}

/// Client → server: moves of model `M` (see the module docs). The payload is packed by hand,
/// newest move first, each older one written as its change from the one after it: a move whose
/// input and duration equal the next newer one's costs one byte, its header, which also holds
/// the codec's tag of what changed ([`MoveInputCodec::DELTA_TAG_BITS`](crate::MoveInputCodec)).
#[derive(Serialize, Deserialize)]
#[serde(bound = "")]
pub struct ServerMove<M> {
    payload: Vec<u8>,
    #[serde(skip)]
    _model: PhantomData<fn() -> M>,
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

const SAME_INPUT: u8 = 1;
const SAME_DT: u8 = 2;

/// The bits of a move's tag (before its shift above the two flags) that model `M`'s codec may
/// use.
fn tag_mask<M: MovementModel>() -> u8 {
    let bits = M::Input::DELTA_TAG_BITS.min(crate::model::MAX_DELTA_TAG_BITS);
    ((1u16 << bits) - 1) as u8
}

impl<M: MovementModel> ServerMove<M> {
    /// Packs `data`. Panics if it has no move, more than [`MAX_MOVES_PER_MESSAGE`], or
    /// non-consecutive sequence numbers (a bug on the sending side, not bad input).
    pub fn encode(data: &ServerMoveData<M::Input>) -> Self {
        let moves = &data.moves;
        assert!(!moves.is_empty() && moves.len() <= MAX_MOVES_PER_MESSAGE);
        assert!(moves.windows(2).all(|w| w[1].seq == w[0].seq.next()));
        let mut w = ByteWriter::new();
        let newest = moves.last().unwrap();
        w.u8(moves.len() as u8);
        w.u16(newest.seq.0);
        w.u8(data.correction_ack);
        w.zigzag(data.end.x);
        w.zigzag(data.end.y);
        w.zigzag(data.end.z);
        // Newest first, each compared with the one after it in time. The header byte holds
        // the codec's tag of what changed above its two flags: the input is written first
        // and the header set after. The newest has none (nothing after it to compare with:
        // its input and duration always follow whole).
        let mut next: Option<&WireMove<M::Input>> = None;
        for m in moves.iter().rev() {
            let same_input = next.is_some_and(|n| n.input == m.input);
            let same_dt = next.is_some_and(|n| n.dt == m.dt);
            let at = w.len();
            if next.is_some() {
                w.u8(0);
            }
            let tag = match next {
                _ if same_input => 0,
                Some(n) => {
                    let tag = m.input.encode_delta(&n.input, &mut w);
                    debug_assert!(tag <= tag_mask::<M>(), "a tag beyond DELTA_TAG_BITS");
                    tag & tag_mask::<M>()
                }
                None => {
                    m.input.encode(&mut w);
                    0
                }
            };
            if next.is_some() {
                w.set_u8(
                    at,
                    (u8::from(same_input) * SAME_INPUT)
                        | (u8::from(same_dt) * SAME_DT)
                        | (tag << 2),
                );
            }
            if !same_dt {
                w.u16(m.dt);
            }
            next = Some(m);
        }
        Self {
            payload: w.into_bytes(),
            _model: PhantomData,
        }
    }

    /// Unpacks the payload; never panics, whatever the bytes.
    pub fn decode(&self) -> Result<ServerMoveData<M::Input>, DecodeError> {
        let mut r = ByteReader::new(&self.payload);
        let count = r.u8()? as usize;
        if count == 0 || count > MAX_MOVES_PER_MESSAGE {
            return Err(DecodeError::Invalid);
        }
        let newest = Seq16(r.u16()?);
        let correction_ack = r.u8()?;
        let end = IVec3::new(r.zigzag()?, r.zigzag()?, r.zigzag()?);
        let mut moves: Vec<WireMove<M::Input>> = Vec::with_capacity(count);
        for i in 0..count {
            // (The newest move has no header: see `encode`.)
            let header = if i == 0 { 0 } else { r.u8()? };
            let tag = (header >> 2) & tag_mask::<M>();
            let same_input = header & SAME_INPUT != 0;
            if header & !(SAME_INPUT | SAME_DT | (tag_mask::<M>() << 2)) != 0
                || (same_input && tag != 0)
            {
                return Err(DecodeError::Invalid);
            }
            let input = if same_input {
                moves[i - 1].input.clone()
            } else if i == 0 {
                M::Input::decode(&mut r)?
            } else {
                M::Input::decode_delta(&moves[i - 1].input, tag, &mut r)?
            };
            let dt = if header & SAME_DT != 0 {
                moves[i - 1].dt
            } else {
                r.u16()?
            };
            moves.push(WireMove {
                seq: newest.offset(-(i as i32)),
                dt,
                input,
            });
        }
        r.finish()?;
        moves.reverse();
        Ok(ServerMoveData {
            moves,
            end,
            correction_ack,
        })
    }

    /// The packed bytes as sent, without lightyear's headers: the move count, the newest
    /// move's sequence number, the correction ack and the end position, then the moves, newest
    /// first.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// The first payload byte (the move count), if any.
    pub fn first_byte(&self) -> Option<u8> {
        self.payload.first().copied()
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
