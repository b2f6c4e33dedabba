//! The server's answers on the client: verdicts on our shots, finished reloads, and other
//! players' shots.

use super::{Armory, ProxyHealth, RemoteFire, ShotConfirmed};
use crate::protocol::{CosmeticFires, FireResult, ReloadDone};
use bevy::prelude::*;
use lightyear::prelude::*;

/// Verdicts, reloads and other players' shots from the server. (lightyear adds a message's
/// receiver to the link when the first one arrives, so each is queried on its own.)
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
            remote.write_batch(batch.into_shots().map(RemoteFire));
        }
    }
}
