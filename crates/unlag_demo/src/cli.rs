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

/// The options of a dedicated server: where its netcode key comes from and how often it prints
/// its status line.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerFlags {
    /// `--key-file PATH`: the file holding the netcode key (see [`key::load_key_from_env`] for
    /// the other places a key comes from).
    pub key_file: Option<PathBuf>,
    /// `--stats S`: seconds between two `server stats:` lines (> 0; default 10).
    pub stats_every: f64,
}

impl Default for ServerFlags {
    fn default() -> Self {
        Self {
            key_file: None,
            stats_every: 10.0,
        }
    }
}

impl ServerFlags {
    /// The flags as a usage line shows them.
    pub const USAGE: &'static str = "[--key-file PATH] [--new-key] [--stats S]";

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

    /// The netcode key for a server on (or a client of) `addr`: `--key-file`, else
    /// `$UNLAG_SERVER_KEY_FILE`, `$UNLAG_SERVER_KEY`, or the examples' public key on a loopback
    /// address only.
    pub fn key(&self, addr: SocketAddr) -> Result<key::ServerKey, String> {
        key::load_key_from_env(self.key_file.as_deref(), addr)
    }
}
