//! The server side: validate every move, simulate it with its own duration, compare with where
//! the client ended up, then acknowledge or correct; account for the client's clock (speed
//! hacks).

use crate::model::MovementModel;
use crate::protocol::{
    Correction, HELD_MOVES_KEPT, MAX_MOVES_PER_MESSAGE, MoveResponse, ServerMove, ServerMoveData,
    WireMove, decode_dt, decode_end,
};
use crate::settings::MovementSettings;
use crate::stats::{MovementStats, RejectReason};
use crate::world::{EmptyPhysics, with_collision_world, with_world_of};
use crate::{MovementState, SpeedHackDetected};
use bevy::platform::collections::HashMap;
use bevy::prelude::*;
use bevy_rapier3d::prelude::{RapierColliderHandle, ReadRapierContext};
use lightyear::prelude::server::ClientOf;
use lightyear::prelude::*;
use std::collections::{BTreeMap, VecDeque};
use unlag_core::{Seq16, TimeDiscrepancy};
use unlag_net::{LinkTraffic, NetClock, RemoteClientClock, SequencedChannel};

/// On the server, per predicted character: what the server knows of its client's moves.
#[derive(Component)]
pub struct ServerMovement<M: MovementModel> {
    /// Extended sequence number of the last move processed.
    last: u64,
    /// Moves received and not yet processed, by extended number: waiting for their turn in the
    /// playout, or beyond a gap for the missing ones; with their arrival's server time.
    held: BTreeMap<u64, (WireMove<M::Input>, f64)>,
    /// The client's move time at the end of the last processed move: the sum of the durations
    /// of every move processed, seconds.
    move_time: f64,
    /// Plays the moves out at the pace they were made.
    playout: unlag_core::MovePlayout,
    /// How late the messages arrive after their newest move was made (the up-link's spread).
    spread: unlag_core::ArrivalSpread,
    /// Whether `spread` took a message since its figures were last passed to the link's
    /// clock: they change only then, and each takes a sort of its window.
    spread_changed: bool,
    /// The move time at the end of each of the last processed moves: (extended number, move
    /// time), oldest first, at most 256 (a late message's newest move was made then).
    processed_ends: VecDeque<(u64, f64)>,
    /// Since when the move after `last` has been missing.
    gap_since: Option<f64>,
    /// End positions the client reported: (extended number of the move, end, correction ack
    /// when stated).
    reports: VecDeque<(u64, IVec3, Option<u8>)>,
    time: TimeDiscrepancy,
    last_correction_at: Option<f64>,
    /// The correction the client has not confirmed yet: (id, sent at).
    pending_correction: Option<(u8, f64)>,
    /// The newest move (extended number) of the first message that confirmed the pending
    /// correction, once one arrived (its moves may still wait in the playout): the correction
    /// is not lost and is not sent again, and the reports from that move on come from after
    /// it (the client stops stating the id once it knows the server heard it).
    confirmed_from: Option<u64>,
    /// The moves taken (first come), by extended number modulo [`HELD_MOVES_KEPT`]: what a
    /// message's oldest move may be written against ([`ServerMoveData::base`]). Allocated
    /// with the first move.
    taken: Vec<Option<(u64, M::Input, u16)>>,
    next_correction_id: u8,
    /// The last acknowledgement sent: (processed, received, at).
    last_ack_sent: Option<(Seq16, Seq16, f64)>,
    tokens: f64,
    tokens_at: Option<f64>,
    /// The input and length (seconds) of the last move played: what a guess goes on with.
    last_played: Option<(M::Input, f64)>,
    /// While the track runs on past the moves that have arrived: where it has got to.
    guess: Option<Guess<M>>,
    /// The shown place less the track's: what is left to ease out after a guess met the
    /// moves (see [`update_shown`]).
    offset: unlag_core::SpringOffset,
    /// Server time the offset was last eased, seconds.
    offset_at: Option<f64>,
    /// What the server shows of the character this frame (its `Transform`, the hit boxes
    /// recorded there and the proxy states sent from there).
    shown: Option<Shown>,
    _model: core::marker::PhantomData<fn() -> M>,
}

/// The track run on past the moves that have arrived, with the last move's input (see
/// [`PlayoutSettings::max_guess`](unlag_core::PlayoutSettings::max_guess)).
///
/// It is simulated in whole steps of the moves' own length ([`guess_step`]), and shown moved
/// on by its velocity up to [`EXTRAPOLATED`] past a step (further, by a part-step simulated
/// for the showing alone), so that its steps line up with the moves it stands for: a move that
/// comes with the guess's input and length, from the state the guess took that step from, is
/// that step, and is not simulated again ([`Guess::agreeing_step`]). On a link whose moves
/// arrive a hair after the playout clock wants them (the clock sits on the arrivals' quantile,
/// and a server reads arrivals once a tick), a guess runs one step in every other tick: taken
/// up by the move, it costs nothing more than the move whenever the player moved as guessed.
struct Guess<M: MovementModel> {
    /// The last move played when the guess started: it goes on from that move's state.
    base: u64,
    /// Where that state stood, metres (a state moved by the game restarts the guess).
    base_position: Vec3,
    /// The move time the guessed state stands at, seconds: whole steps from where it started.
    time: f64,
    /// The move time it was last shown at, seconds (its state moved on by its velocity for
    /// less than a step past `time`, [`Guess::position_at`]).
    shown_to: f64,
    /// The guessed state there.
    state: M::State,
    /// The input it goes on with.
    input: M::Input,
    /// The length of its steps, seconds ([`guess_step`]).
    step: f64,
    /// How fast it ran lately, move seconds per server second (0 once it has gone as far as
    /// it may).
    pace: f32,
    /// Server time it started, seconds.
    started: f64,
    /// The move time it runs no further than, seconds: where it started plus
    /// [`PlayoutSettings::max_guess`](unlag_core::PlayoutSettings::max_guess). Past it the
    /// track stood there, so that is where the moves that catch up with it take it from.
    until: f64,
    /// Whether every move played since the guess started was one of its steps: its input and
    /// length, from the state the step before ended in (the guess's own continuation). Then
    /// the guess run on to where the moves are stands where they do. False where the collision
    /// world changes from tick to tick (other characters block).
    agrees: bool,
    /// The played state the moves have reached while they agree, and its move time, seconds.
    from: (M::State, f64),
    /// The states after the steps the moves have not reached yet, with their move times,
    /// oldest first (at most [`AHEAD_KEPT`]).
    ahead: VecDeque<(f64, M::State)>,
}

/// How far past its state a guess is shown moved on by its velocity rather than simulated,
/// seconds: a move a hair late (the playout clock past its end by tens of microseconds) is
/// shown without a step; the velocity's drift over 2 ms is under a tenth of a millimetre.
const EXTRAPOLATED: f64 = 0.002;

/// Most guessed states a guess keeps for the moves to take up ([`Guess::agreeing_step`]): a
/// late move or two is the common case; a long stall's moves rarely agree for long.
const AHEAD_KEPT: usize = 8;

