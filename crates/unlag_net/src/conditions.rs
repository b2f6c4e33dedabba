//! [`NetConditions`]: simulated latency, jitter and loss on live links, and the default proxy
//! update rate.

use crate::link::LinkShaper;
use bevy::prelude::*;
use lightyear::prelude::*;
use unlag_core::{ConditionsError, LinkConditions, PathConditions};

/// Network conditions to simulate, applied to live links at runtime.
///
/// A resource in every App. On a client, the link to the server is shaped in both directions
/// (half the round-trip latency each way; jitter and loss per direction), so each client can run
/// under its own conditions and the server needs no configuration. On the server, the link
/// figures are ignored and [`LinkConditions::update_rate_hz`] is the default rate at which proxy
/// states are sent.
///
/// Changes apply to packets sent after them; packets already in flight keep their delivery
/// time. Out-of-range values are refused by [`NetConditions::set`] and change nothing.
#[derive(Resource, Clone, Debug, Default)]
pub struct NetConditions {
    conditions: LinkConditions,
    seed: u64,
}

impl NetConditions {
    /// Validated conditions with randomness seeded by `seed` (equal seeds repeat the same
    /// losses and delays).
    pub fn new(conditions: LinkConditions, seed: u64) -> Result<Self, ConditionsError> {
        conditions.validate()?;
        Ok(Self { conditions, seed })
    }

    /// The conditions in effect.
    pub fn get(&self) -> &LinkConditions {
        &self.conditions
    }

    /// The seed of the simulated randomness.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Replaces the conditions if they are valid; otherwise returns why and keeps the old ones.
    pub fn set(&mut self, conditions: LinkConditions) -> Result<(), ConditionsError> {
        conditions.validate()?;
        self.conditions = conditions;
        Ok(())
    }

    /// The conditions of each direction of a shaped link.
    pub fn each_way(&self) -> PathConditions {
        PathConditions {
            latency: self.conditions.one_way_latency(),
            jitter: self.conditions.jitter,
            loss: f64::from(self.conditions.loss),
        }
    }
}

/// Shapes new client links and updates the shaping of existing ones when the conditions change.
pub(crate) fn apply_conditions(
    mut commands: Commands,
    conditions: Res<NetConditions>,
    mut shaped: Query<&mut LinkShaper, With<Client>>,
    unshaped: Query<Entity, (With<Client>, With<Link>, Without<LinkShaper>)>,
) {
    let each_way = conditions.each_way();
    for entity in &unshaped {
        let seed = conditions
            .seed()
            .wrapping_add(entity.to_bits().wrapping_mul(0x9E37_79B9_7F4A_7C15));
        commands
            .entity(entity)
            .insert(LinkShaper::new(each_way, seed));
    }
    if conditions.is_changed() {
        for mut shaper in &mut shaped {
            if *shaper.conditions() != each_way {
                shaper.set_conditions(each_way);
            }
        }
    }
}
