//! Benchmarks of lag compensation, beside the naive way (seed 000's "move every hit box back,
//! trace, move them forward").
//!
//! For 16, 64 and 256 characters of the 11-box humanoid layout, each with 1 s of history at
//! 60 Hz (walking on random paths, crouching now and then), spread over a 100 m × 100 m arena:
//!
//! - `record`: recording one tick for every character and rebuilding the broad phase
//!   (criterion reports the time for all of them; divide by the box count for ns per box, goal
//!   ≤ 20 ns).
//! - `hitscan` / `shotgun`: one ray, or 12 pellets sharing one rewind, aimed at a random hit box
//!   at a random time in the window (goal: hitscan ≤ 1 µs at 64 characters and ≤ 1.5 µs at 256;
//!   shotgun ≤ 4 µs at 64).
//! - `naive_hitscan` / `naive_shotgun`: the same queries in a rapier world holding every hit box
//!   as a collider: set each to its rewound pose, refit rapier's broad phase, cast through
//!   rapier's query pipeline, restore the current poses and refit again.
//!
//! Printed first, in the same run: how many rays both ways answer alike (same character, box
//! and distance), with every difference settled against the exact answer (`rapier off`:
//! rapier's iterative capsule cast stopped off the surface or missed; the run fails if ours is
//! ever the wrong one, or the two agree on fewer than 99.5 % of rays), the mean time per query
//! of each way with their ratio (goal ≥ 60× at 64 characters, ≥ 150× at 256), the mean time of
//! ours without the broad phase's body track (`no track ns`: every character a ray reaches is
//! looked up in its history to test its body, as before the track was kept; same answers
//! checked), and the memory of the history per character.
//!
//! The static world is left out of both (it costs the same rapier ray cast either way).

// criterion's macros generate undocumented functions.
#![allow(missing_docs)]

use bevy::platform::collections::HashMap;
use bevy::prelude::*;
use bevy_rapier3d::rapier::math::Pose;
use bevy_rapier3d::rapier::prelude::{
    ColliderBuilder, ColliderHandle, PhysicsWorld, QueryFilter, Ray,
};
use criterion::{BenchmarkId, Criterion, black_box};
use std::time::Instant;
use unlag::core::SplitMix64;
use unlag::rewind::{
    FrameHistory, Histories, HitBoxLayout, HitShape, RewindBroadPhase, RewindHit, RewindScene,
};

const TICK: f64 = 1.0 / 60.0;
/// 1 s at 60 Hz plus one frame beyond, as the plugin sizes it.
const FRAMES: usize = 62;
const PELLETS: usize = 12;

/// Histories by entity index: the dense lookup a `Query<&FrameHistory>` does in the plugin.
#[derive(Default)]
struct Table(Vec<Option<FrameHistory>>);

impl Table {
    fn insert(&mut self, e: Entity, h: FrameHistory) {
        let i = e.index_u32() as usize;
        if self.0.len() <= i {
            self.0.resize_with(i + 1, || None);
        }
        self.0[i] = Some(h);
    }
    fn get(&self, e: &Entity) -> Option<&FrameHistory> {
        self.0.get(e.index_u32() as usize)?.as_ref()
    }
    fn get_mut(&mut self, e: &Entity) -> Option<&mut FrameHistory> {
        self.0.get_mut(e.index_u32() as usize)?.as_mut()
    }
    fn values(&self) -> impl Iterator<Item = &FrameHistory> {
        self.0.iter().flatten()
    }
}

impl std::ops::Index<&Entity> for Table {
    type Output = FrameHistory;
    fn index(&self, e: &Entity) -> &FrameHistory {
        self.get(e).unwrap()
    }
}

impl Histories for Table {
    fn history(&self, character: Entity) -> Option<&FrameHistory> {
        self.get(&character)
    }
}

struct Arena {
    broad: RewindBroadPhase,
    histories: Table,
    characters: Vec<Entity>,
    /// Local pose of each box, by box entity index (the layout's, crouched or not).
    stand: Vec<Transform>,
    crouch: Vec<Transform>,
    crouched: Vec<bool>,
    roots: Vec<Transform>,
    velocities: Vec<Vec3>,
    time: f64,
    boxes: usize,
}

fn f(rng: &mut SplitMix64) -> f32 {
    rng.next_f64() as f32
}

