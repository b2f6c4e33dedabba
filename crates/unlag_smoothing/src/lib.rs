//! Simulated-proxy smoothing (seeds 001, 002): on a client, every replicated entity it does not
//! control moves smoothly between the sparse states the server sends, rendered at the client's
//! view time.
//!
//! See [`ProxySmoothingPlugin`]. The data flow:
//!
//! 1. **Server, `FixedPostUpdate`**: every entity with [`SmoothedProxy`] is sampled after the
//!    tick (position, rotation, velocity from the last tick's motion, [`ProxyFlags`], teleport
//!    when it jumped farther than the teleport distance or was marked [`Teleported`]). Entities
//!    whose [`NetUpdateFrequency`] says they are due go out in one [`ProxyUpdates`] message per
//!    client, skipping the entity the client controls and those its [`ProxyInterest`] leaves
//!    out (interest management, [`InterestSettings`]: by distance and sight by default; a
//!    proxy that stops being sent is announced once in a [`ProxyDormancy`], and its first
//!    state after that is flagged a teleport). A proxy sent at 10 Hz or slower is also sent a
//!    state between its grid's where the curve through its states would stray from its track
//!    ([`SmoothingSettings::off_grid_error`], [`StatesKind::OffGrid`]): where it started,
//!    stopped, turned or jumped. A server with more proxies than a tick's share
//!    ([`SmoothingSettings::spread_above`]) puts the later ones on the next ticks of their
//!    interval, so that its state sends spread over the ticks.
//! 2. **Client, `PreUpdate`**: states are checked and buffered per proxy ([`ProxySmoothing`]);
//!    a proxy announced dormant gets [`ProxyDormant`] and is not drawn until its next state.
//! 3. **Client, `PostUpdate`**: each proxy is placed at its view time with its
//!    [`SmoothingMode`]: [`NetClock::present`](unlag_net::NetClock::present) (the newest
//!    receivable server time, about `server_time − one_way`) `− delay`, where the delay (see
//!    [`unlag_net::NetClock`]) follows *that proxy's* update interval, so a 1 Hz proxy waits a
//!    second and a 60 Hz one 17 ms (read from the gaps between its states on the grid: those
//!    off it tell no rate). [`RenderedPose`] records which two states and blend factor were
//!    used, so shots can tell the server exactly what was on screen.

mod client;
mod interest;
pub use interest::InterestSchedule;
mod protocol;
mod server;

pub use client::{ArrivalLateness, ProxySmoothing, SmoothingStats};

pub use protocol::{
    BASELINE_KEPT, DeltaProxyState, DeltaRotation, EncodedDeltas, EncodedStates, MAX_BASELINE_AGE,
    ProxyDormancy, ProxyRate, ProxyResync, ProxyUpdates, StatesKind, WireProxyState,
};
pub use server::{NetUpdateFrequency, OFF_GRID_MIN_GAP, OFF_GRID_MIN_INTERVAL, SmoothedProxy};
pub use unlag_net::Teleported;
// The view contract smoothing writes and the rewind reads lives in `unlag_net`; re-exported
// here under the names smoothing users know.
pub use unlag_core::{SampleKind, SmoothingMode, StateShown};
pub use unlag_net::{
    InterestPolicy, InterestSettings, InterestSystems, PairInterest, ProxyDormant, ProxyFlags,
    ProxyInterest, ProxySmoothingSystems, Relevance, RenderedPose, SENT_STATES_SECONDS, SentStates,
    ViewPoint,
};

use bevy::ecs::schedule::common_conditions::any_with_component;
use bevy::prelude::*;
use bevy::transform::TransformSystems;
use lightyear::prelude::server::Server;
use lightyear::prelude::*;
use unlag_net::{
    NetDirection, NetMessageAppExt, NetSystems, SettingsError, Validate, ValidatedSettingsAppExt,
};

