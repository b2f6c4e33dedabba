//! Quantisation of what moves carry on the wire (UE's choices): locations to 1 cm, acceleration
//! to 0.1, angles to 16 bits.
//!
//! The client quantises a move's input *before* simulating it, so the server, which only sees
//! the quantised input, simulates exactly what the client did.

use glam::{IVec3, Vec2, Vec3};

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

#[cfg(test)]
mod tests {
    use super::*;

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