impl Arena {
    fn new(n: usize) -> Self {
        let layout = HitBoxLayout::from_ron(
            include_str!("../assets/humanoid.hitboxes.ron"),
            "assets/humanoid.hitboxes.ron",
        )
        .unwrap();
        let mut world = World::new();
        let mut rng = SplitMix64::new(n as u64);
        let mut arena = Arena {
            broad: RewindBroadPhase::default(),
            histories: Table::default(),
            characters: Vec::new(),
            stand: Vec::new(),
            crouch: Vec::new(),
            crouched: Vec::new(),
            roots: Vec::new(),
            velocities: Vec::new(),
            time: 0.0,
            boxes: layout.boxes.len(),
        };
        for _ in 0..n {
            let character = world.spawn_empty().id();
            let boxes: Vec<(Entity, unlag::rewind::HitBox, Transform)> = layout
                .boxes
                .iter()
                .map(|b| {
                    let e = world.spawn_empty().id();
                    let index = e.index_u32() as usize;
                    let stand = b.stand.transform();
                    let crouch = b.crouch.map_or(stand, |c| c.transform());
                    if arena.stand.len() <= index {
                        arena.stand.resize(index + 1, Transform::IDENTITY);
                        arena.crouch.resize(index + 1, Transform::IDENTITY);
                    }
                    arena.stand[index] = stand;
                    arena.crouch[index] = crouch;
                    (e, HitBoxLayout::hit_box(b), stand)
                })
                .collect();
            arena
                .histories
                .insert(character, FrameHistory::new(boxes, FRAMES));
            arena.characters.push(character);
            arena.roots.push(Transform::from_xyz(
                f(&mut rng) * 100.0 - 50.0,
                0.0,
                f(&mut rng) * 100.0 - 50.0,
            ));
            let a = f(&mut rng) * std::f32::consts::TAU;
            arena
                .velocities
                .push(Vec3::new(a.cos(), 0.0, a.sin()) * 5.0);
            arena.crouched.push(false);
        }
        for tick in 0..FRAMES as u64 * 2 {
            arena.record(&mut rng, tick);
        }
        arena
    }

    /// Moves everyone one tick, crouching some, and records the frame.
    fn record(&mut self, rng: &mut SplitMix64, tick: u64) {
        self.time = tick as f64 * TICK;
        for i in 0..self.characters.len() {
            let v = self.velocities[i];
            let root = &mut self.roots[i];
            root.translation += v * TICK as f32;
            root.rotation = Quat::from_rotation_y(v.z.atan2(v.x));
            if f(rng) < 0.02 {
                self.crouched[i] = !self.crouched[i];
            }
            if f(rng) < 0.05 {
                let a = f(rng) * std::f32::consts::TAU;
                self.velocities[i] = Vec3::new(a.cos(), 0.0, a.sin()) * 5.0;
            }
        }
        self.record_only();
    }

    /// Records the current poses as a new frame and rebuilds the broad phase: what the
    /// plugin's recording system does each tick.
    fn record_only(&mut self) {
        for (i, character) in self.characters.iter().enumerate() {
            let locals = if self.crouched[i] {
                &self.crouch
            } else {
                &self.stand
            };
            let history = self.histories.get_mut(character).unwrap();
            history
                .record(self.time, &self.roots[i], (3.84, false), |b| {
                    locals[b.index_u32() as usize]
                })
                .unwrap();
        }
        self.broad.rebuild(
            self.characters
                .iter()
                .map(|c| (*c, self.histories.get(c).unwrap())),
        );
    }

    fn scene(&self) -> RewindScene<'_, Table> {
        RewindScene {
            broad: &self.broad,
            histories: &self.histories,
        }
    }

    fn cast(&self, q: &Query) -> Vec<Option<RewindHit>> {
        Self::cast_in(&self.scene(), q)
    }

    fn cast_in(scene: &RewindScene<'_, Table>, q: &Query) -> Vec<Option<RewindHit>> {
        scene
            .cast(&q.rays, 200.0, 0.0, q.time, None, &[], |_, _, m| m, None)
            .unwrap()
    }
}

/// A shot: rays (one, or the pellets) at a time.
struct Query {
    rays: Vec<(Vec3, Vec3)>,
    time: f64,
}