/// Settings of [`ProxySmoothingPlugin`] (a resource).
#[derive(Resource, Clone, Debug, Reflect)]
pub struct SmoothingSettings {
    /// Mode of proxies that do not choose one (default Hermite).
    #[reflect(ignore)]
    pub default_mode: SmoothingMode,
    /// States kept per proxy (default 32).
    pub buffer_len: usize,
    /// Longest time a proxy is moved on past its newest state, seconds (default 0.25).
    pub max_extrapolation: f64,
    /// A jump between two ticks longer than this is a teleport, metres (default 3.84).
    pub teleport_distance: f32,
    /// Seconds over which `Extrapolate` blends to each new state, and the other modes ease
    /// back onto the curve after starved frames (default 0.1; slow proxies' eases take longer,
    /// [`unlag_core::ease_time`], and long offsets longer still, so that they move at most
    /// 1.5 times the proxy's speed: [`unlag_core::catch_up_time`]).
    pub extrapolation_smooth_time: f32,
    /// How each proxy's interpolation delay follows its own update interval, the jitter and
    /// the loss.
    #[reflect(ignore)]
    pub delay_policy: unlag_core::DelayPolicy,
    /// Server side: a client whose link loses proxy states in runs at least this likely
    /// (0–1: the chance that a lost state is followed by another, as the client reports it,
    /// [`unlag_net::RemoteClientClock::state_loss_runs`]) is sent, with each proxy's state, a
    /// copy of an older one: the one it will be drawing when the update arrives (its
    /// interpolation delay less the one-way trip back), so that a burst of losses leaves it
    /// the track through the gap rather than one curve across it (default 0.3: a lost state
    /// followed by another three times in ten or more, as bursts of four datagrams or longer
    /// at 20 Hz and 77 datagrams a second take them; losses that come alone read about the
    /// loss itself to the power of the datagrams per state, near 0; above 1, never). The
    /// copies cost about as many bytes as the states again, on those links only.
    pub trail_runs: f64,
    /// Server side: how far, metres, the curve a client draws through a slow proxy's states
    /// (one sent [`OFF_GRID_MIN_INTERVAL`] apart or further) may stray from the server's own
    /// track before the server sends a state between its grid's ([`StatesKind::OffGrid`]):
    /// the one of the tick before, where the motion bent (a start, a stop, a turn, a jump), so
    /// that a 1-Hz proxy that steps out from cover is drawn stepping out when it did, not
    /// eased out along a second-long curve through a standing state and a walking one
    /// (default 0.05; 0: never). Such states go only to clients the proxy is fully relevant
    /// to, at most one every [`OFF_GRID_MIN_GAP`], twice each (at once and with the repeat of
    /// the next state on the grid), and cost nothing while it moves steadily or stands.
    pub off_grid_error: f32,
    /// Server side: whether a proxy's state may go to a client as its difference from an
    /// older one the client acknowledged ([`DeltaProxyState`]: 11.7 bytes a state where a
    /// full one takes 16.5, random-walking bots at 20 Hz and 150 ms; default true). Off: every
    /// state in full, as before.
    pub delta_states: bool,
    /// Server side: how many proxies' states may leave in one tick of their grid before new
    /// proxies go on a later tick of their interval (a phase: [`unlag_core::spread_phase`]),
    /// so that a big server's state sends (and their encryption) spread over the ticks
    /// rather than all leaving in one tick of three at 20 Hz over 60-Hz ticks (default 96:
    /// about a datagram of delta states. At 256 players the server's tick that sent every
    /// state took about twice the mean, all its p99; below the share a match keeps one
    /// message of states a client per interval, as before. `usize::MAX`: every proxy on its
    /// rate's one grid). A proxy keeps the phase it is given the first tick the server
    /// samples it, whatever this becomes later.
    pub spread_above: usize,
}

impl Default for SmoothingSettings {
    fn default() -> Self {
        Self {
            default_mode: SmoothingMode::Hermite,
            buffer_len: 32,
            max_extrapolation: 0.25,
            teleport_distance: 3.84,
            extrapolation_smooth_time: 0.1,
            delay_policy: unlag_core::DelayPolicy::default(),
            trail_runs: 0.3,
            off_grid_error: 0.05,
            delta_states: true,
            spread_above: 96,
        }
    }
}

impl Validate for SmoothingSettings {
    fn validate(&self) -> Result<(), SettingsError> {
        let f = unlag_core::Fields::new("SmoothingSettings (proxies)");
        f.count("buffer_len", self.buffer_len as u64, 2, 1024)?;
        f.within("max_extrapolation", self.max_extrapolation, 0.0, 5.0, "s")?;
        let teleport = f64::from(self.teleport_distance);
        f.above("teleport_distance", teleport, 0.0, 1000.0, "m")?;
        let smooth = f64::from(self.extrapolation_smooth_time);
        f.within("extrapolation_smooth_time", smooth, 0.0, 5.0, "s")?;
        f.within("trail_runs", self.trail_runs, 0.0, 2.0, "")?;
        f.within(
            "off_grid_error",
            f64::from(self.off_grid_error),
            0.0,
            100.0,
            "m",
        )?;
        f.nested("delay_policy", &self.delay_policy)
    }
}

/// Runtime switch of the smoothing debug view: a ghost of each proxy's newest server state
/// beside the rendered proxy (drawn with gizmos when the `debug-draw` feature is on).
#[derive(Resource, Clone, Debug, Default, Reflect)]
#[reflect(Resource)]
pub struct SmoothingDebug {
    /// Whether ghosts are drawn.
    pub show_server_ghosts: bool,
}

/// The ghosts to draw this frame: each proxy's newest received state (position, rotation),
/// filled while [`SmoothingDebug::show_server_ghosts`] is on.
#[derive(Resource, Clone, Debug, Default)]
pub struct ServerGhosts(pub Vec<(Vec3, Quat)>);

