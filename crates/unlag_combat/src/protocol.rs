//! The combat messages (a shot to the server, its verdict to the shooter, its echo to the rest)
//! and their limits on the wire.

use bevy::ecs::entity::MapEntities;
use bevy::prelude::*;
use serde::{Deserialize, Serialize};
use unlag_core::SmoothingMode;

/// Most targets one shot claims (the server refuses more as malformed).
pub const MAX_CLAIMS: usize = 16;

/// Most copies of each fire request sent, and the copies of a reload request (the server takes
/// the first to arrive): a fire request's on the frames nearest to an even spread over the
/// copy age the server allows (every frame at 60 frames/s), or, on a link that loses few of the
/// client's packets, two or three riding in packets that leave anyway
/// ([`CombatSettings::copies_ride_below_loss`](crate::CombatSettings::copies_ride_below_loss));
/// a reload request's one per frame.
pub const FIRE_COPIES: u8 = 3;

/// A [`WireClaim::pellets`] mask naming every pellet a weapon can have: for tools and tests
/// that claim a hit without tracing each pellet.
pub const EVERY_PELLET: u64 = u64::MAX;

/// What a shooter's client had on screen for one target it hit (see
/// [`ClaimedView`](unlag_rewind::ClaimedView)).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct WireClaim {
    /// The target (the client's proxy, mapped to the server's entity on the way).
    pub target: Entity,
    /// Tick of the state the proxy's pose started from.
    pub from: u32,
    /// Tick of the state it went towards.
    pub to: u32,
    /// Blend factor.
    pub alpha: f32,
    /// Smoothing mode of the proxy.
    pub mode: SmoothingMode,
    /// Offset of the drawn proxy from its curve, metres.
    pub ease: Vec3,
    /// Which of the shot's pellets hit it on the shooter's screen: bit `i` for the `i`-th
    /// direction of [`FireRequest::rays`] (a rifle's one pellet is bit 0; bits past the
    /// weapon's pellets name none). 0: no pellet hit it, a proxy a pellet passed close to,
    /// claimed so the server poses it as drawn too (one drawn beside the ray must not block it
    /// on the server).
    ///
    /// The server confirms no pellet on it outside the mask: a pellet that grazes a box the
    /// client drew it missing by less than its trace's margin (a tenth of a millimetre) is a
    /// miss on both sides, and a client can only claim fewer hits than it saw, never more.
    pub pellets: u64,
    /// How much earlier than the shot's [`judged_time`](FireRequest::judged_time) the target
    /// is judged, seconds (0 or more): a client draws a proxy sent more slowly than the others
    /// (at a reduced rate, or of a slower rate of its own) with a longer delay, so further in
    /// the past. The server compensates that longer delay as far as the rate it sent the proxy
    /// at explains ([`unlag_net::claim_delay_cap`]); beyond, the client judges the claim later
    /// by the rest, as the server does. 0 for a proxy drawn with the shot's own delay, and for
    /// an `Extrapolate` one (drawn at the present the client knows, whatever its delay).
    pub behind: f64,
}

impl WireClaim {
    /// What the client drew for proxy `target` this frame (its [`RenderedPose`]); `pellets`:
    /// which pellets hit it ([`WireClaim::pellets`]).
    ///
    /// [`RenderedPose`]: unlag_smoothing::RenderedPose
    pub fn drawn(target: Entity, pose: &unlag_smoothing::RenderedPose, pellets: u64) -> Self {
        Self {
            target,
            from: pose.from,
            to: pose.to,
            alpha: pose.alpha,
            mode: pose.mode,
            ease: pose.ease,
            pellets,
            behind: 0.0,
        }
    }

    /// Whether any pellet hit it on the shooter's screen.
    pub fn hit(&self) -> bool {
        self.pellets != 0
    }

    /// Whether the pellet of the shot's `index`-th direction hit it on the shooter's screen.
    pub fn claims_pellet(&self, index: usize) -> bool {
        index < 64 && self.pellets >> index & 1 == 1
    }

