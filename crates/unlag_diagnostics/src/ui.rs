//! [`NetGraphUiPlugin`] (feature `ui`): draws the [`NetGraph`] with bevy_ui, one strip per
//! series — a label with the newest value and the window's range, and the last seconds as a
//! curve of thin bars, scaled to the window's largest value — in a corner of the screen,
//! toggled by a key.

use crate::{NetGraph, NetGraphSettings, NetSeries};
use bevy::prelude::*;

/// Draws the net graph (needs [`NetGraphPlugin`](crate::NetGraphPlugin) and bevy_ui).
#[derive(Clone, Debug)]
pub struct NetGraphUiPlugin {
    /// The key that shows and hides it (default F2; `None`: always shown).
    pub toggle: Option<KeyCode>,
    /// Whether it is shown at start (default false).
    pub visible: bool,
}

impl Default for NetGraphUiPlugin {
    fn default() -> Self {
        Self {
            toggle: Some(KeyCode::F2),
            visible: false,
        }
    }
}

/// The graph's root node: hide or show it with its [`Visibility`].
#[derive(Component, Debug)]
pub struct NetGraphUi;

/// One bar of a strip: the `index`-th newest sample of `series`.
#[derive(Component, Debug)]
pub struct NetGraphBar {
    /// The curve the bar belongs to: its strip and colour, and the samples its height is
    /// read from (as a share of the curve's scale).
    pub series: NetSeries,
    /// 0 is the newest sample.
    pub index: usize,
}

/// The label of a strip.
#[derive(Component, Debug)]
pub struct NetGraphLabel(pub NetSeries);

#[derive(Resource, Clone, Copy)]
struct Toggle(Option<KeyCode>, bool);

/// Width of a strip's plot, pixels.
const PLOT_WIDTH: f32 = 240.0;
/// Height of a strip's plot, pixels.
const PLOT_HEIGHT: f32 = 22.0;

impl Plugin for NetGraphUiPlugin {
    fn build(&self, app: &mut App) {
        app.insert_resource(Toggle(self.toggle, self.visible))
            .add_systems(Startup, spawn)
            .add_systems(Update, (toggle, draw).chain());
    }
}

fn colour(series: NetSeries) -> Color {
    match series {
        NetSeries::Rtt => Color::srgb(0.35, 0.8, 1.0),
        NetSeries::Jitter => Color::srgb(0.6, 0.6, 1.0),
        NetSeries::Loss => Color::srgb(1.0, 0.45, 0.35),
        NetSeries::Corrections => Color::srgb(1.0, 0.8, 0.2),
        NetSeries::Starved => Color::srgb(1.0, 0.55, 0.9),
        NetSeries::BytesUp => Color::srgb(0.5, 1.0, 0.5),
        NetSeries::BytesDown => Color::srgb(0.3, 0.85, 0.6),
    }
}

