//! `--cheat`: client 0 cheats, and the report shows what the server caught.
//!
//! - **speed**: its clock runs 1.5× fast (every move claims more time than passed);
//! - **teleport**: every 2 s it moves its character 3 m at once and claims the new position;
//! - **backtrack**: it fires with a view time 150 ms older than its screen's, claiming the
//!   poses it drew then (the copy's stamp moved with it);
//! - **rapid-fire**: it sends a rifle shot every frame, past its own fire-rate check;
//! - **duplicate-claims**: it claims each target twice, as drawn and as drawn 0.1 s before;
//! - **false-extrapolate**: it claims a pose 30 ms newer than drawn, from its buffer, calling
//!   the proxy `Extrapolate`;
//! - **skip-indices**: it skips eight fire indices before each shotgun shot (to pick a spread
//!   pattern), at the shotgun's full rate;
//! - **every-weapon**: it fires the rifle at its full rate and the shotgun beside every fourth
//!   rifle shot, as if each weapon had its own trigger;
//! - **held-claim**: it claims the target held on the state it drew 0.5 s before, aimed where
//!   that pose stands (about 0.5 s of backtracking if a held pose counted at any age);
//! - **ease-magnet**: it aims 0.9 m beside the target and claims an ease of as much, pulling
//!   the hit box onto its ray;
//! - **pong-delay**: it backtracks 150 ms while holding its pongs 300 ms (the server's RTT,
//!   and its estimate of the view time, read that much older);
//! - **inflated-trip**: it backtracks 150 ms while holding its pongs 150 ms and stamping its
//!   view reports 150 ms older (their median lag then sits as far above the trip as the RTT
//!   they are held to reads);
//! - **slow-reports**: it backtracks 150 ms while claiming 100-ms frames in delay reports sent
//!   at 10 Hz;
//! - **long-delay**: it reports a delay 100 ms longer than it draws with (its reports' view
//!   times as much older, so they agree) and stamps its shots as old;
//! - **pair-magnet**: it claims the target blended between one of the states up to 0.5 s
//!   before the one it drew towards and that one, at the moment it drew (skipping the states
//!   it had between), the one whose blend lands furthest from the pose drawn, and aims there.
//!
//! The cheating shots are sent straight to the server (the combat plugin's client would not
//! send them), in as many copies over the next frames as an honest shot on a lossy link
//! (`unlag::combat::FIRE_COPIES`): a shot lost on the way gains the cheater nothing, so a
//! cheater sends copies too.

use bevy::prelude::*;
use lightyear::prelude::*;
use std::collections::VecDeque;
use unlag::combat::{
    EVERY_PELLET, FIRE_COPIES, FireRequest, WeaponSpec, WeaponTable, Weapons, WireClaim,
    shot_directions,
};
use unlag::core::ProxyState;
use unlag::movement::{CharacterMovement, MovementState};
use unlag::net::{AutonomousProxy, UnreliableChannel};
use unlag::rewind::HitBox;
use unlag::smoothing::RenderedPose;
use unlag_movement::Cheats;

/// What client 0 does wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cheat {
    /// A 1.5× fast clock.
    Speed,
    /// A 3 m jump every 2 s.
    Teleport,
    /// Shots 150 ms older than the screen.
    Backtrack,
    /// A rifle shot every frame.
    RapidFire,
    /// Two claims on each target: as drawn and as drawn 0.1 s before.
    DuplicateClaims,
    /// A pose 30 ms newer than drawn, claimed as `Extrapolate`.
    FalseExtrapolate,
    /// Eight fire indices skipped before each shotgun shot.
    SkipIndices,
    /// The rifle at its full rate and the shotgun beside it.
    EveryWeapon,
    /// The target claimed held on the state drawn 0.5 s before.
    HeldClaim,
    /// A 0.9-m ease pulling the hit box onto a ray beside it.
    EaseMagnet,
    /// Backtracking 150 ms with pongs held 300 ms.
    PongDelay,
    /// Backtracking 150 ms with pongs held 150 ms and view reports stamped 150 ms older.
    InflatedTrip,
    /// Backtracking 150 ms with 10-Hz reports claiming 100-ms frames.
    SlowReports,
    /// A delay reported 100 ms longer than drawn, shots stamped as old.
    LongDelay,
    /// A pair of states picked to move the pose drawn.
    PairMagnet,
}

