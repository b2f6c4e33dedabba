//! The interpolation delay: how far behind the newest receivable server state a client renders
//! simulated proxies.
//!
//! Definitions (seconds, on the server's clock):
//!
//! - *server time*: the client's estimate of the server's current time;
//! - *one-way trip*: half the round-trip time; the newest state a client can have received was
//!   sent at about `server_time − one_way` (the *present*, which `unlag_net` estimates straight
//!   from the server's stamps), and no client can do better than that;
//! - *interpolation delay*: how far the view time sits behind that newest receivable state;
//! - *view time* = `present − interpolation_delay`: the server time at which
//!   proxies are rendered, and the time every shot is judged at.
//!
//! Every millisecond of interpolation delay is a millisecond of peeker's advantage for the other
//! side, so the target is the least that keeps a state newer than the view time in hand: one
//! update interval (states are sent that far apart), plus what bridges a lost update when the
//! link loses packets (one more interval, or for slow proxies, whose states are sent twice, the
//! time to the repeat: [`repeat_after`]), plus a margin for late packets.

use crate::settings::{Fields, SettingsError, Validate};
use crate::smoothing::ProxyState;
use serde::{Deserialize, Serialize};

/// Proxies whose states are sent this far apart or further (seconds: 10 Hz and slower) get
/// each state sent twice ([`repeat_after`]).
pub const REPEAT_MIN_INTERVAL: f64 = 0.1;

/// A repeated state's second copy follows the first by this share of the send interval.
pub const REPEAT_SHARE: f64 = 0.25;

/// How long after a state the server sends it again, seconds, for a proxy sent every
/// `send_interval` seconds: a quarter interval at [`REPEAT_MIN_INTERVAL`] and slower, else
/// never (`None`). A lost state of a slow proxy would otherwise leave a gap of two intervals,
/// which the delay must cover (2 s at 1 Hz): with the repeat, a quarter interval more than the
/// one a state is late anyway. Faster proxies bridge a loss with one more short interval.
pub fn repeat_after(send_interval: f64) -> Option<f64> {
    (send_interval.is_finite() && send_interval >= REPEAT_MIN_INTERVAL)
        .then_some(REPEAT_SHARE * send_interval)
}

/// How a proxy's states are sent, for the delay rules: every `interval` seconds, and whether
/// each goes again [`repeat_after`] it. From an interval alone (`Sent::from(0.5)`), repeated
/// as a proxy of that rate of its own is; a client's reduced interest in a faster proxy lowers
/// its rate but sends no repeats ([`Sent::unrepeated`]).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Sent {
    /// Seconds between its states.
    pub interval: f64,
    /// Whether a slow one's states are sent twice.
    pub repeated: bool,
}

impl Sent {
    /// States every `interval` seconds, never sent twice.
    pub fn unrepeated(interval: f64) -> Self {
        Self {
            interval,
            repeated: false,
        }
    }

    /// How long after a state its repeat comes, seconds, if it comes ([`repeat_after`]).
    pub fn repeat_after(&self) -> Option<f64> {
        repeat_after(self.interval).filter(|_| self.repeated)
    }
}

impl From<f64> for Sent {
    fn from(interval: f64) -> Self {
        Self {
            interval,
            repeated: true,
        }
    }
}

/// The interval a reduced send rate of `hz` sends at, seconds: the rate held to 1–60 Hz (a
/// rate outside it, or not a number, is the nearer end: NaN is 1 Hz).
pub fn reduced_interval(hz: f32) -> f64 {
    let hz = if hz.is_nan() {
        1.0
    } else {
        hz.clamp(1.0, 60.0)
    };
    1.0 / f64::from(hz)
}

/// `interval` seconds in whole ticks of `tick` seconds: rounded down, at least 1, at most
/// `u16::MAX` (1 without a tick length). A thousandth of a tick's slack: a tick's `Duration`
/// is rounded to the nanosecond, and 1 s over a 16 666 667-ns tick is 59.999 998 ticks, not
/// the 60 a 1-Hz proxy's states are apart.
pub fn whole_ticks(interval: f64, tick: f64) -> u16 {
    let ticks = if tick > 0.0 && interval.is_finite() {
        (interval / tick + 1e-3).floor()
    } else {
        1.0
    };
    ticks.clamp(1.0, f64::from(u16::MAX)) as u16
}

/// The longest update interval [`ease_time`] lengthens an ease for, seconds (the slowest rate
/// the demo's panel offers, 1 Hz): a proxy not sent for longer is not eased over longer.
pub const MAX_EASE_INTERVAL: f64 = 1.0;

/// How long the ease back onto a proxy's curve after a starved spell lasts, seconds, for a
/// proxy sent every `interval` seconds with `base` seconds as the ease of fast ones (the
/// smoothing plugin's `extrapolation_smooth_time`, the rewind's `max_ease_time`): `base`, or
/// the time to a state's repeat ([`REPEAT_SHARE`] of the interval, up to
/// [`MAX_EASE_INTERVAL`]) if longer. A slow proxy is starved until the repeat of a lost state
/// comes and runs off its track for that long (a 1-Hz proxy mid-jump by 0.8 m in 0.2 s); eased
/// out in 0.1 s, that is 0.3 m in a frame at 30 fps, a pop. Non-finite or negative inputs count
/// as zero.
pub fn ease_time(base: f32, interval: f64) -> f32 {
    let share = REPEAT_SHARE * finite_non_negative(interval).min(MAX_EASE_INTERVAL);
    finite_non_negative(f64::from(base)).max(share) as f32
}

/// How fast an ease may move a proxy off its curve, as a share of the proxy's speed: with its
/// own motion, the drawn proxy moves at most 2.5 times as fast as it runs.
pub const CATCH_UP_SHARE: f32 = 1.5;

/// The speed [`catch_up_time`] paces an ease by when the proxy is slower or stands, m/s.
pub const MIN_CATCH_UP_SPEED: f32 = 1.0;

/// The longest an ease is paced out to, seconds: an offset so long that it would take longer
/// at the catch-up speed is eased faster.
pub const MAX_CATCH_UP_TIME: f32 = 1.0;

/// How long an ease of an offset `distance` metres long lasts, seconds, for a proxy running at
/// `speed` m/s (the fastest of the states the offset lies between), `base` seconds being the
/// ease of a short offset ([`ease_time`]): long enough that the offset, which eases out as
/// `start × (1 − t/T)²` and so moves fastest at first (`2 × distance / T`), moves no faster
/// than [`CATCH_UP_SHARE`] of the speed (at least [`MIN_CATCH_UP_SPEED`]); at most
/// [`MAX_CATCH_UP_TIME`], never less than `base`.
///
/// A fixed time made the drawn speed grow with the offset: a proxy held 2.3 m behind its curve
/// by a burst of losses swept there at 47 m/s (0.2 m a frame at 240 fps) when the states came
/// again. The server allows claims on an ease for as long (`RewindQuery::ease_explained`).
/// Non-finite or negative inputs count as zero.
pub fn catch_up_time(base: f32, distance: f32, speed: f32) -> f32 {
    let base = finite_non_negative(f64::from(base)) as f32;
    let distance = finite_non_negative(f64::from(distance)) as f32;
    let speed = (finite_non_negative(f64::from(speed)) as f32).max(MIN_CATCH_UP_SPEED);
    base.max((2.0 * distance / (CATCH_UP_SHARE * speed)).min(MAX_CATCH_UP_TIME))
}

/// The speed [`catch_up_time`] paces an ease between `states` by: the fastest of their
/// velocities, m/s.
pub fn catch_up_speed<'a>(states: impl IntoIterator<Item = &'a ProxyState>) -> f32 {
    states
        .into_iter()
        .map(|s| s.velocity.length())
        .filter(|v| v.is_finite())
        .fold(0.0, f32::max)
}

/// The first tick after `tick` on the send grid of a rate whose interval is `interval` ticks
/// (not necessarily whole; below one tick counts as one): the ticks ⌈k × interval⌉ for whole
/// k, the same for every proxy at that rate.
///
/// One grid per rate, rather than one per proxy from the tick it was first sent: a client is
/// sent every proxy at the nominal rate in one packet per send interval, not in one packet per
/// tick holding the proxies whose own grid fell on it (three packets per interval at 20 Hz over
/// 60-Hz ticks, each with its headers). On ticks, not seconds: a tick's length is rounded to
/// the nanosecond, and a grid of seconds would drift off the ticks it falls on. (A server with
/// more proxies than a tick's share shifts the later ones' grids: [`next_on_phase`].)
pub fn next_on_grid(tick: u32, interval: f64) -> u32 {
    let interval = if interval.is_finite() {
        interval.max(1.0)
    } else {
        1.0
    };
    let k = (f64::from(tick) / interval + 1e-6).floor() + 1.0;
    (k * interval - 1e-6).ceil().min(f64::from(u32::MAX)) as u32
}

/// The first tick after `tick` on the send grid of a rate whose interval is `interval` ticks,
/// shifted `phase` ticks later: the ticks ⌈k × interval⌉ + `phase` for whole k ≥ 0
/// ([`next_on_grid`]'s grid at phase 0). A server with many proxies spreads them over the
/// phases of their interval ([`spread_phase`]), so that not every state of a 20-Hz grid
/// leaves in one tick of three.
pub fn next_on_phase(tick: u32, interval: f64, phase: u32) -> u32 {
    match tick.checked_sub(phase) {
        Some(shifted) => next_on_grid(shifted, interval).saturating_add(phase),
        // (The grid's first tick, k = 0, is still ahead.)
        None => phase,
    }
}

/// The most phases [`spread_phase`] spreads proxies over, whatever their interval: three, a
/// 20-Hz grid's over 60-Hz ticks. Each phase is a state message a client per interval, and a
/// server remembers which proxies each of a client's latest 64 state messages carried (the
/// baselines its deltas rest on, and which states it surely had when it drew a shot's view):
/// at 20 Hz three phases make 60 messages a second, 64 a second's worth, as long as a delta's
/// baseline may be old; a 1-Hz proxy spread over a second's 60 ticks would leave a client's
/// 64 messages a second back, its states a second apart.
pub const MAX_SPREAD_PHASES: u32 = 3;

/// The phase (ticks after its rate's grid, [`next_on_phase`]) a new proxy's states go on, of
/// an interval of `interval` ticks, given how many proxies are on each phase now (`loads`,
/// by phase; missing phases carry none): the fullest phase that carries fewer than
/// `spread_above` (phase 0 first, so that a small match keeps every state in one tick of its
/// interval and one packet), and once every phase of the interval carries that many, the
/// least loaded. An interval of `n` ticks has `n` phases (rounded down), at most
/// [`MAX_SPREAD_PHASES`]; one shorter than two ticks has one.
///
/// Filling phases one after another, rather than dealing proxies round: a client is sent the
/// states due in a tick in one message, each tick's with its own headers and datagrams, so a
/// tick with a few states costs nearly as much as a tick with a datagram's worth, and the
/// spread pays only once a tick's states fill datagrams of their own.
pub fn spread_phase(loads: &[u32], interval: f64, spread_above: usize) -> u32 {
    // (A tick's length is rounded to the nanosecond: 20 Hz over 60-Hz ticks is 2.99999994
    // ticks, and has three phases.)
    let interval = interval + 1e-6;
    let phases = if interval.is_finite() && interval >= 2.0 {
        (interval.floor() as u32).min(MAX_SPREAD_PHASES)
    } else {
        1
    };
    let load = |p: u32| u64::from(loads.get(p as usize).copied().unwrap_or(0));
    let cap = spread_above as u64;
    (0..phases)
        .filter(|&p| load(p) < cap)
        .max_by_key(|&p| (load(p), core::cmp::Reverse(p)))
        .or_else(|| (0..phases).min_by_key(|&p| (load(p), p)))
        .unwrap_or(0)
}

