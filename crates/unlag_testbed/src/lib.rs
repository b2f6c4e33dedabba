//! An in-process server and N clients connected through lightyear (crossbeam transport, netcode,
//! simulated network conditions) and driven by a manual clock, so that a simulated minute runs in
//! a few wall seconds; plus [`UdpSession`], the same over real UDP sockets in real time.
//!
//! ```no_run
//! use core::time::Duration;
//! use unlag_testbed::{Testbed, TestbedConfig};
//!
//! let mut testbed = Testbed::new(TestbedConfig { clients: 2, ..Default::default() });
//! // testbed.add_plugins(MyGamePlugin); // to the server and every client
//! assert!(testbed.run_until(Duration::from_secs(3), |tb| tb.all_synced()));
//! testbed.run_for(Duration::from_secs(10));
//! println!("{:?}", testbed.measures(0));
//! ```
//!
//! # Repeatability
//!
//! The clock, the frame schedule and the simulated losses and delays (seeded by
//! [`TestbedConfig::seed`]) are the same from run to run. What is not: netcode's connect tokens
//! carry the wall-clock time and random nonces, and Bevy may run systems of one schedule in a
//! different order on several threads, so runs agree closely but not bit for bit.

mod apps;
mod exclusive;
mod measure;
mod pace;
mod physics;
mod udp;
mod wire;

pub use apps::{
    NetApps, connect_client, connect_client_with_key, finish_app, link_crossbeam,
    run_multi_threaded, run_single_threaded, server_task_pools, start_crossbeam_server,
};
pub use exclusive::RealTimeTurn;
pub use physics::RapierFixedPlugin;

pub use measure::{ClientMeasures, KindRate};
pub use pace::{ClientPace, MAX_CLIENT_FPS, MIN_CLIENT_FPS};
pub use udp::{UdpSession, UdpSessionConfig};

use bevy::app::Plugins;
use bevy::prelude::*;
use bevy::state::app::StatesPlugin;
use bevy::time::TimeUpdateStrategy;
use core::net::{Ipv4Addr, SocketAddr};
use core::time::Duration;
use lightyear::prelude::client::ClientPlugins;
use lightyear::prelude::server::ServerPlugins;
use unlag_core::{ConditionsError, LinkConditions};
use unlag_net::{NetConditions, NetTimeSource, UnlagNetPlugin};

/// Protocol id of testbed connections.
pub const PROTOCOL_ID: u64 = 0x0075_6E6C_6167; // "unlag"
/// Private key of testbed connections (tests only: real games keep theirs secret).
pub const PRIVATE_KEY: [u8; 32] = [7; 32];
/// Seconds without a packet after which either end drops a connection (netcode's timeout, in
/// each connect token; the testbed's clients and the shooter's use it). lightyear's default
/// is 3: a link losing 20 % of its packets in bursts of 10, from a 10-fps client with hitches,
/// went that long without a packet through and dropped a player (the report's grid, seed 3),
/// where the game itself rides the silence out (the server guesses the player's track, the
/// client predicts). Source's `cl_timeout` is 30.
pub const CLIENT_TIMEOUT_SECS: i32 = 10;

/// How a [`Testbed`] is set up.
#[derive(Clone, Debug)]
pub struct TestbedConfig {
    /// Number of client Apps.
    pub clients: usize,
    /// Network conditions every client simulates on its link (both directions), and the server's
    /// default proxy update rate.
    pub conditions: LinkConditions,
    /// Seed of the simulated randomness; client `i` uses `seed + i`.
    pub seed: u64,
    /// Mean length of a burst of losses, packets (1: independent losses; see
    /// [`NetConditions::with_burst`]).
    pub loss_burst: f32,
    /// Simulation ticks per second on every App (`FixedUpdate`).
    pub tick_rate_hz: f64,
    /// Frames per second of the manual clock. Higher than the tick rate so that packets are
    /// handled close to when they are due: simulated delays are rounded to the nearest frame,
    /// and the shortest possible round trip is one frame (4 ms at the default 240 Hz), since
    /// the server answers at the frame after the client asked.
    pub frame_rate_hz: f64,
    /// The clients update once every this many server frames (default 1), each update covering
    /// as many frames: clients at a lower frame rate than their server (a game at 20 fps on a
    /// 240-Hz server is 12). Ignored when [`TestbedConfig::client_pace`] is set.
    pub client_frame_every: u32,
    /// Each client's own frame rate, frame-time variation and hitches (`None`, the default:
    /// clients step with the server, once every [`TestbedConfig::client_frame_every`] frames).
    /// Client `i`'s frames are drawn from `seed + 1000 + i`, so they differ between clients
    /// and repeat between runs.
    pub client_pace: Option<ClientPace>,
    /// A listen server (default false: a dedicated one): the server steps inside client 0's
    /// App, right before it in each of its frames and for as long, as a game hosting its own
    /// server does; a slow host's server is as slow as its frames.
    pub listen: bool,
}

