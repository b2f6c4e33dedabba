//! Server cost per `FireRequest`: a server world with 64 players of the 11-box humanoid layout
//! (1 s of history at 60 Hz, the states sent to clients at 20 Hz), and honest requests from a
//! client at 100 ms RTT: a rifle shot and a 12-pellet shotgun shot, each aimed at a target's
//! torso as that client drew it and claiming what it saw.
//!
//! - `judge_rifle` / `judge_shotgun`: [`ShotJudge::judge`] — every check (view time against the
//!   estimate and the view reports, pellet count, cone, seeded spread, origin, ammo, fire rate,
//!   claims) and the rewind of the claimed targets as the client saw them. This is the server's
//!   cost per request, damage bookkeeping and messages aside.
//! - `rewind_rifle` / `rewind_shotgun`: the rewind alone (`RewindQuery::rays_as_seen`), so
//!   the checks' share shows.
//! - `recorded` / `one by one`: the same rays against the recorded poses (no claims), the
//!   pellets together (one traversal of the broad phase for their cone, one lookup per
//!   character) and one ray at a time.
//! - `naive_rifle` / `naive_shotgun`: the naive rewind beside it: every box of every character
//!   posed at the view time and tested (seed 000's "move every hit box back, trace").
//!
//! Printed first, in one run: the mean µs per request of each, and how many requests hit the
//! target they aimed at (every one must be accepted; the run fails if too few reach it). Then
//! the cost of checking a claimed ease (`RewindQuery::ease_explained`): none, and offsets no
//! jump explains (a magnet's: the whole search), up and level.

// criterion's macros generate undocumented functions.
#![allow(missing_docs)]

use bevy::ecs::system::SystemState;
use bevy::prelude::*;
use criterion::{BatchSize, BenchmarkId, Criterion, black_box};
use std::time::Instant;
use unlag::combat::{
    CombatSettings, CombatStats, FireRequest, ServerArmory, ShotJudge, ShotVerdict, WeaponTable,
    Weapons, WireClaim, shot_directions,
};
use unlag::core::{ProxyState, SmoothingMode, SplitMix64};
use unlag::net::{NetClock, RemoteClientClock};
use unlag::rewind::{
    ClaimedView, FrameHistory, HitBoxLayout, RewindBroadPhase, RewindDebug, RewindDebugLog,
    RewindQuery, RewindSettings, hit_box_ray,
};
use unlag::smoothing::SentStates;

const TICK: f64 = 1.0 / 60.0;
const FRAMES: usize = 62;
const PLAYERS: usize = 64;
/// The server's time: tick 120.
const NOW: f64 = 120.0 * TICK;
const RTT: f64 = 0.1;
const DELAY: f64 = 0.075;
/// The client's view time when its shot arrives now: `NOW − RTT − DELAY`, half-way between
/// the states of ticks 108 and 111.
const VIEW: f64 = NOW - RTT - DELAY;

struct Bench {
    world: World,
    link: Entity,
    shooter: Entity,
    remote: RemoteClientClock,
    armory: ServerArmory,
    rifle: Vec<FireRequest>,
    shotgun: Vec<FireRequest>,
    targets: Vec<Entity>,
}

