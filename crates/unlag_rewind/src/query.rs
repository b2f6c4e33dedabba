//! [`RewindQuery`]: what a ray hit at a past time, with no collider moved.

use crate::{FrameHistory, HitBox, HitShape};
use bevy::ecs::system::SystemParam;
use bevy::prelude::*;
use bevy_rapier3d::parry::math::Pose;
use bevy_rapier3d::parry::query::{Ray, RayCast};
use bevy_rapier3d::parry::shape::{Capsule, Cuboid};
use bevy_rapier3d::prelude::{QueryFilter, ReadRapierContext};
use unlag_core::LookupError;

/// Why a rewind query has no answer.
#[derive(Copy, Clone, Debug, PartialEq, thiserror::Error)]
pub enum RewindError {
    /// The time is older than the history kept ("too laggy").
    #[error("time {requested} s is older than the history (oldest {oldest} s)")]
    TooOld {
        /// The time asked for, seconds.
        requested: f64,
        /// The oldest recorded time, seconds.
        oldest: f64,
    },
    /// A time, origin or direction is NaN or infinite, or the direction has no length.
    #[error("invalid ray or time")]
    Invalid,
    /// The entity is not a character with a history (unknown, or despawned since).
    #[error("not a character with a history")]
    UnknownCharacter,
}

/// What a rewound ray hit.
#[derive(Clone, Debug, PartialEq)]
pub struct RewindHit {
    /// The character hit.
    pub character: Entity,
    /// The hit-box entity.
    pub hit_box: Entity,
    /// Its bone.
    pub bone: String,
    /// Whether it is a head box.
    pub is_head: bool,
    /// Where the ray entered it, metres.
    pub point: Vec3,
    /// The surface normal there.
    pub normal: Vec3,
    /// Distance along the ray, metres.
    pub distance: f32,
    /// The time of the frame the pose was taken from (the earlier of the two blended), seconds.
    pub sampled_time: f64,
}

/// Rewound hit tests against the characters' recorded hit boxes.
#[derive(SystemParam)]
pub struct RewindQuery<'w, 's> {
    characters: Query<'w, 's, (Entity, &'static FrameHistory)>,
    boxes: Query<'w, 's, &'static HitBox>,
    rapier: ReadRapierContext<'w, 's>,
}

fn shape_ray(shape: &HitShape, pose: &Pose, ray: &Ray, max: f32) -> Option<(f32, Vec3)> {
    let hit = match shape {
        HitShape::Cuboid { half_extents } => {
            Cuboid::new(*half_extents).cast_ray_and_get_normal(pose, ray, max, true)
        }
        HitShape::Capsule {
            half_height,
            radius,
        } => Capsule::new_y(*half_height, *radius).cast_ray_and_get_normal(pose, ray, max, true),
    }?;
    Some((hit.time_of_impact, hit.normal))
}

impl RewindQuery<'_, '_> {
    /// The nearest hit box a ray from `origin` along `direction` (up to `max_distance` metres)
    /// hits at server time `time`, boxes posed as recorded then. `shooter` is never hit; the
    /// static world (rapier colliders) occludes at the current time.
    pub fn ray(
        &self,
        origin: Vec3,
        direction: Vec3,
        max_distance: f32,
        time: f64,
        shooter: Option<Entity>,
    ) -> Result<Option<RewindHit>, RewindError> {
        Ok(self
            .rays(&[(origin, direction)], max_distance, time, shooter)?
            .pop()
            .flatten())
    }

    /// A projectile's step at time `time`: the first hit box on the segment from `from` to `to`.
    pub fn segment(
        &self,
        from: Vec3,
        to: Vec3,
        time: f64,
        shooter: Option<Entity>,
    ) -> Result<Option<RewindHit>, RewindError> {
        self.ray(from, to - from, (to - from).length(), time, shooter)
    }

