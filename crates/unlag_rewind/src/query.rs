//! [`RewindQuery`]: what a ray hit at a past time, with no collider moved.

use crate::debug::{DebugBox, RewindDebug, RewindDebugEntry, RewindDebugLog};
use crate::{FrameHistory, HitShape, RewindBroadPhase, RewindSettings};
use bevy::ecs::system::SystemParam;
use bevy::prelude::*;
use bevy_rapier3d::parry::math::Pose;
use bevy_rapier3d::parry::query::{Ray, RayCast, ShapeCastOptions, cast_shapes};
use bevy_rapier3d::parry::shape::{Ball, Capsule, Cuboid, Shape};
use bevy_rapier3d::prelude::{QueryFilter, ReadRapierContext};
use unlag_core::{FramePair, LookupError, SmoothingMode, ray_capsule};
use unlag_net::{RenderedPose, SentStates};

/// How far a claimed ease may lie from one smoothing could have drawn, metres: quantised states,
/// and the moment of the jump found to within `EASE_STEP` (4 ms).
pub const EASE_SLACK: f32 = 0.05;

/// The step over the moments a claimed ease may have started at, seconds.
const EASE_STEP: f64 = 0.004;

/// How far around a claim's view time, seconds, the gaps between a character's sent states are
/// read for the interval its ease follows ([`unlag_core::ease_time`]): a client reads its
/// interval from the gaps of its last states, up to a second and a half of 1-Hz ones.
const EASE_INTERVAL_WINDOW: f64 = 1.5;

/// The longest a claimed ease may follow a hold through a spell the client heard nothing in,
/// seconds: a proxy held a second at a run is beyond the teleport distance from its curve and
/// snaps back, with no ease (a cap on the search too: a client that holds back its
/// acknowledgements cannot make it try every pair of a long history).
const MAX_UNHEARD_HOLD: f64 = 1.0;

/// How much longer than the longest starved spell a pair of states around a moment may span
/// (the states lost between them and one interval), seconds.
const EASE_PAIR_SLACK: f64 = 0.1;

/// The curve from one sent state to a later one, as [`RewindQuery::ease_explained`] tries it.
#[derive(Clone)]
struct PairSegment {
    /// Index of the later state.
    to: usize,
    /// Seconds between the two.
    duration: f64,
    /// The curve between them.
    segment: unlag_core::Segment,
    /// The faster one's speed, m/s.
    speed: f32,
}

/// Where a curve (or a dead reckoning) drew a proxy at one moment, as
/// [`RewindQuery::ease_explained`] tries it: the indices of its two states (one, twice, for a
/// dead reckoning), the place, and the faster state's speed (m/s).
#[derive(Copy, Clone)]
struct Drawn {
    from: usize,
    to: usize,
    at: Vec3,
    speed: f32,
}

/// Why a rewind query has no answer.
#[derive(Copy, Clone, Debug, PartialEq, thiserror::Error)]
pub enum RewindError {
    /// The time is older than the history kept ("too laggy").
    #[error("time {requested} s is older than the history (oldest {oldest} s)")]
    TooOld {
        /// The time asked for, seconds.
        requested: f64,
        /// The oldest recorded time, seconds.
        oldest: f64,
    },
    /// A time, origin, direction, distance or radius is NaN, infinite or negative, or the
    /// direction has no length.
    #[error("invalid ray or time")]
    Invalid,
    /// The entity is not a character with a history (unknown, or despawned since).
    #[error("not a character with a history")]
    UnknownCharacter,
    /// A claimed view names a state the server did not send that character (or no longer
    /// keeps), or blends two states in a way the client cannot have.
    #[error("claimed view does not match the states sent: {0}")]
    InvalidView(&'static str),
}

/// What a rewound ray hit.
#[derive(Clone, Debug, PartialEq)]
pub struct RewindHit {
    /// The character whose hit box was touched: the entity with the [`FrameHistory`] that
    /// recorded the box, not the hit-box child (that is `hit_box`).
    pub character: Entity,
    /// The hit-box entity.
    pub hit_box: Entity,
    /// Its bone.
    pub bone: String,
    /// Whether it is a head box.
    pub is_head: bool,
    /// The hit box's damage multiplier.
    pub damage_multiplier: f32,
    /// Where the ray (or the swept sphere's surface) touched it, metres.
    pub point: Vec3,
    /// The hit box's outward surface normal there.
    pub normal: Vec3,
    /// Distance along the ray, metres (for a swept sphere, how far its centre travelled).
    pub distance: f32,
    /// The time of the pose tested, seconds: the earlier of the two recorded frames blended,
    /// or the time of state A of a claimed view.
    pub sampled_time: f64,
}

/// What a shooter's client had on screen for one target: the two proxy states it blended and
/// how (the fields of [`RenderedPose`]). The server rebuilds that pose from the states it
/// sent; see [`RewindQuery::view_pose`].
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct ClaimedView {
    /// The target character (server entity).
    pub character: Entity,
    /// Tick of the state the pose started from.
    pub from: u32,
    /// Tick of the state it went towards (equal to `from` when holding or extrapolating).
    pub to: u32,
    /// Blend factor between them (seconds of extrapolation when `from == to`).
    pub alpha: f32,
    /// The smoothing mode of the proxy.
    pub mode: SmoothingMode,
    /// Offset of the drawn proxy from its curve, metres.
    pub ease: Vec3,
}

impl ClaimedView {
    /// The view a client's [`RenderedPose`] describes, for the server entity `character`.
    pub fn from_rendered(character: Entity, pose: &RenderedPose) -> Self {
        Self {
            character,
            from: pose.from,
            to: pose.to,
            alpha: pose.alpha,
            mode: pose.mode,
            ease: pose.ease,
        }
    }
}

/// Where characters' histories are found, by entity (a `Query<&FrameHistory>` in a system; a
/// map or slice in benchmarks and tools).
pub trait Histories {
    /// The history of `character`, if it has one.
    fn history(&self, character: Entity) -> Option<&FrameHistory>;
}

impl Histories for Query<'_, '_, &FrameHistory> {
    fn history(&self, character: Entity) -> Option<&FrameHistory> {
        self.get(character).ok()
    }
}

impl Histories for bevy::platform::collections::HashMap<Entity, FrameHistory> {
    fn history(&self, character: Entity) -> Option<&FrameHistory> {
        self.get(&character)
    }
}

/// The hit-testing core behind [`RewindQuery`], free of the ECS: the broad phase and the
/// histories it indexes. Use it directly where there is no `World` (benchmarks, tools).
pub struct RewindScene<'a, H> {
    /// The broad phase over the characters.
    pub broad: &'a RewindBroadPhase,
    /// The characters' histories.
    pub histories: &'a H,
}