/// Every cheat, in `--help`'s order.
pub const CHEATS: [Cheat; 15] = [
    Cheat::Speed,
    Cheat::Teleport,
    Cheat::Backtrack,
    Cheat::RapidFire,
    Cheat::DuplicateClaims,
    Cheat::FalseExtrapolate,
    Cheat::SkipIndices,
    Cheat::EveryWeapon,
    Cheat::HeldClaim,
    Cheat::EaseMagnet,
    Cheat::PongDelay,
    Cheat::InflatedTrip,
    Cheat::SlowReports,
    Cheat::LongDelay,
    Cheat::PairMagnet,
];

impl Cheat {
    /// The cheat named on the command line.
    pub fn parse(name: &str) -> Option<Self> {
        CHEATS.into_iter().find(|c| c.name() == name)
    }

    /// Whether it sends shots of its own (client 0 then fires no honest ones).
    pub fn shoots(&self) -> bool {
        !matches!(self, Self::Speed | Self::Teleport)
    }

    /// Its command-line name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Speed => "speed",
            Self::Teleport => "teleport",
            Self::Backtrack => "backtrack",
            Self::RapidFire => "rapid-fire",
            Self::DuplicateClaims => "duplicate-claims",
            Self::FalseExtrapolate => "false-extrapolate",
            Self::SkipIndices => "skip-indices",
            Self::EveryWeapon => "every-weapon",
            Self::HeldClaim => "held-claim",
            Self::EaseMagnet => "ease-magnet",
            Self::PongDelay => "pong-delay",
            Self::InflatedTrip => "inflated-trip",
            Self::SlowReports => "slow-reports",
            Self::LongDelay => "long-delay",
            Self::PairMagnet => "pair-magnet",
        }
    }
}

/// How far back a backtracking shot claims, seconds.
pub const BACKTRACK: f64 = 0.15;

/// How much longer than drawn the long-delay cheat reports its delay, seconds.
pub const LONG_DELAY: f64 = 0.1;

/// How old the state the held-claim cheat holds is, seconds.
pub const HELD_FOR: f64 = 0.5;

/// How far beside the target the ease magnet aims, metres.
pub const MAGNET: f32 = 0.9;

/// How far back the pair magnet looks for the state to blend from, seconds.
pub const PAIR_SPAN: f64 = 0.5;

/// The cheater's state (resource on client 0's App).
#[derive(Resource, Clone, Debug)]
pub struct Cheater {
    /// What client 0 does wrong, chosen with `--cheat`; the same for the whole match.
    pub cheat: Cheat,
    /// Frames since it started.
    pub frame: u64,
    /// The next fire index it sends (well above the honest ones).
    pub next_index: u32,
    /// Shots sent.
    pub sent: u64,
    /// What it drew, by frame: (view time, proxy, pose, a box's centre), the last second.
    history: VecDeque<(f64, Entity, RenderedPose, Vec3)>,
    /// When it next acts (shoots, or teleports), seconds of its App's clock: paced by time,
    /// so a cheater at 15 frames a second cheats as often as one at 240.
    next_act: Option<f64>,
    /// Shots whose copies are still due, when each was fired (seconds of its App's clock),
    /// and how many copies are left.
    copies: Vec<(FireRequest, f64, u8)>,
    /// The states its buffers held lately, by proxy and tick (the pair magnet's memory).
    states: std::collections::HashMap<Entity, std::collections::BTreeMap<u32, ProxyState>>,
}

impl Cheater {
    /// A cheater about to start.
    pub fn new(cheat: Cheat) -> Self {
        Self {
            cheat,
            frame: 0,
            next_index: 1 << 24,
            sent: 0,
            history: VecDeque::new(),
            next_act: None,
            copies: Vec::new(),
            states: Default::default(),
        }
    }
}

/// The held-claim cheat's claim on `proxy`, drawn with `pose`: state A of the pose (as
/// `smoothing` buffers it) run on for the whole extrapolation a claim may carry and held there,
/// and where `point` (a box's centre as drawn with `pose`) stands on that held pose. `None` when
/// the buffer no longer holds the state. (The combat tests' held-claim cheat takes it too.)
pub fn held_claim(
    proxy: Entity,
    smoothing: &unlag::smoothing::ProxySmoothing,
    pose: &RenderedPose,
    point: Vec3,
) -> Option<(WireClaim, Vec3)> {
    const HELD_AHEAD: f32 = 0.25;
    let a = smoothing.buffer.get(pose.from)?;
    let stands = a.position + a.velocity * HELD_AHEAD;
    let mut claim = WireClaim::drawn(proxy, pose, EVERY_PELLET);
    claim.from = a.tick;
    claim.to = a.tick;
    claim.alpha = HELD_AHEAD;
    claim.ease = Vec3::ZERO;
    claim.mode = unlag::core::SmoothingMode::Hermite;
    Some((claim, stands + (point - pose.position)))
}

