//! The server's projectiles in flight: announced to every client, each step swept against the
//! hit boxes as the shooter saw them and the world, exploded (direct and splash damage from the
//! server's weapon table) and their impact reported to every client.

use super::Projectile;
use crate::health::{Blow, Harm};
use crate::protocol::{ConfirmedHit, ProjectileImpact, ProjectileLaunched};
use crate::settings::Weapons;
use crate::stats::CombatStats;
use crate::weapons::{WeaponKind, WeaponSpec};
use bevy::prelude::*;
use lightyear::prelude::server::ClientOf;
use lightyear::prelude::*;
use unlag_net::{CarriesEncoding, LinkTraffic, NetClock, ProxyInterest, ReliableChannel, Riders};
use unlag_rewind::{RewindHit, RewindQuery, RewindSettings};

/// The links projectiles are announced and reported on. The news rides with each link's next
/// proxy states ([`Riders`]; a launch is released before an impact): on a busy server a
/// projectile is launched or lands in most frames, and each sent every client a datagram of
/// its own between two state sends (at 64 players, 0.72 datagrams a client a tick where the
/// states need 0.33). The shooter's own client is told at once, as before: its
/// fake projectile flies for twice the prediction time at most and then stands until the
/// server's replaces it (at 30 ms of round trip, 30 ms: a launch held for the next states
/// would leave it standing up to as long again), and the impact is its shot's answer.
type ProjectileLinks<'w, 's> = Query<
    'w,
    's,
    (
        Entity,
        (
            &'static mut MessageSender<ProjectileLaunched>,
            &'static mut MessageSender<ProjectileImpact>,
            &'static mut LinkTraffic,
        ),
        &'static mut Riders<ProjectileLaunched>,
        &'static mut Riders<ProjectileImpact>,
        Option<&'static ProxyInterest>,
    ),
    With<ClientOf>,
>;

/// Flies the server's projectiles to the present: announces new ones to every client, sweeps
/// each step against the rewound hit boxes and the world, explodes them (direct and splash
/// damage from the server's weapon table) and reports the impact to every client.
pub(crate) fn fly_projectiles(
    mut commands: Commands,
    (weapons, clock, rewind_settings, work, real): (
        Res<Weapons>,
        Res<NetClock>,
        Res<RewindSettings>,
        Option<Res<unlag_net::ServerWork>>,
        Res<Time<Real>>,
    ),
    mut stats: ResMut<CombatStats>,
    mut projectiles: Query<(Entity, &mut Projectile)>,
    mut links: ProjectileLinks,
    rewind: RewindQuery,
    mut harm: Harm,
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
            announce(&projectile, &mut links, real.elapsed_secs_f64());
        }
        let flown = Flown {
            now,
            step,
            oldest,
            radius,
            lifetime,
        };
        let ended = fly(&mut projectile, flown, &rewind, &harm, &mut stats);
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
            explode(spec, &projectile, (point, direct, at), &rewind, &mut harm)
        } else {
            Vec::new()
        };
        stats.pellet_hits += hits.iter().map(|h| u64::from(h.pellets)).sum::<u64>();
        report_impact(
            &projectile,
            (point, exploded, &hits),
            &mut links,
            real.elapsed_secs_f64(),
        );
        commands.entity(entity).despawn();
    }
}

/// Tells every client that can see or hear it of a new projectile (the shooter's client that
/// it is its own): the shooter is not dormant to it, or the launch is within its hearing.
/// `now`: real time, seconds.
fn announce(projectile: &Projectile, links: &mut ProjectileLinks, now: f64) {
    let copies = Copies::new(|own| {
        ProjectileLaunched {
            shooter: projectile.shooter,
            own,
            weapon: projectile.weapon,
            fire_index: projectile.fire_index,
            origin: projectile.launch.position,
            velocity: projectile.launch.velocity,
            launch_time: projectile.launch_time,
            encoded: default(),
        }
        // (As the wire carries it, so a listen server's own client draws what the others do.)
        .as_sent()
    });
    for (link, (mut sender, _, mut traffic), mut riders, _, interest) in links {
        if link == projectile.link {
            let (message, size) = copies.for_link(true);
            traffic.send_counted_sized::<ReliableChannel, _>(&mut sender, message, size);
            continue;
        }
        let heard =
            interest.is_none_or(|i| i.hears_fire(projectile.shooter, projectile.launch.position));
        if heard {
            let (message, size) = copies.for_link(false);
            riders.hold_sized(message, size, now);
        }
    }
}

/// A broadcast's two copies, each carrying its own encoding: the shooter's client's and
/// everyone else's (they differ in `own`), encoded once each rather than once per client.
struct Copies<M> {
    own: M,
    others: M,
    /// Their sizes on the wire, bytes: the shooter's, the others'.
    size: (usize, usize),
}

impl<M: CarriesEncoding + Clone> Copies<M> {
    /// The copies `make(own)` builds.
    fn new(make: impl Fn(bool) -> M) -> Self {
        let (own, others) = (
            make(true).with_own_encoding(),
            make(false).with_own_encoding(),
        );
        let size = |m: &M| m.pre_encoded().bytes().map_or(0, <[u8]>::len);
        Self {
            size: (size(&own), size(&others)),
            own,
            others,
        }
    }

