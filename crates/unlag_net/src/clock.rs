//! [`NetClock`]: server time, RTT, jitter and view time on the client; and per connected client
//! on the server, [`RemoteClientClock`].
//!
//! Definitions (seconds on the server's clock; see also [`unlag_core::delay`]):
//!
//! - **server time**: on the server its own simulation time (last tick × tick duration + the
//!   virtual time since); on a client the estimate of the server's current time: each
//!   [`NetBeat`] carries the server's exact time when sent, the client adds half the RTT and
//!   averages the resulting clock offsets ([`ServerClockEstimator`]).
//! - **one-way trip**: RTT / 2. The newest state a client can hold was sent at about
//!   `server_time − one_way`: no client can see the server closer than that. The client
//!   estimates that moment, the **present** ([`NetClock::present`]), straight from the beats'
//!   stamps and when they were read, without the RTT (whose estimate moves by steps).
//! - **interpolation delay**: how far the view time sits behind that newest receivable state,
//!   beyond the one-way trip. It adapts to the send interval, jitter and loss
//!   ([`DelayPolicy`]) and moves smoothly so view time never jumps.
//! - **view time** = `present − interpolation_delay`: when simulated proxies are
//!   shown, and the time every shot is judged at.
//!
//! The server learns each client's interpolation delay from a small periodic report, and
//! estimates that client's view time as `server_time − rtt / 2 − reported_delay`
//! ([`RemoteClientClock::view_time`]); later plugins reject shots whose claimed view time is far
//! from it. The same reports (about 15 a second) carry the view time on screen when they left: how
//! late after that stamp they arrive ([`RemoteClientClock::view_lag_range`]) spans only the
//! up-link's jitter, so a shot stamped older than it really is shows up whatever the clock
//! estimates' errors.

use crate::link::LinkTraffic;
use crate::protocol::{NetDirection, NetMessageAppExt, UnreliableChannel};
use bevy::prelude::*;
use lightyear::core::tick::TickDuration;
use lightyear::prelude::server::ClientOf;
use lightyear::prelude::*;
use serde::{Deserialize, Serialize};
use unlag_core::{
    DelayController, DelayPolicy, Ewma, FramePace, Seq16, SeqUnwrapper, ServerClockEstimator,
};

/// Largest interpolation delay a client may report, seconds; larger reports are clamped (and
/// see [`plausible_delay`]).
pub const MAX_REPORTED_DELAY: f64 = 3.0;

/// How much of an interpolation delay of `delay` seconds the server does not compensate, when
/// it compensates at most `cap` seconds ([`RemoteClientClock::delay_cap`], announced to the
/// client in each [`NetBeat`]): a shot drawn with that delay is judged this much later than its
/// view time, and its shooter traces it there too. 0 when either is unknown or not finite.
///
/// A client needs a longer delay than the server's evidence of its link justifies when its
/// downlink loses states in bursts or its states arrive late in ways the server cannot see:
/// it still draws every frame on states (no starved frames, no pops), and is compensated as
/// far as the cap, as a client above the rewind cap is. A client that reports a longer delay
/// than it draws, to have its shots judged further in the past, gains no more than the cap's
/// margin over the delay its link needs ([`plausible_delay`]).
pub fn delay_shortfall(delay: f64, cap: Option<f64>) -> f64 {
    match cap {
        Some(cap) if delay.is_finite() && cap.is_finite() => {
            (delay.min(MAX_REPORTED_DELAY) - cap.max(0.0)).max(0.0)
        }
        _ => 0.0,
    }
}

/// How fast the server lets the longest plausible delay shrink after its update rate went up,
/// seconds per second: as fast as a client's delay may shrink (`DelayPolicy`'s default
/// `max_decrease_rate`), so an honest client's delay stays plausible while it adapts.
pub const PLAUSIBLE_DELAY_DECAY: f64 = 0.05;

/// Slack of [`plausible_delay`] beyond what the server's evidence shows, seconds.
pub const PLAUSIBLE_DELAY_SLACK: f64 = 0.02;

/// The longest interpolation delay the server compensates, seconds, for states sent every
/// `update_interval` seconds over a link whose trips spread `spread` seconds above their usual
/// (the server passes twice the pings' jitter or the move stream's spread, whichever is
/// larger: its own measures) from a server whose frames last `server_frame` seconds: what an
/// honest client on that link needs (an interval, what bridges a lost state
/// ([`unlag_core::repeat_after`] or one more interval), the spread, and the frame beyond an
/// interval by which a slow listen host sends its states in pairs) and
/// [`PLAUSIBLE_DELAY_SLACK`], at most [`MAX_REPORTED_DELAY`]. Non-finite or negative inputs
/// count as zero.
///
/// A shot drawn with a longer delay is judged later than drawn by the difference
/// ([`delay_shortfall`]), so a client that reports a longer delay than it draws gains at most
/// the slack over what its link needs; one whose downlink really needs more (loss in bursts the
/// server cannot see) draws with it, without a starved frame, and is compensated up to here.
pub fn plausible_delay(update_interval: f64, spread: f64, server_frame: f64) -> f64 {
    let clean = unlag_core::finite_non_negative;
    let (interval, spread, frame) = (clean(update_interval), clean(spread), clean(server_frame));
    let bridge = unlag_core::repeat_after(interval).unwrap_or(interval);
    (interval + bridge + spread + (frame - interval).max(0.0) + PLAUSIBLE_DELAY_SLACK)
        .min(MAX_REPORTED_DELAY)
}

/// The longest delay the server compensates for one proxy sent every `interval` seconds, when
/// it compensates `cap` seconds for the proxies sent every `nominal` seconds (the server's
/// update interval: [`RemoteClientClock::delay_cap`]), from a server whose frames last
/// `server_frame` seconds: `cap` and what [`plausible_delay`] grants more for the longer
/// interval (its interval and the state bridging a loss; never less than `cap`), at most
/// [`MAX_REPORTED_DELAY`]. Non-finite or negative inputs count as zero.
///
/// A client draws a slower proxy (one sent at a reduced rate, or of a slower rate of its own)
/// with a longer delay than the others, and a shot claims it drawn that much earlier; the
/// server compensates that delay up to here, and judges a claim drawn with a longer one
/// later by the rest, as it does a whole shot beyond `cap` ([`delay_shortfall`]). Both sides
/// apply it: the client with the interval it reads from the proxy's states, the server with
/// the longest it sent them at lately (never shorter), so the server never compensates less
/// than the client counted on.
pub fn claim_delay_cap(cap: f64, interval: f64, nominal: f64, server_frame: f64) -> f64 {
    let clean = unlag_core::finite_non_negative;
    let more =
        plausible_delay(interval, 0.0, server_frame) - plausible_delay(nominal, 0.0, server_frame);
    (clean(cap) + clean(more)).min(MAX_REPORTED_DELAY)
}

/// How much later than usual a client's packets may arrive, as the server measures it,
/// seconds: twice the pings' jitter, or the spread of its move stream above the median
/// ([`RemoteClientClock::uplink_spread`]), whichever is larger (the pings' jitter reads a
/// fraction of a heavily jittered link's spread).
fn link_spread(remote: &RemoteClientClock) -> f64 {
    let clean = unlag_core::finite_non_negative;
    (2.0 * clean(remote.jitter)).max(clean(remote.uplink_spread))
}

/// Seconds between two [`NetBeat`]s from the server.
pub const BEAT_INTERVAL: f64 = 0.1;

/// Seconds between two [`DelayReport`]s from a client (besides those a moved delay sends at
/// once): the delay moves slowly, and each report sent on its own costs a datagram's headers.
/// A report rides with the client's moves (sent every 1/30 s): one send in two or three
/// carries one, about 14 a second at 60 fps, where every one of the 24 had carried one at
/// 1/30 s (the rifle held down at 60 fps with 10 % frame jitter: `DelayReport` 301 → 199 B/s,
/// the upstream 3281 → 3158). The view reports' window still holds some 30 of them
/// ([`VIEW_LAG_WINDOW`]), and what fewer leave unseen of the link's spread is added
/// ([`UNSEEN_TAIL_STEPS`]).
pub const REPORT_INTERVAL: f64 = 1.0 / 20.0;

/// A change of the interpolation delay this large is reported at once, seconds.
pub const REPORT_CHANGE: f64 = 0.002;

/// Shortest time between two delay reports, seconds.
pub const MIN_REPORT_GAP: f64 = 0.02;

/// Longest a due delay report waits for a frame that sends the server something else, seconds:
/// beyond it, it goes in a datagram of its own. A playing client sends its moves every
/// `send_interval` (1/30 s by default) and its shots as they are fired, and a report rides
/// with them, so its headers are not paid twice; a client with nothing else to send (no
/// character yet) still reports this often.
pub const REPORT_ALONE_AFTER: f64 = 0.1;

/// Time and link figures of this App, updated every frame in `PreUpdate`.
///
/// On a client: estimates of the server's time and of the link (server time: each [`NetBeat`]'s
/// exact server time plus half the RTT, averaged; the present, about server time − RTT / 2,
/// from the beats' stamps alone; view time = present − interpolation delay: when simulated
/// proxies are shown and shots are judged). On the server:
/// its own time, with RTT and delays at zero.
#[derive(Resource, Clone, Debug, Default, Reflect)]
pub struct NetClock {
    /// Whether the figures are meaningful: always on the server; on a client once it is
    /// connected and has a server-time estimate.
    pub synced: bool,
    /// Server time, seconds (see the module docs).
    pub server_time: f64,
    /// On a client: the server time of the newest state it can hold now, seconds, estimated
    /// straight from the beats' stamps and when they were read (`None` on the server and
    /// until a beat came: [`NetClock::present`] is then `server_time − one_way`).
    ///
    /// Not `server_time − rtt / 2`: the server time estimate averages each beat's stamp plus
    /// half the RTT of its moment, so subtracting half of today's RTT moved the view time by
    /// half of every change in lightyear's RTT estimate (10 ms steps under ±125 ms of
    /// jitter), while the present's own samples never needed the RTT. Shots and view reports
    /// are stamped with a view time derived from it, and the server holds a shot's lag to the
    /// lags of the reports that came before it: a view time that wanders against real time
    /// shows as a shot lagging less than every report of its window.
    pub receivable_time: Option<f64>,
    /// Duration of one simulation tick, seconds.
    pub tick_duration: f64,
    /// Smoothed round-trip time, seconds.
    pub rtt: f64,
    /// Jitter of the round-trip time, seconds (lightyear: half the mean deviation).
    pub jitter: f64,
    /// Share (0–1) of the server's periodic beats lost on the way to this client.
    pub loss: f64,
    /// On a client: share (0–1) of all the server's datagrams lost on the way to this client
    /// recently, from their sequence numbers ([`unlag_core::DatagramLoss::share`]); `None`
    /// until enough came. Several times as many as the beats, so known sooner.
    pub datagram_loss: Option<f64>,
    /// On a client: how likely (0–1) a lost datagram from the server was to be followed by
    /// another ([`unlag_core::DatagramLoss::continuation`]); `None` until a few runs were seen.
    pub datagram_continuation: Option<f64>,
    /// On a client: datagrams the server sent it per second recently, lost ones included;
    /// `None` until a second was seen.
    pub datagram_rate: Option<f64>,
    /// Interval between two state updates of a simulated proxy, seconds, as set by the server.
    pub send_interval: f64,
    /// Interpolation delay in effect, seconds.
    pub interpolation_delay: f64,
    /// Interpolation delay being moved towards, seconds.
    pub target_interpolation_delay: f64,
    /// The delay proxies are actually drawn with, seconds, when something draws them (the
    /// smoothing plugin sets it each frame from its proxies): it then is the
    /// `interpolation_delay` in effect and the one reported to the server, so that the
    /// server's estimate of this client's view time matches the shots it fires.
    pub proxy_delay: Option<f64>,
    /// The view time proxies were last drawn at, seconds, when something draws them (the
    /// smoothing plugin sets it with [`NetClock::proxy_delay`]): what shots fired now claim,
    /// and what the view reports stamp (see [`NetClock::drawn_view_time`]).
    pub proxy_view_time: Option<f64>,
    /// The usual length of this client's frames, seconds ([`unlag_core::FramePace`]; 0 on the
    /// server).
    pub usual_frame: f64,
    /// On a client: the server's usual frame, from its beats, seconds (0 until one says). A
    /// server whose frames last longer than the update interval (a slow listen host) sends
    /// the states of a frame together.
    pub server_frame: f64,
    /// On a client: the server's long frame, from its beats, seconds (0 until one says): the
    /// frame length its recent frames ran beyond for no more than the delay policy's starved
    /// share of the time ([`unlag_core::FrameOutages::covering`]), at most
    /// [`MAX_FRAME_SLACK`]. A listen host that hitches leaves every client without a new
    /// state for as long; a delay that covers it starves through no more of them than the
    /// share.
    pub server_long_frame: f64,
    /// The shortest frame time among this client's last few delay reports, seconds (at most
    /// [`NetClock::usual_frame`]): what the server allows for this client's frames is bounded
    /// by what it was told, so what the client counts on must be too.
    pub least_reported_frame: f64,
    /// On a client: the round trip the server measures to it, from the last beat, seconds
    /// (`None` until one says): a rule both sides apply to the RTT (the shots' lead above the
    /// rewind cap) takes this one, so they agree.
    pub server_rtt: Option<f64>,
    /// On a client: the longest interpolation delay the server compensates for it, from the
    /// last beat, seconds (`None` until one says): shots drawn with a longer delay are judged
    /// later by the rest ([`delay_shortfall`]), and traced there.
    pub server_delay_cap: Option<f64>,
    /// Whether the frame before this one hitched: it took far longer than the usual
    /// ([`unlag_core::FramePace::hitched`]). What arrived meanwhile was read only now, and what
    /// was drawn before it is as old as the hitch.
    pub frame_hitched: bool,
}

impl NetClock {
    /// On a client: how likely (0–1) a lost state sent every `interval` seconds is to be
    /// followed by another lost one, as the server's datagrams' losses run
    /// ([`unlag_core::continuation_over`]); `None` until that is known.
    pub fn state_continuation_over(&self, interval: f64) -> Option<f64> {
        Some(unlag_core::continuation_over(
            self.datagram_continuation?,
            self.datagram_rate?,
            interval,
        ))
    }

    /// The interpolation delay as this client states it to the server, in its
    /// [`DelayReport`]s and its shots' copies, seconds: rounded to whole tens of
    /// microseconds ([`report_micros`]), which the wire carries in a byte less.
    pub fn stated_delay(&self) -> f64 {
        f64::from(report_micros(self.interpolation_delay)) / 1e6
    }

    /// The view time on screen now, seconds: the one proxies were last drawn at, or
    /// [`NetClock::view_time`] when nothing draws them. Shots and [`DelayReport`]s are
    /// stamped with it, so the server can bound a shot's view time by the stream of reports.
    pub fn drawn_view_time(&self) -> f64 {
        self.proxy_view_time
            .filter(|t| t.is_finite())
            .unwrap_or_else(|| self.view_time())
    }

    /// Half the RTT, seconds.
    pub fn one_way(&self) -> f64 {
        self.rtt / 2.0
    }

