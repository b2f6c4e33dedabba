//! Diagnostics for `unlag`: [`NetGraphPlugin`] keeps, on a client, the last seconds of how the
//! connection behaves — RTT, jitter, loss, corrections, proxy frames held or extrapolated for
//! want of a newer state, and bytes per second up and down — as curves a game can draw (like
//! Source's `net_graph`, but as history rather than one number each).
//!
//! ```no_run
//! use bevy::prelude::*;
//! use unlag_diagnostics::{NetGraph, NetGraphPlugin, NetSeries};
//!
//! fn show(graph: Res<NetGraph>) {
//!     if let Some(rtt) = graph.latest(NetSeries::Rtt) {
//!         info!("RTT {rtt:.0} ms over the last {:.1} s", graph.span());
//!     }
//! }
//!
//! # let mut app = App::new();
//! app.add_plugins(NetGraphPlugin::default()).add_systems(Update, show);
//! ```
//!
//! It reads what the other plugins keep: [`NetClock`] (RTT, jitter, loss),
//! [`MovementStats`] (corrections),
//! [`RenderedPose`] (held and extrapolated frames) and the
//! client link's [`LinkTraffic`] (bytes on the wire). A figure whose
//! source is missing (e.g. no movement plugin) stays at zero.

#[cfg(feature = "ui")]
mod ui;
#[cfg(feature = "ui")]
pub use ui::{NetGraphBar, NetGraphLabel, NetGraphUi, NetGraphUiPlugin, scale_top};

use bevy::prelude::*;
use lightyear::prelude::Client;
use std::collections::VecDeque;
use unlag_movement::MovementStats;
use unlag_net::{LinkTraffic, NetClock};
use unlag_smoothing::{ProxySmoothingSystems, RenderedPose, SampleKind};

/// One curve of the net graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NetSeries {
    /// Smoothed round-trip time, milliseconds.
    Rtt,
    /// Jitter of the round-trip time, milliseconds.
    Jitter,
    /// Share of the server's datagrams lost on the way, percent, over about the last
    /// [`LOSS_MEMORY`] seconds (the server's beats' share, as the clock measures it, until
    /// the first datagrams are judged).
    Loss,
    /// Corrections the server sent this client, per second.
    Corrections,
    /// Proxy frames held or extrapolated for want of a newer state, percent of proxy frames.
    Starved,
    /// Bytes per second this client sent, on the wire (headers included).
    BytesUp,
    /// Bytes per second this client received, on the wire (headers included).
    BytesDown,
}

impl NetSeries {
    /// Every curve, in the order a graph shows them.
    pub const ALL: [NetSeries; 7] = [
        NetSeries::Rtt,
        NetSeries::Jitter,
        NetSeries::Loss,
        NetSeries::Corrections,
        NetSeries::Starved,
        NetSeries::BytesUp,
        NetSeries::BytesDown,
    ];

    /// A short label for the curve.
    pub fn label(self) -> &'static str {
        match self {
            NetSeries::Rtt => "RTT",
            NetSeries::Jitter => "jitter",
            NetSeries::Loss => "loss",
            NetSeries::Corrections => "corrections",
            NetSeries::Starved => "held/extrapolated",
            NetSeries::BytesUp => "up",
            NetSeries::BytesDown => "down",
        }
    }

    /// The curve's unit.
    pub fn unit(self) -> &'static str {
        match self {
            NetSeries::Rtt | NetSeries::Jitter => "ms",
            NetSeries::Loss | NetSeries::Starved => "%",
            NetSeries::Corrections => "/s",
            NetSeries::BytesUp | NetSeries::BytesDown => "B/s",
        }
    }
}

/// How much the net graph keeps and how often it samples.
#[derive(Resource, Clone, Debug, PartialEq)]
pub struct NetGraphSettings {
    /// History kept, seconds (default 10).
    pub window: f64,
    /// Time between two samples, seconds (default 0.1). Rates (corrections, bytes, starved
    /// frames) are taken over this interval.
    pub sample_interval: f64,
}

impl Default for NetGraphSettings {
    fn default() -> Self {
        Self {
            window: 10.0,
            sample_interval: 0.1,
        }
    }
}

impl unlag_net::Validate for NetGraphSettings {
    fn validate(&self) -> Result<(), unlag_net::SettingsError> {
        let f = unlag_net::Fields::new("NetGraphSettings");
        f.above("window", self.window, 0.0, 3600.0, "s")?;
        // At least a millisecond: the graph keeps window / sample_interval samples a series.
        f.within(
            "sample_interval",
            self.sample_interval,
            1e-3,
            self.window,
            "s",
        )
    }
}

/// The last [`NetGraphSettings::window`] seconds of every [`NetSeries`], sampled every
/// [`NetGraphSettings::sample_interval`] on the App's clock.
#[derive(Resource, Debug, Default)]
pub struct NetGraph {
    /// Per series (in [`NetSeries::ALL`] order): (App time, seconds; value).
    samples: [VecDeque<(f64, f64)>; 7],
    /// Counters at the last sample.
    last: Option<Counters>,
    /// Proxy frames drawn since the last sample, and how many of them were starved.
    proxy_frames: u64,
    starved_frames: u64,
    /// Datagrams from the server judged, and of them lost, weighed by age (halving about every
    /// 0.7 × [`LOSS_MEMORY`] seconds).
    loss_judged: f64,
    loss_lost: f64,
}

/// How long the graph's loss remembers, seconds: losses older weigh less, by e each
/// `LOSS_MEMORY`. The server's datagrams (several times as many as its ten beats a second) over
/// about this long: at 5 % loss the curve wanders by about ±2 %, where the beats' own estimate
/// (the clock's, over about 5 s) wanders by about ±3 %, and it shows a change within a second
/// or two.
pub const LOSS_MEMORY: f64 = 2.0;

