//! The shot as the client predicts it: taken from the predicted ammo and the one fire rate over
//! every weapon, as the server checks them, and the damage its unanswered shots are expected to
//! deal, so a hit on a body they have already killed is told apart.

use super::trace::{Pellet, Target};
use super::{Armory, IN_FLIGHT_SECONDS, InFlight, LocalHit, ProxyHealth};
use crate::weapons::WeaponSpec;
use bevy::prelude::*;

impl Armory {
    /// Takes a shot of weapon `weapon` (of `spec`) at view time `now` (seconds) if the
    /// previous shot's interval is over (one weapon in hand: it holds back every weapon), the
    /// weapon is not reloading and has a round: its fire index (counted across every weapon:
    /// the server refuses any not above the last), or `None`.
    pub(super) fn take_shot(&mut self, weapon: u8, spec: &WeaponSpec, now: f64) -> Option<u32> {
        let fire_index = self.last_fire_index + 1;
        let cooling = self
            .last_shot
            .is_some_and(|(t, interval)| now - t < interval - 1e-6);
        let w = self.weapons.get_mut(usize::from(weapon))?;
        if cooling || w.reloading_until.is_some() || !w.ammo.fire(fire_index) {
            return None;
        }
        self.last_shot = Some((now, f64::from(spec.fire_interval)));
        self.last_fire_index = fire_index;
        Some(fire_index)
    }

    /// What the game is told of shot `fire_index`'s pellet `hits` (fired at view time `now`,
    /// seconds): each hit on a proxy held past its extrapolation (or shown before its first
    /// state) dropped, as it shows the past and the server counts no hit on it (the pellet
    /// still stops there); the others marked [`LocalHit::expected_dead`] when this client's
    /// unanswered shots are expected to have killed the target already. Then this shot's own
    /// damage joins them.
    pub(super) fn expect(
        &mut self,
        hits: Vec<Option<Pellet>>,
        (targets, spec): (&[Target], &WeaponSpec),
        fire_index: u32,
        now: f64,
        health: &Query<&ProxyHealth>,
    ) -> Vec<Option<LocalHit>> {
        self.in_flight.retain(|f| now - f.at <= IN_FLIGHT_SECONDS);
        let dead_before: Vec<Entity> = hits
            .iter()
            .flatten()
            .map(|p| p.target)
            .filter(|t| self.expected_dead(*t, health))
            .collect();
        let stale = |target: Entity| {
            targets
                .iter()
                .find(|t| t.proxy == target)
                .is_some_and(|t| t.pose.kind.is_stale())
        };
        for pellet in hits.iter().flatten() {
            if stale(pellet.target) {
                continue;
            }
            self.owe(
                fire_index,
                pellet.target,
                spec.damage * pellet.multiplier,
                now,
            );
        }
        hits.into_iter()
            .map(|p| {
                p.filter(|p| !stale(p.target)).map(|p| LocalHit {
                    expected_dead: dead_before.contains(&p.target),
                    ..p.hit
                })
            })
            .collect()
    }

    /// Whether `target`'s health as the game last heard it, less the damage of this client's
    /// unanswered shots, is spent.
    fn expected_dead(&self, target: Entity, health: &Query<&ProxyHealth>) -> bool {
        health.get(target).is_ok_and(|h| {
            let owed: f32 = self
                .in_flight
                .iter()
                .filter(|f| f.target == target)
                .map(|f| f.damage)
                .sum();
            h.0 - owed <= 0.0
        })
    }

    /// Adds `damage` (hit points) that shot `fire_index`, fired at view time `at`, is expected
    /// to deal `target`.
    fn owe(&mut self, fire_index: u32, target: Entity, damage: f32, at: f64) {
        match self
            .in_flight
            .iter_mut()
            .find(|f| f.fire_index == fire_index && f.target == target)
        {
            Some(f) => f.damage += damage,
            None => self.in_flight.push(InFlight {
                fire_index,
                target,
                damage,
                at,
            }),
        }
    }
}
