//! The client side: buffer each proxy's states and place it at view time.

use crate::SmoothingSettings;
use crate::protocol::{
    BASELINE_KEPT, ProxyDormancy, ProxyRate, ProxyResync, ProxyUpdates, StatesKind, TELEPORT_BIT,
    WireProxyState,
};
use bevy::prelude::*;
use lightyear::prelude::*;
use unlag_core::{
    CorrectionSmoothing, DelayController, ProxyState, Sample, SampleKind, Sent, SmoothingMode,
    StateBuffer, StateLoss, StateRejected, StateShown, StateStaleness, VisualOffset,
};
use unlag_net::{AutonomousProxy, NetClock};
use unlag_net::{ProxyDormant, RenderedPose};

/// On a client, per simulated proxy: its received states, its smoothing mode (switchable at
/// runtime) and how its frames were rendered.
#[derive(Component, Clone, Debug)]
pub struct ProxySmoothing {
    /// Received states, oldest first.
    pub buffer: StateBuffer,
    /// How the proxy is rendered.
    pub mode: SmoothingMode,
    /// Frames rendered.
    pub frames: u64,
    /// Frames held at the newest state for want of a newer one.
    pub held: u64,
    /// Frames moved on past the newest state for want of a newer one.
    pub extrapolated: u64,
    /// This proxy's interpolation delay, following its own update interval.
    pub delay: DelayController,
    /// `Extrapolate` mode: the newest state blended to, and the offset easing into it.
    blend: Option<(u32, VisualOffset)>,
    /// After a starved frame (held or extrapolated), the offset easing back onto the curve.
    ease: VisualOffset,
    last_kind: Option<SampleKind>,
    /// The state the last frame was held or extrapolated on, when it was starved.
    last_starved_on: Option<(u32, StarvedOn)>,
    /// The two states (ticks) the last frame was interpolated between, when it was: a late
    /// state landing between them changes the curve under the view (eased over, not jumped).
    last_pair: Option<(u32, u32)>,
    /// The view time the last frame was drawn at, server seconds.
    last_view: Option<f64>,
    /// This frame eased from the old curve after a late state (counted with the frame).
    eased_late: bool,
    /// This frame came back from starved frames too far from the curve to ease, and snapped
    /// (counted with the frame).
    snapped_back: bool,
    last_rendered: Option<Vec3>,
    /// The mode changed since the last frame (see [`ProxySmoothing::set_mode`]).
    switched: bool,
    /// Back from a dormant spell and not yet three states in: its delay is kept, not snapped.
    resumed: bool,
    /// Back at the server's nominal rate from a slower one, and its delay still longer than
    /// the shared one: it catches up at [`CATCH_UP_RATE`] rather than jump.
    catching_up: bool,
    /// States on the grid taken in since it started afresh (saturating): while fewer than
    /// three, its interval may still be unknown and nothing has been drawn from a curve that
    /// could jump. (Not the buffer's length: pruning shortens that later on.)
    taken: u32,
    /// Its update interval as last read ([`ProxySmoothing::update_interval`]), seconds: a starved
    /// spell's ease lasts longer for slow proxies ([`unlag_core::ease_time`]).
    interval: f64,
    /// States off the grid whose state on the grid before them has not come (oldest first, at
    /// most [`MAX_PARKED`]): buffered once it comes or one on the grid after them does
    /// ([`ProxySmoothing::take_state`]).
    parked: Vec<ProxyState>,
    /// The rate the server last told it is sent at ([`ProxyRate`]), kept through dormant
    /// spells (the server tells only changes).
    told: Option<ToldRate>,
}

/// A proxy's rate as the server told it ([`ProxyRate`]).
#[derive(Copy, Clone, Debug)]
struct ToldRate {
    /// The tick of its first state at this rate. The gap after it may be shorter than the
    /// rate's (a proxy's own rate puts its next state on the new rate's grid, as near as it
    /// comes); those after the next are the rate's.
    since: u32,
    /// Its interval, seconds; `None`: the server's nominal one.
    interval: Option<f64>,
    /// Whether its delay has reached its target since (until then it may rise at once as far
    /// as the view would pass the newest state: see `ProxySmoothing::next_delay`).
    settled: bool,
    /// Whether its states are sent twice ([`ProxyRate::repeated`]).
    repeated: bool,
}

/// How a starved frame drew the proxy from the state it was starved on.
#[derive(Copy, Clone, Debug, PartialEq)]
enum StarvedOn {
    /// Run on by its velocity, as far as the settings' extrapolation allows.
    RunOn,
    /// Held this many seconds past it (all the extrapolation it was allowed: none while the
    /// proxy has had a single state on its grid).
    HeldAt(f64),
}

/// The most states off the grid a proxy keeps waiting for the state on the grid before them.
const MAX_PARKED: usize = 8;

impl ProxySmoothing {
    fn new(settings: &SmoothingSettings) -> Self {
        Self {
            buffer: StateBuffer::new(settings.buffer_len),
            mode: settings.default_mode,
            frames: 0,
            held: 0,
            extrapolated: 0,
            delay: DelayController::new(settings.delay_policy, 0.1),
            blend: None,
            ease: VisualOffset::default(),
            last_kind: None,
            last_starved_on: None,
            last_pair: None,
            last_view: None,
            eased_late: false,
            snapped_back: false,
            last_rendered: None,
            switched: false,
            resumed: false,
            catching_up: false,
            taken: 0,
            interval: 0.0,
            parked: Vec::new(),
            told: None,
        }
    }

    /// Its update interval as last read, seconds: its own rate's (as the server told it, or as
    /// its states' gaps show it), or the server's nominal one while its own is not known yet or
    /// within a quarter of it; 0 before it was drawn.
    pub fn update_interval(&self) -> f64 {
        self.interval
    }

    /// Renders the proxy in `mode` from the next frame on, easing from where it is drawn now
    /// onto the new mode's path instead of jumping (the modes draw a moving proxy at different
    /// places: `Extrapolate` at the present, the others an interpolation delay behind).
    /// Switching to `Snap` jumps, as `Snap` does.
    pub fn set_mode(&mut self, mode: SmoothingMode) {
        if mode != self.mode {
            self.mode = mode;
            self.blend = None;
            self.switched = true;
        }
    }

    /// The pose on this proxy's curve at `view_time` (server seconds), with no ease, as a
    /// [`RenderedPose`] a shot can claim, and the rotation there: where a shot judged at that
    /// time (above the rewind cap, later than the view time drawn) is traced. `Extrapolate`
    /// proxies are taken on their `Hermite` curve (their easing blend belongs to the frame
    /// drawn). `None` without states.
    pub fn curve_pose(
        &self,
        view_time: f64,
        delay: f64,
        max_extrapolation: f64,
    ) -> Option<(RenderedPose, Quat)> {
        let mode = match self.mode {
            SmoothingMode::Extrapolate => SmoothingMode::Hermite,
            mode => mode,
        };
        let sample = self.buffer.sample(view_time, mode, max_extrapolation)?;
        let shown = |tick: u32| {
            self.buffer
                .get(tick)
                .map_or_else(StateShown::default, StateShown::from)
        };
        let pose = RenderedPose {
            from: sample.from,
            to: sample.to,
            alpha: sample.alpha,
            view_time,
            delay,
            position: sample.position,
            ease: Vec3::ZERO,
            flags: sample.flags,
            shown: [shown(sample.from), shown(sample.to)],
            kind: sample.kind,
            mode,
        };
        Some((pose, sample.rotation))
    }

    /// Share of frames held or extrapolated.
    pub fn starved_share(&self) -> f64 {
        if self.frames == 0 {
            0.0
        } else {
            (self.held + self.extrapolated) as f64 / self.frames as f64
        }
    }
}

/// How late proxy states arrive on this client: for each state, the client's estimate of the
/// present it can know (server time less the one-way trip) when the frame before the one that
/// read it started, minus the state's time, over the last 256 states. Its 99th percentile is the margin each proxy's delay keeps for late states,
/// measured rather than guessed from the RTT jitter.
///
/// It also follows how stale each proxy's newest state is, frame by frame, beyond its interval
/// ([`StateStaleness`]): what the delay must cover for frames not to starve when loss comes in
/// bursts.
#[derive(Resource, Clone, Debug, Default)]
pub struct ArrivalLateness {
    samples: std::collections::VecDeque<f64>,
    p99: Option<f64>,
    staleness: StateStaleness,
    state_loss: StateLoss,
}

