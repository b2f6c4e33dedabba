//! Peeker's advantage: a client steps out from behind a wall into the view of another client
//! holding the angle. On the peeker's screen the holder shows at once (its own movement is
//! predicted); on the holder's screen the peeker shows only once the peeker's moves reached the
//! server and the server's states reached the holder and were drawn, an interpolation delay
//! behind. Measured in the testbed's true time, per peek, with its parts.

use crate::{OptionError, ReportOptions, Stat};
use bevy::prelude::*;
use bevy_rapier3d::prelude::{Collider, QueryFilter, ReadRapierContext};
use core::time::Duration;
use lightyear::prelude::*;
use serde::Serialize;
use unlag::CharacterProxyPlugin;
use unlag::core::SampleKind;
use unlag::core::quantize::{quantize_accel, quantize_angle};
use unlag::movement::{
    CharacterInput, CharacterMovement, CharacterState, MovementPredictionPlugin,
    MovementPredictionSystems, MovementSettings, MovementState, NextMove, ServerMovement,
};
use unlag::net::{AutonomousProxy, NetClock};
use unlag::smoothing::{ProxySmoothingPlugin, RenderedPose};
use unlag_testbed::{RapierFixedPlugin, Testbed, TestbedConfig};

/// Where the holder stands, on the ground.
const HOLDER: Vec3 = Vec3::new(8.0, 0.0, 0.0);
/// Where the peeker waits behind the wall, and where it steps out to.
const HIDDEN: Vec3 = Vec3::new(-1.0, 0.0, 1.5);
const EXPOSED: Vec3 = Vec3::new(-1.0, 0.0, 6.0);
/// Seconds between two peeks (half out, half back in): each half longer than the longest
/// interpolation delay a holder may draw with (2.5 s) and the trips, so that the holder sees a
/// peek before the peeker steps out for the next one (a 3-s period paired a 2-s delay's sight
/// with the next peek). Not a whole number of state intervals nor of ticks (6 s + 1/6 s +
/// half a tick): the peeks fall at different phases of a 1-Hz proxy's states (a sixth apart)
/// and of the server's ticks, instead of all at one.
const PERIOD: f64 = 6.0 + 1.0 / 6.0 + 1.0 / 120.0;
/// Eye height, metres.
const EYE: f32 = 1.6;

/// The figures of the peeks.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PeekFigures {
    /// Peeks measured.
    pub peeks: usize,
    /// From the peeker's screen showing the holder to the holder's screen showing the peeker,
    /// milliseconds of true time (negative in a peek the holder saw first).
    pub advantage_ms: Stat,
    /// Part: the peeker's moves travelling to the server (half the RTT), milliseconds.
    pub one_way_up_ms: f64,
    /// Part: the server's states travelling to the holder (half the RTT), milliseconds.
    pub one_way_down_ms: f64,
    /// Part: the peeker's moves waiting to be sent, on average half the movement send interval,
    /// milliseconds.
    pub input_buffer_ms: f64,
    /// Part: the peeker's datagrams lost in a row from the frame its screen showed the holder
    /// on to the first that got through (measured on the simulated network at each peek, mean
    /// over the peeks), milliseconds. The moves that show the peeker go in them: no server
    /// has a move that is lost, and redundancy brings it in the first datagram that gets
    /// through. Counted only in a peek the server's track showed by those moves: not when it
    /// showed the peeker first, nor by running on with its last input past the moves it had
    /// (the guess a walk out keeps up with; then the losses cost nothing). 0 on a link that
    /// loses nothing; on one that loses in bursts, one held peek weighs on the mean of a few.
    pub loss_hold_ms: f64,
    /// Part: the peeker's moves waiting on the server to be played out at the pace they were
    /// made (the playout's mean wait over its last moves, measured at each peek when the
    /// server's track first showed the peeker), milliseconds.
    pub playout_ms: f64,
    /// The interval between two proxy states, milliseconds. Not a part of its own: the holder
    /// draws proxies an interpolation delay behind, and that delay is sized to cover it.
    pub send_interval_ms: f64,
    /// Part: the server's state of the peeker waits for the next tick to be sampled, on average
    /// half a tick, milliseconds.
    pub tick_wait_ms: f64,
    /// Part: the holder's interpolation delay (mean over the peeks), milliseconds.
    pub holder_delay_ms: f64,
    /// Part: the holder's screen drawing the peeker past its newest state (held or
    /// extrapolated) between the server's track showing the peeker and the holder's screen
    /// showing it (measured on the holder at each peek, mean over the peeks), milliseconds:
    /// the states that show the peeker were lost on the way down for longer than the holder's
    /// interpolation delay covers (a burst early in a match, before the delay has grown to
    /// the link's bursts). 0 on a link that loses nothing.
    pub down_starved_ms: f64,
    /// Part, with paced clients (`--client-fps`): the peeker's moves wait for its frame to be
    /// sent and the holder's screen for its next frame, and a listen server's states wait for
    /// a frame of its host to be sent, each the mean wait from a random moment to the next
    /// frame ([`ClientPace::mean_wait_secs`](unlag_testbed::ClientPace::mean_wait_secs): half
    /// a frame when frames are even, more when some are long, as hitches are); milliseconds
    /// (0 when the clients step with the server).
    pub frames_ms: f64,
    /// The parts added up, milliseconds.
    pub parts_ms: f64,
    /// Measured, mean over the peeks: from the peeker's screen showing the holder to the
    /// server's own track showing the peeker to the holder's eye (the way up: the peeker's
    /// moves sent, carried, played out and ticked), milliseconds; the rest of the advantage is
    /// the way down. Beside the up parts ([`PeekFigures::up_parts_ms`]) it shows which way an
    /// excess came.
    pub up_measured_ms: f64,
    /// The up parts added up: one-way up, input wait, losses, playout and tick wait,
    /// milliseconds.
    pub up_parts_ms: f64,
}

