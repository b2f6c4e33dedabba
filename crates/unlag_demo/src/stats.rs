//! A dedicated server's status line: what an operator (and the flood and soak scripts) reads to
//! see that memory and the cost of a frame stay flat and what was refused.

use bevy::prelude::*;
use lightyear::prelude::server::ClientOf;
use lightyear::prelude::{Connected, LinkOf};
use std::time::Instant;
use unlag::combat::CombatStats;
use unlag::movement::MovementStats;
use unlag::net::{LinkTraffic, ServerLinkStats, ServerUdpSocket};

/// Prints one `server stats:` line every [`ServerStatsPlugin::every`] seconds of real time:
/// the process's resident memory, the wall-clock cost of a frame's work (median, 99th
/// percentile and worst over the period, milliseconds, sleeping excluded), entities, links
/// (all, connected) and the UDP addresses remembered, and every counter of refused or dropped
/// client traffic.
#[derive(Clone, Debug)]
pub struct ServerStatsPlugin {
    /// Seconds between two lines.
    pub every: f64,
}

impl Plugin for ServerStatsPlugin {
    fn build(&self, app: &mut App) {
        app.insert_resource(StatsClock {
            every: self.every,
            ..default()
        })
        .add_systems(First, frame_starts)
        .add_systems(Last, frame_ends);
    }
}

#[derive(Resource, Default)]
struct StatsClock {
    every: f64,
    started: Option<Instant>,
    /// Work of each frame of this period, seconds.
    frames: Vec<f64>,
    next: f64,
}

fn frame_starts(mut clock: ResMut<StatsClock>) {
    clock.started = Some(Instant::now());
}

/// The process's resident set size, kilobytes (0 where `/proc` is not there).
pub fn resident_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// `q` (0–1) of `sorted`, or 0 for none.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

#[allow(clippy::too_many_arguments)]
fn frame_ends(
    mut clock: ResMut<StatsClock>,
    real: Res<Time<Real>>,
    entities: Query<()>,
    links: Query<Has<Connected>, With<LinkOf>>,
    traffic: Query<&LinkTraffic, With<ClientOf>>,
    link_stats: Res<ServerLinkStats>,
    sockets: Query<&ServerUdpSocket>,
    combat: Option<Res<CombatStats>>,
    moves: Option<Res<MovementStats>>,
) {
    if let Some(started) = clock.started.take() {
        clock.frames.push(started.elapsed().as_secs_f64());
    }
    let now = real.elapsed_secs_f64();
    if now < clock.next {
        return;
    }
    clock.next = now + clock.every;
    let mut frames = std::mem::take(&mut clock.frames);
    frames.sort_by(f64::total_cmp);
    let connected = links.iter().filter(|c| *c).count();
    let malformed: u64 = traffic.iter().map(|t| t.malformed_dropped).sum();
    let refused = combat.as_ref().map_or(String::new(), |c| {
        let mut reasons: Vec<String> = c
            .rejected
            .iter()
            .map(|(reason, n)| format!(" {reason:?}={n}"))
            .collect();
        reasons.sort();
        reasons.concat()
    });
    let packets: String = unlag::net::PacketRefusal::ALL
        .iter()
        .filter(|r| link_stats.packets_refused.get(**r) > 0)
        .map(|r| format!(" {r:?}={}", link_stats.packets_refused.get(*r)))
        .collect();
    let moves = moves.map_or(String::new(), |m| {
        let reasons: String = unlag::movement::RejectReason::ALL
            .iter()
            .filter(|r| m.rejected(**r) > 0)
            .map(|r| format!(" {r:?}={}", m.rejected(*r)))
            .collect();
        format!(
            " corrections={} speed_hacks={} positions_refused={} moves_refused:{reasons}",
            m.corrections_sent, m.speed_hacks_flagged, m.client_positions_refused
        )
    });
    println!(
        "server stats: t={now:.0}s rss_kb={} frames={} frame_ms_p50={:.2} frame_ms_p99={:.2} \
         frame_ms_max={:.2} entities={} links={} connected={connected} addresses={} malformed={malformed} \
         packets_refused:{packets} strangers={} links_refused={} unconnected_despawned={}{moves} \
         shots_refused:{refused}",
        resident_kb(),
        frames.len(),
        quantile(&frames, 0.5) * 1e3,
        quantile(&frames, 0.99) * 1e3,
        frames.last().copied().unwrap_or(0.0) * 1e3,
        entities.iter().count(),
        links.iter().count(),
        sockets
            .iter()
            .map(ServerUdpSocket::addresses)
            .sum::<usize>(),
        link_stats.udp_strangers_dropped,
        link_stats.udp_links_refused,
        link_stats.unconnected_links_despawned,
    );
}