/// Share of [`DelayPolicy::bridge_loss_threshold`] the measured loss must fall below before a
/// [`BridgeLatch`] lets the bridge go (0.5: at the default threshold, 0.25 % loss).
pub const BRIDGE_RELEASE: f64 = 0.5;

/// Whether the delay keeps an interval to bridge a lost state, with hysteresis: on once the
/// measured loss rises above [`DelayPolicy::bridge_loss_threshold`], off only once it falls
/// below [`BRIDGE_RELEASE`] of it.
///
/// A loss estimate is an average of a few hundred packets, and on a link that loses 1 % it
/// wanders on either side of the 0.5 % threshold for the first tens of seconds. Without the
/// latch the delay followed it, an interval down and up again (at 20 Hz, 100 → 50 → 100 ms
/// within a second and a half), and the state lost while it was down starved every proxy of
/// the frame drawn past it: a 10-fps client on a 1 % link (the grid's `fps=10` cell, seed 1)
/// starved 1.04 % of its frames, all of them while its loss read 0.43–0.49 %.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BridgeLatch {
    on: bool,
}

impl BridgeLatch {
    /// Whether it bridges.
    pub fn on(&self) -> bool {
        self.on
    }

    /// Takes this frame's measured loss (0–1; a non-finite one counts as none) and returns the
    /// loss the delay rules are to take ([`DelayPolicy::target_covering`]): `loss` itself, or
    /// while the latch is on and `loss` is below the threshold, the least loss above it.
    pub fn loss(&mut self, policy: &DelayPolicy, loss: f64) -> f64 {
        let loss = finite_non_negative(loss);
        let threshold = finite_non_negative(policy.bridge_loss_threshold);
        if loss > threshold {
            self.on = true;
        } else if loss < threshold * BRIDGE_RELEASE {
            self.on = false;
        }
        if self.on {
            loss.max(threshold.next_up())
        } else {
            loss
        }
    }
}

/// Most states in a row [`DelayPolicy::lost_in_a_row`] expects to be lost (half a second of
/// 20-Hz states): longer outages are measured, not modelled ([`DelayPolicy::target_covering`]).
pub const MAX_BRIDGED_STATES: u32 = 10;

/// How the target interpolation delay is chosen and how fast the delay in effect may follow it.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DelayPolicy {
    /// Jitter margin, in multiples of the measured jitter (default 2), used until lateness has
    /// been measured (see [`DelayPolicy::target_with_margin`]).
    pub jitter_multiplier: f64,
    /// Packet loss (0–1) above which one extra update interval is kept to bridge a lost update
    /// (default 0.005).
    pub bridge_loss_threshold: f64,
    /// Smallest delay, seconds (default 0).
    pub min_delay: f64,
    /// Largest delay, seconds (default 2.5: a 1 Hz proxy bridging one lost update).
    pub max_delay: f64,
    /// How fast the delay in effect may grow towards its target, in seconds per second: view
    /// time then runs this much slower than real time (default 0.1).
    pub max_increase_rate: f64,
    /// How fast the delay in effect may shrink towards its target, in seconds per second: view
    /// time then runs this much faster than real time (default 0.05).
    pub max_decrease_rate: f64,
    /// Share (0–1) of frames the delay may leave without a newer state to move towards, judged
    /// on the recent frames' [`StateStaleness`] (default 0.0025: a quarter of the 1 % a
    /// player starts to see, since what the delay achieves lags what it aims at: it learns a
    /// link's outages by meeting them, and grows at
    /// [`max_increase_rate`](Self::max_increase_rate); aiming at 0.5 %, 10-s matches at 10 %
    /// loss in bursts of 8 and 10 packets starved 0.73–1.66 % of their frames). Where loss
    /// comes in bursts, or states arrive in pairs from a slow listen host, the delay grows
    /// past one bridged interval until no more frames than this would have starved.
    #[serde(default = "default_starved_share")]
    pub starved_share: f64,
}

fn default_starved_share() -> f64 {
    0.0025
}

impl Default for DelayPolicy {
    fn default() -> Self {
        Self {
            jitter_multiplier: 2.0,
            bridge_loss_threshold: 0.005,
            min_delay: 0.0,
            max_delay: 2.5,
            max_increase_rate: 0.1,
            max_decrease_rate: 0.05,
            starved_share: default_starved_share(),
        }
    }
}

impl Validate for DelayPolicy {
    fn validate(&self) -> Result<(), SettingsError> {
        let f = Fields::new("DelayPolicy");
        f.within("jitter_multiplier", self.jitter_multiplier, 0.0, 20.0, "")?;
        f.within(
            "bridge_loss_threshold",
            self.bridge_loss_threshold,
            0.0,
            1.0,
            "",
        )?;
        f.within("min_delay", self.min_delay, 0.0, 10.0, "s")?;
        f.within("max_delay", self.max_delay, self.min_delay, 10.0, "s")?;
        f.within("max_increase_rate", self.max_increase_rate, 0.0, 1.0, "s/s")?;
        f.within("max_decrease_rate", self.max_decrease_rate, 0.0, 1.0, "s/s")?;
        f.within("starved_share", self.starved_share, 0.0, 1.0, "")
    }
}

/// `x` if it is finite and positive, else 0: how the delay rules (and the server's cap on a
/// delay, `unlag_net::plausible_delay`) read a duration or share measured over the network,
/// where a forged or not yet measured figure must count as nothing.
pub fn finite_non_negative(x: f64) -> f64 {
    if x.is_finite() && x > 0.0 { x } else { 0.0 }
}

impl DelayPolicy {
    /// The smallest delay as the rules use it, seconds: [`min_delay`](Self::min_delay), or 0
    /// when it is not a finite non-negative number ([`Validate`] refuses such policies; a
    /// policy changed by hand afterwards must still not panic a clamp).
    fn lowest(&self) -> f64 {
        finite_non_negative(self.min_delay)
    }

    /// The largest delay as the rules use it, seconds: [`max_delay`](Self::max_delay), at
    /// least [`lowest`](Self::lowest); NaN counts as the default 2.5.
    fn highest(&self) -> f64 {
        let max = if self.max_delay.is_nan() {
            2.5
        } else {
            self.max_delay
        };
        max.max(self.lowest())
    }

    /// The target interpolation delay, seconds, for states sent every `send_interval` seconds
    /// over a link with `jitter` seconds of jitter and `loss` (0–1) packet loss. Non-finite or
    /// negative inputs count as zero.
    pub fn target(&self, send_interval: f64, jitter: f64, loss: f64) -> f64 {
        let clean = finite_non_negative;
        let (send_interval, jitter, loss) = (clean(send_interval), clean(jitter), clean(loss));
        (send_interval + self.bridge(send_interval.into(), loss) + self.jitter_multiplier * jitter)
            .clamp(self.lowest(), self.highest())
    }

    /// What bridges a lost state, seconds: nothing on a clean link; else the state's repeat
    /// ([`repeat_after`]) or, for proxies sent too often to be repeated (or not repeated:
    /// [`Sent::repeated`]), the next state.
    fn bridge(&self, sent: Sent, loss: f64) -> f64 {
        if loss > self.bridge_loss_threshold {
            sent.repeat_after().unwrap_or(sent.interval)
        } else {
            0.0
        }
    }

    /// How many states in a row a link losing `loss` (0–1) of its packets loses often enough
    /// to starve more than [`DelayPolicy::starved_share`] of the frames, when a lost state is
    /// followed by another with probability `continuation` (0–1; [`StateLoss::continuation`],
    /// `None` before it is known, and never taken below `loss`: independent loss): the least
    /// `k` from 1 to [`MAX_BRIDGED_STATES`] with `loss × continuation^k` within the share. With
    /// `k` states bridged a proxy starves through every run longer than `k`, and the runs'
    /// lengths are geometric: the share of the time starved is the loss times the chance that a
    /// run goes on past `k` (`loss^(k + 1)` when losses are independent).
    ///
    /// Independent loss, at the default share: one is enough up to about 5 % loss (the bridge
    /// every lossy link keeps), two up to about 13 %; at 10 % two in a row go 1 % of the time,
    /// and in a short match they starved 1.1–1.3 % of the frames before the covering of the
    /// recent frames ([`StateStaleness`]) had met them: it learns an outage only by starving
    /// through it. Loss in bursts: at 10 % in runs of two and a half states, eight. This is
    /// what to expect before the covering has met as long a run; it keeps what it measures
    /// beyond.
    pub fn lost_in_a_row(&self, loss: f64, continuation: Option<f64>) -> u32 {
        let loss = finite_non_negative(loss).min(1.0);
        let continuation = continuation
            .map(finite_non_negative)
            .map_or(loss, |c| c.min(1.0).max(loss));
        let share = finite_non_negative(self.starved_share);
        (1..MAX_BRIDGED_STATES)
            .find(|&k| loss * continuation.powi(k as i32) <= share)
            .unwrap_or(MAX_BRIDGED_STATES)
    }

    /// How much staler than its interval a proxy sent every `send_interval` seconds, arriving
    /// up to `margin` seconds late, finds its newest state when a link losing `loss` (0–1)
    /// takes [`DelayPolicy::lost_in_a_row`] states together (`continuation` as there),
    /// seconds: a covering for [`DelayPolicy::target_covering`] before one has been measured.
    /// `None` where the bridge ([`DelayPolicy::target_with_margin`]) already covers it: one
    /// lost state, or a proxy whose states are repeated ([`Sent::repeat_after`]). A bare
    /// interval is repeated as its rate calls for ([`Sent`]).
    pub fn covering_lost_in_a_row(
        &self,
        send_interval: impl Into<Sent>,
        margin: f64,
        loss: f64,
        continuation: Option<f64>,
    ) -> Option<f64> {
        let sent = send_interval.into();
        let in_a_row = self.lost_in_a_row(loss, continuation);
        (in_a_row > 1 && sent.repeat_after().is_none()).then(|| {
            f64::from(in_a_row) * finite_non_negative(sent.interval) + finite_non_negative(margin)
        })
    }
}

impl DelayPolicy {
    /// The target interpolation delay, seconds, for states sent every `send_interval` seconds
    /// that arrive up to `margin` seconds later than expected (e.g. the 99th percentile of
    /// measured lateness), over a link losing `loss` (0–1) of its packets. A bare interval is
    /// repeated as its rate calls for ([`Sent`]).
    pub fn target_with_margin(
        &self,
        send_interval: impl Into<Sent>,
        margin: f64,
        loss: f64,
    ) -> f64 {
        let clean = finite_non_negative;
        let sent = send_interval.into();
        let sent = Sent {
            interval: clean(sent.interval),
            ..sent
        };
        (sent.interval + self.bridge(sent, clean(loss)) + clean(margin))
            .clamp(self.lowest(), self.highest())
    }

