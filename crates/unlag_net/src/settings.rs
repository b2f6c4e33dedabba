//! Settings resources that stay valid: checked when a plugin is built, and again whenever
//! the game changes them at run time (a change that does not validate is logged, rate-limited,
//! and undone, so a typo in a debug panel cannot switch a check off or panic a system).

use bevy::prelude::*;
use unlag_core::{SettingsError, Validate};

/// The last valid value of settings resource `T`, restored when a change does not validate.
#[derive(Resource, Clone, Debug)]
pub struct LastValidSettings<T>(pub T);

/// How many run-time changes of settings were refused and undone (all settings types).
#[derive(Resource, Clone, Copy, Debug, Default)]
pub struct RefusedSettingsChanges(pub u64);

/// Inserts settings resources that are checked.
pub trait ValidatedSettingsAppExt {
    /// Inserts `settings` as a resource after checking them, and keeps them valid: a later
    /// change that does not [`validate`](Validate::validate) is undone at the start of the next
    /// frame (in `First`) with an error naming the field.
    ///
    /// # Panics
    /// When `settings` themselves do not validate: they are the game's code, and a plugin
    /// cannot run with them. The message names the struct, the field and its range.
    fn insert_validated<T: Resource + Validate + Clone>(&mut self, settings: T) -> &mut Self {
        self.insert_checked(settings, T::validate)
    }

    /// [`insert_validated`](Self::insert_validated) with `check` in place of [`Validate`] (for
    /// resources that check themselves through another trait, such as a movement model).
    fn insert_checked<T: Resource + Clone>(
        &mut self,
        settings: T,
        check: fn(&T) -> Result<(), SettingsError>,
    ) -> &mut Self;
}

impl ValidatedSettingsAppExt for App {
    fn insert_checked<T: Resource + Clone>(
        &mut self,
        settings: T,
        check: fn(&T) -> Result<(), SettingsError>,
    ) -> &mut Self {
        if let Err(e) = check(&settings) {
            panic!("{e}");
        }
        let first = !self.world().contains_resource::<LastValidSettings<T>>();
        self.insert_resource(LastValidSettings(settings.clone()))
            .insert_resource(settings)
            .init_resource::<RefusedSettingsChanges>();
        if first {
            self.add_systems(
                First,
                move |commands: Commands,
                      settings: Res<T>,
                      last: ResMut<LastValidSettings<T>>,
                      refused: ResMut<RefusedSettingsChanges>| {
                    keep_valid(commands, settings, last, refused, check)
                },
            );
        }
        self
    }
}

/// Panics with the error's text when `settings` do not validate (see
/// [`ValidatedSettingsAppExt::insert_validated`]).
pub fn check_at_build(settings: &impl Validate) {
    if let Err(e) = settings.validate() {
        panic!("{e}");
    }
}

/// Undoes a change of `T` that fails `check`. Through Commands, not `ResMut`: a resource
/// may be immutable (a movement model can be).
fn keep_valid<T: Resource + Clone>(
    mut commands: Commands,
    settings: Res<T>,
    mut last: ResMut<LastValidSettings<T>>,
    mut refused: ResMut<RefusedSettingsChanges>,
    check: fn(&T) -> Result<(), SettingsError>,
) {
    if !settings.is_changed() {
        return;
    }
    match check(&settings) {
        Ok(()) => last.0 = settings.clone(),
        Err(e) => {
            crate::warn_counted!(
                level: error,
                refused.0,
                "{e}: the change was undone (settings changes refused)"
            );
            commands.insert_resource(last.0.clone());
        }
    }
}
