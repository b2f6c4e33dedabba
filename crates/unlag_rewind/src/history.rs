//! Recording: each character's [`FrameHistory`] and the [`RewindBroadPhase`] over them.

use crate::{HitBox, RewindSettings};
use bevy::prelude::*;
use lightyear::core::tick::TickDuration;
use lightyear::prelude::*;
use unlag_core::{Aabb, Bvh, PoseHistory, RecordError};
use unlag_net::Authority;

/// Frames per chunk of a history's bounds: the window's bounds are the union of its chunks,
/// and a new frame only recomputes its own chunk.
const CHUNK: usize = 8;

/// Slack on a character's body capsule, metres (recording grows the capsule to hold every box
/// it sees, so this only absorbs rounding).
const BODY_SLACK: f32 = 0.02;

/// On the server, per character with hit boxes: its boxes and the history of their poses.
#[derive(Component, Clone, Debug)]
pub struct FrameHistory {
    /// Box poses per tick, one per box in the order of [`FrameHistory::boxes`], then the
    /// character's own pose.
    history: PoseHistory,
    boxes: Vec<Entity>,
    hit_boxes: Vec<HitBox>,
    /// Head boxes first: the order boxes are tested in.
    order: Vec<usize>,
    /// Bounding radius of each box's shape, metres.
    radii: Vec<f32>,
    /// The vertical capsule around the body's centre that holds every box in every recorded
    /// pose: (half height of its axis, radius), metres. Grows if an animation takes a box
    /// farther.
    body: (f32, f32),
    /// The body's centre relative to the character, metres.
    centre: Vec3,
    scratch: Vec<(Vec3, Quat)>,
    last_root: Option<Vec3>,
    /// Bounds of the body centre over each chunk of [`CHUNK`] storage slots.
    chunks: Vec<Aabb>,
    /// The newest time recorded in each chunk, seconds (`NEG_INFINITY` while empty).
    chunk_newest: Vec<f64>,
}

impl FrameHistory {
    /// A history of `frames` ticks for these boxes (entity, hit box, rest pose relative to the
    /// character), all storage allocated now.
    pub fn new(boxes: Vec<(Entity, HitBox, Transform)>, frames: usize) -> Self {
        // The body's centre: the middle of the rest pose's extent, so the sphere around it
        // that holds every box is as small as the body allows.
        let extent = boxes.iter().fold(Aabb::EMPTY, |a, (_, b, t)| {
            a.union(&Aabb::from_sphere(t.translation, b.shape.bounding_radius()))
        });
        let centre = if boxes.is_empty() {
            Vec3::ZERO
        } else {
            extent.centre()
        };
        let mut body = (0.0, 0.0);
        for (_, b, t) in &boxes {
            grow_body(&mut body, t.translation - centre, b.shape.bounding_radius());
        }
        let body = (body.0 + BODY_SLACK, body.1 + BODY_SLACK);
        let mut order: Vec<usize> = (0..boxes.len()).collect();
        order.sort_by_key(|&i| !boxes[i].1.is_head);
        // One pose per box, then the character's own, then its body centre.
        let history = PoseHistory::new(boxes.len() + 2, frames);
        Self {
            centre,
            chunks: vec![Aabb::EMPTY; history.capacity().div_ceil(CHUNK)],
            chunk_newest: vec![f64::NEG_INFINITY; history.capacity().div_ceil(CHUNK)],
            history,
            radii: boxes
                .iter()
                .map(|(_, b, _)| b.shape.bounding_radius())
                .collect(),
            scratch: Vec::with_capacity(boxes.len() + 2),
            order,
            body,
            last_root: None,
            boxes: boxes.iter().map(|(e, ..)| *e).collect(),
            hit_boxes: boxes.into_iter().map(|(_, b, _)| b).collect(),
        }
    }

    /// The recorded poses: the boxes, then the character's own pose, then its body centre.
    pub fn poses(&self) -> &PoseHistory {
        &self.history
    }

    /// The hit-box entities, in the order of the poses.
    pub fn boxes(&self) -> &[Entity] {
        &self.boxes
    }

    /// The hit boxes, in the order of the poses.
    pub fn hit_boxes(&self) -> &[HitBox] {
        &self.hit_boxes
    }

