//! `--sweep NAME=V1,V2,...`: one match per value of a numeric option, one row per value, and
//! with `--plot DIR` one SVG chart per figure against the swept value (plotters, pure Rust).

use crate::{OptionError, Report, ReportOptions, run};
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// The numeric options a sweep may vary (their command-line names, without dashes).
pub const SWEEPABLE: [&str; 9] = [
    "burst",
    "bots",
    "clients",
    "seconds",
    "rtt",
    "jitter",
    "loss",
    "update-rate",
    "seed",
];

/// A parsed `--sweep`: the option and its values.
#[derive(Clone, Debug, PartialEq)]
pub struct Sweep {
    /// The option's name, without dashes (one of [`SWEEPABLE`]).
    pub option: String,
    /// The values, as given.
    pub values: Vec<String>,
}

impl Sweep {
    /// Parses `name=v1,v2,...`, checking each value against the option's range.
    pub fn parse(text: &str, base: &ReportOptions) -> Result<Self, OptionError> {
        let (name, values) = text.split_once('=').ok_or_else(|| {
            OptionError(format!(
                "--sweep: {text:?} is not NAME=V1,V2,... (see --help)"
            ))
        })?;
        if !SWEEPABLE.contains(&name) {
            return Err(OptionError(format!(
                "--sweep: {name:?} is not one of {}",
                SWEEPABLE.join(", ")
            )));
        }
        let values: Vec<String> = values.split(',').map(|v| v.trim().to_owned()).collect();
        if values.len() < 2 {
            return Err(OptionError("--sweep needs at least two values".into()));
        }
        for v in &values {
            base.clone().set(&format!("--{name}"), v)?;
        }
        Ok(Self {
            option: name.to_owned(),
            values,
        })
    }
}

/// One figure of a report, as a number: (file-name key, title with unit, value).
pub fn figures(report: &Report) -> Vec<(&'static str, &'static str, f64)> {
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let agreement = |name: &str| report.agreement.iter().find(|a| a.weapon == name);
    let hit = |name: &str| agreement(name).map_or(f64::NAN, |a| a.hit_rate() * 100.0);
    let miss = |name: &str| agreement(name).map_or(f64::NAN, |a| a.miss_rate() * 100.0);
    vec![
        (
            "corrections",
            "corrections / min per client",
            mean(&report.corrections_per_min),
        ),
        (
            "correction_p99",
            "correction distance p99 (m)",
            report.correction_distance_m.p99,
        ),
        (
            "proxy_error_rms",
            "proxy error at view time, RMS (mm)",
            report.proxy_error_m.rms * 1e3,
        ),
        (
            "proxy_error_p99",
            "proxy error at view time, p99 (mm)",
            report.proxy_error_m.p99 * 1e3,
        ),
        (
            "proxy_jump",
            "largest per-frame jump of the error (mm)",
            report.proxy_max_jump_m * 1e3,
        ),
        (
            "delay",
            "interpolation delay, mean (ms)",
            report.interpolation_delay_ms.mean,
        ),
        (
            "starved",
            "proxy frames held or extrapolated (%)",
            report.starved_share * 100.0,
        ),
        ("rifle_hits", "rifle: seen hits confirmed (%)", hit("rifle")),
        (
            "rifle_misses",
            "rifle: seen misses confirmed (%)",
            miss("rifle"),
        ),
        (
            "shotgun_hits",
            "shotgun: seen hits confirmed (%)",
            hit("shotgun"),
        ),
        (
            "shotgun_misses",
            "shotgun: seen misses confirmed (%)",
            miss("shotgun"),
        ),
        (
            "rejected",
            "shots refused",
            report.rejected.values().sum::<u64>() as f64,
        ),
        (
            "bytes_up",
            "upstream bytes/s per client",
            report.bytes_up_per_sec,
        ),
        (
            "bytes_down",
            "downstream bytes/s per client",
            report.bytes_down_per_sec,
        ),
        (
            "server_movement",
            "server µs per tick: movement",
            report.server_cost.movement_us.mean,
        ),
        (
            "server_record",
            "server µs per tick: history recording",
            report.server_cost.record_us.mean,
        ),
        (
            "server_combat",
            "server µs per tick: shots and rewinds",
            report.server_cost.combat_us.mean,
        ),
        (
            "server_total",
            "server µs per tick: whole update",
            report.server_cost.total_us.mean,
        ),
        (
            "speed",
            "simulated seconds per wall second",
            report.simulated_per_wall_second,
        ),
    ]
}