/// Shots at a random box of a random character at a random time in the window, from 5–40 m
/// away; pellets spread ±3° around the aim.
fn queries(arena: &Arena, count: usize, pellets: usize, seed: u64) -> Vec<Query> {
    let mut rng = SplitMix64::new(seed);
    let (oldest, newest) = arena.broad.window().unwrap();
    (0..count)
        .map(|_| {
            let c = arena.characters[(rng.next_u64() % arena.characters.len() as u64) as usize];
            let k = (rng.next_u64() % arena.boxes as u64) as usize;
            let time = oldest + rng.next_f64() * (newest - oldest);
            let poses = arena.scene().pose_at(c, time).unwrap();
            let target = poses[k].0;
            let a = f(&mut rng) * std::f32::consts::TAU;
            let origin = target
                + Vec3::new(a.cos(), 0.0, a.sin()) * (5.0 + f(&mut rng) * 35.0)
                + Vec3::Y * (f(&mut rng) - 0.5);
            let aim = (target - origin).normalize();
            let rays = (0..pellets)
                .map(|p| {
                    if p == 0 {
                        return (origin, aim);
                    }
                    let spread = Quat::from_euler(
                        EulerRot::YXZ,
                        (f(&mut rng) - 0.5) * 0.1,
                        (f(&mut rng) - 0.5) * 0.1,
                        0.0,
                    );
                    (origin, spread * aim)
                })
                .collect();
            Query { rays, time }
        })
        .collect()
}

/// The naive way: every hit box a rapier collider, moved to its rewound pose per shot.
struct Naive {
    world: PhysicsWorld,
    handles: Vec<ColliderHandle>,
    /// Per collider: (character index, box index).
    owners: HashMap<ColliderHandle, (usize, usize)>,
}

impl Naive {
    fn new(arena: &Arena) -> Self {
        let mut world = PhysicsWorld::new();
        let mut handles = Vec::new();
        let mut owners = HashMap::default();
        for (i, c) in arena.characters.iter().enumerate() {
            let history = &arena.histories[c];
            let (_, newest) = history.poses().span().unwrap();
            let poses = arena.scene().pose_at(*c, newest).unwrap();
            for (k, b) in history.hit_boxes().iter().enumerate() {
                let builder = match b.shape {
                    HitShape::Cuboid { half_extents } => {
                        ColliderBuilder::cuboid(half_extents.x, half_extents.y, half_extents.z)
                    }
                    HitShape::Capsule {
                        half_height,
                        radius,
                    } => ColliderBuilder::capsule_y(half_height, radius),
                };
                let h = world.insert_collider(
                    builder.position(Pose::from_parts(poses[k].0, poses[k].1)),
                    None,
                );
                handles.push(h);
                owners.insert(h, (i, k));
            }
        }
        world.step();
        Naive {
            world,
            handles,
            owners,
        }
    }

    fn place(&mut self, arena: &Arena, time: f64) {
        let mut n = 0;
        for c in &arena.characters {
            for (p, r) in arena
                .scene()
                .pose_at(*c, time)
                .unwrap()
                .iter()
                .take(arena.boxes)
            {
                if let Some(co) = self.world.colliders.get_mut(self.handles[n]) {
                    co.set_position(Pose::from_parts(*p, *r));
                }
                n += 1;
            }
        }
        let w = &mut self.world;
        w.broad_phase.update(
            &w.integration_parameters,
            &w.colliders,
            &w.bodies,
            &self.handles,
            &[],
            &mut Vec::new(),
        );
    }

    /// Rewind, cast every ray, restore: (character index, box index, distance) per ray.
    fn cast(&mut self, arena: &Arena, q: &Query, newest: f64) -> Vec<Option<(usize, usize, f32)>> {
        self.place(arena, q.time);
        let hits = q
            .rays
            .iter()
            .map(|(o, d)| {
                let ray = Ray::new(*o, d.normalize());
                self.world
                    .cast_ray_and_get_normal(&ray, 200.0, true, QueryFilter::default())
                    .map(|(h, hit)| {
                        let (c, k) = self.owners[&h];
                        (c, k, hit.time_of_impact)
                    })
            })
            .collect();
        self.place(arena, newest);
        hits
    }
}