    /// The view it claims, as the rewind rebuilds it.
    pub fn view(&self) -> unlag_rewind::ClaimedView {
        unlag_rewind::ClaimedView {
            character: self.target,
            from: self.from,
            to: self.to,
            alpha: self.alpha,
            mode: self.mode,
            ease: self.ease,
        }
    }
}

/// Client → server, unreliable, sent in up to [`FIRE_COPIES`](crate::FIRE_COPIES) copies over
/// the next frames: one shot. There is no damage field: the server takes damage
/// from its own weapon table. On the wire it is packed by hand (41 bytes for a rifle shot with
/// one claim: see `wire.rs`), through its own `Serialize`/`Deserialize`.
#[derive(Clone, Debug, PartialEq)]
pub struct FireRequest {
    /// The weapon's id (its place in the [`WeaponTable`](crate::WeaponTable)).
    pub weapon: u8,
    /// Increases by one per shot of this client (replays and reordering are refused).
    pub fire_index: u32,
    /// Where the shot starts (the shooter's eye), metres.
    pub origin: Vec3,
    /// Where it aims (unit vector).
    pub aim: Vec3,
    /// Each pellet's direction (one for a rifle: the aim with its spread), or none: the
    /// pattern its weapon rolls for the fire index and aim ([`shot_directions`]), which is
    /// what an honest client sends, since the server rolls it itself (12 bytes a pellet
    /// saved; a request that carries directions has them checked against that pattern).
    ///
    /// [`shot_directions`]: crate::shot_directions
    pub directions: Vec<Vec3>,
    /// The view time the shot was fired at, server seconds.
    pub view_time: f64,
    /// The server time the shot is judged at, seconds: its view time, or later by
    /// [`CombatSettings::shot_lead`](crate::CombatSettings::shot_lead) above the rewind cap or
    /// the compensated delay; the claims show the targets at that time.
    pub judged_time: f64,
    /// The longest interpolation delay the shooter's client had heard the server compensates
    /// when it fired ([`NetClock::server_delay_cap`](unlag_net::NetClock::server_delay_cap)),
    /// seconds, which its lead counts on; `None` before a beat said. The server accepts any cap
    /// it announced to this client lately, none larger, and counts on its own without one.
    pub delay_cap: Option<f64>,
    /// The newest move the shooter's client had simulated when it fired (its
    /// [`MoveTrail`](unlag_net::MoveTrail)), if it moves by the movement plugin: the server
    /// holds the shot until it has processed that move (at most
    /// [`CombatSettings::max_shot_hold`](crate::CombatSettings::max_shot_hold)).
    pub move_seq: Option<u16>,
    /// The view time on screen when this copy left, server seconds (a copy sent `k` frames
    /// after the shot carries the view time of its own frame): the server bounds it by how
    /// late this client's packets arrive after the view time they carry.
    pub sent_view_time: f64,
    /// The interpolation delay in effect when this copy left, seconds (what the client's
    /// [`DelayReport`](unlag_net::DelayReport)s carry): the server measures how late the copy
    /// arrived after the present its client knew (`sent_view_time` + this), as it does for
    /// the reports, and holds it to the same bound as a reported delay. Taken from the reports
    /// instead, a copy that overtakes the report of a changed delay would look late (or early)
    /// by the change.
    pub sent_delay: f64,
    /// What the shooter saw of each target it hit.
    pub claims: Vec<WireClaim>,
}