impl ArrivalLateness {
    const WINDOW: usize = 256;
    /// Fewer samples than this and the jitter estimate is used instead.
    const MIN_SAMPLES: usize = 32;

    fn add(&mut self, lateness: f64) {
        if lateness.is_finite() {
            if self.samples.len() == Self::WINDOW {
                self.samples.pop_front();
            }
            self.samples.push_back(lateness);
            self.p99 = None;
        }
    }

    /// How much staler than their interval proxies' newest states were in all but `share`
    /// (0–1) of the recent proxy frames, seconds ([`StateStaleness::covering`]; `now` is the
    /// frame's time, seconds): a delay of a proxy's interval plus that would have starved no
    /// more of them.
    pub fn covering(&mut self, now: f64, share: f64) -> Option<f64> {
        self.staleness.covering(now, share)
    }

    /// Share (0–1) of the proxy states lost on the way here recently ([`StateLoss`]).
    pub fn state_loss(&self) -> f64 {
        self.state_loss.share()
    }

    /// How likely (0–1) a lost proxy state was to be followed by another lost one, recently
    /// ([`StateLoss::continuation`]); `None` until a few runs of them were seen.
    pub fn loss_continuation(&self) -> Option<f64> {
        self.state_loss.continuation()
    }

    /// The 99th percentile of lateness, seconds, once enough states arrived.
    pub fn p99(&mut self) -> Option<f64> {
        if self.samples.len() < Self::MIN_SAMPLES {
            return None;
        }
        if self.p99.is_none() {
            let mut v: Vec<f64> = self.samples.iter().copied().collect();
            v.sort_by(f64::total_cmp);
            let i = ((v.len() as f64 * 0.99).ceil() as usize).clamp(1, v.len()) - 1;
            self.p99 = Some(v[i]);
        }
        self.p99
    }
}

/// Counters of proxy smoothing on this client.
#[derive(Resource, Clone, Debug, Default, Reflect)]
#[reflect(Resource)]
pub struct SmoothingStats {
    /// States buffered.
    pub states_received: u64,
    /// States refused: invalid values.
    pub rejected_invalid: u64,
    /// States refused: duplicates.
    pub rejected_duplicate: u64,
    /// States refused: older than every buffered state.
    pub rejected_out_of_order: u64,
    /// States refused: from the far future.
    pub rejected_far_future: u64,
    /// States for entities this client does not know (yet).
    pub unknown_entity: u64,
    /// Proxy frames rendered.
    pub frames: u64,
    /// Proxy frames held for want of a newer state.
    pub held_frames: u64,
    /// Proxy frames extrapolated for want of a newer state.
    pub extrapolated_frames: u64,
    /// Times a late state landed between the two a proxy was being drawn between, and the
    /// proxy was eased from the old curve onto the new one rather than jump.
    pub late_eases: u64,
    /// Times a proxy came back from starved frames (held through a burst of losses) further
    /// from its curve than [`SmoothingSettings::teleport_distance`](crate::SmoothingSettings)
    /// and was snapped onto it in one frame, as a teleport is, rather than swept there.
    pub snapped_back: u64,
    /// Times a proxy went dormant (the server stopped sending it: not relevant to this client).
    pub dormant: u64,
    /// Times a dormant proxy was shown again, snapped to its first new state.
    pub woken: u64,
    /// States of a dormant proxy from before it went dormant, dropped (a late original or
    /// repeat: the proxy is not drawn from them).
    pub dropped_while_dormant: u64,
    /// Server side: copies of older states sent as trails to clients whose losses run in
    /// bursts ([`SmoothingSettings::trail_runs`](crate::SmoothingSettings::trail_runs)).
    pub trail_states_sent: u64,
    /// Server side: states of slow proxies sent between their grids' where their motion bent
    /// ([`SmoothingSettings::off_grid_error`](crate::SmoothingSettings::off_grid_error)),
    /// counted once per client each time one goes (each goes twice: at once, and with the
    /// repeat of the next state on the grid).
    pub off_grid_states_sent: u64,
    /// Server side: states sent as their differences from states the clients acknowledged
    /// ([`DeltaProxyState`](crate::DeltaProxyState)), counted once per client.
    pub delta_states_sent: u64,
    /// Server side: [`ProxyResync`](crate::ProxyResync)s received (a client lacked a delta's
    /// baseline and was sent full states again).
    pub resyncs_received: u64,
    /// Delta states received and decoded against a kept state (counted in
    /// `states_received` too when the buffer took them).
    pub delta_states_received: u64,
    /// Delta states dropped: their baseline was not kept here (the proxy's entity was not known
    /// yet when it came) or they did not fit it. Each asks the server for full states
    /// ([`ProxyResync`](crate::ProxyResync)).
    pub deltas_without_baseline: u64,
}

/// PreUpdate, before the states: proxies the server stopped sending go dormant (unless a state
/// newer than the notice came already): their states and drawn pose are forgotten, and they
/// are not placed until a newer state comes and its time is reached. (A game hides them while
/// they have [`ProxyDormant`]; the demo does.)
///
/// A notice can come in the same frame as the proxy's first states, before they made it a
/// smoothed proxy (a slow client reads a frame's worth of messages at once, and a pair can go
/// dormant a tick after its first state): it goes dormant all the same, so that those states
/// are never drawn from. Dropped, the notice left a proxy drawn with no state after its third,
/// and its staleness (seconds, growing) stretched every proxy's delay to 0.8 s.
pub(crate) fn receive_dormancy(
    mut commands: Commands,
    mut stats: ResMut<SmoothingStats>,
    mut link: Query<&mut MessageReceiver<ProxyDormancy>, With<Client>>,
    mut proxies: Proxies,
) {
    let Ok(mut receiver) = link.single_mut() else {
        return;
    };
    for notice in receiver.receive() {
        for entity in notice.entities {
            note_dormant(entity, notice.tick, &mut proxies, &mut commands, &mut stats);
        }
    }
}

/// The proxies a client's smoothing takes states and notices for.
type Proxies<'w, 's> = Query<
    'w,
    's,
    (
        Option<&'static mut ProxySmoothing>,
        Option<&'static mut ProxyDormant>,
    ),
    Without<AutonomousProxy>,
>;

/// Makes `entity` dormant since server tick `since` (a [`ProxyDormancy`] notice, or its
/// repeat in [`ProxyUpdates::asleep`]), unless a state newer than that came already or it is
/// dormant since then or later; counted in `stats`.
fn note_dormant(
    entity: Entity,
    since: u32,
    proxies: &mut Proxies,
    commands: &mut Commands,
    stats: &mut SmoothingStats,
) {
    let Ok((smoothing, dormant)) = proxies.get_mut(entity) else {
        stats.unknown_entity += 1;
        return;
    };
    let newer = smoothing
        .as_ref()
        .and_then(|s| s.buffer.newest())
        .is_some_and(|s| s.tick > since)
        || dormant.as_ref().is_some_and(|d| d.since_tick >= since);
    if newer {
        return;
    }
    let notice = ProxyDormant {
        since_tick: since,
        wakes_at: None,
    };
    match (smoothing, dormant) {
        (Some(mut smoothing), _) => {
            smoothing.go_dormant(&mut commands.entity(entity), notice, stats);
        }
        // Dormant before its first states were taken in: a later notice only moves the tick
        // its states are from before.
        (None, Some(mut dormant)) => *dormant = notice,
        (None, None) => {
            stats.dormant += 1;
            commands.entity(entity).insert(notice);
        }
    }
}

/// A client's [`ProxyResync`] waiting for a packet to ride in, and the tick of the last one
/// asked.
#[derive(Resource, Default)]
pub(crate) struct PendingResync {
    due: Option<u32>,
    last: Option<u32>,
}