/// The length of a guess's steps, seconds, when the last move played lasted `last_dt`: as many
/// whole moves as fit in [`GUESS_STEP`] (one 60-Hz move, two 120-Hz ones), or [`GUESS_STEP`]
/// itself for moves longer than it (a 10-fps client's 0.1-s moves, guessed a tick at a time).
/// Only a step of one move can be a move the client then sends.
fn guess_step(last_dt: f64) -> f64 {
    if last_dt > 0.0 && last_dt <= GUESS_STEP * (1.0 + 1e-6) {
        last_dt * ((GUESS_STEP * (1.0 + 1e-6)) / last_dt).floor().max(1.0)
    } else {
        GUESS_STEP
    }
}

impl<M: MovementModel> Guess<M> {
    /// A guess from the played `state` at move time `time`, going on with `input` in steps of
    /// `step` seconds; `agrees`: whether the moves may take its steps up.
    fn new(
        (base, state, time): (u64, &M::State, f64),
        input: M::Input,
        step: f64,
        pace: f32,
        started: f64,
        until: f64,
        agrees: bool,
    ) -> Self {
        Self {
            base,
            base_position: M::position(state),
            time,
            shown_to: time,
            state: state.clone(),
            input,
            step,
            pace,
            started,
            until,
            agrees,
            from: (state.clone(), time),
            ahead: VecDeque::new(),
        }
    }

    /// Runs the guess on in whole steps up to move time `to` (no further than its `until`);
    /// returns the steps simulated. What is left short of `to` is shown by
    /// [`position_at`](Self::position_at).
    fn run_to(&mut self, model: &M, to: f64, world: &crate::CollisionWorld) -> u64 {
        // Run on past its end, a guess that stood would be taken from where it never was
        // shown: the moves that came after a long stall stepped the track by the difference
        // (0.9 m in one frame when a 1.6-s backlog came at once).
        let to = to.min(self.until);
        let mut steps = 0;
        while self.time + self.step <= to + 1e-9 {
            let (after, _) = model.simulate(&self.state, &self.input, self.step as f32, world);
            if M::is_valid(&after) {
                self.state = after;
            } else {
                // (A move simulated so keeps its own input's look: no longer the guess's.)
                self.disagree();
            }
            self.time += self.step;
            steps += 1;
            if self.agrees && self.time > self.from.1 && self.ahead.len() < AHEAD_KEPT {
                self.ahead.push_back((self.time, self.state.clone()));
            }
        }
        steps
    }

    /// Where the guess stands at move time `t` (no further than its `until`; less than a step
    /// past its state), metres, and the steps simulated to tell: its state moved on by its
    /// velocity for what `t` lies past it up to [`EXTRAPOLATED`], else simulated there (not
    /// kept: its next step starts from its state).
    fn position_at(&self, model: &M, t: f64, world: &crate::CollisionWorld) -> (Vec3, u64) {
        let past = (t.min(self.until) - self.time).max(0.0);
        if past <= EXTRAPOLATED {
            let velocity = M::velocity(&self.state).unwrap_or(Vec3::ZERO);
            return (M::position(&self.state) + velocity * past as f32, 0);
        }
        let (after, _) = model.simulate(&self.state, &self.input, past as f32, world);
        let at = if M::is_valid(&after) {
            &after
        } else {
            &self.state
        };
        (M::position(at), 1)
    }

    /// A move of `dt` seconds (`simulated` of them played) with `input` is about to be played
    /// from `state`: the state after it when the guess has simulated that step already, from
    /// there, with an input that moves alike ([`MovementModel::moved_alike`]). A move that is
    /// not such a step ends the agreement; [`Guess::played`] follows with where it ended.
    fn agreeing_step(
        &mut self,
        state: &M::State,
        input: &M::Input,
        (dt, simulated): (f64, f64),
    ) -> Option<M::State> {
        if !(self.agrees && dt == self.step && simulated == self.step && *state == self.from.0) {
            self.disagree();
            return None;
        }
        let end = self.from.1 + dt;
        while self.ahead.front().is_some_and(|(t, _)| *t < end) {
            self.ahead.pop_front();
        }
        let (_, guessed) = self.ahead.pop_front_if(|(t, _)| *t == end)?;
        let taken = M::moved_alike(&guessed, &self.input, input);
        if taken.is_none() {
            self.disagree();
        }
        taken
    }

    /// The move [`Guess::agreeing_step`] let through was played with `input` and ended in
    /// `state` (`taken`: the guess's own state): the guess agrees on while its step would have
    /// moved alike.
    fn played(&mut self, state: &M::State, input: &M::Input, taken: bool) {
        if !self.agrees {
            return;
        }
        if taken || M::moved_alike(state, input, &self.input).is_some() {
            self.from = (state.clone(), self.from.1 + self.step);
        } else {
            self.disagree();
        }
    }

    /// The moves no longer follow the guess.
    fn disagree(&mut self) {
        self.agrees = false;
        self.ahead.clear();
    }

    /// This guess, gone on as a new one from the played `state` at move time `time` with
    /// `input` in steps of `step` would be, up to `to` (its base, start and `until` are the
    /// caller's to set): when the moves were its own steps, `input` moves alike its own, and
    /// it did not stand at its `until` short of `to` (the new one would run on past it, and
    /// the old one's stand is what the track eases from). Else itself, unchanged.
    fn go_on_from(
        mut self,
        state: &M::State,
        time: f64,
        input: &M::Input,
        (step, to): (f64, f64),
    ) -> Result<Self, Self> {
        if !(self.stands_at(state, time) && to <= self.until && self.step == step) {
            return Err(self);
        }
        let Some(aimed) = M::moved_alike(&self.state, &self.input, input) else {
            return Err(self);
        };
        if self.time < time {
            // The moves went past it: it stands where they do.
            self.time = time;
            self.state = state.clone();
        } else {
            self.state = aimed;
        }
        if self.input != *input {
            // What it simulated ahead went with the old input.
            self.ahead.clear();
            self.input = input.clone();
        }
        Ok(self)
    }

    /// Whether the played `state`, at move time `time`, is where this guess's own
    /// continuation stands: every move since it started was one of its steps, and nothing has
    /// moved the state since (a correction adopted, the game).
    fn stands_at(&self, state: &M::State, time: f64) -> bool {
        self.agrees && self.from.1 == time && time <= self.until && self.from.0 == *state
    }
}

/// What the server shows of a client's character in one frame.
#[derive(Copy, Clone, Debug)]
struct Shown {
    /// The played state's position it was worked out for, metres (when the game has moved
    /// the character since, the state is shown as it is).
    real: Vec3,
    /// Metres.
    position: Vec3,
    rotation: Quat,
    /// Metres per second.
    velocity: Option<Vec3>,
}

/// The longest step a guess is simulated in, seconds: a server tick, as the moves it stands
/// for (see [`guess_step`]). (Steps of 0.05 s, a third of the cost of a long restart, shifted
/// the report's grid: one cell's starved frames went from 0.83 to 1.01 %.)
const GUESS_STEP: f64 = 1.0 / 60.0;

/// Least server time between two restarts of a guess from newer moves, seconds: moves that
/// trickle in late one at a time (a link whose latency just rose) would otherwise restart it,
/// and simulate it from the new moves up to the clock again, every tick.
const GUESS_RESTART_SPACING: f64 = 0.1;

/// How far the played state may have moved since what is shown was worked out for the shown
/// place still to follow it, metres: `accept_client_position` adopts a client's position
/// within the error limit (1.7 cm by default); a game's teleport is further.
const SHOWN_DRIFT: f32 = 0.05;

