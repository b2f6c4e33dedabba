//! Real UDP sockets on loopback in real time: the measured RTT matches the configured one
//! whatever clock the build compiled in, garbage sent to the sockets changes nothing, links that
//! never connect are cleaned up with their addresses, and a flood of connection requests opens
//! links only within the server socket's limits.

use bevy::prelude::*;
use core::time::Duration;
use lightyear::prelude::server::{ClientOf, Server, Stopped};
use lightyear::prelude::*;
use std::net::UdpSocket;
use unlag::core::SplitMix64;
use unlag::net::{
    CONNECTION_REQUEST_BYTES, LinkConditions, ServerLinkStats, ServerStopState, ServerUdpSocket,
    StopRequest, UdpServerLimits, is_connection_request, lightyear_clock_is_mocked,
};
use unlag_testbed::{UdpSession, UdpSessionConfig};

/// Links on the server that are not (yet) a connected client.
fn unconnected_links(session: &mut UdpSession) -> usize {
    let world = session.server_world_mut();
    let mut q = world.query_filtered::<(), (With<LinkOf>, Without<ClientOf>)>();
    q.iter(world).count()
}

/// Remote addresses the server's socket keeps.
fn server_addresses(session: &mut UdpSession) -> usize {
    let world = session.server_world_mut();
    let mut q = world.query::<&ServerUdpSocket>();
    q.single(world).expect("one server socket").addresses()
}

/// A datagram shaped as a netcode connection request whose token is random bytes.
fn forged_request(rng: &mut SplitMix64) -> Vec<u8> {
    let mut datagram: Vec<u8> = (0..CONNECTION_REQUEST_BYTES)
        .map(|_| rng.next_u64() as u8)
        .collect();
    datagram[0] = 0;
    datagram[1..14].copy_from_slice(b"NETCODE 1.02\0");
    assert!(is_connection_request(&datagram));
    datagram
}

/// The server socket's limits in this test: tighter than the defaults, so the flood meets
/// them.
const LIMITS: UdpServerLimits = UdpServerLimits {
    new_links_per_second: 20.0,
    new_link_burst: 30.0,
    max_unconnected_links: 40,
};

