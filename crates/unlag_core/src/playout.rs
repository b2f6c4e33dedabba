//! The server's playout of a client's moves: a jitter buffer that plays them at the pace they
//! were made, not the pace they arrive.
//!
//! A client makes one move per tick but sends them a packet at a time (two 60-Hz moves per
//! 30-Hz message, a whole frame's at a low frame rate), and the packets cross a link with
//! jitter and losses. Simulated the moment they arrive, the server's track of that player
//! stands still for a tick or five and then jumps: every state sampled from it, every hit box
//! recorded from it and every proxy drawn from those states lurches (a 0.2-m pop at 6 m/s).
//!
//! [`MovePlayout`] keeps a playout clock in the client's own move time (the sum of its moves'
//! durations). Each arrival shows how far the server's time runs ahead of that move time (the
//! *offset*); the clock is steered towards `server time − the offset's high quantile` over a
//! recent window, so a move is played that long after it was made, and nearly every move is
//! there in time. The clock runs past the moves that have arrived by at most
//! [`PlayoutSettings::max_guess`] (the server shows the player going on with its last input
//! meanwhile; a late move is played when it comes), and it changes pace by at most
//! [`PlayoutSettings::max_rate`] and
//! [`PlayoutSettings::min_rate`]: a late packet or a longer buffer is absorbed as a short change
//! of speed, never as a jump. A player's moves are therefore played out later by the buffer's
//! wait, about the spread of their arrival (the peeker's advantage counts it); no faster than
//! `max_rate` (a speed hack gains nothing here; the time-discrepancy check still judges it).
//!
//! One exception: an arrival later than the buffer's wait by more than `max_wait` (a stall, a
//! burst of losses: its oldest move was made long before) brings a backlog, not jitter. Played
//! at `max_rate` it would keep the server's track (the hit boxes, the check of the player's
//! shot origins) seconds behind the player; it is played out as fast as the gain asks, up to
//! the newest move of the arrivals that came with it (within `max_wait`) or while it was
//! played out, and the pace cap resumes. Moves that arrive early (a fast clock) never open
//! that exception.

use crate::settings::{Fields, SettingsError, Validate};
use std::collections::VecDeque;

/// How a client's moves are played out on the server.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct PlayoutSettings {
    /// Whether moves are played out at their own pace (default true); false simulates each
    /// move as soon as it arrives (the track then moves in steps of packets).
    pub enabled: bool,
    /// Share of recent arrivals the buffer waits for, 0.5–1 (default 0.95): the rest come late
    /// and the track slows for them instead.
    pub quantile: f64,
    /// Seconds of arrivals the quantile is taken over (default 2).
    pub window: f64,
    /// The longest wait the buffer keeps, seconds (default 0.25): arrivals later than this are
    /// a hitch or a burst of losses, played out faster instead of waited for.
    pub max_wait: f64,
    /// Fastest pace, in client seconds per server second (default 1.5), while catching up.
    pub max_rate: f64,
    /// Slowest pace while the buffer grows (default 0.8).
    pub min_rate: f64,
    /// How fast the pace follows the buffer's error, per second (default 8: about 0.12 s to
    /// settle).
    pub gain: f64,
    /// How far the track may run on past the moves that have arrived, seconds of move time
    /// (default 1, at most 2: a burst of ten lost packets from a 10-fps client, or a 0.6-s
    /// hitch and the trip after it; with 0.5, 5 of the report's grid cells had pops, with 1,
    /// 3). While a
    /// player's moves are late, the server shows its character going on with its last input
    /// (the hit boxes are recorded there and the proxies drawn there) instead of standing and
    /// then rushing; the moves themselves are still simulated exactly as they come. 0 stands
    /// at once.
    pub max_guess: f64,
    /// How fast the shown track bends onto the moves once they arrive, seconds (default 0.07:
    /// the time constant of a critically damped spring, [`crate::SpringOffset`], settled to
    /// 1 % in about 0.45 s). A guess that was right leaves nothing to ease.
    pub guess_ease: f64,
}

impl Default for PlayoutSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            quantile: 0.95,
            window: 2.0,
            max_wait: 0.25,
            max_rate: 1.5,
            min_rate: 0.8,
            gain: 8.0,
            max_guess: 1.0,
            guess_ease: 0.07,
        }
    }
}

