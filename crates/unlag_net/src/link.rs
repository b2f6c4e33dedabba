//! What happens to datagrams between lightyear's IO and its connection layer: malformed ones are
//! dropped and counted, bytes are counted, and on a client the simulated network conditions are
//! applied in both directions.
//!
//! lightyear's own link conditioner only delays incoming packets and draws from an unseeded RNG,
//! so `unlag` shapes both directions itself with a seeded [`LinkSimulator`]: one end (the client)
//! can simulate the whole path, runs repeat for the same seed, and packets in flight keep their
//! delivery time when conditions change.

use bevy::platform::collections::HashMap;
use bevy::prelude::*;
use lightyear::link::{RecvPayload, SendPayload};
use lightyear::prelude::*;
use lightyear::prelude::{PingConfig, PingManager};
use unlag_core::{DatagramLoss, LinkSimulator, PathConditions, SentLoss};

/// Byte and message counters of one link (the client's connection, or one client's connection
/// on the server). Sent figures count what this end sent; received figures what it received.
#[derive(Component, Clone, Debug, Default, Reflect)]
pub struct LinkTraffic {
    /// Datagrams sent by this end (before any simulated loss).
    pub datagrams_sent: u64,
    /// Bytes in those datagrams (netcode and lightyear headers included, UDP/IP not).
    pub bytes_sent: u64,
    /// Datagrams received and accepted.
    pub datagrams_received: u64,
    /// Bytes in those datagrams.
    pub bytes_received: u64,
    /// Datagrams dropped on arrival because they could not be a valid netcode packet.
    pub malformed_dropped: u64,
    /// Per message kind (short type name): messages and payload bytes sent through
    /// [`send_counted`](LinkTraffic::send_counted).
    pub sent_by_kind: HashMap<&'static str, KindTraffic>,
    /// lightyear's acknowledgement-only packets this end did not send, because a packet had
    /// left on this link less than [`UnlagNetPlugin::ack_delay`](crate::UnlagNetPlugin::ack_delay)
    /// before (the acknowledgements ride on the next packet instead).
    pub acks_withheld: u64,
    /// Loss of the datagrams received on this link, from their netcode sequence numbers
    /// ([`DatagramLoss`]; seconds of real time): on a client, what the interpolation delay
    /// learns how the link's losses run from.
    #[reflect(ignore)]
    pub datagram_loss: DatagramLoss,
    /// On a client's link: the share of its own packets to the server lost on the way, from
    /// their fates in its [`ServerAckLedger`](crate::ServerAckLedger) as each turns
    /// `ACK_GIVE_UP` (2 s) old ([`SentLoss`]; seconds of real time). What the combat plugin
    /// spreads a shot's copies by. Untouched on the server's links (it counts each client's
    /// datagrams from their sequence numbers).
    #[reflect(ignore)]
    pub sent_loss: SentLoss,
    /// Whether a message was queued through [`send_counted`](LinkTraffic::send_counted) in
    /// this frame (cleared once the frame's packets leave, in `PostUpdate`): what can ride
    /// along without a datagram of its own goes when this is set
    /// ([`NetSystems::RideAlong`](crate::NetSystems::RideAlong)).
    pub queued_this_frame: bool,
    /// On the server's link to a client: whether what the server owes that client between
    /// its data packets (lightyear's acknowledgement-only packets, its pings and pongs,
    /// movement acknowledgements) waits up to [`ServerAckDelay`] for the next packet with
    /// data, mostly the client's proxy states. Set every frame (see [`ServerPacking`]); always
    /// false on a client's own link.
    pub packed: bool,
}

/// Messages and payload bytes of one message kind.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Reflect)]
pub struct KindTraffic {
    /// Number of messages.
    pub messages: u64,
    /// Serialized payload bytes (lightyear's postcard encoding, without headers).
    pub bytes: u64,
}

impl LinkTraffic {
    /// Queues `message` on channel `C` of `sender` and counts it under its kind.
    ///
    /// This is how `unlag` plugins send, so traffic can be reported per message kind; measuring
    /// the size costs one extra encoding pass into a counter, without allocating.
    pub fn send_counted<C: Channel, M>(&mut self, sender: &mut MessageSender<M>, message: M)
    where
        M: serde::Serialize + Send + Sync + 'static,
    {
        let bytes = wire_size(&message);
        self.send_counted_sized::<C, M>(sender, message, bytes);
    }

