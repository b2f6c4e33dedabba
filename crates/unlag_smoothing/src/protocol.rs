//! [`ProxyUpdates`]: the server's states of simulated proxies, one message per client per tick
//! with anything due.

use bevy::ecs::entity::MapEntities;
use bevy::prelude::*;
use serde::{Deserialize, Serialize};
use unlag_core::ProxyState;
use unlag_net::wire_entity::{Entities, EntityTicks};
use unlag_net::{MessageEncodeError, MessageWriter, wire_size, write_postcard};

/// Flag bit of [`WireProxyState::flags`] marking a teleport.
pub const TELEPORT_BIT: u8 = 0x80;

/// One proxy's state on the wire: position to the millimetre (a centimetre grid would add
/// 4 mm RMS of noise, more than Hermite's whole error at 20 Hz), rotation in 40 bits
/// ([`unlag_core::quantize::quantize_rotation`]: within 0.063°, half a millimetre at a hit
/// box's reach), velocity in cm/s, game flags (the top bit marks a teleport). A character's
/// state comes to about 12–18 bytes once encoded: its entity in 2 ([`unlag_net::wire_entity`]:
/// Bevy's own form took 5), an upright rotation in 2 (else 5), position (3–9) and velocity
/// (3–6) as zigzag varints, flags 1.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct WireProxyState {
    /// The entity (mapped to the client's on arrival).
    #[serde(with = "unlag_net::wire_entity")]
    pub entity: Entity,
    /// Position, whole millimetres.
    pub position: [i32; 3],
    /// Rotation, "smallest three" in 40 bits
    /// ([`unlag_core::quantize::quantize_rotation`]); any bytes stand for a unit rotation. On
    /// the wire in 2 bytes when upright, else 5 ([`unlag_core::quantize::rotation_to_wire`]).
    #[serde(with = "wire_rotation")]
    pub rotation: [u8; unlag_core::quantize::ROTATION_BYTES],
    /// Velocity, cm/s.
    pub velocity: [i16; 3],
    /// [`ProxyFlags`](crate::ProxyFlags) bits 0–6, and the teleport bit (`TELEPORT_BIT`, 0x80).
    pub flags: u8,
}

/// [`WireProxyState::rotation`] on the wire: [`unlag_core::quantize::rotation_to_wire`]'s
/// bytes (human-readable formats: the five bytes).
mod wire_rotation {
    use serde::de::{self, SeqAccess, Visitor};
    use serde::ser::SerializeTuple;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use unlag_core::quantize::{
        ROTATION_BYTES, rotation_from_wire, rotation_to_wire, rotation_wire_len,
    };

    /// Writes the rotation's wire form (2 or 5 bytes).
    pub fn serialize<S: Serializer>(
        bytes: &[u8; ROTATION_BYTES],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            return bytes.serialize(serializer);
        }
        let (wire, len) = rotation_to_wire(*bytes);
        // (A tuple's length is not on the wire: its first byte tells how many follow.)
        let mut tuple = serializer.serialize_tuple(len)?;
        for byte in &wire[..len] {
            tuple.serialize_element(byte)?;
        }
        tuple.end()
    }

    /// Reads a rotation written by [`serialize`], failing on forms no encoder writes.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<[u8; ROTATION_BYTES], D::Error> {
        if deserializer.is_human_readable() {
            return <[u8; ROTATION_BYTES]>::deserialize(deserializer);
        }
        /// Reads the first byte, then as many as it says.
        struct Wire;
        impl<'de> Visitor<'de> for Wire {
            type Value = [u8; ROTATION_BYTES];

            fn expecting(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
                f.write_str("a rotation's wire bytes")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut wire = [0; ROTATION_BYTES];
                // (Its length is known once its first byte is read.)
                let mut len = 1;
                let mut read = 0;
                while read < len {
                    wire[read] = seq
                        .next_element()?
                        .ok_or_else(|| de::Error::invalid_length(read, &self))?;
                    if read == 0 {
                        len = rotation_wire_len(wire[0]).map_err(de::Error::custom)?;
                    }
                    read += 1;
                }
                rotation_from_wire(&wire[..len]).map_err(de::Error::custom)
            }
        }
        deserializer.deserialize_tuple(ROTATION_BYTES, Wire)
    }
}

impl WireProxyState {
    /// Quantises a pose.
    pub fn new(
        entity: Entity,
        position: Vec3,
        rotation: Quat,
        velocity: Vec3,
        flags: u8,
        teleport: bool,
    ) -> Self {
        let mm = |x: f32| {
            if x.is_finite() {
                (x * 1000.0).round().clamp(i32::MIN as f32, i32::MAX as f32) as i32
            } else {
                0
            }
        };
        let cms = |x: f32| (x * 100.0).round().clamp(-32_767.0, 32_767.0) as i16;
        Self {
            entity,
            position: [mm(position.x), mm(position.y), mm(position.z)],
            rotation: unlag_core::quantize::quantize_rotation(rotation),
            velocity: [cms(velocity.x), cms(velocity.y), cms(velocity.z)],
            flags: (flags & !TELEPORT_BIT) | if teleport { TELEPORT_BIT } else { 0 },
        }
    }

    /// The state it stands for, at server `tick` and `time` seconds (every field finite, the
    /// rotation a unit one, whatever the bytes).
    pub fn to_state(&self, tick: u32, time: f64) -> ProxyState {
        let rotation = unlag_core::quantize::dequantize_rotation(self.rotation);
        ProxyState {
            tick,
            time,
            position: IVec3::from_array(self.position).as_vec3() / 1000.0,
            rotation,
            velocity: Vec3::new(
                f32::from(self.velocity[0]),
                f32::from(self.velocity[1]),
                f32::from(self.velocity[2]),
            ) / 100.0,
            flags: self.flags & !TELEPORT_BIT,
            teleport: self.flags & TELEPORT_BIT != 0,
            off_grid: false,
        }
    }
}

/// The oldest baseline a [`DeltaProxyState`] is sent against, seconds before its own state:
/// the server keeps its proxies' states that long ([`unlag_net::MAX_REPORTED_DELAY`]), and a
/// client keeps them [`BASELINE_KEPT`] seconds.
pub const MAX_BASELINE_AGE: f64 = 1.0;

/// How long a client keeps each proxy's states to decode [`DeltaProxyState`]s against, seconds
/// before the newest it has: longer than [`MAX_BASELINE_AGE`], with room for a late message.
pub const BASELINE_KEPT: f64 = 1.5;

