//! The net panel's widgets (bevy_ui), shared by the shooter and karts examples: sliders for
//! RTT, jitter, loss and the proxies' update rate, and switches for every technique and gizmo.
//! They edit [`NetPanel`]; `unlag_demo::NetPanelPlugin` applies each change to the running
//! match. F1 shows and hides the panel.

use bevy::prelude::*;
use bevy::ui::RelativeCursorPosition;
use unlag::smoothing::SmoothingMode;
use unlag_demo::NetPanel;

/// The panel's widgets; add with the game's plugins on the player's App.
pub struct PanelUiPlugin {
    /// Whether the game has shots: without, the switches about them are not shown.
    pub shots: bool,
}

impl Plugin for PanelUiPlugin {
    fn build(&self, app: &mut App) {
        let switches = Switch::ALL
            .iter()
            .copied()
            .filter(|s| self.shots || !s.about_shots())
            .collect();
        app.insert_resource(Switches(switches))
            .add_systems(Startup, spawn_panel)
            .add_systems(
                Update,
                (toggle_panel, drag_sliders, press_switches, show).chain(),
            );
    }
}

#[derive(Resource)]
struct Switches(Vec<Switch>);

/// The panel's root node.
#[derive(Component)]
pub struct PanelRoot;

/// A slider's setting.
#[derive(Component, Clone, Copy, PartialEq, Debug)]
pub enum Slider {
    /// Round trip, 0–1000 ms.
    Rtt,
    /// Jitter, 0–200 ms and at most half the RTT.
    Jitter,
    /// Loss, 0–30 %.
    Loss,
    /// Proxy updates, 1–60 Hz.
    UpdateRate,
}

impl Slider {
    const ALL: [Slider; 4] = [
        Slider::Rtt,
        Slider::Jitter,
        Slider::Loss,
        Slider::UpdateRate,
    ];

    fn range(self) -> (f64, f64, f64) {
        // (low, high, step)
        match self {
            Slider::Rtt => (0.0, 1000.0, 10.0),
            Slider::Jitter => (0.0, 200.0, 1.0),
            Slider::Loss => (0.0, 30.0, 0.5),
            Slider::UpdateRate => (1.0, 60.0, 1.0),
        }
    }

    fn get(self, panel: &NetPanel) -> f64 {
        match self {
            Slider::Rtt => panel.rtt_ms,
            Slider::Jitter => panel.jitter_ms,
            Slider::Loss => panel.loss_percent,
            Slider::UpdateRate => f64::from(panel.update_rate_hz),
        }
    }

    /// Sets the value, keeping the panel valid (jitter at most half the RTT).
    fn set(self, panel: &mut NetPanel, value: f64) {
        match self {
            Slider::Rtt => {
                panel.rtt_ms = value;
                panel.jitter_ms = panel.jitter_ms.min(value / 2.0);
            }
            Slider::Jitter => panel.jitter_ms = value.min(panel.rtt_ms / 2.0),
            Slider::Loss => panel.loss_percent = value,
            Slider::UpdateRate => panel.update_rate_hz = value as f32,
        }
    }

    fn label(self, panel: &NetPanel) -> String {
        match self {
            Slider::Rtt => format!("RTT {:.0} ms", panel.rtt_ms),
            Slider::Jitter => format!("jitter {:.0} ms", panel.jitter_ms),
            Slider::Loss => format!("loss {:.1} %", panel.loss_percent),
            Slider::UpdateRate => format!("updates {:.0} Hz", panel.update_rate_hz),
        }
    }
}

/// A switch's setting.
#[derive(Component, Clone, Copy, PartialEq, Debug)]
pub enum Switch {
    /// Draw the local player where it is predicted.
    Prediction,
    /// Snap / Linear / Hermite / Extrapolate.
    Smoothing,
    /// Judge shots against what the shooter saw.
    Rewind,
    /// Mark corrections.
    CorrectionGizmos,
    /// Draw the hit boxes the server tested for your shots.
    RewindGizmos,
    /// A ghost of each other player's newest server state.
    Ghosts,
}

impl Switch {
    /// Every switch, shooter's order.
    pub const ALL: &'static [Switch] = &[
        Switch::Prediction,
        Switch::Smoothing,
        Switch::Rewind,
        Switch::CorrectionGizmos,
        Switch::RewindGizmos,
        Switch::Ghosts,
    ];

    /// Whether the switch is about shots (hidden in a game without them).
    fn about_shots(self) -> bool {
        matches!(self, Switch::Rewind | Switch::RewindGizmos)
    }

    fn press(self, panel: &mut NetPanel) {
        match self {
            Switch::Prediction => panel.prediction = !panel.prediction,
            Switch::Smoothing => {
                panel.smoothing = match panel.smoothing {
                    SmoothingMode::Snap => SmoothingMode::Linear,
                    SmoothingMode::Linear => SmoothingMode::Hermite,
                    SmoothingMode::Hermite => SmoothingMode::Extrapolate,
                    SmoothingMode::Extrapolate => SmoothingMode::Snap,
                }
            }
            Switch::Rewind => panel.rewind = !panel.rewind,
            Switch::CorrectionGizmos => panel.correction_gizmos = !panel.correction_gizmos,
            Switch::RewindGizmos => panel.rewind_gizmos = !panel.rewind_gizmos,
            Switch::Ghosts => panel.ghosts = !panel.ghosts,
        }
    }

    fn label(self, panel: &NetPanel) -> (String, bool) {
        let on = |b: bool| if b { "ON" } else { "off" };
        match self {
            Switch::Prediction => (
                format!("prediction: {}", on(panel.prediction)),
                panel.prediction,
            ),
            Switch::Smoothing => (format!("smoothing: {:?}", panel.smoothing), true),
            Switch::Rewind => (format!("rewind: {}", on(panel.rewind)), panel.rewind),
            Switch::CorrectionGizmos => (
                format!("correction gizmos: {}", on(panel.correction_gizmos)),
                panel.correction_gizmos,
            ),
            Switch::RewindGizmos => (
                format!("rewind gizmos: {}", on(panel.rewind_gizmos)),
                panel.rewind_gizmos,
            ),
            Switch::Ghosts => (format!("ghosts: {}", on(panel.ghosts)), panel.ghosts),
        }
    }
}

