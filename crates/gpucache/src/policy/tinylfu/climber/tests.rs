//! Hill climbing's rules, fed with hit rates that depend on the share.

use super::parts::PartSpread;
use super::*;

/// Feeds samples whose hit rate `rate_at(share)` depends on the share.
pub(super) fn climb(c: &mut Climber, samples: usize, rate_at: impl FnMut(f64) -> f64) {
    climb_hinted(c, samples, Recency::Unproven, rate_at);
}

/// [`climb`], with admission regret's hint `recency`; returns the restarts.
pub(super) fn climb_hinted(
    c: &mut Climber,
    samples: usize,
    recency: Recency,
    mut rate_at: impl FnMut(f64) -> f64,
) -> usize {
    let mut restarts = 0;
    // Hits and misses interleaved in chunks, as the policy hands them over (a sample's
    // hits all at once would make its parts all hits, then all misses).
    const CHUNK: u64 = 100;
    for _ in 0..samples {
        let rate = rate_at(c.share());
        let hits_by = |requests: u64| (rate * requests as f64).round() as u64;
        for i in 0..MIN_SAMPLE / CHUNK {
            let hits = hits_by((i + 1) * CHUNK) - hits_by(i * CHUNK);
            restarts += usize::from(c.record(hits, CHUNK - hits, MIN_SAMPLE, recency));
        }
        c.validate();
    }
    restarts
}

#[test]
fn the_recency_hint_lifts_a_climber_resting_at_the_smallest_window() {
    // A flat hit rate turns nothing: the climb walks down to a zero window and rests.
    let mut rested = Climber::default();
    climb(&mut rested, 20, |_| 0.5);
    assert_eq!(rested.share(), MIN_SHARE);
    // Then recency starts to pay (best at half the cache). Without the hint the share
    // stands still, so the hit rate never falls and nothing turns the climb round.
    let mut stuck = Climber::default();
    climb(&mut stuck, 20, |_| 0.5);
    climb(&mut stuck, 40, |s| 0.9 - (s - 0.5).abs());
    assert_eq!(stuck.share(), MIN_SHARE);
    // With the hint it leaves the bound and climbs, past the best share (falls within
    // twice the reversal band do not turn it); beyond, the climb's clear fall from its
    // best refutes the hint, and hill climbing brings it back near the best.
    let mut highest = 0.0f64;
    for _ in 0..60 {
        climb_hinted(&mut rested, 1, Recency::Pays, |s| 0.9 - (s - 0.5).abs());
        highest = highest.max(rested.share());
    }
    assert!(highest > 0.55, "climbed to {highest}");
    assert!((rested.share() - 0.5).abs() < 0.1, "{}", rested.share());
    // Without the refutation the hint held it at the largest window.
    assert!(rested.pays_refuted);
}

/// A climber the hint took from rest to the largest window, where the rate is a little
/// higher (a point more at the top than at the bottom).
fn hinted_to_the_top() -> Climber {
    let mut c = Climber::default();
    climb(&mut c, 20, |_| 0.5);
    climb_hinted(&mut c, 40, Recency::Pays, |s| 0.5 + 0.01 * s);
    assert_eq!(c.share(), MAX_SHARE);
    c
}

#[test]
fn the_hint_holds_the_climb_up_where_the_rate_does_not_fall_clearly() {
    // Recency pays and a larger window is a little better or no worse: the hint takes the
    // share to the largest window, and nothing refutes it.
    let mut c = hinted_to_the_top();
    climb_hinted(&mut c, 40, Recency::Pays, |s| 0.5 + 0.01 * s);
    assert_eq!(c.share(), MAX_SHARE);
    assert!(!c.pays_refuted);
}