    /// [`DelayPolicy::target_with_margin`] for a proxy sent every `send_interval` seconds,
    /// made long enough to cover the link's measured outages: `covering` is how much staler
    /// than their own interval the client's proxies' newest states were in all but
    /// [`DelayPolicy::starved_share`] of the recent frames ([`StateStaleness::covering`]). A
    /// delay of the interval plus that would have starved no more frames than the share: where
    /// a loss burst outlasts the bridged interval, or states arrive in pairs, the delay grows to
    /// it, whatever the proxy's rate.
    pub fn target_covering(
        &self,
        send_interval: impl Into<Sent>,
        margin: f64,
        loss: f64,
        covering: Option<f64>,
    ) -> f64 {
        let sent = send_interval.into();
        let own = self.target_with_margin(sent, margin, loss);
        let send_interval = sent.interval;
        let needed = covering
            .filter(|c| c.is_finite() && send_interval.is_finite())
            .map_or(0.0, |c| send_interval.max(0.0) + c);
        own.max(needed).clamp(self.lowest(), self.highest())
    }
}

/// How long [`StateStaleness`] remembers, seconds: each sample's weight falls by e over this
/// time. Long enough to have seen several of the loss bursts a bad link has (at 10 % loss in
/// bursts of 10 packets, one every couple of seconds), so that a quiet spell does not shrink
/// the delay before the next one comes.
pub const STALENESS_MEMORY: f64 = 20.0;

/// Width of one bin of [`StateStaleness`], seconds: its answers are rounded up to it.
pub const STALENESS_BIN: f64 = 0.002;

/// Least and most excess staleness [`StateStaleness`] tells apart, seconds (less counts as the
/// least, more as the most).
const STALENESS_RANGE: (f64, f64) = (-0.2, 3.0);

/// How often the weights decay, seconds of the caller's clock.
const DECAY_STEP: f64 = 0.25;

/// Less weight in hand than this (about a second of one proxy at 16 fps) and
/// [`StateStaleness::covering`] has no answer.
const MIN_STALENESS_WEIGHT: f32 = 16.0;

/// The factor by which weights kept over [`STALENESS_MEMORY`] fall at `now` (any steady
/// clock, seconds) since `decayed_at`, once at least [`DECAY_STEP`] has passed (so the cost
/// does not grow with the number of samples), and `decayed_at` moves to `now`; `None` until
/// then (the first call only starts the clock).
fn decay_due(decayed_at: &mut Option<f64>, now: f64) -> Option<f64> {
    let Some(at) = *decayed_at else {
        *decayed_at = Some(now);
        return None;
    };
    let passed = now - at;
    if passed < DECAY_STEP {
        return None;
    }
    *decayed_at = Some(now);
    Some((-passed / STALENESS_MEMORY).exp())
}

/// Counts per bin whose weights decay over [`STALENESS_MEMORY`] (in steps of
/// [`DECAY_STEP`], so the cost does not grow with the number of samples): what
/// [`StateStaleness`] and [`FrameOutages`] keep.
#[derive(Clone, Debug)]
struct DecayingBins {
    /// Decaying weight per bin.
    bins: Vec<f32>,
    /// Sum of `bins`.
    total: f32,
    /// Caller's time of the last decay.
    decayed_at: Option<f64>,
}

impl DecayingBins {
    fn new(bins: usize) -> Self {
        Self {
            bins: vec![0.0; bins],
            total: 0.0,
            decayed_at: None,
        }
    }

    /// Lets the weights fall by the time passed to `now` (any steady clock, seconds), then
    /// counts one in bin `i` (the last bin beyond it).
    fn add(&mut self, now: f64, i: usize) {
        if let Some(factor) = decay_due(&mut self.decayed_at, now) {
            let factor = factor as f32;
            self.bins.iter_mut().for_each(|w| *w *= factor);
            self.total = self.bins.iter().sum();
        }
        let last = self.bins.len() - 1;
        self.bins[i.min(last)] += 1.0;
        self.total += 1.0;
    }
}

/// How stale each proxy's newest state is, frame by frame, beyond its own update interval: the
/// present the client can know (its estimate of the server's time less the one-way trip) less
/// the newest state's time, less the interval at which that proxy's states are sent, seconds.
/// A proxy drawn with an interpolation delay shorter than its interval plus that has no newer
/// state to move towards: it is held or extrapolated. [`StateStaleness::covering`] is the least
/// such excess that would have starved no more than a given share of the recent proxy frames.
///
/// Loss bursts, late states, a listen host's states arriving in pairs and the client's own
/// frame pacing are all in that one figure, measured rather than modelled; it does not depend
/// on the delay chosen, so choosing by it does not feed back. Proxies are sent on their own
/// phases (each from its spawn), so a lost packet starves some and not others: every proxy
/// counts, frame by frame. Kept as a histogram of [`STALENESS_BIN`] bins whose weights decay
/// over [`STALENESS_MEMORY`]: fixed memory and constant cost per sample, whatever the number of
/// proxies and the frame rate.
#[derive(Clone, Debug)]
pub struct StateStaleness {
    /// Decaying weight per bin of excess staleness.
    bins: DecayingBins,
    /// The last answer: (share asked, caller's time, excess).
    cached: Option<(f64, f64, f64)>,
}

impl Default for StateStaleness {
    fn default() -> Self {
        let bins = ((STALENESS_RANGE.1 - STALENESS_RANGE.0) / STALENESS_BIN).ceil() as usize;
        Self {
            bins: DecayingBins::new(bins),
            cached: None,
        }
    }
}

impl StateStaleness {
    /// Records one proxy frame at `now` (any steady clock, seconds) whose newest state was
    /// `excess` seconds staler than that proxy's update interval. Non-finite values are
    /// ignored; values outside −0.2–3 s count as the nearest end.
    pub fn observe(&mut self, now: f64, excess: f64) {
        if !(now.is_finite() && excess.is_finite()) {
            return;
        }
        // (A negative index saturates to the first bin; one beyond, the add keeps to the last.)
        let i = ((excess - STALENESS_RANGE.0) / STALENESS_BIN).floor() as usize;
        self.bins.add(now, i);
    }

    /// The weight in hand: about the number of proxy frames of the last
    /// [`STALENESS_MEMORY`].
    pub fn weight(&self) -> f32 {
        self.bins.total
    }

    /// The least excess staleness, seconds, that would have left no more than `share` (0–1)
    /// of the recent proxy frames without a newer state, as of `now` (the clock of
    /// [`StateStaleness::observe`]): the `1 − share` quantile, rounded up to a bin. Taken again
    /// at most every quarter second. `None` with too little in hand or a `share` outside 0–1.
    pub fn covering(&mut self, now: f64, share: f64) -> Option<f64> {
        if self.bins.total < MIN_STALENESS_WEIGHT || !(0.0..1.0).contains(&share) {
            return None;
        }
        if let Some((asked, at, value)) = self.cached
            && asked == share
            && (0.0..DECAY_STEP).contains(&(now - at))
        {
            return Some(value);
        }
        // From the stalest down, until more than the share allowed lies above.
        let allowed = self.bins.total * share as f32;
        let mut above = 0.0;
        let mut edge = 0;
        for (i, w) in self.bins.bins.iter().enumerate().rev() {
            if above + w > allowed {
                edge = i + 1;
                break;
            }
            above += w;
        }
        let value = STALENESS_RANGE.0 + edge as f64 * STALENESS_BIN;
        self.cached = Some((share, now, value));
        Some(value)
    }
}

/// Width of one bin of [`FrameOutages`], seconds: its answers are rounded up to it.
const FRAME_BIN: f64 = 0.002;

/// Longest frame [`FrameOutages`] tells apart, seconds (a longer one counts as this long: a
/// server that stops for longer is down, not slow).
const MAX_OUTAGE_FRAME: f64 = 1.0;

/// Fewer frames than this (decayed) in hand and [`FrameOutages::covering`] has no answer.
const MIN_OUTAGE_FRAMES: f32 = 16.0;

/// How long a server's own frames leave its clients without a newer state: a server sends
/// states at the end of its frames, so through a frame of `f` seconds the newest state a
/// client can have ages by up to `f`. A slow listen host's frames (100 ms at 10 fps), and
/// above all its hitches (a 250-ms shader compile), starve every client's proxies at once,
/// whatever their links: [`FrameOutages::covering`] is the frame length that no more than a
/// given share of the time goes beyond, which the server announces so that clients cover it
/// before they have starved through it, and which its compensation cap allows for.
///
/// Measured by the server on its own frames: evidence a client cannot forge. A histogram of
/// `FRAME_BIN` bins whose weights decay over [`STALENESS_MEMORY`], like [`StateStaleness`]:
/// fixed memory and constant cost per frame, whatever the frame rate.
#[derive(Clone, Debug)]
pub struct FrameOutages {
    /// Decaying count of frames per bin (bin `i`: up to `(i + 1) × FRAME_BIN` seconds).
    bins: DecayingBins,
}

impl Default for FrameOutages {
    fn default() -> Self {
        Self {
            bins: DecayingBins::new((MAX_OUTAGE_FRAME / FRAME_BIN).ceil() as usize),
        }
    }
}

impl FrameOutages {
    /// Records a frame of `frame` seconds that ended at `now` (any steady clock, seconds).
    /// Non-finite and non-positive lengths are ignored; longer than a second counts as one.
    pub fn observe(&mut self, now: f64, frame: f64) {
        if !(now.is_finite() && frame.is_finite() && frame > 0.0) {
            return;
        }
        // (Less a hair, so that a frame on a bin's edge, 0.1 s, is not pushed over it by the
        // division's rounding.)
        let i = ((frame / FRAME_BIN - 1e-9).ceil() as usize).saturating_sub(1);
        self.bins.add(now, i);
    }

    /// The least frame length `x`, seconds, such that the recent frames ran beyond `x` for no
    /// more than `share` (0–1) of their time: `Σ max(0, f − x) ≤ share × Σ f` over the frames
    /// `f` (each rounded up to its bin). A client whose delay covers a frame of `x` starves
    /// through the server's frames no more than that share of the time. `None` with fewer
    /// than 16 frames in hand or a `share` outside 0–1.
    pub fn covering(&self, share: f64) -> Option<f64> {
        if self.bins.total < MIN_OUTAGE_FRAMES || !(0.0..1.0).contains(&share) {
            return None;
        }
        let length = |i: usize| (i + 1) as f64 * FRAME_BIN;
        let total: f64 = self
            .bins
            .bins
            .iter()
            .enumerate()
            .map(|(i, &n)| f64::from(n) * length(i))
            .sum();
        let budget = share * total;
        // From the longest frames down: with the `count` frames longer than `x` (their lengths
        // summing to `sum`), the time beyond `x` is `sum − count × x`, which falls to the
        // budget at `x = (sum − budget) / count`: the answer, if no shorter frame is longer.
        let (mut count, mut sum) = (0.0, 0.0);
        for (i, &n) in self.bins.bins.iter().enumerate().rev() {
            if n <= 0.0 {
                continue;
            }
            if count > 0.0 && (sum - budget) / count >= length(i) {
                break;
            }
            count += f64::from(n);
            sum += f64::from(n) * length(i);
        }
        Some(((sum - budget) / count).max(0.0))
    }
}

