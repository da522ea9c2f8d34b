//! The hit-ratio targets, checked on smaller traces than the benchmark's (hit counts are
//! deterministic, so this is a test, not a timing).

use gpucache::PolicyKind;
use gpucache_bench::belady::optimal_hits;
use gpucache_bench::traces::{replay_hits as hits, standard};

#[test]
fn s3_fifo_resists_the_loop_and_keeps_up_on_zipf() {
    for trace in standard(40_000, 400) {
        let n = trace.keys.len() as f64;
        let best = optimal_hits(&trace.keys, trace.capacity) as f64;
        let lru = hits(&trace, PolicyKind::Lru) as f64;
        let s3 = hits(&trace, PolicyKind::S3Fifo) as f64;
        assert!(
            lru <= best && s3 <= best,
            "{}: nobody beats Belady",
            trace.name
        );
        if trace.name.starts_with("loop") {
            assert!(lru / best < 0.05, "{}: LRU thrashes ({lru})", trace.name);
            assert!(
                s3 / best >= 0.5,
                "{}: S3-FIFO at {:.2} of Belady",
                trace.name,
                s3 / best
            );
        }
        if trace.name.starts_with("zipf") {
            assert!(
                s3 / n + 0.02 >= lru / n,
                "{}: S3-FIFO {s3} vs LRU {lru}",
                trace.name
            );
        }
    }
}
