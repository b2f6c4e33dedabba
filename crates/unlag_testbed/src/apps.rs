//! [`NetApps`]: a server App and its client Apps, stepped together under one clock value.

use bevy::app::PluginsState;
use bevy::prelude::*;
use bevy::time::TimeUpdateStrategy;
use core::net::{Ipv4Addr, SocketAddr};
use core::time::Duration;
use lightyear::crossbeam::CrossbeamIo;
use lightyear::netcode::client_plugin::NetcodeConfig as ClientNetcodeConfig;
use lightyear::netcode::server_plugin::NetcodeConfig as ServerNetcodeConfig;
use lightyear::prelude::client::NetcodeClient;
use lightyear::prelude::server::{NetcodeServer, Start};
use lightyear::prelude::*;
use unlag_net::{NetClock, with_net_clock_at};

use crate::{CLIENT_TIMEOUT_SECS, PRIVATE_KEY, PROTOCOL_ID};

/// A server App and N client Apps in one process: what [`Testbed`](crate::Testbed) and
/// [`UdpSession`](crate::UdpSession) share (both dereference to it).
pub struct NetApps {
    pub(crate) server: App,
    pub(crate) clients: Vec<App>,
    /// Wall-clock time spent updating the server App so far.
    pub(crate) server_busy: Duration,
    /// The clients update once every this many server updates.
    pub(crate) client_every: u64,
    /// Server updates so far.
    pub(crate) updates: u64,
    /// The simulated network to each client, when the testbed carries the datagrams (none
    /// between real sockets).
    pub(crate) wires: Vec<crate::wire::Wire>,
}

impl NetApps {
    /// The server App.
    pub fn server(&mut self) -> &mut App {
        &mut self.server
    }

    /// The server's World.
    pub fn server_world(&self) -> &World {
        self.server.world()
    }

    /// The server's World, mutably.
    pub fn server_world_mut(&mut self) -> &mut World {
        self.server.world_mut()
    }

    /// Client App `i`.
    pub fn client(&mut self, i: usize) -> &mut App {
        &mut self.clients[i]
    }

    /// Client `i`'s World.
    pub fn client_world(&self, i: usize) -> &World {
        self.clients[i].world()
    }

    /// Client `i`'s World, mutably.
    pub fn client_world_mut(&mut self, i: usize) -> &mut World {
        self.clients[i].world_mut()
    }

    /// Number of clients.
    pub fn client_count(&self) -> usize {
        self.clients.len()
    }

    /// Client `i`'s [`NetClock`].
    pub fn client_clock(&self, i: usize) -> &NetClock {
        self.clients[i].world().resource::<NetClock>()
    }

    /// Whether every client is connected and has a server-time estimate.
    pub fn all_synced(&self) -> bool {
        (0..self.clients.len()).all(|i| self.client_clock(i).synced)
    }

    /// The server's time now, seconds: its last simulated tick plus the overstep towards the
    /// next.
    pub fn server_time(&self) -> f64 {
        crate::measure::server_time(self.server.world())
    }

    /// Wall-clock time spent in the server App's updates since the Apps were built (this
    /// machine, this build): what a server process would spend, the clients' work apart.
    pub fn server_update_time(&self) -> Duration {
        self.server_busy
    }

    /// Finishes building every App (as `App::run` would) so they can be updated by hand.
    pub(crate) fn finish_all(&mut self) {
        for app in std::iter::once(&mut self.server).chain(self.clients.iter_mut()) {
            finish_app(app);
        }
    }

