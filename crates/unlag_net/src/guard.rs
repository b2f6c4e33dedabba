//! The server's guard in front of lightyear's transport: every packet a client sends is read
//! whole, after netcode decrypted it and before lightyear reads any of it, and refused whole
//! (counted, with a rate-limited warning) when lightyear would keep or choke on something in it.
//!
//! What lightyear 0.30.1 does with a connected client's packet, read in its sources
//! (`lightyear_transport` `plugin.rs` and `channel/receive.rs`, `lightyear_messages`
//! `receive.rs`), and what the guard does instead:
//!
//! | a client's packet carries | lightyear 0.30.1 | the guard |
//! | --- | --- | --- |
//! | a malformed body, an unknown packet type or channel | an `error!` per packet, no limit; the messages read before the fault stay buffered | refused whole |
//! | a fragment claiming 2^40 fragments | allocates them: the process aborts | refused (more than [`PacketGuardSettings::max_fragments`]) |
//! | reliable ids up to 32 767 ahead of the next one expected | keeps every one (with its packet's buffer) until the gap fills: ~40 MB per channel | refused beyond [`PacketGuardSettings::max_reliable_ahead`] |
//! | a message kind the server does not know or does not take from clients | an `error!`, and the rest of that client's channels wait for the next frame | refused |
//! | a message body that does not decode | the same | refused (for messages registered through [`NetMessageAppExt`](crate::NetMessageAppExt)) |
//!
//! A refused packet is as if lost: lightyear never reads its header, so a reliable message in it
//! is sent again by the client's lightyear once the window has moved on.

use std::collections::HashMap;

use bevy::prelude::*;
use lightyear::prelude::server::ClientOf;
use lightyear::prelude::*;
use lightyear::transport::channel::registry::ChannelKind;
use lightyear_messages::registry::MessageKind;
use lightyear_replication::channels::RepliconChannelMap;

use unlag_core::ReceiveWindow;

use crate::ServerLinkStats;
use crate::protocol::{ClientMessageRule, NetProtocol};

/// lightyear 0.30's packet header: type (1 byte), packet id, last acked id (2 each), ack
/// bitfield and tick (4 each).
pub(crate) const PACKET_HEADER_BYTES: usize = 13;

/// Why the server refused a client's packet before lightyear read it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Reflect)]
pub enum PacketRefusal {
    /// Shorter than its own structure says, or a field out of its range.
    Malformed,
    /// A packet type lightyear does not know, or a compressed one on a link that does not
    /// compress.
    PacketType,
    /// A channel the server does not receive on.
    Channel,
    /// A fragment of a message longer than [`PacketGuardSettings::max_fragments`], or an index
    /// not below its count.
    Fragment,
    /// A reliable message id more than [`PacketGuardSettings::max_reliable_ahead`] ahead of the
    /// next one expected on its channel.
    FarAhead,
    /// A message kind the server does not know, or one it does not take from clients.
    MessageKind,
    /// A message body that does not decode as its kind.
    MessageBody,
}

impl PacketRefusal {
    /// Every reason, in the order of [`PacketRefusals`]' fields.
    pub const ALL: [PacketRefusal; 7] = [
        Self::Malformed,
        Self::PacketType,
        Self::Channel,
        Self::Fragment,
        Self::FarAhead,
        Self::MessageKind,
        Self::MessageBody,
    ];
}

/// Client packets refused by the guard, by reason (counts since the server started).
#[derive(Clone, Debug, Default, PartialEq, Eq, Reflect)]
pub struct PacketRefusals {
    /// [`PacketRefusal::Malformed`].
    pub malformed: u64,
    /// [`PacketRefusal::PacketType`].
    pub packet_type: u64,
    /// [`PacketRefusal::Channel`].
    pub channel: u64,
    /// [`PacketRefusal::Fragment`].
    pub fragment: u64,
    /// [`PacketRefusal::FarAhead`].
    pub far_ahead: u64,
    /// [`PacketRefusal::MessageKind`].
    pub message_kind: u64,
    /// [`PacketRefusal::MessageBody`].
    pub message_body: u64,
}

