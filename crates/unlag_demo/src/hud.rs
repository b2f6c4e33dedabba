//! What the shooter's HUD shows, kept by [`HudPlugin`] on the client apart from its drawing:
//! hit markers (predicted at once, then the server's verdict) and shot counters.

use bevy::prelude::*;
use unlag::combat::{
    CombatSystems, ConfirmedHit, LocalFire, ProjectileExploded, Rejection, ShotConfirmed,
};

/// How a hit marker came about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkerKind {
    /// The client's own trace hit something it draws (shown at once, before the server).
    Local,
    /// The server confirmed a hit.
    Confirmed,
    /// The server confirmed a hit on the head.
    Headshot,
}

/// One hit marker.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HitMarker {
    /// Real time it appeared, seconds since the App started.
    pub at: f64,
    /// What it shows.
    pub kind: MarkerKind,
}

/// Client: the HUD's state, updated every frame after combat.
#[derive(Resource, Clone, Debug, Default)]
pub struct Hud {
    /// Markers of the last [`Hud::MARKER_SECONDS`], oldest first.
    pub markers: Vec<HitMarker>,
    /// Shots fired (each weapon trigger pull, pellets together).
    pub shots: u64,
    /// Shots whose local trace hit someone it did not expect dead (a hit marker: a promise).
    pub local_hits: u64,
    /// Of those, the shots the server confirmed on someone.
    pub seen_confirmed: u64,
    /// Of those, the shots fired after the player died, or from where its respawn had moved
    /// it, before hearing of it (answered, never granted: the marker could not know).
    pub seen_posthumous: u64,
    /// Of those, the shots the server judged misses (none of their rays hit anyone: a target
    /// another shot killed first, or a view the server judged elsewhere). The rest of the seen
    /// hits were refused or not answered yet.
    pub seen_missed: u64,
    /// Fire indices of the latest shots that showed a hit marker (the last 256).
    marked: std::collections::VecDeque<u32>,
    /// Shots (and projectiles) the server confirmed on someone.
    pub confirmed_hits: u64,
    /// Confirmed headshots.
    pub headshots: u64,
    /// Shots the server refused.
    pub rejected: u64,
    /// Shots fired after dying, or from where a respawn had moved the player, before hearing
    /// of it (answered, not refused).
    pub posthumous: u64,
    /// Why the latest refusal was made.
    pub last_rejection: Option<Rejection>,
    /// Refusals by reason, in the order first seen.
    pub refusals: Vec<(Rejection, u64)>,
}

impl Hud {
    /// Seconds a marker stays.
    pub const MARKER_SECONDS: f64 = 0.6;

    /// The newest marker still showing, if any.
    pub fn latest_marker(&self) -> Option<&HitMarker> {
        self.markers.last()
    }
}

/// Keeps [`Hud`] on a client.
#[derive(Clone, Copy, Debug, Default)]
pub struct HudPlugin;

impl Plugin for HudPlugin {
    fn build(&self, app: &mut App) {
        app.init_resource::<Hud>()
            .add_systems(Update, track.after(CombatSystems::Client));
    }
}

fn track(
    time: Res<Time<Real>>,
    mut hud: ResMut<Hud>,
    mut fired: MessageReader<LocalFire>,
    mut verdicts: MessageReader<ShotConfirmed>,
    mut exploded: MessageReader<ProjectileExploded>,
) {
    let now = time.elapsed_secs_f64();
    hud.markers.retain(|m| now - m.at < Hud::MARKER_SECONDS);
    let mark = |hud: &mut Hud, kind| hud.markers.push(HitMarker { at: now, kind });
    // A shot or projectile the server confirmed on someone: counted, and marked (a headshot's
    // marker when one hit the head).
    let confirm = |hud: &mut Hud, hits: &[ConfirmedHit]| {
        hud.confirmed_hits += 1;
        let head = hits.iter().any(|h| h.headshot);
        hud.headshots += u64::from(head);
        let kind = if head {
            MarkerKind::Headshot
        } else {
            MarkerKind::Confirmed
        };
        mark(hud, kind);
    };
    for shot in fired.read() {
        hud.shots += 1;
        // A hit on a body this client's earlier shot is expected to have killed promises
        // nothing: its marker waits for the verdict.
        if shot.hits.iter().flatten().any(|h| !h.expected_dead) {
            hud.local_hits += 1;
            if hud.marked.len() == 256 {
                hud.marked.pop_front();
            }
            hud.marked.push_back(shot.fire_index);
            mark(&mut hud, MarkerKind::Local);
        }
    }
    for verdict in verdicts.read() {
        match &verdict.outcome {
            Ok(hits) if !hits.is_empty() => {
                if hud.marked.contains(&verdict.fire_index) {
                    hud.seen_confirmed += 1;
                }
                confirm(&mut hud, hits);
            }
            Ok(_) => {
                if hud.marked.contains(&verdict.fire_index) {
                    hud.seen_missed += 1;
                }
            }
            // Fired while dead, or from where a respawn had moved it, before hearing of it:
            // nothing was refused.
            Err(Rejection::ShooterDead | Rejection::ShooterMoved) => {
                hud.posthumous += 1;
                if hud.marked.contains(&verdict.fire_index) {
                    hud.seen_posthumous += 1;
                }
            }
            Err(reason) => {
                hud.rejected += 1;
                hud.last_rejection = Some(*reason);
                match hud.refusals.iter_mut().find(|(r, _)| r == reason) {
                    Some((_, n)) => *n += 1,
                    None => hud.refusals.push((*reason, 1)),
                }
            }
        }
    }
    for impact in exploded.read() {
        if impact.0.own && !impact.0.hits.is_empty() {
            confirm(&mut hud, &impact.0.hits);
        }
    }
}
