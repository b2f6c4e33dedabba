//! Server capacity: one server tick with 16, 64, 128 and 256 connected players.
//!
//! Each player is a real client App on the testbed (lightyear over crossbeam, 100 ms RTT,
//! 5 ms jitter, no loss), predicting its character through the arena of the `report` example
//! and firing at the proxies it draws every 10 ticks, the clients taking turns, so 10 % of
//! the players fire in each tick (rifle 80 %, shotgun 10 %, launcher 10 %; a player whose
//! magazine is empty reloads instead). Every App runs at 60 frames per second, one tick per
//! frame. Only the server App's update is timed (the clients' work is not the server's).
//!
//! - Printed first, per player count, over 120 ticks: µs per tick (mean and p99) of the whole
//!   server update and of its parts — movement validation (`MovementPredictionSystems::Check`),
//!   history recording (`RewindSystems::Record`), shots and rewinds
//!   (`CombatSystems::Server`), proxy states (`ProxySmoothingSystems::Send`), and the
//!   `PreUpdate` and `PostUpdate` schedules (lightyear's transport and replication in and out:
//!   the transport, measured apart) — and the shots judged per tick; then the send's parts:
//!   replicon's replication, typed messages, transport, netcode, link; and how many of the
//!   server's links it packs (`unlag::net::ServerPacking`: every one, on these lossless links,
//!   once their clients have reported for `PACK_AFTER`, which each run waits for) and how
//!   many datagrams it sent each client a second (each one netcode encrypts and the transport
//!   hands to the socket on its own: a cost per datagram besides the bytes); and the
//!   moves and the guess steps movement simulated per tick (a guess runs a late player's
//!   track on, one character-controller step per tick, as a move does).
//!
//! Every count is played three times: with interest management off (`InterestPolicy::Everyone`:
//! every client is sent every character) and on (the default `Distance` policy: characters out
//! of a client's sight beyond 30 m are not sent to it, nor their shots out of its hearing), on
//! Bevy's single-threaded executor, and with it on again on Bevy's multi-threaded executor
//! (`unlag_testbed::run_multi_threaded`: the server's systems handed to the compute pool's
//! threads; its clients too, untimed). Counts above `SmoothingSettings::spread_above` (96) are
//! played a fourth time, on one thread with relevance on and every proxy's states on its
//! rate's one grid (`spread_above` = `usize::MAX`, the way before proxies were spread over
//! the ticks of their interval: the `grid` column, `spread` or `one`). Every count is played
//! last with a reduced interest ring (relevance `ring`: proxies farther than [`RING`], 8 m,
//! from a client sent to it at the ring's 10 Hz, what a game turns on with
//! `InterestSettings::full_within`; two pairs in three here), on one thread. Under both
//! executors, the per-client work inside systems runs over the pool's threads (lightyear's
//! per-link systems, the movement checks from 32 characters up). The parts' timers measure
//! from inside the systems; under the multi-threaded executor other systems may run beside
//! them, so there the parts can add up to more than the whole.
//! - criterion `server_tick/relevance off, one thread/N`, `server_tick/relevance on, one
//!   thread/N`, `server_tick/relevance on, multi-threaded/N`, `server_tick/relevance on,
//!   one thread, one grid/N` and `server_tick/relevance ring, one thread/N`: the whole server
//!   update per tick.
//!
//! The goal: 256 players within 8 ms per tick (p99 12 ms) on the 2-core test machine.
//! Run as a test (`cargo test`), it plays 8 players for a few ticks; `cargo bench --bench
//! server_tick -- '64|256'` plays only the counts given, and criterion's options work as
//! usual (`-- --warm-up-time 1 --measurement-time 5`).

// criterion's macros generate undocumented functions.
#![allow(missing_docs)]

use criterion::{BenchmarkId, Criterion, SamplingMode};
use std::time::Duration;
use unlag::combat::CombatStats;
use unlag::movement::MovementStats;
use unlag::net::PACK_AFTER;
use unlag::smoothing::{InterestPolicy, InterestSettings, SmoothingMode, SmoothingSettings};
use unlag_report::bench_args::{criterion_filter, filter_numbers};
use unlag_report::{Pace, ReportOptions, reset_server_cost, server_cost, start_match};
use unlag_testbed::Testbed;

/// Ticks between two shots of one player.
const FIRE_EVERY: u64 = 10;

/// Which proxies each client is sent.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Interest {
    /// Every proxy to every client (`InterestPolicy::Everyone`): relevance off.
    Everyone,
    /// The default `Distance` policy: relevance on.
    Distance,
    /// The `Distance` policy with a reduced ring from [`RING`] metres on (at its 10 Hz).
    Ring,
}

impl Interest {
    /// The table's `relevance` column.
    fn label(self) -> &'static str {
        match self {
            Self::Everyone => "off",
            Self::Distance => "on",
            Self::Ring => "ring",
        }
    }
}

