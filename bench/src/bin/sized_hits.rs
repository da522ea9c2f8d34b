//! The sized rows of `hit_ratio` in more detail: Zipf traces over values of 1 KiB..1 MiB
//! (skews 0.7, 0.8 and 0.9), bounded in bytes, at the given capacities. W-TinyLFU runs
//! with fixed hash seeds (the average over them is printed, so a change can be compared
//! without the store's random seed), next to moka and quick_cache; each cache's mean
//! number of resident entries and its mean use of the byte budget are printed too, which
//! shows how a policy trades hits (many small entries) against bytes hit.
//!
//! Usage: `sized_hits [CAPACITIES] [SEEDS]`, e.g. `sized_hits 100,300,1000,5000 2`.

use std::sync::Arc;

use bytes::Bytes;
use gpucache::{PolicyKind, StoreBuilder, Xxh3KeyHasher};
use gpucache_bench::traces::{charge, sized_zipf, Trace};

/// Zero bytes that values are cut from.
static ZEROS: [u8; (1 << 20) + 1] = [0; (1 << 20) + 1];

/// One replay: requests and bytes hit, mean resident entries, mean share of the budget used.
#[derive(Clone, Copy, Default)]
struct Run {
    hits: f64,
    bytes: f64,
    entries: f64,
    used: f64,
}

impl Run {
    fn add(&mut self, hit: bool, size: u32, entries: u64, weight: u64, budget: u64) {
        if hit {
            self.hits += 1.0;
            self.bytes += f64::from(size);
        }
        self.entries += entries as f64;
        self.used += weight as f64 / budget as f64;
    }

    /// Turns sums into shares of the trace's requests and bytes, and means.
    fn finish(mut self, trace: &Trace) -> Self {
        let n = trace.keys.len() as f64;
        let bytes: f64 = trace.sizes.iter().map(|&s| f64::from(s)).sum();
        self.hits /= n;
        self.bytes /= bytes;
        self.entries /= n;
        self.used /= n;
        self
    }
}

fn ours(trace: &Trace, seed: u64) -> Run {
    let budget = trace.byte_budget();
    let store = StoreBuilder::new()
        .shards(1)
        .policy(PolicyKind::TinyLfu)
        .max_bytes(budget)
        .hasher(Arc::new(Xxh3KeyHasher::with_seed(seed)))
        .build()
        .expect("valid store settings");
    let mut run = Run::default();
    for (&key, &size) in trace.keys.iter().zip(&trace.sizes) {
        let key = key.to_le_bytes();
        let hit = store.get(&key).is_some();
        if !hit {
            store
                .insert(&key, Bytes::from_static(&ZEROS[..size as usize]))
                .expect("value fits");
        }
        let st = store.stats();
        run.add(hit, size, st.entries, st.bytes, budget);
    }
    run.finish(trace)
}

fn moka(trace: &Trace) -> Run {
    let budget = trace.byte_budget();
    let cache: moka::sync::Cache<u64, u32> = moka::sync::Cache::builder()
        .max_capacity(budget)
        .weigher(|_, &size: &u32| u32::try_from(charge(u64::from(size))).unwrap_or(u32::MAX))
        .build();
    let mut run = Run::default();
    for (&key, &size) in trace.keys.iter().zip(&trace.sizes) {
        let hit = cache.get(&key).is_some();
        if !hit {
            cache.insert(key, size);
            cache.run_pending_tasks();
        }
        run.add(
            hit,
            size,
            cache.entry_count(),
            cache.weighted_size(),
            budget,
        );
    }
    run.finish(trace)
}

#[derive(Clone)]
struct ByCharge;

impl quick_cache::Weighter<u64, u32> for ByCharge {
    fn weight(&self, _key: &u64, size: &u32) -> u64 {
        charge(u64::from(*size))
    }
}

fn quick_cache(trace: &Trace) -> Run {
    let budget = trace.byte_budget();
    let mut cache = quick_cache::unsync::Cache::with_weighter(trace.capacity, budget, ByCharge);
    let mut run = Run::default();
    for (&key, &size) in trace.keys.iter().zip(&trace.sizes) {
        let hit = cache.get(&key).is_some();
        if !hit {
            cache.insert(key, size);
        }
        run.add(hit, size, cache.len() as u64, cache.weight(), budget);
    }
    run.finish(trace)
}

fn cell(r: &Run) -> String {
    format!(
        "{:.1}% / {:.1}% ({:.0} entries, {:.3} of the budget)",
        100.0 * r.hits,
        100.0 * r.bytes,
        r.entries,
        r.used
    )
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let capacities: Vec<usize> = args
        .get(1)
        .map_or("100,300,1000,5000", String::as_str)
        .split(',')
        .map(|c| c.parse().expect("a capacity"))
        .collect();
    let seeds: u64 = args.get(2).map_or(2, |s| s.parse().expect("a seed count"));
    println!("| trace | w-tinylfu (hits / bytes) | moka | quick_cache | hits / best peer | bytes / best peer |");
    println!("|---|---|---|---|---:|---:|");
    let (mut log_hits, mut log_bytes, mut rows) = (0.0, 0.0, 0);
    for &capacity in &capacities {
        for (alpha, seed) in [(0.7, 5), (0.8, 7), (0.9, 18)] {
            let trace = sized_zipf(alpha, 200_000, capacity, seed);
            let mut w = Run::default();
            for s in 1..=seeds {
                let r = ours(&trace, s);
                w.hits += r.hits / seeds as f64;
                w.bytes += r.bytes / seeds as f64;
                w.entries += r.entries / seeds as f64;
                w.used += r.used / seeds as f64;
            }
            let (m, q) = (moka(&trace), quick_cache(&trace));
            let hits = w.hits / m.hits.max(q.hits);
            let bytes = w.bytes / m.bytes.max(q.bytes);
            log_hits += hits.ln();
            log_bytes += bytes.ln();
            rows += 1;
            println!(
                "| sized-zipf-{alpha:.1}@{capacity} | {} | {} | {} | {hits:.3} | {bytes:.3} |",
                cell(&w),
                cell(&m),
                cell(&q)
            );
        }
    }
    println!(
        "\nGeometric mean of the ratio to the best peer over {rows} rows: hits {:.4}, bytes {:.4}",
        (log_hits / f64::from(rows)).exp(),
        (log_bytes / f64::from(rows)).exp()
    );
}