fn setup() -> Bench {
    let layout = HitBoxLayout::from_ron(
        include_str!("../assets/humanoid.hitboxes.ron"),
        "assets/humanoid.hitboxes.ron",
    )
    .unwrap();
    let table =
        WeaponTable::from_ron(include_str!("../assets/weapons.ron"), "assets/weapons.ron").unwrap();
    let settings = CombatSettings::default();
    let armory = ServerArmory::new(&table.weapons, settings.fire_interval_allowance);
    let mut world = World::new();
    world.insert_resource(settings);
    world.insert_resource(Weapons::new(table.clone()));
    world.insert_resource(NetClock {
        synced: true,
        server_time: NOW,
        tick_duration: TICK,
        ..default()
    });
    world.insert_resource(Time::<()>::default());
    world.insert_resource(RewindSettings::default());
    world.insert_resource(RewindBroadPhase::default());
    world.insert_resource(RewindDebug::default());
    world.insert_resource(RewindDebugLog::default());

    // 64 players walking on random paths over a 60 m × 60 m arena, states sent every 3 ticks.
    let mut rng = SplitMix64::new(64);
    let mut f = move || rng.next_f64() as f32;
    let mut targets = Vec::new();
    for _ in 0..PLAYERS {
        let boxes: Vec<_> = layout
            .boxes
            .iter()
            .map(|b| {
                let hit_box = HitBoxLayout::hit_box(b);
                let e = world.spawn(hit_box.clone()).id();
                (e, hit_box, b.stand.transform())
            })
            .collect();
        let locals: Vec<(Entity, Transform)> = boxes.iter().map(|(e, _, t)| (*e, *t)).collect();
        let mut history = FrameHistory::new(boxes, FRAMES);
        let mut sent = SentStates::default();
        let mut root = Transform::from_xyz(f() * 60.0 - 30.0, 0.0, f() * 60.0 - 50.0);
        let a = f() * std::f32::consts::TAU;
        let velocity = Vec3::new(a.cos(), 0.0, a.sin()) * 4.0;
        root.rotation = Quat::from_rotation_y(a);
        for tick in 0..=120u32 {
            let time = f64::from(tick) * TICK;
            root.translation += velocity * TICK as f32;
            history
                .record(time, &root, (3.84, false), |b| {
                    locals.iter().find(|(e, _)| *e == b).unwrap().1
                })
                .unwrap();
            if tick % 3 == 0 {
                sent.push(ProxyState {
                    tick,
                    time,
                    position: root.translation,
                    rotation: root.rotation,
                    velocity,
                    flags: 0,
                    teleport: false,
                    off_grid: false,
                });
            }
        }
        targets.push(world.spawn((history, sent)).id());
    }
    let mut broad = RewindBroadPhase::default();
    {
        let mut q = world.query::<(Entity, &FrameHistory)>();
        broad.rebuild(q.iter(&world));
    }
    world.insert_resource(broad);

    // The shooter at the south edge; its client's clock as the server sees it, with 2 s of
    // view reports arriving 100 ms ± 5 ms after their stamp.
    let eye = Vec3::new(0.0, 1.6, 20.0);
    let shooter = world
        .spawn(Transform::from_translation(eye - Vec3::Y * 1.6))
        .id();
    let link = world.spawn_empty().id();
    let mut remote = RemoteClientClock::default();
    remote.rtt = RTT;
    remote.jitter = 0.005;
    remote.interpolation_delay = DELAY;
    remote.delay_cap = DELAY;
    remote.reported = true;
    for k in 0..60 {
        let arrival = NOW - 2.0 + f64::from(k) / 30.0;
        let lag = RTT + 0.005 * (f64::from(k % 7) / 3.0 - 1.0);
        remote.record_view_lag(arrival, arrival - lag - DELAY);
    }

    // Requests: aim at a target's torso as the client drew it (ticks 108 → 111, half-way).
    let claim = |target: Entity| ClaimedView {
        character: target,
        from: 108,
        to: 111,
        alpha: 0.5,
        mode: SmoothingMode::Hermite,
        ease: Vec3::ZERO,
    };
    let mut state = SystemState::<RewindQuery>::new(&mut world);
    let rewind = state.get(&world).expect("rewind resources");
    let torso = layout.boxes.iter().position(|b| b.bone == "torso").unwrap();
    let requests = |weapon: u8| -> Vec<FireRequest> {
        let spec = table.get(weapon).unwrap();
        targets
            .iter()
            .map(|target| {
                let poses = rewind.view_pose(&claim(*target)).unwrap();
                let aim = (poses[torso].0 - eye).normalize();
                let c = claim(*target);
                FireRequest {
                    weapon,
                    fire_index: 1,
                    origin: eye,
                    aim,
                    directions: shot_directions(spec, 1, aim),
                    view_time: VIEW,
                    judged_time: VIEW,
                    delay_cap: None,
                    move_seq: None,
                    sent_view_time: VIEW,
                    sent_delay: DELAY,
                    claims: vec![WireClaim {
                        target: c.character,
                        from: c.from,
                        to: c.to,
                        alpha: c.alpha,
                        mode: c.mode,
                        ease: c.ease,
                        pellets: unlag::combat::EVERY_PELLET,
                        behind: 0.0,
                    }],
                }
            })
            .collect()
    };
    let rifle = requests(table.id("rifle").unwrap());
    let shotgun = requests(table.id("shotgun").unwrap());
    Bench {
        world,
        link,
        shooter,
        remote,
        armory,
        rifle,
        shotgun,
        targets,
    }
}

/// Each pellet of a request as a ray (the bench's requests carry their directions, as the
/// server judged every request before honest clients left them to its own roll).
fn rays(request: &FireRequest) -> Vec<(Vec3, Vec3)> {
    request
        .directions
        .iter()
        .map(|d| (request.origin, *d))
        .collect()
}

