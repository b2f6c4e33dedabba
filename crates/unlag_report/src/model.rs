//! What a report holds: every figure of a match, in the units its fields name. Filled by
//! [`run`](crate::run), printed by [`Report::table`] and serialised as JSON.

use crate::{compare, peek};
use serde::Serialize;
use std::collections::BTreeMap;
use unlag::core::Summary;

/// A distribution's figures, in the unit of the field holding it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Stat {
    /// Samples.
    pub count: usize,
    /// Mean.
    pub mean: f64,
    /// Root mean square.
    pub rms: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Stat {
    /// The figures of `samples`, scaled by `unit` (e.g. 1000 for seconds to milliseconds).
    pub fn of(samples: &[f64], unit: f64) -> Self {
        let s = Summary::of(samples);
        Self {
            count: s.count,
            mean: s.mean * unit,
            rms: s.rms * unit,
            p95: s.p95 * unit,
            p99: s.p99 * unit,
            max: if s.count == 0 { 0.0 } else { s.max * unit },
        }
    }
}

/// One weapon's agreement between what clients saw and what the server confirmed.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Agreement {
    /// The weapon's name.
    pub weapon: String,
    /// Shots fired.
    pub shots: u64,
    /// Pellets the shooters saw hit a target.
    pub seen_hits: u64,
    /// Of those, pellets the server confirmed on that target.
    pub hits_confirmed: u64,
    /// Pellets the shooters saw miss.
    pub seen_misses: u64,
    /// Pellets the server confirmed that the shooters saw miss (wrong confirmations).
    pub misses_confirmed: u64,
    /// Shots with a headshot seen.
    pub headshots_seen: u64,
    /// Of those, the headshots the server confirmed.
    pub headshots_agree: u64,
    /// Shots the server refused.
    pub refused: u64,
}

impl Agreement {
    /// Share of seen hits confirmed, 0–1 (1 when nothing was seen hit).
    pub fn hit_rate(&self) -> f64 {
        if self.seen_hits == 0 {
            1.0
        } else {
            self.hits_confirmed as f64 / self.seen_hits as f64
        }
    }

    /// Share of seen misses confirmed, 0–1.
    pub fn miss_rate(&self) -> f64 {
        if self.seen_misses == 0 {
            0.0
        } else {
            self.misses_confirmed as f64 / self.seen_misses as f64
        }
    }
}

/// Projectile shots of the whole match.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Projectiles {
    /// Projectiles launched by the server.
    pub launched: u64,
    /// Impacts the shooters heard of.
    pub impacts: u64,
    /// Of those, direct hits on a character.
    pub direct_hits: u64,
    /// Characters damaged by splash.
    pub splash_hits: u64,
}

/// Wall-clock microseconds per server tick, by part (this machine, this build).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ServerCost {
    /// Checking clients' moves (movement validation, corrections).
    pub movement_us: Stat,
    /// Recording every character's hit boxes.
    pub record_us: Stat,
    /// Reloads, judging shots (checks and rewinds), flying projectiles, and queuing what the
    /// clients are told.
    pub combat_us: Stat,
    /// Sampling the proxies and building the state updates due to each client.
    pub proxy_states_us: Stat,
    /// The `PreUpdate` schedule: lightyear's transport and replication taking in what arrived
    /// (and the plugins' receiving systems).
    pub receive_us: Stat,
    /// The `PostUpdate` schedule: replication out, lightyear's messages and transport.
    pub send_us: Stat,
    /// The whole server update, every schedule from `First` to `Last`.
    pub total_us: Stat,
    /// Lightyear's sets inside `send_us`, each timed from before its first system to after its
    /// last.
    pub send_parts: SendCost,
}

/// The parts of the server's `PostUpdate` that send, µs per tick (wall clock: this machine,
/// this build). What is left of `send_us` is the rest of `PostUpdate` (transform propagation,
/// the plugins' own late systems).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SendCost {
    /// Replicon's replication send (`ServerSystems::Send`): every replicated entity against
    /// every client.
    pub replication_us: Stat,
    /// Typed messages serialized into their channels (`MessageSystems::Send`).
    pub messages_us: Stat,
    /// Channels packed into packets (`TransportSystems::Send`).
    pub transport_us: Stat,
    /// Netcode encrypting packets into each link (`ConnectionSystems::Send`).
    pub netcode_us: Stat,
    /// Links handing datagrams to the socket or the in-process wire (`LinkSystems::Send`).
    pub link_us: Stat,
}