#[test]
fn a_clear_fall_at_the_largest_window_refutes_the_hint() {
    // The hint held the share at the largest window; then the rate there slides, a third of
    // a point a sample (no restart). The share stands still at the bound, yet the fall from
    // the climb's best refutes the hint there too, and the climb comes down. (Counted only
    // while the share moved, the hint held it at the bound for as long as it lasted.)
    let mut c = hinted_to_the_top();
    let (mut slide, mut lowest, mut restarts) = (0.0, MAX_SHARE, 0);
    for _ in 0..20 {
        restarts += climb_hinted(&mut c, 1, Recency::Pays, |s| {
            slide += 0.003;
            0.5 + 0.01 * s - slide
        });
        lowest = lowest.min(c.share());
    }
    assert_eq!(restarts, 0);
    assert!(c.pays_refuted);
    assert!(lowest < MAX_SHARE - 0.05, "{lowest}");
}

#[test]
fn one_sample_below_the_best_is_a_swing_two_refute_the_hint() {
    // Held at the largest window by the hint, at 51%. One sample three points down, then
    // back: a swing, and the hint holds.
    let mut c = hinted_to_the_top();
    climb_hinted(&mut c, 1, Recency::Pays, |_| 0.48);
    assert!(!c.pays_refuted);
    climb_hinted(&mut c, 1, Recency::Pays, |s| 0.5 + 0.01 * s);
    assert!(!c.pays_refuted);
    assert_eq!(c.share(), MAX_SHARE);
    // Two in a row refute it, and the climb comes down.
    assert_eq!(climb_hinted(&mut c, 2, Recency::Pays, |_| 0.48), 0);
    assert!(c.pays_refuted);
    assert!(c.share() < MAX_SHARE, "{}", c.share());
}

#[test]
fn a_climb_the_hint_drove_heads_down_once_it_ends() {
    // The hint took the share part of the way up on a flat rate; once it ends, the share
    // it reached is no finding of the climb's: the climb turns down at once, and on a flat
    // rate walks down. (Left climbing, it walked on up on falls within the band.)
    let mut c = Climber::default();
    climb(&mut c, 20, |_| 0.5);
    climb_hinted(&mut c, 3, Recency::Pays, |_| 0.5);
    let top = c.share();
    assert!(top > 0.2 && top < MAX_SHARE, "{top}");
    climb(&mut c, 1, |_| 0.5);
    assert!(c.share() < top, "{} after {top}", c.share());
    climb(&mut c, 5, |_| 0.5);
    assert!(c.share() < top - 0.1, "{} after {top}", c.share());
}

#[test]
fn a_lean_to_recency_tries_a_larger_window_and_the_climb_decides() {
    // Resting at the smallest window where a larger one pays (best at half the cache):
    // the lean lifts it, and hill climbing, not the hint, takes it to the best share.
    let mut lifted = Climber::default();
    climb(&mut lifted, 20, |_| 0.5);
    assert_eq!(lifted.share(), MIN_SHARE);
    climb_hinted(&mut lifted, 60, Recency::Leans, |s| 0.9 - (s - 0.5).abs());
    assert!((lifted.share() - 0.5).abs() < 0.15, "{}", lifted.share());
    // Where the smallest window is best, the lift is turned back by the fall it causes:
    // the share stays near the bound rather than climbing, and that fall (a step's worth,
    // beyond the restart threshold of a steady rate) is not taken for a new workload.
    let mut tried = Climber::default();
    climb(&mut tried, 20, |_| 0.5);
    let (mut highest, mut restarts, mut lifts) = (0.0f64, 0, 0);
    for _ in 0..60 {
        let before = tried.share();
        restarts += climb_hinted(&mut tried, 1, Recency::Leans, |s| 0.6 - s);
        lifts += usize::from(before <= MIN_SHARE && tried.share() > MIN_SHARE);
        highest = highest.max(tried.share());
    }
    assert!(highest <= STEP + 1e-9, "climbed to {highest}");
    assert!(lifts > 1, "the lean tries again at each rest: {lifts}");
    assert_eq!(restarts, 0);
}

#[test]
fn a_climber_resting_at_the_largest_window_comes_down_without_the_hint() {
    let mut c = Climber::default();
    climb_hinted(&mut c, 20, Recency::Unproven, |_| 0.5);
    climb_hinted(&mut c, 40, Recency::Pays, |_| 0.5);
    assert_eq!(c.share(), MAX_SHARE);
    // Recency no longer pays, and a small window is best (a loop after the drift).
    climb(&mut c, 60, |s| 0.6 - s / 2.0);
    assert!(c.share() < 0.1, "{}", c.share());
}

