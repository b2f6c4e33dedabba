//! The game logic of `unlag`'s examples, apart from their rendering: what the `shooter` and
//! `karts` examples run, and what the headless tests play.
//!
//! - [`panel`]: the net panel's settings ([`NetPanel`]) and their live application on client
//!   and server ([`NetPanelPlugin`]).
//! - [`shooter`]: the arena ([`spawn_arena`](shooter::spawn_arena)) and its server-driven bots
//!   ([`BotBrain`](shooter::BotBrain), [`ShooterBotsPlugin`](shooter::ShooterBotsPlugin)).

pub mod panel;
pub mod shooter;

pub use panel::{NetPanel, NetPanelPlugin, PanelError};