/// Runs one match per value of `sweep` over `base` (the jitter held to at most half the RTT);
/// `progress` hears the share done overall.
pub fn run_sweep(
    base: &ReportOptions,
    sweep: &Sweep,
    progress: &mut dyn FnMut(f64),
) -> Result<Vec<(f64, Report)>, OptionError> {
    let n = sweep.values.len() as f64;
    let mut rows = Vec::new();
    for (k, value) in sweep.values.iter().enumerate() {
        let mut options = base.clone();
        options.set(&format!("--{}", sweep.option), value)?;
        // Jitter cannot exceed half the RTT: a sweep down to low RTTs takes it down too.
        options.jitter_ms = options.jitter_ms.min(options.rtt_ms / 2.0);
        let report = run(&options, &mut |done| progress((k as f64 + done) / n))?;
        rows.push((value.parse::<f64>().unwrap_or(f64::NAN), report));
    }
    Ok(rows)
}

/// The sweep as a Markdown table: one row per value, one column per figure.
pub fn sweep_table(option: &str, rows: &[(f64, Report)]) -> String {
    let Some((_, first)) = rows.first() else {
        return String::new();
    };
    let titles: Vec<&str> = figures(first).iter().map(|f| f.1).collect();
    let mut out = format!("| {option} | {} |\n", titles.join(" | "));
    out.push_str(&format!("|{}\n", " --- |".repeat(titles.len() + 1)));
    for (value, report) in rows {
        let cells: Vec<String> = figures(report)
            .iter()
            .map(|f| format!("{:.2}", f.2))
            .collect();
        out.push_str(&format!("| {value} | {} |\n", cells.join(" | ")));
    }
    out
}

/// Writes one SVG chart per figure against the swept value into `dir` (created if missing);
/// the files written.
pub fn plot(dir: &Path, option: &str, rows: &[(f64, Report)]) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("--plot {}: {e}", dir.display()))?;
    let Some((_, first)) = rows.first() else {
        return Ok(Vec::new());
    };
    let mut written = Vec::new();
    for (k, (key, title, _)) in figures(first).into_iter().enumerate() {
        let points: Vec<(f64, f64)> = rows
            .iter()
            .map(|(x, r)| (*x, figures(r)[k].2))
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .collect();
        let path = dir.join(format!("{key}.svg"));
        chart(&path, option, title, &points).map_err(|e| format!("{}: {e}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// One line chart.
fn chart(
    path: &Path,
    option: &str,
    title: &str,
    points: &[(f64, f64)],
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (640, 400)).into_drawing_area();
    root.fill(&WHITE)?;
    let span = |v: Vec<f64>| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if !lo.is_finite() {
            (0.0, 1.0)
        } else if hi - lo < 1e-9 {
            (lo - 1.0, hi + 1.0)
        } else {
            (lo, hi)
        }
    };
    let (x0, x1) = span(points.iter().map(|p| p.0).collect());
    let (y0, y1) = span(points.iter().map(|p| p.1).collect());
    let pad = (y1 - y0) * 0.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, y0 - pad..y1 + pad)?;
    chart.configure_mesh().x_desc(option).y_desc(title).draw()?;
    chart.draw_series(LineSeries::new(points.iter().copied(), &BLUE))?;
    chart.draw_series(points.iter().map(|p| Circle::new(*p, 4, BLUE.filled())))?;
    root.present()?;
    Ok(())
}
