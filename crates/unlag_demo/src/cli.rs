//! The examples' command lines: a number option, and the options every dedicated server takes
//! (the headless `server` example and `shooter --server` parse them with one [`ServerFlags`]).

use crate::key;
use core::net::SocketAddr;
use std::path::PathBuf;

/// The next argument as a finite non-negative number, for option `name`.
pub fn number(args: &mut impl Iterator<Item = String>, name: &str) -> Result<f64, String> {
    let v = args.next().ok_or_else(|| format!("{name} needs a value"))?;
    v.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x >= 0.0)
        .ok_or_else(|| format!("{name}: {v:?} is not a non-negative number"))
}

/// Environment variable with the whole address a dedicated server serves on (`0.0.0.0:5888`).
pub const ADDR_ENV: &str = "UNLAG_SERVER_ADDR";
/// Environment variable with the UDP port a dedicated server serves on, on every interface.
pub const PORT_ENV: &str = "UNLAG_SERVER_PORT";

/// The options of a dedicated server: its port, where its netcode key comes from and how often
/// it prints its status line.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerFlags {
    /// `--port N`: serve on UDP port N on every interface.
    pub port: Option<u16>,
    /// `--key-file PATH`: the file holding the netcode key (see [`key::load_key_from_env`] for
    /// the other places a key comes from).
    pub key_file: Option<PathBuf>,
    /// `--stats S`: seconds between two `server stats:` lines (> 0; default 10).
    pub stats_every: f64,
    /// `--multi-threaded`: the server's systems on Bevy's multi-threaded executor (default
    /// off: one after another, which was faster on a 2-core machine; the per-client work runs
    /// over every core either way). For a machine with more cores, to measure.
    pub multi_threaded: bool,
}

impl Default for ServerFlags {
    fn default() -> Self {
        Self {
            port: None,
            key_file: None,
            stats_every: 10.0,
            multi_threaded: false,
        }
    }
}

impl ServerFlags {
    /// The flags as a usage line shows them.
    pub const USAGE: &'static str =
        "[--port N] [--key-file PATH] [--new-key] [--stats S] [--multi-threaded]";

    /// Takes `flag` (and its value, the next of `args`) when it is a server's: `Ok(true)` if it
    /// was, `Ok(false)` if it is some other option, `Err` if its value is missing or out of
    /// range. `--new-key` is a command rather than an option: it prints a new random key on
    /// stdout and exits the process with code 0.
    pub fn take(
        &mut self,
        flag: &str,
        args: &mut impl Iterator<Item = String>,
    ) -> Result<bool, String> {
        match flag {
            "--stats" => {
                let every = number(args, "--stats")?;
                if every <= 0.0 {
                    return Err("--stats: seconds must be > 0".into());
                }
                self.stats_every = every;
            }
            "--port" => {
                let port = args.next().ok_or("--port needs a number")?;
                self.port = Some(parse_port(&port, "--port")?);
            }
            "--multi-threaded" => self.multi_threaded = true,
            "--key-file" => {
                self.key_file = Some(args.next().ok_or("--key-file needs a path")?.into());
            }
            "--new-key" => {
                let hex = key::new_key().map_err(|e| format!("--new-key: /dev/urandom: {e}"))?;
                println!("{hex}");
                std::process::exit(0);
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The address to serve on: `given` (the command line's ADDR), else `--port`, else
    /// [`ADDR_ENV`], else [`PORT_ENV`] (on every interface), else `0.0.0.0:5888`. An
    /// orchestrator sets the environment; a person types the flags.
    pub fn addr(&self, given: Option<SocketAddr>) -> Result<SocketAddr, String> {
        let var = |name: &str| std::env::var(name).ok();
        self.addr_from(given, var(ADDR_ENV), var(PORT_ENV))
    }

    /// [`ServerFlags::addr`] with the environment's values given (`env_addr`, `env_port`);
    /// empty values count as unset.
    pub fn addr_from(
        &self,
        given: Option<SocketAddr>,
        env_addr: Option<String>,
        env_port: Option<String>,
    ) -> Result<SocketAddr, String> {
        let every_interface = |port| SocketAddr::from(([0, 0, 0, 0], port));
        if let Some(addr) = given {
            return Ok(addr);
        }
        if let Some(port) = self.port {
            return Ok(every_interface(port));
        }
        if let Some(text) = env_addr.filter(|t| !t.trim().is_empty()) {
            return text
                .trim()
                .parse()
                .map_err(|e| format!("${ADDR_ENV}: {text:?} is not an address (IP:PORT): {e}"));
        }
        if let Some(text) = env_port.filter(|t| !t.trim().is_empty()) {
            return parse_port(text.trim(), &format!("${PORT_ENV}")).map(every_interface);
        }
        Ok(every_interface(crate::session::DEFAULT_PORT))
    }

    /// The netcode key for a server on (or a client of) `addr`: `--key-file`, else
    /// `$UNLAG_SERVER_KEY_FILE`, `$UNLAG_SERVER_KEY`, or the examples' public key on a loopback
    /// address only.
    pub fn key(&self, addr: SocketAddr) -> Result<key::ServerKey, String> {
        key::load_key_from_env(self.key_file.as_deref(), addr)
    }
}

/// A UDP port for option or variable `what`.
fn parse_port(text: &str, what: &str) -> Result<u16, String> {
    text.parse()
        .map_err(|_| format!("{what}: {text:?} is not a port (0-65535)"))
}
