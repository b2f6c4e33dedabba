//! `--cheat`: client 0 cheats, and the report shows what the server caught.
//!
//! - **speed**: its clock runs 1.5× fast (every move claims more time than passed);
//! - **teleport**: every 2 s it moves its character 3 m at once and claims the new position;
//! - **backtrack**: it fires with a view time 150 ms older than its screen's, claiming the
//!   poses it drew then (the copy's stamp moved with it);
//! - **rapid-fire**: it sends a rifle shot every frame, past its own fire-rate check.
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
}

impl Cheat {
    /// The cheat named on the command line.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "speed" => Some(Self::Speed),
            "teleport" => Some(Self::Teleport),
            "backtrack" => Some(Self::Backtrack),
            "rapid-fire" => Some(Self::RapidFire),
            _ => None,
        }
    }

    /// Its command-line name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Speed => "speed",
            Self::Teleport => "teleport",
            Self::Backtrack => "backtrack",
            Self::RapidFire => "rapid-fire",
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
pub fn cheat(
    cheater: Option<ResMut<Cheater>>,
    mut cheats: Option<ResMut<Cheats>>,
    weapons: Res<Weapons>,
    own: Query<&MovementState<CharacterMovement>, With<AutonomousProxy>>,
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
    if !matches!(c.cheat, Cheat::Backtrack | Cheat::RapidFire) {
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
    let every = if c.cheat == Cheat::RapidFire { 1 } else { 36 };
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
    let (Some(rifle), Some(spec)) = (
        table.id("rifle"),
        table.id("rifle").and_then(|id| table.get(id)),
    ) else {
        return;
    };
    let eye = me.0.feet + Vec3::Y * 1.6;
    let aim = (centre - eye).normalize_or_zero();
    let fire_index = c.next_index;
    c.next_index += 1;
    c.sent += 1;
    if let Ok(mut sender) = link.single_mut() {
        sender.send::<UnreliableChannel>(FireRequest {
            weapon: rifle,
            fire_index,
            origin: eye,
            aim,
            directions: shot_directions(spec, fire_index, aim),
            view_time,
            sent_view_time: view_time,
            claims: vec![WireClaim {
                target: proxy,
                from: pose.from,
                to: pose.to,
                alpha: pose.alpha,
                mode: pose.mode,
                ease: pose.ease,
                hit: true,
            }],
        });
    }
}
