//! The client side: simulate each move at once, save it, send it with redundancy, and on a
//! correction restore the server's state and replay the pending moves.

use crate::debug::CorrectionApplied;
use crate::model::MovementModel;
use crate::protocol::{
    MAX_MOVES_PER_MESSAGE, MoveResponse, ServerMove, ServerMoveData, WireMove, decode_dt,
    encode_dt, encode_end,
};
use crate::settings::MovementSettings;
use crate::stats::MovementStats;
use crate::world::{EmptyPhysics, with_collision_world};
use crate::{MovementEvent, MovementState, NextMove};
use bevy::prelude::*;
use bevy_rapier3d::prelude::{RapierColliderHandle, ReadRapierContext};
use lightyear::prelude::*;
use std::collections::VecDeque;
use unlag_core::{SavedMoves, Seq16, Sequenced, VisualOffset};
use unlag_net::{
    AutonomousProxy, LinkTraffic, NetClock, NetFrame, ServerAckLedger, UnreliableChannel,
};

/// A move the client made and the server has not acknowledged yet.
#[derive(Clone, Debug)]
pub struct SavedMove<M: MovementModel> {
    /// Sequence number.
    pub seq: Seq16,
    /// Duration, encoded (see [`decode_dt`]).
    pub dt: u16,
    /// Input.
    pub input: M::Input,
    /// State after the move.
    pub end: M::State,
    /// App time the move was first sent, seconds (infinite until then).
    pub sent_at: f64,
}

impl<M: MovementModel> SavedMove<M> {
    /// The move as it goes on the wire.
    pub fn wire(&self) -> WireMove<M::Input> {
        WireMove {
            seq: self.seq,
            dt: self.dt,
            input: self.input.clone(),
        }
    }
}

impl<M: MovementModel> Sequenced for SavedMove<M> {
    fn seq(&self) -> Seq16 {
        self.seq
    }
}

/// On the client's own character: the moves not yet acknowledged and what is needed to send,
/// correct and smooth them.
#[derive(Component)]
pub struct Prediction<M: MovementModel> {
    /// Moves not yet acknowledged, oldest first.
    pub saved: SavedMoves<SavedMove<M>>,
    next_seq: Seq16,
    last_sent: Option<Seq16>,
    last_sent_at: f64,
    /// The first new move of each of the last few messages, oldest first (for redundancy).
    recent_firsts: VecDeque<Seq16>,
    /// In a catch-up (more moves unreceived than one send holds): the move the next send
    /// starts from, the one after the last send's newest.
    catch_up_next: Option<Seq16>,
    last_ack: Seq16,
    /// The newest move up to which the server has every move (see [`MoveResponse::received`]).
    received: Seq16,
    /// The client frame ([`NetFrame`](unlag_net::NetFrame)) each recent send left in and the
    /// first and last move it carried, oldest first: once the server's transport acknowledged
    /// a frame's packets ([`ServerAckLedger`]), the server has its moves, a round trip and an
    /// `ack_interval` before its own report of them comes back.
    sends: VecDeque<SendRecord<M::Input>>,
    /// The newest move up to which the sends the server's transport acknowledged carried every
    /// move (it may be ahead of `received` by a round trip).
    acked: Seq16,
    /// Whether a send after the moves up to `acked` was acknowledged while one before it was
    /// not: that one was lost (or is late), with its moves unless another carried them.
    hole: bool,
    correction_ack: u8,
    /// Whether the server has heard `correction_ack`: a send that stated it was acknowledged
    /// by the server's transport. Until then every message states it.
    ack_heard: bool,
    /// The newest move of the newest send the server's transport acknowledged: a move the
    /// server holds, which the oldest move of a message is written against
    /// ([`ServerMoveData::base`]).
    base: Option<WireMove<M::Input>>,
    /// The visual offset hiding the last correction.
    pub offset: VisualOffset,
    /// Recent shown positions (App time, seconds; position), newest last: where the character
    /// is drawn when [`MovementSettings::show_prediction`] is off.
    shown: VecDeque<(f64, Vec3)>,
}

impl<M: MovementModel> Prediction<M> {
    fn new(capacity: usize, ack: Seq16) -> Self {
        Self {
            saved: SavedMoves::new(capacity),
            next_seq: ack.next(),
            last_sent: Some(ack),
            last_sent_at: f64::NEG_INFINITY,
            recent_firsts: VecDeque::new(),
            catch_up_next: None,
            last_ack: ack,
            received: ack,
            sends: VecDeque::new(),
            acked: ack,
            hole: false,
            correction_ack: 0,
            ack_heard: false,
            base: None,
            offset: VisualOffset::default(),
            shown: VecDeque::new(),
        }
    }

