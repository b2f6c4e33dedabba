//! `--grid`: a designed set of matches over the whole space of conditions a player can meet
//! (round trip, jitter, loss and its bursts, update rate, the client's frame rate and hitches,
//! a dedicated or a listen server), each judged against the acceptance figures an honest
//! player must see, one row per match with PASS or FAIL; JSON, and with `--plot DIR` heat maps.
//!
//! The set: every axis swept with the others at a middle value, a listen host's cold start
//! (its first seconds on a cold shader cache), two crossed blocks (RTT × loss, update rate ×
//! client frame rate) for the heat maps, and the corners that combine the worst of each pair.

use crate::{OptionError, Report, ReportOptions, run};
use plotters::prelude::*;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// One match of the grid: a name saying what differs from the middle, and its options.
#[derive(Clone, Debug)]
pub struct Cell {
    /// What this cell varies, e.g. `rtt=300` or `corner: loss=20/10 × fps=10 listen`.
    pub name: String,
    /// The match's options.
    pub options: ReportOptions,
}

/// The middle of every axis: RTT 100 ms, jitter 10 ms, 1 % loss in bursts of 1, 20 Hz, clients
/// at 60 fps, a dedicated server; bots, clients, seconds and seed from `base`.
pub fn middle(base: &ReportOptions) -> ReportOptions {
    ReportOptions {
        rtt_ms: 100.0,
        jitter_ms: 10.0,
        loss_percent: 1.0,
        burst: 1.0,
        update_rate_hz: 20.0,
        client_fps: Some(60.0),
        frame_jitter_percent: 10.0,
        hitches: None,
        listen: false,
        sweep: None,
        plot: None,
        cheat: None,
        json: false,
        compare_validation: false,
        ..base.clone()
    }
}

