//! The shooter's rules, apart from its rendering: who plays (a character for every client that
//! connects, and bots that shoot back), health, death and respawn, the scores and the kill
//! feed. [`ShooterGamePlugin`] runs on the server and on every client.
//!
//! Server → clients: [`ShooterStatus`] (every fighter's name, health and score, 4 times a
//! second) and a [`KillNotice`] per kill; clients keep them in [`Scoreboard`] and [`KillFeed`].

use crate::shooter::{BotBrain, ShooterBotsPlugin, bot_bundle};
use bevy::ecs::entity::MapEntities;
use bevy::prelude::*;
use lightyear::prelude::server::ClientOf;
use lightyear::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::sync::Arc;
use unlag::combat::{
    CombatPlugin, CombatSettings, CombatSystems, CosmeticFire, CosmeticFires, Damaged, Health,
    Killed,
};
use unlag::core::SplitMix64;
use unlag::movement::{CharacterMovement, CharacterState, MovementPredictionPlugin, MovementState};
use unlag::net::{
    EncodedRuns, LinkTraffic, NetClock, NetDirection, NetMessageAppExt, ReliableChannel,
    SequencedChannel, UnreliableChannel,
};
use unlag::rewind::{HitBoxLayout, RewindPlugin, RewindQuery, UseHitBoxLayout};
use unlag::smoothing::{ProxySmoothing, ProxySmoothingPlugin, Teleported};

/// Asset path of the characters' hit-box layout (players and bots alike).
pub const HUMANOID: &str = "assets/humanoid.hitboxes.ron";

/// Asset path of the weapon table.
pub const WEAPONS: &str = "assets/weapons.ron";

/// Height of a standing character's eyes above its feet, metres.
pub const EYE_HEIGHT: f32 = 1.6;

/// Height of a crouched character's eyes above its feet, metres.
pub const CROUCHED_EYE_HEIGHT: f32 = 1.0;

/// Height of the eyes of a character in `state` above its feet, metres.
pub fn eye_height(state: &CharacterState) -> f32 {
    if state.crouched {
        CROUCHED_EYE_HEIGHT
    } else {
        EYE_HEIGHT
    }
}

/// The match's rules (a resource on the server; clients only read `bots`).
#[derive(Resource, Clone, Debug, PartialEq)]
pub struct ShooterSettings {
    /// Bots in the arena.
    pub bots: usize,
    /// A player's hit points when (re)spawned.
    pub player_health: f32,
    /// A bot's hit points when (re)spawned.
    pub bot_health: f32,
    /// Seconds from a death to the respawn.
    pub respawn_seconds: f64,
    /// Seconds between two shots of one bot.
    pub bot_fire_interval: f64,
    /// Share of a bot's shots aimed true (the rest miss by 0.6–1.5 m), 0–1.
    pub bot_accuracy: f32,
    /// Damage of a bot's shot before the hit box's multiplier, hit points.
    pub bot_damage: f32,
    /// Farthest a bot shoots, metres.
    pub bot_range: f32,
    /// Seconds between two [`ShooterStatus`] messages.
    pub status_interval: f64,
}

impl Default for ShooterSettings {
    /// Six bots; 100 hit points; respawn after 3 s; bots fire every 1.4 s, 35 % aimed true,
    /// 8 hit points a hit, within 35 m; status 4 times a second.
    fn default() -> Self {
        Self {
            bots: 6,
            player_health: 100.0,
            bot_health: 100.0,
            respawn_seconds: 3.0,
            bot_fire_interval: 1.4,
            bot_accuracy: 0.35,
            bot_damage: 8.0,
            bot_range: 35.0,
            status_interval: 0.25,
        }
    }
}

/// Server: a character in the match (player or bot), with its score.
#[derive(Component, Clone, Debug, PartialEq)]
pub struct Fighter {
    /// Shown in the kill feed and the scores.
    pub name: String,
    /// Kills so far.
    pub kills: u32,
    /// Deaths so far.
    pub deaths: u32,
    /// Server time of its respawn while dead, seconds.
    pub respawn_at: Option<f64>,
    /// Where it respawns, feet on the floor.
    pub spawn: Vec3,
}

