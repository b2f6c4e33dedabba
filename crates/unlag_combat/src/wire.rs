//! A [`FireRequest`]'s bytes on the wire, packed by hand.
//!
//! serde's derived form, as lightyear writes it (postcard), spent 12 bytes on each pellet's
//! direction (144 for a shotgun), 8 on each of four times and 12 on every claim's ease, most
//! often zero; three copies of every shot go up. Here:
//!
//! | field | bytes |
//! | --- | --- |
//! | flags (which optional parts follow) | 1 |
//! | weapon, fire index (varint) | 1 + 1–5 |
//! | origin: whole millimetres, a zigzag varint a coordinate (the client rounds it so before it traces: [`unlag_core::quantize::round_to_millimetres`]), or its `f32` bits when it is not so rounded | 3–15, mostly 6–9, or 12 |
//! | aim: octahedral, 16 bits a coordinate ([`unlag_core::quantize::quantize_direction`]: the client rounds it so before it traces), or its `f32` bits when it is not so rounded | 4 or 12 |
//! | directions, only when the request carries them (an honest client sends none: the server rolls them from the fire index and aim) | 1 + 12 each |
//! | the copy's view time (µs, zigzag varint) | 4–6 |
//! | the shot's view time before it, its judged time after it, the rewind cap (µs) | 1–3 each |
//! | the copy's delay: tens of µs when it is whole tens (as the client rounds it, with its delay reports), else µs | 2–3 |
//! | the newest move | 2 |
//! | claims: count, then per claim the target (`unlag_core::ByteWriter::entity`: 2 bytes), `from` (varint), `to − from`, alpha (`f32`), mode and flags, the ease only when not zero, the pellets that hit it only when more than the first alone (varint), how much earlier than the shot it is judged only when not zero (µs, zigzag varint) | 1 + about 9 each |
//!
//! A rifle shot with one claim, ten minutes into a match, comes to 41 bytes (112 in serde's
//! derived form), a shotgun's the same (244). Times go as whole microseconds: a character at
//! 10 m/s moves 10 µm in one, and the server's timing checks allow milliseconds. Reading never
//! panics: counts above the wire limits, times beyond ±2⁴⁸ µs (8.9 years), unknown flag bits or
//! modes, a `to` outside `u32` and trailing bytes are refused, and lightyear's packet guard
//! drops such a request before anything reads it (`PacketRefusal::MessageBody`).

use crate::protocol::{FireRequest, MAX_CLAIMS, WireClaim};
use bevy::prelude::*;
use unlag_core::quantize::{
    dequantize_direction, dequantize_millimetres, quantize_direction, quantize_millimetres,
};
use unlag_core::{ByteReader, ByteWriter, DecodeError, SmoothingMode};

/// Most directions a request may carry (no weapon fires more pellets).
pub const MAX_DIRECTIONS: usize = 64;

/// Largest time on the wire, whole microseconds (±2⁴⁸, 8.9 years): every such integer comes
/// back from its `f64` seconds exactly.
const MAX_MICROS: i64 = 1 << 48;

const HAS_DELAY_CAP: u8 = 1;
const HAS_MOVE_SEQ: u8 = 2;
const HAS_LEAD: u8 = 4;
const HAS_DIRECTIONS: u8 = 8;
/// The aim goes as its three `f32`s, not in 4 bytes: an aim no client rounded
/// ([`unlag_core::quantize::round_direction`]), a harness's or a cheat's, still goes exactly.
const RAW_AIM: u8 = 16;
/// The origin goes as its three `f32`s, not in whole millimetres: an origin no client rounded
/// ([`unlag_core::quantize::round_to_millimetres`]) still goes exactly.
const RAW_ORIGIN: u8 = 32;
/// The copy's delay goes in tens of microseconds (it is whole tens and not negative).
const DELAY_TENS: u8 = 64;
const FLAGS: u8 =
    HAS_DELAY_CAP | HAS_MOVE_SEQ | HAS_LEAD | HAS_DIRECTIONS | RAW_AIM | RAW_ORIGIN | DELAY_TENS;

const CLAIM_MODE: u8 = 3;
/// The claim's pellet mask follows (a varint, neither 0 nor 1).
const CLAIM_PELLETS: u8 = 4;
const CLAIM_EASE: u8 = 8;
/// The mask is the first pellet alone (a rifle's hit): no bytes follow for it.
const CLAIM_FIRST_PELLET: u8 = 16;
/// How much earlier than the shot the target is judged follows (µs, zigzag varint, not 0).
const CLAIM_BEHIND: u8 = 32;
const CLAIM_FLAGS: u8 = CLAIM_MODE | CLAIM_PELLETS | CLAIM_EASE | CLAIM_FIRST_PELLET | CLAIM_BEHIND;

