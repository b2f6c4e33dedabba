//! The lightyear glue of `unlag`: channels and message registration, [`NetClock`], roles,
//! [`NetConditions`], traffic counting and the ping monitor.
//!
//! See [`UnlagNetPlugin`]. Add lightyear's `ClientPlugins` or `ServerPlugins` first, then this
//! plugin, then the other `unlag` plugins, in the same order on client and server.

mod acks;
mod clock;
mod conditions;
mod encoded;
mod guard;
mod interest;
mod link;
mod pacing;
mod ping;
mod protocol;
mod roles;
mod settings;
mod shutdown;
mod time_source;
mod udp;
mod view;
mod warn;
pub mod wire_entity;
mod work;

#[doc(hidden)]
pub use bevy::log as __log;

pub use acks::{ACK_ONLY_PACKET, ClientAckLedger, ServerAckLedger, header_acks, sent_packet_id};
#[cfg(feature = "cheats")]
pub use clock::NetCheats;
pub use clock::{
    BEAT_INTERVAL, BeatEcho, DelayReport, EchoRefusal, FRESH_TRIP_SPAN, FRESH_TRIPS_KEPT,
    MAX_CLIENT_FRAME, MAX_ECHO_HOLD_US, MAX_FRAME_SLACK, MAX_PROVEN_CLIENT_FRAME, MAX_REPORT_RATE,
    MAX_REPORTED_DELAY, MIN_ACKS, MIN_ECHOES, MIN_REPORT_GAP, MIN_VIEW_LAG_SAMPLES, NetBeat,
    NetClock, PLAUSIBLE_DELAY_DECAY, PLAUSIBLE_DELAY_SLACK, RECENT_RTT_SPAN, REPORT_ALONE_AFTER,
    REPORT_BURST, REPORT_INTERVAL, RemoteClientClock, RemoteClockAt, ReportContext, ReportRefusal,
    ReportState, UNSEEN_TAIL_STEPS, VIEW_LAG_CENTER_SLACK, VIEW_LAG_JITTER_FACTOR, VIEW_LAG_MEMORY,
    VIEW_LAG_SLACK, VIEW_LAG_WINDOW, VIEW_TIME_WRAP, claim_delay_cap, delay_shortfall,
    plausible_delay, report_micros, server_time_now, server_time_of_world, unwrap_view_time,
};
pub use conditions::NetConditions;
pub use encoded::EncodedRuns;
pub use guard::{
    PacketGuardSettings, PacketMessage, PacketRefusal, PacketRefusals, ReliableWindows,
    channel_net_id, message_body_bytes, message_bytes, read_client_packet,
};
pub use interest::{
    InterestPolicy, InterestSettings, InterestSystems, PairInterest, ProxyDormant, ProxyInterest,
    Relevance, SightTested, ViewPoint,
};
pub use link::{
    AckDelay, CLIENT_PING_INTERVAL, DataCadence, KindTraffic, LinkBirth, LinkShaper, LinkTraffic,
    PACK_AFTER, PACK_RUNS_BELOW, PeerLead, Riders, ServerAckDelay, ServerLinkStats, ServerPacking,
    plausible_netcode_datagram, release_riders, wire_size,
};
pub use pacing::ReplicationPacing;
pub use ping::{HighPing, PingMonitor};
pub use protocol::{
    CarriesEncoding, MessageEncodeError, MessageEncoder, MessageWriter, NetDirection,
    NetMessageAppExt, NetProtocol, PreEncoded, RELIABLE_RESEND_MIN, ReliableChannel,
    SequencedChannel, UnreliableChannel, WRITER_CHUNK, WholeBody, make_room, short_type_name,
    write_postcard, write_pre_encoded,
};
pub use roles::{
    Authority, AutonomousProxy, HeldShotsOldest, MoveTrail, SimulatedProxy, SimulatedVelocity,
};
pub use settings::{
    LastValidSettings, RefusedSettingsChanges, ValidatedSettingsAppExt, check_at_build,
};
pub use shutdown::{ServerStopPlugin, ServerStopState, StopRequest};
pub use time_source::{NetTimeSource, lightyear_clock_is_mocked, real_elapsed, with_net_clock_at};
pub use udp::{
    CONNECTION_REQUEST_BYTES, ServerUdpLink, ServerUdpSocket, UdpServerLimits,
    is_connection_request,
};
pub use unlag_core::{
    ConditionsError, DelayPolicy, Fields, HighPingSettings, LinkConditions, SettingsError, Validate,
};
pub use view::{
    AcknowledgedMessages, HeardTicks, NetFrame, ProxyFlags, ProxySmoothingSystems, RenderedPose,
    SENT_STATES_SECONDS, STATE_MESSAGES_KEPT, SentMask, SentStates, StatesSentTo, Teleported,
    TeleportsSeen,
};
pub use work::{
    MIN_ITEMS_TO_SHARE, ServerWork, WorkPart, WorkShares, WorkTimer, for_each_in_shares,
    for_each_in_shares_at_most,
};