#[test]
fn climbs_towards_the_best_share() {
    let mut c = Climber::default();
    // Best at 40%: a recency-heavy workload.
    climb(&mut c, 200, |s| 0.9 - (s - 0.4).abs());
    assert!((c.share() - 0.4).abs() < 0.1, "{}", c.share());
}

#[test]
fn falls_back_to_a_small_window() {
    let mut c = Climber::default();
    climb(&mut c, 30, |s| 0.9 - (s - 0.5).abs());
    assert!(c.share() > 0.2, "{}", c.share());
    // The workload changes: now a small window is best (a loop).
    climb(&mut c, 300, |s| 0.9 - s);
    assert!(c.share() < 0.05, "{}", c.share());
}

#[test]
fn share_stays_in_bounds() {
    let mut c = Climber::default();
    climb(&mut c, 200, |s| s);
    assert!(c.share() <= MAX_SHARE);
    climb(&mut c, 400, |s| 1.0 - s);
    assert!(c.share() >= MIN_SHARE);
}

#[test]
fn periodic_swings_do_not_restart_but_a_new_workload_does() {
    let mut c = Climber::default();
    // A loop a few times the cache: best at zero, and the sample's hit rate swings by
    // six points with where its boundaries fall, whatever the share (more than the
    // fixed threshold).
    let mut flip = false;
    climb(&mut c, 60, |s| {
        flip = !flip;
        0.35 - s + if flip { 0.03 } else { -0.03 }
    });
    assert!(c.share() < 0.02, "{}", c.share());
    // Swings keep coming but read as noise: no restart moves the share away.
    let mut restarts = 0;
    for i in 0..40 {
        let rate = 0.35 - c.share() + if i % 2 == 0 { 0.03 } else { -0.03 };
        let hits = (rate * MIN_SAMPLE as f64).round() as u64;
        restarts += usize::from(c.record(hits, MIN_SAMPLE - hits, MIN_SAMPLE, Recency::Unproven));
    }
    assert_eq!(restarts, 0);
    assert!(c.share() < 0.02, "{}", c.share());
    // The workload changes: the hit rate falls by a third.
    let hits = (0.12 * MIN_SAMPLE as f64) as u64;
    assert!(c.record(hits, MIN_SAMPLE - hits, MIN_SAMPLE, Recency::Unproven));
    c.validate();
}

/// A climber whose last step moved the share up (to 0.3) from a sample at hit rate 0.5,
/// with samples swinging by about two points.
fn climbing() -> Climber {
    Climber {
        share: 0.3,
        fraction: fraction_of(0.3),
        step: 0.05,
        previous_rate: Some(0.5),
        moved: true,
        noise: 0.02,
        ..Climber::default()
    }
}

#[test]
fn only_a_fall_beyond_the_usual_swing_reverses() {
    let mut c = climbing();
    let sample = |c: &mut Climber, rate: f64| {
        let hits = (rate * MIN_SAMPLE as f64).round() as u64;
        assert!(!c.record(hits, MIN_SAMPLE - hits, MIN_SAMPLE, Recency::Unproven));
        c.validate();
    };
    // A third of a point lower: within the swing, the climb goes on.
    sample(&mut c, 0.497);
    assert!(c.share() > 0.3, "{}", c.share());
    // Three points lower: beyond it, the step turns round.
    let before = c.share();
    sample(&mut c, 0.465);
    assert!(c.share() < before, "{} -> {}", before, c.share());
}

/// One sample of [`MIN_SAMPLE`] requests, part by part at the given hit rates, in chunks
/// as the policy hands them over; returns whether it restarted the climb.
fn sample_parts(c: &mut Climber, part_rates: [f64; 4]) -> bool {
    sample_parts_hinted(c, part_rates, Recency::Unproven)
}

