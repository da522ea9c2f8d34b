//! A lean's lift on trial, fed with hit rates that depend on the share.

use super::super::tests::{climb, climb_hinted};
use super::super::*;
use super::*;

#[test]
fn a_lift_whose_samples_fall_below_the_rest_fails_its_trial_and_the_window_closes() {
    // Resting at the smallest window, which is best here (every point of share costs a
    // tenth of a point of hit rate). The lean lifts it, and the hint that recency pays
    // comes right after, as the window's own losers return: the hint's climb takes the
    // window further up before its own refutation turns it, and stepping down would take
    // samples to close it.
    let rate_at = |s: f64| 0.5 - 0.1 * s;
    let mut c = Climber::default();
    climb(&mut c, 20, rate_at);
    assert_eq!(c.share(), MIN_SHARE);
    climb_hinted(&mut c, 1, Recency::Leans, rate_at);
    assert!(c.share() > MIN_SHARE, "the lean lifts");
    // Judged LIFT_TRIAL_SAMPLES samples after the lift: below the rate at rest, so the
    // window closes at once, and the policy is told once.
    let mut shares = Vec::new();
    for _ in 0..LIFT_TRIAL_SAMPLES {
        climb_hinted(&mut c, 1, Recency::Pays, rate_at);
        shares.push(c.share());
    }
    assert!(
        shares[0] > STEP,
        "the hint climbs during the trial: {shares:?}"
    );
    assert_eq!(c.share(), MIN_SHARE, "{shares:?}");
    assert!(c.take_failed_lift());
    assert!(!c.take_failed_lift());
    // Neither the lean nor the hint lifts it again while regret leans or says recency pays
    // (the lean first: its samples end the hint's own refutation, so that the hint's
    // samples after them test the failed lift alone).
    let mut widest = 0.0f64;
    for recency in [Recency::Leans, Recency::Pays] {
        for _ in 0..12 {
            climb_hinted(&mut c, 1, recency, rate_at);
            widest = widest.max(c.share());
        }
    }
    assert_eq!(widest, MIN_SHARE);
    // Once regret no longer leans, a later lean gets a trial of its own; so it does after a
    // restart of the policy.
    climb_hinted(&mut c, 1, Recency::Unproven, rate_at);
    climb_hinted(&mut c, 1, Recency::Leans, rate_at);
    assert!(c.share() > MIN_SHARE, "a new lean lifts again");
    for _ in 0..LIFT_TRIAL_SAMPLES {
        climb_hinted(&mut c, 1, Recency::Pays, rate_at);
    }
    assert!(c.take_failed_lift() && c.share() == MIN_SHARE);
    c.forget_best();
    climb_hinted(&mut c, 1, Recency::Leans, rate_at);
    assert!(
        c.share() > MIN_SHARE,
        "after a restart the lean lifts again"
    );
}

#[test]
fn a_lift_stays_on_trial_while_the_hint_climbs() {
    // A little window pays (the rate peaks at a tenth of the cache), a wider one costs: the
    // lift holds through its first judgement, and the hint's climb takes the window on up
    // until the rate slides below the rest. The window closes at once then, rather than
    // stepping down as the hint's own refutation would turn it. (Judged once only, as
    // before the trial was kept while the hint leads, the window swung round a tenth of
    // the cache for the rest of these samples.)
    let rate_at = peak_at_a_tenth(0.25);
    let lifted_and_judged = |recency: Recency| {
        let mut c = lifted_from_rest(rate_at);
        let mut shares = Vec::new();
        for _ in 0..LIFT_TRIAL_SAMPLES {
            climb_hinted(&mut c, 1, recency, rate_at);
            shares.push(c.share());
        }
        assert!(
            !c.take_failed_lift(),
            "the first judgement passes: {shares:?}"
        );
        (c, shares)
    };
    let (mut c, mut shares) = lifted_and_judged(Recency::Pays);
    for _ in 0..30 {
        climb_hinted(&mut c, 1, Recency::Pays, rate_at);
        shares.push(c.share());
        if c.take_failed_lift() {
            break;
        }
    }
    let widest = shares.iter().copied().fold(0.0, f64::max);
    assert!(widest > 0.3, "the hint climbs past the peak: {shares:?}");
    assert_eq!(c.share(), MIN_SHARE, "closed at once: {shares:?}");
    // Without the hint the trial waits a few samples for it, unjudged, and ends: hill
    // climbing alone turns the window from there, and a slow fall of the whole workload
    // later (a point a sample, under the restart threshold) does not fail the lift against
    // its old rate at rest.
    let (mut c, mut shares) = lifted_and_judged(Recency::Leans);
    a_slow_fall_fails_no_lift(&mut c, Recency::Leans, rate_at, &mut shares);
}