impl Default for TestbedConfig {
    fn default() -> Self {
        Self {
            clients: 1,
            conditions: LinkConditions::default(),
            seed: 1,
            loss_burst: 1.0,
            tick_rate_hz: 60.0,
            frame_rate_hz: 240.0,
            client_frame_every: 1,
            client_pace: None,
            listen: false,
        }
    }
}

/// One server App and N client Apps in one process (see the crate docs).
pub struct Testbed {
    config: TestbedConfig,
    apps: NetApps,
    server_entity: Option<Entity>,
    client_entities: Vec<Entity>,
    server_links: Vec<Entity>,
    now: Duration,
    frame: Duration,
    measures: Vec<measure::Recorder>,
    /// With paced clients or a listen server: each client's frame clock (see
    /// [`TestbedConfig::client_pace`]).
    clocks: Vec<pace::FrameClock>,
    /// Frames each client has run.
    client_frames: Vec<u64>,
    /// Whether the server App runs Bevy's multi-threaded executor (see
    /// [`Testbed::run_server_multi_threaded`]).
    server_multi_threaded: bool,
    /// Whether the client Apps do (see [`Testbed::run_clients_multi_threaded`]).
    clients_multi_threaded: bool,
    /// Keeps real-time sessions from running beside this simulation (see `exclusive`).
    _turn: exclusive::SimulationTurn,
}

fn base_app(frame: Duration) -> App {
    let mut app = App::new();
    app.add_plugins((MinimalPlugins.set(server_task_pools()), StatesPlugin))
        .insert_resource(TimeUpdateStrategy::ManualDuration(frame));
    app
}

impl Testbed {
    /// Builds the Apps with lightyear and [`UnlagNetPlugin`]; add game plugins with
    /// [`Testbed::add_plugins`], then step. Panics if `config.conditions` or
    /// `config.client_pace` are invalid.
    pub fn new(config: TestbedConfig) -> Self {
        config
            .conditions
            .validate()
            .expect("TestbedConfig::conditions");
        if let Some(pace) = &config.client_pace
            && let Err(e) = pace.validate()
        {
            panic!("TestbedConfig::client_pace: {e}");
        }
        let tick = Duration::from_secs_f64(1.0 / config.tick_rate_hz);
        let frame = Duration::from_secs_f64(1.0 / config.frame_rate_hz);
        let net = UnlagNetPlugin {
            time_source: NetTimeSource::Manual,
            ..default()
        };
        let mut server = base_app(frame);
        server
            .add_plugins(ServerPlugins {
                tick_duration: tick,
            })
            .add_plugins(net.clone())
            .insert_resource(NetConditions::new(config.conditions, config.seed).unwrap());
        let every = config.client_frame_every.max(1);
        // Paced clients (or a listen host) run on their own frame clocks.
        let pace = config.client_pace.or_else(|| {
            config
                .listen
                .then(|| ClientPace::steady(config.frame_rate_hz / f64::from(every)))
        });
        let clocks: Vec<pace::FrameClock> = pace
            .map(|pace| {
                (0..config.clients)
                    .map(|i| pace::FrameClock::new(pace, config.seed + 1000 + i as u64))
                    .collect()
            })
            .unwrap_or_default();
        let clients = (0..config.clients)
            .map(|i| {
                let mut app = base_app(frame * every);
                app.add_plugins(ClientPlugins {
                    tick_duration: tick,
                })
                .add_plugins(net.clone())
                .insert_resource(
                    NetConditions::new(config.conditions, config.seed + i as u64)
                        .and_then(|c| c.with_burst(config.loss_burst))
                        .expect("valid testbed conditions")
                        .shaped_by_transport(),
                );
                app
            })
            .collect();
        Self {
            _turn: exclusive::SimulationTurn::take(),
            measures: vec![measure::Recorder::default(); config.clients],
            clocks,
            client_frames: vec![0; config.clients],
            server_multi_threaded: false,
            clients_multi_threaded: false,
            config,
            apps: NetApps {
                server,
                clients,
                server_busy: Duration::ZERO,
                client_every: u64::from(every),
                updates: 0,
                wires: Vec::new(),
            },
            server_entity: None,
            client_entities: Vec::new(),
            server_links: Vec::new(),
            now: Duration::ZERO,
            frame,
        }
    }

