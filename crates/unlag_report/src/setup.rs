//! The match: a testbed with every plugin, the arena, one character per scripted client and the
//! server's bots, played through the warm-up with the scripts set running.

use crate::arena::{
    ClientScript, HUMANOID, add_client_script, bot, drive_bots, give_proxies_boxes, spawn_map,
    spawn_point,
};
use crate::measure::{Ledger, keep};
use crate::stopwatch::{Stopwatch, add_stopwatch};
use crate::{OptionError, Packing, ReportOptions, cheat, compare};
use bevy::prelude::*;
use core::time::Duration;
use lightyear::prelude::*;
use serde::Serialize;
use unlag::CharacterProxyPlugin;
use unlag::combat::{CombatPlugin, CombatSettings, CombatStats, Health, Weapons};
use unlag::core::SplitMix64;
use unlag::movement::{
    CharacterMovement, CharacterState, MovementPredictionPlugin, MovementSettings, MovementState,
    MovementStats,
};
use unlag::net::{AckDelay, ServerAckDelay};
use unlag::rewind::{RewindPlugin, UseHitBoxLayout};
use unlag::smoothing::{ProxyFlags, ProxySmoothingPlugin, SmoothedProxy};
use unlag_demo::asset_plugin;
use unlag_testbed::{RapierFixedPlugin, Testbed, TestbedConfig};

/// Seconds of play before the measured span: connection, loading, the first states.
const WARM_UP: f64 = 4.0;

/// What happened before the measured span, from the characters' spawn to its start: the
/// measured figures start from zero, but an honest client must not be flagged or corrected
/// there either (a loss burst at the start holds the first moves back).
#[derive(Resource, Clone, Debug, Default, PartialEq, Serialize)]
pub struct WarmUpTally {
    /// Seconds of play with the characters spawned before the measured span.
    pub seconds: f64,
    /// Corrections each client received, per client.
    pub corrections: Vec<u64>,
    /// Speed hacks the server flagged.
    pub speed_hacks_flagged: u64,
    /// Moves or messages the server's movement checks rejected.
    pub movement_rejected: u64,
    /// Shots the server refused, every reason.
    pub shots_refused: u64,
}

/// How fast a match runs: frames per second of the server (and of the clients unless the
/// options pace them), and how often clients shoot.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pace {
    /// Frames per second of the server, and of the clients unless `--client-fps` sets theirs
    /// (the tick rate is 60 Hz).
    pub frame_rate_hz: f64,
    /// Seconds between two shots of one client (clients take turns: client `i` starts
    /// `7 × i / 240` s later in the cycle).
    pub fire_interval: f64,
}

impl Default for Pace {
    /// The report's pace: 240 fps, a shot every 0.15 s (6.7 shots/s per client).
    fn default() -> Self {
        Self {
            frame_rate_hz: 240.0,
            fire_interval: 0.15,
        }
    }
}

/// The match's threads as `options` ask. `--multi-threaded`: every client App on Bevy's
/// multi-threaded executor (as a game with Bevy's default features runs), and a dedicated
/// server too (a listen server steps in its host's frame, on one thread, as
/// `unlag_demo::session::host` runs it). `work_shares`: the server's per-client work in at
/// most that many shares (`unlag::net::WorkShares`).
pub(crate) fn threads(tb: &mut Testbed, options: &ReportOptions) {
    if options.multi_threaded {
        tb.run_clients_multi_threaded();
        if !options.listen {
            tb.run_server_multi_threaded();
        }
    }
    if let Some(shares) = options.work_shares {
        tb.server().insert_resource(unlag::net::WorkShares(shares));
    }
}

/// The hit-box layout every App of a match loaded before it started, held for the whole match.
#[derive(Resource)]
struct Preloaded(Handle<unlag::rewind::HitBoxLayout>);

/// Builds the match of `options` at `pace`, connects every client, spawns the characters and
/// bots, plays the warm-up and sets the scripts running: from the returned testbed's next step
/// on, the server's cost per tick is measured (see [`server_cost`](crate::server_cost)). Any number of clients
/// may be asked for here (the option's range is the report's).
pub fn start_match(options: &ReportOptions, pace: Pace) -> Result<Testbed, OptionError> {
    start_match_with(options, pace, |_| {})
}

/// The clients' acknowledgement delay with `--packing on` or `clients` (their
/// [`AckDelay`](unlag::net::AckDelay)), seconds; `off` sets 0 (the reliable channel keeps its
/// registered resend timing). The library's default.
pub const PACKED_ACK_DELAY: f64 = unlag::net::DEFAULT_ACK_DELAY;

