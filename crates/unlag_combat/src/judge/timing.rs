//! Timing checks: is the moment a shot claims to show the moment its client showed? Backtrack
//! protection, judged at the shot's arrival against the shooter's link as it was then. Each
//! refuses with [`Rejection::BadViewTime`] (the drift window counts late refusals by that
//! reason: keep it).

use super::ShotContext;
use crate::protocol::Rejection;
use crate::rules::{outside_lag_range, shot_tolerance};
use crate::stats::{CombatStats, keep_latest};

/// Fixed part of the slack on a shot's lead above the rewind cap, seconds (the jitter is
/// added): the client's and the server's smoothed RTTs differ by this much on a steady link.
const LEAD_SLACK: f64 = 0.01;

/// How far a client's interpolation delay may have grown and shrunk, seconds, over the span in
/// which its view time advanced `age` seconds, at the delay's default rates
/// ([`unlag_core::DelayPolicy`]): while it grows, view time runs that much slower than real
/// time, so the span is longer than `age`.
fn delay_movement(age: f64) -> (f64, f64) {
    let policy = unlag_core::DelayPolicy::default();
    let age = unlag_core::finite_non_negative(age);
    let span = age / (1.0 - policy.max_increase_rate).max(0.5);
    (
        policy.max_increase_rate * span,
        policy.max_decrease_rate * span,
    )
}

