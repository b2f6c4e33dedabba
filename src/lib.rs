//! `unlag` makes server-authoritative action games made with Bevy feel immediate under network
//! latency.
//!
//! It is a suite of plugins over [lightyear](https://docs.rs/lightyear): movement prediction
//! and correction, simulated-proxy smoothing and lag-compensated hit validation, each its own
//! plugin, all built on one net layer. Add lightyear's `ClientPlugins` or `ServerPlugins`, then
//! [`UnlagPlugins`], in the same order on client and server.
//!
//! | plugin | what it does |
//! | --- | --- |
//! | [`UnlagNetPlugin`](net::UnlagNetPlugin) | channels, [`NetClock`](net::NetClock) (server time, RTT, jitter, view time), roles, simulated [`NetConditions`](net::NetConditions), traffic counters, ping monitor |
//! | [`MovementPredictionPlugin<CharacterMovement>`](movement::MovementPredictionPlugin) | the local player moves at once; saved moves, server checks, corrections with replay, speed-hack resolution (other models, e.g. [`KartMovement`](movement::KartMovement), are added the same way) |
//! | [`ProxySmoothingPlugin`](smoothing::ProxySmoothingPlugin) | everyone else moves smoothly between sparse server states, at a per-proxy view time |
//! | [`RewindPlugin`](rewind::RewindPlugin) | the server records every character's hit boxes and answers rewound queries, rebuilding targets exactly as a shooter saw them |
//! | [`CombatPlugin`](combat::CombatPlugin) | hitscan, shotgun and projectile weapons from `weapons.ron`, fired at once on the client and judged by the server against what the shooter saw; predicted ammo; cheats refused and counted |
//! | [`CharacterProxyPlugin`] | the server's characters are smoothed proxies on the other clients, crouch included |
//!
//! Each plugin can be replaced or turned off with
//! `UnlagPlugins.build().disable::<P>()`.

use bevy::app::PluginGroupBuilder;
use bevy::prelude::*;

/// The net layer: see [`unlag_net`].
pub mod net {
    pub use unlag_net::*;
}

/// Movement prediction and correction: see [`unlag_movement`].
pub mod movement {
    pub use unlag_movement::*;
}

/// Simulated-proxy smoothing: see [`unlag_smoothing`].
pub mod smoothing {
    pub use unlag_smoothing::*;
}

/// Weapons over lag compensation: see [`unlag_combat`].
pub mod combat {
    pub use unlag_combat::*;
}

/// Lag compensation: see [`unlag_rewind`].
pub mod rewind {
    pub use unlag_rewind::*;
}

/// Diagnostics (the net graph): see [`unlag_diagnostics`].
#[cfg(feature = "diagnostics")]
pub mod diagnostics {
    pub use unlag_diagnostics::*;
}

/// Pure numerics shared by the plugins: see [`unlag_core`].
pub mod core {
    pub use unlag_core::*;
}

/// Everything a game usually needs.
pub mod prelude {
    pub use crate::UnlagPlugins;
    pub use unlag_combat::{
        Armory, ClientProjectile, CombatPlugin, CombatSettings, Damaged, FireCommand, Health,
        Killed, LocalFire, ProjectileExploded, ReloadCommand, ShotConfirmed,
    };
    pub use unlag_movement::{
        CharacterAction, CharacterInputPlugin, CharacterMovement, CharacterState, KartMovement,
        MovementPredictionPlugin, MovementState, MovementStats, NextMove,
    };
    pub use unlag_net::prelude::*;
    pub use unlag_rewind::{
        HitBox, HitBoxLayout, RewindPlugin, RewindQuery, RewindSettings, UseHitBoxLayout,
    };
}

/// All `unlag` plugins, for client and server alike (see the table in the crate docs).
#[derive(Clone, Debug, Default)]
pub struct UnlagPlugins;

impl PluginGroup for UnlagPlugins {
    fn build(self) -> PluginGroupBuilder {
        PluginGroupBuilder::start::<Self>()
            .add(unlag_net::UnlagNetPlugin::default())
            .add(unlag_movement::MovementPredictionPlugin::<
                unlag_movement::CharacterMovement,
            >::default())
            .add(unlag_smoothing::ProxySmoothingPlugin::default())
            .add(unlag_rewind::RewindPlugin::default())
            .add(unlag_combat::CombatPlugin::default())
            .add(CharacterProxyPlugin)
    }
}

/// Joins movement and smoothing for [`CharacterMovement`](movement::CharacterMovement) (the two
/// crates do not know each other): on the server every character with authority is a
/// [`SmoothedProxy`](smoothing::SmoothedProxy) for the other clients, and its crouch state rides
/// in [`ProxyFlags`](smoothing::ProxyFlags) bit 0 ([`CROUCHED_FLAG`]).
#[derive(Clone, Debug, Default)]
pub struct CharacterProxyPlugin;

/// [`ProxyFlags`](smoothing::ProxyFlags) bit of a crouched character (the bit hit-box layouts
/// crouch on, [`rewind::CROUCHED_BIT`]).
pub const CROUCHED_FLAG: u8 = unlag_rewind::CROUCHED_BIT;

type CharacterState = unlag_movement::MovementState<unlag_movement::CharacterMovement>;

impl Plugin for CharacterProxyPlugin {
    fn build(&self, app: &mut App) {
        app.add_systems(PostUpdate, (mark_character_proxies, copy_crouch).chain());
    }
}

fn mark_character_proxies(
    mut commands: Commands,
    new: Query<
        Entity,
        (
            With<CharacterState>,
            With<unlag_net::Authority>,
            Without<unlag_smoothing::SmoothedProxy>,
        ),
    >,
) {
    for entity in &new {
        commands
            .entity(entity)
            .insert(unlag_smoothing::SmoothedProxy);
    }
}

fn copy_crouch(
    mut characters: Query<
        (&CharacterState, &mut unlag_smoothing::ProxyFlags),
        Changed<CharacterState>,
    >,
) {
    for (state, mut flags) in &mut characters {
        let bits = if state.0.crouched {
            flags.0 | CROUCHED_FLAG
        } else {
            flags.0 & !CROUCHED_FLAG
        };
        if bits != flags.0 {
            flags.0 = bits;
        }
    }
}