/// Seconds as whole microseconds, held to ±[`MAX_MICROS`] (a non-finite time goes as the
/// largest: the server's timing checks refuse it).
fn micros(seconds: f64) -> i64 {
    if seconds.is_nan() {
        return MAX_MICROS;
    }
    ((seconds * 1e6).round() as i64).clamp(-MAX_MICROS, MAX_MICROS)
}

/// Whole microseconds as seconds; refuses a value beyond ±[`MAX_MICROS`].
fn seconds(micros: i64) -> Result<f64, DecodeError> {
    // (Not `abs`: i64::MIN has none; the fuzzer found it.)
    if !(-MAX_MICROS..=MAX_MICROS).contains(&micros) {
        return Err(DecodeError::Invalid);
    }
    Ok(micros as f64 / 1e6)
}

fn write_vec3(w: &mut ByteWriter, v: Vec3) {
    w.f32(v.x);
    w.f32(v.y);
    w.f32(v.z);
}

fn read_vec3(r: &mut ByteReader) -> Result<Vec3, DecodeError> {
    Ok(Vec3::new(r.f32()?, r.f32()?, r.f32()?))
}

/// The aim's 4 bytes ([`quantize_direction`]) when they read back as this very aim, bit for
/// bit: an honest client's aim, rounded before it was traced.
fn packed_aim(aim: Vec3) -> Option<[i16; 2]> {
    let q = quantize_direction(aim);
    let bits = |v: Vec3| v.to_array().map(f32::to_bits);
    (bits(dequantize_direction(q)) == bits(aim)).then_some(q)
}

fn mode_code(mode: SmoothingMode) -> u8 {
    match mode {
        SmoothingMode::Snap => 0,
        SmoothingMode::Linear => 1,
        SmoothingMode::Hermite => 2,
        SmoothingMode::Extrapolate => 3,
    }
}

fn mode_of(code: u8) -> SmoothingMode {
    match code & CLAIM_MODE {
        0 => SmoothingMode::Snap,
        1 => SmoothingMode::Linear,
        2 => SmoothingMode::Hermite,
        _ => SmoothingMode::Extrapolate,
    }
}

impl FireRequest {
    /// The request's bytes on the wire, alone (its [`unlag_net::WholeBody`]; its `Serialize`
    /// writes them as a byte string): see the module docs of `wire.rs`. Times go as whole
    /// microseconds; counts beyond the wire limits (`MAX_CLAIMS`, 64 directions) are cut to
    /// them, the sender's own bug, which the server would refuse whole anyway.
    pub fn encode(&self) -> Vec<u8> {
        pack(self)
    }

    /// Reads bytes [`encode`](Self::encode) wrote; never panics, whatever the bytes. What it
    /// reads encodes to bytes that read back equal, bit for bit.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        unpack(bytes)
    }
}