/// Fewer states in hand than this (decayed, about the last [`STALENESS_MEMORY`]) and
/// [`StateLoss::share`] has no answer.
const MIN_STATE_LOSS_WEIGHT: f64 = 32.0;

/// Fewer runs of lost states than this (with their decayed weight) and
/// [`StateLoss::continuation`] has no answer: one burst says little about the next.
pub const MIN_RUNS: f64 = 2.0;

/// Most states one gap between two received states counts as lost: a longer pause (a proxy
/// the server stopped sending, a link that was down) says nothing more about the loss to come.
pub const MAX_COUNTED_GAP: u32 = 32;

/// The share of proxy states lost on the way to this client, over about the last
/// [`STALENESS_MEMORY`] seconds: every proxy's states come on its own grid (one every
/// interval), so a gap of several intervals between two received states is states lost.
///
/// The server's beats (10 a second) measure loss too, but at 1 % they see a loss every ten
/// seconds or so, which leaves the delay without its bridge for most of a short match while
/// the states it is there for are being lost. Each proxy's states are another, denser sample
/// of the same link, and the very packets whose loss starves a frame. Like [`StateStaleness`],
/// it remembers long enough that a quiet spell between two losses does not drop the bridge.
///
/// It also counts the runs the lost states came in (one per gap that held any), for how
/// likely a lost state is to be followed by another ([`StateLoss::continuation`]): loss that
/// comes in bursts takes many states in a row far more often than its share alone says.
#[derive(Clone, Debug, Default)]
pub struct StateLoss {
    lost: f64,
    runs: f64,
    total: f64,
    decayed_at: Option<f64>,
}

impl StateLoss {
    /// Records a state received at `now` (any steady clock, seconds) `gap` seconds after the
    /// one before it of the same proxy, whose states come every `interval` seconds: the
    /// intervals the gap holds beyond one are states lost (at most [`MAX_COUNTED_GAP`]).
    /// Non-finite or non-positive figures count the state as received with none lost.
    pub fn observe(&mut self, now: f64, gap: f64, interval: f64) {
        if !now.is_finite() {
            return;
        }
        self.decay(now);
        let lost = if gap.is_finite() && interval.is_finite() && gap > 0.0 && interval > 0.0 {
            ((gap / interval).round() - 1.0).clamp(0.0, f64::from(MAX_COUNTED_GAP))
        } else {
            0.0
        };
        self.lost += lost;
        self.runs += if lost > 0.0 { 1.0 } else { 0.0 };
        self.total += lost + 1.0;
    }

    fn decay(&mut self, now: f64) {
        if let Some(factor) = decay_due(&mut self.decayed_at, now) {
            self.lost *= factor;
            self.runs *= factor;
            self.total *= factor;
        }
    }

    /// How likely (0–1) a lost state is to be followed by another lost one: the lost states
    /// less the runs they came in, over the lost states. About the loss share itself on a link
    /// that loses independently; near `1 − 1/n` where losses come in runs of `n`. `None` until
    /// [`MIN_RUNS`] runs were seen.
    pub fn continuation(&self) -> Option<f64> {
        (self.runs >= MIN_RUNS && self.lost > 0.0).then(|| run_continuation(self.lost, self.runs))
    }

    /// Share (0–1) of the recent states lost; 0 until enough states came to tell.
    pub fn share(&self) -> f64 {
        if self.total < MIN_STATE_LOSS_WEIGHT {
            0.0
        } else {
            self.lost / self.total
        }
    }
}

/// How far behind the newest datagram another may arrive and still count as received rather
/// than lost, in sequence numbers: jitter reorders a link (±62 ms at 100 datagrams a second is
/// 12 places; one arriving later still is counted lost), and a datagram is judged only once
/// this many newer ones have come (0.6 s at 55 datagrams a second).
pub const REORDER_WINDOW: u64 = 32;

/// Fewer runs of lost datagrams than this and [`DatagramLoss::continuation`] has no answer.
/// One is enough, where one run of states is not ([`MIN_RUNS`]): a link losing independently
/// shows runs of one several times a second and so corrects a chance long run within a
/// second, and a burst of datagrams is told from one run.
pub const MIN_DATAGRAM_RUNS: f64 = 1.0;

/// A sequence this far ahead of the newest, or behind it, starts the count afresh (a new
/// connection numbers its datagrams from 0 again) instead of counting the gap as lost.
pub const MAX_SEQUENCE_JUMP: u64 = 1024;

/// Fewer datagrams judged than this (decayed, about the last [`STALENESS_MEMORY`]) and
/// [`DatagramLoss::share`] has no answer.
const MIN_DATAGRAM_WEIGHT: f64 = 64.0;

/// Less time observed than this, seconds, and [`DatagramLoss::rate`] has no answer.
const MIN_DATAGRAM_SPAN: f64 = 1.0;

/// Loss on one link, told from the sequence numbers its datagrams carry (netcode numbers every
/// packet of a connection, one by one): the share lost and how the losses run, over about the
/// last [`STALENESS_MEMORY`] seconds.
///
/// The same link's proxy states ([`StateLoss`]) say the same, but a client is sent one state
/// packet per interval and several times as many datagrams in all (acknowledgements, pings,
/// shot results): at 10 % loss in bursts of 8 packets a 20-Hz state stream shows a run of lost
/// states every 4 s or so, and the delay does not know the link loses in bursts until it has
/// starved through two. The datagrams show a run every second or less, from the moment the
/// client connects. How a run of datagrams converts to one of states is
/// [`DatagramLoss::continuation_over`].
#[derive(Clone, Debug, Default)]
pub struct DatagramLoss {
    /// The newest sequence seen.
    newest: Option<u64>,
    /// Bit `i`: whether sequence `newest − i` arrived, for `i` below [`REORDER_WINDOW`].
    arrived: u32,
    /// Bit `i`: whether sequence `newest − i` is one of this count's (not before its first).
    counted: u32,
    /// Whether the last sequence judged was lost.
    last_lost: bool,
    lost: f64,
    runs: f64,
    /// Runs met since the count started, not decayed (see
    /// [`DatagramLoss::continuation_once_met`]).
    runs_met: u32,
    judged: f64,
    /// Sequence numbers the newest moved on by (decayed): datagrams sent, whether or not they
    /// arrived.
    advanced: f64,
    /// When the count started, seconds of the caller's clock.
    since: Option<f64>,
    decayed_at: Option<f64>,
    /// Datagrams judged and judged lost since the first observed, not decayed (see
    /// [`DatagramLoss::totals`]).
    judged_total: u64,
    lost_total: u64,
}

impl DatagramLoss {
    /// Records a datagram numbered `sequence` that arrived at `now` (any steady clock,
    /// seconds). Duplicates and datagrams older than the window count nothing.
    pub fn observe(&mut self, now: f64, sequence: u64) {
        if !now.is_finite() {
            return;
        }
        if let Some(factor) = decay_due(&mut self.decayed_at, now) {
            self.lost *= factor;
            self.runs *= factor;
            self.judged *= factor;
            self.advanced *= factor;
        }
        let Some(newest) = self
            .newest
            .filter(|&n| sequence.abs_diff(n) <= MAX_SEQUENCE_JUMP)
        else {
            self.newest = Some(sequence);
            self.arrived = 1;
            self.counted = 1;
            self.last_lost = false;
            self.since.get_or_insert(now);
            return;
        };
        if sequence <= newest {
            let behind = newest - sequence;
            if behind < REORDER_WINDOW {
                self.arrived |= 1 << behind;
            }
            return;
        }
        let ahead = sequence - newest;
        self.advanced += ahead as f64;
        // What leaves the window is judged, oldest first: the window's oldest places, then
        // the sequences skipped beyond it (never seen: lost).
        let leaving = ahead.min(REORDER_WINDOW);
        for place in (REORDER_WINDOW - leaving..REORDER_WINDOW).rev() {
            if self.counted >> place & 1 == 1 {
                self.judge(self.arrived >> place & 1 == 0, 1.0);
            }
        }
        if ahead > REORDER_WINDOW {
            self.judge(true, (ahead - REORDER_WINDOW) as f64);
        }
        if ahead >= REORDER_WINDOW {
            self.arrived = 1;
            self.counted = u32::MAX;
        } else {
            self.arrived = self.arrived << ahead | 1;
            self.counted = self.counted << ahead | ((1 << ahead) - 1);
        }
        self.newest = Some(sequence);
    }

    /// Counts `n` datagrams in a row judged lost or arrived.
    fn judge(&mut self, lost: bool, n: f64) {
        self.judged += n;
        // `n` is a whole count (at most `MAX_SEQUENCE_JUMP`).
        self.judged_total = self.judged_total.saturating_add(n as u64);
        if lost {
            self.lost_total = self.lost_total.saturating_add(n as u64);
            self.lost += n;
            if !self.last_lost {
                self.runs += 1.0;
                self.runs_met = self.runs_met.saturating_add(1);
            }
        }
        self.last_lost = lost;
    }

    /// Datagrams judged (arrived or lost) and of them lost, since the first observed, never
    /// decayed nor reset (a new connection's count carries on from the old one's): a caller
    /// that wants loss over its own span reads the differences. A datagram is judged once it
    /// leaves the reordering window ([`REORDER_WINDOW`] newer ones came), or when a gap
    /// skips past it.
    pub fn totals(&self) -> (u64, u64) {
        (self.judged_total, self.lost_total)
    }

    /// Share (0–1) of the recent datagrams lost; `None` until enough were judged.
    pub fn share(&self) -> Option<f64> {
        (self.judged >= MIN_DATAGRAM_WEIGHT).then(|| self.lost / self.judged)
    }

    /// How likely (0–1) a lost datagram was to be followed by another lost one: the lost less
    /// the runs they came in, over the lost (as [`StateLoss::continuation`]). `None` until
    /// [`MIN_DATAGRAM_RUNS`] runs were seen.
    ///
    /// The runs are weighed as they decay: a single run's weight falls below one at the next
    /// decay step, so after the first the answer lasts only until then, and holds from the
    /// second on (a link's first run is often a short one; the delay, which costs every proxy
    /// on screen its latency, waits for more: over 30 s of the grid's cells of 10 % loss in
    /// bursts of 8 and 10, seeds 1–3, answering from the first run starved 0.42 % of the
    /// frames against 0.34 %).
    pub fn continuation(&self) -> Option<f64> {
        (self.runs >= MIN_DATAGRAM_RUNS && self.lost > 0.0)
            .then(|| run_continuation(self.lost, self.runs))
    }