/// Server: a bot's gun.
#[derive(Component, Clone, Debug)]
pub struct BotGun {
    /// Server time of its next shot, seconds.
    pub next_shot: f64,
    rng: SplitMix64,
}

/// Server, on a client's link: its character.
#[derive(Component, Clone, Copy, Debug)]
pub struct PlayerCharacter(pub Entity);

/// One fighter as the clients see it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct FighterStatus {
    /// The character (mapped to the client's entity).
    pub entity: Entity,
    /// Its name.
    pub name: String,
    /// Hit points left.
    pub health: f32,
    /// Hit points when full.
    pub max_health: f32,
    /// Kills so far.
    pub kills: u32,
    /// Deaths so far.
    pub deaths: u32,
    /// Whether it is alive.
    pub alive: bool,
}

/// Server → clients, sequenced (unreliable, newest only), every [`ShooterSettings::status_interval`]: every fighter.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ShooterStatus {
    /// Every fighter in the match.
    pub fighters: Vec<FighterStatus>,
}

impl MapEntities for ShooterStatus {
    fn map_entities<E: EntityMapper>(&mut self, mapper: &mut E) {
        for f in &mut self.fighters {
            f.entity = mapper.get_mapped(f.entity);
        }
    }
}

/// Server → clients, reliable: a kill.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct KillNotice {
    /// The killer's character.
    pub killer: Entity,
    /// The victim's character.
    pub victim: Entity,
    /// The killer's name.
    pub killer_name: String,
    /// The victim's name.
    pub victim_name: String,
    /// The weapon's id, `None` for a bot's gun.
    pub weapon: Option<u8>,
    /// Whether the killing shot hit the head.
    pub headshot: bool,
}

impl MapEntities for KillNotice {
    fn map_entities<E: EntityMapper>(&mut self, mapper: &mut E) {
        self.killer = mapper.get_mapped(self.killer);
        self.victim = mapper.get_mapped(self.victim);
    }
}

/// Client: the latest [`ShooterStatus`].
#[derive(Resource, Clone, Debug, Default)]
pub struct Scoreboard {
    /// Every fighter, as of the latest status.
    pub fighters: Vec<FighterStatus>,
    /// Statuses received.
    pub received: u64,
}

impl Scoreboard {
    /// A fighter by its (client) entity.
    pub fn get(&self, entity: Entity) -> Option<&FighterStatus> {
        self.fighters.iter().find(|f| f.entity == entity)
    }
}

/// Client: the latest kills, newest last.
#[derive(Resource, Clone, Debug, Default)]
pub struct KillFeed {
    /// (client time in seconds when it arrived, the kill); at most [`KillFeed::KEEP`].
    pub entries: VecDeque<(f64, KillNotice)>,
}

impl KillFeed {
    /// Kills kept.
    pub const KEEP: usize = 6;
}

/// The shooter's rules on the server (players joining, bots shooting, deaths, respawns,
/// scores) and their news on the clients. Needs the movement, rewind and combat plugins.
#[derive(Clone, Debug, Default)]
pub struct ShooterGamePlugin {
    /// The match's rules (bots, hit points, respawn time, bots' aim, status rate), inserted
    /// as a resource when the plugin is built. Later changes go to the resource.
    pub settings: ShooterSettings,
}

impl Plugin for ShooterGamePlugin {
    fn build(&self, app: &mut App) {
        app.insert_resource(self.settings.clone())
            .init_resource::<Scoreboard>()
            .init_resource::<KillFeed>()
            .add_net_message_mapped::<ShooterStatus>(NetDirection::ServerToClient)
            .add_net_message_mapped::<KillNotice>(NetDirection::ServerToClient);
        if !app.is_plugin_added::<ShooterBotsPlugin>() {
            app.add_plugins(ShooterBotsPlugin);
        }
        app.add_systems(
            Update,
            (
                (spawn_bots, spawn_players, bots_shoot).before(CombatSystems::Server),
                (deaths, respawn, send_status)
                    .chain()
                    .after(CombatSystems::Server),
            )
                .run_if(any_with_component::<lightyear::prelude::server::Server>),
        )
        .add_systems(Startup, crate::shooter::spawn_arena)
        .add_systems(
            Update,
            receive_news.run_if(any_with_component::<lightyear::prelude::client::Client>),
        )
        .add_systems(
            PreUpdate,
            give_proxies_boxes.run_if(any_with_component::<lightyear::prelude::client::Client>),
        );
    }
}