    /// Like [`send_counted`](Self::send_counted), for a message that goes as its own bytes
    /// alone ([`WholeBody`](crate::WholeBody)): counted as those bytes.
    pub fn send_counted_whole<C: Channel, M>(&mut self, sender: &mut MessageSender<M>, message: M)
    where
        M: crate::WholeBody + Send + Sync + 'static,
    {
        let bytes = message.body().len();
        self.send_counted_sized::<C, M>(sender, message, bytes);
    }

    /// Like [`send_counted`](Self::send_counted), for a message whose encoded size (`bytes`,
    /// as postcard writes it) the caller knows: no pass to measure it (a big server's proxy
    /// updates, whose states were encoded once for every client).
    pub fn send_counted_sized<C: Channel, M>(
        &mut self,
        sender: &mut MessageSender<M>,
        message: M,
        bytes: usize,
    ) where
        M: Send + Sync + 'static,
    {
        let entry = self
            .sent_by_kind
            .entry(crate::protocol::short_type_name::<M>())
            .or_default();
        entry.messages += 1;
        entry.bytes += bytes as u64;
        self.queued_this_frame = true;
        sender.send::<C>(message);
    }
}

/// The length of `message`'s postcard encoding (lightyear's message format), bytes, measured
/// without allocating.
pub fn wire_size<M: serde::Serialize + ?Sized>(message: &M) -> usize {
    postcard::serialize_with_flavor(message, postcard::ser_flavors::Size::default()).unwrap_or(0)
}

/// Whether `datagram` can be a netcode packet at all, judged by its clear-text prefix byte.
///
/// lightyear's netcode parser indexes with the prefix before validating it, and panics on some
/// values (a packet kind above 7 overflows a shift; a sequence length above 8 overruns a
/// buffer). Such datagrams are dropped here, before the parser sees them.
pub fn plausible_netcode_datagram(datagram: &[u8]) -> bool {
    match datagram.first() {
        None => false,
        Some(0) => true, // connection request
        Some(&prefix) => {
            let kind = prefix & 0x0F;
            let sequence_len = prefix >> 4;
            (1..=6).contains(&kind) && (1..=8).contains(&sequence_len)
        }
    }
}

/// netcode's keep-alive and payload packet kinds: the packets of a connection, numbered one by
/// one from 0 by the sender (the handshake's packets are numbered apart).
const CONNECTION_PACKET_KINDS: [u8; 2] = [4, 5];

/// The sequence number of a connection's netcode packet, read from its clear-text header (the
/// prefix byte, then the number's bytes, little-endian); `None` for other packets. Read
/// before the packet is authenticated: a forged one can only make this end count datagrams as
/// lost that were not, and so lengthen its own interpolation delay (a sender on the path can
/// drop the real ones anyway).
fn connection_sequence(datagram: &[u8]) -> Option<u64> {
    let (&prefix, rest) = datagram.split_first()?;
    let (kind, len) = (prefix & 0x0F, usize::from(prefix >> 4));
    if !CONNECTION_PACKET_KINDS.contains(&kind) || !(1..=8).contains(&len) {
        return None;
    }
    let mut bytes = [0u8; 8];
    bytes[..len].copy_from_slice(rest.get(..len)?);
    Some(u64::from_le_bytes(bytes))
}

/// Simulated conditions on one link, both directions; on client links only. Inserted and
/// updated from [`NetConditions`](crate::NetConditions).
#[derive(Component)]
pub struct LinkShaper {
    pub(crate) outgoing: LinkSimulator<SendPayload>,
    pub(crate) incoming: LinkSimulator<RecvPayload>,
}

impl LinkShaper {
    /// A shaper applying `each_way` to both directions, randomised from `seed`.
    pub fn new(each_way: PathConditions, seed: u64) -> Self {
        Self {
            outgoing: LinkSimulator::new(each_way, seed),
            incoming: LinkSimulator::new(each_way, seed ^ 0x5EED_F1A7),
        }
    }

