//! The server's shot intake: each client's [`FireRequest`] copies are received, the best copy of
//! each shot is held until its shooter's moves have caught up with it, judged
//! ([`ShotJudge`](crate::ShotJudge)), and its verdict applied: damage dealt, the shooter
//! answered, everyone else shown the shot.

use crate::ammo::ServerArmory;
use crate::health::{Blow, Harm};
use crate::judge::{Arrival, ShotJudge, ShotVerdict, TargetHit};
use crate::protocol::{
    COSMETIC_BATCH, ConfirmedHit, CosmeticFire, CosmeticFires, FireRequest, FireResult, Rejection,
};
use crate::rules::outside_lag_range;
use crate::settings::{CombatSettings, Weapons};
use crate::stats::{CombatStats, LoggedShot, ShotLog, keep_latest};
use bevy::platform::collections::HashMap;
use bevy::prelude::*;
use lightyear::prelude::server::ClientOf;
use lightyear::prelude::*;
use std::collections::VecDeque;
use unlag_core::Seq16;
use unlag_net::{
    EncodedRuns, HeldShotsOldest, MoveTrail, NetClock, ProxyInterest, RemoteClientClock,
    RemoteClockAt, Riders,
};

/// Longest a shot waits beyond [`CombatSettings::max_shot_hold`] for the move of its shooter it
/// names, seconds: the move may wait to be played out (the playout's wait, and its catch-up
/// after a stall), or have been lost with the burst that the shot's copy outlived (the client
/// sends it again once the server reports it missing, a round trip and a little later).
const PLAYOUT_HOLD: f64 = 1.0;

/// How long past the copies' span a shot whose first copy arrived late waits for a later one,
/// seconds (the jitter spread of a link the copies can come through).
const COPY_JITTER_WAIT: f64 = 0.06;

/// Longest a shot that arrived with a rise in its link's trips waits to see whether the rise
/// lasts, seconds ([`RemoteClockAt::trip_rise`](unlag_net::RemoteClockAt::trip_rise)): the
/// server's packets to a client go out every proxy interval or sooner (beats, pings), and
/// each datagram back that acknowledges one times a trip. Without a trip after it, the rise
/// counts for nothing.
const RISE_CONFIRM_WAIT: f64 = 0.25;

/// Most shots one client may have waiting; beyond, the oldest is judged at once.
const MAX_HELD_SHOTS: usize = 16;

/// A shot naming a move further ahead of the server's than this is not waited for: the movement
/// plugin's saved moves (256 by default, 4.3 s at 60 moves/s), beyond which a client's moves
/// are lost to it anyway. After a second-long burst of losses an honest client is 100 moves
/// ahead of what the server has played.
const MAX_MOVES_AHEAD: i32 = 256;

/// A shot waiting for its shooter's moves.
pub(crate) struct HeldShot {
    /// The copy judged: the first to arrive, or a later one that arrived in time.
    request: FireRequest,
    arrival: Arrival,
    /// When the first copy arrived, server seconds.
    first: f64,
    /// Whether the copy held arrived later (or sooner) after the present it stamps than this
    /// client's view reports did (the judge's arrival-lag check): under heavy jitter one copy
    /// can land in a tail the reports have not sampled. Copies travel apart, so a later copy
    /// that arrived within the range stands in for it; a backtracking client's copies are
    /// all late.
    late: bool,
}

/// The shots each client link has waiting, oldest first.
pub(crate) type HeldShots = HashMap<Entity, VecDeque<HeldShot>>;

/// The links the intake reads shots from and answers.
type ShotLinks<'w, 's> = Query<
    'w,
    's,
    (
        Entity,
        &'static mut MessageReceiver<FireRequest>,
        &'static mut Riders<FireResult>,
        &'static RemoteClientClock,
    ),
    With<ClientOf>,
>;

/// The links everyone else's shots are shown on, with what each client can see or hear.
type EchoLinks<'w, 's> = Query<
    'w,
    's,
    (
        Entity,
        &'static mut Riders<CosmeticFires>,
        Option<&'static ProxyInterest>,
    ),
    With<ClientOf>,
>;

