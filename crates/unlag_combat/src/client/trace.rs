//! A shot traced on the client: the proxies as drawn this frame (or, above the rewind cap, where
//! their curves have them by the time the server judges), and each pellet against their hit
//! boxes and the world as the client has it.

use super::{LocalHit, ProxyHealth};
use crate::weapons::WeaponSpec;
use bevy::ecs::system::SystemParam;
use bevy::prelude::*;
use bevy_rapier3d::prelude::{QueryFilter, ReadRapierContext};
use unlag_net::{AutonomousProxy, ProxyDormant};
use unlag_rewind::{HitBox, HitShape, LayoutBone, blend_poses, hit_box_ray};
use unlag_smoothing::{ProxySmoothing, RenderedPose, SmoothingSettings};

/// How close a pellet must pass to a proxy's hit box (beyond its bounding sphere) for the shot
/// to claim it as drawn, metres, besides how far the proxy may be drawn from the server's track
/// ([`RenderedPose::off_track`]).
pub const NEAR_MISS_MARGIN: f32 = 0.25;

/// A proxy as a shot is traced against it: the pose it is claimed at and its boxes placed
/// there (position, rotation).
pub(super) struct Target<'a> {
    pub(super) proxy: Entity,
    /// How much earlier than the shot the server judges it, seconds (its claim's
    /// [`WireClaim::behind`](crate::WireClaim::behind)): 0 when drawn with the shot's delay.
    pub(super) behind: f64,
    pub(super) pose: RenderedPose,
    pub(super) boxes: Vec<(&'a HitBox, Vec3, Quat)>,
}

/// A pellet's hit on screen: the proxy, how far along the ray (metres), what the game is told,
/// and the damage multiplier of the box hit (head included).
pub(super) struct Pellet {
    pub(super) target: Entity,
    pub(super) distance: f32,
    pub(super) hit: LocalHit,
    pub(super) multiplier: f32,
}

/// What is on the client's screen for a shot: the proxies as drawn, their hit boxes, the world,
/// our own character and the proxies' health as the game last heard it.
#[derive(SystemParam)]
pub(crate) struct ProxyScene<'w, 's> {
    proxies: Query<
        'w,
        's,
        (
            Entity,
            &'static RenderedPose,
            &'static Children,
            Option<&'static ProxySmoothing>,
        ),
        // A dormant proxy is not on screen (the server stopped sending it): not a target.
        Without<ProxyDormant>,
    >,
    boxes: Query<
        'w,
        's,
        (
            &'static HitBox,
            &'static GlobalTransform,
            &'static Transform,
            Option<&'static LayoutBone>,
        ),
    >,
    rapier: ReadRapierContext<'w, 's>,
    own: Query<'w, 's, (), With<AutonomousProxy>>,
    pub(super) health: Query<'w, 's, &'static ProxyHealth>,
    smoothing: Option<Res<'w, SmoothingSettings>>,
}

impl ProxyScene<'_, '_> {
    /// Whether the player has a character to fire with.
    pub(super) fn has_character(&self) -> bool {
        !self.own.is_empty()
    }

    /// Every proxy with its hit boxes: as drawn this frame, or, when the server judges its
    /// claim later than drawn (above the rewind cap, or its delay beyond what the server
    /// compensates), where its curve has it then, so a hit marker promises what the server
    /// grants. `now` is the view time on screen (the shot's), `lead` how much later the server
    /// judges the shot; `claim_lead` how much later it judges a claim on a proxy drawn with a
    /// delay (seconds) whose states come every so many seconds (see [`Target::behind`]).
    pub(super) fn targets(
        &self,
        now: f64,
        lead: f64,
        claim_lead: impl Fn(f64, f64) -> f64,
    ) -> Vec<Target<'_>> {
        let max_extrapolation = self
            .smoothing
            .as_ref()
            .map_or(0.25, |s| s.max_extrapolation);
        self.proxies
            .iter()
            .filter_map(|(proxy, drawn, children, smoothed)| {
                let boxes = children.iter().filter_map(|c| self.boxes.get(c).ok());
                // A proxy drawn with the shot's delay is judged with the shot; a slower one,
                // drawn with a longer delay, earlier, unless the server compensates only part
                // of its delay (then later than drawn by the rest, as the shot is beyond the
                // cap). An `Extrapolate` one is drawn at the present, whatever its delay.
                let (lead, behind) = if drawn.view_time >= now
                    || drawn.mode == unlag_core::SmoothingMode::Extrapolate
                {
                    (lead, 0.0)
                } else {
                    let interval = smoothed.map_or(0.0, |s| s.update_interval());
                    let own = claim_lead(drawn.delay, interval);
                    (own, ((now + lead) - (drawn.view_time + own)).max(0.0))
                };
                if lead <= 0.0 {
                    return Some(Target {
                        proxy,
                        behind,
                        pose: *drawn,
                        boxes: boxes
                            .map(|(hit_box, global, ..)| {
                                let (_, rotation, position) =
                                    global.to_scale_rotation_translation();
                                (hit_box, position, rotation)
                            })
                            .collect(),
                    });
                }
                let (pose, rotation) =
                    smoothed?.curve_pose(drawn.view_time + lead, drawn.delay, max_extrapolation)?;
                let root = Transform::from_translation(pose.position).with_rotation(rotation);
                let w = pose.body_blend();
                Some(Target {
                    proxy,
                    behind,
                    boxes: boxes
                        .map(|(hit_box, _, local, bone)| {
                            let local = bone.map_or(*local, |bone| {
                                blend_poses(
                                    &bone.pose(&pose.shown[0]),
                                    &bone.pose(&pose.shown[1]),
                                    w,
                                )
                            });
                            let placed = root.mul_transform(local);
                            (hit_box, placed.translation, placed.rotation)
                        })
                        .collect(),
                    pose,
                })
            })
            .collect()
    }

    /// Traces every pellet from `origin` along `directions` against the `targets`' hit boxes,
    /// stopped by the world as the client has it (colliders that are not proxies, their boxes
    /// or our own character) or the weapon's range: each pellet's nearest hit (a head wins a
    /// tie).
    pub(super) fn trace(
        &self,
        origin: Vec3,
        directions: &[Vec3],
        spec: &WeaponSpec,
        targets: &[Target],
    ) -> Vec<Option<Pellet>> {
        let not_a_character = |e: Entity| {
            !self.proxies.contains(e) && !self.boxes.contains(e) && !self.own.contains(e)
        };
        let filter = QueryFilter::default()
            .exclude_sensors()
            .predicate(&not_a_character);
        // Asked once per shot: without a rapier world, asking costs an error with a backtrace.
        let context = (!self.rapier.rapier_context.is_empty())
            .then(|| self.rapier.single().ok())
            .flatten();
        directions
            .iter()
            .map(|dir| {
                let range = context
                    .as_ref()
                    .and_then(|ctx| ctx.cast_ray(origin, *dir, spec.range, true, filter))
                    .map_or(spec.range, |(_, toi)| toi);
                nearest_hit(origin, *dir, range, spec, targets)
            })
            .collect()
    }
}

