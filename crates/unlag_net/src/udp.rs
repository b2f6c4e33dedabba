//! A UDP server transport for lightyear whose state per source address is bounded.
//!
//! lightyear 0.30.1's `ServerUdpIo` (`lightyear_udp/src/server.rs`) spawns a link entity for
//! the first datagram of every new source address, whatever it holds, and remembers the
//! address in a private map that is pruned only when that same address sends again after its
//! entity is gone. A flood from many source addresses (one host has 64 k ports; a spoofed
//! flood has any number) therefore spawns an entity per datagram with no limit in the frame,
//! and grows the map for the life of the process, even after [`despawn_unconnected_links`]
//! despawns the entities. lightyear offers no setting for either, and the map is private.
//!
//! [`ServerUdpSocket`] replaces it (same link model: one [`LinkOf`] child per remote address,
//! with [`PeerAddr`] and the datagrams in its [`Link`]), and bounds what it keeps:
//! - a link is opened only for a datagram that is a netcode connection request (the only
//!   packet with which a client can start);
//! - new links are opened at most at [`UdpServerLimits::new_links_per_second`] (with a burst),
//!   and never while [`UdpServerLimits::max_unconnected_links`] are still handshaking;
//! - an address is forgotten in the frame its link entity is gone.
//!
//! [`despawn_unconnected_links`]: crate::link::despawn_unconnected_links

use std::net::{SocketAddr, UdpSocket};

use bevy::platform::collections::HashMap;
use bevy::prelude::*;
use lightyear::link::{Link, LinkStart, LinkSystems, Linked, RecvPayload, Unlink};
use lightyear::prelude::{Connected, LinkOf, LocalAddr, PeerAddr, Server};
use lightyear_core::time::Instant;

use crate::ServerLinkStats;

/// Largest datagram read, bytes (lightyear's UDP MTU).
const MTU: usize = 1472;

/// netcode's version string, which follows the zero prefix of a connection request.
const NETCODE_VERSION: &[u8; 13] = b"NETCODE 1.02\0";

/// The size of a netcode connection request, bytes: prefix, version, protocol id, expiry,
/// nonce and the 1024-byte private token.
pub const CONNECTION_REQUEST_BYTES: usize = 1 + 13 + 8 + 8 + 24 + 1024;

/// Whether `datagram` is shaped as a netcode connection request (its prefix, version and
/// size; the token inside is netcode's to check): the only datagram for which a
/// [`ServerUdpSocket`] opens a link to a new address.
pub fn is_connection_request(datagram: &[u8]) -> bool {
    datagram.len() == CONNECTION_REQUEST_BYTES
        && datagram[0] == 0
        && &datagram[1..1 + NETCODE_VERSION.len()] == NETCODE_VERSION
}

/// Limits on the links a [`ServerUdpSocket`] opens for new source addresses.
#[derive(Clone, Debug, PartialEq)]
pub struct UdpServerLimits {
    /// New links opened per second at most, sustained (default 20 /s: a match fills in a few
    /// seconds; a client retries its request ten times a second until it is let in).
    pub new_links_per_second: f64,
    /// New links that may open at once beyond the sustained rate (default 64).
    pub new_link_burst: f64,
    /// Links still in netcode's handshake at most: beyond it a new address waits (its client
    /// retries) until one connects or times out (default 256).
    pub max_unconnected_links: usize,
}

impl Default for UdpServerLimits {
    fn default() -> Self {
        Self {
            new_links_per_second: 20.0,
            new_link_burst: 64.0,
            max_unconnected_links: 256,
        }
    }
}

impl UdpServerLimits {
    /// The error naming the first field out of its range, if any.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.new_links_per_second.is_finite() && self.new_links_per_second > 0.0) {
            return Err(format!(
                "UdpServerLimits.new_links_per_second = {} (must be finite and > 0 /s)",
                self.new_links_per_second
            ));
        }
        if !(self.new_link_burst.is_finite() && self.new_link_burst >= 1.0) {
            return Err(format!(
                "UdpServerLimits.new_link_burst = {} (must be finite and ≥ 1)",
                self.new_link_burst
            ));
        }
        if self.max_unconnected_links == 0 {
            return Err("UdpServerLimits.max_unconnected_links = 0 (must be ≥ 1)".into());
        }
        Ok(())
    }
}

/// A lightyear server's UDP socket, in place of lightyear's `ServerUdpIo`: put it on the
/// server entity with a [`LocalAddr`] (and netcode) and trigger lightyear's `Start`. It opens a
/// link only for a netcode connection request, at most [`UdpServerLimits::new_links_per_second`]
/// and never while [`UdpServerLimits::max_unconnected_links`] are still handshaking, and forgets
/// an address the frame its link is gone; its refusals are counted in [`ServerLinkStats`]. If the
/// address cannot be bound, it logs why and writes [`AppExit::error`].
/// Needs [`UnlagNetPlugin`](crate::UnlagNetPlugin).
#[derive(Component)]
#[require(Server)]
pub struct ServerUdpSocket {
    socket: Option<UdpSocket>,
    /// The link entity of each remote address.
    links: HashMap<SocketAddr, Entity>,
    limits: UdpServerLimits,
    /// New links that may open now (refilled at the limits' rate, up to the burst).
    allowance: f64,
    /// Real time of the last refill, seconds.
    refilled: Option<f64>,
}

impl ServerUdpSocket {
    /// A socket (bound when the server starts) with `limits`.
    ///
    /// # Panics
    /// If `limits` are out of range ([`UdpServerLimits::validate`]).
    pub fn new(limits: UdpServerLimits) -> Self {
        if let Err(e) = limits.validate() {
            panic!("invalid {e}");
        }
        Self {
            socket: None,
            links: HashMap::default(),
            allowance: limits.new_link_burst,
            limits,
            refilled: None,
        }
    }

