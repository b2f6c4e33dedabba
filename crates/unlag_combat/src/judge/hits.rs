//! What a hitscan or shotgun shot hit: the claims on what its shooter drew, the rays through
//! the hit boxes rewound to that view, the tally per target, and the wall test.

use super::{ShotContext, TargetHit};
use crate::protocol::Rejection;
use crate::stats::CombatStats;
use bevy::prelude::*;
use unlag_rewind::{ClaimedView, RewindError, RewindHit};

/// How far a claim's shown time may be from the moment it claims (the shot's judged time, less
/// the claim's [`behind`](crate::WireClaim::behind)), seconds: rounding (the blend travels as
/// an `f32`) and the delay report's microseconds.
const CLAIM_SLACK: f64 = 0.002;

/// Slack of a claim's [`behind`](crate::WireClaim::behind) over what the server compensates,
/// seconds: the server frame the client reads from the beats may lag the one the cap was set
/// for by a beat.
const BEHIND_SLACK: f64 = 0.002;

/// A shot's claims, as the server takes them.
pub(super) struct Claims {
    /// The pose each claim shows, as the rewind replays it (an unexplained ease removed).
    views: Vec<ClaimedView>,
    /// Per claim, whether its hit counts: it claims one, the target was alive, the pose not
    /// stale. A target that died after the shooter's screen showed it alive (killed by a shot
    /// the shooter had not heard of yet) is a miss, not a refusal.
    hits: Vec<bool>,
    /// Targets claimed on a stale pose: never hit.
    stale: Vec<Entity>,
}