    /// The sequence number the next move will get.
    pub fn next_seq(&self) -> Seq16 {
        self.next_seq
    }

    /// The newest move up to which the server has every move, by its own report or by the
    /// acknowledgements of the packets that carried them.
    fn received_by_any(&self) -> Seq16 {
        if self.acked.is_newer_than(self.received) {
            self.acked
        } else {
            self.received
        }
    }

    /// Advances [`Prediction::acked`] over the sends whose packets the server's transport
    /// acknowledged (`ledger`), and forgets the sends it passed.
    fn note_acknowledged_sends(&mut self, ledger: &unlag_core::AckLedger) {
        let mut through = self.received_by_any();
        // Sends cover consecutive ranges, in order but overlapping (redundancy): an
        // acknowledged one that starts at or before the move after `through` extends it. One
        // pass in order takes them all unless a catch-up sent its older moves after newer ones.
        loop {
            let before = through;
            for &SendRecord {
                frame, first, last, ..
            } in &self.sends
            {
                if !first.is_newer_than(through.next())
                    && last.is_newer_than(through)
                    && ledger.frame_acknowledged(frame).is_some()
                {
                    through = last;
                }
            }
            if through == before {
                break;
            }
        }
        self.acked = through;
        // What the server is known to have taken: the newest move of each acknowledged send
        // (the base of the next messages), and the correction ack a send stated.
        for send in &self.sends {
            if ledger.frame_acknowledged(send.frame).is_none() {
                continue;
            }
            if self
                .base
                .as_ref()
                .is_none_or(|b| send.newest.seq.is_newer_than(b.seq))
            {
                self.base = Some(send.newest.clone());
            }
            if send.stated_ack == Some(self.correction_ack) {
                self.ack_heard = true;
            }
        }
        self.sends.retain(|s| s.last.is_newer_than(through));
        // An acknowledged send past the gap: the gap's moves went in sends that were all lost.
        self.hole = self.sends.iter().any(|s| {
            s.first.is_newer_than(through.next()) && ledger.frame_acknowledged(s.frame).is_some()
        });
    }
}

/// One send of moves, remembered until the server's transport acknowledges it.
struct SendRecord<I> {
    /// The client frame ([`NetFrame`]) it left in.
    frame: u64,
    /// The first and last move it carried.
    first: Seq16,
    last: Seq16,
    /// Its newest move (the last), as sent.
    newest: WireMove<I>,
    /// The correction ack it stated, if it did.
    stated_ack: Option<u8>,
}

/// Most recent sends [`Prediction`] remembers for their acknowledgements (about two seconds of
/// a client sending every 1/30 s): an older one unacknowledged was lost, and the server's own
/// report covers its moves.
const MAX_SENDS_KEPT: usize = 64;

