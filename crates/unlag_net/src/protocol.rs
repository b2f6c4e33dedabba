//! Channels and message registration, the same way for every plugin.
//!
//! lightyear hashes the registered channels and messages, in registration order, and refuses a
//! connection whose two ends disagree. So every `unlag` plugin registers its messages from
//! `Plugin::build` through [`NetMessageAppExt::add_net_message`], whatever the App's role: adding
//! the same plugins in the same order on client and server always yields the same protocol.

use std::collections::HashMap;

use bevy::ecs::entity::MapEntities;
use bevy::prelude::*;
use lightyear::prelude::*;
use lightyear_messages::registry::MessageKind;
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
    /// How the server's packet guard reads each of these messages from a client.
    from_clients: HashMap<MessageKind, ClientMessageRule>,
}

impl NetProtocol {
    /// The registered messages (short type name, direction), in registration order.
    pub fn messages(&self) -> &[(&'static str, NetDirection)] {
        &self.messages
    }

    /// How the server's packet guard takes message `kind` from a client; `None` for a message
    /// not registered through [`NetMessageAppExt`] (lightyear's own).
    pub(crate) fn client_rule(&self, kind: &MessageKind) -> Option<ClientMessageRule> {
        self.from_clients.get(kind).copied()
    }
}

/// How the server takes one message kind from a client.
#[derive(Copy, Clone, Debug)]
pub(crate) enum ClientMessageRule {
    /// Taken when its body decodes as lightyear decodes it: with postcard, trailing bytes
    /// ignored, or whole ([`WholeBody`]).
    Decodes(fn(&[u8]) -> bool),
    /// Sent by the server only: a client sending it is malformed.
    NotFromClients,
}

/// Whether `bytes` start with a postcard encoding of `M`, as lightyear decodes a message body.
fn decodes<M: DeserializeOwned>(bytes: &[u8]) -> bool {
    postcard::take_from_bytes::<M>(bytes).is_ok()
}

/// Whether `bytes` are a whole body of `M` ([`WholeBody`]).
fn decodes_whole<M: WholeBody>(bytes: &[u8]) -> bool {
    M::from_body(bytes).is_ok()
}

/// The guard's rule for a message travelling in `direction` whose body `decodes`.
fn rule_of(direction: NetDirection, decodes: fn(&[u8]) -> bool) -> ClientMessageRule {
    match direction {
        NetDirection::ServerToClient => ClientMessageRule::NotFromClients,
        _ => ClientMessageRule::Decodes(decodes),
    }
}

/// The guard's rule for a message of type `M` travelling in `direction`.
fn client_rule<M: DeserializeOwned>(direction: NetDirection) -> ClientMessageRule {
    rule_of(direction, decodes::<M>)
}

/// A message whose body on the wire is its own bytes and nothing else: lightyear's framing
/// states every message's length already, so none goes before them (postcard writes a byte
/// vector's length first: a byte a message of up to 127 bytes). Registered with
/// [`NetMessageAppExt::add_net_message_whole`] or
/// [`NetMessageAppExt::add_net_message_mapped_whole`]; its serde form, if it has one, is not
/// what goes on lightyear's wire.
pub trait WholeBody: Sized {
    /// The message's bytes.
    fn body(&self) -> std::borrow::Cow<'_, [u8]>;

