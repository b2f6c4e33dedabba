//! The server's round trips to each client, timed by its own ledger of the packets it sent
//! ([`unlag_core::AckLedger`]) rather than by lightyear's `PacketAcked`: lightyear gives a
//! packet up after 1.5 × its trailing RTT estimate, which after a step up in latency is every
//! packet for a second or more. Read from the packet headers between netcode and lightyear's
//! transport, where the guard reads them ([`crate::guard`]).
//!
//! A client keeps the same ledger of its own packets to the server ([`ServerAckLedger`]): what
//! its moves' redundancy needs to know is which of its frames the server's transport had.

use bevy::prelude::*;
use lightyear::prelude::server::ClientOf;
use lightyear::prelude::*;
use unlag_core::{AckLedger, PacketFate};

use crate::guard::PACKET_HEADER_BYTES;
use crate::{LinkTraffic, RemoteClientClock};

/// lightyear 0.30's acknowledgement-only packet type (the header's first byte): never
/// acknowledged itself, so never timed.
pub const ACK_ONLY_PACKET: u8 = 4;

/// On a server's client link: the server's packets to that client waiting for their
/// acknowledgement ([`unlag_core::AckLedger`]).
#[derive(Component, Default)]
pub struct ClientAckLedger(pub AckLedger);

/// The packet id of one of lightyear 0.30's packets, if it is long enough to have a header and
/// is acknowledged (not an acknowledgement-only packet). Untrusted bytes: any slice is
/// safe.
pub fn sent_packet_id(packet: &[u8]) -> Option<u16> {
    let header = packet.get(..PACKET_HEADER_BYTES)?;
    (header[0] != ACK_ONLY_PACKET).then(|| u16::from_be_bytes([header[1], header[2]]))
}

/// The acknowledgements in a client packet's header: the newest packet id it had received and
/// the bitfield of the 32 before it; `None` for a packet shorter than a header.
pub fn header_acks(packet: &[u8]) -> Option<(u16, u32)> {
    let header = packet.get(..PACKET_HEADER_BYTES)?;
    Some((
        u16::from_be_bytes([header[3], header[4]]),
        u32::from_be_bytes([header[5], header[6], header[7], header[8]]),
    ))
}

/// Hands a packet's fate to the link's clock.
fn note(remote: &mut RemoteClientClock, fate: PacketFate) {
    match fate {
        PacketFate::Acknowledged(trip) => remote.note_ack(trip),
        PacketFate::GivenUp => remote.note_unacknowledged(),
    }
}

/// The ids of the packets about to leave on `link` (lightyear reads its queues without
/// consuming them only in its tests: each packet goes once round the queue, in order).
fn outgoing_ids(link: &mut Link, ids: &mut Vec<u16>) {
    ids.clear();
    for _ in 0..link.send.len() {
        let Some(packet) = link.send.pop() else {
            break;
        };
        ids.extend(sent_packet_id(&packet));
        link.send.push(packet);
    }
}

/// Calls `read` with the acknowledgements in the header of each packet received on `link`
/// (left in the queue for lightyear).
fn received_acks(link: &mut Link, mut read: impl FnMut(u16, u32)) {
    for _ in 0..link.recv.len() {
        let Some(packet) = link.recv.pop() else {
            break;
        };
        if let Some((last, bits)) = header_acks(&packet) {
            read(last, bits);
        }
        link.recv.push_raw(packet);
    }
}

/// PostUpdate on the server, between lightyear's transport and netcode: notes each packet
/// about to leave for a client, by its id, at the real time lightyear stamps its own with.
pub(crate) fn record_sent_packets(
    mut commands: Commands,
    time: Res<Time<Real>>,
    frame: Res<crate::NetFrame>,
    mut links: Query<
        (
            Entity,
            &mut Link,
            Option<&mut ClientAckLedger>,
            &mut RemoteClientClock,
        ),
        With<ClientOf>,
    >,
    mut ids: Local<Vec<u16>>,
) {
    let now = time.elapsed_secs_f64();
    for (entity, mut link, ledger, mut remote) in &mut links {
        outgoing_ids(&mut link, &mut ids);
        if ids.is_empty() {
            continue;
        }
        match ledger {
            Some(mut ledger) => {
                for &id in ids.iter() {
                    ledger
                        .0
                        .on_sent(id, now, frame.0, |fate| note(&mut remote, fate));
                }
            }
            None => {
                let mut ledger = ClientAckLedger::default();
                for &id in ids.iter() {
                    ledger.0.on_sent(id, now, frame.0, |_| {});
                }
                commands.entity(entity).insert(ledger);
            }
        }
    }
}