/// Why [`PlayoutSettings`] are not usable: now the [`SettingsError`] every settings struct
/// reports.
#[deprecated(note = "use unlag_core::SettingsError, which every settings struct reports")]
pub type PlayoutSettingsError = SettingsError;

impl Validate for PlayoutSettings {
    fn validate(&self) -> Result<(), SettingsError> {
        let f = Fields::new("PlayoutSettings");
        f.within("quantile", self.quantile, 0.5, 1.0, "")?;
        f.within("window", self.window, 0.1, 60.0, "s")?;
        f.within("max_wait", self.max_wait, 0.0, 2.0, "s")?;
        f.within("max_rate", self.max_rate, 1.0, 10.0, "")?;
        f.within("min_rate", self.min_rate, 0.1, 1.0, "")?;
        f.within("gain", self.gain, 0.0, 1000.0, "/s")?;
        f.within("max_guess", self.max_guess, 0.0, 2.0, "s")?;
        f.within("guess_ease", self.guess_ease, 0.01, 2.0, "s")
    }
}

/// Most arrivals kept for the quantile (a flood of messages costs no more).
const MAX_SAMPLES: usize = 256;

/// (server time of arrival, a figure of that arrival) over the last window of seconds, at most
/// [`MAX_SAMPLES`]: what [`MovePlayout`] and [`ArrivalSpread`] take their quantiles over.
#[derive(Clone, Debug, Default)]
struct Arrivals(VecDeque<(f64, f64)>);

impl Arrivals {
    /// Keeps `value`, arrived at `now`, and forgets what is older than `window` seconds.
    fn push(&mut self, now: f64, value: f64, window: f64) {
        if self.0.len() == MAX_SAMPLES {
            self.0.pop_front();
        }
        self.0.push_back((now, value));
        while self.0.front().is_some_and(|(t, _)| *t < now - window) {
            self.0.pop_front();
        }
    }

    /// The values kept, in the order they came, copied into `buf`: callers pick the order
    /// statistics they need out of them ([`crate::nth_smallest`]) rather than sort the window
    /// (on every arrival of every client, the sorts were 2.4 % of a 64-player server's
    /// update), in a buffer on the caller's stack (a vector each was 3 % of a 256-player
    /// server's allocations).
    fn values<'a>(&self, buf: &'a mut [f64; MAX_SAMPLES]) -> &'a mut [f64] {
        self.map_into(buf, |(_, v)| v)
    }

    /// `f` of each (arrival time, value) kept, in the order they came, copied into `buf`.
    fn map_into<'a>(
        &self,
        buf: &'a mut [f64; MAX_SAMPLES],
        f: impl Fn((f64, f64)) -> f64,
    ) -> &'a mut [f64] {
        // (At most `MAX_SAMPLES` kept: `push` holds them to it.)
        let n = self.0.len().min(MAX_SAMPLES);
        for (slot, &sample) in buf.iter_mut().zip(&self.0) {
            *slot = f(sample);
        }
        &mut buf[..n]
    }
}

/// One client's playout clock (see the [module docs](self)). Times are seconds: `now` is the
/// server's time, move times are the client's (the sum of the durations of its moves).
#[derive(Clone, Debug, Default)]
pub struct MovePlayout {
    /// (server time of arrival, offset = arrival − move time at the end of the oldest new
    /// move it brought).
    offsets: Arrivals,
    /// The offset the clock steers to, while there are arrivals.
    target: Option<f64>,
    /// The move time played up to.
    clock: Option<f64>,
    last_now: Option<f64>,
    /// Move time up to which a late arrival's backlog may be played faster than `max_rate`.
    catch_up_to: f64,
    /// Server time of the last late arrival: what arrives with it is the same backlog.
    late_at: Option<f64>,
    /// Mean wait of played moves between arrival and play, seconds (exponential average).
    wait: f64,
    /// The clock's advances over the last [`PACE_WINDOW`]: (server time, server seconds
    /// elapsed, move seconds advanced), oldest first.
    advances: VecDeque<(f64, f64, f64)>,
}

/// Over how long [`MovePlayout::pace`] is taken, seconds: longer than the clock's holds
/// between a slow client's packets (a 10-fps client's moves come 0.1 s at a time), shorter
/// than a turn or a stop.
pub const PACE_WINDOW: f64 = 0.1;

