//! The hit-ratio targets, checked on a few small traces (hit counts are deterministic, so
//! this is a test, not a timing); `scripts/hit-ratio` checks the full set.
//!
//! gpucache's store seeds its key hasher at random, which moves its hits by a few tenths of
//! a percent from run to run (the scan trace's ratio to the best peer spread 0.990-0.994
//! over 20 runs, with an occasional 0.9897 under the 0.99 bound): the default policy is
//! replayed here with fixed seeds, and their mean is what is checked. moka and quick_cache
//! replay these traces the same way every time.

use gpucache::PolicyKind;
use gpucache_bench::belady::optimal_hits;
use gpucache_bench::replay::{replay, replay_seeded, Contender};
use gpucache_bench::traces::{loop_over, scan_with_zipf, zipf};

/// The hasher seeds the default policy is replayed with.
const SEEDS: [u64; 4] = [1, 2, 3, 4];

#[test]
fn default_policy_keeps_up_with_the_best_peer() {
    for trace in [
        zipf(0.9, 4_000, 40_000, 400, 1),
        scan_with_zipf(1.0, 4_000, 40_000, 400, 3),
        loop_over(2.0, 40_000, 400),
    ] {
        let best = optimal_hits(&trace.keys, trace.capacity);
        let runs: Vec<u64> = SEEDS
            .iter()
            .map(|&seed| replay_seeded(&trace, PolicyKind::default(), seed).hits)
            .collect();
        assert!(
            runs.iter().all(|&hits| hits <= best),
            "{}: nobody beats Belady",
            trace.name
        );
        let ours = runs.iter().sum::<u64>() / runs.len() as u64;
        let peer = [Contender::Moka, Contender::QuickCache]
            .map(|c| replay(&trace, c).hits)
            .into_iter()
            .max()
            .unwrap_or(0);
        assert!(
            ours as f64 >= 0.99 * peer as f64,
            "{}: default {ours} vs best peer {peer}",
            trace.name
        );
    }
}

#[test]
fn loops_keep_most_of_belady_and_lru_thrashes() {
    let trace = loop_over(1.05, 40_000, 400);
    let best = optimal_hits(&trace.keys, trace.capacity) as f64;
    let lru = replay(&trace, Contender::Gpucache(PolicyKind::Lru)).hits as f64;
    let s3 = replay(&trace, Contender::Gpucache(PolicyKind::S3Fifo)).hits as f64;
    let ours = replay(&trace, Contender::Gpucache(PolicyKind::default())).hits as f64;
    assert!(lru / best < 0.05, "LRU thrashes ({lru})");
    assert!(s3 / best >= 0.5, "S3-FIFO at {:.2} of Belady", s3 / best);
    assert!(
        ours / best >= 0.95,
        "default at {:.2} of Belady",
        ours / best
    );
}
