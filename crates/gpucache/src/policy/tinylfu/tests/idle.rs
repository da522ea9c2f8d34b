//! Dead favourites (`super::super::idle`): the idle test, the sweep over protected, and the
//! second chance of an entry whose hits the sweep folded.

use super::*;

/// Key hashes as [`replay`] makes them.
fn hash_of(key: u64) -> u64 {
    key.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// The entries `p` tracks whose key hash `dead` holds.
fn tracked_among(p: &TinyLfu, dead: &std::collections::HashSet<u64>) -> usize {
    PLACES
        .iter()
        .map(|&place| {
            let mut n = 0;
            p.queues[place as usize].for_each(&p.links, |id| {
                n += usize::from(dead.contains(&p.meta[id as usize].key_hash));
            });
            n
        })
        .sum()
}

#[test]
fn an_entry_is_dead_once_idle_for_several_of_its_requests() {
    let mut idle = Idle::default();
    // Nothing is dead before the first probe: the clock stands and no rate is known.
    assert!(!idle.dead(15, 0, 1000));
    // 10 hits a miss, and one sketch increment a hit.
    idle.probe(160, 16, 160, 1000);
    for _ in 0..100 {
        idle.miss();
    }
    assert_eq!(idle.now(), 1000);
    // A count of 15 gained over a sample of 1,000 increments is a request every 50 hits at
    // 3/4 of the peak, so 8 requests take 400 hits.
    assert!(!idle.dead(15, 601, 1000), "idle 399 hits");
    assert!(idle.dead(15, 600, 1000), "idle 400 hits");
    // A count of 1: 6,000 hits.
    assert!(!idle.dead(1, 0, 1000));
    // A count of 0 is never dead, however long idle.
    assert!(!idle.dead(0, 0, 1000));
    // Two increments a hit (as many misses as hits): each hit's worth of time brings twice
    // the requests, so half the idle spell will do.
    let mut idle = Idle::default();
    idle.probe(160, 160, 320, 1000);
    for _ in 0..200 {
        idle.miss();
    }
    assert!(idle.dead(15, 0, 1000) && !idle.dead(15, 1, 1000));
}

#[test]
fn dead_favourites_of_a_drift_leave_soon() {
    // Zipf 0.9 over 5,000 ranks sliding by one key every 70 requests through 700 entries
    // (the keys below the slide's offset are never requested again). Each key dies at its
    // most popular, and before the sweep it stayed until the sketch had halved its count
    // away: about a fifth of the cache was dead at any time.
    let mut x = 7919;
    let keys = drifting(zipf_alpha_ranks(&mut x, 200_000, 5000, 0.9), 70);
    let mut p = TinyLfu::default();
    let (mut dead_held, mut looks) = (0, 0);
    replay_watched(&mut p, &keys, 700, &mut |i, p| {
        if i % 10_000 == 9_999 && i >= 50_000 {
            let offset = i as u64 / 70;
            let dead = (offset.saturating_sub(1000)..offset).map(hash_of).collect();
            dead_held += tracked_among(p, &dead);
            looks += 1;
        }
    });
    let mean = dead_held / looks;
    // 152 without the sweep and the idle test, 116 with them; the sweep took 2,488 entries
    // for dead in 73,318 misses.
    assert!(mean < 135, "{mean} dead entries held on average");
    assert!(p.idle.demoted * 100 > p.misses, "{} swept", p.idle.demoted);
}

#[test]
fn settled_zipf_keeps_its_live_entries() {
    // On a Zipf that does not move every entry is alive: the sweep takes hardly any for
    // dead, and at any time hardly a protected entry without hits since the sweep last
    // folded them looks dead to the idle test.
    for alpha in [0.8, 1.0] {
        let mut x = 104_729;
        let keys = zipf_alpha_ranks(&mut x, 200_000, 10_000, alpha);
        let mut p = TinyLfu::default();
        let (mut flagged, mut protected) = (0, 0);
        replay_watched(&mut p, &keys, 1000, &mut |i, p| {
            if i % 5_000 == 4_999 {
                let sample = p.sketch.sample();
                p.queues[Place::Protected as usize].for_each(&p.links, |id| {
                    let m = p.meta[id as usize];
                    let settled = p.pending[id as usize].load(Ordering::Relaxed) == 0;
                    flagged += usize::from(settled && p.idle.dead(m.seen_count, m.seen_at, sample));
                    protected += 1;
                });
            }
        });
        // 72 of 91,244 misses at Zipf 0.8, 31 of 50,695 at 1.0.
        assert!(
            p.idle.demoted * 500 < p.misses,
            "Zipf {alpha}: the sweep took {} entries for dead in {} misses",
            p.idle.demoted,
            p.misses
        );
        assert!(
            flagged * 200 < protected,
            "Zipf {alpha}: {flagged} of {protected} protected entries looked dead"
        );
    }
}

#[test]
fn an_entry_whose_hits_the_sweep_folded_keeps_its_second_chance() {
    // Ids 0-3 promoted to protected; the sweep folds id 0's hit (leaving it referenced).
    let mut p = probation_of(&[1, 1, 1, 1, 1, 1]);
    for id in 0..4 {
        p.touch(id);
    }
    for _ in 0..4 {
        p.settle_front(Place::Probation);
    }
    assert_eq!(p.queues[Place::Protected as usize].len(), 4);
    p.touch(0);
    p.idle.sweep_at = Some(0);
    p.sweep_protected();
    assert!(p.meta[0].referenced && p.pending[0].load(Ordering::Relaxed) == 0);
    // At protected's front id 0 goes round again rather than down.
    assert_eq!(p.settle_front(Place::Protected), Some(1));
    assert!(!p.meta[0].referenced);
    assert_eq!(
        p.queues[Place::Protected as usize].to_vec(&p.links),
        [1, 2, 3, 0]
    );
    // Exposed to probation, a referenced entry is promoted back at its front.
    p.touch(1);
    p.idle.sweep_at = Some(1);
    p.sweep_protected();
    p.expose_protected();
    assert!(p.meta[1].referenced);
    assert_eq!(p.settle_front(Place::Probation), Some(2));
    assert_eq!(p.meta[1].place, Place::Protected);
    p.validate(&|id| id < 6);
}

#[test]
fn the_sweep_moves_past_entries_that_leave_protected() {
    // The sweep's next entry leaves protected: the sweep goes on from the one after it.
    let mut p = probation_of(&[1, 1, 1, 1]);
    for id in 0..3 {
        p.touch(id);
    }
    for _ in 0..3 {
        p.settle_front(Place::Probation);
    }
    p.idle.sweep_at = Some(1);
    p.demote(1);
    assert_eq!(p.idle.sweep_at, Some(2));
    p.remove(2);
    assert_eq!(p.idle.sweep_at, None);
    p.validate(&|id| id != 2);
}

#[test]
fn a_dead_entry_loses_its_mark_and_leaves_from_probations_front() {
    // All three entries promoted, their hits folded at once; the sweep then folds id 0's
    // new hit, marking it. Once every entry has been idle long enough to be dead, the sweep
    // demotes them: id 0 without its mark, so probation's front offers it as the next
    // victim (with the mark it was promoted straight back to protected).
    let mut p = probation_of(&[1, 1, 1]);
    for id in 0..3 {
        p.touch(id);
    }
    assert_eq!(p.settle_front(Place::Probation), None, "all promoted");
    p.touch(0);
    p.idle.sweep_at = Some(0);
    p.sweep_protected();
    assert!(p.meta[0].referenced);
    let sample = p.sketch.sample();
    p.idle.probe(160, 16, p.sketch.increments() + 160, sample);
    let m = p.meta[0];
    let mut misses = 0;
    while !p.idle.dead(m.seen_count, m.seen_at, sample) {
        p.idle.miss();
        misses += 1;
        assert!(misses < 1_000_000, "never dead");
    }
    p.idle.sweep_at = Some(0);
    p.sweep_protected();
    let m = p.meta[0];
    assert!(
        m.place == Place::Probation && m.stale && !m.referenced,
        "{m:?}"
    );
    assert_eq!(p.settle_front(Place::Probation), Some(0));
    p.validate(&|id| id < 3);
}