/// Judges every shot received, once the server has processed the moves it names, and applies
/// the verdicts. (Parameters grouped: the rules and the clock; the figures kept; the links;
/// the shooters; the judge and the harm it may do; the moves shots wait for.)
pub(crate) fn judge_shots(
    mut commands: Commands,
    (settings, weapons, clock, time, real): (
        Res<CombatSettings>,
        Res<Weapons>,
        Res<NetClock>,
        Res<Time>,
        Res<Time<Real>>,
    ),
    (mut stats, mut log, work): (
        ResMut<CombatStats>,
        Option<ResMut<ShotLog>>,
        Option<Res<unlag_net::ServerWork>>,
    ),
    (mut links, echo): (ShotLinks, EchoLinks),
    mut shooters: Query<(Entity, &ControlledBy, &mut ServerArmory, &Transform)>,
    mut judge: ParamSet<(ShotJudge, Harm)>,
    (trails, mut oldest_held, mut held): (
        Query<&MoveTrail>,
        ResMut<HeldShotsOldest>,
        Local<HeldShots>,
    ),
) {
    let _work = work.as_deref().map(|w| w.time(unlag_net::WorkPart::Shots));
    if weapons.table.is_none() {
        return;
    }
    let mut echoes: Vec<(Entity, CosmeticFire)> = Vec::new();
    // Each link's character, found once per frame (not once per shot).
    let by_link: HashMap<Entity, Entity> = shooters
        .iter()
        .map(|(character, controlled, ..)| (controlled.owner, character))
        .collect();
    held.retain(|link, _| links.contains(*link));
    let (now, frame) = (clock.server_time, time.delta_secs_f64());
    for (link, mut requests, mut results, remote) in &mut links {
        let queue = held.entry(link).or_default();
        let armory = by_link
            .get(&link)
            .and_then(|character| shooters.get(*character).ok())
            .map(|(_, _, armory, _)| armory);
        let judged_already = |request: &FireRequest| {
            armory.is_some_and(|armory| {
                crate::judge::copy_of_judged(weapons.table.as_ref(), request, armory)
            })
        };
        receive_copies(
            queue,
            (&mut requests, &judged_already),
            remote,
            &settings,
            (now, frame, real.elapsed_secs_f64()),
            &mut stats,
        );
        let trail = by_link.get(&link).and_then(|c| trails.get(*c).ok());
        let copies_wait = settings.copy_age_allowed(remote.client_frame) + COPY_JITTER_WAIT;
        let frame_known = remote.client_frame_known();
        while let Some((request, mut arrival)) = take_ready(
            queue,
            (trail, frame_known, remote),
            &settings,
            now,
            copies_wait,
        ) {
            // A shot that came before its client's frame time was known waited for it: the
            // frame is judged as known now (a client's frame rate does not change in the
            // moment it waited, and every copy travelled through frames of that length).
            if !arrival.link.client_frame_known && frame_known {
                stats.waited_for_frame += 1;
                arrival.link.client_frame = remote.client_frame;
                arrival.link.recent_client_frame = remote.recent_client_frame();
                arrival.link.client_frame_known = true;
            }
            let Some((shooter, _, mut armory, transform)) = by_link
                .get(&link)
                .and_then(|character| shooters.get_mut(*character).ok())
            else {
                *stats.rejected.entry(Rejection::NoShooter).or_default() += 1;
                continue;
            };
            let position = transform.translation;
            let (verdict, ammo) = judge_timed(
                &judge.p0(),
                (&request, arrival, link),
                (shooter, &mut armory, position),
                &mut stats,
            );
            let judged = Judged {
                request: &request,
                link,
                shooter,
                rtt: remote.rtt,
                now,
                ammo,
                rewound: settings.rewind,
            };
            let log = log.as_deref_mut();
            if let Some(answer) = apply(
                judged,
                verdict,
                &mut commands,
                &mut judge,
                &mut stats,
                log,
                &mut echoes,
            ) {
                // (It rides with the client's next proxy states: `unlag_net::Riders`.)
                results.hold(answer, real.elapsed_secs_f64());
            }
        }
    }
    let oldest = oldest_plausible(&held);
    if oldest_held.0 != oldest {
        oldest_held.0 = oldest;
    }
    send_echoes(&echoes, echo, real.elapsed_secs_f64());
}