/// The exact first hit of a ray on one character's boxes at `time`, for settling a
/// disagreement: cuboids with parry's slab test (exact), capsules by sampling the ray every
/// 0.1 mm near the box and taking the first point within the radius of the axis. Returns
/// (box, distance, whether the ray only grazes the box: passes within 0.3 mm of its surface).
fn truth(
    arena: &Arena,
    character: Entity,
    time: f64,
    ray: (Vec3, Vec3),
) -> Option<(usize, f32, bool)> {
    use bevy_rapier3d::parry::query::RayCast;
    let history = &arena.histories[&character];
    let poses = arena.scene().pose_at(character, time).unwrap();
    let (origin, dir) = (ray.0, ray.1.normalize());
    let mut best: Option<(usize, f32, bool)> = None;
    for (k, b) in history.hit_boxes().iter().enumerate() {
        let (p, r) = poses[k];
        let hit = match b.shape {
            HitShape::Cuboid { half_extents } => {
                bevy_rapier3d::parry::shape::Cuboid::new(half_extents)
                    .cast_ray(&Pose::from_parts(p, r), &Ray::new(origin, dir), 200.0, true)
                    .map(|t| (t, false))
            }
            HitShape::Capsule {
                half_height,
                radius,
            } => {
                let inverse = r.inverse();
                let o = inverse * (origin - p);
                let d = inverse * dir;
                let along = (-o).dot(d);
                let reach = half_height + radius + 0.01;
                let to_axis = |t: f32| {
                    let q = o + d * t;
                    q.distance(Vec3::new(0.0, q.y.clamp(-half_height, half_height), 0.0))
                };
                let steps = (2.0 * reach / 1e-4) as usize;
                let start = (along - reach).max(0.0);
                let samples = (0..=steps).map(|s| start + s as f32 * 1e-4);
                let closest = samples.clone().map(to_axis).fold(f32::INFINITY, f32::min);
                samples
                    .clone()
                    .find(|t| to_axis(*t) <= radius)
                    .map(|t| (t, (closest - radius).abs() < 3e-4))
                    .or(((closest - radius).abs() < 3e-4).then_some((along, true)))
            }
        };
        if let Some((t, graze)) = hit
            && best.is_none_or(|b| t < b.1)
        {
            best = Some((k, t, graze));
        }
    }
    best
}

/// Checks both ways agree on every shot, and prints their mean times side by side.
fn compare(bench: bool) {
    println!(
        "\nrewind vs naive (mean per shot; {PELLETS} pellets for the shotgun; same hits checked)"
    );
    println!(
        "{:>10} {:>8} {:>12} {:>12} {:>8} {:>12} {:>8} {:>10} {:>10} {:>12}",
        "characters",
        "shot",
        "unlag ns",
        "naive ns",
        "ratio",
        "no track ns",
        "hits",
        "agree",
        "rapier off",
        "bytes/char"
    );
    for n in [16usize, 64, 256] {
        let arena = Arena::new(n);
        for h in arena.histories.values() {
            let (half, r) = h.body();
            let centres = h.poses().bounds(h.boxes().len() + 1).unwrap();
            let grow = Vec3::new(r, half + r, r);
            let exact = unlag::core::Aabb {
                min: centres.min - grow,
                max: centres.max + grow,
            };
            assert_eq!(h.window_bounds(), Some(exact), "chunked window bounds");
        }
        let mut naive = Naive::new(&arena);
        let (_, newest) = arena.broad.window().unwrap();
        let index: HashMap<Entity, usize> = arena
            .characters
            .iter()
            .enumerate()
            .map(|(i, c)| (*c, i))
            .collect();
        let per_char = arena
            .histories
            .values()
            .map(|h| h.memory_bytes())
            .sum::<usize>()
            / n
            + arena.broad.memory_bytes() / n;
        for (name, pellets) in [("hitscan", 1), ("shotgun", PELLETS)] {
            let count = if bench { 2000 } else { 100 };
            let shots = queries(&arena, count, pellets, 99);
            // Agreement: the same character and box at the same distance, for every ray.
            // Where they differ, the exact answer settles it: ours must be it (rapier casts
            // rays on capsules iteratively and can stop millimetres off, or miss).
            let (mut hits, mut agree, mut rays, mut rapier_off) = (0, 0, 0, 0);
            for q in &shots {
                let ours = arena.cast(q);
                let theirs = naive.cast(&arena, q, newest);
                for ((a, b), ray) in ours.iter().zip(&theirs).zip(&q.rays) {
                    rays += 1;
                    let a = a.as_ref().map(|h| {
                        let k = arena.histories[&h.character]
                            .boxes()
                            .iter()
                            .position(|e| *e == h.hit_box)
                            .unwrap();
                        (index[&h.character], k, h.distance)
                    });
                    hits += usize::from(a.is_some());
                    let same = match (a, b) {
                        (None, None) => true,
                        (Some(a), Some(b)) => a.0 == b.0 && a.1 == b.1 && (a.2 - b.2).abs() < 1e-3,
                        _ => false,
                    };
                    if same {
                        agree += 1;
                        continue;
                    }
                    // The exact first hit over the characters either way reported.
                    let exact = [a.map(|a| a.0), b.map(|b| b.0)]
                        .into_iter()
                        .flatten()
                        .filter_map(|c| {
                            truth(&arena, arena.characters[c], q.time, *ray)
                                .map(|(k, t, graze)| (c, k, t, graze))
                        })
                        .min_by(|x, y| x.2.total_cmp(&y.2));
                    let ours_exact = match (a, exact) {
                        (None, None) => true,
                        (Some(a), Some(e)) => a.0 == e.0 && a.1 == e.1 && (a.2 - e.2).abs() < 1e-3,
                        (_, Some(e)) => e.3,
                        (Some(_), None) => false,
                    };
                    assert!(
                        ours_exact || exact.is_some_and(|e| e.3),
                        "{n} characters: unlag {a:?}, rapier {b:?}, exact {exact:?}"
                    );
                    agree += usize::from(ours_exact);
                    rapier_off += 1;
                }
            }
            assert!(agree + 5 * rays / 1000 >= rays, "{agree} of {rays} agree");
            let plain = arena.broad.clone().without_body_track();
            let untracked = RewindScene {
                broad: &plain,
                histories: &arena.histories,
            };
            for q in &shots {
                let key = |hits: Vec<Option<RewindHit>>| {
                    hits.into_iter()
                        .map(|h| h.map(|h| (h.character, h.hit_box, h.distance.to_bits())))
                        .collect::<Vec<_>>()
                };
                assert_eq!(key(arena.cast(q)), key(Arena::cast_in(&untracked, q)));
            }
            // Each way twice, taking turns, the better of its two runs (the first to run pays
            // for bringing the histories into cache).
            let time = |scene: &RewindScene<'_, Table>| {
                let start = Instant::now();
                for q in &shots {
                    black_box(Arena::cast_in(scene, black_box(q)));
                }
                start.elapsed().as_nanos() as f64 / shots.len() as f64
            };
            let (mut ours, mut no_track) = (f64::INFINITY, f64::INFINITY);
            for _ in 0..2 {
                ours = ours.min(time(&arena.scene()));
                no_track = no_track.min(time(&untracked));
            }
            let naive_shots = &shots[..shots.len().min(if bench { 200 } else { 10 })];
            let start = Instant::now();
            for q in naive_shots {
                black_box(naive.cast(&arena, black_box(q), newest));
            }
            let theirs = start.elapsed().as_nanos() as f64 / naive_shots.len() as f64;
            println!(
                "{n:>10} {name:>8} {ours:>12.0} {theirs:>12.0} {:>7.0}x {no_track:>12.0} {hits:>8} {:>9.1}% {rapier_off:>10} {per_char:>12}",
                theirs / ours,
                100.0 * agree as f64 / rays as f64
            );
        }
        println!(
            "{n:>10} {:>8} {:>12.1} ns per box (one tick, {} boxes, broad phase refitted)",
            "record",
            record_ns(n, if bench { 200 } else { 5 }) / (n * arena.boxes) as f64,
            n * arena.boxes
        );
    }
    println!();
}