/// The grid's matches over `base` (see the module docs).
pub fn cells(base: &ReportOptions) -> Vec<Cell> {
    let mid = middle(base);
    let mut cells: Vec<Cell> = Vec::new();
    let mut add = |name: String, f: &dyn Fn(&mut ReportOptions)| {
        let mut options = mid.clone();
        f(&mut options);
        // Jitter is at most half the one-way trip (the space) and the RTT's half.
        options.jitter_ms = options.jitter_ms.min(options.rtt_ms / 4.0);
        // One match per set of conditions (the crossed blocks meet the axes).
        let conditions = Conditions::of(&options);
        if !cells
            .iter()
            .any(|c| Conditions::of(&c.options) == conditions)
        {
            cells.push(Cell { name, options });
        }
    };
    add("middle".into(), &|_| {});
    for rtt in [0.0, 50.0, 200.0, 300.0, 400.0, 500.0] {
        add(format!("rtt={rtt}"), &|o| o.rtt_ms = rtt);
    }
    for jitter in [0.0, 25.0] {
        add(format!("jitter={jitter}"), &|o| o.jitter_ms = jitter);
    }
    add("jitter=60 rtt=240".into(), &|o| {
        o.rtt_ms = 240.0;
        o.jitter_ms = 60.0;
    });
    for loss in [0.0, 2.0, 5.0, 10.0, 15.0, 20.0] {
        add(format!("loss={loss}"), &|o| o.loss_percent = loss);
    }
    for burst in [2.0, 4.0, 8.0, 10.0] {
        add(format!("loss=10 burst={burst}"), &|o| {
            o.loss_percent = 10.0;
            o.burst = burst;
        });
    }
    for rate in [1.0, 2.0, 5.0, 10.0, 30.0, 60.0] {
        add(format!("update={rate}"), &|o| o.update_rate_hz = rate);
    }
    for fps in [10.0, 15.0, 30.0, 120.0, 240.0] {
        add(format!("fps={fps}"), &|o| o.client_fps = Some(fps));
    }
    add("fps=60 jitter 40 %".into(), &|o| {
        o.frame_jitter_percent = 40.0
    });
    for (share, ms) in [(1.0, 100.0), (3.0, 250.0), (1.0, 600.0)] {
        add(format!("hitches {share} % × {ms} ms"), &|o| {
            o.hitches = Some((share, ms))
        });
    }
    add("fps=15 hitches 2 % × 200 ms".into(), &|o| {
        o.client_fps = Some(15.0);
        o.hitches = Some((2.0, 200.0));
    });
    for fps in [10.0, 30.0, 60.0, 144.0] {
        add(format!("listen fps={fps}"), &|o| {
            o.listen = true;
            o.client_fps = Some(fps);
        });
    }
    // A game's first seconds on a cold shader cache, on the host everyone plays through.
    add("listen fps=10 cold start 3 s × 700 ms".into(), &|o| {
        o.listen = true;
        o.client_fps = Some(10.0);
        o.cold_start = Some((3.0, 700.0));
    });
    // Crossed blocks, for the heat maps.
    for rtt in [0.0, 100.0, 250.0, 500.0] {
        for loss in [0.0, 5.0, 10.0, 20.0] {
            add(format!("rtt={rtt} × loss={loss}"), &|o| {
                o.rtt_ms = rtt;
                o.loss_percent = loss;
            });
        }
    }
    for rate in [1.0, 5.0, 20.0, 60.0] {
        for fps in [10.0, 30.0, 60.0, 240.0] {
            add(format!("update={rate} × fps={fps}"), &|o| {
                o.update_rate_hz = rate;
                o.client_fps = Some(fps);
            });
        }
    }
    // Corners: the worst of each pair of axes together.
    let worst_rtt = |o: &mut ReportOptions| {
        o.rtt_ms = 500.0;
    };
    let worst_jitter = |o: &mut ReportOptions| {
        o.rtt_ms = o.rtt_ms.max(250.0);
        o.jitter_ms = o.rtt_ms / 4.0;
    };
    let worst_loss = |o: &mut ReportOptions| {
        o.loss_percent = 20.0;
        o.burst = 10.0;
    };
    let worst_rate = |o: &mut ReportOptions| o.update_rate_hz = 1.0;
    let worst_fps = |o: &mut ReportOptions| {
        o.client_fps = Some(10.0);
        o.hitches = Some((2.0, 250.0));
    };
    let worst_server = |o: &mut ReportOptions| {
        o.listen = true;
        o.client_fps = Some(o.client_fps.unwrap_or(60.0).min(20.0));
    };
    type Worst<'a> = (&'a str, &'a dyn Fn(&mut ReportOptions));
    let worst: [Worst; 6] = [
        ("rtt=500", &worst_rtt),
        ("jitter=rtt/4", &worst_jitter),
        ("loss=20/10", &worst_loss),
        ("update=1", &worst_rate),
        ("fps=10+hitches", &worst_fps),
        ("listen", &worst_server),
    ];
    for (i, (a, fa)) in worst.iter().enumerate() {
        for (b, fb) in worst.iter().skip(i + 1) {
            add(format!("corner: {a} × {b}"), &|o| {
                fa(o);
                fb(o);
            });
        }
    }
    cells
}

/// One tick of the server (60 Hz), milliseconds: the peeker's advantage may exceed its parts by
/// this much.
const TICK_MS: f64 = 1000.0 / 60.0;

/// A match's acceptance figures, each against its bound.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Acceptance {
    /// Shots refused, every reason, warm-up included (bound: 0).
    pub refused: u64,
    /// The lowest share of seen hits confirmed over the hitscan weapons, percent (≥ 99.5).
    pub hits_confirmed_percent: f64,
    /// The highest share of seen misses confirmed, percent (≤ 0.5).
    pub misses_confirmed_percent: f64,
    /// The most corrections per minute of any client, over the warm-up and the measured span
    /// together (a correction at the start counts as much as one later).
    pub corrections_per_min: f64,
    /// Their bound: 0 up to 10 % loss in bursts of at most 4, 2 beyond.
    pub corrections_bound: f64,
    /// The largest growth of a proxy's error in one frame beyond its own motion, teleports
    /// left out, millimetres (≤ 50).
    pub pop_mm: f64,
    /// Proxy frames held or extrapolated, percent.
    pub starved_percent: f64,
    /// Their bound, percent: 1 up to 10 % loss, none beyond.
    pub starved_bound: Option<f64>,
    /// Peeker's advantage (mean) less its parts, milliseconds (≤ one tick).
    pub peek_excess_ms: f64,
    /// Speed hacks flagged over the whole match, warm-up included (bound: 0, every client is
    /// honest in the grid).
    pub speed_hacks_flagged: u64,
    /// The bounds missed, in words; empty when the match passed.
    pub failures: Vec<String>,
}

