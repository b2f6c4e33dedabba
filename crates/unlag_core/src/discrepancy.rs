//! Speed-hack detection and resolution by time discrepancy (seed 002; UE's
//! `ProcessClientTimeStampForTimeDiscrepancy`).
//!
//! Each move claims `dt` seconds of client time. Over a session the claims must add up to the
//! server's own elapsed time; a client whose clock runs fast (a speed hack) claims more. The
//! server keeps the *excess*: Σ claimed − Σ elapsed between moves.
//!
//! - Network jitter moves the excess up and down by a few tens of milliseconds; a stall pushes it
//!   down (no moves arrive) and the burst that follows brings it back. The excess is therefore
//!   measured against the fastest arrival of the first [`TimeDiscrepancySettings::anchor_time`],
//!   not against the first move alone, which may have been a slow one; the reference moves by at
//!   most [`TimeDiscrepancySettings::anchor_slack`], so a cheater cannot hide in it, plus the
//!   span of the server frame that read the first moves ([`TimeDiscrepancy::note_read_span`]):
//!   a server reads what came once a frame, and a slow listen host's frame (a 250-ms hitch)
//!   stamps a packet that came at its start that much late. The server's own frames are its
//!   evidence, which no client can stretch. Plus what the link's jitter lets a first arrival
//!   be slow by ([`TimeDiscrepancy::note_link_jitter`], at most [`MAX_JITTER_SLACK`]), from
//!   the server's own pings: a client can fake it only by holding its pongs back, and gains
//!   it once.
//! - The moves processed at the first arrival claim time the client spent before the server
//!   could watch it (a client that sends once a frame sends a whole frame's moves together; at
//!   5 fps that alone is 0.2 s). Up to `anchor_time` of it is not counted: forgiven once, it
//!   buys no speed.
//! - It may not stay below `min_time_margin`: a client cannot bank time by pausing and then
//!   spend it running fast. A stall's credit may be spent only by the moves that arrive within
//!   [`TimeDiscrepancySettings::catch_up_window`] of the first arrival after it: the backlog an
//!   honest client sends at once when its link comes back (a burst of losses of any length).
//!   Credit older than that is cut to `min_time_margin`; the backlog itself brings no more
//!   movement than the time that really passed.
//! - Moves count in their order, each at its arrival or its predecessor's, whichever is later:
//!   a move cannot run before the one ahead of it came, and time that went back and forward
//!   again would count twice (a client sending its moves out of order would earn time).
//! - Honest clocks drift by parts per million; `drift_allowance` forgives a small rate.
//! - Above `max_time_margin` the client is flagged and *resolution* starts: each following move
//!   is charged `resolution_rate × dt` of its time until the excess is paid back, so it moves
//!   less on the server than it claims and is corrected. Over any span a cheater gains at most
//!   `max_time_margin + anchor_slack + drift_allowance × span` of movement, plus the first
//!   arrival's forgiven time (at most `anchor_time`, once) and the slack the first frame's
//!   span and the link's jitter added (at most `anchor_time` and [`MAX_JITTER_SLACK`], once).

use crate::settings::{Fields, SettingsError, Validate};
use serde::{Deserialize, Serialize};

/// How many of the link's measured round-trip jitters (lightyear's: half the mean deviation)
/// a one-way trip's delay may range over: uniform `±J` each way reads as a jitter of about
/// `J / 3` and ranges over `2J`; normal jitter of s.d. σ reads as about `0.56σ`, and 99.7 % of
/// its trips lie within `6σ`. See [`TimeDiscrepancy::note_link_jitter`].
pub const JITTER_RANGE: f64 = 6.0;

/// The most the link's jitter widens the reference's slack, seconds: a one-time allowance, as
/// the first arrival's forgiven time is (a client that fakes jitter by holding its pongs back
/// gains at most this much movement once, never a rate).
pub const MAX_JITTER_SLACK: f64 = 0.25;

