//! Trace families kept apart from `phase_eval`'s usual set (`phase_eval --extra`): shapes
//! the policy was not tuned on, to check that a change generalizes rather than fits the
//! usual table. Other skews and universe sizes of Zipf; requests with recency but no
//! lasting popularity; a loop mixed with Zipf; and sized traces whose sizes follow
//! popularity (popular keys the heaviest, or the lightest), take two values, span a narrow
//! range, or belong to a loop.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::traces::{key_of, loop_over, zipf, Trace, Zipf};

/// Key space of this module's keys (the usual traces use spaces below 32).
const SPACE: u64 = 40;

/// Every held-out trace at `capacity` entries, `requests` long, drawn with seed offset `k`.
pub fn extra(requests: usize, capacity: usize, k: u64) -> Vec<Trace> {
    let mut traces = Vec::new();
    for (alpha, universe) in [
        (0.5, 10),
        (0.7, 2),
        (0.7, 100),
        (0.9, 3),
        (1.1, 10),
        (1.1, 100),
    ] {
        let mut t = zipf(alpha, capacity * universe, requests, capacity, 101 + k);
        t.name = format!("zipf-{alpha:.1}-u{universe}x");
        traces.push(t);
    }
    for (p, depth) in [(0.7, 0.3), (0.8, 1.0), (0.9, 2.0)] {
        traces.push(recency(p, depth, requests, capacity, 7 + k));
    }
    traces.push(interleaved(
        "mix-loop1.5-zipf0.8",
        &loop_over(1.5, requests, capacity),
        &zipf(0.8, capacity * 10, requests, capacity, 55 + k),
        3 + k,
    ));
    traces.push(interleaved(
        "mix-loop0.5-zipf0.6",
        &loop_over(0.5, requests, capacity),
        &zipf(0.6, capacity * 20, requests, capacity, 56 + k),
        4 + k,
    ));
    // Each sized family draws its own requests.
    traces.push(sized_by_rank(
        SizeOrder::LightPopular,
        requests,
        capacity,
        78 + k,
    ));
    traces.push(sized_by_rank(
        SizeOrder::HeavyPopular,
        requests,
        capacity,
        79 + k,
    ));
    let base = zipf(0.9, capacity * 10, requests, capacity, 77 + k);
    traces.push(resized(&base, "sized-bimodal", |key| {
        if splitmix(key ^ k).is_multiple_of(10) {
            512 << 10
        } else {
            4 << 10
        }
    }));
    let base = zipf(0.9, capacity * 10, requests, capacity, 80 + k);
    traces.push(resized(&base, "sized-narrow", |key| {
        log_uniform(splitmix(key ^ k), 8 << 10, 32 << 10)
    }));
    let looped = loop_over(1.1, requests, capacity);
    traces.push(resized(&looped, "sized-loop1.1", |key| {
        log_uniform(splitmix(key ^ k), 1 << 10, 1 << 20)
    }));
    traces
}

/// Requests with recency but no lasting popularity (an LRU-friendly workload): with
/// probability `p` a request repeats the key at an exponentially distributed depth (mean
/// `depth` times the capacity) of the stack of keys ordered by last request, else it asks
/// for a key never requested before (as it does when the depth drawn lies beyond every key
/// seen so far).
pub fn recency(p: f64, depth: f64, requests: usize, capacity: usize, seed: u64) -> Trace {
    let mut rng = StdRng::seed_from_u64(seed);
    let mean = depth * capacity as f64;
    let mut stack: Vec<u64> = Vec::new();
    let mut fresh = 0;
    let keys = (0..requests)
        .map(|_| {
            let key = if !stack.is_empty() && rng.gen::<f64>() < p {
                let d = (-(1.0 - rng.gen::<f64>()).ln() * mean) as usize;
                if d < stack.len() {
                    stack.remove(stack.len() - 1 - d)
                } else {
                    // Deeper than every key seen: a first request.
                    fresh += 1;
                    key_of(SPACE, fresh)
                }
            } else {
                fresh += 1;
                key_of(SPACE, fresh)
            };
            stack.push(key);
            key
        })
        .collect();
    named(
        format!("recency-p{p:.1}-d{depth:.1}"),
        capacity,
        keys,
        Vec::new(),
    )
}

/// `a` and `b` interleaved at random, half each, under `name`, as long as `a`.
fn interleaved(name: &str, a: &Trace, b: &Trace, seed: u64) -> Trace {
    assert!(
        b.keys.len() >= a.keys.len(),
        "{name}: the second trace runs out"
    );
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut from_a, mut from_b) = (a.keys.iter(), b.keys.iter());
    let keys = (0..a.keys.len())
        .map_while(|_| {
            if rng.gen::<bool>() {
                from_a.next()
            } else {
                from_b.next()
            }
            .copied()
        })
        .collect();
    named(name.into(), a.capacity, keys, Vec::new())
}

