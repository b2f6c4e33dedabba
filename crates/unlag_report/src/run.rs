//! The report's driver: plays the match of the options, samples every frame a client drew,
//! lets the last verdicts arrive, and gathers every figure into a [`Report`].

use crate::arena::ClientScript;
use crate::measure::{Ledger, ProxySamples, agree, compare_agreement};
use crate::setup::start_match;
use crate::stopwatch::{Stopwatch, server_cost};
use crate::{Agreement, OptionError, Report, ReportOptions, Stat, WarmUpTally, cheat, peek};
use bevy::prelude::*;
use core::time::Duration;
use std::collections::BTreeMap;
use std::time::Instant;
use unlag::combat::{CombatStats, WeaponKind, Weapons};
use unlag::movement::MovementStats;
use unlag_testbed::{ClientMeasures, Testbed};

/// Peeks measured for the peeker's advantage.
const PEEKS: usize = 6;

/// Seconds after the measured span for the last verdicts to arrive.
const COOL_DOWN: f64 = 1.5;

/// Runs the match of `options` and measures it; `progress` hears the share done (0–1) now
/// and then.
pub fn run(options: &ReportOptions, progress: &mut dyn FnMut(f64)) -> Result<Report, OptionError> {
    let mut tb = start_match(options, options.pace())?;
    let wall = Instant::now();
    let proxies = play(&mut tb, options, progress);
    let wall_seconds = wall.elapsed().as_secs_f64();
    tb.server_world_mut().resource_mut::<Stopwatch>().measuring = false;
    let measures: Vec<ClientMeasures> = (0..options.clients).map(|i| tb.measures(i)).collect();
    let server_stats = tb
        .server_world()
        .resource::<unlag::smoothing::SmoothingStats>();
    let (off_grid, deltas) = (
        server_stats.off_grid_states_sent,
        server_stats.delta_states_sent,
    );
    let corrections: Vec<u64> = (0..options.clients)
        .map(|i| {
            tb.client_world(i)
                .resource::<MovementStats>()
                .corrections_received
        })
        .collect();
    // Let the last verdicts arrive.
    for i in 0..options.clients {
        tb.client_world_mut(i)
            .resource_mut::<ClientScript>()
            .running = false;
    }
    tb.run_for(Duration::from_secs_f64(COOL_DOWN));
    let mut report = Report {
        options: described(options),
        disconnects: measures.iter().filter(|m| !m.connected).count(),
        seconds: options.seconds,
        simulated_per_wall_second: options.seconds / wall_seconds.max(1e-9),
        ..default()
    };
    add_movement(&mut report, &tb, options, &corrections);
    add_proxies(&mut report, &proxies);
    add_combat(&mut report, &tb, options);
    add_link(&mut report, &measures);
    report.off_grid_states_per_sec =
        off_grid as f64 / options.seconds.max(1e-9) / options.clients.max(1) as f64;
    report.delta_states_per_sec =
        deltas as f64 / options.seconds.max(1e-9) / options.clients.max(1) as f64;
    report.server_cost = server_cost(&tb);
    // The peeks run a match of their own, after this one.
    drop(tb);
    report.peek = peek::measure(options, PEEKS)?;
    progress(1.0);
    Ok(report)
}

/// Plays the measured span, sampling every proxy once per frame a client drew (a slow client
/// draws fewer than the server runs).
fn play(tb: &mut Testbed, options: &ReportOptions, progress: &mut dyn FnMut(f64)) -> ProxySamples {
    let mut proxies = ProxySamples::default();
    let frame = tb.frame().as_secs_f64();
    let frames = (options.seconds / frame).round() as u64;
    let mut drawn: Vec<u64> = (0..options.clients).map(|i| tb.client_frames(i)).collect();
    for f in 0..frames {
        tb.step();
        for (i, drawn) in drawn.iter_mut().enumerate() {
            if tb.client_frames(i) != *drawn {
                *drawn = tb.client_frames(i);
                proxies.sample(tb, i);
            }
        }
        if f % 240 == 0 {
            progress(f as f64 / frames as f64);
        }
    }
    proxies
}

