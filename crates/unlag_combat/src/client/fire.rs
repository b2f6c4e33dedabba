//! The fire system: a fire command becomes a shot at once (predicted ammo and fire rate,
//! traced against what is on screen, claims), reported to the game as [`LocalFire`] and sent to
//! the server as unreliable copies over the next frames.

use super::claims::claims;
use super::trace::{ProxyScene, near_misses};
use super::{Armory, FireCommand, LocalFire};
use crate::projectile::OwnProjectiles;
use crate::protocol::{FIRE_COPIES, FireRequest};
use crate::rules::shot_directions;
use crate::settings::{CombatSettings, Weapons};
use crate::weapons::WeaponKind;
use bevy::ecs::system::SystemParam;
use bevy::prelude::*;
use lightyear::prelude::*;
use unlag_net::{
    AckDelay, AutonomousProxy, DataCadence, LinkTraffic, MoveTrail, NetClock, NetFrame,
    UnreliableChannel,
};

/// The shots sent lately whose copies are still due, each with how many copies are left to
/// send and the frame ([`NetFrame`]) its last copy left in (resource, on a client): the fire
/// system sends a shot's first copy, [`send_copies`] the others.
#[derive(Resource, Default)]
pub(crate) struct ShotCopies(Vec<(FireRequest, u8, u64)>);

/// Where shots leave: the link to the server, the shots whose copies are still due, and our
/// character's moves (a shot names the newest, so the server judges it once that move is in).
#[derive(SystemParam)]
pub(crate) struct FireLink<'w, 's> {
    link: Query<
        'w,
        's,
        (
            &'static mut MessageSender<FireRequest>,
            &'static mut LinkTraffic,
        ),
        With<Client>,
    >,
    copies: ResMut<'w, ShotCopies>,
    frame: Res<'w, NetFrame>,
    trail: Query<'w, 's, &'static MoveTrail, With<AutonomousProxy>>,
}

impl FireLink<'_, '_> {
    /// Sends a new shot. Unreliable, sent again in the next frames ([`send_copies`]): a lost
    /// copy costs a frame, not the reliable channel's round-trip resend that the server could
    /// not tell from a shot faking an older view time.
    fn send(&mut self, request: FireRequest) {
        if let Ok((mut sender, mut traffic)) = self.link.single_mut() {
            traffic.send_counted_whole::<UnreliableChannel, _>(&mut sender, request.clone());
            self.copies.0.push((request, FIRE_COPIES - 1, self.frame.0));
        }
    }

    /// The newest move of our character, which the shot follows.
    fn newest_move(&self) -> Option<u16> {
        self.trail
            .single()
            .ok()
            .and_then(|t| t.newest())
            .map(|s| s.0)
    }
}

/// The copies a shot is sure of on a link whose copies ride
/// ([`CombatSettings::copies_ride_below_loss`]): the second goes alone if no packet leaves
/// before it would come too old; a third goes only in a packet that leaves anyway.
const COPIES_RIDING: u8 = 2;