/// Beyond this distance from a client the `ring` rows send proxies at the reduced ring's rate,
/// metres: the scripted players start on a circle of 8 m and walk the same path, so two pairs
/// in three stay farther apart than this.
const RING: f32 = 8.0;

/// A match of `n` players, with interest management on (the default policy) or off, its server
/// on one thread or on the multi-threaded executor, its proxies spread over the ticks of their
/// interval (the default) or every one on its rate's one grid.
fn players(n: usize, interest: Interest, multi_threaded: bool, spread: bool) -> Testbed {
    let options = ReportOptions {
        bots: 0,
        clients: n,
        rtt_ms: 100.0,
        jitter_ms: 5.0,
        loss_percent: 0.0,
        update_rate_hz: 20.0,
        smoothing: SmoothingMode::Hermite,
        seed: 1,
        multi_threaded,
        spread_above: if spread {
            SmoothingSettings::default().spread_above
        } else {
            usize::MAX
        },
        full_within: (interest == Interest::Ring).then_some(RING),
        ..Default::default()
    };
    let pace = Pace {
        frame_rate_hz: 60.0,
        fire_interval: FIRE_EVERY as f64 / 60.0,
    };
    let mut tb = start_match(&options, pace).unwrap_or_else(|e| panic!("{n} players: {e}"));
    if interest == Interest::Everyone {
        tb.server_world_mut().insert_resource(InterestSettings {
            policy: InterestPolicy::Everyone,
            ..Default::default()
        });
    }
    // The server packs a link once its client has reported for `PACK_AFTER` (the warm-up
    // played most of it): measured from then on, as a match runs.
    tb.run_until(Duration::from_secs_f64(PACK_AFTER + 1.0), |tb| {
        packed_links(tb) == n
    });
    tb
}

/// How many of the server's links to its clients it packs (`unlag::net::ServerPacking`).
fn packed_links(tb: &Testbed) -> usize {
    (0..tb.client_count())
        .filter_map(|i| tb.server_link(i))
        .filter(|&link| {
            tb.server_world()
                .get::<unlag::net::LinkTraffic>(link)
                .is_some_and(|t| t.packed)
        })
        .count()
}

/// How many (client, proxy) pairs the server's interest has sent in full, at a reduced rate
/// and not at all (those it decided on: a pair it has not is sent in full).
fn pairs_by_relevance(tb: &Testbed) -> [usize; 3] {
    let mut counts = [0; 3];
    for link in (0..tb.client_count()).filter_map(|i| tb.server_link(i)) {
        let Some(interest) = tb.server_world().get::<unlag::net::ProxyInterest>(link) else {
            continue;
        };
        for (_, pair) in interest.pairs() {
            counts[match pair.relevance {
                unlag::net::Relevance::Full => 0,
                unlag::net::Relevance::Reduced(_) => 1,
                unlag::net::Relevance::Dormant => 2,
            }] += 1;
        }
    }
    counts
}