use bevy::ecs::schedule::common_conditions::any_with_component;
use bevy::prelude::*;
use lightyear::connection::ConnectionSystems;
use lightyear::core::tick::TickDuration;
use lightyear::core::timeline::TimelineSystems;
use lightyear::link::LinkSystems;
use lightyear::prelude::server::{ClientOf, Server};
use lightyear::prelude::*;
use lightyear::transport::plugin::TransportSystems;
use lightyear_sync::ping::plugin::PingSystems;
use lightyear_sync::timeline::input::InputTimelineConfig;
use lightyear_sync::timeline::sync::SyncConfig;

/// Commonly used items.
pub mod prelude {
    pub use crate::{
        Authority, AutonomousProxy, HighPing, LinkConditions, LinkTraffic, NetClock, NetConditions,
        NetDirection, NetMessageAppExt, NetTimeSource, PingMonitor, RemoteClientClock,
        SimulatedProxy, UnlagNetPlugin,
    };
}

/// System sets of [`UnlagNetPlugin`].
#[derive(SystemSet, Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum NetSystems {
    /// `PreUpdate`, right after lightyear's IO receive: drops malformed datagrams, counts bytes,
    /// delays incoming datagrams on shaped links.
    ReceiveDatagrams,
    /// `PreUpdate`, after lightyear has read pings and messages: updates [`NetClock`] and
    /// [`RemoteClientClock`]. Systems that read the clock in `PreUpdate` go after this.
    Clock,
    /// `Update`: beats, delay reports and the ping monitor.
    Beats,
    /// `Update` on the server, after [`NetSystems::Beats`]: clients' moves are taken in and
    /// their characters placed (the movement plugin's checks run here). Whatever judges a
    /// client's action against where its character is (a shot's origin) runs after it, so a
    /// shot and the moves that left with it are seen together, however long the frames.
    Moves,
    /// `PostUpdate`, after the plugins queued the frame's own data (a client's moves) and
    /// before [`NetSystems::RideAlong`]: copies of earlier messages sent again, which go in
    /// packets that leave anyway or alone when they must (a shot's later copies). A copy sent
    /// alone makes the frame one that sends data: what rides along rides with it.
    Resend,
    /// `PostUpdate`, after the plugins queued the frame's messages and before lightyear packs
    /// them: what can ride in a packet that leaves anyway goes here (a client's delay
    /// reports), so it costs no datagram headers of its own. Plugins that send in
    /// `PostUpdate` order themselves before it.
    RideAlong,
    /// `PostUpdate`, after [`NetSystems::RideAlong`] and before lightyear's pings and message
    /// send: what must be in every packet a client sends (an unanswered reload request) goes
    /// here, in frames that send anything else and in those where a packet may leave without
    /// data ([`DataCadence::may_go_alone`]).
    EveryPacket,
    /// `PostUpdate`, right before lightyear's IO send: counts bytes and delays outgoing
    /// datagrams on shaped links.
    SendDatagrams,
}