/// Which keys of [`sized_by_rank`] are the heavy ones.
#[derive(Clone, Copy, Debug)]
pub enum SizeOrder {
    /// The most popular keys are the lightest (1 KiB), the rarest the heaviest (1 MiB).
    LightPopular,
    /// The most popular keys are the heaviest.
    HeavyPopular,
}

/// Zipf 0.9 over ten times `capacity` keys, bounded in bytes, with sizes log-uniform in
/// 1 KiB..1 MiB by popularity rank as `order` says.
pub fn sized_by_rank(order: SizeOrder, requests: usize, capacity: usize, seed: u64) -> Trace {
    let mut rng = StdRng::seed_from_u64(seed);
    let universe = capacity * 10;
    let dist = Zipf::new(universe, 0.9);
    let (mut keys, mut sizes) = (Vec::with_capacity(requests), Vec::with_capacity(requests));
    for _ in 0..requests {
        let rank = dist.sample(&mut rng);
        let u = rank as f64 / universe as f64;
        let u = match order {
            SizeOrder::LightPopular => u,
            SizeOrder::HeavyPopular => 1.0 - u,
        };
        keys.push(key_of(SPACE + 1, rank));
        sizes.push((1024.0 * 1024f64.powf(u)) as u32);
    }
    let name = match order {
        SizeOrder::LightPopular => "sized-lightpopular",
        SizeOrder::HeavyPopular => "sized-heavypopular",
    };
    named(name.into(), capacity, keys, sizes)
}

/// `base`'s requests, renamed, with each key's size given by `size_of`.
fn resized(base: &Trace, name: &str, size_of: impl Fn(u64) -> u32) -> Trace {
    let sizes = base.keys.iter().map(|&k| size_of(k)).collect();
    named(name.into(), base.capacity, base.keys.clone(), sizes)
}

fn named(name: String, capacity: usize, keys: Vec<u64>, sizes: Vec<u32>) -> Trace {
    Trace {
        name,
        about: "held-out family (phase_eval --extra)",
        capacity,
        keys,
        sizes,
    }
}

/// A well-mixed 64-bit hash of `x` (splitmix64's finalizer).
fn splitmix(x: u64) -> u64 {
    let x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A log-uniform size in `lo..hi` from the hash `h`.
fn log_uniform(h: u64, lo: u32, hi: u32) -> u32 {
    let u = (h >> 11) as f64 / (1u64 << 53) as f64;
    (f64::from(lo) * (f64::from(hi) / f64::from(lo)).powf(u)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_has_its_requests_and_sizes() {
        let traces = extra(5_000, 50, 0);
        assert_eq!(traces.len(), 16);
        for t in &traces {
            assert_eq!(t.keys.len(), 5_000, "{}", t.name);
            assert_eq!(t.capacity, 50, "{}", t.name);
            if t.sized() {
                assert_eq!(t.sizes.len(), t.keys.len(), "{}", t.name);
                assert!(t.byte_budget() > 0, "{}", t.name);
            }
        }
        let names: std::collections::HashSet<_> = traces.iter().map(|t| &t.name).collect();
        assert_eq!(names.len(), traces.len(), "names are distinct");
    }

    #[test]
    fn heavy_popular_keys_are_the_heaviest() {
        let t = sized_by_rank(SizeOrder::HeavyPopular, 20_000, 100, 1);
        let mut count = std::collections::HashMap::new();
        for (k, s) in t.keys.iter().zip(&t.sizes) {
            count.entry(*k).or_insert((0, *s)).0 += 1;
        }
        let top = count.values().max_by_key(|(n, _)| *n).unwrap();
        assert!(top.1 > 900 << 10, "the most requested key weighs {}", top.1);
        let light = sized_by_rank(SizeOrder::LightPopular, 20_000, 100, 1);
        let mut count = std::collections::HashMap::new();
        for (k, s) in light.keys.iter().zip(&light.sizes) {
            count.entry(*k).or_insert((0, *s)).0 += 1;
        }
        let top = count.values().max_by_key(|(n, _)| *n).unwrap();
        assert!(top.1 < 2 << 10, "the most requested key weighs {}", top.1);
    }

    #[test]
    fn recency_repeats_recent_keys() {
        let t = recency(0.9, 0.5, 20_000, 100, 1);
        let distinct: std::collections::HashSet<_> = t.keys.iter().collect();
        // About one request in ten is new.
        assert!(
            (1_500..2_600).contains(&distinct.len()),
            "{}",
            distinct.len()
        );
    }
}