impl FireRequest {
    /// Each pellet's direction for weapon `spec` (the one the request names): those it
    /// carries, or, when it carries none, the pattern `spec` rolls for its fire index and aim.
    pub fn pellets(&self, spec: &crate::WeaponSpec) -> std::borrow::Cow<'_, [Vec3]> {
        if self.directions.is_empty() {
            std::borrow::Cow::Owned(crate::shot_directions(spec, self.fire_index, self.aim))
        } else {
            std::borrow::Cow::Borrowed(&self.directions)
        }
    }

    /// Each pellet as a ray, (origin, direction), for weapon `spec` (see
    /// [`pellets`](Self::pellets)).
    pub fn rays(&self, spec: &crate::WeaponSpec) -> Vec<(Vec3, Vec3)> {
        self.pellets(spec)
            .iter()
            .map(|d| (self.origin, *d))
            .collect()
    }
}

impl MapEntities for FireRequest {
    fn map_entities<E: EntityMapper>(&mut self, mapper: &mut E) {
        for c in &mut self.claims {
            c.target = mapper.get_mapped(c.target);
        }
    }
}

/// One target's share of a confirmed shot.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ConfirmedHit {
    /// The target (mapped to the client's proxy on the way).
    #[serde(with = "unlag_net::wire_entity")]
    pub target: Entity,
    /// The bone of its first hit box hit (a headshot's when there is one).
    pub bone: String,
    /// Whether any pellet hit the head.
    pub headshot: bool,
    /// Damage dealt, hit points (all pellets together).
    pub damage: f32,
    /// Pellets that hit it.
    pub pellets: u8,
    /// Whether it died of it.
    pub killed: bool,
}

/// Why the server refused a shot. Every refusal is counted in
/// [`CombatStats`](crate::CombatStats) and logged.
#[derive(Serialize, Deserialize, Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Rejection {
    /// No such weapon.
    UnknownWeapon,
    /// The fire index is well below the newest one (a replay), dropped without an answer.
    StaleFireIndex,
    /// A copy of a shot already judged (each shot is sent several times), dropped without an
    /// answer and not counted as a refusal.
    Duplicate,
    /// Faster than the weapon fires.
    TooFast,
    /// The magazine is empty on the server, or the weapon is reloading.
    NoAmmo,
    /// A pellet count other than the weapon's.
    WrongPelletCount,
    /// A direction that is not a unit vector, or outside the weapon's spread.
    BadDirection,
    /// The pellets are not the ones the shot's seed rolls.
    WrongSpread,
    /// The origin is away from the shooter's body on the server.
    BadOrigin,
    /// The view time is outside the tolerance around the server's estimate (backtracking).
    BadViewTime,
    /// A claimed view that does not match what the server sent that client.
    BadClaim,
    /// A claimed target the rewind cannot pose: a proxy without hit boxes. (A target the
    /// server no longer has, one that left while the shot was on its way, is left out of the
    /// judgement instead: see `CombatStats::gone_targets`.)
    BadTarget,
    /// Every claimed hit failed, and every claimed target is behind the static world from the
    /// shot's origin: its middle and each of its boxes as claimed.
    ThroughWall,
    /// NaN, infinity or garbage in the request.
    Malformed,
    /// The shooter has no character.
    NoShooter,
    /// The shooter was dead when the shot arrived: fired before its client heard of its death.
    /// Not a cheat, so not counted as a refusal ([`CombatStats::posthumous`](crate::CombatStats::posthumous)).
    ShooterDead,
    /// The game moved the shooter (a respawn, a teleporter) a moment before the shot arrived,
    /// and the shot starts where it stood before: fired before its client heard of the move.
    /// Never granted, and not a cheat, so not counted as a refusal
    /// ([`CombatStats::fired_before_moved`](crate::CombatStats::fired_before_moved)).
    ShooterMoved,
}

/// Server → shooter, reliable: the verdict on one shot.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct FireResult {
    /// The shot's fire index.
    pub fire_index: u32,
    /// The weapon's id (its place in the [`WeaponTable`](crate::WeaponTable)), as in the
    /// request: the client settles that weapon's predicted ammo with `ammo`.
    pub weapon: u8,
    /// Rounds left in the weapon on the server after it.
    pub ammo: u32,
    /// Whether the shot was judged against the past (false when the server does not rewind:
    /// judged against current poses). Above the rewind cap it is rewound part of the way.
    pub rewound: bool,
    /// What it hit, or why it was refused.
    pub outcome: Result<Vec<ConfirmedHit>, Rejection>,
}