/// A guess further than this from the moves it met is not eased but dropped, metres: further
/// than a second's guess at a sprint can be wrong, so a teleport (a move by the game is
/// dropped in any case).
const SNAP_OFFSET: f32 = 10.0;

impl<M: MovementModel> ServerMovement<M> {
    fn new(settings: &MovementSettings<M>) -> Self {
        Self {
            last: 0,
            held: BTreeMap::new(),
            move_time: 0.0,
            playout: unlag_core::MovePlayout::default(),
            spread: unlag_core::ArrivalSpread::default(),
            spread_changed: false,
            processed_ends: VecDeque::new(),
            gap_since: None,
            reports: VecDeque::new(),
            time: TimeDiscrepancy::new(settings.time_discrepancy),
            last_correction_at: None,
            pending_correction: None,
            confirmed_from: None,
            taken: Vec::new(),
            next_correction_id: 1,
            last_ack_sent: None,
            tokens: settings.max_moves_per_second * 2.0,
            tokens_at: None,
            last_played: None,
            guess: None,
            offset: unlag_core::SpringOffset::default(),
            offset_at: None,
            shown: None,
            _model: core::marker::PhantomData,
        }
    }

    /// Notes a message that states the pending correction's id (its newest move `newest`,
    /// extended): the first such confirms it.
    fn note_confirmation(&mut self, newest: u64, correction_ack: Option<u8>) {
        if self.confirmed_from.is_none()
            && self
                .pending_correction
                .is_some_and(|(id, _)| Some(id) == correction_ack)
        {
            self.confirmed_from = Some(newest);
        }
    }

    /// Keeps the input and duration of each move of a message taken in, unless one came
    /// before under that number (the first is the one played): a later message may write its
    /// oldest move against any of them.
    fn keep_taken(&mut self, data: &ServerMoveData<M::Input>) {
        if self.taken.is_empty() {
            self.taken = vec![None; HELD_MOVES_KEPT];
        }
        for m in &data.moves {
            let Ok(n) = u64::try_from(self.extend(m.seq)) else {
                continue;
            };
            let slot = &mut self.taken[(n % HELD_MOVES_KEPT as u64) as usize];
            if slot.as_ref().is_none_or(|(k, _, _)| *k < n) {
                *slot = Some((n, m.input.clone(), m.dt));
            }
        }
    }

    /// The input and duration of move `seq` if it was taken and is still kept.
    fn taken_move(&self, seq: Seq16) -> Option<(M::Input, u16)> {
        let n = u64::try_from(self.extend(seq)).ok()?;
        match self.taken.get((n % HELD_MOVES_KEPT as u64) as usize)? {
            Some((k, input, dt)) if *k == n => Some((input.clone(), *dt)),
            _ => None,
        }
    }

    /// The last move processed.
    pub fn last_processed(&self) -> Seq16 {
        Seq16(self.last as u16)
    }

    /// Claimed client time in excess of elapsed server time, seconds (speed-hack accounting).
    pub fn time_excess(&self) -> f64 {
        self.time.excess()
    }

    /// How long this client's moves waited lately between arriving and being played out,
    /// seconds (an average; see [`unlag_core::playout`]).
    pub fn playout_wait(&self) -> f64 {
        self.playout.mean_wait()
    }

    /// Whether what the server shows of the character runs on by a guess, past the moves that
    /// have arrived (see [`PlayoutSettings::max_guess`](unlag_core::PlayoutSettings::max_guess)):
    /// a stall or a burst of losses on the client's up-link that the guess is covering.
    pub fn guessing(&self) -> bool {
        self.guess.is_some()
    }

    /// How fast the character's track on the server runs against the moves' own time, over
    /// the last [`unlag_core::PACE_WINDOW`]: 1 when its moves are played at the pace they were
    /// made, below or above while the playout's buffer grows or catches up (at most
    /// `max_rate`, though a backlog is played out faster), 0 once the track has waited that
    /// long for moves that have not arrived, and 0 while the server waits for a missing one.
    /// (This is the played track's pace; what the server shows runs on by a guess while it
    /// waits, see [`PlayoutSettings::max_guess`](unlag_core::PlayoutSettings::max_guess).)
    /// Without a playout (`enabled: false`) it is 1. The track moves at the simulated velocity
    /// times this: proxy states give that velocity, so a stalled player is drawn standing where
    /// the server has it (and its hit boxes are), not run on, and a catching-up one is drawn
    /// catching up.
    pub fn track_pace(&self, settings: &unlag_core::PlayoutSettings) -> f64 {
        if !settings.enabled {
            return 1.0;
        }
        let (Some(clock), Some(pace)) = (self.playout.clock(), self.playout.pace()) else {
            return 1.0;
        };
        // Waiting on a gap: the next move is missing, the clock has reached where it would
        // end (a missing move counts as long as the next one held), and the track stands.
        let on_a_gap = !self.held.contains_key(&(self.last + 1))
            && self
                .held
                .first_key_value()
                .is_some_and(|(_, (m, _))| clock - self.move_time >= decode_dt(m.dt) - 1e-9);
        if on_a_gap {
            return 0.0;
        }
        // A backlog played out at once runs faster than `max_rate` for a moment: a state that
        // said so would send an extrapolating proxy flying on at that speed once it is over.
        pace.clamp(0.0, settings.max_rate.max(0.0))
    }

    /// How much later than their median this client's messages arrived lately after their
    /// newest move was made, seconds (see [`unlag_core::ArrivalSpread::upper_spread`]).
    pub fn uplink_spread(&self) -> Option<f64> {
        self.spread.upper_spread()
    }

    /// How far apart this client sends its messages by its own move clock, seconds (see
    /// [`unlag_core::ArrivalSpread::send_spacing`]).
    pub fn send_spacing(&self) -> Option<f64> {
        self.spread.send_spacing()
    }

    /// The move time at the end of move number `n` (extended), if it is processed and kept or
    /// held (a missing one counted as long as `fallback`), seconds.
    fn end_time_of(&self, n: u64, fallback: f64) -> Option<f64> {
        if n > self.last {
            // Only as far as moves may be held (a message is never further ahead).
            return (n - self.last <= MAX_HELD_AHEAD).then(|| self.move_time_at(n, fallback));
        }
        let (first, _) = *self.processed_ends.front()?;
        let i = usize::try_from(n.checked_sub(first)?).ok()?;
        self.processed_ends.get(i).map(|(_, t)| *t)
    }

    /// The client's move time at the end of move number `n` (extended), from the durations of
    /// the moves held (a missing one is taken as long as `fallback`), seconds.
    fn move_time_at(&self, n: u64, fallback: f64) -> f64 {
        let mut t = self.move_time;
        for k in self.last + 1..=n {
            t += self.held.get(&k).map_or(fallback, |(m, _)| decode_dt(m.dt));
        }
        t
    }

    /// The newest move up to which every move has arrived: the last processed one and the
    /// run of held ones after it.
    fn received(&self) -> Seq16 {
        let mut k = self.last;
        while self.held.contains_key(&(k + 1)) {
            k += 1;
        }
        Seq16(k as u16)
    }