/// A hit found while searching (turned into a [`RewindHit`] at the end).
#[derive(Copy, Clone, Debug)]
struct Found {
    character: Entity,
    index: usize,
    distance: f32,
    point: Vec3,
    normal: Vec3,
    sampled_time: f64,
}

/// A character posed for the query: a frame pair of its history, or a claimed view's poses.
enum Posed<'p> {
    Recorded(FramePair),
    Claimed(&'p [(Vec3, Quat)], f64),
}

fn parry_shape(shape: &HitShape) -> Box<dyn Shape> {
    match *shape {
        HitShape::Cuboid { half_extents } => Box::new(Cuboid::new(half_extents)),
        HitShape::Capsule {
            half_height,
            radius,
        } => Box::new(Capsule::new_y(half_height, radius)),
    }
}

/// A ray from `origin` along the unit vector `dir` (or a sphere of `radius` metres swept along
/// it) against a hit-box shape at `position` / `rotation`, within `max` metres: (distance,
/// point, normal). The narrow phase of every rewind query, for clients tracing against what
/// they draw.
pub fn hit_box_ray(
    shape: &HitShape,
    position: Vec3,
    rotation: Quat,
    origin: Vec3,
    dir: Vec3,
    max: f32,
    radius: f32,
) -> Option<(f32, Vec3, Vec3)> {
    shape_hit(
        shape,
        &Pose::from_parts(position, rotation),
        &Ray::new(origin, dir),
        max,
        radius,
    )
}

/// The ray (radius 0) or swept sphere against one shape at `pose`: (distance, point, normal).
fn shape_hit(
    shape: &HitShape,
    pose: &Pose,
    ray: &Ray,
    max: f32,
    radius: f32,
) -> Option<(f32, Vec3, Vec3)> {
    // A shape built by hand with a negative or NaN size has no volume: nothing to hit (parry
    // would panic or answer nonsense).
    if !shape.is_solid() {
        return None;
    }
    if radius <= 0.0 {
        let (toi, normal) = match shape {
            HitShape::Cuboid { half_extents } => {
                let hit =
                    Cuboid::new(*half_extents).cast_ray_and_get_normal(pose, ray, max, true)?;
                (hit.time_of_impact, hit.normal)
            }
            // parry casts rays on capsules with its general support-map iteration; the closed
            // form gives the same answer in a fraction of the time.
            HitShape::Capsule {
                half_height,
                radius,
            } => {
                let inverse = pose.rotation.inverse();
                let origin = inverse * (ray.origin - pose.translation);
                let (toi, n) = ray_capsule(origin, inverse * ray.dir, *half_height, *radius, max)?;
                (toi, pose.rotation * n)
            }
        };
        return Some((toi, ray.origin + ray.dir * toi, normal));
    }
    let target = parry_shape(shape);
    let hit = cast_shapes(
        &Pose::from_translation(ray.origin),
        ray.dir,
        &Ball::new(radius),
        pose,
        Vec3::ZERO,
        target.as_ref(),
        ShapeCastOptions::with_max_time_of_impact(max),
    )
    .ok()??;
    Some((
        hit.time_of_impact,
        pose.transform_point(hit.witness2),
        pose.rotation * hit.normal2,
    ))
}

/// How much the broad phase's window bounds are grown for a ray, metres: rounding between the
/// bounds recorded and the boxes posed from them.
const BROAD_PAD: f32 = 1e-3;

fn lookup_error(e: LookupError) -> RewindError {
    match e {
        LookupError::TooOld { requested, oldest } => RewindError::TooOld { requested, oldest },
        _ => RewindError::Invalid,
    }
}