impl MapEntities for FireResult {
    fn map_entities<E: EntityMapper>(&mut self, mapper: &mut E) {
        if let Ok(hits) = &mut self.outcome {
            for h in hits {
                h.target = mapper.get_mapped(h.target);
            }
        }
    }
}

/// Someone else's shot, for effects only (sent in [`CosmeticFires`]).
///
/// On the wire (most of what a busy server sends each client after the proxy states: every
/// shot goes to everyone who hears it), the origin goes in whole millimetres and each pellet's
/// end in whole centimetres from it, a zigzag varint a coordinate: in an arena 200 m across, a
/// rifle shot in at most 19 bytes where its `f32` points took 28, a 12-pellet shotgun shot in
/// at most 85 (160). A client draws the origin within half a millimetre an axis (an honest
/// client's own origin, which it rounds so before it traces, exactly) and each end within half
/// a centimetre: [`as_sent`](Self::as_sent) gives the shot as it arrives.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(into = "CosmeticFireWire", from = "CosmeticFireWire")]
pub struct CosmeticFire {
    /// The shooter (mapped to the client's proxy on the way).
    pub shooter: Entity,
    /// The weapon's id (its place in the [`WeaponTable`](crate::WeaponTable)), for the
    /// effects to draw.
    pub weapon: u8,
    /// Where the shot started, metres.
    pub origin: Vec3,
    /// Where each pellet stopped (at a hit, the world or the range), metres. Shared: the
    /// server sends the same shot to every other client.
    pub ends: std::sync::Arc<[Vec3]>,
}

impl CosmeticFire {
    /// The shot as a client reads it from the wire: the origin at its millimetre, each end at
    /// its centimetre from there. Sending it again changes no bit (within 40 km of the
    /// world's origin), so a server that sends this draws every client the same shot,
    /// a listen server's own (handed the message unencoded) too.
    pub fn as_sent(&self) -> Self {
        CosmeticFireWire::from(self.clone()).into()
    }
}

/// [`CosmeticFire`]'s form on the wire.
#[derive(Serialize, Deserialize)]
struct CosmeticFireWire {
    #[serde(with = "unlag_net::wire_entity")]
    shooter: Entity,
    weapon: u8,
    /// The origin in whole millimetres.
    origin: [i32; 3],
    /// Each end in whole centimetres from the origin as read back.
    ends: Vec<[i32; 3]>,
}

impl From<CosmeticFire> for CosmeticFireWire {
    fn from(fire: CosmeticFire) -> Self {
        use unlag_core::quantize::{dequantize_millimetres, offset_centimetres};
        let origin = unlag_core::quantize::saturating_millimetres(fire.origin);
        // From the origin as the client reads it, so the ends come back at their centimetre.
        let from = dequantize_millimetres(origin);
        Self {
            shooter: fire.shooter,
            weapon: fire.weapon,
            origin,
            ends: fire
                .ends
                .iter()
                .map(|&end| offset_centimetres(from, end))
                .collect(),
        }
    }
}

impl From<CosmeticFireWire> for CosmeticFire {
    fn from(wire: CosmeticFireWire) -> Self {
        use unlag_core::quantize::{dequantize_millimetres, from_offset_centimetres};
        let origin = dequantize_millimetres(wire.origin);
        Self {
            shooter: wire.shooter,
            weapon: wire.weapon,
            origin,
            ends: wire
                .ends
                .into_iter()
                .map(|cm| from_offset_centimetres(origin, cm))
                .collect(),
        }
    }
}

impl MapEntities for CosmeticFire {
    fn map_entities<E: EntityMapper>(&mut self, mapper: &mut E) {
        self.shooter = mapper.get_mapped(self.shooter);
    }
}

