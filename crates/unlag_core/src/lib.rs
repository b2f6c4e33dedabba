//! Pure-Rust numerics of `unlag`, with no ECS: sequence arithmetic with wrap-around, network
//! conditions and their validation, the server-clock estimator, the interpolation-delay policy,
//! the high-ping state machine, a seeded link simulator (delay, jitter, loss), the saved-move
//! queue, quantisation, the time-discrepancy (speed-hack) accountant, correction throttling and
//! smoothing, proxy state buffers and interpolation curves, and statistics helpers.
//!
//! Everything here is deterministic and unit-tested without Bevy, so the tricky arithmetic can
//! be checked in seconds; the plugins in the other crates are thin systems around it.

pub mod acks;
pub mod bvh;
pub mod clock;
pub mod codec;
pub mod combat;
pub mod conditions;
pub mod correction;
pub mod delay;
pub mod discrepancy;
pub mod history;
pub mod linksim;
pub mod moves;
pub mod ping;
pub mod playout;
pub mod projectile;
pub mod quantize;
pub mod raycast;
pub mod rng;
pub mod seq;
pub mod settings;
pub mod smoothing;
pub mod stats;

pub use acks::{
    ACK_GIVE_UP, AckLedger, LEDGER_PACKETS, MIN_SENT_FATES, PacketFate, SENT_LOSS_MEMORY, SentLoss,
};
pub use bvh::{Aabb, Bvh, Cone};
pub use clock::{FramePace, ServerClockEstimator};
pub use codec::{
    ByteReader, ByteWriter, DecodeError, entity_from_head, entity_generation, entity_head,
    unzigzag32, unzigzag64, zigzag32, zigzag64,
};
pub use combat::{
    FireRateGate, PredictedAmmo, SharedFireGate, pellet_directions, projectile_prediction_time,
    spread_seed, within_cone,
};
pub use conditions::{ConditionsError, LinkConditions, MAX_BURST};
#[allow(deprecated)]
pub use correction::SmoothingSettings;
pub use correction::{CorrectionSmoothing, CorrectionThrottle, SpringOffset, VisualOffset};
pub use delay::{
    BRIDGE_RELEASE, BridgeLatch, CATCH_UP_SHARE, DatagramLoss, DelayController, DelayPolicy,
    FrameOutages, MAX_BRIDGED_STATES, MAX_CATCH_UP_TIME, MAX_COUNTED_GAP, MAX_EASE_INTERVAL,
    MAX_SEQUENCE_JUMP, MAX_SPREAD_PHASES, MIN_CATCH_UP_SPEED, MIN_DATAGRAM_RUNS, MIN_RUNS,
    REORDER_WINDOW, STALENESS_BIN, STALENESS_MEMORY, Sent, StateLoss, StateStaleness,
    catch_up_speed, catch_up_time, continuation_over, continuation_per_datagram, ease_time,
    finite_non_negative, next_on_grid, next_on_phase, reduced_interval, redundancy_miss,
    repeat_after, spread_phase, whole_ticks,
};
pub use discrepancy::{
    JITTER_RANGE, MAX_JITTER_SLACK, MoveTime, TimeDiscrepancy, TimeDiscrepancySettings,
};
pub use history::{FramePair, LookupError, PoseHistory, RecordError};
pub use linksim::{LinkSimulator, LinkSimulatorStats, PathConditions};
pub use moves::{SavedMoves, Sequenced};
pub use ping::{HighPingChange, HighPingMonitor, HighPingSettings};
#[allow(deprecated)]
pub use playout::PlayoutSettingsError;
pub use playout::{ArrivalSpread, MovePlayout, PACE_WINDOW, PlayoutSettings};
pub use projectile::{
    Ballistic, fake_projectile_hold, fake_projectile_life, projectile_judged_time,
};
pub use raycast::ray_capsule;
pub use rng::SplitMix64;
pub use seq::{ReceiveWindow, Seq16, SeqUnwrapper};
pub use settings::{Fields, SettingsError, Validate};
pub use smoothing::{
    KINK_ACCELERATION, MAX_TANGENT_OVER_CHORD, ProxyState, Sample, SampleKind, Segment,
    SmoothingMode, StateBuffer, StateRejected, StateShown, body_blend, evaluate, hermite, replay,
};
pub use stats::{Ewma, Summary, nth_smallest};