/// PostUpdate, in [`NetSystems::EveryPacket`](unlag_net::NetSystems): the [`ProxyResync`]
/// asked this frame or before, in the first frame that sends the server a packet anyway (moves,
/// a shot, a delay report) or where a packet may leave without data (lightyear's
/// acknowledgements alone: [`DataCadence::may_go_alone`](unlag_net::DataCadence)): in the
/// packet that acknowledges the message it is about, before the server can rest a delta on
/// that message's states, and in no datagram of its own.
pub(crate) fn send_resync(
    real: Res<Time<Real>>,
    (delay, cadence): (
        Option<Res<unlag_net::AckDelay>>,
        Option<Res<unlag_net::DataCadence>>,
    ),
    mut resync: ResMut<PendingResync>,
    mut link: Query<(&mut MessageSender<ProxyResync>, &mut unlag_net::LinkTraffic), With<Client>>,
) {
    let Some(tick) = resync.due else {
        return;
    };
    let Ok((mut sender, mut traffic)) = link.single_mut() else {
        return;
    };
    let now = real.elapsed_secs_f64();
    let delay = delay.map_or(0.0, |d| d.0);
    if traffic.packet_leaves(now, delay, cadence.as_deref()) {
        resync.due = None;
        // (It rides on a packet that leaves anyway: the frame's data cadence stays as it was.)
        let queued = traffic.queued_this_frame;
        traffic.send_counted::<unlag_net::UnreliableChannel, _>(&mut sender, ProxyResync { tick });
        traffic.queued_this_frame = queued;
    }
}

/// A client's copies of the proxies' states of the server's [`StatesKind::Due`] messages, by
/// entity and tick, to decode delta states against (kept [`BASELINE_KEPT`] seconds, whatever
/// the smoothing made of them).
#[derive(Default)]
pub(crate) struct Baselines {
    states: bevy::ecs::entity::EntityHashMap<std::collections::VecDeque<(u32, WireProxyState)>>,
    /// The newest message tick seen, and when the kept states were last swept of proxies
    /// sent nothing for longer than they are kept.
    newest: u32,
    swept: u32,
}

impl Baselines {
    /// Keeps `state` (the teleport flag dropped: a delta never carries one) at `tick`, and
    /// forgets the proxy's states older than `kept` ticks before its newest.
    fn keep(&mut self, tick: u32, state: &WireProxyState, kept: u32) {
        let mut state = state.clone();
        state.flags &= !TELEPORT_BIT;
        let states = self.states.entry(state.entity).or_default();
        let i = states.partition_point(|(t, _)| *t < tick);
        match states.get_mut(i) {
            Some(at) if at.0 == tick => at.1 = state,
            _ => states.insert(i, (tick, state)),
        }
        let newest = states.back().map_or(tick, |(t, _)| *t);
        while states
            .front()
            .is_some_and(|(t, _)| t.saturating_add(kept) < newest)
        {
            states.pop_front();
        }
        self.newest = self.newest.max(tick);
        if self.newest.saturating_sub(self.swept) > kept {
            self.swept = self.newest;
            let limit = self.newest.saturating_sub(kept);
            self.states
                .retain(|_, s| s.back().is_some_and(|(t, _)| *t >= limit));
        }
    }

    /// The state of `entity` kept at `tick`.
    fn get(&self, entity: Entity, tick: u32) -> Option<&WireProxyState> {
        let states = self.states.get(&entity)?;
        let i = states.partition_point(|(t, _)| *t < tick);
        states.get(i).filter(|(t, _)| *t == tick).map(|(_, s)| s)
    }
}

/// PreUpdate: buffers received states, decoding delta states against the states kept.
#[allow(clippy::too_many_arguments)]
pub(crate) fn receive_states(
    mut commands: Commands,
    settings: Res<SmoothingSettings>,
    clock: Res<NetClock>,
    real: Res<Time<Real>>,
    mut stats: ResMut<SmoothingStats>,
    mut lateness: ResMut<ArrivalLateness>,
    mut link: Query<&mut MessageReceiver<ProxyUpdates>, With<Client>>,
    mut proxies: Proxies,
    mut fresh: Local<Vec<(Entity, ProxySmoothing)>>,
    (mut baselines, mut resync): (Local<Baselines>, ResMut<PendingResync>),
) {
    let Ok(mut receiver) = link.single_mut() else {
        return;
    };
    let tick = clock.tick_duration;
    let tick_us = unlag_core::quantize::tick_micros(tick);
    let kept = if tick > 0.0 {
        (BASELINE_KEPT / tick).ceil() as u32
    } else {
        0
    };
    // The tick of the newest message with a delta state that could not be decoded.
    let mut lacking: Option<u32> = None;
    let mut states: Vec<WireProxyState> = Vec::new();
    for update in receiver.receive() {
        let time = f64::from(update.tick) * tick;
        // Proxies gone dormant lately, told again in case the reliable notice is late.
        for &(entity, since) in &update.asleep {
            note_dormant(entity, since, &mut proxies, &mut commands, &mut stats);
        }
        // How late it came for the last frame drawn without it (the one before this): a
        // state read now is drawn now, so the wait to be read is not lateness, and the delay
        // need not cover it (a 10-fps client would otherwise keep 100 ms more than it needs).
        // Read after a hitch, a state's lateness is the hitch's, not the link's: no frame was
        // drawn meanwhile that could have missed it.
        // A repeat is late by design: the delay allows for it apart ([`unlag_core::repeat_after`]).
        // So is a state off its proxy's grid (sent the tick after its own), which the delay
        // need not cover: without it the curve is drawn as before.
        if clock.synced && !clock.frame_hitched && update.kind == StatesKind::Due {
            lateness.add(clock.present() - real.delta_secs_f64() - time);
        }
        // (Decoded states arrive in `states`; a host's own client is handed the server's
        // message as it was queued, its states perhaps still encoded.)
        states.clear();
        states.extend(update.all_states());
        let due = update.kind == StatesKind::Due;
        if due {
            for wire in &states {
                baselines.keep(update.tick, wire, kept);
            }
        }
        for delta in update.all_deltas() {
            // (Deltas come only in `Due` messages, against a state of an earlier one.)
            let decoded = update
                .tick
                .checked_sub(delta.back)
                .filter(|_| due)
                .and_then(|at| baselines.get(delta.entity, at))
                .and_then(|baseline| delta.apply(baseline, tick_us));
            match decoded {
                Some(wire) => {
                    stats.delta_states_received += 1;
                    baselines.keep(update.tick, &wire, kept);
                    states.push(wire);
                }
                None => {
                    unlag_net::warn_counted!(
                        stats.deltas_without_baseline,
                        "dropped a delta proxy state: no state kept {} ticks before tick {} it \
                         decodes against; full states asked",
                        delta.back,
                        update.tick
                    );
                    lacking = lacking.max(Some(update.tick));
                }
            }
        }
        for wire in states.drain(..) {
            let Ok((existing, dormant)) = proxies.get_mut(wire.entity) else {
                stats.unknown_entity += 1;
                continue;
            };
            let mut state = wire.to_state(update.tick, time);
            state.off_grid = update.kind == StatesKind::OffGrid;
            // Of a proxy back from a spell: its states newer than the spell's first, kept.
            let mut newer: Option<Vec<ProxyState>> = None;
            let result = match existing {
                Some(mut smoothing) => {
                    if let Some(mut dormant) = dormant {
                        // From before it went dormant: not drawn from. The first state after
                        // it starts the proxy afresh (a teleport: no curve from where it was).
                        // A state off the grid never does: the first of a spell is on it.
                        if update.tick <= dormant.since_tick
                            || state.off_grid && dormant.wakes_at.is_none()
                        {
                            stats.dropped_while_dormant += 1;
                            continue;
                        }
                        if dormant.wakes_at.is_none() {
                            smoothing.restart();
                            dormant.wakes_at = Some(time);
                        }
                    } else if update.woken.contains(&wire.entity)
                        && smoothing.buffer.get(update.tick).is_none()
                    {
                        // Back from a dormant spell whose notice has not come yet (it is
                        // reliable, this is not): start afresh here, hidden until its time.
                        // Its older states are not drawn from: the server never sends the
                        // states between, and a curve or a hold across the spell is no pose
                        // the server would grant. (A trail's copy of the first state after the
                        // spell, whose original was lost, comes after newer states: those
                        // stay, after it, so that the proxy starts from it, flagged, rather
                        // than from a newer one: at 1 Hz those are often states off the grid,
                        // and it came back unflagged.)
                        newer = Some(
                            smoothing
                                .buffer
                                .states()
                                .filter(|s| s.tick > update.tick)
                                .copied()
                                .collect::<Vec<_>>(),
                        );
                        smoothing.go_dormant(
                            &mut commands.entity(wire.entity),
                            ProxyDormant {
                                since_tick: update.tick.saturating_sub(1),
                                wakes_at: Some(time),
                            },
                            &mut stats,
                        );
                    }
                    let arrived = (clock.server_time, real.elapsed_secs_f64());
                    let result = smoothing.take_state(
                        state,
                        arrived,
                        (clock.send_interval, tick),
                        &mut lateness,
                    );
                    for s in newer.into_iter().flatten() {
                        let _ = smoothing.push(s, clock.server_time);
                    }
                    result
                }
                None => {
                    // Went dormant before its first states were taken in: those from before
                    // are not drawn from, and the first after wakes it.
                    if let Some(mut dormant) = dormant {
                        if update.tick <= dormant.since_tick
                            || state.off_grid && dormant.wakes_at.is_none()
                        {
                            stats.dropped_while_dormant += 1;
                            continue;
                        }
                        dormant.wakes_at.get_or_insert(time);
                    }
                    let at = match fresh.iter().position(|(e, _)| *e == wire.entity) {
                        Some(i) => i,
                        None => {
                            fresh.push((wire.entity, ProxySmoothing::new(&settings)));
                            fresh.len() - 1
                        }
                    };
                    let arrived = (clock.server_time, real.elapsed_secs_f64());
                    let intervals = (clock.send_interval, tick);
                    fresh[at]
                        .1
                        .take_state(state, arrived, intervals, &mut lateness)
                }
            };
            count_state(&mut stats, result, clock.synced);
        }
        // Rates told, after the states they came with: a state's gap from the one before it
        // is the old rate's.
        if update.kind == StatesKind::Due {
            for rate in &update.rates {
                if let Ok((Some(mut smoothing), _)) = proxies.get_mut(rate.entity) {
                    smoothing.tell_rate(rate, tick);
                } else if let Some((_, smoothing)) =
                    fresh.iter_mut().find(|(e, _)| *e == rate.entity)
                {
                    smoothing.tell_rate(rate, tick);
                }
            }
        }
    }
    for (entity, smoothing) in fresh.drain(..) {
        commands
            .entity(entity)
            .insert((smoothing, Transform::default()));
    }
    // A delta without its baseline: full states again, asked once per message tick, in the
    // packet that acknowledges the message.
    if let Some(tick) = lacking
        && resync.last.is_none_or(|last| tick > last)
    {
        resync.last = Some(tick);
        resync.due = Some(tick);
    }
}

