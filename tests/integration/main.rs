//! Headless integration tests of `unlag`, in one binary so Bevy is linked once.
//! One module per plugin.

mod combat;
mod demo;
mod diagnostics;
mod movement;
mod net;
mod physics;
mod report;
mod rewind;
mod settings;
mod smoothing;
mod udp;