/// Takes this frame's copies of `remote`'s shots into its `queue`: a new shot joins the end,
/// a copy of one waiting stands in for it if the one waiting arrived outside the range of the
/// client's view reports' lags and the copy within (under heavy jitter one copy can land in a
/// tail the reports have not sampled; copies travel apart, and a backtracking client's copies
/// are all late), and a copy of a shot judged already (`judged_already`: the judge would
/// refuse it as [`Rejection::Duplicate`]) is counted and dropped. `(now, frame, real)`: the
/// server's time, its frame and the real time, seconds.
///
/// Copies are most of what arrives (a client sends each shot two or three times): those of a
/// shot judged or waiting with its arrival in range are dropped before the link's figures
/// are read for them (at 256 players those figures, read for each link that sent a copy in
/// a frame, were 2.2-2.4 % of the server's update).
fn receive_copies(
    queue: &mut VecDeque<HeldShot>,
    (requests, judged_already): (
        &mut MessageReceiver<FireRequest>,
        &dyn Fn(&FireRequest) -> bool,
    ),
    remote: &RemoteClientClock,
    settings: &CombatSettings,
    (now, frame, real): (f64, f64, f64),
    stats: &mut CombatStats,
) {
    // Decided once, as the copy arrives, against the view reports' range then (taken once per
    // link and frame, and only when a shot came: it sorts the window).
    let mut link_now: Option<RemoteClockAt> = None;
    for request in requests.receive() {
        // (Among the newest few: copies arrive within frames of each other, and a flood costs
        // no more than that per request.)
        let waiting = queue
            .iter()
            .rev()
            .take(MAX_HELD_SHOTS)
            .position(|h| h.request.fire_index == request.fire_index)
            .map(|back| queue.len() - 1 - back);
        if waiting.is_some_and(|i| !queue[i].late) || waiting.is_none() && judged_already(&request)
        {
            stats.duplicates += 1;
            continue;
        }
        let link_then = *link_now.get_or_insert_with(|| remote.at(now, frame));
        let lag = link_then.lag_of(now, request.sent_view_time, request.sent_delay);
        let arrival = Arrival {
            time: now,
            real,
            frame,
            link: link_then,
            moved_to: None,
            witnessed: remote.witnessed(now, lag),
        };
        // Outside the reports' range on either side: a copy can land in either tail of the
        // up-link's spread that the reports of the window have not sampled yet.
        // (The range widened by a rise in the link's latest trips, as the judge's is.)
        let late = link_then.view_lag_range.is_some_and(|(least, most)| {
            let most = most + link_then.trip_rise(frame);
            outside_lag_range(settings, (least, most), lag)
        });
        if let Some(waiting) = waiting.map(|i| &mut queue[i]) {
            if !late {
                waiting.request = request;
                waiting.arrival = arrival;
                waiting.late = false;
            }
            stats.duplicates += 1;
            continue;
        }
        queue.push_back(HeldShot {
            request,
            first: arrival.time,
            arrival,
            late,
        });
    }
}

/// The oldest shot of `queue` if its turn has come, in order of arrival: once the shooter's
/// moves (its `trail`) have caught up with the move it names, or it has waited long enough
/// for them, or names a move too far ahead to wait for; a late copy first waits `copies_wait`
/// seconds for a copy in time; and every shot waits as long for its client's frame time to be
/// known (`frame_known`: a shot fired in the first moments after joining came before the
/// reports that show it, and judged as from a client with no frame, 30-fps clients' first
/// shots were refused `BadViewTime`). A shot that came with a rise in its link's trips waits
/// for a trip after it (up to [`RISE_CONFIRM_WAIT`]): the rise counts only as far as it
/// lasts. Its arrival then knows where that move left the shooter.
fn take_ready(
    queue: &mut VecDeque<HeldShot>,
    (trail, frame_known, remote): (Option<&MoveTrail>, bool, &RemoteClientClock),
    settings: &CombatSettings,
    now: f64,
    copies_wait: f64,
) -> Option<(FireRequest, Arrival)> {
    let front = queue.front()?;
    let seq = front.request.move_seq.map(Seq16);
    let waited = now - front.first;
    if front.late && waited < copies_wait {
        return None;
    }
    // Held as long as a shot may be, or one too many held: it goes, whatever it waits for.
    let held_out = waited >= settings.max_shot_hold + PLAYOUT_HOLD || queue.len() > MAX_HELD_SHOTS;
    if !frame_known && !held_out {
        return None;
    }
    let rose = front.arrival.link.trip_rise(front.arrival.frame) > 0.0;
    let after = rose
        .then(|| remote.shortest_trip_after(front.arrival.time))
        .flatten();
    if rose && after.is_none() && waited < RISE_CONFIRM_WAIT && !held_out {
        return None;
    }
    let ready = match (trail, seq) {
        (Some(trail), Some(seq)) => {
            trail.reached(seq)
                // A move that has arrived is only waiting its turn in the playout; one lost is
                // sent again once the client sees it missing.
                || held_out
                || trail.newest().is_none_or(|n| seq.diff(n) > MAX_MOVES_AHEAD)
        }
        _ => true,
    };
    if !ready {
        return None;
    }
    let HeldShot {
        request,
        mut arrival,
        ..
    } = queue.pop_front()?;
    // The rise as far as the trips after the shot keep it: a step in the link stays, a burst
    // of losses both ways is gone with the next datagram.
    if rose {
        arrival.link.fresh_trip = arrival.link.fresh_trip.zip(after).map(|(a, b)| a.min(b));
    }
    arrival.moved_to = trail
        .zip(seq)
        .and_then(|(trail, seq)| trail.position_after(seq));
    Some((request, arrival))
}