/// [`sample_parts`], with admission regret's hint `recency`.
fn sample_parts_hinted(c: &mut Climber, part_rates: [f64; 4], recency: Recency) -> bool {
    const CHUNK: u64 = 250;
    let part = part_of(MIN_SAMPLE);
    let mut restarted = false;
    for rate in part_rates {
        let hits = (rate * CHUNK as f64).round() as u64;
        for _ in 0..part / CHUNK {
            restarted |= c.record(hits, CHUNK - hits, MIN_SAMPLE, recency);
        }
    }
    c.validate();
    restarted
}

#[test]
fn the_error_comes_from_changes_between_consecutive_parts() {
    let error = |rates: &[f64]| {
        let mut s = PartSpread::default();
        rates.iter().for_each(|&r| s.add(r));
        s.standard_error()
    };
    assert_eq!(error(&[]), 0.0);
    assert_eq!(error(&[0.7]), 0.0);
    assert_eq!(error(&[0.5; 4]), 0.0);
    // Swinging by 0.4 from part to part: variance 3 * 0.16 / (2 * 3), over 4 parts.
    assert!((error(&[0.2, 0.6, 0.2, 0.6]) - 0.02f64.sqrt()).abs() < 1e-12);
    // The same rates as one step: a third of the squared changes, well under the spread
    // about their mean (whose error would be 0.115).
    assert!((error(&[0.2, 0.2, 0.6, 0.6]) - (0.16f64 / 24.0).sqrt()).abs() < 1e-12);
}

#[test]
fn the_last_part_of_a_sample_counts_in_its_error() {
    // The sample ends on its fourth part's last request; that part, the only one that
    // differs, still makes the error (3 changes of 0, 0 and 0.4, over 4 parts).
    let mut c = climbing();
    assert!(!sample_parts(&mut c, [0.5, 0.5, 0.5, 0.9]));
    assert!(
        (c.last_error - (0.16f64 / 24.0).sqrt()).abs() < 1e-9,
        "{}",
        c.last_error
    );
}

#[test]
fn a_fall_within_the_swing_between_parts_does_not_reverse() {
    // Climbing; a sample 3.6 points lower, beyond the usual change (0.3 of 2 points).
    // Its parts swing by 7.2 points, as scans between popular requests make them: the
    // error of the sample's rate is 2.5 points, the fall within two errors of the
    // difference, and the climb goes on.
    let mut swinging = climbing();
    assert!(!sample_parts(&mut swinging, [0.428, 0.5, 0.428, 0.5]));
    assert!(swinging.share() > 0.3, "{}", swinging.share());
    // Swinging by 3.2 points (an error of 1.1), the same fall turns the step round; so it
    // does with steady parts.
    let mut swinging_less = climbing();
    assert!(!sample_parts(
        &mut swinging_less,
        [0.448, 0.48, 0.448, 0.48]
    ));
    assert!(swinging_less.share() < 0.3, "{}", swinging_less.share());
    let mut steady = climbing();
    assert!(!sample_parts(&mut steady, [0.464; 4]));
    assert!(steady.share() < 0.3, "{}", steady.share());
}

#[test]
fn a_string_of_falls_within_the_swing_turns_the_climb() {
    // Climbing from 50%; each sample 1.5 points below the last, its parts swinging by 3.2
    // points (an error of 1.1): each fall is within two errors of the difference (2.3, then
    // 3.2 points), but the third sample stands 4.5 points below the climb's best, beyond
    // them: the climb is past its peak, and turns.
    let mut c = climbing();
    let swinging = |rate: f64| [rate - 0.016, rate + 0.016, rate - 0.016, rate + 0.016];
    assert!(!sample_parts(&mut c, swinging(0.485)));
    assert!(!sample_parts(&mut c, swinging(0.47)));
    let before = c.share();
    assert!(before > 0.39, "the climb went on: {before}");
    assert!(!sample_parts(&mut c, swinging(0.455)));
    assert!(c.share() < before, "{before} -> {}", c.share());
    // A rise between falls is a new best: measured from it, the same falls go on climbing.
    let mut rising = climbing();
    for rate in [0.485, 0.51, 0.495, 0.52] {
        assert!(!sample_parts(&mut rising, swinging(rate)));
    }
    assert!(rising.share() > 0.45, "{}", rising.share());
}

