//! Entities in the serde-derived messages, written as unlag's hand-packed codecs write them
//! ([`unlag_core::ByteWriter::entity`]): 2 bytes for a character's entity, where Bevy's own
//! serde form costs postcard 5 (its index is stored inverted), up to 10 as the slot is reused.
//! A proxy state took about 22 bytes, 5 of them its entity's.
//!
//! Use on a field with `#[serde(with = "unlag_net::wire_entity")]` (one entity),
//! `wire_entity::vec` (a `Vec<Entity>`) or `wire_entity::with_tick` (a `Vec<(Entity, u32)>`).
//! Human-readable formats (RON, JSON) get Bevy's own form. Reading untrusted bytes never
//! panics: an index no entity can have, a generation written as 0 or beyond 32 bits fail the
//! message's decoding.

use bevy::ecs::entity::{EntityGeneration, EntityIndex};
use bevy::prelude::Entity;
use serde::de::{self, SeqAccess, Visitor};
use serde::ser::SerializeTuple;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An entity's (index, generation), as its wire form holds them.
pub fn parts(entity: Entity) -> (u32, u32) {
    (entity.index_u32(), entity.generation().to_bits())
}

/// The entity of an (index, generation); `None` for the index `u32::MAX`, which no entity has.
pub fn from_parts(index: u32, generation: u32) -> Option<Entity> {
    Some(Entity::from_index_and_generation(
        EntityIndex::from_raw_u32(index)?,
        EntityGeneration::from_bits(generation),
    ))
}

/// Writes `entity` compactly (see the module).
pub fn serialize<S: Serializer>(entity: &Entity, serializer: S) -> Result<S::Ok, S::Error> {
    if serializer.is_human_readable() {
        return entity.serialize(serializer);
    }
    let (index, generation) = parts(*entity);
    // One varint, a second only for a reused slot: a tuple's length is not on the wire.
    let mut tuple = serializer.serialize_tuple(2)?;
    tuple.serialize_element(&unlag_core::entity_head(index, generation))?;
    if generation != 0 {
        tuple.serialize_element(&generation)?;
    }
    tuple.end()
}

/// Reads an entity written by [`serialize`].
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Entity, D::Error> {
    if deserializer.is_human_readable() {
        return Entity::deserialize(deserializer);
    }
    /// Reads the head, then the generation if the head says one follows.
    struct Compact;
    impl<'de> Visitor<'de> for Compact {
        type Value = Entity;

        fn expecting(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
            f.write_str("an entity's index and generation")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Entity, A::Error> {
            let head: u64 = seq
                .next_element()?
                .ok_or_else(|| de::Error::invalid_length(0, &self))?;
            let (index, reused) = unlag_core::entity_from_head(head).map_err(de::Error::custom)?;
            let generation = if reused {
                let value: u64 = seq
                    .next_element()?
                    .ok_or_else(|| de::Error::invalid_length(1, &self))?;
                unlag_core::entity_generation(value).map_err(de::Error::custom)?
            } else {
                0
            };
            from_parts(index, generation).ok_or_else(|| de::Error::custom("invalid entity"))
        }
    }
    deserializer.deserialize_tuple(2, Compact)
}

/// One entity in its compact form (see the module), for the collections below and for
/// hand-written `Serialize` and `Deserialize` impls.
pub struct Compact(pub Entity);

impl Serialize for Compact {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serialize(&self.0, serializer)
    }
}

impl<'de> Deserialize<'de> for Compact {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserialize(deserializer).map(Compact)
    }
}

/// A `Vec<Entity>`, each entity compact.
pub mod vec {
    use super::Compact;
    use bevy::prelude::Entity;
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes the entities compactly, as a sequence.
    pub fn serialize<S: Serializer>(entities: &[Entity], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(entities.iter().map(|e| Compact(*e)))
    }

    /// Reads entities written by [`serialize`].
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<Entity>, D::Error> {
        Ok(Vec::<Compact>::deserialize(deserializer)?
            .into_iter()
            .map(|c| c.0)
            .collect())
    }
}

/// A `Vec<(Entity, u32)>` (an entity and a tick), each entity compact.
pub mod with_tick {
    use super::Compact;
    use bevy::prelude::Entity;
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes the pairs, each entity compactly, as a sequence.
    pub fn serialize<S: Serializer>(
        pairs: &[(Entity, u32)],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(pairs.iter().map(|(e, tick)| (Compact(*e), *tick)))
    }

    /// Reads pairs written by [`serialize`].
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<(Entity, u32)>, D::Error> {
        Ok(Vec::<(Compact, u32)>::deserialize(deserializer)?
            .into_iter()
            .map(|(c, tick)| (c.0, tick))
            .collect())
    }
}

/// A slice of entities that serializes as [`vec`](mod@vec) writes it (for hand-written
/// `Serialize` impls).
pub struct Entities<'a>(pub &'a [Entity]);

impl Serialize for Entities<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        vec::serialize(self.0, serializer)
    }
}

/// A slice of (entity, tick) pairs that serializes as [`with_tick`] writes it.
pub struct EntityTicks<'a>(pub &'a [(Entity, u32)]);

impl Serialize for EntityTicks<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        with_tick::serialize(self.0, serializer)
    }
}
