//! Headless scripted players, and optionally a flood, against a running dedicated server
//! (`shooter --server`), over real UDP: what `tools/flood.sh` and `tools/soak.sh` drive.
//!
//! ```text
//! loadtest --server 127.0.0.1:5888 [--clients N] [--seconds S] [--fps F] [--flood]
//!          [--churn S] [--rtt MS] [--jitter MS] [--loss PERCENT] [--seed N] [--compare]
//! ```
//!
//! - `--clients N` honest scripted players (the report's script: they walk and fire at what
//!   they draw), stepped in this one thread at `--fps` frames per second (default 60).
//! - `--flood` adds three hostile clients (one sends its moves, shots, reloads and delay
//!   reports at 100 times the normal rate; one replays and reorders its own encrypted packets;
//!   one sends malformed packets under valid encryption: fragments that never complete, reliable
//!   ids far ahead, unknown channels and message kinds, bodies that do not decode) and a
//!   thread of raw datagrams: random,
//!   truncated and oversize ones, and connection requests from thousands of source addresses
//!   across 127.0.0.0/8.
//! - `--churn S` makes a player leave every S seconds and another join (every other one
//!   rejoins with the id of one that left: a reconnect), until 10 s before the end.
//! - `--compare` first plays the same players in one process (the testbed, the shooter's
//!   server rules, the same link simulated by the testbed), then against the server, and ends
//!   with one table of both (what `tools/real-vs-testbed.sh` prints).
//!
//! Every 10 s and at the end it prints each honest player's figures; at the end every player
//! leaves (netcode's disconnect), so the server's next status shows what the match left
//! behind. It exits 1 when an honest player ended disconnected, or (with `--flood`) had a shot refused or a movement
//! correction other than a respawn: a flood beside honest players must change nothing for
//! them.

#[path = "common/cli.rs"]
mod cli;

use bevy::prelude::*;
use core::net::{Ipv4Addr, SocketAddr};
use lightyear::connection::ConnectionSystems;
use lightyear::prelude::client::Client;
use lightyear::prelude::*;
use lightyear::transport::plugin::TransportSystems;
use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use unlag::combat::{FireRequest, ReloadRequest, Weapons, shot_directions};
use unlag::core::{LinkConditions, Seq16, SplitMix64};
use unlag::net::{DelayReport, NetClock, ReliableChannel, UnreliableChannel};
use unlag_demo::key;
use unlag_report::remote::{
    PlayerPlan, PlayerSummary, started, summary, testbed_match, udp_player,
};
use unlag_testbed::{MAX_CLIENT_FPS, MIN_CLIENT_FPS};

struct Options {
    server: SocketAddr,
    clients: usize,
    seconds: f64,
    fps: f64,
    flood: bool,
    churn: Option<f64>,
    conditions: (f64, f64, f64),
    seed: u64,
    compare: bool,
}

fn parse() -> Result<Options, String> {
    let mut o = Options {
        server: SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 5888),
        clients: 3,
        seconds: 60.0,
        fps: 60.0,
        flood: false,
        churn: None,
        conditions: (0.0, 0.0, 0.0),
        seed: 1,
        compare: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = |name: &str| cli::number(&mut args, name);
        match flag.as_str() {
            "--server" => {
                let a = args.next().ok_or("--server needs an address")?;
                o.server = a.parse().map_err(|e| format!("--server: {a:?}: {e}"))?;
            }
            "--clients" => o.clients = value("--clients")? as usize,
            "--seconds" => o.seconds = value("--seconds")?,
            "--fps" => o.fps = value("--fps")?.max(1.0),
            "--flood" => o.flood = true,
            "--churn" => o.churn = Some(value("--churn")?.max(1.0)),
            "--rtt" => o.conditions.0 = value("--rtt")?,
            "--jitter" => o.conditions.1 = value("--jitter")?,
            "--loss" => o.conditions.2 = value("--loss")?,
            "--seed" => o.seed = value("--seed")? as u64,
            "--compare" => o.compare = true,
            "-h" | "--help" => {
                return Err("usage: loadtest --server ADDR [--clients N] [--seconds S] \
                     [--fps F] [--flood] [--churn S] [--rtt MS] [--jitter MS] [--loss PERCENT] \
                     [--seed N] [--compare]"
                    .into());
            }
            other => return Err(format!("unknown option {other} (try --help)")),
        }
    }
    o.link_conditions().validate().map_err(|e| e.to_string())?;
    if o.compare {
        if o.flood || o.churn.is_some() {
            return Err("--compare plays honest players only: no --flood or --churn".into());
        }
        if !(MIN_CLIENT_FPS..=MAX_CLIENT_FPS).contains(&o.fps) {
            return Err(format!(
                "--compare: --fps {} is out of the testbed's range ({MIN_CLIENT_FPS} to \
                 {MAX_CLIENT_FPS})",
                o.fps
            ));
        }
    }
    Ok(o)
}

