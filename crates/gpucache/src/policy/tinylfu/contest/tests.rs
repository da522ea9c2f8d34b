//! The contest's rules once weights vary: hits per byte, room taken from probation and
//! protected, dominated victims, and what a rejected key's return is worth.

use super::super::tests::probation_of;
use super::super::*;
use super::{dominated, outweighed, LONG_VICTIM_SCAN, TIES_COUNT_FROM, VICTIM_SKIP_LEN};

/// [`probation_of`] with the front (id 0) estimated two accesses more than the rest, so that
/// lighter-per-access entries behind it are outweighed.
fn probation_behind_a_popular_front(weights: &[u64]) -> TinyLfu {
    let mut p = probation_of(weights);
    p.sketch.increment(1000, 2);
    p
}

/// A policy with `n` entries of weight 10 inserted (ids `0..n`, key hashes `1000 + id`),
/// its sketch sized and every key counted once, as at the first eviction.
fn inserted(n: EntryId) -> TinyLfu {
    let mut p = TinyLfu::default();
    for id in 0..n {
        p.insert(id, 1000 + u64::from(id), 10);
    }
    p.grow_sketch(n as usize, None);
    p
}

#[test]
fn heavy_candidate_needs_more_hits_per_byte() {
    let mut p = inserted(100);
    assert_eq!(p.evict(), Some(0));
    // A key seen 3 times weighing 100x a victim seen once: not worth it.
    p.sketch.increment(4242, 2);
    p.insert(0, 4242, 1000);
    p.insert(100, 4343, 10);
    // Window overflow made 99 and then 0 candidates; only the newest waits for a contest,
    // 99 joins probation.
    assert_eq!(p.evict(), Some(0), "the heavy candidate is refused");
    assert_eq!(p.meta[99].place, Place::Probation);
    // The same key at the victims' weight would have won.
    let mut q = inserted(100);
    q.evict();
    q.sketch.increment(4242, 2);
    q.insert(0, 4242, 10);
    q.insert(100, 4343, 10);
    assert_eq!(q.evict(), Some(1));
    assert_eq!(q.meta[0].place, Place::Probation);
}

/// A policy of 100 light entries (weight 10) and a candidate of weight 100 estimated
/// `candidate` accesses, the victims counted `victims` times each; `light_seen` says whether
/// the light class's misses were of seen keys (the heavy class's always are) over half a
/// period each, `None` for no evidence. Returns whether the candidate was admitted.
fn heavy_contest(candidate: u64, victims: u64, light_seen: Option<bool>) -> bool {
    let mut p = inserted(100);
    assert_eq!(p.evict(), Some(0));
    for id in 1..100u64 {
        p.sketch.increment(1000 + id, victims - 1);
    }
    if let Some(seen) = light_seen {
        for _ in 0..weight_classes::PERIOD / 2 {
            p.classes.note_miss(10, seen);
            p.classes.note_miss(100, true);
        }
    }
    p.sketch.increment(4242, candidate);
    p.insert(0, 4242, 100);
    p.insert(100, 4343, 10);
    let admitted = p.evict() != Some(0);
    p.validate(&|_| true);
    if admitted {
        assert_eq!(p.meta[0].place, Place::Probation);
    }
    admitted
}

#[test]
fn light_residents_count_less_when_their_class_seldom_returns() {
    // A key seen twice weighing 10x the victims, each seen once: refused while nothing is
    // known of the classes or the classes' misses are seen alike, admitted once the light
    // class's misses prove to be first requests while the heavy class's are returns (the
    // light victims, with little evidence of their own, then count a quarter).
    assert!(!heavy_contest(1, 1, None));
    assert!(!heavy_contest(1, 1, Some(true)));
    assert!(heavy_contest(1, 1, Some(false)));
}

#[test]
fn victims_estimated_four_or_more_count_whole_whatever_their_class() {
    // Ten victims seen 8 times against a candidate at the sketch's ceiling (15): their own
    // counts speak, and the light class's factor (a quarter here) does not lower them.
    assert!(
        !heavy_contest(15, 8, None),
        "ten victims seen 8 times outweigh one seen 15"
    );
    assert!(!heavy_contest(15, 8, Some(false)));
    // The threshold from both sides: victims seen 4 times count whole against a candidate
    // seen 8 times, victims seen 3 times a quarter against one seen 5.
    assert!(
        !heavy_contest(7, 4, Some(false)),
        "victims at 4 count whole"
    );
    assert!(!heavy_contest(4, 3, None));
    assert!(
        heavy_contest(4, 3, Some(false)),
        "victims at 3 count a quarter"
    );
}