/// Longest frame a server's clock follows in full (Bevy's virtual clock follows at most a
/// quarter second by default and loses the rest).
pub const MAX_SERVER_FRAME: core::time::Duration = core::time::Duration::from_secs(2);

/// `First` on a server: its virtual clock follows frames up to [`MAX_SERVER_FRAME`]. A listen
/// host that hitches for 400 ms would otherwise lose 150 ms of server time each time, while
/// its clients' estimates of that time follow the real clock: their view times drift ahead
/// of what the server believes and their shots are refused.
fn keep_server_time_whole(mut time: ResMut<Time<Virtual>>) {
    if time.max_delta() < MAX_SERVER_FRAME {
        time.set_max_delta(MAX_SERVER_FRAME);
    }
}

/// The net layer every `unlag` plugin builds on.
///
/// | adds | role |
/// | --- | --- |
/// | [`UnreliableChannel`], [`SequencedChannel`], [`ReliableChannel`] | both |
/// | [`NetClock`] (server time, RTT, jitter, loss, view time) | both |
/// | [`RemoteClientClock`] on each client's link | server |
/// | [`Authority`] / [`AutonomousProxy`] / [`SimulatedProxy`] | server / client |
/// | [`NetConditions`] applied to the link to the server, both directions | client |
/// | [`LinkTraffic`] on every link, malformed datagrams dropped | both |
/// | links that never connect despawned ([`ServerLinkStats`]) | server |
/// | every client packet read whole before lightyear, refused whole on a fault ([`PacketRefusal`]) | server |
/// | [`ServerUdpSocket`], a UDP transport with bounded state per address | server |
/// | [`PingMonitor`] and the [`HighPing`] event | client |
///
/// Requires lightyear's `ClientPlugins` or `ServerPlugins` to be added first.
#[derive(Clone, Debug)]
pub struct UnlagNetPlugin {
    /// How the interpolation delay is chosen.
    pub delay_policy: DelayPolicy,
    /// The high-ping warning.
    pub high_ping: HighPingSettings,
    /// Where lightyear's clock comes from (real time unless in the testbed).
    pub time_source: NetTimeSource,
    /// On the server, seconds after which a link that has not completed netcode's handshake is
    /// despawned (default 10 s). See [`ServerLinkStats`].
    pub unconnected_link_timeout: f64,
    /// On the server, the most fragments a client's message may be split into (default 0:
    /// unlag's client messages fit in one packet, and any fragment from a client is refused
    /// before lightyear reads it; see [`PacketRefusal::Fragment`]). lightyear 0.30.1
    /// allocates a message's reassembly buffer from the count a packet claims, unchecked, and
    /// never frees an incomplete one on a reliable channel: a game whose clients send messages
    /// over ~1.1 KB raises this and accepts up to this many × 1.2 KB per message id.
    pub max_client_fragments: u64,
    /// On the server, how many ids ahead of the next one expected a client's reliable message
    /// may be (default 512, at most 32 767; see [`PacketRefusal::FarAhead`]). lightyear keeps
    /// every message ahead of a gap with its packet's buffer (~1.2 KB): this bounds what one
    /// client can pin to about this many × 1.2 KB per reliable channel. An honest client is
    /// this far ahead only after this many reliable messages lost in a row; a refused packet
    /// is as if lost, and lightyear sends its reliable messages again.
    pub max_reliable_ahead: u16,
    /// Longest a client waits, seconds, before it sends the server a packet for
    /// acknowledgements, pings or pongs alone (0 to 0.25; default [`DEFAULT_ACK_DELAY`],
    /// 0.05). They ride on its
    /// next packet with data instead, which a playing client sends every move send (see
    /// [`AckDelay`]): at the report's defaults its datagrams fall from 85 to 41 a second and
    /// its bytes on the wire from 5.6 to 4.1 KB/s. 0 is lightyear's way: a packet in every
    /// frame that has some due and nothing else to send.
    pub ack_delay: f64,
    /// The same for the server's packets to each client (0 to 0.25; default
    /// [`DEFAULT_SERVER_ACK_DELAY`], 0.06; see [`ServerAckDelay`]), on the links it packs
    /// ([`ServerPacking`]): lightyear's acknowledgement-only packets, its pings and pongs and
    /// the movement acknowledgements wait for the client's next proxy states, so a client
    /// receives about one datagram per send interval. Links whose losses run in bursts are not
    /// packed (fewer datagrams a second would make each burst of a given count a longer
    /// outage of states), nor any in its first [`PACK_AFTER`] seconds of reports, while that
    /// is not known. 0 is lightyear's way on every link.
    ///
    /// Above 0, either delay makes the reliable channel wait at least [`RELIABLE_RESEND_MIN`]
    /// plus the larger before it sends a message again, so that an acknowledgement on its way
    /// is not taken for a loss.
    pub server_ack_delay: f64,
    /// On the server, how often replication (lightyear's, through replicon) looks for entities
    /// to spawn or despawn on clients and components that changed, seconds (0 to 1; default
    /// [`DEFAULT_REPLICATION_INTERVAL`], 0.05). unlag's own states and shots go in its own
    /// messages at their own rates; characters are replicated for their spawn, despawn and
    /// control alone. replicon's pass visits every replicated entity for every client each
    /// time it runs (~5 ms at 256 players): it runs once an interval at most, and only when
    /// something it would send may have happened since the last one ([`ReplicationPacing`],
    /// which a game can change at run time; `skip_idle: false` runs every interval's pass). A
    /// spawn, despawn or replicated change reaches clients up to this much later. 0: a pass
    /// in every frame in which a fixed tick ran, lightyear's way. The interval is also what
    /// lightyear's handshake tells clients (its `ReplicationMetadata`, set when the plugin is
    /// built); unlag's pacing replaces lightyear's own.
    pub replication_interval: f64,
}

