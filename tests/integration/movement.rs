//! Movement prediction and correction on the testbed: honest players are never corrected,
//! divergence is corrected and replayed, speed and teleport hacks are caught, bad input is
//! refused.

use bevy::prelude::*;
use bevy_rapier3d::prelude::*;
use core::time::Duration;
use lightyear::prelude::*;
use unlag::movement::{
    CharacterInput, CharacterMovement, CharacterState, KartInput, KartMovement, KartState,
    MovementEvent, MovementPredictionPlugin, MovementPredictionSystems, MovementSettings,
    MovementState, MovementStats, NextMove, Prediction, flags,
};
use unlag::movement::{Cheats, SpeedHackDetected};
use unlag::net::{AutonomousProxy, LinkConditions};
use unlag_core::quantize::{quantize_accel, quantize_angle};
use unlag_testbed::{Testbed, TestbedConfig};

/// The arena every App builds the same way: a floor, four walls, a wall to slide along, a step
/// and a low ceiling to crouch under.
fn arena(mut commands: Commands) {
    let mut solid = |half: Vec3, at: Vec3| {
        commands.spawn((
            Collider::cuboid(half.x, half.y, half.z),
            Transform::from_translation(at),
        ));
    };
    solid(Vec3::new(50.0, 0.5, 50.0), Vec3::new(0.0, -0.5, 0.0));
    for (half, at) in [
        (Vec3::new(0.5, 3.0, 20.0), Vec3::new(20.0, 3.0, 0.0)),
        (Vec3::new(0.5, 3.0, 20.0), Vec3::new(-20.0, 3.0, 0.0)),
        (Vec3::new(20.0, 3.0, 0.5), Vec3::new(0.0, 3.0, 20.0)),
        (Vec3::new(20.0, 3.0, 0.5), Vec3::new(0.0, 3.0, -20.0)),
        // A wall to walk into and slide along.
        (Vec3::new(0.5, 2.0, 4.0), Vec3::new(6.0, 2.0, 0.0)),
        // A 0.3 m step.
        (Vec3::new(1.5, 0.15, 1.5), Vec3::new(0.0, 0.15, -6.0)),
        // A roof 1.3 m above the floor: crouch to pass.
        (Vec3::new(2.0, 0.25, 2.0), Vec3::new(-6.0, 1.55, 0.0)),
    ] {
        solid(half, at);
    }
}

/// What every App gets: transforms, rapier in the fixed schedule, the arena, and movement
/// prediction of characters.
#[derive(Clone)]
pub(crate) struct MovementTestPlugin {
    settings: MovementSettings<CharacterMovement>,
    level: fn(Commands),
}

impl Default for MovementTestPlugin {
    fn default() -> Self {
        Self {
            settings: MovementSettings::default(),
            level: arena,
        }
    }
}

/// A floor 1 km wide and nothing else, for long straight runs.
fn open_field(mut commands: Commands) {
    commands.spawn((
        Collider::cuboid(500.0, 0.5, 500.0),
        Transform::from_xyz(0.0, -0.5, 0.0),
    ));
}

impl Plugin for MovementTestPlugin {
    fn build(&self, app: &mut App) {
        app.add_plugins(unlag_testbed::RapierFixedPlugin::default())
            .add_plugins(MovementPredictionPlugin::<CharacterMovement>::new(
                self.settings.clone(),
            ))
            .add_systems(Startup, self.level);
    }
}

/// Whether the scripted player moves (on the client App), and how.
#[derive(Resource, Clone, Copy)]
struct Script {
    running: bool,
    input: fn(u32) -> CharacterInput,
    /// Feed the script the client's tick instead of its move number, so that several clients
    /// walk in step whenever each of them started.
    by_tick: bool,
}

/// The scripted player's input for its move number `n` (a 10 s loop at 60 Hz): walk, slide
/// along a wall, jump, crouch under a roof, dash, and circle.
fn scripted_input(n: u32) -> CharacterInput {
    let phase = n % 600;
    let t = phase as f32;
    let (dir, bits) = match phase {
        0..100 => (Vec2::new(0.0, -1.0), 0),
        100..200 => (Vec2::new(1.0, 0.2), 0),
        200..260 => (
            Vec2::new(-0.3, 1.0),
            if (210..215).contains(&phase) {
                flags::JUMP
            } else {
                0
            },
        ),
        260..400 => (Vec2::new(-1.0, 0.0), flags::CROUCH),
        400..450 => (
            Vec2::new(1.0, 0.3),
            if phase == 405 { flags::DASH } else { 0 },
        ),
        _ => (Vec2::new((t * 0.05).cos(), (t * 0.05).sin()), 0),
    };
    CharacterInput {
        accel: quantize_accel(dir),
        yaw: quantize_angle(f32::atan2(-dir.x, -dir.y)),
        pitch: 0,
        flags: bits,
    }
}

fn drive(
    script: Res<Script>,
    timeline: Res<LocalTimeline>,
    mut players: Query<
        (
            &Prediction<CharacterMovement>,
            &mut NextMove<CharacterMovement>,
        ),
        With<AutonomousProxy>,
    >,
) {
    for (prediction, mut next) in &mut players {
        next.0 = if script.running {
            (script.input)(if script.by_tick {
                timeline.tick().0
            } else {
                u32::from(prediction.next_seq().0)
            })
        } else {
            CharacterInput::default()
        };
    }
}

fn give_next_move(
    mut commands: Commands,
    players: Query<
        Entity,
        (
            With<Prediction<CharacterMovement>>,
            Without<NextMove<CharacterMovement>>,
        ),
    >,
) {
    for e in &players {
        commands
            .entity(e)
            .insert(NextMove::<CharacterMovement>(CharacterInput::default()));
    }
}

/// Live movement events seen by a client (replays never emit them).
#[derive(Resource, Default, Clone, Copy, Debug)]
struct EventCount {
    jumps: u32,
    dashes: u32,
    landings: u32,
}

fn count_events(mut reader: MessageReader<MovementEvent>, mut count: ResMut<EventCount>) {
    for e in reader.read() {
        count.jumps += u32::from(e.events.jumped);
        count.dashes += u32::from(e.events.dashed);
        count.landings += u32::from(e.events.landed);
    }
}

/// A testbed of `clients` running the movement script under `conditions`, every client
/// connected and synced, no character given yet.
fn connected_testbed<P>(
    clients: usize,
    conditions: LinkConditions,
    plugin: impl bevy::app::Plugins<P> + Clone,
) -> Testbed {
    connected_testbed_with(
        TestbedConfig {
            clients,
            conditions,
            ..default()
        },
        plugin,
    )
}

/// [`connected_testbed`] of testbed `config` (its clients, link and pace).
fn connected_testbed_with<P>(
    config: TestbedConfig,
    plugin: impl bevy::app::Plugins<P> + Clone,
) -> Testbed {
    let clients = config.clients;
    let mut tb = Testbed::new(config);
    tb.add_plugins(plugin);
    for i in 0..clients {
        tb.client(i)
            .insert_resource(Script {
                running: true,
                input: scripted_input,
                by_tick: false,
            })
            .init_resource::<EventCount>()
            .add_systems(Update, count_events)
            .add_systems(
                FixedUpdate,
                (give_next_move, drive)
                    .chain()
                    .before(MovementPredictionSystems::Simulate),
            );
    }
    assert!(
        tb.run_until(Duration::from_secs(5), |tb| tb.all_synced()),
        "not synced"
    );
    tb
}

/// [`connected_testbed`], each client then given its character and its initial state.
pub(crate) fn movement_testbed<P>(
    clients: usize,
    conditions: LinkConditions,
    plugin: impl bevy::app::Plugins<P> + Clone,
) -> Testbed {
    let mut tb = connected_testbed(clients, conditions, plugin);
    give_characters(&mut tb);
    assert!(
        tb.run_until(Duration::from_secs(3), |tb| (0..clients)
            .all(|i| { predicted(tb, i).is_some() })),
        "characters never reached their clients"
    );
    tb
}

/// Spawns on the server one character per client of `tb`, side by side.
fn give_characters(tb: &mut Testbed) {
    for i in 0..tb.client_count() {
        let owner = tb.server_link(i).unwrap();
        tb.server_world_mut().spawn((
            MovementState::<CharacterMovement>(CharacterState {
                feet: Vec3::new(i as f32 * 2.0, 0.0, 4.0),
                ..default()
            }),
            Replicate::to_clients(NetworkTarget::All),
            ControlledBy {
                owner,
                lifetime: Lifetime::default(),
            },
        ));
    }
}

/// Client `i`'s predicted state, once it has one.
fn predicted(tb: &Testbed, i: usize) -> Option<CharacterState> {
    let world = tb.client_world(i);
    let mut q =
        world.try_query_filtered::<&MovementState<CharacterMovement>, With<AutonomousProxy>>()?;
    q.iter(world).next().map(|s| s.0.clone())
}

/// The server's state of client `i`'s character.
fn authoritative(tb: &mut Testbed, i: usize) -> CharacterState {
    let owner = tb.server_link(i).unwrap();
    let world = tb.server_world_mut();
    let mut q = world.query::<(&MovementState<CharacterMovement>, &ControlledBy)>();
    q.iter(world)
        .find(|(_, c)| c.owner == owner)
        .map(|(s, _)| s.0.clone())
        .unwrap()
}

fn stop_scripts(tb: &mut Testbed) {
    for i in 0..tb.client_count() {
        tb.client_world_mut(i).resource_mut::<Script>().running = false;
    }
}

fn honest_run(rtt_ms: u64) {
    let conditions = LinkConditions::new(
        Duration::from_millis(rtt_ms),
        Duration::from_millis(20),
        0.05,
    );
    let mut tb = movement_testbed(2, conditions, MovementTestPlugin::default());
    tb.run_for(Duration::from_secs(60));
    stop_scripts(&mut tb);
    tb.run_for(Duration::from_secs(2));
    let server = tb.server_world().resource::<MovementStats>().clone();
    println!("{rtt_ms} ms server: {server:?}");
    for i in 0..2 {
        let client = tb.client_world(i).resource::<MovementStats>().clone();
        println!("{rtt_ms} ms client {i}: {client:?}");
        assert_eq!(
            client.corrections_received, 0,
            "client {i} corrected at {rtt_ms} ms"
        );
        assert!(client.moves_simulated > 3500, "{client:?}");
        // The script really jumped and dashed (six 10 s loops).
        let events = *tb.client_world(i).resource::<EventCount>();
        assert!(
            events.jumps >= 5 && events.dashes >= 5 && events.landings >= 5,
            "{events:?}"
        );
        let p = predicted(&tb, i).unwrap();
        let s = authoritative(&mut tb, i);
        assert!(
            p.feet.distance(s.feet) < 1e-4,
            "client {i} ends at {:?}, server at {:?}",
            p.feet,
            s.feet
        );
    }
    assert_eq!(server.corrections_sent, 0, "{server:?}");
    assert_eq!(server.rejected_total(), 0, "{server:?}");
    assert_eq!(server.speed_hacks_flagged, 0);
    assert!(server.moves_processed > 7000, "{server:?}");
}

/// A playing client's link over 4 s with lightyear's acknowledgement-only packets held back
/// for `ack_delay` seconds (`AckDelay`): datagrams it sent and received, its move messages,
/// delay reports, and the acknowledgement-only packets both ends withheld.
struct PlayingLink {
    up: u64,
    down: u64,
    moves: u64,
    reports: u64,
    withheld: u64,
}

