//! How the examples' Apps connect: a listen server (the server App stepped inside the player's
//! App, over lightyear's crossbeam transport), a dedicated server over UDP, and a client
//! joining one over UDP. The game's plugins are the caller's; every App here gets lightyear,
//! `UnlagNetPlugin` (real time) and the link conditioner ([`NetConditions`]).

use bevy::prelude::*;
use bevy::state::app::StatesPlugin;
use core::net::{Ipv4Addr, SocketAddr};
use core::time::Duration;
use lightyear::crossbeam::CrossbeamIo;
use lightyear::netcode::server_plugin::NetcodeConfig as ServerNetcodeConfig;
use lightyear::prelude::client::ClientPlugins;
use lightyear::prelude::server::{NetcodeServer, ServerPlugins, Start};
use lightyear::prelude::*;
use std::sync::Mutex;
use unlag::net::{
    LinkConditions, NetConditions, ServerStopPlugin, ServerUdpSocket, StopRequest, UnlagNetPlugin,
};
use unlag::rewind::{RewindDebug, RewindDebugLog};
use unlag_testbed::{
    PROTOCOL_ID, connect_client, connect_client_with_key, finish_app, link_crossbeam,
    start_crossbeam_server,
};

use crate::NetPanel;

/// Simulation ticks per second, on every side.
pub const TICK_HZ: f64 = 60.0;

/// The UDP port a dedicated server listens on unless told otherwise.
pub const DEFAULT_PORT: u16 = 5888;

fn tick() -> Duration {
    Duration::from_secs_f64(1.0 / TICK_HZ)
}

/// A headless server App: Bevy's minimal plugins (its own loop at 250 Hz when run on its own),
/// lightyear's server, `UnlagNetPlugin` and the assets of this repository. Add the game's
/// plugins, then [`host`] it in a client App or [`serve_udp`] it.
pub fn server_app() -> App {
    let mut app = App::new();
    app.add_plugins((
        MinimalPlugins
            .set(bevy::app::ScheduleRunnerPlugin::run_loop(
                Duration::from_secs_f64(1.0 / 250.0),
            ))
            .set(unlag_testbed::server_task_pools()),
        StatesPlugin,
        crate::asset_plugin(),
    ))
    .add_plugins(ServerPlugins {
        tick_duration: tick(),
    })
    .add_plugins(UnlagNetPlugin::default())
    .insert_resource(NetConditions::new(LinkConditions::default(), 1).expect("no conditions"))
    // Every link replicates both ways.
    .add_observer(|add: On<Add, LinkOf>, mut commands: Commands| {
        commands
            .entity(add.entity)
            .insert((ReplicationSender, ReplicationReceiver));
    });
    app
}

/// The shooter's dedicated server, headless: [`server_app`] with the shooter's rules
/// (`settings`: bots and their aim), the net panel's server settings (`panel`: update rate,
/// rewinding, playout) and a `server stats:` line every `stats_every` seconds. Lightyear's
/// netcode warns once per replayed or garbled datagram with no limit (a replay flood writes
/// thousands of lines a second): its errors only are logged. [`serve_udp`] it.
pub fn dedicated_shooter(
    settings: crate::game::ShooterSettings,
    panel: NetPanel,
    stats_every: f64,
) -> App {
    let mut server = server_app();
    server
        .add_plugins(bevy::log::LogPlugin {
            filter: format!(
                "{},lightyear_netcode::error=error",
                bevy::log::DEFAULT_FILTER
            ),
            ..default()
        })
        .add_plugins(crate::game::ShooterPlugins { settings })
        .add_plugins(crate::stats::ServerStatsPlugin { every: stats_every })
        .insert_resource(panel);
    server
}

/// Makes `app` exit successfully after `seconds` of real time (never with `None`).
pub fn quit_after(app: &mut App, seconds: Option<f64>) {
    if let Some(s) = seconds {
        app.add_systems(
            Update,
            move |time: Res<Time<Real>>, mut exit: MessageWriter<AppExit>| {
                if time.elapsed_secs_f64() >= s {
                    exit.write(AppExit::Success);
                }
            },
        );
    }
}