    /// Applies `each_way` to packets sent from now on, in both directions.
    pub fn set_conditions(&mut self, each_way: PathConditions) {
        self.outgoing.set_conditions(each_way);
        self.incoming.set_conditions(each_way);
    }

    /// The conditions applied to each direction.
    pub fn conditions(&self) -> &PathConditions {
        self.outgoing.conditions()
    }

    /// Packets lost so far (outgoing, incoming).
    pub fn lost(&self) -> (u64, u64) {
        (self.outgoing.stats().lost, self.incoming.stats().lost)
    }
}

/// How long after a datagram leaves this App the peer handles it, beyond the simulated latency;
/// shaped links release outgoing datagrams that much early so the peer handles them on time.
///
/// Zero by default: the peer reads a datagram at its first frame after the datagram arrives,
/// as on a real link. (The testbed does not shape inside its Apps at all: it carries the
/// datagrams itself and delivers each at its arrival; see `NetConditions::shaped_by_transport`.)
#[derive(Resource, Copy, Clone, Debug, Default, PartialEq, Eq, Reflect)]
pub struct PeerLead(pub core::time::Duration);

/// PreUpdate on a client, after [`receive_datagrams`] (feature `cheats`): holds each of the
/// server's datagrams [`NetCheats::inbound_delay`](crate::NetCheats::inbound_delay) seconds,
/// handing them back in order, ahead of the frame's own.
#[cfg(feature = "cheats")]
pub(crate) fn hold_inbound(
    time: Res<Time<Real>>,
    cheats: Option<Res<crate::NetCheats>>,
    mut links: Query<&mut Link, With<Client>>,
    mut held: Local<std::collections::VecDeque<(f64, RecvPayload)>>,
) {
    let now = time.elapsed_secs_f64();
    let delay = cheats.map_or(0.0, |c| c.inbound_delay);
    for mut link in &mut links {
        let fresh: Vec<RecvPayload> = link.recv.drain().collect();
        held.extend(fresh.into_iter().map(|d| (now, d)));
        while held.front().is_some_and(|(t, _)| now - t >= delay) {
            if let Some((_, datagram)) = held.pop_front() {
                link.recv.push_raw(datagram);
            }
        }
    }
}

/// PreUpdate, between lightyear's IO receive and its connection layer.
pub(crate) fn receive_datagrams(
    time: Res<Time<Real>>,
    mut links: Query<(&mut Link, &mut LinkTraffic, Option<&mut LinkShaper>)>,
    mut warned: Local<u64>,
    mut arrived: Local<Vec<RecvPayload>>,
) {
    let now = time.elapsed_secs_f64();
    for (mut link, mut traffic, mut shaper) in &mut links {
        // (Through one vector kept from frame to frame: a big server reads hundreds of links.)
        arrived.extend(link.recv.drain());
        for datagram in arrived.drain(..) {
            if !plausible_netcode_datagram(&datagram) {
                traffic.malformed_dropped += 1;
                crate::warn_counted!(
                    *warned,
                    "dropped a malformed datagram of {} bytes",
                    datagram.len()
                );
                continue;
            }
            match shaper.as_deref_mut() {
                // It arrived at some time of the last frame, unread until now: its simulated
                // trip starts from the middle of that frame, not from the read.
                Some(shaper) => {
                    shaper
                        .incoming
                        .send(now - time.delta_secs_f64() / 2.0, datagram);
                }
                None => accept(&mut link, &mut traffic, datagram, now),
            }
        }
        if let Some(shaper) = shaper.as_deref_mut() {
            // What has arrived by the start of this frame is read now; the rest waits for a
            // later frame, as on a real link (the wait is part of how late a slow App sees
            // things, and the RTT carries it).
            while let Some(datagram) = shaper.incoming.receive_due(now) {
                accept(&mut link, &mut traffic, datagram, now);
            }
        }
    }
}

fn accept(link: &mut Link, traffic: &mut LinkTraffic, datagram: RecvPayload, now: f64) {
    traffic.datagrams_received += 1;
    traffic.bytes_received += datagram.len() as u64;
    if let Some(sequence) = connection_sequence(&datagram) {
        traffic.datagram_loss.observe(now, sequence);
    }
    link.recv.push_raw(datagram);
}