    /// Box indices, head boxes first.
    pub(crate) fn order(&self) -> &[usize] {
        &self.order
    }

    /// The body centre relative to the character, metres.
    pub fn centre(&self) -> Vec3 {
        self.centre
    }

    /// Bounding radius of each box's shape, metres.
    pub(crate) fn radii(&self) -> &[f32] {
        &self.radii
    }

    /// The vertical capsule around the body centre (the last pose of each frame) that holds
    /// all its boxes: (half height of its axis, radius), metres.
    pub fn body(&self) -> (f32, f32) {
        self.body
    }

    /// Bytes held by this history.
    pub fn memory_bytes(&self) -> usize {
        self.history.memory_bytes()
            + self.boxes.capacity() * size_of::<Entity>()
            + self.hit_boxes.capacity() * size_of::<HitBox>()
            + self.order.capacity() * size_of::<usize>()
            + self.scratch.capacity() * size_of::<(Vec3, Quat)>()
            + self.radii.capacity() * size_of::<f32>()
            + self.chunks.capacity() * size_of::<Aabb>()
    }

    /// Records the frame at `time` (seconds): every box posed as `root` times its local
    /// transform (from `local`, by box entity). The frame is a teleport (never interpolated
    /// across) when `moved_instantly` (the game said so: [`unlag_net::Teleported`]) or the
    /// root jumped farther than `teleport_distance` metres since the last frame.
    pub fn record(
        &mut self,
        time: f64,
        root: &Transform,
        (teleport_distance, moved_instantly): (f32, bool),
        local: impl Fn(Entity) -> Transform,
    ) -> Result<(), RecordError> {
        self.scratch.clear();
        let centre = root.transform_point(self.centre);
        let mut body = self.body;
        for (b, radius) in self.boxes.iter().zip(&self.radii) {
            let global = root.mul_transform(local(*b));
            grow_body(&mut body, global.translation - centre, *radius);
            self.scratch.push((global.translation, global.rotation));
        }
        self.scratch.push((root.translation, root.rotation));
        self.scratch.push((centre, root.rotation));
        let teleport = self.last_root.is_some_and(|last| {
            moved_instantly || last.distance(root.translation) > teleport_distance
        });
        self.history.record(time, teleport, &self.scratch)?;
        self.last_root = Some(root.translation);
        self.body = body;
        if let Some(slot) = self.history.newest_slot() {
            let centre_index = self.boxes.len() + 1;
            let chunk = slot / CHUNK;
            let end = (chunk * CHUNK + CHUNK).min(self.history.capacity());
            let mut bounds = Aabb::EMPTY;
            for s in chunk * CHUNK..end {
                if self.history.slot_is_recorded(s) {
                    let p = self.history.position_at_slot(s, centre_index);
                    bounds.min = bounds.min.min(p);
                    bounds.max = bounds.max.max(p);
                }
            }
            self.chunks[chunk] = bounds;
            // The frame just recorded is the chunk's newest (the ring overwrites the oldest).
            self.chunk_newest[chunk] = time;
        }
        Ok(())
    }

    /// The box around everywhere the character's boxes were over the whole window, or `None`
    /// while nothing is recorded.
    pub fn window_bounds(&self) -> Option<Aabb> {
        self.window_bounds_since(f64::NEG_INFINITY)
    }

    /// The box around everywhere the character's boxes were from server time `since`
    /// (seconds) on (whole chunks of `CHUNK` (8) frames: a little earlier too), or `None` while
    /// nothing is recorded.
    pub fn window_bounds_since(&self, since: f64) -> Option<Aabb> {
        if self.history.is_empty() {
            return None;
        }
        let b = self
            .chunks
            .iter()
            .zip(&self.chunk_newest)
            .filter(|(_, newest)| **newest >= since)
            .fold(Aabb::EMPTY, |a, (c, _)| a.union(c));
        if b.min.x > b.max.x {
            return None;
        }
        let (h, r) = self.body;
        let grow = Vec3::new(r, h + r, r);
        Some(Aabb {
            min: b.min - grow,
            max: b.max + grow,
        })
    }
}

