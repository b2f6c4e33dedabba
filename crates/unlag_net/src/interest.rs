//! Interest management: which characters' states and shots each client is sent, and how often.
//!
//! The server keeps, on every client link, a [`ProxyInterest`]: per smoothed proxy, how
//! relevant it is to that client ([`Relevance`]) and whether the client can hear it. Proxy
//! smoothing fills it by [`InterestPolicy`] (distance and line of sight by default) and sends
//! each client its proxies' states at the rate their relevance allows; the combat plugin sends
//! shots only to clients that can see or hear them. The rewind and the hit validation do not
//! read it: they judge a shot by the states the server sent and their times, whatever subset
//! of them a client was sent.
//!
//! It lives here, beside the wire, so that smoothing (which decides and sends), the rewind
//! (which tests line of sight) and combat (which sends shots) share one type without depending
//! on each other.

use bevy::ecs::entity::EntityHashMap;
use bevy::prelude::*;
use unlag_core::{Fields, SettingsError, Validate};

/// How relevant one proxy is to one client.
#[derive(Copy, Clone, Debug, PartialEq, Reflect)]
pub enum Relevance {
    /// Every state, at the proxy's own update rate.
    Full,
    /// At most this many states a second (never more than the proxy's own rate), Hz.
    Reduced(f32),
    /// None: the client stops drawing it (its proxy gets [`ProxyDormant`]) until it is
    /// relevant again, when it snaps once to the first new state, flagged a teleport.
    Dormant,
}

/// Which proxies a client is sent ([`InterestSettings::policy`]).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Reflect)]
pub enum InterestPolicy {
    /// Every proxy to every client, at full rate (no interest management).
    Everyone,
    /// By distance from the client's viewpoint, and beyond
    /// [`InterestSettings::sight_always_within`] by line of sight when the rewind plugin (which
    /// knows the static world) is present: full rate near, a reduced rate farther, none beyond
    /// (or out of sight for longer than [`InterestSettings::linger`]).
    #[default]
    Distance,
    /// The game decides: it writes each link's [`ProxyInterest`] in
    /// [`InterestSystems::Decide`]. Pairs it leaves unset are sent in full.
    Custom,
}

/// Settings of interest management (a resource; proxy smoothing inserts it).
#[derive(Resource, Clone, Debug, PartialEq, Reflect)]
#[reflect(Resource)]
pub struct InterestSettings {
    /// Which proxies a client is sent (default [`InterestPolicy::Distance`]).
    pub policy: InterestPolicy,
    /// Within this distance a proxy is sent in full, metres (default 200, as `reduced_within`:
    /// no reduced ring).
    ///
    /// A reduced ring (`full_within` < `reduced_within`) sends far proxies at
    /// `reduced_rate_hz`. A client draws each proxy with a delay that follows that proxy's own
    /// interval, so a slower proxy is drawn further in the past (a whole interval more at half
    /// the rate), and a shot's claim on it says so; the server judges each claim at the moment
    /// its target was drawn (shots at near and far targets in turn, and a shotgun's pellets
    /// across both, alike). Off by default: a far proxy at a reduced rate is shown further in
    /// the past.
    pub full_within: f32,
    /// Within this distance (beyond `full_within`) a proxy is sent at `reduced_rate_hz`;
    /// beyond it, not at all, metres (default 200).
    pub reduced_within: f32,
    /// The rate of a proxy between `full_within` and `reduced_within`, Hz (default 10: its
    /// interpolation delay, which follows its interval, keeps shots at it under the rewind cap
    /// up to about 200 ms of round trip; at 5 Hz, above about 100 ms they would be judged only
    /// part of the way back).
    pub reduced_rate_hz: f32,
    /// How far past a boundary a proxy must go to cross it back, metres (default 5): one that
    /// stands on a boundary does not flip every tick.
    pub hysteresis: f32,
    /// Whether proxies out of sight beyond `sight_always_within` stop (default true; needs the
    /// rewind plugin, which tests sight against the static world; without it sight is not
    /// tested).
    pub line_of_sight: bool,
    /// Within this distance a proxy is sent whether or not it is in sight, metres (default
    /// 30): close fights, where a corner peek decides, are never culled.
    pub sight_always_within: f32,
    /// How long a proxy stays relevant after it was last in sight, seconds (default 0.5, at
    /// least twice `sight_interval`): it keeps being sent while it steps behind cover and out
    /// again.
    pub linger: f32,
    /// How often each pair's sight is tested and each client's interest decided, seconds
    /// (default 0.1; pairs and clients are spread over the ticks of that span).
    pub sight_interval: f32,
    /// Height of the eyes and of the target's upper body above a character's origin, metres
    /// (default 1.6): sight is tested from the viewer's eyes to the target's upper body and
    /// to its `sight_low` point; either clear is in sight.
    pub eye_height: f32,
    /// Height of the target's lower point tested above its origin, metres (default 0.4).
    pub sight_low: f32,
    /// Shots (echoes, projectiles) reach a client within this distance of the shooter or of
    /// where the shot lands even when the shooter is dormant to it, metres (default 120).
    pub hearing_distance: f32,
}

