//! Closed-form ray casts against the shapes hit boxes use, in the shape's local frame.
//!
//! A capsule is the union of a cylinder and two spheres, so the ray enters it where it first
//! enters any of the three: a few dot products and one or two square roots, where a
//! general-purpose support-map cast iterates. Results match parry's (checked in the
//! integration tests and the rewind benchmark).

use glam::Vec3;

/// Where a ray from `origin` along the unit vector `dir` enters a solid sphere at `centre`:
/// the distance (0 when it starts inside).
fn ray_sphere(origin: Vec3, dir: Vec3, centre: Vec3, radius: f32) -> Option<f32> {
    let oc = origin - centre;
    let b = oc.dot(dir);
    let c = oc.length_squared() - radius * radius;
    if c <= 0.0 {
        return Some(0.0);
    }
    let h = b * b - c;
    if h < 0.0 || b > 0.0 {
        return None;
    }
    Some(-b - h.sqrt())
}

/// Where a ray from `origin` along the unit vector `dir` (both in the capsule's frame) enters
/// a solid capsule along Y (cylinder from −`half_height` to `half_height`, `radius` metres),
/// within `max_distance`: (distance, outward normal). A ray starting inside enters at 0 with
/// a zero normal, as parry reports it.
#[inline]
pub fn ray_capsule(
    origin: Vec3,
    dir: Vec3,
    half_height: f32,
    radius: f32,
    max_distance: f32,
) -> Option<(f32, Vec3)> {
    // A shape built by hand may carry a negative or NaN size: such a capsule has no volume
    // (a clamp with crossed bounds would panic).
    if !(half_height >= 0.0 && radius >= 0.0 && half_height.is_finite() && radius.is_finite()) {
        return None;
    }
    let axis_point = |p: Vec3| Vec3::new(0.0, p.y.clamp(-half_height, half_height), 0.0);
    if origin.distance_squared(axis_point(origin)) <= radius * radius {
        return Some((0.0, Vec3::ZERO));
    }
    // Solve from a point on the ray near the capsule: from far away the quadratics below would
    // cancel large terms and lose millimetres in f32.
    let skip = (-origin.dot(dir) - (half_height + radius)).max(0.0);
    let (far, origin) = (origin, origin + dir * skip);
    let mut best = f32::INFINITY;
    // The cylinder's side: solve |(o + t d) projected off Y| = r.
    let a = dir.x * dir.x + dir.z * dir.z;
    if a > 1e-12 {
        let b = origin.x * dir.x + origin.z * dir.z;
        let c = origin.x * origin.x + origin.z * origin.z - radius * radius;
        let h = b * b - a * c;
        if h >= 0.0 {
            let t = (-b - h.sqrt()) / a;
            let y = origin.y + t * dir.y;
            if t >= 0.0 && (-half_height..=half_height).contains(&y) {
                best = t;
            }
        }
    }
    for end in [-half_height, half_height] {
        if let Some(t) = ray_sphere(origin, dir, Vec3::new(0.0, end, 0.0), radius) {
            best = best.min(t);
        }
    }
    let best = best + skip;
    if best > max_distance {
        return None;
    }
    let point = far + dir * best;
    Some((best, (point - axis_point(point)).normalize_or_zero()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use glam::Vec2;

    #[test]
    fn side_caps_inside_and_misses() {
        // Side: from -X at the middle.
        let (t, n) = ray_capsule(Vec3::new(-5.0, 0.0, 0.0), Vec3::X, 1.0, 0.5, 10.0).unwrap();
        assert!((t - 4.5).abs() < 1e-5 && n.distance(Vec3::NEG_X) < 1e-5);
        // Top cap, straight down.
        let (t, n) = ray_capsule(Vec3::new(0.0, 5.0, 0.0), Vec3::NEG_Y, 1.0, 0.5, 10.0).unwrap();
        assert!((t - 3.5).abs() < 1e-5 && n.distance(Vec3::Y) < 1e-5);
        // Bottom cap from below, along the axis (the cylinder's equation degenerates).
        let (t, _) = ray_capsule(Vec3::new(0.0, -5.0, 0.0), Vec3::Y, 1.0, 0.5, 10.0).unwrap();
        assert!((t - 3.5).abs() < 1e-5);
        // Past the end of the cylinder but within the cap's sphere.
        let (t, _) = ray_capsule(Vec3::new(-5.0, 1.3, 0.0), Vec3::X, 1.0, 0.5, 10.0).unwrap();
        let expected = 5.0 - (0.25f32 - 0.09).sqrt();
        assert!((t - expected).abs() < 1e-4, "{t} vs {expected}");
        assert_eq!(
            ray_capsule(Vec3::new(0.0, 0.2, 0.1), Vec3::X, 1.0, 0.5, 10.0),
            Some((0.0, Vec3::ZERO)),
            "inside"
        );
        assert!(ray_capsule(Vec3::new(-5.0, 1.6, 0.0), Vec3::X, 1.0, 0.5, 10.0).is_none());
        assert!(ray_capsule(Vec3::new(-5.0, 0.0, 0.0), Vec3::NEG_X, 1.0, 0.5, 10.0).is_none());
        assert!(ray_capsule(Vec3::new(-5.0, 0.0, 0.0), Vec3::X, 1.0, 0.5, 4.0).is_none());
        // From far away the answer keeps its millimetres.
        let dir = Vec3::new(1.0, 0.001, 0.3).normalize();
        let origin = Vec3::new(0.0, 0.0, 0.031) - dir * 300.0;
        let (t, _) = ray_capsule(origin, dir, 0.2, 0.06, 400.0).unwrap();
        let p = origin + dir * t;
        let off = (Vec2::new(p.x, p.z).length() - 0.06).abs();
        assert!(off < 2e-4, "{off}");
    }
}
