//! Combat (seeds 000, 003): weapons whose shots feel instant to the shooter, are judged by the
//! server against what the shooter saw, and cannot be faked.
//!
//! See [`CombatPlugin`]. The data flow of a shot:
//!
//! 1. **Client**: the game writes a [`FireCommand`] (weapon, eye, aim). If the predicted ammo
//!    ([`Armory`]) allows, the client rolls the pellets from the shot's seed, traces them at once
//!    against the proxies' hit boxes as drawn, reports the predicted hits as a [`LocalFire`]
//!    message for the game's effects, and sends a [`FireRequest`] with the view time and, per
//!    target hit, what it had on screen ([`WireClaim`]: state pair and blend). The request
//!    is unreliable and sent up to [`FIRE_COPIES`] times: at once, then on later frames
//!    spread over the copy age the server allows (every frame at 60 frames/s or slower; a copy
//!    that would be older than that is not sent). The server judges one copy, normally the
//!    first to arrive, and drops the others as duplicates.
//! 2. **Server**: the request is checked (weapon, fire index, fire rate, ammo, pellet count and
//!    spread, origin, view time, claims, targets); a refusal is counted and logged with its
//!    [`Rejection`]. An accepted shot is judged with
//!    [`RewindQuery::rays_as_seen`](unlag_rewind::RewindQuery::rays_as_seen) — the targets
//!    rebuilt exactly as the shooter saw them; above the rewind cap at the capped rewind,
//!    where the shooter traced and claimed too ([`CombatSettings::rewind_shortfall`]);
//!    against current poses when rewinding is off; damage comes from the server's own [`WeaponTable`], summed
//!    per target; [`Health`] drops and [`Damaged`] / [`Killed`] messages go to the game. The
//!    shooter gets a [`FireResult`], everyone else the shot in a [`CosmeticFires`]
//!    batch.
//! 3. **Client**: the result settles the predicted ammo and comes out as a [`ShotConfirmed`]
//!    message (server-confirmed hit markers).
//!
//! Projectile weapons (seed 003) take the same path up to the server's checks; then the client
//! draws a fake [`ClientProjectile`] at once, the server launches a real [`Projectile`]
//! advanced by the prediction time, every client draws it from one [`ProjectileLaunched`]
//! (the shooter's fake giving way to it on the same path and clock, everyone else caught up by
//! their own prediction time), its flight is swept against the hit boxes as the shooter saw
//! them, and its end ([`ProjectileImpact`], direct and splash damage) comes out as a
//! [`ProjectileExploded`] message on every client. See the `projectile` module's notes on the
//! times involved.

mod client;
mod projectile;
mod protocol;
mod server;
mod weapons;

pub use client::{
    Armory, FIRE_COPIES, FireCommand, LocalFire, LocalHit, ProxyHealth, ReloadCommand, RemoteFire,
    ShotConfirmed,
};
pub use projectile::{ClientProjectile, OwnProjectiles, Projectile, ProjectileExploded};
pub use protocol::{
    COSMETIC_BATCH, ConfirmedHit, CosmeticFire, CosmeticFires, FireRequest, FireResult,
    ProjectileImpact, ProjectileLaunched, Rejection, ReloadDone, ReloadRequest, WireClaim,
};
pub use server::{
    CombatStats, Damaged, Health, Killed, LoggedShot, ServerArmory, ShotJudge, ShotLog,
    ShotVerdict, TargetHit, shot_directions,
};
pub use unlag_core::fake_projectile_hold;
pub use weapons::{WeaponKind, WeaponSpec, WeaponTable, WeaponTableError, WeaponTableLoader};

use bevy::ecs::schedule::common_conditions::any_with_component;
use bevy::prelude::*;
use lightyear::prelude::server::Server;
use lightyear::prelude::*;
use unlag_core::Fields;
use unlag_net::{
    NetDirection, NetMessageAppExt, NetSystems, SettingsError, Validate, ValidatedSettingsAppExt,
};

