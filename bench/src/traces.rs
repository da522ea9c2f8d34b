//! Synthetic request traces for hit-ratio comparisons. Keys are `u64`; every trace is
//! reproducible from its seed.

use gpucache::{PolicyKind, StoreBuilder};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A named sequence of key requests, replayed against a cache of `capacity` entries.
#[derive(Clone, Debug)]
pub struct Trace {
    /// Short name, as printed in tables.
    pub name: String,
    /// What the trace models.
    pub about: &'static str,
    /// Cache capacity in entries the trace is meant for.
    pub capacity: usize,
    /// The requests.
    pub keys: Vec<u64>,
}

/// Samples ranks 0..n with probability proportional to 1 / (rank + 1)^alpha.
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    /// A sampler over `n` ranks with exponent `alpha`.
    pub fn new(n: usize, alpha: f64) -> Self {
        let mut cdf = Vec::with_capacity(n);
        let mut total = 0.0;
        for rank in 0..n {
            total += 1.0 / ((rank + 1) as f64).powf(alpha);
            cdf.push(total);
        }
        for c in &mut cdf {
            *c /= total;
        }
        Self { cdf }
    }

    /// One rank.
    pub fn sample(&self, rng: &mut impl Rng) -> usize {
        let u: f64 = rng.gen();
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}

/// Scatters ranks over the key space so that popularity is not ordered by key value.
fn key_of(space: u64, rank: usize) -> u64 {
    (rank as u64 ^ (space << 48)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Zipf-distributed requests over `universe` keys.
pub fn zipf(alpha: f64, universe: usize, requests: usize, capacity: usize, seed: u64) -> Trace {
    let mut rng = StdRng::seed_from_u64(seed);
    let dist = Zipf::new(universe, alpha);
    Trace {
        name: format!("zipf-{alpha:.1}"),
        about: "independent requests, Zipf popularity",
        capacity,
        keys: (0..requests)
            .map(|_| key_of(1, dist.sample(&mut rng)))
            .collect(),
    }
}

/// A loop over `factor × capacity` keys, in the same order every pass: seed 002's "just over
/// budget frame after frame".
pub fn loop_over(factor: f64, requests: usize, capacity: usize) -> Trace {
    let len = (capacity as f64 * factor).round() as usize;
    Trace {
        name: format!("loop-{factor:.2}x"),
        about: "the same keys in the same order, slightly more than fit",
        capacity,
        keys: (0..requests).map(|i| key_of(2, i % len)).collect(),
    }
}

/// Zipf requests interrupted by scans of keys never seen again (a one-off batch job, a
/// level load that compiles everything once).
pub fn scan_with_zipf(
    alpha: f64,
    universe: usize,
    requests: usize,
    capacity: usize,
    seed: u64,
) -> Trace {
    let mut rng = StdRng::seed_from_u64(seed);
    let dist = Zipf::new(universe, alpha);
    let mut keys = Vec::with_capacity(requests);
    let mut next_scan_key = 0usize;
    while keys.len() < requests {
        for _ in 0..capacity * 4 {
            keys.push(key_of(3, dist.sample(&mut rng)));
        }
        for _ in 0..capacity * 2 {
            keys.push(key_of(4, next_scan_key));
            next_scan_key += 1;
        }
    }
    keys.truncate(requests);
    Trace {
        name: format!("scan+zipf-{alpha:.1}"),
        about: "Zipf with scans of 2x capacity one-shot keys",
        capacity,
        keys,
    }
}

/// A browser's GPU process: page loads pick a site by Zipf popularity; every page uses the
/// compositor's shared programs and then its site's own programs.
pub fn pages_share_programs(requests: usize, capacity: usize, seed: u64) -> Trace {
    const SITES: usize = 600;
    const SHARED_PROGRAMS: usize = 24;
    let mut rng = StdRng::seed_from_u64(seed);
    let site_sizes: Vec<usize> = (0..SITES).map(|_| rng.gen_range(4..=30)).collect();
    let dist = Zipf::new(SITES, 0.9);
    let mut keys = Vec::with_capacity(requests);
    while keys.len() < requests {
        let site = dist.sample(&mut rng);
        for program in 0..SHARED_PROGRAMS {
            keys.push(key_of(5, program));
        }
        for program in 0..site_sizes[site] {
            keys.push(key_of(6, site * 64 + program));
        }
    }
    keys.truncate(requests);
    Trace {
        name: "pages-share-programs".into(),
        about: "Zipf over 600 sites; every page: 24 shared + 4..30 own programs",
        capacity,
        keys,
    }
}

/// Replays `trace` through a real one-shard `gpucache::Store` bounded to the trace's
/// capacity in entries, as a cache sees it (a miss stores the key); returns the hits.
pub fn replay_hits(trace: &Trace, policy: PolicyKind) -> u64 {
    let store = StoreBuilder::new()
        .max_entries(trace.capacity as u64)
        .max_bytes(u64::MAX / 2)
        .shards(1)
        .policy(policy)
        .build()
        .expect("valid store settings");
    let mut hits = 0;
    for key in &trace.keys {
        let key = key.to_le_bytes();
        if store.get(&key).is_some() {
            hits += 1;
        } else {
            store.insert(&key, vec![0u8; 1]).expect("value fits");
        }
    }
    hits
}

/// The standard set of traces of the hit-ratio benchmark.
pub fn standard(requests: usize, capacity: usize) -> Vec<Trace> {
    vec![
        zipf(0.8, capacity * 10, requests, capacity, 1),
        zipf(1.0, capacity * 10, requests, capacity, 2),
        loop_over(1.05, requests, capacity),
        scan_with_zipf(1.0, capacity * 10, requests, capacity, 3),
        pages_share_programs(requests, capacity, 4),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_favours_low_ranks() {
        let mut rng = StdRng::seed_from_u64(7);
        let dist = Zipf::new(1000, 1.0);
        let samples: Vec<_> = (0..10_000).map(|_| dist.sample(&mut rng)).collect();
        let top10 = samples.iter().filter(|&&r| r < 10).count();
        assert!(top10 > 3000, "{top10}");
        assert!(samples.iter().all(|&r| r < 1000));
    }

    #[test]
    fn loop_repeats_exactly() {
        let t = loop_over(1.05, 5000, 100);
        assert_eq!(t.keys[0], t.keys[105]);
        assert_ne!(t.keys[0], t.keys[100]);
    }
}
