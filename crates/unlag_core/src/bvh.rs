//! [`Bvh`]: a bounding-volume hierarchy over axis-aligned boxes, for finding which of many
//! characters a ray can reach without testing each of them.
//!
//! Built top-down (median split along the longest axis of the centres, up to
//! [`LEAF_SIZE`] items per leaf) into flat arrays that are reused from one build to the next,
//! so rebuilding every server tick allocates nothing once warm.

use glam::{Vec3, Vec3A};

/// An axis-aligned box.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Aabb {
    /// The smallest corner, metres.
    pub min: Vec3,
    /// The largest corner, metres.
    pub max: Vec3,
}

impl Aabb {
    /// The box with no volume that any union replaces.
    pub const EMPTY: Self = Self {
        min: Vec3::splat(f32::INFINITY),
        max: Vec3::splat(f32::NEG_INFINITY),
    };

    /// The box around a sphere at `centre` of `radius` metres.
    pub fn from_sphere(centre: Vec3, radius: f32) -> Self {
        Self {
            min: centre - Vec3::splat(radius),
            max: centre + Vec3::splat(radius),
        }
    }

    /// The smallest box holding both.
    #[inline]
    pub fn union(&self, other: &Self) -> Self {
        Self {
            min: self.min.min(other.min),
            max: self.max.max(other.max),
        }
    }

    /// This box grown by `margin` metres on every side.
    #[inline]
    pub fn inflated(&self, margin: f32) -> Self {
        Self {
            min: self.min - Vec3::splat(margin),
            max: self.max + Vec3::splat(margin),
        }
    }

    /// The centre, metres.
    #[inline]
    pub fn centre(&self) -> Vec3 {
        (self.min + self.max) * 0.5
    }

    /// Whether the ray from `origin` with reciprocal direction `inv_dir` enters the box within
    /// `max_distance` (in units of the direction's length). Slab test; a ray starting inside
    /// enters at 0.
    #[inline]
    pub fn ray_enters(&self, origin: Vec3, inv_dir: Vec3, max_distance: f32) -> bool {
        self.ray_entry(origin, inv_dir, max_distance).is_some()
    }

    /// The distance at which the ray enters the box (0 when it starts inside), if it does
    /// within `max_distance`.
    #[inline]
    pub fn ray_entry(&self, origin: Vec3, inv_dir: Vec3, max_distance: f32) -> Option<f32> {
        let t1 = (self.min - origin) * inv_dir;
        let t2 = (self.max - origin) * inv_dir;
        // NaN (0 × ∞ for a ray on a slab's plane) loses to the other operand in min/max.
        let enter = t1.min(t2).max_element().max(0.0);
        let exit = t1.max(t2).min_element().min(max_distance);
        (enter <= exit).then_some(enter)
    }
}

/// A box in SIMD lanes, for the traversal's slab tests.
#[derive(Copy, Clone, Debug)]
struct Slab {
    min: Vec3A,
    max: Vec3A,
}

impl Slab {
    const EMPTY: Self = Self {
        min: Vec3A::splat(f32::INFINITY),
        max: Vec3A::splat(f32::NEG_INFINITY),
    };

    fn of(b: &Aabb) -> Self {
        Self {
            min: b.min.into(),
            max: b.max.into(),
        }
    }

    fn union(&self, other: &Self) -> Self {
        Self {
            min: self.min.min(other.min),
            max: self.max.max(other.max),
        }
    }

    /// [`Aabb::ray_entry`] of this box grown by `pad`.
    #[inline]
    fn entry(&self, origin: Vec3A, inv_dir: Vec3A, max: f32, pad: Vec3A) -> Option<f32> {
        let t1 = (self.min - pad - origin) * inv_dir;
        let t2 = (self.max + pad - origin) * inv_dir;
        let enter = t1.min(t2).max_element().max(0.0);
        let exit = t1.max(t2).min_element().min(max);
        (enter <= exit).then_some(enter)
    }
}

/// Items per leaf of a [`Bvh`].
pub const LEAF_SIZE: usize = 4;

#[derive(Copy, Clone, Debug)]
struct Node {
    bounds: Slab,
    /// Leaf: first item in `items`; inner: index of the left child (the right one follows it).
    start: u32,
    /// Items in a leaf; 0 for an inner node.
    count: u32,
}

/// A bounding-volume hierarchy over a set of boxes, each known by its index in the slice it
/// was built from (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct Bvh {
    nodes: Vec<Node>,
    items: Vec<u32>,
    centres: Vec<Vec3>,
    bounds: Vec<Slab>,
}