#[test]
fn a_climb_the_samples_cannot_measure_slows_down() {
    // Climbing, with samples that usually change by a point; then samples whose parts swing
    // by 40 points (an error band of 28 points) and whose rate does not change. The step
    // goes on, but halves each time instead of shrinking by 2%.
    let mut c = Climber {
        noise: 0.01,
        ..climbing()
    };
    assert!(!sample_parts(&mut c, [0.3, 0.7, 0.3, 0.7]));
    assert!((c.share() - 0.325).abs() < 1e-9, "{}", c.share());
    assert!(!sample_parts(&mut c, [0.3, 0.7, 0.3, 0.7]));
    assert!((c.share() - 0.3375).abs() < 1e-9, "{}", c.share());
    // Steady parts measure: the same unchanged rate keeps the step's size.
    let mut steady = Climber {
        noise: 0.01,
        ..climbing()
    };
    assert!(!sample_parts(&mut steady, [0.5; 4]));
    assert!((steady.share() - 0.3 - 0.05 * STEP_DECAY).abs() < 1e-9);
}

#[test]
fn an_open_window_heads_down_in_full_steps_once_regret_stops_leaning() {
    // At rest at 94% of the cache (a spent step) while regret leaned; then regret says
    // nothing of recency, on samples whose parts swing by 40 points (no step measurable)
    // at an unchanged rate. The climb heads down with a full step and keeps its size, less
    // 2% a sample, instead of halving to a rest; a clear fall turns it, and the samples
    // decide from there.
    let at_rest = || Climber {
        share: 0.94,
        fraction: fraction_of(0.94),
        step: MIN_STEP / 2.0,
        previous_rate: Some(0.5),
        noise: 0.01,
        last_recency: Recency::Leans,
        ..Climber::default()
    };
    let swinging = [0.3, 0.7, 0.3, 0.7];
    let mut leaning = at_rest();
    assert!(!sample_parts_hinted(&mut leaning, swinging, Recency::Leans));
    assert_eq!(leaning.share(), 0.94);
    let mut c = at_rest();
    let (mut expected, mut step) = (0.94, STEP);
    for _ in 0..3 {
        assert!(!sample_parts(&mut c, swinging));
        expected -= step;
        step *= STEP_DECAY;
        assert!(
            (c.share() - expected).abs() < 1e-9,
            "{} against {expected}",
            c.share()
        );
    }
    assert!(c.unwinding);
    // Steady parts (no error), then a fall of 3 points: beyond the band, short of a
    // restart.
    assert!(!sample_parts(&mut c, [0.5; 4]));
    let lowest = c.share();
    assert!(!sample_parts(&mut c, [0.47; 4]));
    assert!(c.share() > lowest, "{} after {lowest}", c.share());
    assert!(!c.unwinding);
}

#[test]
fn a_climb_the_hint_drives_keeps_its_step_where_the_samples_cannot_measure_it() {
    // The samples of the test above, while recency pays: the hint sets the direction, so
    // the step shrinks by 2% a sample, not by half (halving stalled a drifting set's climb
    // at half the cache, short of the window it wanted). Each sample a little lower than
    // the last, within the error: no speed-up either.
    let mut c = Climber {
        noise: 0.01,
        ..climbing()
    };
    let mut step = 0.05;
    for fall in [0.002, 0.004, 0.006] {
        let before = c.share();
        assert!(!sample_parts_hinted(
            &mut c,
            [0.3 - fall, 0.7 - fall, 0.3 - fall, 0.7 - fall],
            Recency::Pays
        ));
        step *= STEP_DECAY;
        assert!((c.share() - before - step).abs() < 1e-9, "{}", c.share());
    }
}

