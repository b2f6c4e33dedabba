//! The server's interest policy ([`InterestPolicy::Distance`]) and, per client link, when each
//! proxy's state is next due to it.

use crate::server::SmoothedProxy;
use bevy::ecs::entity::EntityHashMap;
use bevy::prelude::*;
use lightyear::core::tick::TickDuration;
use lightyear::prelude::server::ClientOf;
use lightyear::prelude::*;
use unlag_net::{
    InterestPolicy, InterestSettings, ProxyInterest, Relevance, SightTested, ViewPoint,
};

/// On a server's client link: per proxy, what was sent to that client and when its next state
/// is due there.
#[derive(Component, Default)]
pub struct InterestSchedule {
    pub(crate) pairs: EntityHashMap<PairSchedule>,
    /// Proxies that went dormant to this client lately: (proxy, the tick it went dormant at,
    /// how many state messages have told it so far). See [`ASLEEP_REPEATS`].
    pub(crate) asleep: Vec<(Entity, u32, u8)>,
    /// Proxies whose rate to this client changed lately, as told, and how many state messages
    /// have told it so far. See [`RATE_REPEATS`].
    pub(crate) rates: Vec<(crate::ProxyRate, u8)>,
    /// The oldest tick a delta state to this client may rest on: the tick after the client
    /// last said it lacked a baseline ([`ProxyResync`](crate::ProxyResync)), so that its
    /// deltas rest only on states sent afterwards (full ones first).
    pub(crate) baselines_from: u32,
}

/// How many of a client's state messages after a proxy went dormant to it say so (besides the
/// reliable [`ProxyDormancy`](crate::ProxyDormancy) notice): the states stop at once, and a
/// reliable resend takes a round trip or more, while the client draws the proxy starved and
/// its staleness lengthens every proxy's delay (at 500 ms and 5 % loss, for half a second).
/// Five messages all go missing once in 3 million at 5 % loss.
pub(crate) const ASLEEP_REPEATS: u8 = 5;

/// How many of a client's `Due` state messages tell a proxy's changed rate
/// ([`ProxyRate`](crate::ProxyRate)), the first with the first state at that rate: the client
/// needs it before the rate's first gap runs out, and the messages come several an interval.
/// Five all go missing once in 3 million at 5 % loss; a client that missed them draws the proxy
/// at the rate it knew (a faster one shows in the gaps; a slower one starves it, never refuses
/// a shot: the server compensates the longer).
pub(crate) const RATE_REPEATS: u8 = 5;

/// What one client was sent of one proxy.
#[derive(Default)]
pub(crate) struct PairSchedule {
    /// When its next state is due at a reduced rate, server seconds.
    pub(crate) next_send: f64,
    /// Whether the client is being sent it (false before the first state and while dormant).
    pub(crate) awake: bool,
    /// Whether the client was ever sent one: the first after a dormant spell is a teleport.
    pub(crate) sent_before: bool,
    /// The tick of the last state sent to it (its repeat goes only where the original went).
    pub(crate) last_tick: Option<u32>,
    /// The tick of the first state of its current awake spell: no trail copy older goes to
    /// it (the client starts the proxy afresh there).
    pub(crate) awake_since: u32,
    /// The first and last ticks of its states in the spell before that one, if it had one: a
    /// shot its client drew before it heard that spell end still claims them.
    pub(crate) previous_spell: Option<(u32, u32)>,
    /// Whether that first state came back from a dormant spell (flagged a teleport, the
    /// client told it woke): its repeat is flagged and told the same.
    pub(crate) woke: bool,
    /// The oldest tick a delta state of it may rest on: the first state of its awake spell, or
    /// of its first spell a while after it, once the client has surely mapped its entity.
    pub(crate) deltas_from: u32,
    /// Which of the client's state messages carried one of its states.
    pub(crate) sent: unlag_net::SentMask,
    /// Which of the client's [`StatesKind::Due`](crate::StatesKind::Due) messages carried one
    /// of its states: the client keeps those to decode delta states against.
    pub(crate) due_sent: unlag_net::SentMask,
    /// The interval it is sent at, in ticks, as the client was last told
    /// ([`ProxyRate`](crate::ProxyRate)); `None`: the nominal one.
    pub(crate) rate: Option<u16>,
}