impl Bvh {
    /// An empty hierarchy.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of boxes it was built over.
    pub fn len(&self) -> usize {
        self.bounds.len()
    }

    /// Whether it holds no box.
    pub fn is_empty(&self) -> bool {
        self.bounds.is_empty()
    }

    /// Bytes held by its arrays.
    pub fn memory_bytes(&self) -> usize {
        self.nodes.capacity() * size_of::<Node>()
            + self.items.capacity() * size_of::<u32>()
            + self.centres.capacity() * size_of::<Vec3>()
            + self.bounds.capacity() * size_of::<Slab>()
    }

    /// Rebuilds the hierarchy over `boxes`, reusing its storage.
    pub fn build(&mut self, boxes: &[Aabb]) {
        self.nodes.clear();
        self.items.clear();
        self.items.extend(0..boxes.len() as u32);
        self.bounds.clear();
        self.bounds.extend(boxes.iter().map(Slab::of));
        self.centres.clear();
        self.centres.extend(boxes.iter().map(Aabb::centre));
        if boxes.is_empty() {
            return;
        }
        self.nodes.push(Node {
            bounds: Slab::EMPTY,
            start: 0,
            count: boxes.len() as u32,
        });
        // Split nodes depth first with an explicit stack of (node, first item, item count).
        let mut stack = vec![(0usize, 0usize, boxes.len())];
        while let Some((node, start, count)) = stack.pop() {
            let items = &mut self.items[start..start + count];
            let mut bounds = Slab::EMPTY;
            let mut centres = Aabb::EMPTY;
            for &i in items.iter() {
                bounds = bounds.union(&self.bounds[i as usize]);
                let c = self.centres[i as usize];
                centres = centres.union(&Aabb { min: c, max: c });
            }
            self.nodes[node].bounds = bounds;
            if count <= LEAF_SIZE {
                self.nodes[node].start = start as u32;
                self.nodes[node].count = count as u32;
                continue;
            }
            let extent = centres.max - centres.min;
            let axis = if extent.x >= extent.y && extent.x >= extent.z {
                0
            } else if extent.y >= extent.z {
                1
            } else {
                2
            };
            let half = count / 2;
            let c = &self.centres;
            items.select_nth_unstable_by(half, |a, b| {
                c[*a as usize][axis].total_cmp(&c[*b as usize][axis])
            });
            let left = self.nodes.len();
            let empty = Node {
                bounds: Slab::EMPTY,
                start: 0,
                count: 0,
            };
            self.nodes.push(empty);
            self.nodes.push(empty);
            self.nodes[node].start = left as u32;
            self.nodes[node].count = 0;
            stack.push((left, start, half));
            stack.push((left + 1, start + half, count - half));
        }
    }

    /// Updates the bounds of the boxes it was built over (same number, same order) and refits
    /// every node to them, keeping the tree's shape: O(n), for boxes that moved a little since
    /// the last [`Bvh::build`]. Returns false (and changes nothing) when the count differs.
    pub fn refit(&mut self, boxes: &[Aabb]) -> bool {
        if boxes.len() != self.bounds.len() {
            return false;
        }
        for (slab, b) in self.bounds.iter_mut().zip(boxes) {
            *slab = Slab::of(b);
        }
        // Children always come after their parent, so a backwards pass sees them first.
        for n in (0..self.nodes.len()).rev() {
            let node = self.nodes[n];
            let bounds = if node.count > 0 {
                let range = node.start as usize..(node.start + node.count) as usize;
                self.items[range]
                    .iter()
                    .fold(Slab::EMPTY, |a, &i| a.union(&self.bounds[i as usize]))
            } else {
                let (l, r) = (node.start as usize, node.start as usize + 1);
                self.nodes[l].bounds.union(&self.nodes[r].bounds)
            };
            self.nodes[n].bounds = bounds;
        }
        true
    }

    /// Appends to `out` the index of every box the ray from `origin` along `direction` enters
    /// within `max_distance` metres, each box first grown by `radius` metres (a swept sphere).
    /// `direction` need not be normalised; a zero or non-finite one finds nothing.
    pub fn ray(
        &self,
        origin: Vec3,
        direction: Vec3,
        max_distance: f32,
        radius: f32,
        out: &mut Vec<u32>,
    ) {
        self.visit_ray(origin, direction, max_distance, radius, |i| {
            out.push(i);
            max_distance
        });
    }