/// Packs `request` (see the module docs).
fn pack(request: &FireRequest) -> Vec<u8> {
    let mut w = ByteWriter::new();
    let (view, sent) = (micros(request.view_time), micros(request.sent_view_time));
    let lead = micros(request.judged_time) - view;
    let aim = packed_aim(request.aim);
    let origin = quantize_millimetres(request.origin);
    let delay = micros(request.sent_delay);
    let delay_tens = delay >= 0 && delay % 10 == 0;
    let flags = (u8::from(request.delay_cap.is_some()) * HAS_DELAY_CAP)
        | (u8::from(aim.is_none()) * RAW_AIM)
        | (u8::from(origin.is_none()) * RAW_ORIGIN)
        | (u8::from(delay_tens) * DELAY_TENS)
        | (u8::from(request.move_seq.is_some()) * HAS_MOVE_SEQ)
        | (u8::from(lead != 0) * HAS_LEAD)
        | (u8::from(!request.directions.is_empty()) * HAS_DIRECTIONS);
    w.u8(flags);
    w.u8(request.weapon);
    w.varint(u64::from(request.fire_index));
    match origin {
        Some(mm) => mm.into_iter().for_each(|c| w.zigzag(c)),
        None => write_vec3(&mut w, request.origin),
    }
    match aim {
        Some([u, v]) => {
            w.i16(u);
            w.i16(v);
        }
        None => write_vec3(&mut w, request.aim),
    }
    if flags & HAS_DIRECTIONS != 0 {
        let directions = &request.directions[..request.directions.len().min(MAX_DIRECTIONS)];
        w.u8(directions.len() as u8);
        for d in directions {
            write_vec3(&mut w, *d);
        }
    }
    // The copy's own stamp in full; the shot's view time as its age before it, its judged
    // time as its lead after that: a few bytes each.
    w.zigzag64(sent);
    w.zigzag64(sent - view);
    if flags & HAS_LEAD != 0 {
        w.zigzag64(lead);
    }
    if delay_tens {
        w.varint(delay as u64 / 10);
    } else {
        w.zigzag64(delay);
    }
    if let Some(cap) = request.delay_cap {
        w.zigzag64(micros(cap));
    }
    if let Some(seq) = request.move_seq {
        w.u16(seq);
    }
    let claims = &request.claims[..request.claims.len().min(MAX_CLAIMS)];
    w.u8(claims.len() as u8);
    for c in claims {
        // Index and generation as numbers (`to_bits` stores the index inverted, 5 bytes), as
        // every message writes an entity (`unlag_net::wire_entity`).
        let (index, generation) = unlag_net::wire_entity::parts(c.target);
        w.entity(index, generation);
        w.varint(u64::from(c.from));
        w.zigzag64(i64::from(c.to) - i64::from(c.from));
        w.f32(c.alpha);
        let eased = c.ease != Vec3::ZERO;
        let pellets = match c.pellets {
            0 => 0,
            1 => CLAIM_FIRST_PELLET,
            _ => CLAIM_PELLETS,
        };
        let behind = micros(c.behind);
        w.u8(mode_code(c.mode)
            | pellets
            | (u8::from(eased) * CLAIM_EASE)
            | (u8::from(behind != 0) * CLAIM_BEHIND));
        if eased {
            write_vec3(&mut w, c.ease);
        }
        if pellets == CLAIM_PELLETS {
            w.varint(c.pellets);
        }
        if behind != 0 {
            w.zigzag64(behind);
        }
    }
    w.into_bytes()
}