/// Settings of [`CombatPlugin`] (a resource, the same on both sides).
#[derive(Resource, Clone, Debug, Reflect)]
pub struct CombatSettings {
    /// Asset path of the weapon table (default `weapons.ron`); `None` to insert a
    /// [`Weapons`] resource by hand.
    pub weapons_path: Option<String>,
    /// Round-trip time beyond which the server rewinds no further, seconds (default 0.4: a
    /// shooter at 250 ms hits what it sees; Unreal Tournament stops at 0.16, Overwatch's cap
    /// is 0.25 one way). A client above it is compensated as if at the cap: its shots are
    /// judged [`rewind_shortfall`](Self::rewind_shortfall) after what it drew, and it traces
    /// them there too, so it leads its targets by that much and its hit markers still promise
    /// only what the server grants. Copied into the client's
    /// [`PingMonitor`](unlag_net::PingMonitor), which tells the player.
    pub max_rewind_ping: f64,
    /// Whether the server rewinds at all (default true). False judges every shot and projectile
    /// against current poses, as a server without lag compensation would: for demonstrating
    /// what rewinding saves. Can change at any time.
    pub rewind: bool,
    /// Slack on the fire interval for clock noise, seconds (default 0.01): the server measures
    /// the interval between the shots' own view times, which carry no network jitter.
    pub fire_interval_allowance: f64,
    /// Fixed part of the view-time tolerance, seconds (default 0.02): the client's clock
    /// estimate and rounding.
    pub view_time_tolerance: f64,
    /// Multiple of the link's measured jitter added to the view-time tolerance (default 2):
    /// a request's arrival time varies with it.
    pub view_time_jitter_factor: f64,
    /// Slack above the latest arrival seen in the client's view reports, seconds (default
    /// 0.004: one frame of arrival rounding). A shot whose copy arrives later after the view
    /// time it stamps than the client's reports ever did
    /// ([`RemoteClientClock::view_lag_range`](unlag_net::RemoteClientClock::view_lag_range))
    /// is backtracking: caught once it claims more than the up-link's jitter span (2 × the
    /// jitter) older than the truth, whatever the clocks' estimates.
    pub view_lag_margin: f64,
    /// Slack below the earliest arrival seen in the client's view reports, seconds (default
    /// 0.015): a shot stamped further ahead of how its packets arrive is refused, so view times
    /// cannot be pushed forward to cut fire intervals or reloads short.
    pub view_lag_ahead_margin: f64,
    /// Most a copy of a shot may be stamped after the shot itself, seconds (default 0.034: the
    /// two frames [`FIRE_COPIES`] adds at 60 frames/s; a slower client gets its two frames,
    /// [`RemoteClientClock::client_frame`](unlag_net::RemoteClientClock::client_frame)). A
    /// cheat that keeps honest copy stamps and moves the shot's own view time back gains at
    /// most this.
    pub max_copy_age: f64,
    /// How far a shot's origin may be from the shooter's body on the server, metres
    /// (default 1.0; the shooter is predicted ahead of the server).
    pub max_origin_error: f32,
    /// Longest a shot waits on the server for its shooter's moves, seconds, beyond a fixed
    /// second for the playout's catch-up and a lost move's resend (default 0.3: longer than
    /// the movement plugin's wait for a missing move). A shot names the newest move its client
    /// had made ([`FireRequest::move_seq`]); after a burst of losses it can arrive before that
    /// move has, and judged at once its origin would be checked against a body the server has
    /// not moved yet.
    pub max_shot_hold: f64,
    /// Slack on a pellet's direction against its seeded roll, radians (default 0.001).
    pub pellet_slack: f32,
    /// Subtracted from the round trip before halving it into a projectile's prediction time,
    /// seconds (default 0.015, Unreal Tournament's fudge: the server lags the shooter's fake
    /// projectile by half of it).
    pub projectile_fudge: f64,
    /// Cap on the round trip (less the fudge) a projectile is predicted for, seconds (default
    /// 0.16: the server launches projectiles at most 80 ms in the past; above it the shooter
    /// holds its fake back instead, so a high ping buys no head start).
    pub max_prediction_ping: f64,
}

impl CombatSettings {
    /// Whether shots from a client at round-trip time `rtt` (seconds) are judged rewound all
    /// the way to what it drew: when [`rewind`](Self::rewind) is on and `rtt` is within
    /// [`max_rewind_ping`](Self::max_rewind_ping).
    pub fn rewinds(&self, rtt: f64) -> bool {
        self.rewind && rtt <= self.max_rewind_ping
    }

    /// How much later than its view time a shot from a client at round-trip time `rtt`
    /// (seconds) is judged, seconds: 0 within [`max_rewind_ping`](Self::max_rewind_ping),
    /// else the part of the one-way trip beyond half the cap (partial compensation), and 0
    /// when the server does not rewind at all (it judges the present then).
    pub fn rewind_shortfall(&self, rtt: f64) -> f64 {
        if self.rewind && rtt.is_finite() {
            ((rtt - self.max_rewind_ping) / 2.0).max(0.0)
        } else {
            0.0
        }
    }

