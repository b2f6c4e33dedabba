//! The game logic of `unlag`'s examples, apart from their rendering: what the `shooter` and
//! `karts` examples run, and what the headless tests play.
//!
//! - [`panel`]: the net panel's settings ([`NetPanel`]) and their live application on client
//!   and server ([`NetPanelPlugin`]).

pub mod panel;

pub use panel::{NetPanel, NetPanelPlugin, PanelError};