    /// The move time up to which moves have arrived in order: the end of the held run that
    /// follows the last processed move; a missing move counts as long as the next one held
    /// (the playout may reach it; it is then waited for, then guessed).
    fn available_move_time(&self) -> f64 {
        let mut t = self.move_time;
        let mut k = self.last + 1;
        if let Some((&first, (m, _))) = self.held.first_key_value()
            && first > k
        {
            t += decode_dt(m.dt);
            k = first;
        }
        while let Some((m, _)) = self.held.get(&k) {
            t += decode_dt(m.dt);
            k += 1;
        }
        t
    }

    /// Whether a speed hack is being resolved.
    pub fn resolving_speed_hack(&self) -> bool {
        self.time.resolving()
    }

    /// The extended number of `seq`, taken as the one nearest the last processed move.
    fn extend(&self, seq: Seq16) -> i64 {
        self.last as i64 + i64::from(seq.diff(self.last_processed()))
    }

    fn take_correction_id(&mut self) -> u8 {
        let id = self.next_correction_id;
        // 0 means "no correction applied yet" on the client.
        self.next_correction_id = self.next_correction_id.wrapping_add(1).max(1);
        id
    }

    fn refill(&mut self, now: f64, settings: &MovementSettings<M>) {
        let cap = settings.max_moves_per_second * 2.0;
        if let Some(at) = self.tokens_at {
            self.tokens =
                (self.tokens + (now - at).max(0.0) * settings.max_moves_per_second).min(cap);
        }
        self.tokens_at = Some(now);
    }
}

/// Counts a rejection with a rate-limited warning naming the client and the reason.
fn reject(stats: &mut MovementStats, reason: RejectReason, link: Entity, peer: Option<&RemoteId>) {
    unlag_net::warn_counted!(
        target: "unlag::movement",
        *stats.rejected_mut(reason),
        "rejected moves from client {:?} (link {link}): {reason:?}",
        peer.map(|p| p.0)
    );
}

/// Update: gives new predicted characters their server state and sends the client its initial
/// state (resent until the client uses it).
pub(crate) fn start_characters<M: MovementModel>(
    mut commands: Commands,
    settings: Res<MovementSettings<M>>,
    clock: Res<unlag_net::NetClock>,
    characters: Query<
        Entity,
        (
            With<MovementState<M>>,
            With<ControlledBy>,
            Without<ServerMovement<M>>,
        ),
    >,
) {
    for entity in &characters {
        let mut server = ServerMovement::<M>::new(&settings);
        // The client's first moves can date from no earlier than now.
        server.time.watch_from(clock.server_time);
        commands
            .entity(entity)
            .insert((server, unlag_net::MoveTrail::default()));
    }
}

/// The client links moves arrive on and corrections leave by.
type MoveLinks<'w, 's, M> = Query<
    'w,
    's,
    (
        Entity,
        Option<&'static RemoteId>,
        &'static mut MessageReceiver<ServerMove<M>>,
        &'static mut MessageSender<MoveResponse<M>>,
        &'static mut LinkTraffic,
        Option<&'static mut RemoteClientClock>,
    ),
    With<ClientOf>,
>;

/// The clients' characters of model `M`, as the server moves them.
type MovedCharacters<'w, 's, M> = Query<
    'w,
    's,
    (
        Entity,
        &'static ControlledBy,
        &'static mut MovementState<M>,
        &'static mut ServerMovement<M>,
        Option<&'static RapierColliderHandle>,
        Option<&'static mut unlag_net::MoveTrail>,
    ),
>;

/// One character's check this frame: what [`simulate_ready`] needs of it, apart from every
/// other character's, so the characters can be checked on several threads.
struct CheckJob<'a, M: MovementModel> {
    entity: Entity,
    owner: Entity,
    collider: Option<&'a RapierColliderHandle>,
    gap_wait: f64,
    state: Mut<'a, MovementState<M>>,
    server: Mut<'a, ServerMovement<M>>,
    trail: Option<Mut<'a, unlag_net::MoveTrail>>,
    /// Whether its client was just flagged for a speed hack.
    flagged: bool,
}

/// The [`MovementStats`] counts of simulating held moves, kept per share of the characters
/// and summed after.
#[derive(Default)]
struct SimCounts {
    moves_processed: u64,
    missing_moves_filled: u64,
    guess_steps: u64,
    guessed_moves_taken: u64,
}

impl SimCounts {
    fn add_to(self, stats: &mut MovementStats) {
        stats.moves_processed += self.moves_processed;
        stats.missing_moves_filled += self.missing_moves_filled;
        stats.guess_steps += self.guess_steps;
        stats.guessed_moves_taken += self.guessed_moves_taken;
    }
}

/// Update: takes in the moves clients sent, then simulates every character's moves in order,
/// compares, and acknowledges or corrects.
#[allow(clippy::too_many_arguments)]
pub(crate) fn process_moves<M: MovementModel>(
    model: Res<M>,
    settings: Res<MovementSettings<M>>,
    (clock, real): (Res<NetClock>, Res<Time<Real>>),
    (rapier, empty): (ReadRapierContext, Local<EmptyPhysics>),
    mut stats: ResMut<MovementStats>,
    mut hacks: MessageWriter<SpeedHackDetected>,
    mut links: MoveLinks<M>,
    mut characters: MovedCharacters<M>,
    (work, shares): (
        Option<Res<unlag_net::ServerWork>>,
        Option<Res<unlag_net::WorkShares>>,
    ),
) {
    let _work = work
        .as_deref()
        .map(|w| w.time(unlag_net::WorkPart::Movement));
    let now = clock.server_time;
    // What is read this frame came at any moment since the last frame began.
    let read = (now, real.delta_secs_f64());
    receive_moves(&settings, read, &mut links, &mut characters, &mut stats);
    // Each character's held moves are simulated against the same read-only collision world,
    // apart from every other character: a share of the characters per core, on Bevy's compute
    // pool (`for_each_in_shares`). Which thread ran which share changes nothing: the counts are
    // summed in share order, and what follows (acknowledging, correcting, sending) runs in
    // query order on this thread, as before.
    let mut jobs: Vec<_> = characters
        .iter_mut()
        .map(|(entity, controlled, state, server, collider, trail)| {
            let gap_wait = gap_wait(
                &settings,
                links.get(controlled.owner).ok().and_then(|l| l.5),
            );
            CheckJob {
                entity,
                owner: controlled.owner,
                collider,
                gap_wait,
                state,
                server,
                trail,
                flagged: false,
            }
        })
        .collect();
    let context = crate::world::rapier_context(&rapier);
    let (context, empty, model, set) = (context.as_ref(), &*empty, &*model, &*settings);
    let shares = shares.as_deref().copied();
    let counts =
        unlag_net::for_each_in_shares_at_most(shares, &mut jobs, |job, counts: &mut SimCounts| {
            let filter = set.query_filter(job.collider);
            job.flagged = with_world_of(context, empty, filter, |world| {
                simulate_ready(
                    model,
                    set,
                    (now, job.gap_wait),
                    &mut job.state.0,
                    &mut job.server,
                    job.trail.as_deref_mut(),
                    world,
                    counts,
                )
            });
        });
    for c in counts {
        c.add_to(&mut stats);
    }
    for job in jobs {
        let CheckJob {
            entity,
            owner,
            collider,
            mut state,
            mut server,
            flagged,
            ..
        } = job;
        let filter = settings.query_filter(collider);
        let Ok((link, peer, _, mut sender, mut traffic, remote)) = links.get_mut(owner) else {
            continue;
        };
        if let Some(remote) = remote {
            server.share_uplink(remote);
        }
        if flagged {
            let hack = SpeedHackDetected {
                character: entity,
                client: link,
                excess: server.time.excess(),
            };
            flag_speed_hack(hack, peer, &mut stats, &mut hacks);
        }
        let Some(client_end) = server.report_to_compare() else {
            continue;
        };
        let error = M::position(&state.0).distance(client_end);
        let wrong = error * error > settings.max_position_error_sq
            || (server.time.resolving() && settings.force_corrections_during_resolution);
        if !wrong {
            if settings.accept_client_position {
                let adopted = client_end.is_finite()
                    && with_world_of(context, empty, filter, |world| {
                        model.may_move_to(&state.0, client_end, world)
                    });
                // Adopted only where the body can go straight from our place (never through a
                // wall); else ours stands, within the error allowed, and nothing is sent.
                if adopted {
                    state.0 = M::with_position(&state.0, client_end);
                } else {
                    stats.client_positions_refused += 1;
                }
            }
            continue;
        }
        if !settings
            .throttle
            .allows(now, server.last_correction_at, error)
        {
            stats.corrections_throttled += 1;
            continue;
        }
        let corrected = (entity, &state.0);
        let (ack, id) = send_state(&mut server, now, corrected, &mut sender, &mut traffic);
        tracing::debug!(target: "unlag::movement", seq = ack.0, error, id, "correction sent");
        stats.corrections_sent += 1;
        stats.acks_sent += 1;
    }
}

