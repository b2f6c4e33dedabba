//! One way to count what a server or client drops or refuses and say so without flooding the
//! log: [`warn_counted!`](crate::warn_counted).

/// Counts one more of something dropped or refused, in the `u64` place given first, and logs
/// it at the 1st, 2nd, 4th, 8th, … occurrence (one line per power of two: a flood of N bad
/// inputs costs about log₂ N lines, while the count stays exact). The message gets
/// `(N so far)` appended.
///
/// ```
/// # use unlag_net::warn_counted;
/// let mut dropped = 0u64;
/// for _ in 0..1000 {
///     warn_counted!(dropped, "dropped a malformed datagram");
/// }
/// assert_eq!(dropped, 1000); // ten lines logged: at 1, 2, 4, … 512
///
/// // The other forms count the same way.
/// let mut by_reason = [0u64; 2];
/// for i in 0..10 {
///     warn_counted!(level: info, by_reason[i % 2], "reason {}", i % 2);
///     warn_counted!(target: "my_game::net", by_reason[1], "target set");
///     warn_counted!(counted: dropped, "counted elsewhere");
/// }
/// assert_eq!((by_reason, dropped), ([5, 15], 1000));
/// ```
///
/// `warn_counted!(target: "unlag::movement", count, …)` sets the log target;
/// `warn_counted!(level: error, count, …)` logs at another level (`info`, `error`, …);
/// `warn_counted!(counted: n, …)` logs for a count `n` that the caller's own code has already
/// brought up to date.
#[macro_export]
macro_rules! warn_counted {
    (level: $level:ident, $count:expr, $($arg:tt)+) => {{
        let count: &mut u64 = &mut $count;
        *count += 1;
        if count.is_power_of_two() {
            $crate::__log::$level!("{} ({} so far)", ::core::format_args!($($arg)+), *count);
        }
    }};
    (counted: $n:expr, $($arg:tt)+) => {{
        let n: u64 = $n;
        if n.is_power_of_two() {
            $crate::__log::warn!("{} ({} so far)", ::core::format_args!($($arg)+), n);
        }
    }};
    (target: $target:expr, $count:expr, $($arg:tt)+) => {{
        let count: &mut u64 = &mut $count;
        *count += 1;
        if count.is_power_of_two() {
            $crate::__log::warn!(
                target: $target,
                "{} ({} so far)",
                ::core::format_args!($($arg)+),
                *count
            );
        }
    }};
    ($count:expr, $($arg:tt)+) => {
        $crate::warn_counted!(level: warn, $count, $($arg)+)
    };
}