/// One proxy's state as its difference from an older state of it that the client is known to
/// have (its baseline: one the server sent it in a [`StatesKind::Due`] message whose packets
/// the client acknowledged). About 3-10 bytes where a [`WireProxyState`] takes 12-18: the
/// position as its difference from the baseline's run on at the mean of the two velocities
/// ([`unlag_core::quantize::run_on_mm`]; a proxy keeping its course or its acceleration costs
/// a byte and a half), the velocity, the rotation and the flags only when they changed (a
/// teleport goes as a full state).
///
/// On the wire, in a [`ProxyUpdates`]: the entity (the first of a message's deltas as its
/// index, the others as the difference from the previous one's, zigzag: a byte where the
/// entities are within 31 of each other; a varint, and the generation when not 0, as
/// [`unlag_net::wire_entity`] writes them), a head byte (bit 7: the velocity follows; bit 6:
/// the rotation follows; bit 5: the flags follow; bits 0-4: the ticks back to the baseline,
/// 1-31, or 0 when a varint of them follows), the position's differences (mm) and, when
/// present, the velocity's (cm/s) and the rotation's turn bit-packed into whole bytes (each
/// triple three 4-bit widths and three zigzagged values of those widths: `pack_triple`; a
/// turn a 4-bit width and its zigzagged codes, [`DeltaRotation::Turn`], or the width 15 when
/// the whole rotation follows), then a whole rotation's wire form
/// ([`unlag_core::quantize::rotation_to_wire`]) and the flags (a byte) when present.
/// All but the entity is encoded once per state and baseline for every client
/// ([`EncodedDeltas`]); the entity, which depends on the message's other deltas, as each
/// message is written.
#[derive(Clone, Debug, PartialEq)]
pub struct DeltaProxyState {
    /// The entity (mapped to the client's on arrival).
    pub entity: Entity,
    /// Ticks from the baseline's to this state's (at least 1).
    pub back: u32,
    /// Position less the baseline's run on over `back` ticks at the mean of its velocity and
    /// this state's, mm.
    pub position: [i32; 3],
    /// Velocity less the baseline's, cm/s; `None` when the same.
    pub velocity: Option<[i32; 3]>,
    /// The rotation ([`WireProxyState::rotation`]) as a turn from the baseline's when both
    /// are upright, else whole; `None` when the baseline's.
    pub rotation: Option<DeltaRotation>,
    /// The movement flags ([`WireProxyState::flags`], never the teleport bit); `None` when the
    /// baseline's.
    pub flags: Option<u8>,
}

/// How a [`DeltaProxyState`]'s rotation differs from its baseline's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeltaRotation {
    /// Both upright: the rotation whose [`unlag_core::quantize::yaw_code`] is the baseline's
    /// this many codes on ([`unlag_core::quantize::yaw_after`]; about 1 500 codes a radian
    /// near facing +z). Written the shorter way round (−4095 to 4094), in as few bits as it
    /// needs beside the position's: a character turning 0.04 rad between its baseline and
    /// this state takes 11 bits where the rotation's upright form takes 16.
    Turn(i32),
    /// Any rotation, whole ([`WireProxyState::rotation`]).
    Whole([u8; unlag_core::quantize::ROTATION_BYTES]),
}

/// [`DeltaProxyState`]'s head byte: the velocity follows.
const DELTA_VELOCITY: u8 = 0x80;
/// [`DeltaProxyState`]'s head byte: the rotation follows.
const DELTA_ROTATION: u8 = 0x40;
/// [`DeltaProxyState`]'s head byte: the flags follow.
const DELTA_FLAGS: u8 = 0x20;
/// [`DeltaProxyState`]'s head byte: the ticks back, or 0 when a varint of them follows.
const DELTA_BACK: u8 = 0x1f;

impl DeltaProxyState {
    /// `state` against `baseline`, `back` ticks of `tick_us` µs before it
    /// ([`unlag_core::quantize::tick_micros`]); `None` where only a full state will do: a
    /// teleport, `back` 0, or a difference that overflows.
    pub fn between(
        baseline: &WireProxyState,
        state: &WireProxyState,
        back: u32,
        tick_us: u32,
    ) -> Option<Self> {
        if back == 0 || state.flags & TELEPORT_BIT != 0 {
            return None;
        }
        let flags = (state.flags != baseline.flags & !TELEPORT_BIT).then_some(state.flags);
        let run_on = unlag_core::quantize::run_on_mm(
            baseline.position,
            baseline.velocity,
            state.velocity,
            back,
            tick_us,
        );
        let mut position = [0; 3];
        for i in 0..3 {
            position[i] = i32::try_from(i64::from(state.position[i]) - run_on[i]).ok()?;
        }
        let velocity = (state.velocity != baseline.velocity).then(|| {
            core::array::from_fn(|i| i32::from(state.velocity[i]) - i32::from(baseline.velocity[i]))
        });
        let rotation = (state.rotation != baseline.rotation).then(|| {
            use unlag_core::quantize::{yaw_code, yaw_steps};
            match (yaw_code(baseline.rotation), yaw_code(state.rotation)) {
                (Some(from), Some(to)) => DeltaRotation::Turn(yaw_steps(from, to)),
                _ => DeltaRotation::Whole(state.rotation),
            }
        });
        Some(Self {
            entity: state.entity,
            back,
            position,
            velocity,
            rotation,
            flags,
        })
    }

    /// The state it stands for against `baseline` (the client's copy of the proxy's state
    /// `back` ticks before), `tick_us` as it was encoded with; `None` for differences no
    /// encoder writes (a velocity off its range, a position off `i32`'s, flags with the
    /// teleport bit, a turn from a baseline that is not upright).
    pub fn apply(&self, baseline: &WireProxyState, tick_us: u32) -> Option<WireProxyState> {
        if self.flags.is_some_and(|f| f & TELEPORT_BIT != 0) {
            return None;
        }
        let velocity = match self.velocity {
            None => baseline.velocity,
            Some(d) => {
                let mut v = [0; 3];
                for i in 0..3 {
                    v[i] =
                        i16::try_from(i32::from(baseline.velocity[i]).checked_add(d[i])?).ok()?;
                }
                v
            }
        };
        let run_on = unlag_core::quantize::run_on_mm(
            baseline.position,
            baseline.velocity,
            velocity,
            self.back,
            tick_us,
        );
        let mut position = [0; 3];
        for i in 0..3 {
            position[i] =
                i32::try_from(run_on[i].checked_add(i64::from(self.position[i]))?).ok()?;
        }
        use unlag_core::quantize::{rotation_from_yaw_code, yaw_after, yaw_code};
        let rotation = match self.rotation {
            None => baseline.rotation,
            Some(DeltaRotation::Whole(r)) => r,
            Some(DeltaRotation::Turn(steps)) => {
                rotation_from_yaw_code(yaw_after(yaw_code(baseline.rotation)?, steps))
            }
        };
        Some(WireProxyState {
            entity: self.entity,
            position,
            rotation,
            velocity,
            flags: self.flags.unwrap_or(baseline.flags & !TELEPORT_BIT),
        })
    }

