//! Real UDP sockets on loopback in real time: the measured RTT matches the configured one
//! whatever clock the build compiled in, garbage sent to the sockets changes nothing, and links
//! that never connect are cleaned up.

use bevy::prelude::*;
use core::time::Duration;
use lightyear::prelude::server::ClientOf;
use lightyear::prelude::*;
use std::net::UdpSocket;
use unlag::core::SplitMix64;
use unlag::net::{LinkConditions, ServerLinkStats, lightyear_clock_is_mocked};
use unlag_testbed::{UdpSession, UdpSessionConfig};

/// Links on the server that are not (yet) a connected client.
fn unconnected_links(session: &mut UdpSession) -> usize {
    let world = session.server_world_mut();
    let mut q = world.query_filtered::<(), (With<LinkOf>, Without<ClientOf>)>();
    q.iter(world).count()
}

#[test]
fn real_time_rtt_and_garbage_datagrams() {
    // This binary is built beside the testbed, which compiles lightyear's mock clock in: the
    // trap this test guards against is live here.
    assert!(lightyear_clock_is_mocked());
    let mut session = UdpSession::new(UdpSessionConfig {
        clients: 2,
        conditions: LinkConditions::new(Duration::from_millis(150), Duration::ZERO, 0.0),
        frame_rate_hz: 500.0,
        unconnected_link_timeout: 1.0,
        ..Default::default()
    });
    assert!(
        session.run_until(Duration::from_secs(5), |s| s.all_synced()),
        "UDP clients did not sync"
    );
    session.run_for(Duration::from_secs(2));
    for i in 0..2 {
        let rtt = session.client_clock(i).rtt;
        // Within 10 %, though each side waits for its next frame (2 ms apart) to handle a packet
        // (the session runs alone: simulated testbeds wait while it measures real time).
        assert!(
            (rtt - 0.150).abs() < 0.015,
            "client {i} RTT {rtt} on real time"
        );
    }

    let attacker = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut rng = SplitMix64::new(99);
    let clients = session.client_addrs();
    assert_eq!(clients.len(), 2);
    let targets = [session.server_addr(), clients[0], clients[1]];
    for n in 0..600 {
        let len = (rng.next_u64() % 1300) as usize;
        let mut datagram: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        if n % 3 == 0 && !datagram.is_empty() {
            datagram[0] = 0; // looks like a connection request, truncated or garbled
        }
        attacker.send_to(&datagram, targets[n % 3]).unwrap();
        if n % 20 == 0 {
            session.step();
        }
    }
    // A flood from many source addresses: each gets a link entity on the server, which goes
    // away when it does not connect.
    let flooders: Vec<UdpSocket> = (0..40)
        .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect();
    for socket in &flooders {
        for _ in 0..3 {
            socket
                .send_to(&[0x15, 1, 2, 3], session.server_addr())
                .unwrap();
        }
    }
    session.run_for(Duration::from_millis(200));
    assert!(unconnected_links(&mut session) >= 40, "flood not seen");
    session.run_for(Duration::from_secs(2));
    assert_eq!(unconnected_links(&mut session), 0, "unconnected links left");
    let despawned = session
        .server_world()
        .resource::<ServerLinkStats>()
        .unconnected_links_despawned;
    assert!(despawned >= 41, "{despawned}");
    assert!(session.all_synced(), "clients lost their connection");
    for i in 0..2 {
        let rtt = session.client_clock(i).rtt;
        assert!(
            (rtt - 0.150).abs() < 0.015,
            "client {i} RTT {rtt} after garbage"
        );
    }
}
