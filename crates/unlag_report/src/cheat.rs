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
//!   rifle shot, as if each weapon had its own trigger.
//!
//! The cheating shots are sent straight to the server (the combat plugin's client would not
//! send them), once each.

use bevy::prelude::*;
use lightyear::prelude::*;
use std::collections::VecDeque;
use unlag::combat::{FireRequest, Weapons, WireClaim, shot_directions};
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
}

/// Every cheat, in `--help`'s order.
pub const CHEATS: [Cheat; 8] = [
    Cheat::Speed,
    Cheat::Teleport,
    Cheat::Backtrack,
    Cheat::RapidFire,
    Cheat::DuplicateClaims,
    Cheat::FalseExtrapolate,
    Cheat::SkipIndices,
    Cheat::EveryWeapon,
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
        }
    }
}

/// How far back a backtracking shot claims, seconds.
pub const BACKTRACK: f64 = 0.15;

/// The cheater's state (resource on client 0's App).
#[derive(Resource, Clone, Debug)]
pub struct Cheater {
    /// The cheat.
    pub cheat: Cheat,
    /// Frames since it started.
    pub frame: u64,
    /// The next fire index it sends (well above the honest ones).
    pub next_index: u32,
    /// Shots sent.
    pub sent: u64,
    /// What it drew, by frame: (view time, proxy, pose, a box's centre).
    history: VecDeque<(f64, Entity, RenderedPose, Vec3)>,
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
        }
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
    buffers: Query<&unlag::smoothing::ProxySmoothing>,
    proxies: Query<(Entity, &RenderedPose, &Children)>,
    boxes: Query<&GlobalTransform, With<HitBox>>,
    mut link: Query<&mut MessageSender<FireRequest>, With<Client>>,
) {
    let Some(mut c) = cheater else {
        return;
    };
    c.frame += 1;
    if c.cheat == Cheat::Teleport
        && c.frame.is_multiple_of(480)
        && let Some(cheats) = cheats.as_mut()
    {
        cheats.teleport = Some(Vec3::new(3.0, 0.0, 0.0));
    }
    if !c.cheat.shoots() {
        return;
    }
    // Remember what was drawn: the first proxy and one of its boxes.
    if let Some((proxy, pose, children)) = proxies.iter().next()
        && let Some(centre) = children
            .iter()
            .filter_map(|b| boxes.get(b).ok())
            .map(|g| g.translation())
            .next()
    {
        c.history.push_back((pose.view_time, proxy, *pose, centre));
        if c.history.len() > 240 {
            c.history.pop_front();
        }
    }
    let every = match c.cheat {
        Cheat::RapidFire => 1,
        // The shotgun's full rate (0.8 s at 240 fps), two frames late.
        Cheat::SkipIndices => 194,
        // The rifle's full rate (0.1 s).
        Cheat::EveryWeapon => 24,
        _ => 36,
    };
    let (Ok(me), Some(table), Some(newest)) = (
        own.single(),
        weapons.table.as_ref(),
        c.history.back().map(|h| h.0),
    ) else {
        return;
    };
    if !c.frame.is_multiple_of(every) || c.history.len() < 240 {
        return;
    }
    let back = if c.cheat == Cheat::Backtrack {
        BACKTRACK
    } else {
        0.0
    };
    let Some(&(view_time, proxy, pose, centre)) = c
        .history
        .iter()
        .rev()
        .find(|(t, ..)| *t <= newest - back + 1e-9)
    else {
        return;
    };
    let weapon = if c.cheat == Cheat::SkipIndices {
        "shotgun"
    } else {
        "rifle"
    };
    let (Some(id), Some(spec), Some(shotgun), Some(shotgun_spec)) = (
        table.id(weapon),
        table.id(weapon).and_then(|id| table.get(id)),
        table.id("shotgun"),
        table.id("shotgun").and_then(|id| table.get(id)),
    ) else {
        return;
    };
    let eye = me.0.feet + Vec3::Y * 1.6;
    let aim = (centre - eye).normalize_or_zero();
    // The delay it draws with now, as its reports say.
    let sent_delay = c.history.back().map_or(0.0, |h| h.2.delay);
    if c.cheat == Cheat::SkipIndices {
        c.next_index += 8;
    }
    let fire_index = c.next_index;
    c.next_index += 1;
    let claim = WireClaim::drawn(proxy, &pose, true);
    let mut claims = vec![claim.clone()];
    match c.cheat {
        Cheat::DuplicateClaims => {
            if let Some(&(_, _, older, _)) =
                c.history.iter().rev().find(|(t, ..)| *t <= newest - 0.1)
            {
                claims.push(WireClaim::drawn(proxy, &older, true));
            }
        }
        Cheat::FalseExtrapolate => {
            // The pair around 30 ms after the view time, from the proxy's own buffer (a
            // client drawing 80 ms behind at 20 Hz holds states about that far ahead).
            let t = view_time + 0.03;
            let pair = buffers.get(proxy).ok().and_then(|b| {
                let states: Vec<_> = b.buffer.states().copied().collect();
                states
                    .windows(2)
                    .find(|w| w[0].time <= t && t < w[1].time)
                    .map(|w| (w[0], w[1]))
            });
            let Some((a, b)) = pair else {
                return;
            };
            claims[0].from = a.tick;
            claims[0].to = b.tick;
            claims[0].alpha = ((t - a.time) / (b.time - a.time)) as f32;
            claims[0].mode = unlag::core::SmoothingMode::Extrapolate;
        }
        _ => {}
    }
    let Ok(mut sender) = link.single_mut() else {
        return;
    };
    c.sent += 1;
    sender.send::<UnreliableChannel>(FireRequest {
        weapon: id,
        fire_index,
        origin: eye,
        aim,
        directions: shot_directions(spec, fire_index, aim),
        view_time,
        judged_time: view_time,
        move_seq: None,
        sent_view_time: view_time,
        sent_delay,
        claims: claims.clone(),
    });
    // The shotgun beside every fourth rifle shot, in the same frame.
    if c.cheat == Cheat::EveryWeapon && c.sent % 4 == 1 {
        let index = c.next_index;
        c.next_index += 1;
        c.sent += 1;
        sender.send::<UnreliableChannel>(FireRequest {
            weapon: shotgun,
            fire_index: index,
            origin: eye,
            aim,
            directions: shot_directions(shotgun_spec, index, aim),
            view_time,
            judged_time: view_time,
            move_seq: None,
            sent_view_time: view_time,
            sent_delay,
            claims,
        });
    }
}