    /// Adds `plugins` to the server and every client, as a game adds the same plugins on both
    /// sides. Must be called before the first step.
    pub fn add_plugins<M>(&mut self, plugins: impl Plugins<M> + Clone) -> &mut Self {
        assert!(self.server_entity.is_none(), "add plugins before stepping");
        self.apps.server.add_plugins(plugins.clone());
        for app in &mut self.apps.clients {
            app.add_plugins(plugins.clone());
        }
        self
    }

    /// The [`TestbedConfig`] given to [`Testbed::new`], unchanged: conditions set later with
    /// [`Testbed::set_conditions`] or [`Testbed::set_client_conditions`] are not in it.
    pub fn config(&self) -> &TestbedConfig {
        &self.config
    }

    /// Simulated time since the start.
    pub fn now(&self) -> Duration {
        self.now
    }

    /// Duration of one frame.
    pub fn frame(&self) -> Duration {
        self.frame
    }

    /// Client `i`'s link entity (in its World), once started.
    pub fn client_entity(&self, i: usize) -> Option<Entity> {
        self.client_entities.get(i).copied()
    }

    /// Datagrams the simulated network lost between the server and client `i` so far: (client
    /// to server, server to client).
    pub fn lost(&self, i: usize) -> (u64, u64) {
        self.apps.wires.get(i).map_or((0, 0), wire::Wire::lost)
    }

    /// How long client `i`'s datagrams sent after `after` (testbed time) were lost in a row
    /// on the simulated network: from the first of them sent to the first that got through
    /// (zero when the first got through). What a move made then waited, beyond its trip, before
    /// the server could have it. `None` while none got through, or when `after` is older than
    /// the 4096 datagrams the client's direction keeps.
    pub fn loss_hold(&self, i: usize, after: Duration) -> Option<Duration> {
        self.apps
            .wires
            .get(i)?
            .loss_hold(after.as_secs_f64())
            .map(Duration::from_secs_f64)
    }

    /// The server's link entity for client `i` (in the server's World), once started.
    pub fn server_link(&self, i: usize) -> Option<Entity> {
        self.server_links.get(i).copied()
    }

    /// Changes the conditions of every client (and the server's update rate) at runtime; invalid
    /// conditions change nothing.
    pub fn set_conditions(&mut self, conditions: LinkConditions) -> Result<(), ConditionsError> {
        conditions.validate()?;
        self.apps
            .server
            .world_mut()
            .resource_mut::<NetConditions>()
            .set(conditions)?;
        for i in 0..self.apps.clients.len() {
            self.set_client_conditions(i, conditions)?;
        }
        Ok(())
    }

    /// Changes client `i`'s conditions at runtime; invalid conditions change nothing.
    pub fn set_client_conditions(
        &mut self,
        i: usize,
        conditions: LinkConditions,
    ) -> Result<(), ConditionsError> {
        self.apps.clients[i]
            .world_mut()
            .resource_mut::<NetConditions>()
            .set(conditions)
    }

    /// Gives the server-to-client direction of client `i`'s link `down` instead of the
    /// client's own conditions, from the next frame on (a link lost one way only); `None`
    /// goes back to the client's conditions. Nothing for a client not started yet.
    pub fn set_client_downlink(&mut self, i: usize, down: Option<LinkConditions>) {
        let down = down.map(|c| {
            NetConditions::new(c, 0)
                .map(|n| n.each_way())
                .unwrap_or_default()
        });
        if let Some(wire) = self.apps.wires.get_mut(i) {
            wire.override_down(down);
        }
    }

    /// Runs the server App on Bevy's multi-threaded executor ([`run_multi_threaded`]), as
    /// `server --multi-threaded` does; the clients stay on the single-threaded one unless
    /// [`Testbed::run_clients_multi_threaded`]. Takes effect at the first step (the Apps'
    /// systems all in by then).
    pub fn run_server_multi_threaded(&mut self) {
        self.server_multi_threaded = true;
    }

    /// Runs every client App on Bevy's multi-threaded executor ([`run_multi_threaded`]), as a
    /// game built with Bevy's default features does. Takes effect at the first step.
    pub fn run_clients_multi_threaded(&mut self) {
        self.clients_multi_threaded = true;
    }

