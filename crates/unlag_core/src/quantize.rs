//! Quantisation of what moves carry on the wire (UE's choices): locations to 1 cm, acceleration
//! to 0.1, angles to 16 bits; and of the rotations proxy states carry (40 bits).
//!
//! The client quantises a move's input *before* simulating it, so the server, which only sees
//! the quantised input, simulates exactly what the client did.

use glam::{IVec3, Quat, Vec2, Vec3, Vec4};

/// Metres per unit of a quantised location.
pub const LOCATION_STEP: f32 = 0.01;
/// Units per step of a quantised acceleration component (input in `[-1, 1]`).
pub const ACCEL_STEPS: f32 = 10.0;

/// A location in whole centimetres. Non-finite components become 0; huge ones saturate.
pub fn quantize_location(v: Vec3) -> IVec3 {
    let q = |x: f32| {
        if x.is_finite() {
            (x / LOCATION_STEP)
                .round()
                .clamp(i32::MIN as f32, i32::MAX as f32) as i32
        } else {
            0
        }
    };
    IVec3::new(q(v.x), q(v.y), q(v.z))
}

/// The location a quantised one stands for, metres.
pub fn dequantize_location(q: IVec3) -> Vec3 {
    q.as_vec3() * LOCATION_STEP
}

/// A planar acceleration input clamped to length 1, then to tenths: `[-10, 10]` per axis.
pub fn quantize_accel(a: Vec2) -> [i8; 2] {
    let a = if a.is_finite() {
        a.clamp_length_max(1.0)
    } else {
        Vec2::ZERO
    };
    [
        (a.x * ACCEL_STEPS).round() as i8,
        (a.y * ACCEL_STEPS).round() as i8,
    ]
}

/// The acceleration input a quantised one stands for, each axis in `[-1, 1]`. Its length may
/// exceed 1 slightly (rounding) or greatly (a forged value): models clamp it to length 1 before
/// use, so the quantised form stays the exact value both sides simulate.
pub fn dequantize_accel(q: [i8; 2]) -> Vec2 {
    let clamp = |x: i8| f32::from(x.clamp(-10, 10)) / ACCEL_STEPS;
    Vec2::new(clamp(q[0]), clamp(q[1]))
}

/// A scalar input in `[-1, 1]` (throttle, steering) to tenths.
pub fn quantize_unit(x: f32) -> i8 {
    if x.is_finite() {
        (x.clamp(-1.0, 1.0) * ACCEL_STEPS).round() as i8
    } else {
        0
    }
}

/// The scalar a quantised one stands for.
pub fn dequantize_unit(q: i8) -> f32 {
    f32::from(q.clamp(-10, 10)) / ACCEL_STEPS
}

/// An angle in radians, wrapped to a full turn, in 16 bits (0.0055° steps).
pub fn quantize_angle(radians: f32) -> u16 {
    if !radians.is_finite() {
        return 0;
    }
    let turns = (radians / core::f32::consts::TAU).rem_euclid(1.0);
    ((turns * 65_536.0).round() as u32 & 0xFFFF) as u16
}

/// The angle a quantised one stands for, radians in `[0, 2π)`.
pub fn dequantize_angle(q: u16) -> f32 {
    f32::from(q) / 65_536.0 * core::f32::consts::TAU
}

/// A pitch in radians, clamped to `[-π/2, π/2]`, in 16 bits.
pub fn quantize_pitch(radians: f32) -> i16 {
    let half_pi = core::f32::consts::FRAC_PI_2;
    let r = if radians.is_finite() {
        radians.clamp(-half_pi, half_pi)
    } else {
        0.0
    };
    (r / half_pi * 32_767.0).round() as i16
}

/// The pitch a quantised one stands for, radians.
pub fn dequantize_pitch(q: i16) -> f32 {
    f32::from(q.max(-32_767)) / 32_767.0 * core::f32::consts::FRAC_PI_2
}

/// Bits of each of the three smaller components of a [`quantize_rotation`].
const ROTATION_BITS: u32 = 12;

/// Largest value of those bits a component is sent as: an even number of steps, so that 0 is
/// one of them (a yaw's pitch and roll, 0, come back exactly 0: a character turning about the
/// vertical is never drawn tilted). The odd value above it only comes forged.
const ROTATION_MAX: u32 = (1 << ROTATION_BITS) - 2;

/// All the bits of one component.
const ROTATION_MASK: u64 = (1 << ROTATION_BITS) - 1;

/// Bytes of a [`quantize_rotation`]: 2 + 3 × 12 bits.
pub const ROTATION_BYTES: usize = 5;

/// A rotation in 40 bits ("smallest three"): which component of the unit quaternion is the
/// largest in magnitude (2 bits), and the other three in 12 bits each (2 bits spare), which lie
/// within ±1/√2 once the quaternion's sign makes the largest positive (it is rebuilt from them,
/// as `√(1 − a² − b² − c²)`). At most 0.063° off (measured over 20 000 rotations): at the 0.5 m
/// a humanoid's hit boxes reach from its axis, about half a millimetre, the rounding of the
/// position beside it. (10 bits, 32 in all, were 0.22° off: the client then drew a target's boxes
/// 1.5 mm from where the server's history has them, and a grazing pellet on a target no other
/// pellet hit, judged there, came out a seen miss the server confirmed.) 5 bytes where four
/// 16-bit components take about 8 once varint-encoded (a yaw's two non-zero ones take 3 each),
/// and every pattern of bits stands for a unit rotation. Little-endian. A non-finite or zero
/// rotation is sent as the identity.
pub fn quantize_rotation(q: Quat) -> [u8; ROTATION_BYTES] {
    let v = Vec4::from(q);
    let v = if v.is_finite() && v.length_squared() > 1e-12 {
        v.normalize()
    } else {
        Vec4::W
    };
    let a = v.to_array();
    let largest = (1..4).fold(0, |m, i| if a[i].abs() > a[m].abs() { i } else { m });
    let sign = if a[largest] < 0.0 { -1.0 } else { 1.0 };
    let mut bits = largest as u64;
    for (_, &x) in a.iter().enumerate().filter(|(i, _)| *i != largest) {
        let unit = (x * sign * core::f32::consts::SQRT_2).clamp(-1.0, 1.0);
        let k = ((unit + 1.0) / 2.0 * ROTATION_MAX as f32).round() as u32;
        bits = (bits << ROTATION_BITS) | u64::from(k.min(ROTATION_MAX));
    }
    let mut bytes = [0; ROTATION_BYTES];
    bytes.copy_from_slice(&bits.to_le_bytes()[..ROTATION_BYTES]);
    bytes
}

