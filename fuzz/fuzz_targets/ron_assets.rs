//! The RON asset loaders (hit-box layouts and weapon tables) on any text: never a panic; an
//! error names the file; what loads is valid (finite sizes, at least one shape or weapon).
#![no_main]

use libfuzzer_sys::fuzz_target;
use unlag_combat::WeaponTable;
use unlag_rewind::HitBoxLayout;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match HitBoxLayout::from_ron(text, "fuzz.hitboxes.ron") {
        Ok(layout) => {
            // Names may say anything ("NaN" included: the fuzzer found one); numbers may not.
            let numbers = outside_strings(&format!("{layout:?}"));
            assert!(!numbers.contains("NaN") && !numbers.contains("inf"), "{layout:?}");
        }
        Err(e) => assert!(e.to_string().contains("fuzz.hitboxes.ron"), "{e}"),
    }
    match WeaponTable::from_ron(text, "fuzz.weapons.ron") {
        Ok(table) => {
            assert!(!table.weapons.is_empty());
            for w in &table.weapons {
                assert!(w.pellets() >= 1);
                assert!(w.spread().is_finite() && w.spread() >= 0.0);
                assert!(w.fire_interval.is_finite() && w.fire_interval > 0.0);
            }
        }
        Err(e) => assert!(e.to_string().contains("fuzz.weapons.ron"), "{e}"),
    }
});

/// `debug` (a `{:?}` rendering) without its string literals.
fn outside_strings(debug: &str) -> String {
    let (mut out, mut inside, mut escaped) = (String::new(), false, false);
    for c in debug.chars() {
        match (inside, escaped, c) {
            (true, true, _) => escaped = false,
            (true, false, '\\') => escaped = true,
            (_, false, '"') => inside = !inside,
            (false, _, c) => out.push(c),
            _ => {}
        }
    }
    out
}
