//! The engine of the `report` example: a headless match on the testbed (a dedicated server,
//! server-driven bots, scripted clients that move and shoot at what they see) under given
//! network conditions, and every figure of how it felt, measured.
//!
//! ```no_run
//! let options = unlag_report::ReportOptions { seconds: 10.0, ..Default::default() };
//! let report = unlag_report::run(&options, &mut |_done| {}).unwrap();
//! println!("{}", report.table());
//! ```
//!
//! What is measured, over the measured span (after a warm-up):
//!
//! - **movement**: corrections per minute per client (the server correcting an honest client
//!   is a failure of prediction), and how far corrections moved the character;
//! - **smoothing**: each proxy's drawn position against the server's own pose of that character
//!   at the view time it was drawn for (RMS, p99), the largest per-frame change of that error
//!   (a visible jump), the interpolation delay in effect, and the share of proxy frames held or
//!   extrapolated for want of a newer state;
//! - **combat**: of the shots a client saw hit, the share the server confirmed; of those it saw
//!   miss, the share it (wrongly) confirmed; headshot agreement; per weapon; projectiles
//!   launched and their hits; every refusal by reason;
//! - **bandwidth**: bytes per second up and down per client, by message kind;
//! - **server**: wall-clock µs per server tick spent checking moves, recording hit boxes and
//!   judging shots (this machine, this build);
//! - **run**: simulated seconds per wall second.

pub mod arena;
pub mod bench_args;
pub mod cheat;
pub mod compare;
pub mod grid;
mod measure;
mod model;
pub mod options;
pub mod peek;
pub mod remote;
mod run;
mod setup;
mod stopwatch;
pub mod sweep;
mod table;

pub use model::{Agreement, Projectiles, Report, SendCost, ServerCost, Stat};
pub use options::{OptionError, Packing, ReportOptions, USAGE};
pub use run::run;
pub use setup::{
    PACKED_ACK_DELAY, PACKED_SERVER_ACK_DELAY, Pace, WarmUpTally, start_match, start_match_with,
};
pub use stopwatch::{reset_server_cost, server_cost};