/// Judges the copy `request` that arrived at `arrival` on `link` for its shooter (the
/// character, its armory and where it is now, metres), timing the judgement into
/// [`CombatStats::judge_micros`]: the verdict, and the rounds left in the weapon.
fn judge_timed(
    judge: &ShotJudge,
    (request, arrival, link): (&FireRequest, Arrival, Entity),
    (shooter, armory, position): (Entity, &mut ServerArmory, Vec3),
    stats: &mut CombatStats,
) -> (Result<ShotVerdict, Rejection>, u32) {
    let started = std::time::Instant::now();
    let verdict = judge.judge_arrived(request, shooter, link, armory, position, arrival, stats);
    keep_latest(
        &mut stats.judge_micros,
        started.elapsed().as_secs_f64() * 1e6,
    );
    (verdict, armory.ammo(request.weapon).unwrap_or(0))
}

/// A judged shot: the copy judged, its shooter's link and character, the link's round trip
/// (seconds), the server's time (seconds), the rounds left in its weapon and whether the
/// server rewinds.
struct Judged<'a> {
    request: &'a FireRequest,
    link: Entity,
    shooter: Entity,
    rtt: f64,
    now: f64,
    ammo: u32,
    rewound: bool,
}

/// Applies a verdict: counted; a projectile launched, or hits logged (with a [`ShotLog`]),
/// dealt and shown to everyone else (`echoes`); a refusal counted. What the shooter is
/// answered, or `None` for no answer (copies, replays).
fn apply(
    judged: Judged,
    verdict: Result<ShotVerdict, Rejection>,
    commands: &mut Commands,
    judge: &mut ParamSet<(ShotJudge, Harm)>,
    stats: &mut CombatStats,
    log: Option<&mut ShotLog>,
    echoes: &mut Vec<(Entity, CosmeticFire)>,
) -> Option<FireResult> {
    let Judged {
        request,
        link,
        shooter,
        rtt,
        now,
        ammo,
        rewound,
    } = judged;
    count_verdict(stats, &verdict, rewound, request);
    let outcome = match verdict {
        Ok(ShotVerdict::Launch(projectile)) => {
            commands.spawn(projectile);
            Some(Ok(Vec::new()))
        }
        Ok(ShotVerdict::Hits { hits, ends }) => {
            if let Some(log) = log {
                log.shots.push(LoggedShot {
                    link,
                    shooter,
                    request: request.clone(),
                    rtt,
                    server_time: now,
                });
            }
            let confirmed = confirm(&mut judge.p1(), stats, hits, shooter, request);
            echoes.push((link, cosmetic(shooter, request, ends)));
            Some(Ok(confirmed))
        }
        Err(reason) => refusal(stats, reason, request, link).map(Err),
    }?;
    Some(FireResult {
        fire_index: request.fire_index,
        weapon: request.weapon,
        ammo,
        rewound,
        outcome,
    })
}

/// Counts an accepted shot, and how much of it was rewound.
fn count_verdict(
    stats: &mut CombatStats,
    verdict: &Result<ShotVerdict, Rejection>,
    rewound: bool,
    request: &FireRequest,
) {
    if verdict.is_ok() {
        stats.accepted += 1;
        if !rewound {
            stats.unrewound += 1;
        } else if request.judged_time > request.view_time {
            stats.partly_rewound += 1;
        }
    }
}

/// Counts a refusal and returns the answer the shooter gets, if any: copies of a shot already
/// judged (and replays of old ones) get none; a shot fired before its client heard it had died
/// is answered (the ammo settles), counted apart, without a warning. Others are counted always
/// and logged at the 1st, 2nd, 4th, 8th, ... of each reason: a flood of bad shots must not
/// flood the log.
fn refusal(
    stats: &mut CombatStats,
    reason: Rejection,
    request: &FireRequest,
    link: Entity,
) -> Option<Rejection> {
    match reason {
        Rejection::Duplicate => {
            stats.duplicates += 1;
            None
        }
        Rejection::ShooterDead => {
            stats.posthumous += 1;
            Some(reason)
        }
        Rejection::ShooterMoved => {
            stats.fired_before_moved += 1;
            Some(reason)
        }
        Rejection::StaleFireIndex => {
            unlag_net::warn_counted!(
                *stats.rejected.entry(reason).or_default(),
                "stale shot {} from client {link} dropped",
                request.fire_index
            );
            None
        }
        _ => {
            unlag_net::warn_counted!(
                *stats.rejected.entry(reason).or_default(),
                "shot {} of client {link} refused: {reason:?}",
                request.fire_index
            );
            Some(reason)
        }
    }
}

