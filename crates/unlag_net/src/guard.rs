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

use std::collections::{BTreeSet, HashMap};

use bevy::prelude::*;
use lightyear::prelude::server::ClientOf;
use lightyear::prelude::*;
use lightyear::transport::channel::registry::ChannelKind;
use lightyear_messages::registry::MessageKind;
use lightyear_replication::channels::RepliconChannelMap;

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

    fn count(&mut self, reason: PacketRefusal) -> u64 {
        let n = match reason {
            PacketRefusal::Malformed => &mut self.malformed,
            PacketRefusal::PacketType => &mut self.packet_type,
            PacketRefusal::Channel => &mut self.channel,
            PacketRefusal::Fragment => &mut self.fragment,
            PacketRefusal::FarAhead => &mut self.far_ahead,
            PacketRefusal::MessageKind => &mut self.message_kind,
            PacketRefusal::MessageBody => &mut self.message_body,
        };
        *n += 1;
        *n
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
    channels: HashMap<u16, ReliableWindow>,
}

/// lightyear's receive window of one reliable channel, as the guard tracks it.
#[derive(Clone, Debug, Default)]
struct ReliableWindow {
    /// The oldest id not yet received (lightyear's `pending` once it has read its messages).
    next: u16,
    /// Ids received ahead of `next` (fewer than `max_reliable_ahead`).
    ahead: BTreeSet<u16>,
}

impl ReliableWindow {
    /// How far `id` is ahead of the next one expected; negative for an id already received.
    fn ahead_of_next(&self, id: u16) -> i16 {
        id.wrapping_sub(self.next) as i16
    }

    fn receive(&mut self, id: u16) {
        match self.ahead_of_next(id) {
            0 => {
                self.next = self.next.wrapping_add(1);
                while self.ahead.remove(&self.next) {
                    self.next = self.next.wrapping_add(1);
                }
            }
            d if d > 0 => {
                self.ahead.insert(id);
            }
            _ => {}
        }
    }
}

