//! A lean's lift of a closed window on trial ([`LiftTrial`]): judged by the climber's own
//! samples, and taken back at once when they stand below the rate at rest.

use super::{Climber, Recency, MIN_SHARE, STEP};

/// Samples after a lean's lift until its trial is first judged ([`LiftTrial`]). The first one
/// after the lift pays for the move itself; 2 and 4 kept less of the trial's gain on the
/// drifts at 500-700 entries (docs/memory-tier.md, *A lift on trial*; measured while a
/// trial was judged once only).
pub(super) const LIFT_TRIAL_SAMPLES: u32 = 3;
/// Samples a lift that passed a judgement while the hint did not lead the climb stays on
/// trial, waiting for the hint to lead ([`LiftTrial`]). Ended there (0), a lift that held
/// while regret only leaned left the hint it then raised to walk the window to all the
/// cache while the hit rate fell by 3-4 points (the policy test
/// `a_lift_that_lowers_a_drifts_hit_rate_is_taken_back`, once dead favourites left sooner:
/// `super::idle`); 4 and 8 measured alike on `phase_eval`. Short, so that the rate at rest
/// is still the workload's when the trial is judged again.
pub(super) const LIFT_TRIAL_DORMANT: u32 = 4;

/// A lean's lift off the smallest window, on trial. Once the window opens, the contests'
/// candidates are entries that were just requested, their losers come back, and admission
/// regret's bias rises to the hint that recency pays: the hint then fed on the window the lift
/// had opened, and where a closed window was best (a drift at 400-700 entries) the climb walked
/// to all the cache while the hit rate fell by 2-4 points. So the lift is judged by the
/// climber's own samples: [`LIFT_TRIAL_SAMPLES`] after it, and at every sample after that while
/// the hint, unrefuted, leads the climb of an open window (a judgement passed while the hint
/// did not lead, unless the climb has refuted the hint, waits up to [`LIFT_TRIAL_DORMANT`]
/// samples for it), the mean rate of the last two must not stand below the rate at rest by more
/// than the reversal band. Judged once only, a lift that held for its first samples left the
/// hint free to walk the window on up while the rate slid below the rest (docs/memory-tier.md,
/// *A lift watched while the hint climbs*).
#[derive(Clone, Copy, Debug)]
pub(super) struct LiftTrial {
    /// The mean hit rate of the last two samples at rest.
    pub(super) rest: f64,
    /// Samples since the lift, up to [`LIFT_TRIAL_SAMPLES`] (judged at every sample from
    /// then on while the hint leads the climb of an open window).
    pub(super) samples: u32,
    /// The last sample's hit rate.
    pub(super) last: f64,
    /// 0, or 1 once a judgement passed while the hint did not lead the climb, plus the
    /// samples waited since: the trial waits up to [`LIFT_TRIAL_DORMANT`] samples for the
    /// hint to lead.
    pub(super) dormant: u32,
}

impl Climber {
    /// Counts a sample of a lean's lift on trial ([`LiftTrial`]) that came in at `rate`, and
    /// judges it at the [`LIFT_TRIAL_SAMPLES`]th, and at every sample after a judgement made at
    /// an open window whose last step the hint led (`recency` pays and the climb's samples have
    /// not refuted it: [`Climber::pays`]): if the mean of the last two samples stands below the
    /// rate at rest by more than `reverse_at` (the band a fall must leave to turn the climb),
    /// the window closes at once, and neither the lean nor the hint lifts it again until a
    /// restart (the climber's, or the policy's: [`Climber::forget_best`]) or until recency is
    /// [`Recency::Unproven`]. Stepping down instead, the window stood open for a few samples
    /// more and the hint, still fed by its losers, climbed again (drift with Zipf 0.9 at 700
    /// entries 0.9905 of the best peer's hits rather than 0.9934). A judgement passed while the
    /// hint did not lead (unless the climb has refuted the hint) waits, unjudged, up to
    /// [`LIFT_TRIAL_DORMANT`] samples for the hint to lead, and is judged again then. Any other
    /// judgement is the trial's last (the lift may still fail it): the climb is the samples'
    /// own then, and a rate at rest taken long ago would fail a lift for a slow fall of the
    /// whole workload (kept while regret alone said recency pays, refuted or not, a simulation
    /// of the climber failed a paying lift 50-200 samples on, at a fall of a tenth of a point a
    /// sample).
    pub(super) fn judge_lift(&mut self, rate: f64, reverse_at: f64, recency: Recency) {
        let Some(trial) = &mut self.trial else { return };
        trial.samples = (trial.samples + 1).min(LIFT_TRIAL_SAMPLES);
        let last = std::mem::replace(&mut trial.last, rate);
        if trial.samples < LIFT_TRIAL_SAMPLES {
            return;
        }
        // `paid`: the hint, unrefuted, led the last sample's climb.
        let hint_leads = recency == Recency::Pays && self.paid;
        if trial.dormant > 0 {
            if !hint_leads {
                // Still waiting for the hint: over once it waited long enough, once the
                // climb refuted the hint, or once the window is closed again.
                trial.dormant += 1;
                if trial.dormant > LIFT_TRIAL_DORMANT
                    || self.pays_refuted
                    || self.share <= MIN_SHARE
                {
                    self.trial = None;
                }
                return;
            }
            trial.dormant = 0;
        }
        let failed = (rate + last) / 2.0 < trial.rest - reverse_at;
        if failed || self.share <= MIN_SHARE || (!hint_leads && self.pays_refuted) {
            // Failed; or passed, and the climb is the samples' own to lead from here (closed
            // again, or a refuted hint to walk it on up): the trial is over.
            self.trial = None;
        } else if !hint_leads {
            // Passed with no hint leading the climb: the hint the window's losers may yet
            // raise is what the trial is for, so it waits for it.
            trial.dormant = 1;
        }
        if failed {
            self.lift_refuted = true;
            self.lift_failed = true;
            self.close();
            self.step = -STEP;
        }
    }
}

#[cfg(test)]
mod tests;
