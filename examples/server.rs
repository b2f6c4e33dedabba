//! The shooter's dedicated server, headless: the arena, its bots and every rule of the shooter,
//! served over UDP with no window and no renderer linked, so it builds and runs where the
//! windowed examples cannot (a container, CI, a machine without a display or a GPU). The
//! windowed shooter joins it with `--client ADDR`; `shooter --server` runs the same server.
//!
//! ```text
//! cargo run --release --example server                      # UDP 0.0.0.0:5888
//! cargo run --release --example server -- 127.0.0.1:6000 --bots 10 --stats 30
//! ```
//!
//! | option | meaning |
//! | --- | --- |
//! | `ADDR` | the UDP address to serve on (else `--port`, `$UNLAG_SERVER_ADDR`, `$UNLAG_SERVER_PORT` on every interface, or `0.0.0.0:5888`) |
//! | `--port N` | serve on UDP port N on every interface |
//! | `--key-file PATH` | the netcode key (else `$UNLAG_SERVER_KEY_FILE`, `$UNLAG_SERVER_KEY`, or the examples' public key on loopback only) |
//! | `--new-key` | print a new random key and exit |
//! | `--bots N` | bots in the arena (default 6) |
//! | `--update-rate HZ` | proxy states a second (default 20) |
//! | `--stats S` | a `server stats:` line every S seconds (default 10): memory, frame cost, links, refusals |
//! | `--multi-threaded` | the server's systems on Bevy's multi-threaded executor (default: one after another, faster on this repository's 2-core machine; the per-client work uses every core either way) |
//! | `--seconds S` | quit after S seconds |
//!
//! For an orchestrator (see `deploy/Dockerfile`): once the socket is bound it prints
//! `ready: serving udp ADDR` on stdout; SIGTERM stops it within a few frames, every client told,
//! with exit code 0.

#[path = "common/cli.rs"]
mod cli;

use bevy::prelude::*;
use core::net::SocketAddr;
use unlag_demo::cli::ServerFlags;
use unlag_demo::game::ShooterSettings;
use unlag_demo::{NetPanel, session};

/// What the server is asked to do.
struct Options {
    /// ADDR, when given on the command line.
    addr: Option<SocketAddr>,
    server: ServerFlags,
    bots: usize,
    panel: NetPanel,
    seconds: Option<f64>,
}

fn parse() -> Result<Options, String> {
    let mut o = Options {
        addr: None,
        server: ServerFlags::default(),
        bots: ShooterSettings::default().bots,
        panel: NetPanel::default(),
        seconds: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if o.server.take(&flag, &mut args)? {
            continue;
        }
        let mut number = |name: &str| cli::number(&mut args, name);
        match flag.as_str() {
            "--bots" => o.bots = number("--bots")? as usize,
            "--update-rate" => o.panel.update_rate_hz = number("--update-rate")? as f32,
            "--seconds" => o.seconds = Some(number("--seconds")?),
            "-h" | "--help" => {
                return Err(format!(
                    "usage: server [ADDR] {} [--bots N] [--update-rate HZ] [--seconds S]",
                    ServerFlags::USAGE
                ));
            }
            other if !other.starts_with("--") => {
                o.addr = Some(
                    other
                        .parse()
                        .map_err(|e| format!("{other:?} is not an address to serve on: {e}"))?,
                );
            }
            other => return Err(format!("unknown option {other} (try --help)")),
        }
    }
    o.panel.validate().map_err(|e| e.to_string())?;
    Ok(o)
}

fn main() -> AppExit {
    let options = cli::options_or_exit("server", parse());
    let addr = cli::options_or_exit("server", options.server.addr(options.addr));
    let key = cli::options_or_exit("server", options.server.key(addr));
    let settings = ShooterSettings {
        bots: options.bots,
        ..default()
    };
    let mut server =
        session::dedicated_shooter(settings, options.panel, options.server.stats_every);
    session::quit_after(&mut server, options.seconds);
    session::serve_udp(server, addr, key, options.server.multi_threaded)
}