impl InterestSchedule {
    /// Which of the client's state messages ([`unlag_net::StatesSentTo`]) carried a state of
    /// `proxy`; `None` if none did lately.
    pub fn sent_mask(&self, proxy: Entity) -> Option<unlag_net::SentMask> {
        self.pairs
            .get(&proxy)
            .map(|p| p.sent)
            .filter(|s| s.bits != 0)
    }

    /// The longest time between two states of `proxy` on its grid that this client was sent
    /// in a row lately, in the spell of being sent them that the state of tick `around` belongs
    /// to (the latest, whether or not it has ended, or the one before it: a shot drawn before
    /// its client heard of a dormant spell claims the spell before), within the latest 64 state
    /// messages `log` keeps, or the interval the client was told it is sent at if that is
    /// longer (it draws the proxy at it before the first gap of a fallen rate has run out);
    /// seconds of `tick_seconds` ticks, `None` before two were sent and none was told. A client
    /// reads a proxy's interval from the gaps between the states it gets (the least of its
    /// last few) or as told, so a longer one than this only where losses took every other
    /// state of several in a row.
    pub fn longest_sent_interval(
        &self,
        proxy: Entity,
        log: &unlag_net::StatesSentTo,
        tick_seconds: f64,
        around: u32,
    ) -> Option<f64> {
        let pair = self.pairs.get(&proxy)?;
        let (first, last) = match pair.previous_spell {
            Some((first, last)) if (first..pair.awake_since).contains(&around) => (first, last),
            _ => (pair.awake_since, u32::MAX),
        };
        let ticks = log
            .ticks_of(pair.due_sent)
            .filter(|&t| (first..=last).contains(&t));
        let (_, longest) = ticks.fold((None, None), |(previous, longest), t| {
            let gap = previous.map(|p: u32| t.wrapping_sub(p));
            (Some(t), longest.max(gap))
        });
        let told = pair.rate.map(u32::from);
        longest
            .max(told)
            .map(|ticks| f64::from(ticks) * tick_seconds)
    }
}

/// FixedPostUpdate, first: every connected link gets its interest and schedule.
pub(crate) fn ensure_interest(
    mut commands: Commands,
    settings: Res<InterestSettings>,
    links: Query<Entity, (With<ClientOf>, With<Connected>, Without<InterestSchedule>)>,
) {
    for link in &links {
        commands.entity(link).insert((
            ProxyInterest::new(settings.hearing_distance),
            InterestSchedule::default(),
            unlag_net::StatesSentTo::default(),
        ));
    }
}

