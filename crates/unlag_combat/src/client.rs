//! The client side: shots fired at once against what is on screen, predicted ammo, results.

use crate::protocol::{
    ConfirmedHit, CosmeticFire, CosmeticFires, FIRE_COPIES, FireRequest, FireResult, MAX_CLAIMS,
    Rejection, ReloadDone, ReloadRequest, WireClaim,
};
use crate::rules::shot_directions;
use crate::settings::Weapons;
use bevy::prelude::*;
use bevy_rapier3d::prelude::{QueryFilter, ReadRapierContext};
use lightyear::prelude::*;
use unlag_core::PredictedAmmo;
use unlag_net::{LinkTraffic, NetClock, UnreliableChannel};
use unlag_rewind::{HitBox, LayoutBone, blend_poses, hit_box_ray};
use unlag_smoothing::{ProxySmoothing, RenderedPose, SmoothingSettings};

/// How close a pellet must pass to a proxy's hit box (beyond its bounding sphere) for the shot
/// to claim it as drawn, metres, besides how far the proxy may be drawn from the server's track
/// (`off_track`).
pub const NEAR_MISS_MARGIN: f32 = 0.25;

/// How far a proxy drawn with `pose` may be from where the server's track had it, metres: half
/// the span its curve guesses (the two states' interval, or the seconds it ran on past one)
/// at the faster of their speeds. The server judges a proxy the shot did not claim where its
/// track was, and a pellet that meets it there stops, a miss the shooter never saw: at 1 Hz a
/// proxy drawn clear of the ray stood in it on the server. Claimed as drawn, it is posed
/// where the shooter saw it (0.15 m at 20 Hz and 6 m/s, 3 m at 1 Hz).
fn off_track(pose: &RenderedPose) -> f32 {
    let span = if pose.from == pose.to {
        f64::from(pose.alpha.max(0.0))
    } else {
        (pose.shown[1].time - pose.shown[0].time).abs()
    };
    let speed = pose.shown[0]
        .velocity
        .length()
        .max(pose.shown[1].velocity.length());
    let off = 0.5 * span as f32 * speed;
    if off.is_finite() { off } else { 0.0 }
}

/// Game → combat (client): fire the weapon once.
#[derive(Message, Copy, Clone, Debug, PartialEq)]
pub struct FireCommand {
    /// The weapon's id.
    pub weapon: u8,
    /// The eye: where the shot starts, metres.
    pub origin: Vec3,
    /// Where it aims (need not be normalised).
    pub aim: Vec3,
}

/// Game → combat (client): reload the weapon.
#[derive(Message, Copy, Clone, Debug, PartialEq)]
pub struct ReloadCommand {
    /// The weapon's id.
    pub weapon: u8,
}

/// What a pellet hit on the shooter's screen.
#[derive(Clone, Debug, PartialEq)]
pub struct LocalHit {
    /// The client's proxy entity of the character hit (the parent of the hit box), as drawn
    /// this frame.
    pub target: Entity,
    /// The bone of the hit box hit, from its [`HitBox`](unlag_rewind::HitBox) ("head",
    /// "torso", ...).
    pub bone: String,
    /// Whether it is the head.
    pub headshot: bool,
    /// Where, metres.
    pub point: Vec3,
    /// The proxy's [`ProxyHealth`], less the damage of this client's shots still unanswered,
    /// was spent: a hit on a body the client expects dead (its earlier shot killed it, as far
    /// as it knows). Not a promise: the server grants it only if the target was alive (a hit
    /// marker waits for the verdict), and does not count it as a seen miss either.
    pub expected_dead: bool,
}

/// Hit points of a proxy as the game last heard them (the combat plugin does not replicate
/// health: a game that sends it inserts and updates this on its proxies). With it the client
/// tells a hit on a body its own unanswered shots have already killed from one the server can
/// grant ([`LocalHit::expected_dead`]): shots fired in the round trip after a kill hit a corpse
/// on the server.
#[derive(Component, Copy, Clone, Debug, PartialEq)]
pub struct ProxyHealth(pub f32);