/// On a client's link: its own packets to the server waiting for the server's
/// acknowledgement ([`unlag_core::AckLedger`], by the client's [`NetFrame`](crate::NetFrame)
/// they left in). Once [`AckLedger::frame_acknowledged`] answers for a frame, the server's
/// transport had everything that frame sent: the movement plugin stops repeating the moves it
/// carried a round trip sooner than the server's own report of them would let it (that report
/// comes every `ack_interval`, and its trip back with it).
#[derive(Component, Default)]
pub struct ServerAckLedger(pub AckLedger);

/// PostUpdate on a client, between lightyear's transport and netcode: notes each packet about
/// to leave for the server, by its id and frame.
pub(crate) fn record_own_packets(
    mut commands: Commands,
    time: Res<Time<Real>>,
    frame: Res<crate::NetFrame>,
    mut links: Query<(Entity, &mut Link, Option<&mut ServerAckLedger>), With<Client>>,
    mut ids: Local<Vec<u16>>,
) {
    let now = time.elapsed_secs_f64();
    for (entity, mut link, ledger) in &mut links {
        outgoing_ids(&mut link, &mut ids);
        if ids.is_empty() {
            continue;
        }
        // (A ledger is a thousand slots: made once, for the first packets, not every frame.)
        let record = |ledger: &mut AckLedger| {
            for &id in ids.iter() {
                ledger.on_sent(id, now, frame.0, |_| {});
            }
        };
        match ledger {
            Some(mut ledger) => record(&mut ledger.0),
            None => {
                let mut fresh = ServerAckLedger::default();
                record(&mut fresh.0);
                commands.entity(entity).insert(fresh);
            }
        }
    }
}

/// PreUpdate on a client, after netcode and before lightyear's transport: reads the server's
/// acknowledgements of the client's packets from every packet header that arrived, gives up
/// the packets waited for too long, and counts each packet as it turns `ACK_GIVE_UP` old
/// (lost or not) into the link's [`LinkTraffic::sent_loss`].
pub(crate) fn read_server_acks(
    time: Res<Time<Real>>,
    mut links: Query<(&mut Link, &mut ServerAckLedger, Option<&mut LinkTraffic>), With<Client>>,
) {
    let now = time.elapsed_secs_f64();
    for (mut link, mut ledger, mut traffic) in &mut links {
        let ledger = &mut ledger.0;
        received_acks(&mut link, |last, bits| {
            ledger.on_header(last, bits, now, |_| {});
        });
        ledger.settle(
            now,
            |_| {},
            |lost| {
                if let Some(traffic) = traffic.as_deref_mut() {
                    traffic.sent_loss.note(lost, now);
                }
            },
        );
    }
}

/// PreUpdate on the server, after the guard and before lightyear's transport: reads the
/// acknowledgements of every packet a client sent, times the server's packets they
/// acknowledge for the first time, keeps the frame's shortest such trip
/// ([`RemoteClientClock::recent_trip`]) and gives up the packets waited for too long.
pub(crate) fn read_client_acks(
    time: Res<Time<Real>>,
    mut links: Query<(&mut Link, &mut ClientAckLedger, &mut RemoteClientClock), With<ClientOf>>,
) {
    let now = time.elapsed_secs_f64();
    for (mut link, mut ledger, mut remote) in &mut links {
        let remote = &mut *remote;
        let mut fresh: Option<f64> = None;
        received_acks(&mut link, |last, bits| {
            if let Some(trip) = ledger
                .0
                .on_header(last, bits, now, |fate| note(remote, fate))
            {
                fresh = Some(fresh.map_or(trip, |f| f.min(trip)));
            }
        });
        ledger.0.give_up(now, |fate| note(remote, fate));
        remote.pending_trip = fresh;
    }
}
