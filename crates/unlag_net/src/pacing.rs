//! When replicon's replication pass runs on the server.
//!
//! replicon's pass visits every replicated entity for every client each time it runs, whether
//! anything changed or not: at 256 players, 65 536 pairs and several hash lookups each, a sixth
//! of the server's update although it runs once every 50 ms. unlag's characters are replicated
//! for their spawn, despawn and control alone (their states go in unlag's own messages), so in
//! a match under way almost every pass finds nothing to send. [`ReplicationPacing`] owes a pass
//! once an interval, as lightyear's own pacing (which it replaces) does, and by default skips
//! an owed pass unless something it would send may have happened since the last one.
//!
//! What the pass sends depends on the replicated entities' replicated components (their
//! values and change ticks), the entities that gain or lose replication, each client's
//! visibility of them, the priorities, and what each client has acknowledged. So a pass is
//! due when, since the one before:
//!
//! - a component a replication rule names (or one its filters name) was inserted or changed
//!   on a replicated entity, or an entity became replicated;
//! - anything was removed from a replicated entity, or one was despawned;
//! - a client's visibility changed (a client connecting gains its visibility);
//! - an entity's signature changed (replicon's pre-spawn mapping);
//! - the pass before sent anything: a mutation is sent again in every pass until its client
//!   acknowledges it, so passes go on while any is unacknowledged;
//! - or priorities are in use at all (a lowered priority defers a change to a later pass,
//!   which nothing else would tell).
//!
//! Otherwise the pass would send nothing, and skipping it changes nothing a client receives.
//! The look for changes visits every replicated entity too, but once an interval and only its
//! few replicated components, not once per client.
//! `net::replication_skips_idle_passes_and_delivers_everything_as_every_pass_does` plays the
//! same changes with and without the skip, over a lossy link, and checks after each that
//! every client holds what the server holds; it fails when the changed components, the
//! removals, the visibility, the spawns or what the pass before sent are not looked at.

use core::time::Duration;

use bevy::ecs::change_detection::{CheckChangeTicks, Tick};
use bevy::ecs::component::ComponentId;
use bevy::ecs::resource::IsResource;
use bevy::ecs::system::SystemChangeTick;
use bevy::prelude::*;
use bevy_replicon::prelude::{Replicated, ServerState};
use bevy_replicon::server::server_tick::ServerTick;
use bevy_replicon::server::visibility::client_visibility::ClientVisibility;
use bevy_replicon::server::{PriorityMap, ReplicatePriority, ServerSystems};
use bevy_replicon::shared::backend::connected_client::ConnectedClient;
use bevy_replicon::shared::backend::server_messages::ServerMessages;
use bevy_replicon::shared::replication::rules::ReplicationRules;
use bevy_replicon::shared::replication::rules::filter::FilterRule;
use bevy_replicon::shared::replication::signature::Signature;
use lightyear_core::timeline::{LocalTimeline, is_in_rollback};

/// On the server: how often replicon's replication pass may run, and whether it runs when it
/// has nothing to send (see the module docs of `pacing`). Inserted by
/// [`UnlagNetPlugin`](crate::UnlagNetPlugin) from its
/// [`replication_interval`](crate::UnlagNetPlugin::replication_interval); a game may change
/// either field at run time.
#[derive(Resource, Clone, Debug)]
pub struct ReplicationPacing {
    /// Time between two passes: each time this much has passed, a pass is owed, and it runs
    /// (or is skipped) in the next frame in which a fixed tick ran, as lightyear paces it
    /// (zero: every frame in which a fixed tick ran).
    pub interval: Duration,
    /// Whether an owed pass is skipped when nothing it would send may have happened since
    /// the last one (default true). False: every owed pass runs, lightyear's way.
    pub skip_idle: bool,
    /// Time since the interval last ended.
    since: Duration,
    /// An interval ended and no frame with a fixed tick has come since.
    owed: bool,
    /// This frame decides whether the owed pass runs.
    deciding: bool,
    /// Something a pass would send may have happened (set by the scan, the pass before and
    /// the removal observer; cleared by a pass that sent nothing).
    due: bool,
    /// Set by the observer between decisions (a removal from a replicated entity).
    touched: bool,
    /// The tick at which the last pass marked every client's visibility changed, until the
    /// next scan has read it.
    drained: Option<Tick>,
    /// The component ids the rules name, and how many rules they were read from.
    watched: Vec<ComponentId>,
    rules_read: usize,
    /// The local timeline's tick when this last looked (to tell whether a fixed tick ran).
    last_tick: Option<u32>,
}