/// The server's with `--packing on` ([`ServerAckDelay`](unlag::net::ServerAckDelay), on the
/// links it packs), seconds; `clients` and `off` set 0. The library's default.
pub const PACKED_SERVER_ACK_DELAY: f64 = unlag::net::DEFAULT_SERVER_ACK_DELAY;

/// [`start_match`], with `add` called once the match's plugins are in and before anything
/// runs: to add a game's own plugins and resources to the server and the clients.
pub fn start_match_with(
    options: &ReportOptions,
    pace: Pace,
    add: impl FnOnce(&mut Testbed),
) -> Result<Testbed, OptionError> {
    let conditions = options.conditions()?;
    let mut tb = Testbed::new(TestbedConfig {
        clients: options.clients,
        conditions,
        seed: options.seed,
        loss_burst: options.burst as f32,
        frame_rate_hz: pace.frame_rate_hz,
        client_pace: options.client_pace(),
        listen: options.listen,
        ..default()
    });
    tb.server().add_plugins(asset_plugin());
    for i in 0..options.clients {
        tb.client(i).add_plugins(asset_plugin());
    }
    tb.add_plugins(RapierFixedPlugin::default())
        .add_plugins(MovementPredictionPlugin::<CharacterMovement>::new(
            MovementSettings {
                playout: unlag::core::PlayoutSettings {
                    enabled: options.playout,
                    ..default()
                },
                ..default()
            },
        ))
        .add_plugins(ProxySmoothingPlugin {
            settings: options.smoothing_settings(),
            interest: options.interest_settings(),
        })
        .add_plugins(RewindPlugin::default())
        .add_plugins(CombatPlugin {
            settings: CombatSettings {
                weapons_path: Some(unlag_demo::game::WEAPONS.into()),
                // `--copies spread`: each as it falls due, as before they rode.
                copies_ride_below_loss: if options.copies_ride {
                    CombatSettings::default().copies_ride_below_loss
                } else {
                    0.0
                },
                ..default()
            },
        })
        .add_plugins(CharacterProxyPlugin);
    add(&mut tb);
    let server = match options.packing {
        Packing::On => PACKED_SERVER_ACK_DELAY,
        Packing::Clients | Packing::Off => 0.0,
    };
    let clients = match options.packing {
        Packing::On | Packing::Clients => PACKED_ACK_DELAY,
        Packing::Off => 0.0,
    };
    let (server, clients) = (ServerAckDelay(server), AckDelay(clients));
    tb.server().insert_resource(server);
    for i in 0..options.clients {
        tb.client(i).insert_resource(clients);
    }
    threads(&mut tb, options);
    tb.server().add_systems(FixedUpdate, drive_bots);
    add_stopwatch(tb.server());
    if options.compare_validation {
        tb.server()
            .init_resource::<unlag::combat::ShotLog>()
            .init_resource::<compare::Compared>()
            .add_systems(
                Update,
                compare::compare_validation.after(unlag::combat::CombatSystems::Server),
            );
    }
    tb.client(0).add_systems(Update, cheat::cheat);
    for i in 0..options.clients {
        add_client_script(tb.client(i));
        tb.client(i)
            .init_resource::<Ledger>()
            .add_systems(PreUpdate, give_proxies_boxes)
            .add_systems(Update, keep.after(unlag::combat::CombatSystems::Client));
    }
    spawn_map(tb.server_world_mut());
    for i in 0..options.clients {
        spawn_map(tb.client_world_mut(i));
    }
    // The hit-box layout is loaded on every App while the clients connect, and held: Bevy's
    // task pools have threads of their own, so an asset asked for mid-match would arrive after
    // as many frames as the reading took in wall-clock time, and the match would not repeat
    // to the bit. The weapon tables load from the first frame the same way.
    let preload = |world: &mut World| {
        let layout = world.resource::<AssetServer>().load(HUMANOID);
        world.insert_resource(Preloaded(layout));
    };
    // (After the first frame: the plugins register the layout's asset type as they finish.)
    tb.step();
    preload(tb.server_world_mut());
    for i in 0..options.clients {
        preload(tb.client_world_mut(i));
    }
    if !tb.run_until(Duration::from_secs(10), |tb| tb.all_synced()) {
        return Err(OptionError("the clients never connected".into()));
    }
    // (Loaded long before the clients are synced, a few hundred frames: this waits only on a
    // machine that reads a small file slower than that.)
    let loaded = |world: &World| {
        world
            .resource::<AssetServer>()
            .is_loaded_with_dependencies(&world.resource::<Preloaded>().0)
            && world.resource::<Weapons>().table.is_some()
    };
    let clients = options.clients;
    if !tb.run_until(Duration::from_secs(10), |tb| {
        loaded(tb.server_world()) && (0..clients).all(|i| loaded(tb.client_world(i)))
    }) {
        return Err(OptionError(format!(
            "the hit-box layout {HUMANOID} or the weapon table {} never loaded",
            unlag_demo::game::WEAPONS
        )));
    }
    // Characters: one per client, and the bots.
    let layout = tb.server_world().resource::<Preloaded>().0.clone();
    for i in 0..options.clients {
        let owner = tb.server_link(i).expect("connected");
        tb.server_world_mut().spawn((
            MovementState::<CharacterMovement>(CharacterState {
                feet: spawn_point(i, options.clients),
                ..default()
            }),
            UseHitBoxLayout(layout.clone()),
            Health::new(1e9),
            Replicate::to_clients(NetworkTarget::All),
            ControlledBy {
                owner,
                lifetime: Lifetime::default(),
            },
        ));
    }
    let mut rng = SplitMix64::new(options.seed);
    for k in 0..options.bots {
        tb.server_world_mut().spawn((
            bot(k, options.bots, &mut rng),
            Transform::default(),
            SmoothedProxy,
            ProxyFlags::default(),
            UseHitBoxLayout(layout.clone()),
            Health::new(1e9),
            Replicate::to_clients(NetworkTarget::All),
        ));
    }
    tb.run_for(Duration::from_secs_f64(WARM_UP));
    // The weapons, as the clients loaded them.
    let ids = {
        let weapons = tb.client_world(0).resource::<Weapons>();
        let table = weapons
            .table
            .as_ref()
            .ok_or_else(|| OptionError("assets/weapons.ron did not load".into()))?;
        [table.id("rifle"), table.id("shotgun"), table.id("launcher")]
    };
    let [Some(rifle), Some(shotgun), Some(launcher)] = ids else {
        return Err(OptionError(
            "assets/weapons.ron lacks a rifle, shotgun or launcher".into(),
        ));
    };
    // One weapon for every shot (`--weapon`), or the mix.
    let weapons = match options.weapon.as_deref() {
        Some("shotgun") => [shotgun; 3],
        Some("launcher") => [launcher; 3],
        Some(_) => [rifle; 3],
        None => [rifle, shotgun, launcher],
    };
    for i in 0..options.clients {
        let start = tb.client_world(i).resource::<Time>().elapsed_secs_f64();
        let turn = (i as f64 * 7.0 / 240.0) % pace.fire_interval;
        tb.client(i).insert_resource(ClientScript {
            rng: SplitMix64::new(options.seed.wrapping_mul(31).wrapping_add(i as u64)),
            next_shot: start + pace.fire_interval - turn,
            interval: pace.fire_interval,
            weapons,
            running: true,
            // A cheater sends shots of its own.
            shoots: !(i == 0 && options.cheat.is_some_and(|c| c.shoots())),
        });
    }
    if let Some(c) = options.cheat {
        tb.client(0).insert_resource(cheat::Cheater::new(c));
        cheat::start_movement_cheat(tb.client_world_mut(0), c);
        cheat::start_link_cheat(&mut tb, c);
    }
    // What the warm-up saw is kept (an honest client flagged or corrected at the start is as
    // punished as one flagged later), then everything is measured from here.
    let warm_up = WarmUpTally {
        seconds: WARM_UP,
        corrections: (0..options.clients)
            .map(|i| {
                tb.client_world(i)
                    .resource::<MovementStats>()
                    .corrections_received
            })
            .collect(),
        speed_hacks_flagged: tb
            .server_world()
            .resource::<MovementStats>()
            .speed_hacks_flagged,
        movement_rejected: tb
            .server_world()
            .resource::<MovementStats>()
            .rejected_total(),
        shots_refused: tb.server_world().resource::<CombatStats>().rejected_total(),
    };
    tb.server().insert_resource(warm_up);
    tb.reset_measures();
    *tb.server_world_mut().resource_mut::<CombatStats>() = default();
    if options.compare_validation {
        *tb.server_world_mut().resource_mut::<compare::Compared>() = default();
    }
    *tb.server_world_mut().resource_mut::<MovementStats>() = default();
    *tb.server_world_mut()
        .resource_mut::<unlag::smoothing::SmoothingStats>() = default();
    tb.server_world_mut().resource_mut::<Stopwatch>().measuring = true;
    for i in 0..options.clients {
        *tb.client_world_mut(i).resource_mut::<MovementStats>() = default();
        *tb.client_world_mut(i).resource_mut::<Ledger>() = default();
    }
    Ok(tb)
}