/// Settings of the time-discrepancy check. On by default (UE ships it off).
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TimeDiscrepancySettings {
    /// Whether the check runs.
    pub enabled: bool,
    /// Excess of claimed time above which the client is flagged and charged, seconds (default
    /// 0.1: a 1.1× clock is caught in about a second, while honest jitter stays far below).
    pub max_time_margin: f64,
    /// Least excess kept beyond the catch-up window, seconds (default −1: a client that paused
    /// may afterwards claim up to a second more than elapses, no more).
    pub min_time_margin: f64,
    /// How long after a stall the moves that arrive may spend all of its credit, seconds of
    /// server time (default 1: the backlog of an honest client's link coming back arrives over
    /// a few of its frames and, for the moves lost again, a resend a round trip later). Within
    /// it a client cannot claim more than the time that passed either.
    pub catch_up_window: f64,
    /// Share of elapsed time forgiven while the excess is positive (default 0.001: ten times a
    /// poor quartz clock's error).
    pub drift_allowance: f64,
    /// Share of each move's time charged while resolving (default 1: no movement until paid).
    pub resolution_rate: f64,
    /// Seconds over which the fastest arrival sets the reference (default 0.5).
    pub anchor_time: f64,
    /// The most the reference may move from the first arrival, seconds (default 0.05: four
    /// standard deviations of 12 ms one-way jitter).
    pub anchor_slack: f64,
}

impl Default for TimeDiscrepancySettings {
    fn default() -> Self {
        Self {
            enabled: true,
            max_time_margin: 0.1,
            min_time_margin: -1.0,
            catch_up_window: 1.0,
            drift_allowance: 0.001,
            resolution_rate: 1.0,
            anchor_time: 0.5,
            anchor_slack: 0.05,
        }
    }
}

impl Validate for TimeDiscrepancySettings {
    fn validate(&self) -> Result<(), SettingsError> {
        let f = Fields::new("TimeDiscrepancySettings");
        f.within("max_time_margin", self.max_time_margin, 0.0, 10.0, "s")?;
        f.within("min_time_margin", self.min_time_margin, -60.0, 0.0, "s")?;
        f.within("catch_up_window", self.catch_up_window, 0.0, 60.0, "s")?;
        f.within("drift_allowance", self.drift_allowance, 0.0, 0.5, "")?;
        f.within("resolution_rate", self.resolution_rate, 0.0, 1.0, "")?;
        f.within("anchor_time", self.anchor_time, 0.0, 60.0, "s")?;
        f.within("anchor_slack", self.anchor_slack, 0.0, 1.0, "s")
    }
}

/// What the check decided for one move.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct MoveTime {
    /// Seconds the server simulates the move for (its claimed `dt`, less any charge).
    pub simulate_dt: f64,
    /// Whether this move started a resolution (the client was just flagged).
    pub flagged: bool,
    /// Whether a resolution is under way (corrections should be forced).
    pub resolving: bool,
}

/// The per-client time-discrepancy state (see the module docs).
#[derive(Clone, Debug)]
pub struct TimeDiscrepancy {
    settings: TimeDiscrepancySettings,
    /// Σ claimed − Σ elapsed since the anchor, before the anchor correction.
    raw: f64,
    /// The largest `raw` seen during the anchor time (the fastest arrival).
    anchor: f64,
    started_at: Option<f64>,
    last_server_time: Option<f64>,
    /// Server time at which the current catch-up window opened.
    window_start: Option<f64>,
    /// Claimed time forgiven at the first arrival so far, seconds.
    forgiven: f64,
    /// Server time from which the client could make moves (it got its character then),
    /// seconds, when known ([`TimeDiscrepancy::watch_from`]).
    watching_since: Option<f64>,
    /// The longest span of a server frame that read moves before the first was accounted,
    /// seconds (at most `anchor_time`): the anchor may move that much more.
    first_read_span: f64,
    /// What the link's jitter, as measured when the last move before the first accounted one
    /// was read, widens the anchor's slack by, seconds (at most [`MAX_JITTER_SLACK`]).
    jitter_slack: f64,
    resolving: bool,
    flags: u64,
}

impl TimeDiscrepancy {
    /// A fresh state.
    pub fn new(settings: TimeDiscrepancySettings) -> Self {
        Self {
            settings,
            raw: 0.0,
            anchor: 0.0,
            started_at: None,
            last_server_time: None,
            window_start: None,
            forgiven: 0.0,
            watching_since: None,
            first_read_span: 0.0,
            jitter_slack: 0.0,
            resolving: false,
            flags: 0,
        }
    }