    /// The poses of `character`'s hit boxes at `time`: (hit-box entity, position, rotation).
    pub fn pose_at(
        &self,
        character: Entity,
        time: f64,
    ) -> Result<Vec<(Entity, Vec3, Quat)>, RewindError> {
        let (_, history) = self
            .characters
            .get(character)
            .map_err(|_| RewindError::UnknownCharacter)?;
        let pair = history.history.lookup(time).map_err(|e| match e {
            LookupError::TooOld { requested, oldest } => RewindError::TooOld { requested, oldest },
            _ => RewindError::Invalid,
        })?;
        Ok((0..history.boxes.len())
            .map(|k| {
                let (p, r) = history.history.pose(&pair, k);
                (history.boxes[k], p, r)
            })
            .collect())
    }

    /// Many rays at one time (a shotgun's pellets), sharing one rewind: each character is looked
    /// up once and all rays are tested against its posed boxes. One answer per ray, in order.
    pub fn rays(
        &self,
        rays: &[(Vec3, Vec3)],
        max_distance: f32,
        time: f64,
        shooter: Option<Entity>,
    ) -> Result<Vec<Option<RewindHit>>, RewindError> {
        if !time.is_finite()
            || !max_distance.is_finite()
            || rays
                .iter()
                .any(|(o, d)| !o.is_finite() || !d.is_finite() || d.length_squared() < 1e-12)
        {
            return Err(RewindError::Invalid);
        }
        let mut posed: Vec<(Entity, &FrameHistory, unlag_core::FramePair)> = Vec::new();
        for (character, history) in &self.characters {
            if Some(character) == shooter {
                continue;
            }
            match history.history.lookup(time) {
                Ok(pair) => posed.push((character, history, pair)),
                Err(LookupError::TooOld { requested, oldest }) => {
                    return Err(RewindError::TooOld { requested, oldest });
                }
                Err(_) => {}
            }
        }
        Ok(rays
            .iter()
            .map(|&(origin, direction)| {
                self.first_hit(origin, direction, max_distance, shooter, &posed)
            })
            .collect())
    }

    fn first_hit(
        &self,
        origin: Vec3,
        direction: Vec3,
        max_distance: f32,
        shooter: Option<Entity>,
        posed: &[(Entity, &FrameHistory, unlag_core::FramePair)],
    ) -> Option<RewindHit> {
        let dir = direction.normalize();
        let ray = Ray::new(origin, dir);
        // The world in the way, as it is now: colliders that are not characters, hit boxes or
        // the shooter.
        let not_a_character = |e: Entity| {
            !self.characters.contains(e) && !self.boxes.contains(e) && Some(e) != shooter
        };
        let filter = QueryFilter::default()
            .exclude_sensors()
            .predicate(&not_a_character);
        let wall = self
            .rapier
            .single()
            .ok()
            .and_then(|ctx| ctx.cast_ray(origin, dir, max_distance, true, filter))
            .map_or(max_distance, |(_, toi)| toi);
        let mut best: Option<RewindHit> = None;
        for &(character, history, pair) in posed {
            let limit = best.as_ref().map_or(wall, |b| b.distance);
            // Broad test: the sphere around the character's rewound origin that holds all its
            // boxes. Most rays miss most characters here, without posing a single box.
            let (root, _) = history.history.pose(&pair, history.boxes.len());
            let to_centre = root - origin;
            let along = to_centre.dot(dir);
            let closest_sq = to_centre.length_squared() - along * along;
            if closest_sq > history.reach * history.reach
                || along + history.reach < 0.0
                || along - history.reach > limit
            {
                continue;
            }
            // Head boxes first: a ray through head and torso at the same distance is a headshot.
            for &k in &history.order {
                let Ok(hit_box) = self.boxes.get(history.boxes[k]) else {
                    continue;
                };
                let (p, r) = history.history.pose(&pair, k);
                let pose = Pose::from_parts(p, r);
                if let Some((toi, normal)) = shape_ray(&hit_box.shape, &pose, &ray, limit)
                    && best.as_ref().is_none_or(|b| toi < b.distance)
                {
                    best = Some(RewindHit {
                        character,
                        hit_box: history.boxes[k],
                        bone: hit_box.bone.clone(),
                        is_head: hit_box.is_head,
                        point: origin + dir * toi,
                        normal,
                        distance: toi,
                        sampled_time: pair.from_time,
                    });
                }
            }
        }
        best.filter(|b| b.distance <= wall)
    }
}
