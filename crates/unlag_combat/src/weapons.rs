//! [`WeaponTable`]: the weapons as data, from a RON asset (`assets/weapons.ron`).

use bevy::asset::io::Reader;
use bevy::asset::{AssetLoader, LoadContext};
use bevy::prelude::*;
use serde::Deserialize;

/// How a weapon fires.
#[derive(Copy, Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum WeaponKind {
    /// One instant ray per shot.
    Hitscan {
        /// Random spread of the ray around the aim, degrees (half angle; 0 for none).
        spread_degrees: f32,
    },
    /// Several instant rays per shot, rolled once on the client from a seed both sides derive.
    Shotgun {
        /// Rays per shot.
        pellets: u8,
        /// Half angle of the cone the pellets spread over, degrees.
        cone_degrees: f32,
    },
    /// A flying projectile (Unreal Tournament's prediction and catch-up).
    Projectile {
        /// Launch speed, m/s.
        speed: f32,
        /// Downward acceleration, m/s².
        gravity: f32,
        /// Radius of the projectile, metres.
        radius: f32,
        /// Damage at the centre of the explosion, hit points.
        splash_damage: f32,
        /// Radius of the explosion, metres.
        splash_radius: f32,
        /// Seconds before it expires.
        lifetime: f32,
    },
}

/// One weapon's numbers.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeaponSpec {
    /// Name ("rifle").
    pub name: String,
    /// Damage of a body hit (per pellet for a shotgun; direct hit for a projectile), hit points.
    pub damage: f32,
    /// Damage multiplier of a headshot.
    pub headshot_multiplier: f32,
    /// Shortest time between shots, seconds.
    pub fire_interval: f32,
    /// Longest distance a shot reaches, metres.
    pub range: f32,
    /// Rounds per magazine.
    pub magazine: u32,
    /// Seconds a reload takes.
    pub reload_time: f32,
    /// How it fires.
    pub kind: WeaponKind,
}

impl WeaponSpec {
    /// Pellets per shot (1 but for shotguns).
    pub fn pellets(&self) -> usize {
        match self.kind {
            WeaponKind::Shotgun { pellets, .. } => usize::from(pellets),
            _ => 1,
        }
    }

    /// Half angle of the spread cone, radians.
    pub fn spread(&self) -> f32 {
        match self.kind {
            WeaponKind::Hitscan { spread_degrees } => spread_degrees.to_radians(),
            WeaponKind::Shotgun { cone_degrees, .. } => cone_degrees.to_radians(),
            WeaponKind::Projectile { .. } => 0.0,
        }
    }
}

/// Every weapon of the game; a weapon's place in the list is its id on the wire. Loaded from
/// `.weapons.ron` or `weapons.ron` files, or built in code with [`WeaponTable::from_ron`].
#[derive(Asset, TypePath, Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeaponTable {
    /// Every weapon's numbers, in id order: the first is weapon 0. Between 1 and 256 weapons,
    /// each with its own name (checked when parsed).
    pub weapons: Vec<WeaponSpec>,
}

/// A weapon table that does not parse or is not valid: the file and the field are named.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{file}: {message}")]
pub struct WeaponTableError {
    /// The file (its asset path).
    pub file: String,
    /// What is wrong, and where: `line:column` for syntax, `weapons[i] (name).field` for values.
    pub message: String,
}

impl WeaponTable {
    /// Parses and checks a table; `file` names it in errors.
    pub fn from_ron(text: &str, file: &str) -> Result<Self, WeaponTableError> {
        let error = |message: String| WeaponTableError {
            file: file.to_owned(),
            message,
        };
        let table: Self = ron::from_str(text).map_err(|e| error(e.to_string()))?;
        table.validate().map_err(error)?;
        Ok(table)
    }

    /// The weapon with this id.
    pub fn get(&self, id: u8) -> Option<&WeaponSpec> {
        self.weapons.get(usize::from(id))
    }