impl MovePlayout {
    /// Records an arrival at `now` bringing moves whose oldest new one ends at move time
    /// `move_time` and whose newest ends at `newest`.
    pub fn on_arrival(
        &mut self,
        settings: &PlayoutSettings,
        now: f64,
        move_time: f64,
        newest: f64,
    ) {
        let offset = now - move_time;
        if !offset.is_finite() || !newest.is_finite() {
            return;
        }
        if self
            .target
            .is_some_and(|target| offset > target + settings.max_wait)
        {
            self.late_at = Some(now);
        }
        // What arrives with a late arrival, or while its backlog is still being played out
        // (the rest of it, sent a frame or a resend later), belongs to the same backlog.
        let catching_up = self.clock.is_some_and(|c| c < self.catch_up_to);
        if catching_up
            || self
                .late_at
                .is_some_and(|late| now - late <= settings.max_wait)
        {
            self.catch_up_to = self.catch_up_to.max(newest);
        }
        self.offsets.push(now, offset, settings.window);
        let mut buf = [0.0; MAX_SAMPLES];
        let values = self.offsets.values(&mut buf);
        let i = ((values.len() as f64 * settings.quantile).ceil() as usize).clamp(1, values.len());
        let quantile = crate::nth_smallest(values, i - 1);
        // (The selection leaves the `i` smallest first: the least is among them.)
        let least = values[..i]
            .iter()
            .copied()
            .min_by(f64::total_cmp)
            .unwrap_or(quantile);
        // Never wait longer than `max_wait` beyond the earliest arrival.
        self.target = Some(quantile.min(least + settings.max_wait));
        if self.clock.is_none() {
            // The first arrival: play it the buffer's wait after now.
            self.clock = Some(move_time - (quantile - offset));
            self.last_now = Some(now);
        }
    }

    /// Moves the clock on to server time `now`, no further than move time `available` (the end
    /// of the last move that has arrived), and returns the move time up to which moves are
    /// played now. `None` before any arrival.
    pub fn advance(&mut self, settings: &PlayoutSettings, now: f64, available: f64) -> Option<f64> {
        let clock = self.clock?;
        let target = self.target?;
        let elapsed = (now - self.last_now.unwrap_or(now)).max(0.0);
        self.last_now = Some(now);
        let error = (now - target) - clock;
        let wanted = 1.0 + settings.gain * error;
        // Settings changed by hand past `validate` must not panic the clamp: crossed or NaN
        // rates pace at 1.
        let (lo, hi) = (settings.min_rate, settings.max_rate);
        let rate = if lo <= hi { wanted.clamp(lo, hi) } else { 1.0 };
        let mut next = clock + rate * elapsed;
        if clock < self.catch_up_to {
            // A late arrival's backlog (see the module docs).
            next = next.max((clock + wanted * elapsed).min(self.catch_up_to));
        }
        let next = next.min(available.max(clock));
        if elapsed > 0.0 {
            self.advances.push_back((now, elapsed, next - clock));
            while self
                .advances
                .front()
                .is_some_and(|(t, ..)| now - t >= PACE_WINDOW)
            {
                self.advances.pop_front();
            }
        }
        self.clock = Some(next);
        Some(next)
    }

    /// Records that a move which arrived at server time `arrived` was played at `now` (for
    /// [`MovePlayout::mean_wait`]).
    pub fn on_played(&mut self, now: f64, arrived: f64) {
        let wait = (now - arrived).max(0.0);
        if wait.is_finite() {
            self.wait += 0.05 * (wait - self.wait);
        }
    }

    /// How long moves waited between arrival and play lately, seconds (an average).
    pub fn mean_wait(&self) -> f64 {
        self.wait
    }

    /// The move time played up to, if any move arrived.
    pub fn clock(&self) -> Option<f64> {
        self.clock
    }

    /// How fast the clock ran over the last [`PACE_WINDOW`], move seconds per server second:
    /// 1 at the pace the moves were made, below while the buffer grows, above while it catches
    /// up, 0 after waiting that long for a move that has not arrived. The player's track on
    /// the server moves at its simulated velocity times this. `None` before the clock has
    /// advanced.
    pub fn pace(&self) -> Option<f64> {
        let (elapsed, advanced) = self
            .advances
            .iter()
            .fold((0.0, 0.0), |(e, a), (_, de, da)| (e + de, a + da));
        (elapsed > 0.0).then(|| advanced / elapsed)
    }
}

