//! [`ReportOptions`]: what match to run, from the command line, each option checked against its
//! allowed range.

use core::time::Duration;
use unlag::core::{LinkConditions, SmoothingMode};

/// The match a report runs, and how its figures are printed.
#[derive(Clone, Debug, PartialEq)]
pub struct ReportOptions {
    /// Server-driven characters (0–64).
    pub bots: usize,
    /// Scripted clients, each with its own character (1–16).
    pub clients: usize,
    /// Simulated seconds of play measured, after a few seconds of warm-up (1–3600).
    pub seconds: f64,
    /// Round-trip latency, milliseconds (0–2000).
    pub rtt_ms: f64,
    /// Jitter per direction, milliseconds (0–500, at most half the RTT).
    pub jitter_ms: f64,
    /// Loss per direction, percent (0–100).
    pub loss_percent: f64,
    /// Proxy state updates per second (1–60).
    pub update_rate_hz: f64,
    /// Mean length of a burst of losses, packets (1–100; 1: independent losses).
    pub burst: f64,
    /// How the clients draw everyone else.
    pub smoothing: SmoothingMode,
    /// Each client's frame rate, frames per second (5–480; `None`: the server's 240).
    pub client_fps: Option<f64>,
    /// How much a client's frame time varies, percent of the mean frame (0–90).
    pub frame_jitter_percent: f64,
    /// A share of client frames that hitch, and how long a hitched frame takes: (percent of
    /// frames, 0–50; milliseconds, 0–2000).
    pub hitches: Option<(f64, f64)>,
    /// Every third frame of a client's first seconds is long, as in a game's first seconds on
    /// a cold shader cache: (seconds, 0–30; milliseconds each, 0–2000).
    pub cold_start: Option<(f64, f64)>,
    /// A listen server: the server steps inside client 0's App, at its frame rate.
    pub listen: bool,
    /// Seed of the network's randomness and of the scripts.
    pub seed: u64,
    /// Print one JSON object instead of a table.
    pub json: bool,
    /// Judge every shot four ways (none, Source-style, UT-style, unlag) and compare.
    pub compare_validation: bool,
    /// Client 0 cheats this way.
    pub cheat: Option<crate::cheat::Cheat>,
    /// One match per value of a numeric option.
    pub sweep: Option<crate::sweep::Sweep>,
    /// With a sweep: where to write one SVG chart per figure; with the grid, its heat maps.
    pub plot: Option<std::path::PathBuf>,
    /// Run the condition grid ([`crate::grid`]) instead of one match.
    pub grid: bool,
    /// Whether the server plays each client's moves out at the pace they were made
    /// (`MovementSettings::playout`; default: the library's default, on).
    pub playout: bool,
    /// Which links hold acknowledgements (and a client's pings and pongs) back to ride on
    /// data (default [`Packing::On`], the library's default).
    pub packing: Packing,
    /// Whether the server sends slow proxies' states between their grids' where their motion
    /// bends (`SmoothingSettings::off_grid_error`: the library's default, or 0 when off).
    pub off_grid: bool,
    /// Whether the server sends proxy states as their differences from ones the client
    /// acknowledged (`SmoothingSettings::delta_states`: the library's default, on).
    pub deltas: bool,
    /// Whether the client Apps and a dedicated server run Bevy's multi-threaded executor
    /// (default off: the single-threaded one; the per-client work inside a server's systems
    /// runs over the compute pool either way). A listen server stays on its host's thread.
    pub multi_threaded: bool,
    /// At most how many shares a dedicated server's per-client work goes in
    /// (`unlag::net::WorkShares`; default `None`: one a core). `Some(1)` runs it all on the
    /// system's own thread, in order, as on a one-core machine. Not on the command line.
    pub work_shares: Option<usize>,
    /// Seconds between two shots of one scripted client (0.05–10; default 0.15, the report's
    /// [`Pace`](crate::setup::Pace)). The weapon's own fire rate and magazine still hold: a
    /// rifle (0.1 s) held down fires 10 shots a second until it reloads.
    pub fire_interval: f64,
    /// The one weapon every scripted client fires, by its name in `assets/weapons.ron`
    /// (`None`: the mix, a rifle eight shots in ten, else the shotgun or the launcher).
    pub weapon: Option<String>,
    /// Whether a shot's later copies ride in the packets a client sends anyway while its
    /// link loses few of them (`CombatSettings::copies_ride_below_loss`: the library's
    /// default, on), or each goes as it falls due (off: the old way).
    pub copies_ride: bool,
    /// How many proxies' states may leave in one tick of their grid before the server puts
    /// new proxies on a later tick of their interval (`SmoothingSettings::spread_above`;
    /// default the library's, 96; `usize::MAX`: every proxy on its rate's one grid).
    pub spread_above: usize,
    /// Within how many metres of a client a proxy is sent at its own rate, beyond it at the
    /// reduced ring's (`InterestSettings::full_within`, the ring's rate the library's 10 Hz;
    /// `None`: the library's default, no reduced ring in an arena this size).
    pub full_within: Option<f32>,
}