/// Grows a vertical capsule (half height, radius) about the origin to hold a sphere of
/// `radius` at `offset`.
#[inline]
fn grow_body(body: &mut (f32, f32), offset: Vec3, radius: f32) {
    body.0 = body.0.max(offset.y.abs());
    // Usually inside already: compare squares, and take the root only to grow.
    let horizontal_sq = offset.x * offset.x + offset.z * offset.z;
    let room = body.1 - radius;
    if room < 0.0 || horizontal_sq > room * room {
        body.1 = body.1.max(horizontal_sq.sqrt() + radius);
    }
}

/// Memory and size of the lag-compensation history (server), updated every tick.
#[derive(Resource, Clone, Debug, Default, PartialEq)]
pub struct RewindStats {
    /// Characters recorded.
    pub characters: usize,
    /// Hit boxes recorded, all characters.
    pub boxes: usize,
    /// Frames each history holds.
    pub frames_per_character: usize,
    /// Bytes held by all histories and the broad phase.
    pub memory_bytes: usize,
    /// Frames refused (non-finite poses, same tick twice), all time.
    pub refused_frames: u64,
}

/// A BVH over every character's bounds across the whole history window, rebuilt after each
/// recorded tick: a query visits only the characters its ray can reach. It answers for the
/// histories as they were at its last rebuild (the plugin's recording rebuilds it at once):
/// one who records a history by hand rebuilds it before querying. A character's history is
/// only ever recorded into (as the plugin does): a tool that gives a character another history
/// holding frames of times already recorded rebuilds a new broad phase.
#[derive(Resource, Clone, Debug, Default)]
pub struct RewindBroadPhase {
    bvh: Bvh,
    entities: Vec<Entity>,
    bounds: Vec<Aabb>,
    window: Option<(f64, f64)>,
    /// Where the judged span starts, seconds (`None` when rebuilt over whole histories).
    judged_from: Option<f64>,
    /// The characters the tree was built over, and refits since.
    built_for: Vec<Entity>,
    refits: u32,
    /// Every character's body centre along the judged span, in one place: see
    /// [`BodyTrack`].
    track: BodyTrack,
}

/// Every character's body centre at each recorded frame of the judged span (and the one
/// before it), kept side by side in the broad phase, so that a ray can drop most of the
/// characters whose window bounds it enters without touching their histories: the test of
/// the body's capsule at the time asked, made on exactly the centre the history's lookup
/// gives (the same frames, the same blend), is the one the query makes next. In a crowd a ray
/// enters many window bounds (28 a ray on average at 256 players in the report's arena, 5 of
/// them past the capsule, counted with temporary counters): each history looked up costs a
/// handful of cache misses, the track one.
///
/// A character counts only while the frames it had on the span when the track was made, and
/// each it was recorded in since, lie on the track's frames (the plugin records every
/// character in the same ticks); one whose frames do not (recorded apart, by a tool) gets no
/// body, and is looked up as before. Like the tree's bounds, the track is what the histories
/// held at the last rebuild: a history recorded since must be rebuilt over before it is
/// queried (the plugin's recording does both).
///
/// Kept from tick to tick: a rebuild over the same characters adds each one's frames since
/// the last (its newest, still in cache from its recording) and drops the frames the span
/// left behind; over others, or once [`REFITS_PER_BUILD`] rebuilds were kept, it is made
/// afresh from the histories (reading each one's frames over the span: ~0.4 ms at 256
/// characters).
#[derive(Clone, Debug, Default)]
struct BodyTrack {
    /// The track's frame times, seconds, oldest first: the frames of a character recorded in
    /// the most common newest frame (the most frames on the span among those), from the last
    /// one at or before the span's start when made (or its oldest), on to the newest.
    times: std::collections::VecDeque<f64>,
    /// Slots in each row: the track is made afresh before its frames would run past them.
    capacity: usize,
    /// The slot of `times[0]` in every row (frames dropped from the front since made afresh).
    head: usize,
    /// By place and slot (`place * capacity + head + frame`): the body centre, metres (NaN
    /// where the character has no frame), and whether that frame was recorded as a teleport.
    centres: Vec<(Vec3, bool)>,
    /// By place: the body's capsule (half height, radius; metres) while its frames lie on the
    /// track.
    bodies: Vec<Option<(f32, f32)>>,
    /// The characters the rows are for, by place.
    characters: Vec<Entity>,
    /// Rebuilds kept from the last since it was made afresh.
    kept: u32,
}

