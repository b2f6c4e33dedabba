//! The server side: sample proxies after each tick and send the due ones.

use crate::SmoothingSettings;
use crate::interest::{ASLEEP_REPEATS, InterestSchedule, RATE_REPEATS};
use crate::protocol::{
    DeltaProxyState, EncodedDeltas, EncodedStates, MAX_BASELINE_AGE, ProxyDormancy, ProxyRate,
    ProxyResync, ProxyUpdates, StatesKind, TELEPORT_BIT, WireProxyState,
};
use bevy::prelude::*;
use lightyear::core::tick::TickDuration;
use lightyear::prelude::server::ClientOf;
use lightyear::prelude::*;
use unlag_core::SmoothingMode;
use unlag_core::conditions::{MAX_UPDATE_RATE_HZ, MIN_UPDATE_RATE_HZ};
use unlag_net::{
    LinkTraffic, NetConditions, ProxyFlags, ProxyInterest, Relevance, ReliableChannel, SentStates,
    Teleported, UnreliableChannel,
};

/// Marks a server entity whose state is sent to clients for smoothing (its `Transform` is
/// sampled after every tick).
#[derive(Component, Copy, Clone, Debug, Default)]
#[require(Transform, ProxyFlags)]
pub struct SmoothedProxy;

/// How many states a second the server sends for this entity, 1–60 Hz (seed 001 exaggerates
/// with 1 Hz). Without it the server's default
/// ([`NetConditions`](unlag_net::NetConditions) update rate) applies. Changeable at runtime.
#[derive(Component, Copy, Clone, Debug, PartialEq, Reflect)]
#[reflect(Component)]
pub struct NetUpdateFrequency(pub f32);

/// Per-proxy sampling state on the server.
#[derive(Component, Default)]
pub(crate) struct ProxySampler {
    last: Option<(u32, Vec3)>,
    velocity: Vec3,
    teleport: bool,
    /// The tick its next state is due at (0: at once).
    next_tick: u32,
    /// Its states' phase: ticks after its rate's grid ([`unlag_core::next_on_phase`]), given
    /// the first tick [`send_due`] sees it ([`SmoothingSettings::spread_above`]).
    phase: Option<u32>,
    /// The last state sent, its tick, and when it is sent again (slow proxies only).
    repeat: Option<Repeat>,
    /// The states it was sent off its grid since its last on the grid, by tick: they go again
    /// with the repeat of its next state on the grid.
    off_grid_since: Vec<(u32, WireProxyState)>,
    /// Its states of the last [`MAX_TRAIL_LAG`] seconds as they were sent on its grid, oldest
    /// first, by tick: the trail copies bursty links are sent come from them, byte for byte.
    sent_wires: std::collections::VecDeque<(u32, WireProxyState)>,
    /// The newest state sent, on the grid or off it, as clients decode it (slow proxies only).
    last_sent: Option<unlag_core::ProxyState>,
    /// Each tick's state since `last_sent`, as it would be sent and decoded (slow proxies
    /// only): the track the curve from `last_sent` must follow ([`ProxySampler::off_grid`]).
    track: Vec<(WireProxyState, unlag_core::ProxyState)>,
}

/// A slow proxy's state sent again: when (server seconds), its tick, the state, and the states
/// off its grid sent before it since the one on the grid before (again too).
type Repeat = (f64, u32, WireProxyState, Vec<(u32, WireProxyState)>);

/// Proxies sent this far apart or further, seconds, are sent states off their grid where the
/// curve through their states would stray from the track
/// ([`SmoothingSettings::off_grid_error`]): slower than 10 Hz. Faster ones' curves keep close
/// to the track between states anyway (at 20 Hz a peek's crossing was drawn 4 ms after the
/// server's track showed it, at 1 Hz 25-31 ms on average and up to 74).
pub const OFF_GRID_MIN_INTERVAL: f64 = 0.1;

/// The least time between a proxy's state off its grid and the state sent before it, seconds:
/// a proxy that jitters is sent no more than 20 of them a second.
pub const OFF_GRID_MIN_GAP: f64 = 0.05;

/// The oldest state a trail copy may be, seconds before the update it rides with: the longest
/// interpolation delay a client may report.
const MAX_TRAIL_LAG: f64 = unlag_net::MAX_REPORTED_DELAY;

/// FixedPostUpdate: velocity from the simulation (or else the tick's motion), teleports from
/// jumps or markers.
pub(crate) fn sample_proxies(
    mut commands: Commands,
    settings: Res<SmoothingSettings>,
    timeline: Res<LocalTimeline>,
    tick: Res<TickDuration>,
    mut proxies: Query<
        (
            Entity,
            &Transform,
            Option<&mut ProxySampler>,
            Has<Teleported>,
            Option<&unlag_net::SimulatedVelocity>,
        ),
        With<SmoothedProxy>,
    >,
    work: Option<Res<unlag_net::ServerWork>>,
) {
    let _work = work
        .as_deref()
        .map(|w| w.time(unlag_net::WorkPart::ProxyStates));
    let now = timeline.tick().0;
    let dt = tick.0.as_secs_f32();
    for (entity, transform, sampler, teleported, simulated) in &mut proxies {
        let Some(mut sampler) = sampler else {
            commands.entity(entity).insert((
                ProxySampler {
                    last: Some((now, transform.translation)),
                    teleport: true,
                    ..default()
                },
                SentStates::default(),
            ));
            continue;
        };
        if let Some((then, before)) = sampler.last
            && now > then
        {
            let moved = transform.translation - before;
            if teleported || moved.length() > settings.teleport_distance {
                sampler.teleport = true;
                sampler.velocity = Vec3::ZERO;
            } else if let Some(simulated) = simulated.filter(|v| v.0.is_finite()) {
                sampler.velocity = simulated.0;
            } else {
                sampler.velocity = moved / (dt * (now - then) as f32);
            }
        }
        // (The marker is removed after the tick, once the rewind has seen it too.)
        if teleported {
            sampler.teleport = true;
        }
        sampler.last = Some((now, transform.translation));
    }
}

