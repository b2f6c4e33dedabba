//! Ammo and reloads on the server: each character's [`ServerArmory`] (rounds, reloads, the one
//! fire-rate gate over every weapon, the fire indices taken), the system that gives characters
//! one, and the system that starts and finishes reloads. The judge spends rounds through the
//! armory's methods; nothing else changes it.

use crate::protocol::{Rejection, ReloadDone, ReloadRequest, ReloadTaken};
use crate::rules::{ShotLags, view_time_tolerance};
use crate::settings::{CombatSettings, Weapons};
use crate::weapons::{WeaponSpec, WeaponTable};
use bevy::platform::collections::HashMap;
use bevy::prelude::*;
use lightyear::prelude::server::ClientOf;
use lightyear::prelude::*;
use unlag_core::SharedFireGate;
use unlag_net::{
    Authority, LinkTraffic, NetClock, ReliableChannel, RemoteClientClock, UnreliableChannel,
};

/// Fire indices this close below the newest are copies of recent shots (the client sends each
/// several times), dropped without an answer.
const DUPLICATE_WINDOW: u32 = 8;

/// Per weapon on the server: rounds, reload, fire rate.
#[derive(Clone, Debug)]
struct ServerWeapon {
    ammo: u32,
    /// The client's view times at which its reload started and ends, seconds.
    reloading: Option<(f64, f64)>,
    /// The view time of the latest reload request taken, seconds: copies and resends of it
    /// (the same view time) are ignored.
    last_reload_request: f64,
}

impl ServerWeapon {
    fn full(spec: &WeaponSpec) -> Self {
        Self {
            ammo: spec.magazine,
            reloading: None,
            last_reload_request: f64::NEG_INFINITY,
        }
    }
}

/// The server's record of a character's weapons: the only ammo that counts.
#[derive(Component, Clone, Debug)]
pub struct ServerArmory {
    weapons: Vec<ServerWeapon>,
    /// One fire rate over every weapon: a shot owes its weapon's interval before the next
    /// shot of any weapon (one weapon in hand at a time), and skipped fire indices owe the
    /// shortest interval each.
    gate: SharedFireGate,
    /// The shortest fire interval of any weapon, seconds: what a skipped fire index owes.
    shortest_interval: f64,
    /// Fire indices skipped since the last shot the gate let through (shots that never
    /// arrived: lost, or never sent): each owes fire rate at the next shot through it.
    skipped: u32,
    last_fire_index: u32,
    /// Reloads finished and not yet announced: (weapon, fire index of the shot before).
    reloaded: Vec<(u8, u32)>,
    /// How much later than the view reports' median the last shots arrived after the present
    /// they stamp (see [`ShotLags`]).
    pub(crate) shot_lags: ShotLags,
}

impl ServerArmory {
    /// Full magazines of every weapon in `table`, no shot taken; `allowance` is the fire-rate
    /// slack ([`CombatSettings::fire_interval_allowance`], seconds).
    pub fn new(table: &[WeaponSpec], allowance: f64) -> Self {
        Self {
            weapons: table.iter().map(ServerWeapon::full).collect(),
            gate: SharedFireGate::new(allowance),
            shortest_interval: shortest_interval(table),
            skipped: 0,
            last_fire_index: 0,
            reloaded: Vec::new(),
            shot_lags: ShotLags::default(),
        }
    }

    /// Fits the armory to a weapon table that replaced the one it was made for (the game may
    /// swap tables at run time): weapons the table added start with a full magazine, weapons
    /// it dropped are forgotten, and no weapon holds more than its new magazine.
    pub fn fit(&mut self, table: &[WeaponSpec]) {
        self.weapons.truncate(table.len());
        for spec in &table[self.weapons.len()..] {
            self.weapons.push(ServerWeapon::full(spec));
        }
        for (weapon, spec) in self.weapons.iter_mut().zip(table) {
            weapon.ammo = weapon.ammo.min(spec.magazine);
        }
        self.shortest_interval = shortest_interval(table);
    }

