//! The dedicated server's netcode key: from the environment or a file, never from the source.
//!
//! netcode's connect tokens are sealed with a 32-byte private key; whoever holds it can mint
//! tokens and join. The examples' fixed key ([`unlag_testbed::PRIVATE_KEY`]) is public, so it
//! is used only for a server on a loopback address (a local test). A server reachable from
//! other machines needs a key from [`KEY_ENV`] (64 hex digits) or from a file (`--key-file`,
//! or [`KEY_FILE_ENV`]), and refuses to start without one.
//!
//! The example's `--client` joins with [`lightyear`]'s manual authentication, which mints its
//! token from the same key, so it must hold the key too: fine between one's own machines. A
//! public deployment hands out tokens from a backend (lightyear's `Authentication::Token`);
//! the server then is the only process that reads the key.

use std::path::{Path, PathBuf};

/// Environment variable holding the key as 64 hex digits.
pub const KEY_ENV: &str = "UNLAG_SERVER_KEY";
/// Environment variable naming a file that holds the key as 64 hex digits.
pub const KEY_FILE_ENV: &str = "UNLAG_SERVER_KEY_FILE";

/// Where a key came from (said in the server's log, never the key itself).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeySource {
    /// The `--key-file` option or [`KEY_FILE_ENV`].
    File(PathBuf),
    /// [`KEY_ENV`].
    Environment,
    /// The examples' public key, on a loopback address only.
    Example,
}

impl core::fmt::Display for KeySource {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            KeySource::File(path) => write!(f, "file {}", path.display()),
            KeySource::Environment => write!(f, "${KEY_ENV}"),
            KeySource::Example => write!(f, "the examples' public key (loopback only)"),
        }
    }
}

/// A netcode private key and where it came from.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerKey {
    /// The 32 bytes.
    pub bytes: [u8; 32],
    /// Where they came from.
    pub source: KeySource,
}

impl core::fmt::Debug for ServerKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Never the bytes: a key must not end up in a log.
        f.debug_struct("ServerKey")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// Reads a key written as 64 hex digits (surrounding whitespace ignored); `what` names where
/// the text came from in the error.
pub fn parse_key(text: &str, what: &str) -> Result<[u8; 32], String> {
    let hex = text.trim();
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!(
            "{what}: a key is 64 hex digits (32 bytes), found {} characters",
            hex.chars().count()
        ));
    }
    let mut key = [0u8; 32];
    for (i, byte) in key.iter_mut().enumerate() {
        *byte =
            u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|e| format!("{what}: {e}"))?;
    }
    if key == unlag_testbed::PRIVATE_KEY {
        return Err(format!(
            "{what}: that is the examples' public key; make one with `--new-key`"
        ));
    }
    Ok(key)
}

/// The key for a server on (or a client of) `addr`: from `file` (the `--key-file` option),
/// else the file named by `env_file` ([`KEY_FILE_ENV`]'s value), else `env_key`
/// ([`KEY_ENV`]'s value), else the examples' public key when `addr` is a loopback address.
/// The environment's values are passed in so the caller reads the process environment once.
pub fn load_key(
    file: Option<&Path>,
    env_file: Option<String>,
    env_key: Option<String>,
    addr: core::net::SocketAddr,
) -> Result<ServerKey, String> {
    let env_file = env_file.filter(|f| !f.is_empty()).map(PathBuf::from);
    if let Some(path) = file.map(Path::to_path_buf).or(env_file) {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("key file {}: {e}", path.display()))?;
        let bytes = parse_key(&text, &format!("key file {}", path.display()))?;
        return Ok(ServerKey {
            bytes,
            source: KeySource::File(path),
        });
    }
    if let Some(text) = env_key.filter(|k| !k.is_empty()) {
        return Ok(ServerKey {
            bytes: parse_key(&text, &format!("${KEY_ENV}"))?,
            source: KeySource::Environment,
        });
    }
    if addr.ip().is_loopback() {
        return Ok(ServerKey {
            bytes: unlag_testbed::PRIVATE_KEY,
            source: KeySource::Example,
        });
    }
    Err(format!(
        "{addr} is reachable from other machines, and the examples' key is public: give the \
         server its own key in ${KEY_ENV} (64 hex digits) or a file (--key-file PATH or \
         ${KEY_FILE_ENV}); `--new-key` prints a new one"
    ))
}

/// [`load_key`] with the environment read here: `file` (the `--key-file` option), then
/// [`KEY_FILE_ENV`], then [`KEY_ENV`], then the examples' public key on loopback.
pub fn load_key_from_env(
    file: Option<&Path>,
    addr: core::net::SocketAddr,
) -> Result<ServerKey, String> {
    let var = |name: &str| std::env::var(name).ok();
    load_key(file, var(KEY_FILE_ENV), var(KEY_ENV), addr)
}

/// A new random key as 64 hex digits, from the operating system's randomness.
pub fn new_key() -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