impl Options {
    /// What each player's link conditioner simulates, both directions.
    fn link_conditions(&self) -> LinkConditions {
        let (rtt, jitter, loss) = self.conditions;
        LinkConditions::new(
            Duration::from_secs_f64(rtt / 1e3),
            Duration::from_secs_f64(jitter / 1e3),
            (loss / 100.0) as f32,
        )
    }
}

/// What a hostile client does besides playing.
#[derive(Resource, Clone, Copy, Debug, PartialEq)]
enum Hostile {
    /// Its moves (every packet, copied), shots, reloads and delay reports at 100 times the
    /// normal rate.
    Noisy,
    /// Replays and reorders its own encrypted packets.
    Replayer,
    /// Sends malformed packets (before encryption, so they pass netcode): fragments of
    /// messages that never complete (one claiming 2^40 fragments), reliable ids far ahead of
    /// a gap, unknown channels and message kinds, bodies that do not decode, truncated batches.
    Malformer,
}

/// Counts of what the flood sent, by kind.
#[derive(Default)]
struct FloodCounts {
    junk: AtomicU64,
    truncated: AtomicU64,
    oversize: AtomicU64,
    requests: AtomicU64,
    sources: AtomicU64,
}

#[derive(Resource, Default)]
struct HostileState {
    rng: u64,
    fire_index: u32,
    report_seq: u16,
    message_id: u16,
    sent_packets: Vec<Vec<u8>>,
    copies: u64,
    /// The malformer's ingredients: the reliable and unreliable channels' network ids and a
    /// delay report's bytes, once the protocol is known.
    malformed: Option<(u16, u16, Vec<u8>)>,
}

