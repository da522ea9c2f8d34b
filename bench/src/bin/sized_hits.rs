//! The sized rows of `hit_ratio` in more detail: Zipf traces over values of 1 KiB..1 MiB
//! (skews 0.7, 0.8 and 0.9), bounded in bytes, at the given capacities. W-TinyLFU runs
//! with fixed hash seeds (the average over them is printed, so a change can be compared
//! without the store's random seed), next to moka and quick_cache; each cache's mean
//! number of resident entries and its mean use of the byte budget are printed too, which
//! shows how a policy trades hits (many small entries) against bytes hit.
//!
//! Usage: `sized_hits [CAPACITIES] [SEEDS]`, e.g. `sized_hits 100,300,1000,5000 2`.

use gpucache::PolicyKind;
use gpucache_bench::replay::{replay_observed, Contender, Step};
use gpucache_bench::traces::{sized_zipf, Trace};

/// One replay: requests and bytes hit, mean resident entries, mean share of the budget used.
#[derive(Clone, Copy, Default)]
struct Run {
    hits: f64,
    bytes: f64,
    entries: f64,
    used: f64,
}

impl Run {
    fn add(&mut self, hit: bool, size: u64, entries: u64, weight: u64, budget: u64) {
        if hit {
            self.hits += 1.0;
            self.bytes += size as f64;
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

/// One replay of `contender` (gpucache's hasher seeded with `seed`), its occupancy sampled
/// after every request.
fn observed(trace: &Trace, contender: Contender, seed: Option<u64>) -> Run {
    let budget = trace.byte_budget();
    let mut run = Run::default();
    replay_observed(
        trace,
        contender,
        seed,
        Some(&mut |step: Step| run.add(step.hit, step.size, step.entries, step.weight, budget)),
    );
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
                let r = observed(&trace, Contender::Gpucache(PolicyKind::TinyLfu), Some(s));
                w.hits += r.hits / seeds as f64;
                w.bytes += r.bytes / seeds as f64;
                w.entries += r.entries / seeds as f64;
                w.used += r.used / seeds as f64;
            }
            let (m, q) = (
                observed(&trace, Contender::Moka, None),
                observed(&trace, Contender::QuickCache, None),
            );
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