impl PacketRefusals {
    /// The count for `reason`.
    pub fn get(&self, reason: PacketRefusal) -> u64 {
        match reason {
            PacketRefusal::Malformed => self.malformed,
            PacketRefusal::PacketType => self.packet_type,
            PacketRefusal::Channel => self.channel,
            PacketRefusal::Fragment => self.fragment,
            PacketRefusal::FarAhead => self.far_ahead,
            PacketRefusal::MessageKind => self.message_kind,
            PacketRefusal::MessageBody => self.message_body,
        }
    }

    fn slot(&mut self, reason: PacketRefusal) -> &mut u64 {
        match reason {
            PacketRefusal::Malformed => &mut self.malformed,
            PacketRefusal::PacketType => &mut self.packet_type,
            PacketRefusal::Channel => &mut self.channel,
            PacketRefusal::Fragment => &mut self.fragment,
            PacketRefusal::FarAhead => &mut self.far_ahead,
            PacketRefusal::MessageKind => &mut self.message_kind,
            PacketRefusal::MessageBody => &mut self.message_body,
        }
    }

    /// All refusals, every reason.
    pub fn total(&self) -> u64 {
        PacketRefusal::ALL.iter().map(|r| self.get(*r)).sum()
    }
}

/// The guard's limits; set through [`UnlagNetPlugin`](crate::UnlagNetPlugin).
#[derive(Resource, Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketGuardSettings {
    /// The most fragments a client's message may be split into (0: no fragment at all).
    pub max_fragments: u64,
    /// How far ahead of the next id expected a reliable message may be, in ids (1–32 767).
    pub max_reliable_ahead: u16,
}

impl Default for PacketGuardSettings {
    fn default() -> Self {
        Self {
            max_fragments: 0,
            max_reliable_ahead: 512,
        }
    }
}

/// One message, or one fragment of one, in a client's packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketMessage<'a> {
    /// The channel's network id.
    pub channel: u16,
    /// The message id (reliable and sequenced channels, and every fragment).
    pub id: Option<u16>,
    /// For a fragment: its index and the fragment count it claims.
    pub fragment: Option<(u64, u64)>,
    /// The message's bytes (a fragment's share of them): the message kind's network id, then
    /// its body.
    pub bytes: &'a [u8],
}

/// A cursor over a packet, reading lightyear 0.30.1's encodings.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], PacketRefusal> {
        let end = self.at.checked_add(n).ok_or(PacketRefusal::Malformed)?;
        let taken = self
            .bytes
            .get(self.at..end)
            .ok_or(PacketRefusal::Malformed)?;
        self.at = end;
        Ok(taken)
    }

    fn u8(&mut self) -> Result<u8, PacketRefusal> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, PacketRefusal> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// A QUIC-style variable-length integer: the top two bits of the first byte give its length
    /// (1, 2, 4 or 8 bytes, big-endian).
    fn varint(&mut self) -> Result<u64, PacketRefusal> {
        let first = *self.bytes.get(self.at).ok_or(PacketRefusal::Malformed)?;
        let bytes = self.take(1 << (first >> 6))?;
        Ok(bytes[1..]
            .iter()
            .fold(u64::from(first & 0x3f), |v, b| (v << 8) | u64::from(*b)))
    }

    /// A network id (channel, message kind): a varint lightyear reads `as u16`; a larger value
    /// is refused rather than truncated, as no honest peer writes one.
    fn net_id(&mut self) -> Result<u16, PacketRefusal> {
        u16::try_from(self.varint()?).map_err(|_| PacketRefusal::Malformed)
    }

    /// A length-prefixed byte string.
    fn byte_string(&mut self) -> Result<&'a [u8], PacketRefusal> {
        let len = usize::try_from(self.varint()?).map_err(|_| PacketRefusal::Malformed)?;
        self.take(len)
    }

    fn done(&self) -> bool {
        self.at >= self.bytes.len()
    }
}