/// How many proxies' states go on each phase of their grid (by phase), as [`send_due`] last
/// counted them: where it puts a new proxy's ([`unlag_core::spread_phase`]).
#[derive(Default)]
pub(crate) struct PhaseLoads(Vec<u32>);

/// Counts a proxy on `phase` in `loads`.
fn count_phase(loads: &mut Vec<u32>, phase: u32) {
    let phase = phase as usize;
    if loads.len() <= phase {
        loads.resize(phase + 1, 0);
    }
    loads[phase] += 1;
}

/// The client links proxy states go out on, with what each is interested in and was sent.
type StateLinks<'w, 's> = Query<
    'w,
    's,
    (
        Entity,
        &'static mut MessageSender<ProxyUpdates>,
        &'static mut MessageSender<ProxyDormancy>,
        &'static mut LinkTraffic,
        Option<&'static ProxyInterest>,
        Option<&'static mut InterestSchedule>,
        Option<&'static unlag_net::RemoteClientClock>,
        Option<&'static mut unlag_net::StatesSentTo>,
        Option<&'static unlag_net::ClientAckLedger>,
    ),
    (With<ClientOf>, With<Connected>),
>;

/// A proxy state due to every client but its owner's (the one that controls it, if any),
/// whether the proxy is sent [`SLOW_TRAIL_INTERVAL`] apart or further, and its own interval
/// (seconds) if it has a rate of its own ([`NetUpdateFrequency`]).
type DueState = (WireProxyState, Option<Entity>, bool, Option<f64>);

/// FixedPostUpdate: one [`ProxyUpdates`] per client with every proxy that is due, except the
/// one the client controls (it predicts that one itself).
#[allow(clippy::too_many_arguments)]
pub(crate) fn send_due(
    settings: Res<SmoothingSettings>,
    mut stats: ResMut<crate::SmoothingStats>,
    timeline: Res<LocalTimeline>,
    tick: Res<TickDuration>,
    conditions: Res<NetConditions>,
    mut proxies: Query<(
        Entity,
        &Transform,
        &ProxyFlags,
        &mut ProxySampler,
        &mut SentStates,
        Option<&NetUpdateFrequency>,
        Option<&ControlledBy>,
    )>,
    mut links: StateLinks,
    (work, shares): (
        Option<Res<unlag_net::ServerWork>>,
        Option<Res<unlag_net::WorkShares>>,
    ),
    frame: Res<unlag_net::NetFrame>,
    mut spread: Local<PhaseLoads>,
) {
    let _work = work
        .as_deref()
        .map(|w| w.time(unlag_net::WorkPart::ProxyStates));
    // Proxies by phase: as counted last tick with those given one since (`loads`), and as
    // counted this tick (`counted`, next tick's; a proxy gone is no longer counted).
    let mut loads = core::mem::take(&mut spread.0);
    let mut counted: Vec<u32> = Vec::with_capacity(loads.len());
    let now_tick = timeline.tick().0;
    let now = f64::from(now_tick) * tick.0.as_secs_f64();
    let mut due: Vec<DueState> = Vec::new();
    // Repeats of slow proxies' states, by the tick they were sampled at.
    let mut repeats: Vec<(u32, WireProxyState, Option<Entity>)> = Vec::new();
    // Slow proxies' states off their grids, and their copies, by the tick they were sampled
    // at.
    let mut off_grid: Vec<(u32, WireProxyState, Option<Entity>)> = Vec::new();
    for (entity, transform, flags, mut sampler, mut sent, frequency, controlled) in &mut proxies {
        let owner = controlled.map(|c| c.owner);
        if let Some((at, tick, wire, copies)) = sampler.repeat.take() {
            if now + 1e-9 >= at {
                repeats.push((tick, wire, owner));
                off_grid.extend(copies.into_iter().map(|(t, w)| (t, w, owner)));
            } else {
                sampler.repeat = Some((at, tick, wire, copies));
            }
        }
        let rate = frequency
            .map_or(conditions.get().update_rate_hz, |f| f.0)
            .clamp(MIN_UPDATE_RATE_HZ, MAX_UPDATE_RATE_HZ);
        let interval = f64::from(rate).recip() / tick.0.as_secs_f64();
        let phase = *sampler.phase.get_or_insert_with(|| {
            let phase = unlag_core::spread_phase(&loads, interval, settings.spread_above);
            count_phase(&mut loads, phase);
            phase
        });
        count_phase(&mut counted, phase);
        if settings.off_grid_error > 0.0 && f64::from(rate).recip() + 1e-9 >= OFF_GRID_MIN_INTERVAL
        {
            let mode = match settings.default_mode {
                SmoothingMode::Snap => SmoothingMode::Linear,
                mode => mode,
            };
            let due_now = now_tick >= sampler.next_tick;
            off_grid.extend(
                sampler
                    .off_grid(
                        (entity, transform, flags.0),
                        (now_tick, now, due_now),
                        (settings.off_grid_error, mode),
                        &mut sent,
                    )
                    .map(|(tick, wire)| (tick, wire, owner)),
            );
        } else {
            sampler.track.clear();
        }
        if now_tick < sampler.next_tick {
            continue;
        }
        // A new proxy's first state goes on its rate's grid like every later one, not at
        // once: a client reads a slow proxy's interval from its first gap, and a first state
        // sent off the grid made that gap short (a 1-Hz proxy spawned 0.43 s before the grid's
        // next tick was drawn with a 0.46-s delay, starved half of each second until the short
        // gap left its buffer, and then its delay grew by half a second).
        if sampler.sent_wires.is_empty() && sampler.next_tick == 0 {
            sampler.next_tick =
                unlag_core::next_on_phase(now_tick.saturating_sub(1), interval, phase);
            if now_tick < sampler.next_tick {
                continue;
            }
        }
        let pose = (entity, transform, flags.0);
        let wire = sampler.sample(
            pose,
            (rate, tick.0.as_secs_f64()),
            (now_tick, now),
            &mut sent,
        );
        // (Its own interval, seconds, if it has a rate of its own: the clients are told it.)
        let own = frequency.map(|_| f64::from(rate).recip());
        due.push((
            wire,
            owner,
            f64::from(rate).recip() >= SLOW_TRAIL_INTERVAL,
            own,
        ));
    }
    spread.0 = counted;
    send_repeats(repeats, &mut links);
    // (A copy may go in the tick its original does: once is enough.)
    off_grid.sort_by_key(|(tick, wire, _)| (*tick, wire.entity));
    off_grid.dedup_by_key(|(tick, wire, _)| (*tick, wire.entity));
    stats.off_grid_states_sent += send_off_grid(off_grid, frame.0, &mut links);
    let trail_of = |entity: Entity, tick: u32| {
        proxies
            .get(entity)
            .ok()
            .and_then(|p| p.3.sent_at_or_before(tick).cloned())
    };
    let baseline_of = |entity: Entity, tick: u32| {
        proxies
            .get(entity)
            .ok()
            .and_then(|p| p.3.sent_at(tick).cloned())
    };
    let nominal = conditions
        .get()
        .update_rate_hz
        .clamp(MIN_UPDATE_RATE_HZ, MAX_UPDATE_RATE_HZ);
    let trails = Trails {
        settings: &settings,
        tick: tick.0.as_secs_f64(),
        nominal: f64::from(nominal).recip(),
        of: &trail_of,
        baseline: &baseline_of,
    };
    let (trail_states, delta_states) = send_states(
        &due,
        (now_tick, now, frame.0),
        (&mut links, shares.as_deref().copied()),
        &trails,
    );
    stats.trail_states_sent += trail_states;
    stats.delta_states_sent += delta_states;
}