    /// The server time of the newest state this App can hold now, seconds: no client sees the
    /// server closer than that ([`NetClock::receivable_time`], else `server_time − one_way`).
    /// View times are this less an interpolation delay.
    pub fn present(&self) -> f64 {
        self.receivable_time
            .filter(|t| t.is_finite())
            .unwrap_or(self.server_time - self.one_way())
    }

    /// Server time in ticks (with fraction).
    pub fn server_tick(&self) -> f64 {
        if self.tick_duration > 0.0 {
            self.server_time / self.tick_duration
        } else {
            0.0
        }
    }

    /// The server time at which simulated proxies are shown, seconds (see the module docs).
    pub fn view_time(&self) -> f64 {
        self.present() - self.interpolation_delay
    }
}

/// On the server, per connected client (on its link entity): that client's link figures and the
/// server's estimate of its view time.
#[derive(Component, Clone, Debug, Default, Reflect)]
pub struct RemoteClientClock {
    /// Round-trip time measured by the server, seconds.
    pub rtt: f64,
    /// (server time, [`RemoteClientClock::rtt`]) each time it changed, over the last
    /// [`VIEW_LAG_MEMORY`] (at most [`MAX_RTTS_KEPT`]): the view reports' median lag is a
    /// statistic of a window, and is held to the RTT over the same window
    /// ([`RemoteClientClock::set_rtt`]).
    #[reflect(ignore)]
    rtts: std::collections::VecDeque<(f64, f64)>,
    /// (server time, round trip) of each [`BeatEcho`] taken over the last [`VIEW_LAG_MEMORY`]
    /// (at most [`MAX_RTTS_KEPT`]), seconds: a sample per echo, raw, where lightyear's estimate
    /// is a moving average that clamps the samples after a step (see
    /// [`RemoteClientClock::window_rtt`]).
    #[reflect(ignore)]
    echo_rtts: std::collections::VecDeque<(f64, f64)>,
    /// The newest beat echoed: an echo of it or of an older one is not taken again.
    #[reflect(ignore)]
    last_echo: Option<Seq16>,
    /// (server time, round trip) of each of the server's packets the client's transport
    /// acknowledged, over the last [`VIEW_LAG_MEMORY`] (at most [`MAX_ACKS_KEPT`]), seconds:
    /// from the packet's send to the arrival of the first datagram acknowledging it
    /// ([`RemoteClientClock::ack_window_rtt`]).
    #[reflect(ignore)]
    ack_rtts: std::collections::VecDeque<(f64, f64)>,
    /// Acknowledgement round trips read since the last [`RemoteClientClock::take_acks`],
    /// seconds (at most [`MAX_ACKS_KEPT`]): lightyear reads them before the frame's server
    /// time is known.
    #[reflect(ignore)]
    pending_acks: Vec<f64>,
    /// The shortest round trip of the server's packets first acknowledged by the client's
    /// datagrams read this frame, seconds (`None` if they acknowledged none for the first
    /// time), until [`RemoteClientClock::take_acks`] stamps it ([`crate::acks`]).
    #[reflect(ignore)]
    pub(crate) pending_trip: Option<f64>,
    /// (server time, [`RemoteClientClock::pending_trip`]) of the frames of the last
    /// [`FRESH_TRIPS_KEPT`] that read one ([`RemoteClientClock::recent_trip`],
    /// [`RemoteClientClock::shortest_trip_after`]).
    #[reflect(ignore)]
    fresh_trips: std::collections::VecDeque<(f64, f64)>,
    /// Echoes not taken for being stale: of a beat no newer than the last taken (an honest
    /// report overtaken by a newer one carries one) or one the server no longer remembers.
    pub stale_echoes: u64,
    /// Echoes refused as implausible (a hold beyond [`MAX_ECHO_HOLD_US`], or a round trip no
    /// link can have), each with a counted, rate-limited warning.
    pub rejected_echoes: u64,
    /// Jitter measured by the server, seconds.
    pub jitter: f64,
    /// The interpolation delay the client last reported, seconds (clamped to
    /// [`MAX_REPORTED_DELAY`]).
    pub interpolation_delay: f64,
    /// The longest interpolation delay the server compensated at the last report, seconds
    /// ([`plausible_delay`] for the update rate and jitter then): shots drawn with a longer
    /// delay are judged later than drawn by the rest ([`delay_shortfall`]). Announced to the
    /// client in every [`NetBeat`].
    pub delay_cap: f64,
    /// The proxy update interval [`RemoteClientClock::delay_cap`] was set for at the last
    /// report (the server's), seconds: a slower proxy's claims are compensated more
    /// ([`claim_delay_cap`]).
    pub cap_interval: f64,
    /// The server frame [`RemoteClientClock::delay_cap`] allowed for at the last report
    /// (its long frame, or its usual one when longer), seconds.
    pub cap_frame: f64,
    /// Reports of a delay longer than [`RemoteClientClock::delay_cap`] (the client's shots are
    /// then compensated only up to the cap).
    pub reports_above_cap: u64,
    /// (server time, cap) of every [`RemoteClientClock::delay_cap`] announced to the client in
    /// a [`NetBeat`] over the last [`VIEW_LAG_WINDOW`], seconds: a shot may count on any of
    /// them (the client counts on the last it heard), and on no larger one.
    #[reflect(ignore)]
    announced_caps: std::collections::VecDeque<(f64, f64)>,
    /// Whether the client has reported its delay at least once.
    pub reported: bool,
    /// Reports dropped (malformed, stale, or lagging more than the link allows).
    pub rejected_reports: u64,
    /// Server time of the first view report, seconds.
    pub first_report: Option<f64>,
    /// (server time of arrival, arrival − stamped view time − reported delay, whether it came
    /// in order) of the reports of the last [`VIEW_LAG_WINDOW`], seconds.
    #[reflect(ignore)]
    view_lags: std::collections::VecDeque<(f64, f64, bool)>,
    /// The client's frame time as the checks allow for it, seconds: what its reports claim, but
    /// no more than the spacing of their arrivals shows (a client sends one report a frame
    /// below 30 fps) and at most [`MAX_CLIENT_FRAME`]. A shot shows what was drawn a frame before it
    /// left, so a slow client's shots and reports lag by about a frame more.
    pub client_frame: f64,
    /// (server time of arrival, time since the previous report arrived) over the window: the
    /// server's own clock, not the client's word.
    #[reflect(ignore)]
    spacings: std::collections::VecDeque<(f64, f64)>,
    /// The last few [`RemoteClientClock::client_frame`]s, each bounded when it was taken.
    #[reflect(ignore)]
    recent_frames: std::collections::VecDeque<f64>,
    /// Server time of the previous report's arrival.
    #[reflect(ignore)]
    last_arrival: Option<f64>,
    /// (server time of arrival, lag) of the last [`WITNESS_REPORTS`] view reports that came
    /// in order and stamped a later view time than every report before them: what a shot copy
    /// that arrived with one of them is measured against ([`RemoteClientClock::witnessed`]).
    #[reflect(ignore)]
    witnesses: std::collections::VecDeque<(f64, f64)>,
    /// The latest view time an in-order report stamped, seconds, and that report's lag.
    #[reflect(ignore)]
    latest_stamp: Option<(f64, f64)>,
    /// The server's usual frame when the last report was taken, seconds (set by the server
    /// before it records a report): its reads of a packet wait up to that long.
    pub server_frame: f64,
    /// How much later than their median the client's moves arrived lately, after the moment
    /// each was made, seconds: the up-link's spread as the move stream shows it (set by the
    /// movement plugin; 0 without it). Its timing is held by the time-discrepancy check, so a
    /// client cannot fake a spread without really delaying everything it does, and it stands
    /// beside the pings' jitter (lightyear's estimate, which drops overtaken pongs and reads a
    /// tenth of a ±125-ms link's spread) for how late a view report or a shot copy may come.
    pub uplink_spread: f64,
    /// How far apart the client sends its move messages by its own move clock, seconds (set
    /// by the movement plugin; 0 without it): a client sends at most one message a frame, and
    /// its move times are held to real time by the time-discrepancy check, so a frame claimed
    /// longer than this is not its own. With it, a frame up to [`MAX_PROVEN_CLIENT_FRAME`] is
    /// allowed ([`RemoteClientClock::record_client_frame`]).
    pub move_spacing: f64,
    /// How likely (0–1) a proxy state the server sends this client is lost right after a
    /// lost one, as the client last reported it ([`DelayReport::loss_runs`]; 0 until it
    /// does): the smoothing server sends a client whose losses run in bursts a trail of older
    /// states with each update. The client's word, which can only cost it bandwidth.
    pub state_loss_runs: f64,
}

/// A client's link as the server knew it at one moment ([`RemoteClientClock::at`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RemoteClockAt {
    /// Round-trip time measured by the server, seconds.
    pub rtt: f64,
    /// Jitter measured by the server, seconds.
    pub jitter: f64,
    /// The interpolation delay the client last reported, seconds.
    pub interpolation_delay: f64,
    /// The client's frame time as the checks allow for it, seconds
    /// ([`RemoteClientClock::client_frame`]).
    pub client_frame: f64,
    /// [`RemoteClientClock::recent_client_frame`] then, seconds.
    pub recent_client_frame: f64,
    /// [`RemoteClientClock::client_frame_known`] then.
    pub client_frame_known: bool,
    /// [`RemoteClientClock::delay_cap`] then, seconds.
    pub delay_cap: f64,
    /// [`RemoteClientClock::cap_interval`] then, seconds.
    pub cap_interval: f64,
    /// [`RemoteClientClock::cap_frame`] then, seconds.
    pub cap_frame: f64,
    /// Whether the client had reported its delay.
    pub reported: bool,
    /// [`RemoteClientClock::view_lag_range`] then: (least, most) lag of the view reports,
    /// seconds.
    pub view_lag_range: Option<(f64, f64)>,
    /// [`RemoteClientClock::announced_cap`] then: the largest delay cap announced to the
    /// client lately, seconds.
    pub announced_cap: Option<f64>,
    /// The median lag of the view reports then, seconds
    /// ([`RemoteClientClock::view_lags_summary`]).
    pub view_lag_median: Option<f64>,
    /// [`RemoteClientClock::reporting_since_window`] then.
    pub reporting_since_window: bool,
    /// The latest view time an in-order report stamped then, seconds: about when the client
    /// had the delay it last reported.
    pub report_stamp: Option<f64>,
    /// [`RemoteClientClock::recent_trip`] then, seconds.
    pub fresh_trip: Option<f64>,
    /// The median acknowledged round trip of the [`VIEW_LAG_WINDOW`] before then
    /// ([`RemoteClientClock::ack_window_rtt`]), seconds.
    pub window_trip: Option<f64>,
    /// The lower quartile of the acknowledged round trips of the [`VIEW_LAG_WINDOW`] before
    /// then ([`RemoteClientClock::ack_window_quick`]), seconds: the link's round trip as a
    /// client's stalls do not lengthen it.
    pub quick_trip: Option<f64>,
}

impl RemoteClockAt {
    /// How late a packet that left when the client's view time was `sent_view_time` with an
    /// interpolation delay of `delay` (the client's word, at most [`MAX_REPORTED_DELAY`])
    /// arrived at server time `now`, seconds: measured as the view reports' lags are, for
    /// [`RemoteClockAt::view_lag_range`]. A delay claimed shorter than drawn shows as a longer
    /// lag; one claimed longer only moves the shot's judged time later
    /// ([`delay_shortfall`]).
    pub fn lag_of(&self, now: f64, sent_view_time: f64, delay: f64) -> f64 {
        now - sent_view_time - delay.clamp(0.0, MAX_REPORTED_DELAY)
    }

    /// How much longer than the link usually takes the client's latest datagrams took to come
    /// back with the server's newest packets ([`RemoteClockAt::fresh_trip`]), seconds (0
    /// without a fresh trip): a rise in latency the RTT estimate has not followed yet, which
    /// may all lie on the up-link (how it splits, nothing the server sees tells). Usually:
    /// lightyear's RTT, the client's frame (a datagram waits for it), the server's frame of
    /// `server_frame` seconds (its reads wait for it) and the one-way range the link's jitter
    /// spans ([`unlag_core::JITTER_RANGE`]).
    ///
    /// A step up in latency lengthens every trip at once, and a shot fired across it left
    /// its client a trip later than the RTT estimate says (the net panel's 100 -> 250 ms: the
    /// first shot after it came 125 ms up where the server assumed 53, and its view time read
    /// 80 ms old against a 73-ms tolerance). The view-time checks take the shot's up-trip as
    /// up to that much longer. Only the client's transport's timing shows it
    /// ([`RemoteClientClock::recent_trip`]): a datagram held lengthens its own trip and
    /// arrives that much later, gaining nothing; a client holding the server's packets before
    /// its transport reads them lengthens its trips as a slower down-link would: held in a
    /// pulse, the trips after the shot show the usual link again, and the combat plugin counts
    /// a rise only as far as those keep it ([`RemoteClientClock::shortest_trip_after`]); held
    /// steadily, it is compensated as a slower down-link (README, "The RTT"). An honest
    /// link's jitter is left out.
    pub fn trip_rise(&self, server_frame: f64) -> f64 {
        self.fresh_trip.map_or(0.0, |trip| {
            let usual = self.rtt
                + self.client_frame
                + unlag_core::finite_non_negative(server_frame)
                + unlag_core::JITTER_RANGE * self.jitter;
            unlag_core::finite_non_negative(trip - usual)
        })
    }

    /// How much longer lightyear's RTT ([`RemoteClockAt::rtt`]) read than the quickest quarter
    /// of the acknowledged trips ([`RemoteClockAt::quick_trip`]), seconds (0 when not longer, or
    /// without them): how much newer than the server's estimate from the RTT the client's view
    /// may be. Every trip the server times includes the wait until the client's next frame
    /// reads its packet, and a client frozen most of the time (its frames hitching) reads most
    /// pings after a stall; the packets that came between its stalls are acknowledged with its
    /// next datagram (see [`RemoteClientClock::ack_window_quick`]). A client cannot shorten an
    /// acknowledgement: holding its pongs leaves this no larger than an honest client's.
    pub fn rtt_over_quick_trip(&self) -> f64 {
        rtt_over_quick(self.rtt, self.quick_trip)
    }

    /// How much longer than the view reports' median lag ([`RemoteClockAt::view_lag_median`])
    /// the link's trips now are, seconds: the longer of the latest
    /// ([`RemoteClockAt::fresh_trip`]) and the window's median ([`RemoteClockAt::window_trip`]),
    /// less the client's frame and the server's of `server_frame` seconds a trip waits for
    /// (0 without a trip or a median). On a steady link the reports lag about a round trip
    /// and this is 0; across a step up in latency the trips lengthen at once, while the
    /// reports' median follows only as the client's clock does, over seconds (the net panel's
    /// 100 -> 250 ms: 1.4 s after it the acknowledgements' median read 0.258 s, the reports'
    /// 0.187, and honest shots lagged 0.23-0.24). A shot's lag beyond the reports' median is
    /// that much less evidence of backtracking. A client stamping its reports older only
    /// lowers it; the latest trip carries an honest link's noise, half of it above, so only a
    /// median over shots may take it in.
    pub fn trip_rise_over_reports(&self, server_frame: f64) -> f64 {
        let Some(trip) = self
            .fresh_trip
            .into_iter()
            .chain(self.window_trip)
            .reduce(f64::max)
        else {
            return 0.0;
        };
        self.view_lag_median.map_or(0.0, |median| {
            unlag_core::finite_non_negative(
                trip - median - self.client_frame - unlag_core::finite_non_negative(server_frame),
            )
        })
    }