impl Acceptance {
    /// Whether every figure is within its bound.
    pub fn pass(&self) -> bool {
        self.failures.is_empty()
    }
}

/// Judges `report` (a match of `options`) against the acceptance figures.
pub fn accept(options: &ReportOptions, report: &Report) -> Acceptance {
    let mut a = Acceptance {
        refused: report.rejected.values().sum::<u64>() + report.warm_up.shots_refused,
        hits_confirmed_percent: report
            .agreement
            .iter()
            .map(|w| w.hit_rate() * 100.0)
            .fold(100.0, f64::min),
        misses_confirmed_percent: report
            .agreement
            .iter()
            .map(|w| w.miss_rate() * 100.0)
            .fold(0.0, f64::max),
        corrections_per_min: report
            .corrections_per_min
            .iter()
            .enumerate()
            .map(|(i, per_min)| {
                let measured = per_min * report.seconds / 60.0;
                let before = report.warm_up.corrections.get(i).copied().unwrap_or(0) as f64;
                (measured + before) * 60.0 / (report.seconds + report.warm_up.seconds).max(1e-9)
            })
            .fold(0.0, f64::max),
        corrections_bound: if options.loss_percent <= 10.0 && options.burst <= 4.0 {
            0.0
        } else {
            2.0
        },
        pop_mm: report.proxy_max_pop_m * 1000.0,
        starved_percent: report.starved_share * 100.0,
        starved_bound: (options.loss_percent <= 10.0).then_some(1.0),
        peek_excess_ms: if report.peek.peeks > 0 {
            report.peek.advantage_ms.mean - report.peek.parts_ms
        } else {
            0.0
        },
        speed_hacks_flagged: report.speed_hacks_flagged + report.warm_up.speed_hacks_flagged,
        failures: Vec::new(),
    };
    if report.disconnects > 0 {
        a.failures
            .push(format!("{} clients disconnected", report.disconnects));
    }
    if a.refused > 0 {
        a.failures
            .push(format!("{} refused {:?}", a.refused, report.rejected));
    }
    if a.hits_confirmed_percent < 99.5 {
        a.failures
            .push(format!("hits confirmed {:.2} %", a.hits_confirmed_percent));
    }
    if a.misses_confirmed_percent > 0.5 {
        a.failures.push(format!(
            "misses confirmed {:.2} %",
            a.misses_confirmed_percent
        ));
    }
    if a.corrections_per_min > a.corrections_bound {
        a.failures
            .push(format!("{:.1} corrections/min", a.corrections_per_min));
    }
    if a.speed_hacks_flagged > 0 {
        a.failures
            .push(format!("{} speed hacks flagged", a.speed_hacks_flagged));
    }
    if a.pop_mm > 50.0 {
        a.failures.push(format!("a {:.0}-mm pop", a.pop_mm));
    }
    if let Some(bound) = a.starved_bound
        && a.starved_percent > bound
    {
        a.failures.push(format!(
            "{:.2} % of proxy frames starved",
            a.starved_percent
        ));
    }
    if a.peek_excess_ms > TICK_MS {
        a.failures.push(format!(
            "peeker's advantage {:.1} ms over its parts",
            a.peek_excess_ms
        ));
    }
    a
}

/// The conditions of a cell, as numbers (for JSON and for placing it in a heat map).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Conditions {
    /// Round trip, milliseconds.
    pub rtt_ms: f64,
    /// Jitter per direction, milliseconds.
    pub jitter_ms: f64,
    /// Loss per direction, percent.
    pub loss_percent: f64,
    /// Mean burst of losses, packets.
    pub burst: f64,
    /// Proxy updates per second.
    pub update_rate_hz: f64,
    /// Client frames per second.
    pub client_fps: f64,
    /// Client frame-time variation, percent.
    pub frame_jitter_percent: f64,
    /// Hitches: percent of frames, milliseconds each.
    pub hitches: Option<(f64, f64)>,
    /// A cold start: seconds, milliseconds each long frame.
    pub cold_start: Option<(f64, f64)>,
    /// A listen server.
    pub listen: bool,
}

