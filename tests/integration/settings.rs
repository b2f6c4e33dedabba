//! Settings that are out of range: every settings struct names the field and its range, the
//! plugins refuse to build with them, a run-time change that does not validate is undone, and
//! the configurations that used to crash or hang the server no longer can.

use bevy::prelude::*;
use unlag::combat::{CombatPlugin, CombatSettings};
use unlag::core::{
    CorrectionSmoothing, CorrectionThrottle, DelayController, DelayPolicy, HighPingSettings,
    PlayoutSettings, SettingsError, TimeDiscrepancySettings, Validate,
};
use unlag::diagnostics::NetGraphSettings;
use unlag::movement::{CharacterMovement, KartMovement, MovementModel, MovementSettings};
use unlag::net::{RefusedSettingsChanges, ValidatedSettingsAppExt};
use unlag::rewind::{HitShape, RewindSettings, hit_box_ray};
use unlag::smoothing::SmoothingSettings;

/// The error's field, checked to be named in its text with the struct.
fn field_of(result: Result<(), SettingsError>) -> String {
    let e = result.expect_err("must not validate");
    let text = e.to_string();
    assert!(
        text.contains(e.settings) && text.contains(&e.field),
        "{text}"
    );
    e.field
}

#[test]
fn every_default_validates() {
    assert_eq!(CombatSettings::default().validate(), Ok(()));
    assert_eq!(
        MovementSettings::<CharacterMovement>::default().validate(),
        Ok(())
    );
    assert_eq!(
        MovementSettings::<KartMovement>::default().validate(),
        Ok(())
    );
    assert_eq!(RewindSettings::default().validate(), Ok(()));
    assert_eq!(SmoothingSettings::default().validate(), Ok(()));
    assert_eq!(CorrectionSmoothing::default().validate(), Ok(()));
    assert_eq!(CorrectionThrottle::default().validate(), Ok(()));
    assert_eq!(HighPingSettings::default().validate(), Ok(()));
    assert_eq!(TimeDiscrepancySettings::default().validate(), Ok(()));
    assert_eq!(NetGraphSettings::default().validate(), Ok(()));
    assert_eq!(DelayPolicy::default().validate(), Ok(()));
    assert_eq!(PlayoutSettings::default().validate(), Ok(()));
    assert_eq!(MovementModel::validate(&KartMovement::default()), Ok(()));
    assert_eq!(
        MovementModel::validate(&CharacterMovement::default()),
        Ok(())
    );
}

/// A NaN makes every comparison false: each of these used to switch its check off silently.
#[test]
fn a_nan_that_would_switch_a_check_off_is_named() {
    let combat = |f: fn(&mut CombatSettings)| {
        let mut s = CombatSettings::default();
        f(&mut s);
        field_of(s.validate())
    };
    assert_eq!(
        combat(|s| s.view_time_tolerance = f64::NAN),
        "view_time_tolerance"
    );
    assert_eq!(
        combat(|s| s.view_time_tolerance = -0.1),
        "view_time_tolerance"
    );
    assert_eq!(combat(|s| s.pellet_slack = f32::NAN), "pellet_slack");
    assert_eq!(
        combat(|s| s.max_origin_error = f32::INFINITY),
        "max_origin_error"
    );
    let movement = |f: fn(&mut MovementSettings<CharacterMovement>)| {
        let mut s = MovementSettings::default();
        f(&mut s);
        field_of(s.validate())
    };
    assert_eq!(
        movement(|s| s.max_moves_per_second = f64::NAN),
        "max_moves_per_second"
    );
    assert_eq!(
        movement(|s| s.time_discrepancy.max_time_margin = f64::NAN),
        "time_discrepancy.max_time_margin"
    );
    assert_eq!(movement(|s| s.playout.quantile = 0.2), "playout.quantile");
    assert_eq!(movement(|s| s.max_seq_gap = u32::MAX), "max_seq_gap");
    let rewind = |f: fn(&mut RewindSettings)| {
        let mut s = RewindSettings::default();
        f(&mut s);
        field_of(s.validate())
    };
    assert_eq!(
        rewind(|s| s.max_claimed_ease = f32::NAN),
        "max_claimed_ease"
    );
    assert_eq!(rewind(|s| s.max_record_time = 0.0), "max_record_time");
    assert_eq!(
        rewind(|s| s.max_record_time = f64::INFINITY),
        "max_record_time"
    );
    let smoothing = SmoothingSettings {
        delay_policy: DelayPolicy {
            min_delay: f64::NAN,
            ..default()
        },
        ..default()
    };
    assert_eq!(field_of(smoothing.validate()), "delay_policy.min_delay");
    let kart = KartMovement {
        max_step: 0.0,
        ..default()
    };
    assert_eq!(field_of(MovementModel::validate(&kart)), "max_step");
    let graph = NetGraphSettings {
        sample_interval: 0.0,
        ..default()
    };
    assert_eq!(field_of(graph.validate()), "sample_interval");
}