/// Every figure of a match.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Report {
    /// Bots, clients, seconds, conditions, smoothing and seed of the match.
    pub options: BTreeMap<&'static str, String>,
    /// Simulated seconds measured.
    pub seconds: f64,
    /// Corrections per minute, per client.
    pub corrections_per_min: Vec<f64>,
    /// How far corrections moved the character, metres.
    pub correction_distance_m: Stat,
    /// Drawn proxy position against the server's pose at the view time, metres.
    pub proxy_error_m: Stat,
    /// Largest change of a proxy's error from one frame to the next, metres.
    pub proxy_max_jump_m: f64,
    /// Largest growth of a proxy's error from one frame to the next beyond the character's
    /// own motion in that frame (a pop), teleports left out, metres: its motion on the server's
    /// track, or the pace the client's states showed it at, whichever is more (a proxy drawn
    /// smoothly between two states does not pop where the track stood and then ran).
    pub proxy_max_pop_m: f64,
    /// The same against the server track's motion alone, metres.
    pub proxy_max_track_pop_m: f64,
    /// Interpolation delay in effect on the clients, per frame, milliseconds.
    pub interpolation_delay_ms: Stat,
    /// Share of proxy frames held or extrapolated, 0–1.
    pub starved_share: f64,
    /// Hit agreement, per hitscan weapon.
    pub agreement: Vec<Agreement>,
    /// Projectile shots.
    pub projectiles: Projectiles,
    /// Shots refused by the server, by reason.
    pub rejected: BTreeMap<String, u64>,
    /// Clients whose connection dropped during the match (a netcode timeout: nothing heard
    /// for longer than the connect token's timeout); their figures end where it dropped.
    pub disconnects: usize,
    /// Moves or messages the server's movement checks rejected.
    pub movement_rejected: u64,
    /// The clients' estimate of the server's time less the true one, per client frame, over
    /// every client: (mean, least, most), milliseconds.
    pub clock_error_ms: [f64; 3],
    /// Upstream bytes per second per client, on the wire (mean over clients).
    pub bytes_up_per_sec: f64,
    /// Downstream bytes per second per client, on the wire (mean over clients).
    pub bytes_down_per_sec: f64,
    /// Upstream datagrams per second per client (mean over clients).
    pub datagrams_up_per_sec: f64,
    /// Downstream datagrams per second per client (mean over clients).
    pub datagrams_down_per_sec: f64,
    /// Upstream payload bytes per second per client, by message kind.
    pub up_by_kind: BTreeMap<String, f64>,
    /// Downstream payload bytes per second per client, by message kind.
    pub down_by_kind: BTreeMap<String, f64>,
    /// Upstream messages per second per client, by message kind.
    pub up_messages_by_kind: BTreeMap<String, f64>,
    /// Downstream messages per second per client, by message kind.
    pub down_messages_by_kind: BTreeMap<String, f64>,
    /// Proxy states sent off their grids per second per client (where a slow proxy's motion
    /// bent: `SmoothingSettings::off_grid_error`; mean over clients).
    pub off_grid_states_per_sec: f64,
    /// Proxy states sent as their differences from states the client acknowledged per second
    /// per client (`SmoothingSettings::delta_states`; mean over clients).
    pub delta_states_per_sec: f64,
    /// Server time per tick.
    pub server_cost: ServerCost,
    /// Simulated seconds per wall-clock second.
    pub simulated_per_wall_second: f64,
    /// With `--compare-validation`: every hitscan and shotgun pellet judged four ways.
    pub validation: Vec<compare::MethodAgreement>,
    /// With `--cheat`: what client 0 did.
    pub cheat: Option<String>,
    /// Cheating shots client 0 sent.
    pub cheating_shots: u64,
    /// Claims on a pose held past its extrapolation (never hits), every shooter's.
    pub stale_claims: u64,
    /// Claims whose ease no starved frame explains (judged as none), every shooter's.
    pub unexplained_eases: u64,
    /// Claims judged earlier than their shot, on proxies drawn with a longer delay than the
    /// shot's (sent more slowly: `--full-within`), every shooter's.
    pub claims_behind: u64,
    /// Speed hacks the server flagged.
    pub speed_hacks_flagged: u64,
    /// What happened before the measured span (every other figure starts after it).
    pub warm_up: crate::WarmUpTally,
    /// Peeker's advantage under the same conditions (a match of its own: two clients and a
    /// wall).
    pub peek: peek::PeekFigures,
}
