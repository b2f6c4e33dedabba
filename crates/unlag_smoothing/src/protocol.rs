//! [`ProxyUpdates`]: the server's states of simulated proxies, one message per client per tick
//! with anything due.

use bevy::ecs::entity::MapEntities;
use bevy::prelude::*;
use serde::{Deserialize, Serialize};
use unlag_core::ProxyState;

/// Flag bit of [`WireProxyState::flags`] marking a teleport.
pub const TELEPORT_BIT: u8 = 0x80;

/// One proxy's state on the wire: position to the millimetre (a centimetre grid would add
/// 4 mm RMS of noise, more than Hermite's whole error at 20 Hz), rotation in 40 bits
/// ([`unlag_core::quantize::quantize_rotation`]: within 0.063°, half a millimetre at a hit
/// box's reach), velocity in cm/s, game flags (the top bit marks a teleport). About 22 bytes
/// once encoded (25 with the rotation's four 16-bit components).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct WireProxyState {
    /// The entity (mapped to the client's on arrival).
    pub entity: Entity,
    /// Position, whole millimetres.
    pub position: [i32; 3],
    /// Rotation, "smallest three" in 40 bits
    /// ([`unlag_core::quantize::quantize_rotation`]); any bytes stand for a unit rotation.
    pub rotation: [u8; unlag_core::quantize::ROTATION_BYTES],
    /// Velocity, cm/s.
    pub velocity: [i16; 3],
    /// [`ProxyFlags`](crate::ProxyFlags) bits 0–6, and the teleport bit (`TELEPORT_BIT`, 0x80).
    pub flags: u8,
}

impl WireProxyState {
    /// Quantises a pose.
    pub fn new(
        entity: Entity,
        position: Vec3,
        rotation: Quat,
        velocity: Vec3,
        flags: u8,
        teleport: bool,
    ) -> Self {
        let mm = |x: f32| {
            if x.is_finite() {
                (x * 1000.0).round().clamp(i32::MIN as f32, i32::MAX as f32) as i32
            } else {
                0
            }
        };
        let cms = |x: f32| (x * 100.0).round().clamp(-32_767.0, 32_767.0) as i16;
        Self {
            entity,
            position: [mm(position.x), mm(position.y), mm(position.z)],
            rotation: unlag_core::quantize::quantize_rotation(rotation),
            velocity: [cms(velocity.x), cms(velocity.y), cms(velocity.z)],
            flags: (flags & !TELEPORT_BIT) | if teleport { TELEPORT_BIT } else { 0 },
        }
    }

    /// The state it stands for, at server `tick` and `time` seconds (every field finite, the
    /// rotation a unit one, whatever the bytes).
    pub fn to_state(&self, tick: u32, time: f64) -> ProxyState {
        let rotation = unlag_core::quantize::dequantize_rotation(self.rotation);
        ProxyState {
            tick,
            time,
            position: IVec3::from_array(self.position).as_vec3() / 1000.0,
            rotation,
            velocity: Vec3::new(
                f32::from(self.velocity[0]),
                f32::from(self.velocity[1]),
                f32::from(self.velocity[2]),
            ) / 100.0,
            flags: self.flags & !TELEPORT_BIT,
            teleport: self.flags & TELEPORT_BIT != 0,
        }
    }
}

/// Server → client: the states of the proxies due at server tick `tick`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ProxyUpdates {
    /// The server tick the states were sampled at.
    pub tick: u32,
    /// One quantised state per proxy due at `tick` (none only when the message is there for
    /// `asleep`), and never one of an entity the receiving client controls.
    pub states: Vec<WireProxyState>,
    /// Whether these states were sent before: slow proxies' states go twice
    /// ([`unlag_core::repeat_after`]), and a repeat's lateness is by design, not the link's.
    pub repeat: bool,
    /// The proxies whose state here is the first since they were dormant to this client
    /// (flagged a teleport too): the client starts them afresh from it, hidden until its time,
    /// even if the (reliable) notice of their going dormant has not come yet. Usually empty.
    pub woken: Vec<Entity>,
    /// The proxies the client stopped being sent lately, each with the tick it went dormant
    /// at: what the reliable [`ProxyDormancy`] says, repeated in the next few messages, so the
    /// client stops drawing a proxy whose states stopped as soon as they would have come
    /// rather than a resend later. Usually empty.
    pub asleep: Vec<(Entity, u32)>,
}

impl MapEntities for ProxyUpdates {
    fn map_entities<E: EntityMapper>(&mut self, mapper: &mut E) {
        for s in &mut self.states {
            s.entity = mapper.get_mapped(s.entity);
        }
        for e in &mut self.woken {
            *e = mapper.get_mapped(*e);
        }
        for (e, _) in &mut self.asleep {
            *e = mapper.get_mapped(*e);
        }
    }
}

/// Server → client, reliably: the proxies the server stopped sending this client at server
/// tick `tick` (no longer relevant to it, see [`unlag_net::Relevance::Dormant`]). The client
/// stops drawing them until a state newer than `tick` comes, flagged a teleport.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ProxyDormancy {
    /// The server tick they went dormant at: every state sent before is older.
    pub tick: u32,
    /// The proxies (mapped to the client's on arrival).
    pub entities: Vec<Entity>,
}

impl MapEntities for ProxyDormancy {
    fn map_entities<E: EntityMapper>(&mut self, mapper: &mut E) {
        for e in &mut self.entities {
            *e = mapper.get_mapped(*e);
        }
    }
}