/// Bytes the server has sent to all its clients, datagrams whole, and how many datagrams.
fn bytes_sent(tb: &mut Testbed) -> (u64, u64) {
    let world = tb.server_world_mut();
    let mut links = world.query::<&unlag::net::LinkTraffic>();
    links
        .iter(world)
        .fold((0, 0), |(b, d), t| (b + t.bytes_sent, d + t.datagrams_sent))
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    // `cargo bench --bench server_tick -- '64|256'` plays only those counts (criterion reads
    // the same argument as its filter); criterion's own options and their values are not
    // counts (`-- --warm-up-time 1` runs every count).
    let asked = criterion_filter(std::env::args().skip(1))
        .map(|f| filter_numbers(&f))
        .unwrap_or_default();
    let counts: Vec<usize> = match (bench, asked.is_empty()) {
        (false, _) => vec![8],
        (true, true) => vec![16, 64, 128, 256],
        (true, false) => asked,
    };
    let ticks = if bench { 120 } else { 12 };
    // Short runs by default (a tick of 256 players takes milliseconds); criterion's options on
    // the command line (`--sample-size`, `--warm-up-time`, `--measurement-time`) override them.
    let mut criterion = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(50))
        .measurement_time(Duration::from_millis(200))
        .configure_from_args();
    println!();
    println!("server µs per tick (mean / p99 over {ticks} ticks; this machine, this build)");
    println!(
        "{:>7} {:>9} {:>7} {:>6} {:>15} {:>13} {:>13} {:>13} {:>13} {:>13} {:>13} {:>7} {:>9}",
        "players",
        "relevance",
        "threads",
        "grid",
        "whole update",
        "movement",
        "recording",
        "shots",
        "proxy states",
        "receive",
        "send",
        "shots/t",
        "down B/s"
    );
    // (interest, multi-threaded, spread); the one-grid run only where spreading moves a proxy.
    let runs = [
        (Interest::Everyone, false, true),
        (Interest::Distance, false, true),
        (Interest::Distance, true, true),
        (Interest::Distance, false, false),
        (Interest::Ring, false, true),
    ];
    let spreads = |n: usize| n > SmoothingSettings::default().spread_above;
    let plays = counts
        .iter()
        .flat_map(|&n| runs.map(|r| (n, r)))
        .filter(|&(n, (.., spread))| spread || spreads(n));
    for (n, (interest, multi, spread)) in plays {
        let mut tb = players(n, interest, multi, spread);
        let label = interest.label();
        let threads = if multi { "multi" } else { "one" };
        let grid = if spread { "spread" } else { "one" };
        reset_server_cost(&mut tb);
        let sent_before = bytes_sent(&mut tb);
        let accepted = tb.server_world().resource::<CombatStats>().accepted;
        let moved_before = tb.server_world().resource::<MovementStats>().clone();
        for _ in 0..ticks {
            tb.step();
        }
        let cost = server_cost(&tb);
        // Downstream per client on the wire (datagrams the server sent, headers included).
        let sent_after = bytes_sent(&mut tb);
        let per_client_second =
            |after: u64, before: u64| (after - before) as f64 / n as f64 / (ticks as f64 / 60.0);
        let down = per_client_second(sent_after.0, sent_before.0);
        let datagrams = per_client_second(sent_after.1, sent_before.1);
        let stats = tb.server_world().resource::<CombatStats>();
        let shots = (stats.accepted - accepted) as f64 / ticks as f64;
        // Honest players: nothing refused, no move rejected.
        assert_eq!(stats.rejected_total(), 0, "{:?}", stats.rejected);
        assert_eq!(
            tb.server_world()
                .resource::<MovementStats>()
                .rejected_total(),
            0
        );
        let moved = tb.server_world().resource::<MovementStats>();
        let per_tick = |after: u64, before: u64| (after - before) as f64 / ticks as f64;
        let moves = per_tick(moved.moves_processed, moved_before.moves_processed);
        let guess_steps = per_tick(moved.guess_steps, moved_before.guess_steps);
        let taken = per_tick(moved.guessed_moves_taken, moved_before.guessed_moves_taken);
        let cell = |s: &unlag_report::Stat| format!("{:.0} / {:.0}", s.mean, s.p99);
        println!(
            "{n:>7} {label:>9} {threads:>7} {grid:>6} {:>15} {:>13} {:>13} {:>13} {:>13} {:>13} {:>13} {shots:>7.1} {down:>9.0}",
            cell(&cost.total_us),
            cell(&cost.movement_us),
            cell(&cost.record_us),
            cell(&cost.combat_us),
            cell(&cost.proxy_states_us),
            cell(&cost.receive_us),
            cell(&cost.send_us),
        );
        let p = &cost.send_parts;
        println!(
            "{:>32}   send's parts: replication {}, messages {}, transport {}, netcode {}, link {}; \
             links packed {} of {n}; {datagrams:.1} datagrams a client a second",
            "",
            cell(&p.replication_us),
            cell(&p.messages_us),
            cell(&p.transport_us),
            cell(&p.netcode_us),
            cell(&p.link_us),
            packed_links(&tb),
        );
        let [full, reduced, dormant] = pairs_by_relevance(&tb);
        println!(
            "{:>32}   interest at the end: {full} pairs in full, {reduced} at a reduced rate, \
             {dormant} dormant",
            "",
        );
        // Movement's simulations: the moves played (those a guess had simulated already are
        // not simulated again), and the guesses' steps shown while moves are late (each a
        // whole character-controller step, like a move).
        println!(
            "{:>32}   movement, per tick: {moves:.1} moves played ({taken:.1} of them taken from \
             guesses), {guess_steps:.1} guess steps simulated",
            "",
        );
        // A tenth of the players fire in each tick.
        if bench {
            assert!(shots > 0.05 * n as f64, "{shots} shots per tick");
        }

        let mut group = criterion.benchmark_group("server_tick");
        group.sampling_mode(SamplingMode::Flat);
        let name = match (multi, spread) {
            (true, _) => format!("relevance {label}, multi-threaded"),
            (false, true) => format!("relevance {label}, one thread"),
            (false, false) => format!("relevance {label}, one thread, one grid"),
        };
        let id = BenchmarkId::new(name, n);
        group.bench_function(id, |b| {
            b.iter_custom(|iters| {
                let before = tb.server_update_time();
                for _ in 0..iters {
                    tb.step();
                }
                tb.server_update_time() - before
            })
        });
        group.finish();
    }
    println!();
    criterion.final_summary();
}