    /// Updates the server, then every client in order (on their frames: see
    /// `TestbedConfig::client_frame_every`), with lightyear's clock at `now`.
    pub(crate) fn update_all(&mut self, now: Duration) {
        let (server, clients, busy) = (&mut self.server, &mut self.clients, &mut self.server_busy);
        let clients_too = self.updates.is_multiple_of(self.client_every.max(1));
        self.updates += 1;
        let wires = &mut self.wires;
        let at = now.as_secs_f64();
        with_net_clock_at(now, || {
            wires.iter_mut().for_each(|w| w.deliver_to_server(at));
            let started = std::time::Instant::now();
            server.update();
            *busy += started.elapsed();
            wires.iter_mut().for_each(|w| w.collect_from_server(at));
            if clients_too {
                for (i, client) in clients.iter_mut().enumerate() {
                    if let Some(wire) = wires.get_mut(i) {
                        wire.deliver_to_client(at);
                    }
                    client.update();
                    if let Some(wire) = wires.get_mut(i) {
                        wire.collect_from_client(at);
                    }
                }
            }
        });
    }
}

impl NetApps {
    /// Updates the server alone at time `now`, its frame `delta` long (a paced testbed's
    /// dedicated server, or a listen server stepped in its host's frame).
    pub(crate) fn update_server_at(&mut self, now: Duration, delta: Duration) {
        let (server, busy) = (&mut self.server, &mut self.server_busy);
        server.insert_resource(TimeUpdateStrategy::ManualDuration(delta));
        let wires = &mut self.wires;
        let at = now.as_secs_f64();
        with_net_clock_at(now, || {
            wires.iter_mut().for_each(|w| w.deliver_to_server(at));
            let started = std::time::Instant::now();
            server.update();
            *busy += started.elapsed();
            wires.iter_mut().for_each(|w| w.collect_from_server(at));
        });
    }

    /// Updates client `i` alone at time `now`, its frame `delta` long.
    pub(crate) fn update_client_at(&mut self, i: usize, now: Duration, delta: Duration) {
        let client = &mut self.clients[i];
        client.insert_resource(TimeUpdateStrategy::ManualDuration(delta));
        let mut wire = self.wires.get_mut(i);
        let at = now.as_secs_f64();
        with_net_clock_at(now, || {
            if let Some(wire) = &mut wire {
                wire.deliver_to_client(at);
            }
            client.update();
            if let Some(wire) = &mut wire {
                wire.collect_from_client(at);
            }
        });
    }
}

/// Finishes building `app` (as `App::run` would) so it can be updated by hand, its schedules
/// on the single-threaded executor ([`run_single_threaded`]).
pub fn finish_app(app: &mut App) {
    while app.plugins_state() == PluginsState::Adding {
        bevy::tasks::tick_global_task_pools_on_main_thread();
    }
    app.finish();
    app.cleanup();
    run_single_threaded(app);
}

/// Bevy's task pools as a server wants them: the compute pool (systems under the
/// multi-threaded executor, shares of per-client work) on every core. Bevy's default keeps a
/// quarter of the cores for IO and another for async tasks, which leaves a 2-core machine one
/// compute thread; a headless server hardly uses either. The pools are the process's: the
/// first App built sets them.
pub fn server_task_pools() -> bevy::app::TaskPoolPlugin {
    let mut options = bevy::app::TaskPoolOptions::default();
    options.compute.min_threads = bevy::tasks::available_parallelism();
    bevy::app::TaskPoolPlugin {
        task_pool_options: options,
    }
}

/// Switches every schedule of `app` to Bevy's multi-threaded executor: systems whose data do
/// not overlap run at once on the compute task pool's threads. Call it once the App's plugins
/// and systems are in: a schedule created after it keeps the default executor.
///
/// The report (`--multi-threaded`) and the server-tick bench use it; a match's results are
/// bit-identical to a single-threaded run
/// (`report::a_multi_threaded_server_plays_the_same_match_to_the_bit`). On a 2-core machine it
/// costs more than it saves (the bench's rows side by side); the plugins' per-client work
/// shares itself out over the pool under either executor (`unlag::net::for_each_in_shares`).
pub fn run_multi_threaded(app: &mut App) {
    set_every_executor(app, bevy::ecs::schedule::MultiThreadedExecutor::new);
}