/// PreUpdate: applies acknowledgements and corrections from the server.
#[allow(clippy::too_many_arguments)]
pub(crate) fn apply_responses<M: MovementModel>(
    mut commands: Commands,
    model: Res<M>,
    settings: Res<MovementSettings<M>>,
    rapier: ReadRapierContext,
    empty: Local<EmptyPhysics>,
    mut stats: ResMut<MovementStats>,
    mut applied: MessageWriter<CorrectionApplied>,
    mut link: Query<&mut MessageReceiver<MoveResponse<M>>, With<Client>>,
    mut characters: Query<
        (
            Option<&mut MovementState<M>>,
            Option<&mut Prediction<M>>,
            Option<&RapierColliderHandle>,
        ),
        With<AutonomousProxy>,
    >,
) {
    let Ok(mut receiver) = link.single_mut() else {
        return;
    };
    for response in receiver.receive() {
        let Ok((state, prediction, collider)) = characters.get_mut(response.entity) else {
            // Not (yet) known here as our own character: the server resends until applied.
            stats.responses_dropped += 1;
            continue;
        };
        let (Some(mut state), Some(mut prediction)) = (state, prediction) else {
            start_prediction(&mut commands, response, &settings, &mut stats);
            continue;
        };
        if response.received.is_newer_than(prediction.received) {
            prediction.received = response.received;
        }
        if !response.ack.is_newer_than(prediction.last_ack) && response.correction.is_none() {
            continue;
        }
        // What the client had predicted for the corrected move, before it is dropped.
        let predicted_at_ack = prediction
            .saved
            .pending()
            .find(|m| m.seq == response.ack)
            .map(|m| M::position(&m.end));
        if response.ack.is_newer_than(prediction.last_ack) {
            prediction.last_ack = response.ack;
            prediction.saved.acknowledge(response.ack);
            stats.acks_received += 1;
            tracing::trace!(target: "unlag::movement", seq = response.ack.0, "acked");
        }
        let Some(correction) = response.correction else {
            continue;
        };
        if correction.id == prediction.correction_ack || !M::is_valid(&correction.state) {
            stats.responses_dropped += 1;
            continue;
        }
        // Moves up to the corrected one are settled; replay the rest from the server's state.
        prediction.saved.acknowledge(response.ack);
        let before = M::position(&state.0);
        let server_state = correction.state.clone();
        let filter = settings.query_filter(collider);
        let (current, replayed) = with_collision_world(&rapier, &empty, filter, |world| {
            replay(&*model, &mut prediction, correction.state, world)
        });
        let after = M::position(&current);
        state.0 = current;
        prediction.correction_ack = correction.id;
        prediction.ack_heard = false;
        if !prediction
            .offset
            .on_correction(after - before, &settings.smoothing)
        {
            stats.snaps += 1;
        }
        stats.moves_replayed += replayed;
        // The server sends its state again when the client's confirmation is late (lost in a
        // burst): a copy that agrees with what was predicted moved nothing the player saw and
        // is not a correction (the server corrected nothing).
        let server_position = M::position(&server_state);
        let disagreement = predicted_at_ack.map_or((after - before).length_squared(), |p| {
            p.distance_squared(server_position)
        });
        if disagreement <= settings.max_position_error_sq {
            stats.states_agreed += 1;
            continue;
        }
        stats.corrections_received += 1;
        applied.write(CorrectionApplied {
            entity: response.entity,
            server_position,
            client_position: predicted_at_ack,
            replayed: replayed as u32,
        });
        tracing::debug!(target: "unlag::movement", seq = response.ack.0, id = correction.id, replayed, error = (after - before).length(), "corrected");
    }
}

/// The first response for our character: the server's initial state, from which prediction
/// starts (a response without a valid state is dropped, and the server sends it again).
fn start_prediction<M: MovementModel>(
    commands: &mut Commands,
    response: MoveResponse<M>,
    settings: &MovementSettings<M>,
    stats: &mut MovementStats,
) {
    if let Some(correction) = response.correction
        && M::is_valid(&correction.state)
    {
        let mut p = Prediction::<M>::new(settings.max_saved_moves, response.ack);
        p.correction_ack = correction.id;
        tracing::debug!(target: "unlag::movement", entity = ?response.entity, seq = response.ack.0, "initial state");
        commands
            .entity(response.entity)
            .insert((MovementState::<M>(correction.state), p));
    } else {
        stats.responses_dropped += 1;
    }
}

/// Replays every pending move of `prediction` from the server's `state` in `world`, each move
/// keeping where it now ends: the state after the last, and how many were replayed. Events of
/// replayed moves are dropped: they fired when the move was live.
fn replay<M: MovementModel>(
    model: &M,
    prediction: &mut Prediction<M>,
    state: M::State,
    world: &crate::CollisionWorld,
) -> (M::State, u64) {
    let mut current = state;
    let mut n = 0;
    for m in prediction.saved.pending_mut() {
        let (next, _events) = model.simulate(&current, &m.input, decode_dt(m.dt) as f32, world);
        m.end = next.clone();
        current = next;
        n += 1;
    }
    (current, n)
}