    /// The span of the view reports' lags (most − least), seconds; 0 without a range.
    pub fn lag_spread(&self) -> f64 {
        self.view_lag_range
            .map_or(0.0, |(least, most)| (most - least).max(0.0))
    }

    /// The estimate of the client's view time when the server's time is `server_time`,
    /// seconds ([`RemoteClientClock::view_time`]).
    pub fn view_time(&self, server_time: f64) -> f64 {
        server_time - self.rtt / 2.0 - self.interpolation_delay
    }
}

/// Longest client frame the view-time checks allow for on the client's word and its reports'
/// spacing, seconds: each frame of slack is as much backtracking a client could buy by
/// pretending to be slow, and reports are cheap to send slowly. Beyond it only as far as the
/// client's move stream shows ([`MAX_PROVEN_CLIENT_FRAME`]).
pub const MAX_CLIENT_FRAME: f64 = 0.1;

/// Longest client frame the view-time checks allow for, seconds, when the client's move stream
/// shows frames that long ([`RemoteClientClock::move_spacing`]): a game at 4 fps. A client that
/// pretends to be slow must send its own moves that late, and plays at that much more ping.
pub const MAX_PROVEN_CLIENT_FRAME: f64 = 0.25;

/// A report whose view time is further than this from the server's time is dropped, seconds.
const MAX_VIEW_LAG: f64 = 5.0;

/// How long the arrival lags of view reports are kept, seconds.
pub const VIEW_LAG_WINDOW: f64 = 2.0;

/// Reports needed within the window before [`RemoteClientClock::view_lag_range`] answers (a
/// client sends one a frame up to 20 Hz: 8 in 2 s is a client at 4 fps).
pub const MIN_VIEW_LAG_SAMPLES: usize = 8;

/// How long the newest [`MIN_VIEW_LAG_SAMPLES`] reports stand for the link when a burst of
/// losses leaves fewer in the window, seconds: what the link was shown to do a moment ago is
/// still the best evidence, and a client that stops reporting for longer is refused.
pub const VIEW_LAG_MEMORY: f64 = 10.0;

/// View reports kept as witnesses ([`RemoteClientClock::witnessed`]): those of the last frame
/// or two that a shot's copies could have come with.
pub const WITNESS_REPORTS: usize = 8;

/// How far a copy's lag may be from its witness's, seconds: the report carries its delay in
/// whole microseconds.
const WITNESS_TOLERANCE: f64 = 2e-6;

/// Beyond the server's frame and twice the jitter, how much more than its predecessor a
/// witness may lag, seconds.
pub const WITNESS_STEP_SLACK: f64 = 0.005;

/// Most view lags kept, whatever the report rate (a flood of reports costs no more).
const MAX_VIEW_LAGS: usize = 512;

/// Most RTT readings kept ([`RemoteClientClock::set_rtt`]): lightyear's estimate changes once
/// a pong, a few times a second.
pub const MAX_RTTS_KEPT: usize = 256;

/// How far the median lag of a client's view reports may exceed the RTT, seconds. An honest
/// report lags about one round trip (its view time is the server time less half the RTT and
/// the delay, and it travels the other half), so a median past this means the reports are
/// stamped older than they are.
pub const VIEW_LAG_CENTER_SLACK: f64 = 0.025;

/// Multiple of the measured jitter above the median lag that the most a shot may lag can reach.
pub const VIEW_LAG_JITTER_FACTOR: f64 = 3.0;

/// How many times the reports' span over their number less one the most a shot may lag lies
/// beyond the largest report ([`RemoteClientClock::view_lag_range`]): what a window's few
/// dozen reports leave unseen of the link's spread.
pub const UNSEEN_TAIL_STEPS: f64 = 3.0;

/// Fixed slack above the median lag, with [`VIEW_LAG_JITTER_FACTOR`], seconds.
pub const VIEW_LAG_SLACK: f64 = 0.015;

/// Longest server frame [`RemoteClientClock::view_lag_range`] allows for, seconds (a server
/// stalled longer than this widens the check no further).
pub const MAX_FRAME_SLACK: f64 = 0.25;

/// How many of the last bounded frame times [`RemoteClientClock::recent_client_frame`] keeps
/// (about half a second of reports at 15 a second).
const RECENT_FRAMES: usize = 8;

/// Reports lagging more than this beyond the RTT are dropped as garbage, seconds.
const VIEW_LAG_GARBAGE: f64 = 0.5;

impl RemoteClientClock {
    /// How late, after the view time they were stamped with (less the delay reported), this
    /// client's packets arrived over the [`VIEW_LAG_WINDOW`] before server time `now`: (least,
    /// most), seconds. It spans the up-link's jitter and does not depend on the clock
    /// estimates, so a packet stamped `b` seconds older than its real view time shows a lag `b`
    /// longer: past the most once `b` exceeds the jitter's span.
    ///
    /// The reports are the client's word too, so they are held to what the link allows: their
    /// median may not exceed the RTT over their window ([`RemoteClientClock::window_rtt`]) by
    /// more than [`VIEW_LAG_CENTER_SLACK`], `frame` and half
    /// the move stream's [`RemoteClientClock::uplink_spread`] (else `None`: a client stamping
    /// every report older gains at most that, and a spread is not faked without delaying
    /// every move). The most is the largest report's lag and what so few reports leave
    /// unseen of the link's spread beyond it ([`UNSEEN_TAIL_STEPS`] × their span over their
    /// number less one), capped at the median plus [`VIEW_LAG_JITTER_FACTOR`] × the
    /// jitter (or the move stream's [`RemoteClientClock::uplink_spread`], if larger),
    /// [`VIEW_LAG_SLACK`] and `frame` (a few late stamps cannot widen it). The most is at least
    /// the median plus the move stream's spread: a window's reports sample the up-link a few
    /// dozen times, its moves a hundred. The least likewise: the smallest report's lag less
    /// the same unseen span, no lower than the median less what the cap adds above it. `frame`
    /// is the server's frame, seconds (the client's,
    /// [`RemoteClientClock::client_frame`], is added to it): a packet waits up to one for the
    /// server to read it, which the RTT (measured by pings answered at once) does not show; at
    /// 60 fps it is 17 ms, a server stepped by a 20-fps listen host waits 50 ms. `None` too
    /// while fewer than [`MIN_VIEW_LAG_SAMPLES`] arrived in the window.
    pub fn view_lag_range(&self, now: f64, frame: f64) -> Option<(f64, f64)> {
        self.view_lags_summary(now, frame)
            .map(|(least, most, _)| (least, most))
    }

    /// [`RemoteClientClock::view_lag_range`] and the median lag of every report it was taken
    /// from (in order or overtaken), seconds: how late this client's packets usually arrive
    /// after the present they stamp.
    pub fn view_lags_summary(&self, now: f64, frame: f64) -> Option<(f64, f64, f64)> {
        // The client's frame lags its stamps too.
        let frame = frame + self.client_frame;
        // The centre from the reports that came in order, as lightyear's RTT is measured (it
        // drops overtaken pongs): under heavy jitter both lean to the quicker trips alike. The
        // range from every report: a shot copy's trip is any of the link's.
        // The window's reports; after a burst of losses that left too few in it, the newest
        // `MIN_VIEW_LAG_SAMPLES` in order (and the overtaken ones since), up to
        // `VIEW_LAG_MEMORY` old.
        let in_window = |since: f64| {
            self.view_lags
                .iter()
                .filter(move |(t, ..)| *t >= since && *t <= now)
        };
        let mut since = now - VIEW_LAG_WINDOW;
        if in_window(since).filter(|(.., in_order)| *in_order).count() < MIN_VIEW_LAG_SAMPLES {
            since = self
                .view_lags
                .iter()
                .rev()
                .filter(|(t, _, in_order)| *in_order && *t <= now)
                .nth(MIN_VIEW_LAG_SAMPLES - 1)
                .map_or(f64::INFINITY, |(t, ..)| *t)
                .max(now - VIEW_LAG_MEMORY);
        }
        // (Room for the whole window at once: grown by doubling, the copies and frees were
        // half the cost of a shot's link figures at 256 players.)
        let mut recent: Vec<f64> = Vec::with_capacity(self.view_lags.len());
        recent.extend(
            in_window(since)
                .filter(|(.., in_order)| *in_order)
                .map(|(_, lag, _)| *lag),
        );
        if recent.len() < MIN_VIEW_LAG_SAMPLES {
            return None;
        }
        // (Each shot's copies and each report ask: the middle picked, not the whole sorted.)
        let middle = recent.len() / 2;
        let median = unlag_core::nth_smallest(&mut recent, middle);
        let mut all: Vec<f64> = Vec::with_capacity(self.view_lags.len());
        all.extend(in_window(since).map(|(_, lag, _)| *lag));
        // (`recent` is not empty, and `all` holds it: both ends exist.)
        let least = all.iter().copied().min_by(f64::total_cmp).unwrap_or(median);
        let most = all.iter().copied().max_by(f64::total_cmp).unwrap_or(median);
        let middle = all.len() / 2;
        let median_all = unlag_core::nth_smallest(&mut all, middle);
        let frame = frame.clamp(0.0, MAX_FRAME_SLACK);
        // The window's round trip, or its latest part's across a step up in latency (the
        // reports follow a step sooner than the echoes and pongs the window's is timed by).
        let rtt = self
            .window_rtt(since, now)
            .max(self.risen_rtt(since, now, frame).unwrap_or(0.0));
        // No more than half the round trip: a trip's spread above its median is smaller than
        // the trip (a link's jitter is at most its one-way latency).
        let uplink = self.uplink_spread.clamp(0.0, rtt.max(0.0) / 2.0);
        // Under heavy jitter the pings' RTT leans to the quick trips more than the reports'
        // median does (0.43 s for a 0.5-s ±125-ms link): half the move stream's spread is
        // allowed for it.
        if median > rtt + VIEW_LAG_CENTER_SLACK + frame + uplink / 2.0 {
            return None;
        }
        let spread = (VIEW_LAG_JITTER_FACTOR * self.jitter).max(uplink);
        let cap = median.max(median_all) + spread + VIEW_LAG_SLACK + frame;
        // The largest of n reports falls short of the most the link itself does by about
        // their span over n − 1 (the unbiased estimate of an even spread's top adds that once),
        // and a shot's copy is one more draw: with `UNSEEN_TAIL_STEPS` of them it lands above
        // about once in e³·n copies (at ±62 ms of jitter a copy came 10 ms past the 33 reports
        // of its window, and was refused). Within the cap: the reports cannot widen it.
        let unseen = UNSEEN_TAIL_STEPS * (most - least) / (all.len() - 1).max(1) as f64;
        // The reports sample the up-link a few dozen times a window; the move stream samples
        // it a hundred times: its spread above the median is the link's, wherever the
        // reports' largest happened to fall short of it.
        // The smallest falls short of the quickest the link does the same way: a shot's copy
        // that came quicker than every report of its window (an honest 219-ms lag against the
        // 234 ms of its window's quickest, at ±62 ms of jitter and 20 % loss in bursts of 10)
        // is one more draw from the link, not a view stamped ahead. No further below than the
        // median lies above the cap's floor, as the top stays within its cap.
        let floor = median.min(median_all) - spread - VIEW_LAG_SLACK - frame;
        Some((
            (least - unseen).max(floor).min(least),
            (most + unseen).max(median_all + uplink).min(cap),
            median_all,
        ))
    }

    /// Takes lightyear's RTT estimate at server time `now`, seconds, keeping it for the
    /// window's RTT ([`RemoteClientClock::window_rtt`]).
    pub fn set_rtt(&mut self, now: f64, rtt: f64) {
        self.rtt = rtt;
        if !(now.is_finite() && rtt.is_finite()) {
            return;
        }
        if self.rtts.back().is_none_or(|&(_, last)| last != rtt) {
            keep_recent(&mut self.rtts, now, rtt, MAX_RTTS_KEPT);
        }
        forget_before(&mut self.rtts, now - VIEW_LAG_MEMORY);
    }

    /// The round trip over the window from server time `since` to `now`, seconds: the median
    /// of lightyear's RTT readings then (and the one standing at `since`;
    /// [`RemoteClientClock::rtt`] without any), or the median of the beat echoes' round trips
    /// ([`RemoteClientClock::echo_window_rtt`]) when longer.
    ///
    /// lightyear's estimate is a moving average of the pongs that came in order: under heavy
    /// jitter it wanders by a tenth of the link's spread within a second or two (0.245 to
    /// 0.223 s in 2.5 s on a 0.25-s ±62-ms link), while the view reports' median it bounds is
    /// taken over a window of such seconds. Held to the reading of one moment, an honest
    /// median crossed its bound whenever that moment fell on a low. After a step up it trails
    /// by seconds; the echoes do not.
    ///
    /// Both are timed by the client's answers, which it may hold (pongs held, echoes that
    /// understate their hold): a client holding them `b` seconds and stamping its reports `b`
    /// older kept its median within this bound, and its shots backtracked `b` passed. So the
    /// round trip is no longer than the median of the transport's acknowledgements over the
    /// window ([`RemoteClientClock::ack_window_rtt`]) and half the move stream's
    /// [`RemoteClientClock::uplink_spread`], when there are enough of them: they
    /// ride on the client's datagrams (its moves), and are only ever late by the wait for the
    /// next one (a frame).
    pub fn window_rtt(&self, since: f64, now: f64) -> f64 {
        let answered = self
            .lightyear_window_rtt(since, now)
            .max(self.echo_window_rtt(since, now).unwrap_or(0.0));
        // Under heavy jitter the echoes' median sat above the acknowledgements' (0.552 against
        // 0.533 s on a 0.5-s ±125-ms link, the reports' 0.643): half the move stream's spread
        // is allowed for it, as the reports' median is allowed beyond the RTT.
        self.ack_window_rtt(since, now).map_or(answered, |acked| {
            answered.min(acked + self.uplink_spread.clamp(0.0, acked / 2.0) / 2.0)
        })
    }

