//! Reloads on the client: shown at once, sent to the server in every frame until it has it.

use super::{Armory, ReloadCommand};
use crate::protocol::{ReloadRequest, ReloadTaken};
use crate::settings::Weapons;
use bevy::prelude::*;
use lightyear::prelude::*;
use unlag_net::{LinkTraffic, NetClock, UnreliableChannel};

/// Longest a reload request is sent again for without the server's answer, seconds of view
/// time: beyond, the link is down for good (netcode times out sooner) or the server does not
/// answer (one without the combat plugin's reloads).
const RELOAD_RESEND_FOR: f64 = 10.0;

/// Reload commands: sent to the server, shown at once; the magazine shows full when the reload
/// time has passed on the view clock the shots are stamped with, where the server ends it too
/// (its [`ReloadDone`](crate::ReloadDone) settles it).
pub(crate) fn reload(
    clock: Res<NetClock>,
    weapons: Res<Weapons>,
    mut commands: MessageReader<ReloadCommand>,
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
    mut unanswered: Local<Vec<ReloadRequest>>,
) {
    // Before the clock is synced there is no view time to stamp a request with (the server
    // would read it as seconds in the past): a command then does nothing.
    let (Some(mut armory), Some(table), true) = (armory, &weapons.table, clock.synced) else {
        commands.clear();
        return;
    };
    let now = clock.drawn_view_time();
    let mut link = link.single_mut().ok();
    // In every frame until the server says it has it (not a few copies, then one a round trip):
    // then every packet that left after the reload started carries it, and the server dates
    // one that outlived a burst of losses when it was made, since nothing it heard in between
    // came without it. Unreliable: a reliable resend would arrive a round trip late.
    if let Some((_, Some(answers), _)) = link.as_mut() {
        for taken in answers.receive() {
            unanswered.retain(|r| r.weapon != taken.weapon || r.view_time > taken.view_time);
        }
    }
    unanswered.retain(|r| now - r.view_time < RELOAD_RESEND_FOR);
    for command in commands.read() {
        let Some(spec) = table.get(command.weapon) else {
            continue;
        };
        let Some(w) = armory.weapons.get_mut(usize::from(command.weapon)) else {
            continue;
        };
        if w.reloading_until.is_none() && w.ammo.shown() < spec.magazine {
            w.reloading_until = Some(now + f64::from(spec.reload_time));
            // An older one the server has not answered goes on too: shots were fired after it.
            unanswered.push(ReloadRequest {
                weapon: command.weapon,
                view_time: now,
            });
        }
    }
    if let Some((sender, _, traffic)) = link.as_mut() {
        for request in unanswered.iter() {
            traffic.send_counted::<UnreliableChannel, _>(sender, request.clone());
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
