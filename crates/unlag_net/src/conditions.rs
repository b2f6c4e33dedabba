//! [`NetConditions`]: simulated latency, jitter and loss on live links, and the default proxy
//! update rate.

use crate::link::LinkShaper;
use bevy::prelude::*;
use lightyear::prelude::*;
use unlag_core::{ConditionsError, LinkConditions, MAX_BURST, PathConditions};

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
    burst: f32,
    by_transport: bool,
}

impl NetConditions {
    /// Validated conditions with randomness seeded by `seed` (equal seeds repeat the same
    /// losses and delays).
    pub fn new(conditions: LinkConditions, seed: u64) -> Result<Self, ConditionsError> {
        conditions.validate()?;
        Ok(Self {
            conditions,
            seed,
            burst: 1.0,
            by_transport: false,
        })
    }

    /// The same, with losses coming in bursts of `burst` packets on average (Gilbert–Elliott;
    /// 1 for independent losses, up to 100). An out-of-range burst is refused.
    pub fn with_burst(mut self, burst: f32) -> Result<Self, ConditionsError> {
        if !(burst.is_finite() && (1.0..=MAX_BURST).contains(&burst)) {
            return Err(ConditionsError::Burst(burst));
        }
        self.burst = burst;
        Ok(self)
    }

    /// The same, applied by the transport between the Apps rather than by this App's link
    /// (which then carries no [`LinkShaper`]): the testbed delivers each datagram at the time
    /// its simulated trip ends, whatever either App's frames do. A link shaped by an App can
    /// only move datagrams when that App runs a frame, so a slow frame or a hitch would hold
    /// what it sent, which no network does.
    pub fn shaped_by_transport(mut self) -> Self {
        self.by_transport = true;
        self
    }

    /// Whether the transport applies these conditions
    /// ([`NetConditions::shaped_by_transport`]).
    pub fn is_shaped_by_transport(&self) -> bool {
        self.by_transport
    }

    /// Mean length of a burst of losses, packets (1: independent losses).
    pub fn burst(&self) -> f32 {
        self.burst.max(1.0)
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
            burst: f64::from(self.burst()),
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
    if conditions.is_shaped_by_transport() {
        return;
    }
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