impl Conditions {
    fn of(o: &ReportOptions) -> Self {
        Self {
            rtt_ms: o.rtt_ms,
            jitter_ms: o.jitter_ms,
            loss_percent: o.loss_percent,
            burst: o.burst,
            update_rate_hz: o.update_rate_hz,
            client_fps: o.client_fps.unwrap_or(240.0),
            frame_jitter_percent: o.frame_jitter_percent,
            hitches: o.hitches,
            cold_start: o.cold_start,
            listen: o.listen,
        }
    }
}

/// One row of the grid: the cell, its report, its acceptance.
#[derive(Clone, Debug, Serialize)]
pub struct GridRow {
    /// The cell's name.
    pub name: String,
    /// Its conditions.
    pub conditions: Conditions,
    /// Whether it passed.
    pub pass: bool,
    /// The match's figures against an honest client's bounds (refusals, hits and misses
    /// confirmed, corrections, pops, starved frames, peeker's advantage); `pass` is whether
    /// none was missed.
    pub acceptance: Acceptance,
    /// Every figure of the match.
    pub report: Report,
}

/// Runs every cell over `base`; `progress` hears the share done overall, `row` each row as it
/// finishes (for printing as it goes).
pub fn run_grid(
    base: &ReportOptions,
    progress: &mut dyn FnMut(f64),
    row: &mut dyn FnMut(&GridRow),
) -> Result<Vec<GridRow>, OptionError> {
    let cells = cells(base);
    let n = cells.len() as f64;
    let mut rows = Vec::new();
    for (k, cell) in cells.iter().enumerate() {
        let report = run(&cell.options, &mut |done| progress((k as f64 + done) / n))?;
        let acceptance = accept(&cell.options, &report);
        let r = GridRow {
            name: cell.name.clone(),
            conditions: Conditions::of(&cell.options),
            pass: acceptance.pass(),
            acceptance,
            report,
        };
        row(&r);
        rows.push(r);
    }
    Ok(rows)
}

/// The header of the grid's Markdown table.
pub fn grid_header() -> String {
    "| cell | refused | hits confirmed % | misses confirmed % | corrections/min (bound) | pop mm | starved % | peek excess ms | result |\n\
     | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
        .into()
}

/// One row of the grid's Markdown table.
pub fn grid_line(row: &GridRow) -> String {
    let a = &row.acceptance;
    format!(
        "| {} | {} | {:.2} | {:.2} | {:.1} ({}) | {:.0} | {:.2} | {:.1} | {} |\n",
        row.name,
        a.refused,
        a.hits_confirmed_percent,
        a.misses_confirmed_percent,
        a.corrections_per_min,
        a.corrections_bound,
        a.pop_mm,
        a.starved_percent,
        a.peek_excess_ms,
        if row.pass {
            "PASS".to_owned()
        } else {
            format!("FAIL: {}", row.acceptance.failures.join("; "))
        }
    )
}

/// The grid's summary: cells passed, and the failures counted by figure.
pub fn grid_summary(rows: &[GridRow]) -> String {
    let passed = rows.iter().filter(|r| r.pass).count();
    let count = |f: &dyn Fn(&Acceptance) -> bool| rows.iter().filter(|r| f(&r.acceptance)).count();
    format!(
        "{passed} of {} cells passed. Failing: refusals {}, hits confirmed {}, misses confirmed {}, \
         corrections {}, pops {}, starved frames {}, peeker's advantage {}.\n",
        rows.len(),
        count(&|a| a.refused > 0),
        count(&|a| a.hits_confirmed_percent < 99.5),
        count(&|a| a.misses_confirmed_percent > 0.5),
        count(&|a| a.corrections_per_min > a.corrections_bound),
        count(&|a| a.pop_mm > 50.0),
        count(&|a| a.starved_bound.is_some_and(|b| a.starved_percent > b)),
        count(&|a| a.peek_excess_ms > TICK_MS),
    )
}

