//! Shared pieces of the fuzz targets: the real match the server entry points are judged in,
//! and the capture of real messages that seeds the corpora.

use std::path::PathBuf;

/// Where a target writes the messages its harness saw, when `UNLAG_FUZZ_CAPTURE` names a
/// folder (`fuzz/run.sh --capture` sets it): one file per message, named by its content.
pub fn capture_dir(target: &str) -> Option<PathBuf> {
    let root = std::env::var_os("UNLAG_FUZZ_CAPTURE")?;
    let dir = PathBuf::from(root).join(target);
    std::fs::create_dir_all(&dir).ok()?;
    Some(dir)
}

/// Writes `bytes` into `dir` under a name from its content (the same message once).
pub fn capture(dir: &std::path::Path, bytes: &[u8]) {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    let _ = std::fs::write(dir.join(format!("{:016x}", h.finish())), bytes);
}

use bevy::prelude::*;
use lightyear::prelude::server::ClientOf;
use lightyear::prelude::*;
use unlag_combat::{FireRequest, ReloadRequest, ServerArmory};
use unlag_movement::{CharacterMovement, ServerMove};
use unlag_net::{DelayReport, NetBeat};
use unlag_report::{Pace, ReportOptions};
use unlag_smoothing::ProxyUpdates;
use unlag_testbed::Testbed;

/// A real match (the report's: scripted clients shooting at bots over the in-process link with
/// latency, jitter and loss), played a few seconds: what the server entry points are judged in.
pub struct Match {
    /// The testbed running it.
    pub tb: Testbed,
    /// The server's link entity of client 0.
    pub link: Entity,
    /// Client 0's character on the server.
    pub shooter: Entity,
}

/// Seconds the match is played before fuzzing starts (or while capturing).
const WARM_UP: f64 = 4.0;

impl Match {
    /// Starts and plays the match. With `UNLAG_FUZZ_CAPTURE` set, every message the server and
    /// client 0 receive meanwhile is written to the corpus folders of the targets that read
    /// them.
    pub fn start() -> Self {
        let options = ReportOptions {
            bots: 6,
            clients: 2,
            rtt_ms: 80.0,
            jitter_ms: 10.0,
            loss_percent: 2.0,
            seed: 7,
            ..default()
        };
        let pace = Pace {
            frame_rate_hz: 60.0,
            ..default()
        };
        let mut tb = unlag_report::start_match_with(&options, pace, |tb| {
            if std::env::var_os("UNLAG_FUZZ_CAPTURE").is_some() {
                add_capture(tb);
            }
        })
        .expect("the match starts");
        tb.run_for(std::time::Duration::from_secs_f64(WARM_UP));
        let link = tb.server_link(0).expect("client 0 is connected");
        let world = tb.server_world_mut();
        let shooter = world
            .query::<(Entity, &ControlledBy, &ServerArmory)>()
            .iter(world)
            .find(|(_, c, _)| c.owner == link)
            .map(|(e, ..)| e)
            .expect("client 0 has a character");
        Self { tb, link, shooter }
    }
}

/// Systems that copy every message of the kinds fuzzed into the corpus folders.
fn add_capture(tb: &mut Testbed) {
    tb.server().add_systems(
        PreUpdate,
        (
            capture_datagrams
                .after(lightyear::link::LinkSystems::Receive)
                .before(lightyear::connection::ConnectionSystems::Receive),
            capture_server_messages.after(MessageSystems::Receive),
        ),
    );
    // Before the clock, which drains the beats.
    tb.client(0).add_systems(
        PreUpdate,
        capture_client_messages
            .after(MessageSystems::Receive)
            .before(unlag_net::NetSystems::Clock),
    );
}

fn capture_datagrams(mut links: Query<&mut Link, With<ClientOf>>, mut count: Local<usize>) {
    let Some(dir) = capture_dir("datagram") else {
        return;
    };
    for mut link in &mut links {
        for _ in 0..link.recv.len() {
            let Some(packet) = link.recv.pop() else {
                break;
            };
            // A sample: a few hundred datagrams cover every kind the link carries.
            if *count < 400 {
                capture(&dir, &packet);
                *count += 1;
            }
            link.recv.push_raw(packet);
        }
    }
}

fn write_all<M: serde::Serialize>(target: &str, messages: impl Iterator<Item = M>) {
    let Some(dir) = capture_dir(target) else {
        return;
    };
    for m in messages {
        if let Ok(bytes) = postcard::to_allocvec(&m) {
            capture(&dir, &bytes);
        }
    }
}

fn peek<M: lightyear::prelude::Message + Clone>(receiver: &mut MessageReceiver<M>) -> Vec<M> {
    let mut seen = Vec::new();
    receiver.retain_messages(|m| {
        seen.push(m.clone());
        true
    });
    seen
}

fn capture_server_messages(
    mut links: Query<
        (
            Option<&mut MessageReceiver<FireRequest>>,
            Option<&mut MessageReceiver<ReloadRequest>>,
            Option<&mut MessageReceiver<DelayReport>>,
            Option<&mut MessageReceiver<ServerMove<CharacterMovement>>>,
        ),
        With<ClientOf>,
    >,
) {
    for (fire, reload, report, moves) in &mut links {
        if let Some(mut r) = fire
            && let Some(dir) = capture_dir("fire_request")
        {
            // As lightyear sends it: its bytes alone (`WholeBody`).
            for m in peek(&mut r) {
                capture(&dir, &unlag_net::WholeBody::body(&m));
            }
        }
        if let Some(mut r) = reload {
            write_all("reload_request", peek(&mut r).into_iter());
        }
        if let Some(mut r) = report {
            write_all("delay_report", peek(&mut r).into_iter());
        }
        if let Some(mut r) = moves
            && let Some(dir) = capture_dir("server_move")
        {
            for m in peek(&mut r) {
                capture(&dir, m.payload());
            }
        }
    }
}

fn capture_client_messages(
    mut links: Query<(
        Option<&mut MessageReceiver<ProxyUpdates>>,
        Option<&mut MessageReceiver<NetBeat>>,
    )>,
) {
    for (updates, beats) in &mut links {
        if let Some(mut r) = updates {
            write_all("proxy_updates", peek(&mut r).into_iter());
        }
        if let Some(mut r) = beats {
            write_all("net_beat", peek(&mut r).into_iter());
        }
    }
}
