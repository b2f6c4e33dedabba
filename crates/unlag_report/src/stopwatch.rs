//! The server's cost per tick, by part: the plugins' own parts from [`ServerWork`], lightyear's
//! receive and send and the whole update timed around their schedules (wall clock: this
//! machine, this build).

use crate::{SendCost, ServerCost, Stat};
use bevy::prelude::*;
use core::time::Duration;
use lightyear::connection::ConnectionSystems;
use lightyear::link::LinkSystems;
use lightyear::prelude::*;
use lightyear::transport::plugin::TransportSystems;
use std::time::Instant;
use unlag::net::{ServerWork, WorkPart};
use unlag_testbed::Testbed;

/// Parts of the server's tick the [`Stopwatch`] times, in [`ServerCost`]'s order; the first
/// four are [`WorkPart::ALL`]; the last five are inside `PostUpdate` (`SEND`).
const PARTS: usize = 12;
const MOVEMENT: usize = 0;
const RECORD: usize = 1;
const COMBAT: usize = 2;
const PROXY_STATES: usize = 3;
const RECEIVE: usize = 4;
const SEND: usize = 5;
const TOTAL: usize = 6;
const REPLICATION: usize = 7;
const MESSAGES: usize = 8;
const TRANSPORT: usize = 9;
const NETCODE: usize = 10;
const LINK: usize = 11;

/// Server: wall-clock time spent in each measured part during the current tick.
#[derive(Resource, Default)]
pub(crate) struct Stopwatch {
    started: [Option<Instant>; PARTS],
    current: [f64; PARTS],
    ticks: Vec<[f64; PARTS]>,
    last_tick: Option<u32>,
    /// [`ServerWork`]'s totals when the last bucket closed.
    work_seen: [Duration; 4],
    pub(crate) measuring: bool,
}

fn start<const PART: usize>(mut watch: ResMut<Stopwatch>) {
    watch.started[PART] = Some(Instant::now());
}

fn stop<const PART: usize>(mut watch: ResMut<Stopwatch>) {
    if let Some(t) = watch.started[PART].take() {
        watch.current[PART] += t.elapsed().as_secs_f64() * 1e6;
    }
}

/// Closes the tick's bucket when the tick moved on (the last system of a server update). The
/// plugins' own parts come from [`ServerWork`], which their systems keep.
fn close_tick(timeline: Res<LocalTimeline>, work: Res<ServerWork>, mut watch: ResMut<Stopwatch>) {
    let tick = timeline.tick().0;
    if watch.last_tick != Some(tick) {
        for (k, part) in WorkPart::ALL.into_iter().enumerate() {
            let total = work.total(part);
            watch.current[k] = (total - watch.work_seen[k]).as_secs_f64() * 1e6;
            watch.work_seen[k] = total;
        }
        if watch.measuring && watch.last_tick.is_some() {
            let bucket = watch.current;
            watch.ticks.push(bucket);
        }
        watch.current = [0.0; PARTS];
        watch.last_tick = Some(tick);
    }
}

/// Schedules the server runs around its main ones, only to time them.
#[derive(bevy::ecs::schedule::ScheduleLabel, Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Mark {
    /// Before `First`.
    Start,
    /// Before `PreUpdate`.
    Receive,
    /// After `PreUpdate`.
    Received,
    /// Before `PostUpdate`.
    Send,
    /// After `PostUpdate`.
    Sent,
    /// After `Last`.
    End,
}

/// Times the server's parts per tick (see [`ServerCost`]).
pub(crate) fn add_stopwatch(server: &mut App) {
    server.init_resource::<Stopwatch>();
    for mark in [
        Mark::Start,
        Mark::Receive,
        Mark::Received,
        Mark::Send,
        Mark::Sent,
        Mark::End,
    ] {
        server.init_schedule(mark);
    }
    {
        let mut order = server
            .world_mut()
            .resource_mut::<bevy::app::MainScheduleOrder>();
        order.insert_before(First, Mark::Start);
        order.insert_before(PreUpdate, Mark::Receive);
        order.insert_after(PreUpdate, Mark::Received);
        order.insert_before(PostUpdate, Mark::Send);
        order.insert_after(PostUpdate, Mark::Sent);
        order.insert_after(Last, Mark::End);
    }
    server
        .add_systems(Mark::Start, start::<TOTAL>)
        .add_systems(Mark::Receive, start::<RECEIVE>)
        .add_systems(Mark::Received, stop::<RECEIVE>)
        .add_systems(Mark::Send, start::<SEND>)
        .add_systems(Mark::Sent, stop::<SEND>)
        .add_systems(Mark::End, (stop::<TOTAL>, close_tick).chain());
    // Inside PostUpdate, around lightyear's send sets, in the order they run: replicon's
    // replication, typed messages into channels, channels into packets, netcode's encryption
    // into the link, the link to the socket or the in-process wire. The marks are chained
    // (each set's start after the previous set's stop), so the single-threaded executor runs
    // them close around their set.
    server.add_systems(
        PostUpdate,
        (
            start::<REPLICATION>.before(bevy_replicon::server::ServerSystems::Send),
            stop::<REPLICATION>.after(bevy_replicon::server::ServerSystems::Send),
            start::<MESSAGES>.before(MessageSystems::Send),
            stop::<MESSAGES>.after(MessageSystems::Send),
            start::<TRANSPORT>.before(TransportSystems::Send),
            stop::<TRANSPORT>.after(TransportSystems::Send),
            start::<NETCODE>.before(ConnectionSystems::Send),
            stop::<NETCODE>.after(ConnectionSystems::Send),
            start::<LINK>.before(LinkSystems::Send),
            stop::<LINK>.after(LinkSystems::Send),
        )
            .chain(),
    );
}

/// The server's cost per tick over the ticks measured since the match started measuring (or
/// since [`reset_server_cost`]).
pub fn server_cost(tb: &Testbed) -> ServerCost {
    let watch = tb.server_world().resource::<Stopwatch>();
    let part = |k: usize| -> Stat {
        let samples: Vec<f64> = watch.ticks.iter().map(|t| t[k]).collect();
        Stat::of(&samples, 1.0)
    };
    ServerCost {
        movement_us: part(MOVEMENT),
        record_us: part(RECORD),
        combat_us: part(COMBAT),
        proxy_states_us: part(PROXY_STATES),
        receive_us: part(RECEIVE),
        send_us: part(SEND),
        total_us: part(TOTAL),
        send_parts: SendCost {
            replication_us: part(REPLICATION),
            messages_us: part(MESSAGES),
            transport_us: part(TRANSPORT),
            netcode_us: part(NETCODE),
            link_us: part(LINK),
        },
    }
}

/// Forgets the server cost measured so far.
pub fn reset_server_cost(tb: &mut Testbed) {
    tb.server_world_mut()
        .resource_mut::<Stopwatch>()
        .ticks
        .clear();
}