/// How far inside a hit box a pellet must pass for the client to promise a hit on it, and how
/// far outside one it must pass not to be stopped by it, metres. The server poses the box from
/// the same states by another sum (the recorded frames, not the bones), which differs in the
/// last bits of a float: a pellet that grazes a box within a micrometre (one seen rifle hit in
/// about 8000 over the grid's seeds) was a hit on one side and a miss on the other. Within the
/// margin of a surface the pellet stops, a miss on screen: the server then finds a miss, or a
/// hit the shooter did not see (also a miss). The server's own test is unchanged: no client
/// gains the margin.
pub const GRAZE_MARGIN: f32 = 1e-4;

/// The pellet's nearest hit from `origin` along `dir` within `range` metres among the
/// `targets`' hit boxes (at equal distance a head over anything else). A pellet that only
/// grazes a box (within [`GRAZE_MARGIN`] of its surface) stops there, and hits nothing.
fn nearest_hit(
    origin: Vec3,
    dir: Vec3,
    range: f32,
    spec: &WeaponSpec,
    targets: &[Target],
) -> Option<Pellet> {
    // The nearest box the pellet reaches, and whether it passes well inside it.
    let mut best: Option<(Pellet, bool)> = None;
    for target in targets {
        for &(hit_box, position, rotation) in &target.boxes {
            let max = best.as_ref().map_or(range, |b| b.0.distance);
            let reach = |shape: &HitShape, max: f32| {
                hit_box_ray(shape, position, rotation, origin, dir, max, 0.0)
            };
            let Some((near, near_point, _)) = reach(&hit_box.shape.inflated(GRAZE_MARGIN), max)
            else {
                continue;
            };
            let inside = reach(&hit_box.shape.inflated(-GRAZE_MARGIN), range)
                .and_then(|_| reach(&hit_box.shape, range));
            let (distance, point) = inside.map_or((near, near_point), |(d, p, _)| (d, p));
            let better = best.as_ref().is_none_or(|(b, _)| {
                distance < b.distance
                    || (distance == b.distance && hit_box.is_head && !b.hit.headshot)
            });
            if better {
                let head = if hit_box.is_head {
                    spec.headshot_multiplier
                } else {
                    1.0
                };
                let pellet = Pellet {
                    target: target.proxy,
                    distance,
                    hit: LocalHit {
                        target: target.proxy,
                        bone: hit_box.bone.clone(),
                        headshot: hit_box.is_head,
                        point,
                        expected_dead: false,
                    },
                    multiplier: hit_box.damage_multiplier * head,
                };
                best = Some((pellet, inside.is_some()));
            }
        }
    }
    best.filter(|(_, inside)| *inside).map(|(pellet, _)| pellet)
}

/// Every proxy a pellet passed close to before it stopped, besides the one it hit: the server
/// poses those as drawn too, so a proxy drawn just beside the ray cannot block it there.
/// Close is within [`NEAR_MISS_MARGIN`] plus how far the proxy may be drawn off the server's
/// track, beyond its boxes' bounding spheres.
pub(super) fn near_misses(
    origin: Vec3,
    directions: &[Vec3],
    hits: &[Option<Pellet>],
    spec: &WeaponSpec,
    targets: &[Target],
) -> Vec<Entity> {
    let mut near: Vec<Entity> = Vec::new();
    for (dir, hit) in directions.iter().zip(hits) {
        let end = hit.as_ref().map_or(spec.range, |h| h.distance);
        for target in targets {
            let proxy = target.proxy;
            if near.contains(&proxy) || hit.as_ref().is_some_and(|h| h.target == proxy) {
                continue;
            }
            let margin = NEAR_MISS_MARGIN + target.pose.off_track();
            let close = target.boxes.iter().any(|(hit_box, position, _)| {
                let centre = *position - origin;
                let t = centre.dot(*dir).clamp(0.0, end);
                (centre - *dir * t).length() <= hit_box.shape.bounding_radius() + margin
            });
            if close {
                near.push(proxy);
            }
        }
    }
    near
}
