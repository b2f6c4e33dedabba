//! What the report measures as a match plays: each client's ledger of what it saw and heard,
//! each proxy frame against the server's pose at its view time, and the agreement between what
//! shooters saw and what the server confirmed.

use crate::Agreement;
use crate::compare;
use bevy::prelude::*;
use bevy_replicon::shared::server_entity_map::ServerEntityMap;
use unlag::combat::{LocalFire, ProjectileExploded, ShotConfirmed};
use unlag::core::SampleKind;
use unlag::movement::CorrectionApplied;
use unlag::net::{NetClock, SentStates};
use unlag::rewind::FrameHistory;
use unlag::smoothing::RenderedPose;
use unlag_testbed::Testbed;

/// Per client: what it saw and heard (a resource on its App).
#[derive(Resource, Default)]
pub(crate) struct Ledger {
    /// Its shots as it fired them.
    pub(crate) seen: Vec<LocalFire>,
    /// The server's verdicts on them.
    pub(crate) verdicts: Vec<ShotConfirmed>,
    /// Its own projectiles' impacts.
    pub(crate) impacts: Vec<ProjectileExploded>,
    /// How far each correction moved its character, metres.
    pub(crate) corrections: Vec<f64>,
}

/// Keeps what a client saw and heard this frame in its [`Ledger`].
pub(crate) fn keep(
    ledger: Option<ResMut<Ledger>>,
    mut local: MessageReader<LocalFire>,
    mut verdicts: MessageReader<ShotConfirmed>,
    mut impacts: MessageReader<ProjectileExploded>,
    mut corrections: MessageReader<CorrectionApplied>,
) {
    let Some(mut ledger) = ledger else {
        return;
    };
    ledger.seen.extend(local.read().cloned());
    ledger.verdicts.extend(verdicts.read().cloned());
    ledger
        .impacts
        .extend(impacts.read().filter(|e| e.0.own).cloned());
    ledger
        .corrections
        .extend(corrections.read().filter_map(|c| {
            c.client_position
                .map(|p| f64::from(p.distance(c.server_position)))
        }));
}

/// A character's pose moving further than this between two of a client's frames is a
/// teleport, metres (the smoothing plugin's teleport distance).
const TELEPORT_DISTANCE: f32 = 3.84;

/// Over how long a character's mean speed is taken when judging a pop, seconds: longer than
/// the server's steps of a player's moves (a packet at a time), shorter than a turn.
const SPEED_WINDOW: f64 = 0.1;

/// Per-frame proxy figures, gathered by the runner.
#[derive(Default)]
pub(crate) struct ProxySamples {
    /// Per proxy frame: its drawn position's distance from the server's pose, metres.
    pub(crate) errors: Vec<f64>,
    /// Per proxy frame after the first: how far the error moved since the last, metres.
    pub(crate) jumps: Vec<f64>,
    /// Per client frame: the interpolation delay in effect, seconds.
    pub(crate) delays: Vec<f64>,
    /// Proxy frames sampled.
    pub(crate) frames: u64,
    /// Of those, frames held or extrapolated for want of a newer state.
    pub(crate) starved: u64,
    /// Per (client, proxy): the last frame's error, the server's pose it was measured
    /// against and the view time, server seconds.
    last_error: std::collections::HashMap<(usize, Entity), (Vec3, Vec3, f64)>,
    /// Per frame: how much more the error grew than the character itself moved (a pop the
    /// player sees beyond the motion), metres; frames across a teleport left out.
    pub(crate) pops: Vec<f64>,
    /// The same against the server track's motion alone, not the pace the client's states
    /// showed (see [`ProxySamples::sample`]), metres.
    pub(crate) track_pops: Vec<f64>,
}

