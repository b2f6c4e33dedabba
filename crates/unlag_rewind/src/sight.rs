//! Line of sight for interest management ([`unlag_net::InterestPolicy::Distance`]): whether
//! each client can see each character, against the static world as the rewind sees it (rapier
//! colliders that are not characters or hit boxes).

use crate::RewindQuery;
use bevy::prelude::*;
use lightyear::core::tick::TickDuration;
use lightyear::prelude::*;
use unlag_net::{InterestPolicy, InterestSettings, ProxyInterest, SentStates};

/// How far short of its target a sight ray may stop and still be clear, metres (the target's
/// own colliders are not in the way, but a floor or a wall it leans on may touch the point).
const SIGHT_SLACK: f32 = 0.3;

/// FixedPostUpdate, [`unlag_net::InterestSystems::Sight`]: marks each client's pairs in sight
/// now ([`unlag_net::PairInterest::in_sight_at`]), every smoothed proxy's (those without hit
/// boxes too). A pair within [`InterestSettings::sight_always_within`] needs no ray (the policy
/// counts it in sight as it decides it); one beyond the reduced distance is not tested
/// (distance alone stops it). The others are tested once every
/// [`InterestSettings::sight_interval`], spread over its ticks: from the viewer's eyes to the
/// target's upper body and to its lower point, either clear.
pub(crate) fn test_sight(
    settings: Option<Res<InterestSettings>>,
    timeline: Res<LocalTimeline>,
    tick: Res<TickDuration>,
    rewind: RewindQuery,
    characters: Query<(Entity, &Transform), With<SentStates>>,
    mut links: Query<(Entity, &mut ProxyInterest)>,
    work: Option<Res<unlag_net::ServerWork>>,
) {
    let Some(s) = settings else {
        return;
    };
    let _work = work
        .as_deref()
        .map(|w| w.time(unlag_net::WorkPart::ProxyStates));
    if s.policy != InterestPolicy::Distance || !s.line_of_sight {
        return;
    }
    let dt = tick.0.as_secs_f64();
    let now_tick = timeline.tick().0;
    let now = f64::from(now_tick) * dt;
    let stagger = s.spread_ticks(dt);
    let phase = now_tick % stagger;
    let farthest = s.reduced_within + s.hysteresis;
    for (link, mut interest) in &mut links {
        let Some(viewer) = interest.viewer else {
            continue;
        };
        let eye = viewer + Vec3::Y * s.eye_height;
        for (character, transform) in &characters {
            let target = transform.translation;
            let distance = viewer.distance(target);
            // Near pairs need no ray (the policy counts them in sight as it decides them).
            if distance <= s.sight_always_within {
                continue;
            }
            let due = (link.index_u32().wrapping_add(character.index_u32())) % stagger == phase;
            if distance > farthest || !due {
                continue;
            }
            let clear = |point: Vec3| {
                let to = point - eye;
                let length = to.length();
                length < 1e-3
                    || rewind.wall(eye, to / length, length, Some(character))
                        >= length - SIGHT_SLACK
            };
            if clear(target + Vec3::Y * s.eye_height) || clear(target + Vec3::Y * s.sight_low) {
                interest.entry(character).in_sight_at = now;
            }
        }
    }
}