/// `PreUpdate` on a client: every proxy gets the humanoid's hit boxes (the server's are not
/// replicated; the client poses its own from the proxy's flags, and shots trace them).
pub fn give_proxies_boxes(
    mut commands: Commands,
    assets: Res<AssetServer>,
    proxies: Query<Entity, (With<ProxySmoothing>, Without<UseHitBoxLayout>)>,
) {
    for proxy in &proxies {
        commands
            .entity(proxy)
            .insert(UseHitBoxLayout(assets.load(HUMANOID)));
    }
}

/// Everything the shooter adds to an App, server or client alike (lightyear's plugins, the
/// transport and `UnlagNetPlugin` are the App builder's, and an `AssetPlugin` reading this
/// repository's `assets/`, e.g. [`asset_plugin`](crate::asset_plugin)): physics, movement
/// prediction, proxy smoothing, lag compensation, combat, the net panel, the net graph, the
/// HUD's state and the match's rules, on the arena.
#[derive(Clone, Debug, Default)]
pub struct ShooterPlugins {
    /// The match's rules.
    pub settings: ShooterSettings,
}

impl PluginGroup for ShooterPlugins {
    fn build(self) -> bevy::app::PluginGroupBuilder {
        bevy::app::PluginGroupBuilder::start::<Self>()
            .add(unlag_testbed::RapierFixedPlugin::default())
            .add(MovementPredictionPlugin::<CharacterMovement>::default())
            .add(ProxySmoothingPlugin::default())
            .add(RewindPlugin::default())
            .add(CombatPlugin {
                settings: CombatSettings {
                    weapons_path: Some(WEAPONS.into()),
                    ..default()
                },
            })
            .add(unlag::CharacterProxyPlugin)
            .add(crate::NetPanelPlugin)
            .add(unlag::diagnostics::NetGraphPlugin::default())
            .add(crate::hud::HudPlugin)
            .add(ShooterGamePlugin {
                settings: self.settings,
            })
    }
}

/// Where player `k` (re)spawns: spread on a circle of 8 m around the middle.
pub fn player_spawn(k: u64) -> Vec3 {
    let a = k as f32 * 2.4 + 0.4;
    Vec3::new(8.0 * a.cos(), 0.0, 8.0 * a.sin())
}

fn spawn_bots(
    mut commands: Commands,
    settings: Res<ShooterSettings>,
    assets: Res<AssetServer>,
    mut done: Local<bool>,
) {
    if *done {
        return;
    }
    *done = true;
    let layout: Handle<HitBoxLayout> = assets.load(HUMANOID);
    for i in 0..settings.bots {
        let brain = BotBrain::new(i, settings.bots);
        commands.spawn((
            bot_bundle(i, settings.bots),
            UseHitBoxLayout(layout.clone()),
            Health::new(settings.bot_health),
            Fighter {
                name: format!("bot {}", i + 1),
                kills: 0,
                deaths: 0,
                respawn_at: None,
                spawn: brain.start(),
            },
            BotGun {
                next_shot: 1.0 + i as f64 * 0.37,
                rng: SplitMix64::new(0xB07 + i as u64),
            },
            Replicate::to_clients(NetworkTarget::All),
        ));
    }
}