impl ProxySamples {
    /// Every proxy client `i` draws, against the server's pose at its view time.
    pub(crate) fn sample(&mut self, tb: &Testbed, i: usize) {
        let client = tb.client_world(i);
        let server = tb.server_world();
        if let Some(clock) = client.get_resource::<NetClock>() {
            self.delays.push(clock.interpolation_delay);
        }
        let Some(map) = client.get_resource::<ServerEntityMap>() else {
            return;
        };
        let Some(mut poses) = client.try_query::<(Entity, &RenderedPose)>() else {
            return;
        };
        let mut drawn = Vec::new();
        for (entity, pose) in poses.iter(client) {
            drawn.push(entity);
            let Some((server_entity, history)) = map
                .to_server()
                .get(&entity)
                .and_then(|e| Some((e, server.get::<FrameHistory>(*e)?)))
            else {
                continue;
            };
            let Ok(pair) = history.poses().lookup(pose.view_time) else {
                continue;
            };
            let at = |time: f64| {
                let pair = history.poses().lookup(time).ok()?;
                Some(history.poses().pose(&pair, history.boxes().len()).0)
            };
            let truth = history.poses().pose(&pair, history.boxes().len()).0;
            let error = pose.position - truth;

            self.errors.push(f64::from(error.length()));
            let key = (i, entity);
            if let Some((last, last_truth, last_view)) =
                self.last_error.insert(key, (error, truth, pose.view_time))
            {
                let jump = error.distance(last);
                self.jumps.push(f64::from(jump));
                // A teleport (a respawn) moves the truth further than any walk in one frame.
                // A pop: the drawn proxy falls further from the truth than the character
                // itself moved this frame (a proxy that follows it stays close; one that
                // jumps, holds or lags far behind does not). The server's track moves in
                // steps of its ticks (a player's moves arrive a packet at a time), so the
                // character's motion in the frame is also taken at its mean speed over the
                // `SPEED_WINDOW` around the view time: a proxy drawn smoothly along a stepped
                // track does not pop.
                let moved = truth.distance(last_truth);
                let half = SPEED_WINDOW / 2.0;
                let mean_speed = at(pose.view_time - half)
                    .zip(at(pose.view_time + half))
                    .map_or(0.0, |(before, after)| {
                        after.distance(before) / SPEED_WINDOW as f32
                    });
                let track = moved.max(mean_speed * (pose.view_time - last_view).abs() as f32);
                // Nor does one drawn along the curve its states make, at that curve's pace:
                // the track may stand for half a second and then run (a player whose moves a
                // burst of loss held up, a 1-Hz proxy between its states), which no client
                // can know. The curve is this frame's (the two states it was drawn between,
                // or the one it ran on from), taken at this frame's view time and the last's:
                // a snap onto a new curve, or of the ease, still moves it further than that.
                let shown = server.get::<SentStates>(*server_entity).and_then(|sent| {
                    let (a, b) = (sent.get(pose.from)?, sent.get(pose.to)?);
                    let alpha = |time: f64| {
                        if pose.from == pose.to {
                            // Run on for as long as this frame did, and no longer.
                            ((time - a.time) as f32).clamp(0.0, pose.alpha.max(0.0))
                        } else {
                            ((time - a.time) / (b.time - a.time)).clamp(0.0, 1.0) as f32
                        }
                    };
                    let on_curve = |time: f64| unlag::core::replay(pose.mode, a, b, alpha(time)).0;
                    Some(on_curve(pose.view_time).distance(on_curve(last_view)))
                });
                let motion = track.max(shown.unwrap_or(0.0));
                if moved < TELEPORT_DISTANCE {
                    let growth = error.length() - last.length();
                    self.pops.push(f64::from(growth - motion).max(0.0));
                    self.track_pops.push(f64::from(growth - track).max(0.0));
                }
            }
            self.frames += 1;
            self.starved += u64::from(matches!(
                pose.kind,
                SampleKind::Held | SampleKind::Extrapolated
            ));
        }
        // A proxy not drawn this frame (dormant: the server stopped sending it) starts afresh
        // when it is drawn again: its first frame snaps, flagged, and is no pop.
        self.last_error
            .retain(|(client, entity), _| *client != i || drawn.contains(entity));
    }
}

/// Every method's agreement with what each client saw, pellet by pellet.
pub(crate) fn compare_agreement(tb: &Testbed, clients: usize) -> Vec<compare::MethodAgreement> {
    let mut methods: Vec<compare::MethodAgreement> = compare::METHODS
        .iter()
        .map(|m| compare::MethodAgreement {
            method: (*m).to_owned(),
            ..default()
        })
        .collect();
    let compared = tb.server_world().resource::<compare::Compared>();
    for i in 0..clients {
        let Some(link) = tb.server_link(i) else {
            continue;
        };
        let client = tb.client_world(i);
        let Some(map) = client.get_resource::<ServerEntityMap>() else {
            continue;
        };
        for shot in &client.resource::<Ledger>().seen {
            let Some(judged) = compared
                .shots
                .iter()
                .find(|s| s.link == link && s.fire_index == shot.fire_index)
            else {
                continue;
            };
            for (k, seen) in shot.hits.iter().enumerate() {
                let seen = seen
                    .as_ref()
                    .map(|h| map.to_server().get(&h.target).copied());
                for (m, answers) in methods.iter_mut().zip(&judged.answers) {
                    let answer = answers.get(k).copied().flatten();
                    match seen {
                        Some(target) => {
                            m.seen_hits += 1;
                            m.hits_confirmed += u64::from(target.is_some() && answer == target);
                        }
                        None => {
                            m.seen_misses += 1;
                            m.misses_confirmed += u64::from(answer.is_some());
                        }
                    }
                }
            }
        }
    }
    methods
}

/// Adds client `ledger`'s shots of weapon `weapon` to `a`.
pub(crate) fn agree(ledger: &Ledger, weapon: u8, a: &mut Agreement) {
    for shot in ledger.seen.iter().filter(|s| s.weapon == weapon) {
        let Some(verdict) = ledger
            .verdicts
            .iter()
            .find(|v| v.fire_index == shot.fire_index)
        else {
            continue;
        };
        a.shots += 1;
        let confirmed = match &verdict.outcome {
            Ok(hits) => hits.clone(),
            Err(_) => {
                a.refused += 1;
                Vec::new()
            }
        };
        let mut seen: Vec<(Entity, u64, bool)> = Vec::new();
        // Hits on a body the shooter expected dead promise nothing (nor are they misses).
        let unpromised: Vec<Entity> = shot
            .hits
            .iter()
            .flatten()
            .filter(|h| h.expected_dead)
            .map(|h| h.target)
            .collect();
        for hit in shot.hits.iter().flatten().filter(|h| !h.expected_dead) {
            match seen.iter_mut().find(|s| s.0 == hit.target) {
                Some(s) => {
                    s.1 += 1;
                    s.2 |= hit.headshot;
                }
                None => seen.push((hit.target, 1, hit.headshot)),
            }
        }
        a.seen_misses += shot.hits.iter().filter(|h| h.is_none()).count() as u64;
        for (target, pellets, headshot) in &seen {
            a.seen_hits += pellets;
            a.headshots_seen += u64::from(*headshot);
            if let Some(c) = confirmed.iter().find(|c| c.target == *target) {
                let p = u64::from(c.pellets);
                a.hits_confirmed += p.min(*pellets);
                a.misses_confirmed += p.saturating_sub(*pellets);
                a.headshots_agree += u64::from(*headshot && c.headshot);
            }
        }
        for c in &confirmed {
            if !seen.iter().any(|s| s.0 == c.target) && !unpromised.contains(&c.target) {
                a.misses_confirmed += u64::from(c.pellets);
            }
        }
    }
}