fn spawn(mut commands: Commands, toggle: Res<Toggle>, settings: Res<NetGraphSettings>) {
    let bars = (settings.window / settings.sample_interval.max(1e-3)).round() as usize;
    let bars = bars.clamp(2, PLOT_WIDTH as usize);
    let bar_width = PLOT_WIDTH / bars as f32;
    commands
        .spawn((
            NetGraphUi,
            Node {
                position_type: PositionType::Absolute,
                left: Val::Px(10.0),
                bottom: Val::Px(10.0),
                width: Val::Px(PLOT_WIDTH + 12.0),
                flex_direction: FlexDirection::Column,
                row_gap: Val::Px(1.0),
                padding: UiRect::all(Val::Px(6.0)),
                ..default()
            },
            BackgroundColor(Color::srgba(0.0, 0.0, 0.0, 0.6)),
            if toggle.1 {
                Visibility::Inherited
            } else {
                Visibility::Hidden
            },
        ))
        .with_children(|root| {
            // Per series: its label, then its strip of bars.
            for series in NetSeries::ALL {
                root.spawn((
                    NetGraphLabel(series),
                    Text::new(series.label()),
                    TextFont {
                        font_size: FontSize::Px(12.0),
                        ..default()
                    },
                    TextLayout::no_wrap(),
                    TextColor(colour(series)),
                ));
                root.spawn((
                    Node {
                        width: Val::Px(PLOT_WIDTH),
                        height: Val::Px(PLOT_HEIGHT),
                        min_height: Val::Px(PLOT_HEIGHT),
                        flex_direction: FlexDirection::Row,
                        align_items: AlignItems::FlexEnd,
                        overflow: Overflow::clip(),
                        ..default()
                    },
                    BackgroundColor(Color::srgba(1.0, 1.0, 1.0, 0.06)),
                ))
                .with_children(|plot| {
                    // Oldest on the left, newest on the right.
                    for k in (0..bars).rev() {
                        plot.spawn((
                            NetGraphBar { series, index: k },
                            Node {
                                width: Val::Px(bar_width),
                                height: Val::Percent(0.0),
                                flex_shrink: 0.0,
                                ..default()
                            },
                            BackgroundColor(colour(series)),
                        ));
                    }
                });
            }
        });
}

fn toggle(
    keys: Option<Res<ButtonInput<KeyCode>>>,
    toggle: Res<Toggle>,
    mut root: Query<&mut Visibility, With<NetGraphUi>>,
) {
    let (Some(key), Some(keys)) = (toggle.0, keys) else {
        return;
    };
    if keys.just_pressed(key) {
        for mut v in &mut root {
            *v = if *v == Visibility::Hidden {
                Visibility::Inherited
            } else {
                Visibility::Hidden
            };
        }
    }
}

/// The top of a strip's scale for a window whose largest value is `max`: the next of 1, 2, 5
/// × a power of ten at or above it (at least the series' floor).
pub fn scale_top(series: NetSeries, max: f64) -> f64 {
    let floor = match series {
        NetSeries::Rtt | NetSeries::Jitter => 20.0,
        NetSeries::Loss | NetSeries::Starved => 5.0,
        NetSeries::Corrections => 1.0,
        NetSeries::BytesUp | NetSeries::BytesDown => 1000.0,
    };
    let max = max.max(floor);
    let power = 10f64.powf(max.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|v| *v >= max - 1e-9)
        .unwrap_or(max)
}

fn draw(
    graph: Res<NetGraph>,
    root: Query<&Visibility, With<NetGraphUi>>,
    mut bars: Query<(&NetGraphBar, &mut Node)>,
    mut labels: Query<(&NetGraphLabel, &mut Text)>,
) {
    if !graph.is_changed() || root.iter().all(|v| *v == Visibility::Hidden) {
        return;
    }
    let newest: Vec<Vec<f64>> = NetSeries::ALL
        .iter()
        .map(|s| graph.series(*s).map(|(_, v)| v).collect())
        .collect();
    let tops: Vec<f64> = NetSeries::ALL
        .iter()
        .map(|s| scale_top(*s, graph.range(*s).map_or(0.0, |r| r.1)))
        .collect();
    for (bar, mut node) in &mut bars {
        let i = bar.series as usize;
        let samples = &newest[i];
        let value = samples
            .len()
            .checked_sub(1 + bar.index)
            .map_or(0.0, |k| samples[k]);
        let share = (value / tops[i]).clamp(0.0, 1.0) * 100.0;
        node.height = Val::Percent(share as f32);
    }
    for (label, mut text) in &mut labels {
        let s = label.0;
        let (lo, hi) = graph.range(s).unwrap_or((0.0, 0.0));
        let now = graph.latest(s).unwrap_or(0.0);
        text.0 = format!(
            "{} {} {}  (min {}, max {}, scale {})",
            s.label(),
            fmt(now),
            s.unit(),
            fmt(lo),
            fmt(hi),
            fmt(tops[s as usize])
        );
    }
}

fn fmt(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}