/// Cumulative counters, read at each sample.
#[derive(Clone, Copy, Debug)]
struct Counters {
    time: f64,
    corrections: u64,
    bytes_up: u64,
    bytes_down: u64,
    /// The server's datagrams judged and judged lost (the totals of each link's
    /// `LinkTraffic::datagram_loss`).
    datagrams_judged: u64,
    datagrams_lost: u64,
}

impl NetGraph {
    /// The samples of `series`, oldest first: (App time, seconds; value in the series' unit).
    pub fn series(&self, series: NetSeries) -> impl Iterator<Item = (f64, f64)> + '_ {
        self.samples[series as usize].iter().copied()
    }

    /// The newest value of `series`.
    pub fn latest(&self, series: NetSeries) -> Option<f64> {
        self.samples[series as usize].back().map(|s| s.1)
    }

    /// The smallest and largest value of `series` in the window.
    pub fn range(&self, series: NetSeries) -> Option<(f64, f64)> {
        self.series(series).fold(None, |r, (_, v)| match r {
            None => Some((v, v)),
            Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
        })
    }

    /// The mean of `series` over the window.
    pub fn mean(&self, series: NetSeries) -> Option<f64> {
        let s = &self.samples[series as usize];
        (!s.is_empty()).then(|| s.iter().map(|x| x.1).sum::<f64>() / s.len() as f64)
    }

    /// Seconds between the oldest and the newest sample.
    pub fn span(&self) -> f64 {
        let s = &self.samples[0];
        match (s.front(), s.back()) {
            (Some(a), Some(b)) => b.0 - a.0,
            _ => 0.0,
        }
    }

    /// Forgets every sample.
    pub fn clear(&mut self) {
        *self = Self::default();
    }

    fn push(&mut self, time: f64, values: [f64; 7], window: f64) {
        for (samples, value) in self.samples.iter_mut().zip(values) {
            samples.push_back((time, value));
            while samples.front().is_some_and(|s| s.0 < time - window) {
                samples.pop_front();
            }
        }
    }
}

/// Keeps a [`NetGraph`] on a client (does nothing on a server). Add it after the `unlag`
/// plugins whose figures it shows.
#[derive(Default, Clone)]
pub struct NetGraphPlugin {
    /// Window and sampling.
    pub settings: NetGraphSettings,
}

impl Plugin for NetGraphPlugin {
    fn build(&self, app: &mut App) {
        unlag_net::ValidatedSettingsAppExt::insert_validated(app, self.settings.clone())
            .init_resource::<NetGraph>()
            .add_systems(
                PostUpdate,
                sample
                    .run_if(any_with_component::<Client>)
                    .after(ProxySmoothingSystems::Place),
            );
    }
}

/// `PostUpdate` on a client, after the proxies are placed: counts this frame's proxy frames
/// and, every sample interval, appends one sample to each series.
fn sample(
    time: Res<Time>,
    settings: Res<NetGraphSettings>,
    clock: Option<Res<NetClock>>,
    movement: Option<Res<MovementStats>>,
    links: Query<&LinkTraffic, With<Client>>,
    proxies: Query<&RenderedPose>,
    mut graph: ResMut<NetGraph>,
) {
    for pose in &proxies {
        graph.proxy_frames += 1;
        graph.starved_frames += u64::from(matches!(
            pose.kind,
            SampleKind::Held | SampleKind::Extrapolated
        ));
    }
    let now = time.elapsed_secs_f64();
    let (mut bytes_up, mut bytes_down, mut datagrams_judged, mut datagrams_lost) = (0, 0, 0, 0);
    for t in &links {
        let (judged, lost) = t.datagram_loss.totals();
        bytes_up += t.bytes_sent;
        bytes_down += t.bytes_received;
        datagrams_judged += judged;
        datagrams_lost += lost;
    }
    let counters = Counters {
        time: now,
        corrections: movement.map_or(0, |m| m.corrections_received),
        bytes_up,
        bytes_down,
        datagrams_judged,
        datagrams_lost,
    };
    let Some(last) = graph.last else {
        graph.last = Some(counters);
        return;
    };
    let dt = now - last.time;
    if dt < settings.sample_interval.max(1e-3) {
        return;
    }
    let rate = |now: u64, then: u64| now.saturating_sub(then) as f64 / dt;
    let starved = if graph.proxy_frames == 0 {
        0.0
    } else {
        graph.starved_frames as f64 * 100.0 / graph.proxy_frames as f64
    };
    let keep = (-dt / LOSS_MEMORY).exp();
    graph.loss_judged =
        graph.loss_judged * keep + datagrams_judged.saturating_sub(last.datagrams_judged) as f64;
    graph.loss_lost =
        graph.loss_lost * keep + datagrams_lost.saturating_sub(last.datagrams_lost) as f64;
    let (rtt, jitter, loss) = clock
        .as_deref()
        .filter(|c| c.synced)
        .map_or((0.0, 0.0, 0.0), |c| {
            let loss = if graph.loss_judged > 0.0 {
                graph.loss_lost / graph.loss_judged
            } else {
                c.loss
            };
            (c.rtt * 1e3, c.jitter * 1e3, loss * 1e2)
        });
    let values = [
        rtt,
        jitter,
        loss,
        rate(counters.corrections, last.corrections),
        starved,
        rate(counters.bytes_up, last.bytes_up),
        rate(counters.bytes_down, last.bytes_down),
    ];
    let window = settings.window.max(settings.sample_interval);
    graph.push(now, values, window);
    graph.last = Some(counters);
    graph.proxy_frames = 0;
    graph.starved_frames = 0;
}