/// Tells the game of a speed hack, counted with a rate-limited warning naming the client.
fn flag_speed_hack(
    hack: SpeedHackDetected,
    peer: Option<&RemoteId>,
    stats: &mut MovementStats,
    hacks: &mut MessageWriter<SpeedHackDetected>,
) {
    unlag_net::warn_counted!(
        target: "unlag::movement",
        stats.speed_hacks_flagged,
        "speed hack from client {:?} (link {}): {:.3} s of excess time",
        peer.map(|p| p.0),
        hack.client,
        hack.excess
    );
    hacks.write(hack);
}

/// Takes in the moves each client sent for the character its link controls: refused (counted,
/// with a rate-limited warning) when it controls none, when a message does not decode or holds
/// too many moves, or when its moves fail the checks of [`take_in`]; else queued, and the
/// newest move's arrival marked on the character's trail.
fn receive_moves<M: MovementModel>(
    settings: &MovementSettings<M>,
    (now, span): (f64, f64),
    links: &mut MoveLinks<M>,
    characters: &mut MovedCharacters<M>,
    stats: &mut MovementStats,
) {
    // One character of this model per client: the one its link controls.
    let by_owner: HashMap<Entity, Entity> =
        characters.iter().map(|(e, c, ..)| (c.owner, e)).collect();
    for (link, peer, mut receiver, _, _, remote) in links {
        let character = by_owner.get(&link).copied();
        // The link's jitter as the server's own pings measure it (0 before any came).
        let jitter = remote.as_deref().map_or(0.0, |r| r.jitter);
        for message in receiver.receive() {
            let Some(entity) = character else {
                reject(stats, RejectReason::NotControlled, link, peer);
                continue;
            };
            let (_, _, _, mut server, _, mut trail) = characters.get_mut(entity).unwrap();
            server.time.note_read_span(span);
            server.time.note_link_jitter(jitter);
            let data = match message.decode_with(|seq| server.taken_move(seq)) {
                Ok(data) => data,
                Err(_) => {
                    // An over-long list, and a base the server does not hold (a message late
                    // by seconds), are told apart from garbage for the counters.
                    let reason = if message
                        .announced_count()
                        .is_some_and(|n| n > MAX_MOVES_PER_MESSAGE)
                    {
                        RejectReason::TooManyMoves
                    } else if message
                        .base_seq()
                        .is_some_and(|b| server.taken_move(b).is_none())
                    {
                        RejectReason::UnknownBase
                    } else {
                        RejectReason::Malformed
                    };
                    reject(stats, reason, link, peer);
                    continue;
                }
            };
            match take_in(settings, now, &mut server, &data, stats) {
                Ok(()) => {
                    if let (Some(trail), Some(newest)) = (trail.as_deref_mut(), data.moves.last()) {
                        trail.set_arrived(newest.seq);
                    }
                }
                Err(reason) => reject(stats, reason, link, peer),
            }
        }
    }
}

impl<M: MovementModel> ServerMovement<M> {
    /// Gives the link's clock the up-link's spread as the move stream shows it, and how often
    /// the client really sends (the most of a frame the view checks allow it): evidence for
    /// the view checks, taken again only when a message came.
    fn share_uplink(&mut self, mut remote: Mut<RemoteClientClock>) {
        if !core::mem::take(&mut self.spread_changed) {
            return;
        }
        if let Some(spread) = self.uplink_spread() {
            remote.uplink_spread = spread;
        }
        if let Some(spacing) = self.send_spacing() {
            remote.move_spacing = spacing;
        }
    }

    /// Where the client reported its character after exactly the last processed move, to
    /// compare with ours, once it had applied our last correction (moves made before it did
    /// still start from the old state; a lost correction is sent again by `send_acks`, under
    /// a new id). Older reports are dropped.
    fn report_to_compare(&mut self) -> Option<Vec3> {
        let last = self.last;
        while self.reports.front().is_some_and(|r| r.0 < last) {
            self.reports.pop_front();
        }
        let &(n, end, correction_ack) = self.reports.front().filter(|r| r.0 == last)?;
        self.reports.pop_front();
        match self.pending_correction {
            // Confirmed by this report, or by an earlier message (the client stated the id
            // until it knew the server had heard it; its reports since are from after it).
            Some((id, _))
                if correction_ack == Some(id) || self.confirmed_from.is_some_and(|c| n >= c) =>
            {
                self.pending_correction = None;
            }
            Some(_) => return None,
            None => {}
        }
        Some(decode_end(end))
    }
}

/// Sends the client the server's whole state (its character `entity` in `state`) after the
/// last processed move, under a new correction id it must confirm; returns the acknowledged
/// move and the id.
fn send_state<M: MovementModel>(
    server: &mut ServerMovement<M>,
    now: f64,
    (entity, state): (Entity, &M::State),
    sender: &mut MessageSender<MoveResponse<M>>,
    traffic: &mut LinkTraffic,
) -> (Seq16, u8) {
    let id = server.take_correction_id();
    let ack = server.last_processed();
    server.last_correction_at = Some(now);
    server.pending_correction = Some((id, now));
    server.confirmed_from = None;
    let received = server.received();
    server.last_ack_sent = Some((ack, received, now));
    traffic.send_counted::<SequencedChannel, _>(
        sender,
        MoveResponse::<M> {
            entity,
            ack,
            received,
            correction: Some(Correction {
                id,
                state: state.clone(),
            }),
        },
    );
    (ack, id)
}