#[test]
fn a_full_cache_of_varied_weights_learns_its_classes_from_its_misses() {
    // Light keys never requested again and heavy keys that keep coming back, requested
    // through the policy as an owner does (a resident key touched, a missing one inserted,
    // evictions until the budget holds): the light class's misses are never of seen keys,
    // the heavy class's mostly are, and the light class's factor falls to the floor.
    let mut p = TinyLfu::default();
    let mut ids = std::collections::HashMap::new();
    let mut keys = std::collections::HashMap::new();
    let mut next_light = 1_000_000u64;
    for i in 0..6 * u64::from(weight_classes::PERIOD) {
        let (key, weight) = if i % 2 == 0 {
            next_light += 1;
            (next_light, 10)
        } else {
            ((i / 2) % 200, 1_000)
        };
        if let Some(&id) = ids.get(&key) {
            p.touch(id);
            continue;
        }
        let id = (0..).find(|id| !keys.contains_key(id)).expect("a free id");
        p.insert(id, key, weight);
        ids.insert(key, id);
        keys.insert(id, key);
        while p.total_weight() > 20_000 {
            let victim = p.evict().expect("a victim");
            let key = keys.remove(&victim).expect("a tracked victim");
            ids.remove(&key);
        }
    }
    p.validate(&|id| keys.contains_key(&id));
    assert!(p.classes.heap_bytes() > 0);
    assert_eq!(p.classes.factor(10), p.classes.factor(1) / 4, "the floor");
}

#[test]
fn a_heavy_rejected_keys_return_raises_the_bias_by_its_worth() {
    // A hundred entries, one of them twice the others' weight (a mean of 10.1 among the
    // entries other than the newcomer); a rejected key (noted by hand, after a displaced
    // one) comes back weighing `weight`. Returns how far its return raised the bias.
    let key = 4242;
    let raised = |weight| {
        let mut p = inserted(100);
        // A returning key is looked up only once the cache is full.
        p.end_fill_window();
        p.full = true;
        p.update(99, 20);
        p.regret.note(1000, Loser::Displaced);
        p.regret.note(key, Loser::Rejected);
        let before = p.regret.bias();
        p.insert(100, key, weight);
        p.regret.bias() - before
    };
    let light = raised(10);
    assert!(light > 0.0);
    // Lighter than the mean: whole. Forty times the weight: 10.1 / 400 of it.
    let heavy = raised(400);
    assert!(
        (heavy / light - 10.1 / 400.0).abs() < 1e-3,
        "{heavy} against {light}"
    );
}

#[test]
fn a_candidate_heavier_than_all_main_is_refused() {
    // Ten light entries fill the cache, all in probation; a key requested often but heavier
    // than all of main cannot be given the room: refused, whatever its count.
    let mut p = inserted(10);
    assert_eq!(p.evict(), Some(0));
    p.sketch.increment(4242, 14);
    p.insert(0, 4242, 1000);
    assert_eq!(p.evict(), Some(0), "refused at the door");
    p.validate(&|id| id < 10);
}

#[test]
fn a_candidate_heavier_than_probation_takes_its_room_from_protected() {
    // Probation holds 90 units, protected 100; a popular candidate of 150 wins against the
    // whole probation and protected's oldest, and joins protected's back: the evictions
    // that make its room take every other entry first, never the candidate itself (at
    // probation's back it would have been the next victim once probation was gone).
    let mut p = inserted(20);
    assert_eq!(p.evict(), Some(0));
    for id in 10..20 {
        p.relocate(id, Place::Protected);
    }
    p.sketch.increment(4242, 14);
    p.insert(0, 4242, 150);
    assert_eq!(p.evict(), Some(1), "admitted: probation's oldest leaves");
    assert_eq!(p.meta[0].place, Place::Protected);
    for _ in 0..14 {
        assert_ne!(p.evict(), Some(0));
    }
    assert_eq!(p.meta[0].place, Place::Protected);
    p.validate(&|id| id == 0 || id >= 16);
}

#[test]
fn equal_weights_never_trigger_the_size_rule() {
    for w in [1u64, 7, 4096, 1 << 20] {
        for f in 0..20u64 {
            for fo in 0..20u64 {
                assert!(!dominated(w, f, w, fo), "{w} {f} {fo}");
                assert!(!outweighed(w, f, w, fo), "{w} {f} {fo}");
            }
        }
    }
    assert!(dominated(2, 3, 1, 3));
    assert!(!dominated(2, 4, 1, 3));
    assert!(!dominated(1, 0, 2, 3));
    // Outweighed needs strictly fewer accesses: a tie is no evidence below TIES_COUNT_FROM,
    // where the sketch has seen either key only a few times.
    assert!(outweighed(2, 2, 1, 3));
    assert!(!outweighed(2, 3, 1, 3));
    assert!(!outweighed(1, 0, 2, 3));
    assert!(outweighed(2, 15, 1, 15));
    assert!(outweighed(2, TIES_COUNT_FROM, 1, TIES_COUNT_FROM));
    assert!(!outweighed(2, TIES_COUNT_FROM - 1, 1, TIES_COUNT_FROM - 1));
}