/// On the server, after PreUpdate's receive and before the frame's ticks: a client that lacked
/// a delta state's baseline ([`ProxyResync`]) is sent full states from the next tick on, its
/// deltas resting only on those. Read before the ticks of the frame its request came in (in
/// Update, a frame late, the server had rested a delta on the state the request was about:
/// the client dropped it, and read it as a loss). Not in PreUpdate: a system added there moved
/// the order of PreUpdate's unordered systems, and a one-thread server's match then differed
/// from a multi-threaded one's (note 37).
pub(crate) fn receive_resyncs(
    timeline: Res<LocalTimeline>,
    mut stats: ResMut<crate::SmoothingStats>,
    mut links: Query<
        (
            &mut MessageReceiver<ProxyResync>,
            Option<&mut crate::InterestSchedule>,
        ),
        With<ClientOf>,
    >,
) {
    // (States sent from the next tick on leave after the request was read.)
    let next = timeline.tick().0.saturating_add(1);
    for (mut receiver, schedule) in &mut links {
        if receiver.receive().count() == 0 {
            continue;
        }
        stats.resyncs_received += 1;
        if let Some(mut schedule) = schedule {
            schedule.baselines_from = schedule.baselines_from.max(next);
        }
    }
}

/// About how many bytes a delta state takes (11.7 measured): what a client's delta buffer is
/// made room for at once.
const DELTA_BYTES_GUESS: usize = 12;

/// How long after a pair's first state its states go in full, seconds, besides two round trips
/// ([`send_states`]): its entity's spawn comes after its first states, a resend later when lost.
/// (Not after a dormant spell: the client kept the entity.)
const SPAWN_MARGIN: f64 = 0.5;

/// What [`send_states`] needs for the trails of clients whose losses run in bursts.
struct Trails<'a> {
    settings: &'a SmoothingSettings,
    /// A tick's length, seconds.
    tick: f64,
    /// The server's nominal update interval, seconds (its proxies' without a rate of their
    /// own).
    nominal: f64,
    /// The state a proxy was sent at or before a tick and before its newest, byte for byte,
    /// and its tick.
    of: &'a (dyn Fn(Entity, u32) -> Option<(u32, WireProxyState)> + Sync),
    /// The state a proxy was sent at a tick on its grid, byte for byte: a delta's baseline.
    baseline: &'a (dyn Fn(Entity, u32) -> Option<WireProxyState> + Sync),
}