/// How long the server waits for the client to confirm a correction (or its initial state)
/// before sending it again: a round trip with margin for jitter (1 s while the RTT is unknown).
fn resend_after(remote: Option<&RemoteClientClock>) -> f64 {
    match remote {
        Some(r) if r.rtt > 0.0 => (1.5 * r.rtt + 4.0 * r.jitter + 0.1).max(0.2),
        _ => 1.0,
    }
}

/// How long a missing move is waited for, seconds: `max_gap_wait`, or as long as the client
/// takes to see it missing and send it again (a round trip, four jitters and two
/// acknowledgement intervals after it first sent it, as its resend rule goes) with a margin:
/// guessed, it is a correction.
fn gap_wait<M>(settings: &MovementSettings<M>, remote: Option<&RemoteClientClock>) -> f64 {
    let resend = remote.map_or(0.0, |r| {
        r.rtt.max(0.0) + 4.0 * r.jitter.max(0.0) + 2.0 * settings.ack_interval + 0.05
    });
    settings.max_gap_wait.max(resend.min(MAX_GAP_WAIT))
}

/// Furthest ahead of the last processed move that a move time is summed, moves (the most
/// `max_seq_gap` allows by default, and then some).
const MAX_HELD_AHEAD: u64 = 1024;

/// Longest a missing move is waited for, whatever the link, seconds.
const MAX_GAP_WAIT: f64 = 1.5;

/// How much older than the newest move the server has a message's newest move may be for the
/// message to count as a trip of the link that a newer one overtook, seconds of move time: a
/// ±125-ms link reorders messages 0.25 s apart; the client resends moves the server lacks
/// at least 0.2 s (two acknowledgement intervals) plus a round trip after it made them.
const OVERTAKEN_SPAN: f64 = 0.25;

/// Validates the moves of one message and keeps the new ones for [`simulate_ready`]. Nothing
/// changes on error.
fn take_in<M: MovementModel>(
    settings: &MovementSettings<M>,
    now: f64,
    server: &mut ServerMovement<M>,
    data: &ServerMoveData<M::Input>,
    stats: &mut MovementStats,
) -> Result<(), RejectReason> {
    let newest = server.extend(data.moves.last().expect("decoded messages have moves").seq);
    let last = server.last as i64;
    // Every message taken is a sample of the up-link, an overtaken one too (its moves are
    // here already): how late it came after its newest move was made. Not a resend of moves
    // the server lacked (they were made long before the newest it has): that is no trip.
    let sample = |server: &mut ServerMovement<M>| {
        // (Early on, a copy may name a move "before" the first: nothing to measure.)
        if newest <= 0 {
            return;
        }
        let newest_known = server
            .held
            .last_key_value()
            .map_or(server.last, |(k, _)| (*k).max(server.last));
        if let (Some(made), Some(known)) = (
            server.end_time_of(newest as u64, 0.0),
            server.end_time_of(newest_known, 0.0),
        ) && made >= known - OVERTAKEN_SPAN
        {
            server.spread.record(now, made, settings.playout.window);
            server.spread_changed = true;
        }
    };
    if newest <= last {
        // Every move was processed already: a late copy (normal), or a replay from long ago.
        stats.duplicate_moves += data.moves.len() as u64;
        return if newest < last - 256 {
            Err(RejectReason::Stale)
        } else {
            sample(server);
            server.note_confirmation(newest as u64, data.correction_ack);
            server.keep_taken(data);
            Ok(())
        };
    }
    if newest - last > i64::from(settings.max_seq_gap) {
        return Err(RejectReason::FarAhead);
    }
    let fresh: Vec<(u64, &WireMove<M::Input>)> = data
        .moves
        .iter()
        .map(|m| (server.extend(m.seq), m))
        .filter(|(n, _)| *n > last && !server.held.contains_key(&(*n as u64)))
        .map(|(n, m)| (n as u64, m))
        .collect();
    for (_, m) in &fresh {
        if m.dt == 0 || decode_dt(m.dt) > settings.max_move_delta {
            return Err(RejectReason::BadDelta);
        }
    }
    server.refill(now, settings);
    let cost = fresh.len() as f64;
    if cost > server.tokens {
        return Err(RejectReason::TooFrequent);
    }
    server.tokens -= cost;
    stats.duplicate_moves += (data.moves.len() - fresh.len()) as u64;
    tracing::trace!(target: "unlag::movement", newest, fresh = fresh.len(), "moves received");
    let oldest_fresh = fresh.first().map(|(n, m)| (*n, decode_dt(m.dt)));
    for (n, m) in fresh {
        server.held.insert(n, (m.clone(), now));
    }
    if let Some((n, dt)) = oldest_fresh {
        let made = server.move_time_at(n, dt);
        let newest_made = server.move_time_at(newest as u64, dt);
        server
            .playout
            .on_arrival(&settings.playout, now, made, newest_made);
    }
    server.note_confirmation(newest as u64, data.correction_ack);
    server.keep_taken(data);
    sample(server);
    if server.reports.len() >= 64 {
        server.reports.pop_front();
    }
    server
        .reports
        .push_back((newest as u64, data.end, data.correction_ack));
    Ok(())
}

/// Simulates, in order, every held move that follows the last processed one. A missing move is
/// waited for up to `gap_wait` seconds (it may come late, in the next message's redundant
/// copies or in its resend), then simulated with the next known move's input and duration.
/// Returns whether the client was just flagged for a speed hack.
#[allow(clippy::too_many_arguments)]
fn simulate_ready<M: MovementModel>(
    model: &M,
    settings: &MovementSettings<M>,
    (now, gap_wait): (f64, f64),
    state: &mut M::State,
    server: &mut ServerMovement<M>,
    mut trail: Option<&mut unlag_net::MoveTrail>,
    world: &crate::CollisionWorld,
    counts: &mut SimCounts,
) -> bool {
    let mut flagged = false;
    // Up to which move time the playout lets moves be processed now.
    let limit = if settings.playout.enabled {
        // The clock may run on past the moves that arrived, by as far as the track is guessed.
        let available = server.available_move_time() + settings.playout.max_guess;
        server
            .playout
            .advance(&settings.playout, now, available)
            .unwrap_or(f64::INFINITY)
    } else {
        f64::INFINITY
    };
    loop {
        let next = server.last + 1;
        let (m, arrived, fresh) = match server.held.first_key_value() {
            None => {
                server.gap_since = None;
                break;
            }
            Some((_, (first, _))) if server.move_time + decode_dt(first.dt) > limit + 1e-9 => {
                // Not its turn yet.
                break;
            }
            Some((&n, _)) if n == next => {
                server.gap_since = None;
                let (m, arrived) = server.held.remove(&n).expect("present");
                (m, arrived, true)
            }
            Some(_) => {
                let since = *server.gap_since.get_or_insert(now);
                if now - since < gap_wait {
                    break;
                }
                // Given up on the missing move: the next one's input is the best guess. It
                // costs the move rate like a move that came (a message naming a move far
                // ahead must not bring `max_seq_gap` moves for free): without the allowance,
                // the gap waits.
                server.refill(now, settings);
                if server.tokens < 1.0 {
                    break;
                }
                server.tokens -= 1.0;
                counts.missing_moves_filled += 1;
                let (_, (first, first_arrived)) =
                    server.held.first_key_value().expect("checked above");
                (first.clone(), *first_arrived, false)
            }
        };
        server.move_time += decode_dt(m.dt);
        if server.processed_ends.len() >= 256 {
            server.processed_ends.pop_front();
        }
        server.processed_ends.push_back((next, server.move_time));
        if fresh {
            server.playout.on_played(now, arrived);
        }
        // The client's clock is judged by when its moves arrived, not by when the playout
        // let them run: a catch-up after a stall is not a fast clock.
        let verdict = server.time.on_move(arrived, decode_dt(m.dt));
        flagged |= verdict.flagged;
        if verdict.simulate_dt > 0.0 {
            let dts = (decode_dt(m.dt), verdict.simulate_dt);
            // A move the guess has simulated already is that state (see `Guess`).
            let guessed = server
                .guess
                .as_mut()
                .and_then(|g| g.agreeing_step(state, &m.input, dts));
            let taken = guessed.is_some();
            if let Some(guessed) = guessed {
                *state = guessed;
                counts.guessed_moves_taken += 1;
            } else {
                let (after, _events) =
                    model.simulate(state, &m.input, verdict.simulate_dt as f32, world);
                // A model must never produce an invalid state; keep the last good one if it
                // does.
                if M::is_valid(&after) {
                    *state = after;
                }
            }
            if let Some(g) = server.guess.as_mut() {
                g.played(state, &m.input, taken);
            }
        } else if let Some(g) = server.guess.as_mut() {
            g.disagree();
        }
        server.last = next;
        server.last_played = Some((m.input, decode_dt(m.dt)));
        if let Some(trail) = trail.as_deref_mut() {
            trail.push(Seq16(next as u16), M::position(state));
        }
        counts.moves_processed += 1;
        tracing::trace!(target: "unlag::movement", seq = next as u16, dt = verdict.simulate_dt, "move processed");
    }
    counts.guess_steps += update_shown(model, settings, now, state, server, world);
    flagged
}

