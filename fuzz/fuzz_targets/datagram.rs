//! Any datagram a UDP socket can deliver to the dedicated server: the pre-filter
//! (`plausible_netcode_datagram`) and, for every datagram it lets through, lightyear's own
//! netcode server parsing it (which must not panic: the filter exists because it did), then the
//! packet guard's reader (`read_client_packet`) on the same bytes as a decrypted packet: what
//! it reads lies inside the packet, a packet type it does not read is refused, and what it
//! reads, written again in lightyear's layout, reads back the same.
#![no_main]

use bevy::ecs::world::World;
use libfuzzer_sys::fuzz_target;
use lightyear_link::Link;
use lightyear_netcode::Server;
use std::cell::RefCell;
use unlag_net::{PacketMessage, PacketRefusal, plausible_netcode_datagram, read_client_packet};

thread_local! {
    static SERVER: RefCell<(Server, World)> = RefCell::new((
        Server::new(0x0075_6E6C_6167, [42; 32]).expect("netcode server"),
        World::new(),
    ));
}

fuzz_target!(|data: &[u8]| {
    let plausible = plausible_netcode_datagram(data);
    // The filter is exactly the prefix rule: empty never, a request always, otherwise a
    // packet kind 1-6 with a 1-8 byte sequence.
    if let Some(&prefix) = data.first() {
        let expected = prefix == 0
            || ((1..=6).contains(&(prefix & 0x0F)) && (1..=8).contains(&(prefix >> 4)));
        assert_eq!(plausible, expected);
    } else {
        assert!(!plausible);
    }
    if plausible {
        SERVER.with_borrow_mut(|(server, world)| {
            let mut link = Link::default();
            link.recv.push_raw(bytes::BytesMut::from(data));
            {
                let mut commands = world.commands();
                let mut entity = commands.spawn_empty();
                let _ = server.receive(&mut link, &mut entity, None);
            }
            world.flush();
            world.clear_entities();
        });
    }
    let read = read(data);
    if let Ok(messages) = &read {
        assert!(matches!(data.first(), Some(0 | 1 | 4)), "{data:?}");
        let range = data.as_ptr_range();
        for m in messages {
            let inner = m.bytes.as_ptr_range();
            assert!(range.start <= inner.start && inner.end <= range.end);
            assert!(m.fragment.is_none() || core::ptr::eq(m, &messages[0]));
        }
        let again = write(messages);
        assert_eq!(read_owned(&again), Ok(owned(messages)), "{data:?}");
    } else if data.len() >= 13 && !matches!(data[0], 0 | 1 | 4) {
        assert_eq!(read, Err(PacketRefusal::PacketType));
    }
});

type Owned = Vec<(u16, Option<u16>, Option<(u64, u64)>, Vec<u8>)>;

fn read(data: &[u8]) -> Result<Vec<PacketMessage<'_>>, PacketRefusal> {
    let mut out = Vec::new();
    read_client_packet(data, |m| {
        out.push(m);
        Ok(())
    })
    .map(|()| out)
}

fn owned(messages: &[PacketMessage]) -> Owned {
    messages
        .iter()
        .map(|m| (m.channel, m.id, m.fragment, m.bytes.to_vec()))
        .collect()
}

fn read_owned(data: &[u8]) -> Result<Owned, PacketRefusal> {
    read(data).map(|m| owned(&m))
}

/// lightyear 0.30's varint, in its shortest form.
fn varint(out: &mut Vec<u8>, v: u64) {
    match v {
        0..=0x3f => out.push(v as u8),
        0x40..=0x3fff => out.extend_from_slice(&((v as u16) | 0x4000).to_be_bytes()),
        0x4000..=0x3fff_ffff => out.extend_from_slice(&((v as u32) | 0x8000_0000).to_be_bytes()),
        _ => out.extend_from_slice(&(v | 0xc000_0000_0000_0000).to_be_bytes()),
    }
}

/// The messages written again: a fragment first (if any), then one batch per message.
fn write(messages: &[PacketMessage]) -> Vec<u8> {
    let fragment = messages.first().and_then(|m| m.fragment.map(|f| (m, f)));
    let mut out = vec![if fragment.is_some() { 1 } else { 0 }];
    out.extend_from_slice(&[0; 12]);
    let mut rest = messages;
    if let Some((m, (index, count))) = fragment {
        varint(&mut out, m.channel.into());
        out.extend_from_slice(&m.id.unwrap().to_be_bytes());
        varint(&mut out, index);
        varint(&mut out, count);
        if index == 0 {
            out.push(0);
        }
        varint(&mut out, m.bytes.len() as u64);
        out.extend_from_slice(m.bytes);
        rest = &messages[1..];
    }
    for m in rest {
        varint(&mut out, m.channel.into());
        out.push(1);
        match m.id {
            Some(id) => {
                out.push(1);
                out.extend_from_slice(&id.to_be_bytes());
            }
            None => out.push(0),
        }
        varint(&mut out, m.bytes.len() as u64);
        out.extend_from_slice(m.bytes);
    }
    out
}