fn playing_link(ack_delay: f64) -> PlayingLink {
    use unlag::net::{AckDelay, LinkTraffic, RemoteClientClock, ServerAckDelay};
    let conditions = LinkConditions::new(Duration::from_millis(100), Duration::ZERO, 0.0);
    let mut tb = movement_testbed(1, conditions, MovementTestPlugin::default());
    tb.server_world_mut()
        .insert_resource(ServerAckDelay(ack_delay));
    tb.client_world_mut(0).insert_resource(AckDelay(ack_delay));
    // (The server packs a link once its client has reported for `PACK_AFTER`.)
    tb.run_for(Duration::from_secs_f64(unlag::net::PACK_AFTER + 1.0));
    let sample = |tb: &mut Testbed| {
        let link = tb.server_link(0).unwrap();
        let server = tb.server_world().get::<LinkTraffic>(link).unwrap().clone();
        let world = tb.client_world_mut(0);
        let mut q = world.query::<&LinkTraffic>();
        let client = q.single(world).expect("one link").clone();
        let reports = client
            .sent_by_kind
            .get("DelayReport")
            .map_or(0, |k| k.messages);
        PlayingLink {
            up: client.datagrams_sent,
            down: server.datagrams_sent,
            moves: world.resource::<MovementStats>().messages_sent,
            reports,
            withheld: client.acks_withheld + server.acks_withheld,
        }
    };
    let a = sample(&mut tb);
    tb.run_for(Duration::from_secs(4));
    let b = sample(&mut tb);
    // The link works as before: both ends measure its RTT.
    let link = tb.server_link(0).unwrap();
    let server_rtt = tb
        .server_world()
        .get::<RemoteClientClock>(link)
        .unwrap()
        .rtt;
    assert!((server_rtt - 0.1).abs() < 0.01, "server's RTT {server_rtt}");
    let client_rtt = tb.client_clock(0).rtt;
    assert!((client_rtt - 0.1).abs() < 0.01, "client's RTT {client_rtt}");
    assert_eq!(
        tb.client_world(0)
            .resource::<MovementStats>()
            .corrections_received,
        0
    );
    PlayingLink {
        up: b.up - a.up,
        down: b.down - a.down,
        moves: b.moves - a.moves,
        reports: b.reports - a.reports,
        withheld: b.withheld - a.withheld,
    }
}

/// A playing client's delay reports (about 30 a second) ride in its moves' datagrams (every
/// `send_interval`, 1/30 s; `NetSystems::RideAlong`) instead of going in datagrams of their
/// own, and so do lightyear's pings and pongs (`AckDelay` 0.05, `--packing on`): one
/// datagram per move message, give or take one in twenty (before, 1.9 datagrams per move
/// message in the report's match, then 1.5 here with the pings and pongs apart).
#[test]
fn a_playing_clients_reports_ride_with_its_moves() {
    let l = playing_link(0.05);
    println!(
        "{} datagrams up, {} down, {} move messages, {} delay reports in 4 s",
        l.up, l.down, l.moves, l.reports
    );
    assert!(l.moves >= 110, "{} move messages in 4 s", l.moves);
    // Reports still go about every REPORT_INTERVAL, each on the first move message at least
    // that long after the last (moves leave every 1/30 s: at 1/20 s, every other one).
    let interval = (unlag::net::REPORT_INTERVAL * 30.0 - 1e-9).ceil() / 30.0;
    assert!(
        l.reports as f64 >= 0.8 * 4.0 / interval,
        "{} reports",
        l.reports
    );
    // lightyear's pings and the pongs to the server's, 10 a second each, ride too.
    assert!(
        l.up * 20 <= l.moves * 21,
        "{} datagrams for {} move messages",
        l.up,
        l.moves
    );
}

/// Acknowledgements held back to ride on data (`AckDelay`): lightyear sends an
/// acknowledgement-only packet in every frame that has acknowledgements due and nothing else to
/// send, so a server that sends its client little (here its beats and move acknowledgements)
/// answers nearly every one of the client's move messages with one. Held for 50 ms, they ride
/// on the server's next packet: its datagrams fall by more than a third, the client's do not
/// grow, and the link works as before. (The server's link is packed once its client has
/// reported for `PACK_AFTER`: its pings and pongs and the movement acknowledgements ride with
/// its beats then too. The report measures a playing client's with states and shots:
/// `--packing on|clients|off`.)
#[test]
fn acknowledgements_ride_on_data_when_paced() {
    let off = playing_link(0.0);
    let on = playing_link(0.05);
    println!(
        "datagrams in 4 s up {} → {}, down {} → {}; {} withheld",
        off.up, on.up, off.down, on.down, on.withheld
    );
    assert_eq!(off.withheld, 0);
    assert!(on.withheld > 0);
    assert!(on.up <= off.up, "up {} → {}", off.up, on.up);
    assert!(
        3 * on.down < 2 * off.down,
        "down {} → {}",
        off.down,
        on.down
    );
}

/// On a link that loses packets a client repeats every move the server does not have yet in
/// each message. It learns which it has from the acknowledgements of its packets in every
/// header the server's transport sends (`ServerAckLedger`), a round trip after they left, not
/// only from the movement server's report, which comes every `ack_interval` (here half a
/// second) and a trip later: its messages carry about a round trip of moves (6 at 100 ms and
/// 60 moves/s, and the 2 new ones), not a round trip and a quarter second (about 23).
#[test]
fn moves_stop_repeating_once_the_servers_transport_has_them() {
    let conditions = LinkConditions::new(Duration::from_millis(100), Duration::ZERO, 0.05);
    let plugin = MovementTestPlugin {
        settings: MovementSettings {
            ack_interval: 0.5,
            ..default()
        },
        level: arena,
    };
    let (per_message, loss, corrections) = moves_a_message(
        TestbedConfig {
            clients: 1,
            conditions,
            ..default()
        },
        plugin,
    );
    println!("{per_message:.1} moves a message, {corrections} corrections");
    assert!(loss > 0.001, "a lossy link's policy");
    // A round trip, a server frame and a client frame of moves, the two new ones, and the
    // message whose acknowledgement was lost now and then.
    assert!(per_message <= 11.0, "{per_message:.1} moves a message");
    assert_eq!(corrections, 0);
}

/// Mean moves a message of client 0 of testbed `config` moving for 6 s (after 3), the client's
/// measured loss, and the corrections it received.
///
/// It also checks what the messages' oldest moves went against: over the 6 s measured, at
/// least 95 % of the messages write their oldest move against a move the server holds (a
/// base: the newest of a send its transport acknowledged), and the server finds every base
/// (none refused, none malformed).
fn moves_a_message(config: TestbedConfig, plugin: MovementTestPlugin) -> (f64, f64, u64) {
    use unlag::movement::RejectReason;
    let mut tb = connected_testbed_with(config, plugin);
    give_characters(&mut tb);
    tb.run_for(Duration::from_secs(3));
    let stats = |tb: &Testbed| tb.client_world(0).resource::<MovementStats>().clone();
    let a = stats(&tb);
    tb.run_for(Duration::from_secs(6));
    let b = stats(&tb);
    let messages = b.messages_sent - a.messages_sent;
    let per_message = (b.moves_sent - a.moves_sent) as f64 / messages as f64;
    let with_base = (b.messages_with_base - a.messages_with_base) as f64 / messages as f64;
    println!("{:.3} of the messages with a base", with_base);
    assert!(
        with_base >= 0.95,
        "{with_base:.3} of the messages with a base"
    );
    let server = server_stats(&tb);
    assert_eq!(server.rejected(RejectReason::UnknownBase), 0);
    assert_eq!(server.rejected(RejectReason::Malformed), 0);
    (per_message, tb.client_clock(0).loss, b.corrections_received)
}

/// Independent losses of a few percent are bridged by redundancy alone (each move in its own
/// message and the next two: all three lost 2.7e-5 of the sends at 3 %), and the client
/// sends only those: a round trip of 300 ms put every move in flight, 20 of them, in each
/// message. A link that loses in runs of six gets every move the server lacks in each message
/// (`resend_all_above_miss`) once it has seen a run, so a burst is bridged by the first
/// message through. Neither is corrected.
#[test]
fn independent_losses_are_bridged_by_redundancy_and_runs_by_every_move_in_flight() {
    let link = LinkConditions::new(Duration::from_millis(300), Duration::from_millis(5), 0.03);
    let config = |conditions, loss_burst| TestbedConfig {
        clients: 1,
        conditions,
        loss_burst,
        ..default()
    };
    let (independent, loss, corrections) =
        moves_a_message(config(link, 1.0), MovementTestPlugin::default());
    println!(
        "independent: {independent:.1} moves a message at {loss:.3} loss, {corrections} corrections"
    );
    // Lossy by the client's measure (what sent every move in flight before).
    assert!(loss > 0.001, "the link's loss is measured: {loss}");
    // Two new moves a send and those of the two sends before (fewer repeats than the three
    // `redundancy` allows: at this loss two keep a move lost with all of them under 1e-4).
    assert!(independent <= 6.5, "{independent:.1} moves a message");
    assert_eq!(corrections, 0);
    let bursty = LinkConditions::new(Duration::from_millis(300), Duration::from_millis(5), 0.08);
    let (in_runs, loss, corrections) =
        moves_a_message(config(bursty, 6.0), MovementTestPlugin::default());
    println!(
        "in runs of 6: {in_runs:.1} moves a message at {loss:.3} loss, {corrections} corrections"
    );
    assert!(in_runs >= 12.0, "{in_runs:.1} moves a message");
    assert_eq!(corrections, 0);
}

#[test]
fn honest_player_is_never_corrected_at_0_ms() {
    honest_run(0);
}

#[test]
fn honest_player_is_never_corrected_at_100_ms() {
    honest_run(100);
}

#[test]
fn honest_player_is_never_corrected_at_250_ms() {
    honest_run(250);
}

/// Walk towards +X at full input, facing it.
fn stand(_n: u32) -> CharacterInput {
    CharacterInput {
        accel: [0, 0],
        yaw: quantize_angle(-core::f32::consts::FRAC_PI_2),
        pitch: 0,
        flags: 0,
    }
}

fn walk_east(_n: u32) -> CharacterInput {
    CharacterInput {
        accel: quantize_accel(Vec2::X),
        yaw: quantize_angle(-core::f32::consts::FRAC_PI_2),
        pitch: 0,
        flags: 0,
    }
}

/// A player's moves reach the server a packet at a time: under jitter its track would stand
/// still for a tick and then take two or three moves at once. The states the other players are
/// sent carry the player's simulated velocity times the pace its moves are played at over the
/// last 0.1 s (the playout's), not that stepped track's speed (which swings between zero and
/// several times the real speed and bends their curves): each within the playout's bounds of
/// pace, and on average the walking speed.
#[test]
fn proxy_states_of_a_player_carry_its_tracks_velocity_not_its_steps() {
    use unlag::smoothing::{ProxySmoothingPlugin, SentStates, SmoothedProxy};
    let conditions =
        LinkConditions::new(Duration::from_millis(100), Duration::from_millis(20), 0.0);
    let plugin = MovementTestPlugin {
        level: open_field,
        ..default()
    };
    let playout = plugin.settings.playout;
    let mut tb = movement_testbed(2, conditions, (plugin, ProxySmoothingPlugin::default()));
    set_script(&mut tb, 0, walk_east);
    let character = character_of(&mut tb, 0);
    tb.server_world_mut()
        .entity_mut(character)
        .insert(SmoothedProxy);
    tb.run_for(Duration::from_secs(4));
    let speed = authoritative(&mut tb, 0).velocity.length();
    assert!(speed > 3.0, "walking at {speed} m/s");
    let sent = tb.server_world().get::<SentStates>(character).unwrap();
    // The last two seconds: past the start's acceleration.
    let newest = sent.newest().unwrap().time;
    let speeds: Vec<f32> = sent
        .states()
        .filter(|s| s.time > newest - 2.0)
        .map(|s| s.velocity.length())
        .collect();
    assert!(speeds.len() >= 15, "{} states", speeds.len());
    let (least, most) = (
        playout.min_rate as f32 * speed - 0.01,
        playout.max_rate as f32 * speed + 0.01,
    );
    for v in &speeds {
        assert!(
            (least..=most).contains(v),
            "{v} m/s sent, {speed} m/s walked: {speeds:?}"
        );
    }
    let mean = speeds.iter().sum::<f32>() / speeds.len() as f32;
    assert!(
        (mean - speed).abs() < 0.03 * speed,
        "{mean} m/s sent on average, {speed} m/s walked: {speeds:?}"
    );
}

fn set_script(tb: &mut Testbed, i: usize, input: fn(u32) -> CharacterInput) {
    tb.client_world_mut(i).resource_mut::<Script>().input = input;
}

/// The server entity of client `i`'s character.
pub(crate) fn character_of(tb: &mut Testbed, i: usize) -> Entity {
    let owner = tb.server_link(i).unwrap();
    let world = tb.server_world_mut();
    let mut q = world.query::<(Entity, &ControlledBy)>();
    q.iter(world).find(|(_, c)| c.owner == owner).unwrap().0
}