/// How a guess this frame came after the last one (see [`update_shown`]).
enum Restart<M: MovementModel> {
    /// It is the last one gone on, or the first.
    No,
    /// It starts from newer moves that fell short of the clock; the last one, to ease from.
    From(Guess<M>),
    /// The newer moves were the last one's own steps: it is that guess, which ran at `pace`.
    Same {
        /// The last guess's pace, move seconds per server second.
        pace: f32,
    },
}

/// Works out what the server shows of a client's character this frame ([`Shown`]); returns
/// the guess's steps simulated.
///
/// The track is the state after the last move played. While the playout waits for moves that
/// have not arrived (late, lost, or a hitch on the client), the track runs on from it with the
/// last move's input ([`MovementModel::guess_input`]) as far as the playout clock goes, up to
/// `max_guess` seconds, instead of standing still and then rushing through the backlog: the
/// others see the player, and hit it, where it most likely is. The moves are still simulated
/// exactly as they come; only what is shown differs. When the moves arrive, the shown place
/// goes on from where the guess was, as the guess moved, and bends onto them
/// ([`unlag_core::SpringOffset`] with time constant `guess_ease`): never a jump, nor a kink
/// in its speed. Shown velocities are the track's, times how fast it runs, plus the
/// offset's.
fn update_shown<M: MovementModel>(
    model: &M,
    settings: &MovementSettings<M>,
    now: f64,
    state: &M::State,
    server: &mut ServerMovement<M>,
    world: &crate::CollisionWorld,
) -> u64 {
    let playout = &settings.playout;
    let mut steps = 0;
    let real = M::position(state);
    let clock = if playout.enabled {
        server.playout.clock()
    } else {
        None
    };
    let elapsed = server.offset_at.map_or(0.0, |t| (now - t).max(0.0));
    server.offset_at = Some(now);
    let ease = playout.guess_ease as f32;
    server.offset.advance(elapsed as f32, ease);
    let velocity_of = |g: &Guess<M>| M::velocity(&g.state).unwrap_or(Vec3::ZERO) * g.pace;
    // Whether the track waits for moves: the next one to play is not here and the clock has
    // reached where it would end (one missing counts as long as the first held, or the last).
    let waiting = match (clock, &server.last_played) {
        (Some(clock), Some((_, last_dt))) if playout.max_guess > 0.0 => {
            let step = server
                .held
                .first_key_value()
                .map_or(*last_dt, |(_, (m, _))| decode_dt(m.dt));
            clock - server.move_time >= step - 1e-9
        }
        _ => false,
    };
    let mut previous = server.guess.take();
    if previous
        .as_ref()
        .is_some_and(|g| g.base == server.last && g.base_position != real)
    {
        // The game moved the character (a teleport): shown where it is now.
        previous = None;
        server.offset.clear();
    }
    let (guessed_at, pace) = match (waiting, clock, &server.last_played) {
        (true, Some(clock), Some((input, last_dt))) => {
            // How fast the guess runs: as the clock does (not faster than `max_rate`).
            let clock_pace = server
                .playout
                .pace()
                .unwrap_or(1.0)
                .clamp(0.0, playout.max_rate.max(0.0)) as f32;
            let until = server.move_time + playout.max_guess;
            let to = clock.min(until);
            let exhausted = clock >= until - 1e-9;
            let input = M::guess_input(input);
            let step = guess_step(*last_dt);
            let fresh = |input: M::Input| {
                let agrees = settings.take_guessed_moves
                    && settings.character_collisions == crate::CharacterCollisions::Ignore;
                let base = (server.last, state, server.move_time);
                Guess::new(base, input, step, clock_pace, now, until, agrees)
            };
            let (mut guess, restarted) = match previous {
                // No newer moves, or newer ones too soon after the last restart: it goes on.
                Some(g) if g.base == server.last || now - g.started < GUESS_RESTART_SPACING => {
                    (g, Restart::No)
                }
                Some(g) => match g.go_on_from(state, server.move_time, &input, (step, to)) {
                    // The new moves were the guess's own steps: a guess from them is this one,
                    // gone on.
                    Ok(mut g) => {
                        let pace = g.pace;
                        g.base = server.last;
                        g.base_position = real;
                        g.started = now;
                        g.until = until;
                        (g, Restart::Same { pace })
                    }
                    Err(old) => (fresh(input), Restart::From(old)),
                },
                None => (fresh(input), Restart::No),
            };
            steps += guess.run_to(model, to, world);
            // Past the guess the track stands.
            guess.pace = if exhausted { 0.0 } else { clock_pace };
            match restarted {
                Restart::No => {}
                Restart::From(mut old) => {
                    // New moves came and fell short of the clock: a new guess from them, shown
                    // going on from where the old one would be.
                    let at = to.max(old.shown_to);
                    steps += old.run_to(model, at, world);
                    let (was, old_steps) = old.position_at(model, at, world);
                    let (is, new_steps) = guess.position_at(model, to, world);
                    steps += old_steps + new_steps;
                    server
                        .offset
                        .add(was - is, velocity_of(&old) - velocity_of(&guess));
                }
                Restart::Same { pace } => {
                    // Where the old guess would be the new one is: only its pace changed.
                    let velocity = M::velocity(&guess.state).unwrap_or(Vec3::ZERO);
                    server
                        .offset
                        .add(Vec3::ZERO, velocity * pace - velocity_of(&guess));
                }
            }
            let pace = guess.pace;
            guess.shown_to = to;
            let (at, shown_steps) = guess.position_at(model, to, world);
            steps += shown_steps;
            server.guess = Some(guess);
            (Some(at), pace)
        }
        _ => {
            let track_pace = server.track_pace(playout) as f32;
            if let Some(mut old) = previous {
                // The moves caught up with the guess: shown going on from where it would be
                // (where they are, when they were its own steps), or where it was shown when
                // they fell short of that.
                let at = server.move_time.max(old.shown_to);
                let (position, velocity) = if old.time <= server.move_time
                    && at == server.move_time
                    && old.stands_at(state, server.move_time)
                {
                    (real, M::velocity(state).unwrap_or(Vec3::ZERO) * old.pace)
                } else {
                    steps += old.run_to(model, at, world);
                    let (was, shown_steps) = old.position_at(model, at, world);
                    steps += shown_steps;
                    (was, velocity_of(&old))
                };
                server.offset.add(
                    position - real,
                    velocity - M::velocity(state).unwrap_or(Vec3::ZERO) * track_pace,
                );
            }
            (None, track_pace)
        }
    };
    if server.offset.offset().length() > SNAP_OFFSET {
        server.offset.clear();
    }
    let track = server.guess.as_ref().map_or(state, |g| &g.state);
    server.shown = Some(Shown {
        real,
        position: guessed_at.unwrap_or(M::position(track)) + server.offset.offset(),
        rotation: M::rotation(track),
        velocity: M::velocity(track).map(|v| v * pace + server.offset.velocity()),
    });
    steps
}