/// Where a time falls on the [`BodyTrack`]'s frames: the frame at or before it, and the blend
/// to the next as a history's lookup computes it (`None`: at or past the newest).
#[derive(Copy, Clone, Debug)]
pub(crate) struct TrackAt {
    frame: usize,
    alpha: Option<f32>,
}

impl BodyTrack {
    /// Rebuilt over `characters` (in their broad-phase places) from server time `since` on.
    fn rebuild(&mut self, characters: &[(Entity, &FrameHistory)], since: f64) {
        let same = self.characters.len() == characters.len()
            && self
                .characters
                .iter()
                .zip(characters)
                .all(|(a, (b, _))| a == b);
        if !(same && self.kept < REFITS_PER_BUILD && self.extend(characters, since)) {
            self.afresh(characters, since);
        }
    }

    /// A history whose newest frame is the most common among `characters`': with
    /// `since`, the one with the most frames from `since` on among those (made afresh);
    /// without, the first (going on: only its newest frames are read).
    fn reference<'a>(
        characters: &[(Entity, &'a FrameHistory)],
        since: Option<f64>,
    ) -> Option<&'a FrameHistory> {
        let newest = |h: &FrameHistory| h.poses().span().map_or(f64::NEG_INFINITY, |s| s.1);
        let mut times: Vec<f64> = characters.iter().map(|(_, h)| newest(h)).collect();
        times.sort_by(f64::total_cmp);
        let shared = times
            .chunk_by(|a, b| a == b)
            .max_by_key(|run| run.len())
            .map(|run| run[0]);
        let mut recorded = characters
            .iter()
            .map(|(_, h)| *h)
            .filter(|h| Some(newest(h)) == shared);
        let Some(since) = since else {
            return recorded.next();
        };
        let on_span = |h: &FrameHistory| {
            h.poses()
                .frames_newest_first()
                .take_while(|(time, ..)| *time >= since)
                .count()
        };
        recorded.max_by_key(|h| on_span(h))
    }

    /// Made afresh from the histories.
    fn afresh(&mut self, characters: &[(Entity, &FrameHistory)], since: f64) {
        self.times.clear();
        self.centres.clear();
        self.bodies.clear();
        self.characters.clear();
        self.head = 0;
        self.kept = 0;
        if let Some(reference) = Self::reference(characters, Some(since)) {
            for (time, ..) in reference.poses().frames_newest_first() {
                self.times.push_front(time);
                if time <= since {
                    break;
                }
            }
        }
        // Room to go on from tick to tick until it is made afresh anyway (and to grow a
        // little): a frame a tick.
        self.capacity = 2 * self.times.len() + REFITS_PER_BUILD as usize;
        self.centres.resize(
            characters.len() * self.capacity,
            (Vec3::splat(f32::NAN), false),
        );
        let first = self.times.front().copied().unwrap_or(f64::INFINITY);
        for (place, (entity, history)) in characters.iter().enumerate() {
            self.characters.push(*entity);
            let on_track = self.take_frames(place, history, |time| time >= first);
            self.bodies.push(on_track.then(|| history.body()));
        }
    }

    /// Goes on from the last rebuild over the same characters: the reference's frames since
    /// become the track's, each character's frames since go in its row, and the frames before
    /// the span are dropped (all but the last at or before its start). False when it cannot
    /// (no frames yet, no reference, or the rows are full): make it afresh.
    fn extend(&mut self, characters: &[(Entity, &FrameHistory)], since: f64) -> bool {
        let Some(&last) = self.times.back() else {
            return false;
        };
        let Some(reference) = Self::reference(characters, None) else {
            return false;
        };
        let mut new: Vec<f64> = reference
            .poses()
            .frames_newest_first()
            .map(|(time, ..)| time)
            .take_while(|&time| time > last)
            .collect();
        new.reverse();
        // Frames the span left behind (all but the last at or before its start).
        while self.times.len() >= 2 && self.times[1] <= since {
            self.times.pop_front();
            self.head += 1;
        }
        // (The rows' slots past the newest frame were never written since the track was made
        // afresh: they read as no frame until a character's frame goes in.)
        if self.head + self.times.len() + new.len() > self.capacity {
            return false;
        }
        self.times.extend(new);
        for (place, (_, history)) in characters.iter().enumerate() {
            if self.bodies[place].is_some() {
                let on_track = self.take_frames(place, history, |time| time > last);
                self.bodies[place] = on_track.then(|| history.body());
            }
        }
        self.kept += 1;
        true
    }