    /// Takes a client's [`ReloadRequest`] against weapon table `table`: `expected` is the
    /// server's estimate of the client's view time when it was sent, `tolerance` how far the
    /// claimed view time may be from it, `newer` how much newer than `expected` it may be
    /// besides (the client's RTT over the quickest of its acknowledged trips, which a client
    /// frozen by its stalls reads its pings late by:
    /// [`RemoteClientClock::rtt_over_quick_trip`](unlag_net::RemoteClientClock::rtt_over_quick_trip)),
    /// and `heard` the client's view time when the last packet the server had from it before
    /// this one's frame left (seconds; not finite when there was none).
    /// The start is clamped between `heard` (or `expected`, if earlier) less `tolerance` and
    /// `expected` plus `newer` and `tolerance`: a client sends its request in every packet until the
    /// server has it, so a reload cannot have started before a packet that came without it,
    /// while a copy that outlived a burst of losses is dated when it was made.
    /// Starts the reload if the weapon is not full and not reloading already. Copies and
    /// resends (a view time not after the last request's) and garbage (an unknown weapon,
    /// a non-finite time) are ignored and change nothing: returns whether the request was
    /// taken.
    pub fn take_reload_request(
        &mut self,
        request: &ReloadRequest,
        table: &WeaponTable,
        (expected, newer, tolerance): (f64, f64, f64),
        heard: f64,
    ) -> bool {
        let Some(spec) = table.get(request.weapon) else {
            return false;
        };
        if !(expected.is_finite() && tolerance.is_finite() && request.view_time.is_finite()) {
            return false;
        }
        let Some(w) = self.weapons.get_mut(usize::from(request.weapon)) else {
            return false;
        };
        if request.view_time <= w.last_reload_request {
            return false;
        }
        let tolerance = tolerance.max(0.0);
        // Nothing heard (non-finite) leaves the estimate's own bound.
        let earliest = if heard.is_finite() && heard < expected {
            heard
        } else {
            expected
        };
        // (A reload dated earlier than the client started it would refuse the shots it fired
        // before, as fired while reloading.)
        let latest = expected + unlag_core::finite_non_negative(newer);
        let started = request
            .view_time
            .clamp(earliest - tolerance, latest + tolerance);

        w.last_reload_request = request.view_time;
        if w.reloading.is_none() && w.ammo < spec.magazine {
            w.reloading = Some((started, started + f64::from(spec.reload_time)));
        }
        true
    }

    /// The view times (seconds) at which weapon `weapon`'s reload under way started and ends,
    /// as the server holds them; `None` when it is not reloading.
    pub fn reload_window(&self, weapon: u8) -> Option<(f64, f64)> {
        self.weapons.get(usize::from(weapon))?.reloading
    }

    /// Whether `request` is the reload request of `weapon` taken last (or an older one): its
    /// copies need no more sending.
    fn has_reload_request(&self, request: &ReloadRequest) -> bool {
        self.weapons
            .get(usize::from(request.weapon))
            .is_some_and(|w| request.view_time <= w.last_reload_request)
    }

    /// Rounds left in weapon `weapon`.
    pub fn ammo(&self, weapon: u8) -> Option<u32> {
        self.weapons.get(usize::from(weapon)).map(|w| w.ammo)
    }

    /// Whether weapon `weapon` is reloading (`None` for a weapon the armory does not have).
    pub fn is_reloading(&self, weapon: u8) -> Option<bool> {
        self.weapons
            .get(usize::from(weapon))
            .map(|w| w.reloading.is_some())
    }

    /// The newest fire index judged (0 before the first): a request at or below it is a copy
    /// or a replay, dropped unjudged.
    pub fn last_fire_index(&self) -> u32 {
        self.last_fire_index
    }

    /// Whether a shot of `fire_index` would be refused as a copy of a recent shot judged
    /// already ([`Rejection::Duplicate`] from [`take_fire_index`](Self::take_fire_index)).
    pub(crate) fn is_copy(&self, fire_index: u32) -> bool {
        fire_index <= self.last_fire_index && self.last_fire_index - fire_index < DUPLICATE_WINDOW
    }