impl Default for ReportOptions {
    fn default() -> Self {
        Self {
            bots: 8,
            clients: 2,
            seconds: 30.0,
            rtt_ms: 100.0,
            jitter_ms: 10.0,
            loss_percent: 1.0,
            update_rate_hz: 20.0,
            burst: 1.0,
            smoothing: SmoothingMode::Hermite,
            client_fps: None,
            frame_jitter_percent: 0.0,
            hitches: None,
            cold_start: None,
            listen: false,
            seed: 1,
            json: false,
            compare_validation: false,
            cheat: None,
            sweep: None,
            plot: None,
            grid: false,
            playout: unlag::core::PlayoutSettings::default().enabled,
            packing: Packing::On,
            off_grid: true,
            deltas: true,
            multi_threaded: false,
            work_shares: None,
            fire_interval: crate::setup::Pace::default().fire_interval,
            weapon: None,
            copies_ride: true,
            spread_above: unlag::smoothing::SmoothingSettings::default().spread_above,
            full_within: None,
        }
    }
}

/// The options, with their ranges, as `--help` prints them.
pub const USAGE: &str = "\
usage: report [options]
  --bots N           server-driven characters, 0-64 (default 8)
  --clients M        scripted clients, 1-16 (default 2)
  --seconds S        simulated seconds measured, 1-3600 (default 30)
  --rtt MS           round-trip latency, 0-2000 ms (default 100)
  --jitter MS        jitter per direction, 0-500 ms, at most half the RTT (default 10)
  --loss PERCENT     loss per direction, 0-100 % (default 1)
  --update-rate HZ   proxy updates per second, 1-60 (default 20)
  --burst N          mean length of a burst of losses, 1-100 packets (Gilbert-Elliott;
                     default 1: independent losses)
  --smoothing MODE   snap, linear, hermite or extrapolate (default hermite)
  --playout on|off   the server plays each client's moves out at the pace they were made
                     (MovementSettings::playout; default on)
  --packing on|clients|off
                     on: the clients' acknowledgements, pings and pongs wait up to 50 ms to
                     ride on a packet with data (UnlagNetPlugin::ack_delay), and the server's
                     up to 60 ms, movement acknowledgements too, on the links whose losses
                     do not run in bursts (UnlagNetPlugin::server_ack_delay; default, as the
                     library; `both` is the same); clients: the clients' only (the way before
                     the server packed); off: a packet for them in every frame that has some
                     due, as lightyear does (the old way)
  --copies ride|spread
                     ride: a shot's later copies go in the packets a client sends anyway
                     (its moves) while its link loses under 2 % of them, the second alone
                     only if none leaves in time (CombatSettings::copies_ride_below_loss;
                     default, as the library); spread: each as it falls due, three spread
                     over the age the server takes, alone if need be (the old way)
  --off-grid on|off  on: the server sends a proxy sent at 10 Hz or slower a state between its
                     grid's where the curve through its states would stray 5 cm from its
                     track (SmoothingSettings::off_grid_error; default, as the library); off:
                     only its grid's states (the old way)
  --deltas on|off    on: proxy states go as their differences from states the client
                     acknowledged (SmoothingSettings::delta_states; default, as the
                     library); off: every state in full (the old way)
  --spread-above N|off
                     with more than N proxies whose states leave in one tick of their
                     grid, the server puts new ones on later ticks of their interval
                     (SmoothingSettings::spread_above; default 96, as the library); off:
                     every proxy on its rate's one grid (the old way)
  --full-within M|off
                     proxies farther than M metres (1-200) from a client are sent to it at
                     the reduced ring's 10 Hz (InterestSettings::full_within); off: the
                     library's default, 200 m, no reduced ring in this arena
  --fire-interval S  seconds between two shots of a scripted client, 0.05-10 (default
                     0.15; each weapon's fire rate and magazine still hold: 0.1 holds a
                     rifle's trigger down, 10 shots/s until it reloads)
  --weapon NAME      every scripted client fires this weapon of assets/weapons.ron only
                     (rifle, shotgun, launcher; default mix: a rifle eight shots in ten,
                     else the shotgun or the launcher)
  --client-fps F     each client's frame rate, 5-480 frames/s (default: the server's 240)
  --frame-jitter P   how much a client's frame time varies, 0-90 % of its mean (default 0)
  --hitches P,MS     P % of a client's frames (0-50) take MS milliseconds (0-2000) each,
                     as a shader compile or a pause does (default none)
  --cold-start S,MS  every third frame of a client's first S seconds (0-30) takes MS
                     milliseconds (0-2000), as in a game's first seconds on a cold shader
                     cache (default none)
  --listen           a listen server: the server steps inside client 0's App, at its frame
                     rate (default: a dedicated server at 240 frames/s)
  --multi-threaded   the clients and a dedicated server run Bevy's multi-threaded executor
                     (default: the single-threaded one; every figure but the timings is the
                     same to the bit)
  --seed N           seed of the network and the scripts (default 1)
  --json             print one JSON object instead of a table
  --cheat KIND       client 0 cheats: speed, teleport, backtrack, rapid-fire,
                     duplicate-claims, false-extrapolate, skip-indices, every-weapon,
                     held-claim, ease-magnet, pong-delay, inflated-trip, slow-reports,
                     long-delay or pair-magnet
  --sweep NAME=V1,V2,...
                     one match per value of a numeric option (bots, clients, seconds, rtt,
                     jitter, loss, update-rate, seed), one row per value
  --grid             the condition grid: 60+ matches over RTT, jitter, loss and bursts, update
                     rate, client frame rate and hitches, dedicated and listen server, each
                     judged PASS or FAIL against the acceptance figures (--seconds each,
                     --bots and --clients as given)
  --plot DIR         with --sweep: one SVG chart per figure against the swept value; with
                     --grid: heat maps over RTT x loss and update rate x client fps
  --compare-validation
                     judge every shot with no rewind, Source-style, UT-style and unlag's
                     exact reconstruction, and compare their agreement";

