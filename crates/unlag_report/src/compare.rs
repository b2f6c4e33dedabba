//! `--compare-validation`: every accepted shot of the match judged four ways on the same
//! server history, in the frame the server judged it.
//!
//! - **none**: the poses of the moment the shot is judged (no lag compensation).
//! - **Source-style**: the shot's view time, characters posed by blending the server's own
//!   recorded ticks linearly (whatever the client drew them from).
//! - **UT-style**: rewound by the prediction time `½ × clamp(rtt − 15 ms, 0, 160 ms)`, and a
//!   pellet that misses everything is also tested against the claimed targets padded by
//!   0.4 m.
//! - **unlag**: the shot's view time with every claimed target rebuilt exactly as the client
//!   drew it; only targets the client saw hit can be hit (the server's real verdict).

use bevy::prelude::*;
use serde::Serialize;
use unlag::combat::{ShotLog, Weapons, WireClaim};
use unlag::core::projectile_prediction_time;
use unlag::rewind::{ClaimedView, RewindQuery};

/// The methods, in the order of [`ComparedShot::answers`].
pub const METHODS: [&str; 4] = ["none", "Source-style", "UT-style", "unlag"];

/// How far UT-style validation pads a claimed target, metres.
pub const UT_PADDING: f32 = 0.4;

/// One shot judged every way: per method, per pellet, the character hit (server entities).
#[derive(Clone, Debug)]
pub struct ComparedShot {
    /// The shooter's link.
    pub link: Entity,
    /// The shot's fire index.
    pub fire_index: u32,
    /// Per method (see [`METHODS`]), per pellet.
    pub answers: [Vec<Option<Entity>>; 4],
}

/// The shots judged so far (server resource).
#[derive(Resource, Clone, Debug, Default)]
pub struct Compared {
    /// Oldest first.
    pub shots: Vec<ComparedShot>,
}

/// One method's agreement with what the shooters saw, over every pellet of the match.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct MethodAgreement {
    /// The method's name.
    pub method: String,
    /// Pellets the shooters saw hit a target.
    pub seen_hits: u64,
    /// Of those, pellets this method hit the same target with.
    pub hits_confirmed: u64,
    /// Pellets the shooters saw miss.
    pub seen_misses: u64,
    /// Of those, pellets this method hit someone with (wrong confirmations).
    pub misses_confirmed: u64,
}

impl MethodAgreement {
    /// Share of seen hits confirmed, 0–1.
    pub fn hit_rate(&self) -> f64 {
        self.hits_confirmed as f64 / self.seen_hits.max(1) as f64
    }

    /// Share of seen misses confirmed, 0–1.
    pub fn miss_rate(&self) -> f64 {
        self.misses_confirmed as f64 / self.seen_misses.max(1) as f64
    }
}

/// `Update` on the server, after combat: judges the shots logged this frame the four ways.
pub fn compare_validation(
    log: Option<ResMut<ShotLog>>,
    weapons: Res<Weapons>,
    rewind: RewindQuery,
    mut out: ResMut<Compared>,
) {
    let (Some(mut log), Some(table)) = (log, &weapons.table) else {
        return;
    };
    for shot in log.shots.drain(..) {
        let request = &shot.request;
        let Some(spec) = table.get(request.weapon) else {
            continue;
        };
        let range = spec.range;
        let shooter = Some(shot.shooter);
        let rays = request.rays(spec);
        let characters = |answers: Result<Vec<Option<unlag::rewind::RewindHit>>, _>| {
            answers.map_or(vec![None; rays.len()], |v| {
                v.into_iter().map(|h| h.map(|h| h.character)).collect()
            })
        };
        let none = characters(rewind.rays(&rays, range, shot.server_time, shooter));
        let source = characters(rewind.rays(&rays, range, request.view_time, shooter));
        let rewound = shot.server_time - projectile_prediction_time(shot.rtt, 0.015, 0.16);
        let hit_claims: Vec<Entity> = request
            .claims
            .iter()
            .filter(|c| c.hit())
            .map(|c| c.target)
            .collect();
        // As the server counts them: a pellet on a target only where the claim names it.
        let claimed_pellet = |c: Entity, i: usize| {
            request
                .claims
                .iter()
                .any(|claim| claim.target == c && claim.claims_pellet(i))
        };
        let ut = characters(rewind.rays(&rays, range, rewound, shooter))
            .into_iter()
            .zip(&rays)
            .map(|(hit, (origin, dir))| {
                hit.or_else(|| {
                    rewind
                        .segment(
                            *origin,
                            *origin + *dir * range,
                            UT_PADDING,
                            rewound,
                            shooter,
                        )
                        .ok()
                        .flatten()
                        .map(|h| h.character)
                        .filter(|c| hit_claims.contains(c))
                })
            })
            .collect();
        let claims: Vec<ClaimedView> = request.claims.iter().map(WireClaim::view).collect();
        let unlag =
            characters(rewind.rays_as_seen(&rays, range, request.view_time, shooter, &claims))
                .into_iter()
                .enumerate()
                .map(|(i, hit)| hit.filter(|c| claimed_pellet(*c, i)))
                .collect();
        out.shots.push(ComparedShot {
            link: shot.link,
            fire_index: request.fire_index,
            answers: [none, source, ut, unlag],
        });
    }
}