fn client_stats(tb: &Testbed, i: usize) -> MovementStats {
    tb.client_world(i).resource::<MovementStats>().clone()
}

fn offset_len(tb: &Testbed, i: usize) -> f32 {
    let world = tb.client_world(i);
    let mut q = world.try_query::<&Prediction<CharacterMovement>>().unwrap();
    q.iter(world).next().unwrap().offset.current().length()
}

/// Every move's end state as the client last had it (after any replay).
#[derive(Resource, Default)]
struct ClientEnds(std::collections::BTreeMap<u16, CharacterState>);

fn record_client_ends(
    mut ends: ResMut<ClientEnds>,
    players: Query<&Prediction<CharacterMovement>>,
) {
    for p in &players {
        for m in p.saved.pending() {
            ends.0.insert(m.seq.0, m.end.clone());
        }
    }
}

/// The server's state after its last processed move, each frame.
#[derive(Resource, Default)]
struct ServerEnds(std::collections::BTreeMap<u16, CharacterState>);

fn record_server_ends(
    mut ends: ResMut<ServerEnds>,
    characters: Query<(
        &MovementState<CharacterMovement>,
        &unlag::movement::ServerMovement<CharacterMovement>,
    )>,
) {
    for (state, server) in &characters {
        ends.0.insert(server.last_processed().0, state.0.clone());
    }
}

#[test]
fn server_divergence_is_corrected_replayed_and_smoothed() {
    let rtt = 0.1;
    let conditions = LinkConditions::new(Duration::from_secs_f64(rtt), Duration::ZERO, 0.0);
    let mut tb = movement_testbed(1, conditions, MovementTestPlugin::default());
    tb.client(0).init_resource::<ClientEnds>().add_systems(
        PostUpdate,
        record_client_ends.after(MovementPredictionSystems::Send),
    );
    tb.server().init_resource::<ServerEnds>().add_systems(
        Update,
        record_server_ends.after(MovementPredictionSystems::Check),
    );
    tb.run_for(Duration::from_secs(2));
    assert_eq!(client_stats(&tb, 0).corrections_received, 0);

    tb.client_world_mut(0)
        .resource_mut::<unlag::movement::MovementDebug>()
        .show_corrections = true;
    // The server shoves the character 1 m sideways: something the client could not predict.
    let character = character_of(&mut tb, 0);
    let shove = |tb: &mut Testbed, by: Vec3| {
        tb.server_world_mut()
            .get_mut::<MovementState<CharacterMovement>>(character)
            .unwrap()
            .0
            .feet += by;
    };
    let pushed_at = tb.now();
    shove(&mut tb, Vec3::X);
    let throttle = 0.1;
    assert!(
        tb.run_until(Duration::from_secs(2), |tb| client_stats(tb, 0)
            .corrections_received
            >= 1),
        "never corrected"
    );
    let delay = (tb.now() - pushed_at).as_secs_f64();
    assert!(
        delay <= rtt + throttle,
        "corrected {delay} s after the push"
    );
    let server_seq_at_correction = *tb
        .server_world()
        .resource::<ServerEnds>()
        .0
        .keys()
        .last()
        .unwrap();

    // A correction mark: green where the server had the character, red where the client did,
    // about the 1 m shove apart.
    let marks = tb
        .client_world(0)
        .resource::<unlag::movement::CorrectionMarks>()
        .0
        .clone();
    assert_eq!(marks.len(), 1, "{marks:?}");
    let gap = marks[0]
        .server
        .distance(marks[0].client.expect("client pose known"));
    assert!((gap - 1.0).abs() < 0.2, "marks {gap} m apart");

    // The jump is hidden by an offset that is gone after the smooth time (0.1 s).
    let shown = offset_len(&tb, 0);
    assert!(shown > 0.5 && shown < 1.5, "offset {shown}");
    tb.run_for(Duration::from_secs_f64(0.1) + tb.frame());
    assert!(
        offset_len(&tb, 0) < 1e-6,
        "offset left: {}",
        offset_len(&tb, 0)
    );

    // From the correction on, every move the client made ends exactly where the server's does.
    tb.run_for(Duration::from_secs(2));
    let client_ends = &tb.client_world(0).resource::<ClientEnds>().0;
    let server_ends = &tb.server_world().resource::<ServerEnds>().0;
    let mut compared = 0;
    for (seq, server_state) in server_ends.range(server_seq_at_correction..) {
        if let Some(client_state) = client_ends.get(seq) {
            assert_eq!(client_state, server_state, "move {seq}");
            compared += 1;
        }
    }
    assert!(compared > 50, "{compared} moves compared");
    // Marks fade after their lifetime (2 s).
    assert!(
        tb.client_world(0)
            .resource::<unlag::movement::CorrectionMarks>()
            .0
            .is_empty()
    );
    let stats = client_stats(&tb, 0);
    assert!(stats.corrections_received <= 2, "{stats:?}");
    assert!(stats.moves_replayed > 0);
    assert_eq!(stats.snaps, 0);

    // The client stated the correction's id until a message stating it was acknowledged, and
    // no longer (its messages since go without it) ...
    let stated = stats.messages_stating_ack;
    assert!(stated > 0);
    tb.run_for(Duration::from_secs(1));
    assert_eq!(client_stats(&tb, 0).messages_stating_ack, stated);
    // ... and the server, having heard it, still compares: a second shove is corrected as
    // promptly as the first, and its id stated in turn.
    let pushed_at = tb.now();
    shove(&mut tb, Vec3::Z);
    let before = client_stats(&tb, 0).corrections_received;
    assert!(
        tb.run_until(Duration::from_secs(2), |tb| client_stats(tb, 0)
            .corrections_received
            > before),
        "the second shove never corrected"
    );
    let delay = (tb.now() - pushed_at).as_secs_f64();
    assert!(
        delay <= rtt + throttle,
        "corrected {delay} s after the push"
    );
    tb.run_for(Duration::from_secs(1));
    let after = client_stats(&tb, 0);
    assert!(after.messages_stating_ack > stated, "{after:?}");
    assert_eq!(after.corrections_received, before + 1, "{after:?}");
}

#[test]
fn a_jump_above_the_teleport_distance_snaps() {
    let conditions = LinkConditions::new(Duration::from_millis(80), Duration::ZERO, 0.0);
    let mut tb = movement_testbed(1, conditions, MovementTestPlugin::default());
    tb.run_for(Duration::from_secs(1));
    let character = character_of(&mut tb, 0);
    tb.server_world_mut()
        .get_mut::<MovementState<CharacterMovement>>(character)
        .unwrap()
        .0
        .feet
        .z -= 8.0;
    assert!(tb.run_until(
        Duration::from_secs(2),
        |tb| client_stats(tb, 0).corrections_received >= 1
    ));
    assert_eq!(client_stats(&tb, 0).snaps, 1);
    assert_eq!(offset_len(&tb, 0), 0.0, "snapped, not smoothed");
}

/// When the server flagged each client (seconds of testbed time).
#[derive(Resource, Default)]
struct Flags(Vec<(Entity, f64)>);

fn record_flags(
    mut reader: MessageReader<SpeedHackDetected>,
    clock: Res<unlag::net::NetClock>,
    mut flags: ResMut<Flags>,
) {
    for f in reader.read() {
        flags.0.push((f.client, clock.server_time));
    }
}

#[test]
fn speed_hacks_are_caught_and_gain_nothing_while_honest_stalls_are_not() {
    let base = LinkConditions::new(Duration::from_millis(80), Duration::from_millis(20), 0.0);
    let plugin = MovementTestPlugin {
        level: open_field,
        ..default()
    };
    let mut tb = movement_testbed(3, base, plugin);
    tb.server()
        .init_resource::<Flags>()
        .add_systems(Update, record_flags);
    for i in 0..3 {
        set_script(&mut tb, i, walk_east);
    }
    tb.run_for(Duration::from_secs(2));
    let start: Vec<f32> = (0..3).map(|i| authoritative(&mut tb, i).feet.x).collect();
    let t0 = tb
        .server_world()
        .resource::<unlag::net::NetClock>()
        .server_time;
    tb.client_world_mut(0).insert_resource(Cheats {
        clock_rate: 1.1,
        teleport: None,
    });
    tb.client_world_mut(1).insert_resource(Cheats {
        clock_rate: 2.0,
        teleport: None,
    });
    // Client 2 is honest but its link stalls for half a second.
    tb.run_for(Duration::from_secs(3));
    let stalled = LinkConditions {
        latency: Duration::from_millis(1080),
        ..base
    };
    tb.set_client_conditions(2, stalled).unwrap();
    tb.run_for(Duration::from_millis(500));
    tb.set_client_conditions(2, base).unwrap();
    tb.run_for(Duration::from_millis(6500));

    let flags = &tb.server_world().resource::<Flags>().0;
    for i in 0..2 {
        let link = tb.server_link(i).unwrap();
        let first = flags.iter().find(|(l, _)| *l == link).map(|(_, t)| t - t0);
        let first = first.unwrap_or_else(|| panic!("client {i} never flagged"));
        assert!(first < 2.0, "client {i} flagged after {first} s");
    }
    let honest = tb.server_link(2).unwrap();
    assert!(
        !flags.iter().any(|(l, _)| *l == honest),
        "the honest client was flagged"
    );

    // Over the 10 s, a cheater covers no more than an honest walker plus what the margins allow.
    let model = CharacterMovement::default();
    let settings = MovementSettings::<CharacterMovement>::default().time_discrepancy;
    let allowed_time =
        settings.max_time_margin + settings.anchor_slack + settings.drift_allowance * 10.0;
    let honest_distance = model.max_walk_speed as f64 * 10.0;
    for (i, x0) in start.iter().enumerate().take(2) {
        let covered = f64::from(authoritative(&mut tb, i).feet.x - x0);
        let allowed = honest_distance + model.max_walk_speed as f64 * allowed_time + 0.5;
        assert!(
            covered <= allowed,
            "client {i} covered {covered} m, allowed {allowed} m"
        );
    }
    let honest_covered = f64::from(authoritative(&mut tb, 2).feet.x - start[2]);
    assert!(
        honest_covered > honest_distance - 1.0,
        "honest client covered {honest_covered} m"
    );
}

/// A link that loses everything for longer than redundancy, the saved-move buffer of old
/// (96 moves) and the time bank's second cover: the client sends again what the server reports
/// it lacks, oldest first, and the backlog spends the stall's time. Nothing is guessed,
/// nobody is corrected or flagged, and the walk goes on as far as an unbroken one.
#[test]
fn an_honest_player_through_long_bursts_of_loss_is_never_guessed_or_corrected() {
    for rtt_ms in [100, 500] {
        through_long_bursts(rtt_ms);
    }
}

fn through_long_bursts(rtt_ms: u64) {
    let base = LinkConditions::new(
        Duration::from_millis(rtt_ms),
        Duration::from_millis(10),
        0.0,
    );
    let mut tb = movement_testbed(2, base, MovementTestPlugin::default());
    tb.server()
        .init_resource::<Flags>()
        .add_systems(Update, record_flags);
    tb.run_for(Duration::from_secs(2));
    let before = server_stats(&tb);
    for (lost_ms, rest_ms) in [(700, 3000), (1500, 4000), (2500, 5000)] {
        let blackout = LinkConditions { loss: 1.0, ..base };
        tb.set_client_conditions(1, blackout).unwrap();
        tb.run_for(Duration::from_millis(lost_ms));
        tb.set_client_conditions(1, base).unwrap();
        tb.run_for(Duration::from_millis(rest_ms));
    }
    let after = server_stats(&tb);
    assert_eq!(
        after.missing_moves_filled, before.missing_moves_filled,
        "moves the server had to guess at {rtt_ms} ms"
    );
    assert!(
        tb.server_world().resource::<Flags>().0.is_empty(),
        "an honest client was flagged"
    );
    for i in 0..2 {
        let stats = client_stats(&tb, i);
        assert_eq!(
            stats.corrections_received, 0,
            "{rtt_ms} ms, client {i}: {stats:?}"
        );
        assert_eq!(
            stats.saved_moves_evicted, 0,
            "{rtt_ms} ms, client {i}: {stats:?}"
        );
    }
    // Every move made was played on the server: both walked their script as far.
    let server_moves = |tb: &mut Testbed, i: usize| {
        let entity = character_of(tb, i);
        tb.server_world()
            .get::<unlag::movement::ServerMovement<CharacterMovement>>(entity)
            .unwrap()
            .last_processed()
    };
    let lagging = server_moves(&mut tb, 1);
    let steady = server_moves(&mut tb, 0);
    assert!(
        steady.diff(lagging).abs() <= 30,
        "moves processed: {} and {}",
        steady.0,
        lagging.0
    );
}

