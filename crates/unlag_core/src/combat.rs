//! Weapon numerics shared by client and server: predicted ammo, the server's fire-rate gate,
//! seeded pellet spread, cone checks and Unreal Tournament's projectile prediction time.

use crate::SplitMix64;
use glam::{Quat, Vec3};

/// The client's ammo display for one weapon (seed 000): `shown = server ammo − shots the
/// server has not answered yet`, so the number never jumps up while shots are in flight, and
/// ends equal to the server's once they are answered. Shots are known by their fire index,
/// which counts across all of a player's weapons.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PredictedAmmo {
    /// The ammo in the server's latest answer.
    server: u32,
    /// The fire index of the server's latest answer.
    answered: u32,
    /// Fire indices of this weapon's shots sent and not answered, oldest first.
    pending: std::collections::VecDeque<u32>,
}

impl PredictedAmmo {
    /// A weapon holding `ammo` rounds, nothing fired yet.
    pub fn new(ammo: u32) -> Self {
        Self {
            server: ammo,
            answered: 0,
            pending: Default::default(),
        }
    }

    /// Shots sent and not yet answered.
    pub fn pending(&self) -> u32 {
        self.pending.len() as u32
    }

    /// The ammo to show.
    pub fn shown(&self) -> u32 {
        self.server.saturating_sub(self.pending())
    }

    /// Fires the shot with this fire index if there is ammo to show; whether it fired.
    pub fn fire(&mut self, fire_index: u32) -> bool {
        if self.shown() == 0 {
            return false;
        }
        self.pending.push_back(fire_index);
        true
    }

    /// The server answered every shot up to fire index `answered` and holds `ammo` rounds. An
    /// answer older than one already taken is ignored (answers can arrive out of order).
    pub fn on_server(&mut self, answered: u32, ammo: u32) {
        if answered < self.answered {
            return;
        }
        self.answered = answered;
        self.pending.retain(|i| *i > answered);
        self.server = ammo;
    }

    /// A reload completed with `ammo` rounds (the server's own reload answers with
    /// [`PredictedAmmo::on_server`] too).
    pub fn reload(&mut self, ammo: u32) {
        self.server = ammo;
        self.pending.clear();
    }
}

/// The server's fire-rate check: a bucket that fills with elapsed time up to one fire interval
/// plus an allowance, and that each accepted shot empties by one interval. A shooter can never
/// sustain more than one shot per interval, and a late shot followed by an early one is not
/// punished as long as the gap is short by less than the allowance (twice the jitter of the
/// times fed in: arrival times jitter with the network, the shots' own view times far less).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct FireRateGate {
    interval: f64,
    allowance: f64,
    credit: f64,
    last: Option<f64>,
}

impl FireRateGate {
    /// A gate for one shot every `interval` seconds, tolerating `allowance` seconds of jitter.
    pub fn new(interval: f64, allowance: f64) -> Self {
        let (interval, allowance) = (interval.max(0.0), allowance.max(0.0));
        Self {
            interval,
            allowance,
            credit: interval + allowance,
            last: None,
        }
    }

    /// A shot arriving at `now` (server seconds): accepted (and counted) or refused.
    pub fn try_fire(&mut self, now: f64) -> bool {
        if !now.is_finite() {
            return false;
        }
        let elapsed = self.last.map_or(0.0, |last| (now - last).max(0.0));
        let credit = (self.credit + elapsed).min(self.interval + self.allowance);
        self.last = Some(self.last.map_or(now, |last| last.max(now)));
        // A microsecond of slack for float rounding on exact intervals.
        if credit + 1e-6 >= self.interval {
            self.credit = credit - self.interval;
            true
        } else {
            self.credit = credit;
            false
        }
    }
}

/// The server's fire-rate check over all of a shooter's weapons at once: a shot of weapon `W`
/// owes `W`'s fire interval before the next shot of any weapon, as with one weapon in hand (a
/// shooter cannot fire every weapon at its own full rate together). Like [`FireRateGate`] the
/// owed time is kept as a bucket that fills with elapsed time up to what the next shot owes plus
/// an allowance, so jitter between two shots is forgiven and the average rate never exceeds the
/// weapons' own.
///
/// Fire indices the shooter skipped (shots that never arrived: lost, or never sent) owe time
/// too, `skipped_interval` each (the shortest interval of any weapon: a lost shot was at least
/// that far from its neighbours). An honest client loses a shot only when every copy of it is
/// lost, and then its shots were that far apart anyway; a client that skips fire indices to
/// pick a spread pattern it likes pays for each one skipped in fire rate, as if it had fired it.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct SharedFireGate {
    allowance: f64,
    credit: f64,
    /// Seconds the previous accepted shot owes (its weapon's fire interval).
    owed: f64,
    last: Option<f64>,
}

