//! Settings resources that stay valid: checked when a plugin is built, and again whenever
//! the game changes them at run time (a change that does not validate is logged, rate-limited,
//! and undone, so a typo in a debug panel cannot switch a check off or panic a system).

use bevy::ecs::component::Mutable;
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
    fn insert_validated<T: Resource<Mutability = Mutable> + Validate + Clone>(
        &mut self,
        settings: T,
    ) -> &mut Self;
}

impl ValidatedSettingsAppExt for App {
    fn insert_validated<T: Resource<Mutability = Mutable> + Validate + Clone>(
        &mut self,
        settings: T,
    ) -> &mut Self {
        check_at_build(&settings);
        let first = !self.world().contains_resource::<LastValidSettings<T>>();
        self.insert_resource(LastValidSettings(settings.clone()))
            .insert_resource(settings)
            .init_resource::<RefusedSettingsChanges>();
        if first {
            self.add_systems(First, keep_valid::<T>);
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

/// Undoes a change of `T` that does not validate.
fn keep_valid<T: Resource<Mutability = Mutable> + Validate + Clone>(
    mut settings: ResMut<T>,
    mut last: ResMut<LastValidSettings<T>>,
    mut refused: ResMut<RefusedSettingsChanges>,
) {
    if !settings.is_changed() {
        return;
    }
    match settings.validate() {
        Ok(()) => last.0 = settings.clone(),
        Err(e) => {
            refused.0 += 1;
            if refused.0.is_power_of_two() {
                warn_refused(&e, refused.0);
            }
            *settings = last.0.clone();
        }
    }
}

fn warn_refused(e: &SettingsError, count: u64) {
    error!("{e}: the change was undone ({count} settings changes refused so far)");
}