/// Every connected client without a character gets one.
fn spawn_players(
    mut commands: Commands,
    settings: Res<ShooterSettings>,
    assets: Res<AssetServer>,
    links: Query<Entity, (With<ClientOf>, With<Connected>, Without<PlayerCharacter>)>,
    mut joined: Local<u64>,
) {
    for link in &links {
        *joined += 1;
        let k = *joined;
        let spawn = player_spawn(k);
        let character = commands
            .spawn((
                MovementState::<CharacterMovement>(CharacterState {
                    feet: spawn,
                    ..default()
                }),
                UseHitBoxLayout(assets.load(HUMANOID)),
                Health::new(settings.player_health),
                Fighter {
                    name: format!("player {k}"),
                    kills: 0,
                    deaths: 0,
                    respawn_at: None,
                    spawn,
                },
                Replicate::to_clients(NetworkTarget::All),
                ControlledBy {
                    owner: link,
                    lifetime: Lifetime::default(),
                },
            ))
            .id();
        commands.entity(link).insert(PlayerCharacter(character));
        info!("player {k} joined: character {character}");
    }
}

/// A bot's shot this frame: who fired, from where, to where, and what it hit.
struct BotShot {
    bot: Entity,
    origin: Vec3,
    end: Vec3,
    hit: Option<(Entity, f32, String, bool)>,
}

/// Bots whose gun is ready fire at the nearest living fighter they can see, judged against the
/// present (the server's own shots need no rewind); everyone sees the shot.
#[allow(clippy::too_many_arguments)]
fn bots_shoot(
    settings: Res<ShooterSettings>,
    clock: Res<NetClock>,
    mut bots: Query<(Entity, &mut BotGun, &MovementState<CharacterMovement>)>,
    fighters: Query<(Entity, &MovementState<CharacterMovement>), With<Fighter>>,
    mut world: ParamSet<(RewindQuery, Query<&mut Health>)>,
    mut damaged: MessageWriter<Damaged>,
    mut killed: MessageWriter<Killed>,
    echo: Query<(&mut MessageSender<CosmeticFires>, &mut LinkTraffic), With<ClientOf>>,
) {
    let now = clock.server_time;
    let mut shots = Vec::new();
    {
        let alive: Vec<(Entity, Vec3)> = {
            let health = world.p1();
            fighters
                .iter()
                .filter(|(e, _)| health.get(*e).is_ok_and(|h| h.alive()))
                .map(|(e, s)| (e, s.0.feet))
                .collect()
        };
        let rewind = world.p0();
        for (bot, mut gun, state) in &mut bots {
            if now < gun.next_shot || !alive.iter().any(|(e, _)| *e == bot) {
                continue;
            }
            let shooter = (bot, &mut *gun, state.0.feet);
            shots.extend(bot_shot(shooter, &alive, &settings, &rewind, now));
        }
    }
    if shots.is_empty() {
        return;
    }
    let mut health = world.p1();
    for shot in &shots {
        deal_bot_hit(shot, &mut health, &mut damaged, &mut killed);
    }
    echo_bot_shots(&shots, echo);
}

/// `bot`'s shot (its gun and where its feet are, metres) at the nearest of the `alive`
/// fighters it can see, missing by the settings' accuracy, traced against the present; `None`
/// with nobody in sight (it looks again in a quarter second).
fn bot_shot(
    (bot, gun, feet): (Entity, &mut BotGun, Vec3),
    alive: &[(Entity, Vec3)],
    settings: &ShooterSettings,
    rewind: &RewindQuery,
    now: f64,
) -> Option<BotShot> {
    let eye = feet + Vec3::Y * EYE_HEIGHT;
    let visible = |(e, target): &&(Entity, Vec3)| {
        let chest = *target + Vec3::Y * 1.3;
        let to = chest - eye;
        let d = to.length();
        *e != bot
            && d > 0.5
            && d < settings.bot_range
            && rewind.wall(eye, to / d, d, Some(bot)) >= d - 0.3
    };
    let Some((_, target)) = alive.iter().filter(visible).min_by(|a, b| {
        a.1.distance_squared(feet)
            .total_cmp(&b.1.distance_squared(feet))
    }) else {
        gun.next_shot = now + 0.25;
        return None;
    };
    gun.next_shot = now + settings.bot_fire_interval;
    let mut aim = *target + Vec3::Y * 1.3;
    if gun.rng.next_f64() as f32 >= settings.bot_accuracy {
        let side = (aim - eye).cross(Vec3::Y).normalize_or(Vec3::X);
        let sign = if gun.rng.next_u64() % 2 == 0 {
            1.0
        } else {
            -1.0
        };
        let miss = 0.6 + 0.9 * gun.rng.next_f64() as f32;
        aim += side * sign * miss + Vec3::Y * (gun.rng.next_f64() as f32 - 0.5);
    }
    let dir = (aim - eye).normalize_or(Vec3::NEG_Z);
    let range = settings.bot_range;
    let hit = rewind.ray(eye, dir, range, now, Some(bot)).ok().flatten();
    let wall = rewind.wall(eye, dir, range, Some(bot));
    let (end, hit) = match hit {
        Some(h) if h.distance <= wall => (
            h.point,
            Some((
                h.character,
                settings.bot_damage * h.damage_multiplier * if h.is_head { 2.0 } else { 1.0 },
                h.bone,
                h.is_head,
            )),
        ),
        _ => (eye + dir * wall, None),
    };
    Some(BotShot {
        bot,
        origin: eye,
        end,
        hit,
    })
}