/// Whether this client's own eye sees the other character's eye as drawn (client resource).
#[derive(Resource, Default)]
struct Sight(bool);

/// Seconds this client has drawn the other character past its newest state so far (held or
/// extrapolated: its states came later than the interpolation delay covers), client resource.
#[derive(Resource, Default)]
struct Starved(f64);

/// The wall the peeker hides behind: along z at x = 0, from z = −4 to 4, 3 m high.
fn spawn_wall(world: &mut World) {
    world.spawn((
        Transform::from_xyz(0.0, 1.5, 0.0),
        Collider::cuboid(0.2, 1.5, 4.0),
    ));
    world.spawn((
        Transform::from_xyz(0.0, -0.5, 0.0),
        Collider::cuboid(40.0, 0.5, 40.0),
    ));
}

/// The characters, whichever side: predicted or authoritative ones, and drawn proxies. A line of
/// sight passes through them (only the world hides one from another).
type Characters<'w, 's> =
    Query<'w, 's, (), Or<(With<MovementState<CharacterMovement>>, With<RenderedPose>)>>;

/// Whether an eye over the feet at `from` sees one over the feet at `to` through the world
/// (characters aside); `None` while there is no rapier world to ask.
fn eyes_meet(
    rapier: &ReadRapierContext,
    characters: &Characters,
    from: Vec3,
    to: Vec3,
) -> Option<bool> {
    // (Asking an empty context for its world builds an error with a backtrace.)
    if rapier.rapier_context.is_empty() {
        return None;
    }
    let context = rapier.single().ok()?;
    let eye = from + Vec3::Y * EYE;
    let way = to + Vec3::Y * EYE - eye;
    let length = way.length();
    let not_a_character = |e: Entity| !characters.contains(e);
    let filter = QueryFilter::default()
        .exclude_sensors()
        .predicate(&not_a_character);
    Some(
        length > 0.0
            && context
                .cast_ray(eye, way / length, length, true, filter)
                .is_none(),
    )
}

/// `PostUpdate` on a client, after the characters are placed: does its own eye see the other
/// character as drawn?
fn look(
    (mut sight, mut starved): (ResMut<Sight>, ResMut<Starved>),
    time: Res<Time>,
    own: Query<&MovementState<CharacterMovement>, With<AutonomousProxy>>,
    others: Query<&RenderedPose>,
    characters: Characters,
    rapier: ReadRapierContext,
) {
    let (Ok(me), Some(other)) = (own.single(), others.iter().next()) else {
        sight.0 = false;
        return;
    };
    if matches!(other.kind, SampleKind::Held | SampleKind::Extrapolated) {
        starved.0 += time.delta_secs_f64();
    }
    if let Some(sees) = eyes_meet(&rapier, &characters, me.0.feet, other.position) {
        sight.0 = sees;
    }
}

/// `FixedPostUpdate` on the server: does the holder's eye see the peeker's on the server's own
/// track (the characters' transforms, which the proxy states are sampled from)? The holder is
/// the character nearest its spot.
fn look_on_server(
    mut sight: ResMut<Sight>,
    placed: Query<&Transform, With<MovementState<CharacterMovement>>>,
    characters: Characters,
    rapier: ReadRapierContext,
) {
    let by_distance = |a: &&Transform, b: &&Transform| {
        a.translation
            .distance(HOLDER)
            .total_cmp(&b.translation.distance(HOLDER))
    };
    let (Some(holder), Some(peeker)) = (
        placed.iter().min_by(by_distance),
        placed.iter().max_by(by_distance),
    ) else {
        sight.0 = false;
        return;
    };
    if let Some(sees) = eyes_meet(&rapier, &characters, holder.translation, peeker.translation) {
        sight.0 = sees;
    }
}

