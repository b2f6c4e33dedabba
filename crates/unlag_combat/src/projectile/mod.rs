//! Projectiles (seed 003, Unreal Tournament): the shooter's fake projectile at once, the server's
//! real one advanced by the prediction time, caught up on arrival on the other clients, and its
//! flight judged against the hit boxes as the shooter saw them.
//!
//! Times: the server launches the real projectile `P = ½ × clamp(rtt − fudge, 0, cap)` in the
//! past ([`unlag_core::projectile_prediction_time`]), so it is about where the shooter's fake is.
//! When the cap cuts `P` short of the one-way trip, the shooter holds its fake back by the
//! difference (`hold`), so fake and real still agree. Every client draws a projectile at an age
//! `server time − zero` of its own: the shooter from the moment it fired (plus the hold), so
//! its fake and the real one that replaces it share one path and one clock and nothing jumps;
//! everyone else from the launch less its own prediction time (the catch-up on arrival), so
//! the projectile is where it will be when that client's moves reach the server.
//!
//! Hits: the shooter's client showed the projectile at age `a` with the other characters at
//! its view time then, `view time of the shot + hold + a`; the server sweeps the projectile's
//! step at age `a` ([`RewindQuery::segment`]) against the hit boxes rewound to that time.

mod draw;
mod flight;

pub(crate) use draw::client_projectiles;
pub use draw::{ClientProjectile, OwnProjectiles, ProjectileExploded};
pub(crate) use flight::fly_projectiles;

use crate::settings::CombatSettings;
use crate::weapons::{WeaponKind, WeaponSpec};
use bevy::prelude::*;
use unlag_core::{Ballistic, fake_projectile_hold, projectile_prediction_time};

/// A projectile in flight on the server (its own entity, not replicated: clients get one
/// [`ProjectileLaunched`](crate::ProjectileLaunched) and one
/// [`ProjectileImpact`](crate::ProjectileImpact)).
#[derive(Component, Clone, Debug)]
pub struct Projectile {
    /// The server's character entity that fired it (the one `link` controls). The flight
    /// passes through its hit boxes, and its explosion does not damage it.
    pub shooter: Entity,
    /// The shooter's link.
    pub link: Entity,
    /// The weapon's id (its place in the server's [`WeaponTable`](crate::WeaponTable)), from
    /// the shooter's [`FireRequest`](crate::FireRequest).
    pub weapon: u8,
    /// The shot's fire index.
    pub fire_index: u32,
    /// Where it started and how fast, at age 0.
    pub launch: Ballistic,
    /// Where it is now.
    pub flight: Ballistic,
    /// The server time of age 0, seconds (the request's arrival less the prediction time).
    pub launch_time: f64,
    /// Seconds flown so far.
    pub age: f32,
    /// The shooter's view time at age 0, seconds: a step at age `a` is judged against the hit
    /// boxes at `seen_from + a`. `None` when the shooter's ping is above the rewind cap
    /// (judged against the present).
    pub seen_from: Option<f64>,
    pub(super) announced: bool,
}

impl Projectile {
    /// A projectile launched for an accepted shot: `judged_time` is the time the shot is
    /// judged at (its view time, later above the rewind cap or the compensated delay:
    /// [`CombatSettings::shot_lead`], checked before), `rtt` the shooter's round trip
    /// (seconds), `now` the server time.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch(
        settings: &CombatSettings,
        spec: &WeaponSpec,
        shooter: Entity,
        link: Entity,
        weapon: u8,
        fire_index: u32,
        origin: Vec3,
        direction: Vec3,
        judged_time: f64,
        rtt: f64,
        now: f64,
    ) -> Option<Self> {
        let WeaponKind::Projectile { speed, gravity, .. } = spec.kind else {
            return None;
        };
        let prediction = projectile_prediction_time(
            rtt,
            settings.projectile_fudge,
            settings.max_prediction_ping,
        );
        let hold =
            fake_projectile_hold(rtt, settings.projectile_fudge, settings.max_prediction_ping);
        let launch = Ballistic {
            position: origin,
            velocity: direction * speed,
            gravity,
        };
        Some(Self {
            shooter,
            link,
            weapon,
            fire_index,
            launch,
            flight: launch,
            launch_time: now - prediction,
            age: 0.0,
            seen_from: settings.rewind.then_some(judged_time + hold),
            announced: false,
        })
    }

    /// The server time whose hit boxes a step ending at age `age` is judged against, seconds:
    /// never before `oldest` (a history shorter than a tick makes `oldest` the present).
    pub(super) fn judged_at(&self, age: f32, now: f64, oldest: f64) -> f64 {
        unlag_core::projectile_judged_time(self.seen_from, age, now, oldest)
    }
}