/// How late a client's messages arrive after the newest move each brings was made, over a
/// window: the up-link's spread as the move stream shows it. Every message counts, the ones a
/// newer message overtook included (their moves were all there already, yet they are the
/// link's slow trips); the move times are the client's, held by the time-discrepancy check.
#[derive(Clone, Debug, Default)]
pub struct ArrivalSpread {
    /// (server time of arrival, arrival − move time of the message's newest move), seconds.
    samples: Arrivals,
}

impl ArrivalSpread {
    /// Records a message that arrived at `now` bringing moves up to move time `newest`; keeps
    /// `window` seconds (at most 256 messages).
    pub fn record(&mut self, now: f64, newest: f64, window: f64) {
        let offset = now - newest;
        if !offset.is_finite() {
            return;
        }
        self.samples.push(now, offset, window);
    }

    /// How far apart the client sends its messages by its own clock, seconds: the median step
    /// between the newest move times of the window's messages (distinct, in order), `None`
    /// before eight. A client sends one message a frame at most (two moves a message at 60 fps),
    /// so this bounds the frame it may claim, by evidence a client cannot fake without really
    /// sending its own moves that late: the move times are held to real time by the
    /// time-discrepancy check.
    pub fn send_spacing(&self) -> Option<f64> {
        if self.samples.0.len() < 8 {
            return None;
        }
        let mut buf = [0.0; MAX_SAMPLES];
        let newest = self.samples.map_into(&mut buf, |(now, o)| now - o);
        newest.sort_by(f64::total_cmp);
        // The steps overwrite the sorted times in place (step `k` goes where time `k` was,
        // read before): on every arrival of every client, a second vector grown step by step
        // was half of this call (reallocations).
        let mut steps = 0;
        for i in 1..newest.len() {
            let step = newest[i] - newest[i - 1];
            if step > 1e-6 {
                newest[steps] = step;
                steps += 1;
            }
        }
        let steps = &mut newest[..steps];
        if steps.len() < 4 {
            return None;
        }
        let middle = steps.len() / 2;
        Some(crate::nth_smallest(steps, middle))
    }