    /// Takes a shot's fire index, the newest so far, and returns the newest before it. The
    /// indices between the two never arrived (yet: one that arrives later is a copy): they owe
    /// fire rate at the next shot through the gate, whatever becomes of this one. The first
    /// shot an armory sees starts its count (a client keeps counting across characters and
    /// connections). A copy of a recent shot is [`Rejection::Duplicate`], an older index
    /// [`Rejection::StaleFireIndex`]; neither changes anything.
    pub(crate) fn take_fire_index(&mut self, fire_index: u32) -> Result<u32, Rejection> {
        let previous = self.last_fire_index;
        if fire_index <= previous {
            return Err(if self.is_copy(fire_index) {
                Rejection::Duplicate
            } else {
                Rejection::StaleFireIndex
            });
        }
        self.last_fire_index = fire_index;
        if previous > 0 {
            self.skipped = self.skipped.saturating_add(fire_index - previous - 1);
        }
        Ok(previous)
    }

    /// Finishes weapon `weapon`'s reload if a shot fired at view time `view_time` (seconds) is
    /// past its end: the client showed a full magazine of `spec` then. The reload is announced
    /// as done after fire index `previous` (the newest before the shot).
    /// [`Rejection::UnknownWeapon`] for a weapon the armory does not have.
    pub(crate) fn finish_reload_by(
        &mut self,
        weapon: u8,
        spec: &WeaponSpec,
        view_time: f64,
        previous: u32,
    ) -> Result<(), Rejection> {
        let w = self
            .weapons
            .get_mut(usize::from(weapon))
            .ok_or(Rejection::UnknownWeapon)?;
        if w.reloading.is_some_and(|(_, until)| view_time >= until) {
            w.reloading = None;
            w.ammo = spec.magazine;
            self.reloaded.push((weapon, previous));
        }
        Ok(())
    }

    /// Whether weapon `weapon` has a round for a shot fired at view time `view_time` (seconds):
    /// [`Rejection::NoAmmo`] when it is empty or was reloading by then (a shot fired before
    /// the reload started, which may arrive after the reload request, spends a round of the
    /// old magazine).
    pub(crate) fn has_round(&self, weapon: u8, view_time: f64) -> Result<(), Rejection> {
        let w = self
            .weapons
            .get(usize::from(weapon))
            .ok_or(Rejection::UnknownWeapon)?;
        let reloading = w.reloading.is_some_and(|(start, _)| view_time >= start);
        if w.ammo == 0 || reloading {
            return Err(Rejection::NoAmmo);
        }
        Ok(())
    }

    /// Lets a shot fired at view time `view_time` through the one fire-rate gate if the
    /// previous shot's interval and the skipped fire indices (the shortest interval each:
    /// skipping costs what firing would) are paid, `interval` (seconds) owed by this one;
    /// [`Rejection::TooFast`] otherwise. The gate moves its credit either way.
    pub(crate) fn pass_fire_rate(
        &mut self,
        view_time: f64,
        interval: f64,
    ) -> Result<(), Rejection> {
        if !self
            .gate
            .try_fire(view_time, interval, self.skipped, self.shortest_interval)
        {
            return Err(Rejection::TooFast);
        }
        self.skipped = 0;
        Ok(())
    }

    /// Spends one round of weapon `weapon` (none below zero).
    pub(crate) fn spend_round(&mut self, weapon: u8) {
        if let Some(w) = self.weapons.get_mut(usize::from(weapon)) {
            w.ammo = w.ammo.saturating_sub(1);
        }
    }

    /// Finishes every reload whose end the client's view clock (`view`, seconds) is past,
    /// refilling from `table`, to be announced after the newest fire index.
    fn finish_reloads_by(&mut self, view: f64, table: &WeaponTable) {
        let last = self.last_fire_index;
        for (id, w) in self.weapons.iter_mut().enumerate() {
            if w.reloading.is_some_and(|(_, until)| view >= until) {
                w.reloading = None;
                w.ammo = table.weapons.get(id).map_or(0, |spec| spec.magazine);
                self.reloaded.push((id as u8, last));
            }
        }
    }
}

