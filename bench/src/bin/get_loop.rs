//! A tight single-threaded loop of cache hits, for profilers (`perf record`) and for a quick
//! side-by-side ratio against quick_cache (rounds alternate between the two).
//!
//! Usage: `get_loop [rounds] [key bytes]`.

use std::hint::black_box;
use std::time::Instant;

use bytes::Bytes;

const ENTRIES: usize = 4096;
const PASSES: usize = 200;

fn keys(len: usize) -> Vec<Vec<u8>> {
    (0..ENTRIES as u32)
        .map(|i| {
            let mut k = vec![0u8; len];
            k[..4].copy_from_slice(&i.wrapping_mul(2_654_435_761).to_le_bytes());
            k
        })
        .collect()
}

fn time_ns_per_get(order: &[usize], mut get: impl FnMut(usize) -> bool) -> f64 {
    let start = Instant::now();
    let mut hits = 0usize;
    for _ in 0..PASSES {
        for &i in order {
            hits += usize::from(get(i));
        }
    }
    assert_eq!(hits, PASSES * order.len(), "every get hits");
    start.elapsed().as_nanos() as f64 / (PASSES * order.len()) as f64
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map_or(5, |s| s.parse().expect("rounds"));
    let key_len: usize = args.next().map_or(20, |s| s.parse().expect("key bytes"));
    let keys = keys(key_len);
    let value = Bytes::from(vec![1u8; 4096]);
    let store = gpucache::StoreBuilder::new()
        .max_bytes(256 << 20)
        .build()
        .expect("store");
    let quick = quick_cache::sync::Cache::<Vec<u8>, Bytes>::new(ENTRIES * 2);
    for k in &keys {
        store.insert(k, value.clone()).expect("fits");
        quick.insert(k.clone(), value.clone());
    }
    let order: Vec<usize> = (0..ENTRIES).map(|i| (i * 7919) % ENTRIES).collect();
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        ours.push(time_ns_per_get(&order, |i| {
            black_box(store.get(&keys[i])).is_some()
        }));
        theirs.push(time_ns_per_get(&order, |i| {
            black_box(quick.get(keys[i].as_slice())).is_some()
        }));
    }
    ours.sort_by(f64::total_cmp);
    theirs.sort_by(f64::total_cmp);
    let (a, b) = (ours[rounds / 2], theirs[rounds / 2]);
    println!(
        "median ns/get: gpucache {a:.1}, quick_cache {b:.1}, ratio {:.2}",
        a / b
    );
}
