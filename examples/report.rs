//! A headless match on the testbed under given network conditions — a dedicated server,
//! server-driven bots and scripted clients that move and shoot at what they see — and every
//! figure of how it felt: corrections, proxy error, interpolation delay, hit agreement per
//! weapon, refusals, bandwidth, server cost, speed.
//!
//! ```text
//! cargo run --release --example report -- [--bots N] [--clients M] [--seconds S] [--rtt MS]
//!     [--jitter MS] [--loss PERCENT] [--update-rate HZ] [--smoothing MODE] [--seed N] [--json]
//!     [--cheat KIND] [--compare-validation] [--sweep NAME=V1,V2,... [--plot DIR]]
//!     [--client-fps F] [--frame-jitter PERCENT] [--hitches P,MS] [--cold-start S,MS] [--listen]
//!     [--grid [--plot DIR]]
//! ```
//!
//! A progress bar runs on stderr; the table (or with `--json` one JSON object) goes to stdout.
//! `--help` lists every option with its range; a bad option is refused naming it. The figures
//! are explained in the README's report section.

use std::io::Write;

fn main() {
    let options = match unlag_report::ReportOptions::parse(std::env::args().skip(1)) {
        Ok(options) => options,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let mut last = -1i64;
    let mut progress = |done: f64| {
        let percent = (done * 100.0).round() as i64;
        if percent != last {
            last = percent;
            let filled = (done * 40.0).round() as usize;
            eprint!(
                "\r[{}{}] {percent:>3} %",
                "#".repeat(filled),
                " ".repeat(40 - filled.min(40))
            );
            let _ = std::io::stderr().flush();
        }
    };
    if options.grid {
        let cells = unlag_report::grid::cells(&options).len();
        eprintln!(
            "{cells} matches of {} simulated seconds each",
            options.seconds
        );
        if !options.json {
            print!("{}", unlag_report::grid::grid_header());
        }
        let json = options.json;
        let rows = unlag_report::grid::run_grid(&options, &mut progress, &mut |row| {
            if !json {
                eprint!("\r");
                print!("{}", unlag_report::grid::grid_line(row));
                let _ = std::io::stdout().flush();
            }
        });
        match rows {
            Ok(rows) => {
                eprintln!();
                if json {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&rows).expect("plain data")
                    );
                } else {
                    print!("\n{}", unlag_report::grid::grid_summary(&rows));
                }
                if let Some(dir) = &options.plot {
                    match unlag_report::grid::plot_grid(dir, &rows) {
                        Ok(files) => {
                            eprintln!("{} heat maps written to {}", files.len(), dir.display())
                        }
                        Err(e) => {
                            eprintln!("{e}");
                            std::process::exit(1);
                        }
                    }
                }
                if rows.iter().any(|r| !r.pass) {
                    std::process::exit(1);
                }
            }
            Err(e) => {
                eprintln!("\n{e}");
                std::process::exit(1);
            }
        }
        return;
    }
    if let Some(sweep) = options.sweep.clone() {
        match unlag_report::sweep::run_sweep(&options, &sweep, &mut progress) {
            Ok(rows) => {
                eprintln!();
                if options.json {
                    let reports: Vec<_> = rows.iter().map(|(_, r)| r).collect();
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&reports).expect("plain data")
                    );
                } else {
                    print!("{}", unlag_report::sweep::sweep_table(&sweep.option, &rows));
                }
                if let Some(dir) = &options.plot {
                    match unlag_report::sweep::plot(dir, &sweep.option, &rows) {
                        Ok(files) => {
                            eprintln!("{} charts written to {}", files.len(), dir.display())
                        }
                        Err(e) => {
                            eprintln!("{e}");
                            std::process::exit(1);
                        }
                    }
                }
            }
            Err(e) => {
                eprintln!("\n{e}");
                std::process::exit(1);
            }
        }
        return;
    }
    match unlag_report::run(&options, &mut progress) {
        Ok(report) => {
            eprintln!();
            if options.json {
                println!("{}", report.json());
            } else {
                print!("{}", report.table());
            }
        }
        Err(e) => {
            eprintln!("\n{e}");
            std::process::exit(1);
        }
    }
}