/// An option that is unknown, lacks its value, or is out of range: the message names it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct OptionError(pub String);

impl ReportOptions {
    /// Parses command-line arguments (without the program name). `--help` comes back as an
    /// error holding [`USAGE`].
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Self, OptionError> {
        let mut options = Self::default();
        let mut sweep = None;
        let mut args = args.into_iter();
        while let Some(flag) = args.next() {
            if flag == "--json" {
                options.json = true;
                continue;
            }
            if flag == "--compare-validation" {
                options.compare_validation = true;
                continue;
            }
            if flag == "--listen" {
                options.listen = true;
                continue;
            }
            if flag == "--multi-threaded" {
                options.multi_threaded = true;
                continue;
            }
            if flag == "--grid" {
                options.grid = true;
                continue;
            }
            if flag == "-h" || flag == "--help" {
                return Err(OptionError(USAGE.into()));
            }
            let value = args
                .next()
                .ok_or_else(|| OptionError(format!("{flag} needs a value (see --help)")))?;
            match flag.as_str() {
                "--sweep" => sweep = Some(value),
                "--plot" => options.plot = Some(value.into()),
                _ => options.set(&flag, &value)?,
            }
        }
        options.conditions()?;
        if let Some(sweep) = sweep {
            options.sweep = Some(crate::sweep::Sweep::parse(&sweep, &options)?);
            if options.grid {
                return Err(OptionError("--grid and --sweep do not go together".into()));
            }
        } else if options.plot.is_some() && !options.grid {
            return Err(OptionError("--plot needs --sweep or --grid".into()));
        }
        Ok(options)
    }

