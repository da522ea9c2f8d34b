//! The cache's own hot paths, with a disk tier under it: gets that hit memory, and inserts
//! (into memory and onto the write-behind queue). For profilers, and for side-by-side runs
//! of two builds of the library (it uses only API that every version has).
//!
//! Usage: `cache_loop [rounds]`. Prints the median ns per get and per insert.

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::Bytes;

const ENTRIES: usize = 4096;
const PASSES: usize = 100;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .map_or(7, |s| s.parse().expect("rounds"));
    let dir = tempfile::tempdir().expect("temporary directory");
    let cache = gpucache::Cache::builder()
        .directory(dir.path())
        .max_memory_bytes(256 << 20)
        .preload(false)
        .open()
        .expect("cache");
    let keys: Vec<Vec<u8>> = (0..ENTRIES as u32)
        .map(|i| {
            let mut k = vec![0u8; 20];
            k[..4].copy_from_slice(&i.wrapping_mul(2_654_435_761).to_le_bytes());
            k
        })
        .collect();
    let value = Bytes::from(vec![7u8; 4096]);
    for k in &keys {
        cache.insert(k, value.clone()).expect("insert");
    }
    cache.flush().expect("flush");
    let order: Vec<usize> = (0..ENTRIES).map(|i| (i * 7919) % ENTRIES).collect();
    let (mut gets, mut inserts) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let start = Instant::now();
        let mut hits = 0;
        for _ in 0..PASSES {
            for &i in &order {
                hits += usize::from(black_box(cache.get(&keys[i])).is_some());
            }
        }
        assert_eq!(hits, PASSES * ENTRIES, "every get hits");
        gets.push(start.elapsed().as_nanos() as f64 / (PASSES * ENTRIES) as f64);

        // One pass of overwrites at a time, flushed between passes (not timed) so that the
        // write-behind queue never fills and drops.
        let mut spent = Duration::ZERO;
        for _ in 0..4 {
            let start = Instant::now();
            for &i in &order {
                cache.insert(&keys[i], value.clone()).expect("insert");
            }
            spent += start.elapsed();
            cache.flush().expect("flush");
        }
        inserts.push(spent.as_nanos() as f64 / (4 * ENTRIES) as f64);
    }
    println!(
        "median ns/get {:.1}, ns/insert {:.1}",
        median(gets),
        median(inserts)
    );
}