/// FixedUpdate: simulates this tick's move at once and saves it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn simulate_moves<M: MovementModel>(
    model: Res<M>,
    settings: Res<MovementSettings<M>>,
    time: Res<Time<Fixed>>,
    rapier: ReadRapierContext,
    empty: Local<EmptyPhysics>,
    mut stats: ResMut<MovementStats>,
    mut events: MessageWriter<MovementEvent>,
    #[cfg(feature = "cheats")] mut cheats: Option<ResMut<crate::cheats::Cheats>>,
    mut characters: Query<
        (
            Entity,
            &mut MovementState<M>,
            &mut Prediction<M>,
            Option<&NextMove<M>>,
            Option<&RapierColliderHandle>,
            Option<&mut unlag_net::MoveTrail>,
        ),
        With<AutonomousProxy>,
    >,
    mut commands: Commands,
) {
    #[cfg(feature = "cheats")]
    let dt =
        encode_dt(time.timestep().as_secs_f64() * cheats.as_deref().map_or(1.0, |c| c.clock_rate));
    #[cfg(not(feature = "cheats"))]
    let dt = encode_dt(time.timestep().as_secs_f64());
    for (entity, mut state, mut prediction, next, collider, trail) in &mut characters {
        #[cfg(feature = "cheats")]
        if let Some(offset) = cheats.as_deref_mut().and_then(|c| c.teleport.take()) {
            state.0 = M::with_position(&state.0, M::position(&state.0) + offset);
        }
        let input = next.map(|n| n.0.clone()).unwrap_or_default();
        let filter = settings.query_filter(collider);
        let (end, fired) = with_collision_world(&rapier, &empty, filter, |world| {
            model.simulate(&state.0, &input, decode_dt(dt) as f32, world)
        });
        let seq = prediction.next_seq;
        prediction.next_seq = seq.next();
        if prediction
            .saved
            .push(SavedMove {
                seq,
                dt,
                input,
                end: end.clone(),
                sent_at: f64::INFINITY,
            })
            .is_some()
        {
            stats.saved_moves_evicted += 1;
        }
        let position = M::position(&end);
        match trail {
            Some(mut trail) => trail.push(seq, position),
            None => {
                let mut trail = unlag_net::MoveTrail::default();
                trail.push(seq, position);
                commands.entity(entity).insert(trail);
            }
        }
        state.0 = end;
        stats.moves_simulated += 1;
        if fired != Default::default() {
            events.write(MovementEvent {
                entity,
                events: fired,
            });
        }
    }
}

/// Fewest messages after its own that repeat a move when the link loses independently (if
/// [`MovementSettings::redundancy`] asks for as many): with fewer repeats than the setting when
/// the measured loss is low, at least this many.
const MIN_REPEATS: usize = 2;

/// Most [`ServerMove`]s one send may split its moves into when more are pending than one holds
/// (on a lossy link, after a long burst of losses).
const MAX_CATCH_UP_MESSAGES: usize = 3;

/// PostUpdate: sends the moves made since the last send, with redundant older ones.
pub(crate) fn send_moves<M: MovementModel>(
    settings: Res<MovementSettings<M>>,
    time: Res<Time<Real>>,
    (clock, frame): (Option<Res<NetClock>>, Res<NetFrame>),
    mut stats: ResMut<MovementStats>,
    mut link: Query<
        (
            &mut MessageSender<ServerMove<M>>,
            &mut LinkTraffic,
            Option<&ServerAckLedger>,
        ),
        With<Client>,
    >,
    mut characters: Query<&mut Prediction<M>, With<AutonomousProxy>>,
) {
    let Ok((mut sender, mut traffic, acks)) = link.single_mut() else {
        return;
    };
    // The send interval of this link: none when it loses in runs (a burst of lost datagrams
    // then takes as few moves as it can).
    let now = time.elapsed_secs_f64();
    let runs = traffic.datagram_loss.continuation_once_met();
    let interval = if runs.is_some_and(|c| c >= settings.every_move_above_runs) {
        0.0
    } else {
        settings.send_interval
    };
    for mut prediction in &mut characters {
        let Some(newest) = prediction.saved.last().map(|m| m.seq) else {
            continue;
        };
        if prediction
            .last_sent
            .is_some_and(|s| !newest.is_newer_than(s))
        {
            continue;
        }
        if let Some(acks) = acks {
            prediction.note_acknowledged_sends(&acks.0);
        }
        // New moves, plus up to `redundancy` older pending ones; at most a message's worth.
        let first_new = prediction.last_sent.map_or(newest, |s| s.next());
        let pending: Vec<&SavedMove<M>> = prediction.saved.pending().collect();
        let new_count = pending
            .iter()
            .filter(|m| !first_new.is_newer_than(m.seq))
            .count();
        // Wait for the send interval, unless an ability changed (the server should see a jump
        // as early as the client did).
        let urgent = pending
            .windows(2)
            .rev()
            .take(new_count)
            .any(|w| M::urgent(&w[0].input, &w[1].input));
        if now - prediction.last_sent_at < interval - 1e-9 && !urgent {
            continue;
        }
        let range = choose_moves(
            &prediction,
            &pending,
            (&settings, clock.as_deref(), runs),
            (first_new, new_count),
            now,
        );
        // The correction ack until the server is known to have heard it.
        let correction_ack = (!prediction.ack_heard).then_some(prediction.correction_ack);
        let catch_up_next = pending.get(range.end).map(|m| m.seq);
        let carried = (pending[range.start].seq, pending[range.end - 1].seq);
        let newest_sent = pending[range.end - 1].wire();
        for chunk in chunks(&pending[range.clone()]) {
            let data = ServerMoveData {
                moves: chunk.iter().map(|m| m.wire()).collect(),
                end: encode_end(M::position(&chunk[chunk.len() - 1].end)),
                correction_ack,
                // (Left out by the encoder unless 1 to `MAX_BASE_AGE` moves older than the
                // chunk's newest.)
                base: prediction.base.clone(),
            };
            tracing::trace!(target: "unlag::movement", newest = newest.0, moves = chunk.len(), "sent");
            // Unordered: a late message still brings moves the server may be waiting for (it
            // orders moves itself); a sequenced channel would drop it.
            let message = ServerMove::<M>::encode(&data);
            stats.messages_with_base += u64::from(message.base_seq().is_some());
            stats.messages_stating_ack += u64::from(correction_ack.is_some());
            traffic.send_counted_whole::<UnreliableChannel, _>(&mut sender, message);
            stats.messages_sent += 1;
            stats.moves_sent += chunk.len() as u64;
        }
        for m in prediction.saved.pending_mut().rev().take(new_count) {
            m.sent_at = m.sent_at.min(now);
        }
        prediction.catch_up_next = catch_up_next;
        if prediction.sends.len() >= MAX_SENDS_KEPT {
            prediction.sends.pop_front();
        }
        prediction.sends.push_back(SendRecord {
            frame: frame.0,
            first: carried.0,
            last: carried.1,
            newest: newest_sent,
            stated_ack: correction_ack,
        });
        prediction.last_sent = Some(newest);
        prediction.recent_firsts.push_back(first_new);
        while prediction.recent_firsts.len() > settings.redundancy.max(1) {
            prediction.recent_firsts.pop_front();
        }
        prediction.last_sent_at = now;
    }
}