/// PostUpdate, between lightyear's connection layer and its IO send.
pub(crate) fn send_datagrams(
    time: Res<Time<Real>>,
    lead: Res<PeerLead>,
    mut links: Query<(&mut Link, &mut LinkTraffic, Option<&mut LinkShaper>)>,
    mut outgoing: Local<Vec<SendPayload>>,
) {
    let now = time.elapsed_secs_f64();
    for (mut link, mut traffic, mut shaper) in &mut links {
        traffic.queued_this_frame = false;
        // (Through one vector kept from frame to frame: a big server sends on hundreds of links.)
        outgoing.extend(link.send.drain());
        for datagram in outgoing.drain(..) {
            traffic.datagrams_sent += 1;
            traffic.bytes_sent += datagram.len() as u64;
            match shaper.as_deref_mut() {
                Some(shaper) => {
                    shaper.outgoing.send(now, datagram);
                }
                None => link.send.push(datagram),
            }
        }
        if let Some(shaper) = shaper.as_deref_mut() {
            let horizon = now + time.delta_secs_f64() / 2.0 + lead.0.as_secs_f64();
            while let Some(datagram) = shaper.outgoing.receive_due(horizon) {
                link.send.push(datagram);
            }
        }
    }
}

/// On the server, when a link without a connection (a source address that sent datagrams but
/// never completed netcode's handshake) came to be, seconds of real time.
#[derive(Component, Clone, Debug, Default)]
pub struct LinkBirth(Option<f64>);

/// Counters of the server's links.
#[derive(Resource, Clone, Debug, Default, Reflect)]
pub struct ServerLinkStats {
    /// Links despawned because they never connected within
    /// [`UnlagNetPlugin::unconnected_link_timeout`](crate::UnlagNetPlugin::unconnected_link_timeout).
    pub unconnected_links_despawned: u64,
    /// Client packets refused before lightyear read them, by reason (see
    /// [`PacketRefusal`](crate::PacketRefusal)).
    pub packets_refused: crate::PacketRefusals,
    /// Datagrams from addresses without a link that were not connection requests, dropped
    /// unread by a [`ServerUdpSocket`](crate::ServerUdpSocket).
    pub udp_strangers_dropped: u64,
    /// Connection requests from new addresses a [`ServerUdpSocket`](crate::ServerUdpSocket)
    /// opened no link for: over [`UdpServerLimits`](crate::UdpServerLimits).
    pub udp_links_refused: u64,
    /// Addresses a [`ServerUdpSocket`](crate::ServerUdpSocket) forgot because their link was
    /// gone (timed out, disconnected or despawned).
    pub udp_addresses_forgotten: u64,
}

/// How long a client's link may owe the server acknowledgements (or hold its pings and pongs)
/// before it sends a packet for them alone, seconds (0: lightyear's way, a packet in every
/// frame with some due and nothing else to send). Inserted from
/// [`UnlagNetPlugin::ack_delay`](crate::UnlagNetPlugin::ack_delay); changeable at any time (the
/// report's `--packing off` sets 0 to compare), but the client's ping interval
/// ([`CLIENT_PING_INTERVAL`] when above 0) is set from it when the client is spawned.
#[derive(Resource, Copy, Clone, Debug, PartialEq)]
pub struct AckDelay(pub f64);

/// The same for the server's links to its clients, on the links it packs ([`ServerPacking`]):
/// how long their acknowledgements may wait for a packet with data, and with them lightyear's
/// pings and pongs and the movement acknowledgements, seconds (0: lightyear's way on every
/// link). Inserted from
/// [`UnlagNetPlugin::server_ack_delay`](crate::UnlagNetPlugin::server_ack_delay); changeable at
/// any time.
#[derive(Resource, Copy, Clone, Debug, PartialEq)]
pub struct ServerAckDelay(pub f64);

/// Seconds a client has been reporting (its first [`DelayReport`](crate::DelayReport) taken)
/// before the server packs its link: time for a link whose losses run to show a run, in the
/// datagrams either way, while the server still sends them as lightyear does. At 10 % loss in
/// bursts of 10 a run starts about every 100 datagrams, every 1.5 s down and 2.7 s up at the
/// report's rates: the chance that neither direction showed one in 4 s is about 1 in 70.
pub const PACK_AFTER: f64 = 4.0;

