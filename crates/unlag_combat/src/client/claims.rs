//! What a shot claims its shooter saw: for each proxy it hit, and each it passed close to, the
//! pose drawn, for the server to pose the proxy as the shooter saw it.

use super::trace::{Pellet, Target};
use crate::protocol::{MAX_CLAIMS, WireClaim};
use bevy::prelude::*;

/// The shot's claims, hits first, then the near misses (one per proxy, at most
/// [`MAX_CLAIMS`]), each judged as much earlier than the shot as its target was drawn with a
/// longer delay ([`WireClaim::behind`]).
pub(super) fn claims(
    hits: &[Option<Pellet>],
    near: &[Entity],
    targets: &[Target],
) -> Vec<WireClaim> {
    let mut claims: Vec<WireClaim> = Vec::new();
    // Which pellets hit each target (bit i: the i-th direction's pellet).
    let pellets_on = |target: Entity| {
        hits.iter()
            .enumerate()
            .take(64)
            .filter(|(_, p)| p.as_ref().is_some_and(|p| p.target == target))
            .fold(0u64, |mask, (i, _)| mask | 1 << i)
    };
    let hit_targets = hits.iter().flatten().map(|p| (p.target, true));
    for (target, hit) in hit_targets.chain(near.iter().map(|e| (*e, false))) {
        if claims.iter().any(|c| c.target == target) || claims.len() >= MAX_CLAIMS {
            continue;
        }
        if let Some(t) = targets.iter().find(|t| t.proxy == target) {
            // A hit is claimed only where one is promised: not on a pose that shows the past
            // (held past its extrapolation, or before its first state). The server tells such
            // a pose by its time, and a hold that began within its slack of the view passed
            // for the moment drawn: a hit granted that the shooter never saw (traced in the
            // report's 20 %-loss, 10-fps corner).
            let promised = hit && !t.pose.kind.is_stale();
            let pellets = if promised { pellets_on(target) } else { 0 };
            claims.push(WireClaim {
                behind: t.behind,
                ..WireClaim::drawn(target, &t.pose, pellets)
            });
        }
    }
    claims
}