    /// Remote addresses with a link now.
    pub fn addresses(&self) -> usize {
        self.links.len()
    }
}

impl Default for ServerUdpSocket {
    fn default() -> Self {
        Self::new(UdpServerLimits::default())
    }
}

/// Marks the link entities a [`ServerUdpSocket`] opened, for its send system.
#[derive(Component)]
pub struct ServerUdpLink;

pub(crate) fn register(app: &mut App) {
    app.add_observer(bind)
        .add_observer(close)
        .add_systems(
            PreUpdate,
            receive
                .in_set(LinkSystems::Receive)
                .run_if(any_with_component::<ServerUdpSocket>),
        )
        .add_systems(
            PostUpdate,
            send.in_set(LinkSystems::Send)
                .run_if(any_with_component::<ServerUdpSocket>),
        );
}

fn bind(
    start: On<LinkStart>,
    mut servers: Query<(&mut ServerUdpSocket, &mut LocalAddr), Without<Linked>>,
    mut commands: Commands,
) {
    let Ok((mut server, mut local)) = servers.get_mut(start.entity) else {
        return;
    };
    match UdpSocket::bind(local.0).and_then(|s| {
        s.set_nonblocking(true)?;
        Ok(s)
    }) {
        Ok(socket) => {
            if let Ok(address) = socket.local_addr() {
                local.0 = address;
            }
            info!("server UDP socket bound to {}", local.0);
            server.socket = Some(socket);
            commands.entity(start.entity).insert(Linked);
        }
        // A server that cannot listen has nothing to do: say why and end the App (lightyear's
        // own transport panics here).
        Err(e) => {
            error!("cannot bind the server's UDP socket to {}: {e}", local.0);
            commands.write_message(AppExit::error());
        }
    }
}

fn close(unlink: On<Unlink>, mut servers: Query<&mut ServerUdpSocket>) {
    if let Ok(mut server) = servers.get_mut(unlink.entity) {
        server.socket = None;
        server.links.clear();
    }
}

/// PreUpdate (lightyear's link receive): reads every datagram waiting on the socket into its
/// address's link, opening links for connection requests from new addresses within the
/// limits.
fn receive(
    mut commands: Commands,
    real: Res<Time<Real>>,
    mut stats: ResMut<ServerLinkStats>,
    mut servers: Query<(Entity, &mut ServerUdpSocket), With<Linked>>,
    mut links: Query<&mut Link, With<ServerUdpLink>>,
    unconnected: Query<(), (With<ServerUdpLink>, Without<Connected>)>,
) {
    let now = real.elapsed_secs_f64();
    for (server_entity, mut server) in &mut servers {
        let server = &mut *server;
        // Addresses whose link is gone (timed out, disconnected, despawned by the game).
        let before = server.links.len();
        server.links.retain(|_, entity| links.contains(*entity));
        stats.udp_addresses_forgotten += (before - server.links.len()) as u64;
        let elapsed = server.refilled.map_or(0.0, |t| (now - t).max(0.0));
        server.refilled = Some(now);
        server.allowance = (server.allowance + elapsed * server.limits.new_links_per_second)
            .min(server.limits.new_link_burst);
        let mut handshaking = unconnected.iter().count();
        let Some(socket) = server.socket.as_ref() else {
            continue;
        };
        let mut buffer = [0u8; MTU];
        loop {
            let (len, address) = match socket.recv_from(&mut buffer) {
                Ok(received) => received,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                // An ICMP "port unreachable" from a client that left (Windows): harmless.
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => continue,
                Err(e) => {
                    error!("error receiving on the server's UDP socket: {e}");
                    break;
                }
            };
            let datagram = &buffer[..len];
            if let Some(&entity) = server.links.get(&address) {
                if let Ok(mut link) = links.get_mut(entity) {
                    link.recv.push(RecvPayload::from(datagram), Instant::now());
                }
                // Else spawned this frame: its next datagram (clients resend) goes in.
                continue;
            }
            if !is_connection_request(datagram) {
                stats.udp_strangers_dropped += 1;
                continue;
            }
            if server.allowance < 1.0 || handshaking >= server.limits.max_unconnected_links {
                crate::warn_counted!(
                    stats.udp_links_refused,
                    "refused to open a link for {address}: more than {}/s new links or {} \
                     handshaking",
                    server.limits.new_links_per_second,
                    server.limits.max_unconnected_links
                );
                continue;
            }
            server.allowance -= 1.0;
            handshaking += 1;
            let mut link = Link::default();
            link.recv.push(RecvPayload::from(datagram), Instant::now());
            let entity = commands
                .spawn((
                    LinkOf {
                        server: server_entity,
                    },
                    link,
                    Linked,
                    PeerAddr(address),
                    ServerUdpLink,
                ))
                .id();
            debug!("new UDP link {entity} for {address}");
            server.links.insert(address, entity);
        }
    }
}

/// PostUpdate (lightyear's link send): sends what each link queued to its address.
fn send(
    servers: Query<(&ServerUdpSocket, &Server), With<Linked>>,
    mut links: Query<(&mut Link, &PeerAddr), With<ServerUdpLink>>,
    mut warned: Local<u64>,
) {
    for (server, clients) in &servers {
        let Some(socket) = server.socket.as_ref() else {
            continue;
        };
        for &entity in clients.collection() {
            let Ok((mut link, address)) = links.get_mut(entity) else {
                continue;
            };
            for payload in link.send.drain() {
                if let Err(e) = socket.send_to(&payload, address.0) {
                    crate::warn_counted!(*warned, "error sending to {}: {e}", address.0);
                }
            }
        }
    }
}