/// Switches every schedule of `app` to Bevy's single-threaded executor: systems one after
/// another, in the order the schedule's graph gives, on the thread that updates the App (the
/// default executor is the multi-threaded one, this crate turning on the ECS's
/// `multi_threaded`). Queries iterated in parallel inside a system still use the pool. Call it
/// once the App's plugins and systems are in, as [`run_multi_threaded`].
///
/// Every testbed App runs this way (a match repeats to the bit), and so do the examples'
/// servers: on a 2-core machine it was faster for a server (`cargo bench --bench server_tick`).
pub fn run_single_threaded(app: &mut App) {
    set_every_executor(app, bevy::ecs::schedule::SingleThreadedExecutor::new);
}

/// Gives every schedule of `app` an executor of its own from `new`.
fn set_every_executor<E: bevy::ecs::schedule::SystemExecutor + 'static>(
    app: &mut App,
    new: fn() -> E,
) {
    let mut schedules = app.world_mut().resource_mut::<Schedules>();
    for (_, schedule) in schedules.iter_mut() {
        schedule.set_executor(new());
    }
}

/// Spawns client number `client_id` in `world` (a client App's), over `transport`, and starts connecting it to
/// the netcode server at `server_addr` (with this crate's [`PROTOCOL_ID`], [`PRIVATE_KEY`] and
/// [`CLIENT_TIMEOUT_SECS`]). Returns the client's link entity.
pub fn connect_client(
    world: &mut World,
    transport: impl Bundle,
    server_addr: SocketAddr,
    client_id: u64,
) -> Entity {
    connect_client_with_key(world, transport, server_addr, client_id, PRIVATE_KEY)
}

/// [`connect_client`] minting its connect token with `private_key` (the server's own key)
/// instead of the testbed's.
pub fn connect_client_with_key(
    world: &mut World,
    transport: impl Bundle,
    server_addr: SocketAddr,
    client_id: u64,
    private_key: [u8; 32],
) -> Entity {
    let auth = Authentication::Manual {
        server_addr,
        client_id,
        private_key,
        protocol_id: PROTOCOL_ID,
    };
    let entity = world
        .spawn((
            Client,
            transport,
            ReplicationSender,
            ReplicationReceiver,
            NetcodeClient::new(
                auth,
                ClientNetcodeConfig {
                    client_timeout_secs: CLIENT_TIMEOUT_SECS,
                    ..default()
                },
            )
            .expect("netcode client"),
        ))
        .id();
    world.trigger(Connect { entity });
    world.flush();
    entity
}

/// Spawns and starts a netcode server for crossbeam links in `world` (a server App's, finished):
/// this crate's [`PROTOCOL_ID`] and [`PRIVATE_KEY`], no address check (crossbeam links have
/// none). Returns the server entity; add clients with [`link_crossbeam`].
pub fn start_crossbeam_server(world: &mut World) -> Entity {
    let server = world
        .spawn(NetcodeServer::new(ServerNetcodeConfig {
            protocol_id: PROTOCOL_ID,
            private_key: PRIVATE_KEY,
            server_addr_check: false,
            ..default()
        }))
        .id();
    world.trigger(Start { entity: server });
    world.flush();
    server
}

/// Opens a crossbeam link number `index` on `server` (from [`start_crossbeam_server`]) in the
/// server's `world`: returns the link entity and the client's end of the pair, for
/// [`connect_client`].
pub fn link_crossbeam(world: &mut World, server: Entity, index: u16) -> (Entity, CrossbeamIo) {
    let (client_io, server_io) = CrossbeamIo::new_pair();
    (link_transport(world, server, index, server_io), client_io)
}

/// Spawns the server's link for client `index` on the server's side of `server_io`; returns
/// the link entity.
pub(crate) fn link_transport(
    world: &mut World,
    server: Entity,
    index: u16,
    server_io: CrossbeamIo,
) -> Entity {
    let link = world
        .spawn((
            LinkOf { server },
            Link::default(),
            PeerAddr(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 6000 + index)),
            server_io,
            ReplicationSender,
            ReplicationReceiver,
        ))
        .id();
    world.trigger(LinkStart { entity: link });
    world.flush();
    link
}
