//! A server and two clients in one process over real UDP sockets on loopback, under simulated
//! network conditions, printing once a second per client what the net layer measures: RTT,
//! jitter, the error of the client's server-time estimate, and the high-ping state.
//!
//! ```text
//! cargo run --example ping -- [--rtt MS] [--jitter MS] [--loss PERCENT] [--seconds S]
//! ```
//!
//! | option | meaning | default |
//! | --- | --- | --- |
//! | `--rtt MS` | simulated round-trip latency, 0–2000 ms | 100 |
//! | `--jitter MS` | simulated jitter per direction, 0–500 ms | 10 |
//! | `--loss PERCENT` | simulated loss per direction, 0–100 % | 1 |
//! | `--seconds S` | stop after S seconds (otherwise runs until Ctrl-C) | none |
//!
//! It runs on real time even though the test build beside it compiles lightyear's mock clock
//! in: `unlag_net` drives that clock from real time (see `NetTimeSource`).

#[path = "common/cli.rs"]
mod cli;

use core::time::Duration;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use unlag::net::{LinkConditions, PingMonitor};
use unlag_testbed::{UdpSession, UdpSessionConfig};

struct Options {
    conditions: LinkConditions,
    seconds: Option<f64>,
}

fn parse() -> Result<Options, String> {
    let mut rtt = 100.0;
    let mut jitter = 10.0;
    let mut loss = 1.0;
    let mut seconds = None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = |name: &str| cli::number(&mut args, name);
        match flag.as_str() {
            "--rtt" => rtt = value("--rtt")?,
            "--jitter" => jitter = value("--jitter")?,
            "--loss" => loss = value("--loss")?,
            "--seconds" => seconds = Some(value("--seconds")?),
            "-h" | "--help" => {
                return Err(
                    "usage: ping [--rtt MS] [--jitter MS] [--loss PERCENT] [--seconds S]".into(),
                );
            }
            other => return Err(format!("unknown option {other} (try --help)")),
        }
    }
    let conditions = LinkConditions::new(
        Duration::from_secs_f64(rtt / 1000.0),
        Duration::from_secs_f64(jitter / 1000.0),
        (loss / 100.0) as f32,
    );
    conditions.validate().map_err(|e| e.to_string())?;
    Ok(Options {
        conditions,
        seconds,
    })
}

fn main() {
    let options = cli::options_or_exit("ping", parse());
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst)).expect("Ctrl-C handler");

    let mut session = UdpSession::new(UdpSessionConfig {
        clients: 2,
        conditions: options.conditions,
        ..Default::default()
    });
    println!(
        "server on {} — rtt {:?}, jitter {:?}, loss {:.1} %",
        session.server_addr(),
        options.conditions.latency,
        options.conditions.jitter,
        options.conditions.loss * 100.0
    );
    let start = std::time::Instant::now();
    let mut next_print = 1.0;
    while !stop.load(Ordering::SeqCst) {
        session.step();
        let elapsed = start.elapsed().as_secs_f64();
        if elapsed >= next_print {
            next_print += 1.0;
            let truth = session.server_time();
            for i in 0..session.client_count() {
                let clock = session.client_clock(i).clone();
                let high = session.client_world(i).resource::<PingMonitor>().is_high();
                if clock.synced {
                    println!(
                        "[{elapsed:5.1} s] client {i}: rtt {:6.1} ms  jitter {:5.1} ms  server-time error {:+6.1} ms  high ping: {}",
                        clock.rtt * 1000.0,
                        clock.jitter * 1000.0,
                        (clock.server_time - truth) * 1000.0,
                        if high { "YES" } else { "no" },
                    );
                } else {
                    println!("[{elapsed:5.1} s] client {i}: connecting…");
                }
            }
        }
        if options.seconds.is_some_and(|s| elapsed >= s) {
            break;
        }
    }
    println!("bye");
}