/// The server's initial state reaches the client, but the client's confirmation of it is lost
/// (its uplink in a burst of loss right after the character is given): the server sends its
/// state again, under a new id, until one is confirmed. Those copies agree with what the
/// client predicted from the first: applied (and confirmed), but no correction, here or on the
/// server. (Each copy was counted a correction, and an honest client at the start of a lossy
/// match was charged with several.)
#[test]
fn a_state_sent_again_for_a_lost_confirmation_is_no_correction() {
    let base = LinkConditions::new(Duration::from_millis(100), Duration::from_millis(10), 0.0);
    let mut tb = connected_testbed(2, base, MovementTestPlugin::default());
    // The uplink only, from before the character is given: every copy the server sends
    // arrives, no confirmation does.
    tb.set_client_conditions(1, LinkConditions { loss: 1.0, ..base })
        .unwrap();
    tb.set_client_downlink(1, Some(base));
    give_characters(&mut tb);
    tb.run_for(Duration::from_millis(1500));
    tb.set_client_conditions(1, base).unwrap();
    tb.set_client_downlink(1, None);
    tb.run_for(Duration::from_secs(4));
    let client = client_stats(&tb, 1);
    assert!(
        client.states_agreed >= 1,
        "the server never sent its state again: {client:?}"
    );
    assert_eq!(client.corrections_received, 0, "{client:?}");
    assert_eq!(server_stats(&tb).corrections_sent, 0);
    // The copies were confirmed: the server stopped sending them.
    let agreed = client.states_agreed;
    tb.run_for(Duration::from_secs(2));
    assert_eq!(client_stats(&tb, 1).states_agreed, agreed);
    stop_scripts(&mut tb);
    tb.run_for(Duration::from_secs(1));
    let p = predicted(&tb, 1).unwrap();
    let s = authoritative(&mut tb, 1);
    assert!(
        p.feet.distance(s.feet) < 1e-4,
        "{:?} against {:?}",
        p.feet,
        s.feet
    );
}

/// A link back from a long blackout in one direction only: the client's moves get through
/// while the server's reports of them do not. The client sends its backlog on, send after
/// send, rather than its oldest moves again and again until a report comes back: the server
/// has the whole backlog within a few sends, and plays it without a guess, a flag or a
/// correction. (Its oldest moves alone, until the reports came back, left the server's track
/// of the player seconds behind, and the shots that wait for it were judged without it.)
#[test]
fn a_backlog_goes_on_while_the_servers_reports_of_it_are_lost() {
    let base = LinkConditions::new(Duration::from_millis(100), Duration::from_millis(10), 0.0);
    let mut tb = movement_testbed(1, base, MovementTestPlugin::default());
    tb.server()
        .init_resource::<Flags>()
        .add_systems(Update, record_flags);
    set_script(&mut tb, 0, walk_east);
    tb.run_for(Duration::from_secs(2));
    let entity = character_of(&mut tb, 0);
    let processed = |tb: &Testbed| {
        tb.server_world()
            .get::<unlag::movement::ServerMovement<CharacterMovement>>(entity)
            .unwrap()
            .last_processed()
    };
    let made = |tb: &Testbed| client_stats(tb, 0).moves_simulated;
    let (processed_before, made_before) = (processed(&tb), made(&tb));
    let before = server_stats(&tb);
    // 2.5 s of nothing either way (150 moves: more than one send holds), then the moves get
    // through while the reports stay lost for 1.5 s.
    let blackout = LinkConditions { loss: 1.0, ..base };
    tb.set_client_conditions(0, blackout).unwrap();
    tb.run_for(Duration::from_millis(2500));
    tb.set_client_downlink(0, Some(blackout));
    tb.set_client_conditions(0, base).unwrap();
    tb.run_for(Duration::from_secs(1));
    // The server has played what the client made up to a one-way trip, a send interval and
    // the playout's wait ago, give or take a move each (the oldest moves again and again, until
    // a report came back, left it 117 behind here).
    let behind =
        (made(&tb) - made_before) as i64 - i64::from(processed(&tb).diff(processed_before));
    let wait = tb
        .server_world()
        .get::<unlag::movement::ServerMovement<CharacterMovement>>(entity)
        .unwrap()
        .playout_wait();
    let expected = ((0.05 + 1.0 / 30.0 + wait) * 60.0).ceil() as i64 + 3;
    println!("{behind} moves behind (playout's wait {wait:.3} s; at most {expected})");
    assert!(
        behind <= expected,
        "the server is {behind} moves behind the client, 1 s after its moves got through"
    );
    tb.run_for(Duration::from_millis(500));
    tb.set_client_downlink(0, None);
    tb.run_for(Duration::from_secs(2));
    let after = server_stats(&tb);
    assert_eq!(after.missing_moves_filled, before.missing_moves_filled);
    assert!(
        tb.server_world().resource::<Flags>().0.is_empty(),
        "flagged"
    );
    let stats = client_stats(&tb, 0);
    assert_eq!(stats.corrections_received, 0, "{stats:?}");
}

/// Server time, where the server shows client 0's character (its `Transform`: hit boxes and
/// proxy states come from there), the velocity its proxy states take, and where its moves
/// took it (the played state).
fn shown_and_played(tb: &Testbed, entity: Entity) -> (f64, Vec3, Vec3, Vec3) {
    let world = tb.server_world();
    (
        world.resource::<unlag::net::NetClock>().server_time,
        world.get::<Transform>(entity).unwrap().translation,
        world
            .get::<unlag::net::SimulatedVelocity>(entity)
            .map_or(Vec3::NAN, |v| v.0),
        world
            .get::<MovementState<CharacterMovement>>(entity)
            .unwrap()
            .0
            .feet,
    )
}

/// One client walking east on an open field for 2 s over a 100-ms link with 10 ms of jitter:
/// the testbed, the link's conditions and the server entity of its character.
fn walking_east_on_a_100_ms_link() -> (Testbed, LinkConditions, Entity) {
    let base = LinkConditions::new(Duration::from_millis(100), Duration::from_millis(10), 0.0);
    let plugin = MovementTestPlugin {
        level: open_field,
        ..default()
    };
    let mut tb = movement_testbed(1, base, plugin);
    set_script(&mut tb, 0, walk_east);
    tb.run_for(Duration::from_secs(2));
    let entity = character_of(&mut tb, 0);
    (tb, base, entity)
}

/// While a player's moves are late the server's track of it goes on with its last input for up
/// to `max_guess` (1 s) instead of standing and then rushing through the backlog; the moves
/// themselves are still played only as they come. Past the guess the track stands, and the
/// velocity the proxy states take ([`unlag::net::SimulatedVelocity`]) says so. When the moves
/// arrive, a right guess goes on into them without a step. While it walks, the velocity is the
/// track's.
#[test]
fn a_late_players_track_goes_on_for_a_while_then_stands_and_meets_its_moves() {
    let (mut tb, base, entity) = walking_east_on_a_100_ms_link();
    // Walking: the mean velocity given is the track's mean speed.
    let mut frames = Vec::new();
    while frames.len() < 120 {
        tb.step();
        frames.push(shown_and_played(&tb, entity));
    }
    let (t0, p0, ..) = frames[0];
    let (t1, p1, ..) = frames[frames.len() - 1];
    let walking = (p1 - p0).length() / (t1 - t0) as f32;
    let given: f32 = frames.iter().map(|f| f.2.length()).sum::<f32>() / frames.len() as f32;
    assert!(walking > 3.0, "walking at {walking} m/s");
    assert!(
        (given - walking).abs() < 0.1 * walking,
        "velocity given {given} m/s, the track moves at {walking} m/s"
    );
    // Nothing arrives for 1.6 s.
    tb.set_client_conditions(0, LinkConditions { loss: 1.0, ..base })
        .unwrap();
    let start = shown_and_played(&tb, entity).0;
    let steps_before = tb.server_world().resource::<MovementStats>().guess_steps;
    let mut stall = Vec::new();
    loop {
        tb.step();
        let frame = shown_and_played(&tb, entity);
        if frame.0 - start > 1.6 {
            break;
        }
        stall.push(frame);
    }
    // The guess runs on a step a frame, not again from its start.
    let steps = tb.server_world().resource::<MovementStats>().guess_steps - steps_before;
    assert!(
        steps > 0 && steps <= stall.len() as u64 + 20,
        "{steps} guess steps over {} frames",
        stall.len()
    );
    // The moves that had arrived run out within the playout's wait and a one-way trip; the
    // played state then stands while the shown track goes on walking for the guess.
    let played_from = stall
        .iter()
        .position(|f| f.0 - start > 0.2)
        .expect("frames");
    let guessed_to = stall
        .iter()
        .position(|f| f.0 - start > 0.9)
        .expect("frames");
    let (ta, pa, _, played_a) = stall[played_from];
    let (tb_, pb, _, played_b) = stall[guessed_to];
    assert!(
        played_a.distance(played_b) < 1e-4,
        "the played state moved {} m with no move arriving",
        played_a.distance(played_b)
    );
    let guessed = (pb - pa).length() / (tb_ - ta) as f32;
    assert!(
        guessed > 0.8 * walking,
        "shown at {guessed} m/s through the first of the stall, walking at {walking}"
    );
    // Past the guess the track stands, and the velocity is nothing.
    let standing: Vec<_> = stall.iter().filter(|f| f.0 - start > 1.4).collect();
    assert!(standing.len() > 5, "{} frames", standing.len());
    for (now, at, velocity, _) in &standing {
        assert!(
            velocity.length() < 1e-3,
            "{:.3} s into the stall: standing, yet given {velocity} m/s",
            now - start
        );
        assert_eq!(*at, standing[0].1, "the track moved past its guess");
    }
    // The moves arrive: the track goes on from where the guess stood, at most at the
    // playout's catch-up pace (no step), and the velocity comes back.
    tb.set_client_conditions(0, base).unwrap();
    let mut last = shown_and_played(&tb, entity);
    let mut moving = false;
    for _ in 0..240 {
        tb.step();
        let frame = shown_and_played(&tb, entity);
        let step = frame.1.distance(last.1);
        let dt = (frame.0 - last.0) as f32;
        let catch_up = 8.0 * walking * dt + 0.01;
        assert!(
            step <= catch_up,
            "the shown track stepped {step} m in {dt} s (at most {catch_up})"
        );
        moving |= frame.2.length() > 3.0;
        last = frame;
    }
    assert!(moving, "the velocity never came back");
    let (_, shown, _, played) = last;
    assert!(
        shown.distance(played) < 0.01,
        "shown {shown}, played {played}: the guess never met the moves"
    );
}

/// The movement script ([`scripted_input`]: walking, sliding along a wall, jumping, crouching,
/// dashing, circling) with the look swinging every move, up, down and sideways, as a player's
/// does while aiming.
fn scripted_looking_around(n: u32) -> CharacterInput {
    let input = scripted_input(n);
    let swing = (n as f32 * 0.7).sin();
    CharacterInput {
        yaw: input.yaw.wrapping_add((swing * 3000.0) as i16 as u16),
        pitch: (swing * 2000.0) as i16,
        ..input
    }
}

/// [`walk_east`] with the look swinging as [`scripted_looking_around`]'s.
fn walking_east_looking_around(n: u32) -> CharacterInput {
    CharacterInput {
        flags: 0,
        accel: walk_east(n).accel,
        ..scripted_looking_around(n)
    }
}