/// How likely a lost datagram may be followed by another on a client's link (either
/// direction, the most likely of the two) for the server to pack it: links whose losses run
/// at least this likely are never packed. Independent losses read about their share (20 %
/// loss: 0.2), bursts of `n` near `1 − 1/n` (0.5 for pairs).
pub const PACK_RUNS_BELOW: f64 = 0.3;

/// Whether and why the server packs its link to one client ([`LinkTraffic::packed`]); on the
/// server's client links.
///
/// A packed link's acknowledgement-only packets, lightyear's pings and pongs and the movement
/// acknowledgements wait up to [`ServerAckDelay`] to ride with the next packet with data, so
/// that a client receives one datagram per proxy send interval, not three or four. That is
/// safe on a link that loses datagrams independently: a state is lost with the same chance in
/// a datagram of its own as in a full one. On a link that loses them in runs of a count, fewer
/// datagrams a second make every run a longer outage of states (10 lost datagrams at 25 a
/// second are 0.4 s without news, at 70 a second 0.14 s), so such links are not packed: from
/// the first run either end met (the client's report of the server's datagrams, the server's
/// own count of the client's), and none before [`PACK_AFTER`] seconds of reports.
#[derive(Component, Clone, Debug, Default)]
pub struct ServerPacking {
    /// When the client's first delay report was taken, seconds (real time).
    pub reporting_since: Option<f64>,
    /// Datagrams the server sent this link per second over the last whole second (0 before).
    pub sent_rate: f64,
    /// How likely a lost datagram is followed by another on this link, the likelier of the
    /// two directions as last read (0–1; 0 before a loss; the client reports its per state:
    /// see [`unlag_core::continuation_per_datagram`]). Both readings weigh every run since
    /// the first alike as they fade, so a link that lost in bursts reads so through its quiet
    /// spells, while a calm link's unlucky first pair fades as single losses follow.
    pub runs: f64,
    /// Start of the current rate window: (seconds, datagrams sent by then).
    window: Option<(f64, u64)>,
}

/// PreUpdate on the server, after its clock: decides which client links are packed
/// ([`ServerPacking`], [`LinkTraffic::packed`]).
pub(crate) fn decide_packing(
    time: Res<Time<Real>>,
    delay: Res<ServerAckDelay>,
    conditions: Res<crate::NetConditions>,
    mut links: Query<
        (
            &mut LinkTraffic,
            &crate::RemoteClientClock,
            &mut ServerPacking,
        ),
        With<lightyear::prelude::server::ClientOf>,
    >,
) {
    let now = time.elapsed_secs_f64();
    let interval = 1.0 / f64::from(conditions.get().update_rate_hz.max(0.1));
    for (mut traffic, remote, mut packing) in &mut links {
        let sent = traffic.datagrams_sent;
        match packing.window {
            Some((start, count)) if now - start >= 1.0 => {
                packing.sent_rate = sent.saturating_sub(count) as f64 / (now - start);
                packing.window = Some((now, sent));
            }
            Some(_) => {}
            None => packing.window = Some((now, sent)),
        }
        if remote.reported && packing.reporting_since.is_none() {
            packing.reporting_since = Some(now);
        }
        // The client's report of its states' runs, per datagram (read once the rate is
        // known, a second in: the client reports many times a second). The server's rate is
        // a bit above the client's (it counts the lost datagrams too), which reads the runs a
        // bit likelier than the client does: never packs a link the client would call bursty.
        let down = if packing.sent_rate > 0.0 {
            unlag_core::continuation_per_datagram(
                remote.state_loss_runs,
                packing.sent_rate,
                interval,
            )
        } else {
            0.0
        };
        let up = traffic.datagram_loss.continuation_once_met().unwrap_or(0.0);
        packing.runs = down.max(up);
        traffic.packed = delay.0 > 0.0
            && packing.runs < PACK_RUNS_BELOW
            && packing
                .reporting_since
                .is_some_and(|since| now - since >= PACK_AFTER);
    }
}

