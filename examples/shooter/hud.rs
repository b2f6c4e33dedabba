//! The shooter's HUD (bevy_ui): crosshair and hit markers, health, predicted ammo, ping with
//! the high-ping warning, live counters (corrections, rejected shots, bandwidth), the kill feed
//! and the help overlay (H).

use bevy::prelude::*;
use unlag::combat::{Armory, Weapons};
use unlag::diagnostics::{NetGraph, NetSeries};
use unlag::movement::MovementStats;
use unlag::net::{AutonomousProxy, NetClock, PingMonitor};
use unlag_demo::game::{KillFeed, Scoreboard};
use unlag_demo::hud::{Hud, MarkerKind};

pub struct HudUiPlugin;

impl Plugin for HudUiPlugin {
    fn build(&self, app: &mut App) {
        app.add_systems(Startup, spawn)
            .add_systems(Update, (status, warning, centre, marker, feed, help));
    }
}

#[derive(Component)]
struct StatusText;

#[derive(Component)]
struct WarningText;

#[derive(Component)]
struct Marker;

#[derive(Component)]
struct FeedText;

#[derive(Component)]
struct HelpText;

#[derive(Component)]
struct CentreText;

fn font(size: f32) -> TextFont {
    TextFont {
        font_size: FontSize::Px(size),
        ..default()
    }
}

const HELP: &str = "click: play   WASD + mouse: move, look   Space: jump   Ctrl: crouch   Shift: dash\n\
LMB: fire   RMB: aim   R: reload   1/2/3: rifle, shotgun, launcher\n\
F1: net panel   F2: net graph   H: help   Esc: free the mouse";

fn spawn(mut commands: Commands) {
    // Crosshair: a dot, and the hit marker over it.
    commands
        .spawn(Node {
            position_type: PositionType::Absolute,
            width: Val::Percent(100.0),
            height: Val::Percent(100.0),
            justify_content: JustifyContent::Center,
            align_items: AlignItems::Center,
            ..default()
        })
        .with_children(|c| {
            c.spawn((
                Node {
                    width: Val::Px(4.0),
                    height: Val::Px(4.0),
                    position_type: PositionType::Absolute,
                    ..default()
                },
                BackgroundColor(Color::WHITE),
            ));
            c.spawn((Marker, Text::new(""), font(30.0), TextColor(Color::WHITE)));
            c.spawn((
                CentreText,
                Text::new(""),
                font(28.0),
                TextColor(Color::srgb(1.0, 0.4, 0.3)),
                Node {
                    position_type: PositionType::Absolute,
                    top: Val::Percent(30.0),
                    ..default()
                },
            ));
        });
    commands
        .spawn((
            Node {
                position_type: PositionType::Absolute,
                left: Val::Px(10.0),
                top: Val::Px(10.0),
                flex_direction: FlexDirection::Column,
                padding: UiRect::all(Val::Px(8.0)),
                row_gap: Val::Px(2.0),
                ..default()
            },
            BackgroundColor(Color::srgba(0.0, 0.0, 0.0, 0.5)),
        ))
        .with_children(|c| {
            c.spawn((StatusText, Text::new(""), font(15.0)));
            c.spawn((
                WarningText,
                Text::new(""),
                font(16.0),
                TextColor(Color::srgb(1.0, 0.3, 0.2)),
            ));
        });
    commands.spawn((
        FeedText,
        Text::new(""),
        font(15.0),
        Node {
            position_type: PositionType::Absolute,
            right: Val::Px(250.0),
            top: Val::Px(10.0),
            ..default()
        },
    ));
    commands.spawn((
        HelpText,
        Text::new(HELP),
        font(13.0),
        TextColor(Color::srgba(1.0, 1.0, 1.0, 0.85)),
        Node {
            position_type: PositionType::Absolute,
            right: Val::Px(10.0),
            bottom: Val::Px(10.0),
            ..default()
        },
        BackgroundColor(Color::srgba(0.0, 0.0, 0.0, 0.5)),
    ));
}