    /// How much later than its view time a shot is judged, seconds, from a client at round-trip
    /// time `rtt` drawing with an interpolation delay of `delay`, whose delay the server
    /// compensates up to `delay_cap` (seconds; `None` when unknown): the
    /// [`rewind_shortfall`](Self::rewind_shortfall) above the rewind cap plus the part of the
    /// delay beyond the cap ([`unlag_net::delay_shortfall`]); 0 when the server does not rewind
    /// (it judges the present then). The client traces and claims its shot at that time, the
    /// server judges it there, so a hit marker promises what the server grants.
    pub fn shot_lead(&self, rtt: f64, delay: f64, delay_cap: Option<f64>) -> f64 {
        if self.rewind {
            self.rewind_shortfall(rtt) + unlag_net::delay_shortfall(delay, delay_cap)
        } else {
            0.0
        }
    }

    /// Most a copy of a shot may be stamped after the shot, seconds, for a client whose frames
    /// last `frame` seconds: [`max_copy_age`](Self::max_copy_age), or the frames the copies
    /// span ([`FIRE_COPIES`] − 1) and 2 ms, whichever is longer. The server refuses older
    /// copies; the client does not send them.
    pub fn copy_age_allowed(&self, frame: f64) -> f64 {
        let copies_span = f64::from(FIRE_COPIES - 1) * frame + 0.002;
        self.max_copy_age.max(copies_span)
    }
}

impl Default for CombatSettings {
    fn default() -> Self {
        Self {
            weapons_path: Some("weapons.ron".into()),
            max_rewind_ping: 0.4,
            rewind: true,
            fire_interval_allowance: 0.01,
            view_time_tolerance: 0.02,
            view_time_jitter_factor: 2.0,
            view_lag_margin: 0.004,
            view_lag_ahead_margin: 0.015,
            max_copy_age: 0.034,
            max_origin_error: 1.0,
            max_shot_hold: 0.3,
            pellet_slack: 0.001,
            projectile_fudge: 0.015,
            max_prediction_ping: 0.16,
        }
    }
}

impl Validate for CombatSettings {
    fn validate(&self) -> Result<(), SettingsError> {
        let f = Fields::new("CombatSettings");
        f.within("max_rewind_ping", self.max_rewind_ping, 0.0, 10.0, "s")?;
        let allowance = self.fire_interval_allowance;
        f.within("fire_interval_allowance", allowance, 0.0, 1.0, "s")?;
        f.within(
            "view_time_tolerance",
            self.view_time_tolerance,
            0.0,
            1.0,
            "s",
        )?;
        let factor = self.view_time_jitter_factor;
        f.within("view_time_jitter_factor", factor, 0.0, 20.0, "")?;
        f.within("view_lag_margin", self.view_lag_margin, 0.0, 1.0, "s")?;
        let ahead = self.view_lag_ahead_margin;
        f.within("view_lag_ahead_margin", ahead, 0.0, 1.0, "s")?;
        f.within("max_copy_age", self.max_copy_age, 0.0, 1.0, "s")?;
        let origin = f64::from(self.max_origin_error);
        f.within("max_origin_error", origin, 0.0, 10.0, "m")?;
        f.within("max_shot_hold", self.max_shot_hold, 0.0, 5.0, "s")?;
        f.within(
            "pellet_slack",
            f64::from(self.pellet_slack),
            0.0,
            0.5,
            "rad",
        )?;
        f.within("projectile_fudge", self.projectile_fudge, 0.0, 1.0, "s")?;
        let prediction = self.max_prediction_ping;
        f.within("max_prediction_ping", prediction, 0.0, 10.0, "s")?;
        if self.weapons_path.as_deref() == Some("") {
            return Err(f.error("weapons_path", "\"\"", "an asset path, or None"));
        }
        Ok(())
    }
}

/// The weapon table in use (a resource): filled from the asset at
/// [`CombatSettings::weapons_path`] once loaded, or inserted by hand.
#[derive(Resource, Clone, Debug, Default)]
pub struct Weapons {
    /// The table, once there is one.
    pub table: Option<WeaponTable>,
    handle: Option<Handle<WeaponTable>>,
}

impl Weapons {
    /// A table given in code.
    pub fn new(table: WeaponTable) -> Self {
        Self {
            table: Some(table),
            handle: None,
        }
    }
}