impl ReplicationPacing {
    /// Pacing with a pass owed every `interval`, skipping those with nothing to send.
    pub fn new(interval: Duration) -> Self {
        Self {
            interval,
            skip_idle: true,
            since: Duration::ZERO,
            owed: false,
            deciding: false,
            // The first pass after the server starts runs.
            due: true,
            touched: false,
            drained: None,
            watched: Vec::new(),
            rules_read: 0,
            last_tick: None,
        }
    }
}

/// Replaces lightyear's replication pacing with [`ReplicationPacing`].
pub(crate) fn register(app: &mut App, interval: Duration) {
    app.insert_resource(ReplicationPacing::new(interval))
        // lightyear's own pacing (`update_replication_tick`, the only system in this set)
        // would advance replicon's tick every interval whatever is due.
        .configure_sets(
            RunFixedMainLoop,
            ServerSystems::IncrementTick.run_if(paced_by_unlag),
        )
        .add_systems(
            RunFixedMainLoop,
            (
                time_replication,
                scan_replication.run_if(scan_wanted),
                decide_replication,
            )
                .chain()
                .in_set(RunFixedMainLoopSystems::AfterFixedMainLoop)
                .run_if(in_state(ServerState::Running))
                .run_if(not(is_in_rollback)),
        )
        .add_systems(
            PostUpdate,
            note_pass
                .after(ServerSystems::Send)
                .before(ServerSystems::SendPackets)
                .run_if(in_state(ServerState::Running))
                .run_if(resource_exists_and_changed::<ServerTick>),
        )
        .add_observer(note_removal)
        .add_observer(age_ticks);
}

/// The run condition that keeps lightyear's replication pacing from running: always false.
fn paced_by_unlag() -> bool {
    false
}

/// Every component id a rule names, its filters' too.
fn rule_components(rules: &ReplicationRules, into: &mut Vec<ComponentId>) {
    fn filter_ids(filter: &FilterRule, into: &mut Vec<ComponentId>) {
        match filter {
            FilterRule::With(id) | FilterRule::Without(id) => into.push(*id),
            FilterRule::Or(children) => children.iter().for_each(|c| filter_ids(c, into)),
        }
    }
    into.clear();
    for rule in rules.iter() {
        into.extend(rule.components.iter().map(|c| c.id));
        rule.filters.iter().for_each(|f| filter_ids(f, into));
    }
    into.sort_unstable();
    into.dedup();
}

/// Ends intervals; a frame in which a fixed tick ran and a pass is owed decides it (lightyear
/// maps replicon's ticks to its own fixed ticks, so a pass runs only in such a frame).
fn time_replication(
    time: Res<Time>,
    timeline: Res<LocalTimeline>,
    mut pacing: ResMut<ReplicationPacing>,
) {
    let pacing = &mut *pacing;
    let tick = timeline.tick().0;
    let fixed_ran = pacing.last_tick.map_or(tick > 0, |last| tick > last);
    pacing.last_tick = Some(tick);
    pacing.since += time.delta();
    if pacing.since >= pacing.interval {
        pacing.owed = true;
        pacing.since = if pacing.interval.is_zero() {
            Duration::ZERO
        } else {
            let interval = pacing.interval.as_nanos();
            Duration::from_nanos((pacing.since.as_nanos() % interval) as u64)
        };
    }
    pacing.deciding = pacing.owed && fixed_ran;
}

/// Whether this frame looks for what changed: it decides a pass, and passes are skipped when
/// idle. Only then, so that the look costs once an interval (it visits every replicated
/// entity), and what changed since the last look is in its window however long ago that was.
fn scan_wanted(pacing: Res<ReplicationPacing>) -> bool {
    pacing.deciding && pacing.skip_idle
}