#[test]
fn tied_popular_entries_send_the_heavier_first() {
    // Every entry requested as often, and often (a frame loop's resources, whose counts
    // the sketch's halvings keep below its ceiling): the heaviest one the walk weighs goes
    // before the front. The keys were counted once (`probation_of`).
    let mut p = probation_of(&[10, 40, 20]);
    for id in 0..3 {
        p.sketch.increment(1000 + id, TIES_COUNT_FROM - 1);
    }
    assert_eq!(p.heavier_victim(0), 1);
    // Tied at fewer: the queue's order stands.
    let mut p = probation_of(&[10, 40, 20]);
    for id in 0..3 {
        p.sketch.increment(1000 + id, TIES_COUNT_FROM - 2);
    }
    assert_eq!(p.heavier_victim(0), 0);
}

#[test]
fn a_heavier_entry_goes_before_the_front_only_if_requested_less() {
    let mut p = probation_of(&[10, 5, 30, 20, 40, 10]);
    // 2 and 4 are heavier than every entry before them, but estimated as often as the
    // front (0): no evidence that they are requested less, so the queue's order stands.
    assert_eq!(p.heavier_victim(0), 0);
    // The front requested more often: the heaviest of the entries it outweighs goes.
    p.sketch.increment(1000, 2);
    assert_eq!(p.heavier_victim(0), 4);
    // Requested more often than the front, 4 is not outweighed; 2 is.
    p.sketch.increment(1004, 3);
    assert_eq!(p.heavier_victim(0), 2);
    // Only entries heavier than every one weighed before them are weighed: with 2 not
    // outweighed either, 3 (lighter than 2) is not weighed, and the front stays.
    p.sketch.increment(1002, 3);
    assert_eq!(p.heavier_victim(0), 0);
    // Pending hits protect an entry until it is settled, and it is not weighed: 3 is now
    // heavier than every entry weighed before it.
    p.touch(2);
    assert_eq!(p.heavier_victim(0), 3);
    p.touch(3);
    assert_eq!(p.heavier_victim(0), 0);
    assert_eq!(p.evict(), Some(0), "nothing outweighed is left: the front");
    p.validate(&|id| id != 0);
}

#[test]
fn a_long_probation_walks_only_behind_a_light_front() {
    // Past VICTIM_SKIP_LEN entries, a front at least as heavy as the average is evicted
    // without a walk; a lighter one still finds the heavier entry behind it.
    let mut weights = vec![10; VICTIM_SKIP_LEN + 1];
    weights[0] = 20;
    weights[5] = 40;
    let p = probation_behind_a_popular_front(&weights);
    assert_eq!(p.heavier_victim(0), 0, "front above the average: no walk");
    weights[0] = 5;
    let p = probation_behind_a_popular_front(&weights);
    assert_eq!(p.heavier_victim(0), 5, "front below the average: walked");
    // The walk stops after LONG_VICTIM_SCAN entries there: the heaviest within it goes (the
    // first of the equals), not the heavier one just beyond.
    weights[5] = 10;
    weights[LONG_VICTIM_SCAN] = 40;
    let p = probation_behind_a_popular_front(&weights);
    assert_eq!(p.heavier_victim(0), 1, "beyond the walk");
    weights[LONG_VICTIM_SCAN - 1] = 30;
    let p = probation_behind_a_popular_front(&weights);
    assert_eq!(p.heavier_victim(0), LONG_VICTIM_SCAN as EntryId - 1);
    // A short probation always walks, and further.
    let p = probation_behind_a_popular_front(&[20, 10, 40]);
    assert_eq!(p.heavier_victim(0), 2);
    let mut weights = vec![10; LONG_VICTIM_SCAN + 1];
    weights[0] = 5;
    weights[LONG_VICTIM_SCAN] = 40;
    let p = probation_behind_a_popular_front(&weights);
    assert_eq!(p.heavier_victim(0), LONG_VICTIM_SCAN as EntryId);
}

#[test]
fn equal_weights_always_evict_the_front() {
    let mut p = probation_of(&[8; 20]);
    assert!(!p.weights_vary);
    assert_eq!(p.heavier_victim(0), 0);
    let evicted: Vec<_> = (0..5).map(|_| p.evict()).collect();
    assert_eq!(evicted, [Some(0), Some(1), Some(2), Some(3), Some(4)]);
    p.validate(&|id| id >= 5);
    // One different weight turns the rule on; equals still never replace the front.
    let mut q = probation_of(&[8, 8, 9, 8]);
    assert!(q.weights_vary);
    q.sketch.increment(1000, 2);
    q.sketch.increment(1001, 1);
    assert_eq!(q.heavier_victim(0), 2);
    assert_eq!(q.heavier_victim(1), 2);
    assert_eq!(q.heavier_victim(3), 3, "nothing behind the last entry");
}
