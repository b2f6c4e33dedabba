//! The client side: shots fired at once against what is on screen, predicted ammo, results.
//! One file per step of a shot's way:
//!
//! - `fire.rs`: the fire system, and the copies of recent shots still due;
//! - `trace.rs`: the proxies as drawn (or led above the rewind cap) and the pellets traced
//!   against their hit boxes and the world, near misses included;
//! - `claims.rs`: what the shot claims the shooter saw, for the server to pose;
//! - `prediction.rs`: the shot taken from the predicted ammo and fire rate, and the damage
//!   expected of unanswered shots;
//! - `reload.rs` and `results.rs`: reloads, and the server's answers.

mod claims;
mod fire;
mod prediction;
mod reload;
mod results;
mod trace;

pub(crate) use fire::{ShotCopies, fire, send_copies};
pub(crate) use reload::{UnansweredReloads, reload, send_reload_copies};
pub(crate) use results::receive_results;

use crate::protocol::{ConfirmedHit, CosmeticFire, Rejection};
use crate::settings::Weapons;
use bevy::prelude::*;
use unlag_core::PredictedAmmo;

/// Most commands of one kind held through hitched frames (a game cannot fire or reload more
/// than a handful of times in them; a flood is cut here, not grown).
const MAX_HELD_COMMANDS: usize = 16;

/// The commands to play this frame: none in a hitched frame, whose commands are held in
/// `held` for the next frame that is not (at most [`MAX_HELD_COMMANDS`]); in that one, the
/// held commands first, then the frame's own. What is on screen after a hitch was drawn before
/// it, so a shot or a reload stamped with it would claim a view the hitch's length old. Left
/// unread instead, a command lived one more frame only (Bevy's messages), and one given in the
/// first of a run of hitched frames could be lost.
pub(crate) fn playable_commands<T: Message + Copy>(
    hitched: bool,
    held: &mut Vec<T>,
    commands: &mut MessageReader<T>,
) -> Vec<T> {
    if hitched {
        for command in commands.read() {
            if held.len() < MAX_HELD_COMMANDS {
                held.push(*command);
            }
        }
        return Vec::new();
    }
    let mut playable = core::mem::take(held);
    playable.extend(commands.read().copied());
    playable
}

/// Game → combat (client): fire the weapon once.
#[derive(Message, Copy, Clone, Debug, PartialEq)]
pub struct FireCommand {
    /// The weapon's id.
    pub weapon: u8,
    /// The eye: where the shot starts, metres.
    pub origin: Vec3,
    /// Where it aims (need not be normalised).
    pub aim: Vec3,
}

/// Game → combat (client): reload the weapon.
#[derive(Message, Copy, Clone, Debug, PartialEq)]
pub struct ReloadCommand {
    /// The weapon's id.
    pub weapon: u8,
}

/// What a pellet hit on the shooter's screen.
#[derive(Clone, Debug, PartialEq)]
pub struct LocalHit {
    /// The client's proxy entity of the character hit (the parent of the hit box), as drawn
    /// this frame.
    pub target: Entity,
    /// The bone of the hit box hit, from its [`HitBox`](unlag_rewind::HitBox) ("head",
    /// "torso", ...).
    pub bone: String,
    /// Whether it is the head.
    pub headshot: bool,
    /// Where, metres.
    pub point: Vec3,
    /// The proxy's [`ProxyHealth`], less the damage of this client's shots still unanswered,
    /// was spent: a hit on a body the client expects dead (its earlier shot killed it, as far
    /// as it knows). Not a promise: the server grants it only if the target was alive (a hit
    /// marker waits for the verdict), and does not count it as a seen miss either.
    pub expected_dead: bool,
}

/// Hit points of a proxy as the game last heard them (the combat plugin does not replicate
/// health: a game that sends it inserts and updates this on its proxies). With it the client
/// tells a hit on a body its own unanswered shots have already killed from one the server can
/// grant ([`LocalHit::expected_dead`]): shots fired in the round trip after a kill hit a corpse
/// on the server.
#[derive(Component, Copy, Clone, Debug, PartialEq)]
pub struct ProxyHealth(pub f32);

