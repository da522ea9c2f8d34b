//! Admission regret's rules: losers noted and returned, the bias's steps and bounds, the
//! hint about recency and the verdict on stale entries.

use super::*;

fn hash(i: u64) -> u64 {
    (i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

fn sized(keys: usize) -> Regret {
    let mut r = Regret::default();
    r.resize(keys);
    r
}

/// `n` keys from `from` on whose slots differ from `key`'s and from each other's.
fn others(r: &Regret, key: u64, from: u64, n: usize) -> Vec<u64> {
    let mut taken = std::collections::HashSet::from([r.index(hash(key))]);
    (from..)
        .filter(|&k| taken.insert(r.index(hash(k))))
        .take(n)
        .collect()
}

#[test]
fn recency_leans_only_after_a_bias_held_for_long() {
    let mut r = Regret::with_bias(1.0);
    // A rise as brief as the one after a change of working set does not lean.
    (0..200).for_each(|_| r.observe());
    assert_eq!(r.recency(), Recency::Unproven);
    (0..2000).for_each(|_| r.observe());
    assert_eq!(r.recency(), Recency::Leans, "{}", r.settled_bias);
    // A bias at the strict end (Zipf) takes the lean back, slowly.
    let settled = r.settled_bias;
    r = Regret {
        settled_bias: settled,
        ..Regret::with_bias(MIN_BIAS)
    };
    assert_eq!(r.recency(), Recency::Leans);
    (0..1000).for_each(|_| r.observe());
    assert_eq!(r.recency(), Recency::Unproven, "{}", r.settled_bias);
    // A bias of RECENCY_BIAS says recency pays at once.
    assert_eq!(Regret::with_bias(RECENCY_BIAS).recency(), Recency::Pays);
    r.validate();
    // A reset (a change of working set) forgets the lean too.
    r.settled_bias = 1.0;
    r.reset_bias();
    assert_eq!(r.recency(), Recency::Unproven);
}

#[test]
fn a_failed_lift_sets_the_bias_back_to_its_slow_average() {
    let mut r = Regret {
        settled_bias: 0.9,
        ..Regret::with_bias(4.0)
    };
    r.fall_back_to_settled();
    assert_eq!((r.bias(), r.credit()), (0.9, 1));
    assert_eq!(r.recency(), Recency::Leans);
    r.validate();
    // A bias already below its average stays where it is.
    let mut r = Regret {
        settled_bias: 0.9,
        ..Regret::with_bias(-1.0)
    };
    r.fall_back_to_settled();
    assert_eq!((r.bias(), r.credit()), (-1.0, -1));
    r.validate();
}

#[test]
fn returning_rejections_raise_the_bias_and_displacements_lower_it() {
    let mut r = sized(1000);
    // One displacement in ten losers, as after a change of working set.
    for round in 0..2000u64 {
        for i in 0..9 {
            r.note(hash(round * 10 + i), Loser::Rejected);
        }
        r.note(hash(round * 10 + 9), Loser::Displaced);
        // The rejected keys come back; the displaced one does not.
        for i in 0..9 {
            r.returned(hash(round * 10 + i), 1000, || 1.0);
        }
        r.validate();
    }
    assert_eq!(r.recency(), Recency::Pays, "bias {}", r.bias);
    assert_eq!(r.credit(), 8);
    for round in 0..4000u64 {
        r.note(hash(1 << 40 | round), Loser::Displaced);
        r.returned(hash(1 << 40 | round), 1000, || 1.0);
        r.validate();
    }
    assert_eq!(r.bias, MIN_BIAS);
    assert_eq!(r.credit(), -1);
}

#[test]
fn a_cold_regret_weighs_its_first_returns_by_the_share_so_far() {
    // Half the first ten losers displaced: the share is already a half, so a rejected
    // key's return raises the bias by half a step, as a displaced key's lowers it (from
    // a share starting at zero, the first would barely move it and the second by a
    // whole step: a cold cache's bias fell).
    let mut r = sized(1000);
    for i in 0..10 {
        let kind = if i % 2 == 0 {
            Loser::Rejected
        } else {
            Loser::Displaced
        };
        r.note(hash(i), kind);
    }
    assert!(
        (r.displaced_share - 0.5).abs() < 1e-6,
        "{}",
        r.displaced_share
    );
    r.returned(hash(0), 1000, || 1.0);
    assert!((r.bias - STEP / 2.0).abs() < 1e-6, "bias {}", r.bias);
    r.returned(hash(1), 1000, || 1.0);
    assert!(r.bias.abs() < 1e-6, "bias {}", r.bias);
    // Past the first SHARE_CONTESTS contests the share moves by one in that many.
    for i in 10..u64::from(2 * SHARE_CONTESTS) {
        r.note(hash(i), Loser::Rejected);
    }
    let before = r.displaced_share;
    r.note(hash(1 << 42), Loser::Displaced);
    let moved = r.displaced_share - before;
    let expected = (1.0 - before) / SHARE_CONTESTS as f32;
    assert!(
        (moved - expected).abs() < 1e-7,
        "{moved} against {expected}"
    );
    r.validate();
}

#[test]
fn a_heavy_rejected_keys_return_counts_its_worth() {
    // A rejected key four times the mean weight: its return raises the bias a quarter
    // as far as a key of the mean weight's.
    let raised = |worth| {
        let mut r = sized(1000);
        r.note(hash(0), Loser::Displaced);
        r.note(hash(1), Loser::Rejected);
        r.returned(hash(1), 1000, || worth);
        r.bias
    };
    let (whole, quarter) = (raised(1.0), raised(0.25));
    assert!(whole > 0.0);
    assert!(
        (quarter - whole / 4.0).abs() < 1e-6,
        "{quarter} against {whole}"
    );
    // A displaced key's return lowers it by its step (times the share of rejections, a
    // half here) whatever it weighs: its worth is not even asked.
    let mut r = sized(1000);
    r.note(hash(0), Loser::Rejected);
    r.note(hash(1), Loser::Displaced);
    r.returned(hash(1), 1000, || unreachable!("a displaced key's worth"));
    assert!((r.bias + STEP / 2.0).abs() < 1e-6, "bias {}", r.bias);
}

/// Notes `windows` windows of contests in which every tenth loser is displaced,
/// alternately stale and not; of each kind, `stale_back` and `fresh_back` percent return
/// at once, spread evenly (the n-th loser of a kind returns when n * back / 100 passes a
/// whole number). Returns the regret.
fn returning(windows: u32, stale_back: u64, fresh_back: u64) -> Regret {
    let mut r = sized(1000);
    for i in 0..u64::from(windows * RETURNS_WINDOW) {
        let (kind, back) = match i % 20 {
            9 => (Loser::StaleDisplaced, stale_back),
            19 => (Loser::Displaced, fresh_back),
            _ => (Loser::Rejected, 0),
        };
        r.note(hash(i), kind);
        let n = i / 20;
        if (n + 1) * back / 100 > n * back / 100 {
            r.returned(hash(i), 1000, || 1.0);
        }
        r.validate();
    }
    r
}

#[test]
fn stale_losers_that_seldom_return_are_taken_for_dead() {
    let verdict = |stale_back, fresh_back| returning(2, stale_back, fresh_back).stale_entries_die();
    // Stale entries displaced return at a tenth of the others' rate: dead.
    assert!(verdict(2, 20));
    // At the same rate, or at half of it: alive.
    assert!(!verdict(20, 20));
    assert!(!verdict(10, 20));
    // None returning of either kind says nothing.
    assert!(!verdict(0, 0));
    // Too few of either kind counted say nothing either, however few stale ones return.
    let at_window_end = |stale_noted, fresh_noted| {
        let mut r = sized(1000);
        r.stale = Returns {
            noted: stale_noted,
            returned: 0,
        };
        r.fresh = Returns {
            noted: fresh_noted,
            returned: fresh_noted / 2,
        };
        r.seq = RETURNS_WINDOW - 1;
        r.note(hash(1 << 40), Loser::Rejected);
        r.stale_entries_die()
    };
    assert!(!at_window_end(MIN_DISPLACED - 1, 400));
    assert!(!at_window_end(400, MIN_DISPLACED - 1));
    assert!(at_window_end(MIN_DISPLACED, MIN_DISPLACED));
    // The verdict is taken at the end of each window of contests only: a workload whose
    // stale entries come back again turns it round at the next window's end, not before.
    let mut r = returning(2, 2, 20);
    assert!(r.stale_entries_die());
    for i in 1..=u64::from(RETURNS_WINDOW) {
        assert!(r.stale_entries_die(), "turned after {i} contests");
        let kind = if i % 2 == 0 {
            Loser::StaleDisplaced
        } else {
            Loser::Displaced
        };
        r.note(hash(1 << 41 | i), kind);
        r.returned(hash(1 << 41 | i), 1000, || 1.0);
    }
    assert!(!r.stale_entries_die());
    r.validate();
    // A restart forgets it.
    let mut r = returning(2, 2, 20);
    r.forget_returns();
    assert!(!r.stale_entries_die());
}

#[test]
fn a_larger_cache_moves_the_bias_less_per_return() {
    // Up to STEP_KEYS tracked keys a return moves the bias by the full step (times the
    // other kind's share, 10 in the 11 contests here); at ten times as many, by a tenth
    // of it.
    let small = -moved_after(4096, 10, STEP_KEYS);
    assert!((small / (STEP * 10.0 / 11.0) - 1.0).abs() < 0.01, "{small}");
    let large = -moved_after(4096, 10, 10 * STEP_KEYS);
    assert!(
        (large / small - 0.1).abs() < 1e-4,
        "{large} against {small}"
    );
}

#[test]
fn balanced_returns_keep_the_bias_near_rest() {
    let mut r = sized(1000);
    // Nine rejections to one displacement; first without returns (the share of
    // displacements settles), then each kind returning at the same rate per loser.
    for round in 0..80_000u64 {
        let kind = if round % 10 == 9 {
            Loser::Displaced
        } else {
            Loser::Rejected
        };
        r.note(hash(round), kind);
        if round >= 40_000 && round % 3 == 0 {
            r.returned(hash(round), 1000, || 1.0);
        }
    }
    assert!(r.bias.abs() < 0.5, "bias {}", r.bias);
    assert_eq!(r.credit(), 0);
}

/// Notes `key` as displaced, then `later` other losers; returns how the bias moved when
/// `key` came back with a horizon of `horizon` contests.
fn moved_after(keys: usize, later: usize, horizon: u64) -> f32 {
    let mut r = sized(keys);
    r.note(hash(0), Loser::Displaced);
    for k in others(&r, 0, 1, later) {
        r.note(hash(k), Loser::Rejected);
    }
    let before = r.bias;
    r.returned(hash(0), horizon, || 1.0);
    r.validate();
    r.bias - before
}

#[test]
fn a_loser_counts_only_within_the_horizon() {
    // Exact ages in a small table.
    assert!(moved_after(1000, 100, 100) < 0.0);
    assert_eq!(moved_after(1000, 101, 100), 0.0);
    // In a large one contests are counted in epochs of 2^shift: still within and beyond.
    let large = 1 << 20;
    assert!(sized(large).shift > 0);
    assert!(moved_after(large, 1000, 100_000) < 0.0);
    assert_eq!(moved_after(large, 5000, 1000), 0.0);
}

#[test]
fn a_loser_counts_once_and_unknown_keys_not_at_all() {
    let mut r = sized(1000);
    r.note(hash(7), Loser::Displaced);
    // Another contest's loser, rejected: displacements are not all the losers.
    let rejected = others(&r, 7, 1 << 31, 1)[0];
    r.note(hash(rejected), Loser::Rejected);
    let stranger = others(&r, 7, 1 << 30, 1)[0];
    r.returned(hash(stranger), 1000, || 1.0);
    assert_eq!(r.bias, 0.0);
    r.returned(hash(7), 1000, || 1.0);
    let after = r.bias;
    assert!(after < 0.0);
    r.returned(hash(7), 1000, || 1.0);
    assert_eq!(r.bias, after);
}

#[test]
fn growing_forgets_the_losers_but_keeps_the_bias() {
    let mut r = sized(100);
    for k in 0..50 {
        r.note(hash(k), Loser::Rejected);
        r.note(hash(1000 + k), Loser::Displaced);
        r.returned(hash(1000 + k), 1000, || 1.0);
    }
    let bias = r.bias;
    assert!(bias < 0.0);
    r.resize(10_000);
    assert_eq!(r.heap_bytes(), 16_384 * 4);
    for k in 0..50 {
        r.returned(hash(k), 1000, || 1.0);
    }
    assert_eq!(r.bias, bias);
    r.validate();
}

#[test]
fn an_empty_table_ignores_everything() {
    let mut r = Regret::default();
    r.note(hash(1), Loser::Rejected);
    r.returned(hash(1), 10, || 1.0);
    assert_eq!(r.bias, 0.0);
    assert_eq!(r.credit(), 0);
    assert_eq!(r.heap_bytes(), 0);
    r.validate();
}