    /// Appends its body (all but the entity, which a message writes against the entity
    /// before it) to `bytes`, as it goes on the wire.
    pub fn encode_body(&self, bytes: Vec<u8>) -> Vec<u8> {
        postcard::to_extend(&Body(self), bytes).expect("a delta encodes")
    }
}

/// A delta state's entity after `prev`'s (the previous delta's index in the message, if any)
/// and its body: what one delta takes in a message ([`DeltaProxyState`]'s wire form).
struct Stepped<'a> {
    prev: Option<u32>,
    delta: &'a DeltaProxyState,
}

/// The entity head of `entity` after the previous delta's index `prev`: the index itself for
/// the first ([`unlag_core::entity_head`]), else its step from `prev` (zigzag), shifted
/// one up, the low bit telling that a generation follows.
fn step_head(prev: Option<u32>, entity: Entity) -> u64 {
    let (index, generation) = unlag_net::wire_entity::parts(entity);
    match prev {
        None => unlag_core::entity_head(index, generation),
        Some(prev) => {
            let step = i64::from(index) - i64::from(prev);
            (unlag_core::zigzag64(step) << 1) | u64::from(generation != 0)
        }
    }
}

/// The index a [`step_head`] after `prev` holds, and whether a generation follows; `None` for
/// one no entity can have.
fn index_from_step(prev: Option<u32>, head: u64) -> Option<(u32, bool)> {
    let Some(prev) = prev else {
        return unlag_core::entity_from_head(head).ok();
    };
    let step = unlag_core::unzigzag64(head >> 1);
    let index = i64::from(prev).checked_add(step)?;
    let index = u32::try_from(index).ok().filter(|i| *i != u32::MAX)?;
    Some((index, head & 1 != 0))
}

/// Writes a delta's entity head (and generation, when not 0) after `prev`.
fn serialize_step<T: serde::ser::SerializeTuple>(
    tuple: &mut T,
    prev: Option<u32>,
    entity: Entity,
) -> Result<(), T::Error> {
    tuple.serialize_element(&step_head(prev, entity))?;
    let (_, generation) = unlag_net::wire_entity::parts(entity);
    if generation != 0 {
        tuple.serialize_element(&generation)?;
    }
    Ok(())
}

/// Writes a delta's body (all but its entity) into `tuple`.
fn serialize_body<T: serde::ser::SerializeTuple>(
    tuple: &mut T,
    delta: &DeltaProxyState,
) -> Result<(), T::Error> {
    let short = u8::try_from(delta.back).ok().filter(|b| *b <= DELTA_BACK);
    let bit = |present: bool, bit: u8| if present { bit } else { 0 };
    let head = short.unwrap_or(0)
        | bit(delta.velocity.is_some(), DELTA_VELOCITY)
        | bit(delta.rotation.is_some(), DELTA_ROTATION)
        | bit(delta.flags.is_some(), DELTA_FLAGS);
    tuple.serialize_element(&head)?;
    if short.is_none() {
        tuple.serialize_element(&delta.back)?;
    }
    // The position's differences and the velocity's, bit-packed (see [`pack_triple`]), and a
    // turn's codes or the escape that says the whole rotation follows the bits.
    let mut bits = BitWriter::default();
    pack_triple(&mut bits, delta.position);
    if let Some(v) = delta.velocity {
        pack_triple(&mut bits, v);
    }
    match delta.rotation {
        None => {}
        Some(DeltaRotation::Turn(steps)) => {
            use unlag_core::quantize::{yaw_after, yaw_steps};
            let z = unlag_core::zigzag32(yaw_steps(0, yaw_after(0, steps)));
            let code = width_code(z);
            bits.put(u64::from(code), 4);
            bits.put(u64::from(z), code);
        }
        Some(DeltaRotation::Whole(_)) => bits.put(u64::from(WIDE_ESCAPE), 4),
    }
    for byte in bits.bytes() {
        tuple.serialize_element(byte)?;
    }
    if let Some(DeltaRotation::Whole(r)) = delta.rotation {
        tuple.serialize_element(&Rotation(r))?;
    }
    if let Some(f) = &delta.flags {
        tuple.serialize_element(f)?;
    }
    Ok(())
}

/// The most elements a delta's tuple holds: entity head, generation, head byte, back, the
/// packed bits' bytes (at most 30: two triples of 3 × 4 + 3 × 32 bits, a turn's 4 + 13),
/// rotation, flags. (A tuple's length is not on the wire: the heads tell what follows.)
const DELTA_ELEMENTS: usize = 4 + 30 + 2;

/// Bits written least significant first into bytes, each byte filled from its lowest bit, on
/// the stack: a delta's bits are at most 30 bytes ([`DELTA_ELEMENTS`]), and a server packs
/// every proxy's delta every interval (a growing vector was a few allocations each).
#[derive(Default)]
struct BitWriter {
    bytes: [u8; BIT_WRITER_BYTES],
    /// Bits written.
    len: u32,
}

/// What a [`BitWriter`] holds, bytes: more than a delta's bits can take.
const BIT_WRITER_BYTES: usize = 32;

impl BitWriter {
    /// Writes the low `width` bits of `value`.
    fn put(&mut self, value: u64, width: u32) {
        for i in 0..width {
            if (value >> i) & 1 == 1 {
                // (In bounds: a delta writes at most 235 bits, see `DELTA_ELEMENTS`.)
                self.bytes[(self.len / 8) as usize] |= 1 << (self.len % 8);
            }
            self.len += 1;
        }
    }

    /// The bytes written, the last one's unused high bits zero.
    fn bytes(&self) -> &[u8] {
        &self.bytes[..self.len.div_ceil(8) as usize]
    }
}