/// The code [`quantize_rotation`] gives a zero component.
const ROTATION_ZERO: u64 = ROTATION_MAX as u64 / 2;

/// The first byte's top bits of a rotation's two-byte wire form ([`rotation_to_wire`]).
const ROTATION_YAW_FORM: u8 = 0b0100_0000;

/// A rotation's bytes ([`quantize_rotation`]) as they go on the wire, and how many of them
/// are used: 2 for a turn about the vertical alone (a character standing upright, whose x and
/// z components are 0: its y or w, the larger, and the other in 12 bits), else 5 (the 38 bits,
/// big-endian). The first byte's top two bits say which: 01 for the two-byte form, 00 for the
/// other. The two spare bits are not sent (nothing reads them); every 5 bytes come back
/// ([`rotation_from_wire`]) as the same rotation.
pub fn rotation_to_wire(bytes: [u8; ROTATION_BYTES]) -> ([u8; ROTATION_BYTES], usize) {
    let mut wide = [0; 8];
    wide[..ROTATION_BYTES].copy_from_slice(&bytes);
    let bits = u64::from_le_bytes(wide) & ((1 << (2 + 3 * ROTATION_BITS)) - 1);
    let small = |at: u32| (bits >> (at * ROTATION_BITS)) & ROTATION_MASK;
    let largest = bits >> (3 * ROTATION_BITS);
    // (Where each small component lies: the first after the largest is the highest.)
    let yaw = match largest {
        1 if small(2) == ROTATION_ZERO && small(1) == ROTATION_ZERO => Some((0, small(0))),
        3 if small(2) == ROTATION_ZERO && small(0) == ROTATION_ZERO => Some((1, small(1))),
        _ => None,
    };
    let mut wire = [0; ROTATION_BYTES];
    match yaw {
        Some((w_largest, other)) => {
            let v = (u64::from(ROTATION_YAW_FORM) << 8) | (w_largest << 13) | other;
            wire[..2].copy_from_slice(&(v as u16).to_be_bytes());
            (wire, 2)
        }
        None => {
            wire.copy_from_slice(&bits.to_be_bytes()[3..]);
            (wire, ROTATION_BYTES)
        }
    }
}

/// How many bytes a rotation's wire form ([`rotation_to_wire`]) takes, read from its first
/// byte: `Invalid` for a first byte of neither form.
pub fn rotation_wire_len(first: u8) -> Result<usize, crate::DecodeError> {
    match first & 0b1100_0000 {
        ROTATION_YAW_FORM => Ok(2),
        0 => Ok(ROTATION_BYTES),
        _ => Err(crate::DecodeError::Invalid),
    }
}

/// The rotation's bytes ([`quantize_rotation`]'s form, the spare bits 0) from its wire form
/// ([`rotation_to_wire`]), `wire` exactly its bytes: `Truncated` or `Trailing` when it is
/// shorter or longer than its first byte says ([`rotation_wire_len`]); `Invalid` for a first
/// byte of neither form, a two-byte form's unused bit set, or a five-byte form of a rotation
/// the two-byte form holds: one encoding per rotation.
pub fn rotation_from_wire(wire: &[u8]) -> Result<[u8; ROTATION_BYTES], crate::DecodeError> {
    let first = *wire.first().ok_or(crate::DecodeError::Truncated)?;
    let len = rotation_wire_len(first)?;
    match wire.len().cmp(&len) {
        core::cmp::Ordering::Less => return Err(crate::DecodeError::Truncated),
        core::cmp::Ordering::Greater => return Err(crate::DecodeError::Trailing),
        core::cmp::Ordering::Equal => {}
    }
    let bits = if len == 2 {
        let v = (u64::from(first & 0b0011_1111) << 8) | u64::from(wire[1]);
        if v & (1 << 12) != 0 {
            return Err(crate::DecodeError::Invalid);
        }
        let other = v & ROTATION_MASK;
        let zero = |at: u32| ROTATION_ZERO << (at * ROTATION_BITS);
        if v & (1 << 13) == 0 {
            (1 << (3 * ROTATION_BITS)) | zero(2) | zero(1) | other
        } else {
            (3 << (3 * ROTATION_BITS)) | zero(2) | (other << ROTATION_BITS) | zero(0)
        }
    } else {
        wire.iter().fold(0, |bits, &b| (bits << 8) | u64::from(b))
    };
    let mut bytes = [0; ROTATION_BYTES];
    bytes.copy_from_slice(&bits.to_le_bytes()[..ROTATION_BYTES]);
    if len == ROTATION_BYTES && rotation_to_wire(bytes).1 != ROTATION_BYTES {
        return Err(crate::DecodeError::Invalid);
    }
    Ok(bytes)
}

/// How many codes [`yaw_code`] gives: every upright rotation [`quantize_rotation`] makes,
/// once each (8190).
pub const YAW_CODES: u32 = 2 * (ROTATION_MAX + 1);

