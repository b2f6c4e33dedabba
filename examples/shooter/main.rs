//! The shooter: a first-person arena with bots that run, hop, crouch, dash and shoot back, on
//! every `unlag` plugin, with a net panel to add latency, jitter and loss and to switch each
//! technique off and feel what it saves you from.
//!
//! ```text
//! cargo run --release --features windowed --example shooter              # listen server + you
//! cargo run --release --example server                                    # dedicated, headless
//! cargo run --release --features windowed --example shooter -- --client 127.0.0.1:5888
//! ```
//!
//! | option | meaning |
//! | --- | --- |
//! | `--server [ADDR]` | headless dedicated server over UDP (else `--port`, `$UNLAG_SERVER_ADDR`, `$UNLAG_SERVER_PORT`, or `0.0.0.0:5888`), no window |
//! | `--client ADDR` | join a dedicated server over UDP |
//! | `--bots N` | bots in the arena (server or listen; default 6) |
//! | `--rtt MS`, `--jitter MS`, `--loss PERCENT` | the net panel's starting conditions |
//! | `--rewind-gizmos` | start with the rewind gizmos on |
//! | `--net-graph` | start with the net graph shown |
//! | `--autopilot` | you aim at the nearest bot and fire by yourself (demos, screenshots) |
//! | `--window WxH` | window size in pixels (default 1280x720) |
//! | `--stats S` | a dedicated server prints a `server stats:` line every S seconds (default 10): memory, frame cost, links, refusals |
//! | `--multi-threaded` | a dedicated server runs its systems on Bevy's multi-threaded executor (default: one after another, faster on a 2-core machine) |
//! | `--seconds S` | quit after S seconds, printing how the match felt (shots seen as hits, confirmed, judged misses and refused by reason, corrections, proxy frames held, frames per second) |
//!
//! Controls (leafwing-input-manager):
//!
//! | input | action |
//! | --- | --- |
//! | click in the view | capture the mouse and play |
//! | W A S D, mouse | move, look |
//! | Space, left Ctrl, left Shift | jump, crouch, dash |
//! | left / right mouse button | fire / aim |
//! | R | reload |
//! | 1, 2, 3 | rifle, shotgun, launcher |
//! | F1 | net panel (drag its sliders, click its switches) |
//! | F2 | net graph |
//! | H | this help |
//! | Esc | free the mouse |
//!
//! In the listen mode the panel sets both ends (your link's latency, jitter and loss, the
//! server's update rate and rewinding); a client of a dedicated server sets its own link,
//! prediction, smoothing and gizmos only.

#[path = "../common/cli.rs"]
mod cli;
mod hud;
#[path = "../common/panel_ui.rs"]
mod panel_ui;
#[path = "../common/scene.rs"]
mod scene;
mod view;
#[path = "../common/window.rs"]
mod window;

use bevy::prelude::*;
use bevy::window::{CursorGrabMode, CursorOptions, PrimaryWindow};
use core::net::SocketAddr;
use leafwing_input_manager::prelude::*;
use unlag::combat::{Armory, CombatSystems, FireCommand, ReloadCommand, Weapons};
use unlag::movement::{
    CharacterAction, CharacterInputPlugin, CharacterMovement, LookAngles, MovementState,
};
use unlag::net::AutonomousProxy;
use unlag_demo::cli::ServerFlags;
use unlag_demo::game::{EYE_HEIGHT, Scoreboard, ShooterPlugins, ShooterSettings, eye_height};
use unlag_demo::{NetPanel, key, session};

/// How the example runs.
#[derive(Clone, Debug)]
enum Mode {
    Listen,
    /// `--server [ADDR]`: the address, when given (else `ServerFlags::addr`'s default).
    Server(Option<SocketAddr>),
    Client(SocketAddr),
}

#[derive(Resource, Clone, Debug)]
struct Options {
    mode: Mode,
    bots: usize,
    panel: NetPanel,
    autopilot: bool,
    seconds: Option<f64>,
    window: (u32, u32),
    net_graph: bool,
    /// `--key-file`, `--stats`, `--multi-threaded`: the dedicated server's (`--server`)
    /// options; `--client` reads its key from them too.
    server: ServerFlags,
}

