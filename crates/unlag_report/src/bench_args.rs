//! The command line of a criterion benchmark that also reads its own selection from criterion's
//! filter (`cargo bench --bench server_tick -- '64|256'`): the filter found among criterion's
//! own options, whose values are not filters (`--warm-up-time 1` is not "1 player").

/// Criterion's options that take a value as the next argument (when not written `--name=value`).
const VALUED: &[&str] = &[
    "-c",
    "--color",
    "-s",
    "--save-baseline",
    "-b",
    "--baseline",
    "--baseline-lenient",
    "--format",
    "--profile-time",
    "--load-baseline",
    "--sample-size",
    "--warm-up-time",
    "--measurement-time",
    "--nresamples",
    "--noise-threshold",
    "--confidence-level",
    "--significance-level",
    "--plotting-backend",
    "--output-format",
];

/// The positional filter among a benchmark's arguments (without the program's name): the first
/// argument that is neither an option nor the value of one of criterion's valued options.
pub fn criterion_filter(args: impl IntoIterator<Item = String>) -> Option<String> {
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if VALUED.contains(&arg.as_str()) {
            args.next();
        } else if !arg.starts_with('-') {
            return Some(arg);
        }
    }
    None
}

/// The numbers in a filter such as `64|256` (what is not a number is left to criterion).
pub fn filter_numbers(filter: &str) -> Vec<usize> {
    filter.split('|').filter_map(|n| n.parse().ok()).collect()
}
