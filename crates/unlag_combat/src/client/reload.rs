//! Reloads on the client: shown at once, sent to the server as unreliable copies.

use super::{Armory, ReloadCommand};
use crate::protocol::{FIRE_COPIES, ReloadRequest};
use crate::settings::Weapons;
use bevy::prelude::*;
use lightyear::prelude::*;
use unlag_net::{LinkTraffic, NetClock, UnreliableChannel};

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