    /// The round trip over the last [`RECENT_RTT_SPAN`] before server time `now`, seconds, as
    /// [`RemoteClientClock::window_rtt`] takes it, when the acknowledgements of that span show
    /// the link's trips rose over those of the window from `since` up to it (their median
    /// above the earlier one by more than `frame`, the frames a trip waits for,
    /// [`VIEW_LAG_JITTER_FACTOR`] times the jitter and [`VIEW_LAG_CENTER_SLACK`]); else
    /// `None`, as with too few of either ([`MIN_ACKS`]).
    ///
    /// After a step up in latency the window's medians trail it unevenly: its view reports
    /// (a client sends them with its moves, thirty a second) show the rise from the step on,
    /// its echoes (ten a second) only a round trip later, and for a second the reports'
    /// median sat above the echoes' by more than the slack (the net panel's 100 -> 250 ms:
    /// 0.177 against 0.113 s a second after the step) and every shot was refused. The span's
    /// round trip has followed the step by then. Only on the acknowledgements' word: a client
    /// holding its pongs or its echoes raises the span's round trip as it does the window's,
    /// and the larger of two medians of a steady link is a noisier bound than one; the
    /// acknowledgements ride on every datagram of the client's, and rise only with a slower
    /// link (or one held whole, which is one).
    pub fn risen_rtt(&self, since: f64, now: f64, frame: f64) -> Option<f64> {
        let recent = now - RECENT_RTT_SPAN;
        let risen = self.ack_window_rtt(recent, now)?;
        let usual = self.ack_window_rtt(since, recent)?;
        let margin = unlag_core::finite_non_negative(frame)
            + VIEW_LAG_JITTER_FACTOR * unlag_core::finite_non_negative(self.jitter)
            + VIEW_LAG_CENTER_SLACK;
        (risen > usual + margin).then(|| self.window_rtt(recent, now))
    }

    /// The median round trip of the server's packets to the client over server times `since`
    /// to `now`, seconds, as the client's transport acknowledged them: from each packet's send
    /// to the arrival of the first of the client's datagrams acknowledging it (the server's
    /// own ledger, [`unlag_core::AckLedger`]). A packet never acknowledged (lost, or not within
    /// [`unlag_core::ACK_GIVE_UP`]) counts as the longest trip of all. `None` with fewer than
    /// [`MIN_ACKS`] packets, or when half or more were never acknowledged.
    ///
    /// An acknowledgement is read only with a datagram of the client's own, so it comes late
    /// by the wait for that datagram (a client frame, or the transport's ack delay), by the
    /// server's frame, and by the loss of the datagrams before it: never early, and a loss
    /// only raises the median. It sits at or above the trips the pongs time. Holding it back
    /// takes holding the acknowledgements in every datagram's header (the transport's, not a
    /// message of the client's own), which holding the pongs and the echoes does not.
    pub fn ack_window_rtt(&self, since: f64, now: f64) -> Option<f64> {
        window_median(&self.ack_rtts, since, now, MIN_ACKS).filter(|rtt| rtt.is_finite())
    }

    /// The lower quartile of the round trips [`RemoteClientClock::ack_window_rtt`] takes the
    /// median of (server times `since` to `now`, seconds), under the same conditions: the
    /// link's round trip as a client's stalls do not lengthen it.
    ///
    /// Every trip the server times includes the wait until the client's next frame reads its
    /// packet: lightyear's pongs (the client states only its hold after that read) and these
    /// acknowledgements alike. A client frozen most of the time (a 240-fps game whose frames
    /// take 250 ms three times in a hundred: two thirds of its wall time) reads most packets
    /// after a stall, and lightyear's RTT of it read 0.20-0.22 s on a 0.1-s link. The packets
    /// that came between its stalls are acknowledged with its next datagram: the quickest
    /// quarter of the trips is the link's and that wait. A client cannot shorten an
    /// acknowledgement, only lengthen it (see [`RemoteClientClock::ack_window_rtt`]).
    pub fn ack_window_quick(&self, since: f64, now: f64) -> Option<f64> {
        self.ack_window_trips(since, now)
            .map(|(_, quarter)| quarter)
    }

    /// [`RemoteClockAt::rtt_over_quick_trip`] at server time `now` (seconds), over the
    /// [`VIEW_LAG_WINDOW`] before it.
    pub fn rtt_over_quick_trip(&self, now: f64) -> f64 {
        rtt_over_quick(self.rtt, self.ack_window_quick(now - VIEW_LAG_WINDOW, now))
    }

    /// [`RemoteClientClock::ack_window_rtt`] and [`RemoteClientClock::ack_window_quick`], from
    /// one pass over the window: (median, lower quartile), seconds.
    fn ack_window_trips(&self, since: f64, now: f64) -> Option<(f64, f64)> {
        let mut trips: Vec<f64> = Vec::with_capacity(self.ack_rtts.len());
        trips.extend(window_values(&self.ack_rtts, since, now));
        if trips.len() < MIN_ACKS {
            return None;
        }
        // As `upper_median`; the selection leaves the smaller half first, the quartile in it.
        let (middle, quarter) = (trips.len() / 2, trips.len() / 4);
        let median = unlag_core::nth_smallest(&mut trips, middle);
        let quarter = unlag_core::nth_smallest(&mut trips[..middle], quarter);
        median.is_finite().then_some((median, quarter))
    }

    /// Notes that the client acknowledged one of the server's packets `rtt` seconds after it
    /// was sent (the server's ledger does, [`unlag_core::AckLedger`]), taken into the window
    /// at the next [`RemoteClientClock::take_acks`]. Negative and non-finite samples are
    /// dropped.
    pub fn note_ack(&mut self, rtt: f64) {
        if rtt.is_finite() && rtt >= 0.0 {
            self.note_trip(rtt);
        }
    }

    /// Notes that one of the server's packets to the client was not acknowledged within
    /// [`unlag_core::ACK_GIVE_UP`]: a trip longer than any acknowledged.
    pub fn note_unacknowledged(&mut self) {
        self.note_trip(f64::INFINITY);
    }

    fn note_trip(&mut self, rtt: f64) {
        if self.pending_acks.len() < MAX_ACKS_KEPT {
            self.pending_acks.push(rtt);
        }
    }

    /// Stamps the acknowledgements noted since the last call with server time `now` (seconds)
    /// and keeps them for [`RemoteClientClock::ack_window_rtt`].
    pub fn take_acks(&mut self, now: f64) {
        if !now.is_finite() {
            self.pending_acks.clear();
            return;
        }
        for rtt in self.pending_acks.drain(..) {
            keep_recent(&mut self.ack_rtts, now, rtt, MAX_ACKS_KEPT);
        }
        forget_before(&mut self.ack_rtts, now - VIEW_LAG_MEMORY);
        if let Some(trip) = self.pending_trip.take() {
            self.fresh_trips.push_back((now, trip));
        }
        forget_before(&mut self.fresh_trips, now - FRESH_TRIPS_KEPT);
    }

    /// The shortest of the trips [`RemoteClientClock::recent_trip`] reads that came after
    /// server time `after` (up to [`FRESH_TRIPS_KEPT`] ago), seconds; `None` if none did. A
    /// rise that is still there in the trips after a shot is a step in the link; one that is
    /// gone was a burst of losses both ways (or a client timing its datagrams around one).
    pub fn shortest_trip_after(&self, after: f64) -> Option<f64> {
        self.fresh_trips
            .iter()
            .filter(|(t, _)| *t > after)
            .map(|(_, trip)| *trip)
            .min_by(f64::total_cmp)
    }

    /// The shortest round trip of the server's packets that the client's datagrams of the
    /// last [`FRESH_TRIP_SPAN`] before server time `now` acknowledged for the first time,
    /// seconds; `None` if they acknowledged none.
    ///
    /// The newest packet a datagram acknowledges is the last the client had received when it
    /// sent it, so the shortest is the trip of that datagram itself: the server's packet down,
    /// the client's wait for its next frame, and the datagram up. A client cannot shorten it;
    /// it lengthens it only by holding that datagram (and everything in it), or by rewriting
    /// its transport's headers. Not sending for a while lengthens only the trips of the
    /// older packets the next datagram acknowledges with it.
    pub fn recent_trip(&self, now: f64) -> Option<f64> {
        window_values(&self.fresh_trips, now - FRESH_TRIP_SPAN, now).min_by(f64::total_cmp)
    }

    /// The median of the beat echoes' round trips from server time `since` to `now`, seconds;
    /// `None` with fewer than [`MIN_ECHOES`] of them.
    ///
    /// lightyear's estimate follows a step in the link slowly: a moving average over twelve
    /// pongs that clamps a sample to 1.2× the average before it (the net panel's RTT from 100
    /// to 250 ms: the view reports lagged 250 ms within 1.5 s, while the estimate read 235 ms
    /// after 4 s, and for those seconds the reports' median sat above the RTT they are held
    /// to, and every shot was refused). An echo is one raw sample (a client can make it longer,
    /// as it can hold its pongs, never shorter than the trip).
    pub fn echo_window_rtt(&self, since: f64, now: f64) -> Option<f64> {
        window_median(&self.echo_rtts, since, now, MIN_ECHOES)
    }

    /// Takes a [`BeatEcho`] of beat `seq`, sent at server time `sent` and held `held` by the
    /// client, arriving at server time `now` (seconds): one sample of the round trip, kept
    /// for [`RemoteClientClock::echo_window_rtt`]. An echo of a beat no newer than the last
    /// taken is stale, one no trip can have implausible: neither is taken, and nothing else
    /// changes (the caller counts them).
    pub fn record_echo(
        &mut self,
        now: f64,
        seq: Seq16,
        sent: f64,
        held: f64,
    ) -> Result<(), EchoRefusal> {
        let rtt = now - sent - held;
        if !(rtt.is_finite() && (0.0..MAX_VIEW_LAG).contains(&rtt) && held >= 0.0) {
            return Err(EchoRefusal::Implausible);
        }
        if self.last_echo.is_some_and(|last| !seq.is_newer_than(last)) {
            return Err(EchoRefusal::Stale);
        }
        self.last_echo = Some(seq);
        keep_recent(&mut self.echo_rtts, now, rtt, MAX_RTTS_KEPT);
        forget_before(&mut self.echo_rtts, now - VIEW_LAG_MEMORY);
        Ok(())
    }

    /// Takes the echo a taken report carried, if any ([`RemoteClientClock::record_echo`]),
    /// timed from `sent_at` (when the server sent a beat it still remembers, server seconds),
    /// arriving at server time `now`: stale ones are counted, implausible ones counted with a
    /// rate-limited warning.
    pub fn take_echo(&mut self, now: f64, echo: BeatEcho, sent_at: Option<f64>) {
        let verdict = match sent_at {
            _ if echo.held_us > MAX_ECHO_HOLD_US => Err(EchoRefusal::Implausible),
            None => Err(EchoRefusal::Stale),
            Some(sent) => self.record_echo(now, echo.seq, sent, f64::from(echo.held_us) / 1e6),
        };
        match verdict {
            Ok(()) => {}
            Err(EchoRefusal::Stale) => self.stale_echoes += 1,
            Err(EchoRefusal::Implausible) => {
                crate::warn_counted!(
                    self.rejected_echoes,
                    "dropped a report's echo of beat {:?}: no trip is {} µs held",
                    echo.seq,
                    echo.held_us
                );
            }
        }
    }

    /// The median of lightyear's RTT readings from server time `since` to `now` (and the one
    /// standing at `since`), seconds; [`RemoteClientClock::rtt`] without any.
    fn lightyear_window_rtt(&self, since: f64, now: f64) -> f64 {
        let standing = self
            .rtts
            .iter()
            .rposition(|(t, _)| *t <= since)
            .unwrap_or(0);
        let readings: Vec<f64> = self
            .rtts
            .iter()
            .skip(standing)
            .filter(|(t, _)| *t <= now)
            .map(|(_, rtt)| *rtt)
            .collect();
        upper_median(readings).unwrap_or(self.rtt)
    }

    /// Whether this client has been sending view reports for a whole window by server time
    /// `now`: from then on a shot needs [`RemoteClientClock::view_lag_range`] to be judged.
    pub fn reporting_since_window(&self, now: f64) -> bool {
        self.first_report
            .is_some_and(|first| now - first >= VIEW_LAG_WINDOW)
    }

    /// Records a view report stamped `view_time` that arrived at server time `now` (seconds;
    /// the server does it for every report, after taking its delay). One lagging half a second
    /// beyond the RTT is garbage, refused (false).
    pub fn record_view_lag(&mut self, now: f64, view_time: f64) -> bool {
        let lag = now - view_time - self.interpolation_delay;
        if !self.plausible_lag(lag) {
            return false;
        }
        if let Some(last) = self.last_arrival.replace(now) {
            let spacing = now - last;
            if spacing.is_finite() && spacing > 0.0 {
                self.spacings.push_back((now, spacing));
            }
        }
        forget_before(&mut self.spacings, now - VIEW_LAG_WINDOW);
        self.first_report.get_or_insert(now);
        self.push_view_lag(now, lag, true);
        // A witness only if the view on screen moved forward (an honest client's drawn view
        // time never goes back: a report stamped older than the last could only be meant to
        // vouch for a shot stamped as old), and if it lags its predecessor by no more than
        // the server's read wait and the link's jitter: a report held back to arrive with a
        // shot stamped as old shows as a lag that jumps by the time it was held.
        let forward = self
            .latest_stamp
            .is_none_or(|(latest, _)| view_time > latest);
        if forward {
            let clean = unlag_core::finite_non_negative;
            let step = clean(self.server_frame) + 2.0 * clean(self.jitter) + WITNESS_STEP_SLACK;
            let steady = self
                .latest_stamp
                .is_some_and(|(_, previous)| lag <= previous + step);
            self.latest_stamp = Some((view_time, lag));
            if steady {
                if self.witnesses.len() == WITNESS_REPORTS {
                    self.witnesses.pop_front();
                }
                self.witnesses.push_back((now, lag));
            }
        }
        true
    }

    /// Whether a view report arrived at server time `now` with exactly the lag `lag` (a shot
    /// copy's, [`RemoteClockAt::lag_of`]), as one of the witnesses kept: the copy and the
    /// report left in one frame, stamped with one view time and delay, and came in one
    /// datagram.
    ///
    /// Such a copy lags exactly as a report the view-time checks accepted, whatever the link
    /// and the server's frames did to both: a slow listen host reads a slow client's packets
    /// either at once or almost a frame late, for a second at a time, so lags measured against
    /// a median over the window swing by a frame; and the shots of a client that hitches
    /// cluster in the frames after its hitches, whose reports lag most. A backtracking
    /// client's copies are stamped older than their frame's report, so none matches; holding
    /// a report back to travel with such a copy shows as a jump in the reports' lags beyond
    /// the server's frame and twice the jitter, and makes it no witness.
    pub fn witnessed(&self, now: f64, lag: f64) -> bool {
        lag.is_finite()
            && self
                .witnesses
                .iter()
                .rev()
                .take_while(|(t, _)| *t >= now)
                .any(|(t, l)| *t == now && (l - lag).abs() <= WITNESS_TOLERANCE)
    }

    /// Whether a report's lag can be a trip of this link: finite, and no more than
    /// [`VIEW_LAG_GARBAGE`] beyond the RTT.
    fn plausible_lag(&self, lag: f64) -> bool {
        lag.is_finite() && lag <= self.rtt + VIEW_LAG_GARBAGE
    }