    /// Calls `visit` with the index of every box the ray from `origin` along `direction`
    /// enters within `max_distance` metres, each box grown by `radius` metres. `visit` returns
    /// how far the ray still needs to reach (metres): return a shorter distance once something
    /// is hit, and boxes behind it are skipped. A zero or non-finite direction visits nothing.
    pub fn visit_ray(
        &self,
        origin: Vec3,
        direction: Vec3,
        max_distance: f32,
        radius: f32,
        mut visit: impl FnMut(u32) -> f32,
    ) {
        let Some(dir) = direction.try_normalize() else {
            return;
        };
        if self.nodes.is_empty()
            || !origin.is_finite()
            || !radius.is_finite()
            || max_distance.is_nan()
        {
            return;
        }
        let (origin, inv, pad) = (
            Vec3A::from(origin),
            Vec3A::from(dir.recip()),
            Vec3A::splat(radius),
        );
        let mut reach = max_distance;
        if self.nodes[0]
            .bounds
            .entry(origin, inv, reach, pad)
            .is_none()
        {
            return;
        }
        // Nodes whose bounds the ray enters, with the entry distance; nearer child on top, so
        // hits found early shrink the reach before farther subtrees are opened.
        let mut stack = [(0u32, 0.0f32); 64];
        let mut top = 1;
        while top > 0 {
            top -= 1;
            let (index, entry) = stack[top];
            if entry > reach {
                continue;
            }
            let node = self.nodes[index as usize];
            if node.count > 0 {
                let range = node.start as usize..(node.start + node.count) as usize;
                for &i in &self.items[range] {
                    if self.bounds[i as usize]
                        .entry(origin, inv, reach, pad)
                        .is_some()
                    {
                        reach = reach.min(visit(i));
                        if reach.is_nan() {
                            return;
                        }
                    }
                }
                continue;
            }
            let (l, r) = (node.start, node.start + 1);
            let hit = |c: u32| self.nodes[c as usize].bounds.entry(origin, inv, reach, pad);
            let mut children = [(l, hit(l)), (r, hit(r))];
            if let [(_, Some(a)), (_, Some(b))] = children
                && a < b
            {
                children.swap(0, 1);
            }
            for (c, e) in children {
                if let Some(e) = e
                    && top < stack.len()
                {
                    stack[top] = (c, e);
                    top += 1;
                }
            }
        }
    }
}

/// A cone: every ray from `origin` within `half_angle` (radians) of `axis`, out to
/// `max_distance` metres; what [`Bvh::visit_cone`] gathers candidates for (a shotgun's pellets
/// leave one muzzle inside a narrow cone).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Cone {
    /// The apex, metres.
    pub origin: Vec3,
    /// The axis, a unit vector.
    pub axis: Vec3,
    /// Half the opening angle, radians (0 to π/2).
    pub half_angle: f32,
    /// How far along its rays the cone reaches, metres.
    pub max_distance: f32,
}

impl Cone {
    /// The narrowest cone about the rays' mean direction that holds every ray of `rays`
    /// (origin, direction) out to `max_distance` metres, when they share one origin and
    /// spread less than a right angle from it; `None` otherwise (or for a zero or non-finite
    /// direction), and the rays are then best traversed one by one.
    pub fn around(rays: &[(Vec3, Vec3)], max_distance: f32) -> Option<Self> {
        let &(origin, _) = rays.first()?;
        let mut sum = Vec3::ZERO;
        for &(o, d) in rays {
            if o != origin {
                return None;
            }
            sum += d.try_normalize()?;
        }
        let axis = sum.try_normalize()?;
        let least_cos = rays
            .iter()
            .map(|&(_, d)| d.normalize().dot(axis))
            .fold(1.0f32, f32::min);
        // A hair wider than the widest ray, so rounding in the cosine never leaves one out.
        let half_angle = least_cos.clamp(-1.0, 1.0).acos() + 1e-4;
        (half_angle < core::f32::consts::FRAC_PI_2 && origin.is_finite() && !max_distance.is_nan())
            .then_some(Self {
                origin,
                axis,
                half_angle,
                max_distance,
            })
    }