impl ProxySampler {
    /// The proxy's state, due at tick `now_tick` (server time `now`, seconds; `tick`: a tick's
    /// length, seconds), at `rate` states a second: recorded in what was `sent`, the next one
    /// and its repeat scheduled (for slow rates) with the states off its grid since the last
    /// one on it (a state off the grid is sent twice, as one on it, and a client that lost it
    /// draws the curve as if it had never been sent), the teleport flag spent. `pose`: the
    /// proxy's entity, transform and game flags.
    ///
    /// (Not with the state itself: with every proxy's states off the grid, a tick's update
    /// took two packets, and the trail copy of the state before each one came a frame after
    /// it, inside the curve being drawn: an 813-mm pop at 1 Hz and 20 % loss in bursts of 10.)
    fn sample(
        &mut self,
        pose: (Entity, &Transform, u8),
        (rate, tick): (f32, f64),
        (now_tick, now): (u32, f64),
        sent: &mut SentStates,
    ) -> WireProxyState {
        let interval = 1.0 / f64::from(rate);
        let phase = self.phase.unwrap_or(0);
        self.next_tick = unlag_core::next_on_phase(now_tick, interval / tick, phase);
        let wire = self.wire(pose);
        let state = wire.to_state(now_tick, now);
        sent.push(state);
        self.last_sent = Some(state);
        self.track.clear();
        let kept = (MAX_TRAIL_LAG / tick).ceil() as u32;
        while self
            .sent_wires
            .front()
            .is_some_and(|(t, _)| t.saturating_add(kept) < now_tick)
        {
            self.sent_wires.pop_front();
        }
        self.sent_wires.push_back((now_tick, wire.clone()));
        let copies = core::mem::take(&mut self.off_grid_since);
        self.repeat = unlag_core::repeat_after(interval)
            .map(|after| (now + after, now_tick, wire.clone(), copies));
        self.teleport = false;
        wire
    }
}

impl ProxySampler {
    /// The proxy's state now as it goes on the wire: `pose` (entity, transform, game flags)
    /// with the sampled velocity and the pending teleport flag.
    fn wire(&self, (entity, transform, flags): (Entity, &Transform, u8)) -> WireProxyState {
        WireProxyState::new(
            entity,
            transform.translation,
            transform.rotation,
            self.velocity,
            flags,
            self.teleport,
        )
    }

    /// A slow proxy's state off its grid to send at tick `now_tick` (server time `now`,
    /// seconds; `due_now`: its state on the grid is due this tick too), if one is called for,
    /// with its tick, recorded in what was `sent`; `pose` as for [`sample`](Self::sample).
    ///
    /// The curve a client draws (`mode`) from the newest state sent to this tick's must pass
    /// within `error` metres of every tick's position between them (the server's track, as it
    /// would be sent). When it no longer does, the motion bent since the tick before, whose
    /// curve still did: that tick's state goes (a greedy fit of the track by the client's own
    /// curves), unless it follows the state sent before by less than [`OFF_GRID_MIN_GAP`]. A
    /// change of the game's flags goes at once, in this tick's state (flags switch at the
    /// state that set them). A pending teleport waits for the grid, as before.
    fn off_grid(
        &mut self,
        pose: (Entity, &Transform, u8),
        (now_tick, now, due_now): (u32, f64, bool),
        (error, mode): (f32, SmoothingMode),
        sent: &mut SentStates,
    ) -> Option<(u32, WireProxyState)> {
        let last = match self.last_sent {
            Some(last) if !self.teleport && now_tick > last.tick => last,
            _ => {
                self.track.clear();
                return None;
            }
        };
        // (No teleport is pending here: that returned above.)
        let wire = self.wire(pose);
        let current = wire.to_state(now_tick, now);
        // (Sent or not, the boxes recorded at this tick are posed from it: it may be sent
        // next tick, off the grid.)
        sent.sample(current);
        let span = current.time - last.time;
        let fits = |track: &[(WireProxyState, unlag_core::ProxyState)]| {
            track.iter().all(|(_, s)| {
                let alpha = ((s.time - last.time) / span) as f32;
                unlag_core::evaluate(mode, &last, &current, alpha)
                    .0
                    .distance(s.position)
                    <= error
            })
        };
        let gap_since_last =
            |s: &unlag_core::ProxyState| s.time - last.time + 1e-9 >= OFF_GRID_MIN_GAP;
        let chosen = if current.flags != last.flags && !due_now && gap_since_last(&current) {
            // (Drawn from the state before, the flags would switch an interval late.)
            Some((wire.clone(), current))
        } else if !fits(&self.track) {
            self.track
                .last()
                .filter(|(_, s)| gap_since_last(s))
                .cloned()
        } else {
            None
        };
        let sent_now = chosen.map(|(wire, mut state)| {
            state.off_grid = true;
            sent.push(state);
            self.last_sent = Some(state);
            self.track.clear();
            self.off_grid_since.push((state.tick, wire.clone()));
            (state.tick, wire)
        });
        if !due_now && sent_now.as_ref().is_none_or(|(tick, _)| *tick != now_tick) {
            self.track.push((wire, current));
        }
        sent_now
    }

    /// The state it sent on its grid at `tick`, byte for byte, if still kept.
    fn sent_at(&self, tick: u32) -> Option<&WireProxyState> {
        let i = self.sent_wires.partition_point(|(t, _)| *t < tick);
        self.sent_wires
            .get(i)
            .filter(|(t, _)| *t == tick)
            .map(|(_, w)| w)
    }