/// Takes a bot shot's damage off a living target's [`Health`] and tells the game.
fn deal_bot_hit(
    shot: &BotShot,
    health: &mut Query<&mut Health>,
    damaged: &mut MessageWriter<Damaged>,
    killed: &mut MessageWriter<Killed>,
) {
    let Some((target, damage, bone, headshot)) = &shot.hit else {
        return;
    };
    let Ok(mut hp) = health.get_mut(*target) else {
        return;
    };
    if !hp.alive() {
        return;
    }
    hp.current = (hp.current - damage).max(0.0);
    damaged.write(Damaged {
        target: *target,
        shooter: shot.bot,
        weapon: BOT_GUN,
        damage: *damage,
        bone: bone.clone(),
        headshot: *headshot,
    });
    if !hp.alive() {
        killed.write(Killed {
            target: *target,
            shooter: shot.bot,
            weapon: BOT_GUN,
        });
    }
}

/// Shows every client the bots' shots of this frame (effects only), in one batch.
fn echo_bot_shots(
    shots: &[BotShot],
    mut echo: Query<(&mut MessageSender<CosmeticFires>, &mut LinkTraffic), With<ClientOf>>,
) {
    let fires: Vec<CosmeticFire> = shots
        .iter()
        .map(|s| {
            CosmeticFire {
                shooter: s.bot,
                weapon: 0,
                origin: s.origin,
                ends: Arc::from([s.end]),
            }
            .as_sent()
        })
        .collect();
    // Encoded once for every client (as the combat plugin sends the players' shots), and
    // counted at its known size rather than measured again per client.
    let encoded = EncodedRuns::encode(fires.iter());
    let mut all = encoded.none();
    (0..fires.len()).for_each(|i| all.push(i));
    let batch = CosmeticFires {
        shots: Vec::new(),
        encoded: all,
    };
    let bytes = batch.wire_size();
    for (mut sender, mut traffic) in &mut echo {
        traffic.send_counted_sized::<UnreliableChannel, _>(&mut sender, batch.clone(), bytes);
    }
}

/// The weapon id bots' shots carry in [`Damaged`] and [`Killed`] (no weapon of the table).
pub const BOT_GUN: u8 = u8::MAX;

