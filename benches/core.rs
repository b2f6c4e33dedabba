//! Benchmarks of `unlag_core`, each beside the naive way of doing the same thing.
//!
//! `link_simulator`: delivering packets through the simulated link (a binary heap on delivery
//! time) against a plain vector scanned for due packets every frame.
//!
//! `proxy_smoothing_256`: placing 256 proxies in Hermite mode from their state buffers (binary
//! search for the pair around the view time) against scanning each buffer from the start.
//! Criterion reports the time for all 256; divide by 256 for ns per proxy (goal ≤ 100 ns).

// criterion's macros generate undocumented functions.
#![allow(missing_docs)]

use core::time::Duration;
use criterion::{BenchmarkId, Criterion, black_box, criterion_group, criterion_main};
use unlag::core::{
    LinkSimulator, PathConditions, ProxyState, SmoothingMode, SplitMix64, StateBuffer, evaluate,
};

const FRAME: f64 = 1.0 / 240.0;

fn conditions() -> PathConditions {
    PathConditions {
        latency: Duration::from_millis(150),
        jitter: Duration::from_millis(20),
        loss: 0.02,
        burst: 1.0,
    }
}

/// One simulated second at 240 frames with `per_frame` packets sent each frame.
fn heap_second(per_frame: usize) -> usize {
    let mut sim = LinkSimulator::new(conditions(), 1);
    let mut delivered = 0;
    for f in 0..240 {
        let now = f as f64 * FRAME;
        for p in 0..per_frame {
            sim.send(now, p);
        }
        while sim.receive_due(now).is_some() {
            delivered += 1;
        }
    }
    delivered
}

/// The same with a vector of `(due, packet)` scanned and compacted every frame.
fn naive_second(per_frame: usize) -> usize {
    let c = conditions();
    let mut rng = SplitMix64::new(1);
    let mut queue: Vec<(f64, usize)> = Vec::new();
    let mut delivered = 0;
    for f in 0..240 {
        let now = f as f64 * FRAME;
        for p in 0..per_frame {
            let lost = rng.next_f64() < c.loss;
            let noise = rng.next_normal();
            if !lost {
                let delay = (c.latency.as_secs_f64() + noise * c.jitter.as_secs_f64()).max(0.0);
                queue.push((now + delay, p));
            }
        }
        let before = queue.len();
        queue.retain(|(due, _)| *due > now);
        delivered += before - queue.len();
    }
    delivered
}

fn link_simulator(c: &mut Criterion) {
    let mut group = c.benchmark_group("link_simulator_one_second");
    for per_frame in [1usize, 16, 128] {
        group.bench_with_input(BenchmarkId::new("heap", per_frame), &per_frame, |b, &n| {
            b.iter(|| heap_second(black_box(n)))
        });
        group.bench_with_input(
            BenchmarkId::new("naive_vec", per_frame),
            &per_frame,
            |b, &n| b.iter(|| naive_second(black_box(n))),
        );
    }
    group.finish();
}

/// 256 proxies, each with 32 states 50 ms apart.
fn proxies() -> Vec<StateBuffer> {
    let mut rng = SplitMix64::new(9);
    (0..256)
        .map(|_| {
            let mut b = StateBuffer::new(32);
            let v = bevy::math::Vec3::new(rng.next_f64() as f32, 0.0, rng.next_f64() as f32) * 5.0;
            for k in 0..32u32 {
                let t = f64::from(k) * 0.05;
                b.push(
                    ProxyState {
                        tick: k * 3,
                        time: t,
                        position: v * t as f32,
                        rotation: bevy::math::Quat::from_rotation_y(t as f32),
                        velocity: v,
                        flags: 0,
                        teleport: false,
                        off_grid: false,
                    },
                    10.0,
                )
                .unwrap();
            }
            b
        })
        .collect()
}

fn proxy_smoothing(c: &mut Criterion) {
    let buffers = proxies();
    let view = 1.234;
    let mut group = c.benchmark_group("proxy_smoothing_256");
    group.bench_function("state_buffer_sample", |b| {
        b.iter(|| {
            buffers
                .iter()
                .map(|p| {
                    p.sample(black_box(view), SmoothingMode::Hermite, 0.25)
                        .unwrap()
                        .position
                })
                .fold(bevy::math::Vec3::ZERO, |a, p| a + p)
        })
    });
    group.bench_function("naive_scan", |b| {
        b.iter(|| {
            buffers
                .iter()
                .map(|p| {
                    let states: Vec<&ProxyState> = p.states().collect();
                    let i = states
                        .iter()
                        .position(|s| s.time > black_box(view))
                        .unwrap();
                    let (a, b) = (states[i - 1], states[i]);
                    let alpha = ((view - a.time) / (b.time - a.time)) as f32;
                    evaluate(SmoothingMode::Hermite, a, b, alpha).0
                })
                .fold(bevy::math::Vec3::ZERO, |a, p| a + p)
        })
    });
    group.finish();
}

criterion_group!(benches, link_simulator, proxy_smoothing);
criterion_main!(benches);
