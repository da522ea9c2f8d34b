//! Belady's optimum for unit-size entries: on a miss with a full cache, evict the entry
//! whose next request is farthest away (possibly the new one, i.e. do not admit it).

use std::collections::{BTreeSet, HashMap};

/// The largest number of hits any policy can score on `keys` with `capacity` entries.
pub fn optimal_hits(keys: &[u64], capacity: usize) -> u64 {
    if capacity == 0 {
        return 0;
    }
    // next_use[i]: the index of the next request for keys[i], or usize::MAX - i (distinct,
    // and farther than any real index).
    let mut next_use = vec![0usize; keys.len()];
    let mut seen: HashMap<u64, usize> = HashMap::new();
    for (i, &key) in keys.iter().enumerate().rev() {
        next_use[i] = seen.get(&key).copied().unwrap_or(usize::MAX - i);
        seen.insert(key, i);
    }
    // The cache as (next use, key), farthest last; and key -> its next use.
    let mut by_next: BTreeSet<(usize, u64)> = BTreeSet::new();
    let mut cached: HashMap<u64, usize> = HashMap::with_capacity(capacity + 1);
    let mut hits = 0;
    for (i, &key) in keys.iter().enumerate() {
        if let Some(old) = cached.insert(key, next_use[i]) {
            hits += 1;
            by_next.remove(&(old, key));
        }
        by_next.insert((next_use[i], key));
        if by_next.len() > capacity {
            let (_, victim) = by_next.pop_last().expect("over capacity means non-empty");
            cached.remove(&victim);
        }
    }
    hits
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn textbook_example() {
        // 7 0 1 2 0 3 0 4 2 3 0 3 2 with 3 frames: OPT has 9 faults of 13 (hits = 4) when it
        // must admit; not admitting can only help.
        let keys = [7, 0, 1, 2, 0, 3, 0, 4, 2, 3, 0, 3, 2];
        assert!(optimal_hits(&keys, 3) >= 4);
        assert_eq!(optimal_hits(&keys, 0), 0);
        assert_eq!(optimal_hits(&[1, 1, 1], 1), 2);
    }

    #[test]
    fn loop_optimum_keeps_most_of_the_cache() {
        let keys: Vec<u64> = (0..10_500).map(|i| i % 105).collect();
        let hits = optimal_hits(&keys, 100);
        // Each pass after the first can hit about 100 of 105 keys, minus churn.
        assert!(hits > 8_500, "{hits}");
    }
}