    /// Puts `history`'s frames from the newest back to the first not `newer` than wanted in
    /// row `place`; false if one of them is not on the track.
    fn take_frames(
        &mut self,
        place: usize,
        history: &FrameHistory,
        newer: impl Fn(f64) -> bool,
    ) -> bool {
        let centre_index = history.boxes().len() + 1;
        let row = place * self.capacity;
        let mut k = self.times.len();
        for (time, slot, teleport) in history.poses().frames_newest_first() {
            if !newer(time) {
                break;
            }
            while k > 0 && self.times[k - 1] > time {
                k -= 1;
            }
            if k == 0 || self.times[k - 1] != time {
                return false;
            }
            k -= 1;
            let position = history.poses().position_at_slot(slot, centre_index);
            self.centres[row + self.head + k] = (position, teleport);
        }
        true
    }

    /// Where server time `time` (seconds) falls on the track, if within it.
    fn at(&self, time: f64) -> Option<TrackAt> {
        let (&first, &last) = (self.times.front()?, self.times.back()?);
        if !time.is_finite() || time < first {
            return None;
        }
        if time >= last {
            return Some(TrackAt {
                frame: self.times.len() - 1,
                alpha: None,
            });
        }
        // The last frame at or before `time` (one exists: `first <= time < last`).
        let frame = self.times.partition_point(|&t| t <= time) - 1;
        let (ta, tb) = (self.times[frame], self.times[frame + 1]);
        Some(TrackAt {
            frame,
            alpha: Some(((time - ta) / (tb - ta)) as f32),
        })
    }

    /// The body centre (metres) and capsule of the character at `place` at `at`, exactly as
    /// its history's lookup and blend place it, if its row has the frames that takes.
    fn centre(&self, place: usize, at: TrackAt) -> Option<(Vec3, (f32, f32))> {
        let body = (*self.bodies.get(place)?)?;
        let row = place * self.capacity;
        let slot = |frame: usize| row + self.head + frame;
        let (a, _) = self.centres[slot(at.frame)];
        if a.x.is_nan() {
            return None;
        }
        let Some(alpha) = at.alpha else {
            return Some((a, body));
        };
        let (b, teleport) = self.centres[slot(at.frame + 1)];
        if b.x.is_nan() {
            return None;
        }
        // As `PoseHistory::lookup` and `position`: across a teleport the nearer frame alone;
        // else the frame at or before, blended on unless exactly on it.
        let centre = if teleport {
            if alpha < 0.5 { a } else { b }
        } else if alpha <= 0.0 {
            a
        } else {
            a.lerp(b, alpha)
        };
        Some((centre, body))
    }
}

/// How much farther than asked a body's capsule must lie for
/// [`RewindBroadPhase::bodies_beyond`] to rule its character out, metres. The capsule holds
/// every box's bounding sphere exactly where a box grew it (with [`BODY_SLACK`] to spare
/// elsewhere), and a blended pose's boxes sit in it to within f32 rounding (micrometres at a
/// kilometre from the origin): this covers that rounding, so the answer never changes.
const BEYOND_MARGIN: f32 = 1e-3;

/// Refits of the broad phase's tree between full rebuilds: characters move a few metres a
/// second, so the tree's split stays good for a while (half a second at 60 Hz).
const REFITS_PER_BUILD: u32 = 30;

impl RewindBroadPhase {
    /// Rebuilds it over these characters (refitting the tree when they are the ones it was
    /// built over).
    pub fn rebuild<'a>(
        &mut self,
        characters: impl IntoIterator<Item = (Entity, &'a FrameHistory)>,
    ) {
        self.rebuild_since(characters, f64::NEG_INFINITY);
    }