/// [`UnlagNetPlugin::ack_delay`]'s default, seconds: a playing client's moves leave every
/// 1/30 s, so its acknowledgements, pings and pongs wait for them, never longer than this.
pub const DEFAULT_ACK_DELAY: f64 = 0.05;

/// [`UnlagNetPlugin::server_ack_delay`]'s default, seconds: the 20-Hz proxy send interval and
/// a frame's lateness, so what a packed link owes waits for the next states and no longer.
pub const DEFAULT_SERVER_ACK_DELAY: f64 = 0.06;

/// [`UnlagNetPlugin::replication_interval`]'s default, seconds: the rate at which proxy states
/// go (20 Hz), so that a spawn is never much later than the first states that name it.
pub const DEFAULT_REPLICATION_INTERVAL: f64 = 0.05;

impl Default for UnlagNetPlugin {
    fn default() -> Self {
        Self {
            delay_policy: DelayPolicy::default(),
            high_ping: HighPingSettings::default(),
            time_source: NetTimeSource::default(),
            unconnected_link_timeout: 10.0,
            max_client_fragments: 0,
            max_reliable_ahead: PacketGuardSettings::default().max_reliable_ahead,
            ack_delay: DEFAULT_ACK_DELAY,
            server_ack_delay: DEFAULT_SERVER_ACK_DELAY,
            replication_interval: DEFAULT_REPLICATION_INTERVAL,
        }
    }
}