/// The shortest fire interval of the table's weapons, seconds (at most 1).
fn shortest_interval(table: &[WeaponSpec]) -> f64 {
    table
        .iter()
        .map(|w| f64::from(w.fire_interval))
        .fold(f64::INFINITY, f64::min)
        .min(1.0)
}

/// Gives every controlled character an armory once the weapons are known.
pub(crate) fn arm_characters(
    mut commands: Commands,
    settings: Res<CombatSettings>,
    weapons: Res<Weapons>,
    characters: Query<Entity, (With<Authority>, With<ControlledBy>, Without<ServerArmory>)>,
    mut armed: Query<&mut ServerArmory>,
) {
    let Some(table) = &weapons.table else {
        return;
    };
    if weapons.is_changed() {
        for mut armory in &mut armed {
            armory.fit(&table.weapons);
        }
    }
    for entity in &characters {
        commands.entity(entity).insert(ServerArmory::new(
            &table.weapons,
            settings.fire_interval_allowance,
        ));
    }
}

/// Starts and finishes reloads: each client's [`ReloadRequest`]s taken by its character's
/// armory, then every reload the client's view clock is past finished and announced.
pub(crate) fn reloads(
    (clock, time, settings, weapons): (Res<NetClock>, Res<Time>, Res<CombatSettings>, Res<Weapons>),
    mut requests: ReloadLinks,
    clocks: Query<&RemoteClientClock, With<ClientOf>>,
    mut done: Query<&mut MessageSender<ReloadDone>, With<ClientOf>>,
    mut armories: Query<(Entity, &ControlledBy, &mut ServerArmory)>,
    (links, mut heard): (
        Query<(Entity, &LinkTraffic), With<ClientOf>>,
        Local<HeardFrom>,
    ),
    work: Option<Res<unlag_net::ServerWork>>,
) {
    let _work = work.as_deref().map(|w| w.time(unlag_net::WorkPart::Shots));
    let Some(table) = &weapons.table else {
        return;
    };
    let now = clock.server_time;
    let tolerance = |remote: &RemoteClientClock| {
        view_time_tolerance(
            &settings,
            (remote.jitter, remote.client_frame, 0.0),
            time.delta_secs_f64(),
        )
    };
    take_reload_requests(
        table,
        (now, &heard),
        &tolerance,
        (&mut requests, &clocks),
        &mut armories,
    );
    heard.note(now, &links);
    finish_reloads(table, now, &clocks, &mut done, &mut armories);
}

/// The client links reload requests came on (lightyear inserts a receiver with the first),
/// answered with [`ReloadTaken`].
type ReloadLinks<'w, 's> = Query<
    'w,
    's,
    (
        Entity,
        &'static mut MessageReceiver<ReloadRequest>,
        &'static mut MessageSender<ReloadTaken>,
    ),
    With<ClientOf>,
>;

/// Per client link: the datagrams it had received, and the server time (seconds) of the last
/// frame before this one in which some arrived (what [`ServerArmory::take_reload_request`]
/// calls `heard`, in server time).
#[derive(Default)]
pub(crate) struct HeardFrom(HashMap<Entity, (u64, f64)>);

impl HeardFrom {
    /// The server time of the last frame before this one in which `link`'s datagrams arrived.
    fn before(&self, link: Entity) -> Option<f64> {
        self.0.get(&link).map(|&(_, at)| at)
    }