fn collect_ghosts(
    debug: Res<SmoothingDebug>,
    mut ghosts: ResMut<ServerGhosts>,
    proxies: Query<&ProxySmoothing, Without<ProxyDormant>>,
) {
    ghosts.0.clear();
    if debug.show_server_ghosts {
        ghosts.0.extend(
            proxies
                .iter()
                .filter_map(|p| p.buffer.newest())
                .map(|s| (s.position, s.rotation)),
        );
    }
}

#[cfg(feature = "debug-draw")]
fn draw_ghosts(ghosts: Res<ServerGhosts>, mut gizmos: Gizmos) {
    for (position, rotation) in &ghosts.0 {
        let colour = bevy::color::palettes::css::AQUA;
        gizmos.sphere(
            Isometry3d::new(*position + Vec3::Y * 0.9, *rotation),
            0.4,
            colour,
        );
        gizmos.line(*position, *position + Vec3::Y * 1.8, colour);
    }
}

/// Smooths simulated proxies on clients and sends their states from the server. Add it on both
/// sides, after [`UnlagNetPlugin`](unlag_net::UnlagNetPlugin).
#[derive(Clone, Debug, Default)]
pub struct ProxySmoothingPlugin {
    /// The settings (inserted as a resource).
    pub settings: SmoothingSettings,
    /// Which proxies each client is sent, and how often (inserted as a resource; the server's
    /// counts).
    pub interest: InterestSettings,
}

impl Plugin for ProxySmoothingPlugin {
    fn build(&self, app: &mut App) {
        app.insert_validated(self.settings.clone())
            .insert_validated(self.interest.clone())
            .init_resource::<SmoothingStats>()
            .init_resource::<client::PendingResync>()
            .init_resource::<ArrivalLateness>()
            .init_resource::<SmoothingDebug>()
            .init_resource::<ServerGhosts>()
            .register_type::<(NetUpdateFrequency, ProxyFlags, RenderedPose)>()
            .register_type::<(InterestSettings, ViewPoint, ProxyDormant)>()
            .add_net_message_mapped_encoded::<ProxyUpdates>(
                NetDirection::ServerToClient,
                ProxyUpdates::write,
            )
            .add_net_message_mapped::<ProxyDormancy>(NetDirection::ServerToClient)
            .add_net_message::<ProxyResync>(NetDirection::ClientToServer)
            .configure_sets(
                PreUpdate,
                ProxySmoothingSystems::Receive
                    .after(MessageSystems::Receive)
                    .after(NetSystems::Clock),
            )
            .configure_sets(
                PostUpdate,
                ProxySmoothingSystems::Place.before(TransformSystems::Propagate),
            )
            .add_systems(
                FixedPostUpdate,
                (server::sample_proxies, server::send_due)
                    .chain()
                    .run_if(any_with_component::<Server>)
                    .in_set(ProxySmoothingSystems::Send),
            )
            .configure_sets(
                FixedPostUpdate,
                (InterestSystems::Sight, InterestSystems::Decide)
                    .chain()
                    .before(ProxySmoothingSystems::Send),
            )
            .add_systems(
                FixedPostUpdate,
                (
                    interest::ensure_interest.before(InterestSystems::Sight),
                    interest::decide_interest.in_set(InterestSystems::Decide),
                )
                    .run_if(any_with_component::<Server>),
            )
            .add_systems(
                RunFixedMainLoop,
                server::receive_resyncs
                    .run_if(any_with_component::<Server>)
                    .in_set(RunFixedMainLoopSystems::BeforeFixedMainLoop),
            )
            .add_systems(
                PostUpdate,
                client::send_resync
                    .run_if(any_with_component::<Client>)
                    .in_set(unlag_net::NetSystems::EveryPacket)
                    .in_set(ProxySmoothingSystems::Resync),
            )
            .add_systems(
                PreUpdate,
                (client::receive_dormancy, client::receive_states)
                    .chain()
                    .run_if(any_with_component::<Client>)
                    .in_set(ProxySmoothingSystems::Receive),
            )
            .add_systems(
                PostUpdate,
                (client::place_proxies, collect_ghosts)
                    .chain()
                    .run_if(any_with_component::<Client>)
                    .in_set(ProxySmoothingSystems::Place),
            )
            // What leaves this frame is stamped with the view on screen, the one drawn last
            // frame (shots are traced against it in `Update`): proxies move on after.
            .configure_sets(
                PostUpdate,
                ProxySmoothingSystems::Place.after(NetSystems::RideAlong),
            );
        #[cfg(feature = "debug-draw")]
        app.add_systems(
            PostUpdate,
            draw_ghosts
                .after(ProxySmoothingSystems::Place)
                .run_if(resource_exists::<bevy::gizmos::config::GizmoConfigStore>),
        );
    }
}
