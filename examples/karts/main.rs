//! Karts (seed 001): your kart and bot karts on a walled loop, on the same movement prediction
//! and proxy smoothing plugins as the shooter, with the same net panel. Drag the update rate
//! down to 1 Hz and switch the smoothing between Snap, Linear, Hermite and Extrapolate to see
//! what each does with sparse states.
//!
//! ```text
//! cargo run --release --features windowed --example karts -- [--bots N] [--rtt MS] [--jitter MS] [--loss PERCENT] [--rate HZ] [--ghosts] [--autopilot] [--window WxH] [--seconds S]
//! ```
//!
//! `--rate` sets the proxies' update rate (1–60 Hz), `--ghosts` draws each bot's newest server
//! state beside it, `--autopilot` drives your kart round the track by itself.
//!
//! | input | action |
//! | --- | --- |
//! | W / S | throttle / reverse |
//! | A / D | steer left / right |
//! | F1 | net panel (drag its sliders, click its switches) |
//! | F2 | net graph |
//!
//! A listen server and your client in one process, connected through lightyear with the link
//! conditioner between them; the panel sets both ends.

#[path = "../common/cli.rs"]
mod cli;
#[path = "../common/panel_ui.rs"]
mod panel_ui;
#[path = "../common/scene.rs"]
mod scene;
#[path = "../common/window.rs"]
mod window;

use bevy::prelude::*;
use bevy::transform::TransformSystems;
use leafwing_input_manager::prelude::*;
use unlag::movement::{
    KartInput, KartMovement, MovementPredictionSystems, MovementState, MovementStats, NextMove,
};
use unlag::net::{AutonomousProxy, NetClock};
use unlag::smoothing::RenderedPose;
use unlag_demo::karts::{KartBot, KartPlugins};
use unlag_demo::{NetPanel, session};

struct Options {
    bots: usize,
    panel: NetPanel,
    seconds: Option<f64>,
    autopilot: bool,
    window: (u32, u32),
}

fn parse() -> Result<Options, String> {
    let mut o = Options {
        bots: 3,
        panel: NetPanel::default(),
        seconds: None,
        autopilot: false,
        window: (1280, 720),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut number = |name: &str| cli::number(&mut args, name);
        match flag.as_str() {
            "--bots" => o.bots = number("--bots")? as usize,
            "--rtt" => o.panel.rtt_ms = number("--rtt")?,
            "--jitter" => o.panel.jitter_ms = number("--jitter")?,
            "--loss" => o.panel.loss_percent = number("--loss")?,
            "--rate" => o.panel.update_rate_hz = number("--rate")? as f32,
            "--seconds" => o.seconds = Some(number("--seconds")?),
            "--autopilot" => o.autopilot = true,
            "--ghosts" => o.panel.ghosts = true,
            "--window" => o.window = window::window_size(&mut args, "--window")?,
            "-h" | "--help" => {
                return Err("usage: karts [--bots N] [--rtt MS] [--jitter MS] [--loss PERCENT] [--rate HZ] [--ghosts] [--autopilot] [--window WxH] [--seconds S]".into());
            }
            other => return Err(format!("unknown option {other} (try --help)")),
        }
    }
    o.panel.validate().map_err(|e| e.to_string())?;
    Ok(o)
}

fn main() -> AppExit {
    let options = cli::options_or_exit("karts", parse());
    let plugins = KartPlugins { bots: options.bots };
    window::require_display_or_exit("karts");
    window::explain_startup_failures("karts");
    let mut server = session::server_app();
    server.add_plugins(plugins.clone());
    let mut app = App::new();
    app.add_plugins(window::window_plugins("unlag — karts", options.window));
    session::client_net(&mut app, 13);
    app.add_plugins(plugins)
        .add_plugins(InputManagerPlugin::<KartAction>::default())
        .add_plugins(unlag::diagnostics::NetGraphUiPlugin::default())
        .add_plugins(panel_ui::PanelUiPlugin { shots: false })
        .add_plugins(scene::ScenePlugin)
        .insert_resource(options.panel.clone())
        .insert_resource(Autopilot(options.autopilot.then_some(KartBot {
            next: 1,
            throttle: 10,
        })))
        .add_systems(Startup, setup)
        .add_systems(Update, (dress_karts, status))
        .add_systems(
            FixedUpdate,
            drive.before(MovementPredictionSystems::Simulate),
        )
        .add_systems(
            PostUpdate,
            chase
                .after(MovementPredictionSystems::Place)
                .after(unlag::smoothing::ProxySmoothingSystems::Place)
                .before(TransformSystems::Propagate),
        );
    unlag_demo::session::quit_after(&mut app, options.seconds);
    session::host(&mut app, server);
    app.run()
}

/// Driving a kart.
#[derive(Actionlike, Clone, Copy, Debug, PartialEq, Eq, Hash, Reflect)]
enum KartAction {
    /// W forward, S reverse.
    #[actionlike(Axis)]
    Throttle,
    /// D right, A left.
    #[actionlike(Axis)]
    Steer,
}

#[derive(Component)]
struct ChaseCamera;

