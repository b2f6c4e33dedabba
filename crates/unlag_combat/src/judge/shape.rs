//! Shape checks: a request is well formed, and its pellets are the ones its weapon fires for
//! its fire index and aim.

use super::ShotContext;
use crate::protocol::{FireRequest, MAX_CLAIMS, Rejection};
use crate::rules::shot_directions;
use crate::wire::MAX_DIRECTIONS;
use unlag_core::within_cone;

/// Refuses garbage before anything else reads the request ([`Rejection::Malformed`]):
/// non-finite numbers, more directions or claims than any shot has.
pub(super) fn well_formed(request: &FireRequest) -> Result<(), Rejection> {
    let finite = request.origin.is_finite()
        && request.aim.is_finite()
        && request.view_time.is_finite()
        && request.sent_view_time.is_finite()
        && request.sent_delay.is_finite()
        && request.judged_time.is_finite()
        && request.directions.len() <= MAX_DIRECTIONS
        && request.claims.len() <= MAX_CLAIMS
        && request.directions.iter().all(|d| d.is_finite())
        && request.claims.iter().all(|c| {
            c.alpha.is_finite()
                && c.ease.is_finite()
                && (0.0..=unlag_net::MAX_REPORTED_DELAY).contains(&c.behind)
        });
    if !finite {
        return Err(Rejection::Malformed);
    }
    Ok(())
}

impl ShotContext<'_, '_, '_> {
    /// Every shape check, in order. A request that carries no directions is judged on the
    /// pattern its weapon rolls ([`FireRequest::pellets`]): its count and spread are right by
    /// construction, and only its aim is checked.
    pub(super) fn shape(&self) -> Result<(), Rejection> {
        if self.request.directions.is_empty() {
            return self.aim();
        }
        self.pellet_count()?;
        self.directions()?;
        self.spread()
    }

    /// A unit aim ([`Rejection::BadDirection`]).
    fn aim(&self) -> Result<(), Rejection> {
        if (self.request.aim.length() - 1.0).abs() > 1e-3 {
            return Err(Rejection::BadDirection);
        }
        Ok(())
    }

    /// As many directions as the weapon has pellets ([`Rejection::WrongPelletCount`]).
    fn pellet_count(&self) -> Result<(), Rejection> {
        if self.request.directions.len() != self.spec.pellets() {
            return Err(Rejection::WrongPelletCount);
        }
        Ok(())
    }

    /// A unit aim, and unit directions inside the weapon's cone around it
    /// ([`Rejection::BadDirection`]).
    fn directions(&self) -> Result<(), Rejection> {
        self.aim()?;
        let aim = self.request.aim;
        let (spread, slack) = (self.spec.spread(), self.settings.pellet_slack);
        let off = |d: &bevy::math::Vec3| {
            (d.length() - 1.0).abs() > 1e-3 || !within_cone(aim, *d, spread, slack)
        };
        if self.request.directions.iter().any(off) {
            return Err(Rejection::BadDirection);
        }
        Ok(())
    }

    /// The pattern rolled from the fire index, turned to the aim ([`Rejection::WrongSpread`]):
    /// a client picks neither its spread nor its pellets.
    fn spread(&self) -> Result<(), Rejection> {
        let request = self.request;
        let rolled = shot_directions(self.spec, request.fire_index, request.aim);
        if rolled
            .iter()
            .zip(&request.directions)
            .any(|(r, d)| r.angle_between(*d) > self.settings.pellet_slack)
        {
            return Err(Rejection::WrongSpread);
        }
        Ok(())
    }
}
