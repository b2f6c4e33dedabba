//! Health and kills on the server: hit points, and the messages that tell the game who hurt
//! or killed whom.

use bevy::ecs::system::SystemParam;
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

/// One confirmed hit's harm, as [`Harm::deal`] takes it.
pub(crate) struct Blow<'a> {
    /// The server's character entity that fired the shot or launched the projectile.
    pub shooter: Entity,
    /// The weapon's id.
    pub weapon: u8,
    /// Hit points taken.
    pub damage: f32,
    /// The bone hit ("" for splash).
    pub bone: &'a str,
    /// Whether a pellet hit the head.
    pub headshot: bool,
}

/// The characters' health and the messages that tell the game of damage and deaths: what a
/// confirmed hit changes on the server, and nothing else does.
#[derive(SystemParam)]
pub(crate) struct Harm<'w, 's> {
    health: Query<'w, 's, &'static mut Health>,
    damaged: MessageWriter<'w, Damaged>,
    killed: MessageWriter<'w, Killed>,
}

impl Harm<'_, '_> {
    /// Whether `character` is dead (one without [`Health`] never is).
    pub(crate) fn dead(&self, character: Entity) -> bool {
        self.health.get(character).is_ok_and(|h| !h.alive())
    }

    /// Takes the blow's damage off `target`'s [`Health`] (targets without one take the hit but
    /// no damage bookkeeping) and tells the game; whether it died of it.
    pub(crate) fn deal(&mut self, target: Entity, blow: Blow) -> bool {
        let Ok(mut hp) = self.health.get_mut(target) else {
            return false;
        };
        let was_alive = hp.alive();
        hp.current = (hp.current - blow.damage).max(0.0);
        let died = was_alive && !hp.alive();
        self.damaged.write(Damaged {
            target,
            shooter: blow.shooter,
            weapon: blow.weapon,
            damage: blow.damage,
            bone: blow.bone.to_owned(),
            headshot: blow.headshot,
        });
        if died {
            self.killed.write(Killed {
                target,
                shooter: blow.shooter,
                weapon: blow.weapon,
            });
        }
        died
    }
}
