//! Checking settings: every settings struct of the plugins implements [`Validate`], and the
//! plugins call it when they are built, so a value out of range (a NaN above all, which turns
//! every comparison against it false and so switches a check off without a word) is an error
//! naming the struct, the field and its range instead of a panic deep in a system or a check
//! that silently passes everything.

use core::fmt;

/// Why a settings struct is not usable: which struct, which field (dotted for nested settings,
/// e.g. `time_discrepancy.max_time_margin`), its value and the range it must be in.
#[derive(Clone, Debug, PartialEq)]
pub struct SettingsError {
    /// The settings struct, e.g. `"CombatSettings"`.
    pub settings: &'static str,
    /// The field, dotted through nested settings.
    pub field: String,
    /// The value found, as text.
    pub value: String,
    /// What the value must be, e.g. `"within 0..=1 s"`.
    pub expected: String,
}

impl fmt::Display for SettingsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid {}: {} = {} (must be {})",
            self.settings, self.field, self.value, self.expected
        )
    }
}

impl std::error::Error for SettingsError {}

impl SettingsError {
    /// The same error found in settings nested in field `field` of struct `settings`: the
    /// field becomes `field.inner`.
    pub fn nested(self, settings: &'static str, field: &str) -> Self {
        Self {
            settings,
            field: format!("{field}.{}", self.field),
            ..self
        }
    }
}

/// A settings struct that can check its own fields.
pub trait Validate {
    /// Checks every field's range (a NaN fails), naming the first that is out of it.
    fn validate(&self) -> Result<(), SettingsError>;
}

/// Range checks for one settings struct: `Fields::new("CombatSettings").within(...)?`.
#[derive(Copy, Clone, Debug)]
pub struct Fields {
    settings: &'static str,
}

impl Fields {
    /// Checks for the struct named `settings`.
    pub fn new(settings: &'static str) -> Self {
        Self { settings }
    }

    /// An error for `field` holding `value`, which must be `expected`.
    pub fn error(
        &self,
        field: &str,
        value: impl fmt::Display,
        expected: impl Into<String>,
    ) -> SettingsError {
        SettingsError {
            settings: self.settings,
            field: field.to_owned(),
            value: value.to_string(),
            expected: expected.into(),
        }
    }

    /// `value` must lie in `lo..=hi` (`unit` is printed after the range, e.g. `"s"`); NaN fails.
    pub fn within(
        &self,
        field: &str,
        value: f64,
        lo: f64,
        hi: f64,
        unit: &str,
    ) -> Result<(), SettingsError> {
        if (lo..=hi).contains(&value) {
            Ok(())
        } else {
            Err(self.error(field, value, range_text(">=", lo, "<=", hi, unit)))
        }
    }

    /// `value` must lie in `lo < value <= hi` (a duration or size that may not be 0); NaN fails.
    pub fn above(
        &self,
        field: &str,
        value: f64,
        lo: f64,
        hi: f64,
        unit: &str,
    ) -> Result<(), SettingsError> {
        if value > lo && value <= hi {
            Ok(())
        } else {
            Err(self.error(field, value, range_text(">", lo, "<=", hi, unit)))
        }
    }

    /// `value` must be at least `lo`, and may be +∞ (a switch-off); NaN fails.
    pub fn at_least(
        &self,
        field: &str,
        value: f64,
        lo: f64,
        unit: &str,
    ) -> Result<(), SettingsError> {
        if value >= lo {
            Ok(())
        } else {
            let unit = if unit.is_empty() {
                String::new()
            } else {
                format!(" {unit}")
            };
            Err(self.error(field, value, format!(">= {lo}{unit} (or inf)")))
        }
    }

    /// An integer `value` must lie in `lo..=hi`.
    pub fn count(&self, field: &str, value: u64, lo: u64, hi: u64) -> Result<(), SettingsError> {
        if (lo..=hi).contains(&value) {
            Ok(())
        } else {
            Err(self.error(field, value, format!("within {lo}..={hi}")))
        }
    }

    /// Settings nested in `field`, checked by their own [`Validate`].
    pub fn nested(&self, field: &str, inner: &impl Validate) -> Result<(), SettingsError> {
        inner.validate().map_err(|e| e.nested(self.settings, field))
    }
}

fn range_text(lo_op: &str, lo: f64, hi_op: &str, hi: f64, unit: &str) -> String {
    let unit = if unit.is_empty() {
        String::new()
    } else {
        format!(" {unit}")
    };
    format!("{lo_op} {lo} and {hi_op} {hi}{unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Inner(f64);
    impl Validate for Inner {
        fn validate(&self) -> Result<(), SettingsError> {
            Fields::new("Inner").within("rate", self.0, 0.0, 1.0, "")
        }
    }

    #[test]
    fn errors_name_the_struct_the_field_and_the_range() {
        let f = Fields::new("Outer");
        let e = f.within("tolerance", f64::NAN, 0.0, 1.0, "s").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid Outer: tolerance = NaN (must be >= 0 and <= 1 s)"
        );
        assert!(f.within("tolerance", 1.0, 0.0, 1.0, "s").is_ok());
        assert!(f.above("step", 0.0, 0.0, 1.0, "s").is_err());
        assert!(f.above("step", 1e-3, 0.0, 1.0, "s").is_ok());
        assert!(f.at_least("cap", f64::INFINITY, 0.0, "").is_ok());
        assert!(f.at_least("cap", f64::NAN, 0.0, "").is_err());
        assert!(f.count("n", 0, 1, 3).is_err());
        let nested = f.nested("inner", &Inner(2.0)).unwrap_err();
        assert_eq!(nested.settings, "Outer");
        assert_eq!(nested.field, "inner.rate");
        assert!(f.nested("inner", &Inner(0.5)).is_ok());
    }
}
