//! Combat's settings and its weapon table resource, the same on both sides.

use bevy::prelude::*;
use unlag_core::Fields;
use unlag_net::{SettingsError, Validate};

use crate::protocol::FIRE_COPIES;
use crate::weapons::WeaponTable;

/// Settings of [`CombatPlugin`](crate::CombatPlugin) (a resource, the same on both sides).
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
    /// Share of its packets a client's link to the server may lose (as the client reads it
    /// from their acknowledgements, [`LinkTraffic::sent_loss`](unlag_net::LinkTraffic), by
    /// more than the reading's error) below which a shot's later copies only ride in packets
    /// that leave anyway (its moves), the second alone only when no packet left before it
    /// would come too old (default 0.02). Such a shot goes in two copies, or three when a
    /// third finds a packet leaving: lost whole with a chance of about the share squared
    /// (0.04 % of shots at 2 %, where three spread copies lose 0.0008 %; more if the link loses
    /// in bursts). With a rifle held down (5 shots a second with its reloads) on a 1-% link
    /// this took a 240-fps client's upstream from 3 991 to 3 729 B/s, a 60-fps one's from
    /// 3 484 to 3 422. Otherwise, and until the client has read its losses (a packet counts 2 s
    /// after it left: about its first five seconds), or with its acknowledgements not held for
    /// data ([`AckDelay`](unlag_net::AckDelay) 0), every copy goes as it falls due,
    /// [`FIRE_COPIES`] in all, alone when nothing else leaves. 0: always so (the way before
    /// copies rode).
    pub copies_ride_below_loss: f64,
    /// How far a shot's origin may be from the shooter's body on the server, metres
    /// (default 1.0; the shooter is predicted ahead of the server).
    pub max_origin_error: f32,
    /// Longest a shot waits on the server for its shooter's moves, seconds, beyond a fixed
    /// second for the playout's catch-up and a lost move's resend (default 0.3: longer than
    /// the movement plugin's wait for a missing move). A shot names the newest move its client
    /// had made ([`FireRequest::move_seq`](crate::FireRequest::move_seq)); after a burst of losses it can arrive before that
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
            copies_ride_below_loss: 0.02,
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
        let ride = self.copies_ride_below_loss;
        f.within("copies_ride_below_loss", ride, 0.0, 1.0, "")?;
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
    /// The table asset being loaded (from `weapons_path`), until it is taken.
    pub(crate) handle: Option<Handle<WeaponTable>>,
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