/// The naive rewind of one request: every character's boxes posed at the view time, every box
/// tested; the nearest hit's character per ray.
fn naive(
    rewind: &RewindQuery,
    histories: &[(Entity, Vec<unlag::rewind::HitBox>)],
    request: &FireRequest,
) -> usize {
    let mut hits = 0;
    let posed: Vec<_> = histories
        .iter()
        .map(|(c, boxes)| (*c, boxes, rewind.pose_at(*c, request.view_time).unwrap()))
        .collect();
    for dir in &request.directions {
        let mut best = f32::INFINITY;
        for (_, boxes, poses) in &posed {
            for (b, (_, p, r)) in boxes.iter().zip(poses) {
                if let Some((d, _, _)) =
                    hit_box_ray(&b.shape, *p, *r, request.origin, *dir, best.min(200.0), 0.0)
                {
                    best = best.min(d);
                }
            }
        }
        hits += usize::from(best.is_finite());
    }
    hits
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let mut b = setup();
    let mut judge_state = SystemState::<ShotJudge>::new(&mut b.world);
    let mut rewind_state = SystemState::<RewindQuery>::new(&mut b.world);
    let histories: Vec<(Entity, Vec<unlag::rewind::HitBox>)> = {
        let mut q = b.world.query::<(Entity, &FrameHistory)>();
        q.iter(&b.world)
            .map(|(e, h)| (e, h.hit_boxes().to_vec()))
            .collect()
    };
    let rounds = if bench { 50 } else { 1 };
    println!();
    println!(
        "server cost per FireRequest, {PLAYERS} players, 100 ms RTT (µs, mean of {} requests)",
        rounds * PLAYERS
    );
    println!(
        "{:>8} {:>10} {:>12} {:>10} {:>12} {:>10} {:>16}",
        "weapon", "judge", "rewind only", "recorded", "one by one", "naive", "on target"
    );
    for (name, requests) in [("rifle", b.rifle.clone()), ("shotgun", b.shotgun.clone())] {
        let judge = judge_state.get(&b.world).expect("combat resources");
        let rewind = rewind_state.get(&b.world).expect("rewind resources");
        let mut stats = CombatStats::default();
        let mut on_target = 0;
        let start = Instant::now();
        for _ in 0..rounds {
            for (request, target) in requests.iter().zip(&b.targets) {
                let mut armory = b.armory.clone();
                let verdict = judge.judge(
                    black_box(request),
                    b.shooter,
                    b.link,
                    &b.remote,
                    &mut armory,
                    Vec3::new(0.0, 0.0, 20.0),
                    &mut stats,
                );
                match verdict {
                    Ok(ShotVerdict::Hits { hits, .. }) => {
                        on_target += usize::from(hits.iter().any(|h| h.target == *target));
                    }
                    other => panic!("an honest {name} shot was refused: {other:?}"),
                }
            }
        }
        let judged = start.elapsed().as_secs_f64() * 1e6 / (rounds * requests.len()) as f64;
        let start = Instant::now();
        for _ in 0..rounds {
            for request in &requests {
                let rays = rays(request);
                let claims: Vec<ClaimedView> = request.claims.iter().map(WireClaim::view).collect();
                black_box(
                    rewind
                        .rays_as_seen(&rays, 200.0, request.view_time, Some(b.shooter), &claims)
                        .unwrap(),
                );
            }
        }
        let rewound = start.elapsed().as_secs_f64() * 1e6 / (rounds * requests.len()) as f64;
        // The same rays against the recorded poses, no claims.
        let start = Instant::now();
        for _ in 0..rounds {
            for request in &requests {
                let rays = rays(request);
                black_box(
                    rewind
                        .rays(&rays, 200.0, request.view_time, Some(b.shooter))
                        .unwrap(),
                );
            }
        }
        let recorded = start.elapsed().as_secs_f64() * 1e6 / (rounds * requests.len()) as f64;
        // The same rays one at a time: each its own traversal of the broad phase and its own
        // lookups (what the pellets sharing one cone and one rewind save).
        let start = Instant::now();
        for _ in 0..rounds {
            for request in &requests {
                for (origin, direction) in rays(request) {
                    black_box(
                        rewind
                            .ray(origin, direction, 200.0, request.view_time, Some(b.shooter))
                            .unwrap(),
                    );
                }
            }
        }
        let one_by_one = start.elapsed().as_secs_f64() * 1e6 / (rounds * requests.len()) as f64;
        let naive_rounds = rounds.min(5);
        let start = Instant::now();
        for _ in 0..naive_rounds {
            for request in &requests {
                black_box(naive(&rewind, &histories, request));
            }
        }
        let brute = start.elapsed().as_secs_f64() * 1e6 / (naive_rounds * requests.len()) as f64;
        println!(
            "{name:>8} {judged:>10.2} {rewound:>12.2} {recorded:>10.2} {one_by_one:>12.2} {brute:>10.1} {:>10} of {:>3}",
            on_target / rounds,
            requests.len()
        );
        // Most aims reach their target (a nearer player may stand in the way, and the
        // shotgun's 5° cone spreads its pellets around far torsos).
        let share = if name == "rifle" { 0.8 } else { 0.5 };
        assert!(
            on_target as f64 >= share * (rounds * requests.len()) as f64,
            "{on_target}"
        );
    }
    println!();

    // A claimed ease is checked against every jump smoothing could have eased from: an
    // unexplained one (a magnet's) is the search's whole cost, every moment tried.
    let rewind = rewind_state.get(&b.world).expect("rewind resources");
    // What the client acknowledged (`StatesSentTo::heard`, read once a shot with an ease):
    // one state message a tick, every one acknowledged but for a burst of 0.75 s before the
    // view (ticks 60-105), through which a state may have been held.
    let (mut ledger, mut log) = (
        unlag::core::AckLedger::default(),
        unlag::net::StatesSentTo::default(),
    );
    for tick in 0..=120u32 {
        let (id, at) = (tick as u16 + 1, f64::from(tick) * TICK);
        ledger.on_sent(id, at, u64::from(tick), |_| {});
        let message = log.begin();
        log.end(message, tick, u64::from(tick));
        if !(60..=105).contains(&tick) {
            ledger.on_header(id, 0, at, |_| {});
        }
    }
    let start = Instant::now();
    for _ in 0..rounds * 100 {
        black_box(log.heard(black_box(&ledger)));
    }
    let read = start.elapsed().as_secs_f64() * 1e6 / (rounds * 100) as f64;
    let heard = log.heard(&ledger);
    println!("reading what a client acknowledged, 121 messages: {read:.2} µs");
    println!();
    println!("claimed ease checks, {PLAYERS} targets at 20 Hz (µs per claim, mean; without and");
    println!("with the client's acknowledgements showing a 0.75-s burst before the view)");
    println!(
        "{:>24} {:>10} {:>10} {:>10} {:>10}",
        "ease", "µs", "explained", "burst µs", "explained"
    );
    let magnets = [
        ("none", Vec3::ZERO),
        ("0.6 m up", Vec3::Y * 0.6),
        ("0.6 m level", Vec3::X * 0.6),
        ("0.15 m level", Vec3::Z * 0.15),
    ];
    for (name, ease) in magnets {
        let claims: Vec<ClaimedView> = b
            .rifle
            .iter()
            .map(|r| ClaimedView {
                ease,
                ..r.claims[0].view()
            })
            .collect();
        let run = |heard: Option<&unlag::net::HeardTicks>| {
            let (mut explained, start) = (0, Instant::now());
            for _ in 0..rounds {
                for claim in &claims {
                    explained += usize::from(rewind.ease_explained(black_box(claim), VIEW, heard));
                }
            }
            let each = start.elapsed().as_secs_f64() * 1e6 / (rounds * claims.len()) as f64;
            (each, explained / rounds)
        };
        let (each, explained) = run(None);
        let (burst, explained_burst) = run(Some(&heard));
        println!(
            "{name:>24} {each:>10.2} {explained:>6} of {:>3} {burst:>10.2} {explained_burst:>6} of {:>3}",
            claims.len(),
            claims.len()
        );
    }
    println!();

    let mut criterion = Criterion::default().configure_from_args();
    let mut group = criterion.benchmark_group("combat");
    for (name, requests) in [("rifle", b.rifle.clone()), ("shotgun", b.shotgun.clone())] {
        let judge = judge_state.get(&b.world).expect("combat resources");
        let mut stats = CombatStats::default();
        let mut i = 0;
        group.bench_function(BenchmarkId::new("judge", name), |bencher| {
            bencher.iter_batched(
                || b.armory.clone(),
                |mut armory| {
                    i = (i + 1) % requests.len();
                    judge
                        .judge(
                            black_box(&requests[i]),
                            b.shooter,
                            b.link,
                            &b.remote,
                            &mut armory,
                            Vec3::new(0.0, 0.0, 20.0),
                            &mut stats,
                        )
                        .is_ok()
                },
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
    criterion.final_summary();
}