/// Which of the `pending` moves (oldest first) go in this send, `first_new` the first of the
/// `new_count` new ones: the new moves, plus those of the last `redundancy` messages, so that
/// many lost packets in a row cost nothing; on a link whose losses run longer than that
/// (`runs`: its datagrams' loss continuation, once met), after a send lost with every repeat,
/// or when the oldest move the server has not reported is overdue, every move it lacks. At
/// most [`MAX_CATCH_UP_MESSAGES`] messages' worth.
fn choose_moves<M: MovementModel>(
    prediction: &Prediction<M>,
    pending: &[&SavedMove<M>],
    (settings, clock, runs): (&MovementSettings<M>, Option<&NetClock>, Option<f64>),
    (first_new, new_count): (Seq16, usize),
    now: f64,
) -> core::ops::Range<usize> {
    // On a link that loses in runs every pending move goes again, so a burst of losses is
    // bridged by the first message that gets through; and after a send was lost with its
    // repeats (an acknowledged send past it), its moves go again at once.
    let miss =
        |repeats: usize| clock.map_or(0.0, |c| unlag_core::redundancy_miss(c.loss, runs, repeats));
    let lossy = miss(settings.redundancy) > settings.resend_all_above_miss || prediction.hole;
    // Otherwise as few repeats as keep the miss that unlikely, and never fewer than
    // `MIN_REPEATS`: the loss is measured over seconds and may read low.
    let redundancy = (settings.redundancy.min(MIN_REPEATS)..settings.redundancy)
        .find(|&r| miss(r) <= settings.resend_all_above_miss)
        .unwrap_or(settings.redundancy);
    let resend_from = prediction
        .recent_firsts
        .iter()
        .rev()
        .nth(redundancy.saturating_sub(1))
        .or(prediction.recent_firsts.front())
        .copied()
        .filter(|_| redundancy > 0)
        .unwrap_or(first_new);
    // Moves the server does not have yet, as far as the client knows: the newest, after
    // `received` (the server's report, or its transport's acknowledgements, a round trip and
    // an `ack_interval` sooner); and those the server has not reported.
    let after = |received: Seq16| {
        pending
            .iter()
            .rev()
            .take_while(|m| m.seq.is_newer_than(received))
            .count()
            .max(new_count)
    };
    let received = prediction.received_by_any();
    let unreceived = after(received);
    let unreported = after(prediction.received);
    // The oldest unreported move is overdue when its report should have come back by now:
    // lost beyond what redundancy bridges (a burst, whatever the loss measured downstream),
    // or taken by the transport and not by the movement server. Every unreported move goes
    // again then, whatever the acknowledgements said.
    let overdue_after = clock.map_or(1.0, |c| {
        c.rtt + 4.0 * c.jitter + 2.0 * settings.ack_interval
    });
    let overdue =
        unreported > 0 && pending[pending.len() - unreported].sent_at + overdue_after < now;
    let (received, unreceived) = if overdue {
        (prediction.received, unreported)
    } else {
        (received, unreceived)
    };
    let every_unreceived = lossy || overdue;
    let with_redundancy = if every_unreceived {
        unreceived
    } else {
        pending
            .iter()
            .rev()
            .take(unreceived)
            .filter(|m| !resend_from.is_newer_than(m.seq))
            .count()
            .max(new_count)
    };
    // More than one message holds (after a long burst of losses, or of lost acks): the
    // older moves go in messages of their own before the newest, at most
    // `MAX_CATCH_UP_MESSAGES` in all. When every unreceived move goes again and they are too
    // many, the oldest go first: the server plays moves in order and would have to guess the
    // ones it lacks, while the newest keep until the reports catch up.
    let take = with_redundancy.min(MAX_MOVES_PER_MESSAGE * MAX_CATCH_UP_MESSAGES);
    let start = if every_unreceived {
        let oldest = pending.len() - with_redundancy;
        // A backlog longer than one send goes on in the next send from where this one ended
        // (and from its oldest again once the newest went), rather than the oldest again and
        // again until the server's report of them comes back: after a burst of losses both
        // ways that report took seconds, the backlog with it, and the server's track of the
        // player (and the shots that wait for it) fell that far behind.
        prediction
            .catch_up_next
            .filter(|c| c.is_newer_than(received))
            .and_then(|c| pending[oldest..].iter().position(|m| m.seq == c))
            .map_or(oldest, |i| (oldest + i).min(pending.len() - take))
    } else {
        pending.len() - take
    };
    start..start + take
}