    /// [`DatagramLoss::continuation`] from the first run met on, for as long as the count
    /// remembers losses: for choices that cost bandwidth rather than latency, which a link
    /// that has just shown a burst of losses should get at once (the smoothing server's trail
    /// of states, `SmoothingSettings::trail_runs`).
    pub fn continuation_once_met(&self) -> Option<f64> {
        (self.runs_met >= 1 && self.runs > 0.0 && self.lost > 0.0)
            .then(|| run_continuation(self.lost, self.runs))
    }

    /// Datagrams the peer sent per second recently, lost ones included; `None` until a second
    /// was observed. `now` is the caller's clock, seconds.
    pub fn rate(&self, now: f64) -> Option<f64> {
        let observed = now - self.since?;
        // The decayed weight of the time observed, as the counts decay.
        let span = STALENESS_MEMORY * (1.0 - (-observed / STALENESS_MEMORY).exp());
        (observed.is_finite() && observed >= MIN_DATAGRAM_SPAN).then(|| self.advanced / span)
    }

    /// How likely (0–1) a lost state sent every `interval` seconds on this link is to be
    /// followed by another lost one, from how its datagrams' losses run: the next state leaves
    /// `rate × interval` datagrams later (at least one), and a run goes on past each with
    /// [`DatagramLoss::continuation`]. Loss that comes in bursts longer than an interval takes
    /// states in runs; bursts of a few datagrams at 100 a second hardly take two states in a
    /// row. `None` until both are known.
    pub fn continuation_over(&self, now: f64, interval: f64) -> Option<f64> {
        Some(continuation_over(
            self.continuation()?,
            self.rate(now)?,
            interval,
        ))
    }
}

/// How likely (0–1) a loss was followed by another, from `lost` losses that came in `runs`
/// runs (weights, decayed alike): each run's losses but its last were followed by one.
fn run_continuation(lost: f64, runs: f64) -> f64 {
    ((lost - runs) / lost).clamp(0.0, 1.0)
}

/// How likely (0–1) a lost state sent every `interval` seconds is to be followed by another
/// lost one, on a link whose datagrams (`rate` a second) lose the next after a lost one with
/// probability `per_datagram`: [`DatagramLoss::continuation_over`]. Garbage reads as
/// independent-looking loss (the per-datagram figure itself, or 0).
pub fn continuation_over(per_datagram: f64, rate: f64, interval: f64) -> f64 {
    let per_datagram = finite_non_negative(per_datagram).min(1.0);
    let datagrams = (finite_non_negative(rate) * finite_non_negative(interval)).max(1.0);
    per_datagram.powf(datagrams)
}

/// The inverse of [`continuation_over`]: how likely (0–1) a lost datagram was followed by
/// another on a link (`rate` datagrams a second) whose states, sent every `interval` seconds,
/// are followed by another lost one with probability `per_state`. What a server reads of a
/// client's link from the client's report of its states' runs. Garbage reads as 0.
pub fn continuation_per_datagram(per_state: f64, rate: f64, interval: f64) -> f64 {
    let per_state = finite_non_negative(per_state).min(1.0);
    let datagrams = (finite_non_negative(rate) * finite_non_negative(interval)).max(1.0);
    if per_state == 0.0 || !datagrams.is_finite() {
        return 0.0;
    }
    per_state.powf(datagrams.recip())
}

/// How likely (0–1) whatever one datagram carries is lost in it and in each of the `repeats`
/// datagrams after it that carry it again, on a link that loses a share `loss` of its
/// datagrams and loses the next after a lost one with probability `runs` (its measured
/// continuation, per datagram; `None` until a run of losses was met: independent losses then).
/// A continuation below the loss itself reads as the loss (too few runs seen to tell them from
/// independent losses); garbage reads as no loss.
pub fn redundancy_miss(loss: f64, runs: Option<f64>, repeats: usize) -> f64 {
    let loss = finite_non_negative(loss).min(1.0);
    let runs = runs
        .filter(|r| r.is_finite())
        .unwrap_or(loss)
        .clamp(loss, 1.0);
    loss * runs.powi(i32::try_from(repeats).unwrap_or(i32::MAX))
}

/// The interpolation delay in effect, moved smoothly towards its target so that view time never
/// jumps: it only runs a little slower or faster than real time while the delay changes.
#[derive(Clone, Debug)]
pub struct DelayController {
    policy: DelayPolicy,
    current: f64,
    target: f64,
}

impl DelayController {
    /// A controller that starts at (and targets) `initial` seconds.
    pub fn new(policy: DelayPolicy, initial: f64) -> Self {
        let initial = initial.clamp(policy.lowest(), policy.highest());
        Self {
            policy,
            current: initial,
            target: initial,
        }
    }

    /// The policy in use.
    pub fn policy(&self) -> &DelayPolicy {
        &self.policy
    }

    /// The delay in effect, seconds.
    pub fn current(&self) -> f64 {
        self.current
    }

    /// The delay being moved towards, seconds.
    pub fn target(&self) -> f64 {
        self.target
    }

    /// Sets the target directly, seconds (clamped to the policy's bounds).
    pub fn set_target(&mut self, target: f64) {
        if target.is_finite() {
            self.target = target.clamp(self.policy.lowest(), self.policy.highest());
        }
    }

    /// Sets the target from the link's measured figures (see [`DelayPolicy::target`]).
    pub fn set_inputs(&mut self, send_interval: f64, jitter: f64, loss: f64) {
        self.target = self.policy.target(send_interval, jitter, loss);
    }

    /// Jumps straight to the target (e.g. on the first state received, when nothing is shown
    /// yet and nothing can jump).
    pub fn snap_to_target(&mut self) {
        self.current = self.target;
    }

    /// Raises the delay in effect at once to `delay` seconds, or to the target if that is
    /// lower; never lowers it. For a view that would pass everything there is to draw (a
    /// proxy held at its newest state anyway): growing the delay that far shows nothing
    /// moving back.
    pub fn raise_toward(&mut self, delay: f64) {
        if delay.is_finite() {
            self.current = self.current.max(delay.min(self.target));
        }
    }

