//! [`Cheats`]: a client that misbehaves on purpose, to test the server's defences (feature
//! `cheats`; never in a shipped game client).

use bevy::prelude::*;

/// Insert on a client App to make its own character cheat.
#[derive(Resource, Clone, Debug, PartialEq)]
pub struct Cheats {
    /// How fast the client's clock runs: each move lasts and claims `clock_rate` ticks (1 is
    /// honest; 1.1 and 2 are speed hacks).
    pub clock_rate: f64,
    /// Moves the predicted character by this much at the next move and claims the new position
    /// (a teleport hack); taken (set back to `None`) when used.
    pub teleport: Option<Vec3>,
}

impl Default for Cheats {
    fn default() -> Self {
        Self {
            clock_rate: 1.0,
            teleport: None,
        }
    }
}