/// FixedPostUpdate, [`unlag_net::InterestSystems::Decide`]: the distance policy, each link
/// once every [`InterestSettings::sight_interval`] (the links spread over its ticks). Each
/// link's viewpoint is its [`ViewPoint`], else what it controls (a smoothed proxy first); per
/// proxy, the tier its distance falls in (crossed back only `hysteresis` past a boundary),
/// dormant when out of sight for longer than the linger (where sight is tested), audible within
/// the hearing distance. Pairs of despawned proxies are forgotten, here and in what the link
/// was sent. With [`InterestPolicy::Everyone`] every pair is forgotten: all are sent in full.
pub(crate) fn decide_interest(
    (settings, timeline, tick, sight, work): (
        Res<InterestSettings>,
        Res<LocalTimeline>,
        Res<TickDuration>,
        Option<Res<SightTested>>,
        Option<Res<unlag_net::ServerWork>>,
    ),
    proxies: Query<(Entity, &Transform), With<SmoothedProxy>>,
    controlled: Query<(&Transform, &ControlledBy, Has<SmoothedProxy>)>,
    mut links: Query<
        (
            Entity,
            &mut ProxyInterest,
            Option<&ViewPoint>,
            Option<&mut InterestSchedule>,
        ),
        With<ClientOf>,
    >,
    mut viewers: Local<EntityHashMap<(Vec3, bool)>>,
) {
    let _work = work
        .as_deref()
        .map(|w| w.time(unlag_net::WorkPart::ProxyStates));
    let s = &*settings;
    if s.policy != InterestPolicy::Distance {
        // The game's policy (or none) decides; the hearing distance still follows the settings.
        for (_, mut interest, viewpoint, _) in &mut links {
            interest.hearing_distance = s.hearing_distance;
            interest.viewer = viewpoint.map(|v| v.0);
            if s.policy == InterestPolicy::Everyone {
                // Switched off at runtime: what the distance policy decided goes with it.
                interest.retain(|_| false);
            }
        }
        return;
    }
    let dt = tick.0.as_secs_f64();
    let now_tick = timeline.tick().0;
    let now = f64::from(now_tick) * dt;
    // Each link is decided once a sight interval, the links spread over its ticks (a pair's
    // tier changes no faster than a character walks its hysteresis, and the linger covers
    // the wait): a sixth of the pairs a tick at 60 Hz.
    let stagger = s.spread_ticks(dt);
    let phase = now_tick % stagger;
    // Each client's character: what it controls, a smoothed proxy first.
    viewers.clear();
    for (transform, c, smoothed) in &controlled {
        let viewer = viewers
            .entry(c.owner)
            .or_insert((transform.translation, smoothed));
        if smoothed && !viewer.1 {
            *viewer = (transform.translation, true);
        }
    }
    let sight_counts = s.line_of_sight && sight.is_some();
    for (link, mut interest, viewpoint, schedule) in &mut links {
        let interest = &mut *interest;
        interest.hearing_distance = s.hearing_distance;
        interest.viewer = viewpoint.map(|v| v.0).or(viewers.get(&link).map(|v| v.0));
        if link.index_u32() % stagger != phase {
            continue;
        }
        let Some(viewer) = interest.viewer else {
            // Nowhere to measure from: everything is relevant.
            for (proxy, ..) in &proxies {
                *interest.entry(proxy) = default();
            }
            continue;
        };
        for (proxy, transform) in &proxies {
            let distance = viewer.distance(transform.translation);
            let pair = interest.entry(proxy);
            // Near enough not to need sight: in sight now (the sight test skips such pairs).
            if distance <= s.sight_always_within {
                pair.in_sight_at = now;
            }
            let tier = tier(s, pair.relevance, distance);
            let out_of_sight = sight_counts
                && distance > s.sight_always_within
                && now - pair.in_sight_at > f64::from(s.linger);
            pair.relevance = if out_of_sight {
                Relevance::Dormant
            } else {
                tier
            };
            pair.audible = distance <= s.hearing_distance;
        }
        if (now_tick / stagger).is_multiple_of(64) {
            interest.retain(|e| proxies.contains(e));
            if let Some(mut schedule) = schedule {
                schedule.pairs.retain(|e, _| proxies.contains(*e));
            }
        }
    }
}

/// The distance tier of a proxy `distance` metres away that was `was`: a boundary crossed
/// outwards only `hysteresis` metres past it.
fn tier(s: &InterestSettings, was: Relevance, distance: f32) -> Relevance {
    let reduced = Relevance::Reduced(s.reduced_rate_hz);
    let (full_edge, reduced_edge) = match was {
        Relevance::Full => (
            s.full_within + s.hysteresis,
            s.reduced_within + s.hysteresis,
        ),
        Relevance::Reduced(_) => (s.full_within, s.reduced_within + s.hysteresis),
        Relevance::Dormant => (s.full_within, s.reduced_within),
    };
    if distance <= full_edge {
        Relevance::Full
    } else if distance <= reduced_edge {
        reduced
    } else {
        Relevance::Dormant
    }
}

impl PairSchedule {
    /// Whether a state due at `now` (server seconds) goes to this client at `relevance`, and
    /// if so its next time at a reduced rate, on that rate's grid.
    pub(crate) fn take(&mut self, relevance: Relevance, now: f64) -> bool {
        match relevance {
            Relevance::Full => true,
            Relevance::Dormant => false,
            Relevance::Reduced(hz) => {
                if now + 1e-9 < self.next_send {
                    return false;
                }
                let interval = unlag_core::reduced_interval(hz);
                self.next_send = if now - self.next_send < interval {
                    self.next_send + interval
                } else {
                    now + interval
                };
                true
            }
        }
    }
}