impl SharedFireGate {
    /// A gate forgiving `allowance` seconds of jitter between two shots.
    pub fn new(allowance: f64) -> Self {
        let allowance = if allowance.is_finite() {
            allowance.max(0.0)
        } else {
            0.0
        };
        Self {
            allowance,
            credit: allowance,
            owed: 0.0,
            last: None,
        }
    }

    /// A shot at `now` (seconds on the clock the shots are stamped with) of a weapon whose fire
    /// interval is `interval`, after `skipped` fire indices that never arrived, each owing
    /// `skipped_interval`: accepted (and counted) or refused.
    pub fn try_fire(
        &mut self,
        now: f64,
        interval: f64,
        skipped: u32,
        skipped_interval: f64,
    ) -> bool {
        if !now.is_finite() || !interval.is_finite() || !skipped_interval.is_finite() {
            return false;
        }
        let need = self.owed + f64::from(skipped) * skipped_interval.max(0.0);
        let elapsed = self.last.map_or(0.0, |last| (now - last).max(0.0));
        let credit = (self.credit + elapsed).min(need + self.allowance);
        self.last = Some(self.last.map_or(now, |last| last.max(now)));
        // A microsecond of slack for float rounding on exact intervals.
        if credit + 1e-6 >= need {
            self.credit = credit - need;
            self.owed = interval.max(0.0);
            true
        } else {
            self.credit = credit;
            false
        }
    }
}

/// The seed of a shot's random spread, which client and server both derive from the shooter
/// and the fire index (so the server can check the pellets it receives).
pub fn spread_seed(shooter: u64, fire_index: u32) -> u64 {
    SplitMix64::new(shooter ^ (u64::from(fire_index) << 40) ^ 0x5EED_5EED).next_u64()
}

/// `count` directions over the cone of half angle `half_angle` (radians) around `aim`
/// (normalised), rolled from `seed`. The first pellet flies along `aim`.
///
/// The others are stratified: pellet `i` of the `n = count − 1` lies in the `i`-th of `n`
/// rings of equal area (uniform within it), at a seeded turn of the whole pattern plus the
/// golden angle per pellet and a seeded wobble within its share of the circle. Over many shots
/// the pellets cover the cap uniformly, as independent rolls would, but every pattern is as
/// tight as every other: no seed gives a tighter pattern worth picking (a client that skipped
/// fire indices to find one would find none). A single spread ray (`count` 2) is uniform over
/// the whole cap.
pub fn pellet_directions(seed: u64, aim: Vec3, count: usize, half_angle: f32) -> Vec<Vec3> {
    let aim = aim.normalize_or(Vec3::NEG_Z);
    let mut rng = SplitMix64::new(seed);
    // A basis around the aim.
    let to_aim = Quat::from_rotation_arc(Vec3::NEG_Z, aim);
    let rings = count.saturating_sub(1).max(1) as f32;
    let turn = rng.next_f64() as f32 * std::f32::consts::TAU;
    // The golden angle spreads consecutive rings' pellets around the circle.
    let golden = std::f32::consts::PI * (3.0 - 5f32.sqrt());
    let cos_min = half_angle.cos();
    (0..count)
        .map(|i| {
            if i == 0 {
                return aim;
            }
            // Uniform over ring i's share of the spherical cap: cos θ uniform in it.
            let u = ((i - 1) as f32 + rng.next_f64() as f32) / rings;
            let cos_t = 1.0 - u * (1.0 - cos_min);
            let sin_t = (1.0 - cos_t * cos_t).max(0.0).sqrt();
            let wobble = (rng.next_f64() as f32 - 0.5) * std::f32::consts::TAU / rings;
            let phi = turn + golden * i as f32 + wobble;
            let local = Vec3::new(sin_t * phi.cos(), sin_t * phi.sin(), -cos_t);
            (to_aim * local).normalize()
        })
        .collect()
}

/// Whether `direction` lies within `half_angle` radians (plus `slack`) of `aim`.
pub fn within_cone(aim: Vec3, direction: Vec3, half_angle: f32, slack: f32) -> bool {
    match (aim.try_normalize(), direction.try_normalize()) {
        (Some(a), Some(d)) => a.dot(d).clamp(-1.0, 1.0).acos() <= half_angle + slack,
        _ => false,
    }
}