    /// The message whose bytes are exactly `bytes` (they come from the network: any bytes),
    /// or why not.
    fn from_body(bytes: &[u8]) -> Result<Self, unlag_core::DecodeError>;
}

/// lightyear's writer and reader of a [`WholeBody`] message.
fn whole_fns<M: WholeBody>() -> lightyear_serde::registry::SerializeFns<M> {
    lightyear_serde::registry::SerializeFns {
        serialize: write_whole::<M>,
        deserialize: read_whole::<M>,
    }
}

/// lightyear's writer of a [`WholeBody`] message.
fn write_whole<M: WholeBody>(
    message: &M,
    writer: &mut MessageWriter,
) -> Result<(), MessageEncodeError> {
    let body = message.body();
    make_room(writer, body.len());
    writer.extend_from_slice(&body);
    Ok(())
}

/// lightyear's reader of a [`WholeBody`] message: the rest of the message's bytes, all of them.
fn read_whole<M: WholeBody>(
    reader: &mut lightyear_serde::reader::Reader,
) -> Result<M, MessageEncodeError> {
    let all = reader.remaining_slice();
    let read = all.len() as u64;
    let message = M::from_body(all).map_err(|_| MessageEncodeError::InvalidValue)?;
    reader.set_position(reader.position() + read);
    Ok(message)
}

/// The least time the reliable channel waits for a message's acknowledgement before it sends
/// the message again, on top of a nonzero
/// [`UnlagNetPlugin::ack_delay`](crate::UnlagNetPlugin::ack_delay) (lightyear waits 1.5 RTT,
/// and nothing more by default: on a LAN, a message whose acknowledgement was held back for a
/// packet to ride on would be sent twice).
pub const RELIABLE_RESEND_MIN: core::time::Duration = core::time::Duration::from_millis(20);

/// Registers `unlag`'s channels; added by [`UnlagNetPlugin`](crate::UnlagNetPlugin), whose
/// `ack_delay` (seconds) the reliable channel's resends wait for.
pub(crate) fn register_channels(app: &mut App, ack_delay: f64) {
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
        mode: ChannelMode::OrderedReliable(ReliableSettings {
            rtt_resend_min_delay: if ack_delay > 0.0 {
                RELIABLE_RESEND_MIN + core::time::Duration::from_secs_f64(ack_delay)
            } else {
                core::time::Duration::ZERO
            },
            ..default()
        }),
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

    /// Like [`add_net_message`](Self::add_net_message), for a message that refers to
    /// replicated entities: they are mapped between the two ends' entities on the way (an
    /// entity the receiver does not know arrives as `Entity::PLACEHOLDER`).
    fn add_net_message_mapped<M>(&mut self, direction: NetDirection) -> &mut Self
    where
        M: Serialize + DeserializeOwned + MapEntities + Clone + Send + Sync + 'static;

    /// Like [`add_net_message_mapped`](Self::add_net_message_mapped), with the message's own
    /// writer on the way out: `encode` must write exactly the bytes postcard writes for the
    /// message (the receiver decodes it with serde as usual), only faster; see
    /// [`write_postcard`]. Entities the writer copies from bytes encoded earlier are not
    /// mapped on the way out (the sender's own entities, as the server's are).
    fn add_net_message_mapped_encoded<M>(
        &mut self,
        direction: NetDirection,
        encode: MessageEncoder<M>,
    ) -> &mut Self
    where
        M: Serialize + DeserializeOwned + MapEntities + Clone + Send + Sync + 'static;

    /// Like [`add_net_message`](Self::add_net_message), for a message that goes as its own
    /// bytes alone ([`WholeBody`]: no length of its own before them).
    fn add_net_message_whole<M>(&mut self, direction: NetDirection) -> &mut Self
    where
        M: WholeBody + Send + Sync + 'static;

    /// Like [`add_net_message_mapped`](Self::add_net_message_mapped), for a message that goes
    /// as its own bytes alone ([`WholeBody`]).
    fn add_net_message_mapped_whole<M>(&mut self, direction: NetDirection) -> &mut Self
    where
        M: WholeBody + MapEntities + Clone + Send + Sync + 'static;
}

/// lightyear's send buffer for one message (see
/// [`NetMessageAppExt::add_net_message_mapped_encoded`]).
pub use lightyear_serde::writer::Writer as MessageWriter;

/// Why a message could not be written (see [`MessageEncoder`]).
pub use lightyear_serde::SerializationError as MessageEncodeError;

/// A message's own writer: the bytes postcard would write for it, appended to lightyear's
/// send buffer.
pub type MessageEncoder<M> = fn(&M, &mut MessageWriter) -> Result<(), MessageEncodeError>;

/// How much room, bytes, [`make_room`] makes in lightyear's writer at least when it runs short.
pub const WRITER_CHUNK: usize = 8 * 1024;

/// Makes room for `bytes` more bytes in `writer`, a [`WRITER_CHUNK`] at least.
///
/// lightyear splits each message off its writer's buffer and keeps the pieces until their
/// packets leave, so the buffer is shared and has no room left after a message: the next one's
/// first write allocated a buffer just big enough (a pre-encoded message's copy allocated and
/// grew the buffer once each: 3 % of a 256-player server's update). Made a chunk at a time,
/// the following messages split off the same allocation, freed once their packets left.
pub fn make_room(writer: &mut MessageWriter, bytes: usize) {
    if writer.capacity() - writer.len() < bytes {
        writer.reserve(bytes.max(WRITER_CHUNK));
    }
}

/// Appends `value`'s postcard encoding (lightyear's message format) to `writer`.
pub fn write_postcard<T: Serialize + ?Sized>(
    value: &T,
    writer: &mut MessageWriter,
) -> Result<(), MessageEncodeError> {
    /// postcard's output into lightyear's buffer.
    struct Into<'a>(&'a mut MessageWriter);
    impl postcard::ser_flavors::Flavor for Into<'_> {
        type Output = ();
        fn try_push(&mut self, data: u8) -> postcard::Result<()> {
            self.0.extend_from_slice(&[data]);
            Ok(())
        }
        fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
            self.0.extend_from_slice(data);
            Ok(())
        }
        fn finalize(self) -> postcard::Result<()> {
            Ok(())
        }
    }
    postcard::serialize_with_flavor(value, Into(writer))?;
    Ok(())
}