    /// The settings in use.
    pub fn settings(&self) -> &TimeDiscrepancySettings {
        &self.settings
    }

    /// Claimed time in excess of elapsed time, seconds.
    pub fn excess(&self) -> f64 {
        self.raw - self.anchor
    }

    /// Whether a resolution is under way.
    pub fn resolving(&self) -> bool {
        self.resolving
    }

    /// How many times the client was flagged.
    pub fn flags(&self) -> u64 {
        self.flags
    }

    /// Claimed time of the first arrival's moves that was not counted, seconds (at most
    /// `anchor_time`).
    pub fn forgiven(&self) -> f64 {
        self.forgiven
    }

    /// Tells the check the server time (seconds, the clock of [`TimeDiscrepancy::on_move`])
    /// from which the client could make moves: when it got its character. The first arrival
    /// is forgiven up to the time since then (at least `anchor_time`, at most `anchor_time −
    /// min_time_margin`); without it, up to `anchor_time`.
    pub fn watch_from(&mut self, server_time: f64) {
        if server_time.is_finite() {
            self.watching_since = Some(server_time);
        }
    }

    /// Tells the check that the server read moves of this client in a frame that began `span`
    /// seconds before (they came at any moment of it, and are stamped at its end). Before the
    /// first move is accounted, the longest such span (at most `anchor_time`) widens the
    /// reference's slack: a first arrival read late makes every later one look early.
    pub fn note_read_span(&mut self, span: f64) {
        if self.started_at.is_none() && span.is_finite() {
            let span = span.clamp(0.0, self.settings.anchor_time.max(0.0));
            self.first_read_span = self.first_read_span.max(span);
        }
    }

    /// Tells the check the round-trip jitter the server measures on this client's link,
    /// seconds (lightyear's figure: half the mean deviation). Before the first move is
    /// accounted, [`JITTER_RANGE`] of it (at most [`MAX_JITTER_SLACK`]) widens the reference's
    /// slack: the first arrival sets the reference, and under jitter it may have been slow by
    /// most of the one-way delay's range, which makes every faster one after it look early
    /// (±125 ms each way, a jitter of about 42 ms: a first arrival 0.16 s slower than the ones
    /// after it flagged an honest client, where the slack is 0.05 s). The link's jitter is
    /// what the server measures with its own pings, sent on its clock; a client that holds
    /// its pongs back to fake it gains the widened slack once, as it could bundle moves into
    /// its first message, never as a rate.
    pub fn note_link_jitter(&mut self, jitter: f64) {
        if self.started_at.is_none() && jitter.is_finite() {
            self.jitter_slack = (JITTER_RANGE * jitter).clamp(0.0, MAX_JITTER_SLACK);
        }
    }

