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

use crate::health::{Damaged, Health, Killed, deal_damage};
use crate::protocol::{ConfirmedHit, ProjectileImpact, ProjectileLaunched};
use crate::settings::{CombatSettings, Weapons};
use crate::stats::CombatStats;
use crate::weapons::{WeaponKind, WeaponSpec};
use bevy::prelude::*;
use lightyear::prelude::server::ClientOf;
use lightyear::prelude::*;
use unlag_core::{
    Ballistic, fake_projectile_hold, fake_projectile_life, projectile_prediction_time,
};
use unlag_net::{LinkTraffic, NetClock, ReliableChannel};
use unlag_rewind::{RewindHit, RewindQuery, RewindSettings};

/// A projectile in flight on the server (its own entity, not replicated: clients get one
/// [`ProjectileLaunched`] and one [`ProjectileImpact`]).
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
    announced: bool,
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
    fn judged_at(&self, age: f32, now: f64, oldest: f64) -> f64 {
        judged_time(self.seen_from, age, now, oldest)
    }
}

/// [`Projectile::judged_at`] for a projectile seen from `seen_from` (`None`: no rewind).
fn judged_time(seen_from: Option<f64>, age: f32, now: f64, oldest: f64) -> f64 {
    seen_from.map_or(now, |t| (t + f64::from(age)).clamp(oldest.min(now), now))
}

/// Flies the server's projectiles to the present: announces new ones to every client, sweeps
/// each step against the rewound hit boxes and the world, explodes them (direct and splash
/// damage from the server's weapon table) and reports the impact to every client.
#[allow(clippy::too_many_arguments)]
pub(crate) fn fly_projectiles(
    mut commands: Commands,
    weapons: Res<Weapons>,
    clock: Res<NetClock>,
    rewind_settings: Res<RewindSettings>,
    mut stats: ResMut<CombatStats>,
    mut projectiles: Query<(Entity, &mut Projectile)>,
    mut links: Query<
        (
            Entity,
            &mut MessageSender<ProjectileLaunched>,
            &mut MessageSender<ProjectileImpact>,
            &mut LinkTraffic,
        ),
        With<ClientOf>,
    >,
    rewind: RewindQuery,
    mut health: Query<&mut Health>,
    mut damaged: MessageWriter<Damaged>,
    mut killed: MessageWriter<Killed>,
    work: Option<Res<unlag_net::ServerWork>>,
) {
    let _work = work.as_deref().map(|w| w.time(unlag_net::WorkPart::Shots));
    let Some(table) = &weapons.table else {
        return;
    };
    let now = clock.server_time;
    let step = clock.tick_duration.max(1e-3) as f32;
    // No further back than the rewind judges now (the span the clients' views reach).
    let oldest = rewind
        .judged_window()
        .map_or(now - rewind_settings.max_record_time, |w| w.0)
        + clock.tick_duration;
    for (entity, mut projectile) in &mut projectiles {
        let Some(spec) = table.get(projectile.weapon) else {
            commands.entity(entity).despawn();
            continue;
        };
        let WeaponKind::Projectile {
            radius, lifetime, ..
        } = spec.kind
        else {
            commands.entity(entity).despawn();
            continue;
        };
        if !projectile.announced {
            projectile.announced = true;
            stats.projectiles += 1;
            for (link, mut sender, _, mut traffic) in &mut links {
                traffic.send_counted::<ReliableChannel, _>(
                    &mut sender,
                    ProjectileLaunched {
                        shooter: projectile.shooter,
                        own: link == projectile.link,
                        weapon: projectile.weapon,
                        fire_index: projectile.fire_index,
                        origin: projectile.launch.position,
                        velocity: projectile.launch.velocity,
                        launch_time: projectile.launch_time,
                    },
                );
            }
        }
        let until = ((now - projectile.launch_time) as f32).min(lifetime);
        let mut ended: Option<(Vec3, Option<RewindHit>, f64)> = None;
        while projectile.age < until - 1e-6 {
            let dt = (until - projectile.age).min(step);
            let (from, to) = projectile.flight.advance(dt);
            projectile.age += dt;
            let at = projectile.judged_at(projectile.age - 0.5 * dt, now, oldest);
            let length = from.distance(to);
            if length < 1e-6 {
                continue;
            }
            let dir = (to - from) / length;
            // A character first (the world occludes its sweep), then the world.
            match rewind.segment(from, to, radius, at, Some(projectile.shooter)) {
                // The dead do not stop projectiles (hitscan refuses them as targets too).
                Ok(Some(hit)) if health.get(hit.character).is_ok_and(|h| !h.alive()) => {}
                Ok(Some(hit)) => {
                    ended = Some((from + dir * hit.distance, Some(hit), at));
                    break;
                }
                Ok(None) => {}
                Err(e) => unlag_net::warn_counted!(
                    stats.projectile_sweep_errors,
                    "projectile sweep failed: {e}"
                ),
            }
            let wall = rewind.wall(from, dir, length, Some(projectile.shooter));
            if wall < length {
                ended = Some((from + dir * wall, None, at));
                break;
            }
        }
        let exploded = ended.is_some();
        if ended.is_none() && projectile.age < lifetime - 1e-6 {
            continue;
        }
        let (point, direct, at) = ended.unwrap_or((
            projectile.flight.position,
            None,
            projectile.judged_at(lifetime, now, oldest),
        ));
        let hits = if exploded {
            explode(
                spec,
                &projectile,
                point,
                direct,
                at,
                &rewind,
                &mut health,
                &mut damaged,
                &mut killed,
            )
        } else {
            Vec::new()
        };
        stats.pellet_hits += hits.iter().map(|h| u64::from(h.pellets)).sum::<u64>();
        for (link, _, mut sender, mut traffic) in &mut links {
            traffic.send_counted::<ReliableChannel, _>(
                &mut sender,
                ProjectileImpact {
                    shooter: projectile.shooter,
                    own: link == projectile.link,
                    weapon: projectile.weapon,
                    fire_index: projectile.fire_index,
                    point,
                    exploded,
                    rewound: projectile.seen_from.is_some(),
                    hits: hits.clone(),
                },
            );
        }
        commands.entity(entity).despawn();
    }
}