/// An upright rotation's place on the circle of turns about the vertical, 0 to
/// [`YAW_CODES`] − 1, in the order of its angle: the w-largest form's y code (−90° to 90°),
/// then the y-largest form's w code counted down (90° to 270°). Neighbouring codes are
/// neighbouring rotations, the last next to the first, so a character's turn between two of
/// its states is a small difference of codes ([`yaw_steps`]): about 60 codes for 0.04 rad.
/// `None` for a rotation that is not upright (its x or z not 0), a forged component beyond
/// [`quantize_rotation`]'s range, or spare bits set: those have no code.
pub fn yaw_code(bytes: [u8; ROTATION_BYTES]) -> Option<u32> {
    let mut wide = [0; 8];
    wide[..ROTATION_BYTES].copy_from_slice(&bytes);
    let bits = u64::from_le_bytes(wide);
    if bits >> (2 + 3 * ROTATION_BITS) != 0 {
        return None;
    }
    let small = |at: u32| (bits >> (at * ROTATION_BITS)) & ROTATION_MASK;
    let (first, k) = match bits >> (3 * ROTATION_BITS) {
        3 if small(2) == ROTATION_ZERO && small(0) == ROTATION_ZERO => (true, small(1)),
        1 if small(2) == ROTATION_ZERO && small(1) == ROTATION_ZERO => (false, small(0)),
        _ => return None,
    };
    let k = u32::try_from(k).ok().filter(|k| *k <= ROTATION_MAX)?;
    Some(if first {
        k
    } else {
        ROTATION_MAX + 1 + (ROTATION_MAX - k)
    })
}

/// The rotation's bytes of a [`yaw_code`] (taken modulo [`YAW_CODES`]): `yaw_code` of them is
/// the code again.
pub fn rotation_from_yaw_code(code: u32) -> [u8; ROTATION_BYTES] {
    let code = code % YAW_CODES;
    let zero = |at: u32| ROTATION_ZERO << (at * ROTATION_BITS);
    let bits = if code <= ROTATION_MAX {
        (3 << (3 * ROTATION_BITS)) | zero(2) | (u64::from(code) << ROTATION_BITS) | zero(0)
    } else {
        let k = ROTATION_MAX - (code - ROTATION_MAX - 1);
        (1 << (3 * ROTATION_BITS)) | zero(2) | zero(1) | u64::from(k)
    };
    let mut bytes = [0; ROTATION_BYTES];
    bytes.copy_from_slice(&bits.to_le_bytes()[..ROTATION_BYTES]);
    bytes
}

/// The shorter way round from yaw code `from` to `to` ([`yaw_code`]), in codes:
/// −4095 to 4094.
pub fn yaw_steps(from: u32, to: u32) -> i32 {
    let half = YAW_CODES as i64 / 2;
    let d = (i64::from(to) - i64::from(from)).rem_euclid(YAW_CODES as i64);
    (if d >= half { d - YAW_CODES as i64 } else { d }) as i32
}

/// The yaw code `steps` codes on from `from` ([`yaw_steps`]'s inverse), any `steps` taken
/// round the circle.
pub fn yaw_after(from: u32, steps: i32) -> u32 {
    (i64::from(from) + i64::from(steps)).rem_euclid(YAW_CODES as i64) as u32
}

/// The unit rotation 5 bytes stand for ([`quantize_rotation`]); any 5 bytes stand for one.
pub fn dequantize_rotation(bytes: [u8; ROTATION_BYTES]) -> Quat {
    let mut wide = [0; 8];
    wide[..ROTATION_BYTES].copy_from_slice(&bytes);
    let mut bits = u64::from_le_bytes(wide);
    let mut small = [0.0f32; 3];
    for x in small.iter_mut().rev() {
        let k = (bits & ROTATION_MASK) as f32;
        bits >>= ROTATION_BITS;
        *x = (k / ROTATION_MAX as f32 * 2.0 - 1.0) * core::f32::consts::FRAC_1_SQRT_2;
    }
    let largest = (bits & 3) as usize;
    // Three components too large for a unit quaternion (only forged bytes) leave the largest
    // at 0, and the normalisation below makes it a unit one anyway.
    let rest: f32 = small.iter().map(|x| x * x).sum();
    let mut a = [0.0f32; 4];
    let mut others = small.iter();
    for (i, c) in a.iter_mut().enumerate() {
        *c = if i == largest {
            (1.0 - rest).max(0.0).sqrt()
        } else {
            *others.next().expect("three")
        };
    }
    Quat::from_array(a).normalize()
}

/// Steps of each coordinate of a [`quantize_direction`] on either side of 0.
const DIRECTION_STEPS: f32 = 32_767.0;

/// Which way a coordinate leans, with 0 (and −0) counted as up: a fold must send a point on an
/// axis the same way on both sides.
fn lean(x: f32) -> f32 {
    if x >= 0.0 { 1.0 } else { -1.0 }
}

/// A direction in 32 bits, for the aim of a shot: octahedral. The direction's point on the
/// octahedron `|x| + |y| + |z| = 1` is flattened onto the square of its `x` and `y`, the half
/// below `z = 0` folded out over the corners, and each coordinate rounded to 1/32 767. At most
/// 0.0037° off (measured over 200 000 directions by the unit test): 6.4 mm at 100 m. A zero
/// or non-finite direction is sent as `+z`.
///
/// A shot's aim is rounded this way *before* it is traced and its pellets rolled
/// ([`round_direction`]), so the server, which sees only the rounded aim, rebuilds exactly the
/// rays the client traced (as a move's input is quantised before it is simulated).
pub fn quantize_direction(d: Vec3) -> [i16; 2] {
    let l1 = d.x.abs() + d.y.abs() + d.z.abs();
    if !(l1.is_finite() && l1 > 0.0) {
        return [0, 0];
    }
    let (mut u, mut v) = (d.x / l1, d.y / l1);
    if d.z < 0.0 {
        (u, v) = ((1.0 - v.abs()) * lean(u), (1.0 - u.abs()) * lean(v));
    }
    let q = |x: f32| (x.clamp(-1.0, 1.0) * DIRECTION_STEPS).round() as i16;
    [q(u), q(v)]
}