/// Most shots in one [`CosmeticFires`] message (a frame with more sends several), so a message
/// stays small: 16 rifle shots take under 310 bytes, 16 twelve-pellet shotgun shots under
/// 1.4 kB (see [`CosmeticFire`]'s wire form).
pub const COSMETIC_BATCH: usize = 16;

/// Server → every other client, unreliable: the shots others fired in one server frame (at most
/// [`COSMETIC_BATCH`]), batched so a busy server sends each client one message a frame instead
/// of one per shot.
///
/// On the wire a sequence of shots, as a `Vec` of them goes: the [`encoded`](Self::encoded)
/// ones first, then [`shots`](Self::shots).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct CosmeticFires {
    /// The shots, in the order the server judged them. The combat plugin sends 1 to
    /// [`COSMETIC_BATCH`] accepted hitscan or shotgun shots, never the receiving client's own
    /// (projectiles come as [`ProjectileLaunched`] instead), all [`encoded`](Self::encoded):
    /// a received message holds them here.
    pub shots: Vec<CosmeticFire>,
    /// Shots encoded once for every client the server sends them to, sent before those in
    /// [`shots`](Self::shots) (the sender's side only: they arrive in `shots`, except on a
    /// listen server's own client, which lightyear hands the message unencoded: read them
    /// with [`into_shots`](Self::into_shots)). Their entities are not mapped on the way out.
    #[serde(skip)]
    pub encoded: unlag_net::EncodedRuns<CosmeticFire>,
}

impl CosmeticFires {
    /// Every shot it carries, the encoded ones (decoded) first.
    pub fn into_shots(self) -> impl Iterator<Item = CosmeticFire> {
        let encoded: Vec<CosmeticFire> = self.encoded.decode().collect();
        encoded.into_iter().chain(self.shots)
    }

    /// How many shots it carries.
    pub fn len(&self) -> usize {
        self.encoded.len() + self.shots.len()
    }

    /// Whether it carries none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes it into lightyear's buffer as postcard writes a `Vec` of its shots, copying the
    /// encoded ones' bytes.
    pub fn write(
        &self,
        writer: &mut unlag_net::MessageWriter,
    ) -> Result<(), unlag_net::MessageEncodeError> {
        // (Room for the encoded shots and their count at once, as a proxy update makes.)
        unlag_net::make_room(writer, 5 + self.encoded.byte_len());
        unlag_net::write_postcard(&self.len(), writer)?;
        self.encoded.write(writer);
        for shot in &self.shots {
            unlag_net::write_postcard(shot, writer)?;
        }
        Ok(())
    }

    /// Its size on the wire, bytes (what [`write`](Self::write) writes), without encoding
    /// its encoded shots again.
    pub fn wire_size(&self) -> usize {
        unlag_net::wire_size(&self.len())
            + self.encoded.byte_len()
            + self.shots.iter().map(unlag_net::wire_size).sum::<usize>()
    }
}

impl MapEntities for CosmeticFires {
    fn map_entities<E: EntityMapper>(&mut self, mapper: &mut E) {
        for shot in &mut self.shots {
            shot.map_entities(mapper);
        }
    }
}

/// Client → server, unreliable, sent again in every frame until the server's
/// [`ReloadTaken`] (or [`ReloadDone`]) for it arrives: reload the weapon (copies after the
/// first are ignored). Sent in every frame, it is in every packet the client sent after the
/// reload started, so the server may date a copy that arrived late (after a burst of losses)
/// by its view time, as far back as the last packet it had from the client before.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ReloadRequest {
    /// The id of the weapon to reload (its place in the [`WeaponTable`](crate::WeaponTable)).
    pub weapon: u8,
    /// The client's view time when the reload started, server seconds: the reload runs on the
    /// same clock as the shots' view times, so both sides end it at the same shot.
    pub view_time: f64,
}