/// A shot of this client the server has not answered yet, and the damage it is expected to
/// deal one target.
#[derive(Clone, Copy, Debug)]
struct InFlight {
    fire_index: u32,
    target: Entity,
    damage: f32,
    /// The view time it was fired at, server seconds (forgotten after [`IN_FLIGHT_SECONDS`]:
    /// its verdict was lost).
    at: f64,
}

/// How long a shot's expected damage counts without a verdict, seconds.
const IN_FLIGHT_SECONDS: f64 = 2.0;

/// Combat → game (client), at once: a shot left, for muzzle flash, tracers and predicted hit
/// markers. The server's verdict follows as [`ShotConfirmed`].
#[derive(Message, Clone, Debug, PartialEq)]
pub struct LocalFire {
    /// The weapon's id.
    pub weapon: u8,
    /// The shot's fire index.
    pub fire_index: u32,
    /// Where it started, metres.
    pub origin: Vec3,
    /// Each pellet's direction.
    pub directions: Vec<Vec3>,
    /// Each pellet's hit on screen, if any.
    pub hits: Vec<Option<LocalHit>>,
    /// The view time it was fired at, server seconds.
    pub view_time: f64,
}

/// Combat → game (client): the server's verdict on one of our shots.
#[derive(Message, Clone, Debug, PartialEq)]
pub struct ShotConfirmed {
    /// The shot's fire index.
    pub fire_index: u32,
    /// The weapon's id.
    pub weapon: u8,
    /// What it hit (targets are our proxies), or why it was refused.
    pub outcome: Result<Vec<ConfirmedHit>, Rejection>,
    /// Whether it was judged against the past (false above the server's rewind cap).
    pub rewound: bool,
}

/// Combat → game (client): another player fired (effects only).
#[derive(Message, Clone, Debug, PartialEq)]
pub struct RemoteFire(pub CosmeticFire);

/// One weapon on the client.
#[derive(Clone, Debug)]
struct ClientWeapon {
    ammo: PredictedAmmo,
    reloading_until: Option<f64>,
}

/// The local player's weapons (client resource): predicted ammo, reloads, aim.
#[derive(Resource, Clone, Debug, Default)]
pub struct Armory {
    weapons: Vec<ClientWeapon>,
    magazines: Vec<u32>,
    /// Whether the player is aiming down sights (zoom): owned here, never by the server, so it
    /// cannot flicker at high latency.
    pub aiming: bool,
    /// Shots the server refused, all time.
    pub refused: u64,
    /// The fire index of the latest shot, any weapon.
    last_fire_index: u32,
    /// The view time of the latest shot, any weapon, and its weapon's fire interval
    /// (seconds): the next shot of any weapon waits that long, as the server checks.
    last_shot: Option<(f64, f64)>,
    /// Damage of the shots not answered yet, per target.
    in_flight: Vec<InFlight>,
}

impl Armory {
    /// The ammo to show for weapon `weapon`: the server's, less the shots it has not answered.
    pub fn ammo(&self, weapon: u8) -> Option<u32> {
        self.weapons
            .get(usize::from(weapon))
            .map(|w| w.ammo.shown())
    }

    /// Shots of weapon `weapon` sent and not answered yet.
    pub fn pending(&self, weapon: u8) -> Option<u32> {
        self.weapons
            .get(usize::from(weapon))
            .map(|w| w.ammo.pending())
    }

    /// Whether weapon `weapon` is reloading.
    pub fn reloading(&self, weapon: u8) -> bool {
        self.weapons
            .get(usize::from(weapon))
            .is_some_and(|w| w.reloading_until.is_some())
    }
}

/// Fills the armory once the weapons are known.
pub(crate) fn arm_client(
    mut commands: Commands,
    weapons: Res<Weapons>,
    armory: Option<Res<Armory>>,
) {
    if armory.is_some() {
        return;
    }
    let Some(table) = &weapons.table else {
        return;
    };
    commands.insert_resource(Armory {
        weapons: table
            .weapons
            .iter()
            .map(|w| ClientWeapon {
                ammo: PredictedAmmo::new(w.magazine),
                reloading_until: None,
            })
            .collect(),
        magazines: table.weapons.iter().map(|w| w.magazine).collect(),
        aiming: false,
        refused: 0,
        last_fire_index: 0,
        last_shot: None,
        in_flight: Vec::new(),
    });
}