/// Damage of an explosion at `point`, judged at server time `at`: the character hit directly
/// takes the weapon's damage (head and box multipliers applied); every other character within
/// the splash radius whose body the world does not hide takes splash damage falling off
/// linearly with distance. The shooter takes none.
#[allow(clippy::too_many_arguments)]
fn explode(
    spec: &WeaponSpec,
    projectile: &Projectile,
    point: Vec3,
    direct: Option<RewindHit>,
    at: f64,
    rewind: &RewindQuery,
    health: &mut Query<&mut Health>,
    damaged: &mut MessageWriter<Damaged>,
    killed: &mut MessageWriter<Killed>,
) -> Vec<ConfirmedHit> {
    let WeaponKind::Projectile {
        splash_damage,
        splash_radius,
        ..
    } = spec.kind
    else {
        return Vec::new();
    };
    let mut dealt = Vec::new();
    let mut exclude = vec![projectile.shooter];
    if let Some(hit) = direct {
        exclude.push(hit.character);
        let head = if hit.is_head {
            spec.headshot_multiplier
        } else {
            1.0
        };
        let damage = spec.damage * head * hit.damage_multiplier;
        let killed_it = deal_damage(
            health,
            damaged,
            killed,
            hit.character,
            projectile.shooter,
            projectile.weapon,
            damage,
            &hit.bone,
            hit.is_head,
        );
        dealt.push(ConfirmedHit {
            target: hit.character,
            bone: hit.bone,
            headshot: hit.is_head,
            damage,
            pellets: 1,
            killed: killed_it,
        });
    }
    let near = rewind
        .within(point, splash_radius, at, &exclude)
        .unwrap_or_default();
    for (target, distance) in near {
        if health.get(target).is_ok_and(|h| !h.alive()) {
            continue;
        }
        // The world between the blast and the body shields it (seen from just before the
        // impact: the point itself touches the surface hit).
        let blast = point - projectile.flight.velocity.normalize_or_zero() * 0.1;
        let shielded = rewind.root_at(target, at).is_ok_and(|(root, _)| {
            let body = root + Vec3::Y;
            let to = body - blast;
            let length = to.length();
            length > 0.3
                && rewind.wall(blast, to / length, length, Some(projectile.shooter)) < length - 0.3
        });
        if shielded || splash_radius <= 0.0 {
            continue;
        }
        let damage = splash_damage * (1.0 - distance / splash_radius).clamp(0.0, 1.0);
        if damage <= 0.0 {
            continue;
        }
        let killed_it = deal_damage(
            health,
            damaged,
            killed,
            target,
            projectile.shooter,
            projectile.weapon,
            damage,
            "",
            false,
        );
        dealt.push(ConfirmedHit {
            target,
            bone: String::new(),
            headshot: false,
            damage,
            pellets: 0,
            killed: killed_it,
        });
    }
    dealt
}