/// Server → shooter, unreliable, once a frame while its copies come: the server has the
/// reload request of `weapon` that started at view time `view_time` (seconds), and the client
/// may stop sending it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ReloadTaken {
    /// The id of the weapon (its place in the [`WeaponTable`](crate::WeaponTable)).
    pub weapon: u8,
    /// The request's view time, seconds.
    pub view_time: f64,
}

/// Server → shooter, reliable: a reload finished.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ReloadDone {
    /// The id of the weapon reloaded (its place in the [`WeaponTable`](crate::WeaponTable)).
    pub weapon: u8,
    /// Rounds in it now.
    pub ammo: u32,
    /// The fire index of the last shot the server had taken before the reload.
    pub fire_index: u32,
}

/// Server → every client, reliable: a projectile was launched. Its flight is ballistic, so
/// this one message lets every client draw it for its whole life
/// ([`ClientProjectile`](crate::ClientProjectile)).
///
/// On the wire (every client that sees or hears a launch is sent it), the origin goes in whole
/// millimetres, the velocity in whole mm/s and the launch time in whole microseconds, zigzag
/// varints: in an arena 200 m across, a launch at 40 m/s an hour into a match in at most
/// 31 bytes where its `f32` points and `f64` time took 38 to 42. A client draws a flight
/// within half a millimetre of its origin and drifting at most 0.9 mm/s (under a centimetre
/// over 10 s of flight); [`as_sent`](Self::as_sent) gives the launch as it arrives.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(into = "ProjectileLaunchedWire", from = "ProjectileLaunchedWire")]
pub struct ProjectileLaunched {
    /// The shooter (mapped to the client's entity on the way).
    #[serde(with = "unlag_net::wire_entity")]
    pub shooter: Entity,
    /// Whether this client fired it (its fake projectile gives way to this one).
    pub own: bool,
    /// The weapon's id (its place in the [`WeaponTable`](crate::WeaponTable)): the client
    /// takes the projectile's gravity and lifetime from its own table's entry.
    pub weapon: u8,
    /// The shot's fire index.
    pub fire_index: u32,
    /// Where it started, metres.
    pub origin: Vec3,
    /// Its launch velocity, m/s.
    pub velocity: Vec3,
    /// The server time at which it was at `origin`, seconds (the server launched it this much
    /// in the past: its catch-up).
    pub launch_time: f64,
    /// This very message's bytes, encoded once for every client the server sends it to (not
    /// on the wire; empty on a client).
    #[serde(skip)]
    pub encoded: unlag_net::PreEncoded,
}

impl ProjectileLaunched {
    /// The launch as a client reads it from the wire: origin and velocity at their
    /// thousandths, the launch time at its microsecond. Sending it again changes no bit, so a
    /// server that sends this draws every client the same flight, a listen server's own
    /// (handed the message unencoded) too.
    pub fn as_sent(&self) -> Self {
        ProjectileLaunchedWire::from(self.clone()).into()
    }
}

/// [`ProjectileLaunched`]'s form on the wire.
#[derive(Serialize, Deserialize)]
struct ProjectileLaunchedWire {
    #[serde(with = "unlag_net::wire_entity")]
    shooter: Entity,
    own: bool,
    weapon: u8,
    fire_index: u32,
    /// The origin in whole millimetres.
    origin: [i32; 3],
    /// The velocity in whole mm/s.
    velocity: [i32; 3],
    /// The launch time in whole microseconds.
    launch_time: u64,
}

impl From<ProjectileLaunched> for ProjectileLaunchedWire {
    fn from(launch: ProjectileLaunched) -> Self {
        use unlag_core::quantize::{saturating_micros, saturating_millimetres};
        Self {
            shooter: launch.shooter,
            own: launch.own,
            weapon: launch.weapon,
            fire_index: launch.fire_index,
            origin: saturating_millimetres(launch.origin),
            // (Thousandths of a metre a second, as millimetres of a point.)
            velocity: saturating_millimetres(launch.velocity),
            launch_time: saturating_micros(launch.launch_time),
        }
    }
}