fn parse() -> Result<Options, String> {
    let mut o = Options {
        mode: Mode::Listen,
        bots: ShooterSettings::default().bots,
        panel: NetPanel::default(),
        autopilot: false,
        seconds: None,
        window: (1280, 720),
        net_graph: false,
        server: ServerFlags::default(),
    };
    let mut args = std::env::args().skip(1).peekable();
    while let Some(flag) = args.next() {
        if o.server.take(&flag, &mut args)? {
            continue;
        }
        let mut number = |name: &str| cli::number(&mut args, name);
        match flag.as_str() {
            "--rtt" => o.panel.rtt_ms = number("--rtt")?,
            "--jitter" => o.panel.jitter_ms = number("--jitter")?,
            "--loss" => o.panel.loss_percent = number("--loss")?,
            "--bots" => o.bots = number("--bots")? as usize,
            "--seconds" => o.seconds = Some(number("--seconds")?),
            "--autopilot" => o.autopilot = true,
            "--window" => o.window = window::window_size(&mut args, "--window")?,
            "--rewind-gizmos" => o.panel.rewind_gizmos = true,
            "--net-graph" => o.net_graph = true,
            "--server" => {
                let given = match args.peek() {
                    Some(a) if !a.starts_with("--") => {
                        let addr = args.next().unwrap_or_default();
                        Some(
                            addr.parse()
                                .map_err(|e| format!("--server: {addr:?}: {e}"))?,
                        )
                    }
                    _ => None,
                };
                o.mode = Mode::Server(given);
            }
            "--client" => {
                let addr = args.next().ok_or("--client needs an address")?;
                o.mode = Mode::Client(
                    addr.parse()
                        .map_err(|e| format!("--client: {addr:?}: {e}"))?,
                );
            }
            "-h" | "--help" => {
                return Err(format!(
                    "usage: shooter [--server [ADDR] | --client ADDR] {} [--bots N] [--rtt MS] [--jitter MS] [--loss PERCENT] [--rewind-gizmos] [--net-graph] [--autopilot] [--window WxH] [--seconds S]",
                    ServerFlags::USAGE
                ));
            }
            other => return Err(format!("unknown option {other} (try --help)")),
        }
    }
    o.panel.validate().map_err(|e| e.to_string())?;
    Ok(o)
}

fn main() -> AppExit {
    let options = cli::options_or_exit("shooter", parse());
    let plugins = ShooterPlugins {
        settings: ShooterSettings {
            bots: options.bots,
            ..default()
        },
    };
    match options.mode.clone() {
        Mode::Server(given) => {
            let addr = cli::options_or_exit("shooter", options.server.addr(given));
            let key = server_key_or_exit(&options, addr);
            let mut server = session::dedicated_shooter(
                plugins.settings,
                options.panel.clone(),
                options.server.stats_every,
            );
            session::quit_after(&mut server, options.seconds);
            session::serve_udp(server, addr, key, options.server.multi_threaded)
        }
        Mode::Listen => {
            let mut server = session::server_app();
            server.add_plugins(plugins.clone());
            let mut app = player_app(&options, plugins);
            session::host(&mut app, server);
            app.run()
        }
        Mode::Client(addr) => {
            let key = server_key_or_exit(&options, addr);
            let mut app = player_app(&options, plugins);
            // A number no other client of the server picks: the clock and this process's id,
            // mixed (two clients started in the same nanosecond on one machine still differ).
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(7, |d| d.as_nanos() as u64);
            let id = unlag::core::SplitMix64::new(nanos ^ (u64::from(std::process::id()) << 40))
                .next_u64();
            session::join_udp(&mut app, addr, id, &key);
            app.run()
        }
    }
}

/// The netcode key for a server on (or a client of) `addr` (see [`ServerFlags::key`]), or one
/// line and exit code 2.
fn server_key_or_exit(options: &Options, addr: SocketAddr) -> key::ServerKey {
    cli::options_or_exit("shooter", options.server.key(addr))
}

/// The player's windowed App.
fn player_app(options: &Options, plugins: ShooterPlugins) -> App {
    window::require_display_or_exit("shooter");
    window::explain_startup_failures("shooter");
    let mut app = App::new();
    app.add_plugins(window::window_plugins("unlag — shooter", options.window));
    session::client_net(&mut app, 11);
    app.add_plugins(plugins)
        .add_plugins(CharacterInputPlugin::default())
        .add_plugins(InputManagerPlugin::<ShooterAction>::default())
        .add_plugins(unlag::diagnostics::NetGraphUiPlugin {
            visible: options.net_graph,
            ..default()
        })
        .add_plugins(panel_ui::PanelUiPlugin { shots: true })
        .add_plugins((scene::ScenePlugin, view::ViewPlugin, hud::HudUiPlugin))
        .insert_resource(options.panel.clone())
        .insert_resource(options.clone())
        .init_resource::<Loadout>()
        .init_resource::<Autopilot>()
        .add_systems(Startup, spawn_controls)
        .add_systems(
            Update,
            (
                grab_cursor,
                choose_weapon,
                autopilot.run_if(|o: Res<Options>| o.autopilot),
                fire,
            )
                .chain()
                .before(CombatSystems::Client),
        );
    session::quit_after(&mut app, options.seconds);
    app.add_systems(Last, print_summary);
    app
}