    /// Sets one option from its text (`name` with its dashes, as on the command line).
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), OptionError> {
        // A number in a range, from `text` (the value, or a part of it).
        let number_in = |text: &str, low: f64, high: f64, unit: &str| {
            text.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && (low..=high).contains(x))
                .ok_or_else(|| {
                    OptionError(format!(
                        "{name}: {text:?} is not a number in {low}-{high}{unit}"
                    ))
                })
        };
        let number = |low: f64, high: f64, unit: &str| number_in(value, low, high, unit);
        // Two numbers `A,B` in their ranges (low, high, unit); `form` names them for the error.
        let pair = |form: &str,
                    (low_a, high_a, unit_a): (f64, f64, &str),
                    (low_b, high_b, unit_b): (f64, f64, &str)| {
            let parts: Vec<&str> = value.split(',').collect();
            let [a, b] = parts[..] else {
                return Err(OptionError(format!("{name}: {value:?} is not {form}")));
            };
            Ok((
                number_in(a.trim(), low_a, high_a, unit_a)?,
                number_in(b.trim(), low_b, high_b, unit_b)?,
            ))
        };
        let whole = |low: f64, high: f64| -> Result<f64, OptionError> {
            number(low, high, "")?;
            value
                .parse::<u64>()
                .map(|x| x as f64)
                .map_err(|_| OptionError(format!("{name}: {value:?} is not a whole number")))
        };
        match name {
            "--bots" => self.bots = whole(0.0, 64.0)? as usize,
            "--clients" => self.clients = whole(1.0, 16.0)? as usize,
            "--seconds" => self.seconds = number(1.0, 3600.0, " s")?,
            "--rtt" => self.rtt_ms = number(0.0, 2000.0, " ms")?,
            "--jitter" => self.jitter_ms = number(0.0, 500.0, " ms")?,
            "--loss" => self.loss_percent = number(0.0, 100.0, " %")?,
            "--update-rate" => self.update_rate_hz = number(1.0, 60.0, " Hz")?,
            "--burst" => self.burst = number(1.0, 100.0, " packets")?,
            "--fire-interval" => self.fire_interval = number(0.05, 10.0, " s")?,
            "--weapon" => {
                self.weapon = match value.to_ascii_lowercase().as_str() {
                    "mix" => None,
                    name @ ("rifle" | "shotgun" | "launcher") => Some(name.to_owned()),
                    _ => {
                        return Err(OptionError(format!(
                            "{name}: {value:?} is not one of rifle, shotgun, launcher, mix"
                        )));
                    }
                }
            }
            "--client-fps" => self.client_fps = Some(number(5.0, 480.0, " frames/s")?),
            "--frame-jitter" => self.frame_jitter_percent = number(0.0, 90.0, " %")?,
            "--hitches" => {
                self.hitches = Some(pair(
                    "P,MS (percent of frames, milliseconds)",
                    (0.0, 50.0, " % of frames"),
                    (0.0, 2000.0, " ms"),
                )?)
            }
            "--cold-start" => {
                self.cold_start = Some(pair(
                    "S,MS (seconds, milliseconds)",
                    (0.0, 30.0, " s"),
                    (0.0, 2000.0, " ms"),
                )?)
            }
            "--cheat" => {
                self.cheat = Some(crate::cheat::Cheat::parse(value).ok_or_else(|| {
                    let names: Vec<&str> = crate::cheat::CHEATS.iter().map(|c| c.name()).collect();
                    OptionError(format!(
                        "{name}: {value:?} is not one of {}",
                        names.join(", ")
                    ))
                })?)
            }
            "--seed" => {
                self.seed = value
                    .parse::<u64>()
                    .map_err(|_| OptionError(format!("{name}: {value:?} is not a whole number")))?
            }
            "--playout" => self.playout = on_off(name, value)?,
            "--off-grid" => self.off_grid = on_off(name, value)?,
            "--copies" => {
                self.copies_ride = match value.to_ascii_lowercase().as_str() {
                    "ride" => true,
                    "spread" => false,
                    _ => {
                        return Err(OptionError(format!(
                            "{name}: {value:?} is not ride or spread"
                        )));
                    }
                }
            }
            "--deltas" => self.deltas = on_off(name, value)?,
            "--full-within" => {
                self.full_within = if value.eq_ignore_ascii_case("off") {
                    None
                } else {
                    Some(number(1.0, 200.0, " m")? as f32)
                }
            }
            "--spread-above" => {
                self.spread_above = if value.eq_ignore_ascii_case("off") {
                    usize::MAX
                } else {
                    value.parse::<usize>().map_err(|_| {
                        OptionError(format!("{name}: {value:?} is not a whole number or off"))
                    })?
                }
            }
            "--packing" => {
                let value = value.to_ascii_lowercase();
                // (`both`: what `on` means since the server packs too.)
                let value = if value == "both" { "on".into() } else { value };
                self.packing = Packing::ALL
                    .into_iter()
                    .find(|p| p.name() == value)
                    .ok_or_else(|| {
                        OptionError(format!("{name}: {value:?} is not on, clients or off"))
                    })?;
            }
            "--smoothing" => {
                self.smoothing = match value.to_ascii_lowercase().as_str() {
                    "snap" => SmoothingMode::Snap,
                    "linear" => SmoothingMode::Linear,
                    "hermite" => SmoothingMode::Hermite,
                    "extrapolate" => SmoothingMode::Extrapolate,
                    _ => {
                        return Err(OptionError(format!(
                            "{name}: {value:?} is not one of snap, linear, hermite, extrapolate"
                        )));
                    }
                }
            }
            _ => return Err(OptionError(format!("unknown option {name} (see --help)"))),
        }
        Ok(())
    }

    /// How fast the match runs: the report's [`Pace`](crate::setup::Pace), its clients
    /// shooting every [`fire_interval`](Self::fire_interval).
    pub fn pace(&self) -> crate::setup::Pace {
        crate::setup::Pace {
            fire_interval: self.fire_interval,
            ..Default::default()
        }
    }

    /// The smoothing plugin's settings for the match: its mode, states off the grid or not
    /// (`--off-grid`), delta states or not (`--deltas`).
    pub fn smoothing_settings(&self) -> unlag::smoothing::SmoothingSettings {
        let library = unlag::smoothing::SmoothingSettings::default();
        unlag::smoothing::SmoothingSettings {
            default_mode: self.smoothing,
            off_grid_error: if self.off_grid {
                library.off_grid_error
            } else {
                0.0
            },
            delta_states: self.deltas,
            spread_above: self.spread_above,
            ..library
        }
    }

    /// The server's interest settings for the match: the library's, with a reduced ring from
    /// [`full_within`](Self::full_within) when asked for.
    pub fn interest_settings(&self) -> unlag::smoothing::InterestSettings {
        let library = unlag::smoothing::InterestSettings::default();
        unlag::smoothing::InterestSettings {
            full_within: self.full_within.unwrap_or(library.full_within),
            ..library
        }
    }

    /// How the match's clients are paced: `None` (they step with the server) unless a client
    /// frame rate, frame jitter, hitches or a cold start were asked for.
    pub fn client_pace(&self) -> Option<unlag_testbed::ClientPace> {
        if self.client_fps.is_none()
            && self.frame_jitter_percent == 0.0
            && self.hitches.is_none()
            && self.cold_start.is_none()
        {
            return None;
        }
        let (share, ms) = self.hitches.unwrap_or((0.0, 0.0));
        let (cold_secs, cold_ms) = self.cold_start.unwrap_or((0.0, 0.0));
        Some(unlag_testbed::ClientPace {
            fps: self.client_fps.unwrap_or(240.0),
            frame_jitter: self.frame_jitter_percent / 100.0,
            hitch_share: share / 100.0,
            hitch: Duration::from_secs_f64(ms / 1000.0),
            cold_start: Duration::from_secs_f64(cold_secs),
            cold_frame: Duration::from_secs_f64(cold_ms / 1000.0),
        })
    }

    /// The network conditions of the match (jitter is capped at half the RTT).
    pub fn conditions(&self) -> Result<LinkConditions, OptionError> {
        if self.jitter_ms > self.rtt_ms / 2.0 {
            return Err(OptionError(format!(
                "--jitter: {} ms is more than half the RTT ({} ms)",
                self.jitter_ms, self.rtt_ms
            )));
        }
        let conditions = LinkConditions {
            latency: Duration::from_secs_f64(self.rtt_ms / 1000.0),
            jitter: Duration::from_secs_f64(self.jitter_ms / 1000.0),
            loss: (self.loss_percent / 100.0) as f32,
            update_rate_hz: self.update_rate_hz as f32,
        };
        conditions
            .validate()
            .map_err(|e| OptionError(format!("network conditions: {e}")))?;
        Ok(conditions)
    }
}

/// Which links hold lightyear's acknowledgement-only packets, pings and pongs back until a
/// packet with data leaves (`--packing`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Packing {
    /// None: a packet for them in every frame that has some due, as lightyear does (the
    /// library's way before any packing, for the comparison).
    Off,
    /// The clients' links only (`UnlagNetPlugin::ack_delay`; the library's default before the
    /// server packed, for the comparison).
    Clients,
    /// The clients' and the server's (`UnlagNetPlugin::server_ack_delay`, on the links whose
    /// losses do not run: `unlag::net::ServerPacking`); the library's default.
    On,
}

impl Packing {
    /// Every value, as `--packing` takes them.
    pub const ALL: [Packing; 3] = [Packing::Off, Packing::Clients, Packing::On];

    /// The option's value as written on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Packing::Off => "off",
            Packing::Clients => "clients",
            Packing::On => "on",
        }
    }
}

/// An `on`/`off` option's value.
fn on_off(name: &str, value: &str) -> Result<bool, OptionError> {
    match value.to_ascii_lowercase().as_str() {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(OptionError(format!("{name}: {value:?} is not on or off"))),
    }
}
