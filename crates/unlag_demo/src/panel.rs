//! The net panel: simulated network conditions, the proxies' update rate, and switches that
//! turn each technique off to show what it saves (seed 001: exaggerate the problem). Every
//! change applies to a running match.

use bevy::prelude::*;
use core::time::Duration;
use lightyear::prelude::{Client, Server};
use unlag::combat::CombatSettings;
use unlag::movement::{
    CharacterMovement, KartMovement, MovementDebug, MovementModel, MovementSettings,
};
use unlag::net::{LinkConditions, NetConditions};
use unlag::rewind::RewindDebug;
use unlag::smoothing::{ProxySmoothing, SmoothingDebug, SmoothingMode, SmoothingSettings};

/// Every setting of the net panel. A resource: the panel's widgets edit it, and
/// [`NetPanelPlugin`] applies each change. In a listen server (server and client Apps in one
/// process) the host copies it into both Apps; a remote client's panel changes only its own
/// side (its link's conditions, its prediction and smoothing, its gizmos).
#[derive(Resource, Clone, Debug, PartialEq)]
pub struct NetPanel {
    /// Round-trip latency the client's link adds, milliseconds (0–1000).
    pub rtt_ms: f64,
    /// Jitter each way, milliseconds (0–200, at most half the RTT).
    pub jitter_ms: f64,
    /// Loss each way, percent (0–30).
    pub loss_percent: f64,
    /// Server: states per second sent of each character (1–60).
    pub update_rate_hz: f32,
    /// Client: the local player is drawn where it is predicted (off: one round trip late).
    pub prediction: bool,
    /// Client: how other players are drawn between the server's states.
    pub smoothing: SmoothingMode,
    /// Server: shots are judged against what the shooter saw (off: against the present).
    pub rewind: bool,
    /// Client: marks where corrections moved the local player.
    pub correction_gizmos: bool,
    /// Server: the hit boxes each shot was tested against are kept for drawing.
    pub rewind_gizmos: bool,
    /// Client: a ghost of each other player's newest server state.
    pub ghosts: bool,
}

impl Default for NetPanel {
    /// No added latency, 20 Hz, every technique on, every gizmo off.
    fn default() -> Self {
        Self {
            rtt_ms: 0.0,
            jitter_ms: 0.0,
            loss_percent: 0.0,
            update_rate_hz: 20.0,
            prediction: true,
            smoothing: SmoothingMode::Hermite,
            rewind: true,
            correction_gizmos: false,
            rewind_gizmos: false,
            ghosts: false,
        }
    }
}

/// A panel setting out of its range.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("net panel: {field} = {value} is outside {range}")]
pub struct PanelError {
    /// The name of the [`NetPanel`] field out of range (`"rtt_ms"`, `"jitter_ms"`,
    /// `"loss_percent"` or `"update_rate_hz"`).
    pub field: &'static str,
    /// Its value.
    pub value: f64,
    /// Its range.
    pub range: &'static str,
}

impl NetPanel {
    /// Checks every setting against its range.
    pub fn validate(&self) -> Result<(), PanelError> {
        let check = |field, value: f64, lo: f64, hi: f64, range| {
            if value.is_finite() && (lo..=hi).contains(&value) {
                Ok(())
            } else {
                Err(PanelError {
                    field,
                    value,
                    range,
                })
            }
        };
        check("rtt_ms", self.rtt_ms, 0.0, 1000.0, "0–1000 ms")?;
        check("jitter_ms", self.jitter_ms, 0.0, 200.0, "0–200 ms")?;
        check(
            "jitter_ms",
            self.jitter_ms,
            0.0,
            self.rtt_ms / 2.0,
            "0–RTT/2 ms",
        )?;
        check("loss_percent", self.loss_percent, 0.0, 30.0, "0–30 %")?;
        check(
            "update_rate_hz",
            f64::from(self.update_rate_hz),
            1.0,
            60.0,
            "1–60 Hz",
        )
    }