    /// Rebuilds it over these characters' frames from server time `since` on (seconds): the
    /// window starts there even when the histories hold older frames, so the bounds stay as
    /// tight as the oldest view any client can have asks (see [`RewindSettings`]).
    pub fn rebuild_since<'a>(
        &mut self,
        characters: impl IntoIterator<Item = (Entity, &'a FrameHistory)>,
        since: f64,
    ) {
        self.entities.clear();
        self.bounds.clear();
        self.window = None;
        self.judged_from = since.is_finite().then_some(since);
        let mut placed: Vec<(Entity, &FrameHistory)> = Vec::new();
        for (entity, history) in characters {
            if let Some((oldest, newest)) = history.poses().span() {
                let oldest = oldest.max(since.min(newest));
                let (o, n) = self.window.unwrap_or((oldest, newest));
                self.window = Some((o.min(oldest), n.max(newest)));
            }
            if let Some(b) = history.window_bounds_since(since) {
                self.entities.push(entity);
                self.bounds.push(b);
                placed.push((entity, history));
            }
        }
        self.track.rebuild(&placed, since);
        if self.entities == self.built_for
            && self.refits < REFITS_PER_BUILD
            && self.bvh.refit(&self.bounds)
        {
            self.refits += 1;
        } else {
            self.bvh.build(&self.bounds);
            self.built_for.clone_from(&self.entities);
            self.refits = 0;
        }
    }

    /// The oldest and newest recorded times over all characters, seconds: a time older than
    /// the oldest is too old for every character.
    pub fn window(&self) -> Option<(f64, f64)> {
        self.window
    }

    /// Where the span shots may be judged in starts, seconds, when it was rebuilt over one
    /// ([`RewindBroadPhase::rebuild_since`]): a time older than it is too old, while one
    /// within it but before every recorded frame (the server, or every character, had just
    /// started) finds nobody there.
    pub fn judged_from(&self) -> Option<f64> {
        self.judged_from
    }

    /// Where server time `time` (seconds) falls on the characters' body track, for
    /// [`RewindBroadPhase::track_centre`].
    pub(crate) fn track_at(&self, time: f64) -> Option<TrackAt> {
        self.track.at(time)
    }

    /// The body centre (metres) and capsule (half height, radius; metres) of the character at
    /// `place` at `at`, exactly where its history's lookup puts it, when the broad phase keeps
    /// its frames (see [`BodyTrack`]); `None`: ask its history.
    pub(crate) fn track_centre(&self, place: usize, at: TrackAt) -> Option<(Vec3, (f32, f32))> {
        self.track.centre(place, at)
    }

    /// The characters whose body capsule at server time `time` (seconds), where the track
    /// keeps it, lies farther than `distance` metres from `point`, by more than
    /// [`BEYOND_MARGIN`]: none of their boxes' bounding spheres comes that near. Those off
    /// the track, or any at a time off it, are not named.
    pub(crate) fn bodies_beyond(
        &self,
        time: f64,
        point: Vec3,
        distance: f32,
    ) -> bevy::ecs::entity::EntityHashSet {
        let mut beyond = bevy::ecs::entity::EntityHashSet::default();
        let Some(at) = self.track_at(time) else {
            return beyond;
        };
        for (place, &character) in self.entities.iter().enumerate() {
            let Some((centre, (h, r))) = self.track_centre(place, at) else {
                continue;
            };
            // From the point to the capsule's axis, a segment `h` up and down the centre.
            let offset = point - centre;
            let along = offset.y.clamp(-h, h);
            let to_axis = (offset - Vec3::Y * along).length();
            if to_axis - r > distance + BEYOND_MARGIN {
                beyond.insert(character);
            }
        }
        beyond
    }

    /// How many of its characters' body centres it keeps along the judged span (every
    /// character recorded in the plugin's ticks; see [`RewindBroadPhase::without_body_track`]).
    pub fn tracked(&self) -> usize {
        self.track.bodies.iter().flatten().count()
    }