/// A shot of this client the server has not answered yet, and the damage it is expected to
/// deal one target.
#[derive(Clone, Copy, Debug)]
struct InFlight {
    fire_index: u32,
    target: Entity,
    damage: f32,
    /// The view time it was fired at, server seconds (forgotten after [`IN_FLIGHT_SECONDS`]:
    /// its verdict was lost).
    at: f64,
}

/// How long a shot's expected damage counts without a verdict, seconds.
const IN_FLIGHT_SECONDS: f64 = 2.0;

/// Combat → game (client), at once: a shot left, for muzzle flash, tracers and predicted hit
/// markers. The server's verdict follows as [`ShotConfirmed`].
#[derive(Message, Clone, Debug, PartialEq)]
pub struct LocalFire {
    /// The weapon's id.
    pub weapon: u8,
    /// The shot's fire index.
    pub fire_index: u32,
    /// Where it started, metres.
    pub origin: Vec3,
    /// Each pellet's direction.
    pub directions: Vec<Vec3>,
    /// Each pellet's hit on screen, if any.
    pub hits: Vec<Option<LocalHit>>,
    /// The view time it was fired at, server seconds.
    pub view_time: f64,
}

/// Combat → game (client): the server's verdict on one of our shots.
#[derive(Message, Clone, Debug, PartialEq)]
pub struct ShotConfirmed {
    /// The shot's fire index.
    pub fire_index: u32,
    /// The weapon's id.
    pub weapon: u8,
    /// What it hit (targets are our proxies), or why it was refused.
    pub outcome: Result<Vec<ConfirmedHit>, Rejection>,
    /// Whether it was judged against the past (false above the server's rewind cap).
    pub rewound: bool,
}

/// Combat → game (client): another player fired (effects only).
#[derive(Message, Clone, Debug, PartialEq)]
pub struct RemoteFire(pub CosmeticFire);

/// One weapon on the client.
#[derive(Clone, Debug)]
struct ClientWeapon {
    ammo: PredictedAmmo,
    reloading_until: Option<f64>,
}

/// The local player's weapons (client resource): predicted ammo, reloads, aim.
#[derive(Resource, Clone, Debug, Default)]
pub struct Armory {
    weapons: Vec<ClientWeapon>,
    magazines: Vec<u32>,
    /// Whether the player is aiming down sights (zoom): owned here, never by the server, so it
    /// cannot flicker at high latency.
    pub aiming: bool,
    /// Shots the server refused, all time.
    pub refused: u64,
    /// The fire index of the latest shot, any weapon.
    last_fire_index: u32,
    /// The view time of the latest shot, any weapon, and its weapon's fire interval
    /// (seconds): the next shot of any weapon waits that long, as the server checks.
    last_shot: Option<(f64, f64)>,
    /// Damage of the shots not answered yet, per target.
    in_flight: Vec<InFlight>,
}

impl Armory {
    /// The ammo to show for weapon `weapon`: the server's, less the shots it has not answered.
    pub fn ammo(&self, weapon: u8) -> Option<u32> {
        self.weapons
            .get(usize::from(weapon))
            .map(|w| w.ammo.shown())
    }

    /// Shots of weapon `weapon` sent and not answered yet.
    pub fn pending(&self, weapon: u8) -> Option<u32> {
        self.weapons
            .get(usize::from(weapon))
            .map(|w| w.ammo.pending())
    }

    /// Whether weapon `weapon` is reloading.
    pub fn reloading(&self, weapon: u8) -> bool {
        self.weapons
            .get(usize::from(weapon))
            .is_some_and(|w| w.reloading_until.is_some())
    }
}

/// Fills the armory once the weapons are known.
pub(crate) fn arm_client(
    mut commands: Commands,
    weapons: Res<Weapons>,
    armory: Option<Res<Armory>>,
) {
    if armory.is_some() {
        return;
    }
    let Some(table) = &weapons.table else {
        return;
    };
    commands.insert_resource(Armory {
        weapons: table
            .weapons
            .iter()
            .map(|w| ClientWeapon {
                ammo: PredictedAmmo::new(w.magazine),
                reloading_until: None,
            })
            .collect(),
        magazines: table.weapons.iter().map(|w| w.magazine).collect(),
        aiming: false,
        refused: 0,
        last_fire_index: 0,
        last_shot: None,
        in_flight: Vec::new(),
    });
}