impl ShotContext<'_, '_, '_> {
    /// Takes the shot's claims, one per target, each showing the moment the shot shows, or as
    /// much earlier as it says its target was drawn with a longer delay, no more than the
    /// server compensates ([`Rejection::BadClaim`] otherwise, counted in
    /// [`CombatStats::claims_too_far_behind`] for the latter); a claim on a target the server
    /// no longer has is left out (counted in [`CombatStats::gone_targets`]). Counts, per claim
    /// and even when a later claim refuses, eases that starved frames do not explain and
    /// claims on stale poses.
    pub(super) fn claims(&self, stats: &mut CombatStats) -> Result<Claims, Rejection> {
        let (request, rewind, link) = (self.request, self.rewind, &self.arrival.link);
        let mut claims = Claims {
            views: Vec::with_capacity(request.claims.len()),
            hits: Vec::with_capacity(request.claims.len()),
            stale: Vec::new(),
        };
        // What the client acknowledged, read once a shot and only for an ease to explain.
        let heard = core::cell::OnceCell::new();
        for (k, c) in request.claims.iter().enumerate() {
            // One pose per target: a client drew each proxy once, so two claims on one target
            // would make its hit box the union of two chosen poses.
            if request.claims[..k].iter().any(|o| o.target == c.target) {
                return Err(Rejection::BadClaim);
            }
            let mut claim = c.view();
            // A claim shows one moment: the shot's judged time, less its `behind` (Extrapolate
            // proxies are drawn at the present the client knows, one delay later), whether it
            // blends two states or runs on past the newest one.
            // A target the server no longer has left (or was despawned) while the shot was on
            // its way: its client still drew it for a trip. Nothing is judged against it (a
            // miss on it), and the shot is not refused for it: an entity that never was a
            // character gains a cheater nothing either.
            let shown = match rewind.claimed_time(&claim) {
                Ok(shown) => shown,
                Err(RewindError::UnknownCharacter) => {
                    stats.gone_targets += 1;
                    continue;
                }
                Err(_) => return Err(Rejection::BadClaim),
            };
            // A claim on a proxy drawn with a longer delay than the shot's (a slower one) is
            // judged that much earlier, as far as the server compensates that delay.
            if c.behind > BEHIND_SLACK && c.behind > self.most_behind(c) + BEHIND_SLACK {
                stats.claims_too_far_behind += 1;
                return Err(Rejection::BadClaim);
            }
            // An `Extrapolate` proxy is drawn at the present the client knows, one delay after
            // the view time: its window moves there rather than widening to cover both.
            let shift = if c.mode == unlag_core::SmoothingMode::Extrapolate {
                link.interpolation_delay
            } else {
                0.0
            };
            let centre = request.judged_time - c.behind + shift;
            // Each claim was drawn at exactly that moment (an `Extrapolate` one a delay later,
            // as closely as the reported delay follows the drawn one while it changes).
            let window = if shift > 0.0 {
                CLAIM_SLACK.max(
                    unlag_net::PLAUSIBLE_DELAY_DECAY
                        * (link.rtt / 2.0 + unlag_net::MIN_REPORT_GAP + link.client_frame)
                        + CLAIM_SLACK,
                )
            } else {
                CLAIM_SLACK
            };
            let off_time = (shown - centre).abs() > window;
            if c.from != c.to && (off_time || self.skips_a_state_it_had(c.target, c.from, c.to)) {
                return Err(Rejection::BadClaim);
            }
            // One state, not at the moment drawn: held past its extrapolation (a client starved
            // of newer states; with loss it may hold an older state than the server sent) or
            // shown before its first state. (Held before a teleport is the moment drawn:
            // smoothing stays on the state before a teleport until the teleport's time.) What
            // such a pose shows is older than the view, so it never counts as a hit (the client
            // promises none on it): a miss, which still stops the pellet where it was drawn.
            // Otherwise a held claim would let any state of the last second be claimed.
            let stale = c.from == c.to
                && off_time
                && !(shown < centre && rewind.held_before_teleport(&claim, centre - window));
            // An offset from the curve counts only as far as starved frames explain it:
            // otherwise it could be a magnet pulling the hit box onto the ray. Judged as none:
            // on the curve.
            let drawn_at = if c.from == c.to { centre } else { shown };
            let heard = if claim.ease.length() > unlag_rewind::EASE_SLACK {
                heard.get_or_init(|| self.heard()).as_ref()
            } else {
                None
            };
            if !rewind.ease_explained(&claim, drawn_at, heard) {
                claim.ease = Vec3::ZERO;
                stats.unexplained_eases += 1;
            }
            claims.views.push(claim);
            stats.claims_behind += u64::from(c.behind > 0.0);
            claims.hits.push(c.hit() && !self.dead(c.target) && !stale);
            if stale {
                claims.stale.push(c.target);
                stats.stale_claims += 1;
            }
        }
        Ok(claims)
    }

    /// The ticks of the state messages the shooter's client acknowledged
    /// ([`unlag_net::StatesSentTo::heard`]), if the server keeps them for its link.
    fn heard(&self) -> Option<unlag_net::HeardTicks> {
        let (_, log, ledger) = self.sent.get(self.link).ok()?;
        Some(log.heard(&ledger.0))
    }

    /// Whether the shooter surely had a state of `target` with a tick strictly between `from`
    /// and `to` when it drew the view its shot shows: the server sent it one (in a state
    /// message of its own or a trail), and the client acknowledged every packet of the frame
    /// it left in by a datagram that came a client frame and the up-link's spread before the
    /// shot left. A client draws a proxy between the two states around its view time that it
    /// has (a late state still newer than the oldest it keeps goes in between), so a blend of
    /// two states that skips one it had is not what it drew: picking the pair is a magnet
    /// (the blend of two states apart moves the pose off the curve drawn, the further the
    /// longer the client's delay lets the pair straddle the moment). States lost, late or
    /// not sent to this client (a reduced rate, a dormant spell) skip nothing; a game that
    /// caps lightyear's bandwidth (its priority manager) may send a state message frames after
    /// it was queued, which this does not allow for.
    ///
    /// The margin: two of the client's frames (a shot shows the frame drawn before it left),
    /// the server's frame (both datagrams were read on one), the up-link's spread (the link's
    /// jitter's range, or the reports' lags' span if wider), and the copy's age after its
    /// shot (a later copy may be the first to arrive).
    fn skips_a_state_it_had(&self, target: Entity, from: u32, to: u32) -> bool {
        if from >= to {
            return false;
        }
        let Ok((schedule, log, ledger)) = self.sent.get(self.link) else {
            return false;
        };
        let Some(mask) = schedule.sent_mask(target) else {
            return false;
        };
        let (link, request) = (&self.arrival.link, self.request);
        let age = unlag_core::finite_non_negative(request.sent_view_time - request.view_time);
        let spread = (unlag_core::JITTER_RANGE * link.jitter).max(link.lag_spread());
        let margin = 2.0 * link.client_frame + self.arrival.frame + spread + age;
        let drawn_by = self.arrival.real - margin;
        log.frames_between(mask, from, to).any(|(_, frame)| {
            ledger
                .0
                .frame_acknowledged(frame)
                .is_some_and(|acknowledged| acknowledged < drawn_by)
        })
    }

    /// Each of the pellets' `rays`' first hit, rewound to the judged time (above the rewind
    /// cap, later than the view time) with the claimed poses, or, with rewinding off, against
    /// the present.
    pub(super) fn trace(
        &self,
        rays: &[(Vec3, Vec3)],
        claims: &Claims,
    ) -> Result<Vec<Option<RewindHit>>, Rejection> {
        let (request, spec, rewind) = (self.request, self.spec, self.rewind);
        if self.settings.rewind {
            rewind.rays_as_seen(
                rays,
                spec.range,
                request.judged_time,
                Some(self.shooter),
                &claims.views,
            )
        } else {
            rewind.rays(rays, spec.range, self.present, Some(self.shooter))
        }
        .map_err(|e| match e {
            RewindError::UnknownCharacter => Rejection::BadTarget,
            RewindError::InvalidView(_) | RewindError::TooOld { .. } => Rejection::BadClaim,
            RewindError::Invalid => Rejection::Malformed,
        })
    }

    /// The damage per target of the pellets' `answers` along their `rays`, where each pellet
    /// stopped, and how many struck a claimed corpse. Only what the shooter saw hit counts,
    /// pellet by pellet ([`WireClaim::pellets`](crate::WireClaim::pellets)): a hit it did not
    /// see is a miss (and stops the pellet all the same), and so is a corpse.
    pub(super) fn tally(
        &self,
        rays: &[(Vec3, Vec3)],
        answers: &[Option<RewindHit>],
        claims: &Claims,
    ) -> (Vec<TargetHit>, Vec<Vec3>, u64) {
        let (request, spec) = (self.request, self.spec);
        let mut tally: Vec<TargetHit> = Vec::new();
        let mut ends = Vec::with_capacity(answers.len());
        let mut corpse_hits = 0u64;
        // The pellet of direction `i` on `e`, as the shooter saw it hit.
        let claimed = |e: Entity, i: usize| {
            !claims.stale.contains(&e)
                && request
                    .claims
                    .iter()
                    .any(|c| c.target == e && c.claims_pellet(i))
        };
        for (i, ((origin, dir), answer)) in rays.iter().zip(answers).enumerate() {
            match answer {
                Some(hit) if claimed(hit.character, i) && self.dead(hit.character) => {
                    corpse_hits += 1;
                    ends.push(hit.point);
                }
                Some(hit) if claimed(hit.character, i) => {
                    ends.push(hit.point);
                    let multiplier = if hit.is_head {
                        spec.headshot_multiplier
                    } else {
                        1.0
                    } * hit.damage_multiplier;
                    add_hit(&mut tally, hit, spec.damage * multiplier);
                }
                Some(hit) => ends.push(hit.point),
                None => ends.push(*origin + *dir * spec.range),
            }
        }
        (tally, ends, corpse_hits)
    }

    /// When every claimed hit failed: if the world stands between the shot and every target
    /// claimed hit, the claim was a shot through a wall ([`Rejection::ThroughWall`]). A
    /// target is behind the world when it hides its middle (1 m above its feet) and every one
    /// of its boxes as the claim poses them: one in sight (a head over a railing, a shoulder
    /// past a corner) makes the failed claim a miss, as a graze the server's rewind misses by
    /// a little is, not a shot through a wall. (Its middle alone refused such honest misses.)
    pub(super) fn not_through_wall(&self, claims: &Claims) -> Result<(), Rejection> {
        let (request, rewind) = (self.request, self.rewind);
        let hidden = |point: Vec3| {
            let to = point - request.origin;
            let length = to.length();
            length > 0.1
                && rewind.wall(request.origin, to / length, length, Some(self.shooter))
                    < length - 0.3
        };
        let behind_wall = |claim: &ClaimedView| {
            rewind.view_pose(claim).is_ok_and(|poses| {
                // The boxes' poses, then the character's own.
                let Some((root, boxes)) = poses.split_last() else {
                    return false;
                };
                hidden(root.0 + Vec3::Y) && boxes.iter().all(|(at, _)| hidden(*at))
            })
        };
        let mut hit_claims = claims
            .views
            .iter()
            .zip(&claims.hits)
            .filter(|(_, hit)| **hit)
            .map(|(claim, _)| claim)
            .peekable();
        if hit_claims.peek().is_some() && hit_claims.all(behind_wall) {
            return Err(Rejection::ThroughWall);
        }
        Ok(())
    }
}

/// Adds one pellet's `damage` (hit points) to its target's share of the tally; its head hit
/// names the bone once there is one.
fn add_hit(tally: &mut Vec<TargetHit>, hit: &RewindHit, damage: f32) {
    match tally.iter_mut().find(|t| t.target == hit.character) {
        Some(t) => {
            t.damage += damage;
            t.pellets += 1;
            if hit.is_head && !t.headshot {
                t.bone = hit.bone.clone();
                t.headshot = true;
            }
        }
        None => tally.push(TargetHit {
            target: hit.character,
            damage,
            pellets: 1,
            bone: hit.bone.clone(),
            headshot: hit.is_head,
        }),
    }
}
