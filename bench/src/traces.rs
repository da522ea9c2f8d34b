//! Synthetic request traces for hit-ratio comparisons. Keys are `u64`; every trace is
//! reproducible from its seed.

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
    /// Value size of each request's key in bytes, or empty when every entry counts as one
    /// (then the cache is bounded in entries; otherwise in bytes, see [`Trace::byte_budget`]).
    pub sizes: Vec<u32>,
}

impl Trace {
    fn unit(name: String, about: &'static str, capacity: usize, keys: Vec<u64>) -> Self {
        Self {
            name,
            about,
            capacity,
            keys,
            sizes: Vec::new(),
        }
    }

    /// Whether entries have sizes (the cache is bounded by bytes).
    pub fn sized(&self) -> bool {
        !self.sizes.is_empty()
    }

    /// For a sized trace: `capacity` entries of the mean charge (value + key + gpucache's
    /// per-entry overhead) over the distinct keys.
    pub fn byte_budget(&self) -> u64 {
        let mut seen = std::collections::HashMap::new();
        for (k, s) in self.keys.iter().zip(&self.sizes) {
            seen.insert(*k, u64::from(*s));
        }
        if seen.is_empty() {
            return 0;
        }
        let total: u64 = seen.values().map(|&s| charge(s)).sum();
        total / seen.len() as u64 * self.capacity as u64
    }
}

