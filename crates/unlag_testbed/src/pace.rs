//! [`ClientPace`]: client Apps that run at their own frame rate, with frame times that vary and
//! hitch, as a player's machine does; the frames they take, drawn from a seeded generator.

use core::time::Duration;
use unlag_core::SplitMix64;

/// How a client App's frames are paced (see [`TestbedConfig::client_pace`](crate::TestbedConfig::client_pace)).
///
/// Each frame takes `1 / fps` seconds, varied uniformly by up to `frame_jitter` of that either
/// way; a share `hitch_share` of frames instead takes `hitch` (a shader compile, a garbage
/// collection, a disk read); and in the App's first `cold_start`, every third frame takes
/// `cold_frame` (a game's first seconds on a cold shader cache: pipelines compile as things
/// first come into view, between ordinary frames). The server's frames are not paced: a
/// dedicated server keeps the testbed's frame rate, a listen server steps with client 0 (see
/// [`TestbedConfig::listen`](crate::TestbedConfig::listen)).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClientPace {
    /// Mean frames per second (5–480).
    pub fps: f64,
    /// How much one frame's time varies, as a share of the mean frame time (0–0.9): each frame
    /// takes `(1 ± frame_jitter × u) / fps` seconds, `u` uniform in [0, 1).
    pub frame_jitter: f64,
    /// Share of frames that hitch (0–0.5).
    pub hitch_share: f64,
    /// How long a hitched frame takes (0–2 s).
    pub hitch: Duration,
    /// How long from the App's start every third frame takes `cold_frame` (0–30 s; zero: none).
    pub cold_start: Duration,
    /// How long the long frames of the `cold_start` take (0–2 s).
    pub cold_frame: Duration,
}

/// In a [`ClientPace::cold_start`], one frame in this many is long.
const COLD_EVERY: u64 = 3;

/// Lowest client frame rate a [`ClientPace`] may ask for, frames per second.
pub const MIN_CLIENT_FPS: f64 = 5.0;
/// Highest client frame rate a [`ClientPace`] may ask for, frames per second.
pub const MAX_CLIENT_FPS: f64 = 480.0;

impl ClientPace {
    /// A steady `fps`: no jitter, no hitches.
    pub fn steady(fps: f64) -> Self {
        Self {
            fps,
            frame_jitter: 0.0,
            hitch_share: 0.0,
            hitch: Duration::ZERO,
            cold_start: Duration::ZERO,
            cold_frame: Duration::ZERO,
        }
    }

    /// Checks every field against its range; the error names the field.
    pub fn validate(&self) -> Result<(), String> {
        let within = |field: &str, x: f64, (low, high): (f64, f64)| {
            if (low..=high).contains(&x) {
                Ok(())
            } else {
                Err(format!("ClientPace::{field}: {x} is not in {low}-{high}"))
            }
        };
        let at_most = |field: &str, d: Duration, secs: u64| {
            if d <= Duration::from_secs(secs) {
                Ok(())
            } else {
                Err(format!("ClientPace::{field}: {d:?} is more than {secs} s"))
            }
        };
        within("fps", self.fps, (MIN_CLIENT_FPS, MAX_CLIENT_FPS))?;
        within("frame_jitter", self.frame_jitter, (0.0, 0.9))?;
        within("hitch_share", self.hitch_share, (0.0, 0.5))?;
        at_most("hitch", self.hitch, 2)?;
        at_most("cold_start", self.cold_start, 30)?;
        at_most("cold_frame", self.cold_frame, 2)
    }

    /// The mean frame time without hitches, seconds.
    pub fn frame_secs(&self) -> f64 {
        1.0 / self.fps
    }

    /// How long, on average, something that happens at a moment unrelated to the frames (a
    /// state arriving, a script's wish) waits for the next frame, seconds: half the mean of the
    /// frames' squares over their mean, `E[f²] / 2E[f]`, not half a mean frame. A random moment
    /// falls in a long frame more often than a short one: with 3 % of 60-fps frames hitching
    /// for 250 ms it waits 45 ms, where half a mean frame is 12. After the cold start.
    pub fn mean_wait_secs(&self) -> f64 {
        let frame = self.frame_secs();
        let jitter = self.frame_jitter.clamp(0.0, 0.9);
        let hitch = self.hitch.as_secs_f64().max(1e-4);
        let share = if self.hitch_share > 0.0 {
            self.hitch_share.clamp(0.0, 1.0)
        } else {
            0.0
        };
        // A frame varied uniformly by ±j: E[f²] = f²(1 + j²/3).
        let mean = (1.0 - share) * frame + share * hitch;
        let square =
            (1.0 - share) * frame * frame * (1.0 + jitter * jitter / 3.0) + share * hitch * hitch;
        if mean > 0.0 {
            square / (2.0 * mean)
        } else {
            0.0
        }
    }
}

/// One client App's frame clock: when its last frame ran and when the next one is due.
#[derive(Clone, Debug)]
pub(crate) struct FrameClock {
    pace: ClientPace,
    rng: SplitMix64,
    /// Time of the last frame (the start for the first).
    pub(crate) last: Duration,
    /// Time the next frame runs.
    pub(crate) next: Duration,
    /// Frames run so far.
    pub(crate) frames: u64,
}

impl FrameClock {
    pub(crate) fn new(pace: ClientPace, seed: u64) -> Self {
        let mut clock = Self {
            pace,
            rng: SplitMix64::new(seed),
            last: Duration::ZERO,
            next: Duration::ZERO,
            frames: 0,
        };
        clock.next = clock.draw(Duration::ZERO);
        clock
    }

    /// The time the frame starting at `at` takes.
    fn draw(&mut self, at: Duration) -> Duration {
        let pace = self.pace;
        if at < pace.cold_start && self.frames.is_multiple_of(COLD_EVERY) {
            return pace.cold_frame.max(Duration::from_micros(100));
        }
        if pace.hitch_share > 0.0 && self.rng.next_f64() < pace.hitch_share {
            return pace.hitch.max(Duration::from_micros(100));
        }
        let vary = if pace.frame_jitter > 0.0 {
            pace.frame_jitter * (2.0 * self.rng.next_f64() - 1.0)
        } else {
            0.0
        };
        Duration::from_secs_f64((pace.frame_secs() * (1.0 + vary)).max(1e-4))
    }

    /// Runs the frame due now: returns its time and its length, and schedules the next.
    pub(crate) fn tick(&mut self) -> (Duration, Duration) {
        let now = self.next;
        let delta = now - self.last;
        self.last = now;
        self.next = now + self.draw(now);
        self.frames += 1;
        (now, delta)
    }
}