    /// Keeps `lag` (arrived at `now`, in order or overtaken) for the window, forgetting those
    /// older than [`VIEW_LAG_WINDOW`].
    fn push_view_lag(&mut self, now: f64, lag: f64, in_order: bool) {
        self.view_lags.push_back((now, lag, in_order));
        // Older than the window is forgotten unless it is among the newest
        // `MIN_VIEW_LAG_SAMPLES` in order (see `view_lag_range`), and never kept past the memory.
        let mut in_order_kept = self.view_lags.iter().filter(|(.., o)| *o).count();
        while let Some(&(t, _, front_in_order)) = self.view_lags.front() {
            let needed = front_in_order && in_order_kept <= MIN_VIEW_LAG_SAMPLES;
            let old = t < now - VIEW_LAG_WINDOW;
            if !(self.view_lags.len() > MAX_VIEW_LAGS
                || t < now - VIEW_LAG_MEMORY
                || old && !needed)
            {
                break;
            }
            in_order_kept -= usize::from(front_in_order);
            self.view_lags.pop_front();
        }
    }

    /// Records the lag of a view report that a newer one overtook on the way: stamped
    /// `view_time` with an interpolation delay of `delay` (at most [`MAX_REPORTED_DELAY`]),
    /// arrived at server time `now`, seconds. Only the lag is taken (the newer report set the
    /// delay). False, and nothing recorded, for garbage.
    pub fn record_overtaken_view_lag(&mut self, now: f64, view_time: f64, delay: f64) -> bool {
        let delay = if delay.is_finite() {
            delay.clamp(0.0, MAX_REPORTED_DELAY)
        } else {
            self.interpolation_delay
        };
        let lag = now - view_time - delay;
        if !self.plausible_lag(lag) {
            return false;
        }
        self.push_view_lag(now, lag, false);
        true
    }

    /// Takes the frame time a report claims, seconds: [`RemoteClientClock::client_frame`]
    /// becomes it, bounded by the median spacing of the window's report arrivals (plus 2 ms)
    /// and [`MAX_CLIENT_FRAME`], or beyond it up to [`MAX_PROVEN_CLIENT_FRAME`] as far as its
    /// move stream's spacing ([`RemoteClientClock::move_spacing`]) shows; zero until a few
    /// reports have arrived, and kept while too few arrive in the window to bound a new claim
    /// (a burst of losses).
    pub fn record_client_frame(&mut self, claimed: f64) {
        let mut spacings: Vec<f64> = self.spacings.iter().map(|s| s.1).collect();
        if !claimed.is_finite() {
            self.client_frame = 0.0;
            return;
        }
        if spacings.len() < 3 {
            // Too few arrivals in the window to bound a new claim (a burst of losses): the
            // frame time bounded last stands.
            return;
        }
        let middle = spacings.len() / 2;
        let shown = unlag_core::nth_smallest(&mut spacings, middle) + 0.002;
        // Beyond MAX_CLIENT_FRAME only as far as the move stream shows it (a 7-fps game on a
        // software renderer sends a report and its moves every 0.14 s, and stamps each a
        // whole frame before it leaves).
        let moves = unlag_core::finite_non_negative(self.move_spacing);
        let most = if moves > 0.0 {
            (moves + 0.002).clamp(MAX_CLIENT_FRAME, MAX_PROVEN_CLIENT_FRAME)
        } else {
            MAX_CLIENT_FRAME
        };
        self.client_frame = claimed.clamp(0.0, shown.min(most));
        if self.recent_frames.len() == RECENT_FRAMES {
            self.recent_frames.pop_front();
        }
        self.recent_frames.push_back(self.client_frame);
    }

    /// Whether the client's frame time is known: a report has claimed one since enough
    /// reports arrived to bound it ([`RemoteClientClock::record_client_frame`]). Until then
    /// [`RemoteClientClock::client_frame`] reads 0, and the checks allow for no frame.
    pub fn client_frame_known(&self) -> bool {
        !self.recent_frames.is_empty()
    }

    /// The longest of the client's last few frame times as the checks allowed for them (each
    /// bounded by the reports' spacing when taken), seconds: a shot's copies were sent over
    /// frames the reports already described, while a report sent after them may overtake
    /// them with a shorter frame.
    pub fn recent_client_frame(&self) -> f64 {
        self.recent_frames
            .iter()
            .copied()
            .fold(self.client_frame, f64::max)
    }

    /// The server's estimate of the client's view time when the server's time is `server_time`,
    /// seconds: `server_time − rtt / 2 − interpolation_delay`.
    pub fn view_time(&self, server_time: f64) -> f64 {
        server_time - self.rtt / 2.0 - self.interpolation_delay
    }

    /// The figures the view-time checks read, as they are at server time `now` with a server
    /// frame of `frame` seconds ([`RemoteClientClock::view_lag_range`] taken once): a shot
    /// held on the server (for its shooter's moves to be played out) is judged against the
    /// link as it was when the shot arrived, not as it is later.
    pub fn at(&self, now: f64, frame: f64) -> RemoteClockAt {
        let summary = self.view_lags_summary(now, frame);
        let trips = self.ack_window_trips(now - VIEW_LAG_WINDOW, now);
        RemoteClockAt {
            rtt: self.rtt,
            jitter: self.jitter,
            interpolation_delay: self.interpolation_delay,
            client_frame: self.client_frame,
            recent_client_frame: self.recent_client_frame(),
            client_frame_known: self.client_frame_known(),
            delay_cap: self.delay_cap,
            cap_interval: self.cap_interval,
            cap_frame: self.cap_frame,
            reported: self.reported,
            view_lag_range: summary.map(|(least, most, _)| (least, most)),
            view_lag_median: summary.map(|(.., median)| median),
            reporting_since_window: self.reporting_since_window(now),
            announced_cap: self.announced_cap(now),
            report_stamp: self.latest_stamp.map(|(view_time, _)| view_time),
            fresh_trip: self.recent_trip(now),
            window_trip: trips.map(|(median, _)| median),
            quick_trip: trips.map(|(_, quarter)| quarter),
        }
    }

    /// Notes that `cap` (seconds, as the beat carries it) was announced to the client at
    /// server time `now`, forgetting those older than [`VIEW_LAG_WINDOW`].
    pub fn announce_cap(&mut self, now: f64, cap: f64) {
        if !(now.is_finite() && cap.is_finite()) {
            return;
        }
        self.announced_caps.push_back((now, cap));
        forget_before(&mut self.announced_caps, now - VIEW_LAG_WINDOW);
    }

    /// The largest delay cap announced to the client over the [`VIEW_LAG_WINDOW`] before
    /// server time `now`, seconds (`None` if none was): the most a shot may count on.
    pub fn announced_cap(&self, now: f64) -> Option<f64> {
        window_values(&self.announced_caps, now - VIEW_LAG_WINDOW, now).reduce(f64::max)
    }
}

/// How much longer `rtt` is than `quick` (seconds; 0 when not longer, or either is not finite).
fn rtt_over_quick(rtt: f64, quick: Option<f64>) -> f64 {
    quick
        .filter(|q| q.is_finite())
        .map_or(0.0, |q| unlag_core::finite_non_negative(rtt - q))
}

/// Appends `value`, stamped `now` (seconds), to a time-ordered window of round trips,
/// dropping its oldest entry when it holds `cap`.
fn keep_recent(
    window: &mut std::collections::VecDeque<(f64, f64)>,
    now: f64,
    value: f64,
    cap: usize,
) {
    if window.len() >= cap {
        window.pop_front();
    }
    window.push_back((now, value));
}

/// The values of `window` stamped from server time `since` to `now`, seconds.
fn window_values<T: Copy>(
    window: &std::collections::VecDeque<(f64, T)>,
    since: f64,
    now: f64,
) -> impl Iterator<Item = T> + '_ {
    window
        .iter()
        .filter(move |(t, _)| *t >= since && *t <= now)
        .map(|(_, value)| *value)
}

/// The [`upper_median`] of a time-ordered window's values stamped from `since` to `now`
/// (seconds); `None` with fewer than `least` of them.
fn window_median(
    window: &std::collections::VecDeque<(f64, f64)>,
    since: f64,
    now: f64,
    least: usize,
) -> Option<f64> {
    let mut samples: Vec<f64> = Vec::with_capacity(window.len());
    samples.extend(window_values(window, since, now));
    if samples.len() < least {
        return None;
    }
    upper_median(samples)
}

/// The middle of `values` once sorted (the upper one of an even count); `None` when empty.
fn upper_median(mut values: Vec<f64>) -> Option<f64> {
    let middle = values.len() / 2;
    (!values.is_empty()).then(|| unlag_core::nth_smallest(&mut values, middle))
}

/// Drops the entries of a time-ordered window stamped before `since` (seconds).
fn forget_before<T>(window: &mut std::collections::VecDeque<(f64, T)>, since: f64) {
    while window.front().is_some_and(|(t, _)| *t < since) {
        window.pop_front();
    }
}

/// Server → client, every [`BEAT_INTERVAL`]: the server's exact time (the client's clock
/// estimate), a sequence number (the client measures loss from the gaps) and the proxy update
/// rate (the client's interpolation delay depends on it).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct NetBeat {
    /// Increases by one per beat, wrapping.
    pub seq: Seq16,
    /// The server's simulation time when it sent the beat, seconds: the stamp the client's
    /// estimate of server time is built from. On the wire in whole microseconds, a varint
    /// (4-5 bytes for the first 9.5 hours where the `f64` took 8; at most 2⁴⁸ µs, 8.9 years:
    /// a time beyond, or not finite, reads back as infinite, which [`NetBeat::is_valid`] refuses).
    #[serde(with = "beat_micros")]
    pub server_time: f64,
    /// The default proxy update rate, Hz. On the wire in hundredths of a hertz when it is one
    /// exactly (2 bytes for 20 Hz), else its `f32` after a byte.
    #[serde(with = "beat_rate")]
    pub update_rate_hz: f32,
    /// The server's usual frame, whole microseconds (at most a second): a client's pings wait
    /// half of one on average before the server reads them, which the RTT carries but the
    /// one-way trip of a beat does not.
    pub frame_us: u32,
    /// The server's long frame ([`NetClock::server_long_frame`]), whole microseconds (at most
    /// a second on the wire, [`MAX_FRAME_SLACK`] as a server sends it; 0 until it has seen
    /// enough frames).
    pub long_frame_us: u32,
    /// The round trip the server measures to this client, whole microseconds (at most a
    /// second; 0 until measured): what it judges this client's shots by
    /// ([`NetClock::server_rtt`]).
    pub rtt_us: u32,
    /// The longest interpolation delay the server compensates for this client
    /// ([`RemoteClientClock::delay_cap`]), whole microseconds (at most [`MAX_REPORTED_DELAY`];
    /// 0 until it has a report): a shot drawn with a longer delay is judged later by the rest
    /// ([`delay_shortfall`]; [`NetClock::server_delay_cap`]).
    pub delay_cap_us: u32,
}

/// The wrap of a [`DelayReport`]'s view time on the wire, seconds: 2³² µs (71.6 minutes).
pub const VIEW_TIME_WRAP: f64 = 4_294.967_296;

/// The time nearest `near` (seconds) that reads `wrapped` modulo [`VIEW_TIME_WRAP`] (a
/// [`DelayReport`]'s view time as it arrives); not finite when either is not.
pub fn unwrap_view_time(wrapped: f64, near: f64) -> f64 {
    let off = (wrapped - near).rem_euclid(VIEW_TIME_WRAP);
    if off > VIEW_TIME_WRAP / 2.0 {
        near + off - VIEW_TIME_WRAP
    } else {
        near + off
    }
}

/// [`NetBeat::server_time`] on the wire: whole microseconds as a varint, up to
/// [`BEAT_MAX_MICROS`]; a time no server sends (negative, non-finite or beyond, 8.9 years)
/// goes as the one code above it and reads back as infinite, which [`NetBeat::is_valid`]
/// refuses. Human-readable formats: the seconds.
mod beat_micros {
    use super::BEAT_MAX_MICROS;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(super) fn serialize<S: Serializer>(time: &f64, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            return time.serialize(serializer);
        }
        let micros = time * 1e6;
        let code = if micros.is_finite() && (0.0..=BEAT_MAX_MICROS as f64).contains(&micros) {
            micros.round() as u64
        } else {
            BEAT_MAX_MICROS + 1
        };
        code.serialize(serializer)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
        if deserializer.is_human_readable() {
            return f64::deserialize(deserializer);
        }
        match u64::deserialize(deserializer)? {
            // (Every such integer comes back from its seconds exactly: 2⁴⁸ · 2⁻⁵² ≪ ½.)
            code if code <= BEAT_MAX_MICROS => Ok(code as f64 / 1e6),
            code if code == BEAT_MAX_MICROS + 1 => Ok(f64::INFINITY),
            _ => Err(serde::de::Error::custom("a beat's time beyond its range")),
        }
    }
}

/// Largest [`NetBeat::server_time`] on the wire, whole microseconds (2⁴⁸: 8.9 years).
const BEAT_MAX_MICROS: u64 = 1 << 48;

/// [`NetBeat::update_rate_hz`] on the wire: a varint of twice its hundredths of a hertz when
/// it is a whole number of them (as `f32`, up to [`BEAT_MAX_CENTI_HZ`]), else 1 and the
/// `f32`: one encoding per rate (an `f32` that has the short form is refused). Human-readable
/// formats: the `f32`.
mod beat_rate {
    use super::BEAT_MAX_CENTI_HZ;
    use serde::de::{self, SeqAccess, Visitor};
    use serde::ser::SerializeTuple;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    /// The rate's hundredths of a hertz, if it is a whole number of them.
    fn centi(rate: f32) -> Option<u32> {
        let c = (rate * 100.0).round();
        (rate.is_finite() && (0.0..=BEAT_MAX_CENTI_HZ as f32).contains(&c))
            .then_some(c as u32)
            .filter(|&c| (c as f32 / 100.0).to_bits() == rate.to_bits())
    }