/// The `chosen` moves in messages of at most [`MAX_MOVES_PER_MESSAGE`], oldest first, the
/// newest message full.
fn chunks<'a, M: MovementModel>(chosen: &'a [&'a SavedMove<M>]) -> Vec<&'a [&'a SavedMove<M>]> {
    let mut chunks: Vec<&[&SavedMove<M>]> = chosen.rchunks(MAX_MOVES_PER_MESSAGE).collect();
    chunks.reverse();
    chunks
}

/// PostUpdate: places the client's own character where it is predicted, plus the visual offset
/// of the last correction — or, with [`MovementSettings::show_prediction`] off, where it was
/// one round trip ago.
pub(crate) fn place_predicted<M: MovementModel>(
    time: Res<Time>,
    settings: Res<MovementSettings<M>>,
    clock: Option<Res<NetClock>>,
    mut characters: Query<(&MovementState<M>, &mut Prediction<M>, &mut Transform)>,
) {
    let now = time.elapsed_secs_f64();
    let rtt = clock.map_or(0.0, |c| c.rtt).clamp(0.0, MAX_SHOWN_DELAY);
    for (state, mut prediction, mut transform) in &mut characters {
        let offset = prediction.offset.advance(time.delta_secs());
        let predicted = M::position(&state.0) + offset;
        prediction.shown.push_back((now, predicted));
        while prediction
            .shown
            .front()
            .is_some_and(|s| s.0 < now - MAX_SHOWN_DELAY - 0.1)
        {
            prediction.shown.pop_front();
        }
        transform.translation = if settings.show_prediction {
            predicted
        } else {
            position_at(&prediction.shown, now - rtt)
        };
        transform.rotation = M::rotation(&state.0);
    }
}

/// Longest delay [`MovementSettings::show_prediction`] off can show, seconds.
const MAX_SHOWN_DELAY: f64 = 2.0;

/// The position at time `t` in `shown` (oldest first), blended between the samples around it
/// (the oldest one before them all).
fn position_at(shown: &VecDeque<(f64, Vec3)>, t: f64) -> Vec3 {
    let after = shown.partition_point(|s| s.0 < t);
    match (after.checked_sub(1).map(|i| shown[i]), shown.get(after)) {
        (Some((t0, p0)), Some(&(t1, p1))) if t1 > t0 => {
            p0.lerp(p1, ((t - t0) / (t1 - t0)).clamp(0.0, 1.0) as f32)
        }
        (_, Some(&(_, p))) | (Some((_, p)), None) => p,
        (None, None) => Vec3::ZERO,
    }
}