/// Reads a client's packet (decrypted, before lightyear's transport) as lightyear 0.30.1 does,
/// calling `each` on every message and fragment in it; stops at the first refusal, `each`'s
/// included. Compressed packets (types 2 and 3) are refused as [`PacketRefusal::PacketType`]:
/// their body is unreadable before decompression.
pub fn read_client_packet<'a>(
    packet: &'a [u8],
    mut each: impl FnMut(PacketMessage<'a>) -> Result<(), PacketRefusal>,
) -> Result<(), PacketRefusal> {
    let kind = *packet.first().ok_or(PacketRefusal::Malformed)?;
    let body = packet
        .get(PACKET_HEADER_BYTES..)
        .ok_or(PacketRefusal::Malformed)?;
    let mut r = Reader { bytes: body, at: 0 };
    match kind {
        // Data and AckOnly: lightyear reads message batches from both.
        0 | 4 => {}
        1 => {
            let channel = r.net_id()?;
            let id = r.u16()?;
            let index = r.varint()?;
            let count = r.varint()?;
            if index == 0 && r.u8()? > 1 {
                // The first fragment's compression: 0 none, 1 LZ4.
                return Err(PacketRefusal::Malformed);
            }
            let bytes = r.byte_string()?;
            each(PacketMessage {
                channel,
                id: Some(id),
                fragment: Some((index, count)),
                bytes,
            })?;
        }
        _ => return Err(PacketRefusal::PacketType),
    }
    while !r.done() {
        let channel = r.net_id()?;
        let messages = r.u8()?;
        for _ in 0..messages {
            let id = if r.u8()? != 0 { Some(r.u16()?) } else { None };
            let bytes = r.byte_string()?;
            each(PacketMessage {
                channel,
                id,
                fragment: None,
                bytes,
            })?;
        }
    }
    Ok(())
}

/// On the server, per client link: what the guard knows of each reliable channel's ids.
#[derive(Component, Clone, Debug, Default)]
pub struct ReliableWindows {
    channels: HashMap<u16, ReceiveWindow>,
}

impl ReliableWindows {
    /// How many ids this link has received ahead of a gap, all channels together.
    pub fn held_ahead(&self) -> usize {
        self.channels.values().map(ReceiveWindow::held).sum()
    }
}

/// The network id lightyear gave channel `C` in this App (the same on both ends): for building
/// packets in tests and tools.
pub fn channel_net_id<C: Channel>(world: &World) -> Option<u16> {
    world
        .get_resource::<ChannelRegistry>()?
        .get_net_from_kind(&ChannelKind::of::<C>())
        .copied()
}

/// A message's bytes as lightyear puts them in a packet (its kind's network id, then its
/// postcard body): for building packets in tests and tools. `None` when `M` is not registered.
/// (A message registered as a [`WholeBody`](crate::WholeBody) goes as [`message_body_bytes`]
/// with its own bytes.)
pub fn message_bytes<M: serde::Serialize + 'static>(world: &World, message: &M) -> Option<Vec<u8>> {
    message_body_bytes::<M>(world, &postcard::to_allocvec(message).ok()?)
}

/// The bytes of a message of kind `M` whose body is `body`, as lightyear puts them in a packet
/// (the kind's network id, then the body as it is): for building packets in tests and tools.
/// `None` when `M` is not registered.
pub fn message_body_bytes<M: 'static>(world: &World, body: &[u8]) -> Option<Vec<u8>> {
    let id = *world
        .get_resource::<MessageRegistry>()?
        .kind_map
        .net_id(&MessageKind::of::<M>())?;
    let mut bytes = match id {
        0..=0x3f => vec![id as u8],
        0x40..=0x3fff => (id | 0x4000).to_be_bytes().to_vec(),
        _ => (u32::from(id) | 0x8000_0000).to_be_bytes().to_vec(),
    };
    bytes.extend_from_slice(body);
    Some(bytes)
}

/// What the guard needs to know of one channel the server receives on.
#[derive(Copy, Clone, Debug)]
pub(crate) struct ChannelRule {
    reliable_window: bool,
    /// A channel of lightyear messages (a message-kind id, then a body); replicon's own
    /// channels carry raw bytes replicon reads itself.
    messages: bool,
}

