//! What the windowed examples (shooter, karts) share in setting up their window.

use bevy::prelude::*;

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

/// What a player without a display or a usable GPU driver is told, after the program's name.
const HEADLESS_HINT: &str = "the shooter's dedicated server (`cargo run --release --example \
server`) and the report (`cargo run --release --example report`) run without one";

/// Exits with one clear line (code 1) when this machine has no display the window could open
/// on: `DISPLAY` unset, or no X server answering on it. The examples draw through X11 only
/// (no system packages needed), so Wayland alone is not enough. Call before building a
/// windowed App: winit would otherwise panic with a stack trace.
pub fn require_display_or_exit(name: &str) {
    if let Err(problem) =
        unlag_demo::display::display_problem(std::env::var("DISPLAY").ok().as_deref())
    {
        eprintln!("{name}: no display to open a window on ({problem}); {HEADLESS_HINT}.");
        std::process::exit(1);
    }
}

/// Turns the renderer's and the window system's start-up panics (no GPU adapter, no window
/// system) into one clear line and exit code 1; any other panic is reported as usual.
pub fn explain_startup_failures(name: &'static str) {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let what = if message.contains("Unable to find a GPU") {
            Some(
                "no usable GPU driver (wgpu found no adapter; a software Vulkan such as lavapipe will do)",
            )
        } else if message.contains("WAYLAND_DISPLAY")
            || message.contains("XOpenDisplay")
            || message.contains("event loop")
        {
            Some("no window system to open a window on")
        } else {
            None
        };
        match what {
            Some(what) => {
                eprintln!("{name}: {what}; {HEADLESS_HINT}.");
                std::process::exit(1);
            }
            None => default(info),
        }
    }));
}