    /// The link conditions the panel asks for.
    pub fn conditions(&self) -> Result<LinkConditions, PanelError> {
        self.validate()?;
        Ok(LinkConditions {
            update_rate_hz: self.update_rate_hz,
            ..LinkConditions::new(
                Duration::from_secs_f64(self.rtt_ms / 1e3),
                Duration::from_secs_f64(self.jitter_ms / 1e3),
                (self.loss_percent / 100.0) as f32,
            )
        })
    }
}

/// Applies [`NetPanel`] whenever it changes: on a client to its link, prediction, smoothing
/// and gizmos; on a server to its update rate, rewinding and rewind log. A panel out of range
/// is refused with a warning and changes nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct NetPanelPlugin;

impl Plugin for NetPanelPlugin {
    fn build(&self, app: &mut App) {
        app.init_resource::<NetPanel>().add_systems(
            Update,
            (
                apply_on_client
                    .run_if(any_with_component::<Client>)
                    .run_if(resource_changed::<NetPanel>),
                apply_on_server
                    .run_if(any_with_component::<Server>)
                    .run_if(resource_changed::<NetPanel>),
            )
                // A change applies to the frame it is made in: before the moves are checked
                // and the shots judged or fired (unordered, a shot judged in that frame could
                // take the old switch or the new one, as the scheduler happened to order them).
                .before(unlag::net::NetSystems::Moves)
                .before(unlag::combat::CombatSystems::Client)
                .before(unlag::combat::CombatSystems::Server),
        );
    }
}

fn set_prediction<M: MovementModel>(settings: Option<ResMut<MovementSettings<M>>>, on: bool) {
    if let Some(mut s) = settings {
        s.show_prediction = on;
    }
}

#[allow(clippy::too_many_arguments)]
fn apply_on_client(
    panel: Res<NetPanel>,
    mut conditions: ResMut<NetConditions>,
    characters: Option<ResMut<MovementSettings<CharacterMovement>>>,
    karts: Option<ResMut<MovementSettings<KartMovement>>>,
    smoothing: Option<ResMut<SmoothingSettings>>,
    mut proxies: Query<&mut ProxySmoothing>,
    movement_debug: Option<ResMut<MovementDebug>>,
    smoothing_debug: Option<ResMut<SmoothingDebug>>,
) {
    let link = match panel.conditions() {
        Ok(link) => link,
        Err(e) => {
            warn!("{e}: panel not applied");
            return;
        }
    };
    if let Err(e) = conditions.set(link) {
        warn!("net panel: {e}");
        return;
    }
    set_prediction(characters, panel.prediction);
    set_prediction(karts, panel.prediction);
    if let Some(mut s) = smoothing {
        s.default_mode = panel.smoothing;
    }
    for mut proxy in &mut proxies {
        proxy.set_mode(panel.smoothing);
    }
    if let Some(mut d) = movement_debug {
        d.show_corrections = panel.correction_gizmos;
    }
    if let Some(mut d) = smoothing_debug {
        d.show_server_ghosts = panel.ghosts;
    }
}

fn apply_on_server(
    panel: Res<NetPanel>,
    mut conditions: ResMut<NetConditions>,
    combat: Option<ResMut<CombatSettings>>,
    rewind_debug: Option<ResMut<RewindDebug>>,
) {
    if let Err(e) = panel.validate() {
        warn!("{e}: panel not applied");
        return;
    }
    // The server's link figures are ignored (each client shapes its own link); its update rate
    // is every proxy's default.
    let mut link = *conditions.get();
    link.update_rate_hz = panel.update_rate_hz;
    if let Err(e) = conditions.set(link) {
        warn!("net panel: {e}");
        return;
    }
    if let Some(mut c) = combat {
        c.rewind = panel.rewind;
    }
    if let Some(mut d) = rewind_debug {
        d.show_queries = panel.rewind_gizmos;
    }
}