fn record_ns(n: usize, ticks: u64) -> f64 {
    let mut arena = Arena::new(n);
    let start_tick = (arena.time / TICK).round() as u64 + 1;
    let start = Instant::now();
    for t in 0..ticks {
        arena.time = (start_tick + t) as f64 * TICK;
        arena.record_only();
    }
    start.elapsed().as_nanos() as f64 / ticks as f64
}

fn benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("rewind");
    for n in [16usize, 64, 256] {
        let mut arena = Arena::new(n);
        let shots = queries(&arena, 512, 1, 7);
        let pellets = queries(&arena, 512, PELLETS, 8);
        let (_, newest) = arena.broad.window().unwrap();
        let mut i = 0;
        group.bench_function(BenchmarkId::new("hitscan", n), |b| {
            b.iter(|| {
                i = (i + 1) % shots.len();
                arena.cast(black_box(&shots[i]))
            })
        });
        group.bench_function(BenchmarkId::new("shotgun", n), |b| {
            b.iter(|| {
                i = (i + 1) % pellets.len();
                arena.cast(black_box(&pellets[i]))
            })
        });
        let mut naive = Naive::new(&arena);
        group.bench_function(BenchmarkId::new("naive_hitscan", n), |b| {
            b.iter(|| {
                i = (i + 1) % shots.len();
                naive.cast(&arena, black_box(&shots[i]), newest)
            })
        });
        group.bench_function(BenchmarkId::new("naive_shotgun", n), |b| {
            b.iter(|| {
                i = (i + 1) % pellets.len();
                naive.cast(&arena, black_box(&pellets[i]), newest)
            })
        });
        let mut tick = (arena.time / TICK).round() as u64;
        group.bench_function(BenchmarkId::new("record", n), |b| {
            b.iter(|| {
                tick += 1;
                arena.time = tick as f64 * TICK;
                arena.record_only();
            })
        });
    }
    group.finish();
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    // Under a profiler (`--profile-time`) only the criterion loops run.
    if !std::env::args().any(|a| a == "--profile-time") {
        compare(bench);
    }
    let mut criterion = Criterion::default().configure_from_args();
    benches(&mut criterion);
    criterion.final_summary();
}