#[derive(Component)]
struct StatusText;

fn setup(mut commands: Commands) {
    commands.spawn((
        ChaseCamera,
        Camera3d::default(),
        Transform::from_xyz(0.0, 40.0, 60.0).looking_at(Vec3::ZERO, Vec3::Y),
    ));
    commands.spawn((
        InputMap::default()
            .with_axis(KartAction::Throttle, VirtualAxis::ws())
            .with_axis(KartAction::Steer, VirtualAxis::ad()),
        ActionState::<KartAction>::default(),
    ));
    commands.spawn((
        StatusText,
        Text::new(""),
        TextFont {
            font_size: FontSize::Px(15.0),
            ..default()
        },
        Node {
            position_type: PositionType::Absolute,
            left: Val::Px(10.0),
            top: Val::Px(10.0),
            padding: UiRect::all(Val::Px(8.0)),
            ..default()
        },
        BackgroundColor(Color::srgba(0.0, 0.0, 0.0, 0.5)),
    ));
}

/// `--autopilot`: drives your kart like a bot.
#[derive(Resource)]
struct Autopilot(Option<KartBot>);

/// Before each tick: the player's throttle and steering (or the autopilot's) become its kart's
/// next move.
fn drive(
    mut commands: Commands,
    actions: Single<&ActionState<KartAction>>,
    mut autopilot: ResMut<Autopilot>,
    karts: Query<
        (
            Entity,
            &MovementState<KartMovement>,
            Option<&mut NextMove<KartMovement>>,
        ),
        With<AutonomousProxy>,
    >,
) {
    let tenths = |v: f32| (v.clamp(-1.0, 1.0) * 10.0).round() as i8;
    for (entity, state, next) in karts {
        let input = match autopilot.0.as_mut() {
            Some(bot) => bot.next_input(&state.0),
            None => KartInput {
                throttle: tenths(actions.value(&KartAction::Throttle)),
                // Left is positive.
                steering: tenths(-actions.value(&KartAction::Steer)),
            },
        };
        NextMove::write(&mut commands, entity, next, input);
    }
}

/// Every kart gets a body and a nose (to show its heading); yours is blue.
fn dress_karts(
    mut commands: Commands,
    mut meshes: ResMut<Assets<Mesh>>,
    mut materials: ResMut<Assets<StandardMaterial>>,
    model: Res<KartMovement>,
    karts: Query<
        (Entity, Has<AutonomousProxy>),
        (With<MovementState<KartMovement>>, Without<Mesh3d>),
    >,
    proxies: Query<Entity, (With<RenderedPose>, Without<Mesh3d>)>,
) {
    let body = meshes.add(Cuboid::from_size(model.half_extents * 2.0));
    let nose = meshes.add(Cuboid::new(0.6, 0.3, 0.6));
    let mut dress = |entity: Entity, own: bool| {
        let colour = if own {
            Color::srgb(0.2, 0.45, 1.0)
        } else {
            Color::srgb(0.9, 0.3, 0.2)
        };
        commands
            .entity(entity)
            .insert((
                Mesh3d(body.clone()),
                MeshMaterial3d(materials.add(StandardMaterial::from_color(colour))),
            ))
            .with_children(|k| {
                k.spawn((
                    Mesh3d(nose.clone()),
                    MeshMaterial3d(materials.add(StandardMaterial::from_color(Color::WHITE))),
                    Transform::from_xyz(0.0, 0.45, -model.half_extents.z + 0.3),
                ));
            });
    };
    for (entity, own) in &karts {
        dress(entity, own);
    }
    for entity in &proxies {
        if !karts.contains(entity) {
            dress(entity, false);
        }
    }
}

/// The camera behind and above your kart.
fn chase(
    time: Res<Time>,
    own: Query<&Transform, (With<AutonomousProxy>, Without<ChaseCamera>)>,
    mut camera: Query<&mut Transform, With<ChaseCamera>>,
) {
    let (Ok(kart), Ok(mut cam)) = (own.single(), camera.single_mut()) else {
        return;
    };
    let want = kart.translation + kart.rotation * Vec3::new(0.0, 4.5, 10.0);
    let k = (time.delta_secs() * 6.0).min(1.0);
    cam.translation = cam.translation.lerp(want, k);
    let target = kart.translation + kart.rotation * Vec3::new(0.0, 0.0, -6.0);
    cam.look_at(target, Vec3::Y);
}

fn status(
    clock: Res<NetClock>,
    panel: Res<NetPanel>,
    moves: Res<MovementStats>,
    own: Query<&MovementState<KartMovement>, With<AutonomousProxy>>,
    mut text: Single<&mut Text, With<StatusText>>,
) {
    let speed = own.single().map_or(0.0, |s| s.0.velocity.length());
    text.0 = format!(
        "ping {:.0} ms   speed {:.0} km/h\nproxies: {:?} at {:.0} Hz\ncorrections {}\nW/S throttle  A/D steer  F1 panel  F2 net graph",
        clock.rtt * 1e3,
        speed * 3.6,
        panel.smoothing,
        panel.update_rate_hz,
        moves.corrections_received,
    );
}