/// On a 60-Hz server whose player's moves come a hair after the playout clock wants them (the
/// clock sits on their arrivals' quantile, and a server reads them once a tick) the track is
/// guessed a step on every other tick; the move then comes, with an input that moves the body
/// as the guess's did (only the look differs). Taken from the guess instead of simulated again,
/// it is the very state simulating it gives, and so is everything shown: over 12 s of the
/// movement script with the look swinging, two of them over a lossy link (restarts and wrong
/// guesses) and then 1.7 s of nothing (a guess that runs out and stands, then a backlog),
/// every frame's played state and shown transform are those of the same match with
/// `take_guessed_moves` off, bit for bit, with an eighth of the moves taken from guesses (107
/// of 721 sent two a message).
#[test]
fn moves_taken_from_a_guess_are_the_states_simulating_them_gives() {
    type Case = (f64, fn(u32) -> CharacterInput, fn(Commands));
    let run = |take_guessed_moves: bool, (send_interval, script, level): Case| {
        let config = TestbedConfig {
            clients: 1,
            conditions: LinkConditions::new(
                Duration::from_millis(100),
                Duration::from_millis(5),
                0.0,
            ),
            tick_rate_hz: 60.0,
            frame_rate_hz: 60.0,
            ..default()
        };
        let plugin = MovementTestPlugin {
            settings: MovementSettings {
                take_guessed_moves,
                send_interval,
                ..default()
            },
            level,
        };
        let mut tb = connected_testbed_with(config, plugin);
        give_characters(&mut tb);
        set_script(&mut tb, 0, script);
        tb.run_for(Duration::from_secs(2));
        let entity = character_of(&mut tb, 0);
        let before = tb.server_world().resource::<MovementStats>().clone();
        let mut frames = Vec::new();
        for frame in 0..720 {
            // Two seconds of 3 % losses, then nothing for 1.7 s: longer than the guess may
            // run (`max_guess`), then the backlog.
            let loss = match frame {
                200..320 => 0.03,
                400..500 => 1.0,
                _ => 0.0,
            };
            tb.set_client_conditions(
                0,
                LinkConditions::new(Duration::from_millis(100), Duration::from_millis(5), loss),
            )
            .unwrap();
            tb.step();
            let world = tb.server_world();
            frames.push((
                world
                    .get::<MovementState<CharacterMovement>>(entity)
                    .unwrap()
                    .0
                    .clone(),
                *world.get::<Transform>(entity).unwrap(),
            ));
        }
        let after = tb.server_world().resource::<MovementStats>().clone();
        let moves = after.moves_processed - before.moves_processed;
        let taken = after.guessed_moves_taken - before.guessed_moves_taken;
        let guess_steps = after.guess_steps - before.guess_steps;
        (frames, moves, taken, guess_steps, client_stats(&tb, 0))
    };
    // The script two moves a message (the default) and each move in its own (then a move taken
    // from a guess is often the last one a frame plays); and a walk east on an open field,
    // looking around, whose moves all go as guessed through the stall.
    let cases: [Case; 3] = [
        (1.0 / 30.0, scripted_looking_around, arena),
        (0.0, scripted_looking_around, arena),
        (1.0 / 30.0, walking_east_looking_around, open_field),
    ];
    for case in cases {
        let send_interval = case.0;
        let (taken_frames, moves, taken, taken_steps, client) = run(true, case);
        let (simulated_frames, simulated_moves, none, simulated_steps, _) = run(false, case);
        println!(
            "send_interval {send_interval:.3} s, {moves} moves: {taken} taken from guesses, \
             guess steps {taken_steps} ({simulated_steps} with every move simulated)"
        );
        assert_eq!(
            none, 0,
            "moves taken from guesses with take_guessed_moves off"
        );
        assert_eq!(moves, simulated_moves);
        assert!(
            taken * 8 >= moves,
            "{taken} of {moves} moves taken from guesses"
        );
        assert!(taken_steps < simulated_steps);
        // Every number to the bit (-0 is not 0), and the rest.
        let bits = |(s, t): &(CharacterState, Transform)| -> Vec<u32> {
            [s.feet, s.velocity, t.translation, t.scale]
                .iter()
                .flat_map(|v| v.to_array())
                .chain(t.rotation.to_array())
                .chain([s.yaw, s.pitch, s.dash_time, s.dash_cooldown])
                .map(f32::to_bits)
                .collect()
        };
        for (i, (a, b)) in taken_frames.iter().zip(&simulated_frames).enumerate() {
            assert_eq!(a.0, b.0, "frame {i}: the played state");
            assert_eq!(a.1, b.1, "frame {i}: what the server shows");
            assert_eq!(bits(a), bits(b), "frame {i}: {a:?} against {b:?}");
        }
        assert_eq!(client.corrections_received, 0, "{client:?}");
    }
}

/// A player who stops while its moves are late is guessed walking on; when its moves arrive,
/// the shown track goes on from the guess and bends back onto them (a spring with time
/// constant `guess_ease`), never snaps nor runs faster than twice a walk, and the player itself
/// is not corrected: the guess is only what the server shows.
#[test]
fn a_wrong_guess_eases_onto_the_moves_and_corrects_no_one() {
    let (mut tb, base, entity) = walking_east_on_a_100_ms_link();
    // The player stops, and none of its moves arrive for 0.4 s.
    tb.set_client_conditions(0, LinkConditions { loss: 1.0, ..base })
        .unwrap();
    set_script(&mut tb, 0, stand);
    tb.run_for(Duration::from_millis(400));
    tb.set_client_conditions(0, base).unwrap();
    let mut last = shown_and_played(&tb, entity);
    let mut farthest: f32 = 0.0;
    // (Two seconds of the testbed's 240-fps frames.)
    for _ in 0..480 {
        tb.step();
        let frame = shown_and_played(&tb, entity);
        farthest = farthest.max(frame.1.distance(frame.3));
        // The played state stands; the shown bends back no faster than twice a walk.
        let dt = (frame.0 - last.0) as f32;
        let most = 12.0 * dt + 0.002;
        assert!(
            frame.1.distance(last.1) <= most,
            "the shown track stepped {} m in {dt} s (at most {most})",
            frame.1.distance(last.1)
        );
        last = frame;
    }
    assert!(
        farthest > 0.3,
        "guessed {farthest} m past the player: the test did not test a wrong guess"
    );
    let (_, shown, _, played) = last;
    assert!(
        shown.distance(played) < 0.01,
        "shown {shown}, played {played}: the guess never eased onto the moves"
    );
    assert_eq!(client_stats(&tb, 0).corrections_received, 0);
}

#[test]
fn a_claimed_teleport_is_corrected_and_never_adopted() {
    for accept_client_position in [false, true] {
        let conditions = LinkConditions::new(Duration::from_millis(100), Duration::ZERO, 0.0);
        let plugin = MovementTestPlugin {
            settings: MovementSettings {
                accept_client_position,
                ..default()
            },
            ..default()
        };
        let mut tb = movement_testbed(1, conditions, plugin);
        tb.run_for(Duration::from_secs(1));
        let before = authoritative(&mut tb, 0).feet;
        tb.client_world_mut(0).insert_resource(Cheats {
            clock_rate: 1.0,
            teleport: Some(Vec3::new(5.0, 0.0, 0.0)),
        });
        let mut farthest: f32 = 0.0;
        for _ in 0..(240 * 2) {
            tb.step();
            farthest = farthest.max(authoritative(&mut tb, 0).feet.distance(before));
        }
        let server = tb.server_world().resource::<MovementStats>().clone();
        assert!(server.corrections_sent >= 1, "{server:?}");
        // Two seconds of walking cover at most 12 m, but never by a 5 m jump: the server's
        // position moves at most a walking step per move.
        let p = predicted(&tb, 0).unwrap();
        let s = authoritative(&mut tb, 0);
        assert!(
            p.feet.distance(s.feet) < 0.5,
            "client still at its claimed position"
        );
        assert!(farthest < 13.0);
    }
}

/// Client-side hook: the next frames' messages are replaced by these raw payloads.
fn inject(tb: &mut Testbed, payload: Vec<u8>) {
    let client = tb.client_entity(0).unwrap();
    let world = tb.client_world_mut(0);
    world
        .get_mut::<MessageSender<unlag::movement::ServerMove<CharacterMovement>>>(client)
        .unwrap()
        .send::<unlag::net::UnreliableChannel>(unlag::movement::ServerMove::from_raw(payload));
}

fn server_stats(tb: &Testbed) -> MovementStats {
    tb.server_world().resource::<MovementStats>().clone()
}

/// A hand-made ServerMove payload: `count` moves ending at `newest`, each `dt` units long.
fn payload(count: u8, newest: u16, dt: u16) -> Vec<u8> {
    let moves = (0..count)
        .map(|k| unlag::movement::WireMove {
            seq: unlag::core::Seq16(newest.wrapping_sub(u16::from(count - 1 - k))),
            dt,
            input: CharacterInput::default(),
        })
        .collect();
    let data = unlag::movement::ServerMoveData {
        moves,
        end: IVec3::ZERO,
        correction_ack: Some(1),
        base: None,
    };
    unlag::movement::ServerMove::<CharacterMovement>::encode(&data)
        .payload()
        .to_vec()
}

fn server_last(tb: &mut Testbed, i: usize) -> u16 {
    let character = character_of(tb, i);
    tb.server_world()
        .get::<unlag::movement::ServerMovement<CharacterMovement>>(character)
        .unwrap()
        .last_processed()
        .0
}

/// Early in a match (fewer than 256 moves played) a copy naming a move "before" the first one
/// is a late duplicate, not a reason to sum move times over the whole sequence space (which
/// hung the server).
#[test]
fn a_copy_from_before_the_first_move_is_a_duplicate() {
    use unlag::movement::encode_dt;
    let conditions = LinkConditions::new(Duration::from_millis(40), Duration::ZERO, 0.0);
    let mut tb = movement_testbed(1, conditions, MovementTestPlugin::default());
    let last = server_last(&mut tb, 0);
    assert!(last < 200, "{last} moves already");
    let before = server_stats(&tb).duplicate_moves;
    inject(
        &mut tb,
        payload(2, last.wrapping_sub(last + 5), encode_dt(1.0 / 60.0)),
    );
    tb.run_for(Duration::from_millis(200));
    let after = server_stats(&tb);
    assert!(after.duplicate_moves >= before + 2);
    assert_eq!(after.rejected(unlag::movement::RejectReason::Stale), 0);
    assert!(unlag::core::Seq16(server_last(&mut tb, 0)).is_newer_than(unlag::core::Seq16(last)));
}

/// A message naming a move `max_seq_gap` ahead opens a gap the server fills with guessed moves
/// once it has waited for them: those moves cost the move rate like moves that came, so one
/// message cannot bring ten seconds of movement (75 s at the longest move) with the
/// time-discrepancy check and the playout off.
#[test]
fn a_gap_filled_with_guessed_moves_costs_the_move_rate() {
    use unlag::movement::encode_dt;
    let mut settings = MovementSettings::<CharacterMovement>::default();
    settings.time_discrepancy.enabled = false;
    // (The playout paces moves by their own clock: without it, nothing else does.)
    settings.playout.enabled = false;
    let plugin = MovementTestPlugin {
        settings: settings.clone(),
        ..default()
    };
    let conditions = LinkConditions::new(Duration::from_millis(40), Duration::ZERO, 0.0);
    let mut tb = movement_testbed(1, conditions, plugin);
    tb.run_for(Duration::from_secs(1));
    stop_scripts(&mut tb);
    tb.run_for(Duration::from_secs(1));
    let last = server_last(&mut tb, 0);
    let gap = u16::try_from(settings.max_seq_gap).unwrap();
    inject(
        &mut tb,
        payload(1, last.wrapping_add(gap), encode_dt(1.0 / 60.0)),
    );
    tb.run_for(Duration::from_millis(100));
    // Then nothing more comes from the client (as from a cheater who sends no move between):
    // the server gives up waiting and fills the gap with guesses.
    let silent = LinkConditions::new(Duration::from_millis(40), Duration::ZERO, 1.0);
    tb.set_client_conditions(0, silent).unwrap();
    let before = server_stats(&tb);
    let span = 0.5;
    tb.run_for(Duration::from_secs_f64(span));
    let after = server_stats(&tb);
    let processed = after.moves_processed - before.moves_processed;
    // The bucket holds two seconds of moves and refills at the rate: no more than that, in
    // guessed and real moves together.
    let allowed = settings.max_moves_per_second * (2.0 + span) + 2.0;
    assert!(
        (processed as f64) <= allowed,
        "{processed} moves processed in {span} s (at most {allowed})"
    );
    assert!(
        after.missing_moves_filled > before.missing_moves_filled,
        "the gap was filled"
    );
    // And the gap keeps filling at the rate, not at once.
    tb.run_for(Duration::from_secs(1));
    let later = server_stats(&tb).moves_processed - after.moves_processed;
    assert!(
        (later as f64) <= settings.max_moves_per_second * 1.0 + 2.0,
        "{later}"
    );
}