    /// The newest state it sent at or before `tick` and before its newest, byte for byte, and
    /// its tick, if still kept.
    fn sent_at_or_before(&self, tick: u32) -> Option<&(u32, WireProxyState)> {
        let newest = self.sent_wires.back()?.0;
        let limit = tick.min(newest.checked_sub(1)?);
        let after = self.sent_wires.partition_point(|(t, _)| *t <= limit);
        after.checked_sub(1).and_then(|i| self.sent_wires.get(i))
    }
}

/// Proxies sent this far apart or further, seconds, get their previous state as their trail
/// copy, on every link whose client has reported its delay: at 1 Hz a burst that takes a state
/// and its repeat (a quarter interval later) leaves a gap of two seconds, which the states'
/// runs at that interval do not show (they read near 0), and a copy of the state at the view
/// (the delay is about an interval) would be one the client has. The next update brings the
/// lost one. (Grid corner of 1 Hz and 20 % loss in bursts of 10, seeds 1–5: pops of 0, 50, 87,
/// 38 and 331 mm; with this copy 21, 9, 87, 0 and 0, and with slow proxies' longer eases too
/// ([`unlag_core::ease_time`]) 1.1, 9.2, 0, 0 and 0. A copy of the state at the view instead:
/// 150, 105, 125, 100 and 331.)
const SLOW_TRAIL_INTERVAL: f64 = 0.5;

/// How much further back than the view time a client has when an update arrives its trail copy
/// is taken, seconds: the server knows the client's delay from its last report (a burst that
/// took the reports took them too, while the delay grew) and the trip on average. Taken after
/// the view, the copy leaves the client drawing a curve from before the burst to it (over the
/// grid's corner of 20 % loss in bursts of 10 with a 20-fps listen host, seeds 1–8: pops of
/// up to 504 mm with no margin, none over 9 mm with 0.05 s, one of 86 mm with 0.1 s).
const TRAIL_MARGIN: f64 = 0.05;

/// How far back, in ticks, the trail copies sent to a client go with each update (see
/// [`SmoothingSettings::trail_runs`]): to the state it will be drawing when the update arrives,
/// its reported delay less the one-way trip, and [`TRAIL_MARGIN`]; `None` for a client whose
/// losses do not run (or that has not said). `tick`: a tick's length, seconds.
fn trail_lag(
    remote: Option<&unlag_net::RemoteClientClock>,
    settings: &SmoothingSettings,
    tick: f64,
) -> Option<u32> {
    let remote = remote.filter(|r| r.reported && r.state_loss_runs >= settings.trail_runs)?;
    let lag = (remote.interpolation_delay - remote.rtt / 2.0).clamp(0.0, MAX_TRAIL_LAG);
    (tick > 0.0 && lag.is_finite()).then(|| ((lag + TRAIL_MARGIN) / tick).ceil() as u32)
}

/// Sends every client the states `off_grid` of slow proxies (sampled at the tick each
/// carries) that it is sent in full now (not its own, nor any at a reduced rate or dormant to
/// it, nor one from before its awake spell), one [`StatesKind::OffGrid`] message per tick,
/// noted among its state messages (in frame `frame`). Returns how many states went, over
/// every client.
fn send_off_grid(
    mut off_grid: Vec<(u32, WireProxyState, Option<Entity>)>,
    frame: u64,
    links: &mut StateLinks,
) -> u64 {
    if off_grid.is_empty() {
        return 0;
    }
    off_grid.sort_by_key(|(tick, ..)| *tick);
    let mut count = 0;
    for (link, mut sender, _, mut traffic, interest, mut schedule, _, mut log, _) in links {
        for group in off_grid.chunk_by(|a, b| a.0 == b.0) {
            let states: Vec<WireProxyState> = group
                .iter()
                .filter(|(tick, s, owner)| {
                    *owner != Some(link)
                        && schedule.as_ref().is_none_or(|schedule| {
                            // (Never one from before the pair's awake spell: the client
                            // starts the proxy afresh at the spell's first state, and took a
                            // copy of one from before it for the spell's start, drawing the
                            // proxy at its new place 0.9 s early, 4.5 m off.)
                            schedule
                                .pairs
                                .get(&s.entity)
                                .is_some_and(|p| p.awake && *tick >= p.awake_since)
                                && interest.is_none_or(|i| i.relevance(s.entity) == Relevance::Full)
                        })
                })
                .map(|(_, s, _)| s.clone())
                .collect();
            if states.is_empty() {
                continue;
            }
            if let Some(log) = log.as_deref_mut() {
                let message = log.begin();
                if let Some(schedule) = schedule.as_deref_mut() {
                    for state in &states {
                        if let Some(pair) = schedule.pairs.get_mut(&state.entity) {
                            pair.sent.note(message);
                        }
                    }
                }
                log.end(message, group[0].0, frame);
            }
            count += states.len() as u64;
            traffic.send_counted::<UnreliableChannel, _>(
                &mut sender,
                ProxyUpdates {
                    tick: group[0].0,
                    states,
                    kind: StatesKind::OffGrid,
                    ..default()
                },
            );
        }
    }
    count
}