#[derive(Component)]
struct SliderFill(Slider);

#[derive(Component)]
struct SliderLabel(Slider);

#[derive(Component)]
struct SwitchLabel(Switch);

const TRACK_WIDTH: f32 = 200.0;

fn font(size: f32) -> TextFont {
    TextFont {
        font_size: FontSize::Px(size),
        ..default()
    }
}

fn spawn_panel(mut commands: Commands, switches: Res<Switches>) {
    commands
        .spawn((
            PanelRoot,
            Node {
                position_type: PositionType::Absolute,
                right: Val::Px(10.0),
                top: Val::Px(10.0),
                width: Val::Px(TRACK_WIDTH + 24.0),
                flex_direction: FlexDirection::Column,
                row_gap: Val::Px(6.0),
                padding: UiRect::all(Val::Px(10.0)),
                ..default()
            },
            BackgroundColor(Color::srgba(0.05, 0.07, 0.1, 0.82)),
        ))
        .with_children(|panel| {
            panel.spawn((
                Text::new("NET PANEL (F1)"),
                font(15.0),
                TextColor(Color::srgb(0.9, 0.9, 0.6)),
            ));
            for slider in Slider::ALL {
                panel.spawn((SliderLabel(slider), Text::new(""), font(13.0)));
                panel
                    .spawn((
                        slider,
                        Button,
                        RelativeCursorPosition::default(),
                        Node {
                            width: Val::Px(TRACK_WIDTH),
                            height: Val::Px(14.0),
                            ..default()
                        },
                        BackgroundColor(Color::srgb(0.2, 0.22, 0.26)),
                    ))
                    .with_children(|track| {
                        track.spawn((
                            SliderFill(slider),
                            Node {
                                width: Val::Percent(0.0),
                                height: Val::Percent(100.0),
                                ..default()
                            },
                            BackgroundColor(Color::srgb(0.3, 0.65, 1.0)),
                        ));
                    });
            }
            for &switch in &switches.0 {
                panel
                    .spawn((
                        switch,
                        Button,
                        Node {
                            width: Val::Px(TRACK_WIDTH),
                            padding: UiRect::axes(Val::Px(6.0), Val::Px(3.0)),
                            ..default()
                        },
                        BackgroundColor(Color::srgb(0.18, 0.2, 0.24)),
                    ))
                    .with_children(|b| {
                        b.spawn((SwitchLabel(switch), Text::new(""), font(13.0)));
                    });
            }
        });
}

fn toggle_panel(
    keys: Res<ButtonInput<KeyCode>>,
    mut root: Query<&mut Visibility, With<PanelRoot>>,
) {
    if keys.just_pressed(KeyCode::F1) {
        for mut v in &mut root {
            *v = if *v == Visibility::Hidden {
                Visibility::Inherited
            } else {
                Visibility::Hidden
            };
        }
    }
}

fn drag_sliders(
    sliders: Query<(&Slider, &Interaction, &RelativeCursorPosition)>,
    mut panel: ResMut<NetPanel>,
) {
    for (slider, interaction, cursor) in &sliders {
        if *interaction != Interaction::Pressed {
            continue;
        }
        let Some(at) = cursor.normalized else {
            continue;
        };
        let share = f64::from((at.x + 0.5).clamp(0.0, 1.0));
        let (lo, hi, step) = slider.range();
        let value = ((lo + share * (hi - lo)) / step).round() * step;
        if (slider.get(&panel) - value).abs() > 1e-9 {
            slider.set(&mut panel, value.clamp(lo, hi));
        }
    }
}

fn press_switches(
    switches: Query<(&Switch, &Interaction), Changed<Interaction>>,
    mut panel: ResMut<NetPanel>,
) {
    for (switch, interaction) in &switches {
        if *interaction == Interaction::Pressed {
            switch.press(&mut panel);
        }
    }
}

fn show(
    panel: Res<NetPanel>,
    mut fills: Query<(&SliderFill, &mut Node)>,
    mut labels: Query<(&SliderLabel, &mut Text), Without<SwitchLabel>>,
    mut switch_labels: Query<(&SwitchLabel, &mut Text, &mut TextColor), Without<SliderLabel>>,
) {
    if !panel.is_changed() {
        return;
    }
    for (fill, mut node) in &mut fills {
        let (lo, hi, _) = fill.0.range();
        let share = ((fill.0.get(&panel) - lo) / (hi - lo)).clamp(0.0, 1.0);
        node.width = Val::Percent((share * 100.0) as f32);
    }
    for (label, mut text) in &mut labels {
        text.0 = label.0.label(&panel);
    }
    for (label, mut text, mut colour) in &mut switch_labels {
        let (s, on) = label.0.label(&panel);
        text.0 = s;
        colour.0 = if on {
            Color::srgb(0.6, 1.0, 0.6)
        } else {
            Color::srgb(1.0, 0.6, 0.5)
        };
    }
}