    pub(super) fn serialize<S: Serializer>(rate: &f32, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            return rate.serialize(serializer);
        }
        match centi(*rate) {
            Some(c) => (c << 1).serialize(serializer),
            None => {
                let mut tuple = serializer.serialize_tuple(2)?;
                tuple.serialize_element(&1u32)?;
                tuple.serialize_element(rate)?;
                tuple.end()
            }
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f32, D::Error> {
        if deserializer.is_human_readable() {
            return f32::deserialize(deserializer);
        }
        /// Reads the head, then the `f32` when it says one follows.
        struct Rate;
        impl<'de> Visitor<'de> for Rate {
            type Value = f32;

            fn expecting(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
                f.write_str("a beat's update rate")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<f32, A::Error> {
                let missing = || de::Error::custom("a beat's update rate cut short");
                let head: u32 = seq.next_element()?.ok_or_else(missing)?;
                match head {
                    1 => {
                        let rate: f32 = seq.next_element()?.ok_or_else(missing)?;
                        if centi(rate).is_some() {
                            return Err(de::Error::custom("a beat's rate in its long form"));
                        }
                        Ok(rate)
                    }
                    h if h & 1 == 0 && h >> 1 <= BEAT_MAX_CENTI_HZ => Ok((h >> 1) as f32 / 100.0),
                    _ => Err(de::Error::custom("a beat's rate head no encoder writes")),
                }
            }
        }
        // (A tuple's length is not on the wire: the head tells whether the `f32` follows.)
        deserializer.deserialize_tuple(2, Rate)
    }
}

/// Largest [`NetBeat::update_rate_hz`] sent in its short form, hundredths of a hertz (2²⁰:
/// every such number of them comes back from its `f32` exactly).
const BEAT_MAX_CENTI_HZ: u32 = 1 << 20;

/// Longest server frame a [`NetBeat`] may state, microseconds.
const MAX_BEAT_FRAME_US: u32 = 1_000_000;

/// Client → server, every [`REPORT_INTERVAL`] and whenever the delay moved by
/// `REPORT_CHANGE` (at most every `MIN_REPORT_GAP`), in the next frame that sends the server
/// something else (moves, a shot; alone after [`REPORT_ALONE_AFTER`]): the interpolation delay
/// in effect and the view time on screen. The server learns from the stream how late, after
/// the view time it stamps, this client's packets arrive
/// ([`RemoteClientClock::view_lag_range`]): a shot stamped older than that allows is
/// backtracking.
///
/// On the wire it is packed by hand (`report_wire` in `clock.rs`): a head byte of what follows, the
/// sequence number in 2 bytes, the view time in 4, the delay and the frame as varints of
/// tens of microseconds when they are whole tens (an honest client rounds them so: 2 bytes
/// each where whole microseconds took 3), the loss runs only when not 0, the echo only when
/// there is one: 11 bytes for a 60-fps client's usual report, where the derived form took 13
/// to 15.
#[derive(Clone, Debug, PartialEq)]
pub struct DelayReport {
    /// Increases by one per report, wrapping; stale reports are dropped.
    pub seq: Seq16,
    /// Interpolation delay, whole microseconds (an honest client's a whole number of tens:
    /// see [`report_micros`]).
    pub delay_us: u32,
    /// The view time on screen when it was sent ([`NetClock::drawn_view_time`]), server
    /// seconds. On the wire in whole microseconds modulo [`VIEW_TIME_WRAP`] (4 bytes where the
    /// seconds took 8): a received report holds it so wrapped, and the server takes the time
    /// nearest its own clock that reads so ([`unwrap_view_time`]); a view time is never more
    /// than seconds from the server's.
    pub view_time: f64,
    /// The client's last frame, whole microseconds (see
    /// [`RemoteClientClock::client_frame`]; an honest client's a whole number of tens).
    pub frame_us: u32,
    /// How likely a proxy state the server sends this client at its update interval is lost
    /// right after a lost one, as the client reads its link's datagrams (as
    /// [`NetClock::state_continuation_over`], from the first run of losses met:
    /// [`unlag_core::DatagramLoss::continuation_once_met`]), in 255ths (0 while it cannot
    /// tell): how its losses run ([`RemoteClientClock::state_loss_runs`]).
    pub loss_runs: u8,
    /// The newest [`NetBeat`] the client read and how long ago, in the first report after
    /// it was read (none in the others): the server times the round trip with it.
    pub echo: Option<BeatEcho>,
}

/// The newest [`NetBeat`] a client read, in its next [`DelayReport`]: with what the server
/// remembers of when it sent that beat, one raw sample of the round trip
/// ([`RemoteClientClock::record_echo`]).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct BeatEcho {
    /// The beat's sequence number.
    pub seq: Seq16,
    /// How long the client held it, from the frame that read it to the frame that sends the
    /// report, whole microseconds (at most [`MAX_ECHO_HOLD_US`] counts).
    pub held_us: u32,
}

/// Seconds as whole microseconds rounded to a whole number of tens, held to `u32`: how a
/// client states its delay and frame in a [`DelayReport`] (5 µs at most from the seconds,
/// far under the milliseconds the server's timing checks allow; a report so rounded goes in
/// a byte less a figure).
pub fn report_micros(seconds: f64) -> u32 {
    ((seconds * 1e5).round().clamp(0.0, f64::from(u32::MAX / 10)) as u32) * 10
}

/// A [`DelayReport`]'s bytes on the wire: a tuple postcard writes without a length, its head
/// saying which parts follow.
///
/// | part | bytes |
/// | --- | --- |
/// | head: echo, loss runs, delay in tens, frame in tens | 1 |
/// | sequence number | 2 |
/// | view time (µs modulo [`VIEW_TIME_WRAP`]) | 4 |
/// | delay (tens of µs when whole tens, else µs; varint) | 1–5 |
/// | frame (likewise) | 1–5 |
/// | loss runs, only when not 0 | 1 |
/// | echo, only when there is one: its beat's sequence number, its hold (µs, varint) | 2 + 1–5 |
///
/// One encoding per report: a figure of whole tens goes in tens, and a head that says
/// otherwise, loss runs of 0 written, unknown head bits or a figure in tens beyond `u32` are
/// refused.
mod report_wire {
    use super::{BeatEcho, DelayReport};
    use serde::de::{self, SeqAccess, Visitor};
    use serde::ser::SerializeTuple;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use unlag_core::Seq16;

    const ECHO: u8 = 1;
    const LOSS_RUNS: u8 = 2;
    const DELAY_TENS: u8 = 4;
    const FRAME_TENS: u8 = 8;
    const HEAD: u8 = ECHO | LOSS_RUNS | DELAY_TENS | FRAME_TENS;

    /// The view time's 4 bytes: `time`'s whole microseconds modulo 2³² (read back modulo
    /// [`VIEW_TIME_WRAP`](super::VIEW_TIME_WRAP)). An honest clock is finite; anything else
    /// goes as 0 and reads as garbage there.
    fn view_code(time: f64) -> u32 {
        if time.is_finite() {
            (time * 1e6).round().rem_euclid(4_294_967_296.0) as u32
        } else {
            0
        }
    }

    /// A figure's varint and whether it is in tens.
    fn tens(micros: u32) -> (u32, bool) {
        if micros.is_multiple_of(10) {
            (micros / 10, true)
        } else {
            (micros, false)
        }
    }

    /// A figure read back: `code` in tens or not; refused when it should have gone in tens,
    /// or overflows.
    fn untens<E: de::Error>(code: u32, in_tens: bool) -> Result<u32, E> {
        match in_tens {
            true => code
                .checked_mul(10)
                .ok_or_else(|| E::custom("a delay report's figure beyond u32")),
            false if code.is_multiple_of(10) => {
                Err(E::custom("a delay report's figure not in its tens"))
            }
            false => Ok(code),
        }
    }

    impl Serialize for DelayReport {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            let (delay, delay_tens) = tens(self.delay_us);
            let (frame, frame_tens) = tens(self.frame_us);
            let head = (u8::from(self.echo.is_some()) * ECHO)
                | (u8::from(self.loss_runs != 0) * LOSS_RUNS)
                | (u8::from(delay_tens) * DELAY_TENS)
                | (u8::from(frame_tens) * FRAME_TENS);
            let parts = 5 + usize::from(self.loss_runs != 0) + 2 * usize::from(self.echo.is_some());
            let mut t = serializer.serialize_tuple(parts)?;
            t.serialize_element(&head)?;
            t.serialize_element(&self.seq.0.to_le_bytes())?;
            t.serialize_element(&view_code(self.view_time).to_le_bytes())?;
            t.serialize_element(&delay)?;
            t.serialize_element(&frame)?;
            if self.loss_runs != 0 {
                t.serialize_element(&self.loss_runs)?;
            }
            if let Some(echo) = self.echo {
                t.serialize_element(&echo.seq.0.to_le_bytes())?;
                t.serialize_element(&echo.held_us)?;
            }
            t.end()
        }
    }

    /// Reads the head, then the parts it says follow.
    struct Report;

    impl<'de> Visitor<'de> for Report {
        type Value = DelayReport;

        fn expecting(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
            f.write_str("a packed delay report")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<DelayReport, A::Error> {
            let missing = || de::Error::custom("a delay report cut short");
            let head: u8 = seq.next_element()?.ok_or_else(missing)?;
            if head & !HEAD != 0 {
                return Err(de::Error::custom("a delay report's head no encoder writes"));
            }
            let number: [u8; 2] = seq.next_element()?.ok_or_else(missing)?;
            let view: [u8; 4] = seq.next_element()?.ok_or_else(missing)?;
            let delay: u32 = seq.next_element()?.ok_or_else(missing)?;
            let frame: u32 = seq.next_element()?.ok_or_else(missing)?;
            let loss_runs = if head & LOSS_RUNS != 0 {
                match seq.next_element::<u8>()?.ok_or_else(missing)? {
                    0 => return Err(de::Error::custom("a delay report's loss runs of 0 written")),
                    runs => runs,
                }
            } else {
                0
            };
            let echo = if head & ECHO != 0 {
                let beat: [u8; 2] = seq.next_element()?.ok_or_else(missing)?;
                let held_us: u32 = seq.next_element()?.ok_or_else(missing)?;
                Some(BeatEcho {
                    seq: Seq16(u16::from_le_bytes(beat)),
                    held_us,
                })
            } else {
                None
            };
            Ok(DelayReport {
                seq: Seq16(u16::from_le_bytes(number)),
                delay_us: untens(delay, head & DELAY_TENS != 0)?,
                view_time: f64::from(u32::from_le_bytes(view)) / 1e6,
                frame_us: untens(frame, head & FRAME_TENS != 0)?,
                loss_runs,
                echo,
            })
        }
    }

    impl<'de> Deserialize<'de> for DelayReport {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            // (A tuple's length is not on the wire: the head tells which parts follow.)
            deserializer.deserialize_tuple(8, Report)
        }
    }
}

/// Longest hold a [`BeatEcho`] may state, microseconds: a beat read longer ago is no sample of
/// the link (an honest client echoes the next beat within a tenth of a second and a frame).
pub const MAX_ECHO_HOLD_US: u32 = 1_000_000;

/// Why a [`BeatEcho`] was not taken ([`RemoteClientClock::record_echo`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EchoRefusal {
    /// Of a beat no newer than the last taken, or one the server no longer remembers.
    Stale,
    /// A hold beyond [`MAX_ECHO_HOLD_US`], or a round trip below zero, beyond
    /// `MAX_VIEW_LAG` or not finite.
    Implausible,
}

/// The span of [`RemoteClientClock::risen_rtt`], seconds: a quarter of the view
/// reports' window ([`VIEW_LAG_WINDOW`]), within which a client's datagrams acknowledge some
/// fifteen of the server's packets.
pub const RECENT_RTT_SPAN: f64 = 0.5;

/// Echoes in a window before [`RemoteClientClock::window_rtt`] takes their median.
pub const MIN_ECHOES: usize = 5;

/// How far back [`RemoteClientClock::recent_trip`] looks, seconds: the server sends a client a
/// few packets a proxy interval, so a client's datagrams acknowledge a new one about as often,
/// while most of a 60-fps client's datagrams acknowledge nothing new.
pub const FRESH_TRIP_SPAN: f64 = 0.1;

/// How long the trips [`RemoteClientClock::recent_trip`] reads are kept, seconds: long enough
/// for a shot held to see whether a rise lasts ([`RemoteClientClock::shortest_trip_after`]).
pub const FRESH_TRIPS_KEPT: f64 = 1.0;

/// Acknowledgements in a window before [`RemoteClientClock::ack_window_rtt`] takes their
/// median (the server sends a client tens of datagrams a second).
pub const MIN_ACKS: usize = 8;

/// Most acknowledgement round trips [`RemoteClientClock`] keeps (about 10 s of a client sent
/// 100 datagrams a second).
pub const MAX_ACKS_KEPT: usize = 1024;

/// Pongs needed before the RTT is trusted for the one-way trip.
const MIN_PING_SAMPLES: u32 = 3;

/// Weight of one beat in the loss average: about the last 50 beats (5 s) count.
const LOSS_ALPHA: f64 = 0.02;

/// Client-side state behind [`NetClock`].
#[derive(Resource)]
pub(crate) struct ClientClockState {
    delay: DelayController,
    /// Whether the delay bridges a lost state (with hysteresis on the beats' loss).
    bridge: unlag_core::BridgeLatch,
    server_clock: ServerClockEstimator,
    /// The newest receivable server time ([`NetClock::receivable_time`]) against the local
    /// clock: the beats' stamps at their reads, with no RTT in them.
    present_clock: ServerClockEstimator,
    rejected_beats: u64,
    beats: SeqUnwrapper,
    loss: Ewma,
    update_rate_hz: f32,
    last_report: f64,
    last_reported: f64,
    report_seq: Seq16,
    frames: FramePace,
    /// The server's usual frame from its last beat, seconds.
    server_frame: f64,
    /// The server's long frame from its last beat, seconds ([`NetClock::server_long_frame`]).
    server_long_frame: f64,
    /// The round trip the server measures to this client, from its last beat, seconds.
    server_rtt: Option<f64>,
    /// The longest delay the server compensates for this client, from its last beat, seconds.
    server_delay_cap: Option<f64>,
    /// The frame times the last few reports claimed, seconds, newest last.
    reported_frames: std::collections::VecDeque<f64>,
    /// The newest beat read, and the real time of the frame that read it (seconds), until
    /// a report echoes it.
    unechoed: Option<(Seq16, f64)>,
    /// The beats read lately and when (a client understating its echoes picks from them),
    /// and the last it echoed.
    #[cfg(feature = "cheats")]
    cheat_beats: (std::collections::VecDeque<(Seq16, f64)>, Option<Seq16>),
}

impl ClientClockState {
    pub(crate) fn new(policy: DelayPolicy) -> Self {
        Self {
            delay: DelayController::new(policy, policy.target(0.05, 0.0, 0.0)),
            bridge: unlag_core::BridgeLatch::default(),
            server_clock: ServerClockEstimator::default(),
            present_clock: ServerClockEstimator::default(),
            rejected_beats: 0,
            beats: SeqUnwrapper::new(),
            loss: Ewma::new(),
            update_rate_hz: 20.0,
            last_report: f64::NEG_INFINITY,
            last_reported: 0.0,
            report_seq: Seq16::default(),
            frames: FramePace::default(),
            server_frame: 0.0,
            server_long_frame: 0.0,
            server_rtt: None,
            server_delay_cap: None,
            reported_frames: std::collections::VecDeque::new(),
            unechoed: None,
            #[cfg(feature = "cheats")]
            cheat_beats: Default::default(),
        }
    }
}

/// Server-side state of the beat.
#[derive(Resource, Default)]
pub(crate) struct ServerBeatState {
    next_beat: f64,
    seq: Seq16,
    /// The update interval in effect last frame, seconds.
    interval: Option<f64>,
    /// After the update rate went up: when, and the longer interval before it (clients' delays
    /// shrink from it gradually).
    slower: Option<(f64, f64)>,
    /// The server's own frames (their usual length travels in the beats).
    frames: FramePace,
    /// The server's own frames as outages of its states (their covering travels in the
    /// beats as the long frame, and the compensation cap allows for it).
    outages: unlag_core::FrameOutages,
    /// The long frame, seconds, as last taken from `outages` (once per beat).
    long_frame: f64,
    /// (sequence number, server time) of the last [`BEATS_REMEMBERED`] beats sent, oldest
    /// first: what a [`BeatEcho`] is timed from.
    sent: std::collections::VecDeque<(Seq16, f64)>,
}

