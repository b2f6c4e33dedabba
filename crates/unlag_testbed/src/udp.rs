//! [`UdpSession`]: a server and N clients in one process over real UDP sockets on loopback, in
//! real time. The ping example runs on it, and tests use it to check that real-time runs
//! measure real time whatever clock the build compiled in.

use bevy::prelude::*;
use bevy::state::app::StatesPlugin;
use core::net::{Ipv4Addr, SocketAddr};
use core::time::Duration;
use lightyear::netcode::server_plugin::NetcodeConfig as ServerNetcodeConfig;
use lightyear::prelude::client::ClientPlugins;
use lightyear::prelude::server::{ClientOf, NetcodeServer, ServerPlugins, Start};
use lightyear::prelude::*;
use unlag_core::LinkConditions;
use unlag_net::{
    NetConditions, NetTimeSource, ServerStopPlugin, ServerUdpSocket, StopRequest, UdpServerLimits,
    UnlagNetPlugin, real_elapsed,
};

use crate::{NetApps, PRIVATE_KEY, PROTOCOL_ID};

/// How a [`UdpSession`] is set up.
#[derive(Clone, Debug)]
pub struct UdpSessionConfig {
    /// Number of client Apps.
    pub clients: usize,
    /// Network conditions every client simulates on its link (both directions).
    pub conditions: LinkConditions,
    /// Seed of the simulated randomness; client `i` uses `seed + i`.
    pub seed: u64,
    /// Simulation ticks per second.
    pub tick_rate_hz: f64,
    /// Frames per second the session is stepped at (it sleeps between frames).
    pub frame_rate_hz: f64,
    /// Seconds after which the server despawns a link that never connected.
    pub unconnected_link_timeout: f64,
    /// The server socket's limits on new links.
    pub udp_limits: UdpServerLimits,
    /// When set, the server App stops on this request as a dedicated server does on SIGTERM
    /// ([`ServerStopPlugin`]).
    pub stop: Option<StopRequest>,
}

impl Default for UdpSessionConfig {
    fn default() -> Self {
        Self {
            clients: 2,
            conditions: LinkConditions::default(),
            seed: 1,
            tick_rate_hz: 60.0,
            frame_rate_hz: 250.0,
            unconnected_link_timeout: 10.0,
            udp_limits: UdpServerLimits::default(),
            stop: None,
        }
    }
}

/// A server and N clients over real UDP sockets on `127.0.0.1`, stepped in real time.
pub struct UdpSession {
    apps: NetApps,
    server_addr: SocketAddr,
    frame: Duration,
    next_frame: Duration,
    /// The process to itself while it runs in real time (see `exclusive`).
    _turn: crate::exclusive::RealTimeTurn,
}

fn real_time_app() -> App {
    let mut app = App::new();
    app.add_plugins((MinimalPlugins, StatesPlugin));
    app
}

impl UdpSession {
    /// Binds the server on an ephemeral loopback port and starts connecting the clients.
    /// Panics if `config.conditions` are invalid. Waits for simulated [`Testbed`](crate::Testbed)s
    /// running in the same process to finish, and keeps new ones waiting while it lives, so
    /// that its real-time measurements have the cores to themselves.
    pub fn new(config: UdpSessionConfig) -> Self {
        let turn = crate::exclusive::RealTimeTurn::take();
        let tick = Duration::from_secs_f64(1.0 / config.tick_rate_hz);
        let net = UnlagNetPlugin {
            time_source: NetTimeSource::Real,
            unconnected_link_timeout: config.unconnected_link_timeout,
            ..default()
        };
        let mut server = real_time_app();
        server
            .add_plugins(ServerPlugins {
                tick_duration: tick,
            })
            .add_plugins(net.clone())
            .insert_resource(
                NetConditions::new(config.conditions, config.seed).expect("conditions"),
            );
        if let Some(request) = config.stop.clone() {
            server.add_plugins(ServerStopPlugin {
                request,
                ..default()
            });
        }
        crate::apps::finish_app(&mut server);
        let world = server.world_mut();
        let server_entity = world
            .spawn((
                NetcodeServer::new(ServerNetcodeConfig {
                    protocol_id: PROTOCOL_ID,
                    private_key: PRIVATE_KEY,
                    ..default()
                }),
                LocalAddr(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 0)),
                ServerUdpSocket::new(config.udp_limits.clone()),
            ))
            .id();
        world.trigger(Start {
            entity: server_entity,
        });
        world.flush();
        server.add_observer(|add: On<Add, LinkOf>, mut commands: Commands| {
            commands
                .entity(add.entity)
                .insert((ReplicationSender, ReplicationReceiver));
        });
        let server_addr = server
            .world()
            .get::<LocalAddr>(server_entity)
            .expect("server LocalAddr")
            .0;

        let mut clients = Vec::new();
        for i in 0..config.clients {
            let mut app = real_time_app();
            app.add_plugins(ClientPlugins {
                tick_duration: tick,
            })
            .add_plugins(net.clone())
            .insert_resource(
                NetConditions::new(config.conditions, config.seed + i as u64).expect("conditions"),
            );
            crate::apps::finish_app(&mut app);
            crate::apps::connect_client(
                app.world_mut(),
                (
                    LocalAddr(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 0)),
                    PeerAddr(server_addr),
                    UdpIo::default(),
                ),
                server_addr,
                i as u64 + 1,
            );
            clients.push(app);
        }
        Self {
            apps: NetApps {
                server,
                clients,
                server_busy: Duration::ZERO,
                client_every: 1,
                updates: 0,
                wires: Vec::new(),
            },
            server_addr,
            frame: Duration::from_secs_f64(1.0 / config.frame_rate_hz),
            next_frame: real_elapsed(),
            _turn: turn,
        }
    }

    /// The server's UDP address.
    pub fn server_addr(&self) -> SocketAddr {
        self.server_addr
    }

    /// The UDP addresses of the connected clients, as the server sees them.
    pub fn client_addrs(&mut self) -> Vec<SocketAddr> {
        let world = self.apps.server.world_mut();
        let mut q = world.query_filtered::<&PeerAddr, (With<ClientOf>, With<Connected>)>();
        q.iter(world).map(|a| a.0).collect()
    }

    /// Sleeps until the next frame is due, then updates the server and every client.
    pub fn step(&mut self) {
        let now = real_elapsed();
        if self.next_frame > now {
            std::thread::sleep(self.next_frame - now);
        }
        self.next_frame = self.next_frame.max(now) + self.frame;
        self.apps.update_all(real_elapsed());
    }

    /// Steps for `duration` of real time.
    pub fn run_for(&mut self, duration: Duration) {
        let end = real_elapsed() + duration;
        while real_elapsed() < end {
            self.step();
        }
    }

    /// Steps until `done` holds or `timeout` of real time has passed; returns whether it held.
    pub fn run_until(
        &mut self,
        timeout: Duration,
        mut done: impl FnMut(&UdpSession) -> bool,
    ) -> bool {
        let end = real_elapsed() + timeout;
        while real_elapsed() < end {
            self.step();
            if done(self) {
                return true;
            }
        }
        false
    }
}

impl core::ops::Deref for UdpSession {
    type Target = NetApps;
    fn deref(&self) -> &NetApps {
        &self.apps
    }
}

impl core::ops::DerefMut for UdpSession {
    fn deref_mut(&mut self) -> &mut NetApps {
        &mut self.apps
    }
}