impl ProxySmoothing {
    /// Forgets every state and what the last frames drew: the next state starts the proxy
    /// afresh, as its first did.
    fn restart(&mut self) {
        self.buffer.clear();
        self.blend = None;
        self.ease = VisualOffset::default();
        self.last_kind = None;
        self.last_starved_on = None;
        self.last_pair = None;
        self.last_view = None;
        self.last_rendered = None;
        self.resumed = self.frames > 0;
        self.catching_up = false;
        self.taken = 0;
        self.parked.clear();
    }

    /// Buffers `state` (received at `server_time`, seconds), counting it among those taken in
    /// if it is on the grid (only those tell the interval: a 1-Hz proxy's first state and a
    /// few off the grid after it were counted three, its delay no longer snapped to a
    /// second's when the second state on the grid told it, and it grew there over seconds,
    /// starved all along).
    fn push(&mut self, state: ProxyState, server_time: f64) -> Result<(), StateRejected> {
        let off_grid = state.off_grid;
        let result = self.buffer.push(state, server_time);
        if result.is_ok() && !off_grid {
            self.taken = self.taken.saturating_add(1);
        }
        result
    }

    /// Makes the proxy (`entity`) `dormant`: its states and drawn pose forgotten, counted in
    /// `stats`.
    fn go_dormant(
        &mut self,
        entity: &mut EntityCommands,
        dormant: ProxyDormant,
        stats: &mut SmoothingStats,
    ) {
        self.restart();
        stats.dormant += 1;
        entity.insert(dormant).remove::<RenderedPose>();
    }

    /// Buffers a received `state`; `arrived` is (server time, client time), seconds. A state
    /// on the grid newer than the newest there, on a known grid, tells `lateness` how many
    /// were lost on the way (a repeat stands in for its lost original); the grid is the longer
    /// of the one its states came on and the server's announced `send_interval` (after the
    /// rate falls, the old grid's gaps are not losses). States off the grid tell nothing.
    ///
    /// A state off the grid is buffered only after the state on the grid before it (within
    /// the interval and a `tick`, seconds, of it): else it waits (is parked) for that one, or
    /// for one on the grid after it. Drawn towards at once, it would be the end of a curve
    /// from the state on the grid before the missing one, and when that one came (its repeat,
    /// a trail's copy) the curve being drawn would change under the view: a 1-Hz proxy whose
    /// state was lost in a burst popped 1.3 m as its repeat came after a state off the grid.
    fn take_state(
        &mut self,
        state: ProxyState,
        (server_time, client_time): (f64, f64),
        (send_interval, tick): (f64, f64),
        lateness: &mut ArrivalLateness,
    ) -> Result<(), StateRejected> {
        let (time, off_grid) = (state.time, state.off_grid);
        let newest = self.buffer.newest_on_grid().map(|s| s.time);
        let interval = self.known_interval(send_interval);
        if off_grid && !self.placed(&state, self.grid_interval(send_interval), tick) {
            return self.park(state);
        }
        let result = self.push(state, server_time);
        if result.is_ok() && !off_grid {
            if let (Some(newest), Some(interval)) = (newest, interval)
                && time > newest
            {
                lateness
                    .state_loss
                    .observe(client_time, time - newest, interval);
            }
            self.release_parked(self.grid_interval(send_interval), tick, server_time);
        }
        result
    }

    /// The interval of the proxy's grid where a state off it belongs, seconds: as its buffered
    /// states on the grid show it (at least the server's `send_interval`), else as last read
    /// when the buffer holds a single one (the others lost or pruned: taken as unknown, a
    /// 1-Hz bot's state off the grid was drawn towards from the state two seconds before it,
    /// and when the grid's state between came the curve under the view jumped 0.43 m).
    fn grid_interval(&self, send_interval: f64) -> Option<f64> {
        self.known_interval(send_interval)
            .or((self.interval > 0.0).then_some(self.interval))
    }

    /// The interval its states on the grid come at, seconds (at least the server's
    /// `send_interval`): as the server told it ([`ProxySmoothing::told_interval`]: after the
    /// rate fell, the old rate's gaps are not the new one's, nor are the new one's losses),
    /// else as its gaps show it.
    fn known_interval(&self, send_interval: f64) -> Option<f64> {
        self.told_interval(send_interval)
            .or_else(|| self.buffer.recent_interval())
            .map(|i| i.max(send_interval))
    }

    /// The interval of a proxy whose rate the server told, seconds (`nominal` for the nominal
    /// rate; `None` if none was told): as told, or as the gaps after the told state show it
    /// where they are shorter (a faster rate whose notice was lost: losses only lengthen
    /// gaps). Never longer than told: at 20 % loss three gaps after the told state all held
    /// losses, and a 10-Hz proxy read as a 5-Hz one was drawn 0.15 s further back than the
    /// server compensates (it tells every change, five times). A slower rate whose notices
    /// were all lost is drawn at the told one: starved more, never refused.
    fn told_interval(&self, nominal: f64) -> Option<f64> {
        let told = self.told?;
        let interval = told.interval.unwrap_or(nominal);
        let read = self.buffer.recent_interval_from(self.told_since());
        Some(read.map_or(interval, |r| r.min(interval)))
    }

