//! Any datagram a UDP socket can deliver to the dedicated server: the pre-filter
//! (`plausible_netcode_datagram`) and, for every datagram it lets through, lightyear's own
//! netcode server parsing it (which must not panic: the filter exists because it did), then the
//! fragment guard's header reader on the same bytes as a decrypted packet.
#![no_main]

use bevy::ecs::world::World;
use libfuzzer_sys::fuzz_target;
use lightyear_link::Link;
use lightyear_netcode::Server;
use std::cell::RefCell;
use unlag_net::{FragmentHeader, fragment_header, plausible_netcode_datagram};

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
    match fragment_header(data) {
        FragmentHeader::Whole => assert!(!matches!(data.first(), Some(1 | 3))),
        FragmentHeader::Truncated | FragmentHeader::Fragment { .. } => {
            assert!(matches!(data.first(), Some(1 | 3)))
        }
    }
});