impl ShotContext<'_, '_, '_> {
    /// Every timing check, in order; the view-time error and the lag excess go into `stats`'
    /// figures as they are measured, whatever the verdict.
    pub(super) fn timing(&self, stats: &mut CombatStats) -> Result<(), Rejection> {
        self.reported()?;
        self.view_time(stats)?;
        let cap = self.delay_cap()?;
        let age = self.copy_age()?;
        self.lead(age, cap)?;
        self.view_lag(stats)
    }

    /// A client that never reported its view cannot have its shots' timing checked.
    fn reported(&self) -> Result<(), Rejection> {
        if !self.arrival.link.reported {
            return Err(Rejection::BadViewTime);
        }
        Ok(())
    }

    /// The copy left the client one way ago, so the view time it stamps as it leaves
    /// (`sent_view_time`) should be the server's estimate of the client's view time then,
    /// within the tolerance of the link and both frame rates. The shot itself is older by the
    /// copy's age, which [`copy_age`](Self::copy_age) bounds (two of the client's frames): a
    /// copy after a hitch, whose trip the link also slowed, would otherwise need both inside
    /// one tolerance (a 10-fps client's third copy, 0.17 s after its shot and 92 ms later
    /// than the link's mean trip after a burst of losses, was refused by 4 ms). The shot's own
    /// view time gains nothing by it: a copy stamped honestly may already carry a shot as old
    /// as the copy age allows.
    ///
    /// The estimate takes the delay of the client's last report, unless the copy's own differs
    /// by no more than the delay could move since that report was stamped (its default rates):
    /// a burst of losses that kept the reports back while the delay grew leaves the server's
    /// the older one (at 500 ms and 20 % loss in bursts of 10, one copy carried 0.79 s, 68 ms
    /// more than the report 0.7 s before it, and was refused). A client claiming another delay
    /// shifts its expected view time by no more than an honest one's delay may move, and the
    /// lag check holds the copy to its reports either way.
    fn view_time(&self, stats: &mut CombatStats) -> Result<(), Rejection> {
        let (link, request) = (&self.arrival.link, self.request);
        let reported = link.interpolation_delay;
        let since_report = link
            .report_stamp
            .map_or(0.0, |stamp| request.sent_view_time - stamp);
        let (grown, shrunk) = delay_movement(since_report);
        let delay = if request.sent_delay.is_finite() {
            request
                .sent_delay
                .clamp(reported - shrunk, reported + grown)
        } else {
            reported
        };
        let expected = link.view_time(self.arrival.time - link.rtt / 2.0) + (reported - delay);
        let tolerance = shot_tolerance(self.settings, link, self.arrival.frame);
        let error = request.sent_view_time - expected;
        keep_latest(&mut stats.view_time_errors, error);
        // The shot left a one-way trip before it arrived: half the RTT, or up to the whole of
        // a rise in the link's trips that the RTT estimate has not followed yet longer (the
        // shot older by that much). Only up to: a burst of losses both ways lengthens a trip
        // too (the newest packet the client had was old), and delays no shot.
        let older = tolerance + link.trip_rise(self.arrival.frame);
        // Newer than expected only by more than the link allows, its round trip taken as the
        // quickest quarter of the acknowledged trips shows it when that is shorter than
        // lightyear's (`rtt_over_quick_trip`): a client frozen most of the time (its frames
        // hitching) reads most pings after a stall, its RTT reads long by the stalls, and its
        // honest copies looked newer than expected by as much (240 fps with 3 % of frames
        // taking 250 ms: +0.100 to +0.116 s against a tolerance of 0.100-0.107, a shot refused
        // every 30 s or so). Acknowledgements a client cannot shorten: holding its pongs makes
        // this side no looser than an honest client's.
        let newer = error - link.rtt_over_quick_trip();
        if newer > tolerance || error < -older {
            return Err(Rejection::BadViewTime);
        }
        Ok(())
    }

    /// The rewind cap the client counted on, seconds: one the server announced to it lately
    /// (it heard the last of them a trip ago), none larger; without one, the server's own.
    ///
    /// A shot is judged later than drawn only by the part of the trip the server does not
    /// rewind, as the server measures it, and the part of the delay it does not compensate
    /// (the delay the copy carries, held by the lag check: one claimed shorter than drawn
    /// lags longer), by this cap. The two sides' smoothed RTTs differ by a few milliseconds
    /// plus the link's jitter (honest clients at 500 ms: ±5 ms at 20 ms of jitter, ±18 ms at
    /// 60 ms), and the delay moves a little between a shot and its copies; never earlier. A
    /// client claiming a fuller rewind gains at most that slack.
    fn delay_cap(&self) -> Result<f64, Rejection> {
        let link = &self.arrival.link;
        match self.request.delay_cap {
            None => Ok(link.delay_cap),
            Some(cap)
                if cap.is_finite()
                    && cap >= 0.0
                    && link.announced_cap.is_some_and(|most| cap <= most + 1e-6) =>
            {
                Ok(cap)
            }
            Some(_) => Err(Rejection::BadViewTime),
        }
    }

    /// The copy's age after its shot, seconds: at most a few of the client's frames (never
    /// newer than the shot).
    fn copy_age(&self) -> Result<f64, Rejection> {
        let request = self.request;
        let age = request.sent_view_time - request.view_time;
        let allowed = self
            .settings
            .copy_age_allowed(self.arrival.link.recent_client_frame);
        if !(-1e-6..=allowed).contains(&age) {
            return Err(Rejection::BadViewTime);
        }
        Ok(age)
    }

    /// How much later than its view time the shot is judged (its lead, seconds): what the
    /// client owed by the rewind cap `cap`, for the delay the copy carries as it moved over the
    /// copy's `age`. Without rewinding the present is judged, whatever the shot's judged time.
    fn lead(&self, age: f64, cap: f64) -> Result<(), Rejection> {
        let (link, request, settings) = (&self.arrival.link, self.request, self.settings);
        let lead = request.judged_time - request.view_time;
        let lead_slack = LEAD_SLACK + link.jitter;
        // The copy carries the delay when it left; the shot was led by the delay when it was
        // fired, which moved since by no more than the delay may move in the copy's age (a
        // slow client's copy follows its shot by a frame or two: 0.1 s and more with a hitch).
        let (grown, shrunk) = delay_movement(age);
        let owed = |delay: f64| settings.shot_lead(link.rtt, delay, Some(cap));
        let (least, most) = (
            owed(request.sent_delay - grown),
            owed(request.sent_delay + shrunk),
        );
        if settings.rewind && (lead < 0.0 || lead < least - lead_slack || lead > most + lead_slack)
        {
            return Err(Rejection::BadViewTime);
        }
        Ok(())
    }

    /// How much earlier than the shot `claim` may be judged
    /// ([`WireClaim::behind`](crate::WireClaim::behind)), seconds: the delay the server
    /// compensates for its target ([`unlag_net::claim_delay_cap`], for the longest interval it
    /// sent the target to this client at lately, in the spell of the states the claim shows,
    /// never below its update interval's) less the shot's own delay as far as that is
    /// compensated (as short as the copy's delay and the copy's age allow).
    ///
    /// What a client gains by claiming more than it drew is what it gains by reporting a
    /// longer delay than it draws with (the lag check holds the copies to its reports either
    /// way): up to the cap, which the server sets from its own evidence of the link, and for
    /// a slower target up to the more the longer interval it was sent at calls for. A target
    /// sent at the server's rate is drawn with the shot's delay by an honest client, unless it
    /// draws a faster one too (the shot's delay is the shortest), or a loss pattern had it read
    /// the target's rate as slower for a moment: so it is not held to none.
    pub(super) fn most_behind(&self, claim: &crate::WireClaim) -> f64 {
        let (link, request) = (&self.arrival.link, self.request);
        let nominal = link.cap_interval;
        let interval = self
            .sent
            .get(self.link)
            .ok()
            .and_then(|(schedule, log, _)| {
                schedule.longest_sent_interval(claim.target, log, self.tick, claim.from)
            });
        let interval = interval.map_or(nominal, |i| i.max(nominal));
        let cap = self.delay_cap().unwrap_or(link.delay_cap);
        let age = unlag_core::finite_non_negative(request.sent_view_time - request.view_time);
        let (grown, _) = delay_movement(age);
        let shot_delay = unlag_core::finite_non_negative(request.sent_delay - grown).min(cap);
        let claim_cap = unlag_net::claim_delay_cap(cap, interval, nominal, link.cap_frame);
        (claim_cap - shot_delay).max(0.0)
    }

    /// Tighter, and free of the clock estimates: the copy may not arrive later after the view
    /// time it stamps than the client's view reports do (nor ahead of them by more than a
    /// frame or two). A client that has reported for a whole window and no longer does is
    /// dodging the check. The reports are a window's: across a step up in latency their
    /// range trails, and the copy may lag by the rise its link's latest trips show more
    /// ([`RemoteClockAt::trip_rise`](unlag_net::RemoteClockAt::trip_rise)).
    fn view_lag(&self, stats: &mut CombatStats) -> Result<(), Rejection> {
        let (link, request) = (&self.arrival.link, self.request);
        match link.view_lag_range {
            Some((least, most)) => {
                let most = most + link.trip_rise(self.arrival.frame);
                let lag = link.lag_of(
                    self.arrival.time,
                    request.sent_view_time,
                    request.sent_delay,
                );
                keep_latest(&mut stats.view_lag_excess, lag - most);
                if outside_lag_range(self.settings, (least, most), lag) {
                    return Err(Rejection::BadViewTime);
                }
                Ok(())
            }
            None if link.reporting_since_window => Err(Rejection::BadViewTime),
            None => Ok(()),
        }
    }

    /// How much later than the reports' median this copy arrived after the present it stamps,
    /// seconds, less what the link's trips show the reports' median trails by (never below 0
    /// for that; [`RemoteClockAt::trip_rise_over_reports`](unlag_net::RemoteClockAt::trip_rise_over_reports)).
    /// None beyond the reports for one that came with a report stamped as it is. `None`
    /// before the link has a median.
    pub(super) fn drift(&self) -> Option<f64> {
        let (link, request) = (&self.arrival.link, self.request);
        link.view_lag_median.map(|centre| {
            if self.arrival.witnessed {
                0.0
            } else {
                let beyond = link.lag_of(
                    self.arrival.time,
                    request.sent_view_time,
                    request.sent_delay,
                ) - centre;
                beyond.min((beyond - link.trip_rise_over_reports(self.arrival.frame)).max(0.0))
            }
        })
    }
}