    /// The tick from which the proxy's gaps tell its rate: after its last rate told's first
    /// state (the gap after that one may be shorter, see [`ToldRate::since`]).
    fn told_since(&self) -> u32 {
        self.told.map_or(0, |t| t.since.saturating_add(1))
    }

    /// Takes the rate the server told (`rate`; a tick is `tick` seconds) unless one told
    /// since a later tick was taken: the repeats of a notice, or one older than the last,
    /// change nothing. An interval beyond [`SLOWEST_INTERVAL`] is taken as that.
    fn tell_rate(&mut self, rate: &ProxyRate, tick: f64) {
        if self.told.is_some_and(|t| rate.since <= t.since) || !(tick > 0.0 && tick.is_finite()) {
            return;
        }
        let interval = (rate.interval_ticks > 0)
            .then(|| (f64::from(rate.interval_ticks) * tick).min(SLOWEST_INTERVAL));
        self.told = Some(ToldRate {
            since: rate.since,
            interval,
            settled: false,
            repeated: rate.repeated,
        });
    }

    /// Whether the buffer holds the state on the grid before `state` (off the grid): the
    /// newest on the grid before it, no more than `interval` and a `tick` (seconds) before it
    /// (the grid's gaps differ by a tick where an interval is no whole number of ticks). While
    /// the interval is unknown, any before it will do.
    fn follows_its_grid(&self, state: &ProxyState, interval: Option<f64>, tick: f64) -> bool {
        self.buffer
            .grid_states()
            .rev()
            .find(|g| g.time < state.time)
            .is_some_and(|g| interval.is_none_or(|i| state.time - g.time <= i + tick + 1e-6))
    }

    /// Whether `state` (off the grid) may be buffered: it follows the state on the grid before
    /// it ([`follows_its_grid`](Self::follows_its_grid)), or one on the grid after it came
    /// already (the one before was lost: the curve runs through it).
    fn placed(&self, state: &ProxyState, interval: Option<f64>, tick: f64) -> bool {
        self.buffer
            .newest_on_grid()
            .is_some_and(|g| g.time > state.time)
            || self.follows_its_grid(state, interval, tick)
    }

    /// Keeps `state` (off the grid) until [`release_parked`](Self::release_parked) buffers it;
    /// the oldest parked goes when more than [`MAX_PARKED`] wait.
    fn park(&mut self, state: ProxyState) -> Result<(), StateRejected> {
        if !state.is_valid() {
            return Err(StateRejected::Invalid);
        }
        if self.buffer.get(state.tick).is_some() || self.parked.iter().any(|p| p.tick == state.tick)
        {
            return Err(StateRejected::Duplicate);
        }
        let at = self.parked.partition_point(|p| p.time < state.time);
        self.parked.insert(at, state);
        if self.parked.len() > MAX_PARKED {
            self.parked.remove(0);
        }
        Ok(())
    }

    /// Buffers the parked states that may be now ([`placed`](Self::placed)).
    fn release_parked(&mut self, interval: Option<f64>, tick: f64, server_time: f64) {
        for state in core::mem::take(&mut self.parked) {
            if self.placed(&state, interval, tick) {
                // (One older than every state kept is refused: the view is past it.)
                let _ = self.push(state, server_time);
            } else {
                self.parked.push(state);
            }
        }
    }
}

/// Counts a received state, or why it was dropped (duplicates are normal: the server sends
/// slow proxies' states twice; the others are logged, rate-limited, once the clock is
/// `synced`: before, there is no server time to place a state against, and every honest one
/// reads as from the far future).
fn count_state(stats: &mut SmoothingStats, result: Result<(), StateRejected>, synced: bool) {
    let Err(reason) = result else {
        stats.states_received += 1;
        return;
    };
    let n = match reason {
        StateRejected::Invalid => &mut stats.rejected_invalid,
        StateRejected::Duplicate => &mut stats.rejected_duplicate,
        StateRejected::OutOfOrder => &mut stats.rejected_out_of_order,
        StateRejected::FarFuture => &mut stats.rejected_far_future,
    };
    if reason == StateRejected::Duplicate || (reason == StateRejected::FarFuture && !synced) {
        *n += 1;
    } else {
        unlag_net::warn_counted!(*n, "dropped a proxy state: {reason}");
    }
}

/// What every proxy's delay this frame follows, measured over the frames before this one.
struct DelayInputs {
    /// The p99 of the states' lateness, seconds, once there is enough of it.
    late: Option<f64>,
    /// What the delay must cover beyond each proxy's interval for no more than the policy's
    /// share of frames to starve, seconds.
    covering: Option<f64>,
    /// Loss as the beats measure it, as the proxies' own states do or as the server's
    /// datagrams do, whichever is more (0–1): the states and the datagrams are denser samples,
    /// the states the packets whose loss the bridge is for.
    loss: f64,
    /// How likely a lost state was to be followed by another ([`StateLoss::continuation`]).
    continuation: Option<f64>,
    /// The client's time, seconds.
    now: f64,
    /// The server's nominal interval before its last change, seconds, for
    /// [`NOMINAL_CHANGE_SPAN`] after it: proxies still sent at the old rate follow the shared
    /// delay until their states show the new one.
    previous_nominal: Option<f64>,
}

/// How long after the server's nominal update interval changes a proxy whose states still
/// come at the old one follows the shared delay, seconds: its states show the new rate within
/// an old interval or two, and a fresh proxy may be read at the old one meanwhile.
///
/// Each proxy read its interval from its own gaps, the beats told the new nominal one, and
/// for a moment some proxies were at neither: drawn with their own delays, a few tens of
/// milliseconds from their peers, and the view on screen (the shortest delay's) ahead of the
/// view a shot at one of the others carries. The shot's copy, stamped with the view on
/// screen, then looked stamped 37 ms after it and was refused (the panel test's 20 → 5 Hz).
const NOMINAL_CHANGE_SPAN: f64 = 2.0;