impl Default for InterestSettings {
    fn default() -> Self {
        Self {
            policy: InterestPolicy::Distance,
            full_within: 200.0,
            reduced_within: 200.0,
            reduced_rate_hz: 10.0,
            hysteresis: 5.0,
            line_of_sight: true,
            sight_always_within: 30.0,
            linger: 0.5,
            sight_interval: 0.1,
            eye_height: 1.6,
            sight_low: 0.4,
            hearing_distance: 120.0,
        }
    }
}

impl InterestSettings {
    /// Over how many ticks of `tick_seconds` one `sight_interval` spreads its work (each
    /// client's decision, each pair's sight test): at least 1. The sight test and the policy
    /// share it, so a pair is tested and decided on the same cycle.
    pub fn spread_ticks(&self, tick_seconds: f64) -> u32 {
        ((f64::from(self.sight_interval) / tick_seconds).round() as u32).max(1)
    }
}

impl Validate for InterestSettings {
    fn validate(&self) -> Result<(), SettingsError> {
        let f = Fields::new("InterestSettings (relevance)");
        let m = |x: f32| f64::from(x);
        f.above("full_within", m(self.full_within), 0.0, 1e6, "m")?;
        f.above("reduced_within", m(self.reduced_within), 0.0, 1e6, "m")?;
        if self.reduced_within < self.full_within {
            return Err(f.error(
                "reduced_within",
                format!("{} m", self.reduced_within),
                format!("at least full_within ({} m)", self.full_within),
            ));
        }
        f.within("reduced_rate_hz", m(self.reduced_rate_hz), 1.0, 60.0, "Hz")?;
        f.within("hysteresis", m(self.hysteresis), 0.0, 1e3, "m")?;
        f.within(
            "sight_always_within",
            m(self.sight_always_within),
            0.0,
            1e6,
            "m",
        )?;
        f.within("linger", m(self.linger), 0.0, 60.0, "s")?;
        f.above("sight_interval", m(self.sight_interval), 0.0, 10.0, "s")?;
        if self.linger < 2.0 * self.sight_interval {
            return Err(f.error(
                "linger",
                format!("{} s", self.linger),
                format!(
                    "at least twice sight_interval ({} s): a pair in sight must not lapse \
                     between two of its tests",
                    self.sight_interval
                ),
            ));
        }
        f.within("eye_height", m(self.eye_height), -100.0, 100.0, "m")?;
        f.within("sight_low", m(self.sight_low), -100.0, 100.0, "m")?;
        f.within("hearing_distance", m(self.hearing_distance), 0.0, 1e6, "m")
    }
}

/// One proxy's interest to one client.
#[derive(Copy, Clone, Debug, PartialEq, Reflect)]
pub struct PairInterest {
    /// How relevant it is.
    pub relevance: Relevance,
    /// Whether the client hears its shots even when it is dormant.
    pub audible: bool,
    /// When the client last had it in sight (or was near enough not to need to), server
    /// seconds; `-inf` never. Written by the sight test.
    pub in_sight_at: f64,
}

impl Default for PairInterest {
    fn default() -> Self {
        Self {
            relevance: Relevance::Full,
            audible: true,
            in_sight_at: f64::NEG_INFINITY,
        }
    }
}

/// On the server, per client link: the relevance of every smoothed proxy to that client, and
/// where the client views the world from. A proxy it does not name is sent in full and heard.
#[derive(Component, Clone, Debug, Default)]
pub struct ProxyInterest {
    pairs: EntityHashMap<PairInterest>,
    /// Where the client views the world from (its character, or its [`ViewPoint`]); `None`
    /// when unknown, and then every proxy is relevant.
    pub viewer: Option<Vec3>,
    /// How far the client hears shots from, metres (from [`InterestSettings`]).
    pub hearing_distance: f32,
}