fn session_now() -> Duration {
    unlag::net::real_elapsed()
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
        udp_limits: LIMITS,
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
    // The server reads the acknowledgements of its packets from the client packets' headers
    // itself, after netcode decrypted them: over real netcode too, the trips read the link.
    {
        let world = session.server_world_mut();
        let now = world.resource::<unlag::net::NetClock>().server_time;
        let mut remotes = world.query::<&unlag::net::RemoteClientClock>();
        let trips: Vec<Option<f64>> = remotes
            .iter(world)
            .map(|r| r.ack_window_rtt(now - 1.0, now))
            .collect();
        assert_eq!(trips.len(), 2, "{trips:?}");
        assert!(
            trips
                .iter()
                .all(|t| t.is_some_and(|t| (0.145..0.2).contains(&t))),
            "acknowledged trips {trips:?}"
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
    // Junk from many source addresses opens no link (only a connection request can).
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
    assert_eq!(unconnected_links(&mut session), 0, "junk opened links");
    let stats = session.server_world().resource::<ServerLinkStats>().clone();
    assert!(stats.udp_strangers_dropped >= 120, "{stats:?}");
    // Connection requests with forged tokens: each opens a link, which goes away when it does
    // not connect, and its address is forgotten.
    for socket in &flooders[..25] {
        socket
            .send_to(&forged_request(&mut rng), session.server_addr())
            .unwrap();
    }
    session.run_for(Duration::from_millis(200));
    assert_eq!(
        unconnected_links(&mut session),
        25,
        "forged requests not seen"
    );
    session.run_for(Duration::from_secs(2));
    assert_eq!(unconnected_links(&mut session), 0, "unconnected links left");
    let stats = session.server_world().resource::<ServerLinkStats>().clone();
    assert!(stats.unconnected_links_despawned >= 25, "{stats:?}");
    assert!(stats.udp_addresses_forgotten >= 25, "{stats:?}");
    assert_eq!(
        server_addresses(&mut session),
        2,
        "addresses of gone links kept"
    );

    // A flood of forged requests from 200 addresses over a second: links open at the rate
    // (after the burst) until the cap of links handshaking is reached, never beyond either.
    let refused_before = stats.udp_links_refused;
    let many: Vec<UdpSocket> = (0..200)
        .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect();
    let started = std::time::Instant::now();
    let mut sent = 0.0;
    let mut opened = 0.0;
    for batch in many.chunks(10) {
        for socket in batch {
            socket
                .send_to(&forged_request(&mut rng), session.server_addr())
                .unwrap();
            sent += 1.0;
        }
        let until = session_now() + Duration::from_millis(50);
        while session_now() < until {
            session.step();
            let handshaking = unconnected_links(&mut session);
            assert!(handshaking <= LIMITS.max_unconnected_links, "{handshaking}");
        }
        let refused = session
            .server_world()
            .resource::<ServerLinkStats>()
            .udp_links_refused
            - refused_before;
        opened = sent - refused as f64;
        let elapsed = started.elapsed().as_secs_f64();
        let most = LIMITS.new_link_burst + LIMITS.new_links_per_second * elapsed;
        assert!(
            opened <= most,
            "{opened} links opened in {elapsed:.2} s (at most {most:.0})"
        );
    }
    // The cap was what stopped the last ones.
    assert!(opened >= LIMITS.max_unconnected_links as f64, "{opened}");
    session.run_for(Duration::from_secs(2));
    assert_eq!(unconnected_links(&mut session), 0, "unconnected links left");
    assert_eq!(
        server_addresses(&mut session),
        2,
        "addresses of gone links kept"
    );
    assert!(session.all_synced(), "clients lost their connection");
    for i in 0..2 {
        let rtt = session.client_clock(i).rtt;
        assert!(
            (rtt - 0.150).abs() < 0.015,
            "client {i} RTT {rtt} after garbage"
        );
    }
}

/// Whether client `i` saw its connection end, and why.
fn disconnected(session: &mut UdpSession, i: usize) -> Option<DisconnectedReason> {
    let world = session.client_world_mut(i);
    let mut q = world.query_filtered::<&Disconnected, With<Client>>();
    q.iter(world).next().map(|d| d.reason.clone())
}

#[test]
fn a_server_asked_to_stop_tells_its_clients_and_exits() {
    let stop = StopRequest::default();
    let mut session = UdpSession::new(UdpSessionConfig {
        clients: 2,
        conditions: LinkConditions::new(Duration::from_millis(40), Duration::ZERO, 0.0),
        frame_rate_hz: 250.0,
        stop: Some(stop.clone()),
        ..Default::default()
    });
    assert!(
        session.run_until(Duration::from_secs(5), |s| s.all_synced()),
        "UDP clients did not sync"
    );
    session.run_for(Duration::from_millis(300));
    assert_eq!(
        *session.server_world().resource::<ServerStopState>(),
        ServerStopState::default(),
        "nothing stops before it is asked"
    );
    stop.ask();
    let asked = session_now();
    let mut exit_written = None;
    // The clients hear it from the server (netcode's disconnect) within the link's one-way
    // time and a few frames: far inside the 10-s timeout they would otherwise wait for.
    let mut told = false;
    while !told && session_now() - asked < Duration::from_secs(1) {
        session.step();
        if exit_written.is_none() && session.server_world().resource::<ServerStopState>().exited {
            exit_written = Some(session_now() - asked);
        }
        told = (0..2).all(|i| disconnected(&mut session, i).is_some());
    }
    let took = session_now() - asked;
    assert!(told, "the clients were not told within 1 s");
    for i in 0..2 {
        assert!(
            matches!(
                disconnected(&mut session, i),
                Some(DisconnectedReason::ByPeer(_))
            ),
            "client {i}: {:?} after {took:?}",
            disconnected(&mut session, i)
        );
    }
    session.run_for(Duration::from_millis(100));
    let state = session.server_world().resource::<ServerStopState>().clone();
    assert_eq!(state.clients_told, 2);
    assert!(state.exited, "{state:?}");
    // The servers stopped (not the frame cap): disconnect sent in the first frame, the netcode
    // server stopped in the next, the exit in the one after.
    assert!(state.frames.is_some_and(|f| f <= 3), "{state:?}");
    let world = session.server_world_mut();
    let mut servers = world.query_filtered::<(), (With<Server>, With<Stopped>)>();
    assert_eq!(servers.iter(world).count(), 1, "the server did not stop");
    assert!(exit_written.is_some(), "no AppExit within the run");
}