/// Adds lightyear's client, `UnlagNetPlugin` and a link conditioner (no conditions until the
/// net panel sets some) to a client App (the player's, windowed or not). Then [`host`] a
/// server in it or [`join_udp`] one.
pub fn client_net(app: &mut App, seed: u64) {
    app.add_plugins(ClientPlugins {
        tick_duration: tick(),
    })
    .add_plugins(UnlagNetPlugin::default())
    .insert_resource(NetConditions::new(LinkConditions::default(), seed).expect("no conditions"));
}

/// The server App of a listen server, kept in the player's App and updated at the start of
/// each of its frames.
pub struct HostedServer(pub App);

/// The client's end of the crossbeam pair until the client App starts.
#[derive(Resource)]
struct PendingLink(Mutex<Option<(CrossbeamIo, SocketAddr)>>);

/// Makes `client` a listen server's player: `server` (from [`server_app`], with the game's
/// plugins) is finished, started and linked to `client` through a crossbeam pair; `client`
/// updates it at the start of each frame, before its own, and copies its [`NetPanel`] into it
/// (one panel for both ends, as the host owns both) and the server's rewind log out of it (so
/// the player's App can draw the hit boxes the server tested).
pub fn host(client: &mut App, mut server: App) {
    // (On the single-threaded executor, in the host's frame: see `serve_udp` on why.)
    finish_app(&mut server);
    let addr = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), DEFAULT_PORT);
    let netcode = start_crossbeam_server(server.world_mut());
    let (_, client_io) = link_crossbeam(server.world_mut(), netcode, 0);
    client
        .insert_non_send(HostedServer(server))
        .insert_resource(PendingLink(Mutex::new(Some((client_io, addr)))))
        .add_systems(Startup, connect_pending)
        .add_systems(First, step_hosted_server);
}

fn connect_pending(world: &mut World) {
    let pending = world
        .resource::<PendingLink>()
        .0
        .lock()
        .ok()
        .and_then(|mut p| p.take());
    if let Some((io, addr)) = pending {
        connect_client(world, io, addr, 1);
    }
}

fn step_hosted_server(world: &mut World) {
    let panel = world.get_resource::<NetPanel>().cloned();
    let Some(mut hosted) = world.remove_non_send::<HostedServer>() else {
        return;
    };
    if let Some(panel) = panel
        && hosted.0.world().get_resource::<NetPanel>() != Some(&panel)
    {
        hosted.0.world_mut().insert_resource(panel);
    }
    hosted.0.update();
    // The rewind gizmos: what the server tested for the players' shots, drawn by the player's
    // App.
    let server = hosted.0.world();
    let show = server
        .get_resource::<RewindDebug>()
        .is_some_and(|d| d.show_queries);
    // Only the players' shots: the bots' own rays are not what the switch is about.
    let mut players = hosted
        .0
        .world_mut()
        .query_filtered::<Entity, With<ControlledBy>>();
    let server = hosted.0.world();
    let players: Vec<Entity> = players.iter(server).collect();
    let entries: Vec<_> = server
        .get_resource::<RewindDebugLog>()
        .map(RewindDebugLog::entries)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.shooter.is_some_and(|s| players.contains(&s)))
        .collect();
    if let Some(mut debug) = world.get_resource_mut::<RewindDebug>() {
        debug.show_queries = show;
    }
    if let Some(log) = world.get_resource::<RewindDebugLog>() {
        log.clear();
        log.push(entries);
    }
    world.insert_non_send(hosted);
}