    /// Whether any ray of the cone comes within `r` metres of `centre` (conservatively: it
    /// may say yes for a sphere just outside, never no for one it touches).
    #[inline]
    fn touches_sphere(&self, centre: Vec3A, r: f32, sin: f32, cos: f32) -> bool {
        let v = centre - Vec3A::from(self.origin);
        let along = v.dot(Vec3A::from(self.axis));
        if along + r < 0.0 || along - r > self.max_distance {
            return false;
        }
        // The distance from the centre to the cone's surface (when that is the nearest part),
        // `across × cos − along × sin`, within r; squared, without a root.
        let reach = r + along * sin;
        reach >= 0.0 && (v.length_squared() - along * along).max(0.0) * cos * cos <= reach * reach
    }
}

impl Slab {
    /// The sphere through the corners of this box grown by `pad` metres on every side: its
    /// centre and radius. (Not the box's own sphere grown by `pad`: the grown box's corners
    /// reach further, and a ray the slab test lets into one must reach the sphere too.)
    #[inline]
    fn sphere(&self, pad: f32) -> (Vec3A, f32) {
        (
            (self.min + self.max) * 0.5,
            ((self.max - self.min) * 0.5 + Vec3A::splat(pad)).length(),
        )
    }
}

impl Bvh {
    /// Calls `visit` once with the index of every box (grown by `radius` metres) that some ray
    /// of `cone` may enter: a superset of what [`Bvh::visit_ray`] visits for each of the rays
    /// inside it, found in one traversal. (Each box is tested as the sphere around it.)
    pub fn visit_cone(&self, cone: &Cone, radius: f32, mut visit: impl FnMut(u32)) {
        if self.nodes.is_empty() || !radius.is_finite() || !cone.axis.is_finite() {
            return;
        }
        let (sin, cos) = cone.half_angle.sin_cos();
        let touches = |slab: &Slab| {
            let (centre, r) = slab.sphere(radius);
            cone.touches_sphere(centre, r, sin, cos)
        };
        let mut stack = [0u32; 64];
        let mut top = 0;
        if touches(&self.nodes[0].bounds) {
            top = 1;
        }
        while top > 0 {
            top -= 1;
            let node = self.nodes[stack[top] as usize];
            if node.count > 0 {
                let range = node.start as usize..(node.start + node.count) as usize;
                for &i in &self.items[range] {
                    if touches(&self.bounds[i as usize]) {
                        visit(i);
                    }
                }
                continue;
            }
            for child in [node.start, node.start + 1] {
                if top < stack.len() && touches(&self.nodes[child as usize].bounds) {
                    stack[top] = child;
                    top += 1;
                }
            }
        }
    }