    /// Advances by `dt` seconds of real time and returns the delay in effect.
    pub fn update(&mut self, dt: f64) -> f64 {
        if !(dt.is_finite() && dt > 0.0) {
            return self.current;
        }
        let gap = self.target - self.current;
        let step = if gap > 0.0 {
            gap.min(self.policy.max_increase_rate * dt)
        } else {
            gap.max(-self.policy.max_decrease_rate * dt)
        };
        self.current += step;
        self.current
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interval_is_told_in_whole_ticks_and_a_reduced_rate_held_to_1_to_60_hz() {
        // A tick as lightyear keeps 60 Hz: 16 666 667 ns.
        let tick = core::time::Duration::from_secs_f64(1.0 / 60.0).as_secs_f64();
        // 1 Hz is 60 ticks (not 59 for the tick's rounding), 20 Hz 3, 7 Hz's 8.57 ticks 8.
        assert_eq!(whole_ticks(1.0, tick), 60);
        assert_eq!(whole_ticks(0.05, tick), 3);
        assert_eq!(whole_ticks(1.0 / 7.0, tick), 8);
        assert_eq!(whole_ticks(reduced_interval(10.0), tick), 6);
        // Never 0 ticks, never past 16 bits, one tick without a tick length or an interval.
        assert_eq!(whole_ticks(0.001, tick), 1);
        assert_eq!(whole_ticks(1e9, tick), u16::MAX);
        assert_eq!(whole_ticks(1.0, 0.0), 1);
        assert_eq!(whole_ticks(f64::NAN, tick), 1);
        // A reduced rate out of range is held to 1–60 Hz.
        assert_eq!(reduced_interval(0.1), 1.0);
        assert_eq!(reduced_interval(f32::NAN), 1.0);
        assert_eq!(reduced_interval(1000.0), 1.0 / 60.0);
        assert_eq!(whole_ticks(reduced_interval(0.1), tick), 60);
    }

    #[test]
    fn an_unrepeated_slow_proxy_bridges_a_loss_with_its_next_state() {
        let p = DelayPolicy::default();
        // 10 Hz, 2 % loss: a proxy of that rate of its own has its states repeated a quarter
        // interval later; one sent at 10 Hz to a client whose interest reduced it has not.
        let repeated = p.target_with_margin(0.1, 0.0, 0.02);
        let unrepeated = p.target_with_margin(Sent::unrepeated(0.1), 0.0, 0.02);
        assert!((repeated - 0.125).abs() < 1e-12, "{repeated}");
        assert!((unrepeated - 0.2).abs() < 1e-12, "{unrepeated}");
        assert_eq!(Sent::from(0.1).repeat_after(), Some(0.025));
        assert_eq!(Sent::unrepeated(0.1).repeat_after(), None);
        // Two in a row at 10 % loss: covered for the unrepeated one only (the repeat's
        // proxies are left to the measured covering).
        assert_eq!(p.covering_lost_in_a_row(0.1, 0.01, 0.1, None), None);
        let two = p.covering_lost_in_a_row(Sent::unrepeated(0.1), 0.01, 0.1, None);
        assert!(two.is_some_and(|c| (c - 0.21).abs() < 1e-12), "{two:?}");
    }

    #[test]
    fn raising_toward_a_delay_stops_at_the_target_and_never_lowers() {
        let p = DelayPolicy::default();
        let mut d = DelayController::new(p, 0.1);
        d.set_target(0.6);
        d.raise_toward(0.4);
        assert!((d.current() - 0.4).abs() < 1e-12);
        d.raise_toward(0.3);
        assert!((d.current() - 0.4).abs() < 1e-12, "never lowered");
        d.raise_toward(0.9);
        assert!(
            (d.current() - 0.6).abs() < 1e-12,
            "no further than the target"
        );
        d.raise_toward(f64::NAN);
        assert!((d.current() - 0.6).abs() < 1e-12);
    }

    #[test]
    fn the_bridge_latches_on_above_the_threshold_and_lets_go_below_half_of_it() {
        let p = DelayPolicy::default();
        let interval = 0.05;
        let target = |loss: f64| p.target_covering(interval, 0.0, loss, None);
        let mut latch = BridgeLatch::default();
        // Below the threshold from the start: no bridge.
        assert_eq!(latch.loss(&p, 0.004), 0.004);
        assert!(!latch.on());
        assert!((target(latch.loss(&p, 0.004)) - interval).abs() < 1e-12);
        // Above it: the bridge, and kept while the estimate wanders down to half of it.
        assert_eq!(latch.loss(&p, 0.006), 0.006);
        for loss in [0.0049, 0.004, 0.003, 0.0026] {
            let taken = latch.loss(&p, loss);
            assert!(latch.on() && taken > p.bridge_loss_threshold, "{loss}");
            assert!((target(taken) - 2.0 * interval).abs() < 1e-12, "{loss}");
        }
        // Below half: let go; back above the threshold only.
        assert_eq!(latch.loss(&p, 0.0024), 0.0024);
        assert!(!latch.on());
        assert_eq!(latch.loss(&p, 0.004), 0.004);
        assert!(!latch.on());
        // Nothing measured (NaN) counts as no loss.
        latch.loss(&p, 0.01);
        assert_eq!(latch.loss(&p, f64::NAN), 0.0);
        assert!(!latch.on());
    }

    #[test]
    fn redundancy_misses_independent_losses_seldom_and_runs_often() {
        // 3 % independent, repeated 3 times: all four lost 8.1e-7 of the time.
        assert!((redundancy_miss(0.03, None, 3) - 0.03f64.powi(4)).abs() < 1e-12);
        assert!((redundancy_miss(0.03, Some(0.01), 3) - 0.03f64.powi(4)).abs() < 1e-12);
        // In runs of about four (continuation 0.75): one send in seventy.
        assert!((redundancy_miss(0.03, Some(0.75), 3) - 0.03 * 0.75f64.powi(3)).abs() < 1e-12);
        assert_eq!(redundancy_miss(0.0, Some(0.9), 3), 0.0);
        assert_eq!(redundancy_miss(0.2, Some(0.5), 0), 0.2);
        assert_eq!(redundancy_miss(f64::NAN, Some(0.5), 3), 0.0);
        assert_eq!(redundancy_miss(-1.0, None, 3), 0.0);
        assert!((redundancy_miss(0.1, Some(f64::NAN), 2) - 1e-3).abs() < 1e-12);
        assert_eq!(redundancy_miss(2.0, None, 3), 1.0);
    }

    #[test]
    fn the_send_grid_is_one_per_rate_whatever_tick_a_proxy_starts_on() {
        // Walk a proxy along its grid from `start`, `n` states.
        let walk = |start: u32, interval: f64, n: usize| {
            let mut at = vec![start];
            for _ in 0..n {
                at.push(next_on_grid(*at.last().unwrap(), interval));
            }
            at
        };
        // 20 Hz over 60-Hz ticks: every third tick, from whichever tick a proxy was first sent.
        for start in 0..7 {
            let ticks = walk(start, 3.0, 40);
            assert!(ticks[1..].iter().all(|t| t % 3 == 0), "{ticks:?}");
            assert!(ticks.windows(2).skip(1).all(|w| w[1] - w[0] == 3));
            assert!(ticks[1] > start && ticks[1] - start <= 3);
        }
        // 25 Hz over 60-Hz ticks (2.4 ticks): the same ticks for every start, 2 or 3 apart, and
        // 25 of them a second, with no drift however long the match.
        let a = walk(0, 2.4, 2_000);
        let b = walk(1, 2.4, 2_000);
        assert_eq!(a[1..], b[1..]);
        assert!(a.windows(2).all(|w| (2..=3).contains(&(w[1] - w[0]))));
        assert_eq!(a[25], 60);
        assert_eq!(a[2_000], 4_800);
        // Far into a long match (a day at 60 Hz), the grid stays on whole multiples.
        let late = 5_184_000;
        assert_eq!(next_on_grid(late, 3.0), late + 3);
        assert_eq!(next_on_grid(late + 1, 3.0), late + 3);
        // Faster than the ticks, or nonsense: every tick.
        assert_eq!(next_on_grid(10, 0.5), 11);
        assert_eq!(next_on_grid(10, f64::NAN), 11);
        assert_eq!(next_on_grid(u32::MAX - 1, 3.0), u32::MAX);
    }

    #[test]
    fn a_phase_shifts_the_grid_and_a_big_server_fills_its_phases_one_after_another() {
        // 20 Hz over 60-Hz ticks at phase 1: ticks 1, 4, 7, ... whatever the start.
        for start in 0..9 {
            let mut at = start;
            for _ in 0..20 {
                let next = next_on_phase(at, 3.0, 1);
                assert!(next > at && next - at <= 3, "{at} -> {next}");
                assert_eq!(next % 3, 1);
                at = next;
            }
        }
        assert_eq!(next_on_phase(0, 3.0, 2), 2);
        assert_eq!(next_on_phase(2, 3.0, 2), 5);
        assert_eq!(next_on_phase(10, 3.0, 0), next_on_grid(10, 3.0));
        assert_eq!(next_on_phase(u32::MAX - 1, 3.0, 2), u32::MAX);
        // 25 Hz (2.4 ticks) at phase 1: the phase-0 grid (0, 3, 5, 8, ...) a tick later.
        let mut at = 0;
        let mut ticks = Vec::new();
        for _ in 0..26 {
            at = next_on_phase(at, 2.4, 1);
            ticks.push(at);
        }
        assert_eq!(ticks[..4], [1, 4, 6, 9]);
        assert_eq!(ticks[25], 61);
        // Filling: 300 proxies at 20 Hz, a tick's share 96: phase 0 fills first, then 1,
        // then 2, and once all carry 96 the least loaded takes the next.
        let mut loads = vec![0u32; 3];
        let mut order = Vec::new();
        for _ in 0..300 {
            let p = spread_phase(&loads, 3.0, 96);
            loads[p as usize] += 1;
            order.push(p);
        }
        assert!(order[..96].iter().all(|&p| p == 0));
        assert!(order[96..192].iter().all(|&p| p == 1));
        assert!(order[192..288].iter().all(|&p| p == 2));
        assert_eq!(loads, [100, 100, 100]);
        // A tick rounded to the nanosecond leaves 20 Hz a hair under three ticks: three.
        let rounded = 0.05 / 0.016_666_667;
        assert!(rounded < 3.0);
        assert_eq!(spread_phase(&[96, 96], rounded, 96), 2);
        // A small match: one phase; a fast rate or nonsense: one phase.
        assert_eq!(spread_phase(&[95], 3.0, 96), 0);
        assert_eq!(spread_phase(&[500], 1.0, 96), 0);
        assert_eq!(spread_phase(&[500], 1.9, 96), 0);
        assert_eq!(spread_phase(&[500], f64::NAN, 96), 0);
        // A phase emptied by leavers is filled again before a new one is opened.
        assert_eq!(spread_phase(&[96, 40, 0], 3.0, 96), 1);
        assert_eq!(spread_phase(&[90, 96, 0], 3.0, 96), 0);
        // Slow rates have as many phases, MAX_SPREAD_PHASES; a rate between, fewer.
        let full = vec![96u32; 200];
        assert_eq!(spread_phase(&full, 60.0, 96), 0);
        let mut almost = vec![96u32; 200];
        almost[70] = 0;
        almost[2] = 5;
        assert_eq!(spread_phase(&almost, 60.0, 96), 2);
        assert_eq!(spread_phase(&[96, 96, 0], 2.0, 96), 0);
        // No spreading at all: every proxy on phase 0.
        assert_eq!(spread_phase(&[5000], 3.0, usize::MAX), 0);
    }

    #[test]
    fn a_servers_long_frames_are_covered_for_all_but_the_share_of_the_time() {
        // Frames of `lengths`, repeated `times`, one after the other.
        let play = |outages: &mut FrameOutages, now: &mut f64, lengths: &[f64], times: usize| {
            for _ in 0..times {
                for &f in lengths {
                    *now += f;
                    outages.observe(*now, f);
                }
            }
        };
        // The same within one moment: nothing decays, so the figures are exact.
        let at_once = |outages: &mut FrameOutages, lengths: &[f64], times: usize| {
            for _ in 0..times {
                for &f in lengths {
                    outages.observe(0.0, f);
                }
            }
        };
        let mut now = 0.0;
        let mut none = FrameOutages::default();
        play(&mut none, &mut now, &[0.1], 15);
        assert_eq!(none.covering(0.005), None, "too few frames to tell");
        // A steady 10-fps host: its frame, less the share.
        let mut steady = FrameOutages::default();
        at_once(&mut steady, &[0.1], 200);
        let x = steady.covering(0.005).unwrap();
        assert!((x - 0.1 * 0.995).abs() < 1e-6, "{x}");
        // The same host hitching 2 % of its frames for 250 ms: the hitches are 5 % of the
        // time, far above the share, and the covering is nearly the hitch: the 2 × (0.25 − x)
        // seconds beyond it per 10.3 s are the share.
        let mut hitching = FrameOutages::default();
        let mut pattern = vec![0.1; 49];
        pattern.push(0.25);
        at_once(&mut hitching, &pattern, 20);
        let x = hitching.covering(0.005).unwrap();
        let expected = 0.25 - 0.005 * (49.0 * 0.1 + 0.25);
        assert!((x - expected).abs() < 1e-6, "{x} against {expected}");
        // Time beyond the answer is the share: no less, no more.
        let total = 20.0 * (49.0 * 0.1 + 0.25);
        assert!((20.0 * (0.25 - x) - 0.005 * total).abs() < 1e-6);
        // A dedicated server at 60 Hz with one 250-ms stall in a minute: that stall alone is
        // 0.4 % of the time, within the share, so the covering stays near the usual frame.
        let mut dedicated = FrameOutages::default();
        let tick = 0.002 * 9.0; // the bins' edge above 1/60 s
        at_once(&mut dedicated, &[tick], 1_800);
        at_once(&mut dedicated, &[0.25], 1);
        at_once(&mut dedicated, &[tick], 1_800);
        let x = dedicated.covering(0.005).unwrap();
        assert!(x < 0.25 && x >= tick * 0.99, "{x}");
        // The hitches fade with time: a minute of 60-Hz frames later they weigh little.
        hitching.observe(now, tick);
        play(&mut hitching, &mut now, &[tick], 3_600);
        let x = hitching.covering(0.005).unwrap();
        assert!(x < 0.1, "{x}");
        // Nonsense is ignored; shares outside 0–1 have no answer.
        hitching.observe(now, f64::NAN);
        hitching.observe(f64::INFINITY, 0.1);
        hitching.observe(now, -1.0);
        assert_eq!(hitching.covering(1.0), None);
        assert_eq!(hitching.covering(-0.1), None);
        assert!(hitching.covering(0.0).unwrap() <= MAX_OUTAGE_FRAME);
    }

    /// Feeds `seconds` of a link sending `rate` datagrams a second that loses `loss` of them in
    /// bursts of `burst` on average (Gilbert–Elliott, seeded; 1: independently), each
    /// arriving up to `reorder` places out of order.
    fn datagram_link(
        seed: u64,
        (rate, seconds): (f64, f64),
        (loss, burst): (f64, f64),
        reorder: u64,
    ) -> DatagramLoss {
        let mut rng = crate::SplitMix64::new(seed);
        let mut reordering = crate::SplitMix64::new(seed ^ 0xA5A5);
        let mut tracker = DatagramLoss::default();
        // Leaving the lossy state with 1/burst each datagram; entering it so that `loss` of
        // the time is spent there.
        let (leave, enter) = (1.0 / burst, loss / burst / (1.0 - loss));
        let mut losing = false;
        let n = (rate * seconds) as u64;
        let mut arrived = Vec::new();
        for seq in 0..n {
            losing = if burst <= 1.0 {
                rng.next_f64() < loss
            } else if losing {
                rng.next_f64() >= leave
            } else {
                rng.next_f64() < enter
            };
            if !losing {
                // Each arrives up to `reorder` datagrams' time late.
                let late = reordering.next_f64() * reorder as f64;
                arrived.push((seq as f64 + late, seq));
            }
        }
        arrived.sort_by(|a, b| a.0.total_cmp(&b.0));
        for (at, seq) in arrived {
            tracker.observe(at / rate, seq);
        }
        tracker
    }

    #[test]
    fn datagram_loss_reads_the_share_and_the_runs_from_sequence_numbers() {
        let end = 20.0;
        // Independent loss: a lost datagram is followed by another about as often as any is.
        let independent = datagram_link(7, (100.0, end), (0.1, 1.0), 0);
        let share = independent.share().unwrap();
        assert!((share - 0.1).abs() < 0.02, "{share}");
        let c = independent.continuation().unwrap();
        assert!((c - 0.1).abs() < 0.05, "{c}");
        let rate = independent.rate(end).unwrap();
        assert!((rate - 100.0).abs() < 3.0, "{rate}");
        // Bursts of 8: a lost datagram is followed by another seven times in eight; a 20-Hz
        // state five datagrams later is lost after a lost one about half the time.
        let bursty = datagram_link(7, (100.0, end), (0.1, 8.0), 0);
        let c = bursty.continuation().unwrap();
        assert!((c - 0.875).abs() < 0.04, "{c}");
        let states = bursty.continuation_over(end, 0.05).unwrap();
        assert!((states - 0.875f64.powi(5)).abs() < 0.1, "{states}");
        // Faster than the datagrams: one datagram's continuation.
        assert_eq!(bursty.continuation_over(end, 0.001), Some(c));
        // Reordering within the window is no loss.
        let reordered = datagram_link(7, (100.0, end), (0.0, 1.0), 20);
        assert_eq!(reordered.share(), Some(0.0));
        assert_eq!(reordered.continuation(), None);
        let lossy_reordered = datagram_link(7, (100.0, end), (0.1, 8.0), 20);
        let share = lossy_reordered.share().unwrap();
        assert!((share - bursty.share().unwrap()).abs() < 0.005, "{share}");
    }

    /// What a client reports of its states' runs reads back as its datagrams' on the server
    /// (which decides from it whether to pack the link), over every rate and interval; a
    /// faster sender than the client counted (its lost datagrams too) reads the runs likelier,
    /// never less likely; garbage reads as no runs.
    #[test]
    fn a_states_continuation_reads_back_as_its_datagrams() {
        for c in [0.0, 0.03, 0.2, 0.3, 0.5, 0.875, 0.9, 1.0] {
            for rate in [0.5, 1.0, 20.0, 25.0, 69.0, 250.0] {
                for interval in [1.0 / 60.0, 0.05, 0.1, 1.0] {
                    let states = continuation_over(c, rate, interval);
                    if states < 1e-200 {
                        // (Underflows: 0.03 over 250 datagrams. Reads as no runs.)
                        assert!(continuation_per_datagram(states, rate, interval) < 0.1);
                        continue;
                    }
                    let back = continuation_per_datagram(states, rate, interval);
                    assert!(
                        (back - c).abs() < 1e-9,
                        "{c} at {rate}/s, {interval} s: {back}"
                    );
                    let faster = continuation_per_datagram(states, rate * 1.2, interval);
                    assert!(faster >= back - 1e-12, "{c}: {faster} < {back}");
                }
            }
        }
        // Bursts of 8 at the report's 69 datagrams a second, seen as 20-Hz states: 0.63.
        let states = continuation_over(0.875, 69.0, 0.05);
        assert!((states - 0.631).abs() < 0.001, "{states}");
        assert!((continuation_per_datagram(states, 69.0, 0.05) - 0.875).abs() < 1e-9);
        for garbage in [f64::NAN, f64::INFINITY, -1.0] {
            assert_eq!(continuation_per_datagram(garbage, 69.0, 0.05), 0.0);
            assert_eq!(continuation_per_datagram(0.5, garbage, 0.05), 0.5);
        }
        assert_eq!(continuation_per_datagram(0.5, 1e308, 1e308), 0.0);
        assert_eq!(continuation_per_datagram(2.0, 69.0, 0.05), 1.0);
    }

    #[test]
    fn datagram_loss_knows_the_runs_within_seconds_and_restarts_with_a_new_connection() {
        // The first seconds of a link losing 10 % in bursts of 8 at 55 datagrams a second.
        // Most links know by then that the losses run (the rest met no burst yet), and what
        // they know is near the seven in eight (a state stream shows a run every 4 s).
        let known: Vec<f64> = (1..=20)
            .filter_map(|seed| datagram_link(seed, (55.0, 4.0), (0.1, 8.0), 10).continuation())
            .collect();
        assert!(known.len() >= 14, "{known:?}");
        assert!(known.iter().all(|&c| c > 0.7), "{known:?}");
        // From the first run met on: 19 of 20, a link whose only burst so far was short
        // reading that (0.5).
        let once: Vec<f64> = (1..=20)
            .filter_map(|seed| {
                datagram_link(seed, (55.0, 4.0), (0.1, 8.0), 10).continuation_once_met()
            })
            .collect();
        assert!(once.len() >= 18, "{once:?}");
        assert!(once.iter().filter(|&&c| c > 0.7).count() >= 17, "{once:?}");
        // One burst is known for as long as it is remembered, not only until its weight
        // decays below one run's (a 20-datagram-a-second link meets the next seconds later).
        let mut burst = DatagramLoss::default();
        for seq in (0..100u32).chain(110..400) {
            burst.observe(f64::from(seq) / 20.0, u64::from(seq));
        }
        assert_eq!(burst.continuation(), None);
        let c = burst.continuation_once_met().unwrap();
        assert!((c - 0.9).abs() < 0.01, "{c}");
        // Nothing known before enough came.
        let mut fresh = DatagramLoss::default();
        fresh.observe(0.0, 5);
        fresh.observe(0.01, 9);
        assert_eq!(fresh.share(), None);
        assert_eq!(fresh.continuation(), None);
        assert_eq!(fresh.rate(0.5), None);
        // A new connection numbers from 0 again: no loss counted for the jump either way.
        let mut link = DatagramLoss::default();
        for seq in 0..200u32 {
            link.observe(f64::from(seq) * 0.01, u64::from(seq) + (1 << 40));
        }
        for seq in 0..200u64 {
            link.observe(2.0 + seq as f64 * 0.01, seq);
        }
        assert_eq!(link.share(), Some(0.0));
        // Duplicates, stale datagrams and garbage times count nothing.
        link.observe(4.0, 199);
        link.observe(4.0, 100);
        link.observe(f64::NAN, 300);
        assert_eq!(link.share(), Some(0.0));
        // A long silence counts what it skipped: 1000 more lost.
        link.observe(4.1, 1199);
        link.observe(4.2, 1200 + REORDER_WINDOW);
        assert!(link.share().unwrap() > 0.5, "{link:?}");
    }

    #[test]
    fn datagram_loss_totals_count_every_datagram_judged_and_never_decay() {
        // 1000 datagrams over 100 s, every tenth lost: the totals count them all, though the
        // share forgets the old ones.
        let mut link = DatagramLoss::default();
        for seq in (0..1000u64).filter(|s| s % 10 != 3) {
            link.observe(seq as f64 * 0.1, seq);
        }
        // The newest REORDER_WINDOW are not judged yet; the first is judged too (arrived).
        let judged = 1000 - REORDER_WINDOW;
        let lost = (0..judged).filter(|s| s % 10 == 3).count() as u64;
        assert_eq!(link.totals(), (judged, lost));
        // A gap skipping 1000..1082 judges the window's 32 and the skipped ones beyond the
        // new window (82 − 31) lost at once; the newest 31 skipped wait in the window.
        link.observe(100.0, 1082);
        let (j, l) = link.totals();
        assert_eq!(j, 1000 + 51);
        let lost_in_window = (judged..1000).filter(|s| s % 10 == 3).count() as u64;
        assert_eq!(l, lost + lost_in_window + 51);
        // A new connection (numbered from 0 again) carries the totals on.
        link.observe(101.0, 0);
        for seq in 1..=REORDER_WINDOW + 1 {
            link.observe(101.0 + seq as f64 * 0.01, seq);
        }
        assert_eq!(link.totals(), (j + 2, l));
    }

    #[test]
    fn state_loss_counts_the_intervals_a_gap_holds_and_remembers_them() {
        let mut loss = StateLoss::default();
        // 200 states at 20 Hz, one of them lost: 1 of 200.
        let mut now = 0.0;
        for i in 0..199 {
            now += 0.05;
            let gap = if i == 100 { 0.1 } else { 0.05 };
            loss.observe(now, gap, 0.05);
        }
        assert!(
            (loss.share() - 1.0 / 200.0).abs() < 1e-3,
            "{}",
            loss.share()
        );
        // Jittered arrivals are not losses; a long pause counts at most MAX_COUNTED_GAP.
        let mut clean = StateLoss::default();
        for i in 0..100 {
            clean.observe(f64::from(i) * 0.05, 0.05 + 0.02 * f64::from(i % 2), 0.05);
        }
        assert_eq!(clean.share(), 0.0);
        clean.observe(10.0, 100.0, 0.05);
        assert!(clean.lost <= f64::from(MAX_COUNTED_GAP), "{}", clean.lost);
        // Garbage counts as a state received.
        clean.observe(10.0, f64::NAN, 0.05);
        clean.observe(f64::INFINITY, 0.1, 0.05);
        assert!(clean.share().is_finite());
        // Too little in hand: no answer yet.
        let mut few = StateLoss::default();
        few.observe(0.0, 0.1, 0.05);
        assert_eq!(few.share(), 0.0);
        // Ten quiet seconds later the loss still counts (a 20-s memory), if less.
        let before = loss.share();
        for i in 1..=200 {
            loss.observe(now + f64::from(i) * 0.05, 0.05, 0.05);
        }
        assert!(loss.share() > 0.3 * before && loss.share() < before);
    }

    #[test]
    fn target_is_one_interval_plus_jitter_margin_without_loss() {
        let p = DelayPolicy::default();
        assert!((p.target(0.05, 0.0, 0.0) - 0.05).abs() < 1e-12);
        assert!((p.target(0.05, 0.01, 0.0) - 0.07).abs() < 1e-12);
    }

    #[test]
    fn measured_margin_replaces_the_jitter_estimate() {
        let p = DelayPolicy::default();
        assert!((p.target_with_margin(1.0 / 60.0, 0.01, 0.05) - (2.0 / 60.0 + 0.01)).abs() < 1e-12);
        assert!((p.target_with_margin(0.05, -1.0, 0.0) - 0.05).abs() < 1e-12);
        // Slow proxies' states are repeated a quarter interval later: that bridges a loss.
        assert!((p.target_with_margin(1.0, 0.01, 0.05) - 1.26).abs() < 1e-12);
        assert!((p.target(0.1, 0.0, 0.05) - 0.125).abs() < 1e-12);
        assert_eq!(ease_time(0.1, 0.05), 0.1);
        assert_eq!(ease_time(0.1, 0.5), 0.125);
        assert_eq!(ease_time(0.1, 1.0), 0.25);
        assert_eq!(ease_time(0.1, 60.0), 0.25);
        assert_eq!(ease_time(0.1, f64::NAN), 0.1);
        assert_eq!(ease_time(f32::NAN, f64::INFINITY), 0.0);
        assert_eq!(repeat_after(0.05), None);
        assert_eq!(repeat_after(f64::NAN), None);
        let mut c = DelayController::new(p, 0.05);
        c.set_target(9.0);
        assert_eq!(c.target(), 2.5);
    }

    #[test]
    fn an_ease_is_paced_so_the_offset_moves_no_faster_than_the_catch_up_speed() {
        // Short offsets keep the base time.
        assert_eq!(catch_up_time(0.1, 0.2, 5.0), 0.1);
        // 2.3 m behind a 5-m/s proxy: 2 × 2.3 / 7.5 s, the offset's first speed 7.5 m/s.
        let t = catch_up_time(0.1, 2.3, 5.0);
        assert!((t - 2.0 * 2.3 / 7.5).abs() < 1e-6, "{t}");
        assert!((2.0 * 2.3 / t - CATCH_UP_SHARE * 5.0).abs() < 1e-4);
        // A standing proxy is paced by the least speed, and no ease lasts beyond the cap.
        assert_eq!(catch_up_time(0.1, 0.3, 0.0), 0.4);
        assert_eq!(catch_up_time(0.1, 3.84, 0.0), MAX_CATCH_UP_TIME);
        // Never shorter than the base, and bad inputs count as zero.
        assert_eq!(catch_up_time(2.0, 3.84, 1.0), 2.0);
        assert_eq!(catch_up_time(0.1, f32::NAN, f32::INFINITY), 0.1);
        assert_eq!(catch_up_time(0.1, 1.0, f32::NAN), 1.0);
        use glam::Vec3;
        let state = |v: Vec3| ProxyState {
            tick: 0,
            time: 0.0,
            position: Vec3::ZERO,
            rotation: glam::Quat::IDENTITY,
            velocity: v,
            flags: 0,
            teleport: false,
            off_grid: false,
        };
        let states = [
            state(Vec3::X * 2.0),
            state(Vec3::Z * -5.0),
            state(Vec3::NAN),
        ];
        assert_eq!(catch_up_speed(&states), 5.0);
        assert_eq!(catch_up_speed(&[]), 0.0);
    }

    #[test]
    fn loss_adds_one_interval_to_bridge_a_lost_update() {
        let p = DelayPolicy::default();
        assert!((p.target(0.05, 0.0, 0.03) - 0.10).abs() < 1e-12);
        assert!((p.target(0.05, 0.0, 0.004) - 0.05).abs() < 1e-12);
    }

    #[test]
    fn loss_that_takes_states_in_a_row_expects_as_many() {
        let p = DelayPolicy::default();
        // Two in a row stay within the 0.25 % share up to ~5 % loss; at 7 % they go 0.5 % of
        // the time, three in a row 0.03 %; three go 0.4 % of the time at 16 %.
        assert_eq!(p.lost_in_a_row(0.0, None), 1);
        assert_eq!(p.lost_in_a_row(0.045, None), 1);
        assert_eq!(p.lost_in_a_row(0.07, None), 2);
        assert_eq!(p.lost_in_a_row(0.10, None), 2);
        assert_eq!(p.lost_in_a_row(0.13, None), 2);
        assert_eq!(p.lost_in_a_row(0.16, None), 3);
        assert_eq!(p.lost_in_a_row(0.20, None), 3);
        assert_eq!(p.lost_in_a_row(0.9, None), MAX_BRIDGED_STATES);
        assert_eq!(p.lost_in_a_row(f64::NAN, None), 1);
        // Measured independence is the same; a continuation below the loss is taken at it.
        assert_eq!(p.lost_in_a_row(0.10, Some(0.10)), 2);
        assert_eq!(p.lost_in_a_row(0.10, Some(0.0)), 2);
        // In runs of two and a half states (a lost one followed by another three times in
        // five), 10 % loss starves 0.25 % of the time only past eight in a row:
        // 0.1 × 0.6^8 = 0.0017, where 0.1 × 0.6^7 = 0.0028.
        assert_eq!(p.lost_in_a_row(0.10, Some(0.6)), 8);
        // Runs that never end are bridged as far as the model goes; garbage is no run.
        assert_eq!(p.lost_in_a_row(0.10, Some(1.0)), MAX_BRIDGED_STATES);
        assert_eq!(p.lost_in_a_row(0.10, Some(f64::NAN)), 2);
        // A policy that lets more frames starve expects fewer.
        let lax = DelayPolicy {
            starved_share: 0.02,
            ..p
        };
        assert_eq!(lax.lost_in_a_row(0.10, None), 1);
        // What the delay covers for it: two 50-ms states and the margin at 10 %; nothing
        // beyond the bridge for one, nor for a repeated (10-Hz) proxy.
        let two = p.covering_lost_in_a_row(0.05, 0.01, 0.10, None).unwrap();
        assert!((two - 0.11).abs() < 1e-12, "{two}");
        assert_eq!(p.covering_lost_in_a_row(0.05, 0.01, 0.04, None), None);
        assert_eq!(p.covering_lost_in_a_row(0.1, 0.01, 0.20, None), None);
        let eight = p
            .covering_lost_in_a_row(0.05, 0.01, 0.10, Some(0.6))
            .unwrap();
        assert!((eight - 0.41).abs() < 1e-12, "{eight}");
    }

    #[test]
    fn lost_states_that_come_in_runs_are_told_from_independent_ones() {
        let mut independent = StateLoss::default();
        let mut bursty = StateLoss::default();
        assert_eq!(independent.continuation(), None);
        let interval = 0.05;
        let mut now = 0.0;
        for i in 0..400 {
            now += interval;
            // One state in ten lost alone, against three in a row out of every thirty.
            let gap = if i % 10 == 9 { 2.0 } else { 1.0 };
            independent.observe(now, gap * interval, interval);
            let gap = if i % 27 == 26 { 4.0 } else { 1.0 };
            bursty.observe(now, gap * interval, interval);
        }
        assert_eq!(independent.continuation(), Some(0.0));
        let c = bursty.continuation().unwrap();
        assert!((c - 2.0 / 3.0).abs() < 1e-9, "{c}");
        // About the same share lost either way.
        assert!((independent.share() - bursty.share()).abs() < 0.01);
        // A single run says nothing yet.
        let mut once = StateLoss::default();
        once.observe(0.0, 0.05, 0.05);
        once.observe(0.05, 0.5, 0.05);
        assert_eq!(once.continuation(), None);
    }

    #[test]
    fn target_is_clamped_and_ignores_garbage() {
        let p = DelayPolicy::default();
        assert_eq!(p.target(2.0, 0.0, 0.5), 2.5);
        assert_eq!(p.target(f64::NAN, -1.0, f64::INFINITY), 0.0);
    }

    #[test]
    fn covering_leaves_at_most_the_share_starved() {
        let mut s = StateStaleness::default();
        assert_eq!(s.covering(0.0, 0.005), None, "nothing in hand, no answer");
        // 1000 frames at 100 fps of one proxy: the excess climbs 0..40 ms between states,
        // and 2 % of the frames sit in outages of 200..350 ms.
        let mut stale = Vec::new();
        for i in 0..1000 {
            let x = if i % 100 >= 98 {
                0.2 + 0.15 * f64::from(i % 100 - 98)
            } else {
                0.01 * f64::from(i % 5)
            };
            stale.push(x);
            s.observe(0.0, x);
        }
        let d = s.covering(1.0, 0.01).unwrap();
        let starved = stale.iter().filter(|x| **x > d).count();
        assert!(starved <= 10, "{starved} frames above {d}");
        assert!((0.2..=0.2 + STALENESS_BIN + 1e-9).contains(&d), "{d}");
        // Half a percent: the longer outages too.
        let d = s.covering(1.0, 0.005).unwrap();
        assert!((0.35..=0.35 + STALENESS_BIN + 1e-9).contains(&d), "{d}");
        // A fifth: the stream's own cadence only.
        let d = s.covering(1.0, 0.2).unwrap();
        assert!((0.04..=0.042 + 1e-9).contains(&d), "{d}");
        // Garbage is ignored, and the extremes count at the ends.
        s.observe(1.0, f64::NAN);
        s.observe(f64::INFINITY, 1.0);
        assert!((s.weight() - 1000.0).abs() < 1e-3);
        for _ in 0..100 {
            s.observe(1.0, 99.0);
        }
        assert!(s.covering(2.0, 0.05).unwrap() > 2.9);
        assert_eq!(s.covering(2.0, 1.5), None);
    }

    #[test]
    fn staleness_is_forgotten_over_its_memory() {
        let mut s = StateStaleness::default();
        for i in 0..1000 {
            s.observe(f64::from(i) * 0.01, if i % 50 == 0 { 0.5 } else { 0.0 });
        }
        assert!(s.covering(10.0, 0.005).unwrap() >= 0.5);
        // A clean minute later the old outages weigh less than the share.
        for i in 0..6000 {
            s.observe(10.0 + f64::from(i) * 0.01, 0.0);
        }
        assert!(s.covering(70.0, 0.005).unwrap() < 0.01);
        assert!(
            s.weight() < (STALENESS_MEMORY * 100.0 * 1.2) as f32,
            "{}",
            s.weight()
        );
    }

    #[test]
    fn an_outage_beyond_the_bridge_lengthens_every_proxys_delay() {
        let p = DelayPolicy::default();
        let nominal = p.target_with_margin(0.05, 0.01, 0.1);
        // Nothing measured, or outages the bridge covers: as before.
        assert_eq!(p.target_covering(0.05, 0.01, 0.1, None), nominal);
        assert_eq!(p.target_covering(0.05, 0.01, 0.1, Some(0.03)), nominal);
        // A 200-ms excess: a 20-Hz proxy and a 1-Hz one each get their interval plus that.
        let d = p.target_covering(0.05, 0.01, 0.1, Some(0.2));
        assert!((d - 0.25).abs() < 1e-12, "{d}");
        let slow = p.target_covering(1.0, 0.01, 0.1, Some(0.4));
        assert!((slow - 1.4).abs() < 1e-12, "{slow}");
        assert_eq!(p.target_covering(0.05, 0.01, 0.1, Some(f64::NAN)), nominal);
        assert_eq!(p.target_covering(0.05, 0.01, 0.1, Some(9.0)), p.max_delay);
    }

    #[test]
    fn controller_moves_at_bounded_rate() {
        let mut c = DelayController::new(DelayPolicy::default(), 0.05);
        c.set_inputs(0.05, 0.0, 0.1); // target 0.10
        let mut t = 0.0;
        let mut last = c.current();
        while t < 0.2 {
            let now = c.update(0.01);
            assert!(now - last <= 0.1 * 0.01 + 1e-12);
            last = now;
            t += 0.01;
        }
        assert!((c.current() - 0.07).abs() < 1e-9);
        for _ in 0..100 {
            c.update(0.01);
        }
        assert!(
            (c.current() - 0.10).abs() < 1e-12,
            "reaches the target and stays"
        );
        c.set_inputs(0.05, 0.0, 0.0); // back to 0.05, shrinking at 0.05 s/s
        c.update(0.2);
        assert!((c.current() - 0.09).abs() < 1e-9);
        c.snap_to_target();
        assert!((c.current() - 0.05).abs() < 1e-12);
    }
}