/// The unit direction a [`quantize_direction`] stands for; any two numbers stand for one.
pub fn dequantize_direction(q: [i16; 2]) -> Vec3 {
    let unit = |k: i16| f32::from(k.max(-32_767)) / DIRECTION_STEPS;
    let (mut u, mut v) = (unit(q[0]), unit(q[1]));
    let z = 1.0 - u.abs() - v.abs();
    if z < 0.0 {
        (u, v) = ((1.0 - v.abs()) * lean(u), (1.0 - u.abs()) * lean(v));
    }
    // (+ 0: a fold's 0 × −1 is −0, which rounds again to +0: one direction, one set of bits.)
    Vec3::new(u, v, z).normalize() + Vec3::ZERO
}

/// `d` as the server will read it after [`quantize_direction`]: a unit direction at most
/// 0.0037° from `d`'s, and its own rounding (rounding it again changes no bit).
pub fn round_direction(d: Vec3) -> Vec3 {
    dequantize_direction(quantize_direction(d))
}

/// Largest coordinate of a point in whole millimetres, metres (2³¹ mm, about 2 147 km).
const MAX_MILLIMETRE_COORDINATE: f64 = 2_147_483.0;

/// `v` in whole millimetres, if it is a point the wire carries so exactly: each coordinate
/// finite, within ±2 147 483 m and the very `f32` [`dequantize_millimetres`]
/// gives back for its millimetres (a point [`round_to_millimetres`] rounded).
pub fn quantize_millimetres(v: Vec3) -> Option<[i32; 3]> {
    let mm = [millimetres(v.x)?, millimetres(v.y)?, millimetres(v.z)?];
    let bits = |v: Vec3| v.to_array().map(f32::to_bits);
    (bits(dequantize_millimetres(mm)) == bits(v)).then_some(mm)
}

/// The point `mm` whole millimetres stand for, metres.
pub fn dequantize_millimetres(mm: [i32; 3]) -> Vec3 {
    Vec3::new(metres(mm[0]), metres(mm[1]), metres(mm[2]))
}

/// A coordinate's nearest whole millimetre, if it is finite and within
/// ±[`MAX_MILLIMETRE_COORDINATE`].
fn millimetres(x: f32) -> Option<i32> {
    let x = f64::from(x);
    (x.is_finite() && x.abs() <= MAX_MILLIMETRE_COORDINATE).then(|| (x * 1000.0).round() as i32)
}

/// The coordinate `mm` whole millimetres stand for, metres (a zero is +0).
fn metres(mm: i32) -> f32 {
    (f64::from(mm) / 1000.0) as f32
}

/// `v` with each coordinate at its nearest whole millimetre (within ±2 147 km; others
/// unchanged): a shot's origin as the wire carries it in a few bytes a coordinate, rounded by
/// the client before it traces, so that the server rebuilds the very rays. Rounding it again
/// changes no bit; within 8 km of the origin (where an `f32`'s step is under a millimetre)
/// [`quantize_millimetres`] carries the rounded point exactly.
pub fn round_to_millimetres(v: Vec3) -> Vec3 {
    let r = |x: f32| millimetres(x).map_or(x, metres);
    Vec3::new(r(v.x), r(v.y), r(v.z))
}

/// `v` in whole millimetres, each coordinate rounded to the nearest and held to ±2 147 483 m
/// (one that is not a number is 0): a point carried where a millimetre is close enough, as
/// a cosmetic shot's origin; [`dequantize_millimetres`] reads it back. A point
/// [`round_to_millimetres`] rounded comes back bit for bit.
pub fn saturating_millimetres(v: Vec3) -> [i32; 3] {
    v.to_array().map(|x| {
        let mm = (f64::from(x) * 1000.0).round();
        if mm.is_nan() {
            0
        } else {
            mm.clamp(f64::from(i32::MIN), f64::from(i32::MAX)) as i32
        }
    })
}

/// Where `end` lies from `origin`, in whole centimetres per axis (rounded to the nearest, held
/// to `i32`; not a number is 0): a far point carried as its few bytes from a near one, as a
/// cosmetic shot's pellet ends from its origin. [`from_offset_centimetres`] reads it back.
pub fn offset_centimetres(origin: Vec3, end: Vec3) -> [i32; 3] {
    core::array::from_fn(|i| {
        let cm = ((f64::from(end[i]) - f64::from(origin[i])) * 100.0).round();
        if cm.is_nan() {
            0
        } else {
            cm.clamp(f64::from(i32::MIN), f64::from(i32::MAX)) as i32
        }
    })
}

/// The point `cm` whole centimetres from `origin`, metres (always finite for a finite
/// origin). Within 40 km of the world's origin, an `end` read back so gives the very same
/// centimetres again ([`offset_centimetres`]), so rounding twice changes no bit.
pub fn from_offset_centimetres(origin: Vec3, cm: [i32; 3]) -> Vec3 {
    Vec3::from_array(core::array::from_fn(|i| {
        (f64::from(origin[i]) + f64::from(cm[i]) / 100.0) as f32
    }))
}

/// A time in whole microseconds, rounded to the nearest and held to `0..=u64::MAX` (not a
/// number is 0): a server time carried in a varint of 5 bytes for its first 9.5 hours (an
/// `f64` takes 8), as a projectile's launch time. [`from_micros`] reads it back; a time read
/// back so gives the same microseconds again (below 285 years), so rounding twice changes no
/// bit.
pub fn saturating_micros(seconds: f64) -> u64 {
    let us = (seconds * 1e6).round();
    if us.is_nan() {
        0
    } else {
        // (`as` saturates: below 0 is 0, beyond u64 is its largest.)
        us as u64
    }
}