/// Unreal Tournament's projectile prediction time: how far the server advances a new
/// projectile to meet the shooter's view, `½ × clamp(rtt − fudge, 0, cap)` seconds.
pub fn projectile_prediction_time(rtt: f64, fudge: f64, cap: f64) -> f64 {
    if !rtt.is_finite() {
        return 0.0;
    }
    0.5 * (rtt - fudge).clamp(0.0, cap.max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ammo_never_rises_while_shots_are_in_flight_and_ends_on_the_servers() {
        let mut ammo = PredictedAmmo::new(10);
        let mut shown = vec![ammo.shown()];
        // Ten quick shots (fire indices 1, 3, 5, ...: another weapon fired in between);
        // answers come back later, two of them out of order.
        let fired: Vec<u32> = (0..10).map(|i| 2 * i + 1).collect();
        assert!(fired.iter().all(|i| ammo.fire(*i)));
        shown.push(ammo.shown());
        assert!(!ammo.fire(99), "empty");
        for i in [0, 1, 2, 4, 3, 5, 6, 7, 8, 9] {
            ammo.on_server(fired[i], 10 - i as u32 - 1);
            shown.push(ammo.shown());
        }
        assert!(shown.windows(2).all(|w| w[1] <= w[0]), "{shown:?}");
        assert_eq!((ammo.shown(), ammo.pending()), (0, 0));
        ammo.reload(10);
        assert_eq!(ammo.shown(), 10);
        // An answer older than the last one taken changes nothing.
        ammo.on_server(3, 50);
        assert_eq!(ammo.shown(), 10);
    }

    #[test]
    fn the_gate_holds_the_average_rate_and_forgives_jitter() {
        let mut gate = FireRateGate::new(0.1, 0.03);
        // Exactly on time: all accepted.
        assert!((0..50).all(|i| gate.try_fire(f64::from(i) * 0.1)));
        // Jittered arrivals around the 0.1 s rhythm (±25 ms, so one gap can be 50 ms short):
        // all accepted with an allowance of twice the jitter.
        let mut gate = FireRateGate::new(0.1, 0.05);
        let jitter = [0.0, 0.02, -0.02, 0.025, -0.025, 0.0, 0.01, -0.01];
        assert!((0..80).all(|i| gate.try_fire(f64::from(i) * 0.1 + jitter[i as usize % 8])));
        // Twice the rate: about half refused, never more than one per interval on average.
        let mut gate = FireRateGate::new(0.1, 0.03);
        let accepted = (0..100)
            .filter(|&i| gate.try_fire(f64::from(i) * 0.05))
            .count();
        assert!((48..=52).contains(&accepted), "{accepted}");
        // A burst of ten at once: one (plus what the allowance holds) gets through.
        let mut gate = FireRateGate::new(0.1, 0.03);
        assert_eq!((0..10).filter(|_| gate.try_fire(5.0)).count(), 1);
        assert!(!gate.try_fire(f64::NAN));
    }

    #[test]
    fn pellets_repeat_from_the_seed_and_stay_in_the_cone() {
        let aim = Vec3::new(0.3, 0.1, -1.0).normalize();
        let seed = spread_seed(42, 7);
        let a = pellet_directions(seed, aim, 12, 0.1);
        assert_eq!(
            a,
            pellet_directions(seed, aim, 12, 0.1),
            "same seed, same pellets"
        );
        assert_ne!(a, pellet_directions(spread_seed(42, 8), aim, 12, 0.1));
        assert_eq!(a.len(), 12);
        assert_eq!(a[0], aim);
        assert!(a.iter().all(|d| within_cone(aim, *d, 0.1, 1e-4)));
        assert!(
            a.iter().skip(1).any(|d| aim.angle_between(*d) > 0.05),
            "spread out"
        );
        assert!(!within_cone(aim, Vec3::X, 0.1, 0.01));
        assert!(!within_cone(aim, Vec3::ZERO, 0.1, 0.01));
    }

    #[test]
    fn the_shared_gate_holds_every_weapon_to_the_previous_shots_interval() {
        // A rifle (0.1 s) and a launcher (0.9 s): a launcher shot holds the rifle back too.
        let mut gate = SharedFireGate::new(0.01);
        assert!(gate.try_fire(0.0, 0.9, 0, 0.1));
        assert!(
            !gate.try_fire(0.1, 0.1, 0, 0.1),
            "the launcher's interval is owed"
        );
        assert!(gate.try_fire(0.9, 0.1, 0, 0.1));
        assert!(gate.try_fire(1.0, 0.9, 0, 0.1));
        // Each weapon fired on its own rhythm (the rifle every 0.1 s, the launcher every
        // 0.9 s beside it, 20 ms later): no more damage per second than the best weapon alone
        // (the rifle's 250), where a gate per weapon let 25 / 0.1 + 90 / 0.9 = 350 through.
        let mut gate = SharedFireGate::new(0.01);
        let mut damage = 0.0;
        let mut shots = Vec::new();
        for k in 0..100 {
            shots.push((f64::from(k) * 0.1, 0.1, 25.0));
            if k % 9 == 0 {
                shots.push((f64::from(k) * 0.1 + 0.02, 0.9, 90.0));
            }
        }
        for (t, interval, dmg) in shots {
            if gate.try_fire(t, interval, 0, 0.1) {
                damage += dmg;
            }
        }
        assert!(
            damage / 10.0 <= 250.0 * 1.02,
            "{} per second",
            damage / 10.0
        );
        // Jitter of ±15 ms (one gap 30 ms short) is forgiven with an allowance of twice it;
        // a burst is not.
        let mut gate = SharedFireGate::new(0.03);
        let jitter = [0.0, 0.015, -0.015, 0.01, -0.01];
        assert!((0..50).all(|i| gate.try_fire(
            f64::from(i) * 0.1 + jitter[i as usize % 5],
            0.1,
            0,
            0.1
        )));
        let mut gate = SharedFireGate::new(0.02);
        assert_eq!(
            (0..10).filter(|_| gate.try_fire(5.0, 0.1, 0, 0.1)).count(),
            1
        );
        assert!(!gate.try_fire(f64::NAN, 0.1, 0, 0.1));
    }

    #[test]
    fn skipped_fire_indices_owe_their_time() {
        // Honest: shot 2 of three, 0.1 s apart, lost; shot 3 arrives 0.2 s after shot 1.
        let mut gate = SharedFireGate::new(0.01);
        assert!(gate.try_fire(0.0, 0.1, 0, 0.1));
        assert!(gate.try_fire(0.2, 0.1, 1, 0.1));
        // A client skipping an index with every shot, at the weapon's rate: every other shot
        // refused, so it fires at half the rate (as if it had fired the skipped ones).
        let mut gate = SharedFireGate::new(0.01);
        let accepted = (0..100)
            .filter(|&k| gate.try_fire(f64::from(k) * 0.1, 0.1, u32::from(k > 0), 0.1))
            .count();
        assert!((49..=51).contains(&accepted), "{accepted}");
    }

    #[test]
    fn no_seed_gives_a_tighter_pattern_worth_picking() {
        // A shotgun of 12 pellets over a 5° cone, at a 0.2-m head 20 m away (a 0.29° half
        // angle): how many pellets hit it, over the patterns of 2000 fire indices.
        let aim = Vec3::new(0.2, -0.1, -1.0).normalize();
        let half = 5f32.to_radians();
        let head = (0.1f32 / 20.0).atan();
        let spread = |dirs: &[Vec3]| {
            dirs.iter().map(|d| aim.angle_between(*d)).sum::<f32>() / dirs.len() as f32
        };
        let spreads: Vec<f32> = (0..2000)
            .map(|k| spread(&pellet_directions(spread_seed(0, k), aim, 12, half)))
            .collect();
        let mean = spreads.iter().sum::<f32>() / spreads.len() as f32;
        let tightest = spreads.iter().copied().fold(f32::INFINITY, f32::min);
        // The best of 2000 patterns is within 6 % of the average: nothing worth grinding for.
        assert!(tightest > 0.94 * mean, "tightest {tightest}, mean {mean}");
        let inner = |k: u32| {
            pellet_directions(spread_seed(0, k), aim, 12, half)
                .iter()
                .filter(|d| aim.angle_between(**d) <= head * 4.0)
                .count()
        };
        // Pellets near the middle: the same number whatever the seed (pellet 0 and the
        // innermost ring's, at most).
        let counts: Vec<usize> = (0..2000).map(inner).collect();
        assert!(counts.iter().all(|c| *c <= 2), "{:?}", counts.iter().max());
        // Over many shots the pellets still cover the cap uniformly: as many beyond the
        // median angle of a uniform cap (cos θ halfway) as within it.
        let cos_mid = 1.0 - 0.5 * (1.0 - half.cos());
        let (mut inside, mut outside) = (0i32, 0i32);
        for k in 0..500 {
            for d in pellet_directions(spread_seed(0, k), aim, 12, half)
                .iter()
                .skip(1)
            {
                if aim.dot(*d) >= cos_mid {
                    inside += 1;
                } else {
                    outside += 1;
                }
            }
        }
        assert!((inside - outside).abs() < 300, "{inside} {outside}");
    }

    #[test]
    fn prediction_time_is_half_the_clamped_rtt() {
        assert_eq!(projectile_prediction_time(0.2, 0.015, 0.16), 0.08);
        assert!((projectile_prediction_time(0.1, 0.015, 0.16) - 0.0425).abs() < 1e-12);
        assert_eq!(projectile_prediction_time(0.01, 0.015, 0.16), 0.0);
        assert_eq!(projectile_prediction_time(f64::NAN, 0.015, 0.16), 0.0);
    }
}