/// At exit (`--seconds`, or the window closed): one line of how the match felt to this player.
fn print_summary(
    mut exits: MessageReader<AppExit>,
    mut printed: Local<bool>,
    hud: Res<unlag_demo::hud::Hud>,
    moves: Option<Res<unlag::movement::MovementStats>>,
    smoothing: Option<Res<unlag::smoothing::SmoothingStats>>,
    frames: Res<bevy::diagnostic::FrameCount>,
    time: Res<Time<Real>>,
) {
    if exits.read().next().is_none() || *printed {
        return;
    }
    *printed = true;
    let refused = if hud.refusals.is_empty() {
        "none".to_owned()
    } else {
        hud.refusals
            .iter()
            .map(|(reason, n)| format!("{reason:?} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (held, drawn) = smoothing.map_or((0, 0), |s| {
        (s.held_frames + s.extrapolated_frames, s.frames)
    });
    println!(
        "match summary: {} shots, {} seen as hits, {} of them confirmed, {} judged misses and \
         {} fired after dying ({} confirmed in all), {} refused ({refused}), {} posthumous; {} \
         corrections; {held} of {drawn} proxy frames held or extrapolated; {:.1} frames per \
         second over {:.1} s",
        hud.shots,
        hud.local_hits,
        hud.seen_confirmed,
        hud.seen_missed,
        hud.seen_posthumous,
        hud.confirmed_hits,
        hud.rejected,
        hud.posthumous,
        moves.map_or(0, |m| m.corrections_received),
        f64::from(frames.0) / time.elapsed_secs_f64().max(1e-9),
        time.elapsed_secs_f64(),
    );
}

/// The shooter's own actions (movement's are [`CharacterAction`]).
#[derive(Actionlike, Clone, Copy, Debug, PartialEq, Eq, Hash, Reflect)]
enum ShooterAction {
    Fire,
    Aim,
    Reload,
    Rifle,
    Shotgun,
    Launcher,
    FreeCursor,
}

fn spawn_controls(mut commands: Commands) {
    commands.spawn((
        InputMap::default()
            .with(ShooterAction::Fire, MouseButton::Left)
            .with(ShooterAction::Aim, MouseButton::Right)
            .with(ShooterAction::Reload, KeyCode::KeyR)
            .with(ShooterAction::Rifle, KeyCode::Digit1)
            .with(ShooterAction::Shotgun, KeyCode::Digit2)
            .with(ShooterAction::Launcher, KeyCode::Digit3)
            .with(ShooterAction::FreeCursor, KeyCode::Escape),
        ActionState::<ShooterAction>::default(),
    ));
}

/// The weapon in hand, and the table's ids once loaded.
#[derive(Resource, Default, Debug)]
struct Loadout {
    /// rifle, shotgun, launcher.
    ids: Option<[u8; 3]>,
    current: usize,
}

impl Loadout {
    fn weapon(&self) -> Option<u8> {
        self.ids.map(|ids| ids[self.current])
    }
}

/// Whether the mouse is captured (playing) or free (using the panel).
fn captured(cursor: &CursorOptions) -> bool {
    cursor.grab_mode != CursorGrabMode::None
}

fn grab_cursor(
    actions: Single<&ActionState<ShooterAction>>,
    mouse: Res<ButtonInput<MouseButton>>,
    mut cursor: Single<&mut CursorOptions, With<PrimaryWindow>>,
    widgets: Query<&Interaction, Or<(With<panel_ui::Slider>, With<panel_ui::Switch>)>>,
    mut looks: Query<&mut ActionState<CharacterAction>, With<AutonomousProxy>>,
) {
    if actions.just_pressed(&ShooterAction::FreeCursor) {
        cursor.grab_mode = CursorGrabMode::None;
        cursor.visible = true;
    } else if mouse.just_pressed(MouseButton::Left)
        && !captured(&cursor)
        // A click on the panel's widgets is not a shot.
        && widgets.iter().all(|i| *i == Interaction::None)
    {
        cursor.grab_mode = CursorGrabMode::Locked;
        cursor.visible = false;
    }
    // Mouse look only while captured.
    for mut state in &mut looks {
        if captured(&cursor) {
            state.enable_action(&CharacterAction::Look);
        } else {
            state.disable_action(&CharacterAction::Look);
        }
    }
}

fn choose_weapon(
    actions: Single<&ActionState<ShooterAction>>,
    weapons: Res<Weapons>,
    mut loadout: ResMut<Loadout>,
) {
    if loadout.ids.is_none()
        && let Some(table) = &weapons.table
        && let (Some(a), Some(b), Some(c)) =
            (table.id("rifle"), table.id("shotgun"), table.id("launcher"))
    {
        loadout.ids = Some([a, b, c]);
    }
    for (action, k) in [
        (ShooterAction::Rifle, 0),
        (ShooterAction::Shotgun, 1),
        (ShooterAction::Launcher, 2),
    ] {
        if actions.just_pressed(&action) {
            loadout.current = k;
        }
    }
}

/// Where the local player's eyes are and where they look, from its drawn character.
fn eye(
    transform: &Transform,
    state: &MovementState<CharacterMovement>,
    look: &LookAngles,
) -> (Vec3, Vec3) {
    let height = eye_height(&state.0);
    let rotation = Quat::from_euler(EulerRot::YXZ, look.yaw, look.pitch, 0.0);
    (
        transform.translation + Vec3::Y * height,
        rotation * Vec3::NEG_Z,
    )
}

#[allow(clippy::too_many_arguments)]
fn fire(
    actions: Single<&ActionState<ShooterAction>>,
    options: Res<Options>,
    cursor: Single<&CursorOptions, With<PrimaryWindow>>,
    loadout: Res<Loadout>,
    armory: Option<ResMut<Armory>>,
    board: Res<Scoreboard>,
    own: Query<
        (
            Entity,
            &Transform,
            &MovementState<CharacterMovement>,
            &LookAngles,
        ),
        With<AutonomousProxy>,
    >,
    mut autopilot: ResMut<Autopilot>,
    mut shots: MessageWriter<FireCommand>,
    mut reloads: MessageWriter<ReloadCommand>,
) {
    let (Some(weapon), Some(mut armory), Ok((entity, transform, state, look))) =
        (loadout.weapon(), armory, own.single())
    else {
        return;
    };
    let alive = board.get(entity).is_none_or(|f| f.alive);
    let playing = captured(&cursor) || options.autopilot;
    armory.aiming = playing && actions.pressed(&ShooterAction::Aim);
    if !alive || !playing {
        return;
    }
    let empty = armory.ammo(weapon) == Some(0);
    if actions.just_pressed(&ShooterAction::Reload) || (empty && !armory.reloading(weapon)) {
        reloads.write(ReloadCommand { weapon });
    }
    let trigger = actions.pressed(&ShooterAction::Fire) || std::mem::take(&mut autopilot.trigger);
    if trigger && !empty {
        let (origin, aim) = eye(transform, state, look);
        shots.write(FireCommand {
            weapon,
            origin,
            aim,
        });
    }
}

/// `--autopilot`: whether to pull the trigger this frame.
#[derive(Resource, Default)]
struct Autopilot {
    trigger: bool,
}

/// `--autopilot`: turns towards the nearest living bot's chest as drawn and fires when on it.
fn autopilot(
    time: Res<Time>,
    board: Res<Scoreboard>,
    mut own: Query<(&Transform, &mut LookAngles), With<AutonomousProxy>>,
    boxes: Query<(&unlag::rewind::HitBox, &GlobalTransform, &ChildOf)>,
    mut pilot: ResMut<Autopilot>,
) {
    let Ok((me, mut look)) = own.single_mut() else {
        return;
    };
    let eye = me.translation + Vec3::Y * EYE_HEIGHT;
    let target = boxes
        .iter()
        .filter(|(b, _, parent)| {
            b.bone == "torso" && board.get(parent.parent()).is_some_and(|f| f.alive)
        })
        .map(|(_, g, _)| g.translation())
        .min_by(|a, b| a.distance_squared(eye).total_cmp(&b.distance_squared(eye)));
    let Some(target) = target else {
        return;
    };
    let to = (target - eye).normalize_or(Vec3::NEG_Z);
    let yaw = f32::atan2(-to.x, -to.z);
    let pitch = to.y.clamp(-1.0, 1.0).asin();
    // Turn at up to 4 rad/s, then fire when within a degree.
    let step = 4.0 * time.delta_secs();
    let dyaw = (yaw - look.yaw + core::f32::consts::PI).rem_euclid(core::f32::consts::TAU)
        - core::f32::consts::PI;
    look.yaw = (look.yaw + dyaw.clamp(-step, step)).rem_euclid(core::f32::consts::TAU);
    look.pitch += (pitch - look.pitch).clamp(-step, step);
    pilot.trigger = dyaw.abs() < 0.02 && (pitch - look.pitch).abs() < 0.02;
}