    /// After a frame at server time `now`: the links that received datagrams in it (the links
    /// gone are forgotten).
    fn note(&mut self, now: f64, links: &Query<(Entity, &LinkTraffic), With<ClientOf>>) {
        // Updated in place: a map rebuilt every frame would allocate every frame.
        for (link, traffic) in links {
            let received = traffic.datagrams_received;
            let entry = self.0.entry(link).or_insert((received, now));
            if entry.0 != received {
                *entry = (received, now);
            }
        }
        // Closed links are swept only when the map holds more entries than there are links,
        // so a steady match never pays for the sweep.
        if self.0.len() > links.iter().len() {
            self.0.retain(|&link, _| links.contains(link));
        }
    }
}

/// Takes each client's [`ReloadRequest`]s at server time `now` (seconds) into its character's
/// armory: the reload starts at the view time it claims, held to `tolerance` around the
/// server's estimate of it (its shots' view-time tolerance, seconds) and to no sooner than
/// the last packet `heard` from the client before (see
/// [`ServerArmory::take_reload_request`]). Every request the armory has is answered with a
/// [`ReloadTaken`], once a frame, so the client stops sending it.
fn take_reload_requests(
    table: &WeaponTable,
    (now, heard): (f64, &HeardFrom),
    tolerance: &dyn Fn(&RemoteClientClock) -> f64,
    (requests, clocks): (&mut ReloadLinks, &Query<&RemoteClientClock, With<ClientOf>>),
    armories: &mut Query<(Entity, &ControlledBy, &mut ServerArmory)>,
) {
    // Each link's character, found once per frame and only when a request came (not by a
    // search of every armory per request: a flood of requests would cost players × requests).
    let mut by_link: Option<HashMap<Entity, Entity>> = None;
    for (link, mut receiver, mut taken) in requests {
        if !receiver.has_messages() {
            continue;
        }
        let Ok(remote) = clocks.get(link) else {
            receiver.receive().for_each(drop);
            continue;
        };
        let by_link = by_link.get_or_insert_with(|| {
            armories
                .iter()
                .map(|(character, controlled, _)| (controlled.owner, character))
                .collect()
        });
        let Some(mut armory) = by_link
            .get(&link)
            .and_then(|character| armories.get_mut(*character).ok())
            .map(|(.., armory)| armory)
        else {
            receiver.receive().for_each(drop);
            continue;
        };
        let one_way = remote.rtt / 2.0;
        let expected = remote.view_time(now - one_way);
        let newer = remote.rtt_over_quick_trip(now);
        let heard = heard
            .before(link)
            .map_or(f64::NEG_INFINITY, |at| remote.view_time(at - one_way));
        let tolerance = tolerance(remote);
        let mut answers: Vec<ReloadTaken> = Vec::new();
        for request in receiver.receive() {
            armory.take_reload_request(&request, table, (expected, newer, tolerance), heard);
            if armory.has_reload_request(&request)
                && !answers.iter().any(|a| a.weapon == request.weapon)
            {
                answers.push(ReloadTaken {
                    weapon: request.weapon,
                    view_time: request.view_time,
                });
            }
        }
        for answer in answers {
            taken.send::<UnreliableChannel>(answer);
        }
    }
}

/// Finishes reloads once the client's view clock is past their end at server time `now`
/// (seconds; a shot fired after it may finish one sooner: see the judge), and tells each
/// client which of its reloads are done.
fn finish_reloads(
    table: &WeaponTable,
    now: f64,
    clocks: &Query<&RemoteClientClock, With<ClientOf>>,
    done: &mut Query<&mut MessageSender<ReloadDone>, With<ClientOf>>,
    armories: &mut Query<(Entity, &ControlledBy, &mut ServerArmory)>,
) {
    for (_, controlled, mut armory) in armories {
        let Ok(remote) = clocks.get(controlled.owner) else {
            continue;
        };
        armory.finish_reloads_by(remote.view_time(now), table);
        for (weapon, fire_index) in armory.reloaded.drain(..) {
            if let Ok(mut sender) = done.get_mut(controlled.owner) {
                sender.send::<ReliableChannel>(ReloadDone {
                    weapon,
                    ammo: table.get(weapon).map_or(0, |spec| spec.magazine),
                    fire_index,
                });
            }
        }
    }
}