/// PostUpdate: places every proxy at view time.
pub(crate) fn place_proxies(
    mut commands: Commands,
    settings: Res<SmoothingSettings>,
    mut clock: ResMut<NetClock>,
    time: Res<Time>,
    (mut stats, mut lateness): (ResMut<SmoothingStats>, ResMut<ArrivalLateness>),
    mut proxies: Query<(
        Entity,
        &mut ProxySmoothing,
        &mut Transform,
        Option<&mut RenderedPose>,
        Option<&ProxyDormant>,
    )>,
    (mut shared, mut nominal_change, mut bridge): (
        Local<Option<DelayController>>,
        Local<Option<(f64, Option<(f64, f64)>)>>,
        Local<unlag_core::BridgeLatch>,
    ),
) {
    if !clock.synced {
        return;
    }
    let offsets = CorrectionSmoothing {
        smooth_time: settings.extrapolation_smooth_time,
        max_smooth_distance: settings.teleport_distance,
        teleport_distance: settings.teleport_distance,
    };
    let now = time.elapsed_secs_f64();
    let late = lateness.p99();
    let covering = lateness.covering(now, settings.delay_policy.starved_share);
    let loss = unlag_core::finite_non_negative(clock.loss)
        .max(lateness.state_loss())
        .max(clock.datagram_loss.unwrap_or(0.0));
    // Bridged from the first loss above the threshold until well below it: an estimate
    // wandering about the threshold would take the delay an interval down and up again.
    let loss = bridge.loss(&settings.delay_policy, loss);
    // The nominal interval before its last change, while that change is recent.
    let (last_nominal, changed) = nominal_change.get_or_insert((clock.send_interval, None));
    if *last_nominal != clock.send_interval {
        *changed = Some((*last_nominal, now));
        *last_nominal = clock.send_interval;
    }
    let previous_nominal = changed
        .filter(|(_, at)| now - at < NOMINAL_CHANGE_SPAN)
        .map(|(previous, _)| previous);
    let inputs = DelayInputs {
        late,
        covering,
        loss,
        continuation: lateness.loss_continuation(),
        now,
        previous_nominal,
    };
    let (dt, dt64) = (time.delta_secs(), time.delta_secs_f64());
    // The delay every proxy at the nominal interval follows.
    let nominal = delay_target(clock.send_interval.into(), &clock, &settings, &inputs);
    let shared = shared.get_or_insert_with(|| {
        let mut d = DelayController::new(settings.delay_policy, nominal);
        d.snap_to_target();
        d
    });
    shared.set_target(nominal);
    shared.update(dt64);
    // The shortest delay in use: the proxies at the full update rate (slower ones wait longer).
    let mut shortest: Option<f64> = None;
    for (entity, mut proxy, mut transform, pose, dormant) in &mut proxies {
        let proxy = &mut *proxy;
        // A dormant proxy follows the shared delay, so that it comes back drawn at the same
        // view time as its peers: a shot at it shows the moment the client reports. Once its
        // first new state came, one whose rate the server told takes that rate's delay at once
        // while still hidden (nothing shown can jump): back at a reduced rate, it crept from
        // the shared delay to its own at the policy's rate, starved all along (a 60-Hz match
        // with a 10-Hz ring at 10 fps: 1.2 % of every proxy frame).
        let delay = match dormant {
            Some(d) if d.wakes_at.is_none() || proxy.told.is_none() => {
                proxy.delay = shared.clone();
                shared.current()
            }
            _ => {
                if dormant.is_some() {
                    proxy.resumed = false;
                }
                proxy.next_delay(&clock, &settings, (&mut lateness, &inputs), (shared, dt64))
            }
        };
        let view_time = clock.present() - delay;
        if let Some(dormant) = dormant {
            // Shown again once the view reaches its first new state: snapped there (its
            // buffer starts afresh), never swept from where it went dormant.
            if dormant.wakes_at.is_none_or(|at| view_time < at) {
                continue;
            }
            commands.entity(entity).remove::<ProxyDormant>();
            stats.woken += 1;
        }
        shortest = Some(shortest.map_or(delay, |s: f64| s.min(delay)));
        let sampled = if proxy.mode == SmoothingMode::Extrapolate {
            proxy.dead_reckon(&clock, &settings, &offsets, dt)
        } else {
            // On its first state alone a proxy is held, not run on: its interval (and so its
            // delay) comes with the second, which may take the view back to the first (a 1-Hz
            // proxy's by most of a second), and one run on would jump back as far.
            let max_extrapolation = if proxy.taken < 2 {
                0.0
            } else {
                settings.max_extrapolation
            };
            proxy
                .buffer
                .sample(view_time, proxy.mode, max_extrapolation)
                .map(|sample| (sample.position, sample.rotation, sample))
        };
        let Some((position, rotation, sample)) = sampled else {
            continue;
        };
        let position = proxy.eased(position, &sample, view_time, &settings, &offsets, dt);
        transform.translation = position;
        transform.rotation = rotation;
        proxy.count_frame(position, &sample, &mut stats);
        let rendered = proxy.rendered(sample, (view_time, delay), position, &clock);
        match pose {
            Some(mut pose) => *pose = rendered,
            None => {
                commands.entity(entity).insert(rendered);
            }
        }
    }
    clock.proxy_delay = shortest;
    clock.proxy_view_time = shortest.map(|d| clock.present() - d);
}

/// The delay a proxy at `interval` seconds should have, seconds: its interval plus the margin
/// the states' lateness, loss and the outages of recent frames ask for.
fn delay_target(
    sent: Sent,
    clock: &NetClock,
    settings: &SmoothingSettings,
    inputs: &DelayInputs,
) -> f64 {
    let interval = sent.interval;
    // The measured lateness of states once there is enough of it, else a margin from the
    // jitter; and long enough for the outages the recent frames met.
    let policy = &settings.delay_policy;
    let margin = inputs
        .late
        .unwrap_or(policy.jitter_multiplier * clock.jitter);
    // A server whose frames outlast the interval (a slow listen host) sends a frame's states
    // together: at the worst phase of this client's frames against its, the newest state is
    // that frame less the interval staler, and late by the margin. The phase drifts, so the
    // covering measured may not have met the worst of it yet.
    let paired = (clock.server_frame - interval).max(0.0);
    let paired = (paired > 0.0).then_some(paired + margin);
    // The server's long frame, which its hitches (a 250-ms pause of a listen host) go beyond
    // for no more than the starved share of the time: each starves every proxy of every
    // client at once, and the covering measured learns one only by starving through it. The
    // newest state is then that frame less the interval staler, late by the link's jitter
    // (not the margin: the lateness measured carries the host's usual frame, which the long
    // one holds).
    let long = (clock.server_long_frame - interval).max(0.0);
    let long = (long > 0.0).then_some(long + policy.jitter_multiplier * clock.jitter);
    // The states a lossy link takes in a row, expected from its loss and how its losses run
    // before the covering has starved through such an outage (proxies whose states are
    // repeated bridge a loss with the repeat): the newest state is then that many intervals
    // staler than its own. The beats' loss or the server's datagrams', not the states': a
    // proxy falling to a reduced rate shows gaps the states' count takes for losses until its
    // buffer knows the new interval (how the states' losses run only weighs the loss the link
    // saw). How the losses run: as the states' gaps say, or as the datagrams' runs say for
    // states this far apart, whichever runs longer; the datagrams say it from the first
    // seconds of a connection, where a state stream shows a run every few seconds and the
    // first burst would starve the proxies before two were seen.
    let loss = clock
        .datagram_loss
        .map_or(clock.loss, |d| d.max(clock.loss));
    let continuation = [inputs.continuation, clock.state_continuation_over(interval)]
        .into_iter()
        .flatten()
        .reduce(f64::max);
    let expected = policy.covering_lost_in_a_row(sent, margin, loss, continuation);
    // The delay covers the longest of them and of the covering measured.
    let covering = [inputs.covering, paired, long, expected]
        .into_iter()
        .flatten()
        .reduce(f64::max);
    policy.target_covering(sent, margin, inputs.loss, covering)
}

/// How fast a proxy back at the server's nominal rate from a slower one brings its longer
/// delay down to the shared one, seconds a second: its view runs half again as fast as real
/// time (it moves at 1.5 times its speed, as an ease may: [`unlag_core::CATCH_UP_SHARE`]),
/// where the policy's `max_decrease_rate` (0.05 s/s) would take ten seconds over half a
/// second's difference.
const CATCH_UP_RATE: f64 = 0.5;

/// Gaps between a proxy's states needed before an interval up to [`MAX_BRIDGED_GAP`] nominal
/// ones is read from them (the smallest of its last four): with fewer, a lost state could pass
/// for a slower rate. At 10 % loss three gaps all hold a loss one time in a thousand.
const MIN_GAPS_FOR_INTERVAL: usize = 3;

/// The longest interval a proxy is sent at, seconds: the slowest rate a server sends one at
/// ([`unlag_core::conditions::MIN_UPDATE_RATE_HZ`]).
const SLOWEST_INTERVAL: f64 = 1.0 / unlag_core::conditions::MIN_UPDATE_RATE_HZ as f64;

/// The most nominal intervals a gap between a proxy's first states may span and still be
/// taken for lost states rather than the proxy's own, slower rate.
const MAX_BRIDGED_GAP: f64 = 3.0;

/// Whether a sample of this kind was drawn starved (held or extrapolated).
fn starved(kind: Option<SampleKind>) -> bool {
    matches!(kind, Some(SampleKind::Held | SampleKind::Extrapolated))
}

