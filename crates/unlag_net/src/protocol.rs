//! Channels and message registration, the same way for every plugin.
//!
//! lightyear hashes the registered channels and messages, in registration order, and refuses a
//! connection whose two ends disagree. So every `unlag` plugin registers its messages from
//! `Plugin::build` through [`NetMessageAppExt::add_net_message`], whatever the App's role: adding
//! the same plugins in the same order on client and server always yields the same protocol.

use bevy::prelude::*;
use lightyear::prelude::*;
use serde::{Serialize, de::DeserializeOwned};

/// Unordered, unreliable: for messages that stand alone and are useless when late (periodic
/// reports). Both directions.
pub struct UnreliableChannel;

/// Sequenced, unreliable: only the newest message is delivered, older late ones are dropped
/// (moves, proxy states, acknowledgements). Both directions.
pub struct SequencedChannel;

/// Ordered, reliable: delivered once each, in order (shots, corrections that must not be lost,
/// configuration). Both directions.
pub struct ReliableChannel;

/// Which way a message travels.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Reflect)]
pub enum NetDirection {
    /// From each client to the server.
    ClientToServer,
    /// From the server to clients.
    ServerToClient,
    /// Both ways.
    Bidirectional,
}

impl From<NetDirection> for NetworkDirection {
    fn from(d: NetDirection) -> Self {
        match d {
            NetDirection::ClientToServer => NetworkDirection::ClientToServer,
            NetDirection::ServerToClient => NetworkDirection::ServerToClient,
            NetDirection::Bidirectional => NetworkDirection::Bidirectional,
        }
    }
}

/// The messages registered through [`NetMessageAppExt`], in registration order: a readable form
/// of the protocol, and the list of message kinds traffic is counted by.
#[derive(Resource, Clone, Debug, Default)]
pub struct NetProtocol {
    messages: Vec<(&'static str, NetDirection)>,
}

impl NetProtocol {
    /// The registered messages (short type name, direction), in registration order.
    pub fn messages(&self) -> &[(&'static str, NetDirection)] {
        &self.messages
    }
}

/// Registers `unlag`'s channels; added by [`UnlagNetPlugin`](crate::UnlagNetPlugin).
pub(crate) fn register_channels(app: &mut App) {
    app.add_channel::<UnreliableChannel>(ChannelSettings {
        mode: ChannelMode::UnorderedUnreliable,
        ..default()
    })
    .add_direction(NetworkDirection::Bidirectional);
    app.add_channel::<SequencedChannel>(ChannelSettings {
        mode: ChannelMode::SequencedUnreliable,
        ..default()
    })
    .add_direction(NetworkDirection::Bidirectional);
    app.add_channel::<ReliableChannel>(ChannelSettings {
        mode: ChannelMode::OrderedReliable(ReliableSettings::default()),
        ..default()
    })
    .add_direction(NetworkDirection::Bidirectional);
}

/// Registers network messages the way every `unlag` plugin does.
pub trait NetMessageAppExt {
    /// Registers message `M` travelling in `direction`. Call it from `Plugin::build`, on client
    /// and server alike, after lightyear's `ClientPlugins`/`ServerPlugins` and
    /// [`UnlagNetPlugin`](crate::UnlagNetPlugin). Registering the same message twice is a no-op.
    fn add_net_message<M>(&mut self, direction: NetDirection) -> &mut Self
    where
        M: Serialize + DeserializeOwned + Send + Sync + 'static;
}

impl NetMessageAppExt for App {
    fn add_net_message<M>(&mut self, direction: NetDirection) -> &mut Self
    where
        M: Serialize + DeserializeOwned + Send + Sync + 'static,
    {
        let name = short_type_name::<M>();
        let mut protocol = self.world_mut().get_resource_or_init::<NetProtocol>();
        if protocol.messages.iter().any(|(n, _)| *n == name) {
            return self;
        }
        protocol.messages.push((name, direction));
        self.register_message::<M>()
            .add_direction(NetworkDirection::from(direction));
        self
    }
}

/// `path::to::Type<A>` → `Type<A>`: how message kinds are named in traffic figures.
pub fn short_type_name<T: ?Sized>() -> &'static str {
    let full = core::any::type_name::<T>();
    let head = full.split('<').next().unwrap_or(full);
    match head.rfind("::") {
        Some(i) => &full[i + 2..],
        None => full,
    }
}