/// Update (after processing): batched acknowledgements, and the initial state or a lost
/// correction sent again.
pub(crate) fn send_acks<M: MovementModel>(
    settings: Res<MovementSettings<M>>,
    clock: Res<NetClock>,
    mut stats: ResMut<MovementStats>,
    mut links: Query<
        (
            &mut MessageSender<MoveResponse<M>>,
            &mut LinkTraffic,
            Option<&RemoteClientClock>,
        ),
        With<ClientOf>,
    >,
    mut characters: Query<(
        Entity,
        &MovementState<M>,
        &mut ServerMovement<M>,
        &ControlledBy,
    )>,
    (work, packing_delay): (
        Option<Res<unlag_net::ServerWork>>,
        Option<Res<unlag_net::ServerAckDelay>>,
    ),
) {
    let _work = work
        .as_deref()
        .map(|w| w.time(unlag_net::WorkPart::Movement));
    let now = clock.server_time;
    let wait = packing_delay.map_or(0.0, |d| d.0);
    for (entity, state, mut server, controlled) in &mut characters {
        let Ok((mut sender, mut traffic, remote)) = links.get_mut(controlled.owner) else {
            continue;
        };
        let ack = server.last_processed();
        // Judged by arrival, not by the playout: a confirmation waiting its turn is not lost.
        let unconfirmed = server.confirmed_from.is_none()
            && server
                .pending_correction
                .is_none_or(|(_, sent)| now - sent >= resend_after(remote));
        let never_started = server.last_ack_sent.is_none();
        if never_started || (server.pending_correction.is_some() && unconfirmed) {
            // The initial state, or a correction that was lost: send the current state again.
            send_state(
                &mut server,
                now,
                (entity, &state.0),
                &mut sender,
                &mut traffic,
            );
            stats.acks_sent += 1;
            continue;
        }
        let received = server.received();
        // On a packed link (`unlag_net::ServerPacking`) a batch waits for a frame that sends
        // the client something anyway (its proxy states), up to the packing's delay: an
        // acknowledgement is no hurry (the client knows which moves arrived from the packet
        // headers' acknowledgements too), and alone it is a datagram of its own.
        let rides = !traffic.packed || traffic.queued_this_frame;
        let due = server.last_ack_sent.is_none_or(|(seq, got, at)| {
            (ack.is_newer_than(seq) || received.is_newer_than(got))
                && now - at >= settings.ack_interval
                && (rides || now - at >= settings.ack_interval + wait)
        });
        if due {
            tracing::trace!(target: "unlag::movement", seq = ack.0, received = received.0, "ack sent");
            server.last_ack_sent = Some((ack, received, now));
            traffic.send_counted::<SequencedChannel, _>(
                &mut sender,
                MoveResponse::<M> {
                    entity,
                    ack,
                    received,
                    correction: None,
                },
            );
            stats.acks_sent += 1;
        }
    }
}

/// PostUpdate: places server characters where the server shows them: a client's character on
/// its track (run on by a guess while its moves are late, see [`update_shown`]) with the
/// velocity the model gives times how fast the track runs; others at their state.
pub(crate) fn place_authoritative<M: MovementModel>(
    mut commands: Commands,
    settings: Res<MovementSettings<M>>,
    mut characters: Query<
        (
            Entity,
            &MovementState<M>,
            &mut Transform,
            Option<&mut unlag_net::SimulatedVelocity>,
            Option<&ServerMovement<M>>,
        ),
        Or<(With<ServerMovement<M>>, With<crate::ServerDriven>)>,
    >,
) {
    for (entity, state, mut transform, velocity, server) in &mut characters {
        // What the server shows (a guess while the player's moves are late), unless the game
        // moved the character since it was worked out (a client position adopted within
        // the error limit moves what is shown with it).
        let real = M::position(&state.0);
        let shown = server
            .and_then(|s| s.shown)
            .filter(|shown| shown.real.distance(real) <= SHOWN_DRIFT);
        let velocity_shown = if let Some(shown) = shown {
            transform.translation = shown.position + (real - shown.real);
            transform.rotation = shown.rotation;
            shown.velocity
        } else {
            transform.translation = M::position(&state.0);
            transform.rotation = M::rotation(&state.0);
            let pace = server.map_or(1.0, |s| s.track_pace(&settings.playout) as f32);
            M::velocity(&state.0).map(|v| v * pace)
        };
        match (velocity_shown, velocity) {
            (Some(v), Some(mut velocity)) => velocity.0 = v,
            (Some(v), None) => {
                commands
                    .entity(entity)
                    .insert(unlag_net::SimulatedVelocity(v));
            }
            (None, _) => {}
        }
    }
}

/// `FixedUpdate` on the server: moves every [`ServerDriven`](crate::ServerDriven) character one
/// tick with its [`NextMove`](crate::NextMove) input (the default input without one).
pub(crate) fn simulate_server_driven<M: MovementModel>(
    model: Res<M>,
    settings: Res<MovementSettings<M>>,
    time: Res<Time<Fixed>>,
    rapier: ReadRapierContext,
    empty: Local<EmptyPhysics>,
    work: Option<Res<unlag_net::ServerWork>>,
    mut characters: Query<
        (
            &mut MovementState<M>,
            Option<&crate::NextMove<M>>,
            Option<&RapierColliderHandle>,
        ),
        With<crate::ServerDriven>,
    >,
) {
    let _work = work
        .as_deref()
        .map(|w| w.time(unlag_net::WorkPart::Movement));
    let dt = time.timestep().as_secs_f32();
    for (mut state, next, collider) in &mut characters {
        let input = next.map(|n| n.0.clone()).unwrap_or_default();
        let filter = settings.query_filter(collider);
        let (end, _) = with_collision_world(&rapier, &empty, filter, |world| {
            model.simulate(&state.0, &input, dt, world)
        });
        state.0 = end;
    }
}