/// PreUpdate on the server, between netcode's decryption and lightyear's transport: reads every
/// client packet whole and refuses it whole on the first fault (see the [module](self)).
#[allow(clippy::too_many_arguments)]
pub(crate) fn guard_client_packets(
    settings: Res<PacketGuardSettings>,
    channels: Res<ChannelRegistry>,
    messages: Res<MessageRegistry>,
    protocol: Res<NetProtocol>,
    replicon: Option<Res<RepliconChannelMap>>,
    mut stats: ResMut<ServerLinkStats>,
    mut links: Query<(&mut Link, &Transport, &mut ReliableWindows), With<ClientOf>>,
    mut accepted: Local<Vec<(u16, u16)>>,
    (mut raw_channels, mut rules): (Local<Vec<u16>>, Local<HashMap<u16, ChannelRule>>),
) {
    // (Both refilled in place: a big server reads hundreds of links a frame.)
    raw_channels.clear();
    if let Some(map) = replicon {
        raw_channels.extend(map.client_channels.iter().map(|(_, id)| *id));
    }
    for (mut link, transport, mut windows) in &mut links {
        if link.recv.len() == 0 {
            continue;
        }
        channel_rules(transport, &channels, &raw_channels, &mut rules);
        let compresses = transport.compression.algorithm.is_some();
        // Each packet once round the queue: kept ones go back in their order.
        for _ in 0..link.recv.len() {
            let Some(packet) = link.recv.pop() else {
                break;
            };
            if compresses && matches!(packet.first(), Some(2 | 3)) {
                // Compressed: lightyear bounds the decompressed size; the body is unreadable here.
                link.recv.push_raw(packet);
                continue;
            }
            accepted.clear();
            let verdict = read_client_packet(&packet, |m| {
                if let Some((index, count)) = m.fragment
                    && (count > settings.max_fragments || index >= count)
                {
                    return Err(PacketRefusal::Fragment);
                }
                let rule = rules.get(&m.channel).ok_or(PacketRefusal::Channel)?;
                if rule.reliable_window {
                    let id = m.id.ok_or(PacketRefusal::Malformed)?;
                    let window = windows.channels.get(&m.channel);
                    let ahead = window.map_or(id as i16, |w| w.ahead_of_next(id));
                    if i32::from(ahead) >= i32::from(settings.max_reliable_ahead) {
                        return Err(PacketRefusal::FarAhead);
                    }
                    accepted.push((m.channel, id));
                }
                if rule.messages && m.fragment.is_none() {
                    check_message(m.bytes, &messages, &protocol)?;
                }
                Ok(())
            });
            match verdict {
                Ok(()) => {
                    for (channel, id) in accepted.drain(..) {
                        windows.channels.entry(channel).or_default().receive(id);
                    }
                    link.recv.push_raw(packet);
                }
                Err(reason) => crate::warn_counted!(
                    *stats.packets_refused.slot(reason),
                    "refused a client's packet before lightyear read it: {reason:?}"
                ),
            }
        }
    }
}

/// The rules of the channels a link receives on (a handful, read once per frame) into
/// `rules`, by net id: whether a channel is reliable (its ids are held to a window) and
/// whether it carries lightyear messages (`raw_channels` are replicon's, which it reads
/// itself).
fn channel_rules(
    transport: &Transport,
    channels: &ChannelRegistry,
    raw_channels: &[u16],
    rules: &mut HashMap<u16, ChannelRule>,
) {
    rules.clear();
    let receives = transport.channel_receives().filter_map(|receive| {
        let kind: ChannelKind = receive.channel_kind();
        let id = *channels.get_net_from_kind(&kind)?;
        let mode = channels.settings(kind)?.mode;
        let reliable_window = matches!(
            mode,
            ChannelMode::OrderedReliable(_) | ChannelMode::UnorderedReliable(_)
        );
        let messages = !raw_channels.contains(&id);
        Some((
            id,
            ChannelRule {
                reliable_window,
                messages,
            },
        ))
    });
    rules.extend(receives);
}

/// A whole message's bytes: the kind must be one the server takes from clients and, when
/// registered through unlag, its body must decode.
fn check_message(
    bytes: &[u8],
    messages: &MessageRegistry,
    protocol: &NetProtocol,
) -> Result<(), PacketRefusal> {
    let mut r = Reader { bytes, at: 0 };
    let net_id = r.net_id().map_err(|_| PacketRefusal::MessageKind)?;
    let kind = messages
        .kind_map
        .kind(net_id)
        .ok_or(PacketRefusal::MessageKind)?;
    match protocol.client_rule(kind) {
        Some(ClientMessageRule::NotFromClients) => Err(PacketRefusal::MessageKind),
        Some(ClientMessageRule::Decodes(decodes)) if !decodes(&bytes[r.at..]) => {
            Err(PacketRefusal::MessageBody)
        }
        _ => Ok(()),
    }
}