#[test]
#[should_panic(expected = "invalid CombatSettings: view_time_tolerance = NaN")]
fn a_plugin_with_invalid_settings_does_not_build() {
    App::new().add_plugins(CombatPlugin {
        settings: CombatSettings {
            view_time_tolerance: f64::NAN,
            ..default()
        },
    });
}

#[test]
fn a_run_time_change_that_does_not_validate_is_undone() {
    let mut app = App::new();
    app.insert_validated(CombatSettings::default());
    app.update();
    app.world_mut()
        .resource_mut::<CombatSettings>()
        .view_time_tolerance = f64::NAN;
    app.update();
    assert_eq!(
        app.world().resource::<CombatSettings>().view_time_tolerance,
        0.02
    );
    assert_eq!(app.world().resource::<RefusedSettingsChanges>().0, 1);
    // A valid change stays, and is the one kept from then on.
    app.world_mut()
        .resource_mut::<CombatSettings>()
        .view_time_tolerance = 0.03;
    app.update();
    app.world_mut()
        .resource_mut::<CombatSettings>()
        .pellet_slack = -1.0;
    app.update();
    let settings = app.world().resource::<CombatSettings>();
    assert_eq!(
        (settings.view_time_tolerance, settings.pellet_slack),
        (0.03, 0.001)
    );
    assert_eq!(app.world().resource::<RefusedSettingsChanges>().0, 2);
}

/// A delay policy changed by hand past `validate` (NaN bounds) used to panic a clamp.
#[test]
fn a_delay_policy_with_nan_bounds_does_not_panic() {
    let policy = DelayPolicy {
        min_delay: f64::NAN,
        max_delay: f64::NAN,
        ..default()
    };
    let mut delay = DelayController::new(policy, 0.1);
    delay.set_target(0.2);
    assert!(policy.target(0.05, 0.01, 0.02).is_finite());
    assert!(delay.update(0.016).is_finite());
}

/// A hand-built hit box with a negative or NaN size used to panic the ray test near a shot.
#[test]
fn a_hit_box_without_volume_is_never_hit_and_never_panics() {
    let origin = Vec3::new(0.0, 1.0, -5.0);
    for shape in [
        HitShape::Capsule {
            half_height: -0.5,
            radius: 0.3,
        },
        HitShape::Capsule {
            half_height: 0.5,
            radius: f32::NAN,
        },
        HitShape::Cuboid {
            half_extents: Vec3::new(0.3, -1.0, 0.3),
        },
    ] {
        assert!(!shape.is_solid());
        assert_eq!(shape.bounding_radius(), 0.0);
        for sweep in [0.0, 0.05] {
            let hit = hit_box_ray(
                &shape,
                Vec3::Y,
                Quat::IDENTITY,
                origin,
                Vec3::Z,
                10.0,
                sweep,
            );
            assert_eq!(hit, None, "{shape:?}");
        }
    }
    // The same ray hits a solid capsule there.
    let solid = HitShape::Capsule {
        half_height: 0.5,
        radius: 0.3,
    };
    assert!(hit_box_ray(&solid, Vec3::Y, Quat::IDENTITY, origin, Vec3::Z, 10.0, 0.0).is_some());
}

/// A kart whose sub-step was set to 0 by hand used to hang the server in `u32::MAX` sub-steps.
#[test]
fn a_kart_with_a_zero_step_still_finishes_a_move() {
    use crate::physics::{collision_world, ground_with};
    use unlag::movement::{KartInput, KartState};
    let physics = ground_with(|_| {});
    let world = collision_world(&physics);
    let input = KartInput {
        throttle: 10,
        steering: 0,
    };
    let start = KartState {
        position: Vec3::new(0.0, 0.41, 0.0),
        ..default()
    };
    let run = |model: &KartMovement| {
        (0..10).fold(start.clone(), |s, _| {
            model.simulate(&s, &input, 0.125, &world).0
        })
    };
    let zero = run(&KartMovement {
        max_step: 0.0,
        ..default()
    });
    let fine = run(&KartMovement {
        max_step: 0.002,
        ..default()
    });
    // At most MAX_KART_SUBSTEPS sub-steps: as if the step were 0.125 / 64 s.
    assert!(
        zero.position.distance(fine.position) < 0.01,
        "{zero:?} vs {fine:?}"
    );
    assert!(zero.position.z < -0.5, "the kart drove: {zero:?}");
}
