//! Combat (seeds 000, 003): weapons whose shots feel instant to the shooter, are judged by the
//! server against what the shooter saw, and cannot be faked.
//!
//! See [`CombatPlugin`]. The data flow of a shot:
//!
//! 1. **Client**: the game writes a [`FireCommand`] (weapon, eye, aim). If the predicted ammo
//!    ([`Armory`]) allows, the client rolls the pellets from the shot's seed, traces them at once
//!    against the proxies' hit boxes as drawn, reports the predicted hits as a [`LocalFire`]
//!    message for the game's effects, and sends a [`FireRequest`] with the view time and, per
//!    target hit, what it had on screen ([`WireClaim`]: state pair and blend). The request
//!    is unreliable and sent up to [`FIRE_COPIES`] times: at once, then on later frames
//!    spread over the copy age the server allows (every frame at 60 frames/s or slower; a copy
//!    that would be older than that is not sent), or on a link that loses few of the client's
//!    packets in the packets that leave anyway (two or three copies:
//!    [`CombatSettings::copies_ride_below_loss`]). The server judges one copy, normally the
//!    first to arrive, and drops the others as duplicates.
//! 2. **Server**: the request is checked (weapon, fire index, fire rate, ammo, pellet count and
//!    spread, origin, view time, claims, targets); a refusal is counted and logged with its
//!    [`Rejection`]. An accepted shot is judged with
//!    [`RewindQuery::rays_as_seen`](unlag_rewind::RewindQuery::rays_as_seen) — the targets
//!    rebuilt exactly as the shooter saw them; above the rewind cap at the capped rewind,
//!    where the shooter traced and claimed too ([`CombatSettings::rewind_shortfall`]);
//!    against current poses when rewinding is off; damage comes from the server's own [`WeaponTable`], summed
//!    per target; [`Health`] drops and [`Damaged`] / [`Killed`] messages go to the game. The
//!    shooter gets a [`FireResult`], everyone else the shot in a [`CosmeticFires`]
//!    batch.
//! 3. **Client**: the result settles the predicted ammo and comes out as a [`ShotConfirmed`]
//!    message (server-confirmed hit markers).
//!
//! Projectile weapons (seed 003) take the same path up to the server's checks; then the client
//! draws a fake [`ClientProjectile`] at once, the server launches a real [`Projectile`]
//! advanced by the prediction time, every client draws it from one [`ProjectileLaunched`]
//! (the shooter's fake giving way to it on the same path and clock, everyone else caught up by
//! their own prediction time), its flight is swept against the hit boxes as the shooter saw
//! them, and its end ([`ProjectileImpact`], direct and splash damage) comes out as a
//! [`ProjectileExploded`] message on every client. See the `projectile` module's notes on the
//! times involved.

mod ammo;
mod client;
mod health;
mod intake;
mod judge;
mod projectile;
mod protocol;
mod rules;
mod settings;
mod stats;
mod weapons;
mod wire;

pub use ammo::ServerArmory;
pub use client::{
    Armory, FireCommand, LocalFire, LocalHit, ProxyHealth, ReloadCommand, RemoteFire, ShotConfirmed,
};
pub use health::{Damaged, Health, Killed};
pub use judge::{Arrival, ShotJudge, ShotVerdict, TargetHit};
pub use projectile::{ClientProjectile, OwnProjectiles, Projectile, ProjectileExploded};
pub use protocol::{
    COSMETIC_BATCH, ConfirmedHit, CosmeticFire, CosmeticFires, EVERY_PELLET, FIRE_COPIES,
    FireRequest, FireResult, ProjectileImpact, ProjectileLaunched, Rejection, ReloadDone,
    ReloadRequest, ReloadTaken, WireClaim,
};
pub use rules::shot_directions;
pub use settings::{CombatSettings, Weapons};
pub use stats::{CombatStats, LoggedShot, ShotLog};
pub use unlag_core::fake_projectile_hold;
pub use weapons::{WeaponKind, WeaponSpec, WeaponTable, WeaponTableError, WeaponTableLoader};

use bevy::ecs::schedule::common_conditions::any_with_component;
use bevy::prelude::*;
use lightyear::prelude::server::{ClientOf, Server};
use lightyear::prelude::*;
use unlag_net::{NetDirection, NetMessageAppExt, NetSystems, ValidatedSettingsAppExt};

/// System sets of combat.
#[derive(SystemSet, Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum CombatSystems {
    /// `Update` on a client: turn [`FireCommand`]s into shots, read results.
    Client,
    /// `Update` on the server: judge the shots received this frame against the recorded hit
    /// boxes, run reloads.
    Server,
}

/// Weapons over lag compensation, on both sides. Add it after
/// [`RewindPlugin`](unlag_rewind::RewindPlugin) and
/// [`ProxySmoothingPlugin`](unlag_smoothing::ProxySmoothingPlugin).
#[derive(Clone, Debug, Default)]
pub struct CombatPlugin {
    /// The [`CombatSettings`] to start with: checked and inserted as a resource when the
    /// plugin is built (settings out of range panic there). Later changes go to the resource.
    pub settings: CombatSettings,
}