/// Starts `server` (from [`server_app`], with the game's plugins) listening on UDP `addr`,
/// sealing connect tokens with `key` (see [`crate::key`]), and runs it until the process is
/// asked to stop. Needs no display.
///
/// What an orchestrator needs of a match process:
/// - once the socket is bound it prints one line on stdout, `ready: serving udp ADDR` (the
///   bound address: with port 0, the port the system chose);
/// - on SIGTERM (or SIGINT, SIGHUP) it finishes the frame it is in, sends every connected
///   client netcode's disconnect, closes the socket and exits with code 0 (see
///   [`ServerStopPlugin`]); a second signal exits at once with code 130.
///
/// `multi_threaded` puts its systems on Bevy's multi-threaded executor (the server's
/// `--multi-threaded`); else they run one after another.
pub fn serve_udp(
    mut server: App,
    addr: SocketAddr,
    key: crate::key::ServerKey,
    multi_threaded: bool,
) -> AppExit {
    let source = key.source.to_string();
    let private_key = key.bytes;
    let request = StopRequest::default();
    stop_on_signals(&request);
    server
        .add_plugins(ServerStopPlugin {
            request,
            ..default()
        })
        .add_observer(announce_ready);
    server.add_systems(Startup, move |mut commands: Commands| {
        let netcode = commands
            .spawn((
                NetcodeServer::new(ServerNetcodeConfig {
                    protocol_id: PROTOCOL_ID,
                    private_key,
                    ..default()
                }),
                LocalAddr(addr),
                // Not lightyear's ServerUdpIo: its state per source address is unbounded.
                unlag::net::ServerUdpSocket::default(),
            ))
            .id();
        commands.trigger(Start { entity: netcode });
        info!("serving on udp {addr} (key: {source})");
    });
    // Both cores, but by default not Bevy's multi-threaded executor: on this repository's
    // 2-core machine it made every tick slower (`cargo bench --bench server_tick`, 256
    // players: 35.2 ms against 24.9 single-threaded; handing hundreds of small systems between
    // threads costs more than running them). The per-client work that is independent shares
    // itself out over the compute pool instead (lightyear's per-link systems,
    // `unlag::net::for_each_in_shares`; `server_app` gives the pool every core). `finish_app`
    // puts it on the single-threaded executor.
    finish_app(&mut server);
    if multi_threaded {
        unlag_testbed::run_multi_threaded(&mut server);
    }
    server.run()
}

/// The line [`serve_udp`] prints on stdout once its socket is bound (then the address).
pub const READY_LINE: &str = "ready: serving udp";

/// Prints [`READY_LINE`] and the bound address when a server's UDP socket is bound.
fn announce_ready(linked: On<Add, Linked>, servers: Query<&LocalAddr, With<ServerUdpSocket>>) {
    if let Ok(local) = servers.get(linked.entity) {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        // A closed stdout (an orchestrator that does not read it) is no reason to stop serving.
        let _ = writeln!(out, "{READY_LINE} {}", local.0);
        let _ = out.flush();
    }
}

/// Asks `request` on SIGTERM, SIGINT or SIGHUP; a second signal exits the process at once
/// (code 130). Logs a warning when this process already set a handler with `ctrlc` (only one
/// can be).
///
/// It replaces whatever the process inherited for those signals: a shell starts background
/// jobs with SIGINT ignored, and a server started from a script must still stop gracefully.
/// So `nohup` does not keep it alive when its terminal goes: run it under a supervisor.
pub fn stop_on_signals(request: &StopRequest) {
    let request = request.clone();
    let installed = ctrlc::set_handler(move || {
        if request.asked() {
            eprintln!("a second signal: exiting without waiting");
            std::process::exit(130);
        }
        request.ask();
    });
    if let Err(e) = installed {
        warn!("no graceful stop on SIGTERM: {e}");
    }
}

/// Makes `client` join the server at UDP `addr` when it starts, as client `id` (any number,
/// different for each client of one server), minting its connect token with the server's
/// `key`.
pub fn join_udp(client: &mut App, addr: SocketAddr, id: u64, key: &crate::key::ServerKey) {
    let private_key = key.bytes;
    client.add_systems(Startup, move |world: &mut World| {
        let local = SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 0);
        connect_client_with_key(
            world,
            (LocalAddr(local), PeerAddr(addr), UdpIo::default()),
            addr,
            id,
            private_key,
        );
        info!("joining udp {addr} as client {id}");
    });
}