    /// The copy for the shooter's client (`shooters`) or another, and its size on the wire.
    fn for_link(&self, shooters: bool) -> (M, usize) {
        if shooters {
            (self.own.clone(), self.size.0)
        } else {
            (self.others.clone(), self.size.1)
        }
    }
}

/// Tells every client that can see or hear it where a projectile's flight ended and whether it
/// exploded: the shooter's, those the shooter is not dormant to, and those within hearing of
/// the impact (whoever it hit or splashed is); the shooter's also what it hit (its verdict,
/// as a hitscan shot's [`FireResult`](crate::FireResult); the others' copy lists none, as a
/// hitscan shot's echo names none: a splash's list of hits went to every client that heard
/// it, most of an impact's bytes in a crowd). `now`: real time, seconds.
fn report_impact(
    projectile: &Projectile,
    (point, exploded, hits): (Vec3, bool, &[ConfirmedHit]),
    links: &mut ProjectileLinks,
    now: f64,
) {
    // (A launcher's splash may list dozens of hits: the shooter's copy shares them.)
    let copies = Copies::new(|own| ProjectileImpact {
        shooter: projectile.shooter,
        own,
        weapon: projectile.weapon,
        fire_index: projectile.fire_index,
        point,
        exploded,
        rewound: projectile.seen_from.is_some(),
        hits: if own { hits.into() } else { [].into() },
        encoded: default(),
    });
    for (link, (_, mut sender, mut traffic), _, mut riders, interest) in links {
        if link == projectile.link {
            let (message, size) = copies.for_link(true);
            traffic.send_counted_sized::<ReliableChannel, _>(&mut sender, message, size);
            continue;
        }
        if interest.is_none_or(|i| i.hears_fire(projectile.shooter, point)) {
            let (message, size) = copies.for_link(false);
            riders.hold_sized(message, size, now);
        }
    }
}

/// How far a projectile flies this frame and what it may hit: the server's time, its tick
/// (the longest step) and the oldest time the rewind judges, seconds; the weapon's projectile
/// radius (metres) and lifetime (seconds).
#[derive(Clone, Copy)]
struct Flown {
    now: f64,
    step: f32,
    oldest: f64,
    radius: f32,
    lifetime: f32,
}

/// Flies `projectile` on to the present, step by step, each swept first against the living
/// characters' hit boxes as the shooter saw them (the world occludes the sweep), then against
/// the world. Where it ended, what it hit directly and the time it was judged at, if it hit
/// anything.
fn fly(
    projectile: &mut Projectile,
    flown: Flown,
    rewind: &RewindQuery,
    harm: &Harm,
    stats: &mut CombatStats,
) -> Option<(Vec3, Option<RewindHit>, f64)> {
    let until = ((flown.now - projectile.launch_time) as f32).min(flown.lifetime);
    while projectile.age < until - 1e-6 {
        let dt = (until - projectile.age).min(flown.step);
        let (from, to) = projectile.flight.advance(dt);
        projectile.age += dt;
        let at = projectile.judged_at(projectile.age - 0.5 * dt, flown.now, flown.oldest);
        let length = from.distance(to);
        if length < 1e-6 {
            continue;
        }
        let dir = (to - from) / length;
        match rewind.segment(from, to, flown.radius, at, Some(projectile.shooter)) {
            // The dead do not stop projectiles (hitscan refuses them as targets too).
            Ok(Some(hit)) if harm.dead(hit.character) => {}
            Ok(Some(hit)) => return Some((from + dir * hit.distance, Some(hit), at)),
            Ok(None) => {}
            Err(e) => unlag_net::warn_counted!(
                stats.projectile_sweep_errors,
                "projectile sweep failed: {e}"
            ),
        }
        let wall = rewind.wall(from, dir, length, Some(projectile.shooter));
        if wall < length {
            return Some((from + dir * wall, None, at));
        }
    }
    None
}

/// Damage of an explosion at `point`, judged at server time `at`: the character hit directly
/// (`direct`) takes the weapon's damage (head and box multipliers applied); every other
/// character within the splash radius whose body the world does not hide takes splash damage
/// falling off linearly with distance. The shooter takes none.
fn explode(
    spec: &WeaponSpec,
    projectile: &Projectile,
    (point, direct, at): (Vec3, Option<RewindHit>, f64),
    rewind: &RewindQuery,
    harm: &mut Harm,
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
    let (shooter, weapon) = (projectile.shooter, projectile.weapon);
    if let Some(hit) = direct {
        exclude.push(hit.character);
        let head = if hit.is_head {
            spec.headshot_multiplier
        } else {
            1.0
        };
        let damage = spec.damage * head * hit.damage_multiplier;
        let killed = harm.deal(
            hit.character,
            Blow {
                shooter,
                weapon,
                damage,
                bone: &hit.bone,
                headshot: hit.is_head,
            },
        );
        dealt.push(ConfirmedHit {
            target: hit.character,
            bone: hit.bone,
            headshot: hit.is_head,
            damage,
            pellets: 1,
            killed,
        });
    }
    let near = rewind
        .within(point, splash_radius, at, &exclude)
        .unwrap_or_default();
    for (target, distance) in near {
        if harm.dead(target) {
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
        let killed = harm.deal(
            target,
            Blow {
                shooter,
                weapon,
                damage,
                bone: "",
                headshot: false,
            },
        );
        dealt.push(ConfirmedHit {
            target,
            bone: String::new(),
            headshot: false,
            damage,
            pellets: 0,
            killed,
        });
    }
    dealt
}
