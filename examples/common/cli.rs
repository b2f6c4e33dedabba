//! What every example shares on the command line.

pub use unlag_demo::cli::number;

/// The options `parsed`, or, when they did not parse, the message on stderr after the
/// program's `name` and exit code 2.
pub fn options_or_exit<T>(name: &str, parsed: Result<T, String>) -> T {
    parsed.unwrap_or_else(|message| {
        eprintln!("{name}: {message}");
        std::process::exit(2);
    })
}
