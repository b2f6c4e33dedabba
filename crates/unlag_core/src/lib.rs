//! Pure-Rust numerics of `unlag`, with no ECS: sequence arithmetic with wrap-around, network
//! conditions and their validation, the server-clock estimator, the interpolation-delay policy, the high-ping state machine,
//! a seeded link simulator (delay, jitter, loss) and statistics helpers.
//!
//! Everything here is deterministic and unit-tested without Bevy, so the tricky arithmetic can
//! be checked in seconds; the plugins in the other crates are thin systems around it.

pub mod clock;
pub mod conditions;
pub mod delay;
pub mod linksim;
pub mod ping;
pub mod rng;
pub mod seq;
pub mod stats;

pub use clock::ServerClockEstimator;
pub use conditions::{ConditionsError, LinkConditions};
pub use delay::{DelayController, DelayPolicy};
pub use linksim::{LinkSimulator, LinkSimulatorStats, PathConditions};
pub use ping::{HighPingChange, HighPingMonitor, HighPingSettings};
pub use rng::SplitMix64;
pub use seq::{Seq16, SeqUnwrapper};
pub use stats::{Ewma, Summary};