/// The status lines: the link, health and score, the weapon and its ammo, hits, corrections
/// and refusals, bandwidth and frame rate.
fn status(
    time: Res<Time<Real>>,
    mut fps: Local<f32>,
    clock: Res<NetClock>,
    (armory, weapons, loadout): (Option<Res<Armory>>, Res<Weapons>, Res<super::Loadout>),
    (board, own): (Res<Scoreboard>, Query<Entity, With<AutonomousProxy>>),
    (hud, moves, graph): (Res<Hud>, Res<MovementStats>, Res<NetGraph>),
    mut text: Query<&mut Text, (With<StatusText>, Without<WarningText>)>,
) {
    let me = own.single().ok().and_then(|e| board.get(e));
    let health = me.map_or("-".to_owned(), |f| format!("{:.0}", f.health));
    let score = me.map_or(String::new(), |f| {
        format!("   kills {}  deaths {}", f.kills, f.deaths)
    });
    let weapon = loadout.weapon();
    let spec = weapon.and_then(|w| weapons.table.as_ref()?.get(w));
    let name = spec.map_or("-", |s| s.name.as_str());
    let magazine = spec.map_or(0, |s| s.magazine);
    let ammo = match (weapon, armory.as_deref()) {
        (Some(w), Some(a)) if a.reloading(w) => "reloading...".to_owned(),
        (Some(w), Some(a)) => format!("{}/{magazine}", a.ammo(w).unwrap_or(0)),
        _ => "-".to_owned(),
    };
    let kb = |s| graph.latest(s).unwrap_or(0.0) / 1000.0;
    let dt = time.delta_secs();
    if dt > 0.0 {
        *fps += (1.0 / dt - *fps) * (dt * 2.0).min(1.0);
    }
    let lines = [
        if clock.synced {
            format!(
                "ping {:.0} ms   jitter {:.0} ms   loss {:.1} %",
                clock.rtt * 1e3,
                clock.jitter * 1e3,
                clock.loss * 1e2
            )
        } else {
            "connecting...".to_owned()
        },
        format!("health {health}{score}"),
        format!("{name}  {ammo}"),
        format!(
            "hits: local {}  confirmed {}  headshots {}",
            hud.local_hits, hud.confirmed_hits, hud.headshots
        ),
        format!(
            "corrections {}   rejected shots {}{}",
            moves.corrections_received,
            hud.rejected,
            hud.last_rejection
                .map_or(String::new(), |r| format!(" (last: {r:?})"))
        ),
        format!(
            "up {:.1} kB/s   down {:.1} kB/s   {:.0} fps",
            kb(NetSeries::BytesUp),
            kb(NetSeries::BytesDown),
            *fps
        ),
    ];
    if let Ok(mut t) = text.single_mut() {
        t.0 = lines.join("\n");
    }
}

/// The high-ping warning, and above the rewind cap what it means for aiming.
fn warning(
    ping: Res<PingMonitor>,
    mut warning: Query<&mut Text, (With<WarningText>, Without<StatusText>)>,
) {
    if let Ok(mut t) = warning.single_mut() {
        t.0 = if ping.is_high() {
            format!(
                "HIGH PING{}",
                if ping.above_max_rewind_ping() {
                    ": shots rewound only to the cap, lead your targets"
                } else {
                    ""
                }
            )
        } else {
            String::new()
        };
    }
}

/// The centre line: the player is dead until respawned.
fn centre(
    board: Res<Scoreboard>,
    own: Query<Entity, With<AutonomousProxy>>,
    mut centre: Query<&mut Text, (With<CentreText>, Without<StatusText>, Without<WarningText>)>,
) {
    let me = own.single().ok().and_then(|e| board.get(e));
    if let Ok(mut t) = centre.single_mut() {
        t.0 = if me.is_some_and(|f| !f.alive) {
            "you are dead: back in a moment".to_owned()
        } else {
            String::new()
        };
    }
}

fn marker(hud: Res<Hud>, mut text: Query<(&mut Text, &mut TextColor), With<Marker>>) {
    let Ok((mut t, mut colour)) = text.single_mut() else {
        return;
    };
    match hud.latest_marker() {
        Some(m) => {
            t.0 = "X".to_owned();
            colour.0 = match m.kind {
                MarkerKind::Local => Color::WHITE,
                MarkerKind::Confirmed => Color::srgb(1.0, 0.25, 0.2),
                MarkerKind::Headshot => Color::srgb(1.0, 0.85, 0.1),
            };
        }
        None => t.0.clear(),
    }
}

fn feed(
    time: Res<Time<Real>>,
    feed: Res<KillFeed>,
    weapons: Res<Weapons>,
    mut text: Query<&mut Text, With<FeedText>>,
) {
    let Ok(mut t) = text.single_mut() else {
        return;
    };
    let now = time.elapsed_secs_f64();
    t.0 = feed
        .entries
        .iter()
        .filter(|(at, _)| now - at < 8.0)
        .map(|(_, k)| {
            let weapon = k
                .weapon
                .and_then(|w| weapons.table.as_ref()?.get(w))
                .map_or("gun", |s| s.name.as_str());
            format!(
                "{} [{}{}] {}",
                k.killer_name,
                weapon,
                if k.headshot { ", head" } else { "" },
                k.victim_name
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
}

fn help(keys: Res<ButtonInput<KeyCode>>, mut text: Query<&mut Visibility, With<HelpText>>) {
    if keys.just_pressed(KeyCode::KeyH) {
        for mut v in &mut text {
            *v = if *v == Visibility::Hidden {
                Visibility::Inherited
            } else {
                Visibility::Hidden
            };
        }
    }
}
