//! A server that stops when asked, the way an orchestrator expects a match process to: it
//! finishes the frame it is in, tells every connected client (netcode's disconnect, so clients
//! see the server go at once instead of timing out), closes its socket and ends the App with
//! success. Who asks is up to the game: a signal handler (the examples' dedicated server on
//! SIGTERM), the end of a match, another thread.

use bevy::prelude::*;
use core::sync::atomic::{AtomicBool, Ordering};
use lightyear::prelude::server::{ClientOf, Server, Stop, Stopped};
use lightyear::prelude::*;
use std::sync::Arc;

/// A request to stop the server: cheap to clone and share with whoever may ask (a signal
/// handler, another thread), set once and never cleared.
#[derive(Resource, Clone, Default, Debug)]
pub struct StopRequest(Arc<AtomicBool>);

impl StopRequest {
    /// Asks the server to stop (again is the same as once).
    pub fn ask(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether the server was asked to stop.
    pub fn asked(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Stops the App's servers when its [`StopRequest`] is asked: in `Update` of the next frame
/// (after that frame's fixed ticks) it triggers lightyear's [`Stop`] on every running server, so
/// netcode's disconnect packets to each connected client leave in that frame's send; once the
/// servers are [`Stopped`] (in the next frame's receive), or at the latest `max_frames` frames
/// after it began, it writes [`AppExit::Success`]. Add it after lightyear's `ServerPlugins`.
pub struct ServerStopPlugin {
    /// The request this App stops on (keep a clone to ask).
    pub request: StopRequest,
    /// Frames to wait for the servers to stop before the App exits anyway (≥ 2: the disconnect
    /// goes out in the first, the servers stop in the second).
    pub max_frames: u32,
}

impl Default for ServerStopPlugin {
    fn default() -> Self {
        Self {
            request: StopRequest::default(),
            max_frames: 30,
        }
    }
}

/// How a requested stop went, for the log, a test, or a game that wants to say goodbye.
#[derive(Resource, Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerStopState {
    /// Frames since the stop began (`None` until it is asked).
    pub frames: Option<u32>,
    /// Clients connected when the stop began: each was sent a disconnect.
    pub clients_told: usize,
    /// Whether [`AppExit::Success`] has been written.
    pub exited: bool,
}

/// [`ServerStopPlugin::max_frames`], as the system reads it.
#[derive(Resource)]
struct StopWait(u32);

impl Plugin for ServerStopPlugin {
    fn build(&self, app: &mut App) {
        app.insert_resource(self.request.clone())
            .insert_resource(StopWait(self.max_frames.max(2)))
            .init_resource::<ServerStopState>()
            // Not in First: netcode closes a stopping server's transport in its receive
            // (PreUpdate), so a stop begun before it would close the socket before the
            // disconnect packets were sent.
            .add_systems(Update, stop_when_asked);
    }
}

/// Update: begins the stop once asked, then ends the App when the servers have stopped.
fn stop_when_asked(
    request: Res<StopRequest>,
    wait: Res<StopWait>,
    mut state: ResMut<ServerStopState>,
    servers: Query<(Entity, Has<Stopped>), With<Server>>,
    clients: Query<(), (With<ClientOf>, With<Connected>)>,
    mut commands: Commands,
    mut exit: MessageWriter<AppExit>,
) {
    if !request.asked() || state.exited {
        return;
    }
    let Some(frames) = state.frames else {
        // This frame's ticks are done: tell the clients.
        state.frames = Some(0);
        state.clients_told = clients.iter().count();
        info!(
            "stopping: telling {} connected clients, then exiting",
            state.clients_told
        );
        for (server, stopped) in &servers {
            if !stopped {
                commands.trigger(Stop { entity: server });
            }
        }
        return;
    };
    let frames = frames + 1;
    state.frames = Some(frames);
    let all_stopped = servers.iter().all(|(_, stopped)| stopped);
    if all_stopped || frames >= wait.0 {
        if !all_stopped {
            warn!("stopping: the servers did not stop in {frames} frames; exiting anyway");
        }
        info!("stopped after {frames} frames");
        state.exited = true;
        exit.write(AppExit::Success);
    }
}