#[test]
fn bad_moves_are_rejected_counted_and_change_nothing() {
    use unlag::movement::{RejectReason, encode_dt};
    let conditions = LinkConditions::new(Duration::from_millis(40), Duration::ZERO, 0.0);
    let mut tb = movement_testbed(2, conditions, MovementTestPlugin::default());
    tb.run_for(Duration::from_secs(1));
    stop_scripts(&mut tb);
    tb.run_for(Duration::from_secs(1));
    let state = authoritative(&mut tb, 0);
    let last = server_last(&mut tb, 0);
    let good_dt = encode_dt(1.0 / 60.0);
    let cases: Vec<(RejectReason, Vec<u8>)> = vec![
        (RejectReason::Malformed, vec![3, 1, 2]),
        // Two moves announced, then a varint that never ends.
        (RejectReason::Malformed, vec![2, 7, 0, 1, 0x80, 0x80]),
        (RejectReason::TooManyMoves, {
            let mut p = payload(16, last.wrapping_add(40), good_dt);
            p[0] = 40;
            p
        }),
        (RejectReason::BadDelta, payload(1, last.wrapping_add(50), 0)),
        (
            RejectReason::BadDelta,
            payload(2, last.wrapping_add(50), encode_dt(0.2)),
        ),
        (
            RejectReason::FarAhead,
            payload(1, last.wrapping_add(2000), good_dt),
        ),
        (
            RejectReason::Stale,
            payload(3, last.wrapping_sub(1000), good_dt),
        ),
    ];
    for (reason, bytes) in cases {
        let before = server_stats(&tb).rejected(reason);
        inject(&mut tb, bytes);
        tb.run_for(Duration::from_millis(100));
        assert_eq!(server_stats(&tb).rejected(reason), before + 1, "{reason:?}");
        assert_eq!(
            authoritative(&mut tb, 0),
            state,
            "{reason:?} changed the server state"
        );
    }

    // A client without a character of this model.
    let other = character_of(&mut tb, 1);
    tb.server_world_mut().despawn(other);
    tb.run_for(Duration::from_millis(300));
    let before = server_stats(&tb).rejected(RejectReason::NotControlled);
    let client = tb.client_entity(1).unwrap();
    tb.client_world_mut(1)
        .get_mut::<MessageSender<unlag::movement::ServerMove<CharacterMovement>>>(client)
        .unwrap()
        .send::<unlag::net::UnreliableChannel>(unlag::movement::ServerMove::from_raw(payload(
            1, 5, good_dt,
        )));
    tb.run_for(Duration::from_millis(100));
    assert_eq!(
        server_stats(&tb).rejected(RejectReason::NotControlled),
        before + 1
    );

    // Far more moves than real time allows: the excess is refused.
    let before = server_stats(&tb).rejected(RejectReason::TooFrequent);
    for k in 0..20u16 {
        inject(
            &mut tb,
            payload(16, last.wrapping_add(20 + 16 * (k + 1)), good_dt),
        );
    }
    tb.run_for(Duration::from_millis(100));
    assert!(server_stats(&tb).rejected(RejectReason::TooFrequent) > before);
    // The moves admitted before the limit were valid moves and count (the server corrects the
    // client it then disagrees with); afterwards client and server agree again.
    tb.run_for(Duration::from_secs(2));
    let p = predicted(&tb, 0).unwrap();
    assert!(p.feet.distance(authoritative(&mut tb, 0).feet) < 1e-4);
}

#[test]
fn replaying_moves_in_one_pass_matches_simulating_them_one_by_one() {
    use crate::physics::{collision_world, ground_with};
    use bevy_rapier3d::rapier::prelude::{ColliderBuilder, Vector};
    use unlag::movement::MovementModel;
    let physics = ground_with(|physics| {
        for i in 0..40 {
            let (x, z) = ((i % 8) as f32 * 3.0 - 12.0, (i / 8) as f32 * 3.0 - 7.0);
            physics.insert_collider(
                ColliderBuilder::cuboid(0.6, 0.1 + (i % 4) as f32 * 0.3, 0.6)
                    .translation(Vector::new(x, 0.3, z)),
                None,
            );
        }
    });
    let model = CharacterMovement::default();
    // Forward between two rows of pillars, then sideways into one and along it.
    let inputs: Vec<CharacterInput> = (0..120).map(|n| scripted_input(n + 40)).collect();
    let start = CharacterState {
        feet: Vec3::new(1.5, 0.0, 8.0),
        ..default()
    };
    let dt = unlag::movement::decode_dt(unlag::movement::encode_dt(1.0 / 60.0)) as f32;
    // One by one, each with a fresh view of the world, as live ticks do.
    let mut one_by_one = start.clone();
    for input in &inputs {
        let world = collision_world(&physics);
        one_by_one = model.simulate(&one_by_one, input, dt, &world).0;
    }
    // In one pass, as a replay does.
    let world = collision_world(&physics);
    let replayed = inputs.iter().fold(start.clone(), |s, input| {
        model.simulate(&s, input, dt, &world).0
    });
    assert_eq!(replayed, one_by_one);
    assert!(
        replayed.feet.distance(start.feet) > 5.0,
        "the moves went somewhere"
    );
}

#[test]
fn a_client_position_is_adopted_only_where_the_body_can_go_straight() {
    use crate::physics::{collision_world, ground_with};
    use bevy_rapier3d::rapier::prelude::{ColliderBuilder, Vector};
    use unlag::movement::{KartMovement, KartState, MovementModel};
    // A wall 1 cm thick, its near face 1 cm beyond the capsule's reach at x = 0.
    let radius = CharacterMovement::default().radius;
    let face = radius + 0.01;
    let physics = ground_with(|physics| {
        physics.insert_collider(
            ColliderBuilder::cuboid(0.005, 2.0, 5.0).translation(Vector::new(
                face + 0.005,
                2.0,
                0.0,
            )),
            None,
        );
    });
    let world = collision_world(&physics);
    let model = CharacterMovement::default();
    let state = CharacterState {
        feet: Vec3::new(0.0, 0.01, 0.0),
        ..default()
    };
    // Along the wall, or back from it: clear.
    assert!(model.may_move_to(&state, Vec3::new(0.0, 0.01, 0.015), &world));
    assert!(model.may_move_to(&state, Vec3::new(-0.015, 0.01, 0.0), &world));
    // Into it by less than the error allowance (1.7 cm): refused, whatever the error.
    assert!(!model.may_move_to(&state, Vec3::new(0.016, 0.01, 0.0), &world));
    // Through it altogether: refused.
    assert!(!model.may_move_to(&state, Vec3::new(face + 0.5, 0.01, 0.0), &world));
    assert!(!model.may_move_to(&state, Vec3::NAN, &world));
    // A model without its own sweep: the segment between the two places is checked.
    let kart = KartState {
        position: Vec3::new(face - 0.01, 1.0, 0.0),
        ..default()
    };
    assert!(KartMovement::default().may_move_to(&kart, Vec3::new(face - 0.02, 1.0, 0.0), &world));
    assert!(!KartMovement::default().may_move_to(&kart, Vec3::new(face + 0.02, 1.0, 0.0), &world));
}

/// Two players walk straight at each other and through each other's path.
/// Two players stand near the line z = 8, 2 m apart, then walk towards each other in step
/// (scripted by tick), with the movement counters reset once they stand there.
fn walk_towards_each_other(tb: &mut Testbed) {
    stop_scripts(tb);
    tb.run_for(Duration::from_millis(500));
    // On z = 8, clear of the arena's obstacles, 10 cm apart sideways: they brush past.
    for (i, x, z) in [(0, -1.0, 8.0), (1, 1.0, 8.1)] {
        let character = character_of(tb, i);
        let mut state = tb
            .server_world_mut()
            .get_mut::<MovementState<CharacterMovement>>(character)
            .unwrap();
        state.0.feet = Vec3::new(x, 0.01, z);
        state.0.velocity = Vec3::ZERO;
    }
    // The clients are corrected onto the new spots; then counting starts.
    tb.run_for(Duration::from_secs(2));
    *tb.server_world_mut().resource_mut::<MovementStats>() = MovementStats::default();
    for i in 0..2 {
        *tb.client_world_mut(i).resource_mut::<MovementStats>() = MovementStats::default();
    }
    set_script(tb, 0, walk_across);
    set_script(tb, 1, walk_across_mirrored);
    for i in 0..2 {
        let mut script = tb.client_world_mut(i).resource_mut::<Script>();
        script.by_tick = true;
        script.running = true;
    }
}

fn walk_across(n: u32) -> CharacterInput {
    let toward = if (n / 240).is_multiple_of(2) {
        Vec2::X
    } else {
        Vec2::NEG_X
    };
    CharacterInput {
        accel: quantize_accel(toward),
        yaw: 0,
        pitch: 0,
        flags: 0,
    }
}

fn walk_across_mirrored(n: u32) -> CharacterInput {
    let mut input = walk_across(n);
    input.accel[0] = -input.accel[0];
    input
}

/// Gives every predicted or authoritative character a capsule collider in the character group,
/// as a game whose characters can touch would.
fn character_colliders(
    mut commands: Commands,
    new: Query<Entity, (Added<MovementState<CharacterMovement>>, Without<Collider>)>,
) {
    let model = CharacterMovement::default();
    for e in &new {
        commands.entity(e).insert((
            Collider::capsule_y(model.half_height, model.radius),
            unlag::movement::character_collision_groups(),
        ));
    }
}

#[test]
fn players_brushing_past_each_other_are_not_corrected_by_default() {
    let conditions =
        LinkConditions::new(Duration::from_millis(150), Duration::from_millis(10), 0.02);
    let mut tb = movement_testbed(2, conditions, MovementTestPlugin::default());
    tb.server().add_systems(Update, character_colliders);
    for i in 0..2 {
        tb.client(i).add_systems(Update, character_colliders);
    }
    // Both on the line z = 8, 2 m apart, walking towards each other: they meet and cross.
    walk_towards_each_other(&mut tb);
    let mut closest = f32::MAX;
    for _ in 0..(240 * 20) {
        tb.step();
        let a = authoritative(&mut tb, 0).feet;
        let b = authoritative(&mut tb, 1).feet;
        closest = closest.min(a.distance(b));
    }
    let server = server_stats(&tb);
    println!("crossing with CharacterCollisions::Ignore: closest {closest} m, {server:?}");
    assert!(closest < 0.3, "they never met: closest {closest} m");
    assert_eq!(server.corrections_sent, 0);
    let received =
        client_stats(&tb, 0).corrections_received + client_stats(&tb, 1).corrections_received;
    assert_eq!(received, 0);
}

#[test]
fn leafwing_actions_become_the_move_input() {
    use leafwing_input_manager::prelude::ActionState;
    use unlag::movement::{CharacterAction, CharacterInputPlugin, LookAngles, character_input};
    let conditions = LinkConditions::new(Duration::from_millis(50), Duration::ZERO, 0.0);
    let mut tb = Testbed::new(TestbedConfig {
        clients: 1,
        conditions,
        ..default()
    });
    tb.add_plugins((
        MovementTestPlugin::default(),
        CharacterInputPlugin {
            insert_input_map: false,
            ..default()
        },
    ));
    assert!(tb.run_until(Duration::from_secs(3), |tb| tb.all_synced()));
    let owner = tb.server_link(0).unwrap();
    tb.server_world_mut().spawn((
        MovementState::<CharacterMovement>(CharacterState::default()),
        Replicate::to_clients(NetworkTarget::All),
        ControlledBy {
            owner,
            lifetime: Lifetime::default(),
        },
    ));
    assert!(tb.run_until(Duration::from_secs(3), |tb| predicted(tb, 0).is_some()));
    let player = {
        let world = tb.client_world_mut(0);
        let mut q = world.query_filtered::<Entity, With<AutonomousProxy>>();
        q.single(world).unwrap()
    };
    // Look a quarter turn left, walk forward, hold crouch.
    {
        let world = tb.client_world_mut(0);
        world.get_mut::<LookAngles>(player).unwrap().yaw = core::f32::consts::FRAC_PI_2;
        let mut actions = world
            .get_mut::<ActionState<CharacterAction>>(player)
            .unwrap();
        actions.set_axis_pair(&CharacterAction::Move, Vec2::Y);
        actions.press(&CharacterAction::Crouch);
        actions.set_fixed_update_state_from_state();
    }
    tb.run_for(Duration::from_millis(20));
    let world = tb.client_world(0);
    let input = world.get::<NextMove<CharacterMovement>>(player).unwrap().0;
    // Facing +90° about Y means forward is −X.
    assert_eq!(input.accel, [-10, 0]);
    assert_eq!(input.yaw, quantize_angle(core::f32::consts::FRAC_PI_2));
    assert!(input.has(flags::CROUCH) && !input.has(flags::JUMP));
    let actions = world.get::<ActionState<CharacterAction>>(player).unwrap();
    let look = world.get::<LookAngles>(player).unwrap();
    assert_eq!(character_input(actions, look).accel, input.accel);
    tb.run_for(Duration::from_millis(500));
    let state = predicted(&tb, 0).unwrap();
    assert!(state.crouched && state.feet.x < -0.5, "{state:?}");
}