/// Reads what a [`BitWriter`] wrote, pulling its bytes one at a time from `next`.
struct BitReader<F> {
    next: F,
    byte: u8,
    /// Bits read.
    len: u32,
}

impl<E, F: FnMut() -> Result<u8, E>> BitReader<F> {
    /// Reads `width` bits (at most 64).
    fn get(&mut self, width: u32) -> Result<u64, E> {
        let mut value = 0u64;
        for i in 0..width {
            if self.len.is_multiple_of(8) {
                self.byte = (self.next)()?;
            }
            value |= u64::from((self.byte >> (self.len % 8)) & 1) << i;
            self.len += 1;
        }
        Ok(value)
    }
}

/// A packed difference's width code for the zigzagged value `z`: its bit length up to
/// [`WIDEST_PACKED`], else [`WIDE_ESCAPE`] (32 bits follow).
fn width_code(z: u32) -> u32 {
    let bits = 32 - z.leading_zeros();
    if bits <= WIDEST_PACKED {
        bits
    } else {
        WIDE_ESCAPE
    }
}

/// The widest a packed difference is written at its own length, bits: 14 (±8 m of position in
/// mm, ±81 m/s of velocity in cm/s).
const WIDEST_PACKED: u32 = 14;
/// The width code of a difference written in 32 bits.
const WIDE_ESCAPE: u32 = 15;

/// Writes three differences (a position's in mm, or a velocity's in cm/s) as three 4-bit width
/// codes, then each zigzagged in that many bits: one byte-rounding for all of a delta's
/// differences rather than one per varint, and no bits for an axis that did not change (a
/// walker's height, its vertical speed). A steady walker's position takes 12 bits where three
/// varints took 24; a turning runner's position and velocity about 62 where varints took 80.
fn pack_triple(bits: &mut BitWriter, values: [i32; 3]) {
    let z = values.map(unlag_core::zigzag32);
    let codes = z.map(width_code);
    for code in codes {
        bits.put(u64::from(code), 4);
    }
    for (z, code) in z.into_iter().zip(codes) {
        bits.put(u64::from(z), if code == WIDE_ESCAPE { 32 } else { code });
    }
}

/// Reads what [`pack_triple`] wrote. (A width wider than its value needs reads the same value:
/// only an encoder's choice.)
fn unpack_triple<E, F: FnMut() -> Result<u8, E>>(bits: &mut BitReader<F>) -> Result<[i32; 3], E> {
    let mut codes = [0u32; 3];
    for code in &mut codes {
        *code = bits.get(4)? as u32;
    }
    let mut values = [0i32; 3];
    for (value, code) in values.iter_mut().zip(codes) {
        let z = bits.get(if code == WIDE_ESCAPE { 32 } else { code })? as u32;
        *value = unlag_core::unzigzag32(z);
    }
    Ok(values)
}

/// A delta's body alone (its entity written by the message, [`EncodedDeltas`]).
struct Body<'a>(&'a DeltaProxyState);

impl Serialize for Body<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeTuple;
        let mut tuple = serializer.serialize_tuple(DELTA_ELEMENTS)?;
        serialize_body(&mut tuple, self.0)?;
        tuple.end()
    }
}

impl Serialize for Stepped<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeTuple;
        let mut tuple = serializer.serialize_tuple(DELTA_ELEMENTS)?;
        serialize_step(&mut tuple, self.prev, self.delta.entity)?;
        serialize_body(&mut tuple, self.delta)?;
        tuple.end()
    }
}

/// A delta's rotation in its wire form ([`wire_rotation`]), both ways.
struct Rotation([u8; unlag_core::quantize::ROTATION_BYTES]);

impl Serialize for Rotation {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        wire_rotation::serialize(&self.0, s)
    }
}

impl<'de> Deserialize<'de> for Rotation {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        wire_rotation::deserialize(d).map(Rotation)
    }
}

/// Reads a delta's body (what [`serialize_body`] writes) from `seq`, its entity `entity`.
fn read_body<'de, A: serde::de::SeqAccess<'de>>(
    seq: &mut A,
    entity: Entity,
) -> Result<DeltaProxyState, A::Error> {
    use serde::de;
    let missing = || de::Error::custom("a delta proxy state cut short");
    let head: u8 = seq.next_element()?.ok_or_else(missing)?;
    let back = match head & DELTA_BACK {
        0 => seq.next_element::<u32>()?.ok_or_else(missing)?,
        b => u32::from(b),
    };
    if back == 0 {
        return Err(de::Error::custom("a delta proxy state 0 ticks back"));
    }
    let (position, velocity, turn) = {
        let mut bits = BitReader {
            next: || seq.next_element::<u8>()?.ok_or_else(missing),
            byte: 0,
            len: 0,
        };
        let position = unpack_triple(&mut bits)?;
        let velocity = if head & DELTA_VELOCITY != 0 {
            Some(unpack_triple(&mut bits)?)
        } else {
            None
        };
        // A turn's width code, then its codes; the escape: the whole rotation follows.
        let turn = if head & DELTA_ROTATION != 0 {
            match bits.get(4)? as u32 {
                WIDE_ESCAPE => None,
                code => Some(unlag_core::unzigzag32(bits.get(code)? as u32)),
            }
        } else {
            None
        };
        (position, velocity, turn)
    };
    let rotation = match (head & DELTA_ROTATION != 0, turn) {
        (false, _) => None,
        (true, Some(steps)) => Some(DeltaRotation::Turn(steps)),
        (true, None) => {
            let Rotation(r) = seq.next_element()?.ok_or_else(missing)?;
            Some(DeltaRotation::Whole(r))
        }
    };
    let flags = if head & DELTA_FLAGS != 0 {
        let f: u8 = seq.next_element()?.ok_or_else(missing)?;
        if f & TELEPORT_BIT != 0 {
            return Err(de::Error::custom(
                "a delta proxy state with the teleport bit",
            ));
        }
        Some(f)
    } else {
        None
    };
    Ok(DeltaProxyState {
        entity,
        back,
        position,
        velocity,
        rotation,
        flags,
    })
}

/// Reads one delta of a message after the previous one's index `prev` (its entity stepped).
struct SteppedSeed {
    prev: Option<u32>,
}

impl<'de> serde::de::DeserializeSeed<'de> for SteppedSeed {
    type Value = DeltaProxyState;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_tuple(DELTA_ELEMENTS, self)
    }
}

impl<'de> serde::de::Visitor<'de> for SteppedSeed {
    type Value = DeltaProxyState;