#[test]
fn a_climb_the_hint_leads_speeds_up_while_the_rate_holds() {
    // Climbing under the hint on a flat rate: the first sample keeps the step (less its
    // usual 2%), each next one that holds doubles it.
    let mut c = climbing();
    let mut step = 0.05;
    for i in 0..3 {
        let before = c.share();
        assert!(!sample_parts_hinted(&mut c, [0.5; 4], Recency::Pays));
        step *= STEP_DECAY;
        if i > 0 {
            step *= 2.0;
        }
        assert!(
            (c.share() - before - step).abs() < 1e-9,
            "sample {i}: {}",
            c.share()
        );
    }
    // Up to four full steps.
    let mut c = Climber {
        share: 0.1,
        fraction: fraction_of(0.1),
        step: 0.2,
        ..climbing()
    };
    sample_parts_hinted(&mut c, [0.5; 4], Recency::Pays);
    let before = c.share();
    sample_parts_hinted(&mut c, [0.5; 4], Recency::Pays);
    assert!(
        (c.share() - before - MAX_HINTED_STEP).abs() < 1e-9,
        "{}",
        c.share()
    );
    // A sample a point lower, within a usual swing of five points (the climb goes on and
    // the hint holds), stops the speed-up: that sample and the next move by the step less
    // its usual 2%, and only a second sample that holds doubles it again.
    let mut c = Climber {
        noise: 0.05,
        ..climbing()
    };
    sample_parts_hinted(&mut c, [0.5; 4], Recency::Pays);
    let mut step = 0.05 * STEP_DECAY;
    for (rate, doubles) in [(0.49, false), (0.49, false), (0.49, true)] {
        let before = c.share();
        sample_parts_hinted(&mut c, [rate; 4], Recency::Pays);
        assert!(!c.pays_refuted);
        step *= STEP_DECAY;
        if doubles {
            step *= 2.0;
        }
        assert!(
            (c.share() - before - step).abs() < 1e-9,
            "{} -> {}",
            before,
            c.share()
        );
    }
    // Without the hint the same flat samples only shrink the step.
    let mut plain = climbing();
    for _ in 0..3 {
        sample_parts(&mut plain, [0.5; 4]);
    }
    assert!(plain.share() < 0.3 + 3.0 * 0.05, "{}", plain.share());
}

#[test]
fn a_restart_keeps_its_direction_whatever_its_parts_spread() {
    // A climber whose last step moved the share, at 0.8 hits; then the workload changes in
    // the last part of a sample. The parts spread by the change itself (an error of 16
    // points), which is no swing of the rate: the sample carries no error. The fall is the
    // new workload's doing, not the step's: the climb keeps its direction, with a full step.
    let mut c = Climber {
        previous_rate: Some(0.8),
        noise: 0.01,
        ..climbing()
    };
    let before = c.share();
    assert!(sample_parts(&mut c, [0.9, 0.9, 0.9, 0.1]));
    assert!((c.share() - (before + STEP)).abs() < 1e-9, "{}", c.share());
    assert_eq!(c.last_error, 0.0);
}

#[test]
fn the_warm_up_is_no_swing() {
    // The first sample's parts rise as the cache warms; the first step closes the window.
    let mut c = Climber::default();
    assert!(!sample_parts(&mut c, [0.0, 0.2, 0.4, 0.6]));
    assert_eq!(c.share(), MIN_SHARE);
    // Five points lower, steady: the rise before was no error of the rates, and the fall
    // turns the climb up.
    assert!(!sample_parts(&mut c, [0.25; 4]));
    assert!(c.share() > MIN_SHARE, "{}", c.share());
}

/// One sample at hit rate `rate`; returns whether it restarted the climb.
fn sample(c: &mut Climber, rate: f64) -> bool {
    let hits = (rate * MIN_SAMPLE as f64).round() as u64;
    let restarted = c.record(hits, MIN_SAMPLE - hits, MIN_SAMPLE, Recency::Unproven);
    c.validate();
    restarted
}