    /// Where the ray from `origin` along the unit `direction` enters box `index` grown by
    /// `radius` metres, if it does within `max_distance` metres (0 when it starts inside):
    /// the test [`Bvh::visit_ray`] makes of each box, for one box of a cone's candidates.
    #[inline]
    pub fn box_entry(
        &self,
        index: u32,
        origin: Vec3,
        direction: Vec3,
        max_distance: f32,
        radius: f32,
    ) -> Option<f32> {
        self.bounds.get(index as usize)?.entry(
            origin.into(),
            Vec3A::from(direction.recip()),
            max_distance,
            Vec3A::splat(radius),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SplitMix64;
    use glam::Quat;

    fn random_boxes(rng: &mut SplitMix64, n: usize) -> Vec<Aabb> {
        (0..n)
            .map(|_| {
                let c = Vec3::new(
                    (rng.next_f64() as f32) * 100.0 - 50.0,
                    (rng.next_f64() as f32) * 4.0,
                    (rng.next_f64() as f32) * 100.0 - 50.0,
                );
                Aabb::from_sphere(c, 0.5 + (rng.next_f64() as f32) * 2.0)
            })
            .collect()
    }

    #[test]
    fn slab_test_handles_axis_aligned_rays_and_starts_inside() {
        let b = Aabb::from_sphere(Vec3::ZERO, 1.0);
        let x = Vec3::X.recip();
        assert!(b.ray_enters(Vec3::new(-5.0, 0.0, 0.0), x, 10.0));
        assert!(
            !b.ray_enters(Vec3::new(-5.0, 0.0, 0.0), x, 3.9),
            "too short"
        );
        assert!(
            !b.ray_enters(Vec3::new(-5.0, 2.0, 0.0), x, 10.0),
            "passes above"
        );
        assert!(
            !b.ray_enters(Vec3::new(5.0, 0.0, 0.0), x, 10.0),
            "points away"
        );
        assert!(b.ray_enters(Vec3::ZERO, x, 0.1), "starts inside");
        // Grazing the face plane exactly.
        assert!(b.ray_enters(Vec3::new(-5.0, 1.0, 0.0), x, 10.0));
    }

    #[test]
    fn a_cone_finds_every_box_any_of_its_rays_finds() {
        let mut rng = SplitMix64::new(11);
        let mut f = move || rng.next_f64() as f32;
        let mut bvh = Bvh::new();
        let (mut gathered, mut needed, mut every) = (0usize, 0usize, 0usize);
        for n in [1, 5, 64, 256] {
            let boxes: Vec<Aabb> = (0..n)
                .map(|_| {
                    let c = Vec3::new(f() * 100.0 - 50.0, f() * 4.0, f() * 100.0 - 50.0);
                    Aabb::from_sphere(c, 0.3 + f())
                })
                .collect();
            bvh.build(&boxes);
            for _ in 0..300 {
                let origin = Vec3::new(f() * 60.0 - 30.0, 1.6, f() * 60.0 - 30.0);
                let aim = Vec3::new(f() - 0.5, (f() - 0.5) * 0.2, f() - 0.5).normalize();
                // 12 pellets up to 2-30° off the aim.
                let spread = (2.0 + f() * 28.0).to_radians();
                let side = aim.any_orthonormal_vector();
                let rays: Vec<(Vec3, Vec3)> = (0..12)
                    .map(|k| {
                        let turn = Quat::from_axis_angle(aim, f() * core::f32::consts::TAU);
                        let tilt = Quat::from_axis_angle(side, spread * f().sqrt());
                        let dir = if k == 0 { aim } else { turn * tilt * aim };
                        (origin, dir)
                    })
                    .collect();
                let (max, radius) = (f() * 80.0, f() * 0.3);
                let cone = Cone::around(&rays, max).expect("one origin, a narrow spread");
                let mut in_cone = Vec::new();
                bvh.visit_cone(&cone, radius, |i| in_cone.push(i));
                let mut unique = in_cone.clone();
                unique.sort_unstable();
                unique.dedup();
                assert_eq!(unique.len(), in_cone.len(), "each box once");
                for &(o, d) in &rays {
                    let mut found = Vec::new();
                    bvh.ray(o, d, max, radius, &mut found);
                    for i in found {
                        assert!(unique.contains(&i), "box {i} of a ray left out");
                        // The one-box test agrees with the traversal's.
                        assert!(bvh.box_entry(i, o, d.normalize(), max, radius).is_some());
                        needed += 1;
                    }
                }
                gathered += unique.len();
                every += n;
            }
        }
        // It gathers the boxes the rays enter and some they do not, not most of the map
        // (here 4059 gathered of 97 800 boxes, where the rays entered 2757 times).
        assert!(needed > 1000, "{needed}");
        assert!(gathered < every / 10, "{gathered} of {every}");
        // A ray into the corner of a grown box, outside the box's own sphere grown as much:
        // the slab test lets it in, so the cone must gather it.
        let point = [Aabb::from_sphere(Vec3::new(10.0, 0.0, 0.0), 0.0)];
        bvh.build(&point);
        let corner = [(Vec3::ZERO, Vec3::new(10.0, 0.95, 0.95))];
        let mut found = Vec::new();
        bvh.ray(corner[0].0, corner[0].1, 100.0, 1.0, &mut found);
        assert_eq!(found, [0]);
        let mut in_cone = Vec::new();
        bvh.visit_cone(&Cone::around(&corner, 100.0).unwrap(), 1.0, |i| {
            in_cone.push(i)
        });
        assert_eq!(in_cone, [0]);
        // Rays from two muzzles, or a spread past a right angle, are not one cone.
        let two = [(Vec3::ZERO, Vec3::X), (Vec3::Y, Vec3::X)];
        assert_eq!(Cone::around(&two, 10.0), None);
        let wide = [(Vec3::ZERO, Vec3::X), (Vec3::ZERO, -Vec3::X)];
        assert_eq!(Cone::around(&wide, 10.0), None);
        assert_eq!(Cone::around(&[(Vec3::ZERO, Vec3::ZERO)], 10.0), None);
    }

    #[test]
    fn finds_exactly_what_a_scan_of_every_box_finds() {
        let mut rng = SplitMix64::new(7);
        let mut bvh = Bvh::new();
        for n in [0, 1, 3, 5, 17, 256] {
            let boxes = random_boxes(&mut rng, n);
            bvh.build(&boxes);
            assert_eq!(bvh.len(), n);
            for _ in 0..200 {
                let origin = Vec3::new(
                    (rng.next_f64() as f32) * 120.0 - 60.0,
                    (rng.next_f64() as f32) * 3.0,
                    (rng.next_f64() as f32) * 120.0 - 60.0,
                );
                let dir = Vec3::new(
                    (rng.next_f64() as f32) - 0.5,
                    ((rng.next_f64() as f32) - 0.5) * 0.1,
                    (rng.next_f64() as f32) - 0.5,
                );
                let (max, radius) = (
                    (rng.next_f64() as f32) * 80.0,
                    (rng.next_f64() as f32) * 0.5,
                );
                let mut found = Vec::new();
                bvh.ray(origin, dir, max, radius, &mut found);
                found.sort_unstable();
                let inv = dir.normalize().recip();
                let scanned: Vec<u32> = (0..n as u32)
                    .filter(|&i| {
                        boxes[i as usize]
                            .inflated(radius)
                            .ray_enters(origin, inv, max)
                    })
                    .collect();
                assert_eq!(found, scanned, "n = {n}");
            }
        }
    }

    #[test]
    fn a_refitted_tree_finds_what_a_scan_finds() {
        let mut rng = SplitMix64::new(11);
        let mut boxes = random_boxes(&mut rng, 100);
        let mut bvh = Bvh::new();
        bvh.build(&boxes);
        for b in &mut boxes {
            let shift = Vec3::new((rng.next_f64() as f32) * 6.0 - 3.0, 0.0, 0.0);
            *b = Aabb {
                min: b.min + shift,
                max: b.max + shift,
            };
        }
        assert!(bvh.refit(&boxes));
        for _ in 0..200 {
            let origin = Vec3::new((rng.next_f64() as f32) * 120.0 - 60.0, 1.0, -70.0);
            let dir = Vec3::new((rng.next_f64() as f32) - 0.5, 0.0, 1.0);
            let mut found = Vec::new();
            bvh.ray(origin, dir, 200.0, 0.0, &mut found);
            found.sort_unstable();
            let inv = dir.normalize().recip();
            let scanned: Vec<u32> = (0..100u32)
                .filter(|&i| boxes[i as usize].ray_enters(origin, inv, 200.0))
                .collect();
            assert_eq!(found, scanned);
        }
        assert!(!bvh.refit(&boxes[..99]), "a different count needs a build");
    }

    #[test]
    fn a_shrinking_reach_skips_what_is_behind() {
        let boxes: Vec<Aabb> = (0..20)
            .map(|i| Aabb::from_sphere(Vec3::new(i as f32 * 3.0, 0.0, 0.0), 0.5))
            .collect();
        let mut bvh = Bvh::new();
        bvh.build(&boxes);
        let mut visited = Vec::new();
        bvh.visit_ray(Vec3::new(-2.0, 0.0, 0.0), Vec3::X, 100.0, 0.0, |i| {
            visited.push(i);
            if i == 4 { 12.0 } else { 100.0 }
        });
        assert!(visited.contains(&4));
        assert!(
            visited.iter().all(|&i| i <= 5),
            "nothing beyond 10 m once box 4 (at 14 m from the origin) answered 12 m: {visited:?}"
        );
    }

    #[test]
    fn bad_rays_find_nothing_and_rebuilds_replace_the_set() {
        let mut bvh = Bvh::new();
        bvh.build(&[Aabb::from_sphere(Vec3::ZERO, 1.0)]);
        let mut out = Vec::new();
        bvh.ray(Vec3::new(-5.0, 0.0, 0.0), Vec3::ZERO, 10.0, 0.0, &mut out);
        bvh.ray(Vec3::new(-5.0, 0.0, 0.0), Vec3::NAN, 10.0, 0.0, &mut out);
        bvh.ray(Vec3::NAN, Vec3::X, 10.0, 0.0, &mut out);
        assert!(out.is_empty());
        bvh.ray(Vec3::new(-5.0, 0.0, 0.0), Vec3::X, 10.0, 0.0, &mut out);
        assert_eq!(out, [0]);
        bvh.build(&[Aabb::from_sphere(Vec3::new(0.0, 10.0, 0.0), 1.0)]);
        out.clear();
        bvh.ray(Vec3::new(-5.0, 0.0, 0.0), Vec3::X, 10.0, 0.0, &mut out);
        assert!(out.is_empty(), "the old box is gone");
    }
}