/// The match's options, by name, as the report prints them.
fn described(options: &ReportOptions) -> BTreeMap<&'static str, String> {
    BTreeMap::from([
        ("bots", options.bots.to_string()),
        ("clients", options.clients.to_string()),
        ("seconds", options.seconds.to_string()),
        ("rtt_ms", options.rtt_ms.to_string()),
        ("jitter_ms", options.jitter_ms.to_string()),
        ("loss_percent", options.loss_percent.to_string()),
        ("burst", options.burst.to_string()),
        ("update_rate_hz", options.update_rate_hz.to_string()),
        ("smoothing", format!("{:?}", options.smoothing)),
        ("seed", options.seed.to_string()),
        ("fire_interval", options.fire_interval.to_string()),
        (
            "weapon",
            options.weapon.clone().unwrap_or_else(|| "mix".into()),
        ),
        (
            "client_fps",
            options
                .client_fps
                .map_or("server's".into(), |f| f.to_string()),
        ),
        (
            "frame_jitter_percent",
            options.frame_jitter_percent.to_string(),
        ),
        (
            "hitches",
            options.hitches.map_or("none".into(), |(p, ms)| {
                format!("{p} % of frames take {ms} ms")
            }),
        ),
        (
            "cold_start",
            options.cold_start.map_or("none".into(), |(s, ms)| {
                format!("every third frame of the first {s} s takes {ms} ms")
            }),
        ),
        (
            "server",
            if options.listen {
                "listen"
            } else {
                "dedicated"
            }
            .into(),
        ),
        ("playout", if options.playout { "on" } else { "off" }.into()),
        ("packing", options.packing.name().into()),
        (
            "off_grid",
            if options.off_grid { "on" } else { "off" }.into(),
        ),
        ("deltas", if options.deltas { "on" } else { "off" }.into()),
        (
            "spread_above",
            if options.spread_above == usize::MAX {
                "off".into()
            } else {
                options.spread_above.to_string()
            },
        ),
        (
            "full_within",
            options
                .full_within
                .map_or("off".into(), |m| format!("{m} m")),
        ),
        (
            "copies",
            if options.copies_ride {
                "ride"
            } else {
                "spread"
            }
            .into(),
        ),
        (
            "executor",
            if options.multi_threaded {
                "multi-threaded"
            } else {
                "single-threaded"
            }
            .into(),
        ),
        (
            "cheat",
            options.cheat.map_or("none".into(), |c| c.name().to_owned()),
        ),
    ])
}

/// Movement: corrections per minute per client (`corrections` over the measured span), how far
/// they moved the character, the server's refusals and flagged speed hacks, the cheat.
fn add_movement(report: &mut Report, tb: &Testbed, options: &ReportOptions, corrections: &[u64]) {
    report.corrections_per_min = corrections
        .iter()
        .map(|c| *c as f64 * 60.0 / options.seconds)
        .collect();
    let distances: Vec<f64> = (0..options.clients)
        .flat_map(|i| tb.client_world(i).resource::<Ledger>().corrections.clone())
        .collect();
    report.correction_distance_m = Stat::of(&distances, 1.0);
    let movement = tb.server_world().resource::<MovementStats>();
    report.movement_rejected = movement.rejected_total();
    report.speed_hacks_flagged = movement.speed_hacks_flagged;
    report.warm_up = tb.server_world().resource::<WarmUpTally>().clone();
    report.cheat = options.cheat.map(|c| c.name().to_owned());
    report.cheating_shots = tb
        .client_world(0)
        .get_resource::<cheat::Cheater>()
        .map_or(0, |c| c.sent);
}