/// A message's own postcard encoding, made once and shared by every client's copy of it (a
/// broadcast: the same message to hundreds of clients), so that lightyear copies the bytes
/// instead of encoding the message again for each.
///
/// A message that carries one holds it in a field skipped by serde (`#[serde(skip)]`: the
/// bytes on the wire are its other fields', as before) and registers
/// [`write_pre_encoded`] as its writer ([`NetMessageAppExt::add_net_message_mapped_encoded`]);
/// a copy without one is encoded as usual. The bytes must be those of the very message that
/// carries them (the fields beside them are what a listen host's own client reads: lightyear
/// hands it the message unencoded). The bytes go as they are: lightyear's send-side entity
/// mapping, which maps only entities the receiving end spawned, does not reach them, so only
/// messages naming the server's own entities may carry them. Copies compare equal whatever
/// their encodings: it is a cache of the fields, not a part of the message.
#[derive(Clone, Debug, Default)]
pub struct PreEncoded(Option<std::sync::Arc<[u8]>>);

impl PreEncoded {
    /// `value`'s postcard encoding (lightyear's message format).
    pub fn encode<T: Serialize + ?Sized>(value: &T) -> Self {
        Self(postcard::to_allocvec(value).ok().map(Into::into))
    }

    /// The encoded bytes, if any (`None` for [`PreEncoded::default`], or when encoding failed).
    pub fn bytes(&self) -> Option<&[u8]> {
        self.0.as_deref()
    }
}

impl PartialEq for PreEncoded {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// A message that may carry its own encoding ([`PreEncoded`]).
pub trait CarriesEncoding: Serialize {
    /// The encoding it carries (empty for none).
    fn pre_encoded(&self) -> &PreEncoded;

    /// The encoding it carries, to replace.
    fn pre_encoded_mut(&mut self) -> &mut PreEncoded;

    /// The message carrying its own encoding (of every field but the encoding).
    fn with_own_encoding(mut self) -> Self
    where
        Self: Sized,
    {
        *self.pre_encoded_mut() = PreEncoded::encode(&self);
        self
    }
}

/// The [`MessageEncoder`] of a message that may carry its own encoding: its bytes copied when
/// it does, postcard's encoding of it otherwise.
pub fn write_pre_encoded<M: CarriesEncoding>(
    message: &M,
    writer: &mut MessageWriter,
) -> Result<(), MessageEncodeError> {
    match message.pre_encoded().bytes() {
        Some(bytes) => {
            make_room(writer, bytes.len());
            writer.extend_from_slice(bytes);
            Ok(())
        }
        None => write_postcard(message, writer),
    }
}

/// Reads one postcard-encoded `M` from lightyear's receive buffer (what lightyear's default
/// reader does).
fn read_postcard<M: DeserializeOwned>(
    reader: &mut lightyear_serde::reader::Reader,
) -> Result<M, MessageEncodeError> {
    let all = reader.remaining_slice();
    let (value, rest) = postcard::take_from_bytes(all)?;
    let read = (all.len() - rest.len()) as u64;
    reader.set_position(reader.position() + read);
    Ok(value)
}

impl NetMessageAppExt for App {
    fn add_net_message<M>(&mut self, direction: NetDirection) -> &mut Self
    where
        M: Serialize + DeserializeOwned + Send + Sync + 'static,
    {
        if record::<M>(self, direction, client_rule::<M>(direction)) {
            self.register_message::<M>()
                .add_direction(NetworkDirection::from(direction));
        }
        self
    }

