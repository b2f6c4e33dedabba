//! What the testbed measures per client: RTT, jitter, the error of the client's server-time
//! estimate against the true server time, and traffic by message kind.

use bevy::prelude::*;
use core::time::Duration;
use lightyear::prelude::*;
use unlag_core::Summary;
use unlag_net::{LinkTraffic, NetClock};

/// Bytes per second of one message kind.
#[derive(Clone, Debug, PartialEq)]
pub struct KindRate {
    /// Short type name of the message.
    pub kind: &'static str,
    /// Messages per second.
    pub messages_per_sec: f64,
    /// Payload bytes per second.
    pub bytes_per_sec: f64,
}

/// Figures measured for one client over a span of simulated time.
#[derive(Clone, Debug, Default)]
pub struct ClientMeasures {
    /// Length of the span, seconds.
    pub seconds: f64,
    /// RTT the client measures now, seconds.
    pub rtt: f64,
    /// RTT the client measured, per frame while synced, seconds.
    pub rtt_over_time: Summary,
    /// Jitter the client measures now, seconds.
    pub jitter: f64,
    /// Client's estimate of server time minus the true server time, per frame while synced,
    /// seconds (signed: `mean` is the bias, `min`/`max` the extremes).
    pub server_time_error: Summary,
    /// Upstream (client → server) bytes per second on the wire, headers included.
    pub bytes_up_per_sec: f64,
    /// Downstream (server → client) bytes per second on the wire, headers included.
    pub bytes_down_per_sec: f64,
    /// Upstream datagrams per second.
    pub datagrams_up_per_sec: f64,
    /// Downstream datagrams per second.
    pub datagrams_down_per_sec: f64,
    /// Upstream payload by message kind.
    pub up_by_kind: Vec<KindRate>,
    /// Downstream payload by message kind.
    pub down_by_kind: Vec<KindRate>,
    /// Malformed datagrams dropped by the client and by the server's link to it.
    pub malformed_dropped: u64,
    /// Whether the client was still connected at the end of the span: its own link says so
    /// and the server still has its link. A link that dropped (a netcode timeout) leaves the
    /// traffic figures covering only the time until then.
    pub connected: bool,
}

/// The server's time now, seconds (see [`unlag_net::server_time_of_world`]).
pub fn server_time(server: &World) -> f64 {
    unlag_net::server_time_of_world(server)
}

fn client_traffic(client: &World) -> LinkTraffic {
    let mut q = client
        .try_query_filtered::<&LinkTraffic, With<Client>>()
        .expect("LinkTraffic registered");
    q.iter(client).next().cloned().unwrap_or_default()
}

/// Whether the client's link is connected, and the server's link to it (if any) still there.
fn still_connected(client: &World, server: Option<(&World, Entity)>) -> bool {
    let client_side = client
        .try_query_filtered::<(), (With<Client>, With<Connected>)>()
        .is_some_and(|mut q| q.iter(client).next().is_some());
    let server_side = server.is_none_or(|(w, e)| w.get::<LinkTraffic>(e).is_some());
    client_side && server_side
}

fn link_traffic(server: Option<(&World, Entity)>) -> LinkTraffic {
    server
        .and_then(|(w, e)| w.get::<LinkTraffic>(e).cloned())
        .unwrap_or_default()
}

fn rates(now: &LinkTraffic, base: &LinkTraffic, seconds: f64) -> Vec<KindRate> {
    let mut out: Vec<KindRate> = now
        .sent_by_kind
        .iter()
        .map(|(kind, t)| {
            let b = base.sent_by_kind.get(kind).copied().unwrap_or_default();
            KindRate {
                kind,
                messages_per_sec: t.messages.saturating_sub(b.messages) as f64 / seconds,
                bytes_per_sec: t.bytes.saturating_sub(b.bytes) as f64 / seconds,
            }
        })
        .collect();
    out.sort_by(|a, b| a.kind.cmp(b.kind));
    out
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Recorder {
    since: Duration,
    errors: Vec<f64>,
    rtts: Vec<f64>,
    client_base: LinkTraffic,
    server_base: LinkTraffic,
}

impl Recorder {
    pub(crate) fn sample(&mut self, client: &World, true_server_time: f64) {
        let clock = client.resource::<NetClock>();
        if clock.synced {
            self.errors.push(clock.server_time - true_server_time);
            self.rtts.push(clock.rtt);
        }
    }

    pub(crate) fn reset(
        &mut self,
        now: Duration,
        client: &World,
        server: Option<(&World, Entity)>,
    ) {
        self.since = now;
        self.errors.clear();
        self.rtts.clear();
        self.client_base = client_traffic(client);
        self.server_base = link_traffic(server);
    }

    pub(crate) fn report(
        &self,
        now: Duration,
        client: &World,
        server: Option<(&World, Entity)>,
    ) -> ClientMeasures {
        let seconds = (now - self.since).as_secs_f64().max(1e-9);
        let clock = client.resource::<NetClock>();
        let up = client_traffic(client);
        let down = link_traffic(server);
        ClientMeasures {
            seconds,
            rtt: clock.rtt,
            rtt_over_time: Summary::of(&self.rtts),
            jitter: clock.jitter,
            server_time_error: Summary::of(&self.errors),
            // A link that dropped and came back counts afresh: never below zero.
            bytes_up_per_sec: up.bytes_sent.saturating_sub(self.client_base.bytes_sent) as f64
                / seconds,
            bytes_down_per_sec: down.bytes_sent.saturating_sub(self.server_base.bytes_sent) as f64
                / seconds,
            datagrams_up_per_sec: up
                .datagrams_sent
                .saturating_sub(self.client_base.datagrams_sent)
                as f64
                / seconds,
            datagrams_down_per_sec: down
                .datagrams_sent
                .saturating_sub(self.server_base.datagrams_sent)
                as f64
                / seconds,
            up_by_kind: rates(&up, &self.client_base, seconds),
            down_by_kind: rates(&down, &self.server_base, seconds),
            malformed_dropped: up.malformed_dropped + down.malformed_dropped,
            connected: still_connected(client, server),
        }
    }
}