/// The ease-magnet cheat's offset: `by` metres to the right of `aim`, level.
pub fn magnet(aim: Vec3, by: f32) -> Vec3 {
    aim.cross(Vec3::Y).normalize_or_zero() * by
}

/// Starts the link cheats: on client 0's App its reports, on the server's the RTT its held
/// pongs make it read.
pub fn start_link_cheat(tb: &mut unlag_testbed::Testbed, cheat: Cheat) {
    match cheat {
        Cheat::PongDelay => tb
            .server_world_mut()
            .insert_resource(unlag::net::NetCheats {
                // Client 0's netcode id.
                pong_delay: Some((1, 2.0 * BACKTRACK)),
                ..default()
            }),
        Cheat::InflatedTrip => {
            tb.server_world_mut()
                .insert_resource(unlag::net::NetCheats {
                    pong_delay: Some((1, BACKTRACK)),
                    ..default()
                });
            tb.client_world_mut(0)
                .insert_resource(unlag::net::NetCheats {
                    view_report_offset: BACKTRACK,
                    ..default()
                });
        }
        Cheat::SlowReports => tb
            .client_world_mut(0)
            .insert_resource(unlag::net::NetCheats {
                claimed_frame: Some(0.1),
                report_interval: Some(0.1),
                ..default()
            }),
        Cheat::LongDelay => tb
            .client_world_mut(0)
            .insert_resource(unlag::net::NetCheats {
                view_report_offset: LONG_DELAY,
                reported_delay_extra: LONG_DELAY,
                ..default()
            }),
        _ => {}
    }
}

/// Starts the movement cheats (client 0, when the measured span starts).
pub fn start_movement_cheat(world: &mut World, cheat: Cheat) {
    if cheat == Cheat::Speed {
        world.insert_resource(Cheats {
            clock_rate: 1.5,
            teleport: None,
        });
    } else if cheat == Cheat::Teleport {
        world.insert_resource(Cheats::default());
    }
}

/// `Update` on client 0: runs the cheat of the frame.
#[allow(clippy::too_many_arguments)]
pub fn cheat(
    cheater: Option<ResMut<Cheater>>,
    mut cheats: Option<ResMut<Cheats>>,
    weapons: Res<Weapons>,
    own: Query<&MovementState<CharacterMovement>, With<AutonomousProxy>>,
    buffers: Query<(Entity, &unlag::smoothing::ProxySmoothing)>,
    proxies: Query<(Entity, &RenderedPose, &Children)>,
    boxes: Query<&GlobalTransform, With<HitBox>>,
    mut link: Query<&mut MessageSender<FireRequest>, With<Client>>,
    time: Res<Time>,
) {
    let Some(mut c) = cheater else {
        return;
    };
    c.frame += 1;
    let now = time.elapsed_secs_f64();
    // One copy of each recent shot per frame, stamped as an honest copy is: with the view time
    // of its frame (as old as the shot's, the time since added).
    if let Ok(mut sender) = link.single_mut() {
        for (request, fired, left) in &mut c.copies {
            request.sent_view_time = request.view_time + (now - *fired);
            sender.send::<UnreliableChannel>(request.clone());
            *left -= 1;
        }
    }
    c.copies.retain(|(.., left)| *left > 0);
    let every = c.cheat.every();
    let due = *c.next_act.get_or_insert(now + every);
    if c.cheat == Cheat::Teleport
        && now >= due
        && let Some(cheats) = cheats.as_mut()
    {
        c.next_act = Some(now + every);
        cheats.teleport = Some(Vec3::new(3.0, 0.0, 0.0));
    }
    if !c.cheat.shoots() {
        return;
    }
    c.remember(&proxies, &boxes);
    if c.cheat == Cheat::PairMagnet {
        c.remember_states(&buffers);
    }
    let (Ok(me), Some(table), Some(newest)) = (
        own.single(),
        weapons.table.as_ref(),
        c.history.back().map(|h| h.0),
    ) else {
        return;
    };
    // Shoots once it remembers enough to backtrack.
    let remembered = c.history.front().map_or(0.0, |h| newest - h.0);
    if now < due || remembered < 0.6 {
        return;
    }
    c.next_act = Some(due.max(now - every) + every);
    let back = c.cheat.back();
    let Some(&drawn) = c
        .history
        .iter()
        .rev()
        .find(|(t, ..)| *t <= newest - back + 1e-9)
    else {
        return;
    };
    let Some(((id, spec), (shotgun, shotgun_spec))) = c.cheat.weapons(table) else {
        return;
    };
    let eye = me.0.feet + Vec3::Y * 1.6;
    let Some(shot) = c.aim(drawn, newest, eye, &buffers) else {
        return;
    };
    let Ok(mut sender) = link.single_mut() else {
        return;
    };
    c.sent += 1;
    let mut copies = Vec::new();
    let mut send = |weapon: u8, spec: &WeaponSpec, fire_index: u32| {
        let request = FireRequest {
            weapon,
            fire_index,
            origin: eye,
            aim: shot.aim,
            directions: shot_directions(spec, fire_index, shot.aim),
            view_time: shot.view_time,
            judged_time: shot.view_time,
            delay_cap: None,
            move_seq: None,
            sent_view_time: shot.view_time,
            sent_delay: shot.sent_delay,
            claims: shot.claims.clone(),
        };
        sender.send::<UnreliableChannel>(request.clone());
        copies.push((request, now, FIRE_COPIES - 1));
    };
    send(id, spec, shot.fire_index);
    // The shotgun beside every fourth rifle shot, in the same frame.
    if c.cheat == Cheat::EveryWeapon && c.sent % 4 == 1 {
        let index = c.next_index;
        c.next_index += 1;
        c.sent += 1;
        send(shotgun, shotgun_spec, index);
    }
    c.copies.extend(copies);
}