/// A projectile drawn on a client: the shooter's fake one, or one the server launched. Its
/// `Transform` follows the ballistic path at age `server time − zero` (see the module docs).
#[derive(Component, Clone, Debug, PartialEq)]
pub struct ClientProjectile {
    /// The shooter (our own character for our shots).
    pub shooter: Entity,
    /// Whether we fired it.
    pub own: bool,
    /// Whether it is our fake one, not yet replaced by the server's.
    pub fake: bool,
    /// The weapon's id (its place in the [`WeaponTable`](crate::WeaponTable)): the fired
    /// weapon for a fake one, the server's [`ProjectileLaunched::weapon`] otherwise.
    pub weapon: u8,
    /// The shot's fire index.
    pub fire_index: u32,
    /// Where it started and how fast.
    pub launch: Ballistic,
    /// The server time at which it is drawn at age 0, seconds.
    pub zero: f64,
    /// The longest it is drawn for, seconds of age (a fake one: at most twice the catch-up).
    pub life: f32,
}

impl ClientProjectile {
    /// Its age at (estimated) server time `server_time`, seconds, within its life.
    pub fn age(&self, server_time: f64) -> f32 {
        ((server_time - self.zero) as f32).clamp(0.0, self.life)
    }

    /// Where it is drawn at server time `server_time`, metres.
    pub fn position(&self, server_time: f64) -> Vec3 {
        self.launch.position_after(self.age(server_time))
    }
}

/// One of our projectile shots, kept until its impact.
#[derive(Clone, Debug)]
struct OwnShot {
    fire_index: u32,
    weapon: u8,
    launch: Ballistic,
    zero: f64,
    fake_life: f32,
    lifetime: f32,
    fake: Option<Entity>,
    replaced: bool,
    done: bool,
}

/// The client's own projectile shots (resource): fakes waiting to show, and the clock each is
/// drawn on.
#[derive(Resource, Clone, Debug, Default)]
pub struct OwnProjectiles {
    shots: Vec<OwnShot>,
}

impl OwnProjectiles {
    /// Records a projectile shot fired now (the clock's server time, round trip and tick);
    /// its fake shows once the hold is over.
    pub(crate) fn fired(
        &mut self,
        settings: &CombatSettings,
        spec: &WeaponSpec,
        (weapon, fire_index): (u8, u32),
        (origin, direction): (Vec3, Vec3),
        clock: &NetClock,
    ) {
        let (now, rtt, tick) = (clock.server_time, clock.rtt, clock.tick_duration);
        let WeaponKind::Projectile {
            speed,
            gravity,
            lifetime,
            ..
        } = spec.kind
        else {
            return;
        };
        let (fudge, cap) = (settings.projectile_fudge, settings.max_prediction_ping);
        let prediction = projectile_prediction_time(rtt, fudge, cap);
        self.shots.push(OwnShot {
            fire_index,
            weapon,
            launch: Ballistic {
                position: origin,
                velocity: direction * speed,
                gravity,
            },
            zero: now + fake_projectile_hold(rtt, fudge, cap),
            fake_life: (fake_projectile_life(prediction, tick) as f32).min(lifetime),
            lifetime,
            fake: None,
            replaced: false,
            done: false,
        });
    }
}

/// Combat → game (client): a projectile's flight ended (for the explosion's effects; for our
/// own shots `own` is set and `hits` are the server-confirmed hits).
#[derive(Message, Clone, Debug, PartialEq)]
pub struct ProjectileExploded(pub ProjectileImpact);