/// System sets of combat.
#[derive(SystemSet, Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum CombatSystems {
    /// `Update` on a client: turn [`FireCommand`]s into shots, read results.
    Client,
    /// `Update` on the server: judge the shots received this frame against the recorded hit
    /// boxes, run reloads.
    Server,
}

/// Weapons over lag compensation, on both sides. Add it after
/// [`RewindPlugin`](unlag_rewind::RewindPlugin) and
/// [`ProxySmoothingPlugin`](unlag_smoothing::ProxySmoothingPlugin).
#[derive(Clone, Debug, Default)]
pub struct CombatPlugin {
    /// The [`CombatSettings`] to start with: checked and inserted as a resource when the
    /// plugin is built (settings out of range panic there). Later changes go to the resource.
    pub settings: CombatSettings,
}

impl Plugin for CombatPlugin {
    fn build(&self, app: &mut App) {
        app.insert_validated(self.settings.clone())
            .init_resource::<Weapons>()
            .init_resource::<CombatStats>()
            .add_message::<FireCommand>()
            .add_message::<ReloadCommand>()
            .add_message::<LocalFire>()
            .add_message::<ShotConfirmed>()
            .add_message::<RemoteFire>()
            .add_message::<Damaged>()
            .add_message::<Killed>()
            .add_message::<ProjectileExploded>()
            .init_resource::<OwnProjectiles>()
            .init_resource::<unlag_net::HeldShotsOldest>()
            .add_net_message_mapped::<FireRequest>(NetDirection::ClientToServer)
            .add_net_message_mapped::<FireResult>(NetDirection::ServerToClient)
            .add_net_message_mapped::<CosmeticFires>(NetDirection::ServerToClient)
            .add_net_message_mapped::<ProjectileLaunched>(NetDirection::ServerToClient)
            .add_net_message_mapped::<ProjectileImpact>(NetDirection::ServerToClient)
            .add_net_message::<ReloadRequest>(NetDirection::ClientToServer)
            .add_net_message::<ReloadDone>(NetDirection::ServerToClient)
            // Shots are judged after the moves that left with them were taken in (their
            // origin is checked against the character's position).
            .configure_sets(
                Update,
                (
                    CombatSystems::Client,
                    CombatSystems::Server.after(NetSystems::Moves),
                ),
            )
            .add_systems(
                Update,
                (
                    server::arm_characters,
                    server::reloads,
                    server::judge_shots,
                    projectile::fly_projectiles,
                )
                    .chain()
                    .run_if(any_with_component::<Server>)
                    .in_set(CombatSystems::Server),
            )
            .add_systems(
                Update,
                (
                    client::arm_client,
                    client::reload,
                    client::fire,
                    client::receive_results,
                    projectile::client_projectiles,
                )
                    .chain()
                    .run_if(any_with_component::<Client>)
                    .in_set(CombatSystems::Client),
            )
            .add_systems(PreUpdate, take_loaded_weapons.after(NetSystems::Clock));
    }

    fn finish(&self, app: &mut App) {
        // One rewind cap: the ping monitor's warning of it follows ours.
        if let Some(mut monitor) = app.world_mut().get_resource_mut::<unlag_net::PingMonitor>() {
            monitor.set_max_rewind_ping(self.settings.max_rewind_ping);
        }
        if app.world().contains_resource::<AssetServer>()
            && !app.world().contains_resource::<Assets<WeaponTable>>()
        {
            app.init_asset::<WeaponTable>()
                .register_asset_loader(WeaponTableLoader)
                .add_systems(PreUpdate, report_failures);
        }
    }
}

fn report_failures(mut failures: MessageReader<bevy::asset::AssetLoadFailedEvent<WeaponTable>>) {
    for failure in failures.read() {
        error!("weapon table did not load: {}", failure.error);
    }
}

/// Starts loading the weapon table, and takes it once loaded.
fn take_loaded_weapons(
    settings: Res<CombatSettings>,
    mut weapons: ResMut<Weapons>,
    assets: Option<Res<AssetServer>>,
    tables: Option<Res<Assets<WeaponTable>>>,
) {
    if weapons.table.is_some() {
        return;
    }
    let (Some(assets), Some(tables), Some(path)) = (assets, tables, &settings.weapons_path) else {
        return;
    };
    let handle = weapons
        .handle
        .get_or_insert_with(|| assets.load::<WeaponTable>(path.clone()))
        .clone();
    if let Some(table) = tables.get(&handle) {
        weapons.table = Some(table.clone());
    }
}