/// Beats whose sending time the server remembers for their echoes: 6.4 s of them.
const BEATS_REMEMBERED: usize = 64;

impl ServerBeatState {
    /// When beat `seq` was sent, server seconds, if it is still remembered.
    fn sent_at(&self, seq: Seq16) -> Option<f64> {
        self.sent.iter().find(|(s, _)| *s == seq).map(|(_, t)| *t)
    }
}

pub(crate) fn register(app: &mut App) {
    app.add_net_message::<NetBeat>(NetDirection::ServerToClient)
        .add_net_message::<DelayReport>(NetDirection::ClientToServer);
}

/// The server's simulation time now, seconds: the last simulated tick plus the virtual time
/// elapsed since it. The same value anywhere in a frame (before the fixed loop it includes the
/// time the loop is about to simulate).
pub fn server_time_now(
    timeline: &LocalTimeline,
    virtual_time: &Time<Virtual>,
    fixed: &Time<Fixed>,
    tick: f64,
) -> f64 {
    f64::from(timeline.tick().0) * tick + (virtual_time.elapsed() - fixed.elapsed()).as_secs_f64()
}

/// The server's simulation time now ([`server_time_now`]) read from a server App's World.
pub fn server_time_of_world(world: &World) -> f64 {
    server_time_now(
        world.resource::<LocalTimeline>(),
        world.resource::<Time<Virtual>>(),
        world.resource::<Time<Fixed>>(),
        world.resource::<TickDuration>().0.as_secs_f64(),
    )
}

impl NetBeat {
    /// Whether every figure is within what a server sends: a rate within the allowed range,
    /// a finite, non-negative time, a frame and RTT of at most a second and a delay cap of at
    /// most [`MAX_REPORTED_DELAY`]. A client drops other beats.
    pub fn is_valid(&self) -> bool {
        let beat = self;
        beat.update_rate_hz.is_finite()
            && (unlag_core::conditions::MIN_UPDATE_RATE_HZ
                ..=unlag_core::conditions::MAX_UPDATE_RATE_HZ)
                .contains(&beat.update_rate_hz)
            && beat.server_time.is_finite()
            && beat.server_time >= 0.0
            && beat.frame_us <= MAX_BEAT_FRAME_US
            && beat.long_frame_us <= MAX_BEAT_FRAME_US
            && beat.rtt_us <= MAX_BEAT_RTT_US
            && f64::from(beat.delay_cap_us) <= MAX_REPORTED_DELAY * 1e6
    }
}

/// Longest round trip a [`NetBeat`] may state, microseconds.
pub const MAX_BEAT_RTT_US: u32 = 1_000_000;

impl ClientClockState {
    /// Takes one [`NetBeat`]: the server's update rate, frame, measured RTT and rewind cap;
    /// the beats missed since the last count as lost (a late one, already counted lost, is
    /// stale); and with a `reading` (this client's RTT, the time now and this frame, seconds:
    /// connected, the RTT known) a sample of the server's clock. A malformed beat is dropped
    /// with a counted warning. The newest, read in the frame starting at real time `read_at`
    /// (seconds), is echoed in the next report.
    fn take_beat(&mut self, beat: NetBeat, reading: Option<(f64, f64, f64)>, read_at: f64) {
        if !beat.is_valid() {
            crate::warn_counted!(self.rejected_beats, "dropped a malformed NetBeat: {beat:?}");
            return;
        }
        let previous = self.beats.latest();
        let Some(n) = self.beats.unwrap(beat.seq) else {
            return;
        };
        self.update_rate_hz = beat.update_rate_hz;
        self.server_frame = f64::from(beat.frame_us) / 1e6;
        self.server_long_frame = f64::from(beat.long_frame_us) / 1e6;
        self.server_rtt = (beat.rtt_us > 0).then(|| f64::from(beat.rtt_us) / 1e6);
        self.server_delay_cap = (beat.delay_cap_us > 0).then(|| f64::from(beat.delay_cap_us) / 1e6);
        match previous {
            // A late beat was already counted as lost, and its stamp is stale.
            Some(p) if n <= p => return,
            _ => {
                self.unechoed = Some((beat.seq, read_at));
                #[cfg(feature = "cheats")]
                {
                    if self.cheat_beats.0.len() == 64 {
                        self.cheat_beats.0.pop_front();
                    }
                    self.cheat_beats.0.push_back((beat.seq, read_at));
                }
                let missed = previous.map_or(0, |p| n - p - 1).min(1000);
                for _ in 0..missed {
                    self.loss.add(1.0, LOSS_ALPHA, LOSS_ALPHA);
                }
                self.loss.add(0.0, LOSS_ALPHA, LOSS_ALPHA);
            }
        }
        let Some((rtt, now, frame)) = reading else {
            return;
        };
        // The RTT carries two waits to be read, half a frame each on average: the pong's here
        // and the ping's on the server. A beat travels the network's one way and waits to be
        // read here: on average the middle of the frame before this one.
        let network_one_way =
            (rtt - self.frames.usual() / 2.0 - self.server_frame / 2.0).max(0.0) / 2.0;
        let read_window = (frame, self.frames.usual());
        self.server_clock.add_sample_read(
            now - frame / 2.0,
            read_window,
            beat.server_time,
            network_one_way,
        );
        // The present: the beat's stamp where it was read, less the half of both waits that
        // `network_one_way` leaves out of the trip (so that it is, on average, the server time
        // less half the RTT, as it was defined before).
        let waits = (self.frames.usual() / 2.0 + self.server_frame / 2.0) / 2.0;
        self.present_clock.add_sample_read(
            now - frame / 2.0,
            read_window,
            beat.server_time - waits,
            0.0,
        );
    }
}

/// PreUpdate on a client: reads beats and lightyear's RTT and jitter into [`NetClock`].
pub(crate) fn update_client_clock(
    real: Res<Time<Real>>,
    tick: Res<TickDuration>,
    mut clock: ResMut<NetClock>,
    mut state: ResMut<ClientClockState>,
    mut link: Query<
        (
            &Link,
            &PingManager,
            Option<&mut MessageReceiver<NetBeat>>,
            Has<Connected>,
            Option<&LinkTraffic>,
        ),
        With<Client>,
    >,
) {
    clock.tick_duration = tick.0.as_secs_f64();
    let now = real.elapsed_secs_f64();
    state.frames.observe(real.delta_secs_f64());
    clock.usual_frame = state.frames.usual();
    clock.server_rtt = state.server_rtt;
    clock.server_delay_cap = state.server_delay_cap;
    clock.server_frame = state.server_frame;
    clock.server_long_frame = state.server_long_frame;
    clock.least_reported_frame = state
        .reported_frames
        .iter()
        .copied()
        .fold(clock.usual_frame, f64::min);
    clock.frame_hitched = state.frames.hitched();
    let Ok((link, ping, beats, connected, traffic)) = link.single_mut() else {
        clock.synced = false;
        return;
    };
    let datagrams = traffic.map(|t| &t.datagram_loss);
    clock.datagram_loss = datagrams.and_then(|d| d.share());
    clock.datagram_continuation = datagrams.and_then(|d| d.continuation());
    clock.datagram_rate = datagrams.and_then(|d| d.rate(now));
    if !connected {
        state.server_clock.reset();
        state.present_clock.reset();
    }
    clock.rtt = link.stats.rtt.as_secs_f64();
    clock.jitter = link.stats.jitter.as_secs_f64();
    // Until a few pongs are in, half the RTT is not a one-way trip worth adding.
    let rtt_known = ping.latency_samples_recv() >= MIN_PING_SAMPLES;
    // Read with the clock when connected and the RTT is known: (RTT, now, this frame), seconds.
    let reading = (connected && rtt_known).then_some((clock.rtt, now, real.delta_secs_f64()));
    for beat in beats
        .into_iter()
        .flat_map(|mut b| b.receive().collect::<Vec<_>>())
    {
        state.take_beat(beat, reading, now);
    }
    // The smoothed clock: estimates are noisy by the jitter, and a view time that jumps with
    // every beat would make proxies stutter.
    let estimate = state
        .server_clock
        .smooth_server_time(now)
        .filter(|_| connected);
    clock.synced = estimate.is_some();
    if let Some(server_time) = estimate {
        clock.server_time = server_time;
    }
    clock.receivable_time = state
        .present_clock
        .smooth_server_time(now)
        .filter(|_| connected);
    clock.loss = state.loss.mean();
    clock.send_interval = 1.0 / f64::from(state.update_rate_hz);
    let (interval, jitter, loss) = (clock.send_interval, clock.jitter, clock.loss);
    let policy = *state.delay.policy();
    let loss = state.bridge.loss(&policy, loss);
    state.delay.set_inputs(interval, jitter, loss);
    if !clock.synced {
        state.delay.snap_to_target();
    }
    let own = state.delay.update(real.delta_secs_f64());
    clock.interpolation_delay = clock.proxy_delay.filter(|d| d.is_finite()).unwrap_or(own);
    clock.target_interpolation_delay = state.delay.target();
}

/// A client that lies in its view reports (tests of the server's checks; feature `cheats`).
#[cfg(feature = "cheats")]
#[derive(Resource, Clone, Debug, Default)]
pub struct NetCheats {
    /// Seconds every report's view time is stamped older than the truth.
    pub view_report_offset: f64,
    /// A frame time every report claims instead of the real one, seconds (pretending to be
    /// a slow client to widen the server's view-time checks).
    pub claimed_frame: Option<f64>,
    /// Seconds between delay reports instead of [`REPORT_INTERVAL`] (and none sent early when
    /// the delay moves): a client reporting seldom, so that its claimed frames look spaced
    /// as they claim.
    pub report_interval: Option<f64>,
    /// Seconds every report adds to the interpolation delay drawn with (with
    /// `view_report_offset` the same, the report stays consistent: a client claiming a longer
    /// delay than it draws with, to stamp its shots that much older).
    pub reported_delay_extra: f64,
    /// On the server: the RTT of the client with this netcode id reads this much longer,
    /// seconds, as when that client holds the pongs of lightyear's pings before answering
    /// (inflating the RTT the view-time checks centre on).
    pub pong_delay: Option<(u64, f64)>,
    /// Seconds each report's echo of a beat understates how long the beat was held: an echo
    /// goes only once its beat was held this long, and claims that much less (the server's
    /// round trip from the echoes reads this much longer, as with held pongs).
    pub echo_understated: f64,
    /// Seconds the client holds each of the server's datagrams before its transport reads it
    /// (a delay line; at 0 the held ones are read at once, in order): a pulse of it before a
    /// shot lengthens the trip of the datagram carrying the shot as a step up in latency would.
    pub inbound_delay: f64,
}

/// How many of the last delay reports' frame times [`NetClock::least_reported_frame`] looks
/// at: the server may be holding any of the reports still on their way.
const REPORTED_FRAMES_KEPT: usize = 4;

/// PostUpdate on a client, after the frame's other messages were queued
/// ([`NetSystems::RideAlong`](crate::NetSystems::RideAlong)): sends delay reports.
pub(crate) fn send_delay_reports(
    #[cfg(feature = "cheats")] cheats: Option<Res<NetCheats>>,
    time: Res<Time>,
    real: Res<Time<Real>>,
    clock: Res<NetClock>,
    mut state: ResMut<ClientClockState>,
    mut link: Query<
        (&mut MessageSender<DelayReport>, &mut LinkTraffic),
        (With<Client>, With<Connected>),
    >,
) {
    let Ok((mut reports, mut traffic)) = link.single_mut() else {
        return;
    };
    // Paced by the estimated server time (simulated time in the testbed, real time live), and
    // at once when the delay moved: the server judges shots against the delay reported.
    let now = clock.server_time;
    let moved = (clock.interpolation_delay - state.last_reported).abs() >= REPORT_CHANGE
        && now >= state.last_report + MIN_REPORT_GAP;
    let every = REPORT_INTERVAL;
    #[cfg(feature = "cheats")]
    let (moved, every) = match cheats.as_ref().and_then(|c| c.report_interval) {
        Some(every) => (false, every),
        None => (moved, every),
    };
    // A due report rides with the frame's moves or shot (a shot that left while the delay
    // moved takes the new delay with it), and goes alone only when nothing else has gone
    // for a while.
    let due = (now >= state.last_report + every || moved) && traffic.queued_this_frame;
    let overdue = now >= state.last_report + every.max(REPORT_ALONE_AFTER);
    // After a hitch the view on screen is as old as the hitch: the next frame reports.
    if clock.synced && !clock.frame_hitched && (due || overdue) {
        state.last_report = now;
        state.last_reported = clock.interpolation_delay;
        state.report_seq = state.report_seq.next();
        let report = DelayReport {
            seq: state.report_seq,
            delay_us: report_micros(clock.interpolation_delay),
            view_time: clock.drawn_view_time(),
            frame_us: report_micros(time.delta_secs_f64()),
            // From the first run of losses met: a trail costs bandwidth, not latency.
            loss_runs: traffic
                .datagram_loss
                .continuation_once_met()
                .zip(clock.datagram_rate)
                .map(|(c, rate)| unlag_core::continuation_over(c, rate, clock.send_interval))
                .filter(|c| c.is_finite())
                .map_or(0, |c| (c.clamp(0.0, 1.0) * 255.0).round() as u8),
            echo: state.unechoed.take().map(|(seq, read_at)| BeatEcho {
                seq,
                held_us: ((real.elapsed_secs_f64() - read_at) * 1e6)
                    .round()
                    .clamp(0.0, f64::from(u32::MAX)) as u32,
            }),
        };
        // An echo understated by `b`: of the newest beat read at least `b` ago (and newer than
        // the last echoed), claiming `b` less than it was held.
        #[cfg(feature = "cheats")]
        let report = match cheats.as_ref().map(|c| c.echo_understated) {
            Some(b) if b > 0.0 => {
                let now = real.elapsed_secs_f64();
                let (beats, last) = &mut state.cheat_beats;
                let pick = beats
                    .iter()
                    .rev()
                    .find(|(seq, read_at)| {
                        now - read_at >= b && last.is_none_or(|l| seq.is_newer_than(l))
                    })
                    .copied();
                if let Some((seq, _)) = pick {
                    *last = Some(seq);
                }
                DelayReport {
                    echo: pick.map(|(seq, read_at)| BeatEcho {
                        seq,
                        held_us: ((now - read_at - b) * 1e6).round() as u32,
                    }),
                    ..report
                }
            }
            _ => report,
        };
        #[cfg(feature = "cheats")]
        let report = DelayReport {
            view_time: report.view_time - cheats.as_ref().map_or(0.0, |c| c.view_report_offset),
            delay_us: report.delay_us
                + cheats
                    .as_ref()
                    .map_or(0, |c| (c.reported_delay_extra * 1e6) as u32),
            frame_us: cheats
                .as_ref()
                .and_then(|c| c.claimed_frame)
                .map_or(report.frame_us, |f| (f * 1e6) as u32),
            ..report
        };
        if state.reported_frames.len() >= REPORTED_FRAMES_KEPT {
            state.reported_frames.pop_front();
        }
        state
            .reported_frames
            .push_back(f64::from(report.frame_us) / 1e6);
        traffic.send_counted::<UnreliableChannel, _>(&mut reports, report);
    }
}