/// Shows fakes whose hold is over, retires fakes past their life, takes the server's launches
/// (replacing our fakes) and impacts, and draws every projectile at its age.
#[allow(clippy::too_many_arguments)]
pub(crate) fn client_projectiles(
    mut commands: Commands,
    clock: Res<NetClock>,
    settings: Res<CombatSettings>,
    weapons: Res<Weapons>,
    mut own: ResMut<OwnProjectiles>,
    mut launches: Query<&mut MessageReceiver<ProjectileLaunched>, With<Client>>,
    mut impacts: Query<&mut MessageReceiver<ProjectileImpact>, With<Client>>,
    mut drawn: Query<(Entity, &ClientProjectile, &mut Transform)>,
    mut exploded: MessageWriter<ProjectileExploded>,
) {
    let now = clock.server_time;
    // Fakes: shown when their hold is over, gone after their life.
    for shot in &mut own.shots {
        if shot.fake.is_none() && !shot.replaced && !shot.done && now >= shot.zero {
            let age = (now - shot.zero) as f32;
            if age < shot.fake_life {
                let projectile = ClientProjectile {
                    shooter: Entity::PLACEHOLDER,
                    own: true,
                    fake: true,
                    weapon: shot.weapon,
                    fire_index: shot.fire_index,
                    launch: shot.launch,
                    zero: shot.zero,
                    life: shot.fake_life,
                };
                let at = Transform::from_translation(projectile.position(now));
                shot.fake = Some(commands.spawn((projectile, at)).id());
            } else {
                shot.done = true;
            }
        }
        if let Some(fake) = shot.fake
            && (now - shot.zero) as f32 >= shot.fake_life
        {
            commands.entity(fake).try_despawn();
            shot.fake = None;
            shot.done = true;
        }
    }
    for mut receiver in &mut launches {
        for launch in receiver.receive() {
            let (gravity, lifetime) = weapons
                .table
                .as_ref()
                .and_then(|t| t.get(launch.weapon))
                .map_or((0.0, 0.0), |spec| match spec.kind {
                    WeaponKind::Projectile {
                        gravity, lifetime, ..
                    } => (gravity, lifetime),
                    _ => (0.0, 0.0),
                });
            let flight = Ballistic {
                position: launch.origin,
                velocity: launch.velocity,
                gravity,
            };
            if !(flight.position.is_finite()
                && flight.velocity.is_finite()
                && launch.launch_time.is_finite())
            {
                continue;
            }
            // Ours: the same path on the clock its fake was drawn on. Anyone else's: caught up
            // by our prediction time.
            let mine = launch
                .own
                .then(|| {
                    own.shots
                        .iter_mut()
                        .find(|s| s.fire_index == launch.fire_index)
                })
                .flatten();
            let zero = match mine {
                Some(shot) => {
                    if let Some(fake) = shot.fake.take() {
                        commands.entity(fake).try_despawn();
                    }
                    shot.replaced = true;
                    shot.zero
                }
                None => {
                    launch.launch_time
                        - projectile_prediction_time(
                            clock.rtt,
                            settings.projectile_fudge,
                            settings.max_prediction_ping,
                        )
                }
            };
            let projectile = ClientProjectile {
                shooter: launch.shooter,
                own: launch.own,
                fake: false,
                weapon: launch.weapon,
                fire_index: launch.fire_index,
                launch: flight,
                zero,
                life: lifetime,
            };
            let at = Transform::from_translation(projectile.position(now));
            commands.spawn((projectile, at));
        }
    }
    for mut receiver in &mut impacts {
        for impact in receiver.receive() {
            let same = |p: &ClientProjectile| {
                p.fire_index == impact.fire_index
                    && if impact.own {
                        p.own
                    } else {
                        !p.own && p.shooter == impact.shooter
                    }
            };
            for (entity, projectile, _) in &drawn {
                if same(projectile) {
                    commands.entity(entity).try_despawn();
                }
            }
            if impact.own
                && let Some(shot) = own
                    .shots
                    .iter_mut()
                    .find(|s| s.fire_index == impact.fire_index)
            {
                if let Some(fake) = shot.fake.take() {
                    commands.entity(fake).try_despawn();
                }
                shot.done = true;
                shot.replaced = true;
            }
            exploded.write(ProjectileExploded(impact));
        }
    }
    // Shots whose flight is long over are forgotten.
    own.shots
        .retain(|s| !(s.done && s.replaced) && now - s.zero < f64::from(s.lifetime) + 5.0);
    for (_, projectile, mut transform) in &mut drawn {
        let age = projectile.age(now);
        transform.translation = projectile.launch.position_after(age);
        if let Some(forward) = projectile.launch.velocity_after(age).try_normalize() {
            transform.look_to(forward, Vec3::Y);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::judged_time;

    /// A history shorter than a tick puts the oldest judged time after the present: this used
    /// to panic (a clamp with crossed bounds) on the first rewound projectile.
    #[test]
    fn a_history_shorter_than_a_tick_judges_the_present() {
        let now = 10.0;
        let oldest = now - 0.001 + 1.0 / 60.0;
        assert_eq!(judged_time(Some(9.8), 0.05, now, oldest), now);
        assert_eq!(
            judged_time(Some(9.8), 0.05, now, 9.0),
            9.8 + f64::from(0.05f32)
        );
        assert_eq!(judged_time(None, 0.05, now, 9.0), now);
    }
}