/// Unpacks what [`pack`] wrote; never panics, whatever the bytes.
fn unpack(bytes: &[u8]) -> Result<FireRequest, DecodeError> {
    let mut r = ByteReader::new(bytes);
    let flags = r.u8()?;
    if flags & !FLAGS != 0 {
        return Err(DecodeError::Invalid);
    }
    let weapon = r.u8()?;
    let fire_index = u32::try_from(r.varint()?).map_err(|_| DecodeError::Invalid)?;
    let origin = if flags & RAW_ORIGIN != 0 {
        let origin = read_vec3(&mut r)?;
        // One encoding per request: an origin that goes in millimetres goes so.
        if quantize_millimetres(origin).is_some() {
            return Err(DecodeError::Invalid);
        }
        origin
    } else {
        let mm = [r.zigzag()?, r.zigzag()?, r.zigzag()?];
        let origin = dequantize_millimetres(mm);
        // Millimetres that do not come back from their point (beyond what an `f32` holds to
        // the millimetre) are no encoder's.
        if quantize_millimetres(origin) != Some(mm) {
            return Err(DecodeError::Invalid);
        }
        origin
    };
    let aim = if flags & RAW_AIM != 0 {
        read_vec3(&mut r)?
    } else {
        dequantize_direction([r.i16()?, r.i16()?])
    };
    let mut directions = Vec::new();
    if flags & HAS_DIRECTIONS != 0 {
        let count = usize::from(r.u8()?);
        if count == 0 || count > MAX_DIRECTIONS {
            return Err(DecodeError::Invalid);
        }
        directions.reserve_exact(count);
        for _ in 0..count {
            directions.push(read_vec3(&mut r)?);
        }
    }
    let sent = r.zigzag64()?;
    let view = sent
        .checked_sub(r.zigzag64()?)
        .ok_or(DecodeError::Invalid)?;
    let judged = if flags & HAS_LEAD != 0 {
        let lead = r.zigzag64()?;
        if lead == 0 {
            return Err(DecodeError::Invalid);
        }
        view.checked_add(lead).ok_or(DecodeError::Invalid)?
    } else {
        view
    };
    let sent_delay = if flags & DELAY_TENS != 0 {
        let tens = i64::try_from(r.varint()?).map_err(|_| DecodeError::Invalid)?;
        seconds(tens.checked_mul(10).ok_or(DecodeError::Invalid)?)?
    } else {
        let delay = r.zigzag64()?;
        // One encoding per request: a delay of whole tens goes in tens.
        if delay >= 0 && delay % 10 == 0 {
            return Err(DecodeError::Invalid);
        }
        seconds(delay)?
    };
    let delay_cap = if flags & HAS_DELAY_CAP != 0 {
        Some(seconds(r.zigzag64()?)?)
    } else {
        None
    };
    let move_seq = if flags & HAS_MOVE_SEQ != 0 {
        Some(r.u16()?)
    } else {
        None
    };
    let count = usize::from(r.u8()?);
    if count > MAX_CLAIMS {
        return Err(DecodeError::Invalid);
    }
    let mut claims = Vec::with_capacity(count);
    for _ in 0..count {
        let (index, generation) = r.entity()?;
        let target =
            unlag_net::wire_entity::from_parts(index, generation).ok_or(DecodeError::Invalid)?;
        let from = u32::try_from(r.varint()?).map_err(|_| DecodeError::Invalid)?;
        let to = i64::from(from)
            .checked_add(r.zigzag64()?)
            .and_then(|to| u32::try_from(to).ok())
            .ok_or(DecodeError::Invalid)?;
        let alpha = r.f32()?;
        let code = r.u8()?;
        if code & !CLAIM_FLAGS != 0 {
            return Err(DecodeError::Invalid);
        }
        let ease = if code & CLAIM_EASE != 0 {
            let ease = read_vec3(&mut r)?;
            // Written only when not zero: one encoding per request.
            if ease == Vec3::ZERO {
                return Err(DecodeError::Invalid);
            }
            ease
        } else {
            Vec3::ZERO
        };
        // One encoding per mask: the first pellet alone by its flag, others by their bits.
        let pellets = match (code & CLAIM_PELLETS != 0, code & CLAIM_FIRST_PELLET != 0) {
            (false, false) => 0,
            (false, true) => 1,
            (true, false) => match r.varint()? {
                0 | 1 => return Err(DecodeError::Invalid),
                mask => mask,
            },
            (true, true) => return Err(DecodeError::Invalid),
        };
        let behind = if code & CLAIM_BEHIND != 0 {
            // Written only when not zero: one encoding per request.
            match r.zigzag64()? {
                0 => return Err(DecodeError::Invalid),
                micros => seconds(micros)?,
            }
        } else {
            0.0
        };
        claims.push(WireClaim {
            target,
            from,
            to,
            alpha,
            mode: mode_of(code),
            ease,
            pellets,
            behind,
        });
    }
    r.finish()?;
    Ok(FireRequest {
        weapon,
        fire_index,
        origin,
        aim,
        directions,
        view_time: seconds(view)?,
        judged_time: seconds(judged)?,
        delay_cap,
        move_seq,
        sent_view_time: seconds(sent)?,
        sent_delay,
        claims,
    })
}

/// On lightyear's wire a request goes as its bytes alone ([`FireRequest::encode`]'s), without
/// the length postcard writes before them (lightyear states every message's length).
impl unlag_net::WholeBody for FireRequest {
    fn body(&self) -> std::borrow::Cow<'_, [u8]> {
        std::borrow::Cow::Owned(pack(self))
    }

    fn from_body(bytes: &[u8]) -> Result<Self, DecodeError> {
        unpack(bytes)
    }
}

/// serde's form: the bytes of [`FireRequest::encode`] as a byte string (for tools and other
/// formats; lightyear sends [`unlag_net::WholeBody`]'s).
impl serde::Serialize for FireRequest {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(&pack(self))
    }
}

impl<'de> serde::Deserialize<'de> for FireRequest {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Packed;
        impl<'de> serde::de::Visitor<'de> for Packed {
            type Value = FireRequest;

            fn expecting(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
                f.write_str("a packed fire request")
            }

            fn visit_bytes<E: serde::de::Error>(self, bytes: &[u8]) -> Result<FireRequest, E> {
                unpack(bytes).map_err(E::custom)
            }

            // Formats that write bytes as a sequence of numbers (JSON, RON).
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<FireRequest, A::Error> {
                let mut bytes = Vec::new();
                while let Some(b) = seq.next_element::<u8>()? {
                    bytes.push(b);
                }
                unpack(&bytes).map_err(serde::de::Error::custom)
            }
        }
        deserializer.deserialize_bytes(Packed)
    }
}
