//! The game logic of `unlag`'s examples, apart from their rendering: what the `shooter` and
//! `karts` examples run, and what the headless tests play.
//!
//! - [`karts`]: the karts' track, bot karts and rules ([`KartPlugins`](karts::KartPlugins)).
//! - [`panel`]: the net panel's settings ([`NetPanel`]) and their live application on client
//!   and server ([`NetPanelPlugin`]).
//! - [`game`]: the shooter's rules: players joining, bots that shoot back, health, deaths,
//!   respawns, scores and the kill feed ([`ShooterGamePlugin`](game::ShooterGamePlugin)).
//! - [`hud`]: the HUD's state on a client: hit markers and shot counters
//!   ([`HudPlugin`](hud::HudPlugin)).
//! - [`session`]: how the examples' Apps connect: a listen server inside the player's App,
//!   a dedicated UDP server, a UDP client.
//! - [`shooter`]: the arena ([`spawn_arena`](shooter::spawn_arena)) and its server-driven bots
//!   ([`BotBrain`](shooter::BotBrain), [`ShooterBotsPlugin`](shooter::ShooterBotsPlugin)).

pub mod game;
pub mod hud;
pub mod karts;
pub mod panel;
pub mod session;
pub mod shooter;

pub use panel::{NetPanel, NetPanelPlugin, PanelError};

/// An `AssetPlugin` reading this repository's root, where `assets/` (hit-box layouts, weapons)
/// lives, wherever the binary runs from.
pub fn asset_plugin() -> bevy::asset::AssetPlugin {
    bevy::asset::AssetPlugin {
        file_path: concat!(env!("CARGO_MANIFEST_DIR"), "/../..").into(),
        ..Default::default()
    }
}
