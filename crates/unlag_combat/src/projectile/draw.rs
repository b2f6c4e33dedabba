//! Projectiles on a client: the shooter's fake one at once, the server's replacing it on the
//! same path and clock, everyone else's caught up by the prediction time, and their impacts.

use crate::protocol::{ProjectileImpact, ProjectileLaunched};
use crate::settings::{CombatSettings, Weapons};
use crate::weapons::{WeaponKind, WeaponSpec};
use bevy::prelude::*;
use lightyear::prelude::*;
use unlag_core::{
    Ballistic, fake_projectile_hold, fake_projectile_life, projectile_prediction_time,
};
use unlag_net::NetClock;

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
/// own shots `own` is set and `hits` are the server-confirmed hits; others' list none).
#[derive(Message, Clone, Debug, PartialEq)]
pub struct ProjectileExploded(pub ProjectileImpact);

/// Shows fakes whose hold is over, retires fakes past their life, takes the server's launches
/// (replacing our fakes) and impacts, and draws every projectile at its age.
pub(crate) fn client_projectiles(
    mut commands: Commands,
    (clock, settings, weapons): (Res<NetClock>, Res<CombatSettings>, Res<Weapons>),
    mut own: ResMut<OwnProjectiles>,
    mut launches: Query<&mut MessageReceiver<ProjectileLaunched>, With<Client>>,
    mut impacts: Query<&mut MessageReceiver<ProjectileImpact>, With<Client>>,
    mut drawn: Query<(Entity, &ClientProjectile, &mut Transform)>,
    mut exploded: MessageWriter<ProjectileExploded>,
) {
    let now = clock.server_time;
    own.show_fakes(&mut commands, now);
    // Projectiles spawned this frame are not in `drawn` yet: an impact that came with its
    // launch (a rocket fired into a wall at point-blank range) must end them too.
    let mut spawned: Vec<(Entity, ClientProjectile)> = Vec::new();
    for mut receiver in &mut launches {
        for launch in receiver.receive() {
            let Some(projectile) =
                own.take_launch(&launch, &mut commands, &clock, &settings, &weapons)
            else {
                continue;
            };
            let at = Transform::from_translation(projectile.position(now));
            spawned.push((commands.spawn((projectile.clone(), at)).id(), projectile));
        }
    }
    for mut receiver in &mut impacts {
        for impact in receiver.receive() {
            let drawn_now = drawn
                .iter()
                .map(|(entity, projectile, _)| (entity, projectile));
            let spawned_now = spawned
                .iter()
                .map(|(entity, projectile)| (*entity, projectile));
            for (entity, projectile) in drawn_now.chain(spawned_now) {
                if projectile.ended_by(&impact) {
                    commands.entity(entity).try_despawn();
                }
            }
            own.impacted(&impact, &mut commands);
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

impl ClientProjectile {
    /// Whether `impact` ends this projectile: the same shot, ours or the same shooter's.
    fn ended_by(&self, impact: &ProjectileImpact) -> bool {
        self.fire_index == impact.fire_index
            && if impact.own {
                self.own
            } else {
                !self.own && self.shooter == impact.shooter
            }
    }
}

impl OwnProjectiles {
    /// Fakes: shown when their hold is over (server time `now`, seconds), gone after their
    /// life.
    fn show_fakes(&mut self, commands: &mut Commands, now: f64) {
        for shot in &mut self.shots {
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
    }

    /// The projectile the server's `launch` draws (`None` for a launch with non-finite
    /// numbers). Ours: the same path on the clock its fake was drawn on, the fake gone.
    /// Anyone else's: caught up by our prediction time.
    fn take_launch(
        &mut self,
        launch: &ProjectileLaunched,
        commands: &mut Commands,
        clock: &NetClock,
        settings: &CombatSettings,
        weapons: &Weapons,
    ) -> Option<ClientProjectile> {
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
            return None;
        }
        let mine = launch
            .own
            .then(|| {
                self.shots
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
        Some(ClientProjectile {
            shooter: launch.shooter,
            own: launch.own,
            fake: false,
            weapon: launch.weapon,
            fire_index: launch.fire_index,
            launch: flight,
            zero,
            life: lifetime,
        })
    }

    /// Our shot's flight ended: its fake (if still shown) goes, and the shot is done.
    fn impacted(&mut self, impact: &ProjectileImpact, commands: &mut Commands) {
        if !impact.own {
            return;
        }
        if let Some(shot) = self
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
    }
}
