//! The lag-compensation debug view: the boxes each recent query tested, posed as rewound, with
//! its ray (green when it hit, red when it missed), like Source's `sv_showlagcompensation`.

use crate::HitShape;
use bevy::prelude::*;
use std::sync::Mutex;

/// Runtime switch of the rewind debug view (a resource).
#[derive(Resource, Clone, Debug, Reflect)]
#[reflect(Resource)]
pub struct RewindDebug {
    /// Whether queries are logged in [`RewindDebugLog`] (and drawn with the `debug-draw`
    /// feature). Off by default: logging poses costs time on a busy server.
    pub show_queries: bool,
    /// How long a logged query stays, seconds (default 3).
    pub keep_seconds: f32,
}

impl Default for RewindDebug {
    fn default() -> Self {
        Self {
            show_queries: false,
            keep_seconds: 3.0,
        }
    }
}

/// One box as a logged query tested it.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct DebugBox {
    /// Its shape.
    pub shape: HitShape,
    /// Its rewound position, metres.
    pub position: Vec3,
    /// Its rewound rotation.
    pub rotation: Quat,
    /// Whether this is the box the ray hit.
    pub hit: bool,
}

/// One logged ray and the boxes of every character it was tested against.
#[derive(Clone, Debug, PartialEq)]
pub struct RewindDebugEntry {
    /// Where the ray started, metres.
    pub origin: Vec3,
    /// Where it stopped (at the hit, the static world, or its range), metres.
    pub end: Vec3,
    /// Swept-sphere radius (0 for a ray), metres.
    pub radius: f32,
    /// The server time it was judged at, seconds.
    pub time: f64,
    /// Whether it hit a box.
    pub hit: bool,
    /// The boxes tested, posed at `time`.
    pub boxes: Vec<DebugBox>,
    /// Who fired, when the query said (its boxes are never tested).
    pub shooter: Option<Entity>,
    /// Seconds since it was logged.
    pub age: f32,
}

/// Recent queries, while [`RewindDebug::show_queries`] is on (server). Queries log through a
/// shared reference, so [`RewindQuery`](crate::RewindQuery) stays read-only.
#[derive(Resource, Debug, Default)]
pub struct RewindDebugLog {
    entries: Mutex<Vec<RewindDebugEntry>>,
}

impl RewindDebugLog {
    /// Appends entries.
    pub fn push(&self, entries: Vec<RewindDebugEntry>) {
        if let Ok(mut log) = self.entries.lock() {
            log.extend(entries);
        }
    }

    /// A copy of the entries.
    pub fn entries(&self) -> Vec<RewindDebugEntry> {
        self.entries.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Forgets every entry.
    pub fn clear(&self) {
        if let Ok(mut log) = self.entries.lock() {
            log.clear();
        }
    }

    fn age(&self, seconds: f32, keep: f32) {
        if let Ok(mut log) = self.entries.lock() {
            for e in log.iter_mut() {
                e.age += seconds;
            }
            log.retain(|e| e.age <= keep);
        }
    }
}

fn age_entries(time: Res<Time>, settings: Res<RewindDebug>, log: Res<RewindDebugLog>) {
    if settings.show_queries {
        log.age(time.delta_secs(), settings.keep_seconds);
    } else {
        log.clear();
    }
}

#[cfg(feature = "debug-draw")]
fn draw_entries(log: Res<RewindDebugLog>, mut gizmos: Gizmos) {
    use bevy::color::palettes::css::{LIME, RED, YELLOW};
    for entry in log.entries.lock().iter().flat_map(|l| l.iter()) {
        let colour = if entry.hit { LIME } else { RED };
        gizmos.line(entry.origin, entry.end, colour);
        if entry.radius > 0.0 {
            gizmos.sphere(
                Isometry3d::from_translation(entry.end),
                entry.radius,
                colour,
            );
        }
        for b in &entry.boxes {
            let c = if b.hit { YELLOW } else { colour };
            match b.shape {
                HitShape::Cuboid { half_extents } => {
                    gizmos.cube(
                        Transform::from_translation(b.position)
                            .with_rotation(b.rotation)
                            .with_scale(half_extents * 2.0),
                        c,
                    );
                }
                HitShape::Capsule {
                    half_height,
                    radius,
                } => {
                    gizmos.primitive_3d(
                        &Capsule3d::new(radius, half_height * 2.0),
                        Isometry3d::new(b.position, b.rotation),
                        c,
                    );
                }
            }
        }
    }
}

pub(crate) fn build(app: &mut App) {
    app.add_systems(Update, age_entries);
    #[cfg(feature = "debug-draw")]
    app.add_systems(
        PostUpdate,
        draw_entries.run_if(resource_exists::<bevy::gizmos::config::GizmoConfigStore>),
    );
}