#[test]
fn the_climb_back_after_a_change_does_not_hide_the_next() {
    // A phase cycle at 1,000 entries, as the climber saw it: steady near 46%, the
    // popular set switches (a fall of 20 points), the hit rate climbs back over three
    // samples, and the set switches back, spread over two samples.
    let mut c = Climber::default();
    for rate in [0.43, 0.46, 0.46, 0.461] {
        assert!(!sample(&mut c, rate));
    }
    let calm = c.noise;
    assert!(sample(&mut c, 0.26));
    for rate in [0.33, 0.42, 0.46] {
        assert!(!sample(&mut c, rate));
    }
    assert!(c.noise <= calm + 1e-9, "{calm} -> {}", c.noise);
    // Learnt as swings, those changes would have raised the threshold above 9 points.
    assert!(sample(&mut c, 0.367));
}

/// A climber at `share` whose last step was `step` (`moved`: whether it moved the share),
/// after a sample at a 60% hit rate, with a usual change of one point.
fn before_a_change(share: f64, step: f64, moved: bool) -> Climber {
    Climber {
        share,
        fraction: fraction_of(share),
        step,
        previous_rate: Some(0.6),
        moved,
        noise: 0.01,
        ..Climber::default()
    }
}

#[test]
fn a_restart_at_the_small_end_keeps_the_window_shut() {
    // Resting at the bound, shrinking: a new workload's fall restarts the climb with a
    // full step, but the last step did not move the share, so the direction stays.
    let mut c = before_a_change(MIN_SHARE, -0.01, false);
    assert!(sample(&mut c, 0.3));
    assert_eq!(c.share(), MIN_SHARE);
    assert_eq!(c.step, -STEP);
    // Climbing when the workload changes: the fall is the workload's, not the step's, so
    // the climb goes on with a full step. (Turned round, a climb that had just closed the
    // window from 1% opened it again on every change of working set.)
    let mut c = before_a_change(0.3, 0.01, true);
    assert!(sample(&mut c, 0.3));
    assert!((c.share() - (0.3 + STEP)).abs() < 1e-9, "{}", c.share());
    let mut c = before_a_change(0.01, -0.01, true);
    assert!(sample(&mut c, 0.3));
    assert_eq!(c.share(), MIN_SHARE);
}

#[test]
fn a_fall_undone_at_once_is_learnt_as_a_swing() {
    let mut c = Climber::default();
    for rate in [0.45, 0.45, 0.45, 0.45] {
        assert!(!sample(&mut c, rate));
    }
    let calm = c.noise;
    assert!(sample(&mut c, 0.33));
    assert!(c.recovery.is_some());
    assert!(!sample(&mut c, 0.46));
    assert!(c.recovery.is_none());
    assert!(c.noise > calm + 0.015, "{calm} -> {}", c.noise);
    // So is a climb that turns down before it gets back.
    let mut c = Climber::default();
    for rate in [0.45, 0.45, 0.45, 0.45] {
        assert!(!sample(&mut c, rate));
    }
    assert!(sample(&mut c, 0.33));
    assert!(!sample(&mut c, 0.37));
    assert!(!sample(&mut c, 0.36));
    assert!(c.recovery.is_none());
    assert!(c.noise > calm + 0.01, "{calm} -> {}", c.noise);
}

#[test]
fn noise_at_a_bound_does_not_walk_the_share_away() {
    let mut c = Climber::default();
    // Best at zero, with noise of +-2 points alternating.
    let mut flip = false;
    climb(&mut c, 300, |s| {
        flip = !flip;
        0.5 - s + if flip { 0.02 } else { -0.02 }
    });
    assert!(c.share() < 0.01, "{}", c.share());
}

/// Feeds `requests` requests at hit rate `rate`, in chunks as the policy hands them over,
/// to a climber whose sample is `sample`; returns the number of restarts.
fn feed(c: &mut Climber, requests: u64, rate: f64, sample: u64) -> usize {
    let mut restarts = 0;
    let chunk = 500;
    for _ in 0..requests / chunk {
        let hits = (rate * chunk as f64).round() as u64;
        restarts += usize::from(c.record(hits, chunk - hits, sample, Recency::Unproven));
        c.validate();
    }
    restarts
}