    /// The same broad phase without the body centres it keeps beside the tree: queries then
    /// read each reached character's history to test its body, as before the track was kept.
    /// The answers are the same; for comparisons (the `rewind` benchmark, the tests).
    pub fn without_body_track(mut self) -> Self {
        self.track = BodyTrack::default();
        self
    }

    /// Characters in it.
    pub fn len(&self) -> usize {
        self.entities.len()
    }

    /// Whether it holds no character.
    pub fn is_empty(&self) -> bool {
        self.entities.is_empty()
    }

    /// Bytes held.
    pub fn memory_bytes(&self) -> usize {
        self.bvh.memory_bytes()
            + self.track.times.capacity() * size_of::<f64>()
            + self.track.centres.capacity() * size_of::<(Vec3, bool)>()
            + self.track.bodies.capacity() * size_of::<Option<(f32, f32)>>()
            + self.track.characters.capacity() * size_of::<Entity>()
            + self.entities.capacity() * size_of::<Entity>()
            + self.bounds.capacity() * size_of::<Aabb>()
            + self.built_for.capacity() * size_of::<Entity>()
    }

    /// Calls `visit` with (place in the broad phase, character) for every character whose
    /// window bounds (grown by `radius` metres) the ray enters within `max_distance` metres,
    /// nearer subtrees first; `visit` returns how far the ray still needs to reach. Places are
    /// `0..len()`, stable until the next rebuild.
    pub fn visit_ray(
        &self,
        origin: Vec3,
        direction: Vec3,
        max_distance: f32,
        radius: f32,
        mut visit: impl FnMut(usize, Entity) -> f32,
    ) {
        self.bvh
            .visit_ray(origin, direction, max_distance, radius, |i| {
                visit(i as usize, self.entities[i as usize])
            });
    }

    /// The characters whose window bounds (grown by `radius` metres) some ray of `cone` may
    /// enter, found in one traversal for all of a shotgun's pellets, nearest along the cone's
    /// axis first: (place, character).
    pub fn in_cone(&self, cone: &unlag_core::Cone, radius: f32) -> Vec<(usize, Entity)> {
        let mut found: Vec<(usize, Entity)> = Vec::with_capacity(16);
        self.bvh.visit_cone(cone, radius, |i| {
            found.push((i as usize, self.entities[i as usize]));
        });
        let along = |i: usize| (self.bounds[i].centre() - cone.origin).dot(cone.axis);
        found.sort_by(|a, b| along(a.0).total_cmp(&along(b.0)));
        found
    }

    /// Where the ray from `origin` along the unit `direction` enters the window bounds of the
    /// character at `place` (grown by `radius` metres), if it does within `max_distance`
    /// metres: the test [`RewindBroadPhase::visit_ray`] makes, for one of
    /// [`RewindBroadPhase::in_cone`]'s characters.
    pub fn entry(
        &self,
        place: usize,
        origin: Vec3,
        direction: Vec3,
        max_distance: f32,
        radius: f32,
    ) -> Option<f32> {
        self.bvh
            .box_entry(place as u32, origin, direction, max_distance, radius)
    }
}

/// How far back from now shots may be judged, seconds: the oldest view any connected client
/// can have (its one-way trip, interpolation delay and two of its frames), plus two of the
/// server's default update intervals (the state a claim starts from precedes the view by up
/// to one, two when one between was lost) and a quarter second of slack; at least
/// [`RewindSettings::min_window`], at most [`RewindSettings::max_record_time`]. It follows
/// what clients report, so a slow update rate widens it and a fast one keeps the broad phase
/// tight.
pub fn judged_span<'a>(
    settings: &RewindSettings,
    clients: impl IntoIterator<Item = &'a unlag_net::RemoteClientClock>,
    conditions: Option<&unlag_net::NetConditions>,
) -> f64 {
    let view = clients
        .into_iter()
        .map(|c| c.rtt / 2.0 + c.interpolation_delay + 2.0 * c.client_frame)
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    (view + claim_margin(conditions))
        .max(settings.min_window)
        .min(settings.max_record_time)
}