impl ReliableWindows {
    /// How many ids this link has received ahead of a gap, all channels together.
    pub fn held_ahead(&self) -> usize {
        self.channels.values().map(|w| w.ahead.len()).sum()
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
pub fn message_bytes<M: serde::Serialize + 'static>(world: &World, message: &M) -> Option<Vec<u8>> {
    let id = *world
        .get_resource::<MessageRegistry>()?
        .kind_map
        .net_id(&MessageKind::of::<M>())?;
    let mut bytes = match id {
        0..=0x3f => vec![id as u8],
        0x40..=0x3fff => (id | 0x4000).to_be_bytes().to_vec(),
        _ => (u32::from(id) | 0x8000_0000).to_be_bytes().to_vec(),
    };
    bytes.extend(postcard::to_allocvec(message).ok()?);
    Some(bytes)
}

/// What the guard needs to know of one channel the server receives on.
#[derive(Copy, Clone, Debug)]
struct ChannelRule {
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
) {
    let raw_channels: Vec<u16> = replicon
        .map(|map| map.client_channels.iter().map(|(_, id)| *id).collect())
        .unwrap_or_default();
    for (mut link, transport, mut windows) in &mut links {
        if link.recv.len() == 0 {
            continue;
        }
        // The channels this link receives on: a handful, read once per frame.
        let rules: HashMap<u16, ChannelRule> = transport
            .channel_receives()
            .filter_map(|receive| {
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
            })
            .collect();
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
                Err(reason) => {
                    let n = stats.packets_refused.count(reason);
                    if n.is_power_of_two() {
                        warn!(
                            "refused a client's packet before lightyear read it ({reason:?}): \
                             {n} so far for this reason"
                        );
                    }
                }
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn header(kind: u8) -> Vec<u8> {
        let mut p = vec![kind];
        p.extend_from_slice(&[0; 12]);
        p
    }

    fn collect(packet: &[u8]) -> Result<Vec<PacketMessage<'_>>, PacketRefusal> {
        let mut out = Vec::new();
        read_client_packet(packet, |m| {
            out.push(m);
            Ok(())
        })?;
        Ok(out)
    }

    #[test]
    fn reads_batches_as_lightyear_writes_them() {
        let mut p = header(0);
        // Channel 2, two messages: id 7 with 3 bytes, no id with 1 byte.
        p.extend_from_slice(&[2, 2, 1, 0, 7, 3, 10, 11, 12, 0, 1, 13]);
        // Channel 300 (a 2-byte varint), no message.
        p.extend_from_slice(&[0x41, 0x2c, 0]);
        let read = collect(&p).unwrap();
        assert_eq!(
            read,
            vec![
                PacketMessage {
                    channel: 2,
                    id: Some(7),
                    fragment: None,
                    bytes: &[10, 11, 12]
                },
                PacketMessage {
                    channel: 2,
                    id: None,
                    fragment: None,
                    bytes: &[13]
                },
            ]
        );
        // An AckOnly packet with no body; a Data packet with none.
        assert_eq!(collect(&header(4)).unwrap(), vec![]);
        assert_eq!(collect(&header(0)).unwrap(), vec![]);
    }

    #[test]
    fn reads_a_fragment_then_batches() {
        let mut p = header(1);
        // Channel 3, message 0x0102, fragment 0 of 4, uncompressed, 2 bytes; then a batch.
        p.extend_from_slice(&[3, 1, 2, 0, 4, 0, 2, 20, 21, 5, 1, 0, 1, 30]);
        let read = collect(&p).unwrap();
        assert_eq!(read[0].fragment, Some((0, 4)));
        assert_eq!(read[0].id, Some(0x0102));
        assert_eq!(read[0].bytes, &[20, 21]);
        assert_eq!(read[1].channel, 5);
        // A later fragment has no compression byte.
        let mut p = header(1);
        p.extend_from_slice(&[3, 1, 2, 2, 4, 1, 20]);
        assert_eq!(collect(&p).unwrap()[0].fragment, Some((2, 4)));
        // A compression byte other than 0 or 1.
        let mut p = header(1);
        p.extend_from_slice(&[3, 1, 2, 0, 4, 9, 1, 20]);
        assert_eq!(collect(&p), Err(PacketRefusal::Malformed));
    }

    #[test]
    fn refuses_what_lightyear_would_choke_on() {
        assert_eq!(collect(&[]), Err(PacketRefusal::Malformed));
        assert_eq!(collect(&[0; 5]), Err(PacketRefusal::Malformed));
        for kind in [2, 3, 5, 255] {
            assert_eq!(collect(&header(kind)), Err(PacketRefusal::PacketType));
        }
        // A batch whose message runs past the end.
        let mut p = header(0);
        p.extend_from_slice(&[2, 1, 0, 5, 1, 2]);
        assert_eq!(collect(&p), Err(PacketRefusal::Malformed));
        // A count of messages the packet does not hold.
        let mut p = header(0);
        p.extend_from_slice(&[2, 3, 0, 1, 9]);
        assert_eq!(collect(&p), Err(PacketRefusal::Malformed));
        // A channel id beyond u16 (lightyear would truncate it).
        let mut p = header(0);
        p.extend_from_slice(&[0x80, 0x01, 0x00, 0x02, 0]);
        assert_eq!(collect(&p), Err(PacketRefusal::Malformed));
        // A length near u64::MAX does not overflow.
        let mut p = header(0);
        p.extend_from_slice(&[2, 1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(collect(&p), Err(PacketRefusal::Malformed));
    }

    #[test]
    fn a_reliable_window_follows_lightyears_pending() {
        let mut w = ReliableWindow::default();
        w.receive(1);
        w.receive(2);
        assert_eq!((w.next, w.ahead.len()), (0, 2));
        w.receive(0);
        assert_eq!((w.next, w.ahead.len()), (3, 0));
        assert!(w.ahead_of_next(2) < 0, "a duplicate");
        assert_eq!(w.ahead_of_next(3 + 511), 511);
        // Across the wrap.
        let mut w = ReliableWindow {
            next: u16::MAX,
            ahead: BTreeSet::new(),
        };
        w.receive(0);
        w.receive(u16::MAX);
        assert_eq!((w.next, w.ahead.len()), (1, 0));
    }
}