/// Per-client state of [`DelayReport`]s on the server (on each client's link entity, beside
/// its [`RemoteClientClock`]): which reports were taken, and how many more it may send.
#[derive(Component, Clone, Debug, Default)]
pub struct ReportState {
    last: Option<Seq16>,
    /// The sequence numbers of the last [`REPORTS_REMEMBERED`] reports taken.
    seen: std::collections::VecDeque<Seq16>,
    /// Reports this client may still send before the rate cap ([`MAX_REPORT_RATE`]) drops
    /// them, and the real time (seconds) it was last topped up.
    allowance: Option<(f64, f64)>,
    /// Reports dropped for coming faster than [`MAX_REPORT_RATE`].
    pub over_rate: u64,
}

/// Most [`DelayReport`]s a second a client may send, on average: twice what an honest one
/// sends at most (one per [`MIN_REPORT_GAP`]). Beyond, reports are dropped before they cost
/// anything: a flood of valid reports would otherwise make the server walk the client's
/// window of lags once per report.
pub const MAX_REPORT_RATE: f64 = 2.0 / MIN_REPORT_GAP;

/// Reports a client may send at once (its burst, above [`MAX_REPORT_RATE`] × the server's
/// frame): a jittery link bunches an honest client's reports.
pub const REPORT_BURST: f64 = 16.0;

/// What the server knows when it takes a [`DelayReport`] ([`ReportState::take`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReportContext {
    /// The server's time ([`NetClock::server_time`]), seconds.
    pub server_time: f64,
    /// The server's real time, seconds (the rate cap runs on it).
    pub real_time: f64,
    /// The server's usual frame, seconds.
    pub frame: f64,
    /// The server's long frame ([`NetClock::server_long_frame`]), seconds: the compensation
    /// cap allows for a delay that covers it.
    pub long_frame: f64,
    /// The proxy update interval now, seconds.
    pub interval: f64,
    /// When the update rate last went up (real time, seconds) and the slower interval before
    /// it (seconds): clients' delays shrink from it gradually.
    pub slower: Option<(f64, f64)>,
}

/// Why the server did not take a [`DelayReport`] ([`ReportState::take`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportRefusal {
    /// Beyond [`MAX_REPORT_RATE`]: dropped unread.
    OverRate,
    /// A view time that is not finite, or further than a few seconds from the server's.
    Garbage,
    /// A copy or replay of a report taken, or one overtaken too long ago to tell from one.
    Replayed,
    /// A lag no trip of this link can have.
    ImplausibleLag,
}

impl ReportState {
    /// Takes one delay report from the client whose clock figures are `remote`, arrived as
    /// `at` says: the client's interpolation delay, the delay the server compensates for it,
    /// and one more sample of how late its packets arrive after the view time they stamp.
    /// A refused report is counted ([`RemoteClientClock::rejected_reports`], and
    /// [`ReportState::over_rate`] for a flood) and changes nothing else.
    pub fn take(
        &mut self,
        remote: &mut RemoteClientClock,
        report: &DelayReport,
        at: ReportContext,
    ) -> Result<(), ReportRefusal> {
        let verdict = self.take_counted(remote, report, at);
        if verdict.is_err() {
            remote.rejected_reports += 1;
        }
        if verdict == Err(ReportRefusal::OverRate) {
            self.over_rate += 1;
        }
        verdict
    }

    fn take_counted(
        &mut self,
        remote: &mut RemoteClientClock,
        report: &DelayReport,
        at: ReportContext,
    ) -> Result<(), ReportRefusal> {
        if !self.spend_allowance(at.real_time, at.frame) {
            return Err(ReportRefusal::OverRate);
        }
        // As it came, modulo the wire's wrap: the one nearest our clock.
        let view_time = unwrap_view_time(report.view_time, at.server_time);
        // A view time further than a few seconds from ours is garbage: the whole report goes.
        if !(view_time.is_finite() && (at.server_time - view_time).abs() < MAX_VIEW_LAG) {
            return Err(ReportRefusal::Garbage);
        }
        if self.seen.contains(&report.seq) {
            return Err(ReportRefusal::Replayed);
        }
        let delay = (f64::from(report.delay_us) / 1e6).min(MAX_REPORTED_DELAY);
        let overtaken = self
            .last
            .is_some_and(|last| !report.seq.is_newer_than(last));
        if overtaken {
            // A report that a newer one overtook (jitter reorders packets) says nothing new of
            // the delay, but its lag is one of the link's: dropping the late ones would leave
            // the window only the quicker trips, and shots (which travel apart) would land past
            // its most. Too old to be told from a replay: dropped.
            if !self.remembers_since(report.seq) {
                self.remember(report.seq);
                return Err(ReportRefusal::Replayed);
            }
            self.remember(report.seq);
            return if remote.record_overtaken_view_lag(at.server_time, view_time, delay) {
                Ok(())
            } else {
                Err(ReportRefusal::ImplausibleLag)
            };
        }
        // Garbage lag (with the delay it reports): refused whole, its delay not taken.
        if !remote.plausible_lag(at.server_time - view_time - delay) {
            self.remember(report.seq);
            return Err(ReportRefusal::ImplausibleLag);
        }
        self.last = Some(report.seq);
        self.remember(report.seq);
        // Compensated no further than the server's update rate and the link's jitter call
        // for: a longer delay would let shots claim older view times (an interp cheat). A
        // longer one is the client's to draw with; its shots are judged later by the rest
        // (`delay_shortfall`).
        let spread = link_spread(remote);
        let frame = at.frame.max(at.long_frame);
        let mut most = plausible_delay(at.interval, spread, frame);
        if let Some((since, old)) = at.slower {
            let shrinking = plausible_delay(old, spread, frame)
                - PLAUSIBLE_DELAY_DECAY * (at.real_time - since);
            most = most.max(shrinking);
        }
        if delay > most {
            crate::warn_counted!(
                level: info,
                remote.reports_above_cap,
                "a client draws with a {delay:.3}-s delay, {most:.3} s compensated"
            );
        }
        remote.interpolation_delay = delay;
        remote.delay_cap = most;
        remote.cap_interval = at.interval;
        remote.cap_frame = frame;
        remote.reported = true;
        remote.server_frame = at.frame;
        // (Plausible: checked above with this delay.)
        remote.record_view_lag(at.server_time, view_time);
        remote.record_client_frame(f64::from(report.frame_us) / 1e6);
        remote.state_loss_runs = f64::from(report.loss_runs) / 255.0;
        Ok(())
    }

    /// Spends one report of the client's allowance at real time `now` (seconds; `frame` is
    /// the server's usual frame): false when it has none left. The allowance refills at
    /// [`MAX_REPORT_RATE`] and holds at most a burst of [`REPORT_BURST`], or a whole frame's
    /// worth when the server's frames are long (a listen host at 6 fps reads 17 reports of an
    /// honest client at once).
    fn spend_allowance(&mut self, now: f64, frame: f64) -> bool {
        let now = if now.is_finite() { now } else { 0.0 };
        let frame = unlag_core::finite_non_negative(frame).min(1.0);
        let cap = REPORT_BURST.max(2.0 * MAX_REPORT_RATE * frame);
        let (tokens, at) = self.allowance.unwrap_or((cap, now));
        let elapsed = (now - at).clamp(0.0, 1.0);
        let tokens = (tokens + elapsed * MAX_REPORT_RATE).min(cap.max(elapsed * MAX_REPORT_RATE));
        if tokens < 1.0 {
            self.allowance = Some((tokens, now));
            return false;
        }
        self.allowance = Some((tokens - 1.0, now));
        true
    }

    /// Whether `seq`, older than the newest report taken, is still among those remembered
    /// (else it cannot be told from a replay).
    fn remembers_since(&self, seq: Seq16) -> bool {
        self.seen.len() < REPORTS_REMEMBERED
            || self.seen.front().is_some_and(|o| seq.is_newer_than(*o))
    }

    /// Remembers that report `seq` was taken, forgetting the oldest beyond
    /// [`REPORTS_REMEMBERED`].
    fn remember(&mut self, seq: Seq16) {
        if self.seen.len() == REPORTS_REMEMBERED {
            self.seen.pop_front();
        }
        self.seen.push_back(seq);
    }
}

/// How many recent reports' sequence numbers the server remembers: a report overtaken by a
/// newer one is still taken for its lag if it is among them and new, a copy or replay is not.
const REPORTS_REMEMBERED: usize = 64;

/// PreUpdate on the server: its own [`NetClock`], and each client's [`RemoteClientClock`].
pub(crate) fn update_server_clock(
    tick: Res<TickDuration>,
    timeline: Res<LocalTimeline>,
    virtual_time: Res<Time<Virtual>>,
    fixed: Res<Time<Fixed>>,
    mut clock: ResMut<NetClock>,
    mut clients: Query<(&Link, &mut RemoteClientClock, Option<&RemoteId>), With<ClientOf>>,
    #[cfg(feature = "cheats")] cheats: Option<Res<NetCheats>>,
) {
    let tick = tick.0.as_secs_f64();
    *clock = NetClock {
        synced: true,
        server_time: server_time_now(&timeline, &virtual_time, &fixed, tick),
        tick_duration: tick,
        ..default()
    };
    for (link, mut remote, _id) in &mut clients {
        let rtt = link.stats.rtt.as_secs_f64();
        // A client that holds its pongs (a cheat, for tests of the server's checks): the
        // server's RTT of it reads that much longer.
        #[cfg(feature = "cheats")]
        let rtt = rtt
            + cheats
                .as_ref()
                .and_then(|c| c.pong_delay)
                .filter(|&(cheater, _)| _id.is_some_and(|id| id.0 == PeerId::Netcode(cheater)))
                .map_or(0.0, |(_, delay)| delay);
        remote.set_rtt(clock.server_time, rtt);
        remote.take_acks(clock.server_time);
        remote.jitter = link.stats.jitter.as_secs_f64();
    }
}

/// Update on the server: reads delay reports and sends beats.
pub(crate) fn server_beats(
    real: Res<Time<Real>>,
    clock: Res<NetClock>,
    conditions: Res<crate::NetConditions>,
    mut state: ResMut<ServerBeatState>,
    mut clients: Query<
        (
            &mut RemoteClientClock,
            &mut ReportState,
            Option<&mut MessageReceiver<DelayReport>>,
            &mut MessageSender<NetBeat>,
            &mut LinkTraffic,
        ),
        (With<ClientOf>, With<Connected>),
    >,
) {
    let now = real.elapsed_secs_f64();
    state.frames.observe(real.delta_secs_f64());
    // Only frames someone waited through: before the first client connects a server sends no
    // states, and its first frames (loading, a window's first shaders) are no outage.
    if !clients.is_empty() {
        state.outages.observe(now, real.delta_secs_f64());
    }
    let frame = state.frames.usual();
    // What the compensation cap allows for the server's frames: its long frame (as of the
    // last beat), or its usual one when that is longer.
    let long_frame = frame.max(state.long_frame);
    let interval = 1.0 / f64::from(conditions.get().update_rate_hz.max(0.1));
    // The rate went up: clients' delays shrink from the old interval's gradually.
    if let Some(previous) = state.interval
        && interval < previous
    {
        // Unless an earlier, slower rate still allows more.
        let earlier = state.slower.is_some_and(|(since, old)| {
            plausible_delay(old, 0.0, long_frame) - PLAUSIBLE_DELAY_DECAY * (now - since)
                > plausible_delay(previous, 0.0, long_frame)
        });
        if !earlier {
            state.slower = Some((now, previous));
        }
    }
    state.interval = Some(interval);
    let slower = state.slower;
    let beat = (now >= state.next_beat).then(|| {
        state.next_beat = now + BEAT_INTERVAL;
        state.seq = state.seq.next();
        if state.sent.len() == BEATS_REMEMBERED {
            state.sent.pop_front();
        }
        let sent = (state.seq, clock.server_time);
        state.sent.push_back(sent);
        // The share clients are held to by default (`DelayPolicy::starved_share`), as the
        // timing checks take the default policy's rates. At most `MAX_FRAME_SLACK`, as the
        // view checks allow for a server's frame: a server that stalls longer (a cold shader
        // cache's first frames, over a second each) starves its clients whatever they do, and
        // compensating such a delay would let any client of it claim views a second old.
        let share = unlag_core::DelayPolicy::default().starved_share;
        state.long_frame = state
            .outages
            .covering(share)
            .unwrap_or(0.0)
            .min(MAX_FRAME_SLACK);
        NetBeat {
            seq: state.seq,
            server_time: clock.server_time,
            update_rate_hz: conditions.get().update_rate_hz,
            frame_us: (frame * 1e6)
                .round()
                .clamp(0.0, f64::from(MAX_BEAT_FRAME_US)) as u32,
            long_frame_us: (state.long_frame * 1e6)
                .round()
                .clamp(0.0, f64::from(MAX_BEAT_FRAME_US)) as u32,
            rtt_us: 0,
            delay_cap_us: 0,
        }
    });
    for (mut remote, mut reports, receiver, mut sender, mut traffic) in &mut clients {
        if let Some(mut receiver) = receiver {
            let at = ReportContext {
                server_time: clock.server_time,
                real_time: now,
                frame,
                long_frame,
                interval,
                slower,
            };
            for report in receiver.receive() {
                match reports.take(&mut remote, &report, at) {
                    Err(ReportRefusal::OverRate) => {
                        crate::warn_counted!(
                            counted: reports.over_rate,
                            "delay reports of a client over the rate cap dropped"
                        );
                    }
                    Ok(()) => {
                        // Timed from the beat's stamp, as the reports' lags are from theirs.
                        if let Some(echo) = report.echo {
                            let sent = state.sent_at(echo.seq);
                            remote.take_echo(clock.server_time, echo, sent);
                        }
                    }
                    Err(_) => {}
                }
            }
        }
        if let Some(beat) = &beat {
            let beat = remote.beat_for(beat, clock.server_time);
            traffic.send_counted::<UnreliableChannel, _>(&mut sender, beat);
        }
    }
}

impl RemoteClientClock {
    /// This client's copy of `beat`, sent at server time `now` (seconds): with the RTT the
    /// server measures to it and the rewind cap on its delay (microseconds, 0 when unknown),
    /// the cap announced as it goes (the view checks hold a shot's cap to one announced).
    fn beat_for(&mut self, beat: &NetBeat, now: f64) -> NetBeat {
        let rtt_us = if self.rtt.is_finite() {
            (self.rtt * 1e6)
                .round()
                .clamp(0.0, f64::from(MAX_BEAT_RTT_US)) as u32
        } else {
            0
        };
        let delay_cap_us = if self.reported && self.delay_cap.is_finite() {
            (self.delay_cap.clamp(0.0, MAX_REPORTED_DELAY) * 1e6).round() as u32
        } else {
            0
        };
        if delay_cap_us > 0 {
            self.announce_cap(now, f64::from(delay_cap_us) / 1e6);
        }
        NetBeat {
            rtt_us,
            delay_cap_us,
            ..beat.clone()
        }
    }
}