    /// How much later than their median the messages of the window arrived, seconds: the
    /// up-link's upper spread. The few latest (one in 20, up to 3) are left out: a stall's
    /// backlog comes in up to three messages of old moves. `None` before eight.
    pub fn upper_spread(&self) -> Option<f64> {
        if self.samples.0.len() < 8 {
            return None;
        }
        let mut buf = [0.0; MAX_SAMPLES];
        let values = self.samples.values(&mut buf);
        let n = values.len();
        let top = n - 1 - (n / 20).min(3);
        let upper = crate::nth_smallest(values, top);
        // (The selection leaves the `top` smallest first, and the median is among them.)
        let median = crate::nth_smallest(&mut values[..top], n / 2);
        Some(upper - median)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The order statistics picked by selection are the full sort's, bit for bit, whatever the
    /// arrivals (repeats, zeros, quantiles at the ends, a longest wait that cuts the quantile
    /// to the least, windows from one figure to the cap, figures leaving by age and by the
    /// cap); the send spacing too (its steps picked out of the sorted times in place).
    #[test]
    fn the_playout_target_and_the_arrival_spreads_figures_are_the_sorted_windows() {
        let mut rng = crate::SplitMix64::new(11);
        for (quantile, max_wait) in [(0.0, 0.25), (0.3, 0.25), (0.9, 0.03), (1.0, 0.03)] {
            let settings = PlayoutSettings {
                quantile,
                max_wait,
                ..Default::default()
            };
            let mut playout = MovePlayout::default();
            let mut spread = ArrivalSpread::default();
            let mut now = 0.0;
            for k in 0..1500 {
                // Spells of arrivals every 2 ms (the cap of 256 cuts the window) and every 30.
                now += if (k / 300) % 2 == 0 { 0.002 } else { 0.03 };
                // Offsets on a coarse grid, so that many repeat; some zeros.
                let offset = match rng.next_u64() % 10 {
                    0 | 1 => 0.0,
                    r => (r as f64) * 0.01 + (rng.next_u64() % 4) as f64 * 0.05,
                };
                let move_time = now - offset;
                playout.on_arrival(&settings, now, move_time, move_time);
                spread.record(now, move_time, settings.window);
                let mut sorted: Vec<f64> = playout.offsets.0.iter().map(|a| a.1).collect();
                sorted.sort_by(f64::total_cmp);
                let i = ((sorted.len() as f64 * quantile).ceil() as usize).clamp(1, sorted.len());
                let want = sorted[i - 1].min(sorted[0] + settings.max_wait);
                assert_eq!(
                    playout.target.map(f64::to_bits),
                    Some(want.to_bits()),
                    "{k}"
                );
                let mut sorted: Vec<f64> = spread.samples.0.iter().map(|a| a.1).collect();
                sorted.sort_by(f64::total_cmp);
                let want = (sorted.len() >= 8).then(|| {
                    let skip = (sorted.len() / 20).min(3);
                    sorted[sorted.len() - 1 - skip] - sorted[sorted.len() / 2]
                });
                assert_eq!(
                    spread.upper_spread().map(f64::to_bits),
                    want.map(f64::to_bits),
                    "{k}"
                );
                // The send spacing: the median of the distinct steps between the sorted
                // newest move times, as a fully sorted list of them reads it.
                let mut newest: Vec<f64> = spread.samples.0.iter().map(|a| a.0 - a.1).collect();
                newest.sort_by(f64::total_cmp);
                let mut steps: Vec<f64> = newest
                    .windows(2)
                    .map(|w| w[1] - w[0])
                    .filter(|d| *d > 1e-6)
                    .collect();
                steps.sort_by(f64::total_cmp);
                let want = (newest.len() >= 8 && steps.len() >= 4).then(|| steps[steps.len() / 2]);
                assert_eq!(
                    spread.send_spacing().map(f64::to_bits),
                    want.map(f64::to_bits),
                    "{k}"
                );
            }
        }
    }

    #[test]
    fn send_spacing_is_the_median_step_of_the_newest_moves_whatever_the_jitter() {
        let mut s = ArrivalSpread::default();
        assert_eq!(s.send_spacing(), None);
        // A message every 0.15 s by the client's clock, arriving with up to 60 ms of jitter,
        // some twice (a resend brings the same newest move).
        for k in 0..40 {
            let made = f64::from(k) * 0.15;
            let jitter = 0.06 * f64::from((k * 7) % 5) / 4.0;
            s.record(made + 0.1 + jitter, made, 10.0);
            if k % 6 == 0 {
                s.record(made + 0.2, made, 10.0);
            }
        }
        let spacing = s.send_spacing().unwrap();
        assert!((spacing - 0.15).abs() < 1e-9, "{spacing}");
    }

    const TICK: f64 = 1.0 / 60.0;

    /// Plays moves made one per tick, sent two per message, arriving at `arrival(k)` for
    /// message k; steps the server at 240 fps and returns, per server frame, how many moves
    /// had been played.
    /// Without `buffered`, every move is played as it arrives (the old way).
    fn play(arrival: impl Fn(usize) -> f64, seconds: f64, buffered: bool) -> Vec<(f64, usize)> {
        let settings = PlayoutSettings::default();
        let mut p = MovePlayout::default();
        let messages = (seconds * 30.0) as usize;
        let mut arrivals: Vec<(f64, usize)> = (0..messages).map(|k| (arrival(k), k)).collect();
        arrivals.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut have = 0usize; // moves arrived (contiguous)
        let mut got = vec![false; messages];
        let mut played = 0usize;
        let mut next_arrival = 0;
        let mut out = Vec::new();
        let frames = ((seconds + 1.0) * 240.0) as usize;
        for f in 0..frames {
            let now = f as f64 / 240.0;
            while next_arrival < arrivals.len() && arrivals[next_arrival].0 <= now {
                let k = arrivals[next_arrival].1;
                got[k] = true;
                // The oldest new move of message k ends at move time (2k + 1) ticks.
                p.on_arrival(
                    &settings,
                    now,
                    (2 * k + 1) as f64 * TICK,
                    (2 * k + 2) as f64 * TICK,
                );
                next_arrival += 1;
            }
            while have / 2 < messages && got[have / 2] {
                have += 2;
            }
            let limit = p.advance(&settings, now, have as f64 * TICK);
            let limit = if buffered {
                limit
            } else {
                Some(have as f64 * TICK)
            };
            if let Some(limit) = limit {
                while played < have && (played + 1) as f64 * TICK <= limit + 1e-9 {
                    played += 1;
                }
            }
            out.push((now, played));
        }
        out
    }

    /// The longest time the played count stays still while moves are still coming, and the
    /// most moves played within one tick.
    fn steadiness(frames: &[(f64, usize)], until: usize) -> (f64, usize) {
        let mut longest_still = 0.0f64;
        let mut still_since = frames.first().map_or(0.0, |f| f.0);
        let mut most_per_tick = 0;
        for (i, &(t, n)) in frames.iter().enumerate() {
            if n >= until {
                break;
            }
            if i > 0 && n != frames[i - 1].1 {
                still_since = t;
            }
            if n > 2 {
                longest_still = longest_still.max(t - still_since);
            }
            // 4 frames = one tick at 240 fps.
            if i >= 4 {
                most_per_tick = most_per_tick.max(n - frames[i - 4].1);
            }
        }
        (longest_still, most_per_tick)
    }

    #[test]
    fn jittered_packets_are_played_one_move_per_tick() {
        // Messages every 1/30 s, each delayed 50 ms ± 20 ms (a deterministic spread).
        let mut rng = crate::SplitMix64::new(7);
        let jitter: Vec<f64> = (0..300).map(|_| rng.next_f64() * 0.04 - 0.02).collect();
        let frames = play(|k| k as f64 / 30.0 + TICK + 0.05 + jitter[k], 8.0, true);
        // Past the first second the track never stands still for more than a tick and a
        // half, and never plays more than two moves in a tick.
        let settled: Vec<_> = frames.iter().copied().filter(|f| f.0 > 1.0).collect();
        let (still, per_tick) = steadiness(&settled, 470);
        assert!(still <= 1.5 * TICK + 1e-9, "stood still {still} s");
        assert!(per_tick <= 2, "{per_tick} moves in a tick");
        // Played as they arrive, the same moves stand and jump.
        let raw = play(|k| k as f64 / 30.0 + TICK + 0.05 + jitter[k], 8.0, false);
        let settled: Vec<_> = raw.iter().copied().filter(|f| f.0 > 1.0).collect();
        let (still, per_tick) = steadiness(&settled, 470);
        assert!(
            still > 2.0 * TICK && per_tick >= 4,
            "{still} s, {per_tick} moves"
        );
    }

    #[test]
    fn a_late_packet_slows_the_track_instead_of_stopping_it() {
        // One message in 30 comes 60 ms late.
        let frames = play(
            |k| k as f64 / 30.0 + TICK + 0.03 + if k % 30 == 17 { 0.06 } else { 0.0 },
            8.0,
            true,
        );
        let settled: Vec<_> = frames.iter().copied().filter(|f| f.0 > 1.0).collect();
        let (_, per_tick) = steadiness(&settled, 470);
        assert!(per_tick <= 2, "{per_tick} moves in a tick");
    }

    #[test]
    fn the_wait_follows_the_spread_not_the_latency() {
        let settings = PlayoutSettings::default();
        let mut p = MovePlayout::default();
        // 200 ms of latency, no jitter: the buffer waits about nothing.
        for k in 0..120 {
            let now = k as f64 / 30.0 + 0.2;
            p.on_arrival(
                &settings,
                now,
                (2 * k + 1) as f64 * TICK,
                (2 * k + 2) as f64 * TICK,
            );
            let limit = p
                .advance(&settings, now, (2 * k + 2) as f64 * TICK)
                .unwrap();
            assert!(limit <= (2 * k + 2) as f64 * TICK + 1e-9);
        }
        let limit = p.clock().unwrap();
        let now = 119.0 / 30.0 + 0.2;
        // The clock plays the newest message within a tick of its arrival.
        assert!(
            (now - 0.2) - limit < 1.5 * TICK,
            "{} s behind",
            now - 0.2 - limit
        );
    }

    #[test]
    fn the_pace_is_one_in_a_steady_stream_and_nothing_while_moves_are_missing() {
        let settings = PlayoutSettings::default();
        let mut p = MovePlayout::default();
        assert_eq!(p.pace(), None);
        // Messages every 1/30 s, 50 ms late, for 3 s: then none for 1 s.
        let mut paces = Vec::new();
        for f in 0..(240 * 4) {
            let now = f as f64 / 240.0;
            let sent = ((now - 0.05) * 30.0).floor().min(89.0);
            if sent >= 0.0 && f % 8 == 0 {
                let made = (2.0 * sent + 2.0) * TICK;
                p.on_arrival(&settings, now, made - TICK, made);
            }
            let available = if sent >= 0.0 {
                (2.0 * sent + 2.0) * TICK
            } else {
                0.0
            };
            p.advance(&settings, now, available);
            paces.push((now, p.pace()));
        }
        let settled: Vec<f64> = paces
            .iter()
            .filter(|(t, _)| (1.5..2.9).contains(t))
            .filter_map(|(_, pace)| *pace)
            .collect();
        let mean = settled.iter().sum::<f64>() / settled.len() as f64;
        assert!((mean - 1.0).abs() < 0.02, "mean pace {mean}");
        // Once the buffer has run dry for a window, the clock (and the track) stands.
        assert_eq!(paces.last().unwrap().1, Some(0.0));
    }

    #[test]
    fn the_pace_is_bounded_so_a_fast_clock_gains_nothing_here() {
        let settings = PlayoutSettings::default();
        let mut p = MovePlayout::default();
        // A client claiming moves twice as fast as time passes, all arriving at once.
        let mut limit = 0.0;
        for f in 0..(240 * 4) {
            let now = f as f64 / 240.0;
            let made = 2.0 * now;
            p.on_arrival(&settings, now, made, made);
            limit = p.advance(&settings, now, made).unwrap();
        }
        // Four seconds: at most 1.5 × 4 s of moves played (plus the first arrival).
        assert!(limit <= settings.max_rate * 4.0 + 0.01, "played {limit} s");
    }

    #[test]
    fn a_stalls_backlog_is_played_out_at_once_not_over_seconds() {
        // Messages every 1/30 s, 50 ms late; the link stalls 1.5 s from t = 3 s, then
        // everything held back arrives together.
        let arrival = |k: usize| {
            let sent = k as f64 / 30.0 + TICK;
            let arrive = sent + 0.05;
            if (3.0..4.5).contains(&sent) {
                4.55
            } else {
                arrive
            }
        };
        let frames = play(arrival, 8.0, true);
        // Half a second after the backlog arrived, the track plays moves within the buffer's
        // longest wait of when they arrived (two moves a message).
        let at = |t: f64| frames.iter().find(|f| f.0 >= t).unwrap().1;
        let arrived_by = |t: f64| (0..).take_while(|&k| arrival(k) <= t).count() * 2;
        let s = PlayoutSettings::default();
        for t in [5.05, 5.5, 6.0] {
            let behind = (arrived_by(t) - at(t)) as f64 * TICK;
            assert!(
                behind <= s.max_wait + 2.0 * TICK,
                "{behind} s behind at {t} s"
            );
        }
        // At `max_rate` alone the 1.5-s backlog would take three seconds.
        let behind_at_rate = 1.5 - (5.05 - 4.55) * (s.max_rate - 1.0);
        assert!(behind_at_rate > 1.0);
    }

    #[test]
    fn the_arrival_spread_is_the_links_not_a_stalls() {
        let mut spread = ArrivalSpread::default();
        // Messages every 1/30 s, each 250 ms ± 125 ms late (uniform, deterministic).
        let mut rng = crate::SplitMix64::new(3);
        for k in 0..300 {
            let made = k as f64 / 30.0;
            spread.record(
                made + 0.25 + (rng.next_f64() * 2.0 - 1.0) * 0.125,
                made,
                2.0,
            );
        }
        let up = spread.upper_spread().unwrap();
        assert!((0.11..=0.135).contains(&up), "{up}");
        // A 1-s stall, its backlog (three messages read in one frame), then the link as
        // before: the stall does not widen it.
        for k in 0..3 {
            spread.record(11.3, 10.0 + 0.5 * f64::from(k), 2.0);
        }
        for k in 0..45 {
            let made = 11.05 + f64::from(k) / 30.0;
            spread.record(
                made + 0.25 + (rng.next_f64() * 2.0 - 1.0) * 0.125,
                made,
                2.0,
            );
        }
        let after = spread.upper_spread().unwrap();
        assert!(after <= 0.135, "{up} then {after}");
    }

    #[test]
    fn settings_out_of_range_are_named() {
        let bad = PlayoutSettings {
            quantile: f64::NAN,
            ..Default::default()
        };
        let err = bad.validate().unwrap_err();
        assert!(err.to_string().contains("quantile"), "{err}");
        for (name, bad) in [
            (
                "max_guess",
                PlayoutSettings {
                    max_guess: -0.1,
                    ..Default::default()
                },
            ),
            (
                "guess_ease",
                PlayoutSettings {
                    guess_ease: f64::NAN,
                    ..Default::default()
                },
            ),
        ] {
            let err = bad.validate().unwrap_err();
            assert!(err.to_string().contains(name), "{err}");
        }
        assert!(PlayoutSettings::default().validate().is_ok());
    }
}
