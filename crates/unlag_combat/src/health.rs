//! Health and kills on the server: hit points, and the messages that tell the game who hurt
//! or killed whom.

use bevy::prelude::*;

/// Hit points of a character (server; replicate it if clients should show it).
#[derive(Component, Copy, Clone, Debug, PartialEq, Reflect)]
#[reflect(Component)]
pub struct Health {
    /// Hit points left.
    pub current: f32,
    /// Hit points when full.
    pub max: f32,
}

impl Health {
    /// Full health of `max` hit points.
    pub fn new(max: f32) -> Self {
        Self { current: max, max }
    }

    /// Whether it has hit points left.
    pub fn alive(&self) -> bool {
        self.current > 0.0
    }
}

/// Server → game: a character took damage from a confirmed shot.
#[derive(Message, Clone, Debug, PartialEq)]
pub struct Damaged {
    /// The server's character entity hit; its [`Health`] has already dropped.
    pub target: Entity,
    /// The server's character entity that fired the shot or launched the projectile.
    pub shooter: Entity,
    /// The weapon's id.
    pub weapon: u8,
    /// Hit points taken.
    pub damage: f32,
    /// The bone hit (a headshot's when there was one).
    pub bone: String,
    /// Whether a pellet hit the head.
    pub headshot: bool,
}

/// Server → game: a character's health reached zero.
#[derive(Message, Clone, Debug, PartialEq)]
pub struct Killed {
    /// The server's character entity whose [`Health`] reached zero.
    pub target: Entity,
    /// The server's character entity that fired the killing shot or projectile.
    pub shooter: Entity,
    /// The weapon's id.
    pub weapon: u8,
}

/// Takes `damage` off `target`'s [`Health`] (targets without one take the hit but no damage
/// bookkeeping) and tells the game; whether it died of it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn deal_damage(
    health: &mut Query<&mut Health>,
    damaged: &mut MessageWriter<Damaged>,
    killed: &mut MessageWriter<Killed>,
    target: Entity,
    shooter: Entity,
    weapon: u8,
    damage: f32,
    bone: &str,
    headshot: bool,
) -> bool {
    let Ok(mut hp) = health.get_mut(target) else {
        return false;
    };
    let was_alive = hp.alive();
    hp.current = (hp.current - damage).max(0.0);
    let died = was_alive && !hp.alive();
    damaged.write(Damaged {
        target,
        shooter,
        weapon,
        damage,
        bone: bone.to_owned(),
        headshot,
    });
    if died {
        killed.write(Killed {
            target,
            shooter,
            weapon,
        });
    }
    died
}