/// A cheating shot: its fire index, aim, the view time it stamps, the delay it reports
/// (seconds) and its claims.
struct CheatShot {
    fire_index: u32,
    aim: Vec3,
    view_time: f64,
    sent_delay: f64,
    claims: Vec<WireClaim>,
}

impl Cheat {
    /// Seconds between two acts.
    fn every(self) -> f64 {
        match self {
            Cheat::Teleport => 2.0,
            Cheat::RapidFire => 0.0,
            // The shotgun's full rate (0.8 s), a little late.
            Cheat::SkipIndices => 0.81,
            // The rifle's full rate.
            Cheat::EveryWeapon => 0.1,
            _ => 0.15,
        }
    }

    /// The weapon its shots fire (the shotgun to skip fire indices, else the rifle), and the
    /// shotgun, each with its id in `table`.
    fn weapons(self, table: &WeaponTable) -> Option<((u8, &WeaponSpec), (u8, &WeaponSpec))> {
        let weapon = if self == Cheat::SkipIndices {
            "shotgun"
        } else {
            "rifle"
        };
        let with_spec = |name: &str| table.id(name).and_then(|id| Some((id, table.get(id)?)));
        Some((with_spec(weapon)?, with_spec("shotgun")?))
    }

    /// How old a view its shots claim, seconds.
    fn back(self) -> f64 {
        match self {
            Cheat::Backtrack | Cheat::PongDelay | Cheat::InflatedTrip | Cheat::SlowReports => {
                BACKTRACK
            }
            Cheat::LongDelay => LONG_DELAY,
            Cheat::HeldClaim => HELD_FOR,
            _ => 0.0,
        }
    }
}

impl Cheater {
    /// Remembers the states every proxy's buffer holds (the last 200 of each).
    fn remember_states(&mut self, buffers: &Query<(Entity, &unlag::smoothing::ProxySmoothing)>) {
        for (proxy, buffer) in buffers {
            let kept = self.states.entry(proxy).or_default();
            for state in buffer.buffer.states() {
                kept.insert(state.tick, *state);
            }
            while kept.len() > 200 {
                kept.pop_first();
            }
        }
    }

    /// The pair magnet's claim in place of `claim` and its offset from the pose drawn,
    /// metres: of the states up to [`PAIR_SPAN`] before the one `claim` drew towards, the one
    /// whose blend with it at the moment drawn lands furthest from the pose drawn.
    fn pair_magnet(&self, claim: &WireClaim) -> Option<(WireClaim, Vec3)> {
        let states = self.states.get(&claim.target)?;
        let (a, b) = (states.get(&claim.from)?, states.get(&claim.to)?);
        if a.tick == b.tick {
            return None;
        }
        let moment = a.time + f64::from(claim.alpha) * (b.time - a.time);
        let drawn = unlag::core::replay(claim.mode, a, b, claim.alpha).0;
        let (far, alpha, offset) = states
            .range(..claim.from)
            .map(|(_, st)| st)
            .filter(|st| st.time >= b.time - PAIR_SPAN)
            .map(|far| {
                let alpha = ((moment - far.time) / (b.time - far.time)) as f32;
                let at = unlag::core::replay(claim.mode, far, b, alpha).0;
                (far, alpha, at - drawn)
            })
            .max_by(|x, y| x.2.length().total_cmp(&y.2.length()))?;
        let mut picked = claim.clone();
        (picked.from, picked.alpha) = (far.tick, alpha);
        Some((picked, offset))
    }