/// What one entry of `size` value bytes costs in every cache of the comparison: the value,
/// the 8-byte key and gpucache's per-entry overhead (peers are charged the same).
pub fn charge(size: u64) -> u64 {
    size + 8 + gpucache::ENTRY_OVERHEAD
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
pub(crate) fn key_of(space: u64, rank: usize) -> u64 {
    (rank as u64 ^ (space << 48)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Zipf-distributed requests over `universe` keys.
pub fn zipf(alpha: f64, universe: usize, requests: usize, capacity: usize, seed: u64) -> Trace {
    let mut rng = StdRng::seed_from_u64(seed);
    let dist = Zipf::new(universe, alpha);
    Trace::unit(
        format!("zipf-{alpha:.1}"),
        "independent requests, Zipf popularity",
        capacity,
        (0..requests)
            .map(|_| key_of(1, dist.sample(&mut rng)))
            .collect(),
    )
}

/// A loop over `factor × capacity` keys, in the same order every pass: seed 002's "just over
/// budget frame after frame".
pub fn loop_over(factor: f64, requests: usize, capacity: usize) -> Trace {
    let len = (capacity as f64 * factor).round() as usize;
    Trace::unit(
        format!("loop-{factor:.2}x"),
        "the same keys in the same order, more than fit",
        capacity,
        (0..requests).map(|i| key_of(2, i % len)).collect(),
    )
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
    Trace::unit(
        format!("scan+zipf-{alpha:.1}"),
        "Zipf with scans of 2x capacity one-shot keys",
        capacity,
        keys,
    )
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
    Trace::unit(
        "pages-share-programs".into(),
        "Zipf over 600 sites; every page: 24 shared + 4..30 own programs",
        capacity,
        keys,
    )
}

/// Zipf requests whose popular set is replaced halfway (a new level, another application):
/// a policy must forget the first phase's favourites.
pub fn phase_change(alpha: f64, requests: usize, capacity: usize, seed: u64) -> Trace {
    let mut rng = StdRng::seed_from_u64(seed);
    let dist = Zipf::new(capacity * 10, alpha);
    let keys = (0..requests)
        .map(|i| {
            let space = if i < requests / 2 { 7 } else { 8 };
            key_of(space, dist.sample(&mut rng))
        })
        .collect();
    Trace::unit(
        format!("phase-change-{alpha:.1}"),
        "Zipf; halfway, a disjoint set of keys becomes popular",
        capacity,
        keys,
    )
}

/// Zipf requests whose popular set switches back and forth between two disjoint sets every
/// `requests / 4` (a user alternating between two applications or levels): a policy must
/// forget the first set's favourites and take them back when they return.
pub fn phase_cycle(alpha: f64, requests: usize, capacity: usize, seed: u64) -> Trace {
    let mut rng = StdRng::seed_from_u64(seed);
    let dist = Zipf::new(capacity * 10, alpha);
    let quarter = (requests / 4).max(1);
    let keys = (0..requests)
        .map(|i| {
            let space = if (i / quarter).is_multiple_of(2) {
                12
            } else {
                13
            };
            key_of(space, dist.sample(&mut rng))
        })
        .collect();
    Trace::unit(
        format!("phase-cycle-{alpha:.1}"),
        "Zipf; the popular set switches between two disjoint sets every quarter",
        capacity,
        keys,
    )
}

/// Zipf requests of which a share `wonders` are keys requested once and never again.
pub fn one_hit_wonders(
    alpha: f64,
    wonders: f64,
    requests: usize,
    capacity: usize,
    seed: u64,
) -> Trace {
    let mut rng = StdRng::seed_from_u64(seed);
    let dist = Zipf::new(capacity * 10, alpha);
    let mut next = 0usize;
    let keys = (0..requests)
        .map(|_| {
            if rng.gen::<f64>() < wonders {
                next += 1;
                key_of(9, next)
            } else {
                key_of(10, dist.sample(&mut rng))
            }
        })
        .collect();
    Trace::unit(
        format!("zipf-{alpha:.1}+{:.0}%-once", wonders * 100.0),
        "Zipf mixed with keys requested only once",
        capacity,
        keys,
    )
}

/// Zipf requests over a popular set that slides: every `capacity / 10` requests the ranks
/// shift by one key, so recently introduced keys are the popular ones (recency pays).
pub fn drifting(alpha: f64, requests: usize, capacity: usize, seed: u64) -> Trace {
    let mut rng = StdRng::seed_from_u64(seed);
    let dist = Zipf::new(capacity * 10, alpha);
    let every = (capacity / 10).max(1);
    let keys = (0..requests)
        .map(|i| key_of(11, i / every + dist.sample(&mut rng)))
        .collect();
    Trace::unit(
        format!("drift-{alpha:.1}"),
        "Zipf whose popular keys slide by one every capacity/10 requests",
        capacity,
        keys,
    )
}

/// Zipf requests over keys with program-binary sizes, log-uniform 1 KiB..1 MiB and
/// independent of popularity; the cache is bounded in bytes.
pub fn sized_zipf(alpha: f64, requests: usize, capacity: usize, seed: u64) -> Trace {
    sized_zipf_drawn(alpha, requests, capacity, seed, 0)
}

/// [`sized_zipf`] with another draw of the sizes: `sizes` salts the size of each key, so
/// that the same popularity ranks get other sizes (0 gives [`sized_zipf`]'s). The ranks'
/// sizes are otherwise the same for every `seed`, which only redraws the requests.
pub fn sized_zipf_drawn(
    alpha: f64,
    requests: usize,
    capacity: usize,
    seed: u64,
    sizes: u64,
) -> Trace {
    let mut trace = zipf(alpha, capacity * 10, requests, capacity, seed);
    trace.name = format!("sized-zipf-{alpha:.1}");
    trace.about = "Zipf, values 1 KiB..1 MiB (log-uniform), bounded in bytes";
    trace.sizes = trace.keys.iter().map(|&k| size_of_key(k, sizes)).collect();
    trace
}

/// A deterministic log-uniform size in 1 KiB..1 MiB for `key`, drawn by `salt`.
fn size_of_key(key: u64, salt: u64) -> u32 {
    let key = key ^ salt.wrapping_mul(0xA24B_AED4_963E_E407);
    let u = (key.wrapping_mul(0xD6E8_FEB8_6659_FD93) >> 11) as f64 / (1u64 << 53) as f64;
    (1024.0 * 1024f64.powf(u)) as u32
}

/// A trace renamed with its capacity, for the rows that vary it.
fn at(mut trace: Trace) -> Trace {
    trace.name = format!("{}@{}", trace.name, trace.capacity);
    trace
}

/// The standard set of traces of the hit-ratio benchmark: `capacity` entries unless a
/// trace's name says otherwise (`@N`).
pub fn standard(requests: usize, capacity: usize) -> Vec<Trace> {
    let small = (capacity / 10).max(10);
    let large = capacity * 10;
    vec![
        zipf(0.6, capacity * 10, requests, capacity, 11),
        zipf(0.8, capacity * 10, requests, capacity, 1),
        zipf(1.0, capacity * 10, requests, capacity, 2),
        zipf(1.2, capacity * 10, requests, capacity, 12),
        at(zipf(0.9, small * 10, requests, small, 13)),
        at(zipf(0.9, large * 10, requests, large, 14)),
        loop_over(1.02, requests, capacity),
        loop_over(1.05, requests, capacity),
        loop_over(1.2, requests, capacity),
        loop_over(2.0, requests, capacity),
        loop_over(3.0, requests, capacity),
        at(loop_over(1.05, requests, small)),
        scan_with_zipf(1.0, capacity * 10, requests, capacity, 3),
        pages_share_programs(requests, capacity, 4),
        phase_change(1.0, requests, capacity, 15),
        phase_cycle(0.8, requests, capacity, 19),
        one_hit_wonders(0.9, 0.3, requests, capacity, 16),
        drifting(0.9, requests, capacity, 17),
        at(drifting(0.9, requests, small, 20)),
        sized_zipf(0.9, requests, capacity, 18),
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
    fn sized_traces_have_a_byte_budget() {
        let t = sized_zipf(0.9, 2000, 50, 1);
        assert_eq!(t.sizes.len(), t.keys.len());
        assert!(t.sizes.iter().all(|&s| (1024..=1 << 20).contains(&s)));
        assert!(t.byte_budget() > 50 * 1024);
        assert_eq!(zipf(0.9, 100, 10, 10, 1).byte_budget(), 0);
    }

    #[test]
    fn phase_change_switches_key_sets() {
        let t = phase_change(1.0, 1000, 10, 1);
        let first: std::collections::HashSet<_> = t.keys[..500].iter().collect();
        assert!(t.keys[500..].iter().all(|k| !first.contains(k)));
    }

    #[test]
    fn phase_cycle_returns_to_the_first_set() {
        let t = phase_cycle(0.8, 4000, 10, 1);
        let first: std::collections::HashSet<_> = t.keys[..1000].iter().collect();
        assert!(t.keys[1000..2000].iter().all(|k| !first.contains(k)));
        assert!(t.keys[2000..3000]
            .iter()
            .all(|k| first.contains(k) || !t.keys[1000..2000].contains(k)));
        assert!(t.keys[2000..3000].iter().any(|k| first.contains(k)));
    }

    #[test]
    fn loop_repeats_exactly() {
        let t = loop_over(1.05, 5000, 100);
        assert_eq!(t.keys[0], t.keys[105]);
        assert_ne!(t.keys[0], t.keys[100]);
    }
}