impl Plugin for UnlagNetPlugin {
    fn build(&self, app: &mut App) {
        assert!(
            app.world().contains_resource::<TickDuration>(),
            "UnlagNetPlugin needs lightyear's ClientPlugins or ServerPlugins to be added first"
        );
        check_at_build(&self.delay_policy);
        check_at_build(&self.high_ping);
        assert!(
            self.unconnected_link_timeout > 0.0,
            "invalid UnlagNetPlugin: unconnected_link_timeout = {} (must be > 0 s)",
            self.unconnected_link_timeout
        );
        assert!(
            (1..=i16::MAX as u16).contains(&self.max_reliable_ahead),
            "invalid UnlagNetPlugin: max_reliable_ahead = {} (must be 1 to 32767 ids)",
            self.max_reliable_ahead
        );
        assert!(
            (0.0..=0.25).contains(&self.ack_delay),
            "invalid UnlagNetPlugin: ack_delay = {} (must be 0 to 0.25 s)",
            self.ack_delay
        );
        assert!(
            (0.0..=0.25).contains(&self.server_ack_delay),
            "invalid UnlagNetPlugin: server_ack_delay = {} (must be 0 to 0.25 s)",
            self.server_ack_delay
        );
        assert!(
            (0.0..=1.0).contains(&self.replication_interval),
            "invalid UnlagNetPlugin: replication_interval = {} (must be 0 to 1 s)",
            self.replication_interval
        );
        let replication_interval = core::time::Duration::from_secs_f64(self.replication_interval);
        // lightyear tells clients the interval in its handshake; the pacing is unlag's.
        app.insert_resource(ReplicationMetadata::new(replication_interval));
        pacing::register(app, replication_interval);
        app.insert_resource(self.time_source)
            .init_resource::<NetConditions>()
            .init_resource::<NetClock>()
            .init_resource::<NetFrame>()
            .init_resource::<ServerWork>()
            .init_resource::<protocol::NetProtocol>()
            .insert_resource(PingMonitor::new(self.high_ping))
            .insert_resource(clock::ClientClockState::new(self.delay_policy))
            .init_resource::<clock::ServerBeatState>()
            .init_resource::<ServerLinkStats>()
            .init_resource::<PeerLead>()
            .insert_resource(link::UnconnectedLinkTimeout(self.unconnected_link_timeout))
            .insert_resource(link::AckDelay(self.ack_delay))
            .init_resource::<DataCadence>()
            .insert_resource(link::ServerAckDelay(self.server_ack_delay))
            .insert_resource(PacketGuardSettings {
                max_fragments: self.max_client_fragments,
                max_reliable_ahead: self.max_reliable_ahead,
            })
            .register_type::<(NetClock, LinkTraffic, RemoteClientClock)>();
        app.register_required_components::<Link, LinkTraffic>()
            .register_required_components::<ClientOf, RemoteClientClock>()
            .register_required_components::<ClientOf, clock::ReportState>()
            .register_required_components::<ClientOf, ReliableWindows>()
            .register_required_components::<ClientOf, ServerPacking>()
            .register_required_components::<LinkOf, LinkBirth>()
            .register_required_components::<Link, link::LastPacketSent>();

        // The client's simulation runs at real time. lightyear would otherwise speed its
        // clock up or down by 5 % for seconds at a time to keep its input timeline ahead of
        // the server; unlag does not use that timeline (moves carry their own duration), and a
        // clock running 5 % fast is exactly what the speed-hack check must catch. lightyear
        // still corrects its timeline by jumps when it is more than 10 ticks off.
        app.insert_resource(InputTimelineConfig::default().with_sync_config(SyncConfig {
            speedup_factor: 1.0,
            ..default()
        }));
        protocol::register_channels(app, self.ack_delay.max(self.server_ack_delay));
        app.add_observer(link::set_client_ping_interval);
        clock::register(app);
        #[cfg(feature = "cheats")]
        app.add_systems(
            PreUpdate,
            link::hold_inbound
                .run_if(any_with_component::<Client>)
                .after(link::receive_datagrams)
                .in_set(NetSystems::ReceiveDatagrams),
        );
        roles::register(app);
        udp::register(app);

        app.configure_sets(
            PreUpdate,
            (
                NetSystems::ReceiveDatagrams
                    .after(LinkSystems::Receive)
                    .before(ConnectionSystems::Receive),
                NetSystems::Clock
                    .after(PingSystems::Receive)
                    .after(TimelineSystems::Advance)
                    .after(MessageSystems::Receive),
            ),
        )
        .configure_sets(Update, NetSystems::Moves.after(NetSystems::Beats))
        .configure_sets(
            PostUpdate,
            NetSystems::SendDatagrams
                .after(ConnectionSystems::Send)
                .before(LinkSystems::Send),
        )
        // Real time is read again right before receiving and sending, so that pings measure
        // the time spent between them (lightyear subtracts it from the RTT).
        .add_systems(First, (time_source::follow_real_time, view::count_frame))
        .add_systems(
            First,
            keep_server_time_whole.run_if(any_with_component::<Server>),
        )
        .add_systems(
            PreUpdate,
            time_source::follow_real_time.before(LinkSystems::Receive),
        )
        .add_systems(
            PostUpdate,
            time_source::follow_real_time.before(PingSystems::Send),
        )
        .add_systems(
            PreUpdate,
            (
                (conditions::apply_conditions, link::receive_datagrams)
                    .chain()
                    .in_set(NetSystems::ReceiveDatagrams),
                clock::update_client_clock
                    .run_if(any_with_component::<Client>)
                    .in_set(NetSystems::Clock),
                // (In this order: packing reads the clients' clocks as this frame left them.
                // Unordered, the executor's choice decided it, and a one-thread server's match
                // differed from a multi-threaded one's once a system was added to PreUpdate.)
                (
                    clock::update_server_clock,
                    link::despawn_unconnected_links,
                    link::decide_packing,
                )
                    .chain()
                    .run_if(any_with_component::<Server>)
                    .in_set(NetSystems::Clock),
            ),
        )
        .add_systems(
            PreUpdate,
            (
                (guard::guard_client_packets, acks::read_client_acks)
                    .chain()
                    .run_if(any_with_component::<Server>),
                acks::read_server_acks.run_if(any_with_component::<Client>),
            )
                .after(ConnectionSystems::Receive)
                .before(TransportSystems::Receive),
        )
        .add_systems(
            Update,
            (
                ping::update_ping_monitor.run_if(any_with_component::<Client>),
                clock::server_beats.run_if(any_with_component::<Server>),
            )
                .in_set(NetSystems::Beats),
        )
        .add_systems(
            FixedPostUpdate,
            view::clear_teleported
                .run_if(any_with_component::<Server>)
                .in_set(TeleportsSeen)
                .after(ProxySmoothingSystems::Send),
        )
        .configure_sets(
            PostUpdate,
            (
                NetSystems::Resend
                    .before(NetSystems::RideAlong)
                    .before(MessageSystems::Send),
                NetSystems::RideAlong.before(MessageSystems::Send),
                NetSystems::EveryPacket
                    .after(NetSystems::RideAlong)
                    .before(MessageSystems::Send),
                // A client's pings and pongs ride with what the frame sends anyway.
                PingSystems::Send
                    .after(NetSystems::EveryPacket)
                    .run_if(link::pings_may_go),
            ),
        )
        .add_systems(
            PostUpdate,
            clock::send_delay_reports
                .run_if(any_with_component::<Client>)
                .in_set(NetSystems::RideAlong),
        )
        .add_systems(
            PostUpdate,
            link::track_data_cadence
                .run_if(any_with_component::<Client>)
                .after(NetSystems::EveryPacket)
                .before(PingSystems::Send),
        )
        .add_systems(
            PostUpdate,
            (
                (
                    link::pace_acks,
                    acks::record_sent_packets.run_if(any_with_component::<Server>),
                    acks::record_own_packets.run_if(any_with_component::<Client>),
                )
                    .chain()
                    .after(TransportSystems::Send)
                    .before(ConnectionSystems::Send),
                link::send_datagrams.in_set(NetSystems::SendDatagrams),
            ),
        );
    }
}