/// On the server's link to a client: messages of kind `M` that ride with the link's next
/// packet with data rather than in a datagram of their own, when the link is packed
/// ([`LinkTraffic::packed`]): a shot's answer, the others' shots shown (judged between two
/// state sends, each went alone: at 16 proxies about 5 of a client's 25 datagrams a second,
/// each with some 50 bytes of netcode and lightyear headers), the others' projectiles'
/// launches and impacts (at 64 players firing, 0.72 datagrams a client a tick, 0.59 with them
/// riding, the states alone needing 0.33). Held at most [`ServerAckDelay`], like the
/// acknowledgements; on a link not packed, sent in the frame they were held in.
/// Filled with [`Riders::hold`] and sent by [`release_riders`].
#[derive(Component, Debug)]
pub struct Riders<M> {
    /// The messages held, oldest first, each with its size on the wire when the holder knew
    /// it (bytes).
    held: Vec<(M, Option<usize>)>,
    /// When the oldest was held, seconds (real time).
    since: f64,
}

impl<M> Default for Riders<M> {
    fn default() -> Self {
        Self {
            held: Vec::new(),
            since: 0.0,
        }
    }
}

impl<M> Riders<M> {
    /// Holds `message` for the link's next packet with data; `now` is real time, seconds.
    pub fn hold(&mut self, message: M, now: f64) {
        self.hold_any(message, None, now);
    }

    /// Like [`hold`](Self::hold), for a message whose size on the wire (`bytes`, as it is
    /// encoded) the holder knows: it is counted as that, not measured again (see
    /// [`LinkTraffic::send_counted_sized`]).
    pub fn hold_sized(&mut self, message: M, bytes: usize, now: f64) {
        self.hold_any(message, Some(bytes), now);
    }

    fn hold_any(&mut self, message: M, bytes: Option<usize>, now: f64) {
        if self.held.is_empty() {
            self.since = now;
        }
        self.held.push((message, bytes));
    }

