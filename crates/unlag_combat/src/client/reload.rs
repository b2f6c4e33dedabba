//! Reloads on the client: shown at once, sent to the server in every packet until it has it.

use super::{Armory, ReloadCommand};
use crate::protocol::{ReloadRequest, ReloadTaken};
use crate::settings::Weapons;
use bevy::prelude::*;
use lightyear::prelude::*;
use unlag_net::{AckDelay, DataCadence, LinkTraffic, NetClock, NetFrame, UnreliableChannel};

/// Longest a reload request is sent again for without the server's answer, seconds of view
/// time: beyond, the link is down for good (netcode times out sooner) or the server does not
/// answer (one without the combat plugin's reloads).
const RELOAD_RESEND_FOR: f64 = 10.0;

/// The reload requests the server has not answered yet, each with the frame
/// ([`NetFrame`]) its last copy left in.
#[derive(Resource, Default)]
pub(crate) struct UnansweredReloads(Vec<(ReloadRequest, u64)>);

/// Reload commands: sent to the server, shown at once; the magazine shows full when the reload
/// time has passed on the view clock the shots are stamped with, where the server ends it too
/// (its [`ReloadDone`](crate::ReloadDone) settles it).
pub(crate) fn reload(
    frame: Res<NetFrame>,
    clock: Res<NetClock>,
    weapons: Res<Weapons>,
    // (The commands given, and those held through hitched frames: `playable_commands`.)
    (mut commands, mut held): (MessageReader<ReloadCommand>, Local<Vec<ReloadCommand>>),
    armory: Option<ResMut<Armory>>,
    mut link: Query<
        (
            &mut MessageSender<ReloadRequest>,
            // lightyear inserts a receiver when its first message arrives.
            Option<&mut MessageReceiver<ReloadTaken>>,
            &mut LinkTraffic,
        ),
        With<Client>,
    >,
    mut unanswered: ResMut<UnansweredReloads>,
) {
    let unanswered = &mut unanswered.0;
    // Before the clock is synced there is no view time to stamp a request with (the server
    // would read it as seconds in the past): a command then does nothing.
    let (Some(mut armory), Some(table), true) = (armory, &weapons.table, clock.synced) else {
        commands.clear();
        held.clear();
        return;
    };
    let now = clock.drawn_view_time();
    let mut link = link.single_mut().ok();
    // In every packet until the server says it has it (not a few copies, then one a round
    // trip): then every packet that left after the reload started carries it, and the server
    // dates one that outlived a burst of losses when it was made, since nothing it heard in
    // between came without it. Unreliable: a reliable resend would arrive a round trip late.
    if let Some((_, Some(answers), _)) = link.as_mut() {
        for taken in answers.receive() {
            unanswered.retain(|(r, _)| r.weapon != taken.weapon || r.view_time > taken.view_time);
        }
    }
    unanswered.retain(|(r, _)| now - r.view_time < RELOAD_RESEND_FOR);
    // After a hitch what is on screen was drawn before it: a reload stamped with it would
    // claim to have started the hitch's length ago, which the server dates no sooner than the
    // last packet it had without it, and the reload then ended later there than here (a
    // 500-ms hitch: dated 0.15 s later, and the first shot after the client's own end was
    // refused as fired while reloading). Commands wait for a frame that is not hitched, as
    // shots do (held till then: `playable_commands`).
    for command in super::playable_commands(clock.frame_hitched, &mut held, &mut commands) {
        let Some(spec) = table.get(command.weapon) else {
            continue;
        };
        let Some(w) = armory.weapons.get_mut(usize::from(command.weapon)) else {
            continue;
        };
        if w.reloading_until.is_none() && w.ammo.shown() < spec.magazine {
            w.reloading_until = Some(now + f64::from(spec.reload_time));
            // An older one the server has not answered goes on too: shots were fired after it.
            // The first copy goes at once, the others with whatever the frames send
            // (`send_reload_copies`).
            let request = ReloadRequest {
                weapon: command.weapon,
                view_time: now,
            };
            if let Some((sender, _, traffic)) = link.as_mut() {
                traffic.send_counted::<UnreliableChannel, _>(sender, request.clone());
            }
            unanswered.push((request, frame.0));
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

/// PostUpdate, in [`NetSystems::EveryPacket`](unlag_net::NetSystems) (after what rides along): a
/// copy of each unanswered reload request in every frame that sends the server a packet anyway
/// (moves, a shot, a delay report), and in those where a packet may leave without data (for
/// lightyear's pings, pongs or acknowledgements alone: [`DataCadence::may_go_alone`]). So every
/// packet still carries it, and a playing client (moves every 1/30 s) sends no datagram for it:
/// sent in every frame, a 240-fps client sent datagrams for them alone (the report's 30-s
/// match: 42.8 datagrams a second, 37.6 riding). With [`AckDelay`] 0 (lightyear's way) a copy
/// goes in every frame.
pub(crate) fn send_reload_copies(
    (real, frame): (Res<Time<Real>>, Res<NetFrame>),
    (delay, cadence): (Option<Res<AckDelay>>, Option<Res<DataCadence>>),
    mut unanswered: ResMut<UnansweredReloads>,
    mut link: Query<(&mut MessageSender<ReloadRequest>, &mut LinkTraffic), With<Client>>,
) {
    let Ok((mut sender, mut traffic)) = link.single_mut() else {
        return;
    };
    let now = real.elapsed_secs_f64();
    let delay = delay.map_or(0.0, |d| d.0);
    let rides = traffic.packet_leaves(now, delay, cadence.as_deref());
    for (request, last) in &mut unanswered.0 {
        // Not twice in the frame that sent the first copy.
        if *last != frame.0 && rides {
            traffic.send_counted::<UnreliableChannel, _>(&mut sender, request.clone());
            *last = frame.0;
        }
    }
}