/// Reload commands: sent to the server, shown at once; the magazine shows full when the reload
/// time has passed on the view clock the shots are stamped with, where the server ends it too
/// (its [`ReloadDone`] settles it).
pub(crate) fn reload(
    clock: Res<NetClock>,
    weapons: Res<Weapons>,
    mut commands: MessageReader<ReloadCommand>,
    armory: Option<ResMut<Armory>>,
    mut link: Query<(&mut MessageSender<ReloadRequest>, &mut LinkTraffic), With<Client>>,
    mut resend: Local<Vec<(ReloadRequest, u8, f64)>>,
) {
    // Before the clock is synced there is no view time to stamp a request with (the server
    // would read it as seconds in the past): a command then does nothing.
    let (Some(mut armory), Some(table), true) = (armory, &weapons.table, clock.synced) else {
        commands.clear();
        return;
    };
    let now = clock.drawn_view_time();
    // Unreliable copies on consecutive frames, like shots: a reliable resend would arrive a
    // round trip late, and the server holds the reload's start to its estimate. Should all
    // of them be lost, the request goes again every round trip while the reload lasts (the
    // server takes each request once, by its view time).
    let mut sender = link.single_mut().ok();
    let again = clock.rtt.max(0.05);
    for (request, left, next) in resend.iter_mut() {
        if *left == 0 && now < *next {
            continue;
        }
        if let Some((sender, traffic)) = sender.as_mut() {
            traffic.send_counted::<UnreliableChannel, _>(sender, request.clone());
        }
        if *left > 0 {
            *left -= 1;
        } else {
            *next = now + again;
        }
    }
    resend.retain(|(request, ..)| armory.reloading(request.weapon));
    for command in commands.read() {
        let Some(spec) = table.get(command.weapon) else {
            continue;
        };
        let Some(w) = armory.weapons.get_mut(usize::from(command.weapon)) else {
            continue;
        };
        if w.reloading_until.is_none() && w.ammo.shown() < spec.magazine {
            w.reloading_until = Some(now + f64::from(spec.reload_time));
            let request = ReloadRequest {
                weapon: command.weapon,
                view_time: now,
            };
            if let Some((sender, traffic)) = sender.as_mut() {
                traffic.send_counted::<UnreliableChannel, _>(sender, request.clone());
                resend.push((request, FIRE_COPIES - 1, now + again));
            }
        }
    }
    let magazines = armory.magazines.clone();
    for (w, magazine) in armory.weapons.iter_mut().zip(magazines) {
        if w.reloading_until.is_some_and(|until| now >= until) {
            w.reloading_until = None;
            w.ammo.reload(magazine);
        }
    }
}

/// A proxy as a shot is traced against it: the pose it is claimed at and its boxes placed
/// there (position, rotation).
struct Target<'a> {
    proxy: Entity,
    /// The view time the proxy was drawn at this frame, server seconds.
    drawn_at: f64,
    pose: RenderedPose,
    boxes: Vec<(&'a HitBox, Vec3, Quat)>,
}