    fn expecting(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
        f.write_str("a delta proxy state")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        use serde::de::Error;
        let missing = || A::Error::custom("a delta proxy state cut short");
        let head: u64 = seq.next_element()?.ok_or_else(missing)?;
        let (index, reused) = index_from_step(self.prev, head)
            .ok_or_else(|| A::Error::custom("a delta proxy state's entity out of range"))?;
        let generation = if reused {
            let value: u64 = seq.next_element()?.ok_or_else(missing)?;
            unlag_core::entity_generation(value).map_err(A::Error::custom)?
        } else {
            0
        };
        let entity = unlag_net::wire_entity::from_parts(index, generation)
            .ok_or_else(|| A::Error::custom("invalid entity"))?;
        read_body(&mut seq, entity)
    }
}

/// A delta read by its body alone ([`EncodedDeltas::decode`] gives it its entity).
struct DeltaBodyOwned(DeltaProxyState);

impl<'de> serde::de::Deserialize<'de> for DeltaBodyOwned {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{SeqAccess, Visitor};
        /// Reads the body, its entity a placeholder.
        struct BodyVisitor;
        impl<'de> Visitor<'de> for BodyVisitor {
            type Value = DeltaBodyOwned;

            fn expecting(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
                f.write_str("a delta proxy state's body")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                read_body(&mut seq, Entity::PLACEHOLDER).map(DeltaBodyOwned)
            }
        }
        d.deserialize_tuple(DELTA_ELEMENTS, BodyVisitor)
    }
}

/// Reads a message's delta states, each entity stepped from the one before.
fn read_deltas<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<DeltaProxyState>, D::Error> {
    use serde::de::{SeqAccess, Visitor};
    /// The sequence's visitor.
    struct Deltas;
    impl<'de> Visitor<'de> for Deltas {
        type Value = Vec<DeltaProxyState>;

        fn expecting(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
            f.write_str("delta proxy states")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            // (Grown as they come: a hostile length costs nothing up front.)
            let mut deltas = Vec::new();
            let mut prev = None;
            while let Some(delta) = seq.next_element_seed(SteppedSeed { prev })? {
                prev = Some(delta.entity.index_u32());
                deltas.push(delta);
            }
            Ok(deltas)
        }
    }
    d.deserialize_seq(Deltas)
}

/// What the states of one [`ProxyUpdates`] are. On the wire the low two bits of the message's
/// head byte (0, 1, 2), whose higher bits say which of its lists follow.
#[derive(Serialize, Deserialize, Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum StatesKind {
    /// Due on their proxies' grids (their update rates').
    #[default]
    Due,
    /// Sent before: slow proxies' states go twice ([`unlag_core::repeat_after`]), and a
    /// trail's copies are older ones; their lateness is by design, not the link's.
    Repeat,
    /// Between the states of their proxies' grids, sampled the tick before they were sent:
    /// where a slow proxy's motion bent (it started, stopped, turned or jumped), so that the
    /// curve a client draws through its states follows the server's track
    /// ([`SmoothingSettings::off_grid_error`](crate::SmoothingSettings::off_grid_error)).
    /// Drawn from like any other state, but no gap to one tells its proxy's rate or a loss,
    /// and their lateness is a tick more by design.
    OffGrid,
}

/// Server → client, with a `Due` message's states: from tick `since` on, the server sends this
/// client `entity`'s states every `interval_ticks` ticks (on its grid), not at its nominal
/// rate; 0: at the nominal rate again ([`unlag_net::NetClock::send_interval`]). Told once
/// when it changes (a proxy's own rate, or the client's interest in it lowered or restored)
/// and repeated in the next few messages: a client that read the new rate only from the gaps
/// between states took a fallen rate's first gaps for lost states, and drew every proxy with
/// a delay long enough to cover them for seconds.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ProxyRate {
    /// The proxy (mapped to the client's on arrival).
    pub entity: Entity,
    /// The tick of the first state sent at this rate: the gap after it is the first of it.
    /// On the wire as the ticks back from the message's.
    pub since: u32,
    /// Ticks between its states from `since` on (the whole ticks of the interval, rounded
    /// down), or 0 for the server's nominal rate.
    pub interval_ticks: u16,
    /// Whether its states are sent twice ([`unlag_core::repeat_after`]: a proxy of a slow rate
    /// of its own); a fast proxy the client's interest reduced is not, and the client bridges
    /// a lost state with the next. On the wire the low bit of the interval's varint.
    pub repeated: bool,
}

/// Server → client: the states of the proxies due at server tick `tick`.
///
/// On the wire it is postcard's encoding of the struct's fields in order (what the client
/// decodes), whether its states come from [`states`](Self::states) or were
/// [`encoded`](Self::encoded) once for every client: those go first, and arrive in `states`.
/// `kind`, `woken`, `asleep` and `rates` go after the states as one head byte (the kind, and a
/// bit for each list that is not empty) and the lists it flags: usually the byte alone.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ProxyUpdates {
    /// The server tick the states were sampled at.
    pub tick: u32,
    /// One quantised state per proxy due at `tick` (none only when the message is there for
    /// `asleep`), and never one of an entity the receiving client controls.
    pub states: Vec<WireProxyState>,
    /// What these states are: due on their proxies' grids, sent before, or between.
    pub kind: StatesKind,
    /// The proxies whose state here is the first since they were dormant to this client
    /// (flagged a teleport too): the client starts them afresh from it, hidden until its time,
    /// even if the (reliable) notice of their going dormant has not come yet. Usually empty.
    pub woken: Vec<Entity>,
    /// The proxies the client stopped being sent lately, each with the tick it went dormant
    /// at: what the reliable [`ProxyDormancy`] says, repeated in the next few messages, so the
    /// client stops drawing a proxy whose states stopped as soon as they would have come
    /// rather than a resend later. Usually empty.
    pub asleep: Vec<(Entity, u32)>,
    /// The proxies whose rate to this client changed lately ([`ProxyRate`]; only in
    /// [`StatesKind::Due`] messages). Usually empty.
    pub rates: Vec<ProxyRate>,
    /// States as their differences from older ones the client has (only in
    /// [`StatesKind::Due`] messages): the client decodes each against its copy of the
    /// proxy's state `back` ticks before this message's, which came in an earlier `Due`
    /// message. Usually most of a message's states, once the client acknowledged some.
    pub deltas: Vec<DeltaProxyState>,
    /// States encoded once for every client (the sender's side only: they arrive in
    /// `states`), sent before those in `states`. Their entities are not mapped on the way out.
    pub encoded: EncodedStates,
    /// Delta states already encoded (the sender's side only: they arrive in `deltas`), sent
    /// before those in `deltas`. Their entities are not mapped on the way out.
    pub encoded_deltas: EncodedDeltas,
}