/// `PostUpdate`, in [`NetSystems::Resend`](unlag_net::NetSystems) (after the frame's moves
/// were queued): sends the copies of recent shots that are due, each stamped with the view
/// time and delay of its frame.
///
/// On a link that loses few of the client's packets
/// ([`CombatSettings::copies_ride_below_loss`]), its acknowledgements held for data
/// ([`AckDelay`] above 0), a copy goes only in a frame that sends the server a packet anyway
/// (the moves, every 1/30 s, a shot, or one that may leave without data:
/// [`LinkTraffic::packet_leaves`]), and the second alone when no such frame came before its
/// last chance. At 240 fps a shot's second copy mostly rides with the next move send, where
/// its three copies each went alone; at 60 fps one of its first two goes alone (the server
/// takes a copy two frames after its shot, and the moves leave one frame in two), and a third
/// only when its frame sends moves. Otherwise each copy goes as it falls due, spread
/// over the age the server allows, alone when nothing else leaves.
///
/// A copy older than the server takes (its frames ran long, or hitched) would only be
/// refused: it is dropped, and the shot stands on the copies already sent. The server allows
/// for the frames this client reported, and a frame can run longer than the usual one: count
/// on no more than the shortest frame reported lately. (No more than the server allows for
/// any client's frame, `MAX_CLIENT_FRAME`: below 10 fps a shot's third copy would come older
/// than the server takes, and be refused.)
pub(crate) fn send_copies(
    (clock, settings): (Res<NetClock>, Res<CombatSettings>),
    (real, frame): (Res<Time<Real>>, Res<NetFrame>),
    (delay, cadence): (Option<Res<AckDelay>>, Option<Res<DataCadence>>),
    mut copies: ResMut<ShotCopies>,
    mut link: Query<(&mut MessageSender<FireRequest>, &mut LinkTraffic), With<Client>>,
) {
    // After a hitch what is on screen was drawn before it, and a copy stamped with it would
    // claim a view the hitch's length old: copies wait a frame, as new shots do. (And without
    // a synced clock there is no view time to stamp one with.)
    if copies.0.is_empty() || clock.frame_hitched || !clock.synced {
        return;
    }
    let Ok((mut sender, mut traffic)) = link.single_mut() else {
        return;
    };
    let now = clock.drawn_view_time();
    let allowed = settings.copy_age_allowed(
        clock
            .least_reported_frame
            .min(clock.usual_frame)
            .min(unlag_net::MAX_CLIENT_FRAME),
    );
    copies
        .0
        .retain(|(request, _, _)| now - request.view_time <= allowed);
    // Copies spread over the age the server allows rather than over consecutive frames: at
    // 240 frames/s three frames span 8 ms, and a short burst of losses takes every copy.
    // (Taken to the nearest frame: a client at 60 frames/s or slower sends one every
    // frame.)
    let spacing = (allowed - 0.002) / f64::from(FIRE_COPIES - 1) - clock.usual_frame / 2.0;
    // The view time runs faster than the frames while the delay shrinks (after a spell of
    // loss at a slow rate): a copy spaced by view time could then fall past the allowed
    // age before it leaves, and the shot would stand on fewer copies. A copy whose next
    // frame may come too late (`frames` usual frames from now) goes now.
    let last_chance = |r: &FireRequest, frames: f64| {
        now - r.view_time + frames * clock.usual_frame > allowed - 1e-6
    };
    // Riding needs packets held back to ride on (`AckDelay` above 0: otherwise one may leave
    // in any frame that owes acknowledgements, nearly every frame of a playing client, and
    // copies riding them would only crowd together) and a link the client
    // reads as losing less than the setting, by more than its count's error.
    let delay = delay.map_or(0.0, |d| d.0);
    let riding = delay > 0.0
        && traffic
            .sent_loss
            .likely_below(settings.copies_ride_below_loss);
    for (request, left, last) in copies.0.iter_mut() {
        // Never twice in one frame: a shot fired this frame has its first copy in it already.
        if *last == frame.0 {
            continue;
        }
        let goes = if riding {
            // Riding, a copy still keeps half the spread's spacing from the last (packets can
            // leave in consecutive frames: a 240-fps client's pings and its moves). The second
            // waits for one no longer than two usual frames before its age runs out, not one
            // and a half: it is the copy the shot counts on, and a frame of a jittery client
            // may run near twice the usual.
            let sent = FIRE_COPIES - *left;
            let spaced = now - request.sent_view_time >= spacing / 2.0 - 1e-6;
            let leaves = traffic.packet_leaves(real.elapsed_secs_f64(), delay, cadence.as_deref());
            (leaves && spaced) || (sent < COPIES_RIDING && last_chance(request, 2.0))
        } else {
            now - request.sent_view_time >= spacing - 1e-6 || last_chance(request, 1.5)
        };
        if !goes {
            continue;
        }
        request.sent_view_time = now;
        request.sent_delay = clock.stated_delay();
        traffic.send_counted_whole::<UnreliableChannel, _>(&mut sender, request.clone());
        *left -= 1;
        *last = frame.0;
    }
    copies.0.retain(|(_, left, _)| *left > 0);
}