/// Notes whether anything a pass would send may have happened since this last ran.
///
/// replicon's pass itself marks every client's `ClientVisibility` changed (it drains the
/// entities each lost): after a pass, only a visibility changed after that mark counts.
#[allow(clippy::too_many_arguments)]
fn scan_replication(
    change: SystemChangeTick,
    rules: Res<ReplicationRules>,
    replicated: Query<EntityRef, (With<Replicated>, Without<IsResource>)>,
    spawned: Query<(), (Added<Replicated>, Without<IsResource>)>,
    seen: Query<Ref<ClientVisibility>, (With<ConnectedClient>, Without<IsResource>)>,
    signed: Query<(), (Changed<Signature>, Without<IsResource>)>,
    prioritized: Query<(), (With<ReplicatePriority>, Without<IsResource>)>,
    priority_maps: Query<&PriorityMap, Without<IsResource>>,
    mut pacing: ResMut<ReplicationPacing>,
) {
    let pacing = &mut *pacing;
    let drained = pacing.drained.take();
    let touched = std::mem::take(&mut pacing.touched);
    if pacing.due {
        return;
    }
    if rules.len() != pacing.rules_read {
        rule_components(&rules, &mut pacing.watched);
        pacing.rules_read = rules.len();
    }
    let (last, now) = (change.last_run(), change.this_run());
    let visibility_changed = seen.iter().any(|v| {
        v.is_added()
            || match drained {
                Some(drained) => v.last_changed().is_newer_than(drained, now),
                None => v.is_changed(),
            }
    });
    pacing.due = touched
        || visibility_changed
        || !spawned.is_empty()
        || !signed.is_empty()
        || !prioritized.is_empty()
        || priority_maps.iter().any(|map| !map.is_empty())
        || replicated.iter().any(|entity| {
            pacing.watched.iter().any(|&id| {
                entity
                    .get_change_ticks_by_id(id)
                    .is_some_and(|ticks| ticks.is_changed(last, now))
            })
        });
}

/// Runs the owed pass (advances replicon's tick, which runs it in this frame's `PostUpdate`)
/// if it is due or passes are never skipped; otherwise skips it.
fn decide_replication(mut pacing: ResMut<ReplicationPacing>, mut server_tick: ResMut<ServerTick>) {
    if !pacing.deciding {
        return;
    }
    pacing.owed = false;
    pacing.deciding = false;
    if pacing.due || !pacing.skip_idle {
        server_tick.increment();
    }
}

/// After a pass: the next is due if this one sent anything (a mutation is sent again in every
/// pass until its client acknowledges it). Notes the tick of the pass's own mark on the
/// clients' visibility: the oldest of their last changes, which it made to all at once (a
/// change since is newer).
fn note_pass(
    messages: Res<ServerMessages>,
    seen: Query<Ref<ClientVisibility>, (With<ConnectedClient>, Without<IsResource>)>,
    change: SystemChangeTick,
    mut pacing: ResMut<ReplicationPacing>,
) {
    let now = change.this_run();
    pacing.due = messages.iter_sent().len() > 0;
    pacing.drained = seen
        .iter()
        .map(|v| v.last_changed())
        .max_by_key(|t| now.get().wrapping_sub(t.get()));
}

/// A removal from a replicated entity (a component, replication itself, or a despawn): the
/// next pass is due. replicon reads removals as they happen too, so they are not seen later
/// in the world.
fn note_removal(
    remove: On<Remove>,
    replicated: Query<(), With<Replicated>>,
    pacing: Option<ResMut<ReplicationPacing>>,
) {
    if let Some(mut pacing) = pacing
        && !pacing.touched
        && replicated.contains(remove.entity)
    {
        pacing.touched = true;
    }
}

/// Keeps the noted tick of the pass's mark valid as Bevy's change ticks wrap around.
fn age_ticks(check: On<CheckChangeTicks>, pacing: Option<ResMut<ReplicationPacing>>) {
    if let Some(mut pacing) = pacing
        && let Some(tick) = pacing.drained.as_mut()
    {
        tick.check_tick(*check);
    }
}