impl ProxyUpdates {
    /// Its states, the encoded ones (decoded) first.
    pub fn all_states(&self) -> impl Iterator<Item = WireProxyState> + '_ {
        self.encoded.decode().chain(self.states.iter().cloned())
    }

    /// How many states it carries in full.
    pub fn state_count(&self) -> usize {
        self.encoded.len() + self.states.len()
    }

    /// Its delta states, the encoded ones (decoded) first.
    pub fn all_deltas(&self) -> impl Iterator<Item = DeltaProxyState> + '_ {
        self.encoded_deltas
            .decode()
            .chain(self.deltas.iter().cloned())
    }

    /// Each delta's entity with the index of the delta before it in the message (`None` for
    /// the first): what its entity is written against.
    fn delta_entities(&self) -> impl Iterator<Item = (Option<u32>, Entity)> + '_ {
        let entities = self
            .encoded_deltas
            .entities()
            .chain(self.deltas.iter().map(|d| d.entity));
        entities.scan(None, |prev: &mut Option<u32>, entity| {
            Some((prev.replace(entity.index_u32()), entity))
        })
    }

    /// How many delta states it carries.
    pub fn delta_count(&self) -> usize {
        self.encoded_deltas.len() + self.deltas.len()
    }

    /// What follows the states on the wire: `kind`, `woken`, `asleep`, `rates`.
    fn tail(&self) -> Tail<'_> {
        Tail(self)
    }

    /// Appends what postcard writes for it to lightyear's buffer, copying the encoded states'
    /// bytes rather than encoding them again (the message's writer on the wire).
    pub fn write(&self, writer: &mut MessageWriter) -> Result<(), MessageEncodeError> {
        // (Room for the bulk at once: grown write by write, the buffer was reallocated. About
        // 16 bytes of tick, counts and tail, and 2 for each delta's entity step.)
        unlag_net::make_room(
            writer,
            16 + self.encoded.byte_len()
                + self.encoded_deltas.byte_len()
                + 2 * self.encoded_deltas.len(),
        );
        write_postcard(&(self.tick, self.state_count()), writer)?;
        self.encoded.write(writer);
        for state in &self.states {
            write_postcard(state, writer)?;
        }
        write_postcard(&self.tail(), writer)?;
        write_postcard(&self.delta_count(), writer)?;
        let mut entities = self.delta_entities();
        for i in 0..self.encoded_deltas.len() {
            let (prev, entity) = entities.next().expect("one entity a delta");
            write_postcard(&EntityStep(prev, entity), writer)?;
            writer.extend_from_slice(self.encoded_deltas.body(i));
        }
        for (delta, (prev, _)) in self.deltas.iter().zip(entities) {
            write_postcard(&Stepped { prev, delta }, writer)?;
        }
        Ok(())
    }

    /// Its size on the wire, bytes (what [`write`](Self::write) writes), without encoding
    /// its encoded states again.
    pub fn wire_size(&self) -> usize {
        wire_size(&(self.tick, self.state_count()))
            + self.encoded.byte_len()
            + self.states.iter().map(wire_size).sum::<usize>()
            + wire_size(&self.tail())
            + wire_size(&self.delta_count())
            + self
                .delta_entities()
                .map(|(prev, entity)| wire_size(&EntityStep(prev, entity)))
                .sum::<usize>()
            + self.encoded_deltas.byte_len()
            + self
                .deltas
                .iter()
                .map(|delta| wire_size(&Body(delta)))
                .sum::<usize>()
    }
}

impl Serialize for ProxyUpdates {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeSeq, SerializeStruct};
        /// The states, encoded ones first, as one sequence.
        struct States<'a>(&'a ProxyUpdates);
        impl Serialize for States<'_> {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut seq = serializer.serialize_seq(Some(self.0.state_count()))?;
                for state in self.0.all_states() {
                    seq.serialize_element(&state)?;
                }
                seq.end()
            }
        }
        /// The delta states, encoded ones first, as one sequence, each entity stepped from
        /// the one before.
        struct Deltas<'a>(&'a ProxyUpdates);
        impl Serialize for Deltas<'_> {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut seq = serializer.serialize_seq(Some(self.0.delta_count()))?;
                let mut prev = None;
                for delta in self.0.all_deltas() {
                    seq.serialize_element(&Stepped {
                        prev,
                        delta: &delta,
                    })?;
                    prev = Some(delta.entity.index_u32());
                }
                seq.end()
            }
        }
        let mut fields = serializer.serialize_struct("ProxyUpdates", 4)?;
        fields.serialize_field("tick", &self.tick)?;
        fields.serialize_field("states", &States(self))?;
        fields.serialize_field("tail", &self.tail())?;
        fields.serialize_field("deltas", &Deltas(self))?;
        fields.end()
    }
}

/// Bits of the head byte of a [`ProxyUpdates`]' tail: the kind's two, then one for each list
/// that follows (in this order).
const HEAD_KIND: u8 = 0x03;
const HEAD_WOKEN: u8 = 0x04;
const HEAD_ASLEEP: u8 = 0x08;
const HEAD_RATES: u8 = 0x10;

/// What follows a [`ProxyUpdates`]' states on the wire: a head byte (the kind and which lists
/// follow), then `woken`, `asleep` and `rates`, each only when not empty.
struct Tail<'a>(&'a ProxyUpdates);

/// A [`ProxyRate`] of a message at a tick on the wire: its entity, the ticks back from the
/// message's tick to its `since`, its interval in ticks.
struct RateOnWire<'a>(&'a ProxyRate, u32);

impl Serialize for RateOnWire<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeTuple;
        let mut tuple = serializer.serialize_tuple(3)?;
        tuple.serialize_element(&unlag_net::wire_entity::Compact(self.0.entity))?;
        tuple.serialize_element(&self.1.wrapping_sub(self.0.since))?;
        tuple.serialize_element(
            &(u32::from(self.0.interval_ticks) << 1 | u32::from(self.0.repeated)),
        )?;
        tuple.end()
    }
}

/// The rates of a message at a tick, as a sequence of [`RateOnWire`].
struct RatesOnWire<'a>(&'a [ProxyRate], u32);