/// [`feed`]s `parts` parts ([`part_of`] `sample`) of requests.
fn parts(c: &mut Climber, parts: u64, rate: f64, sample: u64) -> usize {
    feed(c, parts * part_of(sample), rate, sample)
}

#[test]
fn a_long_sample_ends_early_on_a_sustained_fall() {
    // 5,000 entries: samples of 50,000 requests, ten parts.
    let sample = 50_000;
    let mut c = Climber::default();
    assert_eq!(parts(&mut c, 20, 0.5, sample), 0);
    // The workload changes: two parts below every part of the last sample restart the
    // climb, long before the sample's end.
    assert_eq!(parts(&mut c, 1, 0.15, sample), 0);
    assert_eq!(parts(&mut c, 1, 0.15, sample), 1);
    assert!(c.recovery.is_some());
    // A part's fall alone does not.
    let mut c = Climber::default();
    assert_eq!(parts(&mut c, 20, 0.5, sample), 0);
    assert_eq!(parts(&mut c, 1, 0.15, sample), 0);
    assert_eq!(parts(&mut c, 9, 0.5, sample), 0);
    // A loop a few times the cache swings part by part between most hits and few; its
    // low parts recur in every sample, so they read as no change.
    let mut c = Climber::default();
    for _ in 0..20 {
        for rate in [0.9, 0.1, 0.1, 0.1, 0.5] {
            assert_eq!(parts(&mut c, 1, rate, sample), 0);
        }
    }
}

#[test]
fn a_sample_of_ten_thousand_is_watched_in_parts() {
    // 1,000 entries: samples of 10,000 requests, four parts of 2,500. A change of
    // workload at a sample's start restarts after two parts, half way through the
    // sample, rather than at its end (counted in requests, not parts, so that the test
    // does not follow part_of).
    let sample = 10_000;
    let mut c = Climber::default();
    assert_eq!(feed(&mut c, 2 * sample, 0.6, sample), 0);
    assert_eq!(feed(&mut c, sample / 2, 0.2, sample), 1);
    assert!(c.recovery.is_some());
    // A change a quarter into a sample still ends it early (its second and third parts).
    let mut c = Climber::default();
    assert_eq!(feed(&mut c, 2 * sample + sample / 4, 0.6, sample), 0);
    assert_eq!(feed(&mut c, sample / 2, 0.2, sample), 1);
    // Parts stay within their bounds.
    assert_eq!(part_of(40_000), 10_000_u64.min(MAX_PART));
    assert_eq!(part_of(1_000_000), MAX_PART);
}

#[test]
fn the_fill_is_no_baseline_for_a_fall() {
    // The cold cache's first part is its sample's lowest. Forgotten once the cache is
    // full, it no longer hides a change of workload in the next sample; kept, it does.
    let sample = 50_000;
    for forget_fill in [true, false] {
        let mut c = Climber::default();
        assert_eq!(parts(&mut c, 1, 0.05, sample), 0);
        if forget_fill {
            c.filled();
        }
        assert_eq!(parts(&mut c, 9, 0.6, sample), 0);
        // The workload changes: down to 0.3, far below the full cache's parts.
        let restarts = parts(&mut c, 2, 0.3, sample);
        assert_eq!(
            restarts,
            usize::from(forget_fill),
            "forget_fill {forget_fill}"
        );
    }
}

#[test]
fn the_window_target_is_the_share_of_the_total_rounded_down() {
    for (share, total, target) in [
        (0.01, 100, 1),
        (0.01, 99, 0),
        (0.8, 500, 400),
        (0.3, 1000, 300),
        (0.0, 1 << 40, 0),
        (0.8, 1 << 40, (1u64 << 40) / 5 * 4),
    ] {
        let c = Climber::with_share(share);
        assert_eq!(c.window_target(total), target, "{share} of {total}");
        assert_eq!(
            c.window_target(total),
            (total as f64 * share) as u64,
            "{share} of {total}"
        );
    }
}
