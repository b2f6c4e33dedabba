#![allow(dead_code)] // Shared by the examples; each uses part of it.

//! What the examples share on the command line and in setting up their window.

use bevy::prelude::*;

/// The next argument as a finite non-negative number, for option `name`.
pub fn number(args: &mut impl Iterator<Item = String>, name: &str) -> Result<f64, String> {
    let v = args.next().ok_or_else(|| format!("{name} needs a value"))?;
    v.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x >= 0.0)
        .ok_or_else(|| format!("{name}: {v:?} is not a non-negative number"))
}

/// The next argument as a window size `WIDTHxHEIGHT` in pixels, for option `name`.
pub fn window_size(
    args: &mut impl Iterator<Item = String>,
    name: &str,
) -> Result<(u32, u32), String> {
    let v = args
        .next()
        .ok_or_else(|| format!("{name} needs WIDTHxHEIGHT"))?;
    v.split_once('x')
        .and_then(|(w, h)| Some((w.parse().ok()?, h.parse().ok()?)))
        .filter(|(w, h)| (320..=7680).contains(w) && (240..=4320).contains(h))
        .ok_or_else(|| format!("{name}: {v:?} is not WIDTHxHEIGHT (320x240 to 7680x4320)"))
}

/// The options `parsed`, or, when they did not parse, the message on stderr after the
/// program's `name` and exit code 2.
pub fn options_or_exit<T>(name: &str, parsed: Result<T, String>) -> T {
    parsed.unwrap_or_else(|message| {
        eprintln!("{name}: {message}");
        std::process::exit(2);
    })
}

/// Bevy's default plugins with a window titled `title` of `size` pixels, reading this
/// repository's `assets/`.
pub fn window_plugins(title: &str, size: (u32, u32)) -> impl PluginGroup {
    DefaultPlugins
        .set(WindowPlugin {
            primary_window: Some(Window {
                title: title.into(),
                resolution: size.into(),
                ..default()
            }),
            ..default()
        })
        .set(unlag_demo::asset_plugin())
}

/// Ends `app` after `seconds` of real time, if given.
pub fn quit_after(app: &mut App, seconds: Option<f64>) {
    if let Some(s) = seconds {
        app.add_systems(
            Update,
            move |time: Res<Time<Real>>, mut exit: MessageWriter<AppExit>| {
                if time.elapsed_secs_f64() >= s {
                    exit.write(AppExit::Success);
                }
            },
        );
    }
}