    /// The id of the weapon with this name.
    pub fn id(&self, name: &str) -> Option<u8> {
        self.weapons
            .iter()
            .position(|w| w.name == name)
            .and_then(|i| u8::try_from(i).ok())
    }

    fn validate(&self) -> Result<(), String> {
        if self.weapons.is_empty() || self.weapons.len() > 256 {
            return Err("weapons: between 1 and 256 weapons".into());
        }
        for (i, w) in self.weapons.iter().enumerate() {
            let field = |name: &str| format!("weapons[{i}] ({}).{name}", w.name);
            let positive = |v: f32, name: &str| {
                (v.is_finite() && v > 0.0)
                    .then_some(())
                    .ok_or_else(|| format!("{}: must be finite and positive", field(name)))
            };
            let not_negative = |v: f32, name: &str| {
                (v.is_finite() && v >= 0.0)
                    .then_some(())
                    .ok_or_else(|| format!("{}: must be finite and not negative", field(name)))
            };
            if w.name.is_empty() {
                return Err(format!("weapons[{i}].name: must not be empty"));
            }
            if self.weapons[..i].iter().any(|o| o.name == w.name) {
                return Err(format!("{}: used twice", field("name")));
            }
            not_negative(w.damage, "damage")?;
            not_negative(w.headshot_multiplier, "headshot_multiplier")?;
            positive(w.fire_interval, "fire_interval")?;
            positive(w.range, "range")?;
            not_negative(w.reload_time, "reload_time")?;
            if w.magazine == 0 {
                return Err(format!("{}: must be at least 1", field("magazine")));
            }
            match w.kind {
                WeaponKind::Hitscan { spread_degrees } => {
                    if !(spread_degrees.is_finite() && (0.0..45.0).contains(&spread_degrees)) {
                        return Err(format!("{}: 0 to 45 degrees", field("kind.spread_degrees")));
                    }
                }
                WeaponKind::Shotgun {
                    pellets,
                    cone_degrees,
                } => {
                    if !(1..=64).contains(&pellets) {
                        return Err(format!("{}: 1 to 64", field("kind.pellets")));
                    }
                    if !(cone_degrees.is_finite() && (0.0..45.0).contains(&cone_degrees)) {
                        return Err(format!("{}: 0 to 45 degrees", field("kind.cone_degrees")));
                    }
                }
                WeaponKind::Projectile {
                    speed,
                    gravity,
                    radius,
                    splash_damage,
                    splash_radius,
                    lifetime,
                } => {
                    positive(speed, "kind.speed")?;
                    not_negative(gravity, "kind.gravity")?;
                    not_negative(radius, "kind.radius")?;
                    not_negative(splash_damage, "kind.splash_damage")?;
                    not_negative(splash_radius, "kind.splash_radius")?;
                    positive(lifetime, "kind.lifetime")?;
                }
            }
        }
        Ok(())
    }
}

/// Loads [`WeaponTable`]s from `weapons.ron` / `.weapons.ron` files.
#[derive(Default, TypePath)]
pub struct WeaponTableLoader;

impl AssetLoader for WeaponTableLoader {
    type Asset = WeaponTable;
    type Settings = ();
    type Error = WeaponTableError;

    async fn load(
        &self,
        reader: &mut dyn Reader,
        _settings: &(),
        load_context: &mut LoadContext<'_>,
    ) -> Result<WeaponTable, WeaponTableError> {
        let file = load_context.path().to_string();
        let mut bytes = Vec::new();
        reader
            .read_to_end(&mut bytes)
            .await
            .map_err(|e| WeaponTableError {
                file: file.clone(),
                message: e.to_string(),
            })?;
        let text = std::str::from_utf8(&bytes).map_err(|e| WeaponTableError {
            file: file.clone(),
            message: format!("not UTF-8: {e}"),
        })?;
        WeaponTable::from_ron(text, &file)
    }

    fn extensions(&self) -> &[&str] {
        &["weapons.ron"]
    }
}