/// Sends every client the repeats due of slow proxies' states that it was sent the original
/// of (not its own, nor any it is not interested in now), one message per tick they were
/// sampled at.
fn send_repeats(mut repeats: Vec<(u32, WireProxyState, Option<Entity>)>, links: &mut StateLinks) {
    if repeats.is_empty() {
        return;
    }
    repeats.sort_by_key(|(tick, ..)| *tick);
    for (link, mut sender, _, mut traffic, _, schedule, _, _, _) in links {
        let got_original = |tick: u32, proxy: Entity| {
            schedule.as_ref().is_none_or(|s| {
                s.pairs
                    .get(&proxy)
                    .is_some_and(|p| p.awake && p.last_tick == Some(tick))
            })
        };
        // The original was the first after a dormant spell: flagged, and the client told.
        let woke = |tick: u32, proxy: Entity| {
            schedule.as_ref().is_some_and(|s| {
                s.pairs
                    .get(&proxy)
                    .is_some_and(|p| p.woke && p.awake_since == tick)
            })
        };
        for group in repeats.chunk_by(|a, b| a.0 == b.0) {
            let mut woken = Vec::new();
            let states: Vec<WireProxyState> = group
                .iter()
                .filter(|(tick, s, owner)| *owner != Some(link) && got_original(*tick, s.entity))
                .map(|(tick, s, _)| {
                    let mut s = s.clone();
                    // (A client that lost the original would start the proxy from its
                    // repeat unflagged: drawn across the spell if the notice is late too.)
                    if woke(*tick, s.entity) {
                        s.flags |= TELEPORT_BIT;
                        woken.push(s.entity);
                    }
                    s
                })
                .collect();
            if !states.is_empty() {
                traffic.send_counted::<UnreliableChannel, _>(
                    &mut sender,
                    ProxyUpdates {
                        tick: group[0].0,
                        states,
                        kind: StatesKind::Repeat,
                        woken,
                        asleep: Vec::new(),
                        ..default()
                    },
                );
            }
        }
    }
}

/// The interval a client is sent a proxy's states at, in whole ticks of `tick` seconds
/// (rounded down, at least 1), when it is not the server's nominal one: the proxy's `own`
/// interval (seconds; `own_rate`: it has a rate of its own, [`NetUpdateFrequency`]) or its
/// reduced rate's at `relevance`, whichever is longer (a reduced rate takes every state due
/// that is at least its interval after the last). `None`: the nominal interval, as every
/// proxy without a rate of its own that is relevant in full.
fn pair_rate(own: f64, own_rate: bool, relevance: Relevance, tick: f64) -> Option<u16> {
    let reduced = match relevance {
        Relevance::Reduced(hz) => Some(unlag_core::reduced_interval(hz)),
        Relevance::Full | Relevance::Dormant => None,
    };
    if !own_rate && reduced.is_none() {
        return None;
    }
    Some(unlag_core::whole_ticks(
        own.max(reduced.unwrap_or(0.0)),
        tick,
    ))
}