#[derive(Clone)]
struct KartTestPlugin;

/// A walled square 40 m wide with a floor.
fn kart_track(mut commands: Commands) {
    let mut solid = |half: Vec3, at: Vec3| {
        commands.spawn((
            Collider::cuboid(half.x, half.y, half.z),
            Transform::from_translation(at),
        ));
    };
    solid(Vec3::new(50.0, 0.5, 50.0), Vec3::new(0.0, -0.5, 0.0));
    solid(Vec3::new(0.5, 2.0, 20.0), Vec3::new(20.0, 2.0, 0.0));
    solid(Vec3::new(0.5, 2.0, 20.0), Vec3::new(-20.0, 2.0, 0.0));
    solid(Vec3::new(20.0, 2.0, 0.5), Vec3::new(0.0, 2.0, 20.0));
    solid(Vec3::new(20.0, 2.0, 0.5), Vec3::new(0.0, 2.0, -20.0));
}

impl Plugin for KartTestPlugin {
    fn build(&self, app: &mut App) {
        app.add_plugins(unlag_testbed::RapierFixedPlugin::default())
            .add_plugins(MovementPredictionPlugin::<KartMovement>::default())
            .add_systems(Startup, kart_track)
            .init_resource::<KartExtent>()
            .add_systems(Last, track_kart_extent);
    }
}

/// How far from the centre any kart got on this App, metres (per axis).
#[derive(Resource, Default)]
struct KartExtent(f32);

fn track_kart_extent(mut extent: ResMut<KartExtent>, karts: Query<&MovementState<KartMovement>>) {
    for k in &karts {
        extent.0 = extent.0.max(k.0.position.x.abs()).max(k.0.position.z.abs());
    }
}

fn drive_kart(
    mut karts: Query<(
        &Prediction<KartMovement>,
        Option<&mut NextMove<KartMovement>>,
        Entity,
    )>,
    mut commands: Commands,
) {
    for (prediction, next, entity) in &mut karts {
        let n = u32::from(prediction.next_seq().0);
        // Full throttle, steering in slow waves, braking now and then: it will hit walls.
        let input = KartInput {
            throttle: if n % 600 < 520 { 10 } else { -10 },
            steering: match (n / 90) % 4 {
                0 => 0,
                1 => 6,
                2 => 0,
                _ => -10,
            },
        };
        NextMove::write(&mut commands, entity, next, input);
    }
}

#[test]
fn kart_is_never_corrected_and_never_drives_through_a_wall() {
    let conditions =
        LinkConditions::new(Duration::from_millis(250), Duration::from_millis(20), 0.05);
    let mut tb = Testbed::new(TestbedConfig {
        clients: 1,
        conditions,
        ..default()
    });
    tb.add_plugins(KartTestPlugin);
    tb.client(0).add_systems(
        FixedUpdate,
        drive_kart.before(MovementPredictionSystems::Simulate),
    );
    assert!(tb.run_until(Duration::from_secs(3), |tb| tb.all_synced()));
    let owner = tb.server_link(0).unwrap();
    tb.server_world_mut().spawn((
        MovementState::<KartMovement>(KartState {
            position: Vec3::new(0.0, 0.45, 0.0),
            ..default()
        }),
        Replicate::to_clients(NetworkTarget::All),
        ControlledBy {
            owner,
            lifetime: Lifetime::default(),
        },
    ));
    tb.run_for(Duration::from_secs(40));
    let server = server_stats(&tb);
    let client = client_stats(&tb, 0);
    println!("kart server {server:?}\nkart client {client:?}");
    assert!(client.moves_simulated > 2000);
    assert_eq!(client.corrections_received, 0);
    assert_eq!(server.corrections_sent, 0);
    // The inner faces of the walls are 19.5 m out; the kart's centre never passes them.
    let wall = 19.5;
    let server_extent = tb.server_world().resource::<KartExtent>().0;
    let client_extent = tb.client_world(0).resource::<KartExtent>().0;
    assert!(
        server_extent < wall && client_extent < wall,
        "{server_extent} {client_extent}"
    );
    assert!(
        server_extent > 15.0,
        "the kart never reached a wall: {server_extent}"
    );
}

/// Movement with smoothing and the facade's glue: each client sees the other's character.
#[derive(Clone)]
struct SeeEachOther {
    collisions: unlag::movement::CharacterCollisions,
}

impl Plugin for SeeEachOther {
    fn build(&self, app: &mut App) {
        app.add_plugins((
            MovementTestPlugin {
                settings: MovementSettings {
                    character_collisions: self.collisions,
                    ..default()
                },
                ..default()
            },
            unlag::smoothing::ProxySmoothingPlugin::default(),
            unlag::CharacterProxyPlugin,
        ));
    }
}

/// Crouch while walking towards +X.
fn crouch_walk(_n: u32) -> CharacterInput {
    CharacterInput {
        flags: flags::CROUCH,
        ..walk_east(0)
    }
}

#[test]
fn other_players_are_smoothed_proxies_with_their_crouch() {
    use unlag::smoothing::RenderedPose;
    let conditions =
        LinkConditions::new(Duration::from_millis(100), Duration::from_millis(10), 0.02);
    let mut tb = movement_testbed(
        2,
        conditions,
        SeeEachOther {
            collisions: unlag::movement::CharacterCollisions::Ignore,
        },
    );
    set_script(&mut tb, 0, crouch_walk);
    tb.run_for(Duration::from_secs(3));
    // Client 1 renders client 0's character near where the server has it, crouched.
    let world = tb.client_world_mut(1);
    let mut q = world.query_filtered::<&RenderedPose, With<unlag::net::SimulatedProxy>>();
    let poses: Vec<RenderedPose> = q.iter(world).copied().collect();
    assert_eq!(poses.len(), 1, "client 1 sees one other character");
    let pose = poses[0];
    assert_eq!(pose.flags & unlag::CROUCHED_FLAG, unlag::CROUCHED_FLAG);
    let server = authoritative(&mut tb, 0).feet;
    // Shown 100-200 ms in the past while crouch-walking at 3 m/s.
    let behind = server.distance(pose.position);
    assert!(behind < 1.0, "proxy {behind} m from the server's character");
    assert!(
        tb.client_world(1)
            .resource::<unlag::smoothing::SmoothingStats>()
            .frames
            > 500
    );
}

#[test]
fn players_brushing_past_each_other_when_characters_block() {
    let conditions =
        LinkConditions::new(Duration::from_millis(150), Duration::from_millis(10), 0.02);
    let mut tb = movement_testbed(
        2,
        conditions,
        SeeEachOther {
            collisions: unlag::movement::CharacterCollisions::Block,
        },
    );
    tb.server().add_systems(Update, character_colliders);
    for i in 0..2 {
        tb.client(i).add_systems(Update, proxy_colliders);
    }
    walk_towards_each_other(&mut tb);
    tb.run_for(Duration::from_secs(20));
    let server = server_stats(&tb);
    // Measured, not bounded: the client collides with where it sees the other player (in the
    // past), the server with where that player is; the difference costs corrections.
    println!(
        "crossing with CharacterCollisions::Block at 150 ms: {} corrections in 20 s for 2 players",
        server.corrections_sent
    );
    assert!(server.moves_processed > 2000);
    // Blocking is felt: the same crossing corrects nobody with the default policy.
    assert!(server.corrections_sent > 0, "Block changed nothing");
}

/// On a client: a capsule on every character, predicted or shown, in the character group.
fn proxy_colliders(
    mut commands: Commands,
    new: Query<
        Entity,
        (
            Or<(
                Added<MovementState<CharacterMovement>>,
                Added<unlag::smoothing::ProxySmoothing>,
            )>,
            Without<Collider>,
        ),
    >,
) {
    let model = CharacterMovement::default();
    for e in &new {
        commands.entity(e).insert((
            Collider::capsule_y(model.half_height, model.radius),
            unlag::movement::character_collision_groups(),
        ));
    }
}

/// Client `i`'s own character: its predicted feet and where it is drawn.
fn own_drawn(tb: &mut Testbed, i: usize) -> (Vec3, Vec3) {
    let world = tb.client_world_mut(i);
    let mut q = world
        .query_filtered::<(&MovementState<CharacterMovement>, &Transform), With<AutonomousProxy>>();
    let (state, transform) = q.single(world).unwrap();
    (state.0.feet, transform.translation)
}

#[test]
fn hiding_prediction_shows_the_player_one_round_trip_late() {
    let rtt = 0.2;
    let conditions = LinkConditions::new(Duration::from_secs_f64(rtt), Duration::ZERO, 0.0);
    let mut tb = movement_testbed(
        1,
        conditions,
        MovementTestPlugin {
            level: open_field,
            ..default()
        },
    );
    set_script(&mut tb, 0, walk_east);
    tb.run_for(Duration::from_secs(2));
    // Shown as predicted: drawn where the client simulates it.
    let (feet, drawn) = own_drawn(&mut tb, 0);
    assert!(drawn.distance(feet) < 1e-4, "{drawn} vs {feet}");

    // Hidden: drawn where it was one (smoothed) round trip ago, i.e. speed × RTT behind.
    tb.client_world_mut(0)
        .resource_mut::<MovementSettings<CharacterMovement>>()
        .show_prediction = false;
    tb.run_for(Duration::from_secs(1));
    let (before, _) = own_drawn(&mut tb, 0);
    tb.run_for(Duration::from_millis(500));
    let (feet, drawn) = own_drawn(&mut tb, 0);
    let speed = (feet.x - before.x) / 0.5;
    assert!(speed > 3.0, "walking at {speed} m/s");
    let behind = feet.x - drawn.x;
    let measured_rtt = tb.client_clock(0).rtt;
    assert!((measured_rtt - rtt).abs() < 0.02, "{measured_rtt}");
    let expected = speed * measured_rtt as f32;
    assert!(
        (behind - expected).abs() < speed / 60.0,
        "drawn {behind} m behind, expected {expected} m"
    );
    assert!((drawn.z - feet.z).abs() < 1e-3);
    // Moves are still predicted and checked: nothing to correct.
    assert_eq!(client_stats(&tb, 0).corrections_received, 0);

    // Shown again: back at the prediction on the next frame.
    tb.client_world_mut(0)
        .resource_mut::<MovementSettings<CharacterMovement>>()
        .show_prediction = true;
    tb.step();
    let (feet, drawn) = own_drawn(&mut tb, 0);
    assert!(drawn.distance(feet) < 1e-4, "{drawn} vs {feet}");
}