fn main() {
    let options = cli::options_or_exit("loadtest", parse());
    let var = |name: &str| std::env::var(name).ok();
    let key = cli::options_or_exit(
        "loadtest",
        key::load_key(
            None,
            var(key::KEY_FILE_ENV),
            var(key::KEY_ENV),
            options.server,
        ),
    );
    let conditions = options.link_conditions();
    let plan = |n: u64| PlayerPlan {
        id: 1_000 + n,
        seed: options.seed.wrapping_mul(1_000).wrapping_add(n),
        conditions,
        fire_interval: 0.1,
    };
    // The same players in one process first (the testbed), so the table can set them side by
    // side with the real processes below.
    let in_process = options.compare.then(|| {
        let plans: Vec<PlayerPlan> = (0..options.clients as u64).map(plan).collect();
        testbed_run(&plans, &options)
    });
    let mut honest: Vec<(u64, App)> = (0..options.clients as u64)
        .map(|n| (n, udp_player(options.server, &key, &plan(n))))
        .collect();
    let mut next_player = options.clients as u64;
    let mut left: Vec<u64> = Vec::new();
    let mut hostile: Vec<App> = Vec::new();
    let counts = Arc::new(FloodCounts::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut flood_thread = None;
    if options.flood {
        for (k, role) in [Hostile::Noisy, Hostile::Replayer, Hostile::Malformer]
            .into_iter()
            .enumerate()
        {
            let mut app = udp_player(options.server, &key, &plan(900 + k as u64));
            add_hostile(&mut app, role);
            hostile.push(app);
        }
        let (counts, stop, server) = (counts.clone(), stop.clone(), options.server);
        flood_thread = Some(std::thread::spawn(move || {
            raw_flood(server, &counts, &stop);
        }));
    }
    println!(
        "loadtest: {} honest players{} against {} for {:.0} s at {:.0} fps",
        options.clients,
        if options.flood {
            " and a flood (3 hostile clients, raw datagrams)"
        } else {
            ""
        },
        options.server,
        options.seconds,
        options.fps
    );
    let frame = Duration::from_secs_f64(1.0 / options.fps);
    let start = Instant::now();
    let mut next_frame = start;
    let mut next_print = 10.0;
    let mut next_churn = options.churn.unwrap_or(f64::INFINITY);
    let mut churns = 0u64;
    while start.elapsed().as_secs_f64() < options.seconds {
        let now = Instant::now();
        if next_frame > now {
            std::thread::sleep(next_frame - now);
        }
        next_frame = next_frame.max(now) + frame;
        for (_, app) in &mut honest {
            app.update();
        }
        for app in &mut hostile {
            app.update();
        }
        let t = start.elapsed().as_secs_f64();
        // No churn in the last 10 s: a player who joins then is still connecting at the end.
        if t >= next_churn && t < options.seconds - 10.0 && !honest.is_empty() {
            next_churn += options.churn.unwrap_or(f64::INFINITY);
            churns += 1;
            let (id, mut app) = honest.remove(0);
            leave(&mut app);
            left.push(id);
            // Every other time, one that left comes back (a reconnect); else a new player.
            let n = if churns.is_multiple_of(2) && left.len() > 1 {
                left.remove(0)
            } else {
                next_player += 1;
                next_player - 1
            };
            println!(
                "t={t:.0}s: player {} left, player {} joins",
                1_000 + id,
                1_000 + n
            );
            honest.push((n, udp_player(options.server, &key, &plan(n))));
        }
        if t >= next_print {
            next_print += 10.0;
            print_players(t, &honest);
        }
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(thread) = flood_thread {
        thread.join().ok();
    }
    let t = start.elapsed().as_secs_f64();
    print_players(t, &honest);
    let players: Vec<_> = honest.iter().map(|(_, app)| summary(app.world())).collect();
    // Everyone leaves, so the server's last status shows what a match leaves behind.
    for (_, app) in &mut honest {
        leave(app);
    }
    for app in &mut hostile {
        leave(app);
    }
    if options.flood {
        println!(
            "flood sent: {} junk, {} truncated, {} oversize datagrams, {} connection requests \
             from {} source addresses; hostile clients sent {} extra packets",
            counts.junk.load(Ordering::Relaxed),
            counts.truncated.load(Ordering::Relaxed),
            counts.oversize.load(Ordering::Relaxed),
            counts.requests.load(Ordering::Relaxed),
            counts.sources.load(Ordering::Relaxed),
            hostile
                .iter()
                .filter_map(|a| a.world().get_resource::<HostileState>())
                .map(|s| s.copies)
                .sum::<u64>(),
        );
    }
    if let Some(in_process) = &in_process {
        println!("\n{}", comparison_table(&options, in_process, &players));
    }
    let disconnected = players.iter().filter(|p| !p.connected).count();
    let (refused, corrections): (u64, u64) = players.iter().fold((0, 0), |(r, c), p| {
        (r + p.refused, c + p.corrections.saturating_sub(p.respawns))
    });
    let clean = disconnected == 0 && (!options.flood || (refused == 0 && corrections == 0));
    println!(
        "honest players: {} connected of {}, {refused} shots refused, {corrections} corrections \
         beyond respawns: {}",
        players.len() - disconnected,
        players.len(),
        if clean { "clean" } else { "NOT CLEAN" }
    );
    std::process::exit(if clean { 0 } else { 1 });
}

/// Plays `plans` for `--seconds` in one process (the testbed: the shooter's server and the
/// players over its simulated link) and returns each player's summary.
fn testbed_run(plans: &[PlayerPlan], options: &Options) -> Vec<PlayerSummary> {
    println!(
        "loadtest: {} honest players in one process (testbed) for {:.0} s at {:.0} fps",
        plans.len(),
        options.seconds,
        options.fps
    );
    let wall = Instant::now();
    let mut tb = testbed_match(plans, options.fps, options.seed);
    let n = plans.len();
    let ready = tb.run_until(Duration::from_secs(30), |tb| {
        (0..n).all(|i| started(tb.client_world(i)))
    });
    if !ready {
        println!("testbed: the players never started (not connected, or no weapon table)");
    }
    tb.run_for(Duration::from_secs_f64(options.seconds));
    let players: Vec<PlayerSummary> = (0..n).map(|i| summary(tb.client_world(i))).collect();
    for (i, s) in players.iter().enumerate() {
        print_player("testbed", 1_000 + i as u64, s);
    }
    println!(
        "testbed: {:.0} s played in {:.0} s of wall time",
        options.seconds,
        wall.elapsed().as_secs_f64()
    );
    players
}

/// The testbed's figures and the real processes' side by side, one Markdown table (means per
/// player; shares pooled over every player's shots).
fn comparison_table(
    options: &Options,
    testbed: &[PlayerSummary],
    real: &[PlayerSummary],
) -> String {
    type Row = fn(&[PlayerSummary]) -> String;
    fn mean(players: &[PlayerSummary], f: impl Fn(&PlayerSummary) -> f64) -> f64 {
        players.iter().map(f).sum::<f64>() / players.len().max(1) as f64
    }
    fn per_min(players: &[PlayerSummary], f: impl Fn(&PlayerSummary) -> u64) -> f64 {
        mean(players, |p| f(p) as f64 * 60.0 / p.seconds.max(1e-9))
    }
    fn share(players: &[PlayerSummary], part: fn(&PlayerSummary) -> (u64, u64)) -> String {
        let (num, den) = players
            .iter()
            .map(part)
            .fold((0, 0), |(a, b), (x, y)| (a + x, b + y));
        if den == 0 {
            "none".into()
        } else {
            format!("{:.1} % ({num} of {den})", num as f64 * 100.0 / den as f64)
        }
    }
    let rows: [(&str, Row); 13] = [
        ("players connected at the end", |p| {
            format!(
                "{} of {}",
                p.iter().filter(|s| s.connected).count(),
                p.len()
            )
        }),
        ("client frames per second", |p| {
            format!("{:.1}", mean(p, |s| s.fps))
        }),
        ("RTT measured, mean of frames (ms)", |p| {
            let rtts: Vec<f64> = p.iter().map(|s| s.rtt_mean * 1e3).collect();
            format!(
                "{:.1} ({:.1}–{:.1})",
                rtts.iter().sum::<f64>() / rtts.len().max(1) as f64,
                rtts.iter().copied().fold(f64::INFINITY, f64::min),
                rtts.iter().copied().fold(0.0, f64::max)
            )
        }),
        ("shots fired per player per minute", |p| {
            format!("{:.0}", per_min(p, |s| s.shots))
        }),
        ("hit agreement (seen hits confirmed)", |p| {
            share(p, |s| (s.agreement.hits_confirmed, s.agreement.seen_hits))
        }),
        ("wrong confirmations (seen misses confirmed)", |p| {
            share(p, |s| {
                (s.agreement.misses_confirmed, s.agreement.seen_misses)
            })
        }),
        ("shots refused", |p| {
            let reasons: Vec<&str> = p
                .iter()
                .map(|s| s.refusals.as_str())
                .filter(|r| !r.is_empty())
                .collect();
            format!(
                "{}{}",
                p.iter().map(|s| s.refused).sum::<u64>(),
                if reasons.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", reasons.join("; "))
                }
            )
        }),
        ("corrections per player per minute, beyond respawns", |p| {
            format!(
                "{:.2}",
                per_min(p, |s| s.corrections.saturating_sub(s.respawns))
            )
        }),
        ("respawns per player per minute", |p| {
            format!("{:.2}", per_min(p, |s| s.respawns))
        }),
        ("upstream bytes/s per client (on the wire)", |p| {
            format!("{:.0}", mean(p, |s| s.bytes_up_per_sec))
        }),
        ("downstream bytes/s per client (on the wire)", |p| {
            format!("{:.0}", mean(p, |s| s.bytes_down_per_sec))
        }),
        ("upstream datagrams/s per client", |p| {
            format!("{:.1}", mean(p, |s| s.datagrams_up_per_sec))
        }),
        ("downstream datagrams/s per client", |p| {
            format!("{:.1}", mean(p, |s| s.datagrams_down_per_sec))
        }),
    ];
    let (rtt, jitter, loss) = options.conditions;
    let mut table = format!(
        "{} players, {:.0} s, {:.0} fps, link: RTT {rtt} ms, jitter {jitter} ms, loss {loss} %\n\n\
         | figure | testbed (one process) | real processes (UDP, loopback) |\n\
         | --- | --- | --- |\n",
        options.clients, options.seconds, options.fps
    );
    for (name, row) in rows {
        table += &format!("| {name} | {} | {} |\n", row(testbed), row(real));
    }
    table
}

fn print_players(t: f64, honest: &[(u64, App)]) {
    for (id, app) in honest {
        print_player(&format!("t={t:.0}s"), 1_000 + id, &summary(app.world()));
    }
}

fn print_player(when: &str, id: u64, s: &PlayerSummary) {
    println!(
        "{when} player {id}: {} rtt {:.0} ms, {} shots, {} confirmed, {} refused ({}), {} \
         corrections beyond {} respawns",
        if s.connected {
            "connected"
        } else {
            "NOT connected"
        },
        s.rtt * 1e3,
        s.shots,
        s.confirmed,
        s.refused,
        if s.refusals.is_empty() {
            "none"
        } else {
            &s.refusals
        },
        s.corrections.saturating_sub(s.respawns),
        s.respawns
    );
}

/// Disconnects `app`'s client politely (netcode's disconnect packets), then drops it.
fn leave(app: &mut App) {
    let world = app.world_mut();
    let clients: Vec<Entity> = world
        .query_filtered::<Entity, With<Client>>()
        .iter(world)
        .collect();
    for entity in clients {
        world.trigger(Disconnect { entity });
    }
    for _ in 0..3 {
        app.update();
    }
}

fn add_hostile(app: &mut App, role: Hostile) {
    app.insert_resource(role)
        .insert_resource(HostileState {
            rng: 0x5EED ^ role as u64,
            ..default()
        })
        .add_systems(Update, (noisy_messages, prepare_malformed))
        .add_systems(
            PostUpdate,
            (
                plaintext_attacks
                    .after(TransportSystems::Send)
                    .before(ConnectionSystems::Send),
                replay_packets
                    .after(ConnectionSystems::Send)
                    .before(lightyear::link::LinkSystems::Send),
            ),
        );
}

/// The noisy client: fresh shots, reloads and delay reports at 100 times the normal rate
/// (about 10 shots and 10 reports a second normally).
fn noisy_messages(
    role: Res<Hostile>,
    mut state: ResMut<HostileState>,
    clock: Res<NetClock>,
    weapons: Res<Weapons>,
    time: Res<Time>,
    mut senders: Query<
        (
            &mut MessageSender<FireRequest>,
            &mut MessageSender<ReloadRequest>,
            &mut MessageSender<DelayReport>,
        ),
        (With<Client>, With<Connected>),
    >,
) {
    if *role != Hostile::Noisy || !clock.synced {
        return;
    }
    let Some(spec) = weapons.table.as_ref().and_then(|t| t.get(0)) else {
        return;
    };
    let Ok((mut fire, mut reload, mut report)) = senders.single_mut() else {
        return;
    };
    let per_frame = (1000.0 * time.delta_secs_f64()).ceil() as usize;
    let view_time = clock.drawn_view_time();
    for _ in 0..per_frame {
        state.fire_index += 1;
        let aim = Vec3::new(0.0, 0.0, -1.0);
        fire.send::<UnreliableChannel>(FireRequest {
            weapon: 0,
            fire_index: state.fire_index,
            origin: Vec3::Y * 1.6,
            aim,
            directions: shot_directions(spec, state.fire_index, aim),
            view_time,
            judged_time: view_time,
            delay_cap: None,
            move_seq: None,
            sent_view_time: view_time,
            sent_delay: clock.interpolation_delay,
            claims: Vec::new(),
        });
        state.report_seq = state.report_seq.wrapping_add(1);
        report.send::<UnreliableChannel>(DelayReport {
            seq: Seq16(state.report_seq),
            delay_us: (clock.interpolation_delay * 1e6) as u32,
            view_time,
            frame_us: 16_667,
            loss_runs: 0,
            echo: None,
        });
    }
    for _ in 0..per_frame / 10 {
        reload.send::<ReliableChannel>(ReloadRequest {
            weapon: 0,
            view_time,
        });
    }
}

/// Before netcode encrypts: the noisy client sends every packet (its moves with it) 100
/// times; the malformer adds its malformed packets.
fn plaintext_attacks(
    role: Res<Hostile>,
    mut state: ResMut<HostileState>,
    mut links: Query<&mut Link, (With<Client>, With<Connected>)>,
) {
    let Ok(mut link) = links.single_mut() else {
        return;
    };
    match *role {
        Hostile::Noisy => {
            let packets: Vec<_> = link.send.drain().collect();
            for packet in packets {
                // Small packets (the moves) 100 times; large ones (the flood of shots) twice.
                let copies = if packet.len() <= 300 { 100 } else { 2 };
                for _ in 0..copies {
                    link.send.push(packet.clone());
                }
                state.copies += copies - 1;
            }
        }
        Hostile::Malformer => {
            for packet in malformed_packets(&mut state) {
                link.send.push(packet.into());
                state.copies += 1;
            }
        }
        Hostile::Replayer => {}
    }
}

/// The malformer, once: the network ids and message bytes its packets are built from.
fn prepare_malformed(world: &mut World) {
    if world.get_resource::<Hostile>() != Some(&Hostile::Malformer)
        || world.resource::<HostileState>().malformed.is_some()
    {
        return;
    }
    let report = DelayReport {
        seq: Seq16(1),
        delay_us: 100_000,
        view_time: 0.0,
        frame_us: 16_667,
        loss_runs: 0,
        echo: None,
    };
    let ingredients = (
        unlag::net::channel_net_id::<ReliableChannel>(world),
        unlag::net::channel_net_id::<UnreliableChannel>(world),
        unlag::net::message_bytes(world, &report),
    );
    if let (Some(reliable), Some(unreliable), Some(report)) = ingredients {
        world.resource_mut::<HostileState>().malformed = Some((reliable, unreliable, report));
    }
}

/// One frame of the malformer's packets (lightyear 0.30's plaintext layout).
fn malformed_packets(state: &mut HostileState) -> Vec<Vec<u8>> {
    let header = |kind: u8| {
        let mut p = vec![kind];
        p.extend_from_slice(&[0; 12]);
        p
    };
    let one = |channel: u16, id: Option<u16>, bytes: &[u8]| {
        let mut p = header(0);
        p.extend_from_slice(&(channel | 0x4000).to_be_bytes());
        p.push(1);
        match id {
            Some(id) => {
                p.push(1);
                p.extend_from_slice(&id.to_be_bytes());
            }
            None => p.push(0),
        }
        p.extend_from_slice(&(bytes.len() as u16 | 0x4000).to_be_bytes());
        p.extend_from_slice(bytes);
        p
    };
    let mut packets = Vec::new();
    for count in [3u64, 1 << 40] {
        state.message_id = state.message_id.wrapping_add(1);
        let mut p = header(1);
        p.push(3); // a channel id
        p.extend_from_slice(&state.message_id.to_be_bytes());
        p.push(0x00); // fragment 0
        p.extend_from_slice(&(count | 3 << 62).to_be_bytes());
        p.push(0); // not compressed
        p.push(32);
        p.extend_from_slice(&[7; 32]);
        packets.push(p);
    }
    let Some((reliable, unreliable, report)) = state.malformed.clone() else {
        return packets;
    };
    state.rng = SplitMix64::new(state.rng).next_u64();
    // Reliable ids from 1 000 to 32 000 ahead of a gap (lightyear would keep every one).
    let far = 1_000 + (state.rng % 31_000) as u16;
    packets.push(one(reliable, Some(far), &report));
    packets.push(one(0x3ff0, None, &report));
    let mut unknown_kind = vec![0x7f, 0xf0];
    unknown_kind.extend_from_slice(&report[1..]);
    packets.push(one(unreliable, None, &unknown_kind));
    packets.push(one(unreliable, None, &report[..2]));
    let mut truncated = one(unreliable, None, &report);
    truncated.pop();
    packets.push(truncated);
    packets
}

/// After netcode encrypts: the replayer keeps its last packets and sends four old ones again
/// each frame, out of order.
fn replay_packets(
    role: Res<Hostile>,
    mut state: ResMut<HostileState>,
    mut links: Query<&mut Link, (With<Client>, With<Connected>)>,
) {
    if *role != Hostile::Replayer {
        return;
    }
    let Ok(mut link) = links.single_mut() else {
        return;
    };
    let sent: Vec<_> = link.send.drain().collect();
    for packet in &sent {
        if state.sent_packets.len() >= 64 {
            state.sent_packets.remove(0);
        }
        state.sent_packets.push(packet.to_vec());
    }
    for packet in sent {
        link.send.push(packet);
    }
    for _ in 0..4 {
        if state.sent_packets.is_empty() {
            break;
        }
        state.rng = SplitMix64::new(state.rng).next_u64();
        let old =
            state.sent_packets[(state.rng % state.sent_packets.len() as u64) as usize].clone();
        link.send.push(old.into());
        state.copies += 1;
    }
}

/// Raw datagrams at the server until `stop`: random junk, truncated packets, oversize ones,
/// and connection requests (forged tokens) from ever new source addresses in 127.0.0.0/8.
fn raw_flood(server: SocketAddr, counts: &FloodCounts, stop: &AtomicBool) {
    let mut rng = SplitMix64::new(0xF100D);
    let sockets: Vec<UdpSocket> = (0..16)
        .filter_map(|_| UdpSocket::bind("127.0.0.1:0").ok())
        .collect();
    let mut source = 0u32;
    while !stop.load(Ordering::Relaxed) {
        // Per 10 ms: 20 junk, 10 truncated, 1 oversize, 10 requests from new sources.
        for k in 0..20 {
            let len = (rng.next_u64() % 1300) as usize;
            let junk: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            if sockets[k % sockets.len()].send_to(&junk, server).is_ok() {
                counts.junk.fetch_add(1, Ordering::Relaxed);
            }
        }
        for k in 0..10 {
            // A plausible prefix (kind 1–6, sequence 1–8 bytes), cut short.
            let prefix = ((1 + rng.next_u64() % 8) << 4 | (1 + rng.next_u64() % 6)) as u8;
            let len = 1 + (rng.next_u64() % 24) as usize;
            let mut short: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            short[0] = prefix;
            if sockets[k % sockets.len()].send_to(&short, server).is_ok() {
                counts.truncated.fetch_add(1, Ordering::Relaxed);
            }
        }
        let big = vec![0u8; 2_000 + (rng.next_u64() % 60_000) as usize];
        if sockets[0].send_to(&big, server).is_ok() {
            counts.oversize.fetch_add(1, Ordering::Relaxed);
        }
        for _ in 0..10 {
            source += 1;
            let ip = Ipv4Addr::new(
                127,
                1 + (source >> 16) as u8 % 250,
                (source >> 8) as u8,
                source as u8,
            );
            let Ok(socket) = UdpSocket::bind(SocketAddr::new(ip.into(), 0)) else {
                continue;
            };
            counts.sources.fetch_add(1, Ordering::Relaxed);
            let mut request: Vec<u8> = (0..unlag::net::CONNECTION_REQUEST_BYTES)
                .map(|_| rng.next_u64() as u8)
                .collect();
            request[0] = 0;
            request[1..14].copy_from_slice(b"NETCODE 1.02\0");
            if socket.send_to(&request, server).is_ok() {
                counts.requests.fetch_add(1, Ordering::Relaxed);
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