impl Serialize for RatesOnWire<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|r| RateOnWire(r, self.1)))
    }
}

impl Serialize for Tail<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeTuple;
        let u = self.0;
        let kind = match u.kind {
            StatesKind::Due => 0,
            StatesKind::Repeat => 1,
            StatesKind::OffGrid => 2,
        };
        let flag = |bit: u8, on: bool| if on { bit } else { 0 };
        let head = kind
            | flag(HEAD_WOKEN, !u.woken.is_empty())
            | flag(HEAD_ASLEEP, !u.asleep.is_empty())
            | flag(HEAD_RATES, !u.rates.is_empty());
        let mut tuple = serializer.serialize_tuple(4)?;
        tuple.serialize_element(&head)?;
        if !u.woken.is_empty() {
            tuple.serialize_element(&Entities(&u.woken))?;
        }
        if !u.asleep.is_empty() {
            tuple.serialize_element(&EntityTicks(&u.asleep))?;
        }
        if !u.rates.is_empty() {
            tuple.serialize_element(&RatesOnWire(&u.rates, u.tick))?;
        }
        tuple.end()
    }
}

/// The tail read back: kind, woken, asleep, and the rates with their ticks back and their
/// interval and repeat bit as on the wire.
type TailRead = (
    StatesKind,
    Vec<Entity>,
    Vec<(Entity, u32)>,
    Vec<(Entity, u32, u32)>,
);

/// A [`Tail`] read back.
struct TailIn(TailRead);

impl<'de> Deserialize<'de> for TailIn {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{Error, SeqAccess, Visitor};
        /// The tuple's visitor.
        struct Read;
        impl<'de> Visitor<'de> for Read {
            type Value = TailRead;

            fn expecting(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
                f.write_str("a proxy update's head byte and the lists it flags")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<TailRead, A::Error> {
                let head: u8 = seq
                    .next_element()?
                    .ok_or_else(|| A::Error::invalid_length(0, &self))?;
                if head & !(HEAD_KIND | HEAD_WOKEN | HEAD_ASLEEP | HEAD_RATES) != 0 {
                    return Err(A::Error::custom(format_args!(
                        "proxy update head {head:#04x}: unknown bits"
                    )));
                }
                let kind = match head & HEAD_KIND {
                    0 => StatesKind::Due,
                    1 => StatesKind::Repeat,
                    2 => StatesKind::OffGrid,
                    _ => return Err(A::Error::custom("proxy update head: kind 3 is none")),
                };
                let missing = || A::Error::custom("proxy update head: a flagged list is missing");
                let woken = if head & HEAD_WOKEN != 0 {
                    seq.next_element::<WokenRead>()?.ok_or_else(missing)?.0
                } else {
                    Vec::new()
                };
                let asleep = if head & HEAD_ASLEEP != 0 {
                    seq.next_element::<AsleepRead>()?.ok_or_else(missing)?.0
                } else {
                    Vec::new()
                };
                let rates = if head & HEAD_RATES != 0 {
                    seq.next_element::<RatesRead>()?.ok_or_else(missing)?.0
                } else {
                    Vec::new()
                };
                Ok((kind, woken, asleep, rates))
            }
        }
        d.deserialize_tuple(4, Read).map(TailIn)
    }
}

/// `woken` read as [`unlag_net::wire_entity::vec`] writes it.
struct WokenRead(Vec<Entity>);

impl<'de> Deserialize<'de> for WokenRead {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        unlag_net::wire_entity::vec::deserialize(d).map(WokenRead)
    }
}

/// `asleep` read as [`unlag_net::wire_entity::with_tick`] writes it.
struct AsleepRead(Vec<(Entity, u32)>);

impl<'de> Deserialize<'de> for AsleepRead {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        unlag_net::wire_entity::with_tick::deserialize(d).map(AsleepRead)
    }
}

/// `rates` read as [`RatesOnWire`] writes them: (entity, ticks back, interval ticks and the
/// repeat bit).
struct RatesRead(Vec<(Entity, u32, u32)>);

impl<'de> Deserialize<'de> for RatesRead {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let rates = Vec::<(unlag_net::wire_entity::Compact, u32, u32)>::deserialize(d)?;
        Ok(RatesRead(
            rates
                .into_iter()
                .map(|(e, back, i)| (e.0, back, i))
                .collect(),
        ))
    }
}

/// `deltas` read by [`read_deltas`].
struct DeltasRead(Vec<DeltaProxyState>);

impl<'de> Deserialize<'de> for DeltasRead {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        read_deltas(d).map(DeltasRead)
    }
}

impl<'de> Deserialize<'de> for ProxyUpdates {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{Error, SeqAccess, Visitor};
        /// The struct's visitor: its fields in order.
        struct Read;
        impl<'de> Visitor<'de> for Read {
            type Value = ProxyUpdates;

            fn expecting(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
                f.write_str("a proxy update")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ProxyUpdates, A::Error> {
                let short = |i| A::Error::invalid_length(i, &"a proxy update's four fields");
                let tick: u32 = seq.next_element()?.ok_or_else(|| short(0))?;
                let states: Vec<WireProxyState> = seq.next_element()?.ok_or_else(|| short(1))?;
                let TailIn((kind, woken, asleep, rates)) =
                    seq.next_element()?.ok_or_else(|| short(2))?;
                let DeltasRead(deltas) = seq.next_element()?.ok_or_else(|| short(3))?;
                let rates = rates
                    .into_iter()
                    .map(|(entity, back, interval)| {
                        let since = tick.checked_sub(back).ok_or_else(|| {
                            A::Error::custom(format_args!(
                                "proxy rate {back} ticks back from tick {tick}"
                            ))
                        })?;
                        let interval_ticks = u16::try_from(interval >> 1).map_err(|_| {
                            A::Error::custom(format_args!("proxy rate of {} ticks", interval >> 1))
                        })?;
                        Ok(ProxyRate {
                            entity,
                            since,
                            interval_ticks,
                            repeated: interval & 1 == 1,
                        })
                    })
                    .collect::<Result<Vec<_>, A::Error>>()?;
                Ok(ProxyUpdates {
                    tick,
                    states,
                    kind,
                    woken,
                    asleep,
                    rates,
                    deltas,
                    ..Default::default()
                })
            }
        }
        d.deserialize_struct("ProxyUpdates", &["tick", "states", "tail", "deltas"], Read)
    }
}