/// Sends every client, in one message, the states `due` at tick `now_tick` (server time `now`,
/// seconds) that its interest lets through: not its own; a reduced proxy's on its reduced
/// rate's grid; none of a dormant one, whose going dormant the client is told once (reliably),
/// and whose first state after that is flagged a teleport, so the client snaps to it once
/// rather than sweep from where it left it. A client whose losses run in bursts also gets, in
/// the same datagram, each of those proxies' state that it will be drawing when they arrive
/// (sent before, as repeats: see [`SmoothingSettings::trail_runs`]).
///
/// A state goes as its difference from the newest state of the proxy this client
/// acknowledged (a [`DeltaProxyState`]: the client's transport acknowledged every packet of the
/// frame its `Due` message left in, [`unlag_core::AckLedger::frame_acknowledged`]), when that
/// was sent at least [`SPAWN_MARGIN`] and two round trips after the first state of the pair's
/// awake spell, is no older than [`MAX_BASELINE_AGE`], came after the client's last
/// [`ProxyResync`], and the flags did not change; in full otherwise. Each (proxy, baseline)
/// is encoded once for every client that acknowledged the same baseline.
///
/// Returns how many trail copies and how many delta states went.
fn send_states(
    due: &[DueState],
    (now_tick, now, frame): (u32, f64, u64),
    (links, shares): (&mut StateLinks, Option<unlag_net::WorkShares>),
    trails: &Trails,
) -> (u64, u64) {
    if due.is_empty() {
        return (0, 0);
    }
    let tick_us = unlag_core::quantize::tick_micros(trails.tick);
    let max_back = (MAX_BASELINE_AGE / trails.tick).floor() as u32;
    // Every due state encoded once: each client's update copies the bytes of those it gets
    // (a big server sends the same few hundred states to every client).
    let encoding = EncodedStates::encode(due.iter().map(|(wire, ..)| wire));
    // Each client's update is its own work (its link's components; the due states and the
    // proxies only read): a big server's clients go in shares over the compute pool's threads
    // (`unlag_net::for_each_in_shares`), each share with its own cache of deltas. What a
    // client is sent does not depend on which thread built it (a share's cache holds what
    // any would encode), so a server's matches are the same to the bit on one thread.
    let mut items: Vec<_> = links.iter_mut().collect();
    let shares =
        unlag_net::for_each_in_shares_at_most(shares, &mut items, |item, work: &mut LinkWork| {
            let (link, sender, dormancy, traffic, interest, schedule, remote, log, ledger) = item;
            let (link, interest, remote, ledger) = (*link, *interest, *remote, *ledger);
            work.cache.fit(due.len());
            let DeltaCache {
                bytes: delta_bytes,
                at: delta_at,
            } = &mut work.cache;
            let mut asleep: Vec<Entity> = Vec::new();
            let (mut trails_sent, mut deltas) = (0u64, 0u64);
            // The client's state messages whose frames it acknowledged in full.
            let acknowledged = match (log.as_deref_mut(), ledger) {
                (Some(log), Some(ledger)) if trails.settings.delta_states => {
                    Some(log.acknowledged(&ledger.0))
                }
                _ => None,
            };
            let baselines_from = schedule.as_ref().map_or(0, |s| s.baselines_from);
            // How long after a pair's first state (or its first after a dormant spell) its states
            // go in full, ticks: the client maps a proxy's entity only once lightyear replicates
            // its spawn, which comes after its first states (two ticks after, on the testbed), or
            // a reliable resend later when lost; a state that came before is kept under no
            // entity, and a delta on it could not be decoded.
            let spawn_ticks = {
                let rtt = remote.map_or(0.0, |r| unlag_core::finite_non_negative(r.rtt));
                ((SPAWN_MARGIN + 2.0 * rtt.min(1.0)) / trails.tick).ceil() as u32
            };
            // This update's number among the client's state messages (`unlag_net::StatesSentTo`):
            // each proxy's pair notes it.
            let message = log.as_deref_mut().map(|log| log.begin());
            let lag = trail_lag(remote, trails.settings, trails.tick);
            let reported = remote.is_some_and(|r| r.reported);
            // (tick, state, whether it is the first of a proxy's awake spell).
            let mut trail: Vec<((u32, WireProxyState), bool)> = Vec::new();
            // The states sent as they were encoded, and those changed for this client.
            let mut encoded = encoding.none();
            let mut encoded_deltas =
                EncodedDeltas::with_capacity(due.len(), due.len() * DELTA_BYTES_GUESS);
            let mut states = Vec::new();
            let mut woken = Vec::new();
            for (index, (wire, owner, slow, own)) in due.iter().enumerate() {
                if *owner == Some(link) {
                    continue;
                }
                // The state it will be drawing when this arrives, if the client's losses run; of a
                // proxy woken since (at `since`), its first state after the spell, a teleport.
                let trail_at = |since: u32| {
                    // (One tick back: the newest state before this one.)
                    let lag = if *slow && reported { 1 } else { lag? };
                    let trail = (trails.of)(wire.entity, now_tick.saturating_sub(lag))?;
                    if trail.0 >= since {
                        return Some((trail, false));
                    }
                    let (tick, mut first) = (trails.of)(wire.entity, since)?;
                    first.flags |= TELEPORT_BIT;
                    (tick == since).then_some(((tick, first), true))
                };
                let Some(schedule) = schedule.as_deref_mut() else {
                    encoded.push(index);
                    trail.extend(trail_at(0));
                    continue;
                };
                let relevance = interest.map_or(Relevance::Full, |i| i.relevance(wire.entity));
                let pair = schedule.pairs.entry(wire.entity).or_default();
                if !pair.take(relevance, now) {
                    if relevance == Relevance::Dormant && pair.awake {
                        pair.awake = false;
                        asleep.push(wire.entity);
                        schedule.asleep.retain(|(e, ..)| *e != wire.entity);
                        schedule.asleep.push((wire.entity, now_tick, 0));
                    }
                    continue;
                }
                // A rate other than the nominal one, or back to it: told the client from this state.
                let rate = pair_rate(
                    own.unwrap_or(trails.nominal),
                    own.is_some(),
                    relevance,
                    trails.tick,
                );
                if rate != pair.rate {
                    pair.rate = rate;
                    schedule.rates.retain(|(r, _)| r.entity != wire.entity);
                    let told = ProxyRate {
                        entity: wire.entity,
                        since: now_tick,
                        interval_ticks: rate.unwrap_or(0),
                        // (Its own rate's states go twice to every client sent the original.)
                        repeated: unlag_core::repeat_after(own.unwrap_or(trails.nominal)).is_some(),
                    };
                    schedule.rates.push((told, 0));
                }
                let woke = !pair.awake && pair.sent_before;
                if woke {
                    let mut wire = wire.clone();
                    wire.flags |= TELEPORT_BIT;
                    woken.push(wire.entity);
                    schedule.asleep.retain(|(e, ..)| *e != wire.entity);
                    states.push(wire);
                } else {
                    // The newest state of this spell the client acknowledged, if young enough.
                    let base = acknowledged
                        .as_ref()
                        .and_then(|a| a.newest_tick(&pair.due_sent))
                        .filter(|&t| {
                            pair.awake
                                && t >= pair.deltas_from.max(baselines_from)
                                && t < now_tick
                                && now_tick - t <= max_back
                        });
                    let bytes = base.and_then(|t| {
                        let known = &mut delta_at[index];
                        if let Some(&(_, bytes)) = known.iter().find(|(at, _)| *at == t) {
                            return bytes;
                        }
                        let encoded = (trails.baseline)(wire.entity, t).and_then(|baseline| {
                            let delta =
                                DeltaProxyState::between(&baseline, wire, now_tick - t, tick_us)?;
                            let start = delta_bytes.len() as u32;
                            *delta_bytes = delta.encode_body(core::mem::take(delta_bytes));
                            Some((start, delta_bytes.len() as u32))
                        });
                        known.push((t, encoded));
                        encoded
                    });
                    match bytes {
                        Some((a, b)) => {
                            encoded_deltas
                                .push_encoded(wire.entity, &delta_bytes[a as usize..b as usize]);
                            deltas += 1;
                        }
                        None => encoded.push(index),
                    }
                }
                if !pair.awake {
                    if woke {
                        pair.previous_spell = pair.last_tick.map(|last| (pair.awake_since, last));
                    }
                    pair.awake_since = now_tick;
                    pair.woke = woke;
                    // Back from a dormant spell the client has the entity (dormancy keeps it): the
                    // spell's first state (sent in full) will do once acknowledged. Its first
                    // spell waits for the entity's spawn.
                    pair.deltas_from = if woke {
                        now_tick
                    } else {
                        now_tick.saturating_add(spawn_ticks)
                    };
                }
                pair.awake = true;
                pair.sent_before = true;
                pair.last_tick = Some(now_tick);
                if let Some(message) = message {
                    pair.sent.note(message);
                    pair.due_sent.note(message);
                }
                // Never one from before the spell (the client starts the proxy afresh at its
                // first state): that first state instead, woken again, as long as the client may
                // have missed it and would sweep across the spell (it is sent no states of it).
                trail.extend(trail_at(pair.awake_since));
            }
            // Those gone dormant lately ride along, a few messages each, and so do rates changed.
            let mut told = Vec::new();
            let mut rates = Vec::new();
            if let Some(schedule) = schedule.as_deref_mut() {
                for (entity, since, times) in &mut schedule.asleep {
                    told.push((*entity, *since));
                    *times += 1;
                }
                schedule
                    .asleep
                    .retain(|(.., times)| *times < ASLEEP_REPEATS);
                for (rate, times) in &mut schedule.rates {
                    rates.push(*rate);
                    *times += 1;
                }
                schedule.rates.retain(|(_, times)| *times < RATE_REPEATS);
            }
            let carried = !states.is_empty() || !encoded.is_empty() || !encoded_deltas.is_empty();
            if let (Some(log), Some(message)) = (log.as_deref_mut(), message)
                && carried
            {
                log.end(message, now_tick, frame);
            }
            if carried || !told.is_empty() || !rates.is_empty() {
                let update = ProxyUpdates {
                    tick: now_tick,
                    states,
                    kind: StatesKind::Due,
                    woken,
                    asleep: told,
                    rates,
                    deltas: Vec::new(),
                    encoded,
                    encoded_deltas,
                };
                let size = update.wire_size();
                traffic.send_counted_sized::<UnreliableChannel, _>(sender, update, size);
            }
            // After the update, in the same datagram (read after it): one message per tick the
            // copies were sampled at, as repeats (their lateness is by design).
            trail.sort_by_key(|((tick, _), _)| *tick);
            for group in trail.chunk_by(|a, b| a.0.0 == b.0.0) {
                trails_sent += group.len() as u64;
                if let (Some(log), Some(schedule)) = (log.as_deref_mut(), schedule.as_deref_mut()) {
                    let message = log.begin();
                    for ((_, state), _) in group {
                        if let Some(pair) = schedule.pairs.get_mut(&state.entity) {
                            pair.sent.note(message);
                        }
                    }
                    log.end(message, group[0].0.0, frame);
                }
                traffic.send_counted::<UnreliableChannel, _>(
                    sender,
                    ProxyUpdates {
                        tick: group[0].0.0,
                        states: group.iter().map(|((_, s), _)| s.clone()).collect(),
                        kind: StatesKind::Repeat,
                        woken: group
                            .iter()
                            .filter(|(_, first)| *first)
                            .map(|((_, s), _)| s.entity)
                            .collect(),
                        ..default()
                    },
                );
            }
            if !asleep.is_empty() {
                traffic.send_counted::<ReliableChannel, _>(
                    dormancy,
                    ProxyDormancy {
                        tick: now_tick,
                        entities: asleep,
                    },
                );
            }
            work.trails += trails_sent;
            work.deltas += deltas;
        });
    shares
        .iter()
        .fold((0, 0), |(t, d), w| (t + w.trails, d + w.deltas))
}

/// A share of [`send_states`]' clients: its cache of deltas, and the trail copies and delta
/// states it sent.
#[derive(Default)]
struct LinkWork {
    cache: DeltaCache,
    trails: u64,
    deltas: u64,
}

/// A share's deltas encoded so far in one [`send_states`]: each (proxy, baseline tick)'s
/// delta once for every client that acknowledged that baseline.
#[derive(Default)]
struct DeltaCache {
    /// The deltas' bytes, one after another.
    bytes: Vec<u8>,
    /// By due state: the baselines its deltas were encoded from.
    at: Vec<Baselines>,
}

impl DeltaCache {
    /// Ready for `due` states, a slot each (a cache serves one call, whose due states stay).
    fn fit(&mut self, due: usize) {
        if self.at.len() != due {
            self.at.clear();
            self.at.resize_with(due, Baselines::default);
            self.bytes.clear();
        }
    }
}

/// One due state's (baseline tick, its delta's range in a [`DeltaCache`]'s bytes; `None`:
/// only a full state will do), a few (the baselines the clients acknowledged differ by their
/// round trips): the first four in place (a vector each was one allocation per due state per
/// share per tick on a big server).
type Baselines = smallvec::SmallVec<[(u32, Option<(u32, u32)>); 4]>;