impl ProxySmoothing {
    /// This proxy's update interval, seconds: its own (a 1 Hz proxy cannot be shown 50 ms
    /// behind; at most [`SLOWEST_INTERVAL`]), or the server's nominal one when it is within a
    /// quarter of it (or of the nominal one before a change in the last
    /// [`NOMINAL_CHANGE_SPAN`]: a proxy at a reduced rate equal to that one follows the shared
    /// delay that long) or not known yet (fewer than two states, or fewer than
    /// [`MIN_GAPS_FOR_INTERVAL`] gaps of up to [`MAX_BRIDGED_GAP`] nominal intervals). Observes
    /// how stale its newest state is for `lateness`.
    fn interval(
        &self,
        clock: &NetClock,
        lateness: &mut ArrivalLateness,
        inputs: &DelayInputs,
    ) -> f64 {
        // A gap of two or three intervals between a proxy's first states says little: one
        // lost state makes a gap of two, read as a proxy at half the rate, drawn with that
        // rate's longer delay (its own controller snaps to it before anything is shown). A shot
        // at it then carried a view time a delay's difference older than the copies stamped
        // with the shared one, and was refused (a respawned bot at 10 % loss: 90 ms). Until a
        // few gaps agree, such a proxy is taken at the nominal interval; a much slower one
        // (a 1-Hz proxy beside 20-Hz ones) is read from its first gap.
        //
        // A rate the server told is taken as told (see `told_interval`): a rate that fell showed
        // the old rate's shorter gaps for four more of the new one's, and until then every
        // state looked late by the difference: the delay of every proxy grew to cover it.
        let nominal = clock.send_interval;
        let read = || {
            self.buffer.recent_interval().filter(|&i| {
                self.buffer.grid_states().count() > MIN_GAPS_FOR_INTERVAL
                    || i > (MAX_BRIDGED_GAP + 0.5) * nominal
            })
        };
        let interval = self
            .told_interval(nominal)
            .or_else(read)
            .map(|i| {
                let near = |n: f64| (i - n).abs() < 0.25 * n;
                if near(nominal) || inputs.previous_nominal.is_some_and(near) {
                    nominal
                } else {
                    // No proxy is sent slower than the slowest rate: a longer gap is states
                    // lost (a 1-Hz proxy's buffer pruned down to the two states either side of
                    // a 5-s burst read as a 5-s interval, and its own delay grew away from its
                    // peers': shots claiming it were refused as drawn at another moment).
                    i.min(SLOWEST_INTERVAL)
                }
            })
            .unwrap_or(nominal);
        // How stale its newest state is this frame, beyond its interval: a frame drawn with a
        // delay shorter than the interval plus that starves.
        // (Its newest on the grid: a state off it comes only where the motion bent.)
        if self.buffer.grid_states().count() >= 3
            && let Some(newest) = self.buffer.newest_on_grid()
        {
            let present = clock.present();
            lateness
                .staleness
                .observe(inputs.now, present - newest.time - interval);
        }
        interval
    }

    /// This frame's interpolation delay, seconds, after `dt` seconds. Proxies at the server's
    /// nominal interval (and dormant ones) all follow `shared` (one delay, one view time: the
    /// one reports and shots carry, whenever a proxy came or came back); a proxy at another
    /// interval follows its own controller towards that interval's target, starting from the
    /// shared delay.
    fn next_delay(
        &mut self,
        clock: &NetClock,
        settings: &SmoothingSettings,
        (lateness, inputs): (&mut ArrivalLateness, &DelayInputs),
        (shared, dt): (&DelayController, f64),
    ) -> f64 {
        let was = self.interval;
        let interval = self.interval(clock, lateness, inputs);
        self.interval = interval;
        if interval == clock.send_interval {
            self.resumed = false;
            // Back from a slower rate, drawn at that rate's longer delay last frame: its view
            // runs faster than real time until it meets the shared one. Snapped, it jumped
            // ahead by the difference (20 → 2 → 20 Hz: 0.53 s of its motion, 2.6 m at a run
            // in one frame). A shot at it meanwhile claims it behind the shot, as drawn, and the
            // server compensates that as for a proxy of this rate or more.
            let own = self.delay.current();
            let to = shared.current();
            self.catching_up = (self.catching_up || was > 1.25 * interval)
                && self.last_rendered.is_some()
                && own > to + 1e-6;
            if self.catching_up {
                let delay = (own - CATCH_UP_RATE * dt).max(to);
                self.delay.set_target(delay);
                self.delay.snap_to_target();
                return self.delay.current();
            }
            self.delay = shared.clone();
            return shared.current();
        }
        // (A proxy the client's interest reduced is not repeated, whatever its interval: a lost
        // state is bridged by the next, where a repeat's quarter interval starved it.)
        let sent = match self.told {
            Some(told) if !told.repeated => Sent::unrepeated(interval),
            _ => Sent::from(interval),
        };
        self.delay
            .set_target(delay_target(sent, clock, settings, inputs));
        // Until its interval is known nothing has been shown that could jump. (A proxy back from
        // a dormant spell keeps the delay it followed meanwhile.) Counted as taken in, not as
        // buffered: a 1-Hz proxy's buffer falls to two states as old ones are pruned, and its
        // delay snapped from a half interval to a whole one mid-curve, the view half a second
        // back (eased over 2.2 m).
        if self.taken < 3 {
            if !self.resumed {
                self.delay.snap_to_target();
            }
        } else {
            self.resumed = false;
        }
        // Its rate fell lately (told, and its delay short of the new rate's since): as far as
        // the view would pass its newest state, the delay grows at once, and the proxy is drawn
        // held there once rather than run on and held every interval while the delay creeps up
        // at the policy's rate (20 → 2 Hz: starved in a tenth of its frames for 5 s).
        if let Some(told) = &mut self.told
            && !told.settled
        {
            if let Some(newest) = self.buffer.newest_on_grid() {
                self.delay.raise_toward(clock.present() - newest.time);
            }
            told.settled = self.delay.current() >= self.delay.target() - 1e-6;
        }
        self.delay.update(dt)
    }

    /// `Extrapolate` mode, UE's simulated proxies: dead reckoning from the newest state at the
    /// present the client can know (server time less the one-way trip), easing into each new
    /// state over `dt` seconds. Where it is drawn, how it is turned, and the sample.
    fn dead_reckon(
        &mut self,
        clock: &NetClock,
        settings: &SmoothingSettings,
        offsets: &CorrectionSmoothing,
        dt: f32,
    ) -> Option<(Vec3, Quat, Sample)> {
        let newest = self.buffer.newest().copied()?;
        let present = clock.present();
        let sample = self.buffer.sample(
            present.max(newest.time),
            SmoothingMode::Hermite,
            settings.max_extrapolation,
        )?;
        let offset = match self.blend {
            Some((tick, mut o)) if tick == newest.tick => {
                let current = o.advance(dt);
                self.blend = Some((tick, o));
                current
            }
            _ => {
                // A new state: ease from where the old one's dead reckoning draws the proxy
                // now into the new path, so it keeps moving (measured against last frame's
                // drawing, the offset would also take up this frame's motion: a stop of one
                // frame, and an offset the server cannot tell from a magnet). After a mode
                // switch there is no old one: ease from where it was drawn.
                let before = self.blend.and_then(|(tick, o)| {
                    self.buffer
                        .get(tick)
                        .map(|s| (run_on(s, present, settings.max_extrapolation), o))
                });
                // Paced by the faster of the two states (the new and the one run on before).
                let old = self
                    .blend
                    .and_then(|(tick, _)| self.buffer.get(tick).copied());
                let speed = unlag_core::catch_up_speed([&newest].into_iter().chain(&old));
                let o = match (before, self.last_rendered) {
                    _ if newest.teleport => VisualOffset::default(),
                    (Some((was, mut o)), _) => {
                        o.on_correction_paced(sample.position - was, offsets, speed);
                        o
                    }
                    (None, Some(shown)) => {
                        let mut o = VisualOffset::default();
                        o.on_correction_paced(sample.position - shown, offsets, speed);
                        o
                    }
                    (None, None) => VisualOffset::default(),
                };
                self.blend = Some((newest.tick, o));
                o.current()
            }
        };
        Some((sample.position + offset, sample.rotation, sample))
    }