impl From<ProjectileLaunchedWire> for ProjectileLaunched {
    fn from(wire: ProjectileLaunchedWire) -> Self {
        use unlag_core::quantize::{dequantize_millimetres, from_micros};
        Self {
            shooter: wire.shooter,
            own: wire.own,
            weapon: wire.weapon,
            fire_index: wire.fire_index,
            origin: dequantize_millimetres(wire.origin),
            velocity: dequantize_millimetres(wire.velocity),
            launch_time: from_micros(wire.launch_time),
            encoded: unlag_net::PreEncoded::default(),
        }
    }
}

impl unlag_net::CarriesEncoding for ProjectileLaunched {
    fn pre_encoded(&self) -> &unlag_net::PreEncoded {
        &self.encoded
    }

    fn pre_encoded_mut(&mut self) -> &mut unlag_net::PreEncoded {
        &mut self.encoded
    }
}

impl MapEntities for ProjectileLaunched {
    fn map_entities<E: EntityMapper>(&mut self, mapper: &mut E) {
        self.shooter = mapper.get_mapped(self.shooter);
    }
}

/// Server → every client, reliable: a projectile's flight ended.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ProjectileImpact {
    /// The shooter (mapped to the client's entity on the way).
    #[serde(with = "unlag_net::wire_entity")]
    pub shooter: Entity,
    /// Whether this client fired it.
    pub own: bool,
    /// The weapon's id (its place in the [`WeaponTable`](crate::WeaponTable)), as in the
    /// [`ProjectileLaunched`] before it.
    pub weapon: u8,
    /// The shot's fire index.
    pub fire_index: u32,
    /// Where it ended, metres.
    pub point: Vec3,
    /// Whether it exploded (it hit a character or the world); false when its lifetime ran out.
    pub exploded: bool,
    /// Whether it was judged against the past (see [`FireResult::rewound`]).
    pub rewound: bool,
    /// What it damaged, in the shooter's copy (its verdict, as a hitscan shot's
    /// [`FireResult`]): the character it hit directly (if any) first, then the splash. Every
    /// other client's copy lists none, as a hitscan shot's [`CosmeticFire`] names none (what
    /// a character took reaches its own client and the others through the game's health).
    /// On the wire a sequence, as a `Vec` goes.
    pub hits: std::sync::Arc<[ConfirmedHit]>,
    /// This very message's bytes, encoded once for every client the server sends it to (not
    /// on the wire; empty on a client).
    #[serde(skip)]
    pub encoded: unlag_net::PreEncoded,
}

impl unlag_net::CarriesEncoding for ProjectileImpact {
    fn pre_encoded(&self) -> &unlag_net::PreEncoded {
        &self.encoded
    }

    fn pre_encoded_mut(&mut self) -> &mut unlag_net::PreEncoded {
        &mut self.encoded
    }
}

impl MapEntities for ProjectileImpact {
    fn map_entities<E: EntityMapper>(&mut self, mapper: &mut E) {
        self.shooter = mapper.get_mapped(self.shooter);
        // The hits (the shooter's copy's) are shared with the copy the server built, and
        // lightyear maps a clone on its way out where every entity maps to itself: copied
        // only from the first that maps elsewhere (a received message holds the only
        // reference: not copied then either). Each is mapped once.
        let Some((first, mapped)) = self.hits.iter().enumerate().find_map(|(i, h)| {
            let mapped = mapper.get_mapped(h.target);
            (mapped != h.target).then_some((i, mapped))
        }) else {
            return;
        };
        let hits = std::sync::Arc::make_mut(&mut self.hits);
        hits[first].target = mapped;
        for h in &mut hits[first + 1..] {
            h.target = mapper.get_mapped(h.target);
        }
    }
}