    /// Accounts for one move claiming `claimed_dt` seconds, processed when the server's clock
    /// read `server_now` seconds.
    pub fn on_move(&mut self, server_now: f64, claimed_dt: f64) -> MoveTime {
        let s = self.settings;
        let unchanged = MoveTime {
            simulate_dt: claimed_dt,
            flagged: false,
            resolving: false,
        };
        if !s.enabled || !claimed_dt.is_finite() || !server_now.is_finite() {
            return unchanged;
        }
        // Moves are accounted in their order, and a move could not run before the one ahead of
        // it had come: one that arrived earlier (its predecessor lost, then come in a later
        // packet's copy) counts as come with it. Taken at its own arrival, the time went back
        // and forward again, and the way forward counted twice as elapsed: a client sending
        // its moves out of order earned time it never waited, and a first arrival's moves that
        // came before its gap was filled were charged in full, not forgiven with it (an honest
        // client flagged at 10 % loss in bursts of 4).
        let last = self.last_server_time.unwrap_or(server_now);
        let server_now = server_now.max(last);
        let started = *self.started_at.get_or_insert(server_now);
        let elapsed = server_now - last;
        self.last_server_time = Some(server_now);
        // Credit left from before the window is cut at the margin before this move counts.
        if self
            .window_start
            .is_none_or(|start| server_now - start > s.catch_up_window)
        {
            self.window_start = Some(server_now);
            self.raw = self.excess().max(s.min_time_margin) + self.anchor;
        }
        // The first arrival's moves: time spent before the server watched, bounded by
        // `anchor_time` or, when the server knows since when the client could move, by the time
        // since then (a loss burst that holds the first moves back makes a first arrival
        // carry them all: at 20 % loss in bursts of 10 over 0.6 s of them, and the moves past
        // 0.5 s flagged an honest client). More than that time it cannot have spent, and no
        // more than a paused client may bank (`min_time_margin`) beyond `anchor_time`: moves
        // processed as they arrive (no playout) spend a first arrival at once.
        let most = s.anchor_time - s.min_time_margin.min(0.0);
        let budget = self.watching_since.map_or(s.anchor_time, |since| {
            (started - since).min(most).max(s.anchor_time)
        });
        let forgive = if server_now == started {
            claimed_dt.clamp(0.0, (budget - self.forgiven).max(0.0))
        } else {
            0.0
        };
        self.forgiven += forgive;
        self.raw += claimed_dt - forgive - elapsed;
        if server_now - started <= s.anchor_time {
            self.anchor = self
                .anchor
                .max(self.raw)
                .min(s.anchor_slack + self.first_read_span + self.jitter_slack);
        }
        let mut excess = self.excess();
        if excess > 0.0 {
            excess = (excess - elapsed * s.drift_allowance).max(0.0);
        }
        let mut flagged = false;
        if !self.resolving && excess > s.max_time_margin {
            self.resolving = true;
            self.flags += 1;
            flagged = true;
        }
        let mut simulate_dt = claimed_dt;
        if self.resolving {
            let charge = (claimed_dt * s.resolution_rate).min(excess.max(0.0));
            simulate_dt -= charge;
            excess -= charge;
            if excess <= 0.0 {
                self.resolving = false;
            }
        }
        self.raw = excess + self.anchor;
        MoveTime {
            simulate_dt,
            flagged,
            resolving: self.resolving || flagged,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SplitMix64;

    const DT: f64 = 1.0 / 60.0;

    /// Sends moves from a client whose clock runs `rate` times real time, over a link with
    /// `jitter` (s.d., seconds) and an optional stall `(start, length)`; returns the time of
    /// the first flag and the total simulated time.
    fn run(rate: f64, jitter: f64, stall: Option<(f64, f64)>, seconds: f64) -> (Option<f64>, f64) {
        let (flag, simulated, _) = run_bunched(rate, jitter, stall, seconds, 1);
        (flag, simulated)
    }

    /// [`run`] with moves sent `bunch` at a time, with the last of them (a client that sends
    /// once a frame, at `60 / bunch` fps).
    fn run_bunched(
        rate: f64,
        jitter: f64,
        stall: Option<(f64, f64)>,
        seconds: f64,
        bunch: usize,
    ) -> (Option<f64>, f64, f64) {
        let mut td = TimeDiscrepancy::new(TimeDiscrepancySettings::default());
        let mut rng = SplitMix64::new(11);
        // Arrival times of moves sent every DT of real time (in bunches: one message, one
        // delay), each claiming rate × DT.
        let mut delay = 0.0;
        let mut arrivals: Vec<f64> = (0..(seconds / DT) as usize)
            .map(|i| {
                let sent = ((i / bunch + 1) * bunch - 1) as f64 * DT;
                if i % bunch == 0 {
                    delay = 0.05 + (jitter * rng.next_normal()).max(-0.05);
                }
                let mut arrive = sent + delay;
                if let Some((start, len)) = stall
                    && sent >= start
                    && sent < start + len
                {
                    arrive = arrive.max(start + len + 0.05);
                }
                arrive
            })
            .collect();
        let (first_flag, simulated) = process_in_order(&mut td, &mut arrivals, rate);
        (first_flag, simulated, td.forgiven())
    }

    /// The server processes moves in order, each when it and all before it have arrived
    /// (`arrivals`, seconds, made so), at its next 1/60 s frame; each claims `rate × DT`.
    /// Returns when the client was first flagged (seconds of its moves) and the movement
    /// simulated, seconds.
    fn process_in_order(
        td: &mut TimeDiscrepancy,
        arrivals: &mut [f64],
        rate: f64,
    ) -> (Option<f64>, f64) {
        for i in 1..arrivals.len() {
            arrivals[i] = arrivals[i].max(arrivals[i - 1]);
        }
        let mut first_flag = None;
        let mut simulated = 0.0;
        for (i, arrive) in arrivals.iter().enumerate() {
            let frame = (arrive / DT).ceil() * DT;
            let t = td.on_move(frame, rate * DT);
            simulated += t.simulate_dt;
            if t.flagged && first_flag.is_none() {
                first_flag = Some(i as f64 * DT);
            }
        }
        (first_flag, simulated)
    }

    #[test]
    fn honest_clients_are_never_flagged() {
        for jitter in [0.0, 0.02, 0.04] {
            let (flag, simulated) = run(1.0, jitter, None, 60.0);
            assert_eq!(flag, None, "jitter {jitter}");
            assert!((simulated - 60.0).abs() < 0.02);
        }
        let (flag, _) = run(1.0, 0.02, Some((10.0, 0.5)), 30.0);
        assert_eq!(flag, None, "a 500 ms stall");
        let (flag, _) = run(1.0, 0.02, Some((0.1, 0.5)), 30.0);
        assert_eq!(flag, None, "a stall during the anchor time");
        // A clock 0.1 % fast is drift, not a hack.
        assert_eq!(run(1.001, 0.02, None, 120.0).0, None);
        // Clients at 20, 10, 6 and 4 fps send a frame's moves at once, the first of them too.
        for bunch in [3, 6, 10, 15] {
            let (flag, simulated, _) = run_bunched(1.0, 0.02, None, 30.0, bunch);
            assert_eq!(flag, None, "{} fps", 60 / bunch);
            assert!((simulated - 30.0).abs() < 0.02);
        }
    }

    #[test]
    fn speed_hacks_are_flagged_within_2s_and_gain_at_most_the_margin() {
        for rate in [1.1, 2.0] {
            let (flag, simulated, forgiven) = run_bunched(rate, 0.02, None, 10.0, 1);
            let flag = flag.expect("flagged");
            assert!(flag < 2.0, "{rate}× flagged at {flag} s");
            // Simulated time may exceed real time by at most what the settings allow.
            let real = 10.0;
            let s = TimeDiscrepancySettings::default();
            let allowed = s.max_time_margin + s.anchor_slack + s.drift_allowance * real;
            // The first arrival's moves are forgiven: what came in before the server's first
            // frame, a message or two.
            assert!(forgiven <= 2.0 * rate * DT + 1e-9, "{forgiven} s forgiven");
            assert!(
                simulated - forgiven <= real + allowed + 2.0 * DT,
                "{rate}×: {simulated} s simulated"
            );
        }
    }

    #[test]
    fn slow_speed_hackers_are_flagged_too_and_the_first_arrival_is_forgiven_once() {
        let s = TimeDiscrepancySettings::default();
        for bunch in [6, 15] {
            let (flag, simulated, forgiven) = run_bunched(1.1, 0.02, None, 10.0, bunch);
            let flag = flag.expect("flagged");
            assert!(flag < 2.5, "{} fps: flagged at {flag} s", 60 / bunch);
            // Beyond the first message, what the settings allow, plus a message in flight.
            let allowed = s.max_time_margin + s.anchor_slack + s.drift_allowance * 10.0;
            assert!(forgiven <= 1.1 * bunch as f64 * DT + 1e-9, "{forgiven}");
            assert!(
                simulated - forgiven <= 10.0 + allowed + 1.1 * bunch as f64 * DT,
                "{simulated} s simulated, {forgiven} s forgiven"
            );
        }
        // A first message of 2 s of moves: only `anchor_time` of it is forgiven.
        let mut td = TimeDiscrepancy::new(s);
        let flagged = (0..120).any(|_| td.on_move(0.0, DT).flagged);
        assert!(flagged, "the rest of the flood counts");
    }

    /// A client whose first moves a loss burst held back: its character came at 0 s, its
    /// first arrival at 0.8 s carries 0.75 s of moves (60 Hz), and it plays on at real time.
    /// Forgiven up to the 0.8 s since it could move, it is never flagged; held to the fixed
    /// `anchor_time` (0.5 s), the rest counted as excess and flagged it. A flood of 2 s of moves
    /// in that first arrival is still flagged (no client spends more time than passed), and
    /// 3 s after 10 s of silence (no more than a paused client may bank).
    #[test]
    fn a_first_arrival_held_back_by_losses_is_forgiven_what_time_had_passed() {
        let s = TimeDiscrepancySettings::default();
        let honest = |watch: bool| {
            let mut td = TimeDiscrepancy::new(s);
            if watch {
                td.watch_from(0.0);
            }
            let mut flagged = (0..45).any(|_| td.on_move(0.8, DT).flagged);
            for i in 1..=600 {
                flagged |= td.on_move(0.8 + f64::from(i) * DT, DT).flagged;
            }
            flagged
        };
        assert!(!honest(true), "flagged though it spent no more than passed");
        assert!(
            honest(false),
            "the fixed bound no longer flags it: the test shows nothing"
        );
        let mut td = TimeDiscrepancy::new(s);
        td.watch_from(0.0);
        assert!(
            (0..120).any(|_| td.on_move(0.8, DT).flagged),
            "2 s of moves at 0.8 s"
        );
        // Nor more than a paused client may bank: 3 s of moves after 10 s of silence.
        let mut td = TimeDiscrepancy::new(s);
        td.watch_from(0.0);
        assert!(
            (0..180).any(|_| td.on_move(10.0, DT).flagged),
            "3 s of moves at 10 s"
        );
    }

    /// The first arrival's gap is filled by a later packet's copy: 0.5 s of moves come at
    /// 0.9 s, and the 0.33 s of moves after them had come at 0.85 s, waiting for the gap.
    /// They are all the first arrival's (none could run before the gap was filled), forgiven
    /// with it up to the 0.9 s since the client got its character: not flagged. (Taken at
    /// their own arrival, before the first processed one, they were charged in full.)
    #[test]
    fn moves_that_came_before_their_gap_was_filled_count_as_come_with_it() {
        let mut td = TimeDiscrepancy::new(TimeDiscrepancySettings::default());
        td.watch_from(0.0);
        let mut flagged = (0..30).any(|_| td.on_move(0.9, DT).flagged);
        flagged |= (0..20).any(|_| td.on_move(0.85, DT).flagged);
        for i in 1..=600 {
            flagged |= td.on_move(0.9 + f64::from(i) * DT, DT).flagged;
        }
        assert!(!flagged, "an honest first arrival flagged");
        assert!(
            (td.forgiven() - 50.0 * DT).abs() < 1e-9,
            "{}",
            td.forgiven()
        );
    }

    /// A client 1.25x fast sends its moves in swapped pairs, the second of each 10 ms before
    /// the first: processed in order, each pair's time went back 10 ms and forward again,
    /// and counted the way forward twice. It earns nothing by it: flagged within 2 s, as in
    /// order.
    #[test]
    fn moves_sent_out_of_order_earn_no_time() {
        let mut td = TimeDiscrepancy::new(TimeDiscrepancySettings::default());
        let mut flagged_at = None;
        for pair in 0..300 {
            let t = 0.1 + f64::from(pair) * 2.0 * DT;
            for arrived in [t + 0.01, t] {
                if td.on_move(arrived, 1.25 * DT).flagged && flagged_at.is_none() {
                    flagged_at = Some(t);
                }
            }
        }
        let flagged_at = flagged_at.expect("a 1.25x clock hidden by swapping its moves");
        assert!(flagged_at < 2.1, "flagged at {flagged_at} s");
    }

    /// A 10-fps client's first frame of moves comes early in a 0.25-s frame of a listen host
    /// (a hitch) and is read at its end; its next frame, a 0.27-s hitch of its own, comes 0.1 s
    /// after that read. Measured from the late first read, the second looks 0.17 s early:
    /// with the first read's span noted, the reference takes it (not flagged); without, the
    /// client was flagged. A 1.1x clock behind the same first read is still flagged within
    /// 3 s.
    #[test]
    fn a_first_arrival_read_late_by_the_servers_frame_is_no_excess() {
        let run = |rate: f64, noted: bool| {
            let mut td = TimeDiscrepancy::new(TimeDiscrepancySettings::default());
            td.watch_from(0.0);
            if noted {
                td.note_read_span(0.25);
            }
            let mut flagged_at = None;
            let mut on = |td: &mut TimeDiscrepancy, t: f64, moves: usize| {
                for _ in 0..moves {
                    if td.on_move(t, rate * DT).flagged && flagged_at.is_none() {
                        flagged_at = Some(t);
                    }
                }
            };
            on(&mut td, 0.25, 6);
            on(&mut td, 0.35, 16);
            for k in 1..100 {
                on(&mut td, 0.35 + 0.1 * f64::from(k), 6);
            }
            flagged_at
        };
        assert_eq!(run(1.0, true), None, "an honest client flagged");
        assert!(run(1.0, false).is_some(), "the test shows nothing");
        let caught = run(1.1, true).expect("a 1.1x clock hidden by the host's frame");
        assert!(caught < 3.0, "flagged at {caught} s");
    }

    /// A client sending a move every frame at 60 fps over a link whose one-way delay is 250 ms
    /// ± 125 ms (uniform, per message), its first message 120 ms slower than the mean and the
    /// ones of the next 0.4 s faster and faster down to the fastest (a queue on the way
    /// draining; each arrives after the one before, so none is read with the first): every
    /// faster one after it looks early by up to 0.245 s. Returns when it was first flagged
    /// (seconds of its moves) and the movement simulated beyond the time that really passed
    /// between its first move and its last, seconds.
    fn run_jittered(rate: f64, jitter_noted: Option<f64>, seconds: f64) -> (Option<f64>, f64) {
        let mut td = TimeDiscrepancy::new(TimeDiscrepancySettings::default());
        td.watch_from(0.0);
        let mut rng = SplitMix64::new(5);
        let n = (seconds / DT) as usize;
        let mut arrivals: Vec<f64> = (0..n)
            .map(|i| {
                let sent = i as f64 * DT / rate;
                let delay = if sent < 0.4 {
                    0.37 - 0.6 * sent
                } else {
                    0.25 + 0.125 * (2.0 * rng.next_f64() - 1.0)
                };
                sent + delay
            })
            .collect();
        // Noted as the server reads the first message (only then does it count).
        if let Some(jitter) = jitter_noted {
            td.note_link_jitter(jitter);
        }
        let (flagged_at, simulated) = process_in_order(&mut td, &mut arrivals, rate);
        // The client's own real time from its first move to its last.
        let real = (n - 1) as f64 * DT / rate;
        (flagged_at, simulated - real)
    }

    #[test]
    fn a_first_arrival_slowed_by_the_links_jitter_is_no_excess() {
        // ±125 ms each way reads as a round-trip jitter of about 42 ms.
        let (flag, _) = run_jittered(1.0, Some(0.042), 60.0);
        assert_eq!(flag, None, "an honest client flagged");
        let (flag, _) = run_jittered(1.0, None, 60.0);
        assert!(flag.is_some(), "the test shows nothing");
        let s = TimeDiscrepancySettings::default();
        // A speed hack behind the same jitter is still caught, and gains no more than without
        // the jitter noted, plus the slack it widened once (the draining queue alone lets a 2x
        // clock gain 0.27 s before it is flagged, the jitter 0.25 more).
        for rate in [1.1, 1.25, 2.0] {
            let (flag, gained) = run_jittered(rate, Some(0.042), 20.0);
            let caught = flag.unwrap_or_else(|| panic!("a {rate}x clock hidden by the jitter"));
            assert!(caught < 3.0, "{rate}x flagged after {caught} s");
            let (_, without) = run_jittered(rate, None, 20.0);
            // To the millisecond: what a flag charges goes a move at a time.
            assert!(
                gained <= without + MAX_JITTER_SLACK + 1e-3,
                "{rate}x gained {gained} s, {without} s without the jitter"
            );
        }
        // Faked jitter widens it no further than the cap, and only before the first move.
        let mut td = TimeDiscrepancy::new(s);
        td.note_link_jitter(10.0);
        assert_eq!(td.jitter_slack, MAX_JITTER_SLACK);
        td.note_link_jitter(f64::NAN);
        td.note_link_jitter(-1.0);
        assert_eq!(td.jitter_slack, 0.0);
        td.note_link_jitter(0.01);
        td.on_move(0.0, DT);
        td.note_link_jitter(1.0);
        assert!((td.jitter_slack - 0.06).abs() < 1e-12);
    }

    #[test]
    fn pausing_cannot_bank_more_than_the_min_margin() {
        let s = TimeDiscrepancySettings::default();
        for spread in [false, true] {
            let mut td = TimeDiscrepancy::new(s);
            td.on_move(0.0, DT);
            // Ten seconds of silence, then 10 s of moves at once (the backlog), then a client
            // running at 2× to spend any bank left.
            let mut flagged_at = None;
            let mut claimed = DT;
            let mut simulated = DT;
            let mut t = 10.0;
            let backlog = if spread { 0 } else { 600 };
            for _ in 0..backlog {
                let m = td.on_move(t, DT);
                claimed += DT;
                simulated += m.simulate_dt;
                assert!(!m.flagged, "the backlog covers the silence");
            }
            for i in 0..600 {
                t += DT;
                let m = td.on_move(t, 2.0 * DT);
                claimed += 2.0 * DT;
                simulated += m.simulate_dt;
                if m.flagged && flagged_at.is_none() {
                    flagged_at = Some(i as f64 * DT);
                }
            }
            let flagged_at = flagged_at.expect("banked time spent running fast is caught");
            // At 2×, the bank lasts the catch-up window, then `−min_time_margin` (+ the margin).
            let lasts = s.catch_up_window + s.max_time_margin - s.min_time_margin;
            assert!(
                flagged_at <= lasts + 2.0 * DT,
                "flagged after {flagged_at} s"
            );
            // Beyond the time that passed, at most the bank and the margin were simulated.
            let real = t + DT;
            assert!(
                simulated
                    <= real + -s.min_time_margin + s.max_time_margin + s.catch_up_window + 1e-6,
                "{simulated} s simulated in {real} s, {claimed} s claimed"
            );
        }
    }

    #[test]
    fn an_honest_stall_of_any_length_is_not_held_against_its_backlog() {
        // The link is down 1.5, 3 or 8 s; the backlog arrives in one frame, or in three
        // messages up to 0.2 s apart (jitter), and play goes on honestly.
        for len in [1.5, 3.0, 8.0] {
            assert_eq!(run(1.0, 0.02, Some((5.0, len)), 20.0).0, None, "{len} s");
            let mut td = TimeDiscrepancy::new(TimeDiscrepancySettings::default());
            let mut t = 0.0;
            for _ in 0..60 {
                t += DT;
                assert!(!td.on_move(t, DT).flagged);
            }
            let stall_end = t + len;
            let moves = (len / DT) as usize;
            for i in 0..moves {
                let part = 3 * i / moves;
                assert!(
                    !td.on_move(stall_end + 0.1 * part as f64, DT).flagged,
                    "{len} s"
                );
            }
            t = stall_end + 0.2;
            for _ in 0..600 {
                t += DT;
                assert!(!td.on_move(t, DT).flagged, "{len} s, after");
            }
        }
    }

    #[test]
    fn disabled_and_garbage_change_nothing() {
        let mut td = TimeDiscrepancy::new(TimeDiscrepancySettings {
            enabled: false,
            ..Default::default()
        });
        assert_eq!(td.on_move(0.0, 5.0).simulate_dt, 5.0);
        let mut td = TimeDiscrepancy::new(TimeDiscrepancySettings::default());
        td.on_move(0.0, f64::NAN);
        td.on_move(f64::INFINITY, DT);
        assert_eq!(td.excess(), 0.0);
    }
}
