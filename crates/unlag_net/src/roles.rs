//! Network roles as components, set automatically from lightyear's replication and control
//! (seed 001): [`Authority`] on the server, [`AutonomousProxy`] and [`SimulatedProxy`] on
//! clients.

use bevy::prelude::*;
use lightyear::prelude::*;

/// On the server: an entity the server simulates and replicates (it has lightyear's
/// `Replicate`). The server's word on it is final.
#[derive(Component, Copy, Clone, Debug, Default, PartialEq, Eq, Reflect)]
#[reflect(Component)]
pub struct Authority;

/// On a client: a replicated entity this client controls (its own character), which it
/// predicts.
#[derive(Component, Copy, Clone, Debug, Default, PartialEq, Eq, Reflect)]
#[reflect(Component)]
pub struct AutonomousProxy;

/// On a client: a replicated entity someone else controls, which it only shows, smoothed.
#[derive(Component, Copy, Clone, Debug, Default, PartialEq, Eq, Reflect)]
#[reflect(Component)]
pub struct SimulatedProxy;

/// On the server: the velocity an entity's track moves at now, metres per second (written by
/// the movement plugin for the characters it simulates: the simulation's velocity times the
/// pace the playout plays a player's moves at, over the last 0.1 s, so 0 while the track
/// waits for moves that have not arrived).
///
/// Proxy states carry it as their velocity instead of the last tick's motion: a player's moves
/// reach the server a packet at a time, so its track stands still for a tick and then takes
/// two or three moves at once, and a velocity read from that track swings between zero and
/// several times the real speed, bending the clients' curves.
#[derive(Component, Copy, Clone, Debug, Default, PartialEq, Reflect)]
#[reflect(Component)]
pub struct SimulatedVelocity(pub Vec3);

/// A character's recent moves, whatever its movement model, so other plugins can line things up
/// with them (the movement plugin keeps it): on a client, on its own character, the moves it
/// simulated; on the server, the moves it processed. Each is its sequence number and where
/// the move left the character, metres; the last [`MoveTrail::KEPT`].
///
/// A shot carries the newest move its client had made; the server judges the shot once it has
/// processed that move (its origin then stands where that move left the shooter), rather than
/// while a burst of losses still holds the moves back.
#[derive(Component, Clone, Debug, Default)]
pub struct MoveTrail {
    moves: std::collections::VecDeque<(unlag_core::Seq16, Vec3)>,
    /// The newest move that has arrived, processed or not (the server plays moves out at
    /// their own pace, a little after they arrive).
    arrived: Option<unlag_core::Seq16>,
}

impl MoveTrail {
    /// How many moves are kept: 1 s at 60 moves/s.
    pub const KEPT: usize = 60;

    /// Records a move: its sequence number and where it left the character, metres.
    pub fn push(&mut self, seq: unlag_core::Seq16, position: Vec3) {
        if self.moves.len() >= Self::KEPT {
            self.moves.pop_front();
        }
        self.moves.push_back((seq, position));
    }

    /// The newest move recorded.
    pub fn newest(&self) -> Option<unlag_core::Seq16> {
        self.moves.back().map(|m| m.0)
    }

    /// Whether move `seq` has been recorded (or is older than everything kept).
    pub fn reached(&self, seq: unlag_core::Seq16) -> bool {
        self.newest().is_some_and(|n| !seq.is_newer_than(n))
    }

    /// Records that moves up to `seq` have arrived (they are processed a playout wait later).
    pub fn set_arrived(&mut self, seq: unlag_core::Seq16) {
        if self.arrived.is_none_or(|a| seq.is_newer_than(a)) {
            self.arrived = Some(seq);
        }
    }

    /// Whether move `seq` has arrived (or been recorded): it is waiting to be played out, not
    /// lost.
    pub fn arrived(&self, seq: unlag_core::Seq16) -> bool {
        self.reached(seq) || self.arrived.is_some_and(|a| !seq.is_newer_than(a))
    }

    /// Where move `seq` left the character, metres, if it is kept.
    pub fn position_after(&self, seq: unlag_core::Seq16) -> Option<Vec3> {
        self.moves.iter().rev().find(|m| m.0 == seq).map(|m| m.1)
    }
}

/// On the server: the oldest moment, server seconds, at which a shot held for its shooter's
/// moves will be judged (its view time, or its judged time if older), if any shot waits. The
/// rewind keeps its judged window reaching back to it whatever the clients' views, so a shot
/// that waited for a burst's resent moves is not out of the window when its turn comes. A
/// resource the combat plugin keeps.
#[derive(Resource, Default, Clone, Copy, Debug, PartialEq)]
pub struct HeldShotsOldest(pub Option<f64>);

pub(crate) fn register(app: &mut App) {
    app.register_type::<(
        Authority,
        AutonomousProxy,
        SimulatedProxy,
        SimulatedVelocity,
    )>()
    .add_observer(on_replicate)
    .add_observer(on_replicated)
    .add_observer(on_controlled)
    .add_observer(on_controlled_removed);
}

fn on_replicate(add: On<Add, Replicate>, mut commands: Commands) {
    commands.entity(add.entity).insert(Authority);
}

fn on_replicated(
    add: On<Add, Replicated>,
    mut commands: Commands,
    controlled: Query<Has<Controlled>>,
) {
    let entity = add.entity;
    if controlled.get(entity).unwrap_or(false) {
        commands
            .entity(entity)
            .insert(AutonomousProxy)
            .remove::<SimulatedProxy>();
    } else {
        commands
            .entity(entity)
            .insert(SimulatedProxy)
            .remove::<AutonomousProxy>();
    }
}

fn on_controlled(
    add: On<Add, Controlled>,
    mut commands: Commands,
    replicated: Query<(), With<Replicated>>,
) {
    if replicated.contains(add.entity) {
        commands
            .entity(add.entity)
            .insert(AutonomousProxy)
            .remove::<SimulatedProxy>();
    }
}

fn on_controlled_removed(
    remove: On<Remove, Controlled>,
    mut commands: Commands,
    replicated: Query<(), With<Replicated>>,
) {
    if replicated.contains(remove.entity) {
        commands
            .entity(remove.entity)
            .try_insert(SimulatedProxy)
            .try_remove::<AutonomousProxy>();
    }
}
