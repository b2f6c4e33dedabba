//! Real UDP sockets on loopback in real time: the measured RTT matches the configured one
//! whatever clock the build compiled in, and garbage sent to the sockets changes nothing.

use core::time::Duration;
use std::net::UdpSocket;
use unlag::core::SplitMix64;
use unlag::net::LinkConditions;
use unlag_testbed::{UdpSession, UdpSessionConfig};

#[test]
fn real_time_rtt_and_garbage_datagrams() {
    let mut session = UdpSession::new(UdpSessionConfig {
        clients: 2,
        conditions: LinkConditions::new(Duration::from_millis(150), Duration::ZERO, 0.0),
        frame_rate_hz: 500.0,
        ..Default::default()
    });
    assert!(
        session.run_until(Duration::from_secs(5), |s| s.all_synced()),
        "UDP clients did not sync"
    );
    session.run_for(Duration::from_secs(2));
    for i in 0..2 {
        let rtt = session.client_clock(i).rtt;
        // Within 10 %, though each side waits for its next frame (2 ms apart) to handle a packet.
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
    session.run_for(Duration::from_secs(2));
    assert!(session.all_synced(), "clients lost their connection");
    for i in 0..2 {
        let rtt = session.client_clock(i).rtt;
        assert!(
            (rtt - 0.150).abs() < 0.015,
            "client {i} RTT {rtt} after garbage"
        );
    }
}
