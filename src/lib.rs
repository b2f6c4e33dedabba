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
//!
//! Each plugin can be replaced or turned off with
//! `UnlagPlugins.build().disable::<P>()`.

use bevy::app::{PluginGroup, PluginGroupBuilder};

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

/// Pure numerics shared by the plugins: see [`unlag_core`].
pub mod core {
    pub use unlag_core::*;
}

/// Everything a game usually needs.
pub mod prelude {
    pub use crate::UnlagPlugins;
    pub use unlag_movement::{
        CharacterAction, CharacterInputPlugin, CharacterMovement, CharacterState, KartMovement,
        MovementPredictionPlugin, MovementState, MovementStats, NextMove,
    };
    pub use unlag_net::prelude::*;
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
    }
}
