//! What every example shares on the command line.

/// The next argument as a finite non-negative number, for option `name`.
pub fn number(args: &mut impl Iterator<Item = String>, name: &str) -> Result<f64, String> {
    let v = args.next().ok_or_else(|| format!("{name} needs a value"))?;
    v.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x >= 0.0)
        .ok_or_else(|| format!("{name}: {v:?} is not a non-negative number"))
}

/// The options `parsed`, or, when they did not parse, the message on stderr after the
/// program's `name` and exit code 2.
pub fn options_or_exit<T>(name: &str, parsed: Result<T, String>) -> T {
    parsed.unwrap_or_else(|message| {
        eprintln!("{name}: {message}");
        std::process::exit(2);
    })
}