/// Fire commands: checked against the predicted ammo and fire rate, traced at once against the
/// proxies as drawn, reported locally and sent to the server.
#[allow(clippy::too_many_arguments)]
pub(crate) fn fire(
    clock: Res<NetClock>,
    weapons: Res<Weapons>,
    mut commands: MessageReader<FireCommand>,
    armory: Option<ResMut<Armory>>,
    proxies: Query<(Entity, &RenderedPose, &Children, Option<&ProxySmoothing>)>,
    health: Query<&ProxyHealth>,
    boxes: Query<(&HitBox, &GlobalTransform, &Transform, Option<&LayoutBone>)>,
    mut link: Query<(&mut MessageSender<FireRequest>, &mut LinkTraffic), With<Client>>,
    mut local: MessageWriter<LocalFire>,
    mut resend: Local<Vec<(FireRequest, u8)>>,
    rapier: ReadRapierContext,
    own: Query<(), With<unlag_net::AutonomousProxy>>,
    settings: Res<crate::CombatSettings>,
    mut projectiles: ResMut<crate::OwnProjectiles>,
    smoothing: Option<Res<SmoothingSettings>>,
    trail: Query<&unlag_net::MoveTrail, With<unlag_net::AutonomousProxy>>,
) {
    // Before the clock is synced there is no view time to stamp a shot with (the server would
    // refuse it as seconds old), and before the player has a character nobody fires: a
    // command then does nothing.
    let (Some(mut armory), Some(table), true, false) =
        (armory, &weapons.table, clock.synced, own.is_empty())
    else {
        commands.clear();
        return;
    };
    // After a hitch what is on screen was drawn before it: a shot traced against it, or a copy
    // stamped with it, would claim a view the hitch's length old, which the server rightly
    // takes for backtracking. Shots and copies wait one frame for proxies drawn now (commands
    // stay readable for one more frame).
    if clock.frame_hitched {
        return;
    }
    // The fire rate is kept on the view clock the server checks it on (the shots' view times).
    // It is the view time on screen, the one every proxy of the server's default rate is drawn
    // at (a shot that hits a proxy takes that proxy's).
    let now = clock.drawn_view_time();
    // The copies of recent shots still due, each stamped with the view time of its frame. A
    // copy older than the server takes (its frames ran long, or hitched) would only be refused:
    // it is dropped, and the shot stands on the copies already sent.
    // The server allows for the frames this client reported, and a frame can run longer
    // than the usual one: count on no more than the shortest frame reported lately.
    // (No more than the server allows for any client's frame, `MAX_CLIENT_FRAME`: below
    // 10 fps a shot's third copy would come older than the server takes, and be refused.)
    let allowed = settings.copy_age_allowed(
        clock
            .least_reported_frame
            .min(clock.usual_frame)
            .min(unlag_net::MAX_CLIENT_FRAME),
    );
    resend.retain(|(request, _)| now - request.view_time <= allowed);
    // Copies spread over the age the server allows rather than over consecutive frames: at
    // 240 frames/s three frames span 8 ms, and a short burst of losses takes every copy.
    // (Taken to the nearest frame: a client at 60 frames/s or slower sends one every frame.)
    let spacing = (allowed - 0.002) / f64::from(FIRE_COPIES - 1) - clock.usual_frame / 2.0;
    if let Ok((mut sender, mut traffic)) = link.single_mut() {
        for (request, left) in resend.iter_mut() {
            if now - request.sent_view_time < spacing - 1e-6 {
                continue;
            }
            request.sent_view_time = now;
            request.sent_delay = clock.interpolation_delay;
            traffic.send_counted::<UnreliableChannel, _>(&mut sender, request.clone());
            *left -= 1;
        }
    }
    resend.retain(|(_, left)| *left > 0);
    for command in commands.read() {
        let (Some(spec), Some(aim)) = (table.get(command.weapon), command.aim.try_normalize())
        else {
            continue;
        };
        if !command.origin.is_finite() {
            continue;
        }
        // Fire indices count across every weapon: the server refuses any not above the last.
        let fire_index = armory.last_fire_index + 1;
        // One weapon in hand: the previous shot's interval holds back every weapon.
        let cooling = armory
            .last_shot
            .is_some_and(|(t, interval)| now - t < interval - 1e-6);
        let Some(w) = armory.weapons.get_mut(usize::from(command.weapon)) else {
            continue;
        };
        if cooling || w.reloading_until.is_some() || !w.ammo.fire(fire_index) {
            continue;
        }
        armory.last_shot = Some((now, f64::from(spec.fire_interval)));
        armory.last_fire_index = fire_index;
        let directions = shot_directions(spec, fire_index, aim);
        // Above the rewind cap the server judges the shot later than it was drawn, by the
        // part of the trip it does not rewind, and by the part of the delay it does not
        // compensate: the shot is traced, and claims, where the proxies are on their curves
        // then, so a hit marker promises what the server grants. By the server's own measure
        // of the round trip and its cap on the delay (from its beats), so both sides agree.
        let lead = settings.shot_lead(
            clock.server_rtt.unwrap_or(clock.rtt),
            clock.interpolation_delay,
            clock.server_delay_cap,
        );
        let max_extrapolation = smoothing.as_ref().map_or(0.25, |s| s.max_extrapolation);
        let targets: Vec<Target> = proxies
            .iter()
            .filter_map(|(proxy, drawn, children, smoothed)| {
                let boxes = children.iter().filter_map(|c| boxes.get(c).ok());
                if lead <= 0.0 {
                    return Some(Target {
                        proxy,
                        drawn_at: drawn.view_time,
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
                    drawn_at: drawn.view_time,
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
            .collect();
        // Trace every pellet against the hit boxes as they are drawn this frame.
        let mut hits: Vec<Option<(Entity, f32, LocalHit, f32)>> =
            Vec::with_capacity(directions.len());
        // The world in the way, as the client has it (colliders that are not proxies, their
        // boxes or our own character).
        let not_a_character =
            |e: Entity| !proxies.contains(e) && !boxes.contains(e) && !own.contains(e);
        let filter = QueryFilter::default()
            .exclude_sensors()
            .predicate(&not_a_character);
        // Asked once per shot: without a rapier world, asking costs an error with a backtrace.
        let context = (!rapier.rapier_context.is_empty())
            .then(|| rapier.single().ok())
            .flatten();
        // A projectile hits nothing yet: the server judges its flight.
        let projectile = matches!(spec.kind, crate::WeaponKind::Projectile { .. });
        for dir in directions.iter().filter(|_| !projectile) {
            let range = context
                .as_ref()
                .and_then(|ctx| ctx.cast_ray(command.origin, *dir, spec.range, true, filter))
                .map_or(spec.range, |(_, toi)| toi);
            let mut best: Option<(Entity, f32, LocalHit, f32)> = None;
            for target in &targets {
                let proxy = target.proxy;
                for &(hit_box, position, rotation) in &target.boxes {
                    let max = best.as_ref().map_or(range, |b| b.1);
                    if let Some((distance, point, _)) = hit_box_ray(
                        &hit_box.shape,
                        position,
                        rotation,
                        command.origin,
                        *dir,
                        max,
                        0.0,
                    ) && best.as_ref().is_none_or(|b| {
                        distance < b.1 || (distance == b.1 && hit_box.is_head && !b.2.headshot)
                    }) {
                        best = Some((
                            proxy,
                            distance,
                            LocalHit {
                                target: proxy,
                                bone: hit_box.bone.clone(),
                                headshot: hit_box.is_head,
                                point,
                                expected_dead: false,
                            },
                            hit_box.damage_multiplier
                                * if hit_box.is_head {
                                    spec.headshot_multiplier
                                } else {
                                    1.0
                                },
                        ));
                    }
                }
            }
            hits.push(best);
        }
        if projectile {
            hits.push(None);
            projectiles.fired(
                &settings,
                spec,
                (command.weapon, fire_index),
                (command.origin, directions[0]),
                &clock,
            );
        }
        // What was on screen for every proxy hit, and for every proxy a pellet passed close to
        // before it stopped (the server poses those as drawn too, so a proxy drawn just beside
        // the ray cannot block it there).
        let mut near: Vec<Entity> = Vec::new();
        if !projectile {
            for (dir, hit) in directions.iter().zip(&hits) {
                let end = hit.as_ref().map_or(spec.range, |h| h.1);
                for target in &targets {
                    let proxy = target.proxy;
                    if near.contains(&proxy) || hit.as_ref().is_some_and(|h| h.0 == proxy) {
                        continue;
                    }
                    let margin = NEAR_MISS_MARGIN + off_track(&target.pose);
                    let close = target.boxes.iter().any(|(hit_box, position, _)| {
                        let centre = *position - command.origin;
                        let t = centre.dot(*dir).clamp(0.0, end);
                        (centre - *dir * t).length() <= hit_box.shape.bounding_radius() + margin
                    });
                    if close {
                        near.push(proxy);
                    }
                }
            }
        }
        let mut claims: Vec<WireClaim> = Vec::new();
        let mut view_time = None;
        let hit_targets = hits.iter().flatten().map(|(target, ..)| (*target, true));
        for (target, hit) in hit_targets.chain(near.iter().map(|e| (*e, false))) {
            if claims.iter().any(|c| c.target == target) || claims.len() >= MAX_CLAIMS {
                continue;
            }
            if let Some(t) = targets.iter().find(|t| t.proxy == target) {
                view_time.get_or_insert(t.drawn_at);
                // A hit is claimed only where one is promised: not on a pose that shows the
                // past (held past its extrapolation, or before its first state). The server
                // tells such a pose by its time, and a hold that began within its slack of
                // the view passed for the moment drawn: a hit granted that the shooter never
                // saw (traced in the report's 20 %-loss, 10-fps corner).
                let promised = hit && !t.pose.kind.is_stale();
                claims.push(WireClaim::drawn(target, &t.pose, promised));
            }
        }
        // Without a target, the view time on screen.
        let view_time = view_time.unwrap_or(now);
        let judged_time = view_time + lead;
        let request = FireRequest {
            weapon: command.weapon,
            fire_index,
            origin: command.origin,
            aim,
            directions: directions.clone(),
            view_time,
            judged_time,
            delay_cap: clock.server_delay_cap,
            move_seq: trail.single().ok().and_then(|t| t.newest()).map(|s| s.0),
            sent_view_time: now,
            sent_delay: clock.interpolation_delay,
            claims,
        };
        if let Ok((mut sender, mut traffic)) = link.single_mut() {
            // Unreliable, sent again in the next frames: a lost copy costs a frame, not the
            // reliable channel's round-trip resend that the server could not tell from a shot
            // faking an older view time.
            traffic.send_counted::<UnreliableChannel, _>(&mut sender, request.clone());
            resend.push((request, FIRE_COPIES - 1));
        }
        // Targets this client's unanswered shots are expected to have killed; then this
        // shot's own damage joins them.
        armory.in_flight.retain(|f| now - f.at <= IN_FLIGHT_SECONDS);
        let expected_dead = |armory: &Armory, target: Entity| {
            health.get(target).is_ok_and(|h| {
                let owed: f32 = armory
                    .in_flight
                    .iter()
                    .filter(|f| f.target == target)
                    .map(|f| f.damage)
                    .sum();
                h.0 - owed <= 0.0
            })
        };
        let dead_before: Vec<Entity> = hits
            .iter()
            .flatten()
            .map(|h| h.0)
            .filter(|t| expected_dead(&armory, *t))
            .collect();
        // A proxy held past its extrapolation shows the past: the server grants no hit there,
        // and none is promised (below).
        let stale = |target: Entity| {
            targets
                .iter()
                .find(|t| t.proxy == target)
                .is_some_and(|t| t.pose.kind.is_stale())
        };
        for (target, _, _, multiplier) in hits.iter().flatten() {
            if stale(*target) {
                continue;
            }
            let damage = spec.damage * multiplier;
            match armory
                .in_flight
                .iter_mut()
                .find(|f| f.fire_index == fire_index && f.target == *target)
            {
                Some(f) => f.damage += damage,
                None => armory.in_flight.push(InFlight {
                    fire_index,
                    target: *target,
                    damage,
                    at: now,
                }),
            }
        }
        local.write(LocalFire {
            weapon: command.weapon,
            fire_index,
            origin: command.origin,
            directions,
            // A proxy held on one state past its extrapolation (or shown before its first
            // state) shows the past, not the view: the server counts no hit on it, and so the
            // client promises none (the pellet still stops there).
            hits: hits
                .into_iter()
                .map(|h| {
                    h.filter(|(target, ..)| !stale(*target))
                        .map(|(target, _, hit, _)| LocalHit {
                            expected_dead: dead_before.contains(&target),
                            ..hit
                        })
                })
                .collect(),
            view_time,
        });
    }
}

/// Verdicts, reloads and other players' shots from the server. (lightyear adds a message's
/// receiver to the link when the first one arrives, so each is queried on its own.)
#[allow(clippy::too_many_arguments)]
pub(crate) fn receive_results(
    armory: Option<ResMut<Armory>>,
    mut results: Query<&mut MessageReceiver<FireResult>, With<Client>>,
    mut reloads: Query<&mut MessageReceiver<ReloadDone>, With<Client>>,
    mut echoes: Query<&mut MessageReceiver<CosmeticFires>, With<Client>>,
    mut confirmed: MessageWriter<ShotConfirmed>,
    mut remote: MessageWriter<RemoteFire>,
    mut health: Query<&mut ProxyHealth>,
) {
    let Some(mut armory) = armory else {
        return;
    };
    for mut receiver in &mut results {
        for result in receiver.receive() {
            // Answered: its damage is the server's now, and a kill is known at once (the
            // game's next news of health confirms it).
            armory
                .in_flight
                .retain(|f| f.fire_index != result.fire_index);
            if let Ok(hits) = &result.outcome {
                for hit in hits.iter().filter(|h| h.killed) {
                    if let Ok(mut h) = health.get_mut(hit.target) {
                        h.0 = 0.0;
                    }
                }
            }
            if let Some(w) = armory.weapons.get_mut(usize::from(result.weapon)) {
                w.ammo.on_server(result.fire_index, result.ammo);
            }
            if result.outcome.is_err() {
                armory.refused += 1;
            }
            confirmed.write(ShotConfirmed {
                fire_index: result.fire_index,
                weapon: result.weapon,
                outcome: result.outcome,
                rewound: result.rewound,
            });
        }
    }
    for mut receiver in &mut reloads {
        for done in receiver.receive() {
            if let Some(w) = armory.weapons.get_mut(usize::from(done.weapon)) {
                w.reloading_until = None;
                w.ammo.on_server(done.fire_index, done.ammo);
            }
        }
    }
    for mut receiver in &mut echoes {
        for batch in receiver.receive() {
            remote.write_batch(batch.shots.into_iter().map(RemoteFire));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use unlag_core::{SampleKind, SmoothingMode, StateShown};

    fn pose(from: u32, to: u32, alpha: f32, times: (f64, f64), speed: f32) -> RenderedPose {
        let shown = |time: f64| StateShown {
            time,
            velocity: Vec3::new(speed, 0.0, 0.0),
            rotation: Quat::IDENTITY,
            flags: 0,
        };
        RenderedPose {
            from,
            to,
            alpha,
            view_time: times.0,
            delay: 0.1,
            position: Vec3::ZERO,
            ease: Vec3::ZERO,
            flags: 0,
            shown: [shown(times.0), shown(times.1)],
            kind: SampleKind::Interpolated,
            mode: SmoothingMode::Hermite,
        }
    }

    #[test]
    fn a_proxy_may_be_off_its_track_by_half_what_its_curve_guesses() {
        // 20 Hz at 6 m/s: 0.15 m. 1 Hz: 3 m. Extrapolated 0.2 s past one state: 0.6 m.
        let close = off_track(&pose(60, 63, 0.5, (1.0, 1.05), 6.0));
        assert!((close - 0.15).abs() < 1e-4, "{close}");
        let sparse = off_track(&pose(60, 120, 0.5, (1.0, 2.0), 6.0));
        assert!((sparse - 3.0).abs() < 1e-4, "{sparse}");
        let ran_on = off_track(&pose(60, 60, 0.2, (1.0, 1.0), 6.0));
        assert!((ran_on - 0.6).abs() < 1e-4, "{ran_on}");
        // A standing proxy is where it is drawn; garbage counts for nothing.
        assert_eq!(off_track(&pose(60, 120, 0.5, (1.0, 2.0), 0.0)), 0.0);
        assert_eq!(off_track(&pose(60, 120, 0.5, (1.0, f64::NAN), 6.0)), 0.0);
    }
}