impl<H: Histories> RewindScene<'_, H> {
    /// Checks a query's inputs: finite time, distance and radius, finite rays with length.
    fn validate(
        rays: &[(Vec3, Vec3)],
        max_distance: f32,
        radius: f32,
        time: f64,
    ) -> Result<(), RewindError> {
        let bad_ray =
            |(o, d): &(Vec3, Vec3)| !o.is_finite() || !d.is_finite() || d.length_squared() < 1e-12;
        if !time.is_finite()
            || !max_distance.is_finite()
            || max_distance < 0.0
            || !radius.is_finite()
            || radius < 0.0
            || rays.iter().any(bad_ray)
        {
            return Err(RewindError::Invalid);
        }
        Ok(())
    }

    /// Rays (origin, direction) at `time`, all sharing one rewind, each stopped by `wall`
    /// (the distance to the static world along a normalised ray, or its maximum when clear).
    /// `views` are characters posed as claimed instead of as recorded (box poses, then the
    /// character's own pose, then its body centre, as [`FrameHistory::poses`] keeps them).
    /// `radius` > 0 sweeps a sphere. With `debug`, every character tested is logged with its
    /// posed boxes.
    #[allow(clippy::too_many_arguments)]
    pub fn cast(
        &self,
        rays: &[(Vec3, Vec3)],
        max_distance: f32,
        radius: f32,
        time: f64,
        shooter: Option<Entity>,
        views: &[(Entity, Vec<(Vec3, Quat)>, f64)],
        wall: impl Fn(Vec3, Vec3, f32) -> f32,
        mut debug: Option<&mut Vec<RewindDebugEntry>>,
    ) -> Result<Vec<Option<RewindHit>>, RewindError> {
        Self::validate(rays, max_distance, radius, time)?;
        // Older than the judged span, or (rebuilt over whole histories) than every recorded
        // frame. Within the span, a character younger than the time has no pose then.
        let oldest = self
            .broad
            .judged_from()
            .or(self.broad.window().map(|w| w.0));
        if let Some(oldest) = oldest
            && time < oldest
        {
            return Err(RewindError::TooOld {
                requested: time,
                oldest,
            });
        }
        // Rays leaving one muzzle in a narrow cone (a shotgun's pellets) share one traversal
        // of the broad phase: the characters any of them may reach, each ray then testing
        // only those.
        let candidates = if rays.len() > 1 {
            unlag_core::Cone::around(rays, max_distance)
                .map(|cone| self.broad.in_cone(&cone, radius + BROAD_PAD))
        } else {
            None
        };
        // Several rays share one rewind: each character's frame pair is looked up once, kept
        // by its place among the cone's characters, or else in the broad phase.
        let mut pairs: Vec<Option<Option<FramePair>>> = match &candidates {
            Some(candidates) => vec![None; candidates.len()],
            None if rays.len() > 1 => vec![None; self.broad.len()],
            None => Vec::new(),
        };
        let mut answers = Vec::with_capacity(rays.len());
        let track = self.broad.track_at(time);
        for &(origin, direction) in rays {
            let dir = direction.normalize();
            let limit = wall(origin, dir, max_distance).clamp(0.0, max_distance);
            let mut tested: Vec<(Entity, Posed)> = Vec::new();
            let found = self.first_hit(
                Ray::new(origin, dir),
                limit,
                radius,
                (time, track),
                shooter,
                views,
                &mut pairs,
                candidates.as_deref(),
                debug.is_some().then_some(&mut tested),
            );
            if let Some(log) = debug.as_deref_mut() {
                log.push(
                    self.debug_entry(origin, dir, limit, radius, time, shooter, &found, &tested),
                );
            }
            answers.push(found.map(|f| self.hit(f)));
        }
        Ok(answers)
    }

    #[allow(clippy::too_many_arguments)]
    fn first_hit<'p>(
        &self,
        ray: Ray,
        limit: f32,
        radius: f32,
        (time, track): (f64, Option<crate::history::TrackAt>),
        shooter: Option<Entity>,
        views: &'p [(Entity, Vec<(Vec3, Quat)>, f64)],
        pairs: &mut [Option<Option<FramePair>>],
        candidates: Option<&[(usize, Entity)]>,
        mut tested: Option<&mut Vec<(Entity, Posed<'p>)>>,
    ) -> Option<Found> {
        let mut best: Option<Found> = None;
        // Test one posed character (`passed`: its body's capsule test was made, and passed);
        // returns how far the ray still needs to reach.
        let mut test = |character: Entity,
                        history: &FrameHistory,
                        posed: Posed<'p>,
                        passed: bool,
                        best: &mut Option<Found>|
         -> f32 {
            let reach_limit = best.as_ref().map_or(limit, |b| b.distance);
            let sampled_time = match &posed {
                Posed::Recorded(pair) => pair.from_time,
                Posed::Claimed(_, t) => *t,
            };
            let position_of = |k: usize| match &posed {
                Posed::Recorded(pair) => history.poses().position(pair, k),
                Posed::Claimed(poses, _) => poses[k].0,
            };
            let rotation_of = |k: usize| match &posed {
                Posed::Recorded(pair) => history.poses().rotation(pair, k),
                Posed::Claimed(poses, _) => poses[k].1,
            };
            // Whether the ray passes within `r` of `centre` before `max`.
            let near = |centre: Vec3, r: f32, max: f32| {
                let to_centre = centre - ray.origin;
                let along = to_centre.dot(ray.dir);
                let closest_sq = to_centre.length_squared() - along * along;
                closest_sq <= r * r && along + r >= 0.0 && along - r <= max
            };
            // Broad test at `time`: the vertical capsule around the body that holds all its
            // boxes. Most rays that reach a character's window bounds still miss it here.
            let centre = position_of(history.boxes().len() + 1);
            let (h, r) = history.body();
            if !passed
                && ray_capsule(ray.origin - centre, ray.dir, h, r + radius, reach_limit).is_none()
            {
                return reach_limit;
            }
            // Head boxes first: a ray through head and torso at the same distance is a headshot.
            for &k in history.order() {
                let max = best.as_ref().map_or(limit, |b| b.distance);
                let p = position_of(k);
                // Each box's bounding sphere before its exact shape (and its slerp).
                if !near(p, history.radii()[k] + radius, max) {
                    continue;
                }
                if let Some((distance, point, normal)) = shape_hit(
                    &history.hit_boxes()[k].shape,
                    &Pose::from_parts(p, rotation_of(k)),
                    &ray,
                    max,
                    radius,
                ) && best.as_ref().is_none_or(|b| distance < b.distance)
                {
                    *best = Some(Found {
                        character,
                        index: k,
                        distance,
                        point,
                        normal,
                        sampled_time,
                    });
                }
            }
            if let Some(tested) = tested.as_deref_mut() {
                tested.push((character, posed));
            }
            best.as_ref().map_or(limit, |b| b.distance)
        };
        // Claimed views: posed as the shooter saw them, not as recorded.
        for (character, poses, t) in views {
            if Some(*character) == shooter {
                continue;
            }
            if let Some(history) = self.histories.history(*character)
                && poses.len() == history.boxes().len() + 2
            {
                test(
                    *character,
                    history,
                    Posed::Claimed(poses, *t),
                    false,
                    &mut best,
                );
            }
        }
        // `slot`: where the character's frame pair is kept in `pairs`; `place`: its place in
        // the broad phase.
        let mut visit = |slot: usize, place: usize, character: Entity| {
            let reach = best.as_ref().map_or(limit, |b| b.distance);
            if Some(character) == shooter || views.iter().any(|v| v.0 == character) {
                return reach;
            }
            // The body's capsule test `test` makes first, on the broad phase's copy of the
            // centre: most characters a ray reaches in a crowd miss it, and are dropped
            // without their histories being read.
            let passed = match track.and_then(|at| self.broad.track_centre(place, at)) {
                Some((centre, (h, r))) => {
                    if ray_capsule(ray.origin - centre, ray.dir, h, r + radius, reach).is_none() {
                        return reach;
                    }
                    true
                }
                None => false,
            };
            let Some(history) = self.histories.history(character) else {
                return reach;
            };
            // A character younger than the time asked has no pose then.
            let pair = match pairs.get_mut(slot) {
                Some(Some(pair)) => *pair,
                Some(slot) => *slot.insert(history.poses().lookup(time).ok()),
                None => history.poses().lookup(time).ok(),
            };
            match pair {
                Some(pair) => test(character, history, Posed::Recorded(pair), passed, &mut best),
                None => reach,
            }
        };
        match candidates {
            None => self.broad.visit_ray(
                ray.origin,
                ray.dir,
                limit,
                radius + BROAD_PAD,
                |place, c| visit(place, place, c),
            ),
            // The same test of each character's window bounds the traversal makes, over the
            // characters the rays' cone found, nearest first.
            Some(candidates) => {
                let mut reach = limit;
                for (slot, &(index, character)) in candidates.iter().enumerate() {
                    if self
                        .broad
                        .entry(index, ray.origin, ray.dir, reach, radius + BROAD_PAD)
                        .is_some()
                    {
                        reach = reach.min(visit(slot, index, character));
                    }
                }
            }
        }
        best
    }

    fn hit(&self, f: Found) -> RewindHit {
        let history = self
            .histories
            .history(f.character)
            .expect("found in this query");
        let hit_box = &history.hit_boxes()[f.index];
        RewindHit {
            character: f.character,
            hit_box: history.boxes()[f.index],
            bone: hit_box.bone.clone(),
            is_head: hit_box.is_head,
            damage_multiplier: hit_box.damage_multiplier,
            point: f.point,
            normal: f.normal,
            distance: f.distance,
            sampled_time: f.sampled_time,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn debug_entry(
        &self,
        origin: Vec3,
        dir: Vec3,
        limit: f32,
        radius: f32,
        time: f64,
        shooter: Option<Entity>,
        found: &Option<Found>,
        tested: &[(Entity, Posed)],
    ) -> RewindDebugEntry {
        let mut boxes = Vec::new();
        for (character, posed) in tested {
            let Some(history) = self.histories.history(*character) else {
                continue;
            };
            for (k, hit_box) in history.hit_boxes().iter().enumerate() {
                let (position, rotation) = match posed {
                    Posed::Recorded(pair) => history.poses().pose(pair, k),
                    Posed::Claimed(poses, _) => poses[k],
                };
                boxes.push(DebugBox {
                    shape: hit_box.shape,
                    position,
                    rotation,
                    hit: found
                        .as_ref()
                        .is_some_and(|f| f.character == *character && f.index == k),
                });
            }
        }
        RewindDebugEntry {
            origin,
            end: origin + dir * found.as_ref().map_or(limit, |f| f.distance),
            radius,
            time,
            hit: found.is_some(),
            boxes,
            shooter,
            age: 0.0,
        }
    }

    /// Which of `characters` are within `radius` metres of `point` at server time `time`
    /// (seconds), in their order, with their distance: see [`RewindQuery::within`]. A
    /// character whose body capsule the broad phase's track puts farther away is passed over
    /// without its history being read (every box's bounding sphere lies inside that capsule,
    /// so none would be near: the answer is the same), and the boxes' positions alone are
    /// looked up (their rotations do not matter to a sphere).
    pub fn within(
        &self,
        characters: impl IntoIterator<Item = Entity>,
        point: Vec3,
        radius: f32,
        time: f64,
        exclude: &[Entity],
    ) -> Result<Vec<(Entity, f32)>, RewindError> {
        if !point.is_finite() || !radius.is_finite() || radius < 0.0 || !time.is_finite() {
            return Err(RewindError::Invalid);
        }
        let beyond = self.broad.bodies_beyond(time, point, radius);
        let mut near = Vec::new();
        for character in characters {
            if exclude.contains(&character) || beyond.contains(&character) {
                continue;
            }
            let Some(history) = self.histories.history(character) else {
                continue;
            };
            let Ok(pair) = history.poses().lookup(time) else {
                continue;
            };
            let distance = history
                .radii()
                .iter()
                .enumerate()
                .map(|(k, r)| (history.poses().position(&pair, k).distance(point) - r).max(0.0))
                .fold(f32::INFINITY, f32::min);
            if distance <= radius {
                near.push((character, distance));
            }
        }
        Ok(near)
    }

    /// The poses of `character`'s boxes at `time` (box poses, then the character's own).
    pub fn pose_at(&self, character: Entity, time: f64) -> Result<Vec<(Vec3, Quat)>, RewindError> {
        let history = self
            .histories
            .history(character)
            .ok_or(RewindError::UnknownCharacter)?;
        let pair = history.poses().lookup(time).map_err(lookup_error)?;
        Ok((0..history.poses().boxes())
            .map(|k| history.poses().pose(&pair, k))
            .collect())
    }
}

/// Rewound hit tests against the characters' recorded hit boxes (server).
#[derive(SystemParam)]
pub struct RewindQuery<'w, 's> {
    histories: Query<'w, 's, &'static FrameHistory>,
    characters: Query<'w, 's, Entity, With<FrameHistory>>,
    sent: Query<'w, 's, &'static SentStates>,
    hit_boxes: Query<'w, 's, (), With<crate::HitBox>>,
    broad: Res<'w, RewindBroadPhase>,
    settings: Res<'w, RewindSettings>,
    debug: Res<'w, RewindDebugLog>,
    debug_settings: Res<'w, RewindDebug>,
    rapier: ReadRapierContext<'w, 's>,
}

impl RewindQuery<'_, '_> {
    /// The ECS-free core, for callers that want it.
    pub fn scene(&self) -> RewindScene<'_, Query<'_, '_, &'static FrameHistory>> {
        RewindScene {
            broad: &self.broad,
            histories: &self.histories,
        }
    }

    /// The span shots may be judged in now, seconds (oldest, newest): the recorded frames the
    /// connected clients' views can reach ([`judged_span`](crate::judged_span)); a query
    /// older than its start is [`RewindError::TooOld`]. `None` before anything is recorded.
    pub fn judged_window(&self) -> Option<(f64, f64)> {
        self.broad.window()
    }

    /// Distance along a normalised ray to the static world as it is now (rapier colliders that
    /// are not characters, hit boxes or the shooter), or `max` when clear or when there is no
    /// rapier world.
    pub fn wall(&self, origin: Vec3, dir: Vec3, max: f32, shooter: Option<Entity>) -> f32 {
        // Without a rapier world there is nothing in the way (and asking for it would build an
        // error with a backtrace, microseconds per ray).
        if self.rapier.rapier_context.is_empty() {
            return max;
        }
        let not_a_character = |e: Entity| {
            !self.histories.contains(e) && !self.hit_boxes.contains(e) && Some(e) != shooter
        };
        let filter = QueryFilter::default()
            .exclude_sensors()
            .predicate(&not_a_character);
        self.rapier
            .single()
            .ok()
            .and_then(|ctx| ctx.cast_ray(origin, dir, max, true, filter))
            .map_or(max, |(_, toi)| toi)
    }

    fn run(
        &self,
        rays: &[(Vec3, Vec3)],
        max_distance: f32,
        radius: f32,
        time: f64,
        shooter: Option<Entity>,
        claims: &[ClaimedView],
    ) -> Result<Vec<Option<RewindHit>>, RewindError> {
        let views = claims
            .iter()
            .map(|c| {
                let mut poses = self.view_pose(c)?;
                // The body centre, where the recorded frames keep it.
                let history = self.histories.get(c.character).expect("posed above");
                let (p, r) = poses[history.boxes().len()];
                poses.push((p + r * history.centre(), r));
                Ok((c.character, poses, self.view_time(c)?))
            })
            .collect::<Result<Vec<_>, RewindError>>()?;
        let mut log = self.debug_settings.show_queries.then(Vec::new);
        let result = self.scene().cast(
            rays,
            max_distance,
            radius,
            time,
            shooter,
            &views,
            |o, d, m| self.wall(o, d, m, shooter),
            log.as_mut(),
        );
        if let Some(entries) = log {
            self.debug.push(entries);
        }
        result
    }

    /// The nearest hit box a ray from `origin` along `direction` (up to `max_distance` metres)
    /// hits at server time `time` (seconds), boxes posed as recorded then. `shooter` is never
    /// hit; the static world (rapier colliders) occludes at the current time.
    pub fn ray(
        &self,
        origin: Vec3,
        direction: Vec3,
        max_distance: f32,
        time: f64,
        shooter: Option<Entity>,
    ) -> Result<Option<RewindHit>, RewindError> {
        Ok(self
            .run(
                &[(origin, direction)],
                max_distance,
                0.0,
                time,
                shooter,
                &[],
            )?
            .pop()
            .flatten())
    }

    /// Many rays at one time (a shotgun's pellets), sharing one rewind: each character is looked
    /// up once and every ray is tested against its posed boxes. One answer per ray, in order.
    pub fn rays(
        &self,
        rays: &[(Vec3, Vec3)],
        max_distance: f32,
        time: f64,
        shooter: Option<Entity>,
    ) -> Result<Vec<Option<RewindHit>>, RewindError> {
        self.run(rays, max_distance, 0.0, time, shooter, &[])
    }

    /// Rays judged against what the shooter saw: the characters in `claims` posed exactly as
    /// its client rendered them (see [`ClaimedView`]), every other character as recorded at
    /// `time`. Any claim that does not match what the server sent is an error.
    pub fn rays_as_seen(
        &self,
        rays: &[(Vec3, Vec3)],
        max_distance: f32,
        time: f64,
        shooter: Option<Entity>,
        claims: &[ClaimedView],
    ) -> Result<Vec<Option<RewindHit>>, RewindError> {
        self.run(rays, max_distance, 0.0, time, shooter, claims)
    }

    /// A projectile's step at time `time`: the first hit box touched by a sphere of `radius`
    /// metres (0 for a point) moving from `from` to `to`. The static world occludes along the
    /// centre line.
    pub fn segment(
        &self,
        from: Vec3,
        to: Vec3,
        radius: f32,
        time: f64,
        shooter: Option<Entity>,
    ) -> Result<Option<RewindHit>, RewindError> {
        let length = (to - from).length();
        if length < 1e-6 {
            return Err(RewindError::Invalid);
        }
        Ok(self
            .run(&[(from, to - from)], length, radius, time, shooter, &[])?
            .pop()
            .flatten())
    }

    /// The characters within `radius` metres of `point` at server time `time` (seconds), with
    /// their distance: from the point to the nearest of their hit boxes' bounding spheres as
    /// recorded then (0 inside one), for splash damage. Characters in `exclude`, or whose
    /// history does not reach back to `time`, are left out. Walls are not considered (see
    /// [`RewindQuery::wall`]).
    pub fn within(
        &self,
        point: Vec3,
        radius: f32,
        time: f64,
        exclude: &[Entity],
    ) -> Result<Vec<(Entity, f32)>, RewindError> {
        self.scene()
            .within(self.characters.iter(), point, radius, time, exclude)
    }

    /// The poses of `character`'s hit boxes at `time`: (hit-box entity, position, rotation).
    pub fn pose_at(
        &self,
        character: Entity,
        time: f64,
    ) -> Result<Vec<(Entity, Vec3, Quat)>, RewindError> {
        let poses = self.scene().pose_at(character, time)?;
        let history = self.histories.get(character).expect("posed above");
        Ok(history
            .boxes()
            .iter()
            .zip(poses)
            .map(|(e, (p, r))| (*e, p, r))
            .collect())
    }

    /// The character's own pose (position, rotation) at `time`.
    pub fn root_at(&self, character: Entity, time: f64) -> Result<(Vec3, Quat), RewindError> {
        let history = self
            .histories
            .get(character)
            .map_err(|_| RewindError::UnknownCharacter)?;
        let pair = history.poses().lookup(time).map_err(lookup_error)?;
        Ok(history.poses().pose(&pair, history.boxes().len()))
    }

    /// The time of the character's newest recorded teleport at or after `since` (seconds: a
    /// tick the game marked [`unlag_net::Teleported`], a respawn or a teleporter, or a jump
    /// farther than
    /// [`RewindSettings::teleport_distance`](crate::RewindSettings::teleport_distance) in one
    /// frame), if its history still holds one.
    pub fn teleported_since(&self, character: Entity, since: f64) -> Option<f64> {
        self.histories
            .get(character)
            .ok()?
            .poses()
            .teleported_since(since)
    }

    /// The server time a claimed view shows, seconds: between its two states by the blend
    /// factor, or state A's time plus the seconds extrapolated when it holds one state.
    pub fn claimed_time(&self, view: &ClaimedView) -> Result<f64, RewindError> {
        let (a, b) = self.sent_pair(view)?;
        if !view.alpha.is_finite() {
            return Err(RewindError::Invalid);
        }
        Ok(if view.from == view.to {
            a.time + f64::from(view.alpha)
        } else {
            a.time + f64::from(view.alpha) * (b.time - a.time)
        })
    }

    /// Whether a view holding one state (`from == to`) is held before a teleport: the state
    /// the server sent next after it teleports, and not before `time` (seconds) — smoothing
    /// stays on the state before a teleport until the teleport's time rather than sweep
    /// through the world, so such a view shows that state a while.
    pub fn held_before_teleport(&self, view: &ClaimedView, time: f64) -> bool {
        let Ok(sent) = self.sent.get(view.character) else {
            return false;
        };
        view.from == view.to
            && sent
                .states()
                .find(|s| s.tick > view.from)
                .is_some_and(|next| next.teleport && next.time >= time)
    }

    /// Whether a claimed view's ease (its offset from the curve) is one the smoothing plugin
    /// could have drawn at `view_time` (server seconds): within [`EASE_SLACK`] of nothing, or
    /// of a part (0–1, as the ease decays) of what extrapolating one sent state got wrong at a
    /// moment within twice that jump's ease time before: [`RewindSettings::max_ease_time`], or
    /// longer for a long jump, paced by the speed of the states it lies between
    /// ([`unlag_core::catch_up_time`], as the client paces it). A client starved of states
    /// runs on the newest it has (extrapolated for up to
    /// [`RewindSettings::max_claimed_extrapolation`], then held); when newer ones arrive it
    /// eases from there back onto the curve. The states tried are those a client could have
    /// been starved on then: extrapolated at most that long, held through up to two of their
    /// intervals (a state lost between), or through the gap between the claim's own two states
    /// (which shows the client had none between them); and, given what the client
    /// acknowledged (`heard`: [`unlag_net::StatesSentTo::heard`]), the state it heard last
    /// before a spell in which it acknowledged no state message at all (a burst of losses),
    /// through that spell, up to a second. The curve is tried between any two sent states
    /// around the moment that such a spell could leave a client with; in `Extrapolate` mode,
    /// the dead reckoning of one of the three newest states. So an honest offset lies on one
    /// of a few lines fixed by how the target really moved, and a client cannot pick its
    /// direction to pull a hit box onto its ray (a magnet): the combat server judges an
    /// unexplained ease as none, on the curve.
    /// In `Hermite` and `Linear` modes an ease is also explained by a part of the difference
    /// between two such curves at a moment, one between two states and one between two
    /// states inside those (a state between them came late: the client eases from the curve
    /// it drew onto the new one).
    /// (An ease left over from a mode switch, which the server does not see, or from two
    /// starved spells or late states within one ease, or, in `Extrapolate` mode, a new
    /// state's jump on top of what is left of a long one, is judged as none too.)
    pub fn ease_explained(
        &self,
        view: &ClaimedView,
        view_time: f64,
        heard: Option<&unlag_net::HeardTicks>,
    ) -> bool {
        let ease = view.ease;
        if ease.length() <= EASE_SLACK {
            return true;
        }
        if !ease.is_finite()
            || !view_time.is_finite()
            || ease.length() > self.settings.max_claimed_ease
        {
            return false;
        }
        let Ok(sent) = self.sent.get(view.character) else {
            return false;
        };
        // A slow proxy's ease lasts longer ([`unlag_core::ease_time`]): at the longest
        // interval between its states on its grid around the view (what the client read its
        // interval from, or longer; a state off the grid tells no interval).
        let interval = sent
            .states()
            .filter(|s| {
                !s.off_grid
                    && (view_time - EASE_INTERVAL_WINDOW..=view_time + EASE_INTERVAL_WINDOW)
                        .contains(&s.time)
            })
            .map(|s| s.time)
            .fold((None, 0.0f64), |(last, longest), t| {
                (Some(t), last.map_or(longest, |l: f64| longest.max(t - l)))
            })
            .1;
        let ease_time = unlag_core::ease_time(self.settings.max_ease_time, interval);
        // A jump is tried back to twice its ease's time: longer for a long one, paced by the
        // speed of the states it lies between as the client paces it (a hold of metres,
        // eased in 0.1 s, swept at ten times the proxy's speed). The moments are tried back
        // to twice the longest an ease can last.
        let lasts = |jump: Vec3, speed: f32| {
            2.0 * f64::from(unlag_core::catch_up_time(ease_time, jump.length(), speed))
        };
        let span = lasts(Vec3::X * self.settings.max_claimed_ease, 0.0);
        let reach = f64::from(self.settings.max_claimed_extrapolation.max(0.0));
        // The claim's own pair shows the client had none of the states between them: it may
        // have run on the older one for that long.
        let gap = match self.sent_pair(view) {
            Ok((a, b)) => (b.time - a.time).max(0.0),
            Err(_) => return false,
        };
        let states: Vec<&unlag_core::ProxyState> = sent
            .states()
            .filter(|s| (view_time - span - gap - 4.0..=view_time + gap + 4.0).contains(&s.time))
            .collect();
        // How long a state may have been run on: its extrapolation, two of its intervals, or
        // the claim's gap. (Its interval: to the next state on the grid, or from the one
        // before; one off the grid may be the newest a client had until the grid's next.)
        // Or, with `heard`, one it heard, through a spell it heard nothing in after it (a
        // burst of losses took every datagram): until the first state of this character at or
        // after the tick it heard again, and two of its intervals on (the state that ended
        // the hold came late).
        let held_for = |i: usize| {
            let s = states[i];
            let interval = states[i + 1..]
                .iter()
                .find(|o| !o.off_grid)
                .or(states[..i].iter().rev().find(|o| !o.off_grid))
                .map_or(0.0, |o| (o.time - s.time).abs());
            let held = reach.max(2.0 * interval).max(gap);
            // Only the state it heard last before the spell (one it did not hear it never ran
            // on, and a search from every state of a long spell costs ten times more).
            // (Heard nothing since: still held, with no ease yet.)
            let unheard = heard
                .filter(|h| h.heard_at(s.tick))
                .and_then(|h| h.first_after(s.tick).flatten())
                .and_then(|tick| states[i + 1..].iter().find(|o| o.tick >= tick))
                .map_or(0.0, |o| {
                    (o.time - s.time + 2.0 * interval).min(MAX_UNHEARD_HOLD)
                });
            (held, unheard)
        };
        let (held_for, unheard): (Vec<f64>, Vec<f64>) = (0..states.len()).map(held_for).unzip();
        let longest = held_for.iter().copied().fold(reach, f64::max);
        // The longest hold through an unheard spell, where longer than any other.
        let longest_unheard = unheard.iter().copied().fold(longest, f64::max);
        // Where a client starved on `s` draws it at `t` (as the smoothing plugin does).
        let run_on = |s: &unlag_core::ProxyState, t: f64| {
            unlag_core::replay(view.mode, s, s, (t - s.time).clamp(0.0, reach) as f32).0
        };
        // A part of a jump shorter than the ease less the slack cannot be it.
        let shortest = ease.length() - EASE_SLACK;
        let explains = |jump: Vec3, age: f64, speed: f32| {
            let squared = jump.length_squared();
            if squared < shortest * shortest {
                return false;
            }
            // Older than the base ease's two spans, only a long jump's paced ease is left, and
            // only as much of it as eases out over twice its time: `(1 − age / (2 T))²`, where
            // the client's is `(1 − age / T)²` (of the same jump, T its catch-up time). A
            // magnet cannot lean on a long jump long past for any part it likes.
            let most = if age > 2.0 * f64::from(ease_time) {
                let left = 1.0 - age / lasts(jump, speed);
                if left <= 0.0 {
                    return false;
                }
                (left * left) as f32
            } else {
                1.0
            };
            let part = if squared > 1e-12 {
                (ease.dot(jump) / squared).clamp(0.0, most)
            } else {
                0.0
            };
            (ease - jump * part).length() <= EASE_SLACK
        };
        // A jump a part of which is the ease reaches at least `shortest` along it (with the
        // ease `part × jump + r`, `|r| ≤ EASE_SLACK`): positions whose spread along the ease is
        // less than that hold no such jump between them, and are not tried pair by pair.
        let along = ease.normalize_or_zero();
        // (A millimetre's margin for the rounding of positions metres from the origin.)
        let reaches = |spread: f32| spread >= shortest - 1e-3;
        let spread = |curves: &[Drawn]| {
            curves
                .iter()
                .map(|c| c.at.dot(along))
                .fold((f32::INFINITY, f32::NEG_INFINITY), |(low, high), x| {
                    (low.min(x), high.max(x))
                })
        };
        let steps = (span / EASE_STEP).ceil() as usize;
        let mut curves: Vec<Drawn> = Vec::with_capacity(32);
        let mut segments: Vec<Option<Vec<PairSegment>>> = vec![None; states.len()];
        // Newest first: an honest ease is most often young, and the search stops at it.
        for step in (0..=steps).rev() {
            let t = view_time - span + span * step as f64 / steps.max(1) as f64;
            let age = view_time - t;
            let next = states.partition_point(|s| s.time <= t);
            if next == 0 {
                continue;
            }
            // Where the curve was at `t` (`Extrapolate`: a dead reckoning).
            curves.clear();
            if view.mode == SmoothingMode::Extrapolate {
                curves.extend((next.saturating_sub(3)..next).map(|i| Drawn {
                    from: i,
                    to: i,
                    at: run_on(states[i], t),
                    speed: unlag_core::catch_up_speed([states[i]]),
                }));
            } else {
                // The pair around `t` the client had: neighbours, or across states lost
                // between them, as many as it may have been starved for.
                for (ia, sa) in states[..next].iter().enumerate().rev() {
                    if t - sa.time > longest_unheard {
                        break;
                    }
                    let reach_a = longest.max(unheard[ia]);
                    if t - sa.time > reach_a {
                        continue;
                    }
                    // Its curves to every state after it, set up once: the same pairs are
                    // tried at many moments.
                    let from_a = segments[ia].get_or_insert_with(|| {
                        states[ia + 1..]
                            .iter()
                            .enumerate()
                            .take_while(|(_, sb)| sb.time - sa.time <= reach_a + EASE_PAIR_SLACK)
                            .filter(|(_, sb)| !sb.teleport && sb.time > sa.time)
                            .map(|(i, sb)| PairSegment {
                                to: ia + 1 + i,
                                duration: sb.time - sa.time,
                                segment: unlag_core::Segment::replay(view.mode, sa, sb),
                                speed: unlag_core::catch_up_speed([*sa, *sb]),
                            })
                            .collect()
                    });
                    for pair in from_a.iter().filter(|p| p.to >= next) {
                        let alpha = ((t - sa.time) / pair.duration) as f32;
                        curves.push(Drawn {
                            from: ia,
                            to: pair.to,
                            at: pair.segment.position(alpha),
                            speed: pair.speed,
                        });
                    }
                }
            }
            let (low, high) = spread(&curves);
            // A state that came late, between the two the client was drawing between,
            // moved the view onto the shorter curve inside them, eased from the longer.
            if matches!(view.mode, SmoothingMode::Hermite | SmoothingMode::Linear)
                && reaches(high - low)
                && curves.iter().any(|old| {
                    reaches(old.at.dot(along) - low)
                        && curves.iter().any(|new| {
                            old.from <= new.from
                                && new.to <= old.to
                                && (old.from, old.to) != (new.from, new.to)
                                && explains(old.at - new.at, age, old.speed.max(new.speed))
                        })
                })
            {
                return true;
            }
            // Where a client starved on one of the states before `t` drew it.
            for (i, s) in states[..next].iter().enumerate().rev() {
                if t - s.time > longest_unheard {
                    break;
                }
                if t - s.time > held_for[i].max(unheard[i]) {
                    continue;
                }
                let drawn = run_on(s, t);
                let speed = unlag_core::catch_up_speed([*s]);
                if reaches(drawn.dot(along) - low)
                    && curves
                        .iter()
                        .any(|c| explains(drawn - c.at, age, speed.max(c.speed)))
                {
                    return true;
                }
            }
        }
        false
    }

    /// The two states a claimed view names, as the server sent them.
    fn sent_pair(
        &self,
        view: &ClaimedView,
    ) -> Result<(&unlag_core::ProxyState, &unlag_core::ProxyState), RewindError> {
        let sent = self
            .sent
            .get(view.character)
            .map_err(|_| RewindError::UnknownCharacter)?;
        let a = sent
            .get(view.from)
            .ok_or(RewindError::InvalidView("state A was not sent"))?;
        let b = sent
            .get(view.to)
            .ok_or(RewindError::InvalidView("state B was not sent"))?;
        Ok((a, b))
    }

    /// The time of a claimed view's state A, seconds.
    fn view_time(&self, view: &ClaimedView) -> Result<f64, RewindError> {
        Ok(self.sent_pair(view)?.0.time)
    }

    /// The poses of a character's boxes as a client rendered it (see [`ClaimedView`]), then
    /// the character's own pose: its root replayed over the states the server sent with
    /// [`unlag_core::replay`], plus the claimed ease; each box placed relative to the root as
    /// recorded at state A's tick and at state B's, blended by [`unlag_core::body_blend`].
    /// Exact when the game poses boxes from what the states show and blends them the same
    /// way, as [`HitBoxLayout`](crate::HitBoxLayout) does.
    pub fn view_pose(&self, view: &ClaimedView) -> Result<Vec<(Vec3, Quat)>, RewindError> {
        if !view.alpha.is_finite() || !view.ease.is_finite() {
            return Err(RewindError::Invalid);
        }
        if view.ease.length() > self.settings.max_claimed_ease {
            return Err(RewindError::InvalidView("ease too long"));
        }
        let history = self
            .histories
            .get(view.character)
            .map_err(|_| RewindError::UnknownCharacter)?;
        let (a, b) = self.sent_pair(view)?;
        if view.from == view.to {
            if !(0.0..=self.settings.max_claimed_extrapolation).contains(&view.alpha) {
                return Err(RewindError::InvalidView("extrapolated too far"));
            }
        } else if view.to < view.from || !(0.0..=1.0).contains(&view.alpha) || b.teleport {
            return Err(RewindError::InvalidView("impossible blend"));
        }
        let (root_p, root_r) = unlag_core::replay(view.mode, a, b, view.alpha);
        let root_p = root_p + view.ease;
        let poses = history.poses();
        // A state older than the history still places the boxes, as the oldest frame
        // recorded has them about the root (which is replayed from the states sent): a client
        // that drew a proxy across a burst of losses seconds long (between the states either
        // side of it, or held on the one before) drew it from such a state, and its shot is
        // judged as drawn, not refused. (The claimed moment itself is checked against the
        // view time before.)
        let oldest = poses.span().map(|s| s.0);
        let frame = |time: f64| {
            let time = oldest.map_or(time, |oldest| time.max(oldest));
            poses.frame_at(time).ok_or_else(|| RewindError::TooOld {
                requested: time,
                oldest: oldest.unwrap_or(f64::NAN),
            })
        };
        let (frame_a, frame_b) = (frame(a.time)?, frame(b.time)?);
        let n = history.boxes().len();
        // The character as recorded at a frame, inverted once for all its boxes.
        let root_at = |frame: &unlag_core::FramePair| {
            let (rec_p, rec_r) = poses.pose(frame, n);
            (rec_p, rec_r.inverse())
        };
        // Each box relative to the character as recorded at a frame.
        let local = |frame: &unlag_core::FramePair, (rec_p, inverse): (Vec3, Quat), k: usize| {
            let (p, r) = poses.pose(frame, k);
            (inverse * (p - rec_p), inverse * r)
        };
        let w = unlag_core::body_blend(view.from, view.to, view.alpha);
        let (at_a, at_b) = (root_at(&frame_a), (w > 0.0).then(|| root_at(&frame_b)));
        // Room for the boxes, the character's own pose and the body centre `run` adds.
        let mut out: Vec<(Vec3, Quat)> = Vec::with_capacity(n + 2);
        out.extend((0..n).map(|k| {
            let (pa, ra) = local(&frame_a, at_a, k);
            let (local_p, local_r) = match at_b {
                Some(at_b) => {
                    let (pb, rb) = local(&frame_b, at_b, k);
                    (pa.lerp(pb, w), ra.slerp(rb, w))
                }
                None => (pa, ra),
            };
            (root_p + root_r * local_p, root_r * local_r)
        }));
        out.push((root_p, root_r));
        Ok(out)
    }
}