    /// Remembers what was drawn this frame: the first proxy and one of its boxes, for a
    /// second.
    fn remember(
        &mut self,
        proxies: &Query<(Entity, &RenderedPose, &Children)>,
        boxes: &Query<&GlobalTransform, With<HitBox>>,
    ) {
        if let Some((proxy, pose, children)) = proxies.iter().next()
            && let Some(centre) = children
                .iter()
                .filter_map(|b| boxes.get(b).ok())
                .map(|g| g.translation())
                .next()
        {
            self.history
                .push_back((pose.view_time, proxy, *pose, centre));
            while self
                .history
                .front()
                .is_some_and(|h| h.0 < pose.view_time - 1.0)
            {
                self.history.pop_front();
            }
        }
    }

    /// The cheating shot at what was `drawn` (view time, proxy, pose, a box's centre) from
    /// `eye`, `newest` being the newest view time remembered: its aim and claims as the cheat
    /// bends them, and its fire index. `None` when the cheat finds nothing to bend.
    fn aim(
        &mut self,
        (view_time, proxy, pose, centre): (f64, Entity, RenderedPose, Vec3),
        newest: f64,
        eye: Vec3,
        buffers: &Query<(Entity, &unlag::smoothing::ProxySmoothing)>,
    ) -> Option<CheatShot> {
        let mut aim = (centre - eye).normalize_or_zero();
        // The delay it draws with now, as its reports say (the long-delay cheat's reports say
        // more).
        let sent_delay = self.history.back().map_or(0.0, |h| h.2.delay)
            + if self.cheat == Cheat::LongDelay {
                LONG_DELAY
            } else {
                0.0
            };
        // The held-claim cheat keeps the view time of now, claiming the old pose's state held.
        let view_time = if self.cheat == Cheat::HeldClaim {
            newest
        } else {
            view_time
        };
        let mut claim = WireClaim::drawn(proxy, &pose, EVERY_PELLET);
        match self.cheat {
            Cheat::HeldClaim => {
                let (held, stands) = buffers
                    .get(proxy)
                    .ok()
                    .and_then(|(_, b)| held_claim(proxy, b, &pose, centre))?;
                aim = (stands - eye).normalize_or_zero();
                claim = held;
            }
            Cheat::EaseMagnet => {
                let side = magnet(aim, MAGNET);
                aim = (centre + side - eye).normalize_or_zero();
                claim.ease += side;
            }
            Cheat::PairMagnet => {
                let (picked, offset) = self.pair_magnet(&claim)?;
                aim = (centre + offset - eye).normalize_or_zero();
                claim = picked;
            }
            _ => {}
        }
        if self.cheat == Cheat::SkipIndices {
            self.next_index += 8;
        }
        let fire_index = self.next_index;
        self.next_index += 1;
        let mut claims = vec![claim];
        match self.cheat {
            Cheat::DuplicateClaims => {
                if let Some(&(_, _, older, _)) =
                    self.history.iter().rev().find(|(t, ..)| *t <= newest - 0.1)
                {
                    claims.push(WireClaim::drawn(proxy, &older, EVERY_PELLET));
                }
            }
            Cheat::FalseExtrapolate => {
                // The pair around 30 ms after the view time, from the proxy's own buffer (a
                // client drawing 80 ms behind at 20 Hz holds states about that far ahead).
                let t = view_time + 0.03;
                let (a, b) = buffers.get(proxy).ok().and_then(|(_, b)| {
                    let states: Vec<_> = b.buffer.states().copied().collect();
                    states
                        .windows(2)
                        .find(|w| w[0].time <= t && t < w[1].time)
                        .map(|w| (w[0], w[1]))
                })?;
                claims[0].from = a.tick;
                claims[0].to = b.tick;
                claims[0].alpha = ((t - a.time) / (b.time - a.time)) as f32;
                claims[0].mode = unlag::core::SmoothingMode::Extrapolate;
            }
            _ => {}
        }
        Some(CheatShot {
            fire_index,
            aim,
            view_time,
            sent_delay,
            claims,
        })
    }
}
