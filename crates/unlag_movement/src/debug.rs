//! Seeing corrections: the [`CorrectionApplied`] message, and (runtime switch
//! [`MovementDebug`], drawing behind the `debug-draw` feature) marks showing where the server
//! had the character (green) and where the client had predicted it (red), for a while.

use bevy::prelude::*;

/// Written on a client each time a correction is applied.
#[derive(Message, Copy, Clone, Debug, PartialEq)]
pub struct CorrectionApplied {
    /// The client's own predicted character (its
    /// [`AutonomousProxy`](unlag_net::AutonomousProxy)), reset to the server's state and its
    /// later moves replayed.
    pub entity: Entity,
    /// Where the server had the character after the corrected move, metres.
    pub server_position: Vec3,
    /// Where the client had predicted it after the same move, metres (if it still knew).
    pub client_position: Option<Vec3>,
    /// How many pending moves were replayed.
    pub replayed: u32,
}

/// Runtime switch of the correction marks (off by default).
#[derive(Resource, Clone, Debug, Reflect)]
#[reflect(Resource)]
pub struct MovementDebug {
    /// Whether corrections leave marks.
    pub show_corrections: bool,
    /// How long a mark stays, seconds (default 2).
    pub lifetime: f32,
}

impl Default for MovementDebug {
    fn default() -> Self {
        Self {
            show_corrections: false,
            lifetime: 2.0,
        }
    }
}

/// One correction's mark.
#[derive(Clone, Debug, PartialEq)]
pub struct CorrectionMark {
    /// Server pose (drawn green).
    pub server: Vec3,
    /// Client pose (drawn red), if known.
    pub client: Option<Vec3>,
    /// Seconds left.
    pub remaining: f32,
}

/// The marks currently shown.
#[derive(Resource, Clone, Debug, Default)]
pub struct CorrectionMarks(pub Vec<CorrectionMark>);

pub(crate) fn keep_marks(
    time: Res<Time>,
    debug: Res<MovementDebug>,
    mut applied: MessageReader<CorrectionApplied>,
    mut marks: ResMut<CorrectionMarks>,
) {
    let dt = time.delta_secs();
    marks.0.retain_mut(|m| {
        m.remaining -= dt;
        m.remaining > 0.0
    });
    for c in applied.read() {
        if debug.show_corrections {
            marks.0.push(CorrectionMark {
                server: c.server_position,
                client: c.client_position,
                remaining: debug.lifetime,
            });
        }
    }
    if !debug.show_corrections {
        marks.0.clear();
    }
}

#[cfg(feature = "debug-draw")]
pub(crate) fn draw_marks(marks: Res<CorrectionMarks>, mut gizmos: Gizmos) {
    for m in &marks.0 {
        let up = Vec3::Y * 1.8;
        gizmos.line(m.server, m.server + up, bevy::color::palettes::css::LIME);
        gizmos.sphere(m.server + up * 0.5, 0.35, bevy::color::palettes::css::LIME);
        if let Some(client) = m.client {
            gizmos.line(client, client + up, bevy::color::palettes::css::RED);
            gizmos.sphere(client + up * 0.5, 0.35, bevy::color::palettes::css::RED);
            gizmos.line(
                client + up * 0.5,
                m.server + up * 0.5,
                bevy::color::palettes::css::YELLOW,
            );
        }
    }
}