/// What the judged span adds to the oldest view, seconds: two of the server's default update
/// intervals (the state a claim starts from precedes the view by up to one, two when one
/// between was lost) and a quarter second of slack.
fn claim_margin(conditions: Option<&unlag_net::NetConditions>) -> f64 {
    let interval = conditions.map_or(0.05, |c| 1.0 / f64::from(c.get().update_rate_hz.max(0.1)));
    2.0 * interval + 0.25
}

impl RewindSettings {
    /// Frames a history needs to cover `max_record_time` at ticks of `tick`, plus one beyond.
    /// The span is taken within `0..=MAX_RECORD_TIME` (a hand-set infinite or NaN time must
    /// not overflow or allocate without end), and ticks as short as 0.1 ms.
    pub fn history_frames(&self, tick: core::time::Duration) -> usize {
        let time = self.max_record_time;
        let span = if time.is_nan() {
            0.0
        } else {
            time.clamp(0.0, crate::MAX_RECORD_TIME)
        };
        (span / tick.as_secs_f64().max(1e-4)).ceil() as usize + 2
    }
}

/// Gives every character with authority and hit boxes a history sized for the window.
pub(crate) fn start_histories(
    mut commands: Commands,
    settings: Res<RewindSettings>,
    tick: Res<TickDuration>,
    characters: Query<(Entity, &Children), (With<Authority>, Without<FrameHistory>)>,
    boxes: Query<(&HitBox, &Transform)>,
) {
    let frames = settings.history_frames(tick.0);
    for (entity, children) in &characters {
        let hit: Vec<(Entity, HitBox, Transform)> = children
            .iter()
            .filter_map(|c| boxes.get(c).ok().map(|(b, t)| (c, b.clone(), *t)))
            .collect();
        if !hit.is_empty() {
            commands
                .entity(entity)
                .insert(FrameHistory::new(hit, frames));
        }
    }
}

/// Appends this tick's poses and rebuilds the broad phase.
#[allow(clippy::too_many_arguments)]
pub(crate) fn record_frames(
    settings: Res<RewindSettings>,
    timeline: Res<LocalTimeline>,
    tick: Res<TickDuration>,
    mut broad: ResMut<RewindBroadPhase>,
    mut stats: ResMut<RewindStats>,
    mut characters: Query<(
        Entity,
        &Transform,
        &mut FrameHistory,
        Has<unlag_net::Teleported>,
    )>,
    boxes: Query<&Transform, With<HitBox>>,
    clients: Query<&unlag_net::RemoteClientClock>,
    conditions: Option<Res<unlag_net::NetConditions>>,
    (work, held): (
        Option<Res<unlag_net::ServerWork>>,
        Option<Res<unlag_net::HeldShotsOldest>>,
    ),
) {
    let _work = work
        .as_deref()
        .map(|w| w.time(unlag_net::WorkPart::Recording));
    let time = f64::from(timeline.tick().0) * tick.0.as_secs_f64();
    let mut refused = 0;
    for (_, root, mut history, moved_instantly) in &mut characters {
        // A box despawned since keeps its last pose: the history's shape never changes.
        let local = |b: Entity| boxes.get(b).copied().unwrap_or_default();
        if history
            .record(
                time,
                root,
                (settings.teleport_distance, moved_instantly),
                local,
            )
            .is_err()
        {
            refused += 1;
        }
    }
    let span = judged_span(&settings, clients.iter(), conditions.as_deref());
    // A shot held for its shooter's moves is judged later than its view: the window reaches
    // back to it too, with the span's margin for the older state a claim starts from.
    let since = match held.and_then(|h| h.0) {
        Some(oldest) => (time - span)
            .min(oldest - claim_margin(conditions.as_deref()))
            .max(time - settings.max_record_time),
        None => time - span,
    };
    broad.rebuild_since(characters.iter().map(|(e, _, h, _)| (e, h)), since);
    let mut new = RewindStats {
        refused_frames: stats.refused_frames + refused,
        memory_bytes: broad.memory_bytes(),
        frames_per_character: settings.history_frames(tick.0),
        ..default()
    };
    for (_, _, history, _) in &characters {
        new.characters += 1;
        new.boxes += history.boxes().len();
        new.memory_bytes += history.memory_bytes();
    }
    *stats = new;
}