/// Fire commands: checked against the predicted ammo and fire rate, traced at once against the
/// proxies as drawn, reported locally and sent to the server.
pub(crate) fn fire(
    (clock, weapons, settings): (Res<NetClock>, Res<Weapons>, Res<CombatSettings>),
    // (The commands given, and those held through hitched frames: `playable_commands`.)
    (mut commands, mut held): (MessageReader<FireCommand>, Local<Vec<FireCommand>>),
    armory: Option<ResMut<Armory>>,
    scene: ProxyScene,
    mut link: FireLink,
    mut local: MessageWriter<LocalFire>,
    mut projectiles: ResMut<OwnProjectiles>,
) {
    // Before the clock is synced there is no view time to stamp a shot with (the server would
    // refuse it as seconds old), and before the player has a character nobody fires: a
    // command then does nothing.
    let (Some(mut armory), Some(table), true, true) =
        (armory, &weapons.table, clock.synced, scene.has_character())
    else {
        commands.clear();
        held.clear();
        return;
    };
    // After a hitch what is on screen was drawn before it: a shot traced against it, or a copy
    // stamped with it, would claim a view the hitch's length old, which the server rightly
    // takes for backtracking. Shots and copies wait for a frame that is not hitched, for
    // proxies drawn now (the commands held till then: `playable_commands`).
    let commands = super::playable_commands(clock.frame_hitched, &mut held, &mut commands);
    // A shot's view time is the view time on screen: the one the proxies drawn with the
    // shortest delay (those of the server's rate) show. The fire rate is kept on it, as the
    // server checks it; a slower proxy, drawn with a longer delay, is claimed that much
    // earlier (`WireClaim::behind`), whatever the shot before it hit.
    let now = clock.drawn_view_time();
    for command in commands {
        let (Some(spec), Some(aim)) = (table.get(command.weapon), command.aim.try_normalize())
        else {
            continue;
        };
        // Rounded as the wire carries it in 4 bytes, before anything is traced or rolled: the
        // server rebuilds these very rays (at most 0.004° off the camera's).
        let aim = unlag_core::quantize::round_direction(aim);
        if !command.origin.is_finite() {
            continue;
        }
        let Some(fire_index) = armory.take_shot(command.weapon, spec, now) else {
            continue;
        };
        // Rounded to whole millimetres as the wire carries it in a few bytes, before anything
        // is traced: the server rebuilds these very rays.
        let origin = unlag_core::quantize::round_to_millimetres(command.origin);
        let directions = shot_directions(spec, fire_index, aim);
        let lead = shot_lead(&settings, &clock);
        let targets = scene.targets(now, lead, |delay, interval| {
            claim_lead(&settings, &clock, delay, interval)
        });
        // A projectile hits nothing yet: the server judges its flight.
        let (hits, near) = if matches!(spec.kind, WeaponKind::Projectile { .. }) {
            let (weapon, direction) = (command.weapon, directions[0]);
            projectiles.fired(
                &settings,
                spec,
                (weapon, fire_index),
                (origin, direction),
                &clock,
            );
            (vec![None], Vec::new())
        } else {
            let hits = scene.trace(origin, &directions, spec, &targets);
            let near = near_misses(origin, &directions, &hits, spec, &targets);
            (hits, near)
        };
        let claims = claims(&hits, &near, &targets);
        let view_time = now;
        link.send(FireRequest {
            weapon: command.weapon,
            fire_index,
            origin,
            aim,
            // The server rolls the same pattern from the fire index and aim.
            directions: Vec::new(),
            view_time,
            judged_time: view_time + lead,
            delay_cap: clock.server_delay_cap,
            move_seq: link.newest_move(),
            sent_view_time: now,
            sent_delay: clock.stated_delay(),
            claims,
        });
        let hits = armory.expect(hits, (&targets, spec), fire_index, now, &scene.health);
        local.write(LocalFire {
            weapon: command.weapon,
            fire_index,
            origin,
            directions,
            hits,
            view_time,
        });
    }
}

/// How much later than drawn the server judges a claim on a proxy drawn with `delay` seconds
/// whose states come every `interval` seconds (its own, as the client reads it), seconds: the
/// shot's lead for that delay, against the delay the server compensates for a proxy of that
/// interval ([`unlag_net::claim_delay_cap`], from the cap its beats announce). An interval not
/// read yet (0) counts as the server's.
fn claim_lead(settings: &CombatSettings, clock: &NetClock, delay: f64, interval: f64) -> f64 {
    let nominal = clock.send_interval;
    let frame = clock.server_frame.max(clock.server_long_frame);
    let cap = clock
        .server_delay_cap
        .map(|cap| unlag_net::claim_delay_cap(cap, interval.max(nominal), nominal, frame));
    settings.shot_lead(clock.server_rtt.unwrap_or(clock.rtt), delay, cap)
}

/// How much later than drawn the server judges a shot fired now, seconds: above the rewind cap,
/// the part of the trip it does not rewind and the part of the delay it does not compensate.
/// The shot is traced, and claims, where the proxies are on their curves then, so a hit marker
/// promises what the server grants. By the server's own measure of the round trip and its cap
/// on the delay (from its beats), so both sides agree.
fn shot_lead(settings: &CombatSettings, clock: &NetClock) -> f64 {
    settings.shot_lead(
        clock.server_rtt.unwrap_or(clock.rtt),
        clock.interpolation_delay,
        clock.server_delay_cap,
    )
}