impl ProxyInterest {
    /// No pair named (every proxy full and heard), heard within `hearing_distance` metres.
    pub fn new(hearing_distance: f32) -> Self {
        Self {
            hearing_distance,
            ..default()
        }
    }

    /// How relevant `proxy` is to this client ([`Relevance::Full`] when unnamed).
    pub fn relevance(&self, proxy: Entity) -> Relevance {
        self.pairs
            .get(&proxy)
            .map_or(Relevance::Full, |p| p.relevance)
    }

    /// The pair's interest, if named.
    pub fn get(&self, proxy: Entity) -> Option<&PairInterest> {
        self.pairs.get(&proxy)
    }

    /// The pair's interest, named with the defaults (full, audible) if it was not.
    pub fn entry(&mut self, proxy: Entity) -> &mut PairInterest {
        self.pairs.entry(proxy).or_default()
    }

    /// Sets how relevant `proxy` is to this client (keeping whether it is heard).
    pub fn set(&mut self, proxy: Entity, relevance: Relevance) {
        self.entry(proxy).relevance = relevance;
    }

    /// Forgets every pair whose proxy `keep` refuses (despawned ones).
    pub fn retain(&mut self, mut keep: impl FnMut(Entity) -> bool) {
        self.pairs.retain(|e, _| keep(*e));
    }

    /// The pairs named, in no order.
    pub fn pairs(&self) -> impl Iterator<Item = (Entity, &PairInterest)> {
        self.pairs.iter().map(|(e, p)| (*e, p))
    }

    /// Whether the client sees or hears what `shooter` does: not dormant to it, or audible.
    pub fn hears(&self, shooter: Entity) -> bool {
        self.pairs
            .get(&shooter)
            .is_none_or(|p| p.relevance != Relevance::Dormant || p.audible)
    }

    /// Whether the client sees or hears a shot of `shooter`'s from `point`:
    /// [`hears_at`](Self::hears_at) the point or [`hears`](Self::hears) the shooter. The
    /// distance first: a shot is sent to every link, and within hearing (most links, where
    /// players meet) the pair is not looked up (a hash lookup per link and shot was 2 % of a
    /// 256-player server's update).
    pub fn hears_fire(&self, shooter: Entity, point: Vec3) -> bool {
        self.hears_at(point) || self.hears(shooter)
    }

    /// Whether the client hears something at `point`: within its hearing distance of its
    /// viewpoint, or the viewpoint is unknown.
    pub fn hears_at(&self, point: Vec3) -> bool {
        self.viewer
            .is_none_or(|v| v.distance_squared(point) <= self.hearing_distance.powi(2))
    }
}

/// On a server's client link: where that client views the world from, metres, when the game
/// knows better than its character's position (a spectator's camera, a kill cam). Without it the
/// viewpoint is the character the client controls.
#[derive(Component, Copy, Clone, Debug, PartialEq, Reflect)]
#[reflect(Component)]
pub struct ViewPoint(pub Vec3);

/// On a client, on a proxy the server stopped sending (it is not relevant to this client now):
/// smoothing does not place it (and removes its [`RenderedPose`](crate::RenderedPose)), and
/// shots are not traced against it; the game hides it meanwhile (the demo sets its
/// `Visibility` to hidden). Removed when the first state after it is drawn, snapped to.
#[derive(Component, Copy, Clone, Debug, PartialEq, Reflect)]
#[reflect(Component)]
pub struct ProxyDormant {
    /// The server tick it went dormant at: states up to it are from before.
    pub since_tick: u32,
    /// The time of the first state after it, server seconds, once one came: it is shown again
    /// when the view time reaches it.
    pub wakes_at: Option<f64>,
}

/// System sets of interest management, `FixedPostUpdate` on the server, before proxies'
/// states are sent.
#[derive(SystemSet, Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum InterestSystems {
    /// Sight tests (the rewind plugin's, against the static world).
    Sight,
    /// The policy writes each link's [`ProxyInterest`] (a [`InterestPolicy::Custom`] game's
    /// systems go here).
    Decide,
}

/// Present when something tests sight for [`InterestPolicy::Distance`] (the rewind plugin on a
/// server): without it, line of sight is not a criterion.
#[derive(Resource, Copy, Clone, Debug, Default)]
pub struct SightTested;