/// Deals an accepted shot's damage per target and returns what the shooter is told.
fn confirm(
    harm: &mut Harm,
    stats: &mut CombatStats,
    hits: Vec<TargetHit>,
    shooter: Entity,
    request: &FireRequest,
) -> Vec<ConfirmedHit> {
    let mut confirmed = Vec::with_capacity(hits.len());
    for TargetHit {
        target,
        damage,
        pellets,
        bone,
        headshot,
    } in hits
    {
        stats.pellet_hits += u64::from(pellets);
        let blow = Blow {
            shooter,
            weapon: request.weapon,
            damage,
            bone: &bone,
            headshot,
        };
        let killed = harm.deal(target, blow);
        confirmed.push(ConfirmedHit {
            target,
            bone,
            headshot,
            damage,
            pellets,
            killed,
        });
    }
    if confirmed.iter().any(|c| c.headshot) {
        stats.headshots += 1;
    }
    confirmed
}

/// What everyone but the shooter is shown of an accepted shot (effects only): where its pellets
/// stopped, as the wire carries it ([`CosmeticFire::as_sent`]: a listen server's own client
/// draws what the others do).
fn cosmetic(shooter: Entity, request: &FireRequest, ends: Vec<Vec3>) -> CosmeticFire {
    CosmeticFire {
        shooter,
        weapon: request.weapon,
        origin: request.origin,
        ends: ends.into(),
    }
    .as_sent()
}

/// The oldest time, server seconds, a shot left waiting may be judged at: the rewind's window
/// must still reach it when its turn comes. Only shots that can pass count (one stamped older
/// than its link's reports allow is refused anyway, and must not stretch the broad phase over
/// the whole history while it waits).
fn oldest_plausible(held: &HeldShots) -> Option<f64> {
    held.values()
        .flatten()
        .map(|h| {
            let link = &h.arrival.link;
            let delay = link.interpolation_delay.max(link.delay_cap).max(0.0);
            let allowed = link.view_lag_range.map_or(1.0, |(_, most)| most)
                + link.trip_rise(h.arrival.frame)
                + delay
                + 0.25;
            let at = h.request.view_time.min(h.request.judged_time);
            (at, h.arrival.time - at <= allowed)
        })
        .filter(|(t, plausible)| t.is_finite() && *plausible)
        .map(|(t, _)| t)
        .reduce(f64::min)
}

/// Shows every client the others' accepted shots it can see or hear (its interest: the shooter
/// is not dormant to it, or the shooter or the shot's origin is within its hearing): one batch
/// per client per frame (of at most [`COSMETIC_BATCH`] shots each), riding with its next proxy
/// states (`unlag_net::Riders`; `now` real time, seconds).
fn send_echoes(echoes: &[(Entity, CosmeticFire)], mut echo: EchoLinks, now: f64) {
    if echoes.is_empty() {
        return;
    }
    // Each shot encoded once: every client's batch copies the bytes of those it carries (it
    // was encoded for each client twice, once to count its size).
    let encoded = EncodedRuns::encode(echoes.iter().map(|(_, fire)| fire));
    let hold = |riders: &mut Riders<CosmeticFires>, batch: EncodedRuns<CosmeticFire>| {
        let fires = CosmeticFires {
            shots: Vec::new(),
            encoded: batch,
        };
        let bytes = fires.wire_size();
        riders.hold_sized(fires, bytes, now);
    };
    for (link, mut riders, interest) in &mut echo {
        let heard =
            |fire: &CosmeticFire| interest.is_none_or(|i| i.hears_fire(fire.shooter, fire.origin));
        let mut batch = encoded.none();
        for (index, (from, fire)) in echoes.iter().enumerate() {
            if *from == link || !heard(fire) {
                continue;
            }
            batch.push(index);
            if batch.len() == COSMETIC_BATCH {
                hold(&mut riders, core::mem::replace(&mut batch, encoded.none()));
            }
        }
        if !batch.is_empty() {
            hold(&mut riders, batch);
        }
    }
}