#[test]
fn server_driven_characters_move_by_the_same_rules_and_are_proxies() {
    let conditions = LinkConditions::new(Duration::from_millis(100), Duration::ZERO, 0.0);
    let mut tb = movement_testbed(
        1,
        conditions,
        (
            MovementTestPlugin::default(),
            unlag::smoothing::ProxySmoothingPlugin::default(),
            unlag::CharacterProxyPlugin,
        ),
    );
    // A bot running east and jumping whenever it can, towards the arena's east wall.
    let input = CharacterInput {
        flags: flags::JUMP,
        ..walk_east(0)
    };
    let bot = tb
        .server_world_mut()
        .spawn((
            MovementState::<CharacterMovement>(CharacterState {
                feet: Vec3::new(0.0, 0.0, 12.0),
                ..default()
            }),
            unlag::movement::ServerDriven,
            NextMove::<CharacterMovement>(input),
            Replicate::to_clients(NetworkTarget::All),
        ))
        .id();
    let mut highest = 0.0f32;
    // Where the server had it, by server time, over the last second (a proxy is drawn at the
    // client's view time, some 100 ms behind, and the bot is jumping).
    let mut track: Vec<(f64, Vec3)> = Vec::new();
    let frames = (6.0 / tb.frame().as_secs_f64()).round() as usize;
    for step in 0..frames {
        tb.step();
        let feet = tb
            .server_world()
            .get::<MovementState<CharacterMovement>>(bot)
            .unwrap()
            .0
            .feet;
        highest = highest.max(feet.y);
        if step + 240 >= frames {
            track.push((unlag::net::server_time_of_world(tb.server_world()), feet));
        }
    }
    let server = tb.server_world();
    let feet = server
        .get::<MovementState<CharacterMovement>>(bot)
        .unwrap()
        .0
        .feet;
    // Ran until the wall (inner face at 19.5 m) stopped it, jumping on the way.
    assert!((17.0..19.5).contains(&feet.x), "{feet}");
    assert!((feet.z - 12.0).abs() < 0.1, "{feet}");
    assert!(highest > 0.5, "never jumped: {highest}");
    assert_eq!(server.get::<Transform>(bot).unwrap().translation, feet);
    // The client draws it as a smoothed proxy, where it is.
    let world = tb.client_world_mut(0);
    let mut q = world.query::<&unlag::smoothing::RenderedPose>();
    let drawn: Vec<(Vec3, f64)> = q.iter(world).map(|p| (p.position, p.view_time)).collect();
    assert_eq!(drawn.len(), 1, "{drawn:?}");
    let (position, view_time) = drawn[0];
    let (at, then) = *track
        .iter()
        .min_by(|a, b| (a.0 - view_time).abs().total_cmp(&(b.0 - view_time).abs()))
        .unwrap();
    assert!(
        (at - view_time).abs() < 0.005,
        "view time {view_time} not in the track"
    );
    assert!(position.distance(then) < 0.3, "{position} vs {then}");
    // No client moves it: nothing was sent or corrected for it.
    assert_eq!(server_stats(&tb).corrections_sent, 0);
}

/// Moves on the wire: a player's look angles go as their turn from the next move's, and what
/// changed is named in the move's header byte (`MoveInputCodec::DELTA_TAG_BITS`), so a
/// message of 16 moves that each turn the view a little is 3 bytes a move (it was 6 with the
/// whole yaw and pitch, 2 bytes each, then 4 with a byte of its own saying what changed);
/// every input reads back exactly, turns across the yaw's wrap and the pitch's ends included,
/// no turn reads past the pitch's range, and a header naming more than the codec's tag (or a
/// change on a move marked the same) is refused.
#[test]
fn turning_moves_cost_three_bytes_each_and_read_back_exactly() {
    use unlag::core::{Seq16, SplitMix64};
    use unlag::movement::{ServerMove, ServerMoveData, WireMove, encode_dt};
    let message = |inputs: &[CharacterInput]| {
        let moves = inputs
            .iter()
            .enumerate()
            .map(|(k, input)| WireMove {
                seq: Seq16(65_530u16.wrapping_add(k as u16)),
                dt: encode_dt(1.0 / 60.0),
                input: *input,
            })
            .collect();
        ServerMoveData {
            moves,
            end: IVec3::new(1234, 56, -789),
            correction_ack: Some(3),
            base: None,
        }
    };
    // A mouse turning the view 0.2° right and 0.1° down each move, walking forward.
    let turning: Vec<CharacterInput> = (0..16)
        .map(|k| CharacterInput {
            accel: [0, -10],
            yaw: 65_400u16.wrapping_add(36 * k),
            pitch: 100 - 18 * k as i16,
            flags: 0,
        })
        .collect();
    let data = message(&turning);
    let packed = ServerMove::<CharacterMovement>::encode(&data);
    println!("16 turning moves: {} bytes", packed.len());
    // Count, newest, correction ack and end: 9 bytes; the oldest move, its input and its
    // duration whole (no base: nothing before it to compare with), 9; each newer one its
    // header (with what changed) and two one-byte turns (108 bytes with the angles whole).
    assert!(packed.len() <= 9 + 9 + 15 * 3, "{} bytes", packed.len());
    assert_eq!(packed.decode().unwrap(), data);
    // The second move's header is at 9 + 9: "same duration" and the yaw and pitch changed.
    let header_at = 18;
    let header = packed.payload()[header_at];
    assert_eq!(header, 2 | ((2 | 4) << 2), "{header:#b}");
    for bad in [
        header | 1,        // the same input, yet changes named
        header | (1 << 6), // a tag bit the character's codec does not have
        header | (1 << 7),
    ] {
        let mut bytes = packed.payload().to_vec();
        bytes[header_at] = bad;
        assert!(
            ServerMove::<CharacterMovement>::from_raw(bytes)
                .decode()
                .is_err(),
            "{bad:#b}"
        );
    }

    let mut rng = SplitMix64::new(26);
    for _ in 0..5000 {
        let n = 1 + (rng.next_u64() % 32) as usize;
        let mut input = CharacterInput {
            accel: [0, 0],
            yaw: rng.next_u64() as u16,
            pitch: rng.next_u64() as i16,
            flags: 0,
        };
        let inputs: Vec<CharacterInput> = (0..n)
            .map(|_| {
                match rng.next_u64() % 4 {
                    // Anywhere: the largest turns, both ends of the pitch.
                    0 => {
                        input.yaw = rng.next_u64() as u16;
                        input.pitch = [i16::MIN, i16::MAX, rng.next_u64() as i16]
                            [(rng.next_u64() % 3) as usize];
                    }
                    1 => {
                        input.yaw = input.yaw.wrapping_add((rng.next_u64() % 200) as u16);
                        input.pitch = input.pitch.saturating_sub((rng.next_u64() % 200) as i16);
                    }
                    2 => input.accel = [(rng.next_u64() % 21) as i8 - 10, 10],
                    _ => {}
                }
                input
            })
            .collect();
        let data = message(&inputs);
        assert_eq!(
            ServerMove::<CharacterMovement>::encode(&data)
                .decode()
                .unwrap(),
            data
        );
    }
    // A turn that would take the pitch past its range is refused, not wrapped.
    let mut bytes = ServerMove::<CharacterMovement>::encode(&message(&[
        CharacterInput {
            pitch: i16::MAX - 1,
            ..default()
        },
        CharacterInput {
            pitch: i16::MAX,
            ..default()
        },
    ]))
    .payload()
    .to_vec();
    // The newer move's pitch turn (+1, zigzag 2) is the last byte: make it 2^15 + 1, then
    // the ends of i32 (the server_move fuzz target's find: a turn near i32::MAX overflowed the
    // pitch's sum and panicked). Each is refused, not wrapped or summed past the range.
    assert_eq!(bytes.pop(), Some(2));
    for turn in [i32::from(i16::MAX) + 2, i32::MAX, i32::MAX - 1, i32::MIN] {
        let mut w = unlag::core::ByteWriter::new();
        w.zigzag(turn);
        let mut hostile = bytes.clone();
        hostile.extend(w.into_bytes());
        assert!(
            ServerMove::<CharacterMovement>::from_raw(hostile)
                .decode()
                .is_err(),
            "{turn}"
        );
    }
}

/// A message's oldest move written against a move the server holds (`ServerMoveData::base`):
/// a turning player's oldest costs its header and its two turns, and the base's age a byte,
/// where the move whole took 9; it reads back exactly with the base held, is refused
/// without it (and by `decode`, which holds nothing), and reads as another input against
/// another base. A base not 1 to `MAX_BASE_AGE` moves older is left out by the encoder; an age
/// of 0 or beyond it is refused. A message that does not state the correction ack is a byte
/// shorter.
#[test]
fn a_messages_moves_go_against_a_base_the_server_holds() {
    use unlag::core::Seq16;
    use unlag::movement::{MAX_BASE_AGE, ServerMove, ServerMoveData, WireMove, encode_dt};
    let dt = encode_dt(1.0 / 60.0);
    let turned = |k: u16| CharacterInput {
        accel: [0, -10],
        yaw: 65_400u16.wrapping_add(36 * k),
        pitch: 100 - 18 * k as i16,
        flags: 0,
    };
    let newest = Seq16(7);
    let moves: Vec<WireMove<CharacterInput>> = (0..5u16)
        .map(|k| WireMove {
            seq: newest.offset(i32::from(k) - 4),
            dt,
            input: turned(k + 10),
        })
        .collect();
    let base = WireMove {
        seq: newest.offset(-12),
        dt,
        input: turned(2),
    };
    let whole = ServerMoveData {
        moves,
        end: IVec3::new(1234, 56, -789),
        correction_ack: None,
        base: None,
    };
    let against = ServerMoveData {
        base: Some(base.clone()),
        ..whole.clone()
    };
    let held = |seq: Seq16| (seq == base.seq).then_some((base.input, base.dt));
    let packed_whole = ServerMove::<CharacterMovement>::encode(&whole);
    let packed = ServerMove::<CharacterMovement>::encode(&against);
    println!(
        "{} bytes whole, {} against a base",
        packed_whole.len(),
        packed.len()
    );
    // The oldest whole (9 bytes) against its header, its two turns from the base eight moves
    // before (1.6° of yaw and 0.4° of pitch: two bytes each; one byte up to 0.35°) and the
    // age: 9 → 1 + 2 + 2 + 1.
    assert_eq!(packed.len() + 3, packed_whole.len());
    assert_eq!(packed.base_seq(), Some(base.seq));
    assert_eq!(packed_whole.base_seq(), None);
    assert_eq!(packed.decode_with(held).unwrap(), against);
    assert_eq!(packed_whole.decode_with(held).unwrap(), whole);
    assert!(packed.decode().is_err(), "nothing held");
    assert!(packed.decode_with(|_| None).is_err());
    let other = packed
        .decode_with(|_| Some((turned(0), dt)))
        .expect("any base reads");
    assert_ne!(other.moves, against.moves);

    // A walk in a straight line: the move is its base's input, so one header byte.
    let straight = |seq_base: Seq16| ServerMoveData {
        moves: vec![WireMove {
            seq: newest,
            dt,
            input: turned(0),
        }],
        end: IVec3::ZERO,
        correction_ack: None,
        base: Some(WireMove {
            seq: seq_base,
            dt,
            input: turned(0),
        }),
    };
    let same = ServerMove::<CharacterMovement>::encode(&straight(newest.offset(-1)));
    // Count, newest (2), age, end (3), header.
    assert_eq!(same.len(), 8);
    // The oldest base allowed, and ones the encoder leaves out: too old, the newest itself,
    // newer.
    let oldest = newest.offset(-i32::from(MAX_BASE_AGE));
    assert_eq!(
        ServerMove::<CharacterMovement>::encode(&straight(oldest)).base_seq(),
        Some(oldest)
    );
    for left_out in [oldest.offset(-1), newest, newest.next()] {
        let m = ServerMove::<CharacterMovement>::encode(&straight(left_out));
        assert_eq!(m.base_seq(), None, "{left_out:?}");
        // Count, newest (2), end (3), the input (7) and duration (2) whole.
        assert_eq!(m.len(), 15, "written whole");
        assert_eq!(
            m.decode().unwrap(),
            ServerMoveData {
                base: None,
                ..straight(left_out)
            }
        );
    }
    // The age is the fourth byte: 0 and ages past `MAX_BASE_AGE` are refused, whatever held.
    for age in [0, MAX_BASE_AGE + 1, 255] {
        let mut bytes = same.payload().to_vec();
        bytes[3] = age as u8;
        let m = ServerMove::<CharacterMovement>::from_raw(bytes);
        assert!(m.decode_with(|_| Some((turned(0), dt))).is_err(), "{age}");
    }
    // Stating the correction ack costs its byte.
    let stating = ServerMove::<CharacterMovement>::encode(&ServerMoveData {
        correction_ack: Some(200),
        ..against.clone()
    });
    assert_eq!(stating.len(), packed.len() + 1);
    assert_eq!(stating.decode_with(held).unwrap().correction_ack, Some(200));
}