/// Kills: the scores change, the victim waits for its respawn, everyone hears of it.
fn deaths(
    settings: Res<ShooterSettings>,
    clock: Res<NetClock>,
    mut killed: MessageReader<Killed>,
    mut damaged: MessageReader<Damaged>,
    mut fighters: Query<&mut Fighter>,
    mut links: Query<(&mut MessageSender<KillNotice>, &mut LinkTraffic), With<ClientOf>>,
) {
    let headshots: Vec<Entity> = damaged
        .read()
        .filter(|d| d.headshot)
        .map(|d| d.target)
        .collect();
    for kill in killed.read() {
        let name = |e: Entity, fighters: &Query<&mut Fighter>| {
            fighters
                .get(e)
                .map_or_else(|_| "?".to_owned(), |f| f.name.clone())
        };
        let notice = KillNotice {
            killer: kill.shooter,
            victim: kill.target,
            killer_name: name(kill.shooter, &fighters),
            victim_name: name(kill.target, &fighters),
            weapon: (kill.weapon != BOT_GUN).then_some(kill.weapon),
            headshot: headshots.contains(&kill.target),
        };
        if let Ok(mut victim) = fighters.get_mut(kill.target) {
            victim.deaths += 1;
            victim.respawn_at = Some(clock.server_time + settings.respawn_seconds);
        }
        if kill.shooter != kill.target
            && let Ok(mut killer) = fighters.get_mut(kill.shooter)
        {
            killer.kills += 1;
        }
        info!("{} killed {}", notice.killer_name, notice.victim_name);
        for (mut sender, mut traffic) in &mut links {
            traffic.send_counted::<ReliableChannel, _>(&mut sender, notice.clone());
        }
    }
}

/// The dead whose time has come are back at their spawn with full health (clients snap them
/// there, not sweep them across the arena).
fn respawn(
    mut commands: Commands,
    clock: Res<NetClock>,
    mut fighters: Query<(
        Entity,
        &mut Fighter,
        &mut Health,
        &mut MovementState<CharacterMovement>,
    )>,
) {
    for (entity, mut fighter, mut health, mut state) in &mut fighters {
        if fighter.respawn_at.is_some_and(|t| clock.server_time >= t) {
            fighter.respawn_at = None;
            health.current = health.max;
            state.0 = CharacterState {
                feet: fighter.spawn,
                ..default()
            };
            commands.entity(entity).insert(Teleported);
        }
    }
}

fn send_status(
    settings: Res<ShooterSettings>,
    clock: Res<NetClock>,
    fighters: Query<(Entity, &Fighter, &Health)>,
    mut links: Query<(&mut MessageSender<ShooterStatus>, &mut LinkTraffic), With<ClientOf>>,
    mut next: Local<f64>,
) {
    if clock.server_time < *next {
        return;
    }
    *next = clock.server_time + settings.status_interval;
    let mut all: Vec<FighterStatus> = fighters
        .iter()
        .map(|(entity, f, h)| FighterStatus {
            entity,
            name: f.name.clone(),
            health: h.current,
            max_health: h.max,
            kills: f.kills,
            deaths: f.deaths,
            alive: h.alive(),
        })
        .collect();
    all.sort_by(|a, b| a.name.cmp(&b.name));
    for (mut sender, mut traffic) in &mut links {
        traffic.send_counted::<SequencedChannel, _>(
            &mut sender,
            ShooterStatus {
                fighters: all.clone(),
            },
        );
    }
}

fn receive_news(
    time: Res<Time<Real>>,
    // Separate queries: a receiver only exists once its first message has arrived.
    mut statuses: Query<
        &mut MessageReceiver<ShooterStatus>,
        With<lightyear::prelude::client::Client>,
    >,
    mut kills: Query<&mut MessageReceiver<KillNotice>, With<lightyear::prelude::client::Client>>,
    mut board: ResMut<Scoreboard>,
    mut feed: ResMut<KillFeed>,
    mut commands: Commands,
) {
    for mut receiver in &mut statuses {
        if let Some(latest) = receiver.receive().last() {
            board.fighters = latest.fighters;
            board.received += 1;
            // The combat client's news of health: its hits on a body it expects dead (its own
            // earlier shot killed it) promise nothing.
            for f in &board.fighters {
                let hp = if f.alive { f.health } else { 0.0 };
                commands
                    .entity(f.entity)
                    .try_insert(unlag::combat::ProxyHealth(hp));
            }
        }
    }
    for mut receiver in &mut kills {
        for kill in receiver.receive() {
            commands
                .entity(kill.victim)
                .try_insert(unlag::combat::ProxyHealth(0.0));
            feed.entries.push_back((time.elapsed_secs_f64(), kill));
            while feed.entries.len() > KillFeed::KEEP {
                feed.entries.pop_front();
            }
        }
    }
}
