//! The game logic of `unlag`'s examples, apart from their rendering: what the `shooter` and
//! `karts` examples run, and what the headless tests play.
//!
//! - [`cli`]: the examples' command lines, the dedicated server's options
//!   ([`ServerFlags`](cli::ServerFlags)) included.
//! - [`karts`]: the karts' track, bot karts and rules ([`KartPlugins`](karts::KartPlugins)).
//! - [`panel`]: the net panel's settings ([`NetPanel`]) and their live application on client
//!   and server ([`NetPanelPlugin`]).
//! - [`game`]: the shooter's rules: players joining, bots that shoot back, health, deaths,
//!   respawns, scores and the kill feed ([`ShooterGamePlugin`](game::ShooterGamePlugin)).
//! - [`hud`]: the HUD's state on a client: hit markers and shot counters
//!   ([`HudPlugin`](hud::HudPlugin)).
//! - [`session`]: how the examples' Apps connect: a listen server inside the player's App,
//!   a dedicated UDP server, a UDP client.
//! - [`stats`]: a dedicated server's periodic status line
//!   ([`ServerStatsPlugin`](stats::ServerStatsPlugin)).
//! - [`shooter`]: the arena ([`spawn_arena`](shooter::spawn_arena)) and its server-driven bots
//!   ([`BotBrain`](shooter::BotBrain), [`ShooterBotsPlugin`](shooter::ShooterBotsPlugin)).

pub mod cli;
pub mod display;
pub mod game;
pub mod hud;
pub mod karts;
pub mod key;
pub mod panel;
pub mod session;
pub mod shooter;
pub mod stats;

pub use panel::{NetPanel, NetPanelPlugin, PanelError};

/// An `AssetPlugin` reading this repository's root (see [`asset_root`]), where `assets/`
/// (hit-box layouts, weapons) lives, wherever the binary runs from.
pub fn asset_plugin() -> bevy::asset::AssetPlugin {
    bevy::asset::AssetPlugin {
        file_path: asset_root().to_string_lossy().into_owned(),
        ..Default::default()
    }
}

/// The folder whose `assets/` the examples and tests read, found when the program starts:
/// `BEVY_ASSET_ROOT` when set; else the first folder holding `assets/humanoid.hitboxes.ron`
/// among the package folder cargo names at run time (`cargo run`, `cargo test`), the working
/// folder, the executable's folder, and each of their parents; else the repository this crate
/// was compiled in.
///
/// Why not only the last: cargo reuses a build from another checkout of the same workspace
/// (a shared `CARGO_TARGET_DIR`), and a path compiled into the binary then names a checkout
/// that may be gone.
pub fn asset_root() -> std::path::PathBuf {
    use std::path::{Path, PathBuf};
    if let Some(root) = std::env::var_os("BEVY_ASSET_ROOT") {
        return PathBuf::from(root);
    }
    let holds_assets = |dir: &Path| dir.join("assets/humanoid.hitboxes.ron").is_file();
    let starts = [
        std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from),
        std::env::current_dir().ok(),
        std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(Path::to_path_buf)),
    ];
    starts
        .into_iter()
        .flatten()
        .find_map(|start| {
            start
                .ancestors()
                .find(|dir| holds_assets(dir))
                .map(Path::to_path_buf)
        })
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
}