/// Proxy states encoded once for every client that is sent them, and which of them one
/// message carries ([`ProxyUpdates::encoded`]): a server sending a tick's states to hundreds
/// of clients encodes each state once, and each client's message copies runs of those bytes,
/// instead of encoding every state again for every client (and once more to count its size).
pub type EncodedStates = unlag_net::EncodedRuns<WireProxyState>;

/// Delta states encoded for one message ([`ProxyUpdates::encoded_deltas`]): each one's body
/// (all but its entity) back to back, and its entity. A server encodes a proxy's difference
/// from one baseline once ([`DeltaProxyState::encode_body`]) and copies those bytes into the
/// message of every client that acknowledged the same baseline; the entities are written as
/// the message is, each against the one before it in that message.
///
/// Cloning one shares its bytes (lightyear clones every message it maps before writing it: a
/// server builds one of these a client a tick), and one that carries none allocates nothing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EncodedDeltas(Option<std::sync::Arc<DeltaBodies>>);

/// What an [`EncodedDeltas`] carries.
#[derive(Clone, Debug, Default, PartialEq)]
struct DeltaBodies {
    /// postcard's bytes of every delta state's body.
    bytes: Vec<u8>,
    /// Each one's entity, and where its body ends in `bytes`.
    entries: Vec<(Entity, u32)>,
}

/// The bodies of none.
static NO_DELTAS: DeltaBodies = DeltaBodies {
    bytes: Vec::new(),
    entries: Vec::new(),
};

impl EncodedDeltas {
    /// None yet, with room for `count` of them of `bytes` in all.
    pub fn with_capacity(count: usize, bytes: usize) -> Self {
        Self(Some(std::sync::Arc::new(DeltaBodies {
            bytes: Vec::with_capacity(bytes),
            entries: Vec::with_capacity(count),
        })))
    }

    /// What it carries.
    fn bodies(&self) -> &DeltaBodies {
        self.0.as_deref().unwrap_or(&NO_DELTAS)
    }

    /// What it carries, to add to (copied first if a clone shares it).
    fn bodies_mut(&mut self) -> &mut DeltaBodies {
        std::sync::Arc::make_mut(self.0.get_or_insert_with(Default::default))
    }

    /// Carries `delta` too, encoded (after those it carries).
    pub fn push(&mut self, delta: &DeltaProxyState) {
        let bodies = self.bodies_mut();
        bodies.bytes = delta.encode_body(core::mem::take(&mut bodies.bytes));
        bodies
            .entries
            .push((delta.entity, bodies.bytes.len() as u32));
    }

    /// Carries the delta state of `entity` whose body [`DeltaProxyState::encode_body`] wrote
    /// as `body` elsewhere.
    pub fn push_encoded(&mut self, entity: Entity, body: &[u8]) {
        let bodies = self.bodies_mut();
        bodies.bytes.extend_from_slice(body);
        bodies.entries.push((entity, bodies.bytes.len() as u32));
    }

    /// How many it carries.
    pub fn len(&self) -> usize {
        self.bodies().entries.len()
    }

    /// Whether it carries none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Their bodies' bytes.
    pub fn byte_len(&self) -> usize {
        self.bodies().bytes.len()
    }

    /// Each one's entity, in order.
    fn entities(&self) -> impl Iterator<Item = Entity> + '_ {
        self.bodies().entries.iter().map(|&(entity, _)| entity)
    }

    /// The body of the `i`th.
    fn body(&self, i: usize) -> &[u8] {
        let DeltaBodies { bytes, entries } = self.bodies();
        let start = i.checked_sub(1).map_or(0, |i| entries[i].1);
        &bytes[start as usize..entries[i].1 as usize]
    }

    /// The delta states it carries, decoded.
    pub fn decode(&self) -> impl Iterator<Item = DeltaProxyState> + '_ {
        self.entities().enumerate().filter_map(|(i, entity)| {
            let DeltaBodyOwned(delta) = postcard::from_bytes(self.body(i)).ok()?;
            Some(DeltaProxyState { entity, ..delta })
        })
    }
}

/// A delta's entity written after the previous delta's index in its message (`None`: the
/// first), as [`Stepped`] writes it.
struct EntityStep(Option<u32>, Entity);

impl Serialize for EntityStep {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeTuple;
        let mut tuple = serializer.serialize_tuple(2)?;
        serialize_step(&mut tuple, self.0, self.1)?;
        tuple.end()
    }
}

impl MapEntities for ProxyUpdates {
    /// (The [`encoded`](Self::encoded) states are the sender's own entities, not mapped.)
    fn map_entities<E: EntityMapper>(&mut self, mapper: &mut E) {
        for s in &mut self.states {
            s.entity = mapper.get_mapped(s.entity);
        }
        for e in &mut self.woken {
            *e = mapper.get_mapped(*e);
        }
        for (e, _) in &mut self.asleep {
            *e = mapper.get_mapped(*e);
        }
        for r in &mut self.rates {
            r.entity = mapper.get_mapped(r.entity);
        }
        for d in &mut self.deltas {
            d.entity = mapper.get_mapped(d.entity);
        }
    }
}

/// Client → server: a [`DeltaProxyState`] came whose baseline this client does not have (the
/// baseline came before lightyear had replicated the proxy's entity, so the client kept it
/// under none: the server sends a proxy's states in full for a while after it first sends it,
/// which covers a spawn that comes late by a resend or two, but not every one). The server
/// sends it full states from the next tick on, and rests its deltas only on those. Sent at
/// most once per state message tick, riding in the packet that acknowledges the message.
/// A client that sends it needlessly only gets the full states every client got before delta
/// states.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ProxyResync {
    /// The tick of the newest state message the client could not use all of.
    pub tick: u32,
}

/// Server → client, reliably: the proxies the server stopped sending this client at server
/// tick `tick` (no longer relevant to it, see [`unlag_net::Relevance::Dormant`]). The client
/// stops drawing them until a state newer than `tick` comes, flagged a teleport.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ProxyDormancy {
    /// The server tick they went dormant at: every state sent before is older.
    pub tick: u32,
    /// The proxies (mapped to the client's on arrival).
    #[serde(with = "unlag_net::wire_entity::vec")]
    pub entities: Vec<Entity>,
}

impl MapEntities for ProxyDormancy {
    fn map_entities<E: EntityMapper>(&mut self, mapper: &mut E) {
        for e in &mut self.entities {
            *e = mapper.get_mapped(*e);
        }
    }
}