/// `FixedUpdate` on the peeker, before the movement simulation: towards the exposed spot for
/// the first half of each period, back behind the wall for the second.
fn peek_script(
    timeline: Res<LocalTimeline>,
    tick: Res<lightyear::core::tick::TickDuration>,
    mut players: Query<
        (
            Entity,
            &MovementState<CharacterMovement>,
            Option<&mut NextMove<CharacterMovement>>,
        ),
        With<AutonomousProxy>,
    >,
    mut commands: Commands,
) {
    let t = f64::from(timeline.tick().0) * tick.0.as_secs_f64();
    let goal = if t % PERIOD < PERIOD / 2.0 {
        EXPOSED
    } else {
        HIDDEN
    };
    for (entity, state, next) in &mut players {
        let to = goal - state.0.feet;
        let dir = Vec2::new(to.x, to.z);
        let dir = if dir.length() < 0.2 {
            Vec2::ZERO
        } else {
            dir.normalize()
        };
        let input = CharacterInput {
            accel: quantize_accel(dir),
            yaw: quantize_angle(0.0),
            pitch: 0,
            flags: 0,
        };
        NextMove::write(&mut commands, entity, next, input);
    }
}

/// Runs `peeks` peeks under the conditions of `options` (its bots, clients, shooting and
/// cheats aside) and measures them.
pub fn measure(options: &ReportOptions, peeks: usize) -> Result<PeekFigures, OptionError> {
    let conditions = options.conditions()?;
    let mut tb = Testbed::new(TestbedConfig {
        clients: 2,
        conditions,
        seed: options.seed,
        loss_burst: options.burst as f32,
        client_pace: options.client_pace(),
        listen: options.listen,
        ..default()
    });
    crate::setup::threads(&mut tb, options);
    let movement = MovementSettings::<CharacterMovement> {
        playout: unlag::core::PlayoutSettings {
            enabled: options.playout,
            ..default()
        },
        ..default()
    };
    let input_buffer = movement.send_interval;
    tb.add_plugins(RapierFixedPlugin::default())
        .add_plugins(MovementPredictionPlugin::<CharacterMovement>::new(movement))
        .add_plugins(ProxySmoothingPlugin {
            settings: options.smoothing_settings(),
            ..default()
        })
        .add_plugins(CharacterProxyPlugin);
    spawn_wall(tb.server_world_mut());
    for i in 0..2 {
        spawn_wall(tb.client_world_mut(i));
        tb.client(i)
            .init_resource::<Sight>()
            .init_resource::<Starved>()
            .add_systems(PostUpdate, look.after(MovementPredictionSystems::Place));
    }
    tb.server_world_mut().init_resource::<Sight>();
    tb.server().add_systems(FixedPostUpdate, look_on_server);
    tb.client(0).add_systems(
        FixedUpdate,
        peek_script.before(MovementPredictionSystems::Simulate),
    );
    if !tb.run_until(Duration::from_secs(10), |tb| tb.all_synced()) {
        return Err(OptionError("the clients never connected".into()));
    }
    for (i, feet) in [HIDDEN, HOLDER].into_iter().enumerate() {
        let owner = tb.server_link(i).expect("connected");
        tb.server_world_mut().spawn((
            MovementState::<CharacterMovement>(CharacterState { feet, ..default() }),
            Replicate::to_clients(NetworkTarget::All),
            ControlledBy {
                owner,
                lifetime: Lifetime::default(),
            },
        ));
    }
    tb.run_for(Duration::from_secs(3));
    let peeker = tb.server_link(0).expect("connected");
    // One peek: from a moment when neither sees the other to when both do; (when the peeker
    // first saw the holder, when the holder first saw the peeker). Either may come first:
    // while the peeker's own screen is frozen by a hitch, the server shows it stepping out
    // (its moves are late, the track goes on with them) and the holder may see it first.
    let mut peek: Option<(Option<f64>, Option<f64>)> = None;
    // When the server's own track first showed the peeker to the holder in this peek, and
    // whether by a guess run on past the peeker's moves that had arrived.
    let mut server_saw: Option<f64> = None;
    let mut guessed = false;
    // The playout's wait for the peeker's moves then (seconds).
    let mut wait_then: Option<f64> = None;
    // The holder's starved seconds when the server's track showed the peeker.
    let mut starved_from = 0.0;
    let mut starved = Vec::new();
    let mut ups = Vec::new();
    let mut advantages = Vec::new();
    let mut delays = Vec::new();
    let mut waits = Vec::new();
    let mut holds = Vec::new();
    let end = tb.now() + Duration::from_secs_f64(PERIOD * (peeks as f64 + 1.0));
    while tb.now() < end && advantages.len() < peeks {
        tb.step();
        let now = tb.now().as_secs_f64();
        let sees = [0, 1].map(|i| tb.client_world(i).resource::<Sight>().0);
        // (Followed on its own: the server's track may show the peeker before either screen
        // does, while the peeker's frame hitches.)
        if !tb.server_world().resource::<Sight>().0 {
            server_saw = None;
        } else if server_saw.is_none() {
            server_saw = Some(now);
            starved_from = tb.client_world(1).resource::<Starved>().0;
            let server = tb.server_world_mut();
            let mut movers = server.query::<(&ControlledBy, &ServerMovement<CharacterMovement>)>();
            let mover = movers.iter(server).find(|(c, _)| c.owner == peeker);
            guessed = mover.is_some_and(|(_, movement)| movement.guessing());
            wait_then = mover.map(|(_, movement)| movement.playout_wait());
        }
        if !sees[0] && !sees[1] {
            peek = Some((None, None));
            continue;
        }
        let Some((peeker_saw, holder_saw)) = peek.as_mut() else {
            continue;
        };
        if sees[0] && peeker_saw.is_none() {
            *peeker_saw = Some(now);
        }
        if sees[1] && holder_saw.is_none() {
            *holder_saw = Some(now);
            // How long the holder drew the peeker past its newest state since the server's
            // track showed it: the states that show it were lost for longer than the
            // holder's delay covers.
            starved.push(if server_saw.is_some() {
                tb.client_world(1).resource::<Starved>().0 - starved_from
            } else {
                0.0
            });
            delays.push(
                tb.client_world(1)
                    .resource::<NetClock>()
                    .interpolation_delay,
            );
            // The moves that showed the peeker waited in the playout when the server's track
            // showed it, not when the holder saw it: a holder drawing 1.4 s behind (20 % loss
            // in bursts of 10) saw it after the wait had long changed. (Still the playout's
            // mean over its last moves, those of the step out.)
            let server = tb.server_world_mut();
            let mut movers = server.query::<(&ControlledBy, &ServerMovement<CharacterMovement>)>();
            let now_wait = movers
                .iter(server)
                .find(|(c, _)| c.owner == peeker)
                .map(|(_, movement)| movement.playout_wait());
            waits.extend(server_saw.and(wait_then).or(now_wait));
        }
        if let Some((Some(p), Some(h))) = peek {
            if let Some(up) = server_saw {
                ups.push(up - p);
            }
            // The moves that showed the peeker went in the peeker's datagrams from the frame
            // its screen showed the holder on: as long as those were lost in a row, no server
            // could have had them. Unless the server's track showed it first, or showed it by
            // running on with the peeker's last input (its guess, which a walk out keeps up
            // with): then the losses cost nothing.
            let shown_before = server_saw.is_some_and(|up| up <= p);
            let after = Duration::from_secs_f64(p).saturating_sub(tb.frame());
            holds.push(if shown_before || guessed {
                0.0
            } else {
                tb.loss_hold(0, after).unwrap_or_default().as_secs_f64()
            });
            advantages.push(h - p);
            peek = None;
        }
    }
    let one_way = options.rtt_ms / 2.0;
    let mut figures = PeekFigures {
        peeks: advantages.len(),
        advantage_ms: Stat::of(&advantages, 1000.0),
        one_way_up_ms: one_way,
        one_way_down_ms: one_way,
        input_buffer_ms: input_buffer * 1000.0 / 2.0,
        loss_hold_ms: holds.iter().sum::<f64>() / holds.len().max(1) as f64 * 1000.0,
        playout_ms: waits.iter().sum::<f64>() / waits.len().max(1) as f64 * 1000.0,
        send_interval_ms: 1000.0 / options.update_rate_hz,
        tick_wait_ms: 1000.0 / 60.0 / 2.0,
        holder_delay_ms: delays.iter().sum::<f64>() / delays.len().max(1) as f64 * 1000.0,
        down_starved_ms: starved.iter().sum::<f64>() / starved.len().max(1) as f64 * 1000.0,
        frames_ms: options.client_pace().map_or(0.0, |pace| {
            let wait = pace.mean_wait_secs() * 1000.0;
            2.0 * wait + if options.listen { wait } else { 0.0 }
        }),
        parts_ms: 0.0,
        up_measured_ms: ups.iter().sum::<f64>() / ups.len().max(1) as f64 * 1000.0,
        up_parts_ms: 0.0,
    };
    figures.up_parts_ms = figures.one_way_up_ms
        + figures.input_buffer_ms
        + figures.loss_hold_ms
        + figures.playout_ms
        + figures.tick_wait_ms;
    // The way up's parts, then the way down's.
    figures.parts_ms = figures.up_parts_ms
        + figures.one_way_down_ms
        + figures.holder_delay_ms
        + figures.down_starved_ms
        + figures.frames_ms;
    Ok(figures)
}