impl Plugin for CombatPlugin {
    fn build(&self, app: &mut App) {
        app.insert_validated(self.settings.clone())
            .init_resource::<Weapons>()
            .init_resource::<CombatStats>()
            .add_message::<FireCommand>()
            .add_message::<ReloadCommand>()
            .add_message::<LocalFire>()
            .add_message::<ShotConfirmed>()
            .add_message::<RemoteFire>()
            .add_message::<Damaged>()
            .add_message::<Killed>()
            .add_message::<ProjectileExploded>()
            .init_resource::<OwnProjectiles>()
            .init_resource::<unlag_net::HeldShotsOldest>()
            .add_net_message_mapped_whole::<FireRequest>(NetDirection::ClientToServer)
            .add_net_message_mapped::<FireResult>(NetDirection::ServerToClient)
            .add_net_message_mapped_encoded::<CosmeticFires>(
                NetDirection::ServerToClient,
                CosmeticFires::write,
            )
            // A projectile's launch and impact go to every client that sees or hears it: each
            // is encoded once, and every client's copy carries the bytes.
            .add_net_message_mapped_encoded::<ProjectileLaunched>(
                NetDirection::ServerToClient,
                unlag_net::write_pre_encoded,
            )
            .add_net_message_mapped_encoded::<ProjectileImpact>(
                NetDirection::ServerToClient,
                unlag_net::write_pre_encoded,
            )
            .add_net_message::<ReloadRequest>(NetDirection::ClientToServer)
            .add_net_message::<ReloadDone>(NetDirection::ServerToClient)
            .add_net_message::<ReloadTaken>(NetDirection::ServerToClient)
            // Shots are judged after the moves that left with them were taken in (their
            // origin is checked against the character's position).
            .configure_sets(
                Update,
                (
                    CombatSystems::Client,
                    CombatSystems::Server.after(NetSystems::Moves),
                ),
            )
            .add_systems(
                Update,
                (
                    ammo::arm_characters,
                    ammo::reloads,
                    intake::judge_shots,
                    projectile::fly_projectiles,
                )
                    .chain()
                    .run_if(any_with_component::<Server>)
                    .in_set(CombatSystems::Server),
            )
            .add_systems(
                Update,
                (
                    client::arm_client,
                    client::reload,
                    client::fire,
                    client::receive_results,
                    projectile::client_projectiles,
                )
                    .chain()
                    .run_if(any_with_component::<Client>)
                    .in_set(CombatSystems::Client),
            )
            .init_resource::<client::ShotCopies>()
            .add_systems(
                PostUpdate,
                client::send_copies
                    .run_if(any_with_component::<Client>)
                    .in_set(NetSystems::Resend),
            )
            .add_systems(
                PostUpdate,
                client::send_reload_copies
                    .run_if(any_with_component::<Client>)
                    .in_set(NetSystems::EveryPacket)
                    // (Its copies may make the frame's packet leave: a resync rides in it.)
                    .before(unlag_net::ProxySmoothingSystems::Resync),
            )
            // A shot's answer, the others' shots and the others' projectiles' news ride with
            // each client's proxy states (a shooter hears of its own projectile at once).
            .register_required_components::<ClientOf, unlag_net::Riders<FireResult>>()
            .register_required_components::<ClientOf, unlag_net::Riders<CosmeticFires>>()
            .register_required_components::<ClientOf, unlag_net::Riders<ProjectileLaunched>>()
            .register_required_components::<ClientOf, unlag_net::Riders<ProjectileImpact>>()
            .add_systems(
                PostUpdate,
                // (Chained: one released makes the frame a data frame for the others. On the
                // ordered reliable channel a projectile's launch goes before its impact.)
                (
                    unlag_net::release_riders::<unlag_net::ReliableChannel, ProjectileLaunched>,
                    unlag_net::release_riders::<unlag_net::ReliableChannel, ProjectileImpact>,
                    unlag_net::release_riders::<unlag_net::ReliableChannel, FireResult>,
                    unlag_net::release_riders::<unlag_net::UnreliableChannel, CosmeticFires>,
                )
                    .chain()
                    .run_if(any_with_component::<Server>)
                    .in_set(NetSystems::RideAlong),
            )
            .init_resource::<client::UnansweredReloads>()
            .add_systems(PreUpdate, take_loaded_weapons.after(NetSystems::Clock));
    }

    fn finish(&self, app: &mut App) {
        // One rewind cap: the ping monitor's warning of it follows ours.
        if let Some(mut monitor) = app.world_mut().get_resource_mut::<unlag_net::PingMonitor>() {
            monitor.set_max_rewind_ping(self.settings.max_rewind_ping);
        }
        if app.world().contains_resource::<AssetServer>()
            && !app.world().contains_resource::<Assets<WeaponTable>>()
        {
            app.init_asset::<WeaponTable>()
                .register_asset_loader(WeaponTableLoader)
                .add_systems(PreUpdate, report_failures);
        }
    }
}

fn report_failures(mut failures: MessageReader<bevy::asset::AssetLoadFailedEvent<WeaponTable>>) {
    for failure in failures.read() {
        error!("weapon table did not load: {}", failure.error);
    }
}

/// Starts loading the weapon table, and takes it once loaded.
fn take_loaded_weapons(
    settings: Res<CombatSettings>,
    mut weapons: ResMut<Weapons>,
    assets: Option<Res<AssetServer>>,
    tables: Option<Res<Assets<WeaponTable>>>,
) {
    if weapons.table.is_some() {
        return;
    }
    let (Some(assets), Some(tables), Some(path)) = (assets, tables, &settings.weapons_path) else {
        return;
    };
    let handle = weapons
        .handle
        .get_or_insert_with(|| assets.load::<WeaponTable>(path.clone()))
        .clone();
    if let Some(table) = tables.get(&handle) {
        weapons.table = Some(table.clone());
    }
}