    /// How many are held.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

/// `PostUpdate`, in [`NetSystems::RideAlong`](crate::NetSystems::RideAlong) on the server:
/// sends each link's held `M`s on channel `C` (counted, [`LinkTraffic::send_counted`]) in a
/// frame that sends the link something anyway (its proxy states, queued in the fixed loop
/// before), on a link not packed at once, and once the oldest waited [`ServerAckDelay`].
pub fn release_riders<C: Channel, M>(
    time: Res<Time<Real>>,
    delay: Res<ServerAckDelay>,
    mut links: Query<(&mut Riders<M>, &mut LinkTraffic, &mut MessageSender<M>)>,
) where
    M: serde::Serialize + Send + Sync + 'static,
{
    let now = time.elapsed_secs_f64();
    for (mut riders, mut traffic, mut sender) in &mut links {
        if riders.held.is_empty()
            || traffic.packed && !traffic.queued_this_frame && now - riders.since < delay.0
        {
            continue;
        }
        for (message, bytes) in riders.held.drain(..) {
            match bytes {
                Some(bytes) => traffic.send_counted_sized::<C, M>(&mut sender, message, bytes),
                None => traffic.send_counted::<C, M>(&mut sender, message),
            }
        }
    }
}

/// When a link last handed a packet to its connection layer, seconds (real time).
#[derive(Component, Copy, Clone, Debug, Default)]
pub(crate) struct LastPacketSent(Option<f64>);

/// `AckOnly`'s packet type in lightyear 0.30's packet header, the header's first byte.
const ACK_ONLY_PACKET: u8 = 4;

/// PostUpdate, between lightyear's transport and its connection layer: withholds an
/// acknowledgement-only packet on a link that sent a packet less than [`AckDelay`] (a
/// client's link) or [`ServerAckDelay`] (the server's link to a client, when packed) ago.
///
/// lightyear sends one whenever a frame has acknowledgements due and no data to carry them. A
/// client drawing 240 frames a second sends its moves in the 60 that run a tick, and an
/// acknowledgement-only packet in most of the others (the server's packets arrive between its
/// ticks); a dedicated server looping at 250 Hz does the same to every client. Measured by the
/// report at its defaults with both ends withholding them (before the pings rode too), a
/// client's datagrams per second fall from 103 to 75 up and from 98 to 55 down, and its bytes
/// on the wire from 7.3 to 6.4 KB/s up and from 9.2 to 7.5 KB/s down. Withheld, the
/// acknowledgements ride on the link's next packet, which a playing client sends every tick
/// and the server every send interval. The packet ids lightyear spent on the withheld packets
/// are simply never seen by the peer: lightyear does not track acknowledgement-only packets
/// for loss, and unlag measures loss from its own beats.
pub(crate) fn pace_acks(
    time: Res<Time<Real>>,
    (delay, server_delay): (Res<AckDelay>, Res<ServerAckDelay>),
    mut links: Query<(
        &mut Link,
        &mut LinkTraffic,
        &mut LastPacketSent,
        Has<lightyear::prelude::server::ClientOf>,
    )>,
) {
    let now = time.elapsed_secs_f64();
    for (mut link, mut traffic, mut last, on_server) in &mut links {
        let delay = match (on_server, traffic.packed) {
            (true, true) => server_delay.0,
            (true, false) => 0.0,
            (false, _) => delay.0,
        };
        match link.send.len() {
            0 => continue,
            // lightyear sends an acknowledgement-only packet only in a frame with no other.
            1 => {
                let Some(packet) = link.send.pop() else {
                    continue;
                };
                let recent = last.0.is_some_and(|t| now - t < delay);
                if recent && packet.first() == Some(&ACK_ONLY_PACKET) {
                    traffic.acks_withheld += 1;
                    continue;
                }
                link.send.push(packet);
            }
            _ => {}
        }
        last.0 = Some(now);
    }
}

/// Run condition of lightyear's ping and pong sending (`PingSystems::Send`).
///
/// In a client's App: with [`AckDelay`] above 0, a playing client's pings and pongs ride in
/// the next datagram its moves, shots or reports fill anyway. lightyear sends a ping every
/// 0.1 s and answers each of the server's with a pong as soon as it can, each in a datagram of
/// its own when the frame has nothing else to send: about 14 of a playing client's 55
/// datagrams a second at the report's defaults, each with its 40 bytes of netcode and
/// lightyear headers. Neither reading suffers from the wait: a ping is stamped when it leaves,
/// and a pong carries the time it waited, which the peer's RTT leaves out. They are held only
/// while the client sends something at least every [`AckDelay`] (a playing client's moves
/// leave every 1/30 s), so none waits longer; a client that sends more seldom (no character
/// yet: a delay report every 0.1 s) sends them as they come, since holding would only space
/// its pings out.
///
/// In the server's App (a listen host's included), one system sends every client's: they go
/// in a frame that sends some client data (the proxy states of a send interval go to every
/// client in the same frame), or once [`ServerAckDelay`] passed since they last went, and in
/// every frame while any client's link is not packed ([`ServerPacking`]: its pings and pongs
/// go as lightyear sends them).
pub(crate) fn pings_may_go(
    time: Res<Time<Real>>,
    (delay, server_delay): (Res<AckDelay>, Res<ServerAckDelay>),
    cadence: Res<DataCadence>,
    links: Query<(&LinkTraffic, Has<lightyear::prelude::server::ClientOf>)>,
    servers: Query<(), With<Server>>,
    mut server_last: Local<Option<f64>>,
) -> bool {
    let now = time.elapsed_secs_f64();
    if !servers.is_empty() {
        let mut clients = links.iter().filter(|(_, of)| *of).map(|(t, _)| t);
        let go = server_delay.0 <= 0.0
            || clients.any(|t| t.queued_this_frame || !t.packed)
            || server_last.is_none_or(|last| now - last >= server_delay.0);
        if go {
            *server_last = Some(now);
        }
        return go;
    }
    delay.0 <= 0.0
        || links.iter().any(|(t, of)| !of && t.queued_this_frame)
        || cadence.may_go_alone(now, delay.0)
}

/// PostUpdate on a client, after what the frame sends is queued and before lightyear's pings:
/// notes a frame that sends data in [`DataCadence`].
pub(crate) fn track_data_cadence(
    time: Res<Time<Real>>,
    mut cadence: ResMut<DataCadence>,
    links: Query<&LinkTraffic, With<Client>>,
) {
    if links.iter().any(|t| t.queued_this_frame) {
        let now = time.elapsed_secs_f64();
        let gap = cadence.last.map_or(f64::INFINITY, |last| now - last);
        *cadence = DataCadence {
            last: Some(now),
            gap,
        };
    }
}

/// When a client's App last sent data (messages through
/// [`LinkTraffic::send_counted`]) and how long before that it had, seconds of real time: whether
/// lightyear's pings and pongs may leave in a packet of their own (`pings_may_go`).
#[derive(Resource, Copy, Clone, Debug, Default)]
pub struct DataCadence {
    last: Option<f64>,
    gap: f64,
}

impl DataCadence {
    /// Whether a frame at real time `now` (seconds) that queues no data may still send the
    /// client's pings and pongs alone, [`AckDelay`] `delay` seconds: unless data leaves often
    /// enough that more comes within the delay. A frame where this holds may send a packet
    /// without data: what must be in every packet goes then too
    /// ([`NetSystems::EveryPacket`](crate::NetSystems::EveryPacket)).
    pub fn may_go_alone(&self, now: f64, delay: f64) -> bool {
        !self
            .last
            .is_some_and(|last| self.gap <= delay && now - last < delay)
    }
}

/// How much sooner than the link a message that must ride in every packet goes on its own,
/// seconds: lightyear reads the real time again before it sends, and a ping or an
/// acknowledgement-only packet must find this frame's copy already gone.
pub(crate) const ALONE_MARGIN: f64 = 0.002;

impl LinkTraffic {
    /// Whether a client's packet leaves this frame (at real time `now`, seconds, with
    /// [`AckDelay`] `delay` and its [`DataCadence`]): data was queued, acknowledgements are not
    /// held back, or one may leave without data. What must be in every packet the client sends
    /// goes when this holds, in [`NetSystems::EveryPacket`](crate::NetSystems::EveryPacket), and
    /// costs no datagram of its own.
    pub fn packet_leaves(&self, now: f64, delay: f64, cadence: Option<&DataCadence>) -> bool {
        self.queued_this_frame
            || delay <= 0.0
            || cadence.is_none_or(|c| c.may_go_alone(now + ALONE_MARGIN, delay))
    }
}

/// Seconds between a client's pings (lightyear's default is 0.1). A playing client's ride on
/// its next move send (`pings_may_go`), on average half the 1/30 s move interval later: so
/// about 0.1 s apart again, and its RTT follows a change of the link as fast as with
/// lightyear's own pings (riding at 0.1, 15 % fewer samples came in).
pub const CLIENT_PING_INTERVAL: f64 = 0.085;

/// Observer: a client's ping manager pings every [`CLIENT_PING_INTERVAL`] when its pings ride
/// ([`AckDelay`] above 0 when the client is spawned), as lightyear does otherwise.
pub(crate) fn set_client_ping_interval(
    add: On<Add, Client>,
    delay: Res<AckDelay>,
    mut commands: Commands,
) {
    if delay.0 > 0.0 {
        commands
            .entity(add.entity)
            .insert(PingManager::new(PingConfig {
                ping_interval: core::time::Duration::from_secs_f64(CLIENT_PING_INTERVAL),
            }));
    }
}

/// The timeout of links that never connect, seconds; see [`despawn_unconnected_links`].
#[derive(Resource, Clone, Debug)]
pub(crate) struct UnconnectedLinkTimeout(pub f64);

/// PreUpdate on the server: despawns links that have not connected within the timeout.
///
/// lightyear's UDP server spawns a link entity for every new source address and keeps it until
/// netcode times out a *connected* client; an address that only ever sends garbage would keep
/// its entity forever, so a flood from many addresses would grow the World without bound.
pub(crate) fn despawn_unconnected_links(
    mut commands: Commands,
    real: Res<Time<Real>>,
    timeout: Res<UnconnectedLinkTimeout>,
    mut stats: ResMut<ServerLinkStats>,
    mut links: Query<(Entity, &mut LinkBirth), (With<LinkOf>, Without<Connected>)>,
) {
    let now = real.elapsed_secs_f64();
    for (entity, mut birth) in &mut links {
        let born = *birth.0.get_or_insert(now);
        if now - born > timeout.0 {
            stats.unconnected_links_despawned += 1;
            debug!(
                "despawned link {entity}: no connection after {:.1} s",
                now - born
            );
            commands.entity(entity).try_despawn();
        }
    }
}