#[test]
fn a_lift_that_passes_while_regret_leans_waits_a_few_samples_for_the_hint() {
    // A little window pays, a wider one costs. The lift passes its first judgement
    // while regret only leans; the hint comes `wait` samples later and climbs past the
    // peak. Within LIFT_TRIAL_DORMANT samples the trial is judged again once the hint leads,
    // and the lift fails (the window closes at once); later than that, the trial is over
    // and the hint's own refutation turns the climb instead, with no lift failed.
    let rate_at = peak_at_a_tenth(0.75);
    let run = |wait: u32| {
        let mut c = lifted_from_rest(rate_at);
        for _ in 0..LIFT_TRIAL_SAMPLES + wait {
            climb_hinted(&mut c, 1, Recency::Leans, rate_at);
            assert!(!c.take_failed_lift(), "passes while regret leans");
        }
        let mut shares = Vec::new();
        for _ in 0..30 {
            climb_hinted(&mut c, 1, Recency::Pays, rate_at);
            shares.push(c.share());
            if c.take_failed_lift() {
                return (true, shares);
            }
        }
        (false, shares)
    };
    let (failed, shares) = run(0);
    assert!(failed, "judged again once the hint leads: {shares:?}");
    let (failed, shares) = run(LIFT_TRIAL_DORMANT);
    assert!(!failed, "the wait is over: {shares:?}");
}

/// A hit rate of 0.5 at the smallest window, rising by 0.05 to a peak at a tenth of the
/// cache, and falling by `cost` per unit of share past it.
fn peak_at_a_tenth(cost: f64) -> impl Fn(f64) -> f64 + Copy {
    move |s: f64| 0.5 + 0.05 * s.min(0.1) / 0.1 - cost * (s - 0.1).max(0.0)
}

/// A climber that rested at the smallest window (a flat rate of 0.5), lifted by a lean.
fn lifted_from_rest(rate_at: impl Fn(f64) -> f64) -> Climber {
    let mut c = Climber::default();
    climb(&mut c, 20, |_| 0.5);
    assert_eq!(c.share(), MIN_SHARE);
    climb_hinted(&mut c, 1, Recency::Leans, rate_at);
    assert!(c.share() > MIN_SHARE, "the lean lifts");
    c
}

/// Runs 30 samples of `recency` at `rate_at` less a point more each sample (a slow fall of
/// the whole workload, under the restart threshold), asserting that no lift fails.
fn a_slow_fall_fails_no_lift(
    c: &mut Climber,
    recency: Recency,
    rate_at: impl Fn(f64) -> f64,
    shares: &mut Vec<f64>,
) {
    let mut fall = 0.0;
    for _ in 0..30 {
        climb_hinted(c, 1, recency, |s| {
            fall += 0.01;
            rate_at(s) - fall
        });
        shares.push(c.share());
        assert!(!c.take_failed_lift(), "a lift failed: {shares:?}");
    }
}

#[test]
fn a_lift_is_off_trial_once_the_climb_refutes_the_hint() {
    // Past a tenth of the cache a wider window costs a little, never enough to fall below
    // the rest: the climb's own samples refute the hint, which regret still gives. The
    // trial ends at the judgement after that, so a slow fall of the whole workload later
    // (a point a sample) fails no lift against the old rate at rest; kept while regret
    // alone says recency pays, it did.
    let rate_at = peak_at_a_tenth(0.1);
    let mut c = lifted_from_rest(rate_at);
    let mut shares = Vec::new();
    for _ in 0..30 {
        climb_hinted(&mut c, 1, Recency::Pays, rate_at);
        shares.push(c.share());
        assert!(!c.take_failed_lift(), "{shares:?}");
        if c.pays_refuted {
            break;
        }
    }
    assert!(c.pays_refuted, "the climb refutes the hint: {shares:?}");
    a_slow_fall_fails_no_lift(&mut c, Recency::Pays, rate_at, &mut shares);
}

#[test]
fn only_a_leans_lift_is_on_trial() {
    // Lifted by the hint itself (the bias said recency pays before the window opened), the
    // climb is the hint's to lead and its own refutation's to end: no trial closes it.
    let rate_at = |s: f64| 0.5 - 0.1 * s;
    let mut c = Climber::default();
    climb(&mut c, 20, rate_at);
    climb_hinted(&mut c, 1, Recency::Pays, rate_at);
    assert!(c.share() > MIN_SHARE, "the hint lifts");
    for _ in 0..LIFT_TRIAL_SAMPLES {
        climb_hinted(&mut c, 1, Recency::Pays, rate_at);
    }
    assert!(!c.take_failed_lift());
    assert!(c.share() > MIN_SHARE, "{}", c.share());
}

#[test]
fn a_lift_whose_samples_rise_above_the_rest_passes_its_trial() {
    // Here the window pays (best from half the cache up): the hint's climb stands above the
    // rate at rest, so the trial lets it go on.
    let rate_at = |s: f64| 0.5 + 0.2 * s.min(0.5);
    let mut c = Climber::default();
    climb(&mut c, 20, |_| 0.5);
    climb_hinted(&mut c, 1, Recency::Leans, rate_at);
    climb_hinted(&mut c, 10, Recency::Pays, rate_at);
    assert!(c.share() > 0.3, "{}", c.share());
    assert!(!c.take_failed_lift());
}