/// Smoothing: the proxies' error at view time, its jumps and pops, the delay, starved frames.
fn add_proxies(report: &mut Report, proxies: &ProxySamples) {
    report.proxy_error_m = Stat::of(&proxies.errors, 1.0);
    report.proxy_max_jump_m = proxies.jumps.iter().copied().fold(0.0, f64::max);
    report.proxy_max_pop_m = proxies.pops.iter().copied().fold(0.0, f64::max);
    report.proxy_max_track_pop_m = proxies.track_pops.iter().copied().fold(0.0, f64::max);
    report.interpolation_delay_ms = Stat::of(&proxies.delays, 1000.0);
    report.starved_share = proxies.starved as f64 / proxies.frames.max(1) as f64;
}

/// Combat: agreement per hitscan weapon over every client's ledger, projectiles, refusals by
/// reason, the claims the server judged other than drawn, and (with `--compare-validation`)
/// every method's agreement.
fn add_combat(report: &mut Report, tb: &Testbed, options: &ReportOptions) {
    let table = tb
        .client_world(0)
        .resource::<Weapons>()
        .table
        .clone()
        .expect("loaded when the match started");
    for (id, spec) in table.weapons.iter().enumerate() {
        if matches!(spec.kind, WeaponKind::Projectile { .. }) {
            continue;
        }
        let mut a = Agreement {
            weapon: spec.name.clone(),
            ..default()
        };
        for i in 0..options.clients {
            agree(tb.client_world(i).resource::<Ledger>(), id as u8, &mut a);
        }
        report.agreement.push(a);
    }
    let stats = tb.server_world().resource::<CombatStats>();
    report.stale_claims = stats.stale_claims;
    report.claims_behind = stats.claims_behind;
    report.unexplained_eases = stats.unexplained_eases;
    report.projectiles.launched = stats.projectiles;
    for i in 0..options.clients {
        for impact in &tb.client_world(i).resource::<Ledger>().impacts {
            report.projectiles.impacts += 1;
            report.projectiles.direct_hits +=
                u64::from(impact.0.hits.iter().any(|h| h.pellets > 0));
            report.projectiles.splash_hits +=
                impact.0.hits.iter().filter(|h| h.pellets == 0).count() as u64;
        }
    }
    report.rejected = stats
        .rejected
        .iter()
        .map(|(reason, n)| (format!("{reason:?}"), *n))
        .collect();
    if options.compare_validation {
        report.validation = compare_agreement(tb, options.clients);
    }
}

/// The link: the clients' clocks (their estimate of the server's time less the truth, each
/// frame) and bytes per second up and down, on the wire and by message kind (means over
/// clients).
fn add_link(report: &mut Report, measures: &[ClientMeasures]) {
    let n = measures.len().max(1) as f64;
    let errors = measures.iter().map(|m| &m.server_time_error);
    report.clock_error_ms = [
        errors.clone().map(|e| e.mean).sum::<f64>() / n * 1e3,
        errors.clone().map(|e| e.min).fold(f64::INFINITY, f64::min) * 1e3,
        errors.map(|e| e.max).fold(f64::NEG_INFINITY, f64::max) * 1e3,
    ];
    report.bytes_up_per_sec = measures.iter().map(|m| m.bytes_up_per_sec).sum::<f64>() / n;
    report.bytes_down_per_sec = measures.iter().map(|m| m.bytes_down_per_sec).sum::<f64>() / n;
    report.datagrams_up_per_sec = measures.iter().map(|m| m.datagrams_up_per_sec).sum::<f64>() / n;
    report.datagrams_down_per_sec = measures
        .iter()
        .map(|m| m.datagrams_down_per_sec)
        .sum::<f64>()
        / n;
    for m in measures {
        for k in &m.up_by_kind {
            *report.up_by_kind.entry(k.kind.to_string()).or_default() += k.bytes_per_sec / n;
            *report
                .up_messages_by_kind
                .entry(k.kind.to_string())
                .or_default() += k.messages_per_sec / n;
        }
        for k in &m.down_by_kind {
            *report.down_by_kind.entry(k.kind.to_string()).or_default() += k.bytes_per_sec / n;
            *report
                .down_messages_by_kind
                .entry(k.kind.to_string())
                .or_default() += k.messages_per_sec / n;
        }
    }
}