    fn add_net_message_mapped<M>(&mut self, direction: NetDirection) -> &mut Self
    where
        M: Serialize + DeserializeOwned + MapEntities + Clone + Send + Sync + 'static,
    {
        if record::<M>(self, direction, client_rule::<M>(direction)) {
            self.register_message::<M>()
                .add_map_entities()
                .add_direction(NetworkDirection::from(direction));
        }
        self
    }

    fn add_net_message_mapped_encoded<M>(
        &mut self,
        direction: NetDirection,
        encode: MessageEncoder<M>,
    ) -> &mut Self
    where
        M: Serialize + DeserializeOwned + MapEntities + Clone + Send + Sync + 'static,
    {
        if record::<M>(self, direction, client_rule::<M>(direction)) {
            self.register_message_custom_serde::<M>(lightyear_serde::registry::SerializeFns {
                serialize: encode,
                deserialize: read_postcard::<M>,
            })
            .add_map_entities()
            .add_direction(NetworkDirection::from(direction));
        }
        self
    }

    fn add_net_message_whole<M>(&mut self, direction: NetDirection) -> &mut Self
    where
        M: WholeBody + Send + Sync + 'static,
    {
        if record::<M>(self, direction, rule_of(direction, decodes_whole::<M>)) {
            self.register_message_custom_serde::<M>(whole_fns::<M>())
                .add_direction(NetworkDirection::from(direction));
        }
        self
    }

    fn add_net_message_mapped_whole<M>(&mut self, direction: NetDirection) -> &mut Self
    where
        M: WholeBody + MapEntities + Clone + Send + Sync + 'static,
    {
        if record::<M>(self, direction, rule_of(direction, decodes_whole::<M>)) {
            self.register_message_custom_serde::<M>(whole_fns::<M>())
                .add_map_entities()
                .add_direction(NetworkDirection::from(direction));
        }
        self
    }
}

/// Records message `M` in [`NetProtocol`]; false if it was registered already.
fn record<M: 'static>(app: &mut App, direction: NetDirection, rule: ClientMessageRule) -> bool {
    let name = short_type_name::<M>();
    let mut protocol = app.world_mut().get_resource_or_init::<NetProtocol>();
    if protocol.messages.iter().any(|(n, _)| *n == name) {
        return false;
    }
    protocol.messages.push((name, direction));
    protocol.from_clients.insert(MessageKind::of::<M>(), rule);
    true
}

/// `path::to::Type<other::Arg>` → `Type<Arg>`: how message kinds are named in traffic figures.
pub fn short_type_name<T: ?Sized>() -> &'static str {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    // Keyed by where the full name lies, not by its text: every message sent on every link
    // asks (hashing a long path each time was about 0.3 % of a 64-player server's work). One
    // address and length always hold the same text, so the short name is the same whichever
    // entry a type finds.
    static NAMES: OnceLock<Mutex<HashMap<(usize, usize), &'static str>>> = OnceLock::new();
    let full = core::any::type_name::<T>();
    let mut names = NAMES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    names
        .entry((full.as_ptr() as usize, full.len()))
        .or_insert_with(|| {
            // Keep the last segment of every path: split at identifier boundaries.
            let mut short = String::with_capacity(full.len());
            let mut segment = String::new();
            for c in full.chars() {
                if c.is_alphanumeric() || c == '_' || c == ':' {
                    segment.push(c);
                } else {
                    short.push_str(segment.rsplit("::").next().unwrap_or(&segment));
                    segment.clear();
                    short.push(c);
                }
            }
            short.push_str(segment.rsplit("::").next().unwrap_or(&segment));
            // One small string per message type (or per copy of its name the binary holds),
            // kept for the life of the process.
            Box::leak(short.into_boxed_str())
        })
}