/// Writes heat maps of the crossed blocks into `dir` (created if missing): hits confirmed and
/// refusals over RTT × loss, and over update rate × client frame rate. The files written.
pub fn plot_grid(dir: &Path, rows: &[GridRow]) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("--plot {}: {e}", dir.display()))?;
    // A block's cell: the middle's conditions but the two varied.
    let mid = rows
        .iter()
        .find(|r| r.name == "middle")
        .map(|r| r.conditions.clone())
        .unwrap_or_default();
    let cell = |vary: &dyn Fn(&mut Conditions)| {
        let mut c = mid.clone();
        vary(&mut c);
        c.jitter_ms = c.jitter_ms.min(c.rtt_ms / 4.0);
        rows.iter().find(|r| r.conditions == c)
    };
    let rtts = [0.0, 100.0, 250.0, 500.0];
    let losses = [0.0, 5.0, 10.0, 20.0];
    let rates = [1.0, 5.0, 20.0, 60.0];
    let fpss = [10.0, 30.0, 60.0, 240.0];
    // (file key, title, value, whether higher is better).
    type Figure = (&'static str, &'static str, fn(&GridRow) -> f64, bool);
    let figures: [Figure; 2] = [
        (
            "hits",
            "seen hits confirmed (%)",
            |r| r.acceptance.hits_confirmed_percent,
            true,
        ),
        (
            "refused",
            "shots refused",
            |r| r.acceptance.refused as f64,
            false,
        ),
    ];
    // The crossed blocks: (file key, title, x axis, y axis, how a cell varies the middle).
    type Block<'a> = (
        &'a str,
        &'a str,
        (&'a str, &'a [f64]),
        (&'a str, &'a [f64]),
        fn(&mut Conditions, f64, f64),
    );
    let blocks: [Block; 2] = [
        (
            "rtt_loss",
            "RTT × loss",
            ("RTT (ms)", &rtts),
            ("loss (%)", &losses),
            |c, x, y| {
                c.rtt_ms = x;
                c.loss_percent = y;
            },
        ),
        (
            "update_fps",
            "update rate × client fps",
            ("client frames per second", &fpss),
            ("update rate (Hz)", &rates),
            |c, x, y| {
                c.client_fps = x;
                c.update_rate_hz = y;
            },
        ),
    ];
    let mut written = Vec::new();
    for (key, title, value, higher_better) in figures {
        for (block, block_title, x, y, set) in &blocks {
            let values: Vec<Vec<f64>> =
                y.1.iter()
                    .map(|yv| {
                        x.1.iter()
                            .map(|xv| cell(&|c| set(c, *xv, *yv)).map_or(f64::NAN, value))
                            .collect()
                    })
                    .collect();
            let path = dir.join(format!("grid_{key}_{block}.svg"));
            heat_map(
                &path,
                &format!("{title} over {block_title}"),
                *x,
                *y,
                &values,
                higher_better,
            )
            .map_err(|e| format!("{}: {e}", path.display()))?;
            written.push(path);
        }
    }
    Ok(written)
}

/// One heat map: a coloured, labelled square per (x, y) value; `values[row][column]`.
fn heat_map(
    path: &Path,
    title: &str,
    x: (&str, &[f64]),
    y: (&str, &[f64]),
    values: &[Vec<f64>],
    higher_better: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (640, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let finite: Vec<f64> = values
        .iter()
        .flatten()
        .copied()
        .filter(|v| v.is_finite())
        .collect();
    let lo = finite.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0..x.1.len(), 0..y.1.len())?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc(x.0)
        .y_desc(y.0)
        .x_label_formatter(&|i| x.1.get(*i).map_or(String::new(), |v| format!("{v}")))
        .y_label_formatter(&|i| y.1.get(*i).map_or(String::new(), |v| format!("{v}")))
        .draw()?;
    for (row, line) in values.iter().enumerate() {
        for (column, v) in line.iter().enumerate() {
            // Green is good, red bad.
            let share = if v.is_finite() && hi > lo {
                (v - lo) / (hi - lo)
            } else {
                1.0
            };
            let share = if higher_better { share } else { 1.0 - share };
            let colour = if v.is_finite() {
                HSLColor(0.33 * share, 0.7, 0.55)
            } else {
                HSLColor(0.0, 0.0, 0.85)
            };
            chart.draw_series(std::iter::once(Rectangle::new(
                [(column, row), (column + 1, row + 1)],
                colour.filled(),
            )))?;
            chart.draw_series(std::iter::once(Text::new(
                if v.is_finite() {
                    format!("{v:.1}")
                } else {
                    "-".into()
                },
                (column, row + 1),
                ("sans-serif", 16),
            )))?;
        }
    }
    root.present()?;
    Ok(())
}