    /// Where the proxy is drawn, from `position` on its curve (or `Extrapolate`'s path), with
    /// the eases that keep it from popping, advanced by `dt` seconds: after a mode switch,
    /// from where it was drawn; back on the curve after starved frames, from where those
    /// frames would draw it now (UE smooths the same way).
    fn eased(
        &mut self,
        position: Vec3,
        sample: &Sample,
        view_time: f64,
        settings: &SmoothingSettings,
        offsets: &CorrectionSmoothing,
        dt: f32,
    ) -> Vec3 {
        // What a starved spell or a late state got wrong is eased out over longer for a slow
        // proxy (the server allows the same for claims on it).
        let spell = &CorrectionSmoothing {
            smooth_time: unlag_core::ease_time(offsets.smooth_time, self.interval),
            ..*offsets
        };
        // A new mode draws elsewhere: ease over from where the proxy was drawn (`Extrapolate`
        // eases by its own blend, started afresh by `set_mode`).
        let switched = core::mem::take(&mut self.switched);
        if switched
            && !matches!(self.mode, SmoothingMode::Extrapolate | SmoothingMode::Snap)
            && let Some(shown) = self.last_rendered
        {
            self.ease = VisualOffset::default();
            self.ease.on_correction(position - shown, offsets);
        }
        if switched && self.mode == SmoothingMode::Snap {
            self.ease = VisualOffset::default();
        }
        // The ease starts from where the starved frames would draw the proxy now (the state
        // they ran on, extrapolated as far as they may), so the proxy keeps moving through
        // the frame that recovers, and the offset is only what extrapolating got wrong: the
        // server checks claimed offsets against exactly that.
        if self.mode != SmoothingMode::Extrapolate
            && !switched
            && starved(self.last_kind)
            && !starved(Some(sample.kind))
        {
            // (As far as those frames ran on: one held at its state, a proxy's first on its
            // grid, is not run on now either. Run on, a first state falling from a jump drew
            // an ease 0.79 m under the floor.)
            let starved_on = self
                .last_starved_on
                .and_then(|(tick, on)| self.buffer.get(tick).map(|s| (*s, on)));
            let starved_now = starved_on.map(|(s, on)| {
                let reach = match on {
                    StarvedOn::RunOn => settings.max_extrapolation,
                    StarvedOn::HeldAt(reach) => reach,
                };
                run_on(&s, view_time, reach)
            });
            // Paced by the fastest of the states it lies between: a long hold leaves metres
            // to catch up, which a fixed time swept at many times the proxy's speed.
            let speed = self.pair_speed(sample.from, sample.to, starved_on.map(|(s, _)| s));
            let eased = match (starved_now, self.last_rendered) {
                (Some(was), _) => self.ease.on_correction_paced(position - was, spell, speed),
                (None, Some(shown)) => {
                    self.ease = VisualOffset::default();
                    self.ease
                        .on_correction_paced(position - shown, spell, speed)
                }
                (None, None) => true,
            };
            self.snapped_back = !eased;
        }
        // A late state landed inside the segment the last frame was drawn on (its neighbours
        // came before it: a burst of loss, a trail copy): the curve under the view is now
        // another. Eased from the old curve onto the new by how far apart they were at the
        // last frame's view time, so the proxy goes on from where it was drawn at the new
        // curve's pace (the old one, across a gap, may run fast where the new one stands: at
        // 20 fps one ran 0.58 m between two frames) and the offset is a difference of two
        // curves at a moment, which the server explains.
        if matches!(self.mode, SmoothingMode::Hermite | SmoothingMode::Linear)
            && !switched
            && sample.kind == SampleKind::Interpolated
            && let Some((pair, then)) = self.last_pair.zip(self.last_view)
            && let Some(jump) = self.late_jump(pair, sample, then)
        {
            let speed = self.pair_speed(pair.0, pair.1, None).max(self.pair_speed(
                sample.from,
                sample.to,
                None,
            ));
            self.ease.on_correction_paced(jump, spell, speed);
            self.eased_late = true;
        }
        position + self.ease.advance(dt)
    }

    /// The speed an ease onto the curve between the states of ticks `from` and `to` is paced
    /// by ([`unlag_core::catch_up_time`]), with `also` (the state a starved spell ran on): the
    /// fastest of their velocities, m/s, as the server reckons it for claims on the ease.
    fn pair_speed(&self, from: u32, to: u32, also: Option<unlag_core::ProxyState>) -> f32 {
        let pair = [from, to].map(|tick| self.buffer.get(tick).copied());
        unlag_core::catch_up_speed(pair.iter().chain([&also]).flatten())
    }

    /// How far a state that came between the last frame's two states `(from, to)` moved the
    /// curve at `then` (the last frame's view time, server seconds): the curve the buffer now
    /// draws there less the one between `from` and `to`, metres. `None` unless `sample` is
    /// drawn on a shorter segment inside `(from, to)`, or when an end is gone or a teleport,
    /// or the buffer draws `then` other than between two states inside `(from, to)`.
    fn late_jump(&self, (from, to): (u32, u32), sample: &Sample, then: f64) -> Option<Vec3> {
        let nested =
            from <= sample.from && sample.to <= to && (from, to) != (sample.from, sample.to);
        if !nested {
            return None;
        }
        let (a, b) = (self.buffer.get(from)?, self.buffer.get(to)?);
        let late = [sample.from, sample.to].map(|tick| self.buffer.get(tick));
        if b.teleport || late.iter().any(|s| s.is_none_or(|s| s.teleport)) || b.time <= a.time {
            return None;
        }
        let alpha = ((then - a.time) / (b.time - a.time)).clamp(0.0, 1.0) as f32;
        let old = unlag_core::replay(self.mode, a, b, alpha).0;
        let new = self.buffer.sample(then, self.mode, 0.0)?;
        (new.kind == SampleKind::Interpolated && new.from >= from && new.to <= to)
            .then(|| new.position - old)
    }

    /// Remembers a frame drawn at `position` from `sample`, and counts it (held and
    /// extrapolated frames apart) here and in `stats`.
    fn count_frame(&mut self, position: Vec3, sample: &Sample, stats: &mut SmoothingStats) {
        self.last_kind = Some(sample.kind);
        let on = match sample.kind {
            SampleKind::Held => StarvedOn::HeldAt(f64::from(sample.alpha.max(0.0))),
            _ => StarvedOn::RunOn,
        };
        self.last_starved_on = (self.mode != SmoothingMode::Extrapolate
            && starved(Some(sample.kind)))
        .then_some((sample.from, on));
        self.last_pair =
            (sample.kind == SampleKind::Interpolated).then_some((sample.from, sample.to));
        if core::mem::take(&mut self.eased_late) {
            stats.late_eases += 1;
        }
        if core::mem::take(&mut self.snapped_back) {
            stats.snapped_back += 1;
        }
        self.last_rendered = Some(position);
        self.frames += 1;
        stats.frames += 1;
        match sample.kind {
            SampleKind::Held => {
                self.held += 1;
                stats.held_frames += 1;
            }
            SampleKind::Extrapolated if self.mode != SmoothingMode::Extrapolate => {
                self.extrapolated += 1;
                stats.extrapolated_frames += 1;
            }
            _ => {}
        }
    }

    /// What a client drew this frame, for the view contract: the sample's state pair and
    /// blend, the view time and delay (seconds), where it was drawn and how far off the curve
    /// (metres). States older than a second before the view are pruned once read.
    fn rendered(
        &mut self,
        sample: Sample,
        (view_time, delay): (f64, f64),
        position: Vec3,
        clock: &NetClock,
    ) -> RenderedPose {
        let shown = |tick: u32| {
            self.buffer
                .get(tick)
                .map_or_else(StateShown::default, StateShown::from)
        };
        let shown = [shown(sample.from), shown(sample.to)];
        self.buffer.prune(view_time.min(clock.present()) - 1.0);
        self.last_view = Some(view_time);
        RenderedPose {
            from: sample.from,
            to: sample.to,
            alpha: sample.alpha,
            view_time,
            delay,
            position,
            // Everything off the curve: the starved-frame ease, and `Extrapolate`'s blend.
            ease: position - sample.position,
            flags: sample.flags,
            shown,
            kind: sample.kind,
            mode: self.mode,
        }
    }
}

/// Where a proxy starved on state `s` is drawn at `time` (server seconds): `s` run on by its
/// velocity for at most `max_extrapolation` seconds, then held ([`unlag_core::replay`] of one
/// state, as the server rebuilds it).
fn run_on(s: &unlag_core::ProxyState, time: f64, max_extrapolation: f64) -> Vec3 {
    let ahead = (time - s.time).clamp(0.0, max_extrapolation.max(0.0)) as f32;
    unlag_core::replay(SmoothingMode::Hermite, s, s, ahead).0
}