/// The time `us` whole microseconds stand for, seconds.
pub fn from_micros(us: u64) -> f64 {
    us as f64 / 1e6
}

/// A tick's length in whole microseconds, what [`run_on_mm`] counts in (both ends round the
/// same length the same way); 0 for a length that is not finite and positive, up to 1 s.
pub fn tick_micros(tick_seconds: f64) -> u32 {
    if tick_seconds.is_finite() && tick_seconds > 0.0 {
        (tick_seconds.min(1.0) * 1e6).round() as u32
    } else {
        0
    }
}

/// Where a proxy at `position` (mm) is `ticks` ticks of `tick_us` µs later if its velocity
/// went evenly from `from` to `to` (cm/s) meanwhile, mm, each axis rounded to the nearest
/// (halves away from zero). In integers, so that a server and a client compute the same
/// millimetre: a delta state's position is sent as its difference from this run-on of its
/// baseline to its own velocity (a proxy keeping its course or its acceleration costs a byte
/// an axis). `ticks` beyond an hour count as an hour.
pub fn run_on_mm(
    position: [i32; 3],
    from: [i16; 3],
    to: [i16; 3],
    ticks: u32,
    tick_us: u32,
) -> [i64; 3] {
    let span_us = i64::from(ticks.min(216_000)) * i64::from(tick_us.min(1_000_000));
    core::array::from_fn(|i| {
        // The mean velocity (a sum of two) in cm/s × µs = 2 × 10⁻⁸ m: / (2 × 10⁵) is mm.
        let moved = (i64::from(from[i]) + i64::from(to[i])) * span_us;
        let mm = (moved.abs() + 100_000) / 200_000 * moved.signum();
        i64::from(position[i]) + mm
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_goes_in_millimetres_and_a_far_one_in_centimetres_from_it() {
        let mut rng = crate::rng::SplitMix64::new(11);
        for i in 0..20_000 {
            let scale = [1.0, 100.0, 8_000.0, 30_000.0][i % 4];
            let mut c = || ((rng.next_f64() - 0.5) * 2.0 * scale) as f32;
            let origin = Vec3::new(c(), c(), c());
            let end = Vec3::new(c(), c(), c());
            // The origin to the millimetre, a rounded one exactly.
            let mm = saturating_millimetres(origin);
            let back = dequantize_millimetres(mm);
            assert!(
                (back - origin).abs().max_element() <= 0.0005 + origin.abs().max_element() * 1e-7
            );
            let rounded = round_to_millimetres(origin);
            assert_eq!(
                dequantize_millimetres(saturating_millimetres(rounded)),
                rounded
            );
            // The end within half a centimetre an axis, and read back so, it is the same
            // centimetres again (rounding twice changes no bit).
            let cm = offset_centimetres(back, end);
            let end_back = from_offset_centimetres(back, cm);
            let slack = 0.005 + end.abs().max_element().max(back.abs().max_element()) * 2e-7;
            assert!(
                (end_back - end).abs().max_element() <= slack,
                "{end} {end_back}"
            );
            assert_eq!(offset_centimetres(back, end_back), cm, "{back} {end}");
            assert_eq!(
                from_offset_centimetres(back, cm)
                    .to_array()
                    .map(f32::to_bits),
                end_back.to_array().map(f32::to_bits)
            );
        }
        // Nothing that is not a number, and nothing beyond i32.
        let nan = Vec3::new(f32::NAN, f32::INFINITY, -f32::INFINITY);
        assert_eq!(saturating_millimetres(nan), [0, i32::MAX, i32::MIN]);
        assert_eq!(offset_centimetres(Vec3::ZERO, nan), [0, i32::MAX, i32::MIN]);
        let far = from_offset_centimetres(Vec3::splat(1e6), [i32::MAX, i32::MIN, 0]);
        assert!(far.is_finite());
    }

    /// A time goes in whole microseconds within half of one, and read back and sent again it
    /// is the same bit for bit; a time that is not a number, negative or infinite saturates.
    #[test]
    fn a_time_goes_in_whole_microseconds_and_reads_back_the_same_again() {
        let mut rng = crate::SplitMix64::new(11);
        for i in 0..20_000 {
            let scale = [1.0, 3_600.0, 360_000.0, 1e9][i % 4];
            let t = rng.next_f64() * scale;
            let us = saturating_micros(t);
            let back = from_micros(us);
            // Within half a microsecond, and the `f64`'s own step at `t` (the division's
            // rounding, a few parts in 10⁸ of a microsecond at a year).
            assert!(
                (back - t).abs() <= 0.5e-6 + 2.0 * t * f64::EPSILON,
                "{t} -> {back}"
            );
            // Sent again, the same microseconds, bit for bit the same time.
            assert_eq!(saturating_micros(back), us);
            assert_eq!(
                from_micros(saturating_micros(back)).to_bits(),
                back.to_bits()
            );
        }
        assert_eq!(saturating_micros(1_234.567_891), 1_234_567_891);
        assert_eq!(from_micros(1_234_567_891), 1_234.567_891);
        assert_eq!(saturating_micros(f64::NAN), 0);
        assert_eq!(saturating_micros(-5.0), 0);
        assert_eq!(saturating_micros(f64::NEG_INFINITY), 0);
        assert_eq!(saturating_micros(f64::INFINITY), u64::MAX);
        assert!(from_micros(u64::MAX).is_finite());
    }

    /// A point rounded to whole millimetres is carried exactly, and rounding it again changes
    /// no bit; points off the millimetres, not finite or too far are not carried so.
    #[test]
    fn a_point_rounded_to_millimetres_goes_in_whole_millimetres_exactly() {
        let mut rng = crate::SplitMix64::new(3);
        for i in 0..20_000 {
            let scale = [1.0, 100.0, 8_000.0, 2_000_000.0][i % 4];
            let mut c = || ((rng.next_f64() - 0.5) * 2.0 * scale) as f32;
            let v = Vec3::new(c(), c(), c());
            let r = round_to_millimetres(v);
            assert_eq!(
                round_to_millimetres(r).to_array().map(f32::to_bits),
                r.to_array().map(f32::to_bits)
            );
            // Within half a millimetre, or the `f32`'s own step where that is coarser.
            let step = |x: f32| (x.abs() * f32::EPSILON).max(0.0005) * 1.01;
            for (a, b) in v.to_array().into_iter().zip(r.to_array()) {
                assert!((a - b).abs() <= step(a), "{a} -> {b}");
            }
            // Carried exactly where the `f32` holds its millimetres (within 8 km).
            if scale <= 8_000.0 {
                let mm = quantize_millimetres(r)
                    .unwrap_or_else(|| panic!("{v} -> {r}: not in millimetres"));
                assert_eq!(
                    dequantize_millimetres(mm).to_array().map(f32::to_bits),
                    r.to_array().map(f32::to_bits)
                );
            }
            if let Some(mm) = quantize_millimetres(v) {
                assert_eq!(dequantize_millimetres(mm), v);
            }
        }
        assert_eq!(
            quantize_millimetres(Vec3::new(1.0, 2.5, -3.25)),
            Some([1000, 2500, -3250])
        );
        assert_eq!(quantize_millimetres(Vec3::new(0.0005, 0.0, 0.0)), None);
        assert_eq!(quantize_millimetres(Vec3::new(f32::NAN, 0.0, 0.0)), None);
        assert_eq!(quantize_millimetres(Vec3::new(3.0e6, 0.0, 0.0)), None);
        assert!(
            round_to_millimetres(Vec3::new(f32::INFINITY, 0.0, 0.0))
                .x
                .is_infinite()
        );
    }

    #[test]
    fn a_run_on_is_the_same_millimetre_both_ways_and_rounds_to_the_nearest() {
        let tick = tick_micros(1.0 / 60.0);
        assert_eq!(tick, 16_667);
        assert_eq!(tick_micros(f64::NAN), 0);
        assert_eq!(tick_micros(-1.0), 0);
        // 5 m/s for 3 ticks of 1/60 s: 250.005 mm.
        let v = [500, 0, -500];
        assert_eq!(run_on_mm([1000, 0, -1000], v, v, 3, tick), [1250, 0, -1250]);
        // From 0 to 5 m/s evenly: half of it.
        let still = [0; 3];
        assert_eq!(
            run_on_mm([1000, 0, -1000], still, v, 3, tick),
            [1125, 0, -1125]
        );
        // Halves round away from zero, the same on either side of it (1 cm/s for 0.05 s is
        // half a millimetre).
        let (up, down) = ([1, -1, 0], [1, -1, 0]);
        assert_eq!(run_on_mm([0, 0, 0], up, down, 1, 50_000), [1, -1, 0]);
        assert_eq!(run_on_mm([0, 0, 0], up, down, 1, 49_999), [0, 0, 0]);
        assert_eq!(run_on_mm([7, 7, 7], up, down, 3, 50_000), [9, 5, 7]);
        // Against the float run-on, within half a millimetre over many draws.
        let mut rng = crate::SplitMix64::new(5);
        for _ in 0..10_000 {
            let p = [(rng.next_f64() * 2e6 - 1e6) as i32; 3];
            let a = [(rng.next_f64() * 65_534.0 - 32_767.0) as i16; 3];
            let b = [(rng.next_f64() * 65_534.0 - 32_767.0) as i16; 3];
            let ticks = (rng.next_f64() * 120.0) as u32;
            let got = run_on_mm(p, a, b, ticks, tick);
            for i in 0..3 {
                let mean = (f64::from(a[i]) + f64::from(b[i])) / 2.0;
                let want =
                    f64::from(p[i]) + mean * 10.0 * f64::from(ticks) * f64::from(tick) * 1e-6;
                assert!(
                    (got[i] as f64 - want).abs() <= 0.5 + 1e-6,
                    "{p:?} {a:?} {b:?} {ticks}"
                );
            }
        }
        // Extremes stay far from overflowing.
        let far = run_on_mm(
            [i32::MAX; 3],
            [i16::MAX; 3],
            [i16::MAX; 3],
            u32::MAX,
            u32::MAX,
        );
        assert!(far[0] > i64::from(i32::MAX));
    }

    #[test]
    fn directions_in_32_bits_are_within_four_thousandths_of_a_degree_and_round_once() {
        let mut rng = crate::SplitMix64::new(11);
        let mut c = || rng.next_f64() as f32 * 2.0 - 1.0;
        let mut worst = 0.0f64;
        for n in 0..200_000 {
            let d = match n % 4 {
                // Anywhere on the sphere.
                0 | 1 => Vec3::new(c(), c(), c()),
                // Near the fold (z about 0) and near the axes, where the fold's edges are.
                2 => Vec3::new(c(), c(), c() * 1e-3),
                _ => Vec3::new(c() * 1e-3, c() * 1e-3, c()),
            };
            let Some(d) = d.try_normalize() else { continue };
            let back = round_direction(d);
            assert!((back.length() - 1.0).abs() < 1e-6, "{d} → {back}");
            worst = worst.max(back.as_dvec3().angle_between(d.as_dvec3()));
            // Rounded once, it is its own rounding: the wire sends it in 4 bytes, exactly.
            let again = round_direction(back);
            assert_eq!(
                again.to_array().map(f32::to_bits),
                back.to_array().map(f32::to_bits)
            );
        }
        assert!(worst.to_degrees() < 0.004, "{}°", worst.to_degrees());
        // The axes come back exactly.
        for axis in [
            Vec3::X,
            Vec3::NEG_X,
            Vec3::Y,
            Vec3::NEG_Y,
            Vec3::Z,
            Vec3::NEG_Z,
        ] {
            assert_eq!(round_direction(axis), axis);
        }
        // Zero and non-finite directions go as +z; any two numbers stand for a unit direction,
        // which rounds to itself.
        for bad in [Vec3::ZERO, Vec3::NAN, Vec3::new(f32::INFINITY, 0.0, 1.0)] {
            assert_eq!(round_direction(bad), Vec3::Z);
        }
        let mut k = 0x1234_5678_u64;
        for _ in 0..1_000_000 {
            k = k
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let q = [(k >> 16) as i16, (k >> 40) as i16];
            let d = dequantize_direction(q);
            assert!((d.length() - 1.0).abs() < 1e-6, "{q:?} → {d}");
            let again = round_direction(d);
            assert_eq!(
                again.to_array().map(f32::to_bits),
                d.to_array().map(f32::to_bits),
                "{q:?}"
            );
        }
    }

    #[test]
    fn rotations_in_40_bits_are_within_a_fifteenth_of_a_degree() {
        let mut rng = crate::SplitMix64::new(7);
        let mut worst = 0.0f32;
        for n in 0..20_000 {
            let q = if n % 2 == 0 {
                // Characters turn about the vertical.
                Quat::from_rotation_y((rng.next_f64() as f32 - 0.5) * 20.0)
            } else {
                let mut c = || rng.next_f64() as f32 * 2.0 - 1.0;
                Quat::from_xyzw(c(), c(), c(), c()).normalize()
            };
            let back = dequantize_rotation(quantize_rotation(q));
            assert!((back.length() - 1.0).abs() < 1e-5);
            // (In f64: f32's acos near 1 is itself off by a few hundredths of a degree.)
            worst = worst.max(back.as_dquat().angle_between(q.as_dquat()) as f32);
            // q and −q are one rotation: the same bytes.
            assert_eq!(quantize_rotation(-q), quantize_rotation(q));
        }
        assert!(worst.to_degrees() < 0.065, "{}°", worst.to_degrees());
        assert_eq!(
            dequantize_rotation(quantize_rotation(Quat::IDENTITY)),
            Quat::IDENTITY
        );
        // A turn about the vertical comes back about the vertical alone.
        let yaw = dequantize_rotation(quantize_rotation(Quat::from_rotation_y(2.0)));
        assert_eq!((yaw.x, yaw.z), (0.0, 0.0));
        for bad in [
            Quat::from_xyzw(0.0, 0.0, 0.0, 0.0),
            Quat::from_xyzw(f32::NAN, 0.0, 0.0, 1.0),
        ] {
            assert_eq!(quantize_rotation(bad), quantize_rotation(Quat::IDENTITY));
        }
        // Any bytes stand for a unit rotation.
        for k in 0..5_000u64 {
            let bytes: [u8; ROTATION_BYTES] = k.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes()
                [..ROTATION_BYTES]
                .try_into()
                .unwrap();
            let q = dequantize_rotation(bytes);
            assert!(
                q.is_finite() && (q.length() - 1.0).abs() < 1e-5,
                "{bytes:?}"
            );
        }
        let q = dequantize_rotation([0xFF; ROTATION_BYTES]);
        assert!(q.is_finite() && (q.length() - 1.0).abs() < 1e-5);
    }

    #[test]
    fn upright_rotations_have_yaw_codes_in_the_order_of_their_angles() {
        // Every code stands for one upright rotation and comes back as itself.
        for code in 0..YAW_CODES {
            let bytes = rotation_from_yaw_code(code);
            assert_eq!(yaw_code(bytes), Some(code));
            assert_eq!(rotation_to_wire(bytes).1, 2, "{code}: upright");
            assert_eq!(rotation_from_yaw_code(code + YAW_CODES), bytes);
        }
        // A turn about the vertical by a small angle is a small difference of codes, the same
        // way round as the turn, across both forms' seams and round the circle.
        let code = |deg: f32| {
            yaw_code(quantize_rotation(Quat::from_rotation_y(deg.to_radians()))).unwrap()
        };
        for i in 0..3600 {
            let deg = i as f32 / 10.0 - 180.0;
            let steps = yaw_steps(code(deg), code(deg + 0.1));
            assert!((1..=5).contains(&steps), "{deg}°: {steps}");
            let back = yaw_steps(code(deg + 0.1), code(deg));
            assert_eq!(back, -steps);
            assert_eq!(yaw_after(code(deg), steps), code(deg + 0.1));
            // The code's rotation is the rotation's, to the quantiser's step.
            let q = dequantize_rotation(rotation_from_yaw_code(code(deg)));
            let want = Quat::from_rotation_y(deg.to_radians());
            assert!(q.dot(want).abs() > 1.0 - 1e-6, "{deg}°");
        }
        assert_eq!(yaw_steps(0, YAW_CODES - 1), -1);
        assert_eq!(yaw_steps(YAW_CODES - 1, 0), 1);
        assert_eq!(yaw_after(0, -1), YAW_CODES - 1);
        assert!(yaw_after(5, i32::MIN) < YAW_CODES && yaw_after(5, i32::MAX) < YAW_CODES);
        // Tilted, forged (a component beyond the range, spare bits): no code.
        assert_eq!(
            yaw_code(quantize_rotation(
                Quat::from_rotation_y(0.3) * Quat::from_rotation_x(0.01)
            )),
            None
        );
        let mut forged = rotation_from_yaw_code(0);
        forged[4] |= 0x80;
        assert_eq!(yaw_code(forged), None);
        let odd = {
            let mut b = rotation_from_yaw_code(ROTATION_MAX);
            b[1] |= 0x10; // y's code 4094 -> 4095
            b
        };
        assert_eq!(yaw_code(odd), None);
    }

    #[test]
    fn upright_rotations_take_two_bytes_on_the_wire_and_every_rotation_reads_back() {
        let wire = |q: Quat| rotation_to_wire(quantize_rotation(q));
        // What a reader makes of the wire form, and how long its first byte says it is.
        let back = |(bytes, len): ([u8; ROTATION_BYTES], usize)| {
            (
                rotation_from_wire(&bytes[..len]),
                rotation_wire_len(bytes[0]),
            )
        };
        let mut upright = 0;
        for i in 0..=720 {
            // A turn about the vertical alone, either way round, both signs of the quaternion.
            let yaw = Quat::from_rotation_y((i as f32 - 360.0).to_radians());
            for q in [yaw, -yaw] {
                let (bytes, len) = wire(q);
                assert_eq!(len, 2, "{i}°");
                upright += 1;
                assert_eq!(back((bytes, len)), (Ok(quantize_rotation(q)), Ok(2)));
            }
            // Tilted by a hair or more: five bytes.
            let tilted = yaw * Quat::from_rotation_x(0.01);
            assert_eq!(wire(tilted).1, ROTATION_BYTES);
            assert_eq!(
                back(wire(tilted)),
                (Ok(quantize_rotation(tilted)), Ok(ROTATION_BYTES))
            );
        }
        assert_eq!(upright, 2 * 721);
        // Every 5 bytes (spare bits aside) come back as themselves.
        for k in 0..20_000u64 {
            let mut bytes: [u8; ROTATION_BYTES] =
                k.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes()[..ROTATION_BYTES]
                    .try_into()
                    .unwrap();
            bytes[4] &= 0b0011_1111;
            let (wire, len) = rotation_to_wire(bytes);
            assert_eq!(back((wire, len)), (Ok(bytes), Ok(len)), "{bytes:?}");
        }
        // The spare bits are not sent: the same rotation comes back.
        let q = quantize_rotation(Quat::from_rotation_z(1.0));
        let mut spare = q;
        spare[4] |= 0b1100_0000;
        assert_eq!(back(rotation_to_wire(spare)), (Ok(q), Ok(ROTATION_BYTES)));
    }

    #[test]
    fn rotation_wire_forms_no_encoder_writes_are_refused() {
        let read = rotation_from_wire;
        use crate::DecodeError::{Invalid, Trailing, Truncated};
        // The forms 10 and 11.
        assert_eq!(read(&[0x80, 0, 0, 0, 0]), Err(Invalid));
        assert_eq!(read(&[0xC0, 0]), Err(Invalid));
        assert_eq!(rotation_wire_len(0x80), Err(Invalid));
        // The two-byte form's unused bit.
        assert_eq!(read(&[0x50, 0]), Err(Invalid));
        // An upright rotation in five bytes.
        let (yaw, _) = rotation_to_wire(quantize_rotation(Quat::from_rotation_y(0.5)));
        let full = rotation_from_wire(&yaw[..2]).unwrap();
        let mut wide = [0; 8];
        wide[..ROTATION_BYTES].copy_from_slice(&full);
        let five = u64::from_le_bytes(wide).to_be_bytes();
        assert_eq!(read(&five[3..]), Err(Invalid));
        // Cut short, or longer than its first byte says.
        assert_eq!(read(&[0x40]), Err(Truncated));
        assert_eq!(read(&[0x00, 1, 2]), Err(Truncated));
        assert_eq!(read(&[]), Err(Truncated));
        assert_eq!(read(&[yaw[0], yaw[1], 0]), Err(Trailing));
    }

    #[test]
    fn location_to_the_centimetre() {
        let v = Vec3::new(12.3449, -0.006, 1000.0);
        let q = quantize_location(v);
        assert_eq!(q, IVec3::new(1234, -1, 100_000));
        assert!((dequantize_location(q) - v).abs().max_element() <= 0.005 + 1e-4);
        assert_eq!(quantize_location(Vec3::NAN), IVec3::ZERO);
    }

    #[test]
    fn accel_clamped_and_stable() {
        let q = quantize_accel(Vec2::new(3.0, 4.0));
        assert_eq!(q, [6, 8]);
        assert!((dequantize_accel(q).length() - 1.0).abs() < 1e-6);
        // Quantising what was dequantised gives the same value: the client's rounding is final.
        for x in -10..=10i8 {
            for y in -10..=10i8 {
                let d = dequantize_accel([x, y]);
                if d.length() <= 1.0 {
                    assert_eq!(quantize_accel(d), [x, y]);
                }
            }
        }
        assert_eq!(quantize_accel(Vec2::new(f32::NAN, 1.0)), [0, 0]);
        assert_eq!(dequantize_accel([127, -128]), Vec2::new(1.0, -1.0));
    }

    #[test]
    fn angles_wrap_and_round_trip() {
        let step = core::f32::consts::TAU / 65_536.0;
        for a in [0.0f32, 1.0, 3.0, 6.2, -0.5, 100.0] {
            let d = dequantize_angle(quantize_angle(a));
            let diff = (d - a.rem_euclid(core::f32::consts::TAU)).abs();
            assert!(
                diff <= step || (core::f32::consts::TAU - diff) <= step,
                "{a}"
            );
        }
        assert_eq!(quantize_angle(core::f32::consts::TAU), 0);
        let p = dequantize_pitch(quantize_pitch(0.3));
        assert!((p - 0.3).abs() < 1e-4);
        assert_eq!(
            dequantize_pitch(quantize_pitch(9.0)),
            core::f32::consts::FRAC_PI_2
        );
        assert_eq!(dequantize_pitch(i16::MIN), -core::f32::consts::FRAC_PI_2);
        assert_eq!(dequantize_unit(quantize_unit(-0.74)), -0.7);
    }
}