    fn start(&mut self) {
        self.apps.finish_all();
        // (Finished on the single-threaded executor.)
        if self.server_multi_threaded {
            run_multi_threaded(&mut self.apps.server);
        }
        if self.clients_multi_threaded {
            for client in &mut self.apps.clients {
                run_multi_threaded(client);
            }
        }
        let server_addr = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 5000);
        let server = apps::start_crossbeam_server(self.apps.server.world_mut());
        self.server_entity = Some(server);
        for (i, client) in self.apps.clients.iter_mut().enumerate() {
            let seed = client.world().resource::<NetConditions>().seed();
            let (wire, client_io, server_io) =
                wire::Wire::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            self.apps.wires.push(wire);
            let link =
                apps::link_transport(self.apps.server.world_mut(), server, i as u16, server_io);
            self.server_links.push(link);
            let entity =
                apps::connect_client(client.world_mut(), client_io, server_addr, i as u64 + 1);
            self.client_entities.push(entity);
        }
    }

    /// Advances time by one of the server's frames ([`Testbed::frame`]): the server runs its
    /// frame, then the clients in order. With paced clients
    /// ([`TestbedConfig::client_pace`]) or a listen server, every App runs the frames that fall
    /// in that span instead, in time order (the server first at equal times; a listen server
    /// right before client 0), each at its own time and for its own length.
    pub fn step(&mut self) {
        if self.server_entity.is_none() {
            self.start();
        }
        // The clients' conditions (a panel or a test may change them at any time) shape the
        // datagrams sent from now on.
        for (client, wire) in self.apps.clients.iter().zip(&mut self.apps.wires) {
            wire.set_conditions(client.world().resource::<NetConditions>().each_way());
        }
        let from = self.now;
        self.now += self.frame;
        if self.clocks.is_empty() {
            let updates = self.apps.updates;
            self.apps.update_all(self.now);
            let every = self.apps.client_every.max(1);
            if updates.is_multiple_of(every) {
                for i in 0..self.client_frames.len() {
                    self.drew_frame(i);
                }
            }
            return;
        }
        self.step_paced(from);
    }

    /// [`Testbed::step`] with paced clients: every frame due by `self.now`, in time order.
    fn step_paced(&mut self, from: Duration) {
        let mut server_due = !self.config.listen;
        loop {
            // The earliest client frame due in this span (the lowest index at equal times).
            let client = (0..self.clocks.len())
                .filter(|&i| self.clocks[i].next <= self.now)
                .min_by_key(|&i| (self.clocks[i].next, i));
            // A dedicated server runs its frame at the span's end, before clients due then.
            if server_due && client.is_none_or(|i| self.clocks[i].next >= self.now) {
                server_due = false;
                self.apps.update_server_at(self.now, self.now - from);
                continue;
            }
            let Some(i) = client else {
                break;
            };
            let (at, delta) = self.clocks[i].tick();
            if self.config.listen && i == 0 {
                self.apps.update_server_at(at, delta);
            }
            self.apps.update_client_at(i, at, delta);
            self.drew_frame(i);
        }
    }

    /// Client `i` has just run a frame: its measures sample what it shows, and it counts.
    fn drew_frame(&mut self, i: usize) {
        let true_server_time = measure::server_time(self.apps.server.world());
        self.measures[i].sample(self.apps.clients[i].world(), true_server_time);
        self.client_frames[i] += 1;
    }

    /// Frames client `i` has run so far: a measure that samples what a client shows can
    /// sample once per frame it drew (with paced clients, a step may run none or several).
    pub fn client_frames(&self, i: usize) -> u64 {
        self.client_frames[i]
    }

    /// Steps until `duration` of simulated time has passed.
    pub fn run_for(&mut self, duration: Duration) {
        let end = self.now + duration;
        while self.now < end {
            self.step();
        }
    }

    /// Steps until `done` holds (checked after each frame) or `timeout` of simulated time has
    /// passed; returns whether `done` held.
    pub fn run_until(&mut self, timeout: Duration, mut done: impl FnMut(&Testbed) -> bool) -> bool {
        let end = self.now + timeout;
        while self.now < end {
            self.step();
            if done(self) {
                return true;
            }
        }
        false
    }

    /// Forgets what was measured so far: the next [`Testbed::measures`] covers only what
    /// happens from now on.
    pub fn reset_measures(&mut self) {
        for (i, recorder) in self.measures.iter_mut().enumerate() {
            let client = self.apps.clients[i].world();
            let server_link = self.server_links.get(i).copied();
            recorder.reset(
                self.now,
                client,
                server_link.map(|e| (self.apps.server.world(), e)),
            );
        }
    }

    /// What was measured for client `i` since the start or the last
    /// [`Testbed::reset_measures`].
    pub fn measures(&self, i: usize) -> ClientMeasures {
        let server_link = self.server_links.get(i).copied();
        self.measures[i].report(
            self.now,
            self.apps.clients[i].world(),
            server_link.map(|e| (self.apps.server.world(), e)),
        )
    }
}

impl core::ops::Deref for Testbed {
    type Target = NetApps;
    fn deref(&self) -> &NetApps {
        &self.apps
    }
}

impl core::ops::DerefMut for Testbed {
    fn deref_mut(&mut self) -> &mut NetApps {
        &mut self.apps
    }
}
